"""The CUDA plumbing on cuda.core, where it can be checked without a GPU: NVRTC options mapped to
``cuda.core.ProgramOptions``, headers and the include path, the cubin cache key, kernel argument
packing for ``cuda.core.launch``, and DLPack / ``__cuda_array_interface__`` intake through
``cuda.core.utils.StridedMemoryView`` (host producers refused with a clear error).

The device paths themselves (streams, the pool, launches) need a GPU; ``tests/cuda/test_cuda.py`` and
``test_cuda_interop.py`` run them on one when present and on the kernel emulator otherwise.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import assert_python_prints_ok
from sparsetensor.cuda import _array, _driver, _emulator, _nvrtc
from sparsetensor.cuda._array import DeviceArray, as_device_array

def _core_imports() -> bool:
    try:
        import cuda.core  # noqa: F401
    except ImportError:
        return False
    return True


requires_core = pytest.mark.skipif(not _core_imports(), reason="cuda-core is not installed: pip install "
                                   "'sparsetensor[cuda]'")


def _driver_loads() -> bool:
    try:
        from cuda.bindings import driver

        driver.cuDriverGetVersion()
    except Exception:  # noqa: BLE001 - no driver library on this machine
        return False
    return True


def _nvrtc_loads() -> bool:
    try:
        _nvrtc.nvrtc_version()
    except Exception:  # noqa: BLE001
        return False
    return True


requires_nvrtc = pytest.mark.skipif(not (_core_imports() and _nvrtc_loads()),
                                    reason="cuda-core or NVRTC is missing: pip install 'sparsetensor[cuda]'")

_TINY = b'#include "tiny.cuh"\nextern "C" __global__ void twice(float* x) { x[threadIdx.x] = TWICE(x[threadIdx.x]); }\n'


# -- NVRTC options -> ProgramOptions ------------------------------------------------------------------

@requires_core
def test_program_options_mapping():
    o = _nvrtc.program_options("a.cu", ("--std=c++17", "-lineinfo", "-DST_X", "-DST_Y=3", "--maxrregcount=64",
                                        "--fmad=false", "--gpu-architecture=sm_90"), "/inc")
    assert (o.name, o.arch, o.std, o.lineinfo, o.max_register_count, o.fma) == ("a.cu", "sm_90", "c++17", True, 64,
                                                                                 False)
    assert o.define_macro == ["ST_X", ("ST_Y", "3")]
    assert o.include_path == "/inc" and o.no_source_include  # headers come from our directory only
    flags = [b.decode() for b in o.as_bytes("nvrtc")]
    assert "-arch=sm_90" in flags and "--std=c++17" in flags and "--generate-line-info" in flags
    assert "--no-source-include" in flags and "--define-macro=ST_Y=3" in flags


@requires_core
def test_program_options_refuses_what_it_cannot_map():
    with pytest.raises(ValueError, match="--relocatable-device-code"):
        _nvrtc.program_options("a.cu", ("--relocatable-device-code=true", "--gpu-architecture=sm_80"))
    with pytest.raises(ValueError, match="gpu-architecture"):  # cuda.core would ask the current device
        _nvrtc.program_options("a.cu", ("--std=c++17",))


def test_header_names_stay_inside_the_include_directory(tmp_path):
    _nvrtc._write_headers(str(tmp_path), {"sub/x.cuh": b"//x\n", "y.cuh": b"//y\n"})
    assert (tmp_path / "sub" / "x.cuh").read_bytes() == b"//x\n" and (tmp_path / "y.cuh").exists()
    for bad in ("../escape.cuh", "/etc/passwd"):
        with pytest.raises(ValueError, match="relative path"):
            _nvrtc._write_headers(str(tmp_path), {bad: b""})


@requires_nvrtc
def test_compile_reads_our_headers_not_the_working_directory(tmp_path, monkeypatch):
    # a header of the same name in the working directory must not be picked up
    (tmp_path / "tiny.cuh").write_bytes(b"#error picked up the working directory's header\n")
    monkeypatch.chdir(tmp_path)
    p = _nvrtc.compile_program("tiny.cu", _TINY, {"tiny.cuh": b"#define TWICE(a) ((a) + (a))\n"}, ["twice"], 80,
                               use_disk_cache=False)
    assert p.is_cubin and p.image[:4] == b"\x7fELF" and p.lowered == {"twice": "twice"}


@requires_nvrtc
def test_compile_error_log_and_cache_key_of_the_options(tmp_path, monkeypatch):
    with pytest.raises(_nvrtc.CompileError) as info:
        _nvrtc.compile_program("bad.cu", b"__global__ void k() { nope; }\n", {}, [], 90, use_disk_cache=False)
    assert 'identifier "nope" is undefined' in info.value.log and info.value.target == "sm_90"
    # the key is taken over the option strings, as before cuda.core (existing cache files stay valid)
    monkeypatch.setenv(_nvrtc.CACHE_ENV, str(tmp_path))
    _nvrtc.clear_memory_cache()
    p = _nvrtc.compile_program("tiny.cu", _TINY, {"tiny.cuh": b"#define TWICE(a) (a)\n"}, [], 80)
    want = _nvrtc.cache_key("tiny.cu", _TINY, {"tiny.cuh": b"#define TWICE(a) (a)\n"}, (),
                            ("--std=c++17", "--gpu-architecture=sm_80"), "sm_80", _nvrtc.nvrtc_version(),
                            _nvrtc.__version__)
    assert p.key == want and (tmp_path / f"{want}.bin").exists()
    _nvrtc.clear_memory_cache()


@requires_nvrtc
@pytest.mark.skipif(_driver_loads(), reason="checks the message given where no CUDA driver is installed")
def test_ptx_without_a_driver_says_why():
    with pytest.raises(_nvrtc.NVRTCError, match="PTX needs the CUDA driver"):
        _nvrtc.compile_program("tiny.cu", _TINY, {"tiny.cuh": b"#define TWICE(a) (a)\n"}, [], 90, ptx=True,
                               use_disk_cache=False)


# -- kernel arguments for cuda.core.launch ------------------------------------------------------------

@requires_core
def test_pack_args_gives_ctypes_of_the_declared_widths():
    a = DeviceArray(None, 0x1000, (3,), np.float32, None)
    got = _driver.pack_args([a, None, -5, 2**64 - 1, 7, 2.5], "ppqQid")
    assert [type(x) for x in got] == [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64, ctypes.c_uint64,
                                      ctypes.c_int32, ctypes.c_double]
    assert [x.value for x in got] == [0x1000, 0, -5, 2**64 - 1, 7, 2.5]


_WIDTHS = {"p": ctypes.c_uint64, "q": ctypes.c_int64, "Q": ctypes.c_uint64, "i": ctypes.c_int32, "d": ctypes.c_double}


@requires_core
@pytest.mark.parametrize("values, kinds", [
    ([0x1000, None, -5, 2**64 - 1, 7, 2.5], "ppqQid"),
    ([2**63 - 1, -2**63, 2**31 - 1, -2**31, 0, -0.0, 2**40], "qqiiQdp"),
    ([np.int64(9), np.int32(-3), np.uint64(5), np.float32(1.5), True, 0x1000], "qiQdip"),
])
def test_launch_args_reach_the_kernel_with_the_declared_widths(values, kinds):
    """What cuda.core's own launcher (its ParamHolder) hands the driver for launch_args' values:
    each parameter's bytes at its declared width, as the emulator's ctypes packing gives them."""
    from cuda.core._kernel_arg_handler import ParamHolder

    a = DeviceArray(None, 0x1000, (3,), np.float32, None)
    values = [a if v == 0x1000 and k == "p" else v for v, k in zip(values, kinds)]
    held = ParamHolder(_driver.launch_args(values, kinds))
    slots = (ctypes.c_void_p * len(kinds)).from_address(held.ptr)
    got = [_WIDTHS[k].from_address(slots[i]).value for i, k in enumerate(kinds)]
    address, keep = _driver.kernel_params(values, kinds)
    ref = (ctypes.c_void_p * len(kinds)).from_address(address)
    assert got == [_WIDTHS[k].from_address(ref[i]).value for i, k in enumerate(kinds)]
    assert got[kinds.index("p")] in (0x1000, 2**40)


# -- DLPack / CUDA array interface intake ----------------------------------------------------------------

class _CAI:
    def __init__(self, **cai):
        self.__cuda_array_interface__ = {"version": 3, "strides": None, "stream": None, **cai}


def test_host_dlpack_producers_are_refused():
    with pytest.raises(TypeError, match="device type 1 is not a CUDA device array"):
        as_device_array(np.arange(3.0))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="DeviceArray.from_host"):
        as_device_array(torch.arange(3))


@requires_core
def test_dlpack_intake_through_strided_memory_view():
    a = DeviceArray(None, 0x7F0000002000, (4, 2), np.complex64, None)
    b = _array._from_dlpack(a.__dlpack__(stream=-1), None)
    assert (b.ptr, b.shape, b.dtype) == (a.ptr, a.shape, a.dtype)
    assert type(b._owner).__name__ == "StridedMemoryView"  # cuda.core holds the consumed capsule


@requires_core
def test_cai_intake_on_the_emulator():
    dev = _emulator.EmulatedDevice()
    host = np.arange(12, dtype=np.float64).reshape(3, 4)
    got = as_device_array(_CAI(shape=(3, 4), typestr="<f8", data=(host.ctypes.data, False)), dev)
    assert (got.ptr, got.shape, got.dtype, got.device) == (host.ctypes.data, (3, 4), np.float64, "cuda:0")
    ok = as_device_array(_CAI(shape=(3, 1), typestr="<f8", data=(host.ctypes.data, False), strides=(8, 999)), dev)
    assert ok.shape == (3, 1)  # a stride over a length-1 axis does not matter
    with pytest.raises(ValueError, match="C-contiguous"):
        as_device_array(_CAI(shape=(4, 3), typestr="<f8", data=(host.ctypes.data, False), strides=(8, 32)), dev)


@requires_core
def test_from_view_checks_contiguity_in_elements():
    view = SimpleNamespace(ptr=0x1000, shape=(2, 3), dtype=np.dtype(np.int32), strides=(3, 1))
    assert _array._from_view(view, None, view).shape == (2, 3)
    for strides in ((1, 2), (6, 2)):
        with pytest.raises(ValueError, match=r"strides \(.*\) \(in elements\)"):
            _array._from_view(SimpleNamespace(**{**vars(view), "strides": strides}), None, view)
    empty = SimpleNamespace(ptr=0, shape=(0, 3), dtype=np.dtype(np.int32), strides=(7, 7))
    assert _array._from_view(empty, None, empty).size == 0


# -- without cuda.core -----------------------------------------------------------------------------------

def test_without_cuda_core_the_backend_is_unavailable():
    code = ("import sys; sys.modules['cuda.core'] = None\n"
            "import sparsetensor as st, sparsetensor.cuda as stc\n"
            "from sparsetensor.cuda import _array, _emulator\n"
            "assert not stc.is_available() and stc.device_count() == 0\n"
            "assert 'cuda.core' in stc.unavailable_reason(), stc.unavailable_reason()\n"
            "a = _array.DeviceArray(None, 4096, (2,), 'f4', None)\n"
            "class Producer:\n"
            "    def __dlpack__(self, **kw): return a.__dlpack__(stream=-1)\n"
            "    def __dlpack_device__(self): return (2, 0)\n"
            "try:\n    _array.as_device_array(Producer(), _emulator.EmulatedDevice())\n"
            "except ImportError as e:\n    assert 'sparsetensor[cuda]' in str(e), e\n"
            "else:\n    raise SystemExit('no ImportError')\n"
            "print('ok')\n")
    assert_python_prints_ok(code)
