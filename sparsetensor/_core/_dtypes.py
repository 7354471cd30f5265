"""Value and index dtypes, and the views kernels take of value arrays."""

from __future__ import annotations

import numpy as np

from ._errors import InvariantError

__all__ = ["VALUE_DTYPES", "VALUE_DTYPE_SET", "INDEX_DTYPES", "as_value_dtype", "as_index_dtype", "index_dtype_of",
           "check_fits", "raw_view", "zero_test_view", "arith_view"]

VALUE_DTYPES = tuple(np.dtype(d) for d in (
    "bool", "int8", "int16", "int32", "int64", "uint8",
    "float16", "float32", "float64", "complex64", "complex128"))
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
# The one value-dtype policy: tensor values, dense operands and dense results alike (torch's set,
# which has no uint16/32/64). NumPy's promotion of any two of them stays inside the set.
VALUE_DTYPE_SET = frozenset(VALUE_DTYPES)

_RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def native(a: np.ndarray) -> np.ndarray:
    """``a``, or a copy in native byte order when it is stored byte-swapped (``dtype(">f8")``)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _np_dtype(dtype) -> np.dtype:
    """``np.dtype`` of a NumPy dtype, type, string, or torch dtype (``torch.float32``)."""
    if isinstance(dtype, str) or type(dtype).__module__.startswith("torch"):
        return np.dtype(str(dtype).removeprefix("torch."))
    return np.dtype(dtype)


def _supported(dtype, kind: str, supported: tuple, refusal: str) -> np.dtype:
    """``dtype`` normalised by :func:`_np_dtype`, or TypeError (``refusal`` names the got dtype
    ``{dt}``) when it is not one of ``supported``."""
    try:
        dt = _np_dtype(dtype)
    except TypeError:
        raise TypeError(f"unsupported {kind} dtype {dtype!r}") from None
    if dt not in supported:
        raise TypeError(refusal.format(dt=dt))
    return dt


# built once: joining the names on every call cost 3/4 of a Dask chunk's np.sum(..., dtype=) dispatch
_VALUE_REFUSAL = f"unsupported value dtype {{dt}}; supported: {', '.join(map(str, VALUE_DTYPES))}"


def as_value_dtype(dtype) -> np.dtype:
    """Normalise ``dtype`` (NumPy or torch spelling) to a supported value dtype."""
    if dtype is None:
        raise TypeError("dtype must not be None here")
    return _supported(dtype, "value", VALUE_DTYPES, _VALUE_REFUSAL)


def as_index_dtype(dtype) -> np.dtype:
    """Normalise ``dtype`` (NumPy or torch spelling) to int32 or int64."""
    return _supported(dtype, "index", INDEX_DTYPES, "index dtype must be int32 or int64 (invariant 1.3), got {dt}")


def index_dtype_of(arr: np.ndarray, name: str, layout: str) -> np.dtype:
    """The index dtype of a user's index array; other integer dtypes are refused, never cast."""
    dt = arr.dtype
    if dt in INDEX_DTYPES:
        return dt
    raise InvariantError("1.3", layout, f"{name} must have dtype int32 or int64, got {dt}")


_INDEX_MAX = {np.dtype(np.int32): (1 << 31) - 1, np.dtype(np.int64): (1 << 63) - 1}


def check_fits(index_dtype: np.dtype, layout: str, **sizes: int) -> None:
    """Raise if a size or nnz does not fit ``index_dtype`` (invariant 1.3)."""
    limit = _INDEX_MAX.get(index_dtype)
    if limit is None:
        limit = int(np.iinfo(index_dtype).max)
    for name, value in sizes.items():
        if value > limit:
            raise InvariantError("1.3", layout,
                                 f"{name}={value} does not fit index dtype {index_dtype} (max {limit})")


def raw_view(values: np.ndarray) -> np.ndarray:
    """The same bytes as unsigned integers of the item size; complex128 becomes uint64 pairs,
    doubling the last dim. ``values`` must be C-contiguous and at least 1-d."""
    size = values.dtype.itemsize
    return values.view(np.uint64 if size == 16 else _RAW[size])


def zero_test_view(values: np.ndarray) -> np.ndarray:
    """A view in which "item != 0" tests each element: complex as float pairs (last dim
    doubled), float16 as uint16 (nonzero means ``x & 0x7fff``), bool as uint8."""
    dt = values.dtype
    if dt.kind == "c":
        return values.view(np.float32 if dt == np.complex64 else np.float64)
    if dt == np.float16:
        return values.view(np.uint16)
    if dt == np.bool_:
        return values.view(np.uint8)
    return values


def arith_view(values: np.ndarray) -> np.ndarray:
    """A view (or widened copy for float16) whose dtype the accumulating kernels take."""
    if values.dtype == np.bool_:
        return values.view(np.uint8)
    if values.dtype == np.float16:
        return values.astype(np.float32)
    return values
