"""In-place arithmetic and pointwise ops (``add_``, ``sub_``, ``mul_``, ``div_``, ``+= -= *= /=``,
every pointwise ``name_``, ``transpose_``, ``t_``; sparsetensor.ops.inplace).

Oracle: the op out of place, its result taken in the tensor's own layout, blocksize, value
dtype and index dtype (compared densely, exactly: both run the same kernels), and PyTorch 2.13
where it has the in-place op. Every result passes check_invariants(); arrays that the tensor
held before, and that other tensors share, are never written.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._api import _POINTWISE, _PREDICATES
from conftest import LAYOUTS, random_dense, requires_torch

BLOCKSIZE = {"coo": (1, 1), "csr": (1, 1), "csc": (1, 1), "bsr": (2, 3), "bsc": (2, 3)}
DTYPES = [(np.float64, np.int64), (np.complex128, np.int32), (np.float32, np.int32), (np.int64, np.int32)]
DIMS = [((), ()), ((2,), ()), ((), (2,)), ((2,), (3,))]  # (batch, dense)


def make(rng, layout, *, batch=(), dense=(), dtype=np.float64, index_dtype=np.int64, nnz=None):
    bs = BLOCKSIZE[layout]
    a = random_dense(rng, batch=batch, blocks=(3, 4), blocksize=bs, dense=dense, dtype=dtype, nnz=nnz)
    if layout == "coo":
        return st.from_dense(a, "coo", dense_dim=len(dense), index_dtype=index_dtype)
    return st.from_dense(a, layout, blocksize=bs if layout in ("bsr", "bsc") else None, batch_dim=len(batch),
                         dense_dim=len(dense), index_dtype=index_dtype)


def kept(t, before):
    """``t`` is valid and kept its layout, blocksize, dims and dtypes (``before`` a tuple of them)."""
    t.check_invariants()
    assert (t.layout, t.blocksize, t.batch_dim, t.dense_dim, t.dtype, t.index_dtype, t.shape) == before


def signature(t) -> tuple:
    return t.layout, t.blocksize, t.batch_dim, t.dense_dim, t.dtype, t.index_dtype, t.shape


def snapshot(t) -> list:
    return [(a, a.copy()) for _, a in t._members()]


def unwritten(snap) -> None:
    for a, copy in snap:
        np.testing.assert_array_equal(a, copy)


def expect(r, t):
    """The dense array that ``t`` must hold after taking the out-of-place result ``r``."""
    return r.to_dense().astype(t.dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype,index_dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch,dense", DIMS, ids=str)
def test_arithmetic(rng, layout, dtype, index_dtype, batch, dense):
    t = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, nnz=5)
    other = make(rng, layout, batch=batch, dense=dense, dtype=np.float64 if dtype != np.int64 else np.int64, nnz=4)
    if batch and layout != "coo":  # a union of different batch patterns differs in nnz by batch: t's own
        other = t * 3
    row = (rng.integers(1, 5, t.shape[-1]) if dtype == np.int64 else rng.standard_normal(t.shape[-1])).astype(dtype)
    cases = [("add_", (other,), {"alpha": 2}), ("sub_", (other,), {}), ("mul_", (other,), {}),
             ("mul_", (3,), {}), ("mul_", (row,), {}), ("div_", (2,), {"rounding_mode": "floor"}
                                                         if dtype == np.int64 else {}),
             ("div_", (row,), {} if dtype != np.int64 else {"rounding_mode": "trunc"})]
    if dtype == np.complex128:
        cases = [c for c in cases if "rounding_mode" not in c[2]]
    for name, args, kwargs in cases:
        before, snap = signature(t), snapshot(t)
        want = expect(getattr(t, name[:-1])(*args, **kwargs), t)
        assert getattr(t, name)(*args, **kwargs) is t
        kept(t, before)
        np.testing.assert_array_equal(t.to_dense(), want)
        unwritten(snap)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mixed_layouts_and_dtypes(rng, layout):
    """The other operand in another layout and a wider dtype: the result comes back to t's."""
    def of(lay, dtype):
        a = random_dense(rng, blocks=(3, 4), blocksize=(2, 3), dtype=dtype, nnz=5)
        return st.from_dense(a, lay, blocksize=(2, 3) if lay in ("bsr", "bsc") else None)

    t = of(layout, np.float32)._with_index_dtype(np.int32)
    for other_layout in LAYOUTS:
        o = of(other_layout, np.float64)
        before = signature(t)
        want = (t.to_dense().astype(np.float64) + o.to_dense()).astype(np.float32)
        t.add_(o)
        kept(t, before)
        np.testing.assert_allclose(t.to_dense(), want, rtol=1e-6)
        for _, x in o._members():
            assert not any(np.shares_memory(x, y) for _, y in t._members())


@pytest.mark.parametrize("name", [n for n in _POINTWISE if n not in _PREDICATES])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_pointwise(rng, layout, name):
    t = make(rng, layout, batch=(2,), dense=(), dtype=np.float64, nnz=5)
    t = t.abs() if name in ("sqrt", "log1p", "rsqrt", "log", "log2", "log10", "acosh") else t
    if name in ("asin", "acos", "atanh", "erfinv"):
        t = t.tanh() * 0.5  # inside the domain
    args = (2,) if name == "pow" else ()
    try:
        want = getattr(t, name)(*args)
    except (ValueError, TypeError) as e:  # the functions that are not zero-preserving refuse in place too
        snap = snapshot(t)
        with pytest.raises(type(e), match=str(e)[:30].replace("(", r"\(").replace(")", r"\)")):
            getattr(t, f"{name}_")(*args)
        unwritten(snap)
        return
    before, snap = signature(t), snapshot(t)
    assert getattr(t, f"{name}_")(*args) is t
    kept(t, before)
    np.testing.assert_array_equal(t.to_dense(), expect(want, t))
    unwritten(snap)


def test_operators_alias():
    """``+= -= *= /=`` change the tensor itself where the result is sparse and of its shape (as torch's
    and, for scalars, SciPy's); a dense result is bound to the name instead."""
    t = st.from_dense(np.array([[1.0, 0.0], [0.0, 4.0]]), "csr")
    other = st.from_dense(np.array([[0.0, 2.0], [0.0, 1.0]]), "coo")
    u = t
    u *= 2
    u += other
    u -= 1 * other
    u /= 4
    assert u is t and t.layout is st.sparse_csr
    np.testing.assert_array_equal(t.to_dense(), [[0.5, 0.0], [0.0, 2.0]])
    v = t
    v += np.ones((2, 2))  # sparse + dense is dense: a new value, t unchanged
    assert isinstance(v, np.ndarray) and v is not t
    np.testing.assert_array_equal(t.to_dense(), [[0.5, 0.0], [0.0, 2.0]])
    w = t
    w *= np.array(2.0)  # a 0-d array is a scalar
    assert w is t
    np.testing.assert_array_equal(t.to_dense(), [[1.0, 0.0], [0.0, 4.0]])


def test_sharing_tensors_unaffected():
    t = st.from_dense(np.array([[1.0, 0.0, 3.0], [0.0, 4.0, 0.0]]), "csr")
    view = st.sparse_csr_tensor(t.crow_indices(), t.col_indices(), t.values(), size=t.shape)
    t.mul_(10).sqrt_().neg_()
    np.testing.assert_array_equal(view.to_dense(), [[1.0, 0.0, 3.0], [0.0, 4.0, 0.0]])
    np.testing.assert_allclose(t.to_dense(), -np.sqrt(10 * view.to_dense()))


def test_errors_leave_tensor_alone(rng):
    i = st.from_dense(np.array([[1, 0], [0, 2]], dtype=np.int64), "csr")
    f = st.from_dense(np.array([[1.0, 0.0], [0.0, 2.0]]), "coo")
    calls = [
        (TypeError, "float64 cannot be cast to t's dtype int64", lambda: i.mul_(2.5)),
        (TypeError, "float64 cannot be cast", lambda: i.sqrt_()),
        (TypeError, "float64 cannot be cast", lambda: i.__imul__(2.5)),
        (TypeError, "complex128 cannot be cast", lambda: f.mul_(1j)),
        (TypeError, "is a dense ndarray", lambda: f.add_(np.ones((2, 2)))),
        (ValueError, "must broadcast to the sparse operand's shape", lambda: f.mul_(np.ones((3, 2, 2)))),
        (TypeError, "expects a sparse tensor", lambda: st.ops.inplace.in_place("mul_", st.mul)(np.ones(2), 2)),
    ]
    for err, match, call in calls:
        snap_i, snap_f = [(a, a.copy()) for _, a in i._members()], [(a, a.copy()) for _, a in f._members()]
        members_i, members_f = [a for _, a in i._members()], [a for _, a in f._members()]
        with pytest.raises(err, match=match):
            call()
        assert [a for _, a in i._members()] == members_i and [a for _, a in f._members()] == members_f
        unwritten(snap_i)
        unwritten(snap_f)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,dense", [((), ()), ((2, 3), ()), ((), (2, 3)), ((2,), (2,))], ids=str)
def test_transpose_(rng, layout, batch, dense):
    t = make(rng, layout, batch=batch, dense=dense, index_dtype=np.int32, nnz=5)
    m, n = len(batch), len(dense)
    pairs = [(m, m + 1)] + ([(0, 1)] if m == 2 else []) + ([(t.ndim - 2, t.ndim - 1)] if n == 2 else [])
    if layout == "coo" and m == 2:
        pairs = [(0, 1), (1, 3)]  # coo's batch dims are sparse ones
    for d0, d1 in pairs:
        a = t.to_dense()
        bs = t.blocksize
        snap = snapshot(t)
        assert t.transpose_(d0, d1) is t
        t.check_invariants()
        assert t.layout.name == layout and t.index_dtype == np.int32
        np.testing.assert_array_equal(t.to_dense(), np.swapaxes(a, d0, d1))
        if layout in ("bsr", "bsc") and {d0, d1} == {m, m + 1}:
            assert t.blocksize == bs[::-1]
        unwritten(snap)


def test_t_():
    t = st.from_dense(np.arange(6.0).reshape(2, 3), "bsr", blocksize=(1, 3))
    assert t.t_() is t and t.shape == (3, 2) and t.blocksize == (3, 1) and t.layout is st.sparse_bsr
    np.testing.assert_array_equal(t.to_dense(), np.arange(6.0).reshape(2, 3).T)
    v = st.from_dense(np.array([0.0, 2.0]), "coo")
    assert v.t_() is v and v.shape == (2,)
    with pytest.raises(ValueError, match="at most 2 dims.*use transpose_"):
        st.from_dense(np.ones((2, 2, 2)), "coo").t_()


def test_vjp_records_new_values():
    """Inside vjp's function an augmented assignment on a recorded tensor makes a new value (the
    primal is not written); a ``name_`` method on one raises before it runs."""
    a = st.from_dense(np.array([[1.0, 0.0], [2.0, 3.0]]), "csr")
    c = st.from_dense(np.array([[1.0, 0.0], [0.0, 1.0]]), "csr")
    v0 = a.values().copy()

    def f(t):
        t *= 3.0
        t -= c
        t /= 2.0
        t += t
        return st.sum(t * t)

    out, pullback = st.autograd.vjp(f, a)
    x = a.to_dense()
    y = 2 * (3 * x - c.to_dense()) / 2
    assert out == pytest.approx((y * y).sum())
    (g,) = pullback(1.0)
    np.testing.assert_allclose(g.to_dense(), np.where(x != 0, 2 * y * 3, 0.0))
    np.testing.assert_array_equal(a.values(), v0)

    def g_(t):
        t.mul_(3.0)
        return st.sum(t)

    with pytest.raises(NotImplementedError, match="in-place mul_ .* use mul"):
        st.autograd.vjp(g_, a)
    np.testing.assert_array_equal(a.values(), v0)


@requires_torch
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_torch(rng, layout):
    import torch

    t = make(rng, layout, dtype=np.float32, index_dtype=np.int64, nnz=6)
    o = make(rng, layout, dtype=np.float32, nnz=5)
    tt, to = t.to_torch().clone(), o.to_torch().clone()  # clones: to_torch shares the values
    tt = tt.coalesce() if layout == "coo" else tt
    steps = [("mul_", (2.5,)), ("neg_", ()), ("abs_", ()), ("sqrt_", ()), ("sin_", ()), ("relu_", ())]
    if layout == "coo":  # torch's csr has no div_, add_ or mul_ of two tensors
        steps += [("div_", (4.0,)), ("add_", (to,)), ("mul_", (to,))]
    for name, args in steps:
        tt = tt.coalesce() if layout == "coo" else tt  # torch's coo abs_ & co. need it
        getattr(tt, name)(*args)
        getattr(t, name)(*(o if isinstance(x, torch.Tensor) else x for x in args))
        np.testing.assert_allclose(t.to_dense(), tt.to_dense().numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError):
        torch.sparse_coo_tensor([[0]], [1], (2,)).mul_(2.5)  # torch refuses this cast too
