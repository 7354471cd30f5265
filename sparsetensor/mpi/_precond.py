"""Preconditioners for the distributed Krylov solvers: :func:`jacobi` and :func:`block_jacobi`.

Each is an object with ``matvec(r)`` (also ``M(r)``), ``shape`` and ``dtype``: the solvers of
:mod:`sparsetensor.mpi` take it as ``M``, and on one process so does SciPy (which wraps anything
with ``shape`` and ``matvec``). Applying one is local: no communication, so the solvers may
apply it ahead of a test (see :mod:`sparsetensor.mpi._krylov`).

Block Jacobi factors each rank's diagonal block (its rows x its own columns, PETSc's
``bjacobi``) and solves with it: ILU(0) and IC(0) on our kernels
(:mod:`sparsetensor.ops.factor`), or SciPy's ``splu`` as the exact local solve.
"""

from __future__ import annotations

import numpy as np

from .._backend.cpu import _ilu as _backend
from .._core._device import require_host
from ..ops.factor import _square_csr
from ._comm import agree

__all__ = ["LOCAL_SOLVES", "BlockJacobi", "Jacobi", "LocalFactor", "block_jacobi", "jacobi"]

LOCAL_SOLVES = ("ilu0", "ic0", "splu")


def _columns(r: np.ndarray, n: int, dtype) -> np.ndarray:
    """``r`` ((n,) or (n, k)) as a fresh C-contiguous (n, k) array of ``dtype``, to solve in place."""
    return np.array(r.reshape(n, 1 if r.ndim == 1 else r.shape[1]), dtype=dtype, order="C", copy=True)


class LocalFactor:
    """One matrix factored for a local solve: ``solve(r)`` approximates ``T^-1 r`` (no communication).

    ``kind``: ``"ilu0"`` (``L U`` on the pattern, then two triangular solves), ``"ic0"``
    (``L L^H`` on the lower triangle) or ``"splu"`` (SciPy's ``splu``: exact). The values are
    factored in ``np.promote_types(T.dtype, float32)``; a right-hand side of a wider dtype is
    solved in that dtype (the factors are converted once and kept).

    Block Jacobi factors each rank's diagonal block with this class; a test oracle can
    apply the very same arithmetic to the blocks of a gathered matrix.
    """

    def __init__(self, t, kind: str = "ilu0"):
        if kind not in LOCAL_SOLVES:
            raise ValueError(f"local must be one of {', '.join(map(repr, LOCAL_SOLVES))}, got {kind!r}")
        t, dtype = _square_csr(t, kind)
        require_host(t, f"the {kind} local factor")
        self.kind = kind
        self.n = int(t.shape[0])
        self.dtype = np.dtype(dtype)
        self._by_dtype = {}
        if kind == "splu":
            self._scipy = t.to_scipy() if self.n else None
            self._lu = self._splu(self.dtype)
            return
        crow, cols = np.ascontiguousarray(t.crow_indices()), np.ascontiguousarray(t.col_indices())
        if kind == "ilu0":
            vals = np.ascontiguousarray(t.values(), dtype=dtype)
            lu = _backend.ilu0_values(crow, cols, vals)
            # U's diagonal inverted; where the diagonal sits in each row, for both solves
            self._lu = (crow, cols, lu, _backend.inverse_diagonal(crow, cols, lu),
                        _backend.diagonal_positions(crow, cols))
            return
        crow, cols, vals = _backend.lower_members(t)
        lv = _backend.ic0_values(crow, cols, vals)
        # L^H as CSR: its rows are L's columns (sorted by column, then row), its values conjugated
        rows = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(crow))
        order = np.lexsort((rows, cols))
        hcrow = np.zeros(self.n + 1, dtype=crow.dtype)
        np.cumsum(np.bincount(cols, minlength=self.n), out=hcrow[1:])
        hcols, hvals = rows[order].astype(crow.dtype), np.conj(lv[order])
        self._lu = (crow, cols, lv, hcrow, hcols, hvals, _backend.inverse_diagonal(crow, cols, lv),
                    _backend.inverse_diagonal(hcrow, hcols, hvals), _backend.diagonal_positions(crow, cols),
                    _backend.diagonal_positions(hcrow, hcols))

    def _splu(self, dtype):
        if self._scipy is None:
            return None
        import scipy.sparse.linalg as sla

        try:
            return sla.splu(self._scipy.astype(dtype).tocsc())
        except RuntimeError as e:  # SciPy: "Factor is exactly singular"
            raise np.linalg.LinAlgError(f"splu: {e}") from None

    def _members(self, dtype):
        if dtype == self.dtype:
            return self._lu
        if dtype not in self._by_dtype:  # a wider right-hand side: the factors in its dtype, once
            self._by_dtype[dtype] = (self._splu(dtype) if self.kind == "splu" else
                                     tuple(a if a is None or a.dtype.kind in "iu" else a.astype(dtype)
                                           for a in self._lu))
        return self._by_dtype[dtype]

    def solve(self, r) -> np.ndarray:
        """``T^-1 r`` (approximately, for the incomplete kinds); ``r`` of shape ``(n,)`` or ``(n, k)``."""
        r = np.asarray(r)
        if r.ndim not in (1, 2) or r.shape[0] != self.n:
            raise ValueError(f"{self.kind} solve: expected {self.n} rows (1-d or 2-d), got shape {r.shape}")
        dtype = np.promote_types(self.dtype, r.dtype)
        if dtype not in _backend.FIELD_DTYPES:
            raise TypeError(f"{self.kind} solve: a right-hand side of dtype {r.dtype} is not supported")
        if self.n == 0:
            return r.astype(dtype)
        if self.kind == "splu":
            return self._members(dtype).solve(np.asarray(r, dtype=dtype))
        x = _columns(r, self.n, dtype)
        m = self._members(dtype)
        if self.kind == "ilu0":
            _backend.solve_triangular(m[0], m[1], m[2], x, True, True, "ilu0 solve", None, m[4])
            _backend.solve_triangular(m[0], m[1], m[2], x, False, False, "ilu0 solve", m[3], m[4])
        else:
            _backend.solve_triangular(m[0], m[1], m[2], x, True, False, "ic0 solve", m[6], m[8])
            _backend.solve_triangular(m[3], m[4], m[5], x, False, False, "ic0 solve", m[7], m[9])
        return x.reshape(r.shape)


class _Preconditioner:
    """What the solvers and SciPy read: ``shape`` (global), ``dtype``, ``matvec``; calling applies it;
    ``row_starts``: the row split of the matrix it was made from (each rank applies it to its rows)."""

    shape: tuple
    dtype: np.dtype

    def __call__(self, r):
        return self.matvec(r)

    def __matmul__(self, r):
        return self.matvec(r)


class Jacobi(_Preconditioner):
    """``r / diag(A)`` on this rank's rows; see :func:`jacobi`."""

    def __init__(self, A):
        comm = A.comm

        def inverse():
            d = np.asarray(A.diagonal())
            zero = np.flatnonzero(d == 0)
            if zero.size:
                r0 = A.row_range[0]
                raise np.linalg.LinAlgError(f"jacobi: A has a zero on its diagonal at global row {r0 + int(zero[0])} "
                                            f"({zero.size} on rank {comm.rank})")
            return 1 / d.astype(np.promote_types(d.dtype, np.float32))

        self._inv = agree(comm, inverse)
        self.shape = tuple(A.shape)
        self.row_starts = np.array(A.row_starts)  # the solvers check that A splits its rows alike
        self.dtype = self._inv.dtype
        self.comm = comm

    @property
    def inverse_diagonal(self) -> np.ndarray:
        """This rank's ``1 / diag(A)``."""
        return self._inv

    def matvec(self, r):
        """``diag(A)^-1 r`` for this rank's slice (``(n,)`` or ``(n, k)``): a product by the stored inverse."""
        r = np.asarray(r)
        return self._inv * r if r.ndim == 1 else self._inv[:, None] * r

    def rmatvec(self, r):
        """The adjoint: ``conj(diag(A))^-1 r``."""
        r = np.asarray(r)
        inv = np.conj(self._inv)
        return inv * r if r.ndim == 1 else inv[:, None] * r

    def __repr__(self):
        return f"Jacobi(shape={self.shape}, dtype={self.dtype})"


class BlockJacobi(_Preconditioner):
    """Each rank's diagonal block solved locally; see :func:`block_jacobi`."""

    def __init__(self, A, local: str = "ilu0"):
        comm = A.comm
        if A.shape[0] != A.shape[1] or not np.array_equal(A.row_starts, A.col_starts):
            raise ValueError(f"block_jacobi: A must be square with its columns split like its rows, got shape "
                             f"{A.shape}")
        r0, r1 = A.row_range

        def factor():  # on every rank, through agree: a bad argument on one rank raises on all
            if local not in LOCAL_SOLVES:
                raise ValueError(f"block_jacobi: local must be one of {', '.join(map(repr, LOCAL_SOLVES))}, "
                                 f"got {local!r}")
            try:
                return LocalFactor(A.diag_block, local)
            except (ValueError, TypeError) as e:
                raise type(e)(f"block_jacobi(local={local!r}): rank {comm.rank}'s block (global rows {r0} to "
                              f"{r1 - 1}; the row below is counted from {r0}): {e}") from None

        self.factor = agree(comm, factor)
        self.local = local
        self.shape = tuple(A.shape)
        self.row_starts = np.array(A.row_starts)
        self.dtype = self.factor.dtype
        self.comm = comm

    def matvec(self, r):
        """This rank's block solve of its slice ``r`` (``(n,)`` or ``(n, k)``); no communication."""
        return self.factor.solve(r)

    def __repr__(self):
        return f"BlockJacobi(shape={self.shape}, dtype={self.dtype}, local={self.local!r})"


def jacobi(A) -> Jacobi:
    """The Jacobi (diagonal) preconditioner of a distributed matrix (collective).

    ``M(r) = r / diag(A)`` on each rank's slice, computed as a product by the stored
    inverse diagonal (``1 / d`` once). A zero on the diagonal raises
    :class:`numpy.linalg.LinAlgError` on every rank, naming the global row.

    Parameters
    ----------
    A : DistCSR
        Square (or any distributed matrix with ``diagonal()``, ``row_range``, ``shape`` and ``comm``).

    Returns
    -------
    Jacobi
        ``M.matvec(r)``, ``M(r)``, ``M.shape``, ``M.dtype``: pass it as ``M=`` to the solvers.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> t = st.from_dense(np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 2.0]]))
    >>> A = stmpi.DistCSR.from_global(t if MPI.COMM_WORLD.rank == 0 else None)
    >>> M = stmpi.jacobi(A)
    >>> r0, r1 = A.row_range
    >>> bool(np.array_equal(M(np.ones(r1 - r0)), np.array([0.25, 1 / 3, 0.5])[r0:r1]))
    True
    >>> x, info = stmpi.cg(A, np.array([1.0, 2.0, 4.0])[r0:r1], M=M)
    >>> info
    0
    """
    return Jacobi(A)


def block_jacobi(A, local: str = "ilu0") -> BlockJacobi:
    """The block-Jacobi preconditioner of a distributed matrix: each rank's diagonal block, factored locally.

    PETSc's ``bjacobi`` with one block per rank: ``M(r)`` solves with this rank's rows x
    its own columns (``A.diag_block``) and ignores the couplings to other ranks, so
    applying it needs no communication. The block is factored once, here (collective:
    an error on one rank, e.g. a zero pivot, raises on every rank).

    Parameters
    ----------
    A : DistCSR
        Square, columns split like its rows.
    local : {'ilu0', 'ic0', 'splu'}
        The local solve: ILU(0) (any matrix with a nonzero diagonal; not symmetric: use it
        with :func:`gmres` or :func:`bicgstab`), IC(0) (Hermitian positive definite blocks:
        symmetric, for :func:`cg` and :func:`minres`), or SciPy's sparse LU (an exact block
        solve, symmetric when the block is).

    Returns
    -------
    BlockJacobi
        ``M.matvec(r)``, ``M(r)``, ``M.shape``, ``M.dtype``, ``M.factor`` (this rank's :class:`LocalFactor`).

    Raises
    ------
    numpy.linalg.LinAlgError
        A zero pivot (ILU(0)), a pivot that is not positive (IC(0)), a row without a diagonal
        entry, or a singular block (splu); on every rank, naming the rank and row.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> t = st.stencil((8, 8), 5) if MPI.COMM_WORLD.rank == 0 else None     # 2-d Poisson, 64 rows
    >>> A = stmpi.DistCSR.from_global(t)
    >>> r0, r1 = A.row_range
    >>> b = np.random.default_rng(0).standard_normal(64)[r0:r1]   # (b = 1 excites few modes: 10 iterations)
    >>> plain, pre = [], []
    >>> x, info = stmpi.cg(A, b, rtol=1e-8, callback=plain.append)
    >>> x, info = stmpi.cg(A, b, rtol=1e-8, M=stmpi.block_jacobi(A, "ic0"), callback=pre.append)
    >>> info, len(pre) < len(plain)
    (0, True)
    """
    return BlockJacobi(A, local)
