"""Every O(nnz) invariant broken, through the public API, for every compressed layout and for COO."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import sparsetensor as st
from conftest import COMPRESSED, INDEX_DTYPES, random_dense


def valid_members(layout, index_dtype, batch=(2,), dense=(3,)):
    """A batched hybrid tensor's members; 4 block rows/cols, 5 specified blocks per batch."""
    bs = (2, 3) if layout in ("bsr", "bsc") else (1, 1)
    rng = np.random.default_rng(7)
    a = random_dense(rng, batch=batch, blocks=(4, 4), blocksize=bs, dense=dense, nnz=5)
    t = st.from_dense(a, layout, blocksize=bs if layout in ("bsr", "bsc") else None, dense_dim=len(dense),
                      batch_dim=len(batch), index_dtype=index_dtype)
    return t.compressed_indices().copy(), t.plain_indices().copy(), t.values(), t.shape


# (invariant, how to break it) on batch 1 of the members above
BREAKS = {
    "5.1": lambda c, p: c.__setitem__((1, 0), 1),
    "5.2": lambda c, p: c.__setitem__((1, -1), c[1, -1] - 1),
    "5.3": lambda c, p: (c.__setitem__((1, 2), c[1, 1] - 1)),
    "5.4": lambda c, p: p.__setitem__((1, 0), -1),
    "5.5": lambda c, p: p.__setitem__((1, -1), 4),
    "5.6": lambda c, p: p.__setitem__((1, slice(None)), p[1].max()),  # duplicates in every row with 2+
}


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("layout", COMPRESSED)
@pytest.mark.parametrize("invariant", sorted(BREAKS))
def test_each_invariant_is_reported(layout, index_dtype, invariant):
    c, p, v, shape = valid_members(layout, index_dtype)
    st.sparse_compressed_tensor(c, p, v, shape, layout=layout)  # valid as built
    BREAKS[invariant](c, p)
    with pytest.raises(st.InvariantError) as e:
        st.sparse_compressed_tensor(c, p, v, shape, layout=layout)
    err = e.value
    assert isinstance(err, ValueError)
    assert err.invariant == invariant and err.layout == layout
    assert err.batch == (1,)
    assert f"{layout} invariant {invariant}:" in str(err) and "batch (1,)" in str(err)
    # the same tensor built unchecked is caught by a full re-check, and never read out of bounds
    t = st.sparse_compressed_tensor(c, p, v, shape, layout=layout, check_invariants=False)
    with pytest.raises(st.InvariantError) as e2:
        t.check_invariants()
    assert e2.value.invariant == invariant
    with st.check_invariants(False):
        try:
            t.to_dense()  # sums duplicates, or raises: never crashes
        except st.InvariantError:
            pass


def test_message_names_rule_and_value():
    with pytest.raises(st.InvariantError) as e:
        st.sparse_csr_tensor([0, 3, 1, 3], [0, 1, 2], [1.0, 2, 3], size=(3, 3))
    msg = str(e.value)
    assert "csr invariant 5.3" in msg and "crow_indices" in msg and "i=2" in msg and "got -2" in msg
    with pytest.raises(st.InvariantError) as e:
        st.sparse_csc_tensor([0, 1, 2], [0, 9], [1.0, 2.0], size=(3, 2))
    assert "row_indices must be < nrows=3" in str(e.value) and "got 9" in str(e.value)
    assert e.value.index == 1


def test_5_3_upper_bound():
    # seed 001 adds the upper bound: a row cannot hold more than ncols entries
    with pytest.raises(st.InvariantError) as e:
        st.sparse_csr_tensor([0, 3], [0, 1, 2], [1.0, 2, 3], size=(1, 2))
    assert e.value.invariant == "5.3"


def test_5_6_duplicates_and_order():
    for col in ([0, 0], [1, 0]):
        with pytest.raises(st.InvariantError) as e:
            st.sparse_csr_tensor([0, 2], col, [1.0, 2.0], size=(1, 2))
        assert e.value.invariant == "5.6"
    # across rows, order is free
    st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0], size=(2, 2))


# -- COO -----------------------------------------------------------------------------
def test_coo_invariants():
    def err(indices, values, size=None, **kw):
        with pytest.raises(st.InvariantError) as e:
            st.sparse_coo_tensor(indices, values, size, **kw)
        return e.value.invariant

    assert err([[0, 1]], [1.0, 2.0], (2, 2)) == "C1"
    assert err(np.zeros((1, 1, 2), np.int64), [1.0, 2.0], (2,)) == "C2"
    assert err([[0, 1]], [1.0], (2,)) == "C3"
    assert err([[0, 1]], np.ones((2, 3)), (2, 4)) == "C3"
    assert err([[0, -1]], [1.0, 2.0], (2,)) == "C4"
    assert err([[0, -1]], [1.0, 2.0]) == "C4"
    assert err([[0, 2]], [1.0, 2.0], (2,)) == "C5"
    assert err([[1, 0]], [1.0, 2.0], (2,), is_coalesced=True) == "C6"
    assert err([[0, 0]], [1.0, 2.0], (2,), is_coalesced=True) == "C6"
    t = st.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2), is_coalesced=True)
    assert t.is_coalesced()
    bad = st.sparse_coo_tensor([[0, 1], [5, 0]], [1.0, 2.0], (2, 2), check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        bad.check_invariants()
    assert e.value.invariant == "C5" and "indices[1]" in str(e.value)
    with pytest.raises(st.InvariantError):
        bad.to_dense()  # the dense kernel guards its writes


def test_coo_dense_dims_and_duplicates():
    t = st.sparse_coo_tensor([[0, 0, 1]], [[1, 2], [3, 4], [5, 6]], size=(2, 2))
    assert not t.is_coalesced()
    np.testing.assert_array_equal(t.to_dense(), [[4, 6], [5, 6]])
    b = st.sparse_coo_tensor([[0, 0, 1]], np.array([True, True, False]), size=(3,))
    np.testing.assert_array_equal(b.to_dense(), [True, False, False])
    h = st.sparse_coo_tensor([[0, 0]], np.array([1.5, 2.0], np.float16), size=(1,))
    assert h.to_dense().dtype == np.float16 and h.to_dense()[0] == 3.5


# -- random corruptions against a reference checker ------------------------------------
def reference_check(c, p, plain_size):
    """First violation in the documented order: 5.1/5.2 by batch, then 5.3, then 5.4-5.6 by row."""
    B = c.shape[0]
    nnz = p.shape[1]
    for b in range(B):
        if c[b, 0] != 0:
            return "5.1", b
        if c[b, -1] != nnz:
            return "5.2", b
    for b in range(B):
        d = np.diff(c[b].astype(np.int64))
        bad = np.nonzero((d < 0) | (d > plain_size))[0]
        if bad.size:
            return "5.3", b
    for b in range(B):
        for r in range(c.shape[1] - 1):
            prev = -1
            for k in range(c[b, r], c[b, r + 1]):
                x = p[b, k]
                if x < 0:
                    return "5.4", b
                if x >= plain_size:
                    return "5.5", b
                if x <= prev:
                    return "5.6", b
                prev = x
    return None


@settings(max_examples=150, deadline=None)
@given(layout=hs.sampled_from(COMPRESSED), index_dtype=hs.sampled_from(INDEX_DTYPES),
       nbatch=hs.integers(0, 3), seed=hs.integers(0, 2**32 - 1), ncorrupt=hs.integers(0, 3),
       target=hs.sampled_from(["compressed", "plain", "both"]))
def test_random_corruptions_match_reference(layout, index_dtype, nbatch, seed, ncorrupt, target):
    rng = np.random.default_rng(seed)
    bs = (2, 1) if layout in ("bsr", "bsc") else (1, 1)
    blocks = (int(rng.integers(0, 5)), int(rng.integers(0, 5)))
    nnz = int(rng.integers(0, blocks[0] * blocks[1] + 1))
    a = random_dense(rng, batch=(nbatch,), blocks=blocks, blocksize=bs, nnz=nnz)
    t = st.from_dense(a, layout, blocksize=bs if layout in ("bsr", "bsc") else None, batch_dim=1,
                      index_dtype=index_dtype)
    c, p = t.compressed_indices().copy(), t.plain_indices().copy()
    for _ in range(ncorrupt):
        arr = c if target == "compressed" or (target == "both" and rng.random() < 0.5) else p
        if arr.size:
            arr.flat[rng.integers(0, arr.size)] += int(rng.integers(-3, 4))
    expect = reference_check(c, p, t.plain_size)
    try:
        st.sparse_compressed_tensor(c, p, t.values(), t.shape, layout=layout)
        got = None
    except st.InvariantError as e:
        got = (e.invariant, e.batch[0])
    assert got == expect
