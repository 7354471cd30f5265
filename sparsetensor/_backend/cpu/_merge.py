"""Sparse-sparse elementwise merges on the CPU (the ``merge`` kernel of
:mod:`sparsetensor._backend.cpu`): compressed operands row by row, coo operands as rows or
linear keys. See :mod:`sparsetensor.ops.binary` for the semantics; the operands arrive with
one shape, layout, blocksize, batch and dense dims, and the result dtype resolved."""

from __future__ import annotations

import math

import numpy as np

from ..._core._canonical import ensure_both_valid
from ..._core._config import num_threads
from ..._core._dtypes import check_fits
from ..._lib import _convert as _convert_kernels
from ..._lib._pool import empty
from ..._lib import _coo_merge as _coo_kernels
from ..._lib import _elementwise as _kernels
from ..._core._tensor import COOTensor, CompressedTensor
from ..._core._validate import check_coo_indices, raise_coo_error
from .._views import MERGE_BATCHED, MERGE_BATCHED_HINT, kernel_dtype, kernel_values, output_rows
from ._reduce import coalesced

_INT64_MAX = int(np.iinfo(np.int64).max)
# the merge modes by name (device-independent) -> the elementwise kernels' codes
MODES = {"add": _kernels.ADD, "mul": _kernels.MUL, "maximum": _kernels.MAX, "minimum": _kernels.MIN}


def _kernel_scalar(value, kdt: np.dtype):
    """A Python number the kernel of dtype ``kdt`` takes (integers wrap into its range)."""
    if kdt.kind == "c":
        return complex(value)
    if kdt.kind == "f":
        return float(value)
    return int(np.array(int(value), dtype=np.int64).astype(kdt))


def merge(a, b, dtype: np.dtype, op: str, alpha=1, threads=None):
    """``a op b`` of two sparse tensors of one layout: the union of the patterns (``add``:
    ``a + alpha * b``, ``maximum``, ``minimum``) or their intersection (``mul``), in ``dtype``."""
    kdt, logical = kernel_dtype(dtype)
    code = MODES[op]
    union = op != "mul"
    alpha_k = _kernel_scalar(alpha, kdt)
    body = _merge_compressed if a.layout.compressed else _merge_coo
    return body(a, b, dtype, kdt, logical, code, union, alpha_k, threads)


# COO merges split the key range into about this many pseudo-rows per thread.
_COO_ROWS_PER_THREAD = 8
_COO_ROW_MIN = 4096
# One-pass coo unions go through rows (the flat leading sparse dims) when there are at most this
# many rows per entry (plus a few): the row pointers cost O(rows).
_COO_ROWS_PER_ENTRY = 4
_COO_ROWS_MIN = 1 << 16


def _finish_values(ov: np.ndarray, dtype: np.dtype, logical: bool) -> np.ndarray:
    return ov.view(np.bool_) if logical else ov.astype(dtype, copy=False)


def _merge_compressed(a, b, dtype, kdt, logical, op, union, alpha_k, threads) -> CompressedTensor:
    a, b = ensure_both_valid(a, b, threads)
    ac, ap, av = a._compressed, a._plain, a._values
    bc, bp, bv = b._compressed, b._plain, b._values
    idx_dt = ac.dtype if ac.dtype == bc.dtype else _INT64
    m = ac.ndim - 1
    batch = ac.shape[:m]
    B = math.prod(batch)
    n = ac.shape[-1] - 1
    sa, sb = ap.shape[-1], bp.shape[-1]
    tail = av.shape[m + 1:]  # block + dense
    E = math.prod(tail)
    ac = ac.astype(idx_dt, copy=False).reshape(B, n + 1)
    ap = ap.astype(idx_dt, copy=False).reshape(B, sa)
    bc = bc.astype(idx_dt, copy=False).reshape(B, n + 1)
    bp = bp.astype(idx_dt, copy=False).reshape(B, sb)
    av = kernel_values(av, (B, sa, E), kdt)
    bv = kernel_values(bv, (B, sb, E), kdt)
    layout = a._layout
    room = B * (sa + sb) if union else B * min(sa, sb)
    if E >= 1 and room <= _INDEX_MAX[idx_dt.itemsize]:
        oc, op_, ov = _merge_one_pass(ac, ap, av, bc, bp, bv, op, union, alpha_k, logical, room,
                                      num_threads(threads, B * (sa + sb + n)), layout)
        nnz = op_.shape[0] // B if B else 0
    else:  # two passes (entries without values, or an upper bound past the index dtype): count, then fill
        counts = empty((B, n), dtype=np.int64)
        _kernels.merge_count(ac, ap, bc, bp, union, counts, num_threads(threads, B * (sa + sb + n)))
        nnz, oc = output_rows(counts, layout, idx_dt, MERGE_BATCHED.format(layout.name), MERGE_BATCHED_HINT)
        op_ = empty((B, nnz), dtype=idx_dt)
        ov = empty((B, nnz, E), dtype=kdt)
        _kernels.merge_fill(ac, ap, av, bc, bp, bv, oc, op_, ov, op, union, alpha_k, logical,
                            num_threads(threads, B * (nnz * max(E, 1) + n)))
    values = _finish_values(ov, dtype, logical).reshape(batch + (nnz,) + tail)
    return CompressedTensor(oc.reshape(batch + (n + 1,)), op_.reshape(batch + (nnz,)), values, a._shape, layout,
                            canonical=True)


_INT64 = np.dtype(np.int64)
_INDEX_MAX = {4: int(np.iinfo(np.int32).max), 8: int(np.iinfo(np.int64).max)}


def _merge_one_pass(ac, ap, av, bc, bp, bv, op, union, alpha_k, logical, room, nt, layout):
    """A merge in one pass (no count pass) of the kernels' views (B, n + 1), (B, nnz), (B, nnz, E):
    the outputs are allocated for ``room`` entries, the upper bound (nnz_a + nnz_b per batch for a
    union, the smaller nnz for an intersection), and the filled prefix is returned as (compressed
    (B, n + 1), plain (total,), values (total, E))."""
    B, n1 = ac.shape
    E = av.shape[2]
    idx_dt = ac.dtype
    if union and op == _kernels.ADD and alpha_k == 1:
        op = _kernels.PLUS  # x + y: no multiply by alpha
    oc = empty((B, n1), dtype=idx_dt)
    op_, ov = empty(room, dtype=idx_dt), empty((room, E), dtype=av.dtype)
    total = _kernels.merge_fused(ac, ap, av, bc, bp, bv, oc, op_, ov, op, union, alpha_k, logical, nt)
    if B > 1 and np.any(oc[:, -1] != oc[0, -1]):  # raises: batches of different nnz
        output_rows(np.diff(oc, axis=1), layout, idx_dt, MERGE_BATCHED.format(layout.name), MERGE_BATCHED_HINT)
    if 2 * total < room:  # an intersection far below its bound: keep no more than twice the result
        return oc, op_[:total].copy(), ov[:total].copy()
    return oc, op_[:total], ov[:total]


def _coo_keys(t: COOTensor, shape64: np.ndarray, nt: int) -> np.ndarray:
    keys = empty(t.nnz, dtype=np.int64)
    found = _coo_kernels.coo_ravel(np.ascontiguousarray(t.indices()), shape64, keys, nt)
    if found is not None:
        raise_coo_error(found, t.shape)
    return keys


def _merge_coo(a, b, dtype, kdt, logical, op, union, alpha_k, threads) -> COOTensor:
    # the merges check the keys in one pass and follow them in another: a caller's arrays copied, then checked
    a, b = coalesced(a, threads), coalesced(b, threads)
    idx_dt = a.index_dtype if a.index_dtype == b.index_dtype else np.dtype(np.int64)
    S = a.sparse_dim
    sshape = a.shape[:S]
    if union and math.prod(sshape) - 1 <= _INT64_MAX:
        return _union_coo_one_pass(a, b, idx_dt, dtype, kdt, logical, op, alpha_k, threads)
    nt = num_threads(threads, a.nnz + b.nnz)
    uniq = None
    if math.prod(sshape) - 1 <= _INT64_MAX:
        shape64 = np.asarray(sshape, dtype=np.int64)
        ka, kb = _coo_keys(a, shape64, nt), _coo_keys(b, shape64, nt)
    else:  # linear indices overflow int64: rank the distinct index columns instead
        both = np.concatenate([a.indices().astype(np.int64), b.indices().astype(np.int64)], axis=1)
        uniq, inv = np.unique(both, axis=1, return_inverse=True)
        inv = inv.reshape(-1).astype(np.int64)
        ka, kb = inv[:a.nnz], inv[a.nnz:]
    # pseudo-rows: key ranges of about equal size in both operands, merged in parallel
    rows = max(1, min(_COO_ROWS_PER_THREAD * nt, (a.nnz + b.nnz) // _COO_ROW_MIN))
    if rows > 1:
        pick = np.arange(1, rows)
        bounds = np.unique(np.concatenate([ka[pick * a.nnz // rows], kb[pick * b.nnz // rows]]))
    else:
        bounds = np.empty(0, dtype=np.int64)
    n = bounds.size + 1
    ac = np.empty((1, n + 1), dtype=np.int64)
    bc = np.empty((1, n + 1), dtype=np.int64)
    ac[0, 0] = bc[0, 0] = 0
    ac[0, 1:n] = np.searchsorted(ka, bounds)
    bc[0, 1:n] = np.searchsorted(kb, bounds)
    ac[0, n], bc[0, n] = a.nnz, b.nnz
    tail = a.values().shape[1:]
    E = math.prod(tail)
    counts = np.empty((1, n), dtype=np.int64)
    _kernels.merge_count(ac, ka.reshape(1, -1), bc, kb.reshape(1, -1), union, counts, nt)
    nnz = int(counts.sum())
    check_fits(idx_dt, "coo", nnz=nnz)
    oc = np.empty((1, n + 1), dtype=np.int64)
    oc[0, 0] = 0
    np.cumsum(counts[0], out=oc[0, 1:])
    keys = empty((1, nnz), dtype=np.int64)
    ov = empty((1, nnz, E), dtype=kdt)
    av = kernel_values(a.values(), (1, a.nnz, E), kdt)
    bv = kernel_values(b.values(), (1, b.nnz, E), kdt)
    _kernels.merge_fill(ac, ka.reshape(1, -1), av, bc, kb.reshape(1, -1), bv, oc, keys, ov, op, union, alpha_k,
                        logical, num_threads(threads, nnz * max(E, 1)))
    if uniq is None:
        indices = empty((S, nnz), dtype=idx_dt)
        _coo_kernels.coo_unravel(keys[0], shape64, indices, num_threads(threads, nnz * S))
    else:
        indices = np.ascontiguousarray(uniq[:, keys[0]], dtype=idx_dt)
    values = _finish_values(ov, dtype, logical).reshape((nnz,) + tail)
    return COOTensor(indices, values, a.shape, coalesced=True)


def _union_coo_one_pass(a, b, idx_dt, dtype, kdt, logical, op, alpha_k, threads) -> COOTensor:
    """A union merge of two coalesced coo operands in one pass (no count pass, no int64 keys).

    With sparse_dim >= 2 and not too many rows, the operands are taken as rows (the flat index
    of the leading sparse dims; the row pointers come from one checking scan) and merged by
    :func:`merge_union`, as csr; else index columns are compared as linear keys computed on the
    fly (:func:`coo_merge_union`). Both write outputs of nnz_a + nnz_b entries and keep the first
    nnz values (at least half of them) with a compact index array. Indices are checked on the
    way (bounds, and sorted distinct columns as the coalesced flag claims): a broken operand
    raises its InvariantError."""
    S = a.sparse_dim
    ub = a.nnz + b.nnz
    if op == _kernels.ADD and alpha_k == 1:
        op = _kernels.PLUS  # x + y: no multiply by alpha
    tail = a.values().shape[1:]
    E = math.prod(tail)
    ai = np.ascontiguousarray(a.indices(), dtype=idx_dt)
    bi = np.ascontiguousarray(b.indices(), dtype=idx_dt)
    av = kernel_values(a.values(), (1, a.nnz, E), kdt)
    bv = kernel_values(b.values(), (1, b.nnz, E), kdt)
    nt = num_threads(threads, ub * (S + max(E, 1)))
    F = math.prod(a.shape[:S - 1]) if S >= 2 else 0
    if S >= 2 and E >= 1 and F <= _COO_ROWS_PER_ENTRY * ub + _COO_ROWS_MIN and ub <= np.iinfo(idx_dt).max:
        sizes = np.asarray(a.shape[:S], dtype=np.int64)
        ac, bc = _coo_row_pointers(a, ai, sizes, idx_dt, nt), _coo_row_pointers(b, bi, sizes, idx_dt, nt)
        oc = empty((1, F + 1), dtype=idx_dt)
        op_ = empty((1, ub), dtype=idx_dt)
        ov = empty((1, ub, E), dtype=kdt)
        nnz = _kernels.merge_union(ac, ai[S - 1:], av, bc, bi[S - 1:], bv, oc, op_, ov, op, alpha_k, logical, nt)
        indices = empty((S, nnz), dtype=idx_dt)
        _coo_kernels.coo_rows_indices(oc, op_, sizes[:S - 1], indices, num_threads(threads, nnz * S))
        ov = ov[0]
    else:
        out_indices = empty((S, ub), dtype=idx_dt)
        ov = empty((ub, E), dtype=kdt)
        found = _coo_kernels.coo_merge_union(ai, av[0], bi, bv[0], np.asarray(a.shape[:S], dtype=np.int64),
                                         out_indices, ov, op, alpha_k, logical, True, nt)
        if found is None:
            _raise_coo_broken(nt, a, b)
        indices, nnz = found
    check_fits(idx_dt, "coo", nnz=nnz)
    values = _finish_values(ov[:nnz], dtype, logical).reshape((nnz,) + tail)
    # both operands were checked (when built, or by the merge): so is the union
    return COOTensor(indices, values, a.shape, coalesced=True, checked=True)


def _coo_row_pointers(t: COOTensor, indices: np.ndarray, sizes: np.ndarray, idx_dt, nt) -> np.ndarray:
    """(1, F + 1) pointers to the rows (flat leading sparse dims) of coalesced ``t``, after one scan
    that checks its bounds and order (InvariantError C4, C5, C6), also when ``t`` was checked
    when built (``idx_dt`` holds ``t.nnz``: the caller made sure)."""
    F = math.prod(t.shape[:t.sparse_dim - 1])
    ptr = empty(F + 1, dtype=idx_dt)
    if _convert_kernels.coo_to_rows(indices, sizes, ptr, nt) is not None:
        _raise_coo_broken(nt, t)
    return ptr.reshape(1, F + 1)


def _raise_coo_broken(nt: int, *operands: COOTensor) -> None:
    """Raise the InvariantError of the coo operand that a merge kernel flagged (bounds first, then C6)."""
    for t in operands:
        check_coo_indices(t.indices(), t.shape, coalesced=True, threads=nt)
    # the indices changed between the kernel and the check (another thread)
    raise ValueError("coo merge: an index changed after validation")


