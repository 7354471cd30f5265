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


@pytest.mark.parametrize("dtypes", [(np.bool_, np.bool_), (np.int8, np.int8), (np.bool_, np.int8),
                                    (np.int16, np.float32), (np.float32, np.float32)])
def test_kron_of_repeated_entries(dtypes):
    """kron of uncoalesced COO operands (repeated coordinates) equals kron of their dense forms, in
    every dtype: duplicates are summed in their own dtype (bool: or; int8 wraps). A bool operand's
    values once came merged (astype) while its indices did not: a tensor of 9 indices and 6 values."""
    idx = np.array([[0, 1, 0, 1], [1, 0, 1, 1]])
    ta, tb = (st.sparse_coo_tensor(idx, np.array([1, 100, 1, 100]).astype(dt), (2, 2)) for dt in dtypes)
    for a, b in ((ta, tb), (tb, ta), (ta, ta)):
        k = st.kron(a, b)
        assert k.indices().shape[1] == k.values().shape[0]
        np.testing.assert_array_equal(k.to_dense(), np.kron(a.to_dense(), b.to_dense()))


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.float16,
                                   np.float32, np.float64, np.complex64, np.complex128])
def test_kron_sorted_in_every_dtype(rng, dtype):
    """The host writes the pairs of matrices and vectors in sorted order (no sort after): the result
    says coalesced only where its coordinates are strictly increasing, and its products are
    NumPy's (integers wrap, float16 rounds once; a complex product may differ from NumPy's in
    the last bit, which NumPy computes with fused multiply-adds where the CPU has them)."""
    def values(shape):
        if dtype == np.bool_:
            return rng.random(shape) < 0.6
        if np.dtype(dtype).kind in "iu":
            info = np.iinfo(dtype)
            return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
        v = rng.standard_normal(shape) * (3 if dtype == np.float16 else 300)
        return (v + 1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else v).astype(dtype)

    for sa, sb in (((4, 5), (3, 2)), ((6,), (4,)), ((1, 7), (5, 1)), ((3, 0), (2, 2))):
        A = values(sa) * (rng.random(sa) < 0.5)
        B = values(sb) * (rng.random(sb) < 0.5)
        a, b = st.from_dense(A.astype(dtype), "coo"), st.from_dense(B.astype(dtype), "coo")
        k = st.kron(a, b)
        assert k.is_coalesced() and k.dtype == dtype
        key = np.ravel_multi_index(tuple(k.indices().astype(np.int64)), k.shape) if k.nnz else np.zeros(0)
        assert np.all(np.diff(key) > 0)
        want = np.kron(A.astype(dtype), B.astype(dtype))
        if np.dtype(dtype).kind == "c":
            np.testing.assert_allclose(k.to_dense(), want, rtol=4 * np.finfo(dtype).eps)
        else:
            np.testing.assert_array_equal(k.to_dense(), want)


def test_kron_rows_refuses_bad_runs():
    """The kernel's runs must cut the entries (they give every write's position)."""
    from sparsetensor._lib import _select

    ia, ib = np.array([[0, 0, 1], [0, 1, 1]], np.int64), np.array([[0], [1]], np.int64)
    v = np.ones(3)
    out, ov = np.empty((2, 3), np.int64), np.empty(3)
    for ga in (np.array([0, 2], np.int64), np.array([0, 3, 2, 3], np.int64), np.array([1, 3], np.int64)):
        with pytest.raises(ValueError, match="runs"):
            _select.kron_rows(ia, v, ga, ib, np.ones(1), np.array([0, 1], np.int64), 1, 2, out, ov, 1)
    with pytest.raises(ValueError, match="wrong size"):
        _select.kron_rows(ia, v, np.array([0, 2, 3], np.int64), ib, np.ones(1), np.array([0, 1], np.int64), 1, 2,
                          np.empty((2, 2), np.int64), ov, 1)


@pytest.mark.parametrize("layout", ["csr", "csc", "coo"])
def test_joins_check_changed_caller_indices(layout):
    """A tensor on the caller's index arrays, checked, then written out of range by the caller: the
    joins that offset its changed indices into the next input's range check it again (hstack
    dropped the entry, block_diag put it into the next block), and kron names the caller's tensor;
    the others give a result that the exits check again."""
    if layout == "coo":
        idx = np.array([[0, 1], [0, 0]])
        t = st.sparse_coo_tensor(idx, np.array([1.0, 2.0]), (2, 2))
        col = idx[1]
    else:
        col = np.array([0, 1])
        make = st.sparse_csr_tensor if layout == "csr" else st.sparse_csc_tensor
        t = make(np.array([0, 1, 2]), col, np.array([1.0, 2.0]), (2, 2))
    t.check_invariants()
    col[1] = 3
    other = st.from_dense(np.eye(2), layout)
    for call in (lambda: st.hstack([t, other]), lambda: st.vstack([t, other]), lambda: st.block_diag(t, other),
                 lambda: st.cat([other, t], 1), lambda: st.cat([other, t], 0), lambda: st.kron(t, other)):
        # along the dim of the changed index the join raises; along the other the result holds the
        # index as it is, and the exits check it again
        with pytest.raises(st.InvariantError, match=layout):
            call().to_scipy()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_block_diag_keeps_order(rng, layout):
    """Compressed parts are joined in their own compressed form: the result stays coalesced."""
    parts = [_sparse(rng, s, layout, bs=(1, 1))[0] for s in [(3, 2), (2, 5), (4, 1)]]
    d = st.block_diag(*parts)
    d.check_invariants()
    assert d.is_coalesced() or layout == "coo"
    np.testing.assert_array_equal(d.to_dense(), scipy.linalg.block_diag(*[p.to_dense() for p in parts]))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kron_vjp(rng, layout):
    """kron's rule against finite differences: every layout, an array operand (a dense
    cotangent), an uncoalesced operand (each pair its own cotangent), np.kron on the tape, and
    complex values (the cotangent of a is G * conj(b))."""
    a, _ = _sparse(rng, (2, 4), layout)
    b, _ = _sparse(rng, (3, 2), "csc")
    dense = rng.standard_normal((3, 2))
    u = st.sparse_coo_tensor(np.array([[0, 0, 1], [1, 1, 0]]), np.array([1.0, 2.0, 3.0]), (2, 2))
    for x, f in [(a, lambda x: st.sum(st.kron(x, b).sin())), (b, lambda y: st.sum(st.kron(a, y).sin())),
                 (a, lambda x: st.sum(st.kron(dense, x).tanh())), (u, lambda x: st.sum(np.kron(x, b) * 3.0)),
                 (u, lambda x: st.sum(st.kron(b, x).sin())), (u, lambda x: st.sum(st.kron(x, dense).sin()))]:
        _, pullback = st.autograd.vjp(f, x)
        np.testing.assert_allclose(pullback(1.0)[0].values(), _fd(f, x), atol=1e-6)
    dense[0, 1] = 0.0  # a zero of the array moves the result too: its pairs are in the pattern inside vjp
    for other in (a, u):
        f = lambda y: np.sum(np.sin(st.kron(other, y).to_dense()))  # noqa: E731
        _, pullback = st.autograd.vjp(f, dense)
        (g,) = pullback(1.0)
        eps, want = 1e-6, np.zeros_like(dense)
        for i in np.ndindex(dense.shape):
            step = np.zeros_like(dense)
            step[i] = eps
            want[i] = (f(dense + step) - f(dense - step)) / (2 * eps)
        np.testing.assert_allclose(g, want, atol=1e-6)
    x = np.array([[1.0, 0.0], [2.0, 3.0]])
    row = st.from_dense(np.array([[1.0, 2.0]]), "csr")
    for f in (lambda x: st.sum(st.kron(x, row)), lambda x: st.sum(np.kron(x, row))):  # a recorded array first
        _, pullback = st.autograd.vjp(f, x)
        np.testing.assert_array_equal(pullback(1.0)[0], np.full((2, 2), 3.0))
    z = st.from_dense(np.array([[1 + 2j, 0], [0, 3j]]), "csr")
    w = st.from_dense(np.array([[1 - 1j, 2.0]]), "coo")
    out, pullback = st.autograd.vjp(lambda x: st.kron(x, w), z)
    np.testing.assert_allclose(pullback(out)[0].values(), z.values() * np.sum(np.abs(w.values()) ** 2))


def test_kron_sums_duplicates_before_promoting():
    """An uncoalesced operand's duplicates add in its own dtype (uint8 wraps) before the values are
    promoted, as the dense operand's elements are."""
    b = st.sparse_coo_tensor([[0, 0]], np.array([200, 100], np.uint8), (1,))
    a = st.sparse_coo_tensor([[0]], np.array([1], np.int16), (1,))
    np.testing.assert_array_equal(st.kron(a, b).to_dense(), np.kron(a.to_dense(), b.to_dense()))
