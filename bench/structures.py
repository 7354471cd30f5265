"""Every op on the structures users have, at three sizes, against SciPy, torch and GraphBLAS.

Structures (from ``st.stencil`` and ``st.rmat``): the 2-D 5-point stencil, the 3-D 27-point
stencil (HPCG: 26 on the diagonal, -1 off it) and an R-MAT power-law graph (Graph500: a=.57,
b=c=.19, edge factor 16), at about
10^5, 10^6 and 10^7 nnz (``--quick``: the smallest only; ``--sizes 0,1``: the first two), float64 values, int32 indices.

Ops: those of :func:`sparsetensor._userbench.structure_cases` (the same table that the
``sparsetensor`` demo prints): check, csr->csc, spmv, spmm32, spgemm, add; 2 threads for
everyone (ours, torch, GraphBLAS's ``nthreads``; SciPy is single-threaded).

The table gives, per case, our time and each peer's time over ours (above 1: ours is faster);
``best`` is the fastest peer's ratio. Ratios come from one process run, medians of repeats.
"""

from __future__ import annotations

import os

import numpy as np

import sparsetensor as st
from sparsetensor._userbench import installed_peers, structure_cases

from ._common import median_time, print_table, write_json

SIZES = {"5pt": (141, 447, 1414), "27pt": (16, 33, 72), "rmat": (13, 16, 19)}


def _matrices(which: tuple):
    """(label, square CSR tensor with int32 indices) of every structure at the sizes ``which``
    (indices into ``SIZES``' tuples)."""
    for name, sizes in SIZES.items():
        for s in (sizes[k] for k in which):
            if name == "rmat":  # values: the edge multiplicities (st.rmat sums repeated edges)
                yield f"rmat s={s}", st.rmat(s, 16, np.random.default_rng(0), index_dtype=np.int32)
            else:
                grid, points = ((s, s), 5) if name == "5pt" else ((s, s, s), 27)
                yield f"{name} g={s}", st.stencil(grid, points, index_dtype=np.int32)


def run(threads: int | None = None, quick: bool = False, repeat: int = 5, ops=None, sizes=None) -> list:
    threads = threads or 2
    peers = installed_peers(threads)
    libs = [p for p in ("scipy", "torch", "graphblas") if p in peers]
    rows, records = [], []
    print(f"load average before: {os.getloadavg()}; threads: {threads}; peers: {', '.join(libs)}", flush=True)
    for name, t in _matrices(sizes if sizes is not None else (0,) if quick else (0, 1, 2)):
        for op, fns in structure_cases(t, peers, threads, ops).items():
            if op == "spgemm" and name.startswith("rmat") and t.shape[0] > (1 << 16):
                continue  # R-MAT squared at scale 19 needs tens of GB: left out
            times = {lib: median_time(f, repeat if t.nnz < 5_000_000 else max(3, repeat // 2))
                     for lib, f in fns.items()}
            ratios = {lib: times[lib] / times["ours"] for lib in libs if lib in times}
            best = min(ratios.values()) if ratios else float("nan")
            rows.append([name, f"{t.nnz:,}", op, f"{times['ours'] * 1e3:.3g}"]
                        + [f"{ratios[lib]:.2f}" if lib in ratios else "-" for lib in libs] + [f"{best:.2f}"])
            records.append({"matrix": name, "nnz": int(t.nnz), "op": op, "seconds": times, "ratios": ratios})
            print("  ".join(rows[-1]), flush=True)
    print()
    print_table(["matrix", "nnz", "op", "ours ms"] + [f"{lib}/ours" for lib in libs] + ["best"], rows)
    print(f"load average after: {os.getloadavg()}")
    write_json("structures", {"threads": threads, "results": records})
    return records
