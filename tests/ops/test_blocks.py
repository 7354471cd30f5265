"""hstack, vstack, block_diag and kron (sparsetensor.ops.blocks) on every layout.

Oracle: NumPy's hstack/vstack/kron and SciPy's block_diag of the dense arrays, SciPy's sparse
kron/block_diag, and torch.block_diag/torch.kron of dense tensors (their dtypes)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

import sparsetensor as st
from conftest import LAYOUTS, requires_torch
from test_dims import _fd


def _sparse(rng, shape, layout, dtype=np.float64, index_dtype=np.int64, bs=(1, 2)):
    a = (rng.standard_normal(shape) * (rng.random(shape) < 0.5)).astype(dtype)
    kw = dict(blocksize=bs) if layout in ("bsr", "bsc") else {}
    return st.from_dense(a, layout, index_dtype=index_dtype, **kw), a


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_kron(rng, layout, index_dtype):
    a, A = _sparse(rng, (3, 4), layout, index_dtype=index_dtype)
    for other in ("coo", "csr", "csc", "dense"):
        if other == "dense":
            B = rng.standard_normal((2, 3)) * (rng.random((2, 3)) < 0.6)
            b = B
        else:
            b, B = _sparse(rng, (2, 3), other, np.float32, index_dtype)
        k = st.kron(a, b)
        k.check_invariants()
        want = np.kron(A, B)
        assert k.layout is a.layout and k.shape == want.shape and k.dtype == want.dtype
        assert k.index_dtype == index_dtype and k.is_coalesced()
        np.testing.assert_allclose(k.to_dense(), want, rtol=1e-6)
        if layout in ("coo", "csr", "csc") and other != "dense":
            np.testing.assert_allclose(k.to_dense(), sp.kron(a.to_scipy(), b.to_scipy()).toarray(), rtol=1e-6)
    np.testing.assert_allclose(st.kron(A, a).to_dense(), np.kron(A, A))  # a dense first operand
    np.testing.assert_allclose(a.kron(a).to_dense(), np.kron(A, A))


def test_kron_dims_and_dtypes(rng):
    v, V = _sparse(rng, (5,), "coo")
    m, M = _sparse(rng, (2, 3), "coo", np.int32)
    np.testing.assert_allclose(st.kron(v, m).to_dense(), np.kron(V, M))  # 1-d padded to (1, 5)
    c = st.from_dense(rng.standard_normal((2, 3, 3)) * np.tril(np.ones((3, 3))), "csr", batch_dim=1)
    k = st.kron(c, m)
    assert k.layout is st.sparse_csr and k.batch_dim == 1
    np.testing.assert_allclose(k.to_dense(), np.kron(c.to_dense(), M))
    b = st.from_dense(np.array([[True, False], [True, True]]), "coo")
    assert st.kron(b, b).dtype == np.bool_ and (st.kron(b, b).to_dense() == np.kron(b.to_dense(), b.to_dense())).all()
    z = st.kron(st.from_dense(np.zeros((2, 2)), "csr"), m)
    assert z.nnz == 0 and z.shape == (4, 6)
    u = st.sparse_coo_tensor(np.array([[0, 0], [1, 1]]), np.array([1.0, 2.0]), (2, 2))  # uncoalesced
    np.testing.assert_allclose(st.kron(u, m).to_dense(), np.kron(u.to_dense(), M))
    with pytest.raises(NotImplementedError, match="dense dims"):
        st.kron(st.from_dense(np.ones((2, 2, 2)), "coo", dense_dim=1), m)
    with pytest.raises(TypeError):
        st.kron(np.eye(2), np.eye(2))
    bad = st.sparse_coo_tensor(np.array([[0, 2]]), np.ones(2), (2,), check_invariants=False)
    with pytest.raises(st.InvariantError):
        st.kron(bad, m)
    big = st.sparse_coo_tensor(np.array([[70000]], np.int32), np.ones(1), (70001,))
    assert st.kron(big, big).index_dtype == np.int64


@pytest.mark.parametrize("layout", LAYOUTS)
def test_block_diag(rng, layout):
    parts = [_sparse(rng, s, layout) for s in [(2, 4), (3, 2), (1, 6)]]
    d = st.block_diag(*[p[0] for p in parts])
    d.check_invariants()
    want = scipy.linalg.block_diag(*[p[1] for p in parts])
    np.testing.assert_array_equal(d.to_dense(), want)
    assert d.layout is parts[0][0].layout or (layout in ("bsr", "bsc") and not d.layout.blocked)
    tile = st.block_diag([parts[0][0], parts[0][0]])  # a list; (4, 8) is tiled by the (1, 2) blocks
    assert tile.layout is parts[0][0].layout
    mixed = st.block_diag(parts[0][0], st.from_dense(np.arange(3.0), "coo"), st.from_dense(np.eye(2, dtype=np.float32), "csc"))
    np.testing.assert_array_equal(mixed.to_dense(), scipy.linalg.block_diag(parts[0][1], np.arange(3.0)[None], np.eye(2)))
    if layout in ("coo", "csr", "csc"):
        np.testing.assert_array_equal(d.to_dense(), sp.block_diag([p[0].to_scipy() for p in parts]).toarray())
    with pytest.raises(ValueError, match="2-d"):
        st.block_diag(st.from_dense(np.ones((2, 2, 2)), "coo"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hstack_vstack(rng, layout):
    a, A = _sparse(rng, (2, 4), layout)
    b, B = _sparse(rng, (2, 4), layout)
    np.testing.assert_array_equal(st.hstack([a, b]).to_dense(), np.hstack([A, B]))
    np.testing.assert_array_equal(st.vstack((a, b)).to_dense(), np.vstack([A, B]))
    v = st.from_dense(np.array([0.0, 1.0, 0.0, 2.0]), "coo")
    np.testing.assert_array_equal(st.hstack([v, v]).to_dense(), np.hstack([v.to_dense()] * 2))
    np.testing.assert_array_equal(st.vstack([v, v]).to_dense(), np.vstack([v.to_dense()] * 2))
    with pytest.raises(ValueError, match="non-empty"):
        st.hstack([])
    with pytest.raises(TypeError, match="sparse tensors"):
        st.vstack([a, B])


@requires_torch
def test_torch_agrees(rng):
    import torch

    a, A = _sparse(rng, (3, 2), "coo", np.float32)
    b, B = _sparse(rng, (2, 2), "csr", np.float64)
    np.testing.assert_allclose(st.kron(a, b).to_dense(), torch.kron(torch.from_numpy(A), torch.from_numpy(B)).numpy())
    np.testing.assert_array_equal(st.block_diag(a, b).to_dense(),
                                  torch.block_diag(torch.from_numpy(A), torch.from_numpy(B)).numpy())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vjp(rng, layout):
    t, _ = _sparse(rng, (2, 4), layout)
    u, _ = _sparse(rng, (3, 2), "coo")
    u = st.sparse_coo_tensor(np.concatenate([u.indices(), u.indices()[:, :2]], 1),  # uncoalesced: repeats
                             np.concatenate([u.values(), 0.5 * u.values()[:2]]), u.shape)
    v = st.from_dense(np.array([0.0, 1.5, 0.0, -2.0]), "coo")
    w = rng.standard_normal((2 + 3 + 1, 4 + 2 + 4))
    checks = [(t, lambda x: st.sum(st.hstack([x, x * 2.0]).sin())),
              (t, lambda x: st.sum(st.vstack([x, x]).tanh() ** 2)),
              (v, lambda x: st.sum(st.vstack([x, x * 3.0]).sin())),
              (v, lambda x: st.sum(np.hstack([x, x]) ** 3)),
              (t, lambda x: st.sum(st.block_diag(x, u, v).sin() * w)),
              (u, lambda x: st.sum(st.block_diag([t, x, v]).sin() * w))]
    for x, f in checks:
        _, pullback = st.autograd.vjp(f, x)
        (g,) = pullback(1.0)
        np.testing.assert_allclose(g.values(), _fd(f, x), atol=1e-6)


def test_fuzz_findings():
    """Mixed index dtypes, bool duplicates promoted, gradients through mixed layouts and blocks."""
    a = st.from_dense(np.array([[1.0, 2.0], [0.0, 3.0]]), "coo", index_dtype=np.int32)
    b = st.from_dense(np.array([[0.0, 1.0], [4.0, 0.0]]), "coo", index_dtype=np.int64)
    for x, y in ((a, b), (b, a)):
        k = st.kron(x, y)
        assert k.index_dtype == np.int64
        np.testing.assert_array_equal(k.to_dense(), np.kron(x.to_dense(), y.to_dense()))
    dup = st.sparse_coo_tensor(np.array([[0, 0]]), np.array([True, True]), (2,))  # dense [True, False]
    np.testing.assert_array_equal(st.kron(st.from_dense(np.array([3.0]), "coo"), dup).to_dense(), [3.0, 0.0])
    u = st.sparse_coo_tensor(np.array([[0, 0], [0, 0]]), np.array([1.0, 2.0]), (1, 1))  # uncoalesced
    c = st.from_dense(np.array([[5.0]]), "csr")
    for f in (lambda x: st.sum(st.hstack([x, c]) ** 2), lambda x: st.sum(st.vstack([x, c]) ** 2),
              lambda x: st.sum(st.cat([x, c], 1) ** 2)):
        _, pb = st.autograd.vjp(f, u)
        np.testing.assert_allclose(pb(1.0)[0].values(), _fd(f, u), atol=1e-6)
    for layout in ("bsr", "bsc"):
        blk = st.from_dense(np.arange(1.0, 5.0).reshape(2, 2), layout, blocksize=(2, 2))
        f = lambda x: st.sum(st.block_diag(x, c, c).sin())  # noqa: E731 - a bsr result, parts off the blocks
        _, pb = st.autograd.vjp(f, blk)
        np.testing.assert_allclose(pb(1.0)[0].values(), _fd(f, blk), atol=1e-6)
