/* AVX-512 fast paths of the sparse x dense products in _spmm.pyx (float32/float64 values,
 * int32/int64 indices, compressed rows): SpMV, CSR x dense, BSR x dense.
 *
 * Compiled in only when the compiler targets AVX-512 F + VL (the avx512 dispatch level,
 * -march=x86-64-v4, or -Dnative=true on such a CPU); otherwise ST_SPMM_SIMD is 0, the
 * functions are stubs that are never called, and _spmm.pyx runs its portable Cython loops.
 *
 * Every function handles compressed slots [i0, i1) of one batch and returns 0, or
 * ST_BAD_COMPRESSED / ST_BAD_PLAIN for a broken index when `checked` is 0 (nothing is read
 * through a broken index; SpMV finishes its range first, with the broken lanes and rows
 * masked out, so that its guards need no branch). `nnz` bounds the compressed entries,
 * `nplain` the plain indices. Results are written, never accumulated: out rows need no
 * initialisation.
 *
 * Register tiles: SpMV gathers 8 lanes of x per instruction, with a masked tail, so a row
 * of ~10 entries is one or two gathers, and sums 8 rows at once (a transpose tree); CSR x dense keeps a
 * row of up to 4 vectors (64 floats / 32 doubles) of the output in registers while it
 * streams the row's entries; BSR x dense keeps a tile of up to 4 block rows x 4 vectors
 * in registers across all blocks of a block row (4 broadcasts and up to 4 loads feed 16
 * FMAs); BSR x vector loads each block's elements as up to 4 vectors and multiplies them by
 * the block column's x entries spread over the lanes with one permute (a 3x3 float64 block:
 * 2 loads, 1 load of x, 2 permutes, 2 FMAs), summing each row's lanes at the end of the
 * block row. Tile sizes are compile-time constants of always-inlined helpers.
 */
#ifndef ST_SPMM_SIMD_H
#define ST_SPMM_SIMD_H

#include <stdint.h>
#include <stddef.h>

#include "_prefetch.h"

#define ST_BAD_COMPRESSED 1
#define ST_BAD_PLAIN 3

/* slot i's bounds [lo, hi) of cp (declared here), checked when `checked` is 0; shared with
   _spmv_avx2.h */
#define ST_SLOT_GUARD                                                          \
    int64_t lo = cp[i], hi = cp[i + 1];                                        \
    if (!checked && (lo < 0 || hi < lo || hi > nnz)) return ST_BAD_COMPRESSED;

/* every plain index of the slot below nplain, before any is followed (the tiles read each again
   through st_col: another thread may write the caller's array in between) */
#define ST_PLAIN_GUARD                                                         \
    if (!checked) {                                                            \
        uint64_t bad_ = 0; /* branch free: the compiler vectorises the look */ \
        for (int64_t k = lo; k < hi; k++)                                      \
            bad_ |= (uint64_t)(int64_t)pp[k] >= (uint64_t)nplain;              \
        if (bad_) return ST_BAD_PLAIN;                                         \
    }

/* the plain index v where it is below nplain, else 0: a loop that reads an index again after its
   guard follows the value it reads (the memory stays in bounds; what another thread wrote during
   the product makes the result undefined, not the access) */
static inline ptrdiff_t st_col(int64_t v, int64_t nplain) {
    return (uint64_t)v < (uint64_t)nplain ? (ptrdiff_t)v : 0;
}

#if defined(__AVX512F__) && defined(__AVX512VL__) && !defined(ST_NO_SIMD)
#define ST_SPMM_SIMD 1
#include <immintrin.h>

#define ST_INLINE static inline __attribute__((always_inline))

static inline __mmask16 st_mask16(ptrdiff_t w) {
    return w >= 16 ? (__mmask16)0xFFFF : w <= 0 ? (__mmask16)0 : (__mmask16)((1u << w) - 1u);
}

static inline __mmask8 st_mask8(ptrdiff_t w) {
    return w >= 8 ? (__mmask8)0xFF : w <= 0 ? (__mmask8)0 : (__mmask8)((1u << w) - 1u);
}

/* ---------------------------------------------------------------- SpMV
 * One template (a macro) per (value, index) type: T the element, IT the index, LIMT the
 * index vector (LIM its bound), AT the accumulator of L lanes with mask MT; LOADI/MLOADI
 * load L indices (masked), GE/MGE compare them with the bound, LOADV/MLOADV load values,
 * GATHER/MGATHER gather x (element size S), FMA accumulates; RED sums L accumulators into
 * one vector of L row sums (lane r: row r), STOREM stores it masked.
 *
 * Rows go in groups of L: each row's products are gathered into its own accumulator, and the
 * group's L accumulators are reduced together by a transpose tree (st_red*), which costs
 * about two shuffles and one add per row instead of a full horizontal sum per row, and
 * stores L outputs at once. A row's lanes are summed in one fixed order whatever its position
 * in a group (the tree adds lane pairs, then pairs of pairs, ...), and a range's last group is
 * padded with zero accumulators, so results do not depend on how rows are split into ranges
 * (the thread count). */

/* lane r of the result: the sum of a[r]'s 8 lanes, ((0+1)+(2+3))+((4+5)+(6+7)) */
ST_INLINE __m512d st_red8_pd(const __m512d *a) {
    __m512d b[4];
    for (int j = 0; j < 4; j++)  /* lanes alternate rows 2j, 2j+1; 128-bit lane q: partial q */
        b[j] = _mm512_add_pd(_mm512_unpacklo_pd(a[2 * j], a[2 * j + 1]),
                             _mm512_unpackhi_pd(a[2 * j], a[2 * j + 1]));
    __m512d c0 = _mm512_add_pd(_mm512_shuffle_f64x2(b[0], b[1], 0x88), _mm512_shuffle_f64x2(b[0], b[1], 0xDD));
    __m512d c1 = _mm512_add_pd(_mm512_shuffle_f64x2(b[2], b[3], 0x88), _mm512_shuffle_f64x2(b[2], b[3], 0xDD));
    return _mm512_add_pd(_mm512_shuffle_f64x2(c0, c1, 0x88), _mm512_shuffle_f64x2(c0, c1, 0xDD));
}

/* lane r of the result: the sum of a[r]'s 8 lanes, ((0+2)+(1+3))+((4+6)+(5+7)) */
ST_INLINE __m256 st_red8_ps(const __m256 *a) {
    __m256 q[2];
    for (int j = 0; j < 2; j++) {  /* rows 4j..4j+3: element r of each 128-bit half */
        const __m256 *b = a + 4 * j;
        __m256 t0 = _mm256_add_ps(_mm256_unpacklo_ps(b[0], b[1]), _mm256_unpackhi_ps(b[0], b[1]));
        __m256 t1 = _mm256_add_ps(_mm256_unpacklo_ps(b[2], b[3]), _mm256_unpackhi_ps(b[2], b[3]));
        q[j] = _mm256_add_ps(
            _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t1))),
            _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t1))));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(q[0], q[1], 0x20), _mm256_permute2f128_ps(q[0], q[1], 0x31));
}

/* SpMV streams a row's values and indices once; the chunk loop prefetches them ST_SPMV_PF
 * entries ahead (4 KB of float64 values), which keeps more lines in flight than the hardware
 * prefetchers do across page boundaries. A row shorter than a chunk prefetches
 * once, at its start, where the matrix takes ST_SHORT_PF_MIN_BYTES or more (from the caches a
 * prefetch a row only costs, hence the bound). BSR x vector prefetches the lines of each pair
 * of blocks ST_BSR_PF bytes ahead where its blocks take ST_BSR_PF_MIN_BYTES or more. The
 * measurements behind the distances are on the docs' performance page. The address is formed as an
 * integer and a prefetch never faults, so looking past the end of the arrays is harmless.
 * The four distances and bounds live in _prefetch.h, shared with the portable loops. */

ST_INLINE void st_spmv_prefetch(const void *ip, const void *vp, size_t isz, size_t vsz) {
    st_prefetch_past(vp, ST_SPMV_PF * vsz);
    st_prefetch_past(ip, ST_SPMV_PF * isz);
}

#define ST_DEFINE_SPMV(NAME, T, IT, LIMT, LIM, AT, L, MT, MASK, ZERO, LOADI, MLOADI, LT, MLT, \
                       LOADV, MLOADV, GATHER, MGATHER, S, FMA, RED, STOREM, ET, MLOADE, ALIGNE, \
                       LTE, GTE, MSTOREE)                                                      \
/* *acc = the products of entries [lo, hi), lane-wise. Unless `checked`, a lane whose index is \
   not below nplain is not gathered (it adds 0 or garbage) and is set in *bad: no branch in the \
   loop, the caller reports it once at the end of its range. */                              \
ST_INLINE void st_spmv_row_##NAME(const IT *pp, const T *vp, const T *x, int64_t lo, int64_t hi, \
                                  const LIMT lim, int checked, AT *acc, unsigned *bad) {      \
    AT a = ZERO();                                                                             \
    int64_t k = lo;                                                                            \
    for (; k + L <= hi; k += L) {                                                              \
        st_spmv_prefetch(pp + k, vp + k, sizeof(IT), sizeof(T));                               \
        LIMT c = LOADI(pp + k);                                                                \
        if (checked) {                                                                         \
            a = FMA(LOADV(vp + k), GATHER(c, x, S), a);                                        \
        } else {                                                                               \
            const MT ok = LT(c, lim);                                                          \
            *bad |= (MT)~ok;                                                                   \
            a = FMA(LOADV(vp + k), MGATHER(ZERO(), ok, c, x, S), a);                           \
        }                                                                                      \
    }                                                                                          \
    if (k < hi) {                                                                              \
        const MT m = MASK(hi - k);                                                             \
        LIMT c = MLOADI(m, pp + k);                                                            \
        const MT ok = checked ? m : MLT(m, c, lim);                                            \
        *bad |= (MT)(m & ~ok);                                                                 \
        a = FMA(MLOADV(m, vp + k), MGATHER(ZERO(), ok, c, x, S), a);                           \
    }                                                                                          \
    *acc = a;                                                                                  \
}                                                                                              \
                                                                                               \
/* Unless `checked`, a group's row ends are loaded once as a vector (ET, MLOADE), checked     \
   against their predecessors (ALIGNE shifts the group's start in) and nnz, and stored to a   \
   local array that the rows read: memory that changes after the check is never read again.   \
   A group that fails is clamped row by row (each end within [its start, nnz]: a broken row   \
   is empty) and reported at the end of the range. Rows follow one another from cp[i0], so at \
   most nnz entries are visited whatever the memory holds. */                                 \
ST_INLINE int st_spmv_rows_##NAME(const IT *cp, const IT *pp, const T *vp, const T *x, T *y,     \
                                  ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain,     \
                                  const int checked, const int pf) {                           \
    const LIMT lim = LIM;                                                                      \
    AT acc[L];                                                                                 \
    IT ends[L];                                                                                \
    unsigned bad = 0;                                                                          \
    int64_t lo = cp[i0], badc = 0;                                                             \
    if (!checked) { badc = (uint64_t)lo > (uint64_t)nnz; lo = badc ? 0 : lo; }                 \
    for (ptrdiff_t i = i0; i < i1; i += L) {                                                   \
        const int R = i1 - i < L ? (int)(i1 - i) : L;                                          \
        const IT *e = cp + i + 1;                                                              \
        if (!checked) {                                                                        \
            const MT mr = MASK(R);                                                             \
            const ET E = MLOADE(mr, e);                                                        \
            if (LTE(mr, E, ALIGNE(E, lo)) | GTE(mr, E, nnz)) {                                 \
                int64_t h = lo;                                                                \
                for (int r = 0; r < R; r++) {                                                  \
                    const int64_t v = e[r];                                                    \
                    h = v < h || v > nnz ? h : v;                                              \
                    ends[r] = (IT)h;                                                           \
                }                                                                              \
                badc = 1;                                                                      \
            } else {                                                                           \
                MSTOREE(ends, mr, E);                                                          \
            }                                                                                  \
            e = ends;                                                                          \
        }                                                                                      \
        _Pragma("GCC unroll 8") for (int r = 0; r < L; r++) {                                 \
            if (r >= R) { acc[r] = ZERO(); continue; }                                         \
            const int64_t hi = e[r];                                                           \
            if (pf && hi - lo < L) st_spmv_prefetch(pp + lo, vp + lo, sizeof(IT), sizeof(T));  \
            st_spmv_row_##NAME(pp, vp, x, lo, hi, lim, checked, acc + r, &bad);                \
            lo = hi;                                                                           \
        }                                                                                      \
        STOREM(y + i, MASK(R), RED(acc));                                                      \
    }                                                                                          \
    return badc ? ST_BAD_COMPRESSED : bad ? ST_BAD_PLAIN : 0;                                  \
}                                                                                              \
                                                                                               \
/* one copy without the guards, one with them */                                               \
static int st_spmv_##NAME(const IT *cp, const IT *pp, const T *vp, const T *x, T *y,           \
                          ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain, int checked) { \
    const int pf = nnz * (int64_t)(sizeof(T) + sizeof(IT)) >= ST_SHORT_PF_MIN_BYTES;           \
    return checked ? st_spmv_rows_##NAME(cp, pp, vp, x, y, i0, i1, nnz, nplain, 1, pf)         \
                   : st_spmv_rows_##NAME(cp, pp, vp, x, y, i0, i1, nnz, nplain, 0, pf);        \
}

/* a group's row ends (int32: 8 in 256 bits; int64: 8 in 512 bits): type, masked load, the
   vector of their predecessors (the group's start lo in lane 0), compares, masked store */
#define ST_ALIGNE32(E, lo) _mm256_alignr_epi32(E, _mm256_set1_epi32((int32_t)(lo)), 7)
#define ST_LTE32(m, a, b) _mm256_mask_cmplt_epi32_mask(m, a, b)
#define ST_GTE32(m, a, n) _mm256_mask_cmpgt_epi32_mask(m, a, _mm256_set1_epi32((int32_t)((n) > INT32_MAX ? INT32_MAX : (n))))
#define ST_ALIGNE64(E, lo) _mm512_alignr_epi64(E, _mm512_set1_epi64(lo), 7)
#define ST_LTE64(m, a, b) _mm512_mask_cmplt_epi64_mask(m, a, b)
#define ST_GTE64(m, a, n) _mm512_mask_cmpgt_epi64_mask(m, a, _mm512_set1_epi64(n))
#define ST_ENDS32 __m256i, _mm256_maskz_loadu_epi32, ST_ALIGNE32, ST_LTE32, ST_GTE32, _mm256_mask_storeu_epi32
#define ST_ENDS64 __m512i, _mm512_maskz_loadu_epi64, ST_ALIGNE64, ST_LTE64, ST_GTE64, _mm512_mask_storeu_epi64
/* expands ST_ENDS32 / ST_ENDS64 into their arguments before ST_DEFINE_SPMV counts them */
#define ST_DEFINE_SPMV_E(...) ST_DEFINE_SPMV(__VA_ARGS__)

/* bound of an int32 index vector: nplain, saturated */
#define ST_LIM32(SET1) SET1((int32_t)(nplain > INT32_MAX ? INT32_MAX : nplain))
#define ST_LOAD512I(p) _mm512_loadu_si512((const void *)(p))
#define ST_LOAD256I(p) _mm256_loadu_si256((const __m256i *)(p))

#define ST_GATHER256_PS(c, x, S) _mm256_i32gather_ps(x, c, S)
ST_DEFINE_SPMV_E(f32_i32, float, int32_t, __m256i, ST_LIM32(_mm256_set1_epi32), __m256, 8,
                 __mmask8, st_mask8, _mm256_setzero_ps, ST_LOAD256I, _mm256_maskz_loadu_epi32,
               _mm256_cmplt_epu32_mask, _mm256_mask_cmplt_epu32_mask, _mm256_loadu_ps,
               _mm256_maskz_loadu_ps, ST_GATHER256_PS, _mm256_mmask_i32gather_ps, 4,
               _mm256_fmadd_ps, st_red8_ps, _mm256_mask_storeu_ps, ST_ENDS32)
ST_DEFINE_SPMV_E(f32_i64, float, int64_t, __m512i, _mm512_set1_epi64(nplain), __m256, 8,
               __mmask8, st_mask8, _mm256_setzero_ps, ST_LOAD512I, _mm512_maskz_loadu_epi64,
               _mm512_cmplt_epu64_mask, _mm512_mask_cmplt_epu64_mask, _mm256_loadu_ps,
               _mm256_maskz_loadu_ps, _mm512_i64gather_ps, _mm512_mask_i64gather_ps, 4,
               _mm256_fmadd_ps, st_red8_ps, _mm256_mask_storeu_ps, ST_ENDS64)
ST_DEFINE_SPMV_E(f64_i32, double, int32_t, __m256i, ST_LIM32(_mm256_set1_epi32), __m512d, 8,
               __mmask8, st_mask8, _mm512_setzero_pd, ST_LOAD256I, _mm256_maskz_loadu_epi32,
               _mm256_cmplt_epu32_mask, _mm256_mask_cmplt_epu32_mask, _mm512_loadu_pd,
               _mm512_maskz_loadu_pd, _mm512_i32gather_pd, _mm512_mask_i32gather_pd, 8,
               _mm512_fmadd_pd, st_red8_pd, _mm512_mask_storeu_pd, ST_ENDS32)
ST_DEFINE_SPMV_E(f64_i64, double, int64_t, __m512i, _mm512_set1_epi64(nplain), __m512d, 8,
               __mmask8, st_mask8, _mm512_setzero_pd, ST_LOAD512I, _mm512_maskz_loadu_epi64,
               _mm512_cmplt_epu64_mask, _mm512_mask_cmplt_epu64_mask, _mm512_loadu_pd,
               _mm512_maskz_loadu_pd, _mm512_i64gather_pd, _mm512_mask_i64gather_pd, 8,
               _mm512_fmadd_pd, st_red8_pd, _mm512_mask_storeu_pd, ST_ENDS64)

/* ------------------------------------------------- CSR x dense, BSR x dense
 * One template (a macro) per (value, index) type: T the element, IT the index, VT the
 * vector, MT its mask, L its lanes. */

#define ST_DEFINE(TN, IN, T, IT, VT, MT, L, MASK, SET1, ZERO, FMA, LOADZ, STOREM, PERM, ADD, IXT)  \
                                                                                               \
/* o[0 : V vectors, masked] = sum_k v[k] * D[plain[k], 0 : ...] for one row */                 \
ST_INLINE void st_row_tile_##TN##_##IN(const IT *pp, const T *vp, int64_t lo, int64_t hi,      \
                                       const T *D, ptrdiff_t N, T *o, const MT *m, const int V, \
                                       int64_t nplain) {                                      \
    VT a0 = ZERO(), a1 = ZERO(), a2 = ZERO(), a3 = ZERO();                                     \
    for (int64_t k = lo; k < hi; k++) {                                                        \
        const VT v = SET1(vp[k]);                                                              \
        const T *d = D + st_col(pp[k], nplain) * N;                                            \
        a0 = FMA(v, LOADZ(m[0], d), a0);                                                       \
        if (V > 1) a1 = FMA(v, LOADZ(m[1], d + L), a1);                                        \
        if (V > 2) a2 = FMA(v, LOADZ(m[2], d + 2 * L), a2);                                    \
        if (V > 3) a3 = FMA(v, LOADZ(m[3], d + 3 * L), a3);                                    \
    }                                                                                          \
    STOREM(o, m[0], a0);                                                                       \
    if (V > 1) STOREM(o + L, m[1], a1);                                                        \
    if (V > 2) STOREM(o + 2 * L, m[2], a2);                                                    \
    if (V > 3) STOREM(o + 3 * L, m[3], a3);                                                    \
}                                                                                              \
                                                                                               \
static int st_spmm_rows_##TN##_##IN(const IT *cp, const IT *pp, const T *vp, const T *D, T *out, \
                                    ptrdiff_t N, ptrdiff_t i0, ptrdiff_t i1, int64_t nnz,      \
                                    int64_t nplain, int checked) {                             \
    for (ptrdiff_t i = i0; i < i1; i++) {                                                      \
        ST_SLOT_GUARD                                                                          \
        ST_PLAIN_GUARD                                                                         \
        T *o = out + i * N;                                                                    \
        for (ptrdiff_t t0 = 0; t0 < N; t0 += 4 * L) {                                          \
            const ptrdiff_t w = N - t0;                                                        \
            const MT m[4] = {MASK(w), MASK(w - L), MASK(w - 2 * L), MASK(w - 3 * L)};          \
            if (w > 3 * L)      st_row_tile_##TN##_##IN(pp, vp, lo, hi, D + t0, N, o + t0, m, 4, nplain); \
            else if (w > 2 * L) st_row_tile_##TN##_##IN(pp, vp, lo, hi, D + t0, N, o + t0, m, 3, nplain); \
            else if (w > L)     st_row_tile_##TN##_##IN(pp, vp, lo, hi, D + t0, N, o + t0, m, 2, nplain); \
            else                st_row_tile_##TN##_##IN(pp, vp, lo, hi, D + t0, N, o + t0, m, 1, nplain); \
        }                                                                                      \
    }                                                                                          \
    return 0;                                                                                  \
}                                                                                              \
                                                                                               \
/* a tile of R rows x V vectors of a block row's output, over all its blocks */                \
ST_INLINE void st_block_tile_##TN##_##IN(const IT *pp, const T *vp, int64_t lo, int64_t hi,    \
                                         const T *D, ptrdiff_t N, ptrdiff_t Cb, ptrdiff_t bs,  \
                                         ptrdiff_t ars, ptrdiff_t acs, T *o, const MT *m,      \
                                         const int R, const int V, int64_t nplain) {           \
    VT acc[4][4];                                                                              \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                        \
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) acc[r][v] = ZERO();                \
    for (int64_t k = lo; k < hi; k++) {                                                        \
        const T *a = vp + k * bs;                                                              \
        const T *dk = D + st_col(pp[k], nplain) * Cb * N;                                      \
        for (ptrdiff_t c = 0; c < Cb; c++) {                                                   \
            const T *d = dk + c * N;                                                           \
            VT dv[4];                                                                          \
            _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                                \
                if (v < V) dv[v] = LOADZ(m[v], d + v * L);                                     \
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                              \
                if (r < R) {                                                                   \
                    const VT ar = SET1(a[r * ars + c * acs]);                                  \
                    _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                        \
                        if (v < V) acc[r][v] = FMA(ar, dv[v], acc[r][v]);                      \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                        \
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                                    \
            if (r < R && v < V) STOREM(o + r * N + v * L, m[v], acc[r][v]);                    \
}                                                                                              \
                                                                                               \
/* block rows [i0, i1) of BSR x dense; blocks element (r, c) at r * ars + c * acs */           \
static int st_bsr_rows_##TN##_##IN(const IT *cp, const IT *pp, const T *vp, const T *D, T *out, \
                                   ptrdiff_t N, ptrdiff_t Rb, ptrdiff_t Cb, ptrdiff_t ars,     \
                                   ptrdiff_t acs, ptrdiff_t i0, ptrdiff_t i1, int64_t nnz,     \
                                   int64_t nplain, int checked) {                              \
    const ptrdiff_t bs = Rb * Cb;                                                              \
    for (ptrdiff_t i = i0; i < i1; i++) {                                                      \
        ST_SLOT_GUARD                                                                          \
        ST_PLAIN_GUARD                                                                         \
        T *o = out + i * Rb * N;                                                               \
        for (ptrdiff_t t0 = 0; t0 < N; t0 += 4 * L) {                                          \
            const ptrdiff_t w = N - t0;                                                        \
            const MT m[4] = {MASK(w), MASK(w - L), MASK(w - 2 * L), MASK(w - 3 * L)};          \
            const int V = w > 3 * L ? 4 : w > 2 * L ? 3 : w > L ? 2 : 1;                       \
            for (ptrdiff_t r0 = 0; r0 < Rb; r0 += 4) {                                         \
                const int R = Rb - r0 >= 4 ? 4 : (int)(Rb - r0);                               \
                const T *a = vp + r0 * ars;                                                    \
                T *ot = o + r0 * N + t0;                                                       \
                const T *dt = D + t0;                                                          \
                switch (R * 8 + V) {                                                           \
                ST_BLOCK_CASE(TN, IN, 4, 4) ST_BLOCK_CASE(TN, IN, 4, 3)                        \
                ST_BLOCK_CASE(TN, IN, 4, 2) ST_BLOCK_CASE(TN, IN, 4, 1)                        \
                ST_BLOCK_CASE(TN, IN, 3, 4) ST_BLOCK_CASE(TN, IN, 3, 3)                        \
                ST_BLOCK_CASE(TN, IN, 3, 2) ST_BLOCK_CASE(TN, IN, 3, 1)                        \
                ST_BLOCK_CASE(TN, IN, 2, 4) ST_BLOCK_CASE(TN, IN, 2, 3)                        \
                ST_BLOCK_CASE(TN, IN, 2, 2) ST_BLOCK_CASE(TN, IN, 2, 1)                        \
                ST_BLOCK_CASE(TN, IN, 1, 4) ST_BLOCK_CASE(TN, IN, 1, 3)                        \
                ST_BLOCK_CASE(TN, IN, 1, 2) ST_BLOCK_CASE(TN, IN, 1, 1)                        \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    return 0;                                                                                  \
}                                                                                              \
                                                                                               \
/* one block row of BSR x vector: the blocks' elements in C vectors of L lanes (two sets of   \
 * accumulators, even and odd blocks, for two FMA chains each), x's Cb entries of a block     \
 * column spread over the lanes by ix (lane j: the column of block element j); the R (0-2)    \
 * elements past C full vectors in scalars (a 3x3 float64 block: one vector and one scalar    \
 * instead of a second permute and FMA for one lane); the element sums go to buf for the      \
 * caller's row sums */                                                                        \
ST_INLINE void st_bsr_vec_row_##TN##_##IN(const IT *pp, const T *vp, int64_t lo, int64_t hi,  \
                                          const T *x, ptrdiff_t Cb, ptrdiff_t bs,             \
                                          const __m512i *ix, MT mx, const MT *mv,             \
                                          const ptrdiff_t *tc, T *buf, const int C,           \
                                          const int R, const int pf, int64_t nplain) {         \
    VT a[4], b[4];                                                                             \
    T sa[2] = {0, 0}, sb[2] = {0, 0};                                                          \
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) { a[c] = ZERO(); b[c] = ZERO(); }      \
    int64_t k = lo;                                                                            \
    for (; k + 1 < hi; k += 2) {                                                               \
        const T *xa = x + st_col(pp[k], nplain) * Cb, *xb = x + st_col(pp[k + 1], nplain) * Cb; \
        const VT x0 = LOADZ(mx, xa);                                                           \
        const VT x1 = LOADZ(mx, xb);                                                           \
        const T *v0 = vp + k * bs;                                                             \
        if (pf) { /* the lines of this pair's blocks, ST_BSR_PF bytes on, and their indices */ \
            for (ptrdiff_t off = 0; off < 2 * bs * (ptrdiff_t)sizeof(T); off += 64)           \
                st_prefetch_past(v0, ST_BSR_PF + off);                                         \
            st_prefetch_past(pp + k, ST_BSR_PF / 8);                                           \
        }                                                                                      \
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                  \
            if (c < C) {                                                                       \
                a[c] = FMA(LOADZ(mv[c], v0 + c * L), PERM(ix[c], x0), a[c]);                   \
                b[c] = FMA(LOADZ(mv[c], v0 + bs + c * L), PERM(ix[c], x1), b[c]);              \
            }                                                                                  \
        }                                                                                      \
        _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {                                  \
            if (e < R) {                                                                       \
                sa[e] += v0[C * L + e] * xa[tc[e]];                                            \
                sb[e] += v0[bs + C * L + e] * xb[tc[e]];                                       \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    if (k < hi) {                                                                              \
        const T *xa = x + st_col(pp[k], nplain) * Cb;                                          \
        const VT x0 = LOADZ(mx, xa);                                                           \
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)                                    \
            if (c < C) a[c] = FMA(LOADZ(mv[c], vp + k * bs + c * L), PERM(ix[c], x0), a[c]);   \
        _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++)                                    \
            if (e < R) sa[e] += vp[k * bs + C * L + e] * xa[tc[e]];                            \
    }                                                                                          \
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)                                        \
        if (c < C) STOREM(buf + c * L, MASK(L), ADD(a[c], b[c]));                              \
    _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++)                                        \
        if (e < R) buf[C * L + e] = sa[e] + sb[e];                                             \
}                                                                                              \
                                                                                               \
/* block rows [i0, i1) of BSR x vector (N == 1) for Cb <= L and Rb * Cb <= 4 * L; returns -1  \
 * (nothing written) for other blocks */                                                       \
static int st_bsr_vec_##TN##_##IN(const IT *cp, const IT *pp, const T *vp, const T *x, T *y,  \
                                  ptrdiff_t Rb, ptrdiff_t Cb, ptrdiff_t ars, ptrdiff_t acs,    \
                                  ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain,     \
                                  int checked) {                                               \
    const ptrdiff_t bs = Rb * Cb;                                                              \
    if (Cb > L || bs > 4 * L) return -1;                                                       \
    /* C vectors (the last masked), or C full ones and R <= 2 elements in scalars */           \
    int C = (int)((bs + L - 1) / L), R = 0;                                                    \
    if (bs > L && bs % L != 0 && bs % L <= 2) { C = (int)(bs / L); R = (int)(bs % L); }        \
    IXT lanes[4 * L] = {0};                                                                    \
    for (ptrdiff_t r = 0; r < Rb; r++)                                                         \
        for (ptrdiff_t c = 0; c < Cb; c++) lanes[r * ars + c * acs] = (IXT)c;                  \
    __m512i ix[4];                                                                             \
    MT mv[4];                                                                                  \
    for (int c = 0; c < 4; c++) {                                                              \
        ix[c] = _mm512_loadu_si512((const void *)(lanes + c * L));                             \
        mv[c] = MASK(bs - c * L);                                                              \
    }                                                                                          \
    const ptrdiff_t tc[2] = {lanes[C * L], R > 1 ? lanes[C * L + 1] : 0};                      \
    const MT mx = MASK(Cb);                                                                    \
    const int pf = nnz * (int64_t)(bs * sizeof(T) + sizeof(IT)) >= ST_BSR_PF_MIN_BYTES;        \
    T buf[4 * L];                                                                              \
    for (ptrdiff_t i = i0; i < i1; i++) {                                                      \
        ST_SLOT_GUARD                                                                          \
        ST_PLAIN_GUARD                                                                         \
        switch (C * 4 + R) {                                                                   \
        ST_BSR_VEC_CASE(TN, IN, 1, 0) ST_BSR_VEC_CASE(TN, IN, 2, 0)                            \
        ST_BSR_VEC_CASE(TN, IN, 3, 0) ST_BSR_VEC_CASE(TN, IN, 4, 0)                            \
        ST_BSR_VEC_CASE(TN, IN, 1, 1) ST_BSR_VEC_CASE(TN, IN, 2, 1)                            \
        ST_BSR_VEC_CASE(TN, IN, 3, 1) ST_BSR_VEC_CASE(TN, IN, 1, 2)                            \
        ST_BSR_VEC_CASE(TN, IN, 2, 2) ST_BSR_VEC_CASE(TN, IN, 3, 2)                            \
        }                                                                                      \
        T *o = y + i * Rb;                                                                     \
        for (ptrdiff_t r = 0; r < Rb; r++) {                                                   \
            T sum = 0;                                                                         \
            for (ptrdiff_t c = 0; c < Cb; c++) sum += buf[r * ars + c * acs];                  \
            o[r] = sum;                                                                        \
        }                                                                                      \
    }                                                                                          \
    return 0;                                                                                  \
}

#define ST_BSR_VEC_CASE(TN, IN, C, R)                                                          \
    case C * 4 + R:                                                                            \
        st_bsr_vec_row_##TN##_##IN(pp, vp, lo, hi, x, Cb, bs, ix, mx, mv, tc, buf, C, R, pf, nplain); \
        break;

#define ST_BLOCK_CASE(TN, IN, R, V)                                                            \
    case R * 8 + V:                                                                            \
        st_block_tile_##TN##_##IN(pp, a, lo, hi, dt, N, Cb, bs, ars, acs, ot, m, R, V, nplain); \
        break;

#define ST_SET1_PS(x) _mm512_set1_ps(x)
#define ST_SET1_PD(x) _mm512_set1_pd(x)
#define ST_STORE_PS(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define ST_STORE_PD(p, m, v) _mm512_mask_storeu_pd(p, m, v)
#define ST_F32(IN, IT) ST_DEFINE(f32, IN, float, IT, __m512, __mmask16, 16, st_mask16, ST_SET1_PS, \
                                 _mm512_setzero_ps, _mm512_fmadd_ps, _mm512_maskz_loadu_ps, ST_STORE_PS, \
                                 _mm512_permutexvar_ps, _mm512_add_ps, int32_t)
#define ST_F64(IN, IT) ST_DEFINE(f64, IN, double, IT, __m512d, __mmask8, 8, st_mask8, ST_SET1_PD, \
                                 _mm512_setzero_pd, _mm512_fmadd_pd, _mm512_maskz_loadu_pd, ST_STORE_PD, \
                                 _mm512_permutexvar_pd, _mm512_add_pd, int64_t)
ST_F32(i32, int32_t)
ST_F32(i64, int64_t)
ST_F64(i32, int32_t)
ST_F64(i64, int64_t)

#else /* no AVX-512: stubs, never called (ST_SPMM_SIMD == 0) */
#define ST_SPMM_SIMD 0
#define ST_STUB(NAME, T, IT)                                                                   \
static int st_spmv_##NAME(const IT *cp, const IT *pp, const T *vp, const T *x, T *y, ptrdiff_t i0, \
                          ptrdiff_t i1, int64_t nnz, int64_t nplain, int checked) { return -1; } \
static int st_spmm_rows_##NAME(const IT *cp, const IT *pp, const T *vp, const T *D, T *out,    \
                               ptrdiff_t N, ptrdiff_t i0, ptrdiff_t i1, int64_t nnz,           \
                               int64_t nplain, int checked) { return -1; }                     \
static int st_bsr_rows_##NAME(const IT *cp, const IT *pp, const T *vp, const T *D, T *out,     \
                              ptrdiff_t N, ptrdiff_t Rb, ptrdiff_t Cb, ptrdiff_t ars,          \
                              ptrdiff_t acs, ptrdiff_t i0, ptrdiff_t i1, int64_t nnz,          \
                              int64_t nplain, int checked) { return -1; }                      \
static int st_bsr_vec_##NAME(const IT *cp, const IT *pp, const T *vp, const T *x, T *y,        \
                             ptrdiff_t Rb, ptrdiff_t Cb, ptrdiff_t ars, ptrdiff_t acs,         \
                             ptrdiff_t i0, ptrdiff_t i1, int64_t nnz, int64_t nplain,          \
                             int checked) { return -1; }
ST_STUB(f32_i32, float, int32_t)
ST_STUB(f32_i64, float, int64_t)
ST_STUB(f64_i32, double, int32_t)
ST_STUB(f64_i64, double, int64_t)
#endif

/* The product of compressed slots [i0, i1) by the path that fits it: BSR x vector for
 * blocks (Rb * Cb > 1) and one dense column where the blocks fit its registers, BSR x dense
 * for other blocks, SpMV for one dense column, else CSR x dense. */
#define ST_DEFINE_GATHER(NAME, T, IT)                                                          \
static inline int st_gather_##NAME(const IT *cp, const IT *pp, const T *vp, const T *D, T *out, \
                                   ptrdiff_t N, ptrdiff_t Rb, ptrdiff_t Cb, ptrdiff_t ars,     \
                                   ptrdiff_t acs, ptrdiff_t i0, ptrdiff_t i1, int64_t nnz,     \
                                   int64_t nplain, int checked) {                              \
    if (Rb * Cb > 1 && N == 1 && Cb <= 64 / (ptrdiff_t)sizeof(T) && Rb * Cb <= 256 / (ptrdiff_t)sizeof(T)) \
        return st_bsr_vec_##NAME(cp, pp, vp, D, out, Rb, Cb, ars, acs, i0, i1, nnz, nplain, checked); \
    if (Rb * Cb > 1)                                                                           \
        return st_bsr_rows_##NAME(cp, pp, vp, D, out, N, Rb, Cb, ars, acs, i0, i1, nnz, nplain, \
                                  checked);                                                    \
    if (N == 1) return st_spmv_##NAME(cp, pp, vp, D, out, i0, i1, nnz, nplain, checked);      \
    return st_spmm_rows_##NAME(cp, pp, vp, D, out, N, i0, i1, nnz, nplain, checked);          \
}
ST_DEFINE_GATHER(f32_i32, float, int32_t)
ST_DEFINE_GATHER(f32_i64, float, int64_t)
ST_DEFINE_GATHER(f64_i32, double, int32_t)
ST_DEFINE_GATHER(f64_i64, double, int64_t)

#endif /* ST_SPMM_SIMD_H */
