"""The README's main job: `python -m sparsetensor` runs the demonstration."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_and_reports():
    out = subprocess.run([sys.executable, "-m", "sparsetensor", "--size", "400"], capture_output=True, text=True,
                         timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr
    assert "invariants hold, round trip exact" in out.stdout
    assert "WRONG" not in out.stdout
    assert "is refused: csr invariant" in out.stdout


def test_bad_arguments_exit_2():
    out = subprocess.run([sys.executable, "-m", "sparsetensor", "--size", "0"], capture_output=True, text=True,
                         cwd="/")
    assert out.returncode == 2 and "--size" in out.stderr
