"""The masked gradient of a sparse @ sparse product, computed only at the operands' patterns.

For ``C = A @ B`` (:func:`sparsetensor.ops.spgemm.spgemm`) with output cotangent ``G`` (of
``C``'s pattern), the cotangents of the operands' values are

- ``gA[i, k] = sum_j G[i, j] * conj(B[k, j])`` at every stored element ``(i, k)`` of ``A``,
- ``gB[k, j] = sum_i conj(A[i, k]) * G[i, j]`` at every stored element ``(k, j)`` of ``B``.

Both sums run over the same pairs: a stored element ``(i, k)`` of ``A`` and a stored element
``(k, j)`` of ``B`` (the multiplications of the forward product, whose output ``(i, j)`` is in
``C``'s pattern). So instead of the full products ``G @ B^H`` and ``A^H @ G`` (which hold
entries far outside the operands' patterns, then sampled), the pairs are enumerated once, in
chunks, ``G`` is read at each pair's ``(i, j)`` and the products are summed into the two
gradients: the work of the forward product, and memory bounded by the chunk.

Works on the coordinates of the stored elements (block items one by one, batch dims
linearised), so every layout spgemm takes (csr, csc, coo, bsr, bsc, with batch dims) and
uncoalesced operands (each stored duplicate gets its own entry) go through one path.
"""

from __future__ import annotations

import math

import numpy as np

from .._core._tensor import COOTensor, SparseTensor
from ._core import element_coords

__all__ = ["spgemm_grads"]

_PAIRS = 1 << 21  # (A element, B element) pairs per chunk: bounds the temporaries


def _flat(t: SparseTensor, m: int, batch: tuple):
    """(linear batch index, row, col, values) of every stored item of ``t`` (storage order)."""
    c = element_coords(t).reshape(m + 2, -1)
    b = np.ravel_multi_index(tuple(c[:m]), batch) if m else np.zeros(c.shape[1], np.int64)
    return b, c[m], c[m + 1], np.asarray(t.values()).reshape(-1)


def _keys(b, r, c, rows: int, cols: int) -> np.ndarray:
    return (b * rows + r) * cols + c


def _sorted_cotangent(G, m: int, batch: tuple, M: int, N: int):
    """(sorted int64 keys, values) of the output cotangent ``G`` (sparse; duplicates summed)."""
    if isinstance(G, COOTensor) and not G.is_coalesced():
        G = G.coalesce()
    gb, gi, gj, gv = _flat(G, m, batch)
    keys = _keys(gb, gi, gj, M, N)
    order = np.argsort(keys, kind="stable")
    keys, gv = keys[order], gv[order]
    if keys.size > 1 and (keys[1:] == keys[:-1]).any():  # a compressed G with duplicate entries
        keys, first = np.unique(keys, return_index=True)
        gv = np.add.reduceat(gv, first)
    return keys, gv


def _scatter(index: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """``out[index[p]] += w[p]`` over length ``n`` (bincount; complex by parts)."""
    if w.dtype.kind == "c":
        return np.bincount(index, w.real, n) + 1j * np.bincount(index, w.imag, n)
    return np.bincount(index, w, n)


def spgemm_grads(a: SparseTensor, b: SparseTensor, G) -> tuple:
    """Cotangents of the values of ``a`` and ``b`` (arrays of their values' shapes) for
    ``a @ b`` (spgemm) with the output cotangent ``G``: a sparse tensor of the product's
    pattern, or a dense array of its shape. Only the entries of the patterns are computed."""
    m = a.ndim - 2
    batch = a.shape[:m]
    M, K = a.shape[m], a.shape[m + 1]
    N = b.shape[m + 1]
    if max(math.prod(batch) * M * N, math.prod(batch) * K) > np.iinfo(np.int64).max:
        raise NotImplementedError(f"the gradient of a product of shape {batch + (M, N)} is too large to linearise "
                                  "into int64 keys")
    ab, ai, ak, av = _flat(a, m, batch)
    bb, bk, bj, bv = _flat(b, m, batch)
    rt = np.result_type(a.dtype, b.dtype, G.dtype)
    if isinstance(G, SparseTensor):
        gkeys, gv = _sorted_cotangent(G, m, batch, M, N)

        def read(keys):
            if gkeys.size == 0:
                return np.zeros(keys.shape, rt)
            pos = np.minimum(np.searchsorted(gkeys, keys), gkeys.size - 1)
            return np.where(gkeys[pos] == keys, gv[pos], 0)
    else:
        G = np.asarray(G)
        if G.shape != batch + (M, N):
            raise ValueError(f"a dense cotangent of shape {G.shape} for a product of shape {batch + (M, N)}")
        flatG = G.reshape(-1)

        def read(keys):
            return flatG[keys]

    # B's items grouped by (batch, k): each A item (batch, i, k) pairs with one run of them
    border = np.argsort(bb * K + bk, kind="stable")
    bkey = (bb * K + bk)[border]
    akey = ab * K + ak
    lo = np.searchsorted(bkey, akey, "left")
    cnt = np.searchsorted(bkey, akey, "right") - lo
    ends = np.cumsum(cnt)
    ga = np.zeros(av.shape[0], rt)
    gb = np.zeros(bv.shape[0], rt)
    conj_a = np.conj(av) if av.dtype.kind == "c" else av
    conj_b = np.conj(bv) if bv.dtype.kind == "c" else bv
    start = 0
    while start < av.shape[0]:
        # A items [start, stop): at most _PAIRS pairs (at least one item, however long its run)
        base = ends[start - 1] if start else 0
        stop = max(int(np.searchsorted(ends, base + _PAIRS, "right")), start + 1)
        n = cnt[start:stop]
        ea = np.repeat(np.arange(start, stop), n)
        offsets = np.arange(ea.shape[0]) - np.repeat(np.cumsum(n) - n, n)
        eb = border[np.repeat(lo[start:stop], n) + offsets]
        g = read(_keys(ab[ea], ai[ea], bj[eb], M, N))
        ga[start:stop] += _scatter(ea - start, g * conj_b[eb], stop - start)
        gb += _scatter(eb, conj_a[ea] * g, bv.shape[0])
        start = stop
    return ga.reshape(a.values().shape), gb.reshape(b.values().shape)
