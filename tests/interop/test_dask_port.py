"""Dask's own test list for sparse chunks (dask/array/tests/test_sparse.py: ``functions``,
``test_metadata``, ``test_tensordot``, ``test_from_array``, ...) ported to sparsetensor chunks.

The cases are Dask's; the chunks are ours (COO tensors, as pydata/sparse's COO there, of
the same 3-d (2, 3, 4) array in (1, 2, 2) chunks). Where a case cannot work it is an
xfail(strict=True) with the reason (an op that would densify or that has no sparse
kernel raises; nothing is densified silently).

Runs in this process with whatever ``array.query-planning`` is set; ``test_query_planning``
reruns this file in a subprocess with it on (Dask reads the switch once per process).
"""

import builtins
import os
import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import sparsetensor as st  # noqa: E402
import sparsetensor.dask  # noqa: E402,F401
from dask.array.utils import assert_eq  # noqa: E402


def _coo(b):
    return st.from_dense(np.asarray(b), "coo")


def _densify(x):
    return x.to_dense() if isinstance(x, st.SparseTensor) else np.asarray(x)


QP = da.array_expr_enabled()  # array.query-planning, fixed for this process at dask.array's import
EXPR = "dask-expr (query planning on): "


def xf(reason, condition=True):
    """xfail(strict=True), raising one of the errors the reason names (with query planning on, dask-expr may
    stop earlier: its own NotImplementedError/AttributeError for a feature it lacks)."""
    names = [e for e in ("NotImplementedError", "AttributeError", "IndexError", "TypeError", "ValueError") if e in reason]
    names += ["NotImplementedError", "AttributeError"] if QP and names else []
    return pytest.mark.xfail(condition, strict=True, reason=reason,
                             raises=tuple(getattr(builtins, e) for e in names) or None)


def xf_expr(what):
    """A Dask feature that dask-expr does not have yet (it raises NotImplementedError/AttributeError itself)."""
    return xf(EXPR + what + " (NotImplementedError or AttributeError)", QP)


DENSE_RESULT = "the result is dense; sparse chunks refuse it (ValueError/TypeError naming the op)"
functions = [
    pytest.param(lambda x: x, id="identity"),
    pytest.param(lambda x: da.expm1(x), id="expm1"),
    pytest.param(lambda x: 2 * x, id="2*x"),
    pytest.param(lambda x: x / 2, id="x/2"),
    pytest.param(lambda x: x**2, id="x**2"),
    pytest.param(lambda x: x + x, id="x+x"),
    pytest.param(lambda x: x * x, id="x*x"),
    pytest.param(lambda x: x[0], id="x[0]"),
    pytest.param(lambda x: x[:, 1], id="x[:,1]"),
    pytest.param(lambda x: x[:1, None, 1:3], id="x[:1,None,1:3]"),
    pytest.param(lambda x: x.T, id="x.T"),
    pytest.param(lambda x: da.transpose(x, (1, 2, 0)), id="transpose(1,2,0)", marks=xf_expr("da.transpose is not implemented")),
    pytest.param(lambda x: da.nanmean(x), id="nanmean"),
    pytest.param(lambda x: da.nanmean(x, axis=1), id="nanmean(axis=1)"),
    pytest.param(lambda x: da.nanmax(x), id="nanmax", marks=xf("np.nanmax of a sparse chunk has no sparse implementation (__array_function__ refuses it: TypeError)")),
    pytest.param(lambda x: da.nanmin(x), id="nanmin", marks=xf("np.nanmin of a sparse chunk has no sparse implementation (__array_function__ refuses it: TypeError)")),
    pytest.param(lambda x: da.nanprod(x), id="nanprod", marks=xf("no sparse product reduction (np.nanprod is refused by __array_function__: TypeError)")),
    pytest.param(lambda x: da.nanstd(x), id="nanstd", marks=xf_expr("var/std reach __array_function__ of an expression, not implemented")),
    pytest.param(lambda x: da.nanvar(x), id="nanvar", marks=xf_expr("var/std reach __array_function__ of an expression, not implemented")),
    pytest.param(lambda x: da.nansum(x), id="nansum"),
    pytest.param(lambda x: x.sum(), id="sum"),
    pytest.param(lambda x: x.moment(order=0), id="moment0"),
    pytest.param(lambda x: x.mean(), id="mean"),
    pytest.param(lambda x: x.mean(axis=1), id="mean(axis=1)"),
    pytest.param(lambda x: x.std(), id="std", marks=xf_expr("var/std reach __array_function__ of an expression, not implemented")),
    pytest.param(lambda x: x.var(), id="var", marks=xf_expr("var/std reach __array_function__ of an expression, not implemented")),
    pytest.param(lambda x: x.dot(np.arange(x.shape[-1])), id="dot(arange)", marks=xf("np.dot of a 3-d sparse tensor: only 2-d products (NotImplementedError)")),
    pytest.param(lambda x: x.dot(np.eye(x.shape[-1])), id="dot(eye)", marks=xf("np.dot of a 3-d sparse tensor: only 2-d products (NotImplementedError)")),
    pytest.param(lambda x: da.tensordot(x, np.ones(x.shape[:2]), axes=[(0, 1), (0, 1)]), id="tensordot", marks=xf("np.tensordot of 3-d sparse tensors: only 2-d operands (NotImplementedError)")),
    pytest.param(lambda x: x.sum(axis=0), id="sum(axis=0)"),
    pytest.param(lambda x: x.max(axis=0), id="max(axis=0)"),
    pytest.param(lambda x: x.sum(axis=(1, 2)), id="sum(axis=(1,2))"),
    pytest.param(lambda x: x.astype(np.complex128), id="astype"),
    pytest.param(lambda x: x.map_blocks(lambda x: x * 2), id="map_blocks"),
    pytest.param(lambda x: x.map_overlap(lambda x: x * 2, depth=0, trim=True, boundary="none"), id="map_overlap-trim"),
    pytest.param(lambda x: x.map_overlap(lambda x: x * 2, depth=0, trim=False, boundary="none"), id="map_overlap"),
    pytest.param(lambda x: x.round(1), id="round", marks=xf_expr("Array has no .round")),
    pytest.param(lambda x: x.reshape((x.shape[0] * x.shape[1], x.shape[2])), id="reshape", marks=xf_expr("Array has no .reshape")),
    pytest.param(lambda x: abs(x), id="abs"),
    pytest.param(lambda x: x > 0.5, id="x>0.5"),
    pytest.param(lambda x: x.rechunk((4, 4, 4)), id="rechunk(4,4,4)"),
    pytest.param(lambda x: x.rechunk((2, 2, 1)), id="rechunk(2,2,1)"),
    pytest.param(lambda x: np.isneginf(x), id="isneginf", marks=xf_expr("np.* functions on an Array: its __array_function__ raises NotImplementedError")),
    pytest.param(lambda x: np.isposinf(x), id="isposinf", marks=xf_expr("np.* functions on an Array: its __array_function__ raises NotImplementedError")),
    pytest.param(lambda x: np.zeros_like(x), id="zeros_like", marks=xf_expr("np.zeros_like of an Array")),
    pytest.param(lambda x: np.ones_like(x), id="ones_like", marks=xf("np.ones_like of a sparse tensor is dense: refused (ValueError naming np.ones_like)")),
    pytest.param(lambda x: np.full_like(x, fill_value=2), id="full_like", marks=xf("np.full_like of a sparse tensor is dense: refused (ValueError naming np.full_like)")),
]


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((2, 3, 4))
    x[x < 0.8] = 0
    return x


@pytest.fixture(autouse=True)
def sync():
    with dask.config.set(scheduler="sync"):
        yield


@pytest.mark.parametrize("func", functions)
def test_basic(func):
    x = da.from_array(_data(), chunks=(1, 2, 2))
    y = x.map_blocks(_coo, meta=_coo(np.zeros((0, 0, 0))))
    xx = func(x)
    yy = func(y)
    got = yy.compute()
    np.testing.assert_allclose(_densify(got), np.asarray(xx.compute()), rtol=1e-12, atol=1e-12)
    assert got.shape == xx.shape


@xf("np.tensordot of 3-d sparse tensors: only 2-d operands (NotImplementedError)")
def test_tensordot():
    x = da.from_array(_data(0), chunks=(1, 2, 2))
    y = da.from_array(_data(1).reshape(4, 3, 2), chunks=(2, 2, 1))
    xx = x.map_blocks(_coo, meta=_coo(np.zeros((0, 0, 0))))
    yy = y.map_blocks(_coo, meta=_coo(np.zeros((0, 0, 0))))
    for axes in [(2, 0), (1, 1), ((1, 2), (1, 0))]:
        np.testing.assert_allclose(_densify(da.tensordot(xx, yy, axes=axes).compute()),
                                   np.tensordot(_data(0), _data(1).reshape(4, 3, 2), axes=axes))


def test_metadata():
    y0 = da.from_array(np.where(np.eye(10) + np.arange(100).reshape(10, 10) % 7 == 0, 1.0, 0.0), chunks=(5, 5))
    z = st.from_dense(y0.compute(), "csr")
    y = y0.map_blocks(lambda b: st.from_dense(b, "csr"), meta=st.dask.meta_like(z))
    T = st.CompressedTensor
    assert isinstance(y._meta, T)
    assert isinstance((y * 2)._meta, T)
    assert isinstance(y[:5, ::2]._meta, T)
    assert isinstance(y.rechunk((2, 2))._meta, T)
    assert isinstance((y - z)._meta, T)
    assert isinstance(y.persist()._meta, T)
    # sums of sparse chunks are dense arrays (our sum over a dim is dense), as is the product with a dense array
    assert isinstance(y.sum(axis=0)._meta, np.ndarray)
    assert (y.rechunk((2, 2)).compute().to_dense() == z.to_dense()).all()


@pytest.mark.parametrize("np_or_da", [pytest.param(np, marks=xf_expr("np.concatenate/np.stack on an Array: its "
                                                                     "__array_function__ raises NotImplementedError")),
                                      da])
def test_metadata_concatenate_stack(np_or_da):
    y0 = da.from_array(np.eye(10) * np.arange(10), chunks=(5, 5))
    y = y0.map_blocks(lambda b: st.from_dense(b, "csr"), meta=st.from_dense(np.eye(1), "csr"))
    T = st.CompressedTensor
    for got in [np_or_da.concatenate([y, y]), np_or_da.concatenate([y, y[:0], y]), np_or_da.stack([y, y]),
                np_or_da.stack([y[:0], y[:0]]), np_or_da.concatenate([y[:0], y[:0]])]:
        assert isinstance(got._meta, T)
    np.testing.assert_array_equal(da.concatenate([y, y[:0], y], axis=1).compute().to_dense(),
                                  np.concatenate([y0.compute()] * 2, axis=1))


@xf("y + 1 adds 1 to every element: dense; sparse chunks refuse it (NotImplementedError naming add)")
def test_metadata_plus_scalar():
    y = da.from_array(st.from_dense(np.eye(4), "csr"), chunks=2)
    (y + 1).compute()


@xf_expr("from_delayed is not implemented")
def test_from_delayed_meta():
    d = dask.delayed(lambda: st.from_dense(np.eye(3), "csr"))()
    x = da.from_delayed(d, shape=(3, 3), meta=st.from_dense(np.eye(1), "csr"))
    assert isinstance(x._meta, st.CompressedTensor)
    assert (x.compute().to_dense() == np.eye(3)).all()


def test_from_array():
    x = st.from_dense(np.eye(10), "coo")
    d = da.from_array(x, chunks=(5, 5))
    assert isinstance(d._meta, st.COOTensor)
    got = d.compute()
    assert isinstance(got, st.COOTensor) and (got.to_dense() == np.eye(10)).all()


@xf_expr("da.eye is not implemented")
def test_map_blocks():
    x = da.eye(10, chunks=5)
    y = x.map_blocks(lambda b: st.from_dense(b, "csr"), meta=st.from_dense(np.eye(1), "csr"))
    assert isinstance(y._meta, st.CompressedTensor)
    assert (y.compute().to_dense() == np.eye(10)).all()


def test_meta_from_array():
    y = da.utils.meta_from_array(st.from_dense(np.eye(1), "csr"), ndim=2)
    assert isinstance(y, st.CompressedTensor) and y.shape == (0, 0)


@pytest.mark.parametrize("numel", ["numel", "nannumel"])
@pytest.mark.parametrize("axis", [0, (0, 1), None])
@pytest.mark.parametrize("keepdims", [True, False])
def test_numel(numel, axis, keepdims):
    from dask.array import reductions

    x = _data()
    x[x > 0.9] = np.nan
    fn = getattr(reductions, numel)
    np.testing.assert_array_equal(fn(_coo(x), axis=axis, keepdims=keepdims), fn(x, axis=axis, keepdims=keepdims))


@pytest.mark.skipif(os.environ.get("DASK_ARRAY__QUERY_PLANNING") == "True", reason="this is the subprocess")
def test_query_planning():
    """The whole file again with ``array.query-planning`` on (a fresh process: Dask reads it once)."""
    env = dict(os.environ, DASK_ARRAY__QUERY_PLANNING="True")
    r = subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
