"""Distributed GMRES and MINRES, the minimal-residual methods of :mod:`._krylov` (which holds
the reductions and the system set-up they share with CG and BiCGSTAB, and says how the ranks
stay together): SciPy's iterates, every inner product and norm reduced over the ranks, the
small recurrences (Givens rotations, Lanczos coefficients) run identically on every rank."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.linalg import get_lapack_funcs

from ._krylov import _DOT_MIN, _Run, _atol, _basis_dots, _local_dot, _sqnorm, _start, _sub_combination, _system

__all__ = ["gmres", "minres"]


# -- GMRES ----------------------------------------------------------------------------------
def gmres(A, b, x0=None, *, rtol=1e-5, atol=0., restart=None, maxiter=None, M=None, callback=None,
          callback_type=None, gram_schmidt="modified", threads=None, stats=None):
    """Solve ``A x = b`` by restarted GMRES (collective); ``A`` square, any.

    :func:`scipy.sparse.linalg.gmres`'s method on this rank's slices: left
    preconditioning (the preconditioned residual is minimised; convergence is tested on
    ``||b - A x||``), SciPy's inner tolerance control, Givens rotations and
    ``callback_type`` semantics. The Hessenberg matrix and the rotations are small and
    computed on every rank alike.

    Allreduces: with ``gram_schmidt="modified"`` (SciPy's arithmetic), **k + 2 per inner
    iteration k** (k = 0, 1, ...: ``||w||^2`` with ``v_0^H w``, then one per further
    basis vector, then ``||w||^2`` after the projections), and one per restart cycle
    (the residual norm together with the norm of its preconditioned image, which is
    computed before the test). ``gram_schmidt="classical"``: **2 per inner iteration**
    (every ``v_j^H w`` with ``||w||^2``, then ``||w||^2`` after the projections); the
    same method in exact arithmetic but not SciPy's rounding: it may need a different
    number of iterations on ill-conditioned systems, and loses orthogonality sooner
    (no reorthogonalisation).

    Parameters
    ----------
    A, b, x0, rtol, atol, M, threads, stats
        As in :func:`cg`.
    restart : int, optional
        Inner iterations per cycle, default ``min(20, n)``.
    maxiter : int, optional
        Restart cycles (or inner iterations with ``callback_type="legacy"``), default ``10 * n``.
    callback : callable, optional
        Called per ``callback_type``.
    callback_type : {'x', 'pr_norm', 'legacy'}, optional
        ``'x'``: ``callback(x)`` (this rank's slice) after each cycle; ``'pr_norm'``:
        ``callback(presid / ||b||)`` after each inner iteration; ``'legacy'`` (the default,
        with SciPy's ``DeprecationWarning`` when ``callback`` is given): as ``'pr_norm'``,
        and ``maxiter`` counts inner iterations.
    gram_schmidt : {'modified', 'classical'}
        How each new basis vector is orthogonalised (see above).

    Returns
    -------
    x : numpy.ndarray
        This rank's slice of the solution.
    info : int
        0: converged; ``> 0``: not converged, ``maxiter``.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> d = np.array([[3.0, 2.0, 0.0], [1.0, -1.0, 0.0], [0.0, 5.0, 1.0]])
    >>> A = stmpi.DistCSR.from_global(st.from_dense(d) if MPI.COMM_WORLD.rank == 0 else None)
    >>> r0, r1 = A.row_range
    >>> b = np.array([2.0, 4.0, -1.0])[r0:r1]
    >>> x, info = stmpi.gmres(A, b, atol=1e-5)
    >>> info, bool(np.allclose(A @ x, b))
    (0, True)
    """
    if callback is not None and callback_type is None:
        warnings.warn("sparsetensor.mpi.gmres called without specifying `callback_type` (SciPy's rule): the "
                      "default is 'legacy'; pass callback_type='pr_norm', 'x' or 'legacy'",
                      category=DeprecationWarning, stacklevel=2)
    # agreed over the ranks before a rank alone could refuse one
    # with callback_type "legacy" (or None) whether a callback is given decides what maxiter counts: agreed too
    op, psolve, x, b, n = _system("gmres", A, b, x0, M, threads, rtol=rtol, atol=atol, restart=restart,
                                  maxiter=maxiter, callback_type=callback_type, gram_schmidt=gram_schmidt,
                                  callback=callback is not None)
    if callback_type is None:
        callback_type = "legacy"
    if callback_type not in ("x", "pr_norm", "legacy"):
        raise ValueError(f"Unknown callback_type: {callback_type!r}")
    if gram_schmidt not in ("modified", "classical"):
        raise ValueError(f"gram_schmidt must be 'modified' or 'classical', got {gram_schmidt!r}")
    if callback is None:
        callback_type = None
    run = _Run(op.comm, stats)
    matvec = op._matvec
    Mb = psolve(b)  # SciPy's ||M b||, reduced with ||b||
    bb, mbb, any_x = run.red(_sqnorm(b), _sqnorm(Mb), _start(x))
    bnrm2 = np.sqrt(bb)
    atol = _atol("gmres", bnrm2, atol, rtol)
    if bnrm2 == 0:
        return run.done(b, 0)
    eps = np.finfo(x.dtype.char).eps
    dotprod = _local_dot
    if maxiter is None:
        maxiter = n * 10
    if restart is None:
        restart = 20
    restart = min(restart, n)
    Mb_nrm2 = np.sqrt(mbb)
    # SciPy's inner tolerance (gh-8400): the inner loop tests the preconditioned residual
    ptol_max_factor = 1.
    ptol = Mb_nrm2 * min(ptol_max_factor, atol / bnrm2)
    presid = 0.
    lartg = get_lapack_funcs("lartg", dtype=x.dtype)
    v = np.empty([restart + 1, x.shape[0]], dtype=x.dtype)
    h = np.zeros([restart, restart + 1], dtype=x.dtype)
    givens = np.zeros([restart, 2], dtype=x.dtype)
    inner_iter = 0
    rnorm = None
    z0 = None  # psolve of the current residual, computed with its norm's reduction
    for iteration in range(maxiter):
        if iteration == 0:
            r = b - matvec(x) if any_x else b.copy()
            z0 = psolve(r)
            rr, zz = run.red(_sqnorm(r), _sqnorm(z0))
            if np.sqrt(rr) < atol:
                return run.done(x, 0)
        v[0, :] = z0
        tmp = np.sqrt(zz)
        v[0, :] *= (1 / tmp)
        S = np.zeros(restart + 1, dtype=x.dtype)  # the right-hand side of the small least-squares problem
        S[0] = tmp
        breakdown = False
        for col in range(restart):
            run.iterations += 1
            w = psolve(matvec(v[col, :]))
            if gram_schmidt == "modified":
                ww, tmp = run.red(_sqnorm(w), dotprod(v[0, :], w))
                h0 = np.sqrt(ww)
                for k in range(col + 1):
                    if k:
                        (tmp,) = run.red(dotprod(v[k, :], w))
                    h[col, k] = tmp
                    w -= tmp * v[k, :]
            else:  # all projections at once: two passes over the basis, one reduction
                ww, proj = _basis_dots(v[:col + 1], w, threads)
                sums = run.red(ww, *proj)
                h0 = np.sqrt(sums[0])
                proj[:] = sums[1:]
                h[col, :col + 1] = proj
                ww = _sub_combination(proj, v[:col + 1], w, threads)
            (ww,) = run.red(_sqnorm(w) if gram_schmidt == "modified" or ww is None else ww)
            h1 = np.sqrt(ww)
            h[col, col + 1] = h1
            if h1 <= eps * h0:  # the exact solution is in the basis
                v[col + 1, :] = w[:]
                h[col, col + 1] = 0
                breakdown = True
            else:
                np.multiply(w, 1 / h1, out=v[col + 1, :])
            for k in range(col):  # the earlier rotations, on the new column
                c, s = givens[k, 0], givens[k, 1]
                n0, n1 = h[col, [k, k + 1]]
                h[col, [k, k + 1]] = [c * n0 + s * n1, -s.conj() * n0 + c * n1]
            c, s, mag = lartg(h[col, col], h[col, col + 1])
            givens[col, :] = [c, s]
            h[col, [col, col + 1]] = mag, 0
            tmp = -np.conjugate(s) * S[col]
            S[[col, col + 1]] = [c * S[col], tmp]
            presid = np.abs(tmp)
            inner_iter += 1
            if callback_type in ("legacy", "pr_norm"):
                callback(presid / bnrm2)
            if callback_type == "legacy" and inner_iter == maxiter:
                break
            if presid <= ptol or breakdown:
                break
        # the upper triangular solve of SciPy (a zero pivot pseudo-solved: its component dropped)
        if h[col, col] == 0:
            S[col] = 0
        y = np.zeros([col + 1], dtype=x.dtype)
        y[:] = S[:col + 1]
        for k in range(col, 0, -1):
            if y[k] != 0:
                y[k] /= h[k, k]
                tmp = y[k]
                y[:k] -= tmp * h[k, :k]
        if y[0] != 0:
            y[0] /= h[0, 0]
        if x.size >= _DOT_MIN:  # no BLAS thread pool (see _DOT_MIN)
            _sub_combination(-y, v[:col + 1, :], x, threads)
        else:
            x += y @ v[:col + 1, :]
        r = b - matvec(x)
        last = (callback_type == "legacy" and inner_iter == maxiter) or iteration == maxiter - 1
        if last:
            (rr,) = run.red(_sqnorm(r))
        else:  # the next cycle's M r, whose norm rides with ||r||'s reduction
            z0 = psolve(r)
            rr, zz = run.red(_sqnorm(r), _sqnorm(z0))
        rnorm = np.sqrt(rr)
        if callback_type == "legacy" and inner_iter == maxiter:
            return run.done(x, 0 if rnorm <= atol else maxiter)
        if callback_type == "x":
            callback(x)
        if rnorm <= atol or breakdown:
            break
        elif presid <= ptol:  # the inner test passed, the outer did not: tighten
            ptol_max_factor = max(eps, 0.25 * ptol_max_factor)
        else:
            ptol_max_factor = min(1.0, 1.5 * ptol_max_factor)
        ptol = presid * min(ptol_max_factor, atol / rnorm)
    return run.done(x, 0 if rnorm <= atol else maxiter)


# -- MINRES ---------------------------------------------------------------------------------
def minres(A, b, x0=None, *, rtol=1e-5, shift=0.0, maxiter=None, M=None, callback=None, show=False, check=False,
           threads=None, stats=None):
    """Solve ``(A - shift I) x = b`` by MINRES, ``A`` symmetric (collective).

    :func:`scipy.sparse.linalg.minres`'s iteration (Paige and Saunders, as SciPy has it:
    its stopping tests, ``check``, and its ``numpy.inner`` products, which do not conjugate)
    on this rank's slices: **2 allreduces per iteration** (``beta``; then ``||x||`` for
    the stopping test together with the next iteration's ``alpha``, whose Lanczos product
    is computed before the test) against SciPy's three. The last iteration's look-ahead
    product is not used.

    Parameters
    ----------
    A, b, x0, rtol, maxiter, M, callback, threads, stats
        As in :func:`cg` (``maxiter`` defaults to ``5 * n``); ``M`` must be symmetric
        positive definite.
    shift : float
        Solve ``(A - shift I) x = b``.
    show : bool
        Not supported: ``True`` raises ``NotImplementedError`` (SciPy prints a log).
    check : bool
        SciPy's symmetry checks of ``A`` and ``M`` before iterating (``ValueError``).

    Returns
    -------
    x : numpy.ndarray
        This rank's slice of the solution.
    info : int
        0: stopped by a test; ``maxiter``: the iteration limit.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> d = np.array([[2.0, 1.0, 0.0], [1.0, -3.0, 1.0], [0.0, 1.0, 1.0]])   # symmetric, indefinite
    >>> A = stmpi.DistCSR.from_global(st.from_dense(d) if MPI.COMM_WORLD.rank == 0 else None)
    >>> r0, r1 = A.row_range
    >>> b = np.array([1.0, 2.0, 3.0])[r0:r1]
    >>> x, info = stmpi.minres(A, b, rtol=1e-10)
    >>> info, bool(np.allclose(A @ x, b))
    (0, True)
    """
    if show:
        raise NotImplementedError("sparsetensor.mpi.minres: show=True (SciPy's printed log) is not supported")
    op, psolve, x, b, n = _system("minres", A, b, x0, M, threads, rtol=rtol, shift=shift, maxiter=maxiter,
                                  check=check, x0_given=x0 is not None)  # x0 decides a product below
    run = _Run(op.comm, stats)
    matvec = op._matvec
    if maxiter is None:
        maxiter = 5 * n
    istop = 0
    itn = 0
    xtype = x.dtype
    eps = np.finfo(xtype).eps
    # the first Lanczos vector: y = beta1 P' v1 with P = M^-1
    r1 = b.copy() if x0 is None else b - matvec(x)
    y = psolve(r1)
    beta1, bb = run.red(np.inner(r1, y), _sqnorm(b))
    if beta1 < 0:
        raise ValueError("indefinite preconditioner")
    elif beta1 == 0:
        return run.done(x, 0)
    bnorm = np.sqrt(bb)
    if bnorm == 0:
        return run.done(b, 0)
    beta1 = math.sqrt(beta1)
    if check:
        w = matvec(y)
        r2 = matvec(w)
        s, t = run.red(np.inner(w, w), np.inner(y, r2))
        if abs(s - t) > (s + eps) * eps ** (1.0 / 3.0):
            raise ValueError("non-symmetric matrix")
        r2 = psolve(y)
        s, t = run.red(np.inner(y, y), np.inner(r1, r2))
        if abs(s - t) > (s + eps) * eps ** (1.0 / 3.0):
            raise ValueError("non-symmetric preconditioner")
    oldb = 0
    beta = beta1
    dbar = 0
    epsln = 0
    phibar = beta1
    rhs1 = beta1
    rhs2 = 0
    tnorm2 = 0
    gmax = 0
    gmin = np.finfo(xtype).max
    cs = -1
    sn = 0
    w = np.zeros(x.shape[0], dtype=xtype)
    w2 = np.zeros(x.shape[0], dtype=xtype)
    r2 = r1

    def lanczos_head(y, beta, oldb, r1, itn):
        """The start of iteration ``itn``: v and A v less the previous directions (before alpha)."""
        v = (1.0 / beta) * y
        y = matvec(v)
        y = y - shift * v
        if itn >= 2:
            y = y - (beta / oldb) * r1
        return v, y

    ahead = None  # (v, y, alfa) of the next iteration, computed with the last ||x||
    while itn < maxiter:
        itn += 1
        run.iterations = itn
        if ahead is None:
            v, y = lanczos_head(y, beta, oldb, r1, itn)
            (alfa,) = run.red(np.inner(v, y))
        else:
            v, y, alfa = ahead
        y = y - (alfa / beta) * r2
        r1 = r2
        r2 = y
        y = psolve(r2)
        oldb = beta
        (beta,) = run.red(np.inner(r2, y))
        if beta < 0:
            raise ValueError("non-symmetric matrix")
        beta = math.sqrt(beta)
        tnorm2 += alfa ** 2 + oldb ** 2 + beta ** 2
        if itn == 1 and beta / beta1 <= 10 * eps:
            istop = -1  # b and x are eigenvectors (M = I): stop after this iteration
        # the previous rotation, then the next one
        oldeps = epsln
        delta = cs * dbar + sn * alfa
        gbar = sn * dbar - cs * alfa
        epsln = sn * beta
        dbar = - cs * beta
        root = np.linalg.norm([gbar, dbar])
        gamma = max(np.linalg.norm([gbar, beta]), eps)
        cs = gbar / gamma
        sn = beta / gamma
        phi = cs * phibar
        phibar = sn * phibar
        denom = 1.0 / gamma
        w1 = w2
        w2 = w
        w = (v - oldeps * w1 - delta * w2) * denom
        x = x + phi * w
        gmax = max(gmax, gamma)
        gmin = min(gmin, gamma)
        z = rhs1 / gamma
        rhs1 = rhs2 - delta * z
        rhs2 = - epsln * z
        # ||x|| for the tests; the next iteration's alpha rides along unless this one is the last
        # (a zero beta would make SciPy divide by zero only if it went on: left to the next loop)
        if itn < maxiter and istop == 0 and beta != 0:
            nv, ny = lanczos_head(y, beta, oldb, r1, itn + 1)
            xx, nalfa = run.red(_sqnorm(x), np.inner(nv, ny))
            ahead = (nv, ny, nalfa)
        else:
            (xx,) = run.red(_sqnorm(x))
            ahead = None
        Anorm = math.sqrt(tnorm2)
        ynorm = np.sqrt(xx)
        epsx = Anorm * ynorm * eps
        rnorm = phibar
        test1 = np.inf if ynorm == 0 or Anorm == 0 else rnorm / (Anorm * ynorm)
        test2 = np.inf if Anorm == 0 else root / Anorm
        Acond = gmax / gmin
        if istop == 0:
            t1 = 1 + test1
            t2 = 1 + test2
            if t2 <= 1:
                istop = 2
            if t1 <= 1:
                istop = 1
            if itn >= maxiter:
                istop = 6
            if Acond >= 0.1 / eps:
                istop = 4
            if epsx >= beta1:
                istop = 3
            if test2 <= rtol:
                istop = 2
            if test1 <= rtol:
                istop = 1
        if callback is not None:
            callback(x)
        if istop != 0:
            break
    return run.done(x, maxiter if istop == 6 else 0)
