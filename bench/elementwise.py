"""Sparse-sparse products and elementwise operations: ours vs SciPy and PyTorch, in one process.

- SpGEMM ``A @ A``: 100,000 x 100,000, about 8 nnz per row, CSR float32, int32 indices
  (SciPy ``A @ A``, torch ``torch.sparse.mm``; SciPy's and torch's CPU products leave the
  output rows unsorted, ours are sorted (invariant 5.6), so a second row compares with
  SciPy's product followed by ``sort_indices()``);
- CSR + CSR and CSR * CSR: 200,000 x 200,000, about 10 nnz per row each, float32
  (SciPy ``X + Y`` and ``X.multiply(Y)``, torch ``X + Y`` and ``X * Y``);
- informational: COO + COO (coalesced, the same matrices; SciPy converts to CSR; ours merges in
  one pass, as CSR rows) and
  SDDMM on a 20,000 x 20,000 pattern with 10 nnz per row and K = 64 (torch
  ``torch.sparse.sampled_addmm``; SciPy has none).

Ratios are the peer's time over ours (above 1: ours is faster); "best peer" is the
faster of the two. Ours runs with ``threads`` (default: all CPUs) and, for comparison with
SciPy's single thread, with one thread; torch runs on ``torch.set_num_threads(2)`` (or
``threads``). On a shared machine whose load exceeds its CPUs, libgomp's default spin-waiting
(``OMP_WAIT_POLICY`` unset: a worker spins for up to GOMP_SPINCOUNT=300000 ``pause``
instructions, tens of milliseconds on recent Xeons, after every parallel region) makes the
threaded runs slower than the one-thread runs; set ``OMP_WAIT_POLICY=passive`` or
``GOMP_SPINCOUNT=1000`` before starting Python there.

Run with ``python -c "from bench import elementwise; elementwise.run()"``.

``python -m bench.elementwise --merge-ab OLD.so`` times the compressed merge kernels of two builds
of ``_elementwise`` loaded side by side in one process, called alternately (issue #15): the 27-point
stencil's ``A * A.T`` (intersection) and ``A + A.T`` (union) at g = 16, 33, 72 and a batched case
(B = 8), the old build's path (``merge_count``, prefix sum, ``merge_fill``; ``merge_union`` for an
unbatched union) against the new one's (``merge_fused``), output allocation included.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

import sparsetensor as st
from sparsetensor._cli._commands import _random_csr_arrays
from sparsetensor.ops.binary import add, mul
from sparsetensor.ops.spgemm import sampled_addmm, spgemm

from ._common import median_time, peers, print_table, write_json


def _csr(n, per_row, seed):
    crow, col, val = _random_csr_arrays(n, per_row, seed=seed, index_dtype=np.int32)
    return crow, col, val, st.CompressedTensor(crow, col, val, (n, n), st.sparse_csr, canonical=True)


def run(repeat=7, threads=None, spgemm_n=100_000, spgemm_per_row=8, ew_n=200_000, ew_per_row=10,
        sddmm_n=20_000, sddmm_k=64):
    torch, sp, nthreads = peers(threads, torch_threads=2 if threads is None else None)
    torch_threads = 2 if threads is None else nthreads
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{nthreads} threads for ours, {torch_threads} for torch; SciPy is single-threaded; load average "
          f"{load:.2f}")
    records = []

    def record(case, ours, scipy_fn=None, torch_fn=None, ours_1=None):
        rec = {"case": case, "ours_s": median_time(ours, repeat)}
        if ours_1 is not None:
            rec["ours_1thread_s"] = median_time(ours_1, repeat)
        if sp is not None and scipy_fn is not None:
            rec["scipy_s"] = median_time(scipy_fn, repeat)
        if torch is not None and torch_fn is not None:
            rec["torch_s"] = median_time(torch_fn, repeat)
        records.append(rec)
        print(f"  {case}: done")

    def torch_csr(crow, col, val, n):
        return torch.sparse_csr_tensor(torch.from_numpy(crow.astype(np.int64)), torch.from_numpy(col.astype(np.int64)),
                                       torch.from_numpy(val), (n, n), check_invariants=False)

    # -- SpGEMM -------------------------------------------------------------------------------------
    n = spgemm_n
    crow, col, val, A = _csr(n, spgemm_per_row, 1)
    ours = spgemm(A, A, threads=threads)
    sA = tA = None
    if sp is not None:
        sA = sp.csr_array((val, col, crow), shape=(n, n))
        ref = sA @ sA
        ref.sort_indices()
        assert ref.nnz == ours.nnz and (ref.indices == ours.col_indices()).all()
        assert np.allclose(ref.data, ours.values(), rtol=1e-4, atol=1e-5)
    if torch is not None:
        tA = torch_csr(crow, col, val, n)
    record(f"spgemm A @ A ({n // 1000}k, {A.nnz / n:.0f}/row -> {ours.nnz / n:.0f}/row)",
           lambda: spgemm(A, A, threads=threads), (lambda: sA @ sA) if sp is not None else None,
           (lambda: torch.sparse.mm(tA, tA)) if torch is not None else None, lambda: spgemm(A, A, threads=1))
    if sp is not None:  # the same product with sorted output rows on SciPy's side (ours are always sorted)

        def scipy_sorted():
            c = sA @ sA
            c.sort_indices()
            return c

        record("spgemm A @ A vs SciPy + sort_indices()", lambda: spgemm(A, A, threads=threads), scipy_sorted, None,
               lambda: spgemm(A, A, threads=1))
    del ours, sA, tA, A

    # -- elementwise ---------------------------------------------------------------------------------
    n = ew_n
    xc, xp, xv, X = _csr(n, ew_per_row, 2)
    yc, yp, yv, Y = _csr(n, ew_per_row, 3)
    sX = sY = tX = tY = None
    if sp is not None:
        sX = sp.csr_array((xv, xp, xc), shape=(n, n))
        sY = sp.csr_array((yv, yp, yc), shape=(n, n))
        r, ref = add(X, Y), sX + sY
        ref.sort_indices()
        assert ref.nnz == r.nnz and (ref.indices == r.col_indices()).all() and np.allclose(ref.data, r.values())
        r, ref = mul(X, Y), sX.multiply(sY).tocsr()
        ref.sort_indices()
        assert (ref.indices == r.col_indices()).all() and np.allclose(ref.data, r.values())  # no explicit zeros here
        del r, ref
    if torch is not None:
        tX, tY = torch_csr(xc, xp, xv, n), torch_csr(yc, yp, yv, n)
    record(f"csr + csr ({n // 1000}k, {X.nnz / n:.0f}/row)", lambda: add(X, Y, threads=threads),
           (lambda: sX + sY) if sp is not None else None, (lambda: tX + tY) if torch is not None else None,
           lambda: add(X, Y, threads=1))
    record(f"csr * csr ({n // 1000}k, {X.nnz / n:.0f}/row)", lambda: mul(X, Y, threads=threads),
           (lambda: sX.multiply(sY)) if sp is not None else None, (lambda: tX * tY) if torch is not None else None,
           lambda: mul(X, Y, threads=1))

    cX, cY = X.to_sparse_coo(), Y.to_sparse_coo()
    sXo = sYo = tXo = tYo = None
    if sp is not None:
        sXo, sYo = sX.tocoo(), sY.tocoo()
    if torch is not None:
        tXo = torch.sparse_coo_tensor(torch.from_numpy(cX.indices().astype(np.int64)), torch.from_numpy(cX.values()),
                                      (n, n), is_coalesced=True)
        tYo = torch.sparse_coo_tensor(torch.from_numpy(cY.indices().astype(np.int64)), torch.from_numpy(cY.values()),
                                      (n, n), is_coalesced=True)
    r = add(cX, cY)
    assert r.is_coalesced() and r.nnz == add(X, Y).nnz and (r.indices()[1] == add(X, Y).col_indices()).all()
    del r
    record(f"coo + coo ({n // 1000}k, coalesced)", lambda: add(cX, cY, threads=threads),
           (lambda: sXo + sYo) if sp is not None else None, (lambda: tXo + tYo) if torch is not None else None,
           lambda: add(cX, cY, threads=1))
    del X, Y, sX, sY, tX, tY, cX, cY, sXo, sYo, tXo, tYo

    # -- SDDMM ----------------------------------------------------------------------------------------
    n, k = sddmm_n, sddmm_k
    crow, col, val, P = _csr(n, 10, 4)
    rng = np.random.default_rng(5)
    m1 = rng.standard_normal((n, k)).astype(np.float32)
    m2 = rng.standard_normal((k, n)).astype(np.float32)
    tP = tm1 = tm2 = None
    if torch is not None:
        tP, tm1, tm2 = torch_csr(crow, col, val, n), torch.from_numpy(m1), torch.from_numpy(m2)
    record(f"sampled_addmm ({n // 1000}k, 10/row, K={k})", lambda: sampled_addmm(P, m1, m2, threads=threads),
           None, (lambda: torch.sparse.sampled_addmm(tP, tm1, tm2)) if torch is not None else None,
           lambda: sampled_addmm(P, m1, m2, threads=1))

    table = []
    for rec in records:
        ours = rec["ours_s"]
        peer_times = [rec[k] for k in ("scipy_s", "torch_s") if rec.get(k) is not None]
        rec["best_peer_over_ours"] = min(peer_times) / ours if peer_times else None
        one = rec.get("ours_1thread_s")
        rec["best_peer_over_ours_1thread"] = min(peer_times) / one if peer_times and one else None

        def ratio(key):
            peer = rec.get(key)
            return "n/a" if peer is None else peer / ours

        def show(x):
            return "n/a" if x is None else x

        table.append([rec["case"], 1e3 * ours, show(one and 1e3 * one), ratio("scipy_s"), ratio("torch_s"),
                      show(rec["best_peer_over_ours"]), show(rec["best_peer_over_ours_1thread"])])
    print_table(["case", "ours ms", "ours 1-thread ms", "scipy/ours", "torch/ours", "best peer/ours",
                 "best peer/ours 1-thread"], table)
    path = write_json("elementwise", {"threads": nthreads, "torch_threads": torch_threads, "load_average": load,
                                      "results": records})
    print(f"wrote {path}")
    return records


def _merge_paths(K, ac, ap, av, bc, bp, bv, union, nt):
    """{"old": fn, "new": fn} of module K: the count + fill path (one-pass union for B == 1) and merge_fused."""
    B, n = ac.shape[0], ac.shape[1] - 1
    E = av.shape[2]
    code = K.ADD if union else K.MUL

    def two_pass():
        counts = np.empty((B, n), dtype=np.int64)
        K.merge_count(ac, ap, bc, bp, union, counts, nt)
        nnz = int(counts[0].sum())
        oc = np.empty((B, n + 1), dtype=ac.dtype)
        oc[:, 0] = 0
        np.cumsum(counts, axis=1, out=oc[:, 1:])
        op_, ov = np.empty((B, nnz), dtype=ac.dtype), np.empty((B, nnz, E), dtype=av.dtype)
        K.merge_fill(ac, ap, av, bc, bp, bv, oc, op_, ov, code, union, 1.0, False, nt)
        return oc, op_.reshape(-1), ov.reshape(-1, E)

    def one_pass_union():
        ub = ap.shape[1] + bp.shape[1]
        oc, op_, ov = np.empty((1, n + 1), dtype=ac.dtype), np.empty((1, ub), dtype=ac.dtype), np.empty((1, ub, E))
        nnz = K.merge_union(ac, ap, av, bc, bp, bv, oc, op_, ov, K.PLUS, 1.0, False, nt)
        return oc, op_[0, :nnz], ov[0, :nnz]

    def fused():
        room = B * (ap.shape[1] + bp.shape[1]) if union else B * min(ap.shape[1], bp.shape[1])
        oc, op_, ov = np.empty((B, n + 1), dtype=ac.dtype), np.empty(room, dtype=ac.dtype), np.empty((room, E))
        nnz = K.merge_fused(ac, ap, av, bc, bp, bv, oc, op_, ov, K.PLUS if union else K.MUL, union, 1.0, False, nt)
        return oc, op_[:nnz], ov[:nnz]

    return two_pass if not union or B > 1 else one_pass_union, fused


def merge_ab(old_path: str, grids=(16, 33, 72), batch=8, batch_grid=16, rounds=15, threads=None) -> list:
    """Milliseconds per compressed merge, two builds of ``_elementwise`` (see the module docstring);
    medians of ``rounds`` alternating calls. Returns the records and prints a table."""
    from sparsetensor._lib import _elementwise as new_mod

    from .overhead import _load_extension

    old_mod = _load_extension(old_path)
    nt = st.num_threads(threads)
    print(f"threads {nt}; load average {os.getloadavg()}; medians (and minima) of {rounds} calls each")
    cases = []
    for g in grids:
        A = st.stencil((g, g, g), 27, index_dtype=np.int32)
        AT = A.T.to_sparse_csr()
        cases.append((f"g={g} (1 x {A.nnz})", [A], [AT]))
    A = st.stencil((batch_grid,) * 3, 27, index_dtype=np.int32)
    AT = A.T.to_sparse_csr()
    rng = np.random.default_rng(0)
    cases.append((f"g={batch_grid} B={batch} ({batch} x {A.nnz})", [A] * batch, [AT] * batch))
    records = []
    for name, As, Bs in cases:
        ac = np.stack([t.crow_indices() for t in As])
        ap = np.stack([t.col_indices() for t in As])
        av = rng.standard_normal(ap.shape + (1,))
        bc = np.stack([t.crow_indices() for t in Bs])
        bp = np.stack([t.col_indices() for t in Bs])
        bv = rng.standard_normal(bp.shape + (1,))
        for union in (False, True):
            old_fn, _ = _merge_paths(old_mod, ac, ap, av, bc, bp, bv, union, nt)
            _, new_fn = _merge_paths(new_mod, ac, ap, av, bc, bp, bv, union, nt)
            want, got = old_fn(), new_fn()
            assert all(np.array_equal(w, g) for w, g in zip(want, got))
            del want, got
            ms = {"old": [], "new": []}
            order = [("old", old_fn), ("new", new_fn)]
            for _ in range(rounds):  # alternate (old new, new old, ...), so that both see the same load
                for tag, fn in order:
                    t0 = time.perf_counter()
                    fn()
                    ms[tag].append((time.perf_counter() - t0) * 1e3)
                order.reverse()
            med = {tag: statistics.median(v) for tag, v in ms.items()}
            best = {tag: min(v) for tag, v in ms.items()}
            op = "A + A.T" if union else "A * A.T"
            records.append({"case": name, "op": op, "threads": nt, "median_ms": med, "min_ms": best})
            print(f"{name:26s} {op:8s} median old {med['old']:9.3f} new {med['new']:9.3f} ms, old/new "
                  f"{med['old'] / med['new']:5.2f}; min old/new {best['old'] / best['new']:5.2f}", flush=True)
    return records


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) >= 3 and sys.argv[1] == "--merge-ab":
        kw = {"threads": int(sys.argv[3])} if len(sys.argv) > 3 else {}
        if len(sys.argv) > 4:
            kw["batch_grid"] = int(sys.argv[4])
        merge_ab(sys.argv[2], **kw)
    else:
        run()
