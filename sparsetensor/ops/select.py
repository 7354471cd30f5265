"""Selection and views: transpose, narrow, select, index_select, nonzero, count_nonzero, for
every layout, with batch and dense dims (the rules are :mod:`sparsetensor.ops.shape`'s).

The kernels are behind the backend (:mod:`sparsetensor._backend.cpu._select` on the CPU).
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .._core import _layout as L
from .._backend import backend_for
from .._core._canonical import build, ensure_valid_export
from .._core._dtypes import check_fits
from .._core._shape_checks import normalize_dim
from .._core._tensor import COOTensor, CompressedTensor
from ._shape_common import (
    _require_sparse,
    _kind,
    _values_axis,
    _take_axis,
    _compressed,
    _is_nondecreasing,
    _is_increasing,
    _as_index,
    _parts,
    _value_rows,
    _sparse_axis,
    _resized,
    _with_values,
)

__all__ = ["transpose", "narrow", "select", "index_select", "nonzero", "count_nonzero"]


# -- transpose --------------------------------------------------------------------------------------
def transpose(t, dim0: int, dim1: int):
    """Swap two dims of the same kind (batch, sparse or dense).

    - coo: two sparse dims (new indices, values shared) or two dense dims (a values view).
    - csr/csc/bsr/bsc: the two sparse dims give a view (csr <-> csc, bsr <-> bsc); two
      batch dims permute the batch axes of every member (a copy); two dense dims
      permute the values (a copy). PyTorch swaps batch dims too but refuses every
      transpose of a hybrid compressed tensor.
    - a sparse dim with a batch or dense dim: ``NotImplementedError`` (as in PyTorch).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import transpose
    >>> t = st.from_dense(np.arange(1, 9).reshape(2, 2, 2), "csr", batch_dim=1)
    >>> u = transpose(t, 1, 2)
    >>> u.layout, bool((u.to_dense() == t.to_dense().transpose(0, 2, 1)).all())
    (st.sparse_csc, True)
    """
    _require_sparse(t, "transpose")
    d0, d1 = sorted((normalize_dim(dim0, t.ndim, "transpose"), normalize_dim(dim1, t.ndim, "transpose")))
    if d0 == d1:
        return t
    k0, k1 = _kind(t, d0), _kind(t, d1)
    if k0 != k1:
        raise NotImplementedError(f"transpose({dim0}, {dim1}) of a {t.layout.name} tensor: dim {d0} is a {k0} dim "
                                  f"and dim {d1} a {k1} dim; only dims of one kind (batch, sparse, dense) can be "
                                  "swapped")
    shape = list(t.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    if k0 == "sparse":
        return _TRANSPOSE_SPARSE_BY_LAYOUT[type(t)](t, d0, d1)
    # device arrays swap into new contiguous arrays; NumPy's views are made contiguous where members must be
    contiguous = (lambda a: a) if t.is_cuda else np.ascontiguousarray
    if k0 == "batch":
        c, p, v = (contiguous(a.swapaxes(d0, d1)) for a in (t.compressed_indices(), t.plain_indices(), t.values()))
        return _compressed(t, c, p, v, shape)
    v = t.values().swapaxes(_values_axis(t, d0), _values_axis(t, d1))
    return _with_values(t, v if t.layout is L.sparse_coo else contiguous(v), shape)


# Per-layout bodies (``*_BY_LAYOUT`` at the end of this module): the public op
# resolves the dims and arguments once, then ``_<OP>_SPARSE_BY_LAYOUT[type(t)](t, ...)`` does the layout's work along
# a sparse dim.
def _transpose_sparse_coo(t: COOTensor, d0: int, d1: int) -> COOTensor:
    """The body of COO: the two index rows swapped (values shared)."""
    rows = list(range(t.sparse_dim))
    rows[d0], rows[d1] = d1, d0
    idx = t.indices().take(rows, axis=0)  # a new array (NumPy's or a device array's take)
    shape = list(t.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    return COOTensor(idx, t.values(), tuple(shape), False)


def _transpose_sparse_compressed(t: CompressedTensor, d0: int, d1: int) -> CompressedTensor:
    """The body of the compressed layouts: the view csr <-> csc, bsr <-> bsc."""
    return t._matrix_transpose()



# -- compressed selection along a sparse dim -------------------------------------------------------
def _gather_compressed(parts, rows: np.ndarray, size: int, what: str, threads):
    """Compressed slices ``rows`` (block units) of every batch, in that order (repeats allowed)."""
    members = backend_for(parts.compressed).gather_slices(parts, rows, what, threads)
    return parts._replace(compressed=members[0], plain=members[1], values=members[2],
                          sparse=_resized(parts, True, size))


def _remap_plain(parts, index: np.ndarray, size: int, what: str, threads):
    """Every slice's entries mapped through ``index`` (new plain j gets old plain index[j])."""
    members = backend_for(parts.compressed).remap_plain(parts, index, _is_nondecreasing(index), what, threads)
    return parts._replace(compressed=members[0], plain=members[1], values=members[2],
                          sparse=_resized(parts, False, size))


def _narrow_plain(parts, start: int, length: int, threads):
    """Plain indices in [start, start + length) (block units) of every slice."""
    members = backend_for(parts.compressed).narrow_plain(parts, start, length, threads)
    return parts._replace(compressed=members[0], plain=members[1], values=members[2],
                          sparse=_resized(parts, False, length))


# -- narrow -----------------------------------------------------------------------------------------
def narrow(t, dim: int, start: int, length: int, *, threads: int | None = None):
    """The slice ``start:start + length`` of dim ``dim`` (PyTorch's ``narrow_copy``).

    ``start`` may be negative (counted from the end, as in PyTorch).

    - coo: along a sparse dim the entries in range are kept (shifted), and so is the
      coalesced flag; along a dense dim the values are sliced.
    - csr/csc/bsr/bsc (PyTorch cannot narrow them): along a batch dim every member is
      sliced (possibly a view); along a dense dim the values; along the compressed
      dim the compressed index and each batch's entry range; along the plain dim
      every row (column) is filtered. Along a sparse dim of bsr/bsc, ``start`` and
      ``length`` must be multiples of the blocksize (``ValueError``). When batches
      would end up with different nnz: ``ValueError`` naming the counts.
    - on a CUDA device: every case above (``kernels/select.cu``), with the same results.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import narrow
    >>> a = np.array([[1, 0, 2], [0, 3, 0], [4, 0, 5]])
    >>> narrow(st.from_dense(a, "csr"), 1, 1, 2).to_dense()
    array([[0, 2],
           [3, 0],
           [0, 5]])
    """
    _require_sparse(t, "narrow")
    d = normalize_dim(dim, t.ndim, "narrow")
    size = t.shape[d]
    start, length = operator.index(start), operator.index(length)
    if not -size <= start <= size:
        raise IndexError(f"narrow: start {start} out of range for dim {d} of size {size}")
    start = start + size if start < 0 else start
    if length < 0 or start + length > size:
        raise IndexError(f"narrow: start ({start}) + length ({length}) exceeds dim {d} of size {size}"
                         if length >= 0 else f"narrow: length must be >= 0, got {length}")
    shape = t.shape[:d] + (length,) + t.shape[d + 1:]
    kind = _kind(t, d)
    if kind == "sparse":
        return _NARROW_SPARSE_BY_LAYOUT[type(t)](t, d, start, length, shape, threads)
    if t.is_cuda:
        return _take_device(t, d, np.arange(start, start + length, dtype=np.int64), shape, kind)
    if kind == "dense":
        v = np.ascontiguousarray(_take_axis(t.values(), _values_axis(t, d), slice(start, start + length)))
        return _with_values(t, v, shape)
    key = slice(start, start + length)  # a batch dim
    return _compressed(t, *(_take_axis(a, d, key) for a in (t.compressed_indices(), t.plain_indices(),
                                                            t.values())), shape)


def _take_device(t, d: int, index: np.ndarray, shape: tuple, kind: str):
    """``t`` taken at host ``index`` along its batch or dense dim ``d`` (a device tensor): the
    values (a dense dim) or every member (a batch dim) gathered by take_axis; flags kept."""
    take = _device_select().take_axis
    if kind == "dense":
        v = take(t.values(), _values_axis(t, d), index)
        if t.layout is L.sparse_coo:
            return COOTensor(t.indices(), v, tuple(shape), t.is_coalesced(), t._checked)
        c, p = t.compressed_indices(), t.plain_indices()
    else:
        c, p, v = (take(a, d, index) for a in (t.compressed_indices(), t.plain_indices(), t.values()))
    return CompressedTensor(c, p, v, tuple(shape), t.layout, t.is_coalesced())


def _narrow_coo(t: COOTensor, d: int, start: int, length: int, shape: tuple, threads) -> COOTensor:
    """The body of COO: the entries whose coordinate along ``d`` is in range."""
    # entries are kept by coordinate: C4/C5 first (again where the caller may have written them)
    t = ensure_valid_export(t, threads=threads)
    out, values = backend_for(t).narrow_coo(t.indices(), t.values(), d, start, length, threads=threads)
    return COOTensor(out, values, shape, t.is_coalesced())


def _narrow_compressed(t: CompressedTensor, d: int, start: int, length: int, shape: tuple, threads):
    """The body of the compressed layouts: whole (block) rows along the
    compressed dim, a filtered plain dim otherwise."""
    is_comp, bs = _sparse_axis(t, d)
    if start % bs or length % bs:
        raise ValueError(f"narrow of a {t.layout.name} tensor with blocksize {t.blocksize} along dim {d}: start "
                         f"({start}) and length ({length}) must be multiples of {bs}")
    s, n = start // bs, length // bs
    parts = _parts(t, threads)
    if is_comp:
        rows = np.arange(s, s + n, dtype=np.int64)
        return build(_gather_compressed(parts, rows, n, "narrow", threads))
    return build(_narrow_plain(parts, s, n, threads))


# -- select -----------------------------------------------------------------------------------------
def _sum_rows(values: np.ndarray) -> np.ndarray:
    """The sum over axis 0 in the values' dtype (bool: or; float16: in float32, rounded once)."""
    if values.dtype == np.bool_:
        return np.logical_or.reduce(values, axis=0)
    if values.dtype == np.float16:
        return values.sum(axis=0, dtype=np.float32).astype(np.float16)
    return values.sum(axis=0, dtype=values.dtype)


def select(t, dim: int, index: int, *, threads: int | None = None):
    """Index ``index`` of dim ``dim``, that dim removed (``index`` may be negative).

    - coo, a sparse dim: the entries with that coordinate, one sparse dim fewer (the
      coalesced flag is kept). When no sparse dim is left the result is a dense NumPy
      array (duplicates summed), as in PyTorch.
    - a dense dim (every layout): the values indexed; a batch dim of a compressed tensor:
      every member indexed (a view where possible). Layout kept, as in PyTorch.
    - a sparse dim of csr/csc/bsr/bsc: a COO tensor with ``sparse_dim = batch_dim + 1``
      (batch dims become its leading sparse dims, as in ``to_sparse("coo")``) and the
      dense dims. Unbatched: the one block row (column) is cut out first; batched: the
      whole tensor goes through coo (O(nnz)). PyTorch returns the same for unbatched csr/csc and refuses batched
      and most blocked tensors; here blocked ones work too, the items of the selected
      blocks becoming entries (explicit zeros included, as bsr -> coo does).
    - on a CUDA device: the same results; the dense result of a coo tensor is a DeviceArray.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import select
    >>> t = st.from_dense(np.array([[1, 0, 2], [0, 3, 0]]), "csr")
    >>> r = select(t, 0, 0)
    >>> r.layout, r.indices(), r.values()
    (st.sparse_coo, array([[0, 2]]), array([1, 2]))
    """
    _require_sparse(t, "select")
    d = normalize_dim(dim, t.ndim, "select")
    size = t.shape[d]
    i = operator.index(index)
    if not -size <= i < size:
        raise IndexError(f"select: index {index} out of range for dim {d} of size {size}")
    i %= size
    shape = t.shape[:d] + t.shape[d + 1:]
    kind = _kind(t, d)
    if t.is_cuda and kind != "sparse":
        taken = _take_device(t, d, np.array([i], dtype=np.int64), t.shape[:d] + (1,) + t.shape[d + 1:], kind)
        return _drop_dim(taken, d, shape)
    if kind == "dense":
        v = np.ascontiguousarray(np.take(t.values(), i, axis=_values_axis(t, d)))
        return _with_values(t, v, shape)
    if kind == "batch":
        return _compressed(t, *(_take_axis(a, d, i) for a in (t.compressed_indices(), t.plain_indices(),
                                                            t.values())), shape)
    return _SELECT_SPARSE_BY_LAYOUT[type(t)](t, d, i, shape, threads)


def _select_compressed(t: CompressedTensor, d: int, i: int, shape: tuple, threads):
    """The body of the compressed layouts: through COO (see :func:`select`)."""
    if t.batch_dim:  # the batches of a narrowed tensor could differ in nnz: go through coo
        return select(t.to_sparse(L.sparse_coo, threads=threads), d, i, threads=threads)
    _, bs = _sparse_axis(t, d)
    lo = i // bs * bs
    coo = narrow(t, d, lo, bs, threads=threads).to_sparse(L.sparse_coo, threads=threads)
    return select(coo, d, i - lo, threads=threads)


def _drop_dim(t, d: int, shape: tuple):
    """Device tensor ``t`` with its batch or dense dim ``d`` of size 1 removed (arrays reshaped)."""
    if t.layout is L.sparse_coo:
        v = t.values()
        return COOTensor(t.indices(), v.reshape(_without(v.shape, _values_axis(t, d))), shape, t.is_coalesced(),
                         t._checked)
    members = [t.compressed_indices(), t.plain_indices(), t.values()]
    if d < t.batch_dim:
        members = [a.reshape(_without(a.shape, d)) for a in members]
    else:
        members[2] = members[2].reshape(_without(members[2].shape, _values_axis(t, d)))
    return CompressedTensor(*members, shape, t.layout, t.is_coalesced())


def _without(shape: tuple, axis: int) -> tuple:
    return shape[:axis] + shape[axis + 1:]


def _select_coo_device(t: COOTensor, d: int, i: int, shape: tuple, threads):
    """The body of COO on the device: index_select of ``[i]``, then index row ``d`` dropped (every
    entry left has coordinate ``i`` there: the order, and so the coalesced flag, is kept); with no
    sparse dim left, the dense values summed (to_dense of the one-coordinate tensor)."""
    one = _index_select_coo(t, d, np.array([i], dtype=np.int64), t.shape[:d] + (1,) + t.shape[d + 1:], threads)
    if t.sparse_dim == 1:
        return one.to_dense().reshape(shape)
    rows = [r for r in range(t.sparse_dim) if r != d]
    return COOTensor(one.indices().take(rows, axis=0), one.values(), shape, one.is_coalesced())


def _select_coo(t: COOTensor, d: int, i: int, shape: tuple, threads):
    """The body of COO: the entries with coordinate ``i`` along ``d``."""
    if t.is_cuda:
        return _select_coo_device(t, d, i, shape, threads)
    # entries are kept by coordinate: C4/C5 first (again where the caller may have written them)
    idx = ensure_valid_export(t, threads=threads).indices()
    keep = idx[d] == i
    values = t.values()[keep]
    if t.sparse_dim == 1:
        return _sum_rows(values) if values.shape[0] != 1 else values[0].copy()
    return COOTensor(np.compress(keep, np.delete(idx, d, axis=0), axis=1), values, shape, t.is_coalesced())


# -- index_select -----------------------------------------------------------------------------------
def index_select(t, dim: int, index, *, threads: int | None = None):
    """The entries at ``index`` (int32/int64, repeats allowed; negatives count from the end, as in
    PyTorch's sparse index_select) along ``dim``.

    - coo, a sparse dim: every entry once per position of its coordinate in ``index``
      (a counting pass over ``index`` and one parallel pass over the entries). The result
      is coalesced when the input is and ``index`` is strictly increasing.
    - a dense dim: the values taken; a batch dim of a compressed tensor: every member taken.
    - csr/csc (PyTorch has no index_select for them): along the compressed dim whole
      rows (columns) are gathered; along the plain dim each row is filtered and
      remapped (repeats give several entries), then sorted. For bsr/bsc a sparse dim
      needs blocksize 1 along it (``NotImplementedError`` otherwise: convert first).
      Batches ending up with different nnz: ``ValueError``.
    - on a CUDA device: every case above, with a host ``index`` or an index array on the tensor's
      device (checked there; an index on a device with a host tensor raises ``ValueError``).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import index_select
    >>> t = st.from_dense(np.array([[1, 0, 2], [0, 3, 0]]), "coo")
    >>> index_select(t, 1, [2, 2, 0]).to_dense()
    array([[2, 2, 1],
           [0, 0, 0]])
    """
    _require_sparse(t, "index_select")
    d = normalize_dim(dim, t.ndim, "index_select")
    if not t.is_cuda:
        backend_for(t, index)  # a device index with a host tensor: ValueError naming both devices
    idx = _as_index(index, t.shape[d], "index_select")
    K = idx.shape[0]
    shape = t.shape[:d] + (K,) + t.shape[d + 1:]
    kind = _kind(t, d)
    if t.is_cuda and kind != "sparse":
        return _take_device(t, d, idx, shape, kind)
    if kind == "dense":
        return _with_values(t, np.take(t.values(), idx, axis=_values_axis(t, d)), shape)
    if kind == "batch":
        return _compressed(t, *(np.take(a, idx, axis=d) for a in (t.compressed_indices(), t.plain_indices(),
                                                                 t.values())), shape)
    return _INDEX_SELECT_SPARSE_BY_LAYOUT[type(t)](t, d, idx, shape, threads)


def _index_select_compressed(t: CompressedTensor, d: int, idx: np.ndarray, shape: tuple, threads):
    """The body of the compressed layouts."""
    K = idx.shape[0]
    is_comp, bs = _sparse_axis(t, d)
    if bs != 1:
        raise NotImplementedError(f"index_select along sparse dim {d} of a {t.layout.name} tensor with blocksize "
                                  f"{t.blocksize}: needs blocksize 1 along that dim; convert to "
                                  f"{'csr' if t.layout.compressed_rows else 'csc'} or coo first")
    parts = _parts(t, threads)
    if is_comp:
        return build(_gather_compressed(parts, idx, K, "index_select", threads))
    return build(_remap_plain(parts, idx, K, "index_select", threads))


def _index_select_coo(t: COOTensor, d: int, idx: np.ndarray, shape: tuple, threads) -> COOTensor:
    """The body of COO: a counting pass over ``idx``, one over the entries."""
    t = ensure_valid_export(t, threads=threads)  # C4/C5 first (again where the caller may have written them)
    dt = t.index_dtype
    check_fits(dt, "coo", **{f"size[{d}]": shape[d]})
    values = t.values()
    if t.is_cuda:  # device arrays are C-contiguous; the raw kernels take rows of any dtype by itemsize
        indices = t.indices()
        nnz = indices.shape[1]
        raw = values.reshape((nnz, math.prod(values.shape[1:])))
    else:
        indices = np.ascontiguousarray(t.indices())
        nnz = indices.shape[1]
        raw = _value_rows(values, nnz)
    oi, ov = backend_for(t).index_select_coo(indices, raw, d, idx, t.shape, threads)
    out_values = ov.view(values.dtype).reshape((oi.shape[1],) + values.shape[1:])
    return COOTensor(oi, out_values, shape, t.is_coalesced() and _is_increasing(idx))



# -- nonzero ------------------------------------------------------------------------------------------
def nonzero(t, *, threads: int | None = None) -> np.ndarray:
    """The coordinates of the nonzero elements: ``np.argwhere(t.to_dense())`` without densifying.

    An ``(n, ndim)`` int64 array in row-major order, like ``torch.nonzero(t.to_dense())``
    (PyTorch has no sparse nonzero). Duplicates (unchecked input) are summed first;
    explicit zeros are not listed; NaN counts as nonzero. A device tensor gives a DeviceArray.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import nonzero
    >>> nonzero(st.from_dense(np.array([[0, 1], [2, 0]]), "csc"))
    array([[0, 1],
           [1, 0]])
    """
    _require_sparse(t, "nonzero")
    coo = _nonzero_source(t, threads)
    if coo.is_cuda:
        return _device_select().nonzero(coo)
    S, N = coo.sparse_dim, coo.nnz
    dense = coo.shape[S:]
    values = coo.values().reshape(N, math.prod(dense))
    entry, item = np.nonzero(values != 0)
    out = np.empty((entry.shape[0], coo.ndim), dtype=np.int64)
    out[:, :S] = coo.indices()[:, entry].T
    if dense:
        out[:, S:] = np.stack(np.unravel_index(item, dense), axis=1)
    return out


def count_nonzero(t, dim=None, *, threads: int | None = None):
    """The number of nonzero elements (``np.count_nonzero(t.to_dense(), axis=dim)``, torch's
    ``count_nonzero``) without densifying: an int for ``dim=None``, else an int64 array over
    the dims that are not counted along. Duplicates (unchecked input) are summed first;
    explicit zeros do not count; NaN does. A device tensor gives a DeviceArray (an int for
    ``dim=None``: one number is read).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.array([[0, 1, 2], [3, 0, 0]]), "csr")
    >>> st.count_nonzero(t), t.count_nonzero(dim=0), t.count_nonzero(1)
    (3, array([1, 1, 1]), array([2, 1]))
    """
    _require_sparse(t, "count_nonzero")
    if t.is_cuda:
        coo = _nonzero_source(t, threads)
        if dim is None:
            return _device_select().nonzero_count(coo)
        kept, out_shape = _kept_dims(t, dim)
        return _device_select().count_nonzero(coo, kept, out_shape)
    coords = nonzero(t, threads=threads)
    if dim is None:
        return int(coords.shape[0])
    kept, out_shape = _kept_dims(t, dim)
    size = math.prod(out_shape)
    flat = np.ravel_multi_index(coords[:, kept].T, out_shape) if kept else np.zeros(coords.shape[0], np.int64)
    return np.bincount(flat, minlength=size).astype(np.int64, copy=False)[:size].reshape(out_shape)


def _nonzero_source(t, threads):
    """``t`` as a coalesced, checked COO tensor (compressed -> coo is coalesced): what nonzero reads."""
    return t.to_sparse(L.sparse_coo, threads=threads)._coalesced_checked(threads)


def _kept_dims(t, dim) -> tuple:
    """(the dims count_nonzero does not count along, their sizes)."""
    dims = {normalize_dim(d, t.ndim, "count_nonzero") for d in ((dim,) if np.ndim(dim) == 0 else dim)}
    kept = [d for d in range(t.ndim) if d not in dims]
    return kept, tuple(t.shape[d] for d in kept)


def _device_select():
    """The device kernels of nonzero/count_nonzero (the CPU's are the NumPy calls of this module,
    so they have no name in the backend table)."""
    from .._backend.cuda import _select as device_select

    return device_select


# Each op's body per layout family, picked where the op reads it: ``TABLE[type(t)](t, ...)``.
_TRANSPOSE_SPARSE_BY_LAYOUT = {COOTensor: _transpose_sparse_coo, CompressedTensor: _transpose_sparse_compressed}
_NARROW_SPARSE_BY_LAYOUT = {COOTensor: _narrow_coo, CompressedTensor: _narrow_compressed}
_SELECT_SPARSE_BY_LAYOUT = {COOTensor: _select_coo, CompressedTensor: _select_compressed}
_INDEX_SELECT_SPARSE_BY_LAYOUT = {COOTensor: _index_select_coo, CompressedTensor: _index_select_compressed}
