"""Device building blocks the ops share: launches over n items, scans, radix sort, small reads.

All work is queued on the device's stream; only :func:`read_ints` waits (it is how an
op learns a host value: an nnz, an error key).
"""

from __future__ import annotations

import ctypes
import math
import weakref

import numpy as np

from ._array import DeviceArray, arith_key, value_key
from ._driver import Device
from ._module import BLOCK, grid_for, launch

__all__ = ["run", "group_size", "exclusive_scan", "radix_sort", "read_ints", "empty", "zeros", "index_key", "raw_key", "value_key", "arith_key",
           "from_host", "ints", "SCAN_TILE", "SORT_TILE"]

# Must match scan.cu and sort.cu.
SCAN_THREADS, SCAN_TILE = 256, 256 * 8
SORT_THREADS, SORT_TILE = 256, 4096

_INDEX_KEYS = {np.dtype(np.int32): "int32", np.dtype(np.int64): "int64"}


def index_key(dtype) -> str:
    try:
        return _INDEX_KEYS[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"index dtype must be int32 or int64, got {np.dtype(dtype)}") from None


NUM_KEYS = frozenset(("int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"))


def num_view(v: DeviceArray) -> tuple:
    """``v`` as the kernels of the ``num`` class take it (bool as uint8) and its key; TypeError for
    the other dtypes (complex: no order)."""
    if v.dtype == np.bool_:
        return v.view(np.uint8), "uint8"
    if v.dtype.name not in NUM_KEYS:
        raise TypeError(f"max/min on cuda of {v.dtype} values has no GPU kernel")
    return v, v.dtype.name


def acc_dtype(dtype) -> np.dtype:
    """The dtype kernels accumulate ``dtype`` values in (acc<V> of common.cuh: float16 in float32,
    integers in int64)."""
    dt = np.dtype(dtype)
    if dt.kind in "iub":
        return np.dtype(np.int64)
    return np.dtype(np.float32) if dt == np.float16 else dt


def raw_key(itemsize: int) -> int:
    if itemsize not in (1, 2, 4, 8, 16):
        raise TypeError(f"no raw kernel type for items of {itemsize} bytes")
    return itemsize


def empty(dev: Device, shape, dtype) -> DeviceArray:
    return DeviceArray.empty(shape, dtype, dev)


def zeros(dev: Device, shape, dtype) -> DeviceArray:
    return DeviceArray.zeros(shape, dtype, dev)


def from_host(dev: Device, array) -> DeviceArray:
    return DeviceArray.from_host(array, dev)


_INTS_KEPT = 512  # tuples kept a device (then the cache starts again)
_ints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # device -> {tuple of ints: DeviceArray}


def ints(dev: Device, values) -> DeviceArray:
    """``values`` (a few ints: a shape, strides, dims) as an int64 device array for kernels that
    only read it, made once per device and tuple: an op then neither copies nor waits for
    metadata it copied before (a copy from host memory waits for the stream). Kernels must not
    write it; on the emulator every reuse checks that none did."""
    key = tuple(int(v) for v in values)
    kept = _ints.get(dev)
    if kept is None:
        kept = _ints[dev] = {}
    arr = kept.get(key)
    if arr is None:
        if len(kept) >= _INTS_KEPT:
            kept.clear()
        arr = kept[key] = from_host(dev, np.array(key, dtype=np.int64).reshape(len(key)))
    elif getattr(dev, "emulated", False) and key:  # host memory there: read in place (not a copy an op makes)
        now = tuple((ctypes.c_int64 * len(key)).from_address(arr._ptr))
        if now != key:
            raise AssertionError(f"a kernel wrote the shared constant array {key}: now {now}")
    return arr


def group_size(mean: float) -> int:
    """Threads a row (segment) for the kernels that give each a group of threads reduced with
    shuffles: the power of two in (mean / 8, mean / 4] of the mean row length, in [1, 32], so that
    each thread takes four to eight entries."""
    t = 1
    while t < 32 and t * 8 <= mean:
        t *= 2
    return t


def run(dev: Device, file: str, kernel: str, keys: tuple, n: int, *args, block: int = BLOCK) -> None:
    """Launch a grid-stride kernel over ``n`` items (nothing when ``n == 0``)."""
    if n <= 0:
        return
    launch(dev, file, kernel, keys, grid_for(dev, n, block), block, *args)


def read_ints(dev: Device, arr: DeviceArray) -> np.ndarray:
    """Copy a small integer array to the host (waits for the stream)."""
    return arr.get()


def exclusive_scan(dev: Device, counts: DeviceArray) -> DeviceArray:
    """``out[0] = 0, out[i + 1] = counts[0] + ... + counts[i]`` for int64 ``counts`` (n + 1 entries)."""
    n = counts.size
    out = empty(dev, (n + 1,), np.int64)
    if n == 0:
        dev.memset8(out._ptr, 0, 8)
        return out
    ntiles = -(-n // SCAN_TILE)
    if ntiles == 1:
        offsets = zeros(dev, (1,), np.int64)
    else:
        sums = empty(dev, (ntiles,), np.int64)
        launch(dev, "scan.cu", "scan_reduce", (), ntiles, SCAN_THREADS, counts, n, sums)
        offsets = exclusive_scan(dev, sums)
    launch(dev, "scan.cu", "scan_tiles", (), ntiles, SCAN_THREADS, counts, n, offsets, out)
    return out


def radix_sort(dev: Device, keys: DeviceArray, bits: int, payload: DeviceArray | None = None) -> tuple:
    """Stable sort of uint64 ``keys`` whose values are below ``2**bits``.

    Returns ``(sorted_keys, perm)``: ``sorted_keys[j] = keys[perm[j]]``, equal keys in
    input order. With a ``payload`` (8-byte items, one a key), the second array is the
    payload in that order instead (``payload[perm]``). Neither input is modified.
    """
    n = keys.size
    if n == 0:
        return empty(dev, (0,), np.uint64), empty(dev, (0,), np.int64)
    passes = max(1, -(-int(bits) // 8))
    ntiles = -(-n // SORT_TILE)
    k_in, v_in = keys, payload
    bufs_k = [empty(dev, (n,), np.uint64), empty(dev, (n,), np.uint64)]
    bufs_v = [empty(dev, (n,), np.int64), empty(dev, (n,), np.int64)]
    hist = empty(dev, (256 * ntiles,), np.int64)
    for p in range(passes):
        shift = 8 * p
        k_out, v_out = bufs_k[p % 2], bufs_v[p % 2]
        launch(dev, "sort.cu", "radix_histogram", (), ntiles, SORT_THREADS, k_in, n, shift, hist)
        offsets = exclusive_scan(dev, hist)
        launch(dev, "sort.cu", "radix_scatter", (), ntiles, SORT_THREADS, k_in, v_in, k_out, v_out, n, shift, offsets)
        k_in, v_in = k_out, v_out
    return k_in, v_in


def batch_offsets(dev: Device, flat: DeviceArray, B: int, n: int, step: int, index_dtype) -> DeviceArray:
    """Per-batch compressed indices ``(B, n + 1)`` from a flat exclusive scan."""
    out = empty(dev, (B, n + 1), index_dtype)
    run(dev, "scan.cu", "batch_offsets", (index_key(index_dtype),), B * (n + 1), flat, B, n, step, out)
    return out


def arange(dev: Device, n: int, start: int = 0, step: int = 1) -> DeviceArray:
    """int64 ``start, start + step, ...`` (``n`` entries) made on the device (``step=0``: a fill)."""
    out = empty(dev, (n,), np.int64)
    run(dev, "scan.cu", "arange_i64", (), n, n, start, step, out)
    return out


def grid_coords(dev: Device, shape: tuple) -> DeviceArray:
    """int64 ``(ndim, size)``: the coordinates of every element of a C-order array of ``shape``
    (NumPy's ``np.indices(shape).reshape(ndim, -1)``), made on the device."""
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    out = empty(dev, (len(shape), n), np.int64)
    run(dev, "scan.cu", "grid_coords", (), n * len(shape), n, len(shape), ints(dev, shape), ints(dev, strides), out)
    return out


def take_strided(dev: Device, arr: DeviceArray, step: int, count: int) -> DeviceArray:
    out = empty(dev, (count,), np.int64)
    run(dev, "scan.cu", "take_strided", (), count, arr, step, count, out)
    return out


def gather_rows(dev: Device, arr: DeviceArray, perm: DeviceArray, nrows: int) -> DeviceArray:
    """``out[j] = arr[perm[j]]`` over the leading axis (any dtype: rows move as raw items)."""
    row_shape = arr.shape[1:]
    out = empty(dev, (nrows,) + row_shape, arr.dtype)
    item = arr.itemsize
    W = int(np.prod(row_shape, dtype=np.int64)) if row_shape else 1
    run(dev, "convert.cu", "gather_rows", (raw_key(item),), nrows * W, arr, perm, nrows, W, out)
    return out


def concat(dev: Device, parts, axis_len_dtype=None) -> DeviceArray:
    """Concatenate C-contiguous arrays along the leading axis (device to device copies)."""
    parts = list(parts)
    out = empty(dev, (sum(p.shape[0] for p in parts),) + parts[0].shape[1:], parts[0].dtype)
    off = 0
    for p in parts:
        dev.copy_dtod(out._ptr + off, p._ptr, p.nbytes)
        off += p.nbytes
    return out
