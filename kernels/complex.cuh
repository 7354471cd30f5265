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

__device__ __forceinline__ cdouble c_sqrt(cdouble z) {
    const double a = z.re, b = z.im;
    if (a == 0.0 && b == 0.0) return {0.0, b};
    if (fabs(b) > 1.7976931348623157e308) return {fabs(b), b};  // b infinite: +inf + i b
    const double t = sqrt((fabs(a) + hypot(a, b)) * 0.5);
    if (a >= 0.0) return {t, b / (2.0 * t)};
    return {fabs(b) / (2.0 * t), copysign(t, b)};
}

__device__ __forceinline__ cdouble c_log1p(cdouble z) {
    const double a = z.re, b = z.im;
    return {0.5 * log1p(a * (2.0 + a) + b * b), atan2(b, 1.0 + a)};
}

__device__ __forceinline__ cdouble c_tanh(cdouble z) {
    const double x = z.re, y = z.im;
    if (fabs(x) > 22.0) return {copysign(1.0, x), 4.0 * sin(y) * cos(y) * exp(-2.0 * fabs(x))};
    const double t = tan(y), beta = 1.0 + t * t, s = sinh(x), rho = sqrt(1.0 + s * s);
    const double d = 1.0 + beta * s * s;
    return {beta * rho * s / d, t / d};
}

__device__ __forceinline__ cdouble c_atanh(cdouble z) {
    const double x = z.re, y = z.im, ax = fabs(x);
    const double re = 0.25 * log1p(4.0 * ax / ((1.0 - ax) * (1.0 - ax) + y * y));
    return {copysign(re, x), 0.5 * atan2(2.0 * y, (1.0 - x) * (1.0 + x) - y * y)};
}

__device__ __forceinline__ cdouble c_asinh(cdouble z) {
    // asinh(z) = log1p(w + w^2 / (1 + sqrt(1 + w^2))) for w = z with Re w >= 0 (odd symmetry)
    const bool flip = z.re < 0.0;
    const cdouble w = flip ? cdouble{-z.re, -z.im} : z;
    const cdouble w2 = w * w;
    const cdouble r = c_sqrt({1.0 + w2.re, w2.im});
    const cdouble d = {1.0 + r.re, r.im};
    const double dd = d.re * d.re + d.im * d.im;
    const cdouble q = {(w2.re * d.re + w2.im * d.im) / dd, (w2.im * d.re - w2.re * d.im) / dd};
    cdouble y = c_log1p({w.re + q.re, w.im + q.im});
    if (flip) { y.re = -y.re; y.im = -y.im; }
    return y;
}

// z ** s for a real s: repeated squaring for integer s up to 2^20 in size (as NumPy's small
// integer powers; a negative one inverted), else |z|^s (cos s arg z, sin s arg z).
__device__ cdouble complex_pow(cdouble z, double s) {
    if (s == floor(s) && fabs(s) <= 1048576.0) {
        cdouble y = {1.0, 0.0}, base = z;
        for (long long e = (long long)fabs(s); e; e >>= 1) {
            if (e & 1) y = y * base;
            base = base * base;
        }
        return s < 0 ? c_div({1.0, 0.0}, y) : y;
    }
    if (z.re == 0.0 && z.im == 0.0) return {s > 0 ? 0.0 : 1.0 / 0.0, 0.0};
    const double r = pow(hypot(z.re, z.im), s), th = s * atan2(z.im, z.re);
    return {r * cos(th), r * sin(th)};
}

}  // namespace st
