"""The memory pool of large arrays: kernel outputs from 4 MiB up reuse blocks that earlier
outputs gave back (NEP 49 handler, MADV_FREE while kept), up to a limit of bytes."""
import numpy as np

MIN_BYTES: int

def empty(shape: int | tuple[int, ...], dtype: np.dtype | type) -> np.ndarray: ...
def set_limit(limit: int) -> int: ...  # the old limit
def stats() -> dict[str, int]: ...  # limit, cached_bytes, cached_blocks, hits, misses
def _memory_bytes() -> int: ...  # the memory this process may use (the cgroup limit where lower)
