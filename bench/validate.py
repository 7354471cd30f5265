"""Full CSR validation: ours vs PyTorch's check_invariants=True vs SciPy's check_format + sortedness.

Inputs: 1M rows with 2M and 20M nnz, int32 and int64 indices. Also reports the
time to read the index arrays once at the machine's measured read bandwidth.
"""

from __future__ import annotations

import numpy as np

import sparsetensor as st
from sparsetensor._cli._commands import _random_csr_arrays

from ._common import peers, median_time, print_table, read_bandwidth, write_json


def run(sizes=(2_000_000, 20_000_000), nrows=1_000_000, repeat=7, threads=None):
    torch, sp, nthreads = peers(threads)
    bw = read_bandwidth()
    print(f"read bandwidth {bw / 1e9:.2f} GB/s (one thread, NumPy sum); {nthreads} threads for ours and torch")
    rows, records = [], []
    for nnz in sizes:
        crow64, col64, val = _random_csr_arrays(nrows, nnz // nrows, seed=1, index_dtype=np.int64)
        for idt in (np.int32, np.int64):
            crow, col = crow64.astype(idt), col64.astype(idt)
            shape = (nrows, nrows)
            t = st.sparse_csr_tensor(crow, col, val, size=shape, check_invariants=False)
            ours = median_time(lambda: t.check_invariants(threads=threads), repeat)
            read = (crow.nbytes + col.nbytes) / bw
            rec = {"nnz": int(col.size), "index_dtype": np.dtype(idt).name, "ours_s": ours, "read_s": read}
            if torch is not None:
                tc, tcol, tv = torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val)
                checked = median_time(lambda: torch.sparse_csr_tensor(tc, tcol, tv, shape, check_invariants=True),
                                      repeat)
                unchecked = median_time(lambda: torch.sparse_csr_tensor(tc, tcol, tv, shape,
                                                                        check_invariants=False), repeat)
                rec["torch_s"] = max(checked - unchecked, 1e-9)
            if sp is not None:
                m = sp.csr_array((val, col, crow), shape=shape, copy=False)

                def scipy_check():
                    m.check_format(full_check=True)
                    # forget the cached flag so that the sortedness scan runs again (assigning
                    # False would cache False and skip the scan)
                    m.__dict__.pop("_has_sorted_indices", None)
                    return m.has_sorted_indices

                rec["scipy_s"] = median_time(scipy_check, repeat)
            records.append(rec)
            rows.append([f"{rec['nnz'] / 1e6:.1f}M", rec["index_dtype"], 1e3 * ours, 1e3 * read, ours / read,
                         (rec.get("torch_s", float("nan")) / ours), (rec.get("scipy_s", float("nan")) / ours)])
    print_table(["nnz", "index", "ours ms", "read-once ms", "ours/read", "torch/ours", "scipy/ours"], rows)
    path = write_json("validate", {"threads": nthreads, "read_bandwidth_Bps": bw, "results": records})
    print(f"wrote {path}")
    return records
