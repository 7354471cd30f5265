"""Helpers shared by the ops modules: operand descriptions for error messages, broadcasting."""

from __future__ import annotations

import numpy as np

from .._backend._plan import describe  # noqa: F401 - the ops' name for it


def broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether an array of ``shape`` broadcasts to ``target`` without growing it."""
    target = tuple(target)
    try:
        return np.broadcast_shapes(tuple(shape), target) == target
    except ValueError:
        return False
