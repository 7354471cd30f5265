"""Issue 34, item 1: index members are immutable once they belong to a tensor.

Every way the library hands out index memory (the accessors, SciPy arrays, PyTorch tensors'
sources, results of ops and in-place ops) gives read-only arrays, so nothing done through the
library's API after a check can make a checked tensor invalid; values stay writeable; the
library's own in-place ops keep working."""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st

from conftest import layout_tensor

LAYOUTS = ["coo", "csr", "csc", "bsr", "bsc"]


def _index_members(t):
    if t.layout.name == "coo":
        return [t.indices()]
    return [t.compressed_indices(), t.plain_indices(),
            *(getattr(t, n)() for n in (t.layout.compressed_name, t.layout.plain_name))]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_accessors_are_read_only_values_writeable(layout, index_dtype):
    t, a = layout_tensor(layout, index_dtype=index_dtype, batch=(2,) if layout != "coo" else (), dense=(3,))
    for idx in _index_members(t):
        assert not idx.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            idx[..., 0] = 10**6
    t.check_invariants()  # still valid
    v = t.values()
    assert v.flags.writeable
    v *= 2  # users scale values in place
    np.testing.assert_array_equal(t.to_dense(), 2 * a)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_results_of_ops_hold_read_only_indices(layout):
    t, a = layout_tensor(layout)
    results = [t.clone(), t * 2.0, t + t, t.to_sparse("coo"), t.to_sparse("csr"), t.mT, t.coalesce(),
               t.narrow(0, 0, 2), st.from_dense(a, layout, blocksize=(2, 2) if layout[0] == "b" else None),
               t.to(index_dtype=np.int32), t.astype(np.float32)]
    for r in results:
        for idx in _index_members(r):
            assert not idx.flags.writeable, (layout, r.layout.name)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_in_place_ops_still_work(layout):
    t, a = layout_tensor(layout)
    u, b = layout_tensor(layout, seed=1)
    t.copy_(u)
    np.testing.assert_array_equal(t.to_dense(), b)
    assert all(not idx.flags.writeable for idx in _index_members(t))
    t.zero_()
    assert t.nnz == 0 and not t.to_dense().any()
    assert all(not idx.flags.writeable for idx in _index_members(t))
    t.check_invariants()


def test_user_arrays_are_not_frozen_but_the_tensor_is():
    crow, col, val = np.array([0, 1, 2]), np.array([1, 0]), np.array([1.0, 2.0])
    t = st.sparse_csr_tensor(crow, col, val, size=(2, 2))
    assert crow.flags.writeable and col.flags.writeable  # the caller's arrays keep their flags
    assert np.shares_memory(t.col_indices(), col)  # no copy
    assert not t.col_indices().flags.writeable


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr"])
def test_to_scipy_index_arrays_are_read_only(layout):
    pytest.importorskip("scipy")
    t, a = layout_tensor(layout)
    m = t.to_scipy()
    idx = [m.coords[0], m.coords[1]] if layout == "coo" else [m.indices, m.indptr]
    assert all(not i.flags.writeable for i in idx)
    assert m.data.flags.writeable
    if layout != "coo":
        m.data[0] = 0
        with pytest.raises(ValueError):  # SciPy refuses to rewrite read-only indices in place
            m.eliminate_zeros()
        t.check_invariants()
    np.testing.assert_array_equal(m.copy().toarray(), t.to_dense())


def test_to_torch_shares_read_only_indices_without_warning():
    torch = pytest.importorskip("torch")
    import warnings

    t, _ = layout_tensor("csr")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "The given NumPy array is not writable")
        x = st.to_torch(t)
    assert x.col_indices().data_ptr() == t.col_indices().ctypes.data
    assert torch.equal(x.to_dense(), torch.from_numpy(t.to_dense()))


@pytest.mark.parametrize("layout", ["coo", "csr", "bsc"])
def test_a_read_only_index_view_cannot_be_made_writeable_again(layout):
    # NumPy lets a read-only view be made writeable where the memory it views is: the library's own index
    # memory is read-only at its root, so writes cannot reach it through the accessors (SciPy and PyTorch
    # trust a checked tensor's exports: a column written out of range there read out of bounds)
    t = st.from_dense(np.array([[1.0, 0, 2, 0], [0, 3, 0, 4]]), layout, **({"blocksize": (1, 2)} if layout == "bsc" else {}))
    members = [t.indices()] if layout == "coo" else [t.compressed_indices(), t.plain_indices()]
    for a in members:
        with pytest.raises(ValueError, match="WRITEABLE"):
            a.flags.writeable = True
        with pytest.raises(ValueError, match="read-only"):
            a[...] = 0
    c, p = np.array([0, 1, 2]), np.array([0, 1])
    st.sparse_csr_tensor(c, p, [1.0, 2.0], size=(2, 2))
    assert c.flags.writeable and p.flags.writeable  # a caller's own arrays stay as they were
