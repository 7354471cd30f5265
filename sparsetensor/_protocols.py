"""The protocol methods of :class:`~sparsetensor.SparseTensor` that live outside ``_tensor.py``:
SciPy's linear operator (:mod:`sparsetensor.interop.linop`), NumPy's ``__array_function__``
(:mod:`sparsetensor.interop.array_function`), indexing (:mod:`sparsetensor.ops.indexing`) and
``diagonal``/``trace`` (:mod:`sparsetensor.ops.diagonal`).

``ROWS`` are rows of the op table (:class:`sparsetensor._api.Op`); :func:`bind` adds them to
the table once, when :mod:`sparsetensor` is imported. No per-call imports.
"""

from __future__ import annotations

from . import _api
from ._api import Op
from ._core._tensor import SparseTensor
from .interop import array_function, linop
from .ops import diagonal, indexing

__all__ = ["ROWS", "bind"]

ROWS = (
    # SciPy's LinearOperator protocol (aslinearoperator and the iterative solvers)
    Op("matvec", linop.matvec, function=False),
    Op("rmatvec", linop.rmatvec, function=False),
    Op("matmat", linop.matmat, function=False),
    Op("rmatmat", linop.rmatmat, function=False),
    Op("adjoint", linop.adjoint, function=False),
    Op("H", linop.adjoint, function=False, kind="property"),
    # SciPy's sparse constructors and direct solvers get a TypeError naming to_scipy() instead of densifying
    Op("__array__", linop.array_refusing_scipy(SparseTensor.__array__), function=False, gpu=True),
    # NumPy's function protocol (NEP 18)
    Op("__array_function__", array_function.array_function, function=False),
    # indexing
    Op("__getitem__", indexing.getitem, function=False),
    Op("__setitem__", indexing.setitem, function=False),
    # ops that NumPy and SciPy users call as methods (st.diagonal / st.trace too)
    Op("diagonal", diagonal.diagonal),
    Op("trace", diagonal.trace),
)


def bind() -> list:
    """Add :data:`ROWS` to the op table (:func:`sparsetensor._api.bind`), once, at import of
    :mod:`sparsetensor`; returns the ``st.*`` function names they add."""
    return _api.bind(ROWS, globals())
