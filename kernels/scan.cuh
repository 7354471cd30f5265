// Block-wide reductions and scans used by several kernel files.
#pragma once
#include "common.cuh"

namespace st {

// Inclusive scan of one i64 per thread over the block (blockDim.x a multiple of 32, <= 1024).
// Every thread gets its inclusive prefix; *total receives the block's sum.
__device__ __forceinline__ i64 block_inclusive_scan(i64 x, i64* total) {
    __shared__ i64 warp_totals[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int d = 1; d < 32; d <<= 1) {
        i64 y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_totals[warp] = x;
    __syncthreads();
    if (warp == 0) {
        i64 t = lane < nwarps ? warp_totals[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            i64 y = __shfl_up_sync(0xffffffffu, t, d);
            if (lane >= d) t += y;
        }
        if (lane < nwarps) warp_totals[lane] = t;
    }
    __syncthreads();
    if (warp > 0) x += warp_totals[warp - 1];
    *total = warp_totals[nwarps - 1];
    __syncthreads();  // warp_totals may be reused by the next call
    return x;
}

// Sum of one accumulator per thread over the block, returned to thread 0 (others: partial).
// blockDim.x must be a power of two <= 1024.
template <typename A>
__device__ __forceinline__ A block_sum(A x) {
    __shared__ A partial[1024];
    partial[threadIdx.x] = x;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] = partial[threadIdx.x] + partial[threadIdx.x + s];
        __syncthreads();
    }
    A r = partial[0];
    __syncthreads();
    return r;
}

}  // namespace st
