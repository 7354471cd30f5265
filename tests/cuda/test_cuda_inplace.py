"""In-place arithmetic, pointwise and transpose ops (``add_``, ``mul_``, ``*=``, ``sqrt_``, ``t_``,
...) on CUDA tensors (issue #37): the device tensor takes the result in its own layout, blocksize
and dtypes as the CPU tensor does, with new device arrays (the old ones are not written), and
nothing reaches the host but a few counts. Also permute, unsqueeze and squeeze, and their
gradients, against the CPU's. Runs on a GPU or on the kernel emulator (see test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda import _primitives
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import INDEX, host, make, members
from test_cuda_more_ops import SHAPED, SHAPED_IDS, close
from test_cuda_select import without_host_copies


def steps(t, other, row):
    """(name, args, kwargs) of in-place calls on ``t`` (``other`` a tensor of its shape and dims,
    ``row`` a dense array that broadcasts along its last dim)."""
    out = [("mul_", (2,), {}), ("add_", (other,), {"alpha": 2}), ("sub_", (other,), {}), ("mul_", (other,), {}),
           ("mul_", (row,), {}), ("div_", (4,), {}), ("abs_", (), {}), ("sqrt_", (), {}), ("neg_", (), {}),
           ("pow_", (2,), {}), ("__imul__", (3,), {}), ("__iadd__", (other,), {}), ("__itruediv__", (2,), {})]
    if t.ndim == 2:
        out.append(("t_", (), {}))
    return out


@pytest.mark.parametrize("case", SHAPED, ids=SHAPED_IDS)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
def test_in_place(backend, rng, monkeypatch, case, index_dtype):
    t = make(rng, case, np.float32, index_dtype)
    other = t * 3 if case[1] and case[0] != "coo" else make(rng, case, np.float32, index_dtype)
    row = rng.standard_normal(t.shape[-1]).astype(np.float32)
    d, dother, drow = t.cuda(), other.cuda(), DeviceArray.from_host(row)
    for name, args, kwargs in steps(t, other, row):
        old = [host(a).copy() for a in members(d)]
        kept = members(d)
        got = getattr(d, name)(*[dother if a is other else drow if a is row else a for a in args], **kwargs)
        want = getattr(t, name)(*args, **kwargs)
        assert got is d and want is t, name
        close(d, t)
        assert d.blocksize == t.blocksize and d.dtype == np.float32 and d.index_dtype == index_dtype
        for a, copy in zip(kept, old):  # the arrays it held before are not written
            assert (host(a) == copy).all()
    d.check_invariants()


def test_no_host_copies(backend, rng, monkeypatch):
    t = make(rng, ("csr", (), (), None), np.float64, np.int32)
    d = t.cuda()
    o = make(rng, ("coo", (), (), None), np.float64, np.int32).cuda()

    def run():
        d.mul_(2).abs_().sqrt_()
        d.add_(o)
        d.t_()
        return d

    (got,) = without_host_copies(monkeypatch, 64, [run])
    want = t.mul_(2).abs_().sqrt_().add_(o.cpu()).t_()
    close(got, want)


def test_errors(backend, rng):
    i = make(rng, ("csr", (), (), None), np.int64, np.int64).cuda()
    before = [host(a).copy() for a in members(i)]
    with pytest.raises(TypeError, match="float64 cannot be cast to t's dtype int64"):
        i.mul_(2.5)
    with pytest.raises(TypeError, match="dense"):
        i.add_(DeviceArray.from_host(np.ones(i.shape, np.int64)))
    for a, b in zip(members(i), before):
        assert (host(a) == b).all()
    with pytest.raises(ValueError, match="host and a device|device"):
        i.add_(i.cpu())
    assert st.from_dense(np.ones(3), "coo").cuda().t_().shape == (3,)


@pytest.mark.parametrize("case", SHAPED, ids=SHAPED_IDS)
def test_dims(backend, rng, case):
    t = make(rng, case, np.float64, np.int32)
    d = t.cuda()
    n, m = t.ndim, t.batch_dim
    coo = case[0] == "coo"
    order = [tuple(range(t.sparse_dim))[::-1] + tuple(range(t.sparse_dim, n))] if coo else \
        [tuple(range(m))[::-1] + (m + 1, m) + tuple(range(m + 2, n))]
    for o in order:
        close(d.permute(o), t.permute(o))
    for k in range(n + 1):
        if not coo and k == m + 1:
            continue
        u, du = t.unsqueeze(k), d.unsqueeze(k)
        close(du, u)
        close(du.squeeze(k), u.squeeze(k))
        close(du.squeeze(), u.squeeze())

    def f(x):
        y = x.unsqueeze(0).permute(*range(x.ndim + 1))
        return st.sum(y.squeeze(0) * y.squeeze(0))

    _, pb = st.autograd.vjp(f, t)
    _, dpb = st.autograd.vjp(f, d)
    close(dpb(1.0)[0], pb(1.0)[0])


def _reshapes(t) -> list:
    """Shapes of ``t``'s size: its leading two dims merged or its first dim split, flat, and F order."""
    s = t.shape
    out = [(s[0] * s[1],) + s[2:], (1,) + s, (-1,)]
    if s[0] % 2 == 0:
        out.append((2, s[0] // 2) + s[1:])
    return out


@pytest.mark.parametrize("case", SHAPED, ids=SHAPED_IDS)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
def test_reshape(backend, rng, monkeypatch, case, index_dtype):
    t = make(rng, case, np.float32, index_dtype)
    d = t.cuda()
    wants, calls = [], []
    for shape in _reshapes(t):
        for order in ("C", "F"):
            try:
                wants.append(t.reshape(shape, order=order))
            except (NotImplementedError, ValueError) as e:
                with pytest.raises(type(e)):
                    d.reshape(shape, order=order)
                continue
            calls.append(lambda shape=shape, order=order: d.reshape(shape, order=order))
    def refuse(self, *args, **kwargs):
        raise AssertionError("reshape copied a DeviceArray to the host")

    get = DeviceArray.get
    with monkeypatch.context() as m:  # a few counts (read_ints) may be read, no array
        m.setattr(_primitives, "read_ints", lambda dev, arr: get(arr) if arr.size <= 64 else refuse(arr))
        m.setattr(DeviceArray, "get", refuse)
        m.setattr(DeviceArray, "__array__", refuse)
        gots = [call() for call in calls]
    for got, want in zip(gots, wants):
        close(got, want)
    assert wants
    if case[0] == "coo" or t.batch_dim:  # else the flat matrix would have one sparse dim
        close(d.flatten(0, 1), t.flatten(0, 1))

    w = rng.standard_normal(t.shape[0] * t.shape[1]).astype(np.float32)

    def f(w):
        return lambda x: st.sum(x.flatten(0, 1).transpose(0, -1) * w) if x.ndim == 3 else st.sum(
            x.reshape(-1, 1) * w)

    if t.ndim == 3 and t.dense_dim == 0 or t.ndim == 2 and case[0] == "coo":
        _, pb = st.autograd.vjp(f(w), t)
        _, dpb = st.autograd.vjp(f(DeviceArray.from_host(w)), d)
        close(dpb(1.0)[0], pb(1.0)[0])
