"""Coalescing: sort indices and sum duplicates, for COO and the compressed layouts.

``coalesce`` (COO) linearises each index column to an int64 key, row-major over
the sparse shape, and sorts (key, position) pairs (scalar values of at most 8 bytes
travel in place of the positions): keys of at most 32 bits below their top radix
digit by a bucket sort (one scatter pass into cache-sized buckets, each sorted in
cache), wider ones by a parallel LSD radix sort; when the shape is too large for
int64 keys it falls back to a comparison sort (:func:`numpy.lexsort`).
``sum_duplicates`` (csr/csc/bsr/bsc) sorts each row's plain indices. Both then
reduce each run of equal indices in parallel. The kernels live in
:mod:`sparsetensor._lib._coalesce` and :mod:`sparsetensor._lib._sum_duplicates`.

Values are reduced in their own dtype (integers wrap as in NumPy), except bool
(logical or) and float16 (summed in float32, rounded once). Duplicates are
summed in their order in the input.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._config import num_threads
from ..._lib import _coalesce as _kernels
from ..._lib import _sum_duplicates as _row_kernels
from ..._core._tensor import COOTensor, CompressedTensor
from ..._core._validate import raise_compressed_error, raise_coo_error

__all__ = ["coalesce", "sum_duplicates"]

_INT64_MAX = int(np.iinfo(np.int64).max)

# Bits of the int64 words that compressed rows are sorted as (tests lower it to reach the pair sort).
_PACK_BITS = 63

# Chunks per thread of the run-reduction passes (dynamic schedule: evens out long runs).
_CHUNKS_PER_THREAD = 8


def _sum_view(a: np.ndarray) -> tuple[np.ndarray, bool]:
    """The view the reduction kernels take, and whether to reduce by logical or.

    bool becomes uint8 (logical or), float16 its uint16 bits (summed in float32 by the
    kernel); other dtypes are taken as they are.
    """
    if a.dtype == np.bool_:
        return a.view(np.uint8), True
    if a.dtype == np.float16:
        return a.view(np.uint16), False
    return a, False


_NO_PAYLOAD = np.empty(0, np.int32)
_PAYLOAD_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.int32, 8: np.int64}


def _payload_view(values2: np.ndarray) -> np.ndarray | None:
    """The raw bits of ``(n, 1)`` scalar values of at most 8 bytes, for the sort to carry; else None."""
    if values2.shape[1] != 1 or values2.dtype.itemsize not in _PAYLOAD_DTYPES:
        return None
    return values2.reshape(-1).view(_PAYLOAD_DTYPES[values2.dtype.itemsize])


def _values_2d(values: np.ndarray, rows: int) -> np.ndarray:
    """``values`` as a C-contiguous ``(rows, E)`` array (a copy only if it is not contiguous)."""
    return np.ascontiguousarray(values).reshape(rows, math.prod(values.shape[1:]) if values.ndim > 1 else 1)


def coalesce(t: COOTensor, threads: int | None = None) -> COOTensor:
    """Sort the indices of a COO tensor lexicographically and sum the values of duplicates.

    Duplicates are summed in their input order; bool values are combined by logical
    or, float16 values are summed in float32 and rounded once. Index and value dtypes
    are kept. The input is never modified. When its indices are already sorted and
    distinct, the result shares the input's index and value arrays (no copy).

    Parameters
    ----------
    t : COOTensor
        Any COO tensor, including one built with ``check_invariants=False``: the
        bounds of its indices are checked on the way (invariants C4/C5).
    threads : int, optional
        Threads to use (see :func:`sparsetensor.num_threads`).

    Returns
    -------
    COOTensor
        A tensor marked coalesced.

    Raises
    ------
    InvariantError
        ``C4``/``C5`` when an index is negative or not below its dim's size.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor._backend.cpu._coalesce import coalesce
    >>> t = st.sparse_coo_tensor([[1, 0, 1], [2, 1, 2]], [1.0, 2.0, 3.0], size=(2, 3), check_invariants=False)
    >>> c = coalesce(t)
    >>> c.indices(), c.values(), c.is_coalesced()
    (array([[0, 1],
           [1, 2]]), array([2., 4.]), True)
    """
    if not isinstance(t, COOTensor):
        raise TypeError(f"coalesce expects a COO tensor, got {type(t).__name__}")
    indices = np.ascontiguousarray(t.indices())
    values = t.values()
    shape = t.shape
    S, n = indices.shape
    if n == 0:
        return COOTensor(indices, values, shape, coalesced=True, checked=True)
    sparse_shape = np.asarray(shape[:S], dtype=np.int64)
    nt = num_threads(threads, n * max(S, 1))
    span = math.prod(shape[:S])  # number of sparse coordinates; keys are < span
    use_keys = span - 1 <= _INT64_MAX

    # Bounds and order; a key-sorting run stops each chunk at its first disorder
    # (the linearisation pass checks the bounds it left unchecked).
    found, unsorted, duplicate = _kernels.coo_order(indices, sparse_shape, use_keys, nt)
    if found is not None:
        raise_coo_error(found, shape)
    if not unsorted and not duplicate:
        return COOTensor(indices, values, shape, coalesced=True, checked=True)

    nchunks = min(_CHUNKS_PER_THREAD * nt if nt > 1 else 1, n)  # of the output pass
    values2 = _values_2d(values, n)
    width = _kernels.bucket_bits(n, (span - 1).bit_length()) if use_keys and unsorted else 0
    if width:
        # Keys of at most 32 bits below the top digit: one scatter into cache-sized buckets,
        # each sorted in cache (values travel with the keys as below).
        carry = _payload_view(values2)
        found, low_keys, second, bucket_starts, offsets, shift, base = _kernels.coo_bucket_sort(
            indices, sparse_shape, (span - 1).bit_length(), width, _NO_PAYLOAD if carry is None else carry, nt)
        if found is not None:
            raise_coo_error(found, shape)
        if carry is not None:
            values2, perm = second.view(values.dtype).reshape(n, 1), _NO_PAYLOAD
        else:
            perm = second
    elif use_keys:
        # Scalar values of up to 8 bytes travel with their keys through the sort (no bigger
        # than a position, and it spares a random gather); wider ones travel by position.
        carry = _payload_view(values2) if unsorted else None
        found, keys, second, offsets = _kernels.coo_sort(
            indices, sparse_shape, (span - 1).bit_length(), not unsorted,
            _NO_PAYLOAD if carry is None else carry, nchunks, nt)
        if found is not None:
            raise_coo_error(found, shape)
        if carry is not None and second.size:
            values2, perm = second.view(values.dtype).reshape(n, 1), _NO_PAYLOAD
        else:
            perm = second
        source = np.empty((0, 0), np.uint8)  # indices are de-linearised from the keys
    else:
        # Comparison-sort fallback: keys become run numbers of the lexsorted columns.
        perm = np.lexsort(indices[::-1]) if unsorted else np.empty(0, np.int64)
        keys = np.empty(n, np.int64)
        _kernels.coo_head_flags(indices, perm, keys, nt)
        np.cumsum(keys, out=keys)
        offsets = _kernels.run_offsets(keys, nchunks, nt)
        source = indices.view(np.uint8)  # indices are copied from the input columns

    nout = int(offsets[-1])
    out_indices = np.empty((S, nout), dtype=indices.dtype)
    out_values = np.empty((nout,) + tuple(values.shape[1:]), dtype=values.dtype)
    vals, logical_or = _sum_view(values2)
    out_view, _ = _sum_view(out_values.reshape(nout, vals.shape[1]))
    if width:
        _kernels.coo_write_buckets(low_keys, bucket_starts, offsets, shift, base, perm, sparse_shape,
                                   out_indices.view(np.uint8), vals, out_view, logical_or, nt)
    else:
        _kernels.coo_write(keys, offsets, perm, sparse_shape, out_indices.view(np.uint8), source, vals, out_view,
                           logical_or, nt)
    return COOTensor(out_indices, out_values, shape, coalesced=True, checked=True)


def sum_duplicates(t: CompressedTensor, threads: int | None = None) -> CompressedTensor:
    """Repair a csr/csc/bsr/bsc tensor whose rows (columns) have unsorted or repeated plain indices.

    Each row's plain indices are sorted (stably) and the values of repeated ones are
    summed (blocks elementwise; bool by logical or, float16 in float32). Layout, index
    dtype, value dtype, batch, block and dense dims are kept; the input is never
    modified. When every row is already strictly increasing, the result shares the
    input's arrays (no copy).

    A row may hold more entries than the plain size before duplicates are summed, so
    only the lower bound of invariant 5.3 (compressed indices non-decreasing) is
    checked, with 5.1, 5.2, 5.4 and 5.5.

    Parameters
    ----------
    t : CompressedTensor
        Built for instance with ``check_invariants=False``.
    threads : int, optional
        Threads to use (see :func:`sparsetensor.num_threads`).

    Returns
    -------
    CompressedTensor
        A canonical tensor (invariants 5.1-5.6 hold).

    Raises
    ------
    InvariantError
        For a broken 5.1, 5.2, 5.3 (decreasing compressed indices), 5.4 or 5.5.
    ValueError
        When the batches end up with different numbers of specified elements.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor._backend.cpu._coalesce import sum_duplicates
    >>> t = st.sparse_csr_tensor([0, 3, 4], [2, 0, 2, 1], [1, 2, 3, 4], size=(2, 3), check_invariants=False)
    >>> c = sum_duplicates(t)
    >>> c.crow_indices(), c.col_indices(), c.values()
    (array([0, 2, 3]), array([0, 2, 1]), array([2, 4, 4]))
    """
    if not isinstance(t, CompressedTensor):
        raise TypeError(f"sum_duplicates expects a csr/csc/bsr/bsc tensor, got {type(t).__name__}")
    layout = t.layout
    m = t.batch_dim
    batch = t.shape[:m]
    B = math.prod(batch)
    compressed = np.ascontiguousarray(t.compressed_indices())
    plain = np.ascontiguousarray(t.plain_indices())
    values = t.values()
    nnz = t.nnz
    ncomp = compressed.shape[-1]
    if B == 0:
        return CompressedTensor(compressed, plain, values, t.shape, layout, canonical=True)
    comp2 = compressed.reshape(B, ncomp)
    plain2 = plain.reshape(B, nnz)
    nt = num_threads(threads, B * (nnz + ncomp))
    plain_size = t.plain_size
    # Each entry sorts as one int64 word, plain index << lbits | offset in its row, when that fits;
    # else as a (plain index, position) pair.
    longest = int(np.diff(comp2, axis=1).max()) if ncomp > 1 and nnz else 0
    lbits = max(1, (longest - 1).bit_length())
    if (plain_size - 1).bit_length() + lbits > _PACK_BITS:
        lbits = 0
    keys = np.empty((B, nnz) if lbits == 0 else (0, 0), dtype=plain.dtype)
    perm = np.empty((B, nnz), dtype=np.int64)
    counts = np.empty((B, ncomp - 1), dtype=np.int64)
    found, changed = _row_kernels.compressed_sort_rows(comp2, plain2, plain_size, lbits, keys, perm, counts, nt)
    del keys
    if found is not None:
        raise_compressed_error(found, layout, batch, plain_size, nnz)
    if not changed:
        return CompressedTensor(compressed, plain, values, t.shape, layout, canonical=True)

    per_batch = counts.sum(axis=1)
    if np.any(per_batch != per_batch[0]):
        raise ValueError(f"sum_duplicates of a batched {layout.name} tensor: after summing duplicates the "
                         f"batches have different nnz {per_batch.tolist()}; every batch must have the same nnz")
    nnz_out = int(per_batch[0])
    new_comp = np.zeros((B, ncomp), dtype=compressed.dtype)
    np.cumsum(counts, axis=1, dtype=compressed.dtype, out=new_comp[:, 1:])
    out_plain = np.empty((B, nnz_out), dtype=plain.dtype)
    value_tail = tuple(values.shape[m + 1:])  # blocksize + dense
    out_values = np.empty(batch + (nnz_out,) + value_tail, dtype=values.dtype)
    E = math.prod(value_tail)
    vals, logical_or = _sum_view(np.ascontiguousarray(values).reshape(B * nnz, E))
    out_view, _ = _sum_view(out_values.reshape(B * nnz_out, E))
    _row_kernels.compressed_write(comp2, new_comp, plain2, perm, out_plain, vals, out_view, logical_or, nt)
    return CompressedTensor(new_comp.reshape(compressed.shape), out_plain.reshape(batch + (nnz_out,)),
                            out_values, t.shape, layout, canonical=True)
