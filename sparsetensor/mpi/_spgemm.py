"""``A @ B`` for two :class:`~sparsetensor.mpi.DistCSR` matrices: distributed SpGEMM.

Rank ``r``'s rows of ``C = A @ B`` need every row ``k`` of ``B`` that rank ``r``'s rows of
``A`` touch (column ``k`` of ``A``). The rows of ``B`` in ``r``'s own row range are at hand;
the others (``A``'s ghost columns, when ``A``'s column partition is ``B``'s row partition)
are fetched from their owners: one ``MPI_Alltoallv`` of the rows' lengths, then one of
their columns and one of their values (raw bytes, no pickling). When the partitions agree
the owners already know who needs which rows (``A``'s ghost exchange plan); otherwise one
``MPI_Alltoall`` of counts and one ``MPI_Alltoallv`` of the wanted row numbers tell them
first (``B`` is not redistributed: only the rows asked for travel). Then each rank
multiplies locally with sparsetensor's SpGEMM (:func:`sparsetensor.ops.spgemm.spgemm`):
its rows of ``A``, their columns renumbered to the rows of ``B`` at hand, times those rows.

Memory per rank: its rows of ``A`` and ``B`` (each copied once, with global columns), the
fetched rows of ``B``, and its rows of ``C``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._core._from_arrays import sparse_csr_tensor
from ..ops.blas import matmul
from ._assemble import Routing, owners
from ._comm import agree, bytes_of, same_on_every_rank
from ._matrix import DistCSR

__all__ = ["spgemm"]

_INT32_MAX = (1 << 31) - 1


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=out[1:])
    return out


def _alltoallv(comm, send: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray, dtype) -> np.ndarray:
    """Entries ``send[displ[q]:displ[q] + send_counts[q]]`` to rank ``q``; the received entries, by source rank."""
    dtype = np.dtype(dtype)
    send = np.ascontiguousarray(send, dtype=dtype)
    out = np.empty(int(recv_counts.sum()), dtype=dtype)
    entry = MPI.BYTE.Create_contiguous(max(dtype.itemsize, 1)).Commit()  # counts stay entry counts
    try:
        comm.Alltoallv([bytes_of(send), send_counts, _offsets(send_counts), entry],
                       [bytes_of(out), recv_counts, _offsets(recv_counts), entry])
    finally:
        entry.Free()
    return out


def _segment_sums(lengths: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per rank, the sum of its ``counts[q]`` consecutive ``lengths`` (entries of the rows it gets)."""
    cl = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=cl[1:])
    ends = np.cumsum(counts)
    return cl[ends] - cl[ends - counts]


def _plan(A: DistCSR, B: DistCSR, b0: int, b1: int):
    """(rows of B this rank fetches, sorted; local rows of B it sends; rows it sends / fetches per rank)."""
    comm, size = A._comm, A._comm.size
    if np.array_equal(A._col_starts, B._row_starts):  # A's ghost plan: its ghosts are the rows to fetch
        send_counts = np.zeros(size, dtype=np.int64)
        recv_counts = np.zeros(size, dtype=np.int64)
        for q, _, c in A._send_plan:
            send_counts[q] = c
        for q, _, c in A._recv_plan:
            recv_counts[q] = c
        return A._ghosts, A._send_idx, send_counts, recv_counts
    # other partitions: ask the owners (by B's row partition) for the rows outside this rank's range
    cols = np.unique(np.concatenate([A._diag.col_indices().astype(np.int64) + A._c0, A._ghosts]))
    remote = cols[(cols < b0) | (cols >= b1)]
    route = Routing(comm, owners(B._row_starts, remote))  # remote is sorted, so are the owners: no reordering
    wanted = route.send(remote, np.int64)
    return remote, (wanted - b0).astype(np.intp), route.recv_counts, route.send_counts


def spgemm(A: DistCSR, B: DistCSR, *, threads: int | None = None) -> DistCSR:
    """``A @ B`` for two :class:`DistCSR` on one communicator, a new :class:`DistCSR` (collective).

    ``C = A @ B`` has ``A``'s row partition and ``B``'s column partition, the value dtype
    ``np.result_type(A.dtype, B.dtype)``, canonical rows (explicit zeros where products
    cancel stay, as in :func:`sparsetensor.ops.spgemm.spgemm`; SciPy drops them), and
    ``A``'s exchange mode.

    ``A``'s column partition need not be ``B``'s row partition: when they agree, each rank
    fetches the rows of ``B`` at ``A``'s ghost columns along ``A``'s ghost plan; when they
    differ, each rank asks the owners (by ``B.row_starts``) for every row of ``B`` its rows
    of ``A`` touch outside its own row range of ``B``, one more ``MPI_Alltoall`` and
    ``MPI_Alltoallv``. Neither matrix is redistributed.

    Raises
    ------
    ValueError
        On every rank, when ``A.shape[1] != B.shape[0]`` (the message names both shapes),
        or the matrices live on different communicators.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor.mpi import DistCSR
    >>> a = st.from_dense(np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]]))
    >>> b = st.from_dense(np.array([[1.0, 0.0], [0.0, 1.0], [4.0, 0.0]]))
    >>> root = MPI.COMM_WORLD.rank == 0
    >>> A = DistCSR.from_global(a if root else None)
    >>> B = DistCSR.from_global(b if root else None)
    >>> C = A @ B
    >>> C.shape, C.nnz
    ((2, 2), 3)
    >>> c = C.to_global()
    >>> c.to_dense() if root else np.array([[1.0, 2.0], [12.0, 0.0]])
    array([[ 1.,  2.],
           [12.,  0.]])
    """
    comm = A._comm
    rank = comm.rank

    def check():
        if MPI.Comm.Compare(A.comm, B.comm) not in (MPI.IDENT, MPI.CONGRUENT):
            raise ValueError("A @ B: the matrices live on different communicators")
        if A.shape[1] != B.shape[0]:
            raise ValueError(f"A @ B: shapes {A.shape} and {B.shape} cannot be multiplied (A has {A.shape[1]} "
                             f"columns, B {B.shape[0]} rows)")

    agree(comm, check)
    # one B on every rank: another matrix on one rank (a product valid there) would send it down
    # another plan than the others'
    same_on_every_rank(comm, "A @ B", shape_of_B=B.shape, row_starts_of_B=B.row_starts, col_starts_of_B=B.col_starts)
    M, N = A.shape[0], B.shape[1]
    b0, b1 = B.row_range
    rt = np.result_type(A.dtype, B.dtype)
    remote, send_rows, send_counts, recv_counts = _plan(A, B, b0, b1)

    # the rows of B others need, by length then entries; the rows this rank needs, likewise
    bl = B.local_rows()
    bcrow = bl.crow_indices().astype(np.int64)
    lens = np.diff(bcrow)[send_rows]
    got_lens = _alltoallv(comm, lens, send_counts, recv_counts, np.int64)
    cl = np.zeros(lens.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=cl[1:])
    pick = np.repeat(bcrow[send_rows] - cl[:-1], lens) + np.arange(cl[-1], dtype=np.int64)
    send_entries, recv_entries = _segment_sums(lens, send_counts), _segment_sums(got_lens, recv_counts)
    wire = np.dtype(np.int32) if N <= _INT32_MAX else np.dtype(np.int64)
    # the result's index dtype, the same on every rank: the operands' (int64 when they differ or the shape needs it)
    big = np.dtype(np.int64) in (A.index_dtype, B.index_dtype) or max(M, N) > _INT32_MAX
    index_dtype = np.dtype(np.int64) if big else np.dtype(np.int32)
    got_cols = _alltoallv(comm, bl.col_indices()[pick], send_entries, recv_entries, wire)
    got_vals = _alltoallv(comm, bl.values()[pick], send_entries, recv_entries, B.dtype)
    del pick

    def local():
        # the rows of B at hand, in global row order: fetched rows below b0, B's own rows, fetched rows above
        k_lo = int(np.searchsorted(remote, b0))
        e_lo = int(got_lens[:k_lo].sum())
        nb = b1 - b0
        lens_u = np.concatenate([got_lens[:k_lo], np.diff(bcrow), got_lens[k_lo:]])
        nnz_u = int(lens_u.sum())
        a = A.local_rows()
        g = a.col_indices().astype(np.int64)
        if max(remote.shape[0] + nb, nnz_u, a.nnz) > _INT32_MAX:  # this rank's operands only
            idt = np.dtype(np.int64)
        else:
            idt = index_dtype
        # A's columns renumbered to positions among those rows (monotone, so its rows stay sorted)
        pos = np.searchsorted(remote, g)
        own = (g >= b0) & (g < b1)
        pos[own] = k_lo + g[own] - b0
        pos[g >= b1] += nb
        nrows = A._r1 - A._r0
        ac = sparse_csr_tensor(a.crow_indices().astype(idt), pos.astype(idt), a.values().astype(rt, copy=False),
                               size=(nrows, remote.shape[0] + nb), check_invariants=False)
        ac._set_validated()  # A's checked rows, columns renumbered monotonically
        if ac.nnz == 0 or nnz_u == 0:
            crow = np.zeros(nrows + 1, dtype=np.int64)
            return crow, np.zeros(0, dtype=idt), np.zeros(0, dtype=rt)
        crow_u = np.zeros(lens_u.shape[0] + 1, dtype=idt)
        np.cumsum(lens_u, out=crow_u[1:])
        cols_u = np.concatenate([got_cols[:e_lo].astype(idt), bl.col_indices().astype(idt), got_cols[e_lo:].astype(idt)])
        vals_u = np.concatenate([got_vals[:e_lo], bl.values(), got_vals[e_lo:]]).astype(rt, copy=False)
        bu = sparse_csr_tensor(crow_u, cols_u, vals_u, size=(lens_u.shape[0], N), check_invariants=False)
        c = matmul(ac, bu, threads=threads)  # sparsetensor's SpGEMM; checks bu (rows from other ranks) first
        return c.crow_indices().astype(np.int64), c.col_indices(), c.values()

    crow64, cols, vals = agree(comm, local)
    nnzs = np.empty(comm.size, dtype=np.int64)
    comm.Allgather(np.array([cols.shape[0]], dtype=np.int64), nnzs)
    if int(nnzs.max()) > _INT32_MAX:  # row pointers of so many entries need int64 (the same test on every rank)
        index_dtype = np.dtype(np.int64)
    cols = cols.astype(index_dtype, copy=False)
    return DistCSR._from_parts(A.comm, (M, N), A._row_starts, B._col_starts, crow64, cols, vals,
                               int(nnzs[:rank].sum()), True, A.exchange)


def product(self: DistCSR, other):
    """``A @ x``: :meth:`DistCSR.matvec` (``x`` this rank's slice, 1-d or 2-d); ``A @ B``: the product
    of two :class:`DistCSR`, a new DistCSR (:func:`spgemm`). Collective."""
    if isinstance(other, DistCSR):
        self._check_operand(other, 0, "A @ B", "B", True, matrix_ok=True)
        return spgemm(self, other)
    return self.matvec(other)
