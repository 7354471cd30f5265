"""Devices: ``"cpu"`` (NumPy arrays) and ``"cuda"``/``"cuda:N"`` (sparsetensor.cuda, optional)."""

from __future__ import annotations

__all__ = ["as_device", "is_device_like"]


def is_device_like(x) -> bool:
    s = str(x)
    return s == "cpu" or s.startswith("cuda") or type(x).__name__ == "device"


def as_device(device) -> str:
    """Normalise a device spec. ``"cuda"``/``"cuda:N"`` need the CUDA backend (``pip install
    "sparsetensor[cuda]"`` and a GPU); without one they raise :class:`NotImplementedError` saying why."""
    if device is None:
        return "cpu"
    s = str(device)
    if s == "cpu":
        return "cpu"
    if s == "cuda" or s.startswith("cuda:"):
        from . import cuda

        if not cuda.is_available():
            raise NotImplementedError(f"device {s!r}: CUDA is not available here ({cuda.unavailable_reason()}); "
                                      "tensors live on 'cpu'")
        return s
    raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'cuda[:N]'")
