"""Operations on :class:`DistCSR` that an assembly-and-solve code needs (:mod:`._methods` makes them
its methods and operators).

``A.zero_rows(rows, diag, x, b)`` (Dirichlet rows, PETSc's ``MatZeroRows``),
``A + B``, ``A - B``, ``alpha * A``, ``-A``, ``A.T`` / ``A.transpose()``,
``A.conj()``, ``A.copy()``. All are collective, and an error on any rank
raises on every rank. Scaling, conjugating and copying keep the pattern: the
new matrix shares the partition, ghosts and communication plan (only its
values are new). Sums, transposes and zeroed rows change the pattern: the new
rows go through the same build as :func:`sparsetensor.mpi.assemble`.
"""

from __future__ import annotations

import numbers

import numpy as np
from mpi4py import MPI

from ._assemble import Routing, _first_outside, _index_array, build, owners
from ._comm import agree, first_failing, same_on_every_rank
from ._matrix import DistCSR

__all__ = ["conj", "copy", "transpose", "zero_rows"]

_INT32_MAX = (1 << 31) - 1


def _entries(A: DistCSR):
    """This rank's entries: (local rows int64, global columns int64, values), the diagonal block first.

    A :class:`~sparsetensor.mpi.DistBSR` gives the entries of its point form (every entry of every block).
    """
    if A._blocksize() is not None:
        t = A.local_rows().to_sparse_csr()
        rows = np.repeat(np.arange(t.shape[0], dtype=np.int64), np.diff(t.crow_indices()))
        return rows, t.col_indices().astype(np.int64), t.values()
    n = A._r1 - A._r0
    d, o = A._diag, A._offd
    rows = np.concatenate([np.repeat(np.arange(n, dtype=np.int64), np.diff(d.crow_indices())),
                           np.repeat(np.arange(n, dtype=np.int64), np.diff(o.crow_indices()))])
    cols = np.concatenate([d.col_indices().astype(np.int64) + A._c0, A._ghosts[o.col_indices()]])
    return rows, cols, np.concatenate([d.values(), o.values()])


def _wire(shape) -> np.dtype:
    return np.dtype(np.int32) if max(shape) <= _INT32_MAX else np.dtype(np.int64)


def _rebuild(A: DistCSR, rows, cols, vals, index_dtype=None) -> DistCSR:
    """A DistCSR with A's partitions from this rank's (local row, global column, value) triples (collective)."""
    idx = np.empty((2, rows.shape[0]), dtype=_wire(A._shape))
    idx[0], idx[1] = rows, cols
    return build(A.comm, A._shape, A._row_starts, A._col_starts, idx, vals,
                 index_dtype=A._index_dtype if index_dtype is None else index_dtype, exchange=A.exchange,
                 where=f"DistCSR (rank {A._comm.rank})")


def _replace(A: DistCSR, new: DistCSR) -> None:
    """Make ``A`` the matrix ``new`` (in place, collective): frees ``A``'s communicator first."""
    A.free()
    A.__dict__.clear()
    A.__dict__.update(new.__dict__)


# -- Dirichlet rows ---------------------------------------------------------------------------
def zero_rows(self: DistCSR, rows, diag=1.0, x=None, b=None) -> None:
    """Zero the global ``rows`` except ``diag`` on the diagonal, in place (collective; PETSc's ``MatZeroRows``).

    Every rank may pass any rows, owned or not, repeated or none: each row goes
    to its owner, which empties it and, when ``diag`` is nonzero, stores
    ``diag`` at ``(i, i)`` (added to the pattern when it was not there). With
    ``x`` and ``b`` (this rank's slices, distributed like the rows, e.g. the
    boundary values and the right-hand side), the owners also set
    ``b[i] = diag * x[i]``, so the zeroed rows impose ``x[i]``.

    Parameters
    ----------
    rows : 1-d array of integers
        Global rows (``[]`` for none on this rank).
    diag : scalar
        The value on the diagonal of the zeroed rows (0: rows of zeros).
    x, b : numpy.ndarray, optional
        Both or neither; 1-d or 2-d with this rank's ``row_range`` rows. ``b`` is
        changed in place.

    Returns
    -------
    None
        ``A`` is changed in place, as PETSc changes its matrix: its entries,
        ghosts and communication plan are rebuilt (the row and column
        partitions stay); blocks taken from it before stay as they were.

    Raises
    ------
    ValueError
        On every rank, for a row outside the matrix, a nonzero ``diag`` in a
        row without a diagonal (a row ``i >= ncols``), only one of ``x``/``b``,
        or slices of the wrong length.
    TypeError
        On every rank, for non-integer rows or a ``diag`` that ``A``'s dtype
        cannot hold.

    Notes
    -----
    The zeroed rows' columns keep their entries, as with ``MatZeroRows``: the
    matrix is no longer symmetric. With ``x`` equal to the boundary values and
    ``b`` fixed as above, CG still solves such a system from a zero start,
    since its iterates never move the zeroed rows' entries.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> t = st.from_dense(np.array([[2.0, -1, 0], [-1, 2, -1], [0, -1, 2]]))
    >>> A = stmpi.DistCSR.from_global(t if MPI.COMM_WORLD.rank == 0 else None)
    >>> r0, r1 = A.row_range
    >>> x, b = np.full(r1 - r0, 5.0), np.ones(r1 - r0)
    >>> A.zero_rows([0, 2], diag=2.0, x=x, b=b)  # every rank may pass them
    >>> np.concatenate(MPI.COMM_WORLD.allgather(b))
    array([10.,  1., 10.])
    >>> g = A.to_global()
    >>> g.to_dense() if MPI.COMM_WORLD.rank == 0 else np.array([[2., 0, 0], [-1, 2, -1], [0, 0, 2]])
    array([[ 2.,  0.,  0.],
           [-1.,  2., -1.],
           [ 0.,  0.,  2.]])
    """
    A = self
    comm, rank = A._comm, A._comm.rank
    M, N = A._shape
    nloc = A._r1 - A._r0
    # each owner writes its rows' diagonal: a diag that differs by rank would be applied on some
    same_on_every_rank(comm, "zero_rows", diag=diag, x_and_b=(x is not None, b is not None))
    where = f"zero_rows: rank {rank}"

    def check():
        r = _index_array(rows, "rows", where)
        k = _first_outside(r, M)
        if k >= 0:
            raise ValueError(f"{where}: entry {k} is global row {r[k]}, outside the {M} rows [0, {M})")
        if not isinstance(diag, numbers.Number):
            raise TypeError(f"{where}: diag must be a number, got {diag!r}")
        d = np.asarray(diag)
        if np.result_type(A._dtype, diag).kind != A._dtype.kind and d != 0:  # float diag, int matrix: refuse
            raise TypeError(f"{where}: diag={diag!r} does not fit the matrix's dtype {A._dtype}")
        if d != 0 and r.size and int(r.max()) >= N:
            i = int(r[r >= N][0])
            raise ValueError(f"{where}: global row {i} has no diagonal entry in a {M} x {N} matrix; use diag=0")
        if (x is None) != (b is None):
            raise ValueError(f"{where}: pass both x and b (b[i] = diag * x[i] on the zeroed rows), or neither")
        if b is not None:
            for name, v in (("x", x), ("b", b)):
                if not isinstance(v, np.ndarray) or v.ndim not in (1, 2) or v.shape[0] != nloc:
                    raise ValueError(f"{where}: {name} must be this rank's slice of {nloc} rows (a NumPy array), got "
                                     f"{getattr(v, 'shape', type(v).__name__)}")
            if not b.flags.writeable:
                raise ValueError(f"{where}: b is changed in place and must be writeable")
            if not np.can_cast(np.result_type(x.dtype, diag), b.dtype, casting="same_kind"):  # 0.5 into int: 0
                raise TypeError(f"{where}: b ({b.dtype}) cannot hold diag * x ({np.result_type(x.dtype, diag)})")
        return r

    r = agree(comm, check)
    route = Routing(comm, owners(A._row_starts, r))
    mine = route.send(r, np.int64) - A._r0
    del route

    def local():
        zero = np.zeros(nloc, dtype=bool)
        zero[mine] = True
        lr, gc, vals = _entries(A)
        keep = ~zero[lr]
        lr, gc, vals = lr[keep], gc[keep], vals[keep]
        z = np.flatnonzero(zero)
        if diag != 0 and z.size:
            lr = np.concatenate([lr, z])
            gc = np.concatenate([gc, z + A._r0])
            vals = np.concatenate([vals, np.full(z.size, diag, dtype=A._dtype)])
        if b is not None and z.size:
            b[z] = diag * x[z]
        return lr, gc, vals

    lr, gc, vals = agree(comm, local)
    _replace(A, _rebuild(A, lr, gc, vals))


# -- sums and scaling -------------------------------------------------------------------------
def matrix_operand(A, B, op: str, expected: str = "a DistCSR") -> bool:
    """Whether ``B`` is a distributed matrix (collective): agreed over the ranks first, so that a wrong
    operand on one rank cannot hang the others. False on every rank (the operator returns
    NotImplemented) or TypeError where some ranks passed a matrix and others did not."""
    src = first_failing(A._comm, not isinstance(B, DistCSR))
    if not isinstance(B, DistCSR):
        return False
    if src is not None:
        raise TypeError(f"A {op} B: rank {src} passed a B that is not {expected}")
    return True


def _sum(A: DistCSR, B, sign: int, op: str):
    if not matrix_operand(A, B, op):
        return NotImplemented

    def check():
        if MPI.Comm.Compare(A.comm, B.comm) not in (MPI.IDENT, MPI.CONGRUENT):
            raise ValueError(f"A {op} B: the matrices live on different communicators")
        if A.shape != B.shape:
            raise ValueError(f"A {op} B: the shapes differ: {A.shape} and {B.shape}")
        for what, a, c in (("row", A._row_starts, B._row_starts), ("column", A._col_starts, B._col_starts)):
            if not np.array_equal(a, c):
                raise ValueError(f"A {op} B: the {what} partitions differ ({a.tolist()} and {c.tolist()}); build one "
                                 f"of them with row_starts=/col_starts= of the other")

    agree(A._comm, check)
    dtype = np.result_type(A.dtype, B.dtype)

    def local():
        ra, ca, va = _entries(A)
        rb, cb, vb = _entries(B)
        vb = vb.astype(dtype) if sign > 0 else np.negative(vb.astype(dtype))
        return np.concatenate([ra, rb]), np.concatenate([ca, cb]), np.concatenate([va.astype(dtype), vb])

    rows, cols, vals = agree(A._comm, local)
    idt = A.index_dtype if A.index_dtype == B.index_dtype else np.dtype(np.int64)
    return _rebuild(A, rows, cols, vals, index_dtype=idt)


def _add(self, other):
    """``A + B`` for matrices with the same shape and partitions (collective); explicit zeros stay."""
    return _sum(self, other, 1, "+")


def _sub(self, other):
    """``A - B`` for matrices with the same shape and partitions (collective)."""
    return _sum(self, other, -1, "-")


def _map_values(A: DistCSR, fn) -> DistCSR:
    """The matrix with ``fn`` applied to the values of both blocks; the same pattern and plan (collective)."""
    d, o = agree(A._comm, lambda: (fn(A._diag.values()), fn(A._offd.values())))
    return A._with_blocks(A._diag._replace_values(d), A._offd._replace_values(o))


def _scale(self, alpha):
    """``alpha * A`` for a scalar ``alpha``, the same on every rank (collective); the dtype as NumPy promotes it."""
    ok = isinstance(alpha, numbers.Number)
    # the value and the result dtype (2.0 keeps float32 values, np.float64(2.0) promotes them): agreed
    # first, so that no rank hangs and no two ranks hold different dtypes
    mine = (complex(alpha), (np.zeros(0, self._dtype) * alpha).dtype.str) if ok else None
    every = self._comm.allgather(mine)
    if not ok:
        return NotImplemented
    if None in every:
        raise TypeError(f"alpha * A: rank {every.index(None)} passed an alpha that is not a number")
    values = [e[0] for e in every]
    if not np.array_equal(values, values[:1] * len(values), equal_nan=True):
        raise ValueError(f"alpha * A: every rank must pass the same alpha; got {values} (by rank)")
    dtypes = [e[1] for e in every]
    if len(set(dtypes)) != 1:
        raise ValueError(f"alpha * A: every rank's alpha must give the same result dtype; got "
                         f"{[str(np.dtype(d)) for d in dtypes]} (by rank: a Python float keeps float32 values, "
                         "a NumPy float64 promotes them)")
    return _map_values(self, lambda v: v * alpha)


def _neg(self):
    """``-A`` (collective)."""
    return _map_values(self, np.negative)


def conj(self) -> DistCSR:
    """The complex conjugate (collective): a new matrix with the same pattern; a copy for real dtypes."""
    return _map_values(self, lambda v: np.conj(v) if v.dtype.kind == "c" else v.copy())


def copy(self) -> DistCSR:
    """A copy with its own values and communicator, the same pattern and plan (collective)."""
    return _map_values(self, np.copy)


# -- transpose --------------------------------------------------------------------------------
def transpose(self) -> DistCSR:
    """``A^T`` as a new :class:`DistCSR` (collective): each entry moves to the owner of its column.

    The result's rows are split like ``A``'s columns (``A.col_starts``) and its
    columns like ``A``'s rows, so ``A.T @ y`` takes ``y`` as ``A @ x`` returns
    it. One ``MPI_Alltoall`` of counts and one ``MPI_Alltoallv`` per array move
    the entries; :meth:`DistCSR.rmatvec` gives ``A^T y`` without building it.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor.mpi import DistCSR
    >>> t = st.from_dense(np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]]))
    >>> A = DistCSR.from_global(t if MPI.COMM_WORLD.rank == 0 else None)
    >>> B = A.T
    >>> B.shape, B.nnz, np.array_equal(B.row_starts, A.col_starts)
    ((3, 2), 3, True)
    """
    A = self
    M, N = A._shape
    wire = _wire((M, N))
    lr, gc, vals = _entries(A)
    route = Routing(A._comm, owners(A._col_starts, gc))
    idx = np.empty((2, route.received), dtype=wire)
    route.send(gc, wire, out=idx[0])
    route.send(lr + A._r0, wire, out=idx[1])
    v = route.send(vals, A._dtype)
    del route
    idx[0] -= wire.type(A._c0)
    return build(A.comm, (N, M), A._col_starts, A._row_starts, idx, v, index_dtype=A._index_dtype,
                 exchange=A.exchange, where=f"DistCSR.transpose (rank {A._comm.rank})")
