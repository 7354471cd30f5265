"""sparsetensor.mpi against PETSc on the same matrices, ranks and threads: ``python -m bench petsc``.

For each configuration (ranks x threads per rank: 1 x 1, 2 x 1 and 1 x 2 by default) the driver
runs ``mpiexec -n R python bench/petsc.py --threads T`` with ``OMP_NUM_THREADS=T``; in that
process both libraries run the same work in turn (ours, PETSc, PETSc, ours, ... for
``--rounds`` rounds; the best round counts; every time is the slowest rank's):

- **assembly**: a Q1 finite-element Laplacian on a ``K x K`` element grid (16 entries per
  element, each rank the elements of a band of rows, ``(K+1)^2`` unknowns):
  :func:`sparsetensor.mpi.assemble` against PETSc's COO assembly
  (``MatSetPreallocationCOO`` + ``MatSetValuesCOO`` + assembly, its vectorised path for the
  same triples; ``MatSetValues`` per element from Python would measure petsc4py's calls);
- **SpMV** on the 2-D 5-point Poisson matrix (``K x K`` unknowns) and the 3-D 27-point one
  (``G^3``): ``A @ x`` against ``MatMult`` on ``A.to_petsc()`` (the same arrays);
- **CG + Jacobi** and **GMRES(30) + block Jacobi / ILU(0)** on the 5-point matrix, time per
  iteration over a fixed number of iterations (both Gram-Schmidt classical, PETSc's default);
- the **iterations to rtol = 1e-8** of GMRES + block Jacobi / ILU(0) (ours test ``||b - A x||``
  as SciPy does, PETSc its default preconditioned norm, so the counts may differ by a few).

PETSc is single-threaded per rank, so on ``1 x 2`` it runs on one core while ours uses two; its
line is for reference. Ratios are PETSc time / ours: above 1 we are faster. Needs mpi4py and
petsc4py; the JSON goes to ``bench/results/petsc.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


# -- the worker (under mpiexec; imports nothing of the bench package) ----------------------------------
def _fem_entries(K: int, rank: int, size: int):
    """This rank's element triples of the Q1 Laplacian on the unit square, K x K elements."""
    import numpy as np

    ke = np.array([[4, -1, -2, -1], [-1, 4, -1, -2], [-2, -1, 4, -1], [-1, -2, -1, 4]], dtype=np.float64) / 6
    e0, e1 = K * rank // size, K * (rank + 1) // size
    ey, ex = np.meshgrid(np.arange(e0, e1), np.arange(K), indexing="ij")
    n0 = (ey * (K + 1) + ex).reshape(-1)
    nodes = np.stack([n0, n0 + 1, n0 + K + 2, n0 + K + 1], axis=1)  # counter-clockwise
    rows = np.repeat(nodes, 4, axis=1).reshape(-1)
    cols = np.tile(nodes, (1, 4)).reshape(-1)
    vals = np.tile(ke.reshape(-1), nodes.shape[0])
    return rows.astype(np.int32), cols.astype(np.int32), vals


def worker(args) -> None:
    import numpy as np
    from mpi4py import MPI
    from petsc4py import PETSc

    import sparsetensor as st
    from sparsetensor import mpi as stmpi

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    st.set_num_threads(args.threads)
    out = {"ranks": size, "threads": args.threads, "cases": []}

    def slowest(seconds: float) -> float:
        return comm.allreduce(seconds, op=MPI.MAX)

    def timed(fn, reps: int) -> float:
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        comm.Barrier()
        return slowest((time.perf_counter() - t0) / reps)

    def race(name, ours, theirs, reps, per=1, extra=None):
        """Best of the rounds for each side (per call, divided by ``per``), alternating."""
        ours(), theirs()
        best = {"ours": float("inf"), "petsc": float("inf")}
        for r in range(args.rounds):
            for side in (("ours", "petsc") if r % 2 == 0 else ("petsc", "ours")):
                t = timed(ours if side == "ours" else theirs, reps) / per
                best[side] = min(best[side], t)
        rec = {"case": name, "ours_s": best["ours"], "petsc_s": best["petsc"], "petsc/ours": best["petsc"] / best["ours"]}
        rec.update(extra or {})
        out["cases"].append(rec)

    # assembly
    K = args.grid
    n = (K + 1) ** 2
    rows, cols, vals = _fem_entries(K, rank, size)

    def ours_assemble():
        return stmpi.assemble(rows, cols, vals, (n, n), comm=comm)

    def petsc_assemble():
        P = PETSc.Mat().create(comm=PETSc.COMM_WORLD)
        P.setSizes(((PETSc.DECIDE, n), (PETSc.DECIDE, n)))
        P.setType(PETSc.Mat.Type.AIJ)
        P.setPreallocationCOO(rows.astype(PETSc.IntType), cols.astype(PETSc.IntType))
        P.setValuesCOO(vals, addv=PETSc.InsertMode.ADD_VALUES)
        P.assemble()
        P.destroy()

    race(f"assembly Q1 {K}x{K} elements ({comm.allreduce(rows.size)} entries)", ours_assemble, petsc_assemble, 2)

    # SpMV
    def spmv_case(label, t):
        A = stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm)
        P = A.to_petsc()
        x = np.ones(P.getLocalSize()[1])
        xv, yv = P.createVecs()
        xv.set(1.0)
        y = A @ x
        P.mult(xv, yv)
        assert np.allclose(y, yv.getArray()), label
        race(f"SpMV {label} ({A.nnz} nnz)", lambda: A @ x, lambda: P.mult(xv, yv), args.spmv_reps)
        return A, P

    poisson = st.stencil((K, K), 5, dtype=np.float64, index_dtype=np.int32) if rank == 0 else None
    A, P = spmv_case(f"5-point {K}x{K}", poisson)
    G = args.grid3
    spmv_case(f"27-point {G}^3", st.stencil((G, G, G), 27, dtype=np.float64, index_dtype=np.int32) if rank == 0
              else None)

    # Krylov iterations
    b = np.ones(P.getLocalSize()[0])
    bv, xv = P.createVecs()
    bv.set(1.0)
    its = args.iterations

    def ksp_of(ksp_type, pc_type, rtol, max_it, restart=None):
        ksp = PETSc.KSP().create(comm=PETSc.COMM_WORLD)
        ksp.setOperators(P)
        ksp.setType(ksp_type)
        ksp.getPC().setType(pc_type)
        if restart:
            ksp.setGMRESRestart(restart)
        ksp.setTolerances(rtol=rtol, atol=0.0, max_it=max_it)
        ksp.setFromOptions()
        ksp.setUp()
        return ksp

    def ours_run(method, M, rtol, maxiter, **kw):
        stats = {}
        method(A, b, M=M, rtol=rtol, maxiter=maxiter, stats=stats, **kw)
        return stats["iterations"]

    jac = stmpi.jacobi(A)
    kcg = ksp_of("cg", "jacobi", 1e-30, its)
    race(f"CG + Jacobi, per iteration ({its})", lambda: ours_run(stmpi.cg, jac, 1e-30, its),
         lambda: kcg.solve(bv, xv), 1, per=its)
    bj = stmpi.block_jacobi(A, "ilu0")
    kgm = ksp_of("gmres", "bjacobi", 1e-30, its, restart=30)
    # ours: maxiter counts restart cycles (SciPy's meaning): whole cycles of 30
    race(f"GMRES(30) + bjacobi/ILU(0), per iteration ({its})",
         lambda: ours_run(stmpi.gmres, bj, 1e-30, its // 30, restart=30, gram_schmidt="classical"),
         lambda: kgm.solve(bv, xv), 1, per=its)
    ours_its = ours_run(stmpi.gmres, bj, 1e-8, 1000, restart=30, gram_schmidt="classical")
    k8 = ksp_of("gmres", "bjacobi", 1e-8, 100000, restart=30)
    k8.solve(bv, xv)
    out["gmres_bjacobi_iterations_to_1e-8"] = {"ours": int(ours_its), "petsc": int(k8.getIterationNumber())}
    if rank == 0:
        print("JSON " + json.dumps(out), flush=True)


# -- the driver -------------------------------------------------------------------------------------------
def run(configs=((1, 1), (2, 1), (1, 2)), grid: int = 500, grid3: int = 48, rounds: int = 3, quick: bool = False):
    from ._common import print_table, write_json

    if quick:
        grid, grid3, rounds = 100, 16, 2
    mpiexec = Path(sys.executable).with_name("mpiexec")
    results = []
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for ranks, threads in configs:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        cmd = [str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(ranks), sys.executable, str(HERE / "petsc.py"),
               "--threads", str(threads), "--grid", str(grid), "--grid3", str(grid3), "--rounds", str(rounds),
               "--iterations", "60" if quick else "120", "--spmv-reps", "20" if quick else "50"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, check=False,
                           cwd=str(HERE.parent / "tests"))
        line = [x for x in r.stdout.splitlines() if x.startswith("JSON ")]
        if r.returncode != 0 or not line:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        results.append(json.loads(line[0][5:]))
        print(f"  {ranks} x {threads}: done", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for res in results:
        for c in res["cases"]:
            rows.append([f"{res['ranks']} x {res['threads']}", c["case"], f"{c['ours_s'] * 1e3:.3f}",
                         f"{c['petsc_s'] * 1e3:.3f}", f"{c['petsc/ours']:.2f}"])
    print_table(["ranks x threads", "case", "ours ms", "PETSc ms", "PETSc/ours"], rows)
    for res in results:
        it = res["gmres_bjacobi_iterations_to_1e-8"]
        print(f"{res['ranks']} x {res['threads']}: GMRES(30) + bjacobi/ILU(0) to rtol 1e-8: ours {it['ours']} "
              f"iterations, PETSc {it['petsc']}")
    write_json("petsc", {"runs": results})
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/petsc.py")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--grid", type=int, default=500)
    parser.add_argument("--grid3", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=120)
    parser.add_argument("--spmv-reps", type=int, default=50)
    worker(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
