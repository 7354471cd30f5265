"""Incomplete factorizations and sparse triangular solves: :func:`ilu0`, :func:`ic0`, :func:`spsolve_triangular`.

The local parts of the block-Jacobi preconditioners of :mod:`sparsetensor.mpi`, usable on
their own. Each takes a 2-d square sparse tensor (converted to CSR; a tensor that was never
checked is checked, unsorted or repeated columns repaired by coalescing) and runs the
sequential Cython kernels of :mod:`sparsetensor._lib._ilu`. Values are promoted as
:func:`scipy.sparse.linalg.spsolve_triangular` promotes them: ``np.promote_types(dtype,
float32)`` (integers and bool to a float type, float16 to float32); the factors have the
input's index dtype.
"""

from __future__ import annotations

import numpy as np

from .._backend.cpu import _ilu as _backend
from .._core._canonical import ensure_valid
from .._core._from_arrays import sparse_csr_tensor
from .._core._layout import sparse_csr
from .._core._tensor import SparseTensor

__all__ = ["ic0", "ilu0", "spsolve_triangular"]


def _square_csr(t, what: str):
    """``t`` as a validated 2-d square CSR tensor of a field dtype."""
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{what} expects a sparse tensor, got {type(t).__name__}")
    if t.ndim != 2 or t.batch_dim or t.dense_dim:
        raise ValueError(f"{what} expects a 2-d sparse tensor without batch or dense dims, got a {t.layout.name} "
                         f"tensor of shape {tuple(t.shape)}")
    if t.shape[0] != t.shape[1]:
        raise ValueError(f"{what} expects a square matrix, got shape {tuple(t.shape)}")
    if t.device != "cpu":
        raise NotImplementedError(f"{what} runs on the CPU; the tensor is on {t.device} (move it with .cpu())")
    t = t if t.layout is sparse_csr else t.to_sparse_csr()
    t = ensure_valid(t, repair=True)
    dtype = np.promote_types(t.dtype, np.float32)
    if dtype not in _backend.FIELD_DTYPES:
        raise TypeError(f"{what}: values of dtype {t.dtype} are not supported")
    return t, dtype


def _members(t, dtype):
    return (np.ascontiguousarray(t.crow_indices()), np.ascontiguousarray(t.col_indices()),
            np.ascontiguousarray(t.values(), dtype=dtype))


def _csr(crow, cols, vals, n):
    """A CSR tensor on a subset of a canonical pattern (so canonical too)."""
    out = sparse_csr_tensor(crow, cols, vals, size=(n, n), check_invariants=False)
    out._canonical = True  # rows of a validated tensor, filtered: still sorted and unique
    return out


def _split(crow, cols, vals, n, keep):
    """The entries where ``keep`` (a mask over the entries) holds, as CSR members."""
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(crow))
    c = np.zeros(n + 1, dtype=crow.dtype)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=c[1:])
    return c, cols[keep], vals[keep]


def ilu0(t):
    """The incomplete LU factorization with no fill, ILU(0): ``A ~ L U`` on ``A``'s pattern.

    ``L`` (unit lower triangular) and ``U`` (upper triangular) have exactly the
    entries of ``A``'s lower and upper triangles (the diagonal in both), and ``(L @
    U)[i, j] == A[i, j]`` wherever ``A`` has an entry (Saad, *Iterative Methods for
    Sparse Linear Systems*, 10.3.2). Every row of ``A`` must have a diagonal entry.

    Parameters
    ----------
    t : SparseTensor
        2-d, square (any layout; converted to CSR).

    Returns
    -------
    L, U : CompressedTensor
        CSR tensors; ``L`` has ones on its diagonal.

    Raises
    ------
    numpy.linalg.LinAlgError
        A zero pivot ``U[i, i] == 0`` or a row without a diagonal entry (the message names the row).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.factor import ilu0
    >>> a = np.array([[4.0, 1.0, 0.0], [1.0, 4.0, 1.0], [0.0, 1.0, 4.0]])
    >>> L, U = ilu0(st.from_dense(a))
    >>> bool(np.allclose(L.to_dense() @ U.to_dense(), a))     # tridiagonal: no fill, so exact
    True
    """
    t, dtype = _square_csr(t, "ilu0")
    n = t.shape[0]
    crow, cols, vals = _members(t, dtype)
    lu = _backend.ilu0_values(crow, cols, vals)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(crow))
    c64 = cols.astype(np.int64)
    lvals = np.where(c64 == rows, np.ones(1, dtype=dtype), lu)
    L = _csr(*_split(crow, cols, lvals, n, c64 <= rows), n)
    U = _csr(*_split(crow, cols, lu, n, c64 >= rows), n)
    return L, U


def _lower(t, dtype):
    """The lower triangle's members (diagonal included) of a canonical CSR tensor."""
    n = t.shape[0]
    crow, cols, vals = _members(t, dtype)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(crow))
    return _split(crow, cols, vals, n, cols.astype(np.int64) <= rows)


def ic0(t):
    """The incomplete Cholesky factorization with no fill, IC(0): ``A ~ L L^H`` on ``A``'s lower triangle.

    Reads only the lower triangle (diagonal included) of ``A``, which must be Hermitian
    positive definite (or close enough: IC(0) can break down on other matrices). ``(L @
    L^H)[i, j] == A[i, j]`` wherever the lower triangle of ``A`` has an entry.

    Parameters
    ----------
    t : SparseTensor
        2-d, square.

    Returns
    -------
    L : CompressedTensor
        CSR, lower triangular, with a real positive diagonal.

    Raises
    ------
    numpy.linalg.LinAlgError
        A pivot that is not positive, or a row without a diagonal entry (naming the row).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.factor import ic0
    >>> a = np.array([[4.0, 2.0, 0.0], [2.0, 5.0, 1.0], [0.0, 1.0, 3.0]])
    >>> L = ic0(st.from_dense(a)).to_dense()
    >>> bool(np.allclose(L @ L.T, a))
    True
    """
    t, dtype = _square_csr(t, "ic0")
    n = t.shape[0]
    crow, cols, vals = _lower(t, dtype)
    return _csr(crow, cols, _backend.ic0_values(crow, cols, vals), n)


def spsolve_triangular(t, b, lower: bool = True, unit_diagonal: bool = False):
    """Solve ``T x = b`` for a sparse triangular ``T``: :func:`scipy.sparse.linalg.spsolve_triangular`'s semantics.

    Parameters
    ----------
    t : SparseTensor
        2-d, square. Only its lower (``lower=True``) or upper triangle is read; the
        entries of the other triangle are ignored (so the combined factors of
        :func:`ilu0` can be solved with in place).
    b : array_like
        ``(n,)`` or ``(n, k)``.
    lower : bool
    unit_diagonal : bool
        Take the diagonal as ones (its entries are not read).

    Returns
    -------
    numpy.ndarray
        The shape of ``b``, dtype ``promote_types(promote_types(t.dtype, float32), b.dtype)``.

    Raises
    ------
    numpy.linalg.LinAlgError
        A zero or missing diagonal entry (``unit_diagonal=False``), naming the row.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.factor import spsolve_triangular
    >>> T = st.from_dense(np.array([[2.0, 0.0], [1.0, 4.0]]))
    >>> spsolve_triangular(T, np.array([2.0, 9.0]))
    array([1., 2.])
    """
    t, dtype = _square_csr(t, "spsolve_triangular")
    b = np.asanyarray(b)
    n = t.shape[0]
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"spsolve_triangular: b must be ({n},) or ({n}, k), got shape {b.shape}")
    dtype = np.promote_types(dtype, b.dtype)
    if dtype not in _backend.FIELD_DTYPES:
        raise TypeError(f"spsolve_triangular: b of dtype {b.dtype} is not supported")
    crow, cols, vals = _members(t, dtype)
    x = np.array(b.reshape(n, 1 if b.ndim == 1 else b.shape[1]), dtype=dtype, order="C", copy=True)
    _backend.solve_triangular(crow, cols, vals, x, lower, unit_diagonal)
    return x.reshape(b.shape)
