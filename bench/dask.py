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

The sums are also timed through ``st.dask.sum`` (Dask's tree with the partial sums added
instead of joined, one task per block for the row sums), and each way of summing (``x.sum``,
``st.dask.sum``) against Dask's floor: the same graph on the same persisted array with a
chunk step that only returns ones of the partial sum's shape and dtype (a new array, written).
``ours - floor`` is what our chunk step costs in the run beyond making its output (kernel and
everything around it); ``floor + kernels / 2`` is the best these graphs can reach (it counts the
writing of the outputs twice: 2-3 ms per 16 MB partial). Where Dask put the blocks (``blocks on workers``) is
printed: it decides how the work splits and which partial sums cross between the workers. By
default the blocks are persisted as equal runs of neighbours per worker (Dask's co-assignment of
root tasks, ``distributed.scheduler.worker-saturation: inf``), the same for both chunk types;
``run(contiguous=False)`` leaves them where Dask's default queuing puts them.

``python -m bench.dask --sum-ab OLD.so NEW.so`` times the row and column sum kernels of one
chunk (250k x 2M, 5M nnz) by two builds of ``sparsetensor/_lib/_reduce`` loaded side by side
and by SciPy, on 1 and 2 threads, taking turns in one process.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
import tempfile
import timeit

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


def _sum_graphs(x) -> dict:
    """The two sums of our array ``x`` by ``st.dask.sum``, and Dask's floor of each way of summing:
    the same graph with a chunk step that only fills its output (ones of the partial sum's shape and
    dtype), so that what is left is Dask's (tasks, combines, transfers)."""
    import dask.array as da
    from dask.array import chunk

    from sparsetensor.dask._reduce import _sum_graph

    # a chunk step with no kernel that still makes its output as a kernel does: new pages, written
    # (~3 ms per 16 MB partial; np.zeros would hand over untouched pages)
    def _ones(b, axis, keepdims, dtype=None):
        shape = tuple(1 if d in axis else n for d, n in enumerate(b.shape))
        return np.ones(shape if keepdims else tuple(n for d, n in enumerate(shape) if d not in axis), dtype)

    out = {"ours, st.dask.sum": {}, "floor, x.sum": {}, "floor, st.dask.sum": {}}
    for op, ax in (("sum0", 0), ("sum1", 1)):
        out["ours, st.dask.sum"][op] = st.dask.sum(x, axis=ax)
        out["floor, x.sum"][op] = da.reduction(x, _ones, chunk.sum, axis=ax, dtype=np.float64)  # as da.sum does
        out["floor, st.dask.sum"][op] = _sum_graph(x, _ones, (ax,), False, np.dtype(np.float64))
    return out


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
        chunks_per_worker: int = 4, contiguous: bool = True):
    """``contiguous``: the blocks persisted as equal runs of neighbours per worker (Dask's co-assignment,
    ``worker-saturation: inf``); False: where Dask's default queuing puts them (interleaved, often uneven)."""
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
    # where the blocks land: with Dask's default root-task queuing, on whichever worker is free when
    # its load task is queued (seen: 5/3 and 7/1 splits, interleaved), so the kernels of one worker
    # set the time and a sum's combines wait for partials of the other worker; with co-assignment
    # (worker-saturation inf) each worker holds an equal run of neighbouring blocks, for both chunk types
    if contiguous:
        config["distributed.scheduler.worker-saturation"] = float("inf")
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
            who = client.who_has(ours)  # where Dask put the blocks (theirs: the same, tasks run where their data is)
            workers = sorted({w for v in who.values() for w in v})
            placement = [workers.index(who[k][0]) for k in sorted(who, key=lambda k: k[1])]
            print(f"blocks on workers: {placement}")
            client.replicate(distributed.futures_of(D))  # D on both workers, as the blocks need it
            Dn = D.compute()
            st.set_num_threads(1)  # the chunk functions alone, one thread, in this process
            blocks = [t[i:i + rows] for i in range(0, nrows, rows)]
            kern = {"ours": _kernels(blocks, Dn, False), "scipy": _kernels(blocks, Dn, True)}
            del blocks
            graphs = {"scipy": _graphs(theirs, D, nblocks), "ours": _graphs(ours, D, nblocks),
                      "ours, dask API": {"spmm": ours @ D, "sum0": ours.sum(axis=0), "sum1": ours.sum(axis=1)},
                      **_sum_graphs(ours)}
            st.set_num_threads(threads)
            single = {"spmm": lambda: t @ Dn, "sum0": lambda: t.sum(axis=0), "sum1": lambda: t.sum(axis=1)}
            table, split, floors, records = [], [], [], []
            for op in OPS:
                ref = np.asarray(single[op]())
                streams = {}
                here = {name: g[op] for name, g in graphs.items() if op in g}
                for name, g in here.items():
                    got = np.asarray(g.compute())
                    if got.size != ref.size or not (name.startswith("floor") or
                                                    np.allclose(got.ravel(), ref.ravel(), rtol=1e-9, atol=1e-9)):
                        raise AssertionError(f"{op} with {name} chunks differs from the single-process result")
                    streams[name] = _stream(client, g)
                runs = {name: (lambda g=g: _on_workers(client, g)) for name, g in here.items()}
                runs["ours, dask API, to client"] = lambda: _seconds(graphs["ours, dask API"][op].compute)
                runs["single"] = lambda: _seconds(single[op])
                times = _interleaved(runs, repeat)
                best = min(times["ours"], times["ours, dask API"], times.get("ours, st.dask.sum", np.inf))
                table.append([op, times["scipy"], times["ours"], times["scipy"] / times["ours"],
                              times["ours, dask API"], times.get("ours, st.dask.sum", "-"), times["single"],
                              best / times["single"], times["ours, dask API, to client"],
                              times["ours, dask API, to client"] / times["single"]])
                half = kern["ours"][op] / 2
                for way, name in (("x.sum", "ours, dask API"), ("st.dask.sum", "ours, st.dask.sum")):
                    if f"floor, {way}" in times:
                        ours_s, floor_s = times[name], times[f"floor, {way}"]
                        floors.append([op, way, ours_s, floor_s, ours_s - floor_s, half, floor_s + half,
                                       times["single"], ours_s / times["single"], (floor_s + half) / times["single"]])
                for name, s in streams.items():
                    kname = "scipy" if name == "scipy" else "ours"
                    split.append([op, name, s["wall_s"], s["tasks"], s["compute_s"], s["transfer_s"],
                                  f"{s['compute_s'] / (2 * per_worker * s['wall_s']):.0%}",
                                  "-" if name.startswith("floor") else kern[kname][op] / 2])
                records.append({"op": op, **{k.replace(", ", "_").replace(" ", "_") + "_s": v
                                             for k, v in times.items()},
                                "task_stream": streams, "kernels_1_thread_s": {k: v[op] for k, v in kern.items()}})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nseconds; 'on workers': persist + wait, the result stays on the workers; 'to client': compute()")
    print_table(["op", "scipy chunks, on workers", "ours, on workers", "scipy/ours", "ours dask API, on workers",
                 "ours st.dask.sum, on workers", "1 process", "best dask on workers / 1 process",
                 "ours dask API, to client", "to client / 1 process"], table)
    print("\nthe sums against Dask's floor (the same graph, its chunk step only returning ones of the partial "
          "sum's shape), on workers; kernels: 1 thread, summed over the chunks / 2; floor + kernels: the best "
          "reachable with these graphs")
    print_table(["op", "aggregation", "ours", "Dask floor", "ours - floor", "kernels / 2", "floor + kernels / 2",
                 "1 process", "ours / 1 process", "(floor + kernels / 2) / 1 process"], floors)
    print("\none 'on workers' run per setup, by the task stream (compute and transfer summed over tasks); "
          "kernels: the chunk functions alone, 1 thread, summed over the chunks / 2")
    print_table(["op", "setup", "wall", "tasks", "task compute", "transfers", "workers busy", "kernels / 2"], split)
    write_json("dask", {"nrows": nrows, "ncols": ncols, "nnz": int(A.nnz), "blocks": nblocks, "threads": threads,
                        "workers": 2, "threads_per_worker": per_worker, "load_average": load, "placement": placement,
                        "results": records})


# -- the chunk kernels alone: two builds of sparsetensor/_lib/_reduce side by side -----------------------
def _load_extension(path):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader("_reduce", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("_reduce", path, loader=loader))
    loader.exec_module(module)
    return module


def _sum_calls(m, A, nt):
    """(row sums, column sums) of scipy csr ``A`` by the sum kernels of ``_reduce`` module ``m``, as
    sparsetensor.ops.reduce calls them in that build (for an older build: its Python steps too)."""
    n, ncols = A.shape
    if hasattr(m, "compressed_sum"):
        c, p, x = A.indptr.reshape(1, -1), A.indices.reshape(1, -1), A.data.reshape(1, -1, 1, 1, 1)

        def rows():
            out = np.empty((1, n, 1, 1))
            m.compressed_sum(c, x, out, nt)
            return out.ravel()

        def cols():
            out = np.empty((1, ncols, 1, 1))
            m.plain_sum(c, p, x, out, nt)
            return out.ravel()
        return rows, cols
    none, x = np.empty(0, np.int64), A.data.reshape(-1, 1)

    def rows_old():
        out = np.empty((n, 1))
        m.segment_sum(A.indptr.astype(np.int64), none, x, out, nt)
        return out.ravel()

    def cols_old():
        C = nt if nt > 1 and ncols * nt <= A.nnz else 1
        out = np.zeros((C, ncols, 1))
        m.scatter_reduce(A.indices, x, out, "sum", nt)
        return (out.sum(axis=0) if C > 1 else out[0]).ravel()
    return rows_old, cols_old


def sum_kernels_ab(old_path: str, new_path: str, nrows: int = 250_000, ncols: int = 2_000_000,
                   nnz: int = 5_000_000, rounds: int = 9) -> list:
    """Milliseconds of the row and column sums of one Dask chunk (``nrows`` x ``ncols``, ``nnz``,
    float64, int32 indices) by two builds of the ``_reduce`` kernels and by SciPy, on 1 and 2
    threads, in this process, taking turns (min over rounds of the min of 3 calls)."""
    A = _matrix(nrows, ncols, nnz)
    mods = {"old": _load_extension(old_path), "new": _load_extension(new_path)}
    want = {"sum1": np.asarray(A.sum(axis=1)).ravel(), "sum0": np.asarray(A.sum(axis=0)).ravel()}
    print(f"{nrows} x {ncols}, nnz {A.nnz}: values {A.data.nbytes / 1e6:.0f} MB, indices "
          f"{A.indices.nbytes / 1e6:.0f} MB; load average {os.getloadavg()}")
    records = []
    for nt in (1, 2):
        fns = {}
        for tag, m in mods.items():
            rows, cols = _sum_calls(m, A, nt)
            fns[(tag, "sum1")], fns[(tag, "sum0")] = rows, cols
        fns[("scipy", "sum1")], fns[("scipy", "sum0")] = (lambda: A.sum(axis=1)), (lambda: A.sum(axis=0))
        for (tag, op), fn in fns.items():
            if not np.allclose(np.asarray(fn()).ravel(), want[op], rtol=1e-9, atol=1e-9):
                raise AssertionError(f"{op} of the {tag} build differs from SciPy's")
        best = dict.fromkeys(fns, float("inf"))
        for _ in range(rounds):  # alternate, so that all see the same load
            for key, fn in fns.items():
                best[key] = min(best[key], min(timeit.repeat(fn, number=1, repeat=3)))
        for op, nbytes in (("sum1", A.data.nbytes + A.indptr.nbytes),
                           ("sum0", A.data.nbytes + A.indices.nbytes + A.indptr.nbytes + ncols * 8)):
            ms = {tag: best[(tag, op)] * 1e3 for tag in ("old", "new", "scipy")}
            records.append({"threads": nt, "op": op, "ms": ms, "new_GB_per_s": nbytes / ms["new"] / 1e6})
            print(f"threads {nt} {op}: old {ms['old']:7.2f} ms  new {ms['new']:7.2f} ms  scipy {ms['scipy']:7.2f} ms"
                  f"  old/new {ms['old'] / ms['new']:5.2f}  scipy/new {ms['scipy'] / ms['new']:5.2f}"
                  f"  new reads {nbytes / ms['new'] / 1e6:5.1f} GB/s", flush=True)
    print(f"load average after: {os.getloadavg()}")
    return records


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.dask")
    parser.add_argument("--sum-ab", nargs=2, metavar=("OLD_SO", "NEW_SO"), required=True,
                        help="time the sum kernels of two builds of _reduce on one chunk")
    args = parser.parse_args()
    sum_kernels_ab(*args.sum_ab)
