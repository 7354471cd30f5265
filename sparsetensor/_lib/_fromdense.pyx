"""Dense -> sparse kernels (Cython, OpenMP): dense_to_compressed, dense_to_coo.

Re-exported by _dense.pyx, whose module docstring describes the conventions. The
dense array is read once: each task scans a contiguous range of (block) rows with a
vectorised zero test, appending the nonzeros to its own growable buffer; the buffers
are then copied into the outputs (and, for csc/bsc, transposed in column stripes).
"""
import numpy as np

from ._pool cimport empty

from cython.parallel cimport prange
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcpy, memset

from sparsetensor._lib._parallel cimport ENTRIES_PER_THREAD
from sparsetensor._lib._types cimport index_t

include "_dense_common.pxi"


# Element types the zero test reads.
ctypedef fused ztest_t:
    uint8_t
    uint16_t
    uint32_t
    uint64_t
    float
    double


_INT32_MAX = 2**31 - 1
# The csc transpose moves columns in stripes of about this many bytes of
# write positions and values, to keep them in cache.
cdef Py_ssize_t _STRIPE_BYTES = 512


def _zero_view(a, name, float16):
    """(view, mask) for the zero test; integer views test ``(x & mask) != 0``."""
    _require_c_contiguous(a, name)
    dt = a.dtype
    if a.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension")
    if dt == np.float16 or (float16 and dt.kind in "iu" and dt.itemsize == 2):
        return a.view(np.uint16), 0x7FFF
    if dt.kind in "biu":
        return a.view(_UINT_OF_SIZE[dt.itemsize]), 0xFFFFFFFFFFFFFFFF
    if not dt.isnative:
        raise TypeError(f"{name}: expected a native byte order dtype, got {dt}")
    if dt in (np.float32, np.float64):
        return a, 0
    if dt == np.complex64:
        return a.view(np.float32), 0
    if dt == np.complex128:
        return a.view(np.float64), 0
    raise TypeError(f"{name}: unsupported dtype {dt} for a zero test")


def _index_dtype(index_dtype):
    dt = np.dtype(index_dtype)
    if dt not in (np.int32, np.int64):
        raise TypeError(f"index_dtype must be int32 or int64, got {dt}")
    return dt


# --------------------------------------------------------------------------
# zero tests

cdef inline int _nz(ztest_t x, uint64_t mask) noexcept nogil:
    if ztest_t is float or ztest_t is double:
        return x != 0
    else:
        return (x & <ztest_t>mask) != 0


cdef extern from *:
    """
    #if defined(_MSC_VER)
    #include <intrin.h>
    static inline int st_ctz64(unsigned long long x) {
        unsigned long i; _BitScanForward64(&i, x); return (int)i;
    }
    #else
    static inline int st_ctz64(unsigned long long x) { return __builtin_ctzll(x); }
    #endif
    """
    int st_ctz64(unsigned long long x) noexcept nogil


cdef inline int _any32(const ztest_t* p, uint64_t mask) noexcept nogil:
    """Whether any of p[0:32] is nonzero (branch-free, vectorisable)."""
    cdef int t, acc = 0
    for t in range(32):
        acc = acc | _nz(p[t], mask)
    return acc


cdef inline uint64_t _mask32(const ztest_t* p, uint64_t mask) noexcept nogil:
    """Bit t set iff p[t] is nonzero, t < 32."""
    cdef int t
    cdef uint64_t bits = 0
    for t in range(32):
        bits = bits | (<uint64_t>_nz(p[t], mask) << t)
    return bits


# Iterates over the nonzero positions of p[j0:n] in order, 32 elements at a
# time: a chunk without nonzeros costs one vectorised test, each nonzero one
# count-trailing-zeros.
cdef struct _NzIter:
    Py_ssize_t base     # start of the current chunk
    Py_ssize_t n
    uint64_t bits       # nonzeros of the current chunk not yet returned


cdef inline void _iter_init(_NzIter* it, Py_ssize_t j0, Py_ssize_t n) noexcept nogil:
    it.base = j0 - 32
    it.n = n
    it.bits = 0


cdef inline Py_ssize_t _iter_next(_NzIter* it, const ztest_t* p, uint64_t mask) noexcept nogil:
    """The next nonzero position, or n."""
    cdef Py_ssize_t t
    while it.bits == 0:
        it.base += 32
        if it.base >= it.n:
            return it.n
        if it.base + 32 <= it.n:
            if _any32(p + it.base, mask):
                it.bits = _mask32(p + it.base, mask)
        else:
            for t in range(it.n - it.base):
                it.bits = it.bits | (<uint64_t>_nz(p[it.base + t], mask) << t)
    t = st_ctz64(it.bits)
    it.bits = it.bits & (it.bits - 1)
    return it.base + t


cdef inline void _iter_skip(_NzIter* it, Py_ssize_t j) noexcept nogil:
    """Drops the positions below j."""
    if j >= it.base + 32:
        it.base = j - 32
        it.bits = 0
    elif j > it.base:
        it.bits = it.bits & ~((<uint64_t>1 << (j - it.base)) - 1)


# --------------------------------------------------------------------------
# Growable per-task buffers: the dense -> sparse kernels scan the dense array
# once, each task appending (index, value bytes) of the nonzeros of its rows
# to its own buffer; the buffers are then copied to the outputs.

cdef struct _Buf:
    int64_t* idx
    char* val
    int64_t n, cap
    bint failed


cdef bint _grow(_Buf* buf, Py_ssize_t nbytes) noexcept nogil:
    """Doubles the capacity of buf; False when out of memory."""
    cdef int64_t cap = 2 * buf.cap if buf.cap else max(16, 65536 // (nbytes + 8))
    cdef void* p = realloc(buf.idx, cap * sizeof(int64_t))
    if p == NULL:
        buf.failed = True
        return False
    buf.idx = <int64_t*>p
    if nbytes:
        p = realloc(buf.val, cap * nbytes)
        if p == NULL:
            buf.failed = True
            return False
        buf.val = <char*>p
    buf.cap = cap
    return True


cdef inline bint _push(_Buf* buf, int64_t idx, Py_ssize_t nbytes) noexcept nogil:
    """Appends idx and room for nbytes of value; False when out of memory."""
    if buf.n == buf.cap and not _grow(buf, nbytes):
        return False
    buf.idx[buf.n] = idx
    buf.n += 1
    return True


cdef inline void _copy_bytes(char* dst, const char* src, Py_ssize_t n) noexcept nogil:
    # Constant sizes compile to plain moves.
    if n == 4:
        memcpy(dst, src, 4)
    elif n == 8:
        memcpy(dst, src, 8)
    elif n == 2:
        memcpy(dst, src, 2)
    elif n == 1:
        dst[0] = src[0]
    elif n == 16:
        memcpy(dst, src, 16)
    elif n > 0:
        memcpy(dst, src, n)


cdef class _Buffers:
    """Owns one _Buf per task and frees them however the conversion ends."""
    cdef _Buf* bufs
    cdef Py_ssize_t n

    def __cinit__(self, Py_ssize_t n):
        self.bufs = <_Buf*>calloc(max(n, 1), sizeof(_Buf))
        if self.bufs == NULL:
            raise MemoryError()
        self.n = n

    def __dealloc__(self):
        cdef Py_ssize_t t
        if self.bufs != NULL:
            for t in range(self.n):
                free(self.bufs[t].idx)
                free(self.bufs[t].val)
            free(self.bufs)

    def sizes(self):
        """Entries per task, int64 array."""
        return np.array([self.bufs[t].n for t in range(self.n)], dtype=np.int64)

    def check(self):
        for t in range(self.n):
            if self.bufs[t].failed:
                raise MemoryError("out of memory collecting the nonzeros of a dense array")


cdef inline Py_ssize_t _task_start(Py_ssize_t t, Py_ssize_t ntasks, Py_ssize_t n) noexcept nogil:
    return (t * n) // ntasks


# --------------------------------------------------------------------------
# dense -> compressed: one scan of the block rows (task t owns a contiguous
# range of the B * nrb block rows), then a copy into csr order; csc/bsc then
# move the csr entries column stripe by column stripe (rows visited in order,
# so the plain indices come out sorted). The dense array is read once.

cdef inline bint _push_block(_Buf* buf, const char* src, Py_ssize_t bc, const _Geom* g,
                             Py_ssize_t eb) noexcept nogil:
    """Appends block column bc of the block row whose raw bytes start at src."""
    cdef Py_ssize_t ii
    cdef Py_ssize_t rowbytes = g.Cb * eb        # one row of a block
    cdef Py_ssize_t linebytes = g.NC * eb       # one row of the dense array
    if not _push(buf, bc, g.Rb * rowbytes):
        return False
    if rowbytes:
        for ii in range(g.Rb):
            _copy_bytes(buf.val + (buf.n - 1) * g.Rb * rowbytes + ii * rowbytes,
                        src + ii * linebytes + bc * rowbytes, rowbytes)
    return True


cdef void _scan_block_rows(const ztest_t* dense, const char* raw, const _Geom* g, Py_ssize_t eb,
                           Py_ssize_t s0, Py_ssize_t s1, int64_t* counts, uint8_t* flags,
                           _Buf* buf, uint64_t mask) noexcept nogil:
    """Appends the nonzero blocks of block rows [s0, s1) to buf and counts them.
    ``flags`` (ncb bytes) is scratch for blocks of more than one row."""
    cdef Py_ssize_t s, bc, ii, j, n = g.ncb * g.W
    cdef const ztest_t* row
    cdef const char* src
    cdef int64_t cnt
    cdef _NzIter it
    for s in range(s0, s1):
        row = dense + s * g.Rb * g.rowstride
        src = raw + s * g.Rb * g.NC * eb
        cnt = 0
        if g.Rb == 1 and g.W == 1:        # csr without dense dims: one element per block
            _iter_init(&it, 0, n)
            j = _iter_next(&it, row, mask)
            while j < n:
                if not _push(buf, j, eb):
                    return
                _copy_bytes(buf.val + (buf.n - 1) * eb, src + j * eb, eb)
                cnt += 1
                j = _iter_next(&it, row, mask)
        elif g.Rb == 1:
            _iter_init(&it, 0, n)
            j = _iter_next(&it, row, mask)
            while j < n:
                bc = j // g.W
                if not _push_block(buf, src, bc, g, eb):
                    return
                cnt += 1
                _iter_skip(&it, (bc + 1) * g.W)
                j = _iter_next(&it, row, mask)
        else:
            # Mark the blocks with a nonzero in any of their rows, then take them in order.
            memset(flags, 0, g.ncb)
            for ii in range(g.Rb):
                _iter_init(&it, 0, n)
                j = _iter_next(&it, row + ii * g.rowstride, mask)
                while j < n:
                    bc = j // g.W
                    flags[bc] = 1
                    _iter_skip(&it, (bc + 1) * g.W)
                    j = _iter_next(&it, row + ii * g.rowstride, mask)
            for bc in range(g.ncb):
                if flags[bc]:
                    if not _push_block(buf, src, bc, g, eb):
                        return
                    cnt += 1
        counts[s] = cnt


def _d2c_scan(const ztest_t[::1] dense, const uint8_t[::1] raw, int64_t[::1] counts,
              uint8_t[::1] flags, _Buffers bufs, Py_ssize_t B, Py_ssize_t NR, Py_ssize_t NC,
              Py_ssize_t Dz, Py_ssize_t Rb, Py_ssize_t Cb, Py_ssize_t eb, uint64_t mask, int nt):
    cdef _Geom g = _geom(B, NR, NC, Dz, Rb, Cb, True)
    cdef const ztest_t* zp = &dense[0]
    cdef const char* rp = <const char*>&raw[0]
    cdef int64_t* cp = &counts[0]
    cdef uint8_t* fp = &flags[0]
    cdef Py_ssize_t fstride = g.ncb if Rb > 1 else 0
    cdef _Buf* bp = bufs.bufs
    cdef Py_ssize_t t, T = bufs.n, nslots = B * g.nrb
    if nt > 1:
        for t in prange(T, nogil=True, num_threads=nt, schedule="dynamic"):
            _scan_block_rows(zp, rp, &g, eb, _task_start(t, T, nslots),
                             _task_start(t + 1, T, nslots), cp, fp + t * fstride, bp + t,
                             mask)
    else:
        with nogil:
            for t in range(T):
                _scan_block_rows(zp, rp, &g, eb, _task_start(t, T, nslots),
                                 _task_start(t + 1, T, nslots), cp, fp + t * fstride, bp + t, mask)
    bufs.check()


cdef void _assemble_block_rows(const int64_t* offsets, const int64_t* counts, const _Buf* buf,
                               index_t* plain, char* values, Py_ssize_t s0, Py_ssize_t s1,
                               Py_ssize_t nrb, Py_ssize_t nnz, Py_ssize_t bb) noexcept nogil:
    cdef Py_ssize_t s, b, k, n, pos, q = 0
    for s in range(s0, s1):
        b = s // nrb
        pos = b * nnz + offsets[s + b]
        n = counts[s]
        for k in range(n):
            plain[pos + k] = <index_t>buf.idx[q + k]
        if bb:
            memcpy(values + pos * bb, buf.val + q * bb, n * bb)
        q += n


def _d2c_assemble(const int64_t[::1] offsets, const int64_t[::1] counts, _Buffers bufs,
                  index_t[::1] plain, uint8_t[::1] values, Py_ssize_t nslots, Py_ssize_t nrb,
                  Py_ssize_t nnz, Py_ssize_t bb, int nt):
    """Copies the scanned blocks into csr order: plain (B, nnz), values (B, nnz) blocks."""
    cdef const int64_t* op = &offsets[0]
    cdef const int64_t* cp = &counts[0]
    cdef index_t* pp = &plain[0]
    cdef char* vp = <char*>&values[0]
    cdef _Buf* bp = bufs.bufs
    cdef Py_ssize_t t, T = bufs.n
    if nt > 1:
        for t in prange(T, nogil=True, num_threads=nt, schedule="static"):
            _assemble_block_rows(op, cp, bp + t, pp, vp, _task_start(t, T, nslots),
                                 _task_start(t + 1, T, nslots), nrb, nnz, bb)
    else:
        with nogil:
            for t in range(T):
                _assemble_block_rows(op, cp, bp + t, pp, vp, _task_start(t, T, nslots),
                                     _task_start(t + 1, T, nslots), nrb, nnz, bb)


cdef void _column_offsets(const int64_t* rplain, int64_t* coff, Py_ssize_t b, Py_ssize_t ncb,
                          Py_ssize_t nnz) noexcept nogil:
    """coff[b] = the csc offsets of batch b of the csr plain indices rplain."""
    cdef const int64_t* rp = rplain + b * nnz
    cdef int64_t* co = coff + b * (ncb + 1)
    cdef Py_ssize_t k, bc
    for bc in range(ncb + 1):
        co[bc] = 0
    for k in range(nnz):
        co[rp[k] + 1] += 1
    for bc in range(ncb):
        co[bc + 1] += co[bc]


cdef void _transpose_stripes(const int64_t* roff, const int64_t* rplain, const char* rvalues,
                             const int64_t* coff, int64_t* cursor, int64_t* rowcur,
                             index_t* plain, char* values, Py_ssize_t b, Py_ssize_t c0,
                             Py_ssize_t c1, Py_ssize_t width, Py_ssize_t nrb, Py_ssize_t ncb,
                             Py_ssize_t nnz, Py_ssize_t bb) noexcept nogil:
    """Moves the entries of batch b with block column in [c0, c1) from csr to csc
    order, `width` columns at a time so that the columns' write positions stay
    in cache. Visiting rows in order leaves each column's row indices sorted.
    rowcur (nrb) is scratch: each row's first entry not yet moved."""
    cdef const int64_t* ro = roff + b * (nrb + 1)
    cdef const int64_t* rp = rplain + b * nnz
    cdef int64_t* cur = cursor + b * ncb
    cdef Py_ssize_t br, bc, k, hi, mid, lo, dst, s0, s1
    for bc in range(c0, c1):
        cur[bc] = coff[b * (ncb + 1) + bc]
    for br in range(nrb):                  # each row's first entry at or after c0
        lo = ro[br]
        hi = ro[br + 1]
        while lo < hi and c0 > 0:
            mid = (lo + hi) // 2
            if rp[mid] < c0:
                lo = mid + 1
            else:
                hi = mid
        rowcur[br] = lo
    s0 = c0
    while s0 < c1:
        s1 = min(s0 + width, c1)
        s0 = s1
        for br in range(nrb):
            hi = ro[br + 1]
            k = rowcur[br]
            while k < hi and rp[k] < s1:
                bc = rp[k]
                dst = b * nnz + cur[bc]
                cur[bc] += 1
                plain[dst] = <index_t>br
                _copy_bytes(values + dst * bb, rvalues + (b * nnz + k) * bb, bb)
                k += 1
            rowcur[br] = k


def _d2c_transpose(const int64_t[::1] roff, const int64_t[::1] rplain, const uint8_t[::1] rvalues,
                   int64_t[::1] coff, index_t[::1] plain, uint8_t[::1] values, Py_ssize_t B,
                   Py_ssize_t nrb, Py_ssize_t ncb, Py_ssize_t nnz, Py_ssize_t bb, int nthreads):
    """csr block grid (roff, rplain, rvalues) -> csc (coff, plain, values)."""
    # Narrow stripes keep the write positions in cache; wide enough that a row
    # has about 4 entries per stripe on average, as every row is visited per stripe.
    cdef Py_ssize_t b, t
    cdef Py_ssize_t width = max(16, _STRIPE_BYTES // (bb + 8), 4 * nrb * ncb // max(nnz, 1))
    # Tasks: batches times column ranges, each range a whole number of stripes.
    # (a phase whose size the gate did not see: at least two threads' worth of entries, as
    # the shared grain of _parallel.pxd counts them, to run on more than one)
    cdef int nt = _threads(nthreads if B * (nnz + nrb + ncb) >= 2 * ENTRIES_PER_THREAD else 1, B * ncb // width)
    cdef Py_ssize_t span, nranges = 1
    if nt > 1 and B < 4 * nt:
        nranges = max(1, min(ncb // width, 4 * nt))
    span = max(1, ((ncb + nranges - 1) // nranges + width - 1) // width) * width
    nranges = (ncb + span - 1) // span
    cursor = empty(max(B * ncb, 1), np.int64)
    rowcur = empty(max(B * nranges * nrb, 1), np.int64)
    cdef const int64_t* rop = &roff[0]
    cdef const int64_t* rpp = &rplain[0]
    cdef const char* rvp = <const char*>&rvalues[0]
    cdef int64_t* cop = &coff[0]
    cdef int64_t[::1] cursor_v = cursor
    cdef int64_t[::1] rowcur_v = rowcur
    cdef int64_t* cup = &cursor_v[0]
    cdef int64_t* rcp = &rowcur_v[0]
    cdef index_t* pp = &plain[0]
    cdef char* vp = <char*>&values[0]
    if nt > 1:
        for b in prange(B, nogil=True, num_threads=nt, schedule="dynamic"):
            _column_offsets(rpp, cop, b, ncb, nnz)
        for t in prange(B * nranges, nogil=True, num_threads=nt, schedule="dynamic"):
            _transpose_stripes(rop, rpp, rvp, cop, cup, rcp + t * nrb, pp, vp, t // nranges,
                               (t % nranges) * span, min((t % nranges + 1) * span, ncb),
                               width, nrb, ncb, nnz, bb)
    else:
        with nogil:
            for b in range(B):
                _column_offsets(rpp, cop, b, ncb, nnz)
            for t in range(B * nranges):
                _transpose_stripes(rop, rpp, rvp, cop, cup, rcp + t * nrb, pp, vp,
                                   t // nranges, (t % nranges) * span,
                                   min((t % nranges + 1) * span, ncb), width, nrb, ncb, nnz, bb)


def _dense_views(dense, raw, float16, ndim):
    """Zero-test and raw views of the dense input, with matching element widths."""
    z, mask = _zero_view(dense, "dense", float16)
    r = _raw_view(dense if raw is None else raw, "raw")
    last = ndim - 1
    if z.ndim != ndim or r.ndim != ndim:
        raise ValueError(f"dense and raw must be {ndim}-dimensional, got {dense.shape}"
                         f" and {None if raw is None else raw.shape}")
    if (z.shape[:last] != r.shape[:last]
            or z.shape[last] * z.itemsize != r.shape[last] * r.itemsize):
        raise ValueError(f"raw {r.dtype}{list(r.shape)} does not view the elements of "
                         f"dense {z.dtype}{list(z.shape)}")
    return z, mask, r


def _tasks(nt, n):
    """Number of scan tasks for n units of work: about 4 per thread."""
    return 1 if nt == 1 else max(1, min(n, 4 * nt))


def _bytes(a):
    """A flat uint8 view of C-contiguous ``a`` (scratch when empty)."""
    return _flat(a).view(np.uint8)


def dense_to_compressed(dense, raw, Rb, Cb, compressed_rows, index_dtype, nthreads, *,
                        float16=False):
    """Compress a batched dense array into (block) csr or csc form.

    A block (an ``Rb x Cb x D`` sub-array) is specified iff any of its elements
    is nonzero; NaN counts as nonzero, -0.0 as zero. The dense array is read
    once, by block rows.

    Parameters
    ----------
    dense : ndarray, (B, NR, NC, Dz), C-contiguous
        The zero-test view (module docstring), or the array itself in any
        numeric or bool dtype (the kernel makes the view).
    raw : ndarray or None, (B, NR, NC, Dr), C-contiguous
        The values to copy: the same elements in any dtype of the same element
        width (None: `dense` itself).
    Rb, Cb : int
        Block size, ``NR % Rb == 0`` and ``NC % Cb == 0``.
    compressed_rows : bool
        True for csr/bsr, False for csc/bsc (compressed dim is the block column).
    index_dtype : int32 or int64
    nthreads : int
    float16 : bool, keyword-only
        `dense` holds float16 bit patterns as uint16 (or int16): zero test
        ``(x & 0x7fff) != 0``. Implied when `dense` is float16.

    Returns
    -------
    compressed : (B, nc + 1) index_dtype
    plain : (B, nnz) index_dtype, sorted within each compressed slot
    values : (B, nnz, Rb, Cb, Dr), dtype of `raw`
    nnz_per_batch : (B,) int64
        When the batches differ in nnz, `compressed`, `plain` and `values`
        are empty (their axis 1 has length 0) and only this is meaningful.

    Raises
    ------
    ValueError
        If nnz or a plain index does not fit `index_dtype`.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[0., 1., 0.], [2., 0., 3.]])[None, :, :, None]
    >>> c, p, v, n = dense_to_compressed(a, None, 1, 1, True, np.int32, 1)
    >>> c, p, n
    (array([[0, 1, 3]], dtype=int32), array([[1, 0, 2]], dtype=int32), array([3]))
    >>> v.ravel()
    array([1., 2., 3.])
    >>> c, p, v, n = dense_to_compressed(a, None, 1, 1, False, np.int32, 1)
    >>> c, p, v.ravel()
    (array([[0, 1, 2, 3]], dtype=int32), array([[1, 0, 1]], dtype=int32), array([2., 1., 3.]))
    """
    index_dtype = _index_dtype(index_dtype)
    z, mask, r = _dense_views(dense, raw, float16, 4)
    Rb, Cb = int(Rb), int(Cb)
    B, NR, NC, Dz = z.shape
    Dr = r.shape[3]
    if Rb < 1 or Cb < 1 or NR % Rb or NC % Cb:
        raise ValueError(f"block size {(Rb, Cb)} does not divide the shape {(NR, NC)}")
    rows = bool(compressed_rows)
    nrb, ncb = NR // Rb, NC // Cb
    nplain = ncb if rows else nrb
    eb = Dr * r.itemsize
    bb = Rb * Cb * eb
    out_dtype = (dense if raw is None else raw).dtype
    nslots = B * nrb
    nt = _threads(int(nthreads), nslots)
    bufs = _Buffers(_tasks(nt, nslots))
    counts = np.zeros(nslots, np.int64)
    flags = empty(bufs.n * ncb if Rb > 1 else 0, np.uint8)
    _d2c_scan(_flat(z), _bytes(r), _flat(counts), _flat(flags), bufs, B, NR, NC, Dz, Rb, Cb,
              eb, mask, nt)
    roff = np.zeros((B, nrb + 1), np.int64)
    np.cumsum(counts.reshape(B, nrb), axis=1, out=roff[:, 1:])
    nnz_per_batch = roff[:, nrb].copy()
    if B and (nnz_per_batch != nnz_per_batch[0]).any():
        return (np.empty((B, 0), index_dtype), np.empty((B, 0), index_dtype),
                np.empty((B, 0, Rb, Cb, Dr), r.dtype).view(out_dtype), nnz_per_batch)
    nnz = int(nnz_per_batch[0]) if B else 0
    if index_dtype == np.int32 and max(nnz, nplain - 1) > _INT32_MAX:
        raise ValueError(f"nnz={nnz} or {nplain} plain blocks do not fit index dtype int32")
    plain = empty((B, nnz), index_dtype if rows else np.int64)
    values = empty((B, nnz, Rb, Cb, Dr), r.dtype)
    _d2c_assemble(_flat(roff), _flat(counts), bufs, _flat(plain), _bytes(values),
                  nslots, nrb, nnz, bb, nt)
    del bufs
    if rows:
        return roff.astype(index_dtype), plain, values.view(out_dtype), nnz_per_batch
    coff = empty((B, ncb + 1), np.int64)
    cplain = empty((B, nnz), index_dtype)
    cvalues = np.empty_like(values)
    _d2c_transpose(_flat(roff), _flat(plain), _bytes(values), _flat(coff), _flat(cplain),
                   _bytes(cvalues), B, nrb, ncb, nnz, bb, int(nthreads))
    return coff.astype(index_dtype), cplain, cvalues.view(out_dtype), nnz_per_batch


# --------------------------------------------------------------------------
# dense -> coo: one scan (task t owns a contiguous range of rows), then the
# linear indices are unravelled and the values copied.

cdef void _scan_rows(const ztest_t* dense, const char* raw, Py_ssize_t W, Py_ssize_t eb,
                     Py_ssize_t m0, Py_ssize_t m1, _Buf* buf, uint64_t mask) noexcept nogil:
    """Appends the rows in [m0, m1) with a nonzero to buf."""
    cdef Py_ssize_t j, m
    cdef _NzIter it
    if W == 0:
        return
    _iter_init(&it, m0 * W, m1 * W)
    j = _iter_next(&it, dense, mask)
    while W == 1 and j < m1:             # no dense dims: one element per row
        if not _push(buf, j, eb):
            return
        _copy_bytes(buf.val + (buf.n - 1) * eb, raw + j * eb, eb)
        j = _iter_next(&it, dense, mask)
    while j < m1 * W:
        m = j // W
        if not _push(buf, m, eb):
            return
        if eb:
            _copy_bytes(buf.val + (buf.n - 1) * eb, raw + m * eb, eb)
        _iter_skip(&it, (m + 1) * W)
        j = _iter_next(&it, dense, mask)


def _d2coo_scan(const ztest_t[::1] dense, const uint8_t[::1] raw, _Buffers bufs,
                Py_ssize_t M, Py_ssize_t Dz, Py_ssize_t eb, uint64_t mask, int nt):
    cdef const ztest_t* zp = &dense[0]
    cdef const char* rp = <const char*>&raw[0]
    cdef _Buf* bp = bufs.bufs
    cdef Py_ssize_t t, T = bufs.n
    if nt > 1:
        for t in prange(T, nogil=True, num_threads=nt, schedule="dynamic"):
            _scan_rows(zp, rp, Dz, eb, _task_start(t, T, M), _task_start(t + 1, T, M),
                       bp + t, mask)
    else:
        with nogil:
            for t in range(T):
                _scan_rows(zp, rp, Dz, eb, _task_start(t, T, M), _task_start(t + 1, T, M),
                           bp + t, mask)
    bufs.check()


cdef void _assemble_rows(const _Buf* buf, Py_ssize_t start, const int64_t* shape,
                         index_t* indices, char* values, Py_ssize_t S, Py_ssize_t nnz,
                         Py_ssize_t eb) noexcept nogil:
    """Unravels the linear indices of one task into indices[:, start:] and copies
    its values. The linear indices grow, so each multi-index is the previous
    one plus the difference, with carries (a division only on a carry)."""
    cdef Py_ssize_t q, d
    cdef int64_t m, carry, prev = 0
    cdef int64_t idx[32]
    for d in range(min(S, 32)):
        idx[d] = 0
    for q in range(buf.n):
        m = buf.idx[q]
        if S > 32:
            for d in range(S - 1, -1, -1):
                indices[d * nnz + start + q] = <index_t>(m % shape[d])
                m = m // shape[d]
            continue
        if S:
            d = S - 1
            idx[d] += m - prev
            while d > 0 and idx[d] >= shape[d]:
                carry = idx[d] // shape[d]
                idx[d] -= carry * shape[d]
                d -= 1
                idx[d] += carry
        for d in range(S):
            indices[d * nnz + start + q] = <index_t>idx[d]
        prev = m
    if eb:
        memcpy(values + start * eb, buf.val, buf.n * eb)


def _d2coo_assemble(const int64_t[::1] starts, _Buffers bufs, const int64_t[::1] shape,
                    index_t[::1] indices, uint8_t[::1] values, Py_ssize_t S, Py_ssize_t nnz,
                    Py_ssize_t eb, int nt):
    cdef const int64_t* stp = &starts[0]
    cdef const int64_t* shp = &shape[0]
    cdef index_t* ip = &indices[0]
    cdef char* vp = <char*>&values[0]
    cdef _Buf* bp = bufs.bufs
    cdef Py_ssize_t t, T = bufs.n
    if nt > 1:
        for t in prange(T, nogil=True, num_threads=nt, schedule="static"):
            _assemble_rows(bp + t, stp[t], shp, ip, vp, S, nnz, eb)
    else:
        with nogil:
            for t in range(T):
                _assemble_rows(bp + t, stp[t], shp, ip, vp, S, nnz, eb)


def dense_to_coo(dense, raw, shape, index_dtype, nthreads, *, float16=False):
    """The nonzero rows of a dense (M, D) array as sorted COO indices and values.

    Parameters
    ----------
    dense : ndarray, (M, Dz), C-contiguous
        The zero-test view, or the array itself (as in `dense_to_compressed`);
        row m is specified iff any of its elements is nonzero.
    raw : ndarray or None, (M, Dr), C-contiguous
        The values to copy (None: `dense` itself).
    shape : ndarray, (S,), int64
        Sparse shape, ``prod(shape) == M`` (S == 0 means M == 1).
    index_dtype : int32 or int64
    nthreads : int
    float16 : bool, keyword-only
        As in `dense_to_compressed`.

    Returns
    -------
    indices : (S, nnz) index_dtype, lexicographically sorted (row-major order)
    values : (nnz, Dr), dtype of `raw`

    Examples
    --------
    >>> import numpy as np
    >>> i, v = dense_to_coo(np.array([[0], [5], [0], [7]]), None, np.array([2, 2]), np.int64, 1)
    >>> i, v.ravel()
    (array([[0, 1],
           [1, 1]]), array([5, 7]))
    """
    index_dtype = _index_dtype(index_dtype)
    z, mask, r = _dense_views(dense, raw, float16, 2)
    shape, numel = _check_shape(shape)
    M, Dz = z.shape
    Dr = r.shape[1]
    S = shape.shape[0]
    if numel != M:
        raise ValueError(f"prod(shape) = {numel} != {M} rows of dense")
    if index_dtype == np.int32 and S and int(shape.max()) - 1 > _INT32_MAX:
        raise ValueError(f"shape {tuple(shape.tolist())} does not fit index dtype int32")
    out_dtype = (dense if raw is None else raw).dtype
    eb = Dr * r.itemsize
    nt = _threads(int(nthreads), M)
    bufs = _Buffers(_tasks(nt, M))
    _d2coo_scan(_flat(z), _bytes(r), bufs, M, Dz, eb, mask, nt)
    starts = np.zeros(bufs.n + 1, np.int64)
    np.cumsum(bufs.sizes(), out=starts[1:])
    nnz = int(starts[bufs.n])
    indices = empty((S, nnz), index_dtype)
    values = empty((nnz, Dr), r.dtype)
    _d2coo_assemble(starts, bufs, shape, _flat(indices), _bytes(values), S, nnz, eb, nt)
    return indices, values.view(out_dtype)
