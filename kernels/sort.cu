// Stable LSD radix sort of u64 keys carrying an i64 payload (a permutation), 8 bits a pass.
//
// One pass over digit `shift` (sparsetensor/cuda/_primitives.py drives the passes):
// 1. radix_histogram: block b counts the digits of its tile into hist[digit * nblocks + b];
// 2. an exclusive scan of hist (digit-major, so every digit's slots run over the
//    tiles in order) gives each (digit, tile) its first output position;
// 3. radix_scatter: block b moves its tile in order, chunk by chunk; inside a chunk an
//    element's rank among equal digits comes from the warp's __match_any_sync mask and
//    per-warp digit counts, so equal digits keep their input order (the sort is stable).
// Launch both with SORT_THREADS threads and one block per tile of SORT_TILE keys.
#include "common.cuh"

#define SORT_THREADS 256
#define SORT_WARPS (SORT_THREADS / 32)
#define SORT_TILE 4096
#define RADIX 256

namespace st {

// st:kernel
__global__ void radix_histogram(const u64* __restrict__ keys, i64 n, int shift, i64* __restrict__ hist) {
    __shared__ u32 counts[RADIX];
    counts[threadIdx.x] = 0;  // SORT_THREADS == RADIX
    __syncthreads();
    const i64 start = (i64)blockIdx.x * SORT_TILE;
    const i64 end = start + SORT_TILE < n ? start + SORT_TILE : n;
    for (i64 i = start + threadIdx.x; i < end; i += SORT_THREADS) {
        atomicAdd(&counts[(keys[i] >> shift) & (RADIX - 1)], 1u);
    }
    __syncthreads();
    hist[(i64)threadIdx.x * gridDim.x + blockIdx.x] = counts[threadIdx.x];
}

// vals_in == nullptr stands for the identity permutation (the first pass).
// st:kernel
__global__ void radix_scatter(const u64* __restrict__ keys_in, const i64* __restrict__ vals_in,
                              u64* __restrict__ keys_out, i64* __restrict__ vals_out, i64 n, int shift,
                              const i64* __restrict__ offsets) {
    __shared__ i64 next[RADIX];                // next output position of each digit
    __shared__ int warp_counts[SORT_WARPS][RADIX];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    next[t] = offsets[(i64)t * gridDim.x + blockIdx.x];
    const i64 start = (i64)blockIdx.x * SORT_TILE;
    const i64 end = start + SORT_TILE < n ? start + SORT_TILE : n;
    for (i64 base = start; base < end; base += SORT_THREADS) {
        for (int w = 0; w < SORT_WARPS; ++w) warp_counts[w][t] = 0;
        __syncthreads();
        const i64 i = base + t;
        const bool valid = i < end;
        const u64 key = valid ? keys_in[i] : 0;
        const int digit = valid ? (int)((key >> shift) & (RADIX - 1)) : RADIX;  // RADIX: no digit
        const unsigned peers = __match_any_sync(0xffffffffu, digit);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (valid && rank == 0) warp_counts[warp][digit] = __popc(peers);
        __syncthreads();
        // Thread t turns the counts of digit t into exclusive prefixes over the warps.
        int chunk_total = 0;
        for (int w = 0; w < SORT_WARPS; ++w) {
            const int c = warp_counts[w][t];
            warp_counts[w][t] = chunk_total;
            chunk_total += c;
        }
        __syncthreads();
        if (valid) {
            const i64 dst = next[digit] + warp_counts[warp][digit] + rank;
            keys_out[dst] = key;
            vals_out[dst] = vals_in ? vals_in[i] : i;
        }
        __syncthreads();
        next[t] += chunk_total;
        __syncthreads();
    }
}

}  // namespace st
