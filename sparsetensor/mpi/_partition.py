"""Row and column partitions, and the per-rank validation and split of a row block.

A partition of ``n`` rows over ``P`` ranks is an int64 array ``starts`` of
length ``P + 1``: rank ``r`` owns ``[starts[r], starts[r + 1])``. The local
work here (no communication) turns a rank's rows, with global column indices,
into the two blocks of PETSc's MPIAIJ format.
"""

from __future__ import annotations

import re

import numpy as np

from .._core._errors import InvariantError
from .._core._from_arrays import sparse_bsr_tensor, sparse_csr_tensor
from .._lib._select import drop_items

__all__ = ["balanced_starts", "even_starts", "check_starts", "check_row_pointers", "local_csr", "split_blocks",
           "without"]


def without(a: np.ndarray, drop: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` (C-contiguous) filled with ``a``'s items (along axis 0) except those at the sorted,
    distinct positions ``drop``, cast to ``out``'s dtype. The kept items are copied run by run
    between the dropped ones: where a rank keeps most of its entries (its own rows, its own
    columns), that is a copy of their bytes, against a test of every item by a boolean mask."""
    a = np.ascontiguousarray(a, dtype=out.dtype)
    if a.shape[1:] != out.shape[1:] or not out.flags.c_contiguous:
        raise ValueError(f"without: items of shape {a.shape[1:]} into a C-contiguous {out.shape[1:]} array")
    item = a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
    if item:
        drop_items(a.reshape(-1).view(np.uint8), out.reshape(-1).view(np.uint8),
                   np.ascontiguousarray(drop, dtype=np.int64), item)
    return out


def even_starts(n: int, size: int) -> np.ndarray:
    """``n`` items in ``size`` contiguous ranges whose lengths differ by at most one."""
    return (np.arange(size + 1, dtype=np.int64) * n) // size


def balanced_starts(crow: np.ndarray, size: int) -> np.ndarray:
    """Row ranges balanced by nnz: each row weighs its entries plus one (empty rows spread too).

    ``crow`` may be unchecked: the result is always a valid partition.
    """
    n = crow.shape[0] - 1
    w = crow.astype(np.int64) + np.arange(n + 1, dtype=np.int64)
    total = int(w[-1]) if n >= 0 else 0
    targets = (np.arange(1, size, dtype=np.int64) * total + size // 2) // size
    inner = np.clip(np.searchsorted(w, targets, side="left"), 0, n)
    starts = np.concatenate([[0], inner, [n]]).astype(np.int64)
    return np.maximum.accumulate(starts)


def check_starts(starts, n: int, size: int, name: str) -> np.ndarray:
    """A user's partition as an int64 array, or ``ValueError`` saying what is wrong."""
    s = np.asarray(starts)
    if s.ndim != 1 or s.shape[0] != size + 1 or (s.size and s.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be {size + 1} integers (one more than the number of ranks), got {starts!r}")
    s = s.astype(np.int64)
    if s[0] != 0 or s[-1] != n or np.any(np.diff(s) < 0):
        raise ValueError(f"{name} must start at 0, end at {n} and never decrease; got {s.tolist()}")
    return s


def check_row_pointers(crow: np.ndarray, starts: np.ndarray, nnz: int) -> None:
    """Invariants 5.1, 5.2 and the rank boundaries of ``crow`` (what splitting it needs), on the whole matrix."""
    n = crow.shape[0] - 1
    if crow[0] != 0:
        raise InvariantError("5.1", "csr", f"crow_indices[..., 0] must be 0; got {crow[0]}")
    if crow[n] != nnz:
        raise InvariantError("5.2", "csr", f"crow_indices[..., -1] must equal nnz={nnz}; got {crow[n]}")
    at = crow[starts].astype(np.int64)
    bad = np.flatnonzero((at < 0) | (at > nnz) | (np.diff(at, prepend=0) < 0))
    if bad.size:
        i = int(starts[bad[0]])
        raise InvariantError("5.3", "csr", f"crow_indices must not decrease and stay in [0, nnz={nnz}]: global "
                                           f"i={i} (a rank boundary): got {at[bad[0]]}", index=i)


_ROW_POS = re.compile(r"(row|i=)\s*(\d+)(, position (\d+))?")


def _globalize(e: InvariantError, r0: int, r1: int, p0: int, rank: int) -> InvariantError:
    """``e`` (found in local rows) renumbered to global rows and positions, naming the rank."""
    prefix = f"{e.layout} invariant {e.invariant}: "
    msg = str(e)[len(prefix):] if str(e).startswith(prefix) else str(e)

    def repl(m):
        head = "global row " if m[1] == "row" else "global i="
        out = f"{head}{int(m[2]) + r0}"
        return out + (f", position {int(m[4]) + p0}" if m[3] else "")

    msg = _ROW_POS.sub(repl, msg, count=1)
    index = None if e.index is None else e.index + r0
    return InvariantError(e.invariant, e.layout, f"{msg} (rows [{r0}, {r1}) of rank {rank})", index=index)


def _tensor(crow, cols, vals, nrows: int, ncols: int, blocksize, check: bool = False):
    """A CSR tensor, or with ``blocksize`` a BSR one (``nrows``/``ncols`` then count blocks), checked or not."""
    if blocksize is None:
        return sparse_csr_tensor(crow, cols, vals, size=(nrows, ncols), check_invariants=check)
    r, c = blocksize
    return sparse_bsr_tensor(crow, cols, vals.reshape((-1, r, c)), size=(nrows * r, ncols * c), check_invariants=check)


def local_csr(crow64: np.ndarray, cols: np.ndarray, vals: np.ndarray, ncols: int, r0: int, p0: int, rank: int,
              canonical: bool, blocksize=None):
    """Validate one rank's rows (global columns) and return them as a checked CSR tensor.

    ``crow64``: the rank's row pointers from 0 (int64, possibly broken); ``p0``: the
    global position of its first entry. Errors name global rows and positions.
    A part that breaks only 5.6 (unsorted or duplicate columns) is repaired by
    ``coalesce`` when ``canonical`` is false, as :func:`sparsetensor.load` does.
    With ``blocksize=(r, c)`` the rows are block rows of a BSR tensor (``ncols``, ``r0`` count
    blocks, ``vals`` has shape ``(nnzb, r, c)``), and errors name global block rows.
    """
    nloc = crow64.shape[0] - 1
    r1 = r0 + nloc
    d = np.diff(crow64)
    bad = np.flatnonzero((d < 0) | (d > ncols))
    if bad.size:
        i = int(bad[0]) + 1
        e = InvariantError("5.3", "csr", f"crow_indices[..., i] - crow_indices[..., i-1] must be in "
                                         f"[0, ncols={ncols}]; i={i}: got {d[bad[0]]}", index=i)
        raise _globalize(e, r0, r1, p0, rank)
    crow = crow64.astype(cols.dtype)
    t = _tensor(crow, cols, vals, nloc, ncols, blocksize)
    try:
        t.check_invariants()
        t._set_validated()  # checked: 5.6 holds (as sparsetensor.io marks a checked file)
    except InvariantError as e:
        if e.invariant != "5.6" or canonical:
            raise _globalize(e, r0, r1, p0, rank) from None
        if cols.size and (cols.min() < 0 or cols.max() >= ncols):  # 5.6 is reported before later bounds
            j = int(np.flatnonzero((cols < 0) | (cols >= ncols))[0])
            row = int(np.searchsorted(crow64, j, side="right")) - 1
            inv = "5.4" if cols[j] < 0 else "5.5"
            e = InvariantError(inv, "csr", f"col_indices out of [0, ncols={ncols}); row {row}, position {j}: "
                                           f"got {cols[j]}", index=row)
            raise _globalize(e, r0, r1, p0, rank) from None
        t = t.coalesce()
    return t


def split_blocks(t, c0: int, c1: int):
    """(diagonal block, off-diagonal block, ghosts) of a checked local CSR or BSR ``t`` with global columns.

    The diagonal block holds columns ``[c0, c1)`` renumbered from 0; the
    off-diagonal block's columns are positions in ``ghosts``, the sorted
    distinct global columns outside ``[c0, c1)``. Row order and each row's
    column order are kept, so canonical input gives canonical blocks. For a BSR ``t``, rows,
    columns, ``c0``/``c1`` and ``ghosts`` count blocks, and the blocks are BSR tensors.
    """
    blocksize = t.blocksize if t.layout.name == "bsr" else None
    crow, cols, vals = t.crow_indices(), t.col_indices(), t.values()
    idt = cols.dtype
    nloc = crow.shape[0] - 1
    far = np.flatnonzero((cols < c0) | (cols >= c1))  # the off-diagonal entries
    if not far.shape[0]:  # every column is this rank's (one rank, say): t itself is the diagonal block
        diag = _tensor(crow, cols - idt.type(c0) if c0 else cols, vals, nloc, c1 - c0, blocksize)
        offd = _tensor(np.zeros(nloc + 1, dtype=idt), cols[:0], vals[:0], nloc, 0, blocksize)
        diag._canonical, offd._canonical = t.is_coalesced(), True
        return diag, offd, np.zeros(0, dtype=np.int64)
    ocols = cols[far]
    ghosts = np.unique(ocols).astype(np.int64)
    # the row of each off-diagonal entry; the diagonal block's row pointers are the rest
    ocr = np.zeros(nloc + 1, dtype=idt)
    np.cumsum(np.bincount(np.searchsorted(crow, far, side="right") - 1, minlength=nloc), out=ocr[1:])
    dcols = without(cols, far, np.empty(cols.shape[0] - far.shape[0], dtype=idt))
    if c0:
        dcols -= idt.type(c0)
    diag = _tensor((crow - ocr).astype(idt, copy=False), dcols, without(vals, far, np.empty(
        (dcols.shape[0],) + vals.shape[1:], dtype=vals.dtype)), nloc, c1 - c0, blocksize)
    offd = _tensor(ocr, np.searchsorted(ghosts, ocols).astype(idt), vals[far], nloc, ghosts.shape[0], blocksize)
    diag._canonical = offd._canonical = t.is_coalesced()  # a subsequence of each checked row keeps its order
    return diag, offd, ghosts
