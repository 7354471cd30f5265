"""``sparsetensor bench [FILE]``: time common operations on one matrix against SciPy and PyTorch.

The repository's ``bench/`` holds the full benchmarks; this is the user-facing
version for "how fast is it on *my* matrix".
"""

from __future__ import annotations

import statistics
import time
import warnings

import numpy as np

__all__ = ["run_user_bench", "installed_peers", "structure_cases", "interleaved_medians"]


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


def interleaved_medians(fns: dict, repeat: int = 9, warmup: int = 1, rounds: int = 3) -> dict:
    """``{name: median seconds}`` of the zero-argument callables ``fns``, timed in ``rounds``
    rounds: in each, every callable runs ``warmup`` untimed calls and then its share of the
    ``repeat`` timed calls, one callable after another, each round starting one callable further
    on. Each callable keeps its cores and caches warm for its own calls, and a slow spell of the
    machine falls on several callables' calls instead of one's whole batch: on a VM, memory that
    another callable freed a while ago can be slow to fault in again (50-300 ms for 100+ MB), so
    no callable always comes first after the others."""
    per_round = -(-repeat // rounds)
    times: dict = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = fns[name]
            for _ in range(warmup):
                fn()
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


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


def installed_peers(threads: int) -> dict:
    """``{"scipy": scipy.sparse, "torch": torch, "graphblas": graphblas}`` for those installed,
    torch and GraphBLAS set to ``threads`` threads (SciPy is single-threaded)."""
    out = {}
    try:
        import scipy.sparse as sp

        out["scipy"] = sp
    except ImportError:
        pass
    try:
        import torch

        torch.set_num_threads(threads)
        out["torch"] = torch
    except ImportError:
        pass
    try:
        import graphblas as gb

        gb.ss.config["nthreads"] = threads
        out["graphblas"] = gb
    except ImportError:
        pass
    return out


def structure_cases(t, peers: dict, threads: int, ops=None) -> dict:
    """``{op: {library: zero-argument callable}}`` for the ops users run on a square CSR or BSR
    matrix ``t``:

    - ``check``: the full invariant check of the members (torch ``check_invariants=True``,
      SciPy ``check_format(full_check=True)`` and ``has_canonical_format``);
    - ``csr->csc`` (``bsr->bsc``): the transpose into the other compressed layout (SciPy's
      ``tocsc()``, of bsr its ``transpose()``, a bsr of the transpose with the same blocks;
      GraphBLAS ``A.T.new()``);
    - ``spmv``, ``spmm32``: ``A @ x`` with a vector and with 32 dense columns;
    - ``spgemm``: ``A @ A`` with sorted output (SciPy's product + ``sort_indices()``; GraphBLAS's
      natural output; torch's ``A @ A`` of CSR);
    - ``add``: ``A + B`` with B the transpose of A stored in A's layout (GraphBLAS ``ewise_add``).

    torch has no BSR @ BSR and no working BSR + BSR (see :func:`_torch_cases`).

    GraphBLAS has no blocks: for a bsr matrix it gets the same matrix element-wise (CSR).
    ``ops`` picks a subset (default: all). ``peers`` is :func:`installed_peers`'s dict."""
    import sparsetensor as st

    blocked = t.layout.blocked
    make = st.sparse_bsr_tensor if blocked else st.sparse_csr_tensor
    conv = "bsr->bsc" if blocked else "csr->csc"
    crow, col, val, n = t.crow_indices(), t.col_indices(), t.values(), t.shape[0]
    tt = (t.to_sparse_bsc(t.blocksize) if blocked else t.to_sparse_csc()).mT  # A^T stored in A's layout
    x = np.random.default_rng(1).random(n)
    X = np.random.default_rng(2).random((n, 32))
    cases = {
        "check": {"ours": lambda: make(crow, col, val, (n, n), check_invariants=True)},
        conv: {"ours": lambda: (t.to_sparse_bsc(t.blocksize, threads=threads) if blocked else t.to_sparse_csc(threads=threads))},
        "spmv": {"ours": lambda: st.matmul(t, x, threads=threads)},
        "spmm32": {"ours": lambda: st.matmul(t, X, threads=threads)},
        "spgemm": {"ours": lambda: st.matmul(t, t, threads=threads)},
        "add": {"ours": lambda: st.add(t, tt, threads=threads)},
    }
    if "scipy" in peers:
        _scipy_cases(cases, conv, peers["scipy"], t, tt, x, X)
    if "torch" in peers:
        _torch_cases(cases, conv, peers["torch"], t, tt, x, X)
    if "graphblas" in peers:
        gb = peers["graphblas"]

        def gb_matrix(m):
            m = m.to_sparse_csr() if blocked else m
            return gb.Matrix.ss.import_csr(nrows=n, ncols=n, indptr=m.crow_indices().astype(np.int64),
                                           col_indices=m.col_indices().astype(np.int64), values=m.values(),
                                           take_ownership=False)

        G, GB = gb_matrix(t), gb_matrix(tt)
        gx, gX = gb.Vector.from_dense(x), gb.Matrix.from_dense(X)
        for op, f in ((conv, lambda: G.T.new()), ("spmv", lambda: G.mxv(gx).new()),
                      ("spmm32", lambda: G.mxm(gX).new()), ("spgemm", lambda: G.mxm(G).new()),
                      ("add", lambda: G.ewise_add(GB).new())):
            cases[op]["graphblas"] = f
    return {op: fns for op, fns in cases.items() if ops is None or op in ops}


def _scipy_cases(cases, conv, sp, t, tt, x, X):
    """SciPy's callables of :func:`structure_cases` (csr_array or bsr_array)."""
    crow, col, val, n = t.crow_indices(), t.col_indices(), t.values(), t.shape[0]
    kind = sp.bsr_array if t.layout.blocked else sp.csr_array
    A = kind((val, col, crow), shape=(n, n))
    B = kind((tt.values(), tt.col_indices(), tt.crow_indices()), shape=(n, n))

    def check():  # what ours checks: the format, and sorted distinct columns (5.6)
        m = kind((val, col, crow), shape=(n, n))
        m.check_format(full_check=True)
        return m.has_canonical_format  # computed on a new matrix, never cached

    def spgemm():
        c = A @ A
        c.has_sorted_indices = False  # drop the cached flag so the sort really runs
        c.sort_indices()

    for op, f in (("check", check), (conv, A.transpose if t.layout.blocked else A.tocsc), ("spmv", lambda: A @ x),
                  ("spmm32", lambda: A @ X), ("spgemm", spgemm), ("add", lambda: A + B)):
        cases[op]["scipy"] = f


def _torch_cases(cases, conv, torch, t, tt, x, X):
    """torch's callables of :func:`structure_cases` (sparse_csr or sparse_bsr). torch 2.13 has no
    BSR @ BSR, and its BSR + BSR of a matrix and its transpose fails inside MKL
    (``SPARSE_STATUS_INVALID_VALUE``), so neither is timed."""
    blocked, n = t.layout.blocked, t.shape[0]
    make = torch.sparse_bsr_tensor if blocked else torch.sparse_csr_tensor
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"; read-only indices
        warnings.simplefilter("ignore", UserWarning)
        c_, p_, v_ = torch.from_numpy(t.crow_indices()), torch.from_numpy(t.col_indices()), torch.from_numpy(t.values())
        T = make(c_, p_, v_, (n, n), check_invariants=False)
        TB = make(torch.from_numpy(tt.crow_indices()), torch.from_numpy(tt.col_indices()),
                  torch.from_numpy(tt.values()), (n, n), check_invariants=False)
    tx, tX = torch.from_numpy(x), torch.from_numpy(X)
    to_other = (lambda: T.to_sparse_bsc(t.blocksize)) if blocked else T.to_sparse_csc
    for op, f in (("check", lambda: make(c_, p_, v_, (n, n), check_invariants=True)),
                  (conv, to_other), ("spmv", lambda: T @ tx), ("spmm32", lambda: T @ tX),
                  ("spgemm", None if blocked else (lambda: T @ T)), ("add", None if blocked else (lambda: T + TB))):
        if f is not None:
            cases[op]["torch"] = f


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
        with warnings.catch_warnings():  # torch's tensors of our read-only indices: it only reads them
            warnings.simplefilter("ignore", UserWarning)
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
