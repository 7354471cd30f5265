"""Constructors of whole tensors: :func:`zeros`, :func:`eye`, :func:`diags`, :func:`random`, and the
test and benchmark generators :func:`rmat` (Graph500 Kronecker graphs) and :func:`stencil`
(finite-difference Laplacians, HPCG's 27-point matrix).

Every generator makes coordinates and values with vectorised NumPy (loops run over
diagonals, stencil points, batches or bit levels, never over entries), and one assembler
(:func:`_assemble`) sorts them into any layout: coo (coalesced), csr/csc, and bsr/bsc from
block coordinates. Results are canonical and flagged checked (they are built, not read).
"""

from __future__ import annotations

import math
import operator

import numpy as np

from . import _layout as L
from ._dtypes import as_index_dtype, as_value_dtype, check_fits
from ._tensor import COOTensor, CompressedTensor

__all__ = ["zeros", "eye", "diags", "random", "rmat", "stencil"]


# -- the assembler -------------------------------------------------------------------------------------
def _options(layout, index_dtype, blocksize, dtype):
    layout = L.as_layout(layout)
    if layout is L.strided:
        raise ValueError("layout must be a sparse layout ('coo', 'csr', 'csc', 'bsr', 'bsc'), got strided")
    if layout.blocked:
        bs = L.as_blocksize((1, 1) if blocksize is None else blocksize)
    elif blocksize is not None and tuple(blocksize) != (1, 1):
        raise ValueError(f"blocksize={blocksize!r} is only for bsr/bsc, not {layout.name}")
    else:
        bs = (1, 1)
    return layout, as_index_dtype(index_dtype), bs, as_value_dtype(dtype)


def _assemble(batch_ix, rows, cols, values, shape, layout, index_dtype, blocksize=(1, 1), batch_dim=0,
              row_major=False):
    """A tensor from unique (block) coordinates in any order.

    ``batch_ix``: flat batch of each entry (None: no batch); ``rows``/``cols``: block
    coordinates (int64); ``values``: ``(n,) + block + dense`` (block dims only for bsr/bsc).
    Every batch must hold the same number of entries. For coo the batch dims become
    leading sparse dims. ``row_major``: the entries are already sorted by (batch, row, col),
    so coo and csr/bsr need no sort.
    """
    m = batch_dim
    batch, (M, N) = shape[:m], shape[m:m + 2]
    R, C = blocksize
    Mb, Nb = M // R, N // C
    B = math.prod(batch)
    b = np.zeros(rows.shape, np.int64) if batch_ix is None else batch_ix
    if layout is L.sparse_coo:
        order = slice(None) if row_major else np.argsort((b * Mb + rows) * Nb + cols, kind="stable")
        coords = list(np.unravel_index(b[order], batch)) if m else []
        indices = np.stack(coords + [rows[order], cols[order]]) if rows.size else np.zeros((m + 2, 0), np.int64)
        check_fits(index_dtype, "coo", **{f"size[{d}]": s for d, s in enumerate(shape[:m + 2])})
        return COOTensor(indices.astype(index_dtype), values[order], shape, True, checked=True)
    major, minor, n_major, n_minor = (rows, cols, Mb, Nb) if layout.compressed_rows else (cols, rows, Nb, Mb)
    nnz = rows.size // max(B, 1)
    check_fits(index_dtype, layout.name, nnz=nnz, nrows=M, ncols=N)
    order = (slice(None) if row_major and layout.compressed_rows
             else np.argsort((b * n_major + major) * n_minor + minor, kind="stable"))
    counts = np.bincount(b * n_major + major, minlength=B * n_major).reshape(B, n_major)
    compressed = np.zeros((B, n_major + 1), dtype=index_dtype)
    np.cumsum(counts, axis=1, out=compressed[:, 1:])
    plain = minor[order].astype(index_dtype).reshape(batch + (nnz,))
    vals = values[order].reshape(batch + (nnz,) + values.shape[1:])
    return CompressedTensor(compressed.reshape(batch + (n_major + 1,)), plain, vals, shape, layout, True)


def _blocked_from(t, layout, blocksize):
    """``t`` (assembled in :func:`_element_layout`) in ``layout``: bsr/bsc through the converter."""
    return t.to_sparse(layout, blocksize=blocksize) if layout.blocked else t


def _element_layout(layout):
    """The layout the element-wise generators assemble: csr for bsr/bsc (converted afterwards)."""
    return L.sparse_csr if layout.blocked else layout


def _as_rng(rng):
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


# -- zeros, eye, diags -----------------------------------------------------------------------------------
def zeros(shape, *, layout="csr", dtype=np.float64, index_dtype=np.int64, blocksize=None, dense_dim: int = 0,
          batch_dim: int = 0):
    """A tensor of ``shape`` with no specified elements (nnz 0).

    Parameters
    ----------
    shape : tuple of int
        ``batch + sparse + dense``: 2 sparse dims for csr/csc/bsr/bsc, the rest for coo.
    layout : str or Layout
    dtype, index_dtype : dtype
        Value dtype (default float64) and index dtype (int32 or int64).
    blocksize : (int, int), optional
        Block shape for bsr/bsc (must divide the sparse dims).
    dense_dim, batch_dim : int
        Trailing dense dims; leading batch dims (compressed layouts only).

    Examples
    --------
    >>> import sparsetensor as st
    >>> z = st.zeros((2, 3, 4), layout="csr", batch_dim=1)
    >>> z.shape, z.nnz, z.batch_dim, z.crow_indices().shape
    ((2, 3, 4), 0, 1, (2, 4))
    >>> st.zeros((4, 6), layout="bsc", blocksize=(2, 3)).ccol_indices()
    array([0, 0, 0])
    """
    layout, idt, bs, dt = _options(layout, index_dtype, blocksize, dtype)
    shape = tuple(operator.index(s) for s in shape)
    if min(shape, default=0) < 0:
        raise ValueError(f"negative dimension in shape {shape}")
    if dense_dim < 0 or batch_dim < 0:
        raise ValueError(f"dense_dim and batch_dim must be >= 0, got {dense_dim}, {batch_dim}")
    dense = shape[len(shape) - dense_dim:] if dense_dim else ()
    empty = np.zeros(0, np.int64)
    if layout is L.sparse_coo:
        if batch_dim:
            raise ValueError("coo has no batch dims: its leading dims are sparse (use batch_dim=0)")
        sd = len(shape) - dense_dim
        if sd < 0:
            raise ValueError(f"dense_dim={dense_dim} exceeds the {len(shape)} dims of {shape}")
        return COOTensor(np.zeros((sd, 0), idt), np.zeros((0,) + dense, dt), shape, True, checked=True)
    _check_matrix_shape(shape, batch_dim, dense_dim, layout, bs)
    block = bs if layout.blocked else ()
    values = np.zeros((0,) + block + dense, dt)
    bix = None if not batch_dim else empty
    return _assemble(bix, empty, empty, values, shape, layout, idt, bs, batch_dim)


def _check_matrix_shape(shape, batch_dim, dense_dim, layout, bs):
    if len(shape) != batch_dim + 2 + dense_dim:
        raise ValueError(f"a {layout.name} tensor of shape {shape} needs batch_dim + 2 + dense_dim == {len(shape)} "
                         f"dims, got batch_dim={batch_dim}, dense_dim={dense_dim}")
    M, N = shape[batch_dim:batch_dim + 2]
    if M % bs[0] or N % bs[1]:
        raise ValueError(f"blocksize {bs} does not divide the sparse shape ({M}, {N})")


def eye(n: int, m: int | None = None, k: int = 0, *, layout="csr", dtype=np.float64, index_dtype=np.int64,
        blocksize=None):
    """The ``n x m`` matrix with ones on diagonal ``k`` (SciPy's ``eye_array``, NumPy's ``np.eye``).

    Examples
    --------
    >>> import sparsetensor as st
    >>> st.eye(3, 4, k=1, dtype="int64").to_dense()
    array([[0, 1, 0, 0],
           [0, 0, 1, 0],
           [0, 0, 0, 1]])
    >>> st.eye(4, layout="bsr", blocksize=(2, 2)).nnz
    2
    """
    n = operator.index(n)
    m = n if m is None else operator.index(m)
    return diags([np.ones(1, dtype=as_value_dtype(dtype))], [k], (n, m), layout=layout, dtype=dtype,
                 index_dtype=index_dtype, blocksize=blocksize)


def diags(diagonals, offsets=0, shape=None, *, layout="csr", dtype=None, index_dtype=np.int64, blocksize=None):
    """A matrix from diagonals (SciPy's ``diags_array`` rules).

    ``diagonals[j]`` fills diagonal ``offsets[j]``: element ``i`` goes to ``(i, i + k)`` for
    ``k >= 0`` and to ``(i - k, i)`` for ``k < 0``. A diagonal of length 1 is repeated
    along its diagonal; a longer one is cut to the diagonal's length, a shorter one is an
    error. Zero values are not stored (as SciPy). ``shape`` defaults to a square matrix
    that fits the first diagonal. The dtype is ``np.result_type`` of the diagonals
    (SciPy 1.17 still casts integers to float64 by default; pass ``dtype`` to choose).

    Examples
    --------
    >>> import sparsetensor as st
    >>> st.diags([[1, 2, 3], [4, 5]], [0, -1]).to_dense()
    array([[1, 0, 0],
           [4, 2, 0],
           [0, 5, 3]])
    >>> st.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(4, 4), layout="coo").nnz
    10
    """
    if np.ndim(offsets) == 0:
        if len(diagonals) == 0 or np.ndim(diagonals[0]) == 0:
            diagonals = [np.atleast_1d(np.asarray(diagonals))]
        offsets = [offsets]
    offsets = [operator.index(k) for k in offsets]
    diagonals = [np.atleast_1d(np.asarray(d)) for d in diagonals]
    if len(diagonals) != len(offsets):
        raise ValueError(f"diags: {len(diagonals)} diagonals but {len(offsets)} offsets")
    if len(set(offsets)) != len(offsets):
        raise ValueError(f"diags: repeated offsets in {offsets}")
    if any(d.ndim != 1 for d in diagonals):
        raise ValueError("diags: each diagonal must be 1-d or a scalar")
    if shape is None:
        if not diagonals:
            raise ValueError("diags: give a shape when there are no diagonals")
        s = diagonals[0].size + abs(offsets[0])
        shape = (s, s)
    M, N = (operator.index(s) for s in shape)
    if dtype is not None:
        dt = dtype
    else:
        dt = np.result_type(*diagonals) if diagonals else np.float64
    layout, idt, bs, dt = _options(layout, index_dtype, blocksize, dt)
    rows, cols, vals = [], [], []
    for j, (d, k) in enumerate(zip(diagonals, offsets)):
        length = max(0, min(M, N - k) if k >= 0 else min(M + k, N))
        if d.size not in (1, length) and d.size < length:
            raise ValueError(f"diags: diagonal {j} (offset {k}) has {d.size} elements, its diagonal has {length}")
        i = np.arange(length, dtype=np.int64)
        rows.append(i if k >= 0 else i - k)
        cols.append(i + k if k >= 0 else i)
        vals.append(np.broadcast_to(d, (length,)) if d.size == 1 else d[:length])
    r, c = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in (rows, cols))
    v = np.concatenate(vals).astype(dt) if vals else np.zeros(0, dt)
    keep = v != 0
    t = _assemble(None, r[keep], c[keep], v[keep], (M, N), _element_layout(layout), idt)
    return _blocked_from(t, layout, bs)


# -- random --------------------------------------------------------------------------------------------
def _sample(rng, n: int, dtype: np.dtype) -> np.ndarray:
    """``n`` random nonzero values: uniform [0, 1) floats (real and imaginary parts), integers in [1, 9],
    True."""
    if dtype == np.bool_:
        return np.ones(n, dtype)
    if dtype.kind in "iu":
        return rng.integers(1, 10, size=n).astype(dtype)
    if dtype.kind == "c":
        return (rng.random(n) + 1j * rng.random(n)).astype(dtype)
    return rng.random(n).astype(dtype)


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` by a sort (NumPy 2.4's ``np.unique`` took ~70x longer on 10^7 random int64)."""
    x = np.sort(x)
    return x[np.concatenate([x[:1] == x[:1], x[1:] != x[:-1]])] if x.size else x


def _distinct(rng, total: int, k: int) -> np.ndarray:
    """``k`` distinct uniformly random integers in ``[0, total)``, sorted (a uniformly random subset)."""
    if k == 0:
        return np.zeros(0, np.int64)
    if 4 * k >= total:
        return np.sort(rng.permutation(total)[:k])
    flat = _sorted_unique(rng.integers(0, total, size=k + k // 8 + 16))
    while flat.size < k:
        flat = _sorted_unique(np.concatenate([flat, rng.integers(0, total, size=k - flat.size + k // 8 + 16)]))
    # the distinct draws are a uniformly random set of their size: keep a random k of them
    return np.sort(rng.choice(flat, size=k, replace=False)) if flat.size > k else flat


def random(shape, density: float = 0.01, *, layout="csr", rng=None, dtype=np.float64, index_dtype=np.int64,
           blocksize=None, batch_dim: int = 0, dense_dim: int = 0):
    """A tensor with exactly ``round(density * size)`` specified elements per batch at uniformly random
    distinct positions (SciPy's ``random_array``), with random values.

    For csr/csc/bsr/bsc ``size`` counts (block) positions of the sparse dims: a bsr/bsc
    tensor has ``round(density * (M / R) * (N / C))`` blocks per batch, each block and
    each dense slice filled with values. For coo every leading non-dense dim is sparse.
    Values: uniform in [0, 1) for floats (real and imaginary parts for complex), integers
    in [1, 9], True for bool.

    Parameters
    ----------
    shape : tuple of int
        ``batch + sparse + dense``.
    density : float
        In [0, 1].
    rng : numpy.random.Generator or int, optional
        The generator or a seed.

    Examples
    --------
    >>> import sparsetensor as st
    >>> t = st.random((100, 80), density=0.1, rng=0)
    >>> t.layout, t.nnz
    (st.sparse_csr, 800)
    >>> b = st.random((3, 8, 8), 0.25, layout="bsc", blocksize=(2, 4), batch_dim=1, dense_dim=0, rng=1)
    >>> b.nnz, b.values().shape
    (2, (3, 2, 2, 4))
    """
    layout, idt, bs, dt = _options(layout, index_dtype, blocksize, dtype)
    shape = tuple(operator.index(s) for s in shape)
    if not 0 <= density <= 1:
        raise ValueError(f"density must be in [0, 1], got {density}")
    rng = _as_rng(rng)
    dense = shape[len(shape) - dense_dim:] if dense_dim else ()
    if layout is L.sparse_coo:
        if batch_dim:
            raise ValueError("coo has no batch dims: its leading dims are sparse (use batch_dim=0)")
        sparse = shape[:len(shape) - dense_dim]
        total = math.prod(sparse)
        k = int(round(density * total))
        flat = _distinct(rng, total, k)
        coords = np.stack(np.unravel_index(flat, sparse)) if sparse else np.zeros((0, k), np.int64)
        check_fits(idt, "coo", **{f"size[{d}]": s for d, s in enumerate(sparse)})
        values = _sample(rng, k * math.prod(dense), dt).reshape((k,) + dense)
        return COOTensor(coords.astype(idt).reshape(len(sparse), k), values, shape, True, checked=True)
    _check_matrix_shape(shape, batch_dim, dense_dim, layout, bs)
    batch = shape[:batch_dim]
    M, N = shape[batch_dim:batch_dim + 2]
    Mb, Nb = M // bs[0], N // bs[1]
    B = math.prod(batch)
    k = int(round(density * Mb * Nb))
    flat = np.concatenate([_distinct(rng, Mb * Nb, k) for _ in range(B)] + [np.zeros(0, np.int64)])
    rows, cols = np.divmod(flat.astype(np.int64), max(Nb, 1))
    block = bs if layout.blocked else ()
    n = flat.size
    values = _sample(rng, n * math.prod(block + dense), dt).reshape((n,) + block + dense)
    bix = np.repeat(np.arange(B, dtype=np.int64), k) if batch_dim else None
    return _assemble(bix, rows, cols, values, shape, layout, idt, bs, batch_dim, row_major=True)


# -- graph and stencil generators ----------------------------------------------------------------------
def rmat(scale: int, edge_factor: int = 16, rng=None, *, a: float = 0.57, b: float = 0.19, c: float = 0.19,
         layout="csr", dtype=np.float64, index_dtype=np.int64, blocksize=None):
    """The adjacency matrix of a Graph500 R-MAT (Kronecker) graph: ``2**scale`` vertices,
    ``edge_factor * 2**scale`` generated edges.

    Each edge picks, at each of ``scale`` bit levels, the quadrant top-left, top-right,
    bottom-left or bottom-right with probabilities ``a``, ``b``, ``c`` and ``1 - a - b - c``
    (Graph500: 0.57, 0.19, 0.19, 0.05); vertex labels are then randomly permuted. Repeated
    edges are summed: an entry's value is the number of times its edge was generated
    (self-loops kept), so ``sum(values) == edge_factor * 2**scale``.

    Examples
    --------
    >>> import sparsetensor as st
    >>> g = st.rmat(8, 4, rng=0)
    >>> g.shape, int(g.values().sum())
    ((256, 256), 1024)
    """
    scale, edge_factor = operator.index(scale), operator.index(edge_factor)
    if scale < 0 or edge_factor < 0:
        raise ValueError(f"scale and edge_factor must be >= 0, got {scale}, {edge_factor}")
    if min(a, b, c) < 0 or a + b + c > 1:
        raise ValueError(f"a, b, c must be probabilities with a + b + c <= 1, got {a}, {b}, {c}")
    layout, idt, bs, dt = _options(layout, index_dtype, blocksize, dtype)
    rng = _as_rng(rng)
    n = 1 << scale
    m = edge_factor * n
    rows = np.zeros(m, np.int64)
    cols = np.zeros(m, np.int64)
    for level in range(scale):
        u = rng.random(m)
        down = u >= a + b
        right = ((u >= a) & (u < a + b)) | (u >= a + b + c)
        rows |= down.astype(np.int64) << level
        cols |= right.astype(np.int64) << level
    perm = rng.permutation(n)
    keys, counts = np.unique(perm[rows] * n + perm[cols], return_counts=True)
    r, col = np.divmod(keys, n)
    t = _assemble(None, r, col, counts.astype(dt), (n, n), _element_layout(layout), idt, row_major=True)
    return _blocked_from(t, layout, bs)


_STENCILS = {(2, 5): "star", (3, 7): "star", (3, 27): "box"}


def stencil(grid, points: int | None = None, *, layout="csr", dtype=np.float64, index_dtype=np.int64,
            blocksize=None, dofs: int = 1):
    """The finite-difference Laplacian of a 2-d or 3-d grid: ``points - 1`` on the diagonal, -1 for
    each neighbour.

    ``points``: 5 (2-d, the default for a 2-d grid), 7 (3-d, the default) or 27 (3-d, every
    point of the surrounding 3x3x3 box: HPCG's matrix, 26 on the diagonal). Grid point
    ``(x, y[, z])`` is row ``np.ravel_multi_index((x, y[, z]), grid)``; boundary points have
    fewer neighbours (Dirichlet). The 5-point matrix equals SciPy's
    ``kron(I, T) + kron(T, I)`` with ``T = tridiag(-1, 2, -1)``.

    ``dofs``: unknowns per grid point, as in vector-valued FEM (3 for 3-d elasticity): the
    matrix is ``kron(A, K)`` with ``A`` the scalar stencil and ``K = ones((dofs, dofs)) + dofs *
    eye(dofs)`` (dense, symmetric positive definite), so every pair of coupled points is one
    dense ``dofs x dofs`` block. bsr/bsc take those blocks (``blocksize`` defaults to
    ``(dofs, dofs)``); the other layouts store the same matrix element-wise.

    Examples
    --------
    >>> import sparsetensor as st
    >>> a = st.stencil((2, 2))
    >>> a.to_dense()
    array([[ 4., -1., -1.,  0.],
           [-1.,  4.,  0., -1.],
           [-1.,  0.,  4., -1.],
           [ 0., -1., -1.,  4.]])
    >>> st.stencil((3, 3, 3), 27).nnz
    343
    >>> f = st.stencil((4, 4, 4), 27, layout="bsr", dofs=3)
    >>> f.shape, f.values().shape
    ((192, 192), (1000, 3, 3))
    """
    grid = tuple(operator.index(g) for g in grid)
    dofs = operator.index(dofs)
    if dofs < 1:
        raise ValueError(f"stencil: dofs must be >= 1, got {dofs}")
    if points is None:
        points = 5 if len(grid) == 2 else 7
    kind = _STENCILS.get((len(grid), points))
    if kind is None:
        raise ValueError(f"stencil: points={points} on a {len(grid)}-d grid; expected 5 (2-d), 7 or 27 (3-d)")
    if min(grid) < 0:
        raise ValueError(f"stencil: negative grid size in {grid}")
    layout, idt, bs, dt = _options(layout, index_dtype, blocksize, dtype)
    n = math.prod(grid)
    shifts = np.array(np.meshgrid(*[[-1, 0, 1]] * len(grid), indexing="ij")).reshape(len(grid), -1).T
    if kind == "star":
        shifts = shifts[np.abs(shifts).sum(axis=1) <= 1]
    strides = np.array([math.prod(grid[d + 1:]) for d in range(len(grid))], dtype=np.int64)
    # ok[p, s]: the neighbour of point p at shift s is in the grid (one axis at a time)
    ok = np.ones((n, len(shifts)), dtype=bool)
    for d, g in enumerate(grid):
        c = (np.arange(n, dtype=np.int64) // strides[d]) % g
        ok &= ((c[:, None] + shifts[None, :, d]) >= 0) & ((c[:, None] + shifts[None, :, d]) < g)
    # (point, shift) pairs in row-major order: shifts in lexicographic order give increasing
    # columns within a row, so the entries come out sorted (and the matrix is symmetric:
    # its csc arrays are its csr arrays)
    rows, which = np.nonzero(ok)
    cols = rows + (shifts @ strides)[which]
    vals = np.where(rows == cols, points - 1, -1).astype(dt)
    if dofs > 1:
        return _point_blocks(rows, cols, vals, n, dofs, layout, idt, blocksize)
    if layout is L.sparse_csc:
        rows, cols = cols, rows
    t = _assemble(None, rows, cols, vals, (n, n), _element_layout(layout), idt, row_major=True)
    return _blocked_from(t, layout, bs)


def _point_blocks(rows, cols, vals, n, dofs, layout, index_dtype, blocksize):
    """``kron(A, K)`` of the n x n scalar matrix A (row-major entries ``rows, cols, vals``) with
    ``K = ones + dofs * eye``: assembled as bsr with ``dofs x dofs`` blocks, then in ``layout``."""
    K = (np.ones((dofs, dofs)) + dofs * np.eye(dofs)).astype(vals.dtype)
    shape = (n * dofs, n * dofs)
    block = (dofs, dofs)
    t = _assemble(None, rows, cols, vals[:, None, None] * K, shape, L.sparse_bsr, index_dtype, block, row_major=True)
    if layout.blocked and (blocksize is None or L.as_blocksize(blocksize) == block):
        return t if layout is L.sparse_bsr else t.to_sparse(layout, blocksize=block)
    return t.to_sparse(layout, blocksize=blocksize)
