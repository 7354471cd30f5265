"""Segmented reductions and softmax (Cython, OpenMP). Inputs are trusted to have the
dtypes documented here (the wrappers in sparsetensor.ops.reduce convert them: float16
is widened to float32, bool is viewed as uint8); shapes, offsets, permutations and
keys are checked by the kernels' wrappers, so no loop reads or writes out of bounds.

A segment g is the rows offsets[g]:offsets[g + 1] of x viewed as (n, K * E): K items
per row that are reduced too, E independent lanes. Rows are read through perm
(row perm[i] for position i) when perm is not empty.
"""
import numpy as np

OPS: dict[str, int]

def segment_sum(
    offsets: np.ndarray,   # (G + 1,) int64, non-decreasing within [0, n]
    perm: np.ndarray,      # (n,) int64 permutation of range(n), or empty for the identity
    x: np.ndarray,         # (n, K * E), C-contiguous; int8..int64, uint8, float32/64, complex64/128
    out: np.ndarray,       # (G, E), x's dtype, C-contiguous; overwritten (empty segments: 0)
    nthreads: int,
) -> None: ...

def segment_minmax(
    offsets: np.ndarray,   # as segment_sum
    perm: np.ndarray,
    x: np.ndarray,         # (n, K * E), real dtypes only
    out: np.ndarray,       # (G, E), prefilled with the identity (or any start value); reduced into
    is_max: bool,
    nthreads: int,
) -> None: ...             # NaN propagates (np.maximum / np.minimum semantics)

def scatter_reduce(
    keys: np.ndarray,      # (n,) int32 or int64, each in [0, M) (ValueError naming the row otherwise)
    x: np.ndarray,         # (n, E), C-contiguous
    out: np.ndarray,       # (C, M, E), prefilled with the identity; rows are split into C chunks,
                           # chunk c reduced into out[c] (C > 1: in parallel; the caller combines)
    op: str,               # "sum", "max" or "min" (complex: "sum" only)
    nthreads: int,
) -> None: ...

def segment_softmax(
    offsets: np.ndarray,   # (G + 1,) int64, non-decreasing within [0, n]
    perm: np.ndarray,      # (n,) int64 permutation, or empty
    x: np.ndarray,         # (n, K * E) float32 or float64, C-contiguous
    out: np.ndarray,       # x's shape and dtype; rows of the segments are written
    E: int,                # lanes
    take_log: bool,        # log-softmax
    nthreads: int,
) -> None: ...

# Sums over one sparse dim of compressed storage. compressed (B, G + 1) int32 or int64 with
# compressed[b, 0] == 0 and compressed[b, G] == nnz (ValueError otherwise; every slot is checked
# non-decreasing within [0, nnz] as it is read); x (B, nnz, A, K, E) C-contiguous, int8..int64,
# uint8, float32/64, complex64/128: per entry, the K items are summed and the A * E lanes kept.

def compressed_sum(
    compressed: np.ndarray,  # (B, G + 1)
    x: np.ndarray,           # (B, nnz, A, K, E)
    out: np.ndarray,         # (B, G, A, E), x's dtype; overwritten: the sum over each slot's entries
    nthreads: int,           # merge-path ranges of slots and entries (a long slot is shared)
) -> None: ...

def plain_sum(
    compressed: np.ndarray,  # (B, G + 1)
    plain: np.ndarray,       # (B, nnz), compressed's dtype, each in [0, P) (ValueError naming the entry)
    x: np.ndarray,           # (B, nnz, A, K, E)
    out: np.ndarray,         # (B, P, A, E), x's dtype; overwritten: the sum over the entries at each plain index
    nthreads: int,           # threads own ranges of [0, P) (slots with sorted plain indices); else one thread
) -> None: ...
