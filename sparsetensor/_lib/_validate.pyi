"""Invariant checking kernels (Cython, OpenMP). Inputs are trusted to have the
shapes and dtypes documented here: the Python wrappers in sparsetensor._validate
check them before calling."""
import numpy as np

# (invariant, flat batch index, row (compressed index), position, offending value)
CompressedError = tuple[str, int, int, int, int]

def validate_compressed(
    compressed: np.ndarray,  # (B, n + 1), int32 or int64, C-contiguous
    plain: np.ndarray,       # (B, nnz), same dtype as compressed, C-contiguous
    plain_size: int,         # number of (block) columns for csr/bsr, rows for csc/bsc
    nthreads: int,
) -> CompressedError | None: ...

# (invariant, sparse dim, position, offending value)
CooError = tuple[str, int, int, int]

def validate_coo(
    indices: np.ndarray,     # (S, nnz), int32 or int64, C-contiguous
    shape: np.ndarray,       # (S,), int64
    nthreads: int,
) -> CooError | None: ...

def coo_is_coalesced(
    indices: np.ndarray,     # (S, nnz), int32 or int64, C-contiguous, bounds already valid
    shape: np.ndarray,       # (S,), int64
    nthreads: int,
) -> bool: ...
