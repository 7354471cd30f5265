"""Helpers of the device gradient tests (tests/cuda/test_cuda_autograd*.py): the vjp of an op on CPU
tensors and on their device copies, compared, with no device array copied to the host on the way."""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.autograd import vjp
from sparsetensor.cuda._array import DeviceArray

from cuda_support import make, members

FLOAT = [np.dtype(np.float32), np.dtype(np.float64)]
RTOL = {np.dtype("float16"): 3e-2, np.dtype("float32"): 2e-5, np.dtype("float64"): 1e-11, np.dtype("complex64"): 2e-5,
        np.dtype("complex128"): 1e-11}


@pytest.fixture
def no_host_copies(monkeypatch):
    """Inside ``with no_host_copies():`` converting a DeviceArray to a NumPy array fails."""
    import contextlib

    @contextlib.contextmanager
    def guard():
        def refuse(self, *args, **kwargs):
            raise AssertionError(f"a device array {self!r} was copied to the host during the pullback")

        with monkeypatch.context() as m:
            m.setattr(DeviceArray, "__array__", refuse)
            yield

    return guard


def to_dev(x):
    if isinstance(x, st.SparseTensor):
        return x.cuda()
    if isinstance(x, np.ndarray):
        return DeviceArray.from_host(x)
    return x


def host(x):
    return x.get() if isinstance(x, DeviceArray) else np.asarray(x)


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def cotangent(rng, out, dense=False):
    """A random cotangent of CPU output ``out``: (CPU form, device form); ``dense``: a dense array
    also for a sparse output."""
    if isinstance(out, st.SparseTensor) and not dense:
        v = rand(rng, out.values().shape, out.dtype)
        return out._replace_values(v), v
    g = rand(rng, np.shape(out), out.dtype)
    return g, g


def check(rng, guard, fn, *args, kwargs=None, cpu_fn=None, dense=False):
    """vjp of ``fn`` on CPU ``args`` (of ``cpu_fn``, the same function written for host arrays, when
    given) and on their device copies: the same outputs and cotangents (``dense``: dense ones pulled
    back also for sparse outputs). Returns the device cotangents."""
    kwargs = kwargs or {}
    dargs = [to_dev(a) for a in args]
    out_c, pb_c = vjp(cpu_fn or fn, *args, **kwargs)
    out_d, pb_d = vjp(fn, *dargs, **kwargs)
    many = isinstance(out_c, tuple)
    outs_c, outs_d = (out_c, out_d) if many else ((out_c,), (out_d,))
    gs_c, gs_d = [], []
    for oc, od in zip(outs_c, outs_d):
        gc, gv = cotangent(rng, oc, dense)
        if isinstance(od, st.SparseTensor):
            assert od.is_cuda and od.layout is oc.layout and od.shape == oc.shape
            for x, y in zip(members(od)[:-1], members(oc)[:-1]):
                assert np.array_equal(host(x), y), "the device output's pattern differs from the CPU's"
            gd = DeviceArray.from_host(gv) if dense else od._replace_values(DeviceArray.from_host(gv))
        else:
            assert isinstance(od, DeviceArray) and od.shape == np.shape(oc)
            gd = DeviceArray.from_host(gv).reshape(np.shape(oc))
        gs_c.append(gc)
        gs_d.append(gd)
    cts_c = pb_c(tuple(gs_c) if many else gs_c[0])
    with guard():
        cts_d = pb_d(tuple(gs_d) if many else gs_d[0])
    assert len(cts_d) == len(args)
    for a, da, cc, cd in zip(args, dargs, cts_c, cts_d):
        if cc is None or isinstance(a, list) and not any(isinstance(x, st.SparseTensor) for x in a):
            assert cd is None or all(c is None for c in cd)
            continue
        if isinstance(a, st.SparseTensor):
            assert isinstance(cd, st.SparseTensor) and cd.is_cuda and cd.device == da.device
            assert cd.layout is da.layout and cd.shape == da.shape and cd.dtype == da.dtype
            for x, y in zip(members(cd)[:-1], members(da)[:-1]):
                assert x is y, "the cotangent does not have the argument's own index arrays"
            got, want = host(cd.values()), np.asarray(cc.values())
        else:
            assert isinstance(cd, DeviceArray) and cd.shape == np.shape(a) and cd.dtype == a.dtype
            got, want = host(cd), np.asarray(cc)
        assert got.dtype == want.dtype and got.shape == want.shape
        tol = RTOL[want.dtype]
        scale = max(float(np.abs(want[np.isfinite(want)]).max(initial=0)), 1.0)  # (sqrt'(0) of a block's zero: inf)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)
    return cts_d


def one_pattern(rng, case):
    """A tensor of ``case`` whose batches share one pattern (a narrow or a selection keeps one nnz per batch)."""
    if not case[1]:
        return make(rng, case, np.float64, np.int32)
    one = make(rng, (case[0], (), case[2], case[3]), np.float64).to_dense()
    return st.from_dense(np.stack([one, 2 * one]), case[0], blocksize=case[3], batch_dim=1, dense_dim=len(case[2]),
                         index_dtype=np.int32)
