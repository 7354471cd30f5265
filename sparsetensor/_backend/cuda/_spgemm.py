"""Sparse @ sparse on the device (the ``spgemm`` kernel of :mod:`sparsetensor._backend.cuda`), with
the semantics of the CPU's (:mod:`sparsetensor._backend.cpu._spgemm`,
:func:`sparsetensor.ops.spgemm.spgemm`): operands arrive resolved (one value dtype, compressed,
both blocked or neither, shapes and blocks that multiply, equal batch shapes).

Layouts as on the CPU: csc @ csc (bsc @ bsc) is ``(B^T @ A^T)^T`` on the transpose views and
gives csc (bsc); otherwise a csc/bsc operand is transposed on the device (a radix sort) and
the result is csr (bsr). The result has the structural pattern of the product (an entry
wherever some product is formed, also where values cancel to zero: the CPU keeps those
too), sorted plain indices, every value dtype (integers wrap, bool is an or of ands,
float16 sums in float32 and rounds once), the operands' index dtype (int64 when they differ).

Method: expand, sort, compress (ESC, kernels/spgemm.cu). Every product ``a[i, k] * b[k, j]``
gets one u64 key ``(batch * n + i) * ncols + j``; the device radix sort (kernels/sort.cu,
stable) orders them, runs of equal keys are the output entries (the scan of their heads
gives the exact nnz and the row pointers at once), and each output item sums its run in
the order of a's entries, then b's (the CPU's order). Chosen over a per-row hash table
because every step is a kernel the backend already has and tests (sort, run heads, scans,
lower bounds), the work is balanced however long the rows are (the products, not the
rows, are spread over the threads), and the output comes out sorted with no per-row
sort; the price is memory, about 56 bytes a product while the sort runs, and a sort
pass for each 8 bits of the key.

Limits (refused before anything is written): a key space ``batch * n * ncols`` beyond
2**64 (NotImplementedError), more than :data:`MAX_PRODUCTS` products (NotImplementedError:
their keys would not fit a GPU's memory; the message gives the count).
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._tensor import CompressedTensor
from ...cuda import _primitives as P
from .._views import output_rows
from ._coalesce import _runs, _starts, checked
from ._convert import transpose_compressed

__all__ = ["spgemm", "MAX_PRODUCTS"]

_U64_SPAN = 1 << 64
# About 56 bytes a product while the sort runs (keys and permutation, twice, the run heads and
# their scan): 2**31 products take 120 GB, beyond the memory of today's GPUs.
MAX_PRODUCTS = 1 << 31


def spgemm(a, b):
    """``a @ b`` of two device compressed tensors (see the module docstring)."""
    rows_a, rows_b = a.layout.compressed_rows, b.layout.compressed_rows
    if not rows_a and not rows_b:
        return _spgemm_rows(b.mT, a.mT).mT  # (A @ B)^T = B^T @ A^T, csr views of csc operands
    a, b = checked(a), checked(b)
    if not rows_a:
        a = transpose_compressed(a)
    if not rows_b:
        b = transpose_compressed(b)
    return _spgemm_rows(a, b)


def _value_kernel(dtype: np.dtype):
    """(kernel, key, extra launch arguments) summing products of ``dtype`` values."""
    if dtype.kind in "fc":
        return "spgemm_values", P.value_key(dtype, "spgemm"), ()
    if dtype == np.bool_:
        return "spgemm_values_int", "uint8", (1,)
    return "spgemm_values_int", dtype.name, (0,)


def _raw(v):
    """Values as the kernels take them (bool as uint8: the same bytes)."""
    return v.view(np.uint8) if v.dtype == np.bool_ else v


def _spgemm_rows(a, b) -> CompressedTensor:
    """csr @ csr or bsr @ bsr on the device (shapes, dtypes and blocks checked by the op)."""
    a, b = checked(a), checked(b)
    idx_dt = a.index_dtype if a.index_dtype == b.index_dtype else np.dtype(np.int64)
    a, b = a._with_index_dtype(idx_dt), b._with_index_dtype(idx_dt)
    dev = a.values()._device
    m = a.batch_dim
    batch = a.shape[:m]
    B = math.prod(batch)
    (Rb, Kb), (_, Cb) = a.blocksize, b.blocksize
    n = a.compressed_indices().shape[-1] - 1     # (block) rows of a
    nb = b.compressed_indices().shape[-1] - 1    # (block) rows of b
    ncols = b.plain_size                         # (block) columns of b
    shape = batch + (a.shape[m], b.shape[m + 1])
    layout, dtype = a.layout, a.dtype
    kernel, vkey, extra = _value_kernel(dtype)
    ik = (P.index_key(idx_dt),)
    span = B * n * ncols
    if span > _U64_SPAN:
        raise NotImplementedError(f"spgemm on cuda: {B} batch(es) x {n} (block) rows x {ncols} (block) columns of the "
                                  f"product exceed a 64-bit key (a {a.layout.name} {a.shape} @ {b.layout.name} "
                                  f"{b.shape}); run it on the host with .cpu()")
    N, nnzb = B * a.nnz, b.nnz
    if N * min(nnzb, ncols) >= 1 << 63:  # a bound on the products: their count must fit int64
        raise NotImplementedError(f"spgemm on cuda: {N} entries of a times rows of up to {min(nnzb, ncols)} entries "
                                  "of b could form more than 2**63 products")
    ac, ap, av = a.compressed_indices(), a.plain_indices(), _raw(a.values())
    bc, bp, bv = b.compressed_indices(), b.plain_indices(), _raw(b.values())
    nprod = 0
    if N and nnzb:
        counts = P.empty(dev, (N,), np.int64)
        P.run(dev, "spgemm.cu", "spgemm_counts", ik, N, ap, B, a.nnz, bc, nb, counts)
        offsets = P.exclusive_scan(dev, counts)
        nprod = int(P.read_ints(dev, offsets[N:N + 1])[0])
    if nprod > MAX_PRODUCTS:
        raise NotImplementedError(f"spgemm on cuda: the product forms {nprod} intermediate products, more than "
                                  f"{MAX_PRODUCTS} (the expand-sort-compress method keeps about 56 bytes a product on "
                                  "the device); split an operand (narrow) or run it on the host with .cpu()")
    blocks = (Rb, Cb) if layout.blocked else ()
    if nprod == 0:
        output_rows(np.zeros((B, 1), np.int64), layout, idx_dt, "spgemm", nrows=shape[m], ncols=shape[m + 1])
        return CompressedTensor(P.zeros(dev, batch + (n + 1,), idx_dt), P.empty(dev, batch + (0,), idx_dt),
                                P.empty(dev, batch + (0,) + blocks, dtype), shape, layout, True)
    rows = P.empty(dev, (N,), np.int64)
    P.run(dev, "spgemm.cu", "spgemm_entry_rows", ik, N, ac, B, n, a.nnz, rows)
    keys = P.empty(dev, (nprod,), np.uint64)
    P.run(dev, "spgemm.cu", "spgemm_expand", ik, nprod, offsets, N, rows, ap, a.nnz, bc, bp, nb, nnzb, ncols, nprod,
          keys)
    sorted_keys, perm = P.radix_sort(dev, keys, (span - 1).bit_length())
    scan, nout = _runs(dev, sorted_keys, nprod)  # one output entry a run of equal keys
    starts = _starts(dev, scan, nprod, nout)
    row_keys = P.empty(dev, (nout,), np.uint64)
    plain = P.empty(dev, (nout,), idx_dt)
    P.run(dev, "convert.cu", "split_keys", ik, nout, sorted_keys, starts, nout, ncols, row_keys, plain)
    ptr = P.empty(dev, (B * n + 1,), np.int64)
    P.run(dev, "scan.cu", "lower_bounds", (), B * n + 1, row_keys, nout, B * n, ptr)
    # every batch must have one nnz: the CPU's check and message (output_rows) on the B per-batch counts
    per_batch = np.diff(P.read_ints(dev, P.take_strided(dev, ptr, n, B + 1)))
    nnz, _ = output_rows(per_batch.reshape(B, 1), layout, idx_dt, f"spgemm of batched {layout.name} tensors",
                         nrows=shape[m], ncols=shape[m + 1])
    comp = P.batch_offsets(dev, ptr, B, n, 1, idx_dt)
    values = P.empty(dev, (nout,) + blocks, dtype)
    P.run(dev, "spgemm.cu", kernel, (vkey,) + ik, nout * Rb * Cb, perm, starts, nout, offsets, N, ap, av, a.nnz, bc,
          bv, nb, nnzb, Rb, Kb, Cb, *extra, _raw(values))
    return CompressedTensor(comp.reshape(batch + (n + 1,)), plain.reshape(batch + (nnz,)),
                            values.reshape(batch + (nnz,) + blocks), shape, layout, True)
