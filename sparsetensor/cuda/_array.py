"""``DeviceArray``: a C-contiguous array in CUDA device memory.

A DeviceArray is a view (pointer, shape, dtype) of a memory owner: a
:class:`cuda.core.Buffer` from the device's stream-ordered pool, or a
``cuda.core.utils.StridedMemoryView`` of a foreign array (CuPy, PyTorch, ...) taken
without a copy. It exposes
``__cuda_array_interface__`` (v3, with our stream) and ``__dlpack__`` /
``__dlpack_device__``, so CuPy and PyTorch take it without a copy; ``.get()`` and
``np.asarray`` copy it to the host.

Only C-contiguous arrays exist: reshapes and leading-axis indexing are views,
anything else is a copy made by a kernel.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import operator
import warnings

import numpy as np

from . import _driver

__all__ = ["DeviceArray", "as_device_array"]

_KDL_CUDA = 2
# DLPack dtype codes
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_COMPLEX, _DL_BOOL = 0, 1, 2, 5, 6


def _c_strides(shape, itemsize) -> tuple:
    strides, s = [], itemsize
    for n in reversed(shape):
        strides.append(s)
        s *= max(int(n), 1)
    return tuple(reversed(strides))


class DeviceArray:
    """A C-contiguous device array: ``shape``, ``dtype``, ``device`` and a pointer.

    Parameters
    ----------
    owner : object
        What keeps the memory alive (a Buffer, a foreign array, a capsule holder).
    ptr : int
        Address of the first element (0 is allowed for empty arrays).
    shape : tuple of int
    dtype : numpy dtype
    device : Device or None
        The :class:`~sparsetensor.cuda._driver.Device` (None only in tests of metadata).

    Examples
    --------
    >>> import numpy as np, sparsetensor.cuda as stc          # doctest: +SKIP
    >>> a = stc.DeviceArray.from_host(np.arange(6).reshape(2, 3))  # doctest: +SKIP
    >>> a.shape, a.dtype, a.device, a[1].get()              # doctest: +SKIP
    ((2, 3), dtype('int64'), 'cuda:0', array([3, 4, 5]))
    """

    __slots__ = ("_owner", "_ptr", "_shape", "_dtype", "_device", "_shared", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, owner, ptr: int, shape, dtype, device, shared: bool = False):
        # _shared: another library may write this memory (taken without a copy, or handed out through
        # DLPack, __cuda_array_interface__ or .ptr): a tensor does not trust a past check of such indices
        self._shared = shared
        self._owner = owner
        self._ptr = int(ptr)
        self._shape = tuple(operator.index(n) for n in shape)
        if any(n < 0 for n in self._shape):
            raise ValueError(f"negative dimension in shape {self._shape}")
        self._dtype = np.dtype(dtype)
        self._device = device

    # -- metadata -------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def strides(self) -> tuple:
        return _c_strides(self._shape, self._dtype.itemsize)

    @property
    def ptr(self) -> int:
        """The device address. Whoever has it may write the memory, so from now on the array
        counts as shared, as after an export (``__cuda_array_interface__``, DLPack): a tensor
        whose index array it is has them checked again by every op."""
        self._shared = True
        return self._ptr

    data_ptr = ptr

    @property
    def device_id(self) -> int:
        return 0 if self._device is None else self._device.ordinal

    @property
    def device(self) -> str:
        return f"cuda:{self.device_id}"

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def __repr__(self) -> str:
        return f"DeviceArray({self._dtype}{list(self._shape)}, device={self.device!r})"

    # -- views ------------------------------------------------------------------------------------
    def reshape(self, *shape) -> "DeviceArray":
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        shape = [operator.index(n) for n in shape]
        if shape.count(-1) > 1:
            raise ValueError("can only specify one unknown dimension")
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape array of size {self.size} into shape {tuple(shape)}")
            shape[shape.index(-1)] = self.size // known
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape array of size {self.size} into shape {tuple(shape)}")
        return DeviceArray(self._owner, self._ptr, shape, self._dtype, self._device, self._shared)

    def view(self, dtype) -> "DeviceArray":
        """The same bytes as another dtype (the last dim rescales, as in NumPy)."""
        dt = np.dtype(dtype)
        if dt.itemsize == self.itemsize:
            return DeviceArray(self._owner, self._ptr, self._shape, dt, self._device, self._shared)
        if not self._shape:
            raise ValueError("cannot change the itemsize of a 0-d array")
        last = self._shape[-1] * self.itemsize
        if last % dt.itemsize:
            raise ValueError(f"the last axis ({self._shape[-1]} x {self.itemsize} bytes) is not a multiple of "
                             f"the new itemsize {dt.itemsize}")
        return DeviceArray(self._owner, self._ptr, self._shape[:-1] + (last // dt.itemsize,), dt, self._device,
                           self._shared)

    def __getitem__(self, key) -> "DeviceArray":
        """Views along the leading axis: ``a[i]`` and ``a[i:j]`` (step 1); ``a[...]``/``a[:]``."""
        if key is Ellipsis:
            return self
        if not self._shape:
            raise IndexError("a 0-d DeviceArray cannot be indexed")
        n = self._shape[0]
        row = self.nbytes // n if n else 0
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                raise IndexError("DeviceArray views take slices with step 1 only")
            stop = max(stop, start)
            return DeviceArray(self._owner, self._ptr + start * row, (stop - start,) + self._shape[1:],
                               self._dtype, self._device, self._shared)
        try:
            i = operator.index(key)
        except TypeError:
            raise IndexError(f"DeviceArray supports an int or a slice on the leading axis, got {key!r}") from None
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for axis 0 of size {n}")
        i %= n
        return DeviceArray(self._owner, self._ptr + i * row, self._shape[1:], self._dtype, self._device, self._shared)

    # -- interchange ----------------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        self._shared = True  # the consumer may write it
        stream = None if self._device is None else self._device.stream_handle
        return {"shape": self._shape, "typestr": self._dtype.str, "descr": [("", self._dtype.str)],
                "data": (self._ptr if self.size else 0, False), "strides": None, "version": 3,
                "stream": stream}

    def __dlpack_device__(self) -> tuple:
        return (_KDL_CUDA, self.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule (unversioned ``DLManagedTensor``) sharing this array's memory.

        ``stream``: the consumer's stream; our queued work is made to precede work on it
        (``-1``: no synchronisation). ``copy=True`` and other devices are refused.
        """
        if copy:
            raise BufferError("DeviceArray.__dlpack__(copy=True) is not supported; copy with .copy() first")
        self._shared = True  # the consumer may write it
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"DeviceArray on {self.device} cannot be exported to DLPack device {dl_device}")
        consumer = None
        if self._device is not None and stream != -1:
            if stream is None or stream in (1, 2):
                self._device.synchronize()
                consumer = 1 if stream is None else int(stream)
            else:
                consumer = int(stream)
                self._device.make_external_stream_wait(consumer)
        return _dlpack_capsule(self, consumer)

    def get(self) -> np.ndarray:
        """A host copy (waits for the queued work on this array's stream)."""
        out = np.empty(self._shape, self._dtype)
        if self.size:
            self._require_device().copy_dtoh(out, self._ptr)
        return out

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a DeviceArray cannot be viewed as a host array without a copy")
        a = self.get()
        return a if dtype is None else a.astype(dtype, copy=False)

    def copy(self) -> "DeviceArray":
        dev = self._require_device()
        out = DeviceArray.empty(self._shape, self._dtype, dev)
        dev.copy_dtod(out._ptr, self._ptr, self.nbytes)
        return out

    # -- the member operations of the tensor classes (sparsetensor._core._tensor), on the device -------
    def _run(self, file: str, kernel: str, keys: tuple, n: int, *args) -> None:
        """Launch a grid-stride kernel of ``file`` over ``n`` items on this array's device."""
        from ._module import BLOCK, grid_for, launch

        dev = self._require_device()
        if n > 0:
            launch(dev, file, kernel, keys, grid_for(dev, n, BLOCK), BLOCK, *args)

    def astype(self, dtype, copy: bool = True) -> "DeviceArray":
        """A device array of ``dtype`` (a new one, also for the same dtype unless ``copy=False``).

        NumPy's conversions between the value dtypes (bool: ``x != 0``; complex to real drops the
        imaginary part with NumPy's ComplexWarning)."""
        dt = np.dtype(dtype)
        if dt == self._dtype:
            return self.copy() if copy else self
        src, dst = _cast_key(self._dtype), _cast_key(dt)
        if src in _COMPLEX_KEYS and dst is not None and dst not in _COMPLEX_KEYS:
            real = np.dtype(np.float32 if src == "complex64" else np.float64)
            part = DeviceArray.empty(self._shape, real, self._require_device())
            if dt == np.bool_:  # x != 0 in either part: no warning, as in NumPy
                self._run("pointwise.cu", "complex_abs", (real.name,), self.size, self, part, self.size)
            else:
                warnings.warn("Casting complex values to real discards the imaginary part", np.exceptions.ComplexWarning,
                              stacklevel=2)
                self._run("pointwise.cu", "complex_part", (real.name,), self.size, self, part, self.size, 0)
            return part.astype(dt, copy=False)
        if src is None or dst is None:
            raise NotImplementedError(f"astype {self._dtype} -> {dt} on {self.device} has no GPU kernel; convert "
                                      "on the CPU")
        out = DeviceArray.empty(self._shape, dt, self._require_device())
        if dst not in _COMPLEX_KEYS:
            self._run("pointwise.cu", "cast_value", (src, dst), self.size, self, out, self.size, int(dt == np.bool_))
        elif src not in _COMPLEX_KEYS:
            self._run("pointwise.cu", "cast_real_complex", (src, dst), self.size, self, out, self.size)
        else:
            self._run("pointwise.cu", "cast_complex", (src, dst), self.size, self, out, self.size)
        return out

    def _scaled(self, scalar, op: str) -> "DeviceArray":
        if not isinstance(scalar, (numbers.Number, np.number)) or isinstance(scalar, (bool, np.bool_)):
            return NotImplemented
        s = complex(scalar)
        if self._dtype.kind != "c" and s.imag != 0:
            raise TypeError(f"{op} of a {self._dtype} device array by the complex scalar {scalar!r}")
        if self._dtype.kind in "iu" and op == "mul" and s.real == int(s.real):  # wrapping, as NumPy's
            out = DeviceArray.empty(self._shape, self._dtype, self._require_device())
            k = (int(scalar) + (1 << 63)) % (1 << 64) - (1 << 63)
            self._run("pointwise.cu", "scalar_int", (self._dtype.name,), self.size, self, out, self.size, 0, k)
            return out
        key = value_key(self._dtype, f"{op} of a device array by a scalar")
        out = DeviceArray.empty(self._shape, self._dtype, self._require_device())
        self._run("pointwise.cu", "scalar_op", (key,), self.size, self, out, self.size, 0 if op == "mul" else 1,
                  s.real, s.imag)
        return out

    def __mul__(self, scalar):
        """``a * s`` for a scalar ``s``, in ``a``'s dtype (floating and complex arrays; integer arrays
        by an integer)."""
        return self._scaled(scalar, "mul")

    __rmul__ = __mul__

    def __truediv__(self, scalar):
        """``a / s`` for a scalar ``s``, in ``a``'s dtype (floating and complex arrays)."""
        return self._scaled(scalar, "div")

    def _combined(self, other, op: str):
        """``a + b`` or ``a - b`` of two device arrays of one shape on one device, in NumPy's result
        dtype (integers wrap; bool ``+`` is ``or``, bool ``-`` a TypeError, as NumPy's)."""
        if not isinstance(other, DeviceArray):
            return NotImplemented
        if other._shape != self._shape:
            raise ValueError(f"{op} of device arrays of shapes {self._shape} and {other._shape}: device arrays do not "
                             "broadcast; expected one shape")
        dev = self._require_device()
        if other._require_device() is not dev:
            raise ValueError(f"{op} of arrays on {dev.name} and {other._device.name}: copy one first")
        dt = np.result_type(self._dtype, other._dtype)
        if dt == np.bool_:
            if op == "sub":
                raise TypeError("the boolean subtract of device arrays is not supported (as NumPy's `-`); use "
                                "logical_xor on the host")
            return self.astype(np.uint8)._combined(other.astype(np.uint8), op).astype(np.bool_)
        x, y = (a if a._dtype == dt else a.astype(dt) for a in (self, other))
        out = DeviceArray.empty(self._shape, dt, dev)
        self._run("sample.cu", "elementwise", (arith_key(dt, op),), self.size, x, y, out, self.size,
                  2 if op == "add" else 3)
        return out

    def __add__(self, other):
        """``a + b`` of device arrays of one shape (see :meth:`_combined`)."""
        return self._combined(other, "add")

    __radd__ = __add__

    def __sub__(self, other):
        """``a - b`` of device arrays of one shape (see :meth:`_combined`)."""
        return self._combined(other, "sub")

    def __neg__(self):
        """``-a`` (floating, complex and integer arrays; integers wrap)."""
        if self._dtype == np.bool_:
            raise TypeError("the negative of a bool device array is not supported (as NumPy's); use ~ on the host")
        return self._scaled(-1, "mul")

    def swapaxes(self, axis1: int, axis2: int) -> "DeviceArray":
        """A new C-contiguous array with two axes swapped (device memory holds no strided views):
        one pass for adjacent axes; axes ``a < b`` further apart move by adjacent swaps (``b``
        down to ``a``, then ``a`` up to ``b``)."""
        a, b = sorted(operator.index(x) % self.ndim for x in (axis1, axis2))
        if a == b:
            return self
        if b != a + 1:
            out = self
            for k in range(b, a, -1):
                out = out.swapaxes(k - 1, k)
            for k in range(a + 1, b):
                out = out.swapaxes(k, k + 1)
            return out
        dev = self._require_device()
        lead, rows, cols = math.prod(self._shape[:a]), self._shape[a], self._shape[b]
        width = math.prod(self._shape[b + 1:])
        out = DeviceArray.empty(self._shape[:a] + (cols, rows) + self._shape[b + 1:], self._dtype, dev)
        self._run("convert.cu", "transpose_blocks", (self.itemsize,), out.size, self, lead, rows, cols, width, out)
        return out

    @property
    def T(self) -> "DeviceArray":
        """The axes reversed, as NumPy's ``a.T`` (a new contiguous array: pairs of axes swapped)."""
        out = self
        for i in range(self.ndim // 2):
            out = out.swapaxes(i, self.ndim - 1 - i)
        return out

    def take(self, indices, axis: int = 0) -> "DeviceArray":
        """A new array of the rows ``indices`` (host integers) along axis 0, as NumPy's ``take``."""
        if operator.index(axis) != 0:
            raise NotImplementedError(f"take along axis {axis} on {self.device}: only axis 0 has a GPU kernel")
        dev = self._require_device()
        rows = [operator.index(i) % self._shape[0] for i in indices]
        out = DeviceArray.empty((len(rows),) + self._shape[1:], self._dtype, dev)
        row_bytes = self.nbytes // max(self._shape[0], 1)
        for k, r in enumerate(rows):
            if row_bytes:
                dev.copy_dtod(out._ptr + k * row_bytes, self._ptr + r * row_bytes, row_bytes)
        return out

    def _require_device(self):
        if self._device is None:
            raise RuntimeError("this DeviceArray has no device (a metadata-only array)")
        return self._device

    # -- construction ---------------------------------------------------------------------------
    @staticmethod
    def empty(shape, dtype, device=None) -> "DeviceArray":
        dev = device if hasattr(device, "alloc") else _driver.get_device(device)
        shape = (operator.index(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        buf = dev.alloc(nbytes) if nbytes else None  # a cuda.core Buffer (the emulator: host memory)
        return DeviceArray(buf, 0 if buf is None else int(buf.handle), shape, dtype, dev)

    @staticmethod
    def zeros(shape, dtype, device=None) -> "DeviceArray":
        a = DeviceArray.empty(shape, dtype, device)
        a._device.memset8(a._ptr, 0, a.nbytes)
        return a

    @staticmethod
    def from_host(array, device=None) -> "DeviceArray":
        """A device copy of a host array (made C-contiguous first)."""
        host = np.asarray(array, order="C")  # not ascontiguousarray: a 0-d array stays 0-d
        out = DeviceArray.empty(host.shape, host.dtype, device)
        out._device.copy_htod(out._ptr, host)
        return out


_VALUE_KEYS = {np.dtype(n): n for n in ("float16", "float32", "float64", "complex64", "complex128")}


def value_key(dtype, op: str) -> str:
    """The kernel key of an arithmetic value dtype, or TypeError naming the op."""
    dt = np.dtype(dtype)
    if dt not in _VALUE_KEYS:
        raise TypeError(f"{op} on cuda supports float16, float32, float64, complex64 and complex128 values, "
                        f"got {dt}")
    return _VALUE_KEYS[dt]


_ARITH_KEYS = {**_VALUE_KEYS, **{np.dtype(n): n for n in ("int8", "int16", "int32", "int64", "uint8")}}


def arith_key(dtype, op: str) -> str:
    """The kernel key of a dtype of the ``arith`` class (the value dtypes and the integers; bool
    values are computed as int64 by the callers), or TypeError naming the op."""
    dt = np.dtype(dtype)
    if dt not in _ARITH_KEYS:
        raise TypeError(f"{op} on cuda supports integer, float16, float32, float64, complex64 and complex128 "
                        f"values, got {dt}")
    return _ARITH_KEYS[dt]


_COMPLEX_KEYS = ("complex64", "complex128")


def _cast_key(dt: np.dtype):
    """The cast kernels' key of a value dtype (bool moves as uint8), or None."""
    if dt == np.bool_:
        return "uint8"
    name = dt.name
    return name if name in ("int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64") + \
        _COMPLEX_KEYS else None


def _same_device(device, ordinal):
    if device is None:
        return _driver.get_device(ordinal)
    dev = device if hasattr(device, "alloc") else _driver.get_device(device)
    if dev.ordinal != ordinal:
        raise ValueError(f"the array lives on cuda:{ordinal}, not on {dev.name}; copy it first")
    return dev


def _strided_memory_view():
    global _SMV
    if _SMV is None:  # imported once: this is on the path of every op given a CuPy or torch array
        try:
            from cuda.core.utils import StridedMemoryView
        except ImportError as e:
            raise ImportError("taking DLPack / __cuda_array_interface__ arrays needs cuda-python's cuda.core: "
                              "pip install 'sparsetensor[cuda]'") from e
        _SMV = StridedMemoryView
    return _SMV


_SMV = None


def _consumer_stream(dev) -> int:
    """The stream handle cuda.core orders the producer's work before (-1: none, on the emulator)."""
    return -1 if getattr(dev, "emulated", False) else dev.stream_handle


def _from_view(view, dev, owner) -> DeviceArray:
    """A DeviceArray of a ``cuda.core.utils.StridedMemoryView`` (C-contiguous only)."""
    shape, dtype = tuple(view.shape), np.dtype(view.dtype)
    strides = view.strides  # in elements; None: compact row-major
    if strides is not None and math.prod(shape) > 1:
        want = _c_strides(shape, 1)
        if any(s != w for s, w, n in zip(strides, want, shape) if n > 1):
            raise ValueError(f"only C-contiguous device arrays are taken without a copy; got strides {tuple(strides)} "
                             f"(in elements) for shape {shape} (make it contiguous first, e.g. x.contiguous())")
    return DeviceArray(owner, view.ptr, shape, dtype, dev, shared=True)


class _OneCapsule:
    """A DLPack producer that hands out one capsule already made (for StridedMemoryView)."""

    __slots__ = ("capsule", "ordinal")

    def __init__(self, capsule, ordinal: int):
        self.capsule, self.ordinal = capsule, ordinal

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (_KDL_CUDA, self.ordinal)


def _from_dlpack(capsule, device) -> DeviceArray:
    """A DeviceArray of an unconsumed ``dltensor`` capsule of CUDA memory (cuda.core consumes it;
    the producer's deleter runs when the array's last view is collected)."""
    ordinal = 0 if device is None else device.ordinal
    view = _strided_memory_view().from_dlpack(_OneCapsule(capsule, ordinal), -1)
    return _from_view(view, device, view)


def _from_cai(obj, device, explicit: bool) -> DeviceArray:
    if getattr(device, "emulated", False):  # host memory: the emulator reads the interface itself
        view = device.view_cai(obj)
        return _from_view(view, device, view)
    smv = _strided_memory_view()
    view = smv.from_cuda_array_interface(obj, _consumer_stream(device))
    if view.device_id != device.ordinal:
        if explicit or view.device_id < 0:
            where = "host memory" if view.device_id < 0 else f"cuda:{view.device_id}"
            raise ValueError(f"the array lives on {where}, not on {device.name}; copy it first")
        device = _same_device(None, view.device_id)
        view = smv.from_cuda_array_interface(obj, _consumer_stream(device))  # ordered on that device's stream
    return _from_view(view, device, view)


def as_device_array(obj, device=None) -> DeviceArray:
    """``obj`` as a DeviceArray without a copy: a DeviceArray, a CUDA ``__dlpack__`` producer
    or anything with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch CUDA tensors), read
    through ``cuda.core.utils.StridedMemoryView``, which also orders the producer's queued work
    before our stream. Host arrays are refused here (use :meth:`DeviceArray.from_host`)."""
    if isinstance(obj, DeviceArray):
        if device is not None and device is not obj._device:  # the same Device object: nothing to check
            _same_device(device, obj.device_id)
        return obj
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        kind, ordinal = obj.__dlpack_device__()
        if int(kind) != _KDL_CUDA:
            raise TypeError(f"a DLPack array on device type {int(kind)} is not a CUDA device array "
                            f"(CUDA is {_KDL_CUDA}); copy host arrays with DeviceArray.from_host")
        dev = _same_device(device, int(ordinal))
        view = _strided_memory_view().from_dlpack(obj, _consumer_stream(dev))
        return _from_view(view, dev, view)
    if hasattr(obj, "__cuda_array_interface__"):
        dev = device if hasattr(device, "alloc") else _driver.get_device(device)
        return _from_cai(obj, dev, device is not None)
    raise TypeError(f"{type(obj).__name__} is not a CUDA device array (no __cuda_array_interface__ or __dlpack__)")


# -- DLPack export through ctypes (cuda.core reads DLPack; it makes no capsules of our views) ----

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_CAPSULE_NAME = ctypes.create_string_buffer(b"dltensor")
_exported: dict = {}   # address of a DLManagedTensor we made -> what keeps it and the array alive

_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


@_DELETER
def _release_exported(managed):
    held = _exported.pop(ctypes.addressof(managed.contents), None)
    if held is None or held[3] is None:
        return
    # Our pool frees the memory on our stream once the last view goes. The consumer may still
    # have work queued on its stream that reads it (it released its tensor, not its kernels):
    # our stream waits for that work first, as torch's record_stream would.
    try:
        held[2]._device.wait_external_stream(held[3])
    except Exception:  # noqa: BLE001 - a deleter cannot raise (it may run during shutdown)
        pass


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # An unconsumed capsule ("dltensor") owns its tensor; a consumer renames it first.
    if _capsule_is_valid_raw(capsule, ctypes.addressof(_CAPSULE_NAME)):
        ptr = _capsule_pointer_raw(capsule, ctypes.addressof(_CAPSULE_NAME))
        managed = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor))
        managed.contents.deleter(managed)


def _dl_dtype(dt: np.dtype) -> _DLDataType:
    code = {"i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT, "c": _DL_COMPLEX, "b": _DL_BOOL}.get(dt.kind)
    if code is None:
        raise BufferError(f"dtype {dt} has no DLPack equivalent")
    return _DLDataType(code, dt.itemsize * 8, 1)


def _dlpack_capsule(a: DeviceArray, consumer=None):
    """A ``dltensor`` capsule of ``a``; ``consumer``: the stream handle the consumer works on
    (None: unknown or not to be waited for), which our stream waits for before the memory is
    freed."""
    managed = _DLManagedTensor()
    shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
    t = managed.dl_tensor
    t.data = a._ptr or None
    t.device = _DLDevice(_KDL_CUDA, a.device_id)
    t.ndim = a.ndim
    t.dtype = _dl_dtype(a.dtype)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = None  # compact row-major
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _release_exported
    address = ctypes.addressof(managed)
    _exported[address] = (managed, shape, a, consumer)
    return _capsule_new(address, ctypes.addressof(_CAPSULE_NAME), ctypes.cast(_capsule_destructor, ctypes.c_void_p))
