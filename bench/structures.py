"""Every op on the structures users have, at three sizes, against SciPy, torch and GraphBLAS.

Structures (from ``st.stencil`` and ``st.rmat``): the 2-D 5-point stencil, the 3-D 27-point
stencil (HPCG: 26 on the diagonal, -1 off it) and an R-MAT power-law graph (Graph500: a=.57,
b=c=.19, edge factor 16), at about
10^5, 10^6 and 10^7 nnz (``--quick``: the smallest only; ``--sizes 0,1``: the first two), float64 values, int32 indices.

Ops: those of :func:`sparsetensor._userbench.structure_cases` (the same table that the
``sparsetensor`` demo prints): check, csr->csc, spmv, spmm32, spgemm, add; 2 threads for
everyone (ours, torch, GraphBLAS's ``nthreads``; SciPy is single-threaded).

Where a case is bound by memory traffic, ``roof ms`` is the least traffic it needs (int32
indices, float64 values: read the operands once, write the result once; see
:func:`traffic`) over this machine's read bandwidth with the same threads, measured in the
run, and ``roof/ours`` how close ours comes to it (1.0: at the bound; above 1 where the
operands fit in cache, as at 10^5 nnz, so that the bound means something from 10^6 on).

The table gives, per case, our time and each peer's time over ours (above 1: ours is faster);
``best`` is the fastest peer's ratio. Ratios come from one process run: medians of 9 calls per library
in three rounds that take turns (SpGEMM: 5 calls after one warm-up, in one round).
"""

from __future__ import annotations

import gc
import os
import time

import numpy as np

import sparsetensor as st
from sparsetensor._userbench import installed_peers, interleaved_medians, structure_cases

from ._common import median_time, print_table, read_bandwidth_threads, write_json

SIZES = {"5pt": (141, 447, 1414), "27pt": (16, 33, 72), "rmat": (13, 16, 19)}


def _matrices(which: tuple):
    """(label, square CSR tensor with int32 indices) of every structure at the sizes ``which``
    (indices into ``SIZES``' tuples), the smallest size of every structure first.

    Small before large: on this VM, once a process has given back gigabytes (a 10^7-nnz case's
    arrays, the peers' copies), a wake-up of a second thread takes about 0.3 ms for several
    seconds (a 2-thread check of 10^5 nnz went from 0.03 to 0.34 ms for over 7 s after 8 GB were
    freed, with both threads waiting in the OpenMP barrier). That costs nothing at 10^7 nnz but
    would swamp a 10^5-nnz case that followed one."""
    for k in which:
        for name, sizes in SIZES.items():
            s = sizes[k]
            if name == "rmat":  # values: the edge multiplicities (st.rmat sums repeated edges)
                yield f"rmat s={s}", st.rmat(s, 16, np.random.default_rng(0), index_dtype=np.int32)
            else:
                grid, points = ((s, s), 5) if name == "5pt" else ((s, s, s), 27)
                yield f"{name} g={s}", st.stencil(grid, points, index_dtype=np.int32)


def traffic(op: str, n: int, nnz: int, nnz_out: int = 0):
    """The least bytes ``op`` moves on an n x n CSR matrix with ``nnz`` entries (int32 indices,
    float64 values), or None for SpGEMM (bound by its products, not by memory traffic)."""
    members = 4 * (n + 1) + 12 * nnz  # crow, col, values
    return {"check": 4 * (n + 1) + 4 * nnz,  # the indices are read once
            "csr->csc": 2 * members,  # read, write
            "spmv": members + 16 * n,  # + x read, y written
            "spmm32": members + 2 * 8 * 32 * n,
            "add": 2 * members + 4 * (n + 1) + 12 * nnz_out}.get(op)


def run(threads: int | None = None, quick: bool = False, repeat: int = 5, ops=None, sizes=None,
        rest: float = 0.0) -> list:
    """The table of every op x structure x size. ``rest``: after each case sleep ``rest`` times as
    long as it took (2 busy threads drive the 1-minute load average towards 2 in a few minutes;
    resting as long as running keeps it near 1). The highest 1-minute load seen after a case is
    printed at the end."""
    threads = threads or 2
    peers = installed_peers(threads)
    libs = [p for p in ("scipy", "torch", "graphblas") if p in peers]
    rows, records = [], []
    print(f"load average before: {os.getloadavg()}; threads: {threads}; peers: {', '.join(libs)}", flush=True)
    peak = os.getloadavg()[0]
    traffics = []
    for name, t in _matrices(sizes if sizes is not None else (0,) if quick else (0, 1, 2)):
        cases = structure_cases(t, peers, threads, ops)
        for op, fns in cases.items():
            start = time.perf_counter()
            if op == "spgemm" and name.startswith("rmat") and t.shape[0] >= (1 << 16):
                continue  # R-MAT squared from scale 16 on: a peer's product outgrew this machine's 23 GB
            # on this VM a call that faults in 100+ MB of fresh memory stalls now and then for
            # 50-300 ms (whoever runs it), in streaks: the host takes back free memory (virtio-balloon
            # free page reporting), and the first touch of such a page is slow (perf: clear_page_erms).
            # The libraries take turns in three rounds of a warm-up call and 3 timed calls each, so
            # that a streak is shared. SpGEMM keeps 1 +
            # repeat calls in one round: torch 2.13's CSR @ CSR does not give back about the
            # product's size per call, and at 10^7 nnz ten calls outgrow this machine's memory
            if op == "spgemm":
                times = {lib: median_time(f, repeat, warmup=1) for lib, f in fns.items()}
            else:
                times = interleaved_medians(fns, max(repeat, 9), warmup=1, rounds=3)
            ratios = {lib: times[lib] / times["ours"] for lib in libs if lib in times}
            best = min(ratios.values()) if ratios else float("nan")
            traffics.append(traffic(op, t.shape[0], t.nnz, fns["ours"]().nnz if op == "add" else 0))
            rows.append([name, f"{t.nnz:,}", op, f"{times['ours'] * 1e3:.3g}"]
                        + [f"{ratios[lib]:.2f}" if lib in ratios else "-" for lib in libs] + [f"{best:.2f}"])
            records.append({"matrix": name, "nnz": int(t.nnz), "op": op, "seconds": times, "ratios": ratios})
            print("  ".join(rows[-1]), flush=True)
            if rest > 0:
                time.sleep(rest * (time.perf_counter() - start))
            peak = max(peak, os.getloadavg()[0])
        # give back this matrix and the peers' copies before the next one is built: two 10^7-nnz
        # structures and their copies at once (with torch's SpGEMM holding memory) outgrew 23 GB
        t = cases = fns = None
        gc.collect()
    # the bandwidth last: its 512 MB, once given back, would slow the 10^5-nnz cases that follow
    # (see _matrices)
    bw = read_bandwidth_threads(threads)
    print(f"read bandwidth with {threads} threads: {bw / 1e9:.1f} GB/s", flush=True)
    for row, rec, nbytes in zip(rows, records, traffics):
        roof = nbytes / bw if nbytes else None
        rec["roofline_s"] = roof
        row += [f"{roof * 1e3:.3g}", f"{roof / rec['seconds']['ours']:.2f}"] if roof else ["-", "-"]
    print()
    print_table(["matrix", "nnz", "op", "ours ms"] + [f"{lib}/ours" for lib in libs] + ["best", "roof ms", "roof/ours"],
                rows)
    print(f"load average after: {os.getloadavg()}; highest 1-minute load after a case: {peak:.2f}")
    write_json("structures", {"threads": threads, "read_bandwidth": bw, "rest": rest, "peak_load": peak,
                              "results": records})
    return records
