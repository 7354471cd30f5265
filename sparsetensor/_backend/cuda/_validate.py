"""Invariant checking on the device, reported exactly as the CPU reports it.

The kernels of ``kernels/validate.cu`` fold every violation into one encoded key
(atomicMin), so the first violation in the CPU's order wins; a one-thread kernel
decodes it and the host raises the same :class:`~sparsetensor.InvariantError`
(same invariant number, batch, row and position, same message) through the CPU's
``raise_*`` helpers. One synchronisation per check: reading the 6-int report.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict

import numpy as np

from ..._core import _layout as L
from ..._core._validate import raise_compressed_error, raise_coo_error
from ...cuda import _primitives as P
from ...cuda._classes import CudaCOOTensor, CudaCompressedTensor

__all__ = ["check_tensor", "check_compressed", "check_compressed_bounds", "check_coo", "check_coo_bounds", "compressed_report", "coo_report",
           "CODES", "Snapshot", "keep_snapshot", "snapshot"]

# report codes of validate.cu
CODES = {1: "5.1", 2: "5.2", 3: "5.3", 4: "5.4", 5: "5.5", 6: "5.6", 7: "C4", 8: "C5", 9: "C6"}
_KEY_NONE = 0xFF  # every byte of the key: all ones


def _key(dev):
    key = P.empty(dev, (1,), np.uint64)
    dev.memset8(key._ptr, _KEY_NONE, 8)
    return key


class Snapshot:
    """A copy of index arrays that another library holds (it may write them between two of our
    ops), what an op derived from them (``derived``: their transpose), and the arrays whose check
    last found them equal to the copy (``confirmed``: weak references to the DeviceArrays). Every
    op checks such arrays again, and the check's one read of the device also says whether what
    was derived from them is still theirs."""

    __slots__ = ("comp", "plain", "derived", "confirmed", "nbytes")

    def __init__(self, c, p, derived):
        self.comp, self.plain, self.derived, self.confirmed = c.copy(), p.copy(), derived, None
        self.nbytes = _held_bytes(c, p, derived)

    def confirms(self, c, p) -> bool:
        """Whether the last check of arrays ``c``, ``p`` found them equal to the copy."""
        return self.confirmed is not None and self.confirmed[0]() is c and self.confirmed[1]() is p


# (device, pointers, shapes and dtype of the index arrays, plain size) -> a Snapshot, or None for
# arrays seen once; the newest few only, and no more device memory than _SNAPSHOT_BYTES in all
# (each holds a copy of the arrays beside what was derived from them)
_snapshots: OrderedDict = OrderedDict()
_SNAPSHOTS = 4
_SNAPSHOT_BYTES = 2 << 30


def _held_bytes(c, p, derived) -> int:
    return 2 * (c.nbytes + p.nbytes) + sum(a.nbytes for a in derived)


def _snapshot_key(t) -> tuple:
    """What the transpose of ``t``'s index arrays depends on (a csr matrix and its csc view, the
    same arrays, have one)."""
    c, p = t.compressed_indices(), t.plain_indices()
    return c._device, c._ptr, p._ptr, c.shape, p.shape, c.dtype, t.plain_size


def _remember(key, value) -> None:
    _snapshots[key] = value
    _snapshots.move_to_end(key)
    while len(_snapshots) > _SNAPSHOTS or sum(s.nbytes for s in _snapshots.values() if s) > _SNAPSHOT_BYTES:
        _snapshots.popitem(last=False)


def snapshot(t):
    """The :class:`Snapshot` kept of shared tensor ``t``'s index arrays; None where they were
    seen before without one; False the first time (now they are seen)."""
    key = _snapshot_key(t)
    if key not in _snapshots:
        _remember(key, None)
        return False
    _snapshots.move_to_end(key)
    return _snapshots[key]


def keep_snapshot(t, derived) -> None:
    """Keep a :class:`Snapshot` of shared tensor ``t``'s index arrays (copied now) and ``derived``,
    unless it would hold more than the snapshots' share of device memory alone."""
    c, p = t.compressed_indices(), t.plain_indices()
    if _held_bytes(c, p, derived) <= _SNAPSHOT_BYTES:
        _remember(_snapshot_key(t), Snapshot(c, p, derived))


def compressed_report(t, *, check_order: bool = True, max_step: int | None = None):
    """``None`` or the CPU kernel's ``(invariant, batch, i, pos, value)`` for 5.1-5.6 (5.6 only
    with ``check_order``) of a device compressed tensor; synchronises once.

    ``max_step`` replaces 5.3's upper bound (the plain size), e.g. ``2**64 - 1`` to check
    only that the compressed indices do not decrease (what sum_duplicates needs). Where a
    :class:`Snapshot` of shared index arrays is kept, the same read says whether they still
    equal it."""
    dev = t.values()._device
    c, p = t.compressed_indices(), t.plain_indices()
    B = math.prod(c.shape[:-1])
    n = c.shape[-1] - 1
    nnz = t.nnz
    ps = t.plain_size
    ik = (P.index_key(c.dtype),)
    key = _key(dev)
    snap = _snapshots.get(_snapshot_key(t)) if c._shared or p._shared else None
    out = P.empty(dev, (6,), np.int64) if snap is None else P.zeros(dev, (7,), np.int64)
    if snap is not None:  # out[6]: 1 where the arrays differ from the copy
        for a, kept in ((c, snap.comp), (p, snap.plain)):
            P.run(dev, "validate.cu", "same_items", ik, a.size, a, kept, a.size, out[6])
    P.run(dev, "validate.cu", "compressed_ends", ik, B, c, B, n, nnz, key)
    step = ps if max_step is None else max_step
    P.run(dev, "validate.cu", "compressed_steps", ik, B * n, c, B, n, step, key)
    marks = None
    if check_order and B * nnz:
        marks = P.empty(dev, (-(-B * nnz // 32),), np.uint32)  # a bit per position: does it start a row
        dev.memset8(marks._ptr, 0, marks.nbytes)
        P.run(dev, "validate.cu", "row_start_marks", ik, B * n, c, B, n, nnz, key, marks)
    P.run(dev, "validate.cu", "compressed_plain", ik, -(-B * nnz // 4), p, B, nnz, ps, int(check_order), marks, key)
    P.run(dev, "validate.cu", "compressed_report", ik, 1, c, p, B, n, nnz, ps, key, out)
    r = P.read_ints(dev, out) if B else np.zeros(7, np.int64)
    if snap is not None:
        snap.confirmed = (weakref.ref(c), weakref.ref(p)) if B and not r[6] else None
    code = int(r[0])
    if code == 0:
        return None
    inv = CODES[code]
    if inv == "5.3":
        return inv, int(r[1]), int(r[2]), -1, int(r[4]) - int(r[5])
    return inv, int(r[1]), int(r[2]), int(r[3]), int(r[4])


def check_compressed(t, *, check_order: bool = True) -> None:
    found = compressed_report(t, check_order=check_order)
    if found is not None:
        raise_compressed_error(found, t.layout, t.shape[:t.batch_dim], t.plain_size, t.nnz)


def check_compressed_bounds(t) -> None:
    """5.1-5.5 of a device compressed tensor as the CPU's bounds check reads them: a step may
    exceed the plain size (a row of repeats), not nnz; plain order is not asked for."""
    found = compressed_report(t, check_order=False, max_step=(1 << 64) - 1)
    if found is not None:
        raise_compressed_error(found, t.layout, t.shape[:t.batch_dim], t.plain_size, t.nnz)


def coo_report(t, *, order: bool):
    """``None``, or ``("C4" | "C5", dim, pos, value)`` for a bounds violation, or
    ``("C6", -1, pos, 0)`` for the first column not after its predecessor (with ``order``)."""
    dev = t.values()._device
    idx = t.indices()
    S, nnz = idx.shape
    ik = (P.index_key(idx.dtype),)
    shape = P.ints(dev, t.shape[:S])
    key = _key(dev)
    out = P.empty(dev, (6,), np.int64)
    P.run(dev, "validate.cu", "coo_bounds", ik, S * nnz, idx, S, nnz, shape, key)
    if order:
        P.run(dev, "validate.cu", "coo_order", ik, nnz - 1, idx, S, nnz, key)
    P.run(dev, "validate.cu", "coo_report", ik, 1, idx, S, nnz, key, out)
    r = P.read_ints(dev, out)
    code = int(r[0])
    if code == 0:
        return None
    return CODES[code], int(r[1]), int(r[2]), int(r[3])


def check_coo(t) -> None:
    found = coo_report(t, order=t.is_coalesced())
    if found is not None:
        raise_coo_error(found, t.shape)


def check_coo_bounds(t) -> None:
    found = coo_report(t, order=False)
    if found is not None:
        raise_coo_error(found, t.shape)


def check_tensor(t) -> None:
    """Every invariant of a device tensor: the O(1) member checks, then the O(nnz) scans on the device."""
    from ..._core._shape_checks import compressed_meta, coo_meta

    if isinstance(t, CudaCOOTensor):
        coo_meta(t.indices(), t.values(), t.shape)
        check_coo(t)
    elif isinstance(t, CudaCompressedTensor):
        compressed_meta(t.compressed_indices(), t.plain_indices(), t.values(), t.shape, t.layout)
        check_compressed(t)
    else:
        raise TypeError(f"expected a CUDA sparse tensor, got {type(t).__name__}")


def is_layout(t, layout) -> bool:
    return t.layout is L.as_layout(layout)
