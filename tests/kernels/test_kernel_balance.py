"""Row-parallel kernels on skewed rows: the nnz-balanced splits (_balance.pxd) of the transpose,
products, merges, to_dense and segment reductions, against SciPy/NumPy oracles.

Every matrix has hub rows (one row holding a large share of the entries), empty rows and
ordinary rows, and is big enough that the kernels run on several threads; each is run
with 1, 2 and 3 threads, int32 and int64 indices.
"""
import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._lib import _dense, _elementwise, _reduce, _spmm, _transpose

sp = pytest.importorskip("scipy.sparse")

INDEX_DTYPES = [np.int32, np.int64]
THREADS = [1, 2, 3]


def skewed(rng, n, m, nnz, hubs=2, empty=0.2, dtype=np.float64):
    """A canonical (sorted, distinct) scipy CSR n x m with `hubs` rows holding about half the
    entries, a share `empty` of empty rows, the rest spread over the other rows."""
    hub_rows = rng.choice(n, size=hubs, replace=False)
    rows = [np.repeat(hub_rows, m)]
    cols = [np.tile(np.arange(m), hubs)]
    live = np.setdiff1d(np.flatnonzero(rng.random(n) >= empty), hub_rows)
    k = max(0, nnz - hubs * m)
    rows.append(rng.choice(live, size=k) if live.size else np.zeros(0, np.int64))
    cols.append(rng.integers(0, m, size=rows[-1].size))
    r, c = np.concatenate(rows), np.concatenate(cols)
    a = sp.csr_array((np.ones(r.size), (r, c)), shape=(n, m))
    a.sum_duplicates()
    a.sort_indices()
    a.data = (rng.standard_normal(a.nnz) + 2).astype(dtype)
    return a


def canon(a, index_dtype, batch=1):
    """(compressed (B, n + 1), plain (B, nnz), values (B, nnz)) of a, repeated over `batch`."""
    c = np.tile(a.indptr.astype(index_dtype), (batch, 1))
    p = np.tile(a.indices.astype(index_dtype), (batch, 1))
    return c, p, np.tile(a.data, (batch, 1))


# -- transpose ---------------------------------------------------------------------------------
MODES = {
    "direct": dict(direct_max_plain=1 << 40, direct_grain=1),
    "bucketed": dict(direct_max_plain=0, bucketed_min_bytes=0, direct_max_band=-1),
    "banded": dict(direct_max_plain=0, bucketed_min_bytes=0, direct_max_band=1 << 40),
    "default": {},
}


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype,E,batch", [(np.float64, 1, 1), (np.uint8, 1, 3), (np.complex128, 1, 2),
                                           (np.float32, 3, 1), (np.int16, 2, 5)], ids=str)
def test_transpose_modes_match_scipy(rng, mode, index_dtype, dtype, E, batch, threads):
    a = skewed(rng, 3000, 5000, 60_000)
    c, p, _ = canon(a, index_dtype, batch)
    vals = rng.integers(1, 100, size=(batch, a.nnz, E)).astype(dtype)
    raw = vals.view(np.dtype(f"u{np.dtype(dtype).itemsize}") if np.dtype(dtype).itemsize <= 8 else np.uint64)
    if np.dtype(dtype).itemsize == 16:
        raw = raw.reshape(batch, a.nnz, 2 * E)
    old = _transpose._tune(**MODES[mode])
    try:
        oc, op, ov = _transpose.compressed_transpose(c, p, raw, a.shape[1], threads)
    finally:
        _transpose._tune(*old)
    ref = a.tocsc()
    order = sp.csr_array((np.arange(a.nnz) + 1.0, a.indices, a.indptr), shape=a.shape).tocsc().data.astype(np.int64) - 1
    assert oc.dtype == index_dtype and op.dtype == index_dtype
    for b in range(batch):
        np.testing.assert_array_equal(oc[b], ref.indptr)
        np.testing.assert_array_equal(op[b], ref.indices)
        np.testing.assert_array_equal(ov[b].view(dtype).reshape(a.nnz, E), vals[b][order])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("shape,nnz", [((0, 7), 0), ((7, 0), 0), ((5, 9), 0), ((1, 1), 1), ((4000, 1), 3000)])
def test_transpose_modes_small_and_empty(rng, mode, index_dtype, shape, nnz):
    n, m = shape
    flat = np.sort(rng.choice(n * m, size=nnz, replace=False)) if n * m else np.zeros(0, np.int64)
    a = sp.csr_array((np.arange(1.0, nnz + 1), np.divmod(flat, m)), shape=shape)
    c, p, v = canon(a, index_dtype)
    old = _transpose._tune(**MODES[mode])
    try:
        for threads in THREADS:
            oc, op, ov = _transpose.compressed_transpose(c, p, v.view(np.uint64)[..., None], m, threads)
            ref = a.tocsc()
            np.testing.assert_array_equal(oc[0], ref.indptr)
            np.testing.assert_array_equal(op[0], ref.indices)
            np.testing.assert_array_equal(ov[0, :, 0].view(np.float64), ref.data)
    finally:
        _transpose._tune(*old)


def test_tune_returns_and_restores():
    old = _transpose._tune()
    assert _transpose._tune(direct_grain=5, direct_max_band=-1) == old
    assert _transpose._tune(*old)[4:] == (5, -1)  # (direct_grain, direct_max_band)
    assert _transpose._tune() == old


def test_aligned_empty_is_aligned():
    for shape, dtype in [((3, 5), np.int32), ((0,), np.float64), ((2, 0, 3), np.uint8), ((7,), np.complex128)]:
        a = _transpose._aligned_empty(shape, dtype)
        assert a.shape == shape and a.dtype == dtype
        assert a.size == 0 or a.__array_interface__["data"][0] % 64 == 0  # nothing is stored to an empty one


# -- products ------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("N", [1, 5])
@pytest.mark.parametrize("rows", [True, False])
def test_spmm_skewed(rng, index_dtype, N, rows, threads):
    a = skewed(rng, 4000, 3000, 80_000)
    m = a if rows else a.T.tocsr()  # the compressed index of a csc A is that of A^T as csr
    c, p, v = canon(m, index_dtype)
    M, K = a.shape
    dense = rng.standard_normal((1, K, N))
    out = np.full((1, M, N), np.nan)
    z = np.zeros(1, np.int64)
    assert _spmm.spmm(c, p, v[..., None], dense, out, z, z, (1, 1), rows, threads) is None
    np.testing.assert_allclose(out[0], a @ dense[0], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("threads", [2, 3])
def test_spmm_skewed_broken_index_found(rng, threads):
    a = skewed(rng, 4000, 3000, 80_000)
    c, p, v = canon(a, np.int32)
    p[0, -1] = 3000  # the last entry's column is out of range
    out = np.empty((1, 4000, 1))
    z = np.zeros(1, np.int64)
    found = _spmm.spmm(c, p, v[..., None], np.ones((1, 3000, 1)), out, z, z, (1, 1), True, threads)
    assert found[0] == "5.5" and found[3] == a.nnz - 1


# -- to_dense --------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("rows", [True, False])
@pytest.mark.parametrize("D,batch", [(1, 1), (2, 3)])
def test_to_dense_skewed(rng, index_dtype, rows, D, batch, threads):
    a = skewed(rng, 700, 600, 40_000)
    m = a if rows else a.T.tocsr()
    c, p, v = canon(m, index_dtype, batch)
    vals = np.repeat(v[..., None], D, axis=-1) * np.arange(1, D + 1)
    out = np.zeros((batch,) + a.shape + (D,))
    assert _dense.compressed_to_dense(c, p, vals.reshape(batch, -1, 1, 1, D), out, rows, False, threads) is None
    for b in range(batch):
        for d in range(D):
            np.testing.assert_array_equal(out[b, :, :, d], a.toarray() * (d + 1))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_to_dense_skewed_broken_index_reported_as_serially(rng, threads):
    a = skewed(rng, 700, 600, 40_000)
    c, p, v = canon(a, np.int64)
    p[0, a.nnz // 2] = -1
    c[0, 650] = c[0, 651] + 5  # and a compressed entry above its successor, later on
    out = np.zeros((1,) + a.shape + (1,))
    found = _dense.compressed_to_dense(c, p, v.reshape(1, -1, 1, 1, 1), out, True, False, threads)
    assert found[0] == "5.4" and found[3] == a.nnz // 2


# -- merges ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_merges_skewed(rng, index_dtype, op, threads):
    a = skewed(rng, 3000, 2000, 50_000)
    b = skewed(rng, 3000, 2000, 30_000, hubs=3)
    ta = st.sparse_csr_tensor(a.indptr.astype(index_dtype), a.indices.astype(index_dtype), a.data, a.shape)
    tb = st.sparse_csr_tensor(b.indptr.astype(index_dtype), b.indices.astype(index_dtype), b.data, b.shape)
    got = getattr(st, op)(ta, tb, threads=threads)
    ref = {"add": a + b, "sub": a - b, "mul": a.multiply(b)}[op]
    np.testing.assert_allclose(got.to_dense(), ref.toarray(), rtol=1e-15)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("union", [True, False])
def test_merge_kernels_batched_skewed(rng, index_dtype, union, threads):
    B, E = 3, 2
    a = skewed(rng, 2500, 1500, 40_000)
    b = skewed(rng, 2500, 1500, 20_000, hubs=1)
    ac, ap, av = canon(a, index_dtype, B)
    bc, bp, bv = canon(b, index_dtype, B)
    av = np.repeat(av[..., None], E, axis=-1)
    bv = np.repeat(bv[..., None], E, axis=-1)
    counts = np.zeros((B, a.shape[0]), np.int64)
    _elementwise.merge_count(ac, ap, bc, bp, union, counts, threads)
    ref = (a + b) if union else a.multiply(b).tocsr()
    ref.sort_indices()
    np.testing.assert_array_equal(counts[1], np.diff(ref.indptr))
    oc = np.zeros((B, a.shape[0] + 1), index_dtype)
    np.cumsum(counts, axis=1, out=oc[:, 1:])
    so = int(oc[0, -1])
    op_, ov = np.empty((B, so), index_dtype), np.empty((B, so, E))
    code = _elementwise.ADD if union else _elementwise.MUL
    _elementwise.merge_fill(ac, ap, av, bc, bp, bv, oc, op_, ov, code, union, 1.0, False, threads)
    for k in range(B):
        np.testing.assert_array_equal(op_[k], ref.indices)
        np.testing.assert_allclose(ov[k, :, 1], ref.data, rtol=1e-15)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_merge_union_skewed(rng, index_dtype, threads):
    a = skewed(rng, 2500, 1500, 40_000)
    b = skewed(rng, 2500, 1500, 20_000, hubs=1)
    ac, ap, av = canon(a, index_dtype)
    bc, bp, bv = canon(b, index_dtype)
    ub = a.nnz + b.nnz
    oc, op_, ov = np.zeros((1, a.shape[0] + 1), index_dtype), np.empty((1, ub), index_dtype), np.empty((1, ub, 1))
    nnz = _elementwise.merge_union(ac, ap, av[..., None], bc, bp, bv[..., None], oc, op_, ov, _elementwise.ADD, 1.0, False, threads)
    ref = a + b
    ref.sort_indices()
    assert nnz == ref.nnz
    np.testing.assert_array_equal(oc[0], ref.indptr)
    np.testing.assert_array_equal(op_[0, :nnz], ref.indices)
    np.testing.assert_allclose(ov[0, :nnz, 0], ref.data, rtol=1e-15)


# -- segment reductions -----------------------------------------------------------------------------
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("permuted", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_segments_skewed(rng, permuted, dtype, threads):
    sizes = rng.integers(0, 5, size=5000)
    sizes[[7, 4000]] = 30_000  # hub segments
    sizes[rng.random(5000) < 0.2] = 0
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n, K, E = int(off[-1]), 2, 3
    x = rng.integers(-50, 50, size=(n, K * E)).astype(dtype)
    perm = rng.permutation(n).astype(np.int64) if permuted else np.empty(0, np.int64)
    rows = x[perm] if permuted else x
    seg = np.repeat(np.arange(5000), sizes)
    ref = np.zeros((5000, E), dtype)
    np.add.at(ref, seg, rows.reshape(n, K, E).sum(axis=1))
    out = np.empty((5000, E), dtype)
    _reduce.segment_sum(off, perm, x, out, threads)
    np.testing.assert_array_equal(out, ref)
    mx = np.full((5000, E), np.iinfo(np.int32).min if dtype == np.int32 else -np.inf, dtype)
    ref_mx = mx.copy()
    np.maximum.at(ref_mx, seg, rows.reshape(n, K, E).max(axis=1))
    _reduce.segment_minmax(off, perm, x, mx, True, threads)
    np.testing.assert_array_equal(mx, ref_mx)


def test_segment_checks_stay():
    x, out = np.ones((4, 1)), np.empty((2, 1))
    none = np.empty(0, np.int64)
    with pytest.raises(ValueError, match="non-decreasing"):
        _reduce.segment_sum(np.array([0, 3, 2], np.int64), none, x, out, 2)
    with pytest.raises(ValueError, match="non-decreasing"):
        _reduce.segment_sum(np.array([-1, 1, 2], np.int64), none, x, out, 2)
    with pytest.raises(ValueError, match="non-decreasing"):
        _reduce.segment_sum(np.array([0, 1, 5], np.int64), none, x, out, 2)
    with pytest.raises(ValueError, match="perm"):
        _reduce.segment_sum(np.array([0, 2, 4], np.int64), np.array([0, 1, 2, 4], np.int64), x, out, 2)
    with pytest.raises(ValueError, match="perm"):
        _reduce.segment_sum(np.array([0, 2, 4], np.int64), np.array([0, 1, -2, 3], np.int64), x, out, 2)
    with pytest.raises(ValueError, match="perm"):
        _reduce.segment_sum(np.array([0, 2, 4], np.int64), np.array([0, 1, 2], np.int64), x, out, 2)


def test_spmm_wrapper_checks_stay():
    c, p, v = np.array([[0, 1, 2]]), np.array([[1, 0]]), np.array([[[2.0], [3.0]]])
    d, out, z = np.ones((1, 2, 1)), np.empty((1, 2, 1)), np.zeros(1, np.int64)
    with pytest.raises(TypeError, match="compressed must be int32 or int64"):
        _spmm.spmm(c.astype(np.int16), p.astype(np.int16), v, d, out, z, z, (1, 1), True, 2)
    with pytest.raises(TypeError, match="plain must have dtype int64"):
        _spmm.spmm(c, p.astype(np.int32), v, d, out, z, z, (1, 1), True, 2)
    with pytest.raises(TypeError, match="kernel dtype"):
        _spmm.spmm(c, p, v.astype(np.float16), d.astype(np.float16), out.astype(np.float16), z, z, (1, 1), True, 2)
    with pytest.raises(ValueError, match="C-contiguous"):
        _spmm.spmm(c, p, v, np.ones((1, 1, 4))[:, :, ::2].reshape(1, 2, 1)[:, ::-1], out, z, z, (1, 1), True, 2)
    with pytest.raises(ValueError, match="sbatch must be in"):
        _spmm.spmm(c, p, v, d, out, z + 1, z, (1, 1), True, 2)
    with pytest.raises(ValueError, match="blocksize must be positive"):
        _spmm.spmm(c, p, v, d, out, z, z, (0, 1), True, 2)
    assert _spmm.spmm(c, p, v, d, out, z, z, (1, 1), True, 2) is None
    np.testing.assert_array_equal(out.ravel(), [2.0, 3.0])


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("E", [1, 4])
def test_transpose_direct_banded_and_scattered(rng, index_dtype, E, threads):
    """Direct mode splits a banded matrix's scatter by slices and any other by ranges of plain
    indices (every thread reading every slice): both against SciPy, with a hub row."""
    n = 6000
    band = sp.diags_array([np.ones(n - abs(k)) for k in range(-3, 4)], offsets=list(range(-3, 4)), shape=(n, n))
    for a in (sp.csr_array(band), skewed(rng, n, n, 50_000)):
        a = sp.csr_array(a)
        a.sort_indices()
        c, p, _ = canon(a, index_dtype)
        vals = rng.integers(1, 1 << 30, size=(1, a.nnz, E)).astype(np.uint32)
        old = _transpose._tune(**MODES["direct"])
        try:
            oc, op, ov = _transpose.compressed_transpose(c, p, vals, n, threads)
        finally:
            _transpose._tune(*old)
        ref = a.tocsc()
        order = sp.csr_array((np.arange(a.nnz) + 1.0, a.indices, a.indptr), shape=a.shape).tocsc().data
        np.testing.assert_array_equal(oc[0], ref.indptr)
        np.testing.assert_array_equal(op[0], ref.indices)
        np.testing.assert_array_equal(ov[0], vals[0][order.astype(np.int64) - 1])


@pytest.mark.parametrize("threads", THREADS)
def test_transpose_far_diagonals(rng, threads):
    """Entries on a few diagonals far apart (a 3-d stencil's outer ones), large enough for the
    bucketed mode's threshold: the direct scatter takes them; against SciPy."""
    n = 100_000
    offsets = [-12_000, -1, 0, 1, 12_000]
    a = sp.csr_array(sp.diags_array([rng.random(n - abs(k)) for k in offsets], offsets=offsets, shape=(n, n)))
    a.sort_indices()
    c, p, v = canon(a, np.int32)
    oc, op, ov = _transpose.compressed_transpose(c, p, v.view(np.uint64)[..., None], n, threads)
    ref = a.tocsc()
    np.testing.assert_array_equal(oc[0], ref.indptr)
    np.testing.assert_array_equal(op[0], ref.indices)
    np.testing.assert_array_equal(ov[0, :, 0].view(np.float64), ref.data)
