"""Sums on the device.

``sum(t)`` (all elements) returns a 0-d DeviceArray of ``t.dtype`` (float16 summed in
float32 and rounded once), in two deterministic passes. ``sum(t, dim)`` of a
compressed tensor over one of its two sparse dims returns a dense DeviceArray,
``batch + (rows or cols,) + dense``, as the CPU does (:mod:`sparsetensor.ops.reduce`):
the plain dim is summed row by row, the compressed dim after a device transpose.
Other reductions raise NotImplementedError.

:func:`index_extrema` and :func:`step_extrema` read the few numbers a shape estimate
needs (the largest and smallest index per row, the largest step of a compressed
index): one small reduction kernel, then one synchronisation.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from ...cuda import _primitives as P
from ...cuda._module import launch
from ...cuda._classes import CudaCompressedTensor

__all__ = ["sum", "index_extrema", "step_extrema"]

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


def sum(t, dim=None):  # noqa: A001 - torch's name
    """Sum of all elements (``dim=None``) or over one sparse dim of a compressed tensor."""
    from ._convert import transpose_compressed
    from ._coalesce import checked

    if dim is None:
        return sum_all(t)
    if not isinstance(t, CudaCompressedTensor) or not isinstance(dim, (int, np.integer)):
        raise NotImplementedError(f"sum over dim={dim!r} of a {t.layout.name} tensor on cuda: only dim=None, or one "
                                  "sparse dim of a compressed tensor, has a GPU kernel")
    d = operator.index(dim)
    if not -t.ndim <= d < t.ndim:
        raise IndexError(f"dimension {d} out of range for a tensor of {t.ndim} dims")
    d %= t.ndim
    m = t.batch_dim
    if d not in (m, m + 1):
        raise NotImplementedError(f"sum over dim={dim} of a {t.layout.name} tensor on cuda (batch_dim={m}): only the "
                                  "two sparse dims have a GPU kernel")
    key = P.value_key(t.dtype, "sum")
    t = checked(t)
    plain_dim = m + 1 if t.layout.compressed_rows else m
    if d != plain_dim:
        t = transpose_compressed(t)
    dev = t.values()._device
    batch = t.shape[:m]
    B = math.prod(batch)
    rows = t.layout.compressed_rows
    rb, cb = t.blocksize
    c, v = t.compressed_indices(), t.values()
    nmajor = c.shape[-1] - 1
    kept = t.shape[m] if rows else t.shape[m + 1]
    dense = t.shape[m + 2:]
    W = math.prod(dense)
    out = P.empty(dev, batch + (kept,) + dense, t.dtype)
    P.run(dev, "reduce.cu", "compressed_sum_plain", (key, P.index_key(c.dtype)), out.size, c, v, B, nmajor, t.nnz,
          rb, cb, W, int(rows), out)
    return out
