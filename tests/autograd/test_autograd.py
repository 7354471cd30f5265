"""The engine-free derivative rules (sparsetensor.autograd.vjp) against NumPy central differences.

For an op ``out = f(*args)`` and a random output cotangent ``g``, ``L = Re<g, out>`` (over
the stored values when ``out`` is sparse) is differentiated by central differences w.r.t.
every stored value of every floating argument (real and imaginary parts), and compared
with the pullback's cotangents (PyTorch's convention: ``dL/dRe + 1j * dL/dIm``).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.autograd import DenseGradientError, vjp

from conftest import INDEX_DTYPES, LAYOUTS, unequal_batch_unions

EPS = 1e-6


def _rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def make(rng, layout, shape, *, dtype=np.float64, index_dtype=np.int64, density=0.5, blocksize=None,
         batch_dim=0, dense_dim=0, nnz0=False):
    """A random sparse tensor of ``layout`` whose stored values are all nonzero."""
    a = _rand(rng, shape, dtype)
    lead = len(shape) - dense_dim
    if nnz0:
        a[...] = 0
    elif layout in ("bsr", "bsc"):
        m = batch_dim
        rb, cb = blocksize
        nb = (shape[m] // rb, shape[m + 1] // cb)
        keep = rng.random(shape[:m] + nb) < density
        if m:  # every batch the same number of blocks
            keep[...] = keep.reshape((-1,) + nb)[0]
        mask = keep.repeat(rb, axis=m).repeat(cb, axis=m + 1)
        a *= mask.reshape(mask.shape + (1,) * dense_dim)
    else:
        keep = rng.random(shape[:lead]) < density
        if batch_dim:
            keep[...] = keep.reshape((-1,) + shape[batch_dim:lead])[0]
        a *= keep.reshape(keep.shape + (1,) * dense_dim)
    return st.from_dense(a, layout, blocksize=blocksize, batch_dim=batch_dim, dense_dim=dense_dim,
                         index_dtype=index_dtype)


def _inner(g, out):
    """Re<g, out>: over the stored values of a sparse ``out`` (``g`` of its pattern)."""
    if isinstance(out, st.SparseTensor):
        return float(np.real(np.vdot(g.values(), out.values())))
    return float(np.real(np.vdot(g, out)))


def _perturbations(x):
    """(index, setter) pairs for every stored value (or element) of ``x``."""
    v = x.values() if isinstance(x, st.SparseTensor) else np.asarray(x)
    for k in range(v.size):
        def with_delta(delta, k=k):
            w = v.copy().reshape(-1)
            w[k] += delta
            w = w.reshape(v.shape)
            return x._replace_values(w) if isinstance(x, st.SparseTensor) else w
        yield k, with_delta


def check(fn, *args, rng=None, kwargs=None, nondiff=(), atol=1e-5, rtol=1e-5):
    """Compare vjp(fn, *args) with central differences; returns the cotangents."""
    rng = np.random.default_rng(0) if rng is None else rng
    kwargs = kwargs or {}
    out, pullback = vjp(fn, *args, **kwargs)
    dtype = out.dtype
    if isinstance(out, st.SparseTensor):
        g = out._replace_values(_rand(rng, out.values().shape, dtype))
    else:
        g = _rand(rng, np.shape(out), dtype)
    cts = pullback(g)
    assert len(cts) == len(args)

    def loss(new_args):
        o, _ = vjp(fn, *new_args, **kwargs)
        if isinstance(out, st.SparseTensor):
            assert o.values().shape == out.values().shape
        return _inner(g, o)

    def slots():
        for i, a in enumerate(args):
            if isinstance(a, list):
                for j, t in enumerate(a):
                    yield (i, j), t, cts[i][j]
            else:
                yield (i, None), a, cts[i]

    checked = 0
    for (i, j), a, ct in slots():
        if not st.autograd.differentiable(a) or i in nondiff:
            assert ct is None
            continue
        assert ct is not None, f"argument {i} has no cotangent"
        if isinstance(a, st.SparseTensor):
            assert ct.layout == a.layout and ct.shape == a.shape
            assert ct.values().shape == a.values().shape and ct.dtype == a.dtype
            ctv = ct.values()
        elif isinstance(ct, st.SparseTensor):  # a dense argument with sparse rows (embeddings)
            assert ct.shape == np.shape(a) and ct.is_coalesced()
            ctv = ct.to_dense()
        else:
            assert ct.shape == np.shape(a)
            ctv = ct
        cplx = np.dtype(a.dtype).kind == "c"
        fd = np.zeros(ctv.size, dtype=np.complex128 if cplx else np.float64)
        for k, with_delta in _perturbations(a):
            for unit in ((1, 1j) if cplx else (1,)):
                def replaced(delta):
                    new = list(args)
                    if j is None:
                        new[i] = with_delta(delta * unit)
                    else:
                        new[i] = list(args[i])
                        new[i][j] = with_delta(delta * unit)
                    return new
                d = (loss(replaced(EPS)) - loss(replaced(-EPS))) / (2 * EPS)
                fd[k] += d * unit
        np.testing.assert_allclose(ctv.reshape(-1), fd, atol=atol, rtol=rtol, err_msg=f"argument {i}/{j}")
        checked += 1
    assert checked, "nothing was differentiated"
    return cts


BLOCK = {"bsr": (2, 2), "bsc": (2, 2)}


def _layout_params():
    return [pytest.param(lay, idt, id=f"{lay}-{np.dtype(idt).name}") for lay in LAYOUTS for idt in INDEX_DTYPES]


# -- products ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout,idt", _layout_params())
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_matmul_sparse_dense(layout, idt, dtype):
    rng = np.random.default_rng(1)
    A = make(rng, layout, (4, 6), dtype=dtype, index_dtype=idt, blocksize=BLOCK.get(layout))
    X = _rand(rng, (6, 3), dtype)
    check(st.matmul, A, X, rng=rng)
    check(st.matmul, _rand(rng, (2, 4), dtype), A, rng=rng)
    check(st.mv, A, _rand(rng, (6,), dtype), rng=rng)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_matmul_empty(layout):
    rng = np.random.default_rng(2)
    A = make(rng, layout, (4, 6), nnz0=True, blocksize=BLOCK.get(layout))
    out, pb = vjp(st.matmul, A, np.ones((6, 2)))
    dA, dX = pb(np.ones((4, 2)))
    assert dA.nnz == 0 and dA.layout == A.layout
    np.testing.assert_array_equal(dX, 0)


def test_matmul_mixed_dtypes_and_float32():
    rng = np.random.default_rng(3)
    A = make(rng, "csr", (5, 4), dtype=np.float32)
    X = _rand(rng, (4, 3), np.float64)
    out, pb = vjp(st.matmul, A, X)
    dA, dX = pb(np.ones(out.shape))
    assert dA.dtype == np.float32 and dX.dtype == np.float64
    np.testing.assert_allclose(dA.to_dense(), (np.ones((5, 3)) @ X.T) * (A.to_dense() != 0), rtol=1e-6)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_bmm_batched(layout):
    rng = np.random.default_rng(4)
    A = make(rng, layout, (2, 4, 4), batch_dim=1, blocksize=BLOCK.get(layout))
    check(st.bmm, A, _rand(rng, (2, 4, 3), np.float64), rng=rng)
    check(st.matmul, A, _rand(rng, (4, 3), np.float64), rng=rng)  # broadcast dense factor


def test_matmul_broadcast_sparse_factor():
    rng = np.random.default_rng(5)
    A = make(rng, "csr", (4, 5))
    check(st.matmul, A, _rand(rng, (3, 5, 2), np.float64), rng=rng)


def test_matmul_batched_coo():
    rng = np.random.default_rng(6)
    A = make(rng, "coo", (2, 3, 4))
    check(st.matmul, A, _rand(rng, (2, 4, 2), np.float64), rng=rng)


@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("csr", "csc"), ("coo", "coo"), ("csc", "csc"),
                                   ("bsr", "bsr")])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_matmul_sparse_sparse(la, lb, dtype):
    rng = np.random.default_rng(7)
    A = make(rng, la, (4, 6), dtype=dtype, blocksize=BLOCK.get(la))
    B = make(rng, lb, (6, 4), dtype=dtype, blocksize=BLOCK.get(lb))
    dA, dB = check(st.matmul, A, B, rng=rng)
    assert dA.nnz == A.nnz and dB.nnz == B.nnz


@pytest.mark.parametrize("layout", LAYOUTS)
def test_addmm(layout):
    rng = np.random.default_rng(8)
    A = make(rng, layout, (4, 6), blocksize=BLOCK.get(layout))
    check(st.addmm, _rand(rng, (1, 3), np.float64), A, _rand(rng, (6, 3), np.float64), rng=rng,
          kwargs=dict(beta=0.5, alpha=2.0))
    check(st.addmm, _rand(rng, (4, 4), np.float64), A, make(rng, layout, (6, 4), blocksize=BLOCK.get(layout)),
          rng=rng, kwargs=dict(alpha=-1.5))


@pytest.mark.parametrize("layout", ["csr", "csc"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_sampled_addmm(layout, dtype):
    rng = np.random.default_rng(9)
    S = make(rng, layout, (4, 5), dtype=dtype)
    check(st.sampled_addmm, S, _rand(rng, (4, 3), dtype), _rand(rng, (3, 5), dtype), rng=rng,
          kwargs=dict(beta=0.5, alpha=1.5))


# -- elementwise -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout,idt", _layout_params())
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_add_sub_mul(layout, idt, dtype):
    rng = np.random.default_rng(10)
    kw = dict(dtype=dtype, index_dtype=idt, blocksize=BLOCK.get(layout))
    a, b = make(rng, layout, (4, 6), **kw), make(rng, layout, (4, 6), **kw)
    D = _rand(rng, (4, 6), dtype)
    check(st.add, a, b, rng=rng, kwargs=dict(alpha=2.0))
    check(st.sub, a, b, rng=rng)
    check(st.add, a, D, rng=rng)
    check(st.sub, D, a, rng=rng)
    check(st.mul, a, b, rng=rng)
    check(st.mul, a, D, rng=rng)
    check(st.mul, D[0], a, rng=rng)  # broadcast dense factor
    check(st.mul, a, 2.5, rng=rng)
    check(st.div, a, D, rng=rng)
    check(st.div, a, 4.0, rng=rng)


def test_add_mixed_layouts_and_hybrid():
    rng = np.random.default_rng(11)
    a = make(rng, "coo", (4, 6, 2), dense_dim=1)
    b = make(rng, "coo", (4, 6, 2), dense_dim=1)
    check(st.add, a, b, rng=rng)
    check(st.mul, a, b, rng=rng)
    c = make(rng, "csr", (4, 6))
    check(st.add, c, make(rng, "coo", (4, 6)), rng=rng)


def test_uncoalesced_duplicates():
    rng = np.random.default_rng(12)
    a = st.sparse_coo_tensor([[0, 1, 0, 2], [1, 0, 1, 2]], [1.0, 2.0, 3.0, -1.5], size=(3, 3))
    assert not a.is_coalesced()
    dA, dX = check(st.matmul, a, _rand(rng, (3, 2), np.float64), rng=rng)
    np.testing.assert_array_equal(dA.indices(), a.indices())  # the argument's own pattern, duplicates kept
    check(st.ops.pointwise.sin, a, rng=rng)
    check("coalesce", a, rng=rng)
    check("to_dense", a, rng=rng)
    check(st.mul, a, a.coalesce(), rng=rng)
    # over dense dims a reduction keeps the entries, repeats too: each entry's own cotangent
    h = st.sparse_coo_tensor([[0, 1, 0], [1, 0, 1]], rng.standard_normal((3, 2, 3)), size=(2, 2, 2, 3))
    for dims in (-1, 2, (2, 3)):
        for keepdim in (False, True):
            check(st.ops.reduce.sum, h, dims, keepdim, rng=rng)
            check(st.ops.reduce.mean, h, dims, keepdim, rng=rng)
            out, pull = vjp(lambda t: st.sum(st.sum(t, dims, keepdim)), h)
            np.testing.assert_array_equal(pull(1.0)[0].values(), np.ones((3, 2, 3)))


# -- unary ---------------------------------------------------------------------------------------
UNARY_REAL = ["neg", "abs", "sqrt", "square", "sin", "sinh", "tan", "tanh", "asin", "asinh", "atan", "atanh",
              "expm1", "log1p", "relu", "frac"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", UNARY_REAL)
def test_unary(layout, name):
    rng = np.random.default_rng(13)
    t = make(rng, layout, (4, 6), blocksize=BLOCK.get(layout))
    if name in ("sqrt", "log1p"):
        t = t._replace_values(np.abs(t.values()) + 0.5)
    if name in ("asin", "atanh"):
        t = t._replace_values(np.clip(t.values(), -0.5, 0.5) + 0.01)
    if name == "abs" and layout in ("bsr", "bsc"):  # no zeros inside the blocks (abs has no derivative at 0)
        t = t._replace_values(t.values() + 0.01 * (t.values() == 0))
    if name == "relu":
        t = t._replace_values(t.values() + 0.01 * np.sign(t.values()) + 0.01 * (t.values() == 0))
    check(getattr(st.ops.pointwise, name), t, rng=rng)


@pytest.mark.parametrize("name", ["neg", "abs", "sqrt", "square", "sin", "tanh", "expm1", "log1p", "conj",
                                  "real", "imag", "sgn"])
def test_unary_complex(name):
    rng = np.random.default_rng(14)
    t = make(rng, "csr", (3, 4), dtype=np.complex128)
    check(getattr(st.ops.pointwise, name), t, rng=rng)


def test_pow_and_scale():
    rng = np.random.default_rng(15)
    t = make(rng, "coo", (3, 4))
    t = t._replace_values(np.abs(t.values()) + 0.5)
    check(st.ops.pointwise.pow, t, 2.5, rng=rng)
    check("scale", t, -3.0, rng=rng)


@pytest.mark.parametrize("name", ["exp", "cos", "log", "sigmoid"])
def test_dense_gradient_ops_raise(name):
    t = make(np.random.default_rng(16), "csr", (3, 3))
    with pytest.raises(DenseGradientError, match=rf"{name}.*to_dense\(\)"):
        vjp(getattr(st.ops.pointwise, name), t)


# -- reductions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), (-1, False), ((0, 1), False)])
def test_sum(layout, dim, keepdim):
    rng = np.random.default_rng(17)
    t = make(rng, layout, (4, 6), blocksize=BLOCK.get(layout))
    check(st.ops.reduce.sum, t, dim, keepdim, rng=rng)
    check(st.ops.reduce.mean, t, dim, keepdim, rng=rng)


@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, False), (2, True), ((0, 2), False), (3, False),
                                         (None, False)])
def test_sum_hybrid_coo(dim, keepdim):
    rng = np.random.default_rng(18)
    t = make(rng, "coo", (3, 4, 2, 2), dense_dim=1)
    check(st.ops.reduce.sum, t, dim, keepdim, rng=rng)


@pytest.mark.parametrize("layout", ["csr", "bsr"])
@pytest.mark.parametrize("dim", [0, 1, 2, 3, (2, 3)])
def test_sum_batched_hybrid_compressed(layout, dim):
    rng = np.random.default_rng(19)
    t = make(rng, layout, (2, 4, 4, 2), batch_dim=1, dense_dim=1, blocksize=BLOCK.get(layout))
    check(st.ops.reduce.sum, t, dim, False, rng=rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_softmax(layout, log, dim):
    rng = np.random.default_rng(20)
    t = make(rng, layout, (4, 6), blocksize=BLOCK.get(layout))
    check(st.ops.reduce.log_softmax if log else st.ops.reduce.softmax, t, dim, rng=rng)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_along_a_batch_dim_whose_union_differs_in_nnz(log):
    # the sums along batch dim 0 have the union pattern of the batches: 1 entry in batch 0, 2 in batch 1
    crow = np.array([[[0, 1, 1], [0, 1, 1]], [[0, 1, 1], [0, 0, 1]]])
    col = np.array([[[0], [0]], [[0], [1]]])
    t = st.sparse_csr_tensor(crow, col, np.array([[[1.0], [2.0]], [[3.0], [4.0]]]), size=(2, 2, 2, 2))
    check("log_softmax" if log else "softmax", t, 0, rng=np.random.default_rng(22))


def test_softmax_hybrid_dense_dim():
    rng = np.random.default_rng(21)
    t = make(rng, "coo", (3, 4, 3), dense_dim=1)
    check("softmax", t, 2, rng=rng)
    check("log_softmax", t, 0, rng=rng)


# -- conversions, shape and indexing ---------------------------------------------------------------------
@pytest.mark.parametrize("layout,idt", _layout_params())
def test_to_dense_and_sparse_mask(layout, idt):
    rng = np.random.default_rng(22)
    t = make(rng, layout, (4, 6), index_dtype=idt, blocksize=BLOCK.get(layout))
    check("to_dense", t, rng=rng)
    check(st.sparse_mask, _rand(rng, (4, 6), np.float64), t, rng=rng, nondiff=(1,))
    check(st.sparse_mask, make(rng, "coo", (4, 6)), t, rng=rng, nondiff=(1,))
    check("values", t, rng=rng)


def test_from_dense():
    rng = np.random.default_rng(23)
    a = make(rng, "coo", (4, 6)).to_dense()
    for layout, bs in (("bsr", (2, 2)), ("coo", None), ("csc", None)):
        out, pb = vjp(st.from_dense, a, layout, blocksize=bs)
        G = out._replace_values(_rand(rng, out.values().shape, np.float64))
        ga = pb(G)[0]
        np.testing.assert_array_equal(ga, G.to_dense())


@pytest.mark.parametrize("src", LAYOUTS)
@pytest.mark.parametrize("dst", LAYOUTS)
def test_layout_conversions(src, dst):
    rng = np.random.default_rng(24)
    t = make(rng, src, (4, 6), blocksize=BLOCK.get(src))
    check("to_sparse", t, dst, rng=rng, kwargs=dict(blocksize=BLOCK.get(dst)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_transpose_and_mT(layout):
    rng = np.random.default_rng(25)
    t = make(rng, layout, (4, 6), blocksize=BLOCK.get(layout))
    check("mT", t, rng=rng)
    check("transpose", t, 0, 1, rng=rng)
    h = make(rng, "coo", (3, 4, 2, 3), dense_dim=2)
    check("transpose", h, 2, 3, rng=rng)
    check("transpose", h, 0, 1, rng=rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [0, 1])
def test_narrow_select_index_select(layout, dim):
    rng = np.random.default_rng(26)
    t = make(rng, layout, (4, 6), blocksize=BLOCK.get(layout), density=0.7)
    check("narrow", t, dim, 2, 2, rng=rng)
    if layout not in ("bsr", "bsc"):
        check("select", t, dim, 1, rng=rng)
        check("index_select", t, dim, np.array([3, 0, 3, 1]), rng=rng)
        check("index_select", t, dim, np.array([-1, 0, -1, 1]), rng=rng)  # negatives count from the end


def test_shape_ops_dense_and_batch_dims():
    rng = np.random.default_rng(27)
    h = make(rng, "coo", (4, 3, 4), dense_dim=1)
    check("narrow", h, 2, 1, 2, rng=rng)
    check("select", h, 2, 3, rng=rng)
    check("index_select", h, 2, np.array([1, 1, 0]), rng=rng)
    check("index_select", h, 2, np.array([-3, 1, -4]), rng=rng)
    b = make(rng, "csr", (3, 4, 4), batch_dim=1)
    check("narrow", b, 0, 1, 2, rng=rng)
    check("select", b, 0, 2, rng=rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [0, 1])
def test_cat(layout, dim):
    rng = np.random.default_rng(28)
    kw = dict(blocksize=BLOCK.get(layout))
    ts = [make(rng, layout, (4, 6), **kw), make(rng, layout, (4, 6), **kw), make(rng, layout, (4, 6), nnz0=True, **kw)]
    check(st.cat, ts, dim, rng=rng)



def test_cat_along_a_dense_dim_of_coo_entries_sharing_an_element():
    # both inputs store element (0, 1): the output holds it twice (each input's entry, padded), and each
    # entry's cotangent is its own (a lookup by coordinate summed them: dA doubled)
    A = st.sparse_coo_tensor(np.array([[0, 0], [0, 1]]), np.array([[1.0, 2.0], [3.0, 4.0]]), size=(1, 2, 2))
    B = st.sparse_coo_tensor(np.array([[0], [1]]), np.array([[5.0, 6.0]]), size=(1, 2, 2))
    W = np.arange(1.0, 9.0).reshape(1, 2, 4)
    _, pb = vjp(lambda a, b: np.sum(st.cat([a, b], 2).to_dense() * W), A, B)
    dA, dB = pb(1.0)
    np.testing.assert_array_equal(dA.values(), [[1.0, 2.0], [5.0, 6.0]])
    np.testing.assert_array_equal(dB.values(), [[7.0, 8.0]])
    out, pb = vjp(lambda a, b: st.cat([a, b], 2), A, B)
    dA, dB = pb(st.sparse_coo_tensor(out.indices(), W[tuple(out.indices())], size=out.shape, is_coalesced=False))
    np.testing.assert_array_equal(dB.values(), [[7.0, 8.0]])
    U = st.sparse_coo_tensor(np.array([[0, 0], [1, 1]]), np.array([[1.0, 2.0], [3.0, 4.0]]), size=(1, 2, 2))
    V = U._replace_values(2 * U.values())
    _, pb = vjp(lambda a, b: np.sum(st.cat([a, b], 2).to_dense() * W), U, V)  # equal index arrays, a repeat
    dA, dB = pb(1.0)
    np.testing.assert_array_equal(dA.values(), [[5.0, 6.0], [5.0, 6.0]])
    np.testing.assert_array_equal(dB.values(), [[7.0, 8.0], [7.0, 8.0]])


# -- embeddings -----------------------------------------------------------------------------------------
def test_embedding_rules():
    rng = np.random.default_rng(30)
    W = _rand(rng, (6, 3), np.float64)
    idx = np.array([[1, 4, 1], [0, 4, 4]])
    (gW, _) = check(st.autograd.embedding, W, idx, rng=rng)
    assert gW.layout == st.sparse_coo and gW.sparse_dim == 1 and gW.dense_dim == 1 and gW.nnz == 3
    off = np.array([0, 2, 2])
    check(st.autograd.embedding_bag, W, idx.reshape(-1), off, "mean", rng=rng)
    check(st.autograd.embedding_bag, W, idx, None, "sum", _rand(rng, idx.shape, np.float64), rng=rng)
    with pytest.raises(IndexError, match="out of range"):
        vjp(st.autograd.embedding, W, np.array([6]))
    with pytest.raises(TypeError, match="integer"):
        vjp(st.autograd.embedding, W, np.array([1.0]))


# -- bad input --------------------------------------------------------------------------------------
def test_bad_cotangents():
    rng = np.random.default_rng(29)
    a, b = make(rng, "csr", (4, 6)), make(rng, "csr", (4, 6))
    out, pb = vjp(st.mul, a, 2.0)
    with pytest.raises(ValueError, match="pattern"):
        pb(st.from_dense(np.ones((4, 6)), "csr"))
    with pytest.raises(ValueError, match="shape"):
        pb(np.ones((4, 5)))
    out, pb = vjp(st.matmul, a, np.ones((6, 2)))
    with pytest.raises(ValueError, match="shape"):
        pb(np.ones((4, 3)))
    with pytest.raises(TypeError, match="array"):
        pb(b)
    with pytest.raises(NotImplementedError, match="no derivative rule"):
        vjp(np.linalg.norm, a)


def test_integer_arguments_are_not_differentiated():
    a = st.sparse_csr_tensor([0, 1, 2], [0, 1], np.array([1, 2]), size=(2, 2))
    out, pb = vjp(st.matmul, a, np.ones((2, 1)))
    da, dx = pb(np.ones((2, 1)))
    assert da is None and dx.shape == (2, 1)
    np.testing.assert_array_equal(dx, [[1.0], [2.0]])


def test_doctests():
    import doctest

    import sparsetensor.autograd as ag

    result = doctest.testmod(ag, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0


def test_import_does_not_need_torch():
    import subprocess
    import sys

    code = "import sys, sparsetensor; sparsetensor.autograd.vjp; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-P", "-c", code], check=True)  # -P: never the source tree


def test_embeddings_doctests():
    import doctest

    import sparsetensor.autograd.embeddings as emb

    result = doctest.testmod(emb, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0


# -- uncoalesced COO: each duplicate owns its output entry ------------------------------------------------
def _finite_differences(loss, t, eps=1e-6):
    v = np.asarray(t.values(), dtype=np.float64)
    g = np.zeros(v.shape)
    for k in range(v.size):
        step = np.zeros(v.size)
        step[k] = eps
        step = step.reshape(v.shape)
        g.flat[k] = (loss(t._replace_values(v + step)) - loss(t._replace_values(v - step))) / (2 * eps)
    return g


@pytest.mark.parametrize("op", ["narrow", "select", "index_select", "cat", "narrow_dense"])
def test_entry_copying_ops_of_duplicates(op):
    C = st.sparse_coo_tensor([[0, 0, 1, 1], [1, 1, 2, 0]], np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 0.5], [4.0, 1.5]]),
                             size=(2, 3, 2))  # (0, 1) stored twice
    fwd = {"narrow": lambda t: st.narrow(t, 1, 1, 2), "select": lambda t: st.select(t, 0, 0),
           "index_select": lambda t: st.index_select(t, 1, np.array([1, 2, 1])),
           "cat": lambda t: st.cat([t, t], 1), "narrow_dense": lambda t: st.narrow(t, 2, 1, 1)}[op]

    def loss(t):
        v = fwd(t).values()
        return np.sum(v * np.arange(1, v.size + 1).reshape(v.shape))

    got = st.autograd.vjp(loss, C)[1](1.0)[0]
    np.testing.assert_allclose(np.asarray(got.values()), _finite_differences(loss, C), atol=1e-6)


# -- zero batches: a batched compressed tensor with no elements at all ----------------------------------------
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
@pytest.mark.parametrize("batch", [(0,), (2, 0)], ids=["b0", "b2x0"])
def test_zero_batches(layout, batch):
    """Every pullback of a tensor with zero batches gives empty cotangents of its pattern."""
    t = st.from_dense(np.zeros(batch + (2, 4)), layout, batch_dim=len(batch),
                      blocksize=(1, 2) if layout == "bsr" else None)
    assert t.values().size == 0
    for fn in ("to_dense", st.sum, lambda y: st.sum(y, -1), lambda y: st.select(y, -2, 1), lambda y: st.cat([y, y], -2),
               lambda y: st.narrow(y, -2, 1, 1), st.sin, lambda y: st.matmul(y, np.ones((4, 2))),
               lambda y: st.softmax(y, -1)):
        check(fn, t)


# -- a compressed tensor built without the check: duplicates are summed, as in an uncoalesced coo tensor ------
@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_unchecked_compressed_with_duplicates(layout):
    """Each stored element (duplicates and unsorted rows included) gets the cotangent at its coordinate;
    indices out of bounds still raise."""
    make_t = st.sparse_csr_tensor if layout == "csr" else st.sparse_csc_tensor
    size = (3, 4) if layout == "csr" else (4, 3)
    t = make_t(np.array([0, 2, 3, 5]), np.array([1, 1, 0, 3, 2]), np.array([1.0, -2.5, 3.0, 0.5, -1.0]), size=size,
               check_invariants=False)  # line 0 holds index 1 twice, line 2 is unsorted
    for fn in (st.abs, st.sin, "to_dense", st.sum, lambda y: st.sum(y, 1),
               lambda y: st.matmul(y, np.ones((size[1], 2)))):
        check(fn, t)
    bad = make_t(np.array([0, 2, 3, 5]), np.array([1, 9, 0, 3, 2]), np.ones(5), size=size, check_invariants=False)
    with pytest.raises(st.InvariantError, match="5.5"):
        vjp("to_dense", bad)[1](np.ones(size))


def test_add_with_a_broadcasting_dense_operand():
    """The cotangents of sparse + dense whose operands broadcast: the dense one summed over what it
    was stretched along, the sparse one read at its pattern after the same sum."""
    t = st.from_dense(np.array([[1.0, 0, 2], [0, 3, 0]]), "csr")
    row = np.array([10.0, 20.0, 30.0])
    G = np.arange(6.0).reshape(2, 3)
    out, pull = st.autograd.vjp(st.add, t, row)
    np.testing.assert_array_equal(out, t.to_dense() + row)
    gt, gr = pull(G)
    np.testing.assert_array_equal(gt.values(), G[t.to_dense() != 0])
    np.testing.assert_array_equal(gr, G.sum(0))
    v = st.sparse_coo_tensor([[0, 2]], [1.0, 2.0], size=(3,))
    out, pull = st.autograd.vjp(st.sub, np.ones((2, 3)), v)
    np.testing.assert_array_equal(out, np.ones((2, 3)) - v.to_dense())
    gd, gv = pull(G)
    np.testing.assert_array_equal(gd, G)
    np.testing.assert_array_equal(gv.values(), -G.sum(0)[[0, 2]])


def test_rounded_division_has_zero_gradients():
    """div with rounding_mode (and ``//``) is flat where it is differentiable: zero cotangents of the
    operands' shapes and patterns, as PyTorch gives (the rule refused rounding_mode= with TypeError)."""
    A = st.from_dense(np.array([[1.5, 0], [2.5, -3.5]]), "csr")
    d = np.array([2.0, -1.0])
    for fn in (lambda t, x: st.div(t, x, rounding_mode="floor"), lambda t, x: st.div(t, x, rounding_mode="trunc"),
               lambda t, x: t // x):
        out, pull = vjp(fn, A, d)
        np.testing.assert_array_equal(out.to_dense(), fn(A, d).to_dense())
        ga, gd = pull(out)
        assert ga.layout is A.layout and np.array_equal(ga.values(), np.zeros(3))
        np.testing.assert_array_equal(gd, np.zeros(2))
    out, pull = vjp(lambda t: st.sum(t // 2.0) + st.sum(t), A)
    np.testing.assert_array_equal(pull(np.float64(1.0))[0].values(), np.ones(3))


def test_batch_reduction_whose_batches_differ_in_nnz():
    """A sum over a batch dim whose result is COO (the kept batches would differ in nnz): each
    element of the compressed tensor gets the cotangent at its coordinates without the summed dim."""
    d = unequal_batch_unions()
    t = st.from_dense(d, "csr", batch_dim=2)
    out, pull = vjp(lambda x: st.sum(x, 0), t)
    assert out.layout is st.sparse_coo
    G = np.arange(32.0).reshape(2, 4, 4)
    (g,) = pull(G)  # a dense cotangent of the output's shape
    want = np.broadcast_to(G, d.shape)[d != 0]
    np.testing.assert_array_equal(np.sort(g.values().ravel()), np.sort(want))
    (g2,) = pull(out._replace_values(np.ones_like(out.values())))
    np.testing.assert_array_equal(g2.values(), np.ones_like(t.values()))


def test_zero_dim_array_factors_get_cotangents():
    """A 0-d array factor or divisor is an argument like any other: its cotangent is the sum over
    the pattern (it got None, silently, as Python scalars do); Python scalars still get None."""
    A = st.from_dense(np.array([[0.0, 2.0], [3.0, 0.0]]), "coo")
    s = np.array(2.0)
    G = A._replace_values(np.array([1.5, -0.5]))
    for fn, want in ((st.mul, 1.5 * 2 - 0.5 * 3), (lambda a, x: st.mul(x, a), 1.5 * 2 - 0.5 * 3),
                     (st.div, -(1.5 * 2 - 0.5 * 3) / 4)):
        out, pull = vjp(fn, A, s)
        ga, gs = pull(G)
        assert np.ndim(gs) == 0 and np.isclose(float(gs), want)
    out, pull = vjp(st.mul, A, 2.0)
    assert pull(G)[1] is None
