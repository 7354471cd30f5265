"""COO coalesce: ours vs ``torch.sparse_coo_tensor(i, v, shape).coalesce()`` vs SciPy's
``coo_array((v, (r, c)), shape).sum_duplicates()``.

Input: ``nnz`` entries of a 1M x 1M matrix, 20% of them repeats of other entries, shuffled;
float32 values, int64 indices. Each peer builds its tensor from the same arrays inside the
timed call (no copies for torch; SciPy converts the indices to its int32 index dtype).
"""

from __future__ import annotations

import numpy as np

import sparsetensor as st
try:
    from sparsetensor._backend.cpu._coalesce import coalesce
except ImportError:  # a build from before the backend became a folder (python -m bench builds A/B)
    from sparsetensor._backend._coalesce import coalesce

from ._common import peers, median_time, print_table, write_json

SHAPE = (1_000_000, 1_000_000)


def make_input(nnz: int, shape=SHAPE, duplicates: float = 0.2, seed: int = 0):
    """``(indices (2, nnz) int64, values (nnz,) float32)``: ``nnz * duplicates`` entries repeat others."""
    rng = np.random.default_rng(seed)
    n_unique = nnz - int(nnz * duplicates)
    keys = rng.integers(0, shape[0] * shape[1], n_unique)
    keys = np.concatenate([keys, rng.choice(keys, nnz - n_unique)])
    rng.shuffle(keys)
    indices = np.stack(np.divmod(keys, shape[1]))
    return indices, rng.random(nnz, dtype=np.float32)


def run(nnz=20_000_000, repeat=5, threads=None, shape=SHAPE):
    """Time one input size (or each of a sequence of sizes); return one dict per size."""
    torch, sp, nthreads = peers(threads)
    print(f"COO coalesce, shape {shape}, 20% duplicates, float32 values, int64 indices; "
          f"{nthreads} threads for ours and torch; medians of {repeat}")
    rows, records = [], []
    for n in (nnz,) if np.isscalar(nnz) else nnz:
        indices, values = make_input(int(n), shape)
        t = st.sparse_coo_tensor(indices, values, size=shape, check_invariants=False)
        result = coalesce(t, threads=threads)
        rec = {"nnz": int(n), "nnz_out": result.nnz,
               "ours_s": median_time(lambda: coalesce(t, threads=threads), repeat)}
        del result
        if torch is not None:
            ti, tv = torch.from_numpy(indices), torch.from_numpy(values)

            def torch_coalesce():
                return torch.sparse_coo_tensor(ti, tv, shape, check_invariants=False).coalesce()

            assert torch_coalesce()._nnz() == rec["nnz_out"]
            rec["torch_s"] = median_time(torch_coalesce, repeat)
        if sp is not None:
            def scipy_sum_duplicates():
                m = sp.coo_array((values, (indices[0], indices[1])), shape=shape)
                m.sum_duplicates()
                return m

            assert scipy_sum_duplicates().nnz == rec["nnz_out"]
            rec["scipy_s"] = median_time(scipy_sum_duplicates, repeat)
        peer_times = [rec[k] for k in ("torch_s", "scipy_s") if k in rec]
        if peer_times:
            rec["speedup_vs_best_peer"] = min(peer_times) / rec["ours_s"]
        records.append(rec)
        nan = float("nan")
        rows.append([f"{n / 1e6:g}M", 1e3 * rec["ours_s"], 1e3 * rec.get("torch_s", nan),
                     1e3 * rec.get("scipy_s", nan), rec.get("torch_s", nan) / rec["ours_s"],
                     rec.get("scipy_s", nan) / rec["ours_s"], rec.get("speedup_vs_best_peer", nan)])
    print_table(["nnz", "ours ms", "torch ms", "scipy ms", "torch/ours", "scipy/ours", "best peer/ours"], rows)
    path = write_json("coalesce", {"threads": nthreads, "shape": list(shape), "duplicates": 0.2,
                                   "repeat": repeat, "results": records})
    print(f"wrote {path}")
    return records
