"""Ops that move, add and drop dims: permute, unsqueeze, squeeze.

They are compositions of :func:`~sparsetensor.ops.select.transpose`,
:func:`~sparsetensor.ops.join.stack` of one tensor and :func:`~sparsetensor.ops.select.select`
at index 0 of a dim of size 1, so they run wherever those do (every layout, the host and a
device) and keep their rules: dims move only among dims of their kind (batch, sparse, dense),
and a compressed tensor keeps its two sparse dims. PyTorch has these for COO tensors only.
"""

from __future__ import annotations

import operator

from .._core._shape_checks import normalize_dim
from .._core._tensor import COOTensor
from ._common import describe
from ._shape_common import _kind, _require_sparse
from .join import stack
from .select import select, transpose

__all__ = ["permute", "unsqueeze", "squeeze", "permute_steps", "squeeze_dims"]


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
