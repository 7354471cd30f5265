"""Constructors, attributes, dtypes, size estimation, the O(1) invariants, repr, views."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import sparsetensor as st
from conftest import COMPRESSED, INDEX_DTYPES, VALUE_DTYPES


def bsr_example(index_dtype=np.int64):
    # seed 003's example: a 4x6 matrix in 2x3 blocks
    dense = np.arange(24).reshape(4, 6)
    crow = np.array([0, 2, 4], dtype=index_dtype)
    col = np.array([0, 1, 0, 1], dtype=index_dtype)
    values = dense.reshape(2, 2, 2, 3).transpose(0, 2, 1, 3).reshape(4, 2, 3)
    return dense, crow, col, values


def test_seed_003_bsr_example():
    dense, crow, col, values = bsr_example()
    t = st.sparse_bsr_tensor(crow, col, values)
    assert t.shape == (4, 6) and t.blocksize == (2, 3) and t.nnz == 4
    assert t.layout is st.sparse_bsr and t.layout == "bsr" or t.layout.name == "bsr"
    np.testing.assert_array_equal(t.to_dense(), dense)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_bsr_transpose_is_a_view_and_commutes_with_conversion(index_dtype):
    dense, crow, col, values = bsr_example(index_dtype)
    bsr = st.sparse_bsr_tensor(crow, col, values)
    bsc = bsr.transpose(-2, -1)
    assert bsc.layout is st.sparse_bsc and bsc.shape == (6, 4) and bsc.blocksize == (3, 2)
    assert np.shares_memory(bsc.values(), bsr.values())
    assert bsc.ccol_indices() is bsr.crow_indices() and bsc.row_indices() is bsr.col_indices()
    np.testing.assert_array_equal(bsc.to_dense(), dense.T)
    # dense.to_sparse_bsr(bs).transpose == dense.T.to_sparse_bsc(bs.T)  (seed 003)
    other = st.from_dense(dense.T, "bsc", blocksize=(3, 2), index_dtype=index_dtype)
    np.testing.assert_array_equal(other.values(), bsc.values())
    np.testing.assert_array_equal(other.ccol_indices(), bsc.ccol_indices())
    bsc.check_invariants()  # column-wise contiguous values are legal (3.7)
    assert bsc.mT.layout is st.sparse_bsr and bsc.T.shape == (4, 6)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("layout", COMPRESSED)
def test_index_dtype_is_kept(layout, index_dtype):
    blocked = layout in ("bsr", "bsc")
    vals = np.ones((1, 1, 1)) if blocked else np.ones(1)
    t = st.sparse_compressed_tensor(np.array([0, 1], index_dtype), np.array([0], index_dtype), vals,
                                    layout=layout)
    assert t.index_dtype == index_dtype
    assert t.compressed_indices().dtype == index_dtype and t.plain_indices().dtype == index_dtype


def test_lists_default_to_int64_and_arrays_are_not_copied():
    t = st.sparse_csr_tensor([0, 1], [0], [1.0])
    assert t.index_dtype == np.int64
    crow, col, val = np.array([0, 1], np.int32), np.array([0], np.int32), np.array([2.0])
    t = st.sparse_csr_tensor(crow, col, val)
    assert t.values() is val
    # the indices are shared as read-only views (issue 34: a tensor's indices never change)
    for mine, yours in ((t.crow_indices(), crow), (t.col_indices(), col)):
        assert np.shares_memory(mine, yours) and not mine.flags.writeable and yours.flags.writeable


def test_noncontiguous_inputs_are_copied_not_modified():
    crow = np.array([0, 9, 1, 9, 2], np.int64)[::2]
    col = np.array([1, 0], np.int64)
    val = np.array([[1.0, 0.0], [2.0, 0.0]])[:, 0]
    t = st.sparse_csr_tensor(crow, col, val, size=(2, 2))
    assert t.crow_indices().flags.c_contiguous and t.values().flags.c_contiguous
    np.testing.assert_array_equal(t.to_dense(), [[0, 1], [2, 0]])
    np.testing.assert_array_equal(crow, [0, 1, 2])


@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_value_dtypes(dtype):
    t = st.sparse_coo_tensor([[0, 1]], np.ones(2, dtype), size=(3,))
    assert t.dtype == dtype
    assert t.to_dense().dtype == dtype
    t2 = st.sparse_csr_tensor([0, 1], [0], [1], dtype=dtype)
    assert t2.dtype == dtype and t2.values().dtype == dtype


@pytest.mark.parametrize("bad", [np.float128 if hasattr(np, "float128") else object, np.uint16, np.uint32, "U1"])
def test_unsupported_value_dtypes(bad):
    with pytest.raises(TypeError):
        st.sparse_csr_tensor([0, 1], [0], np.zeros(1, dtype=bad))


@pytest.mark.parametrize("bad", [np.int16, np.uint32, np.float64, np.bool_])
def test_unsupported_index_dtypes(bad):
    with pytest.raises(st.InvariantError) as e:
        st.sparse_csr_tensor(np.array([0, 1], bad), np.array([0], bad), [1.0])
    assert e.value.invariant == "1.3"
    with pytest.raises(st.InvariantError) as e:
        st.sparse_coo_tensor(np.array([[0]], bad), [1.0])
    assert e.value.invariant == "1.3"


def test_mixed_index_dtypes():
    with pytest.raises(st.InvariantError) as e:
        st.sparse_csr_tensor(np.array([0, 1], np.int32), np.array([0], np.int64), [1.0])
    assert e.value.invariant == "1.2"


def test_sizes_that_do_not_fit_int32():
    with pytest.raises(st.InvariantError) as e:
        st.sparse_csr_tensor(np.array([0, 0], np.int32), np.zeros(0, np.int32), [], size=(1, 2**31))
    assert e.value.invariant == "1.3"
    st.sparse_csr_tensor(np.array([0, 0], np.int64), np.zeros(0, np.int64), [], size=(1, 2**31))
    with pytest.raises(st.InvariantError):
        st.sparse_coo_tensor(np.zeros((1, 0), np.int32), [], size=(2**31 + 5,))


@pytest.mark.parametrize("layout", COMPRESSED)
def test_shape_estimation(layout):
    # seed 003: plain size = max(plain.max() + 1, max row length)
    blocked = layout in ("bsr", "bsc")
    by_rows = layout in ("csr", "bsr")
    comp = np.array([[0, 1, 3], [0, 3, 3]])
    plain = np.array([[4, 0, 2], [0, 1, 2]])
    vals = np.ones((2, 3, 2, 5, 7) if blocked else (2, 3, 7))
    t = st.sparse_compressed_tensor(comp, plain, vals, layout=layout, check_invariants=False)
    n_compressed, n_plain = 2, 5
    nr, nc = (n_compressed, n_plain) if by_rows else (n_plain, n_compressed)
    bs = (2, 5) if blocked else (1, 1)
    assert t.shape == (2, nr * bs[0], nc * bs[1], 7)
    assert (t.batch_dim, t.sparse_dim, t.dense_dim, t.blocksize) == (1, 2, 1, bs)
    # the row-length bound matters when it exceeds plain.max() + 1
    t = st.sparse_compressed_tensor([0, 3], [0, 1, 1], np.ones((3, 1, 1) if blocked else 3), layout=layout,
                                    check_invariants=False)
    assert t.shape == ((1, 3) if by_rows else (3, 1))


def test_coo_shape_estimation_and_empty():
    t = st.sparse_coo_tensor([[0, 3], [1, 0]], np.ones((2, 4)))
    assert t.shape == (4, 2, 4) and t.sparse_dim == 2 and t.dense_dim == 1
    e = st.sparse_coo_tensor([], [], (2, 3))
    assert e.shape == (2, 3) and e.nnz == 0 and e.sparse_dim == 2
    np.testing.assert_array_equal(e.to_dense(), np.zeros((2, 3)))
    z = st.sparse_coo_tensor(np.zeros((0, 3), np.int64), [1.0, 2.0, 3.0], size=())
    assert z.shape == () and z.sparse_dim == 0
    assert z.to_dense() == 6.0  # duplicates of the single element are summed


@pytest.mark.parametrize("layout", COMPRESSED)
def test_zero_size_dims_and_zero_nnz(layout):
    blocked = layout in ("bsr", "bsc")
    for batch in [(0,), (2,), ()]:
        comp = np.zeros(batch + (1,), np.int64)
        plain = np.zeros(batch + (0,), np.int64)
        vals = np.zeros(batch + (0,) + ((2, 2) if blocked else ()) + (0,))
        t = st.sparse_compressed_tensor(comp, plain, vals, size=batch + (0, 8, 0) if layout in ("csr", "bsr")
                                        else batch + (8, 0, 0), layout=layout)
        assert t.nnz == 0 and t.to_dense().shape == t.shape
        t.check_invariants()


@pytest.mark.parametrize("layout", COMPRESSED)
def test_o1_shape_invariants(layout):
    blocked = layout in ("bsr", "bsc")
    bs = (1, 2) if blocked else ()
    ok = dict(comp=np.array([0, 1, 2]), plain=np.array([0, 1]), vals=np.ones((2,) + bs))
    n = 2
    size = (n * (bs or (1, 1))[0], n * (bs or (1, 1))[1])
    st.sparse_compressed_tensor(ok["comp"], ok["plain"], ok["vals"], size, layout=layout)

    def err(comp=ok["comp"], plain=ok["plain"], vals=ok["vals"], size=size):
        with pytest.raises(st.InvariantError) as e:
            st.sparse_compressed_tensor(comp, plain, vals, size, layout=layout, check_invariants=False)
        return e.value.invariant

    assert err(size=size + (1,)) in ("3.1", "3.10")
    assert err(comp=np.array(0)) == "3.2"
    assert err(plain=np.array([[0, 1]])) == "3.3"
    assert err(vals=np.ones(bs)) == "3.4"
    assert err(comp=np.array([0, 1, 2, 2])) == "3.8"
    assert err(plain=np.array([0, 1, 1])) == "3.10"
    assert err(vals=np.ones((3,) + bs)) == "3.10"
    by_rows = layout in ("csr", "bsr")
    bigger = (size[0] + (bs or (1, 1))[0], size[1]) if by_rows else (size[0], size[1] + (bs or (1, 1))[1])
    assert err(size=bigger) == "3.8"  # one more compressed slot than the compressed indices have
    if blocked:
        assert err(size=(size[0], size[1] + 1)) == "3.1"


def test_blocked_values_contiguity_3_7():
    dense, crow, col, values = bsr_example()
    # values that are neither contiguous nor block-transposed contiguous are copied (documented)
    strided_vals = np.zeros((4, 2, 6))[:, :, ::2]
    strided_vals[...] = values
    t = st.sparse_bsr_tensor(crow, col, strided_vals)
    assert t.values().flags.c_contiguous
    np.testing.assert_array_equal(t.to_dense(), dense)
    # block-transposed contiguous values are kept as they are
    tv = np.ascontiguousarray(values.swapaxes(1, 2)).swapaxes(1, 2)
    t = st.sparse_bsr_tensor(crow, col, tv)
    assert t.values() is tv
    np.testing.assert_array_equal(t.to_dense(), dense)


def test_check_invariants_false_skips_only_on_scans():
    bad_crow = [0, 5, 1]
    t = st.sparse_csr_tensor(bad_crow, [0], [1.0], size=(2, 2), check_invariants=False)
    assert not t.is_coalesced()
    with pytest.raises(st.InvariantError):
        t.check_invariants()
    with pytest.raises(st.InvariantError) as e:  # O(1) checks still run
        st.sparse_csr_tensor(bad_crow, [0, 1], [1.0], size=(2, 2), check_invariants=False)
    assert e.value.invariant == "3.10"


def test_check_invariants_context_manager_is_context_local():
    seen = {}
    assert st.get_check_invariants() is True
    with st.check_invariants(False):
        assert st.get_check_invariants() is False
        t = st.sparse_csr_tensor([0, 2], [1, 0], [1.0, 2.0], size=(1, 2))  # 5.6 broken, not checked

        def other_thread():
            seen["thread"] = st.get_check_invariants()

        th = threading.Thread(target=other_thread)
        th.start()
        th.join()
        with pytest.raises(st.InvariantError):  # an explicit argument wins
            st.sparse_csr_tensor([0, 2], [1, 0], [1.0, 2.0], size=(1, 2), check_invariants=True)
    assert seen["thread"] is True
    assert st.get_check_invariants() is True
    with pytest.raises(st.InvariantError) as e:
        t.check_invariants()
    assert e.value.invariant == "5.6"


def test_attributes():
    t = st.sparse_bsr_tensor(np.zeros((2, 3, 3), np.int32), np.zeros((2, 3, 0), np.int32),
                             np.zeros((2, 3, 0, 2, 2, 5), np.float32), size=(2, 3, 4, 6, 5))
    assert (t.ndim, t.batch_dim, t.sparse_dim, t.dense_dim, t.nnz, t.blocksize) == (5, 2, 2, 1, 0, (2, 2))
    assert t.dtype == np.float32 and t.device == "cpu" and t.index_dtype == np.int32
    assert t.numel() == 2 * 3 * 4 * 6 * 5 and t.size(-1) == 5 and t.size() == t.shape
    with pytest.raises(TypeError):
        t.ccol_indices()
    c = st.sparse_coo_tensor([[0, 1], [1, 0]], [1, 2])
    assert (c.sparse_dim, c.dense_dim, c.batch_dim, c.blocksize) == (2, 0, 0, None)


def test_device_cuda_not_available(monkeypatch):
    from sparsetensor.cuda import _driver

    def no_driver(spec):
        raise _driver.CudaError("cuda.core.Device.get_all_devices failed: no driver")

    # the machine's own answer is not asked: on a GPU machine "cuda" is available (tests/cuda/test_cuda.py)
    monkeypatch.setattr(_driver, "get_device", no_driver)
    with pytest.raises(NotImplementedError, match="cuda"):
        st.sparse_csr_tensor([0, 1], [0], [1.0], device="cuda")
    t = st.sparse_csr_tensor([0, 1], [0], [1.0], device="cpu")
    with pytest.raises(NotImplementedError):
        t.to("cuda:1")
    assert t.cpu() is t and t.to("cpu") is t


def test_to_dtype_and_index_dtype():
    t = st.sparse_csr_tensor(np.array([0, 1], np.int64), np.array([0], np.int64), [1.5])
    assert t.to(np.float32).dtype == np.float32
    assert t.astype("int8").values()[0] == 1
    assert t.to(index_dtype=np.int32).index_dtype == np.int32
    big = st.sparse_csr_tensor(np.array([0, 0], np.int64), np.zeros(0, np.int64), [], size=(1, 2**32))
    with pytest.raises(st.InvariantError):
        big.to(index_dtype=np.int32)


def test_repr_small_and_large():
    t = st.sparse_csr_tensor([0, 1], [0], [1.0])
    r = repr(t)
    assert r.startswith("tensor(crow_indices=") and "layout=st.sparse_csr" in r and "nnz=1" in r
    big = st.from_dense(np.eye(100), "bsr", blocksize=(2, 2))
    r = repr(big)
    assert "\n" not in r and r.startswith("bsr(float64[100, 100], nnz=50") and "blocksize=(2, 2)" in r


def test_asarray_densifies():
    t = st.sparse_coo_tensor([[0, 1]], [1, 2], size=(3,))
    np.testing.assert_array_equal(np.asarray(t), [1, 2, 0])


def test_an_index_list_numpy_cannot_read_as_integers_is_named():
    with pytest.raises(st.InvariantError, match="beyond the int64 range"):
        st.sparse_coo_tensor([[2**63 + 5]], [1.0], size=(2**63 + 6,))
    with pytest.raises(st.InvariantError, match="NumPy read the list as float64"):
        st.sparse_coo_tensor([[2**63 + 5], [1]], [1.0], size=(3, 3))
    with pytest.raises(st.InvariantError, match="got float64$"):
        st.sparse_coo_tensor(np.array([[0.0]]), [1.0], size=(3,))  # an array is refused as it is
