"""Dense vector kernels of the Krylov methods (Cython, OpenMP), in place and in one pass.

``axpy``: ``y += a * x``; ``sub_combination``: ``w -= c @ V`` (``V``'s rows a basis); ``dot``:
``x^H y``; ``dots``: ``V^H w``, every row's at once in one pass over the basis; ``xpay``:
``y = x + a * y``; ``scale_dots``: CG's Jacobi step ``z = d * r`` with ``||r||^2`` and ``r^H z``
in the same pass. NumPy's ``y += a * x`` makes a temporary and reads and writes one vector more;
BLAS (SciPy's, and NumPy's behind ``np.dot`` on long vectors) runs its own thread pool, which
spins beside OpenMP's threads between calls (on two threads a CG iteration took five to ten
times as long). These run on the thread count they are handed, in blocks of the vectors, so
each thread streams its own part.

``dot``, ``dots`` and ``scale_dots`` sum each block in eight interleaved partial sums and then the blocks'
sums in block order: the same result on any number of threads.

Inputs are trusted to have the shapes and dtypes documented in ``_vector.pyi``: the wrapper
(``sparsetensor.mpi._krylov``) checks them.
"""

from cython.parallel cimport prange
from libc.stdlib cimport free, malloc

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
    """``w -= c @ V`` in place: ``w[i] -= c[0] V[0, i] + c[1] V[1, i] + ...`` (summed in that order).

    Returns the new ``w^H w``, summed as :func:`dot` sums it, from each block while it is still in
    cache (GMRES needs the norm of what is left)."""
    cdef Py_ssize_t n = w.shape[0], K = c.shape[0], nb = (n + BLOCK - 1) // BLOCK, b, i, k, lo, hi
    cdef field_t ck, total = 0
    cdef field_t* part
    if V.shape[0] != K or V.shape[1] != n:
        raise ValueError(f"sub_combination: V is {V.shape[0]} x {V.shape[1]}, expected {K} x {n}")
    if n == 0:
        return total
    part = <field_t*> malloc(nb * sizeof(field_t))
    if part == NULL:
        raise MemoryError()
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nthreads):
            lo = b * BLOCK
            hi = min(lo + BLOCK, n)
            for k in range(K):
                ck = c[k]
                for i in range(lo, hi):
                    w[i] = w[i] - ck * V[k, i]
            part[b] = _block_dot(&w[lo], &w[lo], hi - lo)
        for b in range(nb):
            total = total + part[b]
    free(part)
    return total


cdef inline field_t _block_dot(const field_t* x, const field_t* y, Py_ssize_t n) noexcept nogil:
    """``sum conj(x[i]) y[i]`` over one block, in eight interleaved partial sums."""
    cdef field_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0
    cdef Py_ssize_t i = 0
    if field_t is float or field_t is double:
        while i + 8 <= n:
            s0 = s0 + x[i] * y[i]
            s1 = s1 + x[i + 1] * y[i + 1]
            s2 = s2 + x[i + 2] * y[i + 2]
            s3 = s3 + x[i + 3] * y[i + 3]
            s4 = s4 + x[i + 4] * y[i + 4]
            s5 = s5 + x[i + 5] * y[i + 5]
            s6 = s6 + x[i + 6] * y[i + 6]
            s7 = s7 + x[i + 7] * y[i + 7]
            i += 8
        while i < n:
            s0 = s0 + x[i] * y[i]
            i += 1
    else:
        while i + 4 <= n:
            s0 = s0 + x[i].conjugate() * y[i]
            s1 = s1 + x[i + 1].conjugate() * y[i + 1]
            s2 = s2 + x[i + 2].conjugate() * y[i + 2]
            s3 = s3 + x[i + 3].conjugate() * y[i + 3]
            i += 4
        while i < n:
            s0 = s0 + x[i].conjugate() * y[i]
            i += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


def dot(const field_t[::1] x, const field_t[::1] y, int nthreads):
    """``x^H y`` (``sum conj(x[i]) y[i]``; for real dtypes ``x . y``), in ``x``'s dtype."""
    cdef Py_ssize_t n = x.shape[0], nb = (n + BLOCK - 1) // BLOCK, b, lo
    cdef field_t total = 0
    cdef field_t* part
    if y.shape[0] != n:
        raise ValueError(f"dot: x has {n} items, y {y.shape[0]}")
    if n == 0:
        return total
    part = <field_t*> malloc(nb * sizeof(field_t))
    if part == NULL:
        raise MemoryError()
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nthreads):
            lo = b * BLOCK
            part[b] = _block_dot(&x[lo], &y[lo], min(BLOCK, n - lo))
        for b in range(nb):
            total = total + part[b]
    free(part)
    return total


def dots(const field_t[:, ::1] V, const field_t[::1] w, field_t[::1] out, int nthreads):
    """``out[k] = V[k]^H w`` for every row ``k`` of ``V``, each block of ``w`` read once for all rows;
    with one more entry in ``out``, ``w^H w`` last (GMRES's norm before the projection)."""
    cdef Py_ssize_t K = V.shape[0], n = w.shape[0], nb = (n + BLOCK - 1) // BLOCK, b, k, lo, m, J = out.shape[0]
    cdef field_t total
    cdef field_t* part
    if V.shape[1] != n or (J != K and J != K + 1):
        raise ValueError(f"dots: V is {V.shape[0]} x {V.shape[1]}, w has {n} items, out {out.shape[0]}")
    if J == 0:
        return
    if n == 0:
        out[:] = 0
        return
    part = <field_t*> malloc(nb * J * sizeof(field_t))
    if part == NULL:
        raise MemoryError()
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nthreads):
            lo = b * BLOCK
            m = min(BLOCK, n - lo)
            for k in range(J):
                part[b * J + k] = _block_dot(&V[k, lo] if k < K else &w[lo], &w[lo], m)
        for k in range(J):
            total = 0
            for b in range(nb):
                total = total + part[b * J + k]
            out[k] = total
    free(part)


def xpay(field_t a, const field_t[::1] x, field_t[::1] y, int nthreads):
    """``y = x + a * y`` in place (CG's new search direction)."""
    cdef Py_ssize_t n = y.shape[0], nb = (n + BLOCK - 1) // BLOCK, b, i, lo, hi
    if x.shape[0] != n:
        raise ValueError(f"xpay: x has {x.shape[0]} items, y {n}")
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nthreads):
            lo = b * BLOCK
            hi = min(lo + BLOCK, n)
            for i in range(lo, hi):
                y[i] = x[i] + a * y[i]


cdef inline void _block_scale_dots(const field_t* d, const field_t* r, field_t* z, Py_ssize_t n,
                                   field_t* rr, field_t* rz) noexcept nogil:
    """``z = d * r`` over one block, with ``sum |r|^2`` and ``sum conj(r) z`` in four interleaved
    partial sums each."""
    cdef field_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0, z0, z1, z2, z3
    cdef Py_ssize_t i = 0
    while i + 4 <= n:
        z0 = d[i] * r[i]
        z1 = d[i + 1] * r[i + 1]
        z2 = d[i + 2] * r[i + 2]
        z3 = d[i + 3] * r[i + 3]
        z[i] = z0
        z[i + 1] = z1
        z[i + 2] = z2
        z[i + 3] = z3
        if field_t is float or field_t is double:
            a0 = a0 + r[i] * r[i]
            a1 = a1 + r[i + 1] * r[i + 1]
            a2 = a2 + r[i + 2] * r[i + 2]
            a3 = a3 + r[i + 3] * r[i + 3]
            b0 = b0 + r[i] * z0
            b1 = b1 + r[i + 1] * z1
            b2 = b2 + r[i + 2] * z2
            b3 = b3 + r[i + 3] * z3
        else:
            a0 = a0 + r[i].conjugate() * r[i]
            a1 = a1 + r[i + 1].conjugate() * r[i + 1]
            a2 = a2 + r[i + 2].conjugate() * r[i + 2]
            a3 = a3 + r[i + 3].conjugate() * r[i + 3]
            b0 = b0 + r[i].conjugate() * z0
            b1 = b1 + r[i + 1].conjugate() * z1
            b2 = b2 + r[i + 2].conjugate() * z2
            b3 = b3 + r[i + 3].conjugate() * z3
        i += 4
    while i < n:
        z0 = d[i] * r[i]
        z[i] = z0
        if field_t is float or field_t is double:
            a0 = a0 + r[i] * r[i]
            b0 = b0 + r[i] * z0
        else:
            a0 = a0 + r[i].conjugate() * r[i]
            b0 = b0 + r[i].conjugate() * z0
        i += 1
    rr[0] = (a0 + a1) + (a2 + a3)
    rz[0] = (b0 + b1) + (b2 + b3)


def scale_dots(const field_t[::1] d, const field_t[::1] r, field_t[::1] z, int nthreads):
    """``z = d * r`` in one pass with ``(r^H r, r^H z)`` (the first real-valued for complex ``r``)."""
    cdef Py_ssize_t n = r.shape[0], nb = (n + BLOCK - 1) // BLOCK, b, lo
    cdef field_t rr = 0, rz = 0
    cdef field_t* part
    if d.shape[0] != n or z.shape[0] != n:
        raise ValueError(f"scale_dots: d has {d.shape[0]} items, r {n}, z {z.shape[0]}")
    if n == 0:
        return rr, rz
    part = <field_t*> malloc(2 * nb * sizeof(field_t))
    if part == NULL:
        raise MemoryError()
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nthreads):
            lo = b * BLOCK
            _block_scale_dots(&d[lo], &r[lo], &z[lo], min(BLOCK, n - lo), &part[2 * b], &part[2 * b + 1])
        for b in range(nb):
            rr = rr + part[2 * b]
            rz = rz + part[2 * b + 1]
    free(part)
    return rr, rz
