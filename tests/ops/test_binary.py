"""Elementwise binary operations (add, sub, mul, div, maximum, minimum, neg): oracles are dense NumPy,
SciPy for large random matrices, and PyTorch 2.13 where it has the operation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import sparsetensor as st
from conftest import HAVE_TORCH, INDEX_DTYPES, LAYOUTS, VALUE_DTYPES, nonzero_values, random_dense, requires_torch
from sparsetensor.ops.binary import add, div, maximum, minimum, mul, neg, sub

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning", "ignore:overflow:RuntimeWarning",
                                        "ignore:invalid value:RuntimeWarning", "ignore:divide by zero:RuntimeWarning")

if HAVE_TORCH:
    import torch

BLOCKED = ("bsr", "bsc")
BLOCKSIZE = (2, 1)
# (batch, dense) dims; batches share one pattern so that unions and intersections have one nnz per batch
DIMS = [((), ()), ((2,), ()), ((), (2,)), ((2, 1), (1, 3))]


# -- building operands ---------------------------------------------------------------------------------------
def _pair(rng, layout, dtype, batch=(), dense=(), blocks=(3, 4), nnz=(5, 6), same_pattern_in_batches=True):
    """Two dense arrays of one shape whose patterns overlap partly."""
    bs = BLOCKSIZE if layout in BLOCKED else (1, 1)
    out = []
    for k in nnz:
        base = random_dense(rng, blocks=blocks, blocksize=bs, dense=dense, dtype=np.float64, nnz=k)
        vals = nonzero_values(rng, batch + base.shape, dtype)
        out.append(np.where(base != 0, vals, np.zeros((), dtype)))
    return out


def _sparse(a, layout, index_dtype=np.int64, batch_dim=0, dense_dim=0, blocksize=BLOCKSIZE):
    if layout == "coo":
        return st.from_dense(a, "coo", dense_dim=dense_dim, index_dtype=index_dtype)
    return st.from_dense(a, layout, blocksize=blocksize if layout in BLOCKED else None, batch_dim=batch_dim,
                         dense_dim=dense_dim, index_dtype=index_dtype)


def _members(t):
    if isinstance(t, st.COOTensor):
        return [t.indices().copy(), t.values().copy()]
    return [t.compressed_indices().copy(), t.plain_indices().copy(), t.values().copy()]


def _assert_unchanged(t, before):
    for x, y in zip(_members(t), before):
        np.testing.assert_array_equal(x, y)


def _pattern(t) -> np.ndarray:
    """A dense bool array: True at every element covered by a specified entry (whole blocks and dense parts)."""
    return t._replace_values(np.ones(t.values().shape, dtype=bool)).to_dense()


def _entries_per_batch(mask: np.ndarray, t) -> np.ndarray:
    """Specified entries per batch (compressed) or in all (coo) of a pattern mask shaped like t."""
    m = t.batch_dim
    lead = mask.shape[:m]
    sparse_end = mask.ndim - t.dense_dim
    per_elem = mask.reshape(mask.shape[:sparse_end] + (-1,)).any(-1) if t.dense_dim else mask
    counts = per_elem.reshape(lead + (-1,)).sum(-1)
    rb, cb = t.blocksize if not isinstance(t, st.COOTensor) else (1, 1)
    return counts // (rb * cb)


def _assert_close(got, ref):
    assert got.dtype == ref.dtype, (got.dtype, ref.dtype)
    assert got.shape == ref.shape
    if ref.dtype == np.float16:
        np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-2)
    elif ref.dtype.kind in "fc":
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, ref)


def _ref_add(a, b, alpha):
    if a.dtype == np.bool_:
        return a | (b & bool(alpha))
    if a.dtype == np.float16:
        return (a.astype(np.float32) + alpha * b.astype(np.float32)).astype(np.float16)
    return (a + np.asarray(alpha).astype(a.dtype) * b).astype(a.dtype)


# -- sparse op sparse ---------------------------------------------------------------------------------------
OPS = {
    "add": (lambda x, y: add(x, y, alpha=1), lambda a, b: _ref_add(a, b, 1), True),
    "add_alpha": (lambda x, y: add(x, y, alpha=3), lambda a, b: _ref_add(a, b, 3), True),
    "sub": (lambda x, y: sub(x, y), lambda a, b: _ref_add(a, b, -1), True),
    "mul": (lambda x, y: mul(x, y), lambda a, b: (a & b) if a.dtype == np.bool_ else a * b, False),
    "maximum": (maximum, np.maximum, True),
    "minimum": (minimum, np.minimum, True),
}


def _op_applies(op, dtype, alpha_kind="int"):
    dtype = np.dtype(dtype)
    if op in ("sub",) and dtype == np.bool_:
        return False
    if op == "add_alpha" and dtype == np.bool_:
        return False
    if op in ("maximum", "minimum") and dtype.kind == "c":
        return False
    return True


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_sparse_sparse(rng, op, layout, dtype):
    if not _op_applies(op, dtype):
        pytest.skip(f"{op} is not defined for {dtype}")
    fn, ref, union = OPS[op]
    a, b = _pair(rng, layout, dtype)
    A, B = _sparse(a, layout), _sparse(b, layout)
    before = (_members(A), _members(B))
    C = fn(A, B)
    C.check_invariants()
    assert C.layout is A.layout and C.index_dtype == A.index_dtype and C.is_coalesced()
    _assert_close(C.to_dense(), ref(a, b))
    mask = (_pattern(A) | _pattern(B)) if union else (_pattern(A) & _pattern(B))
    assert C.nnz == int(_entries_per_batch(mask, A).sum())
    _assert_unchanged(A, before[0])
    _assert_unchanged(B, before[1])


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,dense", DIMS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_batch_and_dense_dims(rng, op, layout, batch, dense, index_dtype):
    fn, ref, union = OPS[op]
    a, b = _pair(rng, layout, np.float64, batch=batch, dense=dense)
    kw = dict(index_dtype=index_dtype, batch_dim=len(batch), dense_dim=len(dense))
    A, B = _sparse(a, layout, **kw), _sparse(b, layout, **kw)
    C = fn(A, B)
    C.check_invariants()
    assert C.shape == A.shape and C.dense_dim == A.dense_dim and C.index_dtype == index_dtype
    _assert_close(C.to_dense(), ref(a, b))
    mask = (_pattern(A) | _pattern(B)) if union else (_pattern(A) & _pattern(B))
    per_batch = _entries_per_batch(mask, A)
    if isinstance(C, st.COOTensor):
        assert C.nnz == int(per_batch.sum())
    else:
        assert (per_batch == C.nnz).all()


@settings(max_examples=80, deadline=None)
@given(op=hs.sampled_from(list(OPS)), layout=hs.sampled_from(LAYOUTS), dtype=hs.sampled_from(VALUE_DTYPES),
       index_dtype=hs.sampled_from(INDEX_DTYPES), dims=hs.sampled_from(DIMS),
       blocks=hs.tuples(hs.integers(0, 4), hs.integers(0, 5)), seed=hs.integers(0, 2**32 - 1),
       threads=hs.sampled_from([1, 2]))
def test_property_sparse_sparse(op, layout, dtype, index_dtype, dims, blocks, seed, threads):
    if not _op_applies(op, dtype):
        return
    rng = np.random.default_rng(seed)
    batch, dense = dims
    fn, ref, _ = OPS[op]
    cells = blocks[0] * blocks[1]
    nnz = (int(rng.integers(0, cells + 1)), int(rng.integers(0, cells + 1)))
    a, b = _pair(rng, layout, dtype, batch=batch, dense=dense, blocks=blocks, nnz=nnz)
    kw = dict(index_dtype=index_dtype, batch_dim=len(batch), dense_dim=len(dense))
    A, B = _sparse(a, layout, **kw), _sparse(b, layout, **kw)
    C = fn(A, B) if op not in ("add", "mul") else {"add": add, "mul": mul}[op](A, B, threads=threads)
    C.check_invariants()
    _assert_close(C.to_dense(), ref(a, b))


def test_zero_nnz_and_zero_size(rng):
    for layout in LAYOUTS:
        z = _sparse(np.zeros((4, 4)), layout)
        for fn in (add, sub, mul, maximum, minimum):
            c = fn(z, z)
            c.check_invariants()
            assert c.nnz == 0 and c.shape == (4, 4)
        empty = _sparse(np.zeros((0, 4)), layout)
        assert add(empty, empty).shape == (0, 4) and mul(empty, np.ones(4)).nnz == 0
        x = _sparse(random_dense(rng, blocks=(2, 4), blocksize=BLOCKSIZE if layout in BLOCKED else (1, 1), nnz=5)
                    if layout in BLOCKED else random_dense(rng, blocks=(4, 4), nnz=5), layout)
        np.testing.assert_array_equal(add(x, z).to_dense(), x.to_dense())
        np.testing.assert_array_equal(add(z, x).to_dense(), x.to_dense())
        assert mul(x, z).nnz == 0
    h = st.from_dense(np.zeros((3, 4, 0)), "csr", dense_dim=1)  # entries without values
    assert add(h, h).shape == (3, 4, 0)


def test_cancellation_keeps_explicit_zeros():
    a = st.sparse_csr_tensor([0, 2], [0, 1], [1.0, 2.0], size=(1, 2))
    b = st.sparse_csr_tensor([0, 1], [0], [-1.0], size=(1, 2))
    c = add(a, b)
    assert c.nnz == 2 and c.values().tolist() == [0.0, 2.0]
    m = mul(a, st.sparse_csr_tensor([0, 1], [1], [0.0], size=(1, 2)))
    assert m.nnz == 1 and m.values().tolist() == [0.0]


def test_mixed_layouts_convert_the_second(rng):
    a, b = _pair(rng, "csr", np.float64, blocks=(4, 4))
    A = _sparse(a, "csr")
    for lb in ("coo", "csc", "bsr", "bsc"):
        B = _sparse(b, lb, blocksize=(2, 2))
        c = add(A, B)
        assert c.layout is st.sparse_csr
        _assert_close(c.to_dense(), a + b)
    Ab = _sparse(a, "bsr", blocksize=(2, 2))
    c = mul(Ab, _sparse(b, "csr"))
    assert c.layout is st.sparse_bsr and c.blocksize == (2, 2)
    _assert_close(c.to_dense(), a * b)
    c = add(_sparse(a, "coo"), _sparse(b, "csr"))
    assert c.layout is st.sparse_coo
    _assert_close(c.to_dense(), a + b)


def test_mixed_dtypes_promote(rng):
    a, b = _pair(rng, "csr", np.float64)
    A, B = _sparse(a.astype(np.int32), "csr"), _sparse(b.astype(np.float32), "coo")
    c = add(A, B)
    assert c.dtype == np.result_type(np.int32, np.float32)
    _assert_close(c.to_dense(), a.astype(np.int32) + b.astype(np.float32))
    c = mul(_sparse(a.astype(bool), "csr"), _sparse(b.astype(np.complex64), "csr"))
    assert c.dtype == np.complex64
    c = add(_sparse(a, "csr", np.int32), _sparse(b, "csr", np.int64))
    assert c.index_dtype == np.int64


def test_coo_keys_beyond_int64(rng):
    shape = (2**40, 2**40, 8)
    ia = np.array([[1, 2**39, 5], [3, 2**40 - 1, 7], [0, 1, 2]])
    ib = np.array([[1, 7, 2**39], [3, 0, 2**40 - 1], [0, 1, 2]])
    A = st.sparse_coo_tensor(ia, [1.0, 2.0, 3.0], size=shape)
    B = st.sparse_coo_tensor(ib, [10.0, 20.0, 30.0], size=shape)
    c = add(A, B)
    c.check_invariants()
    cols = {tuple(int(v) for v in col): float(x) for col, x in zip(c.indices().T, c.values())}
    assert cols == {(1, 3, 0): 11.0, (2**39, 2**40 - 1, 1): 2.0, (2**39, 2**40 - 1, 2): 30.0, (5, 7, 2): 3.0,
                    (7, 0, 1): 20.0}
    m = mul(A, B)
    assert m.nnz == 1 and m.values().tolist() == [10.0]


def test_uncoalesced_and_unchecked_input(rng):
    with st.check_invariants(False):
        a = st.sparse_coo_tensor([[1, 0, 1]], [1.0, 2.0, 3.0], size=(3,))
        csr = st.sparse_csr_tensor([0, 2, 3], [1, 0, 1], [2.0, 3.0, 4.0], size=(2, 2))
        bad = st.sparse_csr_tensor([0, 1, 2], [0, 5], [1.0, 1.0], size=(2, 2))
        bad_coo = st.sparse_coo_tensor([[0, -1]], [1.0, 1.0], size=(3,))
    b = st.sparse_coo_tensor([[2]], [5.0], size=(3,))
    np.testing.assert_array_equal(add(a, b).to_dense(), [2.0, 4.0, 5.0])
    np.testing.assert_array_equal(mul(a, np.array([1.0, 10.0, 100.0])).to_dense(), [2.0, 40.0, 0.0])
    np.testing.assert_array_equal(add(np.ones(3), a), [3.0, 5.0, 1.0])
    dense_csr = np.array([[3.0, 2.0], [0.0, 4.0]])
    np.testing.assert_array_equal(add(csr, csr).to_dense(), 2 * dense_csr)
    np.testing.assert_array_equal(mul(csr, np.full((2, 2), 2.0)).to_dense(), 2 * dense_csr)
    np.testing.assert_array_equal(add(csr, np.ones((2, 2))), dense_csr + 1)
    for f in (lambda: add(bad, csr), lambda: mul(bad, np.ones((2, 2))), lambda: add(bad, np.ones((2, 2))),
              lambda: add(bad_coo, b), lambda: mul(bad_coo, np.ones(3))):
        with pytest.raises(st.InvariantError):
            f()


def test_batched_results_with_different_nnz_are_refused():
    a = np.zeros((2, 2, 2))
    a[0, 0, 0] = a[1, 0, 0] = 1
    b = np.zeros((2, 2, 2))
    b[0, 1, 1] = b[1, 0, 0] = 1
    A, B = st.from_dense(a, "csr", batch_dim=1), st.from_dense(b, "csr", batch_dim=1)
    with pytest.raises(ValueError, match="same nnz"):
        add(A, B)
    np.testing.assert_array_equal(add(A.to_sparse_coo(), B.to_sparse_coo()).to_dense(), a + b)


# -- sparse op dense, sparse op scalar ------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_sparse_dense(rng, layout, dtype, index_dtype):
    a, b = _pair(rng, layout, dtype)
    d = nonzero_values(rng, a.shape, dtype)
    A = _sparse(a, layout, index_dtype)
    before = _members(A)
    # add / sub: dense results
    r = add(A, d)
    assert isinstance(r, np.ndarray)
    _assert_close(r, _ref_add(a, d, 1))
    _assert_close(add(d, A), _ref_add(d, a, 1))
    if dtype != np.bool_:
        _assert_close(add(d, A, alpha=2), _ref_add(d, a, 2))
        _assert_close(sub(A, d), _ref_add(a, d, -1))
        _assert_close(sub(d, A), _ref_add(d, a, -1))
    # mul: the sparse pattern, the dense operand sampled there
    m = mul(A, d)
    m.check_invariants()
    assert m.nnz == A.nnz and m.layout is A.layout
    _assert_close(m.to_dense(), (a & d) if dtype == np.bool_ else a * d)
    m2 = mul(d, A)
    _assert_close(m2.to_dense(), (d & a) if dtype == np.bool_ else d * a)
    # div: the pattern kept
    q = div(A, d)
    q.check_invariants()
    assert q.nnz == A.nnz
    with np.errstate(all="ignore"):
        ref = np.where(_pattern(A), np.true_divide(a, d), 0)
    _assert_close(q.to_dense(), ref.astype(np.true_divide(a[:0], d[:0]).dtype))
    # maximum / minimum with a dense operand: dense
    if np.dtype(dtype).kind != "c":
        _assert_close(maximum(A, d), np.maximum(a, d))
        _assert_close(minimum(d, A), np.minimum(d, a))
    _assert_unchanged(A, before)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,dense", DIMS)
def test_sparse_dense_broadcasting(rng, layout, batch, dense):
    a, _ = _pair(rng, layout, np.float64, batch=batch, dense=dense)
    A = _sparse(a, layout, batch_dim=len(batch), dense_dim=len(dense))
    shapes = [a.shape, a.shape[-1:], (1,) * a.ndim, a.shape[:-1] + (1,), (a.shape[-2], 1) if a.ndim >= 2 else ()]
    if a.ndim >= 3:
        shapes.append((a.shape[0], 1) + a.shape[2:])
    for shape in shapes:
        d = nonzero_values(rng, shape, np.float64)
        m = mul(A, d)
        m.check_invariants()
        _assert_close(m.to_dense(), a * d)
        q = div(A, d)
        _assert_close(q.to_dense(), np.where(_pattern(A), a / d, 0))
    with pytest.raises(ValueError, match="broadcast"):
        mul(A, np.ones(a.shape + (2,)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,dense", DIMS)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex128, np.bool_])
def test_sparse_plus_dense_broadcasting(rng, layout, batch, dense, dtype):
    """sparse +- dense with a dense operand that broadcasts (a row, a column, a 1-d array, leading
    dims; a sparse operand that broadcasts too): NumPy's dense result, as SciPy's ``A + row`` (it
    raised "expected operands of the same shape")."""
    a, _ = _pair(rng, layout, dtype, batch=batch, dense=dense)
    A = _sparse(a, layout, batch_dim=len(batch), dense_dim=len(dense))
    shapes = [a.shape[-1:], (1,) * a.ndim, a.shape[:-1] + (1,), (2,) + a.shape, (3, 1) + a.shape[1:]]
    for shape in shapes:
        d = nonzero_values(rng, shape, dtype)
        for got, want in ((add(A, d), _ref_add(a, d, 1)), (add(d, A), _ref_add(d, a, 1))):
            assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == want.dtype
            _assert_close(got, want)
        if dtype != np.bool_:
            _assert_close(sub(A, d), _ref_add(a, d, -1))
            _assert_close(sub(d, A, alpha=2), _ref_add(d, a, -2))
            _assert_close(np.subtract(d, A), _ref_add(d, a, -1))
            _assert_close(d - A, _ref_add(d, a, -1))
    with pytest.raises(ValueError, match="broadcast"):
        add(A, np.ones(a.shape[:-1] + (a.shape[-1] + 1,)))


def test_non_contiguous_and_broadcast_dense_operands(rng):
    a, _ = _pair(rng, "bsc", np.float32, blocks=(3, 4))
    A = _sparse(a, "bsc")
    d = nonzero_values(rng, (a.shape[1], a.shape[0]), np.float32).T  # a transposed view
    _assert_close(mul(A, d).to_dense(), a * d)
    _assert_close(add(A, d), a + d)
    batched = np.stack([a, 2 * a])
    B = st.from_dense(batched, "csr", batch_dim=1)
    col = nonzero_values(rng, (2, 1, 1, 1), np.float32)[:, :, 0]  # (2, 1, 1) -> broadcasts over rows and columns
    _assert_close(mul(B, col).to_dense(), batched * col)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_sparse_scalar(rng, layout, dtype):
    a, _ = _pair(rng, layout, dtype)
    A = _sparse(a, layout)
    for s in (2, 2.5, np.float32(3), 1j, True):
        m = mul(A, s)
        m.check_invariants()
        assert m.nnz == A.nnz
        _assert_close(m.to_dense(), np.multiply(a, s))
        _assert_close(mul(s, A).to_dense(), np.multiply(s, a))
    with np.errstate(all="ignore"):
        q = div(A, 0)
        ref = np.where(_pattern(A), np.true_divide(a, 0), 0)
    assert q.nnz == A.nnz
    _assert_close(q.to_dense(), ref.astype(q.dtype))
    for f in (lambda: add(A, 1), lambda: add(1, A), lambda: sub(A, 1.5), lambda: sub(2, A),
              lambda: maximum(A, 0), lambda: add(A, np.float64(1)), lambda: add(A, np.array(1.0))):
        with pytest.raises(NotImplementedError, match="scalar"):
            f()
    # a scalar 0 gives the tensor in NumPy's dtype (SciPy's A + 0), 0 - A its negation
    zeros = [0, 0.0, np.float32(0), 0j, np.array(0)] + ([] if dtype == np.bool_ else [np.array(0, dtype)])
    for z in zeros:
        for got, want in ((add(A, z), np.add(a, z)), (A + z, a + z), (z + A, z + a), (A - z, a - z),
                          (st.add(A, z, alpha=2), a + 2 * z)):
            got.check_invariants()
            assert got.layout is A.layout and got.nnz == A.nnz and got.dtype == want.dtype, (z, got.dtype, want.dtype)
            _assert_close(got.to_dense(), want)
        if dtype != np.bool_ or isinstance(z, (int, float, complex)):
            with np.errstate(over="ignore"):
                want = z - a
            got = sub(z, A)
            assert got.dtype == want.dtype
            _assert_close(got.to_dense(), want)
    with pytest.raises(NotImplementedError, match="nonzero scalar"):
        add(A, np.nan)
    for s in (np.float64(1.0), np.int8(1), np.array(1.0)):  # a NumPy scalar first goes through np.add
        with pytest.raises(NotImplementedError, match="nonzero scalar"):
            s + A
        with pytest.raises(NotImplementedError, match="nonzero scalar"):
            s - A
    _assert_close((np.float32(0) + A).to_dense(), np.float32(0) + a)
    if dtype == np.bool_:
        for z in (False, np.False_, np.array(False)):
            with pytest.raises(TypeError, match="bool"):
                A - z
    if dtype != np.bool_:
        n = neg(A)
        n.check_invariants()
        _assert_close(n.to_dense(), -a)
    else:
        with pytest.raises(TypeError, match="bool"):
            neg(A)


@pytest.mark.parametrize("other", [np.uint8, np.int8, np.bool_, np.int64, np.float32])
def test_complex_minus_a_narrower_operand_negates_in_the_result_dtype(other):
    # a - b is a + (-b) for complex results: -b in b's own dtype wrapped (uint8 200 -> 56) or was refused (bool)
    A = np.array([[1 + 2j, 0], [0, 0], [3j, 1]])
    B = np.array([[200, 0], [0, 3], [0, -128 if other == np.int8 else 1]]).astype(other)
    a, b = st.from_dense(A, "csr"), st.from_dense(B, "coo")
    want = A - B
    np.testing.assert_array_equal((a - b).to_dense(), want)
    np.testing.assert_array_equal(st.add(a, b, alpha=-1).to_dense(), want)
    np.testing.assert_array_equal(A - b, want)
    np.testing.assert_array_equal(np.real(a - B), want.real)


# -- errors ------------------------------------------------------------------------------------------------
def test_errors(rng):
    a = _sparse(random_dense(rng, blocks=(3, 4), nnz=4), "csr")
    b = _sparse(random_dense(rng, blocks=(4, 3), nnz=4), "coo")
    for fn in (add, sub, mul, maximum, minimum):
        with pytest.raises(ValueError, match=r"csr.*\(3, 4\).*coo.*\(4, 3\)"):
            fn(a, b)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(4, 3\)"):
        add(a, np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"broadcast.*\(3, 4\).*\(3,\)"):
        add(a, np.ones(3))  # shapes that do not broadcast
    with pytest.raises(TypeError, match="bool"):
        sub(a.astype(bool), a.astype(bool))
    with pytest.raises(TypeError, match="complex"):
        maximum(a.astype(np.complex64), a)
    with pytest.raises(NotImplementedError, match="division by a sparse"):
        div(a, a)
    with pytest.raises(NotImplementedError, match="division by a sparse"):
        div(np.ones((3, 4)), a)
    with pytest.raises(NotImplementedError, match="division by a sparse"):
        div(2.0, a)
    with pytest.raises(ValueError, match="rounding_mode must be"):
        div(a, 2, rounding_mode="round")
    with pytest.raises(TypeError, match="complex"):
        div(a.astype(np.complex64), 2, rounding_mode="floor")
    with pytest.raises(TypeError, match="floating point"):
        add(a.astype(np.int32), a.astype(np.int32), alpha=0.5)
    with pytest.raises(TypeError, match="complex"):
        add(a, a, alpha=1j)
    with pytest.raises(TypeError, match="at least one sparse"):
        add(np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match="unsupported"):
        mul(a, "x")
    with pytest.raises(TypeError, match="dtype"):
        mul(a.astype(np.uint8), np.ones((3, 4), dtype=np.uint16))  # uint16 is not a value dtype
    hybrid = st.from_dense(np.ones((3, 4)), "coo", dense_dim=1)
    with pytest.raises(ValueError, match="dense dims"):
        add(a.to_sparse_coo(), hybrid)


# -- threads, large inputs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_threads_agree(rng, layout):
    a = random_dense(rng, blocks=(600, 500), nnz=6000)
    b = random_dense(rng, blocks=(600, 500), nnz=6000)
    A, B = _sparse(a, layout), _sparse(b, layout)
    for fn in (add, mul, maximum):
        r1, r2 = fn(A, B, threads=1), fn(A, B, threads=2)
        for x, y in zip(_members(r1), _members(r2)):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(mul(A, b, threads=1).values(), mul(A, b, threads=2).values())
    np.testing.assert_array_equal(add(A, b, threads=1), add(A, b, threads=2))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_large_matches_scipy(rng, index_dtype):
    sp = pytest.importorskip("scipy.sparse")
    n = 4000
    X = sp.random_array((n, n), density=8 / n, format="csr", dtype=np.float64, rng=rng)
    Y = sp.random_array((n, n), density=8 / n, format="csr", dtype=np.float64, rng=rng)

    def mine(m):
        return st.sparse_csr_tensor(m.indptr.astype(index_dtype), m.indices.astype(index_dtype), m.data,
                                    size=m.shape)

    tX, tY = mine(X), mine(Y)
    for got, ref in ((add(tX, tY), X + Y), (mul(tX, tY), X.multiply(Y).tocsr()), (sub(tX, tY, alpha=2), X - 2 * Y)):
        ref.sort_indices()
        got.check_invariants()
        np.testing.assert_array_equal(got.crow_indices(), ref.indptr)
        np.testing.assert_array_equal(got.col_indices(), ref.indices)
        np.testing.assert_allclose(got.values(), ref.data, rtol=1e-12)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_threaded_one_pass_union_closes_up(rng, index_dtype, threads):
    """Large enough for threaded row ranges: each is merged from the upper bound of its start, then
    moves down; overlapping patterns make every range move."""
    sp = pytest.importorskip("scipy.sparse")
    n = 30_000
    X = sp.random_array((n, n), density=12 / n, format="csr", dtype=np.float32, rng=rng)
    Y = (sp.random_array((n, n), density=6 / n, format="csr", dtype=np.float32, rng=rng) + 0.5 * X).tocsr()

    def mine(m):
        return st.sparse_csr_tensor(m.indptr.astype(index_dtype), m.indices.astype(index_dtype), m.data,
                                    size=m.shape)

    tX, tY = mine(X), mine(Y)
    for got, ref in ((add(tX, tY, threads=threads), X + Y), (sub(tX, tY, alpha=3, threads=threads), X - 3 * Y),
                     (maximum(tX, tY, threads=threads), X.maximum(Y))):
        ref.sort_indices()
        got.check_invariants()
        assert got.nnz < X.nnz + Y.nnz
        np.testing.assert_array_equal(got.crow_indices(), ref.indptr)
        np.testing.assert_array_equal(got.col_indices(), ref.indices)
        np.testing.assert_allclose(got.values(), ref.data, rtol=1e-6)


# -- PyTorch -------------------------------------------------------------------------------------------------
def _to_torch(t):
    if isinstance(t, st.COOTensor):
        return torch.sparse_coo_tensor(torch.from_numpy(t.indices().astype(np.int64)),
                                       torch.from_numpy(np.ascontiguousarray(t.values())), t.shape).coalesce()
    return torch.sparse_csr_tensor(torch.from_numpy(t.crow_indices()), torch.from_numpy(t.col_indices()),
                                   torch.from_numpy(t.values()), t.shape)


@requires_torch
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.complex64])
@pytest.mark.parametrize("dense", [(), (2,)])
def test_matches_torch(rng, layout, dtype, dense):
    if layout == "csr" and dense:
        pytest.skip("torch cannot add hybrid csr tensors")
    if layout == "csr" and np.dtype(dtype).kind == "i":
        pytest.skip("torch cannot add integer csr tensors")
    a, b = _pair(rng, layout, dtype, dense=dense, blocks=(5, 6), nnz=(12, 14))
    A, B = _sparse(a, layout, dense_dim=len(dense)), _sparse(b, layout, dense_dim=len(dense))
    tA, tB = _to_torch(A), _to_torch(B)
    cases = [(add(A, B, alpha=2), torch.add(tA, tB, alpha=2)), (mul(A, B), tA * tB),
             (mul(A, b), tA * torch.from_numpy(b)), (mul(A, 3), tA * 3), (neg(A), -tA)]
    if layout == "coo":
        cases += [(sub(A, B), tA - tB), (div(A, 4), tA / 4)]
        cases += [(add(b, A), torch.add(torch.from_numpy(b), tA))]
    for got, ref in cases:
        if isinstance(got, np.ndarray):
            np.testing.assert_allclose(got, ref.numpy(), rtol=1e-6)
            continue
        ref_dense = ref.to_dense().numpy()
        np.testing.assert_allclose(got.to_dense(), ref_dense, rtol=1e-6)
        assert got.nnz == ref._nnz(), (got.nnz, ref._nnz())
        # documented difference: true division of integers gives float64 (NumPy), torch float32
        assert got.dtype == ref_dense.dtype or (got.dtype == np.float64 and np.dtype(dtype).kind == "i")


@requires_torch
def test_torch_refusals_are_matched(rng):
    a, _ = _pair(rng, "coo", np.float32)
    A = _sparse(a, "coo")
    tA = _to_torch(A)
    for ours, theirs in ((lambda: add(A, 1), lambda: tA + 1), (lambda: div(A, A), lambda: tA / tA),
                         (lambda: sub(A.astype(bool), A.astype(bool)), lambda: tA.bool() - tA.bool()),
                         (lambda: neg(A.astype(bool)), lambda: -tA.bool())):
        with pytest.raises(Exception):
            theirs()
        with pytest.raises((NotImplementedError, TypeError)):
            ours()
    assert math.isfinite(1.0)


def test_docstring_examples():
    import doctest

    import sparsetensor.ops.binary as mod

    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
    for fn in (add, sub, mul, div, maximum, minimum, neg):
        assert "Examples" in fn.__doc__ and ">>>" in fn.__doc__, fn.__name__


def test_patterns_claimed_sorted_but_not_never_break_memory(rng):
    """Tensors whose canonical flags lie (unsorted, duplicates) give garbage, never a crash; a coo
    coalesced flag given without a check is checked before it is trusted (C6)."""
    for _ in range(50):
        n = 40
        with st.check_invariants(False):
            a = st.sparse_coo_tensor(rng.integers(0, 10, size=(2, n)), rng.standard_normal(n), size=(10, 10),
                                     is_coalesced=True)
            b = st.sparse_coo_tensor(rng.integers(0, 10, size=(2, n)), rng.standard_normal(n), size=(10, 10),
                                     is_coalesced=True)
        lens = rng.integers(0, 6, size=10)
        crow = np.concatenate([[0], np.cumsum(lens)])
        nn = int(crow[-1])
        A = st.CompressedTensor(crow, rng.integers(0, 10, size=nn), rng.standard_normal(nn), (10, 10),
                                st.sparse_csr, canonical=True)
        B = st.CompressedTensor(crow, rng.integers(0, 10, size=nn), rng.standard_normal(nn), (10, 10),
                                st.sparse_csr, canonical=True)
        for fn in (add, mul, maximum):
            with pytest.raises(st.InvariantError, match="C6"):
                fn(a, b)
            assert fn(A, B).shape == (10, 10)


# -- coo unions in one pass (rows through merge_union, or linear keys on the fly) ------------------------------
COO_PATHS = ["rows", "keys"]


def _coo_path(monkeypatch, path, threads):
    """Force the rows or the key path, and ``threads`` threads also for small inputs."""
    import sparsetensor._backend.cpu._merge as mod  # the CPU merge kernels (the backend seam)

    if path == "keys":
        monkeypatch.setattr(mod, "_COO_ROWS_PER_ENTRY", -1)
        monkeypatch.setattr(mod, "_COO_ROWS_MIN", -1)
    monkeypatch.setattr(mod, "num_threads", lambda t=None, work=None: 1 if t is None else t)


def _random_coo(rng, shape, sparse_dim, nnz, dtype, index_dtype, positions=None):
    """A coalesced coo tensor with ``nnz`` entries at random (or the given) linear positions."""
    sshape = shape[:sparse_dim]
    if positions is None:
        positions = rng.choice(math.prod(sshape), size=nnz, replace=False)
    positions = np.sort(np.asarray(positions, dtype=np.int64))
    idx = np.array(np.unravel_index(positions, sshape), dtype=index_dtype).reshape(sparse_dim, positions.size)
    vals = nonzero_values(rng, (positions.size,) + shape[sparse_dim:], dtype)
    return st.sparse_coo_tensor(idx, vals, size=shape, is_coalesced=True)


def _coo_oracle(name, a, b):
    da, db = a.to_dense(), b.to_dense()
    dt = np.result_type(a.dtype, b.dtype)
    if name == "add":
        return np.logical_or(da, db) if dt == np.bool_ else np.add(da, db, dtype=dt)
    if name == "sub3":
        return np.subtract(da, np.multiply(db, 3, dtype=dt), dtype=dt)
    return {"maximum": np.maximum, "minimum": np.minimum}[name](da, db).astype(dt)


_COO_OPS = {"add": lambda a, b, t: add(a, b, threads=t), "sub3": lambda a, b, t: sub(a, b, alpha=3, threads=t),
            "maximum": lambda a, b, t: maximum(a, b, threads=t), "minimum": lambda a, b, t: minimum(a, b, threads=t)}


def _check_coo_union(got, a, b, ref):
    got.check_invariants()
    assert got.is_coalesced() and got.layout is st.sparse_coo
    assert got.index_dtype == (a.index_dtype if a.index_dtype == b.index_dtype else np.int64)
    # the pattern is the union of the patterns (explicit zeros stay entries)
    keys = {tuple(c) for c in a.indices().T.tolist()} | {tuple(c) for c in b.indices().T.tolist()}
    assert got.nnz == len(keys)
    assert sorted(keys) == [tuple(c) for c in got.indices().T.tolist()]
    _assert_close(got.to_dense(), ref)


@pytest.mark.parametrize("path", COO_PATHS)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("shape,sparse_dim", [((3000, 7), 2), ((30, 100, 5), 3), ((20000,), 1), ((40, 60, 3), 2),
                                              ((5, 6, 7, 2), 3)])
@pytest.mark.parametrize("overlap", ["partial", "disjoint", "same"])
def test_coo_union_one_pass(rng, monkeypatch, path, threads, index_dtype, shape, sparse_dim, overlap):
    """Both one-pass paths with threaded ranges (also on small inputs), dense dims, sparse_dim 1-3,
    overlapping, disjoint and equal patterns: the union pattern and the dense oracle's values."""
    _coo_path(monkeypatch, path, threads)
    size = math.prod(shape[:sparse_dim])
    na, nb = size // 7, size // 5
    if overlap == "disjoint":
        perm = rng.permutation(size)
        pa, pb = perm[:na], perm[na:na + nb]
    elif overlap == "same":
        pa = pb = rng.choice(size, size=na, replace=False)
    else:
        pa, pb = None, None
    a = _random_coo(rng, shape, sparse_dim, na, np.float64, index_dtype, pa)
    b = _random_coo(rng, shape, sparse_dim, nb, np.float64, index_dtype, pb)
    before = [_members(a), _members(b)]
    for name, fn in _COO_OPS.items():
        _check_coo_union(fn(a, b, threads), a, b, _coo_oracle(name, a, b))
    _assert_unchanged(a, before[0])
    _assert_unchanged(b, before[1])


@pytest.mark.parametrize("path", COO_PATHS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_coo_union_one_pass_dtypes(rng, monkeypatch, path, dtype):
    """All value dtypes (bool is or, float16 computed in float32, integers wrap), dense dims, and
    cancellation to explicit zeros."""
    _coo_path(monkeypatch, path, 2)
    shape = (50, 40, 2)
    a = _random_coo(rng, shape, 2, 300, dtype, np.int64)
    b = _random_coo(rng, shape, 2, 500, dtype, np.int64)
    ops = ["add"] + (["sub3"] if dtype != np.bool_ else []) + (["maximum", "minimum"] if dtype.kind != "c" else [])
    for name in ops:
        _check_coo_union(_COO_OPS[name](a, b, 2), a, b, _coo_oracle(name, a, b))
    if dtype != np.bool_:
        c = sub(a, a)
        assert c.nnz == a.nnz and not c.values().any()  # explicit zeros stay


@pytest.mark.parametrize("path", COO_PATHS)
def test_coo_union_one_pass_mixed_and_empty(rng, monkeypatch, path):
    _coo_path(monkeypatch, path, 3)
    a = _random_coo(rng, (30, 20), 2, 100, np.float32, np.int32)
    b = _random_coo(rng, (30, 20), 2, 150, np.float32, np.int64)
    _check_coo_union(add(a, b, threads=3), a, b, a.to_dense() + b.to_dense())
    e = _random_coo(rng, (30, 20), 2, 0, np.float32, np.int32)
    for x, y in ((a, e), (e, a), (e, e)):
        _check_coo_union(add(x, y, threads=3), x, y, x.to_dense() + y.to_dense())
    # a zero-size dense dim: entries without values
    z1 = st.sparse_coo_tensor(np.array([[0, 2], [1, 1]]), np.zeros((2, 0)), size=(3, 3, 0), is_coalesced=True)
    z2 = st.sparse_coo_tensor(np.array([[1, 2], [0, 1]]), np.zeros((2, 0)), size=(3, 3, 0), is_coalesced=True)
    got = add(z1, z2, threads=3)
    got.check_invariants()
    assert got.indices().tolist() == [[0, 1, 2], [1, 0, 1]] and got.values().shape == (3, 0)


@pytest.mark.parametrize("path", COO_PATHS)
@pytest.mark.parametrize("broken", ["C5", "C4", "C6-unsorted", "C6-duplicate", "C6-row"])
def test_coo_union_one_pass_broken_operands_raise(monkeypatch, path, broken):
    """Indices of tensors built without checks are not trusted: bounds and the coalesced claim are
    checked on the way."""
    _coo_path(monkeypatch, path, 2)
    idx = {"C5": [[0, 1, 2], [0, 1, 9]], "C4": [[0, 1, 2], [0, -1, 2]], "C6-unsorted": [[0, 2, 1], [0, 0, 0]],
           "C6-duplicate": [[0, 1, 1], [2, 1, 1]], "C6-row": [[0, 1, 1], [2, 2, 1]]}[broken]
    with st.check_invariants(False):
        bad = st.sparse_coo_tensor(np.array(idx), np.ones(3), size=(3, 3), is_coalesced=True)
    good = st.sparse_coo_tensor(np.array([[0, 2], [2, 0]]), np.ones(2), size=(3, 3), is_coalesced=True)
    for x, y in ((bad, good), (good, bad)):
        for fn in (add, maximum):
            with pytest.raises(st.InvariantError, match=broken[:2]):
                fn(x, y)


def test_coo_union_large_threads_agree(rng):
    """Large enough for the default thread choice: one and several threads give the same result."""
    n = 100_000
    a = _random_coo(rng, (n, n), 2, 300_000, np.float32, np.int32)
    b = _random_coo(rng, (n, n), 2, 200_000, np.float32, np.int32)
    r1, r3 = add(a, b, threads=1), add(a, b, threads=3)
    r3.check_invariants()
    np.testing.assert_array_equal(r1.indices(), r3.indices())
    np.testing.assert_array_equal(r1.values(), r3.values())
    assert r1.nnz >= 300_000


def test_sparse_plus_dense_checks_an_unchecked_coalesced_coo():
    """A negative index of an unchecked, coalesced-flagged COO must raise C4, not wrap around
    (NumPy indexing would add the value at the last row)."""
    s = st.sparse_coo_tensor(np.array([[-1], [0]]), np.ones(1), size=(2, 2), check_invariants=False,
                             is_coalesced=True)
    with pytest.raises(st.InvariantError, match="C4"):
        s + np.zeros((2, 2))


@pytest.mark.parametrize("dtype", ["bool", "int8", "float16", "float32", "float64", "complex128"])
@pytest.mark.parametrize("blocksize", [(3, 3), (2, 5)])
def test_transposed_block_views_merge(dtype, blocksize, rng):
    """A + B^T with B^T the bsr view of a bsc tensor (its values: transposed blocks, not
    C-contiguous), large enough for the block-transposing copy; the operands stay as they were."""
    from sparsetensor._backend._views import contiguous_values

    Rb, Cb = blocksize
    a = random_dense(rng, batch=(2,), blocks=(40, 30), blocksize=blocksize, dtype=np.dtype(dtype), nnz=300)
    b = np.ascontiguousarray(np.swapaxes(a, -1, -2))  # b^T has a's pattern: batches of one nnz
    s = st.from_dense(a, "bsr", blocksize=blocksize, batch_dim=1)
    view = st.from_dense(b, "bsc", blocksize=(Cb, Rb), batch_dim=1).mT  # b^T: blocks (Rb, Cb)
    v = view.values()
    assert v.size >= 4096 and not v.flags.c_contiguous
    before = v.copy()
    got = contiguous_values(v)
    assert got.flags.c_contiguous and got.dtype == v.dtype
    np.testing.assert_array_equal(got, v)
    np.testing.assert_array_equal(view.values(), before)
    want = a + np.swapaxes(b, -1, -2) if dtype != "bool" else a | np.swapaxes(b, -1, -2)
    np.testing.assert_array_equal(add(s, view).to_dense(), want)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "coo"])
def test_byte_swapped_dense_operands(layout):
    D = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    t = st.from_dense(D, layout, **({"blocksize": (1, 1)} if layout == "bsr" else {}))
    for X in (np.full((2, 3), 2 + 1j), np.arange(1.0, 7.0).reshape(2, 3), np.array([2.0, 4.0, 8.0])):
        be = X.astype(X.dtype.newbyteorder(">"))
        np.testing.assert_array_equal((t * be).to_dense(), D * X)
        np.testing.assert_array_equal((t / be).to_dense(), D / X)
    with pytest.raises(TypeError, match="longdouble|float128|supported value dtype"):
        t * np.ones((2, 3), np.longdouble)
    A = st.from_dense(D, "csr")
    U, V = np.arange(8.0).reshape(2, 4), np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(st.sampled_addmm(A, U.astype(">f8"), V.astype(">f8")).to_dense(),
                                  st.sampled_addmm(A, U, V).to_dense())
    np.testing.assert_array_equal(st.sparse_mask(U[:, :3].astype(">f8"), A).to_dense(), st.sparse_mask(U[:, :3], A).to_dense())
    np.testing.assert_array_equal(st.index_select(A, 0, np.array([1, 0], ">i8")).to_dense(), D[[1, 0]])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_floor_division_operator(rng, layout):
    """``t // s`` and ``t // dense`` are div with rounding_mode="floor" (PyTorch's floor_divide;
    the operator was missing); a dividend that is not sparse is div's refusal."""
    a, _ = _pair(rng, layout, np.float64)
    A = _sparse(a, layout)
    for d in (2.0, -3, nonzero_values(rng, a.shape[-1:], np.float64)):
        got = A // d
        assert isinstance(got, st.SparseTensor) and got.layout is A.layout
        _assert_close(got.to_dense(), np.where(_pattern(A), np.floor_divide(a, d), 0))
        _assert_close(got.to_dense(), div(A, d, rounding_mode="floor").to_dense())
    with pytest.raises(NotImplementedError, match="division by a sparse tensor"):
        2.0 // A
