"""Collective helpers: agreeing on errors, and moving NumPy arrays as bytes.

Every collective entry point of :mod:`sparsetensor.mpi` runs its local work
through :func:`agree`: an exception on any rank makes every rank raise (the
failing rank its own exception, the others a copy naming the rank), so no rank
goes on into a collective that the failing rank will never join.
"""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
from mpi4py import MPI

from .._core._errors import InvariantError

__all__ = ["agree", "first_failing", "same_on_every_rank", "comparable", "raise_differing", "bytes_of", "gatherv", "scatterv", "RemoteError"]


class RemoteError(RuntimeError):
    """Another rank raised an exception whose type cannot be rebuilt here."""


def _payload(err: BaseException):
    """What the failing rank broadcasts of ``err``: it must pickle, or the others wait in the
    broadcast (an exception class defined in a function does not; a ``str()`` may raise)."""
    try:
        if isinstance(err, InvariantError):
            prefix = f"{err.layout} invariant {err.invariant}: "
            msg = str(err)
            msg = msg[len(prefix):] if msg.startswith(prefix) else msg
            payload = ("invariant", err.invariant, err.layout, msg, err.batch, err.index)
        else:
            payload = ("other", type(err), str(err))
        pickle.dumps(payload)
        return payload
    except Exception:  # noqa: BLE001
        try:
            msg = str(err)
        except Exception:  # noqa: BLE001
            msg = f"<{type(err).__name__} whose str() raised>"
        return ("other", RemoteError, f"{type(err).__name__}: {msg}")


def _rebuild(payload, rank: int, size: int) -> BaseException:
    where = f" [raised on rank {rank} of {size}]"
    if payload[0] == "invariant":
        _, inv, layout, msg, batch, index = payload
        return InvariantError(inv, layout, msg + where, batch=batch, index=index)
    _, etype, msg = payload
    try:
        return etype(msg + where)
    except Exception:  # an exception type that does not take one message
        return RemoteError(f"{etype.__name__}: {msg}{where}")


def _comparable(v):
    """What ranks compare of an argument, and what an error shows of it: None; a string; numbers
    (scalars and arrays alike, NumPy's or Python's) by their shape and bytes (NaN equals NaN), shown
    when short; something unreadable by its type (no raise here: one rank raising before the
    allgather would leave the others waiting in it)."""
    if v is None or isinstance(v, str):
        return v, repr(v)
    try:
        a = np.asarray(v)
        kind = {"b": np.int64, "i": np.int64, "u": np.int64, "f": np.float64, "c": np.complex128}[a.dtype.kind]
        data = np.ascontiguousarray(a, kind)
        key = (a.shape, hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest())
        return key, (repr(a.tolist()) if a.size <= 33 else f"an array of shape {a.shape}")
    except Exception:
        return ("unreadable", type(v).__name__), f"a {type(v).__name__}"


def comparable(fields: dict) -> dict:
    """``fields`` as the ranks compare them (see :func:`raise_differing`)."""
    return {name: _comparable(v) for name, v in fields.items()}


def same_on_every_rank(comm, where: str, **given) -> None:
    """Raise ValueError on every rank unless every rank passed the same value of each keyword
    (collective, one allgather): an argument that differs by rank would send the ranks down
    different paths, and one waits forever in a collective that the others never reach."""
    raise_differing(where, comm.allgather(comparable(given)))


def agreed_root(comm, where: str, root, **given) -> int:
    """``root`` once every rank passed the same one (and the same ``given``) and it is a rank of
    ``comm`` (collective, one allgather): a rank that took another root would wait in a gather the
    others never join, or keep its own data as the root's."""
    same_on_every_rank(comm, where, root=root, **given)
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < comm.size:
        raise ValueError(f"{where}: root must be a rank in [0, {comm.size}), got {root!r}")
    return int(root)


def raise_differing(where: str, every: list) -> None:
    """The ValueError for the first field that differs among the ranks' :func:`comparable` fields
    (``every``, by rank: what an allgather gave every rank, so all raise or none)."""
    for name in every[0]:
        got = [e[name] for e in every]
        bad = next((r for r, g in enumerate(got) if g[0] != got[0][0]), None)
        if bad is not None:
            raise ValueError(f"{where}: every rank must pass the same {name}; rank 0: {got[0][1]}, rank {bad}: "
                             f"{got[bad][1]}")


def first_failing(comm, failed: bool) -> int | None:
    """The lowest rank that passed ``failed=True``, or None: one integer allreduce (collective)."""
    v = np.array([comm.size - comm.rank if failed else 0], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, v, op=MPI.MAX)
    return None if v[0] == 0 else comm.size - int(v[0])


def agree(comm, fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` on every rank; if it raised on any rank, raise on every rank.

    One integer allreduce decides (:func:`first_failing`). The lowest failing rank broadcasts its
    exception (type, message; for :class:`~sparsetensor.InvariantError` also the
    invariant, layout, batch and index); failing ranks raise their own
    exception, the others raise the broadcast copy, its message ending with
    ``[raised on rank r of n]``. An exception type that cannot be rebuilt from its message
    (PETSc's ``Error``) is a :class:`RemoteError` on every rank of several, the failing one's
    chained to its own.
    """
    err = None
    result = None
    try:
        result = fn(*args, **kwargs)
    except Exception as e:  # any error must reach every rank, or the others hang
        err = e
    src = first_failing(comm, err is not None)
    if src is None:
        return result
    payload = comm.bcast(_payload(err) if comm.rank == src else None, root=src)
    remote = _rebuild(payload, src, comm.size)
    if err is not None:
        if isinstance(remote, RemoteError) and not isinstance(err, RemoteError) and comm.size > 1:
            raise remote from err  # a type the others cannot rebuild (PETSc's Error): one type everywhere
        raise err
    raise remote


def bytes_of(a: np.ndarray) -> np.ndarray:
    """A C-contiguous array's data as a flat ``uint8`` view (dtype-agnostic MPI transfers)."""
    return a.reshape(-1).view(np.uint8)


def gatherv(comm, a: np.ndarray, root: int, tail: tuple, dtype) -> np.ndarray | None:
    """Concatenate every rank's ``a`` (shape ``(n_r,) + tail``, ``dtype``) along axis 0 on ``root``."""
    a = np.ascontiguousarray(a, dtype=dtype)
    counts = comm.gather(a.shape[0], root=root)
    if comm.rank != root:
        comm.Gatherv(bytes_of(a), None, root=root)
        return None
    out = np.empty((sum(counts),) + tuple(tail), dtype=dtype)
    row = int(np.prod(tail, dtype=np.int64)) * np.dtype(dtype).itemsize
    nbytes = np.asarray(counts, dtype=np.int64) * row
    displs = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.int64)
    comm.Gatherv(bytes_of(a), [bytes_of(out), nbytes, displs, MPI.BYTE], root=root)
    return out


def scatterv(comm, a: np.ndarray | None, counts, root: int, tail: tuple, dtype) -> np.ndarray:
    """Send rows ``[sum(counts[:r]), sum(counts[:r+1]))`` of ``a`` (on ``root``) to rank ``r``."""
    dtype = np.dtype(dtype)
    out = np.empty((int(counts[comm.rank]),) + tuple(tail), dtype=dtype)
    if comm.rank != root:
        comm.Scatterv(None, bytes_of(out), root=root)
        return out
    a = np.ascontiguousarray(a, dtype=dtype)
    row = int(np.prod(tail, dtype=np.int64)) * dtype.itemsize
    nbytes = np.asarray(counts, dtype=np.int64) * row
    displs = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.int64)
    comm.Scatterv([bytes_of(a), nbytes, displs, MPI.BYTE], bytes_of(out), root=root)
    return out
