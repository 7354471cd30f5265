"""Shape and indexing ops: transpose, narrow, select, index_select, cat, stack, nonzero,
zero_, copy_, resize_as_ and sparse_mask, for every layout, with batch and dense dims.

Semantics follow PyTorch 2.13 where it defines the op for a layout, and dense NumPy
always (``op(t).to_dense() == op(t.to_dense())``). Where PyTorch refuses (it cannot
narrow, index_select or cat compressed tensors, nor transpose hybrid ones) these
functions go further; each docstring says how. The rules shared by all of them:

- A dim is a *batch* dim (compressed layouts only), a *sparse* dim or a *dense* dim.
  Ops along batch dims act on every member, along dense dims on the values only;
  along sparse dims they select or move entries.
- Results satisfy every invariant; compressed results are canonical (5.6 holds). A
  compressed input built with ``check_invariants=False`` is scanned first (one
  parallel pass, free for checked tensors): broken indices raise
  :class:`~sparsetensor.InvariantError`, unsorted ones are repaired (``coalesce``).
  COO coordinates that an op looks up are bounds-checked (C4/C5).
- Every batch of a compressed tensor has the same nnz: an op whose result would
  give batches different nnz raises ``ValueError`` naming the counts.
- Results do not share memory with their inputs, except that they may share index
  arrays (never written in place) and that ops along batch dims and ``transpose`` may
  return views, as PyTorch's do. The in-place ops (``zero_``, ``copy_``,
  ``resize_as_``) reassign the tensor's member attributes; the old arrays are not
  written, so other tensors sharing them are unaffected.
- Index dtypes are kept; ``cat`` of inputs with different index dtypes gives int64
  (never narrowed). A size or nnz that does not fit the index dtype raises
  ``InvariantError`` (1.3).

The kernels are in :mod:`sparsetensor._lib._select`.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .. import _layout as L
from .._config import num_threads
from .._convert import _as_parts, _build, _checked, _same_nnz
from .._dtypes import VALUE_DTYPES, check_fits, raw_view
from .._lib import _select as _kernels
from .._meta import normalize_dim, values_contiguous
from .._tensor import COOTensor, CompressedTensor, SparseTensor
from .._validate import check_coo_indices, raise_coo_error

__all__ = ["zero_", "transpose", "narrow", "select", "index_select", "cat", "stack", "nonzero", "copy_",
           "resize_as_", "sparse_mask"]


# -- helpers ------------------------------------------------------------------------------------
def _require_sparse(t, op: str, name: str = "t") -> None:
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{op} expects a sparse tensor for {name}, got {type(t).__name__}")


def _kind(t, d: int) -> str:
    """'batch', 'sparse' or 'dense': what dim ``d`` of ``t`` is."""
    if isinstance(t, COOTensor):
        return "sparse" if d < t.sparse_dim else "dense"
    m = t.batch_dim
    return "batch" if d < m else ("sparse" if d < m + 2 else "dense")


def _values_axis(t, d: int) -> int:
    """The axis of ``t.values()`` that holds dense dim ``d`` (values dims align at the end)."""
    return t.values().ndim - (t.ndim - d)


def _take_axis(a: np.ndarray, axis: int, key) -> np.ndarray:
    """``a`` indexed by ``key`` (a slice or an int) along ``axis``."""
    return a[(slice(None),) * axis + (key,)]


def _desc(t) -> str:
    return f"{t.layout.name} tensor of shape {t.shape}"


def _compressed(t: CompressedTensor, c, p, v, shape, canonical=None) -> CompressedTensor:
    """A compressed tensor of ``t``'s layout from members (made contiguous, 3.5-3.7)."""
    dense_dim = v.ndim - c.ndim - (2 if t.layout.blocked else 0)
    v = _contiguous_values(v, t.layout, dense_dim)
    return CompressedTensor(np.ascontiguousarray(c), np.ascontiguousarray(p), v, tuple(shape), t.layout,
                            t.is_coalesced() if canonical is None else canonical)


def _contiguous_values(v: np.ndarray, layout, dense_dim: int) -> np.ndarray:
    """``v``, or a contiguous copy when it breaks invariant 3.7."""
    return v if values_contiguous(v, dense_dim, layout.blocked) else np.ascontiguousarray(v)


def _is_nondecreasing(a: np.ndarray) -> bool:
    return bool(a.size < 2 or (a[1:] >= a[:-1]).all())


def _is_increasing(a: np.ndarray) -> bool:
    return bool(a.size < 2 or (a[1:] > a[:-1]).all())


def _as_index(index, size: int, op: str) -> np.ndarray:
    """A 1-d int64 array of coordinates in [0, size) (PyTorch: int32/int64, no negatives)."""
    from_list = not hasattr(index, "dtype")
    a = np.asarray(index)
    if from_list and (a.size == 0 or a.dtype.kind in "iu"):
        a = a.astype(np.int64)
    if a.dtype not in (np.int32, np.int64):
        raise TypeError(f"{op}: index must have dtype int32 or int64, got {a.dtype}")
    if a.ndim > 1:
        raise ValueError(f"{op}: index must be 0-d or 1-d, got shape {a.shape}")
    a = np.ascontiguousarray(a.reshape(-1), dtype=np.int64)
    if a.size and (a.min() < 0 or a.max() >= size):
        bad = a[(a < 0) | (a >= size)][0]
        raise IndexError(f"{op}: index {bad} out of range for a dim of size {size}")
    return a


def _parts(t: CompressedTensor, threads):
    """``t`` (scanned or repaired when unchecked) in the kernels' canonical form."""
    return _as_parts(_checked(t, threads))


def _value_rows(values: np.ndarray, n: int) -> np.ndarray:
    """COO values as a raw ``(n, E)`` view."""
    v = np.ascontiguousarray(values).reshape(n, math.prod(values.shape[1:]))
    return raw_view(v)


# -- zero_ ------------------------------------------------------------------------------------------
def zero_(t):
    """Drop every specified element, in place: nnz becomes 0, shape, layout and dtypes stay.

    In place means that ``t``'s member attributes are replaced by new, empty arrays; the
    old arrays are not written (tensors sharing them are unaffected). A COO result is
    coalesced (as in PyTorch).

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops.shape import zero_
    >>> t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [5.0, 6.0], size=(2, 2))
    >>> zero_(t) is t, t.nnz, t.crow_indices()
    (True, 0, array([0, 0, 0]))
    """
    _require_sparse(t, "zero_")
    dt = t.index_dtype
    if isinstance(t, COOTensor):
        t._indices = np.empty((t.sparse_dim, 0), dtype=dt)
        t._values = np.empty((0,) + t.shape[t.sparse_dim:], dtype=t.dtype)
        t._coalesced = True
        return t
    m = t.batch_dim
    batch = t.shape[:m]
    t._compressed = np.zeros(batch + (t.compressed_indices().shape[-1],), dtype=dt)
    t._plain = np.empty(batch + (0,), dtype=dt)
    t._values = np.empty(batch + (0,) + t.values().shape[m + 1:], dtype=t.dtype)
    t._canonical = True
    return t


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
    if isinstance(t, COOTensor):
        if k0 == "sparse":
            idx = t.indices().copy()
            idx[[d0, d1]] = idx[[d1, d0]]
            return COOTensor(idx, t.values(), tuple(shape), False)
        a0, a1 = _values_axis(t, d0), _values_axis(t, d1)
        return COOTensor(t.indices(), t.values().swapaxes(a0, a1), tuple(shape), t.is_coalesced(), t._checked)
    if k0 == "sparse":
        return t._matrix_transpose()
    if k0 == "batch":
        c, p, v = (np.ascontiguousarray(a.swapaxes(d0, d1)) for a in (t.compressed_indices(), t.plain_indices(),
                                                                       t.values()))
        return _compressed(t, c, p, v, shape)
    v = np.ascontiguousarray(t.values().swapaxes(_values_axis(t, d0), _values_axis(t, d1)))
    return _compressed(t, t.compressed_indices(), t.plain_indices(), v, shape)


# -- compressed selection along a sparse dim -------------------------------------------------------
def _sparse_axis(t: CompressedTensor, d: int):
    """For sparse dim ``d``: (is it the compressed dim, its block extent)."""
    local = d - t.batch_dim
    return (local == 0) == t.layout.compressed_rows, t.blocksize[local]


def _slot_outputs(parts, counts: np.ndarray, what: str):
    """Empty (compressed, plain, values) of a result whose slot i of batch b holds ``counts[b, i]``
    entries (the compressed index already filled in); every batch must have the same nnz."""
    c, v = parts.compressed, parts.values
    B = c.shape[0]
    per_batch = counts.sum(axis=1, dtype=np.int64)
    _same_nnz(per_batch, parts.batch, f"{what} of a batched {parts.layout.name} tensor: every batch of the result "
              "must have the same nnz")
    nnz = int(per_batch[0]) if B else 0
    check_fits(c.dtype, parts.layout.name, nnz=nnz)
    out_c = np.zeros((B, counts.shape[1] + 1), dtype=c.dtype)
    np.cumsum(counts, axis=1, dtype=c.dtype, out=out_c[:, 1:])
    return out_c, np.empty((B, nnz), dtype=c.dtype), np.empty((B, nnz, v.shape[2]), dtype=v.dtype)


def _gather_compressed(parts, rows: np.ndarray, size: int, what: str, threads):
    """Compressed slices ``rows`` (block units) of every batch, in that order (repeats allowed)."""
    c, p, v = parts.compressed, parts.plain, parts.values
    B, K = c.shape[0], rows.shape[0]
    lengths = np.diff(c, axis=1)[:, rows] if B else np.zeros((0, K), np.int64)
    out_c, out_p, out_v = _slot_outputs(parts, lengths, what)
    _kernels.gather_rows(c, p, v, rows, out_c, out_p, out_v,
                         num_threads(threads, out_p.shape[1] * max(v.shape[2], 1) + B * K))
    return parts._replace(compressed=out_c, plain=out_p, values=out_v, sparse=_resized(parts, True, size))


def _remap_plain(parts, index: np.ndarray, size: int, what: str, threads):
    """Every slice's entries mapped through ``index`` (new plain j gets old plain index[j])."""
    c, p, v = parts.compressed, parts.plain, parts.values
    B, n = c.shape[0], c.shape[1] - 1
    check_fits(c.dtype, parts.layout.name, **{"ncols" if parts.layout.compressed_rows else "nrows": size})
    first, targets = _kernels.build_map(index, parts.plain_size)
    nt = num_threads(threads, p.size * max(v.shape[2], 1) + c.size)
    counts = np.empty((B, n), dtype=np.int64)
    _kernels.plain_count(c, p, first, counts, nt)
    out_c, out_p, out_v = _slot_outputs(parts, counts, what)
    max_row = int(counts.max()) if counts.size else 0
    _kernels.plain_fill(c, p, v, first, targets, out_c, out_p, out_v, not _is_nondecreasing(index), max_row, nt)
    return parts._replace(compressed=out_c, plain=out_p, values=out_v, sparse=_resized(parts, False, size))


def _narrow_plain(parts, start: int, length: int, threads):
    """Plain indices in [start, start + length) (block units) of every slice: a binary search per
    slice (the slices are sorted) and one segment copy."""
    c, p, v = parts.compressed, parts.plain, parts.values
    B, n = c.shape[0], c.shape[1] - 1
    starts = np.empty((B, n), dtype=np.int64)
    counts = np.empty((B, n), dtype=np.int64)
    _kernels.plain_range(c, p, start, start + length, starts, counts, num_threads(threads, c.size * 16))
    out_c, out_p, out_v = _slot_outputs(parts, counts, "narrow")
    _kernels.copy_segments(p, v, starts, out_c, start, out_p, out_v, num_threads(threads, out_v.size + c.size))
    return parts._replace(compressed=out_c, plain=out_p, values=out_v, sparse=_resized(parts, False, length))


def _resized(parts, compressed_dim: bool, size_blocks: int) -> tuple:
    """parts.sparse with the compressed (or plain) dim resized to ``size_blocks`` blocks."""
    rows, cols = parts.sparse
    rb, cb = parts.blocksize
    if compressed_dim == parts.layout.compressed_rows:
        return (size_blocks * rb, cols)
    return (rows, size_blocks * cb)


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
    if kind == "dense":
        v = np.ascontiguousarray(_take_axis(t.values(), _values_axis(t, d), slice(start, start + length)))
        if isinstance(t, COOTensor):
            return COOTensor(t.indices(), v, shape, t.is_coalesced(), t._checked)
        return _compressed(t, t.compressed_indices(), t.plain_indices(), v, shape)
    if isinstance(t, COOTensor):
        idx = t.indices()
        coord = idx[d]
        keep = (coord >= start) & (coord < start + length)
        out = np.compress(keep, idx, axis=1)
        out[d] -= start
        return COOTensor(out, t.values()[keep], shape, t.is_coalesced())
    if kind == "batch":
        key = slice(start, start + length)
        return _compressed(t, *(_take_axis(a, d, key) for a in (t.compressed_indices(), t.plain_indices(),
                                                                t.values())), shape)
    is_comp, bs = _sparse_axis(t, d)
    if start % bs or length % bs:
        raise ValueError(f"narrow of a {t.layout.name} tensor with blocksize {t.blocksize} along dim {d}: start "
                         f"({start}) and length ({length}) must be multiples of {bs}")
    s, n = start // bs, length // bs
    parts = _parts(t, threads)
    if is_comp:
        rows = np.arange(s, s + n, dtype=np.int64)
        return _build(_gather_compressed(parts, rows, n, "narrow", threads))
    return _build(_narrow_plain(parts, s, n, threads))


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
    if kind == "dense":
        v = np.ascontiguousarray(np.take(t.values(), i, axis=_values_axis(t, d)))
        if isinstance(t, COOTensor):
            return COOTensor(t.indices(), v, shape, t.is_coalesced(), t._checked)
        return _compressed(t, t.compressed_indices(), t.plain_indices(), v, shape)
    if kind == "batch":
        return _compressed(t, *(_take_axis(a, d, i) for a in (t.compressed_indices(), t.plain_indices(),
                                                            t.values())), shape)
    if isinstance(t, CompressedTensor):
        if t.batch_dim:  # the batches of a narrowed tensor could differ in nnz: go through coo
            return select(t.to_sparse(L.sparse_coo, threads=threads), d, i, threads=threads)
        _, bs = _sparse_axis(t, d)
        lo = i // bs * bs
        coo = narrow(t, d, lo, bs, threads=threads).to_sparse(L.sparse_coo, threads=threads)
        return select(coo, d, i - lo, threads=threads)
    idx = t.indices()
    keep = idx[d] == i
    values = t.values()[keep]
    if t.sparse_dim == 1:
        return _sum_rows(values) if values.shape[0] != 1 else values[0].copy()
    return COOTensor(np.compress(keep, np.delete(idx, d, axis=0), axis=1), values, shape, t.is_coalesced())


# -- index_select -----------------------------------------------------------------------------------
def index_select(t, dim: int, index, *, threads: int | None = None):
    """The entries at ``index`` (int32/int64, repeats allowed, no negatives) along ``dim``.

    - coo, a sparse dim: every entry once per position of its coordinate in ``index``
      (a counting pass over ``index`` and one parallel pass over the entries). The result
      is coalesced when the input is and ``index`` is strictly increasing.
    - a dense dim: the values taken; a batch dim of a compressed tensor: every member taken.
    - csr/csc (PyTorch has no index_select for them): along the compressed dim whole
      rows (columns) are gathered; along the plain dim each row is filtered and
      remapped (repeats give several entries), then sorted. For bsr/bsc a sparse dim
      needs blocksize 1 along it (``NotImplementedError`` otherwise: convert first).
      Batches ending up with different nnz: ``ValueError``.

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
    idx = _as_index(index, t.shape[d], "index_select")
    K = idx.shape[0]
    shape = t.shape[:d] + (K,) + t.shape[d + 1:]
    kind = _kind(t, d)
    if kind == "dense":
        v = np.take(t.values(), idx, axis=_values_axis(t, d))
        if isinstance(t, COOTensor):
            return COOTensor(t.indices(), v, shape, t.is_coalesced(), t._checked)
        return _compressed(t, t.compressed_indices(), t.plain_indices(), v, shape)
    if kind == "batch":
        return _compressed(t, *(np.take(a, idx, axis=d) for a in (t.compressed_indices(), t.plain_indices(),
                                                                 t.values())), shape)
    if isinstance(t, COOTensor):
        return _coo_index_select(t, d, idx, shape, threads)
    is_comp, bs = _sparse_axis(t, d)
    if bs != 1:
        raise NotImplementedError(f"index_select along sparse dim {d} of a {t.layout.name} tensor with blocksize "
                                  f"{t.blocksize}: needs blocksize 1 along that dim; convert to "
                                  f"{'csr' if t.layout.compressed_rows else 'csc'} or coo first")
    parts = _parts(t, threads)
    if is_comp:
        return _build(_gather_compressed(parts, idx, K, "index_select", threads))
    return _build(_remap_plain(parts, idx, K, "index_select", threads))


def _coo_index_select(t: COOTensor, d: int, idx: np.ndarray, shape: tuple, threads) -> COOTensor:
    dt = t.index_dtype
    check_fits(dt, "coo", **{f"size[{d}]": shape[d]})
    indices = np.ascontiguousarray(t.indices())
    nnz = indices.shape[1]
    values = t.values()
    raw = _value_rows(values, nnz)
    first, targets = _kernels.build_map(idx, t.shape[d])
    found, oi, ov = _kernels.coo_index_select(indices, raw, d, first, targets,
                                              num_threads(threads, nnz * (indices.shape[0] + raw.shape[1])))
    if found is not None:
        raise_coo_error(found, t.shape)
    out_values = ov.view(values.dtype).reshape((oi.shape[1],) + values.shape[1:])
    return COOTensor(oi, out_values, shape, t.is_coalesced() and _is_increasing(idx))


# -- cat and stack ------------------------------------------------------------------------------------
def _common(tensors: list, op: str):
    """The inputs in the first one's layout (and blocksize), value dtype and index dtype."""
    for k, t in enumerate(tensors):
        if not isinstance(t, SparseTensor):
            raise TypeError(f"{op}: tensors[{k}] is a {type(t).__name__}, not a sparse tensor (convert dense "
                            "arrays with st.from_dense first)")
    first = tensors[0]
    layout, bs = first.layout, first.blocksize if first.layout.blocked else None
    out = []
    for k, t in enumerate(tensors):
        if t.layout is not layout or (bs is not None and t.blocksize != bs):
            if t.dense_dim != first.dense_dim:
                raise ValueError(f"{op}: tensors[0] ({_desc(first)}, dense_dim={first.dense_dim}) and tensors[{k}] "
                                 f"({_desc(t)}, dense_dim={t.dense_dim}) have different dense dims")
            t = t.to_sparse(layout, blocksize=bs)
        out.append(t)
    dtype = np.result_type(*(t.dtype for t in out))
    if dtype not in VALUE_DTYPES:  # pragma: no cover - every pair of supported dtypes promotes to one
        raise TypeError(f"{op}: the inputs' dtypes promote to the unsupported {dtype}")
    idx_dts = {t.index_dtype for t in out}
    idx_dt = next(iter(idx_dts)) if len(idx_dts) == 1 else np.dtype(np.int64)
    return [t.astype(dtype, copy=False)._with_index_dtype(idx_dt) for t in out]


def cat(tensors, dim: int = 0, *, threads: int | None = None):
    """Concatenate sparse tensors along ``dim`` (a sparse, batch or dense dim).

    Inputs of another layout (or blocksize) are converted to the first one's layout
    (and blocksize) first; values are promoted with ``np.result_type``; index dtypes
    that differ give int64. The shapes must agree except along ``dim``, and the inputs
    must split their dims alike (same sparse/batch/dense dims), else ``ValueError``.

    - coo: along a sparse dim the indices are offset and concatenated (coalesced when
      every input is and ``dim`` is 0); along a dense dim the values are concatenated,
      each input's entries zero-padded (not coalesced unless the index arrays are equal).
    - csr/csc/bsr/bsc (PyTorch cannot cat them): along the compressed dim the compressed
      indices are offset and the entries of each batch concatenated; along the plain
      dim every row (column) gets the inputs' slices in turn (a kernel); along a batch
      dim the members are concatenated, which needs the same nnz in every input
      (``ValueError`` naming them); along a dense dim the values, when the inputs share
      their indices, else the union of the patterns (through coo; every batch of it
      must have the same nnz).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import cat
    >>> a = st.from_dense(np.array([[1, 0], [0, 2]]), "csr")
    >>> cat([a, a], 1).to_dense()
    array([[1, 0, 1, 0],
           [0, 2, 0, 2]])
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat expects a non-empty sequence of sparse tensors")
    tensors = _common(tensors, "cat")
    first = tensors[0]
    d = normalize_dim(dim, first.ndim, "cat")
    for k, t in enumerate(tensors[1:], 1):
        if t.ndim != first.ndim or any(a != b for j, (a, b) in enumerate(zip(t.shape, first.shape)) if j != d):
            raise ValueError(f"cat: tensors[0] has shape {first.shape} and tensors[{k}] has shape {t.shape}; they "
                             f"must agree except along dim {d}")
        if (t.sparse_dim, t.dense_dim, t.batch_dim) != (first.sparse_dim, first.dense_dim, first.batch_dim):
            raise ValueError(f"cat: tensors[0] ({_desc(first)}) has batch_dim={first.batch_dim}, sparse_dim="
                             f"{first.sparse_dim}, dense_dim={first.dense_dim} and tensors[{k}] ({_desc(t)}) "
                             f"batch_dim={t.batch_dim}, sparse_dim={t.sparse_dim}, dense_dim={t.dense_dim}")
    total = sum(t.shape[d] for t in tensors)
    shape = first.shape[:d] + (total,) + first.shape[d + 1:]
    kind = _kind(first, d)
    if isinstance(first, COOTensor):
        return _coo_cat(tensors, d, kind, shape)
    return _compressed_cat(tensors, d, kind, shape, "cat", threads)


def _same_arrays(arrays) -> bool:
    a0 = arrays[0]
    return all(a is a0 or (a.shape == a0.shape and np.array_equal(a, a0)) for a in arrays[1:])


def _coo_cat(tensors: list, d: int, kind: str, shape: tuple) -> COOTensor:
    first = tensors[0]
    dt = first.index_dtype
    if kind == "sparse":
        check_fits(dt, "coo", **{f"size[{d}]": shape[d]})
        parts, offset = [], 0
        for t in tensors:
            idx = t.indices().copy()
            idx[d] += offset
            offset += t.shape[d]
            parts.append(idx)
        coalesced = all(t.is_coalesced() for t in tensors) and (d == 0 or len(tensors) == 1)
        return COOTensor(np.concatenate(parts, axis=1), np.concatenate([t.values() for t in tensors]), shape,
                         coalesced)
    ax = _values_axis(first, d)
    if _same_arrays([t.indices() for t in tensors]):
        return COOTensor(first.indices(), np.concatenate([t.values() for t in tensors], axis=ax), shape,
                         first.is_coalesced())
    N = sum(t.nnz for t in tensors)
    values = np.zeros((N,) + shape[first.sparse_dim:], dtype=first.dtype)
    row, col = 0, 0
    for t in tensors:
        key = (slice(row, row + t.nnz),) + (slice(None),) * (ax - 1) + (slice(col, col + t.shape[d]),)
        values[key] = t.values()
        row, col = row + t.nnz, col + t.shape[d]
    return COOTensor(np.concatenate([t.indices() for t in tensors], axis=1), values, shape, len(tensors) == 1)


def _compressed_cat(tensors: list, d: int, kind: str, shape: tuple, op: str, threads) -> CompressedTensor:
    first = tensors[0]
    if kind == "batch":
        nnz = [t.nnz for t in tensors]
        if len(set(nnz)) > 1:
            raise ValueError(f"{op} of {first.layout.name} tensors along batch dim {d} needs the same nnz in every "
                             f"input (every batch has one nnz); got nnz {', '.join(map(str, nnz))}")
        members = [np.concatenate([_members(t)[j] for t in tensors], axis=d) for j in range(3)]
        return _compressed(first, *members, shape, all(t.is_coalesced() for t in tensors))
    if kind == "dense":
        ax = _values_axis(first, d)
        if _same_arrays([t.compressed_indices() for t in tensors]) and _same_arrays(
                [t.plain_indices() for t in tensors]):
            v = np.concatenate([t.values() for t in tensors], axis=ax)
            return _compressed(first, first.compressed_indices(), first.plain_indices(), v, shape)
        coo = _coo_cat([t.to_sparse(L.sparse_coo, threads=threads) for t in tensors], d, kind, shape)
        bs = first.blocksize if first.layout.blocked else None
        return coo.coalesce(threads=threads).to_sparse(first.layout, blocksize=bs, threads=threads)
    parts = [_parts(t, threads) for t in tensors]
    is_comp, bs = _sparse_axis(first, d)
    p0 = parts[0]
    c_dt = p0.compressed.dtype
    B = p0.compressed.shape[0]
    sizes = [t.shape[d] // bs for t in tensors]
    if is_comp:
        nnz = [q.plain.shape[1] for q in parts]
        total = sum(nnz)
        check_fits(c_dt, first.layout.name, nnz=total, **{f"size[{d}]": shape[d]})
        pieces, off = [], 0
        for q, k in zip(parts, nnz):
            pieces.append(q.compressed[:, :-1] + c_dt.type(off))
            off += k
        pieces.append(np.full((B, 1), total, dtype=c_dt))
        out_c = np.concatenate(pieces, axis=1).astype(c_dt, copy=False)
        out = p0._replace(compressed=out_c, plain=np.concatenate([q.plain for q in parts], axis=1),
                          values=np.concatenate([q.values for q in parts], axis=1),
                          sparse=_resized(p0, True, sum(sizes)))
        return _build(out)
    out_c = np.zeros_like(p0.compressed, dtype=np.int64)
    for q in parts:
        out_c += q.compressed
    total = int(out_c[0, -1]) if B else 0
    check_fits(c_dt, first.layout.name, nnz=total, **{f"size[{d}]": shape[d]})
    cursor = out_c[:, :-1].copy()
    out_p = np.empty((B, total), dtype=c_dt)
    out_v = np.empty((B, total, p0.values.shape[2]), dtype=p0.values.dtype)
    nt = num_threads(threads, out_v.size + out_p.size)
    offset = 0
    for q, s in zip(parts, sizes):
        _kernels.cat_rows(q.compressed, q.plain, q.values, offset, cursor, out_p, out_v, nt)
        offset += s
    out = p0._replace(compressed=out_c.astype(c_dt), plain=out_p, values=out_v, sparse=_resized(p0, False, offset))
    return _build(out)


def _members(t: CompressedTensor):
    return t.compressed_indices(), t.plain_indices(), t.values()


def _unsqueeze(t, d: int):
    """``t`` with a new dim of size 1 at ``d`` (0 <= d <= t.ndim)."""
    shape = t.shape[:d] + (1,) + t.shape[d:]
    if isinstance(t, COOTensor):
        S = t.sparse_dim
        if d <= S:
            idx = np.insert(t.indices(), d, 0, axis=0)
            return COOTensor(idx, t.values(), shape, t.is_coalesced())
        return COOTensor(t.indices(), np.expand_dims(t.values(), d - S + 1), shape, t.is_coalesced(), t._checked)
    m = t.batch_dim
    if d <= m:
        members = (np.expand_dims(a, d) for a in _members(t))
        return CompressedTensor(*members, shape, t.layout, t.is_coalesced())
    if d >= m + 2:
        v = np.expand_dims(t.values(), t.values().ndim - (t.ndim - d))
        return CompressedTensor(t.compressed_indices(), t.plain_indices(), v, shape, t.layout, t.is_coalesced())
    raise NotImplementedError(f"stack of {t.layout.name} tensors at dim {d}: a new dim between the two sparse dims "
                              "would be a third sparse dim; convert to coo first")


def stack(tensors, dim: int = 0, *, threads: int | None = None):
    """Stack sparse tensors of one shape along a new dim ``dim`` (``0 <= dim <= ndim``, or negative).

    A new dim of size 1 is inserted in every input, then they are concatenated with
    :func:`cat` (same conversions and promotions). For coo the new dim is sparse when it
    comes at or before the last sparse dim, else dense. For csr/csc/bsr/bsc a new dim
    before the sparse dims is a batch dim (every input needs the same nnz), after them a
    dense dim; between them it is ``NotImplementedError``.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import stack
    >>> a = st.from_dense(np.array([[1, 0], [0, 2]]), "csr")
    >>> s = stack([a, a], 0)
    >>> s.shape, s.batch_dim
    ((2, 2, 2), 1)
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack expects a non-empty sequence of sparse tensors")
    tensors = _common(tensors, "stack")
    first = tensors[0]
    for k, t in enumerate(tensors[1:], 1):
        if t.shape != first.shape:
            raise ValueError(f"stack: tensors[0] has shape {first.shape} and tensors[{k}] has shape {t.shape}; "
                             "they must be equal")
    d = normalize_dim(dim, first.ndim + 1, "stack")
    return cat([_unsqueeze(t, d) for t in tensors], d, threads=threads)


# -- nonzero ------------------------------------------------------------------------------------------
def nonzero(t, *, threads: int | None = None) -> np.ndarray:
    """The coordinates of the nonzero elements: ``np.argwhere(t.to_dense())`` without densifying.

    An ``(n, ndim)`` int64 array in row-major order, like ``torch.nonzero(t.to_dense())``
    (PyTorch has no sparse nonzero). Duplicates (unchecked input) are summed first;
    explicit zeros are not listed; NaN counts as nonzero.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import nonzero
    >>> nonzero(st.from_dense(np.array([[0, 1], [2, 0]]), "csc"))
    array([[0, 1],
           [1, 0]])
    """
    _require_sparse(t, "nonzero")
    coo = t.to_sparse(L.sparse_coo, threads=threads) if isinstance(t, CompressedTensor) else t.coalesce(threads=threads)
    S, N = coo.sparse_dim, coo.nnz
    dense = coo.shape[S:]
    values = coo.values().reshape(N, math.prod(dense))
    entry, item = np.nonzero(values != 0)
    out = np.empty((entry.shape[0], coo.ndim), dtype=np.int64)
    out[:, :S] = coo.indices()[:, entry].T
    if dense:
        out[:, S:] = np.stack(np.unravel_index(item, dense), axis=1)
    return out


# -- copy_ and resize_as_ ---------------------------------------------------------------------------
def _own(a: np.ndarray, others) -> np.ndarray:
    """``a``, or a copy of it when it may share memory with one of ``others``."""
    return a.copy() if any(np.may_share_memory(a, o) for o in others) else a


def copy_(dst, src, *, threads: int | None = None):
    """Copy ``src`` into ``dst`` in place: ``dst`` takes ``src``'s elements in its own layout,
    blocksize, value dtype and index dtype.

    ``src`` is a sparse tensor of any layout (converted to ``dst``'s) or an array (converted
    with :func:`sparsetensor.from_dense` into ``dst``'s dims); it must have ``dst``'s shape
    and dense dims (``ValueError`` naming both). In place means that ``dst``'s member
    attributes are replaced by new arrays; the old arrays are not written. ``dst`` never
    shares memory with ``src`` afterwards.

    PyTorch differs: its coo ``copy_`` resizes ``dst`` to ``src``'s shape, and its compressed
    ``copy_`` needs the same layout and nnz (it refuses dense sources).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import copy_
    >>> dst = st.from_dense(np.zeros((2, 2), np.float32), "csr")
    >>> copy_(dst, st.from_dense(np.array([[0, 1], [2, 0]]), "coo")).values()
    array([1., 2.], dtype=float32)
    """
    _require_sparse(dst, "copy_", "dst")
    if isinstance(src, SparseTensor):
        if src.shape != dst.shape or src.dense_dim != dst.dense_dim:
            raise ValueError(f"copy_: dst is a {_desc(dst)} with dense_dim={dst.dense_dim} but src is a {_desc(src)} "
                             f"with dense_dim={src.dense_dim}; shapes and dense dims must agree")
        new = src.to_sparse(dst.layout, blocksize=dst.blocksize if dst.layout.blocked else None, threads=threads)
        sources = [a for _, a in src._members()]
    else:
        from .._dense import from_dense

        a = np.asarray(src)
        if a.shape != dst.shape:
            raise ValueError(f"copy_: dst is a {_desc(dst)} but src is an array of shape {a.shape}")
        new = from_dense(a.astype(dst.dtype, copy=False), dst.layout,
                         blocksize=dst.blocksize if dst.layout.blocked else None, dense_dim=dst.dense_dim,
                         batch_dim=dst.batch_dim, index_dtype=dst.index_dtype, threads=threads)
        sources = [a]
    new = new.astype(dst.dtype, copy=False)._with_index_dtype(dst.index_dtype)
    if isinstance(dst, COOTensor):
        dst._indices = _own(new.indices(), sources)
        dst._values = _own(new.values(), sources)
        dst._coalesced = new.is_coalesced()
        dst._checked = new._checked
    else:
        dst._compressed = _own(new.compressed_indices(), sources)
        dst._plain = _own(new.plain_indices(), sources)
        dst._values = _own(new.values(), sources)
        dst._canonical = new.is_coalesced()
    return dst


def _grown_values(values: np.ndarray, lead: int, old: tuple, new: tuple) -> np.ndarray:
    """``values`` with its last dims grown from ``old`` to ``new`` sizes, zero-filled."""
    if old == new:
        return values
    out = np.zeros(values.shape[:lead] + tuple(new), dtype=values.dtype)
    out[(slice(None),) * lead + tuple(slice(0, s) for s in old)] = values
    return out


def resize_as_(t, other):
    """Resize ``t`` in place to ``other``'s shape and dims split (PyTorch's ``sparse_resize_``).

    ``other`` is any sparse tensor; only its shape and ``dense_dim`` are used (for coo
    ``sparse_dim = other.ndim - other.dense_dim``; for compressed ``t`` the batch dims are
    what is left). ``t`` keeps its layout, blocksize and dtypes.

    - ``t.nnz == 0``: any shape and split are accepted (sizes along the sparse dims of
      bsr/bsc must be multiples of the blocksize).
    - ``t.nnz > 0``: the split (and the batch sizes of a compressed ``t``) must stay; no
      size may shrink; sparse sizes may grow (entries keep their coordinates), dense
      sizes may grow (new values are zero; PyTorch leaves them uninitialised).

    Errors are ``ValueError``. In place means that ``t``'s attributes are replaced; the old
    arrays are not written. (PyTorch's compressed ``resize_`` can break invariants 3.8
    and 5.6 when rows shrink or blocks are involved; here shrinking is refused.)

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import resize_as_
    >>> t = st.from_dense(np.array([[1, 0], [0, 2]]), "csr")
    >>> resize_as_(t, st.from_dense(np.zeros((3, 4)), "coo")).shape, t.crow_indices()
    ((3, 4), array([0, 1, 2, 2]))
    """
    _require_sparse(t, "resize_as_")
    _require_sparse(other, "resize_as_", "other")
    shape, n = tuple(other.shape), other.dense_dim
    dt = t.index_dtype
    if isinstance(t, COOTensor):
        S = len(shape) - n
        if t.nnz and (S, n) != (t.sparse_dim, t.dense_dim):
            raise ValueError(f"resize_as_: changing the split of a non-empty coo tensor (sparse_dim {t.sparse_dim} -> "
                             f"{S}, dense_dim {t.dense_dim} -> {n}) is not supported; t is a {_desc(t)}, other a "
                             f"{_desc(other)}")
        _no_shrink(t, shape, other)
        check_fits(dt, "coo", **{f"size[{d}]": shape[d] for d in range(S)})
        if t.nnz == 0:
            t._indices = np.empty((S, 0), dtype=dt)
            t._values = np.empty((0,) + shape[S:], dtype=t.dtype)
            t._coalesced = True
        else:
            t._values = _grown_values(t.values(), 1, t.shape[S:], shape[S:])
        t._shape = shape
        return t
    m = len(shape) - 2 - n
    if m < 0:
        raise ValueError(f"resize_as_: a {t.layout.name} tensor needs 2 sparse dims; other is a {_desc(other)} with "
                         f"dense_dim={n}")
    if t.nnz and ((m, n) != (t.batch_dim, t.dense_dim) or shape[:m] != t.shape[:m]):
        raise ValueError(f"resize_as_: changing the batch or dense dims of a non-empty {t.layout.name} tensor is not "
                         f"supported; t is a {_desc(t)} with batch_dim={t.batch_dim}, dense_dim={t.dense_dim}, other a "
                         f"{_desc(other)} with dense_dim={n}")
    bs = t.blocksize
    rows, cols = shape[m:m + 2]
    if rows % bs[0] or cols % bs[1]:
        raise ValueError(f"resize_as_: the sparse sizes ({rows}, {cols}) of other ({_desc(other)}) must be multiples "
                         f"of t's blocksize {bs}")
    check_fits(dt, t.layout.name, nrows=rows, ncols=cols)
    nc = (rows // bs[0] if t.layout.compressed_rows else cols // bs[1]) + 1
    block = bs if t.layout.blocked else ()
    if t.nnz == 0:
        t._compressed = np.zeros(shape[:m] + (nc,), dtype=dt)
        t._plain = np.empty(shape[:m] + (0,), dtype=dt)
        t._values = np.empty(shape[:m] + (0,) + block + shape[m + 2:], dtype=t.dtype)
        t._canonical = True
        t._shape = shape
        return t
    _no_shrink(t, shape, other)
    c = t.compressed_indices()
    if nc != c.shape[-1]:
        tail = np.repeat(c[..., -1:], nc - c.shape[-1], axis=-1)
        t._compressed = np.concatenate([c, tail], axis=-1)
    v = t.values()
    lead = m + 1 + len(block)
    t._values = _contiguous_values(_grown_values(v, lead, v.shape[lead:], shape[m + 2:]), t.layout, t.dense_dim)
    t._shape = shape
    return t


def _no_shrink(t, shape: tuple, other) -> None:
    if not t.nnz:
        return
    small = [d for d in range(len(shape)) if shape[d] < t.shape[d]]
    if small:
        raise ValueError(f"resize_as_: shrinking dim {small[0]} (from {t.shape[small[0]]} to {shape[small[0]]}) of a "
                         f"non-empty {t.layout.name} tensor is not supported; t is a {_desc(t)}, other a "
                         f"{_desc(other)}")


# -- sparse_mask -------------------------------------------------------------------------------------
def _element_coords(mask, threads) -> tuple:
    """(checked mask, coordinates (S, N) of every element of ``mask``'s values in order).

    COO coordinates are the mask's own indices, not yet bounds-checked (see :func:`_linear`)."""
    if isinstance(mask, COOTensor):
        return mask, mask.indices()
    mask = _checked(mask, threads)
    m = mask.batch_dim
    batch = mask.shape[:m]
    B = math.prod(batch)
    c = mask.compressed_indices().reshape(B, mask.compressed_indices().shape[-1])
    n, nnz = c.shape[1] - 1, mask.nnz
    comp = np.repeat(np.tile(np.arange(n, dtype=np.int64), B), np.diff(c, axis=1).reshape(-1))
    plain = mask.plain_indices().reshape(-1).astype(np.int64)
    brow, bcol = (comp, plain) if mask.layout.compressed_rows else (plain, comp)
    rb, cb = mask.blocksize
    row = (brow[:, None, None] * rb + np.arange(rb)[None, :, None]).repeat(cb, axis=2).reshape(-1)
    col = (bcol[:, None, None] * cb + np.arange(cb)[None, None, :]).repeat(rb, axis=1).reshape(-1)
    bat = np.repeat(np.arange(B, dtype=np.int64), nnz * rb * cb)
    coords = np.empty((m + 2, row.shape[0]), dtype=np.int64)
    if m:
        coords[:m] = np.unravel_index(bat, batch)
    coords[m], coords[m + 1] = row, col
    return mask, coords


def _linear(coords: np.ndarray, sparse: tuple, mask, threads) -> np.ndarray:
    """Row-major linear positions of ``coords`` in ``sparse``; out-of-bounds mask indices raise
    InvariantError (C4/C5)."""
    try:
        return np.ravel_multi_index(coords, sparse)
    except ValueError:
        if isinstance(mask, COOTensor):
            check_coo_indices(mask.indices(), mask.shape, threads=threads)
        raise


def _lookup(t, coords: np.ndarray, mask, threads) -> np.ndarray:
    """The values of sparse ``t`` at element coordinates ``coords`` (zero where unspecified)."""
    coo = t.to_sparse(L.sparse_coo, threads=threads) if isinstance(t, CompressedTensor) else t.coalesce(threads=threads)
    S = coo.sparse_dim
    sparse = coo.shape[:S]
    out = np.zeros((coords.shape[1],) + coo.shape[S:], dtype=coo.dtype)
    if coords.shape[1] == 0:
        return out
    if coo.nnz == 0:
        _linear(coords, sparse, mask, threads)  # still check the mask's indices
        return out
    if math.prod(sparse) - 1 > np.iinfo(np.int64).max:
        raise NotImplementedError(f"sparse_mask of a sparse {_desc(t)}: the sparse sizes {sparse} are too large to "
                                  "linearise into int64 keys")
    keys = np.ravel_multi_index(coo.indices(), sparse)
    want = _linear(coords, sparse, mask, threads)
    pos = np.minimum(np.searchsorted(keys, want), keys.shape[0] - 1)
    found = keys[pos] == want
    out[found] = coo.values()[pos[found]]
    return out


def sparse_mask(t, mask, *, threads: int | None = None):
    """``t``'s values at ``mask``'s specified elements, in ``mask``'s layout and pattern
    (PyTorch's ``t.sparse_mask(mask)``).

    ``t`` is an array or a sparse tensor of any layout (values where ``t`` specifies
    none are zero; duplicates in unchecked input are summed); ``mask`` is a sparse tensor
    of ``t``'s shape (and, when ``t`` is sparse, its dense_dim), else ``ValueError`` naming
    both. The result has ``t``'s dtype and ``mask``'s index arrays (copied), blocks and
    coalesced flag; for blocked masks every item of a block is looked up. An uncoalesced
    mask with repeated elements gives each copy the value (so its ``to_dense()`` sums
    them, as in PyTorch).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import sparse_mask
    >>> mask = st.sparse_csr_tensor([0, 1, 2], [1, 0], [True, True], size=(2, 2))
    >>> sparse_mask(np.array([[1.0, 2.0], [3.0, 4.0]]), mask).values()
    array([2., 3.])
    """
    _require_sparse(mask, "sparse_mask", "mask")
    sparse_t = isinstance(t, SparseTensor)
    a = t if sparse_t else np.asarray(t)
    if a.shape != mask.shape or (sparse_t and a.dense_dim != mask.dense_dim):
        what = f"a {_desc(a)} with dense_dim={a.dense_dim}" if sparse_t else f"an array of shape {a.shape}"
        raise ValueError(f"sparse_mask: t is {what} but mask is a {_desc(mask)} with dense_dim={mask.dense_dim}; "
                         "shapes (and dense dims) must agree")
    if not sparse_t and a.dtype not in VALUE_DTYPES:
        raise TypeError(f"sparse_mask: unsupported value dtype {a.dtype}")
    mask, coords = _element_coords(mask, threads)
    if sparse_t:
        gathered = _lookup(a, coords, mask, threads)
    else:
        sparse = a.shape[:coords.shape[0]]
        rows = np.ascontiguousarray(a).reshape((math.prod(sparse),) + a.shape[coords.shape[0]:])
        gathered = np.take(rows, _linear(coords, sparse, mask, threads), axis=0)
    vshape = mask.values().shape
    values = np.ascontiguousarray(gathered).reshape(vshape)
    if isinstance(mask, COOTensor):
        return COOTensor(mask.indices().copy(), values, mask.shape, mask.is_coalesced())
    return CompressedTensor(mask.compressed_indices().copy(), mask.plain_indices().copy(), values, mask.shape,
                            mask.layout, canonical=True)
