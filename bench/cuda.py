"""GPU benchmarks of the CUDA backend against cuSPARSE through PyTorch and CuPy.

Run on a machine with an NVIDIA GPU, after ``pip install '.[cuda]'`` (and torch with
CUDA, cupy for the peers)::

    python -m bench.cuda [--quick] [--repeat N]

Without a GPU it prints why and exits with status 0.

Cases (the issue's targets in brackets):

- CSR SpMM, 2M x 2M, ~16 nnz/row, N = 1, 32, 128, float32 vs ``torch.sparse.mm`` on CUDA
  CSR and ``cupyx.scipy.sparse.csr_matrix @`` [ratio >= 1.0];
- BSR SpMM, 32768 x 32768, 32 x 32 blocks, 2% of the blocks, N = 256, float32 vs
  torch's BSR ``@`` [ratio >= 1.0];
- COO coalesce of 100M entries vs ``torch.Tensor.coalesce`` [>= 2x];
- CSR -> CSC of 100M nnz vs ``torch.Tensor.to_sparse_csc`` [>= 2x];
- full CSR validation of 100M nnz vs ``torch.sparse_csr_tensor(..., check_invariants=True)``
  minus the unchecked constructor [>= 5x];
- SpGEMM ``A @ A`` of the 27-point stencil and the R-MAT graph vs torch's CSR ``@`` and
  CuPy's [>= 1.0];
- softmax over the R-MAT graph's CSR rows vs ``torch.sparse.softmax``; ``index_select`` of
  10% of its rows vs torch's [>= 1.0];
- ILU(0) of the 27-point stencil (no peer), and a solve with its ``L`` vs torch's
  ``triangular_solve`` of a CUDA CSR matrix and CuPy's ``spsolve_triangular`` [>= 1.0];
- a GCN layer, ``(A @ (X @ W)).sum()`` forward and backward, A 2M nnz, 64 features, through
  ``sparsetensor.torch.matmul`` vs ``torch.sparse.mm`` [>= 2x];
- a SparseAdam step on a 10^6 x 64 embedding, 2^16 Zipf-distributed row indices, our
  ``sparsetensor.torch.optim.SparseAdam`` (``st.optim.SparseAdam`` without torch) vs
  ``torch.optim.SparseAdam`` [>= 2x].

Times are medians of CUDA-event timings after a warm-up (each library timed on its own
stream); throughput is the bytes an op must at least read and write over its time,
also as a fraction of the device's measured device-to-device copy bandwidth.
Results are printed and written to ``bench/results/cuda.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys

if __name__ == "__main__":  # benchmark the installed package, not the source tree (see bench/__main__.py)
    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _root]

import numpy as np


def _events_timer(dev):
    """``time(fn, repeat)``: median milliseconds of ``fn`` on our stream, by CUDA events (cuda.core)."""
    from cuda.core import EventOptions

    timing = EventOptions(timing_enabled=True)

    def time(fn, repeat):
        fn()
        dev.synchronize()
        out = []
        for _ in range(repeat):
            start = dev.stream.record(options=timing)
            fn()
            end = dev.stream.record(options=timing)
            end.sync()
            out.append(float(end - start))
        return statistics.median(out)

    return time


def _torch_timer(torch):
    def time(fn, repeat):
        fn()
        torch.cuda.synchronize()
        out = []
        for _ in range(repeat):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        return statistics.median(out)

    return time


def _cupy_timer(cp):
    def time(fn, repeat):
        fn()
        cp.cuda.Device().synchronize()
        out = []
        for _ in range(repeat):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(cp.cuda.get_elapsed_time(a, b))
        return statistics.median(out)

    return time


def _host_per_call(stc, dev, gen, torch, cp, calls) -> dict:
    """Microseconds a call of a 64 x 64 CSR SpMV costs (wall time over ``calls`` calls queued
    back to back, one synchronisation at the end): the host's part of a call, the kernel being
    tiny. Ours (the public op, ``st.matmul``) with a DeviceArray, a torch and a CuPy operand;
    torch's own ``sparse.mm``."""
    import time

    import sparsetensor as st

    crow, col, val = gen.csr(64, 8, np.int32)
    a = stc.compressed_tensor(crow, col, val, (64, 64), layout="csr", check_invariants=True)
    x = stc.as_device_array(gen.normal((64,)), dev)

    def per_call(fn, sync):
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        return (time.perf_counter() - t0) / calls * 1e6

    out = {"ours, DeviceArray x": per_call(lambda: st.matmul(a, x), dev.synchronize)}
    if torch is not None:
        tx = torch.from_dlpack(x)
        out["ours, torch x"] = per_call(lambda: st.matmul(a, tx), dev.synchronize)
        ta = torch.sparse_csr_tensor(torch.from_dlpack(a.crow_indices()), torch.from_dlpack(a.col_indices()),
                                     torch.from_dlpack(a.values()), a.shape)
        tx2 = tx[:, None]
        out["torch.sparse.mm"] = per_call(lambda: torch.sparse.mm(ta, tx2), torch.cuda.synchronize)
    if cp is not None:
        cx = cp.asarray(x)
        out["ours, cupy x"] = per_call(lambda: st.matmul(a, cx), dev.synchronize)
    return out


def _copy_bandwidth(dev, timer, nbytes=1 << 30) -> float:
    """Bytes per second moved (read + write) by a device-to-device copy."""
    from sparsetensor.cuda import DeviceArray

    a = DeviceArray.empty((nbytes,), np.uint8, dev)
    b = DeviceArray.empty((nbytes,), np.uint8, dev)
    ms = timer(lambda: dev.copy_dtod(b.ptr, a.ptr, nbytes), 10)
    return 2 * nbytes / (ms / 1e3)


def _random_csr(rng, n, per_row, index_dtype=np.int64):
    counts = rng.poisson(per_row, n)
    crow = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=crow[1:])
    nnz = int(crow[-1])
    col = rng.integers(0, n, nnz)
    # sort and dedupe inside rows: sort by (row, col) keys
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    key = row * n + col
    key = np.unique(key)
    row, col = key // n, key % n
    crow = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=crow[1:])
    return crow.astype(index_dtype), col.astype(index_dtype), rng.standard_normal(col.size).astype(np.float32)


class _Gen:
    """Random inputs made on the device through torch when it has CUDA (seconds instead of the
    host's minutes at 10^8 entries), else on the host with NumPy."""

    def __init__(self, rng, torch, stc, dev):
        self.rng, self.torch, self.stc, self.dev = rng, torch, stc, dev
        if torch is not None:
            self.g = torch.Generator(device="cuda").manual_seed(0)

    def normal(self, shape):
        if self.torch is None:
            return self.stc.DeviceArray.from_host(self.rng.standard_normal(shape).astype(np.float32), self.dev)
        return self.torch.randn(shape, generator=self.g, device="cuda", dtype=self.torch.float32)

    def integers(self, high, shape):
        if self.torch is None:
            return self.stc.DeviceArray.from_host(self.rng.integers(0, high, shape), self.dev)
        return self.torch.randint(0, high, shape, generator=self.g, device="cuda", dtype=self.torch.int64)

    def csr(self, n, per_row, index_dtype):
        """``(crow, col, values)`` of an n x n matrix with Poisson(per_row) distinct sorted columns a row."""
        if self.torch is None:
            return _random_csr(self.rng, n, per_row, index_dtype)
        torch = self.torch
        counts = torch.poisson(torch.full((n,), float(per_row), device="cuda"), generator=self.g).long()
        row = torch.repeat_interleave(torch.arange(n, device="cuda"), counts)
        key = torch.unique(row * n + torch.randint(0, n, (row.numel(),), generator=self.g, device="cuda"))
        row, col = key // n, key % n
        crow = torch.zeros(n + 1, dtype=torch.int64, device="cuda")
        crow[1:] = torch.cumsum(torch.bincount(row, minlength=n), 0)
        tdt = torch.int32 if np.dtype(index_dtype) == np.int32 else torch.int64
        return crow.to(tdt), col.to(tdt), self.normal((col.numel(),))


def _wall_timer(dev):
    import time as _time

    def time(fn, repeat):
        fn()
        out = []
        for _ in range(repeat):
            t0 = _time.perf_counter()
            fn()
            dev.synchronize()
            out.append(1e3 * (_time.perf_counter() - t0))
        return statistics.median(out)

    return time


# (SpMM rows, BSR block rows, coalesce entries, CSR->CSC rows, nnz per row of that matrix)
SIZES = {"full": (2_000_000, 1024, 100_000_000, 6_250_000, 16), "quick": (200_000, 256, 5_000_000, 1_000_000, 5),
         "emulate": (3000, 8, 20_000, 2000, 5)}
# (27-point stencil grid side, R-MAT scale) of the structured SpMV/SpMM cases
STRUCTURES = {"full": (100, 20), "quick": (40, 16), "emulate": (6, 8)}
# R-MAT scale of the SpGEMM case (scale 16: 9.6e5 nnz, 4.0e8 products)
SPGEMM_RMAT_SCALE = {"full": 16, "quick": 14, "emulate": 7}


def run(quick=False, repeat=7, emulate=False, profile=False):
    """Run the benchmarks; ``emulate=True`` runs tiny sizes on the CPU emulator of the kernels
    (a smoke test of this script, no timing meaning, no peers); ``profile=True`` adds each
    case's time per kernel (one more call, CUDA events around every launch)."""
    import sparsetensor as st
    import sparsetensor.cuda as stc
    from sparsetensor.cuda._driver import get_device

    if emulate:
        from sparsetensor.cuda import _emulator

        _emulator.install()
    else:
        reason = stc.unavailable_reason()
        if reason is not None:
            print(f"bench.cuda: no CUDA GPU here ({reason}); nothing to measure")
            return None
    n, nb, m, rows_n, per_row = SIZES["emulate" if emulate else "quick" if quick else "full"]

    from ._common import machine, print_table, write_json

    torch = cp = csp = None
    if not emulate:
        try:
            import torch

            torch = torch if torch.cuda.is_available() else None
        except ImportError:
            pass
        try:
            import cupy as cp
            import cupyx.scipy.sparse as csp
        except ImportError:
            cp = csp = None

    dev = get_device("cuda")
    timer = _wall_timer(dev) if emulate else _events_timer(dev)
    last_profile = {}

    def ours_t(fn, repeat):
        ms = timer(fn, repeat)
        if profile:  # one more call with each kernel timed: where the time goes
            from sparsetensor.cuda._module import profile as kernel_times

            with kernel_times() as kernels:
                fn()
            last_profile.clear()
            last_profile.update(kernels)
        return ms

    torch_t = _torch_timer(torch) if torch is not None else None
    cupy_t = _cupy_timer(cp) if cp is not None else None
    bw = _copy_bandwidth(dev, ours_t, 1 << 20 if emulate else 1 << 30)
    print(f"device cuda:{dev.ordinal}, compute capability {dev.compute_capability}, {dev.sm_count} SMs; "
          f"copy bandwidth {bw / 1e9:.0f} GB/s; peers: torch {'yes' if torch else 'no'}, cupy {'yes' if cp else 'no'}")
    if not emulate:
        print("compiling the kernels (cached after the first run) ...")
        stc.precompile()
    rng = np.random.default_rng(0)
    gen = _Gen(rng, torch, stc, dev)
    records, rows, failures = [], [], []

    def record(name, ours_ms, nbytes, peers: dict, target: str, extra=None):
        rec = {**(extra or {}), "case": name, "ours_ms": ours_ms, "bytes": nbytes, "GBps": nbytes / (ours_ms / 1e3) / 1e9,
               "of_copy_bw": nbytes / (ours_ms / 1e3) / bw, "target": target}
        for k, v in peers.items():
            rec[f"{k}_ms"] = v
            rec[f"{k}/ours"] = v / ours_ms
        ratios = "".join(f", {k}/ours {v / ours_ms:.2f}" for k, v in peers.items())
        print(f"  {name}: {ours_ms:.3f} ms, {rec['of_copy_bw']:.2f} of copy bw{ratios}", flush=True)
        if "ours_shared_ms" in rec:
            print(f"    shared with torch (its indices checked each call): {rec['ours_shared_ms']:.3f} ms")
        if last_profile:
            rec["kernels_ms"] = {k: v[1] for k, v in sorted(last_profile.items(), key=lambda kv: -kv[1][1])}
            print("    " + ", ".join(f"{k} {v:.3f}" for k, v in list(rec["kernels_ms"].items())[:6]))
            last_profile.clear()
        records.append(rec)
        rows.append([name, ours_ms, rec["GBps"], rec["of_copy_bw"],
                     rec.get("torch/ours", float("nan")), rec.get("cupy/ours", float("nan")), target])

    @contextlib.contextmanager
    def guard(label):
        """One case's section: an error is printed and recorded, and the next case runs."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - a failed case is reported in the table, not fatal
            print(f"  {label}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            failures.append({"case": label, "error": f"{type(e).__name__}: {e}"})
            rows.append([f"{label}: FAILED ({type(e).__name__})"] + [float("nan")] * 5 + [""])

    def torch_csr(a):
        return torch.sparse_csr_tensor(torch.from_dlpack(a.crow_indices()), torch.from_dlpack(a.col_indices()),
                                       torch.from_dlpack(a.values()), a.shape)

    def peer(fn, repeat, timer):
        """A peer's time, or None where it refuses the case (its error printed)."""
        try:
            return timer(fn, repeat)
        except Exception as e:  # noqa: BLE001 - a peer that lacks the op is reported, not fatal
            print(f"    peer failed: {type(e).__name__}: {str(e)[:120]}")
            return None

    def with_peers(**peers):
        return {k: v for k, v in peers.items() if v is not None}

    # -- CSR SpMM / SpMV: uniform rows, then a 3-d 27-point stencil and an R-MAT graph (skewed rows) --
    with guard("csr spmv/spmm"):
        def csr_cases(label, a, Ns):
            ta = ca = None
            if torch is not None:
                ta = torch.sparse_csr_tensor(torch.from_dlpack(a.crow_indices()), torch.from_dlpack(a.col_indices()),
                                             torch.from_dlpack(a.values()), a.shape)
            if cp is not None:
                ca = csp.csr_matrix((cp.asarray(a.values()), cp.asarray(a.col_indices()),
                                     cp.asarray(a.crow_indices())), shape=a.shape)
            rows_, cols_ = a.shape
            # index arrays another library holds (torch's, here) are checked again by every op, since it may
            # have written them: timed apart from our own copy, which is checked once
            own = a.clone()
            for N in Ns:
                x = stc.as_device_array(gen.normal((cols_,) if N == 1 else (cols_, N)), dev)
                shared_ms = ours_t(lambda: st.matmul(a, x), repeat)
                ms = ours_t(lambda: st.matmul(own, x), repeat)
                peers = {}
                if ta is not None:
                    tx = torch.from_dlpack(x)
                    tx2 = tx if N > 1 else tx[:, None]
                    peers["torch"] = torch_t(lambda: torch.sparse.mm(ta, tx2), repeat)
                if ca is not None:
                    cx = cp.asarray(x)
                    peers["cupy"] = cupy_t(lambda: ca @ cx, repeat)
                nbytes = a.nnz * 8 + (rows_ + 1) * 4 + (rows_ + cols_) * N * 4
                record(f"{label} N={N}", ms, nbytes, peers, ">= 1.0", {"ours_shared_ms": shared_ms})

        crow, col, val = gen.csr(n, 16, np.int32)
        a = stc.compressed_tensor(crow, col, val, (n, n), layout="csr", check_invariants=True)
        csr_cases(f"csr spmm {n:,}", a, (1, 32, 128))
        del a
        g, scale = STRUCTURES["emulate" if emulate else "quick" if quick else "full"]
        s27 = stc.to_device(st.stencil((g, g, g), 27, dtype=np.float32, index_dtype=np.int32), "cuda")
        csr_cases(f"27pt g={g} {s27.nnz:,} nnz", s27, (1, 32))
        gr = stc.to_device(st.rmat(scale, 16, np.random.default_rng(1), dtype=np.float32, index_dtype=np.int32), "cuda")
        csr_cases(f"rmat s={scale} {gr.nnz:,} nnz", gr, (1, 32))

    # -- SpGEMM, softmax over rows, index_select of 10% of the rows ---------------------------------------
    def spgemm_case(label, a):
        c = st.matmul(a, a)
        ms = ours_t(lambda: st.matmul(a, a), max(3, repeat // 2))
        ta = torch_csr(a) if torch is not None else None
        ca = csp.csr_matrix((cp.asarray(a.values()), cp.asarray(a.col_indices()), cp.asarray(a.crow_indices())),
                            shape=a.shape) if cp is not None else None
        record(f"spgemm A@A {label} ({c.nnz:,} nnz out)", ms, 2 * a.nnz * 8 + c.nnz * 8,
               with_peers(torch=ta is not None and peer(lambda: ta @ ta, max(3, repeat // 2), torch_t) or None,
                          cupy=ca is not None and peer(lambda: ca @ ca, max(3, repeat // 2), cupy_t) or None),
               ">= 1.0")

    with guard("spgemm 27pt"):
        spgemm_case(f"27pt g={g}", s27)
    with guard("spgemm rmat"):  # the SpMV graph's A @ A would form 2.1e10 products: a smaller graph
        sg = SPGEMM_RMAT_SCALE["emulate" if emulate else "quick" if quick else "full"]
        spgemm_case(f"rmat s={sg}", stc.to_device(st.rmat(sg, 16, np.random.default_rng(1), dtype=np.float32,
                                                          index_dtype=np.int32), "cuda"))
    with guard("softmax, index_select"):
        ta = torch_csr(gr) if torch is not None else None
        ms = ours_t(lambda: st.softmax(gr, 1), repeat)
        record(f"softmax rows rmat s={scale}", ms, 2 * gr.nnz * 4 + gr.nnz * 4,
               with_peers(torch=ta is not None and peer(lambda: torch.sparse.softmax(ta, 1), repeat, torch_t) or None),
               ">= 1.0")
        pick = np.sort(rng.choice(gr.shape[0], gr.shape[0] // 10, replace=False))
        ms = ours_t(lambda: st.index_select(gr, 0, pick), repeat)
        tpick = torch.from_numpy(pick).cuda() if torch is not None else None
        record(f"index_select 10% rows rmat s={scale}", ms, gr.nnz // 10 * 16,
               with_peers(torch=ta is not None and peer(lambda: ta.index_select(0, tpick), repeat, torch_t) or None),
               ">= 1.0")

    # -- ILU(0) of the stencil and a triangular solve with its L (level-scheduled) ----------------------
    with guard("ilu0 and spsv"):
        from sparsetensor.ops.factor import ilu0, spsolve_triangular

        ms = ours_t(lambda: ilu0(s27), max(3, repeat // 2))
        record(f"ilu0 27pt g={g}", ms, 2 * s27.nnz * 8, {}, "(no peer)")
        lo, _ = ilu0(s27)
        rhs = stc.as_device_array(gen.normal((s27.shape[0],)), dev)
        ms = ours_t(lambda: spsolve_triangular(lo, rhs, lower=True, unit_diagonal=True), repeat)
        tl = torch_csr(lo) if torch is not None else None
        trhs = torch.from_dlpack(rhs).reshape(-1, 1) if torch is not None else None
        cl = csp.csr_matrix((cp.asarray(lo.values()), cp.asarray(lo.col_indices()), cp.asarray(lo.crow_indices())),
                            shape=lo.shape) if cp is not None else None
        crhs = cp.asarray(rhs) if cp is not None else None
        if cp is not None:
            import cupyx.scipy.sparse.linalg as csla
        record(f"spsv L of ilu0 27pt g={g}", ms, lo.nnz * 8 + 2 * rhs.nbytes,
               with_peers(torch=tl is not None and peer(lambda: torch.triangular_solve(trhs, tl, upper=False,
                                                                                       unitriangular=True),
                                                        repeat, torch_t) or None,
                          cupy=cl is not None and peer(lambda: csla.spsolve_triangular(cl, crhs, lower=True,
                                                                                       unit_diagonal=True),
                                                       repeat, cupy_t) or None),
               ">= 1.0")
        del s27, gr, ta, lo, tl, cl

    # -- a GCN layer forward + backward through the torch bridge ------------------------------------------
    with guard("gcn layer"):
        gcn_n, feats = (131072, 64) if not (emulate or quick) else ((16384, 64) if quick else (256, 8))
        if torch is not None:
            import sparsetensor.torch as stt

            crow, col, val = gen.csr(gcn_n, 16, np.int32)
            tA = torch.sparse_csr_tensor(crow, col, val, (gcn_n, gcn_n))
            X = torch.randn(gcn_n, feats, device="cuda", requires_grad=True)
            W = torch.randn(feats, feats, device="cuda", requires_grad=True)

            def step(mm):
                X.grad = W.grad = None
                mm(tA, X @ W).square().sum().backward()

            ms = torch_t(lambda: step(stt.matmul), repeat)
            record(f"gcn layer fwd+bwd {tA.values().numel():,} nnz x {feats}", ms, 4 * tA.values().numel() * 8,
                   with_peers(torch=peer(lambda: step(torch.sparse.mm), repeat, torch_t)), "torch/ours >= 2")
            del tA, X, W
        else:
            print("  gcn layer: needs torch with CUDA (the bridge's case); skipped")

    # -- SparseAdam on an embedding ------------------------------------------------------------------------
    with guard("SparseAdam"):
        rows_e, width, hits = (1_000_000, 64, 1 << 16) if not (emulate or quick) else \
            ((100_000, 64, 1 << 12) if quick else (500, 8, 64))
        ids = np.minimum(rng.zipf(1.2, hits) - 1, rows_e - 1).astype(np.int64)
        gvals = rng.standard_normal((hits, width)).astype(np.float32)
        if torch is not None:
            import sparsetensor.torch.optim as sto

            def adam_case(cls):
                p = torch.zeros(rows_e, width, device="cuda", requires_grad=True)
                p.grad = torch.sparse_coo_tensor(torch.from_numpy(ids[None]).cuda(), torch.from_numpy(gvals).cuda(),
                                                 (rows_e, width))
                opt = cls([p], lr=1e-3)
                return opt.step

            ms = torch_t(adam_case(sto.SparseAdam), repeat)
            peers = with_peers(torch=peer(adam_case(torch.optim.SparseAdam), repeat, torch_t))
        else:
            p = stc.DeviceArray.zeros((rows_e, width), np.float32, dev)
            grad = stc.coo_tensor(ids[None], gvals, (rows_e, width))
            opt = st.optim.SparseAdam([p], lr=1e-3)
            ms, peers = ours_t(lambda: opt.step([grad]), repeat), {}
        record(f"SparseAdam {rows_e:,} x {width}, {hits:,} zipf rows", ms, 2 * 4 * hits * width * 4, peers,
               "torch/ours >= 2")

    # -- BSR SpMM --------------------------------------------------------------------------------------
    with guard("bsr spmm"):
        # nb block rows/cols of 32 x 32 blocks: 32768 x 32768 for nb = 1024
        blocks = rng.random((nb, nb)) < 0.02
        bcrow = np.zeros(nb + 1, np.int64)
        np.cumsum(blocks.sum(1), out=bcrow[1:])
        bcol = np.nonzero(blocks)[1]
        bval = rng.standard_normal((bcol.size, 32, 32)).astype(np.float32)
        b = stc.compressed_tensor(bcrow.astype(np.int32), bcol.astype(np.int32), bval, (nb * 32, nb * 32), layout="bsr")
        X = stc.as_device_array(gen.normal((nb * 32, 256)), dev)
        ms = ours_t(lambda: st.matmul(b, X), repeat)
        peers, tb = {}, None
        if torch is not None:
            tb = torch.sparse_bsr_tensor(torch.from_dlpack(b.crow_indices()), torch.from_dlpack(b.col_indices()),
                                         torch.from_dlpack(b.values()), b.shape)
            tX = torch.from_dlpack(X)
            peers["torch"] = torch_t(lambda: tb @ tX, repeat)
        record(f"bsr spmm {nb * 32} 32x32 2% N=256", ms, bval.nbytes + 2 * X.nbytes, peers, ">= 1.0")
        del X, b, tb

    # -- COO coalesce ------------------------------------------------------------------------------------
    with guard("coo coalesce"):
        side = 1 << 20
        idx = gen.integers(side, (2, m))
        vals = gen.normal((m,))
        coo = stc.coo_tensor(idx, vals, (side, side), check_invariants=False)
        ms = ours_t(lambda: coo.coalesce(), max(3, repeat // 2))
        peers = {}
        if torch is not None:
            tcoo = torch.sparse_coo_tensor(torch.from_dlpack(coo.indices()), torch.from_dlpack(coo.values()),
                                           (side, side))
            peers["torch"] = torch_t(lambda: tcoo.coalesce(), max(3, repeat // 2))
            del tcoo
        record(f"coo coalesce {m:,}", ms, 2 * (idx.nbytes + vals.nbytes), peers, "torch/ours >= 2")
        del coo, idx

    # -- CSR -> CSC and validation ------------------------------------------------------------------------
    with guard("csr->csc and validation"):
        crow, col, val = gen.csr(rows_n, per_row, np.int64)
        big = stc.compressed_tensor(crow, col, val, (rows_n, rows_n), layout="csr", check_invariants=True)
        ms = ours_t(lambda: big.to_sparse("csc"), max(3, repeat // 2))
        peers = {}
        if torch is not None:
            tbig = torch.sparse_csr_tensor(torch.from_dlpack(big.crow_indices()), torch.from_dlpack(big.col_indices()),
                                           torch.from_dlpack(big.values()), big.shape)
            peers["torch"] = torch_t(lambda: tbig.to_sparse_csc(), max(3, repeat // 2))
        record(f"csr->csc {big.nnz:,} nnz", ms, 2 * (col.nbytes + val.nbytes) + 2 * crow.nbytes, peers,
               "torch/ours >= 2")

        unchecked = st.CompressedTensor(big.crow_indices(), big.col_indices(), big.values(), big.shape, big.layout)
        ms = ours_t(lambda: unchecked.check_invariants(), repeat)
        peers = {}
        if torch is not None:
            c_, p_, v_ = (torch.from_dlpack(x) for x in (big.crow_indices(), big.col_indices(), big.values()))
            checked = torch_t(lambda: torch.sparse_csr_tensor(c_, p_, v_, big.shape, check_invariants=True), repeat)
            plain = torch_t(lambda: torch.sparse_csr_tensor(c_, p_, v_, big.shape, check_invariants=False), repeat)
            peers["torch"] = max(checked - plain, 1e-6)
        record(f"csr validation {big.nnz:,} nnz", ms, col.nbytes + crow.nbytes, peers, "torch/ours >= 5")

    print_table(["case", "ours ms", "GB/s", "of copy bw", "torch/ours", "cupy/ours", "target"], rows)
    host = _host_per_call(stc, dev, gen, torch, cp, 50 if emulate else 500)
    print_table(["host time a call, 64 x 64 SpMV", "us"], [[k, v] for k, v in host.items()])
    info = {"machine": machine(), "device": {"ordinal": dev.ordinal, "cc": list(dev.compute_capability),
                                             "sms": dev.sm_count},
            "copy_bandwidth_Bps": bw, "quick": quick, "emulated": emulate, "results": records, "failures": failures,
            "host_us_per_call": host}
    if torch is not None:
        info["torch"] = torch.__version__
    if cp is not None:
        info["cupy"] = cp.__version__
    path = write_json("cuda-emulated" if emulate else "cuda", info)
    print(f"wrote {path}")
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--emulate", action="store_true",
                        help="tiny sizes on the CPU emulator of the kernels: a smoke test of this script")
    parser.add_argument("--profile", action="store_true", help="also time each case's kernels one by one")
    args = parser.parse_args(argv)
    run(quick=args.quick, repeat=args.repeat, emulate=args.emulate, profile=args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
