"""zeros, eye, diags, random, rmat and stencil against SciPy and hand-built references, in every layout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import sparsetensor as st

from conftest import INDEX_DTYPES, LAYOUTS

DTYPES = [np.float64, np.float32, np.int32, np.uint8, np.bool_, np.complex128]


def _bs(layout, bs=(2, 2)):
    return bs if layout in ("bsr", "bsc") else None


def _ok(t, layout, index_dtype=np.int64):
    t.check_invariants()
    assert t.layout == getattr(st, f"sparse_{layout}")
    assert t.index_dtype == index_dtype
    return t.to_dense()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zeros(layout, index_dtype, dtype):
    shapes = [((4, 6), 0, 0), ((3, 4, 6), 1, 0), ((4, 6, 2), 0, 1), ((0, 6), 0, 0)]
    for shape, batch_dim, dense_dim in shapes:
        if layout == "coo" and batch_dim:
            with pytest.raises(ValueError, match="batch"):
                st.zeros(shape, layout=layout, batch_dim=batch_dim)
            continue
        t = st.zeros(shape, layout=layout, dtype=dtype, index_dtype=index_dtype, blocksize=_bs(layout),
                     dense_dim=dense_dim, batch_dim=batch_dim)
        assert t.nnz == 0 and t.dtype == dtype and t.shape == shape and t.dense_dim == dense_dim
        np.testing.assert_array_equal(_ok(t, layout, index_dtype), np.zeros(shape, dtype))
    if layout != "coo":
        with pytest.raises(ValueError):
            st.zeros((4, 6, 2), layout=layout, blocksize=_bs(layout))  # 3 dims: say which are batch/dense
    if layout in ("bsr", "bsc"):
        with pytest.raises(ValueError, match="divide"):
            st.zeros((5, 6), layout=layout, blocksize=(2, 2))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=["i32", "i64"])
def test_eye(layout, index_dtype):
    for n, m, k in [(4, None, 0), (4, 6, 1), (6, 4, -2), (4, 4, 5), (4, 4, -4), (0, None, 0)]:
        ref = np.eye(n, m, k=k)  # SciPy's eye_array refuses an offset past the matrix; NumPy gives zeros
        t = st.eye(n, m, k, layout=layout, index_dtype=index_dtype, blocksize=_bs(layout))
        np.testing.assert_array_equal(_ok(t, layout, index_dtype), ref)
        if layout not in ("bsr", "bsc"):
            assert t.nnz == np.count_nonzero(ref)
            if abs(k) < max(n, m or n):
                assert t.nnz == sp.eye_array(n, m, k=k).nnz
    assert st.eye(3, dtype=np.int8).dtype == np.int8


@pytest.mark.parametrize("layout", LAYOUTS)
def test_diags(layout):
    cases = [
        (([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0], [8.0]), [0, 1, -3], None),
        (([1.0, 0.0, 3.0, 4.0],), [0], (4, 6)),  # an explicit zero is not stored
        ([-1.0, 2.0, -1.0], [-1, 0, 1], (6, 6)),  # scalars broadcast along their diagonal
        (([1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]), [2, -1], (4, 6)),  # longer diagonals are cut
        ([1.0, 2.0, 3.0, 4.0], 0, None),  # one diagonal, one offset
    ]
    for diagonals, offsets, shape in cases:
        ref = sp.diags_array(diagonals, offsets=offsets, shape=shape, dtype=np.float64).tocsr()
        ref.eliminate_zeros()
        t = st.diags(diagonals, offsets, shape, layout=layout, dtype=np.float64, blocksize=_bs(layout))
        np.testing.assert_array_equal(_ok(t, layout), ref.toarray())
        if layout not in ("bsr", "bsc"):
            assert t.nnz == ref.nnz
    assert st.diags([[1, 2], [3]], [0, 1]).dtype == np.int64  # the diagonals' dtype
    with pytest.raises(ValueError, match="repeated"):
        st.diags([[1.0], [2.0]], [0, 0], (3, 3))
    with pytest.raises(ValueError, match="has 2 elements"):
        st.diags([[1.0, 2.0]], [0], (3, 3))
    with pytest.raises(ValueError, match="offsets"):
        st.diags([[1.0], [2.0]], [0], (3, 3))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_random(layout, index_dtype, dtype):
    for density in (0.0, 0.13, 0.5, 1.0):
        t = st.random((40, 30), density, layout=layout, rng=1, dtype=dtype, index_dtype=index_dtype,
                      blocksize=_bs(layout))
        d = _ok(t, layout, index_dtype)
        assert t.dtype == dtype
        if layout in ("bsr", "bsc"):
            assert t.nnz == int(round(density * 20 * 15))
        else:
            ref = sp.random_array((40, 30), density=density, rng=1)
            assert t.nnz == ref.nnz == np.count_nonzero(d)
        if dtype == np.float64 and density:
            assert 0 <= d.min() and d.max() < 1
    a = st.random((40, 30), 0.2, layout=layout, rng=7, blocksize=_bs(layout)).to_dense()
    b = st.random((40, 30), 0.2, layout=layout, rng=np.random.default_rng(7), blocksize=_bs(layout)).to_dense()
    np.testing.assert_array_equal(a, b)  # a seed and a generator made from it give the same tensor


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_random_batch_and_dense(layout):
    t = st.random((3, 8, 6, 2), 0.25, layout=layout, rng=0, blocksize=_bs(layout), batch_dim=1, dense_dim=1)
    t.check_invariants()
    assert t.batch_dim == 1 and t.dense_dim == 1 and t.shape == (3, 8, 6, 2)
    cells = 48 if layout in ("csr", "csc") else 12
    assert t.nnz == int(round(0.25 * cells))
    d = t.to_dense()
    if layout in ("csr", "csc"):  # every specified element has nonzero values in every dense slice
        assert all(np.count_nonzero(d[b].any(axis=-1)) == t.nnz for b in range(3))
    # the batches differ in their patterns
    assert not np.array_equal(d[0] != 0, d[1] != 0)


def test_random_coo_nd():
    t = st.random((5, 6, 7, 2), 0.1, layout="coo", rng=3, dense_dim=1)
    t.check_invariants()
    assert t.sparse_dim == 3 and t.nnz == int(round(0.1 * 210)) and t.is_coalesced()


def _rmat_reference(scale, edge_factor, seed, a=0.57, b=0.19, c=0.19):
    """The R-MAT recursion written per edge and per level, from the same random draws."""
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, edge_factor << scale
    draws = [rng.random(m) for _ in range(scale)]
    perm = rng.permutation(n)
    out = np.zeros((n, n))
    for e in range(m):
        r = col = 0
        for level in range(scale):
            u = draws[level][e]
            if u < a:
                q = (0, 0)
            elif u < a + b:
                q = (0, 1)
            elif u < a + b + c:
                q = (1, 0)
            else:
                q = (1, 1)
            r |= q[0] << level
            col |= q[1] << level
        out[perm[r], perm[col]] += 1
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rmat(layout):
    t = st.rmat(5, 4, rng=11, layout=layout, blocksize=_bs(layout))
    d = _ok(t, layout)
    np.testing.assert_array_equal(d, _rmat_reference(5, 4, 11))
    assert d.sum() == 4 * 32


def test_rmat_is_skewed():
    d = st.rmat(10, 8, rng=0).to_dense()
    degree = (d != 0).sum(axis=1)
    assert degree.max() > 10 * degree.mean()  # Kronecker graphs have heavy-tailed degrees


def _box_reference(grid, points):
    n = int(np.prod(grid))
    out = np.zeros((n, n))
    for p in itertools.product(*[range(g) for g in grid]):
        i = np.ravel_multi_index(p, grid)
        for s in itertools.product(*[(-1, 0, 1)] * len(grid)):
            if points != 27 and sum(map(abs, s)) > 1:
                continue
            q = tuple(x + y for x, y in zip(p, s))
            if all(0 <= x < g for x, g in zip(q, grid)):
                out[i, np.ravel_multi_index(q, grid)] = points - 1 if not any(s) else -1
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=["i32", "i64"])
def test_stencil(layout, index_dtype):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(4, 4))
    I4 = sp.eye_array(4)
    poisson = (sp.kron(I4, T) + sp.kron(T, I4)).toarray()
    bs = _bs(layout)
    t = st.stencil((4, 4), layout=layout, index_dtype=index_dtype, blocksize=bs)
    np.testing.assert_array_equal(_ok(t, layout, index_dtype), poisson)
    for grid, points in [((3, 4, 2), 7), ((3, 4, 2), 27), ((2, 3), 5)]:
        t = st.stencil(grid, points, layout=layout, index_dtype=index_dtype, blocksize=bs)  # 24 and 6 rows: even
        d = _ok(t, layout, index_dtype)
        np.testing.assert_array_equal(d, _box_reference(grid, points))
    hpcg = st.stencil((4, 4, 4), 27)
    assert np.all(hpcg.diagonal() == 26) and hpcg.nnz == (3 * 4 - 2) ** 3  # 10 = 4 + 3 + 3 neighbour positions per axis
    with pytest.raises(ValueError, match="points"):
        st.stencil((3, 3), 7)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dofs", [2, 3])
def test_stencil_dofs(layout, dofs):
    """dofs unknowns per point: kron(A, ones + dofs * eye), one dense block per coupled pair."""
    K = np.ones((dofs, dofs)) + dofs * np.eye(dofs)
    grid, points = (3, 2, 3), 27
    ref = np.kron(_box_reference(grid, points), K)
    t = st.stencil(grid, points, layout=layout, index_dtype=np.int32, dofs=dofs)
    np.testing.assert_array_equal(_ok(t, layout, np.int32), ref)
    if layout in ("bsr", "bsc"):
        assert t.blocksize == (dofs, dofs)  # the natural blocks by default
        assert t.nnz == np.count_nonzero(_box_reference(grid, points))
        other = st.stencil(grid, points, layout=layout, dofs=dofs, blocksize=(1, dofs))
        assert other.blocksize == (1, dofs)
        np.testing.assert_array_equal(other.to_dense(), ref)
    with pytest.raises(ValueError, match="dofs"):
        st.stencil(grid, points, layout=layout, dofs=0)
