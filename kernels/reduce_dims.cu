// Reductions (sum, max, min) of a device tensor over any set of dims, on the COO form:
//
// - reduce_items: the dense dims among them, inside each entry's values (a loop over the
//   reduced items of every kept item, through element strides);
// - kept_keys -> radix sort (sort.cu) -> run_heads / run_starts (coalesce.cu) -> runs_reduce:
//   the sparse dims among them, over the runs of entries that agree on the kept sparse dims,
//   each run reduced in input order (the sort is stable), so results do not depend on the
//   schedule. max/min fold a zero into a run that misses some elements (unspecified elements
//   are zeros), as the CPU does; NaN propagates (np.maximum). The same grouping serves softmax
//   along a sparse dim (invert_perm puts the results back in entry order).
#include "common.cuh"

#define RED_SUM 0
#define RED_MAX 1
#define RED_MIN 2

namespace st {

template <typename A>
__device__ __forceinline__ A red_combine(A a, A b, int op) {
    if (op == RED_SUM) return a + b;
    if (a != a) return a;
    if (b != b) return b;
    return op == RED_MAX ? (b > a ? b : a) : (b < a ? b : a);
}
__device__ __forceinline__ cfloat red_combine(cfloat a, cfloat b, int) { return a + b; }
__device__ __forceinline__ cdouble red_combine(cdouble a, cdouble b, int) { return a + b; }

// Output t = (k, q) of reduce_items: op over the reduced items r of row k at kept item q.
template <typename V>
__device__ __forceinline__ V reduce_item(const V* __restrict__ in, i64 t, i64 row, i64 Q, i64 R, i64 nk, i64 nr,
                                         const i64* __restrict__ shapes, const i64* __restrict__ strides, int op) {
    typedef typename acc<V>::type A;
    const i64 k = t / Q;
    const i64 base = k * row + item_offset(t - k * Q, shapes, strides, 0, nk);
    A s = to_acc(in[base + item_offset(0, shapes, strides, nk, nk + nr)]);
    for (i64 r = 1; r < R; ++r) s = red_combine(s, to_acc(in[base + item_offset(r, shapes, strides, nk, nk + nr)]), op);
    return from_acc<V>(s);
}

// out[k, q] = op over the reduced items r of in[k, q, r] for N rows of `row` elements: the kept
// item q and the reduced item r are decoded over the nk kept and nr reduced (sizes, strides) of
// shapes and strides (kept first). R >= 1.
// st:kernel num
template <typename V>
__global__ void reduce_items(const V* __restrict__ in, i64 N, i64 row, i64 Q, i64 R, i64 nk, i64 nr,
                             const i64* __restrict__ shapes, const i64* __restrict__ strides, int op,
                             V* __restrict__ out) {
    ST_GRID_LOOP(t, N * Q) { out[t] = reduce_item(in, t, row, Q, R, nk, nr, shapes, strides, op); }
}

// The complex sums of reduce_items.
// st:kernel complex
template <typename C>
__global__ void sum_items_complex(const C* __restrict__ in, i64 N, i64 row, i64 Q, i64 R, i64 nk, i64 nr,
                                  const i64* __restrict__ shapes, const i64* __restrict__ strides,
                                  C* __restrict__ out) {
    ST_GRID_LOOP(t, N * Q) { out[t] = reduce_item(in, t, row, Q, R, nk, nr, shapes, strides, RED_SUM); }
}

// keys[k] = the row-major position of entry k of idx (S, nnz) over its kept dims dims[0..nk)
// (dim numbers) of sizes shape[0..nk).
// st:kernel index
template <typename I>
__global__ void kept_keys(const I* __restrict__ idx, i64 nnz, i64 nk, const i64* __restrict__ dims,
                          const i64* __restrict__ shape, u64* __restrict__ keys) {
    ST_GRID_LOOP(k, nnz) {
        u64 key = 0;
        for (i64 d = 0; d < nk; ++d) key = key * (u64)shape[d] + (u64)(i64)idx[dims[d] * nnz + k];
        keys[k] = key;
    }
}

// out[j, e] = op over vals[perm[k], e], k in [starts[j], starts[j + 1]), in k order; for max/min a
// run of fewer than `full` entries also takes a zero.
// st:kernel num
template <typename V>
__global__ void runs_reduce(const V* __restrict__ vals, const i64* __restrict__ perm, const i64* __restrict__ starts,
                            i64 nout, i64 W, int op, i64 full, V* __restrict__ out) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(t, nout * W) {
        const i64 j = t / W, e = t - j * W;
        const i64 k0 = starts[j], k1 = starts[j + 1];
        A s = to_acc(vals[perm[k0] * W + e]);
        for (i64 k = k0 + 1; k < k1; ++k) s = red_combine(s, to_acc(vals[perm[k] * W + e]), op);
        if (op != RED_SUM && k1 - k0 < full) s = red_combine(s, acc_zero<A>(), op);
        out[t] = from_acc<V>(s);
    }
}

// out[perm[j]] = j: the inverse of a permutation of n.
// st:kernel
__global__ void invert_perm(const i64* __restrict__ perm, i64 n, i64* __restrict__ out) {
    ST_GRID_LOOP(j, n) { out[perm[j]] = j; }
}

}  // namespace st
