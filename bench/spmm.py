"""Sparse x dense products: ours vs SciPy and PyTorch, in one process.

- CSR @ dense: 200,000 x 200,000, about 10 nnz per row, float32, int32 indices, with a
  dense operand of N = 1 (a 1-d vector: SpMV), 32 and 128 columns. SciPy ``csr_array @ D``
  (single-threaded), PyTorch ``t @ D`` and ``torch.sparse.mm(t, D)`` on a CSR tensor with
  the same int32 indices (the faster of the two is torch's time);
- CSC @ dense, N = 32: the transpose view of the same matrix (ours runs the scatter kernel
  on it; SciPy ``csr.T @ D``, torch ``t.mT @ D``);
- BSR @ dense: 16384 x 16384, 16 x 16 blocks, 2% of the blocks, float32, N = 64, against
  PyTorch's BSR tensor and SciPy ``bsr_array``.

Each time is the median of ``repeat`` runs after a warm-up. The table gives the peers'
times over ours (above 1: ours is faster), our GFLOP/s (2 flops per multiply-add of the
sparse product) and our effective bandwidth: the bytes a product must move at least
(values, indices, the dense operand once, the output) over the time, next to the
measured single-thread read bandwidth. The machine may be shared: the load average is
printed, and only ratios from one run should be compared.
"""

from __future__ import annotations

import os

import numpy as np

import sparsetensor as st
from sparsetensor.ops.blas import matmul

from ._common import median_time, peers, print_table, read_bandwidth, write_json


def _random_csr(n: int, per_row: int, seed: int):
    """A random n x n pattern with about ``per_row`` distinct sorted columns per row, int32 indices."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(per_row // 2, per_row + per_row // 2 + 1, size=n)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    keys = np.unique(rows * n + rng.integers(0, n, size=rows.size))
    rows, cols = np.divmod(keys, n)
    crow = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=crow[1:])
    return crow, cols.astype(np.int32), rng.standard_normal(cols.size).astype(np.float32)


def _check(ours, ref, what):
    err = float(np.max(np.abs(ours - ref))) if ours.size else 0.0
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    if err > 1e-4 * scale:
        raise AssertionError(f"{what}: ours differs from the reference by {err}")


def run(repeat: int = 7, threads=None, n: int = 200_000, per_row: int = 10, columns=(1, 32, 128),
        bsr_n: int = 16384, blocksize: int = 16, block_density: float = 0.02, bsr_columns: int = 64):
    torch, sp, nthreads = peers(threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{nthreads} threads for ours and torch; SciPy is single-threaded; load average {load:.2f}")
    bandwidth = read_bandwidth()
    records = []

    def record(case, flops, nbytes, ours, scipy_fn=None, torch_fns=()):
        rec = {"case": case, "flops": flops, "bytes": nbytes, "ours_s": median_time(ours, repeat)}
        if sp is not None and scipy_fn is not None:
            rec["scipy_s"] = median_time(scipy_fn, repeat)
        if torch is not None and torch_fns:
            rec["torch_s"] = min(median_time(f, repeat) for f in torch_fns)
        peer = [rec[k] for k in ("scipy_s", "torch_s") if k in rec]
        rec["best_peer_over_ours"] = min(peer) / rec["ours_s"] if peer else None
        rec["gflops"] = flops / rec["ours_s"] / 1e9
        rec["gbytes_per_s"] = nbytes / rec["ours_s"] / 1e9
        records.append(rec)
        print(f"  {case}: done")

    # -- CSR @ dense --------------------------------------------------------------------------
    crow, col, val = _random_csr(n, per_row, seed=1)
    shape = (n, n)
    nnz = col.size
    ours_csr = st.sparse_csr_tensor(crow, col, val, size=shape)  # checked once, here
    scipy_csr = sp.csr_array((val, col, crow), shape=shape, copy=False) if sp is not None else None
    torch_csr = None
    if torch is not None:
        torch_csr = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val),
                                            shape, check_invariants=False)
    rng = np.random.default_rng(3)
    for N in columns:
        d = rng.standard_normal(n if N == 1 else (n, N)).astype(np.float32)
        td = torch.from_numpy(d) if torch is not None else None
        if scipy_csr is not None:
            _check(matmul(ours_csr, d, threads=threads), scipy_csr @ d, f"csr @ dense N={N}")
        nbytes = nnz * 8 + (n + 1) * 4 + 2 * n * N * 4
        torch_fns = ()
        if torch is not None:
            torch_fns = (lambda: torch_csr @ td,) + (() if N == 1 else (lambda: torch.sparse.mm(torch_csr, td),))
        record(f"csr @ dense N={N}" + (" (spmv)" if N == 1 else ""), 2 * nnz * N, nbytes,
               lambda: matmul(ours_csr, d, threads=threads),
               (lambda: scipy_csr @ d) if scipy_csr is not None else None, torch_fns)

    # the transpose view: csc, run by the scatter kernel
    N = 32
    d = rng.standard_normal((n, N)).astype(np.float32)
    td = torch.from_numpy(d) if torch is not None else None
    ours_csc = ours_csr.mT
    scipy_csc = scipy_csr.T if scipy_csr is not None else None
    torch_csc = torch_csr.mT if torch is not None else None
    if scipy_csc is not None:
        _check(matmul(ours_csc, d, threads=threads), scipy_csc @ d, "csc @ dense")
    record(f"csc @ dense N={N}", 2 * nnz * N, nnz * 8 + (n + 1) * 4 + 2 * n * N * 4,
           lambda: matmul(ours_csc, d, threads=threads), (lambda: scipy_csc @ d) if scipy_csc is not None else None,
           (lambda: torch_csc @ td,) if torch is not None else ())
    del ours_csr, ours_csc, scipy_csr, scipy_csc, torch_csr, torch_csc, crow, col, val, d, td

    # -- BSR @ dense --------------------------------------------------------------------------
    nb = bsr_n // blocksize
    brng = np.random.default_rng(4)
    nblocks = int(round(block_density * nb * nb))
    keys = np.sort(brng.choice(nb * nb, size=nblocks, replace=False))
    brow, bcol = np.divmod(keys, nb)
    bcrow = np.zeros(nb + 1, dtype=np.int32)
    np.cumsum(np.bincount(brow, minlength=nb), out=bcrow[1:])
    bcol = bcol.astype(np.int32)
    bval = brng.standard_normal((nblocks, blocksize, blocksize)).astype(np.float32)
    bshape = (bsr_n, bsr_n)
    ours_bsr = st.sparse_bsr_tensor(bcrow, bcol, bval, size=bshape)
    d = brng.standard_normal((bsr_n, bsr_columns)).astype(np.float32)
    scipy_bsr = sp.bsr_array((bval, bcol, bcrow), shape=bshape) if sp is not None else None
    torch_fns = ()
    if torch is not None:
        torch_bsr = torch.sparse_bsr_tensor(torch.from_numpy(bcrow), torch.from_numpy(bcol), torch.from_numpy(bval),
                                            bshape, check_invariants=False)
        td = torch.from_numpy(d)
        torch_fns = (lambda: torch_bsr @ td, lambda: torch.sparse.mm(torch_bsr, td))
    if scipy_bsr is not None:
        _check(matmul(ours_bsr, d, threads=threads), scipy_bsr @ d, "bsr @ dense")
    bs2 = blocksize * blocksize
    record(f"bsr {blocksize}x{blocksize} @ dense N={bsr_columns}", 2 * nblocks * bs2 * bsr_columns,
           nblocks * (bs2 * 4 + 4) + (nb + 1) * 4 + 2 * bsr_n * bsr_columns * 4,
           lambda: matmul(ours_bsr, d, threads=threads),
           (lambda: scipy_bsr @ d) if scipy_bsr is not None else None, torch_fns)

    def fmt(rec, key):
        return "n/a" if key not in rec else rec[key] / rec["ours_s"]

    table = [[r["case"], 1e3 * r["ours_s"], fmt(r, "scipy_s"), fmt(r, "torch_s"), r["gflops"], r["gbytes_per_s"]]
             for r in records]
    print_table(["case", "ours ms", "scipy/ours", "torch/ours", "GFLOP/s", "GB/s"], table)
    print(f"single-thread read bandwidth: {bandwidth / 1e9:.1f} GB/s")
    path = write_json("spmm", {"threads": nthreads, "load_average": load, "read_bandwidth": bandwidth,
                               "results": records})
    print(f"wrote {path}")
    return records


if __name__ == "__main__":  # pragma: no cover
    run()
