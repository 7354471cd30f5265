"""The table of public ops: one row per op, from which both the tensor methods and the
``st.*`` functions come.

Each :class:`Op` row names an implementation (a function in :mod:`sparsetensor.ops`, a
conversion, an exit) and says whether it becomes a method of the tensor classes, a
module-level function of :mod:`sparsetensor`, or both, and under which other names
(aliases). The method and the function are the same object, so they cannot drift apart,
and a method call costs no more than the function call (no per-call import, no wrapper
unless the row asks for one: NumPy's spelling of reductions).

This module sits above the tensor classes and the ops: it imports both and binds the
methods once, at import of :mod:`sparsetensor`; :mod:`sparsetensor._tensor` imports
nothing above itself. Operators (``+``, ``@``, ``abs()``, NumPy ufuncs) are bound here
too. The class stub ``_tensor.pyi`` and this module's ``_api.pyi`` are generated from the
table (``python -m sparsetensor._stubs``); ``tests/test_api.py`` checks they are current.

Another module can add rows of its own with :func:`bind` (e.g. indexing, NumPy's
function protocol, SciPy's linear-operator methods): it builds its :class:`Op` rows and
calls ``bind(rows)`` at its import, and lists its function names in its ``__all__``.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np

from . import _convert, _dense
from ._backend import backend_for
from ._tensor import COOTensor, CompressedTensor, SparseTensor, _SparseBase
from .interop import scipy as _scipy, torch as _torch
from .interop.chunk import defer_to_lazy as _lazy, defer_to_lazy_ufunc as _lazy_ufunc
from .ops import binary, blas, inplace, join, mask, pointwise, reduce, select, spgemm

__all__: list = []  # filled from the table below


class Op(NamedTuple):
    """One public op.

    name : the method and function name.
    impl : the implementation (its first parameter is the tensor for a method).
    method, function : whether it becomes a method of ``cls`` and/or a ``st.*`` function.
    aliases : other names for both.
    cls : the class that gets the method (``SparseTensor``: every layout).
    kind : ``"method"`` (default) or ``"property"``.
    """

    name: str
    impl: Callable
    method: bool = True
    function: bool = True
    aliases: tuple = ()
    cls: type = SparseTensor
    kind: str = "method"


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


def _pow_operator(self, exponent):
    if not np.isscalar(exponent):
        return NotImplemented
    return pointwise.pow(self, exponent)


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
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

    See :func:`sparsetensor._convert.to_sparse` for the rules (batch dims, blocks, dense
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
    """A CPU PyTorch tensor of this layout sharing this tensor's memory; see :func:`sparsetensor.to_torch`."""
    return _torch.to_torch(t, copy=copy, check_invariants=check_invariants)


def _coo_coalesce(self, *, threads: int | None = None) -> COOTensor:
    """Sort the indices lexicographically and sum the values of duplicates (bool: logical or).

    An already coalesced tensor is returned as it is (no copy).
    """
    return self if self._coalesced else backend_for(self).coalesce(self, threads)


def _compressed_coalesce(self, *, threads: int | None = None) -> CompressedTensor:
    """Repair unchecked input: sort each row's (column's) plain indices and sum duplicates.

    A tensor known to satisfy 5.6 is returned as it is (no copy).
    """
    return self if self._canonical else backend_for(self).coalesce(self, threads)


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
              "conj", "pow", "exp", "exp2", "cos", "cosh", "acos", "acosh", "log", "log2", "log10", "sigmoid",
              "rsqrt", "reciprocal")

OPS: tuple = (
    *(Op(name, getattr(pointwise, name)) for name in _POINTWISE),
    Op("real", _real, function=False, kind="property"),
    Op("imag", _imag, function=False, kind="property"),
    Op("real", pointwise.real, method=False),
    Op("imag", pointwise.imag, method=False),
    # reductions (NumPy's axis=/keepdims=/out= accepted where np.sum & co. pass them)
    Op("sum", _numpy_axis(reduce.sum)),
    Op("mean", _numpy_axis(reduce.mean)),
    Op("amax", _numpy_axis(reduce.amax), aliases=("max",)),
    Op("amin", _numpy_axis(reduce.amin), aliases=("min",)),
    Op("norm", reduce.norm),
    Op("softmax", reduce.softmax),
    Op("log_softmax", reduce.log_softmax),
    # shape and indexing
    Op("transpose", select.transpose),
    Op("t", t, method=False),  # the method is _SparseBase.t (CPU and CUDA)
    Op("narrow", select.narrow, aliases=("narrow_copy",)),
    Op("select", select.select),
    Op("index_select", select.index_select),
    Op("nonzero", select.nonzero),
    Op("count_nonzero", select.count_nonzero),
    Op("sparse_mask", mask.sparse_mask),
    Op("cat", join.cat, method=False),
    Op("stack", join.stack, method=False),
    Op("zero_", inplace.zero_, function=False),
    Op("copy_", inplace.copy_, function=False),
    Op("resize_as_", inplace.resize_as_, function=False),
    # products
    Op("matmul", blas.matmul, aliases=("dot",)),
    Op("mm", blas.mm),
    Op("mv", blas.mv),
    Op("bmm", blas.bmm),
    Op("smm", blas.smm),
    Op("hspmm", blas.hspmm),
    Op("addmm", blas.addmm, method=False),
    Op("sspaddmm", blas.sspaddmm, method=False),
    Op("linear", blas.linear, method=False),
    Op("spgemm", spgemm.spgemm, method=False),
    Op("sampled_addmm", spgemm.sampled_addmm, method=False),
    # elementwise with another operand
    Op("add", binary.add),
    Op("sub", binary.sub),
    Op("mul", binary.mul, aliases=("multiply",)),
    Op("div", binary.div),
    Op("maximum", binary.maximum),
    Op("minimum", binary.minimum),
    # conversions and exits (the functions of the same names are sparsetensor.to_scipy & co.)
    Op("to_dense", to_dense, function=False),
    Op("to_sparse", to_sparse, function=False),
    *(Op(f"to_sparse_{name}", _to_layout(name, name in ("bsr", "bsc")), function=False)
      for name in ("coo", "csr", "csc", "bsr", "bsc")),
    Op("to_scipy", to_scipy, function=False),
    Op("to_torch", to_torch, function=False),
    Op("coalesce", _coo_coalesce, function=False, cls=COOTensor),
    Op("coalesce", _compressed_coalesce, function=False, cls=CompressedTensor, aliases=("sum_duplicates",)),
    # operators; the binary ones and __array_ufunc__ give way to a lazy collection (Dask: the product
    # stays lazy; see interop/chunk.py)
    Op("__add__", _lazy(binary.add), function=False),
    Op("__radd__", _lazy(_reflected(binary.add, "__radd__")), function=False),
    Op("__sub__", _lazy(binary.sub), function=False),
    Op("__rsub__", _lazy(_reflected(binary.sub, "__rsub__")), function=False),
    Op("__mul__", _lazy(binary.mul), function=False),
    Op("__rmul__", _lazy(_reflected(binary.mul, "__rmul__")), function=False),
    Op("__truediv__", _lazy(binary.div), function=False),
    Op("__rtruediv__", _lazy(_reflected(binary.div, "__rtruediv__")), function=False),
    Op("__matmul__", _lazy(blas.matmul), function=False),
    Op("__rmatmul__", _lazy(_reflected(blas.matmul, "__rmatmul__")), function=False),
    Op("__abs__", pointwise.abs, function=False),
    Op("__neg__", pointwise.neg, function=False),
    Op("__pow__", _pow_operator, function=False),
    Op("__array_ufunc__", _lazy_ufunc(_array_ufunc), function=False),
    # per-layout hooks (private): an op picks its layout's body by method lookup, not by isinstance
    Op("_reduce_calc", reduce._reduce_coo, function=False, cls=COOTensor),
    Op("_reduce_calc", reduce._reduce_compressed, function=False, cls=CompressedTensor),
    Op("_reduce_return", reduce._squeeze_coo, function=False, cls=COOTensor),
    Op("_reduce_return", reduce._squeeze_compressed, function=False, cls=CompressedTensor),
    Op("_softmax_calc", reduce._softmax_coo, function=False, cls=COOTensor),
    Op("_softmax_calc", reduce._softmax_compressed, function=False, cls=CompressedTensor),
    Op("_zero_", inplace._zero_coo, function=False, cls=COOTensor),
    Op("_zero_", inplace._zero_compressed, function=False, cls=CompressedTensor),
    Op("_take_members", inplace._take_coo, function=False, cls=COOTensor),
    Op("_take_members", inplace._take_compressed, function=False, cls=CompressedTensor),
    Op("_resize_as", inplace._resize_coo, function=False, cls=COOTensor),
    Op("_resize_as", inplace._resize_compressed, function=False, cls=CompressedTensor),
    Op("_element_coords", mask._coo_coords, function=False, cls=COOTensor),
    Op("_element_coords", mask._compressed_coords, function=False, cls=CompressedTensor),
    Op("_cat_calc", staticmethod(join._coo_cat), function=False, cls=COOTensor),
    Op("_cat_calc", staticmethod(join._compressed_cat), function=False, cls=CompressedTensor),
    Op("_unsqueeze", join._unsqueeze_coo, function=False, cls=COOTensor),
    Op("_unsqueeze", join._unsqueeze_compressed, function=False, cls=CompressedTensor),
    Op("_sample_dense", binary._sample_coo, function=False, cls=COOTensor),
    Op("_sample_dense", binary._sample_compressed, function=False, cls=CompressedTensor),
    Op("_add_to_dense", binary._add_coo_to, function=False, cls=COOTensor),
    Op("_add_to_dense", binary._add_compressed_to, function=False, cls=CompressedTensor),
    Op("_matmul_dense", blas._coo_product, function=False, cls=COOTensor),
    Op("_matmul_dense", blas._compressed_product, function=False, cls=CompressedTensor),
    Op("_transpose_sparse", select._transpose_sparse_coo, function=False, cls=COOTensor),
    Op("_transpose_sparse", select._transpose_sparse_compressed, function=False, cls=CompressedTensor),
    Op("_narrow_sparse", select._narrow_coo, function=False, cls=COOTensor),
    Op("_narrow_sparse", select._narrow_compressed, function=False, cls=CompressedTensor),
    Op("_select_sparse", select._select_coo, function=False, cls=COOTensor),
    Op("_select_sparse", select._select_compressed, function=False, cls=CompressedTensor),
    Op("_index_select_sparse", select._index_select_coo, function=False, cls=COOTensor),
    Op("_index_select_sparse", select._index_select_compressed, function=False, cls=CompressedTensor),
)


def _on_any_device(name: str, impl):
    """The ``st.*`` function of a method row: ``impl`` for CPU tensors (and everything else), and
    for a tensor of another device's class (``sparsetensor.cuda``'s, which share ``_SparseBase``)
    that class's own method of the same name, so that ``st.sum(t)`` works wherever ``t.sum()``
    does. One ``isinstance`` test more than the method costs."""
    def fn(*args, **kwargs):
        t = args[0] if args else None
        if isinstance(t, _SparseBase) and not isinstance(t, SparseTensor):
            return getattr(type(t), name)(*args, **kwargs)
        return impl(*args, **kwargs)

    functools.update_wrapper(fn, impl)  # name, docs, signature (``__wrapped__``) of the method
    return fn


def bind(rows, namespace: dict | None = None) -> list:
    """Attach the methods of ``rows`` to their classes and put their functions in ``namespace``
    (this module's globals when None); returns the function names, for an ``__all__``. A row
    that is a method of every layout and a function gives the function of :func:`_on_any_device`."""
    namespace = globals() if namespace is None else namespace
    names = []
    for op in rows:
        for name in (op.name,) + tuple(op.aliases):
            if op.method:
                setattr(op.cls, name, property(op.impl, doc=op.impl.__doc__) if op.kind == "property" else op.impl)
            if op.function:
                device_too = op.method and op.kind == "method" and op.cls is SparseTensor
                namespace[name] = _on_any_device(name, op.impl) if device_too else op.impl
                names.append(name)
    return names


__all__ += bind(OPS)
