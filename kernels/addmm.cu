// addmm's update of a dense product on the device (sparsetensor.ops.blas.addmm through the
// backend's scale_add, sparsetensor/_backend/cuda/_addmm.py), in place:
//   prod[i, j] = alpha * prod[i, j] (scale) + beta * inp[i * rs + j * cs] (add),
// inp broadcast to prod's (M, N) by zero strides. The arithmetic is the CPU's (NumPy's on the
// working dtype: float16 products arrive in float32).
#include "common.cuh"

namespace st {

// Floating and complex values; alpha and beta as (re, im).
// st:kernel value
template <typename V>
__global__ void scale_add_float(V* __restrict__ prod, const V* __restrict__ inp, i64 M, i64 N, i64 rs, i64 cs,
                                int scale, double ar, double ai, int add, double br, double bi) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(t, M * N) {
        A s = to_acc(prod[t]);
        if (scale) s = acc_scalar<A>(ar, ai) * s;
        if (add) {
            const i64 i = t / N, j = t - i * N;
            s = s + acc_scalar<A>(br, bi) * to_acc(inp[i * rs + j * cs]);
        }
        prod[t] = from_acc<V>(s);
    }
}

// Integers (wrapping: 64-bit unsigned arithmetic, written back with a plain conversion) and bool
// as uint8 (logical: (alpha and prod) or (beta and inp)); alpha and beta already wrapped.
// st:kernel num
template <typename V>
__global__ void scale_add_int(V* __restrict__ prod, const V* __restrict__ inp, i64 M, i64 N, i64 rs, i64 cs,
                              int scale, i64 alpha, int add, i64 beta, int logical) {
    typedef typename acc<V>::type A;  // (the float instances of the class are not used)
    ST_GRID_LOOP(t, M * N) {
        u64 s = (u64)(i64)to_acc(prod[t]);
        if (scale) s = (u64)alpha * s;
        if (add) {
            const i64 i = t / N, j = t - i * N;
            s = s + (u64)beta * (u64)(i64)to_acc(inp[i * rs + j * cs]);
        }
        prod[t] = from_acc<V>((A)(logical ? (i64)(s != 0) : (i64)s));
    }
}

}  // namespace st
