"""Sparse @ sparse on CUDA (kernels/spgemm.cu: a warp a row with a hash table of its columns, or
expand-sort-compress for blocks and rows of more than 1024 products) through the op
(``st.spgemm``, ``st.matmul``, ``@``), against the CPU backend: the result's layout, shape, index
dtype and index members bitwise (the same pattern, explicit zeros of cancelled sums included),
values exactly for integers and bool and within 1e-6 (float32/complex64) or 1e-12 (float64,
complex128) relative for floats; the CPU's errors with the CPU's messages; the device's own
limits as NotImplementedError; no copy to the host. Runs on a GPU or on the kernel emulator
(run it also with SPARSETENSOR_EMULATOR_SEED=3: the emulator shuffles blocks and threads).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._backend.cuda import _spgemm as device_spgemm
from sparsetensor.cuda import _primitives
from sparsetensor.cuda._array import DeviceArray

from conftest import random_dense
from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import ALL_DTYPES, INDEX, host, members

BLOCKED = ("bsr", "bsc")
LAYOUT_PAIRS = [("csr", "csr"), ("csr", "csc"), ("csc", "csr"), ("csc", "csc"), ("bsr", "bsr"), ("bsc", "bsc"),
                ("bsr", "bsc"), ("bsc", "bsr"), ("coo", "coo"), ("coo", "csr"), ("csr", "coo")]
PAIR_IDS = [f"{x}@{y}" for x, y in LAYOUT_PAIRS]
RTOL = {np.dtype("float16"): 1e-3, np.dtype("float32"): 1e-6, np.dtype("complex64"): 1e-6,
        np.dtype("float64"): 1e-12, np.dtype("complex128"): 1e-12}


def _values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":  # wide enough that int8/uint8 sums wrap
        return rng.integers(0 if dtype.kind == "u" else -100, 100, shape).astype(dtype)
    v = rng.standard_normal(shape)
    if dtype.kind == "c":
        v = v + 1j * rng.standard_normal(shape)
    return v.astype(dtype)


def operand(rng, layout, blocks, bs, dtype, index_dtype, batch=(), nnz=None, density=None):
    """A CPU tensor of ``layout`` whose batches share one random pattern (so that every batch of a
    product has one nnz) and have their own values (random integers and bools include zeros:
    explicit zeros, which the product must carry as the CPU does)."""
    bs = bs if layout in BLOCKED else (1, 1)
    if density is None:
        base = random_dense(rng, blocks=blocks, blocksize=bs, nnz=nnz)
    else:
        base = np.kron(rng.random(blocks) < density, np.ones(bs))
    if layout == "coo":
        idx = st.from_dense(base, "coo", index_dtype=index_dtype).indices()
        return st.sparse_coo_tensor(idx, _values(rng, (idx.shape[1],), dtype), base.shape, is_coalesced=True)
    pattern = st.from_dense(base, layout, blocksize=bs if layout in BLOCKED else None, index_dtype=index_dtype)
    c, p = pattern.compressed_indices(), pattern.plain_indices()
    return st.sparse_compressed_tensor(np.broadcast_to(c, batch + c.shape).copy(),
                                       np.broadcast_to(p, batch + p.shape).copy(),
                                       _values(rng, batch + pattern.values().shape, dtype), batch + base.shape,
                                       layout=getattr(st, f"sparse_{layout}"))


def assert_product(got, want):
    """Device result ``got`` is the CPU's ``want``: layout, shape, flags, index members bitwise,
    values exactly (integers, bool) or within RTOL (floats; atol scaled to the values)."""
    assert got.device == "cuda:0"
    assert got.layout is want.layout and got.shape == want.shape and got.dtype == want.dtype
    assert got.index_dtype == want.index_dtype and got.is_coalesced() and want.is_coalesced()
    if got.layout.blocked:
        assert got.blocksize == want.blocksize
    gm, wm = members(got), members(want)
    for x, y in zip(gm[:-1], wm[:-1]):
        x = host(x)
        assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all()
    assert_close(host(gm[-1]), np.ascontiguousarray(wm[-1]))


def assert_close(x, y):
    """Host arrays of one dtype and shape, equal (integers, bool) or within RTOL (floats; atol
    scaled to the values)."""
    assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
    if x.dtype.kind in "fc":
        rtol = RTOL[x.dtype]
        scale = float(np.abs(y.astype(np.complex128)).max()) if y.size else 0.0
        np.testing.assert_allclose(x.astype(np.complex128), y.astype(np.complex128), rtol=rtol, atol=rtol * scale)
    else:
        assert (x == y).all()


def both(a, b, call=st.spgemm):
    want = call(a, b)
    got = call(a.cuda(), b.cuda())
    assert_product(got, want)
    return got, want


def _pair(rng, la, lb, dtype, index_dtype, batch=(), sizes=(3, 4, 5), bs_a=(2, 3), bs_b=(3, 1), **kw):
    """Operands of ``la @ lb``: (M, K) @ (K, N) in blocks of bs_a and bs_b (blocked layouts)."""
    M, K, N = sizes
    a = operand(rng, la, (M, K), bs_a, dtype, index_dtype, batch, **kw)
    b = operand(rng, lb, (K, N), bs_b, dtype, index_dtype, batch, **kw)
    return a, b


# -- every layout pair x index dtype x value dtype x batch dims --------------------------------------------
@pytest.mark.parametrize("la,lb", LAYOUT_PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("batch", [(), (2,)], ids=["b0", "b1"])
def test_layouts_dtypes(backend, rng, la, lb, index_dtype, dtype, batch):
    if batch and "coo" in (la, lb):
        pytest.skip("coo spgemm is 2-d (sparse_dim == 2)")
    a, b = _pair(rng, la, lb, dtype, index_dtype, batch, density=0.5)
    got, want = both(a, b)
    assert got.nnz > 0  # the operands formed products: the kernels ran
    expected = {("coo", "coo"): "coo", ("csc", "csc"): "csc", ("bsc", "bsc"): "bsc", ("bsr", "bsr"): "bsr",
                ("bsr", "bsc"): "bsr", ("bsc", "bsr"): "bsr"}.get((la, lb), "csr")
    assert got.layout.name == expected


@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("csc", "csc"), ("bsr", "bsr"), ("bsc", "bsr")])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128])
def test_two_batch_dims(backend, rng, la, lb, dtype):
    a, b = _pair(rng, la, lb, dtype, np.int32, (2, 3), density=0.4)
    both(a, b)


@pytest.mark.parametrize("bs_a,bs_b", [((1, 1), (1, 1)), ((3, 2), (2, 4)), ((1, 4), (4, 1)), ((4, 1), (1, 3))])
def test_block_shapes(backend, rng, bs_a, bs_b):
    a = operand(rng, "bsr", (4, 5), bs_a, np.float64, np.int64, density=0.5)
    b = operand(rng, "bsr", (5, 3), bs_b, np.float64, np.int64, density=0.5)
    got, _ = both(a, b)
    assert got.blocksize == (bs_a[0], bs_b[1])


def test_mixed_index_dtypes_give_int64(backend, rng):
    a = operand(rng, "csr", (5, 6), None, np.float64, np.int32, density=0.5)
    b = operand(rng, "csc", (6, 4), None, np.float64, np.int64, density=0.5)
    got, _ = both(a, b)
    assert got.index_dtype == np.int64


# -- structure: empty, cancelled, heavy -----------------------------------------------------------------
@pytest.mark.parametrize("shape_a,shape_b", [((0, 3), (3, 4)), ((3, 0), (0, 4)), ((3, 4), (4, 0)), ((3, 4), (4, 5))])
@pytest.mark.parametrize("layout", ["csr", "csc", "coo", "bsr"])
def test_empty(backend, shape_a, shape_b, layout):
    kw = {"blocksize": (1, 1)} if layout == "bsr" else {}
    a, b = st.from_dense(np.zeros(shape_a), layout, **kw), st.from_dense(np.zeros(shape_b), layout, **kw)
    got, _ = both(a, b)
    assert got.nnz == 0


def test_empty_rows_and_one_side_empty(backend, rng):
    d = random_dense(rng, blocks=(6, 5), nnz=9)
    d[[0, 3]] = 0  # empty rows of a
    e = random_dense(rng, blocks=(5, 4), nnz=8)
    e[[1, 2]] = 0  # empty rows of b: a's entries in those columns form no product
    both(st.from_dense(d, "csr"), st.from_dense(e, "csr"))
    both(st.from_dense(d, "csr"), st.from_dense(np.zeros((5, 4)), "csr"))
    both(st.from_dense(np.zeros((6, 5)), "csr"), st.from_dense(e, "csr"))
    # entries that meet only empty rows: no products although both operands have entries
    a = st.sparse_csr_tensor([0, 1, 1], [1], [2.0], size=(2, 2))
    b = st.sparse_csr_tensor([0, 1, 1], [0], [3.0], size=(2, 2))
    got, _ = both(a, b)
    assert got.nnz == 0


def test_batch_of_size_zero(backend, rng):
    a = st.from_dense(np.zeros((0, 3, 4)), "csr", batch_dim=1)
    b = st.from_dense(np.zeros((0, 4, 2)), "csr", batch_dim=1)
    got, _ = both(a, b)
    assert got.shape == (0, 3, 2)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_])
def test_cancellation_keeps_explicit_zeros(backend, dtype):
    a = st.sparse_csr_tensor([0, 2], [0, 1], np.array([1, 1], dtype), size=(1, 2))
    b = st.sparse_csr_tensor([0, 1, 2], [0, 0], np.array([1, -1] if dtype != np.bool_ else [0, 0], dtype),
                             size=(2, 1))
    got, want = both(a, b)
    assert got.nnz == want.nnz == 1 and not host(got.values())[0]


def test_integers_wrap_and_bool_is_or_of_ands(backend):
    a = st.sparse_csr_tensor([0, 3], [0, 1, 2], np.array([100, 100, 100], np.int8), size=(1, 3))
    b = st.sparse_csr_tensor([0, 1, 2, 3], [0, 0, 0], np.array([100, 100, 100], np.int8), size=(3, 1))
    got, _ = both(a, b)
    assert host(got.values())[0] == np.int8(np.int64(30000).astype(np.int8))
    a = st.sparse_csr_tensor([0, 3], [0, 1, 2], np.ones(3, bool), size=(1, 3))
    b = st.sparse_csr_tensor([0, 1, 2, 3], [0, 0, 0], np.ones(3, bool), size=(3, 1))
    got, _ = both(a, b)  # three products: true, not 3
    assert host(got.values().view(np.uint8))[0] == 1
    i64 = np.int64(2**62)
    a = st.sparse_csr_tensor([0, 2], [0, 1], np.array([i64, i64]), size=(1, 2))
    b = st.sparse_csr_tensor([0, 1, 2], [0, 0], np.array([4, 4], np.int64), size=(2, 1))
    both(a, b)  # 2**64 + 2**64 wraps to 0


def test_heavy_rows_and_collisions(backend, rng):
    """A full row of a meets every row of b (all of b's entries collide in its columns), a full
    column of b is met by every row of a; over 4096 products (several tiles of the sort)."""
    a = operand(rng, "csr", (40, 80), None, np.float64, np.int32, density=0.15)
    b = operand(rng, "csr", (80, 50), None, np.float64, np.int32, density=0.2)
    A, B = a.to_dense(), b.to_dense()
    A[7] = rng.standard_normal(80)
    A[30] = rng.standard_normal(80)
    B[:, 3] = rng.standard_normal(80)
    B[11] = rng.standard_normal(50)
    got, want = both(st.from_dense(A, "csr", index_dtype=np.int32), st.from_dense(B, "csr", index_dtype=np.int32))
    assert host(got.crow_indices())[8] - host(got.crow_indices())[7] == 50  # the full row
    products = sum(np.count_nonzero(B[k]) for i in range(40) for k in np.flatnonzero(A[i]))
    assert products > 4096


def test_duplicate_heavy_products(backend, rng):
    """Every product of a row lands in one of two columns: long runs of equal keys."""
    a = st.from_dense(rng.standard_normal((5, 300)), "csr")
    B = np.zeros((300, 64))
    B[:, 5] = rng.standard_normal(300)
    B[::3, 40] = 1.0
    got, _ = both(a, st.from_dense(B, "csr"))
    assert got.nnz == 10


def test_unsorted_input_is_repaired(backend):
    with st.check_invariants(False):
        a = st.sparse_csr_tensor([0, 2, 3], [1, 0, 1], [2.0, 3.0, 4.0], size=(2, 2))
    want = st.spgemm(a, a)
    got = st.spgemm(a.cuda(), a.cuda())
    assert_product(got, want)


def test_matmul_and_operator(backend, rng):
    a, b = _pair(rng, "csr", "csc", np.float32, np.int64, density=0.5)
    da, db = a.cuda(), b.cuda()
    assert_product(st.matmul(da, db), st.spgemm(a, b))
    assert_product(da @ db, st.spgemm(a, b))
    assert_product(da @ da.mT, a @ a.mT)


# -- errors and refusals ----------------------------------------------------------------------------------
def _same_error(call, a, b, kind):
    with pytest.raises(kind) as cpu:
        call(a, b)
    with pytest.raises(kind) as dev:
        call(a.cuda(), b.cuda())
    assert str(dev.value).replace(" on cuda:0", "") == str(cpu.value)  # the op names the device


def test_op_errors_are_the_cpus(backend, rng):
    a = np.zeros((2, 2, 2))
    a[0, 0, 0] = a[1, 0, 1] = 1
    b = np.zeros((2, 2, 2))
    b[0, 0, 0] = b[1, 0, 1] = 1  # batch 0: one product; batch 1: none
    _same_error(st.spgemm, st.from_dense(a, "csr", batch_dim=1), st.from_dense(b, "csr", batch_dim=1), ValueError)
    x = st.from_dense(random_dense(rng, blocks=(3, 4), nnz=4), "csr")
    _same_error(st.spgemm, x, x, ValueError)  # 3x4 @ 3x4
    y = st.from_dense(random_dense(rng, blocks=(4, 3), nnz=4, dtype=np.float32), "csr")
    got = st.spgemm(x.cuda(), y.cuda())  # float64 @ float32: promoted, as on the CPU
    want = st.spgemm(x, y)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(host(got.to_dense()), want.to_dense())
    bsr = st.from_dense(np.eye(4), "bsr", blocksize=(2, 2))
    mixed = st.spgemm(bsr.cuda(), st.from_dense(np.eye(4), "csr").cuda())  # bsr unblocked first, as on the CPU
    assert mixed.layout is st.sparse_csr and mixed.is_cuda
    np.testing.assert_array_equal(host(mixed.to_dense()), np.eye(4))
    _same_error(st.spgemm, bsr, st.from_dense(np.eye(4), "bsr", blocksize=(1, 2)), ValueError)
    hybrid = st.from_dense(np.ones((2, 2, 3)), "csr", dense_dim=1)
    _same_error(st.spgemm, hybrid, hybrid, NotImplementedError)


def test_a_key_space_beyond_64_bits_is_refused(backend):
    """Rows x columns of the product beyond 2**64: refused before anything is written."""
    a = st.sparse_csr_tensor(np.array([0, 1, 1, 1, 1]), np.array([0]), np.array([1.0]), size=(4, 1))
    b = st.sparse_csr_tensor(np.array([0, 1]), np.array([2**62 + 5]), np.array([2.0]), size=(1, 2**62 + 6))
    with pytest.raises(NotImplementedError, match="exceed a 64-bit key"):
        st.spgemm(a.cuda(), b.cuda())
    b2 = st.sparse_csr_tensor(np.array([0, 1]), np.array([2**61]), np.array([2.0]), size=(1, 2**61 + 1))
    got = st.spgemm(a.cuda(), b2.cuda())  # 4 * (2**61 + 1) keys fit: the product runs
    assert host(got.col_indices()).tolist() == [2**61] and host(got.values()).tolist() == [2.0]


def sort_only(monkeypatch):
    """From now on every product takes expand-sort-compress (as blocks and rows of more than 1024
    products do)."""
    monkeypatch.setattr(device_spgemm, "_by_rows", lambda *args: None)


@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("csc", "csr"), ("csc", "csc")], ids=lambda x: x)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("batch", [(), (2,)], ids=["b0", "b1"])
def test_sort_method(backend, rng, monkeypatch, la, lb, index_dtype, dtype, batch):
    """Expand-sort-compress on unblocked operands (the row method's fallback) gives the CPU's
    product for every dtype and index dtype too."""
    sort_only(monkeypatch)
    a, b = _pair(rng, la, lb, dtype, index_dtype, batch, density=0.5)
    got, _ = both(a, b)
    assert got.nnz > 0


def long_rows_method(monkeypatch, method):
    """Rows of more than 1024 products from now on: a block a row over a dense row ("dense",
    the default) or sorted ("sorted": a dense row would take more than the room allowed)."""
    if method == "sorted":
        monkeypatch.setattr(device_spgemm, "_DENSE_BYTES", 0)


@pytest.mark.parametrize("method", ["dense", "sorted"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.bool_, np.complex64], ids=str)
def test_row_table_limits(backend, rng, monkeypatch, method, dtype):
    """Rows of exactly 1024 products into 1024 columns (the row's hash table full), of 1024
    products into 3 columns, a row of 1025 products (a dense row, or sorted, then placed among
    the hashed rows) beside rows of a few, every row long, a batch whose long row is the other
    batch's too: all the CPU's, by either method for the long rows."""
    long_rows_method(monkeypatch, method)
    K, N = 40, 1100
    B = np.zeros((K, N), np.float64)
    B[0, :1024] = 1 + rng.random(1024)            # row 0 of b: 1024 columns
    B[1:33, [5, 700, 1023]] = rng.random((32, 3))  # 32 rows x 32 entries -> 1024 products into 3 columns
    B[1:33, 33:62] = rng.random((32, 29))
    B[33, 1024:1025] = 2.0
    B[34:40, ::97] = rng.random((6, 12))
    A = np.zeros((6, K))
    A[0, 0] = 3.0                                 # 1024 products, 1024 columns
    A[1, 33:40] = rng.random(7)                   # a few products
    A[3, 34] = 1.0
    small = B.copy()
    small[1:33, 33:62] = 0                        # rows 1..32 now 3 entries: 96 products for row 2 below
    A2 = A.copy()
    A2[2, 1:33] = 1.0
    cast = (lambda x: x != 0) if np.dtype(dtype) == np.bool_ else (lambda x: (x * 4).astype(dtype))
    for a_dense, b_dense in ((A2, small), (A2, B)):
        a = st.from_dense(cast(a_dense), "csr", index_dtype=np.int32)
        b = st.from_dense(cast(b_dense), "csr", index_dtype=np.int32)
        both(a, b)
    B32 = B.copy()
    B32[1:33, 33:62] = 0
    B32[1:33, 100:129] = 1.0                      # 32 x 32 = 1024 products of row 2 into 32 columns
    both(st.from_dense(cast(A2), "csr"), st.from_dense(cast(B32), "csr"))
    A3 = A2.copy()
    A3[4, 0] = 1.0
    A3[4, 33] = 1.0                               # 1024 + 1 products: the whole product is sorted
    both(st.from_dense(cast(A3), "csr"), st.from_dense(cast(B), "csr"))
    both(st.from_dense(cast(A3[[4, 4]]), "csr"), st.from_dense(cast(B), "csr"))  # every row long
    a3, b3 = st.from_dense(cast(A3), "csr", index_dtype=np.int32), st.from_dense(cast(B), "csr", index_dtype=np.int32)
    stack = [np.stack([x, x]) for x in (a3.crow_indices(), a3.col_indices(), b3.crow_indices(), b3.col_indices())]
    a2 = st.sparse_csr_tensor(stack[0], stack[1], np.stack([a3.values(), a3.values()[::-1]]), (2,) + a3.shape)
    b2 = st.sparse_csr_tensor(stack[2], stack[3], np.stack([b3.values()[::-1], b3.values()]), (2,) + b3.shape)
    both(a2, b2)


@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.complex128], ids=str)
def test_dense_long_rows(backend, rng, monkeypatch, index_dtype, dtype):
    """Many long rows over few blocks (each block reuses its bitmap and dense row, row after
    row), 9,000 columns (more words than a block's threads: the columns are written in several
    rounds of the block scan; a last word partly beyond the columns), long rows of two batches,
    short rows between them: the CPU's product, with no sort and no product stored."""
    from sparsetensor.cuda._module import profile

    K, N = 64, 9000
    Bd = np.zeros((K, N))
    for k in range(K):
        Bd[k, rng.choice(N, 40, replace=False)] = rng.integers(1, 5, 40) * rng.choice([-1, 1], 40)
    Bd[:, N - 1] = 1.0  # the last column, in the last word's first bits
    Ad = np.zeros((12, K))
    Ad[::2] = rng.integers(1, 5, (6, K))  # 6 rows of 64 x 41 products: long
    Ad[1::2, :3] = 1.0                    # short rows between them
    a = st.from_dense(np.stack([Ad, -Ad]).astype(dtype), "csr", index_dtype=index_dtype, batch_dim=1)
    b = st.from_dense(np.stack([Bd, np.where(Bd != 0, Bd + 8, 0)]).astype(dtype), "csr", index_dtype=index_dtype,
                      batch_dim=1)
    for room in (3, 1 << 30):  # one block, then as many as there are long rows
        per_block = 4 * -(-N // 32) + N * np.dtype(_primitives.acc_dtype(np.dtype(dtype))).itemsize
        monkeypatch.setattr(device_spgemm, "_DENSE_BYTES", room * per_block // 3)
        with profile() as kernels:
            both(a, b)
        assert "spgemm_dense_fill" in kernels and not any(k.startswith("radix") for k in kernels)
    monkeypatch.setattr(device_spgemm, "MAX_PRODUCTS", 10)  # dense rows store no product: no limit
    both(a, b)


def test_too_many_products_are_refused(backend, rng, monkeypatch):
    """The sort's limit (the row methods store no product and have none)."""
    a, b = _pair(rng, "csr", "csr", np.float64, np.int64, density=0.6)
    both(a, b)
    sort_only(monkeypatch)
    nprod = int(np.diff(b.crow_indices())[a.col_indices()].sum())
    monkeypatch.setattr(device_spgemm, "MAX_PRODUCTS", nprod - 1)
    with pytest.raises(NotImplementedError, match=f"forms {nprod} intermediate products, more than {nprod - 1}"):
        st.spgemm(a.cuda(), b.cuda())
    monkeypatch.setattr(device_spgemm, "MAX_PRODUCTS", nprod)
    both(a, b)


# -- no host copies ------------------------------------------------------------------------------------------
def forbid_host_copies(monkeypatch) -> list:
    """From now on (until monkeypatch.undo) a copy to the host fails the test, but for reads of up
    to 3 integers (the product count, the output nnz, the per-batch nnz), whose sizes the returned
    list collects."""
    get = DeviceArray.get
    small = []

    def read_ints(dev, arr):
        assert arr.size <= 3, arr.shape
        small.append(arr.size)
        return get(arr)

    def refuse(*args, **kwargs):
        raise AssertionError("a device op copied an array to the host")

    monkeypatch.setattr(_primitives, "read_ints", read_ints)
    monkeypatch.setattr(DeviceArray, "get", refuse)
    monkeypatch.setattr(DeviceArray, "__array__", refuse)
    return small


def test_no_host_copies(backend, rng, monkeypatch):
    a, b = _pair(rng, "bsr", "bsc", np.complex128, np.int32, (2,), density=0.5)
    da, db = a.cuda(), b.cuda()
    small = forbid_host_copies(monkeypatch)
    got = st.spgemm(da, db)
    monkeypatch.undo()
    assert small
    assert_product(got, st.spgemm(a, b))


# -- bmm and addmm on the device -----------------------------------------------------------------------
def _dense(rng, shape, dtype):
    return DeviceArray.from_host(_values(rng, shape, dtype))


def assert_dense(got, want):
    """A device array equal to the CPU's array: dtype, shape, values (RTOL for floats)."""
    assert isinstance(got, DeviceArray) and got.device == "cuda:0"
    assert_close(got.get(), want)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.float16])
def test_bmm_sparse_dense(backend, rng, layout, dtype):
    a = operand(rng, layout, (3, 4), (2, 2), dtype, np.int32, (2,), density=0.5)
    x = _dense(rng, (2, a.shape[-1], 5), dtype)
    assert_dense(st.bmm(a.cuda(), x), st.bmm(a, x.get()))
    assert_dense(a.cuda().bmm(x), st.bmm(a, x.get()))


@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("csc", "csc"), ("csr", "csc"), ("bsr", "bsr")])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_])
def test_bmm_sparse_sparse(backend, rng, la, lb, dtype):
    a, b = _pair(rng, la, lb, dtype, np.int64, (3,), density=0.5)
    assert_product(st.bmm(a.cuda(), b.cuda()), st.bmm(a, b))


def test_bmm_errors(backend, rng):
    a = operand(rng, "csr", (3, 4), None, np.float64, np.int64, (2,), density=0.5)
    with pytest.raises(ValueError) as cpu:
        st.bmm(a, np.ones((3, 4, 2)))
    with pytest.raises(ValueError) as dev:
        st.bmm(a.cuda(), DeviceArray.from_host(np.ones((3, 4, 2))))
    assert str(dev.value).replace(" on cuda:0", "") == str(cpu.value)
    with pytest.raises(ValueError) as cpu:
        st.bmm(np.ones((2, 5, 4)), a)  # dense @ sparse, inner sizes 4 and 3
    with pytest.raises(ValueError) as dev:
        st.bmm(DeviceArray.from_host(np.ones((2, 5, 4))), a.cuda())
    assert str(dev.value).replace(" on cuda:0", "") == str(cpu.value)
    coo = st.from_dense(a.to_dense(), "coo")  # sparse_dim == 3: one block-diagonal matrix, as on the CPU
    assert_dense(st.bmm(coo.cuda(), DeviceArray.from_host(np.ones((2, 4, 2)))), st.bmm(coo, np.ones((2, 4, 2))))
    with pytest.raises(ValueError) as cpu:
        st.bmm(coo, np.ones((2, 3, 2)))
    with pytest.raises(ValueError) as dev:
        st.bmm(coo.cuda(), DeviceArray.from_host(np.ones((2, 3, 2))))
    assert str(dev.value).replace(" on cuda:0", "") == str(cpu.value)
    with pytest.raises(ValueError, match="different devices"):
        st.bmm(a.cuda(), np.ones((2, 4, 2)))


ADDMM_INPUTS = [(3 * 2, 5), (5,), (3 * 2, 1), (1, 5), ()]


@pytest.mark.parametrize("inp_shape", ADDMM_INPUTS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.float16])
@pytest.mark.parametrize("alpha,beta", [(1, 1), (2.5, -0.5), (1, 0), (-1, 1)])
def test_addmm_sparse_dense(backend, rng, inp_shape, dtype, alpha, beta):
    a = operand(rng, "csr", (3 * 2, 4), None, dtype, np.int64, density=0.5)
    x, inp = _dense(rng, (4, 5), dtype), _dense(rng, inp_shape, dtype)
    want = st.addmm(inp.get(), a, x.get(), alpha=alpha, beta=beta)
    assert_dense(st.addmm(inp, a.cuda(), x, alpha=alpha, beta=beta), want)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("csc", "csr"), ("bsr", "bsr")])
def test_addmm_sparse_sparse(backend, rng, dtype, la, lb):
    a, b = _pair(rng, la, lb, dtype, np.int32, density=0.5)
    inp = _dense(rng, (a.shape[0], 1), dtype)
    dtype = np.dtype(dtype)
    alpha, beta = (True, True) if dtype == np.bool_ else (3, -2) if dtype.kind in "iu" else (1.5, 0.25)
    if dtype.kind == "u":
        beta = 2
    want = st.addmm(inp.get(), a, b, alpha=alpha, beta=beta)
    assert_dense(st.addmm(inp, a.cuda(), b.cuda(), alpha=alpha, beta=beta), want)
    assert_dense(st.addmm(inp, a.cuda(), b.cuda()), st.addmm(inp.get(), a, b))


def test_addmm_promotes_and_ignores_input_at_beta_zero(backend, rng):
    a = operand(rng, "csr", (4, 3), None, np.float32, np.int64, density=0.6)
    b = operand(rng, "csr", (3, 5), None, np.float32, np.int64, density=0.6)
    inp = np.full((4, 5), np.nan)  # float64: the result is float64; NaN ignored at beta == 0
    got = st.addmm(DeviceArray.from_host(inp), a.cuda(), b.cuda(), beta=0)
    want = st.addmm(inp, a, b, beta=0)
    assert got.dtype == want.dtype == np.float64
    # the product is float32 on both backends (then promoted): float32's tolerance (a GPU contracts
    # its multiply-adds, so the last bit may differ)
    assert_dense(got.astype(np.float32), want.astype(np.float32))
    assert not np.isnan(got.get()).any()


def test_addmm_errors(backend, rng):
    a = operand(rng, "csr", (4, 3), None, np.float64, np.int64, density=0.6)
    x = DeviceArray.from_host(np.ones((3, 2)))
    with pytest.raises(ValueError, match="different devices"):  # checked before any product
        st.addmm(np.ones((4, 2)), a.cuda(), x)
    with pytest.raises(ValueError) as cpu:
        st.addmm(np.ones((3, 2)), a, np.ones((3, 2)))
    with pytest.raises(ValueError) as dev:
        st.addmm(DeviceArray.from_host(np.ones((3, 2))), a.cuda(), x)
    assert str(dev.value).replace(" on cuda:0", "") == str(cpu.value)
    with pytest.raises(TypeError, match="must be an integer"):
        ai = operand(rng, "csr", (4, 3), None, np.int32, np.int64, density=0.6).cuda()
        st.addmm(DeviceArray.from_host(np.ones((4, 4), np.int32)), ai, ai.mT, alpha=0.5)


def test_addmm_no_host_copies(backend, rng, monkeypatch):
    a, b = _pair(rng, "csr", "csc", np.float64, np.int64, density=0.5)
    da, db = a.cuda(), b.cuda()
    inp = DeviceArray.from_host(np.ones(b.shape[1]))
    small = forbid_host_copies(monkeypatch)
    got = st.addmm(inp, da, db, alpha=2.0, beta=-1.0)
    monkeypatch.undo()
    assert small
    assert_dense(got, st.addmm(np.ones(b.shape[1]), a, b, alpha=2.0, beta=-1.0))


def test_addmm_complex_scalars(backend, rng):
    a, b = _pair(rng, "csr", "csr", np.complex64, np.int64, density=0.5)
    inp = _dense(rng, (b.shape[1],), np.complex64)
    want = st.addmm(inp.get(), a, b, alpha=1 - 2j, beta=0.5j)
    assert_dense(st.addmm(inp, a.cuda(), b.cuda(), alpha=1 - 2j, beta=0.5j), want)
    x = _dense(rng, (b.shape[0], 3), np.complex64)
    want = st.addmm(np.ones((1, 3), np.complex64), a, x.get(), alpha=2j, beta=-1)
    got = st.addmm(DeviceArray.from_host(np.ones((1, 3), np.complex64)), a.cuda(), x, alpha=2j, beta=-1)
    assert_dense(got, want)


def test_integer_sparse_dense_products(backend, rng):
    """Integer and bool sparse @ dense (bmm, addmm) on the device: the CPU's values exactly (bool:
    or of ands)."""
    a = operand(rng, "csr", (4, 3), None, np.int32, np.int64, (2,), density=0.6)
    x = _dense(rng, (2, 3, 2), np.int32)
    assert_dense(st.bmm(a.cuda(), x), st.bmm(a, x.get()))
    a2 = operand(rng, "csr", (4, 3), None, np.bool_, np.int64, density=0.6)
    y, z = _dense(rng, (4, 2), np.bool_), _dense(rng, (3, 2), np.bool_)
    assert_dense(st.addmm(y, a2.cuda(), z), st.addmm(y.get(), a2, z.get()))


# -- dense @ sparse: (S.mT @ X.mT).mT on the device -----------------------------------------------------
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc", "coo"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.float16])
def test_dense_sparse(backend, rng, layout, dtype):
    s = operand(rng, layout, (3, 4), (2, 2), dtype, np.int32, density=0.5)
    M = s.shape[0]
    for xshape in ((5, M), (M,)):
        x = _dense(rng, xshape, dtype)
        assert_dense(st.matmul(x, s.cuda()), st.matmul(x.get(), s))
    x = _dense(rng, (5, M), dtype)
    inp = _dense(rng, (s.shape[1],), dtype)
    assert_dense(st.addmm(inp, x, s.cuda(), alpha=2, beta=-1), st.addmm(inp.get(), x.get(), s, alpha=2, beta=-1))


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
def test_bmm_dense_sparse(backend, rng, layout):
    s = operand(rng, layout, (3, 4), (2, 2), np.float64, np.int64, (2,), density=0.5)
    x = _dense(rng, (2, 5, s.shape[1]), np.float64)
    assert_dense(st.bmm(x, s.cuda()), st.bmm(x.get(), s))


def test_dense_sparse_vectors_broadcasts_and_batched_coo(backend, rng):
    """dense @ a sparse vector, a shared sparse matrix under a batch of dense ones, and a batched
    coo on the right: the CPU's results, on the device."""
    vec = st.from_dense(np.array([1.0, 0.0, 2.0]), "coo")
    x = rng.standard_normal((2, 3))
    assert_dense(st.matmul(DeviceArray.from_host(x), vec.cuda()), st.matmul(x, vec))
    y = rng.standard_normal((2, 5, 4))
    s = st.from_dense(rng.standard_normal((4, 3)) * (rng.random((4, 3)) < 0.5), "csr")
    assert_dense(st.matmul(DeviceArray.from_host(y), s.cuda()), st.matmul(y, s))
    c = st.from_dense(rng.standard_normal((2, 4, 3)) * (rng.random((2, 4, 3)) < 0.5), "coo")
    assert_dense(st.bmm(DeviceArray.from_host(y), c.cuda()), st.bmm(y, c))
