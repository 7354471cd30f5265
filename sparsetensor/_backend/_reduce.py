"""Sums over one sparse dim of a compressed tensor on the CPU: the ``compressed_sum`` and
``plain_sum`` kernels of :mod:`sparsetensor._backend.cpu`, over
:func:`sparsetensor._lib._reduce.compressed_sum` and :func:`~sparsetensor._lib._reduce.plain_sum`.

The op (:mod:`sparsetensor.ops.reduce`) has resolved the dims and the dtype and hands the
values as ``x`` of shape ``(B, nnz, A, K, E)``: per entry (a block with its dense items)
``A * E`` lanes that are kept and ``K`` items that are summed with the entries (the
block's axis along the reduced dim). The result is a new NumPy array ``(B, n, A, E)``.
"""

from __future__ import annotations

import numpy as np

from .._config import num_threads
from .._lib import _reduce as _kernels

__all__ = ["compressed_sum", "plain_sum"]

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
    _kernels.compressed_sum(c, x, out, num_threads(threads, x.size))
    return out


def plain_sum(t, x: np.ndarray, threads=None) -> np.ndarray:
    """The sum of the entries at every plain index of ``t`` (a column of csr/bsr, a row of
    csc/bsc) and of their ``K`` items: ``(B, P, A, E)`` from ``x`` ``(B, nnz, A, K, E)``, where
    ``P = t.plain_size``. Indices are checked as they are read (ValueError)."""
    c, x = _operands(t, x, "plain_sum")
    B, nnz, A, K, E = x.shape
    p = np.ascontiguousarray(t.plain_indices().reshape(B, nnz))
    out = np.empty((B, t.plain_size, A, E), dtype=x.dtype)
    _kernels.plain_sum(c, p, x, out, num_threads(threads, x.size))
    return out
