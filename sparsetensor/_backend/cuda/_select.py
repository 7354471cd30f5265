"""Selection and joining of compressed tensors on the device (``kernels/select.cu``): the
``gather_slices``, ``remap_plain``, ``narrow_plain``, ``cat_plain`` and ``cat_compressed``
kernels of the backend, with the CPU's contracts (:mod:`sparsetensor._backend.cpu._select`).

Inputs are :class:`~sparsetensor._core._canonical.Parts` whose members are DeviceArrays
(validated: the kernels trust 5.1-5.6); outputs are the new members in that form. Every op
is a segment copy (see select.cu). The only reads to the host are the per-batch nnz (to
check that every batch of the result has the same nnz, as the CPU does, and to size the
outputs); the host index arrays of the ops (rows, index) are copied to the device.

The rest of the device side of :mod:`sparsetensor.ops.select`, ``ops.join`` and
``ops.indexing`` lives here too: ``index_select_coo`` (a backend kernel), and the device
lowerings of what the CPU does with NumPy calls in the op modules (``nonzero``,
``count_nonzero``, ``take_axis``, ``concat_axis``, ``insert_zero_row``, ``same_arrays``,
``coo_cat_sparse``, ``padded_values``). They read at most a count or a flag from the device.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._canonical import same_nnz
from ..._core._dtypes import check_fits
from .._plan import by_slots, index_slots
from ...cuda import _primitives as P
from ._coalesce import _runs, _starts
from ._sample import elementwise

__all__ = ["gather_slices", "remap_plain", "narrow_plain", "cat_plain", "cat_compressed", "nonzero",
           "count_nonzero", "index_select_coo", "take_axis", "repeat_axis",
           "concat_axis", "insert_zero_row", "same_arrays", "coo_cat_sparse", "padded_values", "index_extrema",
           "wrap_negative"]


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
          _on_device(dev, rows), K, counts, src)
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


def _on_device(dev, index):
    """int64 ``index`` (host, or already a device array) on ``dev``."""
    if isinstance(index, np.ndarray):
        return P.from_host(dev, np.ascontiguousarray(index, dtype=np.int64))
    return index.astype(np.int64, copy=False)


def _index_map(dev, index, size: int):
    """The positions of ``index`` (in range; host, or an int64 device array) grouped by value, as
    device arrays: ``targets[first[v]:first[v + 1]]`` are the positions holding v, in increasing
    order (on the device: a stable radix sort of the values and the lower bounds of 0..size)."""
    if isinstance(index, np.ndarray):
        targets = np.argsort(index, kind="stable").astype(np.int64)
        first = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.bincount(index, minlength=size), out=first[1:])
        return P.from_host(dev, first), P.from_host(dev, targets)
    K = index.shape[0]
    keys, targets = P.radix_sort(dev, index.view(np.uint64), max(size - 1, 0).bit_length())
    first = P.empty(dev, (size + 1,), np.int64)
    P.run(dev, "scan.cu", "lower_bounds", (), size + 1, keys, K, size, first)
    return first, targets


def _selection_map(dev, index: np.ndarray, coords, size: int):
    """``(first, targets, coords)`` for selecting the entries at device ``coords`` by host ``index``
    along a dim of ``size``: :func:`_index_map` over every coordinate, or over the slots of
    :func:`~sparsetensor._backend._plan.index_slots` with ``coords`` replaced by theirs (the
    ``index_slots`` kernel)."""
    if isinstance(index, np.ndarray):
        plan = index_slots(index, coords.size, size)
        if plan is None:
            return (*_index_map(dev, index, size), coords)
        u, of_index = plan
        u = P.from_host(dev, u)
    else:  # an index on the device: its distinct values sorted there, its slots by the same kernel
        if not by_slots(index.shape[0], coords.size, size):
            return (*_index_map(dev, index, size), coords)
        u = _distinct(dev, index, size)
        of_index = _slots(dev, index, u)
    first, targets = _index_map(dev, of_index, 2 * u.size + 1)
    return first, targets, _slots(dev, coords, u)


def _slots(dev, coords, u):
    """The slot of each of device ``coords`` among the sorted distinct int64 values ``u`` (kernel
    ``index_slots``: ``u[i]`` is slot 2i + 1, a coordinate between ``u[i - 1]`` and ``u[i]`` 2i)."""
    n = coords.size
    slots = P.empty(dev, coords.shape, coords.dtype)
    if n:
        P.run(dev, "select.cu", "index_slots", (P.index_key(coords.dtype),), n, coords, n, u, u.size, slots)
    return slots


def _distinct(dev, index, size: int):
    """The sorted distinct values of int64 device ``index`` (in ``[0, size)``): a radix sort and
    its runs (one count read)."""
    K = index.shape[0]
    if not K:
        return P.empty(dev, (0,), np.int64)
    keys, _ = P.radix_sort(dev, index.view(np.uint64), max(size - 1, 0).bit_length())
    scan, nout = _runs(dev, keys, K)
    return P.gather_rows(dev, keys, _starts(dev, scan, K, nout), nout).view(np.int64)


def remap_plain(parts, index: np.ndarray, nondecreasing: bool, what: str):
    """Every slice's entries mapped through host ``index`` (new plain j gets old plain ``index[j]``;
    repeats give several entries), each slice sorted by a radix sort unless ``index`` is
    nondecreasing."""
    c, p, v = parts.compressed, parts.plain, parts.values
    dev = c._device
    B, n, nnz_in, W = c.shape[0], c.shape[1] - 1, p.shape[1], v.shape[2]
    K = index.shape[0]
    check_fits(c.dtype, parts.layout.name, **{"ncols" if parts.layout.compressed_rows else "nrows": K})
    first, targets, p = _selection_map(dev, index, p, parts.plain_size)
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


def _nonzero_flags(coo):
    """(flags scan over the N * D items of coalesced device ``coo``, total, D): dense.cu's zero
    test (-0.0 is zero, NaN is not; a complex value is nonzero if either part is)."""
    from ._dense import _ztest

    v = coo.values()
    dev = v._device
    N = coo.nnz
    D = math.prod(coo.shape[coo.sparse_dim:])
    zkey, mask, per_value = _ztest(v.dtype)
    flags = P.empty(dev, (N * D,), np.int64)
    P.run(dev, "dense.cu", "dense_nonzero", (zkey,), N * D, v, 1, N * D, 1, per_value, 1, 1, 1, mask, flags)
    scan = P.exclusive_scan(dev, flags)
    return scan, int(P.read_ints(dev, scan[N * D:])[0]), D


def nonzero(coo):
    """The ``(n, ndim)`` int64 device array of the coordinates of the nonzero items of coalesced
    device ``coo``, in row-major order (the CPU's ``ops.select.nonzero``)."""
    S, N = coo.sparse_dim, coo.nnz
    dense = coo.shape[S:]
    dev = coo.values()._device
    scan, total, D = _nonzero_flags(coo)
    out = P.empty(dev, (total, coo.ndim), np.int64)
    dshape = P.ints(dev, dense) if dense else None
    idx = coo.indices()
    P.run(dev, "select.cu", "nonzero_coords", (P.index_key(idx.dtype),), N * D, scan, idx, N, S, D, dshape,
          len(dense), out)
    return out


def count_nonzero(coo, kept: list, out_shape: tuple):
    """The number of nonzero items of coalesced device ``coo`` per coordinate of the dims ``kept``
    (sizes ``out_shape``): an int64 device array of that shape (``kept`` empty: a 0-d array)."""
    coords = nonzero(coo)
    dev = coords._device
    n, size = coords.shape[0], math.prod(out_shape)
    keys = P.empty(dev, (n,), np.uint64)
    if n:
        kept_dev = P.ints(dev, kept) if kept else None
        shape_dev = P.ints(dev, out_shape) if kept else None
        P.run(dev, "select.cu", "kept_keys", (), n, coords, n, coords.shape[1], kept_dev, shape_dev, len(kept), keys)
    sorted_keys, _ = P.radix_sort(dev, keys, max(size - 1, 0).bit_length())
    ptr = P.empty(dev, (size + 1,), np.int64)
    P.run(dev, "scan.cu", "lower_bounds", (), size + 1, sorted_keys, n, size, ptr)
    counts = P.empty(dev, (size,), np.int64)
    P.run(dev, "select.cu", "adjacent_diff", (), size, ptr, size, counts)
    return counts.reshape(out_shape)


def nonzero_count(coo) -> int:
    """The number of nonzero items of coalesced device ``coo`` (one number read)."""
    return _nonzero_flags(coo)[1]


def index_select_coo(indices, raw, d: int, idx: np.ndarray, shape: tuple):
    """The entries of device COO ``indices`` (S, N) and raw value rows ``raw`` (N, W) whose coordinate
    along ``d`` is in host ``idx`` (in range; repeats give copies), that coordinate replaced by its
    position in ``idx``: entries in input order, each one's copies by ascending position (the
    CPU's order). The indices must be in bounds (the op validates first)."""
    dev = indices._device
    S, Nin = indices.shape
    W = raw.shape[1]
    first, targets, row = _selection_map(dev, idx, indices[d], shape[d])
    ik = P.index_key(indices.dtype)
    counts = P.empty(dev, (Nin,), np.int64)
    P.run(dev, "select.cu", "remap_counts", (ik,), Nin, row, Nin, first, counts)
    eoff = P.exclusive_scan(dev, counts)
    N = int(P.read_ints(dev, eoff[Nin:])[0])
    out_i = P.empty(dev, (S, N), indices.dtype)
    out_v = P.empty(dev, (N, W), raw.dtype)
    P.run(dev, "select.cu", "remap_fill", (P.raw_key(raw.itemsize), ik), N * max(W, 1), eoff, Nin, row, raw, W,
          first, targets, N, out_i[d], out_v)
    P.run(dev, "select.cu", "coo_copy_rows", (ik,), S * N, eoff, Nin, indices, S, d, N, out_i)
    return out_i, out_v


def take_axis(a, axis: int, index):
    """``np.take(a, index, axis=axis)`` of device array ``a`` for an int64 ``index`` in range (host,
    or on ``a``'s device): a new C-contiguous device array (selection along batch and dense dims)."""
    dev = a._device
    shape = a.shape
    K = index.shape[0]
    out = P.empty(dev, shape[:axis] + (K,) + shape[axis + 1:], a.dtype)
    pre, size, post = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    idx = _on_device(dev, index)
    P.run(dev, "select.cu", "take_axis", (P.raw_key(a.itemsize),), pre * K * post, a, pre, size, post, idx, K, out)
    return out


def repeat_axis(a, axis: int, n: int):
    """Device array ``a`` with its size-1 ``axis`` repeated ``n`` times (NumPy's broadcast, made
    contiguous): a gather of index 0, ``n`` times."""
    return take_axis(a, axis, np.zeros(n, np.int64))


def concat_axis(arrays: list, axis: int):
    """``np.concatenate(arrays, axis)`` of device arrays of one dtype (shapes agreeing off ``axis``)."""
    a0 = arrays[0]
    if any(a.dtype != a0.dtype for a in arrays):  # the copy moves raw items: no conversion
        raise TypeError(f"concat_axis of device arrays of dtypes {[str(a.dtype) for a in arrays]}")
    dev = a0._device
    total = sum(a.shape[axis] for a in arrays)
    out = P.empty(dev, a0.shape[:axis] + (total,) + a0.shape[axis + 1:], a0.dtype)
    A, C = math.prod(a0.shape[:axis]), math.prod(a0.shape[axis + 1:])
    col = 0
    for a in arrays:
        m = a.shape[axis]
        P.run(dev, "select.cu", "place_block", (P.raw_key(a.itemsize),), A * m * C, a, 1, A, m, C, 0, col, total, out)
        col += m
    return out


def insert_zero_row(indices, d: int):
    """``np.insert(indices, d, 0, axis=0)`` of device COO indices (S, N): a new coordinate row of zeros."""
    dev = indices._device
    S, N = indices.shape
    out = P.zeros(dev, (S + 1, N), indices.dtype)
    key = (P.raw_key(indices.itemsize),)
    P.run(dev, "select.cu", "place_block", key, d * N, indices, 1, 1, d * N, 1, 0, 0, (S + 1) * N, out)
    P.run(dev, "select.cu", "place_block", key, (S - d) * N, indices[d:], 1, 1, (S - d) * N, 1, 0, (d + 1) * N,
          (S + 1) * N, out)
    return out


def same_arrays(arrays: list) -> bool:
    """Whether the device index arrays of ``arrays`` are all equal (one number read per pair)."""
    a0 = arrays[0]
    dev = a0._device
    for a in arrays[1:]:
        if a is a0:
            continue
        if a.shape != a0.shape or a.dtype != a0.dtype:
            return False
        differ = P.zeros(dev, (1,), np.int64)
        P.run(dev, "select.cu", "any_differ", (P.index_key(a.dtype),), a.size, a0, a, a.size, differ)
        if int(P.read_ints(dev, differ)[0]):
            return False
    return True


def coo_cat_sparse(indices: list, sizes: list, d: int):
    """The indices (S, sum N_k) of COO tensors concatenated along sparse dim ``d``: each input's
    coordinates along ``d`` moved behind the earlier inputs' sizes."""
    out = concat_axis(indices, 1)
    dev = out._device
    ik = (P.index_key(out.dtype),)
    col = offset = 0
    for a, size in zip(indices, sizes):
        n = a.shape[1]
        if offset:
            P.run(dev, "select.cu", "shift_range", ik, n, out[d][col:col + n], n, offset)
        col, offset = col + n, offset + size
    return out


def padded_values(values: list, ax: int, shape: tuple):
    """The values of a cat of COO tensors along a dense dim whose indices differ: ``(sum nnz,) + shape``
    zeros, input k's values at its rows and its columns along values axis ``ax``."""
    v0 = values[0]
    dev = v0._device
    N = sum(v.shape[0] for v in values)
    out = P.zeros(dev, (N,) + tuple(shape), v0.dtype)
    A, C, total = math.prod(shape[:ax - 1]), math.prod(shape[ax:]), shape[ax - 1]
    row = col = 0
    for v in values:
        n, m = v.shape[0], v.shape[ax]
        P.run(dev, "select.cu", "place_block", (P.raw_key(v.itemsize),), n * A * m * C, v, n, A, m, C, row, col, total,
              out)
        row, col = row + n, col + m
    return out


def index_extrema(a) -> tuple:
    """``(min, max, smallest step)`` of a 1-d device integer array (host ints; None for what an
    array that short lacks): the bounds check and order of a device index (a few numbers read)."""
    from ._reduce import _extrema

    K = a.shape[0]
    if not K:
        return None, None, None
    hi, lo = _extrema(a, 1, K, 0, 1)
    step = int(_extrema(a, 1, K - 1, 1, K - 1)[1][0]) if K > 1 else None
    return int(lo[0]), int(hi[0]), step


def wrap_negative(a, size: int):
    """1-d device integer array ``a`` (entries in ``[-size, size)``) as int64 coordinates in ``[0, size)``."""
    dev = a._device
    out = P.empty(dev, a.shape, np.int64)
    P.run(dev, "select.cu", "wrap_negative", (P.index_key(a.dtype),), a.shape[0], a, a.shape[0], size, out)
    return out


def triangle_flags(indices, r: int, c: int, k: int, upper: bool, scale=(1, 1)):
    """int64 0/1 flags of the device COO entries on the kept side of diagonal ``k`` of index rows
    ``r``, ``c`` scaled by ``scale`` (``col * sc - row * sr <= k``, or ``>= k`` for ``upper``)."""
    N = indices.shape[1]
    flags = P.empty(indices._device, (N,), np.int64)
    P.run(indices._device, "select.cu", "triangle_flags", (P.index_key(indices.dtype),), N, indices, N, r, c,
          scale[0], scale[1], k, int(upper), flags)
    return flags


def nonzero_rows(values):
    """int64 0/1 flags of the rows of device ``values`` (N, ...) holding a nonzero item (dense.cu's
    zero test: -0.0 is zero, NaN is not; a complex value is nonzero if either part is)."""
    from ._dense import _ztest

    dev = values._device
    N = values.shape[0]
    W = math.prod(values.shape[1:])
    zkey, mask, per_value = _ztest(values.dtype)
    if W == 0:  # rows without items hold nothing nonzero
        return P.zeros(dev, (N,), np.int64)
    flags = P.empty(dev, (N,), np.int64)
    P.run(dev, "dense.cu", "dense_nonzero", (zkey,), N, values, 1, N, 1, W * per_value, 1, 1, 1, mask, flags)
    return flags


def keep_coo(indices, values, flags):
    """``(indices, values)`` of the device COO entries whose ``flags`` (int64 0/1) are set, in order
    (one count read)."""
    dev = indices._device
    S, Nin = indices.shape
    eoff = P.exclusive_scan(dev, flags)
    N = int(P.read_ints(dev, eoff[Nin:])[0])
    out_i = P.empty(dev, (S, N), indices.dtype)
    out_v = P.empty(dev, (N,) + values.shape[1:], values.dtype)
    W = math.prod(values.shape[1:]) * values.itemsize
    item = 16 if W % 16 == 0 else 8 if W % 8 == 0 else 4 if W % 4 == 0 else 2 if W % 2 == 0 else 1
    P.run(dev, "select.cu", "coo_copy_rows", (P.index_key(indices.dtype),), S * N, eoff, Nin, indices, S, -1, N, out_i)
    P.run(dev, "select.cu", "keep_rows", (P.raw_key(item),), N * (W // item), eoff, Nin, values, W // item, N, out_v)
    return out_i, out_v


def narrow_coo(indices, values, d: int, start: int, length: int):
    """``(indices, values)`` of the device COO entries whose coordinate along ``d`` is in
    ``[start, start + length)``, in input order, that coordinate shifted to start at 0 (work of the
    entries, however long the dim)."""
    dev = indices._device
    N = indices.shape[1]
    flags = P.empty(dev, (N,), np.int64)
    ik = (P.index_key(indices.dtype),)
    P.run(dev, "select.cu", "range_flags", ik, N, indices[d], N, start, start + length, flags)
    out_i, out_v = keep_coo(indices, values, flags)
    n = out_i.shape[1]
    if n and start:
        P.run(dev, "select.cu", "shift_range", ik, n, out_i[d], n, -start)
    return out_i, out_v


def kron_coo(ia, va, ib, vb, bshape: tuple, index_dtype, both_sorted: bool = False):
    """The COO entries of the Kronecker product of device entries ``(ia, va)`` and ``(ib, vb)`` (one
    value dtype, in bounds), ``(indices, values, ordered)``: pair (i, j) at
    ``ia[:, i] * bshape + ib[:, j]``, value ``va[i] * vb[j]``, in the CPU backend's order: sorted
    (``ordered``) when both operands are (``both_sorted``) with one or two sparse dims, else
    entry ``i * nb + j``."""
    dev = ia._device
    S, na = ia.shape
    nb = ib.shape[1]
    n = na * nb
    ordered = both_sorted and S in (1, 2)
    out = P.empty(dev, (S, n), index_dtype)
    pa, pb = P.empty(dev, (n,), np.int64), P.empty(dev, (n,), np.int64)
    P.run(dev, "select.cu", "kron_pairs", (P.index_key(ia.dtype), P.index_key(index_dtype)), n, ia, na, ib, nb, S,
          P.ints(dev, bshape), int(ordered), out, pa, pb)
    return out, elementwise(take_axis(va, 0, pa), take_axis(vb, 0, pb), "mul"), ordered


def keep_compressed(c, p, v, flags, batch: tuple, what: str):
    """The members ``(compressed, plain, values)`` of the entries whose int64 0/1 ``flags`` (one per
    entry of the ``(B, nnz)`` standard form) are set, every batch keeping the same number (else
    ValueError naming ``what``; one read of B + 1 counts)."""
    dev = p._device
    B, nnz = p.shape
    n = c.shape[-1] - 1
    eoff = P.exclusive_scan(dev, flags)
    counts = np.diff(P.read_ints(dev, P.take_strided(dev, eoff, nnz, B + 1))) if B else np.zeros(0, np.int64)
    same_nnz(counts, batch, what)
    kept = int(counts[0]) if B else 0
    out_c = P.empty(dev, (B, n + 1), c.dtype)
    P.run(dev, "select.cu", "kept_offsets", (P.index_key(c.dtype),), B * (n + 1), c, B, n, nnz, eoff, out_c)
    out_p, out_v = keep_coo(p.reshape(1, B * nnz), v.reshape((B * nnz,) + v.shape[2:]), flags)
    return out_c, out_p.reshape(B, kept), out_v.reshape((B, kept) + v.shape[2:])
