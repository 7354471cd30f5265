#!/bin/bash
# The checks of the CUDA backend on a machine with an NVIDIA GPU, in one bounded run (GPU time
# is lent in minutes). Run from the repository root:
#
#   BUDGET=400 OUT=/tmp/out bash ci/gpu_check.sh [build] [tests] [memcheck] [racecheck] [bench] [suite]
#
# (no step names: all of them, in that order). Each step gets at most its cap and what is left
# of BUDGET seconds; its output goes to $OUT/<step>.log and its last lines to stdout.
# - build: the kernels in place (meson, -Dnative=true, 16 jobs) unless .so files for this
#   Python, built from these sources (a hash in sparsetensor/_lib/.built), are there already;
#   $OUT/lib.tgz keeps them for the next run (unpack it at the root, carry sparsetensor/_lib's
#   ignored files or the tarball). ci/device_prep.sh makes that tarball on the machine you work on,
#   with the compiled CUDA kernels for sm_90 (SPARSETENSOR_CUDA_CACHE), so that no device time
#   goes to building.
# - tests: tests/cuda on the real device (the emulator's half deselected), TEST_WORKERS xdist
#   workers (8: a crashing test takes its worker down, not the run); TEST_ARGS replaces the
#   selection (say "tests/cuda/test_cuda_spgemm.py -k 'gpu and csc'").
# - memcheck / racecheck: compute-sanitizer over the GPU tests of tests/cuda/test_cuda.py and
#   test_cuda_interop.py, every worker process followed, a per-test timeout (TEST_TIMEOUT,
#   150 s: a worker's first test waits for CUDA to start under the tool, 30-70 s with 7-14
#   workers on an H100) that names a test that hangs; SAN_WORKERS xdist workers (6: memcheck
#   took 62 s for all the GPU tests), SANITIZER_ARGS more pytest arguments (say "-v --maxfail
#   2": each outcome as it ends, the first errors in full), SAN_TESTS the test files (default
#   test_cuda.py and test_cuda_interop.py; "tests/cuda" for all of them).
# - bench: python -m bench.cuda (torch and CuPy as peers where installed).
# - suite: the whole test suite on the machine (CPU tests too), 14 workers.
set -u
T0=$(date +%s)
BUDGET=${BUDGET:-400}
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build tests memcheck racecheck bench suite)
export PYTHONUNBUFFERED=1
ln -sfn "$PWD" /tmp/st_root  # the source tree on the path under another name (bench/ drops the root)
export PYTHONPATH=/tmp/st_root${PYTHONPATH:+:$PYTHONPATH}
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
PYTEST=(python3 -m pytest -q -p no:cacheprovider -p no:benchmark --tb=short -rfE)

elapsed() { echo $(( $(date +%s) - T0 )); }
step() {  # step NAME CAP CMD...: run CMD under min(CAP, time left), log to $OUT/NAME.log
    local name=$1 cap=$2; shift 2
    local left=$(( BUDGET - $(elapsed) ))
    local t=$(( left < cap ? left : cap ))
    if [ "$t" -lt 15 ]; then echo "=== $name: skipped, $left s left"; return; fi
    echo "=== $name [$(elapsed) s] (limit $t s)"
    timeout "$t" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    grep -v -e "^[.sxFE]* *\[ *[0-9]*%\]$" -e "Warning" -e "warner(" "$OUT/$name.log" | tail -${TAIL:-25}
    echo "=== $name rc=$rc [$(elapsed) s]"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -V
    python3 -c "import cuda.core, cuda.bindings, numpy; print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"
    python3 -c "from cuda.bindings import nvrtc, driver; print('NVRTC', nvrtc.nvrtcVersion()[1:], 'driver API', driver.cuDriverGetVersion()[1])"
    python3 -c "import torch; print('torch', torch.__version__)" 2>/dev/null
    python3 -c "import cupy; print('cupy', cupy.__version__)" 2>/dev/null
    [ -n "$CS" ] && "$CS" --version | tail -1
} 2>&1 | tee "$OUT/env.log"

for s in "${steps[@]}"; do
    case $s in
    build)
        suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
        # the kernels' sources, hashed: carried .so files of other sources are rebuilt
        stamp=$(find sparsetensor/_lib -type f \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.h' \
            -o -name '*.c' -o -name 'meson.build' \) | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-16)
        if ls sparsetensor/_lib/*"$suffix" >/dev/null 2>&1 && [ "$(cat sparsetensor/_lib/.built 2>/dev/null)" = "$stamp" ]
        then
            echo "=== build: kernels for $suffix of these sources already in place ($stamp)"
        else
            rm -f sparsetensor/_lib/*"$suffix" sparsetensor/_lib/_x86_64_v*/*"$suffix"
            step build 300 bash -c "python3 -m mesonbuild.mesonmain setup /tmp/st_build -Dbuildtype=release \
                -Dnative=true && ninja -C /tmp/st_build -j16 && cp /tmp/st_build/sparsetensor/_lib/*$suffix \
                sparsetensor/_lib/ && echo $stamp > sparsetensor/_lib/.built && \
                tar czf $OUT/lib.tgz sparsetensor/_lib/*$suffix sparsetensor/_lib/.built"
        fi
        python3 -c "import sparsetensor.cuda as c; c.precompile()" ;;
    tests)
        if [ -n "${TEST_ARGS:-}" ]; then
            eval "sel=($TEST_ARGS)"
        else
            sel=(tests/cuda -k "not emulator")  # every GPU test file
        fi
        step tests "${TESTS_CAP:-240}" "${PYTEST[@]}" -n "${TEST_WORKERS:-8}" "${sel[@]}" ;;
    memcheck | racecheck)
        [ -z "$CS" ] && { echo "=== $s: no compute-sanitizer here"; continue; }
        step "$s" "${SANITIZER_CAP:-180}" "$CS" --tool "$s" --target-processes all --error-exitcode 9 \
            "${PYTEST[@]}" -n "${SAN_WORKERS:-6}" --timeout "${TEST_TIMEOUT:-150}" --durations 5 \
            ${SANITIZER_ARGS:-} ${SAN_TESTS:-tests/cuda/test_cuda.py tests/cuda/test_cuda_interop.py} -k gpu ;;
    bench)
        step bench "${BENCH_CAP:-200}" python3 -m bench.cuda --profile
        cp bench/results/cuda.json "$OUT/" 2>/dev/null ;;
    suite)
        step suite 150 "${PYTEST[@]}" -n 14 tests -k "not emulator" ;;
    *)
        echo "unknown step $s (build tests memcheck racecheck bench suite)"; exit 2 ;;
    esac
done
echo "done in $(elapsed) s; logs in $OUT"
