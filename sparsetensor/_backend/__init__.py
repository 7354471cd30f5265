"""The backend seam: one set of kernel names per device, picked by the operands' device.

An op (``sparsetensor/ops/*``, ``_dense``, ``_convert``) resolves its operands, dtypes,
shapes and broadcasting once, without looking at the device, and then calls
``backend_for(*operands).<kernel>(...)``. Each backend is a module exposing the names in
:data:`KERNELS`, each a checked ``def`` over that device's typed kernels:

- :mod:`sparsetensor._backend.cpu`: the Cython kernels of ``sparsetensor/_lib``;
- :mod:`sparsetensor._backend.cuda`: the NVRTC-compiled ``kernels/*.cu``, found through the
  device registry of :mod:`sparsetensor._core._device` (the CUDA package registers itself there
  at import and loads cuda-python only on first use). A kernel the device lacks raises
  ``NotImplementedError`` naming the op and the device.

A tensor's device is its members' (one class tree: :class:`~sparsetensor.COOTensor` and
:class:`~sparsetensor.CompressedTensor` hold NumPy arrays or device arrays).

``tests/ops/test_backend.py`` checks that both modules define every name of :data:`KERNELS`
with the same parameters.
"""

from __future__ import annotations

import numpy as np

from .._core import _device
from .._core._tensor import COOTensor, CompressedTensor
from . import cpu

__all__ = ["KERNELS", "backend_for", "device_of", "cpu"]

KERNELS = ("validate", "coalesce", "to_dense", "from_dense", "convert", "transpose", "spmm", "spgemm", "scale_add", "merge",
           "reduce_sum", "reduce_sum_dims", "reduce_dims", "unary", "sddmm", "gather_slices", "remap_plain", "narrow_plain",
           "cat_plain", "cat_compressed", "index_select_coo", "compressed_sum", "plain_sum", "segment_reduce", "scatter_reduce",
           "segment_softmax", "group_by", "batch_offsets", "map_values", "sample_dense", "add_to_dense", "elementwise",
           "check_bounds", "index_range", "diagonal", "sum_axis", "flatten_coo", "reshape_coo", "triangle_flags",
           "nonzero_rows", "keep_coo", "keep_compressed", "kron_coo", "ilu0", "ic0", "trsv")

_TENSOR_TYPES = frozenset((COOTensor, CompressedTensor))
_NDARRAY = np.ndarray


def device_of(x) -> str | None:
    """``"cpu"``, ``"cuda:N"`` (or ``"cuda"`` when a device array does not say which), or None for
    what lives nowhere in particular (Python scalars, lists, NumPy scalars)."""
    if type(x) is np.ndarray:
        return "cpu"
    d = getattr(x, "device", None)
    if isinstance(d, str):  # our tensors (their values' device), DeviceArray, NumPy 2 arrays
        return d
    if _device.is_device_array(x):  # CuPy, PyTorch CUDA tensors, __cuda_array_interface__
        try:
            return f"cuda:{int(x.__dlpack_device__()[1])}"
        except Exception:  # noqa: BLE001 - only the interface: the ordinal is not said
            return "cuda"
    if d is not None and str(d) == "cpu":  # a CPU torch tensor
        return "cpu"
    return None


def backend_for(*operands):
    """The backend module of the operands' device (CPU for host-only operands).

    Raises ValueError naming both devices when the operands live on different ones (a
    CPU/GPU mix, or two GPUs): nothing is moved silently.
    """
    for x in operands:  # the common case, CPU tensors and arrays, costs this loop only
        tx = type(x)
        if tx in _TENSOR_TYPES:
            if type(x._values) is not _NDARRAY:
                return _pick(operands)
        elif tx is not _NDARRAY:
            return _pick(operands)
    return cpu


def _pick(operands):
    device = None
    for x in operands:
        d = device_of(x)
        if d is None or d == device:
            continue
        if device is None:
            device = d
            continue
        raise ValueError(f"operands on different devices: {device} and {d}; move one first (t.cpu(), "
                         f"t.to({device!r}))")
    if device is None or device == "cpu":
        return cpu
    be = _DEVICE_BACKENDS.get(device)
    if be is None:
        be = _DEVICE_BACKENDS[device] = _device.backend(device)
    return be


_DEVICE_BACKENDS: dict = {}  # "cuda:N" -> its backend module (looked up once: every op asks)
