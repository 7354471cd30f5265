"""The CUDA backend against the CPU implementation.

Every device op is compared with the CPU on the same inputs: bitwise for indices and
for values that are only moved, with a tolerance for values that are computed.
Invariant violations must be found on the device with the same invariant number,
batch, row, position and message as on the CPU.

The tests run on two backends:

- ``gpu``: a real CUDA device; skipped, with the reason, when cuda-python, the driver
  or a device is missing;
- ``emulator``: the CPU emulator of the kernels (:mod:`sparsetensor.cuda._emulator`),
  which runs the same ``.cu`` sources and the same host code with host memory;
  skipped when no C++ compiler is found. It cannot show timing or races.

The shared fixtures and helpers are in cuda_support.py; the interop, constructors from
device arrays, moves, and the tests that need no device are in test_cuda_interop.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._core._tensor import COOTensor, CompressedTensor
from sparsetensor.cuda import _driver
from sparsetensor.cuda._array import DeviceArray

from conftest import random_dense
from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import (ALL_DTYPES, CASE_IDS, CASES, FLOATS, INDEX, TOL, assert_same, assert_values, cast, cuda,
                          make, members, same_error)

# -- moving tensors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_roundtrip(backend, rng, case, dtype):
    for index_dtype in INDEX:
        t = make(rng, case, dtype, index_dtype)
        d = cuda.to_device(t)
        assert d.device == "cuda:0" and d.nnz == t.nnz and d.batch_dim == t.batch_dim
        assert d.dense_dim == t.dense_dim and d.blocksize == t.blocksize
        assert_same(d, t)
        back = cuda.to_host(d)
        assert type(back) is type(t)
        assert_same(d, back)
        assert cuda.to_device(d) is d
        for x, y in zip(members(back), members(t)):
            assert (x == y).all()


def test_blocked_transposed_values_upload(backend, rng):
    t = make(rng, ("bsr", (), (), (2, 3)), np.float32)
    v = t.mT  # bsc with block-transposed (non-contiguous) values
    d = cuda.to_device(v)
    assert_same(d, v)


# -- validation -------------------------------------------------------------------------------------------

def _corrupt(rng, t):
    """A copy of compressed CPU tensor ``t`` with a few random entries broken, unchecked."""
    c = t.compressed_indices().copy()
    p = t.plain_indices().copy()
    for _ in range(int(rng.integers(1, 3))):
        kind = rng.integers(0, 4)
        if kind == 0 and c.size:
            c.flat[rng.integers(0, c.size)] = rng.integers(-2, t.nnz + 3)
        elif kind == 1 and p.size:
            p.flat[rng.integers(0, p.size)] = rng.integers(-2, t.plain_size + 3)
        elif kind == 2 and p.shape[-1] > 1:
            k = rng.integers(0, p.shape[-1] - 1)
            p[..., [k, k + 1]] = p[..., [k + 1, k]]
        elif p.shape[-1] > 1:
            k = rng.integers(1, p.shape[-1])
            p[..., k] = p[..., k - 1]
    return CompressedTensor(c, p, t.values(), t.shape, t.layout, canonical=False)


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "coo"], ids=[i for c, i in zip(CASES, CASE_IDS)
                                                                          if c[0] != "coo"])
def test_validate_matches_cpu(backend, rng, case, index_dtype):
    seen = set()
    for _ in range(25):
        t = make(rng, case, np.float32, index_dtype, blocks=(5, 4))
        cuda.to_device(t).check_invariants()  # valid: no error
        bad = _corrupt(rng, t)
        d = cuda.to_device(bad)
        seen.add(same_error(bad.check_invariants, lambda: d.check_invariants()))
    assert seen - {None}, "no corruption was detected: the test is too weak"


@pytest.mark.parametrize("index_dtype", INDEX)
def test_validate_each_invariant(backend, index_dtype):
    """One batched input per invariant 5.1-5.6 (the batch, row and position must match too)."""
    good_c = [[0, 2, 3], [0, 1, 3]]
    good_p = [[0, 2, 1], [1, 0, 2]]
    cases = {
        "5.1": ([[0, 2, 3], [1, 1, 3]], good_p),
        "5.2": ([[0, 2, 3], [0, 1, 2]], good_p),
        "5.3": ([[0, 2, 3], [0, 4, 3]], good_p),
        "5.4": (good_c, [[0, 2, 1], [1, -1, 2]]),
        "5.5": (good_c, [[0, 3, 1], [1, 0, 2]]),
        "5.6": (good_c, [[0, 2, 1], [1, 2, 0]]),
    }
    for want, (c, p) in cases.items():
        c, p = np.array(c, index_dtype), np.array(p, index_dtype)
        t = CompressedTensor(c, p, np.ones(p.shape), (2, 2, 3), st.sparse_csr)
        assert same_error(t.check_invariants, lambda: cuda.to_device(t).check_invariants()) == want
    ok = CompressedTensor(np.array(good_c, index_dtype), np.array(good_p, index_dtype), np.ones((2, 3)), (2, 2, 3),
                          st.sparse_csr)
    cuda.to_device(ok).check_invariants()


@pytest.mark.parametrize("index_dtype", INDEX)
def test_validate_coo(backend, rng, index_dtype):
    seen = set()
    for _ in range(20):
        t = make(rng, ("coo", (3,), (), None), np.float64, index_dtype)
        idx = t.indices().copy()
        if idx.size:
            for _ in range(int(rng.integers(1, 3))):
                d, k = rng.integers(0, idx.shape[0]), rng.integers(0, idx.shape[1])
                idx[d, k] = rng.choice([-1, t.shape[d], t.shape[d] + 5, idx[d, k]])
        coalesced = bool(rng.integers(0, 2))
        if coalesced and idx.shape[1] > 1 and rng.integers(0, 2):
            idx[:, [0, 1]] = idx[:, [1, 0]]
        bad = COOTensor(idx, t.values(), t.shape, coalesced)
        seen.add(same_error(bad.check_invariants, lambda: cuda.to_device(bad).check_invariants()))
    assert {"C4", "C5"} <= seen


def test_validate_coo_c6(backend):
    bad = COOTensor(np.array([[1, 0]]), np.ones(2), (2,), True)
    assert same_error(bad.check_invariants, lambda: cuda.to_device(bad).check_invariants()) == "C6"


@pytest.mark.parametrize("index_dtype", INDEX)
def test_validate_tile_edges(backend, rng, index_dtype):
    """compressed_plain reads a bit a position marking row starts (row_start_marks), 32 to a word,
    batch after batch. A row that starts exactly at a word's or 2048-block's first position is no
    5.6 however small its first column; a 5.6 exactly there inside a row that crosses it is found;
    empty rows (their start is the next row's) and a long row; two batches (the second's bits
    continue the first's)."""
    T, K = 2048, 6000
    lens = [T - 3, 3, 5000, 0, 0, 0, 900, 1, 0, 2]  # row 2 starts at T, spans 2T and 3T
    c1 = np.concatenate([[0], np.cumsum(lens)])
    p1 = np.concatenate([np.sort(rng.choice(K, n, replace=False)) for n in lens])
    p1[T] = 0  # row 2's first column is below row 1's last: allowed, it starts a row
    c = np.stack([c1, c1]).astype(index_dtype)
    p = np.stack([p1, p1]).astype(index_dtype)
    good = CompressedTensor(c, p, np.ones(p.shape), (2, len(lens), K), st.sparse_csr)
    assert same_error(good.check_invariants, lambda: cuda.to_device(good).check_invariants()) is None
    for pos in (2 * T, 3 * T, T + 1, c1[6]):  # inside row 2 at tile edges, after a row start, row 6's first
        q = p.copy()
        start = pos == c1[6]
        q[1, pos] = 0 if start else q[1, pos - 1]  # a row's first column may be below the previous one
        bad = CompressedTensor(c, q, good.values(), good.shape, st.sparse_csr)
        assert same_error(bad.check_invariants, lambda: cuda.to_device(bad).check_invariants()) == (None if start
                                                                                                else "5.6")


def test_validate_large(backend, rng):
    """Several tiles and many blocks: the first violation must still be the CPU's."""
    n, nnz = 3000, 40000
    rows = np.sort(rng.integers(0, n, nnz))
    cols = rng.integers(0, 5000, nnz)
    order = np.lexsort((cols, rows))
    rows, cols = rows[order], cols[order]
    keep = np.ones(nnz, bool)
    keep[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    rows, cols = rows[keep], cols[keep]
    c = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    p = cols.copy()
    t = CompressedTensor(c, p, np.ones(p.size, np.float32), (n, 5000), st.sparse_csr)
    cuda.to_device(t).check_invariants()
    for pos in (p.size - 1, p.size // 2, 7):
        q = p.copy()
        q[pos] = q[pos - 1] if pos else -1
        q[-1] = 5000  # a later 5.5 must not win over an earlier 5.6
        bad = CompressedTensor(c, q, t.values(), t.shape, st.sparse_csr)
        same_error(bad.check_invariants, lambda: cuda.to_device(bad).check_invariants())


def test_checked_constructors(backend, rng):
    t = make(rng, ("csr", (2,), (), None), np.float32, np.int32)
    dc = cuda.DeviceArray.from_host(t.crow_indices())
    dp = cuda.DeviceArray.from_host(t.col_indices())
    dv = cuda.DeviceArray.from_host(t.values())
    d = cuda.compressed_tensor(dc, dp, dv, t.shape, layout="csr")
    assert d.crow_indices() is dc and d.is_coalesced()   # zero-copy
    assert_same(d, t)
    bad = t.col_indices().copy()
    if bad.size:
        bad[0, 0] = -3
        with pytest.raises(st.InvariantError) as e:
            cuda.compressed_tensor(dc, cuda.DeviceArray.from_host(bad), dv, t.shape, layout="csr")
        assert e.value.invariant == "5.4"
    with pytest.raises(st.InvariantError) as e:
        cuda.compressed_tensor(dc, dp, dv, (2, 9, 9), layout="csr")
    assert e.value.invariant == "3.8"
    coo = make(rng, ("coo", (), (), None))
    dcoo = cuda.coo_tensor(cuda.DeviceArray.from_host(coo.indices()), coo.values(), coo.shape, is_coalesced=True)
    assert_same(dcoo, coo)


# -- coalescing ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("shape,dense", [((7, 5), ()), ((3, 4, 6), ()), ((6, 4), (3,)), ((0, 3), ()), ((9,), ())])
def test_coalesce(backend, rng, shape, dense, dtype, index_dtype):
    S = len(shape)
    n = 0 if 0 in shape else 60
    idx = np.stack([rng.integers(0, max(s, 1), n) for s in shape]).astype(index_dtype).reshape(S, n)
    vals = (rng.standard_normal((n,) + dense) * 4).astype(dtype)
    if dtype.kind == "c":
        vals = vals + 1j * rng.standard_normal(vals.shape).astype(dtype)
    t = st.sparse_coo_tensor(idx, vals, shape + dense, check_invariants=False)
    d = cuda.to_device(t).coalesce()
    assert_same(d, t.coalesce(), exact=False)
    assert d.coalesce() is d


def test_coalesce_sorted_input_shares(backend, rng):
    t = make(rng, ("coo", (2,), (), None))
    u = COOTensor(t.indices(), t.values(), t.shape, False)
    d = cuda.to_device(u)
    c = d.coalesce()
    assert c.is_coalesced() and c.indices() is d.indices() and c.values() is d.values()


def test_coalesce_large_and_bounds(backend, rng):
    n = 25000
    idx = rng.integers(0, 200, (2, n))
    t = st.sparse_coo_tensor(idx, rng.random(n), (200, 200), check_invariants=False)
    assert_same(cuda.to_device(t).coalesce(), t.coalesce(), exact=False)
    idx[1, 777] = 200
    bad = st.sparse_coo_tensor(idx, rng.random(n), (200, 200), check_invariants=False)
    same_error(bad.coalesce, lambda: cuda.to_device(bad).coalesce())


@pytest.mark.parametrize("n, bits, spread", [(1, 3, 8), (3 * 4096 + 123, 20, 5), (2 * 4096, 40, 1 << 40),
                                              (4096 - 1, 16, 1 << 16)])
def test_radix_sort_stable(backend, rng, n, bits, spread):
    """Multi-tile, partial last tile, runs of one digit in a warp and a tile, equal keys: stable order."""
    from sparsetensor.cuda import _primitives as P
    keys = rng.integers(0, min(spread, 1 << bits), n).astype(np.uint64)
    keys[n // 3: n // 2] = keys[0]  # a long run of one key, across warps and tiles
    keys[::7] = (1 << bits) - 1
    dev = _driver.get_device(0)
    sk, perm = P.radix_sort(dev, P.from_host(dev, keys), bits)
    want = np.argsort(keys, kind="stable")
    assert (perm.get() == want).all() and (sk.get() == keys[want]).all()


@pytest.mark.parametrize("n, start, step", [(0, 0, 1), (1, 5, 1), (70000, 0, 1), (1000, 1, 0), (33, -4, 3)])
def test_arange(backend, n, start, step):
    from sparsetensor.cuda import _primitives as P
    got = P.arange(_driver.get_device(0), n, start, step)
    assert got.dtype == np.int64 and got.shape == (n,)
    np.testing.assert_array_equal(got.get(), start + step * np.arange(n))


def test_coalesce_int_values(backend):
    t = st.sparse_coo_tensor([[1, 0]], np.array([3, 4], np.int16), (2,), check_invariants=False)
    assert_same(cuda.to_device(t).coalesce(), t.coalesce())  # no duplicates: values only move
    t = st.sparse_coo_tensor([[1, 1, 0, 1]], np.array([30000, 4000, 1, -7], np.int16), (2,), check_invariants=False)
    assert_same(cuda.to_device(t).coalesce(), t.coalesce())  # duplicates summed, wrapping as NumPy's


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "coo"],
                         ids=[i for c, i in zip(CASES, CASE_IDS) if c[0] != "coo"])
def test_sum_duplicates(backend, rng, case):
    t = make(rng, case, np.float64, np.int64)
    # shuffle each row and duplicate nothing: the CPU and GPU both sort it back
    c, p = t.compressed_indices(), t.plain_indices().copy()
    B = math.prod(t.shape[:t.batch_dim])
    c2, p2 = c.reshape(B, -1), p.reshape(B, -1)
    for b in range(B):
        for r in range(c2.shape[1] - 1):
            seg = p2[b, c2[b, r]:c2[b, r + 1]]
            p2[b, c2[b, r]:c2[b, r + 1]] = seg[::-1]
    u = CompressedTensor(c, p, t.values(), t.shape, t.layout)
    assert_same(cuda.to_device(u).coalesce(), u.coalesce())


def test_sum_duplicates_sums(backend):
    u = CompressedTensor(np.array([0, 3, 4]), np.array([2, 0, 2, 1]), np.array([1.0, 2, 3, 4]), (2, 3), st.sparse_csr)
    assert_same(cuda.to_device(u).coalesce(), u.coalesce())
    bad = CompressedTensor(np.array([0, 3, 4]), np.array([2, 0, 3, 1]), np.array([1.0, 2, 3, 4]), (2, 3),
                           st.sparse_csr)
    same_error(bad.coalesce, lambda: cuda.to_device(bad).coalesce())


# -- conversions --------------------------------------------------------------------------------------------

_TARGETS = {"coo": ["csr", "csc"], "csr": ["coo", "csc"], "csc": ["coo", "csr"], "bsr": ["bsc"], "bsc": ["bsr"]}


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_to_sparse(backend, rng, case, index_dtype):
    for dtype in (np.dtype(np.float32), np.dtype(np.complex128), np.dtype(np.int16)):
        t = make(rng, case, dtype, index_dtype)
        d = cuda.to_device(t)
        for target in _TARGETS[case[0]]:
            if case[0] == "coo" and t.sparse_dim < 2:
                continue
            kw = dict(blocksize=t.blocksize) if case[3] else {}
            ref = t.to_sparse(target, **kw)
            got = d.to_sparse(target, **kw)
            assert_same(got, ref)
            assert_same(got.to_sparse(case[0], **kw), ref.to_sparse(case[0], **kw))  # and back
        assert d.to_sparse(case[0], blocksize=case[3]) is d


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "coo"], ids=lambda c: f"{c[0]}-b{len(c[1])}-d{len(c[2])}")
def test_transpose_without_packed_payload(backend, rng, case, monkeypatch):
    """Where position and row do not fit one 64-bit payload (forced here), the transpose sorts
    positions and gathers the rows: the same result."""
    from sparsetensor._backend.cuda import _convert
    t = make(rng, case)
    want = t.to_sparse(t.layout.transposed, blocksize=t.blocksize) if t.layout.blocked else t.to_sparse(
        t.layout.transposed)
    monkeypatch.setattr(_convert, "_PAYLOAD_BITS", 0)
    assert_same(_convert.transpose_compressed(cuda.to_device(t)), want)


def test_to_sparse_unchecked_input(backend):
    u = CompressedTensor(np.array([0, 3, 4]), np.array([2, 0, 2, 1]), np.array([1.0, 2, 3, 4]), (2, 3), st.sparse_csr)
    assert_same(cuda.to_device(u).to_sparse("csc"), u.to_sparse("csc"))


def test_to_sparse_large(backend, rng):
    t = make(rng, ("csr", (), (), None), np.float32, np.int32, blocks=(300, 400), nnz=30000)
    d = cuda.to_device(t)
    assert_same(d.to_sparse("csc"), t.to_sparse("csc"))
    assert_same(d.to_sparse("coo"), t.to_sparse("coo"))


def test_to_sparse_blocks(backend, rng):
    """Grouping into blocks and expanding them run on the device (tests/cuda/test_cuda_convert.py
    covers every layout and dtype)."""
    t = make(rng, ("csr", (), (), None))
    assert_same(cuda.to_device(t).to_sparse("bsr", blocksize=(2, 1)), t.to_sparse("bsr", blocksize=(2, 1)))
    b = make(rng, ("bsr", (), (), (2, 3)))
    for target in ("csr", "coo"):
        assert_same(cuda.to_device(b).to_sparse(target), b.to_sparse(target))


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "coo"],
                         ids=[i for c, i in zip(CASES, CASE_IDS) if c[0] != "coo"])
def test_mT(backend, rng, case):
    t = make(rng, case, np.complex64)
    d = cuda.to_device(t)
    m = d.mT
    ref = t.mT
    assert m.layout is ref.layout and m.shape == ref.shape
    assert (m.compressed_indices().get() == ref.compressed_indices()).all()
    assert_values(m.values().get(), np.ascontiguousarray(ref.values()), exact=True)
    if not t.layout.blocked:
        assert m.values() is d.values()


# -- dense <-> sparse ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_to_dense(backend, rng, case, dtype):
    t = make(rng, case, dtype, np.int32)
    d = cuda.to_device(t).to_dense()
    assert isinstance(d, DeviceArray) and d.shape == t.shape
    assert_values(d.get(), t.to_dense(), exact=True)


def test_to_dense_unchecked(backend):
    u = CompressedTensor(np.array([0, 3, 4]), np.array([2, 0, 2, 1]), np.array([1.0, 2, 3, 4]), (2, 3), st.sparse_csr)
    assert_values(cuda.to_device(u).to_dense().get(), u.to_dense())
    c = st.sparse_coo_tensor([[1, 0, 1]], [1.0, 2.0, 3.0], (3,), check_invariants=False)
    assert_values(cuda.to_device(c).to_dense().get(), c.to_dense())
    bad = CompressedTensor(np.array([0, 3, 4]), np.array([2, 0, 7, 1]), np.ones(4), (2, 3), st.sparse_csr)
    with pytest.raises(st.InvariantError):  # never a read out of bounds
        cuda.to_device(bad).to_dense()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_from_dense(backend, rng, case, dtype):
    layout, batch, dense, bs = case
    a = random_dense(rng, batch=batch, blocks=(4, 5), blocksize=bs or (1, 1), dense=dense, dtype=dtype)
    if dtype.kind == "f" and not batch:
        a.flat[:3] = [np.nan, -0.0, 0.0]  # NaN counts as nonzero, -0.0 does not
    for index_dtype in INDEX:
        kw = dict(dense_dim=len(dense), index_dtype=index_dtype)
        if layout != "coo":
            kw.update(blocksize=bs, batch_dim=len(batch))
        ref = st.from_dense(a, layout, **kw)
        got = st.from_dense(cuda.DeviceArray.from_host(a), layout, **kw)
        assert_same(got, ref)


def test_from_dense_errors(backend):
    a = np.zeros((2, 3, 4))
    a[0, 0, 0] = 1
    with pytest.raises(ValueError, match="same nnz"):
        st.from_dense(cuda.DeviceArray.from_host(a), "csr", batch_dim=1)
    with pytest.raises(ValueError, match="blocksize"):
        st.from_dense(cuda.DeviceArray.from_host(a[0]), "bsr", blocksize=(2, 2))


# -- pointwise --------------------------------------------------------------------------------------------

_UNARY = ["neg", "abs", "sqrt", "square", "sin", "tan", "tanh", "asin", "atan", "sinh", "asinh", "atanh", "expm1",
          "log1p", "sign", "floor", "ceil", "trunc", "round", "relu", "frac", "deg2rad", "rad2deg", "conj"]
_NUMPY = {"neg": np.negative, "abs": np.abs, "sqrt": np.sqrt, "square": np.square, "sin": np.sin, "tan": np.tan,
          "tanh": np.tanh, "asin": np.arcsin, "atan": np.arctan, "sinh": np.sinh, "asinh": np.arcsinh,
          "atanh": np.arctanh, "expm1": np.expm1, "log1p": np.log1p, "sign": np.sign, "floor": np.floor,
          "ceil": np.ceil, "trunc": np.trunc, "round": np.rint, "relu": lambda x: np.maximum(x, 0),
          "frac": lambda x: x - np.trunc(x), "deg2rad": np.deg2rad, "rad2deg": np.rad2deg, "conj": np.conj}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["coo", "csr", "bsc"])
def test_unary(backend, rng, layout, dtype):
    case = {"coo": ("coo", (), (), None), "csr": ("csr", (2,), (), None), "bsc": ("bsc", (), (2,), (2, 3))}[layout]
    t = make(rng, case, dtype)
    v = np.ascontiguousarray(t.values())
    if dtype.kind == "f":  # keep the values in the domains
        t = t._replace_values((v / 64).astype(dtype))
    d = cuda.to_device(t)
    for op in _UNARY:
        try:
            with np.errstate(all="ignore"):  # values outside a domain: NaN on both, NumPy's warning on the CPU
                ref = getattr(st, op)(t)
        except TypeError:  # the CPU refuses it for this dtype (sign of complex: sgn), and so does the GPU
            with pytest.raises(TypeError, match=op):
                getattr(st, op)(d)
            continue
        got = getattr(st, op)(d)
        assert got.dtype == ref.dtype and got.device == "cuda:0"
        with np.errstate(all="ignore"):
            want = _NUMPY[op](np.ascontiguousarray(t.values()).astype(np.complex128 if dtype.kind == "c" else
                                                                         np.float64))
        if op == "abs" and dtype.kind == "c":
            want = want.real
        assert_values(got.values().get(), cast(want, ref.dtype))
        if op != "conj" or dtype.kind == "c":
            assert (members(got)[0].get() == members(t)[0]).all()


def test_unary_refuses(backend, rng):
    i = make(rng, ("csr", (), (), None), np.int32)
    assert_values(st.sqrt(cuda.to_device(i)).values().get(), np.sqrt(np.asarray(i.values())))  # NumPy's float64
    with pytest.raises(TypeError, match="frac"):  # the CPU's refusal of integers
        st.frac(cuda.to_device(i))
    t = make(rng, ("csr", (), (), None))
    with pytest.raises(ValueError) as cpu:  # not zero-preserving: the CPU's error on every device
        st.cos(t)
    with pytest.raises(ValueError) as gpu:
        st.cos(cuda.to_device(t))
    assert str(gpu.value) == str(cpu.value)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_scalar_ops(backend, rng, dtype):
    from sparsetensor._backend.cuda._pointwise import div_scalar, mul_scalar, pow_scalar

    t = make(rng, ("csr", (), (2,), None), dtype)
    d = cuda.to_device(t)
    v = np.ascontiguousarray(t.values()).astype(np.complex128)
    s = 2.5 - 1j if dtype.kind == "c" else -2.5
    assert_values(mul_scalar(d, s).values().get(), cast(v * s, dtype))
    assert_values(st.mul(d, s).values().get(), cast(v * s, dtype))
    assert_values(div_scalar(d, s).values().get(), cast(v / s, dtype))
    if dtype.kind == "f":
        assert_values(pow_scalar(d, 2).values().get(), cast(v ** 2, dtype))
        with pytest.raises(ValueError, match="zeros"):
            pow_scalar(d, 0)


# -- add / mul ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_add_mul(backend, rng, case, dtype):
    layout, batch, dense, bs = case
    for index_dtype in INDEX:
        a = make(rng, case, dtype, index_dtype, nnz=8)
        b = make(rng, case, dtype, index_dtype, nnz=8 if batch else None)
        da, db = cuda.to_device(a), cuda.to_device(b)
        A, B = a.to_dense().astype(np.complex128), b.to_dense().astype(np.complex128)
        for op, want in (("add", A + 2 * B), ("mul", A * B)):
            try:
                got = st.add(da, db, alpha=2) if op == "add" else st.mul(da, db)
            except ValueError as e:  # batches with different result nnz, as on the CPU
                assert "same nnz" in str(e) and batch
                continue
            h = cuda.to_host(got)
            h.check_invariants()
            assert h.layout is a.layout and h.is_coalesced()
            assert_values(h.to_dense(), cast(want, dtype))


def test_add_mul_mixed_layouts_and_errors(backend, rng):
    """The op converts a second operand of another layout (on the device), as on the CPU; what the
    GPU lacks raises NotImplementedError naming it."""
    a0, b0 = make(rng, ("csr", (), (), None), np.float32), make(rng, ("csc", (), (), None), np.float32)
    a, b = cuda.to_device(a0), cuda.to_device(b0)
    for got, want in ((st.add(a, b), st.add(a0, b0)), (a * b, a0 * b0), (a - b, a0 - b0)):
        assert got.device == "cuda:0" and got.layout is want.layout
        assert_values(got.to_dense().get(), want.to_dense())
    z = np.arange(20, dtype=np.float32).reshape(4, 5)
    assert_values(st.add(a, cuda.DeviceArray.from_host(z)).get(), st.add(a0, z))  # sparse + dense: dense
    with pytest.raises(NotImplementedError, match="add.* on cuda:0"):
        st.add(cuda.DeviceArray.from_host(z), cuda.DeviceArray.from_host(z))  # no sparse operand


def test_module_functions_reach_device_tensors(backend, rng):
    """st.* functions take a device tensor as its methods do (the same kernels), and name what has none."""
    t = make(rng, ("csr", (), (), None), np.float64, np.int32, blocks=(6, 5))
    d = cuda.to_device(t)
    x = rng.standard_normal(t.shape[1])
    assert_values(st.matmul(d, cuda.DeviceArray.from_host(x)).get(), t.to_dense() @ x)
    assert_values(st.sum(d, 1).get(), t.to_dense().sum(1))
    assert_values(st.add(d, d, alpha=2).cpu().to_dense(), 3 * t.to_dense())
    assert_values(st.abs(d).cpu().to_dense(), np.abs(t.to_dense()))
    assert st.transpose(d, 0, 1).layout is st.sparse_csc and st.transpose(d, 0, 1).device == d.device
    assert_values(st.softmax(d.to_sparse_coo(), 1).cpu().to_dense(), st.softmax(t.to_sparse_coo(), 1).to_dense())


# -- products -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout,bs", [("csr", None), ("csc", None), ("bsr", (2, 3)), ("bsc", (3, 2)), ("coo", None)])
def test_matmul(backend, rng, layout, bs, dtype):
    t = make(rng, (layout, (), (), bs), dtype, np.int32, blocks=(6, 5))
    d = cuda.to_device(t)
    A = t.to_dense().astype(np.complex128)
    K = A.shape[1]
    for N in (None, 1, 3, 33, 70, 130):
        x = (rng.standard_normal((K,) if N is None else (K, N)) * 2).astype(dtype)
        y = st.matmul(d, cuda.DeviceArray.from_host(x))
        assert y.shape == ((A.shape[0],) if N is None else (A.shape[0], N))
        assert_values(y.get(), cast(A @ x.astype(np.complex128), dtype))


@pytest.mark.parametrize("layout,bs", [("csr", None), ("bsr", (2, 2))])
def test_matmul_batched(backend, rng, layout, bs):
    t = make(rng, (layout, (3,), (), bs), np.float64, np.int64, blocks=(4, 6))
    d = cuda.to_device(t)
    A = t.to_dense()
    K = A.shape[-1]
    x = rng.standard_normal((3, K, 5))
    assert_values(st.matmul(d, cuda.DeviceArray.from_host(x)).get(), A @ x)
    x2 = rng.standard_normal((K, 1))
    assert_values(st.matmul(d, cuda.DeviceArray.from_host(x2)).get(), A @ x2)


@pytest.mark.parametrize("bs", [(4, 4), (8, 3), (32, 32), (32, 5), (3, 32), (40, 1)], ids=str)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.complex128], ids=str)
def test_matmul_bsr_tiles(backend, rng, bs, dtype):
    """Blocks up to 32 x 32 with >= 16 columns take the shared-memory tiled kernel (a
    partial last tile of columns, rows past Rb idle); others the one-thread-per-output one."""
    t = make(rng, ("bsr", (2,), (), bs), dtype, np.int32, blocks=(3, 4))
    d = cuda.to_device(t)
    A = t.to_dense().astype(np.complex128)
    K = A.shape[-1]
    for N in (16, 45, 200):  # 200: a whole tile of 128 columns (4-byte sums) and a partial one
        for x in (rng.standard_normal((K, N)), rng.standard_normal((2, K, N))):
            x = x.astype(dtype)
            y = st.matmul(d, cuda.DeviceArray.from_host(x)).get()
            assert y.dtype == dtype and y.shape == A.shape[:-1] + (N,)
            # sums of up to 128 products: the rounding error scales with sum |a| |x|
            scale = (np.abs(A) @ np.abs(x.astype(np.complex128))).max()
            np.testing.assert_allclose(y.astype(np.complex128), A @ x.astype(np.complex128), rtol=0,
                                       atol=TOL[np.dtype(dtype)] * scale)


def test_matmul_long_rows(backend, rng):
    """Rows longer than a warp's 32 entries, and SpMV's threads-per-row choice."""
    a = np.zeros((5, 300))
    a[0] = rng.standard_normal(300)
    a[3, ::3] = rng.standard_normal(100)
    d = st.from_dense(cuda.DeviceArray.from_host(a), "csr")
    for N in (None, 1, 40, 300):
        x = rng.standard_normal((300,) if N is None else (300, N))
        assert_values(st.matmul(d, cuda.DeviceArray.from_host(x)).get(), a @ x)


def test_spmv_inf_with_row_tails(backend):
    """Rows of 1 to 11 entries (every tail length of csr_spmv's four-at-a-time loads), among
    0, 6 or 30 rows of 60 (so 2, 8 or 16 threads a row), against x holding inf: an absent tail
    entry must add nothing (0 * inf is NaN)."""
    for extra in (0, 6, 30):
        a = np.zeros((11 + extra, 64))
        for r in range(11):
            a[r, : r + 1] = 1.0 + r
        a[11:, :60] = 0.5
        x = np.full(64, 2.0)
        x[0] = np.inf
        d = st.from_dense(cuda.DeviceArray.from_host(a), "csr")
        y = st.matmul(d, cuda.DeviceArray.from_host(x)).get()
        assert np.isposinf(y).all(), y


@pytest.mark.parametrize("index_dtype", INDEX, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_products_skewed_rows(backend, rng, index_dtype, dtype):
    """Power-law-like rows. SpMV: rows past csr_spmv's long_len (32 here: 2 threads a row); SpMM:
    rows past 512 entries, over one and two groups of 128 columns. An index array's first product
    lists its long rows on the device and sums each in a block (csr_spmv_long_rows,
    csr_spmm_long_rows); from its second on they go in pieces of 256 (SpMV) or 512 (SpMM) entries, a
    warp each (the *_long_part kernels, then csr_long_sum in piece order), by a plan made once.
    Each batch has its own long rows; every row is written once; both ways are deterministic."""
    from sparsetensor._backend.cuda import _blas

    B, M, K = 2, 600, 3000
    a0 = np.zeros((M, K))
    for r in range(M):  # short rows of 0-3 entries
        a0[r, rng.choice(K, int(rng.integers(0, 4)), replace=False)] = rng.standard_normal()
    for r, n in ((3, 2600), (20, 32), (21, 33), (30, 2048), (40, 2049), (50, 512), (51, 513), (M - 1, 715)):
        a0[r] = 0
        a0[r, np.sort(rng.choice(K, n, replace=False))] = rng.standard_normal(n)
    # one nnz a batch (a batched csr tensor's rule); batch 1's long rows are 7 rows further on
    a = np.stack([np.where(a0 != 0, rng.standard_normal(a0.shape), 0) for _ in range(B)])
    a[1] = np.roll(a[1], 7, axis=0)
    t = st.from_dense(a.astype(dtype), "csr", batch_dim=1, index_dtype=index_dtype)
    assert _blas._tpr(t.nnz, M) == 2
    A = t.to_dense().astype(np.complex128)
    lens = np.diff(t.crow_indices().astype(np.int64), axis=1).ravel()
    wide = [(K, 130)] if np.dtype(dtype) in (np.float32, np.complex128) else []  # two groups (slow on the emulator)
    for shape in [(K, 1), (B, K, 1), (B, K, 3)] + wide:
        x = rng.standard_normal(shape).astype(dtype)
        xd = cuda.DeviceArray.from_host(x)
        want = A @ x.astype(np.complex128)
        scale = (np.abs(A) @ np.abs(x.astype(np.complex128))).max()
        d = cuda.to_device(t)
        listed, pieces = st.matmul(d, xd).get(), st.matmul(d, xd).get()
        for y in (listed, pieces):
            np.testing.assert_allclose(y.astype(np.complex128), want, rtol=0, atol=TOL[np.dtype(dtype)] * scale)
        assert np.array_equal(st.matmul(d, xd).get(), pieces, equal_nan=True)  # the same pieces, in the same order
        assert np.array_equal(st.matmul(cuda.to_device(t), xd).get(), listed, equal_nan=True)
        ((long_len, piece), plan), = _blas._long_rows[d.crow_indices()].items()
        assert (long_len, piece) == ((32, 256) if shape[-1] == 1 else (512, 512))
        assert plan.long_len == long_len and np.array_equal(plan.rows.get(), np.flatnonzero(lens > long_len))
        assert plan.nitems == int((-(-lens[lens > long_len] // piece)).sum())


@pytest.mark.parametrize("case", [("csc", (), (), None), ("csc", (3,), (), None), ("bsc", (2,), (), (2, 3))],
                         ids=["csc", "csc-b1", "bsc-b1"])
def test_products_keep_the_transpose(backend, rng, case):
    """A csc/bsc matrix is transposed to csr/bsr for each product (so is a csr matrix's transpose
    view, the dense cotangent of a backward): from the second product of the same index arrays on,
    the transpose's indices and permutation are kept and a product gathers the values (no sort);
    the result is the CPU's every time, with the values changed in between, and for the same arrays
    in a matrix of another shape. Index arrays another library may write are transposed afresh."""
    from sparsetensor._backend.cuda import _convert
    from sparsetensor.cuda._module import profile

    t = make(rng, case, np.float64, np.int32, blocks=(7, 6))
    d = cuda.to_device(t)
    x = rng.standard_normal(t.shape[:-2] + (t.shape[-1], 3))
    xd = cuda.DeviceArray.from_host(x)
    sorts = []
    for k in range(4):
        vals = rng.standard_normal(np.shape(t.values()))
        t, d = t._replace_values(vals), d._replace_values(cuda.DeviceArray.from_host(vals))
        with profile() as kernels:
            y = st.matmul(d, xd)
        sorts.append(sum(n for name, (n, _) in kernels.items() if "radix" in name or "sort" in name))
        np.testing.assert_allclose(y.get(), st.matmul(t, x), rtol=1e-12)
        x_t = rng.standard_normal(t.shape[:-2] + (3, t.shape[-2]))
        np.testing.assert_allclose(st.matmul(cuda.DeviceArray.from_host(x_t), d).get(), st.matmul(x_t, t),
                                   rtol=1e-12)  # dense @ csc: csc's transpose view is csr, nothing to keep
    assert sorts[0] and sorts[1] and not sorts[2] and not sorts[3], sorts
    assert isinstance(_convert._kept_transposes[d.plain_indices()], tuple)
    rb = case[3][0] if case[3] else 1  # the same index arrays in a taller matrix: another transpose
    taller = t.shape[:-2] + (t.shape[-2] + 2 * rb, t.shape[-1])
    for _ in range(3):
        y = st.matmul(CompressedTensor(d.compressed_indices(), d.plain_indices(), d.values(), taller, d.layout, True),
                      xd)
        np.testing.assert_allclose(y.get(), st.matmul(CompressedTensor(t.compressed_indices(), t.plain_indices(),
                                                                       t.values(), taller, t.layout, True), x),
                                   rtol=1e-12)
        np.testing.assert_allclose(st.matmul(d, xd).get(), st.matmul(t, x), rtol=1e-12)
    if not case[1] and not case[3]:  # sparse @ sparse of mixed orientations keeps it too (A A^T, A^T A)
        a = make(rng, ("csr", (), (), None), np.float64, np.int32, blocks=(6, 7))
        da = cuda.to_device(a)
        for _ in range(3):
            for got, want in ((st.matmul(d, da), st.matmul(t, a)), (st.matmul(da.mT, d.mT), st.matmul(a.mT, t.mT))):
                np.testing.assert_array_equal(got.to_dense().get(), want.to_dense())
    d.plain_indices().__dlpack__()  # handed out: another library may write it
    with profile() as kernels:
        np.testing.assert_allclose(st.matmul(d, xd).get(), st.matmul(t, x), rtol=1e-12)
    assert any("radix" in name or "sort" in name for name in kernels)
    assert d.plain_indices() not in _convert._kept_transposes


def test_profile_names_the_kernels(backend, rng):
    """_module.profile() times each kernel launched in the block (events on a GPU, wall time on
    the emulator), summed by kernel name; launches outside the block are not recorded."""
    from sparsetensor.cuda._module import profile

    d = cuda.to_device(make(rng, ("csr", (), (), None), np.float32, blocks=(6, 5)))
    x = cuda.DeviceArray.from_host(rng.standard_normal(d.shape[1]).astype(np.float32))
    st.matmul(d, x)
    with profile() as kernels:
        st.matmul(d, x)
        st.matmul(d, x)
        assert kernels == {}  # filled on exit
    assert set(kernels) == {"csr_spmv"} and kernels["csr_spmv"][0] == 2 and kernels["csr_spmv"][1] >= 0
    with profile():
        with pytest.raises(RuntimeError, match="nest"):
            with profile():
                pass


def test_matmul_errors(backend, rng):
    d = cuda.to_device(make(rng, ("csr", (), (), None), np.float32))
    # the CPU's rules: float32 @ float64 is float64, the operands converted on the device
    x = np.arange(5.0)
    y = st.matmul(d, cuda.DeviceArray.from_host(x))
    assert y.dtype == np.float64
    assert_values(y.get(), st.matmul(d.cpu(), x))
    with pytest.raises(ValueError, match=r"matmul: cannot multiply a csr tensor of shape \(4, 5\) on cuda:0 by a "
                       r"dense array of shape \(4, 2\) on cuda:0: inner sizes differ"):
        st.matmul(d, cuda.DeviceArray.from_host(np.zeros((4, 2), np.float32)))
    with pytest.raises(ValueError, match="inner sizes"):  # the same words as on the CPU
        st.matmul(d.cpu(), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="different devices: cuda:0 and cpu"):
        st.matmul(d, np.zeros(5, np.float32))
    assert_values(st.matmul(d, d.mT).to_dense().get(), st.matmul(d.cpu(), d.cpu().mT).to_dense())  # SpGEMM
    dd = cuda.to_device(make(rng, ("csr", (), (2,), None), np.float32))
    with pytest.raises(NotImplementedError, match="dense_dim"):
        st.matmul(dd, cuda.DeviceArray.from_host(np.zeros(5, np.float32)))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_sampled_addmm(backend, rng, dtype):
    t = make(rng, ("csr", (2,), (), None), dtype, np.int32, nnz=7, blocks=(6, 5))
    d = cuda.to_device(t)
    m1 = rng.standard_normal((2, 6, 40)).astype(dtype)
    m2 = rng.standard_normal((40, 5)).astype(dtype)
    full = (m1.astype(np.complex128) @ m2.astype(np.complex128))
    for beta, alpha in ((1.0, 1.0), (0.5, -2.0), (0.0, 1.0)):
        got = st.sampled_addmm(d, cuda.DeviceArray.from_host(m1), cuda.DeviceArray.from_host(m2), beta=beta,
                                 alpha=alpha)
        mask = t.to_dense() != 0
        want = np.where(mask, beta * t.to_dense() + alpha * full, 0)
        assert_values(got.to_dense().get(), cast(want, dtype))


def test_sampled_addmm_through_the_op(backend, rng):
    """st.sampled_addmm of a device tensor: the CPU's op (checks, csc through the transpose), then the
    CUDA backend's sddmm; a host operand next to it names both devices."""
    t = make(rng, ("csr", (), (), None), np.float64, np.int32, nnz=9, blocks=(6, 5))
    m1, m2 = rng.standard_normal((6, 7)), rng.standard_normal((7, 5))
    d1, d2 = cuda.DeviceArray.from_host(m1), cuda.DeviceArray.from_host(m2)
    for s in (t, t.to_sparse_csc()):
        got = st.sampled_addmm(s.cuda(), d1, d2, beta=0.5, alpha=2.0)
        assert got.device == "cuda:0" and got.layout is s.layout
        assert_values(got.to_dense().get(), st.sampled_addmm(s, m1, m2, beta=0.5, alpha=2.0).to_dense())
    with pytest.raises(ValueError, match="different devices"):
        st.sampled_addmm(t.cuda(), m1, d2)
    with pytest.raises(TypeError, match="dtype of input"):
        st.sampled_addmm(t.cuda(), cuda.DeviceArray.from_host(m1.astype(np.float32)), d2)


def test_scalar_and_pointwise_through_the_ops(backend, rng):
    """Methods of a device tensor run the CPU's op code (argument checks, coalescing) and the CUDA
    backend's kernels: the same results as on the CPU, the CPU's errors."""
    t = make(rng, ("coo", (), (), None), np.float32, np.int64)
    d = t.cuda()
    a = abs(t)
    for got, want in ((d * 2.5, t * 2.5), (2.5 * d, 2.5 * t), (d / 4, t / 4), (d ** 2, t ** 2),
                      (a.cuda().sqrt(), a.sqrt()), (st.abs(d), st.abs(t)), (d.round(), t.round())):
        assert got.device == "cuda:0" and got.dtype == want.dtype
        assert_values(got.to_dense().get(), want.to_dense())
    with pytest.raises(ValueError, match="not zero-preserving"):
        d ** 0
    assert_values((np.float32(2) * d).to_dense().get(), (np.float32(2) * t).to_dense())  # NumPy scalar first
    with pytest.raises(ValueError, match="different devices"):
        d * np.ones(t.shape, np.float32)
    assert_values(d.sum((0, 1)).get(), t.sum((0, 1)))
    assert_values(d.sum(1).cpu().to_dense(), t.sum(1).to_dense())  # a coo result, as on the CPU
    assert_values(d.sum().get(), t.sum())


# -- sums --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_sum(backend, rng, case, dtype):
    t = make(rng, case, dtype)
    d = cuda.to_device(t)
    dense = t.to_dense().astype(np.complex128)
    total = st.sum(d)
    assert total.shape == () and total.dtype == dtype
    assert_values(total.get(), cast(np.asarray(dense.sum()), dtype))
    if case[0] != "coo":
        m = t.batch_dim
        for dim in (m, m + 1, -1 - t.dense_dim):
            got = st.sum(d, dim)
            assert_values(got.get(), cast(dense.sum(axis=dim), dtype))
        for dim in ([0] if m else []) + ([t.ndim - 1] if t.dense_dim else []):  # batch, dense: sparse results
            try:
                want = st.sum(t, dim)
            except ValueError:  # the remaining batches' patterns have different nnz: the same error
                with pytest.raises(ValueError, match="same nnz"):
                    st.sum(d, dim)
                continue
            got = st.sum(d, dim)
            assert got.layout is want.layout and got.shape == want.shape
            assert_values(got.to_dense().get(), want.to_dense())


def test_sum_large(backend, rng):
    v = rng.standard_normal(300000).astype(np.float32)
    t = st.sparse_coo_tensor(np.arange(v.size)[None], v, (v.size,))
    assert_values(st.sum(cuda.to_device(t)).get(), np.asarray(v.astype(np.float64).sum(), np.float32))
