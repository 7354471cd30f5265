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
//
// Beside them: COO index_select (remap_counts/remap_fill on the index row, coo_copy_rows for
// the others), nonzero and count_nonzero (nonzero_coords, kept_keys), and the selections and
// concatenations along batch and dense dims, which move whole array slabs (take_axis,
// place_block).
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

// The slot of each coordinate among the sorted distinct values u of an index: value u[i] is slot
// 2i + 1, a coordinate between u[i - 1] and u[i] (selected by none) slot 2i, so slots keep the
// coordinates' order. Where a dim dwarfs the index and the entries, the selection's map (first)
// covers the 2K + 1 slots instead of every coordinate.
// st:kernel index
template <typename I>
__global__ void index_slots(const I* __restrict__ coords, i64 N, const i64* __restrict__ u, i64 K, I* __restrict__ out) {
    ST_GRID_LOOP(e, N) {
        const i64 c = (i64)coords[e];
        i64 lo = 0, hi = K;
        while (lo < hi) {
            const i64 mid = lo + ((hi - lo) >> 1);
            if (u[mid] < c) lo = mid + 1;
            else hi = mid;
        }
        out[e] = (I)(2 * lo + (lo < K && u[lo] == c ? 1 : 0));
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

// -- nonzero, count_nonzero -------------------------------------------------------------------------
// The coordinates (nout, S + nd), int64, of every item p = entry * D + item of a coalesced COO
// tensor (indices (S, N), dense shape dense_shape[0..nd), D items an entry) that dense.cu's
// dense_nonzero flagged: row scan[p] gets the entry's indices and the item's dense coordinates,
// so rows come in row-major order (entries are sorted, items row-major within one).
// st:kernel index
template <typename I>
__global__ void nonzero_coords(const i64* __restrict__ scan, const I* __restrict__ idx, i64 N, i64 S, i64 D,
                               const i64* __restrict__ dense_shape, i64 nd, i64* __restrict__ out) {
    ST_GRID_LOOP(p, N * D) {
        if (scan[p + 1] == scan[p]) continue;
        i64* row = out + scan[p] * (S + nd);
        const i64 entry = p / D;
        i64 item = p - entry * D;
        for (i64 s = 0; s < S; ++s) row[s] = (i64)idx[s * N + entry];
        for (i64 d = nd - 1; d >= 0; --d) {
            row[S + d] = item % dense_shape[d];
            item /= dense_shape[d];
        }
    }
}

// keys[j] = the row-major offset of coordinate row j (of coords (n, ndim)) over the kept dims
// kept[0..nk) of sizes kept_shape: count_nonzero sorts these and counts the runs.
// st:kernel
__global__ void kept_keys(const i64* __restrict__ coords, i64 n, i64 ndim, const i64* __restrict__ kept,
                          const i64* __restrict__ kept_shape, i64 nk, u64* __restrict__ keys) {
    ST_GRID_LOOP(j, n) {
        u64 k = 0;
        for (i64 i = 0; i < nk; ++i) k = k * (u64)kept_shape[i] + (u64)coords[j * ndim + kept[i]];
        keys[j] = k;
    }
}

// out[j] = ptr[j + 1] - ptr[j].
// st:kernel
__global__ void adjacent_diff(const i64* __restrict__ ptr, i64 n, i64* __restrict__ out) {
    ST_GRID_LOOP(j, n) { out[j] = ptr[j + 1] - ptr[j]; }
}

// -- COO index_select, and selections along batch and dense dims -----------------------------------
// The index rows but row d of COO output entry j, copy j - eoff[e] of source entry e
// (eoff[e] <= j < eoff[e + 1]); remap_fill writes row d and the values.
// st:kernel index
template <typename I>
__global__ void coo_copy_rows(const i64* __restrict__ eoff, i64 Nin, const I* __restrict__ idx, i64 S, i64 d, i64 N,
                              I* __restrict__ out) {
    ST_GRID_LOOP(t, S * N) {
        const i64 s = t / N, j = t - s * N;
        if (s == d) continue;
        out[t] = idx[s * Nin + slot_of(eoff, Nin, j)];
    }
}

// out (pre, K, post) = in (pre, size, post) taken at idx[0..K) along the middle axis (NumPy's
// take along an axis; the indices are in [0, size)).
// st:kernel raw
template <typename R>
__global__ void take_axis(const R* __restrict__ in, i64 pre, i64 size, i64 post, const i64* __restrict__ idx, i64 K,
                          R* __restrict__ out) {
    ST_GRID_LOOP(t, pre * K * post) {
        const i64 e = t % post, u = t / post;
        const i64 k = u % K, p = u / K;
        out[t] = in[(p * size + idx[k]) * post + e];
    }
}

// -- cat and stack along batch and dense dims, cat of COO ------------------------------------------
// in (n, A, m, C) placed at rows [row, row + n) and columns [col, col + m) of out (*, A, total, C):
// an input's part of a concatenation along one axis (n = 1), or its zero-padded values in a cat
// of COO tensors along a dense dim.
// st:kernel raw
template <typename R>
__global__ void place_block(const R* __restrict__ in, i64 n, i64 A, i64 m, i64 C, i64 row, i64 col, i64 total,
                            R* __restrict__ out) {
    ST_GRID_LOOP(t, n * A * m * C) {
        const i64 c = t % C;
        i64 u = t / C;
        const i64 j = u % m;
        u /= m;
        const i64 a = u % A, i = u / A;
        out[(((row + i) * A + a) * total + col + j) * C + c] = in[t];
    }
}

// a[0..n) += by (a COO input's coordinates along the cat dim, moved behind the earlier inputs).
// st:kernel index
template <typename I>
__global__ void shift_range(I* __restrict__ a, i64 n, i64 by) {
    ST_GRID_LOOP(t, n) { a[t] = (I)((i64)a[t] + by); }
}

// flags[k] = 1 where lo <= a[k] < hi, else 0 (the entries of one COO coordinate row that narrow keeps).
// st:kernel index
template <typename I>
__global__ void range_flags(const I* __restrict__ a, i64 n, i64 lo, i64 hi, i64* __restrict__ flags) {
    ST_GRID_LOOP(t, n) {
        const i64 x = (i64)a[t];
        flags[t] = x >= lo && x < hi;
    }
}

// out[t] = a[t] + size where a[t] < 0, else a[t], as int64: a device index array's negative entries
// counted from the end (t[index], as NumPy), after its bounds were checked.
// st:kernel index
template <typename I>
__global__ void wrap_negative(const I* __restrict__ a, i64 n, i64 size, i64* __restrict__ out) {
    ST_GRID_LOOP(t, n) {
        const i64 v = (i64)a[t];
        out[t] = v < 0 ? v + size : v;
    }
}

// *differ = 1 if index arrays a[0..n) and b[0..n) differ anywhere (differ zeroed first; every
// writer stores 1).
// st:kernel index
template <typename I>
__global__ void any_differ(const I* __restrict__ a, const I* __restrict__ b, i64 n, i64* __restrict__ differ) {
    ST_GRID_LOOP(t, n) {
        if (a[t] != b[t]) relaxed_store(differ, (i64)1);
    }
}

// -- keeping a subset of COO entries (tril, triu, eliminate_zeros) ---------------------------------
// flags[k] = 1 where entry k lies on the kept side of diagonal k0: idx[c, k] * cs - idx[r, k] * rs
// <= k0 (lower) or >= k0 (upper); the scales are a block's size (1 for elements).
// st:kernel index
template <typename I>
__global__ void triangle_flags(const I* __restrict__ idx, i64 N, i64 r, i64 c, i64 rs, i64 cs, i64 k0, int upper,
                               i64* __restrict__ flags) {
    ST_GRID_LOOP(k, N) {
        const i64 off = (i64)idx[c * N + k] * cs - (i64)idx[r * N + k] * rs;
        flags[k] = (upper ? off >= k0 : off <= k0) ? 1 : 0;
    }
}

// out (N, W) = the rows of in (Nin, W) whose flags were set, in order: row j is row e of in
// with eoff[e] <= j < eoff[e + 1] (eoff the exclusive scan of 0/1 flags).
// st:kernel raw
template <typename R>
__global__ void keep_rows(const i64* __restrict__ eoff, i64 Nin, const R* __restrict__ in, i64 W, i64 N,
                          R* __restrict__ out) {
    ST_GRID_LOOP(t, N * W) {
        const i64 j = t / W, w = t - j * W;
        out[t] = in[slot_of(eoff, Nin, j) * W + w];
    }
}

// Kronecker product of COO entries (ia (S, na) with ib (S, nb)): the pair of entry i of a with entry j
// of b is out[d, t] = ia[d, i] * bshape[d] + ib[d, j], pa[t] = i, pb[t] = j. Unless by_runs, t = i * nb + j.
// by_runs (two coalesced matrices) writes them sorted, as the host does (no sort after): A's run of
// row ra (entries sa .. sa + la) with B's run of row rb (sb .. sb + lb) make output row
// ra * bshape[0] + rb, at offsets from sa * nb + la * sb: la pieces of lb, one per A entry, each
// ascending in B's columns. (Two coalesced vectors are one run each: t = i * nb + j is sorted.)
// st:kernel index index
template <typename I, typename J>
__global__ void kron_pairs(const I* __restrict__ ia, i64 na, const I* __restrict__ ib, i64 nb, i64 S,
                           const i64* __restrict__ bshape, i64 by_runs, J* __restrict__ out,
                           i64* __restrict__ pa, i64* __restrict__ pb) {
    const i64 n = na * nb;
    const bool runs = by_runs && S == 2;
    ST_GRID_LOOP(t, n) {
        i64 sa = 0, la = na, sb = 0, lb = nb;
        if (runs) {
            const I row = ia[t / nb];
            sa = lower_bound(ia, na, row);
            la = lower_bound(ia, na, (I)(row + 1)) - sa;
        }
        la = la > 0 ? la : 1;  // rows changed since their check: no division by zero
        const i64 r = t - sa * nb;
        if (runs) {
            const i64 f = r / la;
            const I row = ib[f < 0 ? 0 : (f < nb ? f : nb - 1)];
            sb = lower_bound(ib, nb, row);
            lb = lower_bound(ib, nb, (I)(row + 1)) - sb;
        }
        lb = lb > 0 ? lb : 1;
        const i64 q = r - la * sb, k = q / lb;
        i64 i = sa + k, j = sb + (q - k * lb);
        i = i < 0 ? 0 : (i < na ? i : na - 1);
        j = j < 0 ? 0 : (j < nb ? j : nb - 1);
        for (i64 d = 0; d < S; ++d) out[d * n + t] = (J)((i64)ia[d * na + i] * bshape[d] + (i64)ib[d * nb + j]);
        pa[t] = i;
        pb[t] = j;
    }
}

// The compressed index of the kept entries: out[b, i] = eoff[b * nnz + c[b, i]] - eoff[b * nnz],
// eoff the exclusive scan of the 0/1 flags of the B batches' nnz entries each (c in [0, nnz]).
// st:kernel index
template <typename I>
__global__ void kept_offsets(const I* __restrict__ c, i64 B, i64 n, i64 nnz, const i64* __restrict__ eoff,
                             I* __restrict__ out) {
    ST_GRID_LOOP(t, B * (n + 1)) {
        const i64 b = t / (n + 1);
        i64 k = (i64)c[t];
        k = k < 0 ? 0 : (k > nnz ? nnz : k);  // a compressed index changed since its check reads in range
        out[t] = (I)(eoff[b * nnz + k] - eoff[b * nnz]);
    }
}

}  // namespace st
