"""Constructors: turn user input into tensors, checking every invariant they can break.

The O(1) checks (dtypes, ndims, shapes, sizes that fit the index dtype) always
run; the O(nnz) index scans run when ``check_invariants`` is on (by default, see
:func:`sparsetensor.check_invariants`).
"""

from __future__ import annotations

import numpy as np

from . import _layout as L
from ._config import resolve_check
from ._device import as_device, device_constructor, is_device_array, move
from ._dtypes import INDEX_DTYPES, VALUE_DTYPES, as_value_dtype, native
from ._errors import InvariantError
from ._shape_checks import as_size, block_ndim, compressed_meta, coo_meta, values_contiguous
from ._tensor import COOTensor, CompressedTensor, hold_outside
from ._validate import check_compressed_indices, check_coo_indices

__all__ = ["sparse_coo_tensor", "sparse_compressed_tensor", "sparse_csr_tensor", "sparse_csc_tensor",
           "sparse_bsr_tensor", "sparse_bsc_tensor"]


# -- input normalisation -------------------------------------------------------------
def _as_index_array(x, name: str, layout: str) -> np.ndarray:
    """A C-contiguous int32/int64 array; other dtypes are refused (1.3), never cast.

    Python lists become int64 (an empty list too). Non-contiguous arrays are
    copied to contiguous ones (invariants 3.5/3.6), keeping their dtype, and arrays
    in non-native byte order to native ones (a copy), as :func:`sparsetensor.load` does.
    """
    from_list = not hasattr(x, "dtype")
    a = native(np.asarray(x))
    if from_list and a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise InvariantError("1.3", layout, f"{name} holds {int(a.max())}, beyond the int64 range")
    if from_list and (a.dtype.kind in "iu" or a.size == 0):
        a = a.astype(np.int64, copy=False)
    if a.dtype not in INDEX_DTYPES:
        read = (f" (NumPy read the list as {a.dtype}: an integer beyond the int64 range, or integers mixed with "
                "floats or unsigned 64-bit ones?)") if from_list and a.dtype.kind in "fO" else ""
        raise InvariantError("1.3", layout, f"{name} must have dtype int32 or int64, got {a.dtype}{read}")
    if not a.flags.c_contiguous:
        return a.copy(order="C")  # (ascontiguousarray would make 0-d 1-d)
    if not from_list and (a is x or a.base is not None):
        hold_outside(a)  # the caller's memory, taken as it is
    return a


def _as_values(x, dtype) -> np.ndarray:
    a = native(np.asarray(x))
    if dtype is not None:
        a = a.astype(as_value_dtype(dtype), copy=False)
    if a.dtype not in VALUE_DTYPES:
        raise TypeError(f"unsupported value dtype {a.dtype} (invariant 1.5); supported: "
                        f"{', '.join(map(str, VALUE_DTYPES))}")
    return a


def _on_device(t, device: str):
    """``t`` (built and checked on the CPU) moved to ``device`` when that is a CUDA device."""
    return t if device == "cpu" else move(t, device)


# -- COO ---------------------------------------------------------------------------------
def _host_index_extrema(indices: np.ndarray) -> tuple:
    return indices.max(axis=1), indices.min(axis=1)


def coo_indices_and_shape(indices, values, size, index_extrema=_host_index_extrema) -> tuple:
    """``(indices, shape)``: an empty 1-d index list made ``(sparse_dim, 0)``, and the shape,
    estimated when ``size`` is None as ``max + 1`` of each index row, then the dense sizes.

    ``index_extrema(indices)`` returns the per-row ``(max, min)`` (host arrays): NumPy here,
    a device reduction for device arrays (:mod:`sparsetensor.cuda.tensor`).
    """
    if indices.ndim == 1 and indices.size == 0:
        # torch accepts sparse_coo_tensor([], [], size): an empty index list.
        sparse_dim = (len(size) - max(values.ndim - 1, 0)) if size is not None else 1
        indices = indices.reshape(max(sparse_dim, 0), 0)
    if indices.ndim != 2:
        raise InvariantError("C2", "coo", f"indices must be 2-d (sparse_dim, nnz), got shape {indices.shape}")
    if size is None:
        if values.ndim < 1:
            raise InvariantError("C3", "coo", f"values must be at least 1-d (nnz, ...), got shape {values.shape}")
        if indices.shape[1]:
            hi, lo = index_extrema(indices)
            sparse = tuple(int(m) + 1 for m in hi)
            if lo.min() < 0:
                bad = int(np.argmin(lo))
                raise InvariantError("C4", "coo", f"indices[{bad}] must be >= 0; got {int(lo[bad])}")
        else:
            sparse = (0,) * indices.shape[0]
        size = sparse + tuple(values.shape[1:])
    return indices, as_size(size)


def _all_host(*members) -> bool:
    """True when every member is a NumPy array (the common case, decided without the device probe)."""
    return all(type(x) is np.ndarray for x in members)


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, check_invariants=None,
                      is_coalesced=None) -> COOTensor:
    """Build a COO tensor from ``indices`` (``(sparse_dim, nnz)``) and ``values`` (``(nnz,) + dense``).

    Parameters
    ----------
    indices : array_like of int32 or int64
        Row ``d`` holds the coordinates along sparse dim ``d``. Lists become int64.
    values : array_like
        One value (or dense sub-array, for hybrid tensors) per column of ``indices``.
    size : sequence of int, optional
        The shape. Estimated when omitted: ``indices[d].max() + 1`` per sparse
        dim, then ``values.shape[1:]``.
    dtype : dtype, optional
        Convert ``values`` to this dtype.
    device : str, optional
        ``"cpu"`` (default for host input) or ``"cuda[:N]"``: host input is built on the CPU
        and moved. Device arrays (see below) give a CUDA tensor on their device.
    check_invariants : bool, optional
        Scan the indices (bounds, and sortedness when ``is_coalesced=True``).
        Defaults to the context's setting, see :func:`check_invariants`.
    is_coalesced : bool, optional
        Declare the indices sorted and distinct (checked when checking is on).

    Notes
    -----
    Host arrays of the right dtype are used without a copy; the tensor holds a
    read-only view of ``indices``. Writing afterwards to the array you passed in is
    undefined behaviour (an op may raise or compute wrong values, but never reads or
    writes out of bounds); see :func:`sparse_compressed_tensor`.

    Members that are CUDA device arrays (``__cuda_array_interface__`` or a CUDA
    ``__dlpack__``: CuPy arrays, PyTorch CUDA tensors) are taken without a copy and give a
    CUDA tensor on their device, checked and shape-estimated on the device; host members
    given with them are copied there. See :func:`sparsetensor.cuda.coo_tensor`.

    Examples
    --------
    >>> import sparsetensor as st
    >>> t = st.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], size=(2, 3))
    >>> t.to_dense()
    array([[0., 0., 3.],
           [4., 0., 5.]])
    """
    if not _all_host(indices, values) and (is_device_array(indices) or is_device_array(values)):
        return device_constructor("coo")(indices, values, size, dtype=dtype, device=device,
                                         check_invariants=check_invariants, is_coalesced=is_coalesced)
    device = as_device(device)
    values = _as_values(values, dtype)
    indices, shape = coo_indices_and_shape(_as_index_array(indices, "indices", "coo"), values, size)
    coo_meta(indices, values, shape)
    coalesced = bool(is_coalesced) or indices.shape[1] <= 1
    checked = resolve_check(check_invariants)
    if checked:
        check_coo_indices(indices, shape, coalesced=bool(is_coalesced))
    return _on_device(COOTensor(indices, values, shape, coalesced, checked=checked), device)


# -- compressed -------------------------------------------------------------------------
def _host_max(plain: np.ndarray) -> int:
    return int(plain.max())


def _host_max_step(compressed: np.ndarray) -> int:
    return int(np.diff(compressed, axis=-1).max())


def estimate_compressed_shape(compressed, plain, values, layout, index_max=_host_max,
                              max_step=_host_max_step) -> tuple:
    """Seed 003, "Estimating the shape": the plain size is max(plain.max() + 1, max row length).

    ``index_max(plain)`` and ``max_step(compressed)`` read the two numbers: NumPy here, a
    device reduction for device arrays (:mod:`sparsetensor.cuda.tensor`)."""
    m = compressed.ndim - 1
    b = block_ndim(layout)
    if plain.ndim != m + 1:
        raise InvariantError("3.3", layout.name, f"{layout.plain_name}.ndim must be {m + 1}, got {plain.ndim}")
    if values.ndim < m + 1 + b:
        raise InvariantError("3.4", layout.name, f"values.ndim must be at least {m + 1 + b}, got {values.ndim}")
    blocksize = tuple(values.shape[m + 1: m + 3]) if b else (1, 1)
    n_compressed = compressed.shape[-1] - 1
    n_plain = index_max(plain) + 1 if plain.size else 0
    if compressed.shape[-1] > 1 and compressed.size:
        n_plain = max(n_plain, max_step(compressed))
    if n_compressed < 0:
        raise InvariantError("3.8", layout.name, f"{layout.compressed_name} must have at least one entry per batch")
    nrows, ncols = (n_compressed, n_plain) if layout.compressed_rows else (n_plain, n_compressed)
    dense = tuple(values.shape[m + 1 + b:])
    return tuple(compressed.shape[:-1]) + (nrows * blocksize[0], ncols * blocksize[1]) + dense


def _prepare_values(values: np.ndarray, m: int, layout: L.Layout) -> np.ndarray:
    """Contiguous values (3.7): a documented copy unless already contiguous (or block-transposed contiguous)."""
    b = block_ndim(layout)
    n = values.ndim - m - 1 - b
    if n >= 0 and values_contiguous(values, n, b):
        return values
    return values.copy(order="C")


def sparse_compressed_tensor(compressed_indices, plain_indices, values, size=None, *, layout, dtype=None,
                             device=None, check_invariants=None) -> CompressedTensor:
    """Build a CSR, CSC, BSR or BSC tensor (``layout=``), with optional batch and dense dims.

    Parameters
    ----------
    compressed_indices : array_like of int32 or int64, shape ``batch + (n + 1,)``
        ``crow_indices`` for csr/bsr, ``ccol_indices`` for csc/bsc.
    plain_indices : array_like, shape ``batch + (nnz,)``
        ``col_indices`` for csr/bsr, ``row_indices`` for csc/bsc; same dtype.
    values : array_like, shape ``batch + (nnz,) + blocksize + dense``
        (no blocksize dims for csr/csc).
    size : sequence of int, optional
        ``batch + (nrows, ncols) + dense``; estimated as seed 003 says when omitted.
    layout : str or Layout
    dtype : dtype, optional
        Convert ``values`` to this dtype.
    check_invariants : bool, optional
        Run the O(nnz) checks of invariants 5.1-5.6 (the O(1) ones always run).
        Defaults to the context's setting, see :func:`check_invariants`.

    Notes
    -----
    Index arrays keep their dtype; non-contiguous inputs are copied to
    contiguous arrays (invariants 3.5-3.7); other inputs are used without a copy.
    The tensor holds read-only views of its index arrays (its accessors return
    them), so nothing changes them through this library once they were checked.
    Writing afterwards to the arrays you passed in is undefined behaviour, as with
    SciPy's ``copy=False``: an op may raise or compute wrong values, but never reads
    or writes out of bounds. Pass copies (``np.array(a)``) to keep yours writeable.
    CUDA device arrays (CuPy, PyTorch CUDA tensors, ...) give a CUDA tensor on their
    device without a copy, as for :func:`sparse_coo_tensor`
    (:func:`sparsetensor.cuda.compressed_tensor`); ``device="cuda[:N]"`` moves a tensor
    built from host input.

    Examples
    --------
    >>> import sparsetensor as st
    >>> t = st.sparse_compressed_tensor([0, 1, 1], [0], [[[1, 2], [3, 4]]], layout="bsr")
    >>> t.shape, t.blocksize
    ((4, 2), (2, 2))
    """
    layout = L.as_layout(layout)
    if not layout.compressed:
        raise ValueError(f"sparse_compressed_tensor needs a compressed layout (csr, csc, bsr, bsc), got {layout!r}")
    if not _all_host(compressed_indices, plain_indices, values) and any(
            is_device_array(x) for x in (compressed_indices, plain_indices, values)):
        return device_constructor("compressed")(compressed_indices, plain_indices, values, size, layout=layout,
                                                dtype=dtype, device=device, check_invariants=check_invariants)
    device = as_device(device)
    values = _as_values(values, dtype)
    compressed = _as_index_array(compressed_indices, layout.compressed_name, layout.name)
    plain = _as_index_array(plain_indices, layout.plain_name, layout.name)
    if compressed.ndim < 1:
        raise InvariantError("3.2", layout.name, f"{layout.compressed_name} must be at least 1-d")
    values = _prepare_values(values, compressed.ndim - 1, layout)
    if compressed.dtype != plain.dtype:
        raise InvariantError("1.2", layout.name, f"{layout.plain_name} must have the dtype of "
                             f"{layout.compressed_name} ({compressed.dtype}), got {plain.dtype}")
    if size is None:
        size = estimate_compressed_shape(compressed, plain, values, layout)
    shape = as_size(size)
    meta = compressed_meta(compressed, plain, values, shape, layout)
    check = resolve_check(check_invariants)
    t = CompressedTensor(compressed, plain, values, shape, layout, canonical=check)
    if check:
        check_compressed_indices(compressed, plain, layout, meta.plain_size)
    return _on_device(t, device)


def _layout_constructor(layout: L.Layout):
    c, p = layout.compressed_name, layout.plain_name

    def build(compressed_indices, plain_indices, values, size=None, *, dtype=None, device=None,
              check_invariants=None):
        return sparse_compressed_tensor(compressed_indices, plain_indices, values, size, layout=layout,
                                        dtype=dtype, device=device, check_invariants=check_invariants)

    block = "blocks of shape ``blocksize``" if layout.blocked else "elements"
    example = {
        "csr": ("[0, 2, 3], [0, 2, 1], [1, 2, 3]", "[[1, 0, 2],\n           [0, 3, 0]]"),
        "csc": ("[0, 1, 2, 3], [0, 1, 0], [1, 3, 2]", "[[1, 0, 2],\n           [0, 3, 0]]"),
        "bsr": ("[0, 1], [1], [[[1, 2]]]", "[[0, 0, 1, 2]]"),
        "bsc": ("[0, 0, 1], [0], [[[1], [2]]]", "[[0, 1],\n           [0, 2]]"),
    }[layout.name]
    build.__name__ = build.__qualname__ = f"sparse_{layout.name}_tensor"
    build.__doc__ = f"""Build a {layout.name.upper()} tensor from ``{c}``, ``{p}`` and ``values``.

    The same as :func:`sparse_compressed_tensor` with ``layout="{layout.name}"``: the
    compressed index runs over {"rows" if layout.compressed_rows else "columns"} and
    the entries are {block}.

    Examples
    --------
    >>> import sparsetensor as st
    >>> st.sparse_{layout.name}_tensor({example[0]}).to_dense()
    array({example[1]})
    """
    return build


sparse_csr_tensor = _layout_constructor(L.sparse_csr)
sparse_csc_tensor = _layout_constructor(L.sparse_csc)
sparse_bsr_tensor = _layout_constructor(L.sparse_bsr)
sparse_bsc_tensor = _layout_constructor(L.sparse_bsc)
