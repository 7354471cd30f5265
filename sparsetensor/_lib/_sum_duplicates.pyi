"""Coalescing kernels for the compressed layouts (Cython, OpenMP). Inputs are trusted to have
the shapes and dtypes documented here: ``sparsetensor._backend.cpu._coalesce.sum_duplicates`` checks them.
Index values are not trusted: the kernels check their bounds.

Values are passed as "sum views": bool as uint8 (reduced by logical or), float16 as its
uint16 bits (summed in float32, rounded once), other dtypes as they are.
"""
import numpy as np

# (invariant "5.1".."5.5", flat batch index, row (compressed index), position, offending value)
CompressedError = tuple[str, int, int, int, int]

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
