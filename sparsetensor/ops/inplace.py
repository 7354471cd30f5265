"""The in-place ops: zero_, copy_ and resize_as_ (the rules are :mod:`sparsetensor.ops.shape`'s),
the arithmetic ones (``add_``, ``sub_``, ``mul_``, ``div_``, and ``+= -= *= /=``), every
pointwise function's ``name_`` (``abs_``, ``sqrt_``, ``pow_``, ...) and ``transpose_``/``t_``.

They reassign the tensor's member attributes; the old arrays are not written, so other
tensors sharing them are unaffected (a tensor whose values NumPy, SciPy or torch also hold
stops sharing them). A tensor on a CUDA device gets new device arrays (``resize_as_`` of a
non-empty device tensor only where no array has to grow).

An arithmetic or pointwise ``name_`` is the op ``name`` whose result the tensor then takes in
its own layout, blocksize, value dtype and index dtype, as torch's in-place ops do: the result
must have the tensor's shape (the other operand broadcasts to it) and be sparse, and its dtype
must cast to the tensor's by NumPy's ``same_kind`` rule (``int64`` ``mul_(2.5)`` raises, as
``a *= 2.5`` does for an integer NumPy array).
"""

from __future__ import annotations

import numpy as np

from .._backend import backend_for
from .._core._device import device_array, is_device_array
from .._core._canonical import ensure_valid
from .._core._dtypes import check_fits
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor, frozen, held_outside
from ._common import describe
from ._shape_common import _require_sparse, _contiguous_values
from .select import transpose

__all__ = ["zero_", "copy_", "resize_as_", "in_place", "in_place_operator", "transpose_", "t_"]


def _zeros(like, shape, dtype):
    """A zero-filled array of ``shape`` and ``dtype`` on the device of array ``like``."""
    if type(like) is np.ndarray:
        return np.zeros(shape, dtype=dtype)
    return type(like).zeros(shape, dtype, like.device)


# -- zero_ ------------------------------------------------------------------------------------------
def zero_(t):
    """Drop every specified element, in place: nnz becomes 0, shape, layout and dtypes stay.

    In place means that ``t``'s member attributes are replaced by new, empty arrays; the
    old arrays are not written (tensors sharing them are unaffected). A COO result is
    coalesced (as in PyTorch).

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops.shape import zero_
    >>> t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [5.0, 6.0], size=(2, 2))
    >>> zero_(t) is t, t.nnz, t.crow_indices()
    (True, 0, array([0, 0, 0]))
    """
    _require_sparse(t, "zero_")
    return _ZERO_BY_LAYOUT[type(t)](t)


def _zero_coo(t: COOTensor) -> COOTensor:
    """The body of COO."""
    v = t.values()
    t._indices = frozen(_zeros(v, (t.sparse_dim, 0), t.index_dtype))
    t._values = _zeros(v, (0,) + t.shape[t.sparse_dim:], t.dtype)
    t._coalesced = True
    return t


def _zero_compressed(t: CompressedTensor) -> CompressedTensor:
    """The body of the compressed layouts."""
    dt = t.index_dtype
    m = t.batch_dim
    batch = t.shape[:m]
    v = t.values()
    t._compressed = frozen(_zeros(v, batch + (t.compressed_indices().shape[-1],), dt))
    t._plain = frozen(_zeros(v, batch + (0,), dt))
    t._values = _zeros(v, batch + (0,) + v.shape[m + 1:], t.dtype)
    t._set_validated()
    return t



# -- copy_ and resize_as_ ---------------------------------------------------------------------------
def _shares(a, o) -> bool:
    """Whether arrays ``a`` and ``o`` may share memory (host: NumPy's test; device: byte ranges)."""
    host_a, host_o = type(a) is np.ndarray, type(o) is np.ndarray
    if host_a or host_o:
        return host_a and host_o and np.may_share_memory(a, o)
    return a._ptr < o._ptr + o.nbytes and o._ptr < a._ptr + a.nbytes


def _own(a, others):
    """``a``, or a copy of it when it may share memory with one of ``others``."""
    return a.copy() if any(_shares(a, o) for o in others) else a


def copy_(dst, src, *, threads: int | None = None):
    """Copy ``src`` into ``dst`` in place: ``dst`` takes ``src``'s elements in its own layout,
    blocksize, value dtype and index dtype.

    ``src`` is a sparse tensor of any layout (converted to ``dst``'s) or an array (converted
    with :func:`sparsetensor.from_dense` into ``dst``'s dims); it must have ``dst``'s shape
    and dense dims (``ValueError`` naming both). In place means that ``dst``'s member
    attributes are replaced by new arrays; the old arrays are not written. ``dst`` never
    shares memory with ``src`` afterwards.

    PyTorch differs: its coo ``copy_`` resizes ``dst`` to ``src``'s shape, and its compressed
    ``copy_`` needs the same layout and nnz (it refuses dense sources).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import copy_
    >>> dst = st.from_dense(np.zeros((2, 2), np.float32), "csr")
    >>> copy_(dst, st.from_dense(np.array([[0, 1], [2, 0]]), "coo")).values()
    array([1., 2.], dtype=float32)
    """
    _require_sparse(dst, "copy_", "dst")
    if is_device_array(src):
        src = device_array(src)
    backend_for(dst, src)  # a host source with a device dst (or the reverse): ValueError naming both
    if isinstance(src, SparseTensor):
        if src.shape != dst.shape or src.dense_dim != dst.dense_dim:
            raise ValueError(f"copy_: dst is a {describe(dst, dtype=False)} with dense_dim={dst.dense_dim} but src is a {describe(src, dtype=False)} "
                             f"with dense_dim={src.dense_dim}; shapes and dense dims must agree")
        new = src.to_sparse(dst.layout, blocksize=dst.blocksize if dst.layout.blocked else None, threads=threads)
        sources = [a for _, a in src._members()]
    else:
        from .dense import from_dense

        a = src if is_device_array(src) else np.asarray(src)
        if a.shape != dst.shape:
            raise ValueError(f"copy_: dst is a {describe(dst, dtype=False)} but src is an array of shape {a.shape}")
        new = from_dense(a.astype(dst.dtype, copy=False), dst.layout,
                         blocksize=dst.blocksize if dst.layout.blocked else None, dense_dim=dst.dense_dim,
                         batch_dim=dst.batch_dim, index_dtype=dst.index_dtype, threads=threads)
        sources = [a]
    return _take(dst, new, sources)


def _take(dst, new, sources):
    """``dst`` takes the members of sparse tensor ``new`` (``dst``'s shape and dense dims) in its own
    layout, blocksize, value dtype and index dtype; arrays that may share memory with ``sources``
    are copied first."""
    if new.layout is not dst.layout or (dst.layout.blocked and new.blocksize != dst.blocksize):
        new = new.to_sparse(dst.layout, blocksize=dst.blocksize if dst.layout.blocked else None)
    new = new.astype(dst.dtype, copy=False)._with_index_dtype(dst.index_dtype)
    # arrays computed from ones a caller held (dst's own, or new's) keep the mark: the exits check
    # them again (dst's new arrays are the library's, so the mark is the only trace of the source)
    held = held_outside(dst) or held_outside(new)
    out = _TAKE_MEMBERS_BY_LAYOUT[type(dst)](dst, new, sources)
    out._from_held = held
    return out


def _take_coo(dst: COOTensor, new: COOTensor, sources) -> COOTensor:
    """The body of COO: ``dst`` takes ``new``'s members (copies of those that may
    share memory with ``sources``) and flags."""
    dst._indices = frozen(_own(new.indices(), sources))
    dst._values = _own(new.values(), sources)
    dst._coalesced = new.is_coalesced()
    dst._checked = new._checked
    return dst


def _take_compressed(dst: CompressedTensor, new: CompressedTensor, sources) -> CompressedTensor:
    """The body of the compressed layouts (see :func:`_take_coo`)."""
    dst._compressed = frozen(_own(new.compressed_indices(), sources))
    dst._plain = frozen(_own(new.plain_indices(), sources))
    dst._values = _own(new.values(), sources)
    dst._canonical = new.is_coalesced()
    return dst


def _no_device_growth(t, what: str) -> None:
    if t.is_cuda:
        raise NotImplementedError(f"resize_as_ of a non-empty {t.layout.name} tensor on {t.device} growing its {what} "
                                  "has no GPU kernel; resize it on the host with t.cpu()")


def _grown_values(t, values: np.ndarray, lead: int, old: tuple, new: tuple) -> np.ndarray:
    """``values`` (of ``t``) with its last dims grown from ``old`` to ``new`` sizes, zero-filled."""
    if old == new:
        return values
    _no_device_growth(t, "dense dims")
    out = np.zeros(values.shape[:lead] + tuple(new), dtype=values.dtype)
    out[(slice(None),) * lead + tuple(slice(0, s) for s in old)] = values
    return out


def resize_as_(t, other):
    """Resize ``t`` in place to ``other``'s shape and dims split (PyTorch's ``sparse_resize_``).

    ``other`` is any sparse tensor; only its shape and ``dense_dim`` are used (for coo
    ``sparse_dim = other.ndim - other.dense_dim``; for compressed ``t`` the batch dims are
    what is left). ``t`` keeps its layout, blocksize and dtypes.

    - ``t.nnz == 0``: any shape and split are accepted (sizes along the sparse dims of
      bsr/bsc must be multiples of the blocksize).
    - ``t.nnz > 0``: the split (and the batch sizes of a compressed ``t``) must stay; no
      size may shrink; sparse sizes may grow (entries keep their coordinates), dense
      sizes may grow (new values are zero; PyTorch leaves them uninitialised).

    Errors are ``ValueError``. In place means that ``t``'s attributes are replaced; the old
    arrays are not written. (PyTorch's compressed ``resize_`` can break invariants 3.8
    and 5.6 when rows shrink or blocks are involved; here shrinking is refused.)

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.shape import resize_as_
    >>> t = st.from_dense(np.array([[1, 0], [0, 2]]), "csr")
    >>> resize_as_(t, st.from_dense(np.zeros((3, 4)), "coo")).shape, t.crow_indices()
    ((3, 4), array([0, 1, 2, 2]))
    """
    _require_sparse(t, "resize_as_")
    _require_sparse(other, "resize_as_", "other")
    ensure_valid(t, private=False)  # a grown size would take in an index its caller wrote out of range since the check
    return _RESIZE_AS_BY_LAYOUT[type(t)](t, tuple(other.shape), other.dense_dim, other)  # _resize_coo or _resize_compressed


def _resize_coo(t: COOTensor, shape: tuple, n: int, other) -> COOTensor:
    """The body of COO: ``t`` resized in place to ``shape`` with ``n`` dense dims."""
    dt = t.index_dtype
    S = len(shape) - n
    if t.nnz and (S, n) != (t.sparse_dim, t.dense_dim):
        raise ValueError(f"resize_as_: changing the split of a non-empty coo tensor (sparse_dim {t.sparse_dim} -> "
                         f"{S}, dense_dim {t.dense_dim} -> {n}) is not supported; t is a {describe(t, dtype=False)}, other a "
                         f"{describe(other, dtype=False)}")
    _no_shrink(t, shape, other)
    check_fits(dt, "coo", **{f"size[{d}]": shape[d] for d in range(S)})
    if t.nnz == 0:
        v = t.values()
        t._indices = frozen(_zeros(v, (S, 0), dt))
        t._values = _zeros(v, (0,) + shape[S:], t.dtype)
        t._coalesced = True
    else:
        t._values = _grown_values(t, t.values(), 1, t.shape[S:], shape[S:])
    t._shape = shape
    return t


def _resize_compressed(t: CompressedTensor, shape: tuple, n: int, other) -> CompressedTensor:
    """The body of the compressed layouts (see :func:`_resize_coo`)."""
    dt = t.index_dtype
    m = len(shape) - 2 - n
    if m < 0:
        raise ValueError(f"resize_as_: a {t.layout.name} tensor needs 2 sparse dims; other is a {describe(other, dtype=False)} with "
                         f"dense_dim={n}")
    if t.nnz and ((m, n) != (t.batch_dim, t.dense_dim) or shape[:m] != t.shape[:m]):
        raise ValueError(f"resize_as_: changing the batch or dense dims of a non-empty {t.layout.name} tensor is not "
                         f"supported; t is a {describe(t, dtype=False)} with batch_dim={t.batch_dim}, dense_dim={t.dense_dim}, other a "
                         f"{describe(other, dtype=False)} with dense_dim={n}")
    bs = t.blocksize
    rows, cols = shape[m:m + 2]
    if rows % bs[0] or cols % bs[1]:
        raise ValueError(f"resize_as_: the sparse sizes ({rows}, {cols}) of other ({describe(other, dtype=False)}) must be multiples "
                         f"of t's blocksize {bs}")
    check_fits(dt, t.layout.name, nrows=rows, ncols=cols)
    nc = (rows // bs[0] if t.layout.compressed_rows else cols // bs[1]) + 1
    block = bs if t.layout.blocked else ()
    if t.nnz == 0:
        v = t.values()
        t._compressed = frozen(_zeros(v, shape[:m] + (nc,), dt))
        t._plain = frozen(_zeros(v, shape[:m] + (0,), dt))
        t._values = _zeros(v, shape[:m] + (0,) + block + shape[m + 2:], t.dtype)
        t._set_validated()
        t._shape = shape
        return t
    _no_shrink(t, shape, other)
    c = t.compressed_indices()
    if nc != c.shape[-1]:
        _no_device_growth(t, "compressed dim")
        tail = np.repeat(c[..., -1:], nc - c.shape[-1], axis=-1)
        t._compressed = frozen(np.concatenate([c, tail], axis=-1))
    v = t.values()
    lead = m + 1 + len(block)
    grown = _grown_values(t, v, lead, v.shape[lead:], shape[m + 2:])
    t._values = grown if t.is_cuda else _contiguous_values(grown, t.layout, t.dense_dim)
    t._shape = shape
    return t


def _no_shrink(t, shape: tuple, other) -> None:
    if not t.nnz:
        return
    small = [d for d in range(len(shape)) if shape[d] < t.shape[d]]
    if small:
        raise ValueError(f"resize_as_: shrinking dim {small[0]} (from {t.shape[small[0]]} to {shape[small[0]]}) of a "
                         f"non-empty {t.layout.name} tensor is not supported; t is a {describe(t, dtype=False)}, other a "
                         f"{describe(other, dtype=False)}")


# -- arithmetic and pointwise ops in place ---------------------------------------------------------
def _arrays_of(args) -> list:
    """The arrays that operands ``args`` hold (a sparse tensor's members, dense arrays)."""
    out = []
    for x in args:
        if isinstance(x, SparseTensor):
            out.extend(a for _, a in x._members())
        elif type(x) is np.ndarray or is_device_array(x):
            out.append(x)
    return out


def _store(t, r, name: str, args):
    """``t`` takes result ``r`` of the op ``name`` without its underscore (see the module doc)."""
    base = name[:-1]
    if not isinstance(r, SparseTensor):
        raise TypeError(f"{name}: {base} of a {describe(t, dtype=False)} with these operands is a dense "
                        f"{type(r).__name__}, which a sparse tensor cannot hold in place; use {base} (out of place)")
    if r.shape != t.shape:
        raise ValueError(f"{name}: the result's shape {r.shape} is not t's {t.shape} (the other operand must broadcast "
                         f"to t's shape)")
    if not np.can_cast(r.dtype, t.dtype, "same_kind"):
        raise TypeError(f"{name}: the result's dtype {r.dtype} cannot be cast to t's dtype {t.dtype} (NumPy's "
                        f"same_kind rule); use {base} (out of place)")
    if r.dense_dim != t.dense_dim:
        r = r.to_sparse(t.layout, blocksize=t.blocksize if t.layout.blocked else None, dense_dim=t.dense_dim)
    return _take(t, r, _arrays_of(args))


def in_place(name: str, op):
    """The in-place method ``name`` (e.g. ``"mul_"``) of op ``op`` (e.g. :func:`binary.mul`): ``t``
    takes ``op(t, *args, **kwargs)`` and is returned."""
    def fn(t, *args, **kwargs):
        _require_sparse(t, name)
        return _store(t, op(t, *args, **kwargs), name, args)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{op.__name__}`` in place: ``t`` takes the result in its own layout, blocksize and dtypes, "
                  f"and is returned (see :mod:`sparsetensor.ops.inplace`).")
    return fn


def in_place_operator(name: str, op):
    """The augmented assignment ``name`` (e.g. ``"__imul__"``) of ``op`` (the operator's function,
    e.g. ``__mul__``, which gives way to lazy collections): in place where the result is a sparse
    tensor of ``t``'s shape; a dense result or a broadcast to a larger shape is returned (Python
    binds the name to it, as before). Inside :func:`sparsetensor.autograd.vjp`'s function a tensor
    that depends on the arguments gets a new value (the op's rule runs, as for JAX's arrays), so
    that what the tape recorded stays as it was."""
    method = name[3:-2] + "_"  # __imul__ -> mul_

    def fn(t, other):
        r = op(t, other)
        if r is NotImplemented or not isinstance(r, SparseTensor) or r.shape != t.shape:
            return r
        return _store(t, r, method, (other,))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``t {name[3:-2]}= other``: :meth:`{method}` where the result is sparse and of ``t``'s shape."
    return fn


def transpose_(t, dim0: int, dim1: int):
    """:func:`sparsetensor.ops.select.transpose` in place: ``t`` takes the transpose in its own layout
    (a csr tensor stays csr: its rows are rebuilt) and index dtype; a blocked tensor's blocksize
    is transposed with it."""
    _require_sparse(t, "transpose_")
    r = transpose(t, dim0, dim1)
    if r.layout is not t.layout:
        r = r.to_sparse(t.layout, blocksize=r.blocksize if t.layout.blocked else None)
    _TAKE_MEMBERS_BY_LAYOUT[type(t)](t, r._with_index_dtype(t.index_dtype), ())
    t._shape = r.shape
    return t


def t_(t):
    """``transpose_(t, 0, 1)`` of a tensor of at most 2 dims (a 1-d or 0-d tensor is returned as is)."""
    _require_sparse(t, "t_")
    if t.ndim > 2:
        raise ValueError(f"t_ expects a tensor of at most 2 dims, got a {describe(t, dtype=False)}; use transpose_")
    return transpose_(t, 0, 1) if t.ndim == 2 else t


# Each op's body per layout family, picked where the op reads it: ``TABLE[type(t)](t, ...)``.
_ZERO_BY_LAYOUT = {COOTensor: _zero_coo, CompressedTensor: _zero_compressed}
_TAKE_MEMBERS_BY_LAYOUT = {COOTensor: _take_coo, CompressedTensor: _take_compressed}
_RESIZE_AS_BY_LAYOUT = {COOTensor: _resize_coo, CompressedTensor: _resize_compressed}
