"""Dense <-> sparse kernels (Cython, OpenMP). Inputs are trusted to have the
shapes and dtypes documented here: the Python wrappers in sparsetensor._dense
check them before calling. Values are passed as "kernel views" (see
sparsetensor._dense): a raw view (uint8/16/32/64) for copies, or an arithmetic
view for accumulation and zero tests."""
import numpy as np

def compressed_to_dense(
    compressed: np.ndarray,  # (B, nc + 1) index
    plain: np.ndarray,       # (B, nnz) index, same dtype
    values: np.ndarray,      # (B, nnz, Rb, Cb, D), C-contiguous
    out: np.ndarray,         # (B, NR, NC, D), C-contiguous, zero-filled, same dtype as values
    compressed_rows: bool,   # True for csr/bsr (compressed dim is rows), False for csc/bsc
    accumulate: bool,        # sum duplicates (logical or for bool) instead of copying
    nthreads: int,
) -> tuple[str, int, int, int, int] | None: ...  # an invariant violation found on the way

def coo_to_dense(
    indices: np.ndarray,     # (S, nnz) index
    values: np.ndarray,      # (nnz, D), C-contiguous
    shape: np.ndarray,       # (S,), int64
    out: np.ndarray,         # (prod(shape), D), C-contiguous, zero-filled
    accumulate: bool,
    nthreads: int,
) -> tuple[str, int, int, int] | None: ...

def dense_to_compressed(
    dense: np.ndarray,       # (B, NR, NC, D), C-contiguous, "zero-test" view
    raw: np.ndarray,         # the same memory as a raw view, (B, NR, NC, Dr)
    Rb: int, Cb: int,
    compressed_rows: bool,
    index_dtype: np.dtype,
    nthreads: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
    # (compressed (B, nc+1), plain (B, nnz), values (B, nnz, Rb, Cb, Dr) raw, nnz_per_batch (B,))
    # If batches differ in nnz, plain/values are None-like (empty) and nnz_per_batch tells.

def dense_to_coo(
    dense: np.ndarray,       # (M, D) zero-test view, M = prod(sparse shape)
    raw: np.ndarray,         # (M, Dr) raw view of the same memory
    shape: np.ndarray,       # (S,), int64 sparse shape, prod == M
    index_dtype: np.dtype,
    nthreads: int,
) -> tuple[np.ndarray, np.ndarray]: ...  # indices (S, nnz), values (nnz, Dr) raw, lexicographically sorted
