"""Test matrices for the distributed command line and benchmarks: a 3-D stencil and an R-MAT graph.

Both are symmetric positive definite (strictly diagonally dominant with a
positive diagonal), so :func:`sparsetensor.mpi.cg` solves them. They are kept
small and NumPy-only here until the library has its own generators.
"""

from __future__ import annotations

import numpy as np

from .._core._from_arrays import sparse_coo_tensor, sparse_csr_tensor

__all__ = ["stencil", "rmat"]


def stencil(grid: int, points: int = 27, *, dtype=np.float64, index_dtype=np.int32):
    """The ``points``-point Laplacian-like stencil on a ``grid**3`` box (CSR, ``grid**3`` rows).

    ``points=27`` (HPCG's matrix: 26 on the diagonal, -1 for each of the up to
    26 neighbours in the 3 x 3 x 3 cube) or ``points=7`` (6 and the 6 face
    neighbours). Rows are numbered ``x + grid * (y + grid * z)``.

    Examples
    --------
    >>> from sparsetensor.mpi._generate import stencil
    >>> t = stencil(3)
    >>> t.shape, t.nnz, t.to_dense()[13].tolist().count(-1.0)
    ((27, 27), 343, 26)
    """
    if points not in (7, 27):
        raise ValueError(f"points must be 7 or 27, got {points}")
    g = int(grid)
    if g < 1:
        raise ValueError(f"grid must be >= 1, got {grid}")
    n = g ** 3
    if n > np.iinfo(index_dtype).max:
        raise ValueError(f"a grid of {g}^3 rows does not fit {np.dtype(index_dtype)} indices")
    offsets = [(dz, dy, dx) for dz in (-1, 0, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
               if points == 27 or abs(dz) + abs(dy) + abs(dx) <= 1]  # lexicographic: columns come out sorted
    i = np.arange(n, dtype=np.int64)
    x, y, z = i % g, (i // g) % g, i // (g * g)
    cols = np.full((n, len(offsets)), -1, dtype=np.int64)
    for k, (dz, dy, dx) in enumerate(offsets):
        ok = (z + dz >= 0) & (z + dz < g) & (y + dy >= 0) & (y + dy < g) & (x + dx >= 0) & (x + dx < g)
        cols[ok, k] = np.flatnonzero(ok) + dx + g * (dy + g * dz)
    keep = cols >= 0
    crow = np.zeros(n + 1, dtype=index_dtype)
    np.cumsum(keep.sum(axis=1), out=crow[1:])
    c = cols[keep]
    vals = np.where(c == np.repeat(np.arange(n), keep.sum(axis=1)), float(points - 1), -1.0).astype(dtype)
    return sparse_csr_tensor(crow, c.astype(index_dtype), vals, size=(n, n))


def rmat(scale: int, edge_factor: int = 16, *, probabilities=(0.57, 0.19, 0.19, 0.05), seed: int = 0,
         dtype=np.float64, index_dtype=np.int32):
    """An R-MAT graph (Graph500's parameters by default) as ``L + I``: a Laplacian shifted to be SPD.

    ``2**scale`` vertices, ``edge_factor * 2**scale`` edges drawn by recursive
    quadrant choice, symmetrised, self loops dropped, duplicates summed; the
    result has ``-w`` for an edge of weight ``w`` and ``1 + degree`` on the
    diagonal. Vertices are not permuted: low numbers are the hubs (dense rows).

    Examples
    --------
    >>> from sparsetensor.mpi._generate import rmat
    >>> t = rmat(6, 4)
    >>> t.shape, bool((t.to_dense() == t.to_dense().T).all())
    ((64, 64), True)
    """
    n = 1 << int(scale)
    m = int(edge_factor) * n
    rng = np.random.default_rng(seed)
    a, b, c, _ = probabilities
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for bit in range(int(scale)):
        u = rng.random(m)
        down = u >= a + b                     # quadrants c, d: the source bit is set
        right = ((u >= a) & (u < a + b)) | (u >= a + b + c)  # quadrants b, d: the destination bit is set
        src |= down.astype(np.int64) << bit
        dst |= right.astype(np.int64) << bit
    off = src != dst
    rows = np.concatenate([src[off], dst[off]])
    cols = np.concatenate([dst[off], src[off]])
    adj = sparse_coo_tensor(np.stack([rows, cols]), -np.ones(rows.size, dtype=dtype), (n, n)).coalesce()
    deg = -np.bincount(adj.indices()[0], weights=adj.values().real, minlength=n)
    diag = np.arange(n, dtype=np.int64)
    idx = np.concatenate([adj.indices(), np.stack([diag, diag])], axis=1)
    vals = np.concatenate([adj.values(), (1.0 + deg).astype(dtype)])
    t = sparse_coo_tensor(idx, vals, (n, n)).coalesce().to_sparse_csr()
    return t.to(index_dtype=index_dtype) if t.index_dtype != np.dtype(index_dtype) else t
