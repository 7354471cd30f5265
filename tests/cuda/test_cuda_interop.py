"""The CUDA backend's edges: device arrays from other libraries (``__cuda_array_interface__``,
DLPack, PyTorch, CuPy), constructors from device arrays (zero-copy, device, dtype, size
estimation), moves between devices and the host, which methods exist on device tensors,
what works without a device, and stream ordering. Same backends as test_cuda.py (a real
GPU, or the CPU emulator of the kernels; see cuda_support.py)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._core._tensor import COOTensor, CompressedTensor
from sparsetensor.cuda import _driver, _emulator
from sparsetensor.cuda._array import DeviceArray, _DLManagedTensor, _from_dlpack, as_device_array

from conftest import assert_python_prints_ok
from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import (CASE_IDS, CASES, INDEX, CAIOnly, DLPackOnly, _emulator_problem, assert_same,
                          assert_values, cuda, host, make, members, needs_cuda_core, same_error)

# -- interop --------------------------------------------------------------------------------------------------

@needs_cuda_core
def test_cuda_array_interface_and_dlpack(backend):
    a = cuda.DeviceArray.from_host(np.arange(12, dtype=np.float32).reshape(3, 4))
    cai = a.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["data"] == (a.ptr, False)
    assert cai["version"] == 3 and cai["strides"] is None and cai["stream"]

    b = as_device_array(DLPackOnly(a))
    assert b.ptr == a.ptr and b.shape == a.shape and b.dtype == a.dtype
    assert (b.get() == a.get()).all()
    c = as_device_array(type("CAI", (), {"__cuda_array_interface__": cai})())
    assert c.ptr == a.ptr and (c[1].get() == a.get()[1]).all()


def test_torch_and_cupy_zero_copy(backend):
    if backend != "gpu":
        pytest.skip("PyTorch/CuPy can only take device memory on a real GPU")
    a = cuda.DeviceArray.from_host(np.arange(6, dtype=np.float64))
    done = 0
    try:
        import cupy
        c = cupy.asarray(a)
        assert c.data.ptr == a.ptr and (cupy.asnumpy(c) == a.get()).all()
        assert as_device_array(c).ptr == a.ptr
        done += 1
    except ImportError:
        pass
    try:
        import torch
        if torch.cuda.is_available():
            x = torch.from_dlpack(a)
            assert x.data_ptr() == a.ptr and (x.cpu().numpy() == a.get()).all()
            y = torch.arange(5, device="cuda", dtype=torch.float32)
            assert as_device_array(y).ptr == y.data_ptr()
            done += 1
    except ImportError:
        pass
    if not done:
        pytest.skip("neither CuPy nor a CUDA build of PyTorch is installed")


def test_to_and_operators(backend, rng):
    t = make(rng, ("csr", (2,), (), None), np.float32, np.int64)
    d = cuda.to_device(t)
    d32 = d.to(index_dtype=np.int32)
    assert_same(d32, t.to(index_dtype=np.int32))
    h = d.to(np.float16)
    assert h.dtype == np.float16 and (h.to(np.float32).values().get() == t.values().astype(np.float16)).all()
    assert_same(cuda.to_device(d.to("cpu"), "cuda:0"), t)  # CPU-side .to("cuda") is wired in _tensor.py
    assert_same(d.to(np.float64), t.to(np.float64))  # cast on the device
    with pytest.warns(np.exceptions.ComplexWarning):  # NumPy's: the imaginary part is dropped
        assert_same(d.to(np.complex64).to(np.float32), t.to(np.complex64).to(np.float32))
    dense = t.to_dense()
    assert_values((d - d).to_dense().get(), dense - dense)
    assert_values((d / 2).to_dense().get(), dense / 2)
    assert_values((-d).to_dense().get(), -dense)
    assert_values((d * d).to_dense().get(), dense * dense)
    coo = cuda.to_device(make(rng, ("coo", (), (), None), np.float64, np.int32))
    assert coo.to(index_dtype=np.int64).indices().dtype == np.int64
    assert_values((coo + coo).to_dense().get(), 2 * cuda.to_host(coo).to_dense())


def test_no_silent_host_copy(backend, rng):
    d = cuda.to_device(make(rng, ("csr", (), (), None)))
    with pytest.raises(TypeError, match="implicitly"):
        np.asarray(d)
    assert (np.asarray(d.values()) == d.values().get()).all()  # a DeviceArray copies when asked


def test_exits_need_host_memory(backend, rng, tmp_path):
    """One class tree: the exits of CPU tensors are reachable with device members; those that hand
    host memory to another library (or pickle it) refuse them, naming the exit and the device;
    the file writers copy to the host, as their job is writing host memory to a file."""
    import pickle

    t = make(rng, ("csr", (), (), None))
    d = t.cuda()
    for call, what in ((lambda: st.to_scipy(d), "to_scipy"), (lambda: pickle.dumps(d), "pickling")):
        with pytest.raises(NotImplementedError, match=f"{what}.* on cuda:0"):
            call()
    with pytest.raises(ValueError, match="different devices"):  # nothing is moved to join them
        st.cat([t, d])
    st.save(tmp_path / "d.npz", d)
    assert_same(d, st.load(tmp_path / "d.npz"))


# -- constructors from device arrays (issue #5: zero-copy, device, dtype, size estimation) ----------------

def outcome(call):
    """``("ok", shape, flags)`` or ``(error type, invariant, message)`` of a constructor call."""
    try:
        t = call()
    except (st.InvariantError, ValueError, TypeError) as e:
        return type(e).__name__, getattr(e, "invariant", None), str(e)
    return "ok", t.shape, t.is_coalesced()


@pytest.fixture
def second_device(backend):
    """An emulated cuda:1 next to the emulated cuda:0 (emulator only)."""
    if backend != "emulator":
        pytest.skip("a second device is emulated only")
    dev = _emulator.install(_emulator.EmulatedDevice(ordinal=1, seed=7))
    try:
        yield dev
    finally:
        _emulator.uninstall(dev)


def test_is_device_array():
    from sparsetensor._core._device import is_device_array

    a = DeviceArray(None, 0x1000, (3,), np.float32, None)
    assert is_device_array(a) and is_device_array(DLPackOnly(a))
    assert not is_device_array(np.zeros(3)) and not is_device_array([1, 2]) and not is_device_array(3.0)
    pytest.importorskip("torch")
    import torch

    assert not is_device_array(torch.zeros(3))  # a CPU DLPack producer stays on the host path


@pytest.mark.parametrize("wrap", ["device_array", "cai", pytest.param("dlpack", marks=needs_cuda_core)])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_factory_takes_device_arrays(backend, rng, case, wrap):
    """st.sparse_*_tensor of device arrays: a CUDA tensor sharing their memory, equal to the CPU's."""
    t = make(rng, case, np.float32, np.int32)
    host = members(t)
    dev = [cuda.DeviceArray.from_host(np.ascontiguousarray(x)) for x in host]
    given = {"device_array": lambda: dev, "cai": lambda: [CAIOnly(a) for a in dev],
             "dlpack": lambda: [DLPackOnly(a) for a in dev]}[wrap]()
    if t.layout is st.sparse_coo:
        d = st.sparse_coo_tensor(*given, t.shape, is_coalesced=True)
        c = st.sparse_coo_tensor(*host, t.shape, is_coalesced=True)
    else:
        d = st.sparse_compressed_tensor(*given, t.shape, layout=t.layout)
        c = st.sparse_compressed_tensor(*host, t.shape, layout=t.layout)
    assert isinstance(d, cuda.CudaSparseTensor) and d.device == "cuda:0"
    assert [m._ptr for m in members(d)] == [a._ptr for a in dev]  # zero-copy (.ptr would share them)
    if wrap != "device_array" and t.layout is not st.sparse_coo:
        # another library's memory: a check of its indices does not last (every op checks again)
        assert not d.is_coalesced() and c.is_coalesced()
        c = st.sparse_compressed_tensor(*host, t.shape, layout=t.layout, check_invariants=False)
    assert_same(d, c)
    if t.layout is not st.sparse_coo:
        build = getattr(st, f"sparse_{t.layout.name}_tensor")
        assert_same(build(*given, t.shape), c)


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_size_estimate_matches_cpu(backend, rng, case, index_dtype):
    """size=None: the device estimate (one reduction) is the CPU's, for valid and empty inputs."""
    for nnz in (None, 0):
        t = make(rng, case, np.float64, index_dtype, nnz=nnz)
        host = [np.ascontiguousarray(x) for x in members(t)]
        dev = [cuda.DeviceArray.from_host(x) for x in host]
        if t.layout is st.sparse_coo:
            d, c = st.sparse_coo_tensor(*dev), st.sparse_coo_tensor(*host)
        else:
            d = st.sparse_compressed_tensor(*dev, layout=t.layout)
            c = st.sparse_compressed_tensor(*host, layout=t.layout)
        assert d.shape == c.shape
        assert_same(d, c)


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
def test_size_estimate_unchecked_garbage(backend, rng, layout, index_dtype):
    """Unchecked, broken compressed indices: the same estimate (or the same error) as the CPU,
    including steps that wrap around in the index dtype."""
    info = np.iinfo(index_dtype)
    seen = set()
    for k in range(30):
        B = int(rng.integers(0, 3))
        n = int(rng.integers(0, 6))
        nnz = int(rng.integers(0, 7))
        hi = int(rng.integers(1, 40))
        c = rng.integers(-3, hi, (B, n + 1) if B else (n + 1,)).astype(index_dtype)
        p = rng.integers(-2, hi, (B, nnz) if B else (nnz,)).astype(index_dtype)
        if k % 5 == 0 and c.size > 1:
            c.flat[0], c.flat[1] = info.min, info.max  # the step wraps: NumPy's diff wraps too
        bs = (2, 1) if layout == "bsr" else ()
        v = rng.random(p.shape + bs)

        def build(arrays):
            with st.check_invariants(False):
                return st.sparse_compressed_tensor(*arrays, layout=layout)

        got = outcome(lambda: build([cuda.DeviceArray.from_host(x) for x in (c, p, v)]))
        want = outcome(lambda: build((c, p, v)))
        assert got == want
        seen.add(want[0])
    assert "ok" in seen


def test_size_estimate_large_and_negative(backend, rng):
    """Several partial blocks per row; a negative index: the CPU's InvariantError C4."""
    n = 40000
    idx = np.stack([rng.integers(0, 700, n), rng.integers(0, 90000, n), rng.integers(0, 3, n)])
    vals = rng.random(n)
    d = st.sparse_coo_tensor(cuda.DeviceArray.from_host(idx), cuda.DeviceArray.from_host(vals))
    assert d.shape == st.sparse_coo_tensor(idx, vals).shape == tuple(int(m) + 1 for m in idx.max(axis=1))
    c = np.sort(rng.integers(0, 50000, 3001))
    c[0], c[-1] = 0, 50000
    p = rng.integers(0, 7000, 50000)
    want = st.sparse_csr_tensor(c, p, np.ones(50000), check_invariants=False).shape
    got = st.sparse_csr_tensor(*[cuda.DeviceArray.from_host(x) for x in (c, p, np.ones(50000))],
                               check_invariants=False).shape
    assert got == want == (3000, max(int(p.max()) + 1, int(np.diff(c).max())))
    for bad in ([[0, 1, -4], [2, -1, 0]], [[0, 1], [3, -2]], [[-1, 2]]):
        bad = np.array(bad)
        same_error(lambda: st.sparse_coo_tensor(bad, np.ones(bad.shape[1])),
                   lambda: st.sparse_coo_tensor(cuda.DeviceArray.from_host(bad),
                                                cuda.DeviceArray.from_host(np.ones(bad.shape[1]))))
        with pytest.raises(st.InvariantError, match="C4"):
            st.sparse_coo_tensor(cuda.DeviceArray.from_host(bad), np.ones(bad.shape[1]))


def test_factory_empty_index_list(backend):
    d = st.sparse_coo_tensor(cuda.DeviceArray.from_host(np.zeros(0, np.int64)), cuda.DeviceArray.from_host(
        np.zeros(0)), (3, 4))
    assert d.shape == (3, 4) and d.indices().shape == (2, 0) and d.nnz == 0
    e = st.sparse_coo_tensor([], cuda.DeviceArray.from_host(np.zeros(0)))
    assert e.shape == st.sparse_coo_tensor([], np.zeros(0)).shape == (0,)


def test_factory_mixed_host_and_device(backend, rng):
    """Host members are copied to the device arrays' device; the device members are not copied."""
    t = make(rng, ("csr", (2,), (), None), np.float32, np.int64)
    dv = cuda.DeviceArray.from_host(t.values())
    d = st.sparse_csr_tensor(t.crow_indices().tolist(), t.col_indices(), dv, t.shape)
    assert d.values() is dv and d.device == "cuda:0"
    assert isinstance(d.crow_indices(), cuda.DeviceArray) and isinstance(d.col_indices(), cuda.DeviceArray)
    assert_same(d, t)
    coo = make(rng, ("coo", (), (2,), None), np.float64, np.int64)
    di = cuda.DeviceArray.from_host(coo.indices())
    dc = st.sparse_coo_tensor(di, coo.values().tolist(), is_coalesced=True)
    assert dc.indices() is di
    assert_same(dc, st.sparse_coo_tensor(coo.indices(), coo.values().tolist(), is_coalesced=True))


def test_factory_device_argument(backend, rng, second_device):
    t = make(rng, ("coo", (), (), None), np.float32, np.int64)
    i0, v0 = cuda.DeviceArray.from_host(t.indices()), cuda.DeviceArray.from_host(t.values())
    for spec in (None, "cuda", "cuda:0", 0):
        assert st.sparse_coo_tensor(i0, v0, t.shape, device=spec).device == "cuda:0"
    with pytest.raises(ValueError, match=r"device='cuda:1'.*indices on cuda:0"):
        st.sparse_coo_tensor(i0, v0, t.shape, device="cuda:1")
    with pytest.raises(ValueError, match=r"device='cpu'.*cuda:0"):
        st.sparse_coo_tensor(i0, v0, t.shape, device="cpu")
    v1 = cuda.DeviceArray.from_host(t.values(), second_device)
    with pytest.raises(ValueError, match="indices on cuda:0, values on cuda:1"):
        st.sparse_coo_tensor(i0, v1, t.shape)
    d1 = st.sparse_coo_tensor(t.indices(), v1, t.shape)  # host indices follow the values to cuda:1
    assert d1.device == "cuda:1" and d1.indices().device == "cuda:1"
    c = make(rng, ("csr", (), (), None), np.float32, np.int32)
    with pytest.raises(ValueError, match="crow_indices on cuda:0, col_indices on cuda:1"):
        st.sparse_csr_tensor(cuda.DeviceArray.from_host(c.crow_indices()),
                             cuda.DeviceArray.from_host(c.col_indices(), second_device), c.values())
    with pytest.raises(ValueError, match="cuda:2 does not exist"):
        st.sparse_coo_tensor(i0, v0, t.shape, device="cuda:2")


def test_factory_dtype(backend, rng):
    t = make(rng, ("csr", (), (), None), np.float32, np.int32)
    c, p, v = (cuda.DeviceArray.from_host(x) for x in members(t))
    h = st.sparse_csr_tensor(c, p, v, t.shape, dtype=np.float16)  # cast on the device
    assert h.dtype == np.float16 and h.crow_indices() is c
    assert (h.values().get() == t.values().astype(np.float16)).all()
    assert st.sparse_csr_tensor(c, p, v, t.shape, dtype="float32").values() is v  # no cast, no copy
    d64 = st.sparse_csr_tensor(c, p, v, t.shape, dtype=np.float64)  # cast on the device
    assert d64.device == "cuda:0" and (d64.values().get() == t.values().astype(np.float64)).all()
    host_vals = st.sparse_csr_tensor(c, p, t.values(), t.shape, dtype=np.float64)  # host values: cast on the host
    assert host_vals.dtype == np.float64 and host_vals.values().dtype == np.float64
    with pytest.raises(st.InvariantError, match="int32 or int64"):
        st.sparse_csr_tensor(cuda.DeviceArray.from_host(t.crow_indices().astype(np.int16)),
                             cuda.DeviceArray.from_host(t.col_indices().astype(np.int16)), v, t.shape)
    with pytest.raises(st.InvariantError, match="1.2"):
        st.sparse_csr_tensor(c, cuda.DeviceArray.from_host(t.col_indices().astype(np.int64)), v, t.shape)


# -- moves, device, members -----------------------------------------------------------------------------

def test_moves_and_device(backend, rng, second_device):
    t = make(rng, ("bsr", (2,), (), (2, 1)), np.float32, np.int32)
    for d in (t.to("cuda"), t.cuda(), t.to("cuda:0"), t.to(device="cuda"), t.cuda(0)):
        assert isinstance(d, cuda.CudaCompressedTensor) and d.device == "cuda:0" and d.device_id == 0
        assert_same(d, t)
    d = t.cuda()
    assert d.cuda() is d and d.to("cuda:0") is d and d.to("cuda") is d
    for back in (d.cpu(), d.to("cpu"), d.to(device="cpu")):
        assert type(back) is type(t) and back.device == "cpu"
        assert_same(d, back)
    assert t.cpu() is t and t.to("cpu") is t
    # members copy to the host only when asked
    assert (d.values().get() == t.values()).all() and (np.asarray(d.crow_indices()) == t.crow_indices()).all()
    # dtype with a move: converted on the host side of the move
    assert d.to("cpu", np.float64).dtype == np.float64
    assert t.to("cuda", np.float64).dtype == np.float64
    # another device
    d1 = d.to("cuda:1")
    assert d1.device == "cuda:1" and d1.values().device == "cuda:1"
    assert_same(d1, t)
    assert d1.to("cuda:0").device == "cuda:0"
    with pytest.raises(ValueError, match="cuda:5 does not exist"):
        t.to("cuda:5")
    with pytest.raises(ValueError, match="cuda:5 does not exist"):
        d.cuda(5)
    assert "device='cuda:0'" in repr(d) and "device" not in repr(t)


def test_to_cuda_1_missing(backend):
    """t.to("cuda:1") on a machine with one device: a clear ValueError naming it."""
    if backend == "gpu" and _driver.device_count() > 1:
        pytest.skip("this machine has a second GPU")
    t = st.sparse_csr_tensor([0, 1], [0], [1.0])
    with pytest.raises(ValueError, match="cuda:1 does not exist"):
        t.to("cuda:1")
    with pytest.raises(ValueError, match="cuda:1 does not exist"):
        t.cuda().to("cuda:1")


_HAS_KERNEL = {"abs", "neg", "negative", "sqrt", "square", "sin", "sign", "floor", "relu", "conj", "pow", "sum",
               "add", "sub", "mul", "div", "mm", "mv", "coalesce", "clone", "to_dense", "to_sparse",
               "to_sparse_csr", "to_sparse_coo", "check_invariants", "astype", "to", "cpu", "cuda", "mT",
               "__rmul__", "values", "indices", "crow_indices", "nnz", "shape", "size", "mean", "amax", "amin", "norm",
               "softmax", "log_softmax", "maximum", "minimum", "deg2rad", "rad2deg", "narrow", "narrow_copy",
               "index_select", "select", "nonzero", "count_nonzero", "__getitem__", "real", "imag", "H", "adjoint",
               "matvec", "rmatvec", "matmat", "rmatmat", "diagonal", "trace", "exp", "cos", "log", "sigmoid"}


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_every_method_exists_or_names_the_op(backend, rng, layout):
    """Every public method of the CPU class exists on the device class: it runs a GPU kernel, or
    raises NotImplementedError naming the op (never a silent host copy, never AttributeError)."""
    import inspect

    cpu_cls = COOTensor if layout == "coo" else CompressedTensor
    t = make(rng, (layout, (), (), None), np.float32, np.int64)
    d = t.cuda()
    stubs = []
    for name in dir(cpu_cls):
        if name.startswith("_") and name not in ("__radd__", "__rsub__", "__rtruediv__", "__rmatmul__"):
            continue
        attr = inspect.getattr_static(type(d), name)
        fn = attr.fget if isinstance(attr, property) else attr
        if getattr(fn, "no_gpu_kernel", False):
            stubs.append(name)
            with pytest.raises(NotImplementedError, match=rf"^{name} of a {layout} tensor on cuda:0 has no GPU"):
                getattr(d, name) if isinstance(attr, property) else getattr(d, name)(1)
    assert not _HAS_KERNEL & set(stubs)
    assert "to_scipy" in stubs
    with pytest.raises(TypeError):
        np.add(d, 1)  # no NumPy ufunc on a device tensor
    with pytest.raises(NotImplementedError, match="__rmatmul__"):
        np.ones((2, 4), np.float32) @ d


def test_wired_methods(backend, rng):
    t = make(rng, ("csr", (), (), None), np.float32, np.int64)
    d = t.cuda()
    for name in ("sqrt", "abs", "sin", "square", "relu", "floor", "neg"):
        with np.errstate(invalid="ignore"):
            want = getattr(t, name)().to_dense()
        assert_values(getattr(d, name)().cpu().to_dense(), want)
    dense = t.to_dense()
    assert_values(abs(d).to_dense().get(), np.abs(dense))
    assert_values((d ** 2).to_dense().get(), dense ** 2)
    assert_values(d.sub(d).to_dense().get(), dense - dense)
    assert_values(d.mul(3).to_dense().get(), dense * 3)
    assert_values(d.div(2).to_dense().get(), dense / 2)
    assert_values(d.sum().get(), np.asarray(dense.sum(dtype=np.float64), np.float32))
    assert_values(d.sum(1).get(), dense.sum(axis=1))
    assert_values(d.T.to_dense().get(), dense.T)
    assert_values(d.t().to_dense().get(), dense.T)
    x = rng.standard_normal(t.shape[1]).astype(np.float32)
    assert_values(d.mv(cuda.DeviceArray.from_host(x)).get(), dense @ x)
    # the CPU's semantics on both devices (issue #10): keepdim keeps the summed dim with size 1
    assert_values(d.sum(1, keepdim=True).get(), dense.sum(axis=1, keepdims=True))
    assert_values(d.round(2).to_dense().get(), np.round(dense, 2))  # float32 arithmetic, as NumPy's
    assert len(d) == t.shape[0] and d.size(-1) == t.shape[1] and d.numel() == t.numel()
    coo = make(rng, ("coo", (), (), None))
    assert_same(coo.cuda().T, coo.T)
    assert_same(coo.cuda().mT.coalesce(), coo.mT.coalesce())
    c3 = make(rng, ("coo", (3,), (2,), None))
    assert_same(c3.cuda().transpose(0, 2), c3.transpose(0, 2))
    with pytest.raises(NotImplementedError, match="transpose") as cpu:  # a sparse and a dense dim: both refuse
        c3.transpose(0, 3)
    with pytest.raises(NotImplementedError, match="transpose") as gpu:
        c3.cuda().transpose(0, 3)
    assert str(gpu.value) == str(cpu.value)


# -- without a device ---------------------------------------------------------------------------------------

def test_device_array_metadata():
    a = DeviceArray(None, 0x10000, (3, 4, 2), np.complex64, None)
    assert a.shape == (3, 4, 2) and a.size == 24 and a.nbytes == 192 and a.strides == (64, 16, 8)
    assert a.device == "cuda:0" and a.__dlpack_device__() == (2, 0) and len(a) == 3
    assert a[1].ptr == 0x10000 + 64 and a[1].shape == (4, 2) and a[-1].ptr == 0x10000 + 128
    assert a[1:3].shape == (2, 4, 2) and a[1:3].ptr == 0x10000 + 64 and a[5:].shape == (0, 4, 2)
    assert a.reshape(-1, 2).shape == (12, 2) and a.reshape((24,)).ptr == a.ptr
    assert a.view(np.float32).shape == (3, 4, 4) and a.view(np.complex128).shape == (3, 4, 1)
    with pytest.raises(ValueError):
        a.reshape(5, 5)
    with pytest.raises(IndexError):
        a[3]
    with pytest.raises(IndexError):
        a[::2]
    with pytest.raises(RuntimeError, match="no device"):
        a.get()
    assert repr(a) == "DeviceArray(complex64[3, 4, 2], device='cuda:0')"


@needs_cuda_core
def test_dlpack_capsule_contents():
    from sparsetensor.cuda import _array

    a = DeviceArray(None, 0x7F0000001000, (3, 5), np.int32, None)
    cap = a.__dlpack__(stream=-1)
    pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    address = pointer(cap, b"dltensor")
    assert address in _array._exported
    m = ctypes.cast(address, ctypes.POINTER(_DLManagedTensor)).contents
    t = m.dl_tensor
    assert t.data == 0x7F0000001000 and t.device.device_type == 2 and t.device.device_id == 0
    assert t.ndim == 2 and [t.shape[i] for i in range(2)] == [3, 5] and not t.strides
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 32, 1)
    b = _from_dlpack(cap, None)  # consumes the capsule
    assert (b.ptr, b.shape, b.dtype) == (a.ptr, a.shape, a.dtype)
    del cap
    assert address in _array._exported  # the consumer (b) owns it now
    del b
    assert address not in _array._exported  # the deleter ran
    cap = a.__dlpack__(stream=-1)
    address = pointer(cap, b"dltensor")
    del cap
    assert address not in _array._exported  # an unconsumed capsule frees its tensor


def test_kernel_params_packing():
    address, keep = _driver.kernel_params([0x1234, None, -5, 2**64 - 1, 7, 2.5], "ppqQid")
    arr = (ctypes.c_void_p * 6).from_address(address)
    read = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_double]
    got = [r.from_address(arr[i]).value for i, r in enumerate(read)]
    assert got == [0x1234, 0, -5, 2**64 - 1, 7, 2.5]


def test_launch_checks_argument_count():
    from sparsetensor.cuda._module import launch

    class Fake:
        emulated = True

        def emulate(self, *a):
            raise AssertionError("launched")

    with pytest.raises(TypeError, match="takes 4 arguments"):
        launch(Fake(), "scan.cu", "scan_tiles", (), 1, 256, 1, 2, 3)


def test_import_without_cuda_python():
    code = ("import sys; sys.modules['cuda'] = None; sys.modules['cuda.bindings'] = None\n"
            "import sparsetensor as st, sparsetensor.cuda as stc\n"
            "assert not stc.is_available() and stc.device_count() == 0\n"
            "assert 'cuda-python' in stc.unavailable_reason() or 'cuda' in stc.unavailable_reason()\n"
            "t = st.sparse_csr_tensor([0, 1], [0], [1.0])\n"
            "try:\n    stc.to_device(t)\nexcept ImportError as e:\n    assert 'sparsetensor[cuda]' in str(e)\n"
            "else:\n    raise SystemExit('no ImportError')\n"
            "print('ok')\n")
    assert_python_prints_ok(code)


def test_import_is_lazy():
    code = ("import sys, sparsetensor, sparsetensor.cuda\n"
            "assert not any(m.startswith('cuda') for m in sys.modules), sorted(m for m in sys.modules if 'cuda' in m)\n"
            "print('ok')\n")
    assert_python_prints_ok(code)


def test_emulator_half_conversion():
    if _emulator_problem():
        pytest.skip(_emulator_problem())
    saved = _driver._devices.get(0)
    dev = _emulator.install()
    try:
        bits = np.arange(65536, dtype=np.uint16)
        h = bits.view(np.float16)
        f = DeviceArray.from_host(h, dev).astype(np.float32).get()  # the cast kernels behind DeviceArray.astype
        ok = ~np.isnan(h)
        assert (f[ok] == h[ok].astype(np.float32)).all() and np.isnan(f[~ok]).all()
        rng = np.random.default_rng(0)
        x = np.concatenate([rng.standard_normal(20000).astype(np.float32) * 10.0 ** rng.integers(-9, 6, 20000),
                            np.array([65504, 65519.99, 65520, 1e-8, 2.0**-25, 2.0**-24 * 1.5, np.inf, -0.0],
                                     np.float32)]).astype(np.float32)
        g = DeviceArray.from_host(x, dev).astype(np.float16).get()
        with np.errstate(over="ignore"):
            assert (g.view(np.uint16) == x.astype(np.float16).view(np.uint16)).all()
    finally:
        _emulator.uninstall(dev)
        if saved is not None:
            _driver._devices[0] = saved


# -- stream ordering -----------------------------------------------------------------------------------

class _TorchLikeStream:
    cuda_stream = 0xABC


class _CudaCoreLikeStream:
    def __cuda_stream__(self):
        return (0, 0xDEF)


@pytest.mark.parametrize("stream, handle", [(0x123, 0x123), (_TorchLikeStream(), 0xABC),
                                            (_CudaCoreLikeStream(), 0xDEF)])
def test_stream_order_waits_both_ways(backend, rng, monkeypatch, stream, handle):
    dev = _driver.get_device(0)
    calls = []
    monkeypatch.setattr(dev, "wait_external_stream", lambda h: calls.append(("wait", h)))
    monkeypatch.setattr(dev, "make_external_stream_wait", lambda h: calls.append(("signal", h)))
    c = make(rng, CASES[3])
    x = rng.standard_normal((c.shape[1], 3))
    with cuda.stream_order(stream) as d:
        assert d is dev
        assert calls == [("wait", handle)]
        y = cuda.to_device(c) @ cuda.DeviceArray.from_host(x, d)
    assert calls == [("wait", handle), ("signal", handle)]
    np.testing.assert_allclose(host(y), c.to_dense() @ x, rtol=1e-12)


def test_stream_order_signals_on_error(backend, monkeypatch):
    dev = _driver.get_device(0)
    calls = []
    # 7 is no stream: both crossings are recorded, not made (a real driver would dereference it)
    monkeypatch.setattr(dev, "wait_external_stream", lambda h: calls.append(("wait", h)))
    monkeypatch.setattr(dev, "make_external_stream_wait", lambda h: calls.append(("signal", h)))
    with pytest.raises(RuntimeError, match="boom"):
        with cuda.stream_order(7):
            raise RuntimeError("boom")
    assert calls == [("wait", 7), ("signal", 7)]


def test_stream_order_rejects_non_streams(backend):
    with pytest.raises(TypeError, match="not a CUDA stream"):
        with cuda.stream_order("fast"):
            pass
