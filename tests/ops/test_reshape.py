"""reshape and flatten (sparsetensor.ops.dims) on every layout, with batch and dense dims, in C and
F order, and np.reshape of a tensor.

Oracle: NumPy's reshape of the dense array (and SciPy's coo_array.reshape, the same thing for 2-d);
gradients against central differences through st.autograd.vjp and against torch through
sparsetensor.torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from conftest import LAYOUTS, requires_torch
from test_dims import _fd


def make(rng, layout, index_dtype=np.int64, dense=False):
    """A (2, 4, 6) tensor (compressed: one batch dim, every batch of one pattern) or (2, 4, 6, 2)
    with a dense dim; with its dense array."""
    shape = (2, 4, 6) + ((2,) if dense else ())
    mask = rng.random((4, 6) + ((1,) if dense else ())) < 0.4
    a = rng.standard_normal(shape) * mask
    if layout == "coo":
        return st.from_dense(a, "coo", dense_dim=int(dense), index_dtype=index_dtype), a
    bs = (2, 2) if layout in ("bsr", "bsc") else None
    return st.from_dense(a, layout, blocksize=bs, batch_dim=1, dense_dim=int(dense), index_dtype=index_dtype), a


SHAPES = [(8, 6), (2, 24), (48, 1), (2, 2, 2, 6), (1, 2, 4, 6), (4, 2, 6), (2, 4, 6), (-1, 6), (4, -1, 2)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("order", ["C", "F"])
def test_reshape(rng, layout, index_dtype, order):
    t, a = make(rng, layout, index_dtype)
    ran = 0
    for shape in SHAPES + [(48,), (-1,)]:
        want = a.reshape(shape, order=order)
        try:
            r = t.reshape(shape, order=order)
        except NotImplementedError as e:  # a compressed tensor keeps two sparse dims
            assert layout != "coo" and want.ndim < 2 and "has two" in str(e)
            continue
        except ValueError as e:  # batches of different nnz, or a blocksize that does not divide
            assert layout != "coo" and "reshape of a" in str(e), e
            continue
        r.check_invariants()
        ran += 1
        assert r.layout is t.layout and r.shape == want.shape and r.index_dtype == index_dtype
        np.testing.assert_array_equal(r.to_dense(), want)
        if order == "C" and layout == "coo":
            assert r.is_coalesced()
        for other in (st.reshape(t, *shape, order=order), np.reshape(t, shape, order=order)):
            np.testing.assert_array_equal(other.to_dense(), want)
    assert ran >= 4
    assert t.reshape(t.shape) is t


def test_batch_reshape_shares_arrays(rng):
    t, a = make(rng, "csr")
    r = t.reshape(1, 2, 1, 4, 6)
    assert np.shares_memory(r.plain_indices(), t.plain_indices()) and np.shares_memory(r.values(), t.values())
    np.testing.assert_array_equal(r.to_dense(), a.reshape(1, 2, 1, 4, 6))
    assert r.batch_dim == 3 and r.reshape(2, 4, 6).batch_dim == 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dense_dims(rng, layout):
    t, a = make(rng, layout, dense=True)
    for shape in [(8, 6, 2), (2, 24, 2), (2, 4, 6, 2, 1), (8, 6, 1, 2)]:
        if layout != "coo" and shape in ((2, 24, 2), (8, 6, 1, 2)):
            continue  # 1 sparse dim; batches (8,) of (6, 1) matrices of different nnz
        r = t.reshape(shape)
        r.check_invariants()
        np.testing.assert_array_equal(r.to_dense(), a.reshape(shape))
    c, a = make(rng, "coo", dense=True)
    r = c.reshape(48, 2)
    assert (r.sparse_dim, r.dense_dim) == (1, 1)
    r = c.reshape(8, 6, 2, 1)  # the split with the same dense dims is not possible: the fewest
    assert (r.sparse_dim, r.dense_dim) == (2, 2)
    with pytest.raises(NotImplementedError, match="would mix its sparse dims"):
        c.reshape(96)
    with pytest.raises(NotImplementedError, match="order='F'"):
        c.reshape(8, 6, 2, order="F")


def test_errors_and_index_dtype(rng):
    t, _ = make(rng, "coo", np.int32)
    for bad in [(5, 10), (-1, -1, 2), (-2, 24), (0, -1)]:
        with pytest.raises(ValueError):
            t.reshape(bad)
    with pytest.raises(TypeError, match="takes ints"):
        t.reshape(2.0, 24)
    with pytest.raises(ValueError, match="order"):
        t.reshape(48, order="K")
    big = st.sparse_coo_tensor(np.array([[69999], [69999]], np.int32), np.ones(1), (70000, 70000))
    r = big.reshape(-1)
    assert r.index_dtype == np.int64 and r.indices()[0, 0] == 70000 * 70000 - 1  # the size needs int64
    assert big.reshape(4, 4, 4375, 70000).index_dtype == np.int32
    csr = st.from_dense(np.eye(4), "csr")
    with pytest.raises(NotImplementedError, match="leaves 1 sparse dim"):
        csr.reshape(16)
    with pytest.raises(ValueError, match="reshape of a bsr"):
        st.from_dense(np.eye(4), "bsr", blocksize=(2, 2)).reshape(8, 2, order="F").reshape(2, 8).reshape(16, 1)
    with pytest.raises(TypeError):
        st.reshape(np.eye(2), (4,))


def test_unchecked_out_of_bounds_is_refused():
    t = st.sparse_coo_tensor(np.array([[0, 5], [1, 1]]), np.ones(2), (3, 4), check_invariants=False)
    with pytest.raises(st.InvariantError):
        t.reshape(12)
    ok = st.sparse_coo_tensor(np.array([[2, 0], [1, 1]]), np.array([1.0, 2.0]), (3, 4), check_invariants=False)
    r = ok.reshape(4, 3)
    assert not r.is_coalesced()
    np.testing.assert_array_equal(r.to_dense(), ok.to_dense().reshape(4, 3))


def test_flatten(rng):
    t, a = make(rng, "coo", dense=True)
    assert t.flatten(0, 1).shape == (8, 6, 2)
    np.testing.assert_array_equal(t.flatten(1, 2).to_dense(), a.reshape(2, 24, 2))
    with pytest.raises(ValueError, match="comes after"):
        t.flatten(2, 1)
    c, a = make(rng, "csr")
    np.testing.assert_array_equal(st.flatten(c, 0, 1).to_dense(), a.reshape(8, 6))


def test_scipy_agrees(rng):
    import scipy.sparse as sp

    m = sp.random_array((6, 8), density=0.3, rng=0, format="coo")
    for fmt in ("coo", "csr", "csc"):
        t = st.from_scipy(m.asformat(fmt))
        for shape in [(4, 12), (48, 1), (2, 24)]:
            for order in "CF":
                np.testing.assert_array_equal(t.reshape(shape, order=order).to_dense(),
                                              m.asformat(fmt).reshape(shape, order=order).toarray())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vjp(rng, layout):
    t, _ = make(rng, layout, dense=True)
    w = rng.standard_normal((8, 6, 2))
    fns = [lambda x: st.sum(x.reshape(8, 6, 2).sin() * w),
           lambda x: st.sum(x.flatten(0, 1) ** 2 * w),
           lambda x: st.sum(np.reshape(x, (8, 6, 2)).tanh())]
    if layout == "coo":
        fns.append(lambda x: st.sum(x.reshape(2, 2, 2, 6, 2).reshape(8, 6, 2) * w))
        fns.append(lambda x: st.sum(x.reshape(6, 8, 2, order="C").reshape(48, 2).sin()))
    else:
        fns.append(lambda x: st.sum(x.reshape(1, 2, 4, 6, 2) * 3.0))
    for f in fns:
        _, pullback = st.autograd.vjp(f, t)
        (g,) = pullback(1.0)
        np.testing.assert_allclose(g.values(), _fd(f, t), atol=1e-6)
    c, _ = make(rng, "csr")
    w2 = rng.standard_normal((6, 8))
    f = lambda x: st.sum(x.reshape(6, 8, order="F").sin() * w2)  # noqa: E731 - entries reordered
    _, pullback = st.autograd.vjp(f, c)
    np.testing.assert_allclose(pullback(1.0)[0].values(), _fd(f, c), atol=1e-6)


@requires_torch
def test_torch(rng):
    import torch
    import sparsetensor.torch as stt

    A = torch.tensor([[0.0, 2.0, 0.0], [3.0, 0.0, 1.0]], dtype=torch.float64).to_sparse().requires_grad_()
    W = torch.arange(6.0, dtype=torch.float64).reshape(3, 2)
    (stt.to_dense(stt.reshape(A, (3, 2))) * W).sum().backward()
    np.testing.assert_array_equal(A.grad.to_dense().numpy(), (W.reshape(2, 3) * (A.detach().to_dense() != 0)).numpy())
    B = torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=torch.float64).to_sparse()
    np.testing.assert_array_equal(stt.flatten(B).to_dense().numpy(), [0.0, 2.0, 3.0, 0.0])


def test_dask_metadata_of_fewer_dims(rng):
    da = pytest.importorskip("dask.array")
    t, a = make(rng, "coo")
    x = st.dask.from_sparse(t, chunks=(1, 2, 6))
    got = x.sum(axis=(0, 1)).compute()
    np.testing.assert_allclose(got.to_dense() if isinstance(got, st.SparseTensor) else got, a.sum(axis=(0, 1)))
    y = da.reshape(x, (8, 6))
    np.testing.assert_array_equal(y.compute().to_dense(), a.reshape(8, 6))


def test_vjp_of_reshapes_that_do_not_invert():
    """The pullback reads the cotangent at the input's pattern: reshaping it back to the input's
    layout can fail (a dense dim of size 1 taken into the sparse dims; blocks padded with zeros)."""
    a = np.array([[[1.0], [0.0]], [[2.0], [3.0]]])
    t = st.from_dense(a, "csr", dense_dim=1)
    w = np.arange(4.0).reshape(2, 2)
    f = lambda x: st.sum(x.reshape(2, 2).sin() * w)  # noqa: E731
    _, pb = st.autograd.vjp(f, t)
    np.testing.assert_allclose(pb(1.0)[0].values(), _fd(f, t), atol=1e-6)
    b = np.array([[[0, 0], [0, 0], [1, 1], [1, 0]], [[1, 0], [2, 0], [1, 0], [0, 0]]], float)
    t = st.from_dense(b, "bsr", blocksize=(2, 1), batch_dim=1)
    w = np.arange(16.0).reshape(4, 4)
    f = lambda x: st.sum(x.reshape(4, 4) * w)  # noqa: E731
    _, pb = st.autograd.vjp(f, t)
    np.testing.assert_allclose(pb(1.0)[0].values(), _fd(f, t), atol=1e-6)
    c = st.from_dense(np.arange(6.0).reshape(2, 3), "coo")
    w = np.arange(6.0).reshape(3, 2)
    f = lambda x: st.sum(np.reshape(x, (3, 2), "F") * w)  # noqa: E731 - np.reshape's positional order
    _, pb = st.autograd.vjp(f, c)
    np.testing.assert_allclose(pb(1.0)[0].to_dense(), w.reshape(2, 3, order="F"))


def test_batched_block_reshape():
    a = np.array([[1.0, 2, 2, 0], [0, 0, 1, 0]])
    t = st.from_dense(a, "bsr", blocksize=(1, 2))
    r = t.reshape((4, 1, 2), order="F")  # one 1x2 block per batch, of 2 or 1 elements
    r.check_invariants()
    assert r.layout is st.sparse_bsr and r.nnz == 1
    np.testing.assert_array_equal(r.to_dense(), a.reshape((4, 1, 2), order="F"))


def test_numpy_spellings_and_edge_shapes():
    a = np.arange(12.0).reshape(3, 4) % 5
    t = st.from_dense(a, "coo")
    np.testing.assert_array_equal(t.reshape(np.array([2, 6])).to_dense(), a.reshape(2, 6))  # a shape array
    np.testing.assert_array_equal(t.reshape(6, 2, order="f").to_dense(), a.reshape(6, 2, order="F"))
    assert t.reshape(4, 3, order="A").shape == (4, 3)  # a tensor has no memory order: C
    z = st.from_dense(np.zeros((3, 0)), "coo", dense_dim=1)
    assert z.reshape(0, 3).shape == (0, 3) and z.reshape(0, 3).nnz == 0  # no element: every dim sparse
    c = st.from_dense(np.zeros((0, 3, 2)), "csr", dense_dim=1)
    assert c.reshape(0, 6).layout is st.sparse_csr and c.reshape(0, 6).shape == (0, 6)
    d = st.from_dense(a, "coo", dense_dim=2)  # no sparse dim
    np.testing.assert_array_equal(d.reshape(12).to_dense(), a.ravel())
    one = st.from_dense(np.full((1, 1), 5.0), "coo")
    assert one.reshape(()).shape == () and float(one.reshape(()).to_dense()) == 5.0
