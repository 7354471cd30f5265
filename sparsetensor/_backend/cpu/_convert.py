"""Layout conversions on the CPU (the ``convert`` and ``transpose`` kernels of
:mod:`sparsetensor._backend.cpu`): a chain of four kernels over the standard form of
:mod:`sparsetensor._core._canonical` (see :mod:`sparsetensor.ops.convert` for the rules and the
argument checks, which run first, device-independent)."""

from __future__ import annotations

import math

import numpy as np

from ..._core import _layout as L
from ..._core._canonical import Parts, as_parts, build, ensure_valid, same_nnz
from ..._core._config import num_threads
from ..._core._dtypes import check_fits, raw_view
from ..._lib import _convert as _kernels, _transpose as _transpose_kernels
from ..._lib._pool import empty
from ..._core._tensor import COOTensor, CompressedTensor
from ..._core._validate import check_coo_indices, raise_coo_error


def convert(t, layout: L.Layout, bs: tuple, threads=None):
    """``t`` in ``layout`` with blocksize ``bs`` (checked by :func:`sparsetensor.ops.convert.check_target`;
    ``t`` has another layout or blocksize): a canonical / coalesced new tensor."""
    if t.layout.compressed:
        parts = as_parts(ensure_valid(t, repair=True, threads=threads))  # _compressed_parts, inlined
    elif layout.blocked and t.sparse_dim > 2:
        return build(_batched_blocks(t, layout, bs, threads))
    elif not layout.compressed_rows and not layout.blocked and _far_more(t.shape[t.sparse_dim - 2], t.nnz):
        parts = _coo_to_columns(t, threads)  # coo -> csc of a tall matrix: no row pointers
    else:
        parts = _coo_to_rows(t, threads)
    if layout is L.sparse_coo:
        if not parts.layout.compressed_rows:
            if not parts.layout.blocked and _far_more(parts.plain_size, parts.plain.shape[1]):
                return _columns_to_coo(parts, threads)
            parts = _transpose(parts, threads)
        return _rows_to_coo(parts, threads)
    return build(_route(parts, layout, bs, threads))


def transpose(t, threads=None):
    """csr -> csc, csc -> csr, bsr -> bsc, bsc -> bsr: the same matrix in the other orientation
    (a counting sort of the plain indices; blocks move whole)."""
    return build(_transpose(_compressed_parts(t, threads), threads))


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


def _batched_blocks(t: COOTensor, layout: L.Layout, bs: tuple, threads) -> Parts:
    """Batched COO -> bsr/bsc: the batches stacked into one matrix (rows ``b * M + i``), grouped
    into blocks, and cut back into batches, which must hold the same number of blocks (their
    numbers of elements may differ: a block holds what its batch has)."""
    S = t.sparse_dim
    batch, (M, N) = t.shape[:S - 2], t.shape[S - 2:S]
    B, Mb = math.prod(batch), M // bs[0]
    t = t.coalesce(threads=threads)  # bounds checked (C4-C6)
    idx = t.indices().astype(np.int64)
    b = np.ravel_multi_index(tuple(idx[:S - 2]), batch) if t.nnz else np.zeros(0, np.int64)
    flat = COOTensor(np.stack([b * M + idx[S - 2], idx[S - 1]]), t.values(), (B * M, N) + t.shape[S:], True, True)
    parts = _route(_coo_to_rows(flat, threads), L.sparse_bsr, bs, threads)
    c = parts.compressed.reshape(-1)
    per_batch = np.diff(c[np.arange(B + 1) * Mb])
    same_nnz(per_batch, batch, f"coo -> {layout.name}: every batch must have the same nnz (number of blocks)")
    nb = int(per_batch[0]) if B else 0
    check_fits(t.index_dtype, layout.name, nnz=nb)
    at = (np.arange(B) * Mb)[:, None] + np.arange(Mb + 1)
    out = parts._replace(compressed=(c[at] - (np.arange(B) * nb)[:, None]).astype(t.index_dtype),
                         plain=parts.plain.reshape(B, nb).astype(t.index_dtype),
                         values=parts.values.reshape(B, nb, parts.values.shape[-1]), batch=batch, sparse=(M, N))
    return out if layout is L.sparse_bsr else _transpose(out, threads)


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
    op = empty((B, nnzb), dtype=c.dtype)
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
    oc = empty((B, n * bc + 1), dtype=c.dtype)
    op = empty((B, nnz_out), dtype=c.dtype)
    ov = empty((B, nnz_out, Er), dtype=v.dtype)
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
    oi = empty((m + 2, N), dtype=idx_dt)
    ov = empty((N, Er), dtype=v.dtype)
    _kernels.rows_to_coo(c, p, v, rb, cb, coords, oi, ov, num_threads(threads, ov.size + oi.size))
    values = ov.view(parts.dtype).reshape((N,) + parts.dense)
    return COOTensor(oi, values, batch + parts.sparse + parts.dense, coalesced=True, checked=True)


def _far_more(rows: int, entries: int) -> bool:
    """Whether a sort of the entries beats work and memory of the rows (a counting sort's)."""
    return rows > 8 * entries + (1 << 16)


def _coo_to_columns(t: COOTensor, threads) -> Parts:
    """COO -> csc through the transposed COO sorted (O(nnz log nnz)): for a matrix of far more rows
    than entries, where csr's row pointers (the way through csr) take memory of the rows."""
    S = t.sparse_dim
    if S < 2:
        return _coo_to_rows(t, threads)  # its error
    indices = np.ascontiguousarray(t.indices())  # once: what is checked is what is converted
    check_coo_indices(indices, t.shape, threads=threads)  # bounds named in t's own dims
    swap = list(range(S - 2)) + [S - 1, S - 2]
    shape = t.shape[:S - 2] + (t.shape[S - 1], t.shape[S - 2]) + t.shape[S:]
    flipped = COOTensor(indices[swap], t.values(), shape, False, False).coalesce(threads=threads)
    parts = _coo_to_rows(flipped, threads)
    return parts._replace(layout=L.sparse_csc, sparse=parts.sparse[::-1])


def _columns_to_coo(parts: Parts, threads) -> COOTensor:
    """csc -> coalesced COO by a stable sort of the entries by row (O(nnz log nnz)): for a matrix of
    far more rows than entries, where the counting sort of a transpose takes memory of the rows."""
    m = len(parts.batch)
    flipped = _rows_to_coo(parts._replace(layout=L.sparse_csr, sparse=parts.sparse[::-1]), threads)
    idx, values = flipped.indices(), flipped.values()  # batch dims, col, row: sorted by column
    rows = parts.sparse[0]
    key = idx[m + 1].astype(np.int64)
    if m:
        key = key + np.ravel_multi_index(tuple(idx[:m]), parts.batch).astype(np.int64) * rows
    order = np.argsort(key, kind="stable")  # within a row the columns stay in order
    out = idx.take(order, axis=1)
    out[[m, m + 1]] = out[[m + 1, m]]
    return COOTensor(out, values[order], parts.batch + parts.sparse + parts.dense, coalesced=True, checked=True)


def _compressed_parts(t: CompressedTensor, threads) -> Parts:
    """The ``_source_parts`` hook of the compressed layouts: the canonical form of a valid ``t``."""
    return as_parts(ensure_valid(t, repair=True, threads=threads))


def _coo_to_rows(t: COOTensor, threads) -> Parts:
    """Coalesced COO with sparse_dim = k + 2 -> csr with k batch dims (same nnz per batch); the
    plain indices and values are views of the COO's last index row and values.

    Every index is bound-checked and the order (C6) verified in the pass that finds the rows,
    also for a tensor checked when built: the result is marked canonical, and the arrays may
    have changed since (issue 34)."""
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
        ptr = empty(rows + 1, dtype=idx.dtype)
    else:
        ptr = empty(B * rows + 1, dtype=np.int64)
    # every column is read too: a trusted pass over the rows alone (the kernel's ``trusted``) let
    # the mutation fuzz test hang on a validated COO whose column changed since; not used until
    # that is understood
    trusted = False
    work = S * N + ptr.size
    found = _kernels.coo_to_rows(idx, np.asarray(t.shape[:S], dtype=np.int64), ptr, num_threads(threads, work),
                                 trusted)
    if found is not None:
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


