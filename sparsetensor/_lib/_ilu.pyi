"""Incomplete factorizations and triangular solves on one CSR matrix (Cython, sequential).

Inputs: a canonical square CSR matrix (crow (n + 1,), cols (nnz,) of one index dtype, int32 or
int64; sorted unique columns, checked by sparsetensor._backend.cpu._ilu), values float32, float64,
complex64 or complex128. ``info`` (2,) int64 receives (status, row): 0 OK, 1 zero pivot, 2 missing
diagonal, 3 pivot not positive (IC), 4 indices changed after validation, 5 an entry above the
diagonal (IC)."""
import numpy as np

def ilu0(
    crow: np.ndarray,  # (n + 1,) index
    cols: np.ndarray,  # (nnz,) index, same dtype
    a: np.ndarray,     # (nnz,) values: overwritten with L (strict lower, unit diagonal) and U
    info: np.ndarray,  # (2,) int64 out
) -> None: ...

def ic0(
    crow: np.ndarray,  # (n + 1,) index: a lower triangle, the diagonal last in each row
    cols: np.ndarray,  # (nnz,) index
    a: np.ndarray,     # (nnz,) values: overwritten with L, A ~ L L^H
    info: np.ndarray,  # (2,) int64 out
) -> None: ...

def solve_triangular(
    crow: np.ndarray,  # (n + 1,) index
    cols: np.ndarray,  # (nnz,) index
    a: np.ndarray,     # (nnz,) values
    b: np.ndarray,     # (n, k) C-contiguous, same dtype as a: overwritten with the solution
    lower: bool,
    unit_diagonal: bool,
    info: np.ndarray,  # (2,) int64 out
    inv_diag: np.ndarray,  # (0,) or (n,), same dtype as a: the diagonal's reciprocals, multiplied by
    diag_pos: np.ndarray,  # (0,) or (n,) int64: each row's diagonal position in cols
) -> None: ...
