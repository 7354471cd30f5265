"""CPU kernels of the incomplete factorizations and triangular solves (:mod:`sparsetensor.ops.factor`)
over :mod:`sparsetensor._lib._ilu`.

These take the members of one canonical (validated) square CSR matrix: ``crow`` (n + 1,), ``cols``
(nnz,) of one index dtype, values of a field dtype. Shapes, dtypes and contiguity are checked here,
so the kernels can trust them (STYLE rule 3); the kernels guard every index they read. A kernel's
status becomes :class:`numpy.linalg.LinAlgError` (a ``ValueError``) naming the row.
"""

from __future__ import annotations

import numpy as np

from ..._core._from_arrays import sparse_csr_tensor
from ..._lib import _ilu as _kernels
from .._plan import raise_factor_status

__all__ = ["FIELD_DTYPES", "diagonal_positions", "ic0", "ic0_values", "ilu0", "ilu0_values", "inverse_diagonal",
           "lower_members", "solve_triangular", "trsv"]

FIELD_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64), np.dtype(np.complex128))

_NO_POSITIONS = np.empty(0, dtype=np.int64)


def _check(what: str, crow, cols, vals) -> None:
    if crow.dtype != cols.dtype or crow.dtype not in (np.int32, np.int64):
        raise TypeError(f"{what}: crow and cols must share an index dtype (int32 or int64), got {crow.dtype} "
                        f"and {cols.dtype}")
    if vals.dtype not in FIELD_DTYPES:
        raise TypeError(f"{what}: values must be float32, float64, complex64 or complex128, got {vals.dtype}")
    if crow.ndim != 1 or cols.ndim != 1 or vals.shape != cols.shape or crow.shape[0] < 1:
        raise ValueError(f"{what}: expected crow (n + 1,) and cols, values (nnz,), got {crow.shape}, "
                         f"{cols.shape}, {vals.shape}")
    if not (crow.flags.c_contiguous and cols.flags.c_contiguous and vals.flags.c_contiguous):
        raise ValueError(f"{what}: the members must be C-contiguous")


def _status(info, what: str, kind: str) -> None:
    raise_factor_status(int(info[0]), int(info[1]), what, kind)


def _factor_values(kind: str, factor: str, crow: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Run the ``kind`` kernel (``"ilu0"`` or ``"ic0"``) on a copy of the values; errors name ``factor``'s pivot."""
    _check(kind, crow, cols, vals)
    out = vals.copy()
    info = np.zeros(2, dtype=np.int64)
    getattr(_kernels, kind)(crow, cols, out, info)
    _status(info, kind, factor)
    return out


def ilu0_values(crow: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """The ILU(0) factors' values on the pattern: L strictly below the diagonal (unit diagonal implied), U on and above."""
    return _factor_values("ilu0", "U", crow, cols, vals)


def ic0_values(crow: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """The IC(0) factor L (``A ~ L L^H``) on the pattern of a lower triangle whose rows end at the diagonal."""
    return _factor_values("ic0", "L", crow, cols, vals)


def diagonal_positions(crow: np.ndarray, cols: np.ndarray):
    """Each row's diagonal position in ``cols`` (int64) of a CSR matrix whose every row holds its
    diagonal entry once; else None."""
    n = crow.shape[0] - 1
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(crow))
    pos = np.flatnonzero(cols == rows)
    return pos if pos.shape[0] == n else None


def inverse_diagonal(crow: np.ndarray, cols: np.ndarray, vals: np.ndarray):
    """``1 / diag`` of a CSR matrix whose every row holds its diagonal entry, nonzero; else None."""
    pos = diagonal_positions(crow, cols)
    if pos is None:
        return None
    d = vals[pos]
    if not np.all(d != 0):
        return None
    return 1 / d


def solve_triangular(crow: np.ndarray, cols: np.ndarray, vals: np.ndarray, b: np.ndarray, lower: bool,
                     unit_diagonal: bool, what: str = "spsolve_triangular", inv_diag=None,
                     diag_pos=None) -> np.ndarray:
    """Solve with the lower (upper) triangle of the matrix, in place over ``b`` ((n, k) C-contiguous, values' dtype);
    ``inv_diag``: the diagonal's reciprocals (:func:`inverse_diagonal`), multiplied by instead of dividing;
    ``diag_pos``: each row's diagonal position (:func:`diagonal_positions`), so rows are not scanned for it."""
    _check(what, crow, cols, vals)
    if b.dtype != vals.dtype or b.ndim != 2 or b.shape[0] != crow.shape[0] - 1 or not b.flags.c_contiguous \
            or not b.flags.writeable:
        raise ValueError(f"{what}: expected a writeable C-contiguous right-hand side of shape ({crow.shape[0] - 1}, k) "
                         f"and dtype {vals.dtype}, got {b.shape} {b.dtype}")
    inv = vals[:0] if inv_diag is None else np.ascontiguousarray(inv_diag, dtype=vals.dtype)
    pos = _NO_POSITIONS if diag_pos is None else np.ascontiguousarray(diag_pos, dtype=np.int64)
    info = np.zeros(2, dtype=np.int64)
    _kernels.solve_triangular(crow, cols, vals, b, bool(lower), bool(unit_diagonal), info, inv, pos)
    _status(info, what, "A")
    return b


# -- the backend's kernels of sparsetensor.ops.factor: whole tensors in, tensors out ---------
def _members(t):
    return np.ascontiguousarray(t.crow_indices()), np.ascontiguousarray(t.col_indices()), \
        np.ascontiguousarray(t.values())


def _csr(crow, cols, vals, n):
    """A CSR tensor on a subset of a canonical pattern (so canonical too)."""
    out = sparse_csr_tensor(crow, cols, vals, size=(n, n), check_invariants=False)
    out._canonical = True  # rows of a validated tensor, filtered: still sorted and unique
    return out


def _split(crow, cols, vals, n, keep):
    """The entries where ``keep`` (a mask over the entries) holds, as CSR members."""
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(crow))
    c = np.zeros(n + 1, dtype=crow.dtype)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=c[1:])
    return c, cols[keep], vals[keep]


def lower_members(t):
    """The lower triangle's members (diagonal included) of a canonical CSR tensor."""
    n = t.shape[0]
    crow, cols, vals = _members(t)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(crow))
    return _split(crow, cols, vals, n, cols.astype(np.int64) <= rows)


def ilu0(t, threads=None):
    """``(L, U)`` of ILU(0) (:func:`sparsetensor.ops.factor.ilu0`) of a canonical square CSR tensor of a field dtype."""
    n = t.shape[0]
    crow, cols, vals = _members(t)
    lu = ilu0_values(crow, cols, vals)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(crow))
    c64 = cols.astype(np.int64)
    lvals = np.where(c64 == rows, np.ones(1, dtype=lu.dtype), lu)
    return _csr(*_split(crow, cols, lvals, n, c64 <= rows), n), _csr(*_split(crow, cols, lu, n, c64 >= rows), n)


def ic0(t, threads=None):
    """``L`` of IC(0) (:func:`sparsetensor.ops.factor.ic0`) of a canonical square CSR tensor of a field dtype."""
    crow, cols, vals = lower_members(t)
    return _csr(crow, cols, ic0_values(crow, cols, vals), t.shape[0])


def trsv(t, x, lower: bool, unit_diagonal: bool, threads=None):
    """``x`` ((n, k), C-contiguous, the values' dtype) overwritten with ``T^-1 x``, ``T`` the lower (upper)
    triangle of canonical square CSR ``t`` (:func:`sparsetensor.ops.factor.spsolve_triangular`)."""
    crow, cols, vals = _members(t)
    return solve_triangular(crow, cols, vals, x, lower, unit_diagonal)
