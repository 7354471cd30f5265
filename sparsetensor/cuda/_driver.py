"""Devices, streams and memory through ``cuda.core`` (cuda-python's high-level layer).

Each device is used through its primary context (shared with PyTorch and CuPy), one
non-blocking :class:`cuda.core.Stream` of ours (the device's stream for sparsetensor)
and the device's default stream-ordered pool through a
:class:`cuda.core.DeviceMemoryResource` (which raises the pool's release threshold, so
freed memory is reused); managed memory is never used.

Nothing is imported or initialised until a function here is called; the kernel
emulator of the tests (:mod:`sparsetensor.cuda._emulator`) installs itself in
``_devices`` and stands in for :class:`Device`.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

import numpy as np

__all__ = ["CudaError", "core", "device_count", "is_available", "get_device", "Device", "unavailable_reason",
           "stream_order", "stream_handle_of", "pack_args", "launch_args", "kernel_params", "reraise"]

_lock = threading.Lock()
_devices: dict = {}
_INSTALL = "the CUDA backend needs cuda-python's cuda.core: pip install 'sparsetensor[cuda]'"


class CudaError(RuntimeError):
    """A CUDA call failed (the driver's or cuda.core's message attached)."""


def core():
    """The ``cuda.core`` module (ImportError naming the extra when it is missing)."""
    try:
        import cuda.core as cc
    except ImportError as e:
        raise ImportError(_INSTALL) from e
    return cc


@contextlib.contextmanager
def errors(call: str):
    """Re-raise what a cuda.core/cuda.bindings call raises as :class:`CudaError` naming ``call``."""
    try:
        yield
    except Exception as e:
        reraise(call, e)


def reraise(call: str, e: Exception):
    """Raise ``e`` (caught from ``call``) as :func:`errors` does: ours, import, type and value
    errors as they are, anything else as a :class:`CudaError` naming the call."""
    if isinstance(e, (CudaError, ImportError, TypeError, ValueError)):
        raise e
    # cuda.core's CUDAError is not a RuntimeError; a missing driver is
    raise CudaError(f"{call} failed: {type(e).__name__}: {e}") from e


def _count() -> int:
    cc = core()
    with errors("cuda.core.Device.get_all_devices"):
        return len(cc.Device.get_all_devices())


def unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not (for skips and messages)."""
    try:
        n = _count()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None if n > 0 else "the CUDA driver reports no device"


def device_count() -> int:
    """The number of CUDA devices; 0 without cuda-python, a driver or a device."""
    try:
        return _count()
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
    (``.cuda_stream``). A raw handle is trusted as the driver trusts it: it must be a live
    stream of the device (the driver cannot tell a stale or made-up handle from a stream)."""
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
    """One CUDA device as sparsetensor uses it: a :class:`cuda.core.Device` made current,
    our non-blocking stream, the stream-ordered pool, SM count, compiled modules."""

    def __init__(self, ordinal: int):
        cc = core()
        self.ordinal = ordinal
        with errors(f"initialising cuda:{ordinal}"):
            self.core = cc.Device(ordinal)
            self.core.set_current()
            props = self.core.properties
            self.compute_capability = tuple(int(v) for v in self.core.compute_capability)
            self.sm_count = int(props.multiprocessor_count)
            if not props.memory_pools_supported:
                raise CudaError(f"cuda:{ordinal} does not support stream-ordered memory pools (cuMemAllocAsync), "
                                "which the sparsetensor CUDA backend needs")
            self.stream = self.core.create_stream(options=cc.StreamOptions(nonblocking=True))
            self._stream_handle = int(self.stream.handle)  # asked per op (stream ordering, DLPack intake)
            # no options: the device's default pool, release threshold raised by cuda.core (freed memory is reused)
            self.memory = cc.DeviceMemoryResource(self.core)
        self.modules: dict = {}      # cache key -> cuda.core ObjectCode loaded on this device
        self.functions: dict = {}    # (file, kernel, keys) -> (cuda.core Kernel, KernelDecl)

    @property
    def name(self) -> str:
        return f"cuda:{self.ordinal}"

    @property
    def stream_handle(self) -> int:
        return self._stream_handle

    def activate(self) -> None:
        with errors("cuda.core.Device.set_current"):
            self.core.set_current()

    def synchronize(self) -> None:
        with errors("cuda.core.Stream.sync"):
            self.stream.sync()

    # -- memory: raw addresses (DeviceArray views) wrapped as non-owning cuda.core Buffers ---------
    def alloc(self, nbytes: int):
        """A :class:`cuda.core.Buffer` of ``nbytes`` from the pool, allocated on our stream and
        freed on it when collected; its address is ``int(buffer.handle)``."""
        try:  # not errors(): a context manager costs a microsecond, and every op allocates
            return self.memory.allocate(int(nbytes), stream=self.stream)
        except Exception as e:
            reraise("cuda.core.DeviceMemoryResource.allocate", e)

    def _view(self, ptr: int, nbytes: int):
        return core().Buffer.from_handle(int(ptr), int(nbytes))

    def memset8(self, ptr: int, value: int, nbytes: int) -> None:
        if nbytes:
            with errors("cuda.core.Buffer.fill"):
                self._view(ptr, nbytes).fill(int(value), stream=self.stream)

    def copy_dtod(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            with errors("cuda.core.Buffer.copy_from"):
                self._view(dst, nbytes).copy_from(self._view(src, nbytes), stream=self.stream)

    def copy_htod(self, dst: int, host: np.ndarray) -> None:
        """Copy a C-contiguous host array into device memory (the host array may be released
        when this returns: the copy is waited for)."""
        if host.nbytes:
            self.copy_dtod(dst, host.ctypes.data, host.nbytes)  # unified addressing: the driver sees a host source
            self.synchronize()

    def copy_dtoh(self, host: np.ndarray, src: int) -> None:
        if host.nbytes:
            self.copy_dtod(host.ctypes.data, src, host.nbytes)
        self.synchronize()

    # -- ordering against other streams of this device ------------------------------------------
    def wait_external_stream(self, handle: int) -> None:
        """Make our stream wait for the work queued so far on another stream of this device."""
        if handle is not None and int(handle) != self.stream_handle:
            with errors("cuda.core.Stream.wait"):
                self.stream.wait(_foreign_stream(handle))

    def make_external_stream_wait(self, handle: int) -> None:
        """Make another stream of this device wait for the work queued so far on ours."""
        if handle is not None and int(handle) != self.stream_handle:
            with errors("cuda.core.Stream.wait"):
                _foreign_stream(handle).wait(self.stream)


def _foreign_stream(handle: int):
    """A cuda.core Stream for a raw handle (0/1: the legacy default stream, 2: per-thread)."""
    cc = core()
    handle = int(handle)
    if handle in (0, 1):
        return cc.LEGACY_DEFAULT_STREAM
    if handle == 2:
        return cc.PER_THREAD_DEFAULT_STREAM
    return cc.Stream.from_handle(handle)


def get_device(device=None) -> Device:
    """The :class:`Device` for ``"cuda"``, ``"cuda:N"`` or ``N``, initialised once, made current."""
    ordinal = parse_device(device)
    dev = _devices.get(ordinal)
    if dev is None:
        emulated = [d for d in _devices.values() if getattr(d, "emulated", False)]
        if emulated:  # the kernel emulator of the tests stands in for the machine's devices
            raise ValueError(f"cuda:{ordinal} does not exist; this machine has {len(emulated)} CUDA device(s) "
                             "(emulated)")
        n = _count()
        if not 0 <= ordinal < n:
            raise ValueError(f"cuda:{ordinal} does not exist; this machine has {n} CUDA device(s)")
        with _lock:
            dev = _devices.get(ordinal)
            if dev is None:
                dev = _devices[ordinal] = Device(ordinal)
    dev.activate()
    return dev


# -- kernel arguments ------------------------------------------------------------------------------

_CTYPES = {"p": ctypes.c_uint64, "q": ctypes.c_int64, "Q": ctypes.c_uint64, "i": ctypes.c_int32,
           "d": ctypes.c_double}


def pack_args(values, kinds) -> list:
    """The kernel arguments as ctypes scalars of the declared widths (the emulator's packing):
    :func:`launch_args`' values, each in its ctypes type.

    ``kinds`` are the codes of :mod:`sparsetensor.cuda._source` ("p" pointer, "q" i64,
    "Q" u64, "i" int, "d" double); a pointer is an int, None (null) or an object with ``.ptr``
    (a DeviceArray's own address is read without handing it out: its public ``ptr`` shares it).
    """
    return [_CTYPES[k](v) for v, k in zip(launch_args(values, kinds), kinds)]


def launch_args(values, kinds) -> list:
    """The kernel arguments as ``cuda.core.launch`` packs them fastest, each of its declared
    width: pointers and i64 as Python ints (which cuda.core passes as an ``intptr_t``, 8 bytes),
    u64 as ``numpy.uint64``, int as ``numpy.int32``, double as float. cuda.core tries its
    NumPy and ctypes cases one by one: twelve ctypes arguments took 5.2 us to pack, these 0.4 us.
    """
    out = []
    add = out.append
    for v, k in zip(values, kinds):
        if k == "p":
            a = 0 if v is None else (v if isinstance(v, int) else getattr(v, "_ptr", None))
            add(v.ptr if a is None else a)
        elif k == "q":
            add(v if v.__class__ is int else int(v))
        elif k == "i":
            add(_INT32(v))
        elif k == "d":
            add(float(v))
        else:
            add(_UINT64(v))
    return out


_INT32, _UINT64 = np.int32, np.uint64


def kernel_params(values, kinds) -> tuple:
    """A ``void**`` array of the packed arguments (the emulator's launch ABI):
    ``(address, keep-alive)``."""
    holders = pack_args(values, kinds)
    arr = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
    return ctypes.addressof(arr), (arr, holders)
