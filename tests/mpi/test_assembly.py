"""Assembly from every rank, the DistCSR operations and the abort hook, on 1-4 MPI ranks.

As in test_mpi.py: one ``mpiexec -n N python -m mpi4py tests/mpi/worker_assembly.py all TMP``
per rank count runs every suite, each rank checking its part against SciPy's
serial assembly (exactly: integer-valued entries). The hang test runs a
script *without* ``-m mpi4py``: only the hook that ``import sparsetensor.mpi``
installs can stop it from hanging.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_mpi import _env, _passed, launches, mpiexec  # noqa: F401  (mpiexec: the fixture)

WORKER = Path(__file__).with_name("worker_assembly.py")
RANKS = [1, 2, 3, 4]


@pytest.fixture(scope="module")
def launched(mpiexec, tmp_path_factory):  # noqa: F811
    return launches(mpiexec, tmp_path_factory, WORKER, "assembly")


ASSEMBLY_CASES = [f"assemble-{i}-{v}" for i in ("int32", "int64") for v in ("float32", "float64", "complex128")] + [
    "assemble-empty-ranks", "assemble-rect-dtype-agreed", "assemble-int-values", "assemble-insert", "assemble-vector",
    "from-local-row-starts"]


@pytest.mark.parametrize("n", RANKS)
def test_assembly_equals_scipy(launched, n):
    """Off-process entries, duplicates (within and across ranks), empty ranks, index and value dtypes, insert mode."""
    passed = _passed(launched(n)[0])
    assert set(ASSEMBLY_CASES) <= passed, sorted(set(ASSEMBLY_CASES) - passed)


@pytest.mark.parametrize("n", RANKS)
def test_operations_equal_serial(launched, n):
    """zero_rows (with x and b), A + B, A - B, alpha * A, -A, conj, transpose, copy against dense results."""
    passed = _passed(launched(n)[0])
    assert {"ops-sum-scale-transpose", "ops-zero-rows"} <= passed, passed


# case -> (exception type, only the last rank's input is bad: its rank is named everywhere)
ERRORS = {"row-out-of-range": ("ValueError", True), "col-out-of-range": ("ValueError", True),
          "lengths": ("ValueError", True), "float-indices": ("TypeError", True), "values-dtype": ("TypeError", True),
          "bad-mode": ("ValueError", True), "bad-shape": ("ValueError", True), "block": ("ValueError", True),
          "vector-row-out-of-range": ("ValueError", True), "from-local-row-starts": ("ValueError", False),
          "from-local-coo-rows": ("InvariantError", True), "zero-rows-out-of-range": ("ValueError", True),
          "zero-rows-x-without-b": ("ValueError", False), "block-jacobi-local": ("ValueError", False),
          "cols-none": ("TypeError", True), "zero-rows-b-int": ("TypeError", True), "gather-part": ("ValueError", False),
          "root-out-of-range": ("ValueError", False)}
ERRORS_MULTI = {"modes-disagree": ("ValueError", False), "shapes-disagree": ("ValueError", False),
                "from-local-global-shape": ("ValueError", False), "sum-partitions": ("ValueError", False),
                "alpha-disagree": ("ValueError", False), "alpha-dtype-disagree": ("ValueError", False),
                "gather-root-disagree": ("ValueError", False), "to_global-root-disagree": ("ValueError", False),
                "scatter-root-disagree": ("ValueError", False), "save-path-disagree": ("ValueError", False),
                "load-path-disagree": ("ValueError", False)}


@pytest.mark.parametrize("n", RANKS)
def test_bad_input_raises_on_every_rank(launched, n):
    """Bad input on the last rank only: every rank raises the same type; the message names that rank."""
    out, tmp = launched(n)
    assert "DONE" in out
    want = dict(ERRORS, **(ERRORS_MULTI if n > 1 else {}))
    for r in range(n):
        got = {}
        for line in (tmp / f"raised.{r}.txt").read_text().splitlines():
            case, etype, _, msg = line.split("\t")
            got[case] = (etype, msg)
        assert set(got) == set(want), (r, sorted(set(want) ^ set(got)))
        for case, (etype, names_rank) in want.items():
            assert got[case][0] == etype, (r, case, got[case])
            if names_rank:
                assert f"rank {n - 1}" in got[case][1], (r, case, got[case])
                if r != n - 1:
                    assert f"[raised on rank {n - 1} of {n}]" in got[case][1], (r, case, got[case])


def test_docstring_examples(launched):
    """The examples in _assemble.py and _ops.py, on 2 ranks."""
    assert "doctests-assembly" in _passed(launched(2)[0])


# -- never hang ---------------------------------------------------------------------------------
HANG_SCRIPT = """
    import sys, time
    import numpy as np
    import sparsetensor as st
    from mpi4py import MPI
    from sparsetensor import mpi as stmpi

    comm = MPI.COMM_WORLD
    t = st.from_dense(np.eye(8)) if comm.rank == 0 else None
    A = stmpi.DistCSR.from_global(t, comm=comm)
    r0, r1 = A.row_range
    comm.Barrier()
    if comm.rank == 1:
        print("RAISING", time.time(), file=sys.stderr, flush=True)
        raise RuntimeError("boom on purpose")
    y = A @ np.ones(r1 - r0)   # rank 0 waits here for rank 1, which never comes
    print("NOT REACHED", flush=True)
"""


# Each rank's stderr is also written to stderr-<rank>.txt as it is written: mpiexec forwards the
# ranks' output through its proxies, and an aborted job may end before they pass it on (seen once
# in CI on a loaded machine: the exit status right, no line of stderr).
_TEE = """
import os, sys
class _Tee:
    def __init__(self, stream, path):
        self._stream, self._file = stream, open(path, "w")
    def write(self, s):
        self._file.write(s)
        self._file.flush()
        return self._stream.write(s)
    def flush(self):
        self._file.flush()
        self._stream.flush()
    def __getattr__(self, name):
        return getattr(self._stream, name)
sys.stderr = _Tee(sys.stderr, "stderr-" + os.environ.get("PMI_RANK", "x") + ".txt")
"""


def _two_ranks(mpiexec, tmp_path, script: str, what: str):
    """``script`` run as a plain ``python script.py`` on 2 ranks with the abort hook on (the default);
    the result's ``stderr`` is what the ranks wrote there (from their files, rank by rank)."""
    path = tmp_path / "script.py"
    path.write_text(_TEE + script)
    env = _env()
    env.pop("SPARSETENSOR_MPI_ABORT", None)
    try:
        r = subprocess.run([*mpiexec, "-n", "2", sys.executable, str(path)], capture_output=True, text=True,
                           timeout=60, env=env, cwd=tmp_path, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job hung: {what} did not abort it within 60 s")
    r.stderr = "".join(f.read_text() for f in sorted(tmp_path.glob("stderr-*.txt")))
    return r


def test_uncaught_exception_on_one_rank_aborts_the_job(mpiexec, tmp_path):  # noqa: F811
    """A plain ``python script.py`` (not ``-m mpi4py``): rank 1 raises before A @ x; the job ends non-zero, fast."""
    r = _two_ranks(mpiexec, tmp_path, textwrap.dedent(HANG_SCRIPT), "rank 1's uncaught exception")
    end = time.time()
    assert r.returncode != 0 and "NOT REACHED" not in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])
    raised_at = [float(line.split()[1]) for line in r.stderr.splitlines() if line.startswith("RAISING ")]
    assert raised_at and end - raised_at[0] < 10, (raised_at, end, r.stderr[-2000:])
    assert "on rank 1 of 2" in r.stderr and "RuntimeError: boom on purpose" in r.stderr, r.stderr[-2000:]
    assert r.stderr.count("RuntimeError: boom on purpose") == 1, r.stderr[-3000:]  # the traceback once


@pytest.mark.parametrize("call", ["sys.exit(3)", "exit(3)", "quit(3)"])
def test_sys_exit_failure_on_one_rank_aborts_the_job(mpiexec, tmp_path, call):  # noqa: F811
    """``sys.exit(3)`` on rank 1 (argparse's exits too; a script's builtin ``exit``/``quit``): no
    excepthook runs for SystemExit, so the exit itself aborts the job, with that status, where rank 1
    would wait in MPI_Finalize for rank 0."""
    r = _two_ranks(mpiexec, tmp_path, textwrap.dedent(HANG_SCRIPT).replace('raise RuntimeError("boom on purpose")',
                                                                            call), f"rank 1's {call}")
    assert r.returncode != 0 and "NOT REACHED" not in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "sys.exit(3) on rank 1 of 2" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("setting,installed", [(None, True), ("0", False), ("threads", True)])
def test_abort_hook_opt_out(mpiexec, tmp_path, setting, installed):  # noqa: F811
    """SPARSETENSOR_MPI_ABORT=0 leaves sys.excepthook alone; on one rank the hook only passes the exception on."""
    env = _env()
    env.pop("SPARSETENSOR_MPI_ABORT", None)
    if setting is not None:
        env["SPARSETENSOR_MPI_ABORT"] = setting
    code = ("import sys, threading, sparsetensor.mpi\n"
            f"assert (sys.excepthook is not sys.__excepthook__) == {installed}, sys.excepthook\n"
            f"assert (threading.excepthook is not threading.__excepthook__) == {setting == 'threads'}\n"
            "raise ValueError('one rank only')\n")
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60, env=env,
                       cwd=tmp_path, check=False)
    # one process: the exception ends it as Python does (exit 1, the traceback), no MPI_Abort
    assert r.returncode == 1 and "ValueError: one rank only" in r.stderr, (r.returncode, r.stderr[-2000:])
    assert "MPI_Abort" not in r.stderr and "AssertionError" not in r.stderr, r.stderr[-2000:]
