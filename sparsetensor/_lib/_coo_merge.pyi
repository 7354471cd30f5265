"""COO merges (Cython, OpenMP): one-pass unions of coalesced COO operands, as rows (merge_union
of _elementwise on the flat leading sparse dims, then coo_rows_indices rebuilds the index
array) or by coo_merge_union on linear keys computed on the fly; and the key
(de)linearisation that lets the two-pass merges of _elementwise take COO operands. Op codes
are _elementwise's (ADD, MUL, MAX, MIN, PLUS)."""
import numpy as np

def coo_merge_union(
    a_indices: np.ndarray,    # (S, nnz_a) index, coalesced (checked when ``check``)
    a_values: np.ndarray,     # (nnz_a, E)
    b_indices: np.ndarray,    # (S, nnz_b), dtype of a_indices
    b_values: np.ndarray,     # (nnz_b, E), dtype of a_values
    shape: np.ndarray,        # (S,) int64 sparse sizes, product fits int64
    out_indices: np.ndarray,  # (S, nnz_a + nnz_b) scratch (the result itself when nothing overlaps)
    out_values: np.ndarray,   # (nnz_a + nnz_b, E): the first nnz filled
    op: int,                  # PLUS, ADD, MAX, MIN
    alpha: complex,
    logical: bool,
    check: bool,              # check bounds and that the keys increase strictly
    nthreads: int,
) -> tuple[np.ndarray, int] | None: ...  # (C-contiguous (S, nnz) indices, nnz); None: check failed

def coo_rows_indices(
    compressed: np.ndarray,   # (1, F + 1) over the flat leading S - 1 sparse dims (merge_union's output)
    plain: np.ndarray,        # (1, >= nnz): the last sparse index
    sizes: np.ndarray,        # (S - 1,) int64 leading sparse sizes
    out: np.ndarray,          # (S, nnz) index, filled
    nthreads: int,
) -> None: ...

# (invariant "C4" | "C5", sparse dim, position, offending value)
CooError = tuple[str, int, int, int]

def coo_ravel(
    indices: np.ndarray,  # (S, N) index
    shape: np.ndarray,    # (S,) int64, product fits int64
    keys: np.ndarray,     # (N,) int64, filled: row-major linear indices
    nthreads: int,
) -> CooError | None: ...

def coo_unravel(
    keys: np.ndarray,     # (N,) int64, in range
    shape: np.ndarray,    # (S,) int64
    out: np.ndarray,      # (S, N) index, filled
    nthreads: int,
) -> None: ...
