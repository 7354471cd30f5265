"""Layout conversions: ours vs SciPy and PyTorch, in one process.

- CSR -> CSC: 20M nnz, 1M x 1M, float32, int32 indices (SciPy ``tocsc()``, torch ``to_sparse_csc()``);
- coalesced COO -> CSR: the same matrix (SciPy ``tocsr()`` of a COO known to be canonical,
  torch ``to_sparse_csr()`` of a coalesced COO; torch's COO indices are int64);
- CSR -> dense and dense -> CSR: 8192 x 8192 float32, 1% nonzeros;
- dense -> BSR with 16 x 16 blocks: the same array.

The dense rows need ``st.from_dense``/``t.to_dense()``; where this build lacks them they
print as ``n/a``. Ratios are the peer's time over ours (above 1: ours is faster).
"""

from __future__ import annotations

import os

import numpy as np

import sparsetensor as st
from sparsetensor._cli._commands import _random_csr_arrays

from ._common import peers, median_time, print_table, write_json


def _optional(fn):
    """fn's result, or None when this build does not have the kernels it needs."""
    try:
        return fn()
    except (NotImplementedError, AttributeError, ImportError):
        return None


def _time(fn, repeat):
    return None if fn is None else median_time(fn, repeat)


def run(repeat=5, threads=None, nnz=20_000_000, n=1_000_000, dense_n=8192, density=0.01):
    torch, sp, nthreads = peers(threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{nthreads} threads for ours and torch; SciPy is single-threaded; load average {load:.2f} "
          f"(a busy machine slows the threaded runs most)")
    records = []

    def record(case, ours, scipy_fn=None, torch_fn=None):
        rec = {"case": case, "ours_s": _time(ours, repeat)}
        if sp is not None and scipy_fn is not None:
            rec["scipy_s"] = _time(scipy_fn, repeat)
        if torch is not None and torch_fn is not None:
            rec["torch_s"] = _time(torch_fn, repeat)
        records.append(rec)
        print(f"  {case}: done")

    # -- sparse -> sparse -----------------------------------------------------------------------
    crow, col, val = _random_csr_arrays(n, max(1, nnz // n), seed=1, index_dtype=np.int32)
    shape = (n, n)
    csr = st.CompressedTensor(crow, col, val, shape, st.sparse_csr, canonical=True)  # known valid: no scan
    ours_csc = csr.to_sparse_csc(threads=threads)
    scipy_csr = torch_csr = None
    if sp is not None:
        scipy_csr = sp.csr_array((val, col, crow), shape=shape, copy=False)
        ref = scipy_csr.tocsc()
        assert (ref.indptr == ours_csc.ccol_indices()).all() and (ref.indices == ours_csc.row_indices()).all()
    if torch is not None:
        torch_csr = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val),
                                            shape, check_invariants=False)
    record(f"csr -> csc ({col.size / 1e6:.0f}M nnz)", lambda: csr.to_sparse_csc(threads=threads),
           scipy_csr.tocsc if sp is not None else None,
           torch_csr.to_sparse_csc if torch is not None else None)
    del ours_csc

    rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(crow))
    coo = st.sparse_coo_tensor(np.stack([rows, col]), val, size=shape, check_invariants=False, is_coalesced=True)
    scipy_coo = torch_coo = None
    if sp is not None:
        scipy_coo = sp.coo_array((val, (rows, col)), shape=shape)
        scipy_coo.has_canonical_format = True  # it is: SciPy skips sum_duplicates, as we do
    if torch is not None:
        torch_coo = torch.sparse_coo_tensor(torch.from_numpy(np.stack([rows, col]).astype(np.int64)),
                                            torch.from_numpy(val), shape, is_coalesced=True)
    record(f"coalesced coo -> csr, unchecked int32 ({col.size / 1e6:.0f}M nnz)",
           lambda: coo.to_sparse_csr(threads=threads),
           scipy_coo.tocsr if sp is not None else None,
           torch_coo.to_sparse_csr if torch is not None else None)
    # built with the O(nnz) check (the default), so the conversion may trust the column indices
    for idt in (np.int32, np.int64):
        coo = st.sparse_coo_tensor(np.stack([rows, col]).astype(idt), val, size=shape, is_coalesced=True)
        record(f"coalesced coo -> csr, checked {np.dtype(idt).name}", lambda: coo.to_sparse_csr(threads=threads),
               scipy_coo.tocsr if sp is not None else None,
               torch_coo.to_sparse_csr if torch is not None else None)
    del coo, scipy_coo, torch_coo, rows, csr, scipy_csr, torch_csr

    # -- dense <-> sparse -----------------------------------------------------------------------
    rng = np.random.default_rng(2)
    a = np.zeros((dense_n, dense_n), np.float32)
    k = int(density * a.size)
    a.flat[rng.choice(a.size, size=k, replace=False)] = rng.standard_normal(k).astype(np.float32)
    int64 = np.dtype(np.int64)
    ours_csr = _optional(lambda: st.from_dense(a, "csr", index_dtype=int64))
    ta = torch.from_numpy(a) if torch is not None else None
    sa = sp.csr_array(a) if sp is not None else None
    has_to_dense = ours_csr is not None and _optional(ours_csr.to_dense) is not None
    record(f"csr -> dense ({dense_n}^2, {density:.0%})",
           (lambda: ours_csr.to_dense(threads=threads)) if has_to_dense else None,
           sa.toarray if sp is not None else None,
           ta.to_sparse_csr().to_dense if torch is not None else None)
    record(f"dense -> csr ({dense_n}^2, {density:.0%})",
           None if ours_csr is None else lambda: st.from_dense(a, "csr", index_dtype=int64, threads=threads),
           (lambda: sp.csr_array(a)) if sp is not None else None,
           ta.to_sparse_csr if torch is not None else None)
    ours_bsr = _optional(lambda: st.from_dense(a, "bsr", blocksize=(16, 16), index_dtype=int64))
    record(f"dense -> bsr 16x16 ({dense_n}^2, {density:.0%})",
           None if ours_bsr is None else lambda: st.from_dense(a, "bsr", blocksize=(16, 16), index_dtype=int64,
                                                                threads=threads),
           (lambda: sp.bsr_array(a, blocksize=(16, 16))) if sp is not None else None,
           (lambda: ta.to_sparse_bsr((16, 16))) if torch is not None else None)

    table = []
    for rec in records:
        ours = rec["ours_s"]

        def ratio(key):
            peer = rec.get(key)
            return "n/a" if ours is None or peer is None else peer / ours

        table.append([rec["case"], "n/a" if ours is None else 1e3 * ours, ratio("scipy_s"), ratio("torch_s")])
    print_table(["case", "ours ms", "scipy/ours", "torch/ours"], table)
    path = write_json("convert", {"threads": nthreads, "load_average": load, "results": records})
    print(f"wrote {path}")
    return records


if __name__ == "__main__":  # pragma: no cover
    run()
