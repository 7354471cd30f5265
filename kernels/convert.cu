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
    ST_GRID_LOOP(t, N * W) {
        const i64 j = t / W, e = t - j * W;
        const u64 pl = payload[j];
        if (e == 0) plain[j] = (I)(i64)(pl & mask);
        out[t] = in[(i64)(pl >> rbits) * W + e];
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

}  // namespace st
