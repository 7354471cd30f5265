# The counting-sort transpose of the compressed layouts (csr <-> csc, bsr <-> bsc, every batch):
# the kernel behind every conversion that changes which dim is compressed.
#
# It sees the canonical form of sparsetensor._convert: compressed (B, n + 1), plain (B, nnz),
# values (B, nnz, E) as raw unsigned integers (sparsetensor._dtypes.raw_view), E the raw items of
# one entry (block x dense). Values are only moved, never combined. Inputs satisfied invariants
# 5.1-5.6 when checked (_validate.validate_compressed runs first on input that was not), but
# their memory may have changed since (issue 34): the counting pass checks every plain index
# and that the compressed index is monotone (the transpose then raises ValueError), and the
# scatters keep every write within the output, so that an index changed even during the
# transpose gives garbage, never an access out of bounds.
from cython.parallel cimport prange, threadid
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

from ._pool cimport empty
from ._scratch cimport scratch_alloc, scratch_calloc, scratch_free

import numpy as np

from ._balance cimport balanced_split
from ._items cimport copy_items as _copy
from ._parallel cimport ENTRIES_PER_THREAD
from ._guard cimport bad_index, clamp
from ._types cimport index2_t, index_t, raw_t

from ._pool import MIN_BYTES as POOL_MIN_BYTES

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
# _transpose_one's status: out of memory, or an index changed after validation
cdef enum:
    _NO_MEMORY = 1
    _CHANGED = 2

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
# hits, and the bucketed pass's second trip over the entries does not pay (docs: performance page).
cdef Py_ssize_t BUCKETED_MIN_BYTES = 1 << 22
# Above it, a banded matrix (most plain indices within DIRECT_MAX_BAND of the diagonal:
# stencils, FEM meshes) still scatters directly, its few live write streams staying in
# cache, where bucketing would only add a pass. The band bounds the live write streams (about
# 2 x band cache lines of each output); a negative value never counts a matrix as banded.
cdef Py_ssize_t DIRECT_MAX_BAND = 1 << 13
# ... as does a matrix whose entries lie on at most this many diagonals (a stencil on any grid,
# whose outer diagonals lie far from the main one): one write stream per diagonal.
cdef enum:
    MAX_DIAGONALS = 64
# Entries per thread of a batch transposed on several threads (the shared grain of
# _parallel.pxd; tests tune it down to cover the threaded paths on small inputs).
cdef Py_ssize_t DIRECT_GRAIN = ENTRIES_PER_THREAD
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
    """np.empty(shape, dtype) starting at a 64-byte boundary (the pool's from 4 MiB up, else a view
    into a slightly larger buffer)."""
    dtype = np.dtype(dtype)
    cdef Py_ssize_t nbytes = dtype.itemsize, off
    for x in shape:
        nbytes *= <Py_ssize_t>x
    if nbytes >= POOL_MIN_BYTES:
        return empty(shape, dtype)
    buf = np.empty(nbytes + 64, dtype=np.uint8)
    cdef uint8_t[::1] raw = buf
    off = (-<Py_ssize_t>&raw[0]) & 63
    return buf[off:off + nbytes].view(dtype).reshape(shape)


def _index_dtype(Py_ssize_t itemsize):
    return np.int32 if itemsize == 4 else np.int64


def _raw_dtype(Py_ssize_t itemsize):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]


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


cdef inline bint _bad_slices(const index_t* c, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t nnz) noexcept nogil:
    """Whether c[r0:r1 + 1] leaves [0, nnz] or decreases (branch free: vectorised)."""
    cdef Py_ssize_t i
    cdef int bad = (c[r0] < 0) | (c[r1] > nnz)
    for i in range(r0, r1):
        bad = bad | (c[i + 1] < c[i])
    return bad != 0


cdef bint _count(const index_t* c, const index_t* p, Py_ssize_t r0, Py_ssize_t r1, int shift,
                 int64_t* cnt, Py_ssize_t NB, Py_ssize_t nplain, Py_ssize_t nnz) noexcept nogil:
    """cnt[b] = entries of slices [r0, r1) in bucket b; True on a changed index (counted nowhere)."""
    cdef Py_ssize_t k
    cdef int64_t j
    cdef bint bad = _bad_slices(c, r0, r1, nnz)
    memset(cnt, 0, NB * sizeof(int64_t))
    for k in range(clamp(c[r0], 0, nnz), clamp(c[r1], 0, nnz)):
        j = p[k]
        if bad_index(j, nplain):
            bad = True
            continue
        cnt[j >> shift] += 1
    return bad


cdef bint _count_direct(const index_t* c, const index_t* p, Py_ssize_t r0, Py_ssize_t r1, index_t* cnt,
                        Py_ssize_t nplain, Py_ssize_t nnz) noexcept nogil:
    """cnt[j] = entries of slices [r0, r1) at plain index j (fits index_t: at most nnz); True on
    a changed index (counted nowhere)."""
    cdef Py_ssize_t k
    cdef int64_t j
    cdef bint bad = _bad_slices(c, r0, r1, nnz)
    memset(cnt, 0, nplain * sizeof(index_t))
    for k in range(clamp(c[r0], 0, nnz), clamp(c[r1], 0, nnz)):
        j = p[k]
        if bad_index(j, nplain):
            bad = True
            continue
        cnt[j] += 1
    return bad


cdef inline void _scatter_e(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t E, Py_ssize_t r0,
                            Py_ssize_t r1, index_t* cur, index_t* op, raw_t* ov, Py_ssize_t nplain,
                            Py_ssize_t nnz) noexcept nogil:
    cdef Py_ssize_t i, k
    cdef int64_t lo, hi
    cdef index_t j, q
    for i in range(r0, r1):
        lo = clamp(c[i], 0, nnz)
        hi = clamp(c[i + 1], lo, nnz)
        for k in range(lo, hi):
            j = p[k]
            if bad_index(j, nplain) or bad_index(cur[j], nnz):  # changed since it was counted
                continue
            q = cur[j]
            cur[j] = q + 1
            op[q] = <index_t>i
            _copy(ov + <Py_ssize_t>q * E, v + k * E, E)


cdef void _scatter(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t E, Py_ssize_t r0,
                   Py_ssize_t r1, index_t* cur, index_t* op, raw_t* ov, Py_ssize_t nplain, Py_ssize_t nnz) noexcept nogil:
    """Move each entry of slices [r0, r1) to the next free slot (cur) of its plain index."""
    if E == 1:
        _scatter_e(c, p, v, 1, r0, r1, cur, op, ov, nplain, nnz)
    else:
        _scatter_e(c, p, v, E, r0, r1, cur, op, ov, nplain, nnz)


cdef inline void _scatter_cols_1(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, index_t j0,
                                 index_t j1, index_t* cur, index_t* op, raw_t* ov, Py_ssize_t nnz) noexcept nogil:
    """Move the entries (one raw item each) of every slice whose plain index is in [j0, j1) to the
    next free slot (cur) of that index, slices in order. Branch free: an entry outside the range
    goes to local trash slots through the same loads and stores (on scattered plain indices a
    branch would mispredict about every other entry)."""
    cdef Py_ssize_t i, k
    cdef int64_t lo, hi
    cdef index_t j, q, width = j1 - j0, trash_c = 0, trash_p = 0
    cdef raw_t trash_v = 0
    cdef index_t* cp
    cdef bint inside
    for i in range(n):
        lo = clamp(c[i], 0, nnz)
        hi = clamp(c[i + 1], lo, nnz)
        for k in range(lo, hi):
            j = p[k]
            inside = <size_t>(j - j0) < <size_t>width
            cp = cur + j if inside else &trash_c
            q = cp[0]
            cp[0] = q + 1
            inside = inside & (<size_t>q < <size_t>nnz)  # a count changed since: no write past the end
            (op + q if inside else &trash_p)[0] = <index_t>i
            (ov + q if inside else &trash_v)[0] = v[k]


cdef void _scatter_cols(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t E, Py_ssize_t n,
                        index_t j0, index_t j1, index_t* cur, index_t* op, raw_t* ov, Py_ssize_t nnz) noexcept nogil:
    """_scatter_cols_1 for entries of E raw items (blocks, dense dims: the copy outweighs a branch)."""
    cdef Py_ssize_t i, k
    cdef int64_t lo, hi
    cdef index_t j, q
    if E == 1:
        _scatter_cols_1(c, p, v, n, j0, j1, cur, op, ov, nnz)
        return
    for i in range(n):
        lo = clamp(c[i], 0, nnz)
        hi = clamp(c[i + 1], lo, nnz)
        for k in range(lo, hi):
            j = p[k]
            if j0 <= j < j1 and not bad_index(cur[j], nnz):
                q = cur[j]
                cur[j] = q + 1
                op[q] = <index_t>i
                _copy(ov + <Py_ssize_t>q * E, v + k * E, E)


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


cdef int _transpose_direct(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nplain,
                           Py_ssize_t nnz, Py_ssize_t E, int T, bint banded, index_t* oc, index_t* op, raw_t* ov,
                           Py_ssize_t* rows, index_t* cur, int* failed) noexcept nogil:
    """Direct mode on T threads: thread t counts the entries of its slices (of about equal
    entries) with counters cur[t * nplain:], of the index width (as SciPy's csr_tocsc; the
    counters and the scan then move half the bytes of int64 ones). A banded matrix then scatters
    by the same slices (each thread's entries land near its own part of the output). Any other
    scatters by ranges of plain indices of about equal entries, each thread reading every slice
    and moving its range's entries: split by slices, two threads would write to the same output
    lines, and the cache lines would bounce between the cores."""
    cdef int t, err = 0
    if T == 1:
        if _count_direct(c, p, 0, n, cur, nplain, nnz):
            return _CHANGED
        _exclusive_scan(cur, nplain, 1, oc)
        _scatter(c, p, v, E, 0, n, cur, op, ov, nplain, nnz)
        return 0
    balanced_split(c, clamp(c[n], 0, nnz), <const index_t*>NULL, 0, 1, n, 1, 1, T, rows)
    for t in prange(T, num_threads=T, schedule="static", chunksize=1):
        failed[t] = _count_direct(c, p, rows[t], rows[t + 1], cur + t * nplain, nplain, nnz)
    for t in range(T):
        err = err | failed[t]
    if err:
        return _CHANGED
    _exclusive_scan(cur, nplain, T, oc)
    if banded:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            _scatter(c, p, v, E, rows[t], rows[t + 1], cur + t * nplain, op, ov, nplain, nnz)
        return 0
    # cur[:nplain] now holds where each plain index's entries begin (thread 0's cursors)
    balanced_split(oc, oc[nplain], <const index_t*>NULL, 0, 1, nplain, 1, 1, T, rows)
    for t in prange(T, num_threads=T, schedule="static", chunksize=1):
        _scatter_cols(c, p, v, E, n, <index_t>rows[t], <index_t>rows[t + 1], cur, op, ov, nnz)
    return 0


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
                              raw_t* ov, Py_ssize_t nplain, Py_ssize_t nnz) noexcept nogil:
    cdef Py_ssize_t i, k, b, f
    cdef int64_t q, lo, hi
    cdef key_t j, row, mask = ((<key_t>1) << shift) - 1
    cdef key_t* bkey = <key_t*>_alloc64(NB * WC * sizeof(key_t))
    cdef raw_t* bval = <raw_t*>_alloc64(NB * WC * E * sizeof(raw_t))
    cdef int32_t* fill = <int32_t*>scratch_calloc(NB + 1, sizeof(int32_t))
    if bkey == NULL or bval == NULL or fill == NULL:
        free(bkey)
        free(bval)
        scratch_free(fill)
        return 1
    for i in range(r0, r1):
        row = (<key_t>i) << shift
        lo = clamp(c[i], 0, nnz)
        hi = clamp(c[i + 1], lo, nnz)
        for k in range(lo, hi):
            if bad_index(p[k], nplain):  # changed since it was counted
                continue
            j = <key_t>p[k]
            b = <Py_ssize_t>(j >> shift)
            f = fill[b]
            bkey[b * WC + f] = row | (j & mask)
            _copy(bval + (b * WC + f) * E, v + k * E, E)
            f += 1
            q = cur[b]
            if f == WC - ((phase + q) & (WC - 1)):
                if q < 0 or q + f > nnz:  # a count changed since: drop the buffer
                    fill[b] = 0
                    continue
                _flush(q, f, E, bkey + b * WC, bval + b * WC * E, keys, ov)
                cur[b] = q + f
                f = 0
            fill[b] = <int32_t>f
    for b in range(NB):
        if fill[b] and cur[b] >= 0 and cur[b] + fill[b] <= nnz:
            _flush(cur[b], fill[b], E, bkey + b * WC, bval + b * WC * E, keys, ov)
            cur[b] += fill[b]
    st_stream_fence()
    free(bkey)
    free(bval)
    scratch_free(fill)
    return 0


cdef int _scatter_buckets(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t E, Py_ssize_t r0,
                          Py_ssize_t r1, int shift, Py_ssize_t NB, Py_ssize_t phase, int64_t* cur, void* keys,
                          bint wide, raw_t* ov, Py_ssize_t nplain, Py_ssize_t nnz) noexcept nogil:
    """Bucketed mode: move each entry of slices [r0, r1) to the next free slot of its bucket (cur):
    its key to keys (uint64 if wide, else uint32), its values to ov.

    Entries gather per bucket in small cache-resident buffers of WC entries (software write
    combining), flushed when the target reaches a multiple of WC entries: whole buffers then
    go out with non-temporal stores, which skip reading the target lines first. Element q of
    the outputs is aligned when (phase + q) % WC == 0. Returns 1 when out of memory."""
    if wide:
        if E == 1:
            return _scatter_keys(c, p, v, 1, r0, r1, shift, NB, phase, cur, <uint64_t*>keys, ov, nplain, nnz)
        return _scatter_keys(c, p, v, E, r0, r1, shift, NB, phase, cur, <uint64_t*>keys, ov, nplain, nnz)
    if E == 1:
        return _scatter_keys(c, p, v, 1, r0, r1, shift, NB, phase, cur, <uint32_t*>keys, ov, nplain, nnz)
    return _scatter_keys(c, p, v, E, r0, r1, shift, NB, phase, cur, <uint32_t*>keys, ov, nplain, nnz)


cdef inline int _sort_keys(const key_t* keys, index_t* op, raw_t* ov, Py_ssize_t E, const int64_t* bstart,
                           Py_ssize_t b0, Py_ssize_t b1, int shift, Py_ssize_t nplain, index_t* oc) noexcept nogil:
    cdef Py_ssize_t b, q, jj, w, j0, lo, m, t, size = 0, W = <Py_ssize_t>1 << shift
    cdef int64_t s, x, pos
    cdef key_t key, mask = ((<key_t>1) << shift) - 1
    for b in range(b0, b1):
        size = max(size, <Py_ssize_t>(bstart[b + 1] - bstart[b]))
    cdef int64_t* loc = <int64_t*>scratch_alloc(W * sizeof(int64_t))
    cdef int64_t* sub = <int64_t*>scratch_alloc(((W >> SUB_SHIFT) + 1) * sizeof(int64_t))
    cdef key_t* bkey = <key_t*>scratch_alloc(size * sizeof(key_t) + 1)
    cdef raw_t* bval = <raw_t*>scratch_alloc(size * E * sizeof(raw_t) + 1)
    if loc == NULL or sub == NULL or bkey == NULL or bval == NULL:
        scratch_free(loc)
        scratch_free(sub)
        scratch_free(bkey)
        scratch_free(bval)
        return 1
    for b in range(b0, b1):
        lo, m = bstart[b], bstart[b + 1] - bstart[b]
        j0 = b << shift
        w = min(W, nplain - j0)
        memset(loc, 0, W * sizeof(int64_t))
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
            if <Py_ssize_t>(key & mask) >= w:  # only where the keys changed under the scatter
                continue
            t = sub[<Py_ssize_t>(key & mask) >> SUB_SHIFT]
            sub[<Py_ssize_t>(key & mask) >> SUB_SHIFT] = t + 1
            bkey[t] = key
            _copy(bval + t * E, ov + (lo + q) * E, E)
        for q in range(m):
            key = bkey[q]
            jj = <Py_ssize_t>(key & mask)
            if jj >= w or bad_index(loc[jj], lo + m):
                continue
            pos = loc[jj]
            loc[jj] = pos + 1
            op[pos] = <index_t>(key >> shift)
            _copy(ov + pos * E, bval + q * E, E)
    scratch_free(loc)
    scratch_free(sub)
    scratch_free(bkey)
    scratch_free(bval)
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
                        Py_ssize_t nnz, Py_ssize_t E, int shift, bint bucketed, int T, index_t* oc, index_t* op, raw_t* ov,
                        Py_ssize_t phase, Py_ssize_t* rows, int64_t* cnt, int64_t* bstart, uint64_t* side,
                        int* failed) noexcept nogil:
    """Transpose one batch on T threads (see above); the bucket keys go to side when it is not
    NULL (uint64), else to op (its own width). Returns _NO_MEMORY or _CHANGED (nothing written
    yet), else 0."""
    cdef Py_ssize_t NB = ((nplain + (1 << shift) - 1) >> shift) if bucketed else nplain
    cdef int t, err = 0
    cdef void* keys = <void*>side if side != NULL else <void*>op
    cdef bint wide = side != NULL or sizeof(index_t) == 8
    if not bucketed:
        # slices of a matrix banded within an eighth of its plain size land near their own part
        # of the output
        return _transpose_direct(c, p, v, n, nplain, nnz, E, T,
                                 T == 1 or _banded(c, p, n, nplain, nplain // 8, nnz), oc, op, ov,
                                 rows, <index_t*>cnt, failed)
    balanced_split(c, clamp(c[n], 0, nnz), <const index_t*>NULL, 0, 1, n, 1, 1, T, rows)
    if T == 1:
        err = _count(c, p, 0, n, shift, cnt, NB, nplain, nnz)
    else:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            failed[t] = _count(c, p, rows[t], rows[t + 1], shift, cnt + t * NB, NB, nplain, nnz)
        for t in range(T):
            err = err | failed[t]
    if err:
        return _CHANGED
    _exclusive_scan(cnt, NB, T, bstart)
    if T == 1:
        err = _scatter_buckets(c, p, v, E, 0, n, shift, NB, phase, cnt, keys, wide, ov, nplain, nnz)
    else:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            failed[t] = _scatter_buckets(c, p, v, E, rows[t], rows[t + 1], shift, NB, phase, cnt + t * NB, keys,
                                         wide, ov, nplain, nnz)
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


cdef bint _banded(const index_t* c, const index_t* p, Py_ssize_t n, Py_ssize_t nplain,
                  Py_ssize_t width, Py_ssize_t nnz) noexcept nogil:
    """Whether at least 15/16 of the entries of a sample of slices (of the first batch) lie within
    ``width`` plain indices of the diagonal (slice i's diagonal: i * nplain / n)."""
    cdef Py_ssize_t S = min(n, <Py_ssize_t>256), s, i, k, far = 0, total = 0
    cdef int64_t lo, hi
    cdef double scale = <double>nplain / n if n else 0, d, band = width
    if width < 0:
        return False
    for s in range(S):
        i = (2 * s + 1) * n // (2 * S)
        lo = clamp(c[i], 0, nnz)
        hi = clamp(c[i + 1], lo, nnz)
        for k in range(lo, hi):
            d = p[k] - i * scale
            far += (d > band) | (d < -band)
        total += hi - lo
    return far * 16 <= total


cdef bint _few_diagonals(const index_t* c, const index_t* p, Py_ssize_t n, Py_ssize_t nplain,
                         Py_ssize_t nnz) noexcept nogil:
    """Whether the entries of a sample of slices (of the first batch) lie on at most
    MAX_DIAGONALS distinct offsets from the diagonal (slice i's: i * nplain // n): a stencil on
    a grid of any size (7 offsets for the 3-d 7-point one, whose outer ones lie n^(2/3) away),
    whose direct scatter keeps that many write streams live, however far apart."""
    cdef Py_ssize_t S = min(n, <Py_ssize_t>64), s, i, k, m = 0, j
    cdef int64_t d, lo
    cdef int64_t seen[MAX_DIAGONALS]
    for s in range(S):
        i = (2 * s + 1) * n // (2 * S)
        lo = clamp(c[i], 0, nnz)
        for k in range(lo, clamp(c[i + 1], lo, nnz)):
            d = <int64_t>p[k] - <int64_t>(i * nplain // n)
            j = 0
            while j < m and seen[j] != d:
                j += 1
            if j == m:
                if m == MAX_DIAGONALS:
                    return False
                seen[m] = d
                m += 1
    return True


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
    if n < 0 or plain.shape[0] != B or values.shape[0] != B or values.shape[1] != nnz or nplain < 0:
        raise ValueError(f"compressed_transpose: compressed ({B}, {n + 1}), plain ({plain.shape[0]}, {nnz}), values "
                         f"({values.shape[0]}, {values.shape[1]}, {E}) and plain_size {nplain} do not match")
    cdef bint bucketed = (nplain > DIRECT_MAX_PLAIN and E * rsz < 64
                          and nnz * (isz + E * rsz) > BUCKETED_MIN_BYTES
                          and B > 0 and not _banded(&compressed[0, 0], &plain[0, 0], n, nplain, DIRECT_MAX_BAND, nnz)
                          and not (DIRECT_MAX_BAND >= 0 and _few_diagonals(&compressed[0, 0], &plain[0, 0], n,
                                                                            nplain, nnz)))
    for b in range(B):  # 5.1 and 5.2 (O(B)); the counting pass checks the rest
        if compressed[b, 0] != 0 or compressed[b, n] != nnz:
            raise ValueError(f"compressed_transpose: an index changed after validation (batch {b} starts at "
                             f"{compressed[b, 0]} and ends at {compressed[b, n]}, not 0 and {nnz})")
    idt, rdt = _index_dtype(isz), _raw_dtype(rsz)
    out_c = empty((B, nplain + 1), idt)
    if bucketed:  # aligned for the streaming stores
        out_p = _aligned_empty((B, nnz), idt)
        out_v = _aligned_empty((B, nnz, E), rdt)
    else:
        out_p = empty((B, nnz), idt)
        out_v = empty((B, nnz, E), rdt)
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
    # threads by the items moved, not the entries: a block moves bs values, and a grain by
    # entries kept medium-sized block matrices on one thread
    Ti = 1 if per_batch else max(1, min(T, nnz * max(E, 1) // DIRECT_GRAIN + 1))
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
    cdef int64_t* scratch = <int64_t*>scratch_alloc((workers * per_worker + B) * sizeof(int64_t))
    cdef uint64_t* side = <uint64_t*>_alloc64(workers * slen * sizeof(uint64_t)) if use_side else NULL
    if scratch == NULL or (use_side and side == NULL):
        scratch_free(scratch)
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
                                           nplain, nnz, E, shift, bucketed, 1, &oc[b, 0], &op[b, 0],
                                           &ov[b, 0, 0], (b * nnz) % WC, <Py_ssize_t*>mine,
                                           mine + (Ti + 1), mine + (Ti + 1) + (Ti * NB + 1),
                                           side + w * slen + (b * nnz) % WC if use_side else NULL,
                                           <int*>(mine + (Ti + 1) + (Ti * NB + 1) + (NB + 1)))
        else:
            for b in range(B):
                status[b] = _transpose_one(&compressed[b, 0], &plain[b, 0], vp + b * nnz * E, n,
                                           nplain, nnz, E, shift, bucketed, Ti, &oc[b, 0], &op[b, 0],
                                           &ov[b, 0, 0], (b * nnz) % WC, <Py_ssize_t*>scratch,
                                           scratch + (Ti + 1), scratch + (Ti + 1) + (Ti * NB + 1),
                                           side + (b * nnz) % WC if use_side else NULL,
                                           <int*>(scratch + (Ti + 1) + (Ti * NB + 1) + (NB + 1)))
        for b in range(B):
            err = err | <int>status[b]
    scratch_free(scratch)
    free(side)
    if err & _CHANGED:
        raise ValueError("compressed_transpose: an index changed after validation (out of bounds, or a "
                         "compressed index that decreases)")
    if err:
        raise MemoryError("compressed_transpose: out of memory for the bucket buffers")
    return out_c, out_p, out_v
