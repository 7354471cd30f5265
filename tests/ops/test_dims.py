"""permute, unsqueeze and squeeze (sparsetensor.ops.dims) on every layout with batch and dense dims.

Oracle: NumPy's transpose, expand_dims and squeeze of the dense array; PyTorch 2.13 for COO
(the layout it has them for); their gradients against central differences through
st.autograd.vjp and against torch through sparsetensor.torch.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import sparsetensor as st
from conftest import LAYOUTS, requires_torch


def make(rng, layout, dtype=np.float64, index_dtype=np.int64):
    """A (2, 3, 4, 6, 2) tensor: two batch (coo: sparse) dims, two sparse, one dense; with its dense array."""
    mask = rng.random((4, 6, 1)) < 0.4  # one pattern for every batch: compressed batches share nnz
    a = (rng.standard_normal((2, 3, 4, 6, 2)) * mask).astype(dtype)
    if layout == "coo":
        return st.from_dense(a, "coo", dense_dim=1, index_dtype=index_dtype), a
    bs = (2, 2) if layout in ("bsr", "bsc") else None
    return st.from_dense(a, layout, blocksize=bs, batch_dim=2, dense_dim=1, index_dtype=index_dtype), a


def kind(layout, d):
    if layout == "coo":
        return "sparse" if d < 4 else "dense"
    return "batch" if d < 2 else "sparse" if d < 4 else "dense"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_permute(rng, layout, index_dtype):
    t, a = make(rng, layout, index_dtype=index_dtype)
    for order in itertools.permutations(range(5)):
        if any(kind(layout, d) != kind(layout, i) for i, d in enumerate(order)):
            with pytest.raises(NotImplementedError, match="dims move only among dims of their kind"):
                t.permute(order)
            continue
        for r in (t.permute(order), t.permute(*order), st.permute(t, tuple(d - 5 for d in order))):
            r.check_invariants()
            assert r.index_dtype == index_dtype and r.dense_dim == 1
            np.testing.assert_array_equal(r.to_dense(), a.transpose(order))
        if layout != "coo":
            swapped = order[2:4] == (3, 2)
            assert (r.layout.compressed_rows != t.layout.compressed_rows) == swapped
    for bad in [(0, 1, 2, 3), (0, 0, 1, 2, 3), (0, 1, 2, 3, 5)]:
        with pytest.raises((ValueError, IndexError)):
            t.permute(bad)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_unsqueeze_squeeze(rng, layout):
    t, a = make(rng, layout, index_dtype=np.int32)
    for d in range(-6, 6):
        if layout != "coo" and d % 6 == 3:
            with pytest.raises(NotImplementedError, match="third sparse dim; convert to coo"):
                t.unsqueeze(d)
            continue
        u = t.unsqueeze(d)
        u.check_invariants()
        assert u.layout is t.layout and u.index_dtype == np.int32 and u.blocksize == t.blocksize
        np.testing.assert_array_equal(u.to_dense(), np.expand_dims(a, d))
        s = u.squeeze(d)
        s.check_invariants()
        np.testing.assert_array_equal(s.to_dense(), a)
        assert s.shape == t.shape and u.squeeze().shape == t.shape
    with pytest.raises(IndexError):
        t.unsqueeze(6)
    assert t.squeeze(0).shape == t.shape  # a dim whose size is not 1 is left (PyTorch)
    w = t.unsqueeze(0).unsqueeze(-1)
    np.testing.assert_array_equal(w.squeeze((0, 6)).to_dense(), a)
    np.testing.assert_array_equal(w.squeeze(0).to_dense(), np.expand_dims(a, -1))


def test_squeeze_keeps_needed_sparse_dims():
    c = st.from_dense(np.ones((1, 1)), "coo")
    assert c.squeeze().shape == (1,) and c.squeeze().layout is st.sparse_coo
    with pytest.raises(NotImplementedError, match="its last sparse dim"):
        c.squeeze((0, 1))
    r = st.from_dense(np.ones((1, 3)), "csr")
    assert r.squeeze().shape == (1, 3)
    with pytest.raises(NotImplementedError, match="one of its two sparse dims.*convert to coo"):
        r.squeeze(0)
    assert st.from_dense(np.ones((1, 3)), "coo").squeeze(0).shape == (3,)


def _fd(f, t, eps=1e-6):
    v = t.values()
    flat = v.reshape(-1)
    g = np.zeros(flat.size)
    for k in range(flat.size):
        hi, lo = flat.copy(), flat.copy()
        hi[k] += eps
        lo[k] -= eps
        g[k] = (f(t._replace_values(hi.reshape(v.shape))) - f(t._replace_values(lo.reshape(v.shape)))) / (2 * eps)
    return g.reshape(v.shape)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vjp(rng, layout):
    t, _ = make(rng, layout)
    if layout == "coo":  # uncoalesced: shuffled entries and repeats
        perm = rng.permutation(t.nnz)
        idx = t.indices()[:, perm]
        t = st.sparse_coo_tensor(np.concatenate([idx, idx[:, :3]], 1),
                                 np.concatenate([t.values()[perm], 0.5 * t.values()[perm][:3]]), t.shape)
    fns = [lambda x: st.sum(st.permute(x, (1, 0, 2, 3, 4)).sin() * 2.0),
           lambda x: st.sum(x.unsqueeze(1).unsqueeze(-1) * x.unsqueeze(1).unsqueeze(-1)),
           lambda x: st.sum(x.unsqueeze(0).unsqueeze(-1).squeeze() ** 3),
           lambda x: st.sum(x.unsqueeze(5).squeeze(5).tanh())]
    for f in fns:
        out, pullback = st.autograd.vjp(f, t)
        (g,) = pullback(1.0)
        np.testing.assert_allclose(g.values(), _fd(f, t), atol=1e-6)


@requires_torch
def test_torch(rng):
    import torch
    import sparsetensor.torch as stt

    t, a = make(rng, "coo")
    tt = t.to_torch().coalesce()
    for order in [(1, 0, 3, 2, 4), (3, 2, 1, 0, 4)]:
        np.testing.assert_array_equal(t.permute(order).to_dense(), tt.permute(order).to_dense().numpy())
    for d in range(6):
        np.testing.assert_array_equal(t.unsqueeze(d).to_dense(), tt.unsqueeze(d).to_dense().numpy())
    A = torch.tensor([[0.0, 2.0, 0.0], [3.0, 0.0, 1.0]], dtype=torch.float64).to_sparse().requires_grad_()
    W = torch.arange(6.0, dtype=torch.float64).reshape(3, 2)
    (stt.to_dense(stt.squeeze(stt.unsqueeze(stt.permute(A, (1, 0)), 0))) * W).sum().backward()
    np.testing.assert_array_equal(A.grad.to_dense().numpy(), (W.T * (A.detach().to_dense() != 0)).numpy())


def test_a_0d_tensor_flattens_and_masks():
    t = st.from_dense(np.array(-3.0), "coo")
    f = t.flatten()
    assert f.shape == (1,) and np.array_equal(f.to_dense(), [-3.0]) and t.flatten(0, -1).shape == (1,)
    with pytest.raises(IndexError):
        t.flatten(1)
    for src in (st.from_dense(np.array(5.0), "coo"), np.array(5.0)):
        m = st.sparse_mask(src, t)
        assert m.shape == () and m.to_dense() == 5.0
    empty = st.sparse_coo_tensor(np.zeros((0, 0), np.int64), np.zeros(0), size=())
    assert st.sparse_mask(st.from_dense(np.array(5.0), "coo"), empty).nnz == 0
    assert st.sparse_mask(empty, t).to_dense() == 0.0
