"""Run-time compilation of the CUDA sources with NVRTC through ``cuda.core.Program``, cached.

:func:`compile_program` compiles one ``.cu`` source, with the ``.cuh`` files as
headers (written to a temporary include directory: cuda.core 1.2 takes no in-memory
headers) and template instantiations requested as name expressions, into a cubin for
``sm_XY`` (or PTX for ``compute_XY``). A cubin needs no GPU and no driver, so every
kernel can be compiled for any supported architecture on any machine; PTX output
needs the driver (cuda.core checks that the driver can load it). NVRTC's version and
supported architectures come from ``cuda.bindings.nvrtc`` (cuda.core does not expose them).

Compiled programs are cached (cuda.core's own program caches do not keep the lowered
names of name expressions, so this cache stays ours)

- on disk, one file per program under :func:`cache_dir` (``$SPARSETENSOR_CUDA_CACHE``,
  else ``$XDG_CACHE_HOME/sparsetensor/cuda`` or ``~/.cache/sparsetensor/cuda``), named
  by the sha256 of everything the output depends on: the source and header bytes, the
  name expressions, the options, the NVRTC version, the target and the package
  version. A file is written to a temporary name in the same directory and moved into
  place with :func:`os.replace`, so readers never see half a file; a file that does
  not parse is ignored and rewritten;
- in memory, per process (the device-independent result) -- loaded modules are
  cached per device by :mod:`sparsetensor.cuda._module`.

A failed compile raises :class:`CompileError` carrying the NVRTC log.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__

__all__ = ["CompileError", "NVRTCError", "Program", "compile_program", "nvrtc_version", "supported_archs",
           "cache_dir", "cache_key", "CACHE_ENV"]

CACHE_ENV = "SPARSETENSOR_CUDA_CACHE"
_MAGIC = b"STCUBIN1"
_BASE_OPTIONS = ("--std=c++17",)

_memory: dict = {}
_lock = threading.Lock()


class NVRTCError(RuntimeError):
    """NVRTC or cuda.core failed (other than a compile error)."""


class CompileError(RuntimeError):
    """NVRTC rejected a source; ``.log`` holds its log."""

    def __init__(self, name: str, target: str, log: str):
        self.name, self.target, self.log = name, target, log
        super().__init__(f"NVRTC failed to compile {name} for {target}:\n{log}")


@dataclass(frozen=True)
class Program:
    """A compiled source: ``image`` (cubin or PTX bytes) and the lowered (mangled) name of
    every requested name expression."""

    name: str
    target: str        # "sm_90" (cubin) or "compute_90" (PTX)
    image: bytes
    lowered: dict      # name expression -> lowered name
    key: str

    @property
    def is_cubin(self) -> bool:
        return self.target.startswith("sm_")


def _nvrtc_query(call: str):
    """A value of ``cuda.bindings.nvrtc`` that cuda.core does not expose (version, archs)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the CUDA backend needs cuda-python's NVRTC bindings: "
                          "pip install 'sparsetensor[cuda]' (cuda-bindings and nvidia-cuda-nvrtc)") from e
    err, *values = getattr(nvrtc, call)()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NVRTCError(f"{call} failed: {err!r}")
    return values


def nvrtc_version() -> tuple:
    """``(major, minor)`` of the NVRTC library in use."""
    return tuple(int(v) for v in _nvrtc_query("nvrtcVersion"))


def supported_archs() -> list:
    """The ``sm_XY`` numbers (e.g. 80, 90) this NVRTC can compile for."""
    return [int(a) for a in _nvrtc_query("nvrtcGetSupportedArchs")[0]]


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparsetensor" / "cuda"


def cache_key(name: str, source: bytes, headers: dict, name_expressions, options, target: str,
              version: tuple, package_version: str) -> str:
    """sha256 over everything the compiled output depends on (lengths framed, so no two
    different inputs concatenate to the same bytes)."""
    h = hashlib.sha256()

    def put(b: bytes):
        h.update(struct.pack("<Q", len(b)))
        h.update(b)

    put(b"sparsetensor-nvrtc-cache-1")
    put(package_version.encode())
    put(("%d.%d" % tuple(version)).encode())
    put(target.encode())
    put("\0".join(options).encode())
    put(name.encode())
    put(source)
    for hname in sorted(headers):
        put(hname.encode())
        put(headers[hname])
    put("\0".join(name_expressions).encode())
    return h.hexdigest()


def _encode(program: Program) -> bytes:
    meta = json.dumps({"name": program.name, "target": program.target, "lowered": program.lowered,
                       "key": program.key}).encode()
    return _MAGIC + struct.pack("<QQ", len(meta), len(program.image)) + meta + program.image


def _decode(data: bytes, key: str) -> Program | None:
    try:
        if data[:8] != _MAGIC:
            return None
        nmeta, nimage = struct.unpack("<QQ", data[8:24])
        if len(data) != 24 + nmeta + nimage:
            return None
        meta = json.loads(data[24:24 + nmeta])
        if meta["key"] != key:
            return None
        return Program(meta["name"], meta["target"], bytes(data[24 + nmeta:]), dict(meta["lowered"]), key)
    except (ValueError, KeyError, struct.error):
        return None


def _read_cached(path: Path, key: str) -> Program | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return _decode(data, key)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and
    :func:`os.replace`: a reader sees the old file or the new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# NVRTC options we pass (as strings: they are part of the cache key) -> cuda.core ProgramOptions fields
_FLAGS = {"-lineinfo": "lineinfo", "--generate-line-info": "lineinfo", "-G": "debug", "--device-debug": "debug",
          "--use_fast_math": "use_fast_math", "-use_fast_math": "use_fast_math"}
_VALUED = {"--std": ("std", str), "-std": ("std", str), "--gpu-architecture": ("arch", str), "-arch": ("arch", str),
           "--maxrregcount": ("max_register_count", int), "--fmad": ("fma", lambda v: v == "true"),
           "--ftz": ("ftz", lambda v: v == "true"), "--prec-div": ("prec_div", lambda v: v == "true"),
           "--prec-sqrt": ("prec_sqrt", lambda v: v == "true")}


def program_options(name: str, options, include_dir: str | None = None):
    """The ``cuda.core.ProgramOptions`` of NVRTC command-line ``options`` (``--std=c++17``,
    ``--gpu-architecture=sm_90``, ``-lineinfo``, ``-DNAME[=V]``, ...); an option without a
    ProgramOptions field raises ValueError. Headers are found only in ``include_dir``."""
    fields: dict = {}
    macros = []
    for opt in options:
        key, eq, value = opt.partition("=")
        if opt in _FLAGS:
            fields[_FLAGS[opt]] = True
        elif eq and key in _VALUED:
            field, conv = _VALUED[key]
            fields[field] = conv(value)
        elif opt.startswith("-D") and len(opt) > 2:
            k, _, v = opt[2:].partition("=")
            macros.append((k, v) if v else k)
        else:
            raise ValueError(f"NVRTC option {opt!r} has no cuda.core ProgramOptions equivalent here; known: "
                             f"{sorted(_FLAGS) + sorted(_VALUED) + ['-DNAME[=VALUE]']}")
    if macros:
        fields["define_macro"] = macros
    if "arch" not in fields:  # cuda.core would ask the current device (and need a driver)
        raise ValueError(f"no --gpu-architecture in {list(options)}")
    from cuda.core import ProgramOptions

    return ProgramOptions(name=name, include_path=include_dir, no_source_include=True, **fields)


def _write_headers(directory: str, headers: dict) -> None:
    """cuda.core 1.2's Program takes no in-memory headers: write them where ``#include`` finds them."""
    root = Path(directory)
    for hname, data in headers.items():
        rel = Path(hname)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"header name {hname!r} must be a relative path inside the include directory")
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def _compile(name: str, source: bytes, headers: dict, name_expressions, options, target: str, key: str) -> Program:
    try:
        from cuda.core import Program as CoreProgram
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the CUDA backend compiles kernels with cuda-python's cuda.core: "
                          "pip install 'sparsetensor[cuda]'") from e
    with tempfile.TemporaryDirectory(prefix="sparsetensor-nvrtc-") as include_dir:
        _write_headers(include_dir, headers)
        opts = program_options(name, options, include_dir)
        try:
            code = CoreProgram(source.decode(), "c++", opts).compile("ptx" if target.startswith("compute_") else "cubin",
                                                                   name_expressions=tuple(name_expressions))
        except Exception as e:  # cuda.core's NVRTCError; a missing driver for PTX (see below)
            text = str(e)
            if "NVRTC_ERROR_COMPILATION" in text:
                raise CompileError(name, target, text.partition("compilation log:")[2].strip("\n\0 ")) from None
            if target.startswith("compute_") and type(e).__name__ == "DynamicLibNotFoundError":
                raise NVRTCError(f"compiling {name} to PTX needs the CUDA driver: cuda.core asks it whether it can "
                                 f"load the PTX ({e})") from e
            raise NVRTCError(f"NVRTC failed on {name} for {target}: {type(e).__name__}: {text}") from e
    lowered = {}
    for expr in name_expressions:
        low = code.symbol_mapping.get(expr)
        if low is None:
            raise NVRTCError(f"NVRTC gave no lowered name for {expr!r} in {name}")
        lowered[expr] = low.decode() if isinstance(low, bytes) else str(low)
    return Program(name, target, bytes(code.code), lowered, key)


def compile_program(name: str, source: bytes, headers: dict, name_expressions, arch: int, *, ptx: bool = False,
                    options=(), use_disk_cache: bool = True) -> Program:
    """Compile ``source`` for ``sm_<arch>`` (cubin) or ``compute_<arch>`` (``ptx=True``).

    Parameters
    ----------
    name : str
        The program's name in NVRTC messages (``"validate.cu"``).
    source : bytes
        The ``.cu`` text.
    headers : dict
        ``{include name: bytes}`` available to ``#include "name"``.
    name_expressions : sequence of str
        Kernels to instantiate and look up (``"st::kernel<float, int>"``).
    arch : int
        80 for ``sm_80`` and so on; see :func:`supported_archs`.
    options : sequence of str
        Extra NVRTC options (part of the cache key).
    use_disk_cache : bool
        Read and write the on-disk cache (the in-memory cache is always used).

    Returns
    -------
    Program

    Raises
    ------
    CompileError
        With NVRTC's log, when the source does not compile.

    Examples
    --------
    >>> from sparsetensor.cuda._nvrtc import compile_program   # doctest: +SKIP
    >>> src = b'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2; }'
    >>> compile_program("twice.cu", src, {}, [], 80).image[:4]  # doctest: +SKIP
    b'\\x7fELF'
    """
    target = f"{'compute' if ptx else 'sm'}_{int(arch)}"
    options = tuple(_BASE_OPTIONS) + tuple(options) + (f"--gpu-architecture={target}",)
    exprs = tuple(name_expressions)
    version = nvrtc_version()
    key = cache_key(name, source, headers, exprs, options, target, version, __version__)
    with _lock:
        hit = _memory.get(key)
    if hit is not None:
        return hit
    path = cache_dir() / f"{key}.bin"
    program = _read_cached(path, key) if use_disk_cache else None
    if program is None:
        program = _compile(name, source, headers, exprs, options, target, key)
        if use_disk_cache:
            try:
                write_atomic(path, _encode(program))
            except OSError as e:
                warnings.warn(f"sparsetensor: cannot write the CUDA kernel cache under {path.parent} ({e}); "
                              f"set {CACHE_ENV} to a writable directory", RuntimeWarning, stacklevel=2)
    with _lock:
        _memory[key] = program
    return program


def clear_memory_cache() -> None:
    """Forget the compiled programs held in memory (the disk cache stays)."""
    with _lock:
        _memory.clear()


def compile_kernel_file(name: str, arch: int, *, ptx: bool = False, use_disk_cache: bool = True) -> Program:
    """Compile one file of ``kernels/`` with every instantiation of every kernel it declares."""
    from . import _source

    src = _source.declarations(name)
    exprs = [_source.name_expression(k, keys) for k in src.kernels for keys in k.instances()]
    return compile_program(name, src.text, _source.headers(), exprs, arch, ptx=ptx, use_disk_cache=use_disk_cache)
