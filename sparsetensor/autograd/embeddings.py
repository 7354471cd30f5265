"""Embedding lookups whose weight gradient is a hybrid COO tensor (rows, dense dim = width).

``embedding(W, idx)`` gathers rows of a dense ``(num, dim)`` weight; ``embedding_bag``
sums (or averages) the rows of each bag. The weight's cotangent touches only the rows
looked up: a COO tensor of ``W``'s shape with ``sparse_dim = 1`` and one dense dim, its
duplicate rows summed by our radix coalesce, the form ``torch.optim.SparseAdam`` and a
sparse ``SGD`` take (PyTorch's ``nn.Embedding(sparse=True)``).
"""

from __future__ import annotations

import numpy as np

from .._core._device import is_device_array
from .._core._tensor import COOTensor
from .rules import _rule

__all__ = ["embedding", "embedding_bag", "bag_ids"]


def _index_array(idx, num: int, name: str) -> np.ndarray:
    a = np.asarray(idx)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: indices must be an integer array, got dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= num):
        bad = a[(a < 0) | (a >= num)].reshape(-1)[0]
        raise IndexError(f"{name}: index {bad} out of range for a weight of {num} rows")
    return a.astype(np.int64, copy=False)


def _check_weight(weight, name: str) -> np.ndarray:
    if is_device_array(weight):  # np.asarray would copy it to the host
        raise NotImplementedError(f"{name} of a weight on a CUDA device has no GPU kernel (nothing is copied to the "
                                  "host); run it on the host")
    w = np.asarray(weight)
    if w.ndim != 2:
        raise ValueError(f"{name}: the weight must be a 2-d (num_embeddings, embedding_dim) array, got shape {w.shape}")
    return w


def _row_gradient(rows: np.ndarray, values: np.ndarray, shape: tuple) -> COOTensor:
    """A coalesced hybrid COO tensor of ``shape`` with ``values[k]`` added at row ``rows[k]``."""
    t = COOTensor(rows.reshape(1, -1), np.ascontiguousarray(values), shape, False, checked=True)
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
    return np.take(w, _index_array(idx, w.shape[0], "embedding"), axis=0)


def bag_ids(idx, offsets, n: int) -> tuple:
    """(flat indices, bag of each index, number of bags) for ``idx`` 2-d (one bag per row) or
    1-d with ``offsets`` (bag ``b`` starts at ``offsets[b]``; PyTorch's ``EmbeddingBag`` form)."""
    idx = np.asarray(idx)
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
    bags = np.zeros(idx.shape[0], np.int64)
    if off.size > 1:
        np.add.at(bags, off[1:][off[1:] < idx.shape[0]], 1)
    return idx, np.cumsum(bags), off.shape[0]


def _bag_reduce(w, flat, bag, nb, mode, psw):
    rows = np.take(w, flat, axis=0)
    if psw is not None:
        rows = rows * np.asarray(psw).reshape(-1, 1)
    out = np.zeros((nb, w.shape[1]), np.result_type(rows.dtype, w.dtype))
    np.add.at(out, bag, rows)
    counts = np.bincount(bag, minlength=nb)
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
    flat, bag, nb = bag_ids(_index_array(idx, w.shape[0], "embedding_bag"), offsets, w.shape[0])
    if psw is not None and np.shape(psw) != np.shape(idx):
        raise ValueError(f"embedding_bag: per_sample_weights must have the shape of the indices {np.shape(idx)}, "
                         f"got {np.shape(psw)}")
    out, counts = _bag_reduce(w, flat, bag, nb, mode, psw)
    return out, flat, bag, counts


@_rule("embedding")
def _embedding_rule(weight, idx):
    w = _check_weight(weight, "embedding")
    rows = _index_array(idx, w.shape[0], "embedding")
    out = np.take(w, rows, axis=0)
    return out, lambda G: (_row_gradient(rows.reshape(-1), np.asarray(G).reshape(-1, w.shape[1]), w.shape), None)


@_rule("embedding_bag")
def _embedding_bag_rule(weight, idx, offsets=None, mode="sum", per_sample_weights=None):
    out, flat, bag, counts = _embedding_bag(weight, idx, offsets, mode, per_sample_weights)
    w = np.asarray(weight)

    def back(G):
        G = np.asarray(G)
        rows = np.take(G, bag, axis=0)
        if mode == "mean":
            rows = rows / np.maximum(counts, 1)[bag][:, None]
        gpsw = None
        if per_sample_weights is not None:
            gpsw = np.einsum("kd,kd->k", rows, np.take(w, flat, axis=0)).reshape(np.shape(idx))
            rows = rows * np.asarray(per_sample_weights).reshape(-1, 1)
        return _row_gradient(flat, rows, w.shape), None, None, None, gpsw

    return out, back
