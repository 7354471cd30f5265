"""Sphinx configuration of the sparsetensor documentation.

Build:  sphinx-build -W -b html docs docs/_build/html
Test:   sphinx-build -W -b doctest docs docs/_build/doctest

Three things are generated at build time, never committed, so that they cannot go stale:

- the API reference pages (``api/generated/``), from ``sparsetensor.__all__`` and the
  ``__all__`` of each public submodule (``_scripts/api_pages.py``);
- the pictures of the layouts' members, drawn from real tensors (``_scripts/layout_figures.py``);
- the performance plots and the run's description, from the committed benchmark JSON in
  ``_data/bench/`` (``_scripts/bench_plots.py``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_scripts"))

import sparsetensor  # noqa: E402  (the installed package: `pip install -e .` or a wheel)

import api_pages  # noqa: E402
import bench_plots  # noqa: E402
import layout_figures  # noqa: E402

project = "sparsetensor"
author = "the sparsetensor developers"
copyright = "the sparsetensor developers"  # noqa: A001
release = version = sparsetensor.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "numpydoc",
]

exclude_patterns = ["_build", "_data", "_scripts", "_generated", "**.ipynb_checkpoints"]
templates_path = ["_templates"]
html_theme = "pydata_sphinx_theme"
html_title = f"sparsetensor {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_depth": 3,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
default_role = "code"
pygments_style = "sphinx"

# -- the optional engines --------------------------------------------------------------------
# An optional dependency that is absent is mocked for autodoc, so that its module's API page
# still builds (from the docstrings); its examples are then shown, not run (see skip_examples).
# Where it is installed, nothing is mocked and every example runs.
OPTIONAL = {"torch": "torch", "mpi4py": "mpi", "dask": "dask", "distributed": "dask", "cuda": "cuda"}


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _importable(name: str) -> bool:
    """Whether ``name`` imports (mpi4py installed without an MPI library does not)."""
    try:
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 - any failure means: not usable here
        return False


IMPORTS = {"torch": "torch", "mpi4py": "mpi4py.MPI", "dask": "dask.array", "distributed": "distributed"}
HAVE = {mod: _importable(IMPORTS[mod]) if mod in IMPORTS else _installed(mod) for mod in OPTIONAL}
HAVE["cuda.core"] = HAVE["cuda"] and _installed("cuda.core")
autodoc_mock_imports = [mod for mod, ok in HAVE.items() if not ok and "." not in mod]
# petsc4py: imported only inside sparsetensor.mpi's PETSc functions, so nothing needs mocking; the
# examples that import it run where it is installed (HAVE_PETSC; and see skip_examples below).
HAVE["petsc4py"] = _installed("petsc4py")

autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
    "numpy": ("https://numpy.org/doc/stable", None),
    "scipy": ("https://docs.scipy.org/doc/scipy", None),
}
# The docs build offline (CI has no network): intersphinx inventories are not fetched.
if os.environ.get("SPARSETENSOR_DOCS_ONLINE") != "1":
    intersphinx_mapping = {}

# -- doctest ----------------------------------------------------------------------------------
# Every example of the guide is a `.. testcode::`/`.. doctest::` block or a `>>>` block, and
# `sphinx-build -b doctest` runs them (so do the docstring examples the API pages pull in).
# Examples that need an optional engine carry `:skipif: not HAVE_TORCH` (etc.) and run where
# it is installed.
doctest_global_setup = f"""
import os, tempfile
import numpy as np
import sparsetensor as st
np.set_printoptions(legacy=False)
HAVE_TORCH = {HAVE["torch"]}
HAVE_MPI = {HAVE["mpi4py"]}
HAVE_DASK = {HAVE["dask"] and HAVE["distributed"]}
HAVE_PETSC = {HAVE["petsc4py"] and HAVE["mpi4py"]}
HAVE_CUDA_PYTHON = {HAVE["cuda.core"]}
def _gpu():
    try:
        return st.cuda.is_available()
    except Exception:
        return False
HAVE_GPU = _gpu()
"""
doctest_default_flags = (
    __import__("doctest").ELLIPSIS
    | __import__("doctest").NORMALIZE_WHITESPACE
    | __import__("doctest").DONT_ACCEPT_TRUE_FOR_1
)

# Examples that need an optional package which is absent are rendered but not run: the `>>>`
# blocks of the API pages of a module that needs it (imported with the package mocked), and
# every `>>>` block of a page where one imports or names it (the examples of st.to_torch).
# Where the package is installed, they all run.
SKIP_EXAMPLE_PREFIXES = tuple(
    f"api/generated/sparsetensor.{sub}"
    for mod, sub in OPTIONAL.items()
    if not HAVE[mod]
) + (() if HAVE["cuda.core"] else ("api/generated/sparsetensor.cuda",))
MISSING = sorted({mod for mod, ok in HAVE.items() if not ok and mod != "cuda.core"}
                 | ({"cupy"} if not _installed("cupy") else set()))
# a block needs a package when it imports it or (but for cuda, a word of many CPU examples)
# names it: `>>> x = st.to_torch(t)` followed by `torch.sparse_bsr` in the expected output
NEEDS_MISSING = re.compile(
    r"(?:^\s*(?:>>>|\.\.\.)?\s*(?:import|from)\s+(?:%s)\b)|\b(?:%s)\b" % (
        "|".join(re.escape(m) for m in MISSING) or "$^",
        "|".join(re.escape(m) for m in MISSING if m != "cuda") or "$^"),
    re.M,
)


def skip_examples(app, doctree):
    """Turn the `>>>` blocks that need an absent optional package into plain literal blocks."""
    from docutils import nodes

    blocks = list(doctree.findall(nodes.doctest_block))
    if not blocks:
        return
    if not app.env.docname.startswith(SKIP_EXAMPLE_PREFIXES):
        if not MISSING or not any(NEEDS_MISSING.search(b.astext()) for b in blocks):
            return
    for block in blocks:
        text = block.astext()
        block.replace_self(nodes.literal_block(text, text, language="pycon"))


def skip_member(app, what, name, obj, skip, options):
    """On a class's page, leave out the methods that are ``st.*`` functions (the op table
    binds one object as both): each has its own page in the reference."""
    if what == "class" and callable(obj) and getattr(sparsetensor, name, None) is obj:
        return True
    return None


# The API pages are written now, before Sphinx looks for documents and autosummary for stubs.
api_pages.write(HERE / "api" / "generated", autodoc_mock_imports)


def readme_tour(out: Path) -> None:
    """The Python block of the README's "A short tour" section, as a testcode block."""
    import re

    text = (HERE.parent / "README.md").read_text()
    section = text.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out.mkdir(parents=True, exist_ok=True)
    body = "".join(f"   {line}".rstrip() + "\n" for line in code.splitlines())
    # its prints are checked for running, not for their text (the README says it in comments)
    (out / "readme_tour.rst").write_text(".. testcode::\n\n" + body + "\n.. testoutput::\n\n   ...\n")


def generate(app):
    readme_tour(HERE / "_generated")
    layout_figures.write(HERE / "_generated")
    bench_plots.write(HERE / "_data" / "bench", HERE / "_generated")


def setup(app):
    app.connect("builder-inited", generate)
    app.connect("doctree-read", skip_examples)
    app.connect("autodoc-skip-member", skip_member)
