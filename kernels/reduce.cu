// Sums of values: of all of them (two deterministic passes: per-block partial sums, then
// one block), and over the plain dim of a compressed tensor (row sums of csr).
#include "common.cuh"
#include "scan.cuh"

#define SUM_THREADS 256

namespace st {

// partial[block] = the sum of vals[i] over the i this block's threads visit (grid-stride).
// Launch with SUM_THREADS threads.
// st:kernel value
template <typename V>
__global__ void sum_partial(const V* __restrict__ vals, i64 n, typename acc<V>::type* __restrict__ partial) {
    typedef typename acc<V>::type A;
    A s = acc_zero<A>();
    ST_GRID_LOOP(i, n) { s = s + to_acc(vals[i]); }
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = the sum of partial[0..np), rounded once to V. Launch one block of SUM_THREADS.
// st:kernel value
template <typename V>
__global__ void sum_final(const typename acc<V>::type* __restrict__ partial, i64 np, V* __restrict__ out) {
    typedef typename acc<V>::type A;
    A s = acc_zero<A>();
    for (i64 i = threadIdx.x; i < np; i += blockDim.x) s = s + partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] = from_acc<V>(s);
}

// Output item t of a reduction over the plain dim, out (B, nmajor * em, W) with em = Rb for rows
// (csr/bsr: per row), Cb otherwise (csc/bsc: per column): calls f(x) for each specified item x of
// its line (the major line's entries and their block items along the plain dim), in order, and
// returns how many there were.
template <typename V, typename I, typename F>
__device__ __forceinline__ i64 plain_line(const I* __restrict__ comp, const V* __restrict__ vals, i64 t, i64 nmajor,
                                          i64 nnz, i64 Rb, i64 Cb, i64 W, int rows, F& f) {
    const i64 em = rows ? Rb : Cb, ep = rows ? Cb : Rb;
    const i64 e = t % W;
    i64 u = t / W;
    const i64 q = u % em;
    u /= em;
    const i64 r = u % nmajor, b = u / nmajor;
    const I* c = comp + b * (nmajor + 1);
    for (i64 k = c[r]; k < (i64)c[r + 1]; ++k) {
        for (i64 p = 0; p < ep; ++p) {
            const i64 i = rows ? q : p, j = rows ? p : q;
            f(to_acc(vals[(((b * nnz + k) * Rb + i) * Cb + j) * W + e]));
        }
    }
    return ((i64)c[r + 1] - (i64)c[r]) * ep;
}

// Sum over the plain dim (see plain_line): row sums of csr/bsr, column sums of csc/bsc.
// st:kernel value index
template <typename V, typename I>
__global__ void compressed_sum_plain(const I* __restrict__ comp, const V* __restrict__ vals, i64 B, i64 nmajor,
                                     i64 nnz, i64 Rb, i64 Cb, i64 W, int rows, V* __restrict__ out) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(t, B * nmajor * (rows ? Rb : Cb) * W) {
        A s = acc_zero<A>();
        auto add = [&](A x) { s = s + x; };
        plain_line(comp, vals, t, nmajor, nnz, Rb, Cb, W, rows, add);
        out[t] = from_acc<V>(s);
    }
}

// Extrema of index arrays, for estimating a shape (seed 003, "Estimating the shape").
// Row r of `rows` rows of `len` items is split into `parts` chunks, one block each
// (grid = rows * parts, blockDim.x a power of two <= 1024); block (r, part) writes
// out[2 * (r * parts + part)] = max and out[... + 1] = min of its chunk (INT64_MIN /
// INT64_MAX when the chunk is empty); the host combines the few partials.
// diff != 0 (rows == 1): the items are the steps of a compressed index of `len / seg`
// batches of seg + 1 entries, a[b, i + 1] - a[b, i] for i < seg, in the index type's
// two's complement (as NumPy's diff).
// st:kernel index
template <typename I>
__global__ void index_extrema(const I* __restrict__ a, i64 rows, i64 len, i64 parts, int diff, i64 seg,
                              i64* __restrict__ out) {
    __shared__ i64 hi[1024];
    __shared__ i64 lo[1024];
    typedef unsigned long long U;
    const i64 r = blockIdx.x / parts, part = blockIdx.x - r * parts;
    const i64 top = 0x7fffffffffffffffll;
    i64 mx = -top - 1, mn = top;
    for (i64 k = part * blockDim.x + threadIdx.x; k < len; k += parts * blockDim.x) {
        i64 v;
        if (diff) {
            const i64 b = k / seg, i = k - b * seg;
            const I* c = a + b * (seg + 1) + i;
            v = (i64)(I)((U)(i64)c[1] - (U)(i64)c[0]);
        } else {
            v = (i64)a[r * len + k];
        }
        mx = v > mx ? v : mx;
        mn = v < mn ? v : mn;
    }
    hi[threadIdx.x] = mx;
    lo[threadIdx.x] = mn;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            hi[threadIdx.x] = hi[threadIdx.x + s] > hi[threadIdx.x] ? hi[threadIdx.x + s] : hi[threadIdx.x];
            lo[threadIdx.x] = lo[threadIdx.x + s] < lo[threadIdx.x] ? lo[threadIdx.x + s] : lo[threadIdx.x];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = hi[0];
        out[2 * blockIdx.x + 1] = lo[0];
    }
}

// -- sum, max and min of the ordered dtypes (amax, amin; sums of integers) --------------------------

#define RED_SUM 0
#define RED_MAX 1
#define RED_MIN 2

// a op b; max/min propagate NaN (as np.maximum / np.minimum): a NaN, once met, stays
template <typename A>
__device__ __forceinline__ A red_apply(A a, A b, int op) {
    if (op == RED_SUM) return a + b;
    if (a != a) return a;
    if (b != b) return b;
    if (op == RED_MAX) return b > a ? b : a;
    return b < a ? b : a;
}

// The reduction over the plain dim with `op` (see plain_line). For max/min the `plain` - (items
// specified in the line) unspecified elements are zeros and take part (amax of the dense tensor).
// The first item starts the reduction (no identity is needed).
// st:kernel num index
template <typename V, typename I>
__global__ void compressed_reduce_plain(const I* __restrict__ comp, const V* __restrict__ vals, i64 B, i64 nmajor,
                                        i64 nnz, i64 Rb, i64 Cb, i64 W, int rows, int op, i64 plain,
                                        V* __restrict__ out) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(t, B * nmajor * (rows ? Rb : Cb) * W) {
        A s = acc_zero<A>();
        bool first = op != RED_SUM;
        auto take = [&](A x) {
            s = first ? x : red_apply(s, x, op);
            first = false;
        };
        const i64 count = plain_line(comp, vals, t, nmajor, nnz, Rb, Cb, W, rows, take);
        if (op != RED_SUM && count < plain) s = first ? acc_zero<A>() : red_apply(s, acc_zero<A>(), op);
        out[t] = from_acc<V>(s);
    }
}

// partial[block] = op over vals[i * W + e] of the rows i this block visits, for each lane e < W
// (launch W-major: grid = nblocks * W, block b of lane e is blockIdx.x = e * nblocks + b); an
// empty part writes has[] = 0 (use_has: read the flags of the first launch). A second launch over the partials (rows = nblocks)
// finishes. Launch with SUM_THREADS threads.
// st:kernel num
template <typename V>
__global__ void reduce_rows(const V* __restrict__ vals, i64 n, i64 W, i64 nblocks, int op, V* __restrict__ partial,
                            int use_has, const int* __restrict__ has_in, int* __restrict__ has) {
    typedef typename acc<V>::type A;
    __shared__ A acc_s[SUM_THREADS];
    __shared__ int has_s[SUM_THREADS];
    const i64 e = blockIdx.x / nblocks, part = blockIdx.x % nblocks;
    A s = acc_zero<A>();
    int any = 0;
    for (i64 i = part * blockDim.x + threadIdx.x; i < n; i += nblocks * blockDim.x) {
        if (use_has && !has_in[i * W + e]) continue;
        const A x = to_acc(vals[i * W + e]);
        s = any ? red_apply(s, x, op) : x;
        any = 1;
    }
    acc_s[threadIdx.x] = s;
    has_s[threadIdx.x] = any;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h && has_s[threadIdx.x + h]) {
            acc_s[threadIdx.x] = has_s[threadIdx.x] ? red_apply(acc_s[threadIdx.x], acc_s[threadIdx.x + h], op)
                                                    : acc_s[threadIdx.x + h];
            has_s[threadIdx.x] = 1;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[part * W + e] = from_acc<V>(acc_s[0]);
        has[part * W + e] = has_s[0];
    }
}

// -- softmax over segments (softmax / log_softmax along the plain dim of a compressed tensor) ----------

// Offsets (B * n + 1) of the concatenated entries of B batches from compressed indices (B, n + 1):
// off[b * n + i] = comp[b, i] + b * nnz, off[B * n] = B * nnz.
// st:kernel index
template <typename I>
__global__ void segment_offsets(const I* __restrict__ comp, i64 B, i64 n, i64 nnz, i64* __restrict__ off) {
    ST_GRID_LOOP(t, B * n + 1) {
        if (t == B * n) { off[t] = B * nnz; continue; }
        const i64 b = t / n, i = t - b * n;
        off[t] = (i64)comp[b * (n + 1) + i] + b * nnz;
    }
}

// The larger of two maxima so far, NaN once either is NaN (NumPy's max).
template <typename A> __device__ __forceinline__ A nan_max(A a, A b) { return (b > a || b != b) && a == a ? b : a; }

// out[j] = softmax (log: its logarithm) over items [lo, hi) of lane e (x and out rows of E
// lanes), given their max mx and norm: the sum s of exp(x - mx), log(s) for log_ (as NumPy
// computes it).
template <typename A>
__device__ __forceinline__ void softmax_write(const A* __restrict__ x, A* __restrict__ out, i64 j, i64 E, A mx,
                                              A norm, int log_) {
    const A z = x[j * E] - mx;
    out[j * E] = log_ ? z - norm : (A)exp(z) / norm;
}

// out = softmax (log: its logarithm) of x (rows of K * E: K items of E lanes) over the rows
// off[g]..off[g + 1] and the K items of segment g, per lane e: `tpg` threads (a power of two
// <= 32) per (segment, lane) t = g * E + e, each taking every tpg-th item, max and sum reduced
// with shuffles (the same full-warp loop count for every group: the shuffles never diverge).
// A segment of more than long_len items is left to segment_softmax_long: its t is appended
// to long_list (long_count[0] of them, zeroed before the launch).
// st:kernel real
template <typename A>
__global__ void segment_softmax(const A* __restrict__ x, const i64* __restrict__ off, i64 G, i64 K, i64 E, int log_,
                                int tpg, i64 long_len, unsigned long long* __restrict__ long_count,
                                i64* __restrict__ long_list, A* __restrict__ out) {
    const ThreadGroups tg = thread_groups(tpg);
    const int lane = tg.lane;
    const i64 total = G * E;
    for (i64 base = tg.warp_first; base < total; base += tg.stride) {
        const i64 t = tg.group + (base - tg.warp_first);
        i64 lo = 0, hi = 0, e = 0;
        if (t < total) {
            const i64 g = t / E;
            e = t - g * E;
            lo = off[g] * K;
            hi = off[g + 1] * K;
            if (hi - lo > long_len) {
                if (lane == 0) long_list[atomicAdd(long_count, 1ull)] = t;
                hi = lo;
            }
        }
        const A* xs = x + e;
        A mx = -(A)(1.0 / 0.0);
        for (i64 j = lo + lane; j < hi; j += tpg) mx = nan_max(mx, xs[j * E]);
        for (int d = tpg / 2; d > 0; d >>= 1) mx = nan_max(mx, shfl_down(mx, d, tpg));
        mx = __shfl_sync(0xffffffffu, mx, 0, tpg);
        A s = 0;
        for (i64 j = lo + lane; j < hi; j += tpg) s += exp(xs[j * E] - mx);
        for (int d = tpg / 2; d > 0; d >>= 1) s += shfl_down(s, d, tpg);
        s = __shfl_sync(0xffffffffu, s, 0, tpg);
        const A norm = log_ ? (A)log(s) : s;
        for (i64 j = lo + lane; j < hi; j += tpg) softmax_write(xs, out + e, j, E, mx, norm, log_);
    }
}

// The block's reduction of one value a thread (max: nan_max, else a sum), returned to every
// thread; `scratch` holds a value a warp. blockDim.x is a multiple of 32.
template <typename A>
__device__ __forceinline__ A block_reduce(A v, int is_max, A* scratch) {
    for (int d = 16; d > 0; d >>= 1) {
        const A o = shfl_down(v, d, 32);
        v = is_max ? nan_max(v, o) : v + o;
    }
    const int warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    if (threadIdx.x % 32 == 0) scratch[warp] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < nwarps; ++w) v = is_max ? nan_max(v, scratch[w]) : v + scratch[w];
    __syncthreads();  // scratch is reused by the next call
    return v;
}

// The segments segment_softmax left (long_list[0..long_count[0])): a block each, in turn.
// st:kernel real
template <typename A>
__global__ void segment_softmax_long(const A* __restrict__ x, const i64* __restrict__ off, i64 K, i64 E, int log_,
                                     const unsigned long long* __restrict__ long_count,
                                     const i64* __restrict__ long_list, A* __restrict__ out) {
    __shared__ A scratch[32];
    const i64 nlong = (i64)long_count[0];
    for (i64 q = blockIdx.x; q < nlong; q += gridDim.x) {  // q is the same for the whole block
        const i64 t = long_list[q], g = t / E, e = t - g * E;
        const i64 lo = off[g] * K, hi = off[g + 1] * K;
        const A* xs = x + e;
        A mx = -(A)(1.0 / 0.0);
        for (i64 j = lo + threadIdx.x; j < hi; j += blockDim.x) mx = nan_max(mx, xs[j * E]);
        mx = block_reduce(mx, 1, scratch);
        A s = 0;
        for (i64 j = lo + threadIdx.x; j < hi; j += blockDim.x) s += exp(xs[j * E] - mx);
        s = block_reduce(s, 0, scratch);
        const A norm = log_ ? (A)log(s) : s;
        for (i64 j = lo + threadIdx.x; j < hi; j += blockDim.x) softmax_write(xs, out + e, j, E, mx, norm, log_);
    }
}

}  // namespace st
