"""sum, mean, amax, amin and norm of device tensors over every set of dims, against the CPU: every
layout with batch and dense dims, both index dtypes, integer, bool, float16/32/64 and complex
values; the result types are the CPU's (a sparse result where the CPU keeps one, else a dense
device array). Runs on a GPU or on the kernel emulator (see test_cuda.py).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import sparsetensor as st

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from conftest import unequal_batch_unions
from cuda_support import CASE_IDS, CASES, INDEX
from test_cuda_ops import same, small_ints

DTYPES = [np.dtype(d) for d in ("float64", "float32", "float16", "complex128", "int64", "int16", "bool")]


def _subsets(ndim: int):
    dims = range(ndim)
    return [c for k in range(1, ndim) for c in itertools.combinations(dims, k)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_every_set_of_dims(backend, rng, case, dtype):
    for index_dtype in INDEX:
        t = small_ints(rng, case, dtype, index_dtype)
        d = t.cuda()
        for dims in _subsets(t.ndim):
            for name in ("sum", "amax", "amin"):
                try:
                    want = getattr(st, name)(t, dims)
                except (TypeError, ValueError) as e:  # amax of complex; batches left with unequal nnz
                    with pytest.raises(type(e)):
                        getattr(st, name)(d, dims)
                    continue
                got = getattr(st, name)(d, dims)
                same(got, want)
            if dtype.kind in "fc":
                for fn in (lambda x: st.mean(x, dims), lambda x: st.norm(x, 2, dims)):
                    try:
                        want = fn(t)
                    except ValueError:  # batches left with unequal nnz
                        with pytest.raises(ValueError):
                            fn(d)
                        continue
                    same(fn(d), want)
        dims = _subsets(t.ndim)[-1]
        same(st.sum(d, dims, keepdim=True), st.sum(t, dims, keepdim=True))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_sum_in_bool(backend, rng, case):
    """sum(dtype=bool): NumPy's sum of bools (their or), over every dim and over each set of dims."""
    t = small_ints(rng, case, np.dtype(np.int16), np.int64)
    d = t.cuda()
    same(st.sum(d, dtype=np.bool_), st.sum(t, dtype=np.bool_))
    for dims in _subsets(t.ndim):
        try:
            want = st.sum(t, dims, dtype=np.bool_)
        except ValueError as e:  # batches left with unequal nnz
            with pytest.raises(type(e)):
                st.sum(d, dims, dtype=np.bool_)
            continue
        same(st.sum(d, dims, dtype=np.bool_), want)


def test_unspecified_elements_and_nan(backend):
    """amax over a batch dim or a dense dim of a batched, hybrid csr and over some dims of a coo:
    negative values with unspecified elements give 0 where a group misses an element; NaN wins."""
    a = -np.arange(1.0, 1 + 2 * 3 * 4 * 2).reshape(2, 3, 4, 2)
    a[0, 1] = 0.0  # a row unspecified in batch 0, another in batch 1
    a[1, 0] = 0.0
    a[1, 2, 3, 1] = np.nan
    t = st.from_dense(a, "csr", batch_dim=1, dense_dim=1)
    c = st.from_dense(a, "coo", dense_dim=1)
    for x in (t, c):
        for dims in ((0,), (0, 3), (1,), (0, 2), (3,)):
            for name in ("amax", "amin"):
                same(getattr(st, name)(x.cuda(), dims), getattr(st, name)(x, dims))


def test_uncoalesced_and_out_of_bounds_coo(backend, rng):
    idx = np.array([[0, 2, 0, 1], [1, 0, 1, 3], [0, 1, 0, 0]])
    t = st.sparse_coo_tensor(idx, np.array([1.0, 2.0, 3.0, 4.0]), size=(3, 4, 2))
    for dims in ((0,), (1,), (2,), (0, 2)):
        same(st.sum(t.cuda(), dims), st.sum(t, dims))
        same(st.amax(t.cuda(), dims), st.amax(t, dims))
    bad = st.sparse_coo_tensor(np.array([[0, 3], [1, 0]]), np.ones(2), size=(3, 4), check_invariants=False)
    with pytest.raises(st.InvariantError):
        st.sum(bad.cuda(), 0)


def test_batch_reduction_whose_batches_differ_in_nnz_is_coo(backend, rng):
    """Over a batch dim whose kept batches would hold different nnz: the CPU's COO result and values
    on the device."""
    from cuda_support import host

    d = unequal_batch_unions()
    for layout, kw in (("csr", {}), ("bsr", {"blocksize": (2, 2)})):
        t = st.from_dense(d, layout, batch_dim=2, **kw)
        for name in ("sum", "mean", "amax", "amin"):
            want = getattr(st, name)(t, 0)
            got = getattr(st, name)(t.cuda(), 0)
            assert want.layout is got.layout is st.sparse_coo and got.is_cuda
            np.testing.assert_array_equal(host(got.indices()), want.indices())
            np.testing.assert_allclose(host(got.values()), want.values())
