// Functions of complex values in double precision (complex64 callers round once at the end),
// shared by pointwise.cu (the functions) and autograd.cu (their derivatives). The branch cuts
// and signed zeros are C99's (NumPy's npy_c* functions follow them); the formulas avoid the
// cancellations of the textbook ones near 0 (log1p, expm1, atanh).
#pragma once
#include "common.cuh"

namespace st {

__device__ __forceinline__ cdouble c_div(cdouble a, cdouble b) {
    const double d = b.re * b.re + b.im * b.im;
    return {(a.re * b.re + a.im * b.im) / d, (a.im * b.re - a.re * b.im) / d};
}

__device__ __forceinline__ cdouble cmul_i(cdouble z) { return {-z.im, z.re}; }       // i z
__device__ __forceinline__ cdouble cmul_negi(cdouble z) { return {z.im, -z.re}; }    // -i z

// +inf and a quiet NaN without <cmath>'s macros (NVRTC has none).
__device__ __forceinline__ double c_inf() { return 1.0 / 0.0; }
__device__ __forceinline__ double c_nan() { return c_inf() - c_inf(); }

#define ST_PI_2 1.5707963267948966192
#define ST_LN2 0.69314718055994530942
// Above this a part's square overflows: the functions switch to their asymptotic forms.
#define ST_C_LARGE 1e150

// e^x c without the 0 * inf = NaN of an overflowing e^x (a zero c stays a zero of its sign, as
// in glibc's cexp, which NumPy calls), nor a spurious overflow where e^x c is finite.
__device__ __forceinline__ double exp_times(double x, double c) {
    if (c == 0.0) return c;
    if (x < 700.0) return exp(x) * c;
    const double h = exp(0.5 * x);
    return h * c * h;
}

// The special values below are C99 Annex G's (G.6), with the signs glibc picks where G.6 leaves
// them unspecified: NumPy's complex functions are glibc's on Linux.

__device__ __forceinline__ cdouble c_sqrt(cdouble z) {
    double a = z.re, b = z.im;
    if (a == 0.0 && b == 0.0) return {0.0, b};
    if (isinf(b)) return {fabs(b), b};  // +inf + i b, even for a NaN a
    // (|a| + |z|) / 2 overflows for parts near DBL_MAX: sqrt(z) = 2 sqrt(z / 4)
    const double k = fabs(a) > 7e307 || fabs(b) > 7e307 ? 2.0 : 1.0;
    if (k != 1.0) { a *= 0.25; b *= 0.25; }
    const double t = sqrt((fabs(a) + hypot(a, b)) * 0.5);
    if (a >= 0.0) return {k * t, k * (b / (2.0 * t))};
    return {k * (fabs(b) / (2.0 * t)), k * copysign(t, b)};
}

// NumPy's log1p(z) is log(|1 + z|) + i arg(1 + z); the real part here avoids its cancellation
// near 0 where 1 + z cannot overflow, and is NumPy's formula (with its specials) elsewhere.
__device__ __forceinline__ cdouble c_log1p(cdouble z) {
    const double a = z.re, b = z.im;
    if (!(fabs(a) < ST_C_LARGE && fabs(b) < ST_C_LARGE)) return {log(hypot(1.0 + a, b)), atan2(b, 1.0 + a)};
    return {0.5 * log1p(a * (2.0 + a) + b * b), atan2(b, 1.0 + a)};
}

// sinh(x + iy) = sinh x cos y + i cosh x sin y
__device__ __forceinline__ cdouble c_sinh(cdouble z) {
    const double x = z.re, y = z.im;
    if (isfinite(x) && isfinite(y)) {
        if (y == 0.0) return {sinh(x), y};
        if (fabs(x) < 700.0) return {sinh(x) * cos(y), cosh(x) * sin(y)};
        // e^|x| / 2 overflows before its products with cos y, sin y may
        return {copysign(1.0, x) * exp_times(fabs(x), 0.5 * cos(y)), exp_times(fabs(x), 0.5 * sin(y))};
    }
    if (isnan(x)) return {x, y == 0.0 ? y : c_nan()};
    if (isinf(x)) {
        if (y == 0.0) return {x, y};
        if (isfinite(y)) return {x * cos(y), fabs(x) * sin(y)};
        return {fabs(x), c_nan()};
    }
    return {x == 0.0 ? x : c_nan(), c_nan()};  // x finite, y infinite or NaN
}

__device__ __forceinline__ cdouble c_tanh(cdouble z) {
    const double x = z.re, y = z.im;
    if (isnan(x)) return {x, y == 0.0 ? y : c_nan()};
    if (isinf(x)) return {copysign(1.0, x), copysign(0.0, isfinite(y) ? sin(y) * cos(y) : y)};
    if (!isfinite(y)) return {x == 0.0 ? x : c_nan(), c_nan()};
    if (fabs(x) > 22.0) return {copysign(1.0, x), 4.0 * sin(y) * cos(y) * exp(-2.0 * fabs(x))};
    const double t = tan(y), beta = 1.0 + t * t, s = sinh(x), rho = sqrt(1.0 + s * s);
    const double d = 1.0 + beta * s * s;
    return {beta * rho * s / d, t / d};
}

// x / (x^2 + y^2), the real part of 1 / z, without overflow (0 of x's sign for an infinite z)
__device__ __forceinline__ double c_recip_re(double x, double y) {
    const double m = fmax(fabs(x), fabs(y));
    if (isinf(m)) return copysign(0.0, x);
    const double xs = x / m, ys = y / m;
    return xs / (xs * xs + ys * ys) / m;
}

__device__ __forceinline__ cdouble c_atanh(cdouble z) {
    const double x = z.re, y = z.im, ax = fabs(x);
    if (isnan(x) || isnan(y)) {
        if (isinf(x)) return {copysign(0.0, x), c_nan()};
        if (isinf(y)) return {copysign(0.0, x), copysign(ST_PI_2, y)};
        return {x == 0.0 ? x : c_nan(), c_nan()};
    }
    if (y == 0.0 && ax <= 1.0) return {atanh(x), y};
    if (x == 0.0) return {x, atan(y)};
    // atanh z = 1/z + O(1/z^3) + i pi/2 sign(y): its real part is that of 1/z
    if (ax > ST_C_LARGE || fabs(y) > ST_C_LARGE) return {c_recip_re(x, y), copysign(ST_PI_2, y)};
    const double re = 0.25 * log1p(4.0 * ax / ((1.0 - ax) * (1.0 - ax) + y * y));
    return {copysign(re, x), 0.5 * atan2(2.0 * y, (1.0 - x) * (1.0 + x) - y * y)};
}

__device__ __forceinline__ cdouble c_asinh(cdouble z) {
    const double x = z.re, y = z.im, ax = fabs(x), ay = fabs(y);
    if (isnan(x) || isnan(y)) {
        if (isinf(x)) return {x, y};
        if (isinf(y)) return {ay, x};
        return {c_nan(), y == 0.0 ? y : c_nan()};
    }
    if (y == 0.0) return {asinh(x), y};
    if (x == 0.0) {  // on the imaginary axis, the cut beyond +-i on the side of x's sign
        if (ay <= 1.0) return {x, asin(y)};
        return {copysign(acosh(ay), x), copysign(ST_PI_2, y)};
    }
    // asinh z = log 2z + O(1/z^2), below rounding past 1e8 (and z^2 q below would overflow
    // past 1e100); |2z| = 4 |z / 2| for a finite hypot
    if (ax > 1e8 || ay > 1e8)
        return {copysign(log(hypot(0.5 * x, 0.5 * y)) + 2.0 * ST_LN2, x), copysign(atan2(ay, ax), y)};
    // asinh(z) = log1p(w + w^2 / (1 + sqrt(1 + w^2))) for w = z with Re w >= 0 (odd symmetry)
    const bool flip = x < 0.0;
    const cdouble w = flip ? cdouble{-x, -y} : z;
    const cdouble w2 = w * w;
    const cdouble r = c_sqrt({1.0 + w2.re, w2.im});
    const cdouble d = {1.0 + r.re, r.im};
    const double dd = d.re * d.re + d.im * d.im;
    const cdouble q = {(w2.re * d.re + w2.im * d.im) / dd, (w2.im * d.re - w2.re * d.im) / dd};
    cdouble v = c_log1p({w.re + q.re, w.im + q.im});
    if (flip) { v.re = -v.re; v.im = -v.im; }
    return v;
}

// exp(w) with G.6's special values (glibc's cexp: a zero part stays zero on overflow)
__device__ __forceinline__ cdouble c_exp(cdouble w) {
    const double x = w.re, y = w.im;
    if (isfinite(x)) {
        if (isfinite(y)) return {exp_times(x, cos(y)), exp_times(x, sin(y))};
        return {c_nan(), c_nan()};
    }
    if (isnan(x)) return {x, y == 0.0 ? y : c_nan()};
    if (x > 0.0) {
        if (y == 0.0) return {x, y};
        if (isfinite(y)) return {x * cos(y), x * sin(y)};
        return {x, c_nan()};
    }
    if (isfinite(y)) return {copysign(0.0, cos(y)), copysign(0.0, sin(y))};
    return {0.0, 0.0};
}

// (a + bi) / (c + di) by Smith's scaling, in the values' precision: NumPy's complex division (its
// true_divide loop, and cdiv of negative integer powers). A real divisor too: there (inf + 0i) / 3
// is inf + nan i, and the parts are multiplied by 1 / c, not divided by c.
template <typename C>
__device__ __forceinline__ C c_div_scaled(C a, C b) {
    typedef decltype(a.re) R;
    const R one = 1;
    if (fabs(b.re) >= fabs(b.im)) {
        if (b.re == 0 && b.im == 0) return {a.re / fabs(b.re), a.im / fabs(b.re)};
        const R rat = b.im / b.re, scl = one / (b.re + b.im * rat);
        return {(a.re + a.im * rat) * scl, (a.im - a.re * rat) * scl};
    }
    const R rat = b.re / b.im, scl = one / (b.im + b.re * rat);
    return {(a.re * rat + a.im) * scl, (a.im * rat - a.re) * scl};
}

// z ** s for a real s, as NumPy's npy_cpow: 1 for s = 0; at z = 0, +0 for s > 0 (else NaN);
// products for integer |s| < 100 (z, z z, z (z z) unrolled; repeated squaring, a negative
// power inverted), else exp(s log z) with the operand s + 0i (glibc's cpow: the 0 i decides
// the signs of zeros and makes NaNs of 0 * inf).
__device__ cdouble complex_pow(cdouble z, double s) {
    if (s == 0.0) return {1.0, 0.0};
    if (z.re == 0.0 && z.im == 0.0) return s > 0.0 ? cdouble{0.0, 0.0} : cdouble{c_nan(), c_nan()};
    if (s == floor(s) && fabs(s) < 100.0) {
        if (s == 1.0) return z;
        if (s == 2.0) return z * z;
        if (s == 3.0) return z * (z * z);
        cdouble y = {1.0, 0.0}, base = z;
        for (int e = (int)fabs(s); e; e >>= 1) {
            if (e & 1) y = y * base;
            if (e > 1) base = base * base;
        }
        return s < 0 ? c_div_scaled({1.0, 0.0}, y) : y;
    }
    const double x = z.re, y = z.im;
    if (isfinite(x) && isfinite(y)) {
        // |z|^s (cos t + i sin t), t = s arg z + 0 log|z|
        const double m = hypot(x, y);
        double t = s * atan2(y, x);
        if (t == 0.0) t = signbit(t) && m < 1.0 ? -0.0 : 0.0;
        const double r = isinf(m) ? c_inf() : pow(m, s);
        if (isfinite(r)) {
            const double st = sin(t);
            return {r * cos(t), st == 0.0 ? st : r * st};
        }
        // |z|^s overflows (a product with sin t may not): e^(s log|z|) (cos t + i sin t)
        const double lr = isinf(m) ? log(hypot(0.5 * x, 0.5 * y)) + ST_LN2 : log(m);
        return {exp_times(s * lr, cos(t)), exp_times(s * lr, sin(t))};
    }
    // (s + 0i) (log|z| + i arg z), with G.6's recovery of an infinite product from NaN parts
    const double lr = log(hypot(x, y)), th = atan2(y, x);
    cdouble w = {s * lr - 0.0 * th, s * th + 0.0 * lr};
    if (isnan(w.re) && isnan(w.im) && isinf(lr)) {
        const double c = copysign(1.0, lr), d = copysign(0.0, th);
        w = {c_inf() * (s * c - 0.0 * d), c_inf() * (s * d + 0.0 * c)};
    }
    return c_exp(w);
}

}  // namespace st
