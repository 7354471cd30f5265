"""The memory pool of large kernel outputs (sparsetensor/_lib/_pool.pyx, st.set_pool_limit)."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp

import sparsetensor as st
from sparsetensor._lib import _pool

BIG = _pool.MIN_BYTES // 8  # float64 items of the smallest pooled array
BLOCK = _pool.BLOCK_MIN_BYTES // 8  # float64 items of the smallest block the pool keeps


@pytest.fixture
def pool():
    """A pool with room for a few blocks, emptied before and after the test."""
    old = st.set_pool_limit(0)
    st.set_pool_limit(256 << 20)
    yield
    st.set_pool_limit(0)
    st.set_pool_limit(old)


def test_small_arrays_do_not_touch_the_pool(pool):
    before = st.pool_stats()
    a = _pool.empty(BIG - 1, np.float64)
    b = _pool.empty((3, 5), np.dtype(np.int32))
    assert a.shape == (BIG - 1,) and b.shape == (3, 5) and b.dtype == np.int32
    del a, b
    assert st.pool_stats() == before


def test_a_freed_block_is_reused(pool):
    a = _pool.empty((2, BIG), np.float64)
    assert a.ctypes.data % 64 == 0 and a.flags.owndata and a.flags.writeable and a.base is None
    a[:] = 7.0
    first = a.ctypes.data
    s0 = st.pool_stats()
    del a
    s1 = st.pool_stats()
    assert s1["cached_blocks"] == s0["cached_blocks"] + 1 and s1["cached_bytes"] > s0["cached_bytes"]
    b = _pool.empty(2 * BIG, np.int64)  # same bytes, another dtype and shape
    s2 = st.pool_stats()
    assert s2["hits"] == s1["hits"] + 1 and s2["cached_blocks"] == s0["cached_blocks"]
    assert b.ctypes.data == first
    b[:] = np.arange(b.size)  # the whole block is writable
    assert b[-1] == b.size - 1


def test_of_equal_blocks_the_one_freed_last_is_reused(pool):
    # the last one freed is the likeliest to have its pages faulted in and in cache: a loop over
    # one output must not walk through every kept block of its size
    a, b, c = (_pool.empty(BIG, np.float64) for _ in range(3))
    where = [x.ctypes.data for x in (a, b, c)]
    del c, a, b  # b last
    d = _pool.empty(BIG, np.float64)
    assert d.ctypes.data == where[1]
    del d
    for _ in range(3):  # and again, the same block
        e = _pool.empty(BIG, np.float64)
        assert e.ctypes.data == where[1]
        del e


def test_a_block_far_larger_than_the_request_is_not_handed_out(pool):
    a = _pool.empty(8 * BLOCK, np.float64)
    del a
    s0 = st.pool_stats()
    b = _pool.empty(BLOCK, np.float64)  # 4 MiB against a 32 MiB block
    s1 = st.pool_stats()
    assert s1["misses"] == s0["misses"] + 1 and s1["cached_blocks"] == s0["cached_blocks"]
    del b


def test_mid_size_arrays_share_the_smallest_blocks(pool):
    """From 256 KiB to 4 MiB an array takes a whole 4 MiB block (glibc would map and unmap the
    same size again on every call of a loop), so any of them reuses any such block."""
    a = _pool.empty(BIG, np.float64)  # 256 KiB
    first = a.ctypes.data
    del a
    s0 = st.pool_stats()
    b = _pool.empty(BLOCK - 64, np.float64)  # just under 4 MiB (64 items: the block's header)
    s1 = st.pool_stats()
    assert s1["hits"] == s0["hits"] + 1 and b.ctypes.data == first
    b[:] = 1.0  # the whole request is writable
    del b


def test_limit_bounds_what_is_kept(pool):
    st.set_pool_limit(3 * _pool.BLOCK_MIN_BYTES)
    arrays = [_pool.empty(BIG, np.float64) for _ in range(4)]
    del arrays
    s = st.pool_stats()
    assert s["cached_bytes"] <= 3 * _pool.BLOCK_MIN_BYTES and s["cached_blocks"] >= 1
    assert st.set_pool_limit(0) == 3 * _pool.BLOCK_MIN_BYTES
    assert st.pool_stats()["cached_bytes"] == 0
    a = _pool.empty(BIG, np.float64)  # the pool off: plain NumPy memory, nothing kept
    del a
    assert st.pool_stats()["cached_blocks"] == 0


def test_bad_limit():
    with pytest.raises(ValueError, match=">= 0"):
        st.set_pool_limit(-1)


def test_resize_keeps_the_data(pool):
    a = _pool.empty(BIG, np.float64)
    a[:] = np.arange(BIG)
    a.resize(3 * BIG, refcheck=False)
    assert np.array_equal(a[:BIG], np.arange(BIG))
    a.resize(10, refcheck=False)  # down to a small block
    assert np.array_equal(a, np.arange(10))
    a.resize(BIG, refcheck=False)  # and up from one
    assert np.array_equal(a[:10], np.arange(10))


def test_a_shrink_stays_in_place(pool):
    """Shrinking a pooled array (the SpGEMM and merge outputs sized for an upper bound) keeps its
    block: no copy, the same address, the data; freed, the whole block goes back to the pool."""
    a = _pool.empty(4 * BIG, np.float64)
    a[:] = np.arange(4 * BIG)
    address = a.ctypes.data
    a.resize(BIG // 3, refcheck=False)
    assert a.ctypes.data == address and np.array_equal(a, np.arange(BIG // 3))
    a[:] = -1.0  # the kept part stays writable
    before = st.pool_stats()["cached_bytes"]
    del a
    assert st.pool_stats()["cached_bytes"] >= before + 4 * BIG * 8


def test_blocks_freed_from_many_threads(pool):
    st.set_pool_limit(5 * _pool.BLOCK_MIN_BYTES)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                n = int(rng.integers(BIG, 3 * BIG))
                a = _pool.empty(n, np.float64)
                a[:: 4096] = seed
                if not (a[:: 4096] == seed).all():
                    errors.append(seed)
                del a
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    s = st.pool_stats()
    assert s["cached_bytes"] <= 5 * _pool.BLOCK_MIN_BYTES and s["cached_blocks"] <= 5


@pytest.mark.parametrize("env, expect", [("0", "limit 0"), ("12345678", "limit 12345678"),
                                         ("lots", "SPARSETENSOR_POOL_BYTES must be a number"),
                                         ("-5", "SPARSETENSOR_POOL_BYTES must be >= 0")])
def test_environment_sets_the_limit(env, expect):
    code = "import sparsetensor as st; print('limit', st.pool_stats()['limit'])"
    # cwd="/": the installed package is imported, never a source tree in the working directory
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                       env={**os.environ, "SPARSETENSOR_POOL_BYTES": env})
    assert expect in r.stdout + r.stderr


def test_kernel_outputs_from_the_pool_are_right(pool):
    """Outputs of 10^6-entry ops come from the pool, twice over (the second time from blocks the
    first gave back), and agree with SciPy each time."""
    rng = np.random.default_rng(3)
    A = sp.random(1500, 1400, density=0.4, format="csr", random_state=rng, dtype=np.float64)
    B = sp.random(1500, 1400, density=0.4, format="csr", random_state=rng, dtype=np.float64)
    t, u = st.from_scipy(A), st.from_scipy(B)
    x = rng.standard_normal((1400, 4))
    s0 = st.pool_stats()
    for _ in range(2):
        csc = t.to_sparse_csc()
        assert abs(csc.to_scipy() - A.tocsc()).max() == 0
        total = t + u
        assert abs(total.to_scipy() - (A + B)).max() < 1e-12
        coo = t.to_sparse_coo()
        assert np.array_equal(coo.indices()[0], np.repeat(np.arange(1500), np.diff(A.indptr)))
        back = coo.to_sparse_csr()
        assert np.array_equal(back.values(), A.data)
        y = st.matmul(t, x)
        assert np.allclose(y, A @ x)
        del csc, total, coo, back, y
    s1 = st.pool_stats()
    assert s1["hits"] > s0["hits"] and s1["misses"] > s0["misses"]


def test_kernel_scratch_from_the_pool_is_right(pool):
    """Kernels whose scratch passes 4 MiB (SpGEMM's per-thread accumulators and parts, the scatter
    product's per-thread outputs), twice over: the second time in blocks the first gave back."""
    t = st.stencil((700, 700), 5, index_dtype=np.int32)
    A = t.to_scipy()
    x = np.random.default_rng(0).standard_normal((A.shape[1], 4))
    csc = t.to_sparse_csc()
    ref_sq = (A @ A).tocsr()
    ref_sq.sort_indices()
    ref_mm = A @ x
    s0 = st.pool_stats()
    for _ in range(2):
        sq = st.matmul(t, t, threads=2).to_scipy()
        assert np.array_equal(sq.indptr, ref_sq.indptr) and np.array_equal(sq.indices, ref_sq.indices)
        assert np.allclose(sq.data, ref_sq.data)
        assert np.allclose(st.matmul(csc, x, threads=2), ref_mm)
        del sq
    assert st.pool_stats()["hits"] > s0["hits"]
