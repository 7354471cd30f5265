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

// Sum over the plain dim: out (B, nmajor * em, W) with em = Rb for rows (csr/bsr: row sums),
// Cb otherwise (csc/bsc: column sums), summing each major line's entries and block items.
// st:kernel value index
template <typename V, typename I>
__global__ void compressed_sum_plain(const I* __restrict__ comp, const V* __restrict__ vals, i64 B, i64 nmajor,
                                     i64 nnz, i64 Rb, i64 Cb, i64 W, int rows, V* __restrict__ out) {
    typedef typename acc<V>::type A;
    const i64 em = rows ? Rb : Cb, ep = rows ? Cb : Rb;
    ST_GRID_LOOP(t, B * nmajor * em * W) {
        const i64 e = t % W;
        i64 u = t / W;
        const i64 q = u % em;
        u /= em;
        const i64 r = u % nmajor, b = u / nmajor;
        const I* c = comp + b * (nmajor + 1);
        A s = acc_zero<A>();
        for (i64 k = c[r]; k < (i64)c[r + 1]; ++k) {
            for (i64 p = 0; p < ep; ++p) {
                const i64 i = rows ? q : p, j = rows ? p : q;
                s = s + to_acc(vals[(((b * nnz + k) * Rb + i) * Cb + j) * W + e]);
            }
        }
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

}  // namespace st
