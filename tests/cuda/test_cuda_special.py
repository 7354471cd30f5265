"""isnan, isinf, isposinf, isneginf, signbit, nan_to_num, erf and erfinv of CUDA tensors, and the
gradients of the last three, and the comparisons with a scalar (``t > s`` & co.), against the CPU's (SciPy's erf and erfinv): bools exactly, values
to 1e-6 (float32) and 1e-12 (float64) relative. Runs on a GPU or on the kernel emulator (see
test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import host

pytest.importorskip("scipy.special")

NAMES = ["isnan", "isinf", "isposinf", "isneginf", "signbit", "nan_to_num", "erf", "erfinv"]
RTOL = {np.dtype(np.float16): 1e-3, np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-12,
        np.dtype(np.complex128): 1e-12}


def values(rng, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return rng.integers(-5, 6, 40).astype(dtype)
    v = np.concatenate([rng.uniform(-1, 1, 24), [np.nan, np.inf, -np.inf, -0.0, 1.0, -1.0, 0.9999, 1e-30],
                        1 - np.logspace(-7, -1, 8)])
    if dtype.kind == "c":
        with np.errstate(invalid="ignore"):  # inf * 1j: NaN real parts, wanted
            v = v + 1j * rng.permutation(v)
    return v.astype(dtype)


@pytest.mark.parametrize("layout", ["coo", "csr", "bsc"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex128, np.int32, np.bool_])
def test_against_cpu(backend, rng, layout, dtype):
    v = values(rng, dtype)
    a = np.zeros((2, 40), v.dtype)
    a[1] = v
    if layout == "coo":
        t = st.sparse_coo_tensor(np.array([[1] * 40, list(range(40))]), v, size=(2, 40))
    else:
        t = st.from_dense(a, layout, **({"blocksize": (1, 2)} if layout == "bsc" else {}))
    d = t.cuda()
    for name in NAMES:
        try:
            with np.errstate(all="ignore"):
                want = getattr(st, name)(t)
        except TypeError:
            with pytest.raises(TypeError):
                getattr(st, name)(d)
            continue
        got = getattr(st, name)(d)
        assert got.is_cuda and got.layout is want.layout and got.dtype == want.dtype, name
        g, w = host(got.values()), np.asarray(want.values())
        if w.dtype == np.bool_ or w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:
            np.testing.assert_allclose(g, w, rtol=RTOL[w.dtype], atol=0, equal_nan=True, err_msg=name)


SCALARS = [0, 1, -1, 0.5, -0.25, 0.9999, 1e-30, np.float32(0.9999), np.float64(0.1), 3, -(1 << 70), 1 << 70,
           np.nan, np.inf, np.int64(-2), True]


@pytest.mark.parametrize("layout", ["coo", "csr", "bsc"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.bool_])
def test_comparisons_against_cpu(backend, rng, layout, dtype):
    v = values(rng, dtype) if np.dtype(dtype) != np.uint8 else rng.integers(0, 6, 40).astype(np.uint8)
    v = np.concatenate([v, np.asarray([0.1, 2 ** 53 + 1], np.float64).astype(dtype)]) if np.dtype(dtype).kind in "fi" \
        and np.dtype(dtype).itemsize == 8 else v
    n = v.size
    if layout == "coo":  # repeats at (1, 0) and (1, 1): compared after their sum
        t = st.sparse_coo_tensor(np.array([[1] * n, [0, 1] + list(range(n - 2))]), v, size=(2, n))
    else:
        a = np.zeros((2, n), v.dtype)
        a[1] = v
        t = st.from_dense(a, layout, **({"blocksize": (1, 2)} if layout == "bsc" and n % 2 == 0 else {}))
    d = t.cuda()
    ops = {"<": lambda x, s: x < s, "<=": lambda x, s: x <= s, ">": lambda x, s: x > s, ">=": lambda x, s: x >= s}
    for s in SCALARS:
        for op, fn in ops.items():
            try:
                with np.errstate(all="ignore"):
                    want = fn(t, s)
            except (ValueError, TypeError, OverflowError) as e:
                with pytest.raises(type(e)):
                    fn(d, s)
                continue
            got = fn(d, s)
            assert got.is_cuda and got.layout is want.layout and got.dtype == np.bool_, (op, s)
            np.testing.assert_array_equal(host(got.to_dense()), want.to_dense(), err_msg=f"t {op} {s!r}")


def test_gradients(backend):
    t = st.from_dense(np.array([[0.0, 0.3], [-0.7, 0.25], [np.nan, 0.9]]), "csr")
    for fn in (lambda x: st.sum(st.erf(x) * x), lambda x: st.sum(st.erfinv(x * 0.5)),
               lambda x: st.sum(st.nan_to_num(x) * 3.0)):
        _, pb = st.autograd.vjp(fn, t)
        _, dpb = st.autograd.vjp(fn, t.cuda())
        np.testing.assert_allclose(host(dpb(DeviceArray.from_host(np.array(1.0)))[0].values()),
                                   pb(1.0)[0].values(), rtol=1e-12, equal_nan=True)


def test_complex_erf_against_scipy(backend):
    """erf of complex values across its regimes (the series near 0 and the imaginary axis, the
    continued fraction elsewhere, overflowing and underflowing exponentials, huge parts) and the
    special values of either part, against SciPy's to 1e-12 (complex128) or 1e-6 (complex64)
    relative, NaNs and infinities (with their signs) at the same places."""
    radii = np.concatenate([np.logspace(-300, -1, 6), np.linspace(0.1, 11, 56), np.logspace(1.1, 2.5, 8), [1e9, 1e300]])
    angles = np.linspace(0, 2 * np.pi, 31)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.5, 8.0, 26.0, 27.0, 1e300]
    z = np.concatenate([(radii[:, None] * np.exp(1j * angles)).ravel(),
                        [complex(a, b) for a in special for b in special]])
    for dtype, rtol in ((np.complex128, 1e-12), (np.complex64, 1e-6)):
        with np.errstate(all="ignore"):
            x = z.astype(dtype)
        t = st.sparse_coo_tensor(np.arange(x.size)[None], x, size=(x.size,))
        want = np.asarray(st.erf(t).values())
        got = host(st.erf(t.cuda()).values())
        assert got.dtype == want.dtype
        for part in ("real", "imag"):
            g, w = getattr(got, part), getattr(want, part)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=part)
            np.testing.assert_array_equal(np.where(np.isinf(w), w, 0), np.where(np.isinf(g), g, 0), err_msg=part)
        finite = np.isfinite(want)
        with np.errstate(all="ignore"):
            err = np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), np.finfo(got.real.dtype).tiny)
        assert err.max() <= rtol, (x[finite][err.argmax()], err.max())
