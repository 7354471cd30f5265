"""NumPy's function protocol: the whitelisted functions on sparse tensors agree with NumPy on the
dense array; everything else raises NumPy's TypeError instead of densifying."""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st

from conftest import INDEX_DTYPES, LAYOUTS, layout_tensor

DTYPES = [np.float64, np.int32, np.complex128, np.bool_]


def _make(layout, dtype=np.float64, index_dtype=np.int64, batch=(), dense=(), seed=0, shape=(4, 6)):
    return layout_tensor(layout, dtype, index_dtype, batch=batch, dense=dense, seed=seed, shape=shape)


def _dense(x):
    return x.to_dense() if isinstance(x, st.SparseTensor) else np.asarray(x)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reductions_and_shapes(layout, index_dtype, dtype):
    t, a = _make(layout, dtype, index_dtype)
    assert np.shape(t) == a.shape and np.ndim(t) == a.ndim
    assert np.result_type(t, np.float32) == np.result_type(a, np.float32)
    for f in (np.sum, np.mean) + ((np.max, np.min, np.amax, np.amin) if np.dtype(dtype).kind != "c" else ()):
        for axis in (None, 0, 1, -1):
            np.testing.assert_allclose(_dense(f(t, axis=axis)), f(a, axis=axis))
        np.testing.assert_allclose(_dense(f(t, axis=1, keepdims=True)), f(a, axis=1, keepdims=True))
    wide = np.complex64 if np.dtype(dtype).kind == "c" else np.float32
    np.testing.assert_allclose(_dense(np.sum(t, dtype=wide)), np.sum(a, dtype=wide), rtol=1e-6)
    np.testing.assert_array_equal(_dense(np.transpose(t)), a.T)
    np.testing.assert_array_equal(_dense(np.transpose(t, (1, 0))), a.T)
    nz = np.nonzero(t)
    assert len(nz) == 2
    for ours, ref in zip(nz, np.nonzero(a)):
        np.testing.assert_array_equal(ours, ref)
    for off in (-2, 0, 1, 5):
        np.testing.assert_array_equal(np.diagonal(t, off), np.diagonal(a, off))
        np.testing.assert_array_equal(np.trace(t, off), np.trace(a, off))
    assert np.may_share_memory(t, t) and not np.may_share_memory(t, a)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_concatenate_and_stack(layout):
    t, a = _make(layout)
    u, b = _make(layout, seed=1)
    for axis in (0, 1):
        np.testing.assert_array_equal(np.concatenate([t, u], axis=axis).to_dense(), np.concatenate([a, b], axis=axis))
    if layout == "coo":
        np.testing.assert_array_equal(np.stack([t, u], axis=1).to_dense(), np.stack([a, b], axis=1))
    else:  # a new batch dim needs the same nnz: stack a tensor with itself
        np.testing.assert_array_equal(np.stack([t, t]).to_dense(), np.stack([a, a]))
    assert np.concatenate([t, u], dtype=np.float32).dtype == np.float32
    with pytest.raises(TypeError, match="out="):
        np.concatenate([t, u], out=np.zeros((8, 6)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_products(layout):
    t, a = _make(layout)
    u, b = _make(layout, seed=2)
    x = np.arange(6.0)
    X = np.arange(12.0).reshape(6, 2)
    np.testing.assert_allclose(np.dot(t, x), a @ x)
    np.testing.assert_allclose(np.dot(t, X), a @ X)
    np.testing.assert_allclose(np.dot(np.ones(4), t), np.ones(4) @ a)
    np.testing.assert_allclose(_dense(np.dot(t, 3.0)), a * 3)
    np.testing.assert_allclose(np.matmul(t, X), a @ X)
    np.testing.assert_allclose(np.tensordot(t, X, axes=1), np.tensordot(a, X, axes=1))
    for axes in ([1, 1], [0, 0], [1, 0], [0, 1]):
        lhs, rhs = (t, u) if axes != [1, 0] and axes != [0, 1] else (t, u.T)
        ref_l, ref_r = (a, b) if lhs is t and rhs is u else (a, b.T)
        np.testing.assert_allclose(_dense(np.tensordot(lhs, rhs, axes=axes)), np.tensordot(ref_l, ref_r, axes=axes))
    with pytest.raises(NotImplementedError, match="axes"):
        np.tensordot(t, u, axes=2)
    # ufuncs go through __array_ufunc__
    np.testing.assert_allclose(_dense(np.multiply(t, u)), a * b)
    np.testing.assert_allclose(_dense(np.add(t, u)), a + b)
    np.testing.assert_allclose(_dense(np.abs(-t)), np.abs(a))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float64, np.int16, np.bool_], ids=str)
def test_where(layout, dtype):
    t, a = _make(layout, dtype)
    u, b = _make(layout, np.float32, seed=3)
    r = np.where(t, 7, 0)
    assert isinstance(r, st.SparseTensor) and r.layout == t.layout
    np.testing.assert_array_equal(r.to_dense(), np.where(a, 7, 0))
    assert r.dtype == np.where(a, 7, 0).dtype
    np.testing.assert_array_equal(np.where(t, u, 0).to_dense(), np.where(a, b, 0))
    for ours, ref in zip(np.where(t), np.where(a)):
        np.testing.assert_array_equal(ours, ref)
    with pytest.raises(ValueError, match="densif|dense"):
        np.where(t, 1, 2)
    with pytest.raises(NotImplementedError):
        np.where(a, t, 0)


def test_batch_and_dense_dims():
    t, a = _make("csr", batch=(2,), dense=(3,))
    np.testing.assert_allclose(_dense(np.sum(t, axis=(1, 2))), a.sum(axis=(1, 2)))
    np.testing.assert_array_equal(np.diagonal(t, 0, 1, 2), np.diagonal(a, 0, 1, 2))
    np.testing.assert_array_equal(np.trace(t, 1, 1, 2), np.trace(a, 1, 1, 2))
    c, ac = _make("coo", dense=(2,))
    np.testing.assert_array_equal(np.diagonal(c), np.diagonal(ac))
    with pytest.raises(NotImplementedError, match="dense dim"):
        np.diagonal(c, 0, 0, 2)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_count_nonzero_real_and_imag(layout, dtype):
    t, a = _make(layout, dtype, batch=(2,))
    for axis in (None, 0, -1, (0, 2), (1,)):
        for keepdims in (False, True):
            ours, ref = np.count_nonzero(t, axis=axis, keepdims=keepdims), np.count_nonzero(a, axis, keepdims=keepdims)
            assert np.shape(ours) == np.shape(ref)
            np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(_dense(np.real(t)), np.real(a))
    if np.dtype(dtype).kind == "c":
        np.testing.assert_array_equal(_dense(np.imag(t)), np.imag(a))
    else:
        assert np.real(t) is t
        with pytest.raises(TypeError, match="complex"):
            np.imag(t)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_any_and_all(layout, dtype):
    t, a = _make(layout, dtype, batch=(2,) if layout != "coo" else (), dense=(2,) if layout != "bsc" else ())
    kw = {"dense_dim": t.dense_dim} if layout == "coo" else {"batch_dim": t.batch_dim, "dense_dim": t.dense_dim}
    full = st.from_dense(np.ones_like(a), layout, **kw, **({"blocksize": (2, 2)} if layout in ("bsr", "bsc") else {}))
    for x, ref in ((t, a), (full, np.ones_like(a))):
        for axis in (None, 0, -1, (0, 1), (1,)):
            for keepdims in (False, True):
                for f in (np.any, np.all):
                    ours, want = f(x, axis=axis, keepdims=keepdims), f(ref, axis=axis, keepdims=keepdims)
                    assert type(ours) is type(want) and np.shape(ours) == np.shape(want), (f, axis, keepdims)
                    np.testing.assert_array_equal(ours, want)
    with pytest.raises(TypeError, match="out="):
        np.all(t, out=np.zeros(()))


def test_any_all_of_repeats_and_empty():
    d = st.sparse_coo_tensor([[0, 0, 1], [1, 1, 2]], [1.0, -1.0, 5.0], size=(2, 3))  # 1 - 1 at (0, 1): a zero
    np.testing.assert_array_equal(np.any(d, axis=1), [False, True])
    e = st.from_dense(np.zeros((0, 3)), "csr")
    assert np.any(e) is np.False_ and np.all(e) is np.True_
    np.testing.assert_array_equal(np.all(e, axis=0), np.ones(3, bool))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.float64], ids=str)
def test_clip(layout, dtype):
    t, a = _make(layout, dtype, batch=(2,) if layout != "coo" else ())
    for lo, hi in ((-1, 1), (None, 0), (0, None), (-0.5, 0.25)):
        got, want = np.clip(t, lo, hi), np.clip(a, lo, hi)
        assert isinstance(got, st.SparseTensor) and got.layout is t.layout and got.dtype == want.dtype
        np.testing.assert_array_equal(got.to_dense(), want)
    with pytest.raises(ValueError, match="dense"):
        np.clip(t, 1, 2)
    with pytest.raises(NotImplementedError, match="array bounds"):
        np.clip(t, np.zeros(t.shape[-1]), 1)
    d = st.sparse_coo_tensor([[0, 0]], [0.75, 0.75], size=(2,))  # repeats clip after their sum
    np.testing.assert_array_equal(np.clip(d, -1, 1).to_dense(), [1.0, 0.0])


def test_empty_and_duplicates():
    e = st.sparse_coo_tensor(np.zeros((2, 0), np.int64), np.zeros(0), size=(3, 4))
    assert np.sum(e) == 0 and np.trace(e) == 0
    np.testing.assert_array_equal(np.diagonal(e), np.zeros(3))
    d = st.sparse_coo_tensor([[0, 0, 1], [0, 0, 2]], [1.0, 2.0, 5.0], size=(2, 3))  # a duplicate at (0, 0)
    np.testing.assert_array_equal(np.diagonal(d), [3.0, 0.0])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_blocks_triangles_and_ravel(layout):
    t, a = _make(layout)
    b = _dense(t)
    for got, want in ((np.hstack([t, t]), np.hstack([b, b])), (np.vstack((t, t)), np.vstack([b, b])),
                      (np.kron(t, t), np.kron(b, b)), (np.kron(b[:2, :2], t), np.kron(b[:2, :2], b)),
                      (np.tril(t, -1), np.tril(b, -1)), (np.triu(t, 2), np.triu(b, 2))):
        assert isinstance(got, st.SparseTensor) and got.layout is t.layout or (layout in ("bsr", "bsc"))
        np.testing.assert_array_equal(_dense(got), want)
    assert np.vstack([t, t], dtype=np.float32).dtype == np.float32
    with pytest.raises(TypeError, match="same_kind"):
        np.hstack([t, t], dtype=np.int8)
    c = t.to_sparse_coo()
    for order in "CF":
        np.testing.assert_array_equal(np.ravel(c, order=order).to_dense(), b.ravel(order=order))
    if layout != "coo":
        with pytest.raises(NotImplementedError, match="has two"):
            np.ravel(t)


def test_unsupported_functions_raise_numpy_type_error():
    t, _ = _make("csr")
    for f in (np.cumsum, np.sort, np.linalg.norm, np.unique, np.argmax):
        with pytest.raises(TypeError, match="no implementation found"):
            f(t)
    with pytest.raises(TypeError, match="no implementation found"):
        np.append(t, t)


# -- NumPy's dtypes, casting and axis errors (where they differ from PyTorch's) --------------------------
CASTINGS = ["no", "equiv", "safe", "same_kind", "unsafe"]


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")  # casting="unsafe" drops imaginary parts
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("casting", CASTINGS + [None])
@pytest.mark.parametrize("src,dst", [(np.complex128, np.float32), (np.float64, np.int8), (np.float64, np.float32),
                                     (np.int32, np.float64), (np.float64, np.float64), (np.int16, None)], ids=str)
def test_concatenate_and_stack_casting(layout, casting, src, dst):
    t, a = _make(layout, src)
    kw = {} if casting is None else {"casting": casting}
    for f in (np.concatenate, np.stack):
        if layout != "coo" and f is np.stack and src == np.complex128:
            continue  # covered by the other layouts; keeps the case list short
        try:
            with np.errstate(all="ignore"):
                ref = f([a, a], dtype=dst, **kw)
        except TypeError:
            with pytest.raises(TypeError, match="cannot cast"):
                f([t, t], dtype=dst, **kw)
            continue
        got = f([t, t], dtype=dst, **kw)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.to_dense(), ref)


def test_casting_mixed_inputs_and_bad_casting():
    t, a = _make("csr", np.float32)
    u, b = _make("csr", np.float64, seed=1)
    with pytest.raises(TypeError, match="cannot cast"):  # float32 -> float64 is not 'no'
        np.concatenate([t, u], casting="no")
    np.testing.assert_array_equal(np.concatenate([t, u], casting="safe").to_dense(),
                                  np.concatenate([a, b], casting="safe"))
    with pytest.raises(TypeError, match="cannot cast"):  # float64 -> float32 is not 'safe'
        np.concatenate([t, u], dtype=np.float32, casting="safe")
    with pytest.raises(ValueError, match="casting must be one of"):
        np.concatenate([t, t], casting="sometimes")


def test_concatenate_complex_to_float_refused_by_default():
    c = st.from_dense(np.array([[0, 1 + 2j], [1.5, 0]]), "csr")
    with pytest.raises(TypeError, match="complex128 to float32"):
        np.concatenate([c, c], dtype=np.float32)
    with np.errstate(all="ignore"), pytest.warns(np.exceptions.ComplexWarning):
        r = np.concatenate([c, c], dtype=np.float32, casting="unsafe")
    np.testing.assert_array_equal(r.to_dense(), np.concatenate([c.to_dense()] * 2).real.astype(np.float32))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.bool_, np.int32], ids=str)
def test_sum_dtype_is_numpys(layout, dtype):
    t, a = _make(layout, dtype)
    for axis in (None, 0, 1, (0, 1), -1):
        for got, ref in ((np.sum(t, axis=axis), np.sum(a, axis=axis)),
                         (np.add.reduce(t, axis=axis), np.add.reduce(a, axis=axis))):
            if isinstance(got, st.SparseTensor):  # uint64 is not a value dtype: the sparse result is int64
                assert got.dtype == (np.int64 if ref.dtype == np.uint64 else ref.dtype)
                got = got.to_dense()
            else:
                assert np.asarray(got).dtype == np.asarray(ref).dtype, (axis, got, ref)
            np.testing.assert_array_equal(got, ref)
    got, ref = np.sum(t, axis=1, keepdims=True), np.sum(a, axis=1, keepdims=True)
    assert not isinstance(got, st.SparseTensor) or ref.dtype != np.uint64 or got.dtype == np.int64
    np.testing.assert_array_equal(_dense(got), ref)
    assert st.sum(t).dtype == (np.int64 if np.dtype(dtype).kind in "biu" else dtype)  # PyTorch's rule kept


def test_sum_of_uint8_does_not_wrap():
    u = np.array([[0, 200], [100, 0]], np.uint8)
    t = st.from_dense(u, "csr")
    assert np.sum(t).dtype == np.uint64 and np.sum(t) == 300
    np.testing.assert_array_equal(np.sum(t, axis=0), np.sum(u, axis=0))
    assert np.sum(t, axis=0).dtype == np.uint64 and np.add.reduce(t, axis=1).dtype == np.uint64
    assert st.sum(t).dtype == np.int64


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float32, np.float64, np.complex64, np.bool_], ids=str)
@pytest.mark.parametrize("scalar", [2, 2.5, np.float32(2), np.int8(3), 1j], ids=repr)
def test_dot_with_a_scalar_promotes_as_numpy(layout, dtype, scalar):
    t, a = _make(layout, dtype)
    ref = np.dot(a, scalar)
    for got in (np.dot(t, scalar), np.dot(scalar, t)):
        assert isinstance(got, st.SparseTensor)  # the library's rule: sparse times a scalar stays sparse
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.to_dense(), ref)


def test_dot_of_uint8_by_two_does_not_wrap():
    u = np.array([[0, 200], [3, 0]], np.uint8)
    r = np.dot(st.from_dense(u, "csr"), 2)
    assert r.dtype == np.int64
    np.testing.assert_array_equal(r.to_dense(), [[0, 400], [6, 0]])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ufunc,fill", [(np.true_divide, 0.0), (np.true_divide, np.nan), (np.multiply, np.inf),
                                        (np.multiply, -np.inf), (np.multiply, np.nan)], ids=str)
def test_ufunc_with_a_dense_operand_refuses_where_numpy_differs(layout, ufunc, fill):
    t, a = _make(layout)
    d = np.full(a.shape, fill)
    with pytest.raises(ValueError, match="not zero-preserving"):
        ufunc(t, d)
    if ufunc is np.multiply:
        with pytest.raises(ValueError, match="not zero-preserving"):
            ufunc(d, t)
        with pytest.raises(ValueError, match="not zero-preserving"):
            ufunc(t, d[0])  # broadcast
    with pytest.raises(ValueError, match="not zero-preserving"):  # the scalar form: the same error
        ufunc(t, fill)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ufunc_with_a_dense_operand_non_finite_only_at_specified_elements(layout):
    t, a = _make(layout, dense=())
    d = np.arange(1.0, a.size + 1).reshape(a.shape)
    d[a != 0] = 0.0  # zero divisors, infinite factors where t is specified only: NumPy's result is sparse
    with np.errstate(all="ignore"):
        q = np.divide(t, d)
        np.testing.assert_array_equal(q.to_dense(), a / d)
        assert q.layout == t.layout
        m = np.multiply(t, np.where(a != 0, np.inf, d))
        np.testing.assert_array_equal(m.to_dense(), a * np.where(a != 0, np.inf, d))
    d[a == 0] = 0.0
    if (a == 0).any():
        with pytest.raises(ValueError, match="not zero-preserving"):
            np.divide(t, d)
    # finite operands as before: the dense operand sampled at the pattern, a sparse result
    np.testing.assert_allclose(np.multiply(t, a + 1).to_dense(), a * (a + 1))
    np.testing.assert_allclose(np.divide(t, a + 1).to_dense(), a / (a + 1))


def test_ufunc_dense_operand_repro_and_sampled_operators_kept():
    d = np.array([[0., 2.], [3., 0.]])
    t = st.from_dense(d, "csr")
    with pytest.raises(ValueError, match="not zero-preserving"):
        np.divide(t, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="not zero-preserving"):
        np.multiply(t, np.full((2, 2), np.inf))
    # the operators and st.div/st.mul keep PyTorch's sampled semantics (unspecified elements stay 0)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((t / np.zeros((2, 2))).to_dense(), [[0, np.inf], [np.inf, 0]])
        np.testing.assert_array_equal(st.mul(t, np.full((2, 2), np.inf)).to_dense(), [[0, np.inf], [np.inf, 0]])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dense_divided_by_a_sparse_tensor_is_divs_refusal(layout):
    t, a = _make(layout)
    for d in (np.ones(a.shape), np.zeros(a.shape), np.ones(a.shape[-1:])):  # the same refusal for every divisor
        for f in (lambda: d / t, lambda: np.divide(d, t), lambda: np.true_divide(d, t), lambda: st.div(d, t)):
            with pytest.raises(NotImplementedError, match="division by a sparse tensor"):
                f()


def test_uncoalesced_duplicates_count_once():
    c = st.sparse_coo_tensor([[0, 0, 1], [1, 1, 0]], [1.0, 2.0, 3.0], size=(2, 2))  # (0, 1) twice
    d = np.array([[1.0, 0.0], [0.0, 1.0]])  # zeros at the two specified elements
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.divide(c, d).to_dense(), c.to_dense() / d)
    d[1, 1] = 0.0
    with pytest.raises(ValueError, match="not zero-preserving"):
        np.divide(c, d)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_axis_out_of_range_is_numpys_axis_error(layout):
    t, a = _make(layout)
    cases = [lambda x: np.sum(x, axis=2), lambda x: np.sum(x, axis=(0, -3)), lambda x: np.mean(x, axis=5),
             lambda x: np.max(x, axis=-3), lambda x: np.concatenate([x, x], axis=2),
             lambda x: np.stack([x, x], axis=4), lambda x: np.transpose(x, (0, 2)),
             lambda x: np.diagonal(x, 0, 0, 2), lambda x: np.trace(x, 0, 3, 1), lambda x: np.add.reduce(x, axis=3)]
    for f in cases:
        with pytest.raises(np.exceptions.AxisError):
            f(a)
        with pytest.raises(np.exceptions.AxisError, match="out of range"):
            f(t)
    with pytest.raises(IndexError, match="out of range"):  # still PyTorch's IndexError
        st.sum(t, 2)


def test_concatenate_along_a_batch_dim_into_unequal_batches():
    a = np.zeros((3, 2, 2))
    a[0, 0, 0], a[1, :, 1], a[2, 1, 0] = 1.0, 2.0, 3.0
    parts = [st.from_dense(a[i:i + 1], "csr", batch_dim=1) for i in range(3)]
    r = np.concatenate(parts)  # batches of nnz 1, 2, 1: a COO tensor holds them
    assert r.layout is st.sparse_coo
    np.testing.assert_array_equal(r.to_dense(), a)
    with pytest.raises(ValueError, match="same nnz"):
        st.cat(parts)  # the op itself keeps the layout or refuses
    assert np.concatenate([parts[1], parts[1]], axis=1).layout is st.sparse_csr


def test_unsupported_ufuncs_name_the_ufunc_and_why():
    """Ufuncs, methods and keywords with no sparse meaning raise TypeError naming them and the
    operands in words (NumPy's own "returned NotImplemented" named no cause and printed every
    operand whole); an operand of a type that may implement the ufunc itself is still asked."""
    t = st.from_dense(np.array([[1.0, 0, 2], [0, 3, 0]]), "csr")
    u = st.from_dense(np.array([[2.0, 0, 0], [0, 1, 4]]), "csr")
    cases = [(lambda: np.logical_and(t, u), r"np\.logical_and\(csr tensor of shape \(2, 3\).*maximum and minimum"),
             (lambda: np.hypot(t, np.ones((2, 3))), r"np\.hypot\(csr tensor.*dense array of shape \(2, 3\)"),
             (lambda: np.multiply.outer(t, np.ones(2)), r"np\.multiply\.outer.*np\.add\.reduce"),
             (lambda: np.add.accumulate(t, axis=0), r"np\.add\.accumulate"),
             (lambda: np.subtract.reduce(t, axis=0), r"np\.subtract\.reduce.*np\.add, np\.maximum"),
             (lambda: np.abs(t, where=np.ones((2, 3), bool)), r"where= has no sparse meaning")]
    for call, match in cases:
        with pytest.raises(TypeError, match=match):
            call()

    class Other:  # a type of its own that implements the ufunc: NumPy asks it too
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return "other"

    assert np.logical_and(t, Other()) == "other"


def test_tensordot_of_a_matrix_and_a_vector():
    """np.tensordot of a 2-d tensor with a 1-d operand, either side, axes=1 or the pair form (Dask's
    dot of chunks and a vector; it raised NotImplementedError); two vectors stay refused."""
    a = np.array([[1.0, 0, 2], [0, 3, 0]])
    t = st.from_dense(a, "csr")
    v, u = np.array([1.0, 2.0, 3.0]), np.array([4.0, -1.0])
    np.testing.assert_allclose(np.tensordot(t, v, axes=1), np.tensordot(a, v, axes=1))
    np.testing.assert_allclose(np.tensordot(u, t, axes=1), np.tensordot(u, a, axes=1))
    np.testing.assert_allclose(np.tensordot(t, u, axes=([0], [0])), np.tensordot(a, u, axes=([0], [0])))
    np.testing.assert_allclose(np.tensordot(v, t, axes=([-1], [1])), np.tensordot(v, a, axes=([-1], [1])))
    with pytest.raises(NotImplementedError, match="1-d or 2-d"):
        np.tensordot(st.from_dense(v, "coo"), v, axes=1)


def test_empty_arrays_like_a_sparse_tensor_are_sparse():
    """np.array([], like=t, ndmin=t.ndim) (Dask's partial max of an empty chunk) and other arrays
    of no element with t's dims are the empty tensor of t's layout; others stay NumPy's."""
    t = st.from_dense(np.eye(3), "csr")
    for e in (np.array([], like=t, ndmin=2), np.zeros((0, 3), like=t), np.empty((2, 0), like=t, dtype=np.float32)):
        assert isinstance(e, st.SparseTensor) and e.layout is st.sparse_csr and e.nnz == 0 and 0 in e.shape
    assert np.empty((2, 0), like=t, dtype=np.float32).dtype == np.float32
    assert type(np.array([[1.0]], like=t)) is np.ndarray and type(np.zeros(0, like=t)) is np.ndarray
