"""Selection and joining of compressed tensors on the device (``kernels/select.cu``): the
``gather_slices``, ``remap_plain``, ``narrow_plain``, ``cat_plain`` and ``cat_compressed``
kernels of the backend, with the CPU's contracts (:mod:`sparsetensor._backend.cpu._select`).

Inputs are :class:`~sparsetensor._core._canonical.Parts` whose members are DeviceArrays
(validated: the kernels trust 5.1-5.6); outputs are the new members in that form. Every op
is a segment copy (see select.cu). The only reads to the host are the per-batch nnz (to
check that every batch of the result has the same nnz, as the CPU does, and to size the
outputs); the host index arrays of the ops (rows, index) are copied to the device.
"""

from __future__ import annotations

import numpy as np

from ..._core._canonical import same_nnz
from ..._core._dtypes import check_fits
from ...cuda import _primitives as P

__all__ = ["gather_slices", "remap_plain", "narrow_plain", "cat_plain", "cat_compressed"]


def _keys(parts) -> tuple:
    """(raw value key, index key) of ``parts``' kernels."""
    return P.raw_key(parts.values.itemsize), P.index_key(parts.compressed.dtype)


def _result_nnz(dev, parts, off, per_batch_items: int, what: str, **limits) -> int:
    """The nnz of every batch of a result whose global exclusive scan ``off`` has
    ``per_batch_items`` counts per batch; ValueError (the CPU's) when the batches differ."""
    B = parts.compressed.shape[0]
    if not B:
        return 0
    bounds = P.read_ints(dev, P.take_strided(dev, off, per_batch_items, B + 1))
    per_batch = np.diff(bounds)
    same_nnz(per_batch, parts.batch, f"{what} of a batched {parts.layout.name} tensor: every batch of the result "
              "must have the same nnz")
    nnz = int(per_batch[0])
    check_fits(parts.compressed.dtype, parts.layout.name, nnz=nnz, **limits)
    return nnz


def _segment_copy(parts, counts, src, what: str, shift: int = 0):
    """The result whose slot s (of the ``(B, K)`` slots ``counts`` counts) holds the entries
    ``src[s] .. src[s] + counts[s]`` (global source positions) of ``parts``, plain indices minus
    ``shift``."""
    c, p, v = parts.compressed, parts.plain, parts.values
    dev = c._device
    B, K = counts.shape
    off = P.exclusive_scan(dev, counts.reshape(B * K))
    nnz = _result_nnz(dev, parts, off, K, what)
    W = v.shape[2]
    out_p = P.empty(dev, (B, nnz), c.dtype)
    out_v = P.empty(dev, (B, nnz, W), v.dtype)
    N = B * nnz
    P.run(dev, "select.cu", "copy_to_slots", _keys(parts), N * max(W, 1), off, B * K, src, p, v, W, shift, N,
          out_p, out_v)
    return P.batch_offsets(dev, off, B, K, 1, c.dtype), out_p, out_v


def gather_slices(parts, rows: np.ndarray, what: str):
    """Compressed slices ``rows`` (host int64, block units, in range) of every batch, in that order
    (repeats allowed)."""
    c = parts.compressed
    dev = c._device
    B, n1 = c.shape
    K = rows.shape[0]
    counts, src = P.empty(dev, (B, K), np.int64), P.empty(dev, (B * K,), np.int64)
    P.run(dev, "select.cu", "gather_counts", _keys(parts)[1:], B * K, c, B, n1 - 1, parts.plain.shape[1],
          P.from_host(dev, np.ascontiguousarray(rows, dtype=np.int64)), K, counts, src)
    return _segment_copy(parts, counts, src, what)


def narrow_plain(parts, start: int, length: int):
    """Plain indices in ``[start, start + length)`` (block units) of every slice, shifted to start at 0."""
    c = parts.compressed
    dev = c._device
    B, n = c.shape[0], c.shape[1] - 1
    counts, src = P.empty(dev, (B, n), np.int64), P.empty(dev, (B * n,), np.int64)
    P.run(dev, "select.cu", "plain_range", _keys(parts)[1:], B * n, c, parts.plain, B, n, parts.plain.shape[1],
          start, start + length, counts, src)
    return _segment_copy(parts, counts, src, "narrow", shift=start)


def _index_map(index: np.ndarray, size: int):
    """The positions of host ``index`` grouped by value: ``targets[first[v]:first[v + 1]]`` are the
    positions holding v, in increasing order."""
    targets = np.argsort(index, kind="stable").astype(np.int64)
    first = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(np.bincount(index, minlength=size), out=first[1:])
    return first, targets


def remap_plain(parts, index: np.ndarray, nondecreasing: bool, what: str):
    """Every slice's entries mapped through host ``index`` (new plain j gets old plain ``index[j]``;
    repeats give several entries), each slice sorted by a radix sort unless ``index`` is
    nondecreasing."""
    c, p, v = parts.compressed, parts.plain, parts.values
    dev = c._device
    B, n, nnz_in, W = c.shape[0], c.shape[1] - 1, p.shape[1], v.shape[2]
    K = index.shape[0]
    check_fits(c.dtype, parts.layout.name, **{"ncols" if parts.layout.compressed_rows else "nrows": K})
    first, targets = (P.from_host(dev, a) for a in _index_map(index, parts.plain_size))
    keys = _keys(parts)
    Nin = B * nnz_in
    counts = P.empty(dev, (Nin,), np.int64)
    P.run(dev, "select.cu", "remap_counts", keys[1:], Nin, p, Nin, first, counts)
    eoff = P.exclusive_scan(dev, counts)
    nnz = _result_nnz(dev, parts, eoff, nnz_in, what)
    out_c = P.empty(dev, (B, n + 1), c.dtype)
    P.run(dev, "select.cu", "remap_compressed", keys[1:], B * (n + 1), c, B, n, nnz_in, eoff, out_c)
    N = B * nnz
    out_p, out_v = P.empty(dev, (B, nnz), c.dtype), P.empty(dev, (B, nnz, W), v.dtype)
    P.run(dev, "select.cu", "remap_fill", keys, N * max(W, 1), eoff, Nin, p, v, W, first, targets, N, out_p, out_v)
    if nondecreasing or N == 0:
        return out_c, out_p, out_v
    sort_keys = P.empty(dev, (N,), np.uint64)
    P.run(dev, "select.cu", "slot_keys", keys[1:], N, out_c, B, n, nnz, out_p, K, sort_keys)
    _, perm = P.radix_sort(dev, sort_keys, max(B * n * K - 1, 0).bit_length())
    return (out_c, P.gather_rows(dev, out_p.reshape(N), perm, N).reshape(B, nnz),
            P.gather_rows(dev, out_v.reshape(N, W), perm, N).reshape(B, nnz, W))


def cat_plain(parts: list, sizes: list, limits: dict):
    """The tensors of ``parts`` side by side along the plain dim (see the CPU's ``cat_plain``)."""
    p0 = parts[0]
    c0 = p0.compressed
    dev = c0._device
    B, n = c0.shape[0], c0.shape[1] - 1
    keys = _keys(p0)
    acc = P.zeros(dev, c0.shape, np.int64)
    for q in parts:
        P.run(dev, "select.cu", "add_compressed", keys[1:], acc.size, q.compressed, acc.size, acc)
    total = int(P.read_ints(dev, acc[0][n:])[0]) if B else 0
    check_fits(c0.dtype, p0.layout.name, nnz=total, **limits)
    base = P.empty(dev, (B * n,), np.int64)
    P.run(dev, "select.cu", "slot_starts", (), B * n, acc, B, n, total, base)
    W = p0.values.shape[2]
    out_p, out_v = P.empty(dev, (B, total), c0.dtype), P.empty(dev, (B, total, W), p0.values.dtype)
    offset = 0
    for q, s in zip(parts, sizes):
        nnz = q.plain.shape[1]
        P.run(dev, "select.cu", "cat_plain_copy", keys, B * nnz * max(W, 1), q.compressed, q.plain, q.values, B, n,
              nnz, W, offset, base, out_p, out_v)
        P.run(dev, "select.cu", "advance_starts", keys[1:], B * n, q.compressed, B, n, base)
        offset += s
    return acc.astype(c0.dtype), out_p, out_v


def cat_compressed(parts: list, limits: dict):
    """The tensors of ``parts`` one after the other along the compressed dim (see the CPU's
    ``cat_compressed``)."""
    p0 = parts[0]
    c0 = p0.compressed
    dev = c0._device
    B, W = c0.shape[0], p0.values.shape[2]
    nout = sum(q.compressed.shape[1] - 1 for q in parts)
    total = sum(q.plain.shape[1] for q in parts)
    check_fits(c0.dtype, p0.layout.name, nnz=total, **limits)
    keys = _keys(p0)
    out_c = P.empty(dev, (B, nout + 1), c0.dtype)
    out_p, out_v = P.empty(dev, (B, total), c0.dtype), P.empty(dev, (B, total, W), p0.values.dtype)
    slot_off = nnz_off = 0
    for k, q in enumerate(parts):
        n, nnz = q.compressed.shape[1] - 1, q.plain.shape[1]
        count = n + (k == len(parts) - 1)
        P.run(dev, "select.cu", "cat_compressed_index", keys[1:], B * count, q.compressed, B, n, count, slot_off,
              nnz_off, nout, out_c)
        P.run(dev, "select.cu", "place_rows", (c0.itemsize,), B * nnz, q.plain, B, nnz, 1, total, nnz_off, out_p)
        P.run(dev, "select.cu", "place_rows", keys[:1], B * nnz * W, q.values, B, nnz, W, total, nnz_off, out_v)
        slot_off, nnz_off = slot_off + n, nnz_off + nnz
    return out_c, out_p, out_v
