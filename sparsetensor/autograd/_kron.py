"""The derivative rule of ``kron`` (:func:`sparsetensor.ops.blocks.kron`), on the host and a device.

``kron(a, b)`` holds ``a[i] * b[j]`` for every pair of stored elements. The cotangent of element
``i`` of ``a`` is the sum over ``j`` of ``G(pair) * conj(b[j])``, and ``b``'s likewise. Which pair
each element of the result holds is found by the op itself, run on the operands' patterns
numbered element by element (as :func:`sparsetensor.autograd.rules._by_entry` numbers copies):
one mechanism for every layout. The cotangent is read by coordinate, except where the result is
uncoalesced and ``G`` has its pattern: then each pair owns its element (the operands numbered in
their own forms, so that the op converts them as it converted the operands).

An array operand enters as a COO tensor of every element, its zeros stored: outside ``vjp`` the
op stores an array's nonzeros only, but a zero of the array still moves the result, and its
pairs must be in the result's pattern for a (masked) cotangent to reach it. The result's values
are the same; it is put in the layout the op gives outside ``vjp``.
"""

from __future__ import annotations

import numpy as np

from .._backend import backend_for
from .._core import _layout as L
from .._core._tensor import COOTensor, SparseTensor
from ..ops import blocks
from . import _device
from ._core import conj, element_coords, gather, same_pattern
from .rules import _rule

__all__: list = []


def _operand(x):
    """``x`` as the rule computes with it: a sparse tensor as it is, an array (host or device) as the
    COO tensor of every element (C order, zeros stored), on the array's device."""
    if isinstance(x, SparseTensor):
        return x
    if _device.on_device(x):
        from ..cuda import _primitives as P

        x = _device._array(x)
        return COOTensor(P.grid_coords(x._device, x.shape), x.reshape(x.size), tuple(x.shape), True, True)
    a = np.asarray(x)
    return COOTensor(np.indices(a.shape).reshape(a.ndim, a.size), a.reshape(-1), a.shape, True, True)


def _elements(t: SparseTensor, n: int) -> tuple:
    """``(coords (n, N), values (N,), shape)`` of every stored element of ``t``, in the order of its
    values, padded to ``n`` dims as ``kron`` pads."""
    coords, values = element_coords(t).reshape(t.ndim, -1), t.values().reshape(-1)
    pad = n - t.ndim
    coords = np.concatenate([np.zeros((pad, coords.shape[1]), np.int64), coords.astype(np.int64)])
    return coords, values, (1,) * pad + tuple(t.shape)


def _sum_into(n: int, at: np.ndarray, w: np.ndarray) -> np.ndarray:
    out = np.zeros(n, w.dtype)
    np.add.at(out, at, w)
    return out


def _numbered(t: SparseTensor, ones: bool) -> SparseTensor:
    """``t`` with its stored elements numbered 1, 2, ... in the order of its values (all 1 with
    ``ones``), in its own form, so that ``kron`` converts it as it converts ``t``."""
    n = t.values().size
    return t._replace_values((np.ones(n, np.int64) if ones else np.arange(1, n + 1)).reshape(t.values().shape))


def _by_pair(G, out, sa: SparseTensor, sb: SparseTensor) -> bool:
    """Whether each pair owns its element of ``out``: an uncoalesced result whose cotangent has its
    pattern, made without promoting an operand (a promoted uncoalesced operand is merged first)."""
    return (isinstance(out, COOTensor) and not out.is_coalesced() and sa.dtype == sb.dtype
            and same_pattern(G, out))


@_rule("kron")
def _kron(a, b):
    sa, sb = _operand(a), _operand(b)
    out = blocks.kron(sa, sb)
    like = a if isinstance(a, SparseTensor) else b
    out = blocks._in_layout(out, like)  # the layout the op gives outside vjp

    def back(G):
        if sa.is_cuda:
            return tuple(gx if isinstance(x, SparseTensor) else gx.reshape(tuple(x.shape))
                         for gx, x in zip(_device_back(G, out, sa, sb), (a, b)))
        if _by_pair(G, out, sa, sb):
            # each pair of an uncoalesced operand owns its element: the pairs in out's own order
            g = G.values()
            pa = blocks.kron(_numbered(sa, False), _numbered(sb, True)).values() - 1
            pb = blocks.kron(_numbered(sa, True), _numbered(sb, False)).values() - 1
            va, vb = (x.values().reshape(-1) for x in (sa, sb))
        else:
            n = max(sa.ndim, sb.ndim)
            (ca, va, shape_a), (cb, vb, shape_b) = _elements(sa, n), _elements(sb, n)
            # the pair each element of the result holds: kron of the patterns numbered 0, 1, ...
            # and 1 (flagged uncoalesced, so that nothing is sorted or summed: one order in both)
            ones_a, ones_b = (np.ones(c.shape[1], np.int64) for c in (ca, cb))
            num_a, num_b = (COOTensor(c, np.arange(c.shape[1]), s, False, True)
                            for c, s in ((ca, shape_a), (cb, shape_b)))
            first = blocks.kron(num_a, COOTensor(cb, ones_b, shape_b, False, True))
            pa = first.values()
            pb = blocks.kron(COOTensor(ca, ones_a, shape_a, False, True), num_b).values()
            g = gather(G, first.indices(), ())
        ga = _sum_into(va.size, pa, g * conj(vb)[pb])
        gb = _sum_into(vb.size, pb, g * conj(va)[pa])
        return tuple(gx.reshape(x.values().shape if isinstance(x, SparseTensor) else np.shape(x))
                     for gx, x in ((ga, a), (gb, b)))

    return out, back


def _device_back(G, out, sa: SparseTensor, sb: SparseTensor) -> tuple:
    """``back`` on a device, by the ops alone: the op on the operands numbered 0, 1, ... (and on
    ones) gives each element of the result its pair; the op on ones and the other operand's
    conjugate gives the factor each pair's cotangent takes; a COO tensor of the products indexed by
    the pair's element, coalesced, sums them."""
    own = same = _by_pair(G, out, sa, sb)

    def shaped(t, v):
        t = t._replace_values(v.reshape(t.values().shape))
        return t if own else t.to_sparse(L.sparse_coo)  # (coordinates decide: no blocked padding)

    def numbered(t):
        return shaped(t, _device.entry_numbers(t.values().size, t))

    def ones(t, dtype):
        return shaped(t, _device.entry_numbers(t.values().size, t, 1, 0).astype(dtype))

    def conjugated(t):
        return shaped(t, conj(t.values()))

    pairs = [blocks.kron(numbered(sa), ones(sb, np.int64)), blocks.kron(ones(sa, np.int64), numbered(sb))]
    g = G.values() if same else _device.values_at(G, pairs[0])
    grads = []
    for k, (t, other) in enumerate(((sa, sb), (sb, sa))):
        dt = np.result_type(g.dtype, other.dtype)
        # ones in the other's dtype: no promotion, so nothing merged, one order with the pairs
        factors = (blocks.kron(ones(sa, sb.dtype), conjugated(sb)) if k == 0 else
                   blocks.kron(conjugated(sa), ones(sb, sa.dtype))).values()
        w = backend_for(sa).elementwise(_device.cast(g, dt), _device.cast(factors, dt), "mul")
        n = t.values().size
        sums = COOTensor(pairs[k].values().reshape(1, w.size), w, (n,), False, True).coalesce().to_dense()
        grads.append(sums.reshape(t.values().shape))
    return tuple(grads)
