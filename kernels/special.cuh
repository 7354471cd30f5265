// erf and erfinv for the kernels: the device's own (erff, erf, erfinvf, erfinv). The emulator
// builds the kernels as host C++, whose <cmath> has erf but no erfinv: it gets one here. erf of
// complex values (c_erf), which neither has, is written here for both.
#pragma once
#include "common.cuh"
#include "complex.cuh"

#if defined(ST_HOST_EMULATION)
// erfinv(y) in double: a first guess from log(1 - y^2) (two polynomial fits, the centre and the
// tail), refined by Newton steps on erf near 0 and on erfc beyond |y| = 0.5, where 1 - |y| is
// exact and erf is too flat to resolve the last bits.
inline double st_emu_erfinv(double y) {
    if (!(y >= -1.0 && y <= 1.0)) return NAN;
    if (y == 1.0 || y == -1.0) return y * INFINITY;
    if (y == 0.0) return y;  // keeps -0
    const double a = std::fabs(y);
    double w = -std::log((1.0 - a) * (1.0 + a)), x;
    if (w < 5.0) {
        w -= 2.5;
        double p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w; p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w; p = -0.00125372503 + p * w; p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w; p = 1.50140941 + p * w;
        x = p * a;
    } else {
        w = std::sqrt(w) - 3.0;
        double p = -0.000200214257;
        p = 0.000100950558 + p * w; p = 0.00134934322 + p * w; p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w; p = -0.0076224613 + p * w; p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w; p = 2.83297682 + p * w;
        x = p * a;
    }
    const double two_over_sqrt_pi = 1.1283791670955126;
    for (int k = 0; k < 60; ++k) {  // quadratic once close; the tail's first steps are slower
        const double slope = two_over_sqrt_pi * std::exp(-x * x);
        if (!(slope > 0.0)) break;
        const double step = a <= 0.5 ? (std::erf(x) - a) / slope : -(std::erfc(x) - (1.0 - a)) / slope;
        x -= step;
        if (std::fabs(step) <= 1e-16 * std::fabs(x)) break;
    }
    return y < 0.0 ? -x : x;
}
#endif

namespace st {

__device__ __forceinline__ float special_erf(float x) { return erff(x); }
__device__ __forceinline__ double special_erf(double x) { return erf(x); }
#if defined(ST_HOST_EMULATION)
__device__ __forceinline__ float special_erfinv(float x) { return (float)st_emu_erfinv((double)x); }
__device__ __forceinline__ double special_erfinv(double x) { return st_emu_erfinv(x); }
#else
__device__ __forceinline__ float special_erfinv(float x) { return erfinvf(x); }
__device__ __forceinline__ double special_erfinv(double x) { return erfinv(x); }
#endif

#define ST_SQRT_PI 1.7724538509055160273
#define ST_2_OVER_SQRT_PI 1.1283791670955125739

// erf(x + iy) for finite x, y > 0. Two forms, each where it keeps the digits of double:
// - below |z| = 2.6, and near the imaginary axis (x < 1.5) below |z| = 8, the Maclaurin series
//   2/sqrt(pi) sum_n (-z^2)^n z / (n! (2n + 1)): its terms cancel by at most e^(|z|^2 - Re(-z^2)),
//   so little there (and nothing where -z^2 is near the positive axis);
// - elsewhere 1 - erfc z with erfc z = exp(-z^2) / (sqrt(pi) K), K = z + (1/2) / (z + 1 / (z +
//   (3/2) / (z + ...))) the continued fraction of the asymptotic series, summed from a depth that
//   reaches double's precision at |z| (it converges in Re z > 0, the faster the larger |z|), its
//   modulus taken into the exponential: finite where exp(-z^2) alone overflows.
__device__ inline cdouble c_erf_quadrant(double x, double y) {
    const double q = (y - x) * (y + x);  // Re(-z^2), without overflowing squares
    if (q < -750.0) return {1.0, 0.0};   // erfc z underflows
    const double r = hypot(x, y), v = -2.0 * x * y;  // v = Im(-z^2)
    if (r < 2.6 || (x < 1.5 && r < 8.0)) {
        const cdouble w = {q, v};
        cdouble t = {x, y}, s = t;
        for (int n = 1; n < 4000; ++n) {
            t = t * w;
            t = {t.re / n, t.im / n};
            const double k = 1.0 / (2 * n + 1);
            const cdouble d = {t.re * k, t.im * k};
            s = s + d;
            if (fabs(d.re) + fabs(d.im) <= 1e-17 * (fabs(s.re) + fabs(s.im))) break;
        }
        return {ST_2_OVER_SQRT_PI * s.re, ST_2_OVER_SQRT_PI * s.im};
    }
    const cdouble z = {x, y};
    cdouble k = z;
    if (r < 1e8) {  // past it K = z to double's precision (and |K|^2 could overflow)
        const int depth = r < 3.0 ? 120 : r < 4.0 ? 80 : r < 6.0 ? 40 : r < 10.0 ? 24 : 12;
        for (int j = depth; j > 0; --j) k = z + c_div({0.5 * j, 0.0}, k);
    }
    // the phase v is turned by conj(K) / |K| after its cos and sin: v - arg K would lose arg K
    // to rounding once |v| is large
    const double m = hypot(k.re, k.im), c = cos(v), sn = sin(v);
    const cdouble u = {(c * k.re + sn * k.im) / m, (sn * k.re - c * k.im) / m};
    const double g = q - log(ST_SQRT_PI * m);
    return {1.0 - exp_times(g, u.re), -exp_times(g, u.im)};
}

// erf of complex a + bi, with SciPy's values on the axes and at the special values: the real
// line is the real erf (b's zero kept), the imaginary axis i erfi(b) (a's zero kept, infinite
// once b^2 > 720), an infinite real part +-1 (with a finite b), NaN elsewhere when a part is not
// finite. The other quadrants by erf(-z) = -erf(z) and erf(conj z) = conj erf(z).
__device__ inline cdouble c_erf(double a, double b) {
    if (b == 0.0) return {erf(a), b};
    if (a == 0.0) {
        if (!(fabs(b) * fabs(b) <= 720.0)) return {a, isnan(b) ? b : copysign(c_inf(), b)};
        return {a, copysign(c_erf_quadrant(0.0, fabs(b)).im, b)};
    }
    if (isnan(a) || isnan(b)) return {c_nan(), c_nan()};
    if (isinf(a)) return isinf(b) ? cdouble{c_nan(), c_nan()} : cdouble{copysign(1.0, a), 0.0};
    if (isinf(b)) return {c_nan(), c_nan()};
    cdouble r = c_erf_quadrant(fabs(a), fabs(b));
    if ((a < 0.0) != (b < 0.0)) r.im = -r.im;
    if (a < 0.0) r = {-r.re, -r.im};
    return r;
}

}  // namespace st
