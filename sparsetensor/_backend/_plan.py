"""Shared planning, below both backends: what an op's result will be, decided once for every device.

The result dtype of mixed operands (the one value-dtype policy of :mod:`sparsetensor._core._dtypes`),
the shapes of a sparse @ dense product (NumPy's matmul rules, batch dims broadcast), the checks and
shape split of ``from_dense``, and the words that name an operand in an error. The ops
(``sparsetensor/ops``) call these before handing the work to a backend; the CUDA backend's own
entry points call the same ones, so both devices agree on every result and every message.
"""

from __future__ import annotations

import math
import operator
from typing import NamedTuple

import numpy as np

from .._core import _layout as L
from .._core._dtypes import VALUE_DTYPE_SET, VALUE_DTYPES, as_index_dtype, check_fits
from .._core._tensor import SparseTensor
from ._views import NO_BATCH

__all__ = ["result_dtype", "describe", "describe_shape", "mismatch", "batch_map", "batch_maps", "ProductShape",
           "product_shape", "as_blocksize", "DensePlan", "check_from_dense", "raise_factor_status", "index_slots"]


_RESULTS: dict = {}  # (dtypes) -> their result dtype, for the supported combinations


def result_dtype(op: str, *dtypes) -> np.dtype:
    rt = _RESULTS.get(dtypes)
    if rt is not None:
        return rt
    rt = np.result_type(*dtypes)
    if rt not in VALUE_DTYPE_SET:
        raise TypeError(f"{op}: unsupported dtype combination {', '.join(str(np.dtype(d)) for d in dtypes)} "
                        f"(result {rt})")
    _RESULTS[dtypes] = rt
    return rt


def describe_shape(x) -> str:
    return describe(x, dtype=False)


def mismatch(op: str, a, b, why: str) -> ValueError:
    return ValueError(f"{op}: cannot multiply a {describe_shape(a)} by a {describe_shape(b)}: {why}")


def batch_map(batch: tuple, out_batch: tuple) -> np.ndarray:
    """For each batch of ``out_batch`` (flat), the flat index of the batch of ``batch`` it reads."""
    B = math.prod(batch)
    if batch == out_batch:
        return np.arange(B, dtype=np.int64)
    if B == 1:
        return np.zeros(math.prod(out_batch), dtype=np.int64)
    return np.ascontiguousarray(np.broadcast_to(np.arange(B, dtype=np.int64).reshape(batch), out_batch)).ravel()


def batch_maps(s_batch: tuple, d_batch: tuple, op, operands):
    """(output batch shape, sparse batch map, dense batch map): NumPy broadcasting of batch dims."""
    if not s_batch and not d_batch:
        return (), NO_BATCH, NO_BATCH
    try:
        out_batch = np.broadcast_shapes(s_batch, d_batch)
    except ValueError:
        raise mismatch(op, *operands, f"batch shapes {s_batch} and {d_batch} do not broadcast") from None
    return out_batch, batch_map(s_batch, out_batch), batch_map(d_batch, out_batch)


class ProductShape(NamedTuple):
    """The shapes of ``S @ D`` (sparse @ dense), resolved once for every device: NumPy's matmul
    rules, a 1-d ``D`` being a vector, batch dims broadcast."""

    out_shape: tuple  # the result's shape
    out_batch: tuple
    sb: np.ndarray  # int64 (B_out,): the batch of S each output batch reads
    db: np.ndarray  # int64 (B_out,): the batch of D each output batch reads
    M: int
    K: int
    N: int  # 1 for a vector


def product_shape(S, D, op: str, operands, transposed: bool = False) -> ProductShape:
    """The :class:`ProductShape` of sparse ``S`` (no dense dims) times dense ``D`` (anything with
    ``shape``), or the ``ValueError`` naming both of the user's ``operands`` (``transposed``: the
    user asked for ``D.mT @ S.mT``)."""
    d_shape = tuple(D.shape)
    if not d_shape:
        raise mismatch(op, *operands, "matmul needs at least 1-d operands")
    m = S.batch_dim
    s_batch, (M, K) = S.shape[:m], S.shape[m:m + 2]
    vector = len(d_shape) == 1
    d_batch, Kd, N = ((), d_shape[0], 1) if vector else (d_shape[:-2], d_shape[-2], d_shape[-1])
    if Kd != K:
        raise mismatch(op, *operands, f"inner sizes differ ({Kd} != {K})" if transposed
                        else f"inner sizes differ ({K} != {Kd})")
    out_batch, sb, db = batch_maps(s_batch, d_batch, op, operands)
    return ProductShape(out_batch + ((M,) if vector else (M, N)), out_batch, sb, db, M, K, N)


def as_blocksize(blocksize, layout: L.Layout) -> tuple:
    if blocksize is None:
        if layout.blocked:
            raise ValueError(f"from_dense to {layout.name} needs blocksize=(rows, cols)")
        return (1, 1)
    bs = L.as_blocksize(blocksize)
    if not layout.blocked and bs != (1, 1):
        raise ValueError(f"blocksize={bs} given for layout {layout.name}; use bsr/bsc for blocks")
    return bs


class DensePlan(NamedTuple):
    """What :func:`check_from_dense` derives from a dense shape: the target layout and index
    dtype, and the shape split into ``batch + sparse + dense`` (``blocksize`` (1, 1) for
    csr/csc and coo)."""

    layout: L.Layout
    index_dtype: np.dtype
    batch: tuple
    sparse: tuple
    dense: tuple
    blocksize: tuple


def check_from_dense(shape: tuple, dtype, layout, blocksize, dense_dim, batch_dim, index_dtype) -> DensePlan:
    """The argument checks of ``from_dense``, shared by the CPU and CUDA sides (ValueError for
    shapes and arguments, TypeError for dtypes)."""
    layout = L.as_layout(layout)
    if layout is L.strided:
        raise ValueError("from_dense needs a sparse layout, got strided")
    if dtype not in VALUE_DTYPE_SET:
        raise TypeError(f"unsupported value dtype {dtype}; supported: {', '.join(map(str, VALUE_DTYPES))}")
    idx_dt = as_index_dtype(index_dtype)
    dense_dim, batch_dim = operator.index(dense_dim), operator.index(batch_dim)
    if dense_dim < 0 or batch_dim < 0:
        raise ValueError(f"dense_dim and batch_dim must be >= 0, got {dense_dim} and {batch_dim}")
    ndim = len(shape)
    if layout is L.sparse_coo:
        if blocksize is not None:
            raise ValueError("blocksize is not defined for layout coo")
        if dense_dim > ndim:
            raise ValueError(f"dense_dim={dense_dim} exceeds the array's {ndim} dims")
        S = ndim - dense_dim
        check_fits(idx_dt, "coo", **{f"size[{d}]": shape[d] for d in range(S)})
        return DensePlan(layout, idx_dt, (), tuple(shape[:S]), tuple(shape[S:]), (1, 1))
    need = batch_dim + 2 + dense_dim
    if ndim != need:
        raise ValueError(f"from_dense to {layout.name} with batch_dim={batch_dim}, dense_dim={dense_dim} needs a "
                         f"{need}-d array (batch + 2 sparse + dense), got {ndim}-d with shape {tuple(shape)}")
    bs = as_blocksize(blocksize, layout)
    m = batch_dim
    rows, cols = shape[m:m + 2]
    if rows % bs[0] or cols % bs[1]:
        raise ValueError(f"blocksize {bs} must divide the sparse sizes ({rows}, {cols})")
    check_fits(idx_dt, layout.name, nrows=rows, ncols=cols, nnz=(rows // bs[0]) * (cols // bs[1]))
    return DensePlan(layout, idx_dt, tuple(shape[:m]), (rows, cols), tuple(shape[m + 2:]), bs)


def _where(x) -> str:
    device = getattr(x, "device", None)
    return f" on {device}" if isinstance(device, str) and device.startswith("cuda") else ""


def describe(x, *, dtype: bool = True) -> str:
    """A sparse tensor, dense array or scalar operand, in words (for error messages); with
    ``dtype=False`` the layout (or "dense array") and shape only. Tensors and arrays on a
    CUDA device say so."""
    if isinstance(x, SparseTensor):
        if not dtype:
            return f"{x.layout.name} tensor of shape {tuple(x.shape)}{_where(x)}"
        extra = f", blocksize={x.blocksize}" if x.layout.blocked else ""
        return f"{x.layout.name} tensor of shape {tuple(x.shape)} ({x.dtype}{extra}){_where(x)}"
    if not dtype:
        return f"dense array of shape {tuple(x.shape) if hasattr(x, 'shape') else np.shape(x)}{_where(x)}"
    if not isinstance(x, np.ndarray) and hasattr(x, "shape") and hasattr(x, "dtype") and len(x.shape):
        return f"dense array of shape {tuple(x.shape)} ({x.dtype}){_where(x)}"  # a device array
    if isinstance(x, np.ndarray) and x.ndim:
        return f"dense array of shape {x.shape} ({x.dtype})"
    return f"scalar {x!r}"


# -- incomplete factorizations and triangular solves (sparsetensor.ops.factor) --------------
# Both backends' kernels report a status with a row (sparsetensor/_lib/_ilu.pyx, kernels/factor.cu):
# 0 ok, 1 zero pivot, 2 missing diagonal, 3 not positive, 4 an index changed, 5 not lower.


def raise_factor_status(status: int, row: int, what: str, kind: str) -> None:
    """Raise the error of a factor kernel's ``status`` at ``row`` (nothing for 0); ``kind`` names the
    factor whose pivot is tested (``"U"``, ``"L"``, or ``"A"`` for a solve)."""
    if status == 0:
        return
    from numpy.linalg import LinAlgError

    if status == 1:
        raise LinAlgError(f"{what}: zero pivot at row {row}: {kind}[{row}, {row}] is 0 (the {kind} factor is "
                          "singular; a matrix with a zero or tiny diagonal may need reordering or another "
                          "preconditioner)")
    if status == 2:
        raise LinAlgError(f"{what}: row {row} has no diagonal entry in its pattern, so the factor would be "
                          f"singular (store an explicit diagonal, even 0, to factor it)")
    if status == 3:
        raise LinAlgError(f"{what}: the pivot of row {row} is not positive: the matrix is not Hermitian "
                          "positive definite, or IC(0) broke down on it (try ilu0)")
    if status == 5:
        raise ValueError(f"{what}: row {row} has an entry above the diagonal (expected a lower triangle)")
    raise ValueError(f"{what}: an index of row {row} is out of range, or names a row not done before it: the "
                     "arrays changed after validation")


def by_slots(n_index: int, n_coords: int, size: int) -> bool:
    """Whether a selection by ``n_index`` positions of ``n_coords`` coordinates along a dim of
    ``size`` maps slots (:func:`index_slots`) rather than every coordinate of the dim."""
    return size > 4 * (n_index + n_coords) + (1 << 16)


def index_slots(index: np.ndarray, n_coords: int, size: int):
    """How a selection by host ``index`` of ``n_coords`` entries along a dim of ``size`` maps coordinates:
    None where a map over every coordinate is cheap; else ``(u, slots)``, the index's sorted distinct
    values and each index position's slot among them. A map of ``size + 1`` counts would be most of
    the time and memory where the dim dwarfs the index and the entries (16 GiB for a dim of 2^31):
    value ``u[i]`` is slot 2i + 1 and a coordinate between ``u[i - 1]`` and ``u[i]`` (selected by none)
    slot 2i, so that slots keep the coordinates' order; the map then covers 2 len(u) + 1 slots."""
    if not by_slots(index.size, n_coords, size):
        return None
    if index.size and not (0 <= int(index.min()) and int(index.max()) < size):
        raise ValueError(f"build_map: an index is outside [0, {size})")
    u = np.unique(index).astype(np.int64)
    return u, 2 * np.searchsorted(u, index) + 1
