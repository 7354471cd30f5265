"""``op(t)`` equals ``op(t.to_dense())`` where shortcuts could break it: the duplicates of an
uncoalesced COO tensor (bool merges by or, integers wrap in their own width, inf - inf), a
coalesced flag given without a check, ``div``'s rounding modes, and edge shapes (0-d, no
sparse dim, no input features)."""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from conftest import LAYOUTS, layout_tensor

# one element written twice: (0, 1) holds a + b in the dense view
IDX = np.array([[0, 0, 1, 2], [1, 1, 0, 2]])


def _dup(values, dtype):
    return st.sparse_coo_tensor(IDX, np.array(values, dtype=dtype), size=(3, 3))


DUPS = [
    pytest.param([True, True, True, False], np.bool_, id="bool"),
    pytest.param([100, 100, 7, -3], np.int8, id="int8-wraps"),
    pytest.param([200, 100, 7, 3], np.uint8, id="uint8-wraps"),
    pytest.param([2.0, -2.0, 3.0, 0.5], np.float64, id="float-cancels"),
]


@pytest.mark.parametrize("values,dtype", DUPS)
def test_reductions_of_duplicates(values, dtype):
    t = _dup(values, dtype)
    d = t.to_dense()
    assert st.sum(t) == d.sum(dtype=np.int64 if d.dtype.kind in "biu" else None)
    np.testing.assert_array_equal(np.asarray(st.sum(t, 0).to_dense()), d.sum(0, dtype=st.sum(t, 0).dtype))
    np.testing.assert_array_equal(np.asarray(st.sum(t, 1).to_dense()), d.sum(1, dtype=st.sum(t, 1).dtype))
    assert st.mean(t) == pytest.approx(d.astype(np.float64).mean())
    assert st.sum(t, dtype=np.float64) == pytest.approx(d.astype(np.float64).sum())


@pytest.mark.parametrize("values,dtype", DUPS)
def test_linear_shortcuts_of_duplicates(values, dtype):
    t = _dup(values, dtype)
    d = t.to_dense()
    with np.errstate(all="ignore"):
        if dtype != np.bool_:
            np.testing.assert_array_equal((t * 3).to_dense(), d * np.array(3, dtype))
        np.testing.assert_allclose((t * 2.5).to_dense(), d * 2.5)
        np.testing.assert_allclose((t / 2).to_dense(), d / 2)
        np.testing.assert_allclose(st.deg2rad(t).to_dense(), np.deg2rad(d), rtol=1e-3)
        np.testing.assert_allclose(st.rad2deg(t).to_dense(), np.rad2deg(d), rtol=1e-3)
        np.testing.assert_array_equal(np.conj(t).to_dense(), np.conj(d))
        w = np.arange(1, 4, dtype=np.float64)
        np.testing.assert_allclose(st.mul(t, w).to_dense(), d * w)
        np.testing.assert_allclose(st.div(t, w).to_dense(), d / w)


def test_division_of_duplicates_by_zero_is_the_dense_quotient():
    u = st.sparse_coo_tensor([[0, 0, 1]], np.array([2.0, -1.0, 3.0]), size=(2,))  # dense [1, 3]
    np.testing.assert_array_equal(st.div(u, np.array([0.0, 1.0])).to_dense(), [np.inf, 3.0])
    np.testing.assert_array_equal((u / 0).to_dense(), [np.inf, np.inf])


def test_unchecked_coalesced_flag_is_checked_before_it_is_trusted():
    lying = st.sparse_coo_tensor(np.array([[0, 1, 1]]), np.array([1.0, 2.0, 3.0]), size=(2,), is_coalesced=True,
                                 check_invariants=False)
    np.testing.assert_array_equal(lying.to_dense(), [1.0, 5.0])
    for op in (lambda c: c.coalesce(), lambda c: c * c, lambda c: st.softmax(c, 0), lambda c: st.sin(c),
               lambda c: st.amax(c, 0)):
        with pytest.raises(st.InvariantError) as e:
            op(lying)
        assert e.value.invariant == "C6"
    honest = st.sparse_coo_tensor(np.array([[0, 1]]), np.array([1.0, 2.0]), size=(2,), is_coalesced=True,
                                  check_invariants=False)
    assert honest.coalesce() is honest and honest._checked  # checked once, then trusted
    with pytest.raises(st.InvariantError) as e:  # a mask keeps its flag: checked before it is copied
        st.sparse_mask(np.ones(2), lying)
    assert e.value.invariant == "C6"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint8, np.float32, np.float64])
@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_rounding_modes(layout, dtype, mode):
    t, a = layout_tensor(layout, dtype=np.float64, seed=3)
    a = np.round(a * 7) if dtype != np.uint8 else np.round(np.abs(a) * 7)
    t = st.from_dense(a.astype(dtype), layout, **({"blocksize": t.blocksize} if layout in ("bsr", "bsc") else {}))
    a = a.astype(dtype)
    rnd = np.floor if mode == "floor" else np.trunc
    for divisor in ([3, 2.5] if dtype == np.uint8 else [3, -4, 2.5]):
        got = st.div(t, divisor, rounding_mode=mode)
        assert got.layout == t.layout
        ref = rnd(a.astype(np.float64) / divisor)
        np.testing.assert_array_equal(got.to_dense(), ref)
        if isinstance(divisor, int):
            assert got.dtype == np.result_type(a, divisor)  # integers stay integers
    w = np.arange(1, a.shape[1] + 1).astype(dtype)
    got = st.div(t, w, rounding_mode=mode)
    np.testing.assert_array_equal(got.to_dense(), rnd(a.astype(np.float64) / w.astype(np.float64)))


def test_div_rounding_duplicates_and_zero_divisors():
    u = st.sparse_coo_tensor([[0, 0, 1]], np.array([4, 3, -7]), size=(2,))  # dense [7, -7]
    np.testing.assert_array_equal(st.div(u, 2, rounding_mode="floor").to_dense(), [3, -4])
    np.testing.assert_array_equal(st.div(u, 2, rounding_mode="trunc").to_dense(), [3, -3])
    with pytest.raises(ZeroDivisionError):
        st.div(u, 0, rounding_mode="floor")
    with pytest.raises(ZeroDivisionError):
        st.div(u, np.array([1, 0]), rounding_mode="trunc")
    e = st.sparse_coo_tensor(np.zeros((1, 0), np.int64), np.zeros(0, np.int32), size=(2,))
    for mode in ("floor", "trunc"):  # no specified element divides by 0 (PyTorch's empty result)
        r = st.div(e, 0, rounding_mode=mode)
        assert r.nnz == 0 and r.dtype == np.int32
    f = st.sparse_coo_tensor([[0, 1]], np.array([1.0, -1.0]), size=(3,))
    np.testing.assert_array_equal(st.div(f, 0.0, rounding_mode="floor").to_dense(), [np.inf, -np.inf, 0])


def test_add_dense_to_coo_without_sparse_dims():
    x = st.sparse_coo_tensor(np.zeros((0, 1), np.int64), np.array([[1.0, 2.0, 3.0]]), size=(3,))
    np.testing.assert_array_equal(x + np.ones(3), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(np.ones(3) - x, [0.0, -1.0, -2.0])
    np.testing.assert_array_equal(st.add(x, np.ones(3), alpha=2), [3.0, 4.0, 5.0])  # x + 2 * other
    empty = st.sparse_coo_tensor(np.zeros((0, 0), np.int64), np.zeros((0, 3)), size=(3,))
    np.testing.assert_array_equal(empty + np.ones(3), np.ones(3))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_linear_without_input_features(layout):
    kw = {"blocksize": (1, 1)} if layout in ("bsr", "bsc") else {}
    w = st.from_dense(np.zeros((5, 0)), layout, **kw)
    y = st.linear(np.zeros((4, 0)), w)
    assert y.shape == (4, 5) and not y.any()
    assert st.linear(np.zeros((2, 4, 0)), w).shape == (2, 4, 5)


def test_from_dense_of_a_scalar_is_0d():
    for x, nnz in ((np.float64(3.0), 1), (np.array(0.0), 0), (np.array(5, np.int32), 1)):
        t = st.from_dense(x, "coo")
        assert t.shape == () and t.nnz == nnz
        t.check_invariants()
        assert t.to_dense() == x and st.sum(t) == x


def test_narrowing_the_index_dtype_never_wraps():
    bad = st.sparse_csr_tensor(np.array([0, 1, 2]), np.array([0, 2**32 + 1]), np.array([1.0, 2.0]), size=(2, 3),
                               check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        bad.to(index_dtype=np.int32)
    assert e.value.invariant == "5.5"
    coo = st.sparse_coo_tensor(np.array([[0, 2**32 + 1]]), np.array([1.0, 2.0]), size=(3,), check_invariants=False)
    with pytest.raises(st.InvariantError):
        coo.to(index_dtype=np.int32)
    ok = st.sparse_csr_tensor(np.array([0, 1, 2]), np.array([0, 2]), np.array([1.0, 2.0]), size=(2, 3),
                              check_invariants=False)
    assert ok.to(index_dtype=np.int32).index_dtype == np.int32


@pytest.mark.parametrize("threads", [1.5, "4", np.float64(2)])
def test_threads_must_be_integers(threads):
    t, _ = layout_tensor("csr")
    with pytest.raises(TypeError, match="integer"):
        st.sum(t, 0, threads=threads)
    with pytest.raises(TypeError, match="integer"):
        t.to_sparse_coo(threads=threads)
    assert st.sum(t, 0, threads=np.int64(2)).shape == (t.shape[1],)


def test_byte_swapped_dense_inputs_are_read_as_native():
    a = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=">f8")
    t = st.from_dense(a, "csr")
    assert t.dtype == np.float64 and (t.to_dense() == a).all()
    np.testing.assert_array_equal(st.matmul(t, np.ones((2, 2), ">f8")), a @ np.ones((2, 2)))
    sp = pytest.importorskip("scipy.sparse")
    m = sp.csr_array(a.astype(np.float64))
    m.data = m.data.astype(">f8")
    assert (st.from_scipy(m).to_dense() == a).all()


def test_linear_shortcuts_of_unchecked_compressed_duplicates():
    # a csr built without a check, column 1 of row 0 stored twice: coalesced like a COO tensor
    c = st.sparse_csr_tensor(np.array([0, 2, 3]), np.array([1, 1, 0]), np.array([True, True, True]), size=(2, 2),
                             check_invariants=False)
    d = c.to_dense()
    np.testing.assert_allclose(st.deg2rad(c).to_dense(), np.deg2rad(d), rtol=1e-3)
    np.testing.assert_array_equal((c * 2).to_dense(), d * 2)
