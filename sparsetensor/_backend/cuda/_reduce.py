"""Reductions on the device: sums, max and min, softmax over segments.

``sum_all(t)`` (all elements) returns a 0-d DeviceArray of ``t.dtype`` (float16 summed in
float32 and rounded once), in two deterministic passes. A reduction over one sparse dim of
a compressed tensor returns a dense DeviceArray, ``batch + (rows or cols,) + dense``, as the
CPU does (:mod:`sparsetensor.ops.reduce`): the plain dim is reduced row by row, the
compressed dim after a device transpose. :func:`reduce_dims` is the backend's ``reduce_dims``: sum, max or min (amax/amin, whose
unspecified elements take part as zeros) over every dim, or over one sparse dim of a
compressed tensor, for every value dtype the op hands over (sums of integers in int64, bool
as uint8); any other set of dims goes to :mod:`._reduce_dims`.

:func:`index_extrema` and :func:`step_extrema` read the few numbers a shape estimate
needs (the largest and smallest index per row, the largest step of a compressed
index): one small reduction kernel, then one synchronisation.
"""

from __future__ import annotations

import math

import numpy as np

from ...cuda import _primitives as P
from ...cuda._module import BLOCK, grid_for, launch
from ...cuda._classes import CudaCompressedTensor
from . import _reduce_dims

__all__ = ["sum_all", "reduce_dims", "index_extrema", "step_extrema", "batch_offsets", "segment_softmax"]

_SUM_THREADS = 256
_MAX_PARTIALS = 1024
_EXTREMA_THREADS = 256
_EXTREMA_PARTS = 64


def _extrema(a, rows: int, length: int, diff: int, seg: int):
    dev = a._device
    parts = max(1, min(-(-length // _EXTREMA_THREADS), _EXTREMA_PARTS))
    out = P.empty(dev, (rows, parts, 2), np.int64)
    launch(dev, "reduce.cu", "index_extrema", (P.index_key(a.dtype),), rows * parts, _EXTREMA_THREADS, a, rows,
           length, parts, diff, seg, out)
    r = P.read_ints(dev, out)
    return r[:, :, 0].max(axis=1), r[:, :, 1].min(axis=1)


def index_extrema(a):
    """``(max, min)``: host int64 arrays of the largest and smallest entry of each row of a
    2-d device index array ``(rows, n)`` with ``n > 0`` (synchronises once)."""
    rows, n = a.shape
    if not rows or not n:
        raise ValueError(f"index_extrema needs a non-empty array, got shape {a.shape}")
    return _extrema(a, rows, n, 0, 1)


def step_extrema(c) -> int:
    """The largest step ``c[..., i + 1] - c[..., i]`` of a device compressed index (wrapping in
    its dtype, as ``np.diff``); needs at least one step (synchronises once)."""
    seg = c.shape[-1] - 1
    length = (c.size // (seg + 1)) * seg if seg > 0 else 0
    if not length:
        raise ValueError(f"step_extrema needs at least one step, got shape {c.shape}")
    return int(_extrema(c, 1, length, 1, seg)[0][0])


def sum_all(t):
    """The sum of every value of device tensor ``t``: a 0-d DeviceArray of its dtype."""
    dev = t.values()._device
    v = t.values()
    key = P.value_key(v.dtype, "sum")
    acc = P.acc_dtype(v.dtype)
    n = v.size
    out = P.empty(dev, (), v.dtype)
    nblocks = max(1, min(-(-n // _SUM_THREADS), _MAX_PARTIALS))
    partial = P.empty(dev, (nblocks,), acc)
    launch(dev, "reduce.cu", "sum_partial", (key,), nblocks, _SUM_THREADS, v, n, partial)
    launch(dev, "reduce.cu", "sum_final", (key,), 1, _SUM_THREADS, partial, nblocks, out)
    return out


# -- sum, max and min over dims (the ``reduce_dims`` kernel of the backend) ---------------------------------
_RED_CODES = {"sum": 0, "max": 1, "min": 2}  # RED_SUM, RED_MAX, RED_MIN of reduce.cu
def _reduce_values(v, rows: int, W: int, red: str, fold_zero: bool):
    """``red`` over the ``rows`` rows of ``v`` (``(rows, W)``, C-contiguous), per lane: a ``(W,)`` device
    array; ``fold_zero``: a zero takes part too (the unspecified elements of amax/amin)."""
    dev = v._device
    x, key = P.num_view(v)
    parts = max(1, min(-(-rows // _SUM_THREADS), _MAX_PARTIALS))
    partial = P.zeros(dev, (parts + 1, W), x.dtype)  # + a row of zeros, taken when fold_zero
    has = P.from_host(dev, np.repeat(np.array([1] * parts + [int(fold_zero)], np.int32), W))
    out = P.empty(dev, (1, W), x.dtype)
    done = P.empty(dev, (1, W), np.int32)
    code = _RED_CODES[red]
    if rows and W:
        launch(dev, "reduce.cu", "reduce_rows", (key,), parts * W, _SUM_THREADS, x, rows, W, parts, code, partial, 0,
               has, has)
    else:
        has = P.from_host(dev, np.repeat(np.array([0] * parts + [int(fold_zero)], np.int32), W))
    if W:
        launch(dev, "reduce.cu", "reduce_rows", (key,), W, _SUM_THREADS, partial, parts + 1, W, 1, code, out, 1, has,
               done)
    out = out.reshape((W,))
    return out.view(np.bool_) if v.dtype == np.bool_ else out


def _reduce_all(t, red: str):
    """``red`` over every element of ``t``: a 0-d device array of its dtype."""
    v = t.values()
    if red == "sum" and v.dtype.name not in P.NUM_KEYS:
        return sum_all(t)  # floating and complex sums: two deterministic passes in the accumulation dtype
    numel = math.prod(t.shape)
    return _reduce_values(v.reshape(-1, 1) if v.size else v.reshape(0, 1), v.size, 1, red,
                          red != "sum" and v.size < numel).reshape(())


def _reduce_sparse_dim(t, d: int, red: str):
    """``red`` over sparse dim ``d`` of compressed ``t``: ``batch + (kept,) + dense`` (the plain dim
    row by row, the compressed dim after a device transpose). Floating and complex sums take
    compressed_sum_plain (float16 in float32), the rest compressed_reduce_plain."""
    from ._convert import transpose_compressed
    from ._coalesce import checked

    t = checked(t)
    m = t.batch_dim
    plain_dim = m + 1 if t.layout.compressed_rows else m
    if d != plain_dim:
        t = transpose_compressed(t)
    dev = t.values()._device
    batch = t.shape[:m]
    B = math.prod(batch)
    rows = t.layout.compressed_rows
    rb, cb = t.blocksize
    c = t.compressed_indices()
    kept = t.shape[m] if rows else t.shape[m + 1]
    plain = t.shape[m + 1] if rows else t.shape[m]
    dense = t.shape[m + 2:]
    W = math.prod(dense)
    ik = P.index_key(c.dtype)
    if red == "sum" and t.dtype.name not in P.NUM_KEYS:
        out = P.empty(dev, batch + (kept,) + dense, t.dtype)
        P.run(dev, "reduce.cu", "compressed_sum_plain", (P.value_key(t.dtype, "sum"), ik), out.size, c, t.values(),
              B, c.shape[-1] - 1, t.nnz, rb, cb, W, int(rows), out)
        return out
    x, key = P.num_view(t.values())
    out = P.empty(dev, batch + (kept,) + dense, x.dtype)
    P.run(dev, "reduce.cu", "compressed_reduce_plain", (key, ik), out.size, c, x, B, c.shape[-1] - 1, t.nnz, rb, cb,
          W, int(rows), _RED_CODES[red], plain, out)
    return out.view(np.bool_) if t.dtype == np.bool_ else out


def reduce_dims(t, dims: tuple, red: str):
    """``red`` ("sum", "max", "min") of device tensor ``t`` over ``dims`` (normalised, sorted), which
    stay with size 1: every dim, or one sparse dim of a compressed tensor (a dense device array),
    here; any other set in :mod:`._reduce_dims`, with the CPU's result types.
    For max/min ``t`` has distinct indices and its unspecified elements count as zeros."""
    if dims == tuple(range(t.ndim)):
        return _reduce_all(t, red).reshape((1,) * t.ndim)
    m = t.batch_dim
    if isinstance(t, CudaCompressedTensor) and len(dims) == 1 and dims[0] in (m, m + 1):
        (d,) = dims
        return _reduce_sparse_dim(t, d, red).reshape(t.shape[:d] + (1,) + t.shape[d + 1:])
    return _reduce_dims.reduce_dims(t, dims, red)


# -- softmax over segments ------------------------------------------------------------------------------------
def batch_offsets(c, nnz: int):
    """The compressed indices ``(B, n + 1)`` of B batches as int64 offsets ``(B * n + 1,)`` into their
    concatenated entries (batch b's start at ``b * nnz``), on the device."""
    dev = c._device
    B, n1 = c.shape
    off = P.empty(dev, (B * (n1 - 1) + 1,), np.int64)
    P.run(dev, "reduce.cu", "segment_offsets", (P.index_key(c.dtype),), off.size, c, B, n1 - 1, nnz, off)
    return off


def segment_softmax(x, offsets, E: int, perm, log: bool):
    """Softmax (``log``: its logarithm) of device ``x`` (``(n, K * E)``, float32/64) over the rows of
    each segment ``offsets[g]:offsets[g + 1]`` (a device or host array) and their ``K`` items, per
    lane; rows in order, or in the order ``perm`` gives (results in ``x``'s row order)."""
    dev = x._device
    if type(offsets) is np.ndarray:  # segments the op made on the host (a dense axis): metadata
        offsets = P.from_host(dev, np.ascontiguousarray(offsets, dtype=np.int64))
    if perm is not None:  # the rows gathered into segment order, and the results put back
        n = x.shape[0]
        res = segment_softmax(P.gather_rows(dev, x, perm, n), offsets, E, None, log)
        inverse = P.empty(dev, (n,), np.int64)
        P.run(dev, "reduce_dims.cu", "invert_perm", (), n, perm, n, inverse)
        return P.gather_rows(dev, res, inverse, n)
    key = x.dtype.name
    if key not in ("float32", "float64"):
        raise TypeError(f"segment_softmax on cuda needs float32 or float64 values, got {x.dtype}")
    n = x.shape[0]
    KE = x.shape[1] if x.ndim == 2 else 0
    K = KE // E if E else 0
    out = P.empty(dev, x.shape, x.dtype)
    G = offsets.shape[0] - 1
    if not (n and KE and G):
        return out
    tpg = P.group_size(n * K / G)
    long_len = _SOFTMAX_PER_THREAD * tpg
    count = P.zeros(dev, (1,), np.uint64)
    longs = P.empty(dev, (G * E,), np.int64) if n * K > long_len else None  # else no segment can be long
    launch(dev, "reduce.cu", "segment_softmax", (key,), grid_for(dev, G * E * tpg), BLOCK, x, offsets, G, K, E,
           int(log), tpg, long_len if longs is not None else n * K, count, longs, out)
    if longs is not None:
        blocks = min(G * E, n * K // long_len, dev.sm_count * 8)
        launch(dev, "reduce.cu", "segment_softmax_long", (key,), blocks, BLOCK, x, offsets, K, E, int(log), count,
               longs, out)
    return out


# A segment's items a thread of segment_softmax takes at most; longer segments take a block each.
_SOFTMAX_PER_THREAD = 64

