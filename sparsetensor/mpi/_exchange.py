"""The ghost exchange of a :class:`~sparsetensor.mpi.DistCSR`: who sends which entries to whom, and how.

The plan (built once from the ghost lists) is a list of ``(rank, offset, count)``
per direction: the rows ``offset:offset + count`` of the send buffer go to
``rank``, and likewise for the receive buffer. Two ways to move them, both
non-blocking so the diagonal block's product runs while they travel:

- ``"p2p"``: one ``MPI_Isend``/``MPI_Irecv`` pair per neighbour (PETSc's VecScatter);
- ``"neighbor"``: one ``MPI_Ineighbor_alltoallv`` on a distributed-graph
  communicator (``MPI_Dist_graph_create_adjacent``) whose edges are the plan's
  neighbours, so the MPI library sees the whole pattern in one call.

Both move exactly the same bytes (one row of ``itemsize x columns`` bytes per
ghost entry). Rows travel as a contiguous MPI datatype of one row's bytes, so
counts stay entry counts (no 2**31-byte limit on a message).
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from ._comm import bytes_of

__all__ = ["GhostExchange", "MODES"]

MODES = ("p2p", "neighbor")
_TAG = 0x5354  # on the matrix's own duplicate of the communicator


def check_mode(mode) -> str:
    if mode not in MODES:
        raise ValueError(f"exchange must be one of {MODES}, got {mode!r}")
    return mode


class GhostExchange:
    """Posts the exchange of a plan, forward (``A @ x``: owners send to the ranks that need
    their entries as ghosts) or reversed (``A^T x``: ghost contributions go back to their owners).

    ``comm`` is the matrix's private communicator; ``send_plan``/``recv_plan`` are the
    forward direction's ``(rank, offset, count)`` lists, sorted by rank.
    """

    def __init__(self, comm, send_plan, recv_plan, mode: str = "p2p"):
        self._comm = comm
        self.send_plan = send_plan
        self.recv_plan = recv_plan
        self._graphs: dict = {}   # reverse flag -> distributed-graph communicator
        self._types: dict = {}    # row bytes -> committed contiguous datatype
        self._persistent: dict = {}  # (dtype, row shape) -> (send, recv, persistent requests)
        self.mode = "p2p"
        self.set_mode(mode)

    #: How many (dtype, row shape) pairs keep their buffers and persistent requests.
    persistent_shapes = 4

    def persistent(self, dtype, row_shape: tuple):
        """``(send, recv, requests)`` for forward exchanges of rows of ``row_shape`` and ``dtype``,
        made on first use and kept: buffers of the plan's sizes and persistent
        ``MPI_Recv_init``/``MPI_Send_init`` requests on them, started together by
        ``MPI_Startall`` (PETSc's VecScatter keeps its requests so). None in ``"neighbor"`` mode.
        The caller fills ``send``, starts the requests and completes them before the next use."""
        if self.mode != "p2p":
            return None
        key = (np.dtype(dtype).str, tuple(row_shape))
        got = self._persistent.get(key)
        if got is None:
            if len(self._persistent) >= self.persistent_shapes:
                self._free_persistent(next(iter(self._persistent)))
            nsend = sum(c for _, _, c in self.send_plan)
            nrecv = sum(c for _, _, c in self.recv_plan)
            send = np.empty((nsend,) + key[1], dtype=dtype)
            recv = np.empty((nrecv,) + key[1], dtype=dtype)
            comm = self._comm
            reqs = [comm.Recv_init(bytes_of(recv[o:o + c]), source=q, tag=_TAG) for q, o, c in self.recv_plan]
            reqs += [comm.Send_init(bytes_of(send[o:o + c]), dest=q, tag=_TAG) for q, o, c in self.send_plan]
            got = self._persistent[key] = (send, recv, reqs)
        return got

    def _free_persistent(self, key) -> None:
        for r in self._persistent.pop(key)[2]:
            r.Free()

    def set_mode(self, mode: str) -> None:
        """Switch to ``mode``; the graph communicators are created here (collective for ``"neighbor"``)."""
        check_mode(mode)
        for key in list(self._persistent):
            self._free_persistent(key)
        if mode == "neighbor" and not self._graphs:
            for reverse in (False, True):
                out_plan, in_plan = self._plans(reverse)
                self._graphs[reverse] = self._comm.Create_dist_graph_adjacent(
                    [q for q, _, _ in in_plan], [q for q, _, _ in out_plan], reorder=False)
        self.mode = mode

    def _plans(self, reverse: bool):
        return (self.recv_plan, self.send_plan) if reverse else (self.send_plan, self.recv_plan)

    def _row_type(self, nbytes: int):
        t = self._types.get(nbytes)
        if t is None:
            t = self._types[nbytes] = MPI.BYTE.Create_contiguous(nbytes).Commit()
        return t

    def post(self, send, recv, reverse: bool = False) -> list:
        """Start moving ``send``'s rows to the other ranks and theirs into ``recv``; the requests to wait on.

        ``send`` and ``recv`` are C-contiguous, of one dtype and one trailing shape (rows of
        one vector entry each).
        """
        out_plan, in_plan = self._plans(reverse)
        if self.mode == "p2p":
            comm = self._comm
            reqs = [comm.Irecv(bytes_of(recv[o:o + c]), source=q, tag=_TAG) for q, o, c in in_plan]
            reqs += [comm.Isend(bytes_of(send[o:o + c]), dest=q, tag=_TAG) for q, o, c in out_plan]
            return reqs
        row = recv.itemsize * math.prod(recv.shape[1:])
        dt = self._row_type(max(row, 1))
        sendspec = [bytes_of(send), [c for _, _, c in out_plan], [o for _, o, _ in out_plan], dt]
        recvspec = [bytes_of(recv), [c for _, _, c in in_plan], [o for _, o, _ in in_plan], dt]
        return [self._graphs[reverse].Ineighbor_alltoallv(sendspec, recvspec)]

    def messages(self, reverse: bool = False) -> tuple:
        """(messages sent, messages received) per exchange: one per neighbour in either mode."""
        out_plan, in_plan = self._plans(reverse)
        return len(out_plan), len(in_plan)

    def free(self) -> None:
        """Release the graph communicators, datatypes and persistent requests (collective when the mode
        was ever ``"neighbor"``)."""
        for key in list(self._persistent):
            self._free_persistent(key)
        for g in self._graphs.values():
            g.Free()
        for t in self._types.values():
            t.Free()
        self._graphs, self._types = {}, {}
        self.mode = "p2p"
