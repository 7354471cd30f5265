"""The performance page's plots and tables, made at build time from the committed JSON of
``python -m bench structures`` (``bench/_common.py``'s ``write_json``).

Inputs, in ``docs/_data/bench/``:

- ``structures.json``: what the benchmark wrote (machine, peers, threads, read bandwidth,
  highest load, and per case the seconds of every library, the ratios peer / ours and the
  roofline time);
- ``structures.run.json``: what the JSON does not hold about the run (the command, the
  commit, the time and the load average before it), written by whoever ran it.

Outputs, in ``docs/_generated/``: ``perf_ratios.png`` (ours against each peer, per op and
structure), ``perf_roofline.png`` (our time against the least memory traffic over the
measured bandwidth), ``bench_run.rst`` (the run's description) and ``bench_summary.rst``
(per op: cases won, least / median / greatest ratio of the fastest peer).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PEER_COLORS = {"scipy": "#4c72b0", "torch": "#dd8452", "graphblas": "#55a868"}


def _load(data: Path):
    run = json.loads((data / "structures.json").read_text())
    side = data / "structures.run.json"
    meta = json.loads(side.read_text()) if side.exists() else {}
    return run, meta


def _structure(matrix: str) -> str:
    return matrix.split(" ")[0]


def _ops(results) -> list[str]:
    seen: list[str] = []
    for r in results:
        op = "csr->csc / bsr->bsc" if r["op"] in ("csr->csc", "bsr->bsc") else r["op"]
        if op not in seen:
            seen.append(op)
    return seen


def _op_of(r) -> str:
    return "csr->csc / bsr->bsc" if r["op"] in ("csr->csc", "bsr->bsc") else r["op"]


def _plain_ticks(ax) -> None:
    """Log-scale ticks written as 0.5, 1, 2 rather than 5 x 10^-1."""
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(fmt)
    ax.tick_params(axis="y", which="minor", labelsize=7)


def plot_ratios(run, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = run["results"]
    ops = _ops(results)
    peers = [p for p in PEER_COLORS if any(p in r["ratios"] for r in results)]
    ncol = 3
    nrow = (len(ops) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(12, 3.4 * nrow), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        rows = [r for r in results if _op_of(r) == op]
        labels = [f"{r['matrix']}\n{r['nnz']:,}" for r in rows]
        x = np.arange(len(rows))
        w = 0.8 / max(len(peers), 1)
        for n, peer in enumerate(peers):
            vals = [r["ratios"].get(peer, np.nan) for r in rows]
            ax.bar(x + (n - (len(peers) - 1) / 2) * w, vals, w, label=peer, color=PEER_COLORS[peer])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        _plain_ticks(ax)
        ax.set_title(op, fontsize=10)
        ax.set_xticks(x, labels, fontsize=7, rotation=30, ha="right")
        ax.set_ylabel("peer time / our time", fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, loc="best")
    fig.suptitle("Above 1: sparsetensor is faster (log scale)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_roofline(run, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in run["results"] if r.get("roofline_s")]
    ops = [op for op in _ops(rows)]
    structures = []
    for r in rows:
        if r["matrix"] not in structures:
            structures.append(r["matrix"])
    fig, ax = plt.subplots(figsize=(10, 3.6))
    x = np.arange(len(structures))
    w = 0.8 / max(len(ops), 1)
    cmap = plt.get_cmap("tab10").colors
    for n, op in enumerate(ops):
        vals = []
        for s in structures:
            hit = [r for r in rows if r["matrix"] == s and _op_of(r) == op]
            vals.append(hit[0]["roofline_s"] / hit[0]["seconds"]["ours"] if hit else np.nan)
        ax.bar(x + (n - (len(ops) - 1) / 2) * w, vals, w, label=op, color=cmap[n % 10])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, structures, fontsize=8, rotation=20, ha="right")
    ax.set_ylabel("roofline time / our time", fontsize=9)
    ax.set_title("Fraction of the memory-bandwidth bound reached (1.0: at the bound)", fontsize=10)
    ax.legend(fontsize=8, ncol=len(ops))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = [".. list-table::", "   :header-rows: 1", ""]
    for row in [header] + rows:
        out.append("   * - " + row[0])
        out += [f"     - {c}" for c in row[1:]]
    return "\n".join(out) + "\n"


def summary_rst(run) -> str:
    rows = []
    results = run["results"]
    for op in _ops(results):
        best = [min(r["ratios"].values()) for r in results if _op_of(r) == op and r["ratios"]]
        if not best:
            continue
        won = sum(b > 1 for b in best)
        rows.append([op, f"{won} of {len(best)}", f"{min(best):.2f}", f"{float(np.median(best)):.2f}",
                     f"{max(best):.2f}"])
    allbest = [min(r["ratios"].values()) for r in results if r["ratios"]]
    rows.append(["**all**", f"**{sum(b > 1 for b in allbest)} of {len(allbest)}**", f"{min(allbest):.2f}",
                 f"{float(np.median(allbest)):.2f}", f"{max(allbest):.2f}"])
    return _table(["op", "cases won", "fastest peer / ours: least", "median", "greatest"], rows)


def run_rst(run, meta) -> str:
    m, peers = run.get("machine", {}), dict(run.get("peers", {}))
    peers.pop("torch_threads", None)
    lines = [
        f"- command: ``{meta.get('command', 'python -m bench structures')}``"
        + (f", at commit ``{meta['commit']}``" if meta.get("commit") else "")
        + (f", {meta['date_utc']}" if meta.get("date_utc") else ""),
        f"- machine: {meta.get('cpu') or m.get('processor', '?')}, {m.get('cpus', '?')} CPUs usable; "
        f"{m.get('platform', '?')}; Python {m.get('python', '?')}, NumPy {m.get('numpy', '?')}",
        f"- CPU level of our kernels: {meta['cpu_level']}" if meta.get("cpu_level") else None,
        "- peers: " + (", ".join(f"{k} {v}" for k, v in peers.items()) or "none")
        + (f", python-graphblas {meta['graphblas']}" if meta.get("graphblas") else ""),
        f"- threads: {run.get('threads')} for ours, torch and GraphBLAS (SciPy is single-threaded)",
        f"- read bandwidth measured in the run with those threads: {run['read_bandwidth'] / 1e9:.1f} GB/s"
        if run.get("read_bandwidth") else None,
        f"- 1-minute load average: {meta['load_before']} before the run"
        if meta.get("load_before") is not None else None,
        f"- highest 1-minute load average after a case: {run['peak_load']:.2f}" if run.get("peak_load") else None,
        f"- cases: {len(run['results'])}",
    ]
    cpus = m.get("cpus") or 0
    busy = max(meta.get("load_before") or 0, run.get("peak_load") or 0)
    if cpus and busy > cpus:
        lines.append(f"\n.. warning:: The machine was busy during this run (1-minute load up to {busy:.1f} on "
                     f"{cpus} CPUs): other jobs shared the cores, which costs a multi-threaded kernel more than "
                     "a single-threaded one. Read the ratios as one noisy sample.")
    return "\n".join(line for line in lines if line) + "\n"


def write(data: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    run, meta = _load(data)
    plot_ratios(run, out / "perf_ratios.png")
    plot_roofline(run, out / "perf_roofline.png")
    (out / "bench_run.rst").write_text(run_rst(run, meta))
    (out / "bench_summary.rst").write_text(summary_rst(run))
