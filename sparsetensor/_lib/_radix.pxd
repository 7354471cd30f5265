# Radix sort passes in C, shared by the coalescing kernels (textually included where cimported).
#
# st_scatter_*: one stable, parallel-safe scatter pass of (int64 key, payload) pairs by one digit,
# optionally with streaming stores and run-head counting; st_bscatter_*: the same pass keeping
# each key's low 32 bits (the bucket pass of the bucket sort); st_bucket_sort_*: the in-cache
# LSD sort of one bucket of (uint32 key, payload) pairs. Payloads: 1, 2, 4 or 8 bytes.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t

cdef extern from *:
    """
    #include <string.h>
    /* One stable scatter pass of a radix sort over (int64 key, payload) pairs.
     *
     * Keys keys[lo:hi) (cast to KEY_T: int64, or the low 32 bits) and their payloads (pos[lo:hi), or the positions lo..hi-1 when pos
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
    #define ST_DEFINE_SCATTER(NAME, KEY_T, POS_T)                                                     \
    ST_INLINE void NAME##_impl(const int64_t* keys, const POS_T* pos, KEY_T* kout, POS_T* pout,       \
            int64_t lo, int64_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,            \
            int64_t* counts, int64_t n, int64_t nchunks, const int count, const int streaming) {      \
        const int64_t nb = mask + 1, LK = 64 / (int64_t)sizeof(KEY_T), LP = 64 / (int64_t)sizeof(POS_T); \
        KEY_T* kstage = (KEY_T*)work;                                                                 \
        POS_T* pstage = (POS_T*)(work + 8 * nb);                                                      \
        int64_t* start = work + 16 * nb;                                                              \
        int64_t* cc = work + 17 * nb;                                                                 \
        int64_t* cend = work + 18 * nb;                                                               \
        int64_t* prev = work + 19 * nb;                                                               \
        const int64_t phk = (int64_t)(((uintptr_t)kout / sizeof(KEY_T)) & (uintptr_t)(LK - 1));      \
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
                kstage[b * LK + slot] = (KEY_T)k;                                                     \
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
                kout[d] = (KEY_T)k;                                                                   \
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
    static void NAME(const int64_t* keys, const POS_T* pos, KEY_T* kout, POS_T* pout,                 \
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

    ST_DEFINE_SCATTER(st_scatter_p8, int64_t, uint8_t)
    ST_DEFINE_SCATTER(st_scatter_p16, int64_t, uint16_t)
    ST_DEFINE_SCATTER(st_scatter_p32, int64_t, int32_t)
    ST_DEFINE_SCATTER(st_scatter_p64, int64_t, int64_t)
    /* the bucket pass: keys keep their low 32 bits (the digit and the bits above it are the bucket's) */
    ST_DEFINE_SCATTER(st_bscatter_p8, uint32_t, uint8_t)
    ST_DEFINE_SCATTER(st_bscatter_p16, uint32_t, uint16_t)
    ST_DEFINE_SCATTER(st_bscatter_p32, uint32_t, int32_t)
    ST_DEFINE_SCATTER(st_bscatter_p64, uint32_t, int64_t)

    /* Stable in-cache LSD radix sort of one bucket of (uint32 key, payload) pairs, k/p[0:m),
     * with scratch kb/pb of m pairs and cnt of 3 << ST_BUCKET_BITS counters. Only the bits
     * that vary within the bucket are sorted on, in as few digits of at most ST_BUCKET_BITS
     * bits as cover them (all digits counted in one read). The result is left in k/p.
     * Returns the number of distinct keys. */
    #define ST_BUCKET_BITS 11
    #define ST_INSERTION_MAX 32
    #define ST_DEFINE_BUCKET_SORT(NAME, P)                                                            \
    static int64_t NAME(uint32_t* k, P* p, uint32_t* kb, P* pb, int64_t m, uint32_t* cnt) {          \
        int64_t i, j, distinct;                                                                       \
        uint32_t ko = 0, ka = 0xffffffffu, v, x, dmask, *ks = k, *kd = kb, *kt;                       \
        P *ps = p, *pd = pb, *pt, y;                                                                  \
        int lo = 0, hi = 32, bits, passes, width, q;                                                  \
        if (m <= 1) return m;                                                                         \
        if (m <= ST_INSERTION_MAX) {                                                                  \
            for (i = 1; i < m; i++) {                                                                 \
                x = k[i]; y = p[i];                                                                   \
                for (j = i; j > 0 && k[j - 1] > x; j--) { k[j] = k[j - 1]; p[j] = p[j - 1]; }         \
                k[j] = x; p[j] = y;                                                                   \
            }                                                                                         \
        } else {                                                                                      \
            for (i = 0; i < m; i++) { ko |= k[i]; ka &= k[i]; }                                       \
            v = ko ^ ka;                                                                              \
            if (v == 0) return 1;                                                                     \
            while (!((v >> lo) & 1u)) lo++;                                                           \
            while (!((v >> (hi - 1)) & 1u)) hi--;                                                     \
            bits = hi - lo;                                                                           \
            passes = (bits + ST_BUCKET_BITS - 1) / ST_BUCKET_BITS;                                    \
            width = (bits + passes - 1) / passes;                                                     \
            const int64_t nb = (int64_t)1 << width;                                                   \
            dmask = (uint32_t)(nb - 1);                                                               \
            memset(cnt, 0, (size_t)passes * (size_t)nb * sizeof(uint32_t));                           \
            for (i = 0; i < m; i++) {                                                                 \
                x = k[i] >> lo;                                                                       \
                for (q = 0; q < passes; q++) cnt[q * nb + ((x >> (q * width)) & dmask)]++;            \
            }                                                                                         \
            for (q = 0; q < passes; q++) {                                                            \
                uint32_t* c = cnt + q * nb;                                                           \
                uint32_t run = 0, t;                                                                  \
                int sh = lo + q * width;                                                              \
                for (i = 0; i < nb; i++) { t = c[i]; c[i] = run; run += t; }                          \
                for (i = 0; i < m; i++) {                                                             \
                    x = ks[i];                                                                        \
                    j = c[(x >> sh) & dmask]++;                                                       \
                    kd[j] = x; pd[j] = ps[i];                                                         \
                }                                                                                     \
                kt = ks; ks = kd; kd = kt; pt = ps; ps = pd; pd = pt;                                 \
            }                                                                                         \
            if (ks != k) {                                                                            \
                memcpy(k, ks, (size_t)m * sizeof(uint32_t));                                          \
                memcpy(p, ps, (size_t)m * sizeof(P));                                                 \
            }                                                                                         \
        }                                                                                             \
        distinct = 1;                                                                                 \
        for (i = 1; i < m; i++) distinct += k[i] != k[i - 1];                                         \
        return distinct;                                                                              \
    }
    ST_DEFINE_BUCKET_SORT(st_bucket_sort_p8, uint8_t)
    ST_DEFINE_BUCKET_SORT(st_bucket_sort_p16, uint16_t)
    ST_DEFINE_BUCKET_SORT(st_bucket_sort_p32, int32_t)
    ST_DEFINE_BUCKET_SORT(st_bucket_sort_p64, int64_t)
    """
    int64_t st_chunk_of(int64_t d, int64_t n, int64_t nchunks) nogil
    void st_scatter_p8(const int64_t* keys, const uint8_t* pos, int64_t* kout, uint8_t* pout, int64_t lo, int64_t hi,
        int shift, int64_t mask, int64_t* offs, int64_t* work, int64_t* counts, int64_t n, int64_t nchunks,
        int count, int streaming) nogil
    void st_bscatter_p8(const int64_t* keys, const uint8_t* pos, uint32_t* kout, uint8_t* pout, int64_t lo, int64_t hi,
        int shift, int64_t mask, int64_t* offs, int64_t* work, int64_t* counts, int64_t n, int64_t nchunks,
        int count, int streaming) nogil
    void st_scatter_p16(const int64_t* keys, const uint16_t* pos, int64_t* kout, uint16_t* pout, int64_t lo, int64_t hi,
        int shift, int64_t mask, int64_t* offs, int64_t* work, int64_t* counts, int64_t n, int64_t nchunks,
        int count, int streaming) nogil
    void st_bscatter_p16(const int64_t* keys, const uint16_t* pos, uint32_t* kout, uint16_t* pout, int64_t lo, int64_t hi,
        int shift, int64_t mask, int64_t* offs, int64_t* work, int64_t* counts, int64_t n, int64_t nchunks,
        int count, int streaming) nogil
    void st_scatter_p32(const int64_t* keys, const int32_t* pos, int64_t* kout, int32_t* pout, int64_t lo, int64_t hi,
        int shift, int64_t mask, int64_t* offs, int64_t* work, int64_t* counts, int64_t n, int64_t nchunks,
        int count, int streaming) nogil
    void st_bscatter_p32(const int64_t* keys, const int32_t* pos, uint32_t* kout, int32_t* pout, int64_t lo, int64_t hi,
        int shift, int64_t mask, int64_t* offs, int64_t* work, int64_t* counts, int64_t n, int64_t nchunks,
        int count, int streaming) nogil
    void st_scatter_p64(const int64_t* keys, const int64_t* pos, int64_t* kout, int64_t* pout, int64_t lo, int64_t hi,
        int shift, int64_t mask, int64_t* offs, int64_t* work, int64_t* counts, int64_t n, int64_t nchunks,
        int count, int streaming) nogil
    void st_bscatter_p64(const int64_t* keys, const int64_t* pos, uint32_t* kout, int64_t* pout, int64_t lo, int64_t hi,
        int shift, int64_t mask, int64_t* offs, int64_t* work, int64_t* counts, int64_t n, int64_t nchunks,
        int count, int streaming) nogil
    int64_t st_bucket_sort_p8(uint32_t* k, uint8_t* p, uint32_t* kb, uint8_t* pb, int64_t m, uint32_t* cnt) nogil
    int64_t st_bucket_sort_p16(uint32_t* k, uint16_t* p, uint32_t* kb, uint16_t* pb, int64_t m, uint32_t* cnt) nogil
    int64_t st_bucket_sort_p32(uint32_t* k, int32_t* p, uint32_t* kb, int32_t* pb, int64_t m, uint32_t* cnt) nogil
    int64_t st_bucket_sort_p64(uint32_t* k, int64_t* p, uint32_t* kb, int64_t* pb, int64_t m, uint32_t* cnt) nogil


cdef inline int64_t _key_quot(int64_t key, int64_t size, double inv) noexcept nogil:
    """``key // size`` for a linear key >= 0: by the reciprocal ``inv = 1 / size`` and a
    correction when ``inv != 0`` (keys below 2**53, where the product is off by at most one),
    else by division. The digit is ``key - quot * size``."""
    cdef int64_t q, r
    if inv == 0:
        return key // size
    q = <int64_t>(<double>key * inv)
    r = key - q * size
    while r < 0:
        q = q - 1
        r = r + size
    while r >= size:
        q = q + 1
        r = r - size
    return q
