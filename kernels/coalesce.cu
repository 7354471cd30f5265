// COO coalescing: linearised keys, runs of equal keys after the radix sort
// (sort.cu), de-linearised indices and segmented sums; and the pairing of two
// coalesced operands for an elementwise product.
//
// coalesce(indices, values) on the device (sparsetensor/cuda/coalesce.py):
//   coo_keys -> radix sort (keys, positions) -> run_heads -> exclusive scan -> run_starts
//   -> coo_unkey (indices of each run) and segment_sum (values of each run, summed in
//   input order: the sort is stable).
#include "common.cuh"

namespace st {

// keys[k] = the row-major linear offset of column k of idx (S, nnz) over shape[0..S).
// Only the first S rows of idx are read (the row stride stays nnz).
// st:kernel index
template <typename I>
__global__ void coo_keys(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ shape,
                         u64* __restrict__ keys) {
    ST_GRID_LOOP(k, nnz) {
        u64 key = 0;
        for (i64 d = 0; d < S; ++d) key = key * (u64)shape[d] + (u64)(i64)idx[d * nnz + k];
        keys[k] = key;
    }
}

// out (T, nnz): the coordinates over a new shape of the entries of idx (S, nnz), whose
// linear offset (the sum of idx[d, k] * in_strides[d]) is unchanged: out[d, k] =
// offset / out_strides[d] % out_shape[d]. Row-major or column-major strides give C or F
// order reshapes; the op checked that every offset fits an i64.
// st:kernel index index
template <typename I, typename J>
__global__ void coo_reshape(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ in_strides, i64 T,
                            const i64* __restrict__ out_strides, const i64* __restrict__ out_shape,
                            J* __restrict__ out) {
    ST_GRID_LOOP(k, nnz) {
        i64 key = 0;
        for (i64 d = 0; d < S; ++d) key += (i64)idx[d * nnz + k] * in_strides[d];
        for (i64 d = 0; d < T; ++d) out[d * nnz + k] = (J)(key / out_strides[d] % out_shape[d]);
    }
}

// heads[k] = 1 where a run of equal keys starts.
// st:kernel
__global__ void run_heads(const u64* __restrict__ sorted, i64 n, i64* __restrict__ heads) {
    ST_GRID_LOOP(k, n) { heads[k] = (k == 0 || sorted[k] != sorted[k - 1]) ? 1 : 0; }
}

// flags[k] = 1 where keys k and k + 1 are equal (a pair from two coalesced operands).
// st:kernel
__global__ void pair_heads(const u64* __restrict__ sorted, i64 n, i64* __restrict__ flags) {
    ST_GRID_LOOP(k, n) { flags[k] = (k + 1 < n && sorted[k] == sorted[k + 1]) ? 1 : 0; }
}

// From the exclusive scan of 0/1 flags (n + 1 entries): starts[j] = the position of the
// j-th flag, and starts[scan[n]] = n.
// st:kernel
__global__ void run_starts(const i64* __restrict__ scan, i64 n, i64* __restrict__ starts) {
    ST_GRID_LOOP(k, n) {
        if (scan[k + 1] != scan[k]) starts[scan[k]] = k;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) starts[scan[n]] = n;
}

// out (S, nout): the indices of key sorted[starts[j]] over shape[0..S).
// st:kernel index
template <typename I>
__global__ void coo_unkey(const u64* __restrict__ sorted, const i64* __restrict__ starts, i64 nout, i64 S,
                          const i64* __restrict__ shape, I* __restrict__ out) {
    ST_GRID_LOOP(j, nout) {
        u64 key = sorted[starts[j]];
        for (i64 d = S - 1; d >= 0; --d) {
            const u64 s = (u64)shape[d];
            out[d * nout + j] = (I)(key % s);
            key /= s;
        }
    }
}

// out[j, e] = sum of vals[perm[k], e] over k in [starts[j], starts[j + 1]), in k order.
// st:kernel arith
template <typename V>
__global__ void segment_sum(const V* __restrict__ vals, const i64* __restrict__ perm, const i64* __restrict__ starts,
                            i64 nout, i64 W, V* __restrict__ out) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(t, nout * W) {
        const i64 j = t / W, e = t - j * W;
        const i64 k0 = starts[j], k1 = starts[j + 1];
        A s = to_acc(vals[perm[k0] * W + e]);
        for (i64 k = k0 + 1; k < k1; ++k) s = s + to_acc(vals[perm[k] * W + e]);
        out[t] = from_acc<V>(s);
    }
}

// out[j, e] = a[perm[k], e] * b[perm[k + 1] - na, e] with k = starts[j]: the pair of equal keys
// at k comes from a (positions < na) then b, the sort being stable.
// st:kernel arith
template <typename V>
__global__ void pair_products(const i64* __restrict__ perm, const i64* __restrict__ starts, i64 nout, i64 na,
                              const V* __restrict__ a, const V* __restrict__ b, i64 W, V* __restrict__ out) {
    ST_GRID_LOOP(t, nout * W) {
        const i64 j = t / W, e = t - j * W;
        const i64 k = starts[j];
        out[t] = from_acc<V>(to_acc(a[perm[k] * W + e]) * to_acc(b[(perm[k + 1] - na) * W + e]));
    }
}

// maximum (mx = 1) or minimum (mx = 0) over the runs of the stably sorted keys of two coalesced
// COO tensors (a's entries at positions < na, then b's): a run of one entry meets an implicit 0
// of the other operand; NaN propagates (np.maximum).
// st:kernel num
template <typename V>
__global__ void run_extremum(const i64* __restrict__ perm, const i64* __restrict__ starts, i64 nout, i64 na,
                             const V* __restrict__ a, const V* __restrict__ b, i64 W, int mx, V* __restrict__ out) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(t, nout * W) {
        const i64 j = t / W, e = t - j * W;
        const i64 k = starts[j], first = perm[k];
        const A p = first < na ? to_acc(a[first * W + e]) : to_acc(b[(first - na) * W + e]);
        const A q = starts[j + 1] - k > 1 ? to_acc(b[(perm[k + 1] - na) * W + e]) : acc_zero<A>();
        A v;
        if (p != p) v = p;
        else if (q != q) v = q;
        else v = mx ? (q > p ? q : p) : (q < p ? q : p);
        out[t] = from_acc<V>(v);
    }
}

}  // namespace st
