"""tril, triu and eliminate_zeros (sparsetensor.ops.prune) on every layout with batch and dense dims.

Oracle: NumPy's tril/triu of the dense array (over the last two sparse dims) and SciPy's
tril/triu/eliminate_zeros; gradients against central differences through st.autograd.vjp and
against torch through sparsetensor.torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from conftest import LAYOUTS, requires_torch
from test_dims import _fd


def _tri(a, k, upper, dense_dim=0):
    """NumPy's tril/triu of ``a`` over the two dims before its ``dense_dim`` trailing dims."""
    f = np.triu if upper else np.tril
    if not dense_dim:
        return f(a, k)
    moved = np.moveaxis(a, tuple(range(a.ndim - dense_dim, a.ndim)), tuple(range(dense_dim)))
    return np.moveaxis(f(moved, k), tuple(range(dense_dim)), tuple(range(a.ndim - dense_dim, a.ndim)))


def make(rng, layout, index_dtype=np.int64, dense=False, batch=False):
    """A (4, 6) matrix (or (2, 4, 6), one lower pattern for every batch, so that tril keeps equal
    batch nnz; with a dense dim of 2); with its dense array."""
    shape = ((2,) if batch else ()) + (4, 6) + ((2,) if dense else ())
    mask = rng.random((4, 6) + ((1,) if dense else ())) < 0.6
    if batch:
        mask = mask & (np.tril(np.ones((4, 6), bool)) if not dense else np.tril(np.ones((4, 6), bool))[..., None])
    a = rng.standard_normal(shape) * mask
    kw = dict(dense_dim=int(dense), index_dtype=index_dtype)
    if layout == "coo":
        return st.from_dense(a, "coo", **kw), a
    bs = (2, 2) if layout in ("bsr", "bsc") else None
    return st.from_dense(a, layout, blocksize=bs, batch_dim=int(batch), **kw), a


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("batch", [False, True])
def test_tril_triu(rng, layout, index_dtype, dense, batch):
    t, a = make(rng, layout, index_dtype, dense, batch)
    for k in (-5, -2, -1, 0, 1, 2, 7):
        for upper, name in ((False, "tril"), (True, "triu")):
            want = _tri(a, k, upper, int(dense))
            try:
                r = getattr(t, name)(k)
            except ValueError as e:  # a batched triu of a lower pattern: batches of different nnz
                assert batch and layout != "coo" and "same nnz" in str(e)
                continue
            r.check_invariants()
            assert r.layout is t.layout and r.shape == t.shape and r.index_dtype == index_dtype
            assert r.dtype == t.dtype and (not r.layout.blocked or r.blocksize == t.blocksize)
            np.testing.assert_array_equal(r.to_dense(), want)
            np.testing.assert_array_equal(getattr(st, name)(t, diagonal=k).to_dense(), want)
            if layout == "coo":
                assert r.is_coalesced() and r.nnz == np.count_nonzero(want.reshape(want.shape[:2 + batch] + (-1,)).any(-1))
    assert t.tril().nnz + t.triu(1).nnz >= t.nnz


def test_scipy_agrees():
    import scipy.sparse as sp

    m = sp.random_array((7, 9), density=0.4, rng=3, format="csr")
    for fmt in ("coo", "csr", "csc"):
        t = st.from_scipy(m.asformat(fmt))
        for k in (-3, 0, 2):
            np.testing.assert_array_equal(t.tril(k).to_dense(), sp.tril(m, k).toarray())
            np.testing.assert_array_equal(t.triu(k).to_dense(), sp.triu(m, k).toarray())


def test_uncoalesced_and_unchecked():
    idx = np.array([[2, 0, 2, 1], [0, 1, 0, 1]])
    t = st.sparse_coo_tensor(idx, np.array([1.0, 2.0, 3.0, 4.0]), (3, 3))
    r = t.tril()
    assert not r.is_coalesced() and r.nnz == 3
    np.testing.assert_array_equal(r.to_dense(), np.tril(t.to_dense()))
    bad = st.sparse_coo_tensor(np.array([[0, 3], [0, 0]]), np.ones(2), (3, 3), check_invariants=False)
    with pytest.raises(st.InvariantError):
        bad.tril()
    c = st.sparse_csr_tensor([0, 2, 3], [1, 0, 1], [1.0, 2.0, 3.0], (2, 2), check_invariants=False)  # unsorted row
    np.testing.assert_array_equal(c.triu().to_dense(), np.triu(c.to_dense()))


def test_errors():
    v = st.from_dense(np.arange(4.0), "coo")
    with pytest.raises(ValueError, match="two sparse dims"):
        v.tril()
    t = st.from_dense(np.eye(3), "csr")
    with pytest.raises(TypeError, match="diagonal must be an int"):
        t.tril(0.5)
    with pytest.raises(TypeError):
        st.tril(np.eye(3))


def test_in_place_tril(rng):
    t, a = make(rng, "csr")
    c, c0 = t.crow_indices(), t.crow_indices().copy()
    assert t.tril_(1) is t
    np.testing.assert_array_equal(t.to_dense(), np.tril(a, 1))
    np.testing.assert_array_equal(c, c0)  # new arrays: the old ones are not written
    b, a = make(rng, "bsr")
    assert b.triu_() is b and b.layout is st.sparse_bsr
    np.testing.assert_array_equal(b.to_dense(), np.triu(a))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dense", [False, True])
def test_eliminate_zeros(rng, layout, dense):
    t, a = make(rng, layout, dense=dense)
    z = t * np.where(rng.random(t.shape) < 0.5, 0.0, 1.0)  # explicit zeros in t's pattern
    values = z.values()
    before = z.nnz
    assert z.eliminate_zeros() is z
    z.check_invariants()
    assert z.layout is t.layout and z.nnz <= before
    w = a * 0 + z.to_dense()
    np.testing.assert_array_equal(z.to_dense(), w)
    v = z.values().reshape(z.nnz, -1)
    assert (v != 0).any(axis=1).all()  # no element (block) of zeros is left
    assert values.shape[0] == before  # the old arrays were not written
    if layout == "coo":
        assert z.is_coalesced()


def test_eliminate_zeros_values():
    t = st.sparse_coo_tensor(np.array([[0, 1, 2, 3, 3]]), np.array([0.0, -0.0, np.nan, 1.0, 0.0]), (4,))
    t.eliminate_zeros()
    assert t.nnz == 2 and np.isnan(t.values()[0]) and t.values()[1] == 1.0
    c = st.from_dense(np.array([[1 + 0j, 0], [0, 0j + 1j]]), "csr") * np.array([0.0, 1.0])
    c.eliminate_zeros()
    assert c.nnz == 1 and c.values()[0] == 1j
    b = st.from_dense(np.array([[True, False], [False, True]]), "coo") * np.array([False, True])
    assert b.eliminate_zeros().nnz == 1


def test_eliminate_zeros_like_scipy(rng):
    import scipy.sparse as sp

    m = sp.random_array((8, 8), density=0.5, rng=1, format="csr")
    m.data[::3] = 0
    for fmt in ("coo", "csr", "csc"):
        t = st.from_scipy(m.asformat(fmt).copy())
        s = m.asformat(fmt).copy()
        s.eliminate_zeros()
        t.eliminate_zeros()
        assert t.nnz == s.nnz
        np.testing.assert_array_equal(t.to_dense(), s.toarray())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vjp(rng, layout):
    t, _ = make(rng, layout, dense=True)
    if layout == "coo":  # uncoalesced: shuffled entries and repeats
        perm = rng.permutation(t.nnz)
        idx = t.indices()[:, perm]
        t = st.sparse_coo_tensor(np.concatenate([idx, idx[:, :3]], 1),
                                 np.concatenate([t.values()[perm], 0.5 * t.values()[perm][:3]]), t.shape)
    w = rng.standard_normal(t.shape)
    fns = [lambda x: st.sum(x.tril().sin() * w), lambda x: st.sum(st.triu(x, 1) * w),
           lambda x: st.sum(x.tril(-1).tanh() ** 2)]

    for f in fns:
        _, pullback = st.autograd.vjp(f, t)
        (g,) = pullback(1.0)
        np.testing.assert_allclose(g.values(), _fd(f, t), atol=1e-6)
    m, _ = make(rng, layout)  # NumPy's tril/triu of a matrix, recorded as ours
    w2 = rng.standard_normal(m.shape)
    for f in (lambda x: st.sum(np.tril(x, k=1).sin() * w2), lambda x: st.sum(np.triu(x, -1) ** 2)):
        _, pullback = st.autograd.vjp(f, m)
        np.testing.assert_allclose(pullback(1.0)[0].values(), _fd(f, m), atol=1e-6)


@requires_torch
def test_torch():
    import torch
    import sparsetensor.torch as stt

    A = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 4.0]], dtype=torch.float64).to_sparse_csr().requires_grad_()
    W = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    (stt.to_dense(stt.tril(A)) * W).sum().backward()
    np.testing.assert_array_equal(A.grad.to_dense().numpy(), (torch.tril(W) * (A.detach().to_dense() != 0)).numpy())


def test_changed_caller_indices_are_checked_again():
    """A tensor built on the caller's index array, validated, then written by the caller: the ops
    that compute coordinates from it check again (else 7 would become a valid-looking coordinate)."""
    idx = np.array([[0, 1, 2], [0, 1, 2]])
    t = st.sparse_coo_tensor(idx, np.ones(3), (3, 3))
    assert np.shares_memory(t.indices(), idx)
    idx[0, 2] = 7
    for call in (t.tril, t.triu, lambda: t.reshape(9), lambda: t.flatten(), lambda: st.kron(t, t),
                 lambda: st.kron(st.from_dense(np.eye(2), "coo"), t)):
        with pytest.raises(st.InvariantError, match="C5"):
            call()


def test_batched_blocks_and_edge_cases():
    a = np.zeros((2, 4, 4))
    a[0, 0:2, 0:2] = 1  # a block on the diagonal in batch 0 (3 items kept by tril), below it in batch 1 (4)
    a[1, 2:4, 0:2] = 1
    for layout in ("bsr", "bsc"):
        t = st.from_dense(a, layout, blocksize=(2, 2), batch_dim=1)
        r = st.tril(t)
        r.check_invariants()
        assert r.layout is t.layout and r.nnz == 1
        np.testing.assert_array_equal(r.to_dense(), np.tril(a))
        z = t * np.array([0.0, 1.0, 1.0, 1.0])  # a zero item in batch 0's block only: blocks are kept whole
        assert z.eliminate_zeros().nnz == 1
    for layout in LAYOUTS:
        e = st.from_dense(np.zeros((4, 4)), layout, blocksize=(2, 2) if layout in ("bsr", "bsc") else None)
        assert e.eliminate_zeros().nnz == 0 and e.tril().nnz == 0
    t = st.from_dense(np.ones((3, 3)), "csr")
    for k, want in ((2**63, 9), (-2**64, 0), (np.uint64(2**64 - 1), 9), (-3, 0), (-2, 1)):
        assert t.tril(k).nnz == want and t.triu(-np.int64(k) if abs(int(k)) < 2**62 else -int(k)).nnz == want


def test_keep_flagged_kernels_guard_their_segments():
    """The host's keep kernels: shapes checked before any write, and a compressed index changed
    after the counts were taken writes nothing out of its segment."""
    from sparsetensor._lib import _select

    c = np.array([[0, 2, 4]], np.int64)
    p = np.array([[0, 1, 0, 1]], np.int64)
    v = np.arange(4, dtype=np.uint64).reshape(1, 4, 1)
    flags = np.array([[1, 0, 1, 1]], np.uint8)
    counts = np.empty((1, 2), np.int64)
    _select.flagged_count(c, flags, counts, 1)
    assert counts.tolist() == [[1, 2]]
    out_c = np.array([[0, 1, 3]], np.int64)
    out_p, out_v = np.full((1, 3), -1, np.int64), np.zeros((1, 3, 1), np.uint64)
    _select.keep_flagged(c, p, v, flags, out_c, out_p, out_v, 1)
    assert out_p.tolist() == [[0, 0, 1]] and out_v.ravel().tolist() == [0, 2, 3]
    changed = np.array([[0, 4, 4]], np.int64)  # every entry now in row 0, whose segment holds one
    out_p[:] = -1
    _select.keep_flagged(changed, p, v, flags, out_c, out_p, out_v, 1)
    assert out_p[0, 0] == 0 and out_p[0, 1:].tolist() == [-1, -1]
    with pytest.raises(ValueError, match="do not match"):
        _select.keep_flagged(c, p, v, flags[:, :3], out_c, out_p, out_v, 1)
    with pytest.raises(ValueError, match="do not match"):
        _select.flagged_count(c, flags, counts[:, :1], 1)


@pytest.mark.parametrize("layout", ["bsr", "bsc"])
def test_triangles_of_block_transposed_values(layout):
    # values whose blocks are stored transposed (3.7 allows them of bsr/bsc; torch's transposed blocks come so)
    D = np.zeros((4, 6))
    D[0, 0:3] = [1, 2, 3]
    D[1, 1] = 4
    D[2:4, 3:6] = np.arange(6).reshape(2, 3) + 1
    b = st.from_dense(D, layout, blocksize=(2, 3))
    vals = np.ascontiguousarray(b.values().swapaxes(1, 2)).swapaxes(1, 2)
    t = st.sparse_compressed_tensor(b.compressed_indices().copy(), b.plain_indices().copy(), vals, (4, 6),
                                    layout=layout)
    assert not t.values().flags.c_contiguous
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(st.tril(t, k).to_dense(), np.tril(D, k))
        np.testing.assert_array_equal(st.triu(t, k).to_dense(), np.triu(D, k))
