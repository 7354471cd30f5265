"""``load``: a distributed matrix from a file or a directory of parts, each rank reading only its rows where the
format allows."""

from __future__ import annotations

import os
import zipfile

import numpy as np
from mpi4py import MPI

from ..io import _files
from .. import io as _io
from .._core._errors import InvariantError
from .._core._layout import sparse_bsr as st_bsr
from ._comm import agree, agreed_root, same_on_every_rank
from ._bsr import DistBSR
from ._matrix import DistCSR
from ._parts import load_parts
from ._partition import balanced_starts, check_row_pointers, check_starts

__all__ = ["load"]


def _plan(path: str, size: int, row_starts, col_starts):
    """On root: how to read ``path``. ``None``: root reads it all and scatters; else the split of a mapped csr file."""
    if _files.is_mtx(path):
        return None
    file_size = os.stat(path).st_size
    try:
        zf = zipfile.ZipFile(path)
    except _io._READ_ERRORS:
        return None  # st.load names the problem
    with zf:
        names = set(zf.namelist())
        if _io.METADATA not in names:
            return None  # a scipy file, or not ours: st.load reads (or refuses) it
        meta = _io._read_metadata(zf, path)
        if meta["layout"] != "csr" or len(meta["shape"]) != 2:
            return None
        if names != {_io.METADATA} | {m + ".npy" for m in _io._COMPRESSED_MEMBERS}:
            return None
        if any(zf.getinfo(m + ".npy").compress_type != zipfile.ZIP_STORED for m in _io._COMPRESSED_MEMBERS):
            return None  # deflated members cannot be mapped
        arrays = {m: _io._read_member(zf, path, m, "r", file_size) for m in _io._COMPRESSED_MEMBERS}
    crow, cols, vals = arrays["compressed_indices"], arrays["plain_indices"], arrays["values"]
    shape = tuple(meta["shape"])
    for m, a in arrays.items():
        want = meta["value_dtype"] if m == "values" else meta["index_dtype"]
        if a.dtype.name != want:
            raise ValueError(f"{path}: member {m}.npy has dtype {a.dtype}, the metadata says {want}")
    if crow.shape != (shape[0] + 1,) or cols.ndim != 1 or vals.shape != cols.shape:
        raise ValueError(f"{path}: members of shapes {crow.shape}, {cols.shape}, {vals.shape} do not make a csr "
                         f"matrix of shape {shape}")
    nnz = cols.shape[0]
    starts = balanced_starts(crow, size) if row_starts is None else check_starts(row_starts, shape[0], size,
                                                                                  "row_starts")
    try:
        check_row_pointers(crow, starts, nnz)
    except InvariantError as e:
        raise _files.in_file(e, path) from None
    cstarts = DistCSR._col_starts(shape, starts, col_starts, size)
    at = crow[starts].astype(np.int64)
    return shape, starts, cstarts, at, bool(meta["coalesced"])


def _read_rows(path: str, r0: int, r1: int, p0: int, p1: int):
    """This rank's rows of a mapped csr file: (row pointers from 0, columns, values), touching only their pages."""
    file_size = os.stat(path).st_size
    with zipfile.ZipFile(path) as zf:
        crow, cols, vals = (_io._read_member(zf, path, m, "r", file_size) for m in _io._COMPRESSED_MEMBERS)
    crow64 = np.asarray(crow[r0:r1 + 1], dtype=np.int64) - p0
    return crow64, np.asarray(cols[p0:p1]), np.asarray(vals[p0:p1])


def load(path, comm=None, root: int = 0, row_starts=None, col_starts=None, exchange: str = "p2p") -> DistCSR:
    """A :class:`DistCSR` from a file or a directory of parts (collective; every rank passes the same path).

    A directory written by :func:`sparsetensor.mpi.save` is read on any number of
    ranks: root checks the manifest and every part against it (rows, nnz, dtypes,
    the members' checksums; a missing or mismatched part raises on every rank,
    naming the part's file), then each rank maps the parts holding its rows and
    reads only those rows. On as many ranks as saved it, the saved row and column
    partitions are kept; on another number, rows are balanced by nnz as below.
    A csr ``.npz`` written by :func:`sparsetensor.save` (members stored, the
    default) is mapped by every rank, and each rank reads only its own rows
    (and ``root`` the row pointers, to balance the rows by nnz). Any other
    file :func:`sparsetensor.load` reads (Matrix Market, other layouts,
    compressed members, SciPy's ``.npz``) is read by ``root`` and scattered
    with :meth:`DistCSR.from_global`. Every rank checks its rows; any error
    raises on every rank, naming the file and the global row.

    Parameters
    ----------
    path : str or os.PathLike
        The same file or directory on every rank (a shared file system).
    comm, root, row_starts, col_starts, exchange
        As for :meth:`DistCSR.from_global`.

    Examples
    --------
    >>> import os, tempfile, numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npz") if MPI.COMM_WORLD.rank == 0 else None
    >>> path = MPI.COMM_WORLD.bcast(path)
    >>> if MPI.COMM_WORLD.rank == 0:
    ...     st.save(path, st.from_dense(np.diag([1.0, 2.0, 3.0])))
    >>> _ = MPI.COMM_WORLD.barrier()
    >>> A = stmpi.load(path)
    >>> A.shape, A.nnz
    ((3, 3), 3)
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    root = agreed_root(comm, "load", root, row_starts=row_starts, col_starts=col_starts, exchange=exchange)
    path = agree(comm, os.fspath, path)
    same_on_every_rank(comm, "load", path=path)  # each rank reads its rows of the root's plan: of one file
    rank, size = comm.rank, comm.size
    if comm.bcast(os.path.isdir(path) if rank == root else None, root=root):
        return load_parts(path, comm, root, row_starts, col_starts, exchange)
    plan = agree(comm, _plan, path, size, row_starts, col_starts) if rank == root else agree(comm, lambda: None)
    plan = comm.bcast(plan, root=root)
    if plan is None:
        t = agree(comm, _io.load, path) if rank == root else agree(comm, lambda: None)
        blocksize = comm.bcast(tuple(t.blocksize) if rank == root and getattr(t, "layout", None) is st_bsr
                               else None, root=root)
        if blocksize is not None:  # a bsr file (sparsetensor.mpi.save of a DistBSR): the same blocks
            return DistBSR.from_global(t, comm=comm, root=root, row_starts=row_starts, col_starts=col_starts,
                                       exchange=exchange, blocksize=blocksize)
        return DistCSR.from_global(t, comm=comm, root=root, row_starts=row_starts, col_starts=col_starts,
                                   exchange=exchange)
    shape, starts, cstarts, at, canonical = plan
    r0, r1 = int(starts[rank]), int(starts[rank + 1])
    crow64, cols, vals = agree(comm, _read_rows, path, r0, r1, int(at[rank]), int(at[rank + 1]))

    def build():
        return DistCSR._from_parts(comm, shape, starts, cstarts, crow64, cols, vals, int(at[rank]), canonical,
                                   exchange)

    try:
        return build()
    except InvariantError as e:  # every rank raises; name the file
        raise _files.in_file(e, path) from None
