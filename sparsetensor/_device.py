"""Devices. This build serves ``"cpu"``; CUDA tensors come with the CUDA backend."""

from __future__ import annotations

__all__ = ["as_device", "is_device_like"]


def is_device_like(x) -> bool:
    s = str(x)
    return s == "cpu" or s.startswith("cuda") or type(x).__name__ == "device"


def as_device(device) -> str:
    """Normalise a device spec; ``"cuda"``/``"cuda:N"`` raise :class:`NotImplementedError` for now."""
    if device is None:
        return "cpu"
    s = str(device)
    if s == "cpu":
        return "cpu"
    if s == "cuda" or s.startswith("cuda:"):
        raise NotImplementedError(f"device {s!r}: the CUDA backend is not available in this build "
                                  "of sparsetensor; tensors live on 'cpu'")
    raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'cuda[:N]'")
