"""``sparsetensor bench [FILE]``: time common operations on one matrix against SciPy and PyTorch.

The repository's ``bench/`` holds the full benchmarks; this is the user-facing
version for "how fast is it on *my* matrix".
"""

from __future__ import annotations

import statistics
import time

import numpy as np

__all__ = ["run_user_bench"]


def median_time(fn, repeat: int = 7, warmup: int = 1) -> float:
    """The median wall time of ``repeat`` calls of ``fn`` after ``warmup`` calls, in seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peers(threads=None, torch_threads=None):
    """``(torch or None, scipy.sparse or None, nthreads)``: the peers that are installed, and our
    thread count; torch is set to ``torch_threads`` threads (default: ours)."""
    import sparsetensor as st

    try:
        import torch
    except ImportError:
        torch = None
    try:
        import scipy.sparse as sp
    except ImportError:
        sp = None
    nthreads = st.num_threads(threads)
    if torch is not None:
        torch.set_num_threads(nthreads if torch_threads is None else torch_threads)
    return torch, sp, nthreads


def run_user_bench(t, name: str, repeat: int = 5, progress=None, out=None) -> list[dict]:
    """Print a table of ours vs SciPy vs PyTorch for check, conversions, to_dense, SpMV; return the rows."""
    say = (lambda *a: print(*a, file=out)) if out is not None else print
    if t.batch_dim or t.dense_dim or (t.layout.name == "coo" and t.sparse_dim != 2):
        raise ValueError(f"bench needs a 2-d matrix without batch or dense dims, got shape {t.shape}")
    torch, sp, nthreads = peers()
    csr = t.to_sparse_csr() if t.layout.name != "csr" else t
    coo = csr.to_sparse_coo()
    crow, col, val = csr.crow_indices(), csr.col_indices(), csr.values()
    shape = csr.shape
    m = sp.csr_array((val, col, crow), shape=shape) if sp is not None and val.dtype != np.float16 else None
    tc = None
    if torch is not None:
        tc = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val), shape,
                                     check_invariants=False)
    x = np.ones(shape[1], dtype=val.dtype)
    cases = [("full invariant check", lambda: csr.check_invariants(),
              (lambda: m.check_format(full_check=True)) if m is not None else None,
              (lambda: torch._validate_sparse_csr_tensor_args(tc.crow_indices(), tc.col_indices(), tc.values(),
                                                              shape)) if tc is not None else None),
             ("csr -> csc", lambda: csr.to_sparse_csc(), m.tocsc if m is not None else None,
              tc.to_sparse_csc if tc is not None else None),
             ("csr -> coo", lambda: csr.to_sparse_coo(), m.tocoo if m is not None else None,
              tc.to_sparse_coo if tc is not None else None),
             ("coo -> csr", lambda: coo.to_sparse_csr(), None, None)]
    if float(shape[0]) * shape[1] <= 1 << 26:
        cases.append(("to_dense", lambda: csr.to_dense(), m.toarray if m is not None else None,
                      tc.to_dense if tc is not None else None))
    if hasattr(type(csr), "__matmul__"):  # sparse @ dense, once the products exist
        cases.append(("spmv (csr @ vector)", lambda: csr @ x, (lambda: m @ x) if m is not None else None,
                      (lambda: tc @ torch.from_numpy(x)) if tc is not None else None))
    say(f"{name}: {shape[0]} x {shape[1]}, nnz={csr.nnz}, {val.dtype}, {nthreads} threads, "
        f"medians of {repeat}")
    say(f"  {'operation':22s} {'ours ms':>10s} {'scipy ms':>10s} {'torch ms':>10s} {'vs scipy':>9s} {'vs torch':>9s}")
    rows = []
    for label, ours, scipy_fn, torch_fn in cases:
        if progress:
            progress(f"timing {label} ...")
        o = median_time(ours, repeat)
        s = median_time(scipy_fn, repeat) if scipy_fn else None
        p = median_time(torch_fn, repeat) if torch_fn else None
        if progress:
            progress.done()
        rows.append({"operation": label, "ours_s": o, "scipy_s": s, "torch_s": p})

        def fmt(v):
            return f"{1e3 * v:10.3f}" if v is not None else f"{'-':>10s}"

        def ratio(v):
            return f"{v / o:8.2f}x" if v is not None else f"{'-':>9s}"

        say(f"  {label:22s} {fmt(o)} {fmt(s)} {fmt(p)} {ratio(s)} {ratio(p)}")
    say("  (ratios > 1: ours is faster)")
    return rows
