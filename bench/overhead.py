"""Fixed costs: every common op on a 10 x 10 matrix and on ~10^4 nonzeros, ours vs SciPy.

``python -m bench overhead``; or ``python bench/overhead.py`` with ``PYTHONPATH`` choosing the
tree to time (two trees compared in one sitting). At these sizes the work is tiny and the time
is what each library pays per call: argument checks, dispatch, allocation, thread start. The
ops are those of :func:`sparsetensor._cli._userbench.structure_cases` (check, csr->csc, spmv,
spmm32, spgemm, add) plus ``mul`` (``A * A.T``, SciPy ``A.multiply(B)``), ``sum``, ``sum(dim=1)``,
``sum(dim=0)``, ``abs``, ``to_dense`` and csr -> coo; matrices
are a 10 x 10 random matrix (30 nnz) and the 5-point stencil of a 45 x 45 grid (9,945 nnz),
float64 with int32 indices. Prints the median microseconds per call (medians of ``repeat``
batches of ``number`` calls) and SciPy's time over ours (above 1: ours is cheaper). The target
(issue #15): at 10^4 nnz within 1.5x of SciPy's overhead, i.e. a ratio of at least 0.67.

``--spmm-ab OLD.so NEW.so`` times the product kernel's def wrapper alone (``_spmm.spmm`` on
the same matrices, SpMV and 32 columns, checked and not): two builds of the extension module
loaded side by side in one process and called alternately, so that both see the same load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import timeit

import numpy as np


def _matrices():
    import sparsetensor as st

    rng = np.random.default_rng(0)
    d = np.where(rng.random((10, 10)) < 0.3, rng.random((10, 10)), 0.0)
    yield "10x10", st.from_dense(d, layout="csr").to(index_dtype=np.int32)
    yield "5pt 45^2", st.stencil((45, 45), 5, index_dtype=np.int32)


def cases(t, threads):
    """{op: {"ours": fn, "scipy": fn}} on the csr tensor ``t``."""
    import sparsetensor as st
    from sparsetensor._cli._userbench import installed_peers, structure_cases

    peers = {k: v for k, v in installed_peers(threads).items() if k == "scipy"}
    out = structure_cases(t, peers, threads)
    tt = t.to_sparse_csc().mT  # A^T stored as csr, as structure_cases' add
    extra = {"mul": (lambda: st.mul(t, tt, threads=threads), "mul"),
             "sum": (lambda: t.sum(), "sum"), "sum(dim=1)": (lambda: st.sum(t, dim=1), "sum1"),
             "sum(dim=0)": (lambda: st.sum(t, dim=0), "sum0"),
             "abs": (lambda: t.abs(), "abs"), "to_dense": (lambda: t.to_dense(), "toarray"),
             "csr->coo": (lambda: t.to_sparse_coo(), "tocoo")}
    A = t.to_scipy() if "scipy" in peers else None
    B = None if A is None else A.T.tocsr()
    scipy_fns = {} if A is None else {"mul": lambda: A.multiply(B), "sum": A.sum, "sum1": lambda: A.sum(axis=1),
                                      "sum0": lambda: A.sum(axis=0), "abs": lambda: abs(A),
                                      "toarray": A.toarray, "tocoo": A.tocoo}
    for op, (ours, key) in extra.items():
        out[op] = {"ours": ours} | ({"scipy": scipy_fns[key]} if key in scipy_fns else {})
    return out


def _time(fn, repeat, number):
    for _ in range(number):
        fn()
    batches = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        batches.append((time.perf_counter() - t0) / number)
    return statistics.median(batches)


def run(repeat: int = 30, number: int = 20, threads=None) -> list:
    import sparsetensor as st

    threads = st.num_threads(threads)
    print(f"load average before: {os.getloadavg()}; threads: {threads}")
    records = []
    print(f"{'matrix':9s} {'op':11s} {'ours us':>9s} {'scipy us':>9s} {'scipy/ours':>10s}")
    for name, t in _matrices():
        for op, fns in cases(t, threads).items():
            us = {lib: _time(fn, repeat, number) * 1e6 for lib, fn in fns.items()}
            r = us["scipy"] / us["ours"] if "scipy" in us else None
            records.append({"matrix": name, "nnz": int(t.nnz), "op": op, "us": us, "scipy_over_ours": r})
            print(f"{name:9s} {op:11s} {us['ours']:9.2f} {us.get('scipy', float('nan')):9.2f} "
                  f"{r if r is not None else float('nan'):10.2f}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    return records


def _load_extension(path):
    import importlib.machinery
    import importlib.util

    name = os.path.basename(path).split(".")[0]  # the module's own name: its init function's
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path, loader=loader))
    loader.exec_module(module)
    return module


def spmm_ab(old_path: str, new_path: str, rounds: int = 15, number: int = 200) -> list:
    """Microseconds per ``spmm`` call of two builds of ``_spmm`` (see the module docstring)."""
    mods = {"old": _load_extension(old_path), "new": _load_extension(new_path)}
    z = np.zeros(1, np.int64)
    records = []
    for name, t in _matrices():
        c, p = t.crow_indices().reshape(1, -1), t.col_indices().reshape(1, -1)
        v = t.values().reshape(1, -1, 1)
        for N in (1, 32):
            x = np.random.default_rng(1).standard_normal((1, t.shape[1], N))
            want = t.to_dense() @ x[0]
            for checked in (True, False):
                fns = {}
                for tag, m in mods.items():
                    out = np.empty((1, t.shape[0], N))
                    fns[tag] = (lambda m=m, out=out, checked=checked:
                                m.spmm(c, p, v, x, out, z, z, (1, 1), True, 1, checked=checked))
                    assert fns[tag]() is None
                    np.testing.assert_allclose(out[0], want)
                us = {tag: [] for tag in fns}
                for _ in range(rounds):  # alternate, so that both see the same load
                    for tag, fn in fns.items():
                        us[tag].append(min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e6)
                med = {tag: statistics.median(u) for tag, u in us.items()}
                records.append({"matrix": name, "N": N, "checked": checked, "us": med})
                print(f"{name:9s} N={N:2d} checked={checked!s:5s} old {med['old']:7.2f} us  new {med['new']:7.2f} us  "
                      f"old/new {med['old'] / med['new']:5.2f}", flush=True)
    return records


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--spmm-ab", nargs=2, metavar=("OLD_SO", "NEW_SO"), default=None)
    a = p.parse_args()
    if a.spmm_ab:
        spmm_ab(*a.spmm_ab)
    else:
        run(a.repeat, a.number, a.threads)
