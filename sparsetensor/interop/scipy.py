"""SciPy interop: :func:`from_scipy` and :func:`to_scipy`, zero-copy whenever dtypes and contiguity allow.

SciPy's CSR/CSC/BSR members (``indptr``, ``indices``, ``data``) are exactly our
compressed members, so a canonical SciPy matrix becomes a tensor that shares its
arrays, and back. Non-canonical input (unsorted or duplicate indices) is
repaired with :meth:`~sparsetensor.CompressedTensor.coalesce` (a copy); input
that breaks any other invariant is rejected with :class:`InvariantError`.
"""

from __future__ import annotations

import operator
import types

import numpy as np

from .._core import _layout as L
from .._core._canonical import ensure_valid, ensure_valid_export
from .._core._device import require_host
from .._core._dtypes import INDEX_DTYPES, VALUE_DTYPES
from .._core._errors import InvariantError
from .._core._from_arrays import sparse_compressed_tensor, sparse_coo_tensor
from .._core._tensor import COOTensor, CompressedTensor

__all__ = ["from_scipy", "to_scipy"]

_COMPRESSED_FORMATS = {"csr": L.sparse_csr, "csc": L.sparse_csc, "bsr": L.sparse_bsr}


def _import_scipy_sparse():
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover - scipy is a dependency of the test extra
        raise ImportError("SciPy interop needs scipy: pip install scipy") from None
    return sp


def _check_value_dtype(dtype) -> None:
    if np.dtype(dtype).newbyteorder("=") not in VALUE_DTYPES:  # byte-swapped data is made native on the way
        raise TypeError(f"SciPy matrix dtype {np.dtype(dtype)} is not a sparsetensor value dtype; "
                        f"convert it first (m.astype(...)); supported: {', '.join(map(str, VALUE_DTYPES))}")


def _stacked_coords(coords: tuple) -> np.ndarray:
    """``(S, nnz)`` indices from SciPy's coords tuple, without a copy when they are rows of one array."""
    S = len(coords)
    base = coords[0].base if S else None
    if (isinstance(base, np.ndarray) and base.ndim == 2 and base.shape[0] == S and base.flags.c_contiguous
            and all(c.dtype == base.dtype and c.shape == base.shape[1:]
                    and c.__array_interface__["data"][0] == base[d].__array_interface__["data"][0]
                    and c.strides == base[d].strides for d, c in enumerate(coords))):
        return base
    dtype = np.result_type(*(c.dtype for c in coords)) if S else np.int64
    out = np.empty((S, coords[0].shape[0] if S else 0), dtype=dtype if dtype in INDEX_DTYPES else np.int64)
    for d, c in enumerate(coords):
        out[d] = c
    return out


def _integer_indices(fmt: str, **arrays) -> None:
    """TypeError for index arrays that are not integers (SciPy only warns, and a cast would
    truncate 1.9 to 1); ValueError for unsigned ones past int64 (a cast would wrap them)."""
    for name, a in arrays.items():
        if a.dtype.kind not in "iu":
            raise TypeError(f"from_scipy: the {fmt} array's {name} has dtype {a.dtype}, not integers")
        if a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"from_scipy: the {fmt} array's {name} holds {int(a.max())}, beyond int64")


def from_scipy(m, *, check_invariants: bool = True):
    """A tensor from a SciPy sparse array or matrix, sharing its arrays when it can.

    ``csr``, ``csc`` and ``bsr`` become tensors of the same layout whose members
    are SciPy's ``indptr``, ``indices`` and ``data`` (no copy; storage past
    ``indptr[-1]``, which SciPy allows as spare room, is left out). ``coo`` becomes a
    COO tensor sharing ``data`` (its coordinates are stacked into one array, a copy,
    unless they are rows of one array already, as :func:`to_scipy` makes them).
    Other formats (``dia``, ``lil``, ``dok``) are converted to CSR by SciPy first, and 1-d
    arrays of any format to a 1-d COO tensor. Unsorted or duplicate compressed indices are
    repaired (sorted and summed, a copy); a COO array with duplicates is an uncoalesced
    tensor (also where its ``has_canonical_format`` was set by hand); any other broken
    invariant raises :class:`InvariantError`.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, sparsetensor as st
    >>> m = sp.csr_array(np.array([[0, 1.5], [2.0, 0]]))
    >>> t = st.from_scipy(m)
    >>> t.layout, np.shares_memory(t.values(), m.data)
    (st.sparse_csr, True)
    """
    sp = _import_scipy_sparse()
    if not sp.issparse(m):
        raise TypeError(f"from_scipy expects a scipy.sparse array or matrix, got {type(m).__name__}")
    fmt = m.format
    if m.ndim != 2 and fmt != "coo":  # SciPy's 1-d csr and dok arrays: a 1-d coo tensor
        m, fmt = m.tocoo(), "coo"
    elif fmt not in _COMPRESSED_FORMATS and fmt != "coo":
        m, fmt = m.tocsr(), "csr"
    _check_value_dtype(m.dtype)
    if fmt == "coo":
        _integer_indices(fmt, **{f"coords[{d}]": c for d, c in enumerate(m.coords)})
        indices = _stacked_coords(tuple(m.coords))
        canonical = bool(m.has_canonical_format)
        try:
            return sparse_coo_tensor(indices, m.data, m.shape, check_invariants=check_invariants,
                                     is_coalesced=canonical)
        except InvariantError as e:  # a flag set by hand on duplicates: the tensor is uncoalesced
            if not (canonical and e.invariant == "C6"):
                raise
            return sparse_coo_tensor(indices, m.data, m.shape, is_coalesced=False)
    layout = _COMPRESSED_FORMATS[fmt]
    indptr, indices, data = m.indptr, m.indices, m.data
    _integer_indices(fmt, indptr=indptr, indices=indices)
    if indptr.ndim == 1 and indptr.size and indices.ndim == 1 and 0 <= int(indptr[-1]) < indices.size:
        # SciPy's nnz is indptr[-1]: storage past it is spare room (its check_format prunes it)
        nnz = int(indptr[-1])
        indices, data = indices[:nnz], data[:nnz]
    if indptr.dtype != indices.dtype or indptr.dtype not in INDEX_DTYPES:
        dt = np.int64 if np.int64 in (indptr.dtype, indices.dtype) else np.int32
        indptr, indices = indptr.astype(dt, copy=False), indices.astype(dt, copy=False)
    t = sparse_compressed_tensor(indptr, indices, data, m.shape, layout=layout, check_invariants=False)
    # a row of more entries than columns holds repeats (SciPy allows them): repaired as 5.6 is
    return ensure_valid(t, repair=True, private=False) if check_invariants else t


# SciPy's methods that rewrite a compressed matrix's index arrays in place -> the flag under which
# SciPy skips the work (None: it always writes). On a result of to_scipy those arrays are the
# tensor's read-only views: SciPy's own refusal came partway (resize had already cut indptr and
# indices, and the matrix then read out of bounds: a crash; eliminate_zeros of a BSR matrix had
# moved the tensor's values), or as NumPy's "WRITEBACKIFCOPY base is read-only".
_REWRITES = {"resize": None, "eliminate_zeros": None, "sum_duplicates": "has_canonical_format",
             "sort_indices": "has_sorted_indices"}


def _refusing(name: str, flag):
    def method(m, *args, **kwargs):
        if not (m.indices.flags.writeable and m.indptr.flags.writeable):
            if flag is not None and getattr(m, flag):
                return None  # nothing to do: SciPy would return at once too
            shape = _shape_arg(args, kwargs) if name == "resize" else None
            if shape == m.shape:
                return None
            if shape is not None and len(shape) == len(m.shape) and all(a >= b for a, b in zip(shape, m.shape)):
                return getattr(type(m), name)(m, *args, **kwargs)  # growing: SciPy writes new arrays
            raise ValueError(f"{name} rewrites the index arrays in place, and these are a sparsetensor tensor's "
                             "(read-only): call it on m.copy()")
        return getattr(type(m), name)(m, *args, **kwargs)

    method.__name__ = name
    return method


def _shape_arg(args: tuple, kwargs: dict):
    """The shape that ``resize(*shape)`` was given, as a tuple of ints, or None when it is not one."""
    shape = kwargs.get("shape", args[0] if len(args) == 1 else args)
    try:
        return tuple(operator.index(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    except TypeError:
        return None


def to_scipy(t, kind: str = "array"):
    """A SciPy sparse array (``kind="array"``) or matrix (``kind="matrix"``) sharing this tensor's arrays.

    csr, csc and bsr tensors map to the same SciPy format; a coo tensor maps to
    ``coo_array`` (n-d allowed for arrays, 2-d for matrices) whose coordinates are
    views of rows of the index array. Batched or hybrid tensors raise
    ``ValueError`` (SciPy has neither batch nor dense dims); bsc raises
    ``NotImplementedError`` (SciPy has no BSC format).

    The index arrays are the tensor's read-only views: SciPy methods that rewrite
    indices in place (``resize``, ``eliminate_zeros``, ``sum_duplicates`` and
    ``sort_indices`` where there is work to do) raise ``ValueError`` on the result,
    before they change anything; call them on ``m.copy()``. Values stay shared and
    writeable.

    SciPy trusts the index arrays it is given, so a tensor that was never checked
    (built with ``check_invariants=False``) is checked first, once (the result is
    cached on the tensor): broken indices raise :class:`InvariantError`, and a
    compressed tensor whose only fault is unsorted or repeated indices in a row is
    handed over coalesced (a copy). A tensor built on index arrays the caller still
    holds (taken without a copy, as :func:`from_scipy` takes SciPy's) is checked
    again at each call, since the caller may have written them since.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.5, 2.0])
    >>> m = st.to_scipy(t)
    >>> m.format, np.shares_memory(m.data, t.values())
    ('csr', True)
    """
    sp = _import_scipy_sparse()
    if kind not in ("array", "matrix"):
        raise ValueError(f"kind must be 'array' or 'matrix', got {kind!r}")
    if not isinstance(t, (COOTensor, CompressedTensor)):
        raise TypeError(f"to_scipy expects a sparse tensor, got {type(t).__name__}")
    require_host(t, "to_scipy")
    name = t.layout.name
    if t.dtype == np.float16:
        raise TypeError("SciPy sparse does not support float16 values; convert first, e.g. t.to(np.float32)")
    if t.dense_dim:
        raise ValueError(f"cannot convert a hybrid {name} tensor (dense_dim={t.dense_dim}) to SciPy: SciPy "
                         "sparse matrices have scalar values only")
    if t.batch_dim:
        raise ValueError(f"cannot convert a batched {name} tensor (batch_dim={t.batch_dim}) to SciPy: SciPy "
                         "sparse matrices have no batch dims; convert each batch")
    t = ensure_valid_export(t, private=False)
    if isinstance(t, COOTensor):
        if t.ndim == 0:
            raise ValueError("cannot convert a 0-d coo tensor to SciPy: SciPy sparse arrays have at least 1 dim "
                             "(t.reshape(1) first)")
        if kind == "matrix" and t.ndim != 2:
            raise ValueError(f"scipy coo_matrix is 2-d; this coo tensor has {t.ndim} dims (use kind='array')")
        cls = sp.coo_array if kind == "array" else sp.coo_matrix
        coords = tuple(t.indices()[d] for d in range(t.sparse_dim))
        m = cls((t.values(), coords), shape=t.shape, copy=False)
        m.coords = coords  # SciPy may have picked another index dtype: ours are valid as they are
        m.has_canonical_format = t.is_coalesced()
        return m
    if name == "bsc":
        raise NotImplementedError("SciPy has no BSC format: use t.to_sparse_bsr(blocksize) for a copy, or "
                                  "t.mT.to_scipy() for the (bsr) transpose without one")
    cls = getattr(sp, f"{name}_{kind}")
    values = t.values()
    if name == "bsr":
        values = np.ascontiguousarray(values)  # SciPy wants row-major blocks; a copy only for transposed views
        m = cls((values, t.plain_indices(), t.compressed_indices()), shape=t.shape, blocksize=t.blocksize,
                copy=False)
    else:
        m = cls((values, t.plain_indices(), t.compressed_indices()), shape=t.shape, copy=False)
    for name, flag in _REWRITES.items():
        setattr(m, name, types.MethodType(_refusing(name, flag), m))
    # SciPy may pick another index dtype or copy: put our arrays back, they are valid as they are
    m.indices, m.indptr, m.data = t.plain_indices(), t.compressed_indices(), values
    if t.is_coalesced():
        m.has_sorted_indices = True
        m.has_canonical_format = True
    return m
