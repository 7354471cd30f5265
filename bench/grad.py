"""Gradients through sparse products: sparsetensor.torch vs PyTorch, in one process.

- GCN layer, forward + backward of ``Y = A @ (X W)`` with gradients for X, W and A's
  values (ours: A built from a values leaf with ``torch.sparse_csr_tensor``; torch: a CSR
  leaf, since its constructor's backward densifies the gradient): A is CSR with
  131,072 rows and about 2M nnz, uniform and R-MAT (a = 0.57, b = c = 0.19) patterns, 64
  features, float32. Ours: ``sparsetensor.torch.matmul``; torch: ``torch.sparse.mm``
  (the backward PyTorch has for CSR @ dense).
- sparse @ sparse backward (``C = A @ B``, gradients for both value arrays, masked) and
  BSR @ dense backward (16 x 16 blocks): PyTorch has no backward for either, so the peer
  densifies (``A.to_dense() @ B.to_dense()``, ``A.to_dense() @ X`` on values leaves).
  Peak memory: the growth of the resident set while one run of each side runs (Linux VmHWM).

Each time is the median of ``repeat`` runs after a warm-up; the machine may be shared:
compare ratios from one run only.
"""

from __future__ import annotations

import os

import numpy as np

import sparsetensor as st

from ._common import median_time, peers, print_table, write_json


def uniform_csr(n: int, nnz: int, seed: int):
    """(crow, col, values) of an n x n uniform random pattern with ``nnz`` entries (``st.random``)."""
    return _members(st.random((n, n), density=nnz / (n * n), layout="csr", rng=np.random.default_rng(seed)), seed)


def rmat_csr(n: int, nnz: int, seed: int):
    """(crow, col, values) of a Graph500 R-MAT pattern (power-law rows and columns; ``st.rmat``),
    ``n`` a power of two, about ``nnz`` entries (repeated edges merged)."""
    return _members(st.rmat(int(np.log2(n)), max(1, nnz // n), np.random.default_rng(seed)), seed)


def _members(t, seed):
    """The tensor's csr members with int64 indices and float32 values N(0, 1/16)."""
    rng = np.random.default_rng(seed + 1)
    col = t.col_indices().astype(np.int64)
    return t.crow_indices().astype(np.int64), col, (rng.standard_normal(col.size) / 4).astype(np.float32)


def _status_kb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1])
    return float("nan")


def peak_mb(fn) -> float:
    """Peak resident-memory growth (MiB) while ``fn`` runs once: Linux's VmHWM, reset first through
    /proc/self/clear_refs (nan where that is not available)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status_kb("VmRSS")
    except OSError:
        return float("nan")
    fn()
    return (_status_kb("VmHWM") - before) / 1024


def run(repeat: int = 5, threads=None, n: int = 131072, nnz: int = 2_000_000, features: int = 64,
        spgemm_n: int = 8192, spgemm_per_row: int = 8, bsr_n: int = 8192, blocksize: int = 16,
        block_density: float = 0.02, quick: bool = False):
    torch, _, nthreads = peers(threads)
    if torch is None:
        print("bench grad needs torch==2.13.0")
        return
    import sparsetensor.torch as stt

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{nthreads} threads for ours and torch; load average {load:.2f}")
    records = []

    def csr_leaf(crow, col, val, shape):
        v = torch.from_numpy(val).requires_grad_()
        return v, (lambda: torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), v, shape))

    # -- GCN layer ----------------------------------------------------------------------------
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, features, generator=g).requires_grad_()
    W = (torch.randn(features, features, generator=g) / 8).requires_grad_()
    G = torch.randn(n, features, generator=g)
    for name, maker in (("uniform", uniform_csr), ("rmat", rmat_csr)):
        crow, col, val = maker(n, nnz, 1)
        v, build = csr_leaf(crow, col, val, (n, n))
        # torch: a CSR leaf (its constructor's backward from a values leaf densifies n x n)
        A_leaf = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col),
                                         torch.from_numpy(val.copy()), (n, n)).requires_grad_()

        def ours_step():
            X.grad = W.grad = v.grad = None
            stt.matmul(build(), X @ W).backward(G)

        def torch_step():
            X.grad = W.grad = A_leaf.grad = None
            torch.sparse.mm(A_leaf, X @ W).backward(G)

        ours_step()
        ours = [t.grad.clone() for t in (X, W, v)]
        torch_step()
        assert torch.equal(A_leaf.grad.col_indices(), A_leaf.col_indices())
        for a, b in zip(ours, (X.grad, W.grad, A_leaf.grad.values())):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
        rec = {"case": f"GCN layer fwd+bwd, {name}, {n} rows, nnz={col.size}, {features} features",
               "ours_s": median_time(ours_step, repeat), "torch_s": median_time(torch_step, repeat)}
        records.append(rec)
        print(f"  {rec['case']}: done")

    # -- sparse @ sparse backward vs densifying ------------------------------------------------
    crow, col, val = uniform_csr(spgemm_n, spgemm_n * spgemm_per_row, 2)
    va, build_a = csr_leaf(crow, col, val, (spgemm_n, spgemm_n))
    crow2, col2, val2 = uniform_csr(spgemm_n, spgemm_n * spgemm_per_row, 3)
    vb, build_b = csr_leaf(crow2, col2, val2, (spgemm_n, spgemm_n))

    def ours_spgemm():
        va.grad = vb.grad = None
        C = stt.matmul(build_a(), build_b())
        stt.values(C).sum().backward()

    def torch_dense_spgemm():
        va.grad = vb.grad = None
        (build_a().to_dense() @ build_b().to_dense()).sum().backward()

    _spgemm_check(torch, ours_spgemm, torch_dense_spgemm, va, vb, build_a, build_b)
    records.append({"case": f"sparse @ sparse fwd+bwd, csr {spgemm_n}^2, nnz={col.size}+{col2.size}",
                    "ours_s": median_time(ours_spgemm, repeat), "torch_s": median_time(torch_dense_spgemm, repeat),
                    "ours_peak_mb": peak_mb(ours_spgemm), "torch_peak_mb": peak_mb(torch_dense_spgemm),
                    "torch_how": "densified"})
    print(f"  {records[-1]['case']}: done")

    # -- BSR @ dense backward vs densifying -----------------------------------------------------------
    nb = bsr_n // blocksize
    bcrow, bcol, _ = uniform_csr(nb, int(nb * nb * block_density), 4)
    bval = np.random.default_rng(5).standard_normal((bcol.size, blocksize, blocksize)).astype(np.float32)
    vbsr = torch.from_numpy(bval).requires_grad_()

    def build_bsr():
        return torch.sparse_bsr_tensor(torch.from_numpy(bcrow), torch.from_numpy(bcol), vbsr, (bsr_n, bsr_n))

    XB = torch.randn(bsr_n, features, generator=g).requires_grad_()
    GB = torch.randn(bsr_n, features, generator=g)

    def ours_bsr():
        vbsr.grad = XB.grad = None
        stt.matmul(build_bsr(), XB).backward(GB)

    def torch_dense_bsr():
        vbsr.grad = XB.grad = None
        (build_bsr().to_dense() @ XB).backward(GB)

    ours_bsr()
    ref = (vbsr.grad.clone(), XB.grad.clone())
    torch_dense_bsr()
    torch.testing.assert_close(ref[0], vbsr.grad, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ref[1], XB.grad, rtol=1e-3, atol=1e-3)
    records.append({"case": f"BSR @ dense fwd+bwd, {bsr_n}^2, {blocksize}x{blocksize} blocks, nnz={bcol.size} "
                            f"blocks, {features} features",
                    "ours_s": median_time(ours_bsr, repeat), "torch_s": median_time(torch_dense_bsr, repeat),
                    "ours_peak_mb": peak_mb(ours_bsr), "torch_peak_mb": peak_mb(torch_dense_bsr),
                    "torch_how": "densified"})
    print(f"  {records[-1]['case']}: done")

    rows = []
    for r in records:
        r["torch_over_ours"] = r["torch_s"] / r["ours_s"]
        rows.append([r["case"], r["ours_s"], r["torch_s"], r["torch_over_ours"],
                     r.get("ours_peak_mb", ""), r.get("torch_peak_mb", "")])
    print_table(["case", "ours s", "torch s", "torch/ours", "ours peak MiB", "torch peak MiB"], rows)
    path = write_json("grad_quick" if quick else "grad", {"threads": nthreads, "load": load, "records": records})
    print(f"wrote {path}")


def _spgemm_check(torch, ours, ref, va, vb, build_a, build_b):
    """Our masked gradients equal the densified ones at the patterns."""
    ours()
    ga, gb = va.grad.clone(), vb.grad.clone()
    ref()
    torch.testing.assert_close(ga, va.grad, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(gb, vb.grad, rtol=1e-3, atol=1e-3)
