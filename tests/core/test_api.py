"""The table of public ops (sparsetensor/_api.py): methods and st.* functions are one source."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor import _api

from conftest import INDEX_DTYPES, LAYOUTS, random_dense

ROOT = Path(__file__).resolve().parents[2]


def make(rng, layout, *, batch=(), dense=(), index_dtype=np.int64, dtype=np.float64):
    bs = (2, 1) if layout in ("bsr", "bsc") else (1, 1)
    a = random_dense(rng, batch=batch, blocks=(3, 4), blocksize=bs, dense=dense, dtype=dtype)
    kw = {"blocksize": bs} if layout in ("bsr", "bsc") else {}
    t = st.from_dense(a, layout, batch_dim=len(batch), dense_dim=len(dense), index_dtype=index_dtype, **kw)
    return t, a


# -- the table -------------------------------------------------------------------------------------
def test_every_row_is_bound_once():
    for op in _api.OPS:
        for name in (op.name,) + op.aliases:
            # bound behind one wrapper: vjp's recording test (_api._recorded)
            if op.method:
                attr = inspect.getattr_static(op.cls, name)
                bound = attr.fget if op.kind == "property" else attr
                assert bound.__wrapped__ is op.impl, name
            if op.function:  # a method of every layout: the method itself behind the device hand-off
                fn = getattr(st, name)
                assert fn.__wrapped__ is op.impl or (op.method and fn.__wrapped__.__wrapped__ is op.impl), name
                assert name in st.__all__, name


def test_method_and_function_are_the_same_code():
    both = [op for op in _api.OPS if op.method and op.function and op.kind == "method"]
    assert len(both) > 50
    for op in both:
        for name in (op.name,) + op.aliases:
            assert getattr(st.SparseTensor, name) is getattr(st, name), name  # one object (issue #10)


@pytest.mark.parametrize("name", ["narrow", "select", "index_select", "sum", "mean", "amax", "amin", "max", "min",
                                  "softmax", "log_softmax", "transpose", "t", "abs", "neg", "sqrt", "matmul",
                                  "dot", "multiply", "count_nonzero", "norm", "square", "sin", "relu"])
def test_torch_names_exist_as_functions(name):
    assert callable(getattr(st, name))


def test_tensor_module_imports_nothing_inside_functions():
    """_tensor.py sits below the ops: no function-level import that would climb back up."""
    tree = ast.parse((ROOT / "sparsetensor" / "_core" / "_tensor.py").read_text())
    inner = [node.lineno for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert inner == []


def test_stubs_are_current():
    spec = importlib.util.spec_from_file_location("gen_stubs", ROOT / "ci" / "gen_stubs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for path, text in gen.stubs(ROOT).items():
        assert path.read_text() == text, f"{path.name} is out of date: run `PYTHONPATH=. python ci/gen_stubs.py`"
    tensor_stub = (ROOT / "sparsetensor" / "_core" / "_tensor.pyi").read_text()
    for name in ("def matmul(self, b", "def dot(self", "def count_nonzero(self", "def max(self", "def sum(self"):
        assert name in tensor_stub, name


# -- the functions against their oracles -------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_functions_match_numpy(rng, layout, index_dtype):
    t, a = make(rng, layout, index_dtype=index_dtype)
    np.testing.assert_allclose(st.sum(t), a.sum())
    np.testing.assert_allclose(st.sum(t, 1), a.sum(1))
    np.testing.assert_allclose(st.mean(t), a.mean())
    np.testing.assert_allclose(st.max(t), a.max())
    np.testing.assert_allclose(st.min(t), a.min())
    np.testing.assert_allclose(t.max(), a.max())
    np.testing.assert_allclose(t.min(), a.min())
    np.testing.assert_allclose(np.max(t), a.max())
    np.testing.assert_array_equal(st.narrow(t, 1, 1, 2).to_dense(), a[:, 1:3])
    np.testing.assert_array_equal(st.select(t, 1, 3).to_dense(), a[:, 3])
    idx = np.array([3, 0, 0])
    np.testing.assert_array_equal(st.index_select(t, 1, idx).to_dense(), a[:, idx])
    np.testing.assert_array_equal(st.transpose(t, 0, 1).to_dense(), a.T)
    np.testing.assert_array_equal(st.t(t).to_dense(), a.T)
    np.testing.assert_array_equal(st.abs(st.neg(t)).to_dense(), np.abs(-a))
    np.testing.assert_allclose(st.sqrt(st.abs(t)).to_dense(), np.sqrt(np.abs(a)))
    x = rng.random(a.shape[1])
    np.testing.assert_allclose(st.matmul(t, x), a @ x)
    np.testing.assert_allclose(t.matmul(x), a @ x)
    np.testing.assert_allclose(t.dot(x), a @ x)
    np.testing.assert_allclose(st.dot(t, x), a @ x)
    np.testing.assert_array_equal(t.multiply(t).to_dense(), a * a)
    np.testing.assert_array_equal(st.multiply(t, 2).to_dense(), a * 2)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 1)])
def test_count_nonzero(rng, layout, dim):
    t, a = make(rng, layout)
    want = np.count_nonzero(a, axis=dim)
    got = st.count_nonzero(t, dim)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(t.count_nonzero(dim=dim), want)


def test_count_nonzero_sums_duplicates_and_skips_explicit_zeros():
    t = st.sparse_coo_tensor([[0, 0, 1, 2], [1, 1, 0, 2]], [1.0, -1.0, 0.0, np.nan], size=(3, 3))
    assert st.count_nonzero(t) == 1  # (0, 1) sums to 0; the explicit 0 does not count; NaN does
    np.testing.assert_array_equal(st.count_nonzero(t, 0), [0, 0, 1])


@pytest.mark.parametrize("layout", ["coo", "csr", "bsr"])
def test_count_nonzero_batch_and_dense_dims(rng, layout):
    batch = () if layout == "coo" else (2,)
    t, a = make(rng, layout, batch=batch, dense=(2,))
    for dim in (None, 0, -1, (0, t.ndim - 1)):
        np.testing.assert_array_equal(st.count_nonzero(t, dim), np.count_nonzero(a, axis=dim))


def test_count_nonzero_bad_dim(rng):
    t, _ = make(rng, "csr")
    with pytest.raises(IndexError, match="count_nonzero: dimension 2 out of range"):
        st.count_nonzero(t, 2)
    with pytest.raises(TypeError):
        st.count_nonzero(np.eye(2))


def test_numpy_axis_spelling_on_max(rng):
    t, a = make(rng, "csr")
    np.testing.assert_allclose(np.amax(t, axis=1).to_dense() if isinstance(np.amax(t, axis=1), st.SparseTensor)
                               else np.amax(t, axis=1), a.max(1))
    with pytest.raises(TypeError, match="out="):
        t.max(out=np.empty(()))


def test_truth_and_equality_are_not_guessed():
    """bool() of a one-element tensor is its element's (NumPy, PyTorch), of any other ambiguous,
    never ``len(t) > 0``; == raises, as PyTorch's sparse ``==`` does, instead of comparing identity."""
    assert not bool(st.zeros((1, 1)))
    assert bool(st.from_dense(np.array([[0.0, 2.0]]), "csr").narrow(1, 1, 1))
    for t in (st.zeros((3, 3)), st.from_dense(np.zeros(0), "coo")):
        with pytest.raises(ValueError, match="ambiguous"):
            bool(t)
    a = st.from_dense(np.eye(2), "csr")
    for op in (lambda: a == a.clone(), lambda: a != a, lambda: a == 0):
        with pytest.raises(NotImplementedError, match="=="):
            op()
    assert len({a, a.clone()}) == 2  # hashable by identity
