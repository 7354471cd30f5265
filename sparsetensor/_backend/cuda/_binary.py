"""Elementwise add and mul of two device tensors of one layout (and scalar mul).

- compressed (csr/csc/bsr/bsc, same shape and blocksize): both made canonical, then one
  merge per row: ``add`` keeps the union of the patterns (``a + alpha * b``), ``mul`` the
  intersection; batches must end up with the same nnz (ValueError otherwise);
- coo: ``add`` concatenates the entries (``b``'s scaled by ``alpha``) and coalesces;
  ``mul`` coalesces both, sorts their keys together and multiplies the pairs of equal keys;
  ``maximum``/``minimum`` take the extremum of every run of equal keys (a lone entry meets 0).

Results are canonical / coalesced. An entry whose values cancel stays specified (an
explicit zero), as in PyTorch. Operands must have the same value dtype and index dtype
(TypeError) and live on the same device; mixing layouts, or a sparse and a dense
operand, raises NotImplementedError.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..._core._tensor import COOTensor, CompressedTensor
from ...cuda import _primitives as P
from .._views import MERGE_BATCHED, MERGE_BATCHED_HINT, output_rows
from ._pointwise import mul_scalar
from ._coalesce import checked
from ...cuda._classes import CudaSparseTensor

__all__ = ["add", "mul", "extremum"]

_UNION, _INTERSECTION = 0, 1
_EXTREMUM = 2  # maximum/minimum: the union's pattern, merge_extremum's values
_MERGE_PLUS = 2  # merge_write's mode of the union with alpha == 1 (MERGE_PLUS of binary.cu)


def _check_pair(op: str, a, b, arithmetic: bool = True):

    if not isinstance(b, CudaSparseTensor) or not isinstance(a, CudaSparseTensor):
        raise NotImplementedError(f"{op} on cuda of {type(a).__name__} and {type(b).__name__}: only two CUDA sparse "
                                  "tensors of one layout (or a tensor and a scalar for mul) have a GPU kernel")
    if a.layout is not b.layout:
        raise NotImplementedError(f"{op} on cuda of layouts {a.layout.name} and {b.layout.name}: convert one first")
    if a.shape != b.shape:
        raise ValueError(f"{op}: shapes differ: {a.layout.name} {a.shape} and {b.layout.name} {b.shape}")
    if a.dtype != b.dtype:
        raise TypeError(f"{op} on cuda needs one value dtype, got {a.dtype} and {b.dtype}")
    if a.index_dtype != b.index_dtype:
        raise TypeError(f"{op} on cuda needs one index dtype, got {a.index_dtype} and {b.index_dtype}")
    if a.device_id != b.device_id:
        raise ValueError(f"{op}: operands on {a.device} and {b.device}")
    if a.layout.compressed and (a.blocksize != b.blocksize or a.batch_dim != b.batch_dim):
        raise ValueError(f"{op}: {a.layout.name} operands with blocksize {a.blocksize} / {b.blocksize} and "
                         f"batch_dim {a.batch_dim} / {b.batch_dim}")
    if arithmetic:
        P.arith_key(a.dtype, op)


def add(a, b, *, alpha=1):
    """``a + alpha * b`` for two device tensors of one layout."""
    _check_pair("add", a, b)
    if a.dtype.kind != "c" and complex(alpha).imag != 0:
        raise TypeError(f"add of {a.dtype} tensors with the complex alpha={alpha!r}")
    if a.layout.compressed:
        return _merge(a, b, _UNION, alpha)
    return _coo_add(a, b, alpha)


def mul(a, b):
    """``a * b`` elementwise (intersection of the patterns), or ``a * scalar``."""
    if isinstance(b, numbers.Number) or (isinstance(b, np.generic) and b.ndim == 0):
        return mul_scalar(a, b)
    if isinstance(a, numbers.Number):
        return mul_scalar(b, a)
    _check_pair("mul", a, b)
    if a.layout.compressed:
        return _merge(a, b, _INTERSECTION, 1)
    return _coo_mul(a, b)


def extremum(a, b, op: str):
    """``op`` ("maximum", "minimum") of two device tensors of one layout and dtype: the union of the
    patterns, a missing entry counting as 0 (NaN propagates)."""
    _check_pair(op, a, b, arithmetic=False)
    if not a.layout.compressed:
        return _coo_extremum(a, b, op)
    return _merge(a, b, _EXTREMUM, op)


def _merge(a, b, mode: int, alpha):
    """The merge of two compressed tensors: ``mode`` union (``alpha``: b's factor), intersection, or
    extremum (``alpha``: "maximum" or "minimum")."""

    a, b = checked(a), checked(b)
    dev = a.values()._device
    m = a.batch_dim
    batch = a.shape[:m]
    B = math.prod(batch)
    ca, pa, va = a.compressed_indices(), a.plain_indices(), a.values()
    cb, pb, vb = b.compressed_indices(), b.plain_indices(), b.values()
    n = ca.shape[-1] - 1
    tail = va.shape[m + 1:]
    W = math.prod(tail)
    ik = P.index_key(ca.dtype)
    counts = P.empty(dev, (B * n,), np.int64)
    P.run(dev, "binary.cu", "merge_count", (ik,), B * n, ca, pa, a.nnz, cb, pb, b.nnz, B, n,
          _INTERSECTION if mode == _INTERSECTION else _UNION, counts)
    scan = P.exclusive_scan(dev, counts)
    bounds = P.read_ints(dev, P.take_strided(dev, scan, n, B + 1)) if B else np.zeros(1, np.int64)
    nnz, _ = output_rows(np.diff(bounds).reshape(B, 1), a.layout, ca.dtype, MERGE_BATCHED.format(a.layout.name),
                         MERGE_BATCHED_HINT)
    plain = P.empty(dev, batch + (nnz,), ca.dtype)
    vals = P.empty(dev, batch + (nnz,) + tail, va.dtype)
    s = complex(alpha) if mode != _EXTREMUM else 0j
    if mode == _EXTREMUM:
        xa, key = P.num_view(va)
        xb, _ = P.num_view(vb)
        P.run(dev, "binary.cu", "merge_extremum", (key, ik), B * n, ca, pa, xa, a.nnz, cb, pb, xb, b.nnz, B, n, W,
              int(alpha == "maximum"), scan, plain, vals.view(xa.dtype))
    else:
        plus = mode == _UNION and s == 1  # x + y, as the CPU's: no multiply by 1 (NaN from 1 * inf in complex)
        P.run(dev, "binary.cu", "merge_write", (P.arith_key(va.dtype, "add"), ik), B * n, ca, pa, va, a.nnz, cb, pb,
              vb, b.nnz, B, n, W, _MERGE_PLUS if plus else mode, s.real, s.imag, scan, plain, vals)
    comp = P.batch_offsets(dev, scan, B, n, 1, ca.dtype)
    return CompressedTensor(comp.reshape(batch + (n + 1,)), plain, vals, a.shape, a.layout, True)


def _concat_indices(dev, ia, ib):
    S = ia.shape[0]
    na, nb = ia.shape[1], ib.shape[1]
    out = P.empty(dev, (S, na + nb), ia.dtype)
    item = ia.itemsize
    for d in range(S):
        dev.copy_dtod(out._ptr + d * (na + nb) * item, ia._ptr + d * na * item, na * item)
        dev.copy_dtod(out._ptr + (d * (na + nb) + na) * item, ib._ptr + d * nb * item, nb * item)
    return out


def _coo_add(a, b, alpha):
    # each operand's duplicates summed first, in its own dtype, before alpha scales b (the CPU's
    # order: x - x of repeated entries is exactly 0); a coalesced flag given unchecked is checked (C6)
    a, b = a.coalesce(), b.coalesce()
    dev = a.values()._device
    vb = b.values() if complex(alpha) == 1 else mul_scalar(b, alpha).values()
    idx = _concat_indices(dev, a.indices(), b.indices())
    vals = P.concat(dev, [a.values(), vb])
    return COOTensor(idx, vals, a.shape, False).coalesce()


def _coo_runs(a, b, op: str, pairs: bool):
    """The entries of two device COO tensors coalesced and sorted together by element: ``(a, b,
    indices, perm, starts)``; a run is the entries of one element (one, or a pair: a's then b's),
    every element of the union, or only the pairs (``pairs``: the intersection)."""
    a, b = a.coalesce(), b.coalesce()
    dev = a.values()._device
    S = a.sparse_dim
    span = math.prod(a.shape[:S])
    if span > 1 << 64:
        raise NotImplementedError(f"{op} of coo tensors on cuda: {span} sparse coordinates exceed a 64-bit key")
    ik = (P.index_key(a.index_dtype),)
    shape = P.ints(dev, a.shape[:S])
    na, nb = a.nnz, b.nnz
    n = na + nb
    keys = P.empty(dev, (n,), np.uint64)
    ka, kb = keys[:na], keys[na:]
    P.run(dev, "coalesce.cu", "coo_keys", ik, na, a.indices(), S, na, shape, ka)
    P.run(dev, "coalesce.cu", "coo_keys", ik, nb, b.indices(), S, nb, shape, kb)
    sorted_keys, perm = P.radix_sort(dev, keys, max(span - 1, 0).bit_length())
    flags = P.empty(dev, (n,), np.int64)
    P.run(dev, "coalesce.cu", "pair_heads" if pairs else "run_heads", (), n, sorted_keys, n, flags)
    scan = P.exclusive_scan(dev, flags)
    nout = int(P.read_ints(dev, scan[n:n + 1])[0])
    starts = P.empty(dev, (nout + 1,), np.int64)
    P.run(dev, "coalesce.cu", "run_starts", (), n, scan, n, starts)
    idx = P.empty(dev, (S, nout), a.index_dtype)
    P.run(dev, "coalesce.cu", "coo_unkey", ik, nout, sorted_keys, starts, nout, S, shape, idx)
    return a, b, idx, perm, starts


def _coo_mul(a, b):
    a, b, idx, perm, starts = _coo_runs(a, b, "mul", True)
    nout = idx.shape[1]
    dense = a.values().shape[1:]
    W = math.prod(dense)
    vals = P.empty(a.values()._device, (nout,) + dense, a.dtype)
    P.run(vals._device, "coalesce.cu", "pair_products", (P.arith_key(a.dtype, "mul"),), nout * W, perm, starts, nout,
          a.nnz, a.values(), b.values(), W, vals)
    return COOTensor(idx, vals, a.shape, True, True)  # the union or intersection of two checked operands


def _coo_extremum(a, b, op: str):
    a, b, idx, perm, starts = _coo_runs(a, b, op, False)
    nout = idx.shape[1]
    dense = a.values().shape[1:]
    W = math.prod(dense)
    vals = P.empty(a.values()._device, (nout,) + dense, a.dtype)
    xa, key = P.num_view(a.values())
    xb, _ = P.num_view(b.values())
    P.run(vals._device, "coalesce.cu", "run_extremum", (key,), nout * W, perm, starts, nout, a.nnz, xa, xb, W,
          int(op == "maximum"), vals.view(xa.dtype))
    return COOTensor(idx, vals, a.shape, True, True)  # the union or intersection of two checked operands
