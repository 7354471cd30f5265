"""``t[..., None, ...]`` (np.newaxis) on every layout, ``t.size`` as NumPy's count and torch's
``size()``, ``np.broadcast_to`` of sparse tensors, and cat of inputs whose blocks do not tile
(found by a fuzz of the Dask chunk protocol, which indexes with None, broadcasts an empty
tensor for ``zeros_like`` and cats chunk edges).

Oracle: NumPy on the dense array.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import sparsetensor as st
from conftest import LAYOUTS


def make(rng, layout, index_dtype=np.int64):
    """A (2, 4, 6) tensor (a batch dim for compressed layouts; blocks of 2 x 2) and its dense array."""
    a = rng.standard_normal((2, 4, 6)) * (rng.random((1, 4, 6)) < 0.5)
    if layout == "coo":
        return st.from_dense(a, "coo", index_dtype=index_dtype), a
    bs = (2, 2) if layout in ("bsr", "bsc") else None
    return st.from_dense(a, layout, blocksize=bs, batch_dim=1, index_dtype=index_dtype), a


KEYS = [(None,), (None, None), (slice(None), None), (0, None), (None, 0, None, slice(1, 3)), (Ellipsis, None),
        (None, Ellipsis, None, 1), (slice(None), None, slice(None), [0, 2]), (0, 1, None), (0, 1, 2, None),
        (None, 1, 2, 3), (slice(None), slice(1, 3), None, slice(None, None, 2)), (None, [1, 0], Ellipsis)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_none(rng, layout):
    t, a = make(rng, layout, np.int32)
    for key in KEYS:
        r, want = t[key], a[key]
        if isinstance(r, st.SparseTensor):
            r.check_invariants()
            assert r.shape == want.shape, key
            np.testing.assert_array_equal(r.to_dense(), want)
        else:
            assert np.shape(r) == want.shape, key
            np.testing.assert_array_equal(r, want)


def test_none_with_an_array_apart_from_an_integer_is_refused():
    """NumPy puts the array's dim first when the array and an integer are apart: refused with None."""
    a = np.arange(1.0, 61).reshape(3, 4, 5)
    t = st.from_dense(a, "coo")
    for key in [(0, None, [0, 1]), (None, [1, 0], Ellipsis, 2), ([0, 2], slice(None), None, 1)]:
        with pytest.raises(NotImplementedError, match="None and an integer array apart"):
            t[key]
    for key in [(None, [1, 0], 2), (0, [0, 1], None), (None, 0, [3, 1])]:
        np.testing.assert_array_equal(t[key].to_dense(), a[key])


def test_none_between_sparse_dims_gives_coo():
    t = st.from_dense(np.eye(3), "csr")
    r = t[:, None]
    assert r.layout is st.sparse_coo and r.shape == (3, 1, 3)
    with pytest.raises(NotImplementedError, match="third sparse dim"):
        t.unsqueeze(1)  # the explicit op keeps the layout or refuses


def test_size_is_numpys_count_and_torchs_call():
    t = st.from_dense(np.eye(3)[:, :2], "csr")
    assert t.size == 6 and isinstance(t.size, int) and np.size(t) == 6 and np.size(t, 1) == 2
    assert t.size() == (3, 2) and t.size(-1) == 2 and t.size(0) == 3
    assert pickle.loads(pickle.dumps(t.size)) == 6
    with pytest.raises(IndexError):
        t.size(2)


def test_broadcast_to():
    t = st.from_dense(np.eye(2), "csr")
    assert np.broadcast_to(t, (2, 2)) is t
    z = np.zeros_like(t, shape=(1,))
    b = np.broadcast_to(z, (3, 2))
    assert b.shape == (3, 2) and b.nnz == 0
    with pytest.raises(NotImplementedError, match="each repeat would be stored"):
        np.broadcast_to(t, (4, 2, 2))
    lead = np.broadcast_to(t, (1, 1, 2, 2))  # new dims of size 1 repeat nothing
    assert lead.shape == (1, 1, 2, 2) and lead.nnz == t.nnz
    np.testing.assert_array_equal(lead.to_dense(), np.eye(2)[None, None])
    assert np.broadcast_to(t, (0, 2, 2)).shape == (0, 2, 2)
    with pytest.raises(ValueError, match="broadcast"):
        np.broadcast_to(t, (3, 3))


def test_cat_blocks_that_do_not_tile():
    a = np.kron(np.array([[1.0, 0], [0, 2], [3, 0]]), np.ones((2, 2)))
    b = st.from_dense(a, "bsr", blocksize=(2, 2))
    for parts in ([b[:, :2], b[:, 2:3]], [b[:, 2:3], b[:, :2]], [b[:, :2], st.from_dense(a[:, 2:3], "coo")]):
        r = st.cat(parts, 1)
        r.check_invariants()
        assert r.layout is st.sparse_csr
        np.testing.assert_array_equal(r.to_dense(), np.concatenate([p.to_dense() for p in parts], 1))
    r = st.cat([b[:, :2], b[:, 2:4]], 1)
    assert r.layout is st.sparse_bsr and r.blocksize == (2, 2)
    c = st.from_dense(a.T, "bsc", blocksize=(2, 2))
    assert st.cat([c[:2], c[2:3]], 0).layout is st.sparse_csc


@pytest.mark.parametrize("layout,d", [("csc", 2), ("csr", 1)])
def test_cat_complex_with_empty_parts(layout, d):
    c = np.zeros((2, 3, 3, 2), np.complex128)
    c[:, 0, [0, 2]] = 1 + 1j
    t = st.from_dense(c, layout, batch_dim=1, dense_dim=1)
    parts = [t[:, :, k:k + 1] if d == 2 else t[:, k:k + 1] for k in range(3)]
    assert any(p.nnz == 0 for p in parts)
    r = st.cat(parts, d)
    r.check_invariants()
    np.testing.assert_array_equal(r.to_dense(), c)


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr"])
def test_joins_past_int32_promote_the_index_dtype(layout):
    """int32 inputs whose join is wider than int32 can index give int64 indices (as SciPy's hstack
    and our kron), where they raised invariant 1.3; narrower joins keep int32. Joined along the
    plain dim (csc: the rows, the transposed case)."""
    W = 2 ** 30 - 2  # 2 W fits int32, 3 W does not
    d = 0 if layout == "csc" else 1
    idx = np.array([[0, 1], [2 ** 30 - 5, 4]], np.int32)
    t = st.sparse_coo_tensor(idx[::-1] if d == 0 else idx, [1.0, 2.0], size=(W, 2) if d == 0 else (2, W))
    t = t.to_sparse(layout, **({"blocksize": (2, 2)} if layout == "bsr" else {}))
    assert t.index_dtype == np.int32
    joins = [st.cat([t, t, t], d), np.concatenate([t, t, t], axis=d), st.block_diag(t, t, t),
             (st.hstack if d else st.vstack)([t, t, t])]
    for r in joins:
        assert r.index_dtype == np.int64 and r.shape[d] == 3 * W and r.layout is t.layout
        r.check_invariants()
        coo = r.to_sparse_coo().coalesce()
        got = sorted(int(c) for c in coo.indices()[d][coo.values() != 0])  # (not a bsr block's zeros)
        assert got == sorted(c + k * W for k in range(3) for c in (2 ** 30 - 5, 4))
    assert st.cat([t, t], d).index_dtype == np.int32  # 2 W fits
