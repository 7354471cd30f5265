"""``t[key]`` for sparse tensors: NumPy's basic indexing and one integer array, built on
:func:`~sparsetensor.ops.shape.narrow`, :func:`~sparsetensor.ops.shape.select` and
:func:`~sparsetensor.ops.shape.index_select`.

A key holds integers, slices (any step), ``...`` and at most one 1-d integer array (any
integer dtype, negatives counted from the end). Each component is applied to its dim,
whatever its kind (batch, sparse or dense), so ``t[key].to_dense() == t.to_dense()[key]``:

- an integer: :func:`select` (the dim goes; a compressed tensor indexed on a sparse dim
  becomes coo, a coo tensor that loses its last sparse dim becomes a dense NumPy array
  and then a NumPy scalar when no dim is left, so ``t[i, j]`` is a scalar);
- a slice with step 1: :func:`narrow`; another step: :func:`index_select` of the range;
- an integer array: :func:`index_select` (repeats allowed);
- ``None`` (``np.newaxis``): :func:`~sparsetensor.ops.dims.unsqueeze` at its place in the
  result (between the two sparse dims of a compressed tensor, the tensor becomes coo first:
  the new dim is a third sparse dim).

Selecting along a batch dim gives views of the members, as in PyTorch; the other results
are new tensors (which may share index arrays). A blocked tensor (bsr/bsc) indexed along
a sparse dim in a way that cuts its blocks is converted to csr/csc first; a batched
compressed tensor whose batches would end up with different nnz gives a coo result.

Out-of-range integers and array entries raise ``IndexError`` (slices clip, as in NumPy).
A device tensor gives device results (a DeviceArray where NumPy's would be an array or a
scalar) and takes index arrays on the host or on its device (checked there, NumPy's errors);
an index array on a device with a host tensor raises ``ValueError`` naming both devices.
Boolean masks, several integer arrays (NumPy's pointwise advanced indexing), an array apart from an integer (by a slice, or by ``...`` even where
it stands for no dims) with a sliced dim before the array (NumPy moves the array's dim
first, ``a[:, [0, 1], ..., 0]``), and item assignment raise ``NotImplementedError``
naming them.
"""

from __future__ import annotations

import operator

import numpy as np

from .._backend import backend_for, device_of
from .._core._device import device_array, is_device_array
from .._core import _layout as L
from .._core._tensor import COOTensor, SparseTensor
from ._shape_common import _device_select, wrapped_index
from .dims import unsqueeze
from .shape import index_select, narrow, select

__all__ = ["getitem", "setitem"]


def _component(k):
    """A key component as ``Ellipsis``, a slice, an int or a 1-d int64 array (not yet bounds-checked)."""
    if k is Ellipsis or isinstance(k, slice):
        return k
    if isinstance(k, SparseTensor):
        raise NotImplementedError("indexing with a sparse tensor is not supported")
    if isinstance(k, (bool, np.bool_)):
        raise NotImplementedError("boolean indexing (a boolean mask) of a sparse tensor is not supported")
    if device_of(k) not in (None, "cpu"):  # np.asarray would copy it to the host: checked where it is
        return _device_component(k)
    try:
        return operator.index(k)
    except TypeError:
        pass
    a = np.asarray(k)
    if a.dtype == np.bool_:
        raise NotImplementedError("boolean indexing (a boolean mask) of a sparse tensor is not supported")
    if a.size == 0 and a.dtype.kind == "f":  # np.asarray([]) is float64: an empty index
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise IndexError("only integers, slices (`:`), ellipsis (`...`) and integer arrays are valid indices of "
                         f"a sparse tensor, got {type(k).__name__} of dtype {a.dtype}")
    if a.ndim == 0:
        return int(a)
    if a.ndim > 1:
        raise NotImplementedError(f"indexing a sparse tensor with a {a.ndim}-d integer array (only 1-d)")
    return a


def _device_component(k):
    """An index array on a device as a 1-d DeviceArray (not yet bounds-checked) or an int (0-d: its
    one number read), with the errors of :func:`_component`."""
    a = device_array(k)
    if a.dtype == np.bool_:
        raise NotImplementedError("boolean indexing (a boolean mask) of a sparse tensor is not supported")
    if a.dtype.kind not in "iu":
        raise IndexError("only integers, slices (`:`), ellipsis (`...`) and integer arrays are valid indices of "
                         f"a sparse tensor, got {type(k).__name__} of dtype {a.dtype}")
    if a.dtype not in (np.int32, np.int64):  # the device's index kernels take these two
        a = a.astype(np.int64)
    if a.ndim == 0:
        return int(_device_select().index_extrema(a.reshape(1))[0])
    if a.ndim > 1:
        raise NotImplementedError(f"indexing a sparse tensor with a {a.ndim}-d integer array (only 1-d)")
    return a


def _is_array(c) -> bool:
    return isinstance(c, np.ndarray) or is_device_array(c)


def _expand(key, ndim: int) -> list:
    comps = [_component(k) for k in (key if isinstance(key, tuple) else (key,))]
    n_ell = sum(c is Ellipsis for c in comps)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n = len(comps) - n_ell
    if n > ndim:
        raise IndexError(f"too many indices for a sparse tensor: it is {ndim}-dimensional, but {n} were indexed")
    # NumPy's rule, read on the key as written: advanced indices (the array and the integers) that
    # are not side by side, apart by a slice or by '...' even where it stands for no dims, put the
    # array's dim first; next to each other, it stays in their place
    adv = [j for j, c in enumerate(comps) if isinstance(c, int) or _is_array(c)]
    separated = bool(adv) and adv[-1] - adv[0] + 1 != len(adv)
    written = list(comps)
    if n_ell:
        i = next(j for j, c in enumerate(comps) if c is Ellipsis)
        comps[i:i + 1] = [slice(None)] * (ndim - n)
    comps += [slice(None)] * (ndim - len(comps))
    arrays = [d for d, c in enumerate(comps) if _is_array(c)]
    if len(arrays) > 1:
        raise NotImplementedError("indexing a sparse tensor with several integer arrays (NumPy's pointwise "
                                  "advanced indexing) is not supported; index one dim at a time")
    # each component is applied in place, which is NumPy's result unless the array's dim moves
    # first past a sliced dim
    if separated and arrays and any(isinstance(c, slice) for c in comps[:arrays[0]]):
        raise NotImplementedError("indexing a sparse tensor with an integer array and an integer separated by "
                                  "a slice or by '...' (NumPy moves the array's dim first, before the sliced "
                                  f"dims) is not supported, got [{_describe(written)}]; index one dim at a time")
    return comps


def _describe(comps: list) -> str:
    """Key components as written (``:``, ``...``, ``[...]`` for an array), for an error message."""
    def one(c):
        if c is Ellipsis:
            return "..."
        if isinstance(c, slice):
            text = f"{'' if c.start is None else c.start}:{'' if c.stop is None else c.stop}"
            return text if c.step is None else f"{text}:{c.step}"
        return "[...]" if _is_array(c) else str(c)
    return ", ".join(one(c) for c in comps)


def _check_int(i: int, size: int, d: int) -> int:
    if not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for axis {d} with size {size}")
    return i % size


def _check_array(a: np.ndarray, size: int, d: int) -> np.ndarray:
    a, bad = wrapped_index(a, size)
    if bad is not None:
        raise IndexError(f"index {bad} is out of bounds for axis {d} with size {size}")
    return a


def _cuts_blocks(t, d: int, comp, size: int) -> bool:
    """True when ``comp`` along sparse dim ``d`` of a blocked tensor does not keep whole blocks."""
    if not t.layout.blocked:
        return False
    m = t.batch_dim
    if not m <= d < m + 2:
        return False
    bs = t.blocksize[d - m]
    if bs == 1:
        return False
    if isinstance(comp, slice):
        start, stop, step = comp.indices(size)
        return step != 1 or (start % bs or max(0, stop - start) % bs)
    return _is_array(comp)  # an int selects through a block narrow: fine


def _batched_sparse(t, d: int) -> bool:
    return t.layout.compressed and 0 < t.batch_dim <= d < t.batch_dim + 2


def _unblocked(t):
    return t.to_sparse(L.sparse_csr if t.layout.compressed_rows else L.sparse_csc)


def getitem(self, key):
    """``t[key]``: integers, slices, ``...``, ``None`` and one integer array (see
    :mod:`sparsetensor.ops.indexing`).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.array([[1, 0, 2], [0, 3, 0], [4, 0, 5]]), "csr")
    >>> t[1:].to_dense()
    array([[0, 3, 0],
           [4, 0, 5]])
    >>> t[:, [2, 0]].to_dense()
    array([[2, 1],
           [0, 0],
           [5, 4]])
    >>> t[-1, 2]
    np.int64(5)
    >>> t[0].to_dense()
    array([1, 0, 2])
    >>> t[None, 1:].shape
    (1, 2, 3)
    """
    return index(self, key, _run)


def _run(name: str, r, *args):
    return _STEPS[name](r, *args)


def index(self, key, step):
    """``self[key]`` as steps: ``step(name, r, *args)`` runs each (``"select"``, ``"narrow"``,
    ``"index_select"``, ``"to_sparse"``, ``"unsqueeze"``, and ``"dense"`` for what NumPy or the
    device indexes once no sparse dim is left) on the result so far and returns its result (the
    autograd rule of ``t[key]`` runs the ops' rules through it)."""
    key = key if isinstance(key, tuple) else (key,)
    if any(k is None for k in key):
        _refuse_moved_array(key)
    new_dims = _new_dims(key, self.ndim)
    comps = _expand(tuple(k for k in key if k is not None), self.ndim)
    if not self.is_cuda:  # an index array on a device with a host tensor: ValueError naming both devices
        backend_for(self, *(c for c in comps if type(c) is not np.ndarray and is_device_array(c)))
    r = self
    d = 0  # the dim of r that the next component indexes
    for k, comp in enumerate(comps):
        if not isinstance(r, SparseTensor):  # no sparse dim left: NumPy (or take_axis on the device) does the rest
            if not all(isinstance(c, slice) and c == slice(None) for c in comps[k:]):
                r = step("dense", r, d, tuple(comps[k:]))
            break
        size = r.shape[d]
        if isinstance(comp, slice) and comp == slice(None):
            d += 1
            continue
        if _cuts_blocks(r, d, comp, size):
            r = step("to_sparse", r, L.sparse_csr if r.layout.compressed_rows else L.sparse_csc)
        if isinstance(comp, int):
            r = step("select", r, d, _check_int(comp, size, k))
            continue
        if isinstance(comp, slice):
            start, stop, step_ = comp.indices(size)
            if step_ == 1:
                name, arg = "narrow", (start, max(0, stop - start))
            else:
                name, arg = "index_select", (np.arange(start, stop, step_, dtype=np.int64),)
        else:
            name, arg = "index_select", (_check_array(comp, size, k),)
        try:
            r = step(name, r, d, *arg)
        except ValueError:
            if not _batched_sparse(r, d):
                raise
            r = step(name, step("to_sparse", r, L.sparse_coo), d, *arg)  # the batches would differ in nnz: coo
        d += 1
    for d in new_dims:  # None: a new dim of size 1 where it stands in the result
        if not isinstance(r, SparseTensor):
            r = step("dense", r, 0, (slice(None),) * d + (None,))
        else:
            if not isinstance(r, COOTensor) and d == r.batch_dim + 1:  # between the two sparse dims: a third one
                r = step("to_sparse", r, L.sparse_coo)
            r = step("unsqueeze", r, d)
    if isinstance(r, np.ndarray) and r.ndim == 0:
        return r[()]
    return r


def _refuse_moved_array(key: tuple) -> None:
    """NotImplementedError for a key with ``None`` whose integer array and integers are apart (by a
    ``None``, a slice or ``...``): NumPy then puts the array's dim first, before the new dims."""
    adv = [j for j, k in enumerate(key) if k is not None and k is not Ellipsis and not isinstance(k, slice)]
    arrays = [j for j in adv if (key[j].ndim if is_device_array(key[j]) else np.ndim(key[j])) >= 1]
    if arrays and adv[-1] - adv[0] + 1 != len(adv):
        raise NotImplementedError("indexing a sparse tensor with None and an integer array apart from an integer "
                                  "(NumPy moves the array's dim first, before the new dims) is not supported; "
                                  "index one dim at a time")


def _new_dims(key: tuple, ndim: int) -> list:
    """Where each ``None`` of ``key`` puts its dim of size 1 in the result, ascending: after the dims
    that the components before it leave (an integer leaves none, ``...`` those it stands for)."""
    if not any(k is None for k in key):
        return []
    given = sum(1 for k in key if k is not None and k is not Ellipsis)
    out, at = [], 0
    for k in key:
        if k is None:
            out.append(at)
            at += 1
        elif k is Ellipsis:
            at += max(ndim - given, 0)
        elif isinstance(k, slice) or (k.ndim if is_device_array(k) else np.ndim(k)) >= 1:  # an array keeps a dim
            at += 1
    return out


def _dense_device(a, d: int, comps: list):
    """Dense device array ``a`` indexed by ``comps`` from axis ``d`` on, as NumPy would (its
    IndexError messages): every component a take_axis on the device, an integer's axis then dropped."""
    from .._backend.cuda._select import take_axis

    for comp in comps:
        size = a.shape[d]
        if isinstance(comp, int):
            a = take_axis(a, d, np.array([_check_int(comp, size, d)], dtype=np.int64))
            a = a.reshape(a.shape[:d] + a.shape[d + 1:])
            continue
        if isinstance(comp, slice):
            if comp != slice(None):
                a = take_axis(a, d, np.arange(*comp.indices(size), dtype=np.int64))
        else:
            a = take_axis(a, d, _check_array(comp, size, d))
        d += 1
    return a


def _dense_rest(a, d: int, comps: tuple):
    """Dense ``a`` (a NumPy or device array) indexed by ``comps`` from axis ``d`` on (``None``: a new
    axis)."""
    if isinstance(a, np.ndarray) or not is_device_array(a):
        return a[(slice(None),) * d + comps]
    if comps and comps[-1] is None:  # a new axis of a device array
        return a.reshape(a.shape[:len(comps) - 1 + d] + (1,) + a.shape[len(comps) - 1 + d:])
    return _dense_device(a, d, list(comps))


_STEPS = {"select": select, "narrow": narrow, "index_select": index_select, "unsqueeze": unsqueeze,
          "to_sparse": lambda r, layout: r.to_sparse(layout), "dense": _dense_rest}


def setitem(self, key, value):
    """Item assignment is not supported: sparse tensors change only through their in-place
    methods (``zero_``, ``copy_``, ``resize_as_``)."""
    raise NotImplementedError(f"item assignment (__setitem__) of a sparse {self.layout.name} tensor is not "
                              "supported; build a new tensor (arithmetic, np.where(t, x, 0)) or use copy_")
