"""Invariant checking kernels (Cython, OpenMP). Inputs are trusted to have the
shapes and dtypes documented here: the Python wrappers in sparsetensor._core._validate
check them before calling."""
import numpy as np

# (invariant, flat batch index, row (compressed index), position, offending value).
# 5.1: (b, 0, -1, compressed[b, 0]); 5.2: (b, n, -1, compressed[b, n]);
# 5.3: (b, i, -1, compressed[b, i] - compressed[b, i - 1]) with 1 <= i <= n;
# 5.4-5.6: (b, row, pos, plain[b, pos]), pos the position in the batch's plain indices.
CompressedError = tuple[str, int, int, int, int]

def validate_compressed(
    compressed: np.ndarray,  # (B, n + 1), int32 or int64, C-contiguous
    plain: np.ndarray,       # (B, nnz), same dtype as compressed, C-contiguous
    plain_size: int,         # number of (block) columns for csr/bsr, rows for csc/bsc; >= 0
    nthreads: int,           # <= 1, or under 100k index elements: serial
) -> CompressedError | None: ...

# (invariant "C4" (index < 0) or "C5" (index >= shape[d]), sparse dim, position, offending value)
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
