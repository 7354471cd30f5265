"""Joining tensors: cat and stack, for every layout, along batch, sparse and dense dims (the
rules are :mod:`sparsetensor.ops.shape`'s).
"""

from __future__ import annotations

import numpy as np

from .._core import _layout as L
from .._backend import backend_for
from .._core._canonical import UnequalBatches, as_parts, build, ensure_valid, ensure_valid_export
from .._core._validate import raise_coo_error
from .._core._dtypes import VALUE_DTYPES, check_fits
from .._core._shape_checks import normalize_dim
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor
from ._common import describe
from ._shape_common import _compressed, _kind, _resized, _sparse_axis, _values_axis

__all__ = ["cat", "concatenate", "stack", "joined_layout"]


# -- cat and stack ------------------------------------------------------------------------------------
def _common(tensors: list, op: str):
    """The inputs in the first one's layout (and blocksize), value dtype and index dtype."""
    for k, t in enumerate(tensors):
        if not isinstance(t, SparseTensor):
            raise TypeError(f"{op}: tensors[{k}] is a {type(t).__name__}, not a sparse tensor (convert dense "
                            "arrays with st.from_dense first)")
    first = tensors[0]
    layout, bs = joined_layout(first, tensors)
    out = []
    for k, t in enumerate(tensors):
        if t.layout is not layout or (bs is not None and t.blocksize != bs):
            if t.dense_dim != first.dense_dim:
                raise ValueError(f"{op}: tensors[0] ({describe(first, dtype=False)}, dense_dim={first.dense_dim}) and tensors[{k}] "
                                 f"({describe(t, dtype=False)}, dense_dim={t.dense_dim}) have different dense dims")
            try:
                t = t.to_sparse(layout, blocksize=bs)
            except UnequalBatches:  # its batches would differ in nnz in that layout: every input joins as coo
                return _common([x.to_sparse(L.sparse_coo) for x in tensors], op)
            except NotImplementedError as e:  # a conversion the device lacks: say which op needed it
                raise NotImplementedError(f"{op}: tensors[{k}] ({t.layout.name}) converted to tensors[0]'s layout "
                                          f"first: {e}") from e
        out.append(t)
    dtype = np.result_type(*(t.dtype for t in out))
    if dtype not in VALUE_DTYPES:  # pragma: no cover - every pair of supported dtypes promotes to one
        raise TypeError(f"{op}: the inputs' dtypes promote to the unsupported {dtype}")
    idx_dts = {t.index_dtype for t in out}
    idx_dt = next(iter(idx_dts)) if len(idx_dts) == 1 else np.dtype(np.int64)
    return [t.astype(dtype, copy=False)._with_index_dtype(idx_dt) for t in out]


def joined_layout(first, tensors) -> tuple:
    """``(layout, blocksize)`` for joining ``tensors`` in ``first``'s layout: its blocksize, or the
    unblocked layout (bsr -> csr) where that does not tile some tensor's sparse sizes."""
    layout, bs = first.layout, first.blocksize if first.layout.blocked else None
    if bs is not None and any(_off_blocks(t, bs) for t in tensors):
        return (L.sparse_csr if layout.compressed_rows else L.sparse_csc), None
    return layout, bs


def _off_blocks(t, bs: tuple) -> bool:
    """Whether blocks of ``bs`` do not tile the two sparse dims of ``t`` (a coo tensor's last two
    non-dense dims)."""
    rows, cols = t.shape[t.ndim - t.dense_dim - 2: t.ndim - t.dense_dim] if t.ndim - t.dense_dim >= 2 else (1, 1)
    return bool(rows % bs[0] or cols % bs[1])


def cat(tensors, dim: int = 0, *, threads: int | None = None):
    """Concatenate sparse tensors along ``dim`` (a sparse, batch or dense dim).

    Inputs of another layout (or blocksize) are converted to the first one's layout
    (and blocksize) first, to csr (csc) for a bsr (bsc) first one whose blocksize does not
    tile every input's sparse sizes, to coo (every input, and the result) where an input's
    batches would hold different nnz in the first one's layout; values are promoted with ``np.result_type``; index dtypes
    that differ give int64, and so do int32 inputs whose result's sizes or entries pass int32's
    range. The shapes must agree except along ``dim``, and the inputs
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
    - on a CUDA device: every case above (``kernels/select.cu``), except a cat of integer or
      bool compressed tensors along a dense dim with different patterns (the union sums their
      values: ``NotImplementedError``); inputs on different devices ``ValueError``.

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
    backend_for(*(t for t in tensors if isinstance(t, SparseTensor)))  # ValueError for inputs on two devices
    tensors = _common(tensors, "cat")
    first = tensors[0]
    d = normalize_dim(dim, first.ndim, "cat")
    for k, t in enumerate(tensors[1:], 1):
        if t.ndim != first.ndim or any(a != b for j, (a, b) in enumerate(zip(t.shape, first.shape)) if j != d):
            raise ValueError(f"cat: tensors[0] has shape {first.shape} and tensors[{k}] has shape {t.shape}; they "
                             f"must agree except along dim {d}")
        if (t.sparse_dim, t.dense_dim, t.batch_dim) != (first.sparse_dim, first.dense_dim, first.batch_dim):
            raise ValueError(f"cat: tensors[0] ({describe(first, dtype=False)}) has batch_dim={first.batch_dim}, sparse_dim="
                             f"{first.sparse_dim}, dense_dim={first.dense_dim} and tensors[{k}] ({describe(t, dtype=False)}) "
                             f"batch_dim={t.batch_dim}, sparse_dim={t.sparse_dim}, dense_dim={t.dense_dim}")
    total = sum(t.shape[d] for t in tensors)
    shape = first.shape[:d] + (total,) + first.shape[d + 1:]
    tensors = _wide_enough(tensors, shape)
    first = tensors[0]
    kind = _kind(first, d)
    return _CAT_CALC_BY_LAYOUT[type(first)](tensors, d, kind, shape, "cat", threads)


def _wide_enough(tensors: list, shape: tuple) -> list:
    """The inputs with int64 indices where the joined sizes (or entries, which compressed indices
    count) pass int32's range, as SciPy's hstack and our kron promote."""
    first = tensors[0]
    if first.index_dtype != np.int32:
        return tensors
    lim = np.iinfo(np.int32).max
    if max(shape[:len(shape) - first.dense_dim], default=0) <= lim and sum(t.nnz for t in tensors) <= lim:
        return tensors
    return [t._with_index_dtype(np.int64) for t in tensors]


def _device():
    """The device kernels of cat/stack along batch and dense dims and of COO (the CPU's are the
    NumPy calls of this module, so they have no name in the backend table)."""
    from .._backend.cuda import _select as device_select

    return device_select


def _same_arrays(arrays) -> bool:
    a0 = arrays[0]
    if not isinstance(a0, np.ndarray):
        return _device().same_arrays(arrays)
    return all(a is a0 or (a.shape == a0.shape and np.array_equal(a, a0)) for a in arrays[1:])


def _coo_cat(tensors: list, d: int, kind: str, shape: tuple, op: str, threads) -> COOTensor:
    first = tensors[0]
    if kind == "sparse":  # an index out of its input's range would land in the next input's: checked first
        tensors = [ensure_valid(t, threads=threads) for t in tensors]
    if first.is_cuda:
        return _coo_cat_device(tensors, d, kind, shape)
    dt = first.index_dtype
    if kind == "sparse":
        check_fits(dt, "coo", **{f"size[{d}]": shape[d]})
        parts, offset = [], 0
        for t in tensors:
            idx = t.indices().copy()
            _in_range(idx[d], d, t.shape)
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


def _in_range(row: np.ndarray, d: int, shape: tuple) -> None:
    """The indices ``row`` of dim ``d`` of a checked COO input of ``shape`` are still in range (a
    caller may have written the arrays it built the tensor on): the offsets would hide one. The
    other dims' indices go to the result as they are, which carries the mark of its held input
    (checked again at the exits)."""
    bad = (row < 0) | (row >= shape[d])
    if bad.any():
        i = int(np.argmax(bad))
        raise_coo_error(("C4" if row[i] < 0 else "C5", d, i, int(row[i])), shape, " (changed since the check)")


def _coo_cat_device(tensors: list, d: int, kind: str, shape: tuple) -> COOTensor:
    """_coo_cat of device tensors: the same results through place_block (kernels/select.cu)."""
    first, dev = tensors[0], _device()
    if kind == "sparse":
        check_fits(first.index_dtype, "coo", **{f"size[{d}]": shape[d]})
        idx = dev.coo_cat_sparse([t.indices() for t in tensors], [t.shape[d] for t in tensors], d)
        coalesced = all(t.is_coalesced() for t in tensors) and (d == 0 or len(tensors) == 1)
        return COOTensor(idx, dev.concat_axis([t.values() for t in tensors], 0), shape, coalesced)
    ax = _values_axis(first, d)
    if _same_arrays([t.indices() for t in tensors]):
        return COOTensor(first.indices(), dev.concat_axis([t.values() for t in tensors], ax), shape,
                         first.is_coalesced())
    values = dev.padded_values([t.values() for t in tensors], ax, shape[first.sparse_dim:])
    return COOTensor(dev.concat_axis([t.indices() for t in tensors], 1), values, shape, len(tensors) == 1)


def _compressed_cat(tensors: list, d: int, kind: str, shape: tuple, op: str, threads) -> CompressedTensor:
    first = tensors[0]
    if kind == "batch":
        nnz = [t.nnz for t in tensors]
        if len(set(nnz)) > 1:
            raise ValueError(f"{op} of {first.layout.name} tensors along batch dim {d} needs the same nnz in every "
                             f"input (every batch has one nnz); got nnz {', '.join(map(str, nnz))}")
        if first.is_cuda:
            members = [_device().concat_axis([_members(t)[j] for t in tensors], d) for j in range(3)]
            return CompressedTensor(*members, shape, first.layout, all(t.is_coalesced() for t in tensors))
        members = [np.concatenate([_members(t)[j] for t in tensors], axis=d) for j in range(3)]
        return _compressed(first, *members, shape, all(t.is_coalesced() for t in tensors))
    if kind == "dense":
        ax = _values_axis(first, d)
        if _same_arrays([t.compressed_indices() for t in tensors]) and _same_arrays(
                [t.plain_indices() for t in tensors]):
            if first.is_cuda:
                v = _device().concat_axis([t.values() for t in tensors], ax)
                return CompressedTensor(first.compressed_indices(), first.plain_indices(), v, shape, first.layout,
                                        first.is_coalesced())
            v = np.concatenate([t.values() for t in tensors], axis=ax)
            return _compressed(first, first.compressed_indices(), first.plain_indices(), v, shape)
        coo = _coo_cat([t.to_sparse(L.sparse_coo, threads=threads) for t in tensors], d, kind, shape, op, threads)
        bs = first.blocksize if first.layout.blocked else None
        return coo.coalesce(threads=threads).to_sparse(first.layout, blocksize=bs, threads=threads)
    is_comp, bs = _sparse_axis(first, d)
    # along the plain dim an index a caller changed since the check would land, offset, in the next
    # input's range: checked again; along the compressed dim a broken input gives a broken result,
    # which carries the mark of its held input (checked again at the exits)
    parts = [as_parts(ensure_valid(t, repair=True, threads=threads) if is_comp else
                      ensure_valid_export(t, threads=threads)) for t in tensors]
    p0 = parts[0]
    sizes = [t.shape[d] // bs for t in tensors]
    limits = {f"size[{d}]": shape[d]}
    backend = backend_for(p0.compressed)
    out_c, out_p, out_v = (backend.cat_compressed(parts, limits, threads) if is_comp else
                           backend.cat_plain(parts, sizes, limits, threads))
    return build(p0._replace(compressed=out_c, plain=out_p, values=out_v, sparse=_resized(p0, is_comp, sum(sizes))))


def concatenate(tensors, dim: int = 0):
    """:func:`cat` for NumPy's ``np.concatenate`` and Dask's joins of blocks: compressed tensors
    joined along a batch dim into batches that would differ in nnz (which :func:`cat` refuses:
    every batch of a compressed tensor has one nnz) give a COO tensor, which holds them (Dask's
    sum over a batch dim cut in blocks joins the blocks' partial sums)."""
    tensors = list(tensors)
    try:
        return cat(tensors, dim)
    except ValueError as e:
        first = tensors[0] if tensors else None
        batch = (all(isinstance(t, CompressedTensor) for t in tensors) and "nnz" in str(e) and
                 normalize_dim(dim, first.ndim, "concatenate") < first.batch_dim)
        if not batch:
            raise
        return cat([t.to_sparse(L.sparse_coo) for t in tensors], dim)


def _members(t: CompressedTensor):
    return t.compressed_indices(), t.plain_indices(), t.values()


def _unsqueeze_coo(t: COOTensor, d: int) -> COOTensor:
    """The body of COO: ``t`` with a new dim of size 1 at ``d`` (0 <= d <= t.ndim)."""
    shape = t.shape[:d] + (1,) + t.shape[d:]
    S = t.sparse_dim
    if d <= S:
        idx = _device().insert_zero_row(t.indices(), d) if t.is_cuda else np.insert(t.indices(), d, 0, axis=0)
        return COOTensor(idx, t.values(), shape, t.is_coalesced())
    return COOTensor(t.indices(), _expand_dims(t.values(), d - S + 1), shape, t.is_coalesced(), t._checked)


def _expand_dims(a, axis: int):
    """``np.expand_dims`` that keeps a device array on its device (a reshape)."""
    return a.reshape(a.shape[:axis] + (1,) + a.shape[axis:]) if not isinstance(a, np.ndarray) else np.expand_dims(
        a, axis)


def _unsqueeze_compressed(t: CompressedTensor, d: int) -> CompressedTensor:
    """The body of the compressed layouts: a new batch or dense dim at ``d``."""
    shape = t.shape[:d] + (1,) + t.shape[d:]
    m = t.batch_dim
    if d <= m:
        members = (_expand_dims(a, d) for a in _members(t))
        return CompressedTensor(*members, shape, t.layout, t.is_coalesced())
    if d >= m + 2:
        v = _expand_dims(t.values(), t.values().ndim - (t.ndim - d))
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
    return cat([_UNSQUEEZE_BY_LAYOUT[type(t)](t, d) for t in tensors], d, threads=threads)


# Each op's body per layout family, picked where the op reads it: ``TABLE[type(t)](t, ...)``.
_CAT_CALC_BY_LAYOUT = {COOTensor: _coo_cat, CompressedTensor: _compressed_cat}
_UNSQUEEZE_BY_LAYOUT = {COOTensor: _unsqueeze_coo, CompressedTensor: _unsqueeze_compressed}
