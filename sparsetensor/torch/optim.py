"""``torch.optim`` drop-ins whose sparse-gradient steps run on sparsetensor's kernels.

:class:`SGD`, :class:`SparseAdam` and :class:`Adagrad` subclass ``torch.optim.SGD``,
``SparseAdam`` and ``Adagrad``: same constructor arguments and checks, parameter groups,
``state`` keys and ``state_dict``/``load_state_dict`` (a state dict saved from one loads
into the other). Only ``step`` differs: a float32/float64 parameter on the CPU or a CUDA
device whose ``.grad`` is a sparse COO tensor is updated by the one-pass kernels of
:mod:`sparsetensor.optim` (``kernels/optim.cu`` on a CUDA device), reading the gradient
and writing the parameter and state without copies (:func:`sparsetensor.from_torch`; on
a device, ordered with torch's current stream); every other parameter (a dense gradient,
a non-contiguous CUDA parameter, another device) takes torch's own update, so results
match torch's either way. With sparse
gradients, SGD's momentum buffer is a sparse COO tensor, as torch makes it (ours is kept
coalesced); an out-of-range gradient row raises ``InvariantError`` before any parameter
of the step is written.
"""

from __future__ import annotations

import contextlib

import torch
from torch.optim import _functional as _torch_functional
from torch.optim.adagrad import adagrad as _torch_adagrad
from torch.optim.sgd import sgd as _torch_sgd

from .._core._device import device_array
from ..interop.torch import from_torch, to_torch
from ..optim import _update as U
from ._function import streams

__all__ = ["SGD", "SparseAdam", "Adagrad"]

_OURS_DTYPES = (torch.float32, torch.float64)


def _ours(p) -> bool:
    """Whether our kernels take this parameter's step (device parameters must be contiguous: our
    device arrays are)."""
    g = p.grad
    return (g is not None and g.layout == torch.sparse_coo and p.dtype in _OURS_DTYPES
            and (p.device.type == "cpu" or p.device.type == "cuda" and p.is_contiguous()))


def _array(t):
    """A view of a tensor's memory the update writes through: a NumPy array on the CPU, a
    DeviceArray on a CUDA device."""
    t = t.detach()
    return t.numpy() if t.device.type == "cpu" else device_array(t)


def _prepared(params, where: str) -> list:
    """(param, its view, its gradient as a COOTensor, its runs, the kernels' module): every gradient
    checked and sorted before the first update."""
    out = []
    for p in params:
        a = _array(p)
        g = U.check_grad(from_torch(p.grad, check_invariants=False), a, where)
        K = U.kernels_for(a)
        out.append((p, a, g, K.runs_of(g), K))
    return out


@contextlib.contextmanager
def _plan(opt, split, where: str):
    """``[(group, prepared ours, rest)]`` for every param group, in the context that orders our
    work with torch's streams: ``split(group)`` parts the params into ours and the rest, and every
    gradient our kernels take is checked and sorted before the step writes anything (a bad index
    in a later group leaves the earlier groups' params and state untouched)."""
    parts = [(group, *split(group)) for group in opt.param_groups]
    with streams([p for _, ours, _ in parts for p in ours]):
        yield [(group, _prepared(ours, where), rest) for group, ours, rest in parts]


def _written(p) -> None:
    """Tell autograd that ``p`` changed in place (as an in-place torch op would)."""
    torch.autograd.graph.increment_version(p)


def _closure_loss(closure):
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class SGD(torch.optim.SGD):
    """``torch.optim.SGD`` whose sparse-gradient steps run on sparsetensor's kernels.

    Examples
    --------
    >>> import torch, sparsetensor.torch.optim as sto
    >>> emb = torch.nn.Embedding(10, 3, sparse=True)
    >>> opt = sto.SGD(emb.parameters(), lr=0.1, momentum=0.9)
    >>> emb(torch.tensor([1, 4, 1])).sum().backward()
    >>> opt.step()
    >>> opt.state[emb.weight]["momentum_buffer"].layout
    torch.sparse_coo
    """

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        with _plan(self, self._split, "SGD") as plan:
            for group, prepared, rest in plan:
                if rest:
                    self._torch_step(group, rest)
                kw = dict(lr=float(group["lr"]), momentum=group["momentum"], dampening=group["dampening"],
                          nesterov=group["nesterov"], maximize=group["maximize"])
                for p, a, g, r, K in prepared:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    old = None if buf is None else from_torch(buf, check_invariants=False)
                    new = K.sgd_sparse_coo(a, g, r, old, **kw)
                    _written(p)
                    if new is not None:
                        state["momentum_buffer"] = to_torch(new, check_invariants=False)
        return loss

    def _split(self, group):
        ours = [p for p in group["params"] if _ours(p) and self._takes(group, p)]
        return ours, [p for p in group["params"] if p.grad is not None and not any(p is q for q in ours)]

    def _takes(self, group, p) -> bool:
        """Our kernels take the step unless torch's would fail or go dense: weight decay with a
        sparse gradient (torch raises), a dense momentum buffer, or a sparse one of other sparse dims."""
        if group["weight_decay"] != 0:
            return False
        buf = self.state[p].get("momentum_buffer") if group["momentum"] != 0 else None
        return buf is None or (buf.layout == torch.sparse_coo and buf.sparse_dim() == p.grad.sparse_dim())

    def _torch_step(self, group, params) -> None:
        bufs = [self.state[p].get("momentum_buffer") for p in params] if group["momentum"] != 0 else []
        _torch_sgd(params, [p.grad for p in params], bufs, weight_decay=group["weight_decay"],
                   momentum=group["momentum"], lr=group["lr"], dampening=group["dampening"],
                   nesterov=group["nesterov"], maximize=group["maximize"],
                   has_sparse_grad=any(p.grad.is_sparse for p in params), foreach=group["foreach"],
                   fused=group["fused"], grad_scale=getattr(self, "grad_scale", None),
                   found_inf=getattr(self, "found_inf", None))
        if group["momentum"] != 0:
            for p, b in zip(params, bufs):
                self.state[p]["momentum_buffer"] = b


class SparseAdam(torch.optim.SparseAdam):
    """``torch.optim.SparseAdam`` on sparsetensor's kernels (lazy Adam: only the gradient's
    rows update their moments).

    Examples
    --------
    >>> import torch, sparsetensor.torch.optim as sto
    >>> emb = torch.nn.Embedding(1000, 16, sparse=True)
    >>> opt = sto.SparseAdam(list(emb.parameters()), lr=1e-2)
    >>> emb(torch.tensor([[3, 7, 3]])).pow(2).sum().backward()
    >>> opt.step()
    >>> int(opt.state[emb.weight]["exp_avg"].any(dim=1).sum())   # rows 3 and 7 only
    2
    """

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        with _plan(self, self._split, "SparseAdam") as plan:
            for group, prepared, rest in plan:
                params = [p for p in group["params"] if p.grad is not None]
                beta1, beta2 = group["betas"]
                lr = float(group["lr"])
                for p in params:
                    state = self.state[p]
                    if len(state) == 0:
                        state["step"] = 0
                        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["step"] += 1
                if rest:
                    _torch_functional.sparse_adam(
                        rest, [p.grad for p in rest], [self.state[p]["exp_avg"] for p in rest],
                        [self.state[p]["exp_avg_sq"] for p in rest], [self.state[p]["step"] for p in rest],
                        eps=group["eps"], beta1=beta1, beta2=beta2, lr=lr, maximize=group.get("maximize", False))
                for p, a, g, r, K in prepared:
                    state = self.state[p]
                    K.adam_sparse(a, r, _array(state["exp_avg"]), _array(state["exp_avg_sq"]),
                                  step=int(state["step"]), lr=lr, beta1=beta1, beta2=beta2, eps=group["eps"],
                                  maximize=group.get("maximize", False))
                    _written(p)
        return loss

    @staticmethod
    def _split(group):
        params = [p for p in group["params"] if p.grad is not None]
        if any(not p.grad.is_sparse for p in params):
            raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam instead")
        ours = [p for p in params if _ours(p)]
        return ours, [p for p in params if not any(p is q for q in ours)]


class Adagrad(torch.optim.Adagrad):
    """``torch.optim.Adagrad`` whose sparse-gradient steps run on sparsetensor's kernels.

    Examples
    --------
    >>> import torch, sparsetensor.torch.optim as sto
    >>> emb = torch.nn.Embedding(10, 2, sparse=True)
    >>> opt = sto.Adagrad(emb.parameters(), lr=0.1)
    >>> emb(torch.tensor([2])).sum().backward()
    >>> opt.step()
    >>> opt.state[emb.weight]["sum"][2]
    tensor([1., 1.])
    """

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        with _plan(self, self._split, "Adagrad") as plan:
            for group, prepared, rest in plan:
                if rest:
                    _torch_adagrad(rest, [p.grad for p in rest], [self.state[p]["sum"] for p in rest],
                                   [self.state[p]["step"] for p in rest], lr=group["lr"],
                                   weight_decay=group["weight_decay"], lr_decay=group["lr_decay"], eps=group["eps"],
                                   has_sparse_grad=any(p.grad.is_sparse for p in rest), foreach=group["foreach"],
                                   maximize=group["maximize"], differentiable=group["differentiable"],
                                   has_complex=any(torch.is_complex(p) for p in rest), fused=group["fused"],
                                   grad_scale=getattr(self, "grad_scale", None),
                                   found_inf=getattr(self, "found_inf", None))
                for p, a, g, r, K in prepared:
                    state = self.state[p]
                    state["step"] += 1
                    step = float(state["step"])
                    clr = float(group["lr"]) / (1 + (step - 1) * group["lr_decay"])
                    K.adagrad_sparse(a, r, _array(state["sum"]), clr=clr, eps=group["eps"],
                                     maximize=group["maximize"])
                    _written(p)
        return loss

    @staticmethod
    def _split(group):
        ours = [p for p in group["params"] if _ours(p) and group["weight_decay"] == 0]
        return ours, [p for p in group["params"] if p.grad is not None and not any(p is q for q in ours)]
