"""Sparse x dense products (Cython, OpenMP): CSR/CSC/BSR/BSC times a dense matrix.

One mechanism serves the four compressed layouts. A block is ``Rb x Cb`` values
(``1 x 1`` for csr/csc); the compressed index runs over block rows (csr/bsr) or
block columns (csc/bsc). Two kernels:

- *gather* (compressed rows): output block row ``i`` is the sum over its blocks
  ``k`` of ``A_k @ dense[plain[k]*Cb : +Cb, :]``. Row-parallel: the rows are
  pre-split into chunks of about equal work (entries and rows, by a binary
  search of the compressed index), scheduled statically (the same rows on the
  same thread every call); a thread done with its own rows takes blocks of rows
  from the back of a late thread's range; every chunk owns its
  output rows, so there are no races. ``N == 1`` with 1 x 1 blocks (SpMV) has
  its own loop with a scalar accumulator, and ``N == 1`` with larger blocks one that sums a
  block row's outputs in locals (2x2, 3x3 and 4x4 blocks unrolled); both prefetch where the
  matrix streams from memory. CSR x dense with 16 or more columns keeps 16 columns of
  an output row in locals while the row's entries stream by (one load and store of the output
  row per row instead of per entry). For float32/float64 the AVX-512
  paths of ``_spmm_simd.h`` replace the loops when the build targets AVX-512
  (SpMV: masked gathers, 8 rows summed at once by a transpose tree; a row of
  the output in registers; 4 block rows x 4 vectors for BSR); each output element is summed
  in one fixed order, so results do not depend on the thread count.
- *scatter* (compressed columns): block column ``j`` adds ``A_k @
  dense[j*Cb : +Cb, :]`` into output block row ``plain[k]``, reading the dense
  row once for all entries of the column. Race free without buffers: each
  thread owns a range of output rows (split by a sampled histogram of the plain
  indices so that the ranges receive about equal entries), scans every entry
  of the batch, compacts those of its rows branch-free and adds them. The
  index scan is repeated per thread (a sequential read), the arithmetic and
  the random row traffic are divided, and every output element receives its
  terms in column order whatever the thread count, so results do not depend
  on it. With enough batches, whole batches are the tasks. Narrow outputs
  (SpMV: at most 4 values per block row), where that scan would dominate, use
  per-thread buffers instead: the block columns are split by nnz, thread t adds
  into a buffer of its own (thread 0 into the output), and the buffers are
  summed row-parallel (floating-point sums then depend on the thread count).

The Python-facing :func:`spmm` checks shapes, dtypes and contiguity. Values,
dense operand and output share one kernel dtype: uint8/16/32/64 for every
integer and bool dtype (signed integers are viewed as unsigned: products and
sums modulo 2**bits are the same bits, and unsigned overflow is defined in C;
bool is uint8 with ``logical=True``: an or of ands), float32/64 and
complex64/128. Index contents are never trusted, not even with ``checked=True`` (invariants
5.1-5.6 were proven, but the memory may have changed since: a user's array shared zero-copy,
another thread): every compressed entry is kept within ``[0, nnz]`` and at or above its
predecessor, every plain index below the plain size, and a broken one is reported as an
error tuple instead of being followed. Unless ``checked``, each batch must also start at 0 and
end at nnz (5.1, 5.2, looked at after the scan).
"""
import numpy as np

cimport numpy as cnp
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memset

from sparsetensor._lib._prefetch cimport (ST_BSR_PF, ST_BSR_PF_MIN_BYTES, ST_SHORT_PF_MIN_BYTES, ST_SPMV_PF,
                                           st_prefetch_past)
from sparsetensor._lib._guard cimport clamp
from sparsetensor._lib._scratch cimport scratch_alloc, scratch_calloc, scratch_free

from sparsetensor._lib._arrays cimport _array, _dim, _index_code, _value_code
from sparsetensor._lib._balance cimport balanced_split
from sparsetensor._lib._parallel cimport st_blocks, st_take
from sparsetensor._lib._types cimport index_t, num_t


cdef extern from "_spmm_simd.h" nogil:
    # AVX-512 fast paths for float32/float64 with compressed rows (1 when compiled in)
    int ST_SPMM_SIMD
    int st_gather_f32_i32(const int32_t*, const int32_t*, const float*, const float*, float*,
                          Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t, Py_ssize_t, int64_t, int64_t, int)
    int st_gather_f32_i64(const int64_t*, const int64_t*, const float*, const float*, float*,
                          Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t, Py_ssize_t, int64_t, int64_t, int)
    int st_gather_f64_i32(const int32_t*, const int32_t*, const double*, const double*, double*,
                          Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t, Py_ssize_t, int64_t, int64_t, int)
    int st_gather_f64_i64(const int64_t*, const int64_t*, const double*, const double*, double*,
                          Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t, Py_ssize_t, int64_t, int64_t, int)


cdef extern from "_spmv_avx2.h" nogil:
    # AVX2 SpMV for float64 at the avx2 level (1 when compiled in; never with ST_SPMM_SIMD)
    int ST_SPMV_AVX2
    int st_spmv2_f64_i32(const int32_t*, const int32_t*, const double*, const double*, double*,
                         Py_ssize_t, Py_ssize_t, int64_t, int64_t, int)
    int st_spmv2_f64_i64(const int64_t*, const int64_t*, const double*, const double*, double*,
                         Py_ssize_t, Py_ssize_t, int64_t, int64_t, int)
    # and its BSR x vector for row-major 3x3 and 4x4 float64 blocks (the last int but one: B)
    int st_bvec2_f64_i32(const int32_t*, const int32_t*, const double*, const double*, double*,
                         Py_ssize_t, Py_ssize_t, int64_t, int64_t, int, int)
    int st_bvec2_f64_i64(const int64_t*, const int64_t*, const double*, const double*, double*,
                         Py_ssize_t, Py_ssize_t, int64_t, int64_t, int, int)


# The AVX2 SpMV runs where the rows hold at least this many entries on average: on shorter rows
# its two gathers cost more than the portable loop's few scalar loads (docs: performance page).
cdef enum:
    _AVX2_SPMV_MIN_MEAN = 16

# Row chunks per thread of the gather kernel for batches (the chunks hold equal nnz; a static
# schedule hands each thread a contiguous run of them), and column chunks per thread of the
# scatter kernel.
cdef Py_ssize_t _CHUNKS_PER_THREAD = 4

# The portable blocks x vector loop keeps a block row's output rows in locals up to this many;
# the portable sparse x dense loop (_tile_rows) this many columns of a CSR output row, or of up
# to _TILE_MAX_RB output rows of a block row.
cdef enum:
    _BVEC_MAX_RB = 16
    _TILE = 16
    _BTILE = 8
    _TILE_MAX_RB = 4
# ... and of one product (no batches): one row range per thread, worked in up to this many
# blocks of rows of at least _GATHER_BLOCK_ITEMS items (entries x block size) each, a multiple
# of 8 rows (the AVX-512 SpMV sums 8 rows at once), so that a thread that is done can take
# blocks of one that started late (see _gather_one).
cdef Py_ssize_t _GATHER_BLOCKS_PER_RANGE = 32
cdef int64_t _GATHER_BLOCK_ITEMS = 4096
cdef enum:
    # a range's word of _gather_one alone in its cache line (both threads take from it)
    _LINE_WORDS = 8
cdef enum:
    # The scatter kernel compacts the entries of a column in chunks of this many.
    _SCATTER_CHUNK = 256
# The scatter kernel uses per-thread buffers for outputs at most this wide (values per
# block row) and when the buffers take at most this many bytes.
cdef Py_ssize_t _PRIVATE_MAX_WIDTH = 4
cdef Py_ssize_t _PRIVATE_MAX_BYTES = 1 << 28

# Kernel return codes (as in _spmm_simd.h); a broken index is then located by a serial scan.
cdef enum:
    _OK = 0
    _BAD_COMPRESSED = 1
    _PLAIN_TOO_LARGE = 3

cnp.import_array()

_KERNEL_DTYPES = tuple(np.dtype(d) for d in (np.uint8, np.uint16, np.uint32, np.uint64, np.float32,
                                              np.float64, np.complex64, np.complex128))


# Geometry of one product: out (M, N) = A (M, K) @ dense (K, N), A in blocks.
cdef struct _Geo:
    Py_ssize_t nc          # compressed slots: block rows (gather) or block columns (scatter)
    Py_ssize_t nplain      # bound of the plain indices
    Py_ssize_t nnz         # blocks per batch
    Py_ssize_t Rb, Cb, bs  # block shape, bs = Rb * Cb
    Py_ssize_t ars, acs    # strides of a block's rows and columns within its bs values
    Py_ssize_t M, K, N
    bint logical           # uint8 as bool: or of ands
    bint checked           # 5.1-5.6 proven: skip the guards
    bint avx2_spmv         # float64 SpMV by _spmv_avx2.h (the avx2 level, rows of >= _AVX2_SPMV_MIN_MEAN on average)
    bint avx2_bvec         # float64 row-major 3x3 / 4x4 blocks x vector by _spmv_avx2.h (the avx2 level)


# Whether the AVX-512 paths are used when compiled in (tests turn them off to cover the
# portable loops; see set_simd).
cdef bint _simd_enabled = True


def set_simd(bint enabled):
    """Use the SIMD paths (AVX-512, or the AVX2 SpMV and BSR x vector; when compiled in) or the portable loops;
    returns the previous setting. For tests and comparisons: results agree up to the summation
    order."""
    global _simd_enabled
    previous = _simd_enabled and (ST_SPMM_SIMD or ST_SPMV_AVX2)
    _simd_enabled = enabled
    return bool(previous)


def simd_available():
    """True when SIMD paths are compiled in: the AVX-512 ones (the build targets AVX-512 F and
    VL) or the AVX2 SpMV (the avx2 level)."""
    return bool(ST_SPMM_SIMD or ST_SPMV_AVX2)


cdef int _threads(int nthreads, Py_ssize_t ntasks) noexcept nogil:
    """The count handed in (small products get 1 from the gate, sparsetensor._config.num_threads),
    at most one per task."""
    if nthreads <= 1 or ntasks < 2:
        return 1
    if nthreads > ntasks:
        return <int>ntasks
    return nthreads


# --------------------------------------------------------------------------
# element operations

cdef inline num_t _mul(num_t a, num_t b) noexcept nogil:
    # uint8/uint16 promote to (signed) int in C, where 65535 * 65535 overflows
    if num_t is uint8_t or num_t is uint16_t:
        return <num_t>(<uint32_t>a * <uint32_t>b)
    else:
        return a * b


cdef inline void _scale(num_t* o, num_t a, const num_t* d, Py_ssize_t n, bint logical) noexcept nogil:
    """o[:n] = a * d[:n]"""
    cdef Py_ssize_t t
    if num_t is uint8_t:
        if logical:
            if a != 0:
                for t in range(n):
                    o[t] = d[t] != 0
            else:
                memset(o, 0, n)
            return
    for t in range(n):
        o[t] = _mul(a, d[t])


cdef inline void _axpy(num_t* o, num_t a, const num_t* d, Py_ssize_t n, bint logical) noexcept nogil:
    """o[:n] += a * d[:n]"""
    cdef Py_ssize_t t
    if num_t is uint8_t:
        if logical:
            if a != 0:
                for t in range(n):
                    o[t] = o[t] | (d[t] != 0)
            return
    for t in range(n):
        o[t] = o[t] + _mul(a, d[t])


cdef inline void _block(num_t* c, Py_ssize_t ldc, const num_t* a, const _Geo* g,
                        const num_t* d, Py_ssize_t ldd, Py_ssize_t n) noexcept nogil:
    """c[:Rb, :n] += A @ d[:Cb, :n] for one block A (rows ldc/ldd apart)."""
    cdef Py_ssize_t r, q
    for r in range(g.Rb):
        for q in range(g.Cb):
            _axpy(c + r * ldc, a[r * g.ars + q * g.acs], d + q * ldd, n, g.logical)


cdef inline bint _bad_slot(int64_t lo, int64_t hi, Py_ssize_t nnz) noexcept nogil:
    return lo < 0 or hi < lo or hi > nnz


cdef inline bint _bad_plain(int64_t p, Py_ssize_t nplain) noexcept nogil:
    return <uint64_t>p >= <uint64_t>nplain


cdef inline int64_t _plain_at(int64_t p, uint64_t nplain) noexcept nogil:
    """``p`` where it is below nplain, else 0: for a loop that reads an index again after its
    guard (another thread may write a caller's array in between): what it follows stays in
    bounds (the product is then undefined, not the memory access)."""
    return p if <uint64_t>p < nplain else 0


# The two kernels, in include files of this module: gather (compressed rows) and scatter
# (compressed columns).
include "_spmm_gather.pxi"
include "_spmm_scatter.pxi"


# The arrays of one product as raw pointers, and the specialisation for their dtypes.
cdef struct _Args:
    const void* c
    const void* p
    const void* v
    const void* d
    void* o
    const int64_t* sb
    const int64_t* db


cdef int _product(const _Args* a, const _Geo* g, Py_ssize_t Bs, Py_ssize_t Bo, bint rows, int nthreads,
                  const index_t* itype, const num_t* vtype) except -1:
    """out[bo] = A[sbatch[bo]] @ dense[dbatch[bo]]: the gather kernel for compressed rows, the
    scatter kernel for compressed columns. 0, or nonzero on a broken index. (itype and vtype are
    NULL: they only select the specialisation.)"""
    cdef int nt = _threads(nthreads, Bo * (g.nc if rows else g.nplain))
    if rows:
        return _gather(<const index_t*>a.c, <const index_t*>a.p, <const num_t*>a.v, <const num_t*>a.d,
                       <num_t*>a.o, a.sb, a.db, g, Bs, Bo, nt)
    return _scatter(<const index_t*>a.c, <const index_t*>a.p, <const num_t*>a.v, <const num_t*>a.d,
                    <num_t*>a.o, a.sb, a.db, g, Bs, Bo, nt)


cdef int _run(int icode, int vcode, const _Args* a, const _Geo* g, Py_ssize_t Bs, Py_ssize_t Bo, bint rows,
              int nt) except -1:
    """_product for index dtype code icode (0 int32, 1 int64) and kernel dtype code vcode."""
    if icode == 0:
        return _run_values(<const int32_t*>NULL, vcode, a, g, Bs, Bo, rows, nt)
    return _run_values(<const int64_t*>NULL, vcode, a, g, Bs, Bo, rows, nt)


cdef int _run_values(const index_t* itype, int vcode, const _Args* a, const _Geo* g, Py_ssize_t Bs, Py_ssize_t Bo,
                     bint rows, int nt) except -1:
    if vcode == 0: return _product(a, g, Bs, Bo, rows, nt, itype, <const uint8_t*>NULL)
    if vcode == 1: return _product(a, g, Bs, Bo, rows, nt, itype, <const uint16_t*>NULL)
    if vcode == 2: return _product(a, g, Bs, Bo, rows, nt, itype, <const uint32_t*>NULL)
    if vcode == 3: return _product(a, g, Bs, Bo, rows, nt, itype, <const uint64_t*>NULL)
    if vcode == 4: return _product(a, g, Bs, Bo, rows, nt, itype, <const float*>NULL)
    if vcode == 5: return _product(a, g, Bs, Bo, rows, nt, itype, <const double*>NULL)
    if vcode == 6: return _product(a, g, Bs, Bo, rows, nt, itype, <const float complex*>NULL)
    return _product(a, g, Bs, Bo, rows, nt, itype, <const double complex*>NULL)


cdef _Geo _geo(Py_ssize_t nc, Py_ssize_t nplain, Py_ssize_t nnz, Py_ssize_t Rb, Py_ssize_t Cb,
               bint block_transposed, Py_ssize_t M, Py_ssize_t K, Py_ssize_t N, bint logical,
               bint checked) noexcept:
    cdef _Geo g
    g.nc = nc; g.nplain = nplain; g.nnz = nnz
    g.Rb = Rb; g.Cb = Cb; g.bs = Rb * Cb
    if block_transposed:
        g.ars = 1; g.acs = Rb
    else:
        g.ars = Cb; g.acs = 1
    g.M = M; g.K = K; g.N = N
    g.logical = logical; g.checked = checked
    g.avx2_spmv = (ST_SPMV_AVX2 and _simd_enabled and N == 1 and Rb * Cb == 1 and not logical
                   and nnz >= _AVX2_SPMV_MIN_MEAN * nc)
    g.avx2_bvec = (ST_SPMV_AVX2 and _simd_enabled and N == 1 and Rb == Cb and (Rb == 3 or Rb == 4)
                   and not block_transposed and not logical)
    return g


# --------------------------------------------------------------------------
# locating a broken index

def _locate_kernel(const index_t[::1] compressed, const index_t[::1] plain, Py_ssize_t B,
                   Py_ssize_t nc, Py_ssize_t nnz, Py_ssize_t nplain):
    cdef Py_ssize_t b, i, k
    cdef int64_t lo, hi, p
    cdef const index_t* cp
    cdef const index_t* pp
    for b in range(B):
        cp = &compressed[0] + b * (nc + 1)
        pp = &plain[0] + b * nnz
        for i in range(nc + 1):
            if cp[i] < 0 or cp[i] > nnz or (i > 0 and cp[i] < cp[i - 1]):
                return ("5.3", b, i, -1, int(cp[i] - cp[i - 1] if i > 0 else cp[i]))
        for i in range(nc):
            for k in range(cp[i], cp[i + 1]):
                p = pp[k]
                if p < 0:
                    return ("5.4", b, i, k, int(p))
                if p >= nplain:
                    return ("5.5", b, i, k, int(p))
    return None


# --------------------------------------------------------------------------
# Python-facing functions

# -- the checks of the arrays (O(1) each, _arrays.pxd: no memoryview to acquire per array; a
# small product's time was mostly those acquisitions and a fused-type dispatch)

cdef bint _batches_in_range(cnp.ndarray batches, int64_t n) noexcept:
    cdef const int64_t* b = <const int64_t*>cnp.PyArray_DATA(batches)
    cdef Py_ssize_t i
    for i in range(_dim(batches, 0)):
        if b[i] < 0 or b[i] >= n:
            return False
    return True


cdef tuple _ends(cnp.ndarray compressed, int icode, Py_ssize_t B, Py_ssize_t nc, Py_ssize_t nnz):
    """Invariants 5.1 and 5.2 of every batch (an O(B) look; the kernels check 5.3-5.5 as they
    scan, trusting where each batch's first slot starts and its last ends): the first broken one
    as ("5.1" | "5.2", b, i, -1, value), or None."""
    cdef const int32_t* c32 = <const int32_t*>cnp.PyArray_DATA(compressed)
    cdef const int64_t* c64 = <const int64_t*>cnp.PyArray_DATA(compressed)
    cdef Py_ssize_t b
    cdef int64_t first, last
    for b in range(B):
        first = c32[b * (nc + 1)] if icode == 0 else c64[b * (nc + 1)]
        last = c32[b * (nc + 1) + nc] if icode == 0 else c64[b * (nc + 1) + nc]
        if first != 0:
            return ("5.1", b, 0, -1, int(first))
        if last != nnz:
            return ("5.2", b, nc, -1, int(last))
    return None


def _flat(a):
    """A 1-D view; one element of scratch when empty, so kernels can take ``&view[0]``."""
    return a.reshape(-1) if a.size else np.zeros(1, a.dtype)


def find_broken_index(compressed, plain, plain_size):
    """The first index that would make a product read out of bounds, or None.

    Parameters
    ----------
    compressed : ndarray, (B, nc + 1), int32 or int64, C-contiguous
    plain : ndarray, (B, nnz), dtype of `compressed`, C-contiguous
    plain_size : int
        The bound of the plain indices (block columns for csr/bsr, block rows for csc/bsc).

    Returns
    -------
    None, or ``("5.3", b, i, -1, value)`` (an entry outside ``[0, nnz]`` or below
    its predecessor; value is the difference, or the entry itself for i == 0),
    ``("5.4" | "5.5", b, i, k, plain[b, k])`` for a plain index out of range.
    Serial; 5.1, 5.2 and 5.6 are not checked (a product does not need them).

    Examples
    --------
    >>> import numpy as np
    >>> find_broken_index(np.array([[0, 1, 2]]), np.array([[0, 3]]), 3)
    ('5.5', 0, 1, 1, 3)
    """
    cdef cnp.ndarray c = _array(compressed, "compressed", 2), p = _array(plain, "plain", 2)
    if _index_code(c) < 0 or _index_code(p) != _index_code(c):
        raise TypeError(f"compressed and plain must be int32 or int64 of one dtype, got {compressed.dtype} and {plain.dtype}")
    B, nc1 = compressed.shape
    if plain.shape[0] != B or nc1 < 1:
        raise ValueError(f"compressed {compressed.shape} and plain {plain.shape} do not fit")
    return _locate_kernel(_flat(compressed), _flat(plain), B, nc1 - 1, plain.shape[1], int(plain_size))


def spmm(compressed, plain, values, dense, out, sbatch, dbatch, blocksize, compressed_rows, nthreads, *,
         block_transposed=False, logical=False, checked=False):
    """``out[b] = A[sbatch[b]] @ dense[dbatch[b]]`` for a batched compressed ``A``.

    Parameters
    ----------
    compressed : ndarray, (Bs, nc + 1), int32 or int64, C-contiguous
        ``nc = M // Rb`` for compressed rows (csr/bsr), ``K // Cb`` for columns (csc/bsc).
    plain : ndarray, (Bs, nnz), dtype of `compressed`, C-contiguous
    values : ndarray, (Bs, nnz, Rb * Cb), C-contiguous, a kernel dtype
        Block ``k`` row-major, or column-major with `block_transposed`.
    dense : ndarray, (Bd, K, N), C-contiguous, dtype of `values`
    out : ndarray, (Bo, M, N), C-contiguous, writeable, dtype of `values`
        Overwritten (need not be initialised).
    sbatch, dbatch : ndarray, (Bo,), int64
        The batch of `A` and of `dense` for each output batch (broadcasting).
    blocksize : (int, int)
        ``(Rb, Cb)``; ``(1, 1)`` for csr/csc.
    compressed_rows : bool
        True for csr/bsr (gather kernel), False for csc/bsc (scatter kernel).
    nthreads : int
    block_transposed : bool, keyword-only
        The blocks of `values` are stored column-major (a bsr/bsc transpose view).
    logical : bool, keyword-only
        uint8 values are bools: the product is an or of ands.
    checked : bool, keyword-only
        Invariants 5.1-5.6 were proven: skip the look at where each batch starts and ends.
        The kernels' index guards stay on (the memory may have changed since).

    Returns
    -------
    None, or the first broken index as :func:`find_broken_index` reports it; when there is
    none and not `checked`, ``("5.1" | "5.2", b, i, -1, compressed[b, i])`` for the first
    batch that does not start at 0 or end at nnz (`out` is then partially written).

    Examples
    --------
    >>> import numpy as np
    >>> out = np.empty((1, 2, 1))
    >>> spmm(np.array([[0, 1, 2]]), np.array([[1, 0]]), np.array([[[2.0], [3.0]]]),
    ...      np.array([[[10.0], [20.0]]]), out, np.zeros(1, np.int64), np.zeros(1, np.int64),
    ...      (1, 1), True, 1)
    >>> out.ravel()
    array([40., 30.])
    """
    cdef Py_ssize_t Rb, Cb, Bs, nnz, Bd, K, N, Bo, M, nc, nplain
    cdef int icode, vcode, err
    cdef bint rows = compressed_rows
    cdef _Geo g
    cdef _Args args
    Rb, Cb = blocksize
    if Rb < 1 or Cb < 1:
        raise ValueError(f"blocksize must be positive, got {tuple(blocksize)}")
    cdef cnp.ndarray c = _array(compressed, "compressed", 2), p = _array(plain, "plain", 2)
    cdef cnp.ndarray v = _array(values, "values", 3), d = _array(dense, "dense", 3), o = _array(out, "out", 3)
    cdef cnp.ndarray sb = _array(sbatch, "sbatch", 1), db = _array(dbatch, "dbatch", 1)
    icode, vcode = _index_code(c), _value_code(v)
    if icode < 0:
        raise TypeError(f"compressed must be int32 or int64, got {compressed.dtype}")
    if _index_code(p) != icode:
        raise TypeError(f"plain must have dtype {compressed.dtype}, got {plain.dtype}")
    if vcode < 0:
        raise TypeError(f"values must have a kernel dtype ({', '.join(map(str, _KERNEL_DTYPES))}), "
                        f"got {values.dtype}")
    if logical and vcode != 0:
        raise TypeError(f"logical products need uint8 values, got {values.dtype}")
    if _value_code(d) != vcode or cnp.PyArray_ITEMSIZE(d) != cnp.PyArray_ITEMSIZE(v):
        raise TypeError(f"dense must have dtype {values.dtype}, got {dense.dtype}")
    if _value_code(o) != vcode or cnp.PyArray_ITEMSIZE(o) != cnp.PyArray_ITEMSIZE(v):
        raise TypeError(f"out must have dtype {values.dtype}, got {out.dtype}")
    if not cnp.PyArray_ISWRITEABLE(o):
        raise ValueError("out must be writeable")
    if _index_code(sb) != 1 or _index_code(db) != 1:
        raise TypeError(f"sbatch and dbatch must have dtype int64, got {sbatch.dtype} and {dbatch.dtype}")
    Bs, nnz = _dim(p, 0), _dim(p, 1)
    Bd, K, N = _dim(d, 0), _dim(d, 1), _dim(d, 2)
    Bo, M = _dim(o, 0), _dim(o, 1)
    if _dim(v, 0) != Bs or _dim(v, 1) != nnz or _dim(v, 2) != Rb * Cb:
        raise ValueError(f"values must have shape {(Bs, nnz, Rb * Cb)}, got {values.shape}")
    if _dim(o, 2) != N or M % Rb or K % Cb:
        raise ValueError(f"out {out.shape} and dense {dense.shape} do not fit blocksize {(Rb, Cb)}")
    nc = M // Rb if rows else K // Cb
    nplain = K // Cb if rows else M // Rb
    if _dim(c, 0) != Bs or _dim(c, 1) != nc + 1:
        raise ValueError(f"compressed must have shape {(Bs, nc + 1)}, got {compressed.shape}")
    if _dim(sb, 0) != Bo or _dim(db, 0) != Bo:
        raise ValueError(f"sbatch and dbatch must have shape {(Bo,)}, got {sbatch.shape} and {dbatch.shape}")
    if not _batches_in_range(sb, Bs) or not _batches_in_range(db, Bd):
        raise ValueError(f"sbatch must be in [0, {Bs}) and dbatch in [0, {Bd})")
    if not checked and (nnz == 0 or Bo == 0 or M == 0 or N == 0 or K == 0):  # no kernel scans the indices
        found = _locate_kernel(_flat(compressed), _flat(plain), Bs, nc, nnz, nplain)
        if found is not None:
            return found
    if Bo == 0 or M == 0 or N == 0:
        return None if checked else _ends(c, icode, Bs, nc, nnz)
    if K == 0 or nnz == 0:
        out[...] = 0
        return None if checked else _ends(c, icode, Bs, nc, nnz)
    # the guards stay on for a checked tensor: its memory may have changed since (issue 34)
    g = _geo(nc, nplain, nnz, Rb, Cb, block_transposed, M, K, N, logical, False)
    args.c = cnp.PyArray_DATA(c)
    args.p = cnp.PyArray_DATA(p)
    args.v = cnp.PyArray_DATA(v)
    args.d = cnp.PyArray_DATA(d)
    args.o = cnp.PyArray_DATA(o)
    args.sb = <const int64_t*>cnp.PyArray_DATA(sb)
    args.db = <const int64_t*>cnp.PyArray_DATA(db)
    err = _run(icode, vcode, &args, &g, Bs, Bo, rows, nthreads)
    if err == 0:
        return None if checked else _ends(c, icode, Bs, nc, nnz)
    found = _locate_kernel(_flat(compressed), _flat(plain), Bs, nc, nnz, nplain)
    if found is None:  # the indices changed between the kernel and the scan (another thread)
        raise ValueError("spmm: an index changed during the product")
    return found
