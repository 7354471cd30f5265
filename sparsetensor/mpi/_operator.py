"""``DistLinearOperator``: a linear operator over vectors distributed by rows, for the Krylov solvers.

SciPy's :class:`scipy.sparse.linalg.LinearOperator` knows one process: its solvers take
inner products over the whole vector they hold. Wrapping a distributed product in one
on each rank gives each rank a solver over its own slice only (local inner products,
ranks stopping at different iterations, wrong answers or a hang). This operator carries
what a distributed solver needs besides the product: the communicator and the row and
column partitions, so :mod:`sparsetensor.mpi._krylov` reduces its inner products over the
ranks.

The name is ``DistLinearOperator``, not ``LinearOperator``: code that does ``from
scipy.sparse.linalg import LinearOperator`` next to ``from sparsetensor.mpi import *``
keeps both, and the ``Dist`` prefix says what :class:`DistCSR` says: every rank holds a
slice.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ._comm import agree, same_on_every_rank
from ._partition import check_starts

__all__ = ["DistLinearOperator", "aslinearoperator"]


class DistLinearOperator:
    """A linear operator on vectors distributed over the ranks of ``comm`` (collective products).

    Rank ``r`` holds entries ``[col_starts[r], col_starts[r+1])`` of an input vector and
    rows ``[row_starts[r], row_starts[r+1])`` of an output vector. ``matvec(x)`` maps this
    rank's slice of ``x`` to this rank's slice of ``A x`` and is called by every rank
    together (it may communicate); so is ``rmatvec`` (``A^H x``, SciPy's meaning).

    Parameters
    ----------
    matvec : callable
        ``matvec(x_local) -> y_local``, collective.
    rmatvec : callable, optional
        ``rmatvec(y_local) -> x_local``: the adjoint ``A^H``, collective.
    row_starts : sequence of int
        ``size + 1`` row boundaries (the same on every rank).
    col_starts : sequence of int, optional
        Default ``row_starts`` (a square operator with columns split like its rows).
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.
    dtype : dtype, optional
        Of the products. Default: found by one product of zeros, as SciPy does (then the
        constructor is collective).

    Examples
    --------
    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> comm = MPI.COMM_WORLD
    >>> starts = (np.arange(comm.size + 1) * 6) // comm.size
    >>> d = np.arange(1.0, 7.0)[starts[comm.rank]:starts[comm.rank + 1]]   # this rank's diagonal
    >>> A = stmpi.DistLinearOperator(lambda x: d * x, row_starts=starts, dtype=np.float64)
    >>> A
    DistLinearOperator(shape=(6, 6), dtype=float64, ranks=...)
    >>> x, info = stmpi.cg(A, d)     # A x = d: x is all ones
    >>> info, bool(np.allclose(x, 1.0))
    (0, True)
    """

    def __init__(self, matvec, rmatvec=None, *, row_starts, col_starts=None, comm=None, dtype=None):
        comm = MPI.COMM_WORLD if comm is None else comm
        size = comm.size
        same_on_every_rank(comm, "DistLinearOperator", row_starts=row_starts, col_starts=col_starts)

        def check():
            if not callable(matvec) or (rmatvec is not None and not callable(rmatvec)):
                raise TypeError("DistLinearOperator: matvec (and rmatvec, when given) must be callables")
            rs = np.asarray(row_starts)
            rs = check_starts(rs, int(rs[-1]) if rs.ndim == 1 and rs.size else -1, size, "row_starts")
            cs = rs if col_starts is None else np.asarray(col_starts)
            return rs, check_starts(cs, int(cs[-1]) if cs.ndim == 1 and cs.size else -1, size, "col_starts")

        rs, cs = agree(comm, check)
        self._comm = comm
        self._row_starts, self._col_starts = rs, cs
        self._matvec, self._rmatvec = matvec, rmatvec
        self._shape = (int(rs[-1]), int(cs[-1]))
        if dtype is None:  # SciPy's rule: the dtype of a product (here collective: every rank multiplies)
            c0, c1 = self.col_range
            dtype = agree(comm, lambda: np.asarray(matvec(np.zeros(c1 - c0))).dtype)
            dts = comm.allgather(dtype)
            dtype = np.result_type(*dts)
        self._dtype = np.dtype(dtype)

    # -- what the solvers read ------------------------------------------------------------
    @property
    def comm(self):
        return self._comm

    @property
    def shape(self) -> tuple:
        """The global shape ``(rows, cols)``."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def row_starts(self) -> np.ndarray:
        return self._row_starts.copy()

    @property
    def col_starts(self) -> np.ndarray:
        return self._col_starts.copy()

    @property
    def row_range(self) -> tuple:
        """``(first, last + 1)``: the output rows this rank holds."""
        r = self._comm.rank
        return int(self._row_starts[r]), int(self._row_starts[r + 1])

    @property
    def col_range(self) -> tuple:
        """``(first, last + 1)``: the input entries this rank holds."""
        r = self._comm.rank
        return int(self._col_starts[r]), int(self._col_starts[r + 1])

    def __repr__(self):
        return f"DistLinearOperator(shape={self._shape}, dtype={self._dtype}, ranks={self._comm.size})"

    # -- products -------------------------------------------------------------------------
    def _local(self, x, n: int, what: str) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim not in (1, 2) or x.shape[0] != n:
            raise ValueError(f"DistLinearOperator.{what}: rank {self._comm.rank} expects {n} rows (1-d, or 2-d "
                             f"with N columns), got shape {x.shape}")
        return x

    def matvec(self, x) -> np.ndarray:
        """This rank's rows of ``A x`` from its slice of ``x`` (collective)."""
        c0, c1 = self.col_range
        return self._matvec(self._local(x, c1 - c0, "matvec"))

    def rmatvec(self, x) -> np.ndarray:
        """This rank's entries of ``A^H x`` from its rows of ``x`` (collective)."""
        if self._rmatvec is None:
            raise NotImplementedError("DistLinearOperator.rmatvec: this operator was built without rmatvec")
        r0, r1 = self.row_range
        return self._rmatvec(self._local(x, r1 - r0, "rmatvec"))

    __matmul__ = matvec
    __call__ = matvec


def aslinearoperator(A, *, threads: int | None = None) -> DistLinearOperator:
    """``A`` as a :class:`DistLinearOperator` (collective only when ``A`` needs no wrapping: never).

    Parameters
    ----------
    A : DistCSR or DistLinearOperator, or any object with ``matvec``, ``comm``,
        ``row_starts``, ``col_starts`` and ``dtype`` (a distributed matrix)
        A :class:`DistLinearOperator` is returned as it is.
    threads : int, optional
        Threads for a distributed matrix's local products.

    Returns
    -------
    DistLinearOperator
        Products without the operand agreement of ``A @ x`` (the solvers pass operands
        of the right shape); ``rmatvec`` is ``A^H x``.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> t = st.from_dense(np.array([[2.0, 1.0], [0.0, 3.0]]))
    >>> A = stmpi.DistCSR.from_global(t if MPI.COMM_WORLD.rank == 0 else None)
    >>> op = stmpi.aslinearoperator(A)
    >>> op.shape, op.dtype
    ((2, 2), dtype('float64'))
    >>> r0, r1 = op.row_range
    >>> bool(np.array_equal(op.matvec(np.ones(r1 - r0)), np.array([3.0, 3.0])[r0:r1]))
    True
    """
    if isinstance(A, DistLinearOperator):
        return A
    if isinstance(A, type) or not all(hasattr(A, k) for k in ("matvec", "comm", "row_starts", "col_starts",
                                                                  "dtype")):
        hint = ""
        if type(A).__module__.startswith("scipy"):
            hint = (" (a SciPy operator or matrix on one rank: its inner products would be this rank's only; "
                    "distribute the matrix with DistCSR.from_global or wrap the distributed product in a "
                    "DistLinearOperator)")
        raise TypeError(f"expected a DistCSR or a DistLinearOperator, got {type(A).__name__}{hint}")
    rmat = getattr(A, "rmatvec", None)

    def matvec(x):
        return A.matvec(x, threads=threads, check=False)

    def rmatvec(x):
        return rmat(x, adjoint=True, threads=threads, check=False)

    return DistLinearOperator(matvec, rmatvec if rmat is not None else None, row_starts=A.row_starts,
                              col_starts=A.col_starts, comm=A.comm, dtype=A.dtype)
