"""Reductions of sparse tensors: sum, mean, norm, amax, amin; softmax and log_softmax.

Unspecified elements are zeros and take part in every reduction (``mean``
divides by all the elements, ``amax`` of a slice with an unspecified element is
at least 0), so that ``op(t)`` always equals ``op(t.to_dense())``. ``softmax`` is
the exception, as in ``torch.sparse.softmax``: there unspecified elements are
``-inf``.

What a reduction over ``dim`` returns depends on which dims it reduces:

============================  ======================================  ==================================
reduced dims                  COO                                     CSR, CSC, BSR, BSC
============================  ======================================  ==================================
``dim=None`` (all)            0-d NumPy array                         0-d NumPy array
dense dims only               same layout and pattern                 same layout and pattern
some sparse dims, not all     COO (coalesced) over the kept dims      --
all sparse dims               dense NumPy array                       --
a row or column dim           --                                      dense NumPy array
batch dims (no sparse dim)    --                                      same layout, union of the patterns
                                                                      (COO where the kept batches would
                                                                      hold different nnz)
============================  ======================================  ==================================

This is ``torch.sparse.sum``'s rule for COO. For the compressed layouts
PyTorch only sums rows or columns with ``keepdim=True`` and returns a CSR
matrix there; here the row or column sums of a matrix (a vector per batch)
are returned as a dense array. Reducing batch dims only keeps the layout, with
the union of the batches' patterns, where the remaining batches then have the same nnz;
where they would not, the result is the COO tensor (its batch dims leading sparse dims),
as indexing gives for such batches. An element of a sparse result whose
inputs cancel stays specified (an explicit zero), as in PyTorch.

Dtypes: ``sum`` of bool and integer tensors is int64 (dense PyTorch and NumPy, except
that NumPy sums uint8 to uint64, not a value dtype here; ``torch.sparse.sum`` over
some dims of a bool tensor keeps bool); ``dtype=`` converts the values first
(after duplicates merge in the values' own dtype, as in ``t.to_dense()``). ``mean`` of bool and integers is float64; ``norm`` is real
(float64 for integers). float16 is summed in float32 and rounded once.

The input is never modified. Uncoalesced COO tensors are coalesced (and compressed
tensors built without checking are checked, and repaired) before a nonlinear
reduction, and before a sum in another dtype than the values' (bool, integers, float16);
every index that a reduction reads is bounds-checked.
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from .._backend import backend_for, cpu as _cpu
from .._backend.cpu._reduce import batch_offsets, coalesced
from .._core._dtypes import as_value_dtype
from .._core._shape_checks import normalize_dim
from .._core import _tensor
from .._core._errors import InvariantError
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor, held_outside

__all__ = ["sum", "mean", "norm", "amax", "amin", "softmax", "log_softmax"]

# -- small helpers ------------------------------------------------------------------------------------


def _check_tensor(t, name: str) -> None:
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{name} expects a sparse tensor, got {type(t).__name__}")


def _normalize_dims(dim, ndim: int, name: str):
    """``None`` -> every dim; an int or a sequence of ints -> sorted distinct dims in ``[0, ndim)``."""
    if dim is None:
        return tuple(range(ndim))
    if type(dim) is int:  # the common case
        return (normalize_dim(dim, ndim, name),)
    try:
        dims = (operator.index(dim),)
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in dim)
        except TypeError:
            raise TypeError(f"{name}: dim must be None, an int or a sequence of ints, got {dim!r}") from None
    out = []
    for d in dims:
        out.append(normalize_dim(d, ndim, name))
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: dim {dim!r} repeats a dimension")
    return tuple(sorted(out))


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.int64) if dtype.kind in "biu" else dtype


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype values are accumulated in: float16 widens to float32; bool is counted in int64
    (NumPy's sum of bools in bool is their or: the count tested against 0)."""
    if dtype == np.bool_:
        return np.dtype(np.int64)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _map(result, fn):
    """Apply ``fn`` to a dense result, or to the values of a sparse one."""
    if isinstance(result, SparseTensor):
        v = fn(result.values())
        return result._replace_values(v if result.is_cuda else np.ascontiguousarray(v))
    out = fn(result)
    return np.asarray(out) if isinstance(out, np.generic) else out


def _astype(result, dtype: np.dtype):
    return _map(result, lambda v: v.astype(dtype, copy=False))


def _check_nonempty_reduction(op, shape: tuple, dims: tuple, name: str) -> None:
    """amax/amin over a zero-size dim has no value: NumPy raises (even when the result is empty)."""
    if op is np.add:
        return
    if dims and math.prod(shape[d] for d in dims) == 0:
        raise ValueError(f"{name} over dims {dims} of a tensor of shape {shape}: the reduced slices are empty "
                         "and a maximum/minimum of nothing has no value")


def _squeeze(result, dims: tuple, keepdim: bool):
    """Drop the reduced dims (size 1 in ``result``) unless ``keepdim``: a dense result here, a
    sparse one by its layout's body (``_REDUCE_RETURN_BY_LAYOUT``)."""
    if keepdim:
        return result
    if not isinstance(result, SparseTensor):  # a dense array of the tensor's device
        return result.reshape(tuple(s for d, s in enumerate(result.shape) if d not in dims))
    return _REDUCE_RETURN_BY_LAYOUT[type(result)](result, dims)


def _squeeze_coo(result: COOTensor, dims: tuple) -> COOTensor:
    """The body of COO: drop the reduced sparse (index rows) and dense dims."""
    S = result.sparse_dim
    keep_rows = [d for d in range(S) if d not in dims]
    vshape = (result.nnz,) + tuple(s for d, s in enumerate(result.shape) if d >= S and d not in dims)
    shape = tuple(s for d, s in enumerate(result.shape) if d not in dims)
    # every index row kept (dense dims reduced): the same array, so the entries are seen to be t's; else take
    # makes a new array of those rows (NumPy's or the device's)
    indices = result.indices() if len(keep_rows) == S else result.indices().take(keep_rows, axis=0)
    return COOTensor(indices, result.values().reshape(vshape), shape, result.is_coalesced())


def _squeeze_compressed(t: CompressedTensor, dims: tuple) -> CompressedTensor:
    """The body of the compressed layouts: only dense dims (values' trailing
    axes) or batch dims of size 1 are dropped."""
    m = t.batch_dim
    b = 2 if t.layout.blocked else 0
    batch = tuple(s for d, s in enumerate(t.shape[:m]) if d not in dims)
    dense = tuple(s for d, s in enumerate(t.shape) if d >= m + 2 and d not in dims)
    c, p = t.compressed_indices(), t.plain_indices()
    vtail = t.values().shape[m + 1: m + 1 + b]
    values = t.values().reshape(batch + (t.nnz,) + vtail + dense)
    if batch != t.shape[:m]:  # else the same arrays, so the entries are seen to be t's
        c, p = c.reshape(batch + c.shape[-1:]), p.reshape(batch + (t.nnz,))
    return CompressedTensor(c, p, values,
                            batch + t.shape[m:m + 2] + dense, t.layout, t.is_coalesced())


def _bounds_before_sum(t, threads) -> None:
    """Bounds (5.1-5.5, C4/C5) of a tensor never checked, or checked but on a caller's index
    arrays (written since: the error says so)."""
    if not (t._checked if isinstance(t, COOTensor) else t._canonical):
        backend_for(t).check_bounds(t, threads)
    elif _tensor._any_held and held_outside(t):
        try:
            backend_for(t).check_bounds(t, threads)
        except InvariantError as e:
            raise e.changed_since_check() from None


def _run(t, dim, keepdim: bool, op, work_dtype, threads, name: str):
    """Reduce ``t`` (values converted to ``work_dtype``) over ``dim``; returns the result and dims."""
    dims = _normalize_dims(dim, t.ndim, name)
    if op is not np.add:
        _check_nonempty_reduction(op, t.shape, dims, name)
    if op is not np.add or t.dtype != work_dtype:
        # duplicates merge in the values' own dtype (bool by or, integers wrapping) before the cast
        t = coalesced(t, threads)
    if t.dtype != work_dtype:
        t = t._replace_values(t.values().astype(work_dtype))
    if t.ndim == 0:  # one element, coalesced: its value (or 0) is its sum, whatever the op
        op = np.add
    if op is np.add:
        # the sums over every dim and over rows read no plain index, but a tensor never checked, or
        # one on a caller's arrays, is checked for bounds first (a stored value out of the shape, or in
        # no slice, is no element: to_dense raises there too); repeats and unsorted slices are summed
        _bounds_before_sum(t, threads)
    if op is np.add and (dim is None or len(dims) == t.ndim):
        r = backend_for(t).reduce_sum(t, threads).reshape((1,) * t.ndim)
    elif op is np.add:
        r = backend_for(t).reduce_sum_dims(t, dims, threads)
    else:
        r = backend_for(t).reduce_dims(t, dims, op, threads)
    return _squeeze(r, dims, keepdim)


# -- public reductions -----------------------------------------------------------------------------------
def sum(t, dim=None, keepdim: bool = False, *, dtype=None, threads: int | None = None):
    """The sum over ``dim`` (None: every element), with unspecified elements as zeros.

    Parameters
    ----------
    t : SparseTensor
    dim : int or sequence of int, optional
        The dims to sum over: any of batch, sparse and dense dims. None sums
        everything and returns a 0-d array; ``()`` sums nothing (NumPy's rule).
    keepdim : bool
        Keep the reduced dims with size 1.
    dtype : dtype, optional
        Convert the values to this dtype before summing.
    threads : int, optional
        Threads for the kernels used on the way (coalescing, conversions).

    Returns
    -------
    SparseTensor or numpy.ndarray
        See the table in :mod:`sparsetensor.ops.reduce`: a sparse tensor while a
        sparse dim of a COO tensor (a batch dim of a compressed one) or only dense
        dims remain, a NumPy array otherwise. bool and integer tensors sum to int64.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import reduce
    >>> t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], size=(2, 3))
    >>> reduce.sum(t)
    array(6.)
    >>> reduce.sum(t, 1)                  # row sums: a dense vector
    array([3., 3.])
    >>> c = reduce.sum(t.to_sparse_coo(), 0)  # coo over a sparse dim: coo
    >>> c.indices(), c.values()
    (array([[0, 1, 2]]), array([1., 3., 2.]))
    """
    if dtype is None and not keepdim and type(t) is CompressedTensor and type(dim) is int:
        r = _cpu.slot_sums_2d(t, dim, threads)  # the common case first: the row sums of a csr matrix
        if r is not None:
            return r
    _check_tensor(t, "sum")
    have = t.dtype
    src = have if dtype is None else as_value_dtype(dtype)
    out_dtype = _sum_dtype(src) if dtype is None else src
    if src != have:  # duplicates merge in the values' own dtype first, as in t.to_dense()
        t = coalesced(t, threads).astype(src, copy=False)
    r = _run(t, dim, keepdim, np.add, _work_dtype(out_dtype), threads, "sum")
    return _astype(r, out_dtype)


def mean(t, dim=None, keepdim: bool = False, *, dtype=None, threads: int | None = None):
    """The mean over ``dim`` counting unspecified elements as zeros (``sum / count``).

    bool and integer tensors give float64; the result has the form :func:`sum`
    gives. A mean over empty slices is NaN, as in NumPy (without its warning),
    where the result is dense; a sparse result cannot hold NaN in its unspecified
    elements, so that case raises ValueError.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import reduce
    >>> t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1, 2, 3], size=(2, 3))
    >>> reduce.mean(t)
    array(1.)
    >>> reduce.mean(t, 0)
    array([0.5, 1.5, 1. ])
    """
    _check_tensor(t, "mean")
    if dtype is None:
        out_dtype = np.dtype(np.float64) if t.dtype.kind in "biu" else t.dtype
    else:
        out_dtype = as_value_dtype(dtype)
        if out_dtype.kind in "biu":
            raise TypeError(f"mean needs a floating or complex dtype, got dtype={out_dtype}")
    dims = _normalize_dims(dim, t.ndim, "mean")
    count = math.prod(t.shape[d] for d in dims)
    work = _work_dtype(out_dtype)
    s = _run(t, dim, keepdim, np.add, work, threads, "mean")
    if not count and isinstance(s, SparseTensor) and s.numel():
        raise ValueError(f"mean over dims {dims} of a tensor of shape {t.shape}: the slices are empty, so the mean "
                         "is NaN everywhere, which a sparse result cannot hold; use mean(t.to_dense())")
    with np.errstate(invalid="ignore", divide="ignore"):
        r = _map(s, lambda v: v / work.type(count) if count else v * work.type(np.nan))
    return _astype(r, out_dtype)


def _minmax(t, dim, keepdim, op, threads, name):
    _check_tensor(t, name)
    if t.dtype.kind == "c":
        raise TypeError(f"{name} is not defined for complex tensors (dtype {t.dtype})")
    return _run(t, dim, keepdim, op, t.dtype, threads, name)


def amax(t, dim=None, keepdim: bool = False, *, threads: int | None = None):
    """The maximum over ``dim``, unspecified elements counting as zeros.

    A slice with an unspecified element has a maximum of at least 0 (``amax`` of
    the dense tensor). PyTorch has no sparse ``amax``; this is the dense
    definition. NaN propagates; complex tensors raise TypeError; a maximum over
    an empty slice raises ValueError. The result has the form :func:`sum` gives.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import reduce
    >>> t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [-1.0, -2.0, -3.0], size=(2, 3))
    >>> reduce.amax(t)
    array(0.)
    >>> reduce.amin(t, 1)
    array([-2., -3.])
    """
    return _minmax(t, dim, keepdim, np.maximum, threads, "amax")


def amin(t, dim=None, keepdim: bool = False, *, threads: int | None = None):
    """The minimum over ``dim``, unspecified elements counting as zeros; see :func:`amax`.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import reduce
    >>> reduce.amin(st.sparse_coo_tensor([[0, 1]], [2.0, 3.0], size=(3,)))
    array(0.)
    """
    return _minmax(t, dim, keepdim, np.minimum, threads, "amin")


def _norm_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind in "biu":
        return np.dtype(np.float64)
    if dtype.kind == "c":
        return np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    return dtype


def norm(t, p="fro", dim=None, keepdim: bool = False, *, threads: int | None = None):
    """The vector p-norm over ``dim`` (None: all elements), unspecified elements as zeros.

    Parameters
    ----------
    p : "fro" or float
        ``"fro"`` (= 2), any real ``p`` (``(sum |x|**p) ** (1/p)``), ``inf``
        (max ``|x|``), ``-inf`` (min ``|x|``) or ``0`` (the number of nonzeros).
        Negative ``p`` and ``-inf`` give 0 on slices with a zero, unspecified
        ones included (the dense definition; ``torch.norm`` of a sparse tensor
        ignores unspecified elements there). ``"nuc"`` and other matrix norms
        raise ValueError.

    Returns
    -------
    SparseTensor or numpy.ndarray
        The form :func:`sum` gives, of a real dtype (float64 for integers, float32
        for complex64).

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import reduce
    >>> t = st.sparse_coo_tensor([[0, 1], [0, 2]], [3.0, -4.0], size=(2, 3))
    >>> reduce.norm(t)
    array(5.)
    >>> reduce.norm(t, 1, dim=1).to_dense()   # coo over a sparse dim: coo
    array([3., 4.])
    """
    _check_tensor(t, "norm")
    if isinstance(p, str):
        if p != "fro":
            raise ValueError(f"norm: p={p!r} is not supported for sparse tensors; use p='fro' or a number "
                             "(matrix norms such as 'nuc' need .to_dense())")
        p = 2.0
    elif isinstance(p, bool) or not isinstance(p, (numbers.Real, np.integer, np.floating)):
        raise TypeError(f"norm: p must be 'fro' or a real number, got {p!r}")
    p = float(p)
    if math.isnan(p):
        raise ValueError("norm: p must not be NaN")
    out_dtype = _norm_dtype(t.dtype)
    work = _work_dtype(out_dtype)
    t = coalesced(t, threads)
    if t.is_cuda:
        return _astype(_norm_device(t, p, dim, keepdim, work, threads), out_dtype)
    if p == 2 and dim is None:
        # one pass, no temporaries: the values' dot product with themselves
        _normalize_dims(dim, t.ndim, "norm")
        v = t.values()
        if v.dtype.kind in "biu" or v.dtype == np.float16:
            v = v.astype(work)
        if v.dtype.kind == "c":  # as pairs of reals: the complex product of an infinity with itself is NaN
            v = np.ascontiguousarray(v).view(v.real.dtype)
        r = np.sqrt(np.asarray(np.vdot(v, v).real, dtype=work))
        return np.asarray(r, dtype=out_dtype).reshape((1,) * t.ndim if keepdim else ())
    v = t.values()
    if v.dtype.kind in "iu":  # |x| in the float work dtype: NumPy's abs of int8 -128 is -128
        v = v.astype(work)
    a = t._replace_values(np.abs(v).astype(work, copy=False))
    if p == math.inf:
        r = _run(a, dim, keepdim, np.maximum, work, threads, "norm")
    elif p == -math.inf:
        r = _run(a, dim, keepdim, np.minimum, work, threads, "norm")
    elif p == 0:
        r = _run(a._replace_values((a.values() != 0).astype(work)), dim, keepdim, np.add, work, threads, "norm")
    elif p == 1:
        r = _run(a, dim, keepdim, np.add, work, threads, "norm")
    elif p == 2:
        r = _map(_run(a._replace_values(a.values() ** 2), dim, keepdim, np.add, work, threads, "norm"), np.sqrt)
    else:
        with np.errstate(divide="ignore"):
            powered = a._replace_values(np.power(a.values(), work.type(p)))
        s = _run(powered, dim, keepdim, np.add, work, threads, "norm")
        with np.errstate(divide="ignore", over="ignore"):
            r = _map(s, lambda v: np.power(v, work.type(1 / p)))
        if p < 0:
            # (sum |x|**p) ** (1/p) is 0 when a reduced element is 0 (|0|**p = inf), unspecified ones too
            lo = _run(a, dim, keepdim, np.minimum, work, threads, "norm")
            lo_vals = lo.values() if isinstance(lo, SparseTensor) else lo
            r = _map(r, lambda v: np.where(lo_vals == 0, work.type(0), v))
    return _astype(r, out_dtype)


def _norm_device(t, p: float, dim, keepdim: bool, work: np.dtype, threads):
    """The norm of a device tensor (distinct indices) in ``work``: ``|x|`` (the backend's pointwise
    kernel), ``** p``, the reduction, the root (the backend's ``map_values``)."""
    if p == 0:  # the number of nonzeros: x != 0 (the device's cast to bool), summed
        return _run(t._replace_values(t.values().astype(np.bool_).astype(work)), dim, keepdim, np.add, work, threads,
                    "norm")
    a = t if t.dtype.kind in "fc" else t.astype(work)
    a = a._replace_values(backend_for(a).unary(a, "abs", np.absolute, None, None))
    if a.dtype != work:
        a = a.astype(work)
    if p == math.inf:
        return _run(a, dim, keepdim, np.maximum, work, threads, "norm")
    if p == -math.inf:
        return _run(a, dim, keepdim, np.minimum, work, threads, "norm")
    if p == 1:
        return _run(a, dim, keepdim, np.add, work, threads, "norm")
    backend = backend_for(t)
    s = _run(a._replace_values(backend.map_values(a.values(), "pow", np.power, p, threads)), dim, keepdim, np.add,
             work, threads, "norm")
    r = _map(s, lambda v: backend.map_values(v, "pow", np.power, 1 / p, threads))
    if p > 0:
        return r
    # as on the host: 0 where a reduced element is 0, unspecified ones too (|0|**p = inf); the flags
    # (min |x| != 0) become a cap of 0 or inf through atanh (atanh(0) = 0, atanh(1) = inf), so an
    # all-unspecified slice (r = inf) gets 0 and a NaN stays NaN
    lo = _run(a, dim, keepdim, np.minimum, work, threads, "norm")
    flags = (lo.values() if isinstance(lo, SparseTensor) else lo).astype(np.bool_).astype(work)
    cap = backend.map_values(flags, "atanh", np.arctanh, None, threads)
    return _map(r, lambda v: backend.elementwise(v, cap, "minimum", threads))


# -- softmax ---------------------------------------------------------------------------------------------
def _segment_softmax(x: np.ndarray, offsets: np.ndarray, E: int, perm, log: bool, threads) -> np.ndarray:
    """Softmax of ``x`` (``(n, K * E)``, float32/64) over each segment's rows and ``K`` items, per lane."""
    return backend_for(x).segment_softmax(x, offsets, E, perm, log, threads)


def _dense_softmax(v: np.ndarray, axis: int, log: bool, threads=None) -> np.ndarray:
    """Softmax along a dense axis of the values (all of its elements are specified)."""
    if type(v) is not np.ndarray:  # a device array: segments of the axis's length, one lane per item after it
        L = v.shape[axis]
        if L == 0:
            return v
        n, inner = math.prod(v.shape[:axis + 1]), math.prod(v.shape[axis + 1:])
        offsets = np.arange(0, n + 1, L, dtype=np.int64)
        return _segment_softmax(v.reshape(n, inner), offsets, inner, None, log, threads).reshape(v.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = v - np.max(v, axis=axis, keepdims=True) if v.shape[axis] else v
        if log:
            return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
        e = np.exp(z)
        return e / np.sum(e, axis=axis, keepdims=True)


# ``_SOFTMAX_CALC_BY_LAYOUT[type(t)](t, d, log, threads)``: the softmax values of ``t`` (distinct indices, a floating
# work dtype) along ``d``, in ``t``'s entry order; a body per layout (``_SOFTMAX_CALC_BY_LAYOUT``).
def _softmax_coo(t: COOTensor, d: int, log: bool, threads) -> np.ndarray:
    """The body of COO."""
    v = t.values()
    S = t.sparse_dim
    if d >= S:
        return _dense_softmax(v, d - S + 1, log, threads)
    kept = [k for k in range(S) if k != d]
    perm, starts, _ = backend_for(t).group_by(t, kept, [d], threads)
    E = math.prod(v.shape[1:])
    return _segment_softmax(v.reshape(t.nnz, E), starts, E, perm, log, threads).reshape(v.shape)


def _softmax_compressed(t: CompressedTensor, d: int, log: bool, threads) -> np.ndarray:
    """The body of the compressed layouts."""
    v = t.values()
    m, b = t.batch_dim, (2 if t.layout.blocked else 0)
    if v.size == 0:  # no batch, entry or element: nothing to normalise (the COO detour would drop nnz)
        return v
    if d >= m + 2:
        return _dense_softmax(v, d - 1 + b, log, threads)
    plain_dim = m + 1 if t.layout.compressed_rows else m
    if d != plain_dim:
        # the compressed dim: transpose the storage (a counting sort); a batch dim: through COO
        layout = t.layout.transposed if d >= m else "coo"
        u = t.to_sparse(layout, blocksize=t.blocksize if t.layout.blocked and d >= m else None, threads=threads)
        r = u._replace_values(_SOFTMAX_CALC_BY_LAYOUT[type(u)](u, d, log, threads))
        back = r.to_sparse(t.layout, blocksize=t.blocksize if t.layout.blocked else None, threads=threads)
        return back.values()
    B, nnz = math.prod(t.shape[:m]), t.nnz
    rb, cb = t.blocksize
    D = math.prod(t.shape[m + 2:])
    backend = backend_for(t)
    c = t.compressed_indices().reshape(B, t.compressed_indices().shape[-1])
    host = backend.device == "cpu"
    contiguous = np.ascontiguousarray if host else (lambda a: a)  # device arrays are C-contiguous
    V = contiguous(v).reshape(B * nnz, rb, cb, D)
    # segments: the entries of one compressed index; reduce over them and the block's plain axis
    flip = t.layout.compressed_rows
    x = contiguous(V.swapaxes(1, 2)) if flip else V  # (n, K, lanes, D)
    n, K = x.shape[0], x.shape[1]
    E = x.shape[2] * D
    offsets = batch_offsets(c, nnz) if host else backend.batch_offsets(c, nnz, threads)
    res = _segment_softmax(x.reshape(n, K * E), offsets, E, None, log, threads).reshape(x.shape)
    if flip:
        res = res.swapaxes(1, 2)
    return contiguous(res).reshape(v.shape)


def _softmax(t, dim, dtype, log: bool, threads, name: str):
    _check_tensor(t, name)
    d = _normalize_dims(operator.index(dim), t.ndim, name)[0]
    if dtype is not None:
        t = t.astype(as_value_dtype(dtype), copy=False)
    if t.dtype.kind != "f":
        raise TypeError(f"{name} needs a floating tensor, got dtype {t.dtype} (pass dtype=np.float32 or "
                        "np.float64 to convert)")
    out_dtype = t.dtype
    t = coalesced(t, threads)
    work = _work_dtype(out_dtype)
    if work != out_dtype:
        t = t._replace_values(t.values().astype(work))
    values = _SOFTMAX_CALC_BY_LAYOUT[type(t)](t, d, log, threads).astype(out_dtype, copy=False)
    return t._replace_values(values if t.is_cuda else np.ascontiguousarray(values))


def softmax(t, dim: int, *, dtype=None, threads: int | None = None):
    """Softmax along ``dim`` with unspecified elements as ``-inf`` (``torch.sparse.softmax``).

    The result has ``t``'s pattern (coalesced first; see below): each specified
    element becomes ``exp(x) / sum(exp(x))`` over the specified elements of its
    slice along ``dim``, and unspecified ones stay unspecified (a slice with no
    entries stays empty). Along a dense dim every element is specified: the dense
    softmax of the values. Batch dims are supported for the compressed layouts,
    dense (hybrid) dims for all: each dense index has its own softmax. The explicit
    zeros inside a bsr/bsc block are specified elements (they count as 0, not
    ``-inf``).

    Parameters
    ----------
    dim : int
        Any dim: sparse (every layout), batch (compressed) or dense.
    dtype : dtype, optional
        Convert the values to this dtype first. Floating dtypes only (TypeError
        otherwise, as in PyTorch); float16 is computed in float32.

    Notes
    -----
    The result shares the index arrays of ``t`` (of ``t.coalesce()`` when ``t``
    is an uncoalesced COO tensor, or a compressed one built without checking).
    Along the compressed dim of a csr/csc/bsr/bsc tensor (columns of csr, rows of
    csc) the storage is transposed and back (two counting sorts); along a batch
    dim the tensor goes through COO.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops import reduce
    >>> t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [0.0, np.log(3.0), 5.0], size=(2, 3))
    >>> reduce.softmax(t, -1).values()
    array([0.25, 0.75, 1.  ])
    """
    return _softmax(t, dim, dtype, False, threads, "softmax")


def log_softmax(t, dim: int, *, dtype=None, threads: int | None = None):
    """``log(softmax(t, dim))``, computed stably; see :func:`softmax`.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops import reduce
    >>> t = st.sparse_coo_tensor([[0, 0], [0, 1]], [0.0, 0.0], size=(1, 3))
    >>> np.exp(reduce.log_softmax(t, 1).values())
    array([0.5, 0.5])
    """
    return _softmax(t, dim, dtype, True, threads, "log_softmax")


# Each op's body per layout family, picked where the op reads it: ``TABLE[type(t)](t, ...)``.
_REDUCE_RETURN_BY_LAYOUT = {COOTensor: _squeeze_coo, CompressedTensor: _squeeze_compressed}
_SOFTMAX_CALC_BY_LAYOUT = {COOTensor: _softmax_coo, CompressedTensor: _softmax_compressed}
