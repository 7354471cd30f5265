"""Lazy Dask arrays of sparse tensor chunks: :func:`from_sparse` (a tensor in memory) and
:func:`load` (a file written by :func:`sparsetensor.save`, read block by block by the tasks)."""

from __future__ import annotations

import os
import zipfile

import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks

from ..io import _files
from .. import io as _io
from .._core._errors import InvariantError
from .._core._from_arrays import sparse_compressed_tensor
from .._core._tensor import SparseTensor
from ..ops.indexing import getitem
from ._meta import meta_like

__all__ = ["from_sparse", "load"]


def from_sparse(t, chunks="auto", *, name=None):
    """A Dask array whose chunks are pieces of the sparse tensor ``t`` (cut with ``t[slices]``).

    Parameters
    ----------
    t : SparseTensor
        Any layout on the CPU. Cut a compressed tensor along its compressed dim (rows of
        csr/bsr, columns of csc/bsc) for cheap chunks; a blocked one at multiples of its
        blocksize, so the chunks keep the layout. A compressed tensor with batch dims cut
        along its sparse dims becomes coo first (its pieces' batches could differ in nnz).
    chunks : int, tuple or "auto"
        As for :func:`dask.array.from_array`; ``-1`` keeps a dim whole.
    name : str, optional
        The Dask key prefix (default: from the tensor's token, see ``__dask_tokenize__``).

    Returns
    -------
    dask.array.Array
        With ``_meta`` a zero-size tensor of ``t``'s layout, dtype and index dtype;
        ``.compute()`` returns a sparse tensor (the chunks joined by :func:`sparsetensor.cat`).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st, sparsetensor.dask
    >>> t = st.from_dense(np.arange(12.0).reshape(4, 3) % 3, "csr")
    >>> x = st.dask.from_sparse(t, chunks=(2, -1))
    >>> x.chunks, x._meta.layout
    (((2, 2), (3,)), st.sparse_csr)
    >>> (x @ np.ones(3)).compute(scheduler="sync")
    array([3., 3., 3., 3.])
    >>> (x * 2).sum(axis=0).compute(scheduler="sync")
    array([ 0.,  8., 16.])
    """
    if not isinstance(t, SparseTensor):
        raise TypeError(f"from_sparse expects a sparse tensor on the CPU, got {type(t).__name__}")
    chunks = normalize_chunks(chunks, t.shape, dtype=t.dtype)
    m = t.batch_dim
    if m and t.layout.compressed and (len(chunks[m]) > 1 or len(chunks[m + 1]) > 1):
        # a batched compressed tensor cut along its sparse dims: a piece whose batches differ in nnz is
        # coo (a compressed tensor has one nnz), so every chunk is made coo alike (one chunk type)
        t = t.to_sparse_coo()
    return da.from_array(t, chunks=chunks, name=name, asarray=False, fancy=False, meta=meta_like(t))


class _FileBlocks:
    """A sparse tensor in an ``.npz`` file of :func:`sparsetensor.save`, read a block at a time.

    ``self[key]`` maps the file and reads only the members' entries of the compressed-dim
    range that ``key`` selects (then cuts the other dims with ``t[...]``); the block is built
    by the checked constructor. Pickles as its path and a few integers.
    """

    def __init__(self, path: str):
        self.path = path
        st_ = os.stat(path)
        self._stamp = (st_.st_size, st_.st_mtime_ns)
        with zipfile.ZipFile(path) as zf:
            meta = _io._read_metadata(zf, path)
            layout = meta["layout"]
            if layout in ("strided", "coo"):
                raise NotImplementedError(f"st.dask.load of a {layout} file ({path}): row blocks need a compressed "
                                          "layout (csr, csc, bsr, bsc); for coo, load it whole with st.load and "
                                          "use st.dask.from_sparse(t.to_sparse_csr())")
            self.layout = layout
            self.shape = tuple(meta["shape"])
            self.dtype = np.dtype(meta["value_dtype"])
            c = _io._read_member(zf, path, "compressed_indices", "r", st_.st_size)
        if c.ndim != 1 or len(self.shape) - (meta.get("dense_dim") or 0) != 2:
            raise NotImplementedError(f"st.dask.load of a {layout} file with batch dims ({path}): load it with "
                                      "st.load and cut it with st.dask.from_sparse")
        self.ndim = len(self.shape)
        self.dim = 0 if layout in ("csr", "bsr") else 1
        bs = meta.get("blocksize") or [1, 1]
        self.block = bs[self.dim]
        if c.shape[0] != self.shape[self.dim] // self.block + 1:
            raise ValueError(f"{path}: compressed_indices has {c.shape[0]} entries for {self.shape[self.dim]} "
                             f"{'rows' if self.dim == 0 else 'columns'} of a {layout} tensor")
        self._meta = meta_like(self[(slice(0, 0),) * self.ndim]) if c.shape[0] else None

    def __dask_tokenize__(self):
        return ("sparsetensor.dask.load", os.path.abspath(self.path), self._stamp)

    def _read(self, start: int, stop: int):
        """The entries of compressed-dim elements ``start:stop`` (multiples of the blocksize)."""
        path = self.path
        if start % self.block or (stop % self.block and stop != self.shape[self.dim]):
            raise ValueError(f"st.dask.load: chunk boundaries along dim {self.dim} must be multiples of the "
                             f"blocksize {self.block} of {self.layout} ({path}); got {start}:{stop}")
        now = os.stat(path)
        if (now.st_size, now.st_mtime_ns) != self._stamp:  # the graph's chunks are the old file's
            raise ValueError(f"st.dask.load: {path} changed since it was loaded (size or modification time); "
                             "load it again")
        size = now.st_size
        with zipfile.ZipFile(path) as zf:
            c = _io._read_member(zf, path, "compressed_indices", "r", size)
            p = _io._read_member(zf, path, "plain_indices", "r", size)
            v = _io._read_member(zf, path, "values", "r", size)
        i0, i1 = start // self.block, -(-stop // self.block)
        lo, hi = int(c[i0]), int(c[i1])
        if not 0 <= lo <= hi <= p.shape[-1]:
            raise ValueError(f"{path}: compressed_indices[{i0}]={lo}, [{i1}]={hi} are not a range of the "
                             f"{p.shape[-1]} entries (invariants 5.1/5.2)")
        shape = list(self.shape)
        shape[self.dim] = stop - start
        try:
            return sparse_compressed_tensor(np.asarray(c[i0:i1 + 1]) - c.dtype.type(lo), p[lo:hi], v[lo:hi],
                                            tuple(shape), layout=self.layout, check_invariants=True)
        except InvariantError as e:
            raise _files.in_file(e, path) from None

    def __getitem__(self, key):
        key = tuple(key) + (slice(None),) * (self.ndim - len(tuple(key)))
        start, stop, step = key[self.dim].indices(self.shape[self.dim])
        if step != 1:
            raise NotImplementedError("st.dask.load: strided chunks along the compressed dim")
        block = self._read(start, max(start, stop))
        rest = tuple(slice(None) if d == self.dim else k for d, k in enumerate(key))
        if all(isinstance(k, slice) and k.indices(n) == (0, n, 1) for k, n in zip(rest, block.shape)):
            return block  # the whole of the other dims: the mapped block as it is
        return getitem(block, rest)


def load(path, chunks="auto", *, name=None):
    """A lazy Dask array of a csr/csc/bsr/bsc tensor saved with :func:`sparsetensor.save`; each task
    maps the file and reads only its block of rows (csr/bsr) or columns (csc/bsc).

    Nothing but the metadata is read here, so a matrix larger than one process's memory can
    be multiplied by a cluster whose workers see the file. Every block is checked as
    :func:`sparsetensor.load` checks a whole file (``InvariantError`` naming the file).

    Parameters
    ----------
    path : str or os.PathLike
        An uncompressed ``.npz`` of :func:`sparsetensor.save` (compressed members are read
        whole by each task: slower, still correct), 2 sparse dims, no batch dims.
    chunks : int, tuple or "auto"
        As for :func:`dask.array.from_array`, e.g. ``(50_000, -1)`` for row blocks of a csr.
        Boundaries along the compressed dim of bsr/bsc must be multiples of the blocksize.

    Examples
    --------
    >>> import os, tempfile, numpy as np, sparsetensor as st, sparsetensor.dask
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npz")
    >>> st.save(path, st.from_dense(np.eye(6), "csr"))
    >>> x = st.dask.load(path, chunks=(2, -1))
    >>> x.numblocks, (x @ np.arange(6.0)).compute(scheduler="sync")
    ((3, 1), array([0., 1., 2., 3., 4., 5.]))
    """
    src = _FileBlocks(os.fspath(path))
    chunks = normalize_chunks(chunks, src.shape, dtype=src.dtype)
    bounds = np.cumsum((0,) + chunks[src.dim])
    if src.block > 1 and np.any(bounds[:-1] % src.block):
        raise ValueError(f"st.dask.load: chunks along dim {src.dim} of a {src.layout} file must be multiples of its "
                         f"blocksize {src.block}, got {chunks[src.dim]}")
    return da.from_array(src, chunks=chunks, name=name, asarray=False, fancy=False, meta=src._meta)
