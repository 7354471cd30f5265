"""Submodules reached by attribute (SPEC 1): ``st.dask``, ``st.mpi``, ``st.torch``, ``st.autograd``
import on first access, while ``import sparsetensor`` itself imports none of Dask, mpi4py,
PyTorch or cuda-python. Each case runs in a fresh interpreter, whose ``sys.modules`` is clean."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ENGINES = ("dask", "distributed", "mpi4py", "torch", "cuda.core", "cuda.bindings")


# not the repository root as the working directory: its unbuilt sources would shadow the package
HERE = os.path.dirname(__file__)


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=HERE)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_loads_no_engine():
    got = _run(f"import sys, sparsetensor; print([m for m in {ENGINES!r} if m in sys.modules])")
    assert got == "[]"


@pytest.mark.parametrize("name", ["autograd", "dask", "mpi", "torch"])
def test_submodule_by_attribute(name):
    engine = {"dask": "dask.array", "mpi": "mpi4py", "torch": None, "autograd": None}[name]
    listed = _run(f"import sparsetensor as st; print({name!r} in dir(st))")
    assert listed == "True"
    if engine is not None and importlib.util.find_spec(engine.split(".")[0]) is None:
        # without the engine the attribute raises ImportError (not AttributeError), naming it
        out = subprocess.run([sys.executable, "-c", f"import sparsetensor as st; st.{name}"],
                             capture_output=True, text=True, timeout=120, cwd=HERE)
        assert out.returncode != 0 and ("ImportError" in out.stderr or "ModuleNotFoundError" in out.stderr)
        assert engine.split(".")[0] in out.stderr
        return
    got = _run(f"import sys, sparsetensor as st; m = st.{name}; "
               f"print(m.__name__, m is sys.modules['sparsetensor.{name}'])")
    assert got == f"sparsetensor.{name} True"


def test_unknown_attribute_is_attribute_error():
    import sparsetensor as st

    with pytest.raises(AttributeError, match="no_such_thing"):
        st.no_such_thing  # noqa: B018


def test_torch_optim_by_attribute():
    """``stt.optim`` after ``import sparsetensor.torch``, as ``torch.optim`` after ``import torch``."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    got = _run("import sys, sparsetensor.torch as stt; o = stt.optim; "
               "print(o is sys.modules['sparsetensor.torch.optim'], o.SparseAdam.__name__)")
    assert got == "True SparseAdam"
    with pytest.raises(AttributeError, match="no_such_thing"):
        import sparsetensor.torch as stt

        stt.no_such_thing  # noqa: B018
