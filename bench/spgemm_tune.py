"""A/B of the csr SpGEMM accumulators on the structures of ``bench.structures``, in one process.

``python -m bench.spgemm_tune [--quick] [--threads 2] [--configs old,new,...] [--repeat 7]``

Every configuration is a set of ``sparsetensor._lib._spgemm._tune`` settings; ``old`` is the
choice before the merge and dense accumulators (expand-sort-compress up to ESC_MAX products,
else the slot array; the fused pass up to 1 GiB of room; the marker array in the symbolic pass), ``new`` the defaults, the others force one accumulator on every row it can
take; a configuration may also be settings, ``esc_max=1024+merge_max=4``. Times are medians of ``--repeat`` runs of ``st.matmul(a, a)``, the configurations taking turns; each configuration's result
is compared with the first one's, bit for bit. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import sparsetensor as st
from sparsetensor._lib import _spgemm
from sparsetensor._backend import _spgemm as _ops  # the CPU SpGEMM kernels

from ._common import median_time, print_table
from .structures import SIZES, _matrices

CONFIGS = {
    "old": dict(merge_max=0, dense_max=0, fused_bytes=1 << 30),
    "new": {},
    "merge": dict(accumulator="merge", merge_max=64),
    "dense": dict(accumulator="dense"),
    "esc": dict(accumulator="esc"),
    "slots": dict(accumulator="slots"),
    "bits": dict(flag_span=0),  # the dense accumulator marks columns with bits in every row (no flag bytes)
}


def _config(name: str) -> dict:
    """A named configuration, or settings such as ``esc_max=1024+merge_max=4``."""
    if "=" not in name:
        return CONFIGS[name]
    out = {}
    for item in name.split("+"):
        key, value = item.split("=")
        out[key] = value if key == "accumulator" else int(value)
    return out


def _set(defaults: dict, settings: dict) -> None:
    """Apply ``settings`` over ``defaults``: the kernel's _tune, and fused_bytes (the wrapper's
    _FUSED_BYTES, the most room of the fused pass)."""
    settings = {**defaults, **settings}
    _ops._FUSED_BYTES = settings.pop("fused_bytes")
    _spgemm._tune(**settings)


def _same(x, y) -> bool:
    return all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
               for a, b in ((x.crow_indices(), y.crow_indices()), (x.col_indices(), y.col_indices()),
                            (x.values(), y.values())))


def run(quick: bool, threads: int, configs: list[str], repeat: int, only: str | None) -> None:
    defaults = {**_spgemm._tune(), "fused_bytes": _ops._FUSED_BYTES}
    print(f"load average before: {os.getloadavg()}; threads: {threads}; defaults: {defaults}", flush=True)
    rows = []
    for name, t in _matrices((0,) if quick else (0, 1, 2)):
        if only and not name.startswith(only):
            continue
        if name.startswith("rmat") and t.shape[0] > (1 << 16):
            continue  # R-MAT squared at scale 19 needs tens of GB
        first = None
        for cfg in configs:  # every configuration gives the first one's arrays, bit for bit
            _set(defaults, _config(cfg))
            try:
                c = st.matmul(t, t, threads=threads)
            finally:
                _set(defaults, {})
            if first is None:
                first = c
            elif not _same(first, c):
                raise AssertionError(f"{name}: {cfg} differs from {configs[0]}")
        samples = {cfg: [] for cfg in configs}
        for _ in range(repeat):  # round robin, so that a change of load hits every configuration
            for cfg in configs:
                _set(defaults, _config(cfg))
                try:
                    samples[cfg].append(median_time(lambda: st.matmul(t, t, threads=threads), 1, warmup=0))
                finally:
                    _set(defaults, {})
        times = {cfg: float(np.median(v)) for cfg, v in samples.items()}
        rows.append([name, f"{t.nnz:,}", f"{first.nnz:,}"] + [f"{times[c] * 1e3:.3g}" for c in configs]
                    + [f"{times[configs[0]] / times[configs[-1]]:.2f}"])
        print("  ".join(rows[-1]), flush=True)
    print()
    print_table(["matrix", "nnz", "nnz(A@A)"] + [f"{c} ms" for c in configs] + [f"{configs[0]}/{configs[-1]}"],
                rows)
    print(f"load average after: {os.getloadavg()}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"the smallest sizes only (of {SIZES})")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--configs", default="old,new",
                   help=f"comma-separated, of {sorted(CONFIGS)} or settings such as esc_max=1024+merge_max=4")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--only", default=None, help="matrices whose name starts with this (5pt, 27pt, rmat)")
    a = p.parse_args(argv)
    run(a.quick, a.threads, a.configs.split(","), a.repeat, a.only)


if __name__ == "__main__":
    main()
