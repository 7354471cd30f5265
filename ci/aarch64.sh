#!/usr/bin/env bash
# Cross-build sparsetensor for aarch64 (Linux, glibc) on an x86-64 Debian machine and test
# it under qemu-user, with an aarch64 CPython and aarch64 NumPy: no aarch64 hardware needed.
#
#   ci/aarch64.sh [smoke|kernels|full|PYTEST-ARGS...]
#     smoke    cross build + ci/cpu_smoke.py (every layout built, converted, multiplied, vs NumPy)
#              (the default: the mode cheap enough for CI)
#     kernels  smoke + tests/kernels/test_dispatch.py and the kernel test files (KERNEL_TESTS, the ones
#              ci/wheel.sh reruns per level)
#     full     smoke + the whole test suite
#     anything else: smoke + pytest with those arguments, e.g. tests/ops/test_blas.py -k spmv
#
# Steps:
#   1. tools: gcc-aarch64-linux-gnu and qemu-user (apt-get install when missing; if that fails
#      the script says so, prints SKIPPED (NOT RUN) and exits 0, or 1 with AARCH64_REQUIRE=1)
#   2. a sysroot (not installed: extracted): Debian bookworm's arm64 python3.11 and the
#      libraries it needs (apt-get download with a private apt configuration that leaves the
#      machine's apt and dpkg alone, then dpkg -x), and aarch64 wheels of NumPy (+ pytest,
#      hypothesis, SciPy in $AARCH64_CACHE/testsite, fetched only when tests run) from PyPI
#      (pip install --platform --target). Kept in $AARCH64_CACHE/sysroot (default
#      ~/.cache/sparsetensor-aarch64) and reused while its stamp (the pins below) matches.
#   3. meson setup with ci/aarch64-linux-gnu.ini (Meson runs the sysroot's python3.11 under
#      qemu to learn the extension suffix and the include directories), ninja, meson install
#      into a staging directory: on aarch64 there is one CPU level, the compiler's default
#      (armv8-a, NEON), so each kernel module is compiled once. The build directory stays in
#      $AARCH64_CACHE (one per source tree): a second run recompiles only what changed.
#   4. under qemu-aarch64: ci/cpu_smoke.py, then pytest (python3.11 -P, so the source tree is
#      never imported; the script checks that sparsetensor comes from the staging directory).
#
# Measured on the 2-core x86-64 development machine while CI and other jobs ran (load average
# 8-11), qemu 7.2: a first run (empty cache) took 31 min in smoke mode: 88 s for the sysroot,
# 29.5 min wall (8.9 min of CPU) for the cross build, 10 s for the smoke test. A second run with
# nothing changed: 37 s (smoke), 2 min with tests/kernels/test_dispatch.py. The kernel tests under qemu
# take about an hour there: run them by hand (kernels), not in every CI run.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
mode=${1:-smoke}
start=$SECONDS
step() { echo "== [aarch64 $((SECONDS - start)) s] $*"; }

# the kernel test files of ci/wheel.sh (every kernel module: _validate, _dense/_fromdense,
# _coalesce/_sum_duplicates, _convert, _spmm, _spgemm, _elementwise/_coo_merge)
KERNEL_TESTS="tests/kernels/test_kernel_validate.py tests/kernels/test_kernel_dense.py tests/ops/test_coalesce.py
  tests/ops/test_convert.py tests/ops/test_blas.py tests/ops/test_spgemm.py tests/ops/test_binary.py"
# Debian bookworm arm64: CPython 3.11 and what its interpreter and stdlib extensions load
DEBS="libc6 libgcc-s1 libgomp1 libstdc++6 python3.11-minimal libpython3.11-minimal
  libpython3.11-stdlib libpython3.11-dev libexpat1 zlib1g libffi8 libssl3 libbz2-1.0 liblzma5
  libsqlite3-0 libuuid1 libcrypt1 libncursesw6 libtinfo6 libreadline8"
WHEELS="numpy==2.4.6"
TEST_WHEELS="pytest==9.0.3 hypothesis==6.155.2 scipy==1.17.1"

skip() {
  echo "SKIPPED (NOT RUN): $*; sparsetensor was NOT built or tested for aarch64"
  exit "${AARCH64_REQUIRE:-0}"
}

# aarch64_wheels DIR REQUIREMENT...: aarch64 CPython 3.11 wheels from PyPI, unpacked into DIR
aarch64_wheels() {
  local dir=$1
  shift
  python3 -m pip install -q --disable-pip-version-check --target "$dir" --only-binary=:all: \
    --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 --implementation cp \
    --python-version 3.11 --abi cp311 "$@" 2>&1 | grep -v "WARNING: \(Location\|Running pip\)" || true
}

step "tools: aarch64-linux-gnu-gcc, qemu-aarch64"
need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
if ((${#need[@]})); then
  apt-get install -y -q "${need[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${need[@]}" >/dev/null 2>&1; } \
    || skip "apt-get install ${need[*]} failed"
fi
for tool in aarch64-linux-gnu-gcc qemu-aarch64 apt-get dpkg meson ninja cython; do
  command -v $tool >/dev/null 2>&1 || skip "$tool is missing"
done

cache=${AARCH64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparsetensor-aarch64}
root=$cache/sysroot
# one build directory per source tree, kept between runs: ninja rebuilds what changed
build=$cache/build-$(echo "$repo" | md5sum | cut -c1-12)
stamp="debs: $(echo $DEBS) wheels: $WHEELS"
if [[ "$(cat "$root/.stamp" 2>/dev/null)" != "$stamp" ]]; then
  step "sysroot $root: Debian arm64 python3.11, then aarch64 wheels"
  rm -rf "$root" "$root.apt" "$cache"/build-*
  apt="$root.apt"
  mkdir -p "$root" "$apt/state/lists/partial" "$apt/cache/archives/partial" "$apt/sources" "$apt/debs"
  touch "$apt/state/status"
  # a private apt: arm64 only, its own lists and cache; the machine's dpkg is not touched
  cat >"$apt/sources/debian.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$apt/apt.conf" <<EOF
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
Dir::State "$apt/state";
Dir::State::status "$apt/state/status";
Dir::Cache "$apt/cache";
Dir::Etc::sourcelist "/dev/null";
Dir::Etc::sourceparts "$apt/sources";
Dir::Etc::preferencesparts "$apt/sources";
EOF
  # shellcheck disable=SC2086
  (export APT_CONFIG="$apt/apt.conf"; cd "$apt/debs" && apt-get update -q >/dev/null \
    && apt-get download -q $DEBS 2>&1 | grep -v "unsandboxed" || true) >/dev/null
  n=$(ls "$apt/debs"/*.deb 2>/dev/null | wc -l)
  (($(echo $DEBS | wc -w) == n)) || skip "apt-get download of the Debian arm64 packages failed ($n .deb)"
  for deb in "$apt/debs"/*.deb; do dpkg -x "$deb" "$root"; done
  # Meson reads the include directory from sysconfig (INCLUDEPY = /usr/include/python3.11):
  # point it into the sysroot, never at this machine's x86-64 headers
  sed -i "s|'/usr/include|'$root/usr/include|g; s|'/usr/lib/aarch64-linux-gnu|'$root/usr/lib/aarch64-linux-gnu|g" \
    "$root/usr/lib/python3.11/_sysconfigdata__aarch64-linux-gnu.py"
  # The interpreter Meson and the tests run: the sysroot's python3.11 under qemu-aarch64.
  # -0 makes this script its argv[0], hence sys.executable: a test's subprocess with
  # sys.executable runs under qemu too (binfmt_misc is not needed), and Python still finds
  # its prefix (and so its headers) in the sysroot.
  printf '#!/bin/sh\n# aarch64 CPython of this sysroot under qemu-user (written by ci/aarch64.sh)\nexec qemu-aarch64 -L "%s" -0 "%s" "%s" "$@"\n' \
    "$root" "$root/usr/bin/python3-qemu" "$root/usr/bin/python3.11" >"$root/usr/bin/python3-qemu"
  chmod +x "$root/usr/bin/python3-qemu"
  # on that python's sys.path (Debian's site.py adds <prefix>/lib/python3/dist-packages)
  aarch64_wheels "$root/usr/lib/python3/dist-packages" $WHEELS
  rm -rf "$apt"
  echo "$stamp" >"$root/.stamp"
fi
py="$root/usr/bin/python3-qemu"
"$py" -c "import platform, numpy; assert platform.machine() == 'aarch64'; print('aarch64 python', platform.python_version(), 'numpy', numpy.__version__)" \
  || skip "the aarch64 python in $root does not run under qemu-aarch64"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step "cross build (meson + ninja) in $build"
printf "[constants]\nsysroot = '%s'\n" "$root" >"$cache/sysroot.ini"
if [[ ! -f "$build/build.ninja" ]]; then
  rm -rf "$build"
  meson setup "$build" "$repo" --cross-file "$cache/sysroot.ini" --cross-file "$repo/ci/aarch64-linux-gnu.ini" \
    --buildtype=release --prefix=/ -Dpython.platlibdir=site -Dpython.purelibdir=site >"$work/setup.log" \
    || { cat "$work/setup.log"; exit 1; }
fi
ninja -C "$build" >"$work/ninja.log" 2>&1 || { tail -50 "$work/ninja.log"; exit 1; }
grep -i "warning" "$work/ninja.log" | sort | uniq -c | sort -rn | head -20 || true
meson install -C "$build" --destdir "$work/stage" --no-rebuild >/dev/null
file "$work/stage/site/sparsetensor/_lib/_spmm".*.so 2>/dev/null || true
step "cross build finished"

export PYTHONPATH="$work/stage/site"
"$py" -P -c "
import sys, sparsetensor as st
if not st.__file__.startswith('$work/stage/'):
    sys.exit(f'imported {st.__file__}, not the cross-built package')
st.show_config()"

step "smoke test (ci/cpu_smoke.py) under qemu-aarch64"
out=$(cd "$work" && "$py" -P "$repo/ci/cpu_smoke.py" 2>&1) || { echo "$out"; echo "the aarch64 smoke test failed"; exit 1; }
echo "$out"
case "$out" in
  *"CPU level 'baseline'"*"all results agree with NumPy"*) ;;
  *) echo "the aarch64 smoke test did not run at the baseline level"; exit 1 ;;
esac

case "$mode" in
  smoke) tests=() ;;
  kernels) read -r -a tests <<<"tests/kernels/test_dispatch.py $(echo $KERNEL_TESTS)" ;;
  full) tests=(tests) ;;
  *) tests=("$@") ;;
esac
if ((${#tests[@]})); then
  # the test tools: not needed by the smoke test, so kept apart from the sysroot
  testsite=$cache/testsite
  if [[ "$(cat "$testsite/.stamp" 2>/dev/null)" != "$TEST_WHEELS" ]]; then
    step "aarch64 wheels for the tests: $TEST_WHEELS"
    rm -rf "$testsite"
    # shellcheck disable=SC2086
    aarch64_wheels "$testsite" $TEST_WHEELS $WHEELS  # SciPy resolved against the pinned NumPy,
    rm -rf "$testsite"/numpy "$testsite"/numpy-* "$testsite"/numpy.libs "$testsite"/bin  # which the sysroot has
    echo "$TEST_WHEELS" >"$testsite/.stamp"
  fi
  export PYTHONPATH="$PYTHONPATH:$testsite"
  step "pytest ${tests[*]} under qemu-aarch64"
  "$py" -P -m pytest -q -p no:cacheprovider "${tests[@]}"
fi
step "done: ci/aarch64.sh $mode took $((SECONDS - start)) s"
