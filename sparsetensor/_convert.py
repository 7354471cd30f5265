"""Layout-to-layout conversions among coo, csr, csc, bsr and bsc, over the Cython kernels.

Every compressed tensor is handled in one canonical form (see :mod:`sparsetensor._dense`):
compressed ``(B, n + 1)``, plain ``(B, nnz)`` and values ``(B, nnz, E)`` viewed as raw
unsigned integers, ``E`` being the items of one entry (block x dense). Values are only
moved, never combined, so every value dtype takes the same path. A conversion is a
chain of four kernels:

- *transpose* (csr <-> csc, bsr <-> bsc): a parallel counting sort of the plain
  indices; blocks move whole and keep their orientation;
- *group* (csr -> bsr, csc -> bsc): entries gather into blocks, unspecified items
  of a block become explicit zeros;
- *expand* (bsr -> csr, bsc -> csc): every item of a block becomes an entry;
- *coo*: csr/bsr -> coalesced COO, and coalesced COO -> csr (batch dims as the leading
  sparse dims).

Entries are transposed before they are grouped and blocks before they are expanded,
so the counting sort always moves the fewer, larger pieces.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from . import _layout as L
from ._config import num_threads
from ._canonical import Parts, as_parts, build, ensure_valid, same_nnz
from ._dtypes import check_fits, raw_view
from ._errors import InvariantError
from ._lib import _convert as _kernels, _transpose as _transpose_kernels
from ._tensor import COOTensor, CompressedTensor, SparseTensor
from ._validate import raise_coo_error

__all__ = ["to_sparse"]

def to_sparse(t, layout, *, blocksize=None, dense_dim=None, threads: int | None = None):
    """Convert a sparse tensor to another sparse layout (or a NumPy array to a sparse one).

    Parameters
    ----------
    t : SparseTensor or numpy.ndarray
        An array is passed to :func:`sparsetensor.from_dense` (``batch_dim=0``).
    layout : str or Layout
        ``"coo"``, ``"csr"``, ``"csc"``, ``"bsr"`` or ``"bsc"``.
    blocksize : (int, int), optional
        The block shape ``(rows, cols)`` of a bsr/bsc result (the block as it appears in
        the dense tensor, for bsc too); it must divide the two sparse sizes. Required for
        bsr/bsc targets, except that converting to the tensor's own layout without one is
        a no-op; must be None for coo/csr/csc targets.
    dense_dim : int, optional
        Only checked: a conversion keeps the dense dims, so it must equal ``t.dense_dim``.
    threads : int, optional
        Threads for the kernels (default: :func:`sparsetensor.num_threads`).

    Returns
    -------
    SparseTensor
        ``t`` itself when it already has ``layout`` (and ``blocksize``); otherwise a new
        tensor with the same shape, index dtype and value dtype, satisfying every
        invariant (compressed results are canonical, COO results coalesced).

    Notes
    -----
    - Batch dims: compressed layouts keep them; to COO they become the leading sparse
      dims (``sparse_dim = batch_dim + 2``); from COO with ``sparse_dim = k + 2`` the first
      ``k`` become batch dims, which needs the same nnz in every batch (ValueError).
    - Blocks: grouping into blocks stores explicit zeros for the unspecified items of a
      specified block (PyTorch semantics). Expanding (bsr/bsc -> csr/csc/coo) makes every
      item of every block an entry, zeros included; PyTorch does this for bsr -> coo and
      refuses bsr -> csr, which follows the same rule here. bsr -> bsr with another
      blocksize (PyTorch refuses it) goes through csr: the new blocks are those that
      meet an old block.
    - An uncoalesced COO tensor is coalesced first. A compressed tensor built without
      checking is scanned first (invariants 5.1-5.6, one parallel pass); broken indices
      raise :class:`InvariantError`, while unsorted or duplicate plain indices (5.6) are
      repaired with ``t.coalesce()`` (duplicates are summed).
    - ``t`` is never modified. A coo -> csr result shares its plain indices and values with
      ``t`` (the last index row and the values, as PyTorch does); every other result has
      arrays of its own.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], size=(2, 3))
    >>> c = t.to_sparse("csc")
    >>> c.ccol_indices(), c.row_indices(), c.values()
    (array([0, 1, 2, 3]), array([0, 1, 0]), array([1., 3., 2.]))
    >>> b = t.to_sparse("bsr", blocksize=(2, 1))
    >>> b.col_indices(), b.values()[:, :, 0]
    (array([0, 1, 2]), array([[1., 0.],
           [0., 3.],
           [2., 0.]]))
    >>> t.to_sparse("coo").indices()
    array([[0, 0, 1],
           [0, 2, 1]])
    """
    layout = L.as_layout(layout)
    if isinstance(t, np.ndarray):
        from ._dense import from_dense

        return from_dense(t, layout, blocksize=blocksize, dense_dim=0 if dense_dim is None else dense_dim,
                          threads=threads)
    if not isinstance(t, SparseTensor):
        raise TypeError(f"to_sparse expects a sparse tensor or a NumPy array, got {type(t).__name__}")
    bs, same = check_target(t, layout, blocksize, dense_dim)
    if same:
        return t
    parts = t._source_parts(threads)  # the layout's hook: _coo_to_rows or _compressed_parts
    if layout is L.sparse_coo:
        if not parts.layout.compressed_rows:
            parts = _transpose(parts, threads)
        return _rows_to_coo(parts, threads)
    return build(_route(parts, layout, bs, threads))


def check_target(t, layout: L.Layout, blocksize, dense_dim) -> tuple:
    """The argument checks of ``to_sparse(t, layout, ...)``, shared by the CPU and CUDA tensors:
    returns ``(blocksize, same)``, ``same`` when ``t`` already has that layout and blocksize."""
    if layout is L.strided:
        raise ValueError("to_sparse needs a sparse layout, got strided; use t.to_dense()")
    if dense_dim is not None and operator.index(dense_dim) != t.dense_dim:
        raise ValueError(f"a {t.layout.name} -> {layout.name} conversion keeps the dense dims: dense_dim must be "
                         f"{t.dense_dim} (or None), got {dense_dim}")
    bs = _target_blocksize(t, layout, blocksize)
    return bs, t.layout is layout and (not layout.blocked or t.blocksize == bs)


def _target_blocksize(t, layout: L.Layout, blocksize) -> tuple:
    if not layout.blocked:
        if blocksize is not None:
            raise ValueError(f"blocksize is only defined for bsr/bsc targets, got blocksize={blocksize!r} for "
                             f"layout {layout.name}")
        return (1, 1)
    if blocksize is None:
        if t.layout is layout:
            return t.blocksize
        raise ValueError(f"a {t.layout.name} -> {layout.name} conversion needs blocksize=(rows, cols)")
    bs = L.as_blocksize(blocksize)
    S = t.sparse_dim if t.layout is L.sparse_coo else t.batch_dim + 2
    if S < 2:
        raise ValueError(f"a {layout.name} tensor needs 2 sparse dims, got a coo tensor with sparse_dim={S}")
    rows, cols = t.shape[S - 2:S]
    if rows % bs[0] or cols % bs[1]:
        raise ValueError(f"blocksize {bs} must divide the sparse sizes ({rows}, {cols})")
    return bs


# -- the steps ------------------------------------------------------------------------------------
def _route(parts: Parts, layout: L.Layout, bs: tuple, threads) -> Parts:
    """Transpose, group and expand ``parts`` into ``layout`` with blocksize ``bs``."""
    src = parts.layout
    if src.blocked and not (layout.blocked and parts.blocksize == bs):
        if not layout.blocked and layout.compressed_rows != src.compressed_rows:
            parts = _transpose(parts, threads)  # bsr -> bsc -> csc: move whole blocks
        parts = _expand(parts, threads)
    if parts.layout.blocked:  # the target's blocksize: only the orientation may differ
        return parts if parts.layout is layout else _transpose(parts, threads)
    if layout.compressed_rows != parts.layout.compressed_rows:
        parts = _transpose(parts, threads)
    if layout.blocked:
        parts = _group(parts, bs, threads)
    return parts


def _transpose(parts: Parts, threads) -> Parts:
    """csr <-> csc, bsr <-> bsc: a counting sort of the plain indices in every batch."""
    c, p, v = _transpose_kernels.compressed_transpose(parts.compressed, parts.plain, parts.values,
                                                      parts.plain_size, num_threads(threads, parts.work))
    return parts.with_members(c, p, v, parts.layout.transposed)


def _block_geometry(layout: L.Layout, bs: tuple) -> tuple:
    """(bc, bp, stride_c, stride_p): the block extents along the compressed and plain dims, and
    how far an item moves in the flattened (Rb, Cb) block per step along each."""
    rb, cb = bs
    return (rb, cb, cb, 1) if layout.compressed_rows else (cb, rb, 1, cb)


def _group(parts: Parts, bs: tuple, threads) -> Parts:
    """csr -> bsr, csc -> bsc: gather entries into blocks of shape ``bs`` (zero-filled)."""
    bc, bp, sc, sp = _block_geometry(parts.layout, bs)
    c, p, v = parts.compressed, parts.plain, parts.values
    B, n, Er = c.shape[0], c.shape[1] - 1, v.shape[2]
    nt = num_threads(threads, parts.work)
    counts = np.zeros((B, n // bc), dtype=np.int64)
    _kernels.group_count(c, p, bc, bp, counts, nt)
    layout = L.sparse_bsr if parts.layout.compressed_rows else L.sparse_bsc
    per_batch = counts.sum(axis=1)
    same_nnz(per_batch, parts.batch, f"{parts.layout.name} -> {layout.name} with blocksize {bs}: every batch "
              "must have the same number of blocks")
    nnzb = int(per_batch[0]) if B else 0
    oc = np.zeros((B, n // bc + 1), dtype=c.dtype)
    np.cumsum(counts, axis=1, out=oc[:, 1:])
    op = np.empty((B, nnzb), dtype=c.dtype)
    ov = np.zeros((B, nnzb, bs[0] * bs[1] * Er), dtype=v.dtype)
    _kernels.group_fill(c, p, v, bc, bp, sc, sp, oc, op, ov, nt)
    return parts.with_members(oc, op, ov, layout, bs)


def _expand(parts: Parts, threads) -> Parts:
    """bsr -> csr, bsc -> csc: every item of every block becomes an entry."""
    bs = parts.blocksize
    bc, bp, sc, sp = _block_geometry(parts.layout, bs)
    c, p, v = parts.compressed, parts.plain, parts.values
    B, n, nnz = c.shape[0], c.shape[1] - 1, p.shape[1]
    RC = bs[0] * bs[1]
    Er = v.shape[2] // RC
    nnz_out = nnz * RC
    layout = L.sparse_csr if parts.layout.compressed_rows else L.sparse_csc
    check_fits(c.dtype, layout.name, nnz=nnz_out)
    oc = np.empty((B, n * bc + 1), dtype=c.dtype)
    op = np.empty((B, nnz_out), dtype=c.dtype)
    ov = np.empty((B, nnz_out, Er), dtype=v.dtype)
    _kernels.compressed_expand(c, p, v, bc, bp, sc, sp, oc, op, ov, num_threads(threads, ov.size))
    return parts.with_members(oc, op, ov, layout, (1, 1))


def _rows_to_coo(parts: Parts, threads) -> COOTensor:
    """csr/bsr -> coalesced COO; batch dims become the leading sparse dims, blocks expand."""
    c, p, v = parts.compressed, parts.plain, parts.values
    batch, (rb, cb) = parts.batch, parts.blocksize
    B, nnz, m = c.shape[0], p.shape[1], len(batch)
    idx_dt = c.dtype
    check_fits(idx_dt, "coo", **{f"size[{d}]": s for d, s in enumerate(batch)})
    N = B * nnz * rb * cb
    Er = v.shape[2] // (rb * cb)
    if m:
        coords = np.array(np.unravel_index(np.arange(B), batch), dtype=idx_dt).reshape(m, B)
    else:
        coords = np.empty((0, B), dtype=idx_dt)
    oi = np.empty((m + 2, N), dtype=idx_dt)
    ov = np.empty((N, Er), dtype=v.dtype)
    _kernels.rows_to_coo(c, p, v, rb, cb, coords, oi, ov, num_threads(threads, ov.size + oi.size))
    values = ov.view(parts.dtype).reshape((N,) + parts.dense)
    return COOTensor(oi, values, batch + parts.sparse + parts.dense, coalesced=True, checked=True)


def _compressed_parts(t: CompressedTensor, threads) -> Parts:
    """The ``_source_parts`` hook of the compressed layouts: the canonical form of a valid ``t``."""
    return as_parts(ensure_valid(t, repair=True, threads=threads))


def _coo_to_rows(t: COOTensor, threads) -> Parts:
    """Coalesced COO with sparse_dim = k + 2 -> csr with k batch dims (same nnz per batch); the
    plain indices and values are views of the COO's last index row and values.

    A tensor whose indices are known to be valid (``t._checked``: checked when built, or made by
    our kernels) has only its leading index rows read, as torch does; the last one (the columns)
    is not. Otherwise every index is bound-checked and the order (C6) verified."""
    S = t.sparse_dim
    if S < 2:
        raise ValueError(f"coo -> compressed needs sparse_dim >= 2 (batch dims + rows, cols), got sparse_dim={S}")
    if not t.is_coalesced():
        t = t.coalesce()
    batch, sparse, dense = t.shape[:S - 2], t.shape[S - 2:S], t.shape[S:]
    B, rows, N = math.prod(batch), sparse[0], t.nnz
    idx = np.ascontiguousarray(t.indices())
    values = np.ascontiguousarray(t.values())
    raw = raw_view(values.reshape(N, math.prod(dense)))
    if B == 1:  # the row pointers are the compressed index: written in the index dtype
        check_fits(idx.dtype, "csr", nnz=N)
        ptr = np.empty(rows + 1, dtype=idx.dtype)
    else:
        ptr = np.empty(B * rows + 1, dtype=np.int64)
    trusted = t._checked
    work = (S - 1 if trusted else S) * N + ptr.size
    found = _kernels.coo_to_rows(idx, np.asarray(t.shape[:S], dtype=np.int64), ptr, num_threads(threads, work),
                                 trusted)
    if found is not None:
        if found[0] == "C6":
            raise InvariantError("C6", "coo", "a tensor marked coalesced must have lexicographically sorted, "
                                 f"distinct index columns; position {found[2]} is not after position {found[2] - 1}",
                                 index=found[2])
        raise_coo_error(found, t.shape)
    if B == 1:
        c, nnz = ptr.reshape(1, rows + 1), N
    else:
        starts = ptr[np.arange(B + 1) * rows]
        per_batch = np.diff(starts)
        same_nnz(per_batch, batch, "coo -> csr: every batch (the leading sparse dims but two) must have the same nnz")
        nnz = int(per_batch[0]) if B else 0
        check_fits(idx.dtype, "csr", nnz=nnz)
        at = (np.arange(B) * rows)[:, None] + np.arange(rows + 1)
        c = (ptr[at] - (np.arange(B) * nnz)[:, None]).astype(idx.dtype, copy=False)
    # the plain indices and values are the COO's own (sorted by batch and row): shared, as torch does
    return Parts(c, idx[S - 1].reshape(B, nnz), raw.reshape(B, nnz, raw.shape[1]), batch, sparse, dense, (1, 1),
                  L.sparse_csr, t.dtype)
