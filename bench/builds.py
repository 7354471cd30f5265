"""Compare builds of sparsetensor: the same benchmarks under several interpreters and CPU levels.

    python -m bench builds native=/venv-native/bin/python wheel=/venv-wheel/bin/python \\
        wheel:baseline=/venv-wheel/bin/python [--bench spmm validate coalesce convert] [--quick]

Each ``LABEL=PYTHON`` is a Python with a sparsetensor installed (e.g. one built with
``-Dnative=true``, one from the repaired wheel); ``LABEL:LEVEL=PYTHON`` runs that Python with
``SPARSETENSOR_CPU_LEVEL=LEVEL``, and torch and MKL at that level's instructions too
(``_levels.PEER_LEVEL_ENV``). Every benchmark runs in a fresh process per build,
one build after the other; the table shows, per case, each build's time and its ratios
against torch and SciPy (peer time / our time, from the same run), and the JSON of all
runs goes to ``bench/results/builds.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from ._common import RESULTS, print_table, write_json
from ._levels import LEVEL_VARS, level_env

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("spmm", "validate", "coalesce", "convert")
_SKIP = {"ours_s", "scipy_s", "torch_s", "read_s", "ours_1thread_s", "nnz_out", "flops", "bytes"}


def _case(rec: dict) -> str:
    if "case" in rec:
        return str(rec["case"])
    return " ".join(f"{k}={v}" for k, v in rec.items()
                    if k not in _SKIP and not isinstance(v, float) and not k.startswith(("speedup", "best")))


def parse_builds(specs: list[str]) -> list[tuple[str, str, str | None]]:
    """``["wheel:baseline=/v/bin/python"]`` -> ``[("wheel:baseline", "/v/bin/python", "baseline")]``."""
    builds = []
    for spec in specs:
        label, sep, python = spec.partition("=")
        if not sep or not label or not python:
            raise SystemExit(f"a build is LABEL=PYTHON or LABEL:LEVEL=PYTHON, got {spec!r}")
        builds.append((label, python, label.partition(":")[2] or None))
    return builds


def run_one(python: str, level: str | None, name: str, quick: bool, threads: int | None) -> dict:
    env = dict(os.environ)
    for k in LEVEL_VARS:
        env.pop(k, None)
    if level:
        env.update(level_env(level))
    # -P and the repository appended last: `bench` comes from here, sparsetensor from the build's
    # site-packages (never this checkout's unbuilt sources, which `python -m bench` would import)
    launcher = f"import runpy, sys; sys.path.append({str(ROOT)!r}); runpy.run_module('bench', run_name='__main__')"
    cmd = [python, "-P", "-c", launcher, name] + (["--quick"] if quick else []) + \
        ([] if threads is None else ["--threads", str(threads)])
    info = subprocess.run([python, "-P", "-c", "import sparsetensor as st, json; "
                           "print(json.dumps(st.show_config(mode='dicts')))"],
                          env=env, cwd=ROOT, capture_output=True, text=True)
    if info.returncode:
        raise SystemExit(f"{python} (level {level}): cannot import sparsetensor:\n{info.stderr}")
    subprocess.run(cmd, env=env, cwd=ROOT, check=True)
    out = json.loads((RESULTS / f"{name}.json").read_text())
    out["sparsetensor"] = json.loads(info.stdout)
    return out


def run(specs: list[str], names=DEFAULT, quick: bool = False, threads: int | None = None):
    builds = parse_builds(specs)
    runs = {label: {} for label, _, _ in builds}
    for name in names:
        for label, python, level in builds:
            print(f"== {name} with {label} ({python}{', level ' + level if level else ''})", flush=True)
            runs[label][name] = run_one(python, level, name, quick, threads)
    headers = ["bench", "case"]
    for label, _, _ in builds:
        headers += [f"{label} ms", f"{label} torch/ours", f"{label} scipy/ours"]
    rows = []
    for name in names:
        first = runs[builds[0][0]][name]["results"]
        for i, rec in enumerate(first):
            row = [name, _case(rec)]
            for label, _, _ in builds:
                r = runs[label][name]["results"][i]
                ours = r.get("ours_s")
                row += [1e3 * ours if ours else "n/a"] + [
                    r[k] / ours if ours and r.get(k) else "n/a" for k in ("torch_s", "scipy_s")]
            rows.append(row)
    print_table(headers, rows)
    levels = {label: runs[label][names[0]]["sparsetensor"]["cpu_dispatch"]["level_in_use"] for label, _, _ in builds}
    print("levels in use:", ", ".join(f"{k}: {v}" for k, v in levels.items()))
    path = write_json("builds", {"builds": [list(b) for b in builds], "runs": runs})
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench builds", description=__doc__.split("\n\n")[0])
    parser.add_argument("builds", nargs="+", help="LABEL=PYTHON or LABEL:LEVEL=PYTHON")
    parser.add_argument("--bench", nargs="+", default=list(DEFAULT), choices=list(DEFAULT) + ["elementwise"])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    run(args.builds, tuple(args.bench), args.quick, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
