"""The masked gradient of sparse @ sparse (sparsetensor.autograd._masked): only the entries of the
operands' patterns are computed, never the full ``G @ B^H`` / ``A^H @ G``.

Oracle: the old rule, the full sparse products sampled at the operands' patterns
(``values_of(spgemm(G, B^H), A)``); the result must have exactly the operand's pattern (its own
index arrays, storage order and duplicates), and the pullback must not call spgemm at all.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.autograd import _masked, vjp
from sparsetensor.autograd._core import values_of
from sparsetensor.ops import spgemm as spgemm_module

from test_autograd import BLOCK, make

PAIRS = [("csr", "csr"), ("csr", "csc"), ("csc", "csr"), ("csc", "csc"), ("coo", "coo"), ("bsr", "bsr"),
         ("bsc", "bsc")]


def _adjoint(t):
    t = t._replace_values(np.conj(t.values())) if t.dtype.kind == "c" else t
    return t.mT


def _old(a, b, G):
    """The gradient as it was computed before: full products, then sampled at the patterns."""
    return (values_of(spgemm_module.spgemm(G, _adjoint(b)), a),
            values_of(spgemm_module.spgemm(_adjoint(a), G), b))


def _members(t):
    if isinstance(t, st.COOTensor):
        return [t.indices()]
    return [t.compressed_indices(), t.plain_indices()]


def _same_pattern(ct, t):
    assert ct.layout is t.layout and ct.shape == t.shape and ct.values().shape == t.values().shape
    for x, y in zip(_members(ct), _members(t)):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def _run(A, B, rng, monkeypatch):
    out, pullback = vjp(st.matmul, A, B)
    G = out._replace_values(rng.standard_normal(out.values().shape).astype(out.dtype))
    if out.dtype.kind == "c":
        G = G._replace_values(G.values() + 1j * rng.standard_normal(out.values().shape))
    want_a, want_b = _old(A, B, G)

    def refuse(*args, **kwargs):
        raise AssertionError("the masked gradient built a full sparse product")

    with monkeypatch.context() as m:
        m.setattr(spgemm_module, "spgemm", refuse)
        dA, dB = pullback(G)
    for ct, t, want in ((dA, A, want_a), (dB, B, want_b)):
        _same_pattern(ct, t)
        assert ct.dtype == t.dtype
        tol = 1e-5 if t.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(ct.values(), np.asarray(want).astype(t.dtype), rtol=tol, atol=tol)
    return dA, dB


@pytest.mark.parametrize("la,lb", PAIRS)
@pytest.mark.parametrize("idt", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_masked_equals_full_then_sampled(la, lb, idt, dtype, monkeypatch):
    rng = np.random.default_rng(11)
    A = make(rng, la, (6, 8), dtype=dtype, index_dtype=idt, density=0.4, blocksize=BLOCK.get(la))
    B = make(rng, lb, (8, 4), dtype=dtype, index_dtype=idt, density=0.4, blocksize=BLOCK.get(lb))
    _run(A, B, rng, monkeypatch)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
def test_masked_batched(layout, monkeypatch):
    rng = np.random.default_rng(12)
    A = make(rng, layout, (3, 4, 6), batch_dim=1, density=0.5, blocksize=BLOCK.get(layout))
    B = make(rng, layout, (3, 6, 4), batch_dim=1, density=0.5, blocksize=BLOCK.get(layout))
    _run(A, B, rng, monkeypatch)


def test_masked_uncoalesced_duplicates(monkeypatch):
    """Every stored duplicate of an uncoalesced coo operand gets its own (equal) entry."""
    rng = np.random.default_rng(13)
    A = st.sparse_coo_tensor([[0, 2, 0, 1, 2], [1, 0, 1, 3, 0]], [1.0, 2.0, 3.0, -1.0, 0.5], size=(3, 4))
    B = st.sparse_coo_tensor([[1, 0, 3, 1], [2, 0, 1, 2]], [2.0, -1.0, 4.0, 1.5], size=(4, 3))
    assert not A.is_coalesced() and not B.is_coalesced()
    dA, dB = _run(A, B, rng, monkeypatch)
    assert dA.values()[0] == dA.values()[2] and dA.values()[1] == dA.values()[4]
    assert dB.values()[0] == dB.values()[3]


def test_masked_empty_and_chunked(monkeypatch):
    """Empty operands give zeros; a chunk bound of a few pairs gives the result of one chunk."""
    rng = np.random.default_rng(14)
    A = make(rng, "csr", (5, 7), density=0.0, nnz0=True)
    B = make(rng, "csr", (7, 3), density=0.5)
    dA, dB = _run(A, B, rng, monkeypatch)
    assert dA.values().shape == (0,) and not dB.values().any()
    A = make(rng, "csr", (30, 20), density=0.3)
    B = make(rng, "csr", (20, 25), density=0.3)
    out, pullback = vjp(st.matmul, A, B)
    G = out._replace_values(rng.standard_normal(out.values().shape))
    whole = pullback(G)
    monkeypatch.setattr(_masked, "_PAIRS", 7)
    parts = pullback(G)
    for x, y in zip(whole, parts):
        np.testing.assert_allclose(x.values(), y.values(), rtol=1e-13, atol=1e-13)


def test_masked_dense_cotangent():
    """A dense cotangent of the product's shape is read at the product's pattern."""
    rng = np.random.default_rng(15)
    A = make(rng, "csr", (4, 5))
    B = make(rng, "csc", (5, 3))
    out, pullback = vjp(st.matmul, A, B)
    Gd = rng.standard_normal(out.shape)
    dA, dB = pullback(Gd)
    G = out._replace_values(values_of(Gd, out))
    want_a, want_b = _old(A, B, G)
    np.testing.assert_allclose(dA.values(), want_a, rtol=1e-12)
    np.testing.assert_allclose(dB.values(), want_b, rtol=1e-12)
