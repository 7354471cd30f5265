"""Turn the validation kernels' findings into :class:`InvariantError` messages.

The O(1) shape and dtype invariants are checked where tensors are built
(:mod:`sparsetensor._core._tensor`); this module runs the O(nnz) index scans, which
happen in Cython (:mod:`sparsetensor._lib._validate`) with the GIL released.
"""

from __future__ import annotations

import numpy as np

from ._config import num_threads
from ._errors import InvariantError
from .._lib import _validate as _kernels

__all__ = ["check_compressed_indices", "check_coo_indices", "first_broken_end", "raise_compressed_error",
           "raise_coo_error"]


def _batch_tuple(batch_shape: tuple, flat: int) -> tuple:
    if not batch_shape:
        return ()
    return tuple(int(i) for i in np.unravel_index(flat, batch_shape))


def raise_compressed_error(found, layout, batch_shape: tuple, plain_size: int, nnz: int, compressed=None):
    """Raise the :class:`InvariantError` for a kernel's ``(invariant, batch, i, pos, value)``.

    Kernels that scan rows report a compressed index they cannot follow as 5.1-5.3 in their own
    terms; given ``compressed`` (``batch_shape + (n + 1,)``), such a report is replaced by the one
    ``check_invariants`` makes (5.1/5.2 of every batch first, then the first step out of range)."""
    if compressed is not None and found[0] in ("5.1", "5.2", "5.3"):
        found = _first_broken_step(np.asarray(compressed).reshape(-1, compressed.shape[-1]), plain_size, nnz) or found
    inv, flat_batch, i, pos, value = found
    batch = _batch_tuple(batch_shape, flat_batch)
    c, p = layout.compressed_name, layout.plain_name
    size_name = "ncols" if layout.compressed_rows else "nrows"
    where = f"batch {batch}, " if batch_shape else ""
    if inv == "5.1":
        msg = f"{c}[..., 0] must be 0; {where}got {value}"
    elif inv == "5.2":
        msg = f"{c}[..., -1] must equal nnz={nnz}; {where}got {value}"
    elif inv == "5.3":
        msg = (f"{c}[..., i] - {c}[..., i-1] must be in [0, {size_name}={plain_size}]; "
               f"{where}i={i}: got {value}")
    elif inv == "5.4":
        msg = f"{p} must be >= 0; {where}{_line(layout)} {i}, position {pos}: got {value}"
    elif inv == "5.5":
        msg = (f"{p} must be < {size_name}={plain_size}; {where}{_line(layout)} {i}, "
               f"position {pos}: got {value}")
    else:
        msg = (f"{p} must be sorted with distinct values within each {_line(layout)}; "
               f"{where}{_line(layout)} {i}, position {pos}: got {value} after a value >= it")
    raise InvariantError(inv, layout.name, msg, batch=batch if batch_shape else None,
                         index=i if inv != "5.1" and inv != "5.2" else None)


def first_broken_end(c: np.ndarray, nnz: int):
    """The first break of 5.1, then of 5.2, over every batch of ``(B, n + 1)`` compressed indices
    (an O(B) look), as the validator reports it, or None."""
    for inv, col, want in (("5.1", 0, 0), ("5.2", -1, nnz)):
        bad = np.flatnonzero(c[:, col] != want)
        if bad.size:
            b = int(bad[0])
            return inv, b, (c.shape[1] - 1 if col else 0), -1, int(c[b, col])
    return None


def _first_broken_step(c: np.ndarray, plain_size: int, nnz: int):
    """The first break of 5.1, 5.2 (over every batch) or 5.3 in ``(B, n + 1)`` compressed indices,
    as the validator reports it, or None."""
    found = first_broken_end(c, nnz)
    if found is not None:
        return found
    step = np.diff(c.astype(np.int64), axis=1)
    bad = np.flatnonzero(((step < 0) | (step > plain_size)).reshape(-1))
    if not bad.size:
        return None
    b, i = divmod(int(bad[0]), step.shape[1])
    return "5.3", b, i + 1, -1, int(step[b, i])


def _line(layout) -> str:
    kind = "row" if layout.compressed_rows else "column"
    return f"block {kind}" if layout.blocked else kind


def check_compressed_indices(compressed: np.ndarray, plain: np.ndarray, layout, plain_size: int,
                             threads: int | None = None) -> None:
    """Invariants 5.1-5.6 over all batches; ``compressed``/``plain`` have shapes ``batch + (n+1,)``/``batch + (nnz,)``."""
    batch_shape = compressed.shape[:-1]
    nnz = plain.shape[-1]
    c2 = compressed.reshape(-1, compressed.shape[-1])
    p2 = plain.reshape(c2.shape[0], nnz)
    found = _kernels.validate_compressed(c2, p2, int(plain_size), num_threads(threads, plain.size + c2.size))
    if found is not None:
        raise_compressed_error(found, layout, batch_shape, plain_size, nnz)


def raise_coo_error(found, shape: tuple, why: str = ""):
    """Raise the :class:`InvariantError` for a kernel's ``(invariant, dim, position, value)``;
    for C6, ``position`` is the first index column not after its predecessor. ``why`` ends the
    message (how the index came to be broken)."""
    inv, d, pos, value = found
    if inv == "C6":
        raise InvariantError("C6", "coo", "a tensor marked coalesced must have lexicographically sorted, "
                             f"distinct index columns; position {pos} is not after position {pos - 1}", index=pos)
    if inv == "C4":
        msg = f"indices[{d}] must be >= 0; position {pos}: got {value}"
    else:
        msg = f"indices[{d}] must be < size[{d}]={shape[d]}; position {pos}: got {value}"
    raise InvariantError(inv, "coo", msg + why, index=pos)


def check_coo_indices(indices: np.ndarray, shape: tuple, *, coalesced: bool = False,
                      threads: int | None = None) -> None:
    """Invariants C4/C5 (bounds) and, when the tensor claims to be coalesced, C6."""
    sparse_shape = np.asarray(shape[: indices.shape[0]], dtype=np.int64)
    nt = num_threads(threads, indices.size)
    found = _kernels.validate_coo(indices, sparse_shape, nt)
    if found is not None:
        raise_coo_error(found, shape)
    if coalesced and not _kernels.coo_is_coalesced(indices, sparse_shape, nt):
        raise_coo_error(("C6", -1, _first_not_after(indices), 0), shape)


def _first_not_after(indices: np.ndarray) -> int:
    """The first position whose index column is not lexicographically after the one before it
    (the tensor is known to have one; an O(sparse_dim * nnz) pass, on the error path only)."""
    after = np.zeros(indices.shape[1] - 1, dtype=bool)
    tied = np.ones_like(after)
    for row in indices:
        now, before = row[1:], row[:-1]
        after |= tied & (now > before)
        tied &= now == before
    found = np.flatnonzero(~after)
    if not found.size:  # sorted now: the indices changed since the kernel's look (another thread)
        raise ValueError("coo: the indices changed during their check")
    return int(found[0]) + 1
