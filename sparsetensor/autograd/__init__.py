"""Gradients of sparse ops, without an engine: ``out, pullback = vjp(fn, *args)``.

Semantics (PyTorch's masked semantics for sparse inputs, JAX's ``vjp`` form):

- A sparse tensor is differentiated with respect to its **values**; its indices are
  constants. The cotangent of a sparse argument is a sparse tensor of the argument's own
  layout and pattern (its index arrays, duplicates of an uncoalesced tensor included:
  each stored element gets its own entry), never a densified matrix.
- Dense arguments (NumPy arrays) get dense cotangents of their shape; arguments that are
  not differentiated (integer or bool arrays and tensors, scalars, dims, masks, index
  arrays) get ``None``.
- Complex values follow PyTorch's convention: the cotangent is the conjugate Wirtinger
  derivative, so for ``L = Re(<g, f(x)>)`` the cotangent of ``x`` is ``dL/dRe(x) +
  1j * dL/dIm(x)``; a real argument of a complex computation gets the real part.
- Ops whose gradient w.r.t. a sparse input is dense (``exp``, ``cos``, ``log`` ... of a
  sparse tensor) raise :class:`DenseGradientError` naming the op and ``to_dense()``.

``fn`` is one op of the table (:data:`sparsetensor.autograd.rules.RULES`), given as the
function (``st.matmul``, ``st.ops.reduce.sum``), a bound method (``t.to_dense``), an unbound
method (``st.SparseTensor.values``) or its name (``"softmax"``); or any function composed of
our ops (``lambda t: st.sum(t * 3.0)``), whose ops are recorded on a tape as they run and
pulled back in reverse (JAX's ``vjp(fun, *primals)``). Inside such a function the values that
depend on the arguments go through our ops only: NumPy's own operations on them are not
recorded and raise ``NotImplementedError`` (as does an op without a rule), never a silently
partial gradient. PyTorch users get the same rules on torch's engine through
:mod:`sparsetensor.torch`.

Arguments on a CUDA device (tensors, :class:`sparsetensor.cuda.DeviceArray` s) are pulled back
on that device (:mod:`._device`, kernels in ``kernels/autograd.cu``): their cotangents are
device tensors of their own pattern and device arrays, the output cotangent must be on the
output's device (a scalar for a 0-d output), and a step without a GPU kernel raises
NotImplementedError naming the rule and the device instead of copying to the host.
"""

from __future__ import annotations

import inspect

import numpy as np

from .._core._tensor import SparseTensor
from ._core import DenseGradientError, check_cotangent
from . import _device
from .rules import RULES
from . import _tape
from . import embeddings as _embedding  # registers its rules
from . import _kron  # registers its rule

from .embeddings import embedding, embedding_bag

__all__ = ["vjp", "DenseGradientError", "rule_names", "differentiable", "wrap_cotangent", "embedding", "embedding_bag"]


def _function_names() -> dict:
    from ..ops import dense as _dense
    from ..ops import binary, blas, pointwise, reduce, shape, spgemm

    table = {}
    for module in (blas, binary, pointwise, reduce, shape, spgemm):
        for name in RULES:
            fn = getattr(module, name, None)
            if callable(fn):
                table[fn] = name
    table[_dense.from_dense] = "from_dense"
    table[_embedding.embedding] = "embedding"
    table[_embedding.embedding_bag] = "embedding_bag"
    return table


_BY_FUNCTION: dict = {}


def _resolve(fn, args: tuple):
    """(rule name, positional args) for ``fn`` given as a name, function or method."""
    if isinstance(fn, str):
        name = fn
    elif inspect.ismethod(fn) and isinstance(fn.__self__, SparseTensor):
        name, args = fn.__name__, (fn.__self__,) + args
    else:
        if not _BY_FUNCTION:
            _BY_FUNCTION.update(_function_names())
        fn = inspect.unwrap(fn)  # st.* functions wrap the ops' own (sparsetensor._api)
        name = _BY_FUNCTION.get(fn)
        if name is None and isinstance(fn, property):
            name = fn.fget.__name__
        if name is None:
            qual = getattr(fn, "__qualname__", "")
            if qual.split(".")[0] in ("SparseTensor", "COOTensor", "CompressedTensor"):
                name = fn.__name__
    if name not in RULES:
        module = getattr(fn, "__module__", None) or ""
        if callable(fn) and not isinstance(fn, str) and not inspect.isbuiltin(fn) and \
                module.split(".")[0] not in ("numpy", "scipy"):
            return None, args  # a composition of our ops: traced (vjp); NumPy's own functions have no rule
        raise NotImplementedError(f"vjp: no derivative rule for {getattr(fn, '__name__', fn)!r}; the table has: "
                                  f"{', '.join(sorted(RULES))}")
    return name, args


def rule_names() -> list:
    """The names of the ops that have a derivative rule."""
    return sorted(RULES)


def differentiable(x) -> bool:
    """Whether ``x`` (a sparse tensor or an array) has floating or complex values."""
    if isinstance(x, SparseTensor):
        return x.dtype.kind in "fc"
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "fc"
    return _device.on_device(x) and np.dtype(x.dtype).kind in "fc"


def wrap_cotangent(arg, ct):
    """The cotangent ``ct`` of ``arg`` in ``arg``'s form: a tensor of its pattern, an array, or None."""
    if isinstance(arg, list):
        cts = ct if isinstance(ct, list) else [None] * len(arg)
        return [wrap_cotangent(a, c) for a, c in zip(arg, cts)]
    if ct is None or not differentiable(arg):
        return None
    if _device.on_device(arg):
        return _device.wrap(arg, ct)
    if isinstance(ct, SparseTensor):  # a dense argument with a sparse cotangent (embedding rows)
        return ct if ct.dtype == arg.dtype else ct.astype(arg.dtype)
    ct = np.asarray(ct)
    if arg.dtype.kind != "c" and ct.dtype.kind == "c":
        ct = ct.real
    if isinstance(arg, SparseTensor):
        want = arg.values().shape
        if ct.shape != want:
            raise AssertionError(f"internal: a cotangent of shape {ct.shape} for values of shape {want}")
        return arg._replace_values(np.ascontiguousarray(ct, dtype=arg.dtype))
    ct = np.broadcast_to(ct, arg.shape)
    if ct.ndim == 0:  # (ascontiguousarray would make it 1-d)
        return np.array(ct, dtype=arg.dtype)
    return np.ascontiguousarray(ct, dtype=arg.dtype)


def vjp(fn, *args, **kwargs):
    """The output of ``fn(*args, **kwargs)`` and its pullback (vector-Jacobian product).

    Parameters
    ----------
    fn : callable or str
        An op of the rule table (see :func:`rule_names`): ``st.matmul``, ``st.mm``,
        ``st.mv``, ``st.bmm``, ``st.addmm``, ``st.sampled_addmm``, ``st.add``, ``st.sub``,
        ``st.mul``, ``st.div``, the zero-preserving unary functions of
        :mod:`sparsetensor.ops.pointwise`, ``sum``, ``mean``, ``softmax``, ``log_softmax``,
        ``to_dense``, ``st.from_dense``, ``st.sparse_mask``, ``coalesce``, ``to_sparse``
        (and ``to_sparse_csr`` ...), ``transpose``, ``mT``, ``narrow``, ``select``,
        ``index_select``, ``st.cat``, ``values``; or a function composed of these (recorded as it
        runs, see the module docstring), which may return one value or a tuple of them.
    *args, **kwargs
        Its arguments, as the op takes them.

    Returns
    -------
    out
        ``fn(*args, **kwargs)``.
    pullback : callable
        ``pullback(g)`` takes the cotangent of ``out`` (an array of its shape; for a
        sparse ``out`` a sparse tensor of its layout and pattern, or a dense array of its
        shape, read at the pattern) and returns a tuple with one cotangent per positional
        argument (see the module docstring). ``ValueError`` when ``g`` does not match.

    Examples
    --------
    The gradient of ``0.5 * ||A x - b||^2`` w.r.t. A's values and x:

    >>> import numpy as np, sparsetensor as st
    >>> A = st.sparse_csr_tensor([0, 2, 3], [0, 1, 1], [1.0, 2.0, 3.0], size=(2, 2))
    >>> x, b = np.array([1.0, 1.0]), np.array([1.0, 1.0])
    >>> r, pullback = st.autograd.vjp(st.matmul, A, x)
    >>> dA, dx = pullback(r - b)
    >>> dA.layout, dA.values(), dx
    (st.sparse_csr, array([2., 2., 2.]), array([ 2., 10.]))

    A composition is recorded as it runs; ``t`` is used twice, so its cotangents add up:

    >>> loss, pullback = st.autograd.vjp(lambda t: st.sum(t * 3.0 + t * t), A)
    >>> float(loss), pullback(1.0)[0].values()
    (32.0, array([5., 7., 9.]))
    """
    name, args = _resolve(fn, args)
    if name is None:
        return _traced_vjp(fn, args, kwargs)
    out, back = RULES[name](*args, **kwargs)

    def pullback(g):
        G = check_cotangent(g, out, f"vjp({name})")
        if isinstance(out, SparseTensor):
            G = out._replace_values(_tape.promoted(G, out.dtype))
        cts = tuple(_tape.pulled(name, back, G))
        cts += (None,) * (len(args) - len(cts))  # trailing options (dims, flags) have no cotangent
        return tuple(wrap_cotangent(a, c) for a, c in zip(args, cts))

    return out, pullback


def _traced_vjp(fn, args: tuple, kwargs: dict):
    """vjp of a composition of our ops: record them as ``fn`` runs (:mod:`._tape`), pull back in reverse."""
    tape, seen, out = _tape.trace(fn, args, kwargs)
    many = isinstance(out, tuple)

    def pullback(g):
        gs = g if many else (g,)
        if many and (not isinstance(g, (tuple, list)) or len(g) != len(out)):
            raise ValueError(f"vjp: fn returned {len(out)} values, so the pullback takes a tuple of {len(out)} "
                             f"cotangents (None for one that is zero), got {type(g).__name__}")
        cts = tape.pullback(out if many else (out,), gs)
        grads = []
        for a, s in zip(args, seen):
            ct = cts.get(id(s)) if differentiable(a) else None
            if ct is None and differentiable(a):  # the output does not depend on this argument
                ct = _tape.zeros_like(a.values() if isinstance(a, SparseTensor) else a)
            grads.append(wrap_cotangent(a, ct))
        return tuple(grads)

    return _tape.plain(out), pullback
