"""sum, amax and amin of a device tensor over any set of dims (``kernels/reduce_dims.cu``): the
reductions that :mod:`._reduce`'s direct kernels (every dim; one sparse dim of a compressed
tensor) do not cover, with the CPU's result types (:mod:`sparsetensor._backend.cpu._reduce`):

- dense dims only: the values reduced inside each entry, the pattern kept (a sparse result);
- coo, some sparse dims: the entries grouped by their kept sparse indices (a key per entry,
  the device radix sort, runs of equal keys, each run reduced in input order): a coalesced coo
  result, or a dense one when every sparse dim is reduced;
- compressed, a sparse dim among them: the same on the tensor's coo form, a dense result;
- compressed, batch dims but no sparse dim: the same on the coo form, converted back to the
  tensor's layout (the union of the batches' patterns).

max/min count unspecified elements as zeros (the input has distinct indices); bool sums are
logical or, as on the CPU; float16 is reduced in float32 and rounded once.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._canonical import ensure_valid, in_layout_or_coo
from ..._core._tensor import COOTensor, CompressedTensor
from ...cuda import _primitives as P
from ._coalesce import _runs, _starts, checked

__all__ = ["reduce_dims", "group_by", "sum_axis"]

_RED = {"sum": 0, "max": 1, "min": 2}


def _kernel_view(x, red: str):
    """``(x as the kernels read it, red, bool result)``: bool as uint8, its sum a logical or (max)."""
    if x.dtype == np.bool_:
        return x.view(np.uint8), ("max" if red == "sum" else red), True
    if x.dtype.kind == "c" and red != "sum":
        raise TypeError(f"{red} of complex values has no order")
    return x, red, False


def _reduce_items(v, lead: int, axes: list, red: str):
    """Device array ``v`` reduced over its ``axes`` (all at or after ``lead``), kept with size 1."""
    shape = v.shape
    out_shape = tuple(1 if a in axes else s for a, s in enumerate(shape))
    dev = v._device
    x, red, as_bool = _kernel_view(v, red)
    item = shape[lead:]
    step = [math.prod(item[i + 1:]) for i in range(len(item))]
    kept = [a - lead for a in range(lead, len(shape)) if a not in axes]
    gone = [a - lead for a in axes]
    N, row = math.prod(shape[:lead]), math.prod(item)
    Q, R = math.prod(item[i] for i in kept), math.prod(item[i] for i in gone)
    out = P.zeros(dev, out_shape, x.dtype)
    if N * Q and R:
        order = kept + gone
        sizes = P.ints(dev, [item[i] for i in order])
        strides = P.ints(dev, [step[i] for i in order])
        if x.dtype.kind == "c":
            P.run(dev, "reduce_dims.cu", "sum_items_complex", (x.dtype.name,), N * Q, x, N, row, Q, R, len(kept),
                  len(gone), sizes, strides, out)
        else:
            P.run(dev, "reduce_dims.cu", "reduce_items", (x.dtype.name,), N * Q, x, N, row, Q, R, len(kept),
                  len(gone), sizes, strides, _RED[red], out)
    return out.view(np.bool_) if as_bool else out


def sum_axis(x, axis: int, dtype):
    """Dense device array ``x`` summed over ``axis`` (dropped) in ``np.sum``'s result dtype for
    ``dtype``: small integers and bool widen to int64 (uint8 to uint64, summed in int64: integer sums
    wrap modulo 2**64 in both, so the bits are the same). Complex values summed in a real dtype
    drop their imaginary parts first, with NumPy's ComplexWarning."""
    want = np.sum(np.zeros(1, x.dtype), dtype=dtype).dtype  # NumPy's rule, on one host zero
    work = np.dtype(np.int64) if want == np.uint64 else want
    axis %= x.ndim
    out = _reduce_items(x.astype(work, copy=False), axis, [axis], "sum")
    out = out.reshape(x.shape[:axis] + x.shape[axis + 1:])
    return out.view(want) if want != work else out


def _reduce_runs(dev, vals2, perm, starts, nout: int, red: str, full: int):
    """``(nout, W)``: ``red`` over every run of the rows of ``vals2`` (``perm``, ``starts``); a max/min
    run of fewer than ``full`` rows also takes a zero."""
    x, red, as_bool = _kernel_view(vals2, red)
    W = x.shape[1]
    out = P.empty(dev, (nout, W), x.dtype)
    if x.dtype.kind == "c":
        P.run(dev, "coalesce.cu", "segment_sum", (x.dtype.name,), nout * W, x, perm, starts, nout, W, out)
    else:
        P.run(dev, "reduce_dims.cu", "runs_reduce", (x.dtype.name,), nout * W, x, perm, starts, nout, W, _RED[red],
              full, out)
    return out.view(np.bool_) if as_bool else out


def _group(t, kept: list, what: str):
    """The entries of device COO ``t`` grouped by their indices along the sparse dims ``kept``:
    ``(sorted keys, perm, starts, groups, kept sizes)``, the groups in key order and each group's
    entries in input order (``perm``; None, and no groups, for an empty ``t``)."""
    t = ensure_valid(t)  # bounds before the keys address anything
    dev = t.values()._device
    nnz = t.nnz
    kept_sizes = [t.shape[d] for d in kept]
    span = math.prod(kept_sizes)
    if span > 1 << 64:
        raise NotImplementedError(f"{what} on {t.device}: the kept sparse dims {tuple(kept_sizes)} have {span} "
                                  "coordinates, more than a 64-bit key holds")
    sizes = P.ints(dev, kept_sizes)
    if not nnz:
        return None, None, P.zeros(dev, (1,), np.int64), 0, sizes
    keys = P.empty(dev, (nnz,), np.uint64)
    P.run(dev, "reduce_dims.cu", "kept_keys", (P.index_key(t.index_dtype),), nnz, t.indices(), nnz, len(kept),
          P.ints(dev, kept), sizes, keys)
    sorted_keys, perm = P.radix_sort(dev, keys, max(1, (span - 1).bit_length()))
    scan, nout = _runs(dev, sorted_keys, nnz)
    return sorted_keys, perm, _starts(dev, scan, nnz, nout), nout, sizes


def group_by(t, kept: list, rest: list, what: str = "grouping entries"):
    """The backend's ``group_by`` (see :func:`sparsetensor._backend.cpu._reduce.group_by`) on the
    device: ``(perm, starts, group indices)``; within a group the entries keep their input order
    (not sorted by ``rest``: the reductions and softmax that group do not depend on it beyond
    rounding)."""
    sorted_keys, perm, starts, nout, sizes = _group(t, kept, what)
    idx = P.empty(t.values()._device, (len(kept), nout), t.index_dtype)
    if nout:
        P.run(t.values()._device, "coalesce.cu", "coo_unkey", (P.index_key(t.index_dtype),), nout, sorted_keys,
              starts, nout, len(kept), sizes, idx)
    return perm, starts, idx


def _reduce_coo(t, dims: tuple, red: str):
    S = t.sparse_dim
    gone = [d for d in dims if d < S]
    v = t.values()
    value_axes = [d - S + 1 for d in dims if d >= S]
    if value_axes:
        v = _reduce_items(v, 1, value_axes, red)
    shape = tuple(1 if d in dims else s for d, s in enumerate(t.shape))
    if not gone:
        return COOTensor(t.indices(), v, shape, t.is_coalesced(), t._checked)
    dev = v._device
    kept = [d for d in range(S) if d not in gone]
    if not kept and red == "sum":  # the values' sum: no index is read, as on the CPU
        return _reduce_items(v, 0, [0], red).reshape(shape)
    nnz = t.nnz
    W = math.prod(v.shape[1:])
    perm, starts, part = group_by(t, kept, gone, f"{red} over dims {dims}")
    nout = part.shape[1]
    if nout:
        red_v = _reduce_runs(dev, v.reshape(nnz, W), perm, starts, nout, red, math.prod(t.shape[d] for d in gone))
    if not kept:  # every sparse dim: one run or none (every element unspecified: zeros)
        return red_v.reshape(shape) if nout else P.zeros(dev, shape, v.dtype)
    idx = P.zeros(dev, (S, nout), t.index_dtype)
    row = nout * idx.itemsize
    for i, d in enumerate(kept):  # the kept rows into their places; the reduced ones stay 0
        dev.copy_dtod(idx._ptr + d * row, part._ptr + i * row, row)
    values = red_v.reshape((nout,) + v.shape[1:]) if nout else P.empty(dev, (0,) + v.shape[1:], v.dtype)
    return COOTensor(idx, values, shape, True, True)  # made by the kernels: valid


def _reduce_compressed(t, dims: tuple, red: str):
    m = t.batch_dim
    b = 2 if t.layout.blocked else 0
    if all(d >= m + 2 for d in dims):  # dense dims only: inside each entry's values
        v = _reduce_items(t.values(), m + 1 + b, [d - 1 + b for d in dims], red)
        shape = tuple(1 if d in dims else s for d, s in enumerate(t.shape))
        return CompressedTensor(t.compressed_indices(), t.plain_indices(), v, shape, t.layout, t.is_coalesced())
    r = _reduce_coo(checked(t).to_sparse_coo(), dims, red)
    if m in dims or m + 1 in dims:
        return r if not isinstance(r, COOTensor) else r.to_dense()
    return in_layout_or_coo(r, t)


def reduce_dims(t, dims: tuple, red: str):
    """``red`` ("sum", "max", "min") of device tensor ``t`` over ``dims`` (sorted, distinct), kept
    with size 1, in ``t``'s dtype; the CPU's result type (see the module docstring)."""
    body = _reduce_coo if isinstance(t, COOTensor) else _reduce_compressed
    return body(t, dims, red)
