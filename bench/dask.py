"""Dask arrays of sparse chunks: sparsetensor chunks vs scipy.sparse chunks, and vs one process.

A random csr matrix (float64, int32 indices, ``nnz`` entries, uniform columns) is cut into row
blocks (``chunks`` per worker) and persisted on a ``distributed.LocalCluster`` of 2 worker
processes x ``threads // 2`` threads; the same row blocks are made of sparsetensor tensors and of
``scipy.sparse.csr_matrix`` (the setup Dask users have today). Timed, after a warm-up:

- SpMM ``X @ D`` with ``D`` dense (ncols x 16) on the workers, gathered to the client;
- ``X.sum(axis=0)`` and ``X.sum(axis=1)``.

Dask's own ``x @ D`` and ``x.sum(axis=...)`` do not run on scipy.sparse chunks (NumPy's matmul
gufunc and ``sum(keepdims=)`` refuse them), so both chunk types are timed through the same
``blockwise``/``map_blocks`` graph (chunk @ D, chunk.sum(axis)); ours is also timed through
the plain Dask API (``x @ D``, ``x.sum(axis)``). The last column is one process of sparsetensor
with all ``threads`` threads on the whole matrix. The machine may be shared: compare only
ratios from one run.
"""

from __future__ import annotations

import os

import numpy as np

import sparsetensor as st

from ._common import median_time, print_table, write_json

N = 16  # SpMM columns


def _matrix(nrows: int, ncols: int, nnz: int, seed: int = 0):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, nrows, nnz))
    cols = rng.integers(0, ncols, nnz)
    A = sp.csr_matrix((rng.standard_normal(nnz), (rows, cols)), shape=(nrows, ncols))
    A.sum_duplicates()
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    return A


def _graphs(x, D, nblocks):
    """SpMM and the two sums of ``x`` through the same explicit graph, whatever the chunk type.

    The chunk functions are local: the workers cannot import ``bench``, so they travel by value.
    """
    import dask.array as da

    def _mm(a, d):
        return np.asarray(a @ d)

    def _colsum(b):
        return np.asarray(b.sum(axis=0)).reshape(1, -1)

    def _rowsum(b):
        return np.asarray(b.sum(axis=1)).reshape(-1)

    mm = da.blockwise(_mm, "ij", x, "ik", D, "kj", dtype=np.float64, concatenate=True)
    s0 = x.map_blocks(_colsum, chunks=((1,) * nblocks, x.chunks[1]), dtype=np.float64).sum(axis=0)
    s1 = x.map_blocks(_rowsum, drop_axis=1, chunks=(x.chunks[0],), dtype=np.float64)
    return {"spmm": mm, "sum0": s0, "sum1": s1}


def run(repeat: int = 5, threads=None, nrows: int = 2_000_000, ncols: int = 2_000_000, nnz: int = 40_000_000,
        chunks_per_worker: int = 4):
    import dask.array as da
    import distributed

    import sparsetensor.dask  # noqa: F401 (registers the chunk type)

    threads = threads or len(os.sched_getaffinity(0))
    per_worker = max(1, threads // 2)
    load = os.getloadavg()[0]
    A = _matrix(nrows, ncols, nnz)
    t = st.from_scipy(A)
    Dn = np.random.default_rng(1).standard_normal((ncols, N))
    nblocks = 2 * chunks_per_worker
    rows = -(-nrows // nblocks)
    print(f"{nrows} x {ncols}, nnz {A.nnz}, {nblocks} row blocks, 2 workers x {per_worker} threads "
          f"(single process: {threads} threads); load average {load:.2f}")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=per_worker, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        client.run(st.set_num_threads, per_worker)  # each worker's kernels use its own threads
        ours = client.persist(st.dask.from_sparse(t, chunks=(rows, -1)))
        theirs = client.persist(da.from_array(A, chunks=(rows, -1), asarray=False))
        D = client.persist(da.from_array(Dn, chunks=(-1, -1)))
        distributed.wait([ours, theirs, D])
        graphs = {"ours": _graphs(ours, D, nblocks), "scipy": _graphs(theirs, D, nblocks),
                  "ours, dask API": {"spmm": ours @ D, "sum0": ours.sum(axis=0), "sum1": ours.sum(axis=1)}}
        st.set_num_threads(threads)
        single = {"spmm": lambda: t @ Dn, "sum0": lambda: t.sum(axis=0), "sum1": lambda: t.sum(axis=1)}
        headers = ["op", "scipy chunks (s)", "ours (s)", "scipy/ours", "ours, dask API (s)", "1 process (s)",
                   "dask/1 process"]
        table, records = [], []
        for op in ("spmm", "sum0", "sum1"):
            ref = np.asarray(single[op]())
            times = {}
            for name, g in graphs.items():
                got = np.asarray(g[op].compute())
                if not np.allclose(got.ravel(), ref.ravel(), rtol=1e-9, atol=1e-9):
                    raise AssertionError(f"{op} with {name} chunks differs from the single-process result")
                times[name] = median_time(lambda g=g: g[op].compute(), repeat)
            times["single"] = median_time(single[op], repeat)
            table.append([op, times["scipy"], times["ours"], times["scipy"] / times["ours"], times["ours, dask API"],
                          times["single"], times["ours"] / times["single"]])
            records.append({"op": op, **{k + "_s": v for k, v in times.items()}})
    print_table(headers, table)
    write_json("dask", {"nrows": nrows, "ncols": ncols, "nnz": int(A.nnz), "blocks": nblocks, "threads": threads,
                        "workers": 2, "threads_per_worker": per_worker, "load_average": load, "results": records})
