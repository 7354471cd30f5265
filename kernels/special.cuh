// erf and erfinv for the kernels: the device's own (erff, erf, erfinvf, erfinv). The emulator
// builds the kernels as host C++, whose <cmath> has erf but no erfinv: it gets one here.
#pragma once
#include "common.cuh"

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

}  // namespace st
