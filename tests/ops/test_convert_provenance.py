"""Provenance of checked COO indices (``t._checked``) in layout conversions: checked indices are
trusted where nothing changed them, unchecked ones are scanned, and either kind changed in
place after its check still raises InvariantError (never an out-of-bounds read or write)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sparsetensor as st
from conftest import INDEX_DTYPES

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")


def _sorted_coo_indices(rng, shape, nnz, index_dtype):
    """Sorted, distinct index columns of ``nnz`` random entries of ``shape`` (empty rows included)."""
    flat = np.unique(rng.integers(0, math.prod(shape), size=nnz))
    return np.array(np.unravel_index(flat, shape), dtype=index_dtype)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("shape,nnz", [((7, 5), 12), ((1, 1), 1), ((300, 40), 6000), ((50_000, 9), 200_000),
                                       ((3, 4, 6), 40), ((2, 1, 3, 5), 20)])
@pytest.mark.parametrize("checked", [True, False])
def test_coo_to_csr_checked_and_unchecked_agree(rng, index_dtype, shape, nnz, checked):
    idx = _sorted_coo_indices(rng, shape, nnz, index_dtype)
    if len(shape) > 2:  # the same nnz in every batch: one pattern repeated
        m = math.prod(shape[:-2])
        inner = _sorted_coo_indices(rng, shape[-2:], nnz // m, index_dtype)
        batch = np.array(np.unravel_index(np.repeat(np.arange(m), inner.shape[1]), shape[:-2]), dtype=index_dtype)
        idx = np.concatenate([batch, np.tile(inner, m)])
    values = np.arange(idx.shape[1], dtype=np.float32)
    t = st.sparse_coo_tensor(idx, values, size=shape, check_invariants=checked, is_coalesced=True)
    assert t._checked is checked
    out = t.to_sparse_csr(threads=3)
    out.check_invariants()
    k = len(shape) - 2
    rows = np.ravel_multi_index(tuple(idx[:k + 1]), shape[:k + 1]) if idx.shape[1] else np.zeros(0, np.int64)
    crow = np.searchsorted(rows, np.arange(math.prod(shape[:k + 1]) + 1))
    nnzb = idx.shape[1] // max(math.prod(shape[:k]), 1)
    crow = crow[(np.arange(math.prod(shape[:k]))[:, None] * shape[k] + np.arange(shape[k] + 1))] \
        - (np.arange(math.prod(shape[:k])) * nnzb)[:, None]
    assert out.crow_indices().dtype == index_dtype
    np.testing.assert_array_equal(out.crow_indices(), crow.reshape(shape[:k] + (shape[k] + 1,)))
    np.testing.assert_array_equal(out.col_indices(), idx[-1].reshape(shape[:k] + (-1,)))
    assert np.shares_memory(out.values(), values)


def test_checked_coo_reads_columns_too():
    # built checked, then its columns broken in place: the result is marked canonical, so every
    # member it relies on is read and checked (issue 34; this used to read only the rows)
    idx = np.array([[0, 0, 2], [1, 3, 0]])
    for checked in (True, False):
        t = st.sparse_coo_tensor(idx, [1.0, 2.0, 3.0], size=(3, 4), check_invariants=checked, is_coalesced=True)
        assert t._checked == checked
        idx[1] = [9, -5, 9]
        with pytest.raises(st.InvariantError) as info:
            t.to_sparse_csr()
        assert info.value.invariant == "C5" and info.value.index == 0 and "indices[1]" in str(info.value)
        idx[1] = [3, 1, 0]  # columns out of order within row 0
        with pytest.raises(st.InvariantError) as info:
            t.to_sparse_csr()
        assert info.value.invariant == "C6"
        idx[1] = [1, 3, 0]


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("where", [0, 1, 99_999, 150_001, 199_999])
@pytest.mark.parametrize("bad,inv", [(-1, "C4"), (10**6, "C5"), ("down", "C6")])
def test_checked_coo_with_mutated_rows_raises(where, bad, inv, threads):
    # rows mutated in place after the check: still bound- and order-checked, never a wild write
    n = 200_000
    idx = np.stack([np.repeat(np.arange(n // 4), 4), np.tile(np.arange(4), n // 4)])
    t = st.sparse_coo_tensor(idx, np.ones(n), size=(n // 4, 5), is_coalesced=True)
    assert t._checked
    if bad == "down":  # a row below the one before it
        if where == 0:
            pytest.skip("no entry before the first")
        prev = idx[0, where - 1]
        if prev == 0:
            idx[0, where - 1] = prev = 1
        idx[0, where] = prev - 1
    else:
        idx[0, where] = bad
    with pytest.raises(st.InvariantError) as info:
        t.to_sparse_csr(threads=threads)
    assert info.value.invariant == inv and info.value.layout == "coo"
    assert info.value.index == where
    if inv != "C6":
        assert "indices[0]" in str(info.value)


def test_checked_flag_provenance(rng):
    idx = np.array([[0, 1, 1], [2, 0, 2]])
    checked = st.sparse_coo_tensor(idx, [1.0, 2.0, 3.0], size=(2, 3), is_coalesced=True)
    unchecked = st.sparse_coo_tensor(idx, [1.0, 2.0, 3.0], size=(2, 3), check_invariants=False, is_coalesced=True)
    assert checked._checked and not unchecked._checked
    with st.check_invariants(False):
        assert not st.sparse_coo_tensor(idx, [1.0, 2.0, 3.0], size=(2, 3))._checked
    # kept by what keeps the indices, for both provenances
    for t in (checked, unchecked):
        for derived in (t.clone(), t.astype(np.float32), t.astype(np.float32, copy=False), t.to(index_dtype=np.int32),
                        -t, t.to(np.complex64)):
            assert derived._checked is t._checked
    # full checks and our kernels' outputs are checked
    unchecked.check_invariants()
    assert unchecked._checked
    assert st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0], size=(2, 2)).to_sparse_coo()._checked
    raw = st.sparse_coo_tensor([[1, 0, 1], [0, 0, 0]], [1.0, 2.0, 3.0], size=(2, 1), check_invariants=False)
    assert not raw._checked and raw.coalesce()._checked
    try:
        assert st.from_dense(np.eye(3), "coo")._checked
    except (NotImplementedError, AttributeError, ImportError):
        pass
    # an unchecked, coalesced-flagged tensor with bad columns still raises on conversion
    bad = st.sparse_coo_tensor([[0, 1], [5, 0]], [1.0, 2.0], size=(2, 3), check_invariants=False, is_coalesced=True)
    with pytest.raises(st.InvariantError) as info:
        bad.to_sparse_csr()
    assert info.value.invariant == "C5"


@pytest.mark.parametrize("dst", ["csr", "csc", "bsr"])
def test_uncoalesced_coo_is_coalesced_first(dst):
    idx = np.array([[1, 0, 1, 0], [2, 1, 2, 0]])
    t = st.sparse_coo_tensor(idx, [1.0, 2.0, 3.0, 4.0], size=(2, 3), check_invariants=False)
    assert not t.is_coalesced()
    out = t.to_sparse(dst, **(dict(blocksize=(1, 1)) if dst == "bsr" else {}))
    back = out.to_sparse_coo()
    np.testing.assert_array_equal(back.indices(), [[0, 0, 1], [0, 1, 2]])
    np.testing.assert_array_equal(back.values(), [4.0, 2.0, 4.0])
