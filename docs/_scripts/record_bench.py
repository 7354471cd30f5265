"""Run ``python -m bench structures`` and record its JSON for the performance page.

    python docs/_scripts/record_bench.py --sizes 0 --threads 2 --rest 1

from the repository root, with the ``bench`` extra and torch installed. It runs the benchmark
with the arguments given, copies ``bench/results/structures.json`` to
``docs/_data/bench/structures.json`` and writes ``structures.run.json`` beside it with what
the benchmark's JSON does not hold: the command, the commit (and whether the tree had
uncommitted changes), the time, the 1-minute load average before the run, the CPU and the
CPU level our kernels ran at. Commit both files; the docs build plots them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "_data" / "bench"


def _cpu() -> str:
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        return ""
    simd = "AVX-512" if "avx512f" in flags else "AVX2, no AVX-512" if "avx2" in flags else "no AVX2"
    return f"{model or 'unknown CPU'} ({os.cpu_count()} CPUs; {simd})"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main(argv: list[str]) -> int:
    level = subprocess.run([sys.executable, "-c", "import sparsetensor._lib as l; print(l.LEVEL)"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()[0]
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = ["python", "-m", "bench", "structures", *argv]
    rc = subprocess.run([sys.executable, "-m", "bench", "structures", *argv], cwd=ROOT).returncode
    if rc != 0:
        return rc
    DATA.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "bench" / "results" / "structures.json", DATA / "structures.json")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", "sparsetensor", "kernels", "meson.build"))
    try:
        import graphblas

        gb = graphblas.__version__
    except ImportError:
        gb = None
    meta = {
        "command": " ".join(command),
        "commit": _git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else ""),
        "date_utc": date,
        "load_before": round(load, 2),
        "cpu": _cpu(),
        "cpu_level": level,
        "graphblas": gb,
    }
    (DATA / "structures.run.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {DATA / 'structures.json'} and structures.run.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
