#!/bin/bash
# What a device run (ci/gpu_check.sh on a lent GPU machine) carries, made here so that no device
# time goes to building: the device's python3 is 3.12 and nothing can be installed there.
#
#   bash ci/device_prep.sh            # -> .devcarry/ (keep it out of git: .git/info/exclude)
#
# - .devcarry/lib.tgz: the kernels of the CPU-dispatching wheel built for CPython 3.12
#   (WHEEL=path reuses a built one), the .so files, _build_config.py and the .built stamp that
#   gpu_check.sh compares with its hash of the kernel sources (it rebuilds on a mismatch);
# - .devcarry/cudacache: every CUDA kernel file compiled with NVRTC 13.0 for sm_90 (the H100's
#   and H200's target), the disk cache of sparsetensor.cuda (the key holds NVRTC's major.minor);
# - .devcarry/lib/libgomp.so.1, for a machine without one (the wheel is not auditwheel-repaired).
#
# Then, with the device tool: carry [".devcarry"] and run
#   tar xzf .devcarry/lib.tgz && export SPARSETENSOR_CUDA_CACHE=$PWD/.devcarry/cudacache &&
#   BUDGET=... bash ci/gpu_check.sh tests memcheck racecheck bench
# (python3 -c "import ctypes; ctypes.CDLL('libgomp.so.1')" || export LD_LIBRARY_PATH=$PWD/.devcarry/lib)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON312:-$(pyenv root 2>/dev/null)/versions/$(pyenv versions --bare 2>/dev/null | grep '^3\.12' | tail -1)/bin/python}
"$PY" -c "import sys; assert sys.version_info[:2] == (3, 12), sys.version" || { echo "need CPython 3.12 (PYTHON312=...)"; exit 2; }
out=$PWD/.devcarry
work=$(mktemp -d)
"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" -q install build "cuda-core>=1.2.2,<2" "cuda-bindings>=13,<14" "nvidia-cuda-nvrtc==13.0.*"
if [ -z "${WHEEL:-}" ]; then
    "$work/venv/bin/python" -m build --wheel -o "$work/dist" .
    WHEEL=$(ls "$work"/dist/*.whl)
fi
rm -rf "$out"  # no stale kernels or cache entries to carry (the carry is limited to 64 MiB)
mkdir -p "$out/lib"
(cd "$work" && mkdir stage && cd stage && "$PY" -m zipfile -e "$WHEEL" .)
# gpu_check.sh's stamp: the kernel sources of sparsetensor/_lib, hashed in C collation
find sparsetensor/_lib -type f \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.h' \
    -o -name '*.c' -o -name 'meson.build' \) | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-16 \
    > "$work/stage/sparsetensor/_lib/.built"
(cd "$work/stage" && tar czf "$out/lib.tgz" sparsetensor/_lib/.built sparsetensor/_lib/_build_config.py \
    $(find sparsetensor/_lib -name '*.so'))
cp "$(gcc -print-file-name=libgomp.so.1)" "$out/lib/"
"$work/venv/bin/pip" -q install --no-deps "$WHEEL"
# the device compiles the tree's kernels/ (gpu_check.sh runs from the tree), which may be newer than
# a reused wheel's copy: those are the sources the cache must hold
site=$(cd "$work" && "$work/venv/bin/python" -c "import os, sparsetensor; print(os.path.dirname(sparsetensor.__file__))")
cp kernels/*.cu kernels/*.cuh "$site/kernels/"
(cd "$work" && SPARSETENSOR_CUDA_CACHE="$out/cudacache" "$work/venv/bin/python" -c \
    "import sparsetensor.cuda as c; p = c.precompile(90); print(len(p), 'kernel files compiled for sm_90')")
du -sh "$out"/*
rm -rf "$work"
