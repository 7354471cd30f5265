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

import numpy as np

from .. import _layout as L
from ..ops import binary as _binary_ops, blas as _blas_ops
from ._array import DeviceArray, as_device_array
from ._blas import coo_product as _coo_product
from .._tensor import _COOBase, _CompressedBase, _SparseBase
from ._driver import get_device

__all__ = ["CudaSparseTensor", "CudaCOOTensor", "CudaCompressedTensor", "to_device", "to_host", "coo_tensor",
           "compressed_tensor", "validate", "coalesce", "to_sparse", "to_dense", "from_dense", "matmul", "add", "mul",
           "sum", "unary", "sampled_addmm", "is_cuda_tensor"]


class CudaSparseTensor(_SparseBase):
    """What the two device tensor classes share (the attributes shared with the CPU classes
    come from :class:`sparsetensor._tensor._SparseBase`)."""

    __slots__ = ("_shape", "_layout", "__weakref__")
    __array_priority__ = 1000
    __array_ufunc__ = None  # NumPy refuses ufuncs and ``ndarray OP t`` (TypeError) instead of densifying

    @property
    def device(self) -> str:
        return self.values().device

    @property
    def device_id(self) -> int:
        return self.values().device_id

    @property
    def is_cuda(self) -> bool:
        return True

    def _dev(self):
        return self.values()._device

    def _cast_values(self, a: DeviceArray, dtype) -> DeviceArray:
        return cast_values(a, dtype)

    def _cast_index(self, a: DeviceArray, dtype) -> DeviceArray:
        from . import _primitives as P

        return P.cast_index(self._dev(), a, dtype)

    # -- moves and conversions -------------------------------------------------------------------
    def cpu(self):
        """A CPU tensor with host copies of the members (``t.to("cpu")``)."""
        return to_host(self)

    def to_dense(self, *, threads=None) -> DeviceArray:
        """The dense DeviceArray (``threads``, the CPU's parameter, is accepted and unused)."""
        return to_dense(self)

    def to_sparse(self, layout=None, *, blocksize=None, dense_dim=None, threads=None):
        """Another layout, on the device (``threads``, the CPU's parameter, is accepted and unused)."""
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

    # -- ops with a GPU kernel -------------------------------------------------------------------
    # products: the CPU's op code (sparsetensor.ops.blas: operands, dtypes, shapes and broadcasting
    # resolved once), then the CUDA backend's ``spmm`` through the layout's ``_matmul_dense`` hook
    __matmul__ = _blas_ops.matmul
    mm = _blas_ops.mm
    mv = _blas_ops.mv
    matmul = dot = __matmul__  # torch's and NumPy's names, as on the CPU classes

    # add/sub: the CPU's op code (sparsetensor.ops.binary: dtypes, alpha, layouts resolved once), then
    # the CUDA backend's merge
    __add__ = add = _binary_ops.add
    __sub__ = sub = _binary_ops.sub

    def __mul__(self, other):
        return mul(self, other)

    __rmul__ = mul = __mul__

    def __truediv__(self, other):
        from ._pointwise import div_scalar

        return div_scalar(self, other)

    div = __truediv__

    def __pow__(self, exponent):
        from ._pointwise import pow_scalar

        return pow_scalar(self, exponent)

    pow = __pow__

    def __neg__(self):
        return unary(self, "neg")

    def __abs__(self):
        return unary(self, "abs")

    def sum(self, dim=None, keepdim=False):
        """Sum of all elements (a 0-d DeviceArray) or over one sparse dim of a compressed tensor."""
        if keepdim:
            raise NotImplementedError(f"sum(keepdim=True) of a {self._layout.name} tensor on cuda has no GPU kernel")
        return sum(self, dim)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(f"a {self._layout.name} tensor on {self.device} does not convert to a NumPy array "
                        "implicitly; use .cpu() or .to_dense().get()")

    __repr__ = _SparseBase._summary


class CudaCOOTensor(_COOBase, CudaSparseTensor):
    """A COO tensor on a CUDA device: ``indices`` ``(sparse_dim, nnz)``, ``values`` ``(nnz,) + dense``."""

    __slots__ = ("_indices", "_values", "_coalesced")

    def __init__(self, indices: DeviceArray, values: DeviceArray, shape: tuple, coalesced: bool = False):
        self._indices = indices
        self._values = values
        self._shape = tuple(int(s) for s in shape)
        self._layout = L.sparse_coo
        self._coalesced = bool(coalesced)

    def coalesce(self) -> "CudaCOOTensor":
        return coalesce(self)

    def transpose(self, dim0: int, dim1: int):
        """Swapping two sparse dims permutes the index rows (device copies; the result is not
        coalesced, as on the CPU); transposing dense dims has no GPU kernel."""
        from .._meta import normalize_dim
        from . import _primitives as P

        a, b = normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim)
        S = self.sparse_dim
        if a == b:
            return self
        if a >= S or b >= S:
            raise NotImplementedError(f"transpose({dim0}, {dim1}) of a coo tensor on cuda: only sparse dims have a "
                                      "GPU kernel")
        dev, idx = self._dev(), self._indices
        out = P.empty(dev, idx.shape, idx.dtype)
        for r in range(S):
            src = {a: b, b: a}.get(r, r)
            dev.copy_dtod(out[r].ptr, idx[src].ptr, idx[src].nbytes)
        shape = list(self._shape)
        shape[a], shape[b] = shape[b], shape[a]
        return CudaCOOTensor(out, self._values, tuple(shape), False)

    @property
    def mT(self):
        """The transpose of the last two sparse dims (see :meth:`transpose`)."""
        if self.sparse_dim < 2:
            raise ValueError(f"mT needs at least 2 sparse dims, got sparse_dim={self.sparse_dim}")
        return self.transpose(self.sparse_dim - 2, self.sparse_dim - 1)


class CudaCompressedTensor(_CompressedBase, CudaSparseTensor):
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

    def coalesce(self):
        return coalesce(self)

    sum_duplicates = coalesce

    @property
    def mT(self):
        """The transpose of the two sparse dims: csr <-> csc shares every member; bsr <-> bsc
        shares the indices and transposes the blocks on the device (values must stay contiguous)."""
        from ._convert import matrix_transpose

        return matrix_transpose(self)

    def transpose(self, dim0: int, dim1: int):
        """Swapping the two sparse dims is ``mT``; other transposes have no GPU kernel."""
        from .._meta import normalize_dim

        m = self.batch_dim
        if {normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim)} == {m, m + 1}:
            return self.mT
        raise NotImplementedError(f"transpose({dim0}, {dim1}) of a {self._layout.name} tensor on cuda: only the two "
                                  "sparse dims (.mT) have a GPU kernel")


# the layouts' ``_matmul_dense`` hooks (sparsetensor.ops.blas calls them): compressed tensors take the
# CPU classes' own body (shapes resolved once, then the backend's spmm); 2-d coo goes through csr
CudaCompressedTensor._matmul_dense = _blas_ops._compressed_product
CudaCOOTensor._matmul_dense = _coo_product


def _pointwise_method(name: str):
    def method(self, *args, **kwargs):
        if args or kwargs:
            raise NotImplementedError(f"{name} with arguments {args or ''}{kwargs or ''} of a {self._layout.name} "
                                      "tensor on cuda has no GPU kernel")
        return unary(self, name)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{name}`` of every specified value, on the device (see :func:`sparsetensor.cuda.unary`)."
    return method


def _no_kernel(name: str, is_property: bool = False):
    def method(self, *args, **kwargs):
        call = name if is_property else f"{name}(...)"
        raise NotImplementedError(f"{name} of a {self._layout.name} tensor on {self.device} has no GPU kernel; "
                                  f"run it on the host with t.cpu().{call}")

    method.__name__ = method.__qualname__ = name
    method.no_gpu_kernel = True
    return property(method) if is_property else method


def _wire_methods():
    """Every public method of the CPU classes exists on the device classes: with a GPU kernel,
    or raising NotImplementedError naming the op (never a silent copy to the host)."""
    from .._tensor import COOTensor, CompressedTensor
    from ._pointwise import UNARY_OPS

    for name in UNARY_OPS:
        if not hasattr(CudaSparseTensor, name):
            setattr(CudaSparseTensor, name, _pointwise_method(name))
    dunders = {"__radd__", "__rsub__", "__rtruediv__", "__rmatmul__"}
    for cpu, dev in ((COOTensor, CudaCOOTensor), (CompressedTensor, CudaCompressedTensor)):
        for name in dir(cpu):
            if (name.startswith("_") and name not in dunders) or hasattr(dev, name):
                continue
            attr = next(k.__dict__[name] for k in cpu.__mro__ if name in k.__dict__)
            setattr(dev, name, _no_kernel(name, isinstance(attr, property)))


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


def cast_values(a: DeviceArray, dtype) -> DeviceArray:
    """Device values converted to ``dtype`` (a new array, also when the dtype is the same).

    The GPU converts between float16 and float32 only; other pairs raise
    NotImplementedError naming them (convert on the CPU)."""
    from .._dtypes import as_value_dtype
    from . import _primitives as P

    dt = as_value_dtype(dtype)
    pair = (a.dtype.name, dt.name)
    if dt == a.dtype:
        return a.copy()
    if pair == ("float16", "float32"):
        return P.half_to_float(a._device, a)
    if pair == ("float32", "float16"):
        return P.float_to_half(a._device, a)
    raise NotImplementedError(f"astype {a.dtype} -> {dt} on cuda has no GPU kernel (float16 <-> float32 only); "
                              "convert on the CPU")


def _place_members(members: dict, device):
    """``(Device, {name: DeviceArray or host array})`` for constructor inputs.

    Device arrays (anything :func:`sparsetensor._device.is_device_array` accepts) are
    taken without a copy and must share one device, which ``device`` (when given) must
    name; host members stay on the host here (the caller normalises and copies them).
    Without device arrays the device is ``device`` (default ``"cuda"``)."""
    from .._device import as_device, is_device_array

    placed = {k: as_device_array(x) if is_device_array(x) else x for k, x in members.items()}
    on = {k: a.device for k, a in placed.items() if isinstance(a, DeviceArray)}
    if len(set(on.values())) > 1:
        raise ValueError("the members of a sparse tensor must be on one device, got "
                         + ", ".join(f"{k} on {d}" for k, d in on.items()))
    want = None if device is None else as_device(device)
    have = next(iter(on.values()), None)
    if want is not None and have is not None and want != have:
        where = ", ".join(f"{k} on {d}" for k, d in on.items())
        raise ValueError(f"device={str(device)!r} ({want}) disagrees with the device of the arrays ({where}); "
                         "move them first or leave device=None")
    target = have or want or "cuda"
    if target == "cpu":
        raise ValueError("device='cpu' was asked of sparsetensor.cuda; use the sparsetensor constructors")
    return get_device(target), placed


def _upload(x, dev) -> DeviceArray:
    return x if isinstance(x, DeviceArray) else DeviceArray.from_host(np.ascontiguousarray(x), dev)


def _index_extrema(indices: DeviceArray) -> tuple:
    from ._reduce import index_extrema

    return index_extrema(indices)


def _plain_max(plain: DeviceArray) -> int:
    from ._reduce import index_extrema

    return int(index_extrema(plain.reshape(1, -1))[0][0])


def _max_step(compressed: DeviceArray) -> int:
    from ._reduce import step_extrema

    return step_extrema(compressed)


def _device_values(v, dev, dtype) -> DeviceArray:
    from .._dtypes import VALUE_DTYPES, as_value_dtype
    from .._factory import _as_values

    if not isinstance(v, DeviceArray):
        return _upload(_as_values(v, dtype), dev)  # a host member: converted on the host, then copied
    if dtype is not None and as_value_dtype(dtype) != v.dtype:
        v = cast_values(v, dtype)
    if v.dtype not in VALUE_DTYPES:
        raise TypeError(f"unsupported value dtype {v.dtype} (invariant 1.5); supported: "
                        f"{', '.join(map(str, VALUE_DTYPES))}")
    return v


def _device_index(x, dev, name: str, layout: str) -> DeviceArray:
    from .._errors import InvariantError
    from .._factory import _as_index_array

    if not isinstance(x, DeviceArray):
        return _upload(_as_index_array(x, name, layout), dev)
    if x.dtype not in (np.int32, np.int64):
        raise InvariantError("1.3", layout, f"{name} must have dtype int32 or int64, got {x.dtype}")
    return x


def coo_tensor(indices, values, size=None, *, dtype=None, device=None, check_invariants=None,
               is_coalesced=None) -> CudaCOOTensor:
    """A COO tensor on a CUDA device; what :func:`sparsetensor.sparse_coo_tensor` builds from device arrays.

    Members that are device arrays (DeviceArray, CuPy, PyTorch CUDA tensors, any
    ``__cuda_array_interface__`` or CUDA ``__dlpack__``) are taken without a copy and
    must be C-contiguous and on one device; ``device=None`` means theirs, and a
    ``device`` naming another raises ValueError. Host members (lists, NumPy) are
    copied to that device (``"cuda"`` when no member is a device array).

    ``size=None`` is estimated on the device (the largest index of each row + 1, one
    synchronisation), as on the CPU. ``dtype`` converts the values: host values on
    the host, device values on the device (float16 <-> float32 only, else
    NotImplementedError). The O(1) invariants are checked always, the O(nnz) ones
    (C4-C6) on the device when ``check_invariants`` (default:
    :func:`sparsetensor.get_check_invariants`).

    Examples
    --------
    >>> import cupy, sparsetensor as st                                       # doctest: +SKIP
    >>> t = st.sparse_coo_tensor(cupy.array([[0, 1], [2, 0]]), cupy.array([1.0, 2.0]))  # doctest: +SKIP
    >>> t.shape, t.device                                                     # doctest: +SKIP
    ((2, 3), 'cuda:0')
    """
    from .._config import resolve_check
    from .._factory import coo_indices_and_shape
    from .._meta import coo_meta

    dev, m = _place_members({"indices": indices, "values": values}, device)
    vals = _device_values(m["values"], dev, dtype)
    idx = _device_index(m["indices"], dev, "indices", "coo")
    idx, shape = coo_indices_and_shape(idx, vals, size, _index_extrema)
    coo_meta(idx, vals, shape)
    t = CudaCOOTensor(idx, vals, shape, bool(is_coalesced) or idx.shape[1] <= 1)
    if resolve_check(check_invariants):
        validate(t)
    return t


def compressed_tensor(compressed_indices, plain_indices, values, size=None, *, layout, dtype=None, device=None,
                      check_invariants=None) -> CudaCompressedTensor:
    """A csr/csc/bsr/bsc tensor on a CUDA device; what :func:`sparsetensor.sparse_compressed_tensor`
    builds from device arrays.

    Members, ``device``, ``dtype`` and ``size=None`` as in :func:`coo_tensor` (the shape
    estimate is seed 003's: the plain size is the largest plain index + 1 or the longest
    row, read with one device reduction). O(1) invariants always, 5.1-5.6 on the device
    when checking.
    """
    from .._config import resolve_check
    from .._errors import InvariantError
    from .._factory import estimate_compressed_shape
    from .._meta import as_size, compressed_meta

    layout = L.as_layout(layout)
    if not layout.compressed:
        raise ValueError(f"compressed_tensor needs a compressed layout, got {layout!r}")
    dev, m = _place_members({layout.compressed_name: compressed_indices, layout.plain_name: plain_indices,
                             "values": values}, device)
    v = _device_values(m["values"], dev, dtype)
    c = _device_index(m[layout.compressed_name], dev, layout.compressed_name, layout.name)
    p = _device_index(m[layout.plain_name], dev, layout.plain_name, layout.name)
    if c.ndim < 1:
        raise InvariantError("3.2", layout.name, f"{layout.compressed_name} must be at least 1-d")
    if c.dtype != p.dtype:
        raise InvariantError("1.2", layout.name, f"{layout.plain_name} must have the dtype of "
                             f"{layout.compressed_name} ({c.dtype}), got {p.dtype}")
    if size is None:
        size = estimate_compressed_shape(c, p, v, layout, _plain_max, _max_step)
    shape = as_size(size)
    compressed_meta(c, p, v, shape, layout)
    check = resolve_check(check_invariants)
    t = CudaCompressedTensor(c, p, v, shape, layout, canonical=False)
    if check:
        validate(t)
        t._canonical = True
    return t


# -- op entry points (implemented in the op modules) ---------------------------------------------------

def _device_tensor(t, op: str):
    if not isinstance(t, CudaSparseTensor):
        raise TypeError(f"{op} expects a CUDA sparse tensor, got {type(t).__name__}")
    return t


def validate(t) -> None:
    """Check every invariant of device tensor ``t`` on the device (the backend's ``validate``)."""
    from ._backend import validate as _validate

    _validate(_device_tensor(t, "validate"))


def coalesce(t):
    """COO: sort and sum duplicates on the device; compressed: repair unsorted rows (the backend's
    ``coalesce``, see :mod:`._coalesce`)."""
    from ._backend import coalesce as _coalesce

    return _coalesce(_device_tensor(t, "coalesce"))


def to_sparse(t, layout, *, blocksize=None, dense_dim=None):
    """``t`` in another layout: the CPU's op (:func:`sparsetensor._convert.to_sparse`: its argument
    checks, then the backend's ``convert``), on the device."""
    from .._convert import to_sparse as _to_sparse

    return _to_sparse(_device_tensor(t, "to_sparse"), layout, blocksize=blocksize, dense_dim=dense_dim)


def to_dense(t) -> DeviceArray:
    """The dense DeviceArray of ``t`` (the CPU's op, :func:`sparsetensor._dense.to_dense`, on the device)."""
    from .._dense import to_dense as _to_dense

    return _to_dense(_device_tensor(t, "to_dense"))


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


_wire_methods()
