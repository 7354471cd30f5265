"""Ops that keep a subset of the stored elements: ``tril`` and ``triu`` (PyTorch's names and
arguments; ``torch.tril`` has no sparse form, SciPy has ``scipy.sparse.tril``/``triu``) and
``eliminate_zeros`` (SciPy's, in place).

Each is one mechanism on either backend: a flag per entry (``triangle_flags``: which side of a
diagonal its last two sparse coordinates lie on; ``nonzero_rows``: whether its values hold a
nonzero item), then ``keep_coo`` (``keep_compressed``) keeps the flagged entries in order. A
csr/csc tensor goes through COO and back for ``tril``/``triu``; ``eliminate_zeros`` keeps its
compressed form. A bsr/bsc tensor is taken block by block (its arrays seen as a csr/csc
tensor whose values have two more dense dims): a block is kept when it holds an item on the kept
side of the diagonal (then its items beyond it are set to 0) or a nonzero item. A batched result
whose batches would differ in nnz (blocks) raises ``ValueError``: every batch of a compressed
tensor has the same nnz.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .._backend import backend_for
from .._core import _layout as L
from .._core._canonical import ensure_valid_export
from .._core._tensor import COOTensor, CompressedTensor
from ._common import describe
from ._shape_common import _require_sparse
from .inplace import _take
from .mask import sparse_mask

__all__ = ["tril", "triu", "eliminate_zeros"]


def _converted(name: str, t, coo: COOTensor, layout):
    """``coo`` (the kept entries of ``t``) in ``layout``; a ValueError (batches of different nnz)
    names the op and ``t``."""
    try:
        return coo.to_sparse(layout)
    except ValueError as e:
        raise ValueError(f"{name} of a {describe(t, dtype=False)}: {e}") from None


def _as_layout(name: str, t, coo: COOTensor):
    """``coo`` (the kept entries of ``t``) in ``t``'s layout."""
    return coo if isinstance(t, COOTensor) else _converted(name, t, coo, t.layout)


def _block_view(t: CompressedTensor) -> CompressedTensor:
    """bsr/bsc ``t`` as the csr/csc tensor of its blocks, whose values have two more dense dims (the
    block's rows and columns): the same arrays."""
    R, C = t.blocksize
    B = t.batch_dim
    shape = t.shape[:B] + (t.shape[B] // R, t.shape[B + 1] // C, R, C) + t.shape[B + 2:]
    layout = L.sparse_csr if t.layout is L.sparse_bsr else L.sparse_csc
    v = t.values()
    if isinstance(v, np.ndarray) and not v.flags.c_contiguous:
        v = np.ascontiguousarray(v)  # blocks stored transposed (3.7 allows them of bsr), not dense dims of csr
    return CompressedTensor(t.compressed_indices(), t.plain_indices(), v, shape, layout, t._canonical)


def _kept_blocks(name: str, t: CompressedTensor, flags_of):
    """bsr/bsc ``t`` with the blocks ``flags_of(backend, coo of the blocks)`` flags."""
    view = _block_view(t)
    coo = view.to_sparse(L.sparse_coo)  # t is checked (_triangle)
    backend = backend_for(coo)
    idx, values = backend.keep_coo(coo.indices(), coo.values(), flags_of(backend, coo))
    kept = _converted(name, t, COOTensor(idx, values, coo.shape, True, True), view.layout)
    return CompressedTensor(kept.compressed_indices(), kept.plain_indices(), kept.values(), t.shape, t.layout,
                            kept.is_coalesced())


def _triangle(name: str, t, diagonal, upper: bool):
    _require_sparse(t, name)
    try:
        k = operator.index(diagonal)
    except TypeError:
        raise TypeError(f"{name}: diagonal must be an int, got {diagonal!r}") from None
    S = t.sparse_dim if isinstance(t, COOTensor) else t.batch_dim + 2
    if S < 2:
        raise ValueError(f"{name} of a {describe(t, dtype=False)}: it needs two sparse dims (the last two are the "
                         "matrix's rows and columns)")
    M, N = t.shape[S - 2], t.shape[S - 1]
    k = min(max(k, -M), N)  # col - row lies in [1 - M, N - 1]: a diagonal beyond keeps all or nothing
    # entries are kept by coordinate: C4/C5 first (again where the caller may have written them, or
    # t was computed from such arrays), named in t's terms
    t = ensure_valid_export(t)
    if t.layout.blocked:
        R, C = t.blocksize
        reach = k + R - 1 if not upper else k - (C - 1)  # a block's nearest item to the diagonal
        blocks = _kept_blocks(name, t, lambda backend, coo: backend.triangle_flags(
            coo.indices(), S - 2, S - 1, reach, upper, (R, C)))
        # the items a kept block holds beyond the diagonal: 0
        return sparse_mask(_triangle(name, blocks.to_sparse(L.sparse_coo), k, upper), blocks)
    coo = t if isinstance(t, COOTensor) else t.to_sparse(L.sparse_coo)
    backend = backend_for(coo)
    flags = backend.triangle_flags(coo.indices(), S - 2, S - 1, k, upper)
    idx, values = backend.keep_coo(coo.indices(), coo.values(), flags)
    return _as_layout(name, t, COOTensor(idx, values, t.shape, coo.is_coalesced(), True))


def tril(t, diagonal: int = 0):
    """The lower triangle of ``t``: the stored elements with ``col - row <= diagonal``, as
    ``torch.tril`` of the dense tensor (and SciPy's ``tril`` with ``k=diagonal``).

    Rows and columns are the last two sparse dims (a COO tensor's leading sparse dims and a
    compressed tensor's batch dims are batches; dense dims are carried). The layout, blocksize,
    dtypes and (for COO) coalescing are kept. A bsr/bsc block that crosses the diagonal is kept,
    its items beyond it set to 0.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.arange(1.0, 10.0).reshape(3, 3), "csr")
    >>> st.tril(t).to_dense()
    array([[1., 0., 0.],
           [4., 5., 0.],
           [7., 8., 9.]])
    >>> t.tril(-1).nnz, t.triu(1).nnz
    (3, 3)
    """
    return _triangle("tril", t, diagonal, False)


def triu(t, diagonal: int = 0):
    """The upper triangle of ``t``: the stored elements with ``col - row >= diagonal``, as
    ``torch.triu`` of the dense tensor (see :func:`tril`)."""
    return _triangle("triu", t, diagonal, True)


def eliminate_zeros(t):
    """Drop the stored elements whose values are zero, in place (SciPy's ``eliminate_zeros``), and
    return ``t``.

    An element with dense dims is dropped when every item of it is zero; a bsr/bsc block when
    every item of the block is. ``-0.0`` is zero, NaN is not. In place means that ``t`` takes
    new arrays (the old ones are not written: tensors sharing them are unaffected), as the
    other in-place ops. Duplicates of an uncoalesced COO tensor are not summed first (SciPy's
    rule): each is tested on its own.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.eye(3), "csr") * np.array([1.0, 0.0, 2.0])
    >>> t.nnz, t.eliminate_zeros() is t, t.nnz
    (3, True, 2)
    """
    _require_sparse(t, "eliminate_zeros")
    if isinstance(t, COOTensor):
        backend = backend_for(t)
        idx, values = backend.keep_coo(t.indices(), t.values(), backend.nonzero_rows(t.values()))
        return _take(t, COOTensor(idx, values, t.shape, t.is_coalesced(), t._checked), ())
    # a compressed tensor keeps its arrays' form: a bsr/bsc one is the csr/csc tensor of its blocks;
    # the rows are cut by the compressed index, checked again where the caller may have written it
    valid = ensure_valid_export(t)
    view = _block_view(valid) if valid.layout.blocked else valid
    B, batch = math.prod(view.shape[:view.batch_dim]), view.shape[:view.batch_dim]
    c, p, v = view.compressed_indices(), view.plain_indices(), view.values()
    nnz = p.shape[-1]
    c, p, v = c.reshape(B, c.shape[-1]), p.reshape(B, nnz), v.reshape((B, nnz) + v.shape[view.batch_dim + 1:])
    backend = backend_for(view)
    flags = backend.nonzero_rows(v.reshape((B * nnz,) + v.shape[2:]))
    c, p, v = backend.keep_compressed(c, p, v, flags, batch, f"eliminate_zeros of a {describe(t, dtype=False)}: "
                                      "every batch must have the same nnz")
    kept = p.shape[1]
    new = CompressedTensor(c.reshape(batch + (c.shape[1],)), p.reshape(batch + (kept,)),
                           v.reshape(batch + (kept,) + v.shape[2:]), t.shape, t.layout, True)
    return _take(t, new, ())
