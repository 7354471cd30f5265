"""python -m bench NAME [--quick] [--threads N]: run a benchmark (see bench/README.md)."""

from __future__ import annotations

import argparse
import os
import sys

# `python -m bench` puts the repository root on sys.path, where the unbuilt source
# tree of sparsetensor would shadow the installed package: benchmark the installed one.
_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _root]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("name", choices=["validate", "coalesce", "convert", "spmm", "elementwise", "cuda", "solvers", "dask"], help="which benchmark")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--threads", type=int, default=None, help="threads for ours and torch (default: all)")
    args = parser.parse_args(argv)
    if args.name == "validate":
        from . import validate

        kw = dict(sizes=(200_000,), nrows=100_000, repeat=3) if args.quick else {}
        validate.run(threads=args.threads, **kw)
    elif args.name == "coalesce":
        from . import coalesce

        coalesce.run(threads=args.threads, **(dict(nnz=200_000, repeat=3) if args.quick else {}))
    elif args.name in ("spmm", "elementwise"):
        import importlib

        importlib.import_module(f"bench.{args.name}").run(threads=args.threads)
    elif args.name == "solvers":
        from . import solvers

        solvers.run(threads=args.threads, **(dict(grids=(100, 300), repeat=3) if args.quick else {}))
    elif args.name == "dask":
        from . import dask as dask_bench

        kw = dict(nrows=40_000, ncols=40_000, nnz=400_000, repeat=2) if args.quick else {}
        dask_bench.run(threads=args.threads, **kw)
    elif args.name == "cuda":
        from . import cuda

        cuda.run(quick=args.quick)
    elif args.name == "convert":
        from . import convert

        convert.run(threads=args.threads, **(dict(nnz=200_000, n=10_000, dense_n=1024, repeat=3) if args.quick else {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
