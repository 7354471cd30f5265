"""Layout conversions on the device: coo <-> csr, csr <-> csc, bsr <-> bsc, and the mT view.

Semantics are the CPU's (:func:`sparsetensor.ops.convert.to_sparse`): batch dims become
the leading sparse dims of a COO result and come back from them; results are
canonical (compressed) or coalesced (COO); an uncoalesced COO input is coalesced
first, a compressed input not known canonical is checked (and repaired if only 5.6
fails). A coo -> csr result shares its plain indices and values with the COO tensor,
as on the CPU.

The transposes are stable radix sorts of ``batch * plain_size + plain index`` (a
counting sort digit by digit), so row order is kept within every column. Grouping
entries into blocks (csr -> bsr) and expanding blocks (bsr -> csr/coo) have no GPU
kernel yet and raise NotImplementedError.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core import _layout as L
from ..._core._dtypes import check_fits
from ..._core._tensor import COOTensor, CompressedTensor
from ...cuda import _primitives as P
from ._coalesce import checked
from ...cuda._classes import CudaCOOTensor

__all__ = ["convert", "transpose_compressed"]

_PAYLOAD_BITS = 64  # the sort's payload items (tests lower it to take the other path)


def transpose_compressed(t):
    """csr -> csc, csc -> csr, bsr -> bsc, bsc -> bsr of a canonical device tensor (the same
    matrix in the other orientation; blocks move whole)."""

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
        return CompressedTensor(comp, P.empty(dev, batch + (0,), c.dtype), P.empty(dev, v.shape, v.dtype),
                                    t.shape, out_layout, True)
    keys = P.empty(dev, (N,), np.uint64)
    P.run(dev, "convert.cu", "plain_keys", ik, N, p, B, nnz, ps, keys)
    bits = max(B * ps - 1, 0).bit_length()
    rbits = max(n - 1, 0).bit_length()
    entries = v.reshape((N,) + tail)
    if (N - 1).bit_length() + rbits <= _PAYLOAD_BITS:  # position and row in one payload: no gather of rows
        packed = P.empty(dev, (N,), np.uint64)
        P.run(dev, "convert.cu", "packed_major", ik, N, c, B, n, nnz, rbits, packed)
        sorted_keys, payload = P.radix_sort(dev, keys, bits, packed)
        plain = P.empty(dev, (N,), c.dtype)
        values = P.empty(dev, entries.shape, v.dtype)
        W = math.prod(tail)
        P.run(dev, "convert.cu", "unpack_major", (P.raw_key(v.itemsize),) + ik, N * W, payload, N, rbits, entries,
              W, plain, values)
    else:
        major = P.empty(dev, (N,), c.dtype)
        P.run(dev, "convert.cu", "expand_major", ik, N, c, B, n, nnz, major)
        sorted_keys, perm = P.radix_sort(dev, keys, bits)
        plain = P.gather_rows(dev, major, perm, N)
        values = P.gather_rows(dev, entries, perm, N)
    ptr = P.empty(dev, (B * ps + 1,), np.int64)
    P.run(dev, "scan.cu", "lower_bounds", (), B * ps + 1, sorted_keys, N, B * ps, ptr)
    comp = P.batch_offsets(dev, ptr, B, ps, 1, c.dtype)
    return CompressedTensor(comp.reshape(batch + (ps + 1,)), plain.reshape(batch + (nnz,)),
                                values.reshape(v.shape), t.shape, out_layout, True)


def _rows_to_coo(t):
    """A canonical device csr tensor -> coalesced COO (batch dims lead the sparse dims)."""

    if t.layout.blocked:
        raise NotImplementedError(f"to_sparse {t.layout.name} -> coo on cuda (expanding blocks into entries) "
                                  "has no GPU kernel; convert on the CPU")
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
    bshape = P.from_host(dev, np.asarray(batch, dtype=np.int64)) if m else None
    P.run(dev, "convert.cu", "rows_to_coo_indices", ik, N, major, p, B, nnz, m, bshape, idx)
    dense = t.shape[m + 2:]
    return COOTensor(idx, v.reshape((N,) + dense), t.shape, True)


def _coo_to_rows(t):
    """Coalesced COO with sparse_dim = k + 2 -> canonical csr with k batch dims; the plain
    indices and values are views of the COO's last index row and its values."""

    S = t.sparse_dim
    if S < 2:
        raise ValueError(f"coo -> compressed needs sparse_dim >= 2 (batch dims + rows, cols), got sparse_dim={S}")
    if not t.is_coalesced():
        t = t.coalesce()
    dev = t.values()._device
    idx, vals = t.indices(), t.values()
    batch, (rows, _), dense = t.shape[:S - 2], t.shape[S - 2:S], t.shape[S:]
    B, N = math.prod(batch), t.nnz
    ik = (P.index_key(idx.dtype),)
    shape = P.from_host(dev, np.asarray(t.shape[:S - 1], dtype=np.int64))
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


def convert(t, layout, bs):
    """``t`` in ``layout`` with blocksize ``bs`` (checked by :func:`sparsetensor.ops.convert.check_target`;
    another layout or blocksize than ``t``'s): the ``convert`` kernel of :mod:`._backend`."""

    if isinstance(t, CudaCOOTensor):
        if layout.blocked:
            raise NotImplementedError(f"to_sparse coo -> {layout.name} on cuda (grouping entries into blocks) "
                                      "has no GPU kernel")
        rows = _coo_to_rows(t)
        return rows if layout is L.sparse_csr else transpose_compressed(rows)
    src = checked(t)
    if layout is L.sparse_coo:
        return _rows_to_coo(src if src.layout.compressed_rows else transpose_compressed(src))
    if layout.blocked != src.layout.blocked or (layout.blocked and bs != src.blocksize):
        what = "grouping entries into blocks" if layout.blocked and not src.layout.blocked else (
            "expanding blocks into entries" if src.layout.blocked and not layout.blocked else "changing the blocksize")
        raise NotImplementedError(f"to_sparse {src.layout.name} -> {layout.name} on cuda ({what}) has no GPU kernel")
    return transpose_compressed(src)
