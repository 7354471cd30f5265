#!/bin/bash
# The emulator's memcheck and racecheck: the CUDA tests' emulator half with every kernel built
# under a sanitizer. No GPU is needed; it checks the accesses the emulator makes, which are the
# kernels' accesses for the launches the tests make. Run from the repository root:
#
#   bash ci/emulator_sanitize.sh address|thread [pytest arguments]   (default: all of tests/cuda)
#   bash ci/emulator_sanitize.sh address tests/cuda -n auto          (one pytest-xdist worker per CPU)
#
# - address (memcheck): AddressSanitizer; a kernel's read or write outside its buffer (which the
#   emulated device allocates to the byte) or outside a __shared__ array stops the run with the
#   kernel, the source line and the buffer.
# - thread (racecheck): ThreadSanitizer; every thread of a block is a fiber of its own, ordered
#   only by barriers, warp exchanges, the end of its block and atomics, so that two threads that
#   touch the same shared or global address between two barriers, one of them writing and not
#   both atomically, are reported with both stacks. Blocks run one after another, so a race
#   between two blocks is not seen.
#
# The kernels are built once per source and mode into $SPARSETENSOR_EMULATOR_CACHE (default
# /tmp/sparsetensor-emulator-<mode>-$UID). Python's allocations go through the sanitizer's
# malloc too (LD_PRELOAD); leaks are not reported (the interpreter keeps some).
set -euo pipefail
mode=${1:-}
# reports go to files (pytest holds the test's stderr, and a halted process never hands it back)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
case $mode in
    address) lib=libasan.so; export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:detect_stack_use_after_return=0:log_path=$logs/report ;;
    thread) lib=libtsan.so; export TSAN_OPTIONS=halt_on_error=1:report_signal_unsafe=0:report_thread_leaks=0:log_path=$logs/report
        # the CPU kernels' OpenMP runtime is not built under TSan: it would not see their
        # barriers and would report the reference results' threads instead of the kernels'
        export OMP_NUM_THREADS=1 ;;
    *) echo "usage: bash ci/emulator_sanitize.sh address|thread [pytest arguments]"; exit 2 ;;
esac
shift
runtime=$(${CXX:-c++} -print-file-name=$lib)
if [ ! -e "$runtime" ]; then
    echo "no $lib for ${CXX:-c++}: the emulator's $mode check cannot run"
    exit 2
fi
[ $# -eq 0 ] && set -- tests/cuda
export LD_PRELOAD=$runtime
export SPARSETENSOR_EMULATOR_SANITIZE=$mode
export SPARSETENSOR_EMULATOR_CACHE=${SPARSETENSOR_EMULATOR_CACHE:-/tmp/sparsetensor-emulator-$mode-$(id -u)}
# the runtime is preloaded into pytest and its xdist workers (`-n auto` among the arguments);
# the emulator starts the kernels' compiler without it. The source tree is not put on sys.path
# (an installed wheel is what runs)
rc=0
python3 -c 'import sys; del sys.path[0]; import pytest; sys.exit(pytest.main(sys.argv[1:]))' \
    -q -p no:cacheprovider -k emulator "$@" || rc=$?
if compgen -G "$logs/report*" >/dev/null; then
    echo "=== the sanitizer's reports ($mode):"
    cat "$logs"/report*
    [ $rc -eq 0 ] && rc=1
fi
exit $rc
