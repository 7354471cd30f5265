// Sparse-dense products of csr/bsr tensors (batched: A has B batches; the dense operand
// has B batches of its own or one shared, x_bstride = 0), and sampled dense-dense
// products (SDDMM). Accumulation in acc<V> (float16 in float32, rounded once).
#include "common.cuh"
#include "scan.cuh"

namespace st {

// s + vals[k] * x[plain[k]] over k = first, first + step, ... < end, in that order:
// SPMV_BATCH entries' loads issued before their products (one memory latency per
// SPMV_BATCH entries), and the last ones (fewer) together too. On an H100, 2 (32
// registers) beat 4 (40) and 8 (56) by 4-9% on uniform, stencil and R-MAT rows, each
// with its best threads a row (session 13's sweep).
#ifndef SPMV_BATCH  // a compile option, for timing variants
#define SPMV_BATCH 2
#endif
template <typename V, typename I, typename A>
__device__ __forceinline__ A strided_dot(const I* __restrict__ p, const V* __restrict__ v, const V* __restrict__ xb,
                                         i64 k, i64 end, i64 step, A s) {
    for (; k + (SPMV_BATCH - 1) * step < end; k += SPMV_BATCH * step) {
        i64 pj[SPMV_BATCH];
        A vj[SPMV_BATCH], xj[SPMV_BATCH];
        for (int u = 0; u < SPMV_BATCH; ++u) pj[u] = p[k + u * step];
        for (int u = 0; u < SPMV_BATCH; ++u) vj[u] = to_acc(v[k + u * step]);
        for (int u = 0; u < SPMV_BATCH; ++u) xj[u] = to_acc(xb[pj[u]]);
        for (int u = 0; u < SPMV_BATCH; ++u) s = s + vj[u] * xj[u];
    }
    if (k < end) {  // the last entries (fewer than SPMV_BATCH), their loads issued together as well
        i64 pj[SPMV_BATCH - 1];
        A vj[SPMV_BATCH - 1], xj[SPMV_BATCH - 1];
        bool has[SPMV_BATCH - 1];
        for (int u = 0; u < SPMV_BATCH - 1; ++u) has[u] = k + u * step < end;
        for (int u = 0; u < SPMV_BATCH - 1; ++u) pj[u] = has[u] ? (i64)p[k + u * step] : 0;
        for (int u = 0; u < SPMV_BATCH - 1; ++u) vj[u] = has[u] ? to_acc(v[k + u * step]) : acc_zero<A>();
        for (int u = 0; u < SPMV_BATCH - 1; ++u) xj[u] = to_acc(xb[has[u] ? pj[u] : pj[0]]);  // absent: x[p0]
        for (int u = 0; u < SPMV_BATCH - 1; ++u)
            if (has[u]) s = s + vj[u] * xj[u];  // not added when absent: 0 * inf would be NaN
    }
    return s;
}

// y[b, r] = sum_k vals[b, k] * x[b, plain[b, k]] over row r: `tpr` threads (a power of two
// <= 32) per row, reduced with shuffles; each thread takes every tpr-th entry, SPMV_BATCH at
// a time (their loads in flight together: a row costs one memory latency per SPMV_BATCH
// of its entries a thread, not one per entry). Rows longer than `long_len` are skipped here:
// csr_spmv_long_part and csr_long_sum write them where the host listed them, else (long_list
// not null) they are listed in long_list[0..long_count[0]) for csr_spmv_long_rows. Every warp
// runs its loop the same number of times (warp-uniform bounds), so the full-mask shuffles
// never diverge.
// st:kernel arith index
template <typename V, typename I>
__global__ void csr_spmv(const I* __restrict__ comp, const I* __restrict__ plain, const V* __restrict__ vals, i64 B,
                         i64 nrows, i64 nnz, const V* __restrict__ x, i64 x_bstride, V* __restrict__ y, int tpr,
                         i64 long_len, unsigned long long* __restrict__ long_count, i64* __restrict__ long_list) {
    typedef typename acc<V>::type A;
    const ThreadGroups tg = thread_groups(tpr);
    const int lane = tg.lane;
    const i64 total = B * nrows;
    for (i64 base = tg.warp_first; base < total; base += tg.stride) {
        const i64 row = tg.group + (base - tg.warp_first);
        A s = acc_zero<A>();
        bool mine = false;
        if (row < total) {
            const i64 b = B == 1 ? 0 : row / nrows, r = row - b * nrows;  // a 64-bit division is ~70 instructions
            const I* c = comp + b * (nrows + 1);
            const I* p = plain + b * nnz;
            const V* v = vals + b * nnz;
            const V* xb = x + b * x_bstride;
            const i64 beg = c[r], end = c[r + 1];
            mine = end - beg <= long_len;
            if (mine) {
                s = strided_dot(p, v, xb, beg + lane, end, (i64)tpr, s);
            } else if (long_list != nullptr && lane == 0) {
                long_list[atomicAdd(long_count, 1ull)] = row;
            }
        }
        for (int off = tpr / 2; off > 0; off >>= 1) s = s + shfl_down(s, off, tpr);
        if (mine && lane == 0) y[row] = from_acc<V>(s);
    }
}

// Piece q of the long rows (see csr_spmv_long_part): its batch b and entries [beg, end).
template <typename I>
__device__ __forceinline__ void long_piece(const I* __restrict__ comp, i64 nrows, const i64* __restrict__ long_rows,
                                           const i64* __restrict__ item_slot, const i64* __restrict__ first,
                                           i64 piece, i64 q, i64* b, i64* beg, i64* end) {
    const i64 slot = item_slot[q], row = long_rows[slot];
    *b = row / nrows;
    const I* c = comp + *b * (nrows + 1);
    const i64 r = row - *b * nrows, stop = c[r + 1];
    *beg = (i64)c[r] + (q - first[slot]) * piece;
    *end = *beg + piece < stop ? *beg + piece : stop;
}

// The long rows of an SpMV (longer than csr_spmv's long_len), in pieces of at most `piece`
// entries: piece q of long row long_rows[slot] (a row of all batches, b * nrows + r) is item
// q = first[slot] + j, holding that row's entries j * piece ... (j + 1) * piece - 1.
// part[q] = the sum of its products, one warp per item (a lane takes every 32nd entry, four
// loads in flight; shuffles sum the lanes): a row of a few hundred entries costs one warp,
// not a block and its barriers.
// st:kernel arith index
template <typename V, typename I>
__global__ void csr_spmv_long_part(const I* __restrict__ comp, const I* __restrict__ plain,
                                   const V* __restrict__ vals, i64 nrows, i64 nnz, const V* __restrict__ x,
                                   i64 x_bstride, const i64* __restrict__ long_rows,
                                   const i64* __restrict__ item_slot, const i64* __restrict__ first, i64 nitems,
                                   i64 piece, typename acc<V>::type* __restrict__ part) {
    typedef typename acc<V>::type A;
    const int lane = threadIdx.x & 31;
    const i64 gwarp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const i64 nwarps = (i64)gridDim.x * blockDim.x / 32;
    for (i64 q = gwarp; q < nitems; q += nwarps) {  // q is the same for the whole warp
        i64 b, beg, end;
        long_piece(comp, nrows, long_rows, item_slot, first, piece, q, &b, &beg, &end);
        A s = strided_dot(plain + b * nnz, vals + b * nnz, x + b * x_bstride, beg + lane, end, (i64)32, acc_zero<A>());
        for (int off = 16; off > 0; off >>= 1) s = s + shfl_down(s, off, 32);
        if (lane == 0) part[q] = s;
    }
}

// s[q] = vals[k] * X[plain[k], col0 + 32 q] summed over the entries k of [beg, end) in that
// order, for q < SPMM_TILES and col0 + 32 q < N (lane l of the warp holds col0 = ... + l). The warp
// loads 32 (column, value) pairs at a time and broadcasts them with shuffles (bounds are
// warp-uniform), SPMM_BATCH (4) entries' rows of X loaded before their products.
#define SPMM_TILES 4
#ifndef SPMM_BATCH  // entries whose rows of X are loaded together (a compile option, for timing variants)
#define SPMM_BATCH 4
#endif
template <typename V, typename I, typename A>
__device__ __forceinline__ void warp_row_spmm(const I* __restrict__ p, const V* __restrict__ v,
                                              const V* __restrict__ xb, i64 beg, i64 end, i64 N, i64 col0,
                                              int lane, A* s) {
    for (int q = 0; q < SPMM_TILES; ++q) s[q] = acc_zero<A>();
    for (i64 k0 = beg; k0 < end; k0 += 32) {
        i64 my_col = 0;
        A my_val = acc_zero<A>();
        if (k0 + lane < end) {
            my_col = p[k0 + lane];
            my_val = to_acc(v[k0 + lane]);
        }
        const int count = end - k0 < 32 ? (int)(end - k0) : 32;
        int j = 0;
        for (; j + SPMM_BATCH - 1 < count; j += SPMM_BATCH) {
            i64 cj[SPMM_BATCH];
            A vj[SPMM_BATCH];
            for (int u = 0; u < SPMM_BATCH; ++u) {
                cj[u] = shfl_idx(my_col, j + u);
                vj[u] = shfl_idx(my_val, j + u);
            }
            for (int q = 0; q < SPMM_TILES; ++q) {
                const i64 col = col0 + 32 * q;
                if (col < N) {
                    A xv[SPMM_BATCH];
                    for (int u = 0; u < SPMM_BATCH; ++u) xv[u] = to_acc(xb[cj[u] * N + col]);
                    for (int u = 0; u < SPMM_BATCH; ++u) s[q] = s[q] + vj[u] * xv[u];
                }
            }
        }
        for (; j < count; ++j) {
            const i64 cj = shfl_idx(my_col, j);
            const A vj = shfl_idx(my_val, j);
            for (int q = 0; q < SPMM_TILES; ++q) {
                const i64 col = col0 + 32 * q;
                if (col < N) s[q] = s[q] + vj * to_acc(xb[cj * N + col]);
            }
        }
    }
}

// out[col0 + 32 q] = s[q] (as T: a value or an accumulator) for the columns below N.
template <typename T, typename A>
__device__ __forceinline__ void store_tiles(T* __restrict__ out, i64 N, i64 col0, const A* s) {
    for (int q = 0; q < SPMM_TILES; ++q) {
        const i64 col = col0 + 32 * q;
        if (col < N) out[col] = from_acc<T>(s[q]);
    }
}

// Y[b, r, :] = sum_k vals[b, k] * X[b, plain[b, k], :] for X (K, N) row-major: one warp per
// (batch, row, group of SPMM_TILES tiles of 32 columns); a row is read once per 32 *
// SPMM_TILES columns and every read of X is 32 consecutive items. Rows longer than
// `long_len` are skipped: csr_spmm_long_part and csr_long_sum write them where the host listed
// them, else (long_list not null) they are listed for csr_spmm_long_rows, as csr_spmv's.
// st:kernel arith index
template <typename V, typename I>
__global__ void csr_spmm(const I* __restrict__ comp, const I* __restrict__ plain, const V* __restrict__ vals, i64 B,
                         i64 nrows, i64 nnz, const V* __restrict__ X, i64 x_bstride, i64 N, V* __restrict__ Y,
                         i64 long_len, unsigned long long* __restrict__ long_count, i64* __restrict__ long_list) {
    typedef typename acc<V>::type A;
    const int lane = threadIdx.x & 31;
    const i64 gwarp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const i64 nwarps = (i64)gridDim.x * blockDim.x / 32;
    const i64 ngroups = (N + 32 * SPMM_TILES - 1) / (32 * SPMM_TILES);
    for (i64 w = gwarp; w < B * nrows * ngroups; w += nwarps) {  // w is the same for the whole warp
        const i64 row = ngroups == 1 ? w : w / ngroups, group = w - row * ngroups;
        const i64 b = B == 1 ? 0 : row / nrows, r = row - b * nrows;
        const I* c = comp + b * (nrows + 1);
        const i64 beg = c[r], end = c[r + 1];
        if (end - beg > long_len) {
            if (long_list != nullptr && group == 0 && lane == 0) long_list[atomicAdd(long_count, 1ull)] = row;
            continue;
        }
        const i64 col0 = group * 32 * SPMM_TILES + lane;
        A s[SPMM_TILES];
        warp_row_spmm(plain + b * nnz, vals + b * nnz, X + b * x_bstride, beg, end, N, col0, lane, s);
        store_tiles(Y + row * N, N, col0, s);
    }
}

// The long rows of an SpMM in pieces (as csr_spmv_long_part's): part[q, :] = the products of
// piece q with X, one warp per (piece, group of SPMM_TILES tiles of 32 columns).
// st:kernel arith index
template <typename V, typename I>
__global__ void csr_spmm_long_part(const I* __restrict__ comp, const I* __restrict__ plain,
                                   const V* __restrict__ vals, i64 nrows, i64 nnz, const V* __restrict__ X,
                                   i64 x_bstride, i64 N, const i64* __restrict__ long_rows,
                                   const i64* __restrict__ item_slot, const i64* __restrict__ first, i64 nitems,
                                   i64 piece, typename acc<V>::type* __restrict__ part) {
    typedef typename acc<V>::type A;
    const int lane = threadIdx.x & 31;
    const i64 gwarp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const i64 nwarps = (i64)gridDim.x * blockDim.x / 32;
    const i64 ngroups = (N + 32 * SPMM_TILES - 1) / (32 * SPMM_TILES);
    for (i64 w = gwarp; w < nitems * ngroups; w += nwarps) {  // w is the same for the whole warp
        const i64 group = w % ngroups, q = w / ngroups;
        i64 b, beg, end;
        long_piece(comp, nrows, long_rows, item_slot, first, piece, q, &b, &beg, &end);
        const i64 col0 = group * 32 * SPMM_TILES + lane;
        A s[SPMM_TILES];
        warp_row_spmm(plain + b * nnz, vals + b * nnz, X + b * x_bstride, beg, end, N, col0, lane, s);
        store_tiles(part + q * N, N, col0, s);
    }
}

// Y[long_rows[slot], n] = part[first[slot], n] + ... + part[first[slot + 1] - 1, n], in that
// order (deterministic), one thread per (long row, column): the long rows of an SpMV (N = 1)
// or SpMM from the partial rows of their pieces.
// st:kernel arith
template <typename V>
__global__ void csr_long_sum(const i64* __restrict__ long_rows, const i64* __restrict__ first, i64 nlong, i64 N,
                                  const typename acc<V>::type* __restrict__ part, V* __restrict__ Y) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(t, nlong * N) {
        const i64 slot = t / N, col = t - slot * N;
        A s = acc_zero<A>();
        for (i64 q = first[slot]; q < first[slot + 1]; ++q) s = s + part[q * N + col];
        Y[long_rows[slot] * N + col] = from_acc<V>(s);
    }
}

// The rows a row kernel listed on the device (long_list[0..long_count[0]), rows of all batches,
// b * nrows + r), where the host does not know them: no wait for the device to find them. A block
// takes a listed row (and, for SpMM, a group of SPMM_TILES tiles of columns) at a time; its partial
// sums are added in a fixed order (deterministic), so one long row's entries are spread over the
// block's LONG_ROW_THREADS threads.
#define LONG_ROW_THREADS 256
#define LONG_ROW_WARPS (LONG_ROW_THREADS / 32)

// y[row] for each listed row of an SpMV: a thread takes every LONG_ROW_THREADS-th entry.
// st:kernel arith index
template <typename V, typename I>
__global__ void csr_spmv_long_rows(const I* __restrict__ comp, const I* __restrict__ plain,
                                   const V* __restrict__ vals, i64 nrows, i64 nnz, const V* __restrict__ x,
                                   i64 x_bstride, const unsigned long long* __restrict__ long_count,
                                   const i64* __restrict__ long_list, V* __restrict__ y) {
    typedef typename acc<V>::type A;
    const i64 nlong = (i64)long_count[0];
    for (i64 q = blockIdx.x; q < nlong; q += gridDim.x) {  // q is the same for the whole block
        const i64 row = long_list[q], b = row / nrows, r = row - b * nrows;
        const I* c = comp + b * (nrows + 1);
        A s = strided_dot(plain + b * nnz, vals + b * nnz, x + b * x_bstride, (i64)c[r] + threadIdx.x, (i64)c[r + 1],
                          (i64)LONG_ROW_THREADS, acc_zero<A>());
        s = block_sum(s);  // (scan.cuh: in thread 0, a fixed order)
        if (threadIdx.x == 0) y[row] = from_acc<V>(s);
    }
}

// Y[row, group's columns] for each listed row of an SpMM and group of columns: warp w takes the
// w-th of LONG_ROW_WARPS consecutive slices of the row (multiples of 32 entries), warp 0 adds the
// others' tiles to its own in warp order.
// st:kernel arith index
template <typename V, typename I>
__global__ void csr_spmm_long_rows(const I* __restrict__ comp, const I* __restrict__ plain,
                                   const V* __restrict__ vals, i64 nrows, i64 nnz, const V* __restrict__ X,
                                   i64 x_bstride, i64 N, const unsigned long long* __restrict__ long_count,
                                   const i64* __restrict__ long_list, V* __restrict__ Y) {
    typedef typename acc<V>::type A;
    __shared__ A scratch[LONG_ROW_WARPS][SPMM_TILES][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const i64 ngroups = (N + 32 * SPMM_TILES - 1) / (32 * SPMM_TILES);
    const i64 nlong = (i64)long_count[0];
    for (i64 w = blockIdx.x; w < nlong * ngroups; w += gridDim.x) {  // w is the same for the whole block
        const i64 q = w / ngroups, group = w - q * ngroups;
        const i64 row = long_list[q], b = row / nrows, r = row - b * nrows;
        const I* c = comp + b * (nrows + 1);
        const i64 beg = c[r], end = c[r + 1];
        const i64 span = ((end - beg + LONG_ROW_WARPS - 1) / LONG_ROW_WARPS + 31) / 32 * 32;
        const i64 lo = beg + warp * span < end ? beg + warp * span : end;
        const i64 hi = lo + span < end ? lo + span : end;
        const i64 col0 = group * 32 * SPMM_TILES + lane;
        A s[SPMM_TILES];
        warp_row_spmm(plain + b * nnz, vals + b * nnz, X + b * x_bstride, lo, hi, N, col0, lane, s);
        for (int t = 0; t < SPMM_TILES; ++t) scratch[warp][t][lane] = s[t];
        __syncthreads();
        if (warp == 0) {
            for (int o = 1; o < LONG_ROW_WARPS; ++o)
                for (int t = 0; t < SPMM_TILES; ++t) s[t] = s[t] + scratch[o][t][lane];
            store_tiles(Y + row * N, N, col0, s);
        }
        __syncthreads();  // scratch is reused by the next row
    }
}

// Y[b, R, n] = sum over the blocks k of block row R / Rb and j < Cb of
// vals[b, k, R % Rb, j] * X[b, plain[b, k] * Cb + j, n]: one thread per output element,
// consecutive threads along n (coalesced X, broadcast blocks).
// st:kernel arith index
template <typename V, typename I>
__global__ void bsr_spmm(const I* __restrict__ comp, const I* __restrict__ plain, const V* __restrict__ vals, i64 B,
                         i64 nbrows, i64 nnz, i64 Rb, i64 Cb, const V* __restrict__ X, i64 x_bstride, i64 N,
                         V* __restrict__ Y) {
    typedef typename acc<V>::type A;
    const i64 M = nbrows * Rb;
    ST_GRID_LOOP(t, B * M * N) {
        const i64 n = t % N, row = t / N;
        const i64 b = row / M, R = row - b * M;
        const i64 br = R / Rb, i = R - br * Rb;
        const I* c = comp + b * (nbrows + 1);
        const V* xb = X + b * x_bstride + n;
        A s = acc_zero<A>();
        for (i64 k = c[br]; k < (i64)c[br + 1]; ++k) {
            const V* blk = vals + ((b * nnz + k) * Rb + i) * Cb;
            const V* xr = xb + (i64)plain[b * nnz + k] * Cb * N;
            for (i64 j = 0; j < Cb; ++j) s = s + to_acc(blk[j]) * to_acc(xr[j * N]);
        }
        Y[t] = from_acc<V>(s);
    }
}

// The same product by tiles, for blocks of at most 32 x 32: one thread block of
// BSR_WARPS warps per (batch, block row, NT columns of Y), NT = 128 items of 4 bytes
// (64 of 8, 32 of 16: 16 KB of X a block). For each block of the row, the block's values
// (Rb x Cb) and the rows of X it meets (Cb x NT) are staged in shared memory; warp w then
// accumulates the output rows w, w + BSR_WARPS, ... at the columns lane, lane + 32, ...:
// a 4 x NT / 32 tile of sums a thread, so that every value read from shared memory feeds
// several products. X is read once per block row and with whole-line transactions; shared
// reads are broadcasts (bs) or conflict-free rows (xs).
// Launched with exactly 32 * BSR_WARPS threads per block.
#define BSR_TILE 32
#define BSR_WARPS 8
#define BSR_ROWS (BSR_TILE / BSR_WARPS)
// st:kernel arith index
template <typename V, typename I>
__global__ void bsr_spmm_tiled(const I* __restrict__ comp, const I* __restrict__ plain, const V* __restrict__ vals,
                               i64 B, i64 nbrows, i64 nnz, i64 Rb, i64 Cb, const V* __restrict__ X, i64 x_bstride,
                               i64 N, V* __restrict__ Y) {
    typedef typename acc<V>::type A;
    constexpr int NT = sizeof(A) <= 4 ? 128 : sizeof(A) <= 8 ? 64 : 32, COLS = NT / 32;
    __shared__ A xs[BSR_TILE][NT];            // xs[j][l] = X[block col * Cb + j, tile column l]
    __shared__ A bs[BSR_TILE][BSR_TILE + 1];  // bs[i][j] = the block's value (i, j)
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const i64 ntiles = (N + NT - 1) / NT, M = nbrows * Rb, rc = Rb * Cb;
    for (i64 tile = blockIdx.x; tile < B * nbrows * ntiles; tile += gridDim.x) {
        const i64 row = ntiles == 1 ? tile : tile / ntiles, nt = tile - row * ntiles;  // row = b * nbrows + block row
        const i64 b = B == 1 ? 0 : row / nbrows, br = row - b * nbrows, n0 = nt * NT;
        const I* c = comp + b * (nbrows + 1);
        const int cols = N - n0 >= NT ? COLS : (int)((N - n0 + 31) / 32);  // 32-column groups in Y (warp-uniform)
        A s[BSR_ROWS][COLS];
#pragma unroll
        for (int m = 0; m < BSR_ROWS; ++m)
#pragma unroll
            for (int q = 0; q < COLS; ++q) s[m][q] = acc_zero<A>();
        for (i64 k = c[br]; k < (i64)c[br + 1]; ++k) {
            const V* blk = vals + (b * nnz + k) * rc;
            const V* xr = X + b * x_bstride + (i64)plain[b * nnz + k] * Cb * N + n0;
            // a warp a row, a lane a column: no division (a 64-bit one by Cb was ~70 instructions an item)
            for (int i = warp; i < Rb; i += BSR_WARPS)
                if (lane < Cb) bs[i][lane] = to_acc(blk[i * Cb + lane]);
            for (int j = warp; j < Cb; j += BSR_WARPS)
                for (int q = 0; q < cols; ++q) {
                    const int l = lane + 32 * q;
                    xs[j][l] = n0 + l < N ? to_acc(xr[j * N + l]) : acc_zero<A>();
                }
            __syncthreads();
            for (i64 j = 0; j < Cb; ++j) {
                A xv[COLS];
#pragma unroll
                for (int q = 0; q < COLS; ++q) xv[q] = q < cols ? xs[j][lane + 32 * q] : acc_zero<A>();
#pragma unroll
                for (int m = 0; m < BSR_ROWS; ++m) {
                    const A bv = bs[warp + m * BSR_WARPS][j];  // rows past Rb: never stored
#pragma unroll
                    for (int q = 0; q < COLS; ++q)
                        if (q < cols) s[m][q] = s[m][q] + bv * xv[q];
                }
            }
            __syncthreads();  // before the next block overwrites bs and xs
        }
#pragma unroll
        for (int m = 0; m < BSR_ROWS; ++m) {
            const int i = warp + m * BSR_WARPS;
            if (i >= Rb) continue;
#pragma unroll
            for (int q = 0; q < COLS; ++q) {
                const i64 col = n0 + lane + 32 * q;
                if (col < N) Y[(b * M + br * Rb + i) * N + col] = from_acc<V>(s[m][q]);
            }
        }
    }
}

// SDDMM: out[b, k] = beta * vals[b, k] + alpha * dot(M1[b, row_k, :], M2[b, :, col_k])
// with M1 (nrows, K) and M2 (K, ncols) row-major: one warp per entry, lanes along K.
// st:kernel arith index
template <typename V, typename I>
__global__ void csr_sddmm(const I* __restrict__ comp, const I* __restrict__ plain, const V* __restrict__ vals, i64 B,
                          i64 nrows, i64 nnz, const V* __restrict__ M1, i64 m1_bstride, const V* __restrict__ M2,
                          i64 m2_bstride, i64 K, i64 ncols, double alpha_re, double alpha_im, double beta_re,
                          double beta_im, V* __restrict__ out) {
    typedef typename acc<V>::type A;
    const A alpha = acc_scalar<A>(alpha_re, alpha_im), beta = acc_scalar<A>(beta_re, beta_im);
    const int lane = threadIdx.x & 31;
    const i64 gwarp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const i64 nwarps = (i64)gridDim.x * blockDim.x / 32;
    for (i64 w = gwarp; w < B * nnz; w += nwarps) {  // warp-uniform
        const i64 b = w / nnz, k = w - b * nnz;
        const i64 r = slot_of(comp + b * (nrows + 1), nrows, k);
        const i64 col = plain[w];
        const V* m1 = M1 + b * m1_bstride + r * K;
        const V* m2 = M2 + b * m2_bstride + col;
        A s = acc_zero<A>();
        for (i64 j = lane; j < K; j += 32) s = s + to_acc(m1[j]) * to_acc(m2[j * ncols]);
        for (int off = 16; off > 0; off >>= 1) s = s + shfl_down(s, off, 32);
        if (lane == 0) out[w] = from_acc<V>(beta * to_acc(vals[w]) + alpha * s);  // beta = 0: NaN stays (torch's)
    }
}

}  // namespace st
