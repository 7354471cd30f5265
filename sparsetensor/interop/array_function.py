"""NumPy's function protocol (NEP 18) for sparse tensors: a whitelist, nothing densifies.

``np.<func>(t, ...)`` on a sparse tensor calls the handler registered here for ``func``;
every other NumPy function returns ``NotImplemented``, so NumPy raises its ``TypeError``
("no implementation found") instead of densifying through ``np.asarray`` (which is still
refused above a size limit).

======================================  ================================================
NumPy function                          sparse meaning
======================================  ================================================
``concatenate``, ``stack``              :func:`~sparsetensor.ops.shape.cat`/``stack`` (compressed
                                        tensors joined along a batch dim into batches of
                                        different nnz: a COO tensor)
``hstack``, ``vstack``, ``kron``,       :mod:`sparsetensor.ops.blocks` (``dtype``/``casting`` as
``tril``, ``triu``                      ``concatenate``), :mod:`sparsetensor.ops.prune`
``sum``, ``mean``                       :mod:`sparsetensor.ops.reduce` (``axis``, ``dtype``, ``keepdims``)
``max``/``amax``, ``min``/``amin``      ``amax``/``amin`` (unspecified elements count as 0)
``transpose``                           a permutation done as swaps of dims of one kind
``reshape``, ``ravel``                 :func:`~sparsetensor.ops.dims.reshape` (``order``; ``copy=True``
                                        gives arrays of its own, else they may be shared)
``dot``, ``tensordot``, ``matmul``      products (:func:`~sparsetensor.ops.blas.matmul`;
                                        ``tensordot``: a 2-d operand with a 1-d or 2-d one)
``where(c, x, 0)``                      ``c``'s pattern, ``x`` (a scalar or a sparse tensor
                                        of ``c``'s shape) where ``c`` is nonzero; a nonzero
                                        ``y`` would densify and raises ``ValueError``;
                                        ``where(c)`` is ``nonzero(c)``
``nonzero``                             tuple of coordinate arrays, row-major order
``count_nonzero``                       :func:`~sparsetensor.ops.select.count_nonzero` (``axis``,
                                        ``keepdims``): explicit zeros do not count
``any``, ``all``                        from ``count_nonzero`` (``axis``, ``keepdims``): dense bools
``clip``                                scalar bounds with ``lo <= 0 <= hi``: the values clipped
                                        (other bounds would move every unspecified element:
                                        ``ValueError``)
``real``, ``imag``                      :func:`~sparsetensor.ops.pointwise.real`/``imag`` (``imag``
                                        of a real tensor raises ``TypeError``, as ``t.imag``)
``diagonal``, ``trace``                 :mod:`sparsetensor.ops.diagonal` (dense results)
``shape``, ``ndim``, ``result_type``,   from the tensor's attributes and members
``may_share_memory``
======================================  ================================================

``np.multiply``, ``np.add``, ``np.abs`` and ``np.matmul`` are ufuncs: NumPy sends them to
``__array_ufunc__`` (:func:`sparsetensor.ops.pointwise.array_ufunc`), not here. ``out=``
and NumPy-only keywords (``initial``, ``where``) raise ``TypeError``.

Dtypes and axes follow NumPy, where they differ from PyTorch's (and :mod:`sparsetensor.ops`):

- ``concatenate``/``stack`` take ``dtype=`` and ``casting=`` (default ``"same_kind"``): an
  input that ``np.can_cast`` refuses to cast to the result dtype raises ``TypeError``
  (``casting="unsafe"`` casts anyway, so complex to float drops the imaginary part).
- ``sum`` of an unsigned integer tensor is uint64 where the result is dense (a 0-d array
  or a NumPy array, NumPy's dtype); a sparse result stays int64 (:func:`sparsetensor.sum`'s
  dtype), as uint64 is not a value dtype.
- ``dot`` with a scalar takes it as NumPy does, a 0-d array (not a weak Python scalar):
  ``np.dot(t, 2)`` of a float32 tensor is float64, of a uint8 tensor int64.
- An axis out of range raises ``numpy.exceptions.AxisError`` (an ``IndexError`` and a
  ``ValueError``).
"""

from __future__ import annotations

import math

import numpy as np

from .._core._dtypes import VALUE_DTYPES
from .._core._shape_checks import normalize_dim
from .._core._tensor import COOTensor, SparseTensor
from . import chunk as _chunk
from ..ops import blas, blocks, diagonal as _diag, dims, join, prune, pointwise, reduce, select, shape
from ..ops.binary import mul
from ..ops.pointwise import numpy_sum

__all__ = ["array_function", "HANDLED"]

HANDLED: dict = {}


def _handles(*funcs):
    def register(fn):
        for f in funcs:
            HANDLED[f] = fn
        return fn
    return register


def _no(name: str, **kwargs) -> None:
    """Refuse NumPy keywords that have no sparse meaning (``out=``, ``initial=``, ...)."""
    for k, v in kwargs.items():
        if v is not None and v is not np._NoValue:
            raise TypeError(f"np.{name}(..., {k}=...) is not supported for sparse tensors")


def array_function(self, func, types, args, kwargs):
    """``__array_function__``: the whitelisted NumPy functions on sparse tensors (see the module docs).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.array([[1.0, 0.0], [2.0, 3.0]]), "csr")
    >>> np.sum(t, axis=1)
    array([1., 5.])
    >>> np.concatenate([t, t]).shape
    (4, 2)
    >>> np.cumsum(t)
    Traceback (most recent call last):
    ...
    TypeError: no implementation found for 'numpy.cumsum' on types that implement __array_function__: [<class 'sparsetensor._core._tensor.CompressedTensor'>]
    """
    handler = HANDLED.get(func)
    if handler is None or not all(issubclass(t, (SparseTensor, np.ndarray)) for t in types):
        return NotImplemented
    if func in _CONSTRUCTORS:  # NumPy calls like=t's protocol without the keyword: t is self
        kwargs = {**kwargs, "like": self}
    return handler(*args, **kwargs)


# -- shapes ---------------------------------------------------------------------------------------------
@_handles(np.shape)
def _shape(a):
    return tuple(a.shape)


def _dense_constructor(func):
    """``np.array(x, like=t)`` & co. (Dask builds empty results so): NumPy's dense array, as without
    ``like`` (a sparse ``x`` goes through ``__array__``, which refuses large tensors), except that
    an array of no element with ``t``'s number of dims is the empty tensor of ``t``'s layout (Dask's
    partial max of an empty chunk is one: its join with the other chunks' sparse partials)."""
    def make(*args, **kwargs):
        like = kwargs.pop("like", None)
        out = func(*args, **kwargs)
        if (isinstance(like, SparseTensor) and isinstance(out, np.ndarray) and out.size == 0
                and out.ndim == like.ndim and out.dtype in VALUE_DTYPES):
            return _chunk.zeros(like, out.shape, out.dtype)
        return out

    return make


_CONSTRUCTORS = (np.array, np.asarray, np.empty, np.zeros, np.ones, np.full)
for _f in _CONSTRUCTORS:
    HANDLED[_f] = _dense_constructor(_f)


@_handles(np.size)
def _size(a, axis=None):
    return int(a.size) if axis is None else a.size(axis)


@_handles(np.ndim)
def _ndim(a):
    return a.ndim


@_handles(np.result_type)
def _result_type(*arrays_and_dtypes):
    return np.result_type(*(x.dtype if isinstance(x, SparseTensor) else x for x in arrays_and_dtypes))


def _members(x):
    if isinstance(x, COOTensor):
        return [x.indices(), x.values()]
    if isinstance(x, SparseTensor):
        return [x.compressed_indices(), x.plain_indices(), x.values()]
    return [np.asarray(x)]


@_handles(np.may_share_memory)
def _may_share_memory(a, b, max_work=None):
    return any(np.may_share_memory(x, y, max_work=max_work) for x in _members(a) for y in _members(b))


def _dtype_of(x) -> np.dtype:
    return x.dtype if isinstance(x, SparseTensor) else np.asarray(x).dtype


_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def _cast_target(name: str, arrays: list, dtype, casting) -> np.dtype | None:
    """The dtype ``dtype=`` asks for (None: none), after NumPy's ``casting`` check of every input
    against the result dtype (``dtype``, else the inputs' promoted dtype): ``TypeError`` as in NumPy."""
    casting = "same_kind" if casting is None else casting
    if casting not in _CASTINGS:
        raise ValueError(f"np.{name}: casting must be one of {', '.join(map(repr, _CASTINGS))}, got {casting!r}")
    dtypes = [_dtype_of(x) for x in arrays]
    target = np.dtype(dtype) if dtype is not None else np.result_type(*dtypes) if dtypes else None
    for src in dtypes:
        if not np.can_cast(src, target, casting):
            raise TypeError(f"np.{name}: cannot cast array data from {src} to {target} according to the rule "
                            f"{casting!r} (pass casting='unsafe' to cast anyway)")
    return None if dtype is None else target


@_handles(np.concatenate)
def _concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    _no("concatenate", out=out)
    if axis is None:
        raise NotImplementedError("np.concatenate(..., axis=None) of sparse tensors (it flattens them)")
    arrays = list(arrays)
    dtype = _cast_target("concatenate", arrays, dtype, casting)
    r = join.concatenate(arrays, axis)
    return r if dtype is None else r.astype(dtype, copy=False)


@_handles(np.stack)
def _stack(arrays, axis=0, out=None, dtype=None, casting=None):
    _no("stack", out=out)
    arrays = list(arrays)
    dtype = _cast_target("stack", arrays, dtype, casting)
    r = shape.stack(arrays, axis)
    return r if dtype is None else r.astype(dtype, copy=False)


def _stacked(fn, name: str):
    def handler(tup, *, dtype=None, casting="same_kind"):
        arrays = list(tup)
        target = _cast_target(name, arrays, dtype, casting)
        r = fn(arrays)
        return r if target is None else r.astype(target, copy=False)
    return handler


HANDLED[np.hstack] = _stacked(blocks.hstack, "hstack")
HANDLED[np.vstack] = _stacked(blocks.vstack, "vstack")


@_handles(np.kron)
def _kron(a, b):
    return blocks.kron(a, b)


@_handles(np.tril)
def _tril(m, k=0):
    return prune.tril(m, k)


@_handles(np.triu)
def _triu(m, k=0):
    return prune.triu(m, k)


@_handles(np.ravel)
def _ravel(a, order="C"):
    return dims.reshape(a, -1, order="C" if order == "K" else order)  # "K": a tensor has no memory order


@_handles(np.transpose)
def _transpose(a, axes=None):
    n = a.ndim
    perm = list(range(n))[::-1] if axes is None else [normalize_dim(x, n, "np.transpose") for x in axes]
    if sorted(perm) != list(range(n)):
        raise ValueError(f"np.transpose: axes {axes} are not a permutation of {n} dims")
    # apply the permutation as swaps: position i gets dim perm[i]
    cur = list(range(n))
    for i in range(n):
        j = cur.index(perm[i])
        if j != i:
            a = shape.transpose(a, i, j)
            cur[i], cur[j] = cur[j], cur[i]
    return a


@_handles(np.reshape)
def _reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if (shape is None) == (newshape is None):
        raise TypeError("np.reshape of a sparse tensor takes one of shape= and newshape=")
    r = dims.reshape(a, shape if newshape is None else newshape, order=order)
    return r.clone() if copy else r  # else arrays may be shared, as reshape's views are


# -- reductions -----------------------------------------------------------------------------------------
def _keep(keepdims) -> bool:
    return False if keepdims is None or keepdims is np._NoValue else bool(keepdims)


@_handles(np.sum)
def _sum(a, axis=None, dtype=None, out=None, keepdims=None, initial=None, where=None):
    _no("sum", out=out, initial=initial, where=where)
    return numpy_sum(a, axis, _keep(keepdims), dtype)


@_handles(np.mean)
def _mean(a, axis=None, dtype=None, out=None, keepdims=None, *, where=None):
    _no("mean", out=out, where=where)
    return reduce.mean(a, axis, _keep(keepdims), dtype=dtype)


@_handles(np.max, np.amax)
def _max(a, axis=None, out=None, keepdims=None, initial=None, where=None):
    _no("max", out=out, initial=initial, where=where)
    return reduce.amax(a, axis, _keep(keepdims))


@_handles(np.min, np.amin)
def _min(a, axis=None, out=None, keepdims=None, initial=None, where=None):
    _no("min", out=out, initial=initial, where=where)
    return reduce.amin(a, axis, _keep(keepdims))


# -- products ---------------------------------------------------------------------------------------------
@_handles(np.dot)
def _dot(a, b, out=None):
    _no("dot", out=out)
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        # NumPy takes a scalar as a 0-d array, not a weak Python scalar: float32 times 2 is float64
        dtype = np.result_type(_dtype_of(a), _dtype_of(b))
        return mul(*(x.astype(dtype, copy=False) if isinstance(x, SparseTensor) else np.asarray(x, dtype)[()]
                     for x in (a, b)))
    if max(np.ndim(a), np.ndim(b)) > 2:
        raise NotImplementedError("np.dot of a sparse tensor with more than 2 dims (use np.matmul for batches)")
    return blas.matmul(a, b)


@_handles(np.tensordot)
def _tensordot(a, b, axes=2):
    na, nb = np.ndim(a), np.ndim(b)
    if na not in (1, 2) or nb not in (1, 2) or na == nb == 1:
        raise NotImplementedError(f"np.tensordot of sparse tensors: a 2-d operand with a 1-d or 2-d one, got "
                                  f"{na}-d and {nb}-d")
    if isinstance(axes, int):
        if axes == 1:  # (a vector with a matrix: Dask's dot of a chunk and a vector)
            return blas.matmul(a, b)
        raise NotImplementedError(f"np.tensordot(..., axes={axes}) of sparse tensors: only axes=1 or one pair")
    ia, ib = axes
    ia, ib = np.atleast_1d(ia).tolist(), np.atleast_1d(ib).tolist()
    if len(ia) != 1 or len(ib) != 1:
        raise NotImplementedError(f"np.tensordot(..., axes={axes}) of sparse tensors: only one pair of axes")
    ia, ib = ia[0] % na, ib[0] % nb
    if np.shape(a)[ia] != np.shape(b)[ib]:
        raise ValueError(f"np.tensordot: shape mismatch for sum ({np.shape(a)} axis {ia}, {np.shape(b)} axis {ib})")
    # move the summed axis of a last and of b first
    a = a if ia == na - 1 else (a.T if isinstance(a, SparseTensor) else np.transpose(a))
    b = b if ib == 0 else (b.T if isinstance(b, SparseTensor) else np.transpose(b))
    return blas.matmul(a, b)


# -- selection --------------------------------------------------------------------------------------------
@_handles(np.nonzero)
def _nonzero(a):
    coords = shape.nonzero(a)
    return tuple(np.ascontiguousarray(c) for c in coords.T)


@_handles(np.count_nonzero)
def _count_nonzero(a, axis=None, *, keepdims=False):
    n = select.count_nonzero(a, axis)
    if not keepdims:
        return n
    axes = range(a.ndim) if axis is None else \
        {normalize_dim(d, a.ndim, "np.count_nonzero") for d in (axis if isinstance(axis, tuple) else (axis,))}
    kept = tuple(1 if d in axes else size for d, size in enumerate(a.shape))
    return (np.asarray(n) if axis is None else n).reshape(kept)


def _counted(name: str, a, axis, keepdims, where):
    """The nonzero count over ``axis`` (as ``np.count_nonzero``) and the element count it is out of."""
    _no(name, where=where)
    axes = range(a.ndim) if axis is None else \
        {normalize_dim(d, a.ndim, f"np.{name}") for d in (axis if isinstance(axis, tuple) else (axis,))}
    n = _count_nonzero(a, axis, keepdims=_keep(keepdims))
    return np.asarray(n), math.prod(a.shape[d] for d in axes)


@_handles(np.any)
def _any(a, axis=None, out=None, keepdims=None, *, where=None):
    _no("any", out=out)
    n, _ = _counted("any", a, axis, keepdims, where)
    return (n > 0)[()]


@_handles(np.all)
def _all(a, axis=None, out=None, keepdims=None, *, where=None):
    _no("all", out=out)
    n, size = _counted("all", a, axis, keepdims, where)
    return (n == size)[()]


@_handles(np.clip)
def _clip(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue, max=np._NoValue, **kwargs):
    """``np.clip(t, lo, hi)`` with scalar bounds that keep 0 (``lo <= 0 <= hi``): the coalesced values
    clipped; bounds that would move the unspecified elements raise ValueError (the result is dense)."""
    _no("clip", out=out, **{k: v for k, v in kwargs.items() if k != "dtype"})
    lo = a_min if a_min is not np._NoValue else min
    hi = a_max if a_max is not np._NoValue else max
    lo, hi = (None if b is np._NoValue else b for b in (lo, hi))
    if any(b is not None and np.ndim(b) for b in (lo, hi)):
        raise NotImplementedError("np.clip of a sparse tensor with array bounds: only scalar bounds (or clip "
                                  "t.to_dense())")
    zero = np.clip(np.zeros((), a.dtype), lo, hi, dtype=kwargs.get("dtype"))
    if zero != 0:
        raise ValueError(f"np.clip(t, {lo!r}, {hi!r}) of a sparse tensor is dense (0 clips to {zero.item()!r} at every "
                         "unspecified element); clip t.to_dense()")
    a = a.coalesce()  # clipping does not commute with the sum of repeats
    return pointwise._finish(a, np.clip(a.values(), lo, hi, dtype=kwargs.get("dtype")), "np.clip")


@_handles(np.real)
def _real(val):
    return pointwise.real(val)


@_handles(np.imag)
def _imag(val):
    return pointwise.imag(val)


@_handles(np.where)
def _where(condition, x=None, y=None):
    if x is None and y is None:
        return _nonzero(condition)
    if x is None or y is None:
        raise ValueError("np.where: either both or neither of x and y should be given")
    if not isinstance(condition, SparseTensor):
        raise NotImplementedError("np.where with a dense condition and sparse x or y (it is dense wherever the "
                                  "condition holds); pass a sparse condition")
    if not np.isscalar(y) or y != 0:
        raise ValueError("np.where(c, x, y) with sparse c: y must be the scalar 0, else the result is y wherever c "
                         f"is unspecified, a dense array (got y={y!r})")
    condition = condition.coalesce()  # duplicates summed: the dense condition
    if isinstance(x, SparseTensor):
        if x.shape != condition.shape:
            raise ValueError(f"np.where: x of shape {x.shape} must have the condition's shape {condition.shape}")
        xv = x.sparse_mask(condition).values()
    elif np.isscalar(x):
        xv = x
    else:
        raise NotImplementedError("np.where(c, x, 0) with sparse c: x must be a scalar or a sparse tensor, got "
                                  f"{type(x).__name__}")
    dt = np.result_type(x.dtype if isinstance(x, SparseTensor) else x, y)
    values = np.where(condition.values() != 0, xv, np.zeros((), dt)).astype(dt, copy=False)
    return condition._replace_values(values)


@_handles(np.diagonal)
def _diagonal(a, offset=0, axis1=0, axis2=1):
    return _diag.diagonal(a, offset, *_axis_pair("np.diagonal", a, axis1, axis2))


@_handles(np.trace)
def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _no("trace", out=out)
    return _diag.trace(a, offset, *_axis_pair("np.trace", a, axis1, axis2), dtype=dtype)


def _axis_pair(name: str, a, axis1, axis2) -> tuple:
    """``axis1``, ``axis2`` in range (AxisError, as in NumPy, where :mod:`~sparsetensor.ops.diagonal`
    raises ValueError)."""
    return normalize_dim(axis1, a.ndim, name), normalize_dim(axis2, a.ndim, name)
