"""``python -m sparsetensor.mpi``: distributed solves and products for batch jobs.

    mpiexec -n 4 python -m sparsetensor.mpi cg m.npz [--rtol 1e-8] [--maxiter N] [--jacobi]
    mpiexec -n 4 python -m sparsetensor.mpi spmv m.npz [--repeat 50] [--columns N] [--exchange neighbor]
    python -m sparsetensor.mpi generate (--stencil 27 --grid 40 | --rmat 16 [--edge-factor 16]) m.npz

``cg`` solves ``A x = b`` with ``b = A @ s``, ``s[i] = 1 + sin(i) / 2`` (a known
solution that is not an eigenvector, as ones would be for a Laplacian) and prints
the iterations, the relative residual ``||b - A x|| / ||b||``,
the time per iteration and the communication share (time in the ghost
exchange not hidden behind the diagonal block plus time in the dot-product
allreduces, over the solve time; the largest over the ranks). ``spmv`` times
``--repeat`` products ``A @ X`` (``X``: ``--columns`` columns, 1 = a vector)
and prints the time per product (the slowest rank), GFLOP/s (2 flops per
entry and column), the bytes exchanged per product (all ranks) against the
ghost count, and the communication share. ``--json`` prints one JSON object
instead. Threads per rank: ``--threads`` or ``OMP_NUM_THREADS``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from mpi4py import MPI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sparsetensor.mpi", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write a test matrix (one process)")
    kind = g.add_mutually_exclusive_group(required=True)
    kind.add_argument("--stencil", type=int, choices=(7, 27), help="a 3-D stencil with this many points")
    kind.add_argument("--rmat", type=int, metavar="SCALE", help="an R-MAT graph with 2**SCALE vertices (L + I)")
    g.add_argument("--grid", type=int, default=40, help="stencil grid points per side (rows: grid**3)")
    g.add_argument("--edge-factor", type=int, default=16, help="R-MAT edges per vertex")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--dtype", default="float64")
    g.add_argument("--index-dtype", default="int32", choices=("int32", "int64"))
    g.add_argument("path", help="output file: .npz (st.save) or .mtx")
    for name in ("cg", "spmv"):
        s = sub.add_parser(name, help="solve A x = A @ s by CG (s known)" if name == "cg" else "time A @ X")
        s.add_argument("path", help="the matrix: .npz (each rank maps its rows) or .mtx (rank 0 reads)")
        s.add_argument("--threads", type=int, default=None, help="threads per rank (default: OMP_NUM_THREADS)")
        s.add_argument("--json", action="store_true", help="print one JSON object on rank 0")
        s.add_argument("--exchange", choices=("p2p", "neighbor"), default="p2p",
                       help="ghost exchange: point-to-point messages or one neighbourhood collective")
        if name == "cg":
            s.add_argument("--rtol", type=float, default=1e-8)
            s.add_argument("--maxiter", type=int, default=None)
            s.add_argument("--jacobi", action="store_true", help="Jacobi (diagonal) preconditioner")
        else:
            s.add_argument("--repeat", type=int, default=50)
            s.add_argument("--columns", type=int, default=1, help="dense columns N (1: SpMV on a 1-d vector)")
    return p


def _generate(args) -> int:
    import sparsetensor as st

    from ._generate import rmat, stencil

    t0 = time.perf_counter()
    if args.stencil:
        t = stencil(args.grid, args.stencil, dtype=args.dtype, index_dtype=args.index_dtype)
    else:
        t = rmat(args.rmat, args.edge_factor, seed=args.seed, dtype=args.dtype, index_dtype=args.index_dtype)
    st.save(args.path, t)
    print(f"wrote {args.path}: {t.shape[0]} x {t.shape[1]}, nnz {t.nnz}, {t.dtype}, {t.index_dtype} indices "
          f"({time.perf_counter() - t0:.2f} s)")
    return 0


def _load(args, comm):
    from ._load import load

    t0 = time.perf_counter()
    A = load(args.path, comm=comm, exchange=args.exchange)
    return A, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def _report(comm, args, summary: dict, lines: list[str]) -> None:
    if comm.rank != 0:
        return
    if args.json:
        print(json.dumps(summary))
    else:
        print("\n".join(lines))
    sys.stdout.flush()


def _cg(args, comm) -> int:
    from ._krylov import cg, norm

    A, t_load = _load(args, comm)
    r0, r1 = A.row_range
    sol = (1 + np.sin(np.arange(r0, r1)) / 2).astype(np.result_type(A.dtype, np.float64))
    b = A.matvec(sol, threads=args.threads)
    M = None
    if args.jacobi:
        d = A.diagonal()
        if comm.allreduce(bool(np.any(d == 0)), op=MPI.LOR):
            raise SystemExit("--jacobi: the matrix has a zero on its diagonal")
        M = lambda r: r / d  # noqa: E731
    A.reset_stats()
    stats: dict = {}
    comm.Barrier()
    x, info = cg(A, b, rtol=args.rtol, maxiter=args.maxiter, M=M, threads=args.threads, stats=stats)
    cs = A.comm_stats()  # the solve's products only
    res = norm(comm, b - A.matvec(x, threads=args.threads)) / norm(comm, b)
    err = float(comm.allreduce(float(np.max(np.abs(x - sol), initial=0.0)), op=MPI.MAX))
    exchange = cs["seconds_communication"][comm.rank]
    seconds = comm.allreduce(stats.get("seconds", 0.0), op=MPI.MAX)
    share = comm.allreduce((stats.get("seconds_reductions", 0.0) + exchange)
                           / max(stats.get("seconds", 0.0), 1e-300), op=MPI.MAX)
    its = stats.get("iterations", 0)
    summary = {"command": "cg", "path": args.path, "ranks": comm.size, "threads": args.threads, "exchange": A.exchange,
               "shape": list(A.shape), "nnz": A.nnz, "info": info, "iterations": its, "relative_residual": res,
               "max_error": err, "seconds": seconds, "seconds_per_iteration": seconds / max(its, 1),
               "communication_share": share, "ghosts_per_rank": cs["ghosts_per_rank"], "load_seconds": t_load}
    lines = [f"cg on {args.path}: {A.shape[0]} x {A.shape[1]}, nnz {A.nnz}, {comm.size} ranks"
             + (f" x {args.threads} threads" if args.threads else "") + f", {A.exchange} exchange",
             f"  info {info} ({'converged' if info == 0 else 'not converged'}), iterations {its}, "
             f"relative residual {res:.3e}, max |x - s| {err:.3e}",
             f"  time per iteration {seconds / max(its, 1) * 1e3:.3f} ms ({seconds:.3f} s in all; load "
             f"{t_load:.3f} s), communication share {share:.1%} (largest over ranks)",
             f"  ghosts per rank {cs['ghosts_per_rank']}"]
    _report(comm, args, summary, lines)
    return 0 if info == 0 else 1


def _spmv(args, comm) -> int:
    A, t_load = _load(args, comm)
    r0, r1 = A.row_range
    c0, c1 = A.col_range
    N = args.columns
    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal(c1 - c0) if N == 1 else rng.standard_normal((c1 - c0, N))
    x = x.astype(np.result_type(A.dtype, np.float64))
    for _ in range(3):
        A.matvec(x, threads=args.threads, check=False)
    A.reset_stats()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        A.matvec(x, threads=args.threads, check=False)
    comm.Barrier()
    elapsed = time.perf_counter() - t0
    cs = A.comm_stats()
    per = comm.allreduce(elapsed, op=MPI.MAX) / max(args.repeat, 1)
    gflops = 2.0 * A.nnz * N / per / 1e9
    sent = int(sum(cs["bytes_sent_per_product"]))
    ghosts = int(sum(cs["ghosts_per_rank"]))
    item = x.dtype.itemsize
    share = max(c / s if s else 0.0 for c, s in zip(cs["seconds_communication"], cs["seconds"]))
    summary = {"command": "spmv", "path": args.path, "ranks": comm.size, "threads": args.threads, "columns": N,
               "exchange": A.exchange,
               "shape": list(A.shape), "nnz": A.nnz, "repeat": args.repeat, "seconds_per_product": per,
               "gflops": gflops, "bytes_per_product": sent, "ghosts": ghosts,
               "bytes_per_ghost_per_column": sent / (ghosts * N) if ghosts else None, "itemsize": item,
               "messages_per_product": int(sum(cs["messages_per_product"])), "communication_share": share,
               "ghosts_per_rank": cs["ghosts_per_rank"], "load_seconds": t_load}
    lines = [f"spmv on {args.path}: {A.shape[0]} x {A.shape[1]}, nnz {A.nnz}, N = {N}, {comm.size} ranks"
             + (f" x {args.threads} threads" if args.threads else "") + f", {A.exchange} exchange",
             f"  time per product {per * 1e3:.3f} ms, {gflops:.2f} GFLOP/s (load {t_load:.3f} s)",
             f"  bytes exchanged per product {sent} = {item} x {ghosts} ghosts x {N} columns "
             f"({'no redundant traffic' if sent == item * ghosts * N else 'MISMATCH'}), "
             f"{summary['messages_per_product']} messages",
             f"  communication share {share:.1%} (exchange time not hidden behind the diagonal block, largest "
             "over ranks)"]
    _report(comm, args, summary, lines)
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "generate":
        if MPI.COMM_WORLD.rank == 0:
            _generate(args)
        MPI.COMM_WORLD.Barrier()
        return 0
    return _cg(args, MPI.COMM_WORLD) if args.command == "cg" else _spmv(args, MPI.COMM_WORLD)


if __name__ == "__main__":
    sys.exit(main())
