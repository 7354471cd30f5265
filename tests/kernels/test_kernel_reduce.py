"""The sums over one sparse dim of compressed storage (_reduce.compressed_sum, _reduce.plain_sum):
results against NumPy for every value dtype, int32/int64 indices, batches, block and dense
lanes, empty and hub slots, 1-3 threads; and their argument checks (mismatched arrays,
broken compressed or plain indices raise ValueError, never read out of bounds).
"""
import numpy as np
import pytest

from sparsetensor._lib import _reduce

VALUE_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.float32, np.float64, np.complex64,
                np.complex128]
INDEX_DTYPES = [np.int32, np.int64]
THREADS = [1, 2, 3]
# (A, K, E): lanes A x E kept, K items summed: csr (1, 1, 1), bsr 2x3 row sums (2, 3, 1),
# bsc 2x3 column sums / dense dims (1, 2, 3)
LANES = [(1, 1, 1), (2, 3, 1), (1, 2, 3)]


def _compressed(rng, B, G, nnz, hub=False, empty=0.3):
    """(B, G + 1) compressed indices with nnz entries per batch: empty slots, and with `hub`
    one slot holding about 60% of the entries."""
    out = np.zeros((B, G + 1), np.int64)
    for b in range(B):
        w = rng.random(G) * (rng.random(G) >= empty)
        if hub and G:
            w[rng.integers(G)] = 1.5 * max(w.sum(), 1.0)
        if G and w.sum() == 0:
            w[0] = 1.0
        counts = rng.multinomial(nnz, w / w.sum()) if G else np.zeros(0, np.int64)
        out[b, 1:] = np.cumsum(counts)
    return out


def _plain(rng, c, P, sort=True, unique=False):
    """Plain indices in [0, P) for each slot of c, sorted (and distinct) within a slot when asked."""
    B, nnz = c.shape[0], int(c[0, -1])
    p = rng.integers(0, P, size=(B, nnz))
    for b in range(B):
        for g in range(c.shape[1] - 1):
            lo, hi = c[b, g], c[b, g + 1]
            if unique:
                p[b, lo:hi] = np.sort(rng.choice(P, size=hi - lo, replace=False))
            elif sort:
                p[b, lo:hi].sort()
    return p


def _sort_slots(c, p):
    """p with the plain indices of every slot sorted."""
    p = p.copy()
    for b in range(c.shape[0]):
        for g in range(c.shape[1] - 1):
            p[b, c[b, g]:c[b, g + 1]].sort()
    return p


def _values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 5 if dtype.itemsize == 1 else 100, size=shape).astype(dtype)
    v = rng.standard_normal(shape)
    if dtype.kind == "c":
        v = v + 1j * rng.standard_normal(shape)
    return v.astype(dtype)


def _slot_ref(c, x):
    B, G = c.shape[0], c.shape[1] - 1
    s = x.sum(axis=3, dtype=x.dtype)  # (B, nnz, A, E)
    ref = np.zeros((B, G) + s.shape[2:], x.dtype)
    for b in range(B):
        np.add.at(ref[b], np.repeat(np.arange(G), np.diff(c[b])), s[b])
    return ref


def _plain_ref(p, x, P):
    s = x.sum(axis=3, dtype=x.dtype)
    ref = np.zeros((p.shape[0], P) + s.shape[2:], x.dtype)
    for b in range(p.shape[0]):
        np.add.at(ref[b], p[b], s[b])
    return ref


def _assert_sums(got, ref):
    if got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, ref)
    else:
        tol = 2e-4 if got.dtype in (np.float32, np.complex64) else 1e-10
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_compressed_sum_dtypes(rng, dtype, index_dtype, threads):
    c = _compressed(rng, 1, 3000, 90_000).astype(index_dtype)
    x = _values(rng, (1, 90_000, 1, 1, 1), dtype)
    out = np.empty((1, 3000, 1, 1), dtype)
    _reduce.compressed_sum(c, x, out, threads)
    _assert_sums(out, _slot_ref(c, x))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.complex128, np.float32])
@pytest.mark.parametrize("B", [1, 3])
def test_compressed_sum_batches_lanes_hubs(rng, B, dtype, lanes, threads):
    A, K, E = lanes
    nnz = 40_000 // (A * K * E)
    c = _compressed(rng, B, 700, nnz, hub=True)
    x = _values(rng, (B, nnz, A, K, E), dtype)
    out = np.empty((B, 700, A, E), dtype)
    _reduce.compressed_sum(c, x, out, threads)
    _assert_sums(out, _slot_ref(c, x))


@pytest.mark.parametrize("threads", THREADS)
def test_compressed_sum_one_slot_over_threads(rng, threads):
    # a single slot (and a short one): merge-path ranges split the slot between the threads
    c = np.array([[0, 199_990, 200_000]], np.int64)
    x = _values(rng, (1, 200_000, 1, 1, 1), np.float64)
    out = np.empty((1, 2, 1, 1))
    _reduce.compressed_sum(c, x, out, threads)
    _assert_sums(out, _slot_ref(c, x))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_plain_sum_dtypes(rng, dtype, index_dtype, threads):
    c = _compressed(rng, 1, 2000, 80_000)
    p = _plain(rng, c, 5000).astype(index_dtype)
    x = _values(rng, (1, 80_000, 1, 1, 1), dtype)
    out = np.full((1, 5000, 1, 1), 7, dtype)  # overwritten
    _reduce.plain_sum(c.astype(index_dtype), p, x, out, threads)
    _assert_sums(out, _plain_ref(p, x, 5000))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("sort", [True, False])
@pytest.mark.parametrize("B", [1, 2])
def test_plain_sum_batches_lanes_hubs(rng, B, sort, lanes, threads):
    A, K, E = lanes
    nnz = 60_000 // (A * K * E)
    c = _compressed(rng, B, 500, nnz, hub=True)
    p = _plain(rng, c, 900, sort=False)
    p[:, :nnz // 3] %= 3  # a third of the entries in three hub columns
    if sort:
        p = _sort_slots(c, p)
    x = _values(rng, (B, nnz, A, K, E), np.float64)
    out = np.empty((B, 900, A, E))
    _reduce.plain_sum(c, p, x, out, threads)
    _assert_sums(out, _plain_ref(p, x, 900))


@pytest.mark.parametrize("threads", [2, 3])
def test_plain_sum_threads_add_in_one_order(rng, threads):
    # each column is summed by one thread, in slot order: the same bits as one thread
    c = _compressed(rng, 1, 3000, 120_000, empty=0.0)
    p = _plain(rng, c, 100_000, unique=True)
    x = _values(rng, (1, 120_000, 1, 1, 1), np.float64)
    one, many = np.empty((1, 100_000, 1, 1)), np.empty((1, 100_000, 1, 1))
    _reduce.plain_sum(c, p, x, one, 1)
    _reduce.plain_sum(c, p, x, many, threads)
    np.testing.assert_array_equal(one, many)


@pytest.mark.parametrize("threads", THREADS)
def test_empty_and_zero_sizes(threads):
    for B, G, nnz, P in [(0, 3, 0, 4), (2, 0, 0, 4), (1, 3, 0, 4), (1, 3, 0, 0)]:
        c = np.zeros((B, G + 1), np.int64)
        x = np.zeros((B, nnz, 1, 1, 1))
        out = np.full((B, G, 1, 1), 5.0)
        _reduce.compressed_sum(c, x, out, threads)
        assert (out == 0).all()
        out = np.full((B, P, 1, 1), 5.0)
        _reduce.plain_sum(c, np.zeros((B, nnz), np.int64), x, out, threads)
        assert (out == 0).all()


def test_mismatched_arrays_raise():
    c = np.array([[0, 1, 3]], np.int64)
    p = np.array([[0, 1, 2]], np.int64)
    x = np.ones((1, 3, 1, 1, 1))
    with pytest.raises(ValueError, match="disagree"):
        _reduce.compressed_sum(c, x, np.empty((1, 3, 1, 1)), 1)  # 2 slots, not 3
    with pytest.raises(ValueError, match="disagree"):
        _reduce.compressed_sum(c, x, np.empty((1, 2, 2, 1)), 1)  # lanes
    with pytest.raises(ValueError, match="disagree"):
        _reduce.compressed_sum(np.zeros((2, 3), np.int64), x, np.empty((2, 2, 1, 1)), 1)  # batches
    with pytest.raises(ValueError, match="disagree"):
        _reduce.plain_sum(c, p[:, :2], x, np.empty((1, 3, 1, 1)), 1)
    with pytest.raises(ValueError, match="disagree"):
        _reduce.plain_sum(c, p, x, np.empty((1, 3, 1, 2)), 1)
    with pytest.raises(ValueError, match="disagree"):
        _reduce.plain_sum(c, p, np.ones((1, 4, 1, 1, 1)), np.empty((1, 3, 1, 1)), 1)
    with pytest.raises(ValueError, match="at least one entry"):
        _reduce.compressed_sum(np.zeros((1, 0), np.int64), x, np.empty((1, 0, 1, 1)), 1)
    with pytest.raises(TypeError, match="one sum dtype"):
        _reduce.compressed_sum(c, x, np.empty((1, 2, 1, 1), np.float32), 1)
    for bad in (np.bool_, np.float16, np.uint16):
        with pytest.raises(TypeError, match="one sum dtype"):
            _reduce.plain_sum(c, p, x.astype(bad), np.empty((1, 3, 1, 1), bad), 1)
    with pytest.raises(TypeError, match="int32 or int64"):
        _reduce.plain_sum(c, p.astype(np.int32), x, np.empty((1, 3, 1, 1)), 1)
    with pytest.raises(TypeError, match="int32 or int64"):
        _reduce.compressed_sum(c.astype(np.float64), x, np.empty((1, 2, 1, 1)), 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        _reduce.compressed_sum(c, np.ones((1, 3, 1, 2, 1))[:, :, :, ::2], np.empty((1, 2, 1, 1)), 1)
    with pytest.raises(ValueError, match="5-dimensional"):
        _reduce.plain_sum(c, p, np.ones((1, 3, 1)), np.empty((1, 3, 1, 1)), 1)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        _reduce.compressed_sum([[0, 1, 3]], x, np.empty((1, 2, 1, 1)), 1)
    ro = np.empty((1, 2, 1, 1))
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="writeable"):
        _reduce.compressed_sum(c, x, ro, 1)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("fn", ["compressed_sum", "plain_sum"])
def test_broken_compressed_indices_raise(threads, fn):
    n = 200_000
    x = np.ones((1, n, 1, 1, 1))
    p = np.zeros((1, n), np.int64)
    good = np.linspace(0, n, 101).astype(np.int64).reshape(1, -1)

    def call(c):
        if fn == "compressed_sum":
            _reduce.compressed_sum(c, x, np.empty((1, 100, 1, 1)), threads)
        else:
            _reduce.plain_sum(c, p, x, np.empty((1, 3, 1, 1)), threads)

    call(good)
    for where, value in [(50, good[0, 52]), (50, -5), (50, n + 1)]:  # decreasing, negative, past nnz
        bad = good.copy()
        bad[0, where] = value
        with pytest.raises(ValueError, match="non-decreasing"):
            call(bad)
    for where, value in [(0, 1), (100, n - 1)]:  # 5.1 and 5.2
        bad = good.copy()
        bad[0, where] = value
        with pytest.raises(ValueError, match="start at 0 and end at nnz"):
            call(bad)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("sort", [True, False])
def test_plain_out_of_range_raises(rng, threads, sort):
    c = _compressed(rng, 2, 1000, 100_000)
    p = _plain(rng, c, 50, sort=sort)
    x = np.ones((2, 100_000, 1, 1, 1))
    for value in (50, -1, 1 << 40):
        bad = p.copy()
        bad[1, 777] = value
        if sort:
            bad = _sort_slots(c, bad)
        with pytest.raises(ValueError, match="plain index out of range: batch 1"):
            _reduce.plain_sum(c, bad, x, np.empty((2, 50, 1, 1)), threads)
