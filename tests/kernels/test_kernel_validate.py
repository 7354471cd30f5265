"""Tests of the invariant-checking kernels in sparsetensor._lib._validate.

The kernels are called directly (no Python wrapper) and compared with literal
pure-Python references of the documented reporting order, on valid inputs, on
targeted corruptions of each invariant, and on random corruptions large enough
to take the multithreaded path (>= 100k elements).
"""
import ctypes
import mmap
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import distinct_cells
from sparsetensor._lib._validate import coo_is_coalesced, validate_compressed, validate_coo

INDEX_DTYPES = [np.int32, np.int64]
# 3 and 7 threads give more chunks than cores and chunk edges at odd places.
NTHREADS = [1, 2, 3, 7]
LARGE = 300_000  # above the kernels' serial threshold of 100k elements


# ---------------------------------------------------------------------------
# References: the specification, literally, on Python ints (no overflow).
# ---------------------------------------------------------------------------

def ref_validate_compressed(compressed, plain, plain_size):
    c, p = compressed.tolist(), plain.tolist()
    nbatch, n, nnz = compressed.shape[0], compressed.shape[1] - 1, plain.shape[1]
    for b in range(nbatch):
        if c[b][0] != 0:
            return ("5.1", b, 0, -1, c[b][0])
        if c[b][n] != nnz:
            return ("5.2", b, n, -1, c[b][n])
    for b in range(nbatch):
        for i in range(1, n + 1):
            d = c[b][i] - c[b][i - 1]
            if not 0 <= d <= plain_size:
                return ("5.3", b, i, -1, d)
    for b in range(nbatch):
        cb, pb = c[b], p[b]
        for row in range(n):
            s, e = cb[row], cb[row + 1]
            for k in range(s, e):
                v = pb[k]
                if v < 0:
                    return ("5.4", b, row, k, v)
                if v >= plain_size:
                    return ("5.5", b, row, k, v)
                if k > s and v <= pb[k - 1]:
                    return ("5.6", b, row, k, v)
    return None


def ref_validate_coo(indices, shape):
    for d, (row, size) in enumerate(zip(indices.tolist(), shape.tolist())):
        for k, v in enumerate(row):
            if v < 0:
                return ("C4", d, k, v)
            if v >= size:
                return ("C5", d, k, v)
    return None


def ref_coo_is_coalesced(indices):
    columns = list(zip(*indices.tolist())) if indices.shape[0] else [()] * indices.shape[1]
    return all(a < b for a, b in zip(columns, columns[1:]))


# ---------------------------------------------------------------------------
# Random valid inputs
# ---------------------------------------------------------------------------

def random_compressed(rng, nbatch, n, nnz, plain_size, dtype):
    """Valid batched compressed/plain indices with nnz elements per batch."""
    assert nnz <= n * plain_size or nnz == 0
    compressed = np.zeros((nbatch, n + 1), np.int64)
    plain = np.zeros((nbatch, nnz), np.int64)
    for b in range(nbatch):
        cells = distinct_cells(rng, n * plain_size, nnz)
        compressed[b, 1:] = np.cumsum(np.bincount(cells // max(plain_size, 1), minlength=n))
        plain[b] = cells % max(plain_size, 1)
    return compressed.astype(dtype), plain.astype(dtype)


def random_coo(rng, shape, nnz, dtype):
    """Coalesced COO indices (S, nnz): distinct cells in row-major order."""
    cells = distinct_cells(rng, int(np.prod(shape)), nnz)
    return np.stack(np.unravel_index(cells, shape)).astype(dtype)


def corrupt_compressed(rng, compressed, plain, plain_size, count):
    """Apply count random corruptions in place; cover every invariant."""
    nbatch, n1 = compressed.shape
    nnz = plain.shape[1]
    info = np.iinfo(compressed.dtype)
    for _ in range(count):
        kind = rng.integers(0, 10)
        b = rng.integers(0, nbatch)
        if kind == 0:    # 5.1 / 5.2 (rare, they mask everything else)
            if rng.integers(0, 2):
                compressed[b, 0] = rng.choice([-1, 1])
            else:
                compressed[b, -1] = nnz + rng.choice([-1, 1])
        elif kind == 1:  # 5.3: a decreasing compressed value
            i = rng.integers(0, n1)
            compressed[b, i] = rng.choice([compressed[b, i] - 1, info.min, -1])
        elif kind == 2:  # 5.3: a too large one
            i = rng.integers(0, n1)
            compressed[b, i] = rng.choice([compressed[b, i] + plain_size + 1, info.max])
        elif nnz == 0:
            continue
        elif kind in (3, 4):  # 5.4
            plain[b, rng.integers(0, nnz)] = rng.choice([-1, -(plain_size + 5), info.min])
        elif kind in (5, 6):  # 5.5
            plain[b, rng.integers(0, nnz)] = rng.choice([plain_size, plain_size + 7, info.max])
        elif kind == 7:  # 5.6: duplicate of the previous value
            k = rng.integers(1, nnz) if nnz > 1 else 0
            plain[b, k] = plain[b, k - 1]
        else:            # 5.6: any value in range, usually unsorted
            plain[b, rng.integers(0, nnz)] = rng.integers(0, max(plain_size, 1))


def guarded(arr, at_end):
    """A copy of arr placed right after (at_end=False) or right before
    (at_end=True) an inaccessible page, so that reading out of bounds crashes."""
    page = mmap.PAGESIZE
    size = -(-arr.nbytes // page) * page
    buf = mmap.mmap(-1, size + 2 * page)
    anchor = ctypes.c_char.from_buffer(buf)
    addr = ctypes.addressof(anchor)
    del anchor
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for guard in (addr, addr + page + size):
        assert libc.mprotect(guard, page, 0) == 0, ctypes.get_errno()  # PROT_NONE
    offset = page + (size - arr.nbytes if at_end else 0)
    out = np.frombuffer(buf, arr.dtype, count=arr.size, offset=offset).reshape(arr.shape)
    out[...] = arr
    return out


def check_compressed(compressed, plain, plain_size, nthreads=NTHREADS):
    """Every thread count gives the reference answer; return it."""
    expected = ref_validate_compressed(compressed, plain, plain_size)
    for nt in nthreads:
        assert validate_compressed(compressed, plain, plain_size, nt) == expected, nt
    return expected


# ---------------------------------------------------------------------------
# validate_compressed: targeted cases
# ---------------------------------------------------------------------------

def arrays(dtype, compressed, plain):
    return np.array(compressed, dtype).reshape(len(compressed), -1), \
        np.array(plain, dtype).reshape(len(compressed), -1)


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
@pytest.mark.parametrize("compressed, plain, plain_size, expected", [
    # valid, including empty rows
    ([[0, 2, 2, 3]], [[0, 3, 1]], 4, None),
    ([[0, 2, 3], [0, 1, 3]], [[0, 1, 2], [1, 0, 2]], 3, None),
    # 5.1, and 5.1 wins over a 5.2 in the same batch and everything later
    ([[1, 2, 3]], [[0, 1, 2]], 3, ("5.1", 0, 0, -1, 1)),
    ([[0, 2, 3], [-1, 1, 4]], [[0, 1, 2], [5, 5, 5]], 3, ("5.1", 1, 0, -1, -1)),
    # 5.2: value compressed[b, n]; a 5.1 in a later batch comes after it
    ([[0, 2, 2]], [[0, 1, 2]], 3, ("5.2", 0, 2, -1, 2)),
    ([[0, 1, 4], [1, 1, 3]], [[0, 1, 2], [0, 1, 2]], 3, ("5.2", 0, 2, -1, 4)),
    # 5.3 after all 5.1/5.2: negative difference, difference above plain_size
    ([[0, 2, 1, 3]], [[0, 1, 2]], 3, ("5.3", 0, 2, -1, -1)),
    ([[0, 3, 3]], [[0, 1, 2]], 2, ("5.3", 0, 1, -1, 3)),
    ([[0, 0, 3], [0, 4, 3]], [[0, 1, 2], [0, 1, 2]], 3, ("5.3", 1, 1, -1, 4)),
    # 5.3 before any plain error, even in an earlier batch
    ([[0, 3, 3], [0, 4, 3]], [[-1, -1, -1], [0, 1, 2]], 3, ("5.3", 1, 1, -1, 4)),
    # 5.4, 5.5, 5.6 with (batch, row, pos, value)
    ([[0, 1, 3]], [[0, -2, 1]], 3, ("5.4", 0, 1, 1, -2)),
    ([[0, 1, 3]], [[0, 1, 3]], 3, ("5.5", 0, 1, 2, 3)),
    ([[0, 2, 3]], [[1, 1, 0]], 3, ("5.6", 0, 0, 1, 1)),
    ([[0, 3, 3]], [[2, 0, 1]], 3, ("5.6", 0, 0, 1, 0)),
    # first failing position in the row decides the invariant
    ([[0, 3]], [[1, 0, 5]], 3, ("5.6", 0, 0, 1, 0)),
    ([[0, 3]], [[1, 5, -1]], 3, ("5.5", 0, 0, 1, 5)),
    ([[0, 3]], [[1, -5, 9]], 3, ("5.4", 0, 0, 1, -5)),
    # a descent across a row boundary is fine; the first failing row wins
    ([[0, 2, 4]], [[1, 2, 0, 1]], 3, None),
    ([[0, 2, 4]], [[1, 2, 2, 2]], 3, ("5.6", 0, 1, 3, 2)),
    ([[0, 2, 4], [0, 1, 4]], [[0, 1, 0, 9], [-1, 0, 0, 0]], 3, ("5.5", 0, 1, 3, 9)),
    # empty rows and batches of rows
    ([[0, 0, 0, 2, 2]], [[0, 0]], 2, ("5.6", 0, 2, 1, 0)),
    # plain_size = 0: only empty rows are valid
    ([[0, 0, 0]], [[]], 0, None),
    ([[0, 1]], [[0]], 0, ("5.3", 0, 1, -1, 1)),
    # n = 0: compressed has one column, nnz must be 0
    ([[0], [0]], [[], []], 5, None),
    ([[0], [1]], [[], []], 5, ("5.1", 1, 0, -1, 1)),
    ([[0]], [[3]], 5, ("5.2", 0, 0, -1, 0)),
])
def test_compressed_targeted(dtype, compressed, plain, plain_size, expected):
    c, p = arrays(dtype, compressed, plain)
    assert ref_validate_compressed(c, p, plain_size) == expected
    assert check_compressed(c, p, plain_size) == expected


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
def test_compressed_empty_shapes(dtype):
    # B = 0, with and without nnz / rows
    for n1, nnz in [(1, 0), (5, 0), (5, 3)]:
        assert validate_compressed(np.zeros((0, n1), dtype), np.zeros((0, nnz), dtype), 3, 2) is None
    # nnz = 0 with rows
    c = np.zeros((3, 6), dtype)
    assert check_compressed(c, np.zeros((3, 0), dtype), 4) is None
    c[2, 3] = 1
    assert check_compressed(c, np.zeros((3, 0), dtype), 4) == ("5.3", 2, 4, -1, -1)
    c[2, 5] = 1
    assert check_compressed(c, np.zeros((3, 0), dtype), 4) == ("5.2", 2, 5, -1, 1)


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
def test_compressed_extreme_values_no_overflow(dtype):
    info = np.iinfo(dtype)
    # Differences that overflow the index dtype (and int64) are reported exactly.
    c = np.array([[0, 2, info.min, 3]], dtype)
    assert check_compressed(c, np.zeros((1, 3), dtype), 5) == ("5.3", 0, 2, -1, int(info.min) - 2)
    c = np.array([[0, info.max, 3]], dtype)
    assert check_compressed(c, np.zeros((1, 3), dtype), 5) == ("5.3", 0, 1, -1, int(info.max))
    # values at the top of the dtype's range
    c, p = np.array([[0, 2]], dtype), np.array([[info.max - 2, info.max - 1]], dtype)
    assert check_compressed(c, p, int(info.max)) is None
    p[0, 1] = info.max
    assert check_compressed(c, p, int(info.max)) == ("5.5", 0, 0, 1, int(info.max))
    if dtype == np.int32:  # plain_size beyond the dtype's range
        assert check_compressed(c, p, 2**40) is None
    p = np.array([[info.min, info.max]], dtype)
    assert check_compressed(c, p, 2**62) == ("5.4", 0, 0, 0, int(info.min))


def test_compressed_bad_arguments():
    c, p = np.zeros((1, 3), np.int32), np.zeros((1, 0), np.int32)
    with pytest.raises(TypeError):
        validate_compressed(c, p.astype(np.int64), 3, 1)
    with pytest.raises(TypeError):
        validate_compressed(c.astype(np.int16), p.astype(np.int16), 3, 1)
    with pytest.raises(ValueError):
        validate_compressed(c, np.zeros((2, 0), np.int32), 3, 1)
    with pytest.raises(ValueError):
        validate_compressed(np.zeros((1, 0), np.int32), p, 3, 1)
    with pytest.raises(ValueError):
        validate_compressed(c, p, -1, 1)
    with pytest.raises(ValueError):  # not C-contiguous
        validate_compressed(np.zeros((1, 6), np.int32)[:, ::2], p, 3, 1)


# ---------------------------------------------------------------------------
# validate_compressed: random valid and corrupted inputs, serial and parallel
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INDEX_DTYPES)
@pytest.mark.parametrize("nbatch, n, nnz, plain_size", [
    (1, 50, 300, 20),
    (3, 7, 0, 4),
    (2, 3000, LARGE // 2, 5000),    # ~50 per row
    (1, 5, LARGE, 10**6),           # rows much longer than a kernel block
    (3, 200_000, 1000, 10**9),      # hypersparse: mostly empty rows
    (4, 1000, 80_000, 100),         # dense rows
])
def test_compressed_random(dtype, nbatch, n, nnz, plain_size):
    rng = np.random.default_rng([nbatch, n, nnz])
    c, p = random_compressed(rng, nbatch, n, nnz, plain_size, dtype)
    assert check_compressed(c, p, plain_size) is None
    found = set()
    for trial in range(8):
        cc, pc = c.copy(), p.copy()
        corrupt_compressed(rng, cc, pc, plain_size, count=1 + trial % 3)
        result = check_compressed(cc, pc, plain_size)
        found.add(result and result[0])
    assert found - {None}  # the corruptions were seen


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
@pytest.mark.parametrize("invariant", ["5.3", "5.4", "5.5", "5.6"])
def test_compressed_parallel_first_error_wins(dtype, invariant):
    """Errors near the end and near the start: the earliest is reported."""
    rng = np.random.default_rng(1)
    n, nnz, plain_size = 20_000, LARGE, 1000
    c, p = random_compressed(rng, 2, n, nnz, plain_size, dtype)
    counts = np.diff(c, axis=1)
    late = (1, int(np.flatnonzero(counts[1] >= 2)[-10]))
    early = (0, int(np.flatnonzero(counts[0] >= 2)[10]))
    for b, row in (late, early):
        s = int(c[b, row])
        if invariant == "5.3":
            c[b, row + 1] = c[b, row] - 1
        elif invariant == "5.4":
            p[b, s + 1] = -7
        elif invariant == "5.5":
            p[b, s + 1] = plain_size
        else:
            p[b, s + 1] = p[b, s]
        result = check_compressed(c, p, plain_size)
        assert result[:3] == (invariant, b, row + (invariant == "5.3"))
        if invariant != "5.3":
            assert result[3] == s + 1


@pytest.mark.skipif(sys.platform != "linux", reason="guard pages via mprotect")
@pytest.mark.parametrize("at_end", [True, False])
@pytest.mark.parametrize("dtype", INDEX_DTYPES)
def test_no_out_of_bounds_reads(dtype, at_end):
    """Inputs placed against an inaccessible page: any read past the ends crashes."""
    rng = np.random.default_rng(7)
    # long rows ending the array (longer than a kernel block), short rows, one row
    for n, nnz, plain_size in [(5, 60_000, 10**5), (4000, 120_000, 1000), (1, 3, 5)]:
        c, p = random_compressed(rng, 1, n, nnz, plain_size, dtype)
        for trial in range(12):
            cc, pc = c.copy(), p.copy()
            if trial:
                corrupt_compressed(rng, cc, pc, plain_size, count=trial % 3 + 1)
            gc, gp = guarded(cc, at_end), guarded(pc, at_end)
            check_compressed(gc, gp, plain_size)
        for plain_size in [0, 1]:  # rows too long for plain_size
            check_compressed(guarded(c, at_end), guarded(p, at_end), plain_size)
    for shape, nnz in [((10**6,), 150_000), ((300, 400), 5)]:
        idx = random_coo(rng, shape, nnz, dtype)
        shp = np.array(shape, np.int64)
        for bad in [idx, np.full_like(idx, -1), np.full_like(idx, np.iinfo(dtype).max)]:
            gi = guarded(bad, at_end)
            check_coo(gi, shp)
            if ref_validate_coo(bad, shp) is None:
                check_coalesced(gi, shape)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(INDEX_DTYPES))
def test_compressed_hypothesis(data, dtype):
    nbatch = data.draw(st.integers(0, 3))
    n = data.draw(st.integers(0, 6))
    plain_size = data.draw(st.integers(0, 6))
    nnz = data.draw(st.integers(0, n * plain_size))
    seed = data.draw(st.integers(0, 2**32 - 1))
    c, p = random_compressed(np.random.default_rng(seed), nbatch, n, nnz, plain_size, dtype)
    assert validate_compressed(c, p, plain_size, 1) is None
    info = np.iinfo(dtype)
    value = st.one_of(st.integers(-2, plain_size + 2), st.sampled_from([info.min, info.max]))
    for _ in range(data.draw(st.integers(0, 3)) if nbatch else 0):
        target = c if data.draw(st.booleans()) or nnz == 0 else p
        b = data.draw(st.integers(0, nbatch - 1))
        target[b, data.draw(st.integers(0, target.shape[1] - 1))] = data.draw(value)
    expected = ref_validate_compressed(c, p, plain_size)
    assert validate_compressed(c, p, plain_size, 1) == expected
    assert validate_compressed(c, p, plain_size, 2) == expected


# ---------------------------------------------------------------------------
# validate_coo
# ---------------------------------------------------------------------------

def check_coo(indices, shape, nthreads=NTHREADS):
    expected = ref_validate_coo(indices, shape)
    for nt in nthreads:
        assert validate_coo(indices, shape, nt) == expected, nt
    return expected


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
@pytest.mark.parametrize("indices, shape, expected", [
    ([[0, 1], [2, 0]], [2, 3], None),
    ([[0, 1], [2, 3]], [2, 3], ("C5", 1, 1, 3)),
    ([[0, -1], [5, 0]], [2, 3], ("C4", 0, 1, -1)),   # (d, k) order: d = 0 first
    ([[0, 2], [-1, 0]], [2, 3], ("C5", 0, 1, 2)),
    ([[5, -5]], [0], ("C5", 0, 0, 5)),                # size 0: nothing is in bounds
    ([[-5, 5]], [0], ("C4", 0, 0, -5)),
    ([[], []], [0, 0], None),                           # nnz = 0
])
def test_coo_targeted(dtype, indices, shape, expected):
    idx = np.array(indices, dtype).reshape(len(indices), -1)
    assert check_coo(idx, np.array(shape, np.int64)) == expected


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
def test_coo_edge_shapes(dtype):
    info = np.iinfo(dtype)
    assert check_coo(np.zeros((0, 5), dtype), np.zeros(0, np.int64)) is None
    big = np.array([info.max - 2, info.max - 1, info.max], dtype)[None]
    assert check_coo(big, np.array([int(info.max)], np.int64)) == ("C5", 0, 2, int(info.max))
    assert check_coo(big[:, :2], np.array([int(info.max)], np.int64)) is None
    if dtype == np.int32:  # size beyond the dtype's range
        assert check_coo(big, np.array([2**40], np.int64)) is None
    assert check_coo(np.array([[info.min]], dtype), np.array([2**62], np.int64)) == \
        ("C4", 0, 0, int(info.min))


def test_coo_bad_arguments():
    idx = np.zeros((2, 3), np.int64)
    with pytest.raises(TypeError):
        validate_coo(idx.astype(np.int16), np.zeros(2, np.int64), 1)
    with pytest.raises(TypeError):
        coo_is_coalesced(idx, np.zeros(2, np.int32), 1)
    with pytest.raises(ValueError):
        validate_coo(idx, np.zeros(3, np.int64), 1)
    with pytest.raises(ValueError):
        coo_is_coalesced(idx[0], np.zeros(2, np.int64), 1)


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
@pytest.mark.parametrize("shape, nnz", [((7, 9), 40), ((1000, 1000), LARGE), ((50, 60, 70), LARGE // 2)])
def test_coo_random(dtype, shape, nnz):
    rng = np.random.default_rng(nnz)
    idx = random_coo(rng, shape, nnz, dtype)
    shp = np.array(shape, np.int64)
    assert check_coo(idx, shp) is None
    for trial in range(6):
        bad = idx.copy()
        for _ in range(1 + trial % 3):
            d, k = rng.integers(0, len(shape)), rng.integers(0, nnz)
            bad[d, k] = rng.choice([-1, shape[d], shape[d] + 100, np.iinfo(dtype).min])
        assert check_coo(bad, shp) is not None


# ---------------------------------------------------------------------------
# coo_is_coalesced
# ---------------------------------------------------------------------------

def check_coalesced(indices, shape, nthreads=NTHREADS, expected=None):
    """The kernel at every thread count against the reference (or ``expected``, where the case's
    construction decides it: the Python reference takes seconds at 10^5 columns)."""
    if expected is None:
        expected = ref_coo_is_coalesced(indices)
    for nt in nthreads:
        assert coo_is_coalesced(indices, np.array(shape, np.int64), nt) is expected, nt
    return expected


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
@pytest.mark.parametrize("indices, expected", [
    ([[0, 0, 1], [0, 2, 1]], True),
    ([[0, 0], [1, 1]], False),          # duplicate
    ([[0, 0, 1], [2, 1, 0]], False),    # unsorted in the last dimension
    ([[1, 0], [0, 2]], False),          # unsorted in the first dimension
    ([[0, 1], [5, 0]], True),           # first dimension decides
    ([[3, 2, 1]], False),
    ([[1, 2, 3]], True),
    ([[1, 1]], False),
    ([[], []], True),
    ([[4], [2]], True),
])
def test_coalesced_targeted(dtype, indices, expected):
    idx = np.array(indices, dtype).reshape(len(indices), -1)
    assert check_coalesced(idx, [10] * idx.shape[0]) is expected


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
def test_coalesced_no_sparse_dims(dtype):
    for nnz, expected in [(0, True), (1, True), (2, False), (5, False)]:
        assert check_coalesced(np.zeros((0, nnz), dtype), []) is expected


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
@pytest.mark.parametrize("shape, nnz", [((1000, 1000), LARGE), ((30, 40, 50, 60), LARGE // 2),
                                        ((10**6,), LARGE)])
def test_coalesced_random(dtype, shape, nnz):
    rng = np.random.default_rng(len(shape))
    idx = random_coo(rng, shape, nnz, dtype)
    assert check_coalesced(idx, shape) is True
    for k in [1, 2, nnz // 2, nnz // 2 + 1, nnz - 1] + list(rng.integers(1, nnz, 4)):
        dup = idx.copy()
        dup[:, k] = dup[:, k - 1]                       # duplicate column
        assert check_coalesced(dup, shape, expected=False) is False
        swapped = idx.copy()
        swapped[:, [k - 1, k]] = swapped[:, [k, k - 1]]  # adjacent swap
        assert check_coalesced(swapped, shape, expected=False) is False
        last = idx.copy()
        if last[-1, k] > last[-1, k - 1] and (last[:-1, k] == last[:-1, k - 1]).all():
            last[-1, k] = last[-1, k - 1] - 1 if last[-1, k - 1] > 0 else last[-1, k - 1]
            assert check_coalesced(last, shape, expected=False) is False


@settings(max_examples=300, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(INDEX_DTYPES))
def test_coo_hypothesis(data, dtype):
    nsparse = data.draw(st.integers(0, 3))
    nnz = data.draw(st.integers(0, 8))
    shape = np.array(data.draw(st.lists(st.integers(0, 3), min_size=nsparse, max_size=nsparse)),
                     np.int64)
    idx = np.array(data.draw(st.lists(st.integers(-1, 3), min_size=nsparse * nnz,
                                      max_size=nsparse * nnz)), dtype).reshape(nsparse, nnz)
    expected = ref_validate_coo(idx, shape)
    assert validate_coo(idx, shape, 1) == expected
    assert validate_coo(idx, shape, 2) == expected
    if expected is None:
        assert coo_is_coalesced(idx, shape, 1) is ref_coo_is_coalesced(idx)
