// Shared definitions of the sparsetensor CUDA kernels.
//
// The kernels include no system or toolkit header: NVRTC compiles them as they
// are, with only this file (and the other .cuh files of kernels/) passed as
// headers. float16 is a 16-bit struct converted with PTX `cvt`; complex values
// are structs of two reals with the alignment NumPy uses.
//
// Conventions, checked by sparsetensor/cuda/_source.py when it reads a .cu file:
// - every kernel is preceded by a line `// st:kernel CLASS ...` naming the type
//   class of each template parameter (index, value, arith, num, real, field, raw, ztest; nothing
//   for a plain kernel); the Python side instantiates every combination;
// - kernel parameters are pointers, i64, u64, int or double, so that the Python
//   launcher can pack them from the declaration alone.
#pragma once

namespace st {

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;

// -- value types ---------------------------------------------------------------------------

struct __align__(2) half_t { unsigned short bits; };
struct __align__(8) cfloat { float re, im; };
struct __align__(16) cdouble { double re, im; };
struct __align__(16) u128 { u64 lo, hi; };

#ifndef ST_HOST_EMULATION
__device__ __forceinline__ float half_to_float(half_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}

__device__ __forceinline__ half_t float_to_half(float f) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}
#else  // the CPU emulator of the tests (sparsetensor/cuda/_emulator.py) converts in software
__device__ __forceinline__ float half_to_float(half_t h) { return st_emu_half_to_float(h.bits); }
__device__ __forceinline__ half_t float_to_half(float f) { return {st_emu_float_to_half(f)}; }
#endif

// A read of a word that other threads of the same launch may change with an atomic: a relaxed
// atomic load (a volatile load in PTX), so that the read is not a data race, and the compiler
// neither caches nor splits it.
template <typename T> __device__ __forceinline__ T relaxed_load(const T* p) {
#ifndef ST_HOST_EMULATION
    return *(const volatile T*)p;
#else
    return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

// A store of a flag that other threads of the same launch may store too (each the same value):
// a relaxed atomic store (a volatile store in PTX), so that the stores are not a data race.
template <typename T> __device__ __forceinline__ void relaxed_store(T* p, T v) {
#ifndef ST_HOST_EMULATION
    *(volatile T*)p = v;
#else
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

// Products that are never fused with the add after them (NVRTC contracts a * b - c * d into an
// FMA): the CPU rounds each product, and a fused one turns its inf - inf (NaN) into an infinity,
// e.g. (1e300 + 1e300i) ** 2.
#ifndef ST_HOST_EMULATION
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
#else
template <typename T> __device__ __forceinline__ T mul_rn(T a, T b) { return a * b; }
#endif

__device__ __forceinline__ cfloat operator+(cfloat a, cfloat b) { return {a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ cfloat operator-(cfloat a, cfloat b) { return {a.re - b.re, a.im - b.im}; }
__device__ __forceinline__ cfloat operator*(cfloat a, cfloat b) {
    return {mul_rn(a.re, b.re) - mul_rn(a.im, b.im), mul_rn(a.re, b.im) + mul_rn(a.im, b.re)};
}
__device__ __forceinline__ cdouble operator+(cdouble a, cdouble b) { return {a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ cdouble operator-(cdouble a, cdouble b) { return {a.re - b.re, a.im - b.im}; }
__device__ __forceinline__ cdouble operator*(cdouble a, cdouble b) {
    return {mul_rn(a.re, b.re) - mul_rn(a.im, b.im), mul_rn(a.re, b.im) + mul_rn(a.im, b.re)};
}

// Arithmetic happens in acc<T>::type: float16 in float32, the others in themselves.
template <typename T> struct acc { typedef T type; };
template <> struct acc<half_t> { typedef float type; };
// integers (of the "num" and "arith" classes) are read as i64 and written back with a plain
// conversion: sums and products wrap as NumPy's do (the bits of a modular result do not depend on
// the width it was computed in)
template <> struct acc<signed char> { typedef i64 type; };
template <> struct acc<short> { typedef i64 type; };
template <> struct acc<int> { typedef i64 type; };
template <> struct acc<unsigned char> { typedef i64 type; };

__device__ __forceinline__ float to_acc(half_t x) { return half_to_float(x); }
__device__ __forceinline__ i64 to_acc(signed char x) { return x; }
__device__ __forceinline__ i64 to_acc(short x) { return x; }
__device__ __forceinline__ i64 to_acc(int x) { return x; }
__device__ __forceinline__ i64 to_acc(long long x) { return x; }
__device__ __forceinline__ i64 to_acc(unsigned char x) { return x; }
__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ cfloat to_acc(cfloat x) { return x; }
__device__ __forceinline__ cdouble to_acc(cdouble x) { return x; }

template <typename T> __device__ __forceinline__ T from_acc(typename acc<T>::type a) { return (T)a; }
template <> __device__ __forceinline__ half_t from_acc<half_t>(float a) { return float_to_half(a); }

// Zero of an accumulator type, and a scalar given as (re, im) doubles.
template <typename A> __device__ __forceinline__ A acc_zero() { return A(0); }
template <> __device__ __forceinline__ cfloat acc_zero<cfloat>() { return {0.0f, 0.0f}; }
template <> __device__ __forceinline__ cdouble acc_zero<cdouble>() { return {0.0, 0.0}; }

template <typename A> __device__ __forceinline__ A acc_scalar(double re, double im) { return A(re); }
template <> __device__ __forceinline__ cfloat acc_scalar<cfloat>(double re, double im) {
    return {(float)re, (float)im};
}
template <> __device__ __forceinline__ cdouble acc_scalar<cdouble>(double re, double im) { return {re, im}; }

// Warp shuffles of accumulators (complex: both parts).
__device__ __forceinline__ float shfl_down(float v, int delta, int width) {
    return __shfl_down_sync(0xffffffffu, v, delta, width);
}
__device__ __forceinline__ double shfl_down(double v, int delta, int width) {
    return __shfl_down_sync(0xffffffffu, v, delta, width);
}
__device__ __forceinline__ i64 shfl_down(i64 v, int delta, int width) {
    return __shfl_down_sync(0xffffffffu, v, delta, width);
}
__device__ __forceinline__ cfloat shfl_down(cfloat v, int delta, int width) {
    return {__shfl_down_sync(0xffffffffu, v.re, delta, width), __shfl_down_sync(0xffffffffu, v.im, delta, width)};
}
__device__ __forceinline__ cdouble shfl_down(cdouble v, int delta, int width) {
    return {__shfl_down_sync(0xffffffffu, v.re, delta, width), __shfl_down_sync(0xffffffffu, v.im, delta, width)};
}
template <typename T> __device__ __forceinline__ T shfl_idx(T v, int lane) {
    return __shfl_sync(0xffffffffu, v, lane);
}
template <> __device__ __forceinline__ cfloat shfl_idx<cfloat>(cfloat v, int lane) {
    return {__shfl_sync(0xffffffffu, v.re, lane), __shfl_sync(0xffffffffu, v.im, lane)};
}
template <> __device__ __forceinline__ cdouble shfl_idx<cdouble>(cdouble v, int lane) {
    return {__shfl_sync(0xffffffffu, v.re, lane), __shfl_sync(0xffffffffu, v.im, lane)};
}

// -- indexing ------------------------------------------------------------------------------

// for (i64 i = first; i < n; i += stride): every thread of the grid, 64-bit throughout.
#define ST_GRID_LOOP(i, n)                                                                  \
    for (::st::i64 i = (::st::i64)blockIdx.x * blockDim.x + threadIdx.x; i < (::st::i64)(n); \
         i += (::st::i64)gridDim.x * blockDim.x)

// The grid's threads in groups of `size` (a power of two <= 32) that take items in turn:
// for (i64 base = g.warp_first; base < total; base += g.stride) { i64 item = g.group + (base -
// g.warp_first); ... } runs the same number of times for every group of a warp (warp-uniform
// bounds), so full-warp shuffles inside never diverge; an item >= total takes part idle.
struct ThreadGroups {
    int lane;
    i64 group, warp_first, stride;
};
__device__ __forceinline__ ThreadGroups thread_groups(int size) {
    const i64 gtid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    return {(int)(threadIdx.x % size), gtid / size, (gtid / 32) * (32 / size), (i64)gridDim.x * blockDim.x / size};
}

// The element offset of item u of the row-major sizes shapes[d0..d1), through strides[d0..d1)
// (a stride of 0: a dim broadcast along).
__device__ __forceinline__ i64 item_offset(i64 u, const i64* __restrict__ shapes, const i64* __restrict__ strides,
                                           i64 d0, i64 d1) {
    i64 off = 0;
    for (i64 d = d1 - 1; d >= d0; --d) {
        off += (u % shapes[d]) * strides[d];
        u /= shapes[d];
    }
    return off;
}

// The row-major position of COO entry k (column k of idx, S rows of nnz) over dims[0..S); the
// indices are in bounds (checked by the caller).
template <typename I>
__device__ __forceinline__ i64 coo_linear(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ dims,
                                          i64 k) {
    i64 lin = 0;
    for (i64 d = 0; d < S; ++d) lin = lin * dims[d] + (i64)idx[d * nnz + k];
    return lin;
}

// The largest r in [0, n) with a[r] <= k, for a sorted a[0..n] with a[0] <= k < a[n]:
// the row (major slot) that holds position k of a compressed index.
template <typename I>
__device__ __forceinline__ i64 slot_of(const I* __restrict__ a, i64 n, i64 k) {
    i64 lo = 0, hi = n;  // invariant: a[lo] <= k < a[hi]
    while (hi - lo > 1) {
        i64 mid = lo + (hi - lo) / 2;
        if ((i64)a[mid] <= k) lo = mid; else hi = mid;
    }
    return lo;
}

// The first j in [0, n] with a[j] >= target (a sorted).
template <typename K>
__device__ __forceinline__ i64 lower_bound(const K* __restrict__ a, i64 n, K target) {
    i64 lo = 0, hi = n;
    while (lo < hi) {
        i64 mid = lo + (hi - lo) / 2;
        if (a[mid] < target) lo = mid + 1; else hi = mid;
    }
    return lo;
}

}  // namespace st
