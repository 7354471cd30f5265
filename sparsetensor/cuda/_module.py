"""Kernels on a device: compile (through the cache), load with ``cuModuleLoadData``, launch.

``launch(device, "validate.cu", "compressed_plain", ("int64",), grid, block, *args)``
finds the kernel's declaration in the ``.cu`` file, checks the argument count,
packs the arguments by the declared parameter types, and calls ``cuLaunchKernel``
on the device's stream. A file is compiled once per architecture with all its
instantiations (NVRTC, cached on disk and in memory) and loaded once per device.

The architecture is the device's compute capability when this NVRTC supports it;
a newer device gets PTX for the newest supported architecture, which the driver
compiles on load.
"""

from __future__ import annotations

import threading

from . import _nvrtc, _source
from ._driver import Device, check, driver, kernel_params

__all__ = ["launch", "grid_for", "target_for", "get_function", "BLOCK"]

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
    """The module of kernel file ``name`` on ``device`` (compiled and loaded once)."""
    arch, ptx = target_for(device.compute_capability)
    program = _nvrtc.compile_kernel_file(name, arch, ptx=ptx)
    module = device.modules.get(program.key)
    if module is None:
        with _lock:
            module = device.modules.get(program.key)
            if module is None:
                device.activate()
                image = program.image if program.is_cubin else program.image.rstrip(b"\0") + b"\0"
                module = check(driver().cuModuleLoadData(image), f"cuModuleLoadData({name})")
                device.modules[program.key] = module
    return program, module


def get_function(device: Device, name: str, kernel: str, keys: tuple = ()):
    """``(CUfunction, KernelDecl)`` of one instantiation."""
    fkey = (name, kernel, tuple(keys))
    hit = device.functions.get(fkey)
    if hit is not None:
        return hit
    decl = _declaration(name, kernel)
    expr = _source.name_expression(decl, tuple(keys))
    program, module = _load(device, name)
    lowered = program.lowered[expr]
    func = check(driver().cuModuleGetFunction(module, lowered.encode()), f"cuModuleGetFunction({expr})")
    device.functions[fkey] = (func, decl)
    return func, decl


def grid_for(device: Device, n: int, block: int = BLOCK, per_sm: int = 32) -> int:
    """Blocks for a grid-stride loop over ``n`` items: enough to fill the device, never 0."""
    need = -(-max(int(n), 1) // block)
    return max(1, min(need, device.sm_count * per_sm))


def _declaration(name: str, kernel: str):
    decls = {k.name: k for k in _source.declarations(name).kernels}
    if kernel not in decls:
        raise KeyError(f"{name} declares no kernel {kernel!r}; it has {sorted(decls)}")
    return decls[kernel]


def launch(device: Device, name: str, kernel: str, keys: tuple, grid, block, *args, shared: int = 0) -> None:
    """Launch ``kernel`` of file ``name`` (instantiated for ``keys``) on the device's stream.

    ``grid``/``block`` are ints or 3-tuples; ``args`` are ints, floats, None (a null
    pointer) or objects with a ``.ptr`` (device arrays), packed by the declared
    parameter types. A device with ``emulated = True`` (the CPU emulator of the tests,
    :mod:`sparsetensor.cuda._emulator`) runs the kernel itself.
    """
    decl = _declaration(name, kernel)
    if len(args) != len(decl.params):
        raise TypeError(f"{name}:{kernel} takes {len(decl.params)} arguments ({', '.join(decl.param_names)}), "
                        f"got {len(args)}")
    gx, gy, gz = (grid, 1, 1) if isinstance(grid, int) else tuple(grid)
    bx, by, bz = (block, 1, 1) if isinstance(block, int) else tuple(block)
    if gx * gy * gz == 0:
        return
    params, keep = kernel_params(args, decl.params)
    if getattr(device, "emulated", False):
        device.emulate(name, kernel, tuple(keys), (gx, gy, gz), (bx, by, bz), shared, params)
        return
    func, _ = get_function(device, name, kernel, keys)
    check(driver().cuLaunchKernel(func, gx, gy, gz, bx, by, bz, shared, device.stream, params, 0),
          f"cuLaunchKernel({kernel})")
    del keep  # the driver copied the arguments when cuLaunchKernel returned
