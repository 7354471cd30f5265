"""Per-context settings: the default of ``check_invariants`` and thread counts; the process-wide
limit of the memory pool of large kernel outputs."""

from __future__ import annotations

import contextlib
import functools
import contextvars
import operator
import os

__all__ = ["check_invariants", "get_check_invariants", "resolve_check", "num_threads", "set_num_threads",
           "set_pool_limit", "pool_stats", "GRAIN", "GRAIN_PRODUCT"]

# The one small-input gate: work (elements touched) below GRAIN runs on one thread, where
# waking threads would cost more than the work. Kernels use the thread count they are
# handed; one that splits its own work further gives each thread at least
# ENTRIES_PER_THREAD (sparsetensor/_lib/_parallel.pxd). Products count multiply-adds, each worth
# about two elements. With threads that spin briefly before sleeping (GOMP_SPINCOUNT, set on
# import) a parallel region costs a few microseconds on an idle machine, so SpMV and conversions
# break even near GRAIN (the docs' performance page has the measurements). On a busy machine
# waking a second thread can cost a scheduler tick.
GRAIN = 1 << 16
GRAIN_PRODUCT = GRAIN >> 1

_CHECK = contextvars.ContextVar("sparsetensor_check_invariants", default=True)
_THREADS = contextvars.ContextVar("sparsetensor_num_threads", default=None)


@contextlib.contextmanager
def check_invariants(enabled: bool = True):
    """Set the default of ``check_invariants=`` for constructors in this context.

    The setting is context-local (a :mod:`contextvars` variable): other threads
    and asyncio tasks keep their own.

    Examples
    --------
    >>> import sparsetensor as st
    >>> with st.check_invariants(False):
    ...     t = st.sparse_csr_tensor([0, 1], [0], [1.0], size=(1, 1))
    >>> t.check_invariants()  # a full check is still available
    """
    token = _CHECK.set(bool(enabled))
    try:
        yield
    finally:
        _CHECK.reset(token)


def get_check_invariants() -> bool:
    """The current context's default for ``check_invariants=``."""
    return _CHECK.get()


def resolve_check(check_invariants) -> bool:
    return _CHECK.get() if check_invariants is None else bool(check_invariants)


@functools.lru_cache(maxsize=None)
def _cpus() -> int:
    """The CPUs this process may run on, asked once (a system call: it was most of the
    per-call cost of a small product)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _default_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS")
    if env:
        env = env.split(",")[0].strip()
        if env.isdigit() and int(env) > 0:
            return int(env)
    return _cpus()


def set_num_threads(n: int | None) -> None:
    """Set the number of threads the kernels use in this context (None: default).

    The default is ``OMP_NUM_THREADS`` when set, else the CPUs this process may run on.
    """
    _THREADS.set(None if n is None else _thread_count(n))


def _thread_count(n) -> int:
    """``n`` as a number of threads: an integer (``1.5`` or ``"4"`` raise TypeError), at least 1."""
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"number of threads must be an integer, got {n!r}") from None
    if n < 1:
        raise ValueError(f"number of threads must be >= 1, got {n}")
    return n


def num_threads(threads: int | None = None, work: int | None = None, grain: int = GRAIN) -> int:
    """How many threads a kernel should use.

    ``threads`` (an explicit argument) wins over the context setting, which wins
    over ``OMP_NUM_THREADS`` and the CPU count. Inputs with less than ``grain``
    units of ``work`` run on one thread: spawning threads would cost more.
    """
    n = threads if threads is not None else _THREADS.get()
    if n is None:  # the default: small inputs need not look it up
        return 1 if work is not None and work < grain else _default_threads()
    n = _thread_count(n)
    return 1 if work is not None and work < grain else n


def set_pool_limit(nbytes: int) -> int:
    """Keep at most ``nbytes`` of freed kernel outputs for reuse (process-wide); returns the old
    limit. 0 turns the pool off and gives back what it keeps.

    Kernel outputs and work arrays from 4 MiB up (an output of a 10^6-nnz transpose, SpGEMM,
    sum, conversion or product) come from a pool of blocks that earlier ones gave back, so a
    loop over large operands does not pay for fresh pages (a page fault and the kernel's zeroing
    of each page: a quarter of a 10^7-nnz transpose). Kept blocks are marked ``MADV_FREE``: the
    kernel may take their pages back under memory pressure. The default limit is an eighth of
    the memory the process may use (the machine's, or its cgroup's limit where lower), or the
    environment variable ``SPARSETENSOR_POOL_BYTES``.
    """
    from .._lib import _pool
    return _pool.set_limit(nbytes)


def pool_stats() -> dict:
    """The memory pool's ``limit``, ``cached_bytes``, ``cached_blocks``, ``hits`` and ``misses``
    (requests served from a kept block, and from fresh memory)."""
    from .._lib import _pool
    return _pool.stats()
