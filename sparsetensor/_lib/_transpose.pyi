"""The counting-sort transpose of the compressed layouts (Cython, OpenMP). Inputs are trusted to
have the shapes and dtypes documented here and to satisfy invariants 5.1-5.6 (unchecked input is
scanned first by sparsetensor._lib._validate.validate_compressed): sparsetensor.ops.convert sees to it.

Arrays use the canonical form of sparsetensor.ops.convert: compressed (B, n + 1), plain (B, nnz) of
one index dtype (int32 or int64), values (B, nnz, E) as a raw unsigned view."""
import numpy as np

def compressed_transpose(
    compressed: np.ndarray,  # (B, n + 1) index
    plain: np.ndarray,       # (B, nnz), same dtype
    values: np.ndarray,      # (B, nnz, E) raw
    plain_size: int,
    nthreads: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
    # (compressed (B, plain_size + 1), plain (B, nnz), values (B, nnz, E)): entries regrouped by
    # plain index, each new slice sorted by the old compressed index (a stable counting sort)

def _tune(max_buckets: int | None = None, direct_max_plain: int | None = None,
          bucketed_min_bytes: int | None = None, bucket_bytes: int | None = None,
          direct_grain: int | None = None, direct_max_band: int | None = None) -> tuple[int, int, int, int, int, int]: ...
def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...
