"""The torch bridge on CUDA devices: ``st.from_torch``/``st.to_torch`` of CUDA tensors,
``sparsetensor.torch``'s differentiable functions and ``sparsetensor.torch.optim`` with CUDA
parameters, against torch's own CPU and CUDA results.

The DLPack stream hand-off (our stream waits for a consumer's before memory it was lent can
be freed) and the refusals of a torch without CUDA run on the emulator too; the rest needs
a torch built with CUDA and a GPU (the ``gpu`` half of the ``backend`` fixture, and
``torch.cuda.is_available()``), as on the device machine of ``ci/gpu_check.sh``.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda import _array

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import CASES, CASE_IDS, make, needs_cuda_core

torch = pytest.importorskip("torch")


@pytest.fixture
def torch_cuda(backend):
    if backend != "gpu" or not torch.cuda.is_available():
        pytest.skip("needs a GPU and a torch built with CUDA")
    return torch.device("cuda:0")


def _pointer(cap) -> int:
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    return get(cap, b"dltensor")


# -- on the emulator and on a GPU ---------------------------------------------------------------

@needs_cuda_core
@pytest.mark.parametrize("stream,waited", [(12345, 12345), (None, 1), (2, 2), (-1, None)])
def test_dlpack_release_waits_for_the_consumer_stream(backend, monkeypatch, stream, waited):
    """Memory lent through DLPack is freed on our stream when the consumer lets go; our stream
    first waits for the consumer's stream (the one it named), which may still have work
    queued that reads it. stream=-1 asks for no synchronisation: nothing is waited for."""
    a = _array.DeviceArray.from_host(np.arange(6.0))
    dev = a._device
    calls = []
    monkeypatch.setattr(dev, "wait_external_stream", lambda h: calls.append(("wait", h)))
    monkeypatch.setattr(dev, "make_external_stream_wait", lambda h: calls.append(("export", h)))
    monkeypatch.setattr(dev, "synchronize", lambda: calls.append(("sync", None)))
    cap = a.__dlpack__(stream=stream)
    address = _pointer(cap)
    assert _array._exported[address][3] == waited
    exported = list(calls)
    del cap  # unconsumed: its destructor runs the deleter, as a consumer's release would
    assert address not in _array._exported
    if waited is None:
        assert calls == exported == []
    else:
        assert exported == ([("export", stream)] if stream not in (None, 1, 2) else [("sync", None)])
        assert calls[len(exported):] == [("wait", waited)]


def test_to_torch_of_a_device_tensor_needs_a_torch_with_cuda(backend, rng):
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    d = make(rng, ("csr", (), (), None)).cuda()
    for call in (lambda: st.to_torch(d), lambda: d.to_torch(), lambda: st.to_torch(d.values())):
        with pytest.raises(NotImplementedError, match="cuda:0.*no CUDA device.*cpu()"):
            call()


# -- a GPU and a torch with CUDA -------------------------------------------------------------------

def _members(x):
    if x.layout == torch.sparse_coo:
        return [x._indices(), x._values()]
    if x.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [x.crow_indices(), x.col_indices(), x.values()]
    return [x.ccol_indices(), x.row_indices(), x.values()]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int64], ids=str)
def test_round_trip_shares_device_memory(torch_cuda, rng, case, dtype):
    t = make(rng, case, dtype=dtype, index_dtype=np.int64)
    x = st.to_torch(t).to(torch_cuda)  # a CUDA torch tensor of torch's own
    d = st.from_torch(x)
    assert d.is_cuda and d.layout == t.layout and d.shape == t.shape
    assert (d.cpu().to_dense() == t.to_dense()).all()
    for ours, theirs in zip([d.indices(), d.values()] if case[0] == "coo" else
                            [d.compressed_indices(), d.plain_indices(), d.values()], _members(x)):
        if theirs.is_contiguous():
            assert ours.ptr == theirs.data_ptr()  # shared, not copied
    y = st.to_torch(d)
    assert y.device == torch_cuda and y.layout == x.layout
    assert torch.equal(y.to_dense().cpu(), x.to_dense().cpu())
    assert all(a.data_ptr() == b.ptr for a, b in zip(_members(y)[-1:], [d.values()]))
    _members(x)[-1].mul_(2)
    torch.cuda.synchronize()  # torch's write is on its stream; our copy to the host on ours
    assert (d.cpu().to_dense() == 2 * t.to_dense()).all()  # one memory


def test_int32_coo_indices_are_copied_on_the_device(torch_cuda, rng):
    d = make(rng, ("coo", (), (), None), index_dtype=np.int32).cuda()
    x = st.to_torch(d)
    assert x.device == torch_cuda and x._indices().dtype == torch.int64
    with pytest.raises(ValueError, match="int32"):
        st.to_torch(d, copy=False)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_autograd_bridge_on_cuda_matches_the_cpu(torch_cuda, rng, layout):
    import sparsetensor.torch as stt

    t = make(rng, (layout, (), (), None), dtype=np.float64)
    A_cpu = st.to_torch(t).detach().requires_grad_()
    A_gpu = A_cpu.detach().to(torch_cuda).requires_grad_()
    X = torch.randn(t.shape[1], 3, dtype=torch.float64)
    X_cpu, X_gpu = X.clone().requires_grad_(), X.to(torch_cuda).requires_grad_()
    y_cpu, y_gpu = stt.matmul(A_cpu, X_cpu), stt.matmul(A_gpu, X_gpu)
    assert y_gpu.device == torch_cuda
    torch.testing.assert_close(y_gpu.cpu(), y_cpu)
    (y_cpu ** 2).sum().backward()
    (y_gpu ** 2).sum().backward()
    torch.testing.assert_close(X_gpu.grad.cpu(), X_cpu.grad)
    assert A_gpu.grad.device == torch_cuda and A_gpu.grad.layout == A_cpu.grad.layout
    torch.testing.assert_close(A_gpu.grad.to_dense().cpu(), A_cpu.grad.to_dense())


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9)), ("SparseAdam", dict(lr=1e-2)),
                                     ("Adagrad", dict(lr=0.1, lr_decay=0.01))], ids=["SGD", "SparseAdam", "Adagrad"])
def test_optimizers_on_cuda_match_torch(torch_cuda, name, kw):
    import sparsetensor.torch.optim as sto

    torch.manual_seed(0)
    ref = torch.nn.Embedding(50, 8, sparse=True).double().to(torch_cuda)
    ours = torch.nn.Embedding(50, 8, sparse=True).double().to(torch_cuda)
    with torch.no_grad():
        ours.weight.copy_(ref.weight)
    opts = (getattr(torch.optim, name)(ref.parameters(), **kw), getattr(sto, name)(ours.parameters(), **kw))
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        ids = torch.randint(0, 25, (16,), generator=g).to(torch_cuda)
        ids[-1] = ids[0]
        for opt, emb in zip(opts, (ref, ours)):
            opt.zero_grad()
            (emb(ids) ** 2).sum().backward()
            opt.step()
    torch.testing.assert_close(ours.weight, ref.weight, rtol=1e-12, atol=1e-12)
    for k, v in opts[0].state[ref.weight].items():
        w = opts[1].state[ours.weight][k]
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            assert w.device == v.device
            torch.testing.assert_close(w.to_dense() if w.is_sparse else w, v.to_dense() if v.is_sparse else v,
                                       rtol=1e-12, atol=1e-12)


def test_embedding_bridge_on_cuda_matches_torch(torch_cuda):
    """``stt.embedding`` / ``embedding_bag`` with a CUDA weight and CUDA indices and offsets: the
    outputs and the sparse weight gradients of torch's own functional forms (``sparse=True``)."""
    import sparsetensor.torch as stt

    F = torch.nn.functional
    torch.manual_seed(0)
    W = torch.randn(20, 4, dtype=torch.float64, device=torch_cuda)
    idx = torch.tensor([3, 0, 3, 19, 7, 7], device=torch_cuda)
    off = torch.tensor([0, 2, 2, 5], device=torch_cuda)
    cases = [(lambda w: stt.embedding(w, idx), lambda w: F.embedding(idx, w, sparse=True))]
    for mode in ("sum", "mean"):
        cases.append((lambda w, m=mode: stt.embedding_bag(w, idx, off, mode=m),
                      lambda w, m=mode: F.embedding_bag(idx, w, off, mode=m, sparse=True)))
    for ours, theirs in cases:
        a, b = W.clone().requires_grad_(), W.clone().requires_grad_()
        ya, yb = ours(a), theirs(b)
        assert ya.device == torch_cuda
        torch.testing.assert_close(ya, yb)
        (ya ** 3).sum().backward()
        (yb ** 3).sum().backward()
        assert a.grad.is_sparse and a.grad.device == torch_cuda
        torch.testing.assert_close(a.grad.to_dense(), b.grad.to_dense())
