// Pointwise operations on values: unary functions, scalar arithmetic, casts.
// Operation codes match sparsetensor/cuda/pointwise.py.
#include "common.cuh"
#include "complex.cuh"
#include "special.cuh"

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
#define OP_ERF 24
#define OP_ERFINV 25

// predicate codes (predicate_real, predicate_complex, predicate_int): a bool of each value
#define PRED_ISNAN 0
#define PRED_ISINF 1
#define PRED_ISPOSINF 2
#define PRED_ISNEGINF 3
#define PRED_SIGNBIT 4

// scalar operation codes
#define SOP_MUL 0
#define SOP_DIV 1
#define SOP_POW 2
#define SOP_ROUND 3       // rint(x * s) / s: np.round to decimals >= 0, s = 10 ** decimals
#define SOP_ROUND_DOWN 4  // rint(x / s) * s: decimals < 0, s = 10 ** -decimals
#define SOP_SQRT_POW 5    // pow, by sqrt where s is 0.5: NumPy's float32/float64 power (sqrt(-0) is -0, sqrt(-inf) NaN)

// comparison codes (compare_num, compare_int): value OP scalar
#define CMP_LT 0
#define CMP_LE 1
#define CMP_GT 2
#define CMP_GE 3

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
        case OP_ERF: return special_erf(x);
        case OP_ERFINV: return special_erfinv(x);
        default: return x;
    }
}

// float16, float32, float64.
// st:kernel float
template <typename V>
__global__ void unary_real(const V* __restrict__ in, V* __restrict__ out, i64 n, int op) {
    ST_GRID_LOOP(i, n) { out[i] = from_acc<V>(real_unary(to_acc(in[i]), op)); }
}

__device__ cdouble complex_unary(cdouble z, int op) {
    const double a = z.re, b = z.im;
    switch (op) {
        case OP_NEG: return {-a, -b};
        case OP_SQUARE: return z * z;
        case OP_CONJ: return {a, -b};
        case OP_SQRT: return c_sqrt(z);
        // sin z = -i sinh iz, asin z = -i asinh iz (C99 G.6), but with glibc's +inf imaginary
        // parts (as NumPy's) where G.6 leaves their sign unspecified
        case OP_SIN:
            if (!isfinite(a) && isinf(b)) return {a - a, fabs(b)};  // a - a: NaN
            return cmul_negi(c_sinh(cmul_i(z)));
        case OP_SINH: return c_sinh(z);
        case OP_TANH: return c_tanh(z);
        case OP_TAN: return cmul_negi(c_tanh(cmul_i(z)));
        case OP_ASINH: return c_asinh(z);
        case OP_ASIN:
            if (isinf(a) && isnan(b)) return {b, fabs(a)};
            return cmul_negi(c_asinh(cmul_i(z)));
        case OP_ATANH: return c_atanh(z);
        case OP_ATAN:
            // atanh(i z) would take its real zero's sign from the negated NaN of i z, and a GPU's
            // negation leaves a NaN's sign unspecified: the CPU's result, from b's own sign bit
            if (isinf(a) && isnan(b)) return {copysign(ST_PI_2, a), copysign(0.0, b)};
            return cmul_negi(c_atanh(cmul_i(z)));
        case OP_LOG1P: return c_log1p(z);
        case OP_EXPM1: {
            const double h = sin(0.5 * b);
            return {expm1(a) * cos(b) - 2.0 * h * h, exp(a) * sin(b)};
        }
        case OP_RINT: return {rint(a), rint(b)};
        case OP_ERF: return c_erf(a, b);
        case OP_SIGN: {  // sgn: z / |z|, 0 at 0; NumPy's limits where |z| is infinite
            const double m = hypot(a, b);
            if (m != m) return {m, m};
            if (isinf(m)) {
                if (isinf(a)) return isinf(b) ? cdouble{m - m, m - m} : cdouble{copysign(1.0, a), 0.0};  // m - m: NaN
                return {0.0, copysign(1.0, b)};
            }
            return m == 0.0 ? cdouble{0.0, 0.0} : cdouble{a / m, b / m};
        }
        default: return z;
    }
}

// complex64, complex128: the functions of complex_unary (the others are refused on the host).
// st:kernel complex
template <typename C>
__global__ void unary_complex(const C* __restrict__ in, C* __restrict__ out, i64 n, int op) {
    ST_GRID_LOOP(i, n) {
        const cdouble y = complex_unary({(double)in[i].re, (double)in[i].im}, op);
        C o;
        o.re = y.re;
        o.im = y.im;
        out[i] = o;
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
    if (op == SOP_ROUND) return rint(x * s) / s;
    if (op == SOP_ROUND_DOWN) return rint(x / s) * s;
    if (op == SOP_SQRT_POW && s == (A)0.5) return sqrt(x);
    return pow(x, s);
}
__device__ __forceinline__ cfloat scalar_apply(cfloat x, cfloat s, int op) {
    if (op == SOP_MUL) return x * s;
    if (op == SOP_ROUND || op == SOP_ROUND_DOWN) return {scalar_apply(x.re, s.re, op), scalar_apply(x.im, s.re, op)};
    if (op == SOP_POW) {
        const cdouble y = complex_pow({(double)x.re, (double)x.im}, (double)s.re);
        return {(float)y.re, (float)y.im};
    }
    return c_div_scaled(x, s);
}
__device__ __forceinline__ cdouble scalar_apply(cdouble x, cdouble s, int op) {
    if (op == SOP_MUL) return x * s;
    if (op == SOP_ROUND || op == SOP_ROUND_DOWN) return {scalar_apply(x.re, s.re, op), scalar_apply(x.im, s.re, op)};
    if (op == SOP_POW) return complex_pow(x, s.re);
    return c_div_scaled(x, s);
}

// How NumPy raises values of V (computed in A) to a scalar power: float32 and float64 by sqrt
// where it is 0.5; float16 and complex values by pow.
template <typename A>
__device__ __forceinline__ int power_op(A, bool half) { return half ? SOP_POW : SOP_SQRT_POW; }
__device__ __forceinline__ int power_op(cfloat, bool) { return SOP_POW; }
__device__ __forceinline__ int power_op(cdouble, bool) { return SOP_POW; }

// out = in * s, in / s, in ** s (s real), or in rounded at the factor s (SOP_ROUND*) for the
// scalar s = re + i im.
// st:kernel value
template <typename V>
__global__ void scalar_op(const V* __restrict__ in, V* __restrict__ out, i64 n, int op, double re, double im) {
    typedef typename acc<V>::type A;
    const A s = acc_scalar<A>(re, im);
    if (op == SOP_POW) op = power_op(s, sizeof(V) == 2);
    ST_GRID_LOOP(i, n) { out[i] = from_acc<V>(scalar_apply(to_acc(in[i]), s, op)); }
}

// isnan, isinf, isposinf, isneginf, signbit of float16/32/64 values into bools (uint8 0 or 1).
// st:kernel float
template <typename V>
__global__ void predicate_real(const V* __restrict__ in, unsigned char* __restrict__ out, i64 n, int op) {
    ST_GRID_LOOP(i, n) {
        const auto x = to_acc(in[i]);
        bool y;
        switch (op) {
            case PRED_ISNAN: y = x != x; break;
            case PRED_ISINF: y = isinf(x); break;
            case PRED_ISPOSINF: y = isinf(x) && x > 0; break;
            case PRED_ISNEGINF: y = isinf(x) && x < 0; break;
            default: y = signbit(x); break;
        }
        out[i] = y;
    }
}

// isnan and isinf of complex values (either part), into bools.
// st:kernel complex
template <typename C>
__global__ void predicate_complex(const C* __restrict__ in, unsigned char* __restrict__ out, i64 n, int op) {
    ST_GRID_LOOP(i, n) {
        const double a = in[i].re, b = in[i].im;
        out[i] = op == PRED_ISNAN ? (a != a || b != b) : (isinf(a) || isinf(b));
    }
}

template <typename T>
__device__ __forceinline__ bool ordered(T x, T s, int op) {
    switch (op) {
        case CMP_LT: return x < s;
        case CMP_LE: return x <= s;
        case CMP_GT: return x > s;
        default: return x >= s;
    }
}

// Values compared with a scalar in double, into bools. The host rounds the scalar to NumPy's loop
// dtype first, so float16/32 values and a Python float compare as in their own type (every such
// value and scalar is a double exactly); integer values compare so with a float scalar (NumPy's float64).
// st:kernel num
template <typename V>
__global__ void compare_num(const V* __restrict__ in, unsigned char* __restrict__ out, i64 n, int op, double s) {
    ST_GRID_LOOP(i, n) { out[i] = ordered((double)to_acc(in[i]), s, op); }
}

// Integer (and bool, as uint8) values compared with an integer scalar exactly, into bools.
// st:kernel integer
template <typename V>
__global__ void compare_int(const V* __restrict__ in, unsigned char* __restrict__ out, i64 n, int op, i64 s) {
    ST_GRID_LOOP(i, n) { out[i] = ordered((i64)in[i], s, op); }
}

// signbit of integer values (the other predicates are false for integers), into bools.
// st:kernel integer
template <typename V>
__global__ void signbit_int(const V* __restrict__ in, unsigned char* __restrict__ out, i64 n) {
    ST_GRID_LOOP(i, n) { out[i] = (i64)in[i] < 0; }
}

// NumPy's nan_to_num of float16/32/64 values: NaN -> nan, +inf -> posinf, -inf -> neginf.
// st:kernel float
template <typename V>
__global__ void nan_to_num_real(const V* __restrict__ in, V* __restrict__ out, i64 n, double nan, double posinf,
                                double neginf) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(i, n) {
        const A x = to_acc(in[i]);
        out[i] = x != x ? from_acc<V>((A)nan) : isinf(x) ? from_acc<V>((A)(x > 0 ? posinf : neginf)) : in[i];
    }
}

// The same for each part of complex values.
// st:kernel complex
template <typename C>
__global__ void nan_to_num_complex(const C* __restrict__ in, C* __restrict__ out, i64 n, double nan, double posinf,
                                   double neginf) {
    ST_GRID_LOOP(i, n) {
        C y = in[i];
        y.re = y.re != y.re ? nan : isinf(y.re) ? (y.re > 0 ? posinf : neginf) : y.re;
        y.im = y.im != y.im ? nan : isinf(y.im) ? (y.im > 0 ? posinf : neginf) : y.im;
        out[i] = y;
    }
}

// The functions with integer results of integer values (bool as uint8: 0 and 1 map to
// themselves): neg, abs, square, sign, relu; floor, ceil, trunc and rint copy. 64-bit unsigned
// arithmetic written back with a plain conversion wraps as NumPy's does (abs of int8 -128 is -128).
// st:kernel integer
template <typename V>
__global__ void unary_int(const V* __restrict__ in, V* __restrict__ out, i64 n, int op) {
    ST_GRID_LOOP(i, n) {
        const i64 x = (i64)in[i];
        u64 y = (u64)x;
        if (op == OP_NEG) y = 0 - y;
        else if (op == OP_ABS) y = x < 0 ? 0 - y : y;
        else if (op == OP_SQUARE) y = y * y;
        else if (op == OP_SIGN) y = (u64)(i64)((x > 0) - (x < 0));
        else if (op == OP_RELU) y = x > 0 ? y : 0;
        out[i] = (V)(i64)y;
    }
}

// out = in * s, or in ** s (s >= 0, by squaring), for integer values and an integer s, wrapping.
// st:kernel integer
template <typename V>
__global__ void scalar_int(const V* __restrict__ in, V* __restrict__ out, i64 n, int op, i64 s) {
    ST_GRID_LOOP(i, n) {
        const u64 x = (u64)(i64)in[i];
        u64 y;
        if (op == SOP_MUL) {
            y = x * (u64)s;
        } else {
            y = 1;
            u64 base = x;
            for (u64 e = (u64)s; e; e >>= 1) {
                if (e & 1) y *= base;
                base *= base;
            }
        }
        out[i] = (V)(i64)y;
    }
}

// NumPy's float -> integer conversion as x86-64 computes it (its C casts, cvttsd2si): truncation;
// for int64 INT64_MIN where the value is out of range or NaN; the narrower integers convert
// through an int32 (INT32_MIN out of range) and then wrap. A GPU's own conversion saturates.
template <typename T> struct int_value { static const bool yes = false; };
template <> struct int_value<signed char> { static const bool yes = true; };
template <> struct int_value<short> { static const bool yes = true; };
template <> struct int_value<int> { static const bool yes = true; };
template <> struct int_value<long long> { static const bool yes = true; };
template <> struct int_value<unsigned char> { static const bool yes = true; };

template <typename W>
__device__ __forceinline__ W numpy_int(double d) {
    if constexpr (sizeof(W) == 8) {
        return (W)(d >= -9223372036854775808.0 && d < 9223372036854775808.0 ? (i64)d : (i64)(-9223372036854775807LL - 1));
    } else {
        return (W)(d > -2147483649.0 && d < 2147483648.0 ? (int)d : (int)(-2147483647 - 1));
    }
}

// np.round of integers to decimals < 0, as NumPy computes it: rint(x / f) * f in double, f =
// 10 ** -decimals (so large int64 values round through a double, as there), converted back as
// NumPy converts (a rounding past the type's range gives its minimum, as on the CPU).
// st:kernel integer
template <typename V>
__global__ void round_int(const V* __restrict__ in, V* __restrict__ out, i64 n, double f) {
    ST_GRID_LOOP(i, n) { out[i] = numpy_int<V>(rint((double)in[i] / f) * f); }
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
// Float -> int conversions are NumPy's on x86-64 (numpy_int), out-of-range values and NaN too.
// st:kernel num num
template <typename V, typename W>
__global__ void cast_value(const V* __restrict__ in, W* __restrict__ out, i64 n, int to_bool) {
    typedef typename acc<W>::type B;
    ST_GRID_LOOP(i, n) {
        const auto x = to_acc(in[i]);
        if constexpr (int_value<W>::yes && !int_value<typename acc<V>::type>::yes) {
            out[i] = to_bool ? (W)(x != 0) : numpy_int<W>((double)x);
        } else {
            out[i] = to_bool ? from_acc<W>((B)(x != 0)) : from_acc<W>((B)x);
        }
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
