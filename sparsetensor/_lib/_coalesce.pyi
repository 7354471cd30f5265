"""COO coalescing kernels (Cython, OpenMP). Inputs are trusted to have the shapes and
dtypes documented here: the Python wrappers in sparsetensor._backend.cpu._coalesce check them
before calling. Index values are not trusted: the kernels check their bounds.

Values are passed as "sum views": bool as uint8 (reduced by logical or), float16
as its uint16 bits (summed in float32, rounded once), other dtypes as they are.
"""
import numpy as np

# (invariant "C4"/"C5", sparse dim, position, offending value)
CooError = tuple[str, int, int, int]

def radix_digits(nbits: int) -> tuple[int, int]: ...  # (passes, bits per pass) for nbits-bit keys

def coo_order(
    indices: np.ndarray,     # (S, nnz), int32 or int64, C-contiguous
    shape: np.ndarray,       # (S,), int64
    stop_early: bool,        # stop each chunk at its first unsorted pair (bounds then partly unchecked)
    nthreads: int,
) -> tuple[CooError | None, bool, bool]: ...  # (error, unsorted, has adjacent duplicate)

def coo_sort(
    indices: np.ndarray,     # (S, nnz), int32 or int64, C-contiguous, nnz >= 1
    shape: np.ndarray,       # (S,), int64, prod(shape) - 1 <= int64 max
    nbits: int,              # bit length of prod(shape) - 1
    presorted: bool,         # columns known to be in order: linearise only
    payload: np.ndarray,     # (nnz,) raw scalar values to carry (uint8/uint16/int32/int64), or
                             # empty int32 to carry positions
    nout_chunks: int,        # chunks of the output pass (see offsets)
    nthreads: int,
) -> tuple[CooError | None, np.ndarray | None, np.ndarray | None, np.ndarray | None]: ...
    # (error, keys (nnz,) int64 sorted, sorted payload: values, or positions int32/int64
    #  (empty = identity), offsets (nout_chunks + 1,) int64: output offset of each chunk's
    #  first run, the last entry the number of runs)

def coo_head_flags(
    indices: np.ndarray,     # (S, nnz), bounds already checked
    perm: np.ndarray,        # (nnz,) int32/int64 order of the columns, or empty for the identity
    keys: np.ndarray,        # (nnz,) int64, written: 1 where a column differs from the previous one
    nthreads: int,
) -> None: ...

def run_offsets(
    keys: np.ndarray,        # (nnz,) int64, sorted, nnz >= 1
    nchunks: int,
    nthreads: int,
) -> np.ndarray: ...         # (nchunks + 1,) int64: output offset of each chunk's first run; last = runs

def coo_write(
    keys: np.ndarray,        # (nnz,) int64, sorted (linear keys, or run numbers)
    offsets: np.ndarray,     # (nchunks + 1,) from coo_sort or run_offsets
    perm: np.ndarray,        # (nnz,) int32/int64 original positions, or empty for the identity
    shape: np.ndarray,       # (S,), int64
    out_indices: np.ndarray, # (S, runs * itemsize) uint8: the output index array's bytes, written
    indices: np.ndarray,     # (S, nnz * itemsize) uint8: the input indices' bytes, to copy the first
                             # column of each run; or empty (0, 0): de-linearise the keys instead
    values: np.ndarray,      # (nnz, E) sum view, C-contiguous
    out: np.ndarray,         # (runs, E), same dtype, written: sum (logical or) over each run
    logical_or: bool,        # values are bool (as uint8)
    nthreads: int,
) -> None: ...

def bucket_bits(n: int, nbits: int) -> int: ...  # bits of the bucket digit, 0: keys too wide for the bucket sort

def coo_bucket_sort(
    indices: np.ndarray,     # (S, nnz), int32 or int64, C-contiguous, nnz >= 1
    shape: np.ndarray,       # (S,), int64, prod(shape) - 1 <= int64 max
    nbits: int,              # bit length of prod(shape) - 1
    width: int,              # bucket_bits(nnz, nbits), > 0
    payload: np.ndarray,     # as for coo_sort
    nthreads: int,
) -> tuple[CooError | None, np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None, int, int]: ...
    # (error, low keys (nnz,) uint32 sorted within buckets, sorted payload, bucket starts (2**width + 1,)
    #  int64, offsets (2**width + 1,) int64: output offset of each bucket's first run, shift, base):
    #  bucket b's keys are base | b << shift | low & (2**shift - 1)

def coo_write_buckets(
    low_keys: np.ndarray,      # from coo_bucket_sort
    bucket_starts: np.ndarray,
    offsets: np.ndarray,
    shift: int,
    base: int,
    perm: np.ndarray,          # (nnz,) int32/int64 original positions, or empty (values were carried)
    shape: np.ndarray,         # (S,), int64
    out_indices: np.ndarray,   # (S, runs * itemsize) uint8, written
    values: np.ndarray,        # (nnz, E) sum view (the carried values, sorted, when perm is empty)
    out: np.ndarray,           # (runs, E), same dtype, written
    logical_or: bool,
    nthreads: int,
) -> None: ...
