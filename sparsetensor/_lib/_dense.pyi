"""Dense <-> sparse kernels (Cython, OpenMP).

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
) -> CompressedError | None: ...
    # ("5.3", b, i, -1, compressed[b, i]): entry i outside [0, nnz] or below entry i - 1
    # ("5.4" | "5.5", b, i, k, plain[b, k]): plain index < 0 or >= number of plain blocks
    # The first in (batch, compressed index, position) order; out is then partially
    # written. 5.1, 5.2 and 5.6 are not checked. Race free: each compressed index is
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

def dense_to_compressed(
    dense: np.ndarray,       # (B, NR, NC, Dz) C-contiguous: zero-test view or the array itself
    raw: np.ndarray | None,  # (B, NR, NC, Dr) the same elements, any dtype of the same
                             # element width (None: dense)
    Rb: int,                 # block size; NR % Rb == 0 and NC % Cb == 0
    Cb: int,
    compressed_rows: bool,
    index_dtype: np.dtype | type,  # int32 or int64
    nthreads: int,
    *,
    float16: bool = False,   # dense is float16 bits as uint16: nonzero iff x & 0x7fff
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
    # (compressed (B, nc + 1), plain (B, nnz), values (B, nnz, Rb, Cb, Dr) in raw's dtype,
    #  nnz_per_batch (B,) int64). A block is specified iff any of its Rb*Cb*Dz elements is
    # nonzero; plain is sorted within each compressed slot. If the batches differ in nnz,
    # compressed/plain/values have length 0 on axis 1 and only nnz_per_batch is meaningful.
    # ValueError if nnz or a plain index does not fit index_dtype.

def dense_to_coo(
    dense: np.ndarray,       # (M, Dz) C-contiguous: zero-test view or the array itself
    raw: np.ndarray | None,  # (M, Dr) the same elements (None: dense)
    shape: np.ndarray,       # (S,) non-negative ints, prod(shape) == M (S == 0: M == 1)
    index_dtype: np.dtype | type,
    nthreads: int,
    *,
    float16: bool = False,
) -> tuple[np.ndarray, np.ndarray]: ...
    # indices (S, nnz) lexicographically sorted, values (nnz, Dr) in raw's dtype;
    # row m is specified iff any of its Dz elements is nonzero.
