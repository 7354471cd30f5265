"""The SpMV kernel of sparsetensor._lib._spmm called directly: rows of every length in every
position of a group of 8 (the AVX-512 path sums 8 rows at once), row ranges cut anywhere
(threads), and broken indices at every position of a group, with the AVX-512 path and the
portable loops."""

from __future__ import annotations

import numpy as np
import pytest

from sparsetensor._lib import _spmm
from test_blas import simd  # noqa: F401 (the fixture: the AVX-512 path, where compiled in, and the portable loops)

Z = np.zeros(1, np.int64)


def matrix(rng, lengths, ncols, dtype, index_dtype):
    """(crow, col, values) of a CSR matrix with rows of the given lengths (sorted distinct columns)."""
    crow = np.concatenate([[0], np.cumsum(lengths)]).astype(index_dtype)
    col = np.concatenate([np.sort(rng.choice(ncols, n, replace=False)) for n in lengths] + [np.zeros(0, int)])
    values = rng.standard_normal(int(crow[-1])).astype(dtype)
    return crow, col.astype(index_dtype), values


def spmv(crow, col, values, x, nthreads=1, checked=True, nrows=None):
    n = len(crow) - 1 if nrows is None else nrows
    out = np.full((1, n, 1), np.nan, values.dtype)
    found = _spmm.spmm(crow.reshape(1, -1), col.reshape(1, -1), values.reshape(1, -1, 1), x.reshape(1, -1, 1), out,
                       Z, Z, (1, 1), True, nthreads, checked=checked)
    return found, out.ravel()


def oracle(crow, col, values, x):
    n = len(crow) - 1
    rows = np.repeat(np.arange(n), np.diff(crow))
    return np.bincount(rows, values.astype(np.float64) * x.astype(np.float64)[col], minlength=n)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_row_lengths_and_group_positions(simd, dtype, index_dtype):
    """Rows of 0..40 entries at every position of a group of 8, and row counts that leave
    every possible remainder after the last whole group."""
    rng = np.random.default_rng(0)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for nrows in (1, 3, 7, 8, 9, 15, 16, 17, 41):
        lengths = rng.permutation(np.arange(41))[:nrows] if nrows <= 41 else None
        crow, col, values = matrix(rng, lengths, 64, dtype, index_dtype)
        x = rng.standard_normal(64).astype(dtype)
        for checked in (True, False):
            found, y = spmv(crow, col, values, x, checked=checked)
            assert found is None
            np.testing.assert_allclose(y, oracle(crow, col, values, x), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_any_split_gives_the_same_bits(simd, dtype, index_dtype):
    """Every row is summed in one order whatever range (thread, group position) it falls in."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 30, 20001)
    lengths[rng.integers(0, len(lengths), 5)] = 3000  # a few long rows: uneven ranges
    crow, col, values = matrix(rng, lengths, 4000, dtype, index_dtype)
    x = rng.standard_normal(4000).astype(dtype)
    _, y1 = spmv(crow, col, values, x, 1)
    for nt in (2, 3, 5):
        _, y = spmv(crow, col, values, x, nt)
        np.testing.assert_array_equal(y, y1)
    tol = 1e-4 if dtype == "float32" else 1e-11
    np.testing.assert_allclose(y1, oracle(crow, col, values, x), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("row", [0, 3, 7, 8, 12, 19])
def test_broken_index_at_every_group_position(simd, dtype, index_dtype, row):
    """Unchecked input: a plain index out of range, negative, or a compressed entry out of
    order in row ``row`` (of 20) is reported, never followed."""
    rng = np.random.default_rng(2)
    # rows of 11: position 9 in the masked tail of an 8-lane gather, 0 in a whole one (and both
    # in the one masked 16-lane step of float32 with int32 indices); rows of 20: position 3 in
    # a whole 16-lane step, 17 in its masked tail
    for length, positions in ((11, (9, 0)), (20, (3, 17))):
        lengths = np.full(20, length)
        crow, col, values = matrix(rng, lengths, 50, dtype, index_dtype)
        x = rng.standard_normal(50).astype(dtype)
        for bad, want in ((50, "5.5"), (1 << 30, "5.5"), (-1, "5.4")):
            for pos in positions:
                k = int(crow[row]) + pos
                c = col.copy()
                c[k] = bad
                found, _ = spmv(crow, c, values, x, checked=False)
                assert found is not None and found[0] == want and found[2] == row and found[3] == k, found
    lengths = np.full(20, 11)
    crow, col, values = matrix(rng, lengths, 50, dtype, index_dtype)
    cr = crow.copy()
    cr[row + 1] = cr[row] - 1  # below its predecessor
    found, _ = spmv(cr, col, values, x, checked=False)
    assert found is not None and found[0] == "5.3", found
    cr = crow.copy()
    cr[row + 1] = len(col) + 5  # past nnz
    found, _ = spmv(cr, col, values, x, checked=False)
    assert found is not None and found[0] == "5.3", found


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_streaming_sizes(simd, dtype):
    """Matrices large enough for the kernels' software prefetches (short CSR rows from 32 MB of
    values and indices, BSR x vector from 4 MB): the same sums as the oracle, and a broken
    index near the end is still reported."""
    rng = np.random.default_rng(3)
    nrows = 800_000  # rows of 0..11 entries: 4.4M entries, 35 MB with int32 indices and float32
    lengths = rng.integers(0, 12, nrows)
    crow = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    col = rng.integers(0, 5000, int(crow[-1])).astype(np.int32)
    values = rng.standard_normal(col.size).astype(dtype)
    x = rng.standard_normal(5000).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-11
    for checked in (True, False):
        found, y = spmv(crow, col, values, x, nthreads=2, checked=checked)
        assert found is None
        np.testing.assert_allclose(y, oracle(crow, col, values, x), rtol=tol, atol=tol * 10)
    c = col.copy()
    c[-3] = 5000
    found, _ = spmv(crow, c, values, x, nthreads=2, checked=False)
    assert found is not None and found[0] == "5.5" and found[3] == col.size - 3, found

    scipy = pytest.importorskip("scipy.sparse")
    nb, bcols = 50_000, 4000  # block rows of 0..4 3x3 blocks: 100k blocks, 4.4 MB of float32
    blens = rng.integers(0, 5, nb)
    bcrow = np.concatenate([[0], np.cumsum(blens)]).astype(np.int64)
    bcol = np.concatenate([np.sort(rng.choice(bcols, n, replace=False)) for n in blens]).astype(np.int64)
    bvals = rng.standard_normal((bcol.size, 3, 3)).astype(dtype)
    xb = rng.standard_normal(3 * bcols).astype(dtype)
    want = scipy.bsr_matrix((bvals.astype(np.float64), bcol, bcrow), shape=(3 * nb, 3 * bcols)) @ xb.astype(np.float64)
    out = np.full((1, 3 * nb, 1), np.nan, dtype)
    found = _spmm.spmm(bcrow.reshape(1, -1), bcol.reshape(1, -1), bvals.reshape(1, -1, 9), xb.reshape(1, -1, 1), out,
                       Z, Z, (3, 3), True, 2, checked=False)
    assert found is None
    np.testing.assert_allclose(out.ravel(), want, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("nrows", [1, 9, 63, 200, 5000])
@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 1, 5), (1, 1, 37), (3, 3, 1), (2, 4, 3), (3, 3, 11), (4, 4, 16), (2, 3, 9)])
def test_one_product_on_many_threads(simd, nrows, shape):
    """One product split over more threads than this machine has cores: threads start late, and
    those done with their own row range take blocks of the others' (``_gather_one``). The sums
    are the same bits as on one thread (SpMV, SpMM of 5 columns and of 37: two tiles of 16 in
    locals and 5 more, BSR x vector, BSR x dense with tiles of 8 columns in locals for 3x3, 4x4
    and 2x3 blocks, whole and with columns left over), and a broken index is reported wherever
    it lies, whichever thread meets it."""
    Rb, Cb, N = shape
    rng = np.random.default_rng(nrows)
    lengths = rng.integers(0, 40, nrows)
    lengths[rng.integers(0, nrows, 2)] = 300  # long rows: uneven blocks
    ncols = 320
    crow = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    col = np.concatenate([np.sort(rng.choice(ncols, n, replace=False)) for n in lengths]).astype(np.int64)
    values = rng.standard_normal((1, col.size, Rb * Cb))
    x = rng.standard_normal((1, ncols * Cb, N))

    def run(c, nthreads):
        out = np.full((1, nrows * Rb, N), np.nan)
        found = _spmm.spmm(crow.reshape(1, -1), c.reshape(1, -1), values, x, out, Z, Z, (Rb, Cb), True, nthreads,
                           checked=False)
        return found, out

    found, want = run(col, 1)
    assert found is None
    dense = np.zeros((nrows * Rb, ncols * Cb))
    for i in range(nrows):
        for k in range(crow[i], crow[i + 1]):
            dense[i * Rb:(i + 1) * Rb, col[k] * Cb:(col[k] + 1) * Cb] += values[0, k].reshape(Rb, Cb)
    np.testing.assert_allclose(want[0], dense @ x[0], rtol=1e-12, atol=1e-12)
    for nt in (2, 7, 16):
        found, y = run(col, nt)
        assert found is None
        np.testing.assert_array_equal(y, want)
    for k in {0, col.size // 2, col.size - 1}:
        c = col.copy()
        c[k] = ncols
        for nt in (2, 7, 16):
            found, _ = run(c, nt)
            assert found is not None and found[0] == "5.5" and found[3] == k, (nt, found)
