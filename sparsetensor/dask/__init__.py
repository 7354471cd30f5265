"""sparsetensor tensors as Dask chunks.

``import sparsetensor.dask`` registers the tensor classes with Dask (the chunk type and the
dispatch functions Dask calls on chunks, see :mod:`sparsetensor.dask._register`); importing
:mod:`sparsetensor` alone never imports Dask. What a tensor needs of its own (pickling,
``__dask_tokenize__``, ``__sizeof__``, operators that give way to Dask collections) is bound
by :mod:`sparsetensor.interop.chunk` at ``import sparsetensor``.

- :func:`from_sparse`: a Dask array cut from a tensor in memory (explicit sparse ``_meta``).
- :func:`load`: a Dask array over a file of :func:`sparsetensor.save`, each task reading its
  block of rows (csr/bsr) or columns (csc/bsc) from the mapped file.
- :func:`meta_like`: the zero-size tensor Dask uses as a chunk's metadata.
- :func:`sum`: ``x.sum`` with a cheaper aggregation of dense partial sums (row and column
  sums of compressed chunks): partials added, not joined; no aggregate task per block
  when the summed axes have one block.
- :func:`var`, :func:`std`: ``x.var()``/``x.std()`` from the stored elements of each chunk (Dask's
  own subtract a dense mean from every chunk, which sparse chunks refuse).

Ops on chunks that have no sparse implementation raise (``NotImplementedError``,
``TypeError`` or ``ValueError`` naming the op): nothing is densified silently.

Examples
--------
>>> import numpy as np, dask.array as da, sparsetensor as st, sparsetensor.dask
>>> t = st.from_dense(np.diag([1.0, 2.0, 3.0, 4.0]), "csr")
>>> x = da.from_array(t, chunks=(2, -1))
>>> d = da.ones((4, 2), chunks=(2, 2))
>>> (x @ d).compute(scheduler="sync")
array([[1., 1.],
       [2., 2.],
       [3., 3.],
       [4., 4.]])
>>> (x + x).T.compute(scheduler="sync").layout
st.sparse_csc
"""

from __future__ import annotations

from ._array import from_sparse, load
from ._meta import meta_like
from ._reduce import std, sum, var
from ._register import register

register()

__all__ = ["from_sparse", "load", "meta_like", "register", "std", "sum", "var"]
