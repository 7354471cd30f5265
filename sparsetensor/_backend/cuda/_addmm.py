"""addmm's update on the device (the ``scale_add`` kernel of :mod:`sparsetensor._backend.cuda`):
``alpha * prod + beta * inp`` in place, ``inp`` broadcast to the product's shape
(kernels/addmm.cu). The op (:func:`sparsetensor.ops.blas.addmm`) resolved the dtypes and shapes;
the CPU's version is NumPy's ufuncs on the same working dtype."""

from __future__ import annotations

import numpy as np

from ...cuda import _primitives as P

__all__ = ["scale_add"]


def _strides(inp_shape: tuple, shape: tuple) -> tuple:
    """Element strides of a C-contiguous ``inp_shape`` broadcast to the 2-d ``shape`` (0 where it
    broadcasts)."""
    full = (1,) * (2 - len(inp_shape)) + tuple(inp_shape)
    rs = full[1] if full[0] != 1 else 0
    cs = 1 if full[1] != 1 else 0
    return rs, cs


def scale_add(prod, inp, alpha, beta, scale: bool, add: bool):
    """``prod`` (a 2-d C-contiguous device array in the working dtype) times ``alpha`` (when
    ``scale``) plus ``beta * inp`` (when ``add``; ``inp`` a device array that broadcasts to it),
    in place; ``alpha``/``beta`` are 0-d NumPy arrays of the working dtype (integers wrapped)."""
    if prod.ndim != 2:
        raise NotImplementedError(f"addmm on cuda: a product of shape {prod.shape} (2-d expected)")
    dev = prod._device
    M, N = prod.shape
    if not (scale or add) or M * N == 0:
        return prod
    x = inp.astype(prod.dtype, copy=False) if add else prod
    rs, cs = _strides(x.shape, prod.shape) if add else (0, 0)
    dt = prod.dtype
    if dt.kind in "fc":
        a, b = complex(alpha[()]), complex(beta[()])
        P.run(dev, "addmm.cu", "scale_add_float", (P.value_key(dt, "addmm"),), M * N, prod, x, M, N, rs, cs,
              int(scale), a.real, a.imag, int(add), b.real, b.imag)
    else:
        logical = dt == np.bool_
        raw, xr = (prod.view(np.uint8), x.view(np.uint8)) if logical else (prod, x)
        P.run(dev, "addmm.cu", "scale_add_int", ("uint8" if logical else dt.name,), M * N, raw, xr, M, N, rs, cs,
              int(scale), int(alpha[()]), int(add), int(beta[()]), int(logical))
    return prod
