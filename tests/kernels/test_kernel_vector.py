"""The dense vector kernels of the Krylov methods (_vector.axpy, sub_combination, dot, dots, xpay,
scale_dots):
results against NumPy for the four field dtypes, lengths around the kernels' 2048-item blocks
and their 8-item unrolling, 1-3 threads; dot and dots give the same bits on any thread count;
mismatched lengths raise ValueError instead of reading past an array.
"""
import numpy as np
import pytest

from sparsetensor._lib import _vector

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
KEYS = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.complex64): "float complex",
        np.dtype(np.complex128): "double complex"}
SIZES = [0, 1, 7, 8, 9, 2047, 2048, 2049, 3 * 2048 + 5, 20000]
THREADS = [1, 2, 3]
RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-13, np.dtype(np.complex64): 2e-5,
        np.dtype(np.complex128): 1e-13}


def _vec(rng, shape, dtype):
    v = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(shape)
    return v.astype(dtype)


def _kernel(name, dtype):
    return getattr(_vector, name)[KEYS[np.dtype(dtype)]]


def _close(got, want, dtype, scale):
    assert abs(got - want) <= RTOL[np.dtype(dtype)] * max(scale, 1.0), (got, want)


def _same_sum(got, want, dtype):
    """The same summation: bitwise for real dtypes; for complex ones the compiler may contract a
    product to fused multiply-adds differently where the loop is inlined, so to rounding."""
    if np.dtype(dtype).kind == "f":
        assert got == want
    else:
        _close(got, want, dtype, abs(want))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_against_numpy(rng, dtype, n, threads):
    x, y = _vec(rng, n, dtype), _vec(rng, n, dtype)
    got = _kernel("dot", dtype)(x, y, threads)
    want = np.vdot(x.astype(np.complex128), y.astype(np.complex128))
    _close(got, want, dtype, float(np.abs(x).astype(np.float64) @ np.abs(y).astype(np.float64)))
    assert got == _kernel("dot", dtype)(x, y, 1)  # blocks summed in order: one result on any thread count
    if np.dtype(dtype).kind == "f":
        assert isinstance(got, float)
    else:
        assert isinstance(got, complex)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", [0, 9, 2049, 20000])
@pytest.mark.parametrize("K", [1, 3, 31])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dots_against_numpy(rng, dtype, K, n, threads):
    V, w = _vec(rng, (K, n), dtype), _vec(rng, n, dtype)
    out = np.full(K, 7, dtype)
    _kernel("dots", dtype)(V, w, out, threads)
    want = V.astype(np.complex128).conj() @ w.astype(np.complex128)
    for k in range(K):
        _close(out[k], want[k], dtype, float(np.abs(V[k]).astype(np.float64) @ np.abs(w).astype(np.float64)))
        assert out[k] == _kernel("dot", dtype)(V[k], w, 1)  # the same sums as dot, row by row
    more = np.empty(K + 1, dtype)  # one more entry: w^H w last
    _kernel("dots", dtype)(V, w, more, threads)
    np.testing.assert_array_equal(more[:K], out)
    _same_sum(more[K], _kernel("dot", dtype)(w, w, 1), dtype)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_axpy_and_sub_combination_against_numpy(rng, dtype, n, threads):
    x, y = _vec(rng, n, dtype), _vec(rng, n, dtype)
    a = dtype(0.75 - 0.5j) if np.dtype(dtype).kind == "c" else dtype(0.75)
    want = y + a * x
    _kernel("axpy", dtype)(a, x, y, threads)
    np.testing.assert_allclose(y, want, rtol=RTOL[np.dtype(dtype)], atol=RTOL[np.dtype(dtype)])
    V, c, w = _vec(rng, (4, n), dtype), _vec(rng, 4, dtype), _vec(rng, n, dtype)
    want = w - c @ V
    ww = _kernel("sub_combination", dtype)(c, V, w, threads)
    np.testing.assert_allclose(w, want, rtol=10 * RTOL[np.dtype(dtype)], atol=10 * RTOL[np.dtype(dtype)])
    _same_sum(ww, _kernel("dot", dtype)(w, w, 1), dtype)  # the new w's squared norm, summed as dot sums it


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_xpay_and_scale_dots_against_numpy(rng, dtype, n, threads):
    x, y = _vec(rng, n, dtype), _vec(rng, n, dtype)
    a = dtype(0.5 + 0.25j) if np.dtype(dtype).kind == "c" else dtype(-1.5)
    want = x + a * y
    _kernel("xpay", dtype)(a, x, y, threads)
    np.testing.assert_allclose(y, want, rtol=RTOL[np.dtype(dtype)], atol=RTOL[np.dtype(dtype)])
    d, r = _vec(rng, n, dtype), _vec(rng, n, dtype)
    z = np.full(n, 3, dtype)
    rr, rz = _kernel("scale_dots", dtype)(d, r, z, threads)
    if np.dtype(dtype).kind == "f":
        np.testing.assert_array_equal(z, d * r)
    else:  # a complex product may be contracted to fused multiply-adds
        np.testing.assert_allclose(z, d * r, rtol=RTOL[np.dtype(dtype)], atol=RTOL[np.dtype(dtype)])
    r128 = r.astype(np.complex128)
    _close(rr, np.vdot(r128, r128), dtype, float(np.vdot(r128, r128).real))
    _close(rz, np.vdot(r128, z.astype(np.complex128)), dtype, float(np.abs(r128) @ np.abs(z).astype(np.float64)))
    z1 = np.empty_like(z)
    assert (rr, rz) == _kernel("scale_dots", dtype)(d, r, z1, 1)  # one result on any thread count


@pytest.mark.parametrize("dtype", DTYPES)
def test_mismatched_lengths_raise(dtype):
    a, b = np.zeros(5, dtype), np.zeros(6, dtype)
    with pytest.raises(ValueError, match="dot: x has 5 items, y 6"):
        _kernel("dot", dtype)(a, b, 1)
    with pytest.raises(ValueError, match="axpy"):
        _kernel("axpy", dtype)(1, a, b, 1)
    with pytest.raises(ValueError, match="dots"):
        _kernel("dots", dtype)(np.zeros((2, 5), dtype), b, np.zeros(2, dtype), 1)
    with pytest.raises(ValueError, match="dots"):
        _kernel("dots", dtype)(np.zeros((2, 6), dtype), b, np.zeros(4, dtype), 1)
    with pytest.raises(ValueError, match="xpay"):
        _kernel("xpay", dtype)(1, a, b, 1)
    with pytest.raises(ValueError, match="scale_dots"):
        _kernel("scale_dots", dtype)(a, b, b, 1)
    with pytest.raises(ValueError, match="scale_dots"):
        _kernel("scale_dots", dtype)(b, b, a, 1)
    with pytest.raises(ValueError, match="sub_combination"):
        _kernel("sub_combination", dtype)(np.zeros(2, dtype), np.zeros((3, 6), dtype), b, 1)
