"""The linear-algebra ops of issue #37 on CUDA tensors, through the one op path, against the CPU
result of the same tensor: ``real``/``imag`` (property and function), ``H``/``adjoint()``, the
refusing pointwise functions (``exp``, ``cos``, ...), SciPy's ``matvec``/``rmatvec``/``matmat``/
``rmatmat`` with device operands, ``diagonal`` and ``trace``.

Every layout x index dtype x value dtype (float32, float64, complex128, int64) x batch/dense shape
of :data:`cuda_support.CASES`; sparse results must match bitwise in their members (values exactly
for integers and copies, to a relative 1e-6 for float32 sums), dense results in dtype, shape and
values; errors are the CPU's (type and message); no device path copies to the host. Runs on a GPU
or on the kernel emulator (see test_cuda.py).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda import _primitives
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import CASE_IDS, CASES, INDEX, assert_same, make

DTYPES = [np.dtype(d) for d in ("float32", "float64", "complex128", "int64")]
RTOL = {np.dtype("float16"): 2e-3, np.dtype("float32"): 1e-6, np.dtype("float64"): 1e-12,
        np.dtype("complex64"): 1e-6, np.dtype("complex128"): 1e-12}
MATRICES = [c for c in CASES if not c[1] and not c[2]]
MATRIX_IDS = [i for c, i in zip(CASES, CASE_IDS) if not c[1] and not c[2]]
# the functions with f(0) != 0: refused on every device before the values are read
REFUSING = ("exp", "exp2", "cos", "cosh", "acos", "acosh", "log", "log2", "log10", "sigmoid", "rsqrt", "reciprocal")


def over(cases, ids):
    """A test over ``cases`` x index dtype x value dtype."""
    def wrap(test):
        test = pytest.mark.parametrize("dtype", DTYPES, ids=str)(test)
        test = pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)(test)
        return pytest.mark.parametrize("case", cases, ids=ids)(test)
    return wrap


def tensor(rng, case, dtype, index_dtype):
    """A random CPU tensor of ``case`` (small integers for int64, so that sums are exact)."""
    t = make(rng, case, np.complex128 if dtype.kind == "c" else np.float64, index_dtype)
    v = np.ascontiguousarray(t.values())
    if dtype.kind == "i":
        return t._replace_values((np.sign(v.real) * np.ceil(np.abs(v.real) * 4)).astype(dtype))
    return t._replace_values(v.astype(dtype))


def same_error(call, t, *args):
    """``call(t, *args)`` raises on the CPU; on ``t``'s device copy (device arrays for array
    arguments) the same error type with the same message. Returns the message."""
    with pytest.raises(Exception) as cpu:
        call(t, *args)
    with pytest.raises(type(cpu.value)) as gpu:
        call(t.cuda(), *(DeviceArray.from_host(a) if isinstance(a, np.ndarray) else a for a in args))
    assert str(gpu.value) == str(cpu.value)
    return str(cpu.value)


def same_dense(got, want):
    """A dense device result equals the CPU's (a NumPy array or scalar): dtype, shape, values."""
    assert isinstance(got, DeviceArray) and got.device == "cuda:0"
    want = np.asarray(want)
    x = got.get()
    assert x.dtype == want.dtype and x.shape == want.shape, (x.dtype, want.dtype, x.shape, want.shape)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(x, want, rtol=RTOL[want.dtype], atol=RTOL[want.dtype])
    else:
        assert np.array_equal(x, want)


# -- real, imag ------------------------------------------------------------------------------------

@over(CASES, CASE_IDS)
def test_real_imag(backend, rng, case, index_dtype, dtype):
    t = tensor(rng, case, dtype, index_dtype)
    d = t.cuda()
    if dtype.kind != "c":
        assert d.real is d and st.real(d) is d  # as on the CPU: a real tensor is its own real part
        same_error(lambda x: x.imag, t)
        same_error(st.imag, t)
        return
    for got, want in ((d.real, t.real), (st.real(d), st.real(t)), (d.imag, t.imag), (st.imag(d), st.imag(t))):
        assert got.device == "cuda:0"
        assert_same(got, want)


def test_real_imag_of_an_uncoalesced_coo_stay_uncoalesced(backend):
    t = st.sparse_coo_tensor([[0, 1, 0]], np.array([1 + 2j, 3 - 1j, 5 + 7j], np.complex64), size=(3,))
    d = t.cuda()
    assert not d.is_coalesced()
    assert_same(d.real, t.real)
    assert_same(st.imag(d), st.imag(t))
    assert d.imag.dtype == np.float32


# -- adjoint, H ------------------------------------------------------------------------------------

@over(CASES, CASE_IDS)
def test_adjoint(backend, rng, case, index_dtype, dtype):
    t = tensor(rng, case, dtype, index_dtype)
    d = t.cuda()
    if t.ndim != 2 or t.dense_dim or t.batch_dim:
        assert "2-d sparse matrix" in same_error(lambda x: x.H, t)
        same_error(lambda x: x.adjoint(), t)
        return
    for got, want in ((d.H, t.H), (d.adjoint(), t.adjoint())):
        assert got.device == "cuda:0"
        assert_same(got, want)
    if dtype.kind != "c" and case[0] in ("csr", "csc"):
        assert d.H.values().ptr == d.values().ptr  # a real tensor's adjoint is the transpose view


# -- functions that are not zero-preserving ---------------------------------------------------------

@pytest.mark.parametrize("case", CASES[::3], ids=CASE_IDS[::3])
def test_refusing_functions_give_the_cpus_value_error(backend, rng, case):
    t = tensor(rng, case, np.dtype(np.float64), np.int64)
    for name in REFUSING:
        assert "not zero-preserving" in same_error(getattr(st, name), t)
        assert "not zero-preserving" in same_error(lambda x: getattr(x, name)(), t)


# -- the LinearOperator protocol --------------------------------------------------------------------

def _operands(rng, n, dtype):
    """A vector, a column and a matrix of ``n`` rows in ``dtype`` (complex for complex tensors)."""
    x = rng.standard_normal((n, 3))
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal((n, 3))
    x = x.astype(dtype)
    return x[:, 0].copy(), x[:, :1].copy(), x


@over(CASES, CASE_IDS)
def test_linear_operator(backend, rng, case, index_dtype, dtype):
    t = tensor(rng, case, dtype, index_dtype)
    d = t.cuda()
    M, K = t.shape[-2:]
    if t.ndim != 2 or t.dense_dim or t.batch_dim:
        for name in ("matvec", "rmatvec", "matmat", "rmatmat"):
            assert "2-d sparse matrix" in same_error(lambda x, y: getattr(x, name)(y), t, np.ones(K))
        return
    v, col, mat = _operands(rng, K, dtype)
    rv, rcol, rmat = _operands(rng, M, dtype)
    for name, x in (("matvec", v), ("matvec", col), ("matmat", mat),
                    ("rmatvec", rv), ("rmatvec", rcol), ("rmatmat", rmat)):
        got = getattr(d, name)(DeviceArray.from_host(x))
        same_dense(got, getattr(t, name)(x))
        if name in ("matvec", "matmat"):  # one op path: the product is st.matmul's
            mm = st.matmul(d, DeviceArray.from_host(x)).get()
            assert np.array_equal(got.get().view(np.uint8), mm.view(np.uint8))
    # a host operand with a device tensor: st.matmul's ValueError naming both devices
    with pytest.raises(ValueError) as mm:
        st.matmul(d, v)
    assert "cuda:0" in str(mm.value) and "cpu" in str(mm.value)
    for name, x in (("matvec", v), ("matmat", mat), ("rmatvec", rv), ("rmatmat", rmat)):
        with pytest.raises(ValueError) as got:
            getattr(d, name)(x)
        assert str(got.value) == str(mm.value)
    # wrong shapes: the CPU's message
    same_error(lambda x, y: x.matvec(y), t, np.ones(K + 1, dtype))
    same_error(lambda x, y: x.rmatmat(y), t, np.ones((M + 1, 2), dtype))


# -- diagonal, trace --------------------------------------------------------------------------------

def _diagonal_args(t):
    """(offset, dim1, dim2) over the batch and sparse dims of ``t``: the matrix dims both ways and,
    with batch dims, a batch dim against a sparse dim both ways (one negative); offsets in and out
    of range."""
    s = t.ndim - t.dense_dim
    pairs = [(s - 2, s - 1), (s - 1, s - 2)] + ([(0, s - 1), (-1 - t.dense_dim, 0)] if s > 2 else [])
    return [(off, a, b) for (a, b), off in itertools.product(pairs, (0, 1, -2, 9))]


@over(CASES, CASE_IDS)
def test_diagonal_and_trace(backend, rng, case, index_dtype, dtype):
    t = tensor(rng, case, dtype, index_dtype)
    d = t.cuda()
    for off, a, b in _diagonal_args(t):
        same_dense(d.diagonal(off, a, b), t.diagonal(off, a, b))
        same_dense(st.diagonal(d, offset=off, dim1=a, dim2=b), st.diagonal(t, offset=off, dim1=a, dim2=b))
        same_dense(d.trace(off, a, b), t.trace(off, a, b))
    same_dense(st.trace(d), st.trace(t))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)  # complex: the real parts, as NumPy
        same_dense(d.trace(dtype=np.float64), t.trace(dtype=np.float64))
    # errors: the CPU's
    same_error(st.diagonal, t, 0, 0, 0)
    same_error(st.trace, t, 0, 0, t.ndim)
    if t.dense_dim:
        assert "dense dim" in same_error(st.diagonal, t, 0, 0, t.ndim - 1)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32", "float16", "complex64"])
def test_trace_widens_as_numpy(backend, rng, dtype):
    """trace's result dtype is np.sum's: small integers and bool in int64, uint8 in uint64."""
    t = make(rng, ("csr", (2,), (), None), np.float64, np.int32)
    v = np.ascontiguousarray(t.values())
    t = t._replace_values((np.ceil(np.abs(v) * 90)).astype(dtype))
    d = t.cuda()
    same_dense(d.diagonal(0, 1, 2), t.diagonal(0, 1, 2))
    same_dense(d.trace(0, 1, 2), t.trace(0, 1, 2))
    if dtype == "complex64":  # a complex sum in a real dtype: the real parts, with NumPy's warning
        with pytest.warns(np.exceptions.ComplexWarning):
            got = d.trace(dtype=np.float64)
        with pytest.warns(np.exceptions.ComplexWarning):
            same_dense(got, t.trace(dtype=np.float64))


def test_diagonal_of_an_uncoalesced_coo_sums_duplicates(backend):
    t = st.sparse_coo_tensor([[0, 1, 0, 2, 1], [0, 1, 0, 0, 1]], np.array([1.0, 2.0, 4.0, 8.0, 16.0]), size=(3, 3))
    d = t.cuda()
    assert not d.is_coalesced()
    same_dense(d.diagonal(), t.diagonal())
    same_dense(d.trace(), t.trace())
    assert d.diagonal().get().tolist() == [5.0, 18.0, 0.0]


# -- nothing reaches the host ------------------------------------------------------------------------

def test_no_host_copies(backend, rng, monkeypatch):
    """The device paths copy no DeviceArray to the host (get and __array__ raise while they run);
    only small integer reads (an nnz) may."""
    t = tensor(rng, ("csr", (), (), None), np.dtype(np.complex128), np.int32)
    b = tensor(rng, ("bsr", (2,), (2,), (2, 1)), np.dtype(np.complex128), np.int64)
    d, db = t.cuda(), b.cuda()
    M, K = t.shape
    v, _, mat = _operands(rng, K, t.dtype)
    rv, _, rmat = _operands(rng, M, t.dtype)
    dv, dmat, drv, drmat = (DeviceArray.from_host(x) for x in (v, mat, rv, rmat))
    get = DeviceArray.get

    def read_ints(dev, arr):
        assert arr.size <= 8, arr.shape
        return get(arr)

    def refuse(self, *args, **kwargs):
        raise AssertionError("a device path copied a DeviceArray to the host")

    calls = [lambda: d.real, lambda: st.imag(db), lambda: d.H, lambda: d.adjoint(), lambda: d.matvec(dv),
             lambda: d.matmat(dmat), lambda: d.rmatvec(drv), lambda: d.rmatmat(drmat), lambda: d.diagonal(1),
             lambda: st.diagonal(db, 0, 1, 2), lambda: d.trace(), lambda: db.trace(-1, 0, 2)]
    wants = [t.real, st.imag(b), t.H, t.adjoint(), t.matvec(v), t.matmat(mat), t.rmatvec(rv), t.rmatmat(rmat),
             t.diagonal(1), st.diagonal(b, 0, 1, 2), t.trace(), b.trace(-1, 0, 2)]
    monkeypatch.setattr(_primitives, "read_ints", read_ints)
    monkeypatch.setattr(DeviceArray, "get", refuse)
    monkeypatch.setattr(DeviceArray, "__array__", refuse)
    try:
        results = [call() for call in calls]
        with pytest.raises(ValueError, match="not zero-preserving"):
            st.exp(d)
    finally:
        monkeypatch.undo()
    for got, want in zip(results, wants):
        if isinstance(want, st.SparseTensor):
            assert_same(got, want)
        else:
            same_dense(got, want)
