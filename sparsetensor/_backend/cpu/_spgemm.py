"""Sparse @ sparse on the CPU (the ``spgemm`` kernel of :mod:`sparsetensor._backend.cpu`): the
row-parallel kernels of :mod:`sparsetensor._lib._spgemm` on rows-compressed operands. See
:func:`sparsetensor.ops.spgemm.spgemm` for the semantics; operands arrive resolved (one value
dtype, compressed, both blocked or neither, shapes and blocks that multiply)."""

from __future__ import annotations

import math

import numpy as np

from ..._core._canonical import ensure_both_valid
from ..._core._config import num_threads
from ..._lib import _spgemm as _kernels
from ..._lib._pool import _memory_bytes as _pool_memory_bytes
from ..._lib._pool import empty
from ..._core._tensor import CompressedTensor
from ._convert import transpose
from .._views import kernel_dtype, kernel_values, output_rows


def spgemm(a, b, threads=None):
    """``a @ b`` of two compressed tensors: csc @ csc (bsc @ bsc) as ``(B^T @ A^T)^T`` on transpose
    views, returning csc (bsc); otherwise a csc operand is transposed first and the result is csr (bsr)."""
    rows_a, rows_b = a.layout.compressed_rows, b.layout.compressed_rows
    if not rows_a and not rows_b:
        return _spgemm_rows(b.mT, a.mT, threads).mT  # (A @ B)^T = B^T @ A^T, csr views of csc operands
    if not rows_a:
        a = transpose(a, threads)
    if not rows_b:
        b = transpose(b, threads)
    return _spgemm_rows(a, b, threads)


def _spgemm_rows(a: CompressedTensor, b: CompressedTensor, threads) -> CompressedTensor:
    """csr @ csr or bsr @ bsr (shapes, dtypes and blocks checked by the caller)."""
    a, b = ensure_both_valid(a, b, threads, private="all")  # the kernels address by the plain indices
    idx_dt = a.index_dtype if a.index_dtype == b.index_dtype else np.dtype(np.int64)
    m = a.batch_dim
    batch = a.shape[:m]
    B = math.prod(batch)
    (Rb, Kb), (_, Cb) = a.blocksize, b.blocksize
    n = a.compressed_indices().shape[-1] - 1      # (block) rows of A
    ncols = b.plain_size                          # (block) columns of B
    if ncols > _MAX_COLUMNS:
        raise NotImplementedError(f"spgemm of a right operand with more than 2**32 (block) columns is not supported "
                                  f"(the kernels keep column offsets in 32 bits), got a {b.layout.name} tensor of shape {b.shape}")
    shape = batch + (a.shape[m], b.shape[m + 1])
    layout = a.layout
    dtype = a.dtype
    kdt, logical = kernel_dtype(dtype)
    ac = a.compressed_indices().astype(idx_dt, copy=False).reshape(B, n + 1)
    ap = a.plain_indices().astype(idx_dt, copy=False).reshape(B, a.nnz)
    bc = b.compressed_indices().astype(idx_dt, copy=False).reshape(B, b.compressed_indices().shape[-1])
    bp = b.plain_indices().astype(idx_dt, copy=False).reshape(B, b.nnz)
    nt = num_threads(threads, B * (a.nnz + b.nnz) * 8)
    av = kernel_values(a.values(), (B, a.nnz, Rb * Kb), kdt)
    bv = kernel_values(b.values(), (B, b.nnz, Kb * Cb), kdt)
    if not layout.blocked and a.nnz and b.nnz:
        prefix = empty(B * n + 1, dtype=np.int64)
        maxub = _kernels.spgemm_flops(ac, ap, bc, prefix, nt)
        room = int(prefix[-1])
        if room * (idx_dt.itemsize + kdt.itemsize) <= _FUSED_BYTES:
            return _spgemm_fused(ac, ap, av, bc, bp, bv, prefix, maxub, room, shape, batch, layout, dtype, kdt,
                                 logical, idx_dt, ncols, threads)
    counts = empty((B, n), dtype=np.int64)
    _kernels.spgemm_symbolic(ac, ap, bc, bp, ncols, counts, nt)
    nnz, oc = output_rows(counts, layout, idx_dt, f"spgemm of batched {layout.name} tensors", nrows=shape[m],
                          ncols=shape[m + 1])
    op = empty((B, nnz), dtype=idx_dt)
    ov = empty((B, nnz, Rb * Cb), dtype=kdt)
    _kernels.spgemm_numeric(ac, ap, av, bc, bp, bv, ncols, Rb, Kb, Cb, oc, op, ov, logical,
                            num_threads(threads, B * nnz * 4))
    values = ov.view(np.bool_) if logical else ov.astype(dtype, copy=False)
    values = values.reshape(batch + (nnz,) + ((Rb, Cb) if layout.blocked else ()))
    return CompressedTensor(oc.reshape(batch + (n + 1,)), op.reshape(batch + (nnz,)), values, shape, layout,
                            canonical=True)


# The kernels sort and index columns by their offset in a row's span in 32 bits.
_MAX_COLUMNS = 1 << 32


# The fused csr pass allocates room for every product (a bound on the entries), and its parts
# after the first write into buffers of their own that are copied into the output at the end;
# the output then shrinks in place (the pool keeps the block, its pages past the end given back
# lazily). It beat the two passes (symbolic count, then an exact output) on every structure
# measured (the docs' performance page). The room is bounded by a sixteenth of the memory the process may use and 1 GiB:
# beyond, the two passes, whose output holds only the entries.
_FUSED_BYTES = min(1 << 30, max(32 << 20, _pool_memory_bytes() // 16))


def _shrink(x: np.ndarray, n: int) -> np.ndarray:
    """The first n entries of a 1-d array that nothing else references (in place where NumPy can)."""
    if x.shape[0] == n:
        return x
    try:
        x.resize((n,), refcheck=False)  # realloc: shrinks without a copy
        return x
    except ValueError:
        return x[:n].copy()


def _spgemm_fused(ac, ap, av, bc, bp, bv, prefix, maxub, room, shape, batch, layout, dtype, kdt, logical, idx_dt,
                  ncols, threads) -> CompressedTensor:
    """csr @ csr in one pass (spgemm_fused) into arrays with room for every product."""
    B, n = ac.shape[0], ac.shape[1] - 1
    m = len(batch)
    counts = empty(B * n, dtype=np.int64)
    op = empty(room, dtype=idx_dt)
    ov = empty(room, dtype=kdt)
    av, bv = (x.reshape(B, math.prod(x.shape[1:])) for x in (av, bv))  # not -1: B may be 0
    total = _kernels.spgemm_fused(ac, ap, av, bc, bp, bv, ncols, prefix, maxub, counts,
                                  op, ov, logical, num_threads(threads, room * 4))
    nnz, oc = output_rows(counts.reshape(B, n), layout, idx_dt, f"spgemm of batched {layout.name} tensors",
                           nrows=shape[m], ncols=shape[m + 1])
    op, ov = _shrink(op, total), _shrink(ov, total)
    values = ov.view(np.bool_) if logical else ov.astype(dtype, copy=False)
    return CompressedTensor(oc.reshape(batch + (n + 1,)), op.reshape(batch + (nnz,)),
                            values.reshape(batch + (nnz,)), shape, layout, canonical=True)


