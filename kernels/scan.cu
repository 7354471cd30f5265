// Device-wide exclusive scans of int64 counts, and small index utilities.
//
// exclusive_scan(in[0..n)) -> out[0..n] with out[0] = 0 and out[n] = the total is
// three steps (sparsetensor/cuda/_primitives.py drives them): scan_reduce writes one
// sum per tile, those sums are scanned (recursively, the same way) into tile offsets,
// and scan_tiles scans every tile from its offset. Launch both with SCAN_THREADS
// threads and one block per tile of SCAN_TILE elements.
#include "common.cuh"
#include "scan.cuh"

#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)

namespace st {

// st:kernel
__global__ void scan_reduce(const i64* __restrict__ in, i64 n, i64* __restrict__ tile_sums) {
    const i64 base = (i64)blockIdx.x * SCAN_TILE + (i64)threadIdx.x * SCAN_ITEMS;
    i64 s = 0;
    for (int j = 0; j < SCAN_ITEMS; ++j) {
        if (base + j < n) s += in[base + j];
    }
    i64 total;
    block_inclusive_scan(s, &total);
    if (threadIdx.x == 0) tile_sums[blockIdx.x] = total;
}

// out[i + 1] = tile_offsets[tile of i] + in[tile start .. i]; out[0] = 0. out must not alias in.
// st:kernel
__global__ void scan_tiles(const i64* __restrict__ in, i64 n, const i64* __restrict__ tile_offsets,
                           i64* __restrict__ out) {
    const i64 base = (i64)blockIdx.x * SCAN_TILE + (i64)threadIdx.x * SCAN_ITEMS;
    i64 v[SCAN_ITEMS];
    i64 s = 0;
    for (int j = 0; j < SCAN_ITEMS; ++j) {
        v[j] = base + j < n ? in[base + j] : 0;
        s += v[j];
    }
    i64 total;
    i64 run = tile_offsets[blockIdx.x] + block_inclusive_scan(s, &total) - s;
    for (int j = 0; j < SCAN_ITEMS; ++j) {
        if (base + j < n) {
            run += v[j];
            out[base + j + 1] = run;
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 0;
}

// Per-batch compressed indices from a flat exclusive scan:
// out[b, i] = flat[(b * n + i) * step] - flat[b * n * step] for i in [0, n], as index type I.
// st:kernel index
template <typename I>
__global__ void batch_offsets(const i64* __restrict__ flat, i64 B, i64 n, i64 step, I* __restrict__ out) {
    ST_GRID_LOOP(t, B * (n + 1)) {
        const i64 b = t / (n + 1), i = t - b * (n + 1);
        out[t] = (I)(flat[(b * n + i) * step] - flat[b * n * step]);
    }
}

// out[j] = start + j * step for j < n: iota (0, 1) and fill (step 0) of int64 arrays.
// st:kernel
__global__ void arange_i64(i64 n, i64 start, i64 step, i64* __restrict__ out) {
    ST_GRID_LOOP(j, n) { out[j] = start + j * step; }
}

// The coordinates of every element of a C-order array of ndim dims: out[k * n + j] = (j / strides[k]) %
// shape[k] for element j < n (the indices of a COO tensor storing every element).
// st:kernel
__global__ void grid_coords(i64 n, i64 ndim, const i64* __restrict__ shape, const i64* __restrict__ strides,
                            i64* __restrict__ out) {
    ST_GRID_LOOP(t, n * ndim) {
        const i64 k = t / n, j = t - k * n;
        out[t] = (j / strides[k]) % shape[k];
    }
}

// out[j] = in[j * step] for j < count.
// st:kernel
__global__ void take_strided(const i64* __restrict__ in, i64 step, i64 count, i64* __restrict__ out) {
    ST_GRID_LOOP(j, count) { out[j] = in[j * step]; }
}

// out[j] = the first position of keys[0..nkeys) (sorted) holding a key >= j, for j in [0, ntargets].
// st:kernel
__global__ void lower_bounds(const u64* __restrict__ keys, i64 nkeys, i64 ntargets, i64* __restrict__ out) {
    ST_GRID_LOOP(j, ntargets + 1) { out[j] = lower_bound(keys, nkeys, (u64)j); }
}

}  // namespace st
