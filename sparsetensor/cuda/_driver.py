"""The CUDA driver through ``cuda.bindings.driver``: devices, contexts, streams, memory.

Every driver call goes through :func:`check`, which raises :class:`CudaError` with the
driver's error name and text. Each device is used through its primary context (shared
with PyTorch and CuPy), one non-blocking stream of ours (the device's default stream
for sparsetensor), and its default stream-ordered memory pool (``cuMemAllocAsync`` /
``cuMemFreeAsync``, release threshold raised so freed memory is reused); managed
memory is never used.

Nothing is imported or initialised until a function here is called.
"""

from __future__ import annotations

import contextlib

import ctypes
import threading

import numpy as np

__all__ = ["CudaError", "driver", "check", "device_count", "is_available", "get_device", "Device", "Buffer",
           "unavailable_reason", "stream_order", "stream_handle_of"]

_lock = threading.Lock()
_devices: dict = {}
_init_error: list = []   # [exception] once cuInit failed
_initialised = False


class CudaError(RuntimeError):
    """A CUDA driver call failed."""


def driver():
    try:
        from cuda.bindings import driver as drv
    except ImportError as e:
        raise ImportError("the CUDA backend needs cuda-python: pip install 'sparsetensor[cuda]'") from e
    return drv


def check(result, call: str):
    """Unpack ``(CUresult, *values)``; raise :class:`CudaError` unless CUDA_SUCCESS."""
    drv = driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        try:
            _, name = drv.cuGetErrorName(err)
            _, text = drv.cuGetErrorString(err)
            detail = f"{name.decode()}: {text.decode()}"
        except Exception:  # noqa: BLE001 - the error text is best effort
            detail = str(err)
        raise CudaError(f"{call} failed: {detail}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _init():
    global _initialised
    if _initialised:
        return
    with _lock:
        if _initialised:
            return
        if _init_error:
            raise _init_error[0]
        try:
            check(driver().cuInit(0), "cuInit")
        except Exception as e:  # no driver library, no device, ...
            err = e if isinstance(e, (CudaError, ImportError)) else CudaError(f"cuInit failed: {type(e).__name__}: {e}")
            _init_error.append(err)
            raise err from e
        _initialised = True


def unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not (for skips and messages)."""
    try:
        _init()
        n = check(driver().cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None if n > 0 else "the CUDA driver reports no device"


def device_count() -> int:
    """The number of CUDA devices; 0 without cuda-python, a driver or a device."""
    try:
        _init()
        return int(check(driver().cuDeviceGetCount(), "cuDeviceGetCount"))
    except Exception:  # noqa: BLE001
        return 0


def is_available() -> bool:
    return device_count() > 0


def parse_device(device) -> int:
    """The ordinal of ``"cuda"``, ``"cuda:N"``, ``N`` or a torch device."""
    if device is None:
        return 0
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        return int(device)
    s = str(device)
    if s == "cuda":
        return 0
    if s.startswith("cuda:") and s[5:].isdigit():
        return int(s[5:])
    raise ValueError(f"not a CUDA device: {device!r}; expected 'cuda', 'cuda:N' or an ordinal")


def stream_handle_of(stream) -> int:
    """The raw ``CUstream`` handle of ``stream``: an int, a ``CUstream``, an object with the
    ``__cuda_stream__`` protocol (cuda.core), a CuPy stream (``.ptr``) or a torch stream
    (``.cuda_stream``)."""
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError(f"not a CUDA stream: {stream!r}; expected a handle, a CuPy or torch stream, or an object "
                        "with __cuda_stream__") from None


@contextlib.contextmanager
def stream_order(stream, device="cuda"):
    """Order sparsetensor's work on ``device`` after ``stream``'s, and ``stream`` after ours.

    sparsetensor runs every op on its own non-blocking stream per device. Inside this
    context, work queued on ``stream`` before entering happens before the ops run in the
    block, and work queued on ``stream`` after leaving happens after them (an event each
    way; nothing synchronises the host). Use it to hand tensors to and from CuPy or
    PyTorch streams without ``synchronize()``.

    Examples
    --------
    >>> import sparsetensor as st                                    # doctest: +SKIP
    >>> import torch                                                 # doctest: +SKIP
    >>> s = torch.cuda.current_stream()                              # doctest: +SKIP
    >>> with st.cuda.stream_order(s):                                # doctest: +SKIP
    ...     y = t_cuda @ x_cuda                                      # doctest: +SKIP
    """
    handle = stream_handle_of(stream)
    dev = device if hasattr(device, "alloc") else get_device(device)
    dev.wait_external_stream(handle)
    try:
        yield dev
    finally:
        dev.make_external_stream_wait(handle)


class Device:
    """One CUDA device as sparsetensor uses it: primary context, stream, pool, SM count."""

    def __init__(self, ordinal: int):
        drv = driver()
        self.ordinal = ordinal
        self.handle = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = check(drv.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self.activate()
        attr = drv.CUdevice_attribute
        major = check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle),
                      "cuDeviceGetAttribute")
        minor = check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle),
                      "cuDeviceGetAttribute")
        self.compute_capability = (int(major), int(minor))
        self.sm_count = int(check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                                           self.handle), "cuDeviceGetAttribute"))
        pools = check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, self.handle),
                      "cuDeviceGetAttribute")
        if not pools:
            raise CudaError(f"cuda:{ordinal} does not support stream-ordered memory pools (cuMemAllocAsync), "
                            "which the sparsetensor CUDA backend needs")
        self.stream = check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        pool = check(drv.cuDeviceGetDefaultMemPool(self.handle), "cuDeviceGetDefaultMemPool")
        check(drv.cuMemPoolSetAttribute(pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                        drv.cuuint64_t(2**64 - 1)), "cuMemPoolSetAttribute")
        self.modules: dict = {}      # cache key -> CUmodule
        self.functions: dict = {}    # (file, name expression) -> CUfunction

    @property
    def name(self) -> str:
        return f"cuda:{self.ordinal}"

    @property
    def stream_handle(self) -> int:
        return int(self.stream)

    def activate(self) -> None:
        check(driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def synchronize(self) -> None:
        check(driver().cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    # -- memory --------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> "Buffer":
        return Buffer(self, nbytes)

    def memset8(self, ptr: int, value: int, nbytes: int) -> None:
        if nbytes:
            check(driver().cuMemsetD8Async(ptr, value, nbytes, self.stream), "cuMemsetD8Async")

    def copy_htod(self, dst: int, host: np.ndarray) -> None:
        """Copy a C-contiguous host array into device memory (stream-ordered; the host array
        may be released when this returns: pageable memory is staged before the call returns)."""
        if host.nbytes:
            check(driver().cuMemcpyHtoDAsync(dst, host.ctypes.data, host.nbytes, self.stream), "cuMemcpyHtoDAsync")
            self.synchronize()  # the host array may be a temporary of the caller

    def copy_dtoh(self, host: np.ndarray, src: int) -> None:
        if host.nbytes:
            check(driver().cuMemcpyDtoHAsync(host.ctypes.data, src, host.nbytes, self.stream), "cuMemcpyDtoHAsync")
        self.synchronize()

    def copy_dtod(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            check(driver().cuMemcpyDtoDAsync(dst, src, nbytes, self.stream), "cuMemcpyDtoDAsync")

    def wait_external_stream(self, handle: int) -> None:
        """Make our stream wait for the work queued so far on another stream of this device."""
        self._order_streams(handle, after=self.stream_handle)

    def make_external_stream_wait(self, handle: int) -> None:
        """Make another stream of this device wait for the work queued so far on ours."""
        self._order_streams(self.stream_handle, after=handle)

    def _order_streams(self, first: int, *, after: int) -> None:
        """Stream ``after`` waits for the work queued so far on stream ``first`` (an event)."""
        if first is None or after is None or first == after:
            return
        drv = driver()
        event = check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            check(drv.cuEventRecord(event, drv.CUstream(first)), "cuEventRecord")
            check(drv.cuStreamWaitEvent(drv.CUstream(after), event, 0), "cuStreamWaitEvent")
        finally:
            check(drv.cuEventDestroy(event), "cuEventDestroy")


class Buffer:
    """Device memory from the stream-ordered pool, freed on the device's stream when collected."""

    __slots__ = ("device", "ptr", "nbytes", "__weakref__")

    def __init__(self, device: Device, nbytes: int):
        self.device = device
        self.nbytes = int(nbytes)
        self.ptr = 0
        if self.nbytes:
            device.activate()
            self.ptr = int(check(driver().cuMemAllocAsync(self.nbytes, device.stream), "cuMemAllocAsync"))

    def __del__(self):
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            try:
                drv = driver()
                drv.cuCtxSetCurrent(self.device.context)
                drv.cuMemFreeAsync(ptr, self.device.stream)
            except Exception:  # noqa: BLE001 - interpreter shutdown: the driver frees the context
                pass


def get_device(device=None) -> Device:
    """The :class:`Device` for ``"cuda"``, ``"cuda:N"`` or ``N``, initialised once, made current."""
    ordinal = parse_device(device)
    dev = _devices.get(ordinal)
    if dev is None:
        emulated = [d for d in _devices.values() if getattr(d, "emulated", False)]
        if emulated:  # the kernel emulator of the tests stands in for the machine's devices
            raise ValueError(f"cuda:{ordinal} does not exist; this machine has {len(emulated)} CUDA device(s) "
                             "(emulated)")
        _init()
        n = check(driver().cuDeviceGetCount(), "cuDeviceGetCount")
        if not 0 <= ordinal < n:
            raise ValueError(f"cuda:{ordinal} does not exist; this machine has {n} CUDA device(s)")
        with _lock:
            dev = _devices.get(ordinal)
            if dev is None:
                dev = _devices[ordinal] = Device(ordinal)
    dev.activate()
    return dev


def kernel_params(values, kinds) -> tuple:
    """A ``void**`` array for cuLaunchKernel: ``(address, keep-alive)``.

    ``kinds`` are the codes of :mod:`sparsetensor.cuda._source` ("p" pointer, "q" i64,
    "Q" u64, "i" int, "d" double).
    """
    ctor = {"p": ctypes.c_uint64, "q": ctypes.c_int64, "Q": ctypes.c_uint64, "i": ctypes.c_int32,
            "d": ctypes.c_double}
    holders = []
    for v, k in zip(values, kinds):
        if k == "p":
            v = 0 if v is None else (v if isinstance(v, int) else v.ptr)
        elif k == "d":
            v = float(v)
        else:
            v = int(v)
        holders.append(ctor[k](v))
    arr = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
    return ctypes.addressof(arr), (arr, holders)
