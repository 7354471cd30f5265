"""Pointwise operations on the values of a device tensor: zero-preserving unary functions
and multiplication, division and power by a scalar.

The result shares the indices of its input and has new values (the input is never
modified). Nonlinear functions need distinct indices: an uncoalesced COO input is
coalesced first, a compressed one not known canonical is checked (and repaired).
float16 computes in float32 and rounds once. Complex values take the functions of
``_COMPLEX_OK`` (computed in double, C99's branch cuts) and ``abs``, ``real`` and ``imag``
(real results); the others raise NotImplementedError. Integer and bool values take the functions with
integer results (``neg``, ``abs``, ``square``, ``sign``, ``relu``, and ``floor``/``ceil``/
``trunc``/``round``, which copy) and ``mul``/``pow`` by an integer scalar, wrapping as NumPy's;
the backend's ``unary`` casts them to NumPy's float result dtype for the other functions
(:func:`numpy_result`).
"""

from __future__ import annotations

import numpy as np

from ...cuda import _primitives as P
from ...cuda._classes import CudaCOOTensor

__all__ = ["UNARY_OPS", "PREDICATES", "COMPARISONS", "unary", "predicate", "compare", "nan_to_num", "complex_part", "scalar_op", "mul_scalar", "div_scalar", "pow_scalar", "map_array",
           "numpy_result", "round_decimals"]

# name -> (code in pointwise.cu, linear)
UNARY_OPS = {
    "neg": (0, True), "abs": (1, False), "sqrt": (2, False), "square": (3, False), "sin": (4, False),
    "tan": (5, False), "tanh": (6, False), "asin": (7, False), "atan": (8, False), "sinh": (9, False),
    "asinh": (10, False), "atanh": (11, False), "expm1": (12, False), "log1p": (13, False), "sign": (14, False),
    "floor": (15, False), "ceil": (16, False), "trunc": (17, False), "round": (18, False), "rint": (18, False),
    "relu": (19, False), "frac": (20, False), "deg2rad": (21, True), "rad2deg": (22, True), "conj": (23, True),
    "sgn": (14, False), "negative": (0, True), "absolute": (1, False), "fix": (17, False), "arcsin": (7, False),
    "arctan": (8, False), "arcsinh": (10, False), "arctanh": (11, False), "erf": (24, False), "erfinv": (25, False),
}
# name -> code of the predicate kernels (bool results; the input's dtype is not cast first)
PREDICATES = {"isnan": 0, "isinf": 1, "isposinf": 2, "isneginf": 3, "signbit": 4}
# name -> code of the comparison kernels (value OP scalar, bool results)
COMPARISONS = {"lt": 0, "le": 1, "gt": 2, "ge": 3}
_COMPLEX_OK = {"neg", "negative", "square", "conj", "abs", "absolute", "sqrt", "sin", "sinh", "tan", "tanh", "asin",
               "asinh", "atan", "atanh", "expm1", "log1p", "round", "rint", "sgn", "arcsin", "arctan", "arcsinh",
               "arctanh", "erf"}
_REAL_ONLY = {"deg2rad", "rad2deg"}  # NumPy has no complex loop for these: a TypeError, as on the CPU
_SCALAR = {"mul": 0, "div": 1, "pow": 2}
# the functions whose results of integer values are integers (unary_int of pointwise.cu)
_INTEGER_OK = {"neg", "negative", "abs", "absolute", "square", "sign", "relu", "floor", "ceil", "trunc", "round",
               "rint", "fix"}


_RESULTS: dict = {}  # (op name, dtype, type of the scalar) -> result dtype


def numpy_result(name: str, dtype, fn, arg=None) -> np.dtype:
    """NumPy's result dtype of ``fn`` (the CPU's function of the pointwise op ``name``) on ``dtype``
    values, with the scalar ``arg`` where the op has one, and NumPy's errors: ``fn`` evaluated on
    one host zero. NumPy 2 decides by the scalar's type, and for a Python int with integer values
    by its range too (OverflowError): those are evaluated every time, the others once."""
    key = (name, dtype, type(arg))
    hit = _RESULTS.get(key)
    if hit is not None:
        return hit
    zero = np.zeros(1, dtype)
    with np.errstate(all="ignore"):
        rt = np.asarray(fn(zero) if arg is None else fn(zero, arg)).dtype
    if not (type(arg) is int and np.dtype(dtype).kind in "biu") and len(_RESULTS) < 4096:
        _RESULTS[key] = rt
    return rt


def _prepared(t, linear: bool):
    from ._coalesce import checked

    if linear:
        return t
    if isinstance(t, CudaCOOTensor):
        return t.coalesce()
    return checked(t)


def unary(t, op: str):
    """``op`` applied to every specified value of device tensor ``t`` (see :data:`UNARY_OPS`).

    Examples
    --------
    >>> import sparsetensor as st                                          # doctest: +SKIP
    >>> d = st.sparse_csr_tensor([0, 1], [0], [4.0]).to("cuda")             # doctest: +SKIP
    >>> st.sqrt(d).values().get()        # the op, then this kernel          # doctest: +SKIP
    array([2.])
    """
    if op not in UNARY_OPS:
        raise NotImplementedError(f"unary op {op!r} on cuda: not a zero-preserving function with a GPU kernel; "
                                  f"available: {', '.join(sorted(UNARY_OPS))}")
    code, linear = UNARY_OPS[op]
    dt = t.dtype
    if dt.kind == "c":
        if op in _REAL_ONLY:
            raise TypeError(f"{op} is not defined for dtype {dt}: it needs real values")
        if op not in _COMPLEX_OK:
            raise NotImplementedError(f"{op} of complex values on cuda has no GPU kernel")
    elif dt.kind in "biu" and op not in _INTEGER_OK | {"conj"}:
        raise TypeError(f"{op} of {dt} values on cuda: the result is not an integer; cast the values first "
                        f"(sparsetensor's {op} does)")
    elif dt.kind not in "fbiu":
        raise TypeError(f"{op} on cuda supports integer, float16, float32, float64 (and some complex) values, "
                        f"got {dt}")
    if op == "conj" and dt.kind != "c":
        return t  # as torch: a real tensor is its own conjugate
    t = _prepared(t, linear)
    dev = t.values()._device
    v = t.values()
    n = v.size
    if dt.kind in "biu":
        x = v.view(np.uint8) if dt == np.bool_ else v
        out = P.empty(dev, v.shape, x.dtype)
        P.run(dev, "pointwise.cu", "unary_int", (x.dtype.name,), n, x, out, n, code)
        return t._replace_values(out.view(dt))
    if dt.kind == "c" and op in ("abs", "absolute"):
        real = np.dtype(np.float32 if dt == np.complex64 else np.float64)
        out = P.empty(dev, v.shape, real)
        P.run(dev, "pointwise.cu", "complex_abs", (real.name,), n, v, out, n)
    elif dt.kind == "c":
        out = P.empty(dev, v.shape, dt)
        P.run(dev, "pointwise.cu", "unary_complex", (dt.name,), n, v, out, n, code)
    else:
        out = P.empty(dev, v.shape, dt)
        P.run(dev, "pointwise.cu", "unary_real", (dt.name,), n, v, out, n, code)
    return t._replace_values(out)


def predicate(t, op: str):
    """The bools ``op`` (:data:`PREDICATES`) of the values of device tensor ``t``, as NumPy's (false
    for integers but ``signbit``; complex values: ``isnan`` and ``isinf`` of either part, the
    others raise TypeError, as NumPy's)."""
    dt = t.dtype
    if dt.kind == "c" and op not in ("isnan", "isinf"):
        raise TypeError(f"{op} is not defined for dtype {dt}: it needs real values")
    t = _prepared(t, False)
    dev = t.values()._device
    v = t.values()
    n = v.size
    if dt.kind in "biu":
        if op != "signbit" or dt.kind != "i":
            return t._replace_values(P.zeros(dev, v.shape, np.bool_))
        out = P.empty(dev, v.shape, np.uint8)
        P.run(dev, "pointwise.cu", "signbit_int", (dt.name,), n, v, out, n)
        return t._replace_values(out.view(np.bool_))
    out = P.empty(dev, v.shape, np.uint8)
    kernel = "predicate_complex" if dt.kind == "c" else "predicate_real"
    P.run(dev, "pointwise.cu", kernel, (dt.name,), n, v, out, n, PREDICATES[op])
    return t._replace_values(out.view(np.bool_))


def compare(t, scalar, op: str):
    """The bools ``values OP scalar`` (:data:`COMPARISONS`) of device tensor ``t``'s real values, as
    NumPy compares them: in NumPy's loop dtype for the scalar (a Python float with float32 values in
    float32, with integer values in float64; an integer scalar with integer values exactly)."""
    t = _prepared(t, False)
    v = t.values()
    x = v.view(np.uint8) if v.dtype == np.bool_ else v
    n = v.size
    ct = np.result_type(np.zeros(1, t.dtype), scalar)
    if ct.kind in "biu" and isinstance(scalar, (int, np.integer, np.bool_)):
        s = int(scalar)
        if not -(1 << 63) <= s < (1 << 63):
            # beyond every value, and true at 0 unless false everywhere (the op refused those): all false
            return t._replace_values(P.zeros(v._device, v.shape, np.bool_))
        out = P.empty(v._device, v.shape, np.uint8)
        P.run(v._device, "pointwise.cu", "compare_int", (x.dtype.name,), n, x, out, n, COMPARISONS[op], s)
    else:
        with np.errstate(over="ignore"):
            s = float(np.asarray(scalar).astype(ct))
        out = P.empty(v._device, v.shape, np.uint8)
        P.run(v._device, "pointwise.cu", "compare_num", (x.dtype.name,), n, x, out, n, COMPARISONS[op], s)
    return t._replace_values(out.view(np.bool_))


def nan_to_num(t, nan: float, posinf, neginf):
    """NumPy's ``nan_to_num`` of the values of device tensor ``t`` (``posinf``/``neginf`` None: the
    largest and smallest finite value of the (real part's) dtype); integer and bool values are copied."""
    dt = t.dtype
    t = _prepared(t, False)
    v = t.values()
    if dt.kind in "biu":
        return t._replace_values(v.copy())
    info = np.finfo(dt)
    posinf = float(info.max) if posinf is None else float(posinf)
    neginf = float(info.min) if neginf is None else float(neginf)
    out = P.empty(v._device, v.shape, dt)
    kernel = "nan_to_num_complex" if dt.kind == "c" else "nan_to_num_real"
    P.run(v._device, "pointwise.cu", kernel, (dt.name,), v.size, v, out, v.size, float(nan), posinf, neginf)
    return t._replace_values(out)


def complex_part(t, part: str):
    """The real or imaginary part (``part``) of complex device tensor ``t``: its pattern, new
    contiguous values of the real dtype (linear: an uncoalesced input stays as it is).

    A strided copy, not a view: device tensors hold contiguous values only."""
    dt = t.dtype
    if dt.kind != "c" or part not in ("real", "imag"):
        raise TypeError(f"{part} on cuda takes complex64 or complex128 values, got {dt}")
    v = t.values()
    real = np.dtype(np.float32 if dt == np.complex64 else np.float64)
    out = P.empty(v._device, v.shape, real)
    P.run(v._device, "pointwise.cu", "complex_part", (real.name,), v.size, v, out, v.size, int(part == "imag"))
    return t._replace_values(out)


def scalar_op(t, scalar, op: str):
    """``values * s``, ``values / s`` or ``values ** s`` (reals, ``s > 0``) for a Python/NumPy scalar."""
    if op not in _SCALAR:
        raise NotImplementedError(f"scalar op {op!r} on cuda")
    if t.dtype.kind in "biu" and op != "div":
        return _scalar_int(t, scalar, op)
    key = P.value_key(t.dtype, f"{op} by a scalar")
    s = complex(scalar)
    if t.dtype.kind != "c" and s.imag != 0:
        raise TypeError(f"{op} of {t.dtype} values by the complex scalar {scalar!r}: the result would be complex")
    if op == "pow":
        if not s.real > 0 or s.imag:
            raise ValueError(f"pow with exponent {scalar!r} does not preserve zeros (0 ** {scalar!r} != 0); "
                             "use the dense array")
    t = _prepared(t, op != "pow")
    dev = t.values()._device
    v = t.values()
    out = P.empty(dev, v.shape, v.dtype)
    P.run(dev, "pointwise.cu", "scalar_op", (key,), v.size, v, out, v.size, _SCALAR[op], s.real, s.imag)
    return t._replace_values(out)


def _scalar_int(t, scalar, op: str):
    """``values * s`` or ``values ** s`` (``s > 0``) of integer (bool) values by an integer scalar, in
    their dtype, wrapping."""
    if isinstance(scalar, (float, complex, np.inexact)) or int(scalar) != scalar:
        raise TypeError(f"{op} of {t.dtype} values on cuda by the scalar {scalar!r}: the result is not an integer; "
                        "cast the values first")
    s = int(scalar)
    if op == "pow" and s <= 0:
        raise ValueError(f"pow with exponent {scalar!r} does not preserve zeros (0 ** {scalar!r} != 0); "
                         "use the dense array")
    s = (s + (1 << 63)) % (1 << 64) - (1 << 63)  # the scalar wraps into int64 (it is applied modulo 2**64)
    t = _prepared(t, op != "pow")
    v = t.values()
    x = v.view(np.uint8) if v.dtype == np.bool_ else v
    out = P.empty(v._device, v.shape, x.dtype)
    P.run(v._device, "pointwise.cu", "scalar_int", (x.dtype.name,), v.size, x, out, v.size, _SCALAR[op], s)
    return t._replace_values(out.view(v.dtype))


def _power_of_ten(k: int) -> float:
    """10.0 ** k, inf past the doubles (NumPy's factor then: results NaN, as there)."""
    return 10.0 ** k if k <= 308 else float("inf")


def round_decimals(t, decimals: int):
    """``np.round(values, decimals)`` (half to even) of device tensor ``t``, as NumPy computes it:
    floats and complex (each part) as ``rint(x * 10**d) / 10**d`` (``rint(x / 10**-d) * 10**-d``
    for ``d < 0``; float16 rounded at every step), integers (``d < 0``) through a double."""
    t = _prepared(t, False)
    v = t.values()
    dev, dt = v._device, v.dtype
    out = P.empty(dev, v.shape, dt)
    if dt.kind in "iu":
        if decimals >= 0:  # integers are their own roundings
            dev.copy_dtod(out._ptr, v._ptr, v.nbytes)
        else:
            P.run(dev, "pointwise.cu", "round_int", (dt.name,), v.size, v, out, v.size, _power_of_ten(-decimals))
        return t._replace_values(out)
    f = _power_of_ten(abs(decimals))
    if dt == np.float16:  # NumPy's float16 loops round every step to float16 (x * f may overflow to inf)
        first, last = ("mul", "div") if decimals >= 0 else ("div", "mul")
        return scalar_op(unary(scalar_op(t, f, first), "rint"), f, last)
    code = 3 if decimals >= 0 else 4  # SOP_ROUND, SOP_ROUND_DOWN
    P.run(dev, "pointwise.cu", "scalar_op", (P.value_key(dt, "round"),), v.size, v, out, v.size, code, f, 0.0)
    return t._replace_values(out)


def mul_scalar(t, scalar):
    return scalar_op(t, scalar, "mul")


def div_scalar(t, scalar):
    return scalar_op(t, scalar, "div")


def pow_scalar(t, exponent):
    return scalar_op(t, exponent, "pow")


def map_array(x, op: str, arg=None):
    """Dense device array ``x`` (float16/32/64) mapped by the unary ``op`` of :data:`UNARY_OPS`, or by
    ``mul``/``div``/``pow`` with the real scalar ``arg``; complex64/128 by ``neg``, ``square`` and
    ``conj``: a new array of its dtype."""
    dev = x._device
    dt = x.dtype
    if dt.kind == "c" and op in _COMPLEX_OK and op not in ("abs", "absolute") and arg is None:
        out = P.empty(dev, x.shape, dt)  # the conjugate of rmatvec's dense side, for one
        P.run(dev, "pointwise.cu", "unary_complex", (dt.name,), x.size, x, out, x.size, UNARY_OPS[op][0])
        return out
    if dt.kind != "f":
        raise NotImplementedError(f"{op} of a {dt} device array has no GPU kernel (float16, float32, float64; "
                                  "neg, square and conj of complex64, complex128)")
    out = P.empty(dev, x.shape, dt)
    if op in _SCALAR:
        P.run(dev, "pointwise.cu", "scalar_op", (dt.name,), x.size, x, out, x.size, _SCALAR[op], float(arg), 0.0)
    elif op in UNARY_OPS and arg is None:
        P.run(dev, "pointwise.cu", "unary_real", (dt.name,), x.size, x, out, x.size, UNARY_OPS[op][0])
    else:
        raise NotImplementedError(f"{op} of a device array has no GPU kernel")
    return out
