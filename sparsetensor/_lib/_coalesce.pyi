"""Coalescing kernels (Cython, OpenMP). Inputs are trusted to have the shapes and
dtypes documented here: the Python wrappers in sparsetensor._coalesce check them
before calling. Index values are not trusted: the kernels check their bounds.

Values are passed as "sum views": bool as uint8 (reduced by logical or), float16
as its uint16 bits (summed in float32, rounded once), other dtypes as they are.
"""
import numpy as np

# (invariant "C4"/"C5", sparse dim, position, offending value)
CooError = tuple[str, int, int, int]
# (invariant "5.1".."5.5", flat batch index, row (compressed index), position, offending value)
CompressedError = tuple[str, int, int, int, int]

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

def compressed_sort_rows(
    compressed: np.ndarray,  # (B, n + 1), int32 or int64, C-contiguous
    plain: np.ndarray,       # (B, nnz), same dtype, C-contiguous
    plain_size: int,         # number of (block) columns for csr/bsr, rows for csc/bsc
    lbits: int,              # > 0: sort words plain << lbits | offset in row (rows < 2**lbits,
                             # bits(plain_size - 1) + lbits <= 63); 0: sort (plain, position) pairs
    keys: np.ndarray,        # (B, nnz) scratch of plain's dtype when lbits == 0, else empty
    perm: np.ndarray,        # (B, nnz), int64, written: flat positions b * nnz + k in sorted order
    counts: np.ndarray,      # (B, n), int64, written: distinct plain indices per row
    nthreads: int,
) -> tuple[CompressedError | None, bool]: ...  # (error, some row needed repair)

def compressed_write(
    compressed: np.ndarray,      # (B, n + 1) input compressed indices
    new_compressed: np.ndarray,  # (B, n + 1) output compressed indices (prefix sums of counts)
    plain: np.ndarray,           # (B, nnz) input plain indices
    perm: np.ndarray,            # (B, nnz) int64 from compressed_sort_rows
    out_plain: np.ndarray,       # (B, nnz_out), written
    values: np.ndarray,          # (B * nnz, E) sum view, C-contiguous
    out: np.ndarray,             # (B * nnz_out, E), same dtype, written
    logical_or: bool,
    nthreads: int,
) -> None: ...
