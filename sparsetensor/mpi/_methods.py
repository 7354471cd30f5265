"""The one table of :class:`DistCSR`'s and :class:`DistBSR`'s methods that live above their class modules.

The class modules (:mod:`._matrix`, :mod:`._bsr`) keep storage, construction, products and the
moves of vectors; the operations that route entries (:mod:`._ops`, :mod:`._bsr_ops`,
:mod:`._spgemm`: zero_rows, ``+``, ``-``, ``*``, transpose, ``A @ B``) or talk to PETSc (:mod:`._petsc`) sit above
them, since they need the assembly's routing or petsc4py. They become methods here, in one
place, when :mod:`sparsetensor.mpi` is imported.
"""

from __future__ import annotations

from . import _bsr_ops, _ops, _petsc, _spgemm
from ._bsr import DistBSR
from ._matrix import DistCSR

_T_DOC = "``A^T``: see :meth:`transpose` (collective)."

#: (class, attribute, value), bound in this order (DistBSR's rows override what it inherits)
METHODS = (
    (DistCSR, "zero_rows", _ops.zero_rows),
    (DistCSR, "transpose", _ops.transpose),
    (DistCSR, "T", property(_ops.transpose, doc=_T_DOC)),
    (DistCSR, "conj", _ops.conj),
    (DistCSR, "copy", _ops.copy),
    (DistCSR, "__add__", _ops._add),
    (DistCSR, "__sub__", _ops._sub),
    (DistCSR, "__mul__", _ops._scale),
    (DistCSR, "__rmul__", _ops._scale),
    (DistCSR, "__neg__", _ops._neg),
    (DistCSR, "__matmul__", _spgemm.product),
    (DistCSR, "__array_ufunc__", None),  # NumPy scalars and arrays defer: np.float64(2) * A calls A.__rmul__
    (DistCSR, "to_petsc", _petsc.to_petsc),
    (DistCSR, "from_petsc", classmethod(_petsc.from_petsc)),
    (DistBSR, "zero_rows", _bsr_ops.zero_rows),
    (DistBSR, "transpose", _bsr_ops.transpose),
    (DistBSR, "T", property(_bsr_ops.transpose, doc=_T_DOC)),
    (DistBSR, "__add__", _bsr_ops._add),
    (DistBSR, "__sub__", _bsr_ops._sub),
    (DistBSR, "__matmul__", _bsr_ops._matmul),
    (DistBSR, "to_petsc", _bsr_ops.to_petsc),
    (DistBSR, "from_petsc", classmethod(_bsr_ops.from_petsc)),
)

for _cls, _name, _value in METHODS:
    setattr(_cls, _name, _value)
