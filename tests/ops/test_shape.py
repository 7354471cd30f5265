"""Shape and indexing ops (sparsetensor.ops.shape): transpose, narrow, select, index_select,
cat, stack, nonzero, zero_, copy_, resize_as_, sparse_mask.

Oracle: dense NumPy always (slicing, np.take, np.concatenate, np.stack, np.argwhere), and
PyTorch 2.13 where it supports the op for the layout. Every sparse result passes
check_invariants(). Parametrised over layouts x (value dtype, index dtype) x (batch,
dense) dims; batch dims are leading sparse dims for coo.
"""

from __future__ import annotations

import doctest
import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.ops import shape as S
from conftest import HAVE_TORCH, LAYOUTS, random_dense, requires_torch

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")

BLOCKSIZE = {"coo": (1, 1), "csr": (1, 1), "csc": (1, 1), "bsr": (2, 3), "bsc": (2, 3)}
# (value dtype, index dtype): every raw item size (1, 2, 4, 8, 16 bytes) and both index dtypes
DTYPES = [(np.float64, np.int64), (np.complex128, np.int32), (np.bool_, np.int64), (np.float16, np.int32),
          (np.int32, np.int64)]
DIMS = [((), ()), ((2,), ()), ((), (2,)), ((2, 1), (3,))]  # (batch, dense)

if HAVE_TORCH:
    import torch

    TORCH_LAYOUT = {"coo": torch.sparse_coo, "csr": torch.sparse_csr, "csc": torch.sparse_csc,
                    "bsr": torch.sparse_bsr, "bsc": torch.sparse_bsc}


# -- helpers -------------------------------------------------------------------------------------------
def make(rng, layout, *, batch=(), blocks=(3, 4), dense=(), dtype=np.float64, index_dtype=np.int64, nnz=None,
         shuffle=False, blocksize=None):
    """A tensor of ``layout`` and its dense array (exactly ``nnz`` nonzero blocks per batch)."""
    bs = blocksize or BLOCKSIZE[layout]
    # full blocks for unblocked layouts, so that every batch has the same nnz
    partial = layout in ("bsr", "bsc") or bs == (1, 1)
    a = random_dense(rng, batch=batch, blocks=blocks, blocksize=bs, dense=dense, dtype=dtype, nnz=nnz,
                     partial_blocks=partial)
    if layout == "coo":
        t = st.from_dense(a, "coo", dense_dim=len(dense), index_dtype=index_dtype)
        if shuffle and t.nnz > 1:  # same elements, not sorted: an uncoalesced tensor
            perm = rng.permutation(t.nnz)
            t = st.sparse_coo_tensor(t.indices()[:, perm].copy(), t.values()[perm], t.shape)
    else:
        t = st.from_dense(a, layout, blocksize=bs if layout in ("bsr", "bsc") else None, batch_dim=len(batch),
                          dense_dim=len(dense), index_dtype=index_dtype)
    return t, a


def batch_counts(a, t) -> list:
    """Nonzero blocks per batch of the dense ``a`` seen with ``t``'s batch dims and blocksize."""
    m = t.batch_dim
    rb, cb = t.blocksize
    B = math.prod(a.shape[:m])
    R, C = a.shape[m:m + 2]
    x = a.reshape(B, R // rb, rb, C // cb, cb, math.prod(a.shape[m + 2:]))
    return (x != 0).any(axis=(2, 4, 5)).sum(axis=(1, 2)).tolist()


def check(result, expected, *, layout=None):
    """``result`` is a valid sparse tensor (of ``layout``) representing ``expected``."""
    assert isinstance(result, st.SparseTensor), type(result)
    result.check_invariants()
    if layout is not None:
        assert result.layout.name == layout
    got = result.to_dense()
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    return result


def check_or_unequal_nnz(fn, expected, t, *, layout=None, like=None):
    """For a compressed result whose batches would get different nnz: ValueError naming nnz; else check.

    The nnz per batch is that of the nonzero blocks of ``expected`` seen with the dims of
    ``like`` (default ``t``); only ops along sparse dims (and cat/stack along dense dims)
    may change it.
    """
    lay = layout or t.layout.name
    like = t if like is None else like
    if lay != "coo" and like.batch_dim and len(set(batch_counts(expected, like))) > 1:
        with pytest.raises(ValueError, match="nnz"):
            fn()
        return None
    return check(fn(), expected, layout=lay)


def check_along(fn, expected, t, d, **kw):
    """Ops along a batch or dense dim keep every entry (no nnz constraint); along a sparse dim see above."""
    if S._kind(t, d) == "sparse":
        return check_or_unequal_nnz(fn, expected, t, **kw)
    return check(fn(), expected, layout=kw.get("layout") or t.layout.name)


def to_torch(t):
    if t.layout.name == "coo":
        return torch.sparse_coo_tensor(torch.from_numpy(t.indices().astype(np.int64)),
                                       torch.from_numpy(np.ascontiguousarray(t.values())), t.shape,
                                       is_coalesced=t.is_coalesced())
    return torch.sparse_compressed_tensor(torch.from_numpy(t.compressed_indices()), torch.from_numpy(t.plain_indices()),
                                          torch.from_numpy(np.ascontiguousarray(t.values())), t.shape,
                                          layout=TORCH_LAYOUT[t.layout.name])


def every_case(test):
    """Parametrise ``test`` over layout, (dtype, index_dtype) in DTYPES and (batch, dense) in DIMS."""
    test = pytest.mark.parametrize("batch,dense", DIMS)(test)
    test = pytest.mark.parametrize("dtype,index_dtype", DTYPES)(test)
    return pytest.mark.parametrize("layout", LAYOUTS)(test)


def torch_dense(x) -> np.ndarray:
    return (x.to_dense() if x.layout != torch.strided else x).numpy()


def assert_matches_torch(r, expected):
    """``r`` has the elements and the nnz of torch's sparse ``expected``."""
    np.testing.assert_array_equal(r.to_dense(), torch_dense(expected))
    assert r.nnz == expected._nnz()


def valid_ranges(t, d):
    """(start, length) pairs to narrow dim d with (block multiples along blocked sparse dims)."""
    size = t.shape[d]
    step = 1
    if t.layout.blocked and t.batch_dim <= d < t.batch_dim + 2:
        step = t.blocksize[d - t.batch_dim]
    return sorted({(0, size), (step, max(size - 2 * step, 0)), (size - step if size else 0, step if size else 0),
                   (0, 0), (size, 0)})


# -- zero_ ---------------------------------------------------------------------------------------------------
@every_case
def test_zero_(rng, layout, dtype, index_dtype, batch, dense):
    t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, nnz=5)
    old = t.values()
    old_copy = old.copy()
    shape, bs, m, n = t.shape, t.blocksize, t.batch_dim, t.dense_dim
    assert S.zero_(t) is t
    check(t, np.zeros_like(a), layout=layout)
    assert (t.nnz, t.shape, t.blocksize, t.batch_dim, t.dense_dim) == (0, shape, bs, m, n)
    assert t.index_dtype == index_dtype and t.dtype == dtype
    np.testing.assert_array_equal(old, old_copy)  # the old arrays are not written
    if layout == "coo":
        assert t.is_coalesced()


@requires_torch
@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_torch(rng, layout):
    t, _ = make(rng, layout, batch=(2,), dense=(2,), nnz=4)
    tt = to_torch(t).zero_()
    S.zero_(t)
    assert t.nnz == tt._nnz()
    np.testing.assert_array_equal(t.to_dense(), torch_dense(tt))


# -- transpose -------------------------------------------------------------------------------------------------
@every_case
def test_transpose(rng, layout, dtype, index_dtype, batch, dense):
    t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, shuffle=True)
    for d0, d1 in itertools.combinations_with_replacement(range(t.ndim), 2):
        kinds = {S._kind(t, d0), S._kind(t, d1)}
        if len(kinds) > 1:
            with pytest.raises(NotImplementedError, match=f"transpose\\({d0}, {d1}\\)"):
                S.transpose(t, d0, d1)
            continue
        r = S.transpose(t, d0, -t.ndim + d1)
        want = layout
        if kinds == {"sparse"} and d0 != d1 and layout != "coo":
            want = t.layout.transposed.name
        check(r, np.swapaxes(a, d0, d1), layout=want)
        assert r.index_dtype == index_dtype


@requires_torch
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_transpose_torch(rng, layout, batch):
    t, _ = make(rng, layout, batch=batch)
    tt = to_torch(t)
    for d0, d1 in itertools.combinations(range(t.ndim), 2):
        try:
            expected = tt.transpose(d0, d1)
        except RuntimeError:
            with pytest.raises(NotImplementedError):
                S.transpose(t, d0, d1)
            continue
        r = S.transpose(t, d0, d1)
        assert r.layout.name == {v: k for k, v in TORCH_LAYOUT.items()}[expected.layout]
        np.testing.assert_array_equal(r.to_dense(), torch_dense(expected))


def test_transpose_sparse_is_a_view(rng):
    t, _ = make(rng, "bsr", batch=(2,), nnz=4)
    r = S.transpose(t, 1, 2)
    assert r.layout is st.sparse_bsc and np.shares_memory(r.values(), t.values())
    v = st.sparse_coo_tensor([[0, 2]], [1.0, 2.0], size=(3,))
    assert st.t(v) is v and v.T is v and v.t() is v  # 1-d: its own transpose (torch's t(), NumPy's .T)
    with pytest.raises(ValueError, match="2-d"):
        t.T


# -- narrow ------------------------------------------------------------------------------------------------------
@every_case
def test_narrow(rng, layout, dtype, index_dtype, batch, dense):
    t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, shuffle=True)
    for d in range(t.ndim):
        for start, length in valid_ranges(t, d):
            expected = np.take(a, np.arange(start, start + length), axis=d)
            r = check_along(lambda: S.narrow(t, d, start, length), expected, t, d)
            if r is not None:
                assert r.index_dtype == index_dtype
                if layout == "coo":
                    assert r.is_coalesced() == t.is_coalesced()
    # a negative start counts from the end
    step = BLOCKSIZE[layout][1] if not dense else 1
    check_along(lambda: S.narrow(t, -1, -step, step), a[..., a.shape[-1] - step:], t, t.ndim - 1)


@pytest.mark.parametrize("layout", ["bsr", "bsc"])
def test_narrow_blocked_needs_block_multiples(rng, layout):
    t, _ = make(rng, layout)
    with pytest.raises(ValueError, match="multiples of 2"):
        S.narrow(t, 0, 1, 2)
    with pytest.raises(ValueError, match="multiples of 3"):
        S.narrow(t, 1, 0, 4)


def test_narrow_range_errors(rng):
    t, _ = make(rng, "csr")
    with pytest.raises(IndexError, match="exceeds"):
        S.narrow(t, 0, 2, 2)
    with pytest.raises(IndexError, match="out of range"):
        S.narrow(t, 0, 4, 0)
    with pytest.raises(IndexError, match="out of range"):
        S.narrow(t, 2, 0, 1)


def test_narrow_batched_unequal_nnz_names_counts():
    a = np.zeros((2, 2, 2))
    a[0, 0, 0] = a[0, 0, 1] = a[1, 0, 0] = a[1, 1, 1] = 1  # batch 0: row 0 holds 2 entries; batch 1: 1 each
    t = st.from_dense(a, "csr", batch_dim=1)
    with pytest.raises(ValueError, match=r"narrow of a batched csr tensor.*nnz; got per batch \(0,\): 2, \(1,\): 1"):
        S.narrow(t, 1, 0, 1)
    with pytest.raises(ValueError, match=r"index_select of a batched csr tensor.*\(0,\): 0, \(1,\): 2"):
        S.index_select(t, 1, [1, 1])
    check(S.narrow(t, 2, 0, 1), a[:, :, :1])  # one entry per batch
    check(S.narrow(t, 2, 1, 1), a[:, :, 1:])


@requires_torch
@pytest.mark.parametrize("shuffle", [False, True])
def test_narrow_coo_torch(rng, shuffle):
    t, _ = make(rng, "coo", batch=(3,), dense=(2,), shuffle=shuffle)
    tt = to_torch(t)
    for d in range(t.ndim):
        length = min(2, t.shape[d] - 1)
        expected = tt.narrow_copy(d, 1, length)
        r = S.narrow(t, d, 1, length)
        assert_matches_torch(r, expected)


# -- select --------------------------------------------------------------------------------------------------------
@every_case
def test_select(rng, layout, dtype, index_dtype, batch, dense):
    t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, shuffle=True)
    for d in range(t.ndim):
        if t.shape[d] == 0:
            continue
        for i in sorted({0, t.shape[d] // 2, -1}):
            expected = np.take(a, i, axis=d)
            r = S.select(t, d, i)
            kind = S._kind(t, d)
            if layout == "coo" and kind == "sparse" and t.sparse_dim == 1:
                assert isinstance(r, np.ndarray)
                np.testing.assert_array_equal(r, expected)
                continue
            want = "coo" if kind == "sparse" else layout
            check(r, expected, layout=want)
            assert r.index_dtype == index_dtype
            if kind == "sparse" and layout != "coo":
                assert r.sparse_dim == t.batch_dim + 1 and r.dense_dim == t.dense_dim
    with pytest.raises(IndexError):
        S.select(t, 0, t.shape[0])


def test_select_coo_to_dense_sums_duplicates():
    t = st.sparse_coo_tensor([[1, 0, 1]], np.array([[1, 2], [3, 4], [5, 6]], np.float16), size=(2, 2))
    np.testing.assert_array_equal(S.select(t, 0, 1), np.array([6, 8], np.float16))
    np.testing.assert_array_equal(S.select(t, 0, 0), np.array([3, 4], np.float16))
    b = st.sparse_coo_tensor([[1, 1]], [True, False], size=(2,))
    assert S.select(b, 0, 1).dtype == np.bool_ and S.select(b, 0, 1)
    assert S.select(b, 0, 0).shape == () and not S.select(b, 0, 0)


@requires_torch
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,dense", DIMS)
def test_select_torch(rng, layout, batch, dense):
    t, _ = make(rng, layout, batch=batch, dense=dense, nnz=5)
    tt = to_torch(t)
    for d in range(t.ndim):
        try:
            expected = tt.select(d, min(1, t.shape[d] - 1))
        except RuntimeError:  # torch refuses sparse dims of batched/blocked compressed tensors
            assert layout != "coo"
            continue
        r = S.select(t, d, min(1, t.shape[d] - 1))
        got = r if isinstance(r, np.ndarray) else r.to_dense()
        np.testing.assert_array_equal(got, torch_dense(expected))
        if not isinstance(r, np.ndarray) and not (layout in ("bsr", "bsc") and S._kind(t, d) == "sparse"):
            assert r.layout.name == {v: k for k, v in TORCH_LAYOUT.items()}[expected.layout]


# -- index_select ----------------------------------------------------------------------------------------------------
def _indices_for(size, rng):
    out = [np.arange(size, dtype=np.int64)[::-1].copy(), np.array([], np.int64)]
    if size:
        out += [np.array([size - 1, 0, size - 1], np.int32), np.array(sorted(set([0, size - 1])), np.int64),
                rng.integers(0, size, 2 * size)]
    return out


@every_case
def test_index_select(rng, layout, dtype, index_dtype, batch, dense):
    t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, shuffle=True)
    for d in range(t.ndim):
        for idx in _indices_for(t.shape[d], rng):
            expected = np.take(a, idx, axis=d)
            if layout in ("bsr", "bsc") and S._kind(t, d) == "sparse":
                with pytest.raises(NotImplementedError, match="blocksize"):
                    S.index_select(t, d, idx)
                continue
            r = check_along(lambda: S.index_select(t, d, idx), expected, t, d)
            if r is not None:
                assert r.index_dtype == index_dtype


@pytest.mark.parametrize("layout", ["bsr", "bsc"])
def test_index_select_blocked_with_unit_blocksize_along_dim(rng, layout):
    t, a = make(rng, layout, batch=(2,), dense=(2,), blocksize=(1, 2), blocks=(5, 3))
    idx = [4, 0, 4, 2]
    check_or_unequal_nnz(lambda: S.index_select(t, 1, idx), np.take(a, idx, axis=1), t)
    with pytest.raises(NotImplementedError, match="blocksize"):
        S.index_select(t, 2, [0])


def test_index_select_coo_coalesced_flag(rng):
    t, a = make(rng, "coo", batch=(3,), nnz=6)
    assert t.is_coalesced()
    r = check(S.index_select(t, 1, [0, 2]), np.take(a, [0, 2], axis=1))
    assert r.is_coalesced()  # strictly increasing index: order kept, checked by check_invariants
    assert not S.index_select(t, 1, [2, 0]).is_coalesced()
    assert not S.index_select(t, 1, [0, 0]).is_coalesced()


def test_index_select_negative_indices_count_from_the_end(rng):
    for layout in ("coo", "csr", "csc"):
        t, a = make(rng, layout)
        n = a.shape[1]
        check(S.index_select(t, 1, [-1, 0, -n]), np.take(a, [n - 1, 0, 0], axis=1))
        check(S.index_select(t, 0, np.array([-1], np.int32)), a[-1:])
        with pytest.raises(IndexError, match=f"index {-n - 1} out of range"):
            S.index_select(t, 1, [0, -n - 1])


def test_index_select_errors(rng):
    t, _ = make(rng, "coo")
    with pytest.raises(IndexError, match="index -4 out of range"):
        S.index_select(t, 0, [-4])
    with pytest.raises(IndexError, match="index 3 out of range"):
        S.index_select(t, 0, [3])
    with pytest.raises(TypeError, match="int32 or int64"):
        S.index_select(t, 0, np.array([0.0]))
    with pytest.raises(ValueError, match="1-d"):
        S.index_select(t, 0, [[0]])


@pytest.mark.parametrize("seed", range(4))
def test_index_select_along_a_wide_dim_maps_only_the_index(seed):
    # a dim far wider than the index and the entries: the selection maps the index's distinct values, not
    # every coordinate (a 2**31-column matrix's map was 16 GiB); results as the narrow dim's
    rng = np.random.default_rng(seed)
    n, rows = 1 << 21, 3
    for _ in range(10):
        nnz = int(rng.integers(0, 30))
        r, c = rng.integers(0, rows, nnz), rng.integers(0, n, nnz)
        idx = np.concatenate([rng.choice(c, int(rng.integers(0, 8))) if nnz else np.zeros(0, np.int64),
                              rng.integers(0, n, int(rng.integers(0, 4))), [n - 1]])
        if rng.random() < 0.5:
            idx = np.sort(idx)
        idx = np.concatenate([idx, idx[:2]])  # repeats
        coo = st.sparse_coo_tensor(np.stack([r, c]), rng.random(nnz), size=(rows, n))
        cs = coo.coalesce()
        ind, vals = cs.indices(), cs.values()
        want = np.zeros((rows, idx.size))
        for j, col in enumerate(idx):
            hit = ind[1] == col
            want[ind[0][hit], j] = vals[hit]
        for t in (coo, cs, cs.to_sparse_csr(), cs.to_sparse_csc(), cs.to_sparse_csr().to(index_dtype=np.int32)):
            out = t.index_select(1, idx)
            out.check_invariants()
            np.testing.assert_array_equal(out.to_dense(), want)
    bad = st.sparse_coo_tensor([[0], [n + 5]], [1.0], size=(rows, n), check_invariants=False)
    with pytest.raises(st.InvariantError, match="C5"):
        bad.index_select(1, np.array([1]))


def test_index_select_coo_unchecked_out_of_bounds_raises():
    with st.check_invariants(False):
        t = st.sparse_coo_tensor([[0, 5], [1, 1]], [1.0, 2.0], size=(2, 2))
    with pytest.raises(st.InvariantError) as e:
        S.index_select(t, 0, [0, 1])
    assert e.value.invariant == "C5"


@requires_torch
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("dense", [(), (3,)])
def test_index_select_coo_torch(rng, shuffle, dense):
    t, _ = make(rng, "coo", batch=(2,), dense=dense, shuffle=shuffle)
    tt = to_torch(t)
    for d in range(t.ndim):
        for idx in _indices_for(t.shape[d], rng):
            expected = tt.index_select(d, torch.from_numpy(idx.astype(np.int64)))
            r = S.index_select(t, d, idx)
            assert_matches_torch(r, expected)


# -- cat and stack ---------------------------------------------------------------------------------------------------
def _cat_inputs(rng, layout, d, batch, dense, dtype, index_dtype, sizes=(1, 2)):
    """Inputs of ``layout`` whose dim ``d`` has different sizes (same nnz per batch, for batch dims)."""
    ts, arrays = [], []
    m = len(batch)
    for k, s in enumerate(sizes):
        b, blocks, de = list(batch), [3, 4], list(dense)
        if d < m:
            b[d] = s
        elif d < m + 2:
            blocks[d - m] = s + 1
        else:
            de[d - m - 2] = s
        t, a = make(rng, layout, batch=tuple(b), blocks=tuple(blocks), dense=tuple(de), dtype=dtype,
                    index_dtype=index_dtype, nnz=2 if d < m else None, shuffle=k == 1)
        ts.append(t)
        arrays.append(a)
    return ts, arrays


@every_case
def test_cat(rng, layout, dtype, index_dtype, batch, dense):
    ndim = len(batch) + 2 + len(dense)
    for d in range(ndim):
        ts, arrays = _cat_inputs(rng, layout, d, batch, dense, dtype, index_dtype)
        expected = np.concatenate(arrays, axis=d)
        r = check_or_unequal_nnz(lambda: S.cat(ts, d), expected, ts[0])
        if r is not None:
            assert r.index_dtype == index_dtype
        # the same input twice along a dense dim: shared indices, values concatenated
        if d >= len(batch) + 2:
            check(S.cat([ts[0], ts[0]], d - ndim), np.concatenate([arrays[0]] * 2, axis=d), layout=layout)


def test_cat_coo_coalesced_flag(rng):
    ts, arrays = _cat_inputs(rng, "coo", 0, (2,), (), np.float64, np.int64)
    ts[1] = ts[1].coalesce()
    r = check(S.cat(ts, 0), np.concatenate(arrays, 0))
    assert r.is_coalesced()  # along dim 0 the offsets keep the order
    ts, arrays = _cat_inputs(rng, "coo", 1, (2,), (), np.float64, np.int64)
    assert not S.cat([t.coalesce() for t in ts], 1).is_coalesced()


@pytest.mark.parametrize("bad", [-1, 3])
def test_cat_coo_of_an_index_out_of_range_raises(bad):
    """Along a sparse dim the offsets would move an out-of-range index of one input into the
    next one's range (a valid-looking result): an unchecked input is checked first, and a checked
    one whose caller-held indices were written since is caught too."""
    a = st.sparse_coo_tensor(np.array([[0, 1], [0, 2]]), np.array([1.0, 2.0]), (2, 3), is_coalesced=True)
    idx = np.array([[0, 1], [bad, 2]])
    unchecked = st.sparse_coo_tensor(idx, np.array([3.0, 4.0]), (2, 3), check_invariants=False)
    with pytest.raises(st.InvariantError, match="C4" if bad < 0 else "C5"):
        st.cat([unchecked, a] if bad > 0 else [a, unchecked], 1)
    idx[1, 0] = 1
    held = st.sparse_coo_tensor(idx, np.array([3.0, 4.0]), (2, 3), is_coalesced=True)
    held.check_invariants()
    idx[1, 0] = bad  # the caller's array, which the tensor took without a copy
    with pytest.raises(st.InvariantError, match="changed since the check"):
        st.cat([held, a] if bad > 0 else [a, held], 1)


def test_cat_batch_needs_equal_nnz(rng):
    a, _ = make(rng, "csr", batch=(2,), nnz=2)
    b, _ = make(rng, "csr", batch=(1,), nnz=3)
    with pytest.raises(ValueError, match="nnz 2, 3"):
        S.cat([a, b], 0)


def test_cat_promotes_dtypes_and_index_dtypes(rng):
    a, x = make(rng, "csr", dtype=np.int8, index_dtype=np.int32)
    b, y = make(rng, "csr", dtype=np.float32, index_dtype=np.int32, blocks=(2, 4))
    c, z = make(rng, "csr", dtype=np.bool_, index_dtype=np.int64, blocks=(1, 4))
    r = check(S.cat([a, b], 0), np.concatenate([x, y]).astype(np.float32))
    assert r.dtype == np.float32 and r.index_dtype == np.int32
    r = check(S.cat([a, c], 0), np.concatenate([x, z.astype(np.int8)]))
    assert r.dtype == np.int8 and r.index_dtype == np.int64


@pytest.mark.parametrize("first", LAYOUTS)
def test_cat_mixed_layouts_convert_to_the_first(rng, first):
    ts, arrays = [], []
    for k, layout in enumerate(LAYOUTS):
        t, a = make(rng, layout, batch=(2,), blocks=(k + 1, 4), blocksize=BLOCKSIZE[first])
        ts.append(t)
        arrays.append(a)
    order = [LAYOUTS.index(first)] + [k for k in range(5) if LAYOUTS[k] != first]
    ts, arrays = [ts[k] for k in order], [arrays[k] for k in order]
    expected = np.concatenate(arrays, axis=1)
    check(S.cat(ts, 1), expected, layout=first)


def test_cat_errors_name_both_operands(rng):
    a, _ = make(rng, "csr")
    b, _ = make(rng, "csr", blocks=(3, 5))
    with pytest.raises(ValueError, match=r"tensors\[0\] has shape \(3, 4\) and tensors\[1\] has shape \(3, 5\)"):
        S.cat([a, b], 0)
    c, _ = make(rng, "coo", dense=(4,))
    with pytest.raises(ValueError, match="dense dims"):
        S.cat([a, c], 0)
    with pytest.raises(TypeError, match="tensors\\[1\\]"):
        S.cat([a, np.zeros((3, 4))], 0)
    with pytest.raises(ValueError, match="non-empty"):
        S.cat([], 0)
    d = st.from_dense(np.zeros((3, 4, 1)), "coo", dense_dim=1)
    e = st.from_dense(np.zeros((3, 4, 1)), "coo", dense_dim=0)
    with pytest.raises(ValueError, match="sparse_dim=2.*sparse_dim=3"):
        S.cat([d, e], 0)


@requires_torch
@pytest.mark.parametrize("dense", [(), (2,)])
def test_cat_coo_torch(rng, dense):
    for d in range(3 + len(dense)):
        ts, _ = _cat_inputs(rng, "coo", d, (2,), dense, np.float32, np.int64)
        expected = torch.cat([to_torch(t) for t in ts], d)
        r = S.cat(ts, d)
        assert_matches_torch(r, expected)


@every_case
def test_stack(rng, layout, dtype, index_dtype, batch, dense):
    ts, arrays = [], []
    for _ in range(3):
        t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, nnz=3)
        ts.append(t)
        arrays.append(a)
    m = len(batch)
    for d in range(-ts[0].ndim - 1, ts[0].ndim + 1):
        expected = np.stack(arrays, axis=d)
        dd = d % (ts[0].ndim + 1)
        if layout != "coo" and dd == m + 1:
            with pytest.raises(NotImplementedError, match="between the two sparse dims"):
                S.stack(ts, d)
            continue
        like = SimpleNamespace(batch_dim=m + (dd <= m), blocksize=ts[0].blocksize)
        r = check_or_unequal_nnz(lambda: S.stack(ts, d), expected, ts[0], like=like)
        if r is not None and layout != "coo":
            assert r.batch_dim == m + (dd <= m)


def test_stack_errors(rng):
    a, _ = make(rng, "csr")
    b, _ = make(rng, "csr", blocks=(3, 5))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(3, 5\)"):
        S.stack([a, b])
    c, _ = make(rng, "csr", nnz=2)
    d, _ = make(rng, "csr", nnz=3)
    with pytest.raises(ValueError, match="nnz 2, 3"):
        S.stack([c, d])
    with pytest.raises(IndexError):
        S.stack([c, c], 4)


@requires_torch
def test_stack_coo_torch(rng):
    ts = [make(rng, "coo", dense=(2,))[0] for _ in range(2)]
    for d in range(4):
        expected = torch.stack([to_torch(t) for t in ts], d)
        np.testing.assert_array_equal(S.stack(ts, d).to_dense(), torch_dense(expected))


# -- nonzero ----------------------------------------------------------------------------------------------------------
@every_case
def test_nonzero(rng, layout, dtype, index_dtype, batch, dense):
    t, a = make(rng, layout, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, shuffle=True)
    got = S.nonzero(t)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.argwhere(a))


def test_nonzero_explicit_zeros_nan_and_duplicates():
    t = st.sparse_coo_tensor([[2, 0, 1, 2, 1], [0, 1, 1, 0, 0]], [1.0, 0.0, np.nan, -1.0, 3.0], size=(3, 2))
    np.testing.assert_array_equal(S.nonzero(t), [[1, 0], [1, 1]])  # 1 + -1 == 0 and the explicit 0 drop out
    c = st.sparse_csr_tensor([0, 2, 2], [0, 1], [0.0, -0.0], size=(2, 2))
    assert S.nonzero(c).shape == (0, 2)


# -- copy_ -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dst_layout", LAYOUTS)
@pytest.mark.parametrize("src_layout", LAYOUTS + ["dense"])
@pytest.mark.parametrize("batch,dense", DIMS)
def test_copy_(rng, dst_layout, src_layout, batch, dense):
    dst, _ = make(rng, dst_layout, batch=batch, dense=dense, dtype=np.float32, index_dtype=np.int32,
                  blocksize=(2, 3))
    src_blocksize = (2, 3)
    src, a = make(rng, "coo" if src_layout == "dense" else src_layout, batch=batch, dense=dense,
                  dtype=np.complex64 if src_layout == "dense" else np.int64, blocksize=src_blocksize)
    a = a.real if src_layout == "dense" else a
    source = a if src_layout == "dense" else src
    old = dst.values()
    assert S.copy_(dst, source) is dst
    check(dst, a.astype(np.float32), layout=dst_layout)
    assert dst.dtype == np.float32 and dst.index_dtype == np.int32
    assert not np.shares_memory(dst.values(), a)
    if src_layout != "dense":
        for _, x in src._members():
            for _, y in dst._members():
                assert not np.shares_memory(x, y)
    assert old is not dst.values()


def test_copy_errors(rng):
    dst, _ = make(rng, "csr")
    src, _ = make(rng, "csr", blocks=(3, 5))
    with pytest.raises(ValueError, match=r"dst is a csr tensor of shape \(3, 4\).*src is a csr tensor of shape \(3, 5\)"):
        S.copy_(dst, src)
    with pytest.raises(ValueError, match=r"array of shape \(2, 2\)"):
        S.copy_(dst, np.zeros((2, 2)))
    with pytest.raises(TypeError):
        S.copy_(np.zeros((3, 4)), dst)


@requires_torch
def test_copy_coo_torch(rng):
    dst, _ = make(rng, "coo", dtype=np.float32)
    src, _ = make(rng, "coo", dtype=np.float64, shuffle=True)
    expected = to_torch(dst).copy_(to_torch(src))
    S.copy_(dst, src)
    np.testing.assert_array_equal(dst.to_dense(), torch_dense(expected))
    assert dst.is_coalesced() == expected.is_coalesced()


# -- resize_as_ ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,dense", DIMS)
def test_resize_as_grow(rng, layout, batch, dense):
    t, a = make(rng, layout, batch=batch, dense=dense, nnz=3)
    rb, cb = BLOCKSIZE[layout]
    m = len(batch)
    new = list(a.shape)
    new[m] += 2 * rb
    new[m + 1] += cb
    for k in range(m + 2, len(new)):
        new[k] += 1
    other = st.from_dense(np.zeros(new), "coo", dense_dim=len(dense))
    expected = np.zeros(new, a.dtype)
    expected[tuple(slice(0, s) for s in a.shape)] = a
    assert S.resize_as_(t, other) is t
    check(t, expected, layout=layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_resize_as_empty_takes_any_shape(rng, layout):
    t, _ = make(rng, layout, batch=(2,), nnz=0)
    other = st.from_dense(np.ones((3, 2, 4, 6, 5)), "coo", dense_dim=1)
    check(S.resize_as_(t, other), np.zeros((3, 2, 4, 6, 5)), layout=layout)
    assert t.dense_dim == 1 and t.batch_dim == (0 if layout == "coo" else 2)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_resize_as_errors(rng, layout):
    t, a = make(rng, layout, batch=(2,), dense=(2,), nnz=3)
    shrink = st.from_dense(np.zeros((2, a.shape[1] - BLOCKSIZE[layout][0]) + a.shape[2:]), "coo", dense_dim=1)
    with pytest.raises(ValueError, match="shrinking dim 1"):
        S.resize_as_(t, shrink)
    split = st.from_dense(np.zeros(a.shape), "coo", dense_dim=0)
    with pytest.raises(ValueError, match="not supported"):
        S.resize_as_(t, split)
    with pytest.raises(TypeError):
        S.resize_as_(t, np.zeros(a.shape))
    if layout in ("bsr", "bsc"):
        odd = st.from_dense(np.zeros((2, a.shape[1] + 1) + a.shape[2:]), "coo", dense_dim=1)
        with pytest.raises(ValueError, match="multiples"):
            S.resize_as_(t, odd)


@requires_torch
def test_resize_as_coo_torch(rng):
    t, _ = make(rng, "coo", nnz=4)
    other, _ = make(rng, "coo", blocks=(5, 6), nnz=0)
    expected = to_torch(t).resize_as_(to_torch(other))
    S.resize_as_(t, other)
    assert t.shape == tuple(expected.shape)
    np.testing.assert_array_equal(t.to_dense(), torch_dense(expected))
    with pytest.raises(RuntimeError):
        to_torch(other).resize_as_(to_torch(t))  # fine: empty, and:
        to_torch(t).resize_as_(torch.zeros(2, 2).to_sparse())
    with pytest.raises(ValueError):
        S.resize_as_(t, st.from_dense(np.zeros((2, 2)), "coo"))


# -- sparse_mask --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask_layout", LAYOUTS)
@pytest.mark.parametrize("t_layout", LAYOUTS + ["dense"])
@pytest.mark.parametrize("batch,dense", DIMS)
def test_sparse_mask(rng, mask_layout, t_layout, batch, dense):
    mask, _ = make(rng, mask_layout, batch=batch, dense=dense, dtype=np.bool_, index_dtype=np.int32, shuffle=True,
                   blocksize=(2, 3))
    src, a = make(rng, "coo" if t_layout == "dense" else t_layout, batch=batch, dense=dense, dtype=np.complex128,
                  blocksize=(2, 3), shuffle=True)
    if t_layout == "dense":
        a = rng.standard_normal(a.shape) + 0j
        src = a
    ones = mask._replace_values(np.ones(mask.values().shape, np.int8))
    pattern = ones.to_dense() != 0
    r = S.sparse_mask(src, mask)
    check(r, np.where(pattern, a, 0), layout=mask_layout)
    assert r.nnz == mask.nnz and r.dtype == np.complex128 and r.index_dtype == np.int32
    for (_, x), (_, y) in zip(r._members()[:-1], mask._members()[:-1]):
        np.testing.assert_array_equal(x, y)


def test_sparse_mask_errors(rng):
    mask, _ = make(rng, "csr")
    with pytest.raises(ValueError, match=r"array of shape \(2, 2\).*mask is a csr tensor of shape \(3, 4\)"):
        S.sparse_mask(np.zeros((2, 2)), mask)
    t, _ = make(rng, "coo", blocks=(3, 5))
    with pytest.raises(ValueError, match=r"t is a coo tensor of shape \(3, 5\).*mask is a csr tensor of shape \(3, 4\)"):
        S.sparse_mask(t, mask)
    with pytest.raises(TypeError):
        S.sparse_mask(np.zeros((3, 4)), np.zeros((3, 4)))
    with st.check_invariants(False):
        bad = st.sparse_coo_tensor([[0, -1], [1, 1]], [True, True], size=(3, 4))
    for src in (np.ones((3, 4)), S.narrow(t, 1, 0, 4)):
        with pytest.raises(st.InvariantError) as e:
            S.sparse_mask(src, bad)
        assert e.value.invariant == "C4"


@requires_torch
@pytest.mark.parametrize("mask_layout", ["coo", "csr"])
@pytest.mark.parametrize("sparse_t", [False, True])
def test_sparse_mask_torch(rng, mask_layout, sparse_t):
    mask, _ = make(rng, mask_layout, dense=(2,) if mask_layout == "coo" else ())
    src, a = make(rng, "coo", dense=mask.shape[2:])
    source = src if sparse_t else a
    expected = (to_torch(src) if sparse_t else torch.from_numpy(a)).sparse_mask(to_torch(mask))
    r = S.sparse_mask(source, mask)
    np.testing.assert_array_equal(r.to_dense(), torch_dense(expected))
    np.testing.assert_array_equal(r.values(), expected.values().numpy())


# -- unchecked input, zero-size dims, large inputs (parallel kernels) ----------------------------------------------------
def test_unchecked_compressed_input_is_scanned():
    with st.check_invariants(False):
        bad = st.sparse_csr_tensor([0, 2, 1], [0, 5], [1.0, 2.0], size=(2, 3))
        unsorted = st.sparse_csr_tensor([0, 2, 2], [2, 0], [1.0, 2.0], size=(2, 3))
    for op in (lambda t: S.narrow(t, 1, 0, 2), lambda t: S.index_select(t, 0, [1, 0]),
               lambda t: S.cat([t, t], 1), lambda t: S.sparse_mask(np.ones((2, 3)), t)):
        with pytest.raises(st.InvariantError):
            op(bad)
    a = unsorted.to_dense()
    check(S.narrow(unsorted, 1, 0, 2), a[:, :2])
    check(S.index_select(unsorted, 1, [2, 0]), a[:, [2, 0]])
    check(S.cat([unsorted, unsorted], 1), np.concatenate([a, a], 1))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,dense", DIMS)
def test_no_entries(rng, layout, batch, dense):
    t, a = make(rng, layout, batch=batch, dense=dense, nnz=0, dtype=np.complex64)
    assert t.nnz == 0
    for d in range(t.ndim):
        sparse_dim = S._kind(t, d) == "sparse" and layout != "coo"
        step = BLOCKSIZE[layout][d - t.batch_dim] if sparse_dim else 1
        check(S.narrow(t, d, 0, step), np.take(a, np.arange(step), axis=d))
        r = S.select(t, d, 0)
        got = r if isinstance(r, np.ndarray) else check(r, np.take(a, 0, axis=d)).to_dense()
        np.testing.assert_array_equal(got, np.take(a, 0, axis=d))
        if not (layout in ("bsr", "bsc") and S._kind(t, d) == "sparse"):
            check(S.index_select(t, d, [0, 0]), np.take(a, [0, 0], axis=d))
        check(S.cat([t, t], d), np.concatenate([a, a], d))
    check(S.stack([t, t], 0), np.stack([a, a]))
    assert S.nonzero(t).shape == (0, t.ndim)
    check(S.sparse_mask(a, t), a)
    u, b = make(rng, layout, batch=batch, dense=dense, nnz=4, dtype=np.complex64)
    check(S.sparse_mask(t, u), np.zeros_like(b))
    check(S.copy_(u, t), a)


def test_coo_duplicates(rng):
    """Uncoalesced COO with repeated coordinates (unchecked input): results represent the summed tensor."""
    t, a = make(rng, "coo", batch=(2,), dense=(2,), nnz=5)
    idx = np.concatenate([t.indices(), t.indices()[:, ::-1]], axis=1)
    vals = np.concatenate([t.values() * 0.25, t.values()[::-1] * 0.75])
    u = st.sparse_coo_tensor(idx, vals, t.shape)
    assert not u.is_coalesced()
    for d in range(u.ndim):
        check(S.narrow(u, d, 1, 1), np.take(a, [1], axis=d))
        check(S.index_select(u, d, [1, 0, 1]), np.take(a, [1, 0, 1], axis=d))
        check(S.cat([u, t], d), np.concatenate([a, a], d))
        r = S.select(u, d, 1)
        np.testing.assert_array_equal(r.to_dense(), np.take(a, 1, axis=d))
    np.testing.assert_array_equal(S.nonzero(u), np.argwhere(a))
    mask = st.from_dense((a != 0).astype(np.int8), "coo", dense_dim=1)
    check(S.sparse_mask(u, mask), a)
    r = S.sparse_mask(a, u)  # every copy of a repeated mask element gets the value (as in PyTorch)
    np.testing.assert_array_equal(r.indices(), u.indices())
    np.testing.assert_array_equal(r.values(), a[tuple(u.indices())])
    check(r, 2 * a)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_size_dims(rng, layout):
    t, a = make(rng, layout, batch=(0,), dense=(2,))
    for d in range(t.ndim):
        check(S.narrow(t, d, 0, 0), np.take(a, [], axis=d).astype(a.dtype))
        if not (layout in ("bsr", "bsc") and S._kind(t, d) == "sparse"):
            check(S.index_select(t, d, []), np.take(a, np.array([], int), axis=d))
    check(S.cat([t, t], -1), np.concatenate([a, a], -1))
    u, b = make(rng, layout, blocks=(0, 4))
    check(S.cat([u, u], 0), np.concatenate([b, b]))
    check(S.cat([u, u], 1), np.concatenate([b, b], 1))
    assert S.nonzero(u).shape == (0, 2)
    check(S.sparse_mask(b, u), b)
    check(S.stack([u, u], 0), np.stack([b, b]))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_large_inputs_use_threads_and_agree(rng, layout):
    bs = BLOCKSIZE[layout]
    t, a = make(rng, layout, batch=(2,), blocks=(200, 300), nnz=20000, dtype=np.float32)
    rows = rng.integers(0, t.shape[1], 300)
    cols = np.sort(rng.choice(t.shape[2], 150, replace=False)) if layout in ("bsr", "bsc") else rng.integers(0, t.shape[2], 500)
    for threads in (1, 2):
        if layout in ("coo", "csr", "csc"):
            check_or_unequal_nnz(lambda: S.index_select(t, 1, rows, threads=threads), a[:, rows], t)
            check_or_unequal_nnz(lambda: S.index_select(t, 2, cols, threads=threads), a[:, :, cols], t)
        check_or_unequal_nnz(lambda: S.narrow(t, 2, 3 * bs[1], 90 * bs[1], threads=threads),
                             a[:, :, 3 * bs[1]:93 * bs[1]], t)
        check(S.cat([t, t], 2, threads=threads), np.concatenate([a, a], 2))
        check(S.cat([t, t], 1, threads=threads), np.concatenate([a, a], 1))


def test_docstrings():
    failures, _ = doctest.testmod(S, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert failures == 0
