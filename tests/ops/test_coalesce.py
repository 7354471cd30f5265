"""Coalescing: COO ``coalesce`` and compressed ``sum_duplicates``, against NumPy references,
SciPy and PyTorch."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sparsetensor as st
from conftest import COMPRESSED, INDEX_DTYPES, VALUE_DTYPES, nonzero_values, requires_torch
from sparsetensor._backend.cpu._coalesce import coalesce, sum_duplicates


# -- NumPy references ------------------------------------------------------------------------
def reduce_reference(values: np.ndarray, run: np.ndarray, nruns: int) -> np.ndarray:
    """Sum (logical or for bool; float32 then one rounding for float16) of ``values`` per run id,
    in input order."""
    shape = (nruns,) + values.shape[1:]
    if values.dtype == np.bool_:
        out = np.zeros(shape, bool)
        np.logical_or.at(out, run, values)
        return out
    if values.dtype == np.float16:
        out = np.zeros(shape, np.float32)
        np.add.at(out, run, values.astype(np.float32))
        return out.astype(np.float16)
    out = np.zeros(shape, values.dtype)
    np.add.at(out, run, values)
    return out


def coo_reference(indices: np.ndarray, values: np.ndarray):
    """Lexicographically sorted distinct columns and the reduced values (stable order)."""
    S, n = indices.shape
    if n == 0:
        return indices, values
    order = np.lexsort(indices[::-1]) if S else np.arange(n)
    cols = indices[:, order]
    head = np.ones(n, bool)
    head[1:] = np.any(cols[:, 1:] != cols[:, :-1], axis=0)
    run = np.cumsum(head) - 1
    return cols[:, head], reduce_reference(values[order], run, int(head.sum()))


def random_coo(rng, sparse, dense, dtype, index_dtype, nnz):
    indices = np.stack([rng.integers(0, s, nnz) for s in sparse]).astype(index_dtype) if sparse else \
        np.zeros((0, nnz), index_dtype)
    values = nonzero_values(rng, (nnz,) + dense, dtype)
    t = st.sparse_coo_tensor(indices, values, size=sparse + dense, check_invariants=False)
    return t, indices, values


def assert_coo_equal(c, ref_indices, ref_values):
    assert c.is_coalesced()
    assert c.indices().dtype == ref_indices.dtype and c.values().dtype == ref_values.dtype
    np.testing.assert_array_equal(c.indices(), ref_indices)
    np.testing.assert_array_equal(c.values(), ref_values)


# -- COO ----------------------------------------------------------------------------------------
SPARSE_SHAPES = [(), (7,), (4, 5), (3, 2, 4)]
DENSE_SHAPES = [(), (3,), (2, 0), (2, 3)]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("dense", DENSE_SHAPES, ids=str)
@pytest.mark.parametrize("sparse", SPARSE_SHAPES, ids=str)
def test_coo_matches_reference(rng, sparse, dense, dtype, index_dtype):
    t, indices, values = random_coo(rng, sparse, dense, dtype, index_dtype, nnz=60)
    before = indices.copy(), values.copy()
    c = coalesce(t)
    assert_coo_equal(c, *coo_reference(indices, values))
    assert c.shape == t.shape and c.layout is st.sparse_coo
    if sparse == ():
        assert c.nnz == 1  # everything collapses into one entry
    np.testing.assert_array_equal(t.indices(), before[0])  # the input is not modified
    np.testing.assert_array_equal(t.values(), before[1])
    assert not t.is_coalesced()


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("sparse", [(), (5,), (3, 4)], ids=str)
def test_coo_empty(sparse, index_dtype):
    t = st.sparse_coo_tensor(np.zeros((len(sparse), 0), index_dtype), np.zeros((0, 2), np.float32),
                             size=sparse + (2,), check_invariants=False)
    c = coalesce(t)
    assert c.is_coalesced() and c.nnz == 0 and c.shape == t.shape
    assert c.indices().shape == (len(sparse), 0) and c.values().shape == (0, 2)
    assert c.indices().dtype == index_dtype


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.bool_, np.float16, np.complex64], ids=str)
@pytest.mark.parametrize("nnz", [1, 2, 1000])
def test_coo_all_duplicates(rng, nnz, dtype):
    indices = np.tile(np.array([[2], [1], [3]]), nnz)
    values = nonzero_values(rng, (nnz, 2), dtype)
    t = st.sparse_coo_tensor(indices, values, size=(4, 3, 5, 2), check_invariants=False)
    c = coalesce(t, threads=2)
    assert c.nnz == 1
    assert_coo_equal(c, *coo_reference(indices, values))


def test_coo_sparse_dim_zero_sums_everything(rng):
    values = rng.random((1000, 3))
    t = st.sparse_coo_tensor(np.zeros((0, 1000), np.int64), values, size=(3,), check_invariants=False)
    c = coalesce(t)
    assert c.indices().shape == (0, 1)
    np.testing.assert_allclose(c.values(), values.sum(axis=0, keepdims=True))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_coo_already_coalesced_is_cheap(rng, index_dtype):
    keys = np.unique(rng.integers(0, 30 * 40, 200))
    indices = np.stack(np.divmod(keys, 40)).astype(index_dtype)
    values = rng.random(keys.size)
    t = st.sparse_coo_tensor(indices, values, size=(30, 40), check_invariants=False)
    assert not t.is_coalesced()
    c = coalesce(t)
    assert c.is_coalesced()
    assert c.indices() is t.indices() and c.values() is t.values()  # no sort, no copy
    assert t.coalesce().is_coalesced()
    assert c.coalesce() is c  # a tensor marked coalesced is returned as it is


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_coo_sorted_with_duplicates(rng, index_dtype):
    keys = np.sort(rng.integers(0, 50 * 60, 3000))
    indices = np.stack(np.divmod(keys, 60)).astype(index_dtype)
    values = rng.random(keys.size)
    t = st.sparse_coo_tensor(indices, values, size=(50, 60), check_invariants=False)
    assert_coo_equal(coalesce(t), *coo_reference(indices, values))


def test_coo_method_and_flag(rng):
    t, indices, values = random_coo(rng, (10, 10), (), np.float64, np.int64, 300)
    c = t.coalesce()
    assert c.is_coalesced() and not t.is_coalesced()
    assert_coo_equal(c, *coo_reference(indices, values))


def test_coo_float16_sums_in_float32_and_rounds_once():
    # in float16, 2048 + 1 rounds back to 2048 (spacing 2); in float32 the sum is 2050
    values = np.array([2048, 1, 1], np.float16)
    t = st.sparse_coo_tensor([[0, 0, 0]], values, size=(1,), check_invariants=False)
    assert coalesce(t).values()[0] == np.float16(2050)


def test_coo_float16_conversions_match_numpy(rng):
    # every float16 bit pattern survives a run of one (half -> float -> half) ...
    bits = np.arange(1 << 16, dtype=np.uint16)
    perm = rng.permutation(bits.size)
    t = st.sparse_coo_tensor(perm[None, :], bits.view(np.float16), size=(bits.size,), check_invariants=False)
    c = coalesce(t)
    np.testing.assert_array_equal(c.values().view(np.uint16)[perm], bits)
    # ... and sums round as NumPy's float32 -> float16 conversion does (subnormals, overflow, inf, nan)
    a = rng.integers(0, 1 << 16, 200_000, dtype=np.uint16).view(np.float16)
    b = rng.integers(0, 1 << 16, 200_000, dtype=np.uint16).view(np.float16)
    idx = np.concatenate([np.arange(a.size), np.arange(b.size)])
    t = st.sparse_coo_tensor(idx[None, :], np.concatenate([a, b]), size=(a.size,), check_invariants=False)
    with np.errstate(all="ignore"):
        expect = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(coalesce(t).values(), expect)


def test_coo_bool_is_logical_or_and_integers_wrap():
    t = st.sparse_coo_tensor(np.zeros((1, 300), np.int64), np.ones(300, bool), size=(1,), check_invariants=False)
    c = coalesce(t)
    assert c.values().dtype == np.bool_ and c.values().view(np.uint8)[0] == 1
    t = st.sparse_coo_tensor([[0, 0]], np.array([100, 100], np.int8), size=(1,), check_invariants=False)
    assert coalesce(t).values()[0] == np.int8(-56)  # wraps, as np.add does
    big = np.iinfo(np.int64).max
    t = st.sparse_coo_tensor([[0, 0]], np.array([big, 1], np.int64), size=(1,), check_invariants=False)
    assert coalesce(t).values()[0] == np.iinfo(np.int64).min


def test_coo_non_contiguous_values(rng):
    indices = rng.integers(0, 6, (2, 200))
    values = rng.random((200, 3, 4))
    t = st.sparse_coo_tensor(indices, values, size=(6, 6, 3, 4), check_invariants=False).transpose(2, 3)
    assert not t.values().flags.c_contiguous
    assert_coo_equal(coalesce(t), *coo_reference(indices, values.swapaxes(1, 2)))


# -- large inputs: the parallel radix path ----------------------------------------------------
def duplicated_keys(rng, nnz, span, dup_fraction=0.2):
    unique = rng.integers(0, span, nnz - int(nnz * dup_fraction))
    keys = np.concatenate([unique, rng.choice(unique, nnz - unique.size)])
    rng.shuffle(keys)
    return keys


@pytest.mark.parametrize("nnz", [500_000, 1_200_000])  # the second streams its scatter (> 8 MB of pairs)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_coo_large_threads_agree(rng, nnz, index_dtype):
    shape = (100_000, 300_000)
    keys = duplicated_keys(rng, nnz, shape[0] * shape[1])
    indices = np.stack(np.divmod(keys, shape[1])).astype(index_dtype)
    values = rng.random(nnz).astype(np.float32)
    t = st.sparse_coo_tensor(indices, values, size=shape, check_invariants=False)
    one, two = coalesce(t, threads=1), coalesce(t, threads=2)
    np.testing.assert_array_equal(one.indices(), two.indices())
    np.testing.assert_array_equal(one.values(), two.values())
    assert_coo_equal(two, *coo_reference(indices, values))


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.float16, np.int16, np.float64, np.complex64,
                                   np.complex128], ids=str)
def test_coo_large_value_dtypes(rng, dtype):
    # scalar values of 1, 2, 4 and 8 bytes travel through the sort with their keys; wider ones by position
    shape = (3000, 5000)
    keys = duplicated_keys(rng, 300_000, shape[0] * shape[1], dup_fraction=0.5)
    indices = np.stack(np.divmod(keys, shape[1]))
    values = nonzero_values(rng, keys.size, dtype)
    before = values.copy()
    t = st.sparse_coo_tensor(indices, values, size=shape, check_invariants=False)
    one, two = coalesce(t, threads=1), coalesce(t, threads=2)
    np.testing.assert_array_equal(one.values(), two.values())
    assert_coo_equal(two, *coo_reference(indices, values))
    np.testing.assert_array_equal(t.values(), before)  # the input is not modified


def test_coo_large_dense_dims_and_many_dims(rng):
    shape = (50, 60, 70, 80)
    nnz = 300_000
    indices = np.stack([rng.integers(0, s, nnz) for s in shape])
    values = rng.integers(-5, 5, (nnz, 3)).astype(np.int32)
    t = st.sparse_coo_tensor(indices, values, size=shape + (3,), check_invariants=False)
    one, two = coalesce(t, threads=1), coalesce(t, threads=2)
    np.testing.assert_array_equal(one.values(), two.values())
    assert_coo_equal(two, *coo_reference(indices, values))


@pytest.mark.parametrize("threads", [1, 2])
def test_coo_constant_digits_are_skipped(rng, threads):
    # row indices all equal: the high radix digits of every key agree
    nnz = 400_000
    rows = np.full(nnz, 2**29 + 12345)
    cols = rng.integers(0, 1000, nnz)
    indices = np.stack([rows, cols])
    values = rng.random(nnz)
    t = st.sparse_coo_tensor(indices, values, size=(2**30, 2**20), check_invariants=False)
    assert_coo_equal(coalesce(t, threads=threads), *coo_reference(indices, values))


def test_coo_keys_beyond_double_precision(rng):
    # keys up to 2**62: de-linearised with integer division
    shape = (2**31, 2**31)
    indices = rng.integers(0, 2**31, (2, 100_000))
    indices[:, 50_000:] = indices[:, :50_000]
    values = rng.random(100_000)
    t = st.sparse_coo_tensor(indices, values, size=shape, check_invariants=False)
    assert_coo_equal(coalesce(t, threads=2), *coo_reference(indices, values))


# -- shapes beyond int64 keys: the comparison-sort fallback --------------------------------------
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_coo_overflow_fallback(rng, index_dtype, threads):
    hi = np.iinfo(index_dtype).max
    shape = (hi, hi, hi, 3)  # prod(sparse shape) > 2**63
    assert math.prod(shape[:3]) > 2**63
    base = rng.integers(0, hi, (3, 2000)).astype(index_dtype)
    base[:, 1000:] = base[:, :1000]
    base[1, :500] = base[1, 500:1000]  # columns that agree on a prefix
    values = rng.random((2000, 3))
    t = st.sparse_coo_tensor(base, values, size=shape, check_invariants=False)
    assert_coo_equal(coalesce(t, threads=threads), *coo_reference(base, values))


def test_coo_overflow_fallback_sorted_with_duplicates(rng):
    indices = np.array([[0, 0, 5, 2**40 - 1], [7, 7, 1, 2**40 - 1]], np.int64)
    values = np.array([1.0, 2.0, 3.0, 4.0])
    t = st.sparse_coo_tensor(indices, values, size=(2**40, 2**40), check_invariants=False)
    c = coalesce(t)
    np.testing.assert_array_equal(c.indices(), [[0, 5, 2**40 - 1], [7, 1, 2**40 - 1]])
    np.testing.assert_array_equal(c.values(), [3.0, 3.0, 4.0])
    unsorted = st.sparse_coo_tensor(indices[:, ::-1], values[::-1], size=(2**40, 2**40), check_invariants=False)
    np.testing.assert_array_equal(coalesce(unsorted).indices(), c.indices())


# -- bounds ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("huge", [False, True], ids=["keys", "fallback"])
@pytest.mark.parametrize("bad", ["negative", "too_large"])
@pytest.mark.parametrize("dim", [0, 1])
def test_coo_out_of_bounds_raises(rng, dim, bad, huge):
    shape = (2**40, 2**40) if huge else (10, 10)  # 2**80 coordinates: no int64 keys
    indices = rng.integers(0, 10, (2, 50))
    indices[dim, 17] = -1 if bad == "negative" else shape[dim]
    t = st.sparse_coo_tensor(indices, np.ones(50), size=shape, check_invariants=False)
    with pytest.raises(st.InvariantError) as info:
        coalesce(t)
    assert info.value.invariant == ("C4" if bad == "negative" else "C5")
    assert info.value.index == 17 and f"indices[{dim}]" in str(info.value)


@pytest.mark.parametrize("threads", [1, 2])
def test_coo_out_of_bounds_first_position_reported(rng, threads):
    nnz = 200_000
    indices = rng.integers(0, 1000, (2, nnz))
    indices[1, 150_000] = 1000
    indices[0, 190_000] = -3
    t = st.sparse_coo_tensor(indices, np.ones(nnz), size=(1000, 1000), check_invariants=False)
    with pytest.raises(st.InvariantError) as info:
        coalesce(t, threads=threads)
    assert info.value.invariant == "C5" and info.value.index == 150_000
    sorted_t = st.sparse_coo_tensor(np.sort(indices, axis=1), np.ones(nnz), size=(1000, 1000),
                                    check_invariants=False)
    with pytest.raises(st.InvariantError) as info:
        coalesce(sorted_t, threads=threads)
    assert info.value.invariant == "C4" and info.value.index == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_coo_out_of_bounds_first_position_after_disorder(rng, threads):
    # the first half is unsorted with an error after its disorder, the second half sorted with an error
    nnz = 200_000
    indices = np.sort(rng.integers(0, 1000, (2, nnz)), axis=1)
    indices[:, :100] = indices[:, 99::-1]
    indices[0, 50] = 5000
    indices[1, 150_000] = -1
    t = st.sparse_coo_tensor(indices, np.ones(nnz), size=(1000, 1000), check_invariants=False)
    with pytest.raises(st.InvariantError) as info:
        coalesce(t, threads=threads)
    assert info.value.invariant == "C5" and info.value.index == 50


def test_coo_out_of_bounds_sparse_dim_3():
    t = st.sparse_coo_tensor([[0, 1], [2, 0], [1, 5]], [1.0, 2.0], size=(2, 3, 5), check_invariants=False)
    with pytest.raises(st.InvariantError, match=r"indices\[2\] must be < size\[2\]=5; position 1: got 5"):
        coalesce(t)


# -- PyTorch ------------------------------------------------------------------------------------
@requires_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.bool_, np.complex128], ids=str)
@pytest.mark.parametrize("dense", [(), (2,)], ids=str)
@pytest.mark.parametrize("sparse", [(9,), (4, 5), (3, 2, 4)], ids=str)
def test_coo_matches_torch(rng, sparse, dense, dtype):
    import torch

    t, indices, values = random_coo(rng, sparse, dense, dtype, np.int64, nnz=200)
    ours = coalesce(t)
    ref = torch.sparse_coo_tensor(torch.from_numpy(indices), torch.from_numpy(values), sparse + dense).coalesce()
    np.testing.assert_array_equal(ours.indices(), ref.indices().numpy())
    if np.dtype(dtype).kind in "fc":
        np.testing.assert_allclose(ours.values(), ref.values().numpy(), rtol=1e-5)
    else:
        np.testing.assert_array_equal(ours.values(), ref.values().numpy())


# -- compressed: sum_duplicates --------------------------------------------------------------------
def compressed_reference(compressed, plain, values, batch_dim, plain_size):
    """Per batch and row: stable sort of the plain indices, duplicates reduced."""
    B = math.prod(compressed.shape[:batch_dim])
    n = compressed.shape[-1] - 1
    nnz = plain.shape[-1]
    c2, p2 = compressed.reshape(B, n + 1), plain.reshape(B, nnz)
    v2 = values.reshape((B, nnz) + values.shape[batch_dim + 1:])
    comps, plains, vals = [], [], []
    for b in range(B):
        rows = np.repeat(np.arange(n), np.diff(c2[b]))
        order = np.lexsort((p2[b], rows))
        r, p = rows[order], p2[b][order]
        head = np.ones(nnz, bool)
        head[1:] = (r[1:] != r[:-1]) | (p[1:] != p[:-1])
        run = np.cumsum(head) - 1
        comps.append(np.concatenate([[0], np.cumsum(np.bincount(r[head], minlength=n))]))
        plains.append(p[head])
        vals.append(reduce_reference(v2[b][order], run, int(head.sum())))
    batch = compressed.shape[:batch_dim]
    nnz_out = len(plains[0])
    return (np.array(comps, compressed.dtype).reshape(batch + (n + 1,)),
            np.array(plains, plain.dtype).reshape(batch + (nnz_out,)),
            np.array(vals, values.dtype).reshape(batch + (nnz_out,) + values.shape[batch_dim + 1:]))


def messy_compressed(rng, layout, batch, n_compressed, plain_size, blocksize, dense, dtype, index_dtype,
                     distinct=6, extra=5, long_row=0):
    """Per batch: ``distinct`` distinct entries plus ``extra`` repeats (so every batch ends with the
    same nnz), each row shuffled; optionally one row of ``long_row`` extra repeats."""
    B = math.prod(batch)
    comps, plains = [], []
    for _ in range(B):
        cells = rng.choice(n_compressed * plain_size, size=distinct, replace=False)
        cells = np.concatenate([cells, rng.choice(cells, extra)])
        if long_row:
            cells = np.concatenate([cells, rng.choice(plain_size, long_row)])  # row 0
        rows, cols = np.divmod(cells, plain_size)
        order = np.argsort(rows, kind="stable")
        rows, cols = rows[order], cols[order]
        for r in range(n_compressed):  # unsorted within each row
            sel = np.flatnonzero(rows == r)
            cols[sel] = cols[sel][rng.permutation(sel.size)]
        comps.append(np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_compressed))]))
        plains.append(cols)
    if long_row:  # the long rows add different numbers of distinct columns: keep batch 0 only
        B, batch = 1, ()
        comps, plains = comps[:1], plains[:1]
    nnz = len(plains[0])
    compressed = np.array(comps, index_dtype).reshape(batch + (n_compressed + 1,))
    plain = np.array(plains, index_dtype).reshape(batch + (nnz,))
    block = blocksize if layout in ("bsr", "bsc") else ()
    values = nonzero_values(rng, batch + (nnz,) + block + dense, dtype)
    rb, cb = blocksize if layout in ("bsr", "bsc") else (1, 1)
    sparse = (n_compressed * rb, plain_size * cb) if layout in ("csr", "bsr") else (plain_size * rb, n_compressed * cb)
    t = st.sparse_compressed_tensor(compressed, plain, values, size=batch + sparse + dense, layout=layout,
                                    check_invariants=False)
    return t, compressed, plain, values


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("dense", [(), (2,)], ids=str)
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)], ids=str)
@pytest.mark.parametrize("layout", COMPRESSED)
def test_sum_duplicates_matches_reference(rng, layout, batch, dense, dtype, index_dtype):
    t, compressed, plain, values = messy_compressed(rng, layout, batch, 4, 5, (2, 3), dense, dtype, index_dtype)
    before = [a.copy() for a in (compressed, plain, values)]
    c = sum_duplicates(t)
    ref = compressed_reference(compressed, plain, values, len(batch), t.plain_size)
    assert c.layout is t.layout and c.shape == t.shape and c.is_coalesced()
    assert c.index_dtype == index_dtype and c.dtype == values.dtype
    for got, want in zip((c.compressed_indices(), c.plain_indices(), c.values()), ref):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    for a, b in zip((compressed, plain, values), before):  # the input is not modified
        np.testing.assert_array_equal(a, b)
    assert t.coalesce().is_coalesced()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("layout", COMPRESSED)
def test_sum_duplicates_long_rows(rng, layout, threads):
    t, compressed, plain, values = messy_compressed(rng, layout, (), 3, 700, (2, 2), (), np.float64, np.int64,
                                                    distinct=50, extra=20, long_row=2000)
    c = sum_duplicates(t, threads=threads)
    ref = compressed_reference(compressed, plain, values, 0, t.plain_size)
    for got, want in zip((c.compressed_indices(), c.plain_indices(), c.values()), ref):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_sum_duplicates_pair_sort(rng, monkeypatch, index_dtype):
    # rows sort as (plain index, position) pairs when plain index and row offset do not fit one word
    import sparsetensor._backend.cpu._coalesce as mod

    monkeypatch.setattr(mod, "_PACK_BITS", 0)
    t, compressed, plain, values = messy_compressed(rng, "bsr", (2,), 5, 40, (2, 2), (3,), np.float32,
                                                    index_dtype, distinct=30, extra=20)
    c = sum_duplicates(t, threads=2)
    ref = compressed_reference(compressed, plain, values, 1, t.plain_size)
    for got, want in zip((c.compressed_indices(), c.plain_indices(), c.values()), ref):
        np.testing.assert_array_equal(got, want)
    long_t, compressed, plain, values = messy_compressed(rng, "csr", (), 3, 700, (1, 1), (), np.int64,
                                                         index_dtype, distinct=50, extra=20, long_row=2000)
    c = sum_duplicates(long_t)
    ref = compressed_reference(compressed, plain, values, 0, long_t.plain_size)
    for got, want in zip((c.compressed_indices(), c.plain_indices(), c.values()), ref):
        np.testing.assert_array_equal(got, want)


def test_sum_duplicates_many_rows_threads_agree(rng):
    nrows, ncols, nnz = 50_000, 1000, 400_000
    rows = np.sort(rng.integers(0, nrows, nnz))
    cols = rng.integers(0, ncols, nnz)
    crow = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=nrows))])
    values = rng.random(nnz)
    t = st.sparse_csr_tensor(crow, cols, values, size=(nrows, ncols), check_invariants=False)
    one, two = sum_duplicates(t, threads=1), sum_duplicates(t, threads=2)
    for a, b in zip((one.crow_indices(), one.col_indices(), one.values()),
                    (two.crow_indices(), two.col_indices(), two.values())):
        np.testing.assert_array_equal(a, b)
    ref = compressed_reference(crow, cols, values, 0, ncols)
    for got, want in zip((two.crow_indices(), two.col_indices(), two.values()), ref):
        np.testing.assert_array_equal(got, want)


def test_sum_duplicates_matches_scipy(rng):
    sp = pytest.importorskip("scipy.sparse")
    t, compressed, plain, values = messy_compressed(rng, "csr", (), 40, 30, (1, 1), (), np.float64, np.int64,
                                                    distinct=300, extra=200)
    m = sp.csr_array((values.copy(), plain.copy(), compressed.copy()), shape=t.shape)  # sum_duplicates is in place
    m.sum_duplicates()
    c = sum_duplicates(t)
    np.testing.assert_array_equal(c.crow_indices(), m.indptr)
    np.testing.assert_array_equal(c.col_indices(), m.indices)
    np.testing.assert_allclose(c.values(), m.data)


def test_sum_duplicates_canonical_input_is_cheap():
    t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], size=(2, 3), check_invariants=False)
    assert not t.is_coalesced()
    c = sum_duplicates(t)
    assert c.is_coalesced() and c.values() is t.values() and c.col_indices() is t.col_indices()
    assert c.coalesce() is c


def test_sum_duplicates_block_transposed_values(rng):
    t, compressed, plain, values = messy_compressed(rng, "bsr", (2,), 3, 4, (2, 3), (), np.int64, np.int32)
    bsc = t.mT  # values are contiguous only after swapping the block dims (3.7)
    assert bsc.layout is st.sparse_bsc and not bsc.values().flags.c_contiguous
    c = sum_duplicates(bsc)
    ref = compressed_reference(compressed, plain, values, 1, t.plain_size)
    np.testing.assert_array_equal(c.ccol_indices(), ref[0])
    np.testing.assert_array_equal(c.row_indices(), ref[1])
    np.testing.assert_array_equal(c.values(), ref[2].swapaxes(-1, -2))


def test_sum_duplicates_batches_with_different_nnz():
    crow = np.array([[0, 2], [0, 2]])
    col = np.array([[1, 1], [0, 1]])  # batch 0 has a duplicate, batch 1 does not
    t = st.sparse_csr_tensor(crow, col, np.ones((2, 2)), size=(2, 1, 2), check_invariants=False)
    with pytest.raises(ValueError, match=r"different nnz \[1, 2\]"):
        sum_duplicates(t)


@pytest.mark.parametrize("layout", COMPRESSED)
@pytest.mark.parametrize("case, invariant", [
    (([1, 1, 2], [0, 1]), "5.1"),
    (([0, 1, 1], [0, 1]), "5.2"),
    (([0, 2, 1, 2], [0, 1]), "5.3"),
    (([0, 1, 2], [0, -1]), "5.4"),
    (([0, 1, 2], [0, 3]), "5.5"),
], ids=["5.1", "5.2", "5.3", "5.4", "5.5"])
def test_sum_duplicates_rejects_broken_indices(layout, case, invariant):
    comp, plain = (np.array([c, c], np.int64) for c in case)  # two batches, the second one broken
    comp[0], plain[0] = [0, 1, 2, 2][: comp.shape[1]], [0, 1]
    n = comp.shape[1] - 1
    blocked = layout in ("bsr", "bsc")
    values = np.ones((2, 2) + ((1, 1) if blocked else ()))
    sparse = (n, 3) if layout in ("csr", "bsr") else (3, n)
    t = st.sparse_compressed_tensor(comp, plain, values, size=(2,) + sparse, layout=layout,
                                    check_invariants=False)
    with pytest.raises(st.InvariantError) as info:
        sum_duplicates(t)
    assert info.value.invariant == invariant and info.value.batch == (1,)


def test_docstring_examples():
    import doctest

    import sparsetensor._backend.cpu._coalesce as mod

    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", ["random", "low_rows", "blocks"])
def test_coo_bucket_sort_matches_unique(case, threads):
    """The bucket sort (keys of <= 32 bits below the top digit): many buckets, big ones sorted by
    radix and small ones by insertion, a top digit that never varies, values carried or gathered."""
    from sparsetensor._lib._coalesce import bucket_bits

    rng = np.random.default_rng(7)
    n, shape, dense = 400_000, (1 << 20, 1 << 20), ()
    rows = rng.integers(0, shape[0], n)
    if case == "low_rows":  # the top key bits are the same in every key: the digit moves down
        rows = rows % 300
    if case == "blocks":  # (n, 2) values travel by position
        dense = (2,)
    cols = rng.integers(0, shape[1], n)
    dup = rng.integers(0, n, n // 4)
    src = rng.integers(0, n, n // 4)
    rows[dup], cols[dup] = rows[src], cols[src]
    values = rng.integers(-5, 5, (n,) + dense).astype(np.float64)
    assert bucket_bits(n, (shape[0] * shape[1] - 1).bit_length()) > 0
    t = st.sparse_coo_tensor(np.stack([rows, cols]), values, size=shape + dense, check_invariants=False)
    c = coalesce(t, threads=threads)
    c.check_invariants()
    keys = rows * shape[1] + cols
    uniq, run = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(c.indices(), np.stack(np.divmod(uniq, shape[1])))
    np.testing.assert_array_equal(c.values(), reduce_reference(values, run, uniq.size))
