#!/usr/bin/env bash
# Fresh venv -> pip install ".[test]" -> (torch, optional) -> pytest.
set -euo pipefail
repo=$(pwd)
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "== building and installing sparsetensor (non-editable)"
python -m pip install -q ".[test]"
echo "== installing torch==2.13.0 (CPU) for the conformance tests"
if ! python -m pip install -q torch==2.13.0; then
  echo "torch==2.13.0 could not be installed: the PyTorch conformance tests will skip"
fi
echo "== installing the CUDA extra (cuda-bindings + NVRTC) for the kernel compile test (no GPU needed)"
if ! python -m pip install -q "cuda-bindings>=13,<14" "nvidia-cuda-nvrtc>=13,<14"; then
  echo "the cuda extra could not be installed: the NVRTC compile test will skip"
fi
echo "== installing the dask extra (dask[array], distributed) for the Dask chunk tests"
python -m pip install -q "dask[array]>=2024.1" "distributed>=2024.1"
# -P: do not put the current directory (the source tree) on sys.path
python -P -c "import sparsetensor; print('sparsetensor', sparsetensor.__version__, 'from', sparsetensor.__file__)"
echo "== sparsetensor (the README's main job, on a smaller matrix)"
sparsetensor --size 2000 >/dev/null
echo "== pytest (the README's test command)"
# Run from the repo root, as a user would: plain `pytest` does not put the
# source tree on sys.path, so the installed package is what gets tested.
cd "$repo"
pytest -q -p no:cacheprovider
