"""Pointwise functions and the NumPy ufunc protocol (sparsetensor.ops.pointwise).

Oracles: the same function on the dense array (``f(t).to_dense() == f(t.to_dense())``),
PyTorch 2.13's sparse pointwise ops on COO/CSR/BSR, and the rule that a function is
applied sparsely exactly when it maps 0 to 0. Every result is checked against all
invariants, and inputs must come out unmodified.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import sparsetensor as st
from conftest import (HAVE_TORCH, INDEX_DTYPES, LAYOUTS, VALUE_DTYPES, assert_unchanged, random_dense, requires_torch,
                      snapshot)
from sparsetensor.ops import pointwise as pw
from sparsetensor.ops.pointwise import array_ufunc

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")

BLOCKED = ("bsr", "bsc")
# (batch, dense) dims; for coo the batch dims are leading sparse dims
CONFIGS = [((), ()), ((2,), ()), ((), (2,)), ((2,), (3,))]
VARIANTS = ["plain", "uncoalesced", "transposed"]


# -- shared builders (test_reduce.py uses them too) ---------------------------------------------------
def make(rng, layout, *, batch=(), dense=(), dtype=np.float64, index_dtype=np.int64, blocksize=None, nnz=None,
         blocks=(3, 4)):
    """A random tensor of ``layout`` and the dense array it represents."""
    bs = blocksize or ((2, 3) if layout in BLOCKED else (1, 1))
    a = random_dense(rng, batch=batch, blocks=blocks, blocksize=bs, dense=dense, dtype=dtype, nnz=nnz)
    if layout == "coo":
        t = st.from_dense(a, "coo", dense_dim=len(dense), index_dtype=index_dtype)
    else:
        t = st.from_dense(a, layout, blocksize=bs if layout in BLOCKED else None, batch_dim=len(batch),
                          dense_dim=len(dense), index_dtype=index_dtype)
    return t, a


def uncoalesced(rng, t):
    """The COO tensor ``t`` with some entries split into two duplicates, in shuffled order."""
    idx, v = t.indices(), t.values()
    n = t.nnz
    pick = rng.choice(n, size=n // 2, replace=False) if n else np.empty(0, np.int64)
    part = np.zeros_like(v[pick])
    if v.dtype == np.bool_:
        part[...] = True
    else:
        part[...] = 1 if v.dtype.kind in "iu" else 0.25
    v1 = v.copy()
    if v.dtype != np.bool_:
        v1[pick] = v[pick] - part
    idx2 = np.concatenate([idx, idx[:, pick]], axis=1)
    v2 = np.concatenate([v1, part])
    order = rng.permutation(idx2.shape[1])
    return st.sparse_coo_tensor(idx2[:, order], v2[order], t.shape)


def variant(rng, t, a, kind):
    """``t`` (and its dense array) as an uncoalesced/unchecked or transposed tensor."""
    if kind == "plain":
        return t, a
    if kind == "uncoalesced":
        if t.layout is st.sparse_coo:
            return uncoalesced(rng, t), a
        # a compressed tensor built without checking: not known to be canonical
        with st.check_invariants(False):
            u = st.sparse_compressed_tensor(t.compressed_indices(), t.plain_indices(), t.values(), t.shape,
                                            layout=t.layout)
        assert not u.is_coalesced()
        return u, a
    # transposed: the sparse-dims transpose (a view with block-transposed values for bsr/bsc)
    if t.layout is st.sparse_coo:
        S = t.sparse_dim
        if S < 2:
            return t, a
        return t.transpose(S - 2, S - 1), np.swapaxes(a, S - 2, S - 1)
    m = t.batch_dim
    return t.mT, np.swapaxes(a, m, m + 1)


def every_variant(test):
    """Parametrise ``test`` over config (CONFIGS), index_dtype, kind (VARIANTS) and layout."""
    test = pytest.mark.parametrize("layout", LAYOUTS)(test)
    test = pytest.mark.parametrize("kind", VARIANTS)(test)
    test = pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)(test)
    return pytest.mark.parametrize("config", CONFIGS, ids=str)(test)


def make_variant(rng, layout, config, index_dtype, kind, dtype=np.float64):
    """:func:`make` with (batch, dense) dims ``config``, then :func:`variant` ``kind`` of it."""
    batch, dense = config
    t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype)
    return variant(rng, t, a, kind)


def assert_same_pattern(r, t):
    """``r`` has ``t``'s layout, shape and index arrays (the very same arrays)."""
    assert r.layout is t.layout and r.shape == t.shape
    if t.layout is st.sparse_coo:
        assert r.indices() is t.indices()
    else:
        assert r.compressed_indices() is t.compressed_indices() and r.plain_indices() is t.plain_indices()


def assert_close(got, want, dtype=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == dtype, (got.dtype, dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 2e-3 if np.dtype(got.dtype) in (np.float16, np.complex64, np.float32) else 1e-10
        if np.dtype(got.dtype) in (np.float32, np.complex64):
            tol = 1e-5
        np.testing.assert_allclose(got.astype(np.complex128 if got.dtype.kind == "c" else np.float64),
                                   want.astype(np.complex128 if want.dtype.kind == "c" else np.float64),
                                   rtol=tol, atol=tol, equal_nan=True)


# -- the functions and their dense oracles -----------------------------------------------------------------
def _frac(x):
    return x - np.trunc(x)


# name -> (dense oracle, dtypes it refuses with TypeError: predicate on the dtype)
def _refuses_none(dtype):
    return False


FUNCS = {
    **{name: (fn, _refuses_none) for name, fn in [
        ("abs", np.abs), ("sqrt", np.sqrt), ("square", np.square), ("sin", np.sin), ("sinh", np.sinh),
        ("tan", np.tan), ("tanh", np.tanh), ("asin", np.arcsin), ("asinh", np.arcsinh), ("atan", np.arctan),
        ("atanh", np.arctanh), ("expm1", np.expm1), ("log1p", np.log1p)]},
    "deg2rad": (np.deg2rad, lambda d: d.kind == "c"),
    "rad2deg": (np.rad2deg, lambda d: d.kind == "c"),
    "neg": (np.negative, lambda d: d == np.bool_),
    "sign": (lambda x: x.copy() if x.dtype == np.bool_ else np.sign(x), lambda d: d.kind == "c"),
    "sgn": (lambda x: x.copy() if x.dtype == np.bool_ else np.sign(x), _refuses_none),
    "ceil": (np.ceil, lambda d: d.kind == "c"),
    "floor": (np.floor, lambda d: d.kind == "c"),
    "trunc": (np.trunc, lambda d: d.kind == "c"),
    "round": (lambda x: x.copy() if x.dtype.kind in "biu" else np.round(x), _refuses_none),
    "frac": (_frac, lambda d: d.kind != "f"),
    "relu": (lambda x: x.copy() if x.dtype.kind in "bu" else np.maximum(x, np.zeros((), x.dtype)),
             lambda d: d.kind == "c"),
    "conj": (lambda x: np.conj(x) if x.dtype.kind == "c" else x, _refuses_none),  # real: the tensor itself
    "real": (lambda x: np.real(x) if x.dtype.kind == "c" else x, _refuses_none),
    "imag": (np.imag, lambda d: d.kind != "c"),
}
LINEAR = {"neg", "conj", "real", "imag"}


def _call(name, t):
    with np.errstate(all="ignore"):
        return getattr(pw, name)(t)


def _dense(fn, a):
    with np.errstate(all="ignore"):
        return fn(a)


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_function_matches_dense(name, dtype, layout, rng):
    fn, refuses = FUNCS[name]
    t, a = make(rng, layout, batch=(2,), dense=(2,), dtype=dtype, index_dtype=np.int32)
    snap = snapshot(t)
    if refuses(np.dtype(dtype)):
        with pytest.raises(TypeError, match=name):
            _call(name, t)
        return
    r = _call(name, t)
    want = _dense(fn, a)
    if name in ("conj", "real") and np.dtype(dtype).kind != "c":
        assert r is t  # torch returns the tensor itself
    else:
        assert_same_pattern(r, t)
        r.check_invariants()
    assert_close(r.to_dense(), want, want.dtype)
    assert_unchanged(t, snap)


@pytest.mark.parametrize("name", ["abs", "sqrt", "sin", "neg", "relu", "round", "imag", "conj"])
@every_variant
def test_function_layouts_and_dims(name, config, index_dtype, kind, layout, rng):
    dtype = np.complex128 if name in ("imag", "conj") else np.float64
    t, a = make_variant(rng, layout, config, index_dtype, kind, dtype)
    snap = snapshot(t)
    r = _call(name, t)
    r.check_invariants()
    assert r.index_dtype == index_dtype
    assert_close(r.to_dense(), _dense(FUNCS[name][0], a))
    assert_unchanged(t, snap)
    if t.is_coalesced() or name in LINEAR:
        assert_same_pattern(r, t)
    else:  # applied to the coalesced tensor: duplicates are summed first (coo.mT is not coalesced)
        assert r.is_coalesced()


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_duplicates_are_summed_before_nonlinear_functions(layout):
    # abs(-1 + 2) = 1, not abs(-1) + abs(2) = 3
    if layout == "coo":
        t = st.sparse_coo_tensor([[0, 0, 1], [1, 1, 0]], [-1.0, 2.0, -3.0], size=(2, 2))
    else:
        with st.check_invariants(False):
            t = st.sparse_csr_tensor([0, 2, 3], [1, 1, 0], [-1.0, 2.0, -3.0], size=(2, 2))
    np.testing.assert_array_equal(pw.abs(t).to_dense(), [[0, 1], [3, 0]])
    np.testing.assert_array_equal(pw.neg(t).to_dense(), [[0, -1], [3, 0]])
    assert pw.abs(t).is_coalesced()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.bool_], ids=str)
def test_comparisons_with_a_scalar(layout, dtype, rng):
    t, a = make(rng, layout, dtype=dtype, dense=(2,), batch=(2,) if layout != "coo" else ())
    before = snapshot(t)
    cases = [(lambda x: x > 0, np.greater, 0), (lambda x: x > 0.1, np.greater, 0.1), (lambda x: x < -1, np.less, -1),
             (lambda x: 0.5 < x, np.greater, 0.5), (lambda x: x <= -0.25, np.less_equal, -0.25),
             (lambda x: x >= 1, np.greater_equal, 1)]
    for op, ufunc, s in cases:
        if dtype == np.uint8 and s < 0:
            continue  # NumPy 2's comparison of a uint8 array with a negative Python int: constant
        r = op(t)
        assert r.dtype == np.bool_ and r.layout is t.layout and r.shape == t.shape
        np.testing.assert_array_equal(r.to_dense(), ufunc(a, s))
    for op in (lambda x: x >= 0, lambda x: x < 1, lambda x: x <= 0):
        with pytest.raises(ValueError, match="dense"):
            op(t)
    assert_unchanged(t, before)


def test_comparisons_refuse_other_operands_and_complex(rng):
    t, a = make(rng, "csr")
    for other in (np.ones(t.shape), t, [1.0]):
        with pytest.raises(TypeError, match="scalar only"):
            t > other
    with pytest.raises(TypeError, match="no order"):
        t.astype(np.complex64) > 1
    c = st.sparse_coo_tensor([[0, 0, 1]], [0.3, 0.3, 0.4], size=(3,))  # repeats compare after their sum
    np.testing.assert_array_equal((c > 0.5).to_dense(), [True, False, False])
    f = st.from_dense(np.array([0.1, 0.0], np.float32), "coo")  # 0.1 compares as float32, as NumPy's
    np.testing.assert_array_equal((f > 0.1).to_dense(), np.array([0.1, 0.0], np.float32) > 0.1)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_empty_and_zero_size(layout, shape, rng):
    t, a = make(rng, layout, blocks=shape, nnz=0)
    for name in ("abs", "sqrt", "neg", "relu"):
        r = _call(name, t)
        r.check_invariants()
        assert r.shape == a.shape and r.nnz == 0
    t, a = make(rng, layout, blocks=(2, 3), nnz=0, dense=(2,), batch=(2,))
    r = pw.pow(t, 3)
    r.check_invariants()
    assert r.nnz == 0 and (r.to_dense() == 0).all()


@pytest.mark.parametrize("exponent", [1, 2, 3, 0.5, 2.5, np.float32(2), np.int64(3)])
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["coo", "csr", "bsc"])
def test_pow(exponent, dtype, layout, rng):
    t, a = make(rng, layout, dtype=dtype, dense=(2,))
    with np.errstate(all="ignore"):
        want = np.power(a, exponent)
        r = pw.pow(t, exponent)
    r.check_invariants()
    assert_same_pattern(r, t)
    assert_close(r.to_dense(), want, want.dtype)


@pytest.mark.parametrize("exponent", [0, -1, -0.5, 0.0, float("nan"), float("-inf")])
def test_pow_refuses_exponents_that_are_not_zero_preserving(exponent, rng):
    t, _ = make(rng, "csr")
    with pytest.raises(ValueError, match="not zero-preserving"):
        pw.pow(t, exponent)


@pytest.mark.parametrize("exponent", [1j, True, np.array([2.0]), "2"])
def test_pow_refuses_non_real_exponents(exponent, rng):
    t, _ = make(rng, "coo")
    with pytest.raises(TypeError, match="real scalar"):
        pw.pow(t, exponent)


@pytest.mark.parametrize("name", ["exp", "exp2", "cos", "cosh", "acos", "acosh", "log", "log2", "log10",
                                  "sigmoid", "rsqrt", "reciprocal"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_functions_that_are_not_zero_preserving_raise(name, layout, rng):
    t, _ = make(rng, layout)
    with pytest.raises(ValueError, match=rf"{name} is not zero-preserving.*to_dense"):
        getattr(pw, name)(t)


def test_non_tensor_input_is_a_type_error():
    with pytest.raises(TypeError, match="sparse tensor"):
        pw.abs(np.ones(3))
    with pytest.raises(TypeError, match="sparse tensor"):
        pw.exp([1.0])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_parts(dtype, rng):
    t, a = make(rng, "bsr", dtype=dtype, dense=(2,), batch=(2,))
    for fn, want in ((pw.real, a.real), (pw.imag, a.imag), (pw.abs, np.abs(a))):
        r = fn(t)
        assert r.dtype == np.dtype(dtype).type(0).real.dtype
        assert r.values().flags.c_contiguous
        assert not np.shares_memory(r.values(), t.values())
        r.check_invariants()
        assert_close(r.to_dense(), want, want.dtype)
    np.testing.assert_allclose(pw.sgn(t).to_dense(), np.sign(a))


# -- PyTorch as an oracle ------------------------------------------------------------------------------------
if HAVE_TORCH:
    import torch

TORCH_SUPPORTS = {  # sparse layouts for which torch 2.13 implements the function
    "coo": set(FUNCS) - {"real", "imag"} | {"pow"},
    "csr": set(FUNCS) - {"real", "imag", "square"},
    "bsr": set(FUNCS) - {"real", "imag", "square"},
}


def _to_torch(t):
    if t.layout is st.sparse_coo:
        return torch.sparse_coo_tensor(torch.from_numpy(t.indices().astype(np.int64)),
                                       torch.from_numpy(t.values()), t.shape)
    return torch.sparse_compressed_tensor(torch.from_numpy(t.compressed_indices()),
                                          torch.from_numpy(t.plain_indices()),
                                          torch.from_numpy(np.ascontiguousarray(t.values())), t.shape,
                                          layout={"csr": torch.sparse_csr, "bsr": torch.sparse_bsr}[t.layout.name])


@requires_torch
@pytest.mark.parametrize("layout", sorted(TORCH_SUPPORTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_matches_torch(layout, dtype, rng):
    t, _ = make(rng, layout, batch=(2,) if layout != "coo" else (), dtype=dtype)
    tt = _to_torch(t)
    refused = set()
    for name in sorted(TORCH_SUPPORTS[layout]):
        if name == "pow":
            with np.errstate(all="ignore"):
                ours = pw.pow(t, 3).to_dense()
            theirs = torch.pow(tt, 3)
        else:
            if FUNCS[name][1](np.dtype(dtype)):
                continue
            ours = _call(name, t).to_dense()
            try:
                theirs = getattr(torch, name)(tt)
            except (NotImplementedError, RuntimeError):
                refused.add(name)  # NumPy's definition is used here
                continue
        theirs = theirs.to_dense().numpy() if theirs.layout != torch.strided else theirs.numpy()
        assert_close(ours, theirs)
    assert refused <= TORCH_REFUSES_COMPLEX if np.dtype(dtype).kind == "c" else not refused, refused


# complex functions that torch 2.13 refuses on sparse tensors and NumPy defines
TORCH_REFUSES_COMPLEX = {"round"}


# -- the ufunc protocol ------------------------------------------------------------------------------------
UNARY_UFUNCS = sorted((u for u in vars(np).values() if isinstance(u, np.ufunc) and u.nin == 1),
                      key=lambda u: u.__name__)


@pytest.mark.parametrize("ufunc", UNARY_UFUNCS, ids=lambda u: u.__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex64, np.bool_], ids=str)
def test_unary_ufuncs_are_sparse_exactly_when_zero_preserving(ufunc, dtype, rng):
    t, a = make(rng, "csr", dtype=dtype, batch=(2,))
    with np.errstate(all="ignore"):
        try:
            zero = ufunc(np.zeros((), dtype))
            want = ufunc(a)
        except TypeError:
            with pytest.raises(TypeError):
                array_ufunc(t, ufunc, "__call__", t)
            return
    zero = zero if isinstance(zero, tuple) else (zero,)
    want = want if isinstance(want, tuple) else (want,)
    preserving = all(bool(np.asarray(z == 0)) for z in zero)
    if not preserving:
        with pytest.raises(ValueError, match=f"np.{ufunc.__name__} is not zero-preserving"):
            array_ufunc(t, ufunc, "__call__", t)
        return
    if any(np.dtype(w.dtype) not in st.VALUE_DTYPES for w in want):
        with pytest.raises(TypeError, match="not a supported value dtype"):
            array_ufunc(t, ufunc, "__call__", t)
        return
    with np.errstate(all="ignore"):
        got = array_ufunc(t, ufunc, "__call__", t)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        g.check_invariants()
        assert_same_pattern(g, t)
        assert_close(g.to_dense(), w, w.dtype)


SCALAR_CASES = [
    (np.multiply, 2, True, True), (np.multiply, 2.5, False, True), (np.multiply, np.inf, True, False),
    (np.true_divide, 4, True, True), (np.true_divide, 0, True, False), (np.true_divide, 2, False, False),
    (np.add, 0, True, True), (np.add, 1, True, False), (np.subtract, 0, False, True),
    (np.power, 2, True, True), (np.power, 0, True, False), (np.maximum, 0, True, True),
    (np.maximum, 1, True, False), (np.minimum, 0, False, True), (np.greater, 0, True, True),
    (np.equal, 0, True, False), (np.floor_divide, 3, True, True), (np.remainder, 3, True, True),
    (np.multiply, np.float32(3), True, True), (np.multiply, np.array(3.0), False, True),
]


@pytest.mark.parametrize("ufunc,scalar,first,ok", SCALAR_CASES, ids=lambda x: getattr(x, "__name__", repr(x)))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=str)
def test_scalar_ufuncs(ufunc, scalar, first, ok, layout, dtype, rng):
    t, a = make(rng, layout, dtype=dtype, dense=(2,))
    args = (t, scalar) if first else (scalar, t)
    if not ok:  # np.add/np.subtract with a nonzero scalar: the operators' NotImplementedError
        err = (NotImplementedError, "nonzero scalar") if ufunc in (np.add, np.subtract) else (ValueError,
                                                                                             "not zero-preserving")
        with pytest.raises(err[0], match=err[1]):
            array_ufunc(t, ufunc, "__call__", *args)
        return
    with np.errstate(all="ignore"):
        want = ufunc(a, scalar) if first else ufunc(scalar, a)
        got = array_ufunc(t, ufunc, "__call__", *args)
    got.check_invariants()
    assert_same_pattern(got, t)
    assert_close(got.to_dense(), want, want.dtype)


def test_scaling_keeps_duplicates_of_uncoalesced_coo(rng):
    t, a = make(rng, "coo", nnz=6)
    u = uncoalesced(rng, t)
    for args in ((u, 3.0), (3.0, u), (u, np.float32(3)), (np.float32(3), u)):  # either order: s * t is t * s
        r = array_ufunc(u, np.multiply, "__call__", *args)
        assert r.indices() is u.indices() and not r.is_coalesced()
        np.testing.assert_allclose(r.to_dense(), 3 * a)
    assert (np.float32(3) * u).indices() is u.indices()
    d = array_ufunc(u, np.true_divide, "__call__", u, 4.0)
    assert d.indices() is u.indices()
    s = pw._scale(u, 4.0, divide=True)
    np.testing.assert_allclose(s.to_dense(), a / 4)
    with pytest.raises(ValueError, match="not zero-preserving"):
        pw._scale(u, 0.0, divide=True)


def test_ufunc_keywords(rng):
    t, a = make(rng, "csr", dtype=np.float64)
    with np.errstate(invalid="ignore"):
        r = array_ufunc(t, np.sqrt, "__call__", t, dtype=np.float32)
    assert r.dtype == np.float32
    with pytest.raises(TypeError, match="out="):
        array_ufunc(t, np.sqrt, "__call__", t, out=(np.empty(a.shape),))
    with pytest.raises(TypeError, match=r"np\.sqrt\(csr tensor.*where= has no sparse meaning"):
        array_ufunc(t, np.sqrt, "__call__", t, where=True)
    with pytest.raises(TypeError, match=r"np\.add\.accumulate\(csr tensor.*ufunc methods"):
        array_ufunc(t, np.add, "accumulate", t)
    with pytest.raises(TypeError, match=r"np\.sqrt\.at\(csr tensor of shape .*, list\)"):
        array_ufunc(t, np.sqrt, "at", t, [0])


def test_ufunc_result_dtype_must_be_a_value_dtype(rng):
    t, _ = make(rng, "coo", dtype=np.uint8)
    with pytest.raises(TypeError, match="uint64"):
        array_ufunc(t, np.multiply, "__call__", t, np.uint64(2))


@pytest.mark.parametrize("ufunc,name", [(np.add, "sum"), (np.maximum, "amax"), (np.minimum, "amin")])
@pytest.mark.parametrize("axis", ["default", None, 0, 1, (0, 1)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ufunc_reduce_routes_to_reductions(ufunc, name, axis, layout, rng):
    t, a = make(rng, layout, dtype=np.float64)
    kw = {} if axis == "default" else {"axis": axis}
    got = array_ufunc(t, ufunc, "reduce", t, **kw)
    want = ufunc.reduce(a, **kw)
    got = got.to_dense() if isinstance(got, st.SparseTensor) else got
    assert_close(got, want)
    kd = array_ufunc(t, ufunc, "reduce", t, keepdims=True, **kw)
    assert kd.shape == ufunc.reduce(a, keepdims=True, **kw).shape


def test_ufunc_reduce_unsupported(rng):
    t, _ = make(rng, "csr")
    for args, kw, why in (((np.multiply, "reduce", t), {}, "only np.add, np.maximum and np.minimum reduce"),
                          ((np.add, "reduce", t), {"initial": 1.0}, "initial= has no sparse meaning"),
                          ((np.maximum, "reduce", t), {"dtype": np.float32}, "dtype= is taken by np.add.reduce")):
        with pytest.raises(TypeError, match=why):
            array_ufunc(t, *args, **kw)


def test_two_tensor_operands_go_to_ops_binary(rng):
    t, a = make(rng, "csr")
    try:
        from sparsetensor.ops import binary
    except ImportError:
        binary = None
    for other in (t, a):
        got = array_ufunc(t, np.add, "__call__", t, other)
        if binary is None or not hasattr(binary, "add"):
            assert got is NotImplemented
        else:
            np.testing.assert_allclose(np.asarray(got.to_dense() if isinstance(got, st.SparseTensor) else got),
                                       a + a)
    with pytest.raises(TypeError, match=r"np\.arctan2\(csr tensor"):
        array_ufunc(t, np.arctan2, "__call__", t, t)


class _UfuncCOO(st.COOTensor):
    """A COO tensor wired to the protocol, as _tensor.py will wire every class."""

    __slots__ = ()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return array_ufunc(self, ufunc, method, *inputs, **kwargs)


def test_protocol_end_to_end(rng):
    t0, a = make(rng, "coo", dtype=np.float64, batch=(2,))
    t = _UfuncCOO(t0.indices(), t0.values(), t0.shape, t0.is_coalesced())
    np.testing.assert_allclose(np.abs(t).to_dense(), np.abs(a))
    np.testing.assert_allclose(np.multiply(2, t).to_dense(), 2 * a)
    np.testing.assert_allclose(np.add.reduce(t, axis=None), a.sum())
    frac, whole = np.modf(t)
    np.testing.assert_allclose(frac.to_dense() + whole.to_dense(), a)
    with pytest.raises(ValueError, match="np.exp is not zero-preserving"):
        np.exp(t)
    with pytest.raises(TypeError):
        np.sqrt(t, out=np.empty(a.shape))
    with pytest.raises(TypeError):
        np.add.accumulate(t)


def test_docstrings():
    result = doctest.testmod(pw, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 30 and result.failed == 0
    for name in pw.__all__:
        doc = getattr(pw, name).__doc__ or ""
        assert ">>>" in doc, name
