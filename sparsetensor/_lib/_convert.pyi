"""Layout conversion kernels besides the transpose (sparsetensor._lib._transpose; Cython, OpenMP). Inputs are trusted to have the shapes and
dtypes documented here and to satisfy invariants 5.1-5.6 (unchecked input is scanned first by
sparsetensor._lib._validate.validate_compressed): the Python wrappers in sparsetensor.ops.convert see to it.

Arrays use the canonical form of sparsetensor.ops.convert: compressed (B, n + 1), plain
(B, nnz) of one index dtype (int32 or int64), values (B, nnz, E) as a raw unsigned view
(uint8/16/32/64, sparsetensor._core._dtypes.raw_view), E = the raw items of one entry."""
import numpy as np

def rows_to_coo(
    compressed: np.ndarray,   # (B, nbr + 1) index, rows compressed (csr/bsr)
    plain: np.ndarray,        # (B, nnz)
    values: np.ndarray,       # (B, nnz, Rb * Cb * Er) raw
    Rb: int, Cb: int,         # blocksize, (1, 1) for csr
    batch_coords: np.ndarray, # (m, B) index: the batch multi-index of every batch
    out_indices: np.ndarray,  # (m + 2, B * nnz * Rb * Cb) index, filled: lexicographically sorted
    out_values: np.ndarray,   # (B * nnz * Rb * Cb, Er) raw, filled
    nthreads: int,
) -> None: ...

# (invariant "C4" | "C5", sparse dim, position, value) or ("C6", -1, position, 0)
CooError = tuple[str, int, int, int]

def coo_to_rows(
    indices: np.ndarray,  # (S, N) index, S >= 2, claimed coalesced (checked here)
    sizes: np.ndarray,    # (S,) int64 sparse sizes
    ptr: np.ndarray,      # (prod(sizes[:-1]) + 1,) int32 (when N fits) or int64, filled: entries before each flat row
    nthreads: int,
    trusted: bool = False,  # the tensor was checked when built: with 2 sparse dims, the columns are not read
) -> CooError | None: ...  # the rows are always read and checked (they say where ptr is written)

def group_count(
    compressed: np.ndarray,  # (B, n + 1) index, unblocked (csr/csc)
    plain: np.ndarray,       # (B, nnz)
    bc: int, bp: int,        # block extents along the compressed and the plain dim
    counts: np.ndarray,      # (B, n // bc) int64, filled: blocks per block slice
    nthreads: int,
) -> None: ...

def group_fill(
    compressed: np.ndarray,      # (B, n + 1) index, unblocked
    plain: np.ndarray,           # (B, nnz)
    values: np.ndarray,          # (B, nnz, Er) raw
    bc: int, bp: int,
    stride_c: int, stride_p: int,  # item offset in the flattened (Rb, Cb) block per step along each dim
    out_compressed: np.ndarray,  # (B, n // bc + 1): 0 then the cumulative sums of group_count's counts
    out_plain: np.ndarray,       # (B, nnzb), filled
    out_values: np.ndarray,      # (B, nnzb, Rb * Cb * Er) raw, zero-filled by the caller, filled
    nthreads: int,
) -> None: ...

def compressed_expand(
    compressed: np.ndarray,      # (B, n + 1) index, blocked (bsr/bsc)
    plain: np.ndarray,           # (B, nnz)
    values: np.ndarray,          # (B, nnz, Rb * Cb * Er) raw
    bc: int, bp: int,
    stride_c: int, stride_p: int,
    out_compressed: np.ndarray,  # (B, n * bc + 1), filled
    out_plain: np.ndarray,       # (B, nnz * Rb * Cb), filled
    out_values: np.ndarray,      # (B, nnz * Rb * Cb, Er) raw, filled
    nthreads: int,
) -> None: ...

def transpose_blocks(
    src: np.ndarray,  # (n, R, C) raw, C-contiguous
    dst: np.ndarray,  # (n, C, R) raw, filled: dst[k, j, i] = src[k, i, j]
    nthreads: int,
) -> None: ...
