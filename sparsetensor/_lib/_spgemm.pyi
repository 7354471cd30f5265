"""SpGEMM and SDDMM kernels (Cython, OpenMP). Inputs are trusted to have the shapes and
dtypes documented here and to satisfy invariants 5.1-5.5 (the wrappers in
sparsetensor.ops.spgemm scan unchecked input first); the kernels check shapes.

Arrays use the canonical form: compressed (B, n + 1), plain (B, nnz) of one index dtype
(int32 or int64), values (B, nnz, E) of one arithmetic dtype (int8/16/32/64, uint8,
float32/64, complex64/128; bool as uint8 with ``logical=True``; float16 widened to
float32 by the caller). Rows are compressed (csr/bsr)."""
import numpy as np

def spgemm_symbolic(
    a_compressed: np.ndarray,  # (B, n + 1) index
    a_plain: np.ndarray,       # (B, nnz_a)
    b_compressed: np.ndarray,  # (B, k + 1), k = the (block) columns of A
    b_plain: np.ndarray,       # (B, nnz_b), values in [0, ncols)
    ncols: int,                # (block) columns of B
    counts: np.ndarray,        # (B, n) int64, filled: distinct (block) columns of each row of A @ B
    nthreads: int,
) -> None: ...

def spgemm_numeric(
    a_compressed: np.ndarray, a_plain: np.ndarray,
    a_values: np.ndarray,        # (B, nnz_a, Rb * Kb)
    b_compressed: np.ndarray, b_plain: np.ndarray,
    b_values: np.ndarray,        # (B, nnz_b, Kb * Cb), dtype of a_values
    ncols: int,
    Rb: int, Kb: int, Cb: int,   # block sizes: A (Rb x Kb), B (Kb x Cb); 1, 1, 1 for csr
    out_compressed: np.ndarray,  # (B, n + 1): 0 then the prefix sums of spgemm_symbolic's counts
    out_plain: np.ndarray,       # (B, nnz_out), filled: sorted within each row
    out_values: np.ndarray,      # (B, nnz_out, Rb * Cb), filled
    logical: bool,               # uint8 values are bools: products are and, sums are or
    nthreads: int,
) -> None: ...

def spgemm_flops(
    a_compressed: np.ndarray,  # (B, n + 1) index
    a_plain: np.ndarray,       # (B, nnz_a)
    b_compressed: np.ndarray,  # (B, k + 1)
    prefix: np.ndarray,        # (B * n + 1,) int64, filled: prefix sums of the products of each flat row
    nthreads: int,
) -> int: ...                  # the largest number of products of a row

def spgemm_fused(
    a_compressed: np.ndarray, a_plain: np.ndarray,
    a_values: np.ndarray,        # (B, nnz_a): csr only
    b_compressed: np.ndarray, b_plain: np.ndarray,
    b_values: np.ndarray,        # (B, nnz_b), dtype of a_values
    ncols: int,
    prefix: np.ndarray,          # from spgemm_flops
    maxub: int,                  # spgemm_flops's result
    counts: np.ndarray,          # (B * n,) int64, filled: entries of each flat row of A @ B
    out_plain: np.ndarray,       # (prefix[-1],) index: the rows' sorted columns, one after another
    out_values: np.ndarray,      # (prefix[-1],): their sums
    logical: bool,
    nthreads: int,
) -> int: ...                    # entries written: sum(counts)

def _tune(
    accumulator: str | None = None,     # "auto", or force "merge", "dense", "esc", "slots" on the csr rows it can take
    merge_max: int | None = None,       # csr rows combining at most this many B rows are merged (at most 64)
    dense_max: int | None = None,       # the widest column span of the dense accumulator
    dense_span: int | None = None,      # ... and its most columns per product
    esc_max: int | None = None,         # the most products of an expand-sort-compress row
    parts_per_thread: int | None = None,  # parts of the fused pass per thread
) -> dict: ...                          # the previous settings, as keyword arguments

def sampled_addmm(
    compressed: np.ndarray,  # (B, M + 1) index, csr pattern
    plain: np.ndarray,       # (B, nnz)
    values: np.ndarray,      # (B, nnz) input values
    mat1: np.ndarray,        # (B1, M, K), dtype of values
    mat2t: np.ndarray,       # (B2, N, K): mat2 transposed, C-contiguous
    batch1: np.ndarray,      # (B,) int64: the mat1 batch of every output batch
    batch2: np.ndarray,      # (B,) int64: the mat2 batch of every output batch
    beta: complex, alpha: complex,
    out: np.ndarray,         # (B, nnz), filled: beta * values + alpha * (mat1 @ mat2) at the pattern
    nthreads: int,
) -> None: ...
