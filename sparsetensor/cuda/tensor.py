"""Sparse tensors on a CUDA device: moves and constructors from device arrays (the ops are
the public ones, ``st.matmul(t, x)``, ``t.sum()``, ...: the same op code as on the CPU).

A tensor on a CUDA device is a :class:`~sparsetensor.COOTensor` or
:class:`~sparsetensor.CompressedTensor` whose members are
:class:`~sparsetensor.cuda.DeviceArray`s (one class tree for both devices); its ops are
the CPU's op code, which calls the CUDA backend's kernels (:mod:`._backend`). An op
without a GPU kernel raises :class:`NotImplementedError` naming the op, and nothing is
copied to the host unless asked (``cpu()``, ``to("cpu")``, :func:`to_host`).
:class:`CudaSparseTensor`, :class:`CudaCOOTensor` and :class:`CudaCompressedTensor` are
``isinstance`` tests for "that class, on a GPU", not classes of their own.

Move tensors with :func:`to_device` / :func:`to_host`; build them from device
arrays (CuPy, PyTorch CUDA tensors, DeviceArrays: zero-copy) with
:func:`coo_tensor` / :func:`compressed_tensor`.
"""

from __future__ import annotations

import numpy as np

from .._core import _layout as L
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor
from ._array import DeviceArray, as_device_array
from ._classes import CudaCOOTensor, CudaCompressedTensor, CudaSparseTensor
from ._driver import get_device

__all__ = ["CudaSparseTensor", "CudaCOOTensor", "CudaCompressedTensor", "to_device", "to_host", "coo_tensor",
           "compressed_tensor", "is_cuda_tensor"]


def is_cuda_tensor(t) -> bool:
    return isinstance(t, SparseTensor) and t.is_cuda


# -- moving between host and device ------------------------------------------------------------------

def to_device(t, device="cuda"):
    """A copy of sparse tensor ``t`` on ``device`` (``"cuda"``, ``"cuda:N"``, N).

    A CPU tensor's members are copied to the device (values made contiguous first);
    its flags (coalesced / canonical) travel with it. A device tensor already on
    ``device`` is returned as it is; one on another device goes through the host.

    Examples
    --------
    >>> import sparsetensor as st                                  # doctest: +SKIP
    >>> from sparsetensor.cuda import to_device, to_host           # doctest: +SKIP
    >>> t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [5.0, 6.0])    # doctest: +SKIP
    >>> d = to_device(t, "cuda"); d.device                         # doctest: +SKIP
    'cuda:0'
    >>> (to_host(d).to_dense() == t.to_dense()).all()              # doctest: +SKIP
    True
    """
    dev = get_device(device)
    if not isinstance(t, SparseTensor):
        raise TypeError(f"to_device expects a sparse tensor, got {type(t).__name__}")
    if t.is_cuda:
        if t.device_id == dev.ordinal:
            return t
        t = to_host(t)
    if isinstance(t, COOTensor):
        return COOTensor(DeviceArray.from_host(t.indices(), dev), DeviceArray.from_host(t.values(), dev),
                         t.shape, t.is_coalesced(), t._checked)
    return CompressedTensor(DeviceArray.from_host(t.compressed_indices(), dev),
                            DeviceArray.from_host(t.plain_indices(), dev),
                            DeviceArray.from_host(np.ascontiguousarray(t.values()), dev),
                            t.shape, t.layout, t.is_coalesced())


def to_host(t):
    """The same class with host copies (NumPy members) of device tensor ``t``'s members and its flags."""
    if isinstance(t, COOTensor) and t.is_cuda:
        return COOTensor(t.indices().get(), t.values().get(), t.shape, t.is_coalesced(), t._checked)
    if isinstance(t, CompressedTensor) and t.is_cuda:
        return CompressedTensor(t.compressed_indices().get(), t.plain_indices().get(), t.values().get(), t.shape,
                                t.layout, t.is_coalesced())
    raise TypeError(f"to_host expects a CUDA sparse tensor, got {type(t).__name__}")


def cast_values(a: DeviceArray, dtype) -> DeviceArray:
    """Device values converted to ``dtype`` (a new array, also when the dtype is the same).

    The GPU converts between float16 and float32 only (:meth:`DeviceArray.astype`); other
    pairs raise NotImplementedError naming them (convert on the CPU)."""
    from .._core._dtypes import as_value_dtype

    return a.astype(as_value_dtype(dtype))


def _place_members(members: dict, device):
    """``(Device, {name: DeviceArray or host array})`` for constructor inputs.

    Device arrays (anything :func:`sparsetensor._core._device.is_device_array` accepts) are
    taken without a copy and must share one device, which ``device`` (when given) must
    name; host members stay on the host here (the caller normalises and copies them).
    Without device arrays the device is ``device`` (default ``"cuda"``)."""
    from .._core._device import as_device, is_device_array

    placed = {k: as_device_array(x) if is_device_array(x) else x for k, x in members.items()}
    on = {k: a.device for k, a in placed.items() if isinstance(a, DeviceArray)}
    if len(set(on.values())) > 1:
        raise ValueError("the members of a sparse tensor must be on one device, got "
                         + ", ".join(f"{k} on {d}" for k, d in on.items()))
    want = None if device is None else as_device(device)
    have = next(iter(on.values()), None)
    if want is not None and have is not None and want != have:
        where = ", ".join(f"{k} on {d}" for k, d in on.items())
        raise ValueError(f"device={str(device)!r} ({want}) disagrees with the device of the arrays ({where}); "
                         "move them first or leave device=None")
    target = have or want or "cuda"
    if target == "cpu":
        raise ValueError("device='cpu' was asked of sparsetensor.cuda; use the sparsetensor constructors")
    return get_device(target), placed


def _upload(x, dev) -> DeviceArray:
    return x if isinstance(x, DeviceArray) else DeviceArray.from_host(np.ascontiguousarray(x), dev)


def _index_extrema(indices: DeviceArray) -> tuple:
    from .._backend.cuda._reduce import index_extrema

    return index_extrema(indices)


def _plain_max(plain: DeviceArray) -> int:
    from .._backend.cuda._reduce import index_extrema

    return int(index_extrema(plain.reshape(1, -1))[0][0])


def _max_step(compressed: DeviceArray) -> int:
    from .._backend.cuda._reduce import step_extrema

    return step_extrema(compressed)


def _device_values(v, dev, dtype) -> DeviceArray:
    from .._core._dtypes import VALUE_DTYPES, as_value_dtype
    from .._core._from_arrays import _as_values

    if not isinstance(v, DeviceArray):
        return _upload(_as_values(v, dtype), dev)  # a host member: converted on the host, then copied
    if dtype is not None and as_value_dtype(dtype) != v.dtype:
        v = cast_values(v, dtype)
    if v.dtype not in VALUE_DTYPES:
        raise TypeError(f"unsupported value dtype {v.dtype} (invariant 1.5); supported: "
                        f"{', '.join(map(str, VALUE_DTYPES))}")
    return v


def _device_index(x, dev, name: str, layout: str) -> DeviceArray:
    from .._core._errors import InvariantError
    from .._core._from_arrays import _as_index_array

    if not isinstance(x, DeviceArray):
        return _upload(_as_index_array(x, name, layout), dev)
    if x.dtype not in (np.int32, np.int64):
        raise InvariantError("1.3", layout, f"{name} must have dtype int32 or int64, got {x.dtype}")
    return x


def coo_tensor(indices, values, size=None, *, dtype=None, device=None, check_invariants=None,
               is_coalesced=None) -> COOTensor:
    """A COO tensor on a CUDA device; what :func:`sparsetensor.sparse_coo_tensor` builds from device arrays.

    Members that are device arrays (DeviceArray, CuPy, PyTorch CUDA tensors, any
    ``__cuda_array_interface__`` or CUDA ``__dlpack__``) are taken without a copy and
    must be C-contiguous and on one device; ``device=None`` means theirs, and a
    ``device`` naming another raises ValueError. Host members (lists, NumPy) are
    copied to that device (``"cuda"`` when no member is a device array).

    ``size=None`` is estimated on the device (the largest index of each row + 1, one
    synchronisation), as on the CPU. ``dtype`` converts the values: host values on
    the host, device values on the device (float16 <-> float32 only, else
    NotImplementedError). The O(1) invariants are checked always, the O(nnz) ones
    (C4-C6) on the device when ``check_invariants`` (default:
    :func:`sparsetensor.get_check_invariants`).

    Examples
    --------
    >>> import cupy, sparsetensor as st                                       # doctest: +SKIP
    >>> t = st.sparse_coo_tensor(cupy.array([[0, 1], [2, 0]]), cupy.array([1.0, 2.0]))  # doctest: +SKIP
    >>> t.shape, t.device                                                     # doctest: +SKIP
    ((2, 3), 'cuda:0')
    """
    from .._core._config import resolve_check
    from .._core._from_arrays import coo_indices_and_shape
    from .._core._shape_checks import coo_meta

    dev, m = _place_members({"indices": indices, "values": values}, device)
    vals = _device_values(m["values"], dev, dtype)
    idx = _device_index(m["indices"], dev, "indices", "coo")
    idx, shape = coo_indices_and_shape(idx, vals, size, _index_extrema)
    coo_meta(idx, vals, shape)
    t = COOTensor(idx, vals, shape, bool(is_coalesced) or idx.shape[1] <= 1)
    if resolve_check(check_invariants):
        t.check_invariants()
    return t


def compressed_tensor(compressed_indices, plain_indices, values, size=None, *, layout, dtype=None, device=None,
                      check_invariants=None) -> CompressedTensor:
    """A csr/csc/bsr/bsc tensor on a CUDA device; what :func:`sparsetensor.sparse_compressed_tensor`
    builds from device arrays.

    Members, ``device``, ``dtype`` and ``size=None`` as in :func:`coo_tensor` (the shape
    estimate is seed 003's: the plain size is the largest plain index + 1 or the longest
    row, read with one device reduction). O(1) invariants always, 5.1-5.6 on the device
    when checking.
    """
    from .._core._config import resolve_check
    from .._core._errors import InvariantError
    from .._core._from_arrays import estimate_compressed_shape
    from .._core._shape_checks import as_size, compressed_meta

    layout = L.as_layout(layout)
    if not layout.compressed:
        raise ValueError(f"compressed_tensor needs a compressed layout, got {layout!r}")
    dev, m = _place_members({layout.compressed_name: compressed_indices, layout.plain_name: plain_indices,
                             "values": values}, device)
    v = _device_values(m["values"], dev, dtype)
    c = _device_index(m[layout.compressed_name], dev, layout.compressed_name, layout.name)
    p = _device_index(m[layout.plain_name], dev, layout.plain_name, layout.name)
    if c.ndim < 1:
        raise InvariantError("3.2", layout.name, f"{layout.compressed_name} must be at least 1-d")
    if c.dtype != p.dtype:
        raise InvariantError("1.2", layout.name, f"{layout.plain_name} must have the dtype of "
                             f"{layout.compressed_name} ({c.dtype}), got {p.dtype}")
    if size is None:
        size = estimate_compressed_shape(c, p, v, layout, _plain_max, _max_step)
    shape = as_size(size)
    compressed_meta(c, p, v, shape, layout)
    check = resolve_check(check_invariants)
    t = CompressedTensor(c, p, v, shape, layout, canonical=False)
    if check:
        t.check_invariants()
    return t
