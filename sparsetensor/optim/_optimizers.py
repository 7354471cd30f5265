"""The NumPy front end: SGD, SparseAdam and Adagrad over NumPy parameter arrays.

The API is ``torch.optim``'s, less autograd: there is no ``.grad`` attribute on an
ndarray, so :meth:`Optimizer.step` takes the gradients, one per parameter in the order of
the parameter groups (``None`` skips a parameter). Parameters are updated in place.
Hyperparameters, their checks, state keys and ``state_dict`` layout are torch's.

Parameters may also live on a CUDA device (``sparsetensor.cuda.DeviceArray``s, or CuPy /
PyTorch CUDA arrays, taken without a copy): their gradients must be on the same device (COO
tensors or dense device arrays), their state is made there, and each step runs as CUDA
kernels (:mod:`sparsetensor._backend.cuda._optim`): the same front end, one code path, the
update functions picked by the parameter's device (:func:`._update.kernels_for`).
"""

from __future__ import annotations

import copy

import numpy as np

from .._core import _device
from .._core._tensor import COOTensor
from . import _update as U

__all__ = ["Optimizer", "SGD", "SparseAdam", "Adagrad"]


class Optimizer:
    """Base class: parameter groups, per-parameter state, ``state_dict``.

    Parameters
    ----------
    params : iterable of ndarray, or of dict
        Parameters, or parameter groups: dicts with a ``"params"`` list and any
        hyperparameters that override the defaults for that group.
    defaults : dict
        The hyperparameters' default values.
    """

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: list[dict] = []
        if isinstance(params, np.ndarray) or _device.is_device_array(params):
            raise TypeError("params must be an iterable of arrays or of dicts, got one array: wrap it in a list")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict) -> None:
        """Add a group of parameters (a dict with ``"params"`` and optional hyperparameters)."""
        group = dict(group)
        params = group["params"]
        params = [params] if isinstance(params, np.ndarray) or _device.is_device_array(params) else list(params)
        name = type(self).__name__
        params = [U.check_param(p, name) for p in params]
        for p in params:
            if any(_same(p, q) for g in self.param_groups for q in g["params"]) or sum(_same(p, q) for q in params) > 1:
                raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self._check_group(group)
        group["params"] = params
        self.param_groups.append(group)
        self.state.extend({} for _ in params)

    def _check_group(self, group: dict) -> None:
        """Check the hyperparameters of a group (raise ValueError)."""

    def _items(self, grads) -> list:
        """(group, param, grad, state) for every parameter with a gradient, all checked first:
        a bad gradient raises before any parameter is touched."""
        grads = [grads] if grads is None or isinstance(grads, (np.ndarray, COOTensor)) or _device.is_device_array(grads) \
            else list(grads)
        n = len(self.state)
        if len(grads) != n:
            raise ValueError(f"{type(self).__name__}.step: got {len(grads)} gradients for {n} parameters")
        items, i = [], 0
        for group in self.param_groups:
            for p in group["params"]:
                if grads[i] is not None:
                    items.append((group, p, U.check_grad(grads[i], p, type(self).__name__), self.state[i]))
                i += 1
        self._refuse(items)
        # sort every sparse gradient (checking its rows' bounds) before the first update
        return [(group, p, g, state, U.kernels_for(p).runs_of(g) if isinstance(g, COOTensor) else None)
                for group, p, g, state in items]

    def _refuse(self, items: list) -> None:
        """Raise for a (group, param, grad, state) combination the optimizer does not take."""

    def step(self, grads) -> None:
        """One update of every parameter from its gradient (``grads``: one per parameter, in order)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``, as torch's.

        The state arrays are returned as they are (not copied), as torch does: a parameter on a
        CUDA device has its state there (DeviceArrays, device COO tensors).
        """
        groups, i = [], 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = list(range(i, i + len(g["params"])))
            i += len(g["params"])
            groups.append(packed)
        return {"state": {k: dict(s) for k, s in enumerate(self.state) if s}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a :meth:`state_dict` (copies its arrays, cast to each parameter's dtype and moved to its
        device: device state is copied through the host, host state to the device)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise ValueError("loaded state dict has a different number of parameter groups or parameters")
        params = [p for g in self.param_groups for p in g["params"]]
        order = [k for g in groups for k in g["params"]]
        new_state: list[dict] = [{} for _ in params]
        for pos, key in enumerate(order):
            s = state_dict["state"].get(key)
            if s:
                new_state[pos] = {k: _cast_like(v, params[pos]) for k, v in s.items()}
        for g, saved in zip(self.param_groups, groups):
            for k, v in saved.items():
                if k != "params":
                    g[k] = copy.deepcopy(v)
        self.state = new_state


def _same(p, q) -> bool:
    """One parameter: the same array, or device arrays at the same address."""
    return p is q or (not isinstance(p, np.ndarray) and not isinstance(q, np.ndarray)
                      and (p.device, p._ptr, p.shape) == (q.device, q._ptr, q.shape) and p.size > 0)


def _cast_like(v, p):
    """State value ``v`` as a copy on ``p``'s device, floats in ``p``'s dtype (through the host); a
    torch tensor (a state dict of ``torch.optim``'s) as its NumPy copy, a 0-d one as a number."""
    if type(v).__module__.startswith("torch") and hasattr(v, "detach"):
        if str(v.layout) != "torch.strided":
            raise TypeError(f"load_state_dict: a sparse torch tensor ({v.layout}) in the state; convert it first")
        a = v.detach().cpu().numpy()
        v = a.item() if a.ndim == 0 else a
    if isinstance(v, COOTensor):
        v = v.cpu()
        v = COOTensor(v.indices().copy(), np.array(v.values(), dtype=p.dtype), v.shape, v.is_coalesced(), False)
        return v if isinstance(p, np.ndarray) else v.to(p.device)
    if isinstance(v, np.ndarray) or _device.is_device_array(v):
        a = np.array(v, copy=True)  # a device array: its host copy
        if a.dtype.kind == "f":
            a = a.astype(p.dtype, copy=False)
            return a if isinstance(p, np.ndarray) else type(p).from_host(a, p._device)
        return a
    return copy.deepcopy(v)


class SGD(Optimizer):
    """Stochastic gradient descent (with momentum), ``torch.optim.SGD``'s update.

    Sparse (COO) gradients update only their rows; with momentum the buffer is sparse
    too, as in torch: it holds the rows any gradient touched, and each step moves all of
    them. As in torch, ``weight_decay`` with a sparse gradient raises
    (``NotImplementedError``; torch: "add(sparse, dense) is not supported").

    Parameters
    ----------
    params : iterable of ndarray or dict
        float32/float64 arrays, updated in place; or parameter groups.
    lr, momentum, dampening, weight_decay, nesterov, maximize
        As ``torch.optim.SGD`` (``lr`` default 1e-3).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> W = np.ones((4, 2))
    >>> opt = st.optim.SGD([W], lr=0.5, momentum=0.9)
    >>> g = st.sparse_coo_tensor([[1, 3, 1]], np.ones((3, 2)), size=(4, 2))
    >>> opt.step([g])
    >>> W[:, 0]
    array([1. , 0. , 1. , 0.5])
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def _check_group(self, g):
        if g["lr"] < 0:
            raise ValueError(f"Invalid learning rate: {g['lr']}")
        if g["momentum"] < 0:
            raise ValueError(f"Invalid momentum value: {g['momentum']}")
        if g["weight_decay"] < 0:
            raise ValueError(f"Invalid weight_decay value: {g['weight_decay']}")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def step(self, grads) -> None:
        """One SGD step; ``grads``: a COO tensor or ndarray (or None) per parameter."""
        for group, p, g, state, r in self._items(grads):
            K = U.kernels_for(p)
            kw = dict(lr=group["lr"], momentum=group["momentum"], dampening=group["dampening"],
                      nesterov=group["nesterov"], maximize=group["maximize"])
            buf = state.get("momentum_buffer")
            if r is None:
                buf = K.sgd_dense(p, g, buf, weight_decay=group["weight_decay"], **kw)
            elif U.is_dense(buf):  # a dense buffer from dense gradients: a dense step
                buf = K.sgd_dense(p, g.to_dense(), buf, weight_decay=0, **kw)
            else:
                buf = K.sgd_sparse_coo(p, g, r, buf, **kw)
            if group["momentum"] != 0:
                state["momentum_buffer"] = buf

    def _refuse(self, items):
        for group, p, g, state in items:
            buf = state.get("momentum_buffer")
            if not isinstance(g, COOTensor):
                if isinstance(buf, COOTensor):
                    raise NotImplementedError("SGD: a dense gradient after sparse ones: the momentum buffer is "
                                              "sparse (torch cannot add a dense gradient to it either)")
                continue
            if group["weight_decay"] != 0:
                raise NotImplementedError("SGD: weight_decay with a sparse gradient is not supported "
                                          "(torch: add(sparse, dense) is not supported)")
            if U.is_dense(buf) and group["nesterov"]:
                raise NotImplementedError("SGD: nesterov with a sparse gradient and a dense momentum buffer "
                                          "(torch: add(sparse, dense) is not supported)")
            if isinstance(buf, COOTensor) and buf.sparse_dim != g.sparse_dim:
                raise ValueError(f"SGD: dense-dim mismatch: the momentum buffer has {buf.sparse_dim} sparse dims "
                                 f"and {buf.dense_dim} dense dims, the gradient {g.sparse_dim} and {g.dense_dim}")


class SparseAdam(Optimizer):
    """Lazy Adam for sparse gradients, ``torch.optim.SparseAdam``'s update.

    Only the rows present in a gradient update their moments and parameters; the bias
    correction uses the parameter's step count (which also counts empty gradients).
    Dense gradients are refused, as torch does.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> W = np.zeros((1000, 8), np.float32)
    >>> opt = st.optim.SparseAdam([W], lr=1e-2)
    >>> g = st.sparse_coo_tensor([[3, 7, 3]], np.ones((3, 8), np.float32), size=(1000, 8))
    >>> opt.step([g])
    >>> W[:, 0].round(6)[[3, 7, 0]], opt.state[0]["step"]
    (array([-0.01, -0.01,  0.  ], dtype=float32), 1)
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, maximize=maximize))

    def _check_group(self, g):
        if not 0.0 < g["lr"]:
            raise ValueError(f"Invalid learning rate: {g['lr']}")
        if not 0.0 < g["eps"]:
            raise ValueError(f"Invalid epsilon value: {g['eps']}")
        for i in (0, 1):
            if not 0.0 <= g["betas"][i] < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {g['betas'][i]}")

    def _refuse(self, items):
        if any(not isinstance(g, COOTensor) for _, _, g, _ in items):
            raise TypeError("SparseAdam does not support dense gradients, please consider Adam instead")

    def step(self, grads) -> None:
        """One SparseAdam step; ``grads``: a COO tensor (or None) per parameter."""
        for group, p, g, state, r in self._items(grads):
            K = U.kernels_for(p)
            if not state:
                state.update(step=0, exp_avg=K.full_like(p, 0.0), exp_avg_sq=K.full_like(p, 0.0))
            state["step"] += 1
            beta1, beta2 = group["betas"]
            K.adam_sparse(p, r, state["exp_avg"], state["exp_avg_sq"], step=state["step"], lr=group["lr"],
                          beta1=beta1, beta2=beta2, eps=group["eps"], maximize=group["maximize"])


class Adagrad(Optimizer):
    """Adagrad, ``torch.optim.Adagrad``'s update; sparse gradients update only their rows.

    As in torch, ``weight_decay`` with a sparse gradient raises (``NotImplementedError``).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> W = np.zeros((5, 2))
    >>> opt = st.optim.Adagrad([W], lr=0.1)
    >>> opt.step([st.sparse_coo_tensor([[4]], [[2.0, -2.0]], size=(5, 2))])
    >>> W[4]
    array([-0.1,  0.1])
    """

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps,
                                      maximize=maximize))

    def add_param_group(self, group: dict) -> None:
        super().add_param_group(group)
        group = self.param_groups[-1]
        n = len(group["params"])
        for j, p in enumerate(group["params"]):  # torch makes Adagrad's state up front
            self.state[len(self.state) - n + j] = {
                "step": 0.0, "sum": U.kernels_for(p).full_like(p, group["initial_accumulator_value"])}

    def _check_group(self, g):
        for name, what in (("lr", "learning rate"), ("lr_decay", "lr_decay value"),
                           ("weight_decay", "weight_decay value"),
                           ("initial_accumulator_value", "initial_accumulator_value"), ("eps", "epsilon value")):
            if not 0.0 <= g[name]:
                raise ValueError(f"Invalid {what}: {g[name]}")

    def _refuse(self, items):
        if any(isinstance(g, COOTensor) and group["weight_decay"] != 0 for group, _, g, _ in items):
            raise NotImplementedError("Adagrad: weight_decay option is not compatible with sparse gradients")

    def step(self, grads) -> None:
        """One Adagrad step; ``grads``: a COO tensor or ndarray (or None) per parameter."""
        for group, p, g, state, r in self._items(grads):
            state["step"] += 1
            clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
            K = U.kernels_for(p)
            if r is None:
                K.adagrad_dense(p, g, state["sum"], clr=clr, eps=group["eps"], weight_decay=group["weight_decay"],
                                maximize=group["maximize"])
            else:
                K.adagrad_sparse(p, r, state["sum"], clr=clr, eps=group["eps"], maximize=group["maximize"])
