"""Sparse tensors on a CUDA device, and the device op entry points.

:class:`CudaCOOTensor` and :class:`CudaCompressedTensor` mirror the CPU classes
(:class:`~sparsetensor.COOTensor`, :class:`~sparsetensor.CompressedTensor`): the
same attribute and method names, with :class:`~sparsetensor.cuda.DeviceArray`
members. They are not subclasses of the CPU classes, so no NumPy code path ever
takes them by accident; an op without a GPU kernel raises
:class:`NotImplementedError` naming the op, and nothing is copied to the host
unless asked (``cpu()``, ``to("cpu")``, :func:`to_host`).

Move tensors with :func:`to_device` / :func:`to_host`; build them from device
arrays (CuPy, PyTorch CUDA tensors, DeviceArrays: zero-copy) with
:func:`coo_tensor` / :func:`compressed_tensor`.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _layout as L
from ._array import DeviceArray, as_device_array
from ._driver import get_device

__all__ = ["CudaSparseTensor", "CudaCOOTensor", "CudaCompressedTensor", "to_device", "to_host", "coo_tensor",
           "compressed_tensor", "validate", "coalesce", "to_sparse", "to_dense", "from_dense", "matmul", "add", "mul",
           "sum", "unary", "sampled_addmm", "is_cuda_tensor"]


class CudaSparseTensor:
    """What the two device tensor classes share."""

    __slots__ = ("_shape", "_layout", "__weakref__")

    @property
    def shape(self) -> tuple:
        return self._shape

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[dim]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    @property
    def layout(self) -> L.Layout:
        return self._layout

    @property
    def dtype(self) -> np.dtype:
        return self.values().dtype

    @property
    def device(self) -> str:
        return self.values().device

    @property
    def device_id(self) -> int:
        return self.values().device_id

    @property
    def is_cuda(self) -> bool:
        return True

    @property
    def is_sparse(self) -> bool:
        return True

    def numel(self) -> int:
        return math.prod(self._shape)

    def _dev(self):
        return self.values()._device

    # -- moves and conversions -------------------------------------------------------------------
    def cpu(self):
        """A CPU tensor with host copies of the members."""
        return to_host(self)

    def cuda(self, device=None):
        return to_device(self, "cuda" if device is None else device)

    def to(self, *args, dtype=None, device=None, index_dtype=None, copy: bool = False):
        """Move or convert, as the CPU tensors' ``to``: ``t.to("cpu")`` copies to the host,
        ``t.to("cuda:1")`` to another device (``self`` if already there),
        ``t.to(index_dtype=np.int32)`` casts the indices on the device. Converting the values'
        dtype on the device is supported between float16 and float32 only."""
        from .._device import is_device_like

        for a in args:
            if is_device_like(a):
                device = a
            else:
                dtype = a
        out = self
        if dtype is not None:
            out = out._astype(dtype)
        if index_dtype is not None:
            out = out._with_index_dtype(index_dtype)
        elif copy and out is self:
            out = self.clone()
        if device is not None:
            out = to_host(out) if str(device) == "cpu" else to_device(out, device)
        return out

    def _astype(self, dtype):
        from .._dtypes import as_value_dtype
        from . import _primitives as P

        dt = as_value_dtype(dtype)
        v = self.values()
        if dt == v.dtype:
            return self
        pair = (v.dtype.name, dt.name)
        if pair == ("float16", "float32"):
            return self._replace_values(P.half_to_float(self._dev(), v))
        if pair == ("float32", "float16"):
            return self._replace_values(P.float_to_half(self._dev(), v))
        raise NotImplementedError(f"astype {v.dtype} -> {dt} on cuda has no GPU kernel (float16 <-> float32 "
                                  "only); convert on the CPU")

    def to_dense(self) -> DeviceArray:
        return to_dense(self)

    def to_sparse(self, layout=None, *, blocksize=None, dense_dim=None):
        return to_sparse(self, self._layout if layout is None else layout, blocksize=blocksize, dense_dim=dense_dim)

    def to_sparse_coo(self):
        return self.to_sparse(L.sparse_coo)

    def to_sparse_csr(self, *, dense_dim=None):
        return self.to_sparse(L.sparse_csr, dense_dim=dense_dim)

    def to_sparse_csc(self, *, dense_dim=None):
        return self.to_sparse(L.sparse_csc, dense_dim=dense_dim)

    def to_sparse_bsr(self, blocksize, *, dense_dim=None):
        return self.to_sparse(L.sparse_bsr, blocksize=blocksize, dense_dim=dense_dim)

    def to_sparse_bsc(self, blocksize, *, dense_dim=None):
        return self.to_sparse(L.sparse_bsc, blocksize=blocksize, dense_dim=dense_dim)

    def check_invariants(self) -> None:
        """Every invariant, the O(nnz) ones on the device; raises :class:`~sparsetensor.InvariantError`."""
        validate(self)

    def __matmul__(self, other):
        return matmul(self, other)

    def __add__(self, other):
        return add(self, other)

    def __sub__(self, other):
        return add(self, other, alpha=-1)

    def __mul__(self, other):
        return mul(self, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        from ._pointwise import div_scalar

        return div_scalar(self, other)

    def __neg__(self):
        return unary(self, "neg")

    def __array__(self, dtype=None, copy=None):
        raise TypeError(f"a {self._layout.name} tensor on {self.device} does not convert to a NumPy array "
                        "implicitly; use .cpu() or .to_dense().get()")

    def _summary(self) -> str:
        return (f"{self._layout.name}({self.dtype}{list(self._shape)}, nnz={self.nnz}{self._summary_extra()}, "
                f"index={self.index_dtype}, device={self.device!r})")

    __repr__ = _summary


class CudaCOOTensor(CudaSparseTensor):
    """A COO tensor on a CUDA device: ``indices`` ``(sparse_dim, nnz)``, ``values`` ``(nnz,) + dense``."""

    __slots__ = ("_indices", "_values", "_coalesced")

    def __init__(self, indices: DeviceArray, values: DeviceArray, shape: tuple, coalesced: bool = False):
        self._indices = indices
        self._values = values
        self._shape = tuple(int(s) for s in shape)
        self._layout = L.sparse_coo
        self._coalesced = bool(coalesced)

    @property
    def nnz(self) -> int:
        return self._indices.shape[1]

    @property
    def sparse_dim(self) -> int:
        return self._indices.shape[0]

    @property
    def dense_dim(self) -> int:
        return self._values.ndim - 1

    @property
    def batch_dim(self) -> int:
        return 0

    @property
    def blocksize(self):
        return None

    @property
    def index_dtype(self) -> np.dtype:
        return self._indices.dtype

    def indices(self) -> DeviceArray:
        return self._indices

    def values(self) -> DeviceArray:
        return self._values

    def is_coalesced(self) -> bool:
        return self._coalesced

    def coalesce(self) -> "CudaCOOTensor":
        return coalesce(self)

    def clone(self) -> "CudaCOOTensor":
        return CudaCOOTensor(self._indices.copy(), self._values.copy(), self._shape, self._coalesced)

    def _replace_values(self, values):
        return CudaCOOTensor(self._indices, values, self._shape, self._coalesced)

    def _with_index_dtype(self, index_dtype):
        from .._dtypes import as_index_dtype, check_fits
        from . import _primitives as P

        dt = as_index_dtype(index_dtype)
        if dt == self.index_dtype:
            return self
        check_fits(dt, "coo", **{f"size[{d}]": self._shape[d] for d in range(self.sparse_dim)})
        return CudaCOOTensor(P.cast_index(self._dev(), self._indices, dt), self._values, self._shape, self._coalesced)

    def _summary_extra(self) -> str:
        return f", sparse_dim={self.sparse_dim}" + (", coalesced" if self._coalesced else "")


class CudaCompressedTensor(CudaSparseTensor):
    """A CSR, CSC, BSR or BSC tensor on a CUDA device (batch and dense dims as on the CPU)."""

    __slots__ = ("_compressed", "_plain", "_values", "_canonical")

    def __init__(self, compressed: DeviceArray, plain: DeviceArray, values: DeviceArray, shape: tuple,
                 layout: L.Layout, canonical: bool = False):
        self._compressed = compressed
        self._plain = plain
        self._values = values
        self._shape = tuple(int(s) for s in shape)
        self._layout = layout
        self._canonical = bool(canonical)

    @property
    def nnz(self) -> int:
        return self._plain.shape[-1]

    @property
    def batch_dim(self) -> int:
        return self._compressed.ndim - 1

    @property
    def sparse_dim(self) -> int:
        return 2

    @property
    def dense_dim(self) -> int:
        return self._values.ndim - self.batch_dim - 1 - (2 if self._layout.blocked else 0)

    @property
    def blocksize(self) -> tuple:
        if not self._layout.blocked:
            return (1, 1)
        m = self.batch_dim
        return tuple(self._values.shape[m + 1: m + 3])

    @property
    def index_dtype(self) -> np.dtype:
        return self._compressed.dtype

    @property
    def plain_size(self) -> int:
        m = self.batch_dim
        if self._layout.compressed_rows:
            return self._shape[m + 1] // self.blocksize[1]
        return self._shape[m] // self.blocksize[0]

    def compressed_indices(self) -> DeviceArray:
        return self._compressed

    def plain_indices(self) -> DeviceArray:
        return self._plain

    def values(self) -> DeviceArray:
        return self._values

    def _member(self, rows: bool, compressed: bool, name: str) -> DeviceArray:
        if self._layout.compressed_rows != rows:
            raise TypeError(f"{name}() is not defined for layout {self._layout!r}; "
                            f"use {self._layout.compressed_name if compressed else self._layout.plain_name}()")
        return self._compressed if compressed else self._plain

    def crow_indices(self) -> DeviceArray:
        return self._member(True, True, "crow_indices")

    def col_indices(self) -> DeviceArray:
        return self._member(True, False, "col_indices")

    def ccol_indices(self) -> DeviceArray:
        return self._member(False, True, "ccol_indices")

    def row_indices(self) -> DeviceArray:
        return self._member(False, False, "row_indices")

    def is_coalesced(self) -> bool:
        return self._canonical

    def coalesce(self):
        return coalesce(self)

    def clone(self) -> "CudaCompressedTensor":
        return CudaCompressedTensor(self._compressed.copy(), self._plain.copy(), self._values.copy(), self._shape,
                                    self._layout, self._canonical)

    def _replace_values(self, values):
        return CudaCompressedTensor(self._compressed, self._plain, values, self._shape, self._layout, self._canonical)

    def _with_index_dtype(self, index_dtype):
        from .._dtypes import as_index_dtype, check_fits
        from . import _primitives as P

        dt = as_index_dtype(index_dtype)
        if dt == self.index_dtype:
            return self
        m = self.batch_dim
        check_fits(dt, self._layout.name, nnz=self.nnz, nrows=self._shape[m], ncols=self._shape[m + 1])
        dev = self._dev()
        return CudaCompressedTensor(P.cast_index(dev, self._compressed, dt), P.cast_index(dev, self._plain, dt),
                                    self._values, self._shape, self._layout, self._canonical)

    @property
    def mT(self):
        """The transpose of the two sparse dims: csr <-> csc shares every member; bsr <-> bsc
        shares the indices and transposes the blocks on the device (values must stay contiguous)."""
        from ._convert import matrix_transpose

        return matrix_transpose(self)

    def _summary_extra(self) -> str:
        parts = []
        if self._layout.blocked:
            parts.append(f"blocksize={self.blocksize}")
        if self.batch_dim:
            parts.append(f"batch_dim={self.batch_dim}")
        if self.dense_dim:
            parts.append(f"dense_dim={self.dense_dim}")
        return "".join(", " + p for p in parts)


def is_cuda_tensor(t) -> bool:
    return isinstance(t, CudaSparseTensor)


# -- moving between host and device ------------------------------------------------------------------

def to_device(t, device="cuda"):
    """A copy of sparse tensor ``t`` on ``device`` (``"cuda"``, ``"cuda:N"``, N).

    A CPU tensor's members are copied to the device (values made contiguous first);
    its flags (coalesced / canonical) travel with it. A device tensor already on
    ``device`` is returned as it is; one on another device goes through the host.

    Examples
    --------
    >>> import sparsetensor as st                                  # doctest: +SKIP
    >>> from sparsetensor.cuda import to_device, to_host           # doctest: +SKIP
    >>> t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [5.0, 6.0])    # doctest: +SKIP
    >>> d = to_device(t, "cuda"); d.device                         # doctest: +SKIP
    'cuda:0'
    >>> (to_host(d).to_dense() == t.to_dense()).all()              # doctest: +SKIP
    True
    """
    from .._tensor import COOTensor, CompressedTensor

    dev = get_device(device)
    if isinstance(t, CudaSparseTensor):
        if t.device_id == dev.ordinal:
            return t
        t = to_host(t)
    if isinstance(t, COOTensor):
        return CudaCOOTensor(DeviceArray.from_host(t.indices(), dev), DeviceArray.from_host(t.values(), dev),
                             t.shape, t.is_coalesced())
    if isinstance(t, CompressedTensor):
        return CudaCompressedTensor(DeviceArray.from_host(t.compressed_indices(), dev),
                                    DeviceArray.from_host(t.plain_indices(), dev),
                                    DeviceArray.from_host(np.ascontiguousarray(t.values()), dev),
                                    t.shape, t.layout, t.is_coalesced())
    raise TypeError(f"to_device expects a sparse tensor, got {type(t).__name__}")


def to_host(t):
    """A CPU tensor (NumPy members) with the contents and flags of device tensor ``t``."""
    from .._tensor import COOTensor, CompressedTensor

    if isinstance(t, CudaCOOTensor):
        return COOTensor(t.indices().get(), t.values().get(), t.shape, t.is_coalesced())
    if isinstance(t, CudaCompressedTensor):
        return CompressedTensor(t.compressed_indices().get(), t.plain_indices().get(), t.values().get(), t.shape,
                                t.layout, t.is_coalesced())
    raise TypeError(f"to_host expects a CUDA sparse tensor, got {type(t).__name__}")


class _Flags:
    """What the CPU member checks read of ``.flags``: device arrays are always C-contiguous."""

    c_contiguous = True
    writeable = True


def _member(x, dev, name: str) -> DeviceArray:
    if isinstance(x, np.ndarray) or isinstance(x, (list, tuple)):
        return DeviceArray.from_host(np.asarray(x), dev)
    try:
        return as_device_array(x, dev)
    except TypeError:
        raise TypeError(f"{name} must be a device array (DeviceArray, CuPy, PyTorch CUDA tensor) or a NumPy "
                        f"array, got {type(x).__name__}") from None


class _Checkable:
    """A DeviceArray seen by the CPU's O(1) member checks (shape, ndim, dtype, flags)."""

    def __init__(self, a: DeviceArray):
        self.shape, self.ndim, self.dtype, self.flags = a.shape, a.ndim, a.dtype, _Flags()

    def swapaxes(self, *args):
        return self


def coo_tensor(indices, values, size, *, device="cuda", check_invariants=None, is_coalesced=None) -> CudaCOOTensor:
    """A COO tensor on ``device`` from device arrays (taken without a copy) or NumPy arrays (copied).

    ``size`` is required (estimating it would read the indices). The O(1) invariants are
    checked always, the O(nnz) ones (C4-C6) on the device when ``check_invariants``
    (default: :func:`sparsetensor.get_check_invariants`).
    """
    from .._config import resolve_check
    from .._dtypes import VALUE_DTYPES
    from .._factory import _as_size, check_coo_members

    if size is None:
        raise NotImplementedError("size estimation for cuda tensors: pass size=")
    dev = get_device(device)
    idx = _member(indices, dev, "indices")
    vals = _member(values, dev, "values")
    if idx.dtype not in (np.int32, np.int64):
        from .._errors import InvariantError

        raise InvariantError("1.3", "coo", f"indices must have dtype int32 or int64, got {idx.dtype}")
    if vals.dtype not in VALUE_DTYPES:
        raise TypeError(f"unsupported value dtype {vals.dtype}")
    shape = _as_size(size)
    check_coo_members(_Checkable(idx), _Checkable(vals), shape)
    t = CudaCOOTensor(idx, vals, shape, bool(is_coalesced) or idx.shape[1] <= 1)
    if resolve_check(check_invariants):
        validate(t)
    return t


def compressed_tensor(compressed_indices, plain_indices, values, size, *, layout, device="cuda",
                      check_invariants=None) -> CudaCompressedTensor:
    """A csr/csc/bsr/bsc tensor on ``device`` from device arrays (zero-copy) or NumPy arrays (copied).

    ``size`` is required. O(1) invariants always, 5.1-5.6 on the device when checking.
    """
    from .._config import resolve_check
    from .._dtypes import VALUE_DTYPES
    from .._factory import _as_size, check_compressed_members

    layout = L.as_layout(layout)
    if not layout.compressed:
        raise ValueError(f"compressed_tensor needs a compressed layout, got {layout!r}")
    if size is None:
        raise NotImplementedError("size estimation for cuda tensors: pass size=")
    dev = get_device(device)
    c = _member(compressed_indices, dev, layout.compressed_name)
    p = _member(plain_indices, dev, layout.plain_name)
    v = _member(values, dev, "values")
    if v.dtype not in VALUE_DTYPES:
        raise TypeError(f"unsupported value dtype {v.dtype}")
    shape = _as_size(size)
    check_compressed_members(_Checkable(c), _Checkable(p), _Checkable(v), shape, layout)
    check = resolve_check(check_invariants)
    t = CudaCompressedTensor(c, p, v, shape, layout, canonical=False)
    if check:
        validate(t)
        t._canonical = True
    return t


# -- op entry points (implemented in the op modules) ---------------------------------------------------

def validate(t) -> None:
    """Check every invariant of device tensor ``t`` on the device (see :mod:`._validate`)."""
    from ._validate import check_tensor

    check_tensor(t)


def coalesce(t):
    """COO: sort and sum duplicates on the device; compressed: repair unsorted rows (see :mod:`._coalesce`)."""
    from ._coalesce import coalesce as _coalesce

    return _coalesce(t)


def to_sparse(t, layout, *, blocksize=None, dense_dim=None):
    from ._convert import to_sparse as _to_sparse

    return _to_sparse(t, layout, blocksize=blocksize, dense_dim=dense_dim)


def to_dense(t) -> DeviceArray:
    from ._dense import to_dense as _to_dense

    return _to_dense(t)


def from_dense(array, layout="csr", *, blocksize=None, dense_dim=0, batch_dim=0, index_dtype=np.int64, device=None):
    from ._dense import from_dense as _from_dense

    return _from_dense(array, layout, blocksize=blocksize, dense_dim=dense_dim, batch_dim=batch_dim,
                       index_dtype=index_dtype, device=device)


def matmul(a, b):
    from ._blas import matmul as _matmul

    return _matmul(a, b)


def sampled_addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0):
    from ._blas import sampled_addmm as _sddmm

    return _sddmm(input, mat1, mat2, beta=beta, alpha=alpha)


def add(a, b, *, alpha=1):
    from ._binary import add as _add

    return _add(a, b, alpha=alpha)


def mul(a, b):
    from ._binary import mul as _mul

    return _mul(a, b)


def sum(t, dim=None):  # noqa: A001 - torch's name
    from ._reduce import sum as _sum

    return _sum(t, dim)


def unary(t, op: str):
    from ._pointwise import unary as _unary

    return _unary(t, op)
