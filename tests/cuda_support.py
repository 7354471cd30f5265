"""Shared by the CUDA backend tests (test_cuda.py, test_cuda_interop.py): the ``backend``
fixture (a real GPU, or the CPU emulator of the kernels), random tensors of every layout,
comparisons with the CPU, and foreign producers of device arrays."""

from __future__ import annotations

import os
import sys
import zlib

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._core._tensor import COOTensor
from sparsetensor.cuda import _driver, _emulator
from sparsetensor.cuda._array import DeviceArray

from conftest import random_dense

cuda = pytest.importorskip("sparsetensor.cuda")

FLOATS = [np.dtype(d) for d in ("float16", "float32", "float64", "complex64", "complex128")]
ALL_DTYPES = [np.dtype(d) for d in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32",
                                    "float64", "complex64", "complex128")]
INDEX = [np.int32, np.int64]
TOL = {np.dtype("float16"): 2e-2, np.dtype("float32"): 1e-5, np.dtype("float64"): 1e-12,
       np.dtype("complex64"): 1e-5, np.dtype("complex128"): 1e-12}

# (layout, batch, dense, blocksize): the shapes every layout test runs over
CASES = [
    ("coo", (), (), None), ("coo", (3,), (), None), ("coo", (), (2,), None),
    ("csr", (), (), None), ("csr", (2,), (), None), ("csr", (), (3,), None), ("csr", (2, 2), (2,), None),
    ("csc", (), (), None), ("csc", (3,), (2,), None),
    ("bsr", (), (), (2, 3)), ("bsr", (2,), (2,), (2, 1)),
    ("bsc", (), (), (2, 3)), ("bsc", (3,), (), (1, 2)),
]
CASE_IDS = [f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in CASES]


# -- backends ---------------------------------------------------------------------------------------

def _has_cuda_core() -> bool:
    try:
        import cuda.core.utils  # noqa: F401
    except ImportError:
        return False
    return True


# foreign device arrays (DLPack, __cuda_array_interface__) are read through cuda.core, an optional
# extra: without it these tests skip, as a newcomer's `pip install ".[test]"` has no cuda-python
needs_cuda_core = pytest.mark.skipif(not _has_cuda_core(),
                                     reason="cuda-python's cuda.core is not installed (pip install 'sparsetensor[cuda]')")


def _emulator_problem():
    if not sys.platform.startswith("linux"):
        return "the kernel emulator uses ucontext fibers (Linux)"
    if _emulator.compiler() is None:
        return "no C++ compiler for the kernel emulator (set $CXX)"
    return None


@pytest.fixture(scope="module", params=["gpu", "emulator"])
def backend(request):
    if request.param == "gpu":
        reason = _driver.unavailable_reason()
        if reason is not None:
            pytest.skip(f"no CUDA GPU: {reason}")
        yield "gpu"
        return
    reason = _emulator_problem()
    if reason is not None:
        pytest.skip(reason)
    saved = _driver._devices.get(0)
    # blocks and threads in a shuffled order: no kernel may rely on an order the GPU does not promise
    dev = _emulator.install(_emulator.EmulatedDevice(seed=int(os.environ.get("SPARSETENSOR_EMULATOR_SEED", "12345"))))
    try:
        yield "emulator"
    finally:
        _emulator.uninstall(dev)
        if saved is not None:
            _driver._devices[0] = saved


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# -- helpers ------------------------------------------------------------------------------------------

def make(rng, case, dtype=np.float64, index_dtype=np.int64, nnz=None, blocks=(4, 5)):
    """A random valid CPU tensor of a CASES entry."""
    layout, batch, dense, bs = case
    a = random_dense(rng, batch=batch, blocks=blocks, blocksize=bs or (1, 1), dense=dense, dtype=dtype, nnz=nnz)
    if layout == "coo":
        return st.from_dense(a, "coo", dense_dim=len(dense), index_dtype=index_dtype)
    return st.from_dense(a, layout, blocksize=bs, batch_dim=len(batch), dense_dim=len(dense),
                         index_dtype=index_dtype)


def members(t):
    if isinstance(t, (COOTensor, cuda.CudaCOOTensor)):
        return [t.indices(), t.values()]
    return [t.compressed_indices(), t.plain_indices(), t.values()]


def host(a):
    return a.get() if isinstance(a, DeviceArray) else np.asarray(a)


def assert_same(d, c, *, exact=True):
    """Device tensor ``d`` equals CPU tensor ``c``: layout, shape, flags, indices bitwise, values."""
    assert d.layout is c.layout and d.shape == c.shape and d.dtype == c.dtype
    assert d.index_dtype == c.index_dtype and d.is_coalesced() == c.is_coalesced()
    dm, cm = members(d), members(c)
    for x, y in zip(dm[:-1], cm[:-1]):
        x = host(x)
        assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all()
    assert_values(host(dm[-1]), np.ascontiguousarray(cm[-1]), exact=exact)


def cast(want, dtype):
    """A complex128 oracle cast to ``dtype`` (the real part for real dtypes), overflow allowed."""
    dtype = np.dtype(dtype)
    with np.errstate(all="ignore"):
        return (want if dtype.kind == "c" else np.real(want)).astype(dtype)


def assert_values(x, y, *, exact=False):
    assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
    if exact or x.dtype.kind not in "fc":
        assert (x.view(np.uint8) == y.view(np.uint8)).all() if exact else (x == y).all()
    else:
        tol = TOL[x.dtype]
        np.testing.assert_allclose(x.astype(np.complex128), y.astype(np.complex128), rtol=tol, atol=tol)


def same_error(cpu_call, gpu_call):
    """Both raise InvariantError with the same invariant and message, or neither raises."""
    try:
        cpu_call()
        cpu_err = None
    except st.InvariantError as e:
        cpu_err = e
    try:
        gpu_call()
        gpu_err = None
    except st.InvariantError as e:
        gpu_err = e
    if cpu_err is None or gpu_err is None:
        assert cpu_err is gpu_err is None, (cpu_err, gpu_err)
        return None
    assert (gpu_err.invariant, gpu_err.batch, gpu_err.index, str(gpu_err)) == \
        (cpu_err.invariant, cpu_err.batch, cpu_err.index, str(cpu_err))
    return cpu_err.invariant


class CAIOnly:
    """A foreign producer that only speaks __cuda_array_interface__ (as Numba/CuPy do)."""

    def __init__(self, arr):
        self.arr = arr
        self.__cuda_array_interface__ = arr.__cuda_array_interface__


class DLPackOnly:
    """A foreign producer that only speaks DLPack (CUDA device)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()
