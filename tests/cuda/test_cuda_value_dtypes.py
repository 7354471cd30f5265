"""Integer and bool values on CUDA tensors, against the CPU result of the same tensor: the
pointwise functions (integer results, and NumPy's float results of integers), scaling and
powers by scalars (NumPy 2's result dtypes, a float64 scalar included), sums and products of
two tensors and of a tensor and a dense array, the products with dense operands (``matmul``,
``mv``, ``addmm``, ``linear``, ``hspmm``, ``smm``, ``sspaddmm``, SciPy's ``matvec`` family),
coalescing duplicates, and the wrapping of integer arithmetic.

Every layout x batch/dense shape of :data:`cuda_support.CASES` x bool, int8, uint8, int16,
int32, int64 (float32 for the scalar promotions); results must match exactly (dtype, indices,
values); where the CPU raises, the device raises the same error. Runs on a GPU or on the kernel
emulator (see test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import CASE_IDS, CASES, assert_same, make

INTS = [np.dtype(d) for d in ("bool", "int8", "uint8", "int16", "int32", "int64")]
MATRICES = [c for c in CASES if not c[1] and not c[2]]
MATRIX_IDS = [i for c, i in zip(CASES, CASE_IDS) if not c[1] and not c[2]]


def int_tensor(rng, case, dtype, index_dtype=np.int32, nnz=None):
    """A random CPU tensor of ``case`` whose values span ``dtype``'s range (wrapping products)."""
    t = make(rng, case, np.float64, index_dtype, nnz=nnz)
    shape = np.shape(t.values())
    if dtype == np.bool_:
        v = rng.random(shape) < 0.7
    else:
        info = np.iinfo(dtype)
        lo, hi = max(int(info.min), -(1 << 40)), min(int(info.max), 1 << 40)
        v = np.where(rng.random(shape) < 0.5, rng.integers(-9, 10, shape), rng.integers(lo, hi, shape))
        v = v.astype(np.int64).clip(lo, hi)
    return t._replace_values(np.ascontiguousarray(v.astype(dtype)))


def on_device(x):
    if isinstance(x, st.SparseTensor):
        return x.cuda()
    if isinstance(x, np.ndarray):
        return DeviceArray.from_host(x)
    return x


def same(call, *args):
    """``call(*args)`` on the CPU and on the device copies of the arguments: equal results (sparse:
    members bitwise; dense: dtype, shape, values exactly) or the same error (type and message)."""
    try:
        with np.errstate(all="ignore"):
            want = call(*args)
    except Exception as e:  # the CPU's error, to be met on the device
        with pytest.raises(type(e)) as got:
            call(*(on_device(a) for a in args))
        assert str(got.value).replace(" on cuda:0", "") == str(e)  # operands are described with their device
        return None
    got = call(*(on_device(a) for a in args))
    if isinstance(want, st.SparseTensor):
        assert got.device == "cuda:0"
        assert_same(got, want, exact=want.dtype.kind not in "fc")
        if want.dtype.kind in "fc":  # NumPy's float results: the device's math library, to a few ulps
            np.testing.assert_allclose(got.values().get(), np.asarray(want.values()), rtol=2e-3 if
                                       want.dtype == np.float16 else 1e-6)
    else:
        x, w = got.get(), np.asarray(want)
        assert x.dtype == w.dtype and x.shape == w.shape, (x.dtype, w.dtype, x.shape, w.shape)
        if w.dtype.kind in "fc":  # sums in another order
            tol = {2: 2e-3, 4: 1e-5, 8: 1e-12}[np.finfo(w.dtype).bits // 8]
            np.testing.assert_allclose(x, w, rtol=tol, atol=tol)
        else:
            assert np.array_equal(x, w), (x, w)
    return want


UNARY = ["abs", "neg", "sign", "sgn", "square", "ceil", "floor", "trunc", "round", "relu", "conj", "frac",
         "sqrt", "sin", "tanh", "expm1", "log1p", "deg2rad"]
SCALARS = [("mul", 3), ("mul", -1), ("mul", 200), ("mul", True), ("mul", 2.5), ("mul", np.float64(2)),
           ("mul", np.int16(3)), ("div", 2), ("div", 0.5), ("pow", 2), ("pow", 3), ("pow", 0.5), ("pow", 0)]


@pytest.mark.parametrize("dtype", INTS + [np.dtype(np.float32)], ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_pointwise_and_scalars(backend, rng, case, dtype):
    t = int_tensor(rng, case, dtype) if dtype.kind in "biu" else make(rng, case, dtype, np.int32)
    for name in UNARY:
        same(getattr(st, name), t)
    same(lambda x: -x, t)
    same(lambda x: abs(x), t)
    for op, s in SCALARS:
        same(getattr(st, op) if op != "pow" else st.pow, t, s)
    same(lambda x: x * 3, t)
    same(lambda x: 2 * x, t)
    same(lambda x: x / 4, t)
    same(lambda x: x ** 2, t)


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_two_tensors_and_dense_operands(backend, rng, case, dtype):
    a = int_tensor(rng, case, dtype)
    b = int_tensor(rng, case, dtype)
    for op in ("add", "sub", "mul", "maximum", "minimum"):
        same(getattr(st, op), a, a)
        if not case[1]:  # batched compressed operands need one nnz per batch: one pattern suffices there
            same(getattr(st, op), a, b)
    same(lambda x, y: st.add(x, y, alpha=3), a, a)
    dense = b.to_dense()
    for op in ("add", "sub", "mul", "div"):
        same(getattr(st, op), a, dense)
    same(st.add, dense, a)
    same(st.sum, a)


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("case", MATRICES, ids=MATRIX_IDS)
def test_products_with_dense_operands(backend, rng, case, dtype):
    t = int_tensor(rng, case, dtype)
    M, K = t.shape
    vec = int_tensor(rng, ("coo", (), (), None), dtype).to_dense().ravel()[:1]  # one value of the dtype's range
    x = np.resize(np.concatenate([vec, np.arange(K, dtype=np.int64).astype(dtype)]), (K, 3))
    y = np.resize(np.arange(M * 3, dtype=np.int64).astype(dtype), (M, 3))
    same(st.matmul, t, x)
    same(st.matmul, t, x[:, 0].copy())
    same(st.mv, t, x[:, 0].copy())
    same(lambda s, d, inp: st.addmm(inp, s, d, beta=2, alpha=3), t, x, y)
    same(lambda s, w: st.linear(w, s), t, x.T.copy())
    same(st.hspmm, t.to_sparse_csr() if case[0] in ("csr", "coo") else t, x)
    same(st.smm, t.to_sparse_csr() if case[0] in ("csr", "coo") else t, x)
    same(lambda s, d: s.matvec(d), t, x[:, 0].copy())
    same(lambda s, d: s.rmatmat(d), t, y)


def test_integer_products_wrap_as_numpy(backend, rng):
    """int8 sums of products and powers overflow: the device's bits are NumPy's."""
    a = np.array([[100, 100, 0], [0, -128, 127]], np.int8)
    t = st.from_dense(a, "csr")
    x = np.full((3, 2), 3, np.int8)
    same(st.matmul, t, x)
    same(st.square, t)
    same(st.pow, t, 5)
    same(lambda s: s * 77, t)
    same(st.abs, t)  # abs(-128) is -128
    same(st.neg, t)
    u = st.from_dense(np.array([[0, 255, 3]], np.uint8), "coo")
    same(st.neg, u)
    same(lambda s: s * 200, u)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_coalescing_duplicates(backend, rng, dtype):
    """Duplicates of integer values sum, wrapping (bool: or); 300 copies of True stay True."""
    idx = np.array([[0, 0, 2, 1, 2, 0], [1, 1, 0, 2, 0, 1]])
    vals = int_tensor(rng, ("coo", (), (), None), dtype, nnz=6).values()[:6]
    vals = np.resize(vals, 6).astype(dtype)
    t = st.sparse_coo_tensor(idx, vals, size=(3, 3))
    same(lambda s: s.coalesce(), t)
    same(lambda s: s.to_dense(), t)
    same(lambda s: s.to_sparse_csr(), t)
    same(lambda s: s + s, t)
    # with a float operand the duplicates combine in their own dtype first (wrapping, or), then convert
    f = st.from_dense(rng.standard_normal((3, 3)), "coo")
    for op in (st.add, st.mul, st.maximum, st.minimum):
        same(lambda s: op(s, f.cuda() if s.is_cuda else f), t)
        same(lambda s: op(s, (f.cuda() if s.is_cuda else f).to_sparse_csr()),
             st.sparse_csr_tensor(np.array([0, 2, 2, 4]), np.array([1, 1, 0, 0]), vals[:4], size=(3, 3),
                                  check_invariants=False))
    many = st.sparse_coo_tensor(np.zeros((1, 300), np.int64), np.ones(300, dtype), size=(2,))
    same(lambda s: s.coalesce(), many)
    same(lambda s: s.to_dense(), many)


# -- complex values ------------------------------------------------------------------------------

COMPLEX_FUNCTIONS = ["sqrt", "sin", "sinh", "tan", "tanh", "asin", "asinh", "atan", "atanh", "expm1", "log1p",
                     "round", "sgn", "square", "neg", "abs", "conj"]
# points on and near the branch cuts, zeros of either sign, large and tiny moduli
SPECIAL = np.array([1e-9 + 1e-9j, -1e-9 + 2e-9j, 0.5 + 0j, -0.5 - 0j, 2 + 0j, -2 + 0j, 0 + 2j, 0 - 2j, -3 + 1e-12j,
                    1.5 - 0.5j, -0.25 + 4j, 30 + 1j, -40 - 2j, 1 + 1j, 1e3 - 1e3j, 2.5 + 1.5j,
                    complex(-2, -0.0), complex(-0.5, -0.0), complex(3, -0.0), complex(-3, -0.0), complex(-0.0, 3),
                    complex(0.0, -3), complex(-0.0, -3), complex(0, 0.5)])


@pytest.mark.parametrize("dtype", [np.dtype(np.complex64), np.dtype(np.complex128)], ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_complex_functions(backend, rng, case, dtype):
    t = make(rng, case, np.complex128, np.int32)
    t = t._replace_values(np.ascontiguousarray(np.asarray(t.values()).astype(dtype)))
    for name in COMPLEX_FUNCTIONS:
        complex_close(getattr(st, name), t)
    for e in (2, 3, 0.5, 2.5):
        complex_close(st.pow, t, e)
    for name in ("sign", "ceil", "relu", "frac", "deg2rad"):  # the CPU's refusals
        same(getattr(st, name), t)


def test_complex_functions_near_branch_cuts(backend):
    for dtype in (np.complex64, np.complex128):
        t = st.sparse_coo_tensor([np.arange(SPECIAL.size)], SPECIAL.astype(dtype), size=(SPECIAL.size,))
        for name in COMPLEX_FUNCTIONS:
            complex_close(getattr(st, name), t)
        for e in (3, 0.5, 1.25):
            complex_close(st.pow, t, e)


# real and imaginary parts of the special values: zeros of both signs, ordinary and overflowing
# values, infinities, NaN (1e300 is inf in complex64)
SPECIAL_PARTS = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -3.0, 1e300, -1e300, np.inf, -np.inf, np.nan]


def test_complex_functions_at_special_values(backend):
    """C99 Annex G's values (NumPy's, glibc's signs where G.6 leaves them open) at every pair of
    SPECIAL_PARTS: NaN and infinite parts, signed zeros, overflow."""
    grid = np.array([complex(re, im) for re in SPECIAL_PARTS for im in SPECIAL_PARTS])
    for dtype in (np.complex64, np.complex128):
        with np.errstate(over="ignore"):
            t = st.sparse_coo_tensor([np.arange(grid.size)], grid.astype(dtype), size=(grid.size,))
        for name in ("sqrt", "sin", "sinh", "tan", "tanh", "asin", "asinh", "atan", "atanh", "expm1", "log1p"):
            special_same(getattr(st, name), t)
        for e in (2, 3, 2.5, 0.5):
            special_same(st.pow, t, e)


def special_same(call, t, *args):
    """``call(t, *args)`` on the device is the CPU's result part by part: NaN where it is NaN, the
    same infinities and signed zeros, other values to 1e-12 (complex128) or 1e-6 (complex64)
    relative to the result's modulus."""
    with np.errstate(all="ignore"):
        want = np.asarray(call(t, *args).values())
        modulus = np.abs(want)
    got = call(on_device(t), *args).values().get()
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = 1e-12 if want.dtype == np.complex128 else 1e-6
    for part in ("real", "imag"):
        x, w = getattr(got, part), getattr(want, part)
        ok = (np.isnan(x) & np.isnan(w)) | ((x == w) & (np.signbit(x) == np.signbit(w)))
        with np.errstate(invalid="ignore"):  # inf - inf where ok already
            ok |= np.isfinite(x) & np.isfinite(w) & (w != 0) & (np.abs(x - w) <= tol * modulus)
        bad = np.flatnonzero(~ok)
        assert bad.size == 0, (f"{call.__name__}{args} {part} parts of {t.dtype}: at {np.asarray(t.values())[bad]} "
                               f"got {x[bad]}, want {w[bad]}")


def complex_close(call, *args):
    """``call(*args)`` on the device is the CPU's result to 1e-12 (complex128) or 1e-6 (complex64,
    computed in double there and rounded once) relative to the largest modulus: another math
    library, other formulas."""
    with np.errstate(all="ignore"):
        want = call(*args)
    got = call(*(on_device(a) for a in args))
    assert got.device == "cuda:0" and got.dtype == want.dtype and got.shape == want.shape
    x, w = got.values().get(), np.asarray(want.values())
    tol = 1e-12 if w.dtype in (np.complex128, np.float64) else 1e-6
    scale = np.abs(w[np.isfinite(w)]).max(initial=1.0)
    np.testing.assert_allclose(x, w, rtol=tol, atol=tol * max(1.0, float(scale)))


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int64", "float16", "float32", "float64", "complex64",
                                   "complex128"])
def test_round_to_decimals(backend, dtype):
    """np.round's results to decimals of either sign: half to even at the scaled value, float16
    rounded at every step (1000 * 100 overflows), large int64 values through a double."""
    dt = np.dtype(dtype)
    if dt.kind in "fc":
        vals = np.array([15, 25, -15, 123.456, 2.675, 1e3, 0.5, -2.5])
        vals = vals + 1j * vals[::-1] if dt.kind == "c" else vals
    else:
        vals = np.array([15, 25, -15, 35, 5, 100, 1, -25] if dt != np.uint8 else [15, 25, 5, 35, 250, 100, 1, 45])
        if dt == np.int64:
            vals[-1] = 2 ** 62 + 5
    t = st.sparse_coo_tensor([np.arange(8)], vals.astype(dt), size=(8,))
    for d in (-2, -1, 0, 1, 2):
        same(lambda x: st.round(x, decimals=d), t)


MIXED = [("bool", "int8"), ("int8", "float32"), ("uint8", "int32"), ("int32", "complex64"), ("float16", "float32"),
         ("bool", "bool"), ("int8", "uint8")]


@pytest.mark.parametrize("da,db", MIXED, ids=[f"{a}-{b}" for a, b in MIXED])
@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("csr", "csc"), ("coo", "coo"), ("bsr", "bsr")],
                         ids=["csr-csr", "csr-csc", "coo-coo", "bsr-bsr"])
def test_mixed_dtypes_promote_as_on_the_cpu(backend, rng, la, lb, da, db):
    """Two operands of different value dtypes (and layouts): NumPy's promotion, then the device
    kernels of the result dtype; the CPU's values and errors."""
    bs = (2, 1) if la == "bsr" else None
    a = int_tensor(rng, (la, (), (), bs), np.dtype(da)) if np.dtype(da).kind in "biu" else \
        _cast(make(rng, (la, (), (), bs), np.float64, np.int32), da)
    b = _cast(make(rng, (la, (), (), bs), np.float64, np.int32), db)
    if lb != la:
        b = b.to_sparse(layout=getattr(st, f"sparse_{lb}"))
    for op in (st.add, st.sub, st.mul, st.maximum):
        same(op, a, b)
    same(lambda x, y: st.matmul(x, y.to_dense().swapaxes(0, 1)), a, b)
    if la == "csr":
        same(lambda x, y: st.matmul(x, st.transpose(y, 0, 1)), a, b)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_mixed_index_dtypes(backend, rng, case):
    """int32 with int64 indices: the CPU's int64-indexed results."""
    a = make(rng, case, np.float64, np.int32)
    b = make(rng, case, np.float64, np.int64)
    for op in (st.add, st.sub, st.mul, st.maximum, st.minimum):
        same(op, a, b)
        same(op, b, a)


def test_real_square_root_power_and_complex_sgn_at_limits(backend):
    """pow(x, 0.5) is NumPy's sqrt (sqrt(-0.0) is -0.0, sqrt(-inf) NaN); sgn of an infinite
    complex value is NumPy's limit (the sign of the infinite part)."""
    for dtype in (np.float16, np.float32, np.float64):
        r = st.sparse_coo_tensor([np.arange(5)], np.array([-np.inf, -0.0, 0.0, np.inf, 4.0], dtype), size=(5,))
        same(lambda x: st.pow(x, 0.5), r)
    inf = np.inf
    v = np.array([complex(inf, 0), complex(0, -inf), complex(inf, 0.5), complex(-inf, 3), complex(inf, inf),
                  complex(np.nan, 1), complex(3, 4), 0j])
    for dtype in (np.complex64, np.complex128):
        c = st.sparse_coo_tensor([np.arange(v.size)], v.astype(dtype), size=(v.size,))
        with np.errstate(all="ignore"):
            want = np.asarray(st.sgn(c).values())
        got = st.sgn(c.cuda()).values().get()
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def _cast(t, dtype):
    v = np.asarray(t.values())
    return t._replace_values(np.ascontiguousarray((v * 3).astype(dtype)))
