"""SciPy's iterative solvers on our tensors: ``cg(t, b)`` vs ``cg(A_scipy, b)``, in one process.

A 2-D 5-point Poisson matrix (float64, int32 indices) of about 4.5e5, 1e6 and 1e7 nnz is
solved with ``scipy.sparse.linalg.cg`` for a fixed number of iterations (``rtol=0``), once
given the SciPy ``csr_array`` and once given our csr tensor of the same arrays (SciPy wraps
it with ``aslinearoperator``; every iteration calls our ``matvec``). The table gives SciPy's
time over ours (above 1: ours is faster), the time per iteration, and the time of one bare
SpMV of each, so the per-call overhead of the solver path can be read off. Runs alternate
between SciPy and ours (medians). Set ``OPENBLAS_NUM_THREADS=1`` on a shared machine: cg's
vector operations are NumPy/BLAS calls that are the same on both sides, and a threaded BLAS
on a busy machine makes them dominate. The machine may
be shared: only ratios from one run should be compared.
"""

from __future__ import annotations

import os
import time

import numpy as np

import sparsetensor as st

from ._common import print_table, write_json


def poisson(n: int):
    """The n^2 x n^2 5-point Laplacian (:func:`sparsetensor.stencil`) as a SciPy csr_array, int32 indices."""
    return st.stencil((n, n), index_dtype=np.int32).to_scipy()


def _interleaved(fns, repeat: int) -> list:
    """Median time of each function, the runs alternating between them (a shared machine's load
    then weighs on every side alike), after one warm-up each."""
    times = [[] for _ in fns]
    for f in fns:
        f()
    for _ in range(repeat):
        for k, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def run(repeat: int = 5, threads=None, grids=(300, 450, 1415), iterations: int = 100):
    from scipy.sparse.linalg import cg

    if threads is not None:
        st.set_num_threads(threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{st.num_threads()} threads for ours; SciPy is single-threaded; load average {load:.2f}")
    rows, records = [], []
    for n in grids:
        A = poisson(n)
        t = st.from_scipy(A)
        b = np.ones(A.shape[0])
        x_ref, _ = cg(A, b, rtol=0.0, atol=0.0, maxiter=iterations)
        x_ours, _ = cg(t, b, rtol=0.0, atol=0.0, maxiter=iterations)
        err = float(np.max(np.abs(x_ours - x_ref)))
        if err > 1e-8 * max(1.0, float(np.max(np.abs(x_ref)))):
            raise AssertionError(f"cg on a {A.shape} Poisson matrix: ours differs from SciPy's by {err}")
        s_cg, o_cg = _interleaved([lambda: cg(A, b, rtol=0.0, atol=0.0, maxiter=iterations),
                                   lambda: cg(t, b, rtol=0.0, atol=0.0, maxiter=iterations)], repeat)
        s_mv, o_mv = _interleaved([lambda: A @ b, lambda: t.matvec(b)], repeat * 4)
        rec = {"rows": A.shape[0], "nnz": int(A.nnz), "iterations": iterations, "scipy_cg_s": s_cg, "ours_cg_s": o_cg,
               "scipy_spmv_s": s_mv, "ours_spmv_s": o_mv}
        records.append(rec)
        rows.append([A.shape[0], A.nnz, s_cg / o_cg, o_cg / iterations * 1e3, s_cg / iterations * 1e3,
                     o_mv * 1e3, s_mv * 1e3])
    print_table(["rows", "nnz", "scipy/ours cg", "ours ms/iter", "scipy ms/iter", "ours spmv ms", "scipy spmv ms"],
                rows)
    path = write_json("solvers", {"threads": st.num_threads(), "records": records})
    print(f"wrote {path}")
    return records
