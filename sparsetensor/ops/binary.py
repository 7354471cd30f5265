"""Elementwise binary operations: add, sub, mul, div, maximum, minimum (and neg).

What each operand combination gives (PyTorch 2.13 semantics where PyTorch has them):

============================  =========================================================
sparse + sparse (add, sub)    sparse, the union of the patterns (explicit zeros from
                              cancellation stay entries)
sparse + dense, dense+sparse  dense array (operands of one shape)
sparse + scalar               a scalar 0: the tensor in NumPy's dtype (SciPy's ``A + 0``);
                              another is refused (it would specify every element), as in
                              PyTorch
sparse * sparse               sparse, the intersection of the patterns
sparse * dense, dense*sparse  sparse, the pattern of the sparse operand (the dense operand
                              is sampled there; it may broadcast to the sparse shape)
sparse * scalar               sparse, the same pattern
sparse / scalar or dense      sparse, the same pattern (unspecified elements stay 0, also
                              where the divisor is 0; PyTorch's rule for a scalar divisor)
anything / sparse             refused (it would make every unspecified element inf/NaN)
maximum/minimum(sparse, sp.)  sparse, the union of the patterns; an unspecified element
                              counts as 0 (PyTorch has no sparse maximum/minimum)
maximum/minimum with dense    dense array (operands of one shape)
============================  =========================================================

Sparse operands must have one shape. When their layouts differ the second operand is
converted to the first's layout (and blocksize); batch and dense (hybrid) dims must then
agree, and dense dims combine elementwise within each entry's values. The result dtype is
``numpy.result_type`` of the operands (NumPy 2's rules: Python scalars are weak, so an
int32 tensor times 2.5 is float64 where PyTorch gives float32); float16 is computed in
float32 and rounded once, bool ``add`` is logical or and ``mul`` logical and.

Sparse-sparse results are canonical (compressed) or coalesced (coo), in the index dtype of
the operands (int64 when they differ). Compressed operands are merged row by row in
parallel (:mod:`sparsetensor._lib._elementwise`, two passes: count, prefix sum, fill; unions
of one batch in one pass into outputs of nnz_a + nnz_b entries). coo operands are coalesced;
unions (add, sub, maximum, minimum) are then merged in one pass, as csr rows over the flat
leading sparse dims (sparse_dim >= 2) or on linear keys computed on the fly, their indices
checked on the way (bounds, and the order the coalesced flag claims: InvariantError);
intersections (mul) linearise the index columns to int64 keys and merge them in two passes.
Batched compressed results need the same nnz in every batch (ValueError otherwise).
Results of value-only operations (a scalar or dense operand) share the index arrays of
the sparse operand.

On a CUDA device the same table holds for a device tensor with dense device arrays (a
``DeviceArray``, or anything with ``__cuda_array_interface__`` or DLPack, read without a
copy) on its device; dense results are device arrays; a 0-d device array is a scalar, as a
0-d host array is. The arithmetic runs on float and
complex values (maximum/minimum also on integers and bool); a host array with a device tensor
raises ValueError naming both devices.
"""

from __future__ import annotations

import numbers

import numpy as np

from .._backend import backend_for
from .._core._canonical import ensure_valid
from .._core._dtypes import VALUE_DTYPES, native
from .._core._device import device_array, is_device_array
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor
from ._common import broadcasts_to, describe, refuse_foreign_sparse, without_duplicates

__all__ = ["add", "sub", "mul", "div", "maximum", "minimum", "neg"]


# -- operands -------------------------------------------------------------------------------------


def _operand(x, name: str):
    """("sparse" | "dense" | "scalar" | "device", x as a tensor, an array or a scalar); "sparse": a
    tensor of any device; "device": a dense CUDA array, which no op here takes (see :func:`_on_device`)."""
    if isinstance(x, SparseTensor):
        return "sparse", x
    if is_device_array(x):
        return "device", x
    if isinstance(x, (numbers.Number, np.generic)):
        if isinstance(x, np.generic) and x.dtype.kind not in "biufc":
            raise TypeError(f"{name}: unsupported operand {x!r}")
        return "scalar", x
    refuse_foreign_sparse(x, name)
    arr = np.asarray(x)
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"{name}: unsupported operand of type {type(x).__name__} (dtype {arr.dtype})")
    if arr.ndim == 0:
        return "scalar", arr[()]
    return "dense", native(arr)  # the kernels read native numbers (a big-endian complex was split in two)


def _on_device(name: str, ka: str, kb: str, a, b) -> tuple:
    """The kinds and operands when one operand is a dense CUDA array: with a sparse tensor on its
    device it is a "dense" operand (as a DeviceArray, no copy); a CPU/GPU mix raises ValueError
    naming both devices, two dense arrays or a scalar NotImplementedError."""
    a, b = (device_array(x) if k == "device" else x for k, x in ((ka, a), (kb, b)))  # its ordinal known
    backend_for(a, b)
    if "sparse" not in (ka, kb) or "scalar" in (ka, kb):
        raise NotImplementedError(f"{name}({describe(a)}, {describe(b)}): a dense device array has a GPU kernel "
                                  "only with a sparse tensor on its device")
    # a 0-d array is a scalar on a device as on the host (its one value read back)
    (ka, a), (kb, b) = (("scalar", x.get()[()]) if k == "device" and x.ndim == 0 else
                        ("dense" if k == "device" else k, x) for k, x in ((ka, a), (kb, b)))
    return ka, kb, a, b


def _result_dtype(name: str, *xs) -> np.dtype:
    dt = np.result_type(*(x.dtype if isinstance(x, SparseTensor) else x for x in xs))
    if dt not in VALUE_DTYPES:
        raise TypeError(f"{name}: the result dtype {dt} of {' and '.join(describe(x) for x in xs)} is not a "
                        f"supported value dtype ({', '.join(map(str, VALUE_DTYPES))})")
    return dt


def _checked_values(name: str, values: np.ndarray) -> np.ndarray:
    if values.dtype not in VALUE_DTYPES:
        raise TypeError(f"{name}: the result dtype {values.dtype} is not a supported value dtype")
    return values


def _alpha(name: str, alpha, dtype: np.dtype):
    """``alpha`` checked against the result dtype (PyTorch's rules), as a Python number."""
    if isinstance(alpha, np.ndarray) and alpha.ndim == 0:
        alpha = alpha[()]
    if not isinstance(alpha, (numbers.Number, np.generic)) or isinstance(alpha, (str, bytes)):
        raise TypeError(f"{name}: alpha must be a number, got {type(alpha).__name__}")
    if isinstance(alpha, (complex, np.complexfloating)) and dtype.kind != "c":
        raise TypeError(f"{name}: for non-complex input tensors, argument alpha must not be a complex number, "
                        f"got {alpha!r}")
    integral = isinstance(alpha, (numbers.Integral, np.integer, np.bool_))
    if dtype.kind in "iu" and not integral:
        raise TypeError(f"{name}: for integral input tensors, argument alpha must not be a floating point number, "
                        f"got {alpha!r}")
    if dtype == np.bool_:
        if not integral or alpha not in (0, 1):
            raise TypeError(f"{name}: for bool tensors alpha must be a bool, got {alpha!r}")
        return bool(alpha)
    return alpha.item() if isinstance(alpha, np.generic) else alpha


def _same_shape(name: str, x, y) -> None:
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"{name}: expected operands of the same shape, got {describe(x)} and {describe(y)}")


# -- public operations ------------------------------------------------------------------------------
def add(a, b, *, alpha=1, threads: int | None = None):
    """``a + alpha * b`` with at least one sparse operand.

    sparse + sparse is sparse (the union of the patterns; explicit zeros from
    cancellation stay entries; one shape: no broadcasting, as in PyTorch); sparse + dense
    and dense + sparse are dense arrays, the two broadcasting by NumPy's rules as SciPy's
    ``A + row`` (a dense array on a device: one shape). A scalar 0 gives the
    tensor in NumPy's result dtype (SciPy's ``A + 0``); another scalar is refused, as in
    PyTorch: it would specify every element (use ``t.to_dense() + s``). bool is logical or. See the module docstring for layouts
    and dtypes.

    Parameters
    ----------
    a, b : SparseTensor, array_like or scalar
    alpha : number
        An integer for integer results, a bool for bool results, complex only for
        complex results (PyTorch's rules).
    threads : int, optional

    Examples
    --------
    >>> import sparsetensor as st
    >>> a = st.sparse_csr_tensor([0, 1, 2], [0, 1], [1.0, 2.0], size=(2, 2))
    >>> b = st.sparse_csr_tensor([0, 1, 1], [1], [3.0], size=(2, 2))
    >>> c = add(a, b, alpha=2)
    >>> c.col_indices(), c.values()
    (array([0, 1, 1]), array([1., 6., 2.]))
    """
    return _add("add", a, b, alpha, threads)


def sub(a, b, *, alpha=1, threads: int | None = None):
    """``a - alpha * b``: :func:`add` with ``-alpha`` (bool tensors are refused, as in PyTorch).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.sparse_coo_tensor([[0, 1]], [1.0, 2.0], size=(3,))
    >>> sub(np.ones(3), a)
    array([ 0., -1.,  1.])
    """
    return _add("sub", a, b, alpha, threads, negate=True)


def _add_zero(name: str, ka: str, kb: str, a, b, negate: bool):
    """A sparse tensor plus or minus a scalar 0 (SciPy's ``A + 0``, NumPy's ``np.add(t, 0)``): the
    tensor in NumPy's result dtype, negated for ``0 - t``. Another scalar would specify every
    element: NotImplementedError."""
    t, s = (a, b) if kb == "scalar" else (b, a)
    with np.errstate(invalid="ignore"):
        zero = ka != kb and s == 0
    if not zero:
        raise NotImplementedError(f"{name}({describe(a)}, {describe(b)}): adding a nonzero scalar to a sparse tensor "
                                  "would specify every element and is not supported (as in PyTorch); use "
                                  "t.to_dense() with the scalar instead")
    dtype = np.result_type(t.dtype, s)
    if negate and dtype == np.bool_:
        raise TypeError(f"{name}: subtraction, the `-` operator, with bool operands is not supported; use "
                        "logical_xor instead")
    out = t.astype(dtype, copy=False)
    if out is t:  # new values, the index arrays shared (as every op's result may share them)
        out = t._replace_values(t.values().copy())
    if negate and t is b:
        from .pointwise import neg

        return neg(out)
    return out


def _add(name: str, a, b, alpha, threads, negate: bool = False):
    (ka, a), (kb, b) = _operand(a, name), _operand(b, name)
    if "sparse" not in (ka, kb) and "device" not in (ka, kb):
        raise TypeError(f"{name} expects at least one sparse tensor, got {describe(a)} and {describe(b)}")
    if "device" in (ka, kb) and "scalar" not in (ka, kb):
        ka, kb, a, b = _on_device(name, ka, kb, a, b)
    if "scalar" in (ka, kb):
        return _add_zero(name, ka, kb, a, b, negate)
    dtype = _result_dtype(name, a, b)
    if negate and dtype == np.bool_:
        raise TypeError("sub: subtraction, the `-` operator, with two bool tensors is not supported; use "
                        "logical_xor instead")
    alpha = _alpha(name, alpha, dtype)
    if negate:
        alpha = -alpha
    if dtype.kind == "c" and alpha == -1 and (kb == "sparse" or type(b) is np.ndarray):
        # a - b as a + (-b): -1 * (inf + 0i) would make the imaginary part NaN, where NumPy's a - b keeps it 0;
        # b negated in the result dtype (an unsigned or bool b negated in its own would wrap or be refused)
        from .pointwise import neg

        b = b.astype(dtype, copy=False)
        b, alpha = (neg(b) if kb == "sparse" else np.negative(b)), alpha * -1
    if ka == kb == "sparse":
        return _merge(name, a, b, dtype, "add", alpha, threads)
    backend_for(a, b)  # a sparse tensor on a GPU with a host array: ValueError naming both devices
    if ka == "sparse":
        return _sparse_plus_dense(name, a, 1, b, alpha, dtype, threads)
    return _sparse_plus_dense(name, b, alpha, a, 1, dtype, threads)


def mul(a, b, *, threads: int | None = None):
    """``a * b`` with at least one sparse operand; the result is sparse.

    sparse * sparse has the intersection of the patterns; sparse * dense (either order)
    has the pattern of the sparse operand, the dense operand sampled there (it may
    broadcast to the sparse operand's shape, NumPy rules, as in PyTorch for coo);
    sparse * scalar keeps the pattern. bool is logical and.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.sparse_csr_tensor([0, 2, 3], [0, 1, 1], [1.0, 2.0, 3.0], size=(2, 2))
    >>> mul(a, np.array([10.0, 100.0])).values()
    array([ 10., 200., 300.])
    >>> mul(a, 2).values()
    array([2., 4., 6.])
    """
    (ka, a), (kb, b) = _operand(a, "mul"), _operand(b, "mul")
    if "device" in (ka, kb):
        ka, kb, a, b = _on_device("mul", ka, kb, a, b)
    if "sparse" not in (ka, kb):
        raise TypeError(f"mul expects at least one sparse tensor, got {describe(a)} and {describe(b)}")
    if ka == kb == "sparse":
        dtype = _result_dtype("mul", a, b)
        return _merge("mul", a, b, dtype, "mul", 1, threads)
    if ka == "sparse":
        if kb == "scalar":
            return _by_scalar("mul", a, b, np.multiply, threads)
        return _sampled("mul", a, b, threads)
    if ka == "scalar":
        return _by_scalar("mul", b, a, np.multiply, threads)
    return _sampled("mul", b, a, threads)  # multiplication commutes, bit for bit


def div(a, b, *, rounding_mode=None, threads: int | None = None):
    """True division ``a / b`` of a sparse tensor by a scalar or a dense array; the result is sparse.

    The pattern of ``a`` is kept: only specified elements are divided, so an
    unspecified element stays 0 also where the divisor is 0 (dense semantics would give
    NaN there). This is PyTorch's rule for sparse / scalar, extended to dense divisors
    (sampled at the pattern, broadcasting to ``a``'s shape), which PyTorch refuses.
    Division by a sparse tensor is refused (every unspecified element would become inf
    or NaN). Integer tensors give floating results (NumPy: float64).

    Parameters
    ----------
    a : SparseTensor
    b : scalar or array_like
    rounding_mode : {None, "trunc", "floor"}
        None: true division. ``"trunc"`` rounds the quotient towards zero (C's integer
        division), ``"floor"`` down (Python's ``//``, NumPy's ``floor_divide``); integer
        operands then give an integer result, and an integer divisor of 0 at a specified
        element raises ZeroDivisionError, as in PyTorch. Not for complex values.

    Examples
    --------
    >>> import sparsetensor as st
    >>> a = st.sparse_coo_tensor([[0, 2]], [1.0, 4.0], size=(3,))
    >>> div(a, 2).values()
    array([0.5, 2. ])
    """
    if rounding_mode not in (None, "trunc", "floor"):
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    (ka, a), (kb, b) = _operand(a, "div"), _operand(b, "div")
    if "device" in (ka, kb):
        ka, kb, a, b = _on_device("div", ka, kb, a, b)
    if kb == "sparse":
        raise NotImplementedError(f"div({describe(a)}, {describe(b)}): division by a sparse tensor is not "
                                  "supported (its unspecified elements are zeros); divide by a scalar or a dense "
                                  "array")
    if ka != "sparse":
        raise TypeError(f"div expects a sparse dividend, got {describe(a)}")
    if rounding_mode is not None:
        return _rounded_div(a, b, kb, rounding_mode, threads)
    if kb == "scalar":
        return _by_scalar("div", a, b, np.true_divide, threads)
    return _sampled("div", a, b, threads)


def maximum(a, b, *, threads: int | None = None):
    """The elementwise maximum (NumPy's ``maximum``: NaN propagates) with at least one sparse operand.

    Two sparse operands give a sparse result with the union of the patterns, an
    unspecified element counting as 0 (so ``maximum(a, b).to_dense() ==
    np.maximum(a.to_dense(), b.to_dense())``); PyTorch has no sparse maximum. With a
    dense operand of the same shape the result is dense. Scalars are refused (as for
    :func:`add`). Complex tensors are refused (no order).

    Examples
    --------
    >>> import sparsetensor as st
    >>> a = st.sparse_coo_tensor([[0, 1]], [-1.0, 2.0], size=(3,))
    >>> b = st.sparse_coo_tensor([[1, 2]], [3.0, -4.0], size=(3,))
    >>> maximum(a, b).to_dense()
    array([0., 3., 0.])
    """
    return _extremum("maximum", a, b, np.maximum, threads)


def minimum(a, b, *, threads: int | None = None):
    """The elementwise minimum; see :func:`maximum`.

    Examples
    --------
    >>> import sparsetensor as st
    >>> a = st.sparse_coo_tensor([[0, 1]], [-1.0, 2.0], size=(3,))
    >>> b = st.sparse_coo_tensor([[1, 2]], [3.0, -4.0], size=(3,))
    >>> minimum(a, b).to_dense()
    array([-1.,  2., -4.])
    """
    return _extremum("minimum", a, b, np.minimum, threads)


def _extremum(name, a, b, ufunc, threads):
    (ka, a), (kb, b) = _operand(a, name), _operand(b, name)
    if "sparse" not in (ka, kb) and "device" not in (ka, kb):
        raise TypeError(f"{name} expects at least one sparse tensor, got {describe(a)} and {describe(b)}")
    if "device" in (ka, kb) and "scalar" not in (ka, kb):
        ka, kb, a, b = _on_device(name, ka, kb, a, b)
    if "scalar" in (ka, kb):
        raise NotImplementedError(f"{name}({describe(a)}, {describe(b)}) with a scalar is not supported; use "
                                  "t.to_dense() with the scalar instead")
    dtype = _result_dtype(name, a, b)
    if dtype.kind == "c":
        raise TypeError(f"{name} is not defined for complex tensors: {describe(a)} and {describe(b)}")
    if ka == kb == "sparse":
        return _merge(name, a, b, dtype, name, 1, threads)
    _same_shape(name, a, b)
    backend = backend_for(a, b)  # a sparse tensor on a GPU with a host array: ValueError naming both devices
    da = a.to_dense(threads=threads) if ka == "sparse" else a
    db = b.to_dense(threads=threads) if kb == "sparse" else b
    return backend.elementwise(da.astype(dtype, copy=False), db.astype(dtype, copy=False), name, threads)


def neg(a):
    """``-a``: the values negated, the pattern (and index arrays) shared; bool is refused, as in PyTorch.

    Examples
    --------
    >>> import sparsetensor as st
    >>> neg(st.sparse_coo_tensor([[1]], [2.0], size=(2,))).values()
    array([-2.])
    """
    if not isinstance(a, SparseTensor):
        raise TypeError(f"neg expects a sparse tensor, got {type(a).__name__}")
    if a.dtype == np.bool_:
        raise TypeError("neg: negation, the `-` operator, on a bool tensor is not supported; use logical_not "
                        "instead")
    return a._replace_values(np.negative(a.values()))


# -- value-only operations ------------------------------------------------------------------------------
def _with_values(name: str, t: SparseTensor, values) -> SparseTensor:
    return t._replace_values(_checked_values(name, values))


def _by_scalar(name: str, t: SparseTensor, scalar, ufunc, threads) -> SparseTensor:
    """``ufunc(values, scalar)`` with t's pattern: the device's ``unary`` kernel with the scalar
    (NumPy's result dtype on the CPU; on a GPU the values' dtype, or NotImplementedError)."""
    t = without_duplicates(t, scalar, divide=ufunc is np.true_divide)
    return _with_values(name, t, backend_for(t).unary(t, name, ufunc, threads, scalar))


def _sampled(name: str, t: SparseTensor, dense, threads) -> SparseTensor:
    """``values op (dense sampled at t's pattern)`` (``op``: "mul" or "div") with t's pattern, in
    NumPy's result dtype of the two (true division: integers give float64)."""
    dtype = _result_dtype(name, t, dense)  # an operand of no value dtype (longdouble) refused before a kernel
    backend, t, gathered = _sampled_pair(name, t, dense, threads)
    if name == "div" and dtype.kind in "biu":
        dtype = np.dtype(np.float64)
    return _with_values(name, t, backend.elementwise(t.values().astype(dtype, copy=False),
                                                     gathered.astype(dtype, copy=False), name, threads))


def _sampled_pair(name: str, t: SparseTensor, dense, threads) -> tuple:
    """``(backend, t, dense at t's entries)``: ``t`` made canonical where its layout needs it,
    ``dense`` broadcast to its shape (ValueError where it does not broadcast) and read at its entries."""
    if not broadcasts_to(dense.shape, t.shape):
        raise ValueError(f"{name}: the dense operand must broadcast to the sparse operand's shape, got "
                         f"{describe(t)} and {describe(dense)}")
    backend = backend_for(t, dense)  # a sparse tensor on a GPU with a host array: ValueError naming both devices
    return (backend,) + _SAMPLE_DENSE_BY_LAYOUT[type(t)](t, dense, threads)


def _rounded_div(t: SparseTensor, divisor, kind: str, mode: str, threads) -> SparseTensor:
    """``div(t, divisor, rounding_mode=mode)``: the quotients at the specified elements, rounded,
    in NumPy's result dtype (bools divide as int8, as in NumPy's ``floor_divide``)."""
    dtype = np.result_type(t.dtype, divisor) if kind == "scalar" else _result_dtype("div", t, divisor)
    if dtype.kind == "c":
        raise TypeError(f"div with rounding_mode={mode!r} is not defined for complex values: {describe(t)} and "
                        f"{describe(divisor)}")
    if dtype.kind == "b":
        dtype = np.dtype(np.int8)
    t = t.coalesce(threads=threads)  # rounding is not linear: duplicates are summed first
    if kind == "scalar":
        d = np.asarray(divisor, dtype=dtype)  # NumPy's OverflowError for an integer out of the dtype's range
        if dtype.kind in "iu" and d == 0 and t.values().size:  # at a specified element (none: nothing divides)
            raise ZeroDivisionError(f"div with rounding_mode={mode!r}: integer division by zero")
        backend = backend_for(t)
    else:
        backend, t, d = _sampled_pair("div", t, divisor, threads)
        d = d.astype(dtype, copy=False)
    return _with_values("div", t, backend.elementwise(t.values().astype(dtype, copy=False), d, f"{mode}_divide",
                                                      threads))


def _sample_coo(t: COOTensor, dense, threads) -> tuple:
    """The body of COO: ``(t, dense at t's entries)``, coalesced and bounds-checked first
    (NumPy would wrap a negative index; a product or quotient per duplicate is not the one of
    their sum where the dense element is 0, inf or NaN)."""
    t = t._coalesced_checked(threads)
    if t.is_cuda:
        return t, backend_for(t).sample_dense(t, dense, threads)
    full = np.broadcast_to(dense, t.shape)
    return t, full[tuple(t.indices())] if t.sparse_dim else np.broadcast_to(full, (t.nnz,) + full.shape)


def _sample_compressed(t: CompressedTensor, dense, threads) -> tuple:
    """The body of the compressed layouts: ``(valid t, dense (broadcast to t's
    shape) at t's entries, shaped like t.values())``."""
    t = ensure_valid(t, repair=True, threads=threads)
    return t, backend_for(t, dense).sample_dense(t, dense, threads)


def _typed(scale, dtype: np.dtype):
    """``scale`` as a NumPy scalar of ``dtype`` (integers wrap into its range, as the kernels do)."""
    if dtype.kind in "iub":
        return np.array(int(scale), dtype=np.int64).astype(dtype)[()]
    return np.array(scale).astype(dtype)[()]


def _scaled(values, scale, dtype: np.dtype):
    if type(values) is not np.ndarray:  # a device array: cast, then scaled by its own kernel
        values = values.astype(dtype, copy=False)
        return values if scale == 1 else values * _typed(scale, dtype)
    return (values if scale == 1 else np.multiply(values, _typed(scale, dtype))).astype(dtype, copy=False)


def _sparse_plus_dense(name: str, t: SparseTensor, t_scale, dense, d_scale, dtype: np.dtype, threads):
    """``t_scale * t + d_scale * dense`` as a dense array of ``dtype`` (on the operands' device): a
    copy of the dense operand with the sparse values added at their positions. A host array may
    broadcast with ``t`` (NumPy's rules, as SciPy's ``A + row`` does: the result is dense anyway);
    a device array must have ``t``'s shape."""
    if type(dense) is not np.ndarray:  # a device array: a new one, of dtype (and C order, as all are)
        _same_shape(name, t, dense)
        out = _scaled(dense.astype(dtype), d_scale, dtype)
        return _ADD_TO_DENSE_BY_LAYOUT[type(t)](t, out, t_scale, dtype, threads)
    shape = tuple(t.shape)
    if dense.shape != shape:
        try:
            shape = np.broadcast_shapes(shape, dense.shape)
        except ValueError:
            raise ValueError(f"{name}: operands could not be broadcast together: {describe(t)} and "
                             f"{describe(dense)}") from None
    out = np.array(np.broadcast_to(dense, shape), dtype=dtype, order="C", copy=True)
    if d_scale != 1:
        np.multiply(out, _typed(d_scale, dtype), out=out)
    if shape == tuple(t.shape):
        return _ADD_TO_DENSE_BY_LAYOUT[type(t)](t, out, t_scale, dtype, threads)
    # t broadcasts too: its dense form (no larger than the result) added across the new dims
    part = _ADD_TO_DENSE_BY_LAYOUT[type(t)](t, np.zeros(t.shape, dtype), t_scale, dtype, threads)
    out += part
    return out


def _add_coo_to(t: COOTensor, out: np.ndarray, t_scale, dtype: np.dtype, threads) -> np.ndarray:
    """The body of COO: ``out += t_scale * t`` in place; returns ``out``."""
    t = t._coalesced_checked(threads)  # NumPy would wrap a negative index; each position is added once
    if t.is_cuda:
        return backend_for(t).add_to_dense(t, _scaled(t.values(), t_scale, dtype), out, threads)
    if t.sparse_dim:
        out[tuple(t.indices())] += _scaled(t.values(), t_scale, dtype)
    else:  # no sparse dim: at most one entry, the whole of out
        out += _scaled(t.values(), t_scale, dtype).sum(axis=0, dtype=dtype)
    return out


def _add_compressed_to(t: CompressedTensor, out: np.ndarray, t_scale, dtype: np.dtype, threads) -> np.ndarray:
    """The body of the compressed layouts: ``out + t_scale * t`` (``out`` itself
    unless float16 accumulates in a float32 copy)."""
    t = ensure_valid(t, repair=True, threads=threads)
    return backend_for(t, out).add_to_dense(t, _scaled(t.values(), t_scale, dtype), out, threads)


# -- sparse-sparse merges ---------------------------------------------------------------------------------
def _merge(name: str, a: SparseTensor, b: SparseTensor, dtype: np.dtype, op: str, alpha, threads) -> SparseTensor:
    """Resolve two sparse operands once (shape, layout, dims), then the device's ``merge`` kernel."""
    if a._shape != b._shape:
        _same_shape(name, a, b)
    layout = a._layout
    if layout is not b._layout or (layout.blocked and a.blocksize != b.blocksize):
        b = b.to_sparse(layout, blocksize=a.blocksize if layout.blocked else None, threads=threads)
    if a.dense_dim != b.dense_dim or a.batch_dim != b.batch_dim:
        raise ValueError(f"{name}: the operands must have the same batch and dense dims, got {describe(a)} "
                         f"(batch_dim={a.batch_dim}, dense_dim={a.dense_dim}) and {describe(b)} "
                         f"(batch_dim={b.batch_dim}, dense_dim={b.dense_dim})")
    return backend_for(a, b).merge(a, b, dtype, op, alpha, threads)


# Each op's body per layout family, picked where the op reads it: ``TABLE[type(t)](t, ...)``.
_SAMPLE_DENSE_BY_LAYOUT = {COOTensor: _sample_coo, CompressedTensor: _sample_compressed}
_ADD_TO_DENSE_BY_LAYOUT = {COOTensor: _add_coo_to, CompressedTensor: _add_compressed_to}
