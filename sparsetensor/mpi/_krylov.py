"""Distributed Krylov solvers with :mod:`scipy.sparse.linalg`'s signatures and iterates.

``cg``, ``gmres``, ``bicgstab`` and ``minres`` (the last two in :mod:`._krylov_residual`) follow SciPy's implementations step for step
(the same updates in the same order, the same stopping tests, the same ``info``), with
every inner product and norm reduced over the ranks. Each rank holds its slice of every
vector; the small scalar recurrences (Givens rotations, Lanczos coefficients) run
identically on every rank from reduced values, so every rank takes every branch together
and none waits in a collective that another has left.

Fusing reductions: a reduction is fused with another only where both operands exist
before either result is needed, possibly by computing a preconditioner application or a
product one step early (*speculatively*: its result is discarded when the test that
follows stops the iteration). The arithmetic of every scalar is SciPy's, up to the order
of the partial sums; a speculative step costs one more product at the end of a solve.
Each docstring gives the number of allreduces per iteration.

MPI implementations give every rank the same reduced bits (the standard recommends it,
and MPICH and Open MPI do), which is what keeps the ranks' branches together.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from .._core._config import _thread_count, num_threads
from .._lib import _vector
from ._comm import agree, same_on_every_rank
from ._operator import aslinearoperator
from ._precond import Jacobi

__all__ = ["bicgstab", "cg", "dot", "norm"]


# -- reductions -----------------------------------------------------------------------------
# OpenBLAS (behind np.dot) sums a dot product on one thread up to about 10^4 items and on its
# own thread pool above; that pool spins beside OpenMP's threads, so long vectors take our
# ``_vector.dot`` instead. Shorter ones keep NumPy's, which sums them as SciPy's solvers do.
_DOT_MIN = 1 << 13


def _local_dot(a: np.ndarray, b: np.ndarray, threads=None):
    """This rank's part of ``a^H b``, as a NumPy scalar of the result type."""
    if a.size >= _DOT_MIN:
        f = _vector_kernel("dot", a, b)
        if f is not None:
            return a.dtype.type(f(a.reshape(-1), b.reshape(-1), num_threads(threads, a.size, _AXPY_GRAIN)))
    return np.vdot(a, b) if np.iscomplexobj(a) or np.iscomplexobj(b) else np.dot(a, b)


def _sqnorm(a: np.ndarray, threads=None):
    """This rank's part of ``||a||^2``, in ``a``'s real precision, summed as ``np.linalg.norm`` sums it.

    For complex ``a`` that is ``re.re + im.im`` (two real dots), not ``vdot(a, a).real``: the two
    round differently, and restarted GMRES on a slowly converging system amplifies the difference
    into other iteration counts than SciPy's, even on one rank. (Long vectors take ``_vector.dot``
    of the interleaved real and imaginary parts, see ``_DOT_MIN``.)
    """
    if np.iscomplexobj(a):
        if a.size >= _DOT_MIN and a.flags.c_contiguous:
            re = a.reshape(-1).view(a.real.dtype)
            return _local_dot(re, re, threads)
        re, im = a.real, a.imag
        return re.dot(re) + im.dot(im)
    return _local_dot(a, a, threads)


_KERNEL_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
                 np.dtype(np.complex64): "float complex", np.dtype(np.complex128): "double complex"}


def _vector_kernel(name: str, *arrays):
    """The ``_vector`` kernel ``name`` for arrays of one kernel dtype, all C-contiguous; else None."""
    dt = arrays[-1].dtype
    key = _KERNEL_TYPES.get(dt)
    if key is None or any(a.dtype != dt or not a.flags.c_contiguous for a in arrays):
        return None
    return getattr(_vector, name)[key]


# One pass over two vectors is too little work to wake a second thread for below this size
# (measured in a CG iteration; see the performance page).
_AXPY_GRAIN = 1 << 20


def _axpy(a, x: np.ndarray, y: np.ndarray, threads=None) -> None:
    """``y += a * x`` in place, in one pass without a temporary (the ``_vector`` kernel; NumPy for
    other dtypes and layouts, or a complex ``a`` with real vectors)."""
    f = _vector_kernel("axpy", x, y)
    if f is not None and (y.dtype.kind == "c" or not np.iscomplexobj(a)):
        f(a, x.reshape(-1), y.reshape(-1), num_threads(threads, y.size, _AXPY_GRAIN))
    else:
        y += a * x


def _xpay(a, x: np.ndarray, y: np.ndarray, threads=None) -> None:
    """``y = x + a * y`` in place: one pass on long slices (``_vector.xpay``), NumPy's two below
    ``_DOT_MIN`` (SciPy's arithmetic)."""
    f = _vector_kernel("xpay", x, y) if y.size >= _DOT_MIN else None
    if f is not None and (y.dtype.kind == "c" or not np.iscomplexobj(a)):
        f(a, x.reshape(-1), y.reshape(-1), num_threads(threads, y.size, _AXPY_GRAIN))
    else:
        y *= a
        y += x


def _fused_jacobi(M, r: np.ndarray, threads=None):
    """CG's Jacobi step with its two inner products in one pass: a function ``(r, z) -> (r^H r,
    r^H z)`` that writes ``z = M r``, for a :class:`Jacobi` ``M`` of ``r``'s dtype on a slice of
    ``_DOT_MIN`` items or more; None otherwise (the separate passes)."""
    if not isinstance(M, Jacobi) or r.size < _DOT_MIN:
        return None
    inv = M.inverse_diagonal
    f = _vector_kernel("scale_dots", inv, r)
    if f is None or inv.shape != r.shape:
        return None
    nt = num_threads(threads, r.size, _AXPY_GRAIN)
    real, field = r.real.dtype.type, r.dtype.type

    def step(r, z):
        rr, rz = f(inv, r, z, nt)
        return real(rr.real), field(rz)

    return step


def _sub_combination(c: np.ndarray, V: np.ndarray, w: np.ndarray, threads=None):
    """``w -= c @ V`` in place (``V``: the basis rows), in one pass over ``V`` without a temporary.
    Returns this rank's part of the new ``||w||^2`` where that pass computed it (long slices,
    see ``_DOT_MIN``), else None."""
    f = _vector_kernel("sub_combination", c, V, w)
    if f is not None and w.ndim == 1:
        ww = f(c, V, w, num_threads(threads, V.size))
        return w.real.dtype.type(ww.real) if w.size >= _DOT_MIN else None
    w -= c @ V
    return None


def _basis_dots(V: np.ndarray, w: np.ndarray, threads=None) -> tuple:
    """``(||w||^2, V^H w)``: this rank's part of ``w``'s squared norm and of each basis row's inner
    product with ``w``, in one pass over ``V`` and ``w`` on long slices; ``V`` uncopied."""
    f = _vector_kernel("dots", V, w) if w.size >= _DOT_MIN else None
    if f is None:
        return _sqnorm(w), (V @ w.conj()).conj() if V.dtype.kind == "c" else V @ w
    out = np.empty(V.shape[0] + 1, dtype=w.dtype)
    f(V, w, out, num_threads(threads, V.size, _AXPY_GRAIN))
    return w.real.dtype.type(out[-1].real), out[:-1]


_SUM_TYPES = {(False, False): np.float32, (False, True): np.float64, (True, False): np.complex64,
              (True, True): np.complex128}


def _allreduce(comm, values):
    """Global sums of a few local numbers in one allreduce, each returned as the NumPy scalar type
    that holds every rank's (complex where one rank's is, double where one rank's is)."""
    values = [v if isinstance(v, np.generic) else np.float64(v) for v in values]
    k = len(values)
    # one buffer type on every rank (a complex number on one rank and real ones elsewhere gave the
    # ranks buffers of different sizes: MPI aborted); the second and third parts count the ranks whose
    # number is complex and double, so every rank returns the same type (a float32 sum on one rank and
    # float64 sums elsewhere would send the ranks down different branches of a test on it)
    buf = np.zeros(3 * k, dtype=np.complex128)
    buf[:k] = values
    buf[k:2 * k] = [np.iscomplexobj(v) for v in values]
    buf[2 * k:] = [np.result_type(v, np.float32).itemsize > (8 if np.iscomplexobj(v) else 4) for v in values]
    if comm.size > 1:
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    out = []
    for s, c, d in zip(buf[:k], buf[k:2 * k], buf[2 * k:]):
        kind = _SUM_TYPES[c.real > 0, d.real > 0]
        out.append(kind(s) if c.real > 0 else kind(s.real))
    return out


def _numbers(where: str, *xs) -> list:
    """``xs`` as NumPy arrays of numbers (TypeError naming ``where`` for anything else)."""
    out = [np.asarray(x) for x in xs]
    for x, given in zip(out, xs):
        if x.dtype.kind not in "biufc":
            raise TypeError(f"{where}: expected this rank's slice as an array of numbers, got {type(given).__name__}"
                            f" (dtype {x.dtype})")
    return out


def dot(comm, a: np.ndarray, b: np.ndarray):
    """The global dot product of distributed vectors (``vdot``, conjugating ``a``, for complex), collective."""
    # slices that do not match raise on every rank
    return _allreduce(comm, [agree(comm, lambda: _local_dot(*_numbers("dot", a, b)))])[0]


def norm(comm, a: np.ndarray) -> float:
    """The global 2-norm of a distributed vector, collective."""
    return float(np.sqrt(_allreduce(comm, [agree(comm, lambda: float(_sqnorm(*_numbers("norm", a))))])[0]))


class _Run:
    """One solve's reductions and figures: ``red(a, b, ...)`` sums a few numbers over the ranks."""

    def __init__(self, comm, stats):
        self.comm, self.stats = comm, stats
        self.count = self.iterations = 0
        self.seconds_reductions = 0.0
        self.start = time.perf_counter()

    def red(self, *values):
        t0 = time.perf_counter()
        out = _allreduce(self.comm, values)
        self.seconds_reductions += time.perf_counter() - t0
        self.count += 1
        return out

    def done(self, x, info):
        if self.stats is not None:
            self.stats.update(iterations=self.iterations, seconds=time.perf_counter() - self.start,
                              seconds_reductions=self.seconds_reductions, reductions=self.count)
        return x, info


# -- the system -----------------------------------------------------------------------------
_COERCE = {"f": 0, "d": 1, "F": 2, "D": 3}


def _coerce(a: str, b: str) -> str:
    """SciPy's ``make_system`` type rule: non-float types count as 'd'; complex wins, double wins."""
    a = a if a in "fdFD" else "d"
    b = b if b in "fdFD" else "d"
    cplx = a in "FD" or b in "FD"
    double = a in "dD" or b in "dD"
    return ("D" if double else "F") if cplx else ("d" if double else "f")


def _psolve_of(M):
    if M is None:
        return lambda r: r  # SciPy's identity: the same array back
    f = getattr(M, "matvec", None)
    if f is None:
        if not callable(M):
            raise TypeError(f"M must be a preconditioner (an object with matvec, or a callable on this rank's "
                            f"slice), got {type(M).__name__}")
        f = M
    return f


def _typed(name: str, f, xtype: str):
    """Preconditioner ``f`` with its output in the system's dtype ``xtype`` (float32 to float64, as
    SciPy's arithmetic would take it): one rank's float32 output would meet the others' float64
    buffers in the next product's exchange (an MPI error, or a wait). An output that does not cast
    to it (complex for a real system) raises TypeError."""
    want = np.dtype(xtype)

    def psolve(r):
        y = f(r)
        if getattr(y, "dtype", None) != want:
            y = np.asarray(y)
            if not np.can_cast(y.dtype, want, "same_kind"):
                raise TypeError(f"{name}: the preconditioner returned {y.dtype} values for a system of {want}")
            y = y.astype(want)
        return y

    return psolve


def _system(name, A, b, x0, M, threads, **settings):
    """SciPy's ``make_system`` on this rank's slices, agreed over the ranks (collective).

    ``settings`` (tolerances, iteration counts, ...) must be the same on every rank, as must
    whether there is a preconditioner and whether ``x0`` is ``"Mb"``: ranks that differ would
    leave the loop at different iterations or take different paths, and wait for each other.
    Returns ``(op, psolve, x, b, n)``; an error on any rank raises on every rank.
    """
    op = aslinearoperator(A, threads=threads)
    comm = op.comm
    same_on_every_rank(comm, name, M=None if M is None else type(M).__name__, x0=x0 if isinstance(x0, str) else None,
                       **settings)

    def local():
        if threads is not None:  # here, not in the first product: there this rank alone would raise
            _thread_count(threads)
        if op.shape[0] != op.shape[1] or not np.array_equal(op.row_starts, op.col_starts):
            raise ValueError(f"{name}: A must be square with its columns split like its rows, got shape {op.shape}")
        r0, r1 = op.row_range
        n_local = r1 - r0
        bb = np.asanyarray(b)
        if bb.shape not in ((n_local,), (n_local, 1)):
            raise ValueError(f"{name}: b must be this rank's {n_local} entries (shape ({n_local},) or "
                             f"({n_local}, 1)), got shape {bb.shape}")
        if bb.dtype.char not in "fdFD":
            bb = bb.astype("d")
        xtype = _coerce(op.dtype.char, bb.dtype.char)
        bb = np.asarray(bb, dtype=xtype).ravel()
        psolve = _psolve_of(M) if M is None else _typed(name, _psolve_of(M), xtype)
        if M is not None and getattr(M, "shape", op.shape) != op.shape:
            raise ValueError(f"{name}: A and the preconditioner have different shapes: {op.shape} and {M.shape}")
        starts = getattr(M, "row_starts", None)
        if starts is not None and not np.array_equal(starts, op.row_starts):
            raise ValueError(f"{name}: the preconditioner was made from a matrix whose rows are split as "
                             f"{np.asarray(starts).tolist()}, A's are split as {np.asarray(op.row_starts).tolist()}")
        if isinstance(x0, str):
            if x0 != "Mb":
                raise ValueError(f"{name}: x0 must be an array, None or 'Mb', got {x0!r}")
            return bb, None, xtype, psolve
        if x0 is None:
            return bb, np.zeros(n_local, dtype=xtype), xtype, psolve
        x = np.array(x0, dtype=xtype)
        if x.shape not in ((n_local,), (n_local, 1)):
            raise ValueError(f"{name}: x0 must be this rank's {n_local} entries, got shape {x.shape}")
        return bb, x.ravel(), xtype, psolve

    bb, x, xtype, psolve = agree(comm, local)
    kinds = comm.allgather(xtype) if comm.size > 1 else [xtype]
    if len(set(kinds)) != 1:
        raise TypeError(f"{name}: b (or x0) has different dtypes on different ranks, giving systems of types "
                        f"{kinds} (by rank)")
    if x is None:  # x0='Mb': the preconditioner applied to b (collective when M is)
        x = psolve(bb.copy())
    return op, psolve, x, bb, op.shape[0]


def _atol(name, b_norm, atol, rtol):
    if atol == "legacy" or atol is None or atol < 0:
        raise ValueError(f"'sparsetensor.mpi.{name}' called with invalid `atol`={atol}; if set, `atol` must be a "
                         "real, non-negative number.")
    return max(float(atol), float(rtol) * float(b_norm))


def _start(x):
    """This rank's ``x.any()`` as a number to reduce with others: SciPy skips ``A @ x0`` when ``x0`` is zero."""
    return np.float64(1.0 if x.any() else 0.0)


# -- CG -------------------------------------------------------------------------------------
def _open(name, A, b, x0, M, threads, stats, rtol, atol, maxiter):
    """The start cg and bicgstab share, in SciPy's order: the system, one allreduce of ``||b||^2``
    and of whether any rank's ``x0`` is nonzero, the absolute tolerance, the default ``maxiter``.
    Returns ``(matvec, psolve, x, b, run, any_x, ||b||, atol, maxiter, dot)``."""
    op, psolve, x, b, n = _system(name, A, b, x0, M, threads, rtol=rtol, atol=atol, maxiter=maxiter)
    run = _Run(op.comm, stats)
    bb, any_x = run.red(_sqnorm(b), _start(x))
    bnrm2 = np.sqrt(bb)
    atol = _atol(name, bnrm2, atol, rtol)
    maxiter = n * 10 if maxiter is None else maxiter
    return op._matvec, psolve, x, b, run, any_x, bnrm2, atol, maxiter, _local_dot


def cg(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None, threads=None, stats=None):
    """Solve ``A x = b`` by conjugate gradient, ``A`` Hermitian positive definite (collective).

    :func:`scipy.sparse.linalg.cg`'s iteration on this rank's slices, with global
    reductions: **2 allreduces per iteration** (``||r||^2`` with ``r^H z``, then
    ``p^H A p``), against SciPy's three inner products. The preconditioner is applied
    before the convergence test so that the first two travel together; the solve's
    last application is therefore not used.

    Parameters
    ----------
    A : DistCSR or DistLinearOperator
        Square, columns split like its rows (see :func:`aslinearoperator`).
    b : numpy.ndarray
        This rank's slice of the right-hand side (``A.row_range``), shape ``(n,)`` or ``(n, 1)``.
    x0 : numpy.ndarray or 'Mb', optional
        This rank's slice of the starting guess (default zeros); ``'Mb'``: ``M @ b``.
    rtol, atol : float
        Stop when ``||b - A x|| < max(atol, rtol * ||b||)`` (global norms).
    maxiter : int, optional
        Default ``10 * n`` (``n``: the global size).
    M : preconditioner, optional
        An object with ``matvec`` (:func:`jacobi`, :func:`block_jacobi`, a
        :class:`DistLinearOperator`) or a callable on this rank's slice, approximating
        ``A^-1``, Hermitian positive definite.
    callback : callable, optional
        ``callback(x)`` after each iteration, with this rank's slice.
    threads : int, optional
        Threads for the local products of a :class:`DistCSR`.
    stats : dict, optional
        Filled with ``iterations``, ``seconds``, ``seconds_reductions`` and
        ``reductions`` (allreduces of the solve) on this rank.

    Returns
    -------
    x : numpy.ndarray
        This rank's slice of the solution.
    info : int
        0: converged; ``> 0``: not converged, the number of iterations done.

    See Also
    --------
    scipy.sparse.linalg.cg : the one-process method; the dtype rules are its own
        (float32 stays float32, integers become float64).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> t = st.from_dense(np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 2.0]]))
    >>> A = stmpi.DistCSR.from_global(t if MPI.COMM_WORLD.rank == 0 else None)
    >>> r0, r1 = A.row_range
    >>> x, info = stmpi.cg(A, np.array([1.0, 2.0, 4.0])[r0:r1], rtol=1e-10)
    >>> g = A.gather(x)
    >>> info, (np.round(g, 6) if MPI.COMM_WORLD.rank == 0 else np.array([0.090909, 0.636364, 2.0]))
    (0, array([0.090909, 0.636364, 2.      ]))
    """
    matvec, psolve, x, b, run, any_x, bnrm2, atol, maxiter, dotprod = _open(
        "cg", A, b, x0, M, threads, stats, rtol, atol, maxiter)
    if bnrm2 == 0:
        return run.done(b, 0)
    r = b - matvec(x) if any_x else b.copy()
    rho_prev, p = None, None
    fused = _fused_jacobi(M, r, threads)
    z = np.empty_like(r) if fused is not None else None
    for iteration in range(maxiter):
        if fused is not None:
            rr, rho_cur = run.red(*fused(r, z))
        else:
            z = psolve(r)
            rr, rho_cur = run.red(_sqnorm(r), dotprod(r, z))
        if np.sqrt(rr) < atol:
            return run.done(x, 0)
        run.iterations = iteration + 1
        if iteration > 0:
            _xpay(rho_cur / rho_prev, z, p, threads)
        else:
            p = np.empty_like(r)
            p[:] = z[:]
        q = matvec(p)
        (pq,) = run.red(dotprod(p, q))
        alpha = rho_cur / pq
        _axpy(alpha, p, x, threads)
        _axpy(-alpha, q, r, threads)
        rho_prev = rho_cur
        if callback:
            callback(x)
    return run.done(x, maxiter)


# -- BiCGSTAB -------------------------------------------------------------------------------
def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0., maxiter=None, M=None, callback=None, threads=None, stats=None):
    """Solve ``A x = b`` by BiCGSTAB (collective); ``A`` square, any.

    :func:`scipy.sparse.linalg.bicgstab`'s iteration (right preconditioning, its
    breakdown tests and ``info`` codes -10 and -11) on this rank's slices: **3
    allreduces per iteration** (``||r||^2`` with ``r~^H r``; ``r~^H v``; ``||s||^2``
    with ``t^H s`` and ``t^H t``) against SciPy's six inner products. The
    preconditioner and product of ``s`` are computed before the test on ``||s||``, so
    a solve that stops there has done one of each more than SciPy.

    Parameters
    ----------
    A, b, x0, rtol, atol, maxiter, M, callback, threads, stats
        As in :func:`cg`.

    Returns
    -------
    x : numpy.ndarray
        This rank's slice of the solution.
    info : int
        0: converged; ``> 0``: the iterations done without converging; ``< 0``: breakdown.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> d = np.array([[4.0, 2.0, 0.0, 1.0], [3.0, 0.0, 0.0, 2.0], [0.0, 1.0, 1.0, 1.0], [0.0, 2.0, 1.0, 0.0]])
    >>> A = stmpi.DistCSR.from_global(st.from_dense(d) if MPI.COMM_WORLD.rank == 0 else None)
    >>> r0, r1 = A.row_range
    >>> x, info = stmpi.bicgstab(A, np.array([-1, -0.5, -1, 2])[r0:r1], atol=1e-5)
    >>> info, bool(np.allclose(A @ x, np.array([-1, -0.5, -1, 2])[r0:r1]))
    (0, True)
    """
    matvec, psolve, x, b, run, any_x, bnrm2, atol, maxiter, dotprod = _open(
        "bicgstab", A, b, x0, M, threads, stats, rtol, atol, maxiter)
    if bnrm2 == 0:
        return run.done(b, 0)
    rhotol = np.finfo(x.dtype.char).eps ** 2  # SciPy's values (from the Fortran original)
    omegatol = rhotol
    rho_prev, omega, alpha, p, v, s = None, None, None, None, None, None
    r = b - matvec(x) if any_x else b.copy()
    rtilde = r.copy()
    for iteration in range(maxiter):
        rr, rho = run.red(_sqnorm(r), dotprod(rtilde, r))
        if np.sqrt(rr) < atol:
            return run.done(x, 0)
        if np.abs(rho) < rhotol:
            return run.done(x, -10)
        run.iterations = iteration + 1
        if iteration > 0:
            if np.abs(omega) < omegatol:
                return run.done(x, -11)
            beta = (rho / rho_prev) * (alpha / omega)
            p -= omega * v
            p *= beta
            p += r
        else:
            s = np.empty_like(r)
            p = r.copy()
        phat = psolve(p)
        v = matvec(phat)
        (rv,) = run.red(dotprod(rtilde, v))
        if rv == 0:
            return run.done(x, -11)
        alpha = rho / rv
        r -= alpha * v
        s[:] = r[:]
        shat = psolve(s)  # ahead of the test on ||s||: its reduction rides with t^H s and t^H t
        t = matvec(shat)
        ss, ts, tt = run.red(_sqnorm(s), dotprod(t, s), dotprod(t, t))
        if np.sqrt(ss) < atol:
            x += alpha * phat
            return run.done(x, 0)
        omega = ts / tt
        x += alpha * phat
        x += omega * shat
        r -= omega * t
        rho_prev = rho
        if callback:
            callback(x)
    return run.done(x, maxiter)
