"""The CPU backend: the kernel names of :data:`sparsetensor._backend.KERNELS` over the Cython
kernels of ``sparsetensor/_lib`` (each a checked ``def``: shapes, dtypes and contiguity are
made right here, indices are checked before or while a kernel reads them).

The ops call these through :func:`sparsetensor._backend.backend_for` once they have resolved
their operands; :mod:`sparsetensor._backend.cuda` has the same names for CUDA tensors.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core import _layout as L
from ..._core._canonical import same_nnz
from ._coalesce import coalesce as _coalesce_coo, sum_duplicates as _sum_duplicates
from ..._core._config import GRAIN, GRAIN_PRODUCT, num_threads
from ..._core._dtypes import arith_view, raw_view, zero_test_view
from ..._lib import _dense as _dense_kernels
from ..._lib._pool import empty
from ..._lib import _reduce as _reduce_kernels
from ..._lib import _spmm as _spmm_kernels
from ..._core import _tensor
from ..._core._tensor import COOTensor, CompressedTensor, held_outside, holds_arrays
from ..._core._validate import check_coo_indices, first_broken_end, raise_compressed_error, raise_coo_error
from ._convert import convert, transpose
from ._ilu import ic0, ilu0, trsv
from ._merge import merge
from ._reduce import batch_offsets as _batch_offsets
from ._reduce import compressed_sum, group_by, plain_sum, reduce_dims, scatter_reduce, segment_reduce, segment_softmax
from ._sddmm import sddmm
from ._select import (cat_compressed, cat_plain, gather_slices, index_select_coo, keep_compressed, keep_coo, kron_coo,
                      narrow_coo, narrow_plain, nonzero_rows, remap_plain, triangle_flags)
from ._spgemm import spgemm
from .._views import NO_BATCH, aligned_copy, bits_dtype, work_dtype

__all__ = ["device", "validate", "coalesce", "to_dense", "from_dense", "convert", "transpose", "spmm", "spmm_csr",
           "spgemm", "scale_add",
           "merge", "reduce_sum", "reduce_sum_dims", "reduce_dims", "unary", "sddmm", "gather_slices", "remap_plain",
           "narrow_plain", "cat_plain", "cat_compressed", "index_select_coo", "compressed_sum", "plain_sum", "segment_reduce",
           "scatter_reduce", "segment_softmax", "group_by", "batch_offsets", "map_values", "sample_dense", "add_to_dense", "elementwise",
           "check_bounds", "index_range", "diagonal", "sum_axis", "flatten_coo", "reshape_coo", "triangle_flags", "nonzero_rows",
           "keep_coo", "narrow_coo", "keep_compressed", "kron_coo", "ilu0", "ic0", "trsv"]

device = "cpu"


def validate(t, threads=None) -> None:
    """Every invariant of ``t`` (the O(nnz) scans in parallel); raises InvariantError."""
    t.check_invariants(threads=threads)


def check_bounds(t, threads=None) -> None:
    """Invariants 5.1-5.5 of compressed ``t`` (every index safe to read, every entry in a row; rows
    may be unsorted or hold repeats, so 5.3 bounds a step by nnz, not by the plain size), C4/C5 of
    a COO one (C6 not: repeats and any order allowed); raises InvariantError naming the first
    broken one."""
    if isinstance(t, COOTensor):
        check_coo_indices(t.indices(), t.shape, threads=threads)
        return
    batch = t.shape[:t.batch_dim]
    B = math.prod(batch)
    c = t.compressed_indices()
    c = c.reshape(B, c.shape[-1])
    # 5.1/5.2 first, as check_invariants orders them; the scan then finds a step below 0 (5.3) or
    # a plain index out of range
    found = first_broken_end(c, t.nnz) or _spmm_kernels.find_broken_index(
        c, t.plain_indices().reshape(B, t.nnz), t.plain_size)
    if found is not None:
        raise_compressed_error(found, t.layout, batch, t.plain_size, t.nnz)


def index_range(a, threads=None) -> tuple:
    """``(least, largest)`` entry of an integer array as ints (None, None when empty)."""
    if not a.size:
        return None, None
    return int(a.min()), int(a.max())


def coalesce(t, threads=None):
    """COO: sorted, distinct indices (duplicates summed); compressed: sorted, distinct plain
    indices in every row (5.6 repaired). ``t`` itself when it already is."""
    if t.layout.compressed:
        return t if t._canonical else _sum_duplicates(t, threads=threads)
    return t if t._coalesced else _coalesce_coo(t, threads=threads)


def spmm(S, D, plan, rt, threads=None, err=None):
    """``S @ D`` for a compressed ``S`` without dense dims and a dense ``D`` whose shapes ``plan``
    (:class:`sparsetensor.ops.blas.ProductShape`) resolved: a NumPy array of ``plan.out_shape`` in
    the working dtype of ``rt`` (float16 as float32; the op rounds once). csr/bsr gather by
    rows, csc/bsc scatter by columns; indices are checked as the kernel scans (``err``: the
    tensor to name in an InvariantError)."""
    err = S if err is None or not err.layout.compressed else err  # a coo operand: named as the csr it became
    M, K, N, sb, db = plan.M, plan.K, plan.N, plan.sb, plan.db
    s_batch = S.shape[:S.batch_dim]
    Bs, Bd, Bo = math.prod(s_batch), math.prod(D.shape[:-2]), math.prod(plan.out_batch)
    wt = work_dtype(rt)
    kt = bits_dtype(wt)
    logical = wt.kind == "b"
    Rb, Cb = S.blocksize
    nnz = S.nnz
    values = S.values()
    block_transposed = False
    if S.layout.blocked and not values.flags.c_contiguous and values.swapaxes(-1, -2).flags.c_contiguous:
        values, block_transposed = values.swapaxes(-1, -2), True  # a transpose view: read blocks column-major
    if values.dtype != wt or not values.flags.c_contiguous:
        values = np.ascontiguousarray(values, dtype=wt)
    values = values.reshape(Bs, nnz, Rb * Cb)
    if D.dtype != wt or not D.flags.c_contiguous:  # a copy anyway: rows start on cache lines
        dense = aligned_copy(D, wt).reshape(Bd, K, N)
    else:
        dense = D.reshape(Bd, K, N)
    out = empty((Bo, M, N), dtype=wt)
    c, p = S.compressed_indices(), S.plain_indices()
    c2, p2 = c.reshape(Bs, c.shape[-1]), p.reshape(Bs, nnz)
    if not S.layout.compressed_rows and _tensor._any_held and holds_arrays(S):
        # the scatter checks a column's rows in a pass of their own, then follows them: on a
        # caller's array another thread may write in between, so it scatters by a private copy
        # (pooled: a fresh array's first touch cost more than the copy; a check where each row is
        # read slowed the scatter of every tensor, the performance page)
        own = empty(p2.shape, dtype=p2.dtype)
        np.copyto(own, p2)
        p2 = own
    nt = num_threads(threads, Bo * (nnz * Rb * Cb + M) * N, grain=GRAIN_PRODUCT)
    if kt != wt:  # integers and bool: the kernels' unsigned view (floats go as they are)
        values, dense, kout = values.view(kt), dense.view(kt), out.view(kt)
    else:
        kout = out
    found = _spmm_kernels.spmm(c2, p2, values, dense, kout, sb, db, (Rb, Cb),
                               S.layout.compressed_rows, nt, block_transposed=block_transposed,
                               logical=logical)  # 5.3-5.5 as it scans, 5.1/5.2 in O(batch)
    if found is not None:
        raise_compressed_error(found, err.layout, s_batch, err.plain_size, nnz, c2)
    return out.reshape(plan.out_shape)


_FLOATS = frozenset((np.dtype(np.float32), np.dtype(np.float64)))
_PLAIN_COMPRESSED = frozenset((L.sparse_csr, L.sparse_csc))


def spmm_csr(S, D, threads=None):
    """``S @ D`` for the common case, or None where it is not that case: a 2-d csr or bsr ``S``
    on the host (C-contiguous values, no dense dims) times a C-contiguous vector or matrix ``D``
    of the same float dtype, inner sizes matching. :func:`spmm`'s kernel call without its
    resolving of batch dims, working dtypes and copies, which cost more than the product below
    about 10^4 entries; every other case (and every error) is left to the general path."""
    v = S._values
    layout = S._layout
    if type(v) is not np.ndarray or len(S._shape) != 2:
        return None
    if layout is L.sparse_csr:
        Rb = Cb = 1
    elif layout is L.sparse_bsr and v.ndim == 3:
        Rb, Cb = v.shape[1], v.shape[2]
    else:
        return None
    dt = v.dtype
    nd = D.ndim
    if dt not in _FLOATS or D.dtype != dt or not 1 <= nd <= 2 or not D.flags.c_contiguous \
            or not v.flags.c_contiguous:
        return None
    M, K = S._shape
    if D.shape[0] != K:
        return None
    N = 1 if nd == 1 else D.shape[1]
    nnz = v.shape[0]
    bs = Rb * Cb
    out = empty(M * N, dtype=dt)
    found = _spmm_kernels.spmm(S._compressed.reshape(1, M // Rb + 1), S._plain.reshape(1, nnz),
                               v.reshape(1, nnz, bs), D.reshape(1, K, N), out.reshape(1, M, N), NO_BATCH, NO_BATCH,
                               (Rb, Cb), True, num_threads(threads, (nnz * bs + M) * N, grain=GRAIN_PRODUCT),
                               checked=False)  # the O(1) look at where the rows start and end, even when checked
    if found is not None:
        raise_compressed_error(found, S.layout, (), S.plain_size, nnz, S._compressed)
    return out if nd == 1 else out.reshape(M, N)


def slot_sums_2d(t, dim, threads=None):
    """The row sums of a 2-d csr (``dim`` 1 or -1) or column sums of a 2-d csc (``dim`` 0 or -2)
    with float values on the host, as a NumPy vector, or None where it is not that case:
    :func:`compressed_sum` without the op's dim and dtype resolution, which costs more than
    the sums of a small matrix (a 10 x 10 csr: 9 against 2 us). Every other case (and every
    error) is left to the general path."""
    v = t._values
    layout = t._layout
    if type(v) is not np.ndarray or len(t._shape) != 2 or v.ndim != 1 or v.dtype not in _FLOATS \
            or not t._canonical or _repeats_possible(t):  # (unchecked input, a caller's arrays: checked first)
        return None
    if layout is L.sparse_csr:
        if dim != 1 and dim != -1:
            return None
        n = t._shape[0]
    elif layout is L.sparse_csc:
        if dim != 0 and dim != -2:
            return None
        n = t._shape[1]
    else:
        return None
    c = t._compressed
    if not v.flags.c_contiguous or not c.flags.c_contiguous:
        return None
    out = np.empty(n, dtype=v.dtype)
    _reduce_kernels.compressed_sum(c.reshape(1, n + 1), v.reshape(1, v.shape[0], 1, 1, 1), out.reshape(1, n, 1, 1),
                                   num_threads(threads, v.shape[0]))
    return out


def to_dense(t, threads=None) -> np.ndarray:
    """The dense array of ``t`` (duplicates, possible only in unchecked input, summed)."""
    v = t._values
    if t._layout in _PLAIN_COMPRESSED and t._canonical and len(t._shape) == 2 and type(v) is np.ndarray \
            and v.ndim == 1 and v.shape[0] < GRAIN and not (_tensor._any_held and held_outside(t)):
        # small and validated (not on a caller's arrays, which may repeat an index now): skip the
        # general path's set-up
        out = np.zeros(t._shape, v.dtype)
        if _dense_kernels.small_to_dense_2d(t._compressed, t._plain, v, out, t._layout is L.sparse_csr):
            return out
    return (_compressed_to_dense if t.layout.compressed else _coo_to_dense)(t, threads)


def from_dense(a: np.ndarray, plan, threads=None):
    """The sparse tensor of C-contiguous ``a`` that ``plan`` (:class:`sparsetensor.ops.dense.DensePlan`,
    the arguments checked) describes; canonical / coalesced."""
    if plan.layout is L.sparse_coo:
        return _dense_to_coo(a, plan, threads)
    layout, idx_dt, batch, (rows, cols), dense, bs = plan
    B, D = math.prod(batch), math.prod(dense)
    z = zero_test_view(a.reshape(B, rows, cols, D))
    r = raw_view(a.reshape(B, rows, cols, D))
    c, p, v, counts = _dense_kernels.dense_to_compressed(z, r, bs[0], bs[1], layout.compressed_rows, idx_dt,
                                                         num_threads(threads, a.size), float16=a.dtype == np.float16)
    same_nnz(counts, batch, f"every batch of a {layout.name} tensor must have the same nnz")
    nnz = p.shape[-1]
    values = v.view(a.dtype).reshape(batch + (nnz,) + (bs if layout.blocked else ()) + dense)
    return CompressedTensor(c.reshape(batch + (c.shape[-1],)), p.reshape(batch + (nnz,)), values,
                            a.shape, layout, canonical=True)


def reduce_sum(t, threads=None):
    """The sum of every element of ``t`` as a 0-d array of its values' dtype (the op has
    converted them to the dtype it sums in); no index is read."""
    return np.asarray(np.add.reduce(t.values(), axis=None))


def reduce_sum_dims(t, dims: tuple, threads=None):
    """The sum of ``t`` over the normalised ``dims``, which stay with size 1: a dense array, or a
    sparse tensor while sparse dims of a COO tensor (batch dims of a compressed one) remain (the
    op has converted the values to the dtype it sums in)."""
    return reduce_dims(t, dims, np.add, threads)


def scale_add(prod: np.ndarray, inp, alpha, beta, scale: bool, add: bool, threads=None) -> np.ndarray:
    """addmm's update: ``prod`` (a product in its working dtype, written in place) times ``alpha``
    (when ``scale``) plus ``beta * inp`` (when ``add``; ``inp`` broadcasts to ``prod``);
    ``alpha``/``beta`` are 0-d arrays of the working dtype (integers wrapped)."""
    if scale:
        np.multiply(prod, alpha, out=prod)
    if add:
        term = inp.astype(prod.dtype, copy=False)
        np.add(prod, term if beta == 1 else term * beta, out=prod)
    return prod


def map_values(x, name: str, fn, arg=None, threads=None) -> np.ndarray:
    """A dense array mapped elementwise by the pointwise op ``name`` (``fn``, its NumPy function;
    ``fn(x, arg)`` with a scalar argument): the last step of a reduction such as norm's root."""
    return np.asarray(fn(x) if arg is None else fn(x, arg))


def batch_offsets(c, nnz: int, threads=None) -> np.ndarray:
    """Compressed indices ``(B, n + 1)`` as int64 offsets ``(B * n + 1,)`` into the B batches'
    concatenated entries (the segments of softmax along the plain dim)."""
    return _batch_offsets(c, nnz)


def unary(t, name: str, fn, threads=None, arg=None) -> np.ndarray:
    """The values of ``t`` (distinct indices when ``fn`` is nonlinear: the op made sure) mapped by
    ``fn``, the NumPy function of the pointwise op ``name`` (``fn(values, arg)`` when the op has
    a scalar argument: ``mul``/``div``/``pow`` by a scalar, ``round``'s decimals), in NumPy's
    result dtype."""
    return np.asarray(fn(t.values()) if arg is None else fn(t.values(), arg))


def sample_dense(t, dense: np.ndarray, threads=None) -> np.ndarray:
    """``dense`` (broadcast to the shape of ``t``, a validated compressed tensor) at ``t``'s
    entries: an array shaped like ``t.values()`` in ``dense``'s dtype."""
    m = t.batch_dim
    batch = t.shape[:m]
    B, D = math.prod(batch), math.prod(t.shape[m + 2:])
    R, C = t.shape[m:m + 2]
    Rb, Cb = t.blocksize
    d4 = _as_4d(np.broadcast_to(dense, t.shape), (B, R, C, D))
    raw = d4 if d4.dtype == np.complex128 else raw_view(d4)  # the kernel moves complex128 whole
    out = empty((B, t.nnz, Rb * Cb * D), dtype=raw.dtype)
    c = t.compressed_indices()
    _dense_kernels.gather_compressed(c.reshape(B, c.shape[-1]), t.plain_indices().reshape(B, t.nnz), raw, Rb, Cb,
                                     t.layout.compressed_rows, out, num_threads(threads, out.size))
    block = (Rb, Cb) if t.layout.blocked else ()
    return out.view(dense.dtype).reshape(batch + (t.nnz,) + block + t.shape[m + 2:])


def add_to_dense(t, values: np.ndarray, out: np.ndarray, threads=None) -> np.ndarray:
    """``out`` plus the validated compressed tensor ``t`` with values ``values`` (shaped like
    ``t.values()``, in ``out``'s dtype), added in place into ``out`` (float16: into a float32
    copy, rounded once); returns the sum."""
    dtype = out.dtype
    m = t.batch_dim
    B, D = math.prod(t.shape[:m]), math.prod(t.shape[m + 2:])
    R, C = t.shape[m:m + 2]
    Rb, Cb = t.blocksize
    kdt = np.dtype(np.float32) if dtype == np.float16 else dtype  # float16 accumulates in float32
    acc = out if kdt == dtype else out.astype(kdt)
    v = np.ascontiguousarray(values, dtype=kdt).reshape(B, t.nnz, Rb, Cb, D)
    c = t.compressed_indices()
    found = _dense_kernels.compressed_to_dense(c.reshape(B, c.shape[-1]), t.plain_indices().reshape(B, t.nnz), v,
                                               acc.reshape(B, R, C, D), t.layout.compressed_rows, True,
                                               num_threads(threads, v.size))
    if found is not None:
        raise_compressed_error(found, t.layout, t.shape[:m], t.plain_size, t.nnz, c)
    return acc if kdt == dtype else acc.astype(dtype)


def _rounded_divide(x: np.ndarray, y: np.ndarray, op: str) -> np.ndarray:
    """``x / y`` rounded down (``floor_divide``) or towards zero (``trunc_divide``); integers wrap
    (``-128 // -1`` of int8 is -128, as in PyTorch) and a divisor of 0 raises ZeroDivisionError."""
    if x.dtype.kind in "iu":
        if x.size and (y == 0).any():  # a scalar divisor of no element divides nothing
            raise ZeroDivisionError(f"{op} of {x.dtype} arrays: integer division by zero")
        with np.errstate(over="ignore"):
            q, r = np.divmod(x, y)
        if op == "trunc_divide":  # floor -> trunc: one up where the exact quotient is negative and inexact
            q += (r != 0) & ((x < 0) != (y < 0))
        return q
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.floor_divide(x, y) if op == "floor_divide" else np.trunc(np.true_divide(x, y))


_ELEMENTWISE = {"mul": np.multiply, "div": np.true_divide, "maximum": np.maximum, "minimum": np.minimum,
                "floor_divide": lambda x, y: _rounded_divide(x, y, "floor_divide"),
                "trunc_divide": lambda x, y: _rounded_divide(x, y, "trunc_divide")}


def elementwise(x: np.ndarray, y: np.ndarray, op: str, threads=None) -> np.ndarray:
    """``op`` ("mul", "div", "maximum", "minimum", "floor_divide", "trunc_divide") of two arrays of
    one shape and dtype."""
    return _ELEMENTWISE[op](x, y)


def diagonal(coo, offset: int, d1: int, d2: int, k: int, threads=None) -> np.ndarray:
    """The diagonal of COO ``coo`` (indices valid) over its sparse dims ``d1``, ``d2``: a dense
    array (other sparse dims, dense dims, ``k``), duplicates summed (``np.add.at``)."""
    shape = coo.shape
    sd = coo.sparse_dim
    other = [d for d in range(sd) if d not in (d1, d2)]
    other_shape = tuple(shape[d] for d in other)
    dense = shape[sd:]
    idx = coo.indices()
    on = idx[d2].astype(np.int64) - idx[d1] == offset
    pos = (idx[d1] if offset >= 0 else idx[d2])[on]
    flat = (np.ravel_multi_index(tuple(idx[d][on] for d in other), other_shape) if other
            else np.zeros(pos.shape, dtype=np.int64))
    out = np.zeros((math.prod(other_shape), k) + dense, dtype=coo.dtype)
    np.add.at(out, (flat, pos), coo.values()[on])
    out = out.reshape(other_shape + (k,) + dense)
    return np.moveaxis(out, len(other_shape), -1) if dense else out


def sum_axis(x: np.ndarray, axis: int, dtype, threads=None) -> np.ndarray:
    """``x`` summed over ``axis`` (dropped), as ``np.sum(x, axis, dtype=dtype)``."""
    return np.sum(x, axis=axis, dtype=dtype)


def flatten_coo(idx: np.ndarray, batch: tuple, M: int, K: int, batched_cols: bool, threads=None) -> np.ndarray:
    """The block-diagonal matrix of batched COO indices ``idx`` (``S, nnz``: the batch dims, the
    row when ``S >= 2``, the column; in bounds): int64 ``(2, nnz)`` rows ``b * M + i`` (0 for a
    vector) and columns ``b * K + k`` (``batched_cols``) or ``k``, ``b`` the row-major batch number."""
    idx = idx.astype(np.int64)
    S, n = idx.shape
    b = np.ravel_multi_index(tuple(idx[:S - 2]), batch) if S > 2 and n else np.zeros(n, np.int64)
    rows = b * M + idx[S - 2] if S >= 2 else b
    return np.stack([rows, b * K + idx[-1] if batched_cols else idx[-1]])


def reshape_coo(idx: np.ndarray, old_shape: tuple, new_shape: tuple, order: str, index_dtype,
                threads=None) -> np.ndarray:
    """COO indices ``idx`` (in bounds) over ``old_shape`` re-expressed over ``new_shape`` (the same
    element count) in C or F ``order``: ``(len(new_shape), nnz)`` of ``index_dtype`` (the op checked
    that the offsets fit an int64)."""
    n, T = idx.shape[1], len(new_shape)
    out = np.empty((T, n), index_dtype)
    if not (n and T):
        return out
    dims = range(len(old_shape)) if order == "C" else range(len(old_shape) - 1, -1, -1)
    key = np.zeros(n, np.int64)
    for d in dims:  # Horner's rule over the dims, the fastest-varying one last
        key *= old_shape[d]
        key += idx[d]
    last = range(T - 1, 0, -1) if order == "C" else range(T - 1)
    for d in last:  # the coordinates peeled off from the fastest-varying dim
        key, out[d] = np.divmod(key, new_shape[d])
    out[0 if order == "C" else T - 1] = key
    return out


def _as_4d(full: np.ndarray, shape4: tuple) -> np.ndarray:
    """``full`` reshaped to ``shape4`` without a copy when its strides allow it (a broadcast view
    usually does); else a contiguous copy."""
    try:
        return np.reshape(full, shape4, copy=False)
    except ValueError:
        return np.ascontiguousarray(full).reshape(shape4)


def _kernel_views(values: np.ndarray, out: np.ndarray, accumulate: bool):
    """The views a scatter kernel takes: raw for moves, arithmetic (float16 widened) for sums.

    Returns ``(values_view, out_view, widened)``; ``widened`` is a float32 buffer to copy
    back into ``out`` when ``out`` is float16 and the kernel accumulated.
    """
    if not accumulate:
        return raw_view(values), raw_view(out), None
    if out.dtype == np.float16:
        buf = np.zeros(out.shape, np.float32)
        return arith_view(values), buf, buf
    return arith_view(values), arith_view(out), None


def _repeats_possible(t) -> bool:
    """Whether ``t``, checked, sits on index arrays a caller may have written since: a repeat
    written into a checked row sums, as in unchecked input (to_dense does not check in full)."""
    return _tensor._any_held and held_outside(t)


def _compressed_to_dense(t: CompressedTensor, threads) -> np.ndarray:
    m = t.batch_dim
    batch = t.shape[:m]
    rows, cols = t.shape[m], t.shape[m + 1]
    rb, cb = t.blocksize
    B, D = math.prod(batch), math.prod(t.shape[m + 2:])
    out = np.zeros(t.shape, dtype=t.dtype)
    values = np.ascontiguousarray(t.values()).reshape(B, t.nnz, rb, cb, D)
    accumulate = not t.is_coalesced() or _repeats_possible(t)
    v, o, widened = _kernel_views(values, out.reshape(B, rows, cols, D), accumulate)
    c = t.compressed_indices().reshape(B, t.compressed_indices().shape[-1])
    p = t.plain_indices().reshape(B, t.nnz)
    # the kernel checks 5.3-5.5 as it scans, then 5.1/5.2 (O(batch): a caller may have written
    # them since a check, and a broken end drops entries without reading out of bounds)
    found = _dense_kernels.compressed_to_dense(c, p, v, o, t.layout.compressed_rows, accumulate,
                                               num_threads(threads, values.size), check_ends=True)
    if found is not None:
        raise_compressed_error(found, t.layout, batch, t.plain_size, t.nnz, c)
    if widened is not None:
        out[...] = widened.reshape(out.shape)
    return out


def _coo_to_dense(t: COOTensor, threads) -> np.ndarray:
    accumulate = not (t.is_coalesced() and t._checked) or _repeats_possible(t)  # an unchecked flag may hide duplicates
    t = t._on_private_indices()  # an entry's coordinates are checked, then read again to place it
    S = t.sparse_dim
    M, D = math.prod(t.shape[:S]), math.prod(t.shape[S:])
    out = np.zeros(t.shape, dtype=t.dtype)
    values = np.ascontiguousarray(t.values()).reshape(t.nnz, D)
    v, o, widened = _kernel_views(values, out.reshape(M, D), accumulate)
    shape = np.asarray(t.shape[:S], dtype=np.int64)
    found = _dense_kernels.coo_to_dense(t.indices(), v, shape, o, accumulate, num_threads(threads, values.size))
    if found is not None:
        raise_coo_error(found, t.shape)
    if widened is not None:
        out[...] = widened.reshape(out.shape)
    return out


def _dense_to_coo(a: np.ndarray, plan, threads) -> COOTensor:
    sparse, dense = plan.sparse, plan.dense
    M, D = math.prod(sparse), math.prod(dense)
    z = zero_test_view(a.reshape(M, D))
    r = raw_view(a.reshape(M, D))
    idx, v = _dense_kernels.dense_to_coo(z, r, np.asarray(sparse, dtype=np.int64), plan.index_dtype,
                                   num_threads(threads, a.size), float16=a.dtype == np.float16)
    values = v.view(a.dtype).reshape((idx.shape[1],) + dense)
    return COOTensor(idx, values, a.shape, coalesced=True, checked=True)


