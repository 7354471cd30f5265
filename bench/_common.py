"""Timing helpers shared by the benchmarks: medians of repeats, tables, JSON."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import numpy as np

from sparsetensor._cli._userbench import median_time, peers  # noqa: F401 (shared with `sparsetensor bench`)

from ._levels import LEVEL_VARS

RESULTS = Path(__file__).resolve().parent / "results"


def read_bandwidth(nbytes: int = 1 << 29, repeat: int = 7) -> float:
    """Bytes per second of one streaming read of a large array (NumPy sum, one thread)."""
    a = np.ones(nbytes // 8, dtype=np.float64)
    t = median_time(lambda: a.sum(), repeat)
    return nbytes / t


def read_bandwidth_threads(threads: int, nbytes: int = 1 << 29, repeat: int = 7) -> float:
    """Bytes per second of one streaming read of a large array with ``threads`` threads (torch's
    sum when torch is installed, else NumPy's single-threaded sum)."""
    try:
        import torch
    except ImportError:
        return read_bandwidth(nbytes, repeat)
    torch.set_num_threads(threads)
    a = torch.ones(nbytes // 8, dtype=torch.float64)
    return nbytes / median_time(lambda: a.sum(), repeat)


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            **{k: os.environ[k] for k in LEVEL_VARS if os.environ.get(k)}}


def peer_versions() -> dict:
    out = {}
    try:
        import scipy

        out["scipy"] = scipy.__version__
    except ImportError:
        pass
    try:
        import torch

        out["torch"] = torch.__version__
        out["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return out


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in headers]] + [[c if isinstance(c, str) else f"{c:.3g}" if isinstance(c, float)
                                           else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for k, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if k == 0:
            print("  ".join("-" * w for w in widths))


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"machine": machine(), "peers": peer_versions(), **payload}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)
    return path
