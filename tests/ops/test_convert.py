"""Layout conversions among coo, csr, csc, bsr and bsc (sparsetensor.ops.convert).

Oracles: NumPy references of the members (built from a dense array and the set of
specified blocks/elements), PyTorch 2.13's conversions where it supports the direction,
SciPy for large transposes, and round trips. Inputs are built from members directly
(``check_invariants=False``), so these tests do not need the validation, dense or
coalescing kernels; the tests that do use them skip until those exist.
"""

from __future__ import annotations

import doctest
import itertools
import math
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import sparsetensor as st
from sparsetensor._lib import _validate as _validate_kernels
from conftest import (HAVE_TORCH, INDEX_DTYPES, LAYOUTS, VALUE_DTYPES, compressed_members, distinct_cells,
                      nonzero_values, random_dense, requires_torch)

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")  # torch's beta/invariant notes

BLOCKED = ("bsr", "bsc")
BY_ROWS = ("csr", "bsr")
PAIRS = [(a, b) for a in LAYOUTS for b in LAYOUTS if a != b]
BLOCKSIZES = [(1, 1), (2, 3), (3, 1)]


# -- what this build can do (the dense/validate/coalesce kernels land separately) ---------------------
def _works(fn, *errors) -> bool:
    try:
        fn()
    except (NotImplementedError, AttributeError, ImportError) + errors:
        return False
    return True


HAVE_TO_DENSE = _works(lambda: st.sparse_csr_tensor([0, 1], [0], [1.0], size=(1, 1), check_invariants=False)
                       .to_dense())
HAVE_FROM_DENSE = _works(lambda: st.from_dense(np.eye(2), "csr", index_dtype="int64"))
HAVE_COMPRESSED_COALESCE = _works(lambda: st.sparse_csr_tensor([0, 2], [1, 0], [1.0, 2.0], size=(1, 2),
                                                               check_invariants=False).coalesce())
HAVE_VALIDATE_KERNELS = all(hasattr(_validate_kernels, name)
                            for name in ("validate_compressed", "validate_coo", "coo_is_coalesced"))
HAVE_VALIDATE = _works(lambda: st.sparse_csr_tensor([0, 1], [0], [1.0], size=(1, 1)))
requires_to_dense = pytest.mark.skipif(not HAVE_TO_DENSE, reason="t.to_dense() is not implemented in this build")
requires_from_dense = pytest.mark.skipif(not HAVE_FROM_DENSE, reason="st.from_dense is not implemented in this build")

if HAVE_TORCH:
    import torch

    TORCH_LAYOUT = {"coo": torch.sparse_coo, "csr": torch.sparse_csr, "csc": torch.sparse_csc,
                    "bsr": torch.sparse_bsr, "bsc": torch.sparse_bsc}


# -- NumPy references ------------------------------------------------------------------------------
def _geometry(a, m):
    batch, (rows, cols), dense = a.shape[:m], a.shape[m:m + 2], a.shape[m + 2:]
    return batch, rows, cols, dense, math.prod(batch), math.prod(dense)


def element_spec(a, m):
    """(B, rows, cols): elements with a nonzero value (any over the dense dims)."""
    batch, rows, cols, dense, B, D = _geometry(a, m)
    return (a.reshape(B, rows, cols, D) != 0).any(axis=3)


def block_spec(elements, bs):
    """(B, rows // rb, cols // cb): blocks holding a specified element."""
    B, rows, cols = elements.shape
    rb, cb = bs
    return elements.reshape(B, rows // rb, rb, cols // cb, cb).any(axis=(2, 4))


def expand_spec(blocks, bs):
    return np.repeat(np.repeat(blocks, bs[0], axis=1), bs[1], axis=2)


def ref_compressed(a, m, spec, layout, bs, index_dtype):
    """The canonical members of ``layout`` whose specified blocks are ``spec`` (B, nbr, nbc)."""
    return compressed_members(a, spec, layout, bs, m, index_dtype)


def ref_coo(a, m, elements, index_dtype):
    """Coalesced COO members (batch dims as leading sparse dims) of the specified elements."""
    batch, rows, cols, dense, B, D = _geometry(a, m)
    spec = elements.reshape(batch + (rows, cols))
    idx = np.array(np.nonzero(spec), dtype=index_dtype).reshape(m + 2, -1)
    return idx, a[tuple(idx)] if idx.shape[1] else np.zeros((0,) + dense, a.dtype)


def make(layout, members, shape, *, trusted=True):
    """A tensor from members, built without the O(nnz) checks; ``trusted`` marks it canonical
    (as a checked constructor would), otherwise conversions must scan it first."""
    if layout == "coo":
        return st.sparse_coo_tensor(*members, size=shape, check_invariants=False, is_coalesced=True)
    t = st.sparse_compressed_tensor(*members, size=shape, layout=layout, check_invariants=False)
    if trusted:
        t = st.CompressedTensor(t.compressed_indices(), t.plain_indices(), t.values(), t.shape, t.layout,
                                canonical=True)
    return t


def members(t):
    if t.layout.name == "coo":
        return t.indices(), t.values()
    return t.compressed_indices(), t.plain_indices(), t.values()


def check_result(t, layout, shape, dtype, index_dtype, blocksize=(1, 1)):
    """Every invariant, in NumPy (and t.check_invariants() where this build has it)."""
    assert t.layout.name == layout and t.shape == tuple(shape) and t.dtype == dtype
    assert t.index_dtype == index_dtype
    if layout == "coo":
        idx, v = t.indices(), t.values()
        S = idx.shape[0]
        assert idx.dtype == index_dtype and idx.ndim == 2 and v.shape == (idx.shape[1],) + tuple(shape[S:])
        assert t.is_coalesced()
        if idx.shape[1]:
            assert (idx >= 0).all() and (idx < np.array(shape[:S])[:, None]).all()
            flat = np.ravel_multi_index(tuple(idx.astype(np.int64)), shape[:S])
            assert (np.diff(flat) > 0).all(), "coo result must be sorted and distinct"
    else:
        c, p, v = t.compressed_indices(), t.plain_indices(), t.values()
        m = t.batch_dim
        assert c.dtype == p.dtype == index_dtype and c.flags.c_contiguous and p.flags.c_contiguous
        assert v.flags.c_contiguous and t.is_coalesced()
        rb, cb = blocksize
        assert t.blocksize == blocksize
        rows, cols = shape[m], shape[m + 1]
        n, nplain = (rows // rb, cols // cb) if layout in BY_ROWS else (cols // cb, rows // rb)
        nnz = p.shape[-1]
        assert c.shape == tuple(shape[:m]) + (n + 1,)
        assert v.shape == tuple(shape[:m]) + (nnz,) + ((rb, cb) if layout in BLOCKED else ()) + tuple(shape[m + 2:])
        B = math.prod(shape[:m])
        c2, p2 = c.reshape(B, n + 1).astype(np.int64), p.reshape(B, nnz)
        for b in range(c2.shape[0]):
            assert c2[b, 0] == 0 and c2[b, -1] == nnz
            d = np.diff(c2[b])
            assert (d >= 0).all() and (d <= nplain).all()
            assert ((p2[b] >= 0) & (p2[b] < nplain)).all()
            starts = np.zeros(nnz, dtype=bool)  # positions that begin a slice
            starts[c2[b, :-1][c2[b, :-1] < nnz]] = True
            assert ((np.diff(p2[b].astype(np.int64)) > 0) | starts[1:]).all(), "5.6: sorted, distinct per slice"
    try:
        t.check_invariants()
    except NotImplementedError:
        pass  # the validation kernels are placeholders in this build
    except AttributeError:
        if HAVE_VALIDATE_KERNELS:
            raise


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


# -- a conversion case: dense data, the input's members, and what every target must be --------------
class Case:
    """A dense array ``a`` whose specified blocks (``bs_in`` grid) are the nonzero ones; the input
    tensor in ``src`` layout, and the references for any target."""

    def __init__(self, rng, src, bs_in, *, batch=(), dense=(), dtype=np.float64, index_dtype=np.int64,
                 grid=(3, 4), multiple=(1, 1), nnz=None, same_pattern=False):
        self.src, self.bs_in, self.m, self.index_dtype = src, bs_in, len(batch), np.dtype(index_dtype)
        gen_bs = bs_in if src in BLOCKED else (1, 1)
        # sizes that the blocksizes of the input and of every target divide
        blocks = (grid[0] * multiple[0] * (1 if src in BLOCKED else bs_in[0]),
                  grid[1] * multiple[1] * (1 if src in BLOCKED else bs_in[1]))
        if nnz is None:
            nnz = int(rng.integers(0, blocks[0] * blocks[1] + 1))
        # (conftest's random_dense cannot make partial blocks when nnz == 0)
        self.a = random_dense(rng, batch=batch, blocks=blocks, blocksize=gen_bs, dense=dense, dtype=dtype, nnz=nnz,
                              partial_blocks=nnz > 0)
        if same_pattern and self.a.size:  # every batch has batch 0's nonzeros, with values of its own
            B = math.prod(batch)
            pattern = np.broadcast_to((self.a.reshape(B, -1)[:1] != 0), (B, self.a.size // B)).reshape(self.a.shape)
            self.a = np.where(pattern, nonzero_values(rng, self.a.shape, dtype), np.zeros((), dtype))
        elements = element_spec(self.a, self.m)
        if src in BLOCKED:  # every item of a specified block is specified
            elements = expand_spec(block_spec(elements, bs_in), bs_in)
        self.elements = elements

    @property
    def shape(self):
        return self.a.shape

    def input_members(self):
        if self.src == "coo":
            return ref_coo(self.a, self.m, self.elements, self.index_dtype)
        return ref_compressed(self.a, self.m, block_spec(self.elements, self.bs_in), self.src, self.bs_in,
                              self.index_dtype)

    def input(self, trusted=True):
        return make(self.src, self.input_members(), self.shape, trusted=trusted)

    def expected(self, dst, bs):
        """The members of the ``dst`` result, or the ValueError text when batches differ in nnz."""
        if dst == "coo":
            return ref_coo(self.a, self.m, self.elements, self.index_dtype)
        spec = block_spec(self.elements, bs)
        per_batch = spec.sum(axis=(1, 2))
        if per_batch.size and (per_batch != per_batch[0]).any():
            return "same"
        return ref_compressed(self.a, self.m, spec, dst, bs, self.index_dtype)


def run_case(case, dst, bs_out, threads=None):
    want = case.expected(dst, bs_out)
    outs = []
    for trusted in (True, False):
        t = case.input(trusted)
        before = [x.copy() for x in members(t)]
        kw = dict(blocksize=bs_out) if dst in BLOCKED else {}
        if isinstance(want, str):
            with pytest.raises(ValueError, match=want):
                t.to_sparse(dst, threads=threads, **kw)
            continue
        out = t.to_sparse(dst, threads=threads, **kw)
        assert_same(members(t), before)  # the input is untouched
        if case.src == "coo" and dst == "csr":  # as torch: the COO's last index row and values
            assert np.shares_memory(out.col_indices(), t.indices()) or out.col_indices().size == 0
            assert np.shares_memory(out.values(), t.values()) or out.values().size == 0
            assert not any(np.shares_memory(out.crow_indices(), y) for y in members(t))
        else:
            assert not any(np.shares_memory(x, y) for x in members(out) for y in members(t))
        check_result(out, dst, case.shape, case.a.dtype, case.index_dtype, bs_out if dst in BLOCKED else (1, 1))
        assert_same(members(out), want)
        outs.append(out)
    return outs


def _pick(seq, *key):
    return seq[zlib.crc32(repr(key).encode()) % len(seq)]


# -- every direction against the NumPy reference ----------------------------------------------------
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dense", [(), (2,)])
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
@pytest.mark.parametrize("src,dst", PAIRS)
def test_every_direction_matches_reference(rng, src, dst, batch, dense, index_dtype):
    dtype = _pick(VALUE_DTYPES, src, dst, batch, dense, index_dtype)
    bs_ins = BLOCKSIZES if src in BLOCKED else [(1, 1)]
    bs_outs = BLOCKSIZES if dst in BLOCKED else [(1, 1)]
    for bs_in, bs_out in itertools.product(bs_ins, bs_outs):
        multiple = (bs_out[0], bs_out[1]) if src in BLOCKED else (1, 1)
        grid = (2, 3)
        if src not in BLOCKED:
            grid = (2 * bs_out[0], 3 * bs_out[1])
        case = Case(rng, src, bs_in, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, grid=grid,
                    multiple=multiple, nnz=3)
        run_case(case, dst, bs_out)


@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("src,dst,bs_in,bs_out", [
    ("csr", "csc", None, None), ("csc", "csr", None, None), ("csr", "bsr", None, (2, 3)),
    ("csc", "bsr", None, (3, 1)), ("bsr", "csr", (2, 3), None), ("bsc", "csr", (1, 2), None),
    ("bsr", "bsc", (2, 3), (2, 3)), ("bsr", "coo", (3, 2), None), ("csc", "coo", None, None),
    ("coo", "csr", None, None), ("coo", "bsc", None, (2, 2)), ("bsr", "bsr", (2, 3), (1, 3)),
])
def test_every_value_dtype(rng, src, dst, bs_in, bs_out, dtype):
    bs_in = bs_in or (1, 1)
    bs_out = bs_out or (1, 1)
    m = bs_out if src in BLOCKED else (1, 1)
    grid = (2, 2) if src in BLOCKED else (3 * bs_out[0], 2 * bs_out[1])
    batch = () if src == "coo" else (2,)
    case = Case(rng, src, bs_in, batch=batch, dense=(2,), dtype=dtype, index_dtype=np.int32, grid=grid,
                multiple=m, nnz=2)
    run_case(case, dst, bs_out)


# -- edge cases: empty tensors, zero-size dims ------------------------------------------------------
@pytest.mark.parametrize("src,dst", PAIRS)
@pytest.mark.parametrize("batch,grid,dense,nnz", [
    ((), (3, 2), (), 0), ((2,), (2, 2), (2,), 0), ((), (0, 3), (), 0), ((), (2, 0), (), 0),
    ((0,), (2, 2), (), 0), ((2,), (2, 3), (0,), 4), ((1, 2), (1, 1), (), 1), ((), (2, 2), (), 4),
])
def test_empty_and_zero_size(rng, src, dst, batch, grid, dense, nnz):
    bs_in = (2, 1) if src in BLOCKED else (1, 1)
    bs_out = (1, 2) if dst in BLOCKED else (1, 1)
    grid = (grid[0] * 2, grid[1] * 2) if src not in BLOCKED else grid
    case = Case(rng, src, bs_in, batch=batch, dense=dense, grid=grid, multiple=(1, 2) if src in BLOCKED else (1, 1),
                nnz=min(nnz, math.prod(grid)), dtype=np.float32, index_dtype=np.int32)
    run_case(case, dst, bs_out)


def test_coo_with_zero_size_leading_dim():
    t = st.sparse_coo_tensor(np.zeros((3, 0), np.int64), np.zeros(0), size=(0, 2, 3), check_invariants=False,
                             is_coalesced=True)
    out = t.to_sparse_csr()
    check_result(out, "csr", (0, 2, 3), np.float64, np.int64)
    assert out.crow_indices().shape == (0, 3) and out.nnz == 0


# -- random property test over everything --------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(src=hs.sampled_from(LAYOUTS), dst=hs.sampled_from(LAYOUTS), dtype=hs.sampled_from(VALUE_DTYPES),
       index_dtype=hs.sampled_from(INDEX_DTYPES), batch=hs.sampled_from([(), (1,), (3,), (2, 2), (0,)]),
       dense=hs.sampled_from([(), (2,), (0,), (1, 2)]), grid=hs.tuples(hs.integers(0, 4), hs.integers(0, 4)),
       bs_in=hs.sampled_from(BLOCKSIZES + [(2, 2)]), bs_out=hs.sampled_from(BLOCKSIZES + [(1, 2)]),
       seed=hs.integers(0, 2**32 - 1), threads=hs.sampled_from([None, 1, 2, 3]))
def test_property_random_conversions(src, dst, dtype, index_dtype, batch, dense, grid, bs_in, bs_out, seed, threads):
    rng = np.random.default_rng(seed)
    bs_in = bs_in if src in BLOCKED else (1, 1)
    bs_out = bs_out if dst in BLOCKED else (1, 1)
    if src in BLOCKED:
        mult = (math.lcm(bs_in[0], bs_out[0]) // bs_in[0], math.lcm(bs_in[1], bs_out[1]) // bs_in[1])
        g = grid
    else:
        mult = (1, 1)
        g = (grid[0] * bs_out[0], grid[1] * bs_out[1])
    nblocks = g[0] * g[1] * mult[0] * mult[1]
    case = Case(rng, src, bs_in, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, grid=g,
                multiple=mult, nnz=int(rng.integers(0, nblocks + 1)))
    if src == dst and (src not in BLOCKED or bs_in == bs_out):
        t = case.input()
        assert t.to_sparse(dst, blocksize=bs_out if dst in BLOCKED else None) is t
        return
    run_case(case, dst, bs_out, threads=threads)


# -- round trips --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int16, np.bool_])
@pytest.mark.parametrize("via", ["csc", "coo", "bsr", "bsc"])
@pytest.mark.parametrize("batch", [(), (2,)])
def test_round_trip_from_csr(rng, via, batch, dtype):
    case = Case(rng, "csr", (1, 1), batch=batch, dense=(3,), dtype=dtype, grid=(4, 6), nnz=9, same_pattern=True)
    t = case.input()
    kw = dict(blocksize=(2, 3)) if via in BLOCKED else {}
    back = t.to_sparse(via, **kw).to_sparse("csr")  # coo: batch dims go to sparse dims and back
    if via in BLOCKED:  # blocks add explicit zeros: the original entries are a subset, values equal
        dense_back = np.zeros(case.shape, dtype)
        _scatter_csr(dense_back, back, case.m)
        np.testing.assert_array_equal(dense_back, case.a)
        assert back.nnz >= t.nnz
    else:
        assert_same(members(back), members(t))


def _scatter_csr(out, t, m):
    B = math.prod(out.shape[:m])
    o = out.reshape((B,) + out.shape[m:])
    c = t.crow_indices().reshape(B, -1)
    p = t.col_indices().reshape(B, -1)
    v = t.values().reshape((B, t.nnz) + out.shape[m + 2:])
    for b in range(B):
        rows = np.repeat(np.arange(c.shape[1] - 1), np.diff(c[b]))
        o[b, rows, p[b]] = v[b]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("bs", BLOCKSIZES)
def test_round_trip_blocked(rng, bs, index_dtype):
    case = Case(rng, "bsr", bs, batch=(2,), dense=(2,), dtype=np.complex64, index_dtype=index_dtype, grid=(3, 3),
                nnz=4)
    t = case.input()
    assert_same(members(t.to_sparse_bsc(bs).to_sparse_bsr(bs)), members(t))
    # expanding then regrouping with the same blocksize gives the blocks back
    assert_same(members(t.to_sparse_csr().to_sparse_bsr(bs)), members(t))
    assert_same(members(t.to_sparse_csc().to_sparse_bsr(bs)), members(t))
    assert_same(members(t.to_sparse_coo().to_sparse_bsr(bs)), members(t))
    assert_same(members(t.to_sparse_coo().to_sparse_bsc(bs)), members(t.to_sparse_bsc(bs)))


def test_blocked_values_that_are_block_transposed(rng):
    """bsr.mT is a bsc whose values are contiguous only after swapping the block dims (3.7)."""
    case = Case(rng, "bsr", (2, 3), batch=(2,), dense=(2,), grid=(3, 2), nnz=3)
    t = case.input()
    tt = t.mT
    assert not tt.values().flags.c_contiguous
    want_dense = np.swapaxes(case.a, 1, 2)
    out = tt.to_sparse_csr()
    d = np.zeros(want_dense.shape, want_dense.dtype)
    _scatter_csr(d, out, 1)
    np.testing.assert_array_equal(d, want_dense)
    check_result(out, "csr", want_dense.shape, want_dense.dtype, np.int64)
    bsr = tt.to_sparse_bsr((3, 2))
    spec = np.swapaxes(block_spec(case.elements, (2, 3)), 1, 2)
    assert_same(members(bsr), ref_compressed(want_dense, 1, spec, "bsr", (3, 2), np.int64))
    check_result(bsr, "bsr", want_dense.shape, want_dense.dtype, np.int64, (3, 2))


# -- large inputs: the parallel, bucketed and batch-parallel kernel paths ----------------------------------
def _random_csr(rng, rows, cols, nnz, index_dtype, batch=1):
    crows, cols_list = [], []
    for _ in range(batch):
        flat = distinct_cells(rng, rows * cols, nnz)
        r, c = np.divmod(flat, cols)
        crows.append(np.concatenate([[0], np.cumsum(np.bincount(r, minlength=rows))]))
        cols_list.append(c)
    crow = np.array(crows, dtype=index_dtype).reshape(batch, rows + 1)
    col = np.array(cols_list, dtype=index_dtype).reshape(batch, nnz)
    return crow, col


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("shape,nnz", [((3000, 200_000), 300_000), ((500, 3000), 200_000), ((200_000, 7), 300_000)])
def test_large_transpose_matches_scipy(rng, shape, nnz, index_dtype, threads):
    sp = pytest.importorskip("scipy.sparse")
    crow, col = _random_csr(rng, *shape, nnz, index_dtype)
    vals = rng.standard_normal(nnz).astype(np.float32)
    t = make("csr", (crow[0], col[0], vals), shape)
    out = t.to_sparse_csc(threads=threads)
    ref = sp.csr_array((vals, col[0], crow[0]), shape=shape).tocsc()
    np.testing.assert_array_equal(out.ccol_indices(), ref.indptr)
    np.testing.assert_array_equal(out.row_indices(), ref.indices)
    np.testing.assert_array_equal(out.values(), ref.data)
    back = out.to_sparse_csr(threads=threads)
    assert_same(members(back), (crow[0], col[0], vals))
    coo = t.to_sparse_coo(threads=threads)
    refc = sp.csr_array((vals, col[0], crow[0]), shape=shape).tocoo()
    np.testing.assert_array_equal(coo.indices(), np.array([refc.row, refc.col]))
    assert_same(members(coo.to_sparse_csr(threads=threads)), (crow[0], col[0], vals))


def _csc_reference(crow, col, vals, ncols):
    """NumPy csr -> csc of one batch: a stable sort by column."""
    rows = np.repeat(np.arange(crow.size - 1), np.diff(crow))
    order = np.lexsort((rows, col))
    ccol = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=ncols))]).astype(crow.dtype)
    return ccol, rows[order].astype(crow.dtype), vals[order]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype,dense,index_dtype", [
    (np.uint8, (), np.int32), (np.float16, (), np.int64), (np.complex128, (), np.int32), (np.float32, (3,), np.int64),
    (np.bool_, (1,), np.int32)], ids=str)
@pytest.mark.parametrize("batch", [3, 9])
def test_large_batched_transpose(rng, batch, dtype, dense, index_dtype, threads):
    """Bucketed transposes of batches whose nnz is not a multiple of the write-combining width."""
    from sparsetensor._lib import _transpose as kernels

    rows, cols, nnz = 700, 20_011, 150_001
    crow, col = _random_csr(rng, rows, cols, nnz, index_dtype, batch=batch)
    vals = nonzero_values(rng, (batch, nnz) + dense, dtype)
    t = make("csr", (crow, col, vals), (batch, rows, cols) + dense)
    old = kernels._tune(bucketed_min_bytes=0, direct_max_band=-1)  # bucketed at this size
    try:
        out = t.to_sparse_csc(threads=threads)
    finally:
        kernels._tune(*old)
    check_result(out, "csc", t.shape, np.dtype(dtype), np.dtype(index_dtype))
    for b in range(batch):
        assert_same([x[b] for x in members(out)], _csc_reference(crow[b], col[b], vals[b], cols))
    assert_same(members(out.to_sparse_csr(threads=threads)), members(t))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("rows", [60_000, 70_000])
def test_bucket_keys_wider_than_the_index(rng, rows, index_dtype, threads):
    """Buckets of 2**16 plain indices: an int32 key (row << 16 | offset) overflows past 65536 rows
    and goes to a uint64 side array; below that, and for int64, keys live in the output itself."""
    from sparsetensor._lib import _transpose as kernels

    cols, nnz = 140_000, 200_000
    crow, col = _random_csr(rng, rows, cols, nnz, index_dtype)
    vals = rng.standard_normal(nnz).astype(np.float32)
    t = make("csr", (crow[0], col[0], vals), (rows, cols))
    # bucketed at this size, with as few buckets as 2**16 plain indices each allow
    old = kernels._tune(max_buckets=1, bucketed_min_bytes=0, direct_max_band=-1)
    try:
        out = t.to_sparse_csc(threads=threads)
    finally:
        kernels._tune(*old)
    check_result(out, "csc", t.shape, np.dtype(np.float32), np.dtype(index_dtype))
    assert_same(members(out), _csc_reference(crow[0], col[0], vals, cols))


@pytest.mark.parametrize("threads", [1, 2])
def test_many_small_batches(rng, threads):
    crow, col = _random_csr(rng, 40, 5000, 300, np.int32, batch=24)
    vals = rng.standard_normal((24, 300, 2))
    t = make("csr", (crow.reshape(4, 6, -1), col.reshape(4, 6, -1), vals.reshape(4, 6, 300, 2)), (4, 6, 40, 5000, 2))
    out = t.to_sparse_csc(threads=threads)
    for b in range(24):
        i, j = divmod(b, 6)
        single = make("csr", (crow[b], col[b], vals[b]), (40, 5000, 2)).to_sparse_csc(threads=1)
        assert_same([x[i, j] for x in members(out)], members(single))
    assert_same(members(out.to_sparse_csr(threads=threads)), members(t))


@pytest.mark.parametrize("threads", [1, 2])
def test_big_blocks(rng, threads):
    case = Case(rng, "bsr", (8, 100), batch=(3,), dense=(2,), dtype=np.float16, grid=(6, 5), nnz=12)
    t = case.input()
    for dst, bs in [("bsc", (8, 100)), ("csr", None), ("coo", None), ("bsr", (4, 50)), ("csc", None)]:
        if dst == "coo":
            assert_same(members(t.to_sparse(dst, threads=threads)), case.expected(dst, None))
            continue
        out = t.to_sparse(dst, blocksize=bs, threads=threads)
        assert_same(members(out), case.expected(dst, bs or (1, 1)))


def test_threads_give_identical_results(rng):
    crow, col = _random_csr(rng, 3000, 9000, 400_000, np.int64)
    vals = rng.integers(0, 100, size=(400_000,)).astype(np.int16)
    t = make("csr", (crow[0], col[0], vals), (3000, 9000))
    for dst, kw in [("csc", {}), ("bsr", dict(blocksize=(3, 9))), ("bsc", dict(blocksize=(2, 2))), ("coo", {})]:
        ref = members(t.to_sparse(dst, threads=1, **kw))
        for th in (2, 3, 8):
            assert_same(members(t.to_sparse(dst, threads=th, **kw)), ref)


# -- PyTorch conformance ------------------------------------------------------------------------------------
def torch_of(layout, mem, shape):
    if layout == "coo":
        idx, v = mem
        return torch.sparse_coo_tensor(torch.from_numpy(idx.astype(np.int64)), torch.from_numpy(v), shape).coalesce()
    c, p, v = mem
    return torch.sparse_compressed_tensor(torch.from_numpy(c), torch.from_numpy(p), torch.from_numpy(v), shape,
                                          layout=TORCH_LAYOUT[layout])


def torch_supports(src, dst, batch, bs_in, bs_out):
    if src in BLOCKED and dst in ("csr", "csc"):
        return False  # torch: "expected SparseCsr or SparseCsc layout but got SparseBsr"
    if src in BLOCKED and dst in BLOCKED and bs_in != bs_out:
        return False  # torch: blocksize changes are not supported
    if src in ("csr", "csc") and dst in BLOCKED and batch:
        return False  # torch: batched csr -> bsr is not supported
    if src == "coo" and batch:
        return False  # torch: coo -> compressed needs sparse_dim == 2
    return True


@requires_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_, np.complex128, np.float16, np.int8,
                                   np.uint8, np.int16, np.int32, np.complex64], ids=str)
@pytest.mark.parametrize("src,dst", PAIRS)
def test_matches_torch(rng, src, dst, dtype):
    for batch, dense, index_dtype in [((), (), np.int64), ((2,), (2,), np.int32), ((), (3,), np.int32)]:
        bs_in = (2, 3) if src in BLOCKED else (1, 1)
        bs_out = (2, 3) if dst in BLOCKED else (1, 1)
        if not torch_supports(src, dst, batch, bs_in, bs_out):
            continue
        if src == "coo":
            index_dtype = np.int64  # torch's coo indices are int64
        grid = (2, 3) if src in BLOCKED else (4, 6)
        case = Case(rng, src, bs_in, batch=batch, dense=dense, dtype=dtype, index_dtype=index_dtype, grid=grid,
                    nnz=5)
        ours = case.input().to_sparse(dst, **(dict(blocksize=bs_out) if dst in BLOCKED else {}))
        tt = torch_of(src, case.input_members(), case.shape)
        theirs = tt.to_sparse(layout=TORCH_LAYOUT[dst], blocksize=bs_out if dst in BLOCKED else None)
        if dst == "coo":
            theirs = theirs.coalesce()  # torch's bsr -> coo lists entries block by block
            got, want = members(ours), (theirs.indices().numpy(), theirs.values().numpy())
        else:
            c, p = ((theirs.crow_indices(), theirs.col_indices()) if dst in BY_ROWS
                    else (theirs.ccol_indices(), theirs.row_indices()))
            got, want = members(ours), (c.numpy(), p.numpy(), theirs.values().numpy())
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g.astype(w.dtype) if g.dtype != w.dtype else g, w)
        assert ours.shape == tuple(theirs.shape)


@requires_torch
def test_torch_bsr_to_coo_keeps_explicit_zeros(rng):
    """Expanding blocks makes every item an entry, as torch's bsr -> coo does."""
    a = np.zeros((4, 6), np.float32)
    a[0, 0] = 1.0
    mem = ref_compressed(a, 0, block_spec(element_spec(a, 0), (2, 3)), "bsr", (2, 3), np.int64)
    t = make("bsr", mem, a.shape)
    ours = t.to_sparse_coo()
    theirs = torch_of("bsr", mem, a.shape).to_sparse_coo().coalesce()
    assert ours.nnz == 6 == theirs._nnz()
    np.testing.assert_array_equal(ours.indices(), theirs.indices().numpy())
    csr = t.to_sparse_csr()
    assert csr.nnz == 6
    np.testing.assert_array_equal(csr.col_indices(), [0, 1, 2, 0, 1, 2])


# -- arguments --------------------------------------------------------------------------------------
@pytest.fixture
def csr(rng):
    return Case(rng, "csr", (1, 1), grid=(4, 6), nnz=5, dense=(2,)).input()


def test_same_layout_is_a_no_op(rng, csr):
    assert csr.to_sparse("csr") is csr
    assert csr.to_sparse() is csr
    assert csr.to_sparse(st.sparse_csr, dense_dim=1) is csr
    b = csr.to_sparse_bsr((2, 3))
    assert b.to_sparse_bsr((2, 3)) is b
    assert b.to_sparse("bsr") is b  # no blocksize: the tensor's own
    assert b.to_sparse() is b
    coo = csr.to_sparse_coo()
    assert coo.to_sparse("coo") is coo and coo.to_sparse_coo() is coo
    unchecked = Case(rng, "csc", (1, 1)).input(trusted=False)
    assert unchecked.to_sparse("csc") is unchecked


def test_blocksize_rules(csr):
    with pytest.raises(ValueError, match="blocksize is only defined"):
        csr.to_sparse("csc", blocksize=(1, 1))
    with pytest.raises(ValueError, match="blocksize is only defined"):
        csr.to_sparse("coo", blocksize=(2, 2))
    with pytest.raises(ValueError, match="needs blocksize"):
        csr.to_sparse("bsr")
    with pytest.raises(ValueError, match="needs blocksize"):
        csr.to_sparse_bsr((2, 3)).to_sparse("bsc")
    with pytest.raises(ValueError, match="must divide"):
        csr.to_sparse_bsr((3, 3))
    with pytest.raises(ValueError, match="must divide"):
        csr.to_sparse_coo().to_sparse_bsc((1, 4))
    with pytest.raises(ValueError, match="positive"):
        csr.to_sparse_bsr((0, 1))
    with pytest.raises(ValueError, match="positive"):
        csr.to_sparse_bsr((1, 2, 3))
    with pytest.raises(TypeError, match="pair of ints"):
        csr.to_sparse_bsr(2)


def test_dense_dim_must_match(csr):
    assert csr.to_sparse_csc(dense_dim=1).dense_dim == 1
    with pytest.raises(ValueError, match="dense_dim must be 1"):
        csr.to_sparse_csc(dense_dim=0)
    with pytest.raises(ValueError, match="dense_dim must be 1"):
        csr.to_sparse_bsr((2, 2), dense_dim=2)


def test_bad_targets_and_inputs(csr):
    from sparsetensor.ops.convert import to_sparse

    with pytest.raises(ValueError, match="strided"):
        csr.to_sparse("strided")
    with pytest.raises(ValueError, match="unknown layout"):
        csr.to_sparse("dia")
    with pytest.raises(TypeError, match="sparse tensor or a NumPy array"):
        to_sparse([[1, 0]], "csr")
    one_dim = st.sparse_coo_tensor([[0, 2]], [1.0, 2.0], size=(3,), check_invariants=False, is_coalesced=True)
    with pytest.raises(ValueError, match="sparse_dim >= 2"):
        one_dim.to_sparse_csr()
    with pytest.raises(ValueError, match="2 sparse dims"):
        one_dim.to_sparse_bsr((1, 1))


def test_coo_batches_must_have_equal_nnz():
    idx = np.array([[0, 0, 1], [0, 1, 1], [0, 0, 1]])
    t = st.sparse_coo_tensor(idx, [1.0, 2.0, 3.0], size=(2, 2, 2), check_invariants=False, is_coalesced=True)
    with pytest.raises(ValueError, match=r"same nnz; got per batch \(0,\): 2, \(1,\): 1"):
        t.to_sparse_csr()
    with pytest.raises(ValueError, match="same nnz"):
        t.to_sparse_bsc((1, 1))
    many = st.sparse_coo_tensor(np.array([[0], [0], [0]]), [1.0], size=(40, 1, 1), check_invariants=False,
                                is_coalesced=True)
    with pytest.raises(ValueError, match=r"\(15,\): 0, \.\.\.$"):
        many.to_sparse_csr()


def test_batched_grouping_needs_equal_block_counts():
    # batch 0: entries in one 2x2 block; batch 1: the same number of entries in two blocks
    crow = np.array([[0, 1, 2, 2, 2], [0, 1, 1, 2, 2]])
    col = np.array([[0, 1], [0, 3]])
    t = make("csr", (crow, col, np.ones((2, 2))), (2, 4, 4))
    with pytest.raises(ValueError, match=r"same number of blocks; got per batch \(0,\): 1, \(1,\): 2"):
        t.to_sparse_bsr((2, 2))
    out = t.to_sparse_bsr((4, 4))  # one block each
    assert out.nnz == 1


# -- unchecked input: broken indices raise InvariantError, never read out of bounds -------------------------
@pytest.mark.parametrize("src,dst", [(a, b) for a, b in PAIRS if a != "coo"])
@pytest.mark.parametrize("which,where,value,invariant", [
    ("compressed", 0, 1, "5.1"), ("compressed", -1, 99, "5.2"), ("compressed", 2, 99, "5.3"),
    ("compressed", 1, -5, "5.3"), ("plain", 0, -1, "5.4"), ("plain", 1, 10**6, "5.5"),
])
def test_unchecked_broken_indices_raise(rng, src, dst, which, where, value, invariant):
    bs = (1, 2) if src in BLOCKED else (1, 1)
    case = Case(rng, src, bs, batch=(2,), grid=(3, 3), multiple=(1, 1) if src in BLOCKED else (1, 2), nnz=6,
                index_dtype=np.int32)
    c, p, v = [x.copy() for x in case.input_members()]
    arr = c if which == "compressed" else p
    arr[1, where] = value
    t = make(src, (c, p, v), case.shape, trusted=False)
    with pytest.raises(st.InvariantError) as info:
        t.to_sparse(dst, **(dict(blocksize=(1, 2)) if dst in BLOCKED else {}))
    assert info.value.invariant == invariant and info.value.layout == src
    assert info.value.batch == (1,)


@pytest.mark.parametrize("src", ["csr", "bsc"])
def test_unchecked_unsorted_plain_indices(rng, src):
    bs = (2, 1) if src in BLOCKED else (1, 1)
    case = Case(rng, src, bs, grid=(3, 1) if src == "bsc" else (1, 3), nnz=3)  # one slice of 3 entries
    c, p, v = [x.copy() for x in case.input_members()]
    p[[0, 1]] = p[[1, 0]]
    v[[0, 1]] = v[[1, 0]]
    t = make(src, (c, p, v), case.shape, trusted=False)
    if not HAVE_COMPRESSED_COALESCE:
        with pytest.raises(st.InvariantError) as info:
            t.to_sparse_coo()
        assert info.value.invariant == "5.6"
        return
    run_case(case, "coo", (1, 1))  # the sorted input converts as the reference says
    out = t.to_sparse_coo()
    assert_same(members(out), case.expected("coo", (1, 1)))


def test_unchecked_coo_marked_coalesced():
    def coo(idx, size=(2, 3)):
        return st.sparse_coo_tensor(np.array(idx), np.ones(len(idx[0])), size=size, check_invariants=False,
                                    is_coalesced=True)

    for idx, inv, dim in [([[0, 1], [0, 3]], "C5", 1), ([[0, -1], [0, 1]], "C4", 0), ([[1, 0], [0, 1]], "C6", None),
                          ([[0, 0], [1, 1]], "C6", None), ([[0, 2], [0, 0]], "C5", 0)]:
        for dst in ("csr", "csc", "bsr"):
            with pytest.raises(st.InvariantError) as info:
                coo(idx).to_sparse(dst, **(dict(blocksize=(1, 1)) if dst == "bsr" else {}))
            assert info.value.invariant == inv and info.value.layout == "coo"
            assert info.value.index == 1
            if dim is not None:
                assert f"indices[{dim}]" in str(info.value)


def test_unchecked_coo_error_in_a_later_thread_range():
    n = 200_000
    idx = np.stack([np.repeat(np.arange(n // 4), 4), np.tile(np.arange(4), n // 4)])
    idx[1, n - 3] = 7
    t = st.sparse_coo_tensor(idx, np.ones(n), size=(n // 4, 5), check_invariants=False, is_coalesced=True)
    with pytest.raises(st.InvariantError) as info:
        t.to_sparse_csr(threads=4)
    assert info.value.invariant == "C5" and info.value.index == n - 3
    idx[1, n - 3] = 0  # a duplicate of the entry before
    with pytest.raises(st.InvariantError) as info:
        t.to_sparse_csr(threads=4)
    assert info.value.invariant == "C6" and info.value.index == n - 3


# -- with the dense kernels (after they land) ------------------------------------------------------------
@requires_to_dense
@pytest.mark.parametrize("src,dst", PAIRS)
def test_to_dense_is_preserved(rng, src, dst):
    bs_in = (2, 1) if src in BLOCKED else (1, 1)
    case = Case(rng, src, bs_in, batch=() if src == "coo" else (2,), dense=(2,), dtype=np.complex64,
                grid=(2, 3), multiple=(1, 3) if src in BLOCKED else (1, 1), nnz=3, same_pattern=True)
    t = case.input()
    out = t.to_sparse(dst, **(dict(blocksize=(1, 3)) if dst in BLOCKED else {}))
    np.testing.assert_array_equal(out.to_dense(), case.a)
    np.testing.assert_array_equal(t.to_dense(), case.a)


@requires_from_dense
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_from_dense_then_convert(rng, layout):
    from sparsetensor.ops.convert import to_sparse

    a = random_dense(rng, batch=(2,), blocks=(4, 6), blocksize=(2, 3), dense=(2,), nnz=7, dtype=np.float32,
                     partial_blocks=False)  # whole blocks: from_dense to bsr adds no zeros to expand later
    kw = dict(blocksize=(2, 3)) if layout in BLOCKED else {}
    i64 = dict(index_dtype="int64")
    t = st.from_dense(a, "csr", batch_dim=1, dense_dim=1, **i64)
    u = st.from_dense(a, layout, batch_dim=1, dense_dim=1, **kw, **i64)
    assert_same(members(t.to_sparse(layout, **kw)), members(u))
    assert_same(members(u.to_sparse("csr")), members(t))
    d = np.asarray(a[0])
    # the array path delegates to from_dense with its default index dtype (int64)
    assert_same(members(to_sparse(d, layout, dense_dim=1, **kw)),
                members(st.from_dense(d, layout, dense_dim=1, **kw, **i64)))


# -- the docstring example -------------------------------------------------------------------------------
def test_docstring_examples():
    import sparsetensor.ops.convert as module

    with st.check_invariants(HAVE_VALIDATE):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0


@pytest.mark.parametrize("layout", ["bsr", "bsc"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_batched_coo_to_blocks_counts_blocks(layout, index_dtype):
    """Batched COO -> bsr/bsc needs the same number of blocks in every batch, not of elements."""
    rng = np.random.default_rng(7)
    blocks = np.array([[True, False], [True, True]])  # one block pattern for every batch, other elements
    a = rng.standard_normal((3, 2, 4, 6, 2)) * (rng.random((3, 2, 4, 6, 1)) < 0.6)
    a = a * np.kron(blocks, np.ones((2, 3)))[..., None]
    for i, j in zip(*np.nonzero(blocks)):  # every kept block holds an element in every batch
        a[..., 2 * i, 3 * j, :] = 1.0
    c = st.from_dense(a, "coo", dense_dim=1, index_dtype=index_dtype)
    r = c.to_sparse(layout, blocksize=(2, 3))
    r.check_invariants()
    assert r.batch_dim == 2 and r.index_dtype == index_dtype and r.nnz == blocks.sum()
    np.testing.assert_array_equal(r.to_dense(), a)
    b = a.copy()
    b[0, 0] = 0  # one batch without blocks
    with pytest.raises(ValueError, match="same nnz"):
        st.from_dense(b, "coo", dense_dim=1).to_sparse(layout, blocksize=(2, 3))


@pytest.mark.parametrize("batch", [(), (2,)])
@pytest.mark.parametrize("dense", [(), (2,)])
def test_tall_csc_and_coo_convert_by_a_sort_of_the_entries(batch, dense):
    """csc <-> coo of a matrix of far more rows than entries sorts the entries (it went through csr,
    whose row pointers take memory of the rows: 24 GiB for 3 * 2**30 rows); the same tensors as
    the dense route gives, and a bad row index still named in the tensor's own dims."""
    rng = np.random.default_rng(0)
    a = np.zeros(batch + (100_000, 4) + dense)
    for pos in [(5, 1), (99_999, 1), (7, 3), (0, 0), (5, 0)]:
        a[(Ellipsis,) + pos + (slice(None),) * len(dense)] = rng.standard_normal(dense) + 2 if dense else 3.0
    kw = {"batch_dim": len(batch), "dense_dim": len(dense)}
    csc = st.from_dense(a, "csc", **kw)
    coo = csc.to_sparse_coo()
    want = st.from_dense(a, "coo", dense_dim=len(dense))
    assert coo.is_coalesced()
    np.testing.assert_array_equal(coo.indices(), want.indices())
    np.testing.assert_array_equal(coo.values(), want.values())
    back = want.to_sparse_csc() if not batch else want.to_sparse(st.sparse_csc)
    for x, y in zip((back.ccol_indices(), back.row_indices(), back.values()),
                    (csc.ccol_indices(), csc.row_indices(), csc.values())):
        np.testing.assert_array_equal(x, y)
    back.check_invariants()
    rows = 3 * 2 ** 30
    t = st.sparse_coo_tensor(np.array([[5, 2 ** 31 + 7, 3, 5], [0, 1, 1, 0]]), [1.0, 2.0, 3.0, 4.0], size=(rows, 6))
    c = t.to_sparse_csc()  # uncoalesced: (5, 0) summed
    assert c.ccol_indices().tolist() == [0, 1, 3, 3, 3, 3, 3] and c.row_indices().tolist() == [5, 3, 2 ** 31 + 7]
    assert c.values().tolist() == [5.0, 3.0, 2.0]
    u = c.to_sparse_coo()
    assert u.indices().tolist() == [[3, 5, 2 ** 31 + 7], [1, 0, 1]] and u.values().tolist() == [3.0, 5.0, 2.0]
    with st.check_invariants(False):
        bad = st.sparse_coo_tensor(np.array([[5, rows], [1, 1]]), [1.0, 2.0], size=(rows, 6))
    with pytest.raises(st.InvariantError, match=r"indices\[0\] must be < size\[0\]"):
        bad.to_sparse_csc()
