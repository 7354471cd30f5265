"""Every op on the structures users have, at three sizes, against SciPy, torch and GraphBLAS.

Structures (from ``st.stencil`` and ``st.rmat``): the 2-D 5-point stencil, the 3-D 27-point
stencil (HPCG: 26 on the diagonal, -1 off it) and an R-MAT power-law graph (Graph500: a=.57,
b=c=.19, edge factor 16), at about
10^5, 10^6 and 10^7 nnz (``--quick``: the smallest only), float64 values, int32 indices.

Ops (2 threads for everyone: ours, torch, GraphBLAS's ``nthreads``; SciPy is single-threaded):

- ``check``: the full invariant check of CSR members (torch ``check_invariants=True``,
  SciPy ``check_format(full_check=True)``);
- ``csr->csc``: the transpose into the other compressed layout (GraphBLAS ``A.T.new()``);
- ``spmv``, ``spmm32``: ``A @ x`` with a vector and with 32 dense columns;
- ``spgemm``: ``A @ A`` with sorted output (SciPy's product + ``sort_indices()``; GraphBLAS's
  natural output, torch's ``A @ A`` of CSR);
- ``add``: ``A + B`` with B the transpose of A stored as CSR (GraphBLAS ``ewise_add``).

The table gives, per case, our time and each peer's time over ours (above 1: ours is faster);
``best`` is the fastest peer's ratio. Ratios come from one process run, medians of repeats.
"""

from __future__ import annotations

import os

import numpy as np

import sparsetensor as st

from ._common import median_time, print_table, write_json

SIZES = {"5pt": (141, 447, 1414), "27pt": (16, 33, 72), "rmat": (13, 16, 19)}


def _members(t):
    """(crow, col, values, n) of a square CSR tensor, int32 indices."""
    t = t.to(index_dtype=np.int32)
    return t.crow_indices(), t.col_indices(), t.values(), t.shape[0]


def _matrices(quick: bool):
    k = 1 if quick else 3
    for name, sizes in SIZES.items():
        for s in sizes[:k]:
            if name == "rmat":  # values: the edge multiplicities (st.rmat sums repeated edges)
                yield f"rmat s={s}", _members(st.rmat(s, 16, np.random.default_rng(0)))
            else:
                grid, points = ((s, s), 5) if name == "5pt" else ((s, s, s), 27)
                yield f"{name} g={s}", _members(st.stencil(grid, points))


def _peers():
    out = {}
    try:
        import scipy.sparse as sp

        out["scipy"] = sp
    except ImportError:
        pass
    try:
        import torch

        out["torch"] = torch
    except ImportError:
        pass
    try:
        import graphblas as gb

        out["graphblas"] = gb
    except ImportError:
        pass
    return out


def _cases(crow, col, val, n, peers, threads):
    """{op: {library: zero-argument callable}} on one matrix."""
    t = st.sparse_csr_tensor(crow, col, val, (n, n))
    tt = t.to_sparse_csc().mT  # A^T stored as CSR
    x = np.random.default_rng(1).random(n)
    X = np.random.default_rng(2).random((n, 32))
    ours = {
        "check": lambda: st.sparse_csr_tensor(crow, col, val, (n, n), check_invariants=True),
        "csr->csc": lambda: t.to_sparse_csc(threads=threads),
        "spmv": lambda: st.matmul(t, x, threads=threads),
        "spmm32": lambda: st.matmul(t, X, threads=threads),
        "spgemm": lambda: st.matmul(t, t, threads=threads),
        "add": lambda: st.add(t, tt, threads=threads),
    }
    cases = {op: {"ours": f} for op, f in ours.items()}
    if "scipy" in peers:
        sp = peers["scipy"]
        A = sp.csr_array((val, col, crow), shape=(n, n))
        B = sp.csr_array((tt.values(), tt.col_indices(), tt.crow_indices()), shape=(n, n))

        def scipy_check():
            m = sp.csr_array((val, col, crow), shape=(n, n))
            m.check_format(full_check=True)

        def scipy_spgemm():
            c = A @ A
            c.has_sorted_indices = False  # drop the cached flag so the sort really runs
            c.sort_indices()

        cases["check"]["scipy"] = scipy_check
        cases["csr->csc"]["scipy"] = A.tocsc
        cases["spmv"]["scipy"] = lambda: A @ x
        cases["spmm32"]["scipy"] = lambda: A @ X
        cases["spgemm"]["scipy"] = scipy_spgemm
        cases["add"]["scipy"] = lambda: A + B
    if "torch" in peers:
        torch = peers["torch"]
        torch.set_num_threads(threads)
        c_, p_, v_ = torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val)
        T = torch.sparse_csr_tensor(c_, p_, v_, (n, n))
        TB = torch.sparse_csr_tensor(torch.from_numpy(tt.crow_indices()), torch.from_numpy(tt.col_indices()),
                                     torch.from_numpy(tt.values()), (n, n))
        tx, tX = torch.from_numpy(x), torch.from_numpy(X)
        cases["check"]["torch"] = lambda: torch.sparse_csr_tensor(c_, p_, v_, (n, n), check_invariants=True)
        cases["csr->csc"]["torch"] = T.to_sparse_csc
        cases["spmv"]["torch"] = lambda: T @ tx
        cases["spmm32"]["torch"] = lambda: T @ tX
        cases["spgemm"]["torch"] = lambda: T @ T
        cases["add"]["torch"] = lambda: T + TB
    if "graphblas" in peers:
        gb = peers["graphblas"]
        gb.ss.config["nthreads"] = threads
        G = gb.Matrix.ss.import_csr(nrows=n, ncols=n, indptr=crow.astype(np.int64), col_indices=col.astype(np.int64),
                                     values=val, take_ownership=False)
        GB = gb.Matrix.ss.import_csr(nrows=n, ncols=n, indptr=tt.crow_indices().astype(np.int64),
                                      col_indices=tt.col_indices().astype(np.int64), values=tt.values(),
                                      take_ownership=False)
        gx = gb.Vector.from_dense(x)
        gX = gb.Matrix.from_dense(X)
        cases["csr->csc"]["graphblas"] = lambda: G.T.new()
        cases["spmv"]["graphblas"] = lambda: G.mxv(gx).new()
        cases["spmm32"]["graphblas"] = lambda: G.mxm(gX).new()
        cases["spgemm"]["graphblas"] = lambda: G.mxm(G).new()
        cases["add"]["graphblas"] = lambda: G.ewise_add(GB).new()
    return cases


def run(threads: int | None = None, quick: bool = False, repeat: int = 5, ops=None) -> list:
    threads = threads or 2
    peers = _peers()
    libs = [p for p in ("scipy", "torch", "graphblas") if p in peers]
    rows, records = [], []
    print(f"load average before: {os.getloadavg()}; threads: {threads}; peers: {', '.join(libs)}", flush=True)
    for name, (crow, col, val, n) in _matrices(quick):
        cases = _cases(crow, col, val, n, peers, threads)
        for op, fns in cases.items():
            if ops and op not in ops:
                continue
            if op == "spgemm" and name.startswith("rmat") and n > (1 << 16):
                continue  # R-MAT squared at scale 19 needs tens of GB: left out
            times = {lib: median_time(f, repeat if len(crow) < 5_000_000 else max(3, repeat // 2))
                     for lib, f in fns.items()}
            ratios = {lib: times[lib] / times["ours"] for lib in libs if lib in times}
            best = min(ratios.values()) if ratios else float("nan")
            rows.append([name, f"{len(col):,}", op, f"{times['ours'] * 1e3:.3g}"]
                        + [f"{ratios[lib]:.2f}" if lib in ratios else "-" for lib in libs] + [f"{best:.2f}"])
            records.append({"matrix": name, "nnz": int(len(col)), "op": op, "seconds": times, "ratios": ratios})
            print("  ".join(rows[-1]), flush=True)
    print()
    print_table(["matrix", "nnz", "op", "ours ms"] + [f"{lib}/ours" for lib in libs] + ["best"], rows)
    print(f"load average after: {os.getloadavg()}")
    write_json("structures", {"threads": threads, "results": records})
    return records
