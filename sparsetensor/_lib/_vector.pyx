"""Dense vector kernels of the Krylov methods (Cython, OpenMP), in place and in one pass.

``axpy``: ``y += a * x``; ``sub_combination``: ``w -= c @ V`` (``V``'s rows a basis). NumPy's
``y += a * x`` makes a temporary and reads and writes one vector more; BLAS from SciPy runs
its own thread pool, which spins beside OpenMP's threads between calls (on two threads a CG
iteration took ten times as long). These run on the thread count they are handed, in
blocks of the vectors, so each thread streams its own part.

Inputs are trusted to have the shapes and dtypes documented in ``_vector.pyi``: the wrapper
(``sparsetensor.mpi._krylov``) checks them.
"""

from cython.parallel cimport prange

ctypedef fused field_t:
    float
    double
    float complex
    double complex

cdef enum:
    BLOCK = 2048  # elements of w a thread keeps in L1 while it streams the basis rows


def axpy(field_t a, const field_t[::1] x, field_t[::1] y, int nthreads):
    """``y += a * x`` in place."""
    cdef Py_ssize_t n = y.shape[0], nb = (n + BLOCK - 1) // BLOCK, b, i, lo, hi
    if x.shape[0] != n:
        raise ValueError(f"axpy: x has {x.shape[0]} items, y {n}")
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nthreads):
            lo = b * BLOCK
            hi = min(lo + BLOCK, n)
            for i in range(lo, hi):
                y[i] = y[i] + a * x[i]


def sub_combination(const field_t[::1] c, const field_t[:, ::1] V, field_t[::1] w, int nthreads):
    """``w -= c @ V`` in place: ``w[i] -= c[0] V[0, i] + c[1] V[1, i] + ...`` (summed in that order)."""
    cdef Py_ssize_t n = w.shape[0], K = c.shape[0], nb = (n + BLOCK - 1) // BLOCK, b, i, k, lo, hi
    cdef field_t ck
    if V.shape[0] != K or V.shape[1] != n:
        raise ValueError(f"sub_combination: V is {V.shape[0]} x {V.shape[1]}, expected {K} x {n}")
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nthreads):
            lo = b * BLOCK
            hi = min(lo + BLOCK, n)
            for k in range(K):
                ck = c[k]
                for i in range(lo, hi):
                    w[i] = w[i] - ck * V[k, i]
