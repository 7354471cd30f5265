"""One meaning of "validated": the flag a tensor carries once its indices are known to hold.

A tensor is *validated* when a full O(nnz) check passed on it or one of our kernels made
it: COO's ``_checked`` (C4-C6), a compressed tensor's ``_canonical`` (5.1-5.6, shown to
users as ``is_coalesced()``). The flag is set by :meth:`check_invariants`, by our kernels'
outputs and by :func:`ensure_valid`, and cleared by nothing: a new tensor starts unset.

Every kernel that addresses memory by the indices, and every exit that hands our members
to another library without a copy (``to_scipy``, ``to_torch``), goes through
:func:`ensure_valid`, so a tensor built with ``check_invariants=False`` is checked once,
the first time it matters, and never leaves the library unchecked.
"""

from __future__ import annotations

import numpy as np

from ._errors import InvariantError
from ._tensor import COOTensor
from ._validate import raise_compressed_error

__all__ = ["ensure_valid", "check_ends"]


def ensure_valid(t, *, repair: bool = False, threads: int | None = None):
    """``t`` once its indices are known valid: the full check runs on a never-checked tensor
    (its result is cached on ``t``), else nothing runs.

    Parameters
    ----------
    t : COOTensor or CompressedTensor
    repair : bool
        A compressed tensor whose only fault is unsorted or repeated plain indices
        (invariant 5.6) is returned coalesced (a canonical copy) instead of raising.
    threads : int, optional
        Threads for the check (see :func:`sparsetensor.num_threads`).

    Raises
    ------
    InvariantError
        A broken invariant, with its number and position.
    """
    if isinstance(t, COOTensor):
        if not t._checked:
            t.check_invariants(threads=threads)
        return t
    if t._canonical:
        return t
    try:
        t.check_invariants(threads=threads)
    except InvariantError as e:
        if not (repair and e.invariant == "5.6"):
            raise
        try:
            return t.coalesce(threads=threads)
        except (NotImplementedError, ImportError):
            raise e from None  # no coalescing for this tensor: report what needs it
    return t


def check_ends(t, named=None) -> None:
    """Invariants 5.1 and 5.2 (an O(batch) look) of a compressed tensor that was never checked.

    For kernels that check 5.3-5.5 as they scan the rows but trust where the first row starts
    and the last one ends: without this, ``crow_indices[0] != 0`` or ``crow_indices[-1] != nnz``
    would silently drop entries. ``named`` is the tensor to name in the error (``t`` may be
    its transpose view). With nnz == 0 the kernels scan nothing, so the whole O(batch x rows)
    check runs instead.
    """
    if t._canonical:
        return
    if t.nnz == 0:
        t.check_invariants()
        return
    named = t if named is None else named
    c = t.compressed_indices()
    c2 = c.reshape(-1, c.shape[-1])
    for inv, column, want in (("5.1", 0, 0), ("5.2", -1, t.nnz)):
        bad = np.flatnonzero(c2[:, column] != want)
        if bad.size:
            b = int(bad[0])
            raise_compressed_error((inv, b, 0, -1, int(c2[b, column])), named.layout, c.shape[:-1],
                                   named.plain_size, t.nnz)
