"""isnan, isinf, isposinf, isneginf, signbit, nan_to_num, erf and erfinv of sparse tensors (PyTorch's
sparse functions of those names): the pattern kept, the values NumPy's / SciPy's, on every layout;
nan_to_num, erf and erfinv in place and differentiable.

Oracle: NumPy and scipy.special on the values, PyTorch 2.13 where it has the function.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from conftest import LAYOUTS, requires_torch

sp = pytest.importorskip("scipy.special")

SPECIAL = np.array([0.5, -1.0, np.nan, np.inf, -np.inf, -0.0, 0.999, -0.3, 2.0, 1.0])
PREDICATES = {"isnan": np.isnan, "isinf": np.isinf, "isposinf": np.isposinf, "isneginf": np.isneginf,
              "signbit": np.signbit}


def tensor(layout, values):
    """A (2, 10) tensor holding ``values`` in its second row (blocks of 1 x 2 for bsr/bsc)."""
    a = np.zeros((2, 10), values.dtype)
    a[1] = values
    kw = {"blocksize": (1, 2)} if layout in ("bsr", "bsc") else {}
    t = st.sparse_coo_tensor(np.array([[1] * 10, list(range(10))]), values, size=(2, 10)) if layout == "coo" else \
        st.from_dense(a, layout, **kw)
    return t, a


def stored(t, a):
    """Whether each element of ``a``'s shape is stored in ``t``."""
    return t._replace_values(np.ones(t.values().shape, np.bool_)).to_dense()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.complex128, np.int32, np.bool_])
def test_predicates_and_nan_to_num(layout, dtype):
    v = SPECIAL.astype(dtype) if np.dtype(dtype).kind in "fc" else np.array([1, -2, 3, 0, 5, -1, 2, 7, 0, 1]).astype(dtype)
    t, a = tensor(layout, v)
    where = stored(t, a)
    for name, fn in PREDICATES.items():
        if np.dtype(dtype).kind == "c" and name not in ("isnan", "isinf"):
            with pytest.raises(TypeError, match=f"{name} is not defined for dtype"):
                getattr(st, name)(t)
            continue
        r = getattr(t, name)()
        r.check_invariants()
        assert r.dtype == np.bool_ and r.layout is t.layout and r.nnz == t.nnz
        np.testing.assert_array_equal(r.to_dense(), fn(a) & where)
        assert not hasattr(t, f"{name}_")  # bool results: no in-place form
    r = st.nan_to_num(t, nan=1.5, neginf=-7.0)
    np.testing.assert_array_equal(r.to_dense(), np.nan_to_num(a, nan=1.5, neginf=-7.0) * where)
    assert r.dtype == t.dtype


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_erf_erfinv(layout, dtype):
    v = SPECIAL.astype(dtype) if np.dtype(dtype).kind == "f" else np.array([1, -2, 3, 0, 5, -1, 2, 7, 0, 1]).astype(dtype)
    t, a = tensor(layout, v)
    where = stored(t, a)
    with np.errstate(all="ignore"):
        for name in ("erf", "erfinv"):
            r = getattr(st, name)(t)
            want = getattr(sp, name)(a)
            assert r.dtype == want.dtype and r.layout is t.layout
            np.testing.assert_array_equal(r.to_dense()[where], want[where])


def test_in_place_and_complex():
    t = st.from_dense(np.array([[0.0, np.nan], [np.inf, 0.25]]), "csr")
    assert t.nan_to_num_(posinf=3.0) is t
    np.testing.assert_array_equal(t.to_dense(), [[0.0, 0.0], [3.0, 0.25]])
    t.erf_()
    np.testing.assert_allclose(t.values(), sp.erf(np.array([0.0, 3.0, 0.25])))
    c = st.from_dense(np.array([0.5 + 1j, 0]), "coo")
    np.testing.assert_allclose(st.erf(c).values(), sp.erf(np.array([0.5 + 1j])))
    with pytest.raises(TypeError, match="erfinv is not defined for dtype complex128"):
        st.erfinv(c)
    z = st.from_dense(np.array([np.nan + 1j * np.inf, 0]), "coo")
    np.testing.assert_array_equal(st.nan_to_num(z).values(), np.nan_to_num(np.array([np.nan + 1j * np.inf])))


def _fd_check(fn, t, eps=1e-6):
    """vjp's cotangent of sum(fn(t)) against central differences on t's values."""
    def loss(x):
        return float(st.sum(fn(x)))

    _, pullback = st.autograd.vjp(lambda x: st.sum(fn(x)), t)
    got = pullback(1.0)[0].values()
    v = t.values()
    for k in range(v.size):
        hi, lo = v.copy(), v.copy()
        hi.flat[k] += eps
        lo.flat[k] -= eps
        assert got.flat[k] == pytest.approx((loss(t._replace_values(hi)) - loss(t._replace_values(lo))) / (2 * eps),
                                            rel=1e-5, abs=1e-7)


def test_gradients():
    t = st.from_dense(np.array([[0.0, 0.3], [-0.7, 0.25], [1.5, 0.0]]), "csr")
    _fd_check(lambda x: st.erf(x) * 2.0, t)
    _fd_check(lambda x: st.erfinv(x * 0.5), t)
    _fd_check(lambda x: st.nan_to_num(x) * x, t)
    n = st.from_dense(np.array([np.nan, 0.5, 0.0]), "coo")
    _, pullback = st.autograd.vjp(lambda x: st.sum(st.nan_to_num(x) * 3.0), n)
    np.testing.assert_array_equal(pullback(1.0)[0].values(), [0.0, 3.0])  # the replaced NaN: no gradient


@requires_torch
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_torch(layout):
    import torch

    t, a = tensor(layout, SPECIAL.astype(np.float32))
    tt = t.to_torch().clone()
    for name in ("isnan", "isinf", "isposinf", "isneginf", "signbit", "erf", "erfinv", "nan_to_num"):
        if name == "nan_to_num" and layout == "csr":
            continue  # torch's csr has no nan_to_num
        with np.errstate(all="ignore"):
            ours = getattr(st, name)(t).to_dense()
        theirs = getattr(torch, name)(tt).to_dense().numpy()
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, equal_nan=True)
