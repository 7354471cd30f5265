"""Functions that do not commute with the sum of repeated entries (an uncoalesced COO tensor
stores one element as several) sum them first: the result is the function of the element, as on
the dense array. Found by a fuzz of Dask's chunk functions (count_nonzero is astype(bool) + sum)."""

import numpy as np
import pytest

import sparsetensor as st


def _uncoalesced():
    # element (0, 0) stored as 1 + 2 - 3 = 0, element (0, 1) as 0.6 + 0.6 = 1.2, (1, 0) as NaN + 5
    idx = np.array([[0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0, 0]])
    vals = np.array([1.0, 2.0, -3.0, 0.6, 0.6, np.nan, 5.0])
    return st.sparse_coo_tensor(idx, vals, (2, 2), is_coalesced=False)


@pytest.mark.parametrize("dtype", [np.bool_, np.int64, np.uint8, np.int32])
def test_astype_sums_repeats_first(dtype):
    t = _uncoalesced()
    t = st.sparse_coo_tensor(t.indices(), np.nan_to_num(t.values(), nan=2.5), t.shape, is_coalesced=False)
    dense = t.to_dense()  # 0.0, 1.2, 7.5
    np.testing.assert_array_equal(t.astype(dtype).to_dense(), dense.astype(dtype))
    # a bool tensor's repeats are one True (or): cast to int it is 1, not their count
    b = st.sparse_coo_tensor(np.array([[0, 0]]), np.array([True, True]), (2,), is_coalesced=False)
    assert b.astype(dtype).to_dense().tolist() == np.array([True, False]).astype(dtype).tolist()


def test_round_and_nansum_sum_repeats_first():
    t = _uncoalesced()
    dense = t.to_dense()
    np.testing.assert_array_equal(np.round(t, 0).to_dense(), np.round(dense, 0))
    assert np.nansum(t) == np.nansum(dense)  # the NaN element is dropped whole, not its NaN entry
    assert st.count_nonzero(t) == np.count_nonzero(dense)


def test_casts_that_commute_keep_the_stored_entries():
    t = _uncoalesced()
    assert t.astype(np.float32).nnz == t.nnz and not t.astype(np.float32).is_coalesced()
