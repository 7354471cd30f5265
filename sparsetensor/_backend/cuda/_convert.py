"""Layout conversions on the device: coo <-> csr, csr <-> csc, bsr <-> bsc, and the mT view.

Semantics are the CPU's (:func:`sparsetensor.ops.convert.to_sparse`): batch dims become
the leading sparse dims of a COO result and come back from them; results are
canonical (compressed) or coalesced (COO); an uncoalesced COO input is coalesced
first, a compressed input not known canonical is checked (and repaired if only 5.6
fails). A coo -> csr result shares its plain indices and values with the COO tensor,
as on the CPU.

The transposes are stable radix sorts of ``batch * plain_size + plain index`` (a
counting sort digit by digit), so row order is kept within every column. Grouping
entries into blocks (csr -> bsr) sorts the entries by block (``block_keys``), numbers
the runs of equal keys and scatters every entry into its zero-filled block; expanding
blocks (bsr -> csr) writes every item of every block where the new compressed index
says (every item, zeros included, as on the CPU). The route through these steps is the
CPU's (:func:`sparsetensor._backend.cpu._convert._route`): canonical results are unique,
so the device's equal the CPU's bitwise.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ..._core import _layout as L
from ..._core._canonical import same_nnz
from ..._core._dtypes import check_fits
from ..._core._tensor import COOTensor, CompressedTensor
from ...cuda import _primitives as P
from ._coalesce import _runs, _starts, checked, flat_keys
from ._validate import keep_snapshot, snapshot
from ...cuda._classes import CudaCOOTensor

__all__ = ["convert", "transpose_compressed"]

_PAYLOAD_BITS = 64  # the sort's payload items (tests lower it to take the other path)


# plain index array -> its transpose's (compressed index array, shape, compressed, plain, perm), or _FIRST
_kept_transposes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FIRST = object()


def _kept(t):
    """The kept ``(compressed, plain, perm)`` of the transpose of ``t``'s index arrays; ``_FIRST``
    where this transpose is to keep them (their second); None where none is kept (a first
    transpose, now marked). Arrays another library holds keep theirs in a
    :class:`~._validate.Snapshot` (with a copy of the arrays), used where the check that every
    op makes of them found them unchanged."""
    c, p, shape = t.compressed_indices(), t.plain_indices(), t.shape
    if c._shared or p._shared:
        _kept_transposes.pop(p, None)
        snap = snapshot(t)
        if snap is False:
            return None
        if snap is not None and snap.confirms(c, p) and not (snap.derived[0]._shared or snap.derived[1]._shared):
            return snap.derived
        return _FIRST  # seen before, or changed since, or ours handed out: made again and kept
    hit = _kept_transposes.get(p)
    if hit is None:
        _kept_transposes[p] = _FIRST
        return None
    if hit is not _FIRST and (hit[0]() is not c or hit[1] != shape or hit[2]._shared or hit[3]._shared):
        hit = _kept_transposes[p] = _FIRST  # other arrays or another shape, or ours handed out: made again
    return hit if hit is _FIRST else hit[2:]


def transpose_compressed(t, keep: bool = False):
    """csr -> csc, csc -> csr, bsr -> bsc, bsc -> bsr of a canonical device tensor (the same
    matrix in the other orientation; blocks move whole).

    ``keep`` (the products' transposes, made again for every product of a csc matrix or of a
    csr matrix's transpose view): from the second transpose of the same index arrays (ours, not
    shared) on, the new indices and the permutation of the entries are kept while the arrays
    live, and a transpose is a gather of the values."""

    dev = t.values()._device
    m = t.batch_dim
    batch = t.shape[:m]
    B = math.prod(batch)
    c, p, v = t.compressed_indices(), t.plain_indices(), t.values()
    n, nnz, ps = c.shape[-1] - 1, t.nnz, t.plain_size
    N = B * nnz
    ik = (P.index_key(c.dtype),)
    out_layout = t.layout.transposed
    tail = v.shape[m + 1:]
    if N == 0:
        comp = P.zeros(dev, batch + (ps + 1,), c.dtype)
        # (no batch, or no entry: a batch shape with a 0 keeps its nnz, as on the CPU)
        return CompressedTensor(comp, P.empty(dev, batch + (nnz,), c.dtype), P.empty(dev, v.shape, v.dtype),
                                t.shape, out_layout, True)
    entries = v.reshape((N,) + tail)
    kept = _kept(t) if keep else None
    if kept is not None and kept is not _FIRST:
        comp, plain, perm = kept
        return CompressedTensor(comp, plain, P.gather_rows(dev, entries, perm, N).reshape(v.shape), t.shape,
                                out_layout, True)
    keys = P.empty(dev, (N,), np.uint64)
    P.run(dev, "convert.cu", "plain_keys", ik, N, p, B, nnz, ps, keys)
    bits = max(B * ps - 1, 0).bit_length()
    rbits = max(n - 1, 0).bit_length()
    if kept is None and (N - 1).bit_length() + rbits <= _PAYLOAD_BITS:  # position and row in one payload: no gather of rows
        packed = P.empty(dev, (N,), np.uint64)
        P.run(dev, "convert.cu", "packed_major", ik, N, c, B, n, nnz, rbits, packed)
        sorted_keys, payload = P.radix_sort(dev, keys, bits, packed)
        plain = P.empty(dev, (N,), c.dtype)
        values = P.empty(dev, entries.shape, v.dtype)
        W = math.prod(tail)
        P.run(dev, "convert.cu", "unpack_major", (P.raw_key(v.itemsize),) + ik, N * max(W, 1), payload, N, rbits, entries,
              W, plain, values)
    else:
        major = P.empty(dev, (N,), c.dtype)
        P.run(dev, "convert.cu", "expand_major", ik, N, c, B, n, nnz, major)
        sorted_keys, perm = P.radix_sort(dev, keys, bits)
        plain = P.gather_rows(dev, major, perm, N)
        values = P.gather_rows(dev, entries, perm, N)
    ptr = P.empty(dev, (B * ps + 1,), np.int64)
    P.run(dev, "scan.cu", "lower_bounds", (), B * ps + 1, sorted_keys, N, B * ps, ptr)
    comp = P.batch_offsets(dev, ptr, B, ps, 1, c.dtype).reshape(batch + (ps + 1,))
    plain = plain.reshape(batch + (nnz,))
    if kept is _FIRST and (c._shared or p._shared):
        keep_snapshot(t, (comp, plain, perm))
    elif kept is _FIRST:
        _kept_transposes[p] = (weakref.ref(c), t.shape, comp, plain, perm)
    return CompressedTensor(comp, plain, values.reshape(v.shape), t.shape, out_layout, True)


def _rows_to_coo(t):
    """A canonical device csr tensor -> coalesced COO (batch dims lead the sparse dims)."""

    dev = t.values()._device
    m = t.batch_dim
    batch = t.shape[:m]
    B = math.prod(batch)
    c, p, v = t.compressed_indices(), t.plain_indices(), t.values()
    n, nnz = c.shape[-1] - 1, t.nnz
    N = B * nnz
    check_fits(c.dtype, "coo", **{f"size[{d}]": s for d, s in enumerate(batch)})
    ik = (P.index_key(c.dtype),)
    major = P.empty(dev, (N,), c.dtype)
    P.run(dev, "convert.cu", "expand_major", ik, N, c, B, n, nnz, major)
    idx = P.empty(dev, (m + 2, N), c.dtype)
    bshape = P.ints(dev, batch) if m else None
    P.run(dev, "convert.cu", "rows_to_coo_indices", ik, N, major, p, B, nnz, m, bshape, idx)
    dense = t.shape[m + 2:]
    return COOTensor(idx, v.reshape((N,) + dense), t.shape, True, True)  # of a canonical tensor: valid


def _coo_to_rows(t):
    """Coalesced COO with sparse_dim = k + 2 -> canonical csr with k batch dims; the plain
    indices and values are views of the COO's last index row and its values."""

    S = t.sparse_dim
    if S < 2:
        raise ValueError(f"coo -> compressed needs sparse_dim >= 2 (batch dims + rows, cols), got sparse_dim={S}")
    t = t.coalesce()  # itself once coalesced and checked (the indices address memory below)
    dev = t.values()._device
    idx, vals = t.indices(), t.values()
    batch, (rows, _), dense = t.shape[:S - 2], t.shape[S - 2:S], t.shape[S:]
    B, N = math.prod(batch), t.nnz
    ik = (P.index_key(idx.dtype),)
    shape = P.ints(dev, t.shape[:S - 1])
    row_keys = P.empty(dev, (N,), np.uint64)
    P.run(dev, "coalesce.cu", "coo_keys", ik, N, idx, S - 1, N, shape, row_keys)
    ptr = P.empty(dev, (B * rows + 1,), np.int64)
    P.run(dev, "scan.cu", "lower_bounds", (), B * rows + 1, row_keys, N, B * rows, ptr)
    bounds = P.read_ints(dev, P.take_strided(dev, ptr, rows, B + 1)) if B else np.zeros(1, np.int64)
    per_batch = np.diff(bounds)
    if per_batch.size and (per_batch != per_batch[0]).any():
        from ..._core._canonical import same_nnz

        same_nnz(per_batch, batch, "coo -> csr: every batch (the leading sparse dims but two) must have the same nnz")
    nnz = int(per_batch[0]) if B else 0
    check_fits(idx.dtype, "csr", nnz=nnz)
    comp = P.batch_offsets(dev, ptr, B, rows, 1, idx.dtype)
    plain = idx[S - 1].reshape(batch + (nnz,))
    values = vals.reshape(batch + (nnz,) + dense)
    return CompressedTensor(comp.reshape(batch + (rows + 1,)), plain, values, t.shape, L.sparse_csr, True)


def _block_geometry(layout, bs: tuple) -> tuple:
    """(bc, bp, sc, sp): the block extents along the compressed and plain dims, and how far an
    item moves in the flattened (Rb, Cb) block per step along each (as on the CPU)."""
    rb, cb = bs
    return (rb, cb, cb, 1) if layout.compressed_rows else (cb, rb, 1, cb)


def _members(t):
    """(dev, batch, B, compressed, plain, values as (N, items) rows, entry shape) of a compressed ``t``."""
    m = t.batch_dim
    batch = t.shape[:m]
    v = t.values()
    tail = v.shape[m + 1:]
    return (v._device, batch, math.prod(batch), t.compressed_indices(), t.plain_indices(),
            v.reshape((math.prod(batch) * t.nnz, math.prod(tail))), tail)


def _group(t, bs: tuple):
    """csr -> bsr, csc -> bsc of a canonical device tensor: every block that holds an entry, the
    items no entry gives zero (explicit zeros kept: a block exists where the pattern has one)."""
    layout = L.sparse_bsr if t.layout.compressed_rows else L.sparse_bsc
    bc, bp, sc, sp = _block_geometry(t.layout, bs)
    dev, batch, B, c, p, v, dense = _members(t)
    n, nnz, ps = c.shape[-1] - 1, t.nnz, t.plain_size
    nbr, nbp, N, RC = n // bc, ps // bp, B * nnz, bc * bp
    span = B * nbr * nbp
    if span > 1 << 64:
        raise NotImplementedError(f"to_sparse {t.layout.name} -> {layout.name} on cuda: {B} x {nbr} x {nbp} blocks "
                                  "exceed a 64-bit key")
    ik = (P.index_key(c.dtype),)
    major = P.empty(dev, (N,), c.dtype)
    P.run(dev, "convert.cu", "expand_major", ik, N, c, B, n, nnz, major)
    keys = P.empty(dev, (N,), np.uint64)
    P.run(dev, "convert.cu", "block_keys", ik, N, major, p, B, nnz, bc, nbr, bp, nbp, keys)
    sorted_keys, perm = P.radix_sort(dev, keys, max(span - 1, 0).bit_length())
    if N:
        scan, total = _runs(dev, sorted_keys, N)
        # batch b owns sorted positions [b * nnz, (b + 1) * nnz) (b leads the key)
        per_batch = np.diff(P.read_ints(dev, P.take_strided(dev, scan, nnz, B + 1)))
    else:
        scan, total, per_batch = None, 0, np.zeros(B, np.int64)
    same_nnz(per_batch, batch, f"{t.layout.name} -> {layout.name} with blocksize {bs}: every batch must have the "
             "same number of blocks")
    nnzb = int(per_batch[0]) if B else 0
    out_v = P.zeros(dev, (total, RC * v.shape[1]), v.dtype)
    out_p = P.empty(dev, (total,), c.dtype)
    ptr = (P.empty if total else P.zeros)(dev, (B * nbr + 1,), np.int64)
    if total:
        starts = _starts(dev, scan, N, total)
        brow_keys = P.empty(dev, (total,), np.uint64)
        P.run(dev, "convert.cu", "split_keys", ik, total, sorted_keys, starts, total, nbp, brow_keys, out_p)
        P.run(dev, "scan.cu", "lower_bounds", (), B * nbr + 1, brow_keys, total, B * nbr, ptr)
        P.run(dev, "convert.cu", "group_scatter", (P.raw_key(v.itemsize),) + ik, N * v.shape[1], perm, scan, major,
              p, N, bc, bp, sc, sp, v.shape[1], v, out_v)
    comp = P.batch_offsets(dev, ptr, B, nbr, 1, c.dtype)
    values = out_v.reshape(batch + (nnzb,) + tuple(bs) + dense)
    return CompressedTensor(comp.reshape(batch + (nbr + 1,)), out_p.reshape(batch + (nnzb,)), values, t.shape,
                            layout, True)


def _expand(t):
    """bsr -> csr, bsc -> csc of a canonical device tensor: every item of every block an entry."""
    layout = L.sparse_csr if t.layout.compressed_rows else L.sparse_csc
    bs = t.blocksize
    bc, bp, sc, sp = _block_geometry(t.layout, bs)
    dev, batch, B, c, p, v, _ = _members(t)
    n, nnz, RC = c.shape[-1] - 1, t.nnz, bc * bp
    nnz_out, W = nnz * RC, v.shape[1] // RC
    check_fits(c.dtype, layout.name, nnz=nnz_out)
    ik = (P.index_key(c.dtype),)
    out_c = P.empty(dev, (B, n * bc + 1), c.dtype)
    P.run(dev, "convert.cu", "expand_compressed", ik, B * (n * bc + 1), c, B, n, bc, bp, out_c)
    out_p = P.empty(dev, (B * nnz_out,), c.dtype)
    out_v = P.empty(dev, (B * nnz_out, W), v.dtype)
    P.run(dev, "convert.cu", "expand_blocks", (P.raw_key(v.itemsize),) + ik, B * nnz_out * max(W, 1), c, p, v, B, n, nnz, bc,
          bp, sc, sp, W, out_c, out_p, out_v)
    m = t.batch_dim
    dense = t.shape[m + 2:]
    return CompressedTensor(out_c.reshape(batch + (n * bc + 1,)), out_p.reshape(batch + (nnz_out,)),
                            out_v.reshape(batch + (nnz_out,) + dense), t.shape, layout, True)


def _route(t, layout, bs: tuple):
    """Canonical device ``t`` transposed, grouped and expanded into ``layout`` with blocksize ``bs``
    (the CPU's route: blocks transpose before they expand, entries before they group)."""
    src = t.layout
    if src.blocked and not (layout.blocked and t.blocksize == bs):
        if not layout.blocked and layout.compressed_rows != src.compressed_rows:
            t = transpose_compressed(t)
        t = _expand(t)
    if t.layout.blocked:
        return t if t.layout is layout else transpose_compressed(t)
    if layout.compressed_rows != t.layout.compressed_rows:
        t = transpose_compressed(t)
    return _group(t, bs) if layout.blocked else t


def _batched_blocks(t, layout, bs):
    """Batched device COO -> bsr/bsc: the batches stacked into one matrix (rows ``b * M + i``),
    grouped into blocks, and cut back into batches, which must hold the same number of blocks
    (their numbers of elements may differ), as on the CPU."""
    S = t.sparse_dim
    batch, (M, N) = t.shape[:S - 2], t.shape[S - 2:S]
    B, Mb = math.prod(batch), M // bs[0]
    t = t.coalesce()  # bounds checked (C4-C6)
    dev = t.values()._device
    flat = COOTensor(flat_keys(t.indices(), batch, M, N, False), t.values(), (B * M, N) + t.shape[S:], True, True)
    stacked = convert(flat, L.sparse_bsr, bs)  # int64 indices
    c = stacked.compressed_indices()
    per_batch = np.diff(P.read_ints(dev, P.take_strided(dev, c, Mb, B + 1)))
    same_nnz(per_batch, batch, f"coo -> {layout.name}: every batch must have the same nnz (number of blocks)")
    nb = int(per_batch[0]) if B else 0
    check_fits(t.index_dtype, layout.name, nnz=nb)
    comp = P.batch_offsets(dev, c, B, Mb, 1, t.index_dtype).reshape(batch + (Mb + 1,))
    plain = stacked.plain_indices().astype(t.index_dtype, copy=False).reshape(batch + (nb,))
    values = stacked.values().reshape(batch + (nb,) + stacked.values().shape[1:])
    out = CompressedTensor(comp, plain, values, t.shape, L.sparse_bsr, True)
    return out if layout is L.sparse_bsr else transpose_compressed(out)


def convert(t, layout, bs):
    """``t`` in ``layout`` with blocksize ``bs`` (checked by :func:`sparsetensor.ops.convert.check_target`;
    another layout or blocksize than ``t``'s): the ``convert`` kernel of :mod:`._backend`."""

    if isinstance(t, CudaCOOTensor) and layout.blocked and t.sparse_dim > 2:
        return _batched_blocks(t, layout, bs)
    src = _coo_to_rows(t) if isinstance(t, CudaCOOTensor) else checked(t)
    if layout is L.sparse_coo:
        if not src.layout.compressed_rows:
            src = transpose_compressed(src)
        return _rows_to_coo(_expand(src) if src.layout.blocked else src)
    return _route(src, layout, bs)
