"""The kernel emulator's own scheduling: barriers, warp exchanges and the errors it reports.

Every other emulator test runs our kernels through it; these run small kernels written for
the purpose, so that a fault of the scheduler (a thread's registers or stack lost across a
barrier, a barrier released too early, an error missed) shows here by name. Each runs with
threads in order and shuffled.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from cuda_support import _emulator_problem
from sparsetensor.cuda import _emulator, _module, _source

pytestmark = pytest.mark.skipif(_emulator_problem() is not None, reason=str(_emulator_problem()))

NAME = "emulator_selftest.cu"
SOURCE = rb'''
#include "common.cuh"
namespace st {

// Per block: the sum of its inputs by a tree in shared memory (a barrier per level), and per
// thread its input times the number of levels, carried in registers across every barrier.
// st:kernel
__global__ void tree_sums(const i64* __restrict__ in, i64* __restrict__ sums, double* __restrict__ kept) {
    __shared__ i64 s[1024];
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const double mine = (double)in[i];
    double carried = 0.0;
    s[threadIdx.x] = in[i];
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        carried += mine;
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = s[0];
    kept[i] = carried;
}

// Per warp: the sum of its lanes by shuffles down, and each lane's left neighbour by a shuffle up.
// st:kernel
__global__ void warp_sums(const i64* __restrict__ in, i64* __restrict__ sums, i64* __restrict__ left) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    i64 v = in[i];
    left[i] = __shfl_up_sync(0xffffffffu, v, 1);
    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
    if ((threadIdx.x & 31) == 0) sums[i / 32] = v;
}

// Thread 0 leaves before the others reach a barrier.
// st:kernel
__global__ void barrier_after_exit(i64* __restrict__ out) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

// Half of the first warp waits at a block barrier, the other half at a warp barrier.
// st:kernel
__global__ void different_barriers(i64* __restrict__ out) {
    if (threadIdx.x < 16) __syncthreads(); else if (threadIdx.x < 32) __syncwarp(); else __syncthreads();
    out[threadIdx.x] = 1;
}

}  // namespace st
'''


@pytest.fixture(scope="module")
def sources():
    files = dict(_source._read_all())
    files[NAME] = SOURCE
    saved = _source._read_all
    _source._read_all = lambda: files
    try:
        yield
    finally:
        _source._read_all = saved


@pytest.fixture(params=[0, 7], ids=["in-order", "shuffled"])
def device(request, sources):
    return _emulator.EmulatedDevice(seed=request.param)


def ptr(a):
    return SimpleNamespace(ptr=a.ctypes.data)


@pytest.mark.parametrize("block", [32, 256, 1024])
def test_block_barriers_keep_every_threads_state(device, block):
    blocks = 3
    x = np.random.default_rng(block).integers(-1000, 1000, blocks * block)
    sums, kept = np.zeros(blocks, np.int64), np.zeros(blocks * block)
    _module.launch(device, NAME, "tree_sums", (), blocks, block, ptr(x), ptr(sums), ptr(kept))
    np.testing.assert_array_equal(sums, x.reshape(blocks, block).sum(1))
    np.testing.assert_array_equal(kept, x * float(np.log2(block)))


def test_warp_shuffles(device):
    x = np.random.default_rng(1).integers(-1000, 1000, 2 * 128)
    sums, left = np.zeros(x.size // 32, np.int64), np.zeros_like(x)
    _module.launch(device, NAME, "warp_sums", (), 2, 128, ptr(x), ptr(sums), ptr(left))
    np.testing.assert_array_equal(sums, x.reshape(-1, 32).sum(1))
    lanes = x.reshape(-1, 32)
    want = np.concatenate([lanes[:, :1], lanes[:, :-1]], axis=1).ravel()  # lane 0 keeps its own
    np.testing.assert_array_equal(left, want)


@pytest.mark.parametrize("kernel, message", [
    ("barrier_after_exit", "__syncthreads\\(\\) was reached after other threads of the block exited"),
    ("different_barriers", "deadlock: threads wait at different barriers"),
])
def test_barrier_misuse_is_reported_and_the_next_launch_runs(device, kernel, message):
    out = np.zeros(64, np.int64)
    with pytest.raises(RuntimeError, match=f"emulated {NAME}:{kernel}.*{message}"):
        _module.launch(device, NAME, kernel, (), 1, 64, ptr(out))
    x = np.arange(64)
    sums, kept = np.zeros(1, np.int64), np.zeros(64)
    _module.launch(device, NAME, "tree_sums", (), 1, 64, ptr(x), ptr(sums), ptr(kept))
    assert sums[0] == x.sum()
