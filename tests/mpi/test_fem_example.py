"""examples/fem_poisson.py (issue 36's FEM example) on 1, 2 and 4 ranks: every rank assembles its own
Q1 elements, the boundary rows are zeroed, GMRES + block-Jacobi(ILU(0)) solves; the error against the
exact solution falls as h^2, and the solve converges on every rank count."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_mpi import TIMEOUT, _env, mpiexec  # noqa: F401  (the fixture: how to launch, or skip)
from test_petsc import petsc4py_installed  # noqa: F401  (skips without petsc4py unless REQUIRE_PETSC=1)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fem_poisson.py"


def _run(mpiexec, ranks: int, n: int, *extra) -> float:  # noqa: F811
    cmd = [*mpiexec, "-n", str(ranks), sys.executable, str(EXAMPLE), "--n", str(n), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=_env(), check=False,
                       cwd=Path(__file__).parent)
    assert r.returncode == 0, f"{ranks} ranks: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert f"{(n + 1) ** 2} unknowns" in r.stdout and f"{ranks} ranks" in r.stdout
    m = re.search(r"gmres\+block_jacobi\(ilu0\): info 0, (\d+) iterations, max error ([0-9.e+-]+)", r.stdout)
    assert m, r.stdout
    if extra:  # PETSc's CG + GAMG on the same assembled matrix: the same discrete solution
        p = re.search(r"petsc cg\+gamg: info 0, max error ([0-9.e+-]+)", r.stdout)
        assert p, r.stdout
        assert abs(float(p.group(1)) - float(m.group(2))) <= 1e-6
    return float(m.group(2))


@pytest.mark.skipif(not EXAMPLE.exists(), reason="run from a source checkout (examples/ is not installed)")
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_fem_example(mpiexec, ranks):  # noqa: F811
    e8, e16 = _run(mpiexec, ranks, 8), _run(mpiexec, ranks, 16)
    assert e16 < 0.05
    assert 3.0 < e8 / e16 < 5.0  # O(h^2): halving h divides the error by about 4


@pytest.mark.skipif(not EXAMPLE.exists(), reason="run from a source checkout (examples/ is not installed)")
@pytest.mark.parametrize("ranks", [1, 3])
def test_fem_example_with_petsc_gamg(petsc4py_installed, mpiexec, ranks):  # noqa: F811
    assert _run(mpiexec, ranks, 16, "--petsc") < 0.05
