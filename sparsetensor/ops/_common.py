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


def without_duplicates(t, scalar=None, *, divide: bool = False):
    """``t``, coalesced first where an op that is linear in its values would go wrong on the
    duplicates of an uncoalesced tensor one by one (COO, or compressed built without a check;
    scaling by ``scalar``, dividing when ``divide``; a pure function of the values when
    ``scalar`` is None).

    Duplicates may stay only for floating and complex values and a finite (for division,
    nonzero) scalar: bool duplicates merge by ``or`` and integer ones wrap in their own width,
    so a result in another dtype differs from the op applied to ``t.to_dense()``; and with
    ``a + b == 0``, ``inf * a + inf * b`` is NaN where ``inf * (a + b)`` is not.
    """
    if t.is_coalesced():
        return t
    keep = t.dtype.kind in "fc"
    if keep and scalar is not None:
        with np.errstate(invalid="ignore"):
            s = np.asarray(scalar)
            keep = bool(np.isfinite(s).all()) and not (divide and bool((s == 0).any()))
    return t if keep else t.coalesce()


def refuse_foreign_sparse(x, op: str) -> None:
    """TypeError naming the conversion when ``x`` is another library's sparse matrix (SciPy's, or a
    PyTorch sparse tensor), which NumPy would read as an object array."""
    module = type(x).__module__ or ""
    if module.startswith("scipy.sparse"):
        raise TypeError(f"{op}: a SciPy sparse {type(x).__name__} operand; convert it with st.from_scipy(m) (or "
                        "the tensor with t.to_scipy())")
    if module.startswith("torch") and getattr(x, "layout", None) is not None and "sparse" in str(x.layout):
        raise TypeError(f"{op}: a PyTorch {x.layout} tensor operand; convert it with st.from_torch(x)")
