"""Sparse optimizer steps: ours (``sparsetensor.optim`` on NumPy arrays, and the
``sparsetensor.torch.optim`` drop-ins) vs ``torch.optim``'s sparse paths.

An embedding table of ``rows x width`` float32 and gradients of ``batch`` ids drawn
Zipf-like (``rng.zipf(1.2)``, clipped to the row count: many duplicates, few distinct
rows), as a hybrid COO tensor ``(ids, (batch, width) values)``; each optimizer takes
``steps`` consecutive steps over a cycle of pre-made gradients, after one warm-up step
(which allocates the state), and the time per step is the median over ``repeat`` such
runs. SGD's momentum buffer grows as rows are touched (in torch by every gradient entry),
so its optimizers start afresh in each run.

The bandwidth floor of a lazy SparseAdam step is the bytes it must move, the touched rows
of the parameter and both moments read and written plus the gradient (values and
indices) read once, divided by the measured copy bandwidth (bytes read + written per
second by one large ``np.copyto``).
"""

from __future__ import annotations

import numpy as np

import sparsetensor as st

from ._common import median_time, peers, print_table, write_json

CASES = [("SparseAdam", dict(lr=1e-3)), ("SGD", dict(lr=0.1, momentum=0.9)), ("Adagrad", dict(lr=0.1))]


def copy_bandwidth(nbytes: int = 1 << 29, repeat: int = 5) -> float:
    """Bytes read + written per second by one ``np.copyto`` of ``nbytes``."""
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    return 2 * nbytes / median_time(lambda: np.copyto(b, a), repeat)


def make_batches(rows: int, width: int, batch: int, count: int, seed: int = 0):
    """``count`` gradients: (ids (1, batch) int64, values (batch, width) float32)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        ids = np.minimum(rng.zipf(1.2, batch), rows) - 1
        out.append((ids.reshape(1, -1).astype(np.int64), rng.standard_normal((batch, width), dtype=np.float32)))
    return out


def _time_steps(make, step, grads, steps: int, repeat: int) -> float:
    """Seconds per step: median over ``repeat`` runs of ``steps`` steps after a warm-up step."""
    import time

    times = []
    for _ in range(repeat):
        state = make()
        step(state, grads[0])
        t0 = time.perf_counter()
        for k in range(steps):
            step(state, grads[(k + 1) % len(grads)])
        times.append((time.perf_counter() - t0) / steps)
    return float(np.median(times))


def run(rows=1_000_000, width=64, batch=1 << 16, steps=10, repeat=3, threads=2, nbatches=8):
    torch, _, nthreads = peers(threads)
    print(f"sparse optimizer steps: {rows} x {width} float32 embedding, {batch}-id Zipf(1.2) batches; "
          f"{nthreads} threads for ours and torch; {steps} steps per run, median of {repeat} runs")
    data = make_batches(rows, width, batch, nbatches)
    distinct = [int(np.unique(ids).size) for ids, _ in data]
    ours_grads = [st.sparse_coo_tensor(ids, vals, size=(rows, width), check_invariants=False) for ids, vals in data]
    W0 = np.random.default_rng(1).standard_normal((rows, width), dtype=np.float32)
    bw = copy_bandwidth()
    # a lazy Adam step: parameter and both moments, read + written, on the touched rows; the gradient read once
    floor_bytes = float(np.mean([d * width * 4 * 3 * 2 + batch * (width * 4 + 8) for d in distinct]))
    floor_s = floor_bytes / bw
    print(f"distinct rows per batch: {int(np.mean(distinct))} (mean); copy bandwidth {bw / 1e9:.1f} GB/s; "
          f"SparseAdam floor {floor_bytes / 1e6:.1f} MB = {floor_s * 1e3:.2f} ms")
    st.set_num_threads(nthreads)
    records, table = [], []
    try:
        for name, kw in CASES:
            W = W0.copy()
            rec = {"optimizer": name, "kwargs": kw}

            def make_ours():
                opt = getattr(st.optim, name)([W], **kw)
                opt.step([ours_grads[-1]])
                for v in opt.state[0].values():  # np.zeros_like state is mapped lazily: fault it in, as
                    if isinstance(v, np.ndarray):  # torch.zeros_like's is, so that no step pays page faults
                        v += 0
                return opt

            def step_ours(opt, g):
                opt.step([g])

            rec["ours_s"] = _time_steps(make_ours, step_ours, ours_grads, steps, repeat)
            if torch is not None:
                import sparsetensor.torch.optim as sto

                p = torch.nn.Parameter(torch.from_numpy(W0.copy()))
                tgrads = [torch.sparse_coo_tensor(torch.from_numpy(i), torch.from_numpy(v), (rows, width),
                                                  check_invariants=False) for i, v in data]

                def step_torch(opt, g):
                    p.grad = g
                    opt.step()

                rec["torch_s"] = _time_steps(lambda: getattr(torch.optim, name)([p], **kw), step_torch, tgrads,
                                             steps, repeat)
                rec["dropin_s"] = _time_steps(lambda: getattr(sto, name)([p], **kw), step_torch, tgrads, steps,
                                              repeat)
                rec["torch_over_ours"] = rec["torch_s"] / rec["ours_s"]
            if name == "SparseAdam":
                rec["floor_s"] = floor_s
                rec["ours_over_floor"] = rec["ours_s"] / floor_s
            records.append(rec)
            nan = float("nan")
            table.append([name, 1e3 * rec["ours_s"], 1e3 * rec.get("dropin_s", nan), 1e3 * rec.get("torch_s", nan),
                          rec.get("torch_over_ours", nan), rec.get("ours_over_floor", nan)])
    finally:
        st.set_num_threads(None)
    print_table(["optimizer", "ours ms", "ours (torch drop-in) ms", "torch ms", "torch/ours", "ours/floor"], table)
    path = write_json("optim", {"threads": nthreads, "rows": rows, "width": width, "batch": batch, "steps": steps,
                                "repeat": repeat, "distinct_rows": distinct, "copy_bandwidth_Bps": bw,
                                "floor_bytes": floor_bytes, "results": records})
    print(f"wrote {path}")
    return records
