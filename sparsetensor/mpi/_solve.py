"""Distributed Krylov solvers over :class:`DistCSR`: conjugate gradient with SciPy's semantics."""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ._comm import agree
from ._matrix import DistCSR

__all__ = ["cg", "dot", "norm"]


def _local_dot(a: np.ndarray, b: np.ndarray):
    return np.vdot(a, b) if np.iscomplexobj(a) or np.iscomplexobj(b) else np.dot(a, b)


def _sum(comm, value):
    """Allreduce one number through a buffer (no pickling): float64 or complex128."""
    buf = np.array([value], dtype=np.complex128 if np.iscomplexobj(value) else np.float64)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    return buf[0]


def dot(comm, a: np.ndarray, b: np.ndarray):
    """The global dot product of distributed vectors (``vdot``, conjugating ``a``, for complex), collective."""
    return _sum(comm, _local_dot(a, b))


def norm(comm, a: np.ndarray) -> float:
    """The global 2-norm of a distributed vector, collective."""
    return float(np.sqrt(_sum(comm, float(np.vdot(a, a).real))))


def cg(A: DistCSR, b, x0=None, *, rtol: float = 1e-8, atol: float = 0.0, maxiter: int | None = None, M=None,
       callback=None, threads: int | None = None, stats: dict | None = None):
    """Solve ``A x = b`` by conjugate gradient, ``A`` Hermitian positive definite (collective).

    The iteration of :func:`scipy.sparse.linalg.cg` step for step, with global
    reductions (three one-number allreduces per iteration: the residual norm
    and two dot products) and distributed products (:meth:`DistCSR.matvec`).
    ``b`` and ``x0`` are this rank's slices (``A.row_range``); so is the result.

    Parameters
    ----------
    A : DistCSR
        Square.
    b : array_like, 1-d
    x0 : array_like, optional
        Starting guess (default zeros).
    rtol, atol : float
        Stop when ``||r|| < max(atol, rtol * ||b||)``.
    maxiter : int, optional
        Default ``10 * n``.
    M : callable, optional
        Preconditioner applied to this rank's slice of the residual (``M(r)``
        approximates ``A^-1 r``; e.g. ``lambda r: r / d`` with
        ``d = A.diagonal()`` for Jacobi).
    callback : callable, optional
        ``callback(x)`` after each iteration, with this rank's slice.
    threads : int, optional
        Threads for the local products.
    stats : dict, optional
        Filled with ``iterations``, ``seconds`` (the iterations, this rank) and
        ``seconds_reductions`` (time in the dot-product allreduces, this rank).

    Returns
    -------
    x : numpy.ndarray
        This rank's slice of the solution.
    info : int
        0: converged; ``> 0``: not converged, the number of iterations done.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> t = st.from_dense(np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 2.0]]))
    >>> A = stmpi.DistCSR.from_global(t if MPI.COMM_WORLD.rank == 0 else None)
    >>> r0, r1 = A.row_range
    >>> x, info = stmpi.cg(A, np.array([1.0, 2.0, 4.0])[r0:r1])
    >>> g = A.gather(x)
    >>> info, (np.round(g, 6) if MPI.COMM_WORLD.rank == 0 else np.array([0.090909, 0.636364, 2.0]))
    (0, array([0.090909, 0.636364, 2.      ]))
    """
    if not isinstance(A, DistCSR):
        raise TypeError(f"cg: A must be a DistCSR, got {type(A).__name__}")
    comm = A.comm
    n_local = A.row_range[1] - A.row_range[0]

    def setup():
        if A.shape[0] != A.shape[1] or not np.array_equal(A.row_starts, A.col_starts):
            raise ValueError(f"cg: A must be square with columns partitioned like its rows, got shape {A.shape}")
        bb = np.asarray(b)
        if bb.shape != (n_local,):
            raise ValueError(f"cg: b must be this rank's {n_local} entries (1-d), got shape {bb.shape}")
        dt = np.result_type(A.dtype, bb.dtype, np.float64 if x0 is None else np.asarray(x0).dtype)
        dt = np.promote_types(dt, np.float64) if dt.kind in "biu" else dt
        x = np.zeros(n_local, dtype=dt) if x0 is None else np.array(x0, dtype=dt)
        if x.shape != (n_local,):
            raise ValueError(f"cg: x0 must be this rank's {n_local} entries (1-d), got shape {x.shape}")
        return bb.astype(dt), x

    b, x = agree(comm, setup)
    dts = comm.allgather(x.dtype)
    if len(set(dts)) != 1:
        raise TypeError(f"cg: b has different dtypes on different ranks: {[str(d) for d in dts]}")
    bnrm2 = norm(comm, b)
    atol = max(float(atol), float(rtol) * bnrm2)
    if bnrm2 == 0:
        return b, 0
    if maxiter is None:
        maxiter = A.shape[0] * 10
    psolve = (lambda r: r) if M is None else M

    def matvec(v):
        return A.matvec(v, threads=threads, check=False)

    timing = {"iterations": 0, "seconds": 0.0, "seconds_reductions": 0.0}

    def reduce(local):
        t0 = time.perf_counter()
        out = _sum(comm, local)
        timing["seconds_reductions"] += time.perf_counter() - t0
        return out

    def finish(result):
        timing["seconds"] = time.perf_counter() - start
        if stats is not None:
            stats.update(timing)
        return result

    any_x = comm.allreduce(bool(x.any()), op=MPI.LOR)
    r = b - matvec(x) if any_x else b.copy()
    rho_prev, p = None, None
    start = time.perf_counter()
    for iteration in range(maxiter):
        if np.sqrt(reduce(float(np.vdot(r, r).real))) < atol:
            return finish((x, 0))
        timing["iterations"] = iteration + 1
        z = psolve(r)
        rho_cur = reduce(_local_dot(r, z))
        if iteration > 0:
            beta = rho_cur / rho_prev
            p *= beta
            p += z
        else:
            p = np.empty_like(r)
            p[:] = z[:]
        q = matvec(p)
        alpha = rho_cur / reduce(_local_dot(p, q))
        x += alpha * p
        r -= alpha * q
        rho_prev = rho_cur
        if callback:
            callback(x)
    return finish((x, maxiter))
