"""A device sparse tensor with a dense device operand (``kernels/sample.cu``).

- :func:`sample_dense`: the dense operand, broadcast to the tensor's shape, at the tensor's
  entries (sparse * dense, sparse / dense, ``sparse_mask`` of a dense array); broadcasting is
  a stride of 0, never a copy;
- :func:`add_to_dense`: a tensor's values added into a dense array at its entries (sparse +
  dense);
- :func:`elementwise`: two device arrays of one shape and dtype combined (``mul``, ``div``,
  ``maximum``, ``minimum``, and the rounded quotients ``floor_divide`` and ``trunc_divide``);
- :func:`lookup`: a coalesced COO tensor's values at the elements of another tensor's entries
  (``sparse_mask`` of a sparse tensor): sorted int64 keys and a binary search per element.

The ops (:mod:`sparsetensor.ops.binary`) resolve the shapes and the result dtype; operands
arrive cast to it. Arithmetic runs on the float and complex dtypes (float16 in float32), as
the device merges do; maximum, minimum and the rounded quotients also on the integer dtypes.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._tensor import COOTensor
from ...cuda import _primitives as P

__all__ = ["sample_dense", "add_to_dense", "elementwise", "lookup"]

_EW = {"mul": 0, "div": 1}


def _broadcast_strides(shape: tuple, full: tuple) -> np.ndarray:
    """Element strides of a C-contiguous array of ``shape`` read as ``full`` (NumPy broadcasting:
    a missing or size-1 dim that ``full`` widens has stride 0)."""
    strides = [0] * len(full)
    step = 1
    for d in range(1, len(shape) + 1):
        n = shape[-d]
        if n != 1 or full[-d] == 1:
            strides[-d] = step
        step *= n
    return np.asarray(strides, dtype=np.int64)


def _dims_and_strides(dev, dense, shape: tuple):
    return P.ints(dev, shape), P.from_host(dev, _broadcast_strides(dense.shape, shape))


def _entries(t):
    """``(B, nnz, W, (Rb, Cb), plain, major)`` of compressed device tensor ``t``: ``major`` holds the
    major slot of each of the B * nnz entries (None when there are none)."""
    dev = t.values()._device
    m = t.batch_dim
    B, W = math.prod(t.shape[:m]), math.prod(t.shape[m + 2:])
    c = t.compressed_indices()
    n, nnz = c.shape[-1] - 1, t.nnz
    major = None
    if B * nnz:
        major = P.empty(dev, (B * nnz,), c.dtype)
        P.run(dev, "convert.cu", "expand_major", (P.index_key(c.dtype),), B * nnz, c, B, n, nnz, major)
    return B, nnz, W, t.blocksize, t.plain_indices(), major


def sample_dense(t, dense):
    """``dense`` (a device array broadcasting to ``t.shape``) at the entries of device tensor
    ``t`` (compressed: valid; coo: indices in bounds): a device array shaped like ``t.values()``
    in ``dense``'s dtype."""
    dev = t.values()._device
    rk = P.raw_key(dense.itemsize)
    ik = P.index_key(t.index_dtype)
    dims, strides = _dims_and_strides(dev, dense, t.shape)
    if isinstance(t, COOTensor):
        idx = t.indices()
        S, nnz = idx.shape
        W = math.prod(t.shape[S:])
        out = P.empty(dev, (nnz,) + t.shape[S:], dense.dtype)
        P.run(dev, "sample.cu", "sample_coo", (rk, ik), nnz * W, idx, S, nnz, W, len(t.shape), dims, strides, dense,
              out)
        return out
    m = t.batch_dim
    B, nnz, W, (Rb, Cb), p, major = _entries(t)
    out = P.empty(dev, t.values().shape, dense.dtype)
    if major is not None:
        P.run(dev, "sample.cu", "sample_compressed", (rk, ik), out.size, major, p, B, nnz, Rb, Cb, W,
              int(t.layout.compressed_rows), m, len(t.shape), dims, strides, dense, out)
    return out


def add_to_dense(t, values, out):
    """``out`` (a C-contiguous device array of ``t.shape``) plus device tensor ``t`` with values
    ``values`` (shaped like ``t.values()``, in ``out``'s dtype), in place; returns ``out``.
    ``t`` is canonical: a compressed tensor checked, a coo one coalesced."""
    dev = out._device
    if out.dtype == np.bool_:  # NumPy's or: added in int64, tested against 0, written back
        wide = add_to_dense(t, values.astype(np.int64), out.astype(np.int64)).astype(np.bool_)
        dev.copy_dtod(out._ptr, wide._ptr, out.nbytes)
        return out
    key = P.arith_key(out.dtype, "sparse + dense")
    ik = P.index_key(t.index_dtype)
    if isinstance(t, COOTensor):
        idx = t.indices()
        S, nnz = idx.shape
        W = math.prod(t.shape[S:])
        dims = P.ints(dev, t.shape[:S])
        P.run(dev, "sample.cu", "add_coo_to_dense", (key, ik), nnz * W, idx, S, nnz, dims, values, W, out)
        return out
    m = t.batch_dim
    B, nnz, W, (Rb, Cb), p, major = _entries(t)
    if major is not None:
        P.run(dev, "sample.cu", "add_compressed_to_dense", (key, ik), values.size, major, p, values, B, nnz, Rb, Cb,
              W, t.shape[m], t.shape[m + 1], int(t.layout.compressed_rows), out)
    return out


def elementwise(x, y, op: str):
    """``x * y``, ``x / y``, the elementwise ``maximum``/``minimum`` (NaN propagates), or ``x / y``
    rounded (``floor_divide``, ``trunc_divide``: NumPy's rounding; ZeroDivisionError for an
    integer divisor of 0) of two device arrays of one shape and dtype."""
    if op in ("floor_divide", "trunc_divide"):
        return _rounded_divide(x, y, op)
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"{op} of device arrays of shapes {x.shape} / {y.shape} and dtypes {x.dtype} / {y.dtype}: "
                         "expected one shape and one dtype")
    dev = x._device
    out = P.empty(dev, x.shape, x.dtype)
    if op in ("maximum", "minimum"):
        xv, key = P.num_view(x)
        yv, _ = P.num_view(y)
        P.run(dev, "sample.cu", "elementwise_extremum", (key,), x.size, xv, yv, out.view(xv.dtype), x.size,
              int(op == "maximum"))
        return out
    if op == "div" and x.dtype.kind not in "fc":  # the ops divide in floats: no integer division here
        raise TypeError(f"div of {x.dtype} device arrays: true division needs floating or complex values")
    if x.dtype == np.bool_:  # and: the product of 0/1 bytes
        x, y, res = x.view(np.uint8), y.view(np.uint8), out.view(np.uint8)
    else:
        res = out
    P.run(dev, "sample.cu", "elementwise", (P.arith_key(x.dtype, op),), x.size, x, y, res, x.size, _EW[op])
    return out


def _rounded_divide(x, y, op: str):
    """``x / y`` rounded: ``y`` a device array like ``x``, or a 0-d host array of its dtype (a scalar
    divisor, which every item reads)."""
    if isinstance(y, np.ndarray) and y.ndim == 0:
        y, step = P.from_host(x._device, y.reshape(1)), 0
    else:
        step = 1
    if (x.shape if step else y.shape) != y.shape or x.dtype != y.dtype:
        raise ValueError(f"{op} of arrays of shapes {x.shape} / {y.shape} and dtypes {x.dtype} / {y.dtype}: expected "
                         "one shape (or a scalar divisor) and one dtype")
    dev = x._device
    out = P.empty(dev, x.shape, x.dtype)
    xv, key = P.num_view(x)
    zero = P.zeros(dev, (1,), np.int32)
    P.run(dev, "sample.cu", "elementwise_rounded_div", (key,), x.size, xv, P.num_view(y)[0], step,
          out.view(xv.dtype), x.size, int(op == "trunc_divide"), zero)
    if P.read_ints(dev, zero)[0]:
        raise ZeroDivisionError(f"{op} of {x.dtype} device arrays: integer division by zero")
    return out


def lookup(coo, mask):
    """The values of coalesced device COO ``coo`` at every element of the entries of device tensor
    ``mask`` (compressed: valid, each item of a block looked up; coo: indices in bounds), zero
    where ``coo`` has none: a device array shaped like ``mask.values()`` in ``coo``'s dtype. The
    sparse dims of both are one shape (the op checked it)."""
    dev = coo.values()._device
    S = coo.sparse_dim
    sparse = coo.shape[:S]
    W = math.prod(coo.shape[S:])
    if math.prod(sparse) - 1 > np.iinfo(np.int64).max:
        raise NotImplementedError(f"sparse_mask on {coo.device}: the sparse sizes {sparse} are too large to "
                                  "linearise into int64 keys")
    nk = coo.nnz
    keys = P.empty(dev, (nk,), np.int64)
    dims = P.ints(dev, sparse)
    P.run(dev, "sample.cu", "coo_keys", (P.index_key(coo.index_dtype),), nk, coo.indices(), S, nk, dims, keys)
    tv = coo.values()
    rk = P.raw_key(tv.itemsize)
    out = P.empty(dev, mask.values().shape, coo.dtype)
    ik = P.index_key(mask.index_dtype)
    if isinstance(mask, COOTensor):
        idx = mask.indices()
        P.run(dev, "sample.cu", "lookup_coo", (rk, ik), mask.nnz, idx, S, mask.nnz, dims, keys, nk, tv, W, out)
        return out
    m = mask.batch_dim
    B, nnz, _, (Rb, Cb), p, major = _entries(mask)
    if major is not None:
        P.run(dev, "sample.cu", "lookup_compressed", (rk, ik), B * nnz * Rb * Cb, major, p, B, nnz, Rb, Cb,
              int(mask.layout.compressed_rows), mask.shape[m], mask.shape[m + 1], keys, nk, tv, W, out)
    return out
