"""The hook through which :func:`sparsetensor.autograd.vjp` records the ops a function runs.

The op table's functions and methods (``sparsetensor._api``), ``values()`` and ``mT`` test
:data:`active` first: while no thread records (the common case) that one test is the whole
cost. A recording thread holds its tape in a thread-local slot; ops called by other threads
at the same time are not recorded. The tape itself lives in :mod:`sparsetensor.autograd`
(above the ops); this module only holds the slot, so the tensor model and the table need not
import upward.
"""

from __future__ import annotations

import threading

active = 0  # how many threads are recording now
_local = threading.local()
_lock = threading.Lock()


def current():
    """This thread's tape, or None when it does not record (or records an op's inside)."""
    return getattr(_local, "tape", None)


def swap(tape):
    """Make ``tape`` this thread's tape (None: pause); returns the previous one."""
    prev = getattr(_local, "tape", None)
    _local.tape = tape
    return prev


def start(tape) -> None:
    global active
    with _lock:
        active += 1
    _local.tape = tape


def stop() -> None:
    global active
    _local.tape = None
    with _lock:
        active -= 1


def call(name: str, impl, args: tuple, kwargs: dict):
    """``impl(*args, **kwargs)``, recorded as the op ``name`` when this thread records."""
    tape = getattr(_local, "tape", None)
    if tape is None:
        return impl(*args, **kwargs)
    return tape.call(name, impl, args, kwargs)
