"""Dask arrays of sparse chunks: sparsetensor chunks vs scipy.sparse chunks, and vs one process.

Setup (the same for both chunk types, so that only the chunks differ):

- a random csr matrix (float64, int32 indices, ``nnz`` entries, uniform columns) is saved
  with :func:`sparsetensor.save`; ``st.dask.load`` cuts it into ``2 x chunks_per_worker``
  row blocks, each task mapping the file and reading its rows (nothing large in the graph);
- the scipy side is the same blocks turned into ``scipy.sparse.csr_matrix`` on the workers
  (``to_scipy()``, no copy): the setup Dask users have today;
- both arrays are persisted on a ``distributed.LocalCluster`` of 2 worker processes x
  ``threads // 2`` threads before any timing, and the dense ``D`` (ncols x 16) is copied to
  both workers (the active memory manager is off, so the copies stay; work stealing is off, so
  tasks run where their chunks are): the timings are of the operation, not of shipping the
  matrix or ``D``.

Timed, after a warm-up, the setups taking turns (``repeat`` rounds, medians): SpMM ``X @ D``,
``X.sum(axis=0)``, ``X.sum(axis=1)``. The workers' kernels run ``threads // 2`` threads each
(``OMP_NUM_THREADS`` in their environment, checked).

- ``on workers``: ``persist`` + ``wait`` (the result stays in the workers' memory, the
  way a pipeline would go on with it), then the result is released;
- ``to client``: ``compute()`` (the result also crosses to the client process and its
  chunks are joined there: 256 MB for SpMM at the default size);
- ``1 process``: sparsetensor on the whole matrix in this process with all ``threads``.

Dask's own ``x @ D`` and ``x.sum(axis=...)`` do not run on scipy.sparse chunks (NumPy's matmul
gufunc and ``sum(keepdims=)`` refuse them), so both chunk types are timed through the same
``blockwise``/``map_blocks`` graph (chunk @ D, chunk.sum(axis)); ours is also timed through
the plain Dask API (``x @ D``, ``x.sum(axis)``). A second table splits one ``on workers`` run
of each setup by Dask's task stream: the tasks' compute seconds (summed), the transfers
between workers, and the share of the wall time the two workers spent computing; and the
chunk kernels alone (one thread, this process, summed over the chunks, halved for two
workers): the floor a two-worker run can reach. The machine may be shared: compare only
ratios from one run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
import tempfile

import numpy as np

import sparsetensor as st

from ._common import median_time, print_table, write_json

N = 16  # SpMM columns
OPS = ("spmm", "sum0", "sum1")


def _matrix(nrows: int, ncols: int, nnz: int, seed: int = 0):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, nrows, nnz))
    cols = rng.integers(0, ncols, nnz)
    A = sp.csr_matrix((rng.standard_normal(nnz), (rows, cols)), shape=(nrows, ncols))
    A.sum_duplicates()
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    return A


# The chunk functions are local: the workers cannot import ``bench``, so they travel by value.
def _graphs(x, D, nblocks):
    """SpMM and the two sums of ``x`` through the same explicit graph, whatever the chunk type."""
    import dask.array as da

    def _mm(blocks, ds):  # the blocks of a row of x and of D along the contracted dim (no concatenation)
        out = None
        for a, d in zip(blocks, ds):
            r = np.asarray(a @ d)
            out = r if out is None else out + r
        return out

    def _colsum(b):
        return np.asarray(b.sum(axis=0)).reshape(1, -1)

    def _rowsum(b):
        return np.asarray(b.sum(axis=1)).reshape(-1, 1)

    # concatenate=False: with True, Dask joins D's blocks for every task, a copy of D per task
    mm = da.blockwise(_mm, "ij", x, "ik", D, "kj", dtype=np.float64, concatenate=False)
    s0 = x.map_blocks(_colsum, chunks=((1,) * nblocks, x.chunks[1]), dtype=np.float64).sum(axis=0)
    # (rows, 1) blocks: with drop_axis=1 Dask would first join each block with itself along axis 1
    # (scipy.sparse.hstack of one block for scipy chunks: a copy), which is not the kernel's time
    s1 = x.map_blocks(_rowsum, chunks=(x.chunks[0], (1,)), dtype=np.float64)
    return {"spmm": mm, "sum0": s0, "sum1": s1}


def _kernels(blocks, Dn, to_scipy: bool) -> dict:
    """Seconds of each op's chunk function over all ``blocks``, one after another (one thread)."""
    out = {}
    chunks = [b.to_scipy() if to_scipy else b for b in blocks]
    fns = {"spmm": lambda b: b @ Dn, "sum0": lambda b: b.sum(axis=0), "sum1": lambda b: b.sum(axis=1)}
    for op, fn in fns.items():
        out[op] = sum(median_time(lambda b=b: fn(b), 3) for b in chunks)
    return out


def _on_workers(client, g) -> float:
    """Seconds to compute ``g`` into the workers' memory (persist + wait); then released and
    forgotten by the scheduler (untimed), so that the next run computes it again."""
    import distributed

    t0 = time.perf_counter()
    kept = client.persist(g)
    distributed.wait(kept)
    seconds = time.perf_counter() - t0
    futures = distributed.futures_of(kept)
    keys = [f.key for f in futures]
    del kept, futures
    while client.run_on_scheduler(lambda dask_scheduler: sum(k in dask_scheduler.tasks for k in keys)):
        time.sleep(0.005)
    return seconds


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _interleaved(runs: dict, repeat: int) -> dict:
    """The median seconds of each of ``runs`` (functions returning their own time), taking turns
    (one warm-up each, then ``repeat`` rounds of all), so a change in the machine's load hits all alike."""
    samples = {name: [] for name in runs}
    for name, fn in runs.items():
        fn()
    for _ in range(repeat):
        for name, fn in runs.items():
            samples[name].append(fn())
    return {name: statistics.median(v) for name, v in samples.items()}


def _stream(client, g) -> dict:
    """One ``on workers`` run of ``g`` split by the task stream: tasks, compute and transfer seconds, wall."""
    import distributed

    with distributed.get_task_stream(client) as ts:
        wall = _on_workers(client, g)
    compute = transfer = 0.0
    for task in ts.data:
        for s in task.get("startstops", ()):
            if s["action"] == "compute":
                compute += s["stop"] - s["start"]
            elif s["action"] == "transfer":
                transfer += s["stop"] - s["start"]
    return {"tasks": len(ts.data), "compute_s": compute, "transfer_s": transfer, "wall_s": wall}


def run(repeat: int = 5, threads=None, nrows: int = 2_000_000, ncols: int = 2_000_000, nnz: int = 40_000_000,
        chunks_per_worker: int = 4):
    import dask
    import dask.array as da
    import distributed
    import scipy.sparse as sp

    import sparsetensor.dask  # noqa: F401 (registers the chunk type)

    threads = threads or len(os.sched_getaffinity(0))
    per_worker = max(1, threads // 2)
    load = os.getloadavg()[0]
    A = _matrix(nrows, ncols, nnz)
    t = st.from_scipy(A)
    nblocks = 2 * chunks_per_worker
    rows = -(-nrows // nblocks)
    tmp = tempfile.mkdtemp(prefix="bench-dask-")
    path = os.path.join(tmp, "m.npz")
    st.save(path, t)
    print(f"{nrows} x {ncols}, nnz {A.nnz}, {nblocks} row blocks, 2 workers x {per_worker} threads "
          f"(single process: {threads} threads); load average {load:.2f}")
    # the data stays where it was persisted: no replica dropping (D on both workers), no stealing of
    # tasks away from their chunks (a stolen task ships its 60 MB chunk to the other worker)
    config = {"distributed.scheduler.active-memory-manager.start": False,
              "distributed.scheduler.work-stealing": False}
    try:
        with dask.config.set(config), \
                distributed.LocalCluster(n_workers=2, threads_per_worker=per_worker, processes=True,
                                         dashboard_address=":0", env={"OMP_NUM_THREADS": str(per_worker)}) as cluster, \
                distributed.Client(cluster) as client:
            # each worker's kernels use its own threads: OMP_NUM_THREADS in the workers' environment
            # (st.set_num_threads is per context: set by client.run, it would not reach the task threads)
            got = client.run(lambda: __import__("sparsetensor").num_threads())
            if set(got.values()) != {per_worker}:
                raise RuntimeError(f"the workers' kernels would run {got} threads, not {per_worker}")
            ours = client.persist(st.dask.load(path, chunks=(rows, -1)))
            theirs = client.persist(ours.map_blocks(lambda b: b.to_scipy(), meta=sp.csr_matrix((0, 0))))
            D = client.persist(da.random.default_rng(1).standard_normal((ncols, N), chunks=(-1, -1)))  # made there
            distributed.wait([ours, theirs, D])
            client.replicate(distributed.futures_of(D))  # D on both workers, as the blocks need it
            Dn = D.compute()
            st.set_num_threads(1)  # the chunk functions alone, one thread, in this process
            blocks = [t[i:i + rows] for i in range(0, nrows, rows)]
            kern = {"ours": _kernels(blocks, Dn, False), "scipy": _kernels(blocks, Dn, True)}
            del blocks
            graphs = {"scipy": _graphs(theirs, D, nblocks), "ours": _graphs(ours, D, nblocks),
                      "ours, dask API": {"spmm": ours @ D, "sum0": ours.sum(axis=0), "sum1": ours.sum(axis=1)}}
            st.set_num_threads(threads)
            single = {"spmm": lambda: t @ Dn, "sum0": lambda: t.sum(axis=0), "sum1": lambda: t.sum(axis=1)}
            table, split, records = [], [], []
            for op in OPS:
                ref = np.asarray(single[op]())
                streams = {}
                for name, g in graphs.items():
                    got = np.asarray(g[op].compute())
                    if not np.allclose(got.ravel(), ref.ravel(), rtol=1e-9, atol=1e-9):
                        raise AssertionError(f"{op} with {name} chunks differs from the single-process result")
                    streams[name] = _stream(client, g[op])
                runs = {name: (lambda g=g: _on_workers(client, g[op])) for name, g in graphs.items()}
                runs["ours, dask API, to client"] = lambda: _seconds(graphs["ours, dask API"][op].compute)
                runs["single"] = lambda: _seconds(single[op])
                times = _interleaved(runs, repeat)
                best = min(times["ours"], times["ours, dask API"])
                table.append([op, times["scipy"], times["ours"], times["scipy"] / times["ours"],
                              times["ours, dask API"], times["single"], best / times["single"],
                              times["ours, dask API, to client"], times["ours, dask API, to client"] / times["single"]])
                for name, s in streams.items():
                    kname = "scipy" if name == "scipy" else "ours"
                    split.append([op, name, s["wall_s"], s["tasks"], s["compute_s"], s["transfer_s"],
                                  f"{s['compute_s'] / (2 * per_worker * s['wall_s']):.0%}", kern[kname][op] / 2])
                records.append({"op": op, **{k.replace(", ", "_").replace(" ", "_") + "_s": v
                                             for k, v in times.items()},
                                "task_stream": streams, "kernels_1_thread_s": {k: v[op] for k, v in kern.items()}})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nseconds; 'on workers': persist + wait, the result stays on the workers; 'to client': compute()")
    print_table(["op", "scipy chunks, on workers", "ours, on workers", "scipy/ours", "ours dask API, on workers",
                 "1 process", "best dask on workers / 1 process", "ours dask API, to client",
                 "to client / 1 process"], table)
    print("\none 'on workers' run per setup, by the task stream (compute and transfer summed over tasks); "
          "kernels: the chunk functions alone, 1 thread, summed over the chunks / 2")
    print_table(["op", "setup", "wall", "tasks", "task compute", "transfers", "workers busy", "kernels / 2"], split)
    write_json("dask", {"nrows": nrows, "ncols": ncols, "nnz": int(A.nnz), "blocks": nblocks, "threads": threads,
                        "workers": 2, "threads_per_worker": per_worker, "load_average": load, "results": records})
