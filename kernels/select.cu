// Selection and joining of compressed tensors (sparsetensor/_backend/cuda/_select.py): narrow,
// index_select and cat along a sparse dim, over the standard form (compressed (B, n + 1),
// plain (B, nnz), values (B, nnz, W) as raw items).
//
// Every op is a segment copy: each output slot receives one run of a source slot. A count
// kernel gives each slot's length and source start, an exclusive scan the output offsets
// (global over the batches: every batch has the same nnz), and copy_to_slots moves the entries,
// each thread finding its slot by a binary search over the monotone offsets. index_select
// along the plain dim maps every entry to its copies (remap_*), then sorts each slot when the
// index is not nondecreasing (a radix sort of slot_keys). cat along the plain dim copies each
// input's entries behind the previous inputs' in every slot (cat_plain_copy).
#include "common.cuh"

namespace st {

// Slot t = (b, k): the compressed slice rows[k] of batch b: its length and global source start.
// st:kernel index
template <typename I>
__global__ void gather_counts(const I* __restrict__ comp, i64 B, i64 n, i64 nnz, const i64* __restrict__ rows, i64 K,
                              i64* __restrict__ counts, i64* __restrict__ src) {
    ST_GRID_LOOP(t, B * K) {
        const i64 b = t / K, k = t - b * K;
        const I* c = comp + b * (n + 1);
        const i64 r = rows[k], lo = (i64)c[r];
        counts[t] = (i64)c[r + 1] - lo;
        src[t] = b * nnz + lo;
    }
}

// Slot t = (b, i): the entries of slice i of batch b whose plain index is in [lo, hi) (a binary
// search each end: the slices are sorted), their count and global source start.
// st:kernel index
template <typename I>
__global__ void plain_range(const I* __restrict__ comp, const I* __restrict__ plain, i64 B, i64 n, i64 nnz, i64 lo,
                            i64 hi, i64* __restrict__ counts, i64* __restrict__ src) {
    ST_GRID_LOOP(t, B * n) {
        const i64 b = t / n, i = t - b * n;
        const I* c = comp + b * (n + 1);
        const i64 s = (i64)c[i], len = (i64)c[i + 1] - s;
        const I* p = plain + b * nnz + s;
        const i64 first = lower_bound(p, len, (I)lo), last = lower_bound(p, len, (I)hi);
        counts[t] = last - first;
        src[t] = b * nnz + s + first;
    }
}

// Output entry j (of N) lies in slot s, off[s] <= j < off[s + 1] (off: S + 1 monotone global
// offsets); it is source entry src[s] + (j - off[s]): its plain index minus shift and its W items.
// st:kernel raw index
template <typename R, typename I>
__global__ void copy_to_slots(const i64* __restrict__ off, i64 S, const i64* __restrict__ src,
                              const I* __restrict__ plain, const R* __restrict__ vals, i64 W, i64 shift, i64 N,
                              I* __restrict__ out_plain, R* __restrict__ out_vals) {
    const i64 Wn = W > 0 ? W : 1;
    ST_GRID_LOOP(t, N * Wn) {
        const i64 j = t / Wn, e = t - j * Wn;
        const i64 s = slot_of(off, S, j);
        const i64 from = src[s] + (j - off[s]);
        if (e == 0) out_plain[j] = (I)((i64)plain[from] - shift);
        if (e < W) out_vals[j * W + e] = vals[from * W + e];
    }
}

// counts[e] = how many positions of the index hold plain[e] (first: the index's positions
// grouped by value, first[v] .. first[v + 1]).
// st:kernel index
template <typename I>
__global__ void remap_counts(const I* __restrict__ plain, i64 N, const i64* __restrict__ first,
                             i64* __restrict__ counts) {
    ST_GRID_LOOP(e, N) {
        const i64 v = (i64)plain[e];
        counts[e] = first[v + 1] - first[v];
    }
}

// out[b, i] = eoff[b * nnz + comp[b, i]] - eoff[b * nnz]: the compressed index of the remapped
// entries (eoff: the global exclusive scan of remap_counts).
// st:kernel index
template <typename I>
__global__ void remap_compressed(const I* __restrict__ comp, i64 B, i64 n, i64 nnz, const i64* __restrict__ eoff,
                                 I* __restrict__ out) {
    ST_GRID_LOOP(t, B * (n + 1)) {
        const i64 b = t / (n + 1);
        out[t] = (I)(eoff[b * nnz + (i64)comp[t]] - eoff[b * nnz]);
    }
}

// Output entry j is copy r of source entry e (eoff[e] <= j < eoff[e + 1]): plain index
// targets[first[plain[e]] + r] (the r-th position of the index holding plain[e]), e's W items.
// st:kernel raw index
template <typename R, typename I>
__global__ void remap_fill(const i64* __restrict__ eoff, i64 Nin, const I* __restrict__ plain,
                           const R* __restrict__ vals, i64 W, const i64* __restrict__ first,
                           const i64* __restrict__ targets, i64 N, I* __restrict__ out_plain, R* __restrict__ out_vals) {
    const i64 Wn = W > 0 ? W : 1;
    ST_GRID_LOOP(t, N * Wn) {
        const i64 j = t / Wn, w = t - j * Wn;
        const i64 e = slot_of(eoff, Nin, j);
        if (w == 0) out_plain[j] = (I)targets[first[(i64)plain[e]] + (j - eoff[e])];
        if (w < W) out_vals[j * W + w] = vals[e * W + w];
    }
}

// keys[b, k] = (b * n + the slot of entry k) * K + plain[b, k]: sorting them sorts every slot.
// st:kernel index
template <typename I>
__global__ void slot_keys(const I* __restrict__ comp, i64 B, i64 n, i64 nnz, const I* __restrict__ plain, i64 K,
                          u64* __restrict__ keys) {
    ST_GRID_LOOP(t, B * nnz) {
        const i64 b = t / nnz, k = t - b * nnz;
        const i64 slot = b * n + slot_of(comp + b * (n + 1), n, k);
        keys[t] = (u64)slot * (u64)K + (u64)(i64)plain[t];
    }
}

// acc[t] += comp[t] over (B, n + 1): the compressed index of a cat along the plain dim.
// st:kernel index
template <typename I>
__global__ void add_compressed(const I* __restrict__ comp, i64 N, i64* __restrict__ acc) {
    ST_GRID_LOOP(t, N) { acc[t] += (i64)comp[t]; }
}

// base[b * n + i] = acc[b, i] + b * total: where slot (b, i) of a cat's output starts (globally).
// st:kernel
__global__ void slot_starts(const i64* __restrict__ acc, i64 B, i64 n, i64 total, i64* __restrict__ base) {
    ST_GRID_LOOP(t, B * n) {
        const i64 b = t / n;
        base[t] = acc[t + b] + b * total;
    }
}

// One input of a cat along the plain dim: entry k of batch b, in slot i, goes to
// base[b * n + i] + (k - comp[b, i]) with its plain index plus shift.
// st:kernel raw index
template <typename R, typename I>
__global__ void cat_plain_copy(const I* __restrict__ comp, const I* __restrict__ plain, const R* __restrict__ vals,
                               i64 B, i64 n, i64 nnz, i64 W, i64 shift, const i64* __restrict__ base,
                               I* __restrict__ out_plain, R* __restrict__ out_vals) {
    const i64 Wn = W > 0 ? W : 1;
    ST_GRID_LOOP(t, B * nnz * Wn) {
        const i64 g = t / Wn, w = t - g * Wn;
        const i64 b = g / nnz, k = g - b * nnz;
        const I* c = comp + b * (n + 1);
        const i64 i = slot_of(c, n, k);
        const i64 j = base[b * n + i] + (k - (i64)c[i]);
        if (w == 0) out_plain[j] = (I)((i64)plain[g] + shift);
        if (w < W) out_vals[j * W + w] = vals[g * W + w];
    }
}

// base[b * n + i] += the length of slot (b, i) of comp: the next input goes behind this one.
// st:kernel index
template <typename I>
__global__ void advance_starts(const I* __restrict__ comp, i64 B, i64 n, i64* __restrict__ base) {
    ST_GRID_LOOP(t, B * n) {
        const i64 b = t / n;
        base[t] += (i64)comp[t + b + 1] - (i64)comp[t + b];
    }
}

// One input of a cat along the compressed dim: out[b, slot_off + i] = comp[b, i] + nnz_off for
// i < count (count: n, or n + 1 for the last input).
// st:kernel index
template <typename I>
__global__ void cat_compressed_index(const I* __restrict__ comp, i64 B, i64 n, i64 count, i64 slot_off, i64 nnz_off,
                                     i64 nout, I* __restrict__ out) {
    ST_GRID_LOOP(t, B * count) {
        const i64 b = t / count, i = t - b * count;
        out[b * (nout + 1) + slot_off + i] = (I)((i64)comp[b * (n + 1) + i] + nnz_off);
    }
}

// Rows (B, m, W) placed at row offset off of (B, total, W).
// st:kernel raw
template <typename R>
__global__ void place_rows(const R* __restrict__ in, i64 B, i64 m, i64 W, i64 total, i64 off, R* __restrict__ out) {
    ST_GRID_LOOP(t, B * m * W) {
        const i64 b = t / (m * W), r = t - b * m * W;
        out[(b * total + off) * W + r] = in[t];
    }
}

}  // namespace st
