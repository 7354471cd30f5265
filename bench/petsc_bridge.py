"""What the ways into a PETSc AIJ matrix copy, and what they cost: ``mpiexec -n R python bench/petsc_bridge.py [K]``.

A 2-D 5-point Poisson matrix on a ``K x K`` grid (default 500: 250,000 rows, 1.25M nnz), int32
indices and float64 values (PETSc's default ``PetscInt`` and ``PetscScalar``), is distributed
over the ranks; then each of these builds the same PETSc matrix from it:

- ``to_petsc``: :meth:`DistCSR.to_petsc` (``MatCreateMPIAIJWithSplitArrays`` from our diagonal
  and off-diagonal blocks; ``MatCreateSeqAIJWithArrays`` on one rank);
- ``to_petsc int64``: the same from int64 indices (converted: a copy of every index);
- ``AIJWithArrays``: ``Mat.createAIJWithArrays(size, (i, j, v))`` with this rank's rows in global
  columns (``MatCreateMPIAIJWithArrays``; ``MatCreateSeqAIJWithArrays`` on one rank);
- ``createAIJ(csr=)``: ``Mat.createAIJ(size, csr=(i, j, v))`` (preallocation + ``MatSetValuesCSR``);
- ``setValuesCSR``: ``createAIJ(size, nnz=...)``, ``setValuesCSR(i, j, v)``, ``assemble()``.

For each: whether PETSc uses our value array (the values are doubled in place after the
build; a shared array doubles ``P @ 1``), the bytes PETSc allocated for the matrix (glibc's
``mallinfo2``: heap in use plus mmapped, after minus before, the largest over the ranks) against
the bytes of this rank's CSR arrays, and the build time (median of 5, the slowest rank).
Prints one table (rank 0); not a test.
"""

from __future__ import annotations

import ctypes
import sys
import time

import numpy as np
from mpi4py import MPI
from petsc4py import PETSc

import sparsetensor as st
from sparsetensor import mpi as stmpi

comm = MPI.COMM_WORLD


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def heap_bytes() -> int:
    m = _libc.mallinfo2()
    return int(m.uordblks + m.hblkhd)


def slowest(seconds: float) -> float:
    return comm.allreduce(seconds, op=MPI.MAX)


def main(k: int = 500):
    t = st.stencil((k, k), 5, index_dtype=np.int32) if comm.rank == 0 else None
    A = stmpi.DistCSR.from_global(t, comm=comm)
    A64 = stmpi.DistCSR.from_global(t.to(index_dtype=np.int64) if comm.rank == 0 else None, comm=comm)
    r0, r1 = A.row_range
    m, n = A.shape
    size = ((r1 - r0, m), (r1 - r0, n))
    loc = A.local_rows()
    i, j, v = loc.crow_indices(), loc.col_indices(), loc.values()
    csr_bytes = i.nbytes + j.nbytes + v.nbytes
    ones = np.ones(r1 - r0)

    def values_of(name):  # the arrays whose doubling tells whether PETSc shares them
        if name.startswith("to_petsc"):
            M = A if name == "to_petsc" else A64
            return [M.diag_block.values(), M.offdiag_block.values()]
        return [v]

    def nnz_rows():  # (diagonal, off-diagonal) entries per row: PETSc refuses a malloc past its preallocation
        return tuple(np.diff(b.crow_indices()).astype(PETSc.IntType) for b in (A.diag_block, A.offdiag_block))

    builders = {
        "to_petsc": lambda: A.to_petsc(),
        "to_petsc int64": lambda: A64.to_petsc(),
        "AIJWithArrays": lambda: PETSc.Mat().createAIJWithArrays(size, (i, j, v), comm=comm),
        "createAIJ(csr=)": lambda: PETSc.Mat().createAIJ(size, csr=(i, j, v), comm=comm),
        "setValuesCSR": lambda: _set_values(size, nnz_rows(), i, j, v),
    }
    rows = []
    for name, build in builders.items():
        times = []
        for _ in range(5):
            comm.Barrier()
            t0 = time.perf_counter()
            P = build()
            times.append(slowest(time.perf_counter() - t0))
            P.destroy()
        comm.Barrier()
        h0 = heap_bytes()
        P = build()
        grown = comm.allreduce(heap_bytes() - h0, op=MPI.MAX)
        x, y = P.createVecRight(), P.createVecLeft()
        x.setArray(ones)
        P.mult(x, y)
        before = y.getArray().copy()
        for a in values_of(name):
            a *= 2
        P.assemble()
        P.mult(x, y)
        shared = bool(comm.allreduce(np.array_equal(y.getArray(), 2 * before) and np.any(before), op=MPI.LAND))
        for a in values_of(name):
            a /= 2
        t0 = time.perf_counter()
        for _ in range(20):
            P.mult(x, y)
        mult = slowest((time.perf_counter() - t0) / 20)
        rows.append((name, P.getType(), "shared" if shared else "copied", grown / 2**20,
                     comm.allreduce(csr_bytes, op=MPI.MAX) / 2**20, float(np.median(times)) * 1e3, mult * 1e3))
        for vec in (x, y):
            vec.destroy()
        P.destroy()
    P = A.to_petsc()
    times = []
    for _ in range(3):
        comm.Barrier()
        t0 = time.perf_counter()
        B = stmpi.DistCSR.from_petsc(P)
        times.append(slowest(time.perf_counter() - t0))
        B.free()
    P.destroy()
    if comm.rank == 0:
        print(f"PETSc {'.'.join(map(str, PETSc.Sys.getVersion()))}, {comm.size} rank(s), {m} rows, {A.nnz} nnz, "
              f"PetscInt {np.dtype(PETSc.IntType)}, PetscScalar {np.dtype(PETSc.ScalarType)}")
        print(f"{'build':18s} {'type':8s} {'values':7s} {'PETSc MiB':>10s} {'CSR MiB':>8s} {'build ms':>9s} "
              f"{'MatMult ms':>10s}")
        for r in rows:
            print(f"{r[0]:18s} {r[1]:8s} {r[2]:7s} {r[3]:10.2f} {r[4]:8.2f} {r[5]:9.2f} {r[6]:10.3f}")
        print(f"DistCSR.from_petsc: {np.median(times) * 1e3:.1f} ms (median of 3, slowest rank)")


def _set_values(size, nnz, i, j, v):
    P = PETSc.Mat().createAIJ(size, nnz=nnz, comm=comm)
    P.setValuesCSR(i, j, v)
    P.assemble()
    return P


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
