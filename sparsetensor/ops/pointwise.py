"""Pointwise functions of one sparse tensor, and the NumPy ufunc protocol.

A function ``f`` maps a sparse tensor to a sparse tensor with the same pattern
only when it is *zero-preserving*, ``f(0) == 0``: it is then applied to the
specified values and the unspecified elements stay zero. The result shares the
input's index arrays (of its coalesced form, see below) and has new values;
layout, shape, batch, block and dense dims are kept.

Rules
-----
- Zero-preserving functions (``abs``, ``neg``, ``sqrt``, ``sin``, ``tanh``,
  ``log1p``, ``pow`` with an exponent > 0, ...) return a sparse tensor. Result
  dtypes are NumPy's (``sqrt`` of int32 is float64, of int8 float16, ``abs`` of
  complex64 float32), except where PyTorch refuses a dtype (``sign`` of complex:
  use ``sgn``; ``frac`` of integers; ``imag`` of real tensors), which raises
  :class:`TypeError`.
- Functions with ``f(0) != 0`` (``exp``, ``cos``, ``log``, ``sigmoid``, ...) raise
  :class:`ValueError`: applied to the specified values alone they would leave
  every unspecified element wrong. Densify first: ``np.exp(t.to_dense())``.
  The same rule holds for every NumPy ufunc through ``__array_ufunc__``, tested
  generically by evaluating the ufunc on a zero of the tensor's dtype.
- A nonlinear function of an uncoalesced COO tensor (or of a compressed tensor
  built without checking) is applied after coalescing it (``abs(a) + abs(b) !=
  abs(a + b)`` for duplicates); linear ones (``neg``, ``conj``, ``real``,
  ``imag``, scaling by a scalar) are applied as they are.
- The input is never modified.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import backend_for
from .._core._device import is_device_array
from .._core._dtypes import VALUE_DTYPES
from .._core._tensor import SparseTensor
from ._common import broadcasts_to, describe, without_duplicates

__all__ = [
    "abs", "neg", "negative", "sign", "sgn", "sqrt", "square", "sin", "sinh", "tan", "tanh", "asin", "asinh",
    "atan", "atanh", "expm1", "log1p", "ceil", "floor", "round", "trunc", "frac", "relu", "conj", "real",
    "imag", "pow", "deg2rad", "rad2deg", "isnan", "isinf", "isposinf", "isneginf", "signbit", "erf", "erfinv",
    "nan_to_num",
    "exp", "exp2", "cos", "cosh", "acos", "acosh", "log", "log2", "log10", "sigmoid", "rsqrt", "reciprocal",
    "array_ufunc", "compare",
]

# -- helpers ------------------------------------------------------------------------------------
def _check_tensor(t, name: str) -> None:
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{name} expects a sparse tensor, got {type(t).__name__}")


def _check_result_dtype(dtype: np.dtype, name: str, t) -> None:
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"{name} of a {t.dtype} tensor gives dtype {dtype}, which is not a supported value dtype "
                        f"({', '.join(map(str, VALUE_DTYPES))})")


def _apply(t, fn, name: str, *, linear: bool = False, arg=None):
    """A tensor with ``t``'s pattern and values ``fn(values)`` (``fn(values, arg)`` with a scalar
    argument), computed by the device's ``unary`` kernel; nonlinear ``fn`` needs distinct indices
    (COO coalesced, compressed checked and repaired, 5.6)."""
    _check_tensor(t, name)
    t = without_duplicates(t) if linear else t.coalesce()
    try:
        values = backend_for(t).unary(t, name, fn, None, arg)
    except TypeError as e:  # numpy.core._exceptions._UFuncNoLoopError and friends
        raise TypeError(f"{name} does not support dtype {t.dtype}: {e}") from None
    _check_result_dtype(values.dtype, name, t)
    return t._replace_values(values)


def _refuse(t, name: str, what: str):
    raise TypeError(f"{name} is not defined for dtype {t.dtype}: {what}")


def _ufunc_function(name: str, ufunc, doc_line: str, *, linear: bool = False, real_only: bool = False):
    """A zero-preserving function that applies ``ufunc`` to the specified values."""

    def fn(t):
        _check_tensor(t, name)
        if real_only and t.dtype.kind == "c":
            _refuse(t, name, "it needs real values")
        return _apply(t, ufunc, name, linear=linear)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"""{doc_line}

    Applied to the specified values (``np.{ufunc.__name__}``); the pattern and the index
    arrays are kept. The result dtype is NumPy's.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> t = st.sparse_coo_tensor([[0, 2]], [0.25, 0.5], size=(3,))
    >>> pointwise.{name}(t).to_dense().tolist() == np.{ufunc.__name__}(t.to_dense()).tolist()
    True
    """
    fn.__module__ = __name__
    return fn


# -- zero-preserving functions --------------------------------------------------------------------
abs = _ufunc_function("abs", np.absolute, "Absolute value (complex tensors give real ones).")
neg = _ufunc_function("neg", np.negative, "Negation (bool tensors are refused, as in NumPy).", linear=True)
negative = neg
sqrt = _ufunc_function("sqrt", np.sqrt, "Square root (integers give floats, as in NumPy).")
square = _ufunc_function("square", np.square, "Square.")
sin = _ufunc_function("sin", np.sin, "Sine.")
sinh = _ufunc_function("sinh", np.sinh, "Hyperbolic sine.")
tan = _ufunc_function("tan", np.tan, "Tangent.")
tanh = _ufunc_function("tanh", np.tanh, "Hyperbolic tangent.")
asin = _ufunc_function("asin", np.arcsin, "Inverse sine.")
asinh = _ufunc_function("asinh", np.arcsinh, "Inverse hyperbolic sine.")
atan = _ufunc_function("atan", np.arctan, "Inverse tangent.")
atanh = _ufunc_function("atanh", np.arctanh, "Inverse hyperbolic tangent.")
expm1 = _ufunc_function("expm1", np.expm1, "``exp(x) - 1``.")
log1p = _ufunc_function("log1p", np.log1p, "``log(1 + x)``.")
deg2rad = _ufunc_function("deg2rad", np.deg2rad, "Degrees to radians (integers give floats, as in NumPy).",
                           linear=True, real_only=True)
rad2deg = _ufunc_function("rad2deg", np.rad2deg, "Radians to degrees (integers give floats, as in NumPy).",
                           linear=True, real_only=True)
ceil = _ufunc_function("ceil", np.ceil, "Ceiling (integer and bool tensors are copied).", real_only=True)
floor = _ufunc_function("floor", np.floor, "Floor (integer and bool tensors are copied).", real_only=True)
trunc = _ufunc_function("trunc", np.trunc, "Round towards zero (integer and bool tensors are copied).",
                        real_only=True)
isnan = _ufunc_function("isnan", np.isnan, "Whether each element is NaN (a bool tensor; complex: either part).")
isinf = _ufunc_function("isinf", np.isinf, "Whether each element is infinite (a bool tensor; complex: either part).")
isposinf = _ufunc_function("isposinf", np.isposinf, "Whether each element is +inf (a bool tensor).", real_only=True)
isneginf = _ufunc_function("isneginf", np.isneginf, "Whether each element is -inf (a bool tensor).", real_only=True)
signbit = _ufunc_function("signbit", np.signbit, "Whether each element's sign bit is set (a bool tensor; -0.0 too).",
                          real_only=True)


def _special(name: str):
    """``scipy.special.<name>`` (SciPy is optional: ImportError naming it where it is missing)."""
    try:
        import scipy.special
    except ImportError:
        raise ImportError(f"{name} of a sparse tensor needs SciPy's scipy.special.{name} on the host "
                          "(pip install scipy)") from None
    return getattr(scipy.special, name)


def erf(t):
    """The error function (``scipy.special.erf``, in the dtype of SciPy's loop: float32, float64
    and complex keep theirs; integers, bool and float16 give float64). Applied to the specified
    values; the pattern is kept.

    Examples
    --------
    >>> import sparsetensor as st
    >>> t = st.sparse_coo_tensor([[0, 2]], [0.5, -1.0], size=(3,))
    >>> st.erf(t).values().round(6)
    array([ 0.5205  , -0.842701])
    """
    return _apply(t, _special("erf"), "erf")


def erfinv(t):
    """The inverse error function (``scipy.special.erfinv``; NaN outside [-1, 1], +-inf at +-1), in
    the dtype of SciPy's loop: float32 and float64 keep theirs; bool, int8, uint8 and float16 give
    float32, wider integers float64. Applied to the specified values; the pattern is kept.

    Examples
    --------
    >>> import sparsetensor as st
    >>> t = st.sparse_coo_tensor([[0, 2]], [0.5205, -1.0], size=(3,))
    >>> st.erfinv(t).values().round(4)
    array([ 0.5, -inf])
    """
    _check_tensor(t, "erfinv")
    if t.dtype.kind == "c":
        _refuse(t, "erfinv", "it needs real values")
    return _apply(t, _erfinv_values(_special("erfinv")), "erfinv")


def _erfinv_values(erfinv):
    """SciPy's ``erfinv`` given only the values inside (-1, 1): NaN outside [-1, 1], +-inf at +-1, set
    here (SciPy's C++ code signals a domain error by an exception it catches, which a C++ runtime
    under a sanitizer's interposition may not survive)."""
    def fn(v):
        v = np.asarray(v)
        rt = erfinv(np.zeros(1, v.dtype)).dtype
        inside = np.abs(v) < 1
        out = np.where(v == 1, np.inf, np.where(v == -1, -np.inf, np.nan)).astype(rt)
        out[inside] = erfinv(v[inside])
        return out

    return fn


def nan_to_num(t, nan: float = 0.0, posinf=None, neginf=None):
    """NumPy's ``nan_to_num`` of the specified values: NaN becomes ``nan``, +inf ``posinf`` and -inf
    ``neginf`` (None: the largest / smallest finite value of the dtype; each part of complex
    values); integer and bool tensors are copied. The pattern is kept.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.sparse_coo_tensor([[0, 1, 2]], [np.nan, np.inf, -2.0], size=(4,))
    >>> st.nan_to_num(t, posinf=9.0).values()
    array([ 0.,  9., -2.])
    """
    _check_tensor(t, "nan_to_num")
    args = (float(nan), None if posinf is None else float(posinf), None if neginf is None else float(neginf))
    return _apply(t, lambda v, a: np.nan_to_num(v, nan=a[0], posinf=a[1], neginf=a[2]), "nan_to_num", arg=args)


def sign(t):
    """The sign of each element, -1, 0 or 1 (bool tensors are copied).

    Complex tensors raise :class:`TypeError`, as in PyTorch: use :func:`sgn`.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.sign(st.sparse_coo_tensor([[0, 2]], [-3.0, 2.0], size=(3,))).values()
    array([-1.,  1.])
    """
    _check_tensor(t, "sign")
    if t.dtype.kind == "c":
        _refuse(t, "sign", "use sgn for complex tensors (x / |x|)")
    if t.dtype == np.bool_:
        return _apply(t, np.copy, "sign")
    return _apply(t, np.sign, "sign")


def sgn(t):
    """``x / |x|`` for complex tensors (0 where x is 0); :func:`sign` for real ones.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.sgn(st.sparse_coo_tensor([[0]], [3 + 4j], size=(2,))).values()
    array([0.6+0.8j])
    """
    _check_tensor(t, "sgn")
    if t.dtype.kind == "c":
        return _apply(t, np.sign, "sgn")  # NumPy 2: z / |z|
    return sign(t)


def round(t, decimals: int = 0):
    """Round half to even to ``decimals`` places (integer and bool tensors are copied).

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.round(st.sparse_coo_tensor([[0, 1]], [2.5, -1.26], size=(2,)), decimals=1).values()
    array([ 2.5, -1.3])
    """
    _check_tensor(t, "round")
    decimals = int(decimals)
    if t.dtype.kind in "biu" and decimals >= 0:
        return _apply(t, np.copy, "round")
    return _apply(t, np.round, "round", arg=decimals)


def frac(t):
    """The fractional part ``x - trunc(x)`` (sign kept); floating tensors only, as in PyTorch.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.frac(st.sparse_coo_tensor([[0, 1]], [2.25, -1.5], size=(2,))).values()
    array([ 0.25, -0.5 ])
    """
    _check_tensor(t, "frac")
    if t.dtype.kind != "f":
        _refuse(t, "frac", "it needs floating values")
    return _apply(t, lambda v: v - np.trunc(v), "frac")


def relu(t):
    """``max(x, 0)`` (unsigned and bool tensors are copied; complex ones raise TypeError).

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.relu(st.sparse_coo_tensor([[0, 1]], [-2.0, 3.0], size=(2,))).values()
    array([0., 3.])
    """
    _check_tensor(t, "relu")
    if t.dtype.kind == "c":
        _refuse(t, "relu", "complex values have no order")
    if t.dtype.kind in "bu":
        return _apply(t, np.copy, "relu")
    return _apply(t, lambda v: np.maximum(v, np.zeros((), v.dtype)), "relu")


def conj(t):
    """The complex conjugate; a real tensor is returned as it is (no copy), as in PyTorch.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.conj(st.sparse_coo_tensor([[1]], [1 + 2j], size=(2,))).values()
    array([1.-2.j])
    """
    _check_tensor(t, "conj")
    if t.dtype.kind != "c":
        return t
    return _apply(t, np.conjugate, "conj", linear=True)


def real(t):
    """The real part, as a tensor of the real dtype; a real tensor is returned as it is.

    The values are a new contiguous array (not a view of the complex values).

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.real(st.sparse_coo_tensor([[1]], [1 + 2j], size=(2,))).values()
    array([1.])
    """
    return _complex_part(t, "real")


def imag(t):
    """The imaginary part, as a tensor of the real dtype; real tensors raise TypeError (PyTorch).

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.imag(st.sparse_coo_tensor([[1]], [1 + 2j], size=(2,))).values()
    array([2.])
    """
    return _complex_part(t, "imag")


def _complex_part(t, part: str):
    """``t.real`` or ``t.imag`` (``part``) with new contiguous values; a real tensor is its own
    real part and has no imaginary part."""
    _check_tensor(t, part)
    if t.dtype.kind != "c":
        if part == "imag":
            _refuse(t, "imag", "it needs complex values")
        return t
    return _apply(t, lambda v: np.ascontiguousarray(getattr(v, part)), part, linear=True)


def _real_scalar(x, name: str):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (numbers.Real, np.number)) or \
            isinstance(x, np.complexfloating):
        raise TypeError(f"{name} needs a real scalar, got {x!r} of type {type(x).__name__}")
    return x


def pow(t, exponent):
    """``x ** exponent`` for a real scalar ``exponent > 0`` (the only ones with ``0 ** e == 0``).

    An exponent ``<= 0`` (or NaN) raises :class:`ValueError`: ``0 ** 0 == 1`` and
    ``0 ** -1 == inf`` would change every unspecified element. The result dtype is
    NumPy's (``int ** 2`` stays integer, ``int ** 0.5`` is float64).

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.pow(st.sparse_coo_tensor([[0, 1]], [2.0, -3.0], size=(3,)), 2).values()
    array([4., 9.])
    """
    _check_tensor(t, "pow")
    e = _real_scalar(exponent, "pow")
    if not e > 0:
        raise ValueError(f"pow(t, {exponent!r}) is not zero-preserving (0 ** {exponent!r} != 0), so it cannot "
                         "keep the sparsity pattern; only exponents > 0 are supported. Call .to_dense() first "
                         f"(np.power(t.to_dense(), {exponent!r}))")
    return _apply(t, np.power, "pow", arg=e)


def _scale(t, scalar, *, divide: bool = False):
    """``t * scalar`` or ``t / scalar`` (true division) for a finite number ``scalar``.

    Non-finite factors and division by zero or NaN raise :class:`ValueError`
    (``0 * inf`` and ``0 / 0`` are NaN: the pattern would not be kept).
    """
    return _scalar_ufunc(t, np.true_divide if divide else np.multiply, scalar, tensor_first=True, kwargs={})


# -- functions that are not zero-preserving -------------------------------------------------------
def _not_zero_preserving_error(name: str, ufunc_repr: str, value) -> ValueError:
    return ValueError(f"{name} is not zero-preserving ({name}(0) = {value}): applied to the specified values "
                      "only, it would leave every unspecified element wrong. Call .to_dense() first, e.g. "
                      f"{ufunc_repr}(t.to_dense())")


def _refusing_function(name: str, zero_value: str, dense_call: str):
    def fn(t, *args, **kwargs):
        _check_tensor(t, name)
        raise _not_zero_preserving_error(name, dense_call, zero_value)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"""Not defined for sparse tensors: ``{name}(0) = {zero_value}``, so the result is dense.

    Always raises :class:`ValueError`; call ``{dense_call}(t.to_dense())`` instead.

    Examples
    --------
    >>> import sparsetensor as st
    >>> from sparsetensor.ops import pointwise
    >>> pointwise.{name}(st.sparse_coo_tensor([[0]], [1.0], size=(2,)))
    Traceback (most recent call last):
    ...
    ValueError: {name} is not zero-preserving ...
    """
    fn.__module__ = __name__
    return fn


exp = _refusing_function("exp", "1", "np.exp")
exp2 = _refusing_function("exp2", "1", "np.exp2")
cos = _refusing_function("cos", "1", "np.cos")
cosh = _refusing_function("cosh", "1", "np.cosh")
acos = _refusing_function("acos", "pi/2", "np.arccos")
acosh = _refusing_function("acosh", "nan", "np.arccosh")
log = _refusing_function("log", "-inf", "np.log")
log2 = _refusing_function("log2", "-inf", "np.log2")
log10 = _refusing_function("log10", "-inf", "np.log10")
sigmoid = _refusing_function("sigmoid", "0.5", "scipy.special.expit")
rsqrt = _refusing_function("rsqrt", "inf", "1 / np.sqrt")
reciprocal = _refusing_function("reciprocal", "inf", "np.reciprocal")


# -- the NumPy ufunc protocol ---------------------------------------------------------------------
# Ufuncs that are linear in the sparse operand: duplicates of an uncoalesced tensor may stay.
_LINEAR_UNARY = frozenset({np.negative, np.positive, np.conjugate})

# Two-operand ufuncs that sparsetensor.ops.binary implements (by its function names).
_BINARY = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
           np.maximum: "maximum", np.minimum: "minimum"}

_REDUCE = {np.add: "sum", np.maximum: "amax", np.minimum: "amin"}


def _is_zero(x) -> bool:
    a = np.asarray(x)
    with np.errstate(invalid="ignore"):
        return bool(np.all(a == 0))


def _probe(ufunc, args, kwargs, name: str, t):
    """``ufunc`` evaluated on a zero of ``t``'s dtype in place of ``t``: its outputs (a tuple)."""
    try:
        with np.errstate(all="ignore"):
            out = ufunc(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{name} does not support a {t.dtype} sparse tensor: {e}") from None
    return out if isinstance(out, tuple) else (out,)


def _finish(t, outputs, name: str):
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    results = []
    for values in outputs:
        values = np.asarray(values)
        _check_result_dtype(values.dtype, name, t)
        results.append(t._replace_values(values))
    return results[0] if len(results) == 1 else tuple(results)


def _unary_ufunc(t, ufunc, kwargs):
    name = f"np.{ufunc.__name__}"
    zero = np.zeros((), t.dtype)
    probe = _probe(ufunc, (zero,), kwargs, name, t)
    if not all(_is_zero(p) for p in probe):
        raise _not_zero_preserving_error(name, name, ", ".join(str(p) for p in probe))
    t = without_duplicates(t) if ufunc in _LINEAR_UNARY else t.coalesce()
    return _finish(t, ufunc(t.values(), **kwargs), name)


def _scalar_ufunc(t, ufunc, scalar, *, tensor_first: bool, kwargs):
    name = f"np.{ufunc.__name__}"
    zero = np.zeros((), t.dtype)
    args = (zero, scalar) if tensor_first else (scalar, zero)
    probe = _probe(ufunc, args, kwargs, name, t)
    if not all(_is_zero(p) for p in probe):
        shown = f"{name}(0, {scalar!r})" if tensor_first else f"{name}({scalar!r}, 0)"
        raise ValueError(f"{name} with the scalar {scalar!r} is not zero-preserving ({shown} = "
                         f"{', '.join(str(p) for p in probe)}): applied to the specified values only, it would "
                         "leave every unspecified element wrong. Call .to_dense() first")
    if ufunc is np.multiply or (ufunc is np.true_divide and tensor_first):  # s * t is t * s; s / t is not linear
        t = without_duplicates(t, scalar, divide=ufunc is np.true_divide)
    else:
        t = t.coalesce()
    v = t.values()
    return _finish(t, ufunc(v, scalar, **kwargs) if tensor_first else ufunc(scalar, v, **kwargs), name)


_ORDER = {"<": ("lt", np.less), "<=": ("le", np.less_equal), ">": ("gt", np.greater), ">=": ("ge", np.greater_equal)}


def compare(t, other, op: str):
    """``t < s``, ``t <= s``, ``t > s`` or ``t >= s`` for a scalar ``s``: a bool tensor with ``t``'s
    pattern (coalesced), as SciPy's ``A > s`` and NumPy's ``np.greater(t, s)``.

    Only where the comparison of 0 is false (``t > 0.5``, ``t < -1``, ``t > 0``): elsewhere every
    unspecified element would be true and the result dense, which raises :class:`ValueError`
    (compare ``t.to_dense()``). The scalar compares as NumPy compares it with the values (a Python
    float with float32 values in float32). Complex values have no order (:class:`TypeError`, as in
    PyTorch); a dense array or another sparse tensor raises :class:`TypeError`. These are the
    operators of a tensor, on the host and on a GPU; ``==`` and ``!=`` are refused (see
    ``SparseTensor.__eq__``).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.from_dense(np.array([[0.0, 2.0], [-3.0, 0.5]]), "csr")
    >>> (t > 1).to_dense()
    array([[False,  True],
           [False, False]])
    >>> (t < -1).values()
    array([False,  True, False])
    >>> t >= 0
    Traceback (most recent call last):
    ...
    ValueError: t >= 0 of a sparse tensor is dense (0 >= 0 is True at every unspecified element); compare t.to_dense()
    """
    _check_tensor(t, op)
    if not _is_scalar(other):
        raise TypeError(f"t {op} x: a sparse tensor compares with a scalar only, got {type(other).__name__} (compare "
                        "t.to_dense() with an array)")
    if t.dtype.kind == "c" or isinstance(other, (complex, np.complexfloating)):
        raise TypeError(f"t {op} {other!r}: complex values have no order")
    name, ufunc = _ORDER[op]
    if _probe(ufunc, (np.zeros((), t.dtype), other), {}, f"t {op} {other!r}", t)[0]:
        raise ValueError(f"t {op} {other!r} of a sparse tensor is dense (0 {op} {other!r} is True at every "
                         "unspecified element); compare t.to_dense()")
    return _apply(t, ufunc, name, arg=other)


def _is_scalar(x) -> bool:
    if isinstance(x, SparseTensor):
        return False
    if isinstance(x, (numbers.Number, np.generic)):
        return True
    return isinstance(x, np.ndarray) and x.ndim == 0


def _binary_ufunc(ufunc, a, b, kwargs):
    """Two tensor operands (sparse and sparse, or sparse and dense): sparsetensor.ops.binary."""
    fname = _BINARY.get(ufunc)
    dtype = kwargs.get("dtype")  # dtype=None (Dask passes it): NumPy's default
    if fname is None or set(kwargs) - {"dtype"}:
        return NotImplemented
    try:
        from . import binary
    except ImportError:
        return NotImplemented
    fn = getattr(binary, fname, None)
    if fn is None:
        return NotImplemented
    if fname == "mul" or (fname == "div" and isinstance(a, SparseTensor)):  # dense / sparse: div's own refusal
        _check_sampled(ufunc, a, b, binary.mul)
    out = fn(a, b)
    return out if dtype is None else out.astype(dtype)


def _check_sampled(ufunc, a, b, mul) -> None:
    """``ufunc(sparse, dense)`` (either order) samples the dense operand at the sparse pattern
    (PyTorch's rule), NumPy's result only where ``ufunc(0, d)`` (``ufunc(d, 0)``) is 0 at every
    unspecified element. Otherwise ValueError, as for a scalar that is not zero-preserving: a
    non-finite factor, a divisor that is 0 or NaN. Only unspecified elements count (O(size of
    the dense operand + nnz) when it has such elements). A device operand is not read back to
    the host for this: on a device the operand is sampled, as by the operators."""
    t, dense, tensor_first = (a, b, True) if isinstance(a, SparseTensor) else (b, a, False)
    if not isinstance(t, SparseTensor) or isinstance(dense, SparseTensor) or t.is_cuda or is_device_array(dense):
        return  # sparse with sparse, a device operand, or a host/device mix: ops.binary's rule or error
    name = f"np.{ufunc.__name__}"
    host = np.asarray(dense)
    if host.dtype.kind not in "biufc" or not broadcasts_to(host.shape, t.shape):
        return  # ops.binary's TypeError or ValueError
    zero = np.zeros((), t.dtype)
    probe = np.asarray(_probe(ufunc, (zero, host) if tensor_first else (host, zero), {}, name, t)[0])
    with np.errstate(invalid="ignore"):
        bad = probe != 0
    if not bad.any():
        return
    n_bad = int(np.count_nonzero(bad)) * (math.prod(t.shape) // host.size)  # the elements made nonzero
    c = t.coalesce()  # distinct entries: each element counted once
    hits = mul(c._replace_values(np.ones(c.values().shape, np.bool_)), bad)
    if int(np.count_nonzero(hits.values())) == n_bad:
        return  # all of them specified
    i = int(np.argmax(bad))
    d = host.flat[i].item()
    shown = f"{name}(0, {d!r})" if tensor_first else f"{name}({d!r}, 0)"
    raise ValueError(f"{name} of a sparse tensor and a dense array is not zero-preserving where the tensor is "
                     f"unspecified ({shown} = {probe.flat[i].item()!r}): applied to the specified values only, it "
                     "would leave those elements wrong. Call .to_dense() first (the operators * and / and "
                     "sparsetensor.mul/div sample the dense operand at the pattern instead)")


_CALL_KWARGS = frozenset({"dtype"})


def array_ufunc(tensor, ufunc, method, *inputs, **kwargs):
    """``__array_ufunc__`` for sparse tensors: NumPy ufuncs on sparse tensors stay sparse or raise.

    - ``ufunc(t)``: when ``ufunc(0) == 0`` for ``t``'s dtype (every output, for
      ufuncs with two outputs such as ``np.modf``), a sparse tensor with ``t``'s
      pattern; otherwise :class:`ValueError` (densify first).
    - ``ufunc(t, scalar)`` / ``ufunc(scalar, t)``: the same test on
      ``ufunc(0, scalar)`` / ``ufunc(scalar, 0)``, so ``np.multiply(t, 2)`` and
      ``np.maximum(t, 0)`` are sparse while ``np.divide(1, t)`` raises. ``np.add`` and
      ``np.subtract`` with a scalar (also ``np.float64(1) + t``, which NumPy sends here)
      are :func:`~sparsetensor.ops.binary.add`/``sub``: a scalar 0 gives the tensor, another
      scalar raises :class:`NotImplementedError`, as ``t + s`` does.
    - Two tensor operands (sparse with sparse or with a dense array): add,
      subtract, multiply, divide, maximum and minimum go to
      :mod:`sparsetensor.ops.binary` (sparse with sparse: PyTorch's and SciPy's meaning, so a
      product has the patterns' intersection, and an inf or NaN meeting an unspecified element
      gives no entry where NumPy's dense product gives NaN); other ufuncs raise
      :class:`TypeError` naming the ufunc and why. ``multiply`` and ``divide`` with a dense array (which
      is sampled at the pattern) raise :class:`ValueError` where the array would make an
      unspecified element nonzero (NumPy's ``0 * inf``, ``0 / 0``), as the scalar form does;
      a dense array divided by a sparse tensor is :func:`~sparsetensor.ops.binary.div`'s
      :class:`NotImplementedError`, as on a device.
    - ``np.add.reduce`` / ``np.maximum.reduce`` / ``np.minimum.reduce`` are
      :func:`~sparsetensor.ops.reduce.sum`, ``amax`` and ``amin`` (``axis`` defaults
      to 0, as in NumPy); other methods (``accumulate``, ``at``, ...) return
      ``TypeError``. Unsigned integers sum to uint64 where the result is dense, as
      in NumPy (see :func:`numpy_sum`).
    - ``out=`` raises :class:`TypeError` (a sparse result cannot be written into
      an array); ``dtype=`` is passed on; other keywords (``where=``) raise ``TypeError``.
    - Where an operand is of another type (not a sparse tensor, NumPy array or scalar) that
      may implement the ufunc itself, an unsupported call returns ``NotImplemented`` instead,
      so that NumPy asks that type.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from sparsetensor.ops.pointwise import array_ufunc
    >>> t = st.sparse_coo_tensor([[0, 2]], [4.0, 9.0], size=(3,))
    >>> array_ufunc(t, np.sqrt, "__call__", t).values()
    array([2., 3.])
    >>> array_ufunc(t, np.multiply, "__call__", t, 2).values()
    array([ 8., 18.])
    >>> array_ufunc(t, np.exp, "__call__", t)
    Traceback (most recent call last):
    ...
    ValueError: np.exp is not zero-preserving (np.exp(0) = 1.0): ...
    """
    out = _array_ufunc(ufunc, method, inputs, kwargs)
    if out is NotImplemented and all(_plain(x) for x in inputs):  # no other operand type could take it
        raise TypeError(_unsupported(ufunc, method, inputs, kwargs))
    return out


def _plain(x) -> bool:
    return isinstance(x, (SparseTensor, np.ndarray, np.generic, numbers.Number, list, tuple))


def _unsupported(ufunc, method, inputs, kwargs) -> str:
    """Why ``ufunc.method(*inputs, **kwargs)`` has no sparse meaning here (NumPy's own message names
    no cause, and prints every operand whole)."""
    name = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    args = ", ".join(describe(x) if isinstance(x, (SparseTensor, np.ndarray)) else type(x).__name__ for x in inputs)
    extra = sorted(set(kwargs) - {"out", "axis", "dtype", "keepdims"})
    if extra:
        why = f"{', '.join(k + '=' for k in extra)} has no sparse meaning"
    elif method not in ("__call__", "reduce"):
        why = "the ufunc methods it takes are np.add.reduce, np.maximum.reduce and np.minimum.reduce"
    elif method == "reduce" and ufunc in _REDUCE and kwargs.get("dtype") is not None:
        why = "dtype= is taken by np.add.reduce only"
    elif method == "reduce":
        why = "only np.add, np.maximum and np.minimum reduce a sparse tensor"
    else:
        why = ("a sparse operand takes the zero-preserving ufuncs of one operand or with a scalar, and "
               "add, subtract, multiply, divide, maximum and minimum with a second tensor")
    return f"{name}({args}) is not supported for sparse tensors: {why}; use t.to_dense() for NumPy's result"


def _array_ufunc(ufunc, method, inputs, kwargs):
    if kwargs.get("out") is not None:
        raise TypeError(f"np.{ufunc.__name__}(..., out=...) is not supported for sparse tensors: the result is a "
                        "new sparse tensor")
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    if method == "reduce":
        return _ufunc_reduce(ufunc, inputs, kwargs)
    if method != "__call__":
        return NotImplemented
    if set(kwargs) - _CALL_KWARGS:
        return NotImplemented
    if ufunc.nin == 1:
        (t,) = inputs
        return _unary_ufunc(t, ufunc, kwargs)
    if ufunc.nin != 2:
        return NotImplemented
    a, b = inputs
    if ufunc in (np.add, np.subtract) and not kwargs and (_is_scalar(a) or _is_scalar(b)):
        from . import binary  # a scalar 0 gives the tensor, another one is refused: the operators' rule

        return (binary.add if ufunc is np.add else binary.sub)(a, b)
    if isinstance(a, SparseTensor) and _is_scalar(b):
        return _scalar_ufunc(a, ufunc, b, tensor_first=True, kwargs=kwargs)
    if isinstance(b, SparseTensor) and _is_scalar(a):
        return _scalar_ufunc(b, ufunc, a, tensor_first=False, kwargs=kwargs)
    return _binary_ufunc(ufunc, a, b, kwargs)


def _ufunc_reduce(ufunc, inputs, kwargs):
    fname = _REDUCE.get(ufunc)
    if fname is None or len(inputs) != 1 or not isinstance(inputs[0], SparseTensor):
        return NotImplemented
    if set(kwargs) - {"axis", "dtype", "keepdims"}:
        return NotImplemented  # initial=, where=
    from . import reduce

    t = inputs[0]
    axis = kwargs.get("axis", 0)
    keepdims = bool(kwargs.get("keepdims", False))
    dtype = kwargs.get("dtype")
    if fname == "sum":
        return numpy_sum(t, axis, keepdims, dtype)
    if dtype is not None:
        return NotImplemented
    return getattr(reduce, fname)(t, axis, keepdim=keepdims)


def numpy_sum(t, axis, keepdims: bool, dtype):
    """``np.sum`` / ``np.add.reduce``: :func:`~sparsetensor.ops.reduce.sum` in NumPy's default dtype.

    NumPy sums unsigned integers to uint64 where PyTorch (and ``reduce.sum``) gives int64: a
    dense result is given in uint64 (the int64 sums of uint8 values are exact); a sparse one
    stays int64, uint64 not being a value dtype.
    """
    from . import reduce

    want = None if dtype is None else np.dtype(dtype)
    if want is not None and want.kind == "u" and want not in VALUE_DTYPES:
        # uint16/32/64 (what NumPy and Dask ask of unsigned sums) are no value dtypes: the int64 sums,
        # a dense result in the dtype asked (a sparse one stays int64)
        r = reduce.sum(t, axis, keepdims)
        return r if isinstance(r, SparseTensor) else r.astype(want)
    r = reduce.sum(t, axis, keepdims, dtype=dtype)
    if dtype is None and t.dtype.kind == "u" and not isinstance(r, SparseTensor):
        return r.astype(np.uint64)
    return r
