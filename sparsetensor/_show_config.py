"""``st.show_config()``: how this copy of sparsetensor was built and what it runs (for bug reports)."""

from __future__ import annotations

import json
import os
import platform
import sys

import numpy as np

from . import _lib
from ._core._config import num_threads

__all__ = ["show_config"]


def _config() -> dict:
    build = _lib._build_config
    level_dir = os.path.join(os.path.dirname(_lib.__file__), _lib._dir)
    return {
        "sparsetensor": {
            "version": build.VERSION if build else "unknown (kernels built in place)",
            "path": os.path.dirname(os.path.dirname(_lib.__file__)),
        },
        "build": {
            "compiler": build.COMPILER if build else "unknown",
            "c_args": build.C_ARGS if build else "unknown",
            "openmp": (build.OPENMP or "no (single-threaded kernels)") if build else "unknown",
            "native": build.NATIVE if build else None,
            "cpu_family": build.CPU_FAMILY if build else platform.machine(),
            "dispatched_modules": list(build.DISPATCHED) if build else [],
            "baseline_only_modules": list(build.BASELINE_ONLY) if build else [],
        },
        "cpu_dispatch": {
            "levels_compiled": {
                name: {"directory": "sparsetensor/_lib/" + subdir, "cpu_needs": need or None, "flags": flags}
                for name, subdir, need, flags in _lib.LEVELS
            },
            "level_in_use": _lib.LEVEL,
            "why": _lib.REASON,
            "kernel_directory": level_dir,
            "env " + _lib.ENV_VAR: os.environ.get(_lib.ENV_VAR),
            "cpu_x86_64_levels": list(_lib._cpu_levels),
            "cpu_features": _lib._cpu.features() if build else {},
        },
        "threads": {
            "num_threads": num_threads(),
            "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "env OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "env OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
            "env GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
        },
        "python": {
            "version": sys.version.split()[0],
            "numpy": np.__version__,
            "platform": platform.platform(),
        },
    }


def show_config(mode: str = "stdout"):
    """Print (or return) the build and run-time configuration of sparsetensor.

    The version, the compiler and its flags, OpenMP, the CPU instruction-set levels the
    kernels were compiled for, the level in use and why (the best one the CPU supports,
    or ``SPARSETENSOR_CPU_LEVEL``), and the thread settings. Paste it into bug reports.

    Parameters
    ----------
    mode : {"stdout", "dicts"}
        ``"stdout"`` prints the configuration (as JSON) and returns None; ``"dicts"``
        returns it as a dict of dicts.

    Examples
    --------
    >>> import sparsetensor as st
    >>> cfg = st.show_config(mode="dicts")
    >>> cfg["cpu_dispatch"]["level_in_use"] in cfg["cpu_dispatch"]["levels_compiled"]
    True
    """
    if mode not in ("stdout", "dicts"):
        raise ValueError(f"mode must be 'stdout' or 'dicts', got {mode!r}")
    config = _config()
    if mode == "dicts":
        return config
    print(json.dumps(config, indent=2))
    return None
