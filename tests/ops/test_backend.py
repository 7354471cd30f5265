"""The backend seam: one set of kernel names on both devices, picked by the operands' device.

The CPU backend is exercised by every op test (the ops call it); here: both backends have the
same names with the same parameters, ``backend_for`` picks by device and refuses a mix, and
on the kernel emulator each CUDA kernel agrees with the CPU one on the same resolved input.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._backend import KERNELS, backend_for, cpu, device_of
from sparsetensor.ops.dense import check_from_dense
from sparsetensor.ops.blas import product_shape

from cuda_support import CASES, CASE_IDS, assert_same, assert_values, backend, make  # noqa: F401 - fixture

cuda_backend = pytest.importorskip("sparsetensor._backend.cuda")


class _OnDevice:
    """Anything that says it lives on a CUDA device (no device needed to pick a backend)."""

    device = "cuda:0"


@pytest.mark.parametrize("name", KERNELS)
def test_same_kernel_names_and_parameters(name):
    c, g = getattr(cpu, name), getattr(cuda_backend, name)
    assert list(inspect.signature(c).parameters) == list(inspect.signature(g).parameters), name
    assert c.__doc__ and g.__doc__
    assert set(KERNELS) <= set(cpu.__all__) and set(KERNELS) <= set(cuda_backend.__all__)


def test_backend_for_picks_by_device():
    t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0])
    assert backend_for(t) is cpu and backend_for(t, np.ones(2)) is cpu and backend_for(t, 2.5, [1, 2]) is cpu
    assert backend_for() is cpu and backend_for(3) is cpu
    assert device_of(t) == "cpu" and device_of(np.ones(1)) == "cpu" and device_of(1.0) is None
    assert device_of(_OnDevice()) == "cuda:0"


def test_backend_for_refuses_a_device_mix():
    t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0])
    with pytest.raises(ValueError, match="operands on different devices: cpu and cuda:0"):
        backend_for(t, _OnDevice())
    with pytest.raises(ValueError, match="cuda:0 and cpu"):
        backend_for(_OnDevice(), np.ones(2))


def test_device_arrays_name_a_mix(backend, rng):
    t = make(rng, ("csr", (), (), None), np.float64)
    d = t.cuda()
    with pytest.raises(ValueError, match="cpu and cuda:0"):
        backend_for(t, d.values())
    with pytest.raises(ValueError, match="cuda:0 and cpu"):
        backend_for(d, t)


def test_device_backend_is_the_cuda_one(backend, rng):
    d = make(rng, ("coo", (), (), None)).cuda()
    assert backend_for(d) is cuda_backend and backend_for(d, d.values(), 2.0) is cuda_backend


# -- each CUDA kernel against the CPU kernel, on one resolved input ----------------------------------

@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_kernels_agree(backend, rng, case):
    t = make(rng, case, np.float64)
    d = t.cuda()
    g = backend_for(d)
    assert_values(g.to_dense(d).get(), cpu.to_dense(t), exact=True)
    assert_values(np.asarray(g.reduce_sum(d).get()), cpu.reduce_sum(t))
    assert_values(g.unary(d, "abs", np.abs).get(), np.ascontiguousarray(cpu.unary(t, "abs", np.abs)), exact=False)
    g.validate(d)
    cpu.validate(t)
    assert_same(g.coalesce(d), cpu.coalesce(t))
    if case[0] != "coo":
        assert_same(g.transpose(d), cpu.transpose(t))
        assert_same(g.merge(d, d, t.dtype, "add", 2), cpu.merge(t, t, t.dtype, "add", 2), exact=False)
        assert_same(g.merge(d, d, t.dtype, "mul"), cpu.merge(t, t, t.dtype, "mul"), exact=False)
    if case[0] in ("coo", "csr") and not case[2] and len(case[1]) <= 1:
        target = st.sparse_csr if case[0] == "coo" else st.sparse_coo
        assert_same(g.convert(d, target, (1, 1)), cpu.convert(t, target, (1, 1)))


@pytest.mark.parametrize("layout,bs", [("csr", None), ("csc", None), ("bsr", (2, 3)), ("bsc", (2, 3))])
def test_spmm_and_from_dense_agree(backend, rng, layout, bs):
    t = make(rng, (layout, (), (), bs), np.float64, np.int32, blocks=(3, 2))
    d = t.cuda()
    x = rng.standard_normal((t.shape[1], 7))
    dx = st.cuda.DeviceArray.from_host(x)
    plan = product_shape(t, x, "matmul", (t, x))
    assert_values(backend_for(d, dx).spmm(d, dx, plan, t.dtype).get(), cpu.spmm(t, x, plan, t.dtype))
    dense = t.to_dense()
    plan = check_from_dense(dense.shape, dense.dtype, layout, bs, 0, 0, np.int32)
    assert_same(backend_for(dx).from_dense(st.cuda.DeviceArray.from_host(dense), plan), cpu.from_dense(dense, plan))


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "coo"], ids=[i for c, i in zip(CASES, CASE_IDS)
                                                                        if c[0] != "coo"])
def test_scalar_sum_dims_and_sddmm_agree(backend, rng, case):
    """The kernels that scalar ops, sum(dim) and sampled_addmm reach through the ops (issue #10)."""
    t = make(rng, case, np.float64)
    d = t.cuda()
    g = backend_for(d)
    for name, fn, arg in (("mul", np.multiply, -2.5), ("div", np.true_divide, 4.0), ("pow", np.power, 2),
                          ("round", np.round, 0)):
        assert_values(g.unary(d, name, fn, None, arg).get(), np.ascontiguousarray(cpu.unary(t, name, fn, None, arg)))
    m = t.batch_dim
    for dim in (m, m + 1):
        assert_values(g.reduce_sum_dims(d, (dim,)).get(), cpu.reduce_sum_dims(t, (dim,)))
    assert_values(g.unary(d, "round", np.round, None, 2).get(), np.round(np.ascontiguousarray(t.values()), 2))
    if case[0] == "csr" and not case[2]:
        batch, (M, N) = t.shape[:m], t.shape[m:m + 2]
        m1, m2 = rng.standard_normal(batch + (M, 3)), rng.standard_normal((3, N))
        want = cpu.sddmm(t, m1, m2, batch, 0.5, 2.0)
        got = g.sddmm(d, st.cuda.DeviceArray.from_host(m1), st.cuda.DeviceArray.from_host(m2), batch, 0.5, 2.0)
        assert_same(got, want, exact=False)


def test_missing_kernels_name_op_and_device(backend, rng):
    from sparsetensor._core._dtypes import raw_view

    t = make(rng, ("csr", (), (), None), np.float64)
    d = t.cuda()
    assert_same(backend_for(d).spgemm(d, d.mT), cpu.spgemm(t, t.mT), exact=False)  # sparse @ sparse has one
    c, dc = t.to_sparse("coo"), d.to_sparse("coo")  # index_select of coo has one (the CPU's entry order)
    got = backend_for(d).index_select_coo(dc.indices(), dc.values().reshape(dc.nnz, 1), 0, np.array([1, 0, 1]),
                                          d.shape)
    want = cpu.index_select_coo(c.indices(), raw_view(c.values().reshape(c.nnz, 1)), 0, np.array([1, 0, 1]), t.shape)
    assert (got[0].get() == want[0]).all() and (got[1].get() == want[1].view(np.float64)).all()
    got = backend_for(d).reduce_dims(d.to_sparse_coo(), (0,), np.maximum)  # any dims have one
    assert_same(got, cpu.reduce_dims(t.to_sparse_coo(), (0,), np.maximum))
    # a result dtype other than the operands': converted on the device first
    got = backend_for(d).merge(d, d, np.dtype(np.complex128), "add")
    assert got.dtype == np.complex128 and got.device == "cuda:0"
    assert_values(got.to_dense().get(), 2 * t.to_dense().astype(np.complex128))


def test_shared_op_code_on_device_tensors(backend, rng):
    """to_dense, to_sparse and from_dense of a device tensor run the CPU's op code (its argument
    checks and errors), then the CUDA backend's kernel; nothing goes through the host."""
    t = make(rng, ("csr", (2,), (), None), np.float64)
    d = t.cuda()
    dense = st.cuda.DeviceArray.from_host(t.to_dense())
    got = st.from_dense(dense, "csr", batch_dim=1)
    assert got.device == "cuda:0"
    assert_same(got, t)
    assert_values(d.to_dense().get(), t.to_dense(), exact=True)
    assert_same(d.to_sparse("csc"), t.to_sparse("csc"))
    for call in (lambda x: x.to_sparse("bsr"), lambda x: x.to_sparse("csc", dense_dim=1),
                 lambda x: x.to_sparse("csr", blocksize=(1, 1))):
        with pytest.raises(ValueError) as cpu_err:
            call(t)
        with pytest.raises(ValueError) as gpu_err:
            call(d)
        assert str(gpu_err.value) == str(cpu_err.value)
    with pytest.raises(ValueError, match="same nnz"):
        a = np.zeros((2, 3, 3))
        a[0, 0, 0] = 1.0
        st.from_dense(st.cuda.DeviceArray.from_host(a), "csr", batch_dim=1)


@pytest.mark.parametrize("layout,bs", [("csr", None), ("csc", None), ("bsr", (2, 3)), ("coo", None)])
def test_device_products_run_the_op_code(backend, rng, layout, bs):
    """``d @ x``, ``d.mm``, ``d.mv`` and ``st.matmul(d, x)`` of a device tensor run
    sparsetensor.ops.blas (its shape rules, broadcasting and errors), then the CUDA ``spmm``."""
    t = make(rng, (layout, (), (), bs), np.float64, np.int32, blocks=(3, 2))
    d = t.cuda()
    K = t.shape[1]
    x, v = rng.standard_normal((K, 5)), rng.standard_normal(K)
    dx, dv = st.cuda.DeviceArray.from_host(x), st.cuda.DeviceArray.from_host(v)
    want = t.to_dense() @ x
    for got in (d @ dx, d.mm(dx), d.matmul(dx), st.matmul(d, dx), st.mm(d, dx)):
        assert got.shape == want.shape
        assert_values(got.get(), want)
    assert_values(d.mv(dv).get(), t.to_dense() @ v)
    xx = np.stack([x, 2 * x])  # the sparse operand broadcast over a batch of dense ones, as on the CPU
    assert_values(st.matmul(d, st.cuda.DeviceArray.from_host(xx)).get(), st.matmul(t, xx))
    bad = np.zeros((K + 1, 2))
    with pytest.raises(ValueError) as cpu_err:
        t @ bad
    with pytest.raises(ValueError) as gpu_err:
        d @ st.cuda.DeviceArray.from_host(bad)
    assert "on cuda:0 by a dense array" in str(gpu_err.value)
    assert str(gpu_err.value).replace(" on cuda:0", "") == str(cpu_err.value)  # the CPU's words


def test_device_product_errors(backend, rng):
    t = make(rng, ("csr", (), (), None), np.float32)
    d = t.cuda()
    x = np.ones((t.shape[1], 2), np.float32)
    with pytest.raises(ValueError, match="operands on different devices: cuda:0 and cpu"):
        d @ x
    with pytest.raises(ValueError, match="operands on different devices: cpu and cuda:0"):
        t @ st.cuda.DeviceArray.from_host(x)
    y = d @ st.cuda.DeviceArray.from_host(x.astype(np.float64))  # float32 @ float64: cast on the device
    assert y.dtype == np.float64 and np.allclose(y.get(), t @ x.astype(np.float64))
    assert_same(d @ d.mT, t @ t.mT, exact=False)  # sparse @ sparse: the device SpGEMM
    z = st.matmul(st.cuda.DeviceArray.from_host(np.ones((2, t.shape[0]), np.float32)), d)  # dense @ sparse
    assert np.allclose(z.get(), np.ones((2, t.shape[0]), np.float32) @ t)
    c3 = make(rng, ("coo", (3,), (), None), np.float32)  # leading sparse dims: one block-diagonal matrix
    assert np.allclose((c3.cuda() @ st.cuda.DeviceArray.from_host(x)).get(), c3 @ x)


@pytest.mark.parametrize("case", [c for c in CASES if not c[1] or c[0] == "coo"], ids=str)
def test_device_add_sub_run_the_op_code(backend, rng, case):
    """``d + d``, ``d - d``, ``d.add(e, alpha=)`` and ``st.add`` of device tensors run sparsetensor.ops.binary
    (alpha rules, layout conversion of the second operand: the CPU's semantics), then the CUDA merge."""
    t, u = make(rng, case, np.float64), make(rng, case, np.float64)
    d, e = t.cuda(), u.cuda()
    for got, want in ((d + e, t + u), (d - e, t - u), (d.add(e, alpha=3), t.add(u, alpha=3)),
                      (st.sub(d, e, alpha=2), st.sub(t, u, alpha=2))):
        assert got.device == "cuda:0"
        assert_same(got, want, exact=False)
    with pytest.raises(TypeError, match="alpha must not be a complex number"):
        d.add(e, alpha=1j)
    if case[0] == "csr":  # csr + csc: the second operand converted on the device, as on the CPU
        assert_same(d + u.to_sparse("csc").cuda(), t + u.to_sparse("csc"), exact=False)


def test_device_add_errors(backend, rng):
    t = make(rng, ("csr", (), (), None), np.float32)
    d = t.cuda()
    with pytest.raises(ValueError, match="operands on different devices: cuda:0 and cpu"):
        d + t
    with pytest.raises(ValueError, match="operands on different devices: cpu and cuda:0"):
        st.add(t, d)
    with pytest.raises(NotImplementedError, match="adding a nonzero scalar"):
        d + 1.0
    z = 0 - d + 0.0  # a scalar 0: the tensor (negated for 0 - d), on its device
    assert z.is_cuda and np.array_equal(z.to_dense().get(), -t.to_dense())
    for s in (np.float32(0), np.array(0.0), np.int8(0)):  # NumPy scalars first: the operators' rule too
        assert np.array_equal((s + d).to_dense().get(), (s + t).to_dense())
        assert np.array_equal((s - d).to_dense().get(), (s - t).to_dense())
    with pytest.raises(NotImplementedError, match="nonzero scalar"):
        np.float32(1) + d
    with pytest.raises(NotImplementedError, match="a dense device array has a GPU kernel only with a sparse"):
        st.add(st.cuda.DeviceArray.from_host(np.ones(t.shape, np.float32)), d.to_dense())
    u = make(rng, ("csr", (), (), None), np.float64)
    s = d + u.cuda()  # float32 + float64: cast on the device
    assert s.dtype == np.float64 and np.allclose(s.to_dense().get(), (t + u).to_dense())
    with pytest.raises(ValueError, match="same shape"):
        d + make(rng, ("csr", (), (), None), np.float32, blocks=(3, 3)).cuda()
