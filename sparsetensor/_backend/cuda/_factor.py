"""ILU(0), IC(0) and sparse triangular solves on the device (the ``ilu0``, ``ic0`` and ``trsv``
kernels of :mod:`sparsetensor._backend.cuda`), with the semantics and messages of the CPU's
(:mod:`sparsetensor._backend.cpu._ilu`): one canonical square CSR matrix of a field dtype.

Method: level scheduling (kernels/factor.cu). Row ``i`` of a lower solve, of ILU(0) or of IC(0)
needs the rows of its strictly lower entries done first (an upper solve: its strictly upper
ones). An analysis orders the rows by level with Kahn's algorithm in one block, reading each
row's dependants from the transpose (a device radix sort); the rows of a level then run in
parallel, one thread a row (a row and a right-hand side column for a solve), level after
level. A level of many rows gets a launch of many blocks; a run of small levels shares one
launch of one block with a barrier between levels, since a launch costs more than a
barrier. The analysis is kept for the index arrays it was made from while they live (a
preconditioner solves with the same triangles at every iteration), unless another library
may write them (a shared ``DeviceArray``): those are analysed again at every call.

Chosen over a synchronization-free solve (threads spinning on flags of the rows they need)
because that needs every block it waits on to be resident, which CUDA does not promise, and
cannot run on the kernel emulator of the tests, whose threads switch only at barriers. The
price is a launch or barrier per level: a matrix whose rows form one long chain (bidiagonal)
has as many levels as rows.

Errors: the first failing row in the CPU's sequential order (the least ``step * 8 + status`` over
the rows, an atomic minimum) raises the CPU's exception; an index changed since the tensor was
checked gives ``ValueError``, never an access out of bounds (every index is checked before it
addresses memory).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..._core import _layout as L
from ..._core._tensor import CompressedTensor
from ...cuda import _primitives as P
from ...cuda._module import BLOCK, grid_for, launch
from .._plan import raise_factor_status
from ._coalesce import checked
from ._convert import transpose_compressed

__all__ = ["ilu0", "ic0", "trsv"]

# One block's threads for a run of small levels, and the largest level (rows x right-hand
# sides) such a run takes: a larger one gets a launch of its own over many blocks.
ONE_BLOCK = 512
SMALL_LEVEL = 2 * ONE_BLOCK
_NO_STATUS = np.iinfo(np.uint64).max


class _Plan:
    """One matrix's rows ordered by level for a lower or upper sweep."""

    def __init__(self, t, lower: bool, status):
        dev = t.values()._device
        crow, cols = t.crow_indices(), t.col_indices()
        n, nnz = t.shape[0], t.nnz
        ik = (P.index_key(crow.dtype),)
        self.dev, self.n, self.lower, self.ik, self.crow = dev, n, lower, ik, crow
        indeg = P.empty(dev, (n,), np.int64)
        self.diag = P.empty(dev, (n,), np.int64)
        P.run(dev, "factor.cu", "tri_counts", ik, n, crow, cols, n, nnz, int(lower), 0, indeg, self.diag, status)
        dep_ptr, deps = _dependants(t)
        self.order = P.empty(dev, (n,), np.int64)
        self.level_ptr = P.empty(dev, (n + 1,), np.int64)
        self.row_level = P.empty(dev, (n,), np.int64)
        info = P.empty(dev, (2,), np.int64)
        launch(dev, "factor.cu", "level_order", ik, 1, ONE_BLOCK, dep_ptr, deps, n, nnz, int(lower),
               indeg.view(np.uint64), self.order, self.level_ptr, self.row_level, info)
        levels, ordered = (int(v) for v in P.read_ints(dev, info))
        if ordered != n:  # a cycle: only indices changed since the check make one
            raise ValueError(f"the indices of the {n} x {n} matrix changed after validation: {n - ordered} rows are "
                             "not ordered by the triangle's dependencies")
        self.ptr = P.read_ints(dev, self.level_ptr[:levels + 1])

    def launches(self, k: int):
        """``(first level, end level, grid, block)`` per launch covering every level with ``k`` columns."""
        sizes = np.diff(self.ptr) * k
        big = sizes > SMALL_LEVEL
        if not big.size:
            return []
        # a launch starts at every big level and after one: small levels between run together
        starts = np.flatnonzero(big | np.concatenate(([True], big[:-1])))
        ends = np.append(starts[1:], big.size)
        out = []
        for s, e in zip(starts.tolist(), ends.tolist()):
            if big[s]:
                out.append((s, s + 1, grid_for(self.dev, int(sizes[s]), BLOCK), BLOCK))
            else:
                out.append((s, e, 1, ONE_BLOCK))
        return out

    def sweep(self, kernel: str, keys: tuple, k: int, before: tuple, after: tuple) -> None:
        for lb, le, grid, block in self.launches(k):
            launch(self.dev, "factor.cu", kernel, keys, grid, block, *before, self.order, self.level_ptr,
                   self.row_level, lb, le, *after)


def _dependants(t):
    """Each row's dependants, the rows of its column: the pattern of ``t``'s transpose as
    ``(compressed, plain)`` indices. The transpose is of a tensor whose entries have no items
    (a dense dim of size 0), so no values move."""
    dev, n = t.values()._device, t.shape[0]
    pattern = CompressedTensor(t.crow_indices(), t.col_indices(), P.empty(dev, (t.nnz, 0), np.int8), (n, n, 0),
                               L.sparse_csr, True)
    tt = transpose_compressed(pattern)
    return tt.compressed_indices(), tt.plain_indices()


# col index DeviceArray -> {lower: _Plan}: the plans of the matrices solved with, while their arrays live
_PLANS = weakref.WeakKeyDictionary()


def _plan(t, lower: bool, status) -> _Plan:
    """The level plan of canonical csr ``t``: kept with its column indices, unless they or the row
    pointers are shared with another library (which may have written them since)."""
    crow, cols = t.crow_indices(), t.col_indices()
    if crow._shared or cols._shared:
        return _Plan(t, lower, status)
    plans = _PLANS.setdefault(cols, {})
    plan = plans.get(lower)
    if plan is None or plan.crow is not crow:
        plan = plans[lower] = _Plan(t, lower, status)
    return plan


def _status_word(dev):
    return P.from_host(dev, np.array([_NO_STATUS], dtype=np.uint64))


def _raise(dev, status, what: str, kind: str, n: int, upper: bool = False) -> None:
    key = int(P.read_ints(dev, status)[0])
    if key == _NO_STATUS:
        return
    step, code = divmod(key, 8)
    raise_factor_status(code, n - 1 - step if upper else step, what, kind)


def _triangle(t, lower: bool, unit: bool, status) -> CompressedTensor:
    """The lower (upper) triangle of canonical csr ``t``, the diagonal included (as ones when ``unit``)."""
    dev = t.values()._device
    crow, cols, vals = t.crow_indices(), t.col_indices(), t.values()
    n, nnz = t.shape[0], t.nnz
    ik = (P.index_key(crow.dtype),)
    counts = P.empty(dev, (n,), np.int64)
    diag = P.empty(dev, (n,), np.int64)
    P.run(dev, "factor.cu", "tri_counts", ik, n, crow, cols, n, nnz, int(lower), 1, counts, diag, status)
    offs = P.exclusive_scan(dev, counts)
    total = int(P.read_ints(dev, offs[n:n + 1])[0])
    out_cols = P.empty(dev, (total,), crow.dtype)
    out_vals = P.empty(dev, (total,), vals.dtype)
    P.run(dev, "factor.cu", "tri_fill", (vals.dtype.name,) + ik, n, crow, cols, vals, n, nnz, int(lower), int(unit),
          offs, out_cols, out_vals)
    comp = P.batch_offsets(dev, offs, 1, n, 1, crow.dtype).reshape((n + 1,))
    return CompressedTensor(comp, out_cols, out_vals, t.shape, L.sparse_csr, True)


def ilu0(t):
    """``(L, U)``: ILU(0) of canonical square device csr ``t`` (see :func:`sparsetensor.ops.factor.ilu0`)."""
    t = checked(t)
    dev, n = t.values()._device, t.shape[0]
    status = _status_word(dev)
    plan = _plan(t, True, status)
    a = t.values().copy()
    plan.sweep("factor_levels", (a.dtype.name,) + plan.ik, 1, (t.crow_indices(), t.col_indices(), a, n, t.nnz,
                                                                 plan.diag, 0), (status,))
    _raise(dev, status, "ilu0", "U", n)
    lu = CompressedTensor(t.crow_indices(), t.col_indices(), a, t.shape, L.sparse_csr, True)
    return _triangle(lu, True, True, status), _triangle(lu, False, False, status)


def ic0(t):
    """``L``: IC(0) of canonical square device csr ``t``'s lower triangle (see :func:`sparsetensor.ops.factor.ic0`)."""
    t = checked(t)
    dev, n = t.values()._device, t.shape[0]
    status = _status_word(dev)
    low = _triangle(t, True, False, status)
    plan = _Plan(low, True, status)
    a = low.values()
    plan.sweep("factor_levels", (a.dtype.name,) + plan.ik, 1, (low.crow_indices(), low.col_indices(), a, n,
                                                                 low.nnz, plan.diag, 1), (status,))
    _raise(dev, status, "ic0", "L", n)
    return low


def trsv(t, x, lower: bool, unit_diagonal: bool):
    """``x`` ((n, k) device array of ``t``'s dtype) overwritten with ``T^-1 x``, ``T`` the lower (upper)
    triangle of canonical square device csr ``t`` (see :func:`sparsetensor.ops.factor.spsolve_triangular`)."""
    t = checked(t)
    dev, n = t.values()._device, t.shape[0]
    k = x.shape[1]
    status = _status_word(dev)
    if n and k:
        plan = _plan(t, lower, status)
        plan.sweep("trsv_levels", (x.dtype.name,) + plan.ik, k, (t.crow_indices(), t.col_indices(), t.values(), x, n,
                                                                 t.nnz, k), (int(lower), int(unit_diagonal), status))
    _raise(dev, status, "spsolve_triangular", "A", n, upper=not lower)
    return x
