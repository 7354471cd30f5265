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


def test_empty_and_duplicates():
    e = st.sparse_coo_tensor(np.zeros((2, 0), np.int64), np.zeros(0), size=(3, 4))
    assert np.sum(e) == 0 and np.trace(e) == 0
    np.testing.assert_array_equal(np.diagonal(e), np.zeros(3))
    d = st.sparse_coo_tensor([[0, 0, 1], [0, 0, 2]], [1.0, 2.0, 5.0], size=(2, 3))  # a duplicate at (0, 0)
    np.testing.assert_array_equal(np.diagonal(d), [3.0, 0.0])


def test_unsupported_functions_raise_numpy_type_error():
    t, _ = _make("csr")
    for f in (np.cumsum, np.sort, np.linalg.norm, np.unique, np.ravel):
        with pytest.raises(TypeError, match="no implementation found"):
            f(t)
    with pytest.raises(TypeError, match="no implementation found"):
        np.append(t, t)
