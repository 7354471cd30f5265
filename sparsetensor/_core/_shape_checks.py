"""The O(1) checks: what a tensor's members say about it, read from shape, dtype and
contiguity alone.

The functions here never look at an index or a value, so they run unchanged on NumPy
arrays and on device arrays (anything with ``shape``, ``ndim`` and ``dtype``; an array
without ``flags`` is C-contiguous by contract, as :class:`sparsetensor.cuda.DeviceArray`
is). The factory, :meth:`SparseTensor.check_invariants` and the CUDA constructors call
them alike. Each returns a small named tuple of the dims the members imply (JAX's
``_validate_bcoo`` -> ``BCOOProperties`` is the model) or raises
:class:`~sparsetensor.InvariantError` naming the broken invariant.

The O(nnz) scans are :mod:`sparsetensor._core._validate`; the flag that says they passed is
:mod:`sparsetensor._core._canonical`'s.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np
from numpy.exceptions import AxisError

from . import _layout as L
from ._dtypes import INDEX_DTYPES, check_fits
from ._errors import InvariantError

__all__ = ["COOMeta", "CompressedMeta", "coo_meta", "compressed_meta", "as_size", "block_ndim", "element_strides",
           "is_c_contiguous", "values_contiguous", "normalize_dim"]


class COOMeta(NamedTuple):
    """The dims a COO tensor's members imply (C1-C3 hold)."""

    sparse_dim: int
    dense_dim: int
    nnz: int
    index_dtype: np.dtype


class CompressedMeta(NamedTuple):
    """The dims a csr/csc/bsr/bsc tensor's members imply (1.x and 3.x hold)."""

    batch_dim: int
    dense_dim: int
    blocksize: tuple   # (1, 1) for csr/csc
    nnz: int
    plain_size: int    # 5.3/5.5's bound: (block) columns for csr/bsr, (block) rows for csc/bsc
    index_dtype: np.dtype


def normalize_dim(dim, ndim: int, op: str | None = None) -> int:
    """``dim`` in ``[0, ndim)`` (negative dims count from the end).

    Out of range: ``numpy.exceptions.AxisError``, NumPy's error, which is an ``IndexError``
    (PyTorch's) and a ``ValueError``.
    """
    d = operator.index(dim)
    if not -ndim <= d < ndim:
        where = f"{op}: " if op else ""
        raise AxisError(f"{where}dimension {dim} out of range for a tensor of {ndim} dims "
                        f"(expected {-ndim} <= dim < {ndim})")
    return d % ndim


def as_size(size, name: str = "size") -> tuple:
    """A shape as a tuple of non-negative ints (TypeError / ValueError otherwise)."""
    try:
        dims = tuple(operator.index(s) for s in size)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integers, got {size!r}") from None
    if any(s < 0 for s in dims):
        raise ValueError(f"{name} must not have negative sizes, got {dims}")
    return dims


def block_ndim(layout: L.Layout) -> int:
    """The number of block dims in ``values`` (2 for bsr/bsc, 0 otherwise)."""
    return 2 if layout.blocked else 0


def element_strides(shape, order: str = "C") -> list:
    """The element (not byte) strides of ``shape`` in C (row-major) or F (column-major) order."""
    dims = tuple(shape) if order == "C" else tuple(shape)[::-1]
    out, s = [], 1
    for n in reversed(dims):
        out.append(s)
        s *= n
    return out[::-1] if order == "C" else out


def is_c_contiguous(a) -> bool:
    """Whether ``a`` is C-contiguous; arrays without ``flags`` (device arrays) always are."""
    flags = getattr(a, "flags", None)
    return True if flags is None else bool(flags.c_contiguous)


def values_contiguous(values, dense_dim: int, blocked: bool) -> bool:
    """Invariant 3.7: values are C-contiguous, or (bsr/bsc) contiguous once the two block dims
    are swapped back (the transpose view, seed 003)."""
    if is_c_contiguous(values):
        return True
    return bool(blocked) and dense_dim >= 0 and values.swapaxes(-2 - dense_dim, -1 - dense_dim).flags.c_contiguous


def coo_meta(indices, values, shape: tuple) -> COOMeta:
    """The O(1) COO invariants C1-C3 (dims add up, member shapes agree with ``shape``) and 1.3
    (the sizes fit the index dtype)."""
    if indices.ndim != 2:
        raise InvariantError("C2", "coo", f"indices must be 2-d (sparse_dim, nnz), got shape {indices.shape}")
    sparse_dim, nnz = indices.shape
    if values.ndim < 1:
        raise InvariantError("C3", "coo", f"values must be at least 1-d (nnz, ...), got shape {values.shape}")
    dense_dim = values.ndim - 1
    if sparse_dim + dense_dim != len(shape):
        raise InvariantError("C1", "coo", f"sparse_dim ({sparse_dim}, from indices) + dense_dim ({dense_dim}, "
                             f"from values) must equal len(size)={len(shape)}")
    if values.shape[0] != nnz:
        raise InvariantError("C3", "coo", f"values.shape[0] must equal nnz={nnz} (indices.shape[1]), "
                             f"got values.shape={values.shape}")
    if tuple(values.shape[1:]) != tuple(shape[sparse_dim:]):
        raise InvariantError("C3", "coo", f"values.shape[1:] must equal the dense sizes {tuple(shape[sparse_dim:])}, "
                             f"got {tuple(values.shape[1:])}")
    check_fits(indices.dtype, "coo", **{f"size[{d}]": shape[d] for d in range(sparse_dim)})
    return COOMeta(sparse_dim, dense_dim, nnz, indices.dtype)


def compressed_meta(compressed, plain, values, shape: tuple, layout: L.Layout) -> CompressedMeta:
    """The O(1) invariants 1.x and 3.x of seed 003 for a compressed tensor of ``shape``."""
    name = layout.name
    c, p = layout.compressed_name, layout.plain_name
    if compressed.dtype != plain.dtype:
        raise InvariantError("1.2", name, f"{p} must have the dtype of {c} ({compressed.dtype}), got {plain.dtype}")
    for arr, nm in ((compressed, c), (plain, p)):
        if arr.dtype not in INDEX_DTYPES:
            raise InvariantError("1.3", name, f"{nm} must have dtype int32 or int64, got {arr.dtype}")
    if compressed.ndim < 1:
        raise InvariantError("3.2", name, f"{c} must be at least 1-d, got a 0-d array")
    m = compressed.ndim - 1
    if plain.ndim != m + 1:
        raise InvariantError("3.3", name, f"{p}.ndim must be {m + 1} (batch_dim + 1, from {c}), got {plain.ndim}")
    b = block_ndim(layout)
    if values.ndim < m + 1 + b:
        raise InvariantError("3.4", name, f"values.ndim must be at least {m + 1 + b} (batch_dim + 1"
                             f"{' + 2 block dims' if b else ''}), got {values.ndim}")
    n = values.ndim - m - 1 - b
    if len(shape) != m + 2 + n:
        raise InvariantError("3.1", name, f"size must have batch_dim + 2 + dense_dim = {m} + 2 + {n} = {m + 2 + n} "
                             f"dims (from the members), got {len(shape)}: {tuple(shape)}")
    batch = tuple(shape[:m])
    blocksize = tuple(values.shape[m + 1: m + 1 + b]) if b else (1, 1)
    rows, cols = shape[m], shape[m + 1]
    if b and 0 in blocksize:
        raise InvariantError("3.10", name, f"blocksize must be positive, got {blocksize} "
                             f"(values.shape[{m + 1}:{m + 3}])")
    if rows % blocksize[0] or cols % blocksize[1]:
        raise InvariantError("3.1", name, f"the sparse sizes ({rows}, {cols}) must be multiples of the "
                             f"blocksize {blocksize} (values.shape[{m + 1}:{m + 3}])")
    n_compressed = rows // blocksize[0] if layout.compressed_rows else cols // blocksize[1]
    if tuple(compressed.shape) != batch + (n_compressed + 1,):
        raise InvariantError("3.8", name, f"{c}.shape must be batch + (n + 1,) = {batch + (n_compressed + 1,)}, "
                             f"got {tuple(compressed.shape)}")
    if tuple(plain.shape[:-1]) != batch:
        raise InvariantError("3.9", name, f"{p}.shape must be batch + (nnz,) with batch={batch}, got "
                             f"{tuple(plain.shape)}")
    nnz = plain.shape[-1]
    expect = batch + (nnz,) + (blocksize if b else ()) + tuple(shape[m + 2:])
    if tuple(values.shape) != expect:
        raise InvariantError("3.10", name, f"values.shape must be batch + (nnz,){' + blocksize' if b else ''} "
                             f"+ dense = {expect}, got {tuple(values.shape)}")
    if not is_c_contiguous(compressed) or not is_c_contiguous(plain):
        raise InvariantError("3.5" if not is_c_contiguous(compressed) else "3.6", name,
                             "index arrays must be C-contiguous")
    if not values_contiguous(values, n, b):
        raise InvariantError("3.7", name, "values must be contiguous"
                             + (" or contiguous after swapping the two block dims" if b else ""))
    check_fits(compressed.dtype, name, nnz=nnz, nrows=rows, ncols=cols)
    plain_size = cols // blocksize[1] if layout.compressed_rows else rows // blocksize[0]
    return CompressedMeta(m, n, blocksize, nnz, plain_size, compressed.dtype)
