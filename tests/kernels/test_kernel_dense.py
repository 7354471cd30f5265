"""Tests of the dense <-> sparse kernels in sparsetensor._lib._dense.

The kernels are called directly with the canonical views a wrapper builds,
and compared with NumPy oracles (np.nonzero / np.add.at based).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsetensor._lib import _dense

VALUE_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
                np.complex128]
ARITH_DTYPES = [d for d in VALUE_DTYPES if d is not np.float16]
INDEX_DTYPES = [np.int32, np.int64]
BLOCKS = [(1, 1), (2, 3)]


# --------------------------------------------------------------------------
# helpers: values, kernel views, oracles

def random_values(rng, shape, dtype, nonzero=True):
    """Random values with some zeros; at least one nonzero if `nonzero` and any room."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        v = rng.random(n) < 0.6
    elif dtype.kind == "u":
        v = rng.integers(0, min(200, np.iinfo(dtype).max), n).astype(dtype)
    elif dtype.kind == "i":
        v = rng.integers(-100, 100, n).astype(dtype)
    elif dtype.kind == "f":
        v = rng.standard_normal(n).astype(dtype)
        v[rng.random(n) < 0.3] = 0
        v[rng.random(n) < 0.1] = -0.0
    else:
        v = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
        v[rng.random(n) < 0.2] = 0
        v[rng.random(n) < 0.1] = 1j * rng.standard_normal()  # imaginary only: nonzero
    v[rng.random(n) < 0.3] = 0
    if nonzero and n and not v.any():
        v[rng.integers(n)] = 1
    return v.reshape(shape)


def block_view(dense, Rb, Cb):
    """(B, NR, NC, D) -> (B, nrb, ncb, Rb, Cb, D) view."""
    B, NR, NC, D = dense.shape
    return dense.reshape(B, NR // Rb, Rb, NC // Cb, Cb, D).transpose(0, 1, 3, 2, 4, 5)


def make_dense(rng, B, nrb, ncb, Rb, Cb, D, dtype, nblocks):
    """A (B, nrb*Rb, ncb*Cb, D) array with exactly `nblocks` nonzero blocks per batch."""
    dense = np.zeros((B, nrb * Rb, ncb * Cb, D), dtype)
    if D == 0:
        return dense
    blocks = block_view(dense, Rb, Cb)
    for b in range(B):
        for q in rng.choice(nrb * ncb, size=nblocks, replace=False):
            r, c = divmod(int(q), ncb)
            blocks[b, r, c] = random_values(rng, (Rb, Cb, D), dtype)
    return dense


def zero_view(a):
    """The zero-test view a wrapper passes, with the kernel keyword it needs."""
    if a.dtype == np.bool_:
        return a.view(np.uint8), {}
    if a.dtype == np.float16:
        return a.view(np.uint16), {"float16": True}
    if a.dtype.kind == "c":
        return a.view(a.real.dtype), {}
    return a, {}


def raw_view(a):
    """The raw view a wrapper passes (complex128 as two uint64)."""
    return a.view(np.uint64 if a.dtype.itemsize == 16 else f"u{a.dtype.itemsize}")


def arith_view(a):
    if a.dtype == np.bool_:
        return a.view(np.uint8), {"logical": True}
    return a, {}


def ref_to_compressed(dense, Rb, Cb, rows):
    """(compressed, plain, values) by np.nonzero over the block mask."""
    blocks = block_view(dense, Rb, Cb)
    mask = (blocks != 0).any(axis=(3, 4, 5))
    B, nrb, ncb = mask.shape
    nc = nrb if rows else ncb
    comp, plain, vals = [], [], []
    for b in range(B):
        m = mask[b] if rows else mask[b].T
        ci, pi = np.nonzero(m)
        comp.append(np.concatenate([[0], np.cumsum(np.bincount(ci, minlength=nc))]))
        plain.append(pi)
        r, c = (ci, pi) if rows else (pi, ci)
        vals.append(blocks[b, r, c])
    if B == 0:
        return (np.zeros((0, nc + 1), np.int64), np.zeros((0, 0), np.int64),
                np.zeros((0, 0, Rb, Cb, dense.shape[3]), dense.dtype))
    return np.stack(comp), np.stack(plain), np.stack(vals)


def ref_to_dense(compressed, plain, values, NR, NC, rows):
    """Scatter with np.add.at (logical_or for bool): duplicates accumulate."""
    B, nnz, Rb, Cb, D = values.shape
    out = np.zeros((B, NR, NC, D), values.dtype)
    blocks = block_view(out, Rb, Cb)
    ufunc = np.logical_or if values.dtype == np.bool_ else np.add
    for b in range(B):
        slots = [(i, k) for i in range(compressed.shape[1] - 1)
                 for k in range(compressed[b, i], compressed[b, i + 1])]
        ci, ks = np.array(slots, np.int64).reshape(-1, 2).T
        r, c = (ci, plain[b, ks]) if rows else (plain[b, ks], ci)
        ufunc.at(blocks[b], (r, c), values[b, ks])
    return out


def assert_same_bits(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    assert np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                          np.ascontiguousarray(b).view(np.uint8))


def assert_same_values(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    if a.dtype.kind in "fc":
        np.testing.assert_array_equal(a, b)     # NaN == NaN, -0.0 == 0.0
    else:
        assert np.array_equal(a, b)


def first_compressed_error(compressed, plain, nplain):
    """Pure-Python oracle of the first broken index, in the kernel's scan order."""
    B, nnz = plain.shape
    for b in range(B):
        for i in range(compressed.shape[1] - 1):
            lo, hi = int(compressed[b, i]), int(compressed[b, i + 1])
            if lo < 0 or lo > nnz:
                return ("5.3", b, i, -1, lo)
            if hi < lo or hi > nnz:
                return ("5.3", b, i + 1, -1, hi)
            for k in range(lo, hi):
                p = int(plain[b, k])
                if p < 0 or p >= nplain:
                    return ("5.4" if p < 0 else "5.5", b, i, k, p)
    return None


# --------------------------------------------------------------------------
# dense -> compressed -> dense

@pytest.mark.parametrize("rows", [True, False], ids=["rows", "cols"])
@pytest.mark.parametrize("D", [1, 3])
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("B", [0, 1, 3])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_dense_to_compressed_matches_oracle(dtype, index_dtype, B, block, D, rows):
    rng = np.random.default_rng(hash((np.dtype(dtype).name, B, block, D, rows)) % 2**32)
    Rb, Cb = block
    nrb, ncb = 4, 5
    dense = make_dense(rng, B, nrb, ncb, Rb, Cb, D, dtype, nblocks=7)
    ref_c, ref_p, ref_v = ref_to_compressed(dense, Rb, Cb, rows)
    assert B == 0 or ref_p.shape[1] == 7

    # As a wrapper calls it: zero-test and raw views.
    z, kw = zero_view(dense)
    r = raw_view(dense)
    c, p, v, counts = _dense.dense_to_compressed(z, r, Rb, Cb, rows, index_dtype, 1, **kw)
    assert c.dtype == p.dtype == np.dtype(index_dtype)
    assert np.array_equal(c, ref_c) and np.array_equal(p, ref_p)
    assert np.array_equal(counts, np.full(B, 7))
    assert v.dtype == r.dtype
    assert_same_bits(v.view(dtype), ref_v)

    # The natural dtype gives the same answer.
    c2, p2, v2, _ = _dense.dense_to_compressed(dense, None, Rb, Cb, rows, index_dtype, 1)
    assert np.array_equal(c2, c) and np.array_equal(p2, p)
    assert_same_bits(v2, ref_v)

    # Back to dense, by copy (raw views) and by accumulation (arithmetic views).
    out = np.zeros_like(r)
    assert _dense.compressed_to_dense(c, p, v, out, rows, False, 1) is None
    assert_same_values(out.view(dtype), np.where(dense == 0, np.zeros_like(dense), dense))
    if dtype is np.float16:
        with pytest.raises(TypeError, match="float16"):
            _dense.compressed_to_dense(c, p, v2, np.zeros_like(dense), rows, True, 1)
        v2, dense = v2.astype(np.float32), dense.astype(np.float32)   # the wrapper widens
    a, kw = arith_view(v2)
    out = np.zeros_like(a, shape=dense.shape)
    assert _dense.compressed_to_dense(c, p, a, out, rows, True, 1, **kw) is None
    assert_same_values(out.view(dense.dtype), np.where(dense == 0, np.zeros_like(dense), dense))


@pytest.mark.parametrize("rows", [True, False])
@pytest.mark.parametrize("shape", [(2, 0, 6, 1), (2, 4, 0, 1), (2, 4, 6, 0), (0, 4, 6, 2),
                                   (1, 0, 0, 1)])
def test_dense_to_compressed_zero_size(shape, rows):
    dense = np.zeros(shape, np.float32)
    B, NR, NC, D = shape
    c, p, v, counts = _dense.dense_to_compressed(dense, None, 2, 3 if NC % 3 == 0 else 1,
                                                 rows, np.int64, 2)
    nc = (NR // 2) if rows else NC // (3 if NC % 3 == 0 else 1)
    assert c.shape == (B, nc + 1) and not c.any()
    assert p.shape == (B, 0) and v.shape[:2] == (B, 0)
    assert np.array_equal(counts, np.zeros(B))
    out = np.ones(shape, np.float32)
    assert _dense.compressed_to_dense(c, p, v, out, rows, False, 2) is None
    assert (out == 1).all()


def test_dense_to_compressed_all_zero_and_full():
    z = np.zeros((2, 6, 6, 1), np.int16)
    c, p, v, counts = _dense.dense_to_compressed(z, None, 2, 3, True, np.int32, 1)
    assert np.array_equal(c, np.zeros((2, 4))) and p.shape == (2, 0) and list(counts) == [0, 0]
    f = np.arange(1, 73, dtype=np.int16).reshape(2, 6, 6, 1)
    for rows in (True, False):
        c, p, v, counts = _dense.dense_to_compressed(f, None, 2, 3, rows, np.int32, 1)
        assert list(counts) == [6, 6]
        assert np.array_equal(c[0], [0, 2, 4, 6] if rows else [0, 3, 6])
        out = np.zeros_like(f)
        _dense.compressed_to_dense(c, p, v, out, rows, False, 1)
        assert np.array_equal(out, f)


def test_dense_to_compressed_unequal_nnz_returns_counts():
    dense = np.zeros((3, 4, 4, 1), np.float64)
    dense[0, 0, 0] = 1
    dense[1, 1:3, 2] = 2
    dense[2, 3, 3] = 3
    for rows in (True, False):
        c, p, v, counts = _dense.dense_to_compressed(dense, None, 1, 1, rows, np.int64, 1)
        assert list(counts) == [1, 2, 1]
        assert c.shape == (3, 0) and p.shape == (3, 0) and v.shape == (3, 0, 1, 1, 1)
        assert v.dtype == np.float64


def test_zero_test_semantics():
    # -0.0 is zero, NaN and imaginary-only values are not, float16 sign bits are masked.
    f = np.array([[-0.0, np.nan, 0.0, 1e-45, -0.0]], np.float32).reshape(1, 1, 5, 1)
    c, p, v, _ = _dense.dense_to_compressed(f, None, 1, 1, True, np.int64, 1)
    assert list(p[0]) == [1, 3]
    h = np.array([-0.0, 0.0, np.nan, -2.0, 6e-8], np.float16).reshape(1, 1, 5, 1)
    for args, kw in [((h, None), {}), ((h.view(np.uint16), h.view(np.uint16)), {"float16": True})]:
        c, p, v, _ = _dense.dense_to_compressed(*args, 1, 1, True, np.int64, 1, **kw)
        assert list(p[0]) == [2, 3, 4]
    # Without the float16 flag a uint16 0x8000 is an ordinary nonzero.
    c, p, v, _ = _dense.dense_to_compressed(h.view(np.uint16), None, 1, 1, True, np.int64, 1)
    assert list(p[0]) == [0, 2, 3, 4]
    x = np.array([0, 1j, -0.0 + 0j, 0j - 0.0j, complex(0, np.nan)], np.complex128)
    c, p, v, _ = _dense.dense_to_compressed(x.reshape(1, 1, 5, 1), None, 1, 1, True, np.int64, 1)
    assert list(p[0]) == [1, 4]
    i, v = _dense.dense_to_coo(x.view(np.float64).reshape(5, 2), x.view(np.uint64).reshape(5, 2),
                               np.array([5]), np.int32, 1)
    assert list(i[0]) == [1, 4] and v.dtype == np.uint64 and v.shape == (2, 2)


# --------------------------------------------------------------------------
# dense -> coo -> dense

@pytest.mark.parametrize("D", [1, 3])
@pytest.mark.parametrize("shape", [(), (7,), (4, 5), (2, 3, 4), (3, 0, 2)], ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_dense_to_coo_matches_oracle(dtype, index_dtype, shape, D):
    rng = np.random.default_rng(hash((np.dtype(dtype).name, shape, D)) % 2**32)
    M = int(np.prod(shape))
    dense = random_values(rng, (M, D), dtype, nonzero=False)
    dense[rng.random(M) < 0.4] = 0
    rows = np.nonzero((dense != 0).any(axis=1))[0]
    ref_i = np.stack(np.unravel_index(rows, shape)) if shape else np.zeros((0, rows.size))
    z, kw = zero_view(dense)
    r = raw_view(dense)
    shp = np.array(shape, np.int64)
    i, v = _dense.dense_to_coo(z, r, shp, index_dtype, 1, **kw)
    assert i.dtype == np.dtype(index_dtype) and i.shape == (len(shape), rows.size)
    assert np.array_equal(i, ref_i)
    assert_same_bits(v.view(dtype), dense[rows])
    i2, v2 = _dense.dense_to_coo(dense, None, shp, index_dtype, 1)
    assert np.array_equal(i2, i)
    assert_same_bits(v2, dense[rows])
    # back: copy and accumulate
    out = np.zeros_like(r)
    assert _dense.coo_to_dense(i, v, shp, out, False, 1) is None
    assert_same_values(out.view(dtype), np.where(dense == 0, np.zeros_like(dense), dense))
    if dtype is not np.float16:
        a, kw = arith_view(v2)
        out = np.zeros_like(a, shape=(M, D))
        assert _dense.coo_to_dense(i, a, shp, out, True, 1, **kw) is None
        assert_same_values(out.view(dtype), np.where(dense == 0, np.zeros_like(dense), dense))


@pytest.mark.parametrize("nthreads", [1, 2])
def test_dense_to_coo_many_dims(nthreads):
    # More sparse dims than the incremental unravel keeps (32): the division path.
    rng = np.random.default_rng(5)
    for shape in [(1,) * 31 + (200, 3), (2,) * 17]:
        M = int(np.prod(shape))
        dense = (rng.random((M, 1)) < 0.3) * rng.integers(1, 9, (M, 1))
        i, v = _dense.dense_to_coo(dense, None, np.array(shape), np.int64, nthreads)
        rows = np.nonzero(dense[:, 0])[0]
        assert np.array_equal(i, np.stack(np.unravel_index(rows, shape)))
        assert np.array_equal(v, dense[rows])


def test_dense_to_coo_scalar_and_empty():
    i, v = _dense.dense_to_coo(np.array([[3.0]]), None, np.zeros(0, np.int64), np.int64, 1)
    assert i.shape == (0, 1) and v.tolist() == [[3.0]]
    i, v = _dense.dense_to_coo(np.array([[0.0]]), None, np.zeros(0, np.int64), np.int64, 1)
    assert i.shape == (0, 0) and v.shape == (0, 1)
    i, v = _dense.dense_to_coo(np.zeros((6, 0)), None, np.array([2, 3]), np.int32, 1)
    assert i.shape == (2, 0) and v.shape == (0, 0)


# --------------------------------------------------------------------------
# accumulation of duplicates

@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("rows", [True, False])
@pytest.mark.parametrize("dtype", ARITH_DTYPES, ids=lambda d: np.dtype(d).name)
def test_compressed_to_dense_accumulates_duplicates(dtype, rows, nthreads):
    rng = np.random.default_rng(1)
    # Large enough for the parallel path; every slot holds duplicates.
    B, nrb, ncb, Rb, Cb, D = 2, 150, 140, 2, 3, 1
    nc, nplain = (nrb, ncb) if rows else (ncb, nrb)
    per_slot = 6
    nnz = nc * per_slot
    compressed = np.tile(np.arange(nc + 1) * per_slot, (B, 1)).astype(np.int64)
    plain = rng.integers(0, 4, (B, nnz)).astype(np.int64)   # few distinct -> duplicates
    values = random_values(rng, (B, nnz, Rb, Cb, D), dtype)
    ref = ref_to_dense(compressed, plain, values, nrb * Rb, ncb * Cb, rows)
    a, kw = arith_view(values)
    out = np.zeros((B, nrb * Rb, ncb * Cb, D), a.dtype)
    assert _dense.compressed_to_dense(compressed, plain, a, out, rows, True, nthreads, **kw) is None
    if dtype is np.bool_:
        assert set(np.unique(out)) <= {0, 1}
    if np.dtype(dtype).kind in "fc":
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    else:
        assert np.array_equal(out.view(dtype), ref)


@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("dtype", ARITH_DTYPES, ids=lambda d: np.dtype(d).name)
def test_coo_to_dense_accumulates_duplicates(dtype, nthreads):
    rng = np.random.default_rng(2)
    shape = (30, 20)
    nnz, D = 5000, 2
    indices = np.stack([rng.integers(0, n, nnz) for n in shape]).astype(np.int32)
    values = random_values(rng, (nnz, D), dtype)
    ref = np.zeros((600, D), dtype)
    (np.logical_or if dtype is np.bool_ else np.add).at(
        ref, np.ravel_multi_index(indices, shape), values)
    a, kw = arith_view(values)
    out = np.zeros((600, D), a.dtype)
    assert _dense.coo_to_dense(indices, a, np.array(shape), out, True, nthreads, **kw) is None
    if np.dtype(dtype).kind in "fc":
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    else:
        assert np.array_equal(out.view(dtype), ref)


def test_bool_or_stores_zero_one():
    # uint8 bytes other than 0/1 (as from a bool view of raw memory) come out 0/1.
    vals = np.array([2, 0, 255], np.uint8).reshape(1, 3, 1, 1, 1)
    out = np.zeros((1, 1, 2, 1), np.uint8)
    r = _dense.compressed_to_dense(np.array([[0, 3]]), np.array([[0, 1, 0]]), vals, out,
                                   True, True, 1, logical=True)
    assert r is None and out.ravel().tolist() == [1, 0]
    out = np.zeros((1, 1, 2, 1), np.uint8)
    _dense.compressed_to_dense(np.array([[0, 3]]), np.array([[0, 1, 0]]), vals, out, True, True, 1)
    assert out.ravel().tolist() == [1, 0]            # 2 + 255 wraps to 1 for plain uint8


# --------------------------------------------------------------------------
# the parallel paths agree with the serial ones

@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("rows", [True, False])
def test_parallel_matches_serial(rows, block):
    rng = np.random.default_rng(3)
    Rb, Cb = block
    shape = (3, 120 * Rb, 130 * Cb, 2)
    dense = (rng.random(shape) < 0.02) * rng.standard_normal(shape)
    dense[:, :, :, 1] = 0
    dense[1] = dense[0][::-1]                      # equal nnz per batch
    dense[2] = dense[0][:, ::-1]
    serial = _dense.dense_to_compressed(dense, None, Rb, Cb, rows, np.int32, 1)
    parallel = _dense.dense_to_compressed(dense, None, Rb, Cb, rows, np.int32, 2)
    for a, b in zip(serial, parallel):
        assert_same_bits(a, b)
    ref_c, ref_p, ref_v = ref_to_compressed(dense, Rb, Cb, rows)
    assert np.array_equal(parallel[0], ref_c) and np.array_equal(parallel[1], ref_p)
    out = np.zeros_like(dense)
    assert _dense.compressed_to_dense(*parallel[:3], out, rows, False, 2) is None
    assert np.array_equal(out, dense)
    flat = dense.reshape(-1, 2)
    shape = np.array(dense.shape[:3])
    i1, v1 = _dense.dense_to_coo(flat, None, shape, np.int64, 1)
    i2, v2 = _dense.dense_to_coo(flat, None, shape, np.int64, 2)
    assert np.array_equal(i1, i2) and np.array_equal(v1, v2)
    assert np.array_equal(i1, np.stack(np.nonzero(dense.any(axis=3))))
    out = np.zeros_like(flat)
    assert _dense.coo_to_dense(i2, v2, shape, out, False, 2) is None
    assert np.array_equal(out, flat)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("B", [1, 2])
def test_dense_csc_parallel_transpose(B, block):
    # Enough nonzeros for the parallel csr -> csc transpose over column ranges.
    rng = np.random.default_rng(4)
    Rb, Cb = block
    shape = (300 * Rb, 420 * Cb, 1)
    one = (rng.random(shape) < 0.5) * rng.integers(1, 100, shape)
    dense = np.stack([one, one[::-1]][:B]).astype(np.int32)
    ref_c, ref_p, ref_v = ref_to_compressed(dense, Rb, Cb, False)
    for nthreads in (1, 2):
        c, p, v, _ = _dense.dense_to_compressed(dense, None, Rb, Cb, False, np.int64, nthreads)
        assert np.array_equal(c, ref_c) and np.array_equal(p, ref_p)
        assert np.array_equal(v, ref_v)


# --------------------------------------------------------------------------
# broken indices: an error tuple, never a crash or a stray write

def valid_csr(index_dtype, B=2, nc=3, nplain=4, nnz=5, seed=0):
    rng = np.random.default_rng(seed)
    compressed = np.stack([np.concatenate([[0], np.sort(rng.integers(0, nnz + 1, nc - 1)), [nnz]])
                           for _ in range(B)]).astype(index_dtype)
    plain = rng.integers(0, nplain, (B, nnz)).astype(index_dtype)
    return compressed, plain


@pytest.mark.parametrize("rows", [True, False])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_compressed_to_dense_reports_broken_indices(index_dtype, rows):
    big = np.iinfo(index_dtype).max
    small = np.iinfo(index_dtype).min
    nc, nplain, nnz = 3, 4, 5
    shape = (2, nc, nplain, 1) if rows else (2, nplain, nc, 1)
    values = np.ones((2, nnz, 1, 1, 1), np.float32)
    cases = [
        ("compressed", (1, 2), nnz + 1, ("5.3", 1, 2, -1, nnz + 1)),
        ("compressed", (0, 0), -1, ("5.3", 0, 0, -1, -1)),
        ("compressed", (0, 1), big, ("5.3", 0, 1, -1, big)),
        ("compressed", (0, 1), small, ("5.3", 0, 1, -1, small)),
        ("plain", (1, 4), -3, None),
        ("plain", (1, 4), nplain, None),
        ("plain", (0, 0), big, None),
        ("plain", (0, 2), small, None),
    ]
    for what, where, bad, expected in cases:
        compressed, plain = valid_csr(index_dtype, nc=nc, nplain=nplain, nnz=nnz)
        (compressed if what == "compressed" else plain)[where] = bad
        if expected is None:
            expected = first_compressed_error(compressed, plain, nplain)
            assert expected is not None and expected[3] == where[1]
        guard = np.full((3,) + shape, 7.0, np.float32)       # a write outside out shows here
        out = guard[1]
        out[...] = 0
        for nthreads in (1, 2):
            for accumulate in (False, True):
                got = _dense.compressed_to_dense(compressed, plain, values, out, rows,
                                                 accumulate, nthreads)
                assert got == expected, (what, where, bad)
        assert (guard[0] == 7).all() and (guard[2] == 7).all()


def test_compressed_to_dense_decreasing_compressed():
    compressed = np.array([[0, 3, 2, 4]])
    plain = np.array([[0, 1, 2, 3]])
    out = np.zeros((1, 3, 4, 1))
    got = _dense.compressed_to_dense(compressed, plain, np.ones((1, 4, 1, 1, 1)), out, True,
                                     False, 1)
    assert got == ("5.3", 0, 2, -1, 2)


@given(data=st.data())
@settings(max_examples=150, deadline=None)
def test_compressed_to_dense_arbitrary_indices_never_crash(data):
    index_dtype = data.draw(st.sampled_from(INDEX_DTYPES))
    info = np.iinfo(index_dtype)
    B = data.draw(st.integers(0, 3))
    nc = data.draw(st.integers(0, 4))
    nplain = data.draw(st.integers(1, 4))
    nnz = data.draw(st.integers(0, 6))
    rows = data.draw(st.booleans())
    Rb, Cb = data.draw(st.sampled_from(BLOCKS))
    ints = st.one_of(st.integers(-2, 8), st.integers(int(info.min), int(info.max)))
    compressed = np.array(data.draw(st.lists(st.lists(ints, min_size=nc + 1, max_size=nc + 1),
                                             min_size=B, max_size=B)),
                          dtype=index_dtype).reshape(B, nc + 1)
    plain = np.array(data.draw(st.lists(st.lists(ints, min_size=nnz, max_size=nnz),
                                        min_size=B, max_size=B)),
                     dtype=index_dtype).reshape(B, nnz)
    if data.draw(st.booleans()):     # mostly valid compressed indices, so plain gets checked
        compressed[:] = np.sort(np.clip(compressed, 0, nnz), axis=1)
    NR, NC = (nc * Rb, nplain * Cb) if rows else (nplain * Rb, nc * Cb)
    values = np.arange(1, B * nnz * Rb * Cb + 1, dtype=np.int64).reshape(B, nnz, Rb, Cb, 1)
    expected = first_compressed_error(compressed, plain, nplain)
    for accumulate in (False, True):
        out = np.zeros((B, NR, NC, 1), np.int64)
        got = _dense.compressed_to_dense(compressed, plain, values, out, rows, accumulate,
                                         data.draw(st.sampled_from([1, 2])))
        assert got == expected
        if got is None and accumulate:
            assert np.array_equal(out, ref_to_dense(compressed, plain, values, NR, NC, rows))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_coo_to_dense_reports_broken_indices(index_dtype):
    info = np.iinfo(index_dtype)
    shape = np.array([3, 4])
    for d, k, bad, code in [(0, 2, -1, "C4"), (1, 0, 4, "C5"), (1, 3, info.max, "C5"),
                            (0, 4, info.min, "C4")]:
        indices = np.array([[0, 1, 2, 2, 1], [0, 1, 2, 3, 3]], index_dtype)
        indices[d, k] = bad
        guard = np.full((3, 12, 2), 5, np.int16)
        out = guard[1]
        out[...] = 0
        for nthreads in (1, 2):
            for accumulate in (False, True):
                got = _dense.coo_to_dense(indices, np.ones((5, 2), np.int16), shape, out,
                                          accumulate, nthreads)
                assert got == (code, d, k, int(bad))
        assert (guard[0] == 5).all() and (guard[2] == 5).all()


@given(data=st.data())
@settings(max_examples=100, deadline=None)
def test_coo_to_dense_arbitrary_indices_never_crash(data):
    index_dtype = data.draw(st.sampled_from(INDEX_DTYPES))
    info = np.iinfo(index_dtype)
    shape = data.draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    nnz = data.draw(st.integers(0, 6))
    ints = st.one_of(st.integers(-2, 5), st.integers(int(info.min), int(info.max)))
    indices = np.array(data.draw(st.lists(st.lists(ints, min_size=nnz, max_size=nnz),
                                          min_size=len(shape), max_size=len(shape))),
                       dtype=index_dtype).reshape(len(shape), nnz)
    expected = None
    for k in range(nnz):
        for d, n in enumerate(shape):
            v = int(indices[d, k])
            if v < 0 or v >= n:
                expected = ("C4" if v < 0 else "C5", d, k, v)
                break
        if expected:
            break
    M = int(np.prod(shape))
    values = np.arange(1, nnz + 1, dtype=np.float64).reshape(nnz, 1)
    out = np.zeros((M, 1))
    got = _dense.coo_to_dense(indices, values, np.array(shape, np.int64), out, True,
                              data.draw(st.sampled_from([1, 2])))
    assert got == expected
    if got is None:
        ref = np.zeros((M, 1))
        if nnz:
            lin = np.ravel_multi_index(indices, shape) if shape else np.zeros(nnz, np.int64)
            np.add.at(ref, lin, values)
        assert np.array_equal(out, ref)


# --------------------------------------------------------------------------
# round trips over random shapes

@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_round_trips(data):
    dtype = data.draw(st.sampled_from(VALUE_DTYPES))
    B = data.draw(st.integers(0, 3))
    Rb, Cb = data.draw(st.sampled_from([(1, 1), (2, 3), (3, 1), (1, 4)]))
    nrb, ncb = data.draw(st.integers(0, 6)), data.draw(st.integers(0, 40))
    D = data.draw(st.integers(0, 3))
    rows = data.draw(st.booleans())
    nthreads = data.draw(st.sampled_from([1, 2]))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    nblocks = data.draw(st.integers(0, nrb * ncb)) if D else 0
    dense = make_dense(rng, B, nrb, ncb, Rb, Cb, D, dtype, nblocks)
    c, p, v, counts = _dense.dense_to_compressed(dense, None, Rb, Cb, rows, np.int32, nthreads)
    assert np.array_equal(counts, np.full(B, nblocks))
    out = np.zeros_like(dense)
    assert _dense.compressed_to_dense(c, p, v, out, rows, False, nthreads) is None
    assert_same_values(out, np.where(dense == 0, np.zeros_like(dense), dense))
    flat = dense.reshape(int(np.prod(dense.shape[:3])), D)
    shape = np.array(dense.shape[:3], np.int64)
    i, v = _dense.dense_to_coo(flat, None, shape, np.int64, nthreads)
    out = np.zeros_like(flat)
    assert _dense.coo_to_dense(i, v, shape, out, False, nthreads) is None
    assert_same_values(out, np.where(flat == 0, np.zeros_like(flat), flat))


# --------------------------------------------------------------------------
# argument checks

def test_argument_errors():
    c = np.array([[0, 1]])
    p = np.array([[0]])
    v = np.ones((1, 1, 1, 1, 1), np.float32)
    out = np.zeros((1, 1, 2, 1), np.float32)
    with pytest.raises(TypeError, match="dtype of compressed"):
        _dense.compressed_to_dense(c, p.astype(np.int32), v, out, True, False, 1)
    with pytest.raises(TypeError, match="int32 or int64"):
        _dense.compressed_to_dense(c.astype(np.int16), p.astype(np.int16), v, out, True, False, 1)
    with pytest.raises(TypeError, match="dtype of values"):
        _dense.compressed_to_dense(c, p, v, out.astype(np.float64), True, False, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        _dense.compressed_to_dense(c, p, v, np.zeros((1, 1, 4, 1), np.float32)[:, :, ::2],
                                   True, False, 1)
    with pytest.raises(ValueError, match="expected compressed"):
        _dense.compressed_to_dense(np.array([[0, 1, 1]]), p, v, out, True, False, 1)
    with pytest.raises(ValueError, match="writeable"):
        ro = out.copy()
        ro.flags.writeable = False
        _dense.compressed_to_dense(c, p, v, ro, True, False, 1)
    with pytest.raises(TypeError, match="logical"):
        _dense.compressed_to_dense(c, p, v, out, True, True, 1, logical=True)
    with pytest.raises(TypeError, match="index_dtype"):
        _dense.dense_to_compressed(np.zeros((1, 2, 2, 1)), None, 1, 1, True, np.int16, 1)
    with pytest.raises(ValueError, match="block size"):
        _dense.dense_to_compressed(np.zeros((1, 2, 2, 1)), None, 3, 1, True, np.int32, 1)
    with pytest.raises(ValueError, match="does not view"):
        _dense.dense_to_compressed(np.zeros((1, 2, 2, 1)), np.zeros((1, 2, 2, 1), np.uint32),
                                   1, 1, True, np.int32, 1)
    with pytest.raises(ValueError, match="prod"):
        _dense.dense_to_coo(np.zeros((6, 1)), None, np.array([2, 2]), np.int64, 1)
    with pytest.raises(ValueError, match="int32"):
        _dense.dense_to_coo(np.zeros((0, 1)), None, np.array([2**31 + 1, 0]), np.int32, 1)
    with pytest.raises(ValueError, match="non-negative"):
        _dense.coo_to_dense(np.zeros((1, 0), np.int64), np.zeros((0, 1)), np.array([-1]),
                            np.zeros((0, 1)), False, 1)
    with pytest.raises(ValueError, match="expected indices"):
        _dense.coo_to_dense(np.zeros((2, 1), np.int64), np.zeros((1, 1)), np.array([3]),
                            np.zeros((3, 1)), False, 1)


# ---------------------------------------------------------------- small 2-d csr/csc -> dense

@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int16, np.float32, np.float64, np.complex64,
                                   np.complex128, np.uint64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("rows", [True, False])
def test_small_to_dense_2d_matches_the_general_kernel(dtype, index_dtype, rows):
    import scipy.sparse as sp
    rng = np.random.default_rng(5)
    for shape in ((7, 11), (1, 1), (5, 0), (0, 4), (13, 3)):
        A = sp.random(*shape, density=0.4, format="csr" if rows else "csc", random_state=rng)
        A.sort_indices()
        data = random_values(rng, A.data.shape, dtype)
        c, p = A.indptr.astype(index_dtype), A.indices.astype(index_dtype)
        out = np.zeros(shape, dtype)
        assert _dense.small_to_dense_2d(c, p, data, out, rows) is True
        ref = np.zeros((1,) + shape + (1,), dtype)
        assert _dense.compressed_to_dense(c[None], p[None], data.reshape(1, -1, 1, 1, 1), ref, rows, False, 1) is None
        assert np.array_equal(out, ref[0, ..., 0])


def test_small_to_dense_2d_declines_what_it_does_not_move():
    c, p = np.array([0, 1, 2]), np.array([1, 0])
    v = np.array([5.0, 7.0])
    out = np.zeros((2, 2))
    assert not _dense.small_to_dense_2d(c.astype(np.int32), p, v, out, True)  # mixed index dtypes
    assert not _dense.small_to_dense_2d(c, p, v, np.zeros((2, 2), np.float32), True)  # itemsize
    assert not _dense.small_to_dense_2d(c, p, v, np.zeros((3, 2)), True)  # rows of out != n
    assert not _dense.small_to_dense_2d(c, p, v[:1], out, True)  # values and plain differ
    assert not _dense.small_to_dense_2d(c, np.array([1, 9, 0])[::2], v, out, True)  # strided
    assert not _dense.small_to_dense_2d(c, p, v, np.zeros((2, 2)).T, True)  # out not C-contiguous
    ro = np.zeros((2, 2))
    ro.flags.writeable = False
    assert not _dense.small_to_dense_2d(c, p, v, ro, True)
    odd = np.zeros(2, dtype="V3")
    assert not _dense.small_to_dense_2d(c, p, odd, np.zeros((2, 2), "V3"), True)  # 3-byte items
    assert not _dense.small_to_dense_2d(list(c), p, v, out, True)
    assert not out.any()  # nothing written on a decline
    assert _dense.small_to_dense_2d(c, p, v, out, True) and np.array_equal(out, [[0, 5], [7, 0]])


def test_to_dense_of_unchecked_duplicates_still_sums():
    """The small path takes validated tensors only: unchecked input (duplicates possible) keeps
    the general kernel, which sums them and checks the indices."""
    import sparsetensor as sparse
    with sparse.check_invariants(False):
        t = sparse.sparse_csr_tensor([0, 2, 2], [1, 1], [2.0, 3.0], size=(2, 2))
        bad = sparse.sparse_csr_tensor([0, 2, 2], [1, 5], [2.0, 3.0], size=(2, 2))
    assert np.array_equal(t.to_dense(), [[0, 5], [0, 0]])
    with pytest.raises(Exception, match="5.5|column|plain"):
        bad.to_dense()
