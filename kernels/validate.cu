// Invariant checking of compressed (5.1-5.6) and COO (C4-C6) indices on the device.
//
// The first violation is reported in the order of the CPU kernel
// (sparsetensor/_lib/_validate.pyx): 5.1/5.2 over all batches (batch by batch, 5.1
// before 5.2), then 5.3 at the first (batch, i), then 5.4-5.6 at the first
// (batch, row, position). Every kernel folds what it finds into one u64 with
// atomicMin on an encoded key: the top two bits rank the phase, the rest is the
// flattened (batch, i) or (batch, position) of the finding; within a batch,
// positions follow rows once 5.1-5.3 hold, so the smallest key is the CPU's
// first violation. A report kernel decodes the key into
// (code, batch, i, position, value, previous value) for the host.
//
// The kernels of one check run in stream order on one key (initialised to
// KEY_NONE); a later phase reads only memory that the earlier phases proved safe,
// and returns at once when they found something.
#include "common.cuh"

#define KEY_NONE 0xffffffffffffffffull
#define PHASE(p) ((::st::u64)(p) << 62)
#define FLAT_MASK ((1ull << 62) - 1)

// Report codes (sparsetensor/cuda/validate.py has the same table).
#define CODE_OK 0
#define CODE_5_1 1
#define CODE_5_2 2
#define CODE_5_3 3
#define CODE_5_4 4
#define CODE_5_5 5
#define CODE_5_6 6
#define CODE_C4 7
#define CODE_C5 8
#define CODE_C6 9

namespace st {

// Fold one candidate key a thread (KEY_NONE: none) into *key: the warp's least first, then one
// atomic a warp. An unsorted COO's order check finds a violation at about every other position;
// one atomic each on one address would serialise them all. Every lane of the warp must call it.
__device__ __forceinline__ void warp_fold_min(u64* key, u64 mine) {
    for (int off = 16; off > 0; off >>= 1) {
        const u64 other = __shfl_down_sync(0xffffffffu, mine, off);
        mine = other < mine ? other : mine;
    }
    if ((threadIdx.x & 31) == 0 && mine != KEY_NONE) atomicMin(key, mine);
}

// Phase 0: 5.1 compressed[b, 0] == 0 and 5.2 compressed[b, n] == nnz.
// st:kernel index
template <typename I>
__global__ void compressed_ends(const I* __restrict__ comp, i64 B, i64 n, i64 nnz, u64* key) {
    ST_GRID_LOOP(b, B) {
        const I* c = comp + b * (n + 1);
        if ((i64)c[0] != 0) {
            atomicMin(key, PHASE(0) | (u64)(2 * b));
        } else if ((i64)c[n] != nnz) {
            atomicMin(key, PHASE(0) | (u64)(2 * b + 1));
        }
    }
}

// Phase 1: 5.3, 0 <= compressed[b, i] - compressed[b, i - 1] <= plain_size for i in [1, n].
// y >= x and (y - x mod 2**64) <= plain_size is exact for any 64-bit x, y.
// st:kernel index
template <typename I>
__global__ void compressed_steps(const I* __restrict__ comp, i64 B, i64 n, u64 plain_size, u64* key) {
    ST_GRID_LOOP(t, B * n) {
        const i64 b = t / n, i = t - b * n + 1;
        const I* c = comp + b * (n + 1);
        const i64 x = c[i - 1], y = c[i];
        if (y < x || (u64)y - (u64)x > plain_size) atomicMin(key, PHASE(1) | (u64)t);
    }
}

// Phase 2, first step (with check_order): bit b * nnz + compressed[b, r] of marks for every row
// r < n whose start is a position (< nnz): the positions that start a row, which 5.6 does not
// compare with their predecessor (an empty row marks its successor's start). marks is zeroed
// by the host. Bounds are tested here rather than trusted: it also runs when 5.1-5.3 failed.
// st:kernel index
template <typename I>
__global__ void row_start_marks(const I* __restrict__ comp, i64 B, i64 n, i64 nnz, const u64* key,
                                u32* __restrict__ marks) {
    if (*key < PHASE(2)) return;  // the report is decided; the marks are not read
    ST_GRID_LOOP(t, B * n) {
        const i64 b = t / n, r = t - b * n;
        const i64 s = comp[b * (n + 1) + r];
        if (s >= 0 && s < nnz) {
            const i64 bit = b * nnz + s;
            atomicOr(&marks[bit >> 5], 1u << (bit & 31));
        }
    }
}

// Phase 2: 5.4 plain >= 0, 5.5 plain < plain_size and, when check_order, 5.6 (strictly
// increasing within each row): a position whose value is not above its predecessor's is a
// violation unless it starts a row (its bit in marks). Runs only when phases 0 and 1 found
// nothing. A stream over the positions, four loads in flight a thread; no search, no
// shared memory. marks is not read without check_order (it may be null then).
// st:kernel index
template <typename I>
__global__ void compressed_plain(const I* __restrict__ plain, i64 B, i64 nnz, i64 plain_size, int check_order,
                                 const u32* __restrict__ marks, u64* key) {
    if (__shfl_sync(0xffffffffu, (int)(relaxed_load(key) < PHASE(2)), 0)) return;  // warp-uniform: warp_fold_min below
    const i64 N = B * nnz, stride = (i64)gridDim.x * blockDim.x;
    u64 first = KEY_NONE;
    for (i64 t0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; t0 < N; t0 += 4 * stride) {
        i64 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = t0 + u * stride < N ? (i64)plain[t0 + u * stride] : 0;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const i64 t = t0 + u * stride;
            if (t >= N || first != KEY_NONE) continue;  // t grows: the thread's first finding is its least
            bool bad = v[u] < 0 || v[u] >= plain_size;
            if (!bad && check_order && (B == 1 ? t : t % nnz) > 0 && v[u] <= (i64)plain[t - 1])
                bad = !((marks[t >> 5] >> (t & 31)) & 1u);
            if (bad) first = PHASE(2) | (u64)t;
        }
    }
    warp_fold_min(key, first);
}

// *differs |= 1 where a[i] != b[i] for some i < n: whether index arrays another library holds still
// equal the copy kept of them (what was derived from them, their transpose, is then still theirs).
// Run beside a check, whose one read of the report brings the answer too.
// st:kernel index
template <typename I>
__global__ void same_items(const I* __restrict__ a, const I* __restrict__ b, i64 n, u64* differs) {
    bool d = false;
    ST_GRID_LOOP(i, n) d = d || a[i] != b[i];
    if (d) atomicOr(differs, 1ull);
}

// out = [code, batch, i, position, value, previous]; one thread.
// st:kernel index
template <typename I>
__global__ void compressed_report(const I* __restrict__ comp, const I* __restrict__ plain, i64 B, i64 n, i64 nnz,
                                  i64 plain_size, const u64* key, i64* out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const u64 k = *key;
    for (int j = 0; j < 6; ++j) out[j] = 0;
    if (k == KEY_NONE) return;
    const u64 phase = k >> 62;
    const i64 flat = (i64)(k & FLAT_MASK);
    if (phase == 0) {
        const i64 b = flat / 2;
        const bool first = flat % 2 == 0;
        out[0] = first ? CODE_5_1 : CODE_5_2;
        out[1] = b;
        out[2] = first ? 0 : n;
        out[3] = -1;
        out[4] = comp[b * (n + 1) + (first ? 0 : n)];
    } else if (phase == 1) {
        const i64 b = flat / n, i = flat - b * n + 1;
        out[0] = CODE_5_3;
        out[1] = b;
        out[2] = i;
        out[3] = -1;
        out[4] = comp[b * (n + 1) + i];
        out[5] = comp[b * (n + 1) + i - 1];
    } else {
        const i64 b = flat / nnz, pos = flat - b * nnz;
        const i64 v = plain[b * nnz + pos];
        out[0] = v < 0 ? CODE_5_4 : (v >= plain_size ? CODE_5_5 : CODE_5_6);
        out[1] = b;
        out[2] = slot_of(comp + b * (n + 1), n, pos);
        out[3] = pos;
        out[4] = v;
        out[5] = pos > 0 ? (i64)plain[b * nnz + pos - 1] : 0;
    }
}

// Phase 0 of COO: C4 indices[d, k] >= 0, C5 indices[d, k] < shape[d], first in (d, k) order.
// st:kernel index
template <typename I>
__global__ void coo_bounds(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ shape, u64* key) {
    ST_GRID_LOOP(t, S * nnz) {
        const i64 v = idx[t];
        if (v < 0 || v >= shape[t / nnz]) atomicMin(key, PHASE(0) | (u64)t);
    }
}

// Phase 1 of COO: the first k >= 1 whose column is not lexicographically after column k - 1
// (C6 for a tensor marked coalesced; otherwise it only says that coalescing must sort).
// st:kernel index
template <typename I>
__global__ void coo_order(const I* __restrict__ idx, i64 S, i64 nnz, u64* key) {
    if (__shfl_sync(0xffffffffu, (int)(relaxed_load(key) < PHASE(1)), 0)) return;  // warp-uniform: warp_fold_min below
    u64 first = KEY_NONE;
    ST_GRID_LOOP(k, nnz - 1) {
        int cmp = 0;
        for (i64 d = 0; d < S && cmp == 0; ++d) {
            const i64 a = idx[d * nnz + k], b = idx[d * nnz + k + 1];
            cmp = a < b ? -1 : (a > b ? 1 : 0);
        }
        if (cmp >= 0 && first == KEY_NONE) first = PHASE(1) | (u64)(k + 1);  // k grows: the thread's first
    }
    warp_fold_min(key, first);
}

// out = [code, dim, position, value, 0, 0]; one thread.
// st:kernel index
template <typename I>
__global__ void coo_report(const I* __restrict__ idx, i64 S, i64 nnz, const u64* key, i64* out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const u64 k = *key;
    for (int j = 0; j < 6; ++j) out[j] = 0;
    if (k == KEY_NONE) return;
    const i64 flat = (i64)(k & FLAT_MASK);
    if ((k >> 62) == 0) {
        const i64 v = idx[flat];
        out[0] = v < 0 ? CODE_C4 : CODE_C5;
        out[1] = flat / nnz;
        out[2] = flat - (flat / nnz) * nnz;
        out[3] = v;
    } else {
        out[0] = CODE_C6;
        out[1] = -1;
        out[2] = flat;
    }
}

}  // namespace st
