"""Kernels on a device: compile (through our cache), load as a ``cuda.core.ObjectCode``, launch.

``launch(device, "validate.cu", "compressed_plain", ("int64",), grid, block, *args)``
finds the kernel's declaration in the ``.cu`` file, checks the argument count,
packs the arguments by the declared parameter types, and calls ``cuda.core.launch``
on the device's stream. A file is compiled once per architecture with all its
instantiations (NVRTC, cached on disk and in memory) and loaded once per device.

The architecture is the device's compute capability when this NVRTC supports it;
a newer device gets PTX for the newest supported architecture, which the driver
compiles on load.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time

from . import _nvrtc, _source
from ._driver import Device, core, errors, kernel_params, launch_args, reraise

__all__ = ["launch", "grid_for", "target_for", "get_function", "BLOCK", "profile"]

BLOCK = 256
_lock = threading.Lock()


def target_for(compute_capability: tuple) -> tuple:
    """``(arch, ptx)``: the arch to compile for and whether to emit PTX instead of a cubin."""
    cc = compute_capability[0] * 10 + compute_capability[1]
    archs = _nvrtc.supported_archs()
    if cc in archs:
        return cc, False
    older = [a for a in archs if a <= cc]
    if not older:
        raise RuntimeError(f"NVRTC {_nvrtc.nvrtc_version()} cannot compile for compute capability "
                           f"{compute_capability} (it supports sm_{min(archs)} to sm_{max(archs)})")
    return max(older), True


def _load(device: Device, name: str):
    """The ``cuda.core.ObjectCode`` of kernel file ``name`` for ``device`` (compiled once per
    architecture, wrapped once per device: the driver loads it into the device's context)."""
    arch, ptx = target_for(device.compute_capability)
    program = _nvrtc.compile_kernel_file(name, arch, ptx=ptx)
    code = device.modules.get(program.key)
    if code is None:
        with _lock:
            code = device.modules.get(program.key)
            if code is None:
                oc = core().ObjectCode
                make = oc.from_cubin if program.is_cubin else oc.from_ptx
                lowered = {expr: low.encode() for expr, low in program.lowered.items()}  # as Program.compile maps
                code = device.modules[program.key] = make(program.image, name=name, symbol_mapping=lowered)
    return code


def get_function(device: Device, name: str, kernel: str, keys: tuple = ()):
    """``(cuda.core Kernel, KernelDecl)`` of one instantiation."""
    fkey = (name, kernel, tuple(keys))
    hit = device.functions.get(fkey)
    if hit is not None:
        return hit
    decl = _declaration(name, kernel)
    expr = _source.name_expression(decl, tuple(keys))
    code = _load(device, name)
    device.activate()
    with errors(f"cuda.core.ObjectCode.get_kernel({expr})"):
        func = code.get_kernel(expr)  # the symbol mapping turns the name expression into the lowered name
    device.functions[fkey] = (func, decl)
    return func, decl


def grid_for(device: Device, n: int, block: int = BLOCK, per_sm: int = 32) -> int:
    """Blocks for a grid-stride loop over ``n`` items: enough to fill the device, never 0."""
    n = int(n)
    need = (n + block - 1) // block if n > 0 else 1  # on the path of every launch: no min/max calls
    cap = device.sm_count * per_sm
    return need if need < cap else cap


@functools.lru_cache(maxsize=None)
def _declaration(name: str, kernel: str):
    decls = {k.name: k for k in _source.declarations(name).kernels}
    if kernel not in decls:
        raise KeyError(f"{name} declares no kernel {kernel!r}; it has {sorted(decls)}")
    return decls[kernel]


@functools.lru_cache(maxsize=1024)
def _config(grid: tuple, block: tuple, shared: int):
    """The cuda.core LaunchConfig of a launch shape (made once: a launch costs microseconds)."""
    return core().LaunchConfig(grid=grid, block=block, shmem_size=shared)


def launch(device: Device, name: str, kernel: str, keys: tuple, grid, block, *args, shared: int = 0) -> None:
    """Launch ``kernel`` of file ``name`` (instantiated for ``keys``, a tuple) on the device's stream.

    ``grid``/``block`` are ints or 3-tuples; ``args`` are ints, floats, None (a null
    pointer) or objects with a ``.ptr`` (device arrays), packed by the declared
    parameter types. A device with ``emulated = True`` (the CPU emulator of the tests,
    :mod:`sparsetensor.cuda._emulator`) runs the kernel itself.

    This is on the path of every op: a small SpMV spends more time here and in the op's
    Python than on the device, so the common case is one dict lookup and cuda.core's launch.
    """
    gx, gy, gz = (grid, 1, 1) if isinstance(grid, int) else tuple(grid)
    bx, by, bz = (block, 1, 1) if isinstance(block, int) else tuple(block)
    if type(keys) is not tuple:
        keys = tuple(keys)
    emulated = getattr(device, "emulated", False)
    hit = None if emulated else device.functions.get((name, kernel, keys))
    decl = hit[1] if hit is not None else _declaration(name, kernel)
    if len(args) != len(decl.params):
        raise TypeError(f"{name}:{kernel} takes {len(decl.params)} arguments ({', '.join(decl.param_names)}), "
                        f"got {len(args)}")
    if gx * gy * gz == 0:
        return
    timing = _profiled.get(threading.get_ident()) if _profiled else None
    if emulated:
        params, keep = kernel_params(args, decl.params)
        t0 = time.perf_counter()
        device.emulate(name, kernel, keys, (gx, gy, gz), (bx, by, bz), shared, params)
        if timing is not None:
            timing.append((kernel, 1e3 * (time.perf_counter() - t0)))
        del keep
        return
    func = hit[0] if hit is not None else get_function(device, name, kernel, keys)[0]
    cc = core()
    try:
        config = _config((gx, gy, gz), (bx, by, bz), shared)
        if timing is None:
            cc.launch(device.stream, config, func, *launch_args(args, decl.params))
            return
        start = device.stream.record(options=cc.EventOptions(timing_enabled=True))
        cc.launch(device.stream, config, func, *launch_args(args, decl.params))
        timing.append((kernel, (start, device.stream.record(options=cc.EventOptions(timing_enabled=True)))))
    except Exception as e:
        reraise(f"cuda.core.launch({kernel})", e)


_profiled: dict = {}  # thread id -> the launches recorded inside profile()


@contextlib.contextmanager
def profile():
    """Time every kernel this thread launches inside the block (CUDA events around each launch;
    wall time on the emulator). Yields a dict, filled on exit, of kernel name -> (launches,
    total milliseconds): where an op's device time goes, for tuning.

    Examples
    --------
    >>> from sparsetensor.cuda._module import profile                 # doctest: +SKIP
    >>> with profile() as kernels:                                     # doctest: +SKIP
    ...     y = a @ x                                                  # doctest: +SKIP
    >>> sorted(kernels.items(), key=lambda kv: -kv[1][1])[:3]          # doctest: +SKIP
    """
    me = threading.get_ident()
    if me in _profiled:
        raise RuntimeError("profile() blocks do not nest")
    records = _profiled[me] = []
    summary: dict = {}
    try:
        yield summary
    finally:
        del _profiled[me]
        for kernel, t in records:
            if isinstance(t, tuple):  # (start, end) events
                t[1].sync()
                t = float(t[1] - t[0])
            n, total = summary.get(kernel, (0, 0.0))
            summary[kernel] = (n + 1, total + t)
