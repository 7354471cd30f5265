"""CPU kernels of selection and joining (:mod:`sparsetensor.ops.select`, :mod:`sparsetensor.ops.join`)
over :mod:`sparsetensor._lib._select`.

The ops resolve dims, sizes and block units; these take a compressed tensor in the kernels'
standard form (:class:`sparsetensor._core._canonical.Parts`, validated) and return the new members
``(compressed, plain, values)`` in that form, every batch with the same nnz (or ValueError
naming what ``what`` did). Index arithmetic is checked against the index dtype before a
kernel writes.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._canonical import same_nnz
from ..._core._config import num_threads
from ..._core._dtypes import check_fits, raw_view
from ..._lib import _select as _kernels
from .._plan import index_slots
from .._views import bits_dtype, work_dtype
from ..._core._validate import raise_coo_error

__all__ = ["gather_slices", "remap_plain", "narrow_plain", "cat_plain", "cat_compressed", "index_select_coo"]


def _slot_outputs(parts, counts: np.ndarray, what: str):
    """Empty (compressed, plain, values) of a result whose slot i of batch b holds ``counts[b, i]``
    entries (the compressed index already filled in); every batch must have the same nnz."""
    c, v = parts.compressed, parts.values
    B = c.shape[0]
    per_batch = counts.sum(axis=1, dtype=np.int64)
    same_nnz(per_batch, parts.batch, f"{what} of a batched {parts.layout.name} tensor: every batch of the result "
              "must have the same nnz")
    nnz = int(per_batch[0]) if B else 0
    check_fits(c.dtype, parts.layout.name, nnz=nnz)
    out_c = np.zeros((B, counts.shape[1] + 1), dtype=c.dtype)
    np.cumsum(counts, axis=1, dtype=c.dtype, out=out_c[:, 1:])
    return out_c, np.empty((B, nnz), dtype=c.dtype), np.empty((B, nnz, v.shape[2]), dtype=v.dtype)


def _selection_map(index: np.ndarray, coords: np.ndarray, size: int):
    """``(first, targets, coords)`` for the kernels that select entries by ``index`` along a dim of
    ``size``: :func:`build_map` over every coordinate with ``coords`` as they are, or over the slots of
    :func:`~sparsetensor._backend._plan.index_slots` with ``coords`` replaced by theirs (one out of
    range takes the slot of a gap: the caller checks them)."""
    slots = index_slots(index, coords.size, size)
    if slots is None:
        return (*_kernels.build_map(index, size), coords)
    u, of_index = slots
    at = np.searchsorted(u, coords)
    hit = u[np.minimum(at, u.size - 1)] == coords if u.size else np.zeros(coords.shape, bool)
    first, targets = _kernels.build_map(of_index, 2 * u.size + 1)
    return first, targets, (2 * at + hit).astype(coords.dtype)


def gather_slices(parts, rows: np.ndarray, what: str, threads=None):
    """Compressed slices ``rows`` (int64, block units, in range) of every batch, in that order
    (repeats allowed)."""
    c, p, v = parts.compressed, parts.plain, parts.values
    B, K = c.shape[0], rows.shape[0]
    starts, ends = (c[:, rows], c[:, rows + 1]) if B else (np.zeros((0, K), np.int64),) * 2
    lengths = ends - starts
    bad = (lengths < 0) | (starts < 0) | (ends > p.shape[1])  # memory written since the check
    if bad.any():
        i = int(np.argmax(bad.ravel()))
        raise ValueError(f"{what}: the compressed index changed after validation (a slice [{int(starts.flat[i])}, "
                         f"{int(ends.flat[i])}) of {p.shape[1]} entries)")
    out_c, out_p, out_v = _slot_outputs(parts, lengths, what)
    _kernels.gather_rows(c, p, v, rows, out_c, out_p, out_v,
                         num_threads(threads, out_p.shape[1] * max(v.shape[2], 1) + B * K))
    return out_c, out_p, out_v


def remap_plain(parts, index: np.ndarray, nondecreasing: bool, what: str, threads=None):
    """Every slice's entries mapped through ``index`` (new plain j gets old plain ``index[j]``;
    ``nondecreasing``: ``index`` is, so the entries of a slice stay sorted without a sort)."""
    c, p, v = parts.compressed, parts.plain, parts.values
    B, n = c.shape[0], c.shape[1] - 1
    check_fits(c.dtype, parts.layout.name, **{"ncols" if parts.layout.compressed_rows else "nrows": index.shape[0]})
    first, targets, p = _selection_map(index, p, parts.plain_size)
    nt = num_threads(threads, p.size * max(v.shape[2], 1) + c.size)
    counts = np.empty((B, n), dtype=np.int64)
    _kernels.plain_count(c, p, first, counts, nt)
    out_c, out_p, out_v = _slot_outputs(parts, counts, what)
    max_row = int(counts.max()) if counts.size else 0
    _kernels.plain_fill(c, p, v, first, targets, out_c, out_p, out_v, not nondecreasing, max_row, nt)
    return out_c, out_p, out_v


def narrow_plain(parts, start: int, length: int, threads=None):
    """Plain indices in ``[start, start + length)`` (block units) of every slice, shifted to
    start at 0: a binary search per slice (the slices are sorted) and one segment copy."""
    c, p, v = parts.compressed, parts.plain, parts.values
    B, n = c.shape[0], c.shape[1] - 1
    starts = np.empty((B, n), dtype=np.int64)
    counts = np.empty((B, n), dtype=np.int64)
    _kernels.plain_range(c, p, start, start + length, starts, counts, num_threads(threads, c.size * 16))
    out_c, out_p, out_v = _slot_outputs(parts, counts, "narrow")
    _kernels.copy_segments(p, v, starts, out_c, start, out_p, out_v, num_threads(threads, out_v.size + c.size))
    return out_c, out_p, out_v


def cat_plain(parts: list, sizes: list, limits: dict, threads=None):
    """The tensors of ``parts`` (one layout, index and value dtype, equal compressed sizes)
    side by side along the plain dim: input k's plain indices shifted by the sizes (block
    units) of the inputs before it; each slice keeps its entries sorted. ``limits``: the
    result's sizes to check against the index dtype besides its nnz (names as the error
    gives them)."""
    p0 = parts[0]
    c_dt = p0.compressed.dtype
    B = p0.compressed.shape[0]
    out_c = np.zeros_like(p0.compressed, dtype=np.int64)
    for q in parts:
        out_c += q.compressed
    total = int(out_c[0, -1]) if B else 0
    check_fits(c_dt, p0.layout.name, nnz=total, **limits)
    cursor = out_c[:, :-1].copy()
    out_p = np.empty((B, total), dtype=c_dt)
    out_v = np.empty((B, total, p0.values.shape[2]), dtype=p0.values.dtype)
    nt = num_threads(threads, out_v.size + out_p.size)
    offset = 0
    for q, s in zip(parts, sizes):
        _kernels.cat_rows(q.compressed, q.plain, q.values, offset, cursor, out_p, out_v, nt)
        offset += s
    return out_c.astype(c_dt), out_p, out_v


def cat_compressed(parts: list, limits: dict, threads=None):
    """The tensors of ``parts`` (one layout, index and value dtype, equal plain sizes) one after
    the other along the compressed dim: input k's compressed index shifted by the nnz of the
    inputs before it, the entries of every batch concatenated. ``limits`` as for :func:`cat_plain`."""
    p0 = parts[0]
    c_dt = p0.compressed.dtype
    B = p0.compressed.shape[0]
    total = sum(q.plain.shape[1] for q in parts)
    check_fits(c_dt, p0.layout.name, nnz=total, **limits)
    pieces, off = [], 0
    for q in parts:
        pieces.append(q.compressed[:, :-1] + c_dt.type(off))
        off += q.plain.shape[1]
    pieces.append(np.full((B, 1), total, dtype=c_dt))
    out_c = np.concatenate(pieces, axis=1).astype(c_dt, copy=False)
    return (out_c, np.concatenate([q.plain for q in parts], axis=1),
            np.concatenate([q.values for q in parts], axis=1))


def index_select_coo(indices: np.ndarray, raw: np.ndarray, d: int, idx: np.ndarray, shape: tuple, threads=None):
    """The entries of COO ``indices`` (C-contiguous, coalesced or not) and raw value rows ``raw``
    whose coordinate along ``d`` is in ``idx`` (repeats give copies), that coordinate replaced by
    its position in ``idx``: ``(indices, raw values)``. ``shape``: the input's; an index out of
    it raises InvariantError."""
    first, targets, row = _selection_map(idx, indices[d], shape[d])
    if row is not indices[d]:  # slots in place of the coordinates: their bounds checked here, not in the kernel
        bad = (indices[d] < 0) | (indices[d] >= shape[d])
        if bad.any():
            e = int(np.argmax(bad))
            j = int(indices[d, e])
            raise_coo_error(("C4" if j < 0 else "C5", d, e, j), shape)
        indices = indices.copy()
        indices[d] = row
    found, oi, ov = _kernels.coo_index_select(indices, raw, d, first, targets,
                                              num_threads(threads, indices.shape[1] * (indices.shape[0] + raw.shape[1])))
    if found is not None:
        raise_coo_error(found, shape)
    return oi, ov


def triangle_flags(indices: np.ndarray, r: int, c: int, k: int, upper: bool, scale=(1, 1),
                   threads=None) -> np.ndarray:
    """Whether each COO entry lies on the kept side of diagonal ``k`` of index rows ``r``, ``c``
    scaled by ``scale`` (a block's size): ``col * sc - row * sr <= k`` (lower) or ``>= k`` (upper)."""
    off = indices[c].astype(np.int64) * scale[1] - indices[r].astype(np.int64) * scale[0]
    return off >= k if upper else off <= k


def nonzero_rows(values: np.ndarray, threads=None) -> np.ndarray:
    """Whether each row of ``values`` (N, ...) holds a nonzero item (-0.0 is zero, NaN is not)."""
    return (values.reshape(values.shape[0], math.prod(values.shape[1:])) != 0).any(axis=1)


def keep_coo(indices: np.ndarray, values: np.ndarray, flags: np.ndarray, threads=None) -> tuple:
    """``(indices, values)`` of the COO entries whose ``flags`` are set, in order."""
    return np.compress(flags, indices, axis=1), np.compress(flags, values, axis=0)


def narrow_coo(indices: np.ndarray, values: np.ndarray, d: int, start: int, length: int, threads=None) -> tuple:
    """``(indices, values)`` of the COO entries whose coordinate along ``d`` is in
    ``[start, start + length)``, in input order, that coordinate shifted to start at 0."""
    coord = indices[d]
    keep = (coord >= start) & (coord < start + length)
    out = np.compress(keep, indices, axis=1)
    out[d] -= start
    return out, values[keep]


def kron_coo(ia: np.ndarray, va: np.ndarray, ib: np.ndarray, vb: np.ndarray, bshape: tuple, index_dtype,
             both_sorted: bool = False, threads=None) -> tuple:
    """The COO entries of the Kronecker product of entries ``(ia, va)`` and ``(ib, vb)`` (one value
    dtype, in bounds), ``(indices, values, ordered)``: pair (i, j) at ``ia[:, i] * bshape + ib[:, j]``
    with value ``va[i] * vb[j]``. ``ordered``: the pairs come sorted.

    Both operands sorted (``both_sorted``), with one or two sparse dims:
    :func:`sparsetensor._lib._select.kron_rows` writes the pairs run of rows by run of rows,
    sorted. Else every ``i`` with every ``j`` in turn, as the device orders them."""
    na, nb = ia.shape[1], ib.shape[1]
    S = ia.shape[0]
    if S not in (1, 2) or not both_sorted:
        step = np.asarray(bshape, np.int64)[:, None]
        idx = (np.repeat(ia.astype(np.int64), nb, axis=1) * step + np.tile(ib.astype(np.int64), (1, na)))
        return idx.astype(index_dtype, copy=False), np.repeat(va, nb) * np.tile(vb, na), False
    dtype = va.dtype
    if S == 1:  # a vector is one row
        ia, ib, bshape = np.vstack([0 * ia, ia]), np.vstack([0 * ib, ib]), (1,) + tuple(bshape)
    ia, ib = (np.ascontiguousarray(x, dtype=np.int64) for x in (ia, ib))
    wt = work_dtype(dtype)  # float16 multiplies in float32 and rounds once, as NumPy
    kt = bits_dtype(wt)
    out = np.empty((2, na * nb), index_dtype)
    values = np.empty(na * nb, wt)
    _kernels.kron_rows(ia, np.ascontiguousarray(va, dtype=wt).view(kt), _runs(ia[0]), ib,
                       np.ascontiguousarray(vb, dtype=wt).view(kt), _runs(ib[0]), bshape[0], bshape[1], out,
                       values.view(kt), num_threads(threads, na * nb))
    return (out[1:] if S == 1 else out), values.astype(dtype, copy=False), True


def _runs(row: np.ndarray) -> np.ndarray:
    """The starts of the runs of equal items of ``row``, then its length."""
    starts = np.flatnonzero(row[1:] != row[:-1]) + 1
    return np.concatenate([[0], starts, [row.size]]).astype(np.int64) if row.size else np.zeros(1, np.int64)


def keep_compressed(c: np.ndarray, p: np.ndarray, v: np.ndarray, flags: np.ndarray, batch: tuple, what: str,
                    threads=None) -> tuple:
    """The members ``(compressed, plain, values)`` of the entries whose ``flags`` (one per entry of
    the ``(B, nnz)`` standard form) are set, every batch keeping the same number (else ValueError
    naming ``what``): a count per slice, then each slice's kept entries copied."""
    B, nnz = p.shape
    n = c.shape[-1] - 1
    flags = np.ascontiguousarray(flags, dtype=bool).reshape(B, nnz).view(np.uint8)
    nt = num_threads(threads, B * (n + nnz))
    counts = np.empty((B, n), np.int64)
    _kernels.flagged_count(c, flags, counts, nt)
    per_batch = counts.sum(axis=1)
    same_nnz(per_batch, batch, what)
    kept = int(per_batch[0]) if B else 0
    out_c = np.zeros((B, n + 1), c.dtype)
    np.cumsum(counts, axis=1, out=out_c[:, 1:])
    out_p = np.empty((B, kept), p.dtype)
    out_v = np.empty((B, kept) + v.shape[2:], v.dtype)
    E = math.prod(v.shape[2:])
    _kernels.keep_flagged(c, p, raw_view(np.ascontiguousarray(v).reshape(B, nnz, E)), flags, out_c, out_p,
                          raw_view(out_v.reshape(B, kept, E)), nt)
    return out_c, out_p, out_v
