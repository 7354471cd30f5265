"""SDDMM on the CPU: ``beta * input + alpha * (mat1 @ mat2)`` at the pattern of a csr ``input``
(the ``sddmm`` kernel of :mod:`sparsetensor._backend.cpu`, over ``_lib/_spgemm``'s
``sampled_addmm``)."""

from __future__ import annotations

import math

import numpy as np

from ..._core import _layout as L
from ..._core._canonical import ensure_valid
from ..._core._config import num_threads
from ..._lib import _spgemm as _kernels
from ..._core._tensor import CompressedTensor
from .._views import kernel_dtype

__all__ = ["sddmm"]


def sddmm(input, mat1, mat2, batch: tuple, beta, alpha, threads=None) -> CompressedTensor:
    """The csr tensor ``beta * input + alpha * (mat1 @ mat2)`` sampled at ``input``'s pattern.

    The op (:func:`sparsetensor.ops.spgemm.sampled_addmm`) has resolved everything: ``input`` a
    csr tensor without dense dims, ``mat1`` ``b1 + (M, K)`` and ``mat2`` ``b2 + (K, N)`` NumPy
    arrays of its dtype, ``batch`` the broadcast of the three batch shapes, ``beta``/``alpha``
    numbers of the dtype's kind. Indices are checked (and 5.6 repaired) here before the kernel
    reads them."""
    dtype = input.dtype
    m = input.batch_dim
    M, N = input.shape[m:m + 2]
    K = mat1.shape[-1]
    in_batch, b1, b2 = input.shape[:m], mat1.shape[:-2], mat2.shape[:-2]
    kdt, _ = kernel_dtype(dtype)
    inp = ensure_valid(input, repair=True, threads=threads)
    B, B1, B2 = math.prod(batch), math.prod(b1), math.prod(b2)
    c, p, v = inp.compressed_indices(), inp.plain_indices(), inp.values()
    nnz = inp.nnz
    if in_batch != batch:  # the pattern repeats over the broadcast batch
        c = np.broadcast_to(c, batch + c.shape[-1:]).copy()
        p = np.broadcast_to(p, batch + (nnz,)).copy()
        v = np.broadcast_to(v, batch + (nnz,))
    v2 = np.ascontiguousarray(v, dtype=kdt).reshape(B, nnz)
    m1 = np.ascontiguousarray(mat1, dtype=kdt).reshape(B1, M, K)
    m2t = np.ascontiguousarray(mat2.swapaxes(-1, -2), dtype=kdt).reshape(B2, N, K)
    map1 = np.broadcast_to(np.arange(B1, dtype=np.int64).reshape(b1), batch).ravel()
    map2 = np.broadcast_to(np.arange(B2, dtype=np.int64).reshape(b2), batch).ravel()
    out = np.empty((B, nnz), dtype=kdt)
    _kernels.sampled_addmm(c.reshape(B, M + 1), p.reshape(B, nnz), v2, m1, m2t, map1, map2, beta, alpha, out,
                           num_threads(threads, B * nnz * max(K, 1)))
    values = out.astype(dtype, copy=False).reshape(batch + (nnz,))
    return CompressedTensor(c, p, values, batch + (M, N), L.sparse_csr, canonical=True)
