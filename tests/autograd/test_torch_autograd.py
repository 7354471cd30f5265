"""sparsetensor.torch: torch.autograd over our rules (gradcheck in float64, torch's own gradients)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import LAYOUTS, requires_torch

pytestmark = [requires_torch, pytest.mark.filterwarnings("ignore::UserWarning")]

torch = pytest.importorskip("torch")
stt = pytest.importorskip("sparsetensor.torch")

BLOCK = {"bsr": (2, 2), "bsc": (2, 2)}
F64 = torch.float64


def sparse_of(layout, dense, **kw):
    if layout == "coo":
        return dense.to_sparse(**kw).coalesce()
    return dense.to_sparse(layout=getattr(torch, f"sparse_{layout}"), blocksize=BLOCK.get(layout), **kw)


def random_sparse(layout, shape, seed=0, dtype=F64, density=0.5, dense_dim=None, batch=False):
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(shape, generator=g, dtype=dtype)
    bs = BLOCK.get(layout, (1, 1))
    m = 1 if batch else 0
    nb = (shape[m] // bs[0], shape[m + 1] // bs[1])
    keep = (torch.rand(nb, generator=g) < density).repeat_interleave(bs[0], 0).repeat_interleave(bs[1], 1)
    d = d * keep.reshape(keep.shape + (1,) * (len(shape) - m - 2)).to(dtype)
    kw = {"dense_dim": dense_dim} if dense_dim else {}
    return sparse_of(layout, d, **kw)


def members(A):
    if A.layout == torch.sparse_coo:
        return (A._indices(),), A._values()
    if A.layout in (torch.sparse_csr, torch.sparse_bsr):
        return (A.crow_indices(), A.col_indices()), A.values()
    return (A.ccol_indices(), A.row_indices()), A.values()


def builder(A):
    """(values leaf, a function values -> A with those values through torch's constructor)."""
    idx, vals = members(A)
    leaf = vals.detach().clone().requires_grad_()
    layout, shape = A.layout, A.shape

    def build(v):
        if layout == torch.sparse_coo:
            return torch.sparse_coo_tensor(idx[0], v, shape, is_coalesced=True)
        return torch.sparse_compressed_tensor(idx[0], idx[1], v, shape, layout=layout)

    return leaf, build


def gradcheck(fn, *inputs):
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def dense(shape, seed=1, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype).requires_grad_()


# -- products ---------------------------------------------------------------------------------------
# torch's compressed constructors refuse autograd for complex values: complex runs on coo
@pytest.mark.parametrize("layout,dtype", [(lay, F64) for lay in LAYOUTS] + [("coo", torch.complex128)])
def test_matmul_gradcheck(layout, dtype):
    A = random_sparse(layout, (4, 6), dtype=dtype)
    v, build = builder(A)
    X = dense((6, 3), dtype=dtype)
    gradcheck(lambda v, X: stt.matmul(build(v), X), v, X)
    gradcheck(lambda v, X: stt.matmul(X, build(v)), v, dense((2, 4), dtype=dtype))
    gradcheck(lambda v, x: stt.mv(build(v), x), v, dense((6,), dtype=dtype))


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_bmm_gradcheck(layout):
    A = random_sparse(layout, (2, 4, 4), batch=True)
    v, build = builder(A)
    gradcheck(lambda v, X: stt.bmm(build(v), X), v, dense((2, 4, 3)))


@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("coo", "coo"), ("csr", "csc"), ("bsr", "bsr")])
def test_sparse_sparse_gradcheck(la, lb):
    A, B = random_sparse(la, (4, 6), 2), random_sparse(lb, (6, 4), 3)
    va, ba = builder(A)
    vb, bb = builder(B)
    gradcheck(lambda va, vb: stt.to_dense(stt.matmul(ba(va), bb(vb))), va, vb)
    gradcheck(lambda va, vb, C: stt.addmm(C, ba(va), bb(vb), beta=0.5, alpha=2.0), va, vb, dense((4, 4)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_addmm_gradcheck(layout):
    v, build = builder(random_sparse(layout, (4, 6)))
    gradcheck(lambda C, v, X: stt.addmm(C, build(v), X, beta=0.5, alpha=-2.0), dense((4, 3), 4), v, dense((6, 3)))


@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_sampled_addmm_gradcheck_(layout):
    v, build = builder(random_sparse(layout, (4, 5)))
    gradcheck(lambda v, m1, m2: stt.values(stt.sampled_addmm(build(v), m1, m2, beta=0.5, alpha=1.5)),
              v, dense((4, 3), 5), dense((3, 5), 6))


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_matches_torch_sparse_mm(layout):
    A = random_sparse(layout, (50, 40), 7, density=0.2).detach().requires_grad_()
    X = dense((40, 8), 8)
    G = torch.randn(50, 8, dtype=F64)
    torch.sparse.mm(A, X).backward(G)
    ref_A, ref_X = A.grad.to_dense(), X.grad.clone()
    A2 = A.detach().clone().requires_grad_()
    X2 = X.detach().clone().requires_grad_()
    stt.matmul(A2, X2).backward(G)
    assert A2.grad.layout == A.layout
    torch.testing.assert_close(A2.grad.to_dense(), ref_A)
    torch.testing.assert_close(X2.grad, ref_X)
    if layout == "csr":
        torch.testing.assert_close(A2.grad.col_indices(), A.col_indices())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_leaf_and_values_leaf(layout):
    """COO/CSR leaves hold .grad; every layout built from a values leaf gets values.grad."""
    A = random_sparse(layout, (4, 6), 9)
    X = dense((6, 2), 10)
    G = torch.randn(4, 2, dtype=F64)
    ref = (G @ X.detach().T) * (A.to_dense() != 0)
    v, build = builder(A)
    stt.matmul(build(v), X).backward(G)
    got = build(v.grad).to_dense()
    if layout in ("bsr", "bsc"):  # explicit zeros inside blocks get their gradient too
        idx, vals = members(A)
        ones = torch.ones_like(vals)
        mask = build(ones).to_dense() != 0
        ref = (G @ X.detach().T) * mask
    torch.testing.assert_close(got, ref)
    if layout in ("coo", "csr"):
        L = A.detach().clone().requires_grad_()
        stt.matmul(L, X).backward(G)
        assert L.grad.layout == L.layout
        torch.testing.assert_close(L.grad.to_dense(), ref)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_products_skip_cotangents_torch_does_not_need(layout, monkeypatch):
    """A constant sparse factor (a GCN's adjacency) costs no SDDMM in the backward, a constant
    dense factor no product with the transpose; the gradients that are needed stay right."""
    from sparsetensor.autograd import rules
    from sparsetensor.ops import blas

    A = random_sparse(layout, (6, 4), 11)
    X = dense((4, 3), 12)
    G = torch.randn(6, 3, dtype=F64)
    calls = {"sddmm": 0, "matmul": 0}
    real_sddmm, real_matmul = rules.sddmm, blas.matmul

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(rules, "sddmm", counted("sddmm", real_sddmm))
    monkeypatch.setattr(blas, "matmul", counted("matmul", real_matmul))
    stt.matmul(A, X).backward(G)  # A holds no gradient
    assert calls["sddmm"] == 0 and calls["matmul"] == 2  # forward, A^T @ G
    torch.testing.assert_close(X.grad, A.to_dense().T @ G)
    v, build = builder(A)
    Xc = X.detach()
    calls.update(sddmm=0, matmul=0)
    stt.matmul(build(v), Xc).backward(G)  # X is a constant
    assert calls["sddmm"] == 1 and calls["matmul"] == 1  # the SDDMM only, after the forward
    ones = build(torch.ones_like(v)).to_dense() != 0
    torch.testing.assert_close(build(v.grad).to_dense(), (G @ Xc.T) * ones)
    calls.update(sddmm=0, matmul=0)
    C = dense((6, 3), 13)
    stt.addmm(C, A, Xc).backward(G)  # only the added input needs its gradient
    assert calls == {"sddmm": 0, "matmul": 0}  # (addmm's forward is its own kernel)
    torch.testing.assert_close(C.grad, G)


# -- elementwise and unary -----------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_elementwise_gradcheck(layout):
    va, ba = builder(random_sparse(layout, (4, 6), 11))
    vb, bb = builder(random_sparse(layout, (4, 6), 12))
    D = dense((4, 6), 13)
    gradcheck(lambda a, b: stt.to_dense(stt.add(ba(a), bb(b), alpha=2.0)), va, vb)
    gradcheck(lambda a, b: stt.to_dense(stt.sub(ba(a), bb(b))), va, vb)
    gradcheck(lambda a, D: stt.add(ba(a), D), va, D)
    gradcheck(lambda a, b: stt.to_dense(stt.mul(ba(a), bb(b))), va, vb)
    gradcheck(lambda a, D: stt.to_dense(stt.mul(ba(a), D)), va, D)
    gradcheck(lambda a: stt.to_dense(stt.mul(ba(a), 3.0)), va)
    gradcheck(lambda a, D: stt.values(stt.div(ba(a), D)), va, D)


@pytest.mark.parametrize("name", ["neg", "abs", "sqrt", "square", "sin", "tanh", "expm1", "log1p", "atan", "relu"])
@pytest.mark.parametrize("layout", ["coo", "csr", "bsc"])
def test_unary_gradcheck(name, layout):
    A = random_sparse(layout, (4, 6), 14)
    idx, vals = members(A)
    v, build = builder(A)
    with torch.no_grad():
        v += 0.05 * torch.sign(v) + 0.05 * (v == 0)  # keep away from the kinks at 0
        if name in ("sqrt", "log1p"):
            v.abs_()
    gradcheck(lambda v: stt.values(getattr(stt, name)(build(v))), v)


def test_unary_complex_gradcheck():
    v, build = builder(random_sparse("coo", (3, 4), 15, dtype=torch.complex128))
    for name in ("sin", "square", "abs", "conj", "tanh"):
        gradcheck(lambda v: stt.values(getattr(stt, name)(build(v))), v)


def test_dense_gradient_op_raises():
    v, build = builder(random_sparse("csr", (3, 4), 16))
    with pytest.raises(ValueError, match=r"exp.*to_dense\(\)"):
        stt.exp(build(v))


# -- reductions ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_reductions_gradcheck(layout):
    v, build = builder(random_sparse(layout, (4, 6), 17))
    gradcheck(lambda v: stt.sum(build(v)), v)
    for dim in (0, 1):
        gradcheck(lambda v: _dense(stt.sum(build(v), dim)), v)
        gradcheck(lambda v: stt.values(stt.softmax(build(v), dim)), v)
        gradcheck(lambda v: stt.values(stt.log_softmax(build(v), dim)), v)


def _dense(t):
    return stt.to_dense(t) if t.layout != torch.strided else t


def test_softmax_matches_torch():
    A = random_sparse("coo", (5, 7), 18, density=0.6).detach().requires_grad_()
    G = torch.randn(A._nnz(), dtype=F64)
    torch.sparse.softmax(A, 1).coalesce().values().backward(G)
    A2 = A.detach().clone().requires_grad_()
    stt.values(stt.softmax(A2, 1)).backward(G)
    torch.testing.assert_close(A2.grad.to_dense(), A.grad.to_dense())


# -- conversions, shape, indexing ------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_shape_ops_gradcheck(layout):
    A = random_sparse(layout, (4, 6), 19, density=0.7)
    v, build = builder(A)
    gradcheck(lambda v: stt.to_dense(build(v)), v)
    gradcheck(lambda v: stt.to_dense(stt.mT(build(v))), v)
    gradcheck(lambda v: stt.to_dense(stt.transpose(build(v), 0, 1)), v)
    gradcheck(lambda v: stt.to_dense(stt.narrow(build(v), 1, 2, 2)), v)
    gradcheck(lambda v: stt.to_dense(stt.cat([build(v), build(v)], 0)), v)
    gradcheck(lambda v: stt.to_dense(stt.coalesce(build(v))), v)
    gradcheck(lambda D: stt.values(stt.sparse_mask(D, A)), dense((4, 6), 20))
    if layout not in ("bsr", "bsc"):
        gradcheck(lambda v: _dense(stt.select(build(v), 0, 1)), v)
        gradcheck(lambda v: stt.to_dense(stt.index_select(build(v), 1, torch.tensor([4, 0, 4]))), v)
        gradcheck(lambda v: stt.to_dense(stt.index_select(build(v), 1, torch.tensor([-2, 0, -6]))), v)
    for dst in LAYOUTS:
        gradcheck(lambda v: stt.to_dense(stt.to_sparse(build(v), dst, blocksize=BLOCK.get(dst))), v)


def test_hybrid_coo_gradcheck():
    A = random_sparse("coo", (4, 6, 3), 21, dense_dim=1)
    v, build = builder(A)
    gradcheck(lambda v: stt.to_dense(stt.sum(build(v), 1)), v)
    gradcheck(lambda v: stt.to_dense(stt.mul(build(v), build(v))), v)


# -- embeddings -------------------------------------------------------------------------------------
def test_embedding_gradient_is_coalesced_hybrid_coo():
    W = dense((10, 4), 22)
    idx = torch.tensor([[1, 3, 1], [9, 3, 1]])
    out = stt.embedding(W, idx)
    torch.testing.assert_close(out, W.detach()[idx])
    G = torch.randn(2, 3, 4, dtype=F64)
    out.backward(G)
    g = W.grad
    assert g.is_sparse and g.sparse_dim() == 1 and g.dense_dim() == 1 and g._nnz() == 3
    W2 = W.detach().clone().requires_grad_()
    torch.nn.functional.embedding(idx, W2, sparse=True).backward(G)
    torch.testing.assert_close(g.to_dense(), W2.grad.to_dense())


def test_embedding_of_width_zero_matches_torch():
    W = torch.zeros(5, 0, dtype=F64, requires_grad=True)
    idx = torch.tensor([[0, 2], [4, 2]])
    out = stt.embedding(W, idx)
    out.sum().backward()
    assert out.shape == (2, 2, 0) and W.grad.shape == (5, 0) and W.grad.is_sparse
    for mode in ("sum", "mean"):
        W.grad = None
        out = stt.embedding_bag(W, idx.reshape(-1), torch.tensor([0, 1]), mode=mode)
        out.sum().backward()
        assert out.shape == (2, 0) and W.grad.shape == (5, 0)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_matches_torch(mode):
    W = dense((10, 4), 24)
    idx, off = torch.tensor([1, 3, 1, 9, 3, 0, 0]), torch.tensor([0, 3, 3, 5])
    out = stt.embedding_bag(W, idx, off, mode=mode)
    W2 = W.detach().clone().requires_grad_()
    ref = torch.nn.functional.embedding_bag(idx, W2, off, mode=mode, sparse=True)
    torch.testing.assert_close(out, ref)
    G = torch.randn(ref.shape, dtype=F64)
    out.backward(G)
    ref.backward(G)
    torch.testing.assert_close(W.grad.to_dense(), W2.grad.to_dense())
    if mode == "sum":  # the weights' gradient (dense) by gradcheck; the weight's is sparse
        W3 = W.detach()
        gradcheck(lambda p: stt.embedding_bag(W3, idx, off, "sum", p), dense((7,), 26))


@pytest.mark.parametrize("opt", ["SparseAdam", "SGD"])
def test_embedding_gradient_feeds_torch_optimizers(opt):
    torch.manual_seed(0)
    W = torch.randn(20, 4, requires_grad=True)
    W_ref = W.detach().clone().requires_grad_()
    make = (lambda p: torch.optim.SparseAdam([p], lr=0.1)) if opt == "SparseAdam" else \
        (lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9))
    o, o_ref = make(W), make(W_ref)
    for step in range(5):
        idx = torch.randint(0, 20, (8, 3))
        for p, f, opt_ in ((W, lambda p: stt.embedding_bag(p, idx, mode="mean"), o),
                           (W_ref, lambda p: torch.nn.functional.embedding_bag(idx, p, mode="mean", sparse=True),
                            o_ref)):
            opt_.zero_grad()
            (f(p) ** 2).sum().backward()
            opt_.step()
    torch.testing.assert_close(W, W_ref)


# -- bad input ---------------------------------------------------------------------------------------
def test_bad_input():
    A = random_sparse("csr", (4, 6), 28)
    with pytest.raises(NotImplementedError, match="meta tensor.*on the CPU and on CUDA devices"):
        stt.matmul(A, torch.ones(6, 2, device="meta"))
    with pytest.raises(TypeError, match="indices"):
        stt.embedding(dense((5, 2)), torch.tensor([0.0, 1.0], requires_grad=True))
    with pytest.raises(TypeError, match="integer"):
        stt.embedding(dense((5, 2)), torch.tensor([0.0, 1.0]))
    with pytest.raises(IndexError, match="out of range"):
        stt.embedding(dense((5, 2)), torch.tensor([0, 5]))
    with pytest.raises(ValueError):
        stt.matmul(A, torch.ones(5, 2, dtype=F64))


def test_import_sparsetensor_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, sparsetensor; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-P", "-c", code], check=True)  # -P: never the source tree


@pytest.mark.parametrize("layout", LAYOUTS)
def test_values_computed_not_leaf(layout):
    """Values that are not a leaf (scaled here) take torch's own constructor backward."""
    A = random_sparse(layout, (4, 6), 29)
    idx, vals = members(A)
    v, build = builder(A)
    X = dense((6, 2), 30)
    G = torch.randn(4, 2, dtype=F64)
    stt.matmul(build(2.0 * v), X).backward(G)
    v2 = v.detach().clone().requires_grad_()
    stt.matmul(build(v2), X).backward(G)  # the values-leaf shortcut
    torch.testing.assert_close(v.grad, 2.0 * v2.grad)
    gradcheck(lambda v, X: stt.matmul(build(v * 1.5), X), v.detach().clone().requires_grad_(), X)


def test_doctests():
    import doctest

    result = doctest.testmod(stt, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0


def test_zero_dim_tensor_operand_gets_its_gradient():
    """A 0-d torch tensor factor, divisor or scale that requires grad gets torch's gradient (it got
    none, silently). (coo: torch's own product of a csr tensor and a 0-d tensor has no to_dense.)"""
    A = sparse_of("coo", torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=F64))
    for name, torch_fn, ours, swap in (("mul", torch.mul, stt.mul, False), ("rmul", torch.mul, stt.mul, True),
                                       ("div", torch.div, stt.div, False), ("scale", torch.mul, stt.scale, False)):
        grads = []
        for fn in (torch_fn, ours):
            s = torch.tensor(2.0, dtype=F64, requires_grad=True)
            out = fn(s, A) if swap else fn(A, s)
            (out.to_dense() if fn is torch_fn else stt.to_dense(out)).sum().backward()
            grads.append(s.grad)
        assert grads[1] is not None and torch.allclose(grads[0], grads[1]), name


def test_double_backward_is_refused_not_dropped():
    """create_graph=True through an op of sparsetensor.torch: a second differentiation raises
    torch's once_differentiable error (it silently dropped the second-order terms)."""
    A = random_sparse("coo", (3, 4))
    X = torch.randn(4, 2, dtype=F64, requires_grad=True)
    (gX,) = torch.autograd.grad(stt.matmul(A, X).pow(2).sum(), X, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        (gX.pow(2).sum() + X.sum()).backward()
