"""End to end: small models trained through sparsetensor.torch match the same models on torch.sparse."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import requires_torch

pytestmark = [requires_torch, pytest.mark.filterwarnings("ignore::UserWarning")]

torch = pytest.importorskip("torch")
stt = pytest.importorskip("sparsetensor.torch")


def random_graph(n, deg, seed):
    """A symmetric-normalised adjacency with self loops, D^-1/2 (A + I) D^-1/2, as CSR members."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), deg)
    cols = rng.integers(0, n, n * deg)
    a = np.zeros((n, n))
    a[rows, cols] = 1
    a = np.maximum(a, a.T) + np.eye(n)
    d = a.sum(1) ** -0.5
    a = d[:, None] * a * d[None, :]
    csr = torch.from_numpy(a).to_sparse_csr()
    return csr.crow_indices(), csr.col_indices(), csr.values(), (n, n)


def train_gcn(mm, layout, steps=30):
    n, f, h, c = 120, 12, 16, 4
    crow, col, vals, shape = random_graph(n, 3, 0)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(n, f, generator=g, dtype=torch.float64)
    y = torch.randint(0, c, (n,), generator=g)
    W1 = (0.3 * torch.randn(f, h, generator=g, dtype=torch.float64)).requires_grad_()
    W2 = (0.3 * torch.randn(h, c, generator=g, dtype=torch.float64)).requires_grad_()
    ev = vals.clone().requires_grad_()  # learned edge weights: gradients w.r.t. A's values
    opt = torch.optim.Adam([W1, W2, ev], lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        A = torch.sparse_csr_tensor(crow, col, ev, shape)
        if layout == "coo":
            A = torch.sparse_coo_tensor(torch.stack([torch.repeat_interleave(torch.arange(n), crow.diff()), col]),
                                        ev, shape, is_coalesced=True)
        H = torch.relu(mm(A, X @ W1))
        logits = mm(A, H @ W2)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), ev.detach()


@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_gcn_matches_torch_sparse(layout):
    ours, ev = train_gcn(stt.matmul, layout)
    ref, ev_ref = train_gcn(torch.sparse.mm, layout)
    assert ours[-1] < 0.8 * ours[0], ours
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ev, ev_ref, rtol=1e-5, atol=1e-7)


def train_bag_classifier(bag, steps=30):
    vocab, dim, classes, nbags = 60, 8, 3, 40
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, vocab, (nbags * 5,), generator=g)
    off = torch.arange(0, nbags * 5, 5)
    y = (idx.reshape(nbags, 5) % classes).mode(1).values  # learnable from the tokens
    E = (0.1 * torch.randn(vocab, dim, generator=g)).requires_grad_()
    lin = torch.nn.Linear(dim, classes)
    with torch.no_grad():
        lin.weight.copy_(0.1 * torch.randn(classes, dim, generator=g))
        lin.bias.zero_()
    sparse_opt = torch.optim.SparseAdam([E], lr=0.05)
    dense_opt = torch.optim.Adam(lin.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(lin(bag(E, idx, off)), y)
        loss.backward()
        assert E.grad.is_sparse
        sparse_opt.step()
        dense_opt.step()
        losses.append(loss.item())
    return np.array(losses)


def test_bag_of_embeddings_classifier_matches_torch():
    ours = train_bag_classifier(lambda E, i, o: stt.embedding_bag(E, i, o, mode="mean"))
    ref = train_bag_classifier(lambda E, i, o: torch.nn.functional.embedding_bag(i, E, o, mode="mean", sparse=True))
    assert ours[-1] < 0.7 * ours[0], ours
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
