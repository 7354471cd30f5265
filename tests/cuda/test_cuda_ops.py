"""More ops of the public op path on CUDA tensors, against the CPU backend: reductions over dims
(sum, mean, amax, amin, norm), softmax / log_softmax along a sparse dim, maximum / minimum, value and
index casts, operands of mixed dtypes.

Each op is called as a user calls it (``st.amax(t, 1)``, ``t.astype(np.int16)``) on a CPU tensor
and on its copy on the device; results must agree exactly for integers, bool, patterns and
indices, and to a relative 1e-6 for float32 (float16: 2e-3, float64: 1e-12). What the GPU lacks
raises NotImplementedError naming the op. Runs on a GPU or on the kernel emulator (see
test_cuda.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sparsetensor as st

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import ALL_DTYPES, CASE_IDS, CASES, INDEX, cuda, make, members

RTOL = {np.dtype("float16"): 2e-3, np.dtype("float32"): 1e-6, np.dtype("float64"): 1e-12,
        np.dtype("complex64"): 1e-6, np.dtype("complex128"): 1e-12}
COMPRESSED = [c for c in CASES if c[0] != "coo"]
COMPRESSED_IDS = [i for c, i in zip(CASES, CASE_IDS) if c[0] != "coo"]
ORDERED = [d for d in ALL_DTYPES if d.kind != "c"]


def host(x):
    return x.get() if isinstance(x, cuda.DeviceArray) else x


def same(got, want):
    """A device result (dense array or sparse tensor) equals the CPU's: dtype, shape, pattern and
    indices exactly, values exactly for integers and bool, else to RTOL."""
    if isinstance(want, st.SparseTensor):
        assert got.device == "cuda:0" and got.layout is want.layout and got.shape == want.shape
        for x, y in zip(members(got)[:-1], members(want)[:-1]):
            assert np.array_equal(host(x), y)
        got, want = host(got.values()), np.ascontiguousarray(want.values())
    else:
        got, want = host(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind in "fc":
        rt = RTOL[want.dtype]
        mag = np.abs(want.astype(np.complex128))
        scale = np.max(mag[np.isfinite(mag)], initial=0)  # infinities must match where they are
        np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128), rtol=rt,
                                   atol=rt * scale + 1e-30, equal_nan=True)
    else:
        assert np.array_equal(got, want)


def small_ints(rng, case, dtype, index_dtype, **kw):
    """A random tensor of ``case`` whose values are integers in [-9, 9] (nonnegative for unsigned
    and bool) stored as ``dtype``: every cast and sum of them is exact."""
    t = make(rng, case, np.float64, index_dtype, **kw)
    v = np.ascontiguousarray(t.values())
    v = np.where(v != 0, np.sign(v) * (1 + np.floor(np.abs(v) * 3) % 9), 0)
    if np.dtype(dtype).kind in "bu":
        v = np.abs(v)
    if np.dtype(dtype).kind == "c":
        v = v - 0.5j * v
    return t._replace_values(v.astype(dtype))


# -- reductions ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_reductions(backend, rng, case, dtype):
    for index_dtype in INDEX:
        t = make(rng, case, dtype, index_dtype)
        d = t.cuda()
        m = t.batch_dim
        dims = [None] + ([m, m + 1, -1 - t.dense_dim] if case[0] != "coo" else [])
        for name in ("sum", "mean", "amax", "amin"):
            for dim in dims:
                try:
                    want = getattr(st, name)(t, dim)
                except TypeError:  # amax of complex: refused on both
                    with pytest.raises(TypeError):
                        getattr(st, name)(d, dim)
                    continue
                same(getattr(st, name)(d, dim), want)
        for p in ("fro", 1, np.inf, -np.inf, 3):
            for dim in dims:
                same(st.norm(d, p, dim), st.norm(t, p, dim))
        for name in ("sum", "amax"):  # keepdim, and the method spelling
            if dtype.kind != "c":
                same(getattr(d, name)(dim=None, keepdim=True), getattr(t, name)(dim=None, keepdim=True))


def test_reductions_fold_unspecified_zeros(backend):
    """amax of negative values with unspecified elements is 0, amin of positive ones too; a full row
    has no unspecified element; NaN propagates."""
    a = np.array([[-1.0, -2.0, 0.0], [-3.0, -4.0, -5.0], [0.0, 0.0, 0.0], [np.nan, 1.0, 0.0]])
    for layout in ("csr", "csc", "coo"):
        t = st.from_dense(a, layout)
        d = t.cuda()
        for name in ("amax", "amin"):
            same(getattr(st, name)(d), getattr(st, name)(t))
            if layout != "coo":
                for dim in (0, 1):
                    same(getattr(st, name)(d, dim), getattr(st, name)(t, dim))


def test_norm_zero_and_negative_p(backend, rng):
    """p = 0 (the number of nonzeros) and p < 0 (0 on slices with a zero, unspecified ones too) on
    the device (tests/cuda/test_cuda_more_ops.py has every layout)."""
    t = make(rng, ("csr", (2,), (3,), None), np.float32)
    d = t.cuda()
    for p in (0, -1, -2.5):
        for dim in (None, 0, (1, 3)):
            same(st.norm(d, p, dim), st.norm(t, p, dim))


# -- softmax ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_softmax(backend, rng, case, dtype):
    """softmax and log_softmax along every dim of every layout: sparse dims (coo: entries grouped by
    their other indices), batch dims (through coo), dense dims (inside each entry's values)."""
    for index_dtype in INDEX:
        t = make(rng, case, dtype, index_dtype)
        d = t.cuda()
        for dim in range(t.ndim):
            for fn in (st.softmax, st.log_softmax):
                try:
                    want = fn(t, dim)
                except ValueError:  # batches whose result has different nnz: the same error on the GPU
                    with pytest.raises(ValueError):
                        fn(d, dim)
                    continue
                same(fn(d, dim), want)


def test_softmax_unchecked_and_empty_rows(backend):
    """An unchecked input is made canonical first (as on the CPU); empty rows stay empty; -inf and a
    row of one entry."""
    from sparsetensor._core._tensor import CompressedTensor

    u = CompressedTensor(np.array([0, 3, 3, 5]), np.array([2, 0, 1, 1, 0]),
                         np.array([1.0, -np.inf, 3.0, 0.5, 2.0]), (3, 4), st.sparse_csr)
    for fn in (st.softmax, st.log_softmax):
        same(fn(u.cuda(), 1), fn(u, 1))
        same(fn(u.cuda(), 0), fn(u, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
@pytest.mark.parametrize("dense", [(), (2,)], ids=["plain", "dense"])
def test_softmax_skewed_rows(backend, rng, dtype, dense):
    """Rows from empty to thousands of entries: a short row takes a group of threads, a long one a
    block (segment_softmax_long), both dims (the columns through a transpose); NaN, inf and -inf in
    short and long rows."""
    lens = np.array([0, 1, 3, 17, 64, 65, 129, 300, 2500, 0, 9, 4100, 2, 0])
    n = 4200
    crow = np.concatenate([[0], np.cumsum(lens)])
    col = np.concatenate([np.sort(rng.choice(n, k, replace=False)) for k in lens])
    vals = (5 * rng.standard_normal((col.size,) + dense)).astype(dtype)
    for at, special in ((int(crow[8]) + 7, np.nan), (int(crow[11]) + 1000, np.inf), (int(crow[3]) + 2, np.nan),
                        (int(crow[4]) + 3, -np.inf), (int(crow[7]) + 5, np.inf)):
        vals[at] = special
    vals[crow[6]:crow[7]] = -np.inf  # a row of -inf only: NaN, as NumPy has it
    t = st.sparse_csr_tensor(crow, col, vals, (lens.size, n) + dense)
    d = t.cuda()
    for dim in (0, 1):
        for fn in (st.softmax, st.log_softmax):
            same(fn(d, dim), fn(t, dim))


def test_softmax_refusals(backend, rng):
    with pytest.raises(TypeError, match="floating"):
        st.softmax(make(rng, ("csr", (), (), None), np.int32).cuda(), 1)


# -- maximum / minimum -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ORDERED, ids=str)
@pytest.mark.parametrize("case", COMPRESSED, ids=COMPRESSED_IDS)
def test_maximum_minimum(backend, rng, case, dtype):
    for index_dtype in INDEX:
        a = small_ints(rng, case, dtype, index_dtype, nnz=6)
        b = small_ints(rng, case, dtype, index_dtype, nnz=6)
        for fn in (st.maximum, st.minimum):
            try:
                want = fn(a, b)
            except ValueError as e:  # batches whose union has different nnz: the same error on the GPU
                with pytest.raises(ValueError, match="same nnz"):
                    fn(a.cuda(), b.cuda())
                assert "same nnz" in str(e)
                continue
            same(fn(a.cuda(), b.cuda()), want)


def test_maximum_minimum_mixed_and_refused(backend, rng):
    a = make(rng, ("csr", (), (), None), np.float32)
    b = make(rng, ("csc", (), (), None), np.float64)
    same(st.maximum(a.cuda(), b.cuda()), st.maximum(a, b))  # csc converted, float32 cast to float64
    if a.nnz:  # NaN propagates where it is specified
        a = a._replace_values(np.where(np.arange(a.nnz) == 0, np.float32(np.nan), a.values()).astype(np.float32))
    same(st.minimum(a.cuda(), b.cuda()), st.minimum(a, b))
    c1, c2 = make(rng, ("coo", (), (2,), None), np.float32), make(rng, ("coo", (), (2,), None), np.float32)
    if c1.nnz:  # NaN propagates from either operand, also where the other has no entry
        c1 = c1._replace_values(np.where(np.arange(c1.nnz)[:, None] == 0, np.float32(np.nan), c1.values()))
    same(st.maximum(c1.cuda(), c2.cuda()), st.maximum(c1, c2))
    same(st.minimum(c2.cuda(), c1.cuda()), st.minimum(c2, c1))
    with pytest.raises(TypeError, match="complex"):
        st.maximum(make(rng, ("csr", (), (), None), np.complex64).cuda(),
                   make(rng, ("csr", (), (), None), np.complex64).cuda())


# -- casts -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[6], CASES[10]], ids=[CASE_IDS[i] for i in (0, 3, 6, 10)])
def test_astype(backend, rng, case, src):
    for index_dtype in INDEX:
        t = small_ints(rng, case, src, index_dtype)
        d = t.cuda()
        for dst in ALL_DTYPES:
            with warnings.catch_warnings():  # complex to real: NumPy's ComplexWarning on both
                warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
                got, want = d.astype(dst), t.astype(dst)
            same(got, want)
            assert got.dtype == dst
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
                same(d.to(dst), t.to(dst))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_index_casts(backend, rng, case):
    t = make(rng, case, np.float32, np.int64)
    d = t.cuda()
    n = d.to(index_dtype=np.int32)
    assert n.index_dtype == np.int32
    same(n, t.to(index_dtype=np.int32))
    same(n.to(index_dtype=np.int64), t)
    assert d.to(index_dtype=np.int64) is d


def test_mixed_dtypes(backend, rng):
    """Operands of two dtypes: the CPU's result dtype, the values converted on the device."""
    a = make(rng, ("csr", (), (), None), np.float32)
    b = make(rng, ("csr", (), (), None), np.float64)
    i = small_ints(rng, ("csr", (), (), None), np.int16, np.int64)
    same(st.add(a.cuda(), b.cuda()), st.add(a, b))
    same(a.cuda() * b.cuda(), a * b)
    same(st.add(i.cuda(), a.cuda()), st.add(i, a))
    x = rng.standard_normal(a.shape[1])
    same(st.matmul(a.cuda(), cuda.DeviceArray.from_host(x)), st.matmul(a, x))


def test_host_only_ops_refuse_a_device_operand_in_any_position(backend, rng):
    """hspmm, smm and sspaddmm run on the device now (tests/cuda/test_cuda_more_ops.py): a host
    operand mixed with a device one, in any position, raises ValueError naming both devices."""
    t = make(rng, ("csr", (), (), None), np.float64)
    d = cuda.to_device(t)
    M, K = t.shape
    dense_dev = cuda.DeviceArray.from_host(np.ones((K, 3)))
    cases = [lambda: st.hspmm(d, np.ones((K, 3))),
             lambda: st.smm(t, dense_dev),  # a dense device array
             lambda: st.sspaddmm(t, d, np.ones((K, K))),
             lambda: st.sspaddmm(t, t, dense_dev),
             lambda: st.sspaddmm(d, t, np.ones((K, K)))]
    for fn in cases:
        with pytest.raises(ValueError, match="different devices: .*cuda"):
            fn()
    assert st.hspmm(t, np.ones((K, 3))).shape == (M, 3)  # the host path is untouched
