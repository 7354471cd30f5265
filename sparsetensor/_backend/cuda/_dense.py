"""Dense <-> sparse on the device: ``to_dense`` and ``dense_to_sparse`` (``st.from_dense`` of a
device array) for every layout.

Semantics are the CPU's (:mod:`sparsetensor.ops.dense`): an element (a block for bsr/bsc,
a dense sub-array for hybrid tensors) is specified when any of its items is nonzero
(NaN counts, -0.0 does not); every batch must have the same nnz; duplicates of an
unchecked input are summed by ``to_dense`` (here: the input is coalesced on the device
first, which also checks its indices). Values move as raw items, so every value dtype
works, except that summing duplicates needs a float or complex dtype.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core import _layout as L
from ..._core._tensor import COOTensor, CompressedTensor
from ...cuda import _primitives as P
from ...cuda._array import DeviceArray
from ...cuda._classes import CudaCOOTensor, CudaCompressedTensor

__all__ = ["to_dense", "dense_to_sparse", "diagonal"]

# How dense_nonzero tests an item: (ztest key, mask, items per value).
_ZTEST = {
    "b": ("uint8", 0xFF, 1), "i1": ("uint8", 0xFF, 1), "u1": ("uint8", 0xFF, 1),
    "i2": ("uint16", 0xFFFF, 1), "f2": ("uint16", 0x7FFF, 1),
    "i4": ("uint32", 0xFFFFFFFF, 1), "i8": ("uint64", 0xFFFFFFFFFFFFFFFF, 1),
    "f4": ("float32", 0, 1), "f8": ("float64", 0, 1), "c8": ("float32", 0, 2), "c16": ("float64", 0, 2),
}


def _ztest(dtype: np.dtype):
    code = "b" if dtype == np.bool_ else f"{dtype.kind}{dtype.itemsize}"
    return _ZTEST[code]


def to_dense(t) -> DeviceArray:
    """The dense device array of a device sparse tensor (shape ``t.shape``, dtype ``t.dtype``)."""

    if isinstance(t, CudaCompressedTensor):
        return _compressed_to_dense(t)
    if isinstance(t, CudaCOOTensor):
        return _coo_to_dense(t)
    raise TypeError(f"to_dense expects a CUDA sparse tensor, got {type(t).__name__}")


def _compressed_to_dense(t) -> DeviceArray:
    from ._coalesce import UnequalBatches, batch_matrices, checked

    out = P.zeros(t.values()._device, t.shape, t.dtype)
    try:
        _scatter(checked(t), out)  # indices proven in bounds; duplicates summed
    except UnequalBatches:
        # batches whose repeats sum to different nnz: one batch at a time (the CPU's scatter sums
        # repeats in place, so it never needs one nnz)
        whole = out.reshape((-1,) + t.shape[t.batch_dim:])
        for b, one in enumerate(batch_matrices(t)):
            _scatter(checked(one), whole[b])
    return out


def _scatter(t, out) -> None:
    """Write canonical device tensor ``t`` into zero-filled ``out`` (its shape and dtype)."""
    dev = t.values()._device
    m = t.batch_dim
    B = math.prod(t.shape[:m])
    NR, NC = t.shape[m], t.shape[m + 1]
    rb, cb = t.blocksize
    W = math.prod(t.shape[m + 2:])
    c, p, v = t.compressed_indices(), t.plain_indices(), t.values()
    n, nnz = c.shape[-1] - 1, t.nnz
    N = B * nnz
    if N == 0 or W == 0:
        return
    ik = P.index_key(c.dtype)
    major = P.empty(dev, (N,), c.dtype)
    P.run(dev, "convert.cu", "expand_major", (ik,), N, c, B, n, nnz, major)
    P.run(dev, "dense.cu", "compressed_to_dense", (P.raw_key(v.itemsize), ik), N * rb * cb * W, major, p, v,
          B, nnz, rb, cb, W, NR, NC, int(t.layout.compressed_rows), out)


def _coo_to_dense(t) -> DeviceArray:
    from ._coalesce import coalesce

    # checks the bounds (C4/C5) and sums duplicates; a coalesced flag given unchecked is not
    # trusted but repaired, as the CPU's scatter (which sums repeats) does not need it
    t = coalesce(t)
    dev = t.values()._device
    idx, v = t.indices(), t.values()
    S, nnz = idx.shape
    W = math.prod(t.shape[S:])
    out = P.zeros(dev, t.shape, t.dtype)
    if nnz == 0 or W == 0:
        return out
    shape = P.ints(dev, t.shape[:S])
    P.run(dev, "dense.cu", "coo_to_dense", (P.raw_key(v.itemsize), P.index_key(idx.dtype)), nnz * W, idx, S, nnz,
          shape, v, W, out)
    return out


def diagonal(coo, offset: int, d1: int, d2: int, k: int) -> DeviceArray:
    """The diagonal (``offset``, sparse dims ``d1``, ``d2``, length ``k``) of device COO ``coo``:
    a dense device array of its other sparse dims, its dense dims and ``k`` (the CPU's
    :func:`sparsetensor._backend.cpu.diagonal`), duplicates summed first."""
    t = coo.coalesce()  # distinct indices: every diagonal element has one writer
    dev = t.values()._device
    idx, v = t.indices(), t.values()
    S, nnz = idx.shape
    dense = t.shape[S:]
    other = tuple(t.shape[d] for d in range(S) if d not in (d1, d2))
    out = P.zeros(dev, other + dense + (k,), t.dtype)
    W = math.prod(dense)
    if nnz == 0 or W == 0 or k == 0:
        return out
    dims = P.ints(dev, t.shape[:S])
    P.run(dev, "dense.cu", "coo_diagonal", (P.raw_key(v.itemsize), P.index_key(idx.dtype)), nnz * W, idx, S, nnz,
          dims, d1, d2, offset, k, v, W, out)
    return out


def dense_to_sparse(a: DeviceArray, plan):
    """The device tensor of dense device array ``a`` that ``plan`` (:class:`sparsetensor.ops.dense.DensePlan`,
    the arguments checked) describes (the ``from_dense`` kernel of :mod:`._backend`)."""
    from ..._core._canonical import same_nnz

    dev = a._device
    layout, idx_dt, batch, sparse, dense, bs = plan
    zkey, mask, per_value = _ztest(a.dtype)
    rkey = P.raw_key(a.itemsize)
    ik = P.index_key(idx_dt)
    if layout is L.sparse_coo:
        S = len(sparse)
        M, W = math.prod(sparse), math.prod(dense)
        flags = P.empty(dev, (M,), np.int64)
        P.run(dev, "dense.cu", "dense_nonzero", (zkey,), M, a, 1, M, 1, W * per_value, 1, 1, 1, mask, flags)
        scan = P.exclusive_scan(dev, flags)
        nnz = int(P.read_ints(dev, scan[M:M + 1])[0])
        idx = P.empty(dev, (S, nnz), idx_dt)
        vals = P.empty(dev, (nnz,) + dense, a.dtype)
        shape = P.ints(dev, sparse)
        P.run(dev, "dense.cu", "dense_to_coo", (rkey, ik), M, a, scan, M, W, S, shape, nnz, idx, vals)
        return COOTensor(idx, vals, a.shape, True, True)  # made by the kernels: valid

    rows, cols = sparse
    B, W = math.prod(batch), math.prod(dense)
    crow = layout.compressed_rows
    nmajor = rows // bs[0] if crow else cols // bs[1]
    nminor = cols // bs[1] if crow else rows // bs[0]
    total = B * nmajor * nminor
    flags = P.empty(dev, (total,), np.int64)
    P.run(dev, "dense.cu", "dense_nonzero", (zkey,), total, a, B, rows, cols, W * per_value, bs[0], bs[1], int(crow),
          mask, flags)
    scan = P.exclusive_scan(dev, flags)
    bounds = P.read_ints(dev, P.take_strided(dev, scan, nmajor * nminor, B + 1)) if B else np.zeros(1, np.int64)
    counts = np.diff(bounds)
    same_nnz(counts, batch, f"every batch of a {layout.name} tensor must have the same nnz")
    nnz = int(counts[0]) if B else 0
    block = bs if layout.blocked else ()
    plain = P.empty(dev, batch + (nnz,), idx_dt)
    vals = P.empty(dev, batch + (nnz,) + block + dense, a.dtype)
    P.run(dev, "dense.cu", "dense_to_compressed", (rkey, ik), total, a, scan, B, rows, cols, W, bs[0], bs[1], int(crow),
          plain, vals)
    comp = P.batch_offsets(dev, scan, B, nmajor, nminor, idx_dt)
    return CompressedTensor(comp.reshape(batch + (nmajor + 1,)), plain, vals, a.shape, layout, True)
