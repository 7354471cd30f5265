"""CPU dispatch of the kernels (sparsetensor/_lib/__init__.py) and st.show_config().

The level is chosen once per process, so each forced level runs in a subprocess: the
smoke test ci/cpu_smoke.py (every layout built, converted, multiplied, compared with
NumPy) under every SPARSETENSOR_CPU_LEVEL that this build has and this CPU supports.
"""

import doctest
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor import _lib, _show_config

SMOKE = Path(__file__).resolve().parents[2] / "ci" / "cpu_smoke.py"
X86 = (("baseline", "", "x86-64-v2", ""), ("avx2", "_x86_64_v3", "x86-64-v3", ""),
       ("avx512", "_x86_64_v4", "x86-64-v4", ""))


def _python(code_or_file, level=None, *args):
    """Run Python in a fresh process on the sparsetensor this process imported."""
    env = dict(os.environ)
    env.pop(_lib.ENV_VAR, None)
    if level is not None:
        env[_lib.ENV_VAR] = level
    pkg_root = str(Path(st.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [sys.executable, str(code_or_file), *args] if isinstance(code_or_file, Path) else \
        [sys.executable, "-c", code_or_file, *args]
    # cwd outside the source tree: `python -c` would import the unbuilt sources from it
    return subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True,
                          timeout=600)


def _runnable_levels():
    return [lv[0] for lv in _lib.LEVELS
            if not lv[2] or int(lv[2].rpartition("-v")[2]) in _lib._cpu_levels]


# ---- the choice, with a pretend CPU


def test_best_level_the_cpu_supports():
    assert _lib.choose_level(X86, (2,))[:2] == ("baseline", "")
    assert _lib.choose_level(X86, (2, 3))[:2] == ("avx2", "_x86_64_v3")
    assert _lib.choose_level(X86, (2, 3, 4))[:2] == ("avx512", "_x86_64_v4")
    assert "best" in _lib.choose_level(X86, (2, 3, 4))[2]


def test_forced_lower_level():
    assert _lib.choose_level(X86, (2, 3, 4), "avx2")[:2] == ("avx2", "_x86_64_v3")
    name, subdir, why = _lib.choose_level(X86, (2, 3, 4), "baseline")
    assert (name, subdir) == ("baseline", "") and _lib.ENV_VAR in why


@pytest.mark.parametrize("value", ["avx3", "AVX2", "native", "v3", "x86-64-v3"])
def test_unknown_level_is_a_clear_error(value):
    with pytest.raises(ImportError, match=rf"SPARSETENSOR_CPU_LEVEL='{value}' is not a CPU level.*'baseline', 'avx2', 'avx512'"):
        _lib.choose_level(X86, (2, 3, 4), value)


def test_level_the_cpu_lacks_is_a_clear_error():
    with pytest.raises(ImportError, match=r"'avx512' needs a CPU with x86-64-v4 \(AVX-512.*lacks; levels it runs: 'baseline', 'avx2'"):
        _lib.choose_level(X86, (2, 3), "avx512")
    with pytest.raises(ImportError, match="'avx2' needs a CPU with x86-64-v3 \\(AVX2, FMA"):
        _lib.choose_level(X86, (2,), "avx2")


def test_cpu_below_baseline_is_a_clear_error():
    with pytest.raises(ImportError, match="need a CPU with x86-64-v2 .*-Dnative=true"):
        _lib.choose_level(X86, ())


def test_levels_without_a_cpu_check():
    # -Dnative=true, and the one level of aarch64 and other CPUs
    assert _lib.choose_level((("native", "", "", "-march=native"),), ())[0] == "native"
    assert _lib.choose_level((("baseline", "", "", ""),), (), "baseline")[0] == "baseline"
    with pytest.raises(ImportError, match="levels are 'baseline'"):
        _lib.choose_level((("baseline", "", "", ""),), (), "avx2")


# ---- this process


@pytest.mark.skipif(_lib._build_config is None, reason="kernels built in place: no _cpu module")
def test_cpu_levels_agree_with_proc_cpuinfo():
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    lines = [ln for ln in text.splitlines() if ln.startswith("flags")]
    if not lines or _lib._build_config.CPU_FAMILY != "x86_64":
        assert _lib._cpu.x86_64_levels() == ()
        return
    flags = set(lines[0].partition(":")[2].split())
    v2 = {"sse4_2", "popcnt", "ssse3", "sse4_1"} <= flags
    v3 = v2 and {"avx", "avx2", "fma", "bmi1", "bmi2"} <= flags
    v4 = v3 and {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= flags
    assert _lib._cpu.x86_64_levels() == tuple(n for n, ok in ((2, v2), (3, v3), (4, v4)) if ok)
    features = _lib._cpu.features()
    assert features["avx2"] == ("avx2" in flags) and features["avx512f"] == ("avx512f" in flags)


def test_kernels_come_from_the_level_in_use():
    assert _lib.LEVEL in [lv[0] for lv in _lib.LEVELS]
    build = _lib._build_config
    # where the compiled modules are: the package's folder, or an editable install's build folder
    lib_dir = Path(importlib.import_module("sparsetensor._lib._cpu").__file__).parent if build else Path(_lib.__file__).parent
    level_dir = lib_dir / _lib._dir
    for name in build.DISPATCHED if build else []:
        assert Path(importlib.import_module(f"sparsetensor._lib.{name}").__file__).parent == level_dir
    for name in build.BASELINE_ONLY if build else []:
        assert Path(importlib.import_module(f"sparsetensor._lib.{name}").__file__).parent == lib_dir
    if build is not None and not build.NATIVE and build.CPU_FAMILY == "x86_64":
        assert [lv[0] for lv in _lib.LEVELS] == ["baseline", "avx2", "avx512"]
    if not os.environ.get(_lib.ENV_VAR):
        assert _lib.LEVEL == _runnable_levels()[-1]


def test_show_config_dicts():
    cfg = st.show_config(mode="dicts")
    assert set(cfg) == {"sparsetensor", "build", "cpu_dispatch", "threads", "python"}
    d = cfg["cpu_dispatch"]
    assert d["level_in_use"] == _lib.LEVEL
    assert list(d["levels_compiled"]) == [lv[0] for lv in _lib.LEVELS]
    assert d["level_in_use"] in d["levels_compiled"]
    assert cfg["threads"]["num_threads"] == st.num_threads()
    assert cfg["python"]["numpy"] == np.__version__
    if _lib._build_config is not None:
        assert cfg["sparsetensor"]["version"] == st.__version__
        assert cfg["build"]["openmp"]
        assert d["cpu_x86_64_levels"] == list(_lib._cpu.x86_64_levels())


def test_show_config_prints_the_same(capsys):
    assert st.show_config() is None
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(st.show_config(mode="dicts")))


def test_docstring_examples():
    for module in (_lib, _show_config):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_show_config_bad_mode():
    with pytest.raises(ValueError, match="mode must be"):
        st.show_config(mode="yaml")


# ---- fresh processes


@pytest.mark.parametrize("level", [lv[0] for lv in X86] + ["native", "in-place"])
def test_each_forced_level_agrees_with_numpy(level):
    if level not in _runnable_levels():
        pytest.skip(f"level {level!r}: not in this build or not supported by this CPU")
    r = _python(SMOKE, level)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"CPU level {level!r} (forced by {_lib.ENV_VAR})" in r.stdout
    assert "all results agree with NumPy" in r.stdout


def test_default_level_in_a_fresh_process():
    r = _python("import sparsetensor as st; print(st.show_config(mode='dicts')['cpu_dispatch']['level_in_use'])")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [_runnable_levels()[-1]]


@pytest.mark.parametrize("value", ["bogus", "avx512"])
def test_bad_level_fails_the_import_cleanly(value):
    if value in _runnable_levels():
        pytest.skip(f"this CPU runs {value!r}")  # the pretend-CPU test above covers it
    r = _python("import sparsetensor", value)
    assert r.returncode == 1, (r.returncode, r.stderr)  # an exception, not a signal
    assert "ImportError: SPARSETENSOR_CPU_LEVEL=" in r.stderr
    assert value in r.stderr.splitlines()[-1]
