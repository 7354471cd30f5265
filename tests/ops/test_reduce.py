"""Reductions (sparsetensor.ops.reduce): sum, mean, amax, amin, norm, softmax, log_softmax.

Oracles: the dense NumPy reduction of ``t.to_dense()`` (always), and PyTorch 2.13 where
it implements the op (``torch.sparse.sum``, ``torch.sum(csr, dim, keepdim=True)``,
``torch.norm``, ``torch.sparse.softmax``/``log_softmax`` on COO). The kind of result
(sparse layout or dense array) follows the table in the module docstring; sparse results
satisfy every invariant and inputs come out unmodified.
"""

from __future__ import annotations

import doctest
import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import sparsetensor as st
from conftest import HAVE_TORCH, LAYOUTS, VALUE_DTYPES, assert_unchanged, requires_torch, snapshot, unequal_batch_unions
from sparsetensor.ops import reduce as R
from test_pointwise import CONFIGS, assert_close, every_variant, make, make_variant, uncoalesced

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")

if HAVE_TORCH:
    import torch


# -- oracles ----------------------------------------------------------------------------------------------
def sum_dtype(dtype):
    return np.dtype(np.int64) if np.dtype(dtype).kind in "biu" else np.dtype(dtype)


def dense_sum(a, dims, keepdim):
    out = sum_dtype(a.dtype)
    work = np.float32 if out == np.float16 else out
    return np.sum(a.astype(work), axis=dims, keepdims=keepdim).astype(out)


def dense_mean(a, dims, keepdim):
    out = np.dtype(np.float64) if a.dtype.kind in "biu" else a.dtype
    work = np.float32 if out == np.float16 else out
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # mean of empty slice
        return np.asarray(np.mean(a.astype(work), axis=dims, keepdims=keepdim)).astype(out)


def dense_norm(a, p, dims, keepdim):
    out = {"b": np.float64, "i": np.float64, "u": np.float64, "c": a.real.dtype, "f": a.dtype}[a.dtype.kind]
    x = np.abs(a).astype(np.float64)
    with np.errstate(all="ignore"):
        if p == math.inf:
            r = np.max(x, axis=dims, keepdims=keepdim)
        elif p == -math.inf:
            r = np.min(x, axis=dims, keepdims=keepdim)
        elif p == 0:
            r = np.sum(x != 0, axis=dims, keepdims=keepdim).astype(np.float64)
        else:
            r = np.sum(x ** p, axis=dims, keepdims=keepdim) ** (1 / p)
    return np.asarray(r).astype(out)


def dense_softmax(a, mask, dim, log):
    """Softmax with unspecified elements as -inf; unspecified results are 0 (not stored)."""
    x = np.where(mask, a.astype(np.float64), -np.inf)
    with np.errstate(all="ignore"):
        z = x - np.max(x, axis=dim, keepdims=True, initial=-np.inf)
        s = np.sum(np.exp(z), axis=dim, keepdims=True)
        r = z - np.log(s) if log else np.exp(z) / s
    return np.where(mask, r, 0.0)


def mask_of(t):
    """Where ``t`` has specified elements (all items of a specified block)."""
    return t._replace_values(np.ones(t.values().shape, dtype=bool)).to_dense()


def expected_kind(t, dims):
    """The result type the module's table promises."""
    if t.layout is st.sparse_coo:
        S = t.sparse_dim
        sparse = [d for d in dims if d < S]
        if S and len(sparse) == S:
            return np.ndarray
        return st.sparse_coo
    m = t.batch_dim
    if any(m <= d < m + 2 for d in dims):
        return np.ndarray
    return t.layout


def check(result, want, t, dims, dtype=None):
    kind = expected_kind(t, dims)
    if kind is np.ndarray:
        assert isinstance(result, np.ndarray), type(result)
        got = result
    else:
        assert isinstance(result, st.SparseTensor) and result.layout is kind, (type(result), kind)
        result.check_invariants()
        assert result.index_dtype == t.index_dtype
        got = result.to_dense()
    assert_close(got, want, dtype if dtype is not None else want.dtype)


def all_dim_sets(ndim):
    for k in range(ndim + 1):
        yield from itertools.combinations(range(ndim), k)


# -- every dim set, every layout ------------------------------------------------------------------------------
@every_variant
def test_reductions_over_every_dim_set(config, index_dtype, kind, layout, rng):
    t, a = make_variant(rng, layout, config, index_dtype, kind)
    snap = snapshot(t)
    for dims in all_dim_sets(a.ndim):
        for keepdim in (False, True):
            check(R.sum(t, dims, keepdim), dense_sum(a, dims, keepdim), t, dims)
            check(R.mean(t, dims, keepdim), dense_mean(a, dims, keepdim), t, dims)
            if all(a.shape[d] for d in dims):
                check(R.amax(t, dims, keepdim), np.max(a, axis=dims, keepdims=keepdim), t, dims)
                check(R.amin(t, dims, keepdim), np.min(a, axis=dims, keepdims=keepdim), t, dims)
            for p in ("fro", 1, 3, math.inf, 0):
                pn = 2 if p == "fro" else p
                check(R.norm(t, p, dims, keepdim), dense_norm(a, pn, dims, keepdim), t, dims)
    assert_unchanged(t, snap)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dim_none_is_a_full_reduction(layout, rng):
    t, a = make(rng, layout, batch=(2,), dense=(3,))
    for fn, want in ((R.sum, a.sum()), (R.amax, a.max()), (R.amin, a.min()), (R.mean, a.mean()),
                     (R.norm, np.sqrt((a ** 2).sum()))):
        r = fn(t)
        assert isinstance(r, np.ndarray) and r.shape == ()
        np.testing.assert_allclose(r, want)
        assert fn(t, keepdim=True).shape == (1,) * a.ndim
    # dim=() reduces nothing (NumPy's rule)
    r = R.sum(t, ())
    assert r.layout is t.layout and r.shape == t.shape
    np.testing.assert_array_equal(r.to_dense(), a)


@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_value_dtypes(dtype, layout, rng):
    t, a = make(rng, layout, batch=(2,), dense=(2,), dtype=dtype)
    snap = snapshot(t)
    for dims in [None, (0,), (1,), (2,), (3,), (0, 1), (1, 2)]:
        d = tuple(range(a.ndim)) if dims is None else dims
        check(R.sum(t, dims), dense_sum(a, d, False), t, d)
        check(R.mean(t, dims), dense_mean(a, d, False), t, d)
        if np.dtype(dtype).kind == "c":
            with pytest.raises(TypeError, match="complex"):
                R.amax(t, dims)
        else:
            check(R.amax(t, dims), np.max(a, axis=d), t, d)
            check(R.amin(t, dims), np.min(a, axis=d), t, d)
        check(R.norm(t, 2, dims), dense_norm(a, 2, d, False), t, d)
    assert_unchanged(t, snap)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int8, np.bool_], ids=str)
@pytest.mark.parametrize("layout", ["coo", "csr", "bsc"])
def test_sum_dtype_argument(dtype, layout, rng):
    t, a = make(rng, layout, batch=(2,), dtype=np.int16)
    for dims in [None, (1,), (0, 2)]:
        d = tuple(range(a.ndim)) if dims is None else dims
        r = R.sum(t, dims, dtype=dtype)
        work = np.float32 if np.dtype(dtype) == np.float16 else dtype
        with np.errstate(all="ignore"):
            want = np.sum(a.astype(work), axis=d, dtype=work).astype(dtype)
        check(r, want, t, d, np.dtype(dtype))


def test_sum_dtype_argument_refused_names_the_supported(rng):
    t, _ = make(rng, "csr", dtype=np.float64)
    for bad in (np.uint64, "uint16", np.float128 if hasattr(np, "float128") else "uint32"):
        with pytest.raises(TypeError, match=r"unsupported value dtype \w+; supported: bool, int8, .*, complex128$"):
            R.sum(t, 0, dtype=bad)
    with pytest.raises(TypeError, match="unsupported value dtype"):
        R.sum(t, 0, dtype="not a dtype")


def test_sum_of_int8_is_int64_and_float16_rounds_once(rng):
    t = st.sparse_coo_tensor([[0, 1, 2]], np.array([100, 100, 100], np.int8), size=(3,))
    assert R.sum(t) == 300 and R.sum(t).dtype == np.int64
    h = st.sparse_coo_tensor([list(range(4))], np.array([2048, 1, 1, 1], np.float16), size=(4,))
    assert R.sum(h) == np.float16(2051)  # float16 additions one by one would stay at 2048
    assert R.sum(h).dtype == np.float16


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_nnz_and_zero_size(layout, rng):
    for blocks, nnz, batch, dense in (((2, 3), 0, (2,), (2,)), ((0, 3), 0, (2,), (2,)), ((2, 0), 0, (2,), (2,)),
                                      ((2, 3), 2, (0,), (2,)), ((2, 3), 2, (2,), (0,)), ((2, 3), 2, (0, 2), ()),
                                      ((2, 3), 2, (2, 0), (2,))):
        t, a = make(rng, layout, blocks=blocks, nnz=nnz, batch=batch, dense=dense)
        for dims in all_dim_sets(a.ndim):
            check(R.sum(t, dims), dense_sum(a, dims, False), t, dims)
            if all(a.shape[d] for d in dims):
                check(R.amax(t, dims), np.max(a, axis=dims), t, dims)
            else:
                with pytest.raises(ValueError, match="empty"):
                    R.amax(t, dims)
                with pytest.raises(ValueError):
                    np.max(a, axis=dims)


def test_mean_over_empty_slices(rng):
    t, a = make(rng, "coo", blocks=(0, 3), nnz=0)
    r = R.mean(t, 1)  # dense slices of an empty dim: a dense-able sparse result of no elements
    assert r.shape == (0,)
    with pytest.raises(ValueError, match="NaN"):
        R.mean(t, 0)  # a (3,) sparse result that would be NaN everywhere
    c, a = make(rng, "csr", blocks=(0, 3), nnz=0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_array_equal(R.mean(c, 0), np.mean(a, axis=0))


def test_amax_counts_unspecified_zeros():
    t = st.sparse_csr_tensor([0, 3, 4], [0, 1, 2, 0], [-1.0, -2.0, -3.0, -4.0], size=(2, 3))
    np.testing.assert_array_equal(R.amax(t, 1), [-1.0, 0.0])  # row 0 is full, row 1 has zeros
    np.testing.assert_array_equal(R.amin(t, 0), [-4.0, -2.0, -3.0])
    np.testing.assert_array_equal(R.amax(t, 0), [-1.0, 0.0, 0.0])
    n = st.sparse_coo_tensor([[0, 1]], [np.nan, 1.0], size=(3,))
    assert np.isnan(R.amax(n)) and np.isnan(R.amin(n))


def test_coo_partial_sum_keeps_explicit_zeros_and_is_coalesced():
    t = st.sparse_coo_tensor([[0, 1, 1], [0, 0, 2]], [1.0, -1.0, 5.0], size=(2, 3))
    r = R.sum(t, 0)
    assert r.is_coalesced()
    np.testing.assert_array_equal(r.indices(), [[0, 2]])
    np.testing.assert_array_equal(r.values(), [0.0, 5.0])  # 1 - 1 stays specified, as in torch


def test_batch_only_reduction_of_compressed_keeps_the_layout():
    # (i, j) -> the blocks of a 2 x 2 grid of 2 x 3 blocks; two per batch, unions of three per i
    blocks = {(0, 0): [(0, 0), (1, 1)], (0, 1): [(0, 0), (1, 1)], (0, 2): [(0, 1), (1, 1)],
              (1, 0): [(0, 0), (0, 1)], (1, 1): [(0, 0), (1, 0)], (1, 2): [(0, 0), (1, 0)]}
    a = np.zeros((2, 3, 4, 6))
    for k, ((i, j), bl) in enumerate(blocks.items()):
        for n, (br, bc) in enumerate(bl):
            a[i, j, 2 * br + n % 2, 3 * bc + k % 3] = k - 2.5
    t = st.from_dense(a, "bsr", blocksize=(2, 3), batch_dim=2)
    for fn, want in ((R.sum, a.sum(axis=1)), (R.amax, a.max(axis=1)), (R.amin, a.min(axis=1))):
        r = fn(t, 1)
        assert r.layout is st.sparse_bsr and r.shape == (2, 4, 6) and r.nnz == 3
        r.check_invariants()
        np.testing.assert_array_equal(r.to_dense(), want)
    b = np.zeros((2, 3, 4, 6))
    b[0, :, 0, 0] = 1.0
    b[1, :, 0, 0] = 1.0
    b[1, 1, 0, 0], b[1, 1, 3, 5] = 0.0, 1.0
    r = R.sum(st.from_dense(b, "csr", batch_dim=2), 1)  # unions of 1 and 2 elements: COO
    assert r.layout is st.sparse_coo
    np.testing.assert_array_equal(r.to_dense(), b.sum(1))


@pytest.mark.parametrize("p", [-1, -2.5, -math.inf, 0.5, 2, 4])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_norm_orders(p, layout, rng):
    t, a = make(rng, layout, batch=(2,), dense=(2,))
    for dims in [None, (0,), (1,), (2,), (3,), (1, 2), (0, 3)]:
        d = tuple(range(a.ndim)) if dims is None else dims
        check(R.norm(t, p, dims), dense_norm(a, p, d, False), t, d)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8, np.int64])
def test_norm_of_integers_at_the_ends_of_their_range(dtype):
    """|x| in floats: the int8 -128 counts 128 (NumPy's int8 abs wraps it to -128)."""
    info = np.iinfo(dtype)
    a = np.array([[info.min, 3, 0], [0, info.max, -1 if info.min else 1]], dtype)
    for layout in ("coo", "csr", "bsc"):
        t = st.from_dense(a, layout, blocksize=(1, 1) if layout == "bsc" else None)
        for p in (1, 2, 3, math.inf, 0.5):
            want = np.linalg.norm(a.astype(np.float64).ravel(), p)
            np.testing.assert_allclose(R.norm(t, p), want, rtol=1e-12)
        np.testing.assert_allclose(R.norm(t, 1, 1), np.abs(a.astype(np.float64)).sum(1), rtol=1e-12)


def test_norm_arguments(rng):
    t, _ = make(rng, "csr")
    with pytest.raises(ValueError, match="nuc"):
        R.norm(t, "nuc")
    with pytest.raises(TypeError, match="real number"):
        R.norm(t, 1j)
    with pytest.raises(ValueError, match="NaN"):
        R.norm(t, float("nan"))


def test_dims_arguments(rng):
    t, _ = make(rng, "csr", batch=(2,))
    with pytest.raises(IndexError, match="out of range"):
        R.sum(t, 3)
    with pytest.raises(ValueError, match="repeats"):
        R.sum(t, (1, -2))
    with pytest.raises(TypeError, match="dim"):
        R.sum(t, "rows")
    with pytest.raises(TypeError, match="sparse tensor"):
        R.sum(np.ones(3))
    np.testing.assert_array_equal(R.sum(t, -1), R.sum(t, 2))


def test_unchecked_compressed_input_is_validated(rng):
    with st.check_invariants(False):
        bad = st.sparse_csr_tensor([0, 1, 2], [0, 7], [1.0, 2.0], size=(2, 3))
    for fn in (lambda: R.sum(bad, 0), lambda: R.amax(bad, 1), lambda: R.softmax(bad, 0),
               lambda: R.norm(bad, 2, 0)):
        with pytest.raises(st.InvariantError, match="5.5"):
            fn()
    with st.check_invariants(False):
        bad = st.sparse_coo_tensor([[0, 5]], [1.0, 2.0], size=(3, ))
    with pytest.raises(st.InvariantError, match="C5"):
        R.amax(bad)


# -- PyTorch ---------------------------------------------------------------------------------------------
def _torch_coo(t):
    return torch.sparse_coo_tensor(torch.from_numpy(t.indices().astype(np.int64)), torch.from_numpy(t.values()),
                                   t.shape).coalesce()


@requires_torch
@pytest.mark.parametrize("dense", [(), (3,)], ids=str)
@pytest.mark.parametrize("sparse_dims", [1, 2, 3])
def test_sum_matches_torch_sparse_sum(dense, sparse_dims, rng):
    batch = (2,) * (sparse_dims - 2) if sparse_dims >= 2 else ()
    if sparse_dims == 1:
        a = rng.standard_normal((5,) + dense) * (rng.random((5,) + (1,) * len(dense)) < 0.5)
        t = st.from_dense(a, "coo", dense_dim=len(dense))
    else:
        t, a = make(rng, "coo", batch=batch, dense=dense)
    tt = _torch_coo(t)
    for dims in all_dim_sets(a.ndim):
        if not dims:
            continue
        ours = R.sum(t, dims)
        theirs = torch.sparse.sum(tt, list(dims))
        if theirs.layout == torch.sparse_coo:
            assert isinstance(ours, st.COOTensor)
            theirs = theirs.coalesce()
            np.testing.assert_array_equal(ours.indices(), theirs.indices().numpy())
            np.testing.assert_allclose(ours.values(), theirs.values().numpy())
        else:
            assert isinstance(ours, np.ndarray)
            np.testing.assert_allclose(ours, theirs.numpy())
    np.testing.assert_allclose(R.sum(t), torch.sparse.sum(tt).numpy())


@requires_torch
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_row_and_column_sums_match_torch(layout, rng):
    t, a = make(rng, layout, dtype=np.float64)
    tt = torch.sparse_compressed_tensor(torch.from_numpy(t.compressed_indices()), torch.from_numpy(t.plain_indices()),
                                        torch.from_numpy(t.values()), t.shape,
                                        layout=getattr(torch, f"sparse_{layout}"))
    for dim in (0, 1):
        try:
            theirs = torch.sum(tt, dim, keepdim=True).to_dense().numpy()
        except (RuntimeError, NotImplementedError):
            theirs = a.sum(axis=dim, keepdims=True)  # torch 2.13 sums csr only
        np.testing.assert_allclose(R.sum(t, dim, keepdim=True), theirs)


@requires_torch
@pytest.mark.parametrize("p", ["fro", 1, 2, 3, math.inf, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128], ids=str)
def test_norm_matches_torch(p, dtype, rng):
    t, a = make(rng, "coo", batch=(2,), dense=(2,), dtype=dtype)
    np.testing.assert_allclose(R.norm(t, p), torch.norm(_torch_coo(t), p).numpy(), rtol=1e-5)


@requires_torch
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
def test_softmax_matches_torch_on_coo(log, config, dtype, rng):
    batch, dense = config
    t, a = make(rng, "coo", batch=batch, dense=dense, dtype=dtype)
    u = uncoalesced(rng, t)
    fn, tfn = (R.log_softmax, torch.sparse.log_softmax) if log else (R.softmax, torch.sparse.softmax)
    for dim in range(a.ndim):
        theirs = tfn(_torch_coo(t), dim).coalesce()
        for src in (t, u):
            ours = fn(src, dim)
            ours.check_invariants()
            assert ours.dtype == dtype
            np.testing.assert_array_equal(ours.coalesce().indices(), theirs.indices().numpy())
            np.testing.assert_allclose(ours.coalesce().values(), theirs.values().numpy(), rtol=1e-5, atol=1e-6)


# -- softmax against the dense oracle -----------------------------------------------------------------
@pytest.mark.parametrize("log", [False, True])
@every_variant
def test_softmax_every_dim(log, config, index_dtype, kind, layout, rng):
    t, a = make_variant(rng, layout, config, index_dtype, kind)
    snap = snapshot(t)
    mask = mask_of(t)
    fn = R.log_softmax if log else R.softmax
    for dim in range(-a.ndim, a.ndim):
        r = fn(t, dim)
        r.check_invariants()
        assert r.layout is t.layout and r.shape == t.shape and r.dtype == t.dtype
        if t.is_coalesced():
            assert r.values().shape == t.values().shape
        np.testing.assert_allclose(r.to_dense(), dense_softmax(a, mask, dim, log), rtol=1e-12, atol=1e-12)
    assert_unchanged(t, snap)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_softmax_shares_indices_and_keeps_empty_rows(layout, rng):
    t, a = make(rng, layout, blocks=(5, 4), nnz=3, dense=(2,))
    r = R.softmax(t, -2)
    if layout == "coo":
        assert r.indices() is t.indices()
    else:
        assert r.compressed_indices() is t.compressed_indices() and r.plain_indices() is t.plain_indices()
    assert r.nnz == t.nnz


@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["coo", "csr", "bsc"])
def test_softmax_dtypes(dtype, layout, rng):
    t, a = make(rng, layout, dtype=dtype, batch=(2,))
    mask = mask_of(t)
    if np.dtype(dtype).kind != "f":
        with pytest.raises(TypeError, match="floating"):
            R.softmax(t, -1)
        if np.dtype(dtype).kind != "c":
            r = R.softmax(t, -1, dtype=np.float64)
            np.testing.assert_allclose(r.to_dense(), dense_softmax(a.astype(np.float64), mask, -1, False))
        return
    for dim in range(a.ndim):
        r = R.softmax(t, dim)
        assert r.dtype == dtype
        tol = 2e-3 if dtype == np.float16 else 1e-5
        np.testing.assert_allclose(r.to_dense().astype(np.float64), dense_softmax(a, mask, dim, False),
                                   rtol=tol, atol=tol)


def test_softmax_of_minus_inf_rows_is_nan_like_torch():
    t = st.sparse_coo_tensor([[0, 0, 1], [0, 1, 0]], [-np.inf, -np.inf, 1.0], size=(2, 2))
    r = R.softmax(t, 1)
    assert np.isnan(r.values()[:2]).all() and r.values()[2] == 1.0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_softmax_empty_and_zero_size(layout, rng):
    for blocks, nnz, batch, dense in (((2, 3), 0, (2,), (2,)), ((0, 3), 0, (2,), (2,)), ((3, 0), 0, (2,), (2,)),
                                      ((2, 3), 2, (0,), (2,)), ((2, 3), 2, (2,), (0,)), ((2, 3), 2, (0, 2), ()),
                                      ((2, 3), 2, (2, 0), (2,))):
        t, a = make(rng, layout, blocks=blocks, nnz=nnz, batch=batch, dense=dense)
        for dim in range(a.ndim):
            r = R.log_softmax(t, dim)
            r.check_invariants()
            assert r.nnz == t.nnz and r.shape == t.shape
            np.testing.assert_array_equal(r.to_dense(), dense_softmax(a, mask_of(t), dim, True))


def test_docstrings():
    result = doctest.testmod(R, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 15 and result.failed == 0
    for name in R.__all__:
        assert ">>>" in (getattr(R, name).__doc__ or ""), name


@pytest.mark.parametrize("dense", [(), (3,)], ids=str)
@pytest.mark.parametrize("log", [False, True])
def test_one_sparse_dim(dense, log, rng):
    a = rng.standard_normal((6,) + dense) * (rng.random((6,) + (1,) * len(dense)) < 0.6)
    t = uncoalesced(rng, st.from_dense(a, "coo", dense_dim=len(dense)))
    fn = R.log_softmax if log else R.softmax
    for dim in range(a.ndim):
        r = fn(t, dim)
        r.check_invariants()
        np.testing.assert_allclose(r.to_dense(), dense_softmax(a, mask_of(t), dim, log), atol=1e-12)
        if HAVE_TORCH:
            tfn = torch.sparse.log_softmax if log else torch.sparse.softmax
            np.testing.assert_allclose(r.to_dense(), tfn(_torch_coo(t.coalesce()), dim).to_dense().numpy(),
                                       atol=1e-12)
    for dims in all_dim_sets(a.ndim):
        check(R.amax(t, dims), np.max(a, axis=dims), t, dims)
        check(R.sum(t, dims), a.sum(axis=dims), t, dims)


@pytest.mark.parametrize("blocksize", [(1, 1), (3, 1), (1, 2), (2, 2)], ids=str)
@pytest.mark.parametrize("layout", ["bsr", "bsc"])
def test_block_shapes(blocksize, layout, rng):
    t, a = make(rng, layout, batch=(2,), dense=(2,), blocksize=blocksize, blocks=(3, 3))
    mask = mask_of(t)
    for dims in all_dim_sets(a.ndim):
        check(R.sum(t, dims), dense_sum(a, dims, False), t, dims)
        check(R.amin(t, dims), np.min(a, axis=dims), t, dims)
    for dim in range(a.ndim):
        np.testing.assert_allclose(R.softmax(t, dim).to_dense(), dense_softmax(a, mask, dim, False), atol=1e-12)
        np.testing.assert_allclose(R.softmax(t.mT, dim).to_dense(), dense_softmax(np.swapaxes(a, 1, 2),
                                   np.swapaxes(mask, 1, 2), dim, False), atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_large_inputs_on_several_threads(layout, rng):
    # big enough for the parallel paths of the kernels (and the private-copy scatter)
    t, a = make(rng, layout, batch=(2,), blocks=(300, 200), nnz=20_000,
                blocksize=(2, 2) if layout in ("bsr", "bsc") else (1, 1))
    mask = mask_of(t)
    for threads in (1, 4):
        for dims in [(1,), (2,), (1, 2), (0, 1)]:
            check(R.sum(t, dims, threads=threads), a.sum(axis=dims), t, dims)
            check(R.amax(t, dims, threads=threads), a.max(axis=dims), t, dims)
        for dim in (1, 2):
            np.testing.assert_allclose(R.log_softmax(t, dim, threads=threads).to_dense(),
                                       dense_softmax(a, mask, dim, True), atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int32], ids=str)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64], ids=str)
def test_row_and_column_sums_with_hubs_on_threads(dtype, index_dtype, rng):
    # a hub row (merge-path ranges share it between threads), a hub column, empty rows; csr, csc,
    # and unchecked csr with unsorted rows
    sp = pytest.importorskip("scipy.sparse")
    n, m, nnz = 3000, 2000, 150_000
    rows = np.concatenate([np.full(40_000, 17), rng.integers(0, n // 2, nnz - 40_000)])  # rows >= n/2 empty
    cols = np.where(rng.random(nnz) < 0.2, 5, rng.integers(0, m, nnz))
    vals = (rng.standard_normal(nnz) * 10).astype(dtype) if dtype != np.int32 else rng.integers(-9, 9, nnz).astype(dtype)
    a = sp.csr_array((vals, (rows, cols)), shape=(n, m))
    a.sum_duplicates()
    t = st.sparse_csr_tensor(a.indptr.astype(index_dtype), a.indices.astype(index_dtype), a.data, size=a.shape)
    perm = np.concatenate([rng.permutation(np.arange(a.indptr[i], a.indptr[i + 1])) for i in range(n)])
    with st.check_invariants(False):  # 5.6 broken: repaired (sorted) before the sum
        shuffled = st.sparse_csr_tensor(a.indptr.astype(index_dtype), a.indices[perm].astype(index_dtype),
                                        a.data[perm], size=a.shape)
    want = {0: a.sum(axis=0), 1: a.sum(axis=1)}
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-9)
    for threads in (1, 2, 3):
        for u in (t, t.to_sparse_csc(), shuffled):
            for dim in (0, 1):
                got = R.sum(u, dim, threads=threads)
                assert got.dtype == (np.int64 if dtype == np.int32 else dtype)
                np.testing.assert_allclose(got, want[dim], **tol)


def test_kernel_wrappers_check_their_inputs():
    from sparsetensor._lib import _reduce as K

    x = np.ones((4, 2))
    out = np.empty((2, 2))
    with pytest.raises(ValueError, match="non-decreasing"):
        K.segment_sum(np.array([0, 3, 2], np.int64), np.empty(0, np.int64), x, out, 1)
    with pytest.raises(ValueError, match="non-decreasing"):
        K.segment_sum(np.array([0, 3, 5], np.int64), np.empty(0, np.int64), x, out, 1)
    with pytest.raises(ValueError, match="perm"):
        K.segment_sum(np.array([0, 2, 4], np.int64), np.array([0, 1, 2, 4], np.int64), x, out, 1)
    with pytest.raises(ValueError, match="out of range"):
        K.scatter_reduce(np.array([0, 1, 7, 1], np.int64), x, np.zeros((1, 2, 2)), "sum", 1)
    with pytest.raises(TypeError, match="complex"):
        K.scatter_reduce(np.zeros(4, np.int64), x.astype(complex), np.zeros((1, 2, 2), complex), "max", 1)
    with pytest.raises(ValueError, match="divide"):
        K.segment_softmax(np.array([0, 4], np.int64), np.empty(0, np.int64), np.ones((4, 3)), np.ones((4, 3)), 2,
                          False, 1)


@settings(max_examples=300, deadline=None)
@given(layout=hs.sampled_from(LAYOUTS), seed=hs.integers(0, 2**32 - 1),
       batch=hs.lists(hs.integers(0, 3), max_size=2).map(tuple),
       dense=hs.lists(hs.integers(0, 2), max_size=1).map(tuple),
       blocks=hs.tuples(hs.integers(0, 4), hs.integers(0, 4)), bs=hs.tuples(hs.integers(1, 2), hs.integers(1, 2)),
       dtype=hs.sampled_from([np.float64, np.int32, np.bool_, np.float16, np.complex64]),
       op=hs.sampled_from(["sum", "amax", "mean", "norm", "softmax"]), keepdim=hs.booleans(), data=hs.data())
def test_property_against_dense(layout, seed, batch, dense, blocks, bs, dtype, op, keepdim, data):
    rng = np.random.default_rng(seed)
    nnz = int(rng.integers(0, blocks[0] * blocks[1] + 1))
    t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, blocks=blocks, nnz=nnz,
                blocksize=bs if layout in ("bsr", "bsc") else None)
    if op == "softmax":
        if a.ndim == 0 or np.dtype(dtype).kind != "f":
            return
        dim = data.draw(hs.integers(-a.ndim, a.ndim - 1))
        r = R.softmax(t, dim)
        r.check_invariants()
        np.testing.assert_allclose(r.to_dense().astype(np.float64), dense_softmax(a, mask_of(t), dim, False),
                                   rtol=2e-3, atol=2e-3)
        return
    dims = tuple(sorted(data.draw(hs.sets(hs.integers(0, max(a.ndim - 1, 0)), max_size=a.ndim)))) if a.ndim else ()
    m = getattr(t, "batch_dim", 0)
    batch_dims = [d for d in dims if d < m]
    if batch_dims and len(batch_dims) < m and not any(m <= d < m + 2 for d in dims):
        # a reduction of batch (and dense) dims of a compressed tensor keeps the layout, so the
        # remaining batches' union patterns must have one nnz: otherwise the documented ValueError
        # (see test_batch_only_reduction_of_compressed_keeps_the_layout); norm sums the same way
        fn = {"sum": R.sum, "mean": R.mean, "amax": R.amax, "norm": lambda t, d, k: R.norm(t, 2, d, k)}[op]
        try:
            fn(t, dims, keepdim)
        except ValueError as e:
            if "same" in str(e):
                return
        except TypeError:
            pass  # checked below (complex amax)
    if op == "sum":
        check(R.sum(t, dims, keepdim), dense_sum(a, dims, keepdim), t, dims)
    elif op == "mean":
        sparse_empty = math.prod(a.shape[d] for d in dims) == 0 and expected_kind(t, dims) is not np.ndarray
        if sparse_empty and math.prod(s for d, s in enumerate(a.shape) if d not in dims):
            with pytest.raises(ValueError, match="NaN"):
                R.mean(t, dims, keepdim)
        else:
            check(R.mean(t, dims, keepdim), dense_mean(a, dims, keepdim), t, dims)
    elif op == "norm":
        check(R.norm(t, 2, dims, keepdim), dense_norm(a, 2, dims, keepdim), t, dims)
    elif np.dtype(dtype).kind == "c":
        with pytest.raises(TypeError):
            R.amax(t, dims, keepdim)
    else:
        try:
            want = np.max(a, axis=dims, keepdims=keepdim)
        except ValueError:
            with pytest.raises(ValueError, match="empty"):
                R.amax(t, dims, keepdim)
            return
        check(R.amax(t, dims, keepdim), want, t, dims)


@pytest.mark.parametrize("layout", ["csr", "csc"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
@pytest.mark.parametrize("shape", [(30, 20), (0, 5), (5, 0), (1, 1)])
def test_slot_sums_short_path(layout, dtype, shape):
    """The row sums of csr and column sums of csc (the backend's short path for float values)
    match the general path (keepdim=True takes it) bit for bit, and NumPy; other dtypes and
    dims take the general path; unchecked input is validated first."""
    rng = np.random.default_rng(7)
    d = (rng.random(shape) < 0.3) * rng.integers(1, 9, shape)
    d = d.astype(dtype)
    t = st.from_dense(d, layout)
    for dim in (0, 1, -1, -2):
        got = st.sum(t, dim=dim)
        general = st.sum(t, dim=dim, keepdim=True)
        np.testing.assert_array_equal(got, general.reshape(got.shape))
        want = d.sum(axis=dim, dtype=np.int64 if d.dtype.kind in "biu" else d.dtype)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)
    if t.nnz >= 2:
        c = t.compressed_indices().copy()
        c[1] = c[-1] + 5  # beyond nnz
        bad = st.sparse_compressed_tensor(c, t.plain_indices(), t.values(), t.shape, layout=layout,
                                          check_invariants=False)
        with pytest.raises(st.InvariantError):
            st.sum(bad, dim=1 if layout == "csr" else 0)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_norm_of_complex_infinity_is_inf(dtype):
    a = np.array([[complex(np.inf, 1), 0], [0, 2]], dtype)
    t = st.from_dense(a, "csr")
    for r in (st.norm(t), st.norm(t, 2), t.norm(), st.norm(t, 2, dim=(0, 1))):
        assert np.isinf(r) and r.shape == ()
    n = st.from_dense(np.array([complex(np.nan, 0), 1], dtype), "coo")
    assert np.isnan(st.norm(n))


def test_reductions_of_a_0d_tensor_are_0d_arrays():
    for v in (-3.0, 0.0, 2.5):
        t = st.from_dense(np.array(v), "coo")
        d = np.array(v)
        for got, want in ((t.amax(), d.max()), (t.amin(), d.min()), (st.norm(t, np.inf), abs(d)),
                          (st.norm(t, -np.inf), abs(d)), (st.norm(t, -1), abs(d)), (st.norm(t, 3), abs(d)),
                          (t.sum(), d), (st.mean(t), d)):
            assert type(got) is np.ndarray and got.shape == (), (v, got)
            np.testing.assert_allclose(got, want)
        assert st.norm(t, -2, keepdim=True).shape == ()
    r = st.sparse_coo_tensor(np.zeros((0, 2), np.int64), [1.0, -4.0], size=())  # uncoalesced: one element, -3
    assert r.amax() == -3.0 and r.amin() == -3.0



def test_sum_of_every_element_checks_the_bounds_of_a_never_checked_tensor():
    with st.check_invariants(False):
        broken = [st.sparse_csr_tensor([0, 2], [0, 0], [0.0, 5.0], size=(1, 0)),  # a 1 x 0 matrix holding 2 entries
                  st.sparse_csr_tensor([1, 2, 3, 3], [0, 1, 2], [1.0, 2.0, 3.0], size=(3, 3)),  # 5.1
                  st.sparse_csr_tensor([0, 2, 3, 3], [0, 1, 2, 0], [1.0, 2.0, 3.0, 4.0], size=(3, 3)),  # 5.2
                  st.sparse_csr_tensor([0, 3, 1, 4], [0, 1, 2, 0], [1.0, 2.0, 3.0, 4.0], size=(3, 3)),  # 5.3
                  st.sparse_coo_tensor([[3, 1], [2, -2]], [1.0, 4.0], size=(2, 3))]  # C5, C4
        repeats = st.sparse_csr_tensor([0, 2, 2], [1, 1], [1.0, 5.0], size=(2, 2))  # 5.6 only: summed
        flagged = st.sparse_coo_tensor([[1, 0]], [1.0, 2.0], size=(2,), is_coalesced=True)  # C6 only: summed
    for bad in broken:
        for f in (lambda t: t.sum(), np.sum, st.mean):
            with pytest.raises(st.InvariantError):
                f(bad)
    assert repeats.sum() == 6.0 and np.sum(repeats) == 6.0 and flagged.sum() == 3.0


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
def test_batch_reduction_whose_batches_differ_in_nnz_is_coo(name, layout):
    """A reduction over a batch dim whose kept batches would hold different nnz is the COO tensor
    (it raised the conversion's 'every batch ... must have the same nnz' ValueError)."""
    d = unequal_batch_unions()
    t = st.from_dense(d, layout, batch_dim=2, **({"blocksize": (2, 2)} if layout == "bsr" else {}))
    r = getattr(st, name)(t, 0)
    assert r.layout is st.sparse_coo and r.shape == (2, 4, 4)
    want = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}[name](d, 0)
    np.testing.assert_allclose(r.to_dense(), want)
    r.check_invariants()
    same = getattr(st, name)(t, (0, 1))  # no batch left: the layout is kept
    assert same.layout is t.layout
    np.testing.assert_allclose(same.to_dense(), {"sum": np.sum, "mean": np.mean, "amax": np.max,
                                                 "amin": np.min}[name](d, (0, 1)))
