"""Sums, variances and standard deviations of Dask arrays of sparse chunks: :func:`sum`,
:func:`var`, :func:`std`.

``x.sum(axis)`` is Dask's tree reduction: every chunk's sum (``np.sum(chunk, keepdims=True)``,
for a row or column sum of a compressed chunk a dense array), then groups of ``split_every``
partials joined with ``np.concatenate`` and summed again, up to one. For dense partials the
join is a copy of every partial: a combine of 4 column sums of a 2M-column matrix writes and
reads 64 MB to add 4 vectors. :func:`sum` builds the same tree (same tasks, same
``split_every``) with a combine that adds the partials into one new array, and when the summed
axes have one block each (row sums of row blocks) no tree at all: one task per block.
"""

from __future__ import annotations

import functools

import dask.array as da
import numpy as np
from dask.array.reductions import moment_agg, moment_combine
from dask.array.utils import validate_axis

from .._core._tensor import SparseTensor
from ._register import _numel

__all__ = ["sum", "var", "std"]


def _empty(ndim: int, axis: tuple, keepdims: bool, dtype):
    """The metadata of a step's result: a zero-size array (Dask asks with ``computing_meta=True``)."""
    return np.empty((0,) * (ndim if keepdims else ndim - len(axis)), dtype=dtype)


def _block_sum(b, axis, keepdims, dtype=None, computing_meta=False):
    """The chunk step: the sum of one chunk over ``axis`` (NumPy's function protocol: our kernels)."""
    if computing_meta:
        return _empty(b.ndim, axis, keepdims, dtype if dtype is not None else np.float64)
    out = np.sum(b, axis=axis, keepdims=keepdims, dtype=dtype)
    # a sum that stays sparse (a chunk whose type the metadata did not say: Dask's metadata of a
    # result with fewer dims is an ndarray) as the dense partial sum the aggregation adds into
    return out.to_dense() if isinstance(out, SparseTensor) else out


def _leaves(parts):
    if isinstance(parts, (list, tuple)):
        for p in parts:
            yield from _leaves(p)
    else:
        yield parts


def _add(parts, axis, keepdims, dtype=None, computing_meta=False):
    """The combine and aggregate steps: the sum of the partial sums ``parts`` (Dask's nested lists of
    arrays with the summed axes of size 1), added into one new array; the inputs are not written."""
    leaves = _leaves(parts)
    out = next(leaves)
    if computing_meta:  # zero-size, which Dask reshapes to the step's ndim (the metadata it passes may have any)
        return np.empty((0,) * max(out.ndim, 1), dtype=dtype if dtype is not None else out.dtype)
    for i, p in enumerate(leaves):
        out = np.add(out, p) if i == 0 else np.add(out, p, out=out)
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    if keepdims:
        return out
    return out.reshape(tuple(s for d, s in enumerate(out.shape) if d not in axis))


def sum(x, axis=None, dtype=None, keepdims=False, split_every=None):
    """``x.sum(axis, dtype, keepdims, split_every)`` with a cheaper aggregation of dense partial sums.

    Dask's ``x.sum`` joins each group of partial sums with ``np.concatenate`` before summing
    it; here the partials are added into one new array, and an axis with one block along
    every summed axis takes one task per block (no aggregate tasks). The tree, its
    ``split_every`` and the chunk step are Dask's and ours as in ``x.sum``. Where a chunk's sum
    is not a dense array (a sum of coo chunks that keeps a sparse dim), this is ``x.sum``.

    Parameters
    ----------
    x : dask.array.Array
        Of sparse tensor chunks (any chunk type whose ``np.sum`` is a NumPy array works).
    axis : int or tuple of int, optional
        None: every axis.
    dtype : dtype, optional
        The chunks' sums in this dtype (default: what the chunk type's sum gives, e.g.
        int64 for integer tensors).
    keepdims : bool
    split_every : int or dict, optional
        As for ``x.sum``: at most this many partial sums per combine task.

    Returns
    -------
    dask.array.Array
        The same values as ``x.sum(...)`` (floating sums possibly added in another order).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st, sparsetensor.dask
    >>> t = st.from_dense(np.arange(12.0).reshape(4, 3) % 5, "csr")
    >>> x = st.dask.from_sparse(t, chunks=(1, -1))
    >>> st.dask.sum(x, axis=0).compute(scheduler="sync")
    array([8., 7., 6.])
    >>> st.dask.sum(x, axis=1).numblocks, st.dask.sum(x, axis=1).compute(scheduler="sync")
    ((4,), array([3., 7., 6., 5.]))
    """
    axis = tuple(range(x.ndim)) if axis is None else validate_axis(axis if isinstance(axis, (tuple, list)) else
                                                                   (axis,), x.ndim)
    probe = np.sum(x._meta, axis=axis, keepdims=True, dtype=dtype)  # the chunk type's checks and result type
    axis = tuple(sorted(axis))
    if not axis or type(probe) is not np.ndarray:
        return da.sum(x, axis=axis, dtype=dtype, keepdims=keepdims, split_every=split_every)
    return _sum_graph(x, _block_sum, axis, keepdims, probe.dtype, split_every)


def _sum_graph(x, chunk, axis: tuple, keepdims: bool, out_dtype, split_every=None):
    """The graph of :func:`sum` with ``chunk(block, axis, keepdims, dtype)`` as the chunk step
    (bench/dask.py times it with a chunk step that only fills its output: Dask's floor)."""
    meta = _empty(x.ndim, axis, keepdims, out_dtype)
    if all(x.numblocks[a] == 1 for a in axis):  # one block along the summed axes: its sum is the result
        fn = functools.partial(chunk, axis=axis, keepdims=keepdims, dtype=out_dtype)
        if keepdims:
            chunks = tuple((1,) if d in axis else c for d, c in enumerate(x.chunks))
            return x.map_blocks(fn, chunks=chunks, dtype=out_dtype, meta=meta)
        return x.map_blocks(fn, drop_axis=axis, dtype=out_dtype, meta=meta)
    # Dask binds dtype=out_dtype to both steps (they take a dtype argument)
    return da.reduction(x, chunk, _add, axis=axis, keepdims=keepdims, dtype=out_dtype, split_every=split_every,
                        concatenate=False, meta=meta, name="st-sum")


def _dense(x) -> np.ndarray:
    return x.to_dense() if isinstance(x, SparseTensor) else np.asarray(x)


def _moments(A, dtype="f8", computing_meta=False, axis=None, keepdims=True, **kwargs):
    """The chunk step of :func:`var`: Dask's ``{"total", "n", "M"}`` of one sparse chunk (the sum, the
    element count and the sum of squared deviations from the chunk's mean over ``axis``), without
    the dense ``A - mean`` of Dask's own: the deviations of the stored elements, squared and summed,
    plus the mean's square once for each unspecified element."""
    if computing_meta:
        return A
    n = _numel(A, axis=axis, keepdims=True, dtype=np.int64)
    A = A.coalesce()  # each element once: its deviation is of the element, not of each repeat
    total = _dense(np.sum(A, axis=axis, keepdims=True, dtype=None if A.dtype.kind == "c" else dtype))
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, total / np.maximum(n, 1), 0)
    ones = A._replace_values(np.ones(A.values().shape, np.int64))
    stored = _dense(np.sum(ones, axis=axis, keepdims=True))  # stored elements of each reduced slice
    at = (ones * mean).values()  # the mean read at each stored element
    sq = A._replace_values(np.abs(A.values() - at) ** 2)
    M = _dense(np.sum(sq, axis=axis, keepdims=True)) + (n - stored) * np.abs(mean) ** 2
    return {"total": total, "n": n, "M": np.asarray(M, dtype=dtype)[..., None]}


def var(x, axis=None, dtype=None, keepdims=False, ddof=0, split_every=None):
    """``x.var(axis, dtype, keepdims, ddof)`` of a Dask array of sparse chunks, without densifying them.

    Dask's ``x.var()`` subtracts each chunk's dense mean from the sparse chunk, which the chunks
    refuse (the difference is dense). Here each chunk gives the same partial moments (its sum,
    count and sum of squared deviations) from its stored elements alone, and Dask's combine and
    aggregate steps join them (Chan's pairwise update), as for ``x.var()`` of dense chunks.

    Parameters
    ----------
    x : dask.array.Array
        Of sparse tensor chunks (any layout; unspecified elements count as zeros).
    axis : int or tuple of int, optional
        None: every axis.
    dtype : dtype, optional
        Default: NumPy's for the values (float64 for integers; a real dtype for complex values).
    keepdims : bool
    ddof : int
        The divisor is ``N - ddof``.
    split_every : int or dict, optional
        As for ``x.var``.

    Returns
    -------
    dask.array.Array
        Dense; the values of ``np.var`` of the dense array (to rounding).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st, sparsetensor.dask
    >>> a = np.array([[0.0, 2.0, 0.0], [4.0, 0.0, 0.0], [0.0, 0.0, 6.0], [1.0, 0.0, 0.0]])
    >>> x = st.dask.from_sparse(st.from_dense(a, "csr"), chunks=(2, -1))
    >>> st.dask.var(x, axis=0).compute(scheduler="sync"), a.var(axis=0)
    (array([2.6875, 0.75  , 6.75  ]), array([2.6875, 0.75  , 6.75  ]))
    >>> round(float(st.dask.std(x, ddof=1).compute(scheduler="sync")), 9), round(float(a.std(ddof=1)), 9)
    (1.975225342, 1.975225342)
    """
    dt = np.dtype(dtype) if dtype is not None else np.var(np.ones(1, dtype=x.dtype)).dtype
    axes = tuple(range(x.ndim)) if axis is None else validate_axis(axis if isinstance(axis, (tuple, list)) else
                                                                   (axis,), x.ndim)
    meta = _empty(x.ndim, axes, keepdims, dt)
    return da.reduction(x, _moments, functools.partial(moment_agg, ddof=ddof), combine=moment_combine, axis=axes,
                        keepdims=keepdims, dtype=dt, split_every=split_every, concatenate=False, meta=meta,
                        name="st-var")


def std(x, axis=None, dtype=None, keepdims=False, ddof=0, split_every=None):
    """``x.std(...)`` of a Dask array of sparse chunks: the square root of :func:`var` (its parameters).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st, sparsetensor.dask
    >>> x = st.dask.from_sparse(st.from_dense(np.diag([3.0, 0.0, 4.0]), "coo"), chunks=2)
    >>> st.dask.std(x, axis=1).compute(scheduler="sync")
    array([1.41421356, 0.        , 1.88561808])
    """
    return da.sqrt(var(x, axis=axis, dtype=dtype, keepdims=keepdims, ddof=ddof, split_every=split_every))
