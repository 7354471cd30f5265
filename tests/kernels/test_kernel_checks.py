"""The kernels' own def wrappers on mismatched or broken arguments, called directly.

Every def that takes several arrays checks them against each other before it takes a
pointer (ValueError / TypeError), and the product and to-dense kernels check invariants
5.1-5.5 themselves (the first broken one comes back as an error tuple), so that nothing
crosses into nogil unchecked whatever the caller passes. Kernels use the thread count they
are handed (the gate is sparsetensor._core._config.num_threads): tiny inputs on several threads
must give the one-thread result.
"""
import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._lib import _convert, _dense, _elementwise, _spmm, _transpose

INDEX_DTYPES = [np.int32, np.int64]
Z = np.zeros(1, np.int64)


def _spmm_args(c, p, index_dtype=np.int64, N=2, M=None, K=3):
    c = np.asarray(c, index_dtype)
    p = np.asarray(p, index_dtype)
    B, nnz = p.shape
    M = c.shape[1] - 1 if M is None else M
    v = np.arange(1, B * nnz + 1, dtype=np.float64).reshape(B, nnz, 1)
    return c, p, v, np.ones((1, K, N)), np.empty((B, M, N))


# -- 5.1 / 5.2 in the product kernel ---------------------------------------------------------
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("rows", [True, False])
def test_spmm_reports_ends(index_dtype, rows):
    # csr rows (M = 2, K = 3) or csc columns (K = 2 columns of a 3 x 2 matrix)
    shape = dict(M=2, K=3) if rows else dict(M=3, K=2)
    c, p, v, d, out = _spmm_args([[1, 1, 2]], [[0, 1]], index_dtype, **shape)
    assert _spmm.spmm(c, p, v, d, out, Z, Z, (1, 1), rows, 1) == ("5.1", 0, 0, -1, 1)
    c, p, v, d, out = _spmm_args([[0, 1, 1]], [[0, 1]], index_dtype, **shape)
    assert _spmm.spmm(c, p, v, d, out, Z, Z, (1, 1), rows, 2) == ("5.2", 0, 2, -1, 1)
    c, p, v, d, out = _spmm_args([[0, 1, 2]], [[0, 1]], index_dtype, **shape)
    assert _spmm.spmm(c, p, v, d, out, Z, Z, (1, 1), rows, 2) is None


def test_spmm_reports_ends_of_a_later_batch():
    c, p, v, d, out = _spmm_args([[0, 1, 2], [0, 1, 1]], [[0, 1], [1, 2]])
    sb = np.array([0, 1], np.int64)
    assert _spmm.spmm(c, p, v, d, out, sb, Z[[0, 0]], (1, 1), True, 1) == ("5.2", 1, 2, -1, 1)


def test_spmm_empty_pattern_checks_every_slot():
    # nnz == 0: no entry is scanned, so every compressed slot must be 0
    c, p, v, d, out = _spmm_args([[0, 1, 0]], np.zeros((1, 0)))
    found = _spmm.spmm(c, p, v, d, out, Z, Z, (1, 1), True, 1)
    assert found is not None and found[0] == "5.3"
    c, p, v, d, out = _spmm_args([[0, 0, 0]], np.zeros((1, 0)))
    assert _spmm.spmm(c, p, v, d, out, Z, Z, (1, 1), True, 1) is None
    np.testing.assert_array_equal(out, 0)


def test_spmm_checked_skips_the_end_look():
    # checked=True: the caller proved 5.1-5.6; the look at the ends is skipped (a correct
    # input gives the same product either way)
    c, p, v, d, out = _spmm_args([[0, 1, 2]], [[0, 2]])
    out2 = out.copy()
    assert _spmm.spmm(c, p, v, d, out, Z, Z, (1, 1), True, 1, checked=True) is None
    assert _spmm.spmm(c, p, v, d, out2, Z, Z, (1, 1), True, 1) is None
    np.testing.assert_array_equal(out, out2)


def test_spmm_argument_mismatches():
    c, p, v, d, out = _spmm_args([[0, 1, 2]], [[0, 1]])
    with pytest.raises(TypeError, match="plain must have dtype"):
        _spmm.spmm(c, p.astype(np.int32), v, d, out, Z, Z, (1, 1), True, 1)
    with pytest.raises(TypeError, match="compressed must be int32 or int64"):
        _spmm.spmm(c.astype(np.int16), p, v, d, out, Z, Z, (1, 1), True, 1)
    with pytest.raises(TypeError, match="kernel dtype"):
        _spmm.spmm(c, p, v.astype(">f8"), d, out, Z, Z, (1, 1), True, 1)
    with pytest.raises(TypeError, match="out must have dtype"):
        _spmm.spmm(c, p, v, d, out.astype(np.complex128), Z, Z, (1, 1), True, 1)
    with pytest.raises(TypeError, match="sbatch and dbatch"):
        _spmm.spmm(c, p, v, d, out, Z.astype(np.int32), Z, (1, 1), True, 1)
    with pytest.raises(ValueError, match="values must have shape"):
        _spmm.spmm(c, p, v[:, :1].copy(), d, out, Z, Z, (1, 1), True, 1)
    with pytest.raises(ValueError, match="do not fit"):
        _spmm.spmm(c, p, v, d, out[:, :, :1].copy(), Z, Z, (1, 1), True, 1)
    with pytest.raises(ValueError, match="sbatch and dbatch must have shape"):
        _spmm.spmm(c, p, v, d, out, Z[[0, 0]], Z, (1, 1), True, 1)
    with pytest.raises(ValueError, match="dbatch in"):
        _spmm.spmm(c, p, v, d, out, Z, Z - 1, (1, 1), True, 1)
    with pytest.raises(ValueError, match="3-dimensional"):
        _spmm.spmm(c, p, v[0], d, out, Z, Z, (1, 1), True, 1)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        _spmm.spmm(c.tolist(), p, v, d, out, Z, Z, (1, 1), True, 1)
    ro = out.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        _spmm.spmm(c, p, v, d, ro, Z, Z, (1, 1), True, 1)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.float32, np.float64,
                                   np.complex64, np.complex128])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_spmm_every_specialisation(dtype, index_dtype):
    c, p = np.array([[0, 2, 3]], index_dtype), np.array([[0, 2, 1]], index_dtype)
    v = np.array([[[1], [2], [3]]], dtype)
    d = np.arange(1, 7, dtype=dtype).reshape(1, 3, 2)
    out = np.empty((1, 2, 2), dtype)
    assert _spmm.spmm(c, p, v, d, out, Z, Z, (1, 1), True, 1) is None
    a = np.array([[1, 0, 2], [0, 3, 0]], dtype)
    np.testing.assert_array_equal(out[0], a @ d[0])


# -- 5.1 / 5.2 in the to-dense kernel (asked for: its tests pin the scan-only contract) ----------
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_to_dense_reports_ends(index_dtype):
    v = np.ones((1, 2, 1, 1, 1))
    out = np.zeros((1, 2, 3, 1))
    c, p = np.array([[1, 1, 2]], index_dtype), np.array([[0, 1]], index_dtype)
    assert _dense.compressed_to_dense(c, p, v, out, True, False, 1, check_ends=True) == ("5.1", 0, 0, -1, 1)
    assert _dense.compressed_to_dense(c, p, v, out, True, False, 1) is None  # without: 5.3-5.5 only
    c = np.array([[0, 1, 1]], index_dtype)
    assert _dense.compressed_to_dense(c, p, v, out, True, False, 2, check_ends=True) == ("5.2", 0, 2, -1, 1)
    c = np.array([[-1, 1, 2]], index_dtype)  # broken both ways: the scan's finding comes first
    assert _dense.compressed_to_dense(c, p, v, out, True, False, 1, check_ends=True) == ("5.3", 0, 0, -1, -1)


@pytest.mark.parametrize("crow,inv", [([1, 1, 2], "5.1"), ([0, 1, 1], "5.2")])
def test_unchecked_tensor_ends_raise_through_the_api(crow, inv):
    with st.check_invariants(False):
        t = st.sparse_csr_tensor(np.array(crow), np.array([0, 1]), np.array([1.0, 2.0]), size=(2, 3))
    with pytest.raises(st.InvariantError) as e:
        t.to_dense()
    assert e.value.invariant == inv
    with pytest.raises(st.InvariantError) as e:
        t @ np.ones(3)
    assert e.value.invariant == inv


# -- shapes across arrays in the conversion kernels -------------------------------------------
def _canon(index_dtype=np.int64):
    c = np.array([[0, 2, 3, 3, 4]], index_dtype)  # 4 rows, 4 columns
    p = np.array([[0, 1, 3, 2]], index_dtype)
    v = np.arange(4, dtype=np.uint64).reshape(1, 4, 1)
    return c, p, v


def test_transpose_mismatches():
    c, p, v = _canon()
    oc, op, ov = _transpose.compressed_transpose(c, p, v, 4, 2)
    np.testing.assert_array_equal(oc, [[0, 1, 2, 3, 4]])
    with pytest.raises(ValueError, match="compressed_transpose"):
        _transpose.compressed_transpose(c, p[:, :3].copy(), v, 4, 1)
    with pytest.raises(ValueError, match="compressed_transpose"):
        _transpose.compressed_transpose(c, p, v[:, :3].copy(), 4, 1)
    with pytest.raises(ValueError, match="compressed_transpose"):
        _transpose.compressed_transpose(np.tile(c, (2, 1)), p, v, 4, 1)
    with pytest.raises(ValueError, match="compressed_transpose"):
        _transpose.compressed_transpose(c, p, v, -1, 1)


def test_group_and_expand_mismatches():
    c, p, v = _canon()
    counts = np.zeros((1, 2), np.int64)
    _convert.group_count(c, p, 2, 2, counts, 1)
    np.testing.assert_array_equal(counts, [[2, 1]])
    with pytest.raises(ValueError, match="group_count"):
        _convert.group_count(c, p, 2, 2, np.zeros((1, 3), np.int64), 1)
    with pytest.raises(ValueError, match="group_count"):
        _convert.group_count(c, p, 3, 2, np.zeros((1, 1), np.int64), 1)  # 4 rows are not 3-row slices
    with pytest.raises(ValueError, match="block geometry"):
        _convert.group_count(c, p, 0, 2, counts, 1)
    oc = np.array([[0, 2, 3]], np.int64)
    op, ov = np.empty((1, 3), np.int64), np.zeros((1, 3, 4), np.uint64)
    _convert.group_fill(c, p, v, 2, 2, 2, 1, oc, op, ov, 1)
    np.testing.assert_array_equal(op, [[0, 1, 1]])
    with pytest.raises(ValueError, match="group_fill"):
        _convert.group_fill(c, p, v, 2, 2, 2, 1, oc, op, np.zeros((1, 3, 2), np.uint64), 1)
    with pytest.raises(ValueError, match="group_fill"):
        _convert.group_fill(c, p, v[:, :2].copy(), 2, 2, 2, 1, oc, op, ov, 1)
    with pytest.raises(ValueError, match="out_compressed"):
        _convert.group_fill(c, p, v, 2, 2, 2, 1, np.array([[0, 5, 3]], np.int64), op, ov, 1)
    with pytest.raises(ValueError, match="out_compressed"):
        _convert.group_fill(c, p, v, 2, 2, 2, 1, np.array([[0, 2, 2]], np.int64), op, ov, 1)
    with pytest.raises(ValueError, match="block geometry"):
        _convert.group_fill(c, p, v, 2, 2, 2, 2, oc, op, ov, 1)  # item (1, 1) would leave its block
    bp, bv = op[:, :1].copy(), ov[:, :1].copy()  # one 2 x 2 block: block column 0
    ec, eplain, ev = np.empty((1, 3), np.int64), np.empty((1, 4), np.int64), np.empty((1, 4, 1), np.uint64)
    _convert.compressed_expand(np.array([[0, 1]], np.int64), bp, bv, 2, 2, 2, 1, ec, eplain, ev, 1)
    np.testing.assert_array_equal(ec, [[0, 2, 4]])
    with pytest.raises(ValueError, match="compressed_expand"):
        _convert.compressed_expand(np.array([[0, 1]], np.int64), bp, bv, 2, 2, 2, 1, ec, eplain[:, :3].copy(),
                                   ev, 1)
    with pytest.raises(ValueError, match="compressed_expand"):
        _convert.compressed_expand(np.array([[0, 1]], np.int64), bp, bv[:, :, :2].copy(), 2, 2, 2, 1, ec, eplain,
                                   ev, 1)


def test_coo_conversion_mismatches():
    c, p, v = _canon()
    coords = np.empty((0, 1), np.int64)
    oi, ov = np.empty((2, 4), np.int64), np.empty((4, 1), np.uint64)
    _convert.rows_to_coo(c, p, v, 1, 1, coords, oi, ov, 2)
    np.testing.assert_array_equal(oi, [[0, 0, 1, 3], [0, 1, 3, 2]])
    with pytest.raises(ValueError, match="rows_to_coo"):
        _convert.rows_to_coo(c, p, v, 1, 1, coords, oi[:, :3].copy(), ov, 1)
    with pytest.raises(ValueError, match="rows_to_coo"):
        _convert.rows_to_coo(c, p, v, 1, 1, np.empty((1, 1), np.int64), oi, ov, 1)  # no room for the batch row
    with pytest.raises(ValueError, match="rows_to_coo"):
        _convert.rows_to_coo(c, p, v, 1, 1, np.empty((0, 2), np.int64), oi, ov, 1)
    ptr = np.empty(5, np.int64)
    assert _convert.coo_to_rows(oi, np.array([4, 4], np.int64), ptr, 1) is None
    np.testing.assert_array_equal(ptr, c[0])
    with pytest.raises(ValueError, match="coo_to_rows"):
        _convert.coo_to_rows(oi, np.array([8, 4], np.int64), ptr, 1)  # ptr too short for 8 rows
    with pytest.raises(ValueError, match="coo_to_rows"):
        _convert.coo_to_rows(oi, np.array([4, 4, 4], np.int64), ptr, 1)
    with pytest.raises(ValueError, match="coo_to_rows"):
        _convert.coo_to_rows(oi[:1].copy(), np.array([4], np.int64), np.empty(1, np.int64), 1)


# -- the thread count handed in is used, also on tiny inputs -----------------------------------
@pytest.mark.parametrize("threads", [2, 3])
def test_tiny_merges_on_several_threads(threads):
    ac, ap = np.array([[0, 2, 3, 3]], np.int64), np.array([[0, 2, 1]], np.int64)
    bc, bp = np.array([[0, 1, 1, 3]], np.int64), np.array([[1, 0, 2]], np.int64)
    want = np.zeros((1, 3), np.int64)
    _elementwise.merge_count(ac, ap, bc, bp, True, want, 1)
    got = np.zeros((1, 3), np.int64)
    _elementwise.merge_count(ac, ap, bc, bp, True, got, threads)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, [[3, 1, 2]])
    av, bv = np.ones((1, 3, 1)), np.full((1, 3, 1), 2.0)
    oc, op, ov = np.empty((1, 4), np.int64), np.empty((1, 6), np.int64), np.empty((1, 6, 1))
    nnz = _elementwise.merge_union(ac, ap, av, bc, bp, bv, oc, op, ov, _elementwise.ADD, 1.0, False, threads)
    assert nnz == 6
    np.testing.assert_array_equal(oc, [[0, 3, 4, 6]])
    np.testing.assert_array_equal(op[0, :nnz], [0, 1, 2, 1, 0, 2])
    np.testing.assert_array_equal(ov[0, :nnz, 0], [1, 2, 1, 1, 2, 2])


# -- shapes across arrays in the selection, join and duplicate-summing kernels ------------------
def test_select_kernel_mismatches():
    from sparsetensor._lib import _select

    with pytest.raises(ValueError, match="build_map"):
        _select.build_map(np.array([0, 5], np.int64), 3)
    first, targets = _select.build_map(np.array([2, 0], np.int64), 4)  # new 0 <- old 2, new 1 <- old 0
    np.testing.assert_array_equal(first, [0, 1, 1, 2, 2])
    c, p, v = _canon()
    rows = np.array([3, 0], np.int64)
    oc = np.array([[0, 1, 3]], np.int64)
    op, ov = np.empty((1, 3), np.int64), np.empty((1, 3, 1), np.uint64)
    _select.gather_rows(c, p, v, rows, oc, op, ov, 2)
    np.testing.assert_array_equal(op, [[2, 0, 1]])
    with pytest.raises(ValueError, match="gather_rows"):
        _select.gather_rows(c, p, v, np.array([4], np.int64), np.array([[0, 0]], np.int64), op, ov, 1)
    with pytest.raises(ValueError, match="gather_rows"):
        _select.gather_rows(c, p, v, rows, np.array([[0, 1]], np.int64), op, ov, 1)
    with pytest.raises(ValueError, match="gather_rows"):
        _select.gather_rows(c, p, v[:, :3].copy(), rows, oc, op, ov, 1)
    starts, counts = np.empty((1, 4), np.int64), np.empty((1, 4), np.int64)
    _select.plain_range(c, p, 1, 3, starts, counts, 2)
    np.testing.assert_array_equal(counts, [[1, 0, 0, 1]])
    with pytest.raises(ValueError, match="plain_range"):
        _select.plain_range(c, p, 1, 3, starts[:, :3].copy(), counts, 1)
    with pytest.raises(ValueError, match="copy_segments"):
        _select.copy_segments(p, v, starts[:, :3].copy(), np.zeros((1, 5), np.int64), 1, op, ov, 1)
    with pytest.raises(ValueError, match="plain_count"):
        _select.plain_count(c, p, first, np.empty((1, 3), np.int64), 1)
    with pytest.raises(ValueError, match="plain_fill"):
        _select.plain_fill(c, p, v, first, targets[:1].copy(), np.zeros((1, 5), np.int64), op, ov, False, 2, 1)
    with pytest.raises(ValueError, match="cat_rows"):
        _select.cat_rows(c, p, v, 0, np.zeros((1, 3), np.int64), op, ov, 1)
    with pytest.raises(ValueError, match="coo_index_select"):
        _select.coo_index_select(np.zeros((2, 3), np.int64), np.zeros((2, 1), np.uint64), 0, first, targets, 1)


def test_sort_kernel_mismatches():
    from sparsetensor._lib import _coalesce, _sum_duplicates

    idx = np.array([[0, 1, 1], [2, 0, 1]], np.int64)
    with pytest.raises(ValueError, match="coo_order"):
        _coalesce.coo_order(idx, np.array([2], np.int64), False, 1)
    error, unsorted, duplicate = _coalesce.coo_order(idx, np.array([2, 3], np.int64), False, 1)
    assert error is None and not unsorted and not duplicate
    with pytest.raises(ValueError, match="coo_head_flags"):
        _coalesce.coo_head_flags(idx, np.zeros(0, np.int64), np.zeros(2, np.int64), 1)
    with pytest.raises(ValueError, match="coo_head_flags"):
        _coalesce.coo_head_flags(idx, np.zeros(2, np.int64), np.zeros(3, np.int64), 1)
    c, p, v = _canon()
    perm = np.tile(np.arange(4, dtype=np.int64), (1, 1))
    out_p, out_v = np.empty((1, 4), np.int64), np.empty((4, 1))
    vals = np.arange(4, dtype=np.float64).reshape(4, 1)
    _sum_duplicates.compressed_write(c, c, p, perm, out_p, vals, out_v, False, 1)
    np.testing.assert_array_equal(out_p, p)
    with pytest.raises(ValueError, match="compressed_write"):
        _sum_duplicates.compressed_write(c, c, p, perm[:, :3].copy(), out_p, vals, out_v, False, 1)
    with pytest.raises(ValueError, match="compressed_write"):
        _sum_duplicates.compressed_write(c, c[:, :4].copy(), p, perm, out_p, vals, out_v, False, 1)
    with pytest.raises(ValueError, match="compressed_write"):
        _sum_duplicates.compressed_write(c, c, p, perm, out_p, vals[:3].copy(), out_v, False, 1)


def test_optim_kernel_mismatches():
    from sparsetensor._lib import _optim

    rows, run_ptr = np.array([0, 2], np.int64), np.array([0, 1, 3], np.int64)
    perm, grad = np.array([0, 1, 2], np.int64), np.ones((3, 2))
    param, scratch = np.zeros((3, 2)), np.empty((2, 2))
    sgd = _optim.OPS["sgd"]
    _optim.update_runs(sgd, rows, run_ptr, perm, grad, param, param, param, scratch, -1.0, 0, 0, 0, False, 2)
    np.testing.assert_array_equal(param, [[-1, -1], [0, 0], [-2, -2]])

    def update(**kw):
        a = dict(rows=rows, run_ptr=run_ptr, perm=perm, grad=grad, scratch=scratch, nthreads=2) | kw
        _optim.update_runs(sgd, a["rows"], a["run_ptr"], a["perm"], a["grad"], param, param, param, a["scratch"],
                           -1.0, 0, 0, 0, False, a["nthreads"])

    for bad in (dict(rows=np.array([0, 3], np.int64)), dict(run_ptr=np.array([0, 2, 1], np.int64)),
                dict(run_ptr=np.array([0, 1, 4], np.int64)), dict(perm=np.array([0, 1, 5], np.int64)),
                dict(grad=np.ones((3, 3))), dict(scratch=np.empty((1, 2))), dict(run_ptr=np.array([0, 3], np.int64))):
        with pytest.raises(ValueError, match="update_runs"):
            update(**bad)
    with pytest.raises(ValueError, match="state arrays"):
        _optim.update_runs(_optim.OPS["adagrad"], rows, run_ptr, perm, grad, param, np.zeros((2, 2)), param,
                           scratch, -1.0, 0, 0, 0, False, 1)
    grad_run, buf_src = np.array([0, 1], np.int64), np.array([-1, -1], np.int64)
    old, out = np.empty((0, 2)), np.empty((2, 2))
    with pytest.raises(ValueError, match="sgd_momentum"):
        _optim.sgd_momentum(rows, np.array([0, 2], np.int64), buf_src, run_ptr, perm, grad, old, out, param,
                            scratch, 0.1, 0.9, 0.0, False, True, False, 1)
    with pytest.raises(ValueError, match="sgd_momentum"):
        _optim.sgd_momentum(rows, grad_run, np.array([-1, 0], np.int64), run_ptr, perm, grad, old, out, param,
                            scratch, 0.1, 0.9, 0.0, False, True, False, 1)
    with pytest.raises(ValueError, match="bucket_runs"):
        _optim.bucket_runs(np.zeros(3, np.uint32), np.array([0, 2], np.int64), np.array([0, 1], np.int64), 4, 0,
                           np.empty(1, np.int64), np.empty(2, np.int64), 1)  # bucket_starts end short of 3 keys


# -- the coalescing output passes: offsets, bucket starts, positions and shapes are checked --------
def _coo_write_args(index_dtype, carry_values=False):
    """Valid coo_write arguments for 6 columns (4 distinct) of a 3 x 4 coo tensor, as coalesce makes them."""
    from sparsetensor._lib import _coalesce

    idx = np.array([[2, 0, 1, 0, 2, 1], [3, 1, 0, 1, 3, 2]], index_dtype)
    shape = np.array([3, 4], np.int64)
    vals = np.arange(1.0, 7.0).reshape(6, 1)
    found, keys, perm, offsets = _coalesce.coo_sort(idx, shape, 4, False, np.empty(0, np.int32), 2, 1)
    assert found is None
    nout = int(offsets[-1])
    out_idx = np.empty((2, nout), index_dtype)
    return dict(keys=keys, offsets=offsets, perm=perm, shape=shape, out_indices=out_idx.view(np.uint8),
                indices=np.empty((0, 0), np.uint8), values=vals, out=np.empty((nout, 1)), logical_or=False,
                nthreads=1), out_idx


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_coo_write_checks_its_arguments(index_dtype):
    from sparsetensor._lib import _coalesce

    args, out_idx = _coo_write_args(index_dtype)
    _coalesce.coo_write(**args)
    np.testing.assert_array_equal(out_idx, [[0, 1, 1, 2], [1, 0, 2, 3]])
    np.testing.assert_array_equal(args["out"][:, 0], [6, 3, 6, 6])

    def bad(match, **change):
        a, _ = _coo_write_args(index_dtype)
        a.update(change)
        with pytest.raises(ValueError, match=match):
            _coalesce.coo_write(**a)

    n = args["keys"].size
    bad("offsets", offsets=np.array([0, 2, 5], np.int64))  # ends past the 4 outputs
    bad("offsets", offsets=np.array([0, 3, 2, 4], np.int64))  # decreasing
    bad("offsets", offsets=np.array([4], np.int64))
    bad("do not match the runs", offsets=np.array([0, 1, 4], np.int64))  # chunk 0 holds 2 runs: room for 1
    bad("do not match the runs", offsets=np.array([0, 3, 4], np.int64))  # chunk 0 holds 2 runs: room for 3
    bad("perm", perm=np.array([0, 1, 2, 3, 4, 6], np.int64))  # a position past values' rows
    bad("perm", perm=np.array([0, 1, 2, -1, 4, 5], np.int64))
    bad("perm", perm=np.arange(n - 1, dtype=np.int64))
    bad("one row per key", perm=np.empty(0, np.int64), values=np.ones((n - 1, 1)))
    bad("out must be", out=np.empty((4, 2)))
    bad("out_indices", out_indices=np.empty((2, 4 * 3), np.uint8))
    bad("one size per index row", shape=np.array([3], np.int64))
    bad("at least 1", shape=np.array([0, 4], np.int64))
    bad("indices must be empty", indices=np.empty((2, 5), np.uint8))
    bad("from no keys", keys=np.empty(0, np.int64), perm=np.empty(0, np.int64), values=np.empty((0, 1)))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_coo_write_buckets_checks_its_arguments(index_dtype):
    from sparsetensor._lib import _coalesce

    rng = np.random.default_rng(3)
    n, size = 40_000, (300, 200)
    idx = np.stack([rng.integers(0, s, n) for s in size]).astype(index_dtype)
    shape = np.array(size, np.int64)
    nbits = (size[0] * size[1] - 1).bit_length()
    width = _coalesce.bucket_bits(n, nbits)
    assert width > 0
    found, lk, perm, bstart, offsets, shift, base = _coalesce.coo_bucket_sort(idx, shape, nbits, width,
                                                                              np.empty(0, np.int32), 2)
    assert found is None
    vals = rng.standard_normal((n, 2))
    nout = int(offsets[-1])

    def call(**change):
        a = dict(low_keys=lk, bucket_starts=bstart, offsets=offsets, shift=shift, base=base, perm=perm, shape=shape,
                 out_indices=np.empty((2, nout), index_dtype).view(np.uint8), values=vals, out=np.empty((nout, 2)),
                 logical_or=False, nthreads=2)
        a.update(change)
        _coalesce.coo_write_buckets(**a)
        return a

    a = call()
    keys = np.ravel_multi_index(tuple(idx.astype(np.int64)), size)
    uniq, inv = np.unique(keys, return_inverse=True)
    want = np.zeros((uniq.size, 2))
    np.add.at(want, inv, vals)
    np.testing.assert_allclose(a["out"], want)
    np.testing.assert_array_equal(a["out_indices"].view(index_dtype), np.stack(np.unravel_index(uniq, size)))

    def bad(match, **change):
        with pytest.raises(ValueError, match=match):
            call(**change)

    shifted = offsets.copy()
    shifted[1:-1] += 1  # bucket 0 gets room for one more run, the last one less
    bad("do not match the runs", offsets=shifted)
    short = offsets.copy()
    short[-1] += 5
    bad("offsets", offsets=short)
    bad("one entry per bucket", offsets=offsets[:-1].copy())
    back = bstart.copy()
    back[2] = back[1] - 1 if back[1] > 0 else back[3] + 1
    bad("bucket_starts", bucket_starts=back)
    past = bstart.copy()
    past[-1] = n + 1
    bad("bucket_starts", bucket_starts=past)
    p = perm.copy()
    p[n // 2] = n
    bad("perm", perm=p)
    bad("shift", shift=40)
    bad("out must be", out=np.empty((nout, 3)))
    bad("at least 1", shape=np.array([0, 200], np.int64))
