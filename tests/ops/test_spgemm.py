"""Sparse @ sparse (spgemm) and SDDMM (sampled_addmm): oracles are dense NumPy products, SciPy for
large random matrices and PyTorch 2.13 where it has the product (csr/csc, coo; float and complex)."""

from __future__ import annotations

import functools
import platform
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import sparsetensor as st
from conftest import (HAVE_TORCH, INDEX_DTYPES, assert_matches_scipy_csr, assert_unchanged, nonzero_values,
                      random_dense, requires_torch, snapshot)
from sparsetensor.ops.spgemm import sampled_addmm, spgemm
from sparsetensor import _lib

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")  # torch's beta notes

if HAVE_TORCH:
    import torch

SPGEMM_DTYPES = [np.dtype(d) for d in ("float32", "float64", "complex64", "complex128", "int8", "int32", "int64",
                                       "uint8", "bool", "float16")]
LAYOUT_PAIRS = [("csr", "csr"), ("csr", "csc"), ("csc", "csr"), ("csc", "csc"), ("coo", "coo"), ("coo", "csr"),
                ("csr", "coo"), ("bsr", "bsr"), ("bsc", "bsc"), ("bsr", "bsc"), ("bsc", "bsr")]
BLOCKED = ("bsr", "bsc")


def _sparse(a, layout, index_dtype=np.int64, blocksize=None, batch_dim=0):
    if layout == "coo":
        return st.from_dense(a, "coo", index_dtype=index_dtype)
    return st.from_dense(a, layout, blocksize=blocksize if layout in BLOCKED else None, batch_dim=batch_dim,
                         index_dtype=index_dtype)


def _reference(a, b):
    """Dense a @ b in the semantics of spgemm: integers wrap, bool is or/and, float16 via float32."""
    dt = a.dtype
    if dt == np.bool_:
        return (a.astype(np.int64) @ b.astype(np.int64)) != 0
    if dt.kind in "iu":
        return (a.astype(np.int64) @ b.astype(np.int64)).astype(dt)
    if dt == np.float16:
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    return a @ b


def _structural(a, b, m):
    """Per batch, the number of positions where some a[i, k] * b[k, j] is formed."""
    s = (a != 0).astype(np.int64) @ (b != 0).astype(np.int64)
    return np.count_nonzero(s.reshape(s.shape[:m] + (int(np.prod(s.shape[m:])),)), axis=-1)


def _check_product(c, a, b, m=0, known=None):
    """c against the dense product of a and b; ``known``: their (_reference, _structural), when the
    caller has them already (the oracle's integer products have no BLAS and are slow)."""
    c.check_invariants()
    ref, nnz = known or (_reference(a, b), _structural(a, b, m))
    got = c.to_dense()
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if ref.dtype == np.float16:
        np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=1e-2)
    elif ref.dtype.kind in "fc":
        np.testing.assert_allclose(got, ref, rtol=1e-5 if ref.dtype in (np.float32, np.complex64) else 1e-12,
                                   atol=1e-4)
    else:
        np.testing.assert_array_equal(got, ref)
    if isinstance(c, st.COOTensor):
        assert c.is_coalesced() and c.nnz == int(nnz.sum())
    elif not c.layout.blocked:
        assert c.is_coalesced() and (nnz == c.nnz).all()


# -- every layout pair x dtype x index dtype --------------------------------------------------------
@pytest.mark.parametrize("la,lb", LAYOUT_PAIRS)
@pytest.mark.parametrize("dtype", SPGEMM_DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_layouts_dtypes(rng, la, lb, dtype, index_dtype):
    bs_a, bs_b = (2, 3), (3, 1)
    a = random_dense(rng, blocks=(3, 4), blocksize=bs_a if la in BLOCKED else (1, 1), dtype=dtype, nnz=5)
    b_blocks = (a.shape[1] // 3, 5) if lb in BLOCKED else (a.shape[1], 5)
    b = random_dense(rng, blocks=b_blocks, blocksize=bs_b if lb in BLOCKED else (1, 1), dtype=dtype, nnz=7)
    A, B = _sparse(a, la, index_dtype, bs_a), _sparse(b, lb, index_dtype, bs_b)
    before = (snapshot(A), snapshot(B))
    C = spgemm(A, B)
    _check_product(C, a, b)
    assert_unchanged(A, before[0])
    assert_unchanged(B, before[1])
    assert C.index_dtype == index_dtype and C.dtype == dtype
    expected = {("coo", "coo"): "coo", ("csc", "csc"): "csc", ("bsc", "bsc"): "bsc", ("bsr", "bsr"): "bsr",
                ("bsr", "bsc"): "bsr", ("bsc", "bsr"): "bsr"}.get((la, lb), "csr")
    assert C.layout.name == expected
    if C.layout.blocked:
        assert C.blocksize == (2, 1)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
@pytest.mark.parametrize("batch", [(2,), (2, 3), (0,)])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_])
def test_batched(rng, layout, batch, dtype):
    """Batches with one pattern (so that every batch of the product has the same nnz)."""
    bs = (2, 2)
    base_a = random_dense(rng, blocks=(3, 2), blocksize=bs if layout in BLOCKED else (1, 1), dtype=np.float64, nnz=3)
    base_b = random_dense(rng, blocks=(2, 3), blocksize=bs if layout in BLOCKED else (1, 1), dtype=np.float64, nnz=3)
    a = np.where(base_a != 0, nonzero_values(rng, batch + base_a.shape, dtype), np.zeros((), dtype))
    b = np.where(base_b != 0, nonzero_values(rng, batch + base_b.shape, dtype), np.zeros((), dtype))
    A, B = _sparse(a, layout, blocksize=bs, batch_dim=len(batch)), _sparse(b, layout, blocksize=bs,
                                                                            batch_dim=len(batch))
    C = spgemm(A, B)
    assert C.batch_dim == len(batch) and C.shape == batch + (a.shape[-2], b.shape[-1])
    _check_product(C, a, b, len(batch))


def test_batched_products_with_different_nnz_are_refused(rng):
    a = np.zeros((2, 2, 2))
    a[0, 0, 0] = a[1, 0, 1] = 1
    b = np.zeros((2, 2, 2))
    b[0, 0, 0] = b[1, 0, 1] = 1  # batch 0: one product; batch 1: none
    A = st.from_dense(a, "csr", batch_dim=1)
    B = st.from_dense(b, "csr", batch_dim=1)
    with pytest.raises(ValueError, match="same nnz"):
        spgemm(A, B)


@settings(max_examples=60, deadline=None)
@given(seed=hs.integers(0, 2**32 - 1), m=hs.integers(0, 7), k=hs.integers(0, 7), n=hs.integers(0, 7),
       la=hs.sampled_from(["csr", "csc", "coo"]), lb=hs.sampled_from(["csr", "csc", "coo"]),
       dtype=hs.sampled_from(SPGEMM_DTYPES), index_dtype=hs.sampled_from(INDEX_DTYPES))
def test_property_random_products(seed, m, k, n, la, lb, dtype, index_dtype):
    rng = np.random.default_rng(seed)
    a = random_dense(rng, blocks=(m, k), dtype=dtype)
    b = random_dense(rng, blocks=(k, n), dtype=dtype)
    C = spgemm(_sparse(a, la, index_dtype), _sparse(b, lb, index_dtype))
    _check_product(C, a, b)


# -- structure -------------------------------------------------------------------------------------
def test_cancellation_keeps_explicit_zeros():
    a = st.sparse_csr_tensor([0, 2], [0, 1], [1.0, 1.0], size=(1, 2))
    b = st.sparse_csr_tensor([0, 1, 2], [0, 0], [1.0, -1.0], size=(2, 1))
    c = spgemm(a, b)
    assert c.nnz == 1 and c.values()[0] == 0.0
    c.check_invariants()


@pytest.mark.parametrize("shape_a,shape_b", [((0, 3), (3, 4)), ((3, 0), (0, 4)), ((3, 4), (4, 0)), ((3, 4), (4, 5))])
@pytest.mark.parametrize("layout", ["csr", "csc", "coo"])
def test_empty(shape_a, shape_b, layout):
    A = _sparse(np.zeros(shape_a), layout)
    B = _sparse(np.zeros(shape_b), layout)
    C = spgemm(A, B)
    C.check_invariants()
    assert C.shape == (shape_a[0], shape_b[1]) and C.nnz == 0
    np.testing.assert_array_equal(C.to_dense(), np.zeros(C.shape))


def test_one_side_empty(rng):
    a = random_dense(rng, blocks=(4, 5), nnz=8)
    for A, B, ref in ((_sparse(a, "csr"), _sparse(np.zeros((5, 3)), "csr"), np.zeros((4, 3))),
                      (_sparse(np.zeros((3, 4)), "csr"), _sparse(a, "csr"), np.zeros((3, 5)))):
        C = spgemm(A, B)
        C.check_invariants()
        assert C.nnz == 0
        np.testing.assert_array_equal(C.to_dense(), ref)


def test_mixed_index_dtypes_give_int64(rng):
    a = random_dense(rng, blocks=(4, 5), nnz=8)
    b = random_dense(rng, blocks=(5, 3), nnz=6)
    C = spgemm(_sparse(a, "csr", np.int32), _sparse(b, "csr", np.int64))
    assert C.index_dtype == np.int64
    _check_product(C, a, b)


@pytest.mark.parametrize("da,db", [(np.int8, np.float64), (np.float32, np.float64), (np.bool_, np.int32),
                                   (np.uint8, np.int8), (np.float32, np.complex128)], ids=str)
@pytest.mark.parametrize("layout", ["csr", "csc", "coo", "bsr"])
def test_mixed_value_dtypes_promote(rng, layout, da, db):
    """Operands of two value dtypes give NumPy's promotion, as sparse + sparse, sparse @ dense and
    SciPy's products do (it raised TypeError); through @, np.matmul and spgemm alike."""
    kw = {"blocksize": (2, 2)} if layout == "bsr" else {}
    a = (rng.standard_normal((4, 6)) * 3 * (rng.random((4, 6)) < 0.5)).astype(da)
    b = (rng.standard_normal((6, 4)) * 3 * (rng.random((6, 4)) < 0.5)).astype(db)
    want = a.astype(np.result_type(da, db)) @ b.astype(np.result_type(da, db))
    x, y = st.from_dense(a, layout, **kw), st.from_dense(b, layout, **kw)
    for c in (spgemm(x, y), x @ y, np.matmul(x, y)):
        assert c.dtype == want.dtype and c.layout is x.layout
        np.testing.assert_allclose(c.to_dense(), want, rtol=1e-6)


@pytest.mark.parametrize("la,lb", [("bsr", "csr"), ("csr", "bsr"), ("bsc", "csc"), ("bsr", "csc"), ("coo", "bsc"),
                                   ("bsc", "bsr")])
def test_blocked_with_unblocked_operands(rng, la, lb):
    """A blocked operand next to an unblocked one is unblocked first (bsr -> csr, bsc -> csc) where
    it raised NotImplementedError (Dask chunks whose edges cut blocks are such a mix)."""
    a = rng.standard_normal((4, 6)) * (rng.random((4, 6)) < 0.5)
    b = rng.standard_normal((6, 4)) * (rng.random((6, 4)) < 0.5)
    kw = {"blocksize": (2, 2)}
    x = st.from_dense(a, la, **(kw if la[0] == "b" else {}))
    y = st.from_dense(b, lb, **(kw if lb[0] == "b" else {}))
    c = spgemm(x, y)
    np.testing.assert_allclose(c.to_dense(), a @ b, rtol=1e-12, atol=1e-12)
    c.check_invariants()
    np.testing.assert_allclose((x @ y).to_dense(), a @ b, rtol=1e-12, atol=1e-12)


def test_csc_product_is_a_transpose_of_views(rng):
    a = random_dense(rng, blocks=(6, 5), nnz=12)
    b = random_dense(rng, blocks=(5, 7), nnz=12)
    C = spgemm(_sparse(a, "csc"), _sparse(b, "csc"))
    assert C.layout is st.sparse_csc
    _check_product(C, a, b)


def test_unchecked_input(rng):
    # unsorted but valid column indices are repaired; out-of-range ones raise InvariantError
    with st.check_invariants(False):
        a = st.sparse_csr_tensor([0, 2, 3], [1, 0, 1], [2.0, 3.0, 4.0], size=(2, 2))
        bad = st.sparse_csr_tensor([0, 1, 2], [0, 5], [1.0, 1.0], size=(2, 2))
    dense_a = np.array([[3.0, 2.0], [0.0, 4.0]])
    C = spgemm(a, a)
    C.check_invariants()
    np.testing.assert_allclose(C.to_dense(), dense_a @ dense_a)
    with pytest.raises(st.InvariantError) as e:
        spgemm(a, bad)
    assert e.value.invariant == "5.5"


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_large_matches_scipy(rng, index_dtype, threads):
    sp = pytest.importorskip("scipy.sparse")
    n, k = 3000, 6
    A = sp.random_array((n, n), density=k / n, format="csr", dtype=np.float64, rng=rng)
    B = sp.random_array((n, 2000), density=k / 2000, format="csr", dtype=np.float64, rng=rng)
    A.indices = A.indices.astype(index_dtype)
    A.indptr = A.indptr.astype(index_dtype)
    B.indices = B.indices.astype(index_dtype)
    B.indptr = B.indptr.astype(index_dtype)
    tA = st.sparse_csr_tensor(A.indptr, A.indices, A.data, size=A.shape)
    tB = st.sparse_csr_tensor(B.indptr, B.indices, B.data, size=B.shape)
    C = spgemm(tA, tB, threads=threads)
    assert_matches_scipy_csr(C, (A @ B).tocsr())


def test_wide_rows_and_crowded_buckets(rng):
    """Rows whose columns cluster (one bucket of the row sort gets most of them) and long rows."""
    n = 5000
    a = np.zeros((3, n))
    a[0, :50] = 1.0
    a[1, ::7] = 2.0
    a[2, [0, 1, n - 1]] = 3.0
    b = np.zeros((n, n))
    b[np.arange(n), np.arange(n)] = 1.0
    b[np.arange(n), (np.arange(n) * 37) % n] += 0.5
    b[:40, n - 100:] = 0.25  # columns crowding at the end of the range
    C = spgemm(st.from_dense(a, "csr"), st.from_dense(b, "csr"))
    _check_product(C, a, b)


def test_threads_agree(rng):
    a = random_dense(rng, blocks=(300, 200), nnz=3000)
    b = random_dense(rng, blocks=(200, 250), nnz=3000)
    A, B = _sparse(a, "csr"), _sparse(b, "csr")
    c1, c2 = spgemm(A, B, threads=1), spgemm(A, B, threads=2)
    for x, y in zip(snapshot(c1), snapshot(c2)):
        np.testing.assert_array_equal(x, y)


# -- errors ---------------------------------------------------------------------------------------------
def test_errors(rng):
    a = _sparse(random_dense(rng, blocks=(3, 4), nnz=4), "csr")
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(3, 4\)"):
        spgemm(a, a)
    assert spgemm(a, a.mT.astype(np.float32)).dtype == np.float64  # promoted (test_mixed_value_dtypes_promote)
    with pytest.raises(TypeError, match="two sparse tensors"):
        spgemm(a, np.ones((4, 2)))
    hybrid = st.from_dense(np.ones((4, 2, 2)), "csr", dense_dim=1)
    with pytest.raises(NotImplementedError, match="hybrid"):
        spgemm(a, hybrid)
    bsr = st.from_dense(np.ones((4, 4)), "bsr", blocksize=(2, 2))
    assert spgemm(a, bsr).layout is a.layout  # bsr unblocked first (test_blocked_with_unblocked_operands)
    with pytest.raises(ValueError, match="block"):
        spgemm(st.from_dense(np.ones((4, 4)), "bsr", blocksize=(2, 2)),
               st.from_dense(np.ones((4, 4)), "bsr", blocksize=(4, 1)))
    coo3 = st.from_dense(np.ones((2, 3, 4)), "coo")
    with pytest.raises(NotImplementedError, match="sparse_dim"):
        spgemm(coo3, coo3)
    batched = st.from_dense(np.ones((2, 4, 3)), "csr", batch_dim=1)
    with pytest.raises(ValueError, match="batch"):
        spgemm(a, batched)


# -- PyTorch -------------------------------------------------------------------------------------------
def _to_torch(t):
    if isinstance(t, st.COOTensor):
        return torch.sparse_coo_tensor(torch.from_numpy(t.indices().astype(np.int64)), torch.from_numpy(t.values()),
                                       t.shape).coalesce()
    ctor = torch.sparse_csr_tensor if t.layout is st.sparse_csr else torch.sparse_csc_tensor
    return ctor(torch.from_numpy(t.compressed_indices()), torch.from_numpy(t.plain_indices()),
                torch.from_numpy(t.values()), t.shape)


@requires_torch
@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("coo", "coo"), ("csr", "csc"), ("csc", "csr")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_matches_torch(rng, la, lb, dtype):
    a = random_dense(rng, blocks=(20, 15), dtype=dtype, nnz=60)
    b = random_dense(rng, blocks=(15, 25), dtype=dtype, nnz=60)
    b[:, 3] = 0
    b[2, 3], b[4, 3] = 1, -1
    a[5, 2], a[5, 4] = 1, 1  # (5, 3) cancels to an explicit zero
    A, B = _sparse(a, la), _sparse(b, lb)
    C = spgemm(A, B)
    ref = _to_torch(A) @ _to_torch(B)
    assert C.layout.name == {torch.sparse_csr: "csr", torch.sparse_coo: "coo"}[ref.layout]
    if ref.layout is torch.sparse_coo:
        np.testing.assert_array_equal(C.indices(), ref.indices().numpy())
        ref_values = ref.values().numpy()
    else:
        # the same entries (explicit zeros included) per row; PyTorch's rows are not sorted (5.6)
        crow = ref.crow_indices().numpy()
        np.testing.assert_array_equal(C.crow_indices(), crow)
        rows = np.repeat(np.arange(crow.size - 1), np.diff(crow))
        order = np.lexsort((ref.col_indices().numpy(), rows))
        np.testing.assert_array_equal(C.col_indices(), ref.col_indices().numpy()[order])
        ref_values = ref.values().numpy()[order]
    np.testing.assert_allclose(C.values(), ref_values, rtol=1e-5, atol=1e-5)


# -- SDDMM --------------------------------------------------------------------------------------------------
def _sddmm_reference(inp, m1, m2, beta, alpha):
    dt = inp.dtype
    if dt == np.float16:
        prod = (m1.astype(np.float32) @ m2.astype(np.float32))
        out = beta * inp.astype(np.float32) + alpha * prod
        return np.where(inp != 0, out, 0).astype(np.float16)
    if dt.kind in "iu":
        prod = m1.astype(np.int64) @ m2.astype(np.int64)
        return np.where(inp != 0, beta * inp.astype(np.int64) + alpha * prod, 0).astype(dt)
    return np.where(inp != 0, beta * inp + alpha * (m1 @ m2), 0).astype(dt)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128, np.int32, np.int8,
                                   np.float16])
@pytest.mark.parametrize("layout", ["csr", "csc"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("K", [0, 1, 5, 37])
def test_sampled_addmm(rng, dtype, layout, index_dtype, K):
    inp = random_dense(rng, blocks=(6, 9), dtype=dtype, nnz=20)
    m1 = nonzero_values(rng, (6, K), dtype)
    m2 = nonzero_values(rng, (K, 9), dtype)
    beta, alpha = (2, 3) if np.dtype(dtype).kind in "iu" else (0.5, -1.5)
    t = st.from_dense(inp, layout, index_dtype=index_dtype)
    before = snapshot(t)
    out = sampled_addmm(t, m1, m2, beta=beta, alpha=alpha)
    assert_unchanged(t, before)
    out.check_invariants()
    assert out.layout.name == layout and out.dtype == dtype and out.nnz == t.nnz
    np.testing.assert_array_equal(out.compressed_indices(), t.compressed_indices())
    ref = _sddmm_reference(inp, m1, m2, beta, alpha)
    got = out.to_dense()
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(got, ref)
    else:
        tol = 1e-2 if dtype == np.float16 else 1e-4
        np.testing.assert_allclose(got.astype(np.complex128), ref.astype(np.complex128), rtol=tol, atol=tol)


@pytest.mark.parametrize("in_batch,b1,b2", [((2,), (2,), (2,)), ((), (3,), (3,)), ((2, 1), (1, 3), ()),
                                            ((0,), (0,), (0,))])
def test_sampled_addmm_batches(rng, in_batch, b1, b2):
    base = random_dense(rng, blocks=(4, 5), nnz=7)
    inp = np.where(base != 0, nonzero_values(rng, in_batch + base.shape, np.float64), 0.0)
    m1 = rng.standard_normal(b1 + (4, 3))
    m2 = rng.standard_normal(b2 + (3, 5))
    t = st.from_dense(inp, "csr", batch_dim=len(in_batch))
    out = sampled_addmm(t, m1, m2, beta=0.25, alpha=2.0)
    out.check_invariants()
    batch = np.broadcast_shapes(in_batch, b1, b2)
    assert out.shape == batch + (4, 5)
    ref = np.where(base != 0, 0.25 * inp + 2.0 * (m1 @ m2), 0.0)
    np.testing.assert_allclose(out.to_dense(), np.broadcast_to(ref, batch + (4, 5)), rtol=1e-12, atol=1e-12)


def test_sampled_addmm_threads_agree(rng):
    inp = random_dense(rng, blocks=(400, 300), nnz=6000, dtype=np.float32)
    m1 = rng.standard_normal((400, 70)).astype(np.float32)
    m2 = rng.standard_normal((70, 300)).astype(np.float32)
    t = st.from_dense(inp, "csr")
    o1, o2 = sampled_addmm(t, m1, m2, threads=1), sampled_addmm(t, m1, m2, threads=2)
    np.testing.assert_array_equal(o1.values(), o2.values())
    np.testing.assert_allclose(o1.to_dense(), np.where(inp != 0, inp + m1 @ m2, 0), rtol=1e-4, atol=1e-4)


def test_sampled_addmm_errors(rng):
    t = st.from_dense(random_dense(rng, blocks=(3, 4), nnz=5), "csr")
    m1, m2 = np.ones((3, 2)), np.ones((2, 4))
    with pytest.raises(NotImplementedError, match="coo"):
        sampled_addmm(t.to_sparse_coo(), m1, m2)
    with pytest.raises(NotImplementedError, match="bsr"):
        sampled_addmm(st.from_dense(np.ones((4, 4)), "bsr", blocksize=(2, 2)), np.ones((4, 2)), np.ones((2, 4)))
    with pytest.raises(NotImplementedError, match="hybrid"):
        sampled_addmm(st.from_dense(np.ones((3, 4, 2)), "csr", dense_dim=1), m1, m2)
    with pytest.raises(TypeError, match="dtype"):
        sampled_addmm(t, m1.astype(np.float32), m2)
    with pytest.raises(ValueError, match="cannot be multiplied"):
        sampled_addmm(t, m1, np.ones((3, 4)))
    with pytest.raises(ValueError, match="shape"):
        sampled_addmm(t, np.ones((2, 2)), np.ones((2, 4)))
    with pytest.raises(TypeError, match="bool"):
        sampled_addmm(t.astype(bool), m1.astype(bool), m2.astype(bool))
    ti = t.astype(np.int32)
    with pytest.raises(TypeError, match="floating point"):
        sampled_addmm(ti, m1.astype(np.int32), m2.astype(np.int32), alpha=0.5)
    with pytest.raises(TypeError, match="complex"):
        sampled_addmm(t, m1, m2, beta=1j)
    with pytest.raises(ValueError, match="broadcast"):
        sampled_addmm(st.from_dense(np.ones((2, 3, 4)), "csr", batch_dim=1), np.ones((3, 3, 2)), np.ones((2, 4)))


@requires_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_sampled_addmm_matches_torch(rng, dtype):
    inp = random_dense(rng, blocks=(12, 10), dtype=dtype, nnz=30)
    inp[0, 0] = np.nan  # beta * NaN stays NaN, also for beta == 0, as in PyTorch
    m1 = nonzero_values(rng, (12, 6), dtype)
    m2 = nonzero_values(rng, (6, 10), dtype)
    t = st.from_dense(inp, "csr")
    for beta, alpha in ((1.0, 1.0), (0.0, 2.0), (0.5, -1.0)):
        out = sampled_addmm(t, m1, m2, beta=beta, alpha=alpha)
        ref = torch.sparse.sampled_addmm(_to_torch(t), torch.from_numpy(m1), torch.from_numpy(m2), beta=beta,
                                         alpha=alpha)
        np.testing.assert_array_equal(out.col_indices(), ref.col_indices().numpy())
        np.testing.assert_allclose(out.values(), ref.values().numpy(), rtol=1e-5, atol=1e-5)


def test_docstring_examples():
    import doctest

    import sparsetensor.ops.spgemm as mod

    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
    for fn in (spgemm, sampled_addmm):
        assert "Examples" in fn.__doc__ and ">>>" in fn.__doc__


def test_rows_claimed_sorted_but_not_never_break_memory(rng):
    """A tensor whose canonical flag lies (unsorted rows, duplicates) gives garbage, never a crash."""
    for _ in range(50):
        lens = rng.integers(0, 6, size=10)
        crow = np.concatenate([[0], np.cumsum(lens)])
        nn = int(crow[-1])
        A = st.CompressedTensor(crow, rng.integers(0, 10, size=nn), rng.standard_normal(nn), (10, 10),
                                st.sparse_csr, canonical=True)
        B = st.CompressedTensor(crow, rng.integers(0, 10, size=nn), rng.standard_normal(nn), (10, 10),
                                st.sparse_csr, canonical=True)
        C = spgemm(A, B)
        assert C.shape == (10, 10)


# -- row bins, the fused pass and its parts ----------------------------------------------------------------
def _binned_dense(rng, dtype, n=300, ncols=9000):
    """A (n x n) and B (n x ncols) whose product rows fall in every bin of the csr kernels: empty
    rows, short rows (sorted products), rows of more products than ESC_MAX and rows of more products
    than output columns (both the slot path), rows with many repeated columns."""
    a = np.zeros((n, n))
    b = np.zeros((n, ncols))
    for i in range(n):
        a[i, rng.choice(n, size=rng.integers(0, 8), replace=False)] = rng.integers(1, 4)
        b[i, rng.choice(ncols, size=rng.integers(0, 12), replace=False)] = rng.integers(1, 4)
    b[:120, :] = 0
    b[np.arange(120)[:, None], rng.choice(ncols, size=(120, 100))] = 2.0  # long B rows
    a[5, :120] = 1.0        # 120 long rows: about 12000 products > ESC_MAX
    a[6, :60] = 1.0         # about 6000 products, sorted
    a[7, :] = 0
    a[8, 200:210] = 3.0     # short
    b[200:210, :5] = 1.0    # ... with repeated columns
    if dtype == np.bool_:
        return a != 0, b != 0
    if dtype.kind == "c":
        return (a * (1 - 2j)).astype(dtype), (b * (2 + 1j)).astype(dtype)
    return a.astype(dtype), b.astype(dtype)


def _check_product_blas(c, a, b):
    """_check_product with float64/complex128 BLAS products for the reference (exact here: small
    integer values), for operands too large for integer matmul."""
    c.check_invariants()
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    ref = a.astype(wide) @ b.astype(wide)
    if a.dtype == np.bool_:
        ref = ref != 0
    elif a.dtype.kind in "iu":
        ref = ref.real.astype(np.int64).astype(a.dtype)
    else:
        ref = ref.astype(a.dtype)
    np.testing.assert_array_equal(c.to_dense(), ref)
    assert c.nnz == int(np.count_nonzero((a != 0).astype(np.float64) @ (b != 0).astype(np.float64)))


@pytest.mark.parametrize("dtype,index_dtype", [(np.dtype(d), np.dtype(i)) for d, i in (
    ("float32", "int32"), ("float64", "int64"), ("complex128", "int32"), ("int8", "int64"), ("bool", "int32"),
    ("float16", "int32"))])
def test_row_bins(rng, dtype, index_dtype):
    a, b = _binned_dense(rng, dtype)
    A, B = _sparse(a, "csr", index_dtype), _sparse(b, "csr", index_dtype)
    for threads in (1, 3):
        C = spgemm(A, B, threads=threads)
        assert C.index_dtype == index_dtype
        _check_product_blas(C, a, b)


def test_slot_rows_when_products_exceed_columns(rng):
    a = random_dense(rng, blocks=(40, 30), nnz=900)   # rows of about 30 entries
    b = random_dense(rng, blocks=(30, 12), nnz=300)   # ... times rows of about 10: more products than columns
    _check_product(spgemm(_sparse(a, "csr"), _sparse(b, "csr")), a, b)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.bool_)])
def test_fused_and_two_pass_agree(rng, monkeypatch, threads, dtype):
    """The fused pass (room for every product) and the symbolic + numeric passes (taken when the room
    would pass _FUSED_BYTES) give the same arrays, bit for bit (the same sums in the same order)."""
    import sparsetensor._backend.cpu._spgemm as mod  # the CPU SpGEMM kernels (the backend seam)

    a, b = _binned_dense(rng, dtype, n=300, ncols=4000)
    A, B = _sparse(a, "csr"), _sparse(b, "csr")
    fused = spgemm(A, B, threads=threads)
    monkeypatch.setattr(mod, "_FUSED_BYTES", 0)
    two_pass = spgemm(A, B, threads=threads)
    for x, y in zip(snapshot(fused), snapshot(two_pass)):
        np.testing.assert_array_equal(x, y)
    _check_product_blas(two_pass, a, b)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_fused_batches_and_parts(rng, threads):
    """Batched csr through the fused pass: parts of rows span batches and are moved together."""
    a = np.stack([random_dense(rng, blocks=(200, 150), nnz=900) for _ in range(3)])
    b = np.stack([random_dense(rng, blocks=(150, 180), nnz=900) for _ in range(3)])
    pattern = (a[0] != 0).astype(np.int64) @ (b[0] != 0).astype(np.int64) != 0
    a[1:], b[1:] = a[0] * 2, b[0] * 3  # one pattern: every batch has one nnz
    C = spgemm(_sparse(a, "csr", batch_dim=1), _sparse(b, "csr", batch_dim=1), threads=threads)
    assert C.nnz == int(pattern.sum())
    _check_product(C, a, b, m=1)
    one = spgemm(_sparse(a, "csr", batch_dim=1), _sparse(b, "csr", batch_dim=1), threads=1)
    for x, y in zip(snapshot(C), snapshot(one)):
        np.testing.assert_array_equal(x, y)


def test_large_threads_parts_match_scipy(rng):
    """Enough products for several parts per thread (the fused pass splits above 65536 products)."""
    sp = pytest.importorskip("scipy.sparse")
    A = sp.random_array((20000, 20000), density=6 / 20000, format="csr", dtype=np.float32, rng=rng)
    tA = st.sparse_csr_tensor(A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data, size=A.shape)
    ref = (A @ A).tocsr()
    # SciPy's compiled loop fuses multiply-adds where FMA is in the baseline ISA (aarch64: 104 of
    # 718,145 float32 sums 1 ulp apart, seen under qemu-aarch64); its x86-64 build does not, and
    # there the sums agree to the bit
    rtol = 1e-12 if platform.machine() == "x86_64" else float(np.finfo(np.float32).eps)
    for threads in (1, 2, 3):
        assert_matches_scipy_csr(spgemm(tA, tA, threads=threads), ref, rtol=rtol)


# -- the csr accumulators: each one forced, against the others and the oracles -------------------------
ACCUMULATORS = ["auto", "merge", "dense", "dense-flags", "dense-bits", "esc", "esc-counting", "esc-in-place", "slots"]
# settings under which a forced accumulator takes every row it can (merge: rows of at most 64 entries
# of A; esc: rows of at most as many products as columns; dense and slots: every row here; the
# dense accumulator marking its columns with flag bytes, or with bits, in every row; esc sorting every
# row's products by the counting sort, or every row's in place)
_FORCED = {"auto": {}, "merge": dict(merge_max=64), "esc": dict(esc_max=10**9), "dense": {}, "slots": {},
           "dense-flags": dict(accumulator="dense", flag_span=10**9),
           "dense-bits": dict(accumulator="dense", flag_span=0),
           "esc-counting": dict(accumulator="esc", esc_max=10**9, esc_small=0),
           "esc-in-place": dict(accumulator="esc", esc_max=10**9, esc_small=10**9, esc_small_span=10**9)}


@pytest.fixture
def accumulator(request):
    """Force one csr accumulator (sparsetensor._lib._spgemm._tune) for the test, then restore."""
    from sparsetensor._lib import _spgemm

    old = _spgemm._tune(**{"accumulator": request.param, **_FORCED[request.param]})
    yield request.param
    _spgemm._tune(**old)


def _rough_dense(rng, dtype, n=200, ncols=3000):
    """_binned_dense with values whose sums round (so that only one summation order gives the bits),
    banded rows (a narrow span: dense) and rows of one and two entries (merge)."""
    a, b = _binned_dense(rng, np.dtype(np.float64), n=n, ncols=ncols)
    for i in range(20, 40):  # banded: A rows near the diagonal, B rows a band around column 3 i
        a[i, :] = 0
        a[i, i - 3:i + 4] = 1.0
        b[i, :] = 0
        b[i, 3 * i - 10:3 * i + 11] = 1.0
    a[50, :], a[51, :] = 0, 0
    a[50, 130] = 1.0                  # one B row: a scaled copy
    a[51, [130, 131]] = 1.0           # two B rows: a merge
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        a = np.where(a != 0, rng.standard_normal(a.shape), 0).astype(dtype)
        b = np.where(b != 0, rng.standard_normal(b.shape), 0).astype(dtype)
    elif dtype.kind == "c":
        a = np.where(a != 0, rng.standard_normal(a.shape) + 1j * rng.standard_normal(a.shape), 0).astype(dtype)
        b = np.where(b != 0, rng.standard_normal(b.shape) - 1j * rng.standard_normal(b.shape), 0).astype(dtype)
    elif dtype == np.bool_:
        a, b = a != 0, b != 0
    else:
        a, b = a.astype(dtype), b.astype(dtype)
    return a, b


@functools.lru_cache(maxsize=None)
def _rough_case(dtype):
    """_rough_dense operands of one dtype, with their product and nnz, shared by every accumulator."""
    a, b = _rough_dense(np.random.default_rng(zlib.crc32(np.dtype(dtype).name.encode())), dtype)
    out = (a, b, _reference(a, b), _structural(a, b, 0))
    for x in out[:3]:
        x.flags.writeable = False
    return out[0], out[1], out[2:]


@pytest.mark.parametrize("accumulator", ACCUMULATORS, indirect=True)
@pytest.mark.parametrize("dtype,index_dtype", [(np.dtype(d), np.dtype(i)) for d, i in (
    ("float64", "int32"), ("float32", "int64"), ("complex128", "int32"), ("complex64", "int64"), ("int32", "int32"),
    ("int8", "int64"), ("uint8", "int32"), ("bool", "int64"), ("float16", "int32"))])
@pytest.mark.parametrize("threads", [1, 2])
def test_accumulators_agree_bit_for_bit(accumulator, dtype, index_dtype, threads):
    """Every accumulator gives the arrays of the slot array (the same sums in the same order), and the
    product of the oracle; in the fused pass and in the two passes."""
    import sparsetensor._backend.cpu._spgemm as mod  # the CPU SpGEMM kernels (the backend seam)
    from sparsetensor._lib import _spgemm

    a, b, known = _rough_case(dtype)
    A, B = _sparse(a, "csr", index_dtype), _sparse(b, "csr", index_dtype)
    got = spgemm(A, B, threads=threads)
    _check_product(got, a, b, known=known)
    old = _spgemm._tune(accumulator="slots")
    try:
        ref = spgemm(A, B, threads=threads)
    finally:
        _spgemm._tune(**old)
    _same_bits(got, ref, dtype)
    fused_bytes, mod._FUSED_BYTES = mod._FUSED_BYTES, 0
    try:
        two_pass = spgemm(A, B, threads=threads)
    finally:
        mod._FUSED_BYTES = fused_bytes
    _same_bits(two_pass, ref, dtype)


def _same_bits(got, ref, dtype):
    """The same arrays, bit for bit; complex values at a CPU level with FMA (avx2) may differ in the
    last bit between accumulators (seen in CI, cause not found: not FMA contraction of the
    product alone), so they are compared to rounding there (1e-12 of the largest value) and
    exactly at the baseline level."""
    for x, y in zip(snapshot(got), snapshot(ref)):
        if x.dtype.kind == "c" and _lib.LEVEL != "baseline":
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12 * float(np.abs(y).max(initial=0)))
        else:
            np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))


@pytest.mark.parametrize("accumulator", ACCUMULATORS, indirect=True)
def test_accumulators_keep_zeros_and_signs(accumulator):
    """Cancellation gives explicit zeros; -0.0 products keep their sign where nothing is added."""
    a = st.sparse_csr_tensor([0, 2, 3, 6], [0, 1, 0, 0, 1, 2], [1.0, 1.0, -0.0, 1.0, 1.0, 2.0], size=(3, 3))
    b = st.sparse_csr_tensor([0, 2, 4, 5], [0, 2, 0, 2, 1], [1.0, 3.0, -1.0, -3.0, 0.5], size=(3, 3))
    c = spgemm(a, b)
    c.check_invariants()
    np.testing.assert_array_equal(c.crow_indices(), [0, 2, 4, 7])
    np.testing.assert_array_equal(c.col_indices(), [0, 2, 0, 2, 0, 1, 2])
    np.testing.assert_array_equal(c.values(), [0.0, 0.0, -0.0, -0.0, 0.0, 1.0, 0.0])  # == ignores signs
    assert np.signbit(c.values()).tolist() == [False, False, True, True, False, False, False]


@pytest.mark.parametrize("accumulator", ACCUMULATORS, indirect=True)
@pytest.mark.parametrize("batch", [(2,), (2, 3)])
def test_accumulators_batched(rng, accumulator, batch):
    a0, b0 = _rough_dense(rng, np.float64, n=220, ncols=600)
    a = np.stack([a0 * (k + 1) for k in range(int(np.prod(batch)))]).reshape(batch + a0.shape)
    b = np.stack([b0 * (k + 2) for k in range(int(np.prod(batch)))]).reshape(batch + b0.shape)
    C = spgemm(_sparse(a, "csr", batch_dim=len(batch)), _sparse(b, "csr", batch_dim=len(batch)), threads=2)
    _check_product(C, a, b, len(batch))


@pytest.mark.parametrize("accumulator", ACCUMULATORS, indirect=True)
@pytest.mark.parametrize("points", [5, 27])
def test_accumulators_stencils_match_scipy(accumulator, points):
    sp = pytest.importorskip("scipy.sparse")
    grid = (23, 19) if points == 5 else (7, 6, 5)
    t = st.stencil(grid, points).to(index_dtype=np.int32)
    A = sp.csr_array((t.values(), t.col_indices(), t.crow_indices()), shape=t.shape)
    for threads in (1, 2):
        assert_matches_scipy_csr(spgemm(t, t, threads=threads), (A @ A).tocsr())


@pytest.mark.parametrize("accumulator", ACCUMULATORS, indirect=True)
def test_accumulators_rmat_match_scipy(accumulator):
    sp = pytest.importorskip("scipy.sparse")
    t = st.rmat(9, 8, np.random.default_rng(3)).to(index_dtype=np.int64)
    A = sp.csr_array((t.values(), t.col_indices(), t.crow_indices()), shape=t.shape)
    assert_matches_scipy_csr(spgemm(t, t, threads=2), (A @ A).tocsr())


@pytest.mark.parametrize("accumulator", ACCUMULATORS, indirect=True)
def test_accumulators_unsorted_rows_never_break_memory(rng, accumulator):
    test_rows_claimed_sorted_but_not_never_break_memory(rng)


def test_more_than_2_32_columns_are_refused():
    """Column offsets within a row are kept in 32 bits: wider products raise instead of colliding."""
    a = st.sparse_csr_tensor(np.array([0, 3]), np.array([0, 1, 2]), np.ones(3), size=(1, 3))
    b = st.sparse_csr_tensor(np.array([0, 1, 2, 3]), np.array([0, 2**32 + 1, 1]), np.ones(3), size=(3, 2**33 + 5))
    with pytest.raises(NotImplementedError, match="2\\*\\*32"):
        spgemm(a, b)


def test_tune_rejects_unknown_accumulator():
    from sparsetensor._lib import _spgemm

    with pytest.raises(ValueError, match="accumulator"):
        _spgemm._tune(accumulator="heap")


def test_matmul_passes_threads_to_spgemm(monkeypatch):
    """st.matmul(a, b, threads=k) of two sparse tensors runs SpGEMM with k threads (it ran with
    the default before), as do addmm's sparse @ sparse and spgemm itself."""
    import sparsetensor._backend.cpu._spgemm as kernels

    seen = []
    real = kernels.num_threads

    def record(threads, *args, **kwargs):
        seen.append(threads)
        return real(threads, *args, **kwargs)

    monkeypatch.setattr(kernels, "num_threads", record)
    a = st.stencil((6, 6), index_dtype=np.int32)
    for call in (lambda: st.matmul(a, a, threads=1), lambda: st.spgemm(a, a, threads=1)):
        seen.clear()
        np.testing.assert_array_equal(call().to_dense(), a.to_dense() @ a.to_dense())
        assert seen and set(seen) == {1}


@pytest.mark.parametrize("layout,blocks", [("csr", (1, 1)), ("csc", (1, 1)), ("bsr", (2, 2)), ("bsc", (1, 2))])
def test_spgemm_of_zero_batches(layout, blocks):
    """A batch dim of size 0 whose members still say nnz 16 per batch (arrays of shape (0, 16)): an
    empty batch of products, of the operands' shapes (the fused kernel's values reshape once
    raised 'cannot reshape array of size 0')."""
    r, c = blocks
    n_comp = (4 // r if layout in ("csr", "bsr") else 6 // c) + 1
    t = st.sparse_compressed_tensor(np.zeros((0, n_comp), np.int64), np.zeros((0, 16), np.int64),
                                    np.zeros((0, 16) + ((r, c) if layout[0] == "b" else ()), np.float32), (0, 4, 6),
                                    layout=layout)
    for got, shape in ((t @ t.mT, (0, 4, 4)), (st.spgemm(t.mT, t), (0, 6, 6))):
        assert got.shape == shape and got.nnz == 0 and got.dtype == np.float32
        assert got.to_dense().shape == shape
