// Layout conversions: compressed -> rows, stable transposes (through sort.cu), COO rows,
// gathers of whole entries, block transposes.
//
// csr -> csc (bsr -> bsc alike, over blocks), per batch b (sparsetensor/cuda/convert.py):
//   packed_major (position << rbits | row of every entry) and plain_keys (b * ncols + col)
//   -> radix sort of the keys carrying that payload (stable: rows stay sorted within a
//   column) -> lower_bounds of the sorted keys = the new compressed index -> unpack_major:
//   the rows (new plain indices) and the values moved (whole entries: blocks x dense dims).
//   When position and row do not fit 64 bits together: expand_major, positions as the
//   payload, and gather_rows of the rows and of the values.
#include "common.cuh"

namespace st {

// out[b, k] = the major slot (row of csr) holding position k of batch b. Needs 5.1-5.3.
// st:kernel index
template <typename I>
__global__ void expand_major(const I* __restrict__ comp, i64 B, i64 n, i64 nnz, I* __restrict__ out) {
    ST_GRID_LOOP(t, B * nnz) {
        const i64 b = t / nnz, k = t - b * nnz;
        out[t] = (I)slot_of(comp + b * (n + 1), n, k);
    }
}

// keys[b, k] = b * plain_size + plain[b, k].
// st:kernel index
template <typename I>
__global__ void plain_keys(const I* __restrict__ plain, i64 B, i64 nnz, i64 plain_size, u64* __restrict__ keys) {
    ST_GRID_LOOP(t, B * nnz) { keys[t] = (u64)(t / nnz) * (u64)plain_size + (u64)(i64)plain[t]; }
}

// out[t] = t << rbits | the major slot of position t (expand_major's): the sort payload of a
// transpose, so that the sorted payload gives both the new plain index and the entry to move.
// st:kernel index
template <typename I>
__global__ void packed_major(const I* __restrict__ comp, i64 B, i64 n, i64 nnz, int rbits, u64* __restrict__ out) {
    ST_GRID_LOOP(t, B * nnz) {
        const i64 b = t / nnz, k = t - b * nnz;
        out[t] = ((u64)t << rbits) | (u64)slot_of(comp + b * (n + 1), n, k);
    }
}

// The sorted payload of packed_major: plain[j] = its slot (the low rbits bits) and
// out[j, :] = in[its position, :] for rows of W items of raw type R.
// st:kernel raw index
template <typename R, typename I>
__global__ void unpack_major(const u64* __restrict__ payload, i64 N, int rbits, const R* __restrict__ in, i64 W,
                             I* __restrict__ plain, R* __restrict__ out) {
    const u64 mask = (1ull << rbits) - 1ull;
    const i64 Wl = W > 0 ? W : 1;  // one lane per entry even when entries have no items (plain is still due)
    ST_GRID_LOOP(t, N * Wl) {
        const i64 j = t / Wl, e = t - j * Wl;
        const u64 pl = payload[j];
        if (e == 0) plain[j] = (I)(i64)(pl & mask);
        if (e < W) out[j * W + e] = in[(i64)(pl >> rbits) * W + e];
    }
}

// out[j, :] = in[perm[j], :] for rows of W items of raw type R.
// st:kernel raw
template <typename R>
__global__ void gather_rows(const R* __restrict__ in, const i64* __restrict__ perm, i64 nrows, i64 W,
                            R* __restrict__ out) {
    ST_GRID_LOOP(t, nrows * W) {
        const i64 j = t / W, e = t - j * W;
        out[t] = in[perm[j] * W + e];
    }
}

// COO indices (m + 2, B * nnz) of a csr tensor with batch shape batch_shape[0..m):
// the batch coordinates of b, the row major[b, k] and the column plain[b, k].
// st:kernel index
template <typename I>
__global__ void rows_to_coo_indices(const I* __restrict__ major, const I* __restrict__ plain, i64 B, i64 nnz, i64 m,
                                    const i64* __restrict__ batch_shape, I* __restrict__ out) {
    const i64 N = B * nnz;
    ST_GRID_LOOP(t, N) {
        i64 b = t / nnz;
        for (i64 d = m - 1; d >= 0; --d) {
            const i64 s = batch_shape[d];
            out[d * N + t] = (I)(b % s);
            b /= s;
        }
        out[m * N + t] = major[t];
        out[(m + 1) * N + t] = plain[t];
    }
}

// Blocks (nblocks, Rb, Cb, W) -> (nblocks, Cb, Rb, W): the values of a bsr <-> bsc view.
// st:kernel raw
template <typename R>
__global__ void transpose_blocks(const R* __restrict__ in, i64 nblocks, i64 Rb, i64 Cb, i64 W, R* __restrict__ out) {
    ST_GRID_LOOP(t, nblocks * Rb * Cb * W) {
        // t indexes out: (k, j, i, e)
        const i64 e = t % W;
        i64 u = t / W;
        const i64 i = u % Rb;
        u /= Rb;
        const i64 j = u % Cb;
        const i64 k = u / Cb;
        out[t] = in[((k * Rb + i) * Cb + j) * W + e];
    }
}

// keys[b, k] = (b * n + major[b, k]) * plain_size + plain[b, k]: entries of a compressed tensor
// in (batch, row, column) order (sum_duplicates).
// st:kernel index
template <typename I>
__global__ void compressed_keys(const I* __restrict__ major, const I* __restrict__ plain, i64 B, i64 n, i64 nnz,
                                i64 plain_size, u64* __restrict__ keys) {
    ST_GRID_LOOP(t, B * nnz) {
        const u64 row = (u64)(t / nnz) * (u64)n + (u64)(i64)major[t];
        keys[t] = row * (u64)plain_size + (u64)(i64)plain[t];
    }
}

// The key at starts[j] of compressed_keys, split: major_keys[j] = (b * n + row), plain[j] = column.
// st:kernel index
template <typename I>
__global__ void split_keys(const u64* __restrict__ sorted, const i64* __restrict__ starts, i64 nout, i64 plain_size,
                           u64* __restrict__ major_keys, I* __restrict__ plain) {
    ST_GRID_LOOP(j, nout) {
        const u64 key = sorted[starts[j]];
        major_keys[j] = key / (u64)plain_size;
        plain[j] = (I)(key % (u64)plain_size);
    }
}

// -- blocks: grouping entries (csr -> bsr, csc -> bsc) and expanding them --------------------------
// Geometry (sparsetensor/_backend/cuda/_convert.py, the CPU's _block_geometry): a block spans bc
// slots of the compressed dim and bp of the plain dim; an item at offsets (dc, dp) along them is
// item dc * sc + dp * sp of the flattened (Rb, Cb) block.

// keys[b, k] = (b * nbr + major[b, k] / bc) * nbp + plain[b, k] / bp: the block of every entry, in
// (batch, block row, block column) order.
// st:kernel index
template <typename I>
__global__ void block_keys(const I* __restrict__ major, const I* __restrict__ plain, i64 B, i64 nnz, i64 bc,
                           i64 nbr, i64 bp, i64 nbp, u64* __restrict__ keys) {
    ST_GRID_LOOP(t, B * nnz) {
        const u64 brow = (u64)(t / nnz) * (u64)nbr + (u64)((i64)major[t] / bc);
        keys[t] = brow * (u64)nbp + (u64)((i64)plain[t] / bp);
    }
}

// Entries into their blocks: sorted position j (of block_keys, sorted stably) holds entry
// perm[j], whose block is run scan[j + 1] - 1 (scan: exclusive scan of the run heads). out is
// zero-filled (nblocks, bc * bp, W); every entry owns one item of one block, so no two threads
// write one place.
// st:kernel raw index
template <typename R, typename I>
__global__ void group_scatter(const i64* __restrict__ perm, const i64* __restrict__ scan, const I* __restrict__ major,
                              const I* __restrict__ plain, i64 N, i64 bc, i64 bp, i64 sc, i64 sp, i64 W,
                              const R* __restrict__ in, R* __restrict__ out) {
    ST_GRID_LOOP(t, N * W) {
        const i64 j = t / W, e = t - j * W;
        const i64 src = perm[j], blk = scan[j + 1] - 1;
        const i64 item = ((i64)major[src] % bc) * sc + ((i64)plain[src] % bp) * sp;
        out[(blk * bc * bp + item) * W + e] = in[src * W + e];
    }
}

// The compressed index (B, n * bc + 1) of the expansion of blocked comp (B, n + 1): slot
// I * bc + dc starts after the items of the earlier block slots and dc rows of block slot I.
// st:kernel index
template <typename I>
__global__ void expand_compressed(const I* __restrict__ comp, i64 B, i64 n, i64 bc, i64 bp, I* __restrict__ out) {
    const i64 no = n * bc;
    ST_GRID_LOOP(t, B * (no + 1)) {
        const i64 b = t / (no + 1), r = t - b * (no + 1);
        const I* c = comp + b * (n + 1);
        if (r == no) {
            out[t] = (I)((i64)c[n] * bc * bp);
        } else {
            const i64 I0 = r / bc, dc = r - I0 * bc;
            out[t] = (I)((i64)c[I0] * bc * bp + dc * ((i64)c[I0 + 1] - (i64)c[I0]) * bp);
        }
    }
}

// Every item of every block an entry: item (dc, dp) of block k (block slot I of batch b) goes to
// the position of slot I * bc + dc (out_comp, expand_compressed's) plus the items of the earlier
// blocks of that slot, with plain index plain[k] * bp + dp. Rows of W raw items move.
// st:kernel raw index
template <typename R, typename I>
__global__ void expand_blocks(const I* __restrict__ comp, const I* __restrict__ plain, const R* __restrict__ in,
                              i64 B, i64 n, i64 nnz, i64 bc, i64 bp, i64 sc, i64 sp, i64 W,
                              const I* __restrict__ out_comp, I* __restrict__ out_plain, R* __restrict__ out) {
    const i64 RC = bc * bp, Wl = W > 0 ? W : 1;  // one lane per entry even when entries have no items
    ST_GRID_LOOP(t, B * nnz * RC * Wl) {
        const i64 e = t % Wl, u = t / Wl;
        const i64 q = u % RC, k = u / RC;
        const i64 dc = q / bp, dp = q - dc * bp;
        const i64 b = k / nnz, kl = k - b * nnz;
        const I* c = comp + b * (n + 1);
        const i64 slot = slot_of(c, n, kl);
        const i64 pos = b * nnz * RC + (i64)out_comp[b * (n * bc + 1) + slot * bc + dc] + (kl - (i64)c[slot]) * bp + dp;
        if (e == 0) out_plain[pos] = (I)((i64)plain[k] * bp + dp);
        if (e < W) out[pos * W + e] = in[(k * RC + dc * sc + dp * sp) * W + e];
    }
}

}  // namespace st
