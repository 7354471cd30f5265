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

from ._errors import InvariantError
from ._tensor import COOTensor

__all__ = ["ensure_valid"]


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
