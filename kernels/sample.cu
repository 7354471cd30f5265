// A sparse tensor with a dense operand: the dense operand read at the sparse pattern (sparse *
// dense, sparse / dense, sparse_mask of a dense array), added into at it (sparse + dense), and
// two arrays of one shape combined elementwise (the values with the sampled operand;
// maximum/minimum with a dense operand); a sparse tensor's values looked up at another's
// entries (sparse_mask of a sparse tensor).
//
// The dense operand is read through per-dim element strides over the sparse tensor's full
// shape: a dim it broadcasts along has stride 0, so it is never expanded in memory. The
// sparse input's indices are in bounds (the host validated or coalesced it first).
#include "common.cuh"
#include "complex.cuh"

#define EW_MUL 0
#define EW_DIV 1
#define EW_ADD 2
#define EW_SUB 3

namespace st {

// Item (i, j, e) of entry bk (over all batches) of a compressed tensor, decoded from the flat
// position t of its values (B * nnz, Rb, Cb, W), with its element's row and column.
struct Item { i64 bk, e, r, c; };

template <typename I>
__device__ __forceinline__ Item item_of(i64 t, i64 W, i64 Rb, i64 Cb, const I* __restrict__ major,
                                        const I* __restrict__ plain, int rows) {
    Item it;
    it.e = t % W;
    i64 u = t / W;
    const i64 j = u % Cb;
    u /= Cb;
    const i64 i = u % Rb;
    it.bk = u / Rb;
    const i64 maj = major[it.bk], mnr = plain[it.bk];
    it.r = (rows ? maj : mnr) * Rb + i;
    it.c = (rows ? mnr : maj) * Cb + j;
    return it;
}

// out[(b * nnz + k) * Rb * Cb * W + (i * Cb + j) * W + e] = dense at element (batch b, row, column,
// e) of entry k of a compressed tensor with m batch dims; major[] is each entry's major slot.
// st:kernel raw index
template <typename R, typename I>
__global__ void sample_compressed(const I* __restrict__ major, const I* __restrict__ plain, i64 B, i64 nnz, i64 Rb,
                                  i64 Cb, i64 W, int rows, i64 m, i64 ndim, const i64* __restrict__ dims,
                                  const i64* __restrict__ strides, const R* __restrict__ dense, R* __restrict__ out) {
    ST_GRID_LOOP(t, B * nnz * Rb * Cb * W) {
        const Item it = item_of(t, W, Rb, Cb, major, plain, rows);
        i64 off = it.r * strides[m] + it.c * strides[m + 1] + item_offset(it.e, dims, strides, m + 2, ndim);
        i64 b = it.bk / nnz;
        for (i64 d = m - 1; d >= 0; --d) {
            off += (b % dims[d]) * strides[d];
            b /= dims[d];
        }
        out[t] = dense[off];
    }
}

// out[k * W + e] = dense at element (idx[0][k], ..., idx[S-1][k], e) of a COO tensor.
// st:kernel raw index
template <typename R, typename I>
__global__ void sample_coo(const I* __restrict__ idx, i64 S, i64 nnz, i64 W, i64 ndim, const i64* __restrict__ dims,
                           const i64* __restrict__ strides, const R* __restrict__ dense, R* __restrict__ out) {
    ST_GRID_LOOP(t, nnz * W) {
        const i64 k = t / W, e = t - k * W;
        i64 off = item_offset(e, dims, strides, S, ndim);
        for (i64 d = 0; d < S; ++d) off += (i64)idx[d * nnz + k] * strides[d];
        out[t] = dense[off];
    }
}

// out at the elements of a canonical compressed tensor's entries += vals (no two entries share
// an element, so no two threads write one item).
// st:kernel arith index
template <typename V, typename I>
__global__ void add_compressed_to_dense(const I* __restrict__ major, const I* __restrict__ plain,
                                        const V* __restrict__ vals, i64 B, i64 nnz, i64 Rb, i64 Cb, i64 W, i64 NR,
                                        i64 NC, int rows, V* __restrict__ out) {
    ST_GRID_LOOP(t, B * nnz * Rb * Cb * W) {
        const Item it = item_of(t, W, Rb, Cb, major, plain, rows);
        V* o = out + ((it.bk / nnz * NR + it.r) * NC + it.c) * W + it.e;
        *o = from_acc<V>(to_acc(*o) + to_acc(vals[t]));
    }
}

// The same for a coalesced COO tensor (distinct indices) over sparse dims dims[0..S).
// st:kernel arith index
template <typename V, typename I>
__global__ void add_coo_to_dense(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ dims,
                                 const V* __restrict__ vals, i64 W, V* __restrict__ out) {
    ST_GRID_LOOP(t, nnz * W) {
        const i64 k = t / W, e = t - k * W;
        V* o = out + coo_linear(idx, S, nnz, dims, k) * W + e;
        *o = from_acc<V>(to_acc(*o) + to_acc(vals[t]));
    }
}

// keys[k] = the row-major position of entry k of a coalesced COO tensor over dims[0..S).
// st:kernel index
template <typename I>
__global__ void coo_keys(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ dims,
                         i64* __restrict__ keys) {
    ST_GRID_LOOP(k, nnz) { keys[k] = coo_linear(idx, S, nnz, dims, k); }
}

// The W items of the value at key (a binary search of the sorted keys[0..nk)), or zeros.
template <typename R>
__device__ __forceinline__ void copy_found(const i64* __restrict__ keys, i64 nk, const R* __restrict__ tv, i64 W,
                                           i64 key, R* __restrict__ dst) {
    const i64 pos = lower_bound(keys, nk, key);
    const bool found = pos < nk && keys[pos] == key;
    for (i64 e = 0; e < W; ++e) dst[e] = found ? tv[pos * W + e] : R();
}

// out[p * W ..] = the value of a sparse tensor (sorted keys, values tv) at element p of the
// entries of a valid compressed mask: element (b, row, column) has key (b * NR + row) * NC + column.
// st:kernel raw index
template <typename R, typename I>
__global__ void lookup_compressed(const I* __restrict__ major, const I* __restrict__ plain, i64 B, i64 nnz, i64 Rb,
                                  i64 Cb, int rows, i64 NR, i64 NC, const i64* __restrict__ keys, i64 nk,
                                  const R* __restrict__ tv, i64 W, R* __restrict__ out) {
    ST_GRID_LOOP(p, B * nnz * Rb * Cb) {
        const Item it = item_of(p, 1, Rb, Cb, major, plain, rows);
        copy_found(keys, nk, tv, W, (it.bk / nnz * NR + it.r) * NC + it.c, out + p * W);
    }
}

// The same at the entries of a COO mask (indices in bounds) over dims[0..S).
// st:kernel raw index
template <typename R, typename I>
__global__ void lookup_coo(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ dims,
                           const i64* __restrict__ keys, i64 nk, const R* __restrict__ tv, i64 W, R* __restrict__ out) {
    ST_GRID_LOOP(k, nnz) { copy_found(keys, nk, tv, W, coo_linear(idx, S, nnz, dims, k), out + k * W); }
}

template <typename A>
__device__ __forceinline__ A ew_div(A x, A y) { return x / y; }
// complex x / y as NumPy divides (Smith's scaling: the textbook x conj(y) / |y|^2 overflows for
// |y| > 1e154 and gives NaN where NumPy gives inf for y = 0)
__device__ __forceinline__ cfloat ew_div(cfloat x, cfloat y) { return c_div_scaled(x, y); }
__device__ __forceinline__ cdouble ew_div(cdouble x, cdouble y) { return c_div_scaled(x, y); }

// out = x * y, x / y, x + y or x - y, elementwise over n items of one dtype.
// st:kernel arith
template <typename V>
__global__ void elementwise(const V* __restrict__ x, const V* __restrict__ y, V* __restrict__ out, i64 n, int op) {
    ST_GRID_LOOP(i, n) {
        const auto p = to_acc(x[i]), q = to_acc(y[i]);
        out[i] = from_acc<V>(op == EW_MUL ? p * q : op == EW_DIV ? ew_div(p, q) : op == EW_ADD ? p + q : p - q);
    }
}

// out = maximum (mx = 1) or minimum (mx = 0) of x and y elementwise; NaN propagates (np.maximum).
// st:kernel num
template <typename V>
__global__ void elementwise_extremum(const V* __restrict__ x, const V* __restrict__ y, V* __restrict__ out, i64 n,
                                     int mx) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(i, n) {
        const A p = to_acc(x[i]), q = to_acc(y[i]);
        A v;
        if (p != p) v = p;
        else if (q != q) v = q;
        else v = mx ? (q > p ? q : p) : (q < p ? q : p);
        out[i] = from_acc<V>(v);
    }
}

// The quotient x / y rounded down (floor) or towards zero (trunc), as NumPy's floor_divide and
// trunc(true_divide) round it. Integers (in i64): a zero divisor sets *zero and gives 0, and
// x / -1 negates with wrap-around (INT64_MIN / -1 traps in C).
__device__ __forceinline__ i64 rounded_div(i64 x, i64 y, int trunc_mode, int* zero) {
    if (y == 0) {
        relaxed_store(zero, 1);  // other threads may flag it too
        return 0;
    }
    if (y == -1) return (i64)(0ull - (u64)x);
    i64 q = x / y;
    if (!trunc_mode && x % y != 0 && ((x < 0) != (y < 0))) q -= 1;
    return q;
}

// Floats: floor by NumPy's divmod (the quotient of x - fmod(x, y), snapped to an integer), so
// the results agree with the host bit for bit.
template <typename A>
__device__ __forceinline__ A float_floor_div(A x, A y) {
    if (y == (A)0) return x / y;
    A mod = fmod(x, y);
    A div = (x - mod) / y;
    if (mod != (A)0 && ((y < (A)0) != (mod < (A)0))) div -= (A)1;
    if (div == (A)0) return copysign((A)0, x / y);
    A fl = floor(div);
    return div - fl > (A)0.5 ? fl + (A)1 : fl;
}
__device__ __forceinline__ float rounded_div(float x, float y, int trunc_mode, int*) {
    return trunc_mode ? x / y : float_floor_div(x, y);
}
__device__ __forceinline__ double rounded_div(double x, double y, int trunc_mode, int*) {
    return trunc_mode ? x / y : float_floor_div(x, y);
}

__device__ __forceinline__ i64 trunc_of(i64 q) { return q; }
__device__ __forceinline__ float trunc_of(float q) { return trunc(q); }
__device__ __forceinline__ double trunc_of(double q) { return trunc(q); }

// out = x / y rounded down (trunc_mode = 0) or towards zero (1), elementwise over n items of one
// dtype (y[0] for every item where ystep is 0: a scalar divisor); *zero is set where an integer divisor is 0. A truncated float quotient is rounded to V
// first (float16: NumPy divides in float16, then truncates).
// st:kernel num
template <typename V>
__global__ void elementwise_rounded_div(const V* __restrict__ x, const V* __restrict__ y, i64 ystep, V* __restrict__ out,
                                        i64 n, int trunc_mode, int* __restrict__ zero) {
    ST_GRID_LOOP(i, n) {
        const V q = from_acc<V>(rounded_div(to_acc(x[i]), to_acc(y[i * ystep]), trunc_mode, zero));
        out[i] = trunc_mode ? from_acc<V>(trunc_of(to_acc(q))) : q;
    }
}

}  // namespace st
