"""Block grouping and expansion on CUDA (kernels/convert.cu: block_keys, group_scatter,
expand_compressed, expand_blocks) through ``to_sparse``: every layout to every layout, against
the CPU backend (members bitwise, flags, values exactly). Batched inputs share one pattern across
their batches (so grouping gives one block count per batch); integer and bool values include
explicit zeros, which stay entries (and blocks) as on the CPU. Runs on a GPU or on the kernel
emulator (see test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import INDEX, assert_same
from test_cuda_select import CASE_IDS, CASES, DTYPES, batched, both, without_host_copies

# (layout, blocksize) targets; the ones whose blocksize does not divide a shape raise the CPU's
# ValueError on both sides
TARGETS = [("coo", None), ("csr", None), ("csc", None), ("bsr", (2, 1)), ("bsc", (2, 1)), ("bsr", (1, 1)),
           ("bsc", (1, 2)), ("bsr", (2, 3)), ("bsc", (4, 1))]

def _convert(layout, bs):
    return lambda x: x.to_sparse(layout, **({} if bs is None else {"blocksize": bs}))

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_to_sparse_every_layout(backend, rng, case, index_dtype, dtype):
    t = batched(rng, case, dtype, index_dtype)
    sources = [t, t.to_sparse("coo")]  # a coo source: batch dims as the leading sparse dims
    for src in sources:
        for layout, bs in TARGETS:
            got = both(_convert(layout, bs), src)
            if got is not None and layout != "coo":
                # and back to the source's layout (blocks of the target's size expand again)
                back = (lambda x: x.to_sparse(src.layout, blocksize=src.blocksize)) if src.layout.blocked else (
                    lambda x: x.to_sparse(src.layout))
                both(back, got.cpu())

def test_explicit_zeros_and_zero_blocks(backend):
    """An explicit zero entry makes its block exist (zero-filled around it); an all-zero block
    expands into explicit zero entries."""
    t = st.sparse_csr_tensor(np.array([0, 2, 2, 3, 3]), np.array([0, 3, 1]), np.array([0.0, 0.0, 5.0]), (4, 4))
    for layout, bs in (("bsr", (2, 2)), ("bsc", (2, 2)), ("bsr", (1, 2)), ("bsc", (4, 4))):
        b = both(_convert(layout, bs), t)
        assert b.nnz == t.to_sparse(layout, blocksize=bs).nnz
        for target in ("csr", "csc", "coo"):
            got = both(_convert(target, None), b.cpu())
            assert got.nnz == b.nnz * bs[0] * bs[1]  # every item, zeros included
    zero_blocks = st.sparse_bsr_tensor(np.array([0, 1, 2]), np.array([1, 0]), np.zeros((2, 2, 3)), (4, 6))
    for target in ("csr", "csc", "coo", ("bsr", (1, 3)), ("bsc", (2, 1))):
        layout, bs = target if isinstance(target, tuple) else (target, None)
        both(_convert(layout, bs), zero_blocks)

def test_unequal_blocks_per_batch(backend):
    # the same nnz per batch, but batch 0's two entries share a block and batch 1's do not
    t = st.sparse_csr_tensor(np.array([[0, 2, 2], [0, 1, 2]]), np.array([[0, 1], [0, 3]]), np.ones((2, 2)),
                             (2, 2, 4))
    with pytest.raises(ValueError, match="same number of blocks"):
        t.to_sparse("bsr", blocksize=(2, 2))
    both(_convert("bsr", (2, 2)), t)
    both(_convert("bsc", (1, 2)), t)

def test_edge_shapes(backend, rng):
    """No entries, an empty batch, zero rows, a dense dim of size 0, float16 and int8 values."""
    cases = [st.from_dense(np.zeros((4, 6)), "csr"), st.from_dense(np.zeros((0, 4, 6)), "csr", batch_dim=1),
             st.from_dense(np.zeros((0, 6)), "csc"),
             st.sparse_csr_tensor(np.array([0, 1, 2, 2, 2]), np.array([1, 3]), np.zeros((2, 0)), (4, 6, 0)),
             st.from_dense((np.arange(24).reshape(4, 6) % 3).astype(np.float16), "csr"),
             st.from_dense((np.arange(24).reshape(4, 6) % 5 - 2).astype(np.int8), "bsc", blocksize=(2, 3))]
    for t in cases:
        for layout, bs in (("bsr", (2, 3)), ("bsc", (1, 2)), ("csr", None), ("csc", None), ("coo", None)):
            got = both(_convert(layout, bs), t)
            if got is not None and layout != "coo":
                both(_convert(t.layout.name, t.blocksize if t.layout.blocked else None), got.cpu())

def test_large(backend, rng):
    """Several scan and sort tiles: 30,000 entries into 2 x 3 blocks and back."""
    from conftest import random_dense

    a = random_dense(rng, blocks=(300, 400), dtype=np.float32, nnz=30000)
    t = st.from_dense(a, "csr", index_dtype=np.int32)
    b = both(_convert("bsr", (2, 4)), t)
    both(_convert("csc", None), b.cpu())
    both(_convert("coo", None), b.cpu())

def test_unchecked_input(backend):
    """Unsorted plain indices (5.6 only) are repaired before grouping, as on the CPU; broken
    indices raise the CPU's InvariantError."""
    u = st.sparse_csr_tensor(np.array([0, 3, 4]), np.array([3, 0, 1, 2]), np.arange(1.0, 5.0), (2, 4),
                             check_invariants=False)
    assert_same(u.cuda().to_sparse("bsr", blocksize=(2, 2)), u.to_sparse("bsr", blocksize=(2, 2)))
    bad = st.sparse_csr_tensor(np.array([0, 3, 4]), np.array([3, 0, 9, 2]), np.arange(1.0, 5.0), (2, 4),
                               check_invariants=False)
    with pytest.raises(st.InvariantError) as want:
        bad.to_sparse("bsr", blocksize=(2, 2))
    with pytest.raises(st.InvariantError) as got:
        bad.cuda().to_sparse("bsr", blocksize=(2, 2))
    assert str(got.value) == str(want.value)

def test_no_host_copies(backend, rng, monkeypatch):
    """Grouping reads only the per-batch block counts (B + 1 numbers); expanding reads nothing."""
    t = batched(rng, ("csr", (2,), (2,), None), np.complex128, np.int32)
    b = batched(rng, ("bsc", (2,), (2,), (1, 2)), np.complex128, np.int32)
    dt, db = t.cuda(), b.cuda()
    results = without_host_copies(monkeypatch, 3, [lambda: dt.to_sparse("bsr", blocksize=(2, 1)),
                                                   lambda: db.to_sparse("csr"), lambda: db.to_sparse("csc")])
    wants = [t.to_sparse("bsr", blocksize=(2, 1)), b.to_sparse("csr"), b.to_sparse("csc")]
    for got, want in zip(results, wants):
        assert_same(got, want)


@pytest.mark.parametrize("layout", ["bsr", "bsc"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_batched_coo_to_blocks_counts_blocks(backend, layout, index_dtype):
    """Batched COO -> bsr/bsc with the same blocks but different elements per batch: the CPU's
    members exactly; batches of different block counts: the CPU's ValueError."""
    rng = np.random.default_rng(3)
    blocks = np.array([[True, False], [True, True]])
    a = rng.standard_normal((3, 2, 4, 6, 2)) * (rng.random((3, 2, 4, 6, 1)) < 0.6)
    a = (a * np.kron(blocks, np.ones((2, 3)))[..., None]).astype(np.float32)
    for i, j in zip(*np.nonzero(blocks)):
        a[..., 2 * i, 3 * j, :] = 1.0
    c = st.from_dense(a, "coo", dense_dim=1, index_dtype=index_dtype)
    want = c.to_sparse(layout, blocksize=(2, 3))
    got = c.cuda().to_sparse(layout, blocksize=(2, 3)).cpu()
    for x, y in zip((got.compressed_indices(), got.plain_indices(), got.values()),
                    (want.compressed_indices(), want.plain_indices(), want.values())):
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
    a[0, 0] = 0
    with pytest.raises(ValueError, match="same nnz"):
        st.from_dense(a, "coo", dense_dim=1).cuda().to_sparse(layout, blocksize=(2, 3))
