"""One ``torch.autograd.Function`` over the rule table: torch tensors in, our kernels, torch out.

Forward converts every torch tensor argument with :func:`sparsetensor.from_torch` (no
copy: on the CPU members become NumPy views, on a CUDA device DeviceArray views), runs
the rule of :mod:`sparsetensor.autograd.rules` (on the CUDA backend for CUDA tensors)
and hands the result back with :func:`sparsetensor.to_torch` (again sharing memory).
On a CUDA device, forward and backward run inside :func:`sparsetensor.cuda.stream_order`
with torch's current stream: our kernels start after the work torch queued before the
call, and torch's later work waits for them. Backward converts the output's
gradient the same way (a sparse gradient of another pattern, or a dense one, is read at
the output's pattern), calls the rule's pullback and returns, for each sparse input, a
torch tensor of its layout and pattern (sharing its index tensors), which torch
accumulates into a COO/CSR leaf's ``.grad`` or passes on to the values of a tensor built
with ``torch.sparse_*_tensor(..., values)``.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .._core._device import is_device_array
from .._core._tensor import SparseTensor
from ..autograd import wrap_cotangent
from ..autograd._core import same_pattern, values_of, wanting
from ..autograd.rules import RULES
from ..interop.torch import from_torch, import_torch, to_torch

__all__ = ["apply"]

_FUNCTION = None


def _is_tensor(x) -> bool:
    torch = import_torch()
    return isinstance(x, torch.Tensor)


def _check_input(t, name: str, position: str):
    torch = import_torch()
    if t.device.type not in ("cpu", "cuda"):
        raise NotImplementedError(f"sparsetensor.torch.{name}: {position} is a {t.device.type} tensor; the "
                                  "sparsetensor autograd bridge runs on the CPU and on CUDA devices")
    if t.requires_grad and not (t.is_floating_point() or t.is_complex()):
        raise TypeError(f"sparsetensor.torch.{name}: {position} requires grad but has dtype {t.dtype}; only "
                        "floating and complex tensors are differentiated")
    if t.dtype == torch.bfloat16:
        raise TypeError(f"sparsetensor.torch.{name}: {position} is bfloat16, which NumPy lacks; convert it first")


def _ours(t):
    """A torch tensor as a sparsetensor tensor, NumPy array or DeviceArray sharing its memory."""
    return from_torch(t)


@contextlib.contextmanager
def _checked_now(converted):
    """The op of a bridge call trusts the check its conversion just made of CUDA tensors' indices,
    which torch holds: without this every op scans them again (a second scan, and a second wait
    for the device's answer). The backward, later, scans them again (torch may have written them)."""
    pinned = [t for t in converted if isinstance(t, SparseTensor) and t.is_cuda]
    for t in pinned:
        t._pin(True)
    try:
        yield
    finally:
        for t in pinned:
            t._pin(False)


def streams(tensors):
    """The context that orders our work on each CUDA device of ``tensors`` with torch's current
    stream of that device (:func:`sparsetensor.cuda.stream_order`); nothing for CPU tensors."""
    ordinals = sorted({t.device.index or 0 for t in tensors if t is not None and t.device.type == "cuda"})
    if not ordinals:
        return contextlib.nullcontext()
    from ..cuda import stream_order

    torch = import_torch()
    stack = contextlib.ExitStack()
    for i in ordinals:
        stack.enter_context(stream_order(torch.cuda.current_stream(i), f"cuda:{i}"))
    return stack


def _theirs(x):
    """Our result as a torch tensor sharing its memory (read-only host arrays are copied)."""
    torch = import_torch()
    if isinstance(x, SparseTensor) or is_device_array(x):
        return to_torch(x, check_invariants=False)
    a = np.asarray(x)
    if not a.flags.writeable or a.strides and min(a.strides) < 0:
        a = a.copy()
    return torch.from_numpy(a)


_CONSTRUCTORS = ("SparseCompressedTensorBackward0", "SparseCooTensorWithDimsAndTensorsBackward0")


def _values_leaf(t):
    """The values leaf a sparse ``t`` was built from by torch's constructor, or None.

    torch's backward of ``sparse_compressed_tensor(..., values)`` densifies the gradient
    (``to_dense`` + ``sparse_mask``: memory of the full matrix). When ``t``'s values are a
    leaf, the bridge hands that leaf its gradient directly (the same values, in the same
    order) and skips the constructor's backward."""
    fn = t.grad_fn
    if fn is None or type(fn).__name__ not in _CONSTRUCTORS or len(fn.next_functions) != 1:
        return None
    node = fn.next_functions[0][0]
    leaf = getattr(node, "variable", None)
    vals = t._values() if t.layout == import_torch().sparse_coo else t.values()
    if leaf is None or leaf.shape != vals.shape or leaf.data_ptr() != vals.data_ptr() or \
            leaf.stride() != vals.stride():
        return None
    return leaf


def _flatten(args):
    """(torch tensors in order, the arguments with each tensor replaced by a slot marker)."""
    flat, spec = [], []
    for a in args:
        if isinstance(a, (list, tuple)) and a and all(_is_tensor(x) or isinstance(x, SparseTensor) for x in a):
            items = []
            for x in a:
                if _is_tensor(x):
                    items.append(("t", len(flat)))
                    flat.append(x)
                else:
                    items.append(("c", x))
            spec.append(("list", items))
        elif _is_tensor(a):
            spec.append(("t", len(flat)))
            flat.append(a)
        else:
            spec.append(("c", a))
    return flat, spec


def _rebuild(spec, converted):
    def one(item):
        kind, v = item
        return converted[v] if kind == "t" else v

    return [[one(i) for i in v] if kind == "list" else one((kind, v)) for kind, v in spec]


def _function():
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION
    torch = import_torch()
    from torch.autograd.function import once_differentiable

    class SparseRule(torch.autograd.Function):
        """Forward and backward of one op of sparsetensor's rule table."""

        @staticmethod
        def forward(ctx, name, specs, kwargs, *tensors):
            ctx.set_materialize_grads(False)
            spec, leaves = specs
            tensors = tensors[:len(tensors) - len(leaves)]  # the values leaves come last
            ctx.leaves = leaves
            with streams(tensors):
                converted = [_ours(t) for t in tensors]
                args = _rebuild(spec, converted)
                with _checked_now(converted):
                    out, back = RULES[name](*args, **kwargs)
                ctx.rule = (name, spec, args, out, back, [t.layout for t in tensors])
                result = _theirs(out)
            if result.layout == torch.strided and any(
                    t.layout == torch.strided and result.data_ptr() == t.data_ptr() for t in tensors):
                result = result.clone()
            return result

        @staticmethod
        @once_differentiable  # the rules compute on our arrays: a double backward would drop its terms
        def backward(ctx, grad):
            if grad is None:
                return (None, None, None) + (None,) * (len(ctx.rule[5]) + len(ctx.leaves))
            with streams((grad,)):
                return (None, None, None) + _backward(ctx, grad)

    _FUNCTION = SparseRule
    return _FUNCTION


def _backward(ctx, grad) -> tuple:
    """The torch gradients of the inputs (and of the values leaves) for output gradient ``grad``."""
    name, spec, args, out, back, layouts = ctx.rule
    G = _ours(grad.detach())
    if isinstance(out, SparseTensor):
        if not (isinstance(G, SparseTensor) and same_pattern(G, out)):
            G = out._replace_values(values_of(G, out).astype(out.dtype, copy=False))
    need = ctx.needs_input_grad
    tensor_needs = [need[3 + i] or (i in ctx.leaves and need[3 + ctx.leaves[i]]) for i in range(len(layouts))]
    flags = [tensor_needs[v] if kind == "t" else kind == "list" for kind, v in spec]
    with wanting(flags):
        cts = list(back(G))
    cts += [None] * (len(args) - len(cts))
    grads = [None] * len(layouts)
    for (kind, v), arg, ct in zip(spec, args, cts):
        if kind == "t":
            grads[v] = wrap_cotangent(arg, ct)
        elif kind == "list":
            cl = ct if isinstance(ct, list) else [None] * len(v)
            for (k2, v2), a2, c2 in zip(v, arg, cl):
                if k2 == "t":
                    grads[v2] = wrap_cotangent(a2, c2)
    out_grads = [None] * (len(layouts) + len(ctx.leaves))
    for i, (g, need) in enumerate(zip(grads, ctx.needs_input_grad[3:])):
        if g is not None and need:
            out_grads[i] = _theirs(g)
    for i, j in ctx.leaves.items():  # a values leaf gets the values of its tensor's gradient
        if grads[i] is not None and ctx.needs_input_grad[3 + j]:
            v = grads[i].values()
            out_grads[j] = _theirs(np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v)
    return tuple(out_grads)


def apply(name: str, args: tuple, kwargs: dict):
    """Run rule ``name`` on torch (or sparsetensor/NumPy) arguments, differentiable through torch."""
    torch = import_torch()
    if name not in RULES:
        raise NotImplementedError(f"sparsetensor.torch: no derivative rule for {name!r}")
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            raise TypeError(f"sparsetensor.torch.{name}: pass the tensor {k}= as a positional argument")
    flat, spec = _flatten(args)
    leaves, extra = {}, []
    for i, t in enumerate(flat):
        _check_input(t, name, f"tensor argument {i}")
        if t.layout != torch.strided and t.requires_grad:
            leaf = _values_leaf(t)
            if leaf is not None:  # its gradient goes to the values leaf directly
                leaves[i] = len(flat) + len(extra)
                extra.append(leaf)
                flat[i] = t.detach()
    return _function().apply(name, (spec, leaves), dict(kwargs), *flat, *extra)
