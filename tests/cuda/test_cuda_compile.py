"""Every CUDA kernel, every instantiation, compiled with NVRTC for sm_80 and sm_90 (no GPU needed).

A kernel that does not compile fails here, in CI. The compiled cubins are also
checked against the Python side: every name expression has a lowered name, that
name is a symbol of the cubin, and the kernel's parameters in the cubin
(EIATTR_KPARAM_INFO) have the count and sizes the launcher packs from the
declaration it parsed. Tests of the compile cache run here too.

Kernels are compiled through ``cuda.core.Program`` (a cubin needs neither a GPU nor a driver).
Skips (with a reason) only where cuda-core or cuda-bindings' NVRTC cannot be imported or loaded,
and the PTX test where no CUDA driver is installed (cuda.core asks the driver whether it can load
the PTX it makes).
"""

from __future__ import annotations

import os
import struct
from concurrent.futures import ThreadPoolExecutor

import pytest

from sparsetensor.cuda import _nvrtc, _source

ARCHS = (80, 90)
_PARAM_SIZES = {"p": 8, "q": 8, "Q": 8, "d": 8, "i": 4}


def _nvrtc_problem():
    try:
        import cuda.core  # noqa: F401
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError as e:
        return f"cuda-core or cuda-bindings is not installed ({e}); pip install 'sparsetensor[cuda]'"
    try:
        _nvrtc.nvrtc_version()
    except Exception as e:  # the bindings import, the NVRTC library does not load
        return f"NVRTC cannot be loaded ({type(e).__name__}: {e}); pip install nvidia-cuda-nvrtc"
    return None


_PROBLEM = _nvrtc_problem()
requires_nvrtc = pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))


# -- a small ELF reader for cubins ----------------------------------------------------------------

def _sections(image: bytes) -> dict:
    """``{section name: bytes}`` of an ELF64 little-endian image."""
    assert image[:4] == b"\x7fELF" and image[4] == 2, "not an ELF64 image"
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    strtab = hdrs[shstrndx][4]

    def name(off):
        return image[strtab + off:image.index(b"\0", strtab + off)].decode()

    return {name(h[0]): (h, image[h[4]:h[4] + h[5]]) for h in hdrs}


def _symbols(image: bytes) -> set:
    secs = _sections(image)
    out = set()
    for h, data in secs.values():
        if h[1] != 2:  # SHT_SYMTAB
            continue
        strtab = list(secs.values())[h[6]][1]
        for off in range(0, len(data), 24):
            st_name, = struct.unpack_from("<I", data, off)
            out.add(strtab[st_name:strtab.index(b"\0", st_name)].decode())
    return out


def _param_sizes(image: bytes, lowered: str) -> list:
    """Sizes of a kernel's parameters by ordinal, from its .nv.info section (EIATTR_KPARAM_INFO)."""
    _, data = _sections(image)[f".nv.info.{lowered}"]
    sizes, i = {}, 0
    while i < len(data):
        fmt, attr = data[i], data[i + 1]
        if fmt == 0x04:  # EIFMT_SVAL: u16 size, then the payload
            n, = struct.unpack_from("<H", data, i + 2)
            payload, i = data[i + 4:i + 4 + n], i + 4 + n
            if attr == 0x17:  # EIATTR_KPARAM_INFO: index u32, ordinal u16, offset u16, flags u32
                _, ordinal, _, flags = struct.unpack("<IHHI", payload)
                sizes[ordinal] = flags >> 18
        else:
            i += 4
    return [sizes[k] for k in sorted(sizes)]


# -- compiling everything once per session ------------------------------------------------------

@pytest.fixture(scope="session")
def programs():
    """``{(file, arch): Program}`` for every kernel file and arch, compiled without the disk cache."""
    if _PROBLEM is not None:
        pytest.skip(_PROBLEM)
    jobs = [(f, a) for f in _source.kernel_files() for a in ARCHS]
    # the largest first, two at a time (NVRTC releases the GIL)
    jobs.sort(key=lambda j: -len(_source.source(j[0])))
    with ThreadPoolExecutor(max(2, min(4, os.cpu_count() or 2))) as ex:
        done = ex.map(lambda j: _nvrtc.compile_kernel_file(j[0], j[1], use_disk_cache=False), jobs)
        return dict(zip(jobs, done))


def test_sources_declare_kernels():
    files = _source.kernel_files()
    assert {"validate.cu", "coalesce.cu", "convert.cu", "dense.cu", "blas.cu", "sort.cu", "scan.cu"} <= set(files)
    assert "common.cuh" in _source.headers()
    for f in files:
        decls = _source.declarations(f)
        assert decls.kernels, f"{f} declares no kernel"
        # every __global__ function is announced by `// st:kernel`
        assert decls.text.count(b"__global__") == len(decls.kernels), f
        for k in decls.kernels:
            assert set(k.params) <= set(_PARAM_SIZES), (f, k.name, k.params)


def test_parse_rejects_unknown_parameter_types():
    bad = b"// st:kernel\n__global__ void k(float x) {}\n"
    with pytest.raises(ValueError, match="float"):
        _source.parse("bad.cu", bad)
    bad = b"// st:kernel value\n__global__ void k(float* x) {}\n"
    with pytest.raises(ValueError, match="template parameters"):
        _source.parse("bad.cu", bad)


def test_name_expressions():
    d = {k.name: k for k in _source.declarations("dense.cu").kernels}
    k = d["compressed_to_dense"]
    assert _source.name_expression(k, (16, "int32")) == "st::compressed_to_dense<st::u128, int>"
    assert len(k.instances()) == 10
    with pytest.raises(TypeError):
        _source.name_expression(k, ("float32", "int32"))


@requires_nvrtc
def test_nvrtc_supports_the_ci_archs():
    archs = _nvrtc.supported_archs()
    assert set(ARCHS) <= set(archs), archs


@requires_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", _source.kernel_files())
def test_every_instantiation_compiles(programs, name, arch):
    prog = programs[(name, arch)]
    assert prog.is_cubin and prog.target == f"sm_{arch}"
    symbols = _symbols(prog.image)
    decls = _source.declarations(name)
    n = 0
    for k in decls.kernels:
        want = [_PARAM_SIZES[p] for p in k.params]
        for keys in k.instances():
            expr = _source.name_expression(k, keys)
            lowered = prog.lowered[expr]
            assert lowered in symbols, (expr, lowered)
            assert _param_sizes(prog.image, lowered) == want, (expr, k.param_names)
            n += 1
    assert n == len(prog.lowered)


# -- errors and the cache -------------------------------------------------------------------------

_TINY = b'#include "tiny.cuh"\nextern "C" __global__ void twice(float* x) { x[threadIdx.x] = TWICE(x[threadIdx.x]); }\n'
_TINY_H = {"tiny.cuh": b"#define TWICE(a) ((a) + (a))\n"}


@requires_nvrtc
def test_compile_error_carries_the_log():
    src = b'extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }\n'
    with pytest.raises(_nvrtc.CompileError) as info:
        _nvrtc.compile_program("broken.cu", src, {}, [], 80, use_disk_cache=False)
    assert "undefined_name" in info.value.log
    assert "broken.cu" in str(info.value)


def test_cache_key_depends_on_every_input():
    base = dict(name="a.cu", source=b"src", headers={"h.cuh": b"h"}, name_expressions=("st::k<float>",),
                options=("--std=c++17",), target="sm_80", version=(13, 0), package_version="0.1.0")
    k0 = _nvrtc.cache_key(**base)
    assert k0 == _nvrtc.cache_key(**base)
    changes = dict(name="b.cu", source=b"src2", headers={"h.cuh": b"h2"}, name_expressions=("st::k<double>",),
                   options=("--std=c++17", "-lineinfo"), target="sm_90", version=(13, 1), package_version="0.2.0")
    for field, value in changes.items():
        assert _nvrtc.cache_key(**{**base, field: value}) != k0, field
    # framing: moving bytes between source and a header name changes the key
    assert _nvrtc.cache_key(**{**base, "source": b"srch.cuh", "headers": {"": b"h"}}) != k0


def test_write_atomic(tmp_path):
    path = tmp_path / "sub" / "x.bin"
    _nvrtc.write_atomic(path, b"one")
    _nvrtc.write_atomic(path, b"two")
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.bin"]  # no temporary left


def test_write_atomic_failure_leaves_old_file(tmp_path, monkeypatch):
    path = tmp_path / "x.bin"
    _nvrtc.write_atomic(path, b"old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        _nvrtc.write_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv(_nvrtc.CACHE_ENV, str(tmp_path))
    assert _nvrtc.cache_dir() == tmp_path
    monkeypatch.delenv(_nvrtc.CACHE_ENV)
    assert _nvrtc.cache_dir().parts[-2:] == ("sparsetensor", "cuda")


@requires_nvrtc
def test_disk_cache_roundtrip(monkeypatch, tmp_path):
    monkeypatch.setenv(_nvrtc.CACHE_ENV, str(tmp_path))
    _nvrtc.clear_memory_cache()
    p1 = _nvrtc.compile_program("tiny.cu", _TINY, _TINY_H, [], 80)
    files = list(tmp_path.iterdir())
    assert [f.name for f in files] == [p1.key + ".bin"]

    # a second process (memory cache cleared) reads the file and does not compile
    _nvrtc.clear_memory_cache()
    monkeypatch.setattr(_nvrtc, "_compile", lambda *a, **k: pytest.fail("compiled despite the cache"))
    p2 = _nvrtc.compile_program("tiny.cu", _TINY, _TINY_H, [], 80)
    assert p2 == p1
    monkeypatch.undo()
    monkeypatch.setenv(_nvrtc.CACHE_ENV, str(tmp_path))

    # other options, arch or header: another key, another file
    _nvrtc.compile_program("tiny.cu", _TINY, _TINY_H, [], 80, options=("-lineinfo",))
    _nvrtc.compile_program("tiny.cu", _TINY, _TINY_H, [], 90)
    _nvrtc.compile_program("tiny.cu", _TINY, {"tiny.cuh": b"#define TWICE(a) (2 * (a))\n"}, [], 80)
    assert len(list(tmp_path.iterdir())) == 4

    # a damaged file is ignored and rewritten
    (tmp_path / (p1.key + ".bin")).write_bytes(b"STCUBIN1 garbage")
    _nvrtc.clear_memory_cache()
    p3 = _nvrtc.compile_program("tiny.cu", _TINY, _TINY_H, [], 80)
    assert p3.image == p1.image
    assert _nvrtc._read_cached(tmp_path / (p1.key + ".bin"), p1.key) == p1
    _nvrtc.clear_memory_cache()


def _no_driver():
    try:
        from cuda.bindings import driver

        driver.cuDriverGetVersion()
    except Exception as e:  # noqa: BLE001 - no driver library here
        return f"PTX output through cuda.core needs the CUDA driver ({type(e).__name__})"
    return None


@requires_nvrtc
@pytest.mark.skipif(_no_driver() is not None, reason=str(_no_driver()))
def test_ptx_target():
    p = _nvrtc.compile_program("tiny.cu", _TINY, _TINY_H, [], 90, ptx=True, use_disk_cache=False)
    assert not p.is_cubin and b".entry twice" in p.image
