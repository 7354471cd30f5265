// Stable LSD radix sort of u64 keys carrying an i64 payload (a permutation), 8 bits a pass.
//
// One pass over digit `shift` (sparsetensor/cuda/_primitives.py drives the passes):
// 1. radix_histogram: block b counts the digits of its tile into hist[digit * nblocks + b];
// 2. an exclusive scan of hist (digit-major, so every digit's slots run over the
//    tiles in order) gives each (digit, tile) its first output position;
// 3. radix_scatter: block b sorts its tile by the digit in shared memory (stable), then
//    writes the sorted tile out, so that consecutive threads write consecutive positions
//    of one digit's run (about SORT_TILE / RADIX keys a run: whole 128-byte lines rather
//    than one scattered 8-byte write a key). Keys and payloads go through the same
//    staging buffer one after the other.
// Launch both with SORT_THREADS threads and one block per tile of SORT_TILE keys.
#include "common.cuh"
#include "scan.cuh"

#define SORT_THREADS 256
#define SORT_WARPS (SORT_THREADS / 32)
#define SORT_TILE 4096
#define RADIX 256
#define SORT_ITEMS (SORT_TILE / SORT_THREADS)

namespace st {

// st:kernel
__global__ void radix_histogram(const u64* __restrict__ keys, i64 n, int shift, i64* __restrict__ hist) {
    __shared__ u32 counts[RADIX];
    counts[threadIdx.x] = 0;  // SORT_THREADS == RADIX
    __syncthreads();
    const i64 start = (i64)blockIdx.x * SORT_TILE;
    const i64 end = start + SORT_TILE < n ? start + SORT_TILE : n;
    // the tile's keys loaded first (SORT_ITEMS loads in flight a thread), then one shared atomic
    // per digit group of a warp: the high digits' passes often see one digit
    u64 k[SORT_ITEMS];
#pragma unroll
    for (int r = 0; r < SORT_ITEMS; ++r) {
        const i64 i = start + r * SORT_THREADS + threadIdx.x;
        k[r] = i < end ? keys[i] : 0;
    }
    const unsigned below = (1u << (threadIdx.x & 31)) - 1u;
#pragma unroll
    for (int r = 0; r < SORT_ITEMS; ++r) {
        const int digit = start + r * SORT_THREADS + threadIdx.x < end ? (int)((k[r] >> shift) & (RADIX - 1)) : RADIX;
        const unsigned peers = __match_any_sync(0xffffffffu, digit);
        if (digit < RADIX && (peers & below) == 0) atomicAdd(&counts[digit], (u32)__popc(peers));
    }
    __syncthreads();
    hist[(i64)threadIdx.x * gridDim.x + blockIdx.x] = counts[threadIdx.x];
}

// A key's rank in its tile: warp w owns positions [w * WARP_SPAN, (w + 1) * WARP_SPAN) and takes
// them 32 at a time in order; equal digits of a round are ranked by lane (__match_any_sync), and
// the warp's running count of each digit carries the rank over the rounds. Then thread t turns
// the warps' counts of digit t into prefixes over the warps, and a block scan over the digits
// gives each digit's start in the sorted tile: a key's place is start + warp prefix + rank.
// vals_in == nullptr stands for the identity permutation (the first pass).
#define WARP_SPAN (SORT_ITEMS * 32)
// st:kernel
__global__ void radix_scatter(const u64* __restrict__ keys_in, const i64* __restrict__ vals_in,
                              u64* __restrict__ keys_out, i64* __restrict__ vals_out, i64 n, int shift,
                              const i64* __restrict__ offsets) {
    __shared__ int warp_counts[SORT_WARPS][RADIX];  // per warp and digit: count, then prefix
    __shared__ int digit_start[RADIX];              // where each digit's run starts in the sorted tile
    __shared__ i64 out_base[RADIX];                 // output position of the sorted tile's position 0
    __shared__ unsigned char digits[SORT_TILE];     // the digit of each sorted position
    __shared__ u64 stage[SORT_TILE];                // the sorted tile: keys, then payloads
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const unsigned below = (1u << lane) - 1u;
    const i64 start = (i64)blockIdx.x * SORT_TILE;
    const int len = (int)(n - start < SORT_TILE ? n - start : SORT_TILE);
    for (int w = 0; w < SORT_WARPS; ++w) warp_counts[w][t] = 0;
    u64 key[SORT_ITEMS];
    int place[SORT_ITEMS];
#pragma unroll
    for (int r = 0; r < SORT_ITEMS; ++r) {
        const int j = warp * WARP_SPAN + r * 32 + lane;
        key[r] = j < len ? keys_in[start + j] : 0;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < SORT_ITEMS; ++r) {
        const int j = warp * WARP_SPAN + r * 32 + lane;
        const int digit = j < len ? (int)((key[r] >> shift) & (RADIX - 1)) : RADIX;  // RADIX: no key
        const unsigned peers = __match_any_sync(0xffffffffu, digit);
        const int before = digit < RADIX ? warp_counts[warp][digit] : 0;
        __syncwarp();
        if (digit < RADIX && (peers & below) == 0) warp_counts[warp][digit] = before + __popc(peers);
        __syncwarp();
        place[r] = before + __popc(peers & below);
    }
    __syncthreads();
    int total = 0;
    for (int w = 0; w < SORT_WARPS; ++w) {
        const int c = warp_counts[w][t];
        warp_counts[w][t] = total;
        total += c;
    }
    i64 tile_total;
    const int first = (int)(block_inclusive_scan(total, &tile_total) - total);
    digit_start[t] = first;
    out_base[t] = offsets[(i64)t * gridDim.x + blockIdx.x] - first;
    __syncthreads();
#pragma unroll
    for (int r = 0; r < SORT_ITEMS; ++r) {
        const int j = warp * WARP_SPAN + r * 32 + lane;
        if (j < len) {
            const int digit = (int)((key[r] >> shift) & (RADIX - 1));
            place[r] += digit_start[digit] + warp_counts[warp][digit];
            stage[place[r]] = key[r];
            digits[place[r]] = (unsigned char)digit;
        }
    }
    __syncthreads();
    for (int j = t; j < len; j += SORT_THREADS) keys_out[out_base[digits[j]] + j] = stage[j];
    __syncthreads();
#pragma unroll
    for (int r = 0; r < SORT_ITEMS; ++r) {
        const int j = warp * WARP_SPAN + r * 32 + lane;
        if (j < len) stage[place[r]] = (u64)(vals_in ? vals_in[start + j] : start + j);
    }
    __syncthreads();
    for (int j = t; j < len; j += SORT_THREADS) vals_out[out_base[digits[j]] + j] = (i64)stage[j];
}

}  // namespace st
