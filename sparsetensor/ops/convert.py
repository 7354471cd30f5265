"""Layout-to-layout conversions among coo, csr, csc, bsr and bsc, over the Cython kernels.

Every compressed tensor is handled in one canonical form (see :mod:`sparsetensor.ops.dense`):
compressed ``(B, n + 1)``, plain ``(B, nnz)`` and values ``(B, nnz, E)`` viewed as raw
unsigned integers, ``E`` being the items of one entry (block x dense). Values are only
moved, never combined, so every value dtype takes the same path. A conversion is a
chain of four kernels:

- *transpose* (csr <-> csc, bsr <-> bsc): a parallel counting sort of the plain
  indices; blocks move whole and keep their orientation;
- *group* (csr -> bsr, csc -> bsc): entries gather into blocks, unspecified items
  of a block become explicit zeros;
- *expand* (bsr -> csr, bsc -> csc): every item of a block becomes an entry;
- *coo*: csr/bsr -> coalesced COO, and coalesced COO -> csr (batch dims as the leading
  sparse dims).

Entries are transposed before they are grouped and blocks before they are expanded,
so the counting sort always moves the fewer, larger pieces.
"""

from __future__ import annotations

import operator

import numpy as np

from .._core import _layout as L
from .._backend import backend_for
from .._core._tensor import SparseTensor

__all__ = ["to_sparse"]

def to_sparse(t, layout, *, blocksize=None, dense_dim=None, threads: int | None = None):
    """Convert a sparse tensor to another sparse layout (or a NumPy array to a sparse one).

    Parameters
    ----------
    t : SparseTensor or numpy.ndarray
        An array is passed to :func:`sparsetensor.from_dense` (``batch_dim=0``).
    layout : str or Layout
        ``"coo"``, ``"csr"``, ``"csc"``, ``"bsr"`` or ``"bsc"``.
    blocksize : (int, int), optional
        The block shape ``(rows, cols)`` of a bsr/bsc result (the block as it appears in
        the dense tensor, for bsc too); it must divide the two sparse sizes. Required for
        bsr/bsc targets, except that converting to the tensor's own layout without one is
        a no-op; must be None for coo/csr/csc targets.
    dense_dim : int, optional
        Only checked: a conversion keeps the dense dims, so it must equal ``t.dense_dim``.
    threads : int, optional
        Threads for the kernels (default: :func:`sparsetensor.num_threads`).

    Returns
    -------
    SparseTensor
        ``t`` itself when it already has ``layout`` (and ``blocksize``); otherwise a new
        tensor with the same shape, index dtype and value dtype, satisfying every
        invariant (compressed results are canonical, COO results coalesced).

    Notes
    -----
    - Batch dims: compressed layouts keep them; to COO they become the leading sparse
      dims (``sparse_dim = batch_dim + 2``); from COO with ``sparse_dim = k + 2`` the first
      ``k`` become batch dims, which needs the same nnz in every batch (ValueError).
    - Blocks: grouping into blocks stores explicit zeros for the unspecified items of a
      specified block (PyTorch semantics). Expanding (bsr/bsc -> csr/csc/coo) makes every
      item of every block an entry, zeros included; PyTorch does this for bsr -> coo and
      refuses bsr -> csr, which follows the same rule here. bsr -> bsr with another
      blocksize (PyTorch refuses it) goes through csr: the new blocks are those that
      meet an old block.
    - An uncoalesced COO tensor is coalesced first. A compressed tensor built without
      checking is scanned first (invariants 5.1-5.6, one parallel pass); broken indices
      raise :class:`InvariantError`, while unsorted or duplicate plain indices (5.6) are
      repaired with ``t.coalesce()`` (duplicates are summed).
    - ``t`` is never modified. A coo -> csr result shares its plain indices and values with
      ``t`` (the last index row and the values, as PyTorch does); every other result has
      arrays of its own.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], size=(2, 3))
    >>> c = t.to_sparse("csc")
    >>> c.ccol_indices(), c.row_indices(), c.values()
    (array([0, 1, 2, 3]), array([0, 1, 0]), array([1., 3., 2.]))
    >>> b = t.to_sparse("bsr", blocksize=(2, 1))
    >>> b.col_indices(), b.values()[:, :, 0]
    (array([0, 1, 2]), array([[1., 0.],
           [0., 3.],
           [2., 0.]]))
    >>> t.to_sparse("coo").indices()
    array([[0, 0, 1],
           [0, 2, 1]])
    """
    layout = L.as_layout(layout)
    if not isinstance(t, SparseTensor):
        if isinstance(t, np.ndarray):
            from .dense import from_dense

            return from_dense(t, layout, blocksize=blocksize, dense_dim=0 if dense_dim is None else dense_dim,
                              threads=threads)
        raise TypeError(f"to_sparse expects a sparse tensor or a NumPy array, got {type(t).__name__}")
    bs, same = check_target(t, layout, blocksize, dense_dim)
    if same:
        return t
    return backend_for(t).convert(t, layout, bs, threads)


def check_target(t, layout: L.Layout, blocksize, dense_dim) -> tuple:
    """The argument checks of ``to_sparse(t, layout, ...)``, shared by the CPU and CUDA tensors:
    returns ``(blocksize, same)``, ``same`` when ``t`` already has that layout and blocksize."""
    if layout is L.strided:
        raise ValueError("to_sparse needs a sparse layout, got strided; use t.to_dense()")
    if dense_dim is not None and operator.index(dense_dim) != t.dense_dim:
        raise ValueError(f"a {t.layout.name} -> {layout.name} conversion keeps the dense dims: dense_dim must be "
                         f"{t.dense_dim} (or None), got {dense_dim}")
    bs = _target_blocksize(t, layout, blocksize)
    return bs, t._layout is layout and (not layout.blocked or t.blocksize == bs)


def _target_blocksize(t, layout: L.Layout, blocksize) -> tuple:
    if not layout.blocked:
        if blocksize is not None:
            raise ValueError(f"blocksize is only defined for bsr/bsc targets, got blocksize={blocksize!r} for "
                             f"layout {layout.name}")
        return (1, 1)
    if blocksize is None:
        if t.layout is layout:
            return t.blocksize
        raise ValueError(f"a {t.layout.name} -> {layout.name} conversion needs blocksize=(rows, cols)")
    bs = L.as_blocksize(blocksize)
    S = t.sparse_dim if t.layout is L.sparse_coo else t.batch_dim + 2
    if S < 2:
        raise ValueError(f"a {layout.name} tensor needs 2 sparse dims, got a coo tensor with sparse_dim={S}")
    rows, cols = t.shape[S - 2:S]
    if rows % bs[0] or cols % bs[1]:
        raise ValueError(f"blocksize {bs} must divide the sparse sizes ({rows}, {cols})")
    return bs


