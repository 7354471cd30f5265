"""The updates behind both optimizer front ends, on NumPy arrays.

A sparse gradient is a COO tensor of the parameter's shape (any number of sparse dims;
hybrid COO with the embedding width as a dense dim is the usual case). Its index columns
are linearised to row keys over the sparse dims and sorted with the COO coalescing bucket
sort (which checks their bounds: an out-of-range row raises ``InvariantError`` C4/C5
before anything is written); each distinct row then becomes a *run* of sorted positions,
and one threaded kernel pass (:mod:`sparsetensor._lib._optim`) sums each run's gradient
rows and updates the parameter and state rows in place. The formulas are
``torch.optim``'s for sparse gradients, operation for operation, so that results agree to
rounding. Dense gradients take NumPy transcriptions of torch's dense updates.

Parameters on a CUDA device (``sparsetensor.cuda.DeviceArray``, or any CUDA array taken
without a copy) take the same functions of :mod:`sparsetensor._backend.cuda._optim`, the
lowering of this module onto ``kernels/optim.cu``: :func:`kernels_for` picks the module from
the parameter's device, so the front ends have one code path.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np

from .._backend.cpu._coalesce import _NO_PAYLOAD
from .._backend.cpu._coalesce import _values_2d as values_2d
from .._core import _device
from .._core._config import num_threads
from .._lib import _coalesce as _sort_kernels
from .._lib import _optim as _kernels
from .._core._tensor import COOTensor, SparseTensor
from .._core._validate import raise_coo_error

__all__ = ["Runs", "check_param", "check_grad", "kernels_for", "is_dense", "runs_of", "sgd_sparse", "sgd_sparse_coo",
           "adagrad_sparse", "adam_sparse", "adam_step_size", "sgd_dense", "adagrad_dense", "full_like", "keys_of",
           "indices_of", "values_2d"]

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class Runs(NamedTuple):
    """A gradient grouped by row: run ``j`` is row ``rows[j]`` of the ``(nrows, E)`` view,
    made of gradient rows ``perm[run_ptr[j]:run_ptr[j + 1]]`` of ``values`` (``(nnz, E)``)."""

    rows: np.ndarray
    run_ptr: np.ndarray
    perm: np.ndarray
    values: np.ndarray
    sparse_dim: int
    nrows: int
    threads: int


def device_of(x) -> str:
    """``"cpu"`` for host arrays, else the array's or tensor's ``"cuda:N"``."""
    return "cpu" if isinstance(x, np.ndarray) else str(x.device)


def is_dense(x) -> bool:
    """A dense array (host or device), not None and not a sparse tensor."""
    return x is not None and not isinstance(x, SparseTensor)


def check_param(p, where: str):
    """A parameter must be a writeable float32/float64 ndarray, or a float32/float64 CUDA
    array (returned as a ``sparsetensor.cuda.DeviceArray``, without a copy)."""
    if not isinstance(p, np.ndarray):
        if not _device.is_device_array(p):
            raise TypeError(f"{where}: parameters must be NumPy arrays or CUDA device arrays, got {type(p).__name__}")
        p = _device.device_array(p)
    if p.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{where}: parameters must be float32 or float64, got {p.dtype}")
    if isinstance(p, np.ndarray) and not p.flags.writeable:
        raise ValueError(f"{where}: parameter of shape {p.shape} is read-only; the update is in place")
    return p


def check_grad(g, p, where: str):
    """A gradient: a COO tensor or a dense array of the parameter's shape, dtype and device."""
    if isinstance(g, SparseTensor) and not isinstance(g, COOTensor):
        raise NotImplementedError(f"{where}: sparse gradients must be COO (hybrid COO for embeddings), "
                                  f"got layout {g.layout.name}: convert with g.to_sparse(layout='coo')")
    if not isinstance(g, (COOTensor, np.ndarray)):
        if not _device.is_device_array(g):
            raise TypeError(f"{where}: a gradient must be a sparsetensor COO tensor or a NumPy array (a CUDA array "
                            f"for a parameter on a device), got {type(g).__name__}")
        g = _device.device_array(g)
    if device_of(g) != device_of(p):
        raise ValueError(f"{where}: a gradient on {device_of(g)} for a parameter on {device_of(p)}: the gradient "
                         f"must be on the parameter's device (move it to {device_of(p)} first)")
    if g.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{where}: gradients must be float32 or float64, got {g.dtype}")
    if g.dtype != p.dtype:
        raise TypeError(f"{where}: gradient dtype {g.dtype} does not match the parameter's {p.dtype}")
    if tuple(g.shape) != tuple(p.shape):
        kind = "dense dims" if isinstance(g, COOTensor) and tuple(g.shape[:g.sparse_dim]) == p.shape[:g.sparse_dim] \
            else "shape"
        raise ValueError(f"{where}: gradient {kind} do not match the parameter: gradient shape {tuple(g.shape)}, "
                         f"parameter shape {p.shape}")
    return g


def kernels_for(p):
    """The module whose functions update parameter ``p``: this one for a NumPy array, the CUDA
    backend's lowering (:mod:`sparsetensor._backend.cuda._optim`, same names) for a device array."""
    if isinstance(p, np.ndarray):
        return sys.modules[__name__]
    from .._backend.cuda import _optim

    return _optim


def runs_of(g: COOTensor, threads: int | None = None) -> Runs:
    """Group the gradient's entries by row (bounds checked: ``InvariantError`` C4/C5)."""
    indices = np.ascontiguousarray(g.indices())
    S, nnz = indices.shape
    shape = tuple(g.shape)
    nrows = math.prod(shape[:S])
    E = math.prod(shape[S:])
    values = values_2d(g.values(), nnz)
    nt = num_threads(threads, nnz * max(E, 1), grain=1 << 15)
    if nnz == 0:
        empty = np.empty(0, np.int64)
        return Runs(empty, np.zeros(1, np.int64), np.empty(0, np.int32), values, S, nrows, nt)
    nbits = max(1, (nrows - 1).bit_length())
    width = _sort_kernels.bucket_bits(nnz, nbits)
    if not width:  # pragma: no cover - more than 2**43 rows cannot be held in memory
        raise NotImplementedError(f"sparse optimizer step over {nrows} rows: at most 2**43 are supported")
    found, low_keys, perm, bucket_starts, offsets, shift, base = _sort_kernels.coo_bucket_sort(
        indices, np.asarray(shape[:S], np.int64), nbits, width, _NO_PAYLOAD, nt)
    if found is not None:
        raise_coo_error(found, shape)
    nruns = int(offsets[-1])
    rows = np.empty(nruns, np.int64)
    run_ptr = np.empty(nruns + 1, np.int64)
    _kernels.bucket_runs(low_keys, bucket_starts, offsets, shift, base, rows, run_ptr, nt)
    return Runs(rows, run_ptr, perm, values, S, nrows, nt)


class _Rows:
    """The parameter (or a state array) as a C-contiguous ``(nrows, E)`` array: a view when
    it is contiguous, else a copy that :meth:`done` writes back."""

    def __init__(self, a: np.ndarray, nrows: int):
        self.a = a
        self.c = np.ascontiguousarray(a)
        # the row width from the shape: a parameter of no rows still has rows of E items
        self.rows = self.c.reshape(nrows, self.c.size // nrows if nrows else math.prod(self.c.shape[1:]))

    def done(self) -> None:
        if self.c is not self.a:
            np.copyto(self.a, self.c)


def _scratch(r: Runs, dtype) -> np.ndarray:
    return np.empty((r.threads, r.values.shape[1]), dtype)


def sgd_sparse(param: np.ndarray, r: Runs, buf, *, lr: float, momentum: float, dampening: float,
               nesterov: bool, maximize: bool):
    """SGD on a sparse gradient's rows; returns the new momentum buffer ``(keys, values)`` or None.

    ``buf`` is None (no momentum, or no buffer yet) or ``(keys, values)``: the sorted row keys
    the buffer holds and its ``(k, E)`` rows. As in torch, a momentum buffer made from sparse
    gradients is sparse: every row it holds moves each step (its rows decay by ``momentum``).
    """
    p = _Rows(param, r.nrows)
    scratch = _scratch(r, param.dtype)
    if momentum == 0:
        _kernels.update_runs(_kernels.OPS["sgd"], r.rows, r.run_ptr, r.perm, r.values, p.rows, p.rows, p.rows,
                             scratch, -lr, 0.0, 0.0, 0.0, maximize, r.threads)
        p.done()
        return None
    u = r.rows.shape[0]
    E = r.values.shape[1]
    if buf is None:
        keys, grad_run, buf_src = r.rows, np.arange(u, dtype=np.int64), np.full(u, -1, np.int64)
        old = np.empty((0, E), param.dtype)
        out = np.empty((u, E), param.dtype)
    else:
        old_keys, old = buf
        k = old_keys.shape[0]
        pos = np.searchsorted(old_keys, r.rows)
        hit = pos < k
        hit[hit] = old_keys[pos[hit]] == r.rows[hit]
        if hit.all():  # no new row: the buffer is updated in place
            keys, out = old_keys, old
            buf_src = np.arange(k, dtype=np.int64)
            grad_run = np.full(k, -1, np.int64)
            grad_run[pos] = np.arange(u, dtype=np.int64)
        else:  # merge the new rows in (two sorted runs: the stable sort merges them in linear time)
            new = r.rows[~hit]
            keys = np.sort(np.concatenate([old_keys, new]), kind="stable")
            buf_src = np.full(keys.shape[0], -1, np.int64)
            buf_src[np.arange(k, dtype=np.int64) + np.searchsorted(new, old_keys)] = np.arange(k, dtype=np.int64)
            grad_run = np.full(keys.shape[0], -1, np.int64)
            grad_run[pos + np.searchsorted(new, r.rows)] = np.arange(u, dtype=np.int64)
            out = np.empty((keys.shape[0], E), param.dtype)
    _kernels.sgd_momentum(keys, grad_run, buf_src, r.run_ptr, r.perm, r.values, old, out, p.rows, scratch,
                          lr, momentum, dampening, nesterov, buf is None, maximize, r.threads)
    p.done()
    return keys, out


def sgd_sparse_coo(param: np.ndarray, g: COOTensor, r: Runs, buf, *, lr: float, momentum: float, dampening: float,
                   nesterov: bool, maximize: bool):
    """:func:`sgd_sparse` with the momentum buffer as a COO tensor of ``g``'s shape (coalesced,
    int64 indices) or None: returns the new one (None without momentum)."""
    sparse_shape = tuple(g.shape[:g.sparse_dim])
    old = None
    if buf is not None:
        buf = buf._coalesced_checked()  # a loaded buffer may be unsorted: keys must be sorted and distinct
        old = (keys_of(buf.indices(), sparse_shape), values_2d(buf.values(), buf.nnz))
    out = sgd_sparse(param, r, old, lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                     maximize=maximize)
    if out is None:
        return None
    keys, vals = out
    return COOTensor(indices_of(keys, sparse_shape), vals.reshape((keys.shape[0],) + g.shape[g.sparse_dim:]),
                     g.shape, coalesced=True, checked=True)


def adagrad_sparse(param: np.ndarray, r: Runs, state_sum: np.ndarray, *, clr: float, eps: float,
                   maximize: bool) -> None:
    """Adagrad on a sparse gradient's rows (``clr``: the step's decayed learning rate)."""
    p, s = _Rows(param, r.nrows), _Rows(state_sum, r.nrows)
    _kernels.update_runs(_kernels.OPS["adagrad"], r.rows, r.run_ptr, r.perm, r.values, p.rows, s.rows, s.rows,
                         _scratch(r, param.dtype), -clr, eps, 0.0, 0.0, maximize, r.threads)
    p.done()
    s.done()


def adam_sparse(param: np.ndarray, r: Runs, exp_avg: np.ndarray, exp_avg_sq: np.ndarray, *, step: int,
                lr: float, beta1: float, beta2: float, eps: float, maximize: bool) -> None:
    """Lazy Adam (torch's SparseAdam): only the gradient's rows update their moments."""
    if r.rows.shape[0] == 0:  # torch skips an empty gradient (its step still counts)
        return
    step_size = adam_step_size(lr, beta1, beta2, step)
    p, m, v = _Rows(param, r.nrows), _Rows(exp_avg, r.nrows), _Rows(exp_avg_sq, r.nrows)
    _kernels.update_runs(_kernels.OPS["adam"], r.rows, r.run_ptr, r.perm, r.values, p.rows, m.rows, v.rows,
                         _scratch(r, param.dtype), 1 - beta1, 1 - beta2, eps, -step_size, maximize, r.threads)
    for a in (p, m, v):
        a.done()


def adam_step_size(lr: float, beta1: float, beta2: float, step: int) -> float:
    """SparseAdam's bias-corrected step size at ``step`` (1-based), as torch computes it."""
    return lr * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)


def sgd_dense(param: np.ndarray, grad: np.ndarray, buf, *, lr: float, momentum: float, dampening: float,
              weight_decay: float, nesterov: bool, maximize: bool):
    """torch's dense SGD step; returns the momentum buffer (an ndarray) or None."""
    g = -grad if maximize else grad
    if weight_decay != 0:
        g = g + weight_decay * param
    if momentum != 0:
        if buf is None:
            buf = np.array(g, copy=True)
        else:
            buf *= momentum
            buf += (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf
    param += -lr * g
    return buf


def adagrad_dense(param: np.ndarray, grad: np.ndarray, state_sum: np.ndarray, *, clr: float, eps: float,
                  weight_decay: float, maximize: bool) -> None:
    """torch's dense Adagrad step."""
    g = -grad if maximize else grad
    if weight_decay != 0:
        g = g + weight_decay * param
    state_sum += g * g
    param += -clr * (g / (np.sqrt(state_sum) + eps))


def full_like(p: np.ndarray, value: float) -> np.ndarray:
    """An array of ``p``'s shape and dtype filled with ``value`` (Adagrad's initial accumulator)."""
    return np.full_like(p, value)


def keys_of(indices: np.ndarray, sparse_shape: tuple) -> np.ndarray:
    """Row keys (int64) of coalesced index columns (``(S, k)``) over the sparse dims."""
    if indices.shape[0] == 0:  # no sparse dims: one row
        return np.zeros(indices.shape[1], np.int64)
    if indices.shape[0] == 1:
        return np.ascontiguousarray(indices[0], dtype=np.int64)
    return np.ravel_multi_index(tuple(indices), sparse_shape).astype(np.int64, copy=False)


def indices_of(keys: np.ndarray, sparse_shape: tuple) -> np.ndarray:
    """The ``(S, k)`` int64 index columns of row keys."""
    if len(sparse_shape) == 1:
        return keys.reshape(1, -1)
    if len(sparse_shape) == 0:
        return np.empty((0, keys.shape[0]), np.int64)
    return np.stack(np.unravel_index(keys, sparse_shape)).astype(np.int64, copy=False)
