"""sparsetensor.mpi on 1-4 MPI ranks: tests/mpi/mpi_worker.py under mpiexec, checked against single-process results.

Each test launches ``mpiexec -n N python -m mpi4py tests/mpi/mpi_worker.py SUITE TMP``
(oversubscribed: fine, the matrices are small); the worker compares every
rank's part with the single-process sparsetensor result and exits nonzero on
any mismatch (``-m mpi4py`` aborts all ranks when one raises, so a failure
cannot hang). Without mpi4py or a working ``mpiexec`` the tests skip with the
reason, unless ``SPARSETENSOR_REQUIRE_MPI=1`` (set in CI) makes that a failure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("mpi_worker.py")
RANKS = [1, 2, 3, 4]
TIMEOUT = 180  # seconds for one launch; a hang fails the test instead of the run


def _mpiexec() -> list[str] | None:
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.exists() else shutil.which("mpiexec")
    if exe is None:
        return None
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "HYDRA" in version or "MPICH" in version:
        return [exe, "-launcher", "fork"]
    if "Open MPI" in version or "OpenRTE" in version:
        extra = ["--oversubscribe"] + (["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])
        return [exe, *extra]
    return [exe]


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # ranks x threads on a small machine
    return env


@pytest.fixture(scope="module")
def mpiexec():
    def unavailable(why: str):
        if os.environ.get("SPARSETENSOR_REQUIRE_MPI") == "1":
            pytest.fail(f"MPI is required here (SPARSETENSOR_REQUIRE_MPI=1) but {why}")
        pytest.skip(why)

    if importlib.util.find_spec("mpi4py") is None:
        unavailable("mpi4py is not installed (pip install mpi4py mpich)")
    cmd = _mpiexec()
    if cmd is None:
        unavailable("no mpiexec found (pip install mpich)")
    probe = [*cmd, "-n", "2", sys.executable, "-c",
             "from mpi4py import MPI; assert MPI.COMM_WORLD.size == 2, MPI.COMM_WORLD.size"]
    try:
        r = subprocess.run(probe, capture_output=True, text=True, timeout=60, env=_env())
    except subprocess.TimeoutExpired:
        unavailable(f"MPI could not start: {' '.join(probe)} timed out")
    if r.returncode:
        unavailable(f"MPI could not start: {' '.join(probe)} exited {r.returncode}: {(r.stderr or r.stdout)[-500:]}")
    return cmd


def launches(mpiexec, tmp_path_factory, worker=None, prefix: str = "mpi"):
    """``get(n) -> (stdout, tmp)``: one launch of ``worker``'s ``all`` suite per rank count, cached
    (launches dominate the time); every test module's ``launched`` fixture returns one."""
    cache = {}

    def get(n: int):
        if n not in cache:
            tmp = tmp_path_factory.mktemp(f"{prefix}{n}")
            cache[n] = (run(mpiexec, n, "all", tmp, worker), tmp)
        return cache[n]

    return get


@pytest.fixture(scope="module")
def launched(mpiexec, tmp_path_factory):
    return launches(mpiexec, tmp_path_factory)


def _passed(out: str) -> set:
    return {line.split()[1] for line in out.splitlines() if line.startswith("PASS ")}


def run(mpiexec, n: int, suite: str, tmp_path, worker=None) -> str:
    """``worker``'s (default: mpi_worker.py) ``suite`` on ``n`` ranks, from this folder (not the repository
    root, whose unbuilt sources would shadow the package); a hang fails after TIMEOUT seconds."""
    worker = WORKER if worker is None else worker
    name = f"{Path(worker).stem} {suite}"
    cmd = [*mpiexec, "-n", str(n), sys.executable, "-m", "mpi4py", str(worker), suite, str(tmp_path)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=_env(), check=False,
                           cwd=Path(__file__).parent)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{name} on {n} ranks did not finish in {TIMEOUT} s (a hang?): {str(e.stdout)[-2000:]}")
    assert r.returncode == 0, f"{name} on {n} ranks exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


PRODUCT_CASES = ([f"square-hub-empty-rows-{i}-{v}" for i in ("int32", "int64")
                  for v in ("float32", "float64", "complex128")]
                 + ["empty-rank-int32-float64", "empty-rank-int64-float64"]
                 + ["no-ghosts-rank0-int32", "no-ghosts-rank0-int64", "banded-few-ghost-rows", "tiny-3x3",
                    "rect-37x23", "rect-23x37", "no-entries", "coo-input", "csc-input", "unsorted-rows-repaired",
                    "threads-2", "progress-chunks", "root-last-rank", "from-local"])


@pytest.mark.parametrize("n", RANKS)
def test_products_match_single_process(launched, n):
    """A @ x, A @ X, A^T x, A^H x, gather/scatter, to_global, comm_stats byte counts, on many matrices."""
    passed = _passed(launched(n)[0])
    assert set(PRODUCT_CASES) <= passed, sorted(set(PRODUCT_CASES) - passed)


@pytest.mark.parametrize("n", RANKS)
def test_cg_and_load(launched, n):
    """cg against scipy's cg (iterates and solution), load of .npz/.mtx/coo/compressed files, the CLI."""
    passed = _passed(launched(n)[0])
    want = {"cg-vs-scipy-float64", "cg-vs-scipy-complex128", "cg-zero-rhs", "load-m.npz", "load-m64.npz",
            "load-m.mtx", "load-coo.npz", "load-z.npz", "load-m.npz-row-starts", "cli"}
    assert want <= passed, sorted(want - passed)


SPGEMM_CASES = ["spgemm-square", "spgemm-square-same-plan", "spgemm-self", "spgemm-empty-ranks",
                "spgemm-empty-rank-a-only", "spgemm-rect", "spgemm-rect-same-plan", "spgemm-rect-mismatched",
                "spgemm-int64-values", "spgemm-no-entries", "spgemm-float32-int32", "spgemm-errors"]


@pytest.mark.parametrize("n", RANKS)
def test_spgemm_matches_scipy(launched, n):
    """A @ B of two DistCSR equals SciPy's product of the gathered matrices (integer values: exactly), with
    empty ranks, rectangular shapes, A's column partition equal to B's row partition or not; errors on every rank."""
    passed = _passed(launched(n)[0])
    assert set(SPGEMM_CASES) <= passed, sorted(set(SPGEMM_CASES) - passed)


@pytest.mark.parametrize("n", RANKS)
def test_save_load_parts_any_rank_count(launched, n):
    """save on k ranks (a directory of parts, or one file written by every rank), load on every count 1..n
    equal; missing or mismatched parts raise."""
    passed = _passed(launched(n)[0])
    want = {f"parts-saved-on-{k}" for k in range(1, n + 1)} | {"parts-resave", "parts-errors-raise-on-every-rank"}
    want |= {f"file-saved-on-{k}" for k in range(1, n + 1)} | {"file-errors"}
    if n >= 4:
        want.add("parts-saved-on-3-loaded-on-1-2-4")
    assert want <= passed, sorted(want - passed)


ERROR_CASES = {"column-out-of-bounds": ("InvariantError", "5.5"), "row-pointer-decreases": ("InvariantError", "5.3"),
               "operand-shape": ("ValueError", ""), "load-bad-file": ("InvariantError", "5.5"),
               "exchange-mode": ("ValueError", ""), "changed-after-check": ("InvariantError", "5.5"),
               "bad-row-starts": ("ValueError", "")}


@pytest.mark.parametrize("n", RANKS)
def test_bad_part_on_one_rank_raises_on_every_rank(launched, n):
    """A part broken on the last rank only (or a root-only error): every rank raises the same error, no hang."""
    out, tmp_path = launched(n)
    assert "DONE" in out
    for r in range(n):
        lines = (tmp_path / f"raised.{r}.txt").read_text().splitlines()
        got = {}
        for line in lines:
            case, etype, inv, msg = line.split("\t")
            got[case] = (etype, inv, msg)
        assert set(got) == set(ERROR_CASES), (r, sorted(got))
        for case, (etype, inv) in ERROR_CASES.items():
            assert got[case][:2] == (etype, inv), (r, case, got[case])
            if case == "operand-shape":  # the agreed message names the rank with the bad operand
                assert f"rank {n - 1} expects" in got[case][2], (r, got[case])
            elif r != (n - 1 if case != "bad-row-starts" else 0):
                assert "[raised on rank" in got[case][2], (r, case, got[case])
    row_msgs = {(tmp_path / f"raised.{r}.txt").read_text().splitlines()[0].split("\t")[3].split(" [raised")[0]
                for r in range(n)}
    assert len(row_msgs) == 1, row_msgs  # the same message (the global row) everywhere
    assert n == 1 or {"exchange-modes-disagree", "arguments-disagree"} <= _passed(out)


def test_docstring_examples(launched):
    """The examples in sparsetensor.mpi's docstrings, on 2 ranks."""
    assert "doctests" in _passed(launched(2)[0])


def test_import_sparsetensor_does_not_import_mpi4py():
    code = "import sys, sparsetensor; assert 'mpi4py' not in sys.modules and 'sparsetensor.mpi' not in sys.modules"
    subprocess.run([sys.executable, "-P", "-c", code], check=True, timeout=60)  # -P: never the source tree
