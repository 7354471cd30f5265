/* AVX2 SpMV for float64 values (int32/int64 indices, compressed rows): what CPUs without
 * AVX-512 run instead of _spmm.pyx's portable SpMV loop (the avx2 dispatch level,
 * -march=x86-64-v3), on rows of at least _AVX2_SPMV_MIN_MEAN entries on average (_geo), and
 * instead of its BSR x vector loop for row-major 3x3 and 4x4 blocks (below). At the
 * avx512 level _spmm_simd.h's 8-lane kernel runs instead; elsewhere ST_SPMV_AVX2 is 0 and the
 * functions are stubs that are never called.
 *
 * The design of _spmm_simd.h's SpMV, at 4 lanes: a row's products are gathered 4 at a time
 * (vgatherdpd / vgatherqpd) into its own accumulator, a short tail through masked loads and a
 * masked gather (nothing is read past the row), and 4 rows' accumulators are summed together
 * (two horizontal adds and a swap of 128-bit halves: lane r = (r0 + r1) + (r2 + r3)) and stored
 * at once. A row's sum depends on the row alone, not on how rows are split among threads.
 *
 * Slots [i0, i1) of one batch; returns 0, or ST_BAD_COMPRESSED / ST_BAD_PLAIN for a broken
 * index when `checked` is 0 (nothing is read through a broken index: the range is finished
 * with the broken lanes and rows masked out, then reported).
 *
 * The entry points are noinline (as meson.build has GCC compile every non-inline function of
 * _spmm): inlined into _gather_task, their code moved the portable loops beside them and slowed
 * the short-row SpMV. */
#ifndef ST_SPMV_AVX2_H
#define ST_SPMV_AVX2_H

#include <stdint.h>
#include <stddef.h>

#include "_prefetch.h"
#include "_spmm_simd.h" /* ST_BAD_COMPRESSED, ST_BAD_PLAIN (the _spmm kernels' return codes), ST_SLOT_GUARD */

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__) && !defined(ST_NO_SIMD)
#define ST_SPMV_AVX2 1
#include <immintrin.h>

#define ST_AVX2_INLINE static inline __attribute__((always_inline))

/* lane r: the sum of a[r]'s 4 lanes, (0 + 1) + (2 + 3) */
ST_AVX2_INLINE __m256d st_red4_pd(const __m256d *a) {
    const __m256d h01 = _mm256_hadd_pd(a[0], a[1]);  /* a0: 0+1, a1: 0+1, a0: 2+3, a1: 2+3 */
    const __m256d h23 = _mm256_hadd_pd(a[2], a[3]);
    return _mm256_add_pd(_mm256_permute2f128_pd(h01, h23, 0x20), _mm256_permute2f128_pd(h01, h23, 0x31));
}

/* the first w (0..4) 64-bit lanes set */
ST_AVX2_INLINE __m256i st_mask4_64(int64_t w) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(w), _mm256_setr_epi64x(0, 1, 2, 3));
}

/* Per index type: LOADC(p) the 4 indices at p, MLOADC(m64, p) those of the lanes of m64 (the
 * others 0), BADV(c) the 64-bit lanes holding an index outside [0, nplain), GATHER(c) /
 * MGATHER(c, m64) x at those indices. */
#define ST_LOADC_I32(p) _mm_loadu_si128((const __m128i *)(p))
#define ST_MLOADC_I32(m, p) _mm_maskload_epi32((const int *)(p), _mm256_castsi256_si128(st_pack_mask(m)))
#define ST_BADV_I32(c) \
    _mm256_cvtepi32_epi64(_mm_or_si128(_mm_cmpgt_epi32(_mm_setzero_si128(), c), _mm_cmpgt_epi32(c, lim)))
#define ST_GATHER_I32(c) _mm256_i32gather_pd(x, c, 8)
#define ST_MGATHER_I32(c, m) _mm256_mask_i32gather_pd(_mm256_setzero_pd(), x, c, _mm256_castsi256_pd(m), 8)

#define ST_LOADC_I64(p) _mm256_loadu_si256((const __m256i *)(p))
#define ST_MLOADC_I64(m, p) _mm256_maskload_epi64((const long long *)(p), m)
#define ST_BADV_I64(c) \
    _mm256_or_si256(_mm256_cmpgt_epi64(_mm256_setzero_si256(), c), _mm256_cmpgt_epi64(c, lim))
#define ST_GATHER_I64(c) _mm256_i64gather_pd(x, c, 8)
#define ST_MGATHER_I64(c, m) _mm256_mask_i64gather_pd(_mm256_setzero_pd(), x, c, _mm256_castsi256_pd(m), 8)

/* the 4 low 32-bit halves of a 64-bit lane mask, in the low 128 bits */
ST_AVX2_INLINE __m256i st_pack_mask(__m256i m64) {
    return _mm256_permutevar8x32_epi32(m64, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
}

/* The guards as in _spmm_simd.h's SpMV: unless `checked`, a lane holding a broken index is
 * not gathered and is set in *bad, a broken row end makes its row empty and is set in badc;
 * both are reported at the end of the range (no branch in the loops), and rows follow one
 * another from cp[i0], so at most nnz entries are visited whatever the memory holds. */
#define ST_DEFINE_SPMV_AVX2(IN, IT, CT, LIMV, LOADC, MLOADC, BADV, GATHER, MGATHER)                \
/* *acc = the products of entries [lo, hi), lane-wise */                                        \
ST_AVX2_INLINE void st_spmv2_row_##IN(const IT *pp, const double *vp, const double *x,           \
                                      int64_t lo, int64_t hi, CT lim, int checked, __m256d *acc, \
                                      __m256i *bad) {                                           \
    __m256d a = _mm256_setzero_pd();                                                            \
    int64_t k = lo;                                                                             \
    for (; k + 4 <= hi; k += 4) {                                                               \
        st_prefetch_past(vp + k, ST_SPMV_PF * sizeof(double));                                  \
        st_prefetch_past(pp + k, ST_SPMV_PF * sizeof(IT));                                      \
        const CT c = LOADC(pp + k);                                                             \
        if (checked) {                                                                          \
            a = _mm256_fmadd_pd(_mm256_loadu_pd(vp + k), GATHER(c), a);                         \
        } else {                                                                                \
            const __m256i b = BADV(c);                                                          \
            *bad = _mm256_or_si256(*bad, b);                                                    \
            a = _mm256_fmadd_pd(_mm256_loadu_pd(vp + k),                                        \
                                MGATHER(c, _mm256_xor_si256(b, _mm256_set1_epi64x(-1))), a);    \
        }                                                                                       \
    }                                                                                           \
    if (k < hi) {                                                                               \
        const __m256i m = st_mask4_64(hi - k);                                                  \
        const CT c = MLOADC(m, pp + k);                                                         \
        __m256i ok = m;                                                                         \
        if (!checked) {                                                                         \
            const __m256i b = BADV(c);                                                          \
            *bad = _mm256_or_si256(*bad, _mm256_and_si256(b, m));                               \
            ok = _mm256_andnot_si256(b, m);                                                     \
        }                                                                                       \
        a = _mm256_fmadd_pd(_mm256_maskload_pd(vp + k, m), MGATHER(c, ok), a);                  \
    }                                                                                           \
    *acc = a;                                                                                   \
}                                                                                               \
                                                                                                \
ST_AVX2_INLINE int st_spmv2_rows_##IN(const IT *cp, const IT *pp, const double *vp,              \
                                      const double *x, double *y, ptrdiff_t i0, ptrdiff_t i1,   \
                                      int64_t nnz, int64_t nplain, const int checked,           \
                                      const int pf) {                                           \
    const CT lim = LIMV; /* the largest valid index */                                          \
    __m256d acc[4];                                                                             \
    __m256i bad = _mm256_setzero_si256();                                                       \
    int64_t lo = cp[i0], badc = 0;                                                              \
    if (!checked) { badc = (uint64_t)lo > (uint64_t)nnz; lo = badc ? 0 : lo; }                  \
    for (ptrdiff_t i = i0; i < i1; i += 4) {                                                    \
        const int R = i1 - i < 4 ? (int)(i1 - i) : 4;                                           \
        for (int r = 0; r < 4; r++) {                                                           \
            if (r >= R) { acc[r] = _mm256_setzero_pd(); continue; }                             \
            int64_t hi = cp[i + r + 1];                                                         \
            if (!checked) {                                                                     \
                const int64_t b = (uint64_t)(hi - lo) > (uint64_t)(nnz - lo);                   \
                badc |= b;                                                                      \
                hi = b ? lo : hi;                                                               \
            }                                                                                   \
            if (pf && hi - lo < 4) {                                                            \
                st_prefetch_past(vp + lo, ST_SPMV_PF * sizeof(double));                         \
                st_prefetch_past(pp + lo, ST_SPMV_PF * sizeof(IT));                             \
            }                                                                                   \
            st_spmv2_row_##IN(pp, vp, x, lo, hi, lim, checked, acc + r, &bad);                  \
            lo = hi;                                                                            \
        }                                                                                       \
        const __m256d s = st_red4_pd(acc);                                                      \
        if (R == 4) _mm256_storeu_pd(y + i, s);                                                 \
        else _mm256_maskstore_pd(y + i, st_mask4_64(R), s);                                     \
    }                                                                                           \
    return badc ? ST_BAD_COMPRESSED : !_mm256_testz_si256(bad, bad) ? ST_BAD_PLAIN : 0;         \
}                                                                                               \
                                                                                                \
/* one copy without the guards, one with them */                                                \
static __attribute__((noinline)) int st_spmv2_f64_##IN(const IT *cp, const IT *pp, const double *vp, const double *x,     \
                             double *y, ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain, \
                             int checked) {                                                     \
    const int pf = nnz * (int64_t)(sizeof(double) + sizeof(IT)) >= ST_SHORT_PF_MIN_BYTES;       \
    return checked ? st_spmv2_rows_##IN(cp, pp, vp, x, y, i0, i1, nnz, nplain, 1, pf)           \
                   : st_spmv2_rows_##IN(cp, pp, vp, x, y, i0, i1, nnz, nplain, 0, pf);          \
}

ST_DEFINE_SPMV_AVX2(i32, int32_t, __m128i, _mm_set1_epi32((int32_t)(nplain > INT32_MAX ? INT32_MAX : nplain - 1)),
                    ST_LOADC_I32, ST_MLOADC_I32, ST_BADV_I32, ST_GATHER_I32, ST_MGATHER_I32)
ST_DEFINE_SPMV_AVX2(i64, int64_t, __m256i, _mm256_set1_epi64x(nplain - 1),
                    ST_LOADC_I64, ST_MLOADC_I64, ST_BADV_I64, ST_GATHER_I64, ST_MGATHER_I64)

/* ------------------------------------------------------------ BSR x vector
 * Row-major B x B blocks of float64, B = 3 or 4 (3-d elasticity, 4 unknowns a point), one
 * vector: block row i's B outputs each have an accumulator of 4 lanes; a block adds row r's B
 * entries times the block column's B entries of x (one load of x a block, masked to 3 lanes
 * for B = 3, and one load of each block row, masked the same way: nothing is read past a
 * block or the arrays). The B accumulators are summed together at the end of the block row
 * (st_red4_pd: lane r = (r0 + r1) + (r2 + r3)). The portable loop runs each output row as one
 * chain of dependent adds, 3 of them a block for 3x3 blocks; here a block's products go into
 * independent lanes. Blocks that stream from memory prefetch the block ST_BSR_PF bytes on. */
#define ST_DEFINE_BVEC_AVX2(IN, IT)                                                              \
ST_AVX2_INLINE int st_bvec2_rows_##IN(const IT *cp, const IT *pp, const double *vp,              \
                                      const double *x, double *y, ptrdiff_t i0, ptrdiff_t i1,   \
                                      int64_t nnz, int64_t nplain, const int B,                 \
                                      const int checked, const int pf) {                        \
    const __m256i m = st_mask4_64(B);                                                           \
    for (ptrdiff_t i = i0; i < i1; i++) {                                                       \
        ST_SLOT_GUARD                                                                           \
        __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),        \
                          _mm256_setzero_pd()};                                                 \
        for (int64_t k = lo; k < hi; k++) {                                                     \
            const int64_t col = pp[k];                                                          \
            if (!checked && (uint64_t)col >= (uint64_t)nplain) return ST_BAD_PLAIN;             \
            const double *a = vp + k * B * B;                                                   \
            if (pf) {                                                                           \
                for (int off = 0; off < B * B * (int)sizeof(double); off += 64)                 \
                    st_prefetch_past(a, ST_BSR_PF + off);                                       \
                st_prefetch_past(pp + k, ST_BSR_PF / 8);                                        \
            }                                                                                   \
            const __m256d xv = B == 4 ? _mm256_loadu_pd(x + col * B)                            \
                                      : _mm256_maskload_pd(x + col * B, m);                     \
            for (int r = 0; r < B; r++)                                                         \
                acc[r] = _mm256_fmadd_pd(B == 4 ? _mm256_loadu_pd(a + r * B)                    \
                                                : _mm256_maskload_pd(a + r * B, m), xv, acc[r]); \
        }                                                                                       \
        const __m256d s = st_red4_pd(acc);                                                      \
        if (B == 4) _mm256_storeu_pd(y + i * B, s);                                             \
        else _mm256_maskstore_pd(y + i * B, m, s);                                              \
    }                                                                                           \
    return 0;                                                                                   \
}                                                                                               \
                                                                                                \
/* one copy with and one without the guards, each with and without the prefetch */              \
ST_AVX2_INLINE int st_bvec2_copies_##IN(const IT *cp, const IT *pp, const double *vp,            \
                                        const double *x, double *y, ptrdiff_t i0, ptrdiff_t i1, \
                                        int64_t nnz, int64_t nplain, const int B, int checked,  \
                                        int pf) {                                               \
    if (pf) return checked ? st_bvec2_rows_##IN(cp, pp, vp, x, y, i0, i1, nnz, nplain, B, 1, 1)  \
                           : st_bvec2_rows_##IN(cp, pp, vp, x, y, i0, i1, nnz, nplain, B, 0, 1); \
    return checked ? st_bvec2_rows_##IN(cp, pp, vp, x, y, i0, i1, nnz, nplain, B, 1, 0)         \
                   : st_bvec2_rows_##IN(cp, pp, vp, x, y, i0, i1, nnz, nplain, B, 0, 0);        \
}                                                                                               \
                                                                                                \
/* B = 3 or 4, each a constant of its own copies */                                             \
static __attribute__((noinline)) int st_bvec2_f64_##IN(const IT *cp, const IT *pp, const double *vp, \
                             const double *x, double *y, ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, \
                             int64_t nplain, int B, int checked) {                              \
    const int pf = nnz * (int64_t)(B * B * sizeof(double) + sizeof(IT)) >= ST_BSR_PF_MIN_BYTES; \
    if (B == 3) return st_bvec2_copies_##IN(cp, pp, vp, x, y, i0, i1, nnz, nplain, 3, checked, pf); \
    if (B == 4) return st_bvec2_copies_##IN(cp, pp, vp, x, y, i0, i1, nnz, nplain, 4, checked, pf); \
    return -1;                                                                                  \
}

ST_DEFINE_BVEC_AVX2(i32, int32_t)
ST_DEFINE_BVEC_AVX2(i64, int64_t)

#else /* stubs, never called (ST_SPMV_AVX2 == 0) */
#define ST_SPMV_AVX2 0
static inline int st_spmv2_f64_i32(const int32_t *cp, const int32_t *pp, const double *vp, const double *x, double *y,
                     ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain, int checked) { return -1; }
static inline int st_spmv2_f64_i64(const int64_t *cp, const int64_t *pp, const double *vp, const double *x, double *y,
                     ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain, int checked) { return -1; }
static inline int st_bvec2_f64_i32(const int32_t *cp, const int32_t *pp, const double *vp, const double *x, double *y,
                     ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain, int B, int checked) { return -1; }
static inline int st_bvec2_f64_i64(const int64_t *cp, const int64_t *pp, const double *vp, const double *x, double *y,
                     ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain, int B, int checked) { return -1; }
#endif /* ST_SPMV_AVX2 */

#endif /* ST_SPMV_AVX2_H */
