// Dense <-> sparse.
//
// Dense arrays are seen as (B, NR, NC, W) and compressed values as (B * nnz, Rb, Cb, W),
// W being the items of the dense dims; values are moved as raw items of their size. The
// sparse input is canonical (the host checks, or coalesces, first), so no two entries
// write one element.
//
// to_dense of a compressed tensor takes the major slot of every entry from
// expand_major (convert.cu); from_dense flags the nonzero blocks (dense_nonzero), scans
// the flags (scan.cu) and writes every flagged block at its scanned position.
#include "common.cuh"

namespace st {

// The dense offset (b, r * Rb + i, c * Cb + j, e) of item (i, j, e) of entry (b, major, minor).
__device__ __forceinline__ i64 dense_offset(i64 b, i64 major, i64 minor, i64 i, i64 j, i64 e, i64 Rb, i64 Cb,
                                            i64 W, i64 NR, i64 NC, int rows) {
    const i64 r = rows ? major : minor, c = rows ? minor : major;
    return ((b * NR + r * Rb + i) * NC + c * Cb + j) * W + e;
}

// Whether (major, minor) is a block of the (NR / Rb) x (NC / Cb) grid (major the row where rows).
// The writes below land where the indices say: indices written behind the library's back since
// their check (through a raw pointer: an export marks them to be checked again) are skipped,
// never written out of bounds.
__device__ __forceinline__ bool in_block_grid(i64 major, i64 minor, i64 Rb, i64 Cb, i64 NR, i64 NC, int rows) {
    const i64 r = rows ? major : minor, c = rows ? minor : major;
    return 0 <= r && r < NR / Rb && 0 <= c && c < NC / Cb;
}

// st:kernel raw index
template <typename R, typename I>
__global__ void compressed_to_dense(const I* __restrict__ major, const I* __restrict__ plain, const R* __restrict__ vals,
                                    i64 B, i64 nnz, i64 Rb, i64 Cb, i64 W, i64 NR, i64 NC, int rows,
                                    R* __restrict__ out) {
    ST_GRID_LOOP(t, B * nnz * Rb * Cb * W) {
        const i64 e = t % W;
        i64 u = t / W;
        const i64 j = u % Cb;
        u /= Cb;
        const i64 i = u % Rb;
        const i64 bk = u / Rb;
        const i64 mj = (i64)major[bk], mn = (i64)plain[bk];
        if (!in_block_grid(mj, mn, Rb, Cb, NR, NC, rows)) continue;  // indices written since their check
        out[dense_offset(bk / nnz, mj, mn, i, j, e, Rb, Cb, W, NR, NC, rows)] = vals[t];
    }
}

// st:kernel raw index
template <typename R, typename I>
__global__ void coo_to_dense(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ shape,
                             const R* __restrict__ vals, i64 W, R* __restrict__ out) {
    ST_GRID_LOOP(t, nnz * W) {
        const i64 k = t / W, e = t - k * W;
        i64 lin = 0;
        bool in = true;
        for (i64 d = 0; d < S; ++d) {  // coo_linear, each index bounded (see in_block_grid)
            const i64 x = (i64)idx[d * nnz + k];
            in = in && 0 <= x && x < shape[d];
            lin = lin * shape[d] + x;
        }
        if (in) out[lin * W + e] = vals[t];
    }
}

// The diagonal of a coalesced COO idx (S, nnz) over sparse dims d1, d2 (sizes dims[0..S)): entry
// n with idx[d2] - idx[d1] == offset writes its W items to out (P, W, k) at (the row-major
// position of its other sparse dims, e, its place on the diagonal). The input has distinct
// indices, so no two entries write one element.
// st:kernel raw index
template <typename R, typename I>
__global__ void coo_diagonal(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ dims, i64 d1, i64 d2,
                             i64 offset, i64 k, const R* __restrict__ vals, i64 W, R* __restrict__ out) {
    ST_GRID_LOOP(t, nnz * W) {
        const i64 n = t / W, e = t - n * W;
        const i64 i1 = (i64)idx[d1 * nnz + n], i2 = (i64)idx[d2 * nnz + n];
        if (i2 - i1 != offset) continue;
        i64 flat = 0;
        for (i64 d = 0; d < S; ++d) {
            if (d != d1 && d != d2) flat = flat * dims[d] + (i64)idx[d * nnz + n];
        }
        out[(flat * W + e) * k + (offset >= 0 ? i1 : i2)] = vals[t];
    }
}

// Nonzero tests: unsigned items under a mask (float16: 0x7fff, so -0.0 is zero), reals as
// reals (NaN is nonzero, -0.0 is zero).
__device__ __forceinline__ bool nonzero(unsigned char x, u64 mask) { return (x & mask) != 0; }
__device__ __forceinline__ bool nonzero(unsigned short x, u64 mask) { return (x & mask) != 0; }
__device__ __forceinline__ bool nonzero(unsigned int x, u64 mask) { return (x & mask) != 0; }
__device__ __forceinline__ bool nonzero(unsigned long long x, u64 mask) { return (x & mask) != 0; }
__device__ __forceinline__ bool nonzero(float x, u64) { return x != 0.0f; }
__device__ __forceinline__ bool nonzero(double x, u64) { return x != 0.0; }

// flags[(b * nmajor + major) * nminor + minor] = 1 if block (major, minor) of batch b has a
// nonzero item; W counts test items (complex: two reals).
// st:kernel ztest
template <typename Z>
__global__ void dense_nonzero(const Z* __restrict__ dense, i64 B, i64 NR, i64 NC, i64 W, i64 Rb, i64 Cb, int rows,
                              u64 mask, i64* __restrict__ flags) {
    const i64 nmajor = rows ? NR / Rb : NC / Cb, nminor = rows ? NC / Cb : NR / Rb;
    ST_GRID_LOOP(p, B * nmajor * nminor) {
        const i64 minor = p % nminor, u = p / nminor;
        const i64 major = u % nmajor, b = u / nmajor;
        bool any = false;
        for (i64 i = 0; i < Rb && !any; ++i) {
            for (i64 j = 0; j < Cb && !any; ++j) {
                const Z* item = dense + dense_offset(b, major, minor, i, j, 0, Rb, Cb, W, NR, NC, rows);
                for (i64 e = 0; e < W; ++e) {
                    if (nonzero(item[e], mask)) { any = true; break; }
                }
            }
        }
        flags[p] = any ? 1 : 0;
    }
}

// Writes every flagged block at position scan[p] (global over batches): its minor index into
// plain and its items into vals (nnz_total, Rb, Cb, W).
// st:kernel raw index
template <typename R, typename I>
__global__ void dense_to_compressed(const R* __restrict__ dense, const i64* __restrict__ scan, i64 B, i64 NR, i64 NC,
                                    i64 W, i64 Rb, i64 Cb, int rows, I* __restrict__ plain, R* __restrict__ vals) {
    const i64 nmajor = rows ? NR / Rb : NC / Cb, nminor = rows ? NC / Cb : NR / Rb;
    ST_GRID_LOOP(p, B * nmajor * nminor) {
        if (scan[p + 1] == scan[p]) continue;
        const i64 pos = scan[p];
        const i64 minor = p % nminor, u = p / nminor;
        const i64 major = u % nmajor, b = u / nmajor;
        plain[pos] = (I)minor;
        R* dst = vals + pos * Rb * Cb * W;
        for (i64 i = 0; i < Rb; ++i) {
            for (i64 j = 0; j < Cb; ++j) {
                const R* src = dense + dense_offset(b, major, minor, i, j, 0, Rb, Cb, W, NR, NC, rows);
                for (i64 e = 0; e < W; ++e) dst[(i * Cb + j) * W + e] = src[e];
            }
        }
    }
}

// COO from a dense (M, W) array with flags scanned into scan (M + 1): idx (S, nnz) receives the
// row-major coordinates of every flagged row over shape[0..S), vals its W items.
// st:kernel raw index
template <typename R, typename I>
__global__ void dense_to_coo(const R* __restrict__ dense, const i64* __restrict__ scan, i64 M, i64 W, i64 S,
                             const i64* __restrict__ shape, i64 nnz, I* __restrict__ idx, R* __restrict__ vals) {
    ST_GRID_LOOP(m, M) {
        if (scan[m + 1] == scan[m]) continue;
        const i64 pos = scan[m];
        i64 u = m;
        for (i64 d = S - 1; d >= 0; --d) {
            idx[d * nnz + pos] = (I)(u % shape[d]);
            u /= shape[d];
        }
        for (i64 e = 0; e < W; ++e) vals[pos * W + e] = dense[m * W + e];
    }
}

}  // namespace st
