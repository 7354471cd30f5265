"""sparsetensor.optim (the NumPy front end) against torch.optim and a NumPy reference.

Every gradient stream has duplicate rows in every nonempty step and some empty (nnz = 0)
steps. Float32 results are compared at 1e-6 and float64 at 1e-12, relative to the largest
parameter entry. Torch's sparse SGD momentum buffer is an uncoalesced sum of every past
gradient entry, each decayed separately, so in float32 it is itself ~1e-6 off the exact
result (ours, coalesced, is ~2e-7 off): that case is compared with torch's float64 run.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from conftest import HAVE_TORCH, requires_torch

if HAVE_TORCH:
    import torch

STEPS = 100
RTOL = {np.float32: 1e-6, np.float64: 1e-12}

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True)),
    ("SGD", dict(lr=0.05, momentum=0.5, maximize=True)),
    ("SparseAdam", dict(lr=1e-2)),
    ("SparseAdam", dict(lr=3e-2, betas=(0.8, 0.99), eps=1e-6)),
    ("SparseAdam", dict(lr=1e-2, maximize=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1, eps=1e-6)),
    ("Adagrad", dict(lr=0.1, maximize=True)),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for n, kw in CONFIGS]
SHAPES = [(40, 8), (30, 3, 2), (25,)]


def grad_stream(seed, shape, dtype, steps=STEPS, sparse_dim=1):
    """(indices (S, nnz) int64, values) per step: duplicates in every nonempty step, every 7th empty."""
    rng = np.random.default_rng(seed)
    sparse_shape = shape[:sparse_dim]
    out = []
    for s in range(steps):
        nnz = 0 if s % 7 == 3 else int(rng.integers(2, 30))
        idx = np.stack([rng.integers(0, max(1, n // 2 if d == 0 else n), nnz) for d, n in enumerate(sparse_shape)])
        if nnz:
            idx[:, -1] = idx[:, 0]  # a duplicate
        vals = rng.standard_normal((nnz,) + shape[sparse_dim:]).astype(dtype)
        out.append((idx.astype(np.int64).reshape(sparse_dim, nnz), vals))
    return out


def start_param(seed, shape, dtype):
    return np.random.default_rng(seed + 1).standard_normal(shape).astype(dtype)


def run_ours(name, kw, W0, stream, index_dtype=np.int64):
    W = W0.copy()
    opt = getattr(st.optim, name)([W], **kw)
    for idx, vals in stream:
        opt.step([st.sparse_coo_tensor(idx.astype(index_dtype), vals, size=W.shape)])
    return W, opt


def run_torch(name, kw, W0, stream):
    p = torch.nn.Parameter(torch.from_numpy(W0.copy()))
    opt = getattr(torch.optim, name)([p], **kw)
    for idx, vals in stream:
        p.grad = torch.sparse_coo_tensor(torch.from_numpy(idx), torch.from_numpy(vals), W0.shape, check_invariants=True)
        opt.step()
    return p.detach().numpy()


def assert_close(got, ref, rtol):
    scale = max(float(np.abs(ref).max()), 1e-30)
    err = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max()) / scale
    assert err <= rtol, f"max error {err:.3g} (relative to max |ref| = {scale:.3g}) > {rtol}"


def reference(name, kw, W0, stream):
    """A NumPy transcription of torch.optim's sparse updates, on dense arrays (float64)."""
    W = W0.astype(np.float64)
    kw = dict(kw)
    state = {"step": 0, "buf": None, "m": np.zeros_like(W), "v": np.zeros_like(W),
             "sum": np.full_like(W, kw.get("initial_accumulator_value", 0.0))}
    for idx, vals in stream:
        g = np.zeros_like(W)
        np.add.at(g, tuple(idx), vals.astype(np.float64))
        if kw.get("maximize"):
            g = -g
        touched = np.zeros(W.shape[:idx.shape[0]], bool)
        touched[tuple(idx)] = True
        state["step"] += 1
        if name == "SGD":
            mom, lr = kw.get("momentum", 0), kw["lr"]
            if mom:
                buf = g.copy() if state["buf"] is None else mom * state["buf"] + (1 - kw.get("dampening", 0)) * g
                state["buf"] = buf
                g = g + mom * buf if kw.get("nesterov") else buf
            W -= lr * g
        elif name == "Adagrad":
            clr = kw["lr"] / (1 + (state["step"] - 1) * kw.get("lr_decay", 0))
            state["sum"] += g * g
            W -= clr * g / (np.sqrt(state["sum"]) + kw.get("eps", 1e-10))
        elif idx.shape[1]:
            b1, b2 = kw.get("betas", (0.9, 0.999))
            t = state["step"]
            m, v = state["m"], state["v"]
            m[touched] += (g[touched] - m[touched]) * (1 - b1)
            v[touched] += (g[touched] ** 2 - v[touched]) * (1 - b2)
            step_size = kw["lr"] * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            W[touched] -= step_size * m[touched] / (np.sqrt(v[touched]) + kw.get("eps", 1e-8))
    return W


@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_numpy_reference(name, kw, shape):
    stream = grad_stream(1, shape, np.float64)
    W0 = start_param(1, shape, np.float64)
    W, _ = run_ours(name, kw, W0, stream, np.int32)
    assert_close(W, reference(name, kw, W0, stream), 1e-10)


@requires_torch
@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_torch(name, kw, dtype, index_dtype, shape):
    stream = grad_stream(2, shape, dtype)
    W0 = start_param(2, shape, dtype)
    W, _ = run_ours(name, kw, W0, stream, index_dtype)
    assert W.dtype == dtype
    if dtype == np.float32 and name == "SGD" and kw.get("momentum"):
        # torch's float32 sparse momentum buffer carries its own ~1e-6 rounding: compare with its float64 run
        ref64 = run_torch(name, kw, W0.astype(np.float64), [(i, v.astype(np.float64)) for i, v in stream])
        assert_close(W, ref64, RTOL[dtype])
        assert_close(W, run_torch(name, kw, W0, stream), 1e-5)
    else:
        assert_close(W, run_torch(name, kw, W0, stream), RTOL[dtype])


@requires_torch
@pytest.mark.parametrize("name,kw", [CONFIGS[2], CONFIGS[6], CONFIGS[10]], ids=[IDS[2], IDS[6], IDS[10]])
def test_full_coo_gradient_matches_torch(name, kw):
    """A COO gradient with two sparse dims (no dense dim) over a matrix: element-wise rows."""
    shape = (12, 5)
    stream = grad_stream(3, shape, np.float64, steps=40, sparse_dim=2)
    W0 = start_param(3, shape, np.float64)
    W, _ = run_ours(name, kw, W0, stream)
    assert_close(W, run_torch(name, kw, W0, stream), 1e-12)


@pytest.mark.parametrize("name,kw", [CONFIGS[3], CONFIGS[7], CONFIGS[10]], ids=[IDS[3], IDS[7], IDS[10]])
def test_state_dict_roundtrip(name, kw):
    shape = (20, 4)
    stream = grad_stream(4, shape, np.float64, steps=40)
    W0 = start_param(4, shape, np.float64)
    W_full, _ = run_ours(name, kw, W0, stream)
    W, opt = run_ours(name, kw, W0, stream[:20])
    sd = opt.state_dict()
    assert sd["param_groups"][0]["params"] == [0] and set(sd["state"]) == {0}
    W2 = W.copy()
    opt2 = getattr(st.optim, name)([W2], **{k: 1.0 if k == "lr" else v for k, v in kw.items()})
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == kw["lr"]
    for idx, vals in stream[20:]:
        opt2.step([st.sparse_coo_tensor(idx, vals, size=shape)])
    np.testing.assert_array_equal(W2, W_full)


def test_threads_give_the_same_result():
    shape = (500, 16)
    stream = grad_stream(5, shape, np.float32, steps=10)
    W0 = start_param(5, shape, np.float32)
    results = []
    for nt in (1, 2, 3):
        st.set_num_threads(nt)
        try:
            results.append(run_ours("SparseAdam", dict(lr=1e-2), W0, stream)[0])
        finally:
            st.set_num_threads(None)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


def test_large_gradient_with_many_duplicates():
    """Enough entries for several sort buckets and threads; Zipf-like rows repeat thousands of times."""
    rng = np.random.default_rng(6)
    shape = (5000, 8)
    rows = np.minimum(rng.zipf(1.2, 100_000), shape[0]) - 1
    vals = rng.standard_normal((rows.size, 8))
    W0 = start_param(6, shape, np.float64)
    stream = [(rows[None], vals)] * 3
    for name, kw in (CONFIGS[4], CONFIGS[6], CONFIGS[9]):
        W, _ = run_ours(name, kw, W0, stream)
        assert_close(W, reference(name, kw, W0, stream), 1e-10)


def test_param_groups_and_none_gradients():
    A, B = np.zeros((6, 2)), np.zeros((4, 3))
    opt = st.optim.SGD([{"params": [A]}, {"params": [B], "lr": 1.0}], lr=0.5)
    gA = st.sparse_coo_tensor([[1, 1]], np.ones((2, 2)), size=A.shape)
    gB = st.sparse_coo_tensor([[3]], np.ones((1, 3)), size=B.shape)
    opt.step([gA, gB])
    np.testing.assert_array_equal(A[1], [-1.0, -1.0])
    np.testing.assert_array_equal(B[3], [-1.0, -1.0, -1.0])
    opt.step([None, gB])
    np.testing.assert_array_equal(A[1], [-1.0, -1.0])
    np.testing.assert_array_equal(B[3], [-2.0, -2.0, -2.0])
    with pytest.raises(ValueError, match="2 parameters"):
        opt.step([gA])
    with pytest.raises(ValueError, match="more than one parameter group"):
        st.optim.SGD([{"params": [A]}, {"params": [A]}])


def test_non_contiguous_parameter_is_written_back():
    W = np.asfortranarray(start_param(7, (10, 4), np.float64))
    ref = W.copy(order="C")
    g = st.sparse_coo_tensor([[2, 5, 2]], np.ones((3, 4)), size=W.shape)
    st.optim.Adagrad([W], lr=0.1).step([g])
    st.optim.Adagrad([ref], lr=0.1).step([g])
    np.testing.assert_array_equal(W, ref)


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
                                     ("Adagrad", dict(lr=0.1, weight_decay=0.01))])
def test_dense_gradients_match_reference(name, kw):
    """Dense ndarray gradients take torch's dense update (weight decay included)."""
    rng = np.random.default_rng(8)
    W = start_param(8, (6, 3), np.float64)
    Wr = W.copy()
    opt = getattr(st.optim, name)([W], **kw)
    buf = None
    acc = np.zeros_like(Wr)
    for t in range(1, 6):
        g = rng.standard_normal(W.shape)
        opt.step([g])
        gw = g + kw["weight_decay"] * Wr
        if name == "SGD":
            buf = gw.copy() if buf is None else 0.9 * buf + gw
            Wr -= 0.1 * buf
        else:
            acc += gw * gw
            Wr -= 0.1 * gw / (np.sqrt(acc) + 1e-10)
    np.testing.assert_allclose(W, Wr, rtol=1e-12, atol=1e-12)


# -- bad input: a clear error, and nothing written ---------------------------------------------

def _bad(opt_name, **kw):
    W = start_param(9, (10, 4), np.float32)
    return W, W.copy(), getattr(st.optim, opt_name)([W], **kw)


@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("bad_row,inv", [(10, "C5"), (-1, "C4")])
def test_out_of_range_row(name, index_dtype, bad_row, inv):
    W, before, opt = _bad(name, lr=0.1)
    idx = np.array([[1, 3, bad_row, 1]], index_dtype)
    g = st.sparse_coo_tensor(idx, np.ones((4, 4), np.float32), size=(10, 4), check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        opt.step([g])
    assert e.value.invariant == inv and e.value.index == 2
    np.testing.assert_array_equal(W, before)
    assert not opt.state[0] or name == "Adagrad"


def test_out_of_range_row_in_a_later_parameter_writes_nothing():
    A, B = np.zeros((5, 2), np.float32), np.zeros((5, 2), np.float32)
    opt = st.optim.SparseAdam([A, B])
    good = st.sparse_coo_tensor([[0]], np.ones((1, 2), np.float32), size=(5, 2))
    bad = st.sparse_coo_tensor([[7]], np.ones((1, 2), np.float32), size=(5, 2), check_invariants=False)
    with pytest.raises(st.InvariantError):
        opt.step([good, bad])
    assert not A.any() and not B.any()


@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
def test_bad_gradients(name):
    W, before, opt = _bad(name, lr=0.1)
    vals = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match="shape"):
        opt.step([st.sparse_coo_tensor([[0, 1]], np.ones((2, 4), np.float32), size=(11, 4))])
    with pytest.raises(ValueError, match="dense dims"):  # sparse dims agree, dense dims do not
        opt.step([st.sparse_coo_tensor([[0, 1]], np.ones((2, 5), np.float32), size=(10, 5))])
    with pytest.raises(TypeError, match="float32 or float64"):
        opt.step([st.sparse_coo_tensor([[0, 1]], np.ones((2, 4), np.int32), size=(10, 4))])
    with pytest.raises(TypeError, match="does not match"):
        opt.step([st.sparse_coo_tensor([[0, 1]], np.ones((2, 4)), size=(10, 4))])
    with pytest.raises(NotImplementedError, match="csr"):
        opt.step([st.from_dense(np.ones((10, 4), np.float32), "csr")])
    with pytest.raises(TypeError, match="COO tensor or a NumPy array"):
        opt.step([[0.0] * 4])
    np.testing.assert_array_equal(W, before)
    del vals


def test_bad_parameters_and_hyperparameters():
    with pytest.raises(TypeError, match="float32 or float64"):
        st.optim.SGD([np.zeros(3, np.int64)])
    with pytest.raises(TypeError, match="NumPy arrays"):
        st.optim.SGD([[0.0]])
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        st.optim.SGD([ro])
    with pytest.raises(TypeError, match="wrap it in a list"):
        st.optim.SGD(np.zeros(3))
    W = np.zeros((3, 2))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        st.optim.SparseAdam([W], lr=0.0)
    with pytest.raises(ValueError, match="beta parameter at index 1"):
        st.optim.SparseAdam([W], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Nesterov"):
        st.optim.SGD([W], nesterov=True)
    with pytest.raises(ValueError, match="lr_decay"):
        st.optim.Adagrad([W], lr_decay=-1)


def test_unsupported_combinations_raise_as_torch_does():
    W = np.zeros((4, 2))
    g = st.sparse_coo_tensor([[1]], np.ones((1, 2)), size=(4, 2))
    with pytest.raises(NotImplementedError, match="weight_decay"):
        st.optim.SGD([W], lr=0.1, weight_decay=0.1).step([g])
    with pytest.raises(NotImplementedError, match="weight_decay"):
        st.optim.Adagrad([W], weight_decay=0.1).step([g])
    with pytest.raises(TypeError, match="dense gradients"):
        st.optim.SparseAdam([W]).step([np.ones((4, 2))])
    opt = st.optim.SGD([W], lr=0.1, momentum=0.9)
    opt.step([g])
    with pytest.raises(NotImplementedError, match="momentum buffer is sparse"):
        opt.step([np.ones((4, 2))])
    full = st.sparse_coo_tensor([[1], [0]], [1.0], size=(4, 2))  # 2 sparse dims: buffer has 1
    with pytest.raises(ValueError, match="dense-dim mismatch"):
        opt.step([full])
    assert not np.isnan(W).any()


@pytest.mark.parametrize("name", ["sparsetensor.optim", "sparsetensor.optim._optimizers"])
def test_doctests(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_edge_shapes():
    """One row, zero rows, and a gradient with no sparse dims (every entry is the one row)."""
    stream = grad_stream(10, (1, 3), np.float64, steps=20)
    W0 = start_param(10, (1, 3), np.float64)
    for name, kw in (CONFIGS[3], CONFIGS[7], CONFIGS[10]):
        W, _ = run_ours(name, kw, W0, stream)
        assert_close(W, reference(name, kw, W0, stream), 1e-10)
    W = np.zeros((0, 3))
    st.optim.SparseAdam([W]).step([st.sparse_coo_tensor(np.zeros((1, 0), np.int64), np.zeros((0, 3)), size=(0, 3))])
    g = st.sparse_coo_tensor(np.zeros((0, 2), np.int64), np.array([[1.0, 2, 3], [1, 1, 1]]), size=(3,))
    W = np.zeros(3)
    opt = st.optim.SGD([W], lr=1.0, momentum=0.5)
    opt.step([g])
    opt.step([g])
    np.testing.assert_array_equal(W, [-5.0, -7.5, -10.0])  # -(g) - (0.5 g + g), g = [2, 3, 4]
    np.testing.assert_array_equal(opt.state[0]["momentum_buffer"].values(), [[3.0, 4.5, 6.0]])


def test_state_dict_of_torch_optim():
    """st.optim takes the state dict of torch.optim's SparseAdam (torch tensors): NumPy copies, the
    step a number, and the next steps agree."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    W = rng.standard_normal((6, 3))
    Wt = torch.tensor(W.copy(), requires_grad=True)
    topt = torch.optim.SparseAdam([Wt], lr=0.1)
    idx = torch.tensor([1, 3, 1])

    def torch_step():
        Wt.grad = None
        torch.nn.functional.embedding(idx, Wt, sparse=True).sum().backward()
        topt.step()

    torch_step()
    mine = Wt.detach().numpy().copy()
    opt = st.optim.SparseAdam([mine], lr=0.1)
    opt.load_state_dict(topt.state_dict())
    s = opt.state[0]
    assert isinstance(s["exp_avg"], np.ndarray) and s["step"] == 1
    torch_step()
    grad = st.sparse_coo_tensor(np.array([[1, 3]]), np.array([[2.0] * 3, [1.0] * 3]), (6, 3))
    opt.step([grad])
    np.testing.assert_allclose(mine, Wt.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("name,kw", [("SGD", {"lr": 0.1}), ("SGD", {"lr": 0.1, "momentum": 0.9}),
                                     ("Adagrad", {"lr": 0.1}), ("SparseAdam", {"lr": 0.1})])
def test_parameter_of_no_rows(name, kw):
    """A (0, E) parameter with an empty gradient: a step changes nothing (SGD and Adagrad once took
    its rows as 0 items wide and refused the gradient's E)."""
    W = np.zeros((0, 3))
    g = st.sparse_coo_tensor(np.zeros((1, 0), np.int64), np.zeros((0, 3)), size=(0, 3))
    opt = getattr(st.optim, name)([W], **kw)
    for _ in range(2):
        opt.step([g])
    assert W.shape == (0, 3)
