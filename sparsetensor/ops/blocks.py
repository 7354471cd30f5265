"""Block constructions: ``hstack``, ``vstack``, ``block_diag`` and ``kron`` (PyTorch's names and
argument forms; SciPy's ``scipy.sparse.hstack``/``vstack``/``block_diag``/``kron``), for sparse
tensors of every layout on the host and a device.

``hstack``/``vstack`` are :func:`~sparsetensor.ops.join.cat` along the column / row dim (1-d
tensors as PyTorch treats them). ``block_diag`` places 2-d tensors along the diagonal: each is
padded with empty parts to the full width and the rows are joined, both by ``cat`` (in csr for
csr/bsr, csc for csc/bsc, else COO). ``kron`` pairs every entry of one operand with
every entry of the other in one kernel of either backend (``kron_coo``). Results take the
first sparse operand's layout (and blocksize where it tiles the result; else csr/csc).
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import backend_for
from .._core import _layout as L
from .._core._canonical import ensure_valid_export
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor
from ._common import describe
from .dense import from_dense
from .join import cat, joined_layout

__all__ = ["hstack", "vstack", "block_diag", "kron"]


def _tensors(name: str, tensors) -> list:
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{name} expects a non-empty sequence of sparse tensors")
    for k, t in enumerate(tensors):
        if not isinstance(t, SparseTensor):
            raise TypeError(f"{name} expects sparse tensors, got {type(t).__name__} at position {k}")
    return tensors


def hstack(tensors):
    """The tensors side by side: :func:`~sparsetensor.ops.join.cat` along dim 1 (dim 0 for 1-d
    tensors), as ``torch.hstack``.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.from_dense(np.eye(2), "csr")
    >>> st.hstack([a, a]).shape, st.vstack([a, a]).shape
    ((2, 4), (4, 2))
    """
    tensors = _tensors("hstack", tensors)
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    """The tensors one above the other: :func:`~sparsetensor.ops.join.cat` along dim 0, a 1-d
    tensor of size n taken as a (1, n) row, as ``torch.vstack``."""
    tensors = _tensors("vstack", tensors)
    return cat([t.unsqueeze(0) if t.ndim == 1 else t for t in tensors], 0)


def _empty(t, shape: tuple):
    """A tensor of ``shape`` without entries, of ``t``'s layout (csr, csc or coo), dtypes and device."""
    if t.layout is L.sparse_coo:
        e = COOTensor(np.zeros((2, 0), t.index_dtype), np.zeros((0,), t.dtype), shape, True, True)
    else:
        e = CompressedTensor(np.zeros(shape[0 if t.layout.compressed_rows else 1] + 1, t.index_dtype),
                             np.zeros(0, t.index_dtype), np.zeros(0, t.dtype), shape, t.layout, True)
    return e.to(t.device) if t.is_cuda else e


def _in_layout(t, like):
    """``t`` in the layout of ``like``, with its blocksize where that tiles ``t``'s shape, else in
    csr (csc) for a bsr (bsc) ``like`` (as :func:`~sparsetensor.ops.join.cat` joins)."""
    if like.layout is t.layout:
        return t
    layout, bs = joined_layout(like, [t])
    return t if layout is t.layout else t.coalesce().to_sparse(layout, blocksize=bs)


def block_diag(*tensors):
    """The block-diagonal matrix of ``tensors`` (2-d, or 1-d taken as one row), as
    ``torch.block_diag``: tensor k occupies rows and columns after those of tensors 0..k-1.

    Values are promoted with ``np.result_type``; the result has the first tensor's layout.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.from_dense(np.array([[1.0, 2.0]]), "csr")
    >>> st.block_diag(a, st.from_dense(np.eye(2), "coo")).to_dense()
    array([[1., 2., 0., 0.],
           [0., 0., 1., 0.],
           [0., 0., 0., 1.]])
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    tensors = _tensors("block_diag", tensors)
    backend_for(*tensors)  # ValueError for tensors on two devices
    for k, t in enumerate(tensors):
        if t.ndim not in (1, 2) or t.dense_dim or t.batch_dim:
            raise ValueError(f"block_diag: tensors[{k}] is a {describe(t, dtype=False)}; it takes 2-d (or 1-d) tensors "
                             "without batch or dense dims")
    # Each part is padded with empty parts to the full extent along its plain dim (csr: a row of
    # parts), then the rows are joined along the compressed dim: both are cat's kernels, in the
    # first tensor's compressed layout (csr for bsr, csc for bsc: a part need not start at a block).
    first = tensors[0]
    layout = L.sparse_coo if first.layout is L.sparse_coo else (
        L.sparse_csr if first.layout.compressed_rows else L.sparse_csc)
    parts = [(t.unsqueeze(0) if t.ndim == 1 else t).to_sparse(layout) for t in tensors]
    across = 0 if layout is L.sparse_csc else 1  # the dim the padding runs along
    total = sum(p.shape[across] for p in parts)
    lines, off = [], 0
    for p in parts:
        width = p.shape[across]
        before, after = (tuple(w if d == across else p.shape[d] for d in (0, 1)) for w in (off, total - off - width))
        line = [_empty(p, before), p, _empty(p, after)]
        lines.append(cat([x for x in line if x.shape[across]] or [p], across))
        off += width
    return _in_layout(cat(lines, 1 - across), first)


def kron(a, b):
    """The Kronecker product of ``a`` and ``b`` (sparse tensors, or one of them an array on the
    other's device), as ``torch.kron`` of the dense tensors: shape ``a.shape[d] * b.shape[d]`` per
    dim (the operand with fewer dims padded with leading dims of size 1), element ``a[i] * b[j]``
    at ``i * b.shape + j``.

    Batch dims of compressed operands count as dims; dense dims are not supported
    (``NotImplementedError``). Values are promoted with ``np.result_type``; indices are int64
    unless both operands' are int32 (an array operand's are the sparse one's) and the result's
    sizes fit. The result has the first
    sparse operand's layout; it is coalesced when both operands are.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = st.from_dense(np.array([[1, 2], [0, 3]]), "csr")
    >>> st.kron(a, np.eye(2, dtype=np.int64)).to_dense()
    array([[1, 0, 2, 0],
           [0, 1, 0, 2],
           [0, 0, 3, 0],
           [0, 0, 0, 3]])
    """
    if not isinstance(a, SparseTensor) and not isinstance(b, SparseTensor):
        raise TypeError(f"kron expects a sparse tensor, got {type(a).__name__} and {type(b).__name__}")
    like = a if isinstance(a, SparseTensor) else b
    a, b = (x if isinstance(x, SparseTensor) else from_dense(x, "coo", index_dtype=like.index_dtype) for x in (a, b))
    backend_for(a, b)  # ValueError for operands on two devices
    for x in (a, b):
        if x.dense_dim:
            raise NotImplementedError(f"kron of a {describe(x, dtype=False)}: dense dims are not supported; "
                                      "convert them to sparse dims first")
    n = max(a.ndim, b.ndim)
    # checked again here where a caller holds the arrays: the error then names its tensor
    a, b = (ensure_valid_export(x).to_sparse(L.sparse_coo) for x in (a, b))
    if a.index_dtype != b.index_dtype:  # one index dtype for the kernels
        a, b = (x._with_index_dtype(np.int64) for x in (a, b))
    dtype = np.result_type(a.dtype, b.dtype)
    # duplicates are summed in their own dtype (wrapping integers, bool's or), as the dense operand's
    # elements are: merged before the values are promoted
    a, b = (x.coalesce() if x.dtype != dtype else x for x in (a, b))
    a, b = (x.reshape((1,) * (n - x.ndim) + x.shape) for x in (a, b))
    shape = tuple(p * q for p, q in zip(a.shape, b.shape))
    both32 = a.index_dtype == b.index_dtype == np.int32
    index_dtype = np.dtype(np.int32 if both32 and max(shape, default=0) <= np.iinfo(np.int32).max else np.int64)
    if math.prod(shape) > np.iinfo(np.int64).max:
        raise ValueError(f"kron: the result's shape {shape} has more elements than an int64 counts")
    coalesced = a.is_coalesced() and b.is_coalesced()
    # an operand of the result dtype keeps its entries (astype to bool merges the duplicates of an
    # uncoalesced one: its values would no longer match these indices)
    va, vb = (x.values() if x.dtype == dtype else x.astype(dtype).values() for x in (a, b))
    idx, values, ordered = backend_for(a).kron_coo(a.indices(), va, b.indices(), vb, b.shape, index_dtype, coalesced)
    out = COOTensor(idx, values, shape, coalesced and ordered, True)
    if coalesced and not ordered:
        out = out.coalesce()  # distinct pairs: a sort
    return _in_layout(out, like) if like.layout is not L.sparse_coo else out
