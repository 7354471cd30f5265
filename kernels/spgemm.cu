// Sparse @ sparse (SpGEMM) by expand, sort, compress (ESC) over rows-compressed operands
// (csr @ csr, bsr @ bsr; batch b of a times batch b of b). sparsetensor/_backend/cuda/_spgemm.py
// drives the passes:
//   spgemm_counts (products of every entry of a: the length of b's row it meets)
//   -> exclusive scan = offsets, each entry's first product; the total is the product count P
//   -> spgemm_entry_rows (b * n + row of every entry of a)
//   -> spgemm_expand (one u64 key a product: (b * n + row) * ncols + column of the product)
//   -> radix sort of the keys (sort.cu; stable: a run keeps its products in the order of a's
//      entries, then b's) -> run_heads, scan, run_starts (coalesce.cu): one output entry a run
//   -> split_keys (convert.cu: the row key and the column of every output entry)
//   -> spgemm_values / spgemm_values_int (every output item sums its run's products).
// The products are located from their index q alone (a binary search over offsets), so that
// nothing but the keys and the sort's permutation is kept per product.
#include "common.cuh"

namespace st {

// counts[t] = the length of row ap[t] of b (batch t / nnza): how many products entry t forms.
// st:kernel index
template <typename I>
__global__ void spgemm_counts(const I* __restrict__ ap, i64 B, i64 nnza, const I* __restrict__ bc, i64 nb,
                              i64* __restrict__ counts) {
    ST_GRID_LOOP(t, B * nnza) {
        const I* c = bc + (t / nnza) * (nb + 1);
        const i64 k = (i64)ap[t];
        counts[t] = (i64)c[k + 1] - (i64)c[k];
    }
}

// rows[t] = b * n + the row (major slot) holding entry t of batch b of a: the row part of its keys.
// st:kernel index
template <typename I>
__global__ void spgemm_entry_rows(const I* __restrict__ ac, i64 B, i64 n, i64 nnza, i64* __restrict__ rows) {
    ST_GRID_LOOP(t, B * nnza) {
        const i64 b = t / nnza;
        rows[t] = b * n + slot_of(ac + b * (n + 1), n, t - b * nnza);
    }
}

// Product q: the entry t of a that forms it (offsets[t] <= q < offsets[t + 1], N entries in all)
// and its position in b's entries (over every batch).
template <typename I>
__device__ __forceinline__ void locate(i64 q, const i64* __restrict__ offsets, i64 N, const I* __restrict__ ap,
                                       i64 nnza, const I* __restrict__ bc, i64 nb, i64 nnzb, i64* t, i64* pos) {
    const i64 e = slot_of(offsets, N, q);
    const i64 b = e / nnza;
    *t = e;
    *pos = b * nnzb + (i64)bc[b * (nb + 1) + (i64)ap[e]] + (q - offsets[e]);
}

// keys[q] = rows[t] * ncols + the column of product q (its entry of b): the caller checked that
// B * n * ncols fits 64 bits.
// st:kernel index
template <typename I>
__global__ void spgemm_expand(const i64* __restrict__ offsets, i64 N, const i64* __restrict__ rows,
                              const I* __restrict__ ap, i64 nnza, const I* __restrict__ bc, const I* __restrict__ bp,
                              i64 nb, i64 nnzb, i64 ncols, i64 P, u64* __restrict__ keys) {
    ST_GRID_LOOP(q, P) {
        i64 t, pos;
        locate(q, offsets, N, ap, nnza, bc, nb, nnzb, &t, &pos);
        keys[q] = (u64)rows[t] * (u64)ncols + (u64)(i64)bp[pos];
    }
}

// s + a * b; 64-bit integers in unsigned arithmetic, which wraps (signed overflow is undefined).
template <typename A> __device__ __forceinline__ A mul_add(A s, A a, A b) { return s + a * b; }
template <> __device__ __forceinline__ i64 mul_add<i64>(i64 s, i64 a, i64 b) {
    return (i64)((u64)s + (u64)a * (u64)b);
}

// Item u = (j, r, c) of output block j (Rb x Cb): the sum over the run's products q (sorted
// positions starts[j] .. starts[j + 1], perm[x] = q, in the order of a's entries then b's) of
// block row r of a's entry times block column c of b's entry. Unblocked: Rb = Kb = Cb = 1.
template <typename V, typename I>
__device__ __forceinline__ typename acc<V>::type run_sum(i64 u, const i64* __restrict__ perm,
                                                         const i64* __restrict__ starts, const i64* __restrict__ offsets,
                                                         i64 N, const I* __restrict__ ap, const V* __restrict__ av,
                                                         i64 nnza, const I* __restrict__ bc, const V* __restrict__ bv,
                                                         i64 nb, i64 nnzb, i64 Rb, i64 Kb, i64 Cb) {
    typedef typename acc<V>::type A;
    const i64 RC = Rb * Cb;
    const i64 j = u / RC, r = (u - j * RC) / Cb, c = u - j * RC - r * Cb;
    A s = acc_zero<A>();
    for (i64 x = starts[j]; x < starts[j + 1]; ++x) {
        i64 t, pos;
        locate(perm[x], offsets, N, ap, nnza, bc, nb, nnzb, &t, &pos);
        const V* arow = av + (t * Rb + r) * Kb;
        const V* bcol = bv + pos * Kb * Cb + c;
        for (i64 k = 0; k < Kb; ++k) s = mul_add(s, to_acc(arow[k]), to_acc(bcol[k * Cb]));
    }
    return s;
}

// Floating and complex values (float16 summed in float32, rounded once).
// st:kernel value index
template <typename V, typename I>
__global__ void spgemm_values(const i64* __restrict__ perm, const i64* __restrict__ starts, i64 nout,
                              const i64* __restrict__ offsets, i64 N, const I* __restrict__ ap, const V* __restrict__ av,
                              i64 nnza, const I* __restrict__ bc, const V* __restrict__ bv, i64 nb, i64 nnzb, i64 Rb,
                              i64 Kb, i64 Cb, V* __restrict__ out) {
    ST_GRID_LOOP(u, nout * Rb * Cb) {
        out[u] = from_acc<V>(run_sum(u, perm, starts, offsets, N, ap, av, nnza, bc, bv, nb, nnzb, Rb, Kb, Cb));
    }
}

// Integers (summed in 64 bits, wrapped to the value type when written: the same result as
// wrapping at every step) and bool as uint8 (logical != 0: an or of ands).
// st:kernel num index
template <typename V, typename I>
__global__ void spgemm_values_int(const i64* __restrict__ perm, const i64* __restrict__ starts, i64 nout,
                                  const i64* __restrict__ offsets, i64 N, const I* __restrict__ ap,
                                  const V* __restrict__ av, i64 nnza, const I* __restrict__ bc,
                                  const V* __restrict__ bv, i64 nb, i64 nnzb, i64 Rb, i64 Kb, i64 Cb, int logical,
                                  V* __restrict__ out) {
    ST_GRID_LOOP(u, nout * Rb * Cb) {
        typedef typename acc<V>::type A;
        const A s = run_sum(u, perm, starts, offsets, N, ap, av, nnza, bc, bv, nb, nnzb, Rb, Kb, Cb);
        out[u] = from_acc<V>(logical ? (A)(s != A(0)) : s);
    }
}

}  // namespace st
