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

Three methods (kernels/spgemm.cu), each summing each output entry's products in the order of
a's entries, then b's (the CPU's order), so the result does not depend on the method:

- **A warp a row** (csr, rows of at most 1024 products, columns below 2**32 - 1): the row's
  product columns go into a hash table in shared memory; a first pass counts its distinct
  columns (the exact row lengths, whose scan gives the row pointers), a second forms the
  products again, sorts the columns (a bitonic sort by the warp) and adds the products entry of
  a by entry of a (the lanes of one entry meet distinct columns of b's row: no atomics on the
  sums). No product is stored: memory is the output's.
- **A block a row over a dense row** (csr rows of more than 1024 products): each block holds a
  bitmap of b's columns and a row of as many sums; the row's products set their columns' bits
  (whose counts are the row's length), then are added into the dense row entry of a by entry of
  a, and the marked columns are written in increasing order. No product is stored, so no row is
  too long; memory is the blocks' rows, at most :data:`_DENSE_BYTES` in all (fewer blocks for
  wider products, each taking its share of the long rows in turn).
- **Expand, sort, compress** (ESC) for blocks, for the rows of more products where one dense
  row would take more than that room (only their products: the other entries of a count
  none) and when every row is such a row: every
  product ``a[i, k] * b[k, j]`` gets one u64 key ``(batch * n + i) * ncols + j``; the device
  radix sort (kernels/sort.cu, stable) orders them, runs of equal keys are the output entries
  (the scan of their heads gives the exact nnz and the row pointers at once), and each output
  item sums its run. The work is balanced however long the rows are (the products, not the
  rows, are spread over the threads); the price is memory, about 56 bytes a product while the
  sort runs, and a sort pass for each 8 bits of the key. The long rows' entries are then placed
  among the others.

Limits (refused before anything is written): a key space ``batch * n * ncols`` beyond
2**64 (NotImplementedError), more than :data:`MAX_PRODUCTS` products to sort
(NotImplementedError: their keys would not fit a GPU's memory; the message gives the count).
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._tensor import CompressedTensor
from ...cuda import _primitives as P
from ...cuda._module import grid_for, launch
from .._views import output_rows
from ._coalesce import _runs, _starts, checked
from ._convert import transpose_compressed

__all__ = ["spgemm", "MAX_PRODUCTS"]

_U64_SPAN = 1 << 64
_ROW_HASH, _HASH_BLOCK = 1024, 4 * 32   # ROW_HASH and 32 * HASH_WARPS of spgemm.cu
_HASH_EMPTY = 0xFFFFFFFF                # HASH_EMPTY: every column must be below it
_DENSE_THREADS = 256                    # DENSE_THREADS of spgemm.cu
_DENSE_BYTES = 1 << 30                  # the long rows' dense rows and bitmaps, all blocks together
# About 56 bytes a product while the sort runs (keys and permutation, twice, the run heads and
# their scan): 2**31 products take 120 GB, beyond the memory of today's GPUs.
MAX_PRODUCTS = 1 << 31


def spgemm(a, b):
    """``a @ b`` of two device compressed tensors (see the module docstring)."""
    rows_a, rows_b = a.layout.compressed_rows, b.layout.compressed_rows
    if not rows_a and not rows_b:
        return _spgemm_rows(b.mT, a.mT).mT  # (A @ B)^T = B^T @ A^T, csr views of csc operands
    a, b = checked(a), checked(b)
    if not rows_a:  # (kept from the same arrays' second product on, as the dense products')
        a = transpose_compressed(a, keep=True)
    if not rows_b:
        b = transpose_compressed(b, keep=True)
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


class _Product:
    """The operands of one device product as its kernels take them (csr/bsr, one index dtype)."""

    def __init__(self, a, b, idx_dt):
        self.a, self.b, self.idx_dt = a, b, idx_dt
        self.dev = a.values()._device
        m = a.batch_dim
        self.batch = a.shape[:m]
        self.B = math.prod(self.batch)
        (self.Rb, self.Kb), (_, self.Cb) = a.blocksize, b.blocksize
        self.n = a.compressed_indices().shape[-1] - 1     # (block) rows of a
        self.nb = b.compressed_indices().shape[-1] - 1    # (block) rows of b
        self.ncols = b.plain_size                         # (block) columns of b
        self.shape = self.batch + (a.shape[m], b.shape[m + 1])
        self.layout, self.dtype = a.layout, a.dtype
        self.blocks = (self.Rb, self.Cb) if self.layout.blocked else ()
        self.ik = (P.index_key(idx_dt),)
        self.N, self.nnza, self.nnzb = self.B * a.nnz, a.nnz, b.nnz
        self.ac, self.ap, self.av = a.compressed_indices(), a.plain_indices(), _raw(a.values())
        self.bc, self.bp, self.bv = b.compressed_indices(), b.plain_indices(), _raw(b.values())

    def batch_nnz(self, ptr) -> int:
        """Every batch's nnz from the flat row pointers, which must be one (the CPU's check and
        message, output_rows, on the B per-batch counts)."""
        B, n, m = self.B, self.n, self.a.batch_dim
        per_batch = np.diff(P.read_ints(self.dev, P.take_strided(self.dev, ptr, n, B + 1)))
        nnz, _ = output_rows(per_batch.reshape(B, 1), self.layout, self.idx_dt,
                             f"spgemm of batched {self.layout.name} tensors", nrows=self.shape[m],
                             ncols=self.shape[m + 1])
        return nnz

    def result(self, ptr, plain, values, nnz) -> CompressedTensor:
        """The product from its flat row pointers (int64, every batch's rows in turn), plain
        indices and values."""
        batch, n = self.batch, self.n
        comp = P.batch_offsets(self.dev, ptr, self.B, n, 1, self.idx_dt)
        return CompressedTensor(comp.reshape(batch + (n + 1,)), plain.reshape(batch + (nnz,)),
                                values.reshape(batch + (nnz,) + self.blocks), self.shape, self.layout, True)


def _spgemm_rows(a, b) -> CompressedTensor:
    """csr @ csr or bsr @ bsr on the device (shapes, dtypes and blocks checked by the op)."""
    a, b = checked(a), checked(b)
    idx_dt = a.index_dtype if a.index_dtype == b.index_dtype else np.dtype(np.int64)
    o = _Product(a._with_index_dtype(idx_dt), b._with_index_dtype(idx_dt), idx_dt)
    dev, B, n, ncols, N = o.dev, o.B, o.n, o.ncols, o.N
    if B * n * ncols > _U64_SPAN:
        raise NotImplementedError(f"spgemm on cuda: {B} batch(es) x {n} (block) rows x {ncols} (block) columns of the "
                                  f"product exceed a 64-bit key (a {a.layout.name} {a.shape} @ {b.layout.name} "
                                  f"{b.shape}); run it on the host with .cpu()")
    if N * min(o.nnzb, ncols) >= 1 << 63:  # a bound on the products: their count must fit int64
        raise NotImplementedError(f"spgemm on cuda: {N} entries of a times rows of up to {min(o.nnzb, ncols)} "
                                  "entries of b could form more than 2**63 products")
    nprod = 0
    if N and o.nnzb:
        counts = P.empty(dev, (N,), np.int64)
        P.run(dev, "spgemm.cu", "spgemm_counts", o.ik, N, o.ap, B, o.nnza, o.bc, o.nb, counts)
        offsets = P.exclusive_scan(dev, counts)
        nprod = int(P.read_ints(dev, offsets[N:N + 1])[0])
    if nprod == 0:
        m = a.batch_dim
        output_rows(np.zeros((B, 1), np.int64), o.layout, idx_dt, "spgemm", nrows=o.shape[m], ncols=o.shape[m + 1])
        return o.result(P.zeros(dev, (B * n + 1,), np.int64), P.empty(dev, (0,), idx_dt),
                        P.empty(dev, (0,) + o.blocks, o.dtype), 0)
    if not o.layout.blocked and ncols < _HASH_EMPTY:
        out = _by_rows(o, offsets, nprod)
        if out is not None:
            return out
    rows = _entry_rows(o)
    sorted_rows = _sorted(o, offsets, rows, nprod)
    ptr = sorted_rows[0]
    return o.result(ptr, *sorted_rows[2:], o.batch_nnz(ptr))


def _entry_rows(o):
    """b * n + the row of every entry of a (over every batch)."""
    rows = P.empty(o.dev, (o.N,), np.int64)
    P.run(o.dev, "spgemm.cu", "spgemm_entry_rows", o.ik, o.N, o.ac, o.B, o.n, o.nnza, rows)
    return rows


def _sorted(o, offsets, rows, nprod):
    """Expand-sort-compress of the products that ``offsets`` (an exclusive scan of the products
    of each entry of a, ``nprod`` in all) gives: ``(ptr, row_keys, plain, values)``, the flat row
    pointers (every row of every batch), each entry's row (b * n + r), its column and value."""
    dev, ik = o.dev, o.ik
    if nprod > MAX_PRODUCTS:
        raise NotImplementedError(f"spgemm on cuda: the product forms {nprod} intermediate products, more than "
                                  f"{MAX_PRODUCTS} (the expand-sort-compress method keeps about 56 bytes a product on "
                                  "the device); split an operand (narrow) or run it on the host with .cpu()")
    keys = P.empty(dev, (nprod,), np.uint64)
    P.run(dev, "spgemm.cu", "spgemm_expand", ik, nprod, offsets, o.N, rows, o.ap, o.nnza, o.bc, o.bp, o.nb, o.nnzb,
          o.ncols, nprod, keys)
    sorted_keys, perm = P.radix_sort(dev, keys, (o.B * o.n * o.ncols - 1).bit_length())
    scan, nout = _runs(dev, sorted_keys, nprod)  # one output entry a run of equal keys
    starts = _starts(dev, scan, nprod, nout)
    row_keys = P.empty(dev, (nout,), np.uint64)
    plain = P.empty(dev, (nout,), o.idx_dt)
    P.run(dev, "convert.cu", "split_keys", ik, nout, sorted_keys, starts, nout, o.ncols, row_keys, plain)
    ptr = P.empty(dev, (o.B * o.n + 1,), np.int64)
    P.run(dev, "scan.cu", "lower_bounds", (), o.B * o.n + 1, row_keys, nout, o.B * o.n, ptr)
    values = P.empty(dev, (nout,) + o.blocks, o.dtype)
    kernel, vkey, extra = _value_kernel(o.dtype)
    P.run(dev, "spgemm.cu", kernel, (vkey,) + ik, nout * o.Rb * o.Cb, perm, starts, nout, offsets, o.N, o.ap, o.av,
          o.nnza, o.bc, o.bv, o.nb, o.nnzb, o.Rb, o.Kb, o.Cb, *extra, _raw(values))
    return ptr, row_keys, plain, values


def _dense_blocks(o, nlong: int) -> int:
    """Blocks of spgemm_dense_* for ``nlong`` long rows: each holds a bitmap and a row of sums
    of ``o.ncols`` columns, all of them at most _DENSE_BYTES (0: one block's row is more, and the
    long rows are sorted instead)."""
    per_block = 4 * -(-o.ncols // 32) + o.ncols * P.acc_dtype(o.dtype).itemsize
    return min(nlong, 2 * o.dev.sm_count, _DENSE_BYTES // max(1, per_block))


def _by_rows(o, offsets, nprod: int):
    """csr @ csr a warp a row (kernels spgemm_hash_*: a row's columns in a hash table in shared
    memory, no product stored); the rows of more than ROW_HASH products, if any, a block a row
    over a dense row of sums (spgemm_dense_*), or by :func:`_sorted` over their products alone
    where a dense row would take too much room, placed among the others. None when every row is
    such a row to sort (the caller sorts them all)."""
    dev, ik, B, n, nnza, nnzb = o.dev, o.ik, o.B, o.n, o.nnza, o.nnzb
    counts = P.empty(dev, (B * n,), np.int64)
    too_long = P.zeros(dev, (2,), np.uint64)
    long_list = P.empty(dev, (max(1, min(B * n, nprod // (_ROW_HASH + 1))),), np.int64)
    grid = grid_for(dev, B * n * 32, _HASH_BLOCK)
    launch(dev, "spgemm.cu", "spgemm_hash_count", ik, grid, _HASH_BLOCK, o.ac, o.ap, B, n, nnza, o.bc, o.bp, o.nb,
           nnzb, offsets, counts, too_long, long_list)
    nlong, long_rows = (int(x) for x in P.read_ints(dev, too_long))
    G = _dense_blocks(o, long_rows) if long_rows else 0
    if long_rows == B * n and not G:
        return None
    long = dense = None
    if G:
        nwords = -(-o.ncols // 32)
        bitmaps = P.zeros(dev, (G * nwords,), np.uint32)
        launch(dev, "spgemm.cu", "spgemm_dense_count", ik, G, _DENSE_THREADS, o.ac, o.ap, n, nnza, o.bc, o.bp, o.nb,
               nnzb, offsets, long_list, long_rows, bitmaps, nwords, o.ncols, counts)
        dense = (long_list, long_rows, bitmaps, nwords, o.ncols, P.empty(dev, (G * o.ncols,), P.acc_dtype(o.dtype)))
    elif nlong:  # the long rows' products alone (every other entry of a counts none), sorted
        rows = _entry_rows(o)
        masked = P.empty(dev, (o.N,), np.int64)
        P.run(dev, "spgemm.cu", "spgemm_long_entries", (), o.N, offsets, rows, counts, o.N, masked)
        long_offsets = P.exclusive_scan(dev, masked)
        long = _sorted(o, long_offsets, rows, nlong)
        P.run(dev, "spgemm.cu", "spgemm_long_counts", (), B * n, long[0], B * n, counts)
    ptr = P.exclusive_scan(dev, counts)
    nnz = o.batch_nnz(ptr)
    dtype = o.dtype
    plain = P.empty(dev, (B * nnz,), o.idx_dt)
    values = P.empty(dev, (B * nnz,), dtype)
    wide = P.acc_dtype(dtype)
    accum = _raw(values) if wide == dtype else P.empty(dev, (B * nnz,), wide)
    vk = (P.arith_key(o.av.dtype, "spgemm"),) + ik
    launch(dev, "spgemm.cu", "spgemm_hash_fill", vk, grid, _HASH_BLOCK, o.ac, o.ap, o.av, B, n, nnza, o.bc, o.bp, o.bv,
           o.nb, nnzb, offsets, ptr, plain, accum)
    if dense is not None:
        launch(dev, "spgemm.cu", "spgemm_dense_fill", vk, G, _DENSE_THREADS, o.ac, o.ap, o.av, n, nnza, o.bc, o.bp,
               o.bv, o.nb, nnzb, offsets, *dense, ptr, plain, accum)
    if accum.dtype != dtype:
        P.run(dev, "spgemm.cu", "spgemm_hash_finish", (_raw(values).dtype.name,), B * nnz, accum, B * nnz,
              int(dtype == np.bool_), _raw(values))
    if long is not None:
        lptr, lrows, lplain, lvalues = long
        P.run(dev, "spgemm.cu", "spgemm_place_long", ik + (P.raw_key(dtype.itemsize),), lplain.size, lrows, lptr,
              ptr, lplain.size, lplain, _raw(lvalues), plain, _raw(values))
    return o.result(ptr, plain, values, nnz)
