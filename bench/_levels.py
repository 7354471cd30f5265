"""The environment of a run at one x86-64 level, for ours and the peers (no imports of either:
it must be set before they load)."""

from __future__ import annotations

# What a CPU of one of our x86-64 levels would give the peers as well: torch's ATen kernels and
# MKL (torch's sparse BLAS) capped at that level's instructions. SciPy's sparse code is scalar;
# SuiteSparse:GraphBLAS has no such switch and keeps whatever it chose for this CPU.
PEER_LEVEL_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
                  "baseline": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}}
LEVEL_VARS = ("SPARSETENSOR_CPU_LEVEL", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


def level_env(level: str) -> dict:
    """The environment that runs ours at CPU level ``level`` (avx512, avx2, baseline) and the
    peers at the same instructions (PEER_LEVEL_ENV); set before torch or sparsetensor is imported."""
    return {"SPARSETENSOR_CPU_LEVEL": level, **PEER_LEVEL_ENV.get(level, {})}
