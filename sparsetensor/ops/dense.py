"""Dense <-> sparse: ``t.to_dense()`` and :func:`from_dense`, over the backend kernels.

The kernels see every tensor in one canonical form: compressed ``(B, n + 1)``,
plain ``(B, nnz)``, values ``(B, nnz, Rb, Cb, D)`` and dense ``(B, R, C, D)``,
where ``B``/``D`` are the products of the batch/dense sizes, and values are
reinterpreted as raw unsigned integers when they are only moved (see
:mod:`sparsetensor._core._dtypes`).
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np

from .._core import _device, _layout as L
from .._backend import backend_for
from .._core._dtypes import VALUE_DTYPES, as_index_dtype, check_fits
from .._core._tensor import SparseTensor

__all__ = ["to_dense", "from_dense", "check_from_dense", "DensePlan"]


def to_dense(t, *, threads: int | None = None) -> np.ndarray:
    """The dense array of a sparse tensor; duplicates (possible only in unchecked input) are summed."""
    if not isinstance(t, SparseTensor):
        raise TypeError(f"to_dense expects a sparse tensor, got {type(t).__name__}")
    return backend_for(t).to_dense(t, threads)


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
    backend = backend_for(array)
    if backend.device != "cpu":  # a device array (CuPy, PyTorch, DeviceArray) stays on its device
        a = _device.device_array(array)
        plan = check_from_dense(a.shape, a.dtype, layout, blocksize, dense_dim, batch_dim, index_dtype)
        return backend.from_dense(a, plan, threads)
    a = np.asarray(array)
    plan = check_from_dense(a.shape, a.dtype, layout, blocksize, dense_dim, batch_dim, index_dtype)
    return backend.from_dense(np.ascontiguousarray(a), plan, threads)


