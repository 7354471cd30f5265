"""sparsetensor.torch.optim: drop-ins for torch.optim.SGD/SparseAdam/Adagrad.

Each test runs torch.optim's optimizer and ours side by side on the same model and
gradients (real backward passes through sparse embeddings: duplicate ids in every batch)
and compares parameters and state after many steps.
"""

from __future__ import annotations

import pytest

import sparsetensor as st
from conftest import requires_torch

pytestmark = requires_torch

torch = pytest.importorskip("torch")
sto = pytest.importorskip("sparsetensor.torch.optim")

STEPS = 100
RTOL = {torch.float32: 1e-6, torch.float64: 1e-12}

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.2)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
    ("SparseAdam", dict(lr=1e-2)),
    ("SparseAdam", dict(lr=2e-2, betas=(0.7, 0.95), eps=1e-5, maximize=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.02, initial_accumulator_value=0.2, eps=1e-7)),
    ("Adagrad", dict(lr=0.1, maximize=True)),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for n, kw in CONFIGS]


def assert_close(got, ref, rtol):
    got, ref = got.detach().double(), ref.detach().double()
    scale = max(float(ref.abs().max()), 1e-30)
    err = float((got - ref).abs().max()) / scale
    assert err <= rtol, f"max error {err:.3g} (relative to max |ref| = {scale:.3g}) > {rtol}"


def twin_embeddings(n, d, dtype, seed=0):
    torch.manual_seed(seed)
    a = torch.nn.Embedding(n, d, sparse=True).to(dtype)
    b = torch.nn.Embedding(n, d, sparse=True).to(dtype)
    with torch.no_grad():
        b.weight.copy_(a.weight)
    return a, b


def batches(seed, n, steps=STEPS, size=32, dim=8):
    """(ids, targets) per step; ids have a duplicate in every batch."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in range(steps):
        ids = torch.randint(0, n // 2, (size,), generator=g)
        ids[-1] = ids[0]
        out.append((ids, torch.randn(size, dim, generator=g, dtype=torch.float64)))
    return out


def train(opt, emb, data):
    for ids, target in data:
        opt.zero_grad()
        ((emb(ids) - target[:, :emb.embedding_dim].to(emb.weight.dtype)) ** 2).sum().backward()
        opt.step()


@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_embedding_training_matches_torch(name, kw, dtype):
    ref, ours = twin_embeddings(60, 8, dtype)
    ids = batches(2, 60)
    opt_ref = getattr(torch.optim, name)(ref.parameters(), **kw)
    opt = getattr(sto, name)(ours.parameters(), **kw)
    assert isinstance(opt, torch.optim.Optimizer) and isinstance(opt, getattr(torch.optim, name))
    train(opt_ref, ref, ids)
    train(opt, ours, ids)
    rtol = RTOL[dtype]
    if name == "SGD" and kw.get("momentum") and dtype == torch.float32:
        rtol = 1e-5  # torch's uncoalesced float32 momentum buffer carries its own ~1e-6 rounding (see test_optim)
    assert_close(ours.weight, ref.weight, rtol)
    sref, sours = opt_ref.state[ref.weight], opt.state[ours.weight]
    assert set(sref) == set(sours)
    for k in sref:
        a, b = sours[k], sref[k]
        if isinstance(b, torch.Tensor):
            assert a.layout == b.layout and a.dtype == b.dtype
            assert_close(a.to_dense() if a.is_sparse else a, b.to_dense() if b.is_sparse else b, max(rtol, 1e-5)
                         if dtype == torch.float32 else rtol)
        else:
            assert a == b


@pytest.mark.parametrize("name,kw", [CONFIGS[1], CONFIGS[3], CONFIGS[5]], ids=[IDS[1], IDS[3], IDS[5]])
def test_state_dict_loads_across_torch_and_ours(name, kw):
    """Half the steps with one, the rest with the other after state_dict/load_state_dict, both ways."""
    ids = batches(3, 40, steps=40)
    full, a, b = (twin_embeddings(40, 4, torch.float64, seed=3)[0] for _ in range(3))
    for m in (a, b):
        with torch.no_grad():
            m.weight.copy_(full.weight)
    train(getattr(torch.optim, name)(full.parameters(), **kw), full, ids)
    for first_cls, second_cls, emb in ((getattr(torch.optim, name), getattr(sto, name), a),
                                       (getattr(sto, name), getattr(torch.optim, name), b)):
        o1 = first_cls(emb.parameters(), **kw)
        train(o1, emb, ids[:20])
        o2 = second_cls(emb.parameters(), **kw)
        o2.load_state_dict(o1.state_dict())
        train(o2, emb, ids[20:])
        assert_close(emb.weight, full.weight, 1e-12)


def test_param_groups_mix_sparse_and_dense_gradients():
    """A sparse embedding and a dense linear layer in two groups: the linear layer takes torch's dense step."""
    torch.manual_seed(4)
    models = []
    for _ in range(2):
        torch.manual_seed(4)
        models.append((torch.nn.Embedding(30, 6, sparse=True).double(), torch.nn.Linear(6, 1).double()))
    opts = [cls([{"params": e.parameters()}, {"params": lin.parameters(), "lr": 0.01}], lr=0.1, momentum=0.9)
            for cls, (e, lin) in zip((torch.optim.SGD, sto.SGD), models)]
    ids = batches(5, 30, steps=30)
    for t, _ in ids:
        for opt, (e, lin) in zip(opts, models):
            opt.zero_grad()
            lin(e(t)).pow(2).sum().backward()
            opt.step()
    for x, y in zip(models[0], models[1]):
        for p, q in zip(x.parameters(), y.parameters()):
            assert_close(q, p, 1e-12)
    lin_state = opts[1].state[models[1][1].weight]["momentum_buffer"]
    assert lin_state.layout == torch.strided


def test_dense_gradient_weight_decay_falls_back_to_torch():
    a, b = twin_embeddings(10, 3, torch.float64)
    a.sparse = b.sparse = False
    ids = batches(6, 10, steps=10)
    train(torch.optim.Adagrad(a.parameters(), lr=0.1, weight_decay=0.1), a, ids)
    train(sto.Adagrad(b.parameters(), lr=0.1, weight_decay=0.1), b, ids)
    assert_close(b.weight, a.weight, 1e-12)


def test_empty_gradient_and_step_counts():
    a, b = twin_embeddings(10, 3, torch.float32)
    opts = [torch.optim.SparseAdam(list(a.parameters())), sto.SparseAdam(list(b.parameters()))]
    empty = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.long), torch.zeros((0, 3)), (10, 3))
    for opt, m in zip(opts, (a, b)):
        for k in range(3):
            m.weight.grad = empty.clone() if k != 1 else torch.sparse_coo_tensor([[2, 2]], torch.ones(2, 3), (10, 3))
            opt.step()
    assert opts[0].state[a.weight]["step"] == opts[1].state[b.weight]["step"] == 3
    assert_close(b.weight, a.weight, 1e-6)


def test_closure_and_zero_copy_update():
    emb = torch.nn.Embedding(8, 2, sparse=True)
    opt = sto.SGD(emb.parameters(), lr=0.5)
    storage = emb.weight.data_ptr()
    before = emb.weight.detach().clone()

    def closure():
        opt.zero_grad()
        loss = emb(torch.tensor([3, 3])).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert isinstance(loss, torch.Tensor) and emb.weight.data_ptr() == storage
    assert torch.equal(emb.weight[3], before[3] - 1.0)
    assert torch.equal(emb.weight[0], before[0])


# -- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
def test_out_of_range_rows_raise_and_write_nothing(name):
    a = torch.nn.Parameter(torch.zeros(6, 2))
    b = torch.nn.Parameter(torch.zeros(6, 2))
    opt = getattr(sto, name)([a, b], lr=0.1)
    a.grad = torch.sparse_coo_tensor([[1]], torch.ones(1, 2), (6, 2))
    b.grad = torch.sparse_coo_tensor([[0, 9]], torch.ones(2, 2), (6, 2), check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        opt.step()
    assert e.value.invariant == "C5" and e.value.index == 1
    assert not a.detach().any() and not b.detach().any()


@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
def test_a_bad_group_writes_no_group(name):
    # every group's gradients are checked before the first write of the step, and no state moves
    a = torch.nn.Parameter(torch.zeros(6, 2, dtype=torch.float64))
    b = torch.nn.Parameter(torch.zeros(6, 2, dtype=torch.float64))
    kw = {"momentum": 0.9} if name == "SGD" else {}
    opt = getattr(sto, name)([{"params": [a]}, {"params": [b]}], lr=0.1, **kw)
    a.grad = torch.sparse_coo_tensor([[1]], torch.ones(1, 2, dtype=torch.float64), (6, 2))
    b.grad = torch.sparse_coo_tensor([[7]], torch.ones(1, 2, dtype=torch.float64), (6, 2), check_invariants=False)
    with pytest.raises(st.InvariantError):
        opt.step()
    assert not a.detach().any() and not b.detach().any()
    for state in opt.state.values():  # nothing moved: Adagrad's initial zeros, else nothing
        assert all(not (v.any() if torch.is_tensor(v) else v) for v in state.values()), state


def test_errors_torch_raises_too():
    p = torch.nn.Parameter(torch.zeros(4, 2))
    p.grad = torch.ones(4, 2)
    with pytest.raises(RuntimeError, match="does not support dense gradients"):
        sto.SparseAdam([p]).step()
    p.grad = torch.sparse_coo_tensor([[1]], torch.ones(1, 2), (4, 2))
    with pytest.raises(RuntimeError, match="add\\(sparse, dense\\)"):
        sto.SGD([p], lr=0.1, weight_decay=0.1).step()
    with pytest.raises(RuntimeError, match="weight_decay option is not compatible"):
        sto.Adagrad([p], weight_decay=0.1).step()
    with pytest.raises(ValueError, match="Invalid learning rate"):
        sto.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="SparseAdam requires dense parameter tensors"):
        sto.SparseAdam([torch.nn.Parameter(torch.zeros(3, 2).to_sparse())])


def test_importing_sparsetensor_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, sparsetensor, sparsetensor.optim, sparsetensor.torch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_doctests():
    import doctest

    result = doctest.testmod(sto, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
