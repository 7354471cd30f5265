"""Coalescing kernels (Cython, OpenMP).

COO: each index column is linearised to an int64 key (row-major over the sparse
shape), (key, payload) pairs are sorted by a parallel LSD radix sort, and the runs
of equal keys are reduced in parallel. The payload is the original position, or,
for scalar values of at most 8 bytes, the value's bits (as many bytes or fewer, and
the reduction then reads the values in order instead of gathering them).
Compressed layouts: each row's plain indices are sorted (stable) and duplicates
within a row are reduced.

Inputs are trusted to have the shapes and dtypes documented in ``_coalesce.pyi``:
the Python wrappers in ``sparsetensor._coalesce`` check them. Index values are
not trusted: they are bounds-checked here before they are used to address memory.
"""

from cython.parallel cimport prange
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memset

import numpy as np

from ._parallel cimport st_omp_thread_num
from ._types cimport index_t

cdef extern from *:
    """
    #include <string.h>
    /* IEEE binary16 <-> binary32, round to nearest even (NumPy's algorithm). */
    static inline float st_half_to_float(uint16_t h) {
        uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
        uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
        float f;
        if (exp == 0x1fu) {
            bits = sign | 0x7f800000u | (mant << 13);
        } else if (exp != 0) {
            bits = sign | ((exp + 112u) << 23) | (mant << 13);
        } else if (mant != 0) {
            exp = 113u;
            while (!(mant & 0x400u)) { mant <<= 1; exp--; }
            bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
        } else {
            bits = sign;
        }
        memcpy(&f, &bits, 4);
        return f;
    }
    static inline uint16_t st_float_to_half(float value) {
        uint32_t f, f_exp, f_sig;
        uint16_t h_sgn, h_sig;
        memcpy(&f, &value, 4);
        h_sgn = (uint16_t)((f & 0x80000000u) >> 16);
        f_exp = f & 0x7f800000u;
        if (f_exp >= 0x47800000u) {
            f_sig = f & 0x007fffffu;
            if (f_exp == 0x7f800000u && f_sig != 0) {
                uint16_t ret = (uint16_t)(0x7c00u + (f_sig >> 13));
                if (ret == 0x7c00u) ret++;
                return (uint16_t)(h_sgn + ret);
            }
            return (uint16_t)(h_sgn + 0x7c00u);
        }
        if (f_exp <= 0x38000000u) {
            if (f_exp < 0x33000000u) return h_sgn;
            f_exp >>= 23;
            f_sig = 0x00800000u + (f & 0x007fffffu);
            f_sig >>= (113u - f_exp);
            if (((f_sig & 0x00003fffu) != 0x00001000u) || (f & 0x000007ffu)) f_sig += 0x00001000u;
            return (uint16_t)(h_sgn + (uint16_t)(f_sig >> 13));
        }
        f_sig = f & 0x007fffffu;
        if ((f_sig & 0x00003fffu) != 0x00001000u) f_sig += 0x00001000u;
        h_sig = (uint16_t)((f_exp - 0x38000000u + f_sig) >> 13);
        return (uint16_t)(h_sgn + h_sig);
    }
    """
    float st_half_to_float(uint16_t h) nogil
    uint16_t st_float_to_half(float f) nogil


cdef extern from *:
    """
    /* One stable scatter pass of an LSD radix sort over (int64 key, payload) pairs.
     *
     * Keys keys[lo:hi) and their payloads (pos[lo:hi), or the positions lo..hi-1 when pos
     * is NULL) go to kout/pout at offs[digit] (advanced), digit = (key >> shift) & mask.
     * With `streaming`, each bucket's elements are staged in a 64-byte line (per bucket
     * in `work`) and full lines are written with non-temporal stores: no read for
     * ownership, and few open lines where a direct scatter to thousands of destinations
     * stalls. Partial lines (at the ends of this chunk's part of a bucket) are written
     * element by element, so other threads' parts are never touched.
     */
    #if defined(__SSE2__) || defined(_M_X64)
    #include <emmintrin.h>
    static inline void st_stream_line(void* dst, const void* src) {
        __m128i* d = (__m128i*)dst;
        const __m128i* s = (const __m128i*)src;
        _mm_stream_si128(d, _mm_loadu_si128(s));
        _mm_stream_si128(d + 1, _mm_loadu_si128(s + 1));
        _mm_stream_si128(d + 2, _mm_loadu_si128(s + 2));
        _mm_stream_si128(d + 3, _mm_loadu_si128(s + 3));
    }
    static inline void st_stream_fence(void) { _mm_sfence(); }
    #else
    static inline void st_stream_line(void* dst, const void* src) { memcpy(dst, src, 64); }
    static inline void st_stream_fence(void) { }
    #endif
    #if defined(__GNUC__)
    #define ST_INLINE static inline __attribute__((always_inline))
    #else
    #define ST_INLINE static inline
    #endif

    static inline int64_t st_chunk_lo(int64_t c, int64_t n, int64_t nchunks) {
        int64_t q = n / nchunks, r = n % nchunks;
        return q * c + (c < r ? c : r);
    }
    static inline int64_t st_chunk_of(int64_t d, int64_t n, int64_t nchunks) {
        int64_t q = n / nchunks, r = n % nchunks, big = r * (q + 1);
        return d < big ? d / (q + 1) : r + (d - big) / q;
    }

    /* With count, run heads are counted per destination chunk (nchunks near-equal chunks
     * of n): counts[chunk]. The first element of this call's part of a bucket counts as a
     * head; the caller corrects that against the element before it. */
    #define ST_DEFINE_SCATTER(NAME, POS_T)                                                        \
    ST_INLINE void NAME##_impl(const int64_t* keys, const POS_T* pos, int64_t* kout, POS_T* pout,     \
            int64_t lo, int64_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,            \
            int64_t* counts, int64_t n, int64_t nchunks, const int count, const int streaming) {      \
        const int64_t nb = mask + 1, LK = 8, LP = 64 / (int64_t)sizeof(POS_T);                        \
        int64_t* kstage = work;                                                                       \
        POS_T* pstage = (POS_T*)(work + 8 * nb);                                                      \
        int64_t* start = work + 16 * nb;                                                              \
        int64_t* cc = work + 17 * nb;                                                                 \
        int64_t* cend = work + 18 * nb;                                                               \
        int64_t* prev = work + 19 * nb;                                                               \
        const int64_t phk = (int64_t)(((uintptr_t)kout / 8) & (uintptr_t)(LK - 1));                  \
        const int64_t php = (int64_t)(((uintptr_t)pout / sizeof(POS_T)) & (uintptr_t)(LP - 1));      \
        int64_t b, i, d, e, s, slot, k;                                                               \
        POS_T p;                                                                                      \
        for (b = 0; b < nb; b++) start[b] = offs[b];                                                  \
        if (count) {                                                                                  \
            for (b = 0; b < nb; b++) {                                                                \
                cc[b] = offs[b] < n ? st_chunk_of(offs[b], n, nchunks) : nchunks - 1;                 \
                cend[b] = st_chunk_lo(cc[b] + 1, n, nchunks);                                         \
            }                                                                                         \
        }                                                                                             \
        for (i = lo; i < hi; i++) {                                                                   \
            k = keys[i];                                                                              \
            p = pos != NULL ? pos[i] : (POS_T)i;                                                      \
            b = (k >> shift) & mask;                                                                  \
            d = offs[b];                                                                              \
            offs[b] = d + 1;                                                                          \
            if (streaming) {                                                                          \
                slot = (d + phk) & (LK - 1);                                                          \
                kstage[b * LK + slot] = k;                                                            \
                if (slot == LK - 1) {                                                                 \
                    s = start[b];                                                                     \
                    if (d - (LK - 1) >= s) st_stream_line(kout + (d - (LK - 1)), kstage + b * LK);    \
                    else for (e = s; e <= d; e++) kout[e] = kstage[b * LK + ((e + phk) & (LK - 1))];  \
                }                                                                                     \
                slot = (d + php) & (LP - 1);                                                          \
                pstage[b * LP + slot] = p;                                                            \
                if (slot == LP - 1) {                                                                 \
                    s = start[b];                                                                     \
                    if (d - (LP - 1) >= s) st_stream_line(pout + (d - (LP - 1)), pstage + b * LP);    \
                    else for (e = s; e <= d; e++) pout[e] = pstage[b * LP + ((e + php) & (LP - 1))];  \
                }                                                                                     \
            } else {                                                                                  \
                kout[d] = k;                                                                          \
                pout[d] = p;                                                                          \
            }                                                                                         \
            if (count) {                                                                              \
                while (d >= cend[b]) {                                                                \
                    cc[b]++;                                                                          \
                    cend[b] = st_chunk_lo(cc[b] + 1, n, nchunks);                                     \
                }                                                                                     \
                counts[cc[b]] += (d == start[b]) | (k != prev[b]);                                    \
                prev[b] = k;                                                                          \
            }                                                                                         \
        }                                                                                             \
        if (streaming) {                                                                              \
            for (b = 0; b < nb; b++) {                                                                \
                int64_t ls;                                                                           \
                d = offs[b];                                                                          \
                s = start[b];                                                                         \
                ls = d - ((d + phk) & (LK - 1));                                                      \
                for (e = ls < s ? s : ls; e < d; e++) kout[e] = kstage[b * LK + ((e + phk) & (LK - 1))]; \
                ls = d - ((d + php) & (LP - 1));                                                      \
                for (e = ls < s ? s : ls; e < d; e++) pout[e] = pstage[b * LP + ((e + php) & (LP - 1))]; \
            }                                                                                         \
            st_stream_fence();                                                                        \
        }                                                                                             \
    }                                                                                                 \
    static void NAME(const int64_t* keys, const POS_T* pos, int64_t* kout, POS_T* pout,               \
            int64_t lo, int64_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,            \
            int64_t* counts, int64_t n, int64_t nchunks, int count, int streaming) {                  \
        /* one specialised loop per (count, streaming); positions or payloads is a runtime test */ \
        if (count && streaming) ST_SCATTER_CALL(NAME, 1, 1)                                           \
        else if (streaming) ST_SCATTER_CALL(NAME, 0, 1)                                               \
        else if (count) ST_SCATTER_CALL(NAME, 1, 0)                                                   \
        else ST_SCATTER_CALL(NAME, 0, 0)                                                              \
    }
    #define ST_SCATTER_CALL(NAME, COUNT, STREAMING)                                                   \
        NAME##_impl(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, COUNT, STREAMING);

    ST_DEFINE_SCATTER(st_scatter_p8, uint8_t)
    ST_DEFINE_SCATTER(st_scatter_p16, uint16_t)
    ST_DEFINE_SCATTER(st_scatter_p32, int32_t)
    ST_DEFINE_SCATTER(st_scatter_p64, int64_t)

    #if defined(__GNUC__)
    #define st_prefetch(p) __builtin_prefetch(p)
    #else
    #define st_prefetch(p) ((void)0)
    #endif
    """
    int64_t st_chunk_of(int64_t d, int64_t n, int64_t nchunks) nogil
    void st_prefetch(const void* p) nogil
    void st_scatter_p8(const int64_t* keys, const uint8_t* pos, int64_t* kout, uint8_t* pout, int64_t lo,
                       int64_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,
                       int64_t* counts, int64_t n, int64_t nchunks, int count, int streaming) nogil
    void st_scatter_p16(const int64_t* keys, const uint16_t* pos, int64_t* kout, uint16_t* pout, int64_t lo,
                        int64_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,
                        int64_t* counts, int64_t n, int64_t nchunks, int count, int streaming) nogil
    void st_scatter_p32(const int64_t* keys, const int32_t* pos, int64_t* kout, int32_t* pout, int64_t lo,
                        int64_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,
                        int64_t* counts, int64_t n, int64_t nchunks, int count, int streaming) nogil
    void st_scatter_p64(const int64_t* keys, const int64_t* pos, int64_t* kout, int64_t* pout, int64_t lo,
                        int64_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,
                        int64_t* counts, int64_t n, int64_t nchunks, int count, int streaming) nogil


# Positions into the input: int32 while nnz allows it (less memory traffic in the sort).
ctypedef fused pos_t:
    int32_t
    int64_t

# What the radix sort carries with each key: a position (int32, int64), or the raw bits
# of a scalar value (1, 2, 4 or 8 bytes; 4 and 8 as int32/int64).
ctypedef fused payload_t:
    uint8_t
    uint16_t
    int32_t
    int64_t

# The value types the reductions take: _types.value_t plus uint16_t, which carries
# float16 bits that are summed in float32 and rounded once. bool arrives as uint8_t
# with logical_or set.
ctypedef fused sum_t:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    float
    double
    float complex
    double complex

# Widest radix digit: 2**11 buckets of per-thread counters stay in L1/L2.
cdef int RADIX_BITS = 11
# Keys below 2**53 are exact in a double: de-linearise by reciprocal multiply.
cdef int64_t DOUBLE_EXACT = (<int64_t>1) << 53
# Rows up to this length are sorted by insertion sort, longer ones by heapsort.
cdef Py_ssize_t INSERTION_MAX = 32
# How far ahead (in sorted positions) the value gather prefetches.
cdef Py_ssize_t PREFETCH = 24
# Chunks per thread of the scans and sort passes, dynamically scheduled: on a busy machine a
# thread the OS pauses holds up one small chunk, not half of the work.
cdef Py_ssize_t SORT_CHUNKS_PER_THREAD = 4

INT32_MAX = 2**31 - 1


def radix_digits(int nbits):
    """``(passes, bits per pass)`` of the LSD radix sort of ``nbits``-bit keys."""
    if nbits <= 0:
        return 0, 0
    cdef int passes = (nbits + RADIX_BITS - 1) // RADIX_BITS
    return passes, (nbits + passes - 1) // passes


cdef inline Py_ssize_t _lo(Py_ssize_t c, Py_ssize_t n, Py_ssize_t nchunks) noexcept nogil:
    """First element of chunk ``c`` when ``n`` elements are split into ``nchunks`` near-equal chunks."""
    cdef Py_ssize_t q = n // nchunks, r = n % nchunks
    return q * c + (c if c < r else r)


# -- reductions of runs (shared by COO and compressed) ---------------------------------
cdef inline sum_t _add(sum_t a, sum_t b) noexcept nogil:
    # signed overflow wraps, as in NumPy (computed in unsigned arithmetic: no UB)
    if sum_t is int32_t:
        return <int32_t>(<uint32_t>a + <uint32_t>b)
    elif sum_t is int64_t:
        return <int64_t>(<uint64_t>a + <uint64_t>b)
    elif sum_t is int8_t:
        return <int8_t>(<uint8_t>a + <uint8_t>b)
    elif sum_t is int16_t:
        return <int16_t>(<uint16_t>a + <uint16_t>b)
    else:
        return a + b


cdef inline Py_ssize_t _at(const pos_t* perm, Py_ssize_t k) noexcept nogil:
    return k if perm == NULL else <Py_ssize_t>perm[k]


cdef void _reduce_half(uint16_t* out, const uint16_t* vals, const pos_t* perm, Py_ssize_t a, Py_ssize_t b,
                       Py_ssize_t E) noexcept nogil:
    """float16 rows: summed in float32, rounded once."""
    cdef Py_ssize_t k, e, e0, m
    cdef const uint16_t* row
    cdef float acc
    cdef float buf[256]
    if E == 1:
        acc = st_half_to_float(vals[_at(perm, a)])
        for k in range(a + 1, b):
            acc = acc + st_half_to_float(vals[_at(perm, k)])
        out[0] = st_float_to_half(acc)
        return
    for e0 in range(0, E, 256):
        m = E - e0 if E - e0 < 256 else 256
        row = vals + _at(perm, a) * E + e0
        for e in range(m):
            buf[e] = st_half_to_float(row[e])
        for k in range(a + 1, b):
            row = vals + _at(perm, k) * E + e0
            for e in range(m):
                buf[e] = buf[e] + st_half_to_float(row[e])
        for e in range(m):
            out[e0 + e] = st_float_to_half(buf[e])


cdef void _reduce_run(sum_t* out, const sum_t* vals, const pos_t* perm, Py_ssize_t a, Py_ssize_t b,
                      Py_ssize_t E, bint logical_or) noexcept nogil:
    """``out[:E]`` = the sum (or logical or) of rows ``perm[a:b]`` (``a:b`` if ``perm`` is NULL)
    of ``vals`` (rows of ``E`` elements), in that order."""
    cdef Py_ssize_t k, e
    cdef const sum_t* row
    cdef sum_t acc
    if sum_t is uint16_t:
        _reduce_half(out, vals, perm, a, b, E)
    elif E == 1:
        acc = vals[_at(perm, a)]
        if sum_t is uint8_t:
            if logical_or:
                for k in range(a + 1, b):
                    acc = acc | vals[_at(perm, k)]
                out[0] = acc != 0
                return
        for k in range(a + 1, b):
            acc = _add(acc, vals[_at(perm, k)])
        out[0] = acc
    else:
        row = vals + _at(perm, a) * E
        for e in range(E):
            out[e] = row[e]
        for k in range(a + 1, b):
            row = vals + _at(perm, k) * E
            if sum_t is uint8_t:
                if logical_or:
                    for e in range(E):
                        out[e] = out[e] | row[e]
                    continue
            for e in range(E):
                out[e] = _add(out[e], row[e])
        if sum_t is uint8_t:
            if logical_or:
                for e in range(E):
                    out[e] = out[e] != 0


# -- COO: order check ----------------------------------------------------------------------
cdef void _order_chunk(const index_t* idx, Py_ssize_t S, Py_ssize_t n, const int64_t* shape,
                       Py_ssize_t lo, Py_ssize_t hi, bint stop_early, int64_t* state) noexcept nogil:
    # state: err_pos, err_dim, err_value, unsorted, duplicate
    cdef Py_ssize_t i, d
    cdef int64_t v, w
    cdef int cmp
    for i in range(lo, hi):
        for d in range(S):
            v = idx[d * n + i]
            if v < 0 or v >= shape[d]:
                state[0] = i
                state[1] = d
                state[2] = v
                return
        if i == 0:
            continue
        cmp = 0
        for d in range(S):
            v = idx[d * n + i]
            w = idx[d * n + i - 1]
            if v != w:
                cmp = 1 if v > w else -1
                break
        if cmp < 0:
            state[3] = 1
            if stop_early:
                return
        elif cmp == 0:
            state[4] = 1


cdef object _first_error(const int64_t[:, ::1] state):
    """The error of the first chunk that found one, or None (chunks are in order)."""
    cdef Py_ssize_t c
    for c in range(state.shape[0]):
        if state[c, 0] >= 0:
            return int(state[c, 0]), int(state[c, 1]), int(state[c, 2])
    return None


def coo_order(const index_t[:, ::1] indices, const int64_t[::1] shape, bint stop_early, int nthreads):
    """Bounds (C4/C5) and order of the index columns.

    Returns ``(error, unsorted, duplicate)``: ``error`` is ``(invariant, dim, position, value)``
    or None; ``unsorted`` says a column is lexicographically smaller than the one before it,
    ``duplicate`` that a column equals the one before it. With ``stop_early`` a chunk stops
    at its first unsorted pair, leaving the rest of its bounds unchecked.
    """
    cdef Py_ssize_t S = indices.shape[0], n = indices.shape[1], c
    cdef Py_ssize_t nchunks = max(1, min(n, SORT_CHUNKS_PER_THREAD * nthreads if nthreads > 1 else 1))
    state_arr = np.zeros((nchunks, 5), np.int64)
    state_arr[:, 0] = -1
    cdef int64_t[:, ::1] state = state_arr
    cdef const index_t* idx = &indices[0, 0] if S > 0 and n > 0 else NULL
    cdef const int64_t* shp = &shape[0] if S > 0 else NULL
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _order_chunk(idx, S, n, shp, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), stop_early, &state[c, 0])
    unsorted = bool(state_arr[:, 3].any())
    for c in range(nchunks):
        if state[c, 0] >= 0:
            pos, d, value = state_arr[c, :3].tolist()
            return ("C4" if value < 0 else "C5", d, pos, value), unsorted, False
        if stop_early and state[c, 3]:
            break  # this chunk's bounds are partly unchecked: a later error may not be the first
    return None, unsorted, bool(state_arr[:, 4].any())


# -- COO: keys and radix sort -----------------------------------------------------------------
cdef void _linearize_chunk(const index_t* idx, Py_ssize_t S, Py_ssize_t n, const int64_t* shape,
                           Py_ssize_t lo, Py_ssize_t hi, int64_t* keys, int64_t mask, int64_t* hist,
                           int64_t* state) noexcept nogil:
    # state: err_pos, err_dim, err_value, OR of the keys, AND of the keys
    cdef Py_ssize_t i, d
    cdef int64_t v, key, s0, s1, key_or = 0, key_and = -1
    if S == 2:
        s0 = shape[0]
        s1 = shape[1]
        for i in range(lo, hi):
            v = idx[i]
            key = idx[n + i]
            if v < 0 or v >= s0 or key < 0 or key >= s1:
                state[0] = i
                state[1] = 0 if v < 0 or v >= s0 else 1
                state[2] = v if state[1] == 0 else key
                return
            key = v * s1 + key
            keys[i] = key
            hist[key & mask] += 1
            key_or = key_or | key
            key_and = key_and & key
    else:
        for i in range(lo, hi):
            key = 0
            for d in range(S):
                v = idx[d * n + i]
                if v < 0 or v >= shape[d]:
                    state[0] = i
                    state[1] = d
                    state[2] = v
                    return
                key = key * shape[d] + v
            keys[i] = key
            hist[key & mask] += 1
            key_or = key_or | key
            key_and = key_and & key
    state[3] = key_or
    state[4] = key_and


cdef void _hist_chunk(const int64_t* keys, Py_ssize_t lo, Py_ssize_t hi, int shift, int64_t mask,
                      int64_t* hist) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(lo, hi):
        hist[(keys[i] >> shift) & mask] += 1


# Per-thread work area of the scatter, in int64 words per bucket: staged key and position
# lines (8 + 8), region starts, destination chunk and its end, previous key.
cdef Py_ssize_t WORK_PER_BUCKET = 20
# Pairs below this many bytes stay in cache: scatter directly, without streaming stores.
cdef Py_ssize_t STREAM_MIN_BYTES = 1 << 23


cdef inline void _scatter_chunk(const int64_t* keys, const payload_t* pos, int64_t* kout, payload_t* pout,
                                Py_ssize_t lo, Py_ssize_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,
                                int64_t* counts, Py_ssize_t n, Py_ssize_t nchunks, int count,
                                bint streaming) noexcept nogil:
    if payload_t is uint8_t:
        st_scatter_p8(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, count, streaming)
    elif payload_t is uint16_t:
        st_scatter_p16(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, count, streaming)
    elif payload_t is int32_t:
        st_scatter_p32(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, count, streaming)
    else:
        st_scatter_p64(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, count, streaming)


cdef bint _radix_sort(int64_t* keys, int64_t* kbuf, const payload_t* first, payload_t* pos, payload_t* pbuf,
                      Py_ssize_t n, int passes, int width, int64_t varying, Py_ssize_t nchunks, int nthreads,
                      int64_t* hist, int64_t* offs, int64_t* work, Py_ssize_t work_stride,
                      Py_ssize_t nout_chunks, int64_t* heads) noexcept nogil:
    """Parallel LSD radix sort of (key, payload) pairs, over ``nchunks`` chunks of the input
    (dynamically scheduled, a few per thread: a thread that the OS pauses holds up little).

    Digit ``p`` holds key bits ``[p * width, (p + 1) * width)``; digits without a ``varying``
    bit (all keys agree on them) are skipped. Each pass counts the digit per chunk (``hist``,
    ``nchunks x nb``; on entry it holds digit 0's counts of ``keys``), turns the counts into
    each chunk's offset per bucket (``offs``) and scatters stably. The last pass also counts
    the run heads of the sorted keys per output chunk (``nout_chunks`` of them) into ``heads``
    (``nthreads x nout_chunks``, summed and corrected into ``heads[0, :]`` here).

    The payload of key ``i`` is ``first[i]`` (a scalar value), or ``i`` when ``first`` is NULL
    (a position); ``pos`` and ``pbuf`` are scratch for it. Returns True when the sorted pairs
    ended in ``(kbuf, pbuf)``, False for ``(keys, pos)``; at least one digit must vary.
    """
    cdef Py_ssize_t nb = (<Py_ssize_t>1) << width, b, c, t, i, size, begin
    cdef int64_t mask = nb - 1, run, total
    cdef int p, q, last = passes - 1
    cdef int64_t* src_k = keys
    cdef int64_t* dst_k = kbuf
    cdef int64_t* tk
    cdef payload_t* src_p = pos
    cdef payload_t* dst_p = pbuf
    cdef payload_t* tp
    cdef bint identity = True, counted = True
    cdef bint streaming = n * (sizeof(int64_t) + sizeof(payload_t)) >= STREAM_MIN_BYTES
    while last >= 0 and (varying >> (last * width)) & mask == 0:
        last = last - 1
    for p in range(last + 1):
        if (varying >> (p * width)) & mask == 0:
            counted = False
            continue
        if not counted:  # digit 0 was counted on entry; later ones are counted here
            memset(hist, 0, nchunks * nb * sizeof(int64_t))
            for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
                _hist_chunk(src_k, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), p * width, mask, hist + c * nb)
        counted = False
        run = 0
        for b in range(nb):
            for c in range(nchunks):
                offs[c * nb + b] = run
                run = run + hist[c * nb + b]
        if p == last:
            memset(heads, 0, nthreads * nout_chunks * sizeof(int64_t))
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            t = st_omp_thread_num()
            _scatter_chunk(src_k, first if identity else src_p, dst_k, dst_p, _lo(c, n, nchunks),
                           _lo(c + 1, n, nchunks), p * width, mask, offs + c * nb, work + t * work_stride,
                           heads + t * nout_chunks, n, nout_chunks, p == last, streaming)
        identity = False
        tk = src_k
        src_k = dst_k
        dst_k = tk
        tp = src_p
        src_p = dst_p
        dst_p = tp
    for i in range(nout_chunks):
        total = 0
        for t in range(nthreads):
            total = total + heads[t * nout_chunks + i]
        heads[i] = total
    # the first element of each chunk's part of a bucket was counted as a head
    for c in range(nchunks):
        for b in range(nb):
            size = hist[c * nb + b]
            begin = offs[c * nb + b] - size  # the offsets now hold the ends
            if size > 0 and begin > 0 and src_k[begin] == src_k[begin - 1]:
                heads[st_chunk_of(begin, n, nout_chunks)] -= 1
    return src_k == kbuf


def coo_sort(const index_t[:, ::1] indices, const int64_t[::1] shape, int nbits, bint presorted,
             const payload_t[::1] payload, Py_ssize_t nout_chunks, int nthreads):
    """Linearise the index columns to int64 keys (checking bounds), sort (key, payload) pairs,
    and find the runs of equal keys.

    ``nbits`` is the bit length of the largest possible key, ``prod(shape) - 1``. The payload
    is the original position of each key, or, when ``payload`` is not empty, its value (raw
    bits of a scalar). Returns ``(error, keys, payload, offsets)``: the keys in sorted order,
    the sorted payloads (positions are int32 when nnz allows, else int64; empty when
    ``presorted`` says the columns are in order already: the identity) and, for
    ``nout_chunks`` near-equal chunks of the sorted keys, the output offset of each chunk's
    first run (``nout_chunks + 1`` entries, the last one the number of runs).
    """
    cdef Py_ssize_t S = indices.shape[0], n = indices.shape[1], c
    cdef Py_ssize_t nchunks = max(1, min(n, SORT_CHUNKS_PER_THREAD * nthreads if nthreads > 1 else 1))
    cdef int passes, width
    passes, width = radix_digits(nbits)
    cdef Py_ssize_t nb = (<Py_ssize_t>1) << width
    cdef int64_t mask = nb - 1
    keys_arr = np.empty(n, np.int64)
    hist_arr = np.zeros((nchunks, nb), np.int64)
    state_arr = np.full((nchunks, 5), -1, np.int64)
    cdef int64_t[::1] keys = keys_arr
    cdef int64_t[:, ::1] hist = hist_arr
    cdef int64_t[:, ::1] state = state_arr
    cdef const index_t* idx = &indices[0, 0] if S > 0 and n > 0 else NULL
    cdef const int64_t* shp = &shape[0] if S > 0 else NULL
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _linearize_chunk(idx, S, n, shp, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), &keys[0], mask,
                             &hist[c, 0], &state[c, 0])
    found = _first_error(state_arr)
    if found is not None:
        pos, d, value = found
        return ("C4" if value < 0 else "C5", d, pos, value), None, None, None
    cdef int64_t varying = int(np.bitwise_or.reduce(state_arr[:, 3]) ^ np.bitwise_and.reduce(state_arr[:, 4]))
    if presorted or varying == 0:
        return None, keys_arr, np.empty(0, np.int64), run_offsets(keys_arr, nout_chunks, nthreads)
    kbuf_arr = np.empty(n, np.int64)
    offs_arr = np.empty((nchunks, nb), np.int64)
    heads_arr = np.zeros((nthreads, nout_chunks), np.int64)
    cdef Py_ssize_t stride = (WORK_PER_BUCKET * nb + 7) // 8 * 8  # int64 words, whole 64-byte lines
    work_arr = np.empty(nthreads * stride + 8, np.int64)
    cdef int64_t[::1] kbuf = kbuf_arr
    cdef int64_t[:, ::1] offs = offs_arr
    cdef int64_t[:, ::1] heads = heads_arr
    cdef int64_t[::1] workv = work_arr
    cdef int64_t* work = &workv[0]
    work = work + ((64 - (<size_t>work) % 64) % 64) // 8  # align to 64 bytes
    cdef payload_t[::1] pa, pb
    cdef int32_t[::1] p32, b32
    cdef int64_t[::1] p64, b64
    cdef bint swapped
    if payload.shape[0] > 0:  # carry the values
        dtype = np.asarray(payload).dtype
        pos_arr, pbuf_arr = np.empty(n, dtype), np.empty(n, dtype)
        pa, pb = pos_arr, pbuf_arr
        with nogil:
            swapped = _radix_sort(&keys[0], &kbuf[0], &payload[0], &pa[0], &pb[0], n, passes, width, varying,
                                  nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride, nout_chunks,
                                  &heads[0, 0])
    elif n <= INT32_MAX:  # carry int32 positions
        pos_arr, pbuf_arr = np.empty(n, np.int32), np.empty(n, np.int32)
        p32, b32 = pos_arr, pbuf_arr
        with nogil:
            swapped = _radix_sort(&keys[0], &kbuf[0], <const int32_t*>NULL, &p32[0], &b32[0], n, passes, width,
                                  varying, nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride,
                                  nout_chunks, &heads[0, 0])
    else:
        pos_arr, pbuf_arr = np.empty(n, np.int64), np.empty(n, np.int64)
        p64, b64 = pos_arr, pbuf_arr
        with nogil:
            swapped = _radix_sort(&keys[0], &kbuf[0], <const int64_t*>NULL, &p64[0], &b64[0], n, passes, width,
                                  varying, nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride,
                                  nout_chunks, &heads[0, 0])
    offsets = np.zeros(nout_chunks + 1, np.int64)
    np.cumsum(heads_arr[0], out=offsets[1:])
    if swapped:
        return None, kbuf_arr, pbuf_arr, offsets
    return None, keys_arr, pos_arr, offsets


cdef void _head_flags_chunk(const index_t* idx, Py_ssize_t S, Py_ssize_t n, const pos_t* perm,
                            Py_ssize_t lo, Py_ssize_t hi, int64_t* keys) noexcept nogil:
    cdef Py_ssize_t i, d, p, q
    for i in range(lo, hi):
        keys[i] = 0
        if i == 0:
            continue
        p = _at(perm, i)
        q = _at(perm, i - 1)
        for d in range(S):
            if idx[d * n + p] != idx[d * n + q]:
                keys[i] = 1
                break


def coo_head_flags(const index_t[:, ::1] indices, const pos_t[::1] perm, int64_t[::1] keys, int nthreads):
    """``keys[i] = 1`` where column ``perm[i]`` differs from column ``perm[i-1]``, else 0
    (the comparison-sort path: a cumulative sum then gives run keys). Empty ``perm`` is the identity."""
    cdef Py_ssize_t S = indices.shape[0], n = indices.shape[1], c
    cdef Py_ssize_t nt = max(1, min(nthreads, n))
    cdef const index_t* idx = &indices[0, 0] if S > 0 and n > 0 else NULL
    cdef const pos_t* pp = &perm[0] if perm.shape[0] > 0 else NULL
    with nogil:
        for c in prange(nt, schedule="static", num_threads=nt):
            _head_flags_chunk(idx, S, n, pp, _lo(c, n, nt), _lo(c + 1, n, nt), &keys[0])


# -- COO: runs and outputs ----------------------------------------------------------------------
cdef int64_t _count_heads(const int64_t* keys, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t count = 0
    for i in range(lo, hi):
        if i == 0 or keys[i] != keys[i - 1]:
            count = count + 1
    return count


def run_offsets(const int64_t[::1] keys, Py_ssize_t nchunks, int nthreads):
    """Output offset of each chunk's first run head (``nchunks + 1`` entries; the last is the
    number of distinct keys). Chunk ``c`` covers ``keys[lo(c):lo(c+1)]`` (near-equal split)."""
    cdef Py_ssize_t n = keys.shape[0], c
    counts_arr = np.zeros(nchunks + 1, np.int64)
    cdef int64_t[::1] counts = counts_arr
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            counts[c + 1] = _count_heads(&keys[0], _lo(c, n, nchunks), _lo(c + 1, n, nchunks))
    return np.cumsum(counts_arr)


cdef inline void _put_index(uint8_t* base, Py_ssize_t k, int size, int64_t v) noexcept nogil:
    if size == 8:
        (<int64_t*>base)[k] = v
    else:
        (<int32_t*>base)[k] = <int32_t>v


cdef inline int64_t _get_index(const uint8_t* base, Py_ssize_t k, int size) noexcept nogil:
    if size == 8:
        return (<const int64_t*>base)[k]
    return (<const int32_t*>base)[k]


cdef void _write_chunk(const int64_t* keys, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi, int64_t j,
                       const pos_t* perm, const int64_t* shape, const double* inv, Py_ssize_t S,
                       uint8_t* out_idx, Py_ssize_t nout, const uint8_t* in_idx, int isz,
                       const sum_t* vals, sum_t* out, Py_ssize_t E, bint logical_or) noexcept nogil:
    cdef Py_ssize_t i = lo, e, d, col
    cdef int64_t key, q, r, s
    while i < hi and i > 0 and keys[i] == keys[i - 1]:  # the tail of a run headed in an earlier chunk
        i = i + 1
    while i < hi:
        if perm != NULL and i + PREFETCH < n:  # the gather is random: ask for rows ahead
            st_prefetch(vals + <Py_ssize_t>perm[i + PREFETCH] * E)
        e = i + 1
        while e < n and keys[e] == keys[i]:
            e = e + 1
        if in_idx != NULL:  # copy the run's first column
            col = _at(perm, i)
            for d in range(S):
                _put_index(out_idx + d * nout * isz, j, isz, _get_index(in_idx + d * n * isz, col, isz))
        elif S > 0:  # de-linearise the key, row-major
            key = keys[i]
            for d in range(S - 1, 0, -1):
                s = shape[d]
                if inv != NULL:
                    q = <int64_t>(<double>key * inv[d])
                    r = key - q * s
                    while r < 0:
                        q = q - 1
                        r = r + s
                    while r >= s:
                        q = q + 1
                        r = r - s
                else:
                    q = key // s
                    r = key - q * s
                _put_index(out_idx + d * nout * isz, j, isz, r)
                key = q
            _put_index(out_idx, j, isz, key)
        if E > 0:
            _reduce_run(out + j * E, vals, perm, i, e, E, logical_or)
        j = j + 1
        i = e


def coo_write(const int64_t[::1] keys, const int64_t[::1] offsets, const pos_t[::1] perm,
              const int64_t[::1] shape, uint8_t[:, ::1] out_indices, const uint8_t[:, ::1] indices,
              const sum_t[:, ::1] values, sum_t[:, ::1] out, bint logical_or, int nthreads):
    """Write run ``j`` of the sorted keys to column ``j`` of the output indices and row ``j`` of
    ``out`` (the sum, or logical or, of ``values[perm[i]]`` over the run, in sorted order).

    Index arrays are passed as bytes (``(S, nout * itemsize)``, itemsize 4 or 8). The run's
    indices are the de-linearised key, or, when ``indices`` (the input's, as bytes) is not
    empty, a copy of the input column at the run's first position. Empty ``perm`` is the
    identity; chunks and their output offsets come from ``offsets``.
    """
    cdef Py_ssize_t n = keys.shape[0], S = out_indices.shape[0], nout = out.shape[0], E = values.shape[1], c
    cdef Py_ssize_t nchunks = offsets.shape[0] - 1
    cdef int isz = out_indices.shape[1] // nout if S > 0 and nout > 0 else 8
    cdef const pos_t* pp = &perm[0] if perm.shape[0] > 0 else NULL
    cdef uint8_t* op = &out_indices[0, 0] if S > 0 and nout > 0 else NULL
    cdef const uint8_t* ip = &indices[0, 0] if indices.shape[0] > 0 and indices.shape[1] > 0 else NULL
    cdef const sum_t* vp = &values[0, 0] if E > 0 else NULL
    cdef sum_t* outp = &out[0, 0] if E > 0 and nout > 0 else NULL
    inv_arr = 1.0 / np.maximum(np.asarray(shape, dtype=np.float64), 1.0)
    cdef double[::1] invv = inv_arr
    cdef const double* inv = &invv[0] if S > 0 and keys[n - 1] < DOUBLE_EXACT else NULL
    cdef const int64_t* shp = &shape[0] if S > 0 else NULL
    if nout == 0:
        return
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _write_chunk(&keys[0], n, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), offsets[c], pp, shp, inv, S, op,
                         nout, ip, isz, vp, outp, E, logical_or)


# -- compressed ------------------------------------------------------------------------------
cdef void _check_compressed_batch(const index_t* comp, Py_ssize_t ncomp, int64_t nnz, int64_t* err) noexcept nogil:
    # err: invariant code (1, 2, 3 for 5.1-5.3), i, value
    cdef Py_ssize_t i
    if comp[0] != 0:
        err[0] = 1
        err[1] = 0
        err[2] = comp[0]
        return
    if comp[ncomp - 1] != nnz:
        err[0] = 2
        err[1] = ncomp - 1
        err[2] = comp[ncomp - 1]
        return
    for i in range(1, ncomp):
        if comp[i] < comp[i - 1]:
            err[0] = 3
            err[1] = i
            err[2] = comp[i] - comp[i - 1]
            return


cdef inline bint _pair_less(index_t ka, int64_t pa, index_t kb, int64_t pb) noexcept nogil:
    return ka < kb or (ka == kb and pa < pb)


cdef void _sift_pairs(index_t* k, int64_t* p, Py_ssize_t root, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t child
    cdef index_t tk
    cdef int64_t tp
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and _pair_less(k[child], p[child], k[child + 1], p[child + 1]):
            child = child + 1
        if not _pair_less(k[root], p[root], k[child], p[child]):
            return
        tk = k[root]
        k[root] = k[child]
        k[child] = tk
        tp = p[root]
        p[root] = p[child]
        p[child] = tp
        root = child


cdef void _sort_pairs(index_t* k, int64_t* p, Py_ssize_t L) noexcept nogil:
    """Sort (key, position) pairs by key, ties by position (so: stably, as positions start in order)."""
    cdef Py_ssize_t i, j
    cdef index_t tk
    cdef int64_t tp
    if L <= INSERTION_MAX:
        for i in range(1, L):
            tk = k[i]
            tp = p[i]
            j = i
            while j > 0 and k[j - 1] > tk:
                k[j] = k[j - 1]
                p[j] = p[j - 1]
                j = j - 1
            k[j] = tk
            p[j] = tp
        return
    for i in range(L // 2 - 1, -1, -1):  # heapsort: in place, O(L log L)
        _sift_pairs(k, p, i, L)
    for i in range(L - 1, 0, -1):
        tk = k[0]
        k[0] = k[i]
        k[i] = tk
        tp = p[0]
        p[0] = p[i]
        p[i] = tp
        _sift_pairs(k, p, 0, i)


cdef void _sift_words(int64_t* w, Py_ssize_t root, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t child
    cdef int64_t t
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and w[child] < w[child + 1]:
            child = child + 1
        if w[root] >= w[child]:
            return
        t = w[root]
        w[root] = w[child]
        w[child] = t
        root = child


cdef void _sort_words(int64_t* w, Py_ssize_t L) noexcept nogil:
    """Sort distinct int64 words: insertion sort for short rows, heapsort for long ones."""
    cdef Py_ssize_t i, j
    cdef int64_t t
    if L <= INSERTION_MAX:
        for i in range(1, L):
            t = w[i]
            j = i
            while j > 0 and w[j - 1] > t:
                w[j] = w[j - 1]
                j = j - 1
            w[j] = t
        return
    for i in range(L // 2 - 1, -1, -1):
        _sift_words(w, i, L)
    for i in range(L - 1, 0, -1):
        t = w[0]
        w[0] = w[i]
        w[i] = t
        _sift_words(w, 0, i)


cdef void _sort_rows_chunk(const index_t* comp, const index_t* plain, Py_ssize_t ncomp, int64_t nnz,
                           int64_t plain_size, Py_ssize_t r0, Py_ssize_t r1, int lbits, index_t* keys,
                           int64_t* perm, int64_t* counts, int64_t* state) noexcept nogil:
    """Rows ``r0:r1`` (flat over batches): bounds, stable sort, distinct count; ``perm`` ends as
    the flat positions ``b * nnz + k`` in sorted order.

    With ``lbits > 0`` each entry is sorted as one word ``plain << lbits | offset in row``;
    otherwise as a (``keys``, ``perm``) pair.
    """
    # state: err code (4, 5 for 5.4/5.5), batch, row, position, value, changed
    cdef Py_ssize_t r, b, i, k, s, e, n = ncomp - 1
    cdef index_t v, prev
    cdef bint ordered
    cdef int64_t count, base, lmask = ((<int64_t>1) << lbits) - 1
    cdef int64_t* w
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        base = b * nnz
        s = comp[b * ncomp + i]
        e = comp[b * ncomp + i + 1]
        ordered = True
        prev = 0
        for k in range(s, e):
            v = plain[base + k]
            if v < 0 or v >= plain_size:
                state[0] = 4 if v < 0 else 5
                state[1] = b
                state[2] = i
                state[3] = k
                state[4] = v
                return
            if k > s and v <= prev:
                ordered = False
            prev = v
        count = e - s
        if ordered:
            for k in range(s, e):
                perm[base + k] = base + k
        elif lbits > 0:
            state[5] = 1
            w = perm + base + s
            for k in range(s, e):
                w[k - s] = ((<int64_t>plain[base + k]) << lbits) | (k - s)
            _sort_words(w, e - s)
            for k in range(1, e - s):
                if (w[k] >> lbits) == (w[k - 1] >> lbits):
                    count = count - 1
            for k in range(e - s):
                w[k] = base + s + (w[k] & lmask)
        else:
            state[5] = 1
            for k in range(s, e):
                keys[base + k] = plain[base + k]
                perm[base + k] = base + k
            _sort_pairs(keys + base + s, perm + base + s, e - s)
            for k in range(s + 1, e):
                if keys[base + k] == keys[base + k - 1]:
                    count = count - 1
        counts[r] = count


def compressed_sort_rows(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, int64_t plain_size,
                         int lbits, index_t[:, ::1] keys, int64_t[:, ::1] perm, int64_t[:, ::1] counts,
                         int nthreads):
    """Check 5.1, 5.2, 5.3 (lower bound), 5.4, 5.5; sort each row stably by plain index, writing
    the flat positions (``b * nnz + k``) in sorted order to ``perm``; count distinct plain
    indices per row.

    ``lbits > 0`` sorts packed words (needs ``bits(plain_size - 1) + lbits <= 63`` and rows
    shorter than ``2**lbits``; ``keys`` may be empty); ``lbits == 0`` sorts (key, position)
    pairs, with ``keys`` as scratch of the shape of ``plain``. Returns ``(error, changed)``:
    ``error`` is ``(invariant, batch, row, position, value)`` or None; ``changed`` is False
    when every row was already strictly increasing (nothing to repair).
    """
    cdef Py_ssize_t B = compressed.shape[0], ncomp = compressed.shape[1], nnz = plain.shape[1]
    cdef Py_ssize_t nrows = B * (ncomp - 1), b, c
    cdef Py_ssize_t nt = max(1, min(nthreads, B))
    berr_arr = np.zeros((B, 3), np.int64)
    cdef int64_t[:, ::1] berr = berr_arr
    with nogil:
        for b in prange(B, schedule="static", num_threads=nt):
            _check_compressed_batch(&compressed[b, 0], ncomp, nnz, &berr[b, 0])
    bad = np.flatnonzero(berr_arr[:, 0])
    if bad.size:
        b = bad[0]
        code, i, value = (int(x) for x in berr_arr[b])
        return ("5." + str(code), int(b), i, i, value), False
    if nrows == 0 or nnz == 0:
        return None, False
    cdef Py_ssize_t nchunks = max(1, min(nrows, 64 * nthreads, nrows // 256 + 1))
    state_arr = np.zeros((nchunks, 6), np.int64)
    cdef int64_t[:, ::1] state = state_arr
    cdef index_t* kp = &keys[0, 0] if keys.shape[0] > 0 and keys.shape[1] > 0 else NULL
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _sort_rows_chunk(&compressed[0, 0], &plain[0, 0], ncomp, nnz, plain_size, _lo(c, nrows, nchunks),
                             _lo(c + 1, nrows, nchunks), lbits, kp, &perm[0, 0], &counts[0, 0], &state[c, 0])
    bad = np.flatnonzero(state_arr[:, 0])
    if bad.size:
        code, b, i, k, value = (int(x) for x in state_arr[bad[0], :5])
        return ("5." + str(code), b, i, k, value), False
    return None, bool(state_arr[:, 5].any())


cdef void _write_rows_chunk(const index_t* comp, const index_t* new_comp, Py_ssize_t ncomp, int64_t nnz,
                            int64_t nnz_out, Py_ssize_t r0, Py_ssize_t r1, const index_t* plain,
                            const int64_t* perm, index_t* out_plain, const sum_t* vals, sum_t* out,
                            Py_ssize_t E, bint logical_or) noexcept nogil:
    cdef Py_ssize_t r, b, i, s, e, a, z, n = ncomp - 1
    cdef int64_t j
    cdef index_t key
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        s = b * nnz + comp[b * ncomp + i]
        e = b * nnz + comp[b * ncomp + i + 1]
        j = b * nnz_out + new_comp[b * ncomp + i]
        a = s
        while a < e:
            key = plain[perm[a]]
            z = a + 1
            while z < e and plain[perm[z]] == key:
                z = z + 1
            out_plain[j] = key
            if E > 0:
                _reduce_run(out + j * E, vals, perm, a, z, E, logical_or)
            j = j + 1
            a = z


def compressed_write(const index_t[:, ::1] compressed, const index_t[:, ::1] new_compressed,
                     const index_t[:, ::1] plain, const int64_t[:, ::1] perm, index_t[:, ::1] out_plain,
                     const sum_t[:, ::1] values, sum_t[:, ::1] out, bint logical_or, int nthreads):
    """Per row, write the distinct plain indices (in ``perm`` order) to ``out_plain`` and reduce the
    values of each run of equal ones (``values``: ``(B * nnz, E)``, ``out``: ``(B * nnz_out, E)``)."""
    cdef Py_ssize_t B = compressed.shape[0], ncomp = compressed.shape[1], nnz = plain.shape[1]
    cdef Py_ssize_t nnz_out = out_plain.shape[1], E = values.shape[1], nrows = B * (ncomp - 1), c
    if nrows == 0 or nnz_out == 0:
        return
    cdef Py_ssize_t nchunks = max(1, min(nrows, 64 * nthreads, nrows // 256 + 1))
    cdef const sum_t* vp = &values[0, 0] if E > 0 else NULL
    cdef sum_t* op = &out[0, 0] if E > 0 else NULL
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _write_rows_chunk(&compressed[0, 0], &new_compressed[0, 0], ncomp, nnz, nnz_out,
                              _lo(c, nrows, nchunks), _lo(c + 1, nrows, nchunks), &plain[0, 0], &perm[0, 0],
                              &out_plain[0, 0], vp, op, E, logical_or)
