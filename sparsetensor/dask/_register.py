"""Dask's registries for sparse tensor chunks: the chunk type and the dispatch functions.

Dask calls these on chunks (never on a whole array): ``concatenate_lookup`` to join chunks
(``compute``, ``rechunk``, ``np.concatenate``), ``tensordot_lookup`` for ``da.tensordot`` and
``x.dot``, ``take_lookup`` for integer-array indexing (``da.take``, shuffles), ``einsum_lookup`` (refused with a message: no sparse einsum), and
``numel_lookup``/``nannumel_lookup`` for ``mean``/``nanmean`` (Dask's ``var``/``std`` subtract a dense mean
from each chunk, which ``sub`` refuses: :func:`sparsetensor.dask.var` and ``std`` instead).
"""

from __future__ import annotations

import math

import numpy as np
from dask.array.chunk_types import register_chunk_type
from dask.array.dispatch import (
    concatenate_lookup,
    einsum_lookup,
    nannumel_lookup,
    numel_lookup,
    take_lookup,
    tensordot_lookup,
)

from .._core._tensor import SparseTensor
from ..ops.indexing import getitem
from ..ops.join import concatenate

__all__ = ["register"]


def _concatenate(arrays, axis=0):
    arrays = list(arrays)
    dense = [type(a).__name__ for a in arrays if not isinstance(a, SparseTensor)]
    if dense:
        raise NotImplementedError(f"Dask concatenate of sparse tensor chunks with {', '.join(sorted(set(dense)))} "
                                  "chunks (it would densify): convert one side first")
    if len(arrays) == 1 and 0 <= axis + (arrays[0].ndim if axis < 0 else 0) < arrays[0].ndim:
        # Dask joins the blocks along a contracted or dropped axis even when there is one
        # (blockwise with concatenate=True, map_blocks(drop_axis=...)): no copy of the chunk
        return arrays[0]
    return concatenate(arrays, axis)


def _tensordot(a, b, axes=2):
    return np.tensordot(a, b, axes=axes)


def _take(a, index, axis=0):
    return getitem(a, (slice(None),) * (axis % a.ndim) + (np.asarray(index),))


def _einsum(*args, **kwargs):
    raise NotImplementedError("da.einsum on sparse tensor chunks: no sparse einsum; use da.tensordot or x @ y")


def _numel(x, axis=None, keepdims=False, dtype=np.float64, **kwargs):
    """Element counts as dense arrays (``numel`` of dask's ``mean``/``var``)."""
    axes = range(x.ndim) if axis is None else ([axis] if np.isscalar(axis) else list(axis))
    axes = {a % x.ndim for a in axes}
    n = math.prod(x.shape[a] for a in axes)
    if axis is None and not keepdims:
        return np.asarray(n, dtype=dtype)
    shape = tuple(1 if a in axes else s for a, s in enumerate(x.shape)) if keepdims else \
        tuple(s for a, s in enumerate(x.shape) if a not in axes)
    return np.full(shape, n, dtype=dtype)


def _nannumel(x, axis=None, keepdims=False, dtype=np.float64, **kwargs):
    """Counts of the non-NaN elements: the count, less the NaNs among the specified values."""
    n = _numel(x, axis=axis, keepdims=keepdims, dtype=dtype)
    if x.dtype.kind not in "fc":
        return n
    nans = x._replace_values(np.isnan(x.values()).astype(dtype))
    return n - np.asarray(nans.sum(axis=axis, keepdims=keepdims), dtype=dtype)


def register() -> None:
    """Register :class:`~sparsetensor.SparseTensor` (and subclasses) with Dask (idempotent)."""
    register_chunk_type(SparseTensor)
    concatenate_lookup.register(SparseTensor, _concatenate)
    tensordot_lookup.register(SparseTensor, _tensordot)
    take_lookup.register(SparseTensor, _take)
    einsum_lookup.register(SparseTensor, _einsum)
    numel_lookup.register(SparseTensor, _numel)
    nannumel_lookup.register(SparseTensor, _nannumel)


