"""``DistBSR``: a block-row matrix spread over MPI ranks (PETSc's MPIBAIJ model), on :class:`DistCSR`'s machinery.

Rank ``r`` owns the rows ``[row_starts[r], row_starts[r+1])`` and the input-vector entries
``[col_starts[r], col_starts[r+1])``, both multiples of the block size ``(br, bc)``. Its
rows are two of our local BSR tensors, like :class:`DistCSR`'s two CSR blocks: the
diagonal block (owned block columns, numbered from 0) and the off-diagonal block (ghost
block columns, numbered by their position in the sorted ghost list). The ghost exchange
is :class:`DistCSR`'s, counted in block columns: each ghost block column moves ``bc``
entries in one message row, so the bytes per product are ``itemsize x bc x ghosts``.

Products, gathers, the Krylov methods, the operator wrapper and ``alpha * A`` run
through :class:`DistCSR`'s code (its block factors ``_br``/``_bc`` are 1 there). The ops
that change the pattern (``zero_rows``, ``A + B``, ``A.T``, ``A @ B``) go through the
point form (:meth:`DistBSR.to_csr`) and back; they are in :mod:`._bsr_ops`, bound by :mod:`._methods`.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._core._tensor import SparseTensor
from ..ops.blas import matmul
from ._comm import agree, agreed_root, same_on_every_rank, scatterv
from ._matrix import DistCSR
from ._partition import balanced_starts, check_row_pointers, check_starts, even_starts, local_csr

__all__ = ["DistBSR"]


def _blocksize(blocksize, where: str) -> tuple:
    try:
        r, c = (int(b) for b in blocksize)
        ok = r >= 1 and c >= 1 and (r, c) == tuple(blocksize)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{where}: blocksize must be two positive integers (r, c), got {blocksize!r}")
    return r, c


def _as_bsr(t, blocksize, where: str):
    """``t`` (a 2-d sparse tensor) as a BSR tensor of ``blocksize`` (or its own, for a BSR ``t``)."""
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{where}: expected a 2-d sparse tensor, got {type(t).__name__}")
    if t.ndim != 2 or t.batch_dim or t.dense_dim:
        raise ValueError(f"{where}: expected a 2-d sparse tensor without batch or dense dims, got a {t.layout.name} "
                         f"tensor of shape {tuple(t.shape)}")
    t = t.cpu()
    if t.layout.name == "bsr" and (blocksize is None or tuple(t.blocksize) == tuple(blocksize)):
        return t
    if blocksize is None:
        raise ValueError(f"{where}: a {t.layout.name} tensor needs blocksize=(r, c)")
    r, c = _blocksize(blocksize, where)
    if t.shape[0] % r or t.shape[1] % c:
        raise ValueError(f"{where}: shape {tuple(t.shape)} is not a whole number of ({r}, {c}) blocks")
    return (t if t.layout.name == "csr" else t.to_sparse_csr()).to_sparse_bsr((r, c))


def _block_starts(starts, n: int, k: int, size: int, name: str) -> np.ndarray:
    """A user's partition of ``n`` rows (or columns), checked to cut only between blocks of ``k``."""
    s = check_starts(starts, n, size, name)
    if np.any(s % k):
        raise ValueError(f"{name} must be multiples of the block size {k} (ranks own whole blocks); got {s.tolist()}")
    return s


def _default_col_starts(shape, blocksize, row_starts, col_starts, size):
    r, c = blocksize
    if col_starts is not None:
        return _block_starts(col_starts, shape[1], c, size, "col_starts")
    if shape[0] == shape[1] and r == c:
        return row_starts
    return even_starts(shape[1] // c, size) * c


class DistBSR(DistCSR):
    """A block-row sparse matrix distributed over the ranks of an MPI communicator (PETSc's MPIBAIJ).

    Everything a :class:`DistCSR` does, with each rank's rows held as two BSR tensors of
    ``r x c`` blocks (:attr:`diag_block`, :attr:`offdiag_block`; :attr:`ghosts` are global
    *block* columns). Rows and vectors are split as for :class:`DistCSR` (:attr:`row_starts`,
    :attr:`col_starts`, :attr:`shape` count entries, not blocks), in multiples of the block
    size. :attr:`nnz` and :attr:`nnz_local` count stored *blocks*, as our local BSR tensors do.

    Build one with :meth:`from_global`, :meth:`from_local`, :meth:`from_csr` (a
    :class:`DistCSR` cut into blocks), :func:`sparsetensor.mpi.assemble` with
    ``block=(r, c)``, :func:`sparsetensor.mpi.load` of a saved DistBSR, or
    :meth:`from_petsc` (a BAIJ ``Mat``). Non-square blocks are supported everywhere
    except :meth:`to_petsc` (PETSc's BAIJ has square blocks) and :meth:`diagonal_blocks`.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor.mpi import DistBSR
    >>> dense = np.array([[4.0, 1, 0, 0], [1, 4, 0, 2], [0, 0, 4, 1], [0, 2, 1, 4]])
    >>> A = DistBSR.from_global(st.from_dense(dense) if MPI.COMM_WORLD.rank == 0 else None, blocksize=(2, 2))
    >>> A.blocksize, A.nnz
    ((2, 2), 4)
    >>> r0, r1 = A.row_range
    >>> y = A @ np.ones(4)[r0:r1]
    >>> bool(np.array_equal(y, (dense @ np.ones(4))[r0:r1]))
    True
    """

    _blocked = True

    def __init__(self, comm, shape, row_starts, col_starts, local, *, exchange="p2p", _internal=False):
        if not _internal:
            raise TypeError("build a DistBSR with DistBSR.from_global, DistBSR.from_local, DistBSR.from_csr, "
                            "sparsetensor.mpi.assemble(..., block=(r, c)) or sparsetensor.mpi.load")
        self._br, self._bc = (int(b) for b in local.blocksize)
        super().__init__(comm, shape, row_starts, col_starts, local, exchange=exchange, _internal=True)

    @staticmethod
    def _compress_rows(offd):
        # the off-diagonal product runs over every block row (no compressed-row form of a BSR block)
        return None, offd

    def _diag_product_with_progress(self, x, reqs, threads):
        # one product of the whole diagonal block; MPI progress is driven only by Waitall
        return matmul(self._diag, x, threads=threads), 0.0

    @classmethod
    def _from_block_parts(cls, comm, shape, blocksize, row_starts, col_starts, crow64, cols, vals, p0, canonical,
                          exchange="p2p"):
        """Every rank: validate its block rows (global block columns), agree on errors, build."""
        rank = comm.rank
        r, c = blocksize
        local = agree(comm, local_csr, crow64, cols, vals, int(shape[1]) // c, int(row_starts[rank]) // r, p0, rank,
                      canonical, blocksize)
        return cls(comm, shape, row_starts, col_starts, local, exchange=exchange, _internal=True)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_global(cls, t, comm=None, root: int = 0, row_starts=None, col_starts=None, exchange: str = "p2p", *,
                    blocksize=None):
        """Distribute a matrix held by rank ``root`` (collective).

        ``t`` on ``root``: a BSR tensor (its block size is used unless ``blocksize`` says
        otherwise), or any 2-d sparse tensor with ``blocksize=(r, c)`` (converted there: the
        blocks holding any stored entry are stored whole). Ignored elsewhere. ``row_starts``
        (default: block rows balanced by stored blocks) and ``col_starts`` (default: the row
        split for a square matrix of square blocks, else an even split of the block columns)
        must be multiples of ``r`` and ``c``. Errors raise on every rank, as for
        :meth:`DistCSR.from_global`.
        """
        comm = MPI.COMM_WORLD if comm is None else comm
        size = comm.size
        # root's partition and block size are scattered: another rank's would be ignored without a word
        root = agreed_root(comm, "DistBSR.from_global", root, row_starts=row_starts, col_starts=col_starts,
                           exchange=exchange, blocksize=blocksize)

        def prepare():
            b = _as_bsr(t, blocksize, "DistBSR.from_global")
            r, c = b.blocksize
            crow = b.crow_indices()
            starts_b = (balanced_starts(crow, size) if row_starts is None
                        else _block_starts(row_starts, b.shape[0], r, size, "row_starts") // r)
            check_row_pointers(crow, starts_b, b.nnz)
            cstarts = _default_col_starts(b.shape, (r, c), starts_b * r, col_starts, size)
            at = crow[starts_b].astype(np.int64)
            meta = (tuple(b.shape), (r, c), b.dtype, b.index_dtype, starts_b * r, cstarts, np.diff(at), at[:-1],
                    b.is_coalesced())
            return b, meta

        b, meta = agree(comm, prepare) if comm.rank == root else agree(comm, lambda: (None, None))
        shape, bs, dtype, idt, starts, cstarts, nnzs, p0s, canonical = comm.bcast(meta, root=root)
        rows = np.diff(starts) // bs[0]
        root_rows = np.diff(b.crow_indices().astype(np.int64)) if comm.rank == root else None
        counts = scatterv(comm, root_rows, rows, root, (), np.int64)
        cols = scatterv(comm, b.col_indices() if b is not None else None, nnzs, root, (), idt)
        vals = scatterv(comm, b.values() if b is not None else None, nnzs, root, bs, dtype)
        crow64 = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=crow64[1:])
        return cls._from_block_parts(comm, shape, bs, starts, cstarts, crow64, cols, vals, int(p0s[comm.rank]),
                                     canonical, exchange)

    @classmethod
    def from_local(cls, t, comm=None, col_starts=None, exchange: str = "p2p", *, row_starts=None, blocksize=None):
        """Build from each rank's own rows (collective): ``t`` is this rank's block rows, global columns.

        ``t``: a BSR tensor of shape ``(rows on this rank, ncols)`` (or any 2-d sparse tensor
        with ``blocksize``); rank ``r``'s rows follow rank ``r-1``'s; every rank passes the
        same ``ncols``, block size and dtypes. ``row_starts``: the partition the parts must
        match. Entries by global row from any rank: :func:`sparsetensor.mpi.assemble` with
        ``block=(r, c)``.
        """
        comm = MPI.COMM_WORLD if comm is None else comm
        rank, size = comm.rank, comm.size

        def prepare():
            b = _as_bsr(t, blocksize, f"DistBSR.from_local (rank {rank})")
            return b, (b.shape[0], b.shape[1], tuple(b.blocksize), b.dtype, b.index_dtype)

        b, info = agree(comm, prepare)
        infos = comm.allgather(info)
        if len({i[1:] for i in infos}) != 1:
            raise ValueError(f"DistBSR.from_local: every rank must pass the same number of columns, block size, value "
                             f"dtype and index dtype; got {[(i[1], i[2], str(i[3]), str(i[4])) for i in infos]}")
        bs = infos[0][2]
        starts = np.concatenate([[0], np.cumsum([i[0] for i in infos])]).astype(np.int64)
        shape = (int(starts[-1]), infos[0][1])

        def partitions():
            if row_starts is not None:
                want = _block_starts(row_starts, shape[0], bs[0], size, "row_starts")
                if not np.array_equal(want, starts):
                    raise ValueError(f"DistBSR.from_local: the parts' rows {np.diff(starts).tolist()} (by rank) do not "
                                     f"match row_starts {want.tolist()}")
            return _default_col_starts(shape, bs, starts, col_starts, size)

        cstarts = agree(comm, partitions)
        p0 = int(comm.exscan(b.nnz) or 0)
        return cls._from_block_parts(comm, shape, bs, starts, cstarts, b.crow_indices().astype(np.int64),
                                     b.col_indices(), b.values(), p0, b.is_coalesced(), exchange)

    @classmethod
    def from_csr(cls, A: DistCSR, blocksize) -> DistBSR:
        """``A`` (a :class:`DistCSR`) cut into ``r x c`` blocks, with its partitions (collective).

        Every block holding a stored entry of ``A`` is stored whole (explicit zeros fill it).
        ``A.row_starts`` and ``A.col_starts`` must be multiples of ``r`` and ``c``.
        """
        comm = A._comm
        same_on_every_rank(comm, "DistBSR.from_csr", blocksize=blocksize)  # the products assume one block size

        def local():
            r, c = _blocksize(blocksize, "DistBSR.from_csr")
            if A.shape[0] % r or A.shape[1] % c:
                raise ValueError(f"DistBSR.from_csr: shape {A.shape} is not a whole number of ({r}, {c}) blocks")
            for name, s, k in (("row_starts", A._row_starts, r), ("col_starts", A._col_starts, c)):
                if np.any(s % k):
                    raise ValueError(f"DistBSR.from_csr: the matrix's {name} {s.tolist()} are not multiples of the "
                                     f"block size {k}; rebuild it with block-aligned {name}")
            return A.local_rows().to_sparse_bsr((r, c))

        b = agree(comm, local)
        return cls(A.comm, A.shape, A._row_starts, A._col_starts, b, exchange=A.exchange, _internal=True)

    def to_csr(self) -> DistCSR:
        """This matrix as a :class:`DistCSR` with the same partitions (collective; every entry of
        every stored block, explicit zeros included)."""
        t = self.local_rows().to_sparse_csr()
        p0 = int(self._comm.exscan(t.nnz) or 0)
        return DistCSR._from_parts(self.comm, self._shape, self._row_starts, self._col_starts,
                                   t.crow_indices().astype(np.int64), t.col_indices(), t.values(), p0, True,
                                   self.exchange)

    # -- attributes -----------------------------------------------------------------------
    @property
    def blocksize(self) -> tuple:
        """``(r, c)``: the rows and columns of one block."""
        return self._br, self._bc

    @property
    def diag_block(self):
        """This rank's block rows x owned block columns (local numbering), a BSR tensor."""
        return self._diag

    @property
    def offdiag_block(self):
        """This rank's block rows x ghost block columns (positions in :attr:`ghosts`), a BSR tensor."""
        return self._offd

    @property
    def ghosts(self) -> np.ndarray:
        """The sorted global *block* columns outside this rank's range that its rows touch."""
        return self._ghosts

    def __repr__(self):
        return (f"DistBSR(shape={self._shape}, blocksize={self.blocksize}, nnz={self._nnz} blocks, "
                f"dtype={self._dtype}, ranks={self._comm.size}, rank {self._comm.rank}: rows {self.row_range}, "
                f"nnz_local={self.nnz_local}, ghosts={self._ghosts.shape[0]})")

    # -- diagonals ------------------------------------------------------------------------
    def diagonal(self) -> np.ndarray:
        """This rank's part of the main (point) diagonal, rows ``row_range``; what :func:`jacobi` inverts."""
        n = self._r1 - self._r0
        d = np.zeros(n, dtype=self._dtype)
        r, c = self.blocksize
        crow, cols, vals = self._diag.crow_indices(), self._diag.col_indices(), self._diag.values()
        brow = np.repeat(np.arange(n // r, dtype=np.int64), np.diff(crow))
        # entry (i, j) of block (I, J) is on the diagonal when r0 + I r + i == c0 + J c + j
        row = brow[:, None] * r + np.arange(r)                       # (blocks, r): local rows
        j = self._r0 + row - self._c0 - cols.astype(np.int64)[:, None] * c
        k, i = np.nonzero((j >= 0) & (j < c))
        d[row[k, i]] = vals[k, i, j[k, i]]
        return d

    def diagonal_blocks(self) -> np.ndarray:
        """This rank's ``r x r`` diagonal blocks, shape ``(block rows, r, r)`` (zeros where none is stored).

        For square blocks with the columns split like the rows; what :func:`point_block_jacobi` inverts.
        """
        r, c = self.blocksize
        if r != c or not np.array_equal(self._row_starts, self._col_starts):
            raise NotImplementedError(f"diagonal_blocks: needs square blocks and columns split like the rows, got "
                                      f"blocksize {self.blocksize}")
        nb = (self._r1 - self._r0) // r
        out = np.zeros((nb, r, r), dtype=self._dtype)
        crow, cols, vals = self._diag.crow_indices(), self._diag.col_indices(), self._diag.values()
        brow = np.repeat(np.arange(nb, dtype=np.int64), np.diff(crow))
        hit = cols.astype(np.int64) == brow
        out[brow[hit]] = vals[hit]
        return out
