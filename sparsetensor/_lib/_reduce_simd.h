/* The sum of a run x[lo:hi] of float64, float32 or int64 values: the row sums of csr
 * (compressed_sum in _reduce.pyx), where runs are short (often 2-50 values) and of
 * varying length.
 *
 * Where the compiler targets AVX-512 (the avx512 dispatch level, -march=x86-64-v4, or
 * -Dnative=true on such a CPU) the run is summed a chunk of 64 bytes (or two: `wide`) at
 * a time, lanes past hi masked out: a run shorter than a chunk is one trip of the loop,
 * whatever its length, so the CPU mispredicts no branch on it, and chunks are read whole
 * (they stay below n, the length of x: the last values of x go one at a time). The code
 * is GCC/Clang vector extensions, plain C that the compiler maps to registers. Elsewhere
 * (ST_REDUCE_SIMD 0) the run is summed by four interleaved scalar sums.
 *
 * Either way a sum is a set of partial sums added pairwise at the end, no less accurate
 * than one running sum.
 */
#ifndef ST_REDUCE_SIMD_H
#define ST_REDUCE_SIMD_H

#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__)) && !defined(ST_NO_SIMD)
#define ST_REDUCE_SIMD 1

#define ST_DEFINE_RUN_SUM(NAME, T, IT, W, IOTA)                                               \
typedef T st_vec_##NAME __attribute__((vector_size(64)));                                    \
typedef IT st_ivec_##NAME __attribute__((vector_size(64)));                                  \
static inline st_vec_##NAME st_chunk_##NAME(const T *x, int64_t i, int64_t hi) {             \
    const st_ivec_##NAME iota = IOTA;                                                        \
    st_vec_##NAME v;                                                                         \
    IT rem = (IT)(hi - i < W ? hi - i : W);                                                  \
    memcpy(&v, x + i, sizeof v);                                                             \
    return (st_vec_##NAME)((st_ivec_##NAME)v & (st_ivec_##NAME)(iota < rem));                \
}                                                                                            \
static inline T st_sum_##NAME(const T *x, int64_t lo, int64_t hi, int64_t n, int wide) {     \
    st_vec_##NAME a = {0}, b = {0};                                                          \
    T lanes[W], tail = 0;                                                                    \
    int64_t i = lo;                                                                          \
    if (wide) {                                                                              \
        for (; i < hi && i + 2 * W <= n; i += 2 * W) {                                       \
            a += st_chunk_##NAME(x, i, hi);                                                  \
            b += st_chunk_##NAME(x, i + W, hi);                                              \
        }                                                                                    \
        a += b;                                                                              \
    } else {                                                                                 \
        for (; i < hi && i + W <= n; i += W)                                                 \
            a += st_chunk_##NAME(x, i, hi);                                                  \
    }                                                                                        \
    for (; i < hi; i++)                                                                      \
        tail += x[i];                                                                        \
    memcpy(lanes, &a, sizeof lanes);                                                         \
    for (int h = W / 2; h >= 1; h /= 2)                                                      \
        for (int k = 0; k < h; k++)                                                          \
            lanes[k] += lanes[k + h];                                                        \
    return lanes[0] + tail;                                                                  \
}

ST_DEFINE_RUN_SUM(f64, double, int64_t, 8, ((st_ivec_f64){0, 1, 2, 3, 4, 5, 6, 7}))
ST_DEFINE_RUN_SUM(f32, float, int32_t, 16, ((st_ivec_f32){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}))
ST_DEFINE_RUN_SUM(i64, int64_t, int64_t, 8, ((st_ivec_i64){0, 1, 2, 3, 4, 5, 6, 7}))

#else
#define ST_REDUCE_SIMD 0

#define ST_DEFINE_RUN_SUM(NAME, T)                                                           \
static inline T st_sum_##NAME(const T *x, int64_t lo, int64_t hi, int64_t n, int wide) {     \
    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                        \
    int64_t i = lo;                                                                          \
    (void)n;                                                                                 \
    (void)wide;                                                                              \
    for (; i + 4 <= hi; i += 4) {                                                            \
        s0 += x[i];                                                                          \
        s1 += x[i + 1];                                                                      \
        s2 += x[i + 2];                                                                      \
        s3 += x[i + 3];                                                                      \
    }                                                                                        \
    for (; i < hi; i++)                                                                      \
        s0 += x[i];                                                                          \
    return (s0 + s1) + (s2 + s3);                                                            \
}

ST_DEFINE_RUN_SUM(f64, double)
ST_DEFINE_RUN_SUM(f32, float)
ST_DEFINE_RUN_SUM(i64, int64_t)

#endif

#endif
