"""Devices: ``"cpu"`` (NumPy arrays) and ``"cuda"``/``"cuda:N"`` (sparsetensor.cuda, optional).

This module imports nothing of the package: it sits at the bottom, below the tensor
classes. A device package above it (``sparsetensor.cuda``) registers itself with
:func:`register` when it is imported (``import sparsetensor`` imports it; importing it
loads no cuda-python); the functions here look the device up in that registry, so every
call goes down, never up into the device package's modules.

A registered device is an object with these callables (all loading the device's
modules on first use):

- ``get_device(spec)``: the device's name (``"cuda:N"``) for a spec, raising
  ``NotImplementedError`` saying why when it cannot be used, ``ValueError`` when it does
  not exist;
- ``to_device(t, device)``, ``to_host(t)``: tensor moves (the same classes);
- ``backend()``: the kernel module (the names of :data:`sparsetensor._backend.KERNELS`);
- ``as_device_array(x)``: a foreign device array as the package's array, without a copy;
- ``coo_tensor``, ``compressed_tensor``: the constructors for members in device memory.
"""

from __future__ import annotations

__all__ = ["as_device", "is_device_like", "is_device_array", "register", "move", "to_host", "backend",
           "device_array", "device_constructor", "require_host"]

_KDL_CUDA = 2  # DLPack device type of CUDA memory (NumPy's __dlpack_device__ says kDLCPU = 1)

_DEVICES: dict = {}  # "cuda" -> the registered device package (see the module docstring)


def register(kind: str, hooks) -> None:
    """Register the device package of device type ``kind`` (``"cuda"``): called by that
    package at its import."""
    _DEVICES[kind] = hooks


def _hooks(kind: str = "cuda"):
    h = _DEVICES.get(kind)
    if h is None:
        raise NotImplementedError(f"device {kind!r}: no device package is registered for it; tensors live on 'cpu'")
    return h


def is_device_like(x) -> bool:
    s = str(x)
    return s == "cpu" or s.startswith("cuda") or type(x).__name__ == "device"


def is_device_array(x) -> bool:
    """True for an array in CUDA device memory: a ``sparsetensor.cuda.DeviceArray``, anything
    with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch CUDA tensors), or a ``__dlpack__``
    producer whose ``__dlpack_device__()`` is a CUDA device. Host arrays (NumPy, CPU torch
    tensors, lists) are False. Imports nothing."""
    # ours by its class: asking a DeviceArray for its interface marks its memory as shared
    if type(x).__name__ == "DeviceArray" and type(x).__module__ == "sparsetensor.cuda._array":
        return True
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            return int(x.__dlpack_device__()[0]) == _KDL_CUDA
        except Exception:  # noqa: BLE001 - a producer that cannot say where it lives is not ours to take
            return False
    return False


def require_host(t, what: str):
    """``t`` when its members are in host memory; a tensor on a CUDA device raises
    NotImplementedError naming ``what`` (an exit that hands host memory to another library, or
    a format that stores it): nothing is copied to the host unasked."""
    if t.is_cuda:
        raise NotImplementedError(f"{what} of a {t.layout.name} tensor on {t.device} needs host memory; move it "
                                  "with t.cpu() first")
    return t


def as_device(device) -> str:
    """Normalise a device spec (``"cpu"``, ``"cuda"``, ``"cuda:N"``, an ordinal ``N``, a torch
    device) to ``"cpu"`` or ``"cuda:N"``.

    ``"cuda"``/``"cuda:N"`` (or a torch device) need the CUDA backend (``pip install
    "sparsetensor[cuda]"`` and a GPU); without one they raise :class:`NotImplementedError`
    saying why, and a device that does not exist raises :class:`ValueError`.
    """
    if device is None:
        return "cpu"
    if isinstance(device, int) and not isinstance(device, bool):  # an ordinal, as torch takes it
        device = f"cuda:{device}"
    s = str(device)
    if s == "cpu":
        return "cpu"
    if s == "cuda" or s.startswith("cuda:"):
        return _hooks("cuda").get_device(s)
    raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'cuda[:N]'")


def move(t, device: str):
    """``t`` copied to CUDA device ``device`` (``t.to``, ``t.cuda()``, the constructors' ``device=``):
    the same class, with device members."""
    return _hooks("cuda").to_device(t, device)


def to_host(t):
    """Device tensor ``t`` with host copies of its members (``t.cpu()``): the same class."""
    return _hooks("cuda").to_host(t)


def backend(device: str):
    """The kernels of CUDA device ``device`` (:mod:`sparsetensor._backend.cuda`, the same names as
    :mod:`sparsetensor._backend.cpu`); what :func:`sparsetensor._backend.backend_for` returns for
    device operands."""
    return _hooks("cuda").backend()


def device_array(x):
    """Device array ``x`` (anything :func:`is_device_array` accepts) as a
    ``sparsetensor.cuda.DeviceArray``, without a copy."""
    return _hooks("cuda").as_device_array(x)


def device_constructor(kind: str):
    """The CUDA backend's constructor for members in device memory: ``"coo"`` gives
    ``sparsetensor.cuda.coo_tensor``, ``"compressed"`` ``sparsetensor.cuda.compressed_tensor``
    (the factory calls this when it is given a device array)."""
    h = _hooks("cuda")
    return {"coo": h.coo_tensor, "compressed": h.compressed_tensor}[kind]
