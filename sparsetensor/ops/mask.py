"""sparse_mask: a tensor's values at another tensor's pattern (the rules are
:mod:`sparsetensor.ops.shape`'s).
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import backend_for
from .._core import _layout as L
from .._core._canonical import ensure_valid_export
from .._core._dtypes import VALUE_DTYPES, native
from .._core._device import device_array, is_device_array
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor
from ._common import describe
from ._shape_common import _require_sparse

__all__ = ["sparse_mask"]


# -- sparse_mask -------------------------------------------------------------------------------------
def _coo_coords(mask: COOTensor, threads) -> tuple:
    """The body of COO: ``(mask, its indices)``, not yet bounds-checked (see :func:`_linear`);
    a coalesced flag given without a check is checked first (C6), as the result keeps it."""
    if mask.is_coalesced():
        mask = ensure_valid_export(mask, threads=threads)
    return mask, mask.indices()


def _compressed_coords(mask: CompressedTensor, threads) -> tuple:
    """The body of the compressed layouts: ``(valid mask, coordinates (S, N) of
    every element of its values in order)``: the coordinates come from the indices, so a mask whose
    caller may have written them since the check is checked again."""
    mask = ensure_valid_export(mask, threads=threads)
    m = mask.batch_dim
    batch = mask.shape[:m]
    B = math.prod(batch)
    c = mask.compressed_indices().reshape(B, mask.compressed_indices().shape[-1])
    n, nnz = c.shape[1] - 1, mask.nnz
    comp = np.repeat(np.tile(np.arange(n, dtype=np.int64), B), np.diff(c, axis=1).reshape(-1))
    plain = mask.plain_indices().reshape(-1).astype(np.int64)
    brow, bcol = (comp, plain) if mask.layout.compressed_rows else (plain, comp)
    rb, cb = mask.blocksize
    row = (brow[:, None, None] * rb + np.arange(rb)[None, :, None]).repeat(cb, axis=2).reshape(-1)
    col = (bcol[:, None, None] * cb + np.arange(cb)[None, None, :]).repeat(rb, axis=1).reshape(-1)
    bat = np.repeat(np.arange(B, dtype=np.int64), nnz * rb * cb)
    coords = np.empty((m + 2, row.shape[0]), dtype=np.int64)
    if m:
        coords[:m] = np.unravel_index(bat, batch)
    coords[m], coords[m + 1] = row, col
    return mask, coords


def _linear(coords: np.ndarray, sparse: tuple, mask, threads) -> np.ndarray:
    """Row-major linear positions of ``coords`` in ``sparse``; out-of-bounds mask indices raise
    InvariantError (C4/C5)."""
    if not sparse:  # no sparse dim (a 0-d coo tensor): every entry is the one element
        return np.zeros(coords.shape[1], np.int64)
    try:
        return np.ravel_multi_index(coords, sparse)
    except ValueError:
        ensure_valid_export(mask, threads=threads)  # an out-of-bounds index raises InvariantError (C4/C5) here
        raise


def _lookup(t, coords: np.ndarray, mask, threads) -> np.ndarray:
    """The values of sparse ``t`` at element coordinates ``coords`` (zero where unspecified)."""
    coo = t.to_sparse(L.sparse_coo, threads=threads).coalesce(threads=threads)  # compressed -> coo is coalesced
    S = coo.sparse_dim
    sparse = coo.shape[:S]
    out = np.zeros((coords.shape[1],) + coo.shape[S:], dtype=coo.dtype)
    if coords.shape[1] == 0:
        return out
    if coo.nnz == 0:
        _linear(coords, sparse, mask, threads)  # still check the mask's indices
        return out
    if math.prod(sparse) - 1 > np.iinfo(np.int64).max:
        raise NotImplementedError(f"sparse_mask of a sparse {describe(t, dtype=False)}: the sparse sizes {sparse} are too large to "
                                  "linearise into int64 keys")
    keys = _linear(coo.indices(), sparse, coo, threads)
    want = _linear(coords, sparse, mask, threads)
    pos = np.minimum(np.searchsorted(keys, want), keys.shape[0] - 1)
    found = keys[pos] == want
    out[found] = coo.values()[pos[found]]
    return out


def sparse_mask(t, mask, *, threads: int | None = None):
    """``t``'s values at ``mask``'s specified elements, in ``mask``'s layout and pattern
    (PyTorch's ``t.sparse_mask(mask)``).

    ``t`` is an array or a sparse tensor of any layout (values where ``t`` specifies
    none are zero; duplicates in unchecked input are summed); ``mask`` is a sparse tensor
    of ``t``'s shape (and, when ``t`` is sparse, its dense_dim), else ``ValueError`` naming
    both. The result has ``t``'s dtype and ``mask``'s index arrays (copied), blocks and
    coalesced flag; for blocked masks every item of a block is looked up. An uncoalesced
    mask with repeated elements gives each copy the value (so its ``to_dense()`` sums
    them, as in PyTorch).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import sparse_mask
    >>> mask = st.sparse_csr_tensor([0, 1, 2], [1, 0], [True, True], size=(2, 2))
    >>> sparse_mask(np.array([[1.0, 2.0], [3.0, 4.0]]), mask).values()
    array([2., 3.])
    """
    _require_sparse(mask, "sparse_mask", "mask")
    sparse_t = isinstance(t, SparseTensor)
    on_device = mask.is_cuda or (t.is_cuda if sparse_t else is_device_array(t))
    a = t if sparse_t else (device_array(t) if is_device_array(t) else native(np.asarray(t)))
    if a.shape != mask.shape or (sparse_t and a.dense_dim != mask.dense_dim):
        what = f"a {describe(a)} with dense_dim={a.dense_dim}" if sparse_t else f"an array of shape {a.shape}"
        raise ValueError(f"sparse_mask: t is {what} but mask is a {describe(mask)} with dense_dim={mask.dense_dim}; "
                         "shapes (and dense dims) must agree")
    if not sparse_t and a.dtype not in VALUE_DTYPES:
        raise TypeError(f"sparse_mask: unsupported value dtype {a.dtype}")
    if on_device:
        return _on_device(a, mask, threads)
    mask, coords = _ELEMENT_COORDS_BY_LAYOUT[type(mask)](mask, threads)
    if sparse_t:
        gathered = _lookup(a, coords, mask, threads)
    else:
        sparse = a.shape[:coords.shape[0]]
        rows = np.ascontiguousarray(a).reshape((math.prod(sparse),) + a.shape[coords.shape[0]:])
        gathered = np.take(rows, _linear(coords, sparse, mask, threads), axis=0)
    vshape = mask.values().shape
    values = np.ascontiguousarray(gathered).reshape(vshape)
    return mask._replace_values(values, copy_indices=True)


def _on_device(t, mask, threads):
    """sparse_mask of operands on one CUDA device (a host operand with a device one raises
    ValueError naming both devices): a dense ``t`` sampled at the mask's entries, a sparse one
    looked up there, by the device's kernels."""
    backend = backend_for(t, mask)
    mask = ensure_valid_export(mask, threads=threads)  # coo: bounds; compressed: canonical
    if isinstance(t, SparseTensor):
        values = backend.lookup(t.to_sparse(L.sparse_coo, threads=threads).coalesce(threads=threads), mask, threads)
    else:
        values = backend.sample_dense(mask, t, threads)
    return mask._replace_values(values, copy_indices=True)


# Each op's body per layout family, picked where the op reads it: ``TABLE[type(t)](t, ...)``.
_ELEMENT_COORDS_BY_LAYOUT = {COOTensor: _coo_coords, CompressedTensor: _compressed_coords}
