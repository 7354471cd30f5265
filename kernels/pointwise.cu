// Pointwise operations on values: unary functions, scalar arithmetic, casts.
// Operation codes match sparsetensor/cuda/pointwise.py.
#include "common.cuh"

// unary operation codes
#define OP_NEG 0
#define OP_ABS 1
#define OP_SQRT 2
#define OP_SQUARE 3
#define OP_SIN 4
#define OP_TAN 5
#define OP_TANH 6
#define OP_ASIN 7
#define OP_ATAN 8
#define OP_SINH 9
#define OP_ASINH 10
#define OP_ATANH 11
#define OP_EXPM1 12
#define OP_LOG1P 13
#define OP_SIGN 14
#define OP_FLOOR 15
#define OP_CEIL 16
#define OP_TRUNC 17
#define OP_RINT 18
#define OP_RELU 19
#define OP_FRAC 20
#define OP_DEG2RAD 21
#define OP_RAD2DEG 22
#define OP_CONJ 23

// scalar operation codes
#define SOP_MUL 0
#define SOP_DIV 1
#define SOP_POW 2

namespace st {

template <typename A>
__device__ __forceinline__ A real_unary(A x, int op) {
    switch (op) {
        case OP_NEG: return -x;
        case OP_ABS: return fabs(x);
        case OP_SQRT: return sqrt(x);
        case OP_SQUARE: return x * x;
        case OP_SIN: return sin(x);
        case OP_TAN: return tan(x);
        case OP_TANH: return tanh(x);
        case OP_ASIN: return asin(x);
        case OP_ATAN: return atan(x);
        case OP_SINH: return sinh(x);
        case OP_ASINH: return asinh(x);
        case OP_ATANH: return atanh(x);
        case OP_EXPM1: return expm1(x);
        case OP_LOG1P: return log1p(x);
        case OP_SIGN: return x != x ? x : (A)((x > (A)0) - (x < (A)0));
        case OP_FLOOR: return floor(x);
        case OP_CEIL: return ceil(x);
        case OP_TRUNC: return trunc(x);
        case OP_RINT: return rint(x);
        case OP_RELU: return x > (A)0 || x != x ? x : (A)0;
        case OP_FRAC: return x - trunc(x);
        case OP_DEG2RAD: return x * (A)(3.14159265358979323846 / 180.0);
        case OP_RAD2DEG: return x * (A)(180.0 / 3.14159265358979323846);
        case OP_CONJ: return x;
        default: return x;
    }
}

// float16, float32, float64.
// st:kernel float
template <typename V>
__global__ void unary_real(const V* __restrict__ in, V* __restrict__ out, i64 n, int op) {
    ST_GRID_LOOP(i, n) { out[i] = from_acc<V>(real_unary(to_acc(in[i]), op)); }
}

// complex64, complex128: neg, square, conj (the others are refused on the host).
// st:kernel complex
template <typename C>
__global__ void unary_complex(const C* __restrict__ in, C* __restrict__ out, i64 n, int op) {
    ST_GRID_LOOP(i, n) {
        const C x = in[i];
        C y = x;
        if (op == OP_NEG) { y.re = -x.re; y.im = -x.im; }
        else if (op == OP_SQUARE) y = x * x;
        else if (op == OP_CONJ) y.im = -x.im;
        out[i] = y;
    }
}

// |x| of complex64 / complex128 into float32 / float64.
// st:kernel real
template <typename A>
__global__ void complex_abs(const A* __restrict__ in, A* __restrict__ out, i64 n) {
    ST_GRID_LOOP(i, n) { out[i] = hypot(in[2 * i], in[2 * i + 1]); }
}

// The real (part 0) or imaginary (part 1) parts of complex64 / complex128 into float32 / float64.
// st:kernel real
template <typename A>
__global__ void complex_part(const A* __restrict__ in, A* __restrict__ out, i64 n, int part) {
    ST_GRID_LOOP(i, n) { out[i] = in[2 * i + part]; }
}

template <typename A>
__device__ __forceinline__ A scalar_apply(A x, A s, int op) {
    if (op == SOP_MUL) return x * s;
    if (op == SOP_DIV) return x / s;
    return pow(x, s);
}
__device__ __forceinline__ cfloat scalar_apply(cfloat x, cfloat s, int op) {
    if (op == SOP_MUL) return x * s;
    if (s.im == 0.0f) return {x.re / s.re, x.im / s.re};
    const float d = s.re * s.re + s.im * s.im;
    return {(x.re * s.re + x.im * s.im) / d, (x.im * s.re - x.re * s.im) / d};
}
__device__ __forceinline__ cdouble scalar_apply(cdouble x, cdouble s, int op) {
    if (op == SOP_MUL) return x * s;
    if (s.im == 0.0) return {x.re / s.re, x.im / s.re};
    const double d = s.re * s.re + s.im * s.im;
    return {(x.re * s.re + x.im * s.im) / d, (x.im * s.re - x.re * s.im) / d};
}

// out = in * s, in / s, or in ** s (reals only) for the scalar s = re + i im.
// st:kernel value
template <typename V>
__global__ void scalar_op(const V* __restrict__ in, V* __restrict__ out, i64 n, int op, double re, double im) {
    typedef typename acc<V>::type A;
    const A s = acc_scalar<A>(re, im);
    ST_GRID_LOOP(i, n) { out[i] = from_acc<V>(scalar_apply(to_acc(in[i]), s, op)); }
}

// st:kernel index index
template <typename I, typename J>
__global__ void cast_index(const I* __restrict__ in, J* __restrict__ out, i64 n) {
    ST_GRID_LOOP(i, n) { out[i] = (J)in[i]; }
}

// st:kernel
__global__ void cast_half_float(const half_t* __restrict__ in, float* __restrict__ out, i64 n) {
    ST_GRID_LOOP(i, n) { out[i] = to_acc(in[i]); }
}

// st:kernel
__global__ void cast_float_half(const float* __restrict__ in, half_t* __restrict__ out, i64 n) {
    ST_GRID_LOOP(i, n) { out[i] = from_acc<half_t>(in[i]); }
}

// Value casts (NumPy's astype): between the ordered dtypes (to_bool: out = x != 0, a bool being
// a uint8 of 0 or 1), from them to complex (imaginary part 0), and between the complex dtypes.
// Out-of-range float -> int conversions are the GPU's (NumPy's result there is unspecified too).
// st:kernel num num
template <typename V, typename W>
__global__ void cast_value(const V* __restrict__ in, W* __restrict__ out, i64 n, int to_bool) {
    typedef typename acc<W>::type B;
    ST_GRID_LOOP(i, n) {
        const auto x = to_acc(in[i]);
        out[i] = to_bool ? from_acc<W>((B)(x != 0)) : from_acc<W>((B)x);
    }
}

// st:kernel num complex
template <typename V, typename C>
__global__ void cast_real_complex(const V* __restrict__ in, C* __restrict__ out, i64 n) {
    ST_GRID_LOOP(i, n) {
        C y;
        y.re = to_acc(in[i]);
        y.im = 0;
        out[i] = y;
    }
}

// st:kernel complex complex
template <typename C, typename D>
__global__ void cast_complex(const C* __restrict__ in, D* __restrict__ out, i64 n) {
    ST_GRID_LOOP(i, n) {
        D y;
        y.re = in[i].re;
        y.im = in[i].im;
        out[i] = y;
    }
}

}  // namespace st
