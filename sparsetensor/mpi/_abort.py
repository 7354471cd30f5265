"""Abort the whole MPI job when one rank dies of an uncaught exception, instead of leaving the others waiting.

A rank that exits on an uncaught exception without ``MPI_Finalize`` leaves the
other ranks blocked in their next collective until the job's wall-clock limit:
MPI libraries do not notice it. ``python -m mpi4py script.py`` avoids this by
calling ``MPI_Abort`` on an uncaught exception; importing
:mod:`sparsetensor.mpi` installs the same behaviour for a plain
``python script.py``: a ``sys.excepthook`` that, when ``MPI.COMM_WORLD`` has
more than one rank, prints the rank and the traceback once to stderr and calls
``MPI.COMM_WORLD.Abort(1)``. On one rank it only calls the previous hook.
``sys.exit`` (and the builtins ``exit()`` and ``quit()``) with a failure status
(not 0 or None) aborts the same way, with that status; a bare ``raise SystemExit(n)``
is not seen.

``SPARSETENSOR_MPI_ABORT=0`` (or ``false``/``no``/``off``) at import time
leaves ``sys.excepthook`` alone. ``SPARSETENSOR_MPI_ABORT=threads`` also
aborts on an uncaught exception in a thread (``threading.excepthook``); that
is not the default, because a library's helper thread may die while the
program goes on correctly, and aborting then would kill a good job.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

from mpi4py import MPI

__all__ = ["ENV", "install"]

ENV = "SPARSETENSOR_MPI_ABORT"
_OFF = ("0", "false", "no", "off")


def _peers() -> tuple[int, int] | None:
    """(rank, size) of ``MPI.COMM_WORLD`` when it has other ranks and MPI is running; else None."""
    try:
        if not MPI.Is_initialized() or MPI.Is_finalized() or MPI.COMM_WORLD.size < 2:
            return None
        return MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
    except Exception:  # noqa: BLE001  (the hook itself must never fail)
        return None


def _abort(where: str, etype, value, tb, previous) -> None:
    """Report the exception once (rank, traceback), then abort every rank; ``previous`` reports it when set."""
    rank, size = _peers()
    try:
        sys.stderr.write(f"sparsetensor.mpi: uncaught {etype.__name__} {where}on rank {rank} of {size}; calling "
                         f"MPI_Abort so that the other ranks do not hang (set {ENV}=0 to turn this off)\n")
        if previous is None:
            sys.stderr.write("".join(traceback.format_exception(etype, value, tb)))
        else:
            previous()
        sys.stderr.flush()
    finally:
        MPI.COMM_WORLD.Abort(1)


def _install_exit() -> None:
    """``sys.exit`` with a failure status on one rank aborts the job too: Python never calls
    ``sys.excepthook`` for ``SystemExit``, and the rank would otherwise wait in ``MPI_Finalize``
    for ranks that wait for it (as ``python -m mpi4py`` does, for ``sys.exit`` and argparse's
    exits; a bare ``raise SystemExit(n)`` is not seen)."""
    previous = sys.exit

    def exit(status=None):
        peers = _peers()
        if status is not None and status != 0 and peers is not None:
            code = status if isinstance(status, int) else 1
            try:
                if not isinstance(status, int):
                    sys.stderr.write(f"{status}\n")  # what Python prints for a message status
                sys.stderr.write(f"sparsetensor.mpi: sys.exit({status!r}) on rank {peers[0]} of {peers[1]}; calling "
                                 f"MPI_Abort so that the other ranks do not hang (set {ENV}=0 to turn this off)\n")
                sys.stderr.flush()
            finally:
                MPI.COMM_WORLD.Abort(code)
        previous(status)

    exit._sparsetensor_abort = True
    sys.exit = exit
    # the builtins exit() and quit() of scripts raise SystemExit themselves, past sys.exit
    import builtins

    for name in ("exit", "quit"):
        if hasattr(builtins, name):
            setattr(builtins, name, _Quitter(getattr(builtins, name), exit))


class _Quitter:
    """The builtin ``exit``/``quit`` (``site``'s, which print a hint as their repr) calling our ``exit``."""

    def __init__(self, builtin, exit):
        self._builtin, self._exit = builtin, exit

    def __repr__(self):
        return repr(self._builtin)

    def __call__(self, code=None):
        try:  # as site's Quitter: stdin is closed first (IDLE and friends rely on it)
            sys.stdin.close()
        except Exception:  # noqa: BLE001
            pass
        self._exit(code)


def install() -> None:
    """Install the hooks unless ``SPARSETENSOR_MPI_ABORT`` turns them off (idempotent)."""
    setting = os.environ.get(ENV, "1").strip().lower()
    if setting in _OFF or getattr(sys.excepthook, "_sparsetensor_abort", False):
        return
    previous = sys.excepthook

    def excepthook(etype, value, tb):
        if _peers() is None:
            return previous(etype, value, tb)
        # the default hook would print the same traceback: print it ourselves, once, under the rank's line
        _abort("", etype, value, tb, None if previous is sys.__excepthook__ else lambda: previous(etype, value, tb))

    excepthook._sparsetensor_abort = True
    sys.excepthook = excepthook
    _install_exit()
    if setting != "threads":
        return
    previous_thread = threading.excepthook

    def thread_excepthook(args):
        if args.exc_type is SystemExit or _peers() is None:
            return previous_thread(args)
        name = args.thread.name if args.thread is not None else "?"
        _abort(f"in thread {name!r} ", args.exc_type, args.exc_value, args.exc_traceback,
               None if previous_thread is threading.__excepthook__ else lambda: previous_thread(args))

    threading.excepthook = thread_excepthook
