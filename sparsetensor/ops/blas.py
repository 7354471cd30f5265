"""Sparse-dense matrix products: ``@``/:func:`matmul`, :func:`mm`, :func:`mv`, :func:`bmm`,
:func:`addmm`, :func:`smm`, :func:`hspmm`, :func:`sspaddmm` and :func:`linear`.

Every product reduces to one kernel call, ``out[b] = A[b] @ D[b]`` for a batched
compressed ``A`` (see :mod:`sparsetensor._lib._spmm`):

- csr/bsr: a row-parallel gather kernel (rows pre-split by nnz);
- csc/bsc: a race-free scatter kernel over the compressed columns (output column
  stripes per thread when the dense operand is wide, per-thread buffers summed
  afterwards when it is narrow, e.g. SpMV). It runs on the tensor as it is: no
  conversion to csr, which would cost a counting sort of the entries;
- coo: converted with ``to_sparse_csr()`` (a sort, unless coalesced); batched coo
  (``sparse_dim > 2``) becomes one block-diagonal csr matrix;
- ``dense @ sparse`` is computed as ``(S.mT @ D.mT).mT``: ``S.mT`` is a view
  (csr <-> csc, bsr <-> bsc), ``D.mT`` is copied to C order, and the result is
  returned as the transposed view of the kernel's output (no copy; its last two
  axes are in Fortran order).

Dtypes follow NumPy: the result dtype is ``np.result_type`` of the operands (and of
``input``/``bias``); integer products wrap in the integer type, bool products are an
or of ands, float16 is computed in float32 and rounded once. A dense operand that is
not C-contiguous in the result dtype is copied once. Hybrid tensors (``dense_dim > 0``)
are not supported (PyTorch does not define these products either).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._core import _layout as L
from .._backend import backend_for, cpu as _cpu
from .._backend._views import UNSIGNED as _UNSIGNED, work_dtype as _work_dtype
from .._core._device import device_array, is_device_array
from .._core._dtypes import VALUE_DTYPE_SET, native
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor
from .._backend._plan import (ProductShape, batch_map as _batch_map, batch_maps as _batch_maps,  # noqa: F401
                              describe_shape as _describe, mismatch as _mismatch, product_shape,
                              result_dtype as _result_dtype)
from ._common import broadcasts_to, refuse_foreign_sparse

__all__ = ["matmul", "mm", "mv", "bmm", "addmm", "smm", "hspmm", "sspaddmm", "linear"]



def _finish(arr: np.ndarray, rt: np.dtype) -> np.ndarray:
    """Round a float32 working result to float16 once; other results are final."""
    return arr.astype(rt) if arr.dtype != rt else arr


def _as_dense(x, op: str, name: str) -> np.ndarray:
    """The dense operand as an array of its device: a NumPy array, or a device array (CuPy, PyTorch
    CUDA, DeviceArray) left where it is (the backend multiplies it there, or names the mix)."""
    if type(x) is not np.ndarray:
        if isinstance(x, SparseTensor):
            raise TypeError(f"{op}: {name} must be dense, got a sparse {x.layout.name} tensor")
        if is_device_array(x):
            x = device_array(x)
            if x.dtype not in VALUE_DTYPE_SET:
                raise TypeError(f"{op}: {name} has unsupported dtype {x.dtype}")
            return x
        refuse_foreign_sparse(x, op)
        x = np.asarray(x)
    a = native(x)
    if a.dtype not in VALUE_DTYPE_SET:
        raise TypeError(f"{op}: {name} has unsupported dtype {a.dtype}")
    return a


def _scalar(op: str, name: str, x, rt: np.dtype):
    """Check ``alpha``/``beta`` against the result dtype (PyTorch's rules) and return it as a 0-d array of
    the working dtype (integers wrap)."""
    if isinstance(x, (bool, np.bool_)):
        pass
    elif rt.kind == "b":
        if not (isinstance(x, numbers.Integral) and x in (0, 1)):
            raise TypeError(f"{op}: {name} must be a bool (or 0/1) for a bool result, got {x!r}")
        x = bool(x)
    elif rt.kind in "iu":
        if not isinstance(x, numbers.Integral):
            raise TypeError(f"{op}: {name} must be an integer for an integer result ({rt}), got {x!r}")
    elif rt.kind == "f":
        if not isinstance(x, numbers.Real):
            raise TypeError(f"{op}: {name} must be real for a {rt} result, got {x!r}")
    elif not isinstance(x, numbers.Number):
        raise TypeError(f"{op}: {name} must be a number, got {x!r}")
    wt = _work_dtype(rt)
    if wt.kind in "iu" and isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)):
        x = int(x) % (1 << (8 * wt.itemsize))  # wrap, as the product does
        return np.asarray(x, dtype=_UNSIGNED[wt.itemsize]).view(wt)
    return np.asarray(x).astype(wt)


# -- the core: sparse @ dense ---------------------------------------------------------------
def _product(S: SparseTensor, D: np.ndarray, rt: np.dtype, op: str, threads, operands, err_tensor=None,
             transposed=False):
    """``S @ D`` in the working dtype of ``rt``, NumPy matmul shapes (1-D ``D`` is a vector).

    ``operands`` are the user's operands, named in shape errors (``transposed``: the user
    asked for ``D.mT @ S.mT``); ``err_tensor`` is the user's sparse tensor, named in
    index errors (``S`` may be its transpose view).
    """
    if D.ndim == 0:
        raise _mismatch(op, *operands, "matmul needs at least 1-d operands")
    if not isinstance(S, SparseTensor):
        raise TypeError(f"{op}: expected a sparse tensor, got {type(S).__name__}")
    return _MATMUL_DENSE_BY_LAYOUT[type(S)](S, D, rt, op, threads, operands, err_tensor, transposed)


# ``_MATMUL_DENSE_BY_LAYOUT[type(S)](S, D, rt, op, threads, operands, err_tensor, transposed)``: the layout's body of
# :func:`_product` (SciPy's ``_matmul_dispatch`` -> ``_matmul_vector``/``_matmul_multivector``
# split), a body per layout (``_MATMUL_DENSE_BY_LAYOUT``).
def _compressed_product(S: CompressedTensor, D: np.ndarray, rt: np.dtype, op: str, threads, operands,
                        err_tensor=None, transposed=False):
    """The body of the compressed layouts: row-parallel kernels (csr/bsr), the
    transpose view (csc/bsc)."""
    err = S if err_tensor is None else err_tensor
    if S.dense_dim:
        raise NotImplementedError(f"{op}: a hybrid {err.layout.name} tensor (dense_dim={S.dense_dim}) times a "
                                  "dense array is not supported")
    plan = product_shape(S, D, op, operands, transposed)
    return backend_for(S, D).spmm(S, D, plan, rt, threads, err)


def _row_matrix(v: COOTensor, threads) -> CompressedTensor:
    """Sparse vector ``v`` (coo, sparse_dim 1) as the 1 x K csr matrix of its entries (row 0)."""
    (K,) = v.shape
    row = backend_for(v).flatten_coo(v.indices(), (), 1, K, False, threads)
    return COOTensor(row, v.values(), (1, K), v.is_coalesced()).to_sparse_csr(threads=threads)


def _coo_product(S: COOTensor, D: np.ndarray, rt, op, threads, operands, err_tensor=None, transposed=False):
    """The body of COO: through csr (batch dims flattened into rows)."""
    if S.dense_dim:
        raise NotImplementedError(f"{op}: a hybrid coo tensor (dense_dim={S.dense_dim}) times a dense array "
                                  "is not supported")
    sd = S.sparse_dim
    if sd == 0:
        raise _mismatch(op, *operands, "matmul needs at least 1-d operands")
    if sd == 2:
        return _product(S.to_sparse_csr(threads=threads), D, rt, op, threads, operands, S, transposed)
    if sd == 1:  # a sparse vector: a 1 x K matrix
        r = _product(_row_matrix(S, threads), D, rt, op, threads, operands, S, transposed)
        return r.reshape(r.shape[:-2] + r.shape[-1:]) if D.ndim > 1 else r.reshape(())
    # batched coo: one block-diagonal csr matrix (rows b*M + i; columns b*K + k when D has the batch)
    batch, (M, K) = S.shape[:-2], S.shape[-2:]
    vector = D.ndim == 1
    d_batch = () if vector else D.shape[:-2]
    Kd = D.shape[0] if vector else D.shape[-2]
    if Kd != K:
        raise _mismatch(op, *operands, f"inner sizes differ ({Kd} != {K})" if transposed
                        else f"inner sizes differ ({K} != {Kd})")
    try:
        out_batch = np.broadcast_shapes(batch, d_batch)
    except ValueError:
        raise _mismatch(op, *operands, f"batch shapes {batch} and {d_batch} do not broadcast") from None
    if out_batch != batch:
        raise NotImplementedError(f"{op}: broadcasting the batch (leading sparse) dims of a coo tensor "
                                  f"{batch} to {out_batch}")
    B = math.prod(batch)
    # checked: a row past M must not land in the next batch; the linearised indices stay sorted
    S = S._coalesced_checked(threads)
    batched = bool(d_batch)
    if batched and d_batch != batch:  # the dense batch broadcast: each sparse batch's own copy
        Bd = math.prod(d_batch)
        pick = np.broadcast_to(np.arange(Bd).reshape(d_batch), batch).ravel()
        D = D.reshape((Bd,) + D.shape[-2:]).take(pick, axis=0)
    D2 = D.reshape((B * K,) + D.shape[-1:]) if batched else D
    flat_idx = backend_for(S).flatten_coo(S.indices(), batch, M, K, batched, threads)
    # checked above; the flattening keeps the order and the bounds
    flat = COOTensor(flat_idx, S.values(), (B * M, B * K if batched else K), True, checked=True).to_sparse_csr(
        threads=threads)
    r = _product(flat, D2, rt, op, threads, operands, S, transposed)
    return r.reshape(batch + ((M,) if vector else (M, D.shape[-1])))


def _dense_sparse(X: np.ndarray, S: SparseTensor, rt, op, threads, operands):
    """``X @ S`` as ``(S.mT @ X.mT).mT``; a 1-d ``X`` is a row vector."""
    if X.ndim == 0:
        raise _mismatch(op, *operands, "matmul needs at least 1-d operands")
    if S.sparse_dim == 1:  # X @ v = (v as a 1 x K matrix) @ X.mT, its row dropped
        r = _product(_row_matrix(S, threads), X if X.ndim == 1 else X.swapaxes(-1, -2), rt, op, threads, operands, S,
                     True)
        return r.reshape(()) if X.ndim == 1 else r.reshape(r.shape[:-2] + r.shape[-1:])
    St = S.mT
    if X.ndim == 1:
        return _product(St, X, rt, op, threads, operands, S, True)
    return np.swapaxes(_product(St, np.swapaxes(X, -1, -2), rt, op, threads, operands, S, True), -1, -2)


def _matmul_work(a, b, op, threads, extra_dtypes=()):
    """(result in the working dtype, result dtype) of ``a @ b`` with one sparse operand."""
    if isinstance(a, SparseTensor):
        D = _as_dense(b, op, "the second operand")
        rt = _result_dtype(op, a.dtype, D.dtype, *extra_dtypes)
        return _product(a, D, rt, op, threads, (a, b)), rt
    X = _as_dense(a, op, "the first operand")
    rt = _result_dtype(op, X.dtype, b.dtype, *extra_dtypes)
    # on a device (a CPU/GPU mix raised in backend_for) the transposes of _dense_sparse are copies
    # (DeviceArray.swapaxes), the product the device SpMM of the csc/csr view
    backend_for(X, b)
    return _dense_sparse(X, b, rt, op, threads, (a, b)), rt


def _spgemm(a, b, threads=None):
    try:
        from .spgemm import spgemm
    except ImportError:
        raise NotImplementedError(f"matmul of two sparse tensors ({a.layout.name} @ {b.layout.name}) needs "
                                  "sparsetensor.ops.spgemm, which this build lacks") from None
    return spgemm(a, b, threads=threads)


# -- public API -------------------------------------------------------------------------------
def matmul(a, b, *, threads: int | None = None):
    """Matrix product with NumPy's ``matmul`` rules, one or both operands sparse.

    ``sparse @ dense`` and ``dense @ sparse`` give a dense NumPy array; a 1-d dense
    operand is a vector (SpMV); batch dims broadcast (a batched compressed tensor
    with a 2-d dense matrix, or a 2-d sparse matrix with a batched dense array).
    ``sparse @ sparse`` is delegated to :func:`sparsetensor.ops.spgemm.spgemm`.

    Parameters
    ----------
    a, b : SparseTensor or array_like
        At least one sparse tensor: coo (2-d, 1-d, or batched with ``sparse_dim > 2``),
        csr, csc, bsr or bsc (with batch dims); no dense (hybrid) dims.
    threads : int, optional
        Threads for the kernel (default: :func:`sparsetensor.num_threads`).

    Returns
    -------
    numpy.ndarray
        Of dtype ``np.result_type(a.dtype, b.dtype)``. For ``dense @ sparse`` it is
        the transposed view of the kernel's output (Fortran order in the last two
        axes); no copy is made (on a CUDA device, whose arrays are C-contiguous, both
        transposes are copies).

    Raises
    ------
    ValueError
        Shapes that do not multiply (the message names both operands).
    TypeError
        Unsupported dtypes.
    NotImplementedError
        Hybrid tensors; broadcasting the batch dims of a coo tensor.
    InvariantError
        A tensor built with ``check_invariants=False`` whose indices would be read
        out of bounds (checked on the way, never followed).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import matmul
    >>> a = st.sparse_csr_tensor([0, 1, 3], [1, 0, 2], [2.0, 3.0, 4.0], size=(2, 3))
    >>> matmul(a, np.array([1.0, 10.0, 100.0]))
    array([ 20., 403.])
    >>> matmul(np.array([[1.0, 1.0]]), a)
    array([[3., 2., 4.]])
    """
    if type(a) is CompressedTensor and type(b) is np.ndarray:  # the common case first: csr @ float
        r = _cpu.spmm_csr(a, b, threads)
        if r is not None:
            return r
    a_sparse, b_sparse = isinstance(a, SparseTensor), isinstance(b, SparseTensor)
    if a_sparse and b_sparse:
        return _spgemm(a, b, threads)
    if not (a_sparse or b_sparse):
        raise TypeError("matmul: expected at least one sparse operand; use numpy.matmul for dense arrays")
    r, rt = _matmul_work(a, b, "matmul", threads)
    return _finish(r, rt)


def _sparse_ndim(op: str, t, ndim: int, what: str):
    if isinstance(t, SparseTensor):
        if t.ndim != ndim or t.dense_dim:
            raise ValueError(f"{op}: expected {what}, got a {_describe(t)}"
                             + (f" with dense_dim={t.dense_dim}" if t.dense_dim else ""))
    elif np.ndim(t) != ndim:
        raise ValueError(f"{op}: expected {what}, got a {_describe(t)}")


def mm(a, b, *, threads: int | None = None):
    """Product of two matrices (2-d operands only), one or both sparse; see :func:`matmul`.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import mm
    >>> a = st.sparse_coo_tensor([[0, 1], [1, 0]], [2, 3], size=(2, 2))
    >>> mm(a, np.array([[1, 2], [3, 4]]))
    array([[6, 8],
           [3, 6]])
    """
    _sparse_ndim("mm", a, 2, "a 2-d matrix")
    _sparse_ndim("mm", b, 2, "a 2-d matrix")
    return matmul(a, b, threads=threads)


def mv(a, v, *, threads: int | None = None):
    """Sparse matrix times dense vector (SpMV): ``a`` 2-d sparse, ``v`` 1-d.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import mv
    >>> mv(st.sparse_csr_tensor([0, 1, 2], [1, 0], [2.0, 3.0]), np.array([1.0, 2.0]))
    array([4., 3.])
    """
    if not isinstance(a, SparseTensor):
        raise TypeError(f"mv: the matrix must be sparse, got {type(a).__name__}")
    _sparse_ndim("mv", a, 2, "a 2-d matrix")
    _sparse_ndim("mv", v, 1, "a 1-d vector")
    return matmul(a, v, threads=threads)


def bmm(a, b, *, threads: int | None = None):
    """Batched matrix product of 3-d operands with equal batch sizes (no broadcasting).

    The sparse operand is a compressed tensor with one batch dim or a coo tensor with
    ``sparse_dim == 3`` (whose batches may differ in nnz).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import bmm
    >>> a = st.from_dense(np.array([[[1.0, 0.0], [0.0, 2.0]], [[0.0, 3.0], [4.0, 0.0]]]), "csr", batch_dim=1)
    >>> bmm(a, np.ones((2, 2, 1)))[:, :, 0]
    array([[1., 2.],
           [3., 4.]])
    """
    _sparse_ndim("bmm", a, 3, "a 3-d (batched) operand")
    _sparse_ndim("bmm", b, 3, "a 3-d (batched) operand")
    nb = b.shape[0] if isinstance(b, SparseTensor) else np.shape(b)[0]  # (np.shape of a device tensor: no)
    if a.shape[0] != nb:
        raise _mismatch("bmm", a, b, f"batch sizes differ ({a.shape[0]} != {nb})")
    return matmul(a, b, threads=threads)


def addmm(input, mat1, mat2, *, beta=1, alpha=1, threads: int | None = None):
    """``beta * input + alpha * (mat1 @ mat2)``, a dense result; ``mat1`` or ``mat2`` sparse.

    ``input`` broadcasts to the product's shape. With ``beta == 0`` it is ignored
    (NaN or inf in it do not propagate), as in PyTorch. Integer results need integer
    ``alpha``/``beta`` and bool results bools (PyTorch's rule for dense ``addmm``).
    On a CUDA device every operand is on it (``input`` a dense device array) and the result is
    a device array: sparse @ sparse runs the device SpGEMM, sparse @ dense and dense @ sparse
    the device SpMM (floating and complex dtypes).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import addmm
    >>> a = st.sparse_csr_tensor([0, 1, 2], [1, 0], [2.0, 3.0])
    >>> addmm(np.ones((2, 1)), a, np.eye(2), beta=10, alpha=2)
    array([[10., 14.],
           [16., 10.]])
    """
    op = "addmm"
    _sparse_ndim(op, mat1, 2, "a 2-d matrix")
    _sparse_ndim(op, mat2, 2, "a 2-d matrix")
    inp = _as_dense(input, op, "input")
    backend = backend_for(inp, mat1, mat2)  # a CPU/GPU mix raises here, before any product
    if isinstance(mat1, SparseTensor) and isinstance(mat2, SparseTensor):
        prod = _spgemm(mat1, mat2, threads).to_dense(threads=threads)
        rt = _result_dtype(op, inp.dtype, prod.dtype)
        prod = prod.astype(_work_dtype(rt))
    elif isinstance(mat1, SparseTensor) or isinstance(mat2, SparseTensor):
        prod, rt = _matmul_work(mat1, mat2, op, threads, (inp.dtype,))
    else:
        raise TypeError("addmm: expected mat1 or mat2 to be sparse; use numpy for dense operands")
    a, b = _scalar(op, "alpha", alpha, rt), _scalar(op, "beta", beta, rt)
    if not broadcasts_to(inp.shape, prod.shape):
        raise ValueError(f"addmm: input of shape {inp.shape} does not broadcast to the product's shape "
                         f"{prod.shape} ({_describe(mat1)} @ {_describe(mat2)})")
    return _finish(backend.scale_add(prod, inp, a, b, alpha != 1, beta != 0, threads), rt)


def _rows_csr(S, op: str, threads, other_dtypes) -> tuple:
    """(``S`` as a 2-d csr tensor whose indices are safe to read, the product's dtype with the
    ``other_dtypes``). A device tensor's repeated entries are summed in the product's dtype, as
    the CPU's kernels sum them as they read them."""
    if not isinstance(S, SparseTensor):
        raise TypeError(f"{op}: the matrix must be sparse, got {type(S).__name__}")
    _sparse_ndim(op, S, 2, "a 2-d sparse matrix")
    rt = _result_dtype(op, S.dtype, *other_dtypes)
    csr = S.to_sparse_csr(threads=threads)
    if not csr.is_coalesced():
        backend = backend_for(csr)
        if backend.device == "cpu":
            backend.check_bounds(csr, threads)
        else:  # the device's row kernels read canonical rows: repair them, as its conversions do
            csr = backend.coalesce(csr if csr.dtype == rt else csr._replace_values(csr.values().astype(rt)), threads)
    return csr, rt


def _hspmm_work(S, D, op, threads, extra_dtypes=()):
    """(row indices, product rows in the working dtype, result dtype, csr of S, marks: None on the
    host, on a device the scan of the nonempty rows that ``full_rows_coo`` takes)."""
    D = _as_dense(D, op, "the dense matrix")
    csr, rt = _rows_csr(S, op, threads, (D.dtype, *extra_dtypes))
    if D.ndim != 2:
        raise ValueError(f"{op}: expected a 2-d dense matrix, got a {_describe(D)}")
    M, K = csr.shape
    if D.shape[0] != K:
        raise _mismatch(op, S, D, f"inner sizes differ ({K} != {D.shape[0]})")
    crow = csr.crow_indices()
    backend = backend_for(csr, D)  # a CPU/GPU mix raises here
    if backend.device != "cpu":
        rows, compact, marks = backend.nonempty_rows(crow, threads)
    else:
        marks = None
        rows = np.flatnonzero(crow[1:] != crow[:-1])
        compact = np.append(crow[rows], crow[-1]).astype(crow.dtype)  # the rows with entries, in order
        rows = rows.astype(crow.dtype)
    sub = CompressedTensor(compact, csr.col_indices(), csr.values(), (rows.size, K), L.sparse_csr,
                           csr.is_coalesced())
    return rows, _product(sub, D, rt, op, threads, (S, D), S), rt, csr, marks


def hspmm(S, D, *, threads: int | None = None):
    """``S @ D`` as a hybrid coo tensor: ``sparse_dim=1``, ``dense_dim=1``.

    Its indices are the rows of ``S`` that have specified entries (in order, each once),
    its values the matching rows of the product (PyTorch's ``torch.hspmm``; any layout
    of ``S`` is accepted, converted to csr; a bsr/bsc block specifies all its rows).
    On a CUDA device (``S`` and ``D`` there) the result is a device tensor, for floating and
    complex values; so are those of :func:`smm` and :func:`sspaddmm`.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import hspmm
    >>> h = hspmm(st.sparse_coo_tensor([[0, 2], [1, 0]], [2.0, 3.0], size=(3, 2)), np.eye(2))
    >>> h.indices(), h.values()
    (array([[0, 2]]), array([[0., 2.],
           [3., 0.]]))
    """
    rows, vals, rt, csr, _ = _hspmm_work(S, D, "hspmm", threads)
    return COOTensor(rows.reshape(1, rows.size), _finish(vals, rt), (csr.shape[0], vals.shape[1]), coalesced=True)


def smm(S, D, *, threads: int | None = None):
    """``S @ D`` as a 2-d coo tensor (PyTorch's ``torch.smm``).

    Every element of every row of ``S`` that has specified entries is specified
    (zeros included), in row-major order; the result is coalesced.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import smm
    >>> r = smm(st.sparse_csr_tensor([0, 0, 1], [1], [2.0], size=(2, 2)), np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> r.indices(), r.values()
    (array([[1, 1],
           [0, 1]]), array([6., 8.]))
    """
    rows, vals, rt, csr, marks = _hspmm_work(S, D, "smm", threads)
    R, N = vals.shape
    if marks is not None:
        return backend_for(csr).full_rows_coo(marks, _finish(vals, rt), (csr.shape[0], N), rows.dtype, threads)
    idx = np.stack([np.repeat(rows, N), np.tile(np.arange(N, dtype=rows.dtype), R)])
    return COOTensor(idx, _finish(vals, rt).reshape(R * N), (csr.shape[0], N), coalesced=True)


def sspaddmm(input, mat1, mat2, *, beta=1, alpha=1, threads: int | None = None):
    """``beta * input + alpha * (mat1 @ mat2)`` as a coo tensor (PyTorch's ``torch.sspaddmm``).

    The result lists ``input``'s entries (its values times ``beta``, kept even when
    ``beta == 0``, as PyTorch does) followed by the entries of :func:`smm` ``(mat1,
    mat2)`` times ``alpha``; it is not coalesced unless one part is empty (call
    ``coalesce()`` to sum the duplicates). ``input`` and ``mat1`` are sparse (any
    layout, converted to coo/csr), ``mat2`` dense.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import sspaddmm
    >>> i = st.sparse_coo_tensor([[0], [0]], [1.0], size=(2, 2))
    >>> m = st.sparse_coo_tensor([[1], [1]], [2.0], size=(2, 2))
    >>> r = sspaddmm(i, m, np.eye(2), beta=3)
    >>> r.indices(), r.values()
    (array([[0, 1, 1],
           [0, 0, 1]]), array([3., 0., 2.]))
    """
    op = "sspaddmm"
    if not isinstance(input, SparseTensor):
        raise TypeError(f"{op}: input must be sparse, got {type(input).__name__}")
    _sparse_ndim(op, input, 2, "a 2-d sparse input")
    D = _as_dense(mat2, op, "mat2")
    backend = backend_for(input, mat1, D)  # a CPU/GPU mix raises here, before any product
    inp = input.to_sparse_coo(threads=threads)  # input itself when it is coo
    rows, vals, rt, csr, marks = _hspmm_work(mat1, D, op, threads, (inp.dtype,))
    M, N = csr.shape[0], vals.shape[1]
    if inp.shape != (M, N):
        raise ValueError(f"{op}: input of shape {inp.shape} does not match the product's shape {(M, N)} "
                         f"({_describe(mat1)} @ {_describe(mat2)})")
    a, b = _scalar(op, "alpha", alpha, rt), _scalar(op, "beta", beta, rt)
    wt = _work_dtype(rt)
    R = rows.size
    idx_dt = np.promote_types(inp.index_dtype, rows.dtype)
    coalesced = (R * N == 0 and inp.is_coalesced()) or inp.nnz == 0
    if marks is not None:  # on the device: addmm's scaling kernel, smm's coo, concatenations
        from .._backend.cuda._select import concat_axis

        vin = inp.values().astype(wt)
        backend.scale_add(vin.reshape(inp.nnz, 1), vin, b, b, True, False, threads)
        if alpha != 1:
            backend.scale_add(vals, vals, a, a, True, False, threads)
        prod = backend.full_rows_coo(marks, vals, (M, N), rows.dtype, threads)
        idx = concat_axis([inp.indices().astype(idx_dt, copy=False), prod.indices().astype(idx_dt, copy=False)], 1)
        values = _finish(concat_axis([vin, prod.values().astype(wt, copy=False)], 0), rt)
        return COOTensor(idx, values, (M, N), coalesced=coalesced)
    idx = np.concatenate([inp.indices().astype(idx_dt, copy=False),
                          np.stack([np.repeat(rows, N), np.tile(np.arange(N, dtype=rows.dtype), R)]).astype(idx_dt)],
                         axis=1)
    vin = inp.values().astype(wt) * b
    vprod = vals.reshape(R * N) * a if alpha != 1 else vals.reshape(R * N)
    values = _finish(np.concatenate([vin.astype(wt, copy=False), vprod.astype(wt, copy=False)]), rt)
    return COOTensor(idx, values, (M, N), coalesced=coalesced)


def linear(x, w, bias=None, *, threads: int | None = None):
    """``x @ w.mT + bias`` with a sparse weight ``w`` of shape ``(out_features, in_features)``.

    Computed as ``(w @ x.mT).mT`` on ``w`` as it is (csr rows gather; no conversion);
    ``x`` is dense ``(..., in_features)``, the result ``(..., out_features)`` (a
    transposed view of the kernel's output, no copy).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.blas import linear
    >>> w = st.sparse_csr_tensor([0, 1, 2], [0, 2], [1.0, 2.0], size=(2, 3))
    >>> linear(np.array([[1.0, 2.0, 3.0]]), w, bias=np.array([0.5, 0.5]))
    array([[1.5, 6.5]])
    """
    op = "linear"
    if not isinstance(w, SparseTensor):
        raise TypeError(f"{op}: the weight must be sparse, got {type(w).__name__}")
    _sparse_ndim(op, w, 2, "a 2-d sparse weight (out_features, in_features)")
    X = _as_dense(x, op, "x")
    if X.ndim == 0:
        raise ValueError(f"{op}: x must be at least 1-d, got a 0-d array")
    extra = ()
    if bias is not None:
        bias = _as_dense(bias, op, "bias")
        extra = (bias.dtype,)
    rt = _result_dtype(op, X.dtype, w.dtype, *extra)
    out_f, in_f = w.shape
    if X.shape[-1] != in_f:
        raise ValueError(f"{op}: x of shape {X.shape} does not fit a weight of shape {w.shape} "
                         f"({w.layout.name}): in_features {X.shape[-1]} != {in_f}")
    operands = (X, w)
    if X.ndim == 1:
        y = _product(w, X, rt, op, threads, operands, w)
    else:
        lead = X.shape[:-1]
        X2 = X.reshape(math.prod(lead), in_f)  # swapaxes: NumPy's transposed view, a device array's transposed copy
        y = _product(w, X2.swapaxes(0, 1), rt, op, threads, operands, w).swapaxes(0, 1).reshape(lead + (out_f,))
    if bias is not None:
        if not broadcasts_to(bias.shape, y.shape):
            raise ValueError(f"{op}: bias of shape {bias.shape} does not broadcast to the output shape "
                             f"{y.shape}")
        if type(y) is np.ndarray:
            np.add(y, bias.astype(y.dtype, copy=False), out=y)
        else:  # on the device: addmm's update kernel, on the (rows, out_features) view of y
            if bias.ndim > 1 and y.ndim > 2:
                raise NotImplementedError(f"{op} on {w.device} with a bias of shape {bias.shape} broadcasting over "
                                          f"an output of shape {y.shape} (a bias of 1 dim has a GPU kernel)")
            one = np.ones((), y.dtype)
            backend_for(y, bias).scale_add(y.reshape(math.prod(y.shape[:-1]), out_f), bias, one, one, False, True,
                                           threads)
    return _finish(y, rt)


# Each op's body per layout family, picked where the op reads it: ``TABLE[type(t)](t, ...)``.
_MATMUL_DENSE_BY_LAYOUT = {COOTensor: _coo_product, CompressedTensor: _compressed_product}
