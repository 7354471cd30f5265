#!/usr/bin/env bash
# The PETSc stage of CI, separate from .ci/run (whose run must stay under 60 minutes): build
# PETSc and petsc4py from PyPI's sources against the venv's MPICH, then run the PETSc bridge's
# tests (tests/mpi/test_petsc.py on 1-3 ranks, and the FEM example with PETSc's GAMG) with SPARSETENSOR_REQUIRE_MPI=1 and
# SPARSETENSOR_REQUIRE_PETSC=1, so that a missing MPI or petsc4py fails instead of skipping.
#
#   bash ci/petsc.sh VENV   a venv that already holds sparsetensor (the wheel or an editable
#                           install), mpi4py and the mpich wheel: ci/wheel.sh's "$work/venv"
#                           (it could call `bash ci/petsc.sh "$work/venv"` after its pytest step)
#   PETSC_BUILD_ONLY=1 bash ci/petsc.sh VENV
#                           build (or find) PETSc and petsc4py in VENV and stop before the tests
#   bash ci/petsc.sh        a fresh venv in a temporary directory with `pip install ".[test,mpi]"
#                           mpich` first (sparsetensor built from source: add its build time)
#
# Time: building PETSc 3.26.1 + petsc4py 3.26.1 took 1494 s (25 minutes: PETSc 970 s, petsc4py
# 524 s, nearly all of it one compile of the generated PETSc.c, which the issue measured at
# 2.7 GB of memory) on this project's 2-core machine at nice 10, load about 4 (shared with a
# package rebuild); the issue measured about 16 minutes at load 4-5 and about 10 on a quiet
# machine. The tests take 15-30 s on top. The built libpetsc hard-codes the venv's path to
# libmpi, so a cached wheel only works in a venv at the same path: ci/wheel.sh therefore keeps
# the whole venv at one fixed path between runs (pip finds petsc==$PETSC_VERSION there and
# skips the build) and installs the wheel under test into it.
#
# Recipe (issue 36): libopenblas-dev from apt; MPICC/MPICXX from the mpich wheel;
# --with-fc=0 (no Fortran), --with-cuda=0 (else configure finds the machine's nvcc),
# --with-debugging=0, --with-x=0; petsc4py with --no-build-isolation (with isolation pip
# builds a second PETSc, without MPI). A pip that already has petsc==$PETSC_VERSION in the
# venv skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
start=$SECONDS
step() { echo "== [petsc $((SECONDS - start)) s] $*"; }
export PIP_DISABLE_PIP_VERSION_CHECK=1
PETSC_VERSION=${PETSC_VERSION:-3.26.1}

if [ $# -ge 1 ]; then
  venv=$(cd "$1" && pwd)
else
  venv=$(mktemp -d)/venv
  step "a fresh venv ($venv) with sparsetensor[test,mpi] and mpich"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$repo[test,mpi]" mpich
fi
py="$venv/bin/python"
[ -x "$venv/bin/mpicc" ] || { echo "no $venv/bin/mpicc: install the mpich wheel into the venv (pip install mpich)"; exit 1; }

step "OpenBLAS for PETSc's BLAS/LAPACK (apt-get install libopenblas-dev)"
blas=""
find_blas() {
  for f in /usr/lib/*/openblas-pthread/libopenblas.so /usr/lib/*/libopenblas.so /usr/lib64/libopenblas.so; do
    if [ -e "$f" ]; then blas=$f; return 0; fi
  done
  return 1
}
if ! find_blas; then
  apt-get install -y -q libopenblas-dev >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libopenblas-dev >/dev/null; }
  find_blas || { echo "libopenblas.so not found after apt-get install libopenblas-dev"; exit 1; }
fi
echo "BLAS/LAPACK: $blas"

step "build requirements of petsc4py (no build isolation): numpy, cython, setuptools, wheel"
"$py" -m pip install -q numpy "cython>=3" "setuptools>=70.1" wheel  # bdist_wheel for petsc4py's build

export PATH="$venv/bin:$PATH" MPICC="$venv/bin/mpicc" MPICXX="$venv/bin/mpicxx"
export PETSC_CONFIGURE_OPTIONS="--with-fc=0 --with-debugging=0 --with-x=0 --with-cuda=0 --with-blaslapack-lib=$blas"
step "PETSc $PETSC_VERSION from source (pip install --no-binary petsc; about 10-26 minutes)"
"$py" -m pip install --no-deps --no-binary petsc "petsc==$PETSC_VERSION"
step "petsc4py $PETSC_VERSION from source, on that PETSc (--no-build-isolation)"
"$py" -m pip install --no-deps --no-build-isolation --no-binary petsc4py "petsc4py==$PETSC_VERSION"

step "petsc4py imports, on the venv's MPI"
(cd "$venv" && "$py" -P - <<'PY'
from mpi4py import MPI
from petsc4py import PETSc
print("PETSc", ".".join(map(str, PETSc.Sys.getVersion())), "scalar", PETSc.ScalarType.__name__,
      "index", PETSc.IntType.__name__, "| MPI:", MPI.Get_library_version().splitlines()[0])
PY
)

if [ "${PETSC_BUILD_ONLY:-0}" = 1 ]; then
  step "done (build only): ci/petsc.sh took $((SECONDS - start)) s"
  exit 0
fi

step "tests/mpi/test_petsc.py (1-3 ranks; MPI and PETSc required)"
# pytest's entry point, not python -m pytest: the source tree must not shadow the installed package
(export SPARSETENSOR_REQUIRE_MPI=1 SPARSETENSOR_REQUIRE_PETSC=1; "$venv/bin/pytest" -q -p no:cacheprovider tests/mpi/test_petsc.py tests/mpi/test_fem_example.py)

step "done: ci/petsc.sh took $((SECONDS - start)) s"
