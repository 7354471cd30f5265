#!/usr/bin/env bash
# Build the documentation as CI does, in the current venv (which must already have
# sparsetensor installed: `pip install --no-build-isolation -e .` or a wheel):
#   1. the `docs` extra's requirements (only them: installing ".[docs]" would rebuild the package)
#   2. sphinx-build -b html with warnings as errors -> docs/_build/html
#   3. sphinx-build -b doctest with warnings as errors: every example of the guide and of the
#      docstrings that the API pages include runs -> docs/_build/doctest
# Both builds share one doctree cache (docs/_build/doctrees), so the second reads nothing again.
# Exits non-zero when either build fails. Needs Python 3.11+ (tomllib; -P keeps the source tree off
# sys.path so that the installed package is documented, not the unbuilt sources).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
step() { echo "== [docs $((SECONDS - start)) s] $*"; }

step "the docs extra's requirements"
mapfile -t reqs < <(python - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["docs"]))
PY
)
python -m pip install -q "${reqs[@]}"
# -P: not the source tree on sys.path, the installed package (a wheel in CI, or the editable install)
python -P -c "import sparsetensor as st; print('sparsetensor', st.__version__, 'from', st.__file__)"

rm -rf docs/_build
step "sphinx-build -W -b html"
python -P -m sphinx -W --keep-going -b html -d docs/_build/doctrees docs docs/_build/html
step "sphinx-build -W -b doctest"
python -P -m sphinx -W --keep-going -b doctest -d docs/_build/doctrees docs docs/_build/doctest
step "done: docs/_build/html/index.html; every example ran"
