"""Dense <-> sparse: ``t.to_dense()`` and :func:`from_dense`, over the Cython kernels.

The kernels see every tensor in one canonical form: compressed ``(B, n + 1)``,
plain ``(B, nnz)``, values ``(B, nnz, Rb, Cb, D)`` and dense ``(B, R, C, D)``,
where ``B``/``D`` are the products of the batch/dense sizes, and values are
reinterpreted as raw unsigned integers when they are only moved (see
:mod:`sparsetensor._dtypes`).
"""

from __future__ import annotations

import math
import operator
from typing import NamedTuple

import numpy as np

from . import _layout as L
from ._canonical import same_nnz
from ._config import num_threads
from ._dtypes import VALUE_DTYPES, arith_view, as_index_dtype, check_fits, raw_view, zero_test_view
from ._lib import _dense as _kernels
from ._tensor import COOTensor, CompressedTensor, SparseTensor
from ._validate import raise_compressed_error, raise_coo_error

__all__ = ["to_dense", "from_dense", "check_from_dense", "DensePlan"]


def _kernel_views(values: np.ndarray, out: np.ndarray, accumulate: bool):
    """The views a scatter kernel takes: raw for moves, arithmetic (float16 widened) for sums.

    Returns ``(values_view, out_view, widened)``; ``widened`` is a float32 buffer to copy
    back into ``out`` when ``out`` is float16 and the kernel accumulated.
    """
    if not accumulate:
        return raw_view(values), raw_view(out), None
    if out.dtype == np.float16:
        buf = np.zeros(out.shape, np.float32)
        return arith_view(values), buf, buf
    return arith_view(values), arith_view(out), None


def to_dense(t, *, threads: int | None = None) -> np.ndarray:
    """The dense array of a sparse tensor; duplicates (possible only in unchecked input) are summed."""
    if not isinstance(t, SparseTensor):
        raise TypeError(f"to_dense expects a sparse tensor, got {type(t).__name__}")
    return t._to_dense(threads)  # the layout's body: _coo_to_dense or _compressed_to_dense


def _compressed_to_dense(t: CompressedTensor, threads) -> np.ndarray:
    m = t.batch_dim
    batch = t.shape[:m]
    rows, cols = t.shape[m], t.shape[m + 1]
    rb, cb = t.blocksize
    B, D = math.prod(batch), math.prod(t.shape[m + 2:])
    out = np.zeros(t.shape, dtype=t.dtype)
    values = np.ascontiguousarray(t.values()).reshape(B, t.nnz, rb, cb, D)
    accumulate = not t.is_coalesced()
    v, o, widened = _kernel_views(values, out.reshape(B, rows, cols, D), accumulate)
    c = t.compressed_indices().reshape(B, t.compressed_indices().shape[-1])
    p = t.plain_indices().reshape(B, t.nnz)
    # the kernel checks 5.3-5.5 as it scans (never reading out of bounds), then 5.1/5.2 of a
    # tensor that was never checked, and reports the first broken one
    found = _kernels.compressed_to_dense(c, p, v, o, t.layout.compressed_rows, accumulate,
                                         num_threads(threads, values.size), check_ends=not t.is_coalesced())
    if found is not None:
        raise_compressed_error(found, t.layout, batch, t.plain_size, t.nnz)
    if widened is not None:
        out[...] = widened.reshape(out.shape)
    return out


def _coo_to_dense(t: COOTensor, threads) -> np.ndarray:
    S = t.sparse_dim
    M, D = math.prod(t.shape[:S]), math.prod(t.shape[S:])
    out = np.zeros(t.shape, dtype=t.dtype)
    values = np.ascontiguousarray(t.values()).reshape(t.nnz, D)
    accumulate = not t.is_coalesced()
    v, o, widened = _kernel_views(values, out.reshape(M, D), accumulate)
    shape = np.asarray(t.shape[:S], dtype=np.int64)
    found = _kernels.coo_to_dense(t.indices(), v, shape, o, accumulate, num_threads(threads, values.size))
    if found is not None:
        raise_coo_error(found, t.shape)
    if widened is not None:
        out[...] = widened.reshape(out.shape)
    return out


def _as_blocksize(blocksize, layout: L.Layout) -> tuple:
    if blocksize is None:
        if layout.blocked:
            raise ValueError(f"from_dense to {layout.name} needs blocksize=(rows, cols)")
        return (1, 1)
    bs = L.as_blocksize(blocksize)
    if not layout.blocked and bs != (1, 1):
        raise ValueError(f"blocksize={bs} given for layout {layout.name}; use bsr/bsc for blocks")
    return bs


class DensePlan(NamedTuple):
    """What :func:`check_from_dense` derives from a dense shape: the target layout and index
    dtype, and the shape split into ``batch + sparse + dense`` (``blocksize`` (1, 1) for
    csr/csc and coo)."""

    layout: L.Layout
    index_dtype: np.dtype
    batch: tuple
    sparse: tuple
    dense: tuple
    blocksize: tuple


def check_from_dense(shape: tuple, dtype, layout, blocksize, dense_dim, batch_dim, index_dtype) -> DensePlan:
    """The argument checks of ``from_dense``, shared by the CPU and CUDA sides (ValueError for
    shapes and arguments, TypeError for dtypes)."""
    layout = L.as_layout(layout)
    if layout is L.strided:
        raise ValueError("from_dense needs a sparse layout, got strided")
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"unsupported value dtype {dtype}; supported: {', '.join(map(str, VALUE_DTYPES))}")
    idx_dt = as_index_dtype(index_dtype)
    dense_dim, batch_dim = operator.index(dense_dim), operator.index(batch_dim)
    if dense_dim < 0 or batch_dim < 0:
        raise ValueError(f"dense_dim and batch_dim must be >= 0, got {dense_dim} and {batch_dim}")
    ndim = len(shape)
    if layout is L.sparse_coo:
        if blocksize is not None:
            raise ValueError("blocksize is not defined for layout coo")
        if dense_dim > ndim:
            raise ValueError(f"dense_dim={dense_dim} exceeds the array's {ndim} dims")
        S = ndim - dense_dim
        check_fits(idx_dt, "coo", **{f"size[{d}]": shape[d] for d in range(S)})
        return DensePlan(layout, idx_dt, (), tuple(shape[:S]), tuple(shape[S:]), (1, 1))
    need = batch_dim + 2 + dense_dim
    if ndim != need:
        raise ValueError(f"from_dense to {layout.name} with batch_dim={batch_dim}, dense_dim={dense_dim} needs a "
                         f"{need}-d array (batch + 2 sparse + dense), got {ndim}-d with shape {tuple(shape)}")
    bs = _as_blocksize(blocksize, layout)
    m = batch_dim
    rows, cols = shape[m:m + 2]
    if rows % bs[0] or cols % bs[1]:
        raise ValueError(f"blocksize {bs} must divide the sparse sizes ({rows}, {cols})")
    check_fits(idx_dt, layout.name, nrows=rows, ncols=cols, nnz=(rows // bs[0]) * (cols // bs[1]))
    return DensePlan(layout, idx_dt, tuple(shape[:m]), (rows, cols), tuple(shape[m + 2:]), bs)


def from_dense(array, layout="csr", *, blocksize=None, dense_dim: int = 0, batch_dim: int = 0,
               index_dtype=np.int64, threads: int | None = None):
    """Convert a dense array to a sparse layout.

    An element (for hybrid tensors: the dense sub-array at a sparse position;
    for bsr/bsc: a block) is specified when any of its values is nonzero
    (NaN counts as nonzero, -0.0 as zero).

    Parameters
    ----------
    array : array_like
        ``batch + (rows, cols) + dense`` for compressed layouts; any shape for coo.
    layout : str or Layout
        ``"coo"``, ``"csr"``, ``"csc"``, ``"bsr"`` or ``"bsc"``.
    blocksize : (int, int), optional
        Block shape for bsr/bsc (required there); must divide the sparse sizes.
    dense_dim : int
        How many trailing dims stay dense (hybrid tensor).
    batch_dim : int
        How many leading dims are batch dims (compressed layouts; for coo they
        become leading sparse dims). Every batch must have the same nnz.
    index_dtype : int32 or int64
        The dtype of the index arrays (default int64).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = np.array([[0, 1, 0, 0], [2, 0, 0, 3]])
    >>> t = st.from_dense(a, "bsr", blocksize=(2, 2))
    >>> t.crow_indices(), t.col_indices()
    (array([0, 2]), array([0, 1]))
    >>> bool((t.to_dense() == a).all())
    True
    """
    a = np.asarray(array)
    plan = check_from_dense(a.shape, a.dtype, layout, blocksize, dense_dim, batch_dim, index_dtype)
    layout, idx_dt, batch, sparse, dense, bs = plan
    a = np.ascontiguousarray(a)
    if layout is L.sparse_coo:
        return _dense_to_coo(a, plan, threads)
    rows, cols = sparse
    B, D = math.prod(batch), math.prod(dense)
    z = zero_test_view(a.reshape(B, rows, cols, D))
    r = raw_view(a.reshape(B, rows, cols, D))
    c, p, v, counts = _kernels.dense_to_compressed(z, r, bs[0], bs[1], layout.compressed_rows, idx_dt,
                                                   num_threads(threads, a.size), float16=a.dtype == np.float16)
    same_nnz(counts, batch, f"every batch of a {layout.name} tensor must have the same nnz")
    nnz = p.shape[-1]
    values = v.view(a.dtype).reshape(batch + (nnz,) + (bs if layout.blocked else ()) + dense)
    return CompressedTensor(c.reshape(batch + (c.shape[-1],)), p.reshape(batch + (nnz,)), values,
                            a.shape, layout, canonical=True)


def _dense_to_coo(a: np.ndarray, plan: DensePlan, threads) -> COOTensor:
    sparse, dense = plan.sparse, plan.dense
    M, D = math.prod(sparse), math.prod(dense)
    z = zero_test_view(a.reshape(M, D))
    r = raw_view(a.reshape(M, D))
    idx, v = _kernels.dense_to_coo(z, r, np.asarray(sparse, dtype=np.int64), plan.index_dtype,
                                   num_threads(threads, a.size), float16=a.dtype == np.float16)
    values = v.view(a.dtype).reshape((idx.shape[1],) + dense)
    return COOTensor(idx, values, a.shape, coalesced=True, checked=True)
