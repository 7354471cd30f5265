"""A finite-element Poisson solve on every rank: assemble, impose Dirichlet rows, solve.

    mpiexec -n 4 python examples/fem_poisson.py [--n 64] [--petsc]

``-laplace(u) = f`` on the unit square, ``u = 0`` on its boundary, with bilinear (Q1)
elements on an ``n x n`` grid and the manufactured solution ``u = sin(pi x) sin(pi y)``.
Each rank computes the element matrices of its own share of the elements; the entries of
nodes that another rank owns travel to it in :func:`sparsetensor.mpi.assemble` (PETSc's
``MatSetValues(ADD_VALUES)`` + assembly). The boundary rows are zeroed with a unit diagonal
(``zero_rows``, PETSc's ``MatZeroRows``), then the system is solved with our GMRES and a
block-Jacobi preconditioner whose local blocks are ILU(0) factors, and, with ``--petsc``
and petsc4py installed, with PETSc's CG + GAMG on the same matrix through the bridge.
Rank 0 prints the iterations and the error against the exact solution, which falls as
``h^2``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from mpi4py import MPI

from sparsetensor import mpi as stmpi

# the Q1 stiffness matrix of a square element (any size in 2-D), nodes counter-clockwise
K_Q1 = np.array([[4, -1, -2, -1], [-1, 4, -1, -2], [-2, -1, 4, -1], [-1, -2, -1, 4]]) / 6.0


def element_entries(n: int, first: int, last: int):
    """The global (row, col, value) triples and load (node, value) pairs of elements ``first:last``."""
    h = 1.0 / n
    e = np.arange(first, last)
    ex, ey = e % n, e // n
    corner = ey * (n + 1) + ex  # the element's lower-left node
    nodes = np.stack([corner, corner + 1, corner + n + 2, corner + n + 1], axis=1)  # counter-clockwise
    rows = np.repeat(nodes, 4, axis=1).ravel()
    cols = np.tile(nodes, (1, 4)).ravel()
    vals = np.tile(K_Q1.ravel(), e.size)
    x, y = (nodes % (n + 1)) * h, (nodes // (n + 1)) * h
    f = 2 * np.pi ** 2 * np.sin(np.pi * x) * np.sin(np.pi * y)
    return rows, cols, vals, nodes.ravel(), (f * h * h / 4).ravel()  # the load, lumped at the corners


def boundary_nodes(n: int) -> np.ndarray:
    side = np.arange(n + 1)
    return np.unique(np.concatenate([side, n * (n + 1) + side, side * (n + 1), side * (n + 1) + n]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64, help="elements per side (default 64)")
    p.add_argument("--rtol", type=float, default=1e-10)
    p.add_argument("--petsc", action="store_true", help="also solve with PETSc's CG + GAMG (petsc4py)")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    n, N = args.n, (args.n + 1) ** 2
    first, last = comm.rank * n * n // comm.size, (comm.rank + 1) * n * n // comm.size  # my elements
    rows, cols, vals, load_nodes, load = element_entries(n, first, last)

    A = stmpi.assemble(rows, cols, vals, (N, N), comm)
    b = stmpi.assemble_vector(load_nodes, load, N, comm)
    r0, r1 = A.row_range
    A.zero_rows(boundary_nodes(n), diag=1.0, x=np.zeros(r1 - r0), b=b)  # u = 0 on the boundary

    nodes = np.arange(r0, r1)
    exact = np.sin(np.pi * (nodes % (n + 1)) / n) * np.sin(np.pi * (nodes // (n + 1)) / n)
    report = []
    stats: dict = {}
    u, info = stmpi.gmres(A, b, rtol=args.rtol, restart=50, M=stmpi.block_jacobi(A, "ilu0"), stats=stats)
    err = comm.allreduce(float(np.abs(u - exact).max(initial=0.0)), op=MPI.MAX)
    report.append(f"gmres+block_jacobi(ilu0): info {info}, {stats.get('iterations')} iterations, "
                  f"max error {err:.3e}")
    if args.petsc:
        x, pinfo = stmpi.solve(A, b, "cg", "gamg", rtol=args.rtol)
        perr = comm.allreduce(float(np.abs(x - exact).max(initial=0.0)), op=MPI.MAX)
        report.append(f"petsc cg+gamg: info {pinfo}, max error {perr:.3e}")
    if comm.rank == 0:
        print(f"{N} unknowns, {A.nnz} entries, {comm.size} ranks")
        print("\n".join(report))
    return 0 if info == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
