"""SciPy interop: zero-copy both ways where dtypes allow, repair of non-canonical input, clear refusals."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import sparsetensor as st
from conftest import INDEX_DTYPES, VALUE_DTYPES, random_dense

sp = pytest.importorskip("scipy.sparse")

SCIPY_DTYPES = [d for d in VALUE_DTYPES if d != np.float16]  # SciPy does not support float16


def scipy_matrix(rng, fmt, kind, dtype=np.float64, index_dtype=np.int32, shape=(12, 10)):
    a = random_dense(rng, blocks=(shape[0] // 2, shape[1] // 2), blocksize=(2, 2), dtype=dtype, nnz=7)
    cls = getattr(sp, f"{fmt}_{kind}")
    m = cls(a, blocksize=(2, 2)) if fmt == "bsr" else cls(a)
    if fmt == "coo":
        m.coords = tuple(c.astype(index_dtype) for c in m.coords)
    else:
        m.indices, m.indptr = m.indices.astype(index_dtype), m.indptr.astype(index_dtype)
    return a, m


@pytest.mark.parametrize("kind", ["array", "matrix"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr", "coo"])
def test_from_scipy_zero_copy_and_back(rng, fmt, kind, index_dtype):
    a, m = scipy_matrix(rng, fmt, kind, index_dtype=index_dtype)
    t = st.from_scipy(m)
    assert t.layout.name == fmt and t.shape == m.shape and t.index_dtype == index_dtype
    assert np.shares_memory(t.values(), m.data)
    if fmt != "coo":
        assert np.shares_memory(t.compressed_indices(), m.indptr) and np.shares_memory(t.plain_indices(), m.indices)
        assert t.is_coalesced()
    if fmt == "bsr":
        assert t.blocksize == (2, 2)
    np.testing.assert_array_equal(t.to_dense(), a)
    back = t.to_scipy(kind)
    assert back.format == fmt and back.shape == m.shape
    assert (kind == "matrix") == isinstance(back, sp.spmatrix)
    assert np.shares_memory(back.data, t.values())
    if fmt == "coo":
        assert all(np.shares_memory(c, t.indices()) for c in back.coords)
        again = st.from_scipy(back)  # rows of one array: no copy of the indices
        assert np.shares_memory(again.indices(), t.indices())
    else:
        assert back.indices is t.plain_indices() and back.indptr is t.compressed_indices()
    np.testing.assert_array_equal(back.toarray(), a)


@pytest.mark.parametrize("dtype", SCIPY_DTYPES)
def test_value_dtypes_round_trip(rng, dtype):
    a, m = scipy_matrix(rng, "csr", "array", dtype=dtype)
    t = st.from_scipy(m)
    assert t.dtype == dtype
    np.testing.assert_array_equal(st.to_scipy(t).toarray(), a)


def test_unsupported_dtype():
    m = sp.csr_array(np.eye(3, dtype=np.uint16))
    with pytest.raises(TypeError, match="uint16"):
        st.from_scipy(m)
    with pytest.raises(TypeError, match="float16"):
        st.sparse_csr_tensor([0, 1], [0], np.ones(1, np.float16)).to_scipy()


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_non_canonical_input_is_repaired(fmt):
    indptr = np.array([0, 3, 4], np.int32)
    indices = np.array([2, 0, 2, 1], np.int32)
    data = np.array([1.0, 2.0, 3.0, 4.0])
    cls = sp.csr_array if fmt == "csr" else sp.csc_array
    m = cls((data, indices, indptr), shape=(2, 3) if fmt == "csr" else (3, 2))
    t = st.from_scipy(m)
    t.check_invariants()
    assert t.is_coalesced()
    np.testing.assert_array_equal(t.to_dense(), m.toarray())
    np.testing.assert_array_equal(indices, [2, 0, 2, 1])  # SciPy's arrays untouched


@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr"])
def test_rows_of_repeats_longer_than_the_plain_size_are_repaired(fmt):
    # a row of more entries than columns (5.3's upper bound) can only hold repeats: SciPy allows it
    indptr, indices = np.array([0, 4, 5]), np.array([1, 0, 1, 1, 0])
    data = np.arange(1.0, 6.0)
    if fmt == "bsr":
        m = sp.bsr_array((np.arange(20.0).reshape(5, 2, 2), indices, indptr), shape=(4, 4))
    else:
        m = (sp.csr_array if fmt == "csr" else sp.csc_array)((data, indices, indptr), shape=(2, 2))
    t = st.from_scipy(m)
    t.check_invariants()
    assert t.is_coalesced()
    np.testing.assert_array_equal(t.to_dense(), m.toarray())
    bad = m.copy()
    bad.indices[-1] = 7
    with pytest.raises(st.InvariantError) as e:  # the repair's own check: any other fault raises
        st.from_scipy(bad)
    assert e.value.invariant == "5.5"


@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_bsr_eliminate_zeros_leaves_the_tensor_alone(kind):
    # SciPy's bsr eliminate_zeros moves the kept blocks before it writes the (read-only) indices
    t = st.sparse_bsr_tensor([0, 2], [0, 1], np.array([[[0.0]], [[5.0]]]), size=(1, 2))
    m = st.to_scipy(t, kind)
    with pytest.raises(ValueError, match="m.copy()"):
        m.eliminate_zeros()
    np.testing.assert_array_equal(t.values().ravel(), [0.0, 5.0])
    np.testing.assert_array_equal(t.to_dense(), [[0.0, 5.0]])
    for c in (m.copy(), pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):  # arrays of their own: SciPy's
        c.eliminate_zeros()
        assert c.nnz == 1 and c.toarray().tolist() == [[0.0, 5.0]]


_REWRITING = {
    "resize rows": lambda m: m.resize((2, 4)), "resize columns": lambda m: m.resize((4, 2)),
    "resize both": lambda m: m.resize(2, 2), "eliminate_zeros": lambda m: m.eliminate_zeros(),
    "sum_duplicates": lambda m: (setattr(m, "has_canonical_format", False), m.sum_duplicates()),
    "sort_indices": lambda m: (setattr(m, "has_sorted_indices", False), m.sort_indices()),
}


@pytest.mark.parametrize("kind", ["array", "matrix"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr"])
@pytest.mark.parametrize("call", list(_REWRITING))
def test_scipy_methods_that_rewrite_indices_refuse_before_they_start(fmt, kind, call):
    """A to_scipy result's in-place index rewrites raise ValueError before anything changes: SciPy's
    own refusal of the read-only arrays came partway (a shrinking csr/csc resize had cut indptr and
    indices, and the matrix's next use read out of bounds: a crash), or as NumPy's WRITEBACKIFCOPY
    error; a copy does the work; a growing or same-shape resize (new arrays, or none) still works."""
    a = np.array([[1.0, 0, 2, 0], [0, 0, 3, 0], [4, 5, 0, 6], [0, 0, 0, 7]])
    t = st.from_dense(a, fmt, **({"blocksize": (2, 2)} if fmt == "bsr" else {}))
    m = st.to_scipy(t, kind)
    with pytest.raises(ValueError, match=r"m\.copy\(\)"):
        _REWRITING[call](m)
    np.testing.assert_array_equal(m.toarray(), a)
    m.check_format(full_check=True)
    np.testing.assert_array_equal(t.to_dense(), a)
    t.check_invariants()
    c = m.copy()
    _REWRITING[call](c)
    assert c.shape in ((2, 4), (4, 2), (2, 2), (4, 4))
    m = st.to_scipy(t, kind)
    m.sum_duplicates()  # canonical already: nothing to do, no refusal
    m.sort_indices()
    m.resize(4, 4)
    if fmt != "bsr":  # SciPy resizes no bsr matrix
        m.resize((5, 6))
        np.testing.assert_array_equal(m.toarray()[:4, :4], a)
    np.testing.assert_array_equal(t.to_dense(), a)


@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr"])
def test_storage_past_indptr_end_is_spare_room(fmt):
    """SciPy's nnz is indptr[-1]: index and data arrays longer than that are valid there (spare room
    that check_format prunes); the tensor takes the first nnz entries, without a copy."""
    a = np.array([[1.0, 0, 2, 0], [0, 0, 3, 0], [4, 5, 0, 6], [0, 0, 0, 7]])
    m = {"csr": sp.csr_array, "csc": sp.csc_array}[fmt](a) if fmt != "bsr" else sp.bsr_array(a, blocksize=(2, 2))
    n = m.indptr[-1]
    m.indices = np.concatenate([m.indices, np.zeros(3, m.indices.dtype)])
    m.data = np.concatenate([m.data, np.full((3,) + m.data.shape[1:], 99.0)])
    t = st.from_scipy(m)
    np.testing.assert_array_equal(t.to_dense(), a)
    assert t.values().shape[0] == n and np.shares_memory(t.values(), m.data)
    np.testing.assert_array_equal(t.to_scipy().toarray(), a)


def test_invalid_input_is_rejected():
    m = sp.csr_array((np.ones(2), np.array([0, 5]), np.array([0, 1, 2])), shape=(2, 6))
    m.indices[1] = 9  # out of range, behind SciPy's back
    with pytest.raises(st.InvariantError) as e:
        st.from_scipy(m)
    assert e.value.invariant == "5.5"


def test_coo_duplicates_and_nd():
    m = sp.coo_array((np.array([1.0, 2.0, 3.0]), (np.array([0, 0, 1]), np.array([1, 1, 0]))), shape=(2, 2))
    t = st.from_scipy(m)
    assert not t.is_coalesced()
    np.testing.assert_array_equal(t.to_dense(), m.toarray())
    m3 = sp.coo_array((np.array([1.0, 2.0]), (np.array([0, 1]), np.array([1, 0]), np.array([2, 0]))),
                      shape=(2, 2, 3))
    t3 = st.from_scipy(m3)
    assert t3.shape == (2, 2, 3)
    np.testing.assert_array_equal(t3.to_dense(), m3.toarray())
    np.testing.assert_array_equal(st.to_scipy(t3).toarray(), m3.toarray())


def test_coo_flagged_canonical_by_hand_stays_uncoalesced():
    m = sp.coo_array((np.array([1.0, 2.0]), (np.array([0, 0]), np.array([1, 1]))), shape=(2, 2))
    m.has_canonical_format = True  # set by hand on duplicates: was InvariantError C6
    t = st.from_scipy(m)
    assert not t.is_coalesced()
    np.testing.assert_array_equal(t.to_dense(), [[0.0, 3.0], [0.0, 0.0]])


@pytest.mark.parametrize("make", [sp.csr_array, sp.dok_array, sp.coo_array])
def test_one_dimensional_arrays_become_1d_coo(make):
    m = make(np.array([0.0, 1.0, 0.0, 2.0]))  # SciPy's 1-d sparse arrays
    t = st.from_scipy(m)
    assert t.layout is st.sparse_coo and t.shape == (4,)
    np.testing.assert_array_equal(t.to_dense(), [0.0, 1.0, 0.0, 2.0])


def test_scipy_operands_name_the_conversion():
    t = st.from_dense(np.eye(2), "csr")
    m = sp.csr_array(np.eye(2))
    for op in (lambda: t @ m, lambda: t + m, lambda: t * m, lambda: st.matmul(t, m), lambda: st.add(t, m)):
        with pytest.raises(TypeError, match="from_scipy"):
            op()


def test_other_formats_go_through_csr():
    m = sp.dia_array(np.diag([1.0, 2.0, 3.0]))
    t = st.from_scipy(m)
    assert t.layout is st.sparse_csr
    np.testing.assert_array_equal(t.to_dense(), np.diag([1.0, 2.0, 3.0]))


def test_to_scipy_refusals():
    batched = st.from_dense(np.eye(3)[None].repeat(2, 0), "csr", batch_dim=1)
    with pytest.raises(ValueError, match="batched"):
        batched.to_scipy()
    hybrid = st.from_dense(np.ones((2, 2, 3)), "csr", dense_dim=1)
    with pytest.raises(ValueError, match="hybrid"):
        hybrid.to_scipy()
    bsc = st.from_dense(np.eye(4), "bsc", blocksize=(2, 2))
    with pytest.raises(NotImplementedError, match="BSC"):
        bsc.to_scipy()
    np.testing.assert_array_equal(bsc.mT.to_scipy().toarray(), np.eye(4))
    with pytest.raises(ValueError, match="2-d"):
        st.sparse_coo_tensor([[0]], [1.0], (3,)).to_scipy("matrix")
    with pytest.raises(TypeError):
        st.from_scipy(np.eye(2))


# -- exits check a never-checked tensor first (issue 11: SciPy trusts indptr/indices) -------------
def test_to_scipy_checks_unchecked_tensors_once():
    bad = st.sparse_csr_tensor(np.array([0, 2, 2**62, 3]), np.array([0, 1, 2]), np.array([1., 2., 3.]), (3, 3),
                               check_invariants=False)
    for t in (bad, bad.mT):  # the transposed view was the SIGSEGV inside SciPy
        with pytest.raises(st.InvariantError) as e:
            t.to_scipy().toarray()
        assert e.value.invariant == "5.3"
    coo = st.sparse_coo_tensor([[0, 5]], [1.0, 2.0], size=(3,), check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        coo.to_scipy()
    assert e.value.invariant == "C5"
    ok = st.sparse_csr_tensor(np.array([0, 2, 2, 3]), np.array([0, 1, 2]), np.array([1., 2., 3.]), (3, 3),
                              check_invariants=False)
    assert not ok.is_coalesced()
    m = ok.to_scipy()
    assert ok.is_coalesced() and np.shares_memory(m.data, ok.values())  # checked once, cached, still zero-copy
    unsorted = st.sparse_csr_tensor(np.array([0, 2, 2, 3]), np.array([1, 0, 2]), np.array([1., 2., 3.]), (3, 3),
                                    check_invariants=False)
    m = unsorted.to_scipy()  # repaired (a copy): the only fault is 5.6
    np.testing.assert_array_equal(m.toarray(), [[2, 1, 0], [0, 0, 0], [0, 0, 3]])
    assert m.has_canonical_format and not unsorted.is_coalesced()


@pytest.mark.parametrize("order", [">", "<"])
def test_constructors_take_byte_swapped_members(order):
    idx = np.array([0, 2, 3], dtype=order + "i8")
    col = np.array([0, 1, 1], dtype=order + "i4").astype(order + "i8")
    val = np.array([1.0, 2.0, 3.0], dtype=order + "f8")
    t = st.sparse_csr_tensor(idx, col, val, (2, 2))  # a documented copy in native order
    assert all(a.dtype.isnative for a in (t.crow_indices(), t.col_indices(), t.values()))
    np.testing.assert_array_equal(t.to_dense(), [[1, 2], [0, 3]])
    c = st.sparse_coo_tensor(np.array([[1, 0]], dtype=order + "i4"), val[:2], (2,))
    assert c.indices().dtype == np.int32 and c.indices().dtype.isnative


def test_a_0d_tensor_to_scipy_is_a_clear_error():
    with pytest.raises(ValueError, match="0-d"):
        st.to_scipy(st.from_dense(np.array(2.0), "coo"))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_from_scipy_refuses_indices_that_are_not_integers(fmt, tmp_path):
    """Float index arrays (SciPy only warns) raise TypeError instead of being truncated (1.9 -> 1);
    uint64 ones past int64 a ValueError naming the value (a cast wrapped it to -1). The same
    through st.load of SciPy's npz."""
    import scipy.sparse as sp

    m = getattr(sp, f"{fmt}_array")(np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]]))
    if fmt == "coo":
        m.coords = (m.coords[0].astype(np.float64) + 0.5, m.coords[1])
    else:
        m.indices = m.indices.astype(np.float64) + 0.5
    with pytest.raises(TypeError, match="not integers"):
        st.from_scipy(m)
    if fmt != "coo":
        sp.save_npz(tmp_path / "m.npz", m, compressed=False)
        with pytest.raises(TypeError, match="not integers"):
            st.load(tmp_path / "m.npz")
        m.indices = np.array([0, 2, np.iinfo(np.uint64).max], np.uint64)
        m.indptr = m.indptr.astype(np.uint64)
        with pytest.raises(ValueError, match="18446744073709551615"):
            st.from_scipy(m)
