"""``sparsetensor`` with no arguments: the library on the matrices users have, against the peers.

Two generated matrices of about ``size`` entries each (default 2 million): the 3-D 27-point
stencil (HPCG's matrix; FEM and finite-difference codes look like it) and an R-MAT power-law
graph (Graph500 parameters; social and web graphs look like it). On each: the full invariant
check, CSR -> CSC, SpMV, SpMM with 32 columns, SpGEMM ``A @ A`` and ``A + A^T``, timed against
SciPy and, where installed, PyTorch and SuiteSparse:GraphBLAS with the same number of threads
(:func:`sparsetensor._cli._userbench.structure_cases`). The square of a power-law graph is dense in
its hub rows, so its SpGEMM runs on a smaller graph of the same kind (at most 2^13 vertices).
A progress line on stderr shows what runs, when stderr is a terminal.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

__all__ = ["demo"]

OPS = ("check", "csr->csc", "spmv", "spmm32", "spgemm", "add")
RMAT_SPGEMM_MAX_SCALE = 13
EDGE_FACTOR = 16


def _matrices(size: int, seed: int):
    """(label, csr tensor, ops) of the demo: the 27-point stencil and R-MAT with about ``size``
    entries, and the R-MAT graph of SpGEMM."""
    import sparsetensor as st

    g = max(2, round((size / 27) ** (1 / 3)))
    yield f"27-point stencil {g}^3", st.stencil((g, g, g), 27, index_dtype=np.int32), OPS
    scale = max(2, round(math.log2(max(size, 1) / (0.85 * EDGE_FACTOR))))  # ~15% of R-MAT edges repeat
    rmat = st.rmat(scale, EDGE_FACTOR, np.random.default_rng(seed), index_dtype=np.int32)
    if scale <= RMAT_SPGEMM_MAX_SCALE:
        yield f"R-MAT scale {scale}", rmat, OPS
        return
    yield f"R-MAT scale {scale}", rmat, tuple(op for op in OPS if op != "spgemm")
    small = st.rmat(RMAT_SPGEMM_MAX_SCALE, EDGE_FACTOR, np.random.default_rng(seed), index_dtype=np.int32)
    yield f"R-MAT scale {RMAT_SPGEMM_MAX_SCALE}", small, ("spgemm",)


def _tour(t, say) -> None:
    """What the library promises before it is fast: checked construction, exact conversions."""
    import sparsetensor as st

    crow, col, val = t.crow_indices(), t.col_indices(), t.values()
    t0 = time.perf_counter()
    csr = st.sparse_csr_tensor(crow, col, val, size=t.shape)
    say(f"built {csr!r} with a full invariant check in {1e3 * (time.perf_counter() - t0):.2f} ms")
    for layout in ("coo", "csc"):
        u = csr.to_sparse(layout)
        u.check_invariants()
        back = u.to_sparse_csr()
        ok = all(np.array_equal(x, y) for x, y in ((back.crow_indices(), crow), (back.col_indices(), col),
                                                   (back.values(), val)))
        say(f"csr -> {layout} -> csr: invariants hold, round trip {'exact' if ok else 'WRONG'}")
    view = csr.mT
    say(f"csr.mT is a view: {view.layout}, shares values: {np.shares_memory(view.values(), val)}")
    bad = crow.copy()
    bad[len(bad) // 2] = bad[-1] + 1
    try:
        st.sparse_csr_tensor(bad, col, val, size=t.shape)
        say("a corrupted crow_indices was NOT refused")
    except st.InvariantError as e:
        say(f"a corrupted crow_indices is refused: {str(e)[:100]}")


def demo(size: int = 2_000_000, threads: int | None = None, repeat: int = 3, seed: int = 0, out=sys.stdout,
         progress=None) -> list[dict]:
    """Run the demonstration; print its table to ``out`` and return its rows."""
    import sparsetensor as st

    from ._userbench import installed_peers, median_time, structure_cases

    def say(*a):
        print(*a, file=out, flush=True)

    nthreads = st.num_threads(threads)
    peers = installed_peers(nthreads)
    libs = [lib for lib in ("scipy", "torch", "graphblas") if lib in peers]
    matrices = list(_matrices(size, seed))
    _tour(matrices[0][1], say)
    say("")
    say(f"{nthreads} threads (torch and GraphBLAS too; SciPy is single-threaded), medians of {repeat}; "
        f"peers: {', '.join(libs) or 'none installed'}")
    say("ratio = peer time / ours: above 1, ours is faster")
    total = sum(len(ops) for _, _, ops in matrices)
    done, rows = 0, []
    head = f"  {'matrix':22s} {'nnz':>10s} {'op':>8s} {'ours ms':>9s}" + "".join(f" {lib + '/ours':>14s}" for lib in libs)
    say(head)
    for label, t, ops in matrices:
        for op, fns in structure_cases(t, peers, nthreads, ops).items():
            done += 1
            times = {}
            for lib, fn in fns.items():
                if progress:
                    progress(f"[{done}/{total}] {label}: {op}, {lib} ...")
                # two warm-up calls for every library: on an idle VM the first calls after
                # another library ran pay for waking cores and threads
                times[lib] = median_time(fn, repeat, warmup=2)
            if progress:
                progress.done()
            ratios = {lib: times[lib] / times["ours"] for lib in libs if lib in times}
            rows.append({"matrix": label, "nnz": int(t.nnz), "op": op, "seconds": times, "ratios": ratios})
            say(f"  {label:22s} {t.nnz:10,d} {op:>8s} {1e3 * times['ours']:9.3f}"
                + "".join(f" {ratios[lib]:14.2f}" if lib in ratios else f" {'-':>14s}" for lib in libs))
    compared = [r for r in rows if r["ratios"]]
    wins = sum(min(r["ratios"].values()) >= 1 for r in compared)
    say(f"ours is the fastest in {wins} of {len(compared)} cases with a peer")
    return rows
