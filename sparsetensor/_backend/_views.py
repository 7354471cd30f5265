"""How the CPU kernels see values: the dtype they compute in (bool as uint8, float16 widened
to float32) and C-contiguous arrays of that dtype."""

from __future__ import annotations

import numpy as np

from .._core._config import num_threads
from .._core._dtypes import check_fits
from .._lib import _convert as _convert_kernels
from .._lib._pool import empty


def kernel_dtype(dtype: np.dtype) -> tuple[np.dtype, bool]:
    """The dtype the elementwise and SpGEMM kernels compute in, and whether it holds bools
    (logical ops). (The sparse @ dense kernels read integers as unsigned bits instead:
    ``ops.blas.bits_dtype``.)"""
    if dtype == np.bool_:
        return np.dtype(np.uint8), True
    if dtype == np.float16:
        return np.dtype(np.float32), False
    return dtype, False


def kernel_values(values: np.ndarray, shape: tuple, kdt: np.dtype) -> np.ndarray:
    """``values`` as a C-contiguous array of ``shape`` in the kernels' dtype (bool viewed as uint8)."""
    v = contiguous_values(values)
    if v.dtype == np.bool_ and kdt == np.uint8:
        return v.reshape(shape).view(np.uint8)
    return v.astype(kdt, copy=False).reshape(shape)


def contiguous_values(values: np.ndarray, threads=None) -> np.ndarray:
    """``values`` C-contiguous: as they are, or copied. A view of transposed blocks (the values of
    a bsc tensor's ``mT``: ``(..., nnz, Rb, Cb)`` whose last two axes are swapped C-contiguous
    memory) is copied by a block-transposing kernel: NumPy's copy walks the tiny block dims
    element by element (3x3 float64 blocks: about 11 ns a block)."""
    if values.flags.c_contiguous:
        return values
    w = values.swapaxes(-1, -2) if values.ndim >= 3 else None
    if w is None or not w.flags.c_contiguous or values.dtype.itemsize not in UNSIGNED \
            or values.size < _TRANSPOSE_BLOCKS_MIN:
        return np.ascontiguousarray(values)
    Cb, Rb = w.shape[-2:]
    n = values.size // (Rb * Cb)
    raw = UNSIGNED[values.dtype.itemsize]
    out = empty(values.shape, values.dtype)
    _convert_kernels.transpose_blocks(w.reshape(n, Cb, Rb).view(raw), out.reshape(n, Rb, Cb).view(raw),
                                      num_threads(threads, values.size))
    return out


# Below this many items NumPy's copy of a transposed block view costs less than a kernel call.
_TRANSPOSE_BLOCKS_MIN = 1 << 12

UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}

# The batch map of a product without batch dims (every output batch reads batch 0), read-only:
# ops.blas's ProductShape and the CPU backend's unbatched SpMV share it.
NO_BATCH = np.zeros(1, dtype=np.int64)
NO_BATCH.flags.writeable = False


# -- dtypes and operands ----------------------------------------------------------------------
def work_dtype(rt: np.dtype) -> np.dtype:
    """The dtype a product is computed in: float16 widens to float32."""
    return np.dtype(np.float32) if rt == np.float16 else rt


def bits_dtype(wt: np.dtype) -> np.dtype:
    """The kernels' view of ``wt``: integers and bool as unsigned of their width."""
    return UNSIGNED[wt.itemsize] if wt.kind in "biu" else wt


LINE = 64  # bytes in a cache line


def aligned_copy(a: np.ndarray, dtype) -> np.ndarray:
    """A C-contiguous copy of ``a`` in ``dtype`` whose data starts on a cache line."""
    dtype = np.dtype(dtype)
    nbytes = a.size * dtype.itemsize
    buf = np.empty(nbytes + LINE, dtype=np.uint8)
    start = -buf.ctypes.data % LINE
    out = buf[start:start + nbytes].view(dtype).reshape(a.shape)
    np.copyto(out, a, casting="unsafe")
    return out




# What a merge of two batched compressed tensors (add, mul, maximum, ...) names when the batches
# of its result would differ in nnz, on every device.
MERGE_BATCHED = "a batched {} operation"
MERGE_BATCHED_HINT = " (convert to coo, or make the patterns agree)"


def output_rows(counts: np.ndarray, layout, idx_dt, what: str, hint: str = "", **fits):
    """``(nnz, compressed indices (B, n + 1))`` of a result with ``counts`` (B, n) entries per row,
    or ValueError (``what`` made batches of different nnz: a compressed tensor has one) or the
    index dtype's overflow error (``nnz`` and ``fits`` must fit ``idx_dt``)."""
    B, n = counts.shape
    per_batch = counts.sum(axis=1)
    if B and np.any(per_batch != per_batch[0]):
        raise ValueError(f"{what}: the batches of the result would have different numbers of entries "
                         f"{per_batch.tolist()[:16]}; every batch of a {layout.name} tensor must have the same "
                         f"nnz{hint}")
    nnz = int(per_batch[0]) if B else 0
    check_fits(idx_dt, layout.name, nnz=nnz, **fits)
    oc = np.empty((B, n + 1), dtype=idx_dt)
    oc[:, 0] = 0
    np.cumsum(counts, axis=1, out=oc[:, 1:])
    return nnz, oc
