"""Cython kernels, compiled for several instruction-set levels; the level in use is chosen here.

The build (``sparsetensor/_lib/meson.build``) compiles each module of
``_build_config.DISPATCHED`` once per level: the baseline's copy lies in this package, a
higher level's in its own directory (on x86-64: ``_x86_64_v3/`` for AVX2 + FMA,
``_x86_64_v4/`` for AVX-512). At import the best level the CPU supports, or the one the
environment variable ``SPARSETENSOR_CPU_LEVEL`` names, goes first on this package's
``__path__``: ``from sparsetensor._lib import _spmm`` then loads that level's ``_spmm``, and
no other code knows about levels. Modules compiled once (``BASELINE_ONLY``) are found in
this package after it. A CPU below the baseline, an unknown level or one the CPU lacks
raise ``ImportError`` here, before any kernel is loaded.

Without ``_build_config`` (kernels built in place and copied into a source checkout) there
is one level, ``"in-place"``, and nothing to choose.
"""

from __future__ import annotations

import os

try:
    from . import _build_config
except ImportError:  # an in-place build
    _build_config = None

ENV_VAR = "SPARSETENSOR_CPU_LEVEL"

# What the CPU must have for each x86-64 psABI level, for messages.
_X86_NEEDS = {
    "x86-64-v2": "SSE4.2 and POPCNT",
    "x86-64-v3": "AVX2, FMA and BMI2",
    "x86-64-v4": "AVX-512 F, BW, CD, DQ and VL",
}


def choose_level(levels, cpu_levels, forced=None):
    """The level to use: ``(name, directory, reason)``.

    ``levels``: ``(name, directory, x86-64 level needed or "", flags)`` tuples, baseline
    first; ``cpu_levels``: the x86-64 levels the CPU supports, e.g. ``(2, 3)``; ``forced``:
    the value of ``SPARSETENSOR_CPU_LEVEL`` (None or "" to choose the best). Raises
    ``ImportError`` saying what is wrong and what to do.

    Examples
    --------
    >>> levels = [("baseline", "", "x86-64-v2", ""), ("avx2", "_x86_64_v3", "x86-64-v3", "")]
    >>> choose_level(levels, (2, 3))[:2]
    ('avx2', '_x86_64_v3')
    >>> choose_level(levels, (2, 3), forced="baseline")[:2]
    ('baseline', '')
    """
    names = [lv[0] for lv in levels]

    def runs(level):
        need = level[2]
        return not need or int(need.rpartition("-v")[2]) in cpu_levels

    if forced:
        if forced not in names:
            raise ImportError(
                f"{ENV_VAR}={forced!r} is not a CPU level of this sparsetensor build; "
                f"its levels are {', '.join(map(repr, names))} (unset it to use the best one)")
        level = levels[names.index(forced)]
        if not runs(level):
            raise ImportError(
                f"{ENV_VAR}={forced!r} needs a CPU with {level[2]} ({_X86_NEEDS[level[2]]}), "
                f"which this CPU lacks; levels it runs: "
                f"{', '.join(repr(lv[0]) for lv in levels if runs(lv)) or 'none'}")
        return level[0], level[1], f"forced by {ENV_VAR}"
    usable = [lv for lv in levels if runs(lv)]
    if not usable:
        need = levels[0][2]
        raise ImportError(
            f"sparsetensor's kernels need a CPU with {need} ({_X86_NEEDS[need]}), which this "
            "CPU lacks; build from source for this machine: "
            "pip install . -Csetup-args=-Dnative=true")
    return usable[-1][0], usable[-1][1], "the best level this CPU supports"


if _build_config is None:
    LEVELS, _cpu_levels = (("in-place", "", "", ""),), ()
else:
    from . import _cpu

    # A level whose directory is missing (an editable install keeps it elsewhere) is not
    # offered.
    _here = os.path.dirname(__file__)
    LEVELS = tuple(lv for lv in _build_config.LEVELS if os.path.isdir(os.path.join(_here, lv[1])))
    _cpu_levels = _cpu.x86_64_levels()
_forced = os.environ.get(ENV_VAR, "").strip()
LEVEL, _dir, REASON = choose_level(LEVELS, _cpu_levels, _forced)
if _build_config is None and not _forced:
    REASON = "kernels built in place and copied into the source tree: no dispatch"
if _dir:
    __path__.insert(0, os.path.join(_here, _dir))  # noqa: F821 - set by the import system
    if os.path.dirname(_cpu.__file__) != _here:
        # An editable install: its import hook maps each module name to one build file, so the
        # folder put first on __path__ is never searched and the baseline modules would run
        # under another level's name. Bind the level's modules to the plain names instead.
        import importlib
        import sys

        for _name in _build_config.DISPATCHED:
            globals()[_name] = sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"{__name__}.{_dir}.{_name}")
