"""Reductions on the CPU over :mod:`sparsetensor._lib._reduce`: the sums over one sparse dim of a
compressed tensor (``compressed_sum``, ``plain_sum``), and the segment, scatter and softmax
kernels the other reductions of :mod:`sparsetensor.ops.reduce` use (``segment_reduce``,
``scatter_reduce``, ``segment_softmax``: rows of a 2-d ``x`` grouped by offsets or keys).

The op (:mod:`sparsetensor.ops.reduce`) has resolved the dims and the dtype and hands the
values as ``x`` of shape ``(B, nnz, A, K, E)``: per entry (a block with its dense items)
``A * E`` lanes that are kept and ``K`` items that are summed with the entries (the
block's axis along the reduced dim). The result is a new NumPy array ``(B, n, A, E)``.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._canonical import ensure_valid, in_layout_or_coo
from ..._core._config import num_threads
from ..._core._tensor import COOTensor, CompressedTensor
from ..._core._validate import check_coo_indices
from ..._lib import _reduce as _kernels

__all__ = ["compressed_sum", "plain_sum", "segment_reduce", "scatter_reduce", "segment_softmax", "reduce_dims",
           "coalesced", "group_by", "batch_offsets"]

# What the kernels sum in (the op converts: integers and bool to int64, float16 to float32).
_SUM_DTYPES = frozenset(np.dtype(d) for d in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.float32,
                                               np.float64, np.complex64, np.complex128))


def _operands(t, x: np.ndarray, name: str):
    """``t``'s compressed indices ``(B, n + 1)`` and ``x`` C-contiguous, after checking ``x``."""
    c = t.compressed_indices()
    B = x.shape[0] if x.ndim == 5 else -1
    if x.ndim != 5 or x.shape[1] != t.nnz or B * (c.shape[-1] if c.ndim else 0) != c.size:
        raise ValueError(f"{name}: x must be (B, nnz, A, K, E) with nnz = {t.nnz} and B the batches of the "
                         f"{t.layout.name} tensor's compressed indices {c.shape}; got x {x.shape}")
    if x.dtype not in _SUM_DTYPES:
        raise TypeError(f"{name}: values of dtype {x.dtype} have no sum kernel (convert int and bool to int64, "
                        "float16 to float32)")
    return np.ascontiguousarray(c.reshape(B, c.shape[-1])), np.ascontiguousarray(x)


def compressed_sum(t, x: np.ndarray, threads=None) -> np.ndarray:
    """The sum of the entries of every compressed slot of ``t`` (a row of csr/bsr, a column of
    csc/bsc) and of their ``K`` items: ``(B, n, A, E)`` from ``x`` ``(B, nnz, A, K, E)``, ``t``'s
    values as the op resolved them. The compressed indices are checked as they are read
    (ValueError); the plain indices are not read."""
    c, x = _operands(t, x, "compressed_sum")
    B, _, A, K, E = x.shape
    out = np.empty((B, c.shape[1] - 1, A, E), dtype=x.dtype)
    _said_as_invariant(t, _kernels.compressed_sum, c, x, out, num_threads(threads, x.size))
    return out


def plain_sum(t, x: np.ndarray, threads=None) -> np.ndarray:
    """The sum of the entries at every plain index of ``t`` (a column of csr/bsr, a row of
    csc/bsc) and of their ``K`` items: ``(B, P, A, E)`` from ``x`` ``(B, nnz, A, K, E)``, where
    ``P = t.plain_size``. Indices are checked as they are read (ValueError)."""
    c, x = _operands(t, x, "plain_sum")
    B, nnz, A, K, E = x.shape
    p = np.ascontiguousarray(t.plain_indices().reshape(B, nnz))
    out = np.empty((B, t.plain_size, A, E), dtype=x.dtype)
    _said_as_invariant(t, _kernels.plain_sum, c, p, x, out, num_threads(threads, x.size))
    return out


def _said_as_invariant(t, kernel, *args) -> None:
    """``kernel(*args)``, whose ValueError for an index out of range (of a checked tensor whose
    caller wrote its arrays since) is raised as the invariant a check of ``t`` finds broken."""
    try:
        kernel(*args)
    except ValueError:
        if t._validated:
            t._check_again()
        else:
            t.check_invariants()
        raise


_NO_PERM = np.empty(0, np.int64)
_OPS = ("sum", "max", "min")


def _perm(perm) -> np.ndarray:
    """The kernels' ``perm`` (empty: rows in order); its positions are checked as they are read."""
    return _NO_PERM if perm is None else np.ascontiguousarray(perm, dtype=np.int64)


def _op(op: str) -> str:
    if op not in _OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {_OPS}")
    return op


def segment_reduce(x: np.ndarray, offsets: np.ndarray, E: int, op: str, identity, perm=None,
                   threads=None) -> np.ndarray:
    """``op`` ("sum", "max", "min") over the segments ``offsets[g]:offsets[g + 1]`` of ``x``'s rows
    (``x`` ``(n, K * E)`` in a kernel dtype, read through ``perm`` when given) and over the ``K``
    items of a row: ``(G, E)``; an empty segment gives ``identity`` (max/min; sums give 0).
    Offsets and positions are checked by the kernel as it reads them (ValueError)."""
    op = _op(op)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    perm = _perm(perm)
    out = np.empty((offsets.shape[0] - 1, E), dtype=x.dtype)
    nt = num_threads(threads, x.size)
    if op == "sum":
        _kernels.segment_sum(offsets, perm, x, out, nt)
    else:
        out.fill(identity)
        _kernels.segment_minmax(offsets, perm, x, out, op == "max", nt)
    return out


def scatter_reduce(keys: np.ndarray, x: np.ndarray, M: int, op: str, identity, threads=None) -> np.ndarray:
    """``out[keys[i]] op= x[i]`` into an ``(M, E)`` array starting from ``identity`` (``x``
    ``(n, E)`` in a kernel dtype). Large inputs with a small ``M`` are split among threads, each
    into a private copy, then combined. Keys are checked by the kernel (ValueError)."""
    op = _op(op)
    nt = num_threads(threads, x.size)
    C = nt if nt > 1 and M * nt <= x.shape[0] else 1
    out = np.full((C, M, x.shape[1]), identity, dtype=x.dtype)
    _kernels.scatter_reduce(np.ascontiguousarray(keys), x, out, op, nt)
    if C == 1:
        return out[0]
    return {"sum": np.add, "max": np.maximum, "min": np.minimum}[op].reduce(out, axis=0)


def segment_softmax(x: np.ndarray, offsets: np.ndarray, E: int, perm, log: bool, threads=None) -> np.ndarray:
    """Softmax (``log``: its logarithm) of ``x`` (``(n, K * E)``, float32/64) over each segment's
    rows and ``K`` items, per lane: an array like ``x``."""
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _kernels.segment_softmax(np.ascontiguousarray(offsets, dtype=np.int64), _perm(perm), x, out, E, log,
                             num_threads(threads, x.size))
    return out


# -- the reductions over dims, written once over the kernels above (sum, amax, amin) ---------------------
def reduce_dims(t, dims: tuple, op, threads=None):
    """``t`` reduced by ``op`` (np.add, np.maximum, np.minimum) over ``dims`` (sorted, distinct),
    which stay with size 1; ``t``'s values are already in the accumulation dtype, and for
    amax/amin ``t`` has distinct indices and unspecified elements take part as zeros."""
    body = _reduce_coo if isinstance(t, COOTensor) else _reduce_compressed
    return body(t, dims, op, threads)


def _identity(op, dtype: np.dtype):
    """The value an empty ``op``-reduction starts from."""
    if op is np.add:
        return np.zeros((), dtype)[()]
    biggest = op is np.minimum
    if dtype == np.bool_:
        return np.bool_(biggest)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return dtype.type(info.max if biggest else info.min)
    return dtype.type(np.inf if biggest else -np.inf)


def coalesced(t, threads):
    """``t`` with distinct, bounds-checked indices (COO coalesced; compressed canonical). A checked
    tensor on a caller's arrays is checked again on a private copy of what its kernels follow,
    returned over it (:func:`~sparsetensor._core._canonical.ensure_valid`): ``coalesce`` returns
    such a tensor itself, whose arrays another thread may write while the kernels run."""
    if t.is_coalesced():
        return ensure_valid(t, repair=True, threads=threads)
    return t.coalesce(threads=threads)


def _kernel_view(x: np.ndarray):
    """``x`` as the kernels take it, and the dtype to turn results back into (or None).

    bool is viewed as uint8 (a sum of bools is then their maximum: logical or), float16
    is widened to float32.
    """
    x = np.ascontiguousarray(x)
    if x.dtype == np.bool_:
        return x.view(np.uint8), np.dtype(np.bool_)
    if x.dtype == np.float16:
        return x.astype(np.float32), np.dtype(np.float16)
    return x, None


def _back(out: np.ndarray, back):
    if back is None:
        return out
    return out.view(np.bool_) if back == np.bool_ else out.astype(back)


_OP_NAMES = {np.add: "sum", np.maximum: "max", np.minimum: "min"}


def _segments(op, x: np.ndarray, offsets: np.ndarray, E: int, perm=None, threads=None) -> np.ndarray:
    """``op`` over the segments ``offsets[g]:offsets[g + 1]`` of ``x``'s rows (``x`` is ``(n, K * E)``,
    read through ``perm`` when given) and over the ``K`` items of a row: ``(G, E)``; an empty
    segment gives the identity."""
    xv, back = _kernel_view(x)
    if back == np.bool_ and op is np.add:
        op = np.maximum
    out = segment_reduce(xv, offsets, E, _OP_NAMES[op], _identity(op, xv.dtype), perm, threads)
    return _back(out, back)


def _scatter(op, keys: np.ndarray, x: np.ndarray, M: int, threads) -> np.ndarray:
    """``out[keys[i]] op= x[i]`` into an ``(M, E)`` array starting from the identity."""
    xv, back = _kernel_view(x)
    if back == np.bool_ and op is np.add:
        op = np.maximum
    return _back(scatter_reduce(keys, xv, M, _OP_NAMES[op], _identity(op, xv.dtype), threads), back)


def batch_offsets(c: np.ndarray, nnz: int) -> np.ndarray:
    """The compressed indices ``(B, n + 1)`` of B batches as offsets ``(B * n + 1,)`` into their
    concatenated entries (batch b's entries start at ``b * nnz``)."""
    B = c.shape[0]
    if B == 1:  # one batch: the compressed indices themselves
        return c[0].astype(np.int64, copy=False)
    off = np.empty(B * (c.shape[1] - 1) + 1, dtype=np.int64)
    off[:-1] = (c[:, :-1].astype(np.int64) + (np.arange(B, dtype=np.int64) * nnz)[:, None]).ravel()
    off[-1] = B * nnz
    return off


# -- the reduction engine -------------------------------------------------------------------------------
def _with_zeros(op, red: np.ndarray, count, slot: int) -> np.ndarray:
    """Fold the unspecified elements (zeros) into ``red`` where ``count < slot`` (amax/amin)."""
    if op is np.add:
        return red
    count = np.asarray(count)
    missing = (count < slot).reshape(count.shape + (1,) * (red.ndim - count.ndim))
    return np.where(missing, op(red, np.zeros((), red.dtype)), red)


# Each layout's body is a hook on its class (bound from the op table, sparsetensor._api):
# ``reduce_dims(t, dims, op, threads)`` reduces ``t`` over ``dims`` (sorted, distinct),
# keeping them as size-1 dims; ``t``'s values are already in the accumulation dtype, and for
# amax/amin (``op`` not np.add) ``t`` has distinct indices and unspecified elements take part
# as zeros. ``_REDUCE_RETURN_BY_LAYOUT[type(result)](result, dims)`` drops them again (see :func:`_squeeze`).
def _reduce_coo(t: COOTensor, dims: tuple, op, threads):
    """The ``_reduce_calc`` hook of COO."""
    S = t.sparse_dim
    sparse_dims = [d for d in dims if d < S]
    value_axes = tuple(d - S + 1 for d in dims if d >= S)
    v = t.values()
    if value_axes:
        v = op.reduce(v, axis=value_axes, keepdims=True)
    shape = tuple(1 if d in dims else s for d, s in enumerate(t.shape))
    if not sparse_dims:
        return COOTensor(t.indices(), v, shape, t.is_coalesced(), t._checked)
    if len(sparse_dims) == S:
        red = op.reduce(v, axis=0, keepdims=True, initial=_identity(op, v.dtype))
        red = _with_zeros(op, red, t.nnz, math.prod(t.shape[:S]))
        return red.reshape(shape)
    kept = [d for d in range(S) if d not in sparse_dims]
    if op is np.add and not t._checked:  # the linear reduction keeps duplicates: bounds (and a claimed order)
        check_coo_indices(t.indices(), t.shape, coalesced=t.is_coalesced(), threads=threads)
    if op is np.add:
        r = COOTensor(np.ascontiguousarray(t.indices()[kept]), v, tuple(t.shape[d] for d in kept) + v.shape[1:],
                      False).coalesce(threads=threads)
        idx, red = r.indices(), r.values()
    else:
        perm, starts, idx = group_by(t, kept, sparse_dims, threads)
        E = math.prod(v.shape[1:])
        red = _segments(op, v.reshape(t.nnz, E), starts, E, perm, threads).reshape((starts.shape[0] - 1,) + v.shape[1:])
        red = _with_zeros(op, red, np.diff(starts), math.prod(t.shape[d] for d in sparse_dims))
    full = np.zeros((S, idx.shape[1]), dtype=idx.dtype)
    full[kept] = idx
    return COOTensor(full, red, shape, True)


def group_by(t: COOTensor, kept: list, rest: list, threads):
    """Group ``t``'s entries (distinct indices) by their indices along the sparse dims ``kept``.

    Returns ``(perm, starts, group_indices)``: ``perm`` orders the entries by
    ``kept`` then ``rest`` lexicographically (None when they already are),
    ``starts`` (``groups + 1``) bounds the groups in that order, and
    ``group_indices`` (``len(kept), groups``) are the groups' ``kept`` indices.
    """
    idx = t.indices()
    n = idx.shape[1]
    k = len(kept)
    if t.is_coalesced() and kept == list(range(k)):
        perm, ordered = None, idx[:k]
    else:
        # a coalesce of the reordered index rows sorts them (parallel radix sort); the values,
        # positions, ride along and come out as the permutation (the entries are distinct)
        order = kept + rest
        tmp = COOTensor(np.ascontiguousarray(idx[order]), np.arange(n, dtype=np.int64),
                        tuple(t.shape[d] for d in order), False).coalesce(threads=threads)
        perm, ordered = tmp.values(), tmp.indices()[:k]
    if n == 0:
        return perm, np.zeros(1, np.int64), np.empty((k, 0), idx.dtype)
    head = np.empty(n, dtype=bool)
    head[0] = True
    if k:
        np.any(ordered[:, 1:] != ordered[:, :-1], axis=0, out=head[1:])
    else:
        head[1:] = False
    heads = np.flatnonzero(head)
    return perm, np.append(heads, n), np.ascontiguousarray(ordered[:, heads])


def _reduce_compressed(t: CompressedTensor, dims: tuple, op, threads):
    """The ``_reduce_calc`` hook of the compressed layouts."""
    m = t.batch_dim
    b = 2 if t.layout.blocked else 0
    batch_dims = [d for d in dims if d < m]
    sparse_dims = [d for d in dims if m <= d < m + 2]
    value_axes = tuple(d - 1 + b for d in dims if d >= m + 2)
    if sparse_dims:
        return _compressed_dense(t, dims, op, threads)
    if batch_dims:
        # the union of the batches' patterns: through COO (batch dims lead), and back
        coo = t.to_sparse_coo(threads=threads)
        r = _reduce_coo(coo, dims, op, threads)
        return in_layout_or_coo(r, t, threads=threads)
    v = np.ascontiguousarray(op.reduce(t.values(), axis=value_axes, keepdims=True))
    shape = tuple(1 if d in dims else s for d, s in enumerate(t.shape))
    return CompressedTensor(t.compressed_indices(), t.plain_indices(), v, shape, t.layout, t.is_coalesced())


def _sum_sparse_dim(t: CompressedTensor, dims: tuple, threads) -> np.ndarray:
    """The sum over ``dims`` (one of the two sparse dims, and any batch and dense dims) of a
    compressed tensor, the reduced dims kept as size 1: per compressed index (a row of csr, a
    column of csc) when the summed sparse dim is the plain one, else per plain index. The
    block's axis along the summed dim is summed with it (the kernels' K items), the rest of a
    block and the dense items are the kernels' A * E lanes."""
    if not t.is_coalesced():
        t = ensure_valid(t, repair=True, threads=threads)
    m = t.batch_dim
    columns = (m + 1) in dims
    batch = t.shape[:m]
    rb, cb = t.blocksize
    v = t.values()
    if dims[-1] >= m + 2:  # dense dims: summed in the values first
        b = 2 if t.layout.blocked else 0
        v = np.add.reduce(v, axis=tuple(d - 1 + b for d in dims if d >= m + 2), keepdims=True)
    dense = v.shape[v.ndim - t.dense_dim:] if t.dense_dim else ()
    D = math.prod(dense)
    kernel = compressed_sum if columns == t.layout.compressed_rows else plain_sum
    x = v.reshape((math.prod(batch), t.nnz) + ((rb, cb, D) if columns else (1, rb, cb * D)))
    n = t.shape[m] if columns else t.shape[m + 1]
    out = kernel(t, x, threads).reshape(batch + ((n, 1) if columns else (1, n)) + dense)
    if dims[0] < m:  # batch dims: summed in the result
        out = np.add.reduce(out, axis=tuple(d for d in dims if d < m), keepdims=True)
    return out


def _compressed_dense(t: CompressedTensor, dims: tuple, op, threads) -> np.ndarray:
    """Reductions over a row or column dim of a compressed tensor: a dense result."""
    m = t.batch_dim
    if op is np.add and ((m in dims) != ((m + 1) in dims)) and t.dtype != np.bool_:
        return _sum_sparse_dim(t, dims, threads)  # row or column sums (a sum of bools, their "or": below)
    if op is not np.add or not t.is_coalesced():
        t = coalesced(t, threads) if op is not np.add else ensure_valid(t, repair=True, threads=threads)
    b = 2 if t.layout.blocked else 0
    batch = t.shape[:m]
    B, nnz = math.prod(batch), t.nnz
    rows, cols = t.shape[m], t.shape[m + 1]
    rb, cb = t.blocksize
    value_axes = tuple(d - 1 + b for d in dims if d >= m + 2)
    v = t.values()
    if value_axes:
        v = op.reduce(v, axis=value_axes, keepdims=True)
    dense_kd = v.shape[m + 1 + b:]
    D = math.prod(dense_kd)
    V = v.reshape(B, nnz, rb, cb, D)
    init = _identity(op, V.dtype)
    by_rows = t.layout.compressed_rows
    red_rows, red_cols = m in dims, (m + 1) in dims
    c = t.compressed_indices().reshape(B, t.compressed_indices().shape[-1])
    if red_rows and red_cols:
        out = op.reduce(V, axis=(1, 2, 3), initial=init)  # (B, D)
        out = _with_zeros(op, out, np.full(B, nnz * rb * cb), rows * cols)
        out = out.reshape(batch + (1, 1) + dense_kd)
    elif red_cols == by_rows:
        # the plain dim is reduced: a segment per compressed index (row of csr, column of csc)
        plain_axis, keep_len, plain_len = (3, rb, cb) if by_rows else (2, cb, rb)
        if by_rows and cb > 1:
            V = op.reduce(V, axis=3, keepdims=True)  # the kernel reduces the leading block axis
        # rows of W: (plain_len or 1 items, keep_len * D lanes)
        W = np.ascontiguousarray(V).reshape(B * nnz, -1) if B * nnz else np.empty((0, keep_len * D), V.dtype)
        seg = _segments(op, W, batch_offsets(c, nnz), keep_len * D, None, threads)
        out = seg.reshape(B, c.shape[1] - 1, keep_len, D)
        if op is not np.add:
            out = _with_zeros(op, out, np.diff(c, axis=1) * plain_len, cols if by_rows else rows)
        K = out.shape[1] * keep_len
        out = out.reshape((B, K) + dense_kd)
        out = out.reshape(batch + ((K, 1) if by_rows else (1, K)) + dense_kd)
    else:
        # the compressed dim is reduced: scatter by plain index (column of csr, row of csc)
        comp_axis, keep_len, comp_len = (2, cb, rb) if by_rows else (3, rb, cb)
        W = op.reduce(V, axis=comp_axis) if comp_len > 1 else np.squeeze(V, axis=comp_axis)  # (B, nnz, keep_len, D)
        P = t.plain_size
        plain = t.plain_indices().reshape(B, nnz)
        keys = plain.ravel() if B == 1 else (plain + (np.arange(B, dtype=np.int64) * P)[:, None]).ravel()
        out = _scatter(op, keys, W.reshape(B * nnz, keep_len * D), B * P, threads).reshape(B, P, keep_len, D)
        if op is not np.add:
            counts = np.bincount(keys, minlength=B * P).reshape(B, P)
            out = _with_zeros(op, out, counts * comp_len, rows if by_rows else cols)
        K = P * keep_len
        out = out.reshape(batch + ((1, K) if by_rows else (K, 1)) + dense_kd)
    batch_axes = tuple(d for d in dims if d < m)
    if batch_axes:
        out = op.reduce(out, axis=batch_axes, keepdims=True)
    return out
