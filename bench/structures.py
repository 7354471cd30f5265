"""Every op on the structures users have, at three sizes, against SciPy, torch and GraphBLAS.

Structures (from ``st.stencil``, ``st.diags`` and ``st.rmat``): the 2-D 5-point stencil, the
3-D 7-point and 27-point stencils (HPCG's: 26 on the diagonal, -1 off it), a banded matrix (17
diagonals), a block-structured FEM-like matrix (3 unknowns per point of a 27-point grid, BSR
with 3x3 blocks; ``st.stencil(..., dofs=3)``) and an R-MAT power-law graph (Graph500: a=.57,
b=c=.19, edge factor 16), at about 10^5, 10^6 and 10^7 nnz (element-wise: a 3x3 block counts
9) (``--quick``: the smallest only; ``--sizes 0,1``: the first two), float64 values, int32 indices.

Ops: those of :func:`sparsetensor._cli._userbench.structure_cases` (the same table that the
``sparsetensor`` demo prints): check, csr->csc (bsr->bsc), spmv, spmm32, spgemm, add; 2 threads
for everyone (ours, torch, GraphBLAS's ``nthreads``; SciPy is single-threaded). The BSR matrix
runs as BSR for ours, SciPy and torch (which has no BSR @ BSR) and element-wise for GraphBLAS.

Where a case is bound by memory traffic, ``roof ms`` is the least traffic it needs (the
members' bytes: read the operands once, write the result once; see
:func:`traffic`) over this machine's read bandwidth with the same threads, measured in the
run, and ``roof/ours`` how close ours comes to it (1.0: at the bound; above 1 where the
operands fit in cache, as at 10^5 nnz, so that the bound means something from 10^6 on).

The table gives, per case, our time and each peer's time over ours (above 1: ours is faster);
``best`` is the fastest peer's ratio. Ratios come from one process run: medians of 9 calls per library
in three rounds that take turns (SpGEMM: 5 calls after one warm-up, in one round; at 10^7 nnz 3
calls without a warm-up, see :func:`run`).
"""

from __future__ import annotations

import gc
import os
import time

import numpy as np

import sparsetensor as st
from sparsetensor._cli._userbench import installed_peers, interleaved_medians, structure_cases

from ._common import median_time, print_table, read_bandwidth_threads, write_json

# per structure, the parameter of each size: grid side (stencils), rows (band), scale (R-MAT)
SIZES = {"5pt": (141, 447, 1414), "7pt": (24, 52, 112), "27pt": (16, 33, 72), "band": (5900, 59000, 590000),
         "fem3": (8, 17, 36), "rmat": (13, 16, 19)}


def _structure(name: str, s: int):
    """(label, square matrix with int32 indices) of structure ``name`` at size parameter ``s``."""
    if name == "rmat":  # values: the edge multiplicities (st.rmat sums repeated edges)
        return f"rmat s={s}", st.rmat(s, 16, np.random.default_rng(0), index_dtype=np.int32)
    if name == "band":  # 17 diagonals, diagonally dominant
        offsets = list(range(-8, 9))
        diagonals = [np.full(s - abs(k), 16.0 if k == 0 else -1.0) for k in offsets]
        return f"band n={s}", st.diags(diagonals, offsets, shape=(s, s), index_dtype=np.int32)
    if name == "fem3":  # 3 unknowns per point of a 27-point grid: bsr with 3x3 blocks
        return f"fem3 bsr g={s}", st.stencil((s, s, s), 27, layout="bsr", dofs=3, index_dtype=np.int32)
    grid, points = ((s, s), 5) if name == "5pt" else ((s, s, s), int(name[:-2]))
    return f"{name} g={s}", st.stencil(grid, points, index_dtype=np.int32)


def _matrices(which: tuple):
    """(label, square CSR or BSR tensor with int32 indices) of every structure at the sizes
    ``which`` (indices into ``SIZES``' tuples), the smallest size of every structure first.

    Small before large: on this VM, once a process has given back gigabytes (a 10^7-nnz case's
    arrays, the peers' copies), a wake-up of a second thread takes about 0.3 ms for several
    seconds (a 2-thread check of 10^5 nnz went from 0.03 to 0.34 ms for over 7 s after 8 GB were
    freed, with both threads waiting in the OpenMP barrier). That costs nothing at 10^7 nnz but
    would swamp a 10^5-nnz case that followed one."""
    for k in which:
        for name, sizes in SIZES.items():
            yield _structure(name, sizes[k])


def _nbytes(m) -> int:
    """The bytes of a compressed tensor's three members."""
    return m.crow_indices().nbytes + m.col_indices().nbytes + m.values().nbytes


def traffic(op: str, t, out=None):
    """The least bytes ``op`` moves on the square CSR/BSR matrix ``t`` (``out``: the result of
    ``add``), or None for SpGEMM (bound by its products, not by memory traffic)."""
    n, members = t.shape[0], _nbytes(t)
    vector = t.values().itemsize * n
    return {"check": t.crow_indices().nbytes + t.col_indices().nbytes,  # the indices are read once
            "csr->csc": 2 * members, "bsr->bsc": 2 * members,  # read, write
            "spmv": members + 2 * vector,  # + x read, y written
            "spmm32": members + 2 * 32 * vector,
            "add": 2 * members + (_nbytes(out) if out is not None else 0)}.get(op)


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
                # torch 2.13 keeps about the product's size for good on every CSR @ CSR call (243 MB
                # a call on the banded 10^7-nnz matrix, not given back by malloc_trim): at 10^7 nnz
                # every library runs 3 timed calls without a warm-up (a call takes 0.2-0.5 s), so
                # that the six structures' leaks stay within this machine's 23 GB
                big = t.values().size >= 5_000_000
                times = {lib: median_time(f, 3 if big else repeat, warmup=0 if big else 1) for lib, f in fns.items()}
            else:
                times = interleaved_medians(fns, max(repeat, 9), warmup=1, rounds=3)
            ratios = {lib: times[lib] / times["ours"] for lib in libs if lib in times}
            best = min(ratios.values()) if ratios else float("nan")
            traffics.append(traffic(op, t, fns["ours"]() if op == "add" else None))
            rows.append([name, f"{t.values().size:,}", op, f"{times['ours'] * 1e3:.3g}"]
                        + [f"{ratios[lib]:.2f}" if lib in ratios else "-" for lib in libs] + [f"{best:.2f}"])
            records.append({"matrix": name, "nnz": int(t.values().size), "op": op, "seconds": times, "ratios": ratios})
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
