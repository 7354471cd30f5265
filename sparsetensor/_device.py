"""Devices: ``"cpu"`` (NumPy arrays) and ``"cuda"``/``"cuda:N"`` (sparsetensor.cuda, optional)."""

from __future__ import annotations

__all__ = ["as_device", "is_device_like", "is_device_array", "move", "backend", "device_array", "device_constructor"]

_KDL_CUDA = 2  # DLPack device type of CUDA memory (NumPy's __dlpack_device__ says kDLCPU = 1)


def is_device_like(x) -> bool:
    s = str(x)
    return s == "cpu" or s.startswith("cuda") or type(x).__name__ == "device"


def is_device_array(x) -> bool:
    """True for an array in CUDA device memory: a ``sparsetensor.cuda.DeviceArray``, anything
    with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch CUDA tensors), or a ``__dlpack__``
    producer whose ``__dlpack_device__()`` is a CUDA device. Host arrays (NumPy, CPU torch
    tensors, lists) are False. Imports nothing."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            return int(x.__dlpack_device__()[0]) == _KDL_CUDA
        except Exception:  # noqa: BLE001 - a producer that cannot say where it lives is not ours to take
            return False
    return False


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
        from .cuda import _driver

        try:
            return _driver.get_device(s).name
        except (ImportError, _driver.CudaError) as e:
            raise NotImplementedError(f"device {s!r}: CUDA is not available here ({type(e).__name__}: {e}); "
                                      "tensors live on 'cpu'") from None
    raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'cuda[:N]'")


def move(t, device: str):
    """``t`` copied to CUDA device ``device`` (``t.to``, ``t.cuda()``, the constructors' ``device=``)."""
    from .cuda import to_device

    return to_device(t, device)


def backend(device: str):
    """The kernels of CUDA device ``device`` (:mod:`sparsetensor.cuda._backend`, the same names as
    :mod:`sparsetensor._backend.cpu`); what :func:`sparsetensor._backend.backend_for` returns for
    device operands."""
    from .cuda import _backend

    return _backend


def device_array(x):
    """Device array ``x`` (anything :func:`is_device_array` accepts) as a
    ``sparsetensor.cuda.DeviceArray``, without a copy."""
    from .cuda import as_device_array

    return as_device_array(x)


def device_constructor(kind: str):
    """The CUDA backend's constructor for members in device memory: ``"coo"`` gives
    ``sparsetensor.cuda.coo_tensor``, ``"compressed"`` ``sparsetensor.cuda.compressed_tensor``.
    With :func:`move` and :func:`as_device` the only places below the CUDA package that load it
    (on first use: the factory calls this when it is given a device array)."""
    from .cuda import tensor

    return {"coo": tensor.coo_tensor, "compressed": tensor.compressed_tensor}[kind]
