"""from_dense / to_dense: the oracles of later issues, over layouts x dtypes x batch/dense dims."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import sparsetensor as st
from conftest import COMPRESSED, INDEX_DTYPES, LAYOUTS, VALUE_DTYPES, random_dense, reference_compressed

BLOCKS = {"csr": [(1, 1)], "csc": [(1, 1)], "bsr": [(1, 1), (2, 3), (3, 1)], "bsc": [(1, 1), (2, 2), (1, 4)],
          "coo": [(1, 1)]}


@settings(max_examples=200, deadline=None)
@given(layout=hs.sampled_from(LAYOUTS), index_dtype=hs.sampled_from(INDEX_DTYPES),
       dtype=hs.sampled_from(VALUE_DTYPES), batch=hs.sampled_from([(), (0,), (1,), (3,), (2, 2)]),
       dense=hs.sampled_from([(), (2,), (0,), (1, 3)]), blocks=hs.tuples(hs.integers(0, 5), hs.integers(0, 5)),
       seed=hs.integers(0, 2**32 - 1), bsi=hs.integers(0, 2))
def test_round_trip_matches_reference(layout, index_dtype, dtype, batch, dense, blocks, seed, bsi):
    rng = np.random.default_rng(seed)
    bs = BLOCKS[layout][bsi % len(BLOCKS[layout])]
    nnz = int(rng.integers(0, blocks[0] * blocks[1] + 1))
    a = random_dense(rng, batch=batch, blocks=blocks, blocksize=bs, dense=dense, dtype=dtype, nnz=nnz)
    kw = dict(dense_dim=len(dense), index_dtype=index_dtype)
    if layout == "coo":
        t = st.from_dense(a, "coo", **kw)
        assert t.sparse_dim == a.ndim - len(dense) and t.is_coalesced()
        D = int(np.prod(dense, dtype=np.int64))
        ref_idx = np.array(np.nonzero((a != 0).reshape(a.shape[:t.sparse_dim] + (D,)).any(-1)))
        np.testing.assert_array_equal(t.indices(), ref_idx.reshape(t.sparse_dim, -1))
    else:
        t = st.from_dense(a, layout, blocksize=bs if layout in ("bsr", "bsc") else None, batch_dim=len(batch), **kw)
        c, p, v = reference_compressed(a, layout, bs, len(batch), index_dtype)
        np.testing.assert_array_equal(t.compressed_indices(), c)
        np.testing.assert_array_equal(t.plain_indices(), p)
        np.testing.assert_array_equal(t.values(), v)
        assert t.batch_dim == len(batch) and t.blocksize == bs
    assert t.index_dtype == index_dtype and t.dtype == dtype and t.dense_dim == len(dense)
    assert t.shape == a.shape
    t.check_invariants()
    back = t.to_dense()
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)
    # the transpose view densifies to the transpose
    if layout != "coo" and t.ndim >= 2:
        m = t.batch_dim
        np.testing.assert_array_equal(t.mT.to_dense(), np.swapaxes(a, m, m + 1))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.complex128, np.bool_, np.int8])
@pytest.mark.parametrize("layout", COMPRESSED)
def test_unchecked_duplicates_are_summed(layout, dtype):
    blocked = layout in ("bsr", "bsc")
    vals = np.array([1, 1, 1]).astype(dtype)
    if blocked:
        vals = vals.reshape(3, 1, 1)
    t = st.sparse_compressed_tensor([0, 3], [0, 0, 1], vals, size=(1, 2) if layout in ("csr", "bsr") else (2, 1),
                                    layout=layout, check_invariants=False)
    d = t.to_dense().ravel()
    expect = np.array([1 + 1, 1]).astype(dtype) if dtype != np.bool_ else np.array([True, True])
    np.testing.assert_array_equal(d, expect)
    assert d.dtype == dtype


def test_nan_and_negative_zero():
    a = np.array([[np.nan, -0.0], [0.0, 1.0]])
    t = st.from_dense(a, "csr")
    np.testing.assert_array_equal(t.col_indices(), [0, 1])
    assert np.isnan(t.values()[0])
    c = st.from_dense(np.array([0j, 1j, complex(0, -0.0)]), "coo")
    np.testing.assert_array_equal(c.indices(), [[1]])
    h = st.from_dense(np.array([-0.0, 2.0], np.float16), "coo")
    assert h.nnz == 1


def test_hybrid_element_is_specified_if_any_dense_value_is_nonzero():
    a = np.zeros((2, 3, 4))
    a[0, 1, 3] = 5
    a[1, 2, 0] = 7
    t = st.from_dense(a, "csr", dense_dim=1)
    np.testing.assert_array_equal(t.crow_indices(), [0, 1, 2])
    np.testing.assert_array_equal(t.col_indices(), [1, 2])
    assert t.values().shape == (2, 4)


def test_batches_with_different_nnz_are_refused():
    a = np.zeros((2, 3, 3))
    a[0, 0, 0] = 1
    with pytest.raises(ValueError, match="same nnz.*\\(0,\\): 1, \\(1,\\): 0"):
        st.from_dense(a, "csr", batch_dim=1)


def test_from_dense_argument_errors():
    with pytest.raises(ValueError, match="blocksize"):
        st.from_dense(np.zeros((4, 4)), "bsr")
    with pytest.raises(ValueError, match="divide"):
        st.from_dense(np.zeros((4, 4)), "bsr", blocksize=(3, 2))
    with pytest.raises(ValueError, match="3-d"):
        st.from_dense(np.zeros((4, 4)), "csr", dense_dim=1)
    with pytest.raises(TypeError):
        st.from_dense(np.zeros((2, 2), np.uint16), "csr")
    with pytest.raises(ValueError):
        st.from_dense(np.zeros((2, 2)), "strided")


def test_inputs_are_not_modified(rng):
    a = random_dense(rng, batch=(2,), blocks=(4, 4), blocksize=(2, 2), nnz=3)
    keep = a.copy()
    t = st.from_dense(a, "bsr", blocksize=(2, 2), batch_dim=1)
    t.to_dense()[...] = 99
    np.testing.assert_array_equal(a, keep)
    assert not np.shares_memory(t.values(), a)


def test_large_parallel_round_trip(rng):
    # big enough for the threaded paths
    a = random_dense(rng, batch=(2,), blocks=(256, 300), blocksize=(2, 2), nnz=9000, dtype=np.float32,
                     partial_blocks=False)
    for layout in COMPRESSED:
        bs = (2, 2) if layout in ("bsr", "bsc") else None
        t1 = st.from_dense(a, layout, blocksize=bs, batch_dim=1, threads=1)
        t2 = st.from_dense(a, layout, blocksize=bs, batch_dim=1, threads=2)
        np.testing.assert_array_equal(t1.plain_indices(), t2.plain_indices())
        np.testing.assert_array_equal(t2.to_dense(threads=2), a)
    flat = a.reshape(-1, a.shape[-1])
    t = st.from_dense(flat, "coo", threads=2)
    assert t.nnz == math.prod(np.nonzero(flat)[0].shape)
    np.testing.assert_array_equal(t.to_dense(threads=2), flat)
