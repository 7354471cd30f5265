"""Shape and indexing ops: transpose, narrow, select, index_select, cat, stack, nonzero,
zero_, copy_, resize_as_ and sparse_mask, for every layout, with batch and dense dims.

Semantics follow PyTorch 2.13 where it defines the op for a layout, and dense NumPy
always (``op(t).to_dense() == op(t.to_dense())``). Where PyTorch refuses (it cannot
narrow, index_select or cat compressed tensors, nor transpose hybrid ones) these
functions go further; each docstring says how. The rules shared by all of them:

- A dim is a *batch* dim (compressed layouts only), a *sparse* dim or a *dense* dim.
  Ops along batch dims act on every member, along dense dims on the values only;
  along sparse dims they select or move entries.
- Results satisfy every invariant; compressed results are canonical (5.6 holds). A
  compressed input built with ``check_invariants=False`` is scanned first (one
  parallel pass, free for checked tensors): broken indices raise
  :class:`~sparsetensor.InvariantError`, unsorted ones are repaired (``coalesce``).
  COO coordinates that an op looks up are bounds-checked (C4/C5).
- Every batch of a compressed tensor has the same nnz: an op whose result would
  give batches different nnz raises ``ValueError`` naming the counts.
- Results do not share memory with their inputs, except that they may share index
  arrays (never written in place) and that ops along batch dims and ``transpose`` may
  return views, as PyTorch's do. The in-place ops (``zero_``, ``copy_``,
  ``resize_as_``) reassign the tensor's member attributes; the old arrays are not
  written, so other tensors sharing them are unaffected.
- Index dtypes are kept; ``cat`` of inputs with different index dtypes gives int64
  (never narrowed). A size or nnz that does not fit the index dtype raises
  ``InvariantError`` (1.3).

The ops live in one module per job: :mod:`.select` (transpose, narrow, select, index_select,
nonzero, count_nonzero), :mod:`.join` (cat, stack), :mod:`.inplace` (zero_, copy_,
resize_as_) and :mod:`.mask` (sparse_mask); this module gathers them under one name. The
kernels are in :mod:`sparsetensor._lib._select`.
"""

from __future__ import annotations

from ._shape_common import _kind  # noqa: F401 - read by the tests
from .inplace import copy_, resize_as_, zero_
from .join import cat, stack
from .mask import sparse_mask
from .select import count_nonzero, index_select, narrow, nonzero, select, transpose

__all__ = ["zero_", "transpose", "narrow", "select", "index_select", "cat", "stack", "nonzero", "count_nonzero",
           "copy_", "resize_as_", "sparse_mask"]
