"""The ops of :class:`DistBSR` that change its pattern, its PETSc bridge (MPIBAIJ) and point-block Jacobi.

``zero_rows``, ``A + B``, ``A - B``, ``A.T`` and ``A @ B`` run :class:`DistCSR`'s op
(:mod:`._ops`, :mod:`._spgemm`) on the point form (:meth:`DistBSR.to_csr`) and cut the
result back into blocks (:meth:`DistBSR.from_csr`): one code path for the checks, the
routing of entries and the errors on every rank, at the cost of the point form's memory
for the duration of the op. ``alpha * A``, ``-A``, ``conj`` and ``copy`` keep the pattern
and are :class:`DistCSR`'s own (they replace the blocks' values).
"""

from __future__ import annotations

import numpy as np

from .._core._canonical import ensure_valid_export
from . import _ops
from ._bsr import DistBSR
from ._comm import agree
from ._matrix import DistCSR
from ._spgemm import spgemm
from ._petsc import _index_dtype, _is_mat, _petsc, _scalar_dtype, _world, comm_of, read_rows

__all__ = ["PointBlockJacobi", "point_block_jacobi"]


def _through_points(A: DistBSR, fn, blocksize):
    """``fn(A.to_csr())`` (a DistCSR) cut into ``blocksize`` blocks; the point forms are freed."""
    c = A.to_csr()
    try:
        p = fn(c)
    finally:
        c.free()
    if blocksize is None:
        return p
    try:
        return DistBSR.from_csr(p, blocksize)
    finally:
        p.free()


def zero_rows(self: DistBSR, rows, diag=1.0, x=None, b=None) -> None:
    """Zero the global ``rows`` except ``diag`` on the diagonal, in place (collective; PETSc's ``MatZeroRows``).

    :meth:`DistCSR.zero_rows` on the point form: the same arguments, checks and
    right-hand-side fix. The blocks that held a zeroed row's entries stay stored, with
    zeros in that row (as PETSc's BAIJ keeps them); a diagonal block is added where the
    row had none.
    """
    c = self.to_csr()
    try:
        _ops.zero_rows(c, rows, diag, x, b)
        new = DistBSR.from_csr(c, self.blocksize)
    finally:
        c.free()
    _ops._replace(self, new)


def _operand_blocks(A: DistBSR, B, op: str):
    """``B``'s block size, or None for a DistCSR, agreed over the ranks (collective)."""
    kinds = A._comm.allgather(B.blocksize if isinstance(B, DistBSR) else None)
    if len(set(kinds)) != 1:
        raise TypeError(f"A {op} B: B is a DistBSR on some ranks and not on others: block sizes {kinds} (by rank)")
    return kinds[0]


def _sum(A: DistBSR, B, sign: int, op: str):
    if not _ops.matrix_operand(A, B, op, "a DistCSR or DistBSR"):
        return NotImplemented
    kind = _operand_blocks(A, B, op)
    Bp = B.to_csr() if isinstance(B, DistBSR) else B
    try:
        # the same block size: a DistBSR; a DistCSR or another block size: the point sum, a DistCSR
        return _through_points(A, lambda a: a + Bp if sign > 0 else a - Bp,
                               A.blocksize if kind == A.blocksize else None)
    finally:
        if Bp is not B:
            Bp.free()


def _add(self, other):
    """``A + B`` (collective): a DistBSR for two of one block size (the union of their blocks), else a DistCSR."""
    return _sum(self, other, 1, "+")


def _sub(self, other):
    """``A - B`` (collective); see ``A + B``."""
    return _sum(self, other, -1, "-")


def transpose(self: DistBSR) -> DistBSR:
    """``A^T`` as a :class:`DistBSR` of ``c x r`` blocks (collective); rows split like ``A``'s columns."""
    return _through_points(self, _ops.transpose, (self._bc, self._br))


def _matmul(self, other):
    """``A @ x`` (:meth:`DistCSR.matvec`); ``A @ B`` for a distributed ``B`` (collective).

    ``B`` a DistBSR: a DistBSR of ``(A's r, B's c)`` blocks; ``B`` a DistCSR: a DistCSR. Both
    through :func:`sparsetensor.mpi._spgemm.spgemm` on the point forms.
    """
    if not isinstance(other, DistCSR):
        return self.matvec(other)
    self._check_operand(other, 0, "A @ B", "B", True, matrix_ok=True)
    kind = _operand_blocks(self, other, "@")
    Bp = other.to_csr() if isinstance(other, DistBSR) else other
    try:
        return _through_points(self, lambda a: spgemm(a, Bp),
                               None if kind is None else (self._br, other._bc))
    finally:
        if Bp is not other:
            Bp.free()


# -- PETSc ------------------------------------------------------------------------------------
def to_petsc(self: DistBSR):
    """This matrix as a petsc4py ``Mat`` of type BAIJ (collective): ``MATMPIBAIJ``, ``MATSEQBAIJ`` on one rank.

    The ``Mat`` has our row and column ownership ranges and block size, and is assembled.

    - **copied**: everything. petsc4py builds a BAIJ matrix only through
      ``MatXAIJSetPreallocationCSR`` (``Mat.createBAIJ(csr=...)``), which copies the row
      pointers, the global block columns and the block values into PETSc's own storage;
      it wraps none of PETSc's ``...BAIJWithArrays`` constructors (only AIJ's), so no
      array of ours can be shared. Our blocks are row-major, the order PETSc reads them
      in (``MAT_ROW_ORIENTED``, its default), so the values are copied once, not
      transposed. A change of our values afterwards is not seen by PETSc, nor PETSc's by us.
    - **converted**: indices to ``PETSc.IntType`` and values to ``PETSc.ScalarType``
      (exact conversions only, as :meth:`DistCSR.to_petsc`).

    Raises
    ------
    NotImplementedError
        On every rank, for non-square blocks: PETSc's BAIJ has ``bs x bs`` blocks (use
        ``A.to_csr().to_petsc()``, an AIJ ``Mat``).
    ImportError, TypeError
        As :meth:`DistCSR.to_petsc`.
    """
    PETSc = _petsc(self._comm)
    r, c = self.blocksize

    def arrays():
        where = f"DistBSR.to_petsc (rank {self._comm.rank})"
        if r != c:
            raise NotImplementedError(f"{where}: PETSc's BAIJ stores square blocks; this matrix has {r} x {c} "
                                      f"blocks (A.to_csr().to_petsc() gives an AIJ Mat)")
        t = ensure_valid_export(self.local_rows(), private=False)  # again where a caller may have written the arrays
        sdt = _scalar_dtype(PETSc, self._dtype, where, (t.values(),))
        idt = _index_dtype(PETSc, self._shape, t.nnz * r * c, where)
        return (t.crow_indices().astype(idt), t.col_indices().astype(idt),
                np.ascontiguousarray(t.values(), dtype=sdt).reshape(-1))

    csr = agree(self._comm, arrays)
    size = ((self._r1 - self._r0, self._shape[0]), (self._c1 - self._c0, self._shape[1]))
    mat = PETSc.Mat().createBAIJ(size, r, csr=csr, comm=self._user_comm)
    mat.assemble()
    return mat


def from_petsc(cls, mat, comm=None, exchange: str = "p2p") -> DistBSR:
    """A :class:`DistBSR` from an assembled petsc4py BAIJ ``Mat`` (collective; copies).

    ``mat``: ``MATMPIBAIJ`` (``MATSEQBAIJ`` on one process); the block size is the
    ``Mat``'s. Read through ``MatGetRow`` (``Mat.getValuesCSR``, every entry of every
    stored block, with global columns), then cut into blocks as :meth:`DistBSR.from_csr`:
    the ``Mat``'s blocks come back as they were stored, explicit zeros included.

    Raises
    ------
    TypeError
        On every rank, for an object that is not a BAIJ ``Mat`` (an AIJ one:
        :meth:`DistCSR.from_petsc`).
    """
    if comm is None:
        comm = comm_of(mat) if _is_mat(mat) else _world()

    def check_kind(kind, procs):
        if not (kind.startswith("mpibaij") or kind.startswith("seqbaij")):
            raise TypeError(f"DistBSR.from_petsc: expected a BAIJ matrix (MATMPIBAIJ or MATSEQBAIJ), got a Mat of "
                            f"type {kind!r}; DistCSR.from_petsc reads AIJ matrices")

    point, bs = read_rows(mat, comm, "DistBSR.from_petsc", check_kind, exchange)
    try:
        return cls.from_csr(point, (bs, bs))
    finally:
        point.free()


# -- point-block Jacobi -----------------------------------------------------------------------
class PointBlockJacobi:
    """``M r``: each ``r x r`` diagonal block's inverse times its part of ``r``; see :func:`point_block_jacobi`."""

    def __init__(self, A: DistBSR):
        if not isinstance(A, DistBSR):
            raise TypeError(f"point_block_jacobi: expected a DistBSR, got {type(A).__name__}")
        comm = A.comm

        def inverse():
            d = A.diagonal_blocks()
            d = d.astype(np.promote_types(d.dtype, np.float32))
            try:
                return np.linalg.inv(d) if d.shape[0] else d
            except np.linalg.LinAlgError:
                k = int(np.flatnonzero(np.linalg.cond(d) > 1 / np.finfo(d.dtype).eps)[0]) if d.shape[0] else 0
                raise np.linalg.LinAlgError(f"point_block_jacobi: the diagonal block at global rows "
                                            f"{A.row_range[0] + k * A.blocksize[0]}.. is singular (rank "
                                            f"{comm.rank})") from None

        self._inv = agree(comm, inverse)
        self.blocksize = A.blocksize
        self.shape = tuple(A.shape)
        self.dtype = self._inv.dtype
        self.comm = comm

    def matvec(self, r):
        """``D^-1 r`` for this rank's slice (``(n,)`` or ``(n, k)``), ``D`` the block diagonal."""
        r = np.asarray(r)
        b = self.blocksize[0]
        rb = r.reshape((-1, b) + r.shape[1:])
        out = np.einsum("kij,kj...->ki...", self._inv, rb)
        return out.reshape(r.shape)

    def rmatvec(self, r):
        """The adjoint: ``D^-H r``."""
        r = np.asarray(r)
        b = self.blocksize[0]
        out = np.einsum("kji,kj...->ki...", np.conj(self._inv), r.reshape((-1, b) + r.shape[1:]))
        return out.reshape(r.shape)

    def __call__(self, r):
        return self.matvec(r)

    def __matmul__(self, r):
        return self.matvec(r)

    def __repr__(self):
        return f"PointBlockJacobi(shape={self.shape}, blocksize={self.blocksize}, dtype={self.dtype})"


def point_block_jacobi(A: DistBSR) -> PointBlockJacobi:
    """The point-block Jacobi preconditioner of a :class:`DistBSR` (collective; PETSc's ``PCPBJACOBI``).

    Each rank inverts its ``r x r`` diagonal blocks once (NumPy's ``inv``, in
    ``np.promote_types(A.dtype, float32)``); ``M(r)`` multiplies each block of ``r`` by its
    inverse, with no communication. :func:`jacobi` on a DistBSR is the *point* diagonal
    (PETSc's ``PCJACOBI``); :func:`block_jacobi` solves each rank's whole diagonal block.
    Needs square blocks and the columns split like the rows.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> t = st.from_dense(np.array([[4.0, 1, 0, 0], [1, 4, 0, 0], [0, 0, 2, 0], [0, 0, 0, 2]]))
    >>> A = stmpi.DistBSR.from_global(t if MPI.COMM_WORLD.rank == 0 else None, blocksize=(2, 2))
    >>> M = stmpi.point_block_jacobi(A)
    >>> r0, r1 = A.row_range
    >>> bool(np.allclose((A @ M(np.ones(r1 - r0))), np.ones(r1 - r0)))
    True
    """
    return PointBlockJacobi(A)
