"""What a tensor needs to be a chunk of another library's lazy array (Dask), without importing it.

- ``__reduce__``: pickling sends the member arrays and a few flags, nothing else. Under
  pickle protocol 5 (what ``distributed`` uses) the members travel as out-of-band buffers,
  i.e. as frames of their own, without a copy. Unpickling goes through :func:`rebuild`, which
  treats the members as input from outside: the O(1) checks always run, and a tensor the
  sender had validated is validated again (the full O(nnz) check, as :func:`sparsetensor.load`
  does), so a forged or corrupted pickle raises :class:`~sparsetensor.InvariantError` instead of
  reaching a kernel. A tensor the sender had never checked arrives never checked and is checked
  at its first kernel (:func:`sparsetensor._core._canonical.ensure_valid`), as it would have been there.
- ``__dask_tokenize__``: layout, shape, dtypes, flags and a BLAKE2 hash of the members, so Dask
  names a tensor without pickling it.
- ``__sizeof__``: the object plus its members' bytes, which ``dask.sizeof`` (``sys.getsizeof``)
  reports to ``distributed``'s memory manager.
- The binary operators and ``__array_ufunc__`` return ``NotImplemented`` for a lazy collection
  (anything with ``__dask_graph__``), so ``t @ dask_array`` and ``dask_array @ t`` stay lazy
  instead of computing the collection through ``np.asarray``.
- NumPy functions that Dask calls on chunks, added to ``__array_function__``'s whitelist:
  ``np.zeros_like`` (an nnz-0 tensor), ``np.nansum``, ``np.round``; ``np.ones_like``,
  ``np.full_like`` and ``np.empty_like`` raise ``ValueError`` (their result is dense).

The op table (:mod:`sparsetensor._api`) binds these methods and wrapped operators onto the
classes, and adds :data:`FUNCTIONS` to NumPy's function protocol, in one place.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .._core import _layout as L
from .._core._device import require_host
from .._core._from_arrays import sparse_compressed_tensor, sparse_coo_tensor
from .._core._tensor import COOTensor
from ..ops import reduce as _reduce

__all__ = ["rebuild", "tokenize", "reduce", "sizeof", "zeros", "is_lazy_collection", "defer_to_lazy", "defer_to_lazy_ufunc", "FUNCTIONS"]

# the operators that give way to a lazy collection (the other operand's reflected method runs)
def _members(t) -> tuple:
    require_host(t, "pickling or tokenizing")  # a device pointer means nothing in another process
    if isinstance(t, COOTensor):
        return (t.indices(), t.values())
    return (t.compressed_indices(), t.plain_indices(), t.values())


def rebuild(layout: str, shape: tuple, members: tuple, coalesced: bool, validated: bool):
    """A tensor from pickled parts, checked as input from outside (see the module docs).

    Examples
    --------
    >>> import pickle, sparsetensor as st
    >>> t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0])
    >>> u = pickle.loads(pickle.dumps(t))
    >>> u.col_indices(), u.is_coalesced()
    (array([0, 2, 1]), True)
    """
    if layout == "coo":
        indices, values = members
        return sparse_coo_tensor(indices, values, shape, check_invariants=validated, is_coalesced=coalesced)
    compressed, plain, values = members
    return sparse_compressed_tensor(compressed, plain, values, shape, layout=layout, check_invariants=validated)


def reduce(self):
    """``__reduce__``: :func:`rebuild` and the members (the tensor's own arrays, no copy)."""
    coalesced = self.is_coalesced()
    return rebuild, (self.layout.name, tuple(int(s) for s in self.shape), _members(self), coalesced,
                     self._validated)


def tokenize(self) -> tuple:
    """``__dask_tokenize__``: a deterministic name of this tensor's contents.

    Examples
    --------
    >>> import sparsetensor as st
    >>> t = st.sparse_csr_tensor([0, 1], [0], [1.0])
    >>> t.__dask_tokenize__() == t.clone().__dask_tokenize__()
    True
    >>> t.__dask_tokenize__() == (t * 2).__dask_tokenize__()
    False
    """
    h = hashlib.blake2b(digest_size=16)
    for a in _members(self):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
    return ("sparsetensor", self.layout.name, tuple(self.shape), self.dtype.str, self.index_dtype.str,
            bool(self.is_coalesced()), h.hexdigest())


def sizeof(self) -> int:
    """``__sizeof__``: the object and the bytes of its members (what ``dask.sizeof`` reports)."""
    return object.__sizeof__(self) + sum(a.nbytes for a in _members(self))


def zeros(t, shape=None, dtype=None):
    """An all-zero (nnz 0) tensor like ``t``: its layout, dim kinds, blocksize and index dtype.

    ``shape`` defaults to ``t``'s; a blocked tensor whose block does not divide ``shape`` gives
    csr/csc, and a ``shape`` of another length gives coo. ``np.zeros_like(t)`` calls this
    (Dask makes the metadata of new arrays with it).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> z = np.zeros_like(st.from_dense(np.eye(2), "csc"), shape=(3, 4))
    >>> z.layout, z.shape, z.nnz
    (st.sparse_csc, (3, 4), 0)
    """
    shape = tuple(int(s) for s in (t.shape if shape is None else np.atleast_1d(shape)))
    dt = t.dtype if dtype is None else np.dtype(dtype)
    it = t.index_dtype
    if isinstance(t, COOTensor) or len(shape) != t.ndim:
        sparse_dim = t.sparse_dim if len(shape) == t.ndim else len(shape)
        return sparse_coo_tensor(np.zeros((sparse_dim, 0), it), np.zeros((0,) + shape[sparse_dim:], dt), shape,
                                 is_coalesced=True)
    m = t.batch_dim
    layout = t.layout
    block = tuple(t.blocksize) if layout.blocked else ()
    if block and (shape[m] % block[0] or shape[m + 1] % block[1]):
        layout, block = (L.sparse_csr if layout.compressed_rows else L.sparse_csc), ()
    ncompressed = shape[m] // (block or (1, 1))[0] if layout.compressed_rows else shape[m + 1] // (block or (1, 1))[1]
    return sparse_compressed_tensor(np.zeros(shape[:m] + (ncompressed + 1,), it), np.zeros(shape[:m] + (0,), it),
                                    np.zeros(shape[:m] + (0,) + block + shape[m + 2:], dt), shape, layout=layout.name)


def _zeros_like(a, dtype=None, order="K", subok=True, shape=None, **kwargs):
    if order not in ("K", "A", "C") or kwargs.get("device") not in (None, "cpu"):
        raise TypeError(f"np.zeros_like of a sparse tensor: order={order!r} / device are not supported")
    return zeros(a, shape, dtype)


def _broadcast_to(a, shape, subok=False):
    """``np.broadcast_to`` of a sparse tensor: itself for its own shape, and a tensor with no
    specified element broadcast to any shape NumPy allows (Dask's ``zeros_like`` broadcasts one
    of shape 1); a tensor with elements refuses (every repeat would be a stored entry)."""
    shape = tuple(int(s) for s in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
    if np.broadcast_shapes(a.shape, shape) != shape:
        raise ValueError(f"np.broadcast_to: a {a.layout.name} tensor of shape {a.shape} does not broadcast to {shape}")
    if shape == a.shape:
        return a
    if a.nnz == 0 or 0 in shape:
        return zeros(a, shape)
    lead = len(shape) - a.ndim
    if shape[lead:] == a.shape and all(s == 1 for s in shape[:lead]):  # new leading dims of size 1: no repeat
        for _ in range(lead):
            a = a.unsqueeze(0)
        return a
    raise NotImplementedError(f"np.broadcast_to of a {a.layout.name} tensor of shape {a.shape} with stored elements "
                              f"to {shape}: each repeat would be stored; repeat it with st.cat or st.stack")


def _dense_like(name):
    def refuse(a, *args, **kwargs):
        raise ValueError(f"np.{name} of a sparse tensor is dense (every element is set): use np.{name} on an array of "
                         "its shape, or np.zeros_like for a sparse result")
    return refuse


def _nan_to_zero(a):
    a = a.coalesce()  # NaN and 5.0 stored for one element are one NaN element: dropped whole
    v = a.values()
    return a._replace_values(np.where(np.isnan(v), np.zeros((), v.dtype), v)) if v.dtype.kind in "fc" else a


def _nansum(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    if out is not None:
        raise TypeError("np.nansum(..., out=...) is not supported for sparse tensors")
    return _reduce.sum(_nan_to_zero(a), axis, bool(keepdims), dtype=dtype)


def _round(a, decimals=0, out=None):
    if out is not None:
        raise TypeError("np.round(..., out=...) is not supported for sparse tensors")
    a = a.coalesce()  # rounding does not commute with the sum of repeats
    return a._replace_values(np.round(a.values(), decimals))


def is_lazy_collection(x) -> bool:
    """True for a Dask collection (an object whose type has ``__dask_graph__``)."""
    tx = type(x)  # arrays and scalars, the common operands, without hasattr's failed lookup
    return tx not in _EAGER and hasattr(tx, "__dask_graph__")


_EAGER = frozenset((np.ndarray, int, float, complex, bool))


def defer_to_lazy(method):
    def op(self, other):
        if is_lazy_collection(other):
            return NotImplemented
        return method(self, other)

    op.__name__ = op.__qualname__ = method.__name__
    op.__doc__ = method.__doc__
    op.__wrapped__ = method
    op.defers_to_lazy = True
    return op


def defer_to_lazy_ufunc(method):
    def array_ufunc(self, ufunc, name, *inputs, **kwargs):
        if any(is_lazy_collection(x) for x in inputs + tuple(kwargs.get("out") or ())):
            return NotImplemented
        return method(self, ufunc, name, *inputs, **kwargs)

    array_ufunc.__name__ = array_ufunc.__qualname__ = "__array_ufunc__"
    array_ufunc.__wrapped__ = method
    array_ufunc.defers_to_lazy = True
    return array_ufunc


FUNCTIONS = [  # NumPy functions added to __array_function__'s whitelist
    (np.zeros_like, _zeros_like),
    (np.broadcast_to, _broadcast_to),
    (np.nansum, _nansum),
    (np.round, _round),
    (np.around, _round),
    (np.ones_like, _dense_like("ones_like")),
    (np.full_like, _dense_like("full_like")),
    (np.empty_like, _dense_like("empty_like")),
]
