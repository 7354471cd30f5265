"""The derivative rule of ``kron`` (:func:`sparsetensor.ops.blocks.kron`), on the host.

``kron(a, b)`` holds ``a[i] * b[j]`` for every pair of stored elements (an array operand: every
element). The cotangent of element ``i`` of ``a`` is the sum over ``j`` of
``G(pair) * conj(b[j])``, and ``b``'s likewise. Which pair each element of the result holds is
found by the op itself, run on the operands' patterns numbered element by element (as
:func:`sparsetensor.autograd.rules._by_entry` numbers copies): one mechanism for every layout.
The cotangent is read by coordinate, except where the result is uncoalesced and ``G`` has its
pattern: then each pair owns its element (the operands numbered in their own forms, so that the
op converts them as it converted the operands). An array operand is stored by its nonzeros, so
the result holds no pair of one of its zeros and a masked cotangent gives that zero 0 (as the
other products' dense operands, whose cotangent is read where the result stores elements).
"""

from __future__ import annotations

import numpy as np

from .._core._tensor import COOTensor, SparseTensor
from ..ops import blocks
from ._core import conj, element_coords, gather, same_pattern
from .rules import _rule

__all__: list = []


def _elements(x, n: int) -> tuple:
    """``(coords (n, N), values (N,), shape)`` of every stored element of ``x`` (every element of an
    array), in the order of ``x.values()`` (of the array), padded to ``n`` dims as ``kron`` pads."""
    if isinstance(x, SparseTensor):
        if x.is_cuda:
            raise NotImplementedError(f"vjp of kron of a {x.layout.name} tensor on {x.device}: its derivative runs "
                                      "on the host only; differentiate the host tensors (t.cpu())")
        coords, values, shape = element_coords(x).reshape(x.ndim, -1), x.values().reshape(-1), x.shape
    else:
        a = np.asarray(x)
        coords, values, shape = np.indices(a.shape).reshape(a.ndim, -1), a.reshape(-1), a.shape
    pad = n - len(shape)
    coords = np.concatenate([np.zeros((pad, coords.shape[1]), np.int64), coords.astype(np.int64)])
    return coords, values, (1,) * pad + tuple(shape)


def _sum_into(n: int, at: np.ndarray, w: np.ndarray) -> np.ndarray:
    out = np.zeros(n, w.dtype)
    np.add.at(out, at, w)
    return out


def _numbered(x, ones: bool):
    """``x`` with its stored elements numbered 1, 2, ... in the order of its values (all 1 with
    ``ones``), in its own form, so that ``kron`` converts it as it converts ``x``; an array keeps
    its zeros (``kron`` stores its nonzeros)."""
    if isinstance(x, SparseTensor):
        n = x.values().size
        return x._replace_values((np.ones(n, np.int64) if ones else np.arange(1, n + 1)).reshape(x.values().shape))
    a = np.asarray(x)
    return np.where(a != 0, 1 if ones else np.arange(1, a.size + 1).reshape(a.shape), 0)


@_rule("kron")
def _kron(a, b):
    out = blocks.kron(a, b)

    def back(G):
        if isinstance(out, COOTensor) and not out.is_coalesced() and same_pattern(G, out):
            # each pair of an uncoalesced operand owns its element: the pairs in out's own order
            g = G.values()
            pa = blocks.kron(_numbered(a, False), _numbered(b, True)).values() - 1
            pb = blocks.kron(_numbered(a, True), _numbered(b, False)).values() - 1
            va, vb = (np.asarray(x.values() if isinstance(x, SparseTensor) else x).reshape(-1) for x in (a, b))
        else:
            n = max(x.ndim if isinstance(x, SparseTensor) else np.ndim(x) for x in (a, b))
            (ca, va, sa), (cb, vb, sb) = _elements(a, n), _elements(b, n)
            # the pair each element of the result holds: kron of the patterns numbered 0, 1, ...
            # and 1 (flagged uncoalesced, so that nothing is sorted or summed: one order in both)
            ones_a, ones_b = (np.ones(c.shape[1], np.int64) for c in (ca, cb))
            num_a, num_b = (COOTensor(c, np.arange(c.shape[1]), s, False, True) for c, s in ((ca, sa), (cb, sb)))
            first = blocks.kron(num_a, COOTensor(cb, ones_b, sb, False, True))
            pa = first.values()
            pb = blocks.kron(COOTensor(ca, ones_a, sa, False, True), num_b).values()
            g = gather(G, first.indices(), ())
        ga = _sum_into(va.size, pa, g * conj(vb)[pb])
        gb = _sum_into(vb.size, pb, g * conj(va)[pa])
        return tuple(gx.reshape(x.values().shape if isinstance(x, SparseTensor) else np.shape(x))
                     for gx, x in ((ga, a), (gb, b)))

    return out, back
