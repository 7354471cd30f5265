"""Dense <-> sparse: ``t.to_dense()`` and :func:`from_dense`, over the backend kernels.

The kernels see every tensor in one canonical form: compressed ``(B, n + 1)``,
plain ``(B, nnz)``, values ``(B, nnz, Rb, Cb, D)`` and dense ``(B, R, C, D)``,
where ``B``/``D`` are the products of the batch/dense sizes, and values are
reinterpreted as raw unsigned integers when they are only moved (see
:mod:`sparsetensor._core._dtypes`).
"""

from __future__ import annotations

import numpy as np

from .._core import _device, _recording
from .._backend import backend_for
from .._core._dtypes import native
from .._core._tensor import SparseTensor
from .._backend._plan import DensePlan, check_from_dense

__all__ = ["to_dense", "from_dense", "check_from_dense", "DensePlan"]


def to_dense(t, *, threads: int | None = None) -> np.ndarray:
    """The dense array of a sparse tensor; duplicates (possible only in unchecked input) are summed."""
    if not isinstance(t, SparseTensor):
        raise TypeError(f"to_dense expects a sparse tensor, got {type(t).__name__}")
    return backend_for(t).to_dense(t, threads)


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
    if _recording.active:  # vjp records it (sparsetensor.autograd)
        return _recording.call("from_dense", _from_dense, (array, layout), dict(
            blocksize=blocksize, dense_dim=dense_dim, batch_dim=batch_dim, index_dtype=index_dtype, threads=threads))
    return _from_dense(array, layout, blocksize=blocksize, dense_dim=dense_dim, batch_dim=batch_dim,
                       index_dtype=index_dtype, threads=threads)


def _from_dense(array, layout="csr", *, blocksize=None, dense_dim: int = 0, batch_dim: int = 0,
                index_dtype=np.int64, threads: int | None = None):
    backend = backend_for(array)
    if backend.device != "cpu":  # a device array (CuPy, PyTorch, DeviceArray) stays on its device
        a = _device.device_array(array)
        plan = check_from_dense(a.shape, a.dtype, layout, blocksize, dense_dim, batch_dim, index_dtype)
        return backend.from_dense(a, plan, threads)
    a = native(np.asarray(array))
    plan = check_from_dense(a.shape, a.dtype, layout, blocksize, dense_dim, batch_dim, index_dtype)
    return backend.from_dense(a if a.flags.c_contiguous else a.copy(order="C"), plan, threads)  # (0-d stays 0-d)


