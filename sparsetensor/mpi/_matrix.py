"""``DistCSR``: a CSR matrix whose rows are spread over MPI ranks (PETSc's MPIAIJ model).

Rank ``r`` owns rows ``[row_starts[r], row_starts[r+1])`` and, for the vectors
it multiplies, entries ``[col_starts[r], col_starts[r+1])`` (for a square matrix
``col_starts`` is ``row_starts``). It stores its rows as two CSR tensors:

- the diagonal block: the columns it owns, numbered from 0;
- the off-diagonal block: the other columns it touches (its *ghosts*), numbered
  by their position in the sorted ghost list.

A communication plan, built once, says which of its entries each rank sends to
which: ``y = A @ x`` posts the receives of the ghost values and the sends of the
entries others need (non-blocking point-to-point, one message per neighbour),
multiplies the diagonal block while they travel, waits, then adds the
off-diagonal block times the received ghosts. ``exchange="neighbor"`` moves the
same bytes with one ``MPI_Ineighbor_alltoallv`` on a distributed-graph
communicator instead (see :mod:`sparsetensor.mpi._exchange`). Each ghost value crosses the
network once per product: ``itemsize x ghosts x columns`` bytes per rank.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from .._core._canonical import ensure_valid_export
from .._core._config import _thread_count
from .._core._dtypes import native
from .._core._errors import InvariantError
from .._core._tensor import CompressedTensor, SparseTensor
from .._core._from_arrays import sparse_csr_tensor
from .._core._layout import sparse_csr
from ..ops.blas import matmul
from ._comm import agree, agreed_root, gatherv, same_on_every_rank, scatterv
from ._exchange import GhostExchange, check_mode
from ._partition import (_tensor, balanced_starts, check_row_pointers, check_starts, even_starts, local_csr,
                         split_blocks)

__all__ = ["DistCSR"]

_ASSEMBLE_HINT = "to add entries by global row from any rank, use sparsetensor.mpi.assemble(rows, cols, values, shape)"


def _complete(reqs) -> None:
    """Wait for the exchange of a product that raised, before its error leaves: MPI still writes
    into the buffers, and a kept request must be inactive for the next product."""
    try:
        MPI.Request.Waitall(reqs)
    except Exception:  # noqa: BLE001 (the product's error is the one to raise)
        pass


def _with_hint(e: InvariantError, hint: str) -> InvariantError:
    """``e`` with ``hint`` appended to its message (invariant, layout, batch and index kept)."""
    msg = str(e).removeprefix(f"{e.layout} invariant {e.invariant}: ")
    return InvariantError(e.invariant, e.layout, msg + hint, batch=e.batch, index=e.index)


def _as_csr(t) -> CompressedTensor:
    if not isinstance(t, SparseTensor):
        raise TypeError(f"expected a 2-d sparse tensor, got {type(t).__name__}")
    if t.ndim != 2 or t.batch_dim or t.dense_dim:
        raise ValueError(f"expected a 2-d sparse tensor without batch or dense dims, got a {t.layout.name} tensor "
                         f"of shape {tuple(t.shape)} (batch_dim={t.batch_dim}, dense_dim={t.dense_dim})")
    t = t.cpu()
    c = t if t.layout is sparse_csr else t.to_sparse_csr()
    # a checked part is checked again where the caller holds its arrays (its indices go on to the
    # split, MPI and PETSc); an unchecked one is checked as it is split, naming global rows
    return ensure_valid_export(c, private=False) if c.is_coalesced() else c


class DistCSR:
    """A sparse matrix distributed by rows over the ranks of an MPI communicator.

    Build one with :meth:`from_global` (a matrix on one rank), :meth:`from_local`
    (each rank's own rows), :func:`sparsetensor.mpi.assemble` (entries by global
    row from every rank) or :func:`sparsetensor.mpi.load` (each rank reads its
    rows of a file); every method that says *collective* must be called by every
    rank of ``comm``, in the same order.

    Vectors are distributed like the matrix: ``A @ x`` takes this rank's slice
    ``x[col_starts[r]:col_starts[r+1]]`` (1-d, or 2-d with ``N`` columns) and
    returns its rows ``y[row_starts[r]:row_starts[r+1]]``. A square matrix
    partitions its columns like its rows, so ``y`` can be fed back in (what
    :func:`sparsetensor.mpi.cg` does). A rectangular ``M x K`` matrix partitions
    its columns separately (``col_starts``, by default ``K`` split evenly by
    count): ``A @ x`` takes ``x`` by ``col_starts`` and returns ``y`` by
    ``row_starts``; :meth:`rmatvec` the other way round.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor.mpi import DistCSR
    >>> t = st.sparse_csr_tensor([0, 2, 3, 5], [0, 2, 1, 0, 2], [4.0, 1.0, 3.0, 1.0, 5.0])
    >>> A = DistCSR.from_global(t if MPI.COMM_WORLD.rank == 0 else None, comm=MPI.COMM_WORLD)
    >>> r0, r1 = A.row_range
    >>> y = A @ np.arange(3.0)[r0:r1]        # this rank's rows of t @ [0, 1, 2]
    >>> g = A.gather(y)                      # the whole vector on rank 0, None elsewhere
    >>> g if MPI.COMM_WORLD.rank == 0 else np.array([2., 3., 10.])
    array([ 2.,  3., 10.])
    """

    #: Block rows and columns of the local blocks: 1 here; :class:`DistBSR` stores ``r x c`` blocks, and
    #: then ``_ghosts``, ``_send_idx`` and the exchange plan count block columns (one message row per block).
    _br = _bc = 1
    _blocked = False

    @property
    def _comm(self):
        """The matrix's duplicate communicator; a freed matrix says so (MPI would refuse the null
        communicator on every rank, naming no matrix)."""
        c = self._own_comm
        if c == MPI.COMM_NULL:
            raise ValueError(f"this {type(self).__name__} was freed (free()); build it again to use it")
        return c

    @_comm.setter
    def _comm(self, comm) -> None:
        self._own_comm = comm

    # -- construction ---------------------------------------------------------------------
    def __init__(self, comm, shape, row_starts, col_starts, local, *, exchange="p2p", _internal=False):
        if not _internal:
            raise TypeError("build a DistCSR with DistCSR.from_global, DistCSR.from_local or sparsetensor.mpi.load")
        self._user_comm = comm
        self._comm = comm.Dup()  # our messages never meet the user's
        rank = comm.rank
        self._shape = (int(shape[0]), int(shape[1]))
        self._row_starts = row_starts
        self._col_starts = col_starts
        self._r0, self._r1 = int(row_starts[rank]), int(row_starts[rank + 1])
        self._c0, self._c1 = int(col_starts[rank]), int(col_starts[rank + 1])
        self._dtype = local.dtype
        self._index_dtype = local.index_dtype
        self._diag, self._offd, self._ghosts = split_blocks(local, self._c0 // self._bc, self._c1 // self._bc)
        self._offd_rows, self._offd_compact = self._compress_rows(self._offd)
        self._nnz = int(self._comm.allreduce(self.nnz_local))
        self._build_plan(exchange)
        self.reset_stats()

    @staticmethod
    def _compress_rows(offd):
        """(rows with ghost entries, the block restricted to them) when they are few, else (None, offd).

        Most rows of a mesh-like matrix touch no ghost: the off-diagonal product
        then runs over those rows only (PETSc's compressed rows), not over all of
        ``y``. The restricted block shares the column indices and values.
        """
        crow = offd.crow_indices()
        rows = np.flatnonzero(np.diff(crow))
        if 2 * rows.shape[0] > crow.shape[0] - 1:
            return None, offd
        cr = np.concatenate([crow[:1], crow[rows + 1]])
        b = sparse_csr_tensor(cr, offd.col_indices(), offd.values(), size=(rows.shape[0], offd.shape[1]),
                              check_invariants=False)
        b._canonical = offd.is_coalesced()  # the same rows, without the empty ones
        return rows, b

    def _build_plan(self, exchange):
        comm, size = self._comm, self._comm.size
        bc = self._bc
        cstarts, c0, c1 = self._col_starts // bc, self._c0 // bc, self._c1 // bc
        owner = np.searchsorted(cstarts, self._ghosts, side="right") - 1
        recv_counts = np.bincount(owner, minlength=size).astype(np.int64)
        send_counts = np.empty(size, dtype=np.int64)
        comm.Alltoall(recv_counts, send_counts)
        rdispl = np.concatenate([[0], np.cumsum(recv_counts)[:-1]]).astype(np.int64)
        sdispl = np.concatenate([[0], np.cumsum(send_counts)[:-1]]).astype(np.int64)
        wanted = np.empty(int(send_counts.sum()), dtype=np.int64)
        comm.Alltoallv([self._ghosts, recv_counts, rdispl, MPI.INT64_T], [wanted, send_counts, sdispl, MPI.INT64_T])
        self._send_idx = (wanted - c0).astype(np.intp)
        if self._send_idx.size and (self._send_idx.min() < 0 or self._send_idx.max() >= c1 - c0):
            raise RuntimeError("sparsetensor.mpi: a rank asked for entries another rank does not own (internal error)")
        self._recv_plan = [(q, int(rdispl[q]), int(recv_counts[q])) for q in range(size) if recv_counts[q]]
        self._send_plan = [(q, int(sdispl[q]), int(send_counts[q])) for q in range(size) if send_counts[q]]
        self._exchange = GhostExchange(comm, self._send_plan, self._recv_plan)
        self.set_exchange(exchange)

    @classmethod
    def _from_parts(cls, comm, shape, row_starts, col_starts, crow64, cols, vals, p0, canonical, exchange="p2p"):
        """Every rank: validate its rows (global columns), agree on errors, build."""
        rank = comm.rank
        r0 = int(row_starts[rank])
        local = agree(comm, local_csr, crow64, cols, vals, int(shape[1]), r0, p0, rank, canonical)
        return cls(comm, shape, row_starts, col_starts, local, exchange=exchange, _internal=True)

    def _with_blocks(self, diag: CompressedTensor, offd: CompressedTensor) -> DistCSR:
        """A matrix with this one's partitions, ghosts and plan, and the blocks ``diag``/``offd`` (collective).

        The blocks must have this matrix's patterns (new values, e.g. ``alpha * A``):
        nothing moves, the new matrix only gets its own duplicate communicator.
        """
        new = object.__new__(type(self))
        for name in ("_user_comm", "_shape", "_row_starts", "_col_starts", "_r0", "_r1", "_c0", "_c1",
                     "_index_dtype", "_ghosts", "_nnz", "_send_idx", "_recv_plan", "_send_plan", "_br", "_bc"):
            setattr(new, name, getattr(self, name))
        new._comm = self._user_comm.Dup()
        new._dtype = diag.dtype
        new._diag, new._offd = diag, offd
        new._offd_rows, new._offd_compact = self._compress_rows(offd)
        new._exchange = GhostExchange(new._comm, self._send_plan, self._recv_plan, self.exchange)
        new.reset_stats()
        return new

    @staticmethod
    def _col_starts(shape, row_starts, col_starts, size):
        if col_starts is not None:
            return check_starts(col_starts, shape[1], size, "col_starts")
        if shape[0] == shape[1]:
            return row_starts
        return even_starts(shape[1], size)

    @classmethod
    def from_global(cls, t, comm=None, root: int = 0, row_starts=None, col_starts=None, exchange: str = "p2p"):
        """Distribute a matrix held by rank ``root`` (collective).

        Parameters
        ----------
        t : SparseTensor or None
            On ``root``: any 2-d sparse tensor (converted to CSR there; the
            conversion of coo coalesces). Ignored on the other ranks (pass None).
        comm : mpi4py.MPI.Comm, optional
            Default ``MPI.COMM_WORLD``.
        root : int
        row_starts : sequence of int, optional
            ``size + 1`` row boundaries; by default rows are balanced by nnz
            (each row counting one more entry, so that empty rows spread too).
        col_starts : sequence of int, optional
            The column (input vector) partition; default: ``row_starts`` for a
            square matrix, an even split of the columns otherwise.
        exchange : {"p2p", "neighbor"}
            How products move ghost entries (see :meth:`set_exchange`).

        Every rank checks every invariant of its own rows; an error on any rank
        (or on ``root`` before the scatter) raises on every rank, naming the
        global row.
        """
        comm = MPI.COMM_WORLD if comm is None else comm
        size = comm.size
        # root's partition is scattered: another rank's would be ignored without a word
        root = agreed_root(comm, "from_global", root, row_starts=row_starts, col_starts=col_starts,
                           exchange=exchange)

        def prepare():
            c = _as_csr(t)
            crow = c.crow_indices()
            starts = (balanced_starts(crow, size) if row_starts is None
                      else check_starts(row_starts, c.shape[0], size, "row_starts"))
            check_row_pointers(crow, starts, c.nnz)
            cstarts = cls._col_starts(c.shape, starts, col_starts, size)
            at = crow[starts].astype(np.int64)
            meta = (c.shape, c.dtype, c.index_dtype, starts, cstarts, np.diff(at), at[:-1], c.is_coalesced())
            return c, meta

        c, meta = agree(comm, prepare) if comm.rank == root else agree(comm, lambda: (None, None))
        shape, dtype, idt, starts, cstarts, nnzs, p0s, canonical = comm.bcast(meta, root=root)
        rows = np.diff(starts)
        root_rows = np.diff(c.crow_indices().astype(np.int64)) if comm.rank == root else None
        counts = scatterv(comm, root_rows, rows, root, (), np.int64)
        cols = scatterv(comm, c.col_indices() if c is not None else None, nnzs, root, (), idt)
        vals = scatterv(comm, c.values() if c is not None else None, nnzs, root, (), dtype)
        crow64 = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=crow64[1:])
        return cls._from_parts(comm, shape, starts, cstarts, crow64, cols, vals, int(p0s[comm.rank]), canonical,
                               exchange)

    @classmethod
    def from_local(cls, t, comm=None, col_starts=None, exchange: str = "p2p", *, row_starts=None):
        """Build from each rank's own rows (collective): ``t`` is this rank's row block.

        ``t`` is a 2-d sparse tensor of shape ``(rows on this rank, ncols)`` with
        global column indices; rank ``r``'s rows follow rank ``r-1``'s. Every
        rank must pass the same ``ncols``. For entries by *global* row, computed
        on any rank (finite-element assembly), use :func:`sparsetensor.mpi.assemble`.

        Parameters
        ----------
        t : SparseTensor
            This rank's rows, numbered from 0.
        comm : mpi4py.MPI.Comm, optional
            Default ``MPI.COMM_WORLD``.
        col_starts : sequence of int, optional
            As for :meth:`from_global`.
        exchange : {"p2p", "neighbor"}
        row_starts : sequence of int, optional
            The ``size + 1`` row boundaries the parts must match: rank ``r``
            must pass ``row_starts[r+1] - row_starts[r]`` rows.

        Raises
        ------
        ValueError
            On every rank: when a part's row count is not its share of
            ``row_starts``; when, without ``row_starts``, every rank of two or
            more passes a square part of one shape ``(N, N)``: that is the
            global matrix on every rank, and stacking the parts would build a
            ``(size * N) x N`` matrix (pass ``row_starts`` to stack square
            blocks on purpose); when the ranks disagree on columns or dtypes.
        InvariantError
            When a part breaks an invariant; for out-of-range rows of a COO
            part the message points to :func:`sparsetensor.mpi.assemble`.
        """
        comm = MPI.COMM_WORLD if comm is None else comm
        rank, size = comm.rank, comm.size
        same_on_every_rank(comm, "from_local", col_starts=col_starts, exchange=exchange)

        def prepare():
            try:
                c = _as_csr(t)
            except InvariantError as e:
                raise _with_hint(e, f" (rank {rank}'s part of shape {tuple(t.shape)}; from_local takes this "
                                    f"rank's own rows numbered from 0: {_ASSEMBLE_HINT})") from None
            starts = None if row_starts is None else tuple(np.asarray(row_starts).tolist())
            return c, (c.shape[0], c.shape[1], c.dtype, c.index_dtype, starts)

        c, info = agree(comm, prepare)
        infos = comm.allgather(info)
        ncols = {i[1] for i in infos}
        dts = {(i[2], i[3]) for i in infos}
        if len(ncols) != 1 or len(dts) != 1:
            raise ValueError(f"from_local: every rank must pass the same number of columns, value dtype and index "
                             f"dtype; got {[(i[1], str(i[2]), str(i[3])) for i in infos]}")
        counts = [i[0] for i in infos]
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        shape = (int(starts[-1]), ncols.pop())
        # the checks below read only what every rank gathered: all ranks raise, or none
        if len({i[4] for i in infos}) != 1:
            raise ValueError(f"from_local: every rank must pass the same row_starts; got {[i[4] for i in infos]}")
        if row_starts is not None:
            want = check_starts(row_starts, int(np.asarray(row_starts)[-1]) if np.size(row_starts) else 0, size,
                                "row_starts")
            bad = [q for q in range(size) if counts[q] != want[q + 1] - want[q]]
            if bad:
                q = bad[0]
                raise ValueError(f"from_local: rank {q} passed a part of {counts[q]} rows, but row_starts gives it "
                                 f"{want[q + 1] - want[q]} (rows [{want[q]}, {want[q + 1]})); {_ASSEMBLE_HINT}")
        elif size > 1 and len(set(counts)) == 1 and counts[0] == shape[1] > 0:
            n = shape[1]
            raise ValueError(f"from_local: every rank passed a part of shape ({n}, {n}), as if each held the whole "
                             f"matrix; stacking them would build a {size * n} x {n} matrix. {_ASSEMBLE_HINT}; to "
                             f"stack {size} square blocks on purpose, pass row_starts")
        cstarts = agree(comm, cls._col_starts, shape, starts, col_starts, size)
        nnz = np.asarray(comm.allgather(c.nnz), dtype=np.int64)
        p0 = int(nnz[:rank].sum())
        crow64 = c.crow_indices().astype(np.int64)
        return cls._from_parts(comm, shape, starts, cstarts, crow64, c.col_indices(), c.values(), p0,
                               c.is_coalesced(), exchange)

    # -- attributes -----------------------------------------------------------------------
    @property
    def comm(self):
        """The communicator the matrix was built on (products run on a duplicate of it)."""
        return self._user_comm

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def index_dtype(self) -> np.dtype:
        return self._index_dtype

    @property
    def row_range(self) -> tuple:
        """``(first, last + 1)``: the global rows this rank owns."""
        return self._r0, self._r1

    @property
    def col_range(self) -> tuple:
        """``(first, last + 1)``: the entries of an input vector this rank holds."""
        return self._c0, self._c1

    @property
    def row_starts(self) -> np.ndarray:
        return self._row_starts.copy()

    @property
    def col_starts(self) -> np.ndarray:
        return self._col_starts.copy()

    @property
    def nnz_local(self) -> int:
        """Entries stored on this rank (both blocks)."""
        return self._diag.nnz + self._offd.nnz

    @property
    def nnz(self) -> int:
        """Entries of the whole matrix."""
        return self._nnz

    @property
    def diag_block(self) -> CompressedTensor:
        """This rank's rows x owned columns (local column numbers), a CSR tensor."""
        return self._diag

    @property
    def offdiag_block(self) -> CompressedTensor:
        """This rank's rows x ghost columns (positions in :attr:`ghosts`), a CSR tensor."""
        return self._offd

    @property
    def ghosts(self) -> np.ndarray:
        """The sorted global columns outside this rank's range that its rows touch."""
        return self._ghosts

    def __repr__(self):
        return (f"DistCSR(shape={self._shape}, nnz={self._nnz}, dtype={self._dtype}, ranks={self._comm.size}, "
                f"rank {self._comm.rank}: rows {self.row_range}, nnz_local={self.nnz_local}, "
                f"ghosts={self._ghosts.shape[0]})")

    # -- products -------------------------------------------------------------------------
    def _check_operand(self, x, n: int, op: str, what: str, check: bool, matrix_ok: bool = False,
                       threads=None, ndim=(1, 2)):
        """``x`` as an array of ``n`` rows and ``ndim`` dims, agreed over the ranks (with ``check``); a
        DistCSR where ``matrix_ok``. ``threads`` is checked in the same agreement: a product that
        raised after its exchange began would leave the other ranks' products going on.

        ``A @ B`` (``matrix_ok``) joins the same allreduce as ``A @ x``, so that ranks passing a
        matrix and ranks passing an array raise together instead of entering different collectives.
        """
        bad, kind = "", ValueError
        if threads is not None:
            try:
                _thread_count(threads)
            except (TypeError, ValueError) as e:
                bad, kind = f"{op}: rank {self._comm.rank}: {e}", type(e)
        if isinstance(x, DistCSR):
            if not matrix_ok:
                kind = ValueError
                bad = f"{op}: rank {self._comm.rank} got a DistCSR; multiply two distributed matrices with A @ B"
            ncol, num = -2, x.dtype.num
        elif isinstance(x, SparseTensor):
            kind = ValueError
            bad = (f"{op}: rank {self._comm.rank} got a local {x.layout.name} tensor of shape {tuple(x.shape)}; "
                   f"A @ B needs B distributed (DistCSR.from_local, DistCSR.from_global or assemble), A @ x "
                   f"this rank's slice of a NumPy vector or block")
            ncol, num = -1, 0
        else:
            x = native(np.asarray(x))  # ghost entries travel as bytes: in this machine's order
            if x.ndim not in ndim or x.shape[0] != n:
                dims = "1-d, or 2-d with N columns" if len(ndim) == 2 else "2-d with N columns"
                bad = bad or f"{op}: rank {self._comm.rank} expects {what} of {n} rows ({dims}), got shape {x.shape}"
            elif x.dtype.kind not in "biufc" and not bad:
                bad, kind = f"{op}: rank {self._comm.rank} got {what} of dtype {x.dtype}, not numbers", TypeError
            # by the dtype's name: int64 spelt 'l' on one rank and 'q' on another is one dtype
            ncol, num = (x.shape[1] if x.ndim == 2 else -1), np.dtype(x.dtype.str).num
        if not check:
            if bad:
                raise kind(bad)
            return x
        comm, size = self._comm, self._comm.size
        # one allreduce: the first bad rank, and whether the column counts (-2: a matrix) and dtypes agree
        v = np.array([size - comm.rank if bad else 0, ncol, -ncol, num, -num], dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, v, op=MPI.MAX)
        if v[0]:
            src = size - int(v[0])
            kind, bad = comm.bcast((kind, bad) if comm.rank == src else None, root=src)
            raise kind(bad)
        if v[1] != -v[2]:
            raise ValueError(f"{op}: the operand has different shapes on different ranks (1-d on some, different "
                             f"column counts, or a DistCSR on some); this rank: "
                             f"{'a DistCSR' if ncol == -2 else x.shape}")
        if v[3] != -v[4]:
            raise TypeError(f"{op}: the operand has different dtypes on different ranks; this rank: {x.dtype}")
        return x

    @property
    def exchange(self) -> str:
        """How products move ghost entries: ``"p2p"`` or ``"neighbor"`` (see :meth:`set_exchange`)."""
        return self._exchange.mode

    def set_exchange(self, mode: str) -> None:
        """Choose how products move ghost entries (collective; every rank passes the same ``mode``).

        ``"p2p"``: one non-blocking send and receive per neighbour rank (the default);
        ``"neighbor"``: one ``MPI_Ineighbor_alltoallv`` on a distributed-graph
        communicator built from the plan's neighbours (created here, once). Both
        overlap the exchange with the diagonal block's product and move the same bytes.
        """
        agree(self._comm, check_mode, mode)
        modes = self._comm.allgather(mode)
        if len(set(modes)) != 1:
            raise ValueError(f"set_exchange: every rank must pass the same mode, got {modes} (by rank)")
        self._exchange.set_mode(mode)

    def _record(self, kind, send, recv, t_comm, t_total):
        s = self._stats
        s["products"] += 1
        s["bytes_sent"] += send.nbytes
        s["bytes_received"] += recv.nbytes
        s["seconds"] += t_total
        s["seconds_communication"] += t_comm
        # the dtype object: its name is made in comm_stats, not in every product
        self._last = {"kind": kind, "dtype": recv.dtype, "columns": 1 if recv.ndim == 1 else recv.shape[1],
                      "bytes_sent": int(send.nbytes), "bytes_received": int(recv.nbytes),
                      "messages_sent": len(self._send_plan if kind == "matvec" else self._recv_plan),
                      "messages_received": len(self._recv_plan if kind == "matvec" else self._send_plan)}

    def matvec(self, x, *, threads: int | None = None, check: bool = True) -> np.ndarray:
        """``A @ x`` for this rank's slice ``x`` of a vector or dense block (collective).

        ``x``: shape ``(c1 - c0,)`` or ``(c1 - c0, N)`` with ``(c0, c1) = col_range``;
        returns this rank's rows, shape ``(r1 - r0,)`` or ``(r1 - r0, N)``, of dtype
        ``np.result_type(A.dtype, x.dtype)``. ``threads``: for the local kernels.

        ``check=True`` agrees on the operand's shape and dtype over all ranks (one
        small allreduce) so that a wrong operand on one rank raises ``ValueError``
        on every rank instead of hanging the others; ``check=False`` skips it
        (for loops whose operands are known right; a wrong one then raises on its
        rank only).
        """
        return self._matvec(x, threads, check, (1, 2), f"{type(self).__name__} @ x")

    def _matvec(self, x, threads, check: bool, ndim: tuple, op: str) -> np.ndarray:
        x = self._check_operand(x, self._c1 - self._c0, op, "x", check, threads=threads, ndim=ndim)
        t0 = time.perf_counter()
        xb = x if self._bc == 1 else x.reshape((-1, self._bc) + x.shape[1:])  # one message row per block column
        kept = self._exchange.persistent(x.dtype, xb.shape[1:]) if x.ndim == 1 else None
        if kept is not None:  # a vector: the kept buffers and requests, started in one call
            send, recv, reqs = kept
            np.take(xb, self._send_idx, axis=0, out=send)
            MPI.Prequest.Startall(reqs)
        else:
            recv = np.empty((self._ghosts.shape[0],) + xb.shape[1:], dtype=x.dtype)
            send = np.take(xb, self._send_idx, axis=0)
            reqs = self._exchange.post(send, recv)
        t1 = time.perf_counter()
        try:
            if send.nbytes + recv.nbytes > self.progress_threshold and self._diag.shape[0] > 1:
                y, t_test = self._diag_product_with_progress(x, reqs, threads)
                t1 -= t_test  # time in MPI_Testall counts as communication
            else:
                y = matmul(self._diag, x, threads=threads)
        except BaseException:
            _complete(reqs)
            raise
        t2 = time.perf_counter()
        MPI.Request.Waitall(reqs)
        t3 = time.perf_counter()
        if self._offd_rows is not None:
            if self._offd_rows.shape[0]:  # no rows with ghost entries (one rank): no call at all
                y[self._offd_rows] += matmul(self._offd_compact, recv, threads=threads)
        elif self._offd.nnz:
            y += matmul(self._offd, recv if self._bc == 1 else recv.reshape((-1,) + x.shape[1:]), threads=threads)
        self._record("matvec", send, recv, (t1 - t0) + (t3 - t2), time.perf_counter() - t0)
        return y

    #: Exchanges of more bytes than this (sent + received, this rank) cut the diagonal
    #: product into :attr:`progress_chunks` row ranges with an ``MPI_Testall`` between
    #: them: MPI libraries without a progress thread move large (rendezvous) messages
    #: only inside MPI calls, so without these calls they would wait for ``Waitall``.
    #: The chunks cost a copy of their results; on one node (shared memory) that did not
    #: pay for itself at 0.6 MB exchanged, hence a high default. Set it per matrix.
    progress_threshold = 1 << 22
    progress_chunks = 8

    def _diag_product_with_progress(self, x, reqs, threads):
        """The diagonal block's product in row chunks (balanced by nnz), driving MPI progress between them."""
        k = max(1, min(int(self.progress_chunks), self._diag.shape[0]))
        if getattr(self, "_chunks", (None,))[0] != k:
            crow = self._diag.crow_indices()
            bounds = balanced_starts(crow, k)
            parts = []
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                if b > a:
                    cr = crow[a:b + 1] - crow[a]
                    lo, hi = int(crow[a]), int(crow[b])
                    part = sparse_csr_tensor(cr, self._diag.col_indices()[lo:hi], self._diag.values()[lo:hi],
                                             size=(b - a, self._diag.shape[1]), check_invariants=False)
                    part._canonical = self._diag.is_coalesced()  # rows of a checked block
                    parts.append((a, b, part))
            self._chunks = (k, parts)
        y = None
        t_test = 0.0
        for a, b, part in self._chunks[1]:
            r = matmul(part, x, threads=threads)
            if y is None:
                y = np.empty((self._diag.shape[0],) + r.shape[1:], dtype=r.dtype)
            y[a:b] = r
            t0 = time.perf_counter()
            MPI.Request.Testall(reqs)
            t_test += time.perf_counter() - t0
        return y, t_test

    def matmat(self, X, *, threads: int | None = None, check: bool = True) -> np.ndarray:
        """``A @ X`` for a dense block ``X`` (2-d); see :meth:`matvec`."""
        return self._matvec(X, threads, check, (2,), f"{type(self).__name__}.matmat")

    def rmatvec(self, x, *, adjoint: bool = False, threads: int | None = None, check: bool = True) -> np.ndarray:
        """``A^T x`` (``A^H x`` with ``adjoint=True``), collective.

        ``x`` is distributed like the rows of ``A`` (this rank's ``row_range``
        slice, 1-d or 2-d); the result like its columns (``col_range``). The
        off-diagonal block's contributions travel back to the ranks owning those
        columns along the same plan as :meth:`matvec`, reversed: the same bytes.
        """
        x = self._check_operand(x, self._r1 - self._r0, f"{type(self).__name__}.rmatvec", "x", check,
                                threads=threads)
        if adjoint:
            x = np.conj(x)
        t0 = time.perf_counter()
        if self._offd_rows is not None:
            g = matmul(self._offd_compact.mT, np.take(x, self._offd_rows, axis=0), threads=threads)
        else:
            g = matmul(self._offd.mT, x, threads=threads)
        g = np.ascontiguousarray(g)
        if self._bc != 1:
            g = g.reshape((-1, self._bc) + g.shape[1:])
        recv = np.empty((self._send_idx.shape[0],) + g.shape[1:], dtype=g.dtype)
        reqs = self._exchange.post(g, recv, reverse=True)
        t1 = time.perf_counter()
        try:
            z = matmul(self._diag.mT, x, threads=threads)
            z = np.ascontiguousarray(z, dtype=np.result_type(z.dtype, g.dtype))
        except BaseException:
            _complete(reqs)
            raise
        t2 = time.perf_counter()
        MPI.Request.Waitall(reqs)
        t3 = time.perf_counter()
        zb = z if self._bc == 1 else z.reshape((-1, self._bc) + z.shape[1:])
        for _, o, c in self._send_plan:  # distinct indices within one neighbour's part
            zb[self._send_idx[o:o + c]] += recv[o:o + c]
        self._record("rmatvec", g, recv, (t1 - t0) + (t3 - t2), time.perf_counter() - t0)
        return np.conj(z) if adjoint else z

    def diagonal(self) -> np.ndarray:
        """This rank's part of the main diagonal (rows ``row_range``), e.g. for a Jacobi preconditioner."""
        n = self._r1 - self._r0
        d = np.zeros(n, dtype=self._dtype)
        # both blocks: where the columns are split unlike the rows, a diagonal entry can be a ghost
        for block, cols in ((self._diag, self._diag.col_indices().astype(np.int64) + self._c0),
                            (self._offd, self._ghosts[self._offd.col_indices()])):
            rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(block.crow_indices()))
            hit = cols == rows + self._r0
            d[rows[hit]] = block.values()[hit]
        return d

    # -- statistics -----------------------------------------------------------------------
    def reset_stats(self) -> None:
        """Zero the product counters of :meth:`comm_stats` (this rank)."""
        self._stats = {"products": 0, "bytes_sent": 0, "bytes_received": 0, "seconds": 0.0,
                       "seconds_communication": 0.0}
        self._last = None

    def comm_stats(self) -> dict:
        """Communication figures of every rank (collective; every rank gets the same dict).

        Keys: ``exchange`` (the mode, see :meth:`set_exchange`), ``ghosts_per_rank``
        (ghost entries of x each rank receives per product and vector column), ``send_entries_per_rank`` (entries each rank
        sends), ``neighbours_per_rank`` (ranks each receives from),
        ``messages_per_product`` (messages each rank sends per product),
        ``bytes_sent_per_product`` / ``bytes_received_per_product`` (of each
        rank's last product; ``None`` before the first), ``last_product`` (its
        kind, dtype and column count per rank) and the totals since
        :meth:`reset_stats`: ``products``, ``bytes_sent``, ``bytes_received``,
        ``seconds`` and ``seconds_communication`` (time posting the exchange and
        waiting for it, not hidden behind the diagonal block) per rank. For a
        float64 matvec with ``N`` columns, ``bytes_received_per_product[r] ==
        8 * N * ghosts_per_rank[r]``: every ghost value is sent once.
        """
        mine = dict(self._stats, ghosts=int(self._ghosts.shape[0]), send_entries=int(self._send_idx.shape[0]),
                    neighbours=[q for q, _, _ in self._recv_plan], messages=len(self._send_plan),
                    last=None if self._last is None else dict(self._last, dtype=str(self._last["dtype"])))
        every = self._comm.allgather(mine)
        out = {"ranks": self._comm.size, "exchange": self.exchange,
               "ghosts_per_rank": [m["ghosts"] for m in every],
               "send_entries_per_rank": [m["send_entries"] for m in every],
               "neighbours_per_rank": [m["neighbours"] for m in every],
               "messages_per_product": [m["messages"] for m in every],
               "bytes_sent_per_product": [m["last"] and m["last"]["bytes_sent"] for m in every],
               "bytes_received_per_product": [m["last"] and m["last"]["bytes_received"] for m in every],
               "last_product": [m["last"] and {k: m["last"][k] for k in ("kind", "dtype", "columns")} for m in every]}
        for key in ("products", "bytes_sent", "bytes_received", "seconds", "seconds_communication"):
            out[key] = [m[key] for m in every]
        return out

    # -- moving vectors and the matrix ----------------------------------------------------
    def _starts(self, part: str) -> np.ndarray:
        if part not in ("rows", "cols"):
            raise ValueError(f"part must be 'rows' or 'cols', got {part!r}")
        return self._row_starts if part == "rows" else self._col_starts

    def gather(self, y, root: int = 0, part: str = "rows"):
        """The whole vector (or block) on ``root`` from every rank's slice; None elsewhere (collective).

        ``part="rows"``: slices like :meth:`matvec`'s result (the default);
        ``"cols"``: like its input (or :meth:`rmatvec`'s result).
        """
        root = agreed_root(self._comm, "gather", root, part=part)
        starts = self._starts(part)
        n = int(starts[self._comm.rank + 1] - starts[self._comm.rank])

        def check():
            a = np.asarray(y)
            if a.ndim not in (1, 2) or a.shape[0] != n:
                raise ValueError(f"gather: rank {self._comm.rank} expects {n} rows, got shape {a.shape}")
            return native(a)  # slices travel as bytes: in this machine's order, as the products take them

        a = agree(self._comm, check)
        kinds = self._comm.allgather((a.shape[1:], a.dtype.str))
        if len(set(kinds)) != 1:
            raise ValueError(f"gather: the slices differ in trailing shape or dtype across ranks: {kinds}")
        return gatherv(self._comm, a, root, a.shape[1:], a.dtype)

    def scatter(self, v, root: int = 0, part: str = "rows") -> np.ndarray:
        """This rank's slice of a vector (or block) held by ``root`` (collective); inverse of :meth:`gather`.

        ``part="cols"`` gives the slices :meth:`matvec` takes (the same as
        ``"rows"`` for a square matrix).
        """
        root = agreed_root(self._comm, "scatter", root, part=part)
        starts = self._starts(part)

        def check():
            a = np.asarray(v)
            if a.ndim not in (1, 2) or a.shape[0] != starts[-1]:
                raise ValueError(f"scatter: expected {starts[-1]} rows (1-d or 2-d), got shape {a.shape}")
            return a, (a.shape[1:], a.dtype)

        a, kind = agree(self._comm, check) if self._comm.rank == root else agree(self._comm, lambda: (None, None))
        tail, dtype = self._comm.bcast(kind, root=root)
        return scatterv(self._comm, a, np.diff(starts), root, tail, dtype)

    def _blocksize(self):
        """None here; ``(r, c)`` for :class:`DistBSR`, whose local tensors count block rows and columns."""
        return (self._br, self._bc) if self._blocked else None

    def local_rows(self, copy: bool = False) -> CompressedTensor:
        """This rank's rows as one CSR tensor with global column indices (sorted within rows).

        For a :class:`DistBSR`: its block rows as one BSR tensor with global block columns.
        """
        n = (self._r1 - self._r0) // self._br
        d, o = self._diag, self._offd
        rows = np.concatenate([np.repeat(np.arange(n, dtype=np.int64), np.diff(d.crow_indices())),
                               np.repeat(np.arange(n, dtype=np.int64), np.diff(o.crow_indices()))])
        cols = np.concatenate([d.col_indices().astype(np.int64) + self._c0 // self._bc, self._ghosts[o.col_indices()]])
        vals = np.concatenate([d.values(), o.values()])
        order = np.lexsort((cols, rows))
        crow = np.zeros(n + 1, dtype=self._index_dtype)
        np.cumsum(np.bincount(rows, minlength=n), out=crow[1:])
        return _tensor(crow, cols[order].astype(self._index_dtype), vals[order], n, self._shape[1] // self._bc,
                       self._blocksize())

    def to_global(self, root: int = 0):
        """The whole matrix as a CSR tensor on ``root`` (None elsewhere), collective; checked.

        For a :class:`DistBSR`: a BSR tensor of its block size.
        """
        root = agreed_root(self._comm, "to_global", root)
        t = self.local_rows()
        tail = tuple(t.values().shape[1:])
        counts = gatherv(self._comm, np.diff(t.crow_indices()).astype(np.int64), root, (), np.int64)
        cols = gatherv(self._comm, t.col_indices(), root, (), self._index_dtype)
        vals = gatherv(self._comm, t.values(), root, tail, self._dtype)
        if self._comm.rank != root:
            return None
        nb = self._shape[0] // self._br
        crow = np.zeros(nb + 1, dtype=self._index_dtype)
        np.cumsum(counts, out=crow[1:])
        return _tensor(crow, cols, vals, nb, self._shape[1] // self._bc, self._blocksize(), check=True)

    def free(self) -> None:
        """Release the matrix's duplicate communicator (collective); the matrix is unusable afterwards."""
        if self._own_comm != MPI.COMM_NULL:
            self._exchange.free()
            self._own_comm.Free()

