"""Ops that move, add and drop dims: permute, unsqueeze, squeeze, reshape, flatten.

They are compositions of :func:`~sparsetensor.ops.select.transpose`,
:func:`~sparsetensor.ops.join.stack` of one tensor and :func:`~sparsetensor.ops.select.select`
at index 0 of a dim of size 1, so they run wherever those do (every layout, the host and a
device) and keep their rules: dims move only among dims of their kind (batch, sparse, dense),
and a compressed tensor keeps its two sparse dims. PyTorch has these for COO tensors only.

:func:`reshape` (and :func:`flatten`, a reshape) is SciPy's ``coo_array.reshape`` for every
layout: the coordinates of each stored element are re-expressed over the new shape in C (or F)
order by one kernel of either backend (``reshape_coo``); a compressed tensor whose batch dims
alone change keeps its arrays (reshaped views).
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .._core import _layout as L
from .._backend import backend_for
from .._core._canonical import ensure_valid_export
from .._core._shape_checks import normalize_dim
from .._core._tensor import COOTensor, CompressedTensor
from ._common import describe
from ._shape_common import _kind, _require_sparse
from .join import stack
from .select import select, transpose

__all__ = ["permute", "unsqueeze", "squeeze", "reshape", "flatten", "permute_steps", "squeeze_dims", "reshape_target",
           "reshape_keeps_order", "flatten_shape", "reshape_coo_split"]


def permute_steps(t, dims) -> list:
    """The transposes ``[(i, j), ...]`` that permute ``t``'s dims to ``dims`` (a permutation of
    ``range(t.ndim)``, negatives counted from the end), one after another; errors as :func:`permute`."""
    n = t.ndim
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    try:
        order = [normalize_dim(operator.index(d), n, "permute") if n else operator.index(d) for d in dims]
    except TypeError:
        raise TypeError(f"permute takes ints, got {dims!r}") from None
    if sorted(order) != list(range(n)):
        raise ValueError(f"permute: dims {tuple(dims)} are not a permutation of the {n} dims of a "
                         f"{describe(t, dtype=False)}")
    for i, d in enumerate(order):
        if _kind(t, d) != _kind(t, i):
            raise NotImplementedError(f"permute{tuple(order)} of a {describe(t, dtype=False)} puts {_kind(t, d)} dim {d} "
                                      f"at {_kind(t, i)} dim {i}; dims move only among dims of their kind "
                                      "(batch, sparse, dense)")
    at = list(range(n))  # at[i]: the original dim now at position i
    steps = []
    for i, d in enumerate(order):
        j = at.index(d)
        if j != i:
            steps.append((i, j))
            at[i], at[j] = at[j], at[i]
    return steps


def permute(t, *dims):
    """``t`` with its dims in the order ``dims`` (``t.permute(2, 0, 1)`` or ``t.permute((2, 0, 1))``),
    as PyTorch's ``permute``: dim ``i`` of the result is dim ``dims[i]`` of ``t``.

    Dims move only among dims of their kind (batch, sparse, dense; a COO tensor's leading dims
    are all sparse); another permutation raises ``NotImplementedError``. Swapping the two
    sparse dims of a compressed tensor gives the transposed layout (csr <-> csc), as
    :func:`~sparsetensor.ops.select.transpose` does.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = np.arange(24.0).reshape(2, 3, 4) + 1
    >>> t = st.from_dense(a, "csr", batch_dim=1)
    >>> p = t.permute(0, 2, 1)
    >>> p.layout, p.shape, bool((p.to_dense() == a.transpose(0, 2, 1)).all())
    (st.sparse_csc, (2, 4, 3), True)
    """
    _require_sparse(t, "permute")
    for i, j in permute_steps(t, dims):
        t = transpose(t, i, j)
    return t


def unsqueeze(t, dim: int):
    """``t`` with a new dim of size 1 at ``dim`` (``-t.ndim - 1 <= dim <= t.ndim``), as PyTorch's.

    A COO tensor gets a sparse dim (``dim <= sparse_dim``: a row of zeros in its indices) or a
    dense dim; a compressed tensor a batch dim (``dim <= batch_dim``) or a dense dim (after its
    sparse dims). A dim between the two sparse dims of a compressed tensor would be a third
    sparse dim: ``NotImplementedError``.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.eye(2), "csr")
    >>> [(u.shape, u.batch_dim, u.dense_dim) for u in (t.unsqueeze(0), t.unsqueeze(-1))]
    [((1, 2, 2), 1, 0), ((2, 2, 1), 0, 1)]
    """
    _require_sparse(t, "unsqueeze")
    d = normalize_dim(dim, t.ndim + 1, "unsqueeze")
    if not isinstance(t, COOTensor) and d == t.batch_dim + 1:
        raise NotImplementedError(f"unsqueeze({dim}) of a {describe(t, dtype=False)}: a dim between its two sparse dims "
                                  f"would be a third sparse dim; convert to coo first")
    return stack([t], d)


def squeeze_dims(t, dim=None) -> list:
    """The dims :func:`squeeze` drops, last first (errors as :func:`squeeze`)."""
    ones = [d for d in range(t.ndim) if t.shape[d] == 1]
    if dim is None:
        picked = ones
    else:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        picked = sorted({normalize_dim(d, t.ndim, "squeeze") for d in dims} & set(ones))
    if isinstance(t, COOTensor):
        needed = [0] if t.sparse_dim and all(d in picked for d in range(t.sparse_dim)) else []  # a COO tensor keeps a sparse dim
    else:
        needed = [d for d in (t.batch_dim, t.batch_dim + 1) if d in picked]
    if needed and dim is not None:
        what = "its last sparse dim" if isinstance(t, COOTensor) else "one of its two sparse dims"
        raise NotImplementedError(f"squeeze({dim}) of a {describe(t, dtype=False)} would drop {what} (dim {needed[0]}); "
                                  + ("use t.to_dense()" if isinstance(t, COOTensor) else "convert to coo first"))
    return [d for d in reversed(picked) if d not in needed]


def squeeze(t, dim=None):
    """``t`` without dims of size 1: every one (``dim=None``) or those of ``dim`` (an int or a tuple;
    a dim whose size is not 1 is left, as PyTorch does).

    ``dim=None`` leaves the sparse dims a tensor needs (a compressed tensor's two, a COO
    tensor's last); naming one raises ``NotImplementedError``.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.ones((1, 3, 1)), "coo")
    >>> t.squeeze().shape, t.squeeze(2).shape, t.squeeze(1).shape
    ((3,), (1, 3), (1, 3, 1))
    """
    _require_sparse(t, "squeeze")
    for d in squeeze_dims(t, dim):
        t = select(t, d, 0)
    return t


_I64_MAX = np.iinfo(np.int64).max


def reshape_target(t, shape) -> tuple:
    """``shape`` (ints, or one tuple of them; one ``-1`` at most, inferred) as the new shape of
    ``t``, with NumPy's errors: ValueError where the sizes differ."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, np.ndarray)):
        shape = tuple(shape[0])
    try:
        dims = [operator.index(s) for s in shape]
    except TypeError:
        raise TypeError(f"reshape takes ints, got {shape!r}") from None
    size = math.prod(t.shape)
    if any(s < -1 for s in dims) or dims.count(-1) > 1:
        raise ValueError(f"reshape: {tuple(dims)} has a negative size other than one -1 (the inferred size)")
    if -1 in dims:
        known = math.prod(s for s in dims if s != -1)
        dims[dims.index(-1)] = size // known if known and size % known == 0 else -1
    if -1 in dims or math.prod(dims) != size:
        raise ValueError(f"cannot reshape a {describe(t, dtype=False)} (size {size}) into shape {tuple(shape)}")
    return tuple(dims)


def _split(t: COOTensor, new: tuple):
    """Where ``new`` splits into sparse and dense dims for COO ``t``: the same number of dense dims
    when the sizes allow, else the fewest; None where no split keeps ``t``'s sparse coordinates."""
    span = math.prod(t.shape[:t.sparse_dim])
    items = math.prod(t.shape[t.sparse_dim:])
    ks = [k for k in range(len(new) + 1)
          if math.prod(new[:k]) == span and math.prod(new[k:]) == items]
    same = len(new) - t.dense_dim
    return same if same in ks else (ks[-1] if ks else None)


def reshape_keeps_order(t, new: tuple, order: str = "C") -> bool:
    """Whether :func:`reshape` of ``t`` to ``new`` keeps the stored elements in their order (the
    values only change shape): always for COO, and for a compressed tensor whose batch dims alone
    change (C order)."""
    if isinstance(t, COOTensor):
        return True
    tail = t.shape[t.batch_dim:]
    return order == "C" and len(new) >= len(tail) and new[len(new) - len(tail):] == tail


def reshape_coo_split(t: COOTensor, new: tuple, order: str, sparse_dims: int) -> COOTensor:
    """COO ``t`` reshaped to ``new`` with its first ``sparse_dims`` dims sparse (a split the
    caller knows to keep ``t``'s sparse coordinates: a gradient going back to its input's dims)."""
    return _reshape_coo(t, tuple(new), order, None, split=sparse_dims)


def _reshape_coo(t: COOTensor, new: tuple, order: str, threads, src=None, split=None) -> COOTensor:
    """The body of COO (``src``: the tensor the caller was given, named in errors; ``split``: the
    number of sparse dims of the result, else :func:`_split`'s)."""
    what = describe(t if src is None else src, dtype=False)
    k = _split(t, new) if split is None else split
    S = t.sparse_dim
    if k is None and math.prod(new) == 0:  # no element: an empty tensor of the new shape, every dim sparse
        e = COOTensor(np.zeros((len(new), 0), t.index_dtype), np.zeros((0,), t.dtype), new, True, True)
        return e.to(t.device) if t.is_cuda else e
    if k is None:
        raise NotImplementedError(f"reshape of a {what} to {new} would mix its sparse dims "
                                  f"{t.shape[:S]} with its dense dims {t.shape[S:]}; convert to a tensor without "
                                  "dense dims first (to_dense, then from_dense)")
    sparse_new, dense_new = new[:k], new[k:]
    if order == "F" and (t.dense_dim or dense_new):
        raise NotImplementedError(f"reshape(order='F') of a {what} to {new}: column-major "
                                  "order across dense dims is not stored in the values' layout; use order='C'")
    if math.prod(t.shape[:S]) > _I64_MAX:
        raise NotImplementedError(f"reshape of a {what}: its sparse dims have more "
                                  "coordinates than an int64 offset holds")
    t = ensure_valid_export(t, threads=threads)  # coordinates are re-expressed: C4/C5 first (again if held outside)
    idx = t.indices()
    if sparse_new != t.shape[:S] or order == "F":
        fits = all(s <= np.iinfo(idx.dtype).max for s in sparse_new)
        idx = backend_for(t).reshape_coo(idx, t.shape[:S], sparse_new, order, idx.dtype if fits else np.dtype(np.int64),
                                         threads)
    values = t.values().reshape((t.nnz,) + dense_new)
    # a bijection of coordinates: distinct stay distinct, and C order keeps them sorted
    return COOTensor(idx, values, new, t.is_coalesced() and order == "C", True)


def reshape(t, *shape, order: str = "C"):
    """``t`` with the new ``shape`` (``t.reshape(3, 4)``, ``t.reshape((3, -1))``), its elements in
    C (row-major, default) or F (column-major) order, as NumPy's and SciPy's ``reshape``.

    The layout is kept. A COO tensor's dense dims stay dense (the trailing dims of ``shape``
    whose sizes multiply to theirs; ``NotImplementedError`` where no such split exists);
    ``order="F"`` is for tensors without dense dims. A compressed tensor whose batch dims alone
    change shares its arrays (views); otherwise it is reshaped as COO (batch and sparse dims
    together) and converted back, so the result needs two sparse dims, the same nnz in every
    batch, and for bsr/bsc sizes its blocksize divides. A coalesced (canonical) tensor gives a
    coalesced one; the index dtype is kept where the new sizes fit it (else int64).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> a = np.arange(12.0).reshape(3, 4) % 5
    >>> t = st.from_dense(a, "coo")
    >>> r = t.reshape(2, -1)
    >>> r.shape, bool((r.to_dense() == a.reshape(2, 6)).all())
    ((2, 6), True)
    >>> c = st.from_dense(a, "csr").reshape(6, 2, order="F")
    >>> c.layout, bool((c.to_dense() == a.reshape(6, 2, order="F")).all())
    (st.sparse_csr, True)
    """
    _require_sparse(t, "reshape")
    given, order = order, {"C": "C", "F": "F", "A": "C"}.get(str(order).upper())  # "A": a tensor has no memory order
    if order is None:
        raise ValueError(f"reshape: order must be 'C', 'F' or 'A', got {given!r}")
    new = reshape_target(t, shape)
    if new == t.shape:
        return t
    if isinstance(t, COOTensor):
        return _reshape_coo(t, new, order, None)
    if reshape_keeps_order(t, new, order):
        nb = new[:len(new) - (t.ndim - t.batch_dim)]
        c, p, v = (a.reshape(nb + a.shape[t.batch_dim:]) for a in (t.compressed_indices(), t.plain_indices(), t.values()))
        return CompressedTensor(c, p, v, new, t.layout, t._canonical)
    coo = _reshape_coo(t.to_sparse(L.sparse_coo), new, order, None, t)
    if coo.sparse_dim < 2:
        raise NotImplementedError(f"reshape of a {describe(t, dtype=False)} to {new} leaves {coo.sparse_dim} sparse "
                                  f"dim; a {t.layout.name} tensor has two: reshape t.to_sparse_coo() instead")
    try:
        return coo.coalesce().to_sparse(t.layout, blocksize=t.blocksize if t.layout.blocked else None)
    except ValueError as e:  # batches of different nnz, or sizes the blocksize does not divide
        raise ValueError(f"reshape of a {describe(t, dtype=False)} to {new}: {e}") from None


def flatten(t, start_dim: int = 0, end_dim: int = -1):
    """``t`` with dims ``start_dim..end_dim`` made one (their sizes multiplied), as PyTorch's
    ``flatten``: a :func:`reshape` (C order), with its rules.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.eye(4).reshape(2, 2, 4), "coo")
    >>> t.flatten().shape, t.flatten(1).shape
    ((16,), (2, 8))
    """
    _require_sparse(t, "flatten")
    return reshape(t, flatten_shape(t, start_dim, end_dim))


def flatten_shape(t, start_dim: int = 0, end_dim: int = -1) -> tuple:
    """The shape :func:`flatten` gives ``t`` (its errors); a 0-d tensor's is ``(1,)``, as in PyTorch."""
    ndim = max(t.ndim, 1)  # dims 0 and -1 of a 0-d tensor name its one element, as in PyTorch
    s = normalize_dim(start_dim, ndim, "flatten")
    e = normalize_dim(end_dim, ndim, "flatten")
    if not t.ndim:
        return (1,)
    if s > e:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return t.shape[:s] + (math.prod(t.shape[s:e + 1]),) + t.shape[e + 1:]
