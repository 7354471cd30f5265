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

}  // namespace st
