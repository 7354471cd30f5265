"""Derivative rules of the NumPy ufuncs a loss is written with, for vjp's tape.

Inside a function given to :func:`sparsetensor.autograd.vjp`, dense intermediates (``A @ x``,
``st.sum(t)``) are arrays of the tape; the usual arithmetic on them (``y - b``, ``r * r``,
``np.sum(r ** 2)``, ``x @ y``) is recorded through these rules. A rule takes the ufunc's
inputs (plain arrays or scalars) and its output and returns ``back(G)``: one cotangent per
input (PyTorch's complex convention, ``dx = G * conj(f'(x))``), summed over the dims that
broadcasting stretched. A ufunc without a rule raises (see :mod:`._tape`).
"""

from __future__ import annotations

import numpy as np

from ._core import conj, unbroadcast


def _shape(x) -> tuple:
    return np.shape(x)


def _elementwise(*derivs):
    """A rule from the partial derivatives ``d(inputs, out) -> f'`` of each input."""
    def rule(inputs, out):
        def back(G):
            return tuple(unbroadcast(G * conj(d(inputs, out)), _shape(x)) for d, x in zip(derivs, inputs))

        return back

    return rule


def _power_exponent(inputs, out):
    a, p = inputs
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.asarray(a) == 0, 0, np.log(np.asarray(a, dtype=np.result_type(a, 1.0))) * out)


def _abs(inputs, out):
    a = np.asarray(inputs[0])
    if a.dtype.kind == "c":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(a == 0, 0, np.conj(a) / np.where(a == 0, 1, np.abs(a)))  # conj: undone by back
    return np.sign(a)


CALL = {
    "add": _elementwise(lambda i, o: 1, lambda i, o: 1),
    "subtract": _elementwise(lambda i, o: 1, lambda i, o: -1),
    "multiply": _elementwise(lambda i, o: i[1], lambda i, o: i[0]),
    "true_divide": _elementwise(lambda i, o: 1 / np.asarray(i[1]), lambda i, o: -o / np.asarray(i[1])),
    "negative": _elementwise(lambda i, o: -1),
    "positive": _elementwise(lambda i, o: 1),
    "square": _elementwise(lambda i, o: 2 * np.asarray(i[0])),
    "power": _elementwise(lambda i, o: np.asarray(i[1]) * np.asarray(i[0], dtype=np.result_type(*i, 1.0)) ** (
        np.asarray(i[1]) - 1), _power_exponent),
    "sqrt": _elementwise(lambda i, o: 0.5 / o),
    "exp": _elementwise(lambda i, o: o),
    "log": _elementwise(lambda i, o: 1 / np.asarray(i[0])),
    "sin": _elementwise(lambda i, o: np.cos(i[0])),
    "cos": _elementwise(lambda i, o: -np.sin(i[0])),
    "tanh": _elementwise(lambda i, o: 1 - o * o),
    "absolute": _elementwise(_abs),
}


def conjugate(inputs, out):
    return lambda G: (unbroadcast(np.conj(G), _shape(inputs[0])),)


CALL["conjugate"] = conjugate


def matmul(inputs, out):
    """``a @ b`` of arrays (1-d operands promoted as NumPy does; leading dims broadcast)."""
    a, b = (np.asarray(x) for x in inputs)

    def back(G):
        if a.ndim == b.ndim == 1:  # an inner product: G is 0-d
            G = np.asarray(G)
            return G * np.conj(b), np.conj(a) * G
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        G2 = np.asarray(G)
        if a.ndim == 1:
            G2 = np.expand_dims(G2, -2)
        if b.ndim == 1:
            G2 = np.expand_dims(G2, -1)
        da = G2 @ np.swapaxes(np.conj(b2), -1, -2)
        db = np.swapaxes(np.conj(a2), -1, -2) @ G2
        if a.ndim == 1:
            da = da[..., 0, :]
        if b.ndim == 1:
            db = db[..., :, 0]
        return unbroadcast(da, a.shape), unbroadcast(db, b.shape)

    return back


CALL["matmul"] = matmul
CALL["divide"] = CALL["true_divide"]  # NumPy 2's name of true_divide


def add_reduce(a, axis, keepdims):
    """``np.add.reduce(a, axis, keepdims=...)`` (``ndarray.sum``, ``np.sum``): G broadcast back."""
    a = np.asarray(a)
    axes = tuple(range(a.ndim)) if axis is None else tuple(
        d % a.ndim for d in (axis if isinstance(axis, tuple) else (axis,)))

    def back(G):
        G = np.asarray(G)
        if not keepdims:
            G = np.expand_dims(G, axes)
        return (np.broadcast_to(G, a.shape),)

    return back
