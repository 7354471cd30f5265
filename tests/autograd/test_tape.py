"""vjp of functions composed of our ops (the tape): central differences, the refusals, the threads.

``check`` (test_autograd) differentiates ``L = Re<g, fn(*args)>`` by central differences
w.r.t. every stored value of every floating argument and compares the pullback's cotangents.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.autograd import vjp

from conftest import LAYOUTS
from test_autograd import BLOCK, check, make


def _make(rng, layout, shape=(4, 6), dtype=np.float64):
    return make(rng, layout, shape, dtype=dtype, blocksize=BLOCK.get(layout))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_tensor_used_twice(layout, dtype):
    """``t`` reaches the output along two paths; the cotangents add up (the issue's example)."""
    rng = np.random.default_rng(1)
    t = _make(rng, layout, dtype=dtype)
    check(lambda t: st.sum(t * 3.0 + t * t), t)
    out, pullback = vjp(lambda t: st.sum(t * 3.0), t)
    np.testing.assert_allclose(pullback(np.ones((), dtype))[0].values(), 3.0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_least_squares(layout):
    """``||A x - b||^2 / 2`` written with NumPy's arithmetic on the dense product."""
    rng = np.random.default_rng(2)
    A = _make(rng, layout)
    x, b = rng.standard_normal(6), rng.standard_normal(4)

    def loss(A, x):
        r = A @ x - b
        return 0.5 * np.sum(r ** 2)

    check(loss, A, x)
    value, pullback = vjp(loss, A, x)
    dA, dx = pullback(1.0)
    r = A.to_dense() @ x - b
    np.testing.assert_allclose(value, 0.5 * r @ r, rtol=1e-12)
    np.testing.assert_allclose(dx, A.to_dense().T @ r, rtol=1e-10)
    assert dA.layout == A.layout and dA.values().shape == A.values().shape


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_constant_factor_costs_no_product(layout, monkeypatch):
    """A dense factor that does not depend on the arguments gets no cotangent: the pullback
    runs the SDDMM of the sparse one and no product with the transpose."""
    from sparsetensor.ops import blas

    rng = np.random.default_rng(12)
    A = _make(rng, layout)
    X = rng.standard_normal((6, 3))
    calls = []
    real = blas.matmul
    monkeypatch.setattr(blas, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    out, pullback = vjp(lambda A: A @ X * 2.0, A)
    G = rng.standard_normal((4, 3))
    (dA,) = pullback(G)
    assert len(calls) == 1  # the forward's
    dense_ref = 2.0 * G @ X.T
    got = dA.to_dense()
    stored = A._replace_values(np.ones_like(A.values())).to_dense() != 0
    np.testing.assert_allclose(got[stored], dense_ref[stored], rtol=1e-12)


def test_chain_of_sparse_ops():
    """matmul, softmax, transpose, to_dense, mean and a scalar times a tensor, in one function."""
    rng = np.random.default_rng(3)
    A = _make(rng, "csr", (5, 5))
    X = rng.standard_normal((5, 3))

    def f(A, X):
        S = st.softmax(A * 2.0, 1)
        Y = S.mT @ X
        return (Y * Y).mean() + np.sum(A.values() ** 3)

    check(f, A, X)


def test_multiple_outputs_and_unused_argument():
    rng = np.random.default_rng(4)
    A, B = _make(rng, "coo"), _make(rng, "coo")
    x = rng.standard_normal(6)
    (y, s), pullback = vjp(lambda A, B, x: (A @ x, st.sum(A)), A, B, x)
    assert isinstance(y, np.ndarray) and type(y) is np.ndarray and np.ndim(s) == 0
    dA, dB, dx = pullback((np.ones(4), 2.0))
    np.testing.assert_allclose(dx, A.to_dense().sum(axis=0))
    np.testing.assert_allclose(dB.values(), 0.0)  # B does not reach the outputs: zeros of its pattern
    assert dB.layout == B.layout and dB.values().shape == B.values().shape
    with pytest.raises(ValueError, match="tuple of 2"):
        pullback(np.ones(4))


def test_indexing_and_broadcasting_of_dense_intermediates():
    rng = np.random.default_rng(5)
    A = _make(rng, "csc", (4, 4))
    x = rng.standard_normal(4)

    def f(A, x):
        y = A @ x
        return (y[1:3] * x[None, :2]).sum() + y[0] * y[0] + np.mean(np.exp(x) / (1.0 + y ** 2))

    check(f, A, x)


def test_sparse_constructor_around_recorded_values():
    """A tensor built around recorded values (torch's values-leaf pattern) passes their gradient on."""
    crow, col = np.array([0, 2, 3]), np.array([0, 2, 1])

    def f(v):
        A = st.sparse_csr_tensor(crow, col, v, size=(2, 3))
        return st.sum(A * A)

    check(f, np.array([1.0, -2.0, 3.0]))


def test_astype_clone_and_from_dense():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 4)) * (rng.random((3, 4)) < 0.6)

    def f(a):
        t = st.from_dense(a, "csr").clone()
        return st.sum(t.astype(np.float64, copy=True) * t)

    check(f, a)


def test_unrecorded_numpy_raises():
    rng = np.random.default_rng(7)
    A = _make(rng, "csr")
    x = rng.standard_normal(6)
    with pytest.raises(NotImplementedError, match="np.sinc|sinc"):
        vjp(lambda A: np.sum(np.sinc(A @ x)), A)
    with pytest.raises(NotImplementedError, match="not recorded"):
        vjp(lambda A: float(st.sum(A)) * 2.0, A)  # float() leaves the tape: the output is not on it
    with pytest.raises(NotImplementedError, match="no derivative rule"):
        vjp(lambda A: st.amax(A * 2.0), A)
    with pytest.raises(NotImplementedError, match="out= or where="):
        vjp(lambda A: np.add(A @ x, 1.0, out=np.empty(4)), A)
    with pytest.raises(NotImplementedError, match="does not record"):
        vjp(lambda A: st.sum(st.from_dense((A @ x).view().reshape(2, 2))), A)


def test_tape_does_not_leak():
    """After vjp (also one that raised), ops run untraced; other threads never record into a tape."""
    from sparsetensor._core import _recording

    rng = np.random.default_rng(8)
    A = _make(rng, "csr")
    with pytest.raises(NotImplementedError):
        vjp(lambda A: st.amax(A * 2.0), A)
    assert _recording.active == 0 and _recording.current() is None
    assert type(A @ np.ones(6)) is np.ndarray

    seen = []

    def other():
        seen.append(type(A @ np.ones(6)))

    def f(A):
        th = threading.Thread(target=other)
        th.start()
        th.join()
        return st.sum(A)

    vjp(f, A)
    assert seen == [np.ndarray]


def test_single_op_path_unchanged():
    """A table op given as the function keeps the one-rule path (no tape)."""
    rng = np.random.default_rng(9)
    A = _make(rng, "bsr", (4, 4))
    out, pullback = vjp(st.matmul, A, np.ones(4))
    assert type(out) is np.ndarray
    assert pullback(np.ones(4))[0].layout == A.layout


@pytest.mark.parametrize("layout", LAYOUTS)
def test_indexing_is_recorded(layout):
    """``t[key]`` (slices with steps, integers, an array, None) is recorded as the narrow, select,
    index_select, conversions and unsqueeze it runs; a step past the last sparse dim raises."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 6, 4)) * (rng.random((1, 6, 4)) < 0.6)
    t = st.from_dense(a, "coo") if layout == "coo" else st.from_dense(
        a, layout, batch_dim=1, blocksize=(2, 2) if layout in ("bsr", "bsc") else None)
    for key in [(slice(1, None),), (0,), (slice(None), slice(None, None, 2)), (slice(None), [1, 3, 1]),
                (None, 1, slice(1, 5)), (slice(None), None, slice(None), 2), (1, 2)]:
        check(lambda x: x[key] * 2.0, t)
    if layout == "coo":
        h = st.from_dense(a, "coo", dense_dim=1)
        with pytest.raises(NotImplementedError, match="past the last sparse dim"):
            vjp(lambda x: x[0, 1, 2], h)
        check(lambda x: x[0, 1], h)


def test_blocked_conversion_with_a_positional_blocksize():
    A = st.from_dense(np.array([[1.0, 0, 2, 0], [0, 3, 0, 4]]), "csr")
    check(lambda x: st.sum(x.to_sparse_bsr((2, 2)) * 3.0), A)
    check(lambda x: x.to_sparse_bsc((1, 2)), A)


def test_transposes_and_reshapes_of_dense_intermediates():
    """``.T``, transpose, swapaxes, mT, reshape and ravel (methods and NumPy functions) of a recorded
    dense array are recorded: their cotangent is the inverse view."""
    A = st.from_dense(np.array([[1.0, 0, 2], [0, 3, 0]]), "csr")
    w = np.arange(6.0)

    def f(x):
        d = x.to_dense()
        return (np.sum(d.T @ np.ones(2)) + np.sum(np.transpose(d).reshape(-1) * w)
                + np.sum(d.swapaxes(0, 1).ravel() ** 2) + np.sum(np.reshape(d, (3, 2)).mT[1]) + np.sum(d.flatten())
                + np.sum(d.copy() * 2) + np.sum(np.swapaxes(d, axis1=0, axis2=1) * w.reshape(3, 2))
                + np.sum(np.copy(d) * 3))

    check(f, A)


def test_numpy_functions_of_sparse_values():
    """np.sum / np.mean of a sparse tensor are recorded as sum / mean; another NumPy function names
    itself in the error."""
    A = st.from_dense(np.array([[1.0, 0, 2], [0, 3, 0]]), "csr")
    check(lambda x: np.sum(st.sum(x.to_sparse_coo(), 0)) + np.sum(x * x, axis=1) + np.mean(x), A)
    with pytest.raises(NotImplementedError, match="np.trace has no derivative rule"):
        vjp(lambda x: np.trace(x), A)


def test_one_tensor_given_for_two_arguments_gets_a_cotangent_each():
    # as JAX's vjp(f, x, x): each position its own cotangent (both were the sum)
    U = st.sparse_coo_tensor(np.array([[0, 0], [1, 1]]), np.array([[1.0, 2.0], [3.0, 4.0]]), size=(1, 2, 2))
    _, pb = st.autograd.vjp(lambda a, b: np.sum(a.to_dense()) + 2 * np.sum(b.to_dense()), U, U)
    ga, gb = pb(1.0)
    np.testing.assert_array_equal(ga.values(), np.ones((2, 2)))
    np.testing.assert_array_equal(gb.values(), 2 * np.ones((2, 2)))
    x = np.arange(3.0)
    A = st.from_dense(np.eye(3), "csr")
    _, pb = st.autograd.vjp(lambda a, u, v: np.sum(a @ u) + 3 * np.sum(a @ v), A, x, x)
    _, gu, gv = pb(1.0)
    np.testing.assert_array_equal(gu, np.ones(3))
    np.testing.assert_array_equal(gv, 3 * np.ones(3))


def test_inner_products_and_python_numbers_of_traced_values():
    """``r @ r`` of two 1-d intermediates and ``x.dot(x)`` are recorded (the first failed in the
    pullback with NumPy's AxisError; ndarray.dot went unrecorded, its term silently missing);
    float(), int(), .item() and .tolist() of a value that depends on the arguments raise."""
    M = np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 1.0]])
    A = st.from_dense(M, "csr")
    x0 = np.array([1.0, -1.0, 2.0])
    out, pull = vjp(lambda a, x: (a @ x) @ (a @ x), A, x0)
    r = M @ x0
    assert np.isclose(out, r @ r)
    dA, dx = pull(1.0)
    np.testing.assert_allclose(dx, 2 * M.T @ r)
    np.testing.assert_allclose(dA.to_dense(), np.where(M != 0, 2 * np.outer(r, x0), 0))
    out, pull = vjp(lambda a, x: x.dot(x) + np.sum(a @ x), A, x0)
    np.testing.assert_allclose(pull(1.0)[1], 2 * x0 + M.sum(0))
    for leave in (float, int, lambda v: v.item(), lambda v: v.tolist()):
        with pytest.raises(NotImplementedError, match="would drop its gradient"):
            vjp(lambda a, x: np.sum(a @ x) * leave(np.sum(x)), A, x0)
    out, _ = vjp(lambda a, x: np.sum(a @ x) * float(np.sum(x0)), A, x0)  # a constant's number: fine
    assert np.isclose(out, (M @ x0).sum() * x0.sum())
