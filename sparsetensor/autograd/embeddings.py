"""Embedding lookups whose weight gradient is a hybrid COO tensor (rows, dense dim = width).

``embedding(W, idx)`` gathers rows of a dense ``(num, dim)`` weight; ``embedding_bag``
sums (or averages) the rows of each bag. The weight's cotangent touches only the rows
looked up: a COO tensor of ``W``'s shape with ``sparse_dim = 1`` and one dense dim, its
duplicate rows summed by our radix coalesce, the form ``torch.optim.SparseAdam`` and a
sparse ``SGD`` take (PyTorch's ``nn.Embedding(sparse=True)``).
"""

from __future__ import annotations

import numpy as np

from .._backend import device_of
from .._core._device import device_array, is_device_array
from .._core._tensor import COOTensor
from .rules import _rule

__all__ = ["embedding", "embedding_bag", "bag_ids"]


def _index_array(idx, num: int, name: str, weight=None):
    """The indices as int64 (host or device), every one in [0, num) (IndexError naming one that is
    not; a device index is checked on its device). A host index with a device ``weight`` goes to
    the weight's device."""
    if is_device_array(idx):
        if not is_device_array(weight):
            raise ValueError(f"{name}: the indices are on {device_of(idx)} and the weight on the host; move one")
        a = device_array(idx)
        if a.dtype.kind not in "iu":
            raise TypeError(f"{name}: indices must be an integer array, got dtype {a.dtype}")
        from .._backend.cuda._select import index_extrema

        lo, hi, _ = index_extrema(a.reshape(-1))
        if lo is not None and (lo < 0 or hi >= num):
            raise IndexError(f"{name}: index {lo if lo < 0 else hi} out of range for a weight of {num} rows")
        return a.astype(np.int64, copy=False)
    a = np.asarray(idx)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: indices must be an integer array, got dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= num):
        bad = a[(a < 0) | (a >= num)].reshape(-1)[0]
        raise IndexError(f"{name}: index {bad} out of range for a weight of {num} rows")
    a = a.astype(np.int64, copy=False)
    return _on_device_of(weight, a) if is_device_array(weight) else a


def _on_device_of(weight, a: np.ndarray):
    from ..cuda._array import DeviceArray

    return DeviceArray.from_host(np.ascontiguousarray(a), device_array(weight)._device)


def _check_weight(weight, name: str):
    """The weight as a 2-d NumPy array, or as a device array for a weight on a GPU (the lookups
    and the gradient then run there: nothing is copied to the host)."""
    w = device_array(weight) if is_device_array(weight) else np.asarray(weight)
    if w.ndim != 2:
        raise ValueError(f"{name}: the weight must be a 2-d (num_embeddings, embedding_dim) array, got shape {w.shape}")
    return w


def _take_rows(w, rows):
    """``w[rows]`` for 1-d ``rows`` (a gather on the weight's device)."""
    if isinstance(w, np.ndarray):
        return np.take(w, rows, axis=0)
    from .._backend.cuda._select import take_axis

    return take_axis(w, 0, rows)


def _row_scaled(rows, scale, device_like, op: str = "mul"):
    """``rows * scale[:, None]`` (``op="div"``: ``/``; ``scale`` one number a row, host or on the
    rows' device)."""
    if isinstance(rows, np.ndarray):
        s = np.asarray(scale).reshape(-1, 1)
        return rows * s if op == "mul" else rows / s
    from .._backend import backend_for
    from .._backend.cuda._select import repeat_axis

    s = scale if is_device_array(scale) else _on_device_of(device_like, np.asarray(scale, rows.dtype))
    wide = repeat_axis(device_array(s).astype(rows.dtype, copy=False).reshape(-1, 1), 1, rows.shape[1])
    return backend_for(rows).elementwise(rows, wide, op)


def _row_gradient(rows, values, shape: tuple) -> COOTensor:
    """A coalesced hybrid COO tensor of ``shape`` with ``values[k]`` added at row ``rows[k]`` (on
    the device of ``values`` where that is a GPU)."""
    if isinstance(values, np.ndarray):
        values = np.ascontiguousarray(values)
    t = COOTensor(rows.reshape(1, -1), values, shape, False, checked=True)
    return t.coalesce()


def embedding(weight, idx):
    """Rows ``weight[idx]`` (shape ``idx.shape + (dim,)``).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsetensor.autograd import vjp
    >>> from sparsetensor.autograd.embeddings import embedding
    >>> W = np.arange(6.0).reshape(3, 2)
    >>> out, pullback = vjp(embedding, W, np.array([2, 0, 2]))
    >>> gW = pullback(np.ones((3, 2)))[0]
    >>> gW.indices(), gW.values()
    (array([[0, 2]]), array([[1., 1.],
           [2., 2.]]))
    """
    w = _check_weight(weight, "embedding")
    rows = _index_array(idx, w.shape[0], "embedding", w)
    return _take_rows(w, rows.reshape(-1)).reshape(tuple(rows.shape) + (w.shape[1],))


def bag_ids(idx, offsets, n: int) -> tuple:
    """(flat indices, bag of each index, number of bags) for ``idx`` 2-d (one bag per row) or
    1-d with ``offsets`` (bag ``b`` starts at ``offsets[b]``; PyTorch's ``EmbeddingBag`` form)."""
    idx = idx if is_device_array(idx) else np.asarray(idx)  # only its shape is read here
    if is_device_array(offsets):
        if idx.ndim != 1:
            raise ValueError(f"embedding_bag: with offsets the indices must be 1-d, got shape {idx.shape}")
        return (idx,) + _device_bags(device_array(offsets), idx.shape[0])
    if offsets is None:
        if idx.ndim != 2:
            raise ValueError(f"embedding_bag: without offsets the indices must be 2-d (bags, per bag), got shape "
                             f"{idx.shape}")
        nb = idx.shape[0]
        return idx.reshape(-1), np.repeat(np.arange(nb), idx.shape[1]), nb
    off = np.asarray(offsets).astype(np.int64).reshape(-1)
    if idx.ndim != 1:
        raise ValueError(f"embedding_bag: with offsets the indices must be 1-d, got shape {idx.shape}")
    if off.size and (off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] > idx.shape[0]):
        raise ValueError("embedding_bag: offsets must start at 0, be non-decreasing and not exceed len(indices)")
    _no_bag_for(off.size, idx.shape[0])
    bags = np.zeros(idx.shape[0], np.int64)
    if off.size > 1:
        np.add.at(bags, off[1:][off[1:] < idx.shape[0]], 1)
    return idx, np.cumsum(bags), off.shape[0]


def _no_bag_for(nb: int, n: int) -> None:
    if nb == 0 and n:
        raise ValueError(f"embedding_bag: offsets is empty (no bag), but there are {n} indices to put in bags")


def _device_bags(off, n: int) -> tuple:
    """``(bag of each of n indices, number of bags)`` from device offsets, on their device: a 1 at
    each bag start after the first, summed up to each index (an exclusive scan). The checks of the
    host form by three numbers read back: the least offset (0), the largest (<= n), the least step
    (>= 0)."""
    from .._backend.cuda._select import index_extrema
    from ..cuda import _primitives as P

    off = off.astype(np.int64, copy=False).reshape(-1)
    nb = off.shape[0]
    lo, hi, step = index_extrema(off)
    if nb and (lo != 0 or hi > n or (step is not None and step < 0)):
        raise ValueError("embedding_bag: offsets must start at 0, be non-decreasing and not exceed len(indices)")
    _no_bag_for(nb, n)
    dev = off._device
    starts = COOTensor(off[1:].reshape(1, -1), P.arange(dev, max(nb - 1, 0), 1, 0), (n + 1,), False,
                       checked=True)
    return P.exclusive_scan(dev, starts.to_dense())[1:n + 1], nb


def _bag_counts(bag, nb: int, w):
    """Indices in each bag (host, or on the weight's device for a device ``bag``)."""
    if isinstance(bag, np.ndarray):
        return np.bincount(bag, minlength=nb)
    from ..cuda import _primitives as P

    ones = P.arange(device_array(w)._device, bag.shape[0], 1, 0)
    return COOTensor(bag.reshape(1, -1), ones, (nb,), False, checked=True).to_dense()


def _per_index_count(counts, bag, dtype):
    """The size of each index's bag (never 0: an empty bag has no index), in ``dtype``."""
    if isinstance(counts, np.ndarray) and isinstance(bag, np.ndarray):
        return np.maximum(counts, 1)[bag].astype(dtype)
    from .._backend.cuda._select import take_axis

    return take_axis(counts.astype(dtype), 0, bag)


def _bag_reduce(w, flat, bag, nb, mode, psw):
    rows = _take_rows(w, flat)
    if not isinstance(w, np.ndarray):  # on the device: each row scaled, then summed by bag (a coo to_dense)
        counts = _bag_counts(bag, nb, w)
        if psw is not None:  # in the dtype NumPy promotes the two to, as on the host
            rows = _row_scaled(rows.astype(np.result_type(rows.dtype, psw.dtype), copy=False), psw.reshape(-1), w)
        elif mode == "mean":
            rows = _row_scaled(rows, _per_index_count(counts, bag, rows.dtype), w, "div")
        bags = COOTensor(bag.reshape(1, -1), rows, (nb, w.shape[1]), False, checked=True)
        return bags.to_dense(), counts
    counts = np.bincount(bag, minlength=nb)
    if psw is not None:
        rows = rows * np.asarray(psw).reshape(-1, 1)
    out = np.zeros((nb, w.shape[1]), np.result_type(rows.dtype, w.dtype))
    np.add.at(out, bag, rows)
    if mode == "mean":
        out /= np.maximum(counts, 1)[:, None]
    return out, counts


def embedding_bag(weight, idx, offsets=None, mode: str = "sum", per_sample_weights=None):
    """The sum (``mode="sum"``) or mean (``"mean"``) of the rows of each bag: ``(bags, dim)``.

    ``idx`` is 2-d (one bag per row) or 1-d with ``offsets``; ``per_sample_weights`` (same
    shape as ``idx``, ``mode="sum"`` only) scales each row. An empty bag gives zeros.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsetensor.autograd.embeddings import embedding_bag
    >>> embedding_bag(np.eye(3), np.array([0, 2, 1]), np.array([0, 2]), mode="mean")
    array([[0.5, 0. , 0.5],
           [0. , 1. , 0. ]])
    """
    return _embedding_bag(weight, idx, offsets, mode, per_sample_weights)[0]


def _embedding_bag(weight, idx, offsets, mode, psw):
    w = _check_weight(weight, "embedding_bag")
    if mode not in ("sum", "mean"):
        raise ValueError(f"embedding_bag: mode must be 'sum' or 'mean', got {mode!r}")
    if psw is not None and mode != "sum":
        raise ValueError("embedding_bag: per_sample_weights need mode='sum' (as in PyTorch)")
    if is_device_array(offsets) and isinstance(w, np.ndarray):
        raise ValueError(f"embedding_bag: the offsets are on {device_of(offsets)} and the weight on the host; move one")
    flat, bag, nb = bag_ids(_index_array(idx, w.shape[0], "embedding_bag", w), offsets, w.shape[0])
    if not isinstance(w, np.ndarray) and isinstance(bag, np.ndarray):  # host offsets: the bags go over once
        bag = _on_device_of(w, bag)
    if psw is not None and np.shape(psw) != np.shape(idx):
        raise ValueError(f"embedding_bag: per_sample_weights must have the shape of the indices {np.shape(idx)}, "
                         f"got {np.shape(psw)}")
    out, counts = _bag_reduce(w, flat, bag, nb, mode, psw)
    return out, flat, bag, counts, w


@_rule("embedding")
def _embedding_rule(weight, idx):
    w = _check_weight(weight, "embedding")
    rows = _index_array(idx, w.shape[0], "embedding", w).reshape(-1)
    out = _take_rows(w, rows).reshape(tuple(np.shape(idx)) + (w.shape[1],))
    return out, lambda G: (_row_gradient(rows, _cotangent(G, w).reshape(rows.shape[0], w.shape[1]), w.shape), None)


def _cotangent(G, w):
    """Output cotangent ``G`` on the weight's device (a host one for a device weight: TypeError)."""
    if isinstance(w, np.ndarray):
        return np.asarray(G)
    if not is_device_array(G):
        raise TypeError(f"the weight is on {device_of(w)}, so the output's cotangent must be a device array there, "
                        f"got {type(G).__name__}")
    return device_array(G)


def _row_dots(a, b):
    """``sum(a * b, axis=1)`` of two (n, d) arrays (on their device)."""
    if isinstance(a, np.ndarray):
        return np.einsum("kd,kd->k", a, b)
    from .._backend import backend_for
    from ._device import kernels

    return kernels().sum_leading(backend_for(a).elementwise(a, b.astype(a.dtype, copy=False), "mul").swapaxes(0, 1), 1)


@_rule("embedding_bag")
def _embedding_bag_rule(weight, idx, offsets=None, mode="sum", per_sample_weights=None):
    out, flat, bag, counts, w = _embedding_bag(weight, idx, offsets, mode, per_sample_weights)
    psw = per_sample_weights

    def back(G):
        G = _cotangent(G, w)
        rows = _take_rows(G, bag)
        if mode == "mean":
            rows = _row_scaled(rows, _per_index_count(counts, bag, rows.dtype), w, "div")
        gpsw = None
        if psw is not None:
            gpsw = _row_dots(rows, _take_rows(w, flat)).reshape(np.shape(idx))
            rows = _row_scaled(rows, psw.reshape(-1) if is_device_array(psw) else np.asarray(psw), w)
        return _row_gradient(flat, rows, w.shape), None, None, None, gpsw

    return out, back
