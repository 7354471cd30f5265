"""sparsetensor.mpi's PETSc bridge on 1-3 MPI ranks: to_petsc/from_petsc, PETSc vectors over our slices, solve.

One launch per rank count (``mpiexec -n N python -m mpi4py tests/mpi/worker_petsc.py all TMP``)
runs every suite; the worker checks each rank's part against our own one-process results and
SciPy's ``spsolve`` and prints ``PASS name`` per case. Without petsc4py the tests skip (a bare
``pip install ".[test]"`` has none), unless ``SPARSETENSOR_REQUIRE_PETSC=1`` (set by
ci/petsc.sh, which builds PETSc) makes that a failure; without MPI they skip as test_mpi.py's do.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from test_mpi import launches, mpiexec  # noqa: F401  (the fixture: how to launch, or skip)

WORKER = Path(__file__).with_name("worker_petsc.py")
RANKS = [1, 2, 3]


@pytest.fixture(scope="module")
def petsc4py_installed():
    if importlib.util.find_spec("petsc4py") is None:
        why = 'petsc4py is not installed (pip install "sparsetensor[petsc]"; ci/petsc.sh builds PETSc)'
        if os.environ.get("SPARSETENSOR_REQUIRE_PETSC") == "1":
            pytest.fail(f"PETSc is required here (SPARSETENSOR_REQUIRE_PETSC=1) but {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def launched(petsc4py_installed, mpiexec, tmp_path_factory):  # noqa: F811
    return launches(mpiexec, tmp_path_factory, WORKER, "petsc")


def _passed(out: str) -> set:
    return {line.split()[1] for line in out.splitlines() if line.startswith("PASS ")}


ROUND_TRIPS = [f"roundtrip-{c}" for c in ("poisson-int32", "empty-rank-int32", "poisson-int64", "empty-rank-int64",
                                          "int64-values-rect", "float32-values", "no-entries")]


@pytest.mark.parametrize("n", RANKS)
def test_round_trip_exact(launched, n):
    """to_petsc: AIJ type, our ownership ranges, MatMult == A @ x, the gathered Mat == to_global(); from_petsc
    gives the matrix back; values shared when their dtype is PETSc's (a change in place reaches PETSc), copied
    otherwise; PETSc's MatZeroRows writes our values and leaves our index arrays alone; the Mat keeps our
    arrays alive; a Mat that PETSc assembled reads back."""
    got = _passed(launched(n)[0])
    want = set(ROUND_TRIPS) | {"roundtrip", "mat-outlives-distcsr", "petsc-writes-values-not-indices",
                               "from-petsc-assembled-by-petsc"}
    assert want <= got, sorted(want - got)


@pytest.mark.parametrize("n", RANKS)
def test_vectors_share_our_slices(launched, n):
    assert "vectors-shared" in _passed(launched(n)[0])


@pytest.mark.parametrize("n", RANKS)
def test_solve(launched, n):
    """gmres + gamg and cg + bjacobi reach SciPy's spsolve solution of a 2-D Poisson problem; options pass
    through under a prefix of the call's own and are gone afterwards; info as cg's; a Mat as A."""
    got = _passed(launched(n)[0])
    want = {"solve-gmres-gamg", "solve-cg-bjacobi", "solve-options", "solve-info-x0-mat"}
    assert want <= got, sorted(want - got)


ERROR_CASES = {"complex-matrix": "TypeError", "vec-dtype-on-last-rank": "TypeError",
               "vec-shape-on-last-rank": "ValueError", "vec-not-contiguous": "ValueError", "dense-mat": "TypeError",
               "baij-mat": "TypeError", "not-a-mat": "TypeError", "solve-b-on-last-rank": "ValueError",
               "solve-complex-b": "TypeError", "solve-not-a-matrix": "TypeError", "no-petsc4py": "ImportError",
               "solve-bjacobi-missing-diagonal": "Error", "solve-sor-missing-diagonal": "ValueError",
               "solve-gamg-zero-row": "ValueError", "int64-beyond-2**53": "TypeError",
               "vec-int64-beyond-2**53": "TypeError"}
ONE_RANK_CASES = {"aij-changed-after-check": "InvariantError", "baij-changed-after-check": "InvariantError"}


@pytest.mark.parametrize("n", RANKS)
def test_bad_input_raises_on_every_rank(launched, n):
    """A complex matrix on a real PETSc, a non-AIJ Mat, a bad slice on the last rank only, no petsc4py:
    every rank raises the same exception type (no rank goes on into a collective alone)."""
    out, tmp = launched(n)
    assert "errors-raise-on-every-rank" in _passed(out) and "DONE" in out
    for r in range(n):
        got = {}
        for line in (tmp / f"raised.{r}.txt").read_text().splitlines():
            case, etype, _msg = line.split("\t")
            got[case] = etype
        # PETSc's Error, which agree cannot rebuild from a message: a RemoteError on every rank of
        # several (the failing rank's chained to PETSc's), PETSc's own on one rank
        petsc = {"solve-bjacobi-missing-diagonal": "Error" if n == 1 else "RemoteError"}
        several = {"solve-pc-on-last-rank": "ValueError", "vec-part-on-last-rank": "ValueError",
                   "from-petsc-none-on-last-rank": "TypeError", "solve-mat-on-last-rank": "ValueError"}
        assert got == ERROR_CASES | petsc | (several if n > 1 else ONE_RANK_CASES), (r, got)


def test_docstring_examples(launched):
    """The examples of sparsetensor.mpi._petsc, on 2 ranks."""
    assert "petsc-doctests" in _passed(launched(2)[0])
