"""Shared fixtures and oracles: random dense arrays with a known sparsity, and NumPy references."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

import sparsetensor as st

LAYOUTS = ["coo", "csr", "csc", "bsr", "bsc"]
COMPRESSED = ["csr", "csc", "bsr", "bsc"]
INDEX_DTYPES = [np.int32, np.int64]
VALUE_DTYPES = [np.dtype(d) for d in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32",
                                      "float64", "complex64", "complex128")]

try:  # PyTorch is the conformance oracle where installed
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_TORCH = False

requires_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch==2.13.0 is not installed (pip install torch==2.13.0)")


def pytest_configure(config):
    # `pytest -n auto` (pytest-xdist) hands out whole files: the MPI and CUDA-emulator modules
    # share one launch or one compiled kernel among their tests through module-scoped fixtures,
    # which a per-test split would repeat on every worker. An explicit --dist is kept.
    if getattr(config.option, "dist", "no") == "load" and not any(
            a == "--dist" or a.startswith("--dist=") or a == "-d" for a in config.invocation_params.args):
        config.option.dist = "loadfile"


def dominant_matrix(n, seed, dtype, density=0.15, hermitian=False) -> np.ndarray:
    """A random dense matrix with a dominant diagonal (no pivot of ILU(0) / IC(0) vanishes);
    Hermitian positive definite when asked."""
    rng = np.random.default_rng(seed)
    a = (rng.random((n, n)) < density) * rng.uniform(-1, 1, (n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * (a != 0) * rng.uniform(-1, 1, (n, n))
    if hermitian:
        a = np.tril(a, -1)
        a = a + a.conj().T
    a = a + np.diag(np.abs(a).sum(axis=1) + 1.0)
    return a.astype(dtype)


def distinct_cells(rng, ncells, count) -> np.ndarray:
    """``count`` distinct sorted integers drawn from ``range(ncells)`` (int64)."""
    if count == 0:
        return np.zeros(0, np.int64)
    if count > ncells // 4:
        return np.sort(rng.permutation(ncells)[:count])
    # np.unique hashes (NumPy >= 2.3), several times slower than this sort at 10^5 draws
    cells = np.sort(rng.integers(0, ncells, size=count + count // 4 + 16))
    cells = cells[np.r_[True, cells[1:] != cells[:-1]]]
    while cells.size < count:  # unlikely: more repeats than the margin
        cells = np.union1d(cells, rng.integers(0, ncells, size=count))
    return np.sort(rng.choice(cells, size=count, replace=False))


def nonzero_values(rng, shape, dtype) -> np.ndarray:
    """Random values of ``dtype`` that are all nonzero."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.ones(shape, dtype=bool)
    if dtype.kind in "iu":
        hi = min(np.iinfo(dtype).max, 100)
        return rng.integers(1, hi, size=shape).astype(dtype)
    x = rng.integers(1, 50, size=shape) * rng.choice([-1, 1], size=shape) / 4
    if dtype.kind == "c":
        return (x + 1j * rng.integers(-3, 4, size=shape)).astype(dtype)
    return x.astype(dtype)


def random_dense(rng, *, batch=(), blocks=(3, 4), blocksize=(1, 1), dense=(), dtype=np.float64, nnz=None,
                 partial_blocks=True) -> np.ndarray:
    """A dense ``batch + (blocks*blocksize) + dense`` array with exactly ``nnz`` nonzero blocks per batch.

    Inside a specified block some elements may be zero (``partial_blocks``) but never all.
    """
    nbr, nbc = blocks
    rb, cb = blocksize
    nblocks = nbr * nbc
    if nnz is None:
        nnz = int(rng.integers(0, nblocks + 1))
    B = math.prod(batch)
    D = math.prod(dense)
    out = np.zeros((B, nbr, nbc, rb, cb, D), dtype=dtype)
    if D and rb and cb:
        for b in range(B):
            chosen = rng.choice(nblocks, size=nnz, replace=False)
            vals = nonzero_values(rng, (nnz, rb, cb, D), dtype)
            if partial_blocks and rb * cb * D > 1:
                keep = rng.random((nnz, rb, cb, D)) < 0.6
                keep.reshape(nnz, rb * cb * D)[:, 0] = True  # at least one nonzero per block
                vals = np.where(keep, vals, np.zeros((), dtype))
            out[b].reshape(nblocks, rb, cb, D)[chosen] = vals
    out = out.transpose(0, 1, 3, 2, 4, 5).reshape(batch + (nbr * rb, nbc * cb) + tuple(dense))
    return np.ascontiguousarray(out)


def unequal_batch_unions() -> np.ndarray:
    """A (2, 2, 4, 4) array whose 4 batches hold 2 elements each (in one 2 x 2 block), and whose
    union along batch dim 0 holds 2 elements (1 block) in kept batch 0 and 4 (2 blocks) in batch 1:
    a compressed tensor of it reduced over dim 0 cannot keep its layout."""
    d = np.zeros((2, 2, 4, 4))
    d[0, 0, 0, :2] = [1.0, 2.0]
    d[1, 0, 0, :2] = [5.0, -6.0]
    d[0, 1, 2, 2], d[0, 1, 3, 3] = 3.0, -1.0
    d[1, 1, 0, 0], d[1, 1, 1, 1] = 7.0, -8.0
    return d


def reference_compressed(a: np.ndarray, layout: str, blocksize=(1, 1), batch_dim=0, index_dtype=np.int64):
    """NumPy oracle for from_dense: (compressed, plain, values) built with np.nonzero."""
    return compressed_members(a, None, layout, blocksize, batch_dim, index_dtype)


def compressed_members(a: np.ndarray, mask, layout: str, blocksize=(1, 1), batch_dim=0, index_dtype=np.int64):
    """(compressed, plain, values) of ``layout`` holding the blocks of ``a`` where the bool
    ``mask`` (B, block rows, block columns) is set; None: the blocks with a nonzero."""
    m = batch_dim
    batch, (rows, cols), dense = a.shape[:m], a.shape[m:m + 2], a.shape[m + 2:]
    rb, cb = blocksize
    B, D = math.prod(batch), math.prod(dense)
    blocks = a.reshape(B, rows // rb, rb, cols // cb, cb, D).transpose(0, 1, 3, 2, 4, 5)
    if mask is None:
        mask = (blocks != 0).any(axis=(3, 4, 5))
    by_rows = layout in ("csr", "bsr")
    comp, plain, vals = [], [], []
    for b in range(B):
        mb = mask[b] if by_rows else mask[b].T
        major, minor = np.nonzero(mb)
        comp.append(np.concatenate([[0], np.cumsum(np.bincount(major, minlength=mb.shape[0]))]))
        plain.append(minor)
        r, c = (major, minor) if by_rows else (minor, major)
        vals.append(blocks[b, r, c])
    nnz = len(plain[0]) if B else 0
    vshape = batch + (nnz,) + ((rb, cb) if layout in ("bsr", "bsc") else ()) + dense
    n_major = rows // rb if by_rows else cols // cb
    comp_a = np.array(comp, dtype=index_dtype).reshape(batch + (n_major + 1,))
    plain_a = np.array(plain, dtype=index_dtype).reshape(batch + (nnz,))
    vals_a = np.array(vals, dtype=a.dtype).reshape(vshape)
    return comp_a, plain_a, vals_a


def snapshot(t) -> list:
    """Copies of the member arrays of ``t``: indices (coo) or compressed and plain indices, and values."""
    if isinstance(t, st.COOTensor):
        return [t.indices().copy(), t.values().copy()]
    return [t.compressed_indices().copy(), t.plain_indices().copy(), t.values().copy()]


def assert_unchanged(t, snap):
    """The member arrays of ``t`` still equal its earlier ``snapshot`` (inputs are never modified)."""
    for x, y in zip(snapshot(t), snap):
        np.testing.assert_array_equal(x, y)


def assert_python_prints_ok(code: str) -> None:
    """Run ``code`` in a fresh interpreter (from ``tests/``, so never the source tree's package)
    and require it to exit 0 having printed exactly ``ok``: for checks that need a clean
    ``sys.modules`` (an optional dependency hidden, what an import pulls in)."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def assert_matches_scipy_csr(got, ref, rtol=1e-12):
    """csr tensor ``got`` satisfies its invariants and equals SciPy's csr ``ref`` (its indices sorted
    here), entry for entry."""
    ref.sort_indices()
    got.check_invariants()
    np.testing.assert_array_equal(got.crow_indices(), ref.indptr)
    np.testing.assert_array_equal(got.col_indices(), ref.indices)
    np.testing.assert_allclose(got.values(), ref.data, rtol=rtol)


@pytest.fixture
def rng(request):
    # a stable seed per test, different between tests
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def layout_tensor(layout, dtype=np.float64, index_dtype=np.int64, *, batch=(), dense=(), seed=0, shape=(4, 6)):
    """(tensor, dense array) of a random ``batch + shape + dense`` array in ``layout`` (2 x 2 blocks for
    bsr/bsc; ``batch`` only for the compressed layouts)."""
    rng = np.random.default_rng(seed)
    bs = (2, 2) if layout in ("bsr", "bsc") else (1, 1)
    a = random_dense(rng, batch=batch, blocks=(shape[0] // bs[0], shape[1] // bs[1]), blocksize=bs, dense=dense,
                     dtype=dtype)
    if layout == "coo":
        t = st.from_dense(a, "coo", dense_dim=len(dense))
    else:
        t = st.from_dense(a, layout, blocksize=bs if bs != (1, 1) else None, batch_dim=len(batch),
                          dense_dim=len(dense))
    return t.to(index_dtype=index_dtype), a
