"""ilu0, ic0 and spsolve_triangular (sparsetensor.ops.factor, Cython kernels in _lib/_ilu.pyx) against
dense references and SciPy, over int32/int64 indices and float32/float64/complex64/complex128 values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import sparsetensor as st
from conftest import dominant_matrix
from sparsetensor.ops.factor import ic0, ilu0, spsolve_triangular

INDEX = [np.int32, np.int64]
VALUES = [np.float32, np.float64, np.complex64, np.complex128]


def tol(dtype):
    return 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11


def tensor(a, index_dtype):
    return st.from_dense(a).to(index_dtype=index_dtype)


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("dtype", VALUES)
def test_ilu0_matches_A_on_its_pattern(index_dtype, dtype):
    a = dominant_matrix(40, 1, dtype)
    L, U = ilu0(tensor(a, index_dtype))
    assert L.index_dtype == U.index_dtype == np.dtype(index_dtype) and L.dtype == U.dtype == np.dtype(dtype)
    Ld, Ud = L.to_dense(), U.to_dense()
    mask = a != 0
    assert np.all((Ld != 0) <= np.tril(mask))  # no fill
    assert np.all(np.diagonal(Ld) == 1) and np.all((Ud != 0) <= np.triu(mask))
    prod = Ld.astype(np.complex128) @ Ud.astype(np.complex128)
    scale = np.abs(a).max()
    assert np.abs(prod - a)[mask].max() <= tol(dtype) * scale * 10
    assert np.abs(prod - a)[~mask].max() > 0  # fill was dropped: this is not the exact LU


@pytest.mark.parametrize("dtype", VALUES)
def test_ilu0_of_a_banded_matrix_is_its_lu(dtype):
    """A tridiagonal matrix has no fill: ILU(0) is the exact LU."""
    a = (np.diag(np.full(12, 4.0)) + np.diag(np.full(11, -1.0), 1) + np.diag(np.full(11, -2.0), -1)).astype(dtype)
    L, U = ilu0(st.from_dense(a))
    assert np.allclose(L.to_dense() @ U.to_dense(), a, atol=tol(dtype) * 10)


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("dtype", VALUES)
def test_ic0_matches_A_on_its_lower_pattern(index_dtype, dtype):
    a = dominant_matrix(40, 2, dtype, hermitian=True)
    L = ic0(tensor(a, index_dtype))
    assert L.index_dtype == np.dtype(index_dtype) and L.dtype == np.dtype(dtype)
    Ld = L.to_dense().astype(np.complex128)
    mask = np.tril(a != 0)
    assert np.all((Ld != 0) <= mask) and np.all(np.diagonal(Ld).real > 0) and np.all(np.diagonal(Ld).imag == 0)
    prod = Ld @ Ld.conj().T
    assert np.abs(prod - a)[mask].max() <= tol(dtype) * np.abs(a).max() * 10
    # reads only the lower triangle: the upper one may hold anything
    junk = np.tril(a) + np.triu(np.full_like(a, 7), 1) * (a != 0)
    assert np.array_equal(ic0(tensor(junk, index_dtype)).to_dense(), L.to_dense())


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("dtype", VALUES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_spsolve_triangular_matches_scipy(index_dtype, dtype, lower, unit):
    a = dominant_matrix(30, 3, dtype)
    tri = np.tril(a) if lower else np.triu(a)
    rng = np.random.default_rng(4)
    for b in (rng.standard_normal(30), rng.standard_normal((30, 3))):
        b = b.astype(dtype)
        x = spsolve_triangular(tensor(tri, index_dtype), b, lower=lower, unit_diagonal=unit)
        want = sla.spsolve_triangular(sp.csr_array(tri), b, lower=lower, unit_diagonal=unit)
        assert x.shape == b.shape and x.dtype == want.dtype
        assert np.abs(x - want).max() <= tol(dtype) * max(np.abs(want).max(), 1)
    # entries of the other triangle are not read
    full = spsolve_triangular(tensor(a, index_dtype), b, lower=lower, unit_diagonal=unit)
    assert np.array_equal(full, spsolve_triangular(tensor(tri, index_dtype), b, lower=lower, unit_diagonal=unit))


def test_spsolve_triangular_dtypes_follow_scipy():
    t = st.from_dense(np.array([[2, 0], [1, 4]], dtype=np.int64))
    assert spsolve_triangular(t, np.array([2, 9])).dtype == np.float64
    assert spsolve_triangular(t.to(np.float32), np.ones(2, np.float32)).dtype == np.float32
    assert spsolve_triangular(t.to(np.float32), np.ones(2, np.complex128)).dtype == np.complex128
    assert spsolve_triangular(st.from_dense(np.zeros((0, 0))), np.zeros(0)).shape == (0,)


def test_zero_and_missing_pivots_raise_naming_the_row():
    a = np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 1.0], [0.0, 1.0, 3.0]])  # U[1, 1] = 4 - 2 * 2 = 0
    with pytest.raises(np.linalg.LinAlgError, match="zero pivot at row 1"):
        ilu0(st.from_dense(a))
    no_diag = st.sparse_csr_tensor([0, 1, 2, 3], [0, 0, 2], [1.0, 1.0, 1.0], size=(3, 3))
    with pytest.raises(np.linalg.LinAlgError, match="row 1 has no diagonal"):
        ilu0(no_diag)
    with pytest.raises(np.linalg.LinAlgError, match="row 1 has no diagonal"):
        ic0(no_diag)
    with pytest.raises(np.linalg.LinAlgError, match="pivot of row 1 is not positive"):
        ic0(st.from_dense(np.array([[1.0, 2.0], [2.0, 1.0]])))
    with pytest.raises(np.linalg.LinAlgError, match="zero pivot at row 1"):
        spsolve_triangular(st.sparse_csr_tensor([0, 1, 3], [0, 0, 1], [1.0, 1.0, 0.0], size=(2, 2)), np.ones(2))
    assert np.array_equal(spsolve_triangular(no_diag, np.ones(3), unit_diagonal=True), [1.0, 0.0, 1.0])


def test_bad_input():
    with pytest.raises(ValueError, match="square"):
        ilu0(st.from_dense(np.ones((2, 3))))
    with pytest.raises(TypeError, match="sparse tensor"):
        ic0(np.eye(3))
    with pytest.raises(ValueError, match="b must be"):
        spsolve_triangular(st.from_dense(np.eye(3)), np.ones(4))


def test_unsorted_and_other_layouts_are_accepted():
    a = dominant_matrix(20, 5, np.float64)
    L, U = ilu0(st.from_dense(a).to_sparse_coo())
    L2, U2 = ilu0(st.from_scipy(sp.csc_array(a)))
    assert np.array_equal(L.to_dense(), L2.to_dense()) and np.array_equal(U.to_dense(), U2.to_dense())
    t = st.from_dense(a)
    crow, cols, vals = t.crow_indices(), t.col_indices().copy(), t.values().copy()
    for i in range(20):  # reverse every row: 5.6 broken, repaired by coalescing
        cols[crow[i]:crow[i + 1]] = cols[crow[i]:crow[i + 1]][::-1]
        vals[crow[i]:crow[i + 1]] = vals[crow[i]:crow[i + 1]][::-1]
    L3, U3 = ilu0(st.sparse_csr_tensor(crow, cols, vals, size=(20, 20), check_invariants=False))
    assert np.array_equal(L3.to_dense(), L.to_dense()) and np.array_equal(U3.to_dense(), U.to_dense())


@pytest.mark.parametrize("kind", ["ilu0", "ic0", "splu"])
@pytest.mark.parametrize("dtype", VALUES)
def test_local_factor_solves(kind, dtype):
    """The block-Jacobi local solves: splu is exact; ilu0/ic0 solve with their factors' product."""
    pytest.importorskip("mpi4py")
    from sparsetensor.mpi._precond import LocalFactor

    a = dominant_matrix(25, 6, dtype, hermitian=kind != "ilu0")
    f = LocalFactor(st.from_dense(a), kind)
    r = np.random.default_rng(7).standard_normal((25, 2)).astype(dtype)
    x = f.solve(r)
    assert x.shape == r.shape and x.dtype == np.dtype(dtype)
    if kind == "splu":
        op = a
    elif kind == "ilu0":
        L, U = ilu0(st.from_dense(a))
        op = L.to_dense() @ U.to_dense()
    else:
        L = ic0(st.from_dense(a)).to_dense()
        op = L @ L.conj().T
    assert np.abs(op @ x - r).max() <= tol(dtype) * 100
    assert np.array_equal(f.solve(r[:, 0]), x[:, 0])


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("dtype", VALUES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_triangular_solve_with_known_diagonal_positions(index_dtype, dtype, lower, unit):
    """Rows' diagonal positions given (the block-Jacobi solves): the same sums in the same order as the
    scan for the diagonal, bitwise, with and without the diagonal's reciprocals; a position outside its
    row (the arrays changed since) raises instead of reading out of bounds."""
    from sparsetensor._backend.cpu import _ilu

    t = tensor(dominant_matrix(40, 8, dtype), index_dtype)
    crow, cols, vals = t.crow_indices(), t.col_indices(), np.ascontiguousarray(t.values())
    pos = _ilu.diagonal_positions(crow, cols)
    inv = _ilu.inverse_diagonal(crow, cols, vals)
    assert pos is not None and np.array_equal(cols[pos], np.arange(40))
    b = np.random.default_rng(9).standard_normal((40, 1)).astype(dtype)
    for recip in (None, inv):
        want = _ilu.solve_triangular(crow, cols, vals, b.copy(), lower, unit, "t", recip)
        got = _ilu.solve_triangular(crow, cols, vals, b.copy(), lower, unit, "t", recip, pos)
        assert np.array_equal(got, want)
    bad = pos.copy()
    bad[17] = crow[18]  # the next row's first entry
    with pytest.raises(ValueError, match="row 17 is out of range, or names a row not done before it: the arrays changed"):
        _ilu.solve_triangular(crow, cols, vals, b.copy(), lower, unit, "t", None, bad)
    assert _ilu.diagonal_positions(np.array([0, 1, 1]), np.array([0])) is None  # row 1 has no diagonal
