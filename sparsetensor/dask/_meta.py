"""Zero-size tensors that stand for a Dask array's chunks (its ``_meta``)."""

from __future__ import annotations

from ..interop.chunk import zeros

__all__ = ["meta_like"]


def meta_like(t, ndim: int | None = None):
    """A tensor of ``t``'s layout, value dtype, index dtype, blocksize and dim kinds, with every size 0.

    Dask computes an array's metadata by running each operation on such a tensor.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.dask import meta_like
    >>> m = meta_like(st.from_dense(np.eye(4, dtype=np.float32), "bsr", blocksize=(2, 2)))
    >>> m.layout, m.shape, m.dtype, m.blocksize
    (st.sparse_bsr, (0, 0), dtype('float32'), (2, 2))
    """
    if ndim is not None and ndim != t.ndim:
        raise ValueError(f"a meta of {ndim} dims for a {t.ndim}-d {t.layout.name} tensor")
    return zeros(t, (0,) * t.ndim)
