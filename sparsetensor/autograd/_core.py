"""What the derivative rules share: cotangent checks, coordinates of stored elements, lookups.

A sparse tensor is differentiated with respect to its values: the cotangent of a sparse
argument is an array of the shape of ``t.values()`` (wrapped as a tensor of ``t``'s own
pattern by :func:`sparsetensor.autograd.vjp`). The helpers here move cotangents between
patterns: :func:`element_coords` gives the coordinate of every stored element of a tensor
(in its own storage order, duplicates and block items included), :func:`gather` reads a
dense or sparse cotangent at such coordinates (zero where a sparse one specifies nothing).
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import numpy as np

from .._core._tensor import COOTensor, CompressedTensor, SparseTensor
from .._backend import backend_for
from . import _device
from ._device import same_indices

__all__ = ["DenseGradientError", "element_coords", "gather", "values_of", "same_pattern", "unbroadcast",
           "conj", "check_cotangent", "lead_ndim", "wanted", "wanting"]


class DenseGradientError(ValueError):
    """The gradient of an op w.r.t. a sparse input would be dense (nonzero outside its pattern)."""


# Which positional arguments of the rule being pulled back need a cotangent: a product's rule
# skips the SDDMM of a sparse factor torch holds no gradient for (a GCN's adjacency), or the
# product of a dense factor that is a constant. None: every argument (the rules' contract).
_WANTED: contextvars.ContextVar = contextvars.ContextVar("sparsetensor_wanted", default=None)


def wanted(i: int) -> bool:
    """Whether the pullback running now needs the cotangent of positional argument ``i``."""
    w = _WANTED.get()
    return w is None or i >= len(w) or bool(w[i])


@contextlib.contextmanager
def wanting(flags):
    """Run a rule's pullback computing only the cotangents ``flags`` (one bool a positional argument) marks."""
    token = _WANTED.set(tuple(flags))
    try:
        yield
    finally:
        _WANTED.reset(token)


def conj(x):
    """The complex conjugate of an array or scalar; real input is returned as it is."""
    if isinstance(x, np.ndarray):
        return np.conj(x) if x.dtype.kind == "c" else x
    if _device.on_device(x):
        return _device.kernels().conj(x)
    return np.conj(x) if isinstance(x, (complex, np.complexfloating)) else x


def lead_ndim(t: SparseTensor) -> int:
    """Axes of ``t.values()`` before the dense dims: ``(nnz,)``, ``batch + (nnz,)``, ``+ block``."""
    return t.values().ndim - t.dense_dim


def _valid(t: SparseTensor) -> SparseTensor:
    """``t`` after an O(nnz) check when its indices are not known to be in bounds (InvariantError)."""
    if isinstance(t, COOTensor):
        if not t._checked:
            from .._core._validate import check_coo_indices

            check_coo_indices(t.indices(), t.shape)
    elif not t.is_coalesced():
        # 5.1-5.5: every index in bounds; unsorted rows and repeated plain indices are allowed, as in
        # an uncoalesced coo tensor: each stored element has its coordinate
        backend_for(t).check_bounds(t)
    return t


def element_coords(t: SparseTensor) -> np.ndarray:
    """``(P, *lead)`` int64: for every stored element of ``t`` (``lead`` = the axes of
    ``t.values()`` before the dense dims) its coordinate in the first ``P = ndim - dense_dim``
    dims (batch and sparse; block items one by one)."""
    if t.is_cuda:  # the rules' host path: a device tensor takes the kernels of _device instead
        raise NotImplementedError(f"reading the coordinates of the stored elements of a {t.layout.name} tensor on "
                                  f"{t.device} (a host pass) has no GPU kernel; run it on the host with t.cpu()")
    _valid(t)
    if isinstance(t, COOTensor):
        return t.indices().astype(np.int64, copy=False)
    m = t.batch_dim
    batch = t.shape[:m]
    B, nnz = math.prod(batch), t.nnz
    rb, cb = t.blocksize
    c = t.compressed_indices().reshape(B, t.compressed_indices().shape[-1]).astype(np.int64)  # (B may be 0)
    n = c.shape[1] - 1
    comp = np.repeat(np.tile(np.arange(n, dtype=np.int64), B), np.diff(c, axis=1).reshape(-1)).reshape(B, nnz)
    plain = t.plain_indices().reshape(B, nnz).astype(np.int64)
    brow, bcol = (comp, plain) if t.layout.compressed_rows else (plain, comp)
    blocked = t.layout.blocked
    lead = batch + (nnz,) + ((rb, cb) if blocked else ())
    out = np.empty((m + 2,) + lead, dtype=np.int64)
    if blocked:
        block = (B, nnz, rb, cb)
        out[m] = np.broadcast_to(brow[:, :, None, None] * rb + np.arange(rb)[:, None], block).reshape(lead)
        out[m + 1] = np.broadcast_to(bcol[:, :, None, None] * cb + np.arange(cb), block).reshape(lead)
    else:
        out[m], out[m + 1] = brow.reshape(lead), bcol.reshape(lead)
    if m:
        flat = np.broadcast_to(np.arange(B).reshape((B,) + (1,) * (len(lead) - m)), (B,) + lead[m:])
        for d, a in enumerate(np.unravel_index(flat, batch)):
            out[d] = a.reshape(lead)
    return out


def gather(g, coords: np.ndarray, dense_shape: tuple, valid=None) -> np.ndarray:
    """The values of cotangent ``g`` at element coordinates ``coords`` (``(P, *lead)``), as an
    array of ``lead + dense_shape`` (``g``'s dense part broadcast to ``dense_shape``).

    ``g`` is a dense array (its first ``P`` dims indexed) or a sparse tensor with ``P``
    batch and sparse dims (read through a sorted key lookup; zero where it specifies
    nothing). ``valid`` (bool, ``lead``) marks the coordinates that exist in ``g``: others
    read zero.
    """
    P, lead = coords.shape[0], coords.shape[1:]
    if _device.on_device(g):
        raise NotImplementedError(f"reading a cotangent on {g.device} at host coordinates (a host pass) has no GPU "
                                  "kernel; run it on the host")
    if valid is not None:
        coords = np.where(valid, coords, 0)
    if isinstance(g, SparseTensor):
        out = _lookup(g, coords.reshape(P, -1)).reshape(lead + g.shape[P:])
    else:
        g = np.asarray(g)
        out = g[tuple(coords)] if P else np.broadcast_to(g, lead + g.shape)
    out = np.broadcast_to(out, lead + tuple(dense_shape))
    if valid is not None:
        out = np.where(valid.reshape(valid.shape + (1,) * len(dense_shape)), out, np.zeros((), out.dtype))
    return np.ascontiguousarray(out)


def _lookup(g: SparseTensor, want: np.ndarray) -> np.ndarray:
    """Values of sparse ``g`` at element coordinates ``want`` (``(P, n)``), zero where absent."""
    coo = g.to_sparse_coo() if isinstance(g, CompressedTensor) else g.coalesce()
    S = coo.sparse_dim
    if S != want.shape[0]:
        raise ValueError(f"a cotangent with {S} sparse dims cannot be read at {want.shape[0]}-d coordinates")
    sparse = coo.shape[:S]
    out = np.zeros((want.shape[1],) + coo.shape[S:], dtype=coo.dtype)
    if want.shape[1] == 0 or coo.nnz == 0:
        return out
    if math.prod(sparse) - 1 > np.iinfo(np.int64).max:
        raise NotImplementedError(f"a sparse cotangent of shape {g.shape} is too large to linearise into int64 keys")
    keys = np.ravel_multi_index(coo.indices(), sparse)
    key = np.ravel_multi_index(want, sparse)
    pos = np.minimum(np.searchsorted(keys, key), keys.shape[0] - 1)
    found = keys[pos] == key
    out[found] = coo.values()[pos[found]]
    return out


def same_pattern(a: SparseTensor, b: SparseTensor) -> bool:
    """Whether ``a`` and ``b`` store their elements at the same indices in the same order."""
    return a.shape == b.shape and a.values().shape == b.values().shape and same_indices(a, b)


def values_of(g, target: SparseTensor) -> np.ndarray:
    """Cotangent ``g`` (sparse, of any pattern, or dense of ``target``'s shape) as values of
    ``target``'s own pattern: read at each stored element of ``target``."""
    if isinstance(g, SparseTensor) and same_pattern(g, target):
        return g.values()
    if target.is_cuda:
        return _device.values_at(g, target)
    return gather(g, element_coords(target), target.shape[target.ndim - target.dense_dim:])


def unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """``g`` summed over the dims that broadcasting added or stretched to reach its shape from ``shape``."""
    if _device.on_device(g):
        return _device.unbroadcast(g, shape)
    g = np.asarray(g)
    shape = tuple(shape)
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    if extra > 0:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


def check_cotangent(g, out, name: str):
    """The output cotangent ``g`` checked against the output ``out``: a sparse ``g`` must have
    ``out``'s layout, shape and pattern; a dense one ``out``'s shape (for a sparse ``out`` it is
    read at ``out``'s pattern). Returns it as values (sparse ``out``) or an array (dense ``out``).
    For an output on a GPU: device arrays, the cotangent on that device (a scalar is taken for a
    0-d output; a sparse one of the same layout, shape and nnz whose index arrays are not
    ``out``'s is read at ``out``'s pattern on the device)."""
    dev = _device.on_device(out)
    if isinstance(out, SparseTensor):
        if isinstance(g, SparseTensor):
            if same_pattern(g, out):
                return g.values()
            if not (dev and _device.comparable(g, out)):
                raise ValueError(f"{name}: the cotangent must have the output's layout, shape and pattern "
                                 f"(a {out.layout.name} tensor of shape {out.shape} with nnz={out.nnz} on "
                                 f"{out.device}), got a {g.layout.name} tensor of shape {g.shape} with nnz={g.nnz} "
                                 f"on {g.device}")
            return _device.values_at(g, out)
        g = _device.dense_cotangent(g, out, name) if dev else np.asarray(g)
        if g.shape != out.shape:
            raise ValueError(f"{name}: a dense cotangent of a sparse output must have its shape {out.shape}, "
                             f"got {g.shape}")
        return values_of(g, out)
    if isinstance(g, SparseTensor):
        raise TypeError(f"{name}: the output is a dense array, so its cotangent must be an array, got a sparse "
                        f"{g.layout.name} tensor")
    g = _device.dense_cotangent(g, out, name) if dev else np.asarray(g)
    if g.shape != np.shape(out):
        raise ValueError(f"{name}: the cotangent has shape {g.shape} but the output has shape {np.shape(out)}")
    return g
