"""``torch.optim`` drop-ins whose sparse-gradient steps run on sparsetensor's kernels.

:class:`SGD`, :class:`SparseAdam` and :class:`Adagrad` subclass ``torch.optim.SGD``,
``SparseAdam`` and ``Adagrad``: same constructor arguments and checks, parameter groups,
``state`` keys and ``state_dict``/``load_state_dict`` (a state dict saved from one loads
into the other). Only ``step`` differs: a CPU float32/float64 parameter whose ``.grad`` is
a sparse COO tensor is updated by the one-pass kernels of :mod:`sparsetensor.optim`,
reading the gradient and writing the parameter and state without copies
(:func:`sparsetensor.from_torch`); every other parameter (a dense gradient, another
device) takes torch's own update, so results match torch's either way. With sparse
gradients, SGD's momentum buffer is a sparse COO tensor, as torch makes it (ours is kept
coalesced); an out-of-range gradient row raises ``InvariantError`` before any parameter
of the step is written.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.optim import _functional as _torch_functional
from torch.optim.adagrad import adagrad as _torch_adagrad
from torch.optim.sgd import sgd as _torch_sgd

from ..interop.torch import from_torch
from ..optim import _update as U

__all__ = ["SGD", "SparseAdam", "Adagrad"]

_OURS_DTYPES = (torch.float32, torch.float64)


def _ours(p) -> bool:
    """Whether our kernels take this parameter's step."""
    g = p.grad
    return g is not None and g.layout == torch.sparse_coo and p.device.type == "cpu" and p.dtype in _OURS_DTYPES


def _array(t) -> np.ndarray:
    """A NumPy view of a CPU tensor's memory (the update writes through it)."""
    return t.detach().numpy()


def _prepared(params, where: str) -> list:
    """(param, its NumPy view, its gradient as a COOTensor, its runs): every gradient checked and
    sorted before the first update."""
    out = []
    for p in params:
        a = _array(p)
        g = U.check_grad(from_torch(p.grad, check_invariants=False), a, where)
        out.append((p, a, g, U.runs_of(g)))
    return out


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
        for group in self.param_groups:
            ours = [p for p in group["params"] if _ours(p) and self._takes(group, p)]
            rest = [p for p in group["params"] if p.grad is not None and not any(p is q for q in ours)]
            prepared = _prepared(ours, "SGD")
            if rest:
                self._torch_step(group, rest)
            kw = dict(lr=float(group["lr"]), momentum=group["momentum"], dampening=group["dampening"],
                      nesterov=group["nesterov"], maximize=group["maximize"])
            for p, a, g, r in prepared:
                state = self.state[p]
                sparse_shape = tuple(g.shape[:g.sparse_dim])
                buf = state.get("momentum_buffer")
                old = None
                if buf is not None:
                    buf = buf.coalesce()
                    old = (U.keys_of(buf._indices().numpy(), sparse_shape),
                           U.values_2d(buf._values().numpy(), buf._nnz()))
                out = U.sgd_sparse(a, r, old, **kw)
                _written(p)
                if out is not None:
                    keys, vals = out
                    state["momentum_buffer"] = torch.sparse_coo_tensor(
                        torch.from_numpy(U.indices_of(keys, sparse_shape)),
                        torch.from_numpy(vals.reshape((keys.shape[0],) + tuple(g.shape[g.sparse_dim:]))),
                        p.shape, is_coalesced=True, check_invariants=False)
        return loss

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
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if any(not p.grad.is_sparse for p in params):
                raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam instead")
            ours = [p for p in params if _ours(p)]
            rest = [p for p in params if not any(p is q for q in ours)]
            prepared = _prepared(ours, "SparseAdam")
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
            for p, a, g, r in prepared:
                state = self.state[p]
                U.adam_sparse(a, r, _array(state["exp_avg"]), _array(state["exp_avg_sq"]), step=int(state["step"]),
                              lr=lr, beta1=beta1, beta2=beta2, eps=group["eps"],
                              maximize=group.get("maximize", False))
                _written(p)
        return loss


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
        for group in self.param_groups:
            ours = [p for p in group["params"] if _ours(p) and group["weight_decay"] == 0]
            rest = [p for p in group["params"] if p.grad is not None and not any(p is q for q in ours)]
            prepared = _prepared(ours, "Adagrad")
            if rest:
                _torch_adagrad(rest, [p.grad for p in rest], [self.state[p]["sum"] for p in rest],
                               [self.state[p]["step"] for p in rest], lr=group["lr"],
                               weight_decay=group["weight_decay"], lr_decay=group["lr_decay"], eps=group["eps"],
                               has_sparse_grad=any(p.grad.is_sparse for p in rest), foreach=group["foreach"],
                               maximize=group["maximize"], differentiable=group["differentiable"],
                               has_complex=any(torch.is_complex(p) for p in rest), fused=group["fused"],
                               grad_scale=getattr(self, "grad_scale", None),
                               found_inf=getattr(self, "found_inf", None))
            for p, a, g, r in prepared:
                state = self.state[p]
                state["step"] += 1
                step = float(state["step"])
                clr = float(group["lr"]) / (1 + (step - 1) * group["lr_decay"])
                U.adagrad_sparse(a, r, _array(state["sum"]), clr=clr, eps=group["eps"], maximize=group["maximize"])
                _written(p)
        return loss
