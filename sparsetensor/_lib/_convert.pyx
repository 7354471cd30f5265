# Layout conversion kernels: counting-sort transposes, block grouping/expansion,
# compressed <-> COO, and the guard scan for unchecked compressed input.
#
# Every kernel sees the canonical form of sparsetensor._convert: compressed
# (B, n + 1), plain (B, nnz), values (B, nnz, E) as raw unsigned integers
# (sparsetensor._dtypes.raw_view), where E counts the raw items of one entry
# (block x dense). Values are only moved, never combined. Inputs are trusted to
# satisfy invariants 5.1-5.6: _validate.validate_compressed is the guard that the wrapper runs
# first on input that was not checked, so that no kernel reads out of bounds.
from cython.parallel cimport prange, threadid
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

import numpy as np

from ._balance cimport balanced_split
from ._types cimport index2_t, index_t, raw_t

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    /* Copy nbytes (a multiple of 16) from a 16-byte aligned src to a 16-byte aligned dst with
       non-temporal stores: the target lines are written without being read first. */
    static inline void st_stream_copy(void* dst, const void* src, size_t nbytes) {
        __m128i* d = (__m128i*)dst;
        const __m128i* s = (const __m128i*)src;
        size_t i;
        for (i = 0; i < nbytes / 16; i++) _mm_stream_si128(d + i, _mm_load_si128(s + i));
    }
    static inline void st_stream_fence(void) { _mm_sfence(); }
    #else
    static inline void st_stream_copy(void* dst, const void* src, size_t nbytes) { memcpy(dst, src, nbytes); }
    static inline void st_stream_fence(void) {}
    #endif
    /* 64-byte aligned memory, released with free(); NULL when out of memory. */
    static inline void* st_alloc64(size_t nbytes) { return aligned_alloc(64, (nbytes + 64) / 64 * 64); }
    """
    void st_stream_copy(void* dst, const void* src, size_t nbytes) nogil
    void st_stream_fence() nogil
    void* _alloc64 "st_alloc64"(size_t nbytes) nogil

# Entries per write-combining buffer of the bucketed transpose (32 keeps every flush a
# multiple of 32 bytes, so streaming stores stay 16-byte aligned).
cdef enum:
    WC = 32
# The in-cache sort of a bucket first groups its entries by SUB = 2**SUB_SHIFT offsets.
cdef enum:
    SUB_SHIFT = 6
    SUB = 64

# A plain dimension larger than this may be transposed through cache-sized buckets
# (two streaming passes) instead of one scatter with a write stream per column (see
# BUCKETED_MIN_BYTES and DIRECT_MAX_BAND).
cdef Py_ssize_t DIRECT_MAX_PLAIN = 4096
# Number of buckets of the bucketed transpose: at most MAX_BUCKETS, so that one thread's
# write-combining buffers (WC entries x 2 arrays per bucket) stay in L2, and about
# BUCKET_BYTES of entries each, so that a bucket and its side copy are sorted within L2.
cdef Py_ssize_t MAX_BUCKETS = 2048
cdef Py_ssize_t BUCKET_BYTES = 1 << 19
# Below this many bytes of output the direct scatter stays in cache anyway.
# Below this many bytes of entries (indices and values) the direct scatter's misses are cache
# hits: measured (1 thread, 32 MB L3, 512 KB L2) on R-MAT graphs, direct vs bucketed is 0.52
# vs 1.66 ms at 1.3 MB (scale 13), 3.1 vs 3.6 at 2.7 MB, 8.0 vs 8.2 at 5.7 MB, 19.1 vs 15.6 at 11 MB.
cdef Py_ssize_t BUCKETED_MIN_BYTES = 1 << 22
# Above it, a banded matrix (most plain indices within DIRECT_MAX_BAND of the diagonal:
# stencils, FEM meshes) still scatters directly, its few live write streams staying in
# cache: 2.9x faster than bucketed for a 5-point stencil of 1e6 nnz, 1.4x for a 27-point
# one, 4x for a 5-point one of 1e7 nnz. The band bounds the live write streams (about
# 2 x band cache lines of each output); a negative value never counts a matrix as banded.
cdef Py_ssize_t DIRECT_MAX_BAND = 1 << 13
# Entries per thread of a batch transposed on several threads.
cdef Py_ssize_t DIRECT_GRAIN = 32768
# Batches smaller than this (nnz * E) are transposed one per thread.
cdef Py_ssize_t SMALL_BATCH = 1 << 16


def _tune(max_buckets=None, direct_max_plain=None, bucketed_min_bytes=None, bucket_bytes=None, direct_grain=None,
          direct_max_band=None):
    """Set the transpose's tuning constants (benchmarks and tests); returns the previous ones,
    in the order of the arguments."""
    global MAX_BUCKETS, DIRECT_MAX_PLAIN, BUCKETED_MIN_BYTES, BUCKET_BYTES, DIRECT_GRAIN, DIRECT_MAX_BAND
    old = (MAX_BUCKETS, DIRECT_MAX_PLAIN, BUCKETED_MIN_BYTES, BUCKET_BYTES, DIRECT_GRAIN, DIRECT_MAX_BAND)
    if max_buckets is not None:
        MAX_BUCKETS = max_buckets
    if direct_max_plain is not None:
        DIRECT_MAX_PLAIN = direct_max_plain
    if bucketed_min_bytes is not None:
        BUCKETED_MIN_BYTES = bucketed_min_bytes
    if bucket_bytes is not None:
        BUCKET_BYTES = bucket_bytes
    if direct_grain is not None:
        DIRECT_GRAIN = max(1, direct_grain)
    if direct_max_band is not None:
        DIRECT_MAX_BAND = direct_max_band
    return old


def _aligned_empty(shape, dtype):
    """np.empty(shape, dtype) starting at a 64-byte boundary (a view into a slightly larger buffer)."""
    dtype = np.dtype(dtype)
    cdef Py_ssize_t nbytes = dtype.itemsize, off
    for x in shape:
        nbytes *= <Py_ssize_t>x
    buf = np.empty(nbytes + 64, dtype=np.uint8)
    cdef uint8_t[::1] raw = buf
    off = (-<Py_ssize_t>&raw[0]) & 63
    return buf[off:off + nbytes].view(dtype).reshape(shape)


def _index_dtype(Py_ssize_t itemsize):
    return np.int32 if itemsize == 4 else np.int64


def _raw_dtype(Py_ssize_t itemsize):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]


cdef inline void _copy(raw_t* dst, const raw_t* src, Py_ssize_t E) noexcept nogil:
    cdef Py_ssize_t e
    if E == 1:
        dst[0] = src[0]
    else:
        for e in range(E):
            dst[e] = src[e]


# -- transpose: counting sort of the plain indices ----------------------------------------------
#
# Direct mode (few plain indices, big entries, entries that fit the cache, or a banded
# matrix): one counter per plain index and thread, of the index width; every entry is
# scattered straight to its final place, each thread taking slices of about equal entries.
# Bucketed mode (many plain indices, spread far from the diagonal, beyond the cache): a
# scatter with one write stream per plain index would miss the cache on every write, so
# entries are first partitioned into buckets of
# 2**shift consecutive plain indices (few, cache-resident write streams), each as one key
# (old compressed index << shift | offset in the bucket) and its values; then each bucket,
# small enough for L2, is counting-sorted by offset into its final place. The keys live in
# the output's plain index itself when they fit its width, else in a uint64 side array.
# Both passes stream. The hot loops are specialised for one raw item per entry (E == 1).
ctypedef fused key_t:
    uint32_t
    uint64_t


cdef void _count(const index_t* c, const index_t* p, Py_ssize_t r0, Py_ssize_t r1, int shift,
                 int64_t* cnt, Py_ssize_t NB) noexcept nogil:
    cdef Py_ssize_t k
    memset(cnt, 0, NB * sizeof(int64_t))
    for k in range(c[r0], c[r1]):
        cnt[p[k] >> shift] += 1


cdef void _count_direct(const index_t* c, const index_t* p, Py_ssize_t r0, Py_ssize_t r1, index_t* cnt,
                        Py_ssize_t nplain) noexcept nogil:
    """cnt[j] = entries of slices [r0, r1) at plain index j (fits index_t: at most nnz)."""
    cdef Py_ssize_t k
    memset(cnt, 0, nplain * sizeof(index_t))
    for k in range(c[r0], c[r1]):
        cnt[p[k]] += 1


cdef inline void _scatter_e(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t E, Py_ssize_t r0,
                            Py_ssize_t r1, index_t* cur, index_t* op, raw_t* ov) noexcept nogil:
    cdef Py_ssize_t i, k
    cdef index_t j, q
    for i in range(r0, r1):
        for k in range(c[i], c[i + 1]):
            j = p[k]
            q = cur[j]
            cur[j] = q + 1
            op[q] = <index_t>i
            _copy(ov + <Py_ssize_t>q * E, v + k * E, E)


cdef void _scatter(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t E, Py_ssize_t r0,
                   Py_ssize_t r1, index_t* cur, index_t* op, raw_t* ov) noexcept nogil:
    """Move each entry of slices [r0, r1) to the next free slot (cur) of its plain index."""
    if E == 1:
        _scatter_e(c, p, v, 1, r0, r1, cur, op, ov)
    else:
        _scatter_e(c, p, v, E, r0, r1, cur, op, ov)


cdef inline void _exclusive_scan(index2_t* cnt, Py_ssize_t NB, int T, index2_t* start) noexcept nogil:
    """start[b] = the entries before bucket b (start[NB]: all of them); cnt[t * NB + b], thread t's
    count of bucket b, becomes where its entries of b begin: after those of threads before t."""
    cdef Py_ssize_t b
    cdef int t
    cdef index2_t q = 0, x
    for b in range(NB):
        start[b] = q
        for t in range(T):
            x = cnt[t * NB + b]
            cnt[t * NB + b] = q
            q = q + x
    start[NB] = q


cdef void _transpose_direct(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nplain,
                            Py_ssize_t E, int T, index_t* oc, index_t* op, raw_t* ov, Py_ssize_t* rows,
                            index_t* cur) noexcept nogil:
    """Direct mode on T threads: thread t counts and then scatters the entries of its slices (of
    about equal entries) with cursors cur[t * nplain:], of the index width (as SciPy's csr_tocsc;
    the counters and the scan then move half the bytes of int64 ones)."""
    cdef int t
    if T == 1:
        _count_direct(c, p, 0, n, cur, nplain)
        _exclusive_scan(cur, nplain, 1, oc)
        _scatter(c, p, v, E, 0, n, cur, op, ov)
        return
    balanced_split(c, c[n], <const index_t*>NULL, 0, 1, n, 1, 1, T, rows)
    for t in prange(T, num_threads=T, schedule="static", chunksize=1):
        _count_direct(c, p, rows[t], rows[t + 1], cur + t * nplain, nplain)
    _exclusive_scan(cur, nplain, T, oc)
    for t in prange(T, num_threads=T, schedule="static", chunksize=1):
        _scatter(c, p, v, E, rows[t], rows[t + 1], cur + t * nplain, op, ov)


cdef inline void _flush(int64_t q, Py_ssize_t f, Py_ssize_t E, const key_t* bkey, const raw_t* bval, key_t* keys,
                        raw_t* ov) noexcept nogil:
    if f == WC:  # a whole buffer to an aligned place: stream it past the cache
        st_stream_copy(keys + q, bkey, WC * sizeof(key_t))
        st_stream_copy(ov + q * E, bval, WC * E * sizeof(raw_t))
    else:
        memcpy(keys + q, bkey, f * sizeof(key_t))
        memcpy(ov + q * E, bval, f * E * sizeof(raw_t))


cdef inline int _scatter_keys(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t E, Py_ssize_t r0,
                              Py_ssize_t r1, int shift, Py_ssize_t NB, Py_ssize_t phase, int64_t* cur, key_t* keys,
                              raw_t* ov) noexcept nogil:
    cdef Py_ssize_t i, k, b, f
    cdef int64_t q
    cdef key_t j, row, mask = ((<key_t>1) << shift) - 1
    cdef key_t* bkey = <key_t*>_alloc64(NB * WC * sizeof(key_t))
    cdef raw_t* bval = <raw_t*>_alloc64(NB * WC * E * sizeof(raw_t))
    cdef int32_t* fill = <int32_t*>calloc(NB + 1, sizeof(int32_t))
    if bkey == NULL or bval == NULL or fill == NULL:
        free(bkey)
        free(bval)
        free(fill)
        return 1
    for i in range(r0, r1):
        row = (<key_t>i) << shift
        for k in range(c[i], c[i + 1]):
            j = <key_t>p[k]
            b = <Py_ssize_t>(j >> shift)
            f = fill[b]
            bkey[b * WC + f] = row | (j & mask)
            _copy(bval + (b * WC + f) * E, v + k * E, E)
            f += 1
            q = cur[b]
            if f == WC - ((phase + q) & (WC - 1)):
                _flush(q, f, E, bkey + b * WC, bval + b * WC * E, keys, ov)
                cur[b] = q + f
                f = 0
            fill[b] = <int32_t>f
    for b in range(NB):
        if fill[b]:
            _flush(cur[b], fill[b], E, bkey + b * WC, bval + b * WC * E, keys, ov)
            cur[b] += fill[b]
    st_stream_fence()
    free(bkey)
    free(bval)
    free(fill)
    return 0


cdef int _scatter_buckets(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t E, Py_ssize_t r0,
                          Py_ssize_t r1, int shift, Py_ssize_t NB, Py_ssize_t phase, int64_t* cur, void* keys,
                          bint wide, raw_t* ov) noexcept nogil:
    """Bucketed mode: move each entry of slices [r0, r1) to the next free slot of its bucket (cur):
    its key to keys (uint64 if wide, else uint32), its values to ov.

    Entries gather per bucket in small cache-resident buffers of WC entries (software write
    combining), flushed when the target reaches a multiple of WC entries: whole buffers then
    go out with non-temporal stores, which skip reading the target lines first. Element q of
    the outputs is aligned when (phase + q) % WC == 0. Returns 1 when out of memory."""
    if wide:
        if E == 1:
            return _scatter_keys(c, p, v, 1, r0, r1, shift, NB, phase, cur, <uint64_t*>keys, ov)
        return _scatter_keys(c, p, v, E, r0, r1, shift, NB, phase, cur, <uint64_t*>keys, ov)
    if E == 1:
        return _scatter_keys(c, p, v, 1, r0, r1, shift, NB, phase, cur, <uint32_t*>keys, ov)
    return _scatter_keys(c, p, v, E, r0, r1, shift, NB, phase, cur, <uint32_t*>keys, ov)


cdef inline int _sort_keys(const key_t* keys, index_t* op, raw_t* ov, Py_ssize_t E, const int64_t* bstart,
                           Py_ssize_t b0, Py_ssize_t b1, int shift, Py_ssize_t nplain, index_t* oc) noexcept nogil:
    cdef Py_ssize_t b, q, jj, w, j0, lo, m, t, size = 0, W = <Py_ssize_t>1 << shift
    cdef int64_t s, x, pos
    cdef key_t key, mask = ((<key_t>1) << shift) - 1
    for b in range(b0, b1):
        size = max(size, <Py_ssize_t>(bstart[b + 1] - bstart[b]))
    cdef int64_t* loc = <int64_t*>malloc(W * sizeof(int64_t))
    cdef int64_t* sub = <int64_t*>malloc(((W >> SUB_SHIFT) + 1) * sizeof(int64_t))
    cdef key_t* bkey = <key_t*>malloc(size * sizeof(key_t) + 1)
    cdef raw_t* bval = <raw_t*>malloc(size * E * sizeof(raw_t) + 1)
    if loc == NULL or sub == NULL or bkey == NULL or bval == NULL:
        free(loc)
        free(sub)
        free(bkey)
        free(bval)
        return 1
    for b in range(b0, b1):
        lo, m = bstart[b], bstart[b + 1] - bstart[b]
        j0 = b << shift
        w = min(W, nplain - j0)
        memset(loc, 0, w * sizeof(int64_t))
        for q in range(m):
            loc[keys[lo + q] & mask] += 1
        s = lo
        for jj in range(w):
            if (jj & (SUB - 1)) == 0:
                sub[jj >> SUB_SHIFT] = s - lo
            x = loc[jj]
            loc[jj] = s
            s = s + x
            oc[j0 + jj + 1] = <index_t>s
        # two scatters, each with few write streams: by groups of SUB offsets into the side
        # buffers (laid out as the final places are), then by offset into the final places
        for q in range(m):
            key = keys[lo + q]
            t = sub[<Py_ssize_t>(key & mask) >> SUB_SHIFT]
            sub[<Py_ssize_t>(key & mask) >> SUB_SHIFT] = t + 1
            bkey[t] = key
            _copy(bval + t * E, ov + (lo + q) * E, E)
        for q in range(m):
            key = bkey[q]
            jj = <Py_ssize_t>(key & mask)
            pos = loc[jj]
            loc[jj] = pos + 1
            op[pos] = <index_t>(key >> shift)
            _copy(ov + pos * E, bval + q * E, E)
    free(loc)
    free(sub)
    free(bkey)
    free(bval)
    return 0


cdef int _sort_buckets(const void* keys, bint wide, index_t* op, raw_t* ov, Py_ssize_t E, const int64_t* bstart,
                       Py_ssize_t b0, Py_ssize_t b1, int shift, Py_ssize_t nplain, index_t* oc) noexcept nogil:
    """Counting sort of each bucket of [b0, b1) by the offsets in its keys, into op (the old
    compressed index) and ov, in place (keys may be op itself); writes oc for the bucket's
    plain indices. Returns 1 when out of memory (nothing is left allocated)."""
    if wide:
        if E == 1:
            return _sort_keys(<const uint64_t*>keys, op, ov, 1, bstart, b0, b1, shift, nplain, oc)
        return _sort_keys(<const uint64_t*>keys, op, ov, E, bstart, b0, b1, shift, nplain, oc)
    if E == 1:
        return _sort_keys(<const uint32_t*>keys, op, ov, 1, bstart, b0, b1, shift, nplain, oc)
    return _sort_keys(<const uint32_t*>keys, op, ov, E, bstart, b0, b1, shift, nplain, oc)


cdef int _transpose_one(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nplain,
                        Py_ssize_t E, int shift, bint bucketed, int T, index_t* oc, index_t* op, raw_t* ov,
                        Py_ssize_t phase, Py_ssize_t* rows, int64_t* cnt, int64_t* bstart, uint64_t* side,
                        int* failed) noexcept nogil:
    """Transpose one batch on T threads (see above); the bucket keys go to side when it is not
    NULL (uint64), else to op (its own width). Returns nonzero when out of memory."""
    cdef Py_ssize_t NB = ((nplain + (1 << shift) - 1) >> shift) if bucketed else nplain
    cdef int t, err = 0
    cdef void* keys = <void*>side if side != NULL else <void*>op
    cdef bint wide = side != NULL or sizeof(index_t) == 8
    if not bucketed:
        _transpose_direct(c, p, v, n, nplain, E, T, oc, op, ov, rows, <index_t*>cnt)
        return 0
    balanced_split(c, c[n], <const index_t*>NULL, 0, 1, n, 1, 1, T, rows)
    if T == 1:
        _count(c, p, 0, n, shift, cnt, NB)
    else:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            _count(c, p, rows[t], rows[t + 1], shift, cnt + t * NB, NB)
    _exclusive_scan(cnt, NB, T, bstart)
    if T == 1:
        err = _scatter_buckets(c, p, v, E, 0, n, shift, NB, phase, cnt, keys, wide, ov)
    else:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            failed[t] = _scatter_buckets(c, p, v, E, rows[t], rows[t + 1], shift, NB, phase, cnt + t * NB, keys,
                                         wide, ov)
        for t in range(T):
            err = err | failed[t]
    if err:
        return err
    oc[0] = 0
    if T == 1:
        return _sort_buckets(keys, wide, op, ov, E, bstart, 0, NB, shift, nplain, oc)
    balanced_split(<const int64_t*>bstart, bstart[NB], <const int64_t*>NULL, 0, 1, NB, 1, 1, T, rows)  # buckets of about equal work
    for t in prange(T, num_threads=T, schedule="static", chunksize=1):
        failed[t] = _sort_buckets(keys, wide, op, ov, E, bstart, rows[t], rows[t + 1], shift, nplain, oc)
    for t in range(T):
        err = err | failed[t]
    return err


cdef bint _banded(const index_t* c, const index_t* p, Py_ssize_t n, Py_ssize_t nplain) noexcept nogil:
    """Whether at least 15/16 of the entries of a sample of slices (of the first batch) lie within
    DIRECT_MAX_BAND plain indices of the diagonal (slice i's diagonal: i * nplain / n)."""
    cdef Py_ssize_t S = min(n, <Py_ssize_t>256), s, i, k, far = 0, total = 0
    cdef double scale = <double>nplain / n if n else 0, d, band = DIRECT_MAX_BAND
    if DIRECT_MAX_BAND < 0:
        return False
    for s in range(S):
        i = (2 * s + 1) * n // (2 * S)
        for k in range(c[i], c[i + 1]):
            d = p[k] - i * scale
            far += (d > band) | (d < -band)
        total += c[i + 1] - c[i]
    return far * 16 <= total


def compressed_transpose(const index_t[:, ::1] compressed, const index_t[:, ::1] plain,
                         const raw_t[:, :, ::1] values, Py_ssize_t plain_size, int nthreads):
    """Counting-sort transpose of every batch: entries regrouped by plain index (csr -> csc,
    bsr -> bsc), each new slice sorted by the old compressed index. Values move as chunks of E.
    Returns the new (compressed, plain, values)."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t E = values.shape[2], nplain = plain_size, NB, b, Ti, workers, slen, per_worker
    cdef int shift = 0, T = max(1, nthreads), w, err = 0
    cdef bint per_batch = T > 1 and B > 1 and (B >= 4 * T or nnz * max(E, 1) < SMALL_BATCH)
    cdef Py_ssize_t isz = sizeof(index_t), rsz = sizeof(raw_t)
    cdef bint bucketed = (nplain > DIRECT_MAX_PLAIN and E * rsz < 64
                          and nnz * (isz + E * rsz) > BUCKETED_MIN_BYTES
                          and B > 0 and not _banded(&compressed[0, 0], &plain[0, 0], n, nplain))
    idt, rdt = _index_dtype(isz), _raw_dtype(rsz)
    out_c = np.empty((B, nplain + 1), dtype=idt)
    if bucketed:  # aligned for the streaming stores
        out_p = _aligned_empty((B, nnz), idt)
        out_v = _aligned_empty((B, nnz, E), rdt)
    else:
        out_p = np.empty((B, nnz), dtype=idt)
        out_v = np.empty((B, nnz, E), dtype=rdt)
    if B == 0:
        return out_c, out_p, out_v
    if bucketed:
        # buckets of about BUCKET_BYTES, so that one is sorted within L2; at most MAX_BUCKETS
        # of them, so that the write-combining buffers stay cached; 2**shift <= 2**16
        target = min(MAX_BUCKETS, max(64, nnz * (isz + E * rsz) // BUCKET_BYTES))
        while shift < 16 and ((nplain + (1 << shift) - 1) >> shift) > target:
            shift += 1
        bucketed = shift > 0
    NB = ((nplain + (1 << shift) - 1) >> shift) if bucketed else nplain
    Ti = 1 if per_batch else max(1, min(T, nnz // DIRECT_GRAIN + 1))
    workers = T if per_batch else 1
    # direct mode keeps one counter per plain index and thread: bound that memory
    while Ti > 1 and not bucketed and Ti * NB > max(nnz, 1 << 20):
        Ti -= 1
    # the bucket keys (old compressed index << shift | offset) go to the output's plain index when
    # they fit its width; else to uint64 rows of WC-aligned length, batch b starting at offset
    # (b * nnz) % WC as it does in the outputs
    cdef bint use_side = bucketed and isz == 4 and n > 0 and ((n - 1) >> (32 - shift)) > 0
    slen = ((nnz + 2 * WC) // WC * WC) if use_side else 0
    # one scratch block per worker: row bounds, counters, bucket starts, failure flags
    per_worker = (Ti + 1) + (Ti * NB + 1) + (NB + 1) + Ti
    cdef int64_t* scratch = <int64_t*>malloc((workers * per_worker + B) * sizeof(int64_t))
    cdef uint64_t* side = <uint64_t*>_alloc64(workers * slen * sizeof(uint64_t)) if use_side else NULL
    if scratch == NULL or (use_side and side == NULL):
        free(scratch)
        free(side)
        raise MemoryError("compressed_transpose: out of memory for the scratch buffers")
    cdef index_t[:, ::1] oc = out_c
    cdef index_t[:, ::1] op = out_p
    cdef raw_t[:, :, ::1] ov = out_v
    cdef const raw_t* vp = &values[0, 0, 0]
    cdef int64_t* status = scratch + workers * per_worker
    cdef int64_t* mine
    with nogil:
        if per_batch:
            for b in prange(B, num_threads=T, schedule="dynamic"):
                w = threadid()
                mine = scratch + w * per_worker
                status[b] = _transpose_one(&compressed[b, 0], &plain[b, 0], vp + b * nnz * E, n,
                                           nplain, E, shift, bucketed, 1, &oc[b, 0], &op[b, 0],
                                           &ov[b, 0, 0], (b * nnz) % WC, <Py_ssize_t*>mine,
                                           mine + (Ti + 1), mine + (Ti + 1) + (Ti * NB + 1),
                                           side + w * slen + (b * nnz) % WC if use_side else NULL,
                                           <int*>(mine + (Ti + 1) + (Ti * NB + 1) + (NB + 1)))
        else:
            for b in range(B):
                status[b] = _transpose_one(&compressed[b, 0], &plain[b, 0], vp + b * nnz * E, n,
                                           nplain, E, shift, bucketed, Ti, &oc[b, 0], &op[b, 0],
                                           &ov[b, 0, 0], (b * nnz) % WC, <Py_ssize_t*>scratch,
                                           scratch + (Ti + 1), scratch + (Ti + 1) + (Ti * NB + 1),
                                           side + (b * nnz) % WC if use_side else NULL,
                                           <int*>(scratch + (Ti + 1) + (Ti * NB + 1) + (NB + 1)))
        for b in range(B):
            err = err | <int>status[b]
    free(scratch)
    free(side)
    if err:
        raise MemoryError("compressed_transpose: out of memory for the bucket buffers")
    return out_c, out_p, out_v


# -- compressed (rows) -> COO ----------------------------------------------------------------------
cdef void _rows_to_coo(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nnz,
                       Py_ssize_t Rb, Py_ssize_t Cb, Py_ssize_t Er, const index_t* bcoords, Py_ssize_t m,
                       Py_ssize_t B, index_t* oi, Py_ssize_t N, raw_t* ov, Py_ssize_t u0,
                       Py_ssize_t u1) noexcept nogil:
    """Block rows [u0, u1) (flat over batches) to coalesced COO entries; each block row owns
    the output range starting at b * nnz * Rb * Cb + c[I] * Rb * Cb."""
    cdef Py_ssize_t u, b, I, k, k0, k1, r, cc, d, row, pos, RC = Rb * Cb
    cdef index_t col
    cdef const index_t* cb
    cdef const index_t* pb
    for u in range(u0, u1):
        b = u // n
        I = u - b * n
        cb = c + b * (n + 1)
        pb = p + b * nnz
        k0 = cb[I]
        k1 = cb[I + 1]
        for r in range(Rb):
            row = I * Rb + r
            pos = b * nnz * RC + k0 * RC + r * (k1 - k0) * Cb
            for k in range(k0, k1):
                col = <index_t>(pb[k] * Cb)
                for cc in range(Cb):
                    for d in range(m):
                        oi[d * N + pos] = bcoords[d * B + b]
                    oi[m * N + pos] = <index_t>row
                    oi[(m + 1) * N + pos] = col + <index_t>cc
                    _copy(ov + pos * Er, v + ((b * nnz + k) * RC + r * Cb + cc) * Er, Er)
                    pos += 1


def rows_to_coo(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
                Py_ssize_t Rb, Py_ssize_t Cb, const index_t[:, ::1] batch_coords, index_t[:, ::1] out_indices,
                raw_t[:, ::1] out_values, int nthreads):
    """csr/bsr (B batches) -> coalesced COO with batch_coords.shape[0] leading batch dims; blocks
    expand to Rb * Cb entries. Outputs are preallocated: (m + 2, N) indices, (N, Er) values."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t m = batch_coords.shape[0], N = out_indices.shape[1], Er = out_values.shape[1]
    cdef int T = max(1, nthreads), t
    if B == 0 or n == 0:
        return
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    cdef const raw_t* v = &values[0, 0, 0]
    cdef const index_t* bc = &batch_coords[0, 0]
    cdef index_t* oi = &out_indices[0, 0]
    cdef raw_t* ov = &out_values[0, 0]
    balanced_split(c, nnz, <const index_t*>NULL, 0, B, n, 1, 1, T, &bounds[0])
    with nogil:
        if T == 1:
            _rows_to_coo(c, p, v, n, nnz, Rb, Cb, Er, bc, m, B, oi, N, ov, 0, B * n)
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                _rows_to_coo(c, p, v, n, nnz, Rb, Cb, Er, bc, m, B, oi, N, ov, bounds[t], bounds[t + 1])


# -- COO -> compressed (rows) ----------------------------------------------------------------------
cdef inline void _fill(index2_t* ptr, int64_t r0, int64_t r1, Py_ssize_t k) noexcept nogil:
    """ptr[r] = k for r in [r0, r1]: rows r0..r1 start (or, when empty, end) at entry k."""
    cdef int64_t r
    for r in range(r0, r1 + 1):
        ptr[r] = <index2_t>k


cdef inline int64_t _flat_row(const index_t* idx, Py_ssize_t N, Py_ssize_t S, const int64_t* sizes, Py_ssize_t k,
                              int64_t* f) noexcept nogil:
    """Entry k's flat (batch..., row) index; -1 after recording a bounds error in f."""
    cdef int64_t fr = 0, x
    cdef Py_ssize_t d
    for d in range(S):
        x = idx[d * N + k]
        if x < 0 or x >= sizes[d]:
            f[0], f[1], f[2], f[3] = k, 4 if x < 0 else 5, d, x
            return -1
        if d < S - 1:
            fr = fr * sizes[d] + x
    return fr


# Entries per block of the two-dim COO -> rows scan: checked by one branch-free pass first.
cdef Py_ssize_t COO_ROWS_BLOCK = 2048


cdef bint _coo_block_bad(const index_t* rows, const index_t* cols, Py_ssize_t k0, Py_ssize_t k1,
                         uint64_t nrows, uint64_t ncols) noexcept nogil:
    """Whether an entry of [k0, k1) (k0 >= 1) is out of bounds or not after entry k - 1.
    Branch-free (vectorised): the caller rescans a bad block for the first error."""
    cdef Py_ssize_t k
    cdef int bad = 0
    cdef index_t r, c, pr, pc
    for k in range(k0, k1):
        r = rows[k]
        c = cols[k]
        pr = rows[k - 1]
        pc = cols[k - 1]
        # one unsigned comparison per bound: a negative index wraps to a huge one
        bad = bad | (<uint64_t><int64_t>r >= nrows) | (<uint64_t><int64_t>c >= ncols) | (r < pr) | (
            (r == pr) & (c <= pc))
    return bad != 0


cdef inline int64_t _row_starts(const index_t* rows, Py_ssize_t b0, Py_ssize_t b1, int64_t prev,
                                index2_t* ptr) noexcept nogil:
    """Write ptr[r] = k for every row r in (prev, rows[k]] starting at an entry k of [b0, b1),
    the rows there being in bounds and non-decreasing from prev (checked); returns the last row.
    Branch-free but for empty rows: a backward pass stores ptr[rows[k]] = k for every entry, so
    that a row's first entry is the last store to its slot."""
    cdef Py_ssize_t k, s = b0
    cdef int64_t row, before
    while s < b1 and rows[s] == prev:  # the rest of a row that started before b0
        s += 1
    if s == b1:
        return prev
    k = b1 - 1
    while k > s:
        row = rows[k]
        before = rows[k - 1]
        ptr[row] = <index2_t>k
        if row > before + 1:  # empty rows between: they end where this one starts
            _fill(ptr, before + 1, row - 1, k)
        k -= 1
    _fill(ptr, prev + 1, rows[s], s)  # entry s starts row rows[s], and every empty row since prev
    return rows[b1 - 1]


cdef void _coo_rows_2d(const index_t* idx, Py_ssize_t N, const int64_t* sizes, int64_t F, Py_ssize_t k0,
                       Py_ssize_t k1, index2_t* ptr, int64_t* f) noexcept nogil:
    """_coo_rows for two sparse dims (no batch dims): the flat row is the row. Blocks are
    checked branch-free first; only a bad block is rescanned entry by entry."""
    cdef Py_ssize_t k, b0, b1
    cdef uint64_t nrows = <uint64_t>sizes[0], ncols = <uint64_t>sizes[1]
    cdef int64_t prev = -1, row
    cdef index_t col, prev_col = -1
    cdef const index_t* cols = idx + N
    if k0 > 0 and <uint64_t><int64_t>idx[k0 - 1] < nrows:  # else the range before reports it
        prev = idx[k0 - 1]
        prev_col = cols[k0 - 1]
    b0 = k0
    while b0 < k1:
        b1 = b0 + COO_ROWS_BLOCK if k1 - b0 > COO_ROWS_BLOCK else k1
        if b0 == 0 or prev < 0 or _coo_block_bad(idx, cols, b0, b1, nrows, ncols):
            for k in range(b0, b1):  # the careful scan: the first error, in order
                row = idx[k]
                col = cols[k]
                if <uint64_t>row >= nrows or <uint64_t><int64_t>col >= ncols:
                    if <uint64_t>row >= nrows:
                        f[0], f[1], f[2], f[3] = k, 4 if row < 0 else 5, 0, row
                    else:
                        f[0], f[1], f[2], f[3] = k, 4 if col < 0 else 5, 1, col
                    return
                if row <= prev:
                    if row < prev or col <= prev_col:
                        f[0], f[1], f[2], f[3] = k, 6, -1, 0
                        return
                else:
                    _fill(ptr, prev + 1, row, k)
                    prev = row
                prev_col = col
        else:  # checked: only the row starts
            prev = _row_starts(idx, b0, b1, prev, ptr)
            prev_col = cols[b1 - 1]
        b0 = b1
    if k1 == N:
        _fill(ptr, prev + 1, F, N)


cdef void _coo_rows(const index_t* idx, Py_ssize_t N, Py_ssize_t S, const int64_t* sizes, int64_t F,
                    Py_ssize_t k0, Py_ssize_t k1, index2_t* ptr, int64_t* f) noexcept nogil:
    """Entries [k0, k1): check bounds and order, and write ptr[r] for every flat row r whose
    first entry (or the end, for the last range) lies here.
    f receives the first error: (position, 4 | 5 | 6 for C4 | C5 | C6, dim, value)."""
    cdef Py_ssize_t k
    cdef int64_t fr, prev = -1
    cdef index_t col, prev_col = -1
    cdef int64_t ignored[4]
    f[0] = -1
    if S == 2:
        _coo_rows_2d(idx, N, sizes, F, k0, k1, ptr, f)
        return
    if k0 > 0:
        prev = _flat_row(idx, N, S, sizes, k0 - 1, ignored)
        prev_col = idx[(S - 1) * N + k0 - 1]
        if prev < 0:  # the range before reports it
            prev, prev_col = -1, -1
    for k in range(k0, k1):
        fr = _flat_row(idx, N, S, sizes, k, f)
        if fr < 0:
            return
        col = idx[(S - 1) * N + k]
        if fr < prev or (fr == prev and col <= prev_col):
            f[0], f[1], f[2], f[3] = k, 6, -1, 0
            return
        _fill(ptr, prev + 1, fr, k)
        prev, prev_col = fr, col
    if k1 == N:
        _fill(ptr, prev + 1, F, N)


cdef bint _rows_block_bad(const index_t* rows, Py_ssize_t k0, Py_ssize_t k1, uint64_t nrows) noexcept nogil:
    """Whether a row of [k0, k1) (k0 >= 1) is out of bounds or below the row before it.
    Branch-free (vectorised): the caller rescans a bad block for the first error."""
    cdef Py_ssize_t k
    cdef int bad = 0
    for k in range(k0, k1):
        bad = bad | (<uint64_t><int64_t>rows[k] >= nrows) | (rows[k] < rows[k - 1])
    return bad != 0


cdef void _trusted_rows_2d(const index_t* rows, Py_ssize_t N, int64_t nrows, Py_ssize_t k0, Py_ssize_t k1,
                           index2_t* ptr, int64_t* f) noexcept nogil:
    """_coo_rows_2d for checked indices: reads only the row index row. Rows are still checked
    (bounds, non-decreasing; branch-free per block) so that ptr is written in bounds and monotone."""
    cdef Py_ssize_t k, b0, b1
    cdef int64_t prev = -1, row
    if k0 > 0 and <uint64_t><int64_t>rows[k0 - 1] < <uint64_t>nrows:  # else the range before reports it
        prev = rows[k0 - 1]
    b0 = k0
    while b0 < k1:
        b1 = b0 + COO_ROWS_BLOCK if k1 - b0 > COO_ROWS_BLOCK else k1
        if b0 == 0 or _rows_block_bad(rows, b0, b1, <uint64_t>nrows):
            for k in range(b0, b1):  # the careful scan: the first error, in order
                row = rows[k]
                if <uint64_t>row >= <uint64_t>nrows:
                    f[0], f[1], f[2], f[3] = k, 4 if row < 0 else 5, 0, row
                    return
                if row < prev:
                    f[0], f[1], f[2], f[3] = k, 6, -1, 0
                    return
                _fill(ptr, prev + 1, row, k)
                prev = row
        else:
            prev = _row_starts(rows, b0, b1, prev, ptr)
        b0 = b1
    if k1 == N:
        _fill(ptr, prev + 1, nrows, N)


cdef void _trusted_rows(const index_t* idx, Py_ssize_t N, Py_ssize_t S, const int64_t* sizes, int64_t F,
                        Py_ssize_t k0, Py_ssize_t k1, index2_t* ptr, int64_t* f) noexcept nogil:
    """_coo_rows for checked indices with batch dims: reads the leading S - 1 index rows (bounds
    and a non-decreasing flat row are still checked), never the last one."""
    cdef Py_ssize_t k
    cdef int64_t fr, prev = -1
    cdef int64_t ignored[4]
    if k0 > 0:
        prev = _flat_row(idx, N, S - 1, sizes, k0 - 1, ignored)
        if prev < 0:  # the range before reports it
            prev = -1
        else:
            prev = prev * sizes[S - 2] + idx[(S - 2) * N + k0 - 1]
    for k in range(k0, k1):
        fr = _flat_row(idx, N, S - 1, sizes, k, f)
        if fr < 0:
            return
        fr = fr * sizes[S - 2] + idx[(S - 2) * N + k]  # the last checked dim is the row
        if fr < prev:
            f[0], f[1], f[2], f[3] = k, 6, -1, 0
            return
        _fill(ptr, prev + 1, fr, k)
        prev = fr
    if k1 == N:
        _fill(ptr, prev + 1, F, N)


cdef void _coo_rows_any(const index_t* idx, Py_ssize_t N, Py_ssize_t S, const int64_t* sizes, int64_t F,
                        Py_ssize_t k0, Py_ssize_t k1, index2_t* ptr, int64_t* f, bint trusted) noexcept nogil:
    f[0] = -1
    if not trusted:
        _coo_rows(idx, N, S, sizes, F, k0, k1, ptr, f)
    elif S == 2:
        _trusted_rows_2d(idx, N, sizes[0], k0, k1, ptr, f)
    else:
        _trusted_rows(idx, N, S, sizes, F, k0, k1, ptr, f)


def coo_to_rows(const index_t[:, ::1] indices, const int64_t[::1] sizes, index2_t[::1] ptr, int nthreads,
                bint trusted=False):
    """Coalesced COO (S >= 2 sparse dims) -> row pointers over the flat (batch..., row) index:
    ptr[r] = entries before flat row r (F + 1 slots, F = prod(sizes[:-1]); int32 ptr only when N
    fits). The plain indices are the last index row as it is. Returns None, or the first broken
    invariant as ("C4" | "C5", dim, position, value) or ("C6", -1, position, 0).

    ``trusted``: the indices were checked (C4-C6) when the tensor was built, so the last index
    row (the columns) is not read; the leading rows are still bound- and order-checked (the
    arrays may have been written since), so that no write leaves ptr and ptr is monotone."""
    cdef Py_ssize_t S = indices.shape[0], N = indices.shape[1]
    cdef int64_t F = ptr.shape[0] - 1
    cdef int T = max(1, min(nthreads, N // 32768 + 1)), t
    if N == 0:
        ptr[:] = 0
        return None
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef int64_t[:, ::1] found = np.zeros((T, 4), dtype=np.int64)
    cdef const index_t* idx = &indices[0, 0]
    for t in range(T + 1):
        bounds[t] = N * t // T
    with nogil:
        if T == 1:
            _coo_rows_any(idx, N, S, &sizes[0], F, 0, N, &ptr[0], &found[0, 0], trusted)
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                _coo_rows_any(idx, N, S, &sizes[0], F, bounds[t], bounds[t + 1], &ptr[0], &found[t, 0], trusted)
    for t in range(T):
        if found[t, 0] >= 0:
            if found[t, 1] == 6:
                return ("C6", -1, int(found[t, 0]), 0)
            return ("C4" if found[t, 1] == 4 else "C5", int(found[t, 2]), int(found[t, 0]), int(found[t, 3]))
    return None


# -- grouping entries into blocks (csr -> bsr, csc -> bsc) -----------------------------------------
cdef Py_ssize_t _group_unit(const index_t* c, const index_t* p, Py_ssize_t bc, Py_ssize_t bp,
                            int64_t* cur, int64_t* end, const raw_t* v, Py_ssize_t Er, Py_ssize_t stride_c,
                            Py_ssize_t stride_p, Py_ssize_t slot, index_t* op, raw_t* ov) noexcept nogil:
    """Merge the bc slices starting at c (one block slice) by block index p // bp. Count the
    distinct blocks; when op is not NULL, also write the blocks from `slot` on: their
    indices to op and every entry into its place of the zero-filled block in ov."""
    cdef Py_ssize_t r, nblocks = 0, RC = bc * bp
    cdef index_t J, mn, x
    cdef index_t NONE = -1
    for r in range(bc):
        cur[r] = c[r]
        end[r] = c[r + 1]
    while True:
        mn = NONE
        for r in range(bc):
            if cur[r] < end[r]:
                J = p[cur[r]] // bp
                if mn == NONE or J < mn:
                    mn = J
        if mn == NONE:
            return nblocks
        if op != NULL:
            op[slot + nblocks] = mn
        for r in range(bc):
            while cur[r] < end[r]:
                x = p[cur[r]]
                if x // bp != mn:
                    break
                if op != NULL:
                    _copy(ov + ((slot + nblocks) * RC + r * stride_c + (x - mn * bp) * stride_p) * Er,
                          v + cur[r] * Er, Er)
                cur[r] += 1
        nblocks += 1


cdef void _group_units(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nnz,
                       Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t Er, Py_ssize_t stride_c, Py_ssize_t stride_p,
                       Py_ssize_t u0, Py_ssize_t u1, int64_t* cur, int64_t* counts, const index_t* oc,
                       index_t* op, raw_t* ov, Py_ssize_t nnzb) noexcept nogil:
    cdef Py_ssize_t nu = n // bc, u, b, I, got
    for u in range(u0, u1):
        b = u // nu
        I = u - b * nu
        if oc == NULL:
            counts[u] = _group_unit(c + b * (n + 1) + I * bc, p + b * nnz, bc, bp, cur, cur + bc, v, Er,
                                    stride_c, stride_p, 0, NULL, NULL)
        else:
            got = _group_unit(c + b * (n + 1) + I * bc, p + b * nnz, bc, bp, cur, cur + bc,
                              v + b * nnz * Er, Er, stride_c, stride_p, oc[b * (nu + 1) + I], op + b * nnzb,
                              ov + b * nnzb * bc * bp * Er)


def group_count(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, Py_ssize_t bc, Py_ssize_t bp,
                int64_t[:, ::1] counts, int nthreads):
    """counts[b, I] = distinct blocks (p // bp) in slices I*bc .. I*bc + bc - 1 of batch b."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef int T = max(1, nthreads), t
    if B == 0 or n == 0:
        return
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef int64_t[:, ::1] cur = np.zeros((T, 2 * bc), dtype=np.int64)
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    balanced_split(c, nnz, <const index_t*>NULL, 0, B, n, bc, 1, T, &bounds[0])
    with nogil:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            _group_units(c, p, <const uint8_t*>NULL, n, nnz, bc, bp, 0, 0, 0, bounds[t], bounds[t + 1],
                         &cur[t, 0], &counts[0, 0], NULL, NULL, <uint8_t*>NULL, 0)


def group_fill(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
               Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t stride_c, Py_ssize_t stride_p,
               const index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain, raw_t[:, :, ::1] out_values,
               int nthreads):
    """Fill the blocked tensor whose compressed index group_count's counts gave: block indices
    to out_plain, entries into the zero-filled out_values (B, nnzb, bc * bp * Er). An entry at
    offsets (dc, dp) along (compressed, plain) goes to item dc * stride_c + dp * stride_p of its block."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t Er = values.shape[2], nnzb = out_plain.shape[1]
    cdef int T = max(1, nthreads), t
    if B == 0 or n == 0 or nnzb == 0:
        return
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef int64_t[:, ::1] cur = np.zeros((T, 2 * bc), dtype=np.int64)
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    cdef const raw_t* v = &values[0, 0, 0]
    cdef const index_t* oc = &out_compressed[0, 0]
    cdef index_t* op = &out_plain[0, 0]
    cdef raw_t* ov = &out_values[0, 0, 0]
    balanced_split(c, nnz, <const index_t*>NULL, 0, B, n, bc, 1, T, &bounds[0])
    with nogil:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            _group_units(c, p, v, n, nnz, bc, bp, Er, stride_c, stride_p, bounds[t], bounds[t + 1], &cur[t, 0],
                         NULL, oc, op, ov, nnzb)


# -- expanding blocks into entries (bsr -> csr, bsc -> csc) ----------------------------------------
cdef void _expand_units(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nnz,
                        Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t Er, Py_ssize_t stride_c, Py_ssize_t stride_p,
                        Py_ssize_t u0, Py_ssize_t u1, index_t* oc, index_t* op, raw_t* ov) noexcept nogil:
    cdef Py_ssize_t u, b, I, r, k, k0, k1, q, pos, RC = bc * bp, no = n * bc, nnzo = nnz * RC
    cdef const index_t* cb
    cdef index_t base
    for u in range(u0, u1):
        b = u // n
        I = u - b * n
        cb = c + b * (n + 1)
        k0 = cb[I]
        k1 = cb[I + 1]
        for r in range(bc):
            pos = k0 * RC + r * (k1 - k0) * bp
            oc[b * (no + 1) + I * bc + r] = <index_t>pos
            pos += b * nnzo
            for k in range(k0, k1):
                base = <index_t>(p[b * nnz + k] * bp)
                for q in range(bp):
                    op[pos] = base + <index_t>q
                    _copy(ov + pos * Er, v + ((b * nnz + k) * RC + r * stride_c + q * stride_p) * Er, Er)
                    pos += 1
        if I == n - 1:
            oc[b * (no + 1) + no] = <index_t>nnzo


def compressed_expand(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
                      Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t stride_c, Py_ssize_t stride_p,
                      index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain, raw_t[:, :, ::1] out_values,
                      int nthreads):
    """bsr -> csr, bsc -> csc: every item of every block becomes an entry (zeros included).
    Outputs are preallocated: (B, n * bc + 1), (B, nnz * bc * bp), (B, nnz * bc * bp, Er)."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t Er = out_values.shape[2]
    cdef int T = max(1, nthreads), t
    if B == 0:
        return
    if n == 0:
        out_compressed[:, :] = 0
        return
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    cdef const raw_t* v = &values[0, 0, 0]
    cdef index_t* oc = &out_compressed[0, 0]
    cdef index_t* op = &out_plain[0, 0]
    cdef raw_t* ov = &out_values[0, 0, 0]
    balanced_split(c, nnz, <const index_t*>NULL, 0, B, n, 1, 1, T, &bounds[0])
    with nogil:
        if T == 1:
            _expand_units(c, p, v, n, nnz, bc, bp, Er, stride_c, stride_p, 0, B * n, oc, op, ov)
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                _expand_units(c, p, v, n, nnz, bc, bp, Er, stride_c, stride_p, bounds[t], bounds[t + 1], oc, op,
                              ov)
