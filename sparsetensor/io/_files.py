"""Files on disk, below every format: atomic writes, the Matrix Market suffixes, and an
:class:`~sparsetensor.InvariantError` that names the file it came from."""

from __future__ import annotations

import contextlib
import os
import tempfile

from .._core._errors import InvariantError

__all__ = ["atomic_write", "is_mtx", "in_file", "new_file_mode"]


def new_file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open(path, "w")`` would give a new file."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)  # no /proc: read the umask by setting it (briefly process-wide)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: str, write) -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, and rename it over ``path``.

    On any exception (``KeyboardInterrupt`` included) the temporary file is
    removed and ``path`` is left as it was.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with open(fd, "wb") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), new_file_mode())
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable too (best effort; not on Windows)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def is_mtx(path: str) -> bool:
    low = path.lower()
    return low.endswith(".mtx") or low.endswith(".mtx.gz")


def in_file(e: InvariantError, path: str) -> InvariantError:
    """The same error with the file named in its message."""
    prefix = f"{e.layout} invariant {e.invariant}: "
    msg = str(e)
    msg = msg[len(prefix):] if msg.startswith(prefix) else msg
    return InvariantError(e.invariant, e.layout, f"{msg} (in {path})", batch=e.batch, index=e.index)
