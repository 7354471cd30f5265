"""Dense -> sparse kernels (Cython, OpenMP), re-exported by sparsetensor._lib._dense.

The dense array is read once. ``dense`` is the zero-test view (see _dense.pyi) or the
array itself; ``raw`` the values to copy, any dtype of the same element width (None:
``dense``). ``nthreads`` is used as given (at least 1); inputs below about 65536
element operations run serially.
"""
import numpy as np

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
