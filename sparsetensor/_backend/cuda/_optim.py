"""Optimizer steps on a CUDA device: the lowering of :mod:`sparsetensor.optim._update`.

The same functions, with the same parameters, as the CPU's (the front ends of
:mod:`sparsetensor.optim` pick the module from the parameter's device), over
DeviceArrays: parameters and state stay on the device, updated in place by the kernels
of ``kernels/optim.cu``.

A sparse gradient (a COO tensor on the device) is grouped by row as the device coalesce
groups it (:mod:`._coalesce`): its indices are bounds-checked first (an out-of-range row
raises the CPU's ``InvariantError`` C4/C5 before anything is written), linearised to row
keys, radix-sorted stably and split into runs; then one kernel pass over the runs' rows
sums each run's gradient rows in input order and updates the parameter and state rows,
with torch's formulas op for op. SGD's momentum buffer is a coalesced COO tensor on the
device (int64 indices, as the CPU makes it); a step with an old buffer merges its rows
with the gradient's by one more sort of the two key lists. Dense gradients take
elementwise kernels. Nothing is copied to the host: the only host reads are the runs'
count and the bounds-check report.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..._core._tensor import COOTensor
from ..._core._validate import raise_coo_error
from ...cuda import _primitives as P
from ...cuda._array import DeviceArray
from ...cuda._module import launch
from ...optim._update import adam_step_size
from ._coalesce import _runs, _starts
from ._validate import coo_report

__all__ = ["Runs", "runs_of", "sgd_sparse_coo", "adagrad_sparse", "adam_sparse", "sgd_dense", "adagrad_dense",
           "full_like"]

_U64_SPAN = 1 << 64
SGD, ADAGRAD, ADAM = 0, 1, 2  # the ops of optim.cu's update_runs (OPTIM_*)


class Runs(NamedTuple):
    """A device gradient grouped by row: run ``j`` is parameter row ``sorted_keys[starts[j]]``,
    made of gradient rows ``perm[starts[j]:starts[j + 1]]`` of ``values`` (``(nnz, E)``)."""

    sorted_keys: DeviceArray | None
    starts: DeviceArray | None
    perm: DeviceArray | None
    values: DeviceArray
    nruns: int
    nrows: int
    key_bits: int


def _real_key(a: DeviceArray) -> tuple:
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"optimizer kernels on cuda take float32 or float64, got {a.dtype}")
    return (a.dtype.name,)


def runs_of(g, threads=None) -> Runs:
    """Group device COO gradient ``g``'s entries by row (bounds checked: ``InvariantError`` C4/C5)."""
    idx, vals = g.indices(), g.values()
    S, nnz = idx.shape
    nrows = math.prod(g.shape[:S])
    values = vals.reshape(nnz, math.prod(g.shape[S:]))
    bits = max(nrows - 1, 0).bit_length()
    if nnz == 0:
        return Runs(None, None, None, values, 0, nrows, bits)
    if nrows > _U64_SPAN:
        raise NotImplementedError(f"sparse optimizer step on cuda over {nrows} rows: at most 2**64 are supported")
    found = coo_report(g, order=False)
    if found is not None:
        raise_coo_error(found, g.shape)
    dev = vals._device
    shape = P.ints(dev, g.shape[:g.sparse_dim])
    keys = P.empty(dev, (nnz,), np.uint64)
    P.run(dev, "coalesce.cu", "coo_keys", (P.index_key(idx.dtype),), nnz, idx, S, nnz, shape, keys)
    sorted_keys, perm = P.radix_sort(dev, keys, bits)
    scan, nruns = _runs(dev, sorted_keys, nnz)
    return Runs(sorted_keys, _starts(dev, scan, nnz, nruns), perm, values, nruns, nrows, bits)


def _rows(a: DeviceArray, nrows: int) -> DeviceArray:
    return a.reshape(nrows, a.size // nrows if nrows else 0)


_LONG_RUN = 64          # gradient rows a thread sums at most; longer runs take a block each
_UPDATE_THREADS = 256  # UPDATE_THREADS of optim.cu


class _Long(NamedTuple):
    """The runs of more than ``len`` gradient rows that a row kernel lists (``count`` of them in
    ``rows``; None when the gradient has too few rows for one) for a block-a-run kernel."""

    len: int
    count: DeviceArray
    rows: DeviceArray | None

    @classmethod
    def of(cls, dev, nnz: int, n: int) -> "_Long":
        """For ``n`` runs over a gradient of ``nnz`` rows: at most ``nnz // _LONG_RUN`` runs are long."""
        many = nnz > _LONG_RUN
        return cls(_LONG_RUN if many else nnz, P.zeros(dev, (1,), np.uint64),
                   P.empty(dev, (max(1, min(n, nnz // _LONG_RUN)),), np.int64) if many else None)

    def launch(self, dev, kernel: str, key: tuple, *args) -> None:
        if self.rows is not None:
            blocks = min(self.rows.shape[0], dev.sm_count * 8)
            launch(dev, "optim.cu", kernel, key, blocks, _UPDATE_THREADS, *args, self.count, self.rows)


def _update(op: int, param: DeviceArray, r: Runs, s1, s2, c0, c1, c2, c3, maximize: bool) -> None:
    dev, E, nnz = param._device, r.values.shape[1], r.values.shape[0]
    key, coeffs = _real_key(param), (float(c0), float(c1), float(c2), float(c3))
    long = _Long.of(dev, nnz, r.nruns)
    P.run(dev, "optim.cu", "update_runs", key, r.nruns * E, op, r.sorted_keys, r.starts, r.perm, r.values, r.nruns,
          E, int(maximize), param, s1, s2, *coeffs, *long)
    long.launch(dev, "update_long_runs", key, op, r.sorted_keys, r.starts, r.perm, r.values, E,
                int(maximize), param, s1, s2, *coeffs)


def adagrad_sparse(param: DeviceArray, r: Runs, state_sum: DeviceArray, *, clr: float, eps: float,
                   maximize: bool) -> None:
    """Adagrad on a device gradient's rows (``clr``: the step's decayed learning rate)."""
    _update(ADAGRAD, param, r, state_sum, None, -clr, eps, 0.0, 0.0, maximize)


def adam_sparse(param: DeviceArray, r: Runs, exp_avg: DeviceArray, exp_avg_sq: DeviceArray, *, step: int,
                lr: float, beta1: float, beta2: float, eps: float, maximize: bool) -> None:
    """Lazy Adam (torch's SparseAdam) on the device: only the gradient's rows update their moments."""
    if r.nruns == 0:  # torch skips an empty gradient (its step still counts)
        return
    _update(ADAM, param, r, exp_avg, exp_avg_sq, 1 - beta1, 1 - beta2, eps, -adam_step_size(lr, beta1, beta2, step),
            maximize)


def sgd_sparse_coo(param: DeviceArray, g, r: Runs, buf, *, lr: float, momentum: float, dampening: float,
                   nesterov: bool, maximize: bool):
    """SGD on a device gradient's rows; returns the new momentum buffer (a coalesced device COO
    tensor of the union of the old buffer's rows and the gradient's) or None without momentum."""
    if momentum == 0:
        _update(SGD, param, r, None, None, -lr, 0.0, 0.0, 0.0, maximize)
        return None
    dev, S = param._device, g.sparse_dim
    dense = tuple(g.shape[S:])
    E = r.values.shape[1]
    old = None
    if buf is None:  # the buffer's rows are the runs
        n, keys, key_starts, grad_run, buf_src = r.nruns, r.sorted_keys, r.starts, None, None
    else:
        buf = buf._coalesced_checked()  # a loaded buffer may be unsorted: keys must be sorted and distinct
        k, shape = buf.nnz, P.ints(dev, g.shape[:g.sparse_dim])
        old = buf.values().reshape(k, E)
        both = P.empty(dev, (k + r.nruns,), np.uint64)
        P.run(dev, "coalesce.cu", "coo_keys", (P.index_key(buf.index_dtype),), k, buf.indices(), S, k, shape, both)
        if r.nruns:
            run_keys = P.gather_rows(dev, r.sorted_keys, r.starts, r.nruns)  # held: the copy reads it
            dev.copy_dtod(both[k:]._ptr, run_keys._ptr, 8 * r.nruns)
        keys, perm = P.radix_sort(dev, both, r.key_bits)
        scan, n = _runs(dev, keys, both.size)
        key_starts = _starts(dev, scan, both.size, n)
        grad_run, buf_src = P.empty(dev, (n,), np.int64), P.empty(dev, (n,), np.int64)
        P.run(dev, "optim.cu", "union_rows", (), n, key_starts, perm, n, k, grad_run, buf_src)
    out = P.empty(dev, (n, E), param.dtype)
    key, nnz = _real_key(param), r.values.shape[0]
    coeffs = (float(lr), float(momentum), float(dampening), int(nesterov), int(buf is None), int(maximize))
    long = _Long.of(dev, nnz, n)
    P.run(dev, "optim.cu", "sgd_momentum", key, n * E, keys, key_starts, grad_run, buf_src, n, r.starts, r.perm,
          r.values, E, old, out, param, *coeffs, *long)
    long.launch(dev, "sgd_momentum_long", key, keys, key_starts, grad_run, buf_src, r.starts, r.perm,
                r.values, E, old, out, param, *coeffs)
    indices = P.empty(dev, (S, n), np.int64)
    if n:
        P.run(dev, "coalesce.cu", "coo_unkey", ("int64",), n, keys, key_starts, n, S,
              P.ints(dev, g.shape[:g.sparse_dim]), indices)
    return COOTensor(indices, out.reshape((n,) + dense), g.shape, True, True)


def sgd_dense(param: DeviceArray, grad: DeviceArray, buf, *, lr: float, momentum: float, dampening: float,
              weight_decay: float, nesterov: bool, maximize: bool):
    """torch's dense SGD step on the device; returns the momentum buffer (a DeviceArray) or None."""
    first = buf is None and momentum != 0
    if first:
        buf = P.empty(param._device, param.shape, param.dtype)
    P.run(param._device, "optim.cu", "sgd_dense", _real_key(param), param.size, param, grad,
          buf if momentum != 0 else None, param.size, float(lr), float(momentum), float(dampening),
          float(weight_decay), int(nesterov), int(first), int(maximize))
    return buf


def adagrad_dense(param: DeviceArray, grad: DeviceArray, state_sum: DeviceArray, *, clr: float, eps: float,
                  weight_decay: float, maximize: bool) -> None:
    """torch's dense Adagrad step on the device."""
    P.run(param._device, "optim.cu", "adagrad_dense", _real_key(param), param.size, param, grad, state_sum,
          param.size, float(clr), float(eps), float(weight_decay), int(maximize))


def full_like(param: DeviceArray, value: float) -> DeviceArray:
    """A device array of ``param``'s shape and dtype filled with ``value``."""
    out = P.empty(param._device, param.shape, param.dtype)
    P.run(param._device, "optim.cu", "fill", _real_key(param), out.size, out, out.size, float(value))
    return out
