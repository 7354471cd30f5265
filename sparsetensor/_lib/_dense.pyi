"""Dense <-> sparse kernels (Cython, OpenMP); dense -> sparse live in _fromdense (re-exported).

The public functions check shapes, dtypes and contiguity (O(1)) and never
trust index contents: a broken index is returned as an error tuple, it is
never followed. Value arrays may be passed as the kernel views a wrapper
builds (raw uint8/16/32/64, complex128 as two uint64; arithmetic; zero test)
or in their own dtype, which the kernels reinterpret themselves:

- copies move raw bytes, so every numeric or bool dtype works;
- accumulation needs an arithmetic dtype: (u)int8/16/32/64, float32/64,
  complex64/128, or bool (logical or, stored as 0/1; also uint8 with
  ``logical=True``). float16 raises TypeError: widen it to float32 first;
- zero tests: NaN is nonzero, -0.0 is zero; float16 either as float16 or as
  its uint16 bits with ``float16=True``; complex either as complex or as its
  float pairs (trailing dim doubled).

``nthreads`` is used as given (at least 1); inputs below about 65536 element
operations run serially.
"""
import numpy as np

from ._fromdense import dense_to_compressed as dense_to_compressed, dense_to_coo as dense_to_coo

# (invariant, flat batch index, compressed index, position, offending value)
CompressedError = tuple[str, int, int, int, int]
# (invariant, sparse dim, position, offending value)
CooError = tuple[str, int, int, int]

def compressed_to_dense(
    compressed: np.ndarray,  # (B, nc + 1) int32/int64, C-contiguous; nc = NR//Rb (rows) or NC//Cb
    plain: np.ndarray,       # (B, nnz), dtype of compressed, C-contiguous
    values: np.ndarray,      # (B, nnz, Rb, Cb, D), C-contiguous, Rb, Cb >= 1
    out: np.ndarray,         # (B, NR, NC, D), C-contiguous, writeable, zero-filled, dtype of values
    compressed_rows: bool,   # True for csr/bsr, False for csc/bsc
    accumulate: bool,        # sum duplicates (or for bool); else a duplicate's last writer wins
    nthreads: int,
    *,
    logical: bool = False,   # accumulate uint8 values with logical or (implied for bool)
    check_ends: bool = False,  # also check 5.1/5.2 (O(B), after the scan)
) -> CompressedError | None: ...
    # ("5.3", b, i, -1, compressed[b, i]): entry i outside [0, nnz] or below entry i - 1
    # ("5.4" | "5.5", b, i, k, plain[b, k]): plain index < 0 or >= number of plain blocks
    # ("5.1" | "5.2", b, i, -1, compressed[b, i]): with check_ends, when the scan found none of
    #   those, the first batch that does not start at 0 / end at nnz
    # The first in (batch, compressed index, position) order; out is then partially
    # written. 5.6 is not checked. Race free: each compressed index is
    # handled by one thread and owns its output rows (csr/bsr) or columns (csc/bsc).

def coo_to_dense(
    indices: np.ndarray,     # (S, nnz) int32/int64, C-contiguous
    values: np.ndarray,      # (nnz, D), C-contiguous
    shape: np.ndarray,       # (S,) non-negative ints (converted to int64)
    out: np.ndarray,         # (prod(shape), D), C-contiguous, writeable, zero-filled, dtype of values
    accumulate: bool,        # sum duplicates (serial); without it entries are stored in
                             # parallel and must be unique
    nthreads: int,
    *,
    logical: bool = False,
) -> CooError | None: ...
    # ("C4" | "C5", d, k, indices[d, k]): index < 0 or >= shape[d]; first in (k, d) order

def small_to_dense_2d(
    compressed: np.ndarray,  # (n + 1,) int32/int64, C-contiguous, invariants 5.1-5.6 hold
    plain: np.ndarray,  # (nnz,) dtype of compressed
    values: np.ndarray,  # (nnz,) any dtype of 1, 2, 4, 8 or 16 bytes
    out: np.ndarray,  # (R, C) C-contiguous, zero-filled, writeable, itemsize of values
    rows: bool,  # csr (True) or csc
) -> bool: ...  # False: nothing written, take compressed_to_dense

def gather_compressed(
    compressed: np.ndarray,   # (B, n + 1) index
    plain: np.ndarray,        # (B, nnz)
    dense: np.ndarray,        # (B, R, C, D), any strides: uint8/16/32/64 raw view or complex128
    Rb: int, Cb: int,         # blocksize ((1, 1) for csr/csc)
    compressed_rows: bool,    # csr/bsr: n == R // Rb; csc/bsc: n == C // Cb
    out: np.ndarray,          # (B, nnz, Rb * Cb * D), dtype of dense, filled
    nthreads: int,
) -> None: ...
