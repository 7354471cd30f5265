"""SciPy's linear-operator protocol on 2-d sparse tensors: ``matvec``, ``rmatvec``, ``matmat``,
``rmatmat``, ``adjoint``/``H``.

With these (and ``shape``/``dtype``), :func:`scipy.sparse.linalg.aslinearoperator`
accepts a 2-d tensor of any layout, and so do the solvers that call it: ``cg``,
``gmres``, ``bicgstab``, ``minres``, ``lsqr``, ``lsmr``, ``eigsh``, ``svds``. Each
product is one call of :func:`sparsetensor.ops.blas.matmul` on the tensor as it is;
``rmatvec``/``rmatmat`` run on the transpose view ``t.mT`` (csr <-> csc, bsr <-> bsc:
no copy), with ``conj`` applied to the dense side for complex tensors
(``A^H x = conj(A^T conj(x))``), so the tensor's values are never copied.

A coo tensor is converted to csr inside every product (a sort unless it is coalesced):
convert it once with ``t.to_sparse_csr()`` before handing it to a solver.

A CUDA tensor takes dense device operands (:class:`sparsetensor.cuda.DeviceArray` or any
device array) and gives device results; a host operand raises matmul's ValueError naming
both devices (nothing is moved).

What needs more than products:

- ``scipy.sparse.linalg.expm_multiply(t, B)`` treats an object that is neither a SciPy
  sparse array nor a ``LinearOperator`` as a dense matrix: it computes
  ``t - mu * np.eye(n)``, a dense ``n x n`` array, and works on that (right, but O(n^2)
  memory and time). Pass ``aslinearoperator(t)`` with ``traceA=t.trace()`` instead: the
  1-norm is then estimated by ``onenormest`` through ``matmat``/``rmatmat`` and nothing
  is densified.
- ``spsolve``, ``splu``, ``spilu`` and ``factorized`` need a SciPy sparse matrix: pass
  ``t.to_scipy()`` (zero-copy for csr/csc/bsr/coo). Given our tensor they raise a
  ``TypeError`` saying so (see :func:`array_refusing_scipy`), which SciPy's constructors (1.17)
  catch and raise again as a ``ValueError`` of their own: ours is its ``__cause__``.
"""

from __future__ import annotations

import sys

import numpy as np

from .._backend import backend_for, device_of
from .._core._tensor import SparseTensor
from ..ops.blas import matmul
from ..ops.pointwise import conj

__all__ = ["matvec", "rmatvec", "matmat", "rmatmat", "adjoint", "array_refusing_scipy"]


def _matrix(t, op: str):
    if t.ndim != 2 or t.dense_dim or t.batch_dim:
        raise ValueError(f"{op} needs a 2-d sparse matrix (no batch or dense dims), got a {t.layout.name} tensor "
                         f"of shape {t.shape}")


def _operand(x, n: int, op: str, matrix: bool):
    """``x`` as an array of ``n`` rows: ``(n,)``/``(n, 1)`` for a vector, ``(n, k)`` for a matrix (SciPy's rules).

    A device array stays where it is (the product runs on its device, or refuses a mix of devices)."""
    if isinstance(x, SparseTensor):
        raise TypeError(f"{op}: the operand must be dense, got a sparse {x.layout.name} tensor")
    a = x if device_of(x) not in (None, "cpu") else np.asanyarray(x)
    if matrix:
        if a.ndim != 2 or a.shape[0] != n:
            raise ValueError(f"{op}: expected a dense matrix of shape ({n}, k), got shape {a.shape}")
    elif a.shape not in ((n,), (n, 1)):
        raise ValueError(f"{op}: expected a vector of shape ({n},) or ({n}, 1), got shape {a.shape}")
    return a


def matvec(self, x):
    """``self @ x`` for a vector ``x`` of shape ``(n,)`` or ``(n, 1)`` (SciPy's ``LinearOperator.matvec``).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.sparse_csr_tensor([0, 1, 3], [1, 0, 1], [2.0, 3.0, 4.0], size=(2, 2))
    >>> a.matvec(np.array([1.0, 10.0]))
    array([20., 43.])
    """
    _matrix(self, "matvec")
    return matmul(self, _operand(x, self._shape[1], "matvec", False))


def matmat(self, X):
    """``self @ X`` for a 2-d dense ``X`` (SciPy's ``LinearOperator.matmat``).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.sparse_csr_tensor([0, 1, 3], [1, 0, 1], [2.0, 3.0, 4.0], size=(2, 2))
    >>> a.matmat(np.eye(2))
    array([[0., 2.],
           [3., 4.]])
    """
    _matrix(self, "matmat")
    return matmul(self, _operand(X, self._shape[1], "matmat", True))


def _adjoint_product(self, x):
    """``self^H @ x`` through the transpose view (the values are not copied)."""
    if self.dtype.kind == "c":
        return _conj(matmul(self.mT, _conj(x)))
    return matmul(self.mT, x)


def _conj(x):
    """The conjugate of a dense array on its device (a real one is returned as it is)."""
    if np.dtype(x.dtype).kind != "c":
        return x
    return backend_for(x).map_values(x, "conj", np.conjugate)


def rmatvec(self, x):
    """``self^H @ x`` (conjugate transpose) for a vector ``x`` of shape ``(m,)`` or ``(m, 1)``.

    Runs on the transpose view ``self.mT``: no copy of the tensor.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.sparse_csr_tensor([0, 1, 3], [1, 0, 1], [2.0, 3.0, 4.0], size=(2, 2))
    >>> a.rmatvec(np.array([1.0, 10.0]))
    array([30., 42.])
    """
    _matrix(self, "rmatvec")
    return _adjoint_product(self, _operand(x, self._shape[0], "rmatvec", False))


def rmatmat(self, X):
    """``self^H @ X`` for a 2-d dense ``X``, through the transpose view.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.sparse_csr_tensor([0, 1, 3], [1, 0, 1], [2.0, 3.0, 4.0], size=(2, 2))
    >>> a.rmatmat(np.eye(2))
    array([[0., 3.],
           [2., 4.]])
    """
    _matrix(self, "rmatmat")
    return _adjoint_product(self, _operand(X, self._shape[0], "rmatmat", True))


def adjoint(self):
    """The conjugate transpose: ``self.mT`` (a view for compressed layouts) with conjugated values
    (a copy only for complex dtypes). Also the property ``H``.

    Examples
    --------
    >>> import sparsetensor as st
    >>> a = st.sparse_csr_tensor([0, 1, 1], [1], [1 + 2j], size=(2, 2))
    >>> h = a.adjoint()
    >>> h.layout, h.to_dense()
    (st.sparse_csc, array([[0.+0.j, 0.+0.j],
           [1.-2.j, 0.+0.j]]))
    """
    _matrix(self, "adjoint")
    return conj(self.mT)  # a real tensor is its own conjugate (no copy)


# -- SciPy constructors and direct solvers -----------------------------------------------------------
def array_refusing_scipy(dense_array):
    """Wrap ``SparseTensor.__array__`` so that SciPy's sparse constructors (and through them
    ``spsolve``, ``splu``, ``spilu``, ``factorized``, which call ``csc_array(A)`` on what is not
    already a SciPy matrix) get a ``TypeError`` naming ``t.to_scipy()`` instead of densifying
    the tensor (``np.asarray`` from any other caller is unchanged)."""
    def __array__(self, dtype=None, copy=None):
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__") == "sparsetensor._api":
            frame = frame.f_back  # the op table's wrapper (vjp's recording test) is not the caller
        caller = frame.f_globals.get("__name__", "") if frame is not None else ""
        if caller.startswith("scipy.sparse"):
            raise TypeError(f"{caller} would densify a sparse {self.layout.name} tensor of shape {self.shape}: pass "
                            "t.to_scipy() (zero-copy) to SciPy's sparse constructors and direct solvers "
                            "(spsolve, splu, spilu, factorized); iterative solvers take the tensor itself")
        return dense_array(self, dtype, copy)

    __array__.__doc__ = dense_array.__doc__
    return __array__
