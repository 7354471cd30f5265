"""Incomplete factorizations and sparse triangular solves: :func:`ilu0`, :func:`ic0`, :func:`spsolve_triangular`.

The local parts of the block-Jacobi preconditioners of :mod:`sparsetensor.mpi`, usable on
their own. Each takes a 2-d square sparse tensor (converted to CSR; a tensor that was never
checked is checked, unsorted or repeated columns repaired by coalescing) and hands it to its
device's backend: the sequential Cython kernels of :mod:`sparsetensor._lib._ilu` on the CPU,
level-scheduled kernels on a GPU (:mod:`sparsetensor._backend.cuda._factor`), with the same
results and errors. Values are promoted as :func:`scipy.sparse.linalg.spsolve_triangular`
promotes them: ``np.promote_types(dtype, float32)`` (integers and bool to a float type,
float16 to float32); the factors have the input's index dtype.
"""

from __future__ import annotations

import numpy as np

from .._backend import backend_for
from .._backend.cpu._ilu import FIELD_DTYPES
from .._core._canonical import ensure_valid
from .._core._device import device_array, is_device_array
from .._core._layout import sparse_csr
from .._core._tensor import SparseTensor

__all__ = ["ic0", "ilu0", "spsolve_triangular"]


def _square_csr(t, what: str, other=None):
    """``t`` as a validated 2-d square CSR tensor of a field dtype (its values' dtype promoted to a
    float type, and with ``other``'s where given: the values are cast once), and that dtype."""
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{what} expects a sparse tensor, got {type(t).__name__}")
    if t.ndim != 2 or t.batch_dim or t.dense_dim:
        raise ValueError(f"{what} expects a 2-d sparse tensor without batch or dense dims, got a {t.layout.name} "
                         f"tensor of shape {tuple(t.shape)}")
    if t.shape[0] != t.shape[1]:
        raise ValueError(f"{what} expects a square matrix, got shape {tuple(t.shape)}")
    t = t if t.layout is sparse_csr else t.to_sparse_csr()
    t = ensure_valid(t, repair=True)
    dtype = np.promote_types(t.dtype, np.float32)
    if dtype not in FIELD_DTYPES:
        raise TypeError(f"{what}: values of dtype {t.dtype} are not supported")
    if other is not None:
        dtype = np.promote_types(dtype, other)
        if dtype not in FIELD_DTYPES:
            raise TypeError(f"{what}: b of dtype {other} is not supported")
    if t.dtype != dtype:
        t = t._replace_values(t.values().astype(dtype))
    return t, dtype


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
    t, _ = _square_csr(t, "ilu0")
    return backend_for(t).ilu0(t)


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
    t, _ = _square_csr(t, "ic0")
    return backend_for(t).ic0(t)


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
    on_device = is_device_array(b)
    b = device_array(b) if on_device else np.asanyarray(b)
    t, dtype = _square_csr(t, "spsolve_triangular", other=b.dtype)
    n = t.shape[0]
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"spsolve_triangular: b must be ({n},) or ({n}, k), got shape {b.shape}")
    backend = backend_for(t, b)
    cols = (n, 1 if b.ndim == 1 else b.shape[1])
    if on_device:  # a fresh C-contiguous copy, solved in place
        x = b.astype(dtype).reshape(cols)
    else:
        x = np.array(b.reshape(cols), dtype=dtype, order="C", copy=True)
    return backend.trsv(t, x, lower, unit_diagonal).reshape(b.shape)
