"""The internal standard form of a tensor, and one meaning of "validated".

*Validated* is the flag a tensor carries once its indices are known to hold.

A tensor is *validated* when a full O(nnz) check passed on it or one of our kernels made
it: COO's ``_checked`` (C4-C6), a compressed tensor's ``_canonical`` (5.1-5.6, shown to
users as ``is_coalesced()``). The flag is set by :meth:`check_invariants`, by our kernels'
outputs and by :func:`ensure_valid`, and cleared by nothing: a new tensor starts unset.

Every kernel that addresses memory by the indices, and every exit that hands our members
to another library without a copy (``to_scipy``, ``to_torch``), goes through
:func:`ensure_valid`, so a tensor built with ``check_invariants=False`` is checked once,
the first time it matters, and never leaves the library unchecked.

The *standard form* (:class:`Parts`) is what the compressed kernels read and write:
compressed ``(B, n + 1)``, plain ``(B, nnz)`` and values ``(B, nnz, E)`` viewed as raw
unsigned integers (``E``: the items of one entry, block x dense). :func:`as_parts` takes a
validated tensor into it, :func:`build` makes a (validated) tensor of it again. The ops and
the conversions import these from here.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import _layout as L
from ._dtypes import raw_view
from ._errors import InvariantError
from . import _tensor
from ._tensor import COOTensor, CompressedTensor, held_outside, holds_arrays

__all__ = ["ensure_valid", "ensure_valid_export", "ensure_both_valid", "Parts", "as_parts", "build", "same_nnz", "SHOW_BATCHES"]

# Batches whose nnz differ are listed in errors up to this many.
SHOW_BATCHES = 16


class Parts(NamedTuple):
    """A compressed tensor in the kernels' standard form."""

    compressed: np.ndarray  # (B, n + 1)
    plain: np.ndarray       # (B, nnz)
    values: np.ndarray      # (B, nnz, E) raw view
    batch: tuple
    sparse: tuple           # (rows, cols)
    dense: tuple
    blocksize: tuple        # (1, 1) unless blocked
    layout: L.Layout
    dtype: np.dtype

    @property
    def plain_size(self) -> int:
        rows, cols = self.sparse
        rb, cb = self.blocksize
        return cols // cb if self.layout.compressed_rows else rows // rb

    @property
    def work(self) -> int:
        return self.plain.size * max(self.values.shape[2], 1) + self.compressed.size

    def with_members(self, compressed, plain, values, layout, blocksize=None) -> "Parts":
        """These parts with new members (and the layout and blocksize they have)."""
        return self._replace(compressed=compressed, plain=plain, values=values, layout=layout,
                             blocksize=self.blocksize if blocksize is None else blocksize)


def as_parts(t: CompressedTensor) -> Parts:
    """``t`` in the standard form (views where the members allow; ``t`` should be validated)."""
    m = t.batch_dim
    batch, B = t.shape[:m], math.prod(t.shape[:m])
    values = t.values()
    if isinstance(values, np.ndarray):  # blocked values may be block-transposed (3.7); device ones are contiguous
        values = np.ascontiguousarray(values)
    E = math.prod(values.shape[m + 1:])
    c = t.compressed_indices()
    return Parts(c.reshape(B, c.shape[-1]), t.plain_indices().reshape(B, t.nnz),
                 raw_view(values.reshape(B, t.nnz, E)), batch, t.shape[m:m + 2], t.shape[m + 2:], t.blocksize,
                 t.layout, t.dtype)


def build(parts: Parts) -> CompressedTensor:
    """The validated tensor that ``parts`` (made by our kernels) describe, on the members' device
    (NumPy arrays or DeviceArrays: only views are taken)."""
    c, p, v, batch = parts.compressed, parts.plain, parts.values, parts.batch
    nnz = p.shape[1]
    block = parts.blocksize if parts.layout.blocked else ()
    if type(v) is np.ndarray and not v.flags.c_contiguous:  # an empty input's raw view may have zero strides
        v = np.ascontiguousarray(v)
    values = v.view(parts.dtype).reshape(batch + (nnz,) + block + parts.dense)
    return CompressedTensor(c.reshape(batch + (c.shape[1],)), p.reshape(batch + (nnz,)), values,
                            batch + parts.sparse + parts.dense, parts.layout, canonical=True)


class UnequalBatches(ValueError):
    """A batched compressed tensor would hold different nnz in its batches (every batch of one
    has one nnz): ops that have another form for such a result (COO) catch it."""


def in_layout_or_coo(r, like, **kwargs):
    """COO tensor ``r`` in ``like``'s layout (and blocksize), or ``r`` itself where its batches would
    hold different nnz there (a reduction over batch dims: the COO result, as indexing gives)."""
    try:
        return r.to_sparse(like.layout, blocksize=like.blocksize if like.layout.blocked else None, **kwargs)
    except UnequalBatches:
        return r


def same_nnz(per_batch, batch: tuple, what: str) -> None:
    """Every batch has the same nnz (``per_batch``: one count a batch), or :class:`UnequalBatches`
    (a ValueError) saying ``what`` and listing the counts."""
    per_batch = np.asarray(per_batch).reshape(-1)
    if per_batch.size and (per_batch != per_batch[0]).any():
        B = per_batch.size
        shown = ", ".join(f"{tuple(int(i) for i in np.unravel_index(k, batch))}: {int(per_batch[k])}"
                          for k in range(min(B, SHOW_BATCHES)))
        raise UnequalBatches(f"{what}; got per batch {shown}{', ...' if B > SHOW_BATCHES else ''}")


def ensure_valid_export(t, *, threads: int | None = None, private: bool | str = True):
    """:func:`ensure_valid` with repair, for an exit that hands ``t``'s index arrays to a library
    that trusts them, or an op that computes new coordinates from them (reshape, kron, tril): the
    name says why the check (again, for a tensor on a caller's arrays) matters there."""
    return ensure_valid(t, repair=True, threads=threads, private=private)



def ensure_both_valid(a, b, threads: int | None = None, private: bool | str = True) -> tuple:
    """The operands of a binary kernel, each through :func:`ensure_valid` with repair; one tensor
    given twice (``t + t``, ``t @ t``) is checked (again, on a caller's arrays) once."""
    va = ensure_valid(a, repair=True, threads=threads, private=private)
    return va, (va if b is a else ensure_valid(b, repair=True, threads=threads, private=private))


def ensure_valid(t, *, repair: bool = False, threads: int | None = None, private: bool | str = True):
    """``t`` once its indices are known valid: the full check runs on a never-checked tensor
    (its result is cached on ``t``), and again on a checked one whose caller holds its index
    arrays (taken without a copy: they may have been written since; or ``t`` was computed from
    such a tensor, :func:`~sparsetensor._core._tensor.carry_held`), else nothing runs: an index
    written out of range would otherwise be dropped, folded into a valid coordinate or handed on.

    Parameters
    ----------
    t : COOTensor or CompressedTensor
    repair : bool
        A compressed tensor whose only fault is unsorted or repeated plain indices
        (invariant 5.6) is returned coalesced (a canonical copy) instead of raising. A row
        longer than the plain size (5.3's upper bound) can only hold repeats, so it is
        repaired too; the repair's own check (5.3's lower bound, 5.4, 5.5) raises for any
        other fault.
    threads : int, optional
        Threads for the check (see :func:`sparsetensor.num_threads`).
    private : bool or "all"
        Where the caller holds a compressed ``t``'s index arrays, check a private copy of its
        compressed index and return ``t`` over it (values and plain indices shared): the kernels
        size their outputs and split their work by the compressed index once checked, and
        another thread may write the caller's array meanwhile (a merge sized by one value and
        filled by another writes out of bounds). The kernels bound the plain indices where they
        follow them, but for SpGEMM (its accumulators and B's rows are addressed by them):
        ``"all"`` copies them too (O(nnz)); a COO tensor's indices are copied (O(nnz)). False
        where ``t`` itself is handed on without a copy (``coalesce`` of a canonical tensor,
        ``from_scipy``, ``to_scipy``, ``to_torch``).

    Raises
    ------
    InvariantError
        A broken invariant, with its number and position.
    """
    if private and _tensor._any_held and holds_arrays(t):
        return _valid_private(t, repair, threads, private == "all")
    if isinstance(t, COOTensor):
        if not t._checked:
            t.check_invariants(threads=threads)
        elif _tensor._any_held and held_outside(t):
            t._check_again()
        return t
    if t._canonical:
        if _tensor._any_held and held_outside(t):
            t._check_again()
        return t
    try:
        t.check_invariants(threads=threads)
    except InvariantError as e:
        if not (repair and e.invariant in ("5.3", "5.6")):
            raise
        try:
            # the op table's coalesce: the tensor's own backend repairs it (this module imports none)
            return t.coalesce(threads=threads)
        except (NotImplementedError, ImportError):
            raise e from None  # no coalescing for this tensor: report what needs it
    return t


def _valid_private(t, repair: bool, threads, plain: bool):
    """:func:`ensure_valid` of ``t``, whose caller holds its index arrays, on a private copy of its
    compressed index (and of its plain index with ``plain``)."""
    twin = t._private_twin(plain)
    if t._validated:
        twin._check_again()
        return twin
    out = ensure_valid(twin, repair=repair, threads=threads, private=False)  # (its plain indices may be the caller's)
    if out is twin:
        t._set_validated()  # the check's result kept on t, as ensure_valid keeps it (held: checked again next time)
    return out
