"""Diagonals of sparse tensors: :func:`diagonal` and :func:`trace` (NumPy's semantics).

Both go through the COO form of the tensor (a compressed tensor's batch dims become its
leading sparse dims), keep the entries whose two coordinates differ by ``offset`` and sum
them into a dense result (duplicates of an uncoalesced tensor add up, as in ``to_dense``):
the backend's ``diagonal`` kernel, then ``sum_axis`` for the trace. The result is a dense
array on the tensor's device (a NumPy array, or a device array for a CUDA tensor): the
diagonal of every other index, of size ``prod(other dims) * diagonal length``, refused above
the ``np.asarray`` size limit.
"""

from __future__ import annotations

import math
import operator

from .._backend import backend_for
from .._core._canonical import ensure_valid
from .._core._tensor import DENSIFY_LIMIT, SparseTensor

__all__ = ["diagonal", "trace"]


def _dims(t, offset, dim1, dim2, op: str):
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{op} expects a sparse tensor, got {type(t).__name__}")
    offset = operator.index(offset)
    n = t.ndim
    d1, d2 = operator.index(dim1), operator.index(dim2)
    for d in (d1, d2):
        if not -n <= d < n:
            raise ValueError(f"{op}: dim {d} out of range for a tensor of {n} dims")  # NumPy: AxisError (a ValueError)
    d1, d2 = d1 % n, d2 % n
    if d1 == d2:
        raise ValueError(f"{op}: dim1 and dim2 cannot be the same ({d1})")
    sparse = n - t.dense_dim
    if d1 >= sparse or d2 >= sparse:
        raise NotImplementedError(f"{op} over a dense dim of a hybrid {t.layout.name} tensor (dims {d1}, {d2}; "
                                  f"dense_dim={t.dense_dim})")
    return offset, d1, d2


def diagonal(t, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal of ``t`` over dims ``dim1`` and ``dim2`` (NumPy's ``np.diagonal``, torch's names).

    Parameters
    ----------
    t : SparseTensor
        Any layout; ``dim1`` and ``dim2`` must be batch or sparse dims.
    offset : int
        Above the main diagonal when positive, below when negative.
    dim1, dim2 : int
        The two dims (NumPy's ``axis1``/``axis2``).

    Returns
    -------
    numpy.ndarray or sparsetensor.cuda.DeviceArray
        On ``t``'s device. The other dims in order (dense dims included), then the diagonal as
        the last axis:
        element ``i`` is ``t[..., i, i + offset]`` (``t[..., i - offset, i]`` for a
        negative offset).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.array([[1, 2, 0], [0, 3, 4], [5, 0, 6]]), "csr")
    >>> t.diagonal()
    array([1, 3, 6])
    >>> t.diagonal(1), t.diagonal(-2)
    (array([2, 4]), array([5]))
    """
    offset, d1, d2 = _dims(t, offset, dim1, dim2, "diagonal")
    shape = t.shape
    n1, n2 = shape[d1], shape[d2]
    k = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    size = k * math.prod(shape[d] for d in range(t.ndim) if d not in (d1, d2))
    if size > DENSIFY_LIMIT:
        raise ValueError(f"diagonal of a {t.layout.name} tensor of shape {shape} would have "
                         f"{size} elements (limit {DENSIFY_LIMIT})")
    coo = ensure_valid(t.to_sparse_coo())  # t itself when it is coo
    return backend_for(coo).diagonal(coo, offset, d1, d2, k)


def trace(t, offset: int = 0, dim1: int = 0, dim2: int = 1, dtype=None):
    """The sum of :func:`diagonal` (NumPy's ``np.trace``: a scalar for a 2-d tensor, integer sums of
    small integer and bool dtypes widened as ``np.sum`` does).

    A CUDA tensor gives a device array (0-d for a 2-d tensor), summed on the device.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.array([[1.0, 2.0], [0.0, 3.0]]), "coo")
    >>> float(t.trace()), float(t.trace(1))
    (4.0, 2.0)
    """
    d = diagonal(t, offset, dim1, dim2)
    return backend_for(d).sum_axis(d, -1, dtype)
