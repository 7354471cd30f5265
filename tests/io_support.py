"""Helpers shared by the file I/O tests (tests/io)."""

import numpy as np

import sparsetensor as st
from conftest import random_dense, reference_compressed


def make_tensor(rng, layout, index_dtype=np.int64, dtype=np.float64, batch=(), dense=(), nnz=3):
    """A tensor of ``layout`` built from NumPy members (invariants checked), and its dense array.

    For coo, ``batch`` adds leading sparse dims (COO has no batch dims).
    """
    blocked = layout in ("bsr", "bsc")
    bs = (2, 3) if blocked else (1, 1)
    a = random_dense(rng, batch=batch, blocks=(3, 2), blocksize=bs, dense=dense, dtype=dtype, nnz=nnz)
    if layout == "coo":
        sparse_dim = a.ndim - len(dense)
        mask = (a != 0).reshape(a.shape[:sparse_dim] + (-1,)).any(axis=-1)
        idx = np.array(np.nonzero(mask), dtype=index_dtype).reshape(sparse_dim, -1)
        t = st.sparse_coo_tensor(idx, a[tuple(idx)], a.shape, is_coalesced=True)
    else:
        c, p, v = reference_compressed(a, layout, blocksize=bs, batch_dim=len(batch), index_dtype=index_dtype)
        t = st.sparse_compressed_tensor(c, p, v, a.shape, layout=layout)
    return t, a
