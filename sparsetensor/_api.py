"""The table of public ops: one row per op, from which both the tensor methods and the
``st.*`` functions come.

Each :class:`Op` row names an implementation (a function in :mod:`sparsetensor.ops`, a
conversion, an exit) and says whether it becomes a method of the tensor classes, a
module-level function of :mod:`sparsetensor`, or both, and under which other names
(aliases). The method and the function are the same object, so they cannot drift apart,
and a method call costs no more than the function call (no per-call import). Every row gets
one thin wrapper when bound (:func:`_recorded`): a test of whether :func:`sparsetensor.autograd.vjp`
records ops on this thread, so that a composition of ops is differentiated.

This module sits above the tensor classes and the ops: it imports both and binds the
methods once, at import of :mod:`sparsetensor`; :mod:`sparsetensor._core._tensor` imports
nothing above itself. Operators (``+``, ``@``, ``abs()``, NumPy ufuncs) are bound here
too. The class stub ``_tensor.pyi`` and this module's ``_api.pyi`` are generated from the
table (``python -m sparsetensor._stubs``); ``tests/core/test_api.py`` checks they are current.

Every method and protocol the classes get from outside ``_tensor.py`` is a row here: the ops,
the operators, SciPy's linear-operator methods, NumPy's protocols, indexing, pickling and
Dask's chunk protocol. An op reads its layout bodies itself (``ops/*``: ``TABLE[type(t)]``);
nothing else binds attributes onto the classes.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np

from .ops import convert as _convert, dense as _dense
from ._backend import backend_for, device_of
from ._core import _recording
from ._core import _tensor
from ._core._canonical import ensure_valid
from ._core._tensor import COOTensor, CompressedTensor, SparseTensor, carry_held, check_held_ends
from .interop import array_function, chunk as _chunk, linop, scipy as _scipy, torch as _torch
from .interop.chunk import defer_to_lazy as _lazy, defer_to_lazy_ufunc as _lazy_ufunc
from .ops import binary, blas, blocks, diagonal, dims, indexing, inplace, join, mask, pointwise, prune, reduce, select, spgemm

__all__: list = []  # filled from the table below


class Op(NamedTuple):
    """One public op.

    name : the method and function name.
    impl : the implementation (its first parameter is the tensor for a method).
    method, function : whether it becomes a method of ``cls`` and/or a ``st.*`` function.
    aliases : other names for both.
    cls : the class that gets the method (``SparseTensor``: every layout).
    kind : ``"method"`` (default) or ``"property"``.
    gpu : whether the op runs on a CUDA device (its op code calls the backend's kernels, which
        raise NotImplementedError naming what the GPU lacks); False: a tensor on a GPU raises
        NotImplementedError naming the op and the device before the op runs (:func:`_host_only`).
    """

    name: str
    impl: Callable
    method: bool = True
    function: bool = True
    aliases: tuple = ()
    cls: type = SparseTensor
    kind: str = "method"
    gpu: bool = False


# -- small adapters (the rest of the table binds the ops' own functions) -------------------------------
def _numpy_axis(fn):
    """``fn`` accepting NumPy's spelling too (``np.sum(t, axis=...)`` calls ``t.sum(axis=..., out=None)``)."""
    def wrapped(t, dim=None, keepdim=False, *, axis=None, keepdims=None, out=None, **kwargs):
        if out is not None:
            raise TypeError(f"{fn.__name__}() of a sparse tensor does not support out=")
        return fn(t, dim if axis is None else axis, keepdim if keepdims is None else keepdims, **kwargs)

    wrapped.__name__ = wrapped.__qualname__ = fn.__name__
    wrapped.__module__ = fn.__module__
    wrapped.__doc__ = fn.__doc__
    wrapped.__wrapped__ = fn
    return wrapped


def _reflected(fn, name: str):
    def op(self, other):
        return fn(other, self)

    op.__name__ = op.__qualname__ = name
    return op


def _floor_divide(a, b):
    """``a // b``: :func:`~sparsetensor.ops.binary.div` with ``rounding_mode="floor"`` (PyTorch's
    ``floor_divide``; a dense or scalar dividend by a sparse tensor is div's refusal)."""
    return binary.div(a, b, rounding_mode="floor")


def _pow_operator(self, exponent):
    if not np.isscalar(exponent):
        return NotImplemented
    if self.dtype == np.bool_ and type(exponent) is int and exponent == 2:
        return pointwise.square(self)  # NumPy's operator squares (int8) where np.power gives int64
    return pointwise.pow(self, exponent)


def _comparison(name: str, op: str):
    def fn(self, other):
        return pointwise.compare(self, other, op)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``t {op} s`` for a scalar ``s``: a bool tensor of ``t``'s pattern (:func:`~sparsetensor.ops.pointwise.compare`)."
    return fn


_SCALAR_UFUNCS = {np.multiply: binary.mul, np.true_divide: binary.div, np.add: binary.add, np.subtract: binary.sub}


_METADATA = frozenset((np.shape, np.ndim, np.size))  # NumPy functions that read no element


def _array_function(self, func, types, args, kwargs):
    if self.is_cuda and func not in _METADATA:  # NumPy works on host memory: no copy of a device tensor
        raise NotImplementedError(f"np.{func.__name__} of a {self.layout.name} tensor on {self.device} has no GPU "
                                  f"kernel; use sparsetensor's function of the tensor, or t.cpu()")
    return array_function.array_function(self, func, types, args, kwargs)


_array_function.__doc__ = array_function.array_function.__doc__


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if self.is_cuda:  # NumPy works on host memory: nothing here copies a device tensor to the host
        if ufunc is np.matmul:  # ndarray @ t
            raise NotImplementedError(f"__rmatmul__ (a NumPy array @ a {self.layout.name} tensor on {self.device}) "
                                      "has no GPU kernel; move the operands to one device")
        if ufunc in _SCALAR_UFUNCS and method == "__call__" and not kwargs and len(inputs) == 2 and any(
                isinstance(x, np.generic) or type(x) is np.ndarray and x.ndim == 0 for x in inputs):
            # np.float32(2) * t, np.array(0.0) + t: the operator's op
            return _SCALAR_UFUNCS[ufunc](*inputs)
        raise TypeError(f"NumPy's {ufunc.__name__} does not run on a {self.layout.name} tensor on {self.device}; use "
                        "the tensor's methods, or t.cpu()")
    if ufunc is np.matmul and method == "__call__" and not kwargs:  # ndarray @ sparse
        return blas.matmul(*inputs)
    return pointwise.array_ufunc(self, ufunc, method, *inputs, **kwargs)


def t(input):
    """The transpose of a 2-d tensor (``input.T``; torch's ``t``).

    Examples
    --------
    >>> import sparsetensor as st
    >>> st.t(st.sparse_csr_tensor([0, 1, 1], [1], [5.0], size=(2, 2))).to_dense()
    array([[0., 0.],
           [5., 0.]])
    """
    return input.t()


def to_dense(t, *, threads: int | None = None) -> np.ndarray:
    """The dense NumPy array this tensor represents (duplicates are summed).

    Examples
    --------
    >>> import sparsetensor as st
    >>> st.sparse_csr_tensor([0, 1, 2], [1, 0], [5, 6], size=(2, 2)).to_dense()
    array([[0, 5],
           [6, 0]])
    """
    return _dense.to_dense(t, threads=threads)


def to_sparse(t, layout=None, *, blocksize=None, dense_dim=None, threads: int | None = None):
    """Convert to another sparse layout (``layout=None`` keeps this one).

    See :func:`sparsetensor.ops.convert.to_sparse` for the rules (batch dims, blocks, dense
    dims); converting to the same layout returns ``t``.
    """
    return _convert.to_sparse(t, t.layout if layout is None else layout, blocksize=blocksize, dense_dim=dense_dim,
                              threads=threads)


def _to_layout(layout: str, blocked: bool):
    if blocked:
        def convert(t, blocksize, *, dense_dim=None, threads: int | None = None):
            return to_sparse(t, layout, blocksize=blocksize, dense_dim=dense_dim, threads=threads)
    elif layout == "coo":
        def convert(t, *, threads: int | None = None):
            return to_sparse(t, layout, threads=threads)
    else:
        def convert(t, *, dense_dim=None, threads: int | None = None):
            return to_sparse(t, layout, dense_dim=dense_dim, threads=threads)
    convert.__name__ = convert.__qualname__ = f"to_sparse_{layout}"
    convert.__doc__ = f"``t.to_sparse({layout!r}{', blocksize=blocksize' if blocked else ''})``."
    return convert


def to_scipy(t, kind: str = "array"):
    """A SciPy sparse array (or ``kind="matrix"``) sharing this tensor's arrays; see
    :func:`sparsetensor.to_scipy`."""
    return _scipy.to_scipy(t, kind)


def to_torch(t, *, copy=None, check_invariants=None):
    """A PyTorch tensor of this layout and device sharing this tensor's memory; see :func:`sparsetensor.to_torch`."""
    return _torch.to_torch(t, copy=copy, check_invariants=check_invariants)


def _coo_coalesce(self, *, threads: int | None = None) -> COOTensor:
    """Sort the indices lexicographically and sum the values of duplicates (bool: logical or).

    An already coalesced tensor is returned as it is (no copy), once its indices are known valid: a
    flag given with ``check_invariants=False`` is checked first (C4-C6, once: the result is kept;
    on a device by the device's check), since the callers trust it to mean distinct indices.
    """
    if self._coalesced:  # checked, again where a caller may have written a repeat since
        return ensure_valid(self, threads=threads, private=False)
    return backend_for(self).coalesce(self, threads)


def _compressed_coalesce(self, *, threads: int | None = None) -> CompressedTensor:
    """Repair unchecked input: sort each row's (column's) plain indices and sum duplicates.

    A tensor known to satisfy 5.6 is returned as it is (no copy), checked again first where a
    caller holds its index arrays.
    """
    if self._canonical:
        return ensure_valid(self, threads=threads, private=False)
    return backend_for(self).coalesce(self, threads)


_coo_coalesce.__name__ = _compressed_coalesce.__name__ = "coalesce"


def _real(t):
    return pointwise.real(t)


def _imag(t):
    return pointwise.imag(t)


_real.__doc__ = "Real part (values view or copy)."
_imag.__doc__ = "Imaginary part."


# -- the table -------------------------------------------------------------------------------------------
# Zero-preserving pointwise functions (and those that refuse, naming the dense call): method and function.
_POINTWISE = ("abs", "neg", "negative", "sign", "sgn", "sqrt", "square", "sin", "sinh", "tan", "tanh", "asin",
              "asinh", "atan", "atanh", "expm1", "log1p", "ceil", "floor", "round", "trunc", "frac", "relu",
              "conj", "pow", "deg2rad", "rad2deg", "exp", "exp2", "cos", "cosh", "acos", "acosh", "log", "log2", "log10", "sigmoid",
              "rsqrt", "reciprocal", "erf", "erfinv", "nan_to_num", "isnan", "isinf", "isposinf", "isneginf", "signbit")
_PREDICATES = ("isnan", "isinf", "isposinf", "isneginf", "signbit")  # bool results: no in-place form
OPS: tuple = (
    *(Op(name, getattr(pointwise, name), gpu=True) for name in _POINTWISE),
    Op("real", _real, function=False, kind="property", gpu=True),
    Op("imag", _imag, function=False, kind="property", gpu=True),
    Op("real", pointwise.real, method=False, gpu=True),
    Op("imag", pointwise.imag, method=False, gpu=True),
    # reductions (NumPy's axis=/keepdims=/out= accepted where np.sum & co. pass them)
    Op("sum", _numpy_axis(reduce.sum), gpu=True),
    Op("mean", _numpy_axis(reduce.mean), gpu=True),
    Op("amax", _numpy_axis(reduce.amax), aliases=("max",), gpu=True),
    Op("amin", _numpy_axis(reduce.amin), aliases=("min",), gpu=True),
    Op("norm", reduce.norm, gpu=True),
    Op("softmax", reduce.softmax, gpu=True),
    Op("log_softmax", reduce.log_softmax, gpu=True),
    # shape and indexing
    Op("transpose", select.transpose, gpu=True),
    Op("t", t, method=False, gpu=True),  # the method is SparseTensor.t
    Op("permute", dims.permute, gpu=True),
    Op("unsqueeze", dims.unsqueeze, gpu=True),
    Op("squeeze", dims.squeeze, gpu=True),
    Op("reshape", dims.reshape, gpu=True),
    Op("flatten", dims.flatten, gpu=True),
    Op("tril", prune.tril, gpu=True),
    Op("triu", prune.triu, gpu=True),
    Op("tril_", inplace.in_place("tril_", prune.tril), function=False, gpu=True),
    Op("triu_", inplace.in_place("triu_", prune.triu), function=False, gpu=True),
    Op("eliminate_zeros", prune.eliminate_zeros, function=False, gpu=True),
    Op("narrow", select.narrow, aliases=("narrow_copy",), gpu=True),
    Op("select", select.select, gpu=True),
    Op("index_select", select.index_select, gpu=True),
    Op("nonzero", select.nonzero, gpu=True),
    Op("count_nonzero", select.count_nonzero, gpu=True),
    Op("sparse_mask", mask.sparse_mask, gpu=True),
    Op("cat", join.cat, method=False, gpu=True),
    Op("stack", join.stack, method=False, gpu=True),
    Op("hstack", blocks.hstack, method=False, gpu=True),
    Op("vstack", blocks.vstack, method=False, gpu=True),
    Op("block_diag", blocks.block_diag, method=False, gpu=True),
    Op("kron", blocks.kron, gpu=True),
    Op("zero_", inplace.zero_, function=False, gpu=True),
    Op("copy_", inplace.copy_, function=False, gpu=True),
    Op("resize_as_", inplace.resize_as_, function=False, gpu=True),
    Op("transpose_", inplace.transpose_, function=False, gpu=True),
    Op("t_", inplace.t_, function=False, gpu=True),
    *(Op(f"{name}_", inplace.in_place(f"{name}_", getattr(binary, name)), function=False, gpu=True)
      for name in ("add", "sub", "mul", "div")),
    *(Op(f"{name}_", inplace.in_place(f"{name}_", getattr(pointwise, name)), function=False, gpu=True)
      for name in _POINTWISE if name not in _PREDICATES),
    # products
    Op("matmul", blas.matmul, aliases=("dot",), gpu=True),
    Op("mm", blas.mm, gpu=True),
    Op("mv", blas.mv, gpu=True),
    Op("bmm", blas.bmm, gpu=True),
    Op("smm", blas.smm, gpu=True),
    Op("hspmm", blas.hspmm, gpu=True),
    Op("addmm", blas.addmm, method=False, gpu=True),
    Op("sspaddmm", blas.sspaddmm, method=False, gpu=True),
    Op("linear", blas.linear, method=False, gpu=True),
    Op("spgemm", spgemm.spgemm, method=False, gpu=True),
    Op("sampled_addmm", spgemm.sampled_addmm, method=False, gpu=True),
    # elementwise with another operand
    Op("add", binary.add, gpu=True),
    Op("sub", binary.sub, gpu=True),
    Op("mul", binary.mul, aliases=("multiply",), gpu=True),
    Op("div", binary.div, gpu=True),
    Op("maximum", binary.maximum, gpu=True),
    Op("minimum", binary.minimum, gpu=True),
    # conversions and exits (the functions of the same names are sparsetensor.to_scipy & co.)
    Op("to_dense", to_dense, function=False, gpu=True),
    Op("to_sparse", to_sparse, function=False, gpu=True),
    *(Op(f"to_sparse_{name}", _to_layout(name, name in ("bsr", "bsc")), function=False, gpu=True)
      for name in ("coo", "csr", "csc", "bsr", "bsc")),
    Op("to_scipy", to_scipy, function=False),
    Op("to_torch", to_torch, function=False, gpu=True),
    Op("coalesce", _coo_coalesce, function=False, cls=COOTensor, gpu=True),
    Op("coalesce", _compressed_coalesce, function=False, cls=CompressedTensor, aliases=("sum_duplicates",), gpu=True),
    # operators; the binary ones and __array_ufunc__ give way to a lazy collection (Dask: the product
    # stays lazy; see interop/chunk.py)
    Op("__add__", _lazy(binary.add), function=False, gpu=True),
    Op("__radd__", _lazy(_reflected(binary.add, "__radd__")), function=False, gpu=True),
    Op("__sub__", _lazy(binary.sub), function=False, gpu=True),
    Op("__rsub__", _lazy(_reflected(binary.sub, "__rsub__")), function=False, gpu=True),
    Op("__mul__", _lazy(binary.mul), function=False, gpu=True),
    Op("__rmul__", _lazy(_reflected(binary.mul, "__rmul__")), function=False, gpu=True),
    Op("__truediv__", _lazy(binary.div), function=False, gpu=True),
    Op("__rtruediv__", _lazy(_reflected(binary.div, "__rtruediv__")), function=False, gpu=True),
    Op("__floordiv__", _lazy(_floor_divide), function=False, gpu=True),
    Op("__rfloordiv__", _lazy(_reflected(_floor_divide, "__rfloordiv__")), function=False, gpu=True),
    Op("__matmul__", _lazy(blas.matmul), function=False, gpu=True),
    Op("__rmatmul__", _lazy(_reflected(blas.matmul, "__rmatmul__")), function=False, gpu=True),
    Op("__abs__", pointwise.abs, function=False, gpu=True),
    Op("__neg__", pointwise.neg, function=False, gpu=True),
    Op("__pow__", _pow_operator, function=False, gpu=True),
    *(Op(name, _lazy(_comparison(name, op)), function=False, gpu=True)
      for name, op in (("__lt__", "<"), ("__le__", "<="), ("__gt__", ">"), ("__ge__", ">="))),
    Op("__array_ufunc__", _lazy_ufunc(_array_ufunc), function=False, gpu=True),
    *(Op(f"__i{name}__", inplace.in_place_operator(f"__i{name}__", _lazy(getattr(binary, op))), function=False,
         gpu=True) for name, op in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"))),
    # SciPy's LinearOperator protocol (aslinearoperator and the iterative solvers)
    Op("matvec", linop.matvec, function=False, gpu=True),
    Op("rmatvec", linop.rmatvec, function=False, gpu=True),
    Op("matmat", linop.matmat, function=False, gpu=True),
    Op("rmatmat", linop.rmatmat, function=False, gpu=True),
    Op("adjoint", linop.adjoint, function=False, gpu=True),
    Op("H", linop.adjoint, function=False, kind="property", gpu=True),
    # SciPy's sparse constructors and direct solvers get a TypeError naming to_scipy() instead of densifying
    Op("__array__", linop.array_refusing_scipy(SparseTensor.__array__), function=False, gpu=True),
    # NumPy's function protocol (NEP 18); the functions it takes are array_function.HANDLED
    Op("__array_function__", _array_function, function=False, gpu=True),
    # indexing
    Op("__getitem__", indexing.getitem, function=False, gpu=True),
    Op("__setitem__", indexing.setitem, function=False, gpu=True),
    # ops that NumPy and SciPy users call as methods
    Op("diagonal", diagonal.diagonal, gpu=True),
    Op("trace", diagonal.trace, gpu=True),
    # pickling and Dask's chunk protocol (a device tensor: the functions name the device themselves)
    Op("__reduce__", _chunk.reduce, function=False, gpu=True),
    Op("__dask_tokenize__", _chunk.tokenize, function=False, gpu=True),
    Op("__sizeof__", _chunk.sizeof, function=False, gpu=True),
)


_TENSOR_TYPES = frozenset((COOTensor, CompressedTensor))
_NDARRAY = np.ndarray


# operand types that live on the host whatever they hold: one set lookup each
_HOST_TYPES = frozenset((int, float, bool, complex, str, slice, type(None), type(Ellipsis), np.ndarray))


def _gpu_operand(x):
    """``x``, or the first tensor of a sequence ``x``, when it lives on a GPU (a sparse tensor or
    any device array); None for host operands."""
    t = type(x)
    if t in _HOST_TYPES:
        return None
    if t in _TENSOR_TYPES and type(x._values) is _NDARRAY:
        return None
    if isinstance(x, SparseTensor):
        return x if x.is_cuda else None
    if isinstance(x, (list, tuple)):
        return next((y for y in x if _gpu_operand(y) is not None), None)
    return x if device_of(x) not in (None, "cpu") else None


def _host_only(name: str, impl):
    """``impl`` for an op with no GPU path: an operand on a CUDA device (a tensor or a dense device
    array, or one in a sequence of them, in any position) raises NotImplementedError naming the op
    and the device (nothing is copied to the host); the function is marked ``no_gpu_kernel``."""
    def fn(*args, **kwargs):
        # a CPU tensor alone costs two type tests; other operands a set lookup each
        if len(args) == 1 and not kwargs and type(args[0]) in _TENSOR_TYPES and type(args[0]._values) is _NDARRAY:
            return impl(*args)
        for x in (*args, *kwargs.values()):
            g = _gpu_operand(x)
            if g is not None:
                what = (f"a {g.layout.name} tensor on {g.device}" if isinstance(g, SparseTensor)
                        else f"an array on {device_of(g)}")
                raise NotImplementedError(f"{name} of {what} has no GPU kernel; run it on the host with "
                                          f"t.cpu().{name}")
        return impl(*args, **kwargs)

    functools.update_wrapper(fn, impl)  # name, docs, signature (``__wrapped__``)
    fn.no_gpu_kernel = True
    return fn


def _for_devices(rows) -> tuple:
    """``rows`` with every public row that has no GPU path (``gpu=False``) split into one row per
    name, its implementation the :func:`_host_only` guard naming that name; the per-layout
    hooks (``_name``) are left as they are (the ops call them after resolving the device)."""
    out = []
    for op in rows:
        hook = op.name.startswith("_") and not op.name.startswith("__")
        if op.gpu or hook or getattr(op.impl, "no_gpu_kernel", False):
            out.append(op)
            continue
        out.extend(op._replace(name=name, aliases=(), impl=_host_only(name, op.impl))
                   for name in (op.name,) + tuple(op.aliases))
    return tuple(out)


OPS = _for_devices(OPS)


# operators that vjp records as their op, the reflected ones with their operands swapped back
_RECORDED_AS = {"__add__": ("add", False), "__radd__": ("add", True), "__sub__": ("sub", False),
                "__rsub__": ("sub", True), "__mul__": ("mul", False), "__rmul__": ("mul", True),
                "__truediv__": ("div", False), "__rtruediv__": ("div", True), "__floordiv__": ("floor_divide", False),
                "__rfloordiv__": ("floor_divide", True), "__matmul__": ("matmul", False),
                "__rmatmul__": ("matmul", True), "__abs__": ("abs", False), "__neg__": ("neg", False),
                "__pow__": ("pow", False), "__iadd__": ("add", False), "__isub__": ("sub", False),
                "__imul__": ("mul", False), "__itruediv__": ("div", False)}


# Ops whose kernels check where each batch's compressed indices start and end themselves (an O(batch)
# loop in C: the dense products and to_dense, where a Python look would cost a tenth of a small call).
_ENDS_IN_KERNEL = frozenset(("matmul", "mm", "mv", "to_dense", "__matmul__", "__rmatmul__", "matvec", "rmatvec",
                             "matmat", "rmatmat", "__array__"))


def _no_ends(args) -> None:
    pass


def _recorded(name: str, impl):
    """``impl`` as the op ``name`` on vjp's tape when this thread records (``_core._recording``); else
    ``impl`` itself, after one test of a module global. Where a caller holds index arrays of a
    checked compressed argument, their ends are checked again first (:func:`check_held_ends`)."""
    rule, swap = _RECORDED_AS.get(name, (name, False))
    if name in _ENDS_IN_KERNEL:
        ends = _no_ends
    else:
        ends = check_held_ends
    if swap:
        def fn(self, other):
            if _tensor._any_held:
                ends((self, other))
            if _recording.active:
                return _recording.call(rule, lambda a, b: impl(b, a), (other, self), {})
            return carry_held((self, other), impl(self, other))
    else:
        def fn(*args, **kwargs):
            if _tensor._any_held:
                ends(args)
                ends(kwargs.values())
            if _recording.active:
                return _recording.call(rule, impl, args, kwargs)
            return carry_held((*args, *kwargs.values()) if kwargs else args, impl(*args, **kwargs))
    functools.update_wrapper(fn, impl)  # name, docs, signature (``__wrapped__``), ``no_gpu_kernel``
    return fn


def bind(rows, namespace: dict | None = None) -> list:
    """Attach the methods of ``rows`` to their classes and put their functions in ``namespace``
    (this module's globals when None); returns the function names, for an ``__all__``. The
    method and the function of a row are one object; rows without ``gpu`` are guarded first
    (:func:`_for_devices`)."""
    namespace = globals() if namespace is None else namespace
    names = []
    for op in _for_devices(rows):
        op = op._replace(impl=_recorded(op.name, op.impl))
        for name in (op.name,) + tuple(op.aliases):
            if op.method:
                setattr(op.cls, name, property(op.impl, doc=op.impl.__doc__) if op.kind == "property" else op.impl)
            if op.function:
                namespace[name] = op.impl
                names.append(name)
    return names


__all__ += bind(OPS)
array_function.HANDLED.update(_chunk.FUNCTIONS)  # NumPy functions for Dask's chunks (zeros_like, nansum, ...)
