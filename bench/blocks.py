"""Block constructions, element selections and reshapes: ours vs SciPy, in one process.

- ``kron(A, B)``: A 20,000 x 20,000 with about 10 nnz per row (csr, float64), B a 4 x 4
  matrix of 8 nnz (SciPy ``sp.kron(A, B, format="csr")``: the result in A's layout, as ours);
- ``block_diag`` of 16 such 10,000 x 10,000 matrices (``sp.block_diag(..., format="csr")``);
- ``hstack`` / ``vstack`` of 4 50,000 x 50,000 matrices (``sp.hstack``/``sp.vstack``, csr);
- ``tril`` / ``triu`` of a 200,000 x 200,000 csr matrix (``sp.tril``/``sp.triu``, csr);
- ``eliminate_zeros`` of that matrix with about 30% stored zeros (SciPy's in place, on a copy
  made outside the timing; ours takes new arrays);
- ``reshape`` of it as COO to 400,000 x 100,000 (SciPy ``coo_array.reshape``).

Ratios are SciPy's time over ours (above 1: ours is faster). Ours runs with ``threads``
(default: all CPUs), SciPy single-threaded. Run with ``python -m bench.blocks``.
"""

from __future__ import annotations

import os

import numpy as np

import sparsetensor as st
from sparsetensor._cli._commands import _random_csr_arrays

from ._common import median_time, peers, print_table, write_json


def _csr(n, per_row, seed):
    crow, col, val = _random_csr_arrays(n, per_row, seed=seed)
    return st.sparse_csr_tensor(crow, col, val.astype(np.float64), (n, n))


def run(repeat=7, threads=None):
    _, sp, nthreads = peers(threads)
    st.set_num_threads(nthreads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{nthreads} threads for ours; SciPy is single-threaded; load average {load:.2f}")
    rows, records = [], []

    def record(case, ours, scipy_fn):
        t_ours, t_sp = median_time(ours, repeat), median_time(scipy_fn, repeat)
        records.append({"case": case, "ours_s": t_ours, "scipy_s": t_sp})
        rows.append([case, f"{t_ours * 1e3:.2f}", f"{t_sp * 1e3:.2f}", f"{t_sp / t_ours:.2f}"])

    A = _csr(20_000, 10, 1)
    B = st.from_dense(np.array([[1.0, 0, 2, 0], [0, 3, 0, 0], [4, 0, 0, 5], [0, 0, 6, 7]]), "csr")
    sA, sB = A.to_scipy(), B.to_scipy()
    record("kron(A 20k, B 4x4)", lambda: st.kron(A, B), lambda: sp.kron(sA, sB, format="csr"))
    parts = [_csr(10_000, 10, s) for s in range(16)]
    sparts = [p.to_scipy() for p in parts]
    record("block_diag(16 x 10k)", lambda: st.block_diag(*parts), lambda: sp.block_diag(sparts, format="csr"))
    four = [_csr(50_000, 10, s) for s in range(4)]
    sfour = [p.to_scipy() for p in four]
    record("hstack(4 x 50k)", lambda: st.hstack(four), lambda: sp.hstack(sfour, format="csr"))
    record("vstack(4 x 50k)", lambda: st.vstack(four), lambda: sp.vstack(sfour, format="csr"))
    M = _csr(200_000, 10, 7)
    sM = M.to_scipy()
    record("tril(200k)", lambda: st.tril(M), lambda: sp.tril(sM, format="csr"))
    record("triu(200k, 1)", lambda: st.triu(M, 1), lambda: sp.triu(sM, 1, format="csr"))
    v = M.values().copy()
    v[np.random.default_rng(3).random(v.size) < 0.3] = 0
    Z = M._replace_values(v)
    sZ = Z.to_scipy()
    record("eliminate_zeros(200k, 30% zeros)", lambda: Z.clone().eliminate_zeros(),
           lambda: sZ.copy().eliminate_zeros())
    C = M.to_sparse_coo()
    sC = C.to_scipy()
    record("reshape coo(200k) -> (400k, 100k)", lambda: C.reshape(400_000, 100_000),
           lambda: sC.reshape((400_000, 100_000)))
    print_table(["case", "ours ms", "scipy ms", "scipy/ours"], rows)
    print("eliminate_zeros: both times include a copy of the matrix (SciPy's is in place)")
    write_json("blocks", {"threads": nthreads, "load": load, "records": records})
    return records


if __name__ == "__main__":
    run()
