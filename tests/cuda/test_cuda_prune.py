"""tril, triu, their in-place forms and eliminate_zeros, and the block constructions (kron,
block_diag, hstack, vstack) on CUDA tensors (issue #37): the CPU's results (layout, flags, indices exactly, values) with nothing copied to the host but counts, and
the gradients of tril/triu against the CPU's. Runs on a GPU or on the kernel emulator (see
test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda import _primitives
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import INDEX, make
from test_cuda_more_ops import SHAPED, SHAPED_IDS, close


def _on_device_only(monkeypatch, calls):
    """The results of ``calls``, run where only small counts (read_ints) reach the host."""
    get = DeviceArray.get

    def refuse(self, *args, **kwargs):
        raise AssertionError("a device path copied a DeviceArray to the host")

    with monkeypatch.context() as m:
        m.setattr(_primitives, "read_ints", lambda dev, arr: get(arr) if arr.size <= 64 else refuse(arr))
        m.setattr(DeviceArray, "get", refuse)
        m.setattr(DeviceArray, "__array__", refuse)
        return [call() for call in calls]


@pytest.mark.parametrize("case", SHAPED, ids=SHAPED_IDS)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
def test_tril_triu(backend, rng, monkeypatch, case, index_dtype):
    t = make(rng, case, np.float32, index_dtype)
    if t.sparse_dim < 2 and case[0] == "coo":
        t = t.unsqueeze(0)
    d = t.cuda()
    wants, calls = [], []
    for k in (-2, 0, 1):
        for name in ("tril", "triu"):
            try:
                wants.append(getattr(t, name)(k))
            except ValueError as e:  # batches of different nnz
                with pytest.raises(ValueError, match="same nnz"):
                    getattr(d, name)(k)
                assert "same nnz" in str(e)
                continue
            calls.append(lambda name=name, k=k: getattr(d, name)(k))
    for got, want in zip(_on_device_only(monkeypatch, calls), wants):
        close(got, want)
    mask = (rng.random(t.shape) < 0.5).astype(np.float32)
    e, de = t * mask, d * DeviceArray.from_host(mask)
    try:
        want = e.eliminate_zeros()
    except ValueError as err:  # a batched tensor whose batches would differ in nnz
        with pytest.raises(ValueError, match="same nnz"):
            de.eliminate_zeros()
        assert t.batch_dim and "same nnz" in str(err)
        return
    (got,) = _on_device_only(monkeypatch, [de.eliminate_zeros])
    assert got is de
    close(de, want)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.complex128, np.int8, np.bool_])
def test_eliminate_zeros_dtypes(backend, rng, dtype):
    a = np.array([[1, 0, 2], [0, 3, 0]]).astype(dtype)
    t = st.from_dense(a, "csr") * np.array([1, 0, 1]).astype(dtype)
    d = t.cuda()
    close(d.eliminate_zeros(), t.eliminate_zeros())
    if np.dtype(dtype).kind == "f":
        v = st.sparse_coo_tensor(np.array([[0, 1, 2]]), np.array([-0.0, np.nan, 0.0], dtype), (3,))
        close(v.cuda().eliminate_zeros(), v.eliminate_zeros())


def test_gradients(backend, rng):
    for case in [("coo", (), (2,), None), ("csr", (), (), None), ("bsr", (), (), (2, 1))]:
        t = make(rng, case, np.float64, np.int64)
        w = rng.standard_normal(t.shape)

        def f(w):
            return lambda x: st.sum(st.tril(x, 1).sin() * w + x.triu() ** 2)

        _, pb = st.autograd.vjp(f(w), t)
        _, dpb = st.autograd.vjp(f(DeviceArray.from_host(w)), t.cuda())
        close(dpb(1.0)[0], pb(1.0)[0])
        if t.ndim == 2:  # the block constructions' rules
            for g in (lambda x: st.sum(st.block_diag(x, st.vstack([x, x])).sin()),
                      lambda x: st.sum(st.hstack([x, x * 2.0]) ** 2)):
                _, pb = st.autograd.vjp(g, t)
                _, dpb = st.autograd.vjp(g, t.cuda())
                close(dpb(1.0)[0], pb(1.0)[0])


@pytest.mark.parametrize("case", [c for c in SHAPED if not c[2]], ids=[i for c, i in zip(SHAPED, SHAPED_IDS) if not c[2]])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int64, np.bool_])
def test_blocks(backend, rng, monkeypatch, case, dtype):
    t = make(rng, case, np.float64, np.int32).astype(dtype)
    m = make(rng, ("csr", (), (), None), np.float64, np.int32).astype(dtype)
    d, dm = t.cuda(), m.cuda()
    calls = [lambda: st.kron(d, dm), lambda: st.kron(dm, d)]
    wants = [st.kron(t, m), st.kron(m, t)]
    if t.ndim == 2:
        calls += [lambda: st.block_diag(d, dm, d), lambda: st.hstack([d, d]), lambda: st.vstack([d, d])]
        wants += [st.block_diag(t, m, t), st.hstack([t, t]), st.vstack([t, t])]
    for got, want in zip(_on_device_only(monkeypatch, calls), wants):
        close(got, want)


@pytest.mark.parametrize("shapes", [((5, 4), (3, 6)), ((7,), (4,)), ((6,), (3, 5)), ((4, 1), (1, 9)), ((3, 3), (0, 4))])
def test_kron_writes_sorted_pairs(backend, rng, shapes):
    """kron of two coalesced operands writes its pairs in sorted order on the device, as the CPU
    does (a coalesced result, no sort after): the same indices, exactly."""
    from sparsetensor.cuda._module import profile

    a, b = (st.from_dense(((rng.random(s) < 0.5) * rng.integers(1, 9, s)).astype(np.float32), "coo",
                          index_dtype=i) for s, i in zip(shapes, (np.int32, np.int64)))
    with profile() as kernels:
        got = st.kron(a.cuda(), b.cuda())
    want = st.kron(a, b)
    assert want.is_coalesced() and got.is_coalesced()
    assert not [k for k in kernels if k.startswith("radix")], sorted(kernels)
    close(got, want)


def test_diagonals_beyond_int64(backend):
    t = st.from_dense(np.ones((3, 3), np.float32), "bsr", blocksize=(1, 3))
    d = t.cuda()
    for k in (2**63, -2**63 - 1, 2**70, -2**70, np.uint64(2**64 - 1), 1, -1):
        close(d.tril(k), t.tril(k))
        close(d.triu(k), t.triu(k))


def test_kron_operands(backend):
    a = st.from_dense(np.array([[1.0, 2.0], [0.0, 3.0]], np.float32), "coo", index_dtype=np.int32)
    b = st.from_dense(np.array([[0.0, 1.0], [4.0, 0.0]], np.float32), "csr", index_dtype=np.int64)
    for x, y in ((a, b), (b, a)):  # mixed index dtypes
        close(st.kron(x.cuda(), y.cuda()), st.kron(x, y))
    e = np.eye(2, dtype=np.float32)
    close(st.kron(a.cuda(), DeviceArray.from_host(e)), st.kron(a, e))  # an array on the tensor's device
    with pytest.raises(ValueError, match="different devices"):
        st.kron(a.cuda(), e)
