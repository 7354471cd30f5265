// Elementwise add (union of the patterns) and mul (intersection) of two compressed tensors
// of one layout, shape and blocksize, both canonical (every row sorted and distinct):
// merge_count counts every output row, an exclusive scan (scan.cu) places the rows, and
// merge_write merges each row again into its place. One thread per (batch, major slot).
#include "common.cuh"

#define MERGE_UNION 0
#define MERGE_INTERSECTION 1
#define MERGE_PLUS 2  // merge_write: the union with alpha == 1, b's values taken as they are (no multiply:
                      // 1 * (inf + 0i) would make the imaginary part NaN, where x + y keeps it)

namespace st {

// st:kernel index
template <typename I>
__global__ void merge_count(const I* __restrict__ ca, const I* __restrict__ pa, i64 nnza, const I* __restrict__ cb,
                            const I* __restrict__ pb, i64 nnzb, i64 B, i64 n, int mode, i64* __restrict__ counts) {
    ST_GRID_LOOP(t, B * n) {
        const i64 b = t / n, r = t - b * n;
        i64 i = ca[b * (n + 1) + r], ie = ca[b * (n + 1) + r + 1];
        i64 j = cb[b * (n + 1) + r], je = cb[b * (n + 1) + r + 1];
        const I* a = pa + b * nnza;
        const I* c = pb + b * nnzb;
        i64 count = 0;
        while (i < ie && j < je) {
            const i64 x = a[i], y = c[j];
            if (x < y) { ++i; count += mode == MERGE_UNION; }
            else if (y < x) { ++j; count += mode == MERGE_UNION; }
            else { ++i; ++j; ++count; }
        }
        if (mode == MERGE_UNION) count += (ie - i) + (je - j);
        counts[t] = count;
    }
}

// The merge of row r of batch b (t = b * n + r) of two canonical compressed tensors, written from
// offsets[t] on: for each output entry (the union, or the intersection) its plain index into po
// and emit(o, take_a, take_b, i, j) for its values (i, j: the positions in a and b, of this batch).
template <typename I, typename F>
__device__ __forceinline__ void merge_row(const I* __restrict__ ca, const I* __restrict__ pa, i64 nnza,
                                          const I* __restrict__ cb, const I* __restrict__ pb, i64 nnzb, i64 n,
                                          i64 t, int intersection, const i64* __restrict__ offsets,
                                          I* __restrict__ po, F& emit) {
    const i64 b = t / n, r = t - b * n;
    i64 i = ca[b * (n + 1) + r], ie = ca[b * (n + 1) + r + 1];
    i64 j = cb[b * (n + 1) + r], je = cb[b * (n + 1) + r + 1];
    const I* a = pa + b * nnza;
    const I* c = pb + b * nnzb;
    i64 o = offsets[t];
    while (i < ie || j < je) {
        const bool has_a = i < ie, has_b = j < je;
        const i64 x = has_a ? (i64)a[i] : 0, y = has_b ? (i64)c[j] : 0;
        const bool take_a = has_a && (!has_b || x <= y);
        const bool take_b = has_b && (!has_a || y <= x);
        if (!intersection || (take_a && take_b)) {
            po[o] = (I)(take_a ? x : y);
            emit(o, take_a, take_b, i, j);
            ++o;
        }
        i += take_a;
        j += take_b;
    }
}

// Union: a, alpha * b, or a + alpha * b; intersection: a * b. Entries have W items; offsets
// is the exclusive scan of merge_count (B * n + 1, global over batches).
// st:kernel arith index
template <typename V, typename I>
__global__ void merge_write(const I* __restrict__ ca, const I* __restrict__ pa, const V* __restrict__ va, i64 nnza,
                            const I* __restrict__ cb, const I* __restrict__ pb, const V* __restrict__ vb, i64 nnzb,
                            i64 B, i64 n, i64 W, int mode, double alpha_re, double alpha_im,
                            const i64* __restrict__ offsets, I* __restrict__ po, V* __restrict__ vo) {
    typedef typename acc<V>::type A;
    const A alpha = acc_scalar<A>(alpha_re, alpha_im);
    ST_GRID_LOOP(t, B * n) {
        const V* av = va + (t / n) * nnza * W;
        const V* cv = vb + (t / n) * nnzb * W;
        auto emit = [&](i64 o, bool take_a, bool take_b, i64 i, i64 j) {
            for (i64 e = 0; e < W; ++e) {
                A v;
                if (mode == MERGE_INTERSECTION) {
                    v = to_acc(av[i * W + e]) * to_acc(cv[j * W + e]);
                } else if (take_a && take_b) {
                    v = to_acc(av[i * W + e]) + (mode == MERGE_PLUS ? to_acc(cv[j * W + e]) : alpha * to_acc(cv[j * W + e]));
                } else if (take_a) {
                    v = to_acc(av[i * W + e]);
                } else {
                    v = mode == MERGE_PLUS ? to_acc(cv[j * W + e]) : alpha * to_acc(cv[j * W + e]);
                }
                vo[o * W + e] = from_acc<V>(v);
            }
        };
        merge_row(ca, pa, nnza, cb, pb, nnzb, n, t, mode == MERGE_INTERSECTION, offsets, po, emit);
    }
}

// maximum (mx = 1) or minimum (mx = 0) over the union of the patterns, an entry missing from one
// operand counting as 0; NaN propagates (np.maximum). Placed as merge_write (union counts).
// st:kernel num index
template <typename V, typename I>
__global__ void merge_extremum(const I* __restrict__ ca, const I* __restrict__ pa, const V* __restrict__ va,
                               i64 nnza, const I* __restrict__ cb, const I* __restrict__ pb,
                               const V* __restrict__ vb, i64 nnzb, i64 B, i64 n, i64 W, int mx,
                               const i64* __restrict__ offsets, I* __restrict__ po, V* __restrict__ vo) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(t, B * n) {
        const V* av = va + (t / n) * nnza * W;
        const V* cv = vb + (t / n) * nnzb * W;
        auto emit = [&](i64 o, bool take_a, bool take_b, i64 i, i64 j) {
            for (i64 e = 0; e < W; ++e) {
                const A p = take_a ? to_acc(av[i * W + e]) : acc_zero<A>();
                const A q = take_b ? to_acc(cv[j * W + e]) : acc_zero<A>();
                A v;
                if (p != p) v = p;
                else if (q != q) v = q;
                else v = mx ? (q > p ? q : p) : (q < p ? q : p);
                vo[o * W + e] = from_acc<V>(v);
            }
        };
        merge_row(ca, pa, nnza, cb, pb, nnzb, n, t, 0, offsets, po, emit);
    }
}

}  // namespace st
