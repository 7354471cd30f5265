"""SciPy's linear-operator protocol: the iterative solvers take our tensors directly and give
SciPy's answers; the direct solvers refuse them with a pointer to ``to_scipy()``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import sparsetensor as st

from conftest import INDEX_DTYPES, LAYOUTS

TOL = 1e-10


def _poisson(n: int) -> sp.csr_array:
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    eye = sp.eye_array(n)
    return (sp.kron(eye, T) + sp.kron(T, eye)).tocsr()


def _nonsymmetric(n: int, dtype=np.float64) -> sp.csr_array:
    A = _poisson(n).astype(dtype)
    C = sp.diags_array([0.3, -0.3], offsets=[-1, 1], shape=A.shape).astype(dtype)
    if np.dtype(dtype).kind == "c":
        C = C * (1 + 0.5j)
    return (A + C).tocsr()


def _rect(m: int, n: int, dtype=np.float64, seed=0) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    A = sp.random_array((m, n), density=0.2, rng=rng, dtype=np.float64) + sp.eye_array(m, n)
    if np.dtype(dtype).kind == "c":
        A = A + 1j * sp.random_array((m, n), density=0.1, rng=rng)
    return A.tocsr()


def _ours(A, layout: str, index_dtype):
    t = st.from_scipy(A.tocsr()).to(index_dtype=index_dtype)
    return t.to_sparse(layout, blocksize=(2, 2) if layout in ("bsr", "bsc") else None)


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)


@pytest.fixture(params=LAYOUTS)
def layout(request):
    return request.param


@pytest.fixture(params=INDEX_DTYPES, ids=["i32", "i64"])
def index_dtype(request):
    return request.param


# -- the protocol itself ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int64])
def test_products_match_scipy(layout, index_dtype, dtype):
    A = _rect(6, 8, np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    A = (A * 4).astype(dtype) if np.dtype(dtype).kind in "iu" else A.astype(dtype)
    t = _ours(A, layout, index_dtype)
    L = sla.aslinearoperator(A)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(8), rng.standard_normal(6)
    X, Y = rng.standard_normal((8, 3)), rng.standard_normal((6, 3))
    tol = 1e-5 if dtype == np.float32 else TOL
    for ours, ref in [(t.matvec(x), L.matvec(x)), (t.matvec(x[:, None]), L.matvec(x[:, None])),
                      (t.rmatvec(y), L.rmatvec(y)), (t.matmat(X), L.matmat(X)), (t.rmatmat(Y), L.rmatmat(Y)),
                      (t.adjoint().to_dense(), A.toarray().conj().T), (t.H.to_dense(), A.toarray().conj().T)]:
        assert ours.shape == ref.shape
        np.testing.assert_allclose(ours, ref, rtol=tol, atol=tol)
    # the adjoint of a compressed tensor is the transpose view: indices shared, not copied
    if layout != "coo":
        assert np.shares_memory(t.H.compressed_indices(), t.compressed_indices())


def test_rmatvec_does_not_copy_the_tensor(monkeypatch):
    t = _ours(_rect(6, 8), "csr", np.int64)
    seen = []
    from sparsetensor.interop import linop

    real = linop.matmul

    def spy(a, b):
        seen.append(a)
        return real(a, b)

    monkeypatch.setattr(linop, "matmul", spy)
    t.rmatvec(np.ones(6))
    (a,) = seen
    assert a.layout == st.sparse_csc and a.values() is t.values() and a.plain_indices() is t.plain_indices()


def test_protocol_errors():
    t = _ours(_rect(6, 8), "csr", np.int64)
    with pytest.raises(ValueError, match=r"shape \(8,\)"):
        t.matvec(np.ones(6))
    with pytest.raises(ValueError, match=r"\(6, k\)"):
        t.rmatmat(np.ones(6))
    with pytest.raises(TypeError, match="dense"):
        t.matvec(t)
    b = st.from_dense(np.ones((2, 3, 3)), "csr", batch_dim=1)
    with pytest.raises(ValueError, match="2-d sparse matrix"):
        b.matvec(np.ones(3))


def test_aslinearoperator_keeps_dtype_and_shape(layout):
    t = _ours(_rect(6, 8, np.complex128), layout, np.int32)
    L = sla.aslinearoperator(t)
    assert L.shape == (6, 8) and L.dtype == np.complex128
    x = np.arange(8.0)
    _close(L @ x, t.to_dense() @ x)
    _close(L.H @ np.ones(6), t.to_dense().conj().T @ np.ones(6))


# -- the solvers ----------------------------------------------------------------------------------------
def _solve_both(solver, A, t, *args, **kwargs):
    ref = solver(A, *args, **kwargs)
    ours = solver(t, *args, **kwargs)
    return ours, ref


@pytest.mark.parametrize("solver", [sla.cg, sla.minres, sla.gmres, sla.bicgstab])
def test_iterative_solvers(layout, index_dtype, solver):
    A = _poisson(6) if solver in (sla.cg, sla.minres) else _nonsymmetric(6)
    t = _ours(A, layout, index_dtype)
    b = np.linspace(1.0, 2.0, A.shape[0])
    (x, info), (xr, infor) = _solve_both(solver, A, t, b, rtol=1e-12, maxiter=200)
    assert info == infor == 0
    _close(x, xr)
    _close(t.matvec(x), b)


def test_gmres_complex(layout):
    A = _nonsymmetric(6, np.complex128)
    t = _ours(A, layout, np.int64)
    b = np.linspace(1.0, 2.0, A.shape[0]) * (1 - 1j)
    (x, info), (xr, _) = _solve_both(sla.gmres, A, t, b, rtol=1e-12)
    assert info == 0
    _close(x, xr)


@pytest.mark.parametrize("solver", [sla.lsqr, sla.lsmr])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_least_squares(layout, index_dtype, solver, dtype):
    A = _rect(12, 8, dtype)
    t = _ours(A, layout, index_dtype)
    b = np.linspace(-1.0, 1.0, 12).astype(dtype)
    ours, ref = _solve_both(solver, A, t, b, atol=1e-14, btol=1e-14)
    _close(ours[0], ref[0])
    assert ours[2] == ref[2]  # the same number of iterations


def test_eigsh_and_svds(layout, index_dtype):
    A = _poisson(6)
    t = _ours(A, layout, index_dtype)
    v0 = np.linspace(1.0, 2.0, A.shape[0])
    w = sla.eigsh(t, k=3, v0=v0, return_eigenvectors=False)
    _close(np.sort(w), np.sort(sla.eigsh(A, k=3, v0=v0, return_eigenvectors=False)))
    R = _rect(12, 8)
    r = _ours(R, layout, index_dtype)
    s = sla.svds(r, k=3, v0=np.linspace(1.0, 2.0, 8), return_singular_vectors=False)
    _close(np.sort(s), np.sort(sla.svds(R, k=3, v0=np.linspace(1.0, 2.0, 8), return_singular_vectors=False)))
    _close(np.sort(s), np.sort(np.linalg.svd(R.toarray(), compute_uv=False))[-3:])


def test_expm_multiply_through_a_linear_operator(layout):
    A = _poisson(4) * -0.1
    t = _ours(A.tocsr(), layout, np.int64)
    B = np.linspace(0.0, 1.0, A.shape[0])
    ref = sla.expm_multiply(A, B)
    ours = sla.expm_multiply(sla.aslinearoperator(t), B, traceA=t.trace())
    _close(ours, ref)
    # given the tensor itself SciPy treats it as a dense matrix (t - mu * np.eye(n) is dense): right, but O(n^2)
    _close(sla.expm_multiply(t, B), ref)


@pytest.mark.parametrize("call", [lambda t, b: sla.spsolve(t, b), lambda t, b: sla.splu(t),
                                  lambda t, b: sla.spilu(t), lambda t, b: sla.factorized(t),
                                  lambda t, b: sp.csr_array(t)])
def test_direct_solvers_point_to_to_scipy(layout, call):
    t = _ours(_poisson(4), layout, np.int64)
    with pytest.raises((TypeError, ValueError)) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call(t, np.ones(16))
    err = info.value
    text = str(err) + str(err.__cause__ or "")
    assert "to_scipy()" in text
    # and what the message says works
    m = (t.to_sparse_bsr((2, 2)) if layout == "bsc" else t).to_scipy()  # SciPy has no bsc
    x = sla.spsolve(m.tocsc(), np.ones(16))
    _close(t.matvec(x), np.ones(16))
    assert np.asarray(t).shape == (16, 16)  # np.asarray from anywhere else still densifies (under its limit)
