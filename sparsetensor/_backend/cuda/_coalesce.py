"""Coalescing on the device: COO coalesce and compressed sum_duplicates.

Both linearise the coordinates of every entry into one u64 key, sort the keys with
the device radix sort (stable, so duplicates keep their input order), mark the
runs of equal keys, scan the marks, and write one entry per run: its coordinates
from the key, its value the sum of the run in input order (float16 in float32,
rounded once). The semantics are the CPU's (:mod:`sparsetensor._backend.cpu._coalesce`).

Summing needs float16/32/64 or complex values; other dtypes coalesce only when no
key repeats (a TypeError otherwise).
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._canonical import UnequalBatches
from ..._core._shape_checks import element_strides
from ..._core._tensor import COOTensor, CompressedTensor
from ..._core._validate import raise_compressed_error, raise_coo_error
from ...cuda import _primitives as P
from ._validate import check_compressed_bounds, compressed_report, coo_report
from ...cuda._classes import CudaCOOTensor, CudaCompressedTensor

__all__ = ["coalesce", "sum_duplicates", "checked", "UnequalBatches", "batch_matrices", "reshape_keys"]

_U64_SPAN = 1 << 64


def _sum_runs(dev, values2, perm, starts, nout, op: str):
    """Sum the values (N, W) of every run into (nout, W), or gather them when no run repeats."""
    N, W = values2.shape
    if nout == N:  # no duplicates: a gather in sorted order
        return P.gather_rows(dev, values2, perm, nout)
    if values2.dtype == np.bool_:  # NumPy's sum of bools is their or: counted in int64, tested against 0
        return _sum_runs(dev, values2.astype(np.int64), perm, starts, nout, op).astype(np.bool_)
    key = P.arith_key(values2.dtype, f"{op} of duplicate entries")
    out = P.empty(dev, (nout, W), values2.dtype)
    P.run(dev, "coalesce.cu", "segment_sum", (key,), nout * W, values2, perm, starts, nout, W, out)
    return out


def flat_keys(idx, batch: tuple, M: int, K: int, batched_cols: bool):
    """Rows ``b * M + i`` (0 for a vector) and columns ``b * K + k`` (``batched_cols``) or ``k`` of
    batched COO indices ``idx`` (``S, nnz``: batch dims, the row when ``S >= 2``, the column; in
    bounds): an int64 ``(2, nnz)`` device array of the row-major keys over ``batch + (M,)`` and
    ``batch + (K,)``."""
    dev = idx._device
    S, nnz = idx.shape
    ik = (P.index_key(idx.dtype),)
    out = P.empty(dev, (2, nnz), np.int64)
    if not nnz:
        return out
    rows, cols = out[0], out[1]
    P.run(dev, "coalesce.cu", "coo_keys", ik, nnz, idx, S - 1, nnz, P.ints(dev, batch + (M,)), rows)
    if batched_cols:  # the batch rows and the column row, side by side
        both = P.empty(dev, (S - 1, nnz), idx.dtype)
        item = idx.itemsize * nnz
        dev.copy_dtod(both._ptr, idx._ptr, (S - 2) * item)
        dev.copy_dtod(both._ptr + (S - 2) * item, idx._ptr + (S - 1) * item, item)
        P.run(dev, "coalesce.cu", "coo_keys", ik, nnz, both, S - 1, nnz,
              P.ints(dev, batch + (K,)), cols)
    else:
        # held until the copy (a temporary's memory is freed at once); int64 columns are not copied twice
        col = idx[S - 1].astype(np.int64, copy=False)
        dev.copy_dtod(cols._ptr, col._ptr, 8 * nnz)
    return out


def reshape_keys(idx, old_shape: tuple, new_shape: tuple, order: str, index_dtype):
    """The coordinates over ``new_shape`` (``index_dtype``, ``(len(new_shape), nnz)``) of the entries
    of device COO indices ``idx`` over ``old_shape`` (in bounds), their C or F order offsets kept."""
    dev = idx._device
    S, nnz = idx.shape
    T = len(new_shape)
    out = P.empty(dev, (T, nnz), index_dtype)
    P.run(dev, "coalesce.cu", "coo_reshape", (P.index_key(idx.dtype), P.index_key(index_dtype)), nnz, idx, S, nnz,
          P.ints(dev, element_strides(old_shape, order)), T, P.ints(dev, element_strides(new_shape, order)), P.ints(dev, new_shape),
          out)
    return out


def _runs(dev, sorted_keys, n):
    """``(scan, nout)``: exclusive scan of the run heads of sorted keys, and the number of runs."""
    heads = P.empty(dev, (n,), np.int64)
    P.run(dev, "coalesce.cu", "run_heads", (), n, sorted_keys, n, heads)
    scan = P.exclusive_scan(dev, heads)
    return scan, int(P.read_ints(dev, scan[n:n + 1])[0])


def _starts(dev, scan, n, nout):
    starts = P.empty(dev, (nout + 1,), np.int64)
    P.run(dev, "coalesce.cu", "run_starts", (), n, scan, n, starts)
    return starts


def coalesce(t):
    """Coalesce a device COO tensor (or repair a compressed one, see :func:`sum_duplicates`).

    Bounds are checked on the way (C4/C5 raise :class:`~sparsetensor.InvariantError`);
    an already sorted and distinct tensor is returned sharing its arrays, marked
    coalesced. Synchronises twice (the order check, the result's nnz).
    """

    if isinstance(t, CudaCompressedTensor):
        return sum_duplicates(t)
    if not isinstance(t, CudaCOOTensor):
        raise TypeError(f"coalesce expects a CUDA sparse tensor, got {type(t).__name__}")
    if t.is_coalesced() and t._checked:  # not for indices another library may have written since
        return t
    idx, vals = t.indices(), t.values()
    S, n = idx.shape
    if n == 0:
        return COOTensor(idx, vals, t.shape, True, True)
    span = math.prod(t.shape[:S])
    if span > _U64_SPAN:
        raise NotImplementedError(f"coalesce on cuda: the sparse dims {t.shape[:S]} have {span} coordinates, "
                                  "more than a 64-bit key holds")
    dev = t.values()._device
    found = coo_report(t, order=True)
    if found is None:
        return COOTensor(idx, vals, t.shape, True, True)
    if found[0] != "C6":
        raise_coo_error(found, t.shape)
    shape = P.ints(dev, t.shape[:S])
    keys = P.empty(dev, (n,), np.uint64)
    P.run(dev, "coalesce.cu", "coo_keys", (P.index_key(idx.dtype),), n, idx, S, n, shape, keys)
    sorted_keys, perm = P.radix_sort(dev, keys, (span - 1).bit_length())
    scan, nout = _runs(dev, sorted_keys, n)
    starts = _starts(dev, scan, n, nout)
    out_idx = P.empty(dev, (S, nout), idx.dtype)
    P.run(dev, "coalesce.cu", "coo_unkey", (P.index_key(idx.dtype),), nout, sorted_keys, starts, nout, S, shape,
          out_idx)
    dense = vals.shape[1:]
    out_vals = _sum_runs(dev, vals.reshape(n, math.prod(dense)), perm, starts, nout, "coalesce")
    return COOTensor(out_idx, out_vals.reshape((nout,) + dense), t.shape, True, True)


def batch_matrices(t) -> list:
    """The matrices of device compressed tensor ``t``, batch by batch (flattened batch order), as
    unchecked tensors sharing ``t``'s members: for ops that may take a batch at a time what
    :class:`UnequalBatches` refuses as a whole."""
    m = t.batch_dim
    B = math.prod(t.shape[:m])
    c, p, v = t.compressed_indices(), t.plain_indices(), t.values()
    c, p, v = c.reshape(B, c.shape[-1]), p.reshape(B, t.nnz), v.reshape((B,) + v.shape[m:])
    return [CompressedTensor(c[b], p[b], v[b], t.shape[m:], t.layout, False) for b in range(B)]


def sum_duplicates(t):
    """Repair a device csr/csc/bsr/bsc tensor: sort every row's plain indices and sum repeats.

    As on the CPU: 5.1, 5.2, 5.3's lower bound, 5.4 and 5.5 are checked (a row may be
    longer than the plain size before its duplicates are summed); batches that end up
    with different nnz raise ValueError; an already canonical tensor is returned as it is.
    """

    if t.is_coalesced():
        return t
    layout, m = t.layout, t.batch_dim
    batch = t.shape[:m]
    B = math.prod(batch)
    c, p, v = t.compressed_indices(), t.plain_indices(), t.values()
    n, nnz, ps = c.shape[-1] - 1, t.nnz, t.plain_size
    # every bound first (a 5.6 finding would hide a later 5.4/5.5), then the order
    check_compressed_bounds(t)
    if compressed_report(t, check_order=True, max_step=_U64_SPAN - 1) is None:
        t._set_validated()
        return t
    span = B * n * ps
    if span > _U64_SPAN:
        raise NotImplementedError(f"sum_duplicates on cuda: {B} x {n} x {ps} positions exceed a 64-bit key")
    dev = t.values()._device
    ik = (P.index_key(c.dtype),)
    N = B * nnz
    major = P.empty(dev, (N,), c.dtype)
    P.run(dev, "convert.cu", "expand_major", ik, N, c, B, n, nnz, major)
    keys = P.empty(dev, (N,), np.uint64)
    P.run(dev, "convert.cu", "compressed_keys", ik, N, major, p, B, n, nnz, ps, keys)
    sorted_keys, perm = P.radix_sort(dev, keys, (span - 1).bit_length())
    scan, nout_total = _runs(dev, sorted_keys, N)
    # batch b owns sorted positions [b * nnz, (b + 1) * nnz): its runs are scan differences there
    bounds = P.read_ints(dev, P.take_strided(dev, scan, nnz, B + 1))
    per_batch = np.diff(bounds)
    if per_batch.size and (per_batch != per_batch[0]).any():
        raise UnequalBatches(f"sum_duplicates of a batched {layout.name} tensor: after summing duplicates the "
                         f"batches have different nnz {per_batch.tolist()}; every batch must have the same nnz")
    nnz_out = int(per_batch[0]) if B else 0
    starts = _starts(dev, scan, N, nout_total)
    major_keys = P.empty(dev, (nout_total,), np.uint64)
    new_plain = P.empty(dev, (nout_total,), c.dtype)
    P.run(dev, "convert.cu", "split_keys", ik, nout_total, sorted_keys, starts, nout_total, ps, major_keys, new_plain)
    ptr = P.empty(dev, (B * n + 1,), np.int64)
    P.run(dev, "scan.cu", "lower_bounds", (), B * n + 1, major_keys, nout_total, B * n, ptr)
    new_comp = P.batch_offsets(dev, ptr, B, n, 1, c.dtype)
    tail = v.shape[m + 1:]
    out_vals = _sum_runs(dev, v.reshape(N, math.prod(tail)), perm, starts, nout_total, "sum_duplicates")
    return CompressedTensor(new_comp.reshape(batch + (n + 1,)), new_plain.reshape(batch + (nnz_out,)),
                                out_vals.reshape(batch + (nnz_out,) + tail), t.shape, layout, True)


def checked(t):
    """``t`` if it is known to satisfy 5.1-5.6 (canonical), else scanned on the device: broken
    indices raise InvariantError; unsorted or duplicate plain indices (5.6), and rows longer than
    the plain size (5.3's upper bound: they hold repeats), are repaired with
    :func:`sum_duplicates`, whose check raises for any other fault, as the CPU's
    ``ensure_valid(repair=True)`` does. Returns a canonical tensor."""
    if t.is_coalesced():
        return t
    found = compressed_report(t)
    if found is None:
        # cached on t, as ensure_valid caches it: the next op skips the scan (a flag that the tensor
        # ignores while another library holds its index arrays, which every op then scans again)
        t._set_validated()
        return t
    if found[0] in ("5.3", "5.6"):
        return sum_duplicates(t)
    raise_compressed_error(found, t.layout, t.shape[:t.batch_dim], t.plain_size, t.nnz)
