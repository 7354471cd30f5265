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

import numpy as np

from .._core._config import num_threads
from .._lib import _reduce as _kernels

__all__ = ["compressed_sum", "plain_sum", "segment_reduce", "scatter_reduce", "segment_softmax"]

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
