"""Helpers shared by the ops modules: operand descriptions for error messages, broadcasting."""

from __future__ import annotations

import numpy as np

from .._core._tensor import SparseTensor


def _where(x) -> str:
    device = getattr(x, "device", None)
    return f" on {device}" if isinstance(device, str) and device.startswith("cuda") else ""


def describe(x, *, dtype: bool = True) -> str:
    """A sparse tensor, dense array or scalar operand, in words (for error messages); with
    ``dtype=False`` the layout (or "dense array") and shape only. Tensors and arrays on a
    CUDA device say so."""
    if isinstance(x, SparseTensor):
        if not dtype:
            return f"{x.layout.name} tensor of shape {tuple(x.shape)}{_where(x)}"
        extra = f", blocksize={x.blocksize}" if x.layout.blocked else ""
        return f"{x.layout.name} tensor of shape {tuple(x.shape)} ({x.dtype}{extra}){_where(x)}"
    if not dtype:
        return f"dense array of shape {tuple(x.shape) if hasattr(x, 'shape') else np.shape(x)}{_where(x)}"
    if not isinstance(x, np.ndarray) and hasattr(x, "shape") and hasattr(x, "dtype") and len(x.shape):
        return f"dense array of shape {tuple(x.shape)} ({x.dtype}){_where(x)}"  # a device array
    if isinstance(x, np.ndarray) and x.ndim:
        return f"dense array of shape {x.shape} ({x.dtype})"
    return f"scalar {x!r}"


def broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether an array of ``shape`` broadcasts to ``target`` without growing it."""
    target = tuple(target)
    try:
        return np.broadcast_shapes(tuple(shape), target) == target
    except ValueError:
        return False
