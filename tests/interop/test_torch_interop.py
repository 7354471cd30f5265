"""PyTorch interop: every layout both ways, sharing memory; copies only where documented; clean refusals."""

from __future__ import annotations

import contextlib
import doctest
import sys

import numpy as np
import pytest

import sparsetensor as st
import sparsetensor.interop.torch as sttorch
from conftest import HAVE_TORCH, INDEX_DTYPES, LAYOUTS, VALUE_DTYPES, random_dense, reference_compressed, requires_torch

if HAVE_TORCH:
    import torch

DIMS = [((), ()), ((2,), ()), ((), (2,)), ((2, 1), (3,))]  # (batch, dense); batch dims are sparse dims for coo


def make_tensor(rng, layout, index_dtype=np.int64, dtype=np.float64, batch=(), dense=(), nnz=3):
    """A tensor of ``layout`` built from NumPy members, and the dense array it represents."""
    bs = (2, 3) if layout in ("bsr", "bsc") else (1, 1)
    a = random_dense(rng, batch=batch, blocks=(3, 2), blocksize=bs, dense=dense, dtype=dtype, nnz=nnz)
    if layout == "coo":
        sparse_dim = a.ndim - len(dense)
        mask = (a != 0).reshape(a.shape[:sparse_dim] + (-1,)).any(axis=-1)
        idx = np.array(np.nonzero(mask), dtype=index_dtype).reshape(sparse_dim, -1)
        return st.sparse_coo_tensor(idx, a[tuple(idx)], a.shape, is_coalesced=True), a
    c, p, v = reference_compressed(a, layout, blocksize=bs, batch_dim=len(batch), index_dtype=index_dtype)
    return st.sparse_compressed_tensor(c, p, v, a.shape, layout=layout), a


def members(t):
    if isinstance(t, st.COOTensor):
        return {"indices": t.indices(), "values": t.values()}
    return {"compressed": t.compressed_indices(), "plain": t.plain_indices(), "values": t.values()}


def torch_members(x):
    if x.layout == torch.sparse_coo:
        return {"indices": x._indices(), "values": x._values()}
    if x.layout in (torch.sparse_csr, torch.sparse_bsr):
        return {"compressed": x.crow_indices(), "plain": x.col_indices(), "values": x.values()}
    return {"compressed": x.ccol_indices(), "plain": x.row_indices(), "values": x.values()}


def same_memory(x, a: np.ndarray) -> bool:
    """A torch tensor and a NumPy array that start at the same address (and are not empty)."""
    return a.size > 0 and x.data_ptr() == a.ctypes.data


# -- ours -> torch -> ours ---------------------------------------------------------------------
@requires_torch
@pytest.mark.parametrize("batch, dense", DIMS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_shares_memory(rng, layout, index_dtype, dtype, batch, dense):
    t, a = make_tensor(rng, layout, index_dtype, dtype, batch, dense)
    x = st.to_torch(t)
    assert x.layout == getattr(torch, f"sparse_{layout}") and tuple(x.shape) == t.shape
    assert x.dtype == torch.from_numpy(np.zeros(0, dtype)).dtype
    np.testing.assert_array_equal(x.to_dense().numpy(), a)  # PyTorch's densify is the oracle
    tm, xm = members(t), torch_members(x)
    assert same_memory(xm["values"], tm["values"])
    for name in tm:
        if name != "values":
            shared = same_memory(xm[name], tm[name])
            # PyTorch's COO indices are int64 only: int32 ones are copied (documented)
            assert shared == (layout != "coo" or index_dtype == np.int64), name
            assert xm[name].dtype == (torch.int64 if layout == "coo" else torch.from_numpy(tm[name]).dtype)
    if layout == "coo":
        assert x.is_coalesced() == t.is_coalesced()
    u = st.from_torch(x)
    assert u.layout == t.layout and u.shape == t.shape and u.dtype == t.dtype
    for name, m in members(u).items():
        np.testing.assert_array_equal(m, tm[name])
        assert np.shares_memory(m, xm[name].numpy()) or m.size == 0, name
    if layout != "coo" or index_dtype == np.int64:
        assert np.shares_memory(u.values(), t.values()) or t.values().size == 0


@requires_torch
@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_members_get_torch_strides(layout):
    """An nnz = 0 tensor (batched, with a dense dim) crosses over with members of torch's own
    strides: NumPy gives an empty array zero strides, which torch 2.11's invariant check
    refuses ("contiguous tensor per batch", pytorch/pytorch#178309)."""
    blocked = layout in ("bsr", "bsc")
    t = st.from_dense(np.zeros((2, 4, 6, 3), np.float32), layout, blocksize=(2, 3) if blocked else None,
                      batch_dim=1, dense_dim=1)
    assert t.nnz == 0
    got = st.to_torch(t)
    members = [got.indices(), got.values()] if layout == "coo" else \
        [got.crow_indices() if layout in ("csr", "bsr") else got.ccol_indices(),
         got.col_indices() if layout in ("csr", "bsr") else got.row_indices(), got.values()]
    for m in members:
        if m.numel() == 0:
            assert m.stride() == torch.empty(m.shape).stride(), (m.shape, m.stride())
    torch.testing.assert_close(got.to_dense(), torch.zeros(2, 4, 6, 3))


@requires_torch
def test_writes_are_seen_on_both_sides(rng):
    t, _ = make_tensor(rng, "csr", np.int32, np.float32, nnz=4)
    x = st.to_torch(t)
    x.values()[0] = 42.0
    assert t.values()[0] == 42.0
    u = st.from_torch(x)
    u.values()[1] = -7.0
    assert x.values()[1].item() == -7.0


@requires_torch
@pytest.mark.parametrize("dense", [(), (2,)])
def test_block_transposed_values(rng, dense):
    t, a = make_tensor(rng, "bsr", np.int32, np.float64, batch=(2,), dense=dense, nnz=4)
    bsc = t.mT  # values are a view with the block dims swapped
    assert not bsc.values().flags.c_contiguous
    x = st.to_torch(bsc)
    assert x.layout == torch.sparse_bsc and x.values().data_ptr() == t.values().ctypes.data
    np.testing.assert_array_equal(x.to_dense().numpy(), np.swapaxes(a, 1, 2))
    if dense:
        return  # PyTorch 2.13 cannot transpose hybrid compressed tensors
    # and from torch: PyTorch's own transpose of a bsr is such a view
    y = st.to_torch(t).mT
    assert y.layout == torch.sparse_bsc and not y.values().is_contiguous()
    u = st.from_torch(y)
    assert u.layout == st.sparse_bsc and np.shares_memory(u.values(), t.values())
    np.testing.assert_array_equal(u.values(), bsc.values())


# -- torch -> ours ----------------------------------------------------------------------------
@requires_torch
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64] if HAVE_TORCH else [], ids=str)
def test_from_torch_of_torch_made_tensors(rng, layout, index_dtype):
    a = random_dense(rng, batch=(2,), blocks=(3, 2), blocksize=(2, 2), dense=(3,), dtype=np.float32, nnz=3,
                     partial_blocks=False)  # the same nnz per batch for csr/csc too
    dense = torch.from_numpy(a)
    kw = {"blocksize": (2, 2)} if layout in ("bsr", "bsc") else {}
    x = dense.to_sparse(layout=getattr(torch, f"sparse_{layout}"), dense_dim=1, **kw)
    c, p, v = (torch_members(x)[k] for k in ("compressed", "plain", "values"))
    x = torch.sparse_compressed_tensor(c.to(index_dtype), p.to(index_dtype), v, x.shape, layout=x.layout)
    t = st.from_torch(x)
    assert t.layout.name == layout and t.shape == a.shape and t.batch_dim == 1 and t.dense_dim == 1
    assert t.index_dtype == np.dtype(str(index_dtype).replace("torch.", "")) and t.is_coalesced()
    for name, m in members(t).items():
        assert same_memory(torch_members(x)[name], m), name
    np.testing.assert_array_equal(st.to_torch(t).to_dense().numpy(), a)


@requires_torch
@pytest.mark.parametrize("coalesced", [True, False])
def test_from_torch_coo(coalesced):
    i = torch.tensor([[1, 0, 1], [2, 1, 2]])
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    x = torch.sparse_coo_tensor(i, v, (2, 3, 2), check_invariants=True)
    if coalesced:
        x = x.coalesce()
    t = st.from_torch(x)
    assert t.is_coalesced() == coalesced and t.dense_dim == 1 and t.index_dtype == np.int64
    assert same_memory(x._values(), t.values())
    # shared unless PyTorch left them non-contiguous (coalesce() makes a strided view): then copied (3.x)
    assert same_memory(x._indices(), t.indices()) == x._indices().is_contiguous()
    np.testing.assert_array_equal(t.to_dense(), x.to_dense().numpy())  # duplicates summed in both
    y = st.to_torch(t)
    assert y.is_coalesced() == coalesced
    np.testing.assert_array_equal(y.to_dense().numpy(), x.to_dense().numpy())


@requires_torch
def test_from_torch_checks_invariants():
    bad = torch.sparse_csr_tensor(torch.tensor([0, 3, 2]), torch.tensor([0, 1]), torch.ones(2), (2, 2),
                                  check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        st.from_torch(bad)
    assert e.value.invariant == "5.3"
    t = st.from_torch(bad, check_invariants=False)  # O(1) checks only
    assert not t.is_coalesced()
    lying = torch.sparse_coo_tensor(torch.tensor([[1, 0]]), torch.ones(2), (2,), is_coalesced=True,
                                    check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        st.from_torch(lying)
    assert e.value.invariant == "C6"


@requires_torch
def test_to_torch_checks_unchecked_tensors_first():
    # issue 11: an unchecked tensor is checked by us (our InvariantError, not torch's RuntimeError),
    # whatever the check setting, since torch's kernels trust the indices
    t = st.sparse_coo_tensor([[1, 0]], [1.0, 2.0], size=(2,), is_coalesced=True, check_invariants=False)
    for ctx, kw in [(contextlib.nullcontext(), {}), (st.check_invariants(False), {}),
                    (contextlib.nullcontext(), {"check_invariants": False})]:
        with ctx, pytest.raises(st.InvariantError) as e:
            st.to_torch(t, **kw)
        assert e.value.invariant == "C6"
    c = st.sparse_csr_tensor(np.array([0, 2, 1, 3]), np.array([0, 1, 2]), np.ones(3), (3, 3), check_invariants=False)
    with pytest.raises(st.InvariantError) as e:
        st.to_torch(c)
    assert e.value.invariant == "5.3"
    # a valid unchecked tensor is checked once, then shared as before
    ok = st.sparse_csr_tensor(np.array([0, 2, 2, 3]), np.array([0, 1, 2]), np.ones(3), (3, 3),
                              check_invariants=False)
    x = st.to_torch(ok, check_invariants=False)
    assert ok.is_coalesced() and x.values().data_ptr() == ok.values().ctypes.data


# -- dense tensors ------------------------------------------------------------------------------
@requires_torch
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
def test_dense_both_ways_share_memory(rng, dtype):
    a = random_dense(rng, blocks=(3, 4), dtype=dtype, nnz=5)
    x = st.to_torch(a)
    assert x.layout == torch.strided and same_memory(x, a)
    b = st.from_torch(x)
    assert isinstance(b, np.ndarray) and np.shares_memory(a, b) and b.dtype == a.dtype
    s = a[:, ::2]  # positive strides are shared too
    assert same_memory(st.to_torch(s), s)


@requires_torch
def test_dense_lazy_conj_neg_and_grad():
    z = torch.tensor([1 + 2j, 3 - 1j])
    np.testing.assert_array_equal(st.from_torch(z.conj()), [1 - 2j, 3 + 1j])  # resolved (a copy)
    np.testing.assert_array_equal(st.from_torch(-z.conj().imag), [2.0, -1.0])
    g = torch.ones(3, requires_grad=True)
    assert np.shares_memory(st.from_torch(g), g.detach().numpy())


@requires_torch
def test_copies_where_torch_cannot_share(rng):
    ro = np.arange(4.0)
    ro.flags.writeable = False
    x = st.to_torch(ro)
    assert x.data_ptr() != ro.ctypes.data and x.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="read-only"):
        st.to_torch(ro, copy=False)
    rev = np.arange(4.0)[::-1]
    assert st.to_torch(rev).tolist() == [3.0, 2.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="negative strides"):
        st.to_torch(rev, copy=False)
    swapped = np.arange(3, dtype=">i4")
    assert st.to_torch(swapped).tolist() == [0, 1, 2]
    t, _ = make_tensor(rng, "coo", np.int32)
    with pytest.raises(ValueError, match="int64 only"):
        st.to_torch(t, copy=False)
    c, _ = make_tensor(rng, "csr", np.int32)
    y = st.to_torch(c, copy=True)
    assert not any(same_memory(torch_members(y)[k], m) for k, m in members(c).items())
    assert same_memory(st.to_torch(c, copy=False).values(), c.values())


@requires_torch
def test_mmap_loaded_tensors(tmp_path, rng):
    from sparsetensor.io import load, save

    t, a = make_tensor(rng, "bsr", np.int32, np.float32, batch=(2,))
    save(tmp_path / "t.npz", t)
    r = load(tmp_path / "t.npz", mmap_mode="r")
    x = st.to_torch(r)  # read-only map: copied
    assert x.values().data_ptr() != r.values().ctypes.data
    c = load(tmp_path / "t.npz", mmap_mode="c")
    y = st.to_torch(c)  # copy-on-write map: shared
    assert same_memory(y.values(), c.values())
    np.testing.assert_array_equal(y.to_dense().numpy(), a)


# -- refusals ----------------------------------------------------------------------------------
@requires_torch
def test_refusals():
    with pytest.raises(TypeError, match="torch.Tensor"):
        st.from_torch(np.zeros(2))
    with pytest.raises(TypeError, match="sparse tensor or an array"):
        st.to_torch([1, 2])
    with pytest.raises(ValueError, match="meta.*cpu"):
        st.from_torch(torch.empty(2, device="meta"))
    with pytest.raises(TypeError, match="bfloat16"):
        st.from_torch(torch.ones(2, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="uint16"):
        st.from_torch(torch.sparse_coo_tensor(torch.tensor([[0]]), torch.ones(1, dtype=torch.uint16), (2,)))


def test_missing_torch_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" now raises ImportError
    with pytest.raises(ImportError, match="pip install torch"):
        sttorch.to_torch(np.zeros(2))
    with pytest.raises(ImportError, match="pip install torch"):
        sttorch.from_torch(object())


@requires_torch
def test_doctests():
    result = doctest.testmod(sttorch, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
    for name in sttorch.__all__:
        doc = getattr(sttorch, name).__doc__
        assert "Examples" in doc and ">>>" in doc, name
