"""The protocol methods of :class:`~sparsetensor.SparseTensor` that live outside ``_tensor.py``:
SciPy's linear operator (:mod:`sparsetensor.interop.linop`), NumPy's ``__array_function__``
(:mod:`sparsetensor.interop.array_function`), indexing (:mod:`sparsetensor.ops.indexing`) and
``diagonal``/``trace`` (:mod:`sparsetensor.ops.diagonal`).

``METHODS`` is the one table (attribute name -> function or property); :func:`bind` sets them on
the class once, when :mod:`sparsetensor` is imported. No per-call imports.
"""

from __future__ import annotations

from ._tensor import SparseTensor
from .interop import array_function, linop
from .ops import diagonal, indexing

__all__ = ["METHODS", "bind"]

METHODS = [
    # SciPy's LinearOperator protocol (aslinearoperator and the iterative solvers)
    ("matvec", linop.matvec),
    ("rmatvec", linop.rmatvec),
    ("matmat", linop.matmat),
    ("rmatmat", linop.rmatmat),
    ("adjoint", linop.adjoint),
    ("H", property(linop.adjoint, doc="The conjugate transpose (see adjoint).")),
    # SciPy's sparse constructors and direct solvers get a TypeError naming to_scipy() instead of densifying
    ("__array__", linop.array_refusing_scipy(SparseTensor.__array__)),
    # NumPy's function protocol (NEP 18)
    ("__array_function__", array_function.array_function),
    # indexing
    ("__getitem__", indexing.getitem),
    ("__setitem__", indexing.setitem),
    # ops that NumPy and SciPy users call as methods
    ("diagonal", diagonal.diagonal),
    ("trace", diagonal.trace),
]


def bind(cls=SparseTensor) -> None:
    """Set every entry of :data:`METHODS` on ``cls`` (once, at import)."""
    for name, fn in METHODS:
        setattr(cls, name, fn)
