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

// Thread 0 leaves before the others reach a barrier (after each thread wrote its element).
// st:kernel
__global__ void barrier_after_exit(i64* __restrict__ out) {
    out[threadIdx.x] = 2;
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

// Each thread reads its right neighbour's element of shared memory: without the barrier (sync = 0)
// the read races the neighbour's write.
// st:kernel
__global__ void neighbours(const i64* __restrict__ in, i64* __restrict__ out, int sync) {
    __shared__ i64 s[1024];
    s[threadIdx.x] = in[threadIdx.x];
    if (sync) __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
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


# The emulator's memcheck and racecheck (ci/emulator_sanitize.sh): kernels built under a sanitizer,
# in a process that loads its runtime first. Memcheck allocates device buffers to the byte, so that a
# read one element past a buffer stops the process; racecheck runs each thread as a fiber of its own,
# so that two threads touching one address with no barrier between them are reported.
OUT_OF_BOUNDS = '''
import numpy as np
from sparsetensor.cuda import _emulator, _primitives as P
dev = _emulator.install(_emulator.EmulatedDevice())
a = P.from_host(dev, np.arange(10, dtype=np.int64))
print("inside", P.read_ints(dev, P.take_strided(dev, a, 3, 4)).tolist(), flush=True)
P.take_strided(dev, a, 3, 5)  # reads a[12]
print("not reported", flush=True)
'''

RACE = '''
import ctypes
from types import SimpleNamespace
import numpy as np
from sparsetensor.cuda import _emulator, _module, _source
files = dict(_source._read_all())
files[%r] = %r
_source._read_all = lambda: files
dev = _emulator.EmulatedDevice()
x, out = np.arange(256), np.zeros(256, np.int64)
args = [SimpleNamespace(ptr=x.ctypes.data), SimpleNamespace(ptr=out.ctypes.data)]
_module.launch(dev, %r, "neighbours", (), 2, 128, *args, np.int32(1))
print("with a barrier", bool((out[:128] == np.roll(x[:128], -1)).all()), flush=True)
try:  # stopped inside the kernel: its threads' writes still come before what the host does next
    _module.launch(dev, %r, "barrier_after_exit", (), 1, 64, args[1])
except RuntimeError:
    ctypes.memset(args[1].ptr, 0, out.nbytes)
    print("the host after a failed launch", flush=True)
_module.launch(dev, %r, "neighbours", (), 2, 128, *args, np.int32(0))
print("not reported", flush=True)
''' % (NAME, SOURCE, NAME, NAME, NAME)


def halted_by_sanitizer(mode, script, cache, *clean_lines):
    """Runs `script` under the sanitizer `mode`: the clean launches printed `clean_lines`, and the
    faulty launch after them stopped the process (nothing after it printed); returns the stderr."""
    import os
    import subprocess
    import sys

    lib = {"address": "libasan.so", "thread": "libtsan.so"}[mode]
    runtime = subprocess.run([_emulator.compiler(), f"-print-file-name={lib}"],
                             capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(runtime) or not os.path.exists(runtime):
        pytest.skip(f"the C++ compiler has no {mode} sanitizer runtime ({lib})")
    env = dict(os.environ, LD_PRELOAD=runtime, SPARSETENSOR_EMULATOR_SANITIZE=mode,
               SPARSETENSOR_EMULATOR_CACHE=str(cache), ASAN_OPTIONS="detect_leaks=0:halt_on_error=1",
               TSAN_OPTIONS="halt_on_error=1:report_signal_unsafe=0:report_thread_leaks=0")
    # the runtime stays in this process: what it starts (an editable install's rebuild) runs without
    script = "import os; os.environ.pop('LD_PRELOAD')\n" + script
    # cwd: the installed package is imported, never an unbuilt source tree in the working directory
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=600, cwd=cache)
    for line in clean_lines:
        assert line in res.stdout, res.stderr[-3000:]
    assert "not reported" not in res.stdout
    assert res.returncode != 0
    return res.stderr


def test_memcheck_reports_a_kernel_reading_past_its_buffer(tmp_path):
    report = halted_by_sanitizer("address", OUT_OF_BOUNDS, tmp_path, "inside [0, 3, 6, 9]")
    assert "heap-buffer-overflow" in report
    assert "16 bytes to the right of 80-byte region" in report  # a[12] of 10 int64: the exact extent
    assert "scan.cu:" in report and "take_strided" in report


def test_racecheck_reports_a_read_of_shared_memory_without_a_barrier(tmp_path):
    report = halted_by_sanitizer("thread", RACE, tmp_path, "with a barrier True", "the host after a failed launch")
    assert "WARNING: ThreadSanitizer: data race" in report
    assert "neighbours" in report and "blockIdx.x 0 threadIdx.x" in report


def test_sanitizer_mode_is_named_and_needs_the_runtime_loaded(monkeypatch):
    monkeypatch.setenv("SPARSETENSOR_EMULATOR_SANITIZE", "memory")
    with pytest.raises(ValueError, match="knows 'address' and 'thread'"):
        _emulator.sanitizing()
    monkeypatch.setenv("SPARSETENSOR_EMULATOR_SANITIZE", "address")
    with open("/proc/self/maps") as maps:
        if "libasan" in maps.read():
            pytest.skip("this process runs under AddressSanitizer already")
    with pytest.raises(RuntimeError, match="LD_PRELOAD"):
        _emulator.build_library("scan.cu")
