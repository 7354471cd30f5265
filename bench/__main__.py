"""python -m bench NAME [--quick] [--threads N]: run a benchmark (see bench/README.md).

``python -m bench builds LABEL=PYTHON ...`` runs them for several builds (bench/builds.py);
``python -m bench inprocess --base DIR`` compares two builds in one process (bench/inprocess.py).
"""

from __future__ import annotations

import argparse
import os
import sys

# `python -m bench` puts the repository root on sys.path, where the unbuilt source
# tree of sparsetensor would shadow the installed package: benchmark the installed one.
_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _root]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["builds"]:  # python -m bench builds LABEL=PYTHON ...: see bench/builds.py
        from . import builds

        return builds.main(argv[1:])
    if argv[:1] == ["inprocess"]:  # python -m bench inprocess --base ...: see bench/inprocess.py
        from . import inprocess

        return inprocess.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("name", choices=["validate", "coalesce", "convert", "spmm", "elementwise", "blocks", "cuda", "structures", "overhead", "solvers", "grad", "optim", "mpi", "dask", "petsc"], help="which benchmark")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--threads", type=int, default=None, help="threads for ours and torch (default: all)")
    parser.add_argument("--sizes", default=None,
                        help="structures: which of the three sizes, e.g. 0,1 (default: all; --quick: 0)")
    parser.add_argument("--rest", type=float, default=0.0,
                        help="structures: after each case sleep this many times as long as it ran, so that the "
                             "bench's own threads do not drive the load average up (1: about half the time)")
    parser.add_argument("--cpu-level", default=None, choices=["avx512", "avx2", "baseline"],
                        help="run our kernels at this x86-64 level (SPARSETENSOR_CPU_LEVEL) and torch/MKL at "
                             "the same instructions: what a CPU without AVX-512 (avx2) would see")
    args = parser.parse_args(argv)
    if args.cpu_level:  # before any benchmark module imports sparsetensor or torch
        if "torch" in sys.modules or "sparsetensor" in sys.modules:
            raise SystemExit("--cpu-level must be set before torch or sparsetensor is imported")
        from ._levels import level_env

        os.environ.update(level_env(args.cpu_level))
    if args.name == "validate":
        from . import validate

        kw = dict(sizes=(200_000,), nrows=100_000, repeat=3) if args.quick else {}
        validate.run(threads=args.threads, **kw)
    elif args.name == "coalesce":
        from . import coalesce

        coalesce.run(threads=args.threads, **(dict(nnz=200_000, repeat=3) if args.quick else {}))
    elif args.name in ("spmm", "elementwise", "blocks"):
        import importlib

        importlib.import_module(f"bench.{args.name}").run(threads=args.threads, **(
            dict(repeat=3) if args.quick and args.name == "blocks" else {}))
    elif args.name == "structures":
        from . import structures

        sizes = tuple(int(k) for k in args.sizes.split(",")) if args.sizes else None
        structures.run(threads=args.threads, quick=args.quick, sizes=sizes, rest=args.rest)
    elif args.name == "overhead":
        from . import overhead

        overhead.run(threads=args.threads, **(dict(repeat=10, number=10) if args.quick else {}))
    elif args.name == "solvers":
        from . import solvers

        solvers.run(threads=args.threads, **(dict(grids=(100, 300), repeat=3) if args.quick else {}))
    elif args.name == "grad":
        from . import grad

        kw = dict(n=4096, nnz=40_000, spgemm_n=512, bsr_n=512, repeat=3, quick=True) if args.quick else {}
        grad.run(threads=args.threads, **kw)
    elif args.name == "dask":
        from . import dask as dask_bench

        kw = dict(nrows=40_000, ncols=40_000, nnz=400_000, repeat=2) if args.quick else {}
        dask_bench.run(threads=args.threads, **kw)
    elif args.name == "cuda":
        from . import cuda

        cuda.run(quick=args.quick)
    elif args.name == "optim":
        from . import optim

        optim.run(threads=args.threads or 2, **(dict(rows=100_000, batch=1 << 13, steps=3, repeat=2) if args.quick else {}))
    elif args.name == "mpi":
        from . import mpi

        mpi.run(quick=args.quick)
    elif args.name == "petsc":
        from . import petsc

        petsc.run(quick=args.quick)
    elif args.name == "convert":
        from . import convert

        convert.run(threads=args.threads, **(dict(nnz=200_000, n=10_000, dense_n=1024, repeat=3) if args.quick else {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
