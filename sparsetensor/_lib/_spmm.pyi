"""Sparse x dense product kernels (Cython, OpenMP): csr/csc/bsr/bsc times a dense matrix.

Kernel dtypes: uint8/16/32/64 (every integer dtype viewed as unsigned of its width:
products and sums wrap modulo 2**bits; bool is uint8 with ``logical=True``),
float32/64, complex64/128. Values, dense and out share one dtype. Index contents are
not trusted unless ``checked=True``.
"""
import numpy as np

# (invariant, batch of A, compressed slot, position, offending value):
# ("5.1" | "5.2", b, i, -1, compressed[b, i]) for a batch that does not start at 0 or end at nnz
#   (spmm without checked=True, when the scan finds none of the errors below);
# ("5.3", b, i, -1, compressed[b, i] - compressed[b, i - 1] (or compressed[b, 0] for i == 0))
#   for an entry outside [0, nnz] or below its predecessor;
# ("5.4" | "5.5", b, i, k, plain[b, k]) for a plain index < 0 or >= the plain size.
CompressedError = tuple[str, int, int, int, int]

def spmm(
    compressed: np.ndarray,   # (Bs, nc + 1) int32/int64, C-contiguous; nc = M // Rb (rows) or K // Cb (cols)
    plain: np.ndarray,        # (Bs, nnz), dtype of compressed, C-contiguous
    values: np.ndarray,       # (Bs, nnz, Rb * Cb), C-contiguous, a kernel dtype
    dense: np.ndarray,        # (Bd, K, N), C-contiguous, dtype of values
    out: np.ndarray,          # (Bo, M, N), C-contiguous, writeable, dtype of values; overwritten
    sbatch: np.ndarray,       # (Bo,) int64 in [0, Bs): the batch of A of each output batch
    dbatch: np.ndarray,       # (Bo,) int64 in [0, Bd): the batch of dense of each output batch
    blocksize: tuple[int, int],
    compressed_rows: bool,    # csr/bsr: row-parallel gather; csc/bsc: race-free scatter
    nthreads: int,
    *,
    block_transposed: bool = False,  # blocks stored column-major (a transpose view)
    logical: bool = False,           # uint8 as bool: or of ands
    checked: bool = False,           # 5.1-5.6 known to hold: no index guards
) -> CompressedError | None: ...
    # out[b] = A[sbatch[b]] @ dense[dbatch[b]]; None on success, else the first broken
    # index (out is then partially written). Duplicate plain indices are summed.

def find_broken_index(
    compressed: np.ndarray,   # (B, nc + 1) int32/int64, C-contiguous
    plain: np.ndarray,        # (B, nnz), dtype of compressed
    plain_size: int,
) -> CompressedError | None: ...
    # serial scan for what spmm guards against (5.3 bounds/monotonicity, 5.4, 5.5)

def set_simd(enabled: bool) -> bool: ...
    # use the AVX-512 paths when compiled in (default) or the portable loops; returns the
    # previous effective setting (False when not compiled in)

def simd_available() -> bool: ...
