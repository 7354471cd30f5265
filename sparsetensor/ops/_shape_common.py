"""Helpers shared by the shape and indexing ops (:mod:`sparsetensor.ops.shape`): dim kinds,
index arrays, compressed results in the kernels' standard form.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import device_of
from .._core._device import device_array
from .._core._canonical import as_parts, ensure_valid_export
from .._core._dtypes import native, raw_view
from .._core._shape_checks import values_contiguous
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor

__all__ = ["_require_sparse", "_kind", "_values_axis", "_take_axis", "_compressed", "_contiguous_values",
           "_is_nondecreasing", "_is_increasing", "_as_index", "_parts", "_value_rows", "_sparse_axis",
           "_resized"]


# -- helpers ------------------------------------------------------------------------------------
def _require_sparse(t, op: str, name: str = "t") -> None:
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{op} expects a sparse tensor for {name}, got {type(t).__name__}")


def _kind(t, d: int) -> str:
    """'batch', 'sparse' or 'dense': what dim ``d`` of ``t`` is (COO has no batch dims)."""
    m = t.batch_dim
    return "batch" if d < m else ("sparse" if d < m + t.sparse_dim else "dense")


def _values_axis(t, d: int) -> int:
    """The axis of ``t.values()`` that holds dense dim ``d`` (values dims align at the end)."""
    return t.values().ndim - (t.ndim - d)


def _take_axis(a: np.ndarray, axis: int, key) -> np.ndarray:
    """``a`` indexed by ``key`` (a slice or an int) along ``axis``."""
    return a[(slice(None),) * axis + (key,)]


def _with_values(t, values: np.ndarray, shape: tuple):
    """``t``'s indices with new ``values`` of a new dense or block shape (flags kept)."""
    if t.layout.compressed:
        return _compressed(t, t.compressed_indices(), t.plain_indices(), values, shape)
    return COOTensor(t.indices(), values, tuple(shape), t.is_coalesced(), t._checked)


def _compressed(t: CompressedTensor, c, p, v, shape, canonical=None) -> CompressedTensor:
    """A compressed tensor of ``t``'s layout from members (made contiguous, 3.5-3.7)."""
    dense_dim = v.ndim - c.ndim - (2 if t.layout.blocked else 0)
    v = _contiguous_values(v, t.layout, dense_dim)
    if isinstance(c, np.ndarray):  # device arrays are contiguous (and must stay on their device)
        c, p = np.ascontiguousarray(c), np.ascontiguousarray(p)
    return CompressedTensor(c, p, v, tuple(shape), t.layout,
                            t.is_coalesced() if canonical is None else canonical)


def _contiguous_values(v: np.ndarray, layout, dense_dim: int) -> np.ndarray:
    """``v``, or a contiguous copy when it breaks invariant 3.7."""
    return v if values_contiguous(v, dense_dim, layout.blocked) else np.ascontiguousarray(v)


def _device_select():
    """The device lowerings of the index checks (the CPU's are the NumPy calls of this module)."""
    from .._backend.cuda import _select as device_select

    return device_select


def _smallest_step(a) -> int | None:
    """The smallest ``a[i + 1] - a[i]`` of a host or device index (None when it has < 2 entries)."""
    if type(a) is np.ndarray:
        return int((a[1:] - a[:-1]).min()) if a.size > 1 else None
    return _device_select().index_extrema(a)[2]


def _is_nondecreasing(a: np.ndarray) -> bool:
    if type(a) is not np.ndarray:
        step = _smallest_step(a)
        return step is None or step >= 0
    return bool(a.size < 2 or (a[1:] >= a[:-1]).all())


def _is_increasing(a: np.ndarray) -> bool:
    if type(a) is not np.ndarray:
        step = _smallest_step(a)
        return step is None or step > 0
    return bool(a.size < 2 or (a[1:] > a[:-1]).all())


def wrapped_index(a, size: int):
    """``(coordinates, bad)`` of a 1-d integer index ``a`` (host or device) into a dim of ``size``:
    its entries in [-size, size) as int64 in [0, size) (a negative counts from the end) and
    ``bad`` None, or ``(None, an entry out of that range)``."""
    if type(a) is not np.ndarray:  # on the device: its extrema read, negatives wrapped there
        lo, hi, _ = _device_select().index_extrema(a)
        if lo is None:
            return a.astype(np.int64, copy=False), None
        if lo < -size or hi >= size:
            return None, lo if lo < -size else hi
        return (_device_select().wrap_negative(a, size) if lo < 0 else a.astype(np.int64, copy=False)), None
    a = a.astype(np.int64)
    if not a.size:
        return a, None
    lo, hi = int(a.min()), int(a.max())
    if lo < -size or hi >= size:
        return None, lo if lo < -size else hi
    return (np.where(a < 0, a + size, a) if lo < 0 else a), None


def _as_index(index, size: int, op: str):
    """A 1-d int64 array of coordinates in [0, size) from ``index`` (int32/int64, 0-d or 1-d;
    negatives count from the end, as PyTorch's sparse index_select takes them): a NumPy array,
    or a device array for an index on a device (checked there)."""
    if device_of(index) not in (None, "cpu"):
        a = device_array(index)
    else:
        from_list = not hasattr(index, "dtype")
        a = native(np.asarray(index))
        if from_list and (a.size == 0 or a.dtype.kind in "iu"):
            a = a.astype(np.int64)
    if a.dtype not in (np.int32, np.int64):
        raise TypeError(f"{op}: index must have dtype int32 or int64, got {a.dtype}")
    if a.ndim > 1:
        raise ValueError(f"{op}: index must be 0-d or 1-d, got shape {a.shape}")
    a, bad = wrapped_index(a.reshape(a.size), size)
    if bad is not None:
        raise IndexError(f"{op}: index {bad} out of range for a dim of size {size}")
    return a


def _parts(t: CompressedTensor, threads):
    """``t`` (scanned or repaired when unchecked, scanned again where its caller may have written
    the arrays: a selection would drop an entry whose index left its range) in the kernels'
    canonical form."""
    return as_parts(ensure_valid_export(t, threads=threads))


def _value_rows(values: np.ndarray, n: int) -> np.ndarray:
    """COO values as a raw ``(n, E)`` view."""
    v = np.ascontiguousarray(values).reshape(n, math.prod(values.shape[1:]))
    return raw_view(v)


def _sparse_axis(t: CompressedTensor, d: int):
    """For sparse dim ``d``: (is it the compressed dim, its block extent)."""
    local = d - t.batch_dim
    return (local == 0) == t.layout.compressed_rows, t.blocksize[local]


def _resized(parts, compressed_dim: bool, size_blocks: int) -> tuple:
    """parts.sparse with the compressed (or plain) dim resized to ``size_blocks`` blocks."""
    rows, cols = parts.sparse
    rb, cb = parts.blocksize
    if compressed_dim == parts.layout.compressed_rows:
        return (size_blocks * rb, cols)
    return (rows, size_blocks * cb)
