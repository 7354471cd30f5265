"""Per-call overhead of small ops on a 10 x 10 tensor (what a user pays when the work is tiny).

``python -m bench overhead``; or ``python bench/overhead.py [--repeat N]`` with ``PYTHONPATH``
choosing the tree to time. Prints the median microseconds per call of ``t @ x``, ``t + t``,
``t.sum()``, ``t.to_sparse("csc")``, ``st.sum(t)`` and ``t.abs()`` (each the median of
``repeat`` batches of ``number`` calls).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def cases():
    import sparsetensor as st

    rng = np.random.default_rng(0)
    d = np.where(rng.random((10, 10)) < 0.3, rng.random((10, 10)), 0.0)
    t = st.from_dense(d, layout="csr")
    x = rng.random(10)
    out = {
        "t @ x": lambda: t @ x,
        "t + t": lambda: t + t,
        "t.sum()": lambda: t.sum(),
        't.to_sparse("csc")': lambda: t.to_sparse("csc"),
        "t.abs()": lambda: t.abs(),
    }
    if hasattr(st, "sum"):
        out["st.sum(t)"] = lambda: st.sum(t)
    return out


def run(repeat: int = 200, number: int = 50) -> dict:
    res = {}
    for name, fn in cases().items():
        for _ in range(number):
            fn()
        batches = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            batches.append((time.perf_counter() - t0) / number)
        res[name] = statistics.median(batches) * 1e6
    for name, us in res.items():
        print(f"{name:22s} {us:8.2f} us")
    return res


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--number", type=int, default=50)
    a = p.parse_args()
    run(a.repeat, a.number)
