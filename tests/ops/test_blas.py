"""Sparse-dense products (sparsetensor.ops.blas, sparsetensor._lib._spmm).

Oracles: dense NumPy (``np.matmul`` of the densified operands; exact for integers and
bool, a tolerance for floats) everywhere, and PyTorch where it defines the op.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import sparsetensor as st
from conftest import (HAVE_TORCH, INDEX_DTYPES, LAYOUTS, assert_unchanged, nonzero_values, random_dense,
                      requires_torch, snapshot)
from sparsetensor._core._config import GRAIN
from sparsetensor._lib import _spmm
from sparsetensor.ops import blas

if HAVE_TORCH:
    import torch

DTYPES = [np.dtype(d) for d in ("bool", "int8", "int32", "int64", "uint8", "int16", "float16", "float32",
                                "float64", "complex64", "complex128")]
BLOCK = {"bsr": (2, 3), "bsc": (2, 3)}
NS = [None, 0, 1, 5, 37]  # None: a 1-d dense vector (SpMV)


# -- helpers -----------------------------------------------------------------------------------
def dense_operand(rng, shape, dtype):
    """Random values of ``dtype`` with some zeros (and wrapping magnitudes for small ints)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dtype)
    x = nonzero_values(rng, shape, dtype)
    return np.where(rng.random(shape) < 0.2, np.zeros((), dtype), x)


def sparse_of(a, layout, index_dtype=np.int64, batch_dim=0):
    """``a`` in ``layout`` (coo: batch dims become leading sparse dims)."""
    if layout == "coo":
        return st.from_dense(a, "coo", index_dtype=index_dtype)
    return st.from_dense(a, layout, blocksize=BLOCK.get(layout), batch_dim=batch_dim, index_dtype=index_dtype)


def random_sparse(rng, layout, dtype, index_dtype=np.int64, batch=(), blocks=(4, 5), nnz=None):
    bs = BLOCK.get(layout, (1, 1))
    a = random_dense(rng, batch=batch, blocks=blocks, blocksize=bs, dtype=dtype, nnz=nnz)
    return a, sparse_of(a, layout, index_dtype, len(batch))


def reference(a, b, dtype):
    """np.matmul in ``dtype``; float16 through float32, rounded once."""
    if np.dtype(dtype) == np.float16:
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    return np.matmul(a.astype(dtype), b.astype(dtype))


def assert_close(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-5, np.dtype(np.complex64): 1e-5}.get(
            want.dtype, 1e-12)
        scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def unchecked(t, compressed=None, plain=None):
    """A copy of compressed ``t`` built without checks, with replaced index arrays."""
    c = t.compressed_indices().copy() if compressed is None else compressed
    p = t.plain_indices().copy() if plain is None else plain
    return st.sparse_compressed_tensor(c, p, t.values(), t.shape, layout=t.layout, check_invariants=False)


# -- every layout x index dtype x value dtype x batch ----------------------------------------
@pytest.mark.parametrize("sparse_first", [True, False], ids=["sparse_times_dense", "dense_times_sparse"])
@pytest.mark.parametrize("batch", [(), (3,)], ids=["nobatch", "batch"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_products_with_dense(layout, index_dtype, dtype, batch, sparse_first, rng):
    """``s @ d`` (``d @ s``) for every N in NS against the dense oracle; no operand is modified."""
    a, s = random_sparse(rng, layout, dtype, index_dtype, batch)
    before = snapshot(s)
    K = a.shape[-1] if sparse_first else a.shape[-2]
    for N in NS:
        d = dense_operand(rng, batch + ((K,) if N is None else (K, N) if sparse_first else (N, K)), dtype)
        if N is None and batch:
            d = d[0]  # a batched matrix times one vector
        d_before = d.copy()
        if sparse_first:
            assert_close(blas.matmul(s, d), reference(a, d, dtype))
        else:
            assert_close(blas.matmul(d, s), reference(d, a, dtype))
        np.testing.assert_array_equal(d, d_before)
    assert_unchanged(s, before)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_bmm(layout, dtype, rng):
    a, s = random_sparse(rng, layout, dtype, batch=(3,))
    d = dense_operand(rng, (3, a.shape[-1], 4), dtype)
    assert_close(blas.bmm(s, d), reference(a, d, dtype))
    x = dense_operand(rng, (3, 6, a.shape[-2]), dtype)
    assert_close(blas.bmm(x, s), reference(x, a, dtype))
    with pytest.raises(ValueError, match=r"batch sizes differ"):
        blas.bmm(s, d[:2])
    with pytest.raises(ValueError, match=r"3-d"):
        blas.bmm(s, d[0])


def test_batched_coo_with_different_nnz_per_batch(rng):
    a = np.zeros((3, 4, 5), np.float64)
    a[0, 1, 2] = 1.0
    a[2, :, 1] = 2.0
    a[2, 3, 4] = 5.0  # batch 1 is empty, batch 2 has 5 entries
    s = st.from_dense(a, "coo")
    d = rng.standard_normal((3, 5, 2))
    assert_close(blas.bmm(s, d), a @ d)
    assert_close(blas.matmul(s, d[0]), a @ d[0])          # a 2-d dense matrix over the batch
    assert_close(blas.matmul(s, d[0, :, 0]), a @ d[0, :, 0])  # and a vector
    x = rng.standard_normal((3, 2, 4))
    assert_close(blas.matmul(x, s), x @ a)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_batch_broadcasting(layout, rng):
    a, s = random_sparse(rng, layout, np.float64, batch=(2, 3), nnz=6)
    d2 = rng.standard_normal((a.shape[-1], 4))
    assert_close(blas.matmul(s, d2), a @ d2)
    d4 = rng.standard_normal((1, 3, a.shape[-1], 4))
    assert_close(blas.matmul(s, d4), a @ d4)
    a2, s2 = random_sparse(rng, layout, np.float64)
    d3 = rng.standard_normal((5, a2.shape[-1], 2))
    assert_close(blas.matmul(s2, d3), a2 @ d3)  # a 2-d sparse matrix over a dense batch
    with pytest.raises(ValueError, match=r"batch shapes .* do not broadcast"):
        blas.matmul(s, rng.standard_normal((4, a.shape[-1], 1)))


def test_coo_vector(rng):
    v = np.array([0.0, 2.0, 0.0, -1.0])
    s = st.from_dense(v, "coo")
    m = rng.standard_normal((4, 3))
    assert_close(blas.matmul(s, m), v @ m)
    assert_close(blas.matmul(m.T, s), m.T @ v)
    assert blas.matmul(s, v).shape == () and blas.matmul(s, v) == v @ v


# -- dtypes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("sdt, ddt", [("int8", "float32"), ("float32", "float64"), ("bool", "int32"),
                                      ("uint8", "int16"), ("int64", "uint8"), ("float16", "float32"),
                                      ("int16", "float16"), ("complex64", "float64"), ("bool", "bool"),
                                      ("uint8", "int8"), ("int32", "float16")])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mixed_dtypes(layout, sdt, ddt, rng):
    a, s = random_sparse(rng, layout, sdt)
    d = dense_operand(rng, (a.shape[1], 3), ddt)
    rt = np.result_type(sdt, ddt)
    got = blas.matmul(s, d)
    assert got.dtype == rt
    assert_close(got, reference(a, d, rt))
    assert_close(blas.matmul(d.T, s.mT if layout != "coo" else s.transpose(0, 1)), reference(d.T, a.T, rt))


@pytest.mark.parametrize("ddt", ["uint16", "uint32", "uint64"])
def test_dense_operand_dtypes_follow_the_value_policy(ddt, rng):
    """One dtype policy: a dense operand outside st.VALUE_DTYPES is refused, as by the pointwise ops."""
    s = st.from_dense(np.eye(3, dtype=np.uint8), "csr")
    with pytest.raises(TypeError, match=ddt):
        blas.matmul(s, np.ones((3, 2), dtype=ddt))
    with pytest.raises(TypeError, match=ddt):
        st.mul(s, np.ones((3, 3), dtype=ddt))


def test_integer_products_wrap():
    a = np.array([[100, 100, 100], [100, 0, 100]], np.int8)
    d = np.array([[3], [3], [3]], np.int8)
    for layout in LAYOUTS:
        s = st.from_dense(a, layout, blocksize=(1, 1) if layout[0] == "b" else None)
        got = blas.matmul(s, d)
        np.testing.assert_array_equal(got, a @ d)  # 900 and 600 modulo 256, as int8
        assert got.dtype == np.int8
    s = st.from_dense(np.full((1, 300), True), "csr")
    assert blas.matmul(s, np.ones(300, bool)).tolist() == [True]  # or of ands, never a wrapped count
    assert blas.matmul(s, np.zeros(300, bool)).tolist() == [False]
    assert blas.matmul(s.to_sparse_csc(), np.ones((300, 1), bool)).tolist() == [[True]]


def test_unsupported_dtypes(rng):
    a, s = random_sparse(rng, "csr", np.float32)
    with pytest.raises(TypeError, match="unsupported dtype"):
        blas.matmul(s, np.ones((a.shape[1], 2), np.longdouble))
    with pytest.raises(TypeError, match="unsupported dtype"):
        blas.matmul(s, np.array([["a"] * 2] * a.shape[1]))


def test_nan_and_inf_through_specified_elements_only():
    """A specified element (an explicit zero too) multiplies inf/NaN; an unspecified one does not
    (as in PyTorch and SciPy)."""
    t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [0.0, 1.0], size=(2, 2))  # an explicit zero at (0, 1)
    d = np.array([[np.inf, 1.0], [np.nan, 2.0]])
    for s in (t, t.to_sparse_csc(), t.to_sparse_coo(), t.to_sparse_bsr((1, 1)), t.to_sparse_bsc((1, 1))):
        got = blas.matmul(s, d)
        np.testing.assert_array_equal(np.isnan(got), [[True, False], [False, False]])
        assert got[1, 0] == np.inf
    for N in (1, 20):  # the SIMD paths: every lane
        dd = np.full((2, N), np.nan)
        dd[0] = np.inf
        got = blas.matmul(t, dd)
        assert np.isnan(got[0]).all() and (got[1] == np.inf).all()


# -- layouts and kernel paths -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "complex64"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("blocksize", [(1, 1), (2, 3), (4, 4), (5, 7), (16, 16), (3, 1)])
def test_blocked_paths(blocksize, index_dtype, dtype, rng):
    """Every register tile shape of the BSR fast path (R in 1..4, V in 1..4, masked tails)."""
    a = random_dense(rng, blocks=(6, 5), blocksize=blocksize, dtype=np.dtype(dtype), nnz=12)
    for layout in ("bsr", "bsc"):
        s = st.from_dense(a, layout, blocksize=blocksize, index_dtype=index_dtype)
        for N in (1, 3, 8, 16, 17, 33, 64, 65, 100):
            d = dense_operand(rng, (a.shape[1], N), dtype)
            assert_close(blas.matmul(s, d), reference(a, d, dtype))
            d2 = dense_operand(rng, (a.shape[0], N), dtype)  # the transpose view: blocks column-major
            assert_close(blas.matmul(s.mT, d2), reference(a.T, d2, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_long_rows_and_tails(dtype, index_dtype, rng):
    """Rows longer than one gather (16/8 lanes) and every tail of the column tiles."""
    a = np.zeros((40, 300), dtype)
    for i in range(40):
        cols = rng.choice(300, size=int(rng.integers(0, 60)), replace=False)
        a[i, cols] = rng.standard_normal(cols.size)
    for layout in ("csr", "csc"):
        s = st.from_dense(a, layout, index_dtype=index_dtype)
        for N in (None, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 129):
            d = dense_operand(rng, (300,) if N is None else (300, N), dtype)
            assert_close(blas.matmul(s, d), reference(a, d, dtype))


def test_non_contiguous_dense_operand(rng):
    a, s = random_sparse(rng, "csr", np.float64)
    base = rng.standard_normal((a.shape[1] * 2, 9))
    for d in (base[::2], base[::2, ::3], np.asfortranarray(base[: a.shape[1]]), base[: a.shape[1]].T.copy().T):
        assert_close(blas.matmul(s, d), a @ d)
    x = rng.standard_normal((3, a.shape[0]))
    assert_close(blas.matmul(np.asfortranarray(x), s), x @ a)


def test_unsorted_and_duplicate_entries_are_summed(rng):
    """An unchecked tensor may break 5.6: its duplicates add up, as in to_dense()."""
    t = st.sparse_csr_tensor([0, 3, 4], [2, 0, 2, 1], [1.0, 2.0, 3.0, 4.0], size=(2, 3), check_invariants=False)
    d = rng.standard_normal((3, 4))
    want = t.to_dense() @ d
    assert_close(blas.matmul(t, d), want)
    assert_close(blas.matmul(t, d[:, 0]), want[:, 0])
    assert_close(blas.matmul(d.T, t.mT), want.T)


@pytest.fixture(params=["simd", "portable"])
def simd(request):
    """Run a test with the SIMD paths (AVX-512, or the AVX2 SpMV and BSR x vector; where compiled
    in) and with the portable loops."""
    previous = _spmm.set_simd(request.param == "simd")
    if request.param == "simd" and not _spmm.simd_available():
        _spmm.set_simd(previous)
        pytest.skip("this build level has no SIMD paths (the baseline level, or another CPU)")
    yield request.param
    _spmm.set_simd(previous)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("blocksize", [(1, 1), (3, 2), (4, 4)])
def test_simd_and_portable_paths(simd, blocksize, index_dtype, dtype, rng):
    a = random_dense(rng, batch=(2,), blocks=(9, 7), blocksize=blocksize, dtype=np.dtype(dtype), nnz=20,
                     partial_blocks=False)
    for layout in ("csr", "bsr") if blocksize != (1, 1) else ("csr",):
        s = st.from_dense(a, layout, blocksize=blocksize if layout == "bsr" else None, batch_dim=1,
                          index_dtype=index_dtype)
        t = unchecked(s)  # the guarded variants
        for N in (None, 1, 5, 16, 33, 70):
            d = dense_operand(rng, (a.shape[-1],) if N is None else (a.shape[-1], N), dtype)
            want = reference(a, d, dtype)
            assert_close(blas.matmul(s, d), want)
            assert_close(blas.matmul(t, d), want)
        p = s.plain_indices().copy()
        p[1, 3] = s.plain_size
        with pytest.raises(st.InvariantError, match="5.5"):
            blas.matmul(unchecked(s, plain=p), np.ones((a.shape[-1], 3), dtype))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch", [(), (3,)], ids=["nobatch", "batch"])
def test_spmv_long_rows(simd, batch, index_dtype, rng):
    """float64 CSR x vector with rows of 0 to 40 entries, 16 or more on average (where the avx2
    level runs its AVX2 SpMV): every row length mod 4 (the masked tails), groups of 4 rows and a
    partial one at the end, 1 and 2 threads, unchecked input, and each kind of broken index
    found before it is followed."""
    M, K = 103, 60
    lengths = rng.integers(8, 41, M)
    lengths[:9] = np.arange(9)
    lengths[50] = 12
    a = np.zeros(batch + (M, K))
    for b in np.ndindex(batch):
        for i, n in enumerate(lengths):
            a[b + (i, rng.choice(K, n, replace=False))] = rng.standard_normal(n)
    s = st.from_dense(a, "csr", batch_dim=len(batch), index_dtype=index_dtype)
    assert s.nnz >= 16 * M
    x = rng.standard_normal(K)
    for t in (s, unchecked(s)):
        for threads in (1, 2):
            assert_close(blas.matmul(t, x, threads=threads), a @ x)
    for value, inv in ((K, "5.5"), (-1, "5.4")):
        p = s.plain_indices().copy()
        p[..., s.compressed_indices()[..., 50] + 3] = value  # in row 50
        with pytest.raises(st.InvariantError, match=inv):
            blas.matmul(unchecked(s, plain=p), x)
    c = s.compressed_indices().copy()
    c[..., 60] = c[..., 61] + 1
    with pytest.raises(st.InvariantError):
        blas.matmul(unchecked(s, compressed=c), x)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("blocksize", [(2, 2), (3, 3), (4, 4), (2, 5), (1, 9), (9, 1), (4, 8), (6, 6), (5, 7), (1, 17),
                                       (3, 6), (5, 5), (2, 9), (17, 2)])
def test_bsr_times_vector(simd, blocksize, index_dtype, dtype, rng):
    """BSR x vector on a 2-d matrix: the register path (Cb up to one vector's lanes, a block up
    to four vectors), the tile path beyond it, blocks stored transposed (the bsr view of a bsc
    tensor), unchecked input, and a broken index found before it is followed."""
    Rb, Cb = blocksize
    a = random_dense(rng, blocks=(11, 6), blocksize=blocksize, dtype=np.dtype(dtype), nnz=30, partial_blocks=False)
    s = st.from_dense(a, "bsr", blocksize=blocksize, index_dtype=index_dtype)
    view = st.from_dense(np.ascontiguousarray(a.T), "bsc", blocksize=(Cb, Rb), index_dtype=index_dtype).mT
    assert view.layout == s.layout and (min(blocksize) == 1 or not view.values().flags.c_contiguous)
    x = dense_operand(rng, (a.shape[1],), dtype)
    for t in (s, unchecked(s), view):
        assert_close(blas.matmul(t, x), reference(a, x, dtype))
        assert_close(blas.matmul(t, x[:, None]), reference(a, x[:, None], dtype))
    p = s.plain_indices().copy()
    p[-1] = s.plain_size
    with pytest.raises(st.InvariantError, match="5.5"):
        blas.matmul(unchecked(s, plain=p), x)
    c = s.compressed_indices().copy()
    c[3] = c[4] + 1
    with pytest.raises(st.InvariantError):
        blas.matmul(unchecked(s, compressed=c), x)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("B", [3, 4])
def test_bsr_times_vector_square_blocks(simd, B, index_dtype, rng):
    """float64 BSR x vector with row-major 3x3 and 4x4 blocks (the avx2 level runs an AVX2
    kernel for these): a batch of FEM-like matrices big enough for 2 threads, the same bits on 1
    and 2 threads (a block row is summed by one thread), an infinite entry that reaches its own
    output row and no other (no lane of another block row or block is read), unchecked input,
    and each kind of broken index found before it is followed."""
    one = st.stencil((6, 6, 6), 27, layout="bsr", dofs=B).to_dense()
    a = np.stack([one * rng.uniform(0.5, 2.0, one.shape) for _ in range(2)])
    a[1, 7, a[1, 7] != 0] = np.inf  # row 7 of batch 1: every entry infinite
    s = st.from_dense(a, "bsr", blocksize=(B, B), batch_dim=1, index_dtype=index_dtype)
    assert s.values().shape[-2:] == (B, B) and s.nnz * B * B * 2 >= GRAIN
    x = rng.uniform(0.5, 1.5, a.shape[-1])
    want = a @ x
    assert np.isinf(want[1, 7]) and np.isfinite(np.delete(want, 7, axis=1)).all() and np.isfinite(want[0]).all()
    for t in (s, unchecked(s)):
        y1, y2 = blas.matmul(t, x, threads=1), blas.matmul(t, x, threads=2)
        np.testing.assert_array_equal(y1, y2)
        assert np.isinf(y1[1, 7]) and np.isfinite(np.delete(y1, 7, axis=1)).all() and np.isfinite(y1[0]).all()
        assert_close(np.delete(y1, 7, axis=1), np.delete(want, 7, axis=1))
    nb = s.values().shape[1]
    for value, inv in ((s.plain_size, "5.5"), (-1, "5.4")):
        p = s.plain_indices().copy()
        p[1, nb // 2] = value
        with pytest.raises(st.InvariantError, match=inv):
            blas.matmul(unchecked(s, plain=p), x, threads=2)
    c = s.compressed_indices().copy()
    c[1, 40] = c[1, 41] + 1
    with pytest.raises(st.InvariantError):
        blas.matmul(unchecked(s, compressed=c), x)


# -- threads ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc", "coo"])
@pytest.mark.parametrize("dtype", ["float64", "int64", "bool", "float32"])
@pytest.mark.parametrize("N", [None, 1, 3, 40])
def test_threads_agree(layout, dtype, N, rng):
    blocks, nnz = ((1000, 700), 25000) if layout in ("bsr", "bsc") else ((2000, 1500), 150000)
    a, s = random_sparse(rng, layout, dtype, blocks=blocks, nnz=nnz)  # enough work for threads
    K = a.shape[1]
    d = dense_operand(rng, (K,) if N is None else (K, N), dtype)
    r1 = blas.matmul(s, d, threads=1)
    r2 = blas.matmul(s, d, threads=2)
    r3 = blas.matmul(s, d, threads=3)
    assert_close(r1, reference(a, d, dtype))
    assert_close(r2, r1)
    assert_close(r3, r1)
    if layout in ("csr", "bsr") or np.dtype(dtype).kind in "biu":
        np.testing.assert_array_equal(r1, r2)  # row-parallel: every row is summed by one thread


def test_threads_agree_batched_scatter(rng):
    a, s = random_sparse(rng, "csc", np.int64, batch=(5,), blocks=(300, 200), nnz=30000)
    d = dense_operand(rng, (5, a.shape[-1], 2), np.int64)
    np.testing.assert_array_equal(blas.matmul(s, d, threads=1), blas.matmul(s, d, threads=4))
    np.testing.assert_array_equal(blas.matmul(s, d, threads=4), a @ d)


# -- empty and degenerate ----------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0), (3, 4)])
def test_empty(layout, shape, rng):
    a = np.zeros(shape, np.float32)
    s = st.from_dense(a, layout, blocksize=(1, 1) if layout[0] == "b" else None)
    assert s.nnz == 0
    for N in (None, 0, 3):
        d = np.ones((shape[1],) if N is None else (shape[1], N), np.float32)
        got = blas.matmul(s, d)
        assert_close(got, a @ d)
        x = np.ones((shape[0],) if N is None else (N, shape[0]), np.float32)
        assert_close(blas.matmul(x, s), x @ a)


def test_empty_batch(rng):
    s = st.from_dense(np.zeros((0, 3, 4)), "csr", batch_dim=1)
    assert blas.matmul(s, np.ones((4, 2))).shape == (0, 3, 2)
    assert blas.bmm(s, np.ones((0, 4, 2))).shape == (0, 3, 2)


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_shape_mismatch_names_both_operands(layout, rng):
    a, s = random_sparse(rng, layout, np.float64)
    M, K = a.shape
    bad = np.ones((K + 1, 2))
    with pytest.raises(ValueError) as e:
        blas.matmul(s, bad)
    assert str(a.shape) in str(e.value) and str(bad.shape) in str(e.value) and layout in str(e.value)
    bad = np.ones((2, M + 1))
    with pytest.raises(ValueError) as e:
        blas.matmul(bad, s)
    assert str(a.shape) in str(e.value) and str(bad.shape) in str(e.value)
    assert f"({M + 1} != {M})" in str(e.value)
    with pytest.raises(ValueError, match="at least 1-d"):
        blas.matmul(s, np.float64(1.0))


def test_op_specific_shape_errors(rng):
    a, s = random_sparse(rng, "csr", np.float64)
    with pytest.raises(ValueError, match="2-d"):
        blas.mm(s, np.ones(a.shape[1]))
    with pytest.raises(ValueError, match="1-d"):
        blas.mv(s, np.ones((a.shape[1], 1)))
    with pytest.raises(TypeError, match="sparse"):
        blas.mv(np.ones((2, 2)), np.ones(2))
    with pytest.raises(TypeError, match="at least one sparse"):
        blas.matmul(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"input of shape \(7,\)"):
        blas.addmm(np.ones(7), s, np.ones((a.shape[1], 3)))
    with pytest.raises(ValueError, match="in_features"):
        blas.linear(np.ones((2, a.shape[1] + 1)), s)
    with pytest.raises(ValueError, match="bias"):
        blas.linear(np.ones((2, a.shape[1])), s, np.ones(a.shape[0] + 1))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hybrid_not_implemented(layout, rng):
    bs = BLOCK.get(layout)
    a = random_dense(rng, blocks=(2, 3), blocksize=bs or (1, 1), dense=(2,), nnz=3)
    s = st.from_dense(a, layout, blocksize=bs, dense_dim=1)
    with pytest.raises(NotImplementedError, match=f"hybrid {layout}"):
        blas.matmul(s, np.ones((a.shape[1], 2)))
    with pytest.raises(NotImplementedError, match="hybrid"):
        blas.matmul(np.ones((2, a.shape[0])), s)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_unchecked_out_of_range_raises(layout, dtype, index_dtype, rng):
    a, s = random_sparse(rng, layout, dtype, index_dtype, blocks=(6, 7), nnz=10)
    plain_size = s.plain_size
    cases = []
    for value, inv in ((plain_size, "5.5"), (10**6, "5.5"), (-1, "5.4")):
        p = s.plain_indices().copy()
        p[4] = value
        cases.append((unchecked(s, plain=p), inv))
    c = s.compressed_indices().copy()
    c[2] = s.nnz + 5
    cases.append((unchecked(s, compressed=c), "5.3"))
    c = s.compressed_indices().copy()
    c[3] = -3
    cases.append((unchecked(s, compressed=c), "5.3"))
    for t, inv in cases:
        for N in (None, 1, 4, 40):
            K = a.shape[1]
            d = np.ones((K,) if N is None else (K, N), dtype)
            with pytest.raises(st.InvariantError) as e:
                blas.matmul(t, d)
            assert e.value.invariant == inv and e.value.layout == layout
            x = np.ones((a.shape[0],) if N is None else (N, a.shape[0]), dtype)
            with pytest.raises(st.InvariantError) as e:
                blas.matmul(x, t)
            assert e.value.invariant == inv and e.value.layout == layout
        for N in (1, 40):  # the threaded kernels too
            with pytest.raises(st.InvariantError):
                blas.matmul(t, np.ones((a.shape[1], N), dtype), threads=2)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_unchecked_out_of_range_raises_threaded(layout, dtype, rng):
    blocks, nnz = ((1000, 700), 25000) if layout in ("bsr", "bsc") else ((2000, 1500), 150000)
    a, s = random_sparse(rng, layout, dtype, np.int32, blocks=blocks, nnz=nnz)
    for where, value, inv in ((nnz // 2, -7, "5.4"), (nnz - 1, s.plain_size, "5.5")):
        p = s.plain_indices().copy()
        p[where] = value
        t = unchecked(s, plain=p)
        for N in (None, 1, 3, 40):
            d = np.ones((a.shape[1],) if N is None else (a.shape[1], N), dtype)
            with pytest.raises(st.InvariantError) as e:
                blas.matmul(t, d, threads=2)
            assert e.value.invariant == inv


def test_unchecked_coo_out_of_range_raises():
    t = st.sparse_coo_tensor([[0, 5], [1, 1]], [1.0, 2.0], size=(3, 3), check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        blas.matmul(t, np.ones((3, 2)))
    assert e.value.invariant == "C5"
    t = st.sparse_coo_tensor([[0, 1, 1], [0, 0, 2], [1, -1, 1]], [1.0, 2.0, 3.0], size=(2, 3, 3),
                             check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        blas.bmm(t, np.ones((2, 3, 2)))
    assert e.value.invariant == "C4"


def test_unchecked_for_hspmm_smm(rng):
    t = st.sparse_csr_tensor([0, 1, 2], [0, 9], [1.0, 2.0], size=(2, 3), check_invariants=False)
    for op in (blas.hspmm, blas.smm):
        with pytest.raises(st.InvariantError) as e:
            op(t, np.ones((3, 2)))
        assert e.value.invariant == "5.5"


# -- addmm ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "float16", "complex128"])
def test_addmm(layout, dtype, rng):
    a, s = random_sparse(rng, layout, dtype)
    d = dense_operand(rng, (a.shape[1], 4), dtype)
    inp = dense_operand(rng, (a.shape[0], 4), dtype)
    rt = np.dtype(dtype)
    wt = np.float32 if rt == np.float16 else rt
    for beta, alpha in ((1, 1), (2, 3), (0, 1), (-1, 2)):
        got = blas.addmm(inp, s, d, beta=beta, alpha=alpha)
        want = (beta * inp.astype(wt) + alpha * (a.astype(wt) @ d.astype(wt))).astype(rt)
        assert_close(got, want)
    row = dense_operand(rng, (4,), dtype)  # input broadcasts
    assert_close(blas.addmm(row, s, d), (row.astype(wt) + a.astype(wt) @ d.astype(wt)).astype(rt))
    x = dense_operand(rng, (3, a.shape[0]), dtype)  # dense @ sparse
    inp2 = dense_operand(rng, (3, a.shape[1]), dtype)
    assert_close(blas.addmm(inp2, x, s), (inp2.astype(wt) + x.astype(wt) @ a.astype(wt)).astype(rt))


def test_addmm_beta_zero_ignores_nan(rng):
    a, s = random_sparse(rng, "csr", np.float64)
    d = rng.standard_normal((a.shape[1], 2))
    inp = np.full((a.shape[0], 2), np.nan)
    got = blas.addmm(inp, s, d, beta=0)
    assert not np.isnan(got).any()
    assert_close(got, a @ d)
    assert np.isnan(blas.addmm(inp, s, d, beta=1)).all()


def test_addmm_scalar_rules(rng):
    a, s = random_sparse(rng, "csr", np.int64)
    d = dense_operand(rng, (a.shape[1], 2), np.int64)
    inp = np.ones((a.shape[0], 2), np.int64)
    with pytest.raises(TypeError, match="alpha must be an integer"):
        blas.addmm(inp, s, d, alpha=1.5)
    with pytest.raises(TypeError, match="beta must be real"):
        blas.addmm(inp.astype(float), s, d.astype(float), beta=1j)
    assert_close(blas.addmm(inp, s, d, alpha=-2, beta=3), 3 * inp - 2 * (a @ d))
    ab, sb = random_sparse(rng, "csr", bool)
    db = dense_operand(rng, (ab.shape[1], 2), bool)
    ib = np.zeros((ab.shape[0], 2), bool)
    assert_close(blas.addmm(ib, sb, db), ab @ db)
    with pytest.raises(TypeError, match="bool"):
        blas.addmm(ib, sb, db, alpha=2)


def test_addmm_mixed_dtype_inputs(rng):
    a, s = random_sparse(rng, "csr", np.float32)
    d = rng.standard_normal((a.shape[1], 3)).astype(np.float32)
    inp = rng.standard_normal((a.shape[0], 3))  # float64 input promotes the result
    got = blas.addmm(inp, s, d)
    assert got.dtype == np.float64
    assert_close(got, inp + a.astype(np.float64) @ d.astype(np.float64))


# -- hspmm / smm / sspaddmm ------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_hspmm_smm(layout, dtype, index_dtype, rng):
    a, s = random_sparse(rng, layout, dtype, index_dtype, blocks=(5, 4), nnz=6)
    d = dense_operand(rng, (a.shape[1], 3), dtype)
    want = reference(a, d, dtype)
    h = blas.hspmm(s, d)
    assert (h.sparse_dim, h.dense_dim, h.shape) == (1, 1, want.shape)
    h.check_invariants()
    assert h.index_dtype == s.index_dtype
    assert_close(h.to_dense(), want)
    csr = s.to_sparse_csr().to_dense() if layout != "coo" else a
    rows = np.flatnonzero((csr != 0).any(axis=1)) if layout in ("coo", "csr", "csc") else h.indices()[0]
    np.testing.assert_array_equal(h.indices()[0], rows)
    m = blas.smm(s, d)
    m.check_invariants()
    assert m.sparse_dim == 2 and m.is_coalesced() and m.nnz == h.nnz * 3
    assert_close(m.to_dense(), want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_sspaddmm(layout, rng):
    a, s = random_sparse(rng, layout, np.float64, blocks=(4, 3), nnz=5)
    M, K = a.shape
    d = rng.standard_normal((K, 2))
    inp_dense = np.zeros((M, 2))
    inp_dense[0, 1] = 7.0
    inp_dense[M - 1, 0] = -1.0
    inp = st.from_dense(inp_dense, "coo")
    r = blas.sspaddmm(inp, s, d, beta=2, alpha=3)
    r.check_invariants()
    assert_close(r.to_dense(), 2 * inp_dense + 3 * (a @ d))
    np.testing.assert_array_equal(r.indices()[:, :2], inp.indices())  # input entries first, as torch
    assert not r.is_coalesced()
    assert_close(r.coalesce().to_dense(), 2 * inp_dense + 3 * (a @ d))
    with pytest.raises(ValueError, match="does not match"):
        blas.sspaddmm(st.from_dense(np.zeros((M + 1, 2)), "coo"), s, d)
    r0 = blas.sspaddmm(st.from_dense(np.zeros((M, 2)), "csr"), s, d)  # any layout of input
    assert r0.is_coalesced()
    assert_close(r0.to_dense(), a @ d)


# -- linear ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
def test_linear(layout, dtype, rng):
    w_dense, w = random_sparse(rng, layout, dtype, blocks=(3, 4))
    out_f, in_f = w_dense.shape
    for lead in ((), (5,), (2, 3)):
        x = dense_operand(rng, lead + (in_f,), dtype)
        b = dense_operand(rng, (out_f,), dtype)
        assert_close(blas.linear(x, w), reference(x, w_dense.T, dtype))
        wt = np.float32 if np.dtype(dtype) == np.float16 else dtype
        want = (x.astype(wt) @ w_dense.T.astype(wt) + b.astype(wt)).astype(dtype)
        assert_close(blas.linear(x, w, b), want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_op_modifies_its_inputs(layout, rng):
    a, s = random_sparse(rng, layout, np.float32)
    M, K = a.shape
    d = rng.standard_normal((K, 3)).astype(np.float32)
    x = rng.standard_normal((2, K)).astype(np.float32)
    inp = rng.standard_normal((M, 3)).astype(np.float32)
    inp_s = st.from_dense(inp, "coo")
    bias = rng.standard_normal(M).astype(np.float32)
    arrays = [d, x, inp, bias]
    copies = [arr.copy() for arr in arrays]
    before, before_inp = snapshot(s), snapshot(inp_s)
    blas.addmm(inp, s, d, beta=2, alpha=3)
    blas.hspmm(s, d)
    blas.smm(s, d)
    blas.sspaddmm(inp_s, s, d, beta=2, alpha=3)
    blas.linear(x, s, bias)
    blas.matmul(d.T, s.mT if layout != "coo" else s.transpose(0, 1))
    assert_unchanged(s, before)
    assert_unchanged(inp_s, before_inp)
    for arr, copy in zip(arrays, copies):
        np.testing.assert_array_equal(arr, copy)


# -- sparse @ sparse ---------------------------------------------------------------------------
def test_sparse_sparse_delegates(rng):
    a, s = random_sparse(rng, "csr", np.float64)
    try:
        from sparsetensor.ops.spgemm import spgemm  # noqa: F401
    except ImportError:
        with pytest.raises(NotImplementedError, match="spgemm"):
            blas.matmul(s, s.mT)
    else:
        assert_close(blas.matmul(s, s.mT).to_dense(), a @ a.T)


# -- PyTorch conformance ------------------------------------------------------------------------
TORCH_MM = {  # layout -> dtypes torch 2.13 multiplies with a dense matrix on the CPU
    "coo": ["float32", "float64", "int32", "int64", "int8", "float16", "complex64"],
    "csr": ["float32", "float64", "complex64", "complex128"],
    "csc": ["float32", "float64", "complex64"],
    "bsr": ["float32", "float64", "complex64"],
}


@requires_torch
@pytest.mark.parametrize("layout, dtype", [(lay, dt) for lay, dts in TORCH_MM.items() for dt in dts])
def test_mm_matches_torch(layout, dtype, rng):
    if layout == "bsr":  # torch (MKL) takes square blocks only
        a = random_dense(rng, blocks=(4, 5), blocksize=(2, 2), dtype=np.dtype(dtype), nnz=7)
        s = st.from_dense(a, "bsr", blocksize=(2, 2))
    else:
        a, s = random_sparse(rng, layout, dtype)
    d = dense_operand(rng, (a.shape[1], 5), dtype)
    ts = st.to_torch(s, copy=True)
    want = torch.mm(ts, torch.from_numpy(d)).numpy()
    assert_close(blas.mm(s, d), want)
    want_v = torch.mv(ts, torch.from_numpy(d[:, 0].copy())).numpy()
    assert_close(blas.mv(s, d[:, 0]), want_v)
    inp = dense_operand(rng, (a.shape[0], 5), dtype)
    if np.dtype(dtype).kind in "fc":
        want_a = torch.addmm(torch.from_numpy(inp), ts, torch.from_numpy(d), beta=2, alpha=3).numpy()
        assert_close(blas.addmm(inp, s, d, beta=2, alpha=3), want_a)


@requires_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_bmm_coo_matches_torch(dtype, rng):
    a = np.zeros((3, 4, 5), dtype)
    a[0, 1, 2] = 3
    a[2, 0, 4] = 2
    a[2, 3, 0] = 5
    s = st.from_dense(a, "coo")
    d = dense_operand(rng, (3, 5, 2), dtype)
    want = torch.bmm(st.to_torch(s, copy=True), torch.from_numpy(d)).numpy()
    assert_close(blas.bmm(s, d), want)


@requires_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_hspmm_smm_sspaddmm_match_torch(dtype, rng):
    a, s = random_sparse(rng, "coo", dtype, blocks=(6, 4), nnz=7)
    d = dense_operand(rng, (4, 3), dtype)
    ts, td = st.to_torch(s, copy=True), torch.from_numpy(d)
    # torch flags these results uncoalesced (they are sorted and distinct: ours are flagged coalesced)
    h, th = blas.hspmm(s, d), torch.hspmm(ts, td)
    np.testing.assert_array_equal(h.indices(), th._indices().numpy())
    assert_close(h.values(), th._values().numpy())
    m, tm = blas.smm(s, d), torch.smm(ts, td)
    np.testing.assert_array_equal(m.indices(), tm._indices().numpy())
    assert_close(m.values(), tm._values().numpy())
    inp = st.sparse_coo_tensor([[0, 0, 5], [2, 2, 1]], np.array([1, 2, 3], dtype), size=(6, 3),
                               check_invariants=True)  # uncoalesced: kept as it is
    tr = torch.sspaddmm(st.to_torch(inp, copy=True), ts, td, beta=2, alpha=3)
    r = blas.sspaddmm(inp, s, d, beta=2, alpha=3)
    np.testing.assert_array_equal(r.indices(), tr._indices().numpy())
    assert_close(r.values(), tr._values().numpy())
    assert r.is_coalesced() == tr.is_coalesced()


@requires_torch
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_linear_matches_torch(layout, rng):
    w_dense, w = random_sparse(rng, layout, np.float32, blocks=(5, 7))
    x = rng.standard_normal((2, 3, 7)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    want = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w_dense), torch.from_numpy(b)).numpy()
    assert_close(blas.linear(x, w, b), want)


# -- the kernel's own argument checks ---------------------------------------------------------
def test_kernel_argument_checks():
    c, p = np.array([[0, 1]]), np.array([[0]])
    v = np.ones((1, 1, 1))
    d, out = np.ones((1, 1, 2)), np.empty((1, 1, 2))
    z = np.zeros(1, np.int64)
    assert _spmm.spmm(c, p, v, d, out, z, z, (1, 1), True, 1) is None
    np.testing.assert_array_equal(out, [[[1.0, 1.0]]])
    with pytest.raises(TypeError, match="dtype"):
        _spmm.spmm(c, p, v.astype(np.float16), d, out, z, z, (1, 1), True, 1)
    with pytest.raises(TypeError, match="dense must have dtype"):
        _spmm.spmm(c, p, v, d.astype(np.float32), out, z, z, (1, 1), True, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        _spmm.spmm(c, p, v, np.ones((1, 1, 4))[:, :, ::2], out, z, z, (1, 1), True, 1)
    with pytest.raises(ValueError, match="sbatch"):
        _spmm.spmm(c, p, v, d, out, z + 1, z, (1, 1), True, 1)
    with pytest.raises(ValueError, match="compressed must have shape"):
        _spmm.spmm(np.array([[0, 1, 1]]), p, v, d, out, z, z, (1, 1), True, 1)
    with pytest.raises(TypeError, match="logical"):
        _spmm.spmm(c, p, v, d, out, z, z, (1, 1), True, 1, logical=True)
    assert _spmm.find_broken_index(c, p, 1) is None
    assert _spmm.find_broken_index(np.array([[0, 2]]), p, 1) == ("5.3", 0, 1, -1, 2)


@pytest.mark.parametrize("module", [blas, _spmm], ids=lambda m: m.__name__)
def test_doctests(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0


def test_zero_dim_coo_refused():
    s = st.sparse_coo_tensor(np.zeros((0, 1), np.int64), np.array([2.0]), size=())
    with pytest.raises(ValueError, match="at least 1-d"):
        blas.matmul(s, np.ones(3))


def test_batched_coo_product_checks_an_unchecked_coalesced_operand():
    """A row index past M of an unchecked, coalesced-flagged batched COO must raise C5, not
    spill into the next batch's rows."""
    idx = np.array([[0, 1], [3, 0], [0, 1]])  # batch, row, col: row 3 of a 2-row matrix
    s = st.sparse_coo_tensor(idx, np.ones(2), size=(2, 2, 2), check_invariants=False, is_coalesced=True)
    with pytest.raises(st.InvariantError, match="C5"):
        s @ np.ones((2, 2, 3))
