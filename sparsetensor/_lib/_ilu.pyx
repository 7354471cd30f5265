# Incomplete factorizations on a CSR pattern and the triangular solves that apply them:
# ILU(0) (A ~ L U, L unit lower, both on A's pattern), IC(0) (A ~ L L^H on the lower
# triangle of a Hermitian A) and the row-oriented triangular solve of a CSR matrix. They are
# sequential: every row depends on the rows before it.
#
# Inputs are one canonical CSR matrix (5.1-5.6 checked by the wrapper, sparsetensor._backend.cpu._ilu:
# sorted unique columns), square, values float32/float64/complex64/complex128 (the wrapper
# converts). Their memory may change after the check (issue 34): every row segment is checked
# to lie in [0, nnz] and every column in [0, n) before it addresses memory, and the work array
# only ever holds positions that were in range when written, so a changed index gives a wrong
# result or the "changed" status, never an access out of bounds.
from libc.math cimport sqrt
from libc.stdint cimport int64_t

from ._guard cimport bad_index, bad_segment
from ._types cimport index_t

import numpy as np

# The kernels' status (the first item of their `info` output; the second is the row).
cdef enum:
    OK = 0
    ZERO_PIVOT = 1       # ILU(0): U[i, i] == 0; solve: a zero diagonal entry
    MISSING_DIAGONAL = 2  # no entry (i, i) in the pattern
    NOT_POSITIVE = 3     # IC(0): the pivot's square is not positive (A not positive definite enough)
    CHANGED = 4          # an index out of range: the arrays changed after validation
    NOT_LOWER = 5        # IC(0): an entry above the diagonal

ctypedef fused field_t:
    float
    double
    float complex
    double complex


cdef inline field_t _conj(field_t a) noexcept nogil:
    if field_t is float or field_t is double:
        return a
    else:
        return a.conjugate()


cdef inline double _real(field_t a) noexcept nogil:
    if field_t is float or field_t is double:
        return a
    else:
        return a.real


cdef inline bint _is_zero(field_t a) noexcept nogil:
    if field_t is float or field_t is double:
        return a == 0
    else:
        return a.real == 0 and a.imag == 0


cdef inline void _fail(int64_t[::1] info, int64_t kind, int64_t row) noexcept nogil:
    info[0] = kind
    info[1] = row


def ilu0(const index_t[::1] crow, const index_t[::1] cols, field_t[::1] a, int64_t[::1] info):
    """ILU(0) in place over ``a`` (the values of a canonical square CSR matrix).

    On return ``a`` holds L's strictly lower entries (L has a unit diagonal) and U's upper
    ones, on the same pattern; ``info`` = (status, row) with status 0 when it worked.
    """
    cdef Py_ssize_t n = crow.shape[0] - 1
    cdef Py_ssize_t nnz = cols.shape[0]
    if n < 0 or a.shape[0] != nnz or info.shape[0] < 2:
        raise ValueError(f"ilu0: expected crow (n + 1), cols and values of one length (got {cols.shape[0]} "
                         f"and {a.shape[0]}) and info of 2 items")
    diag_arr = np.full(max(n, 1), -1, dtype="int64")
    pos_arr = np.full(max(n, 1), -1, dtype="int64")
    cdef int64_t[::1] diag = diag_arr
    cdef int64_t[::1] pos = pos_arr
    with nogil:
        _ilu0(crow, cols, a, diag, pos, n, nnz, info)


cdef void _ilu0(const index_t[::1] crow, const index_t[::1] cols, field_t[::1] a, int64_t[::1] diag,
                int64_t[::1] pos, Py_ssize_t n, Py_ssize_t nnz, int64_t[::1] info) noexcept nogil:
    cdef Py_ssize_t i, p, q, d
    cdef int64_t lo, hi, klo, khi, j, k, r, dk
    cdef field_t lik
    _fail(info, OK, -1)
    for i in range(n):
        lo = crow[i]
        hi = crow[i + 1]
        if bad_segment(lo, hi, nnz):
            _fail(info, CHANGED, i)
            return
        for p in range(lo, hi):  # where each column of row i sits
            j = cols[p]
            if bad_index(j, n):
                _fail(info, CHANGED, i)
                return
            pos[j] = p
        d = -1
        # IKJ order: eliminate with each earlier row k of the pattern, in increasing k (sorted rows)
        for p in range(lo, hi):
            k = cols[p]
            if bad_index(k, n):
                _fail(info, CHANGED, i)
                return
            if k >= i:
                if k == i:
                    d = p
                continue
            dk = diag[k]  # row k < i was factored: its diagonal is in range
            if bad_index(dk, nnz):
                _fail(info, CHANGED, i)
                return
            lik = a[p] / a[dk]
            a[p] = lik
            klo = dk + 1
            khi = crow[k + 1]
            if bad_segment(klo, khi, nnz):
                _fail(info, CHANGED, i)
                return
            for q in range(klo, khi):  # U's row k right of its diagonal, where row i has entries
                j = cols[q]
                if bad_index(j, n):
                    _fail(info, CHANGED, i)
                    return
                r = pos[j]
                if r >= lo and r < hi:
                    a[r] = a[r] - lik * a[q]
        if d < 0:
            _fail(info, MISSING_DIAGONAL, i)
            return
        if _is_zero(a[d]):
            _fail(info, ZERO_PIVOT, i)
            return
        diag[i] = d
        # pos entries of this row are left behind: the range test above ignores them in later rows


def ic0(const index_t[::1] crow, const index_t[::1] cols, field_t[::1] a, int64_t[::1] info):
    """IC(0) in place over ``a``: the lower triangle (diagonal included, last in each row) of a
    Hermitian matrix becomes L with A ~ L L^H on that pattern; ``info`` as for :func:`ilu0`."""
    cdef Py_ssize_t n = crow.shape[0] - 1
    cdef Py_ssize_t nnz = cols.shape[0]
    if n < 0 or a.shape[0] != nnz or info.shape[0] < 2:
        raise ValueError(f"ic0: expected crow (n + 1), cols and values of one length (got {cols.shape[0]} "
                         f"and {a.shape[0]}) and info of 2 items")
    diag_arr = np.full(max(n, 1), -1, dtype="int64")
    pos_arr = np.full(max(n, 1), -1, dtype="int64")
    cdef int64_t[::1] diag = diag_arr
    cdef int64_t[::1] pos = pos_arr
    with nogil:
        _ic0(crow, cols, a, diag, pos, n, nnz, info)


cdef void _ic0(const index_t[::1] crow, const index_t[::1] cols, field_t[::1] a, int64_t[::1] diag,
               int64_t[::1] pos, Py_ssize_t n, Py_ssize_t nnz, int64_t[::1] info) noexcept nogil:
    cdef Py_ssize_t i, p, q, d
    cdef int64_t lo, hi, jlo, jhi, j, k, r, dj
    cdef field_t s
    cdef double sd
    _fail(info, OK, -1)
    for i in range(n):
        lo = crow[i]
        hi = crow[i + 1]
        if bad_segment(lo, hi, nnz):
            _fail(info, CHANGED, i)
            return
        for p in range(lo, hi):
            j = cols[p]
            if bad_index(j, n):
                _fail(info, CHANGED, i)
                return
            pos[j] = p
        d = -1
        for p in range(lo, hi):
            j = cols[p]
            if bad_index(j, n):
                _fail(info, CHANGED, i)
                return
            if j > i:
                _fail(info, NOT_LOWER, i)
                return
            if j == i:
                d = p
                continue
            # L[i, j] = (A[i, j] - sum_{k < j} L[i, k] conj(L[j, k])) / L[j, j], over both rows' patterns
            dj = diag[j]
            jlo = crow[j]
            if bad_index(dj, nnz) or bad_segment(jlo, dj, nnz):
                _fail(info, CHANGED, i)
                return
            s = a[p]
            for q in range(jlo, dj):
                k = cols[q]
                if bad_index(k, n):
                    _fail(info, CHANGED, i)
                    return
                r = pos[k]
                if r >= lo and r < p:  # L[i, k] with k < j: computed earlier in this row
                    s = s - a[r] * _conj(a[q])
            a[p] = s / a[dj]
        if d < 0:
            _fail(info, MISSING_DIAGONAL, i)
            return
        s = a[d]
        for p in range(lo, d):
            s = s - a[p] * _conj(a[p])
        sd = _real(s)
        if not sd > 0:  # also NaN
            _fail(info, NOT_POSITIVE, i)
            return
        a[d] = sqrt(sd)  # for float32, the double root rounded once: the correctly rounded float root
        diag[i] = d


def solve_triangular(const index_t[::1] crow, const index_t[::1] cols, const field_t[::1] a, field_t[:, ::1] b,
                     bint lower, bint unit_diagonal, int64_t[::1] info, const field_t[::1] inv_diag,
                     const int64_t[::1] diag_pos):
    """Solve ``T X = B`` in place over ``b`` (n, k), T the lower (or upper) triangle of the CSR matrix.

    Entries outside the triangle are not read; ``unit_diagonal``: the diagonal is taken as 1
    (its entries are not read either). ``info`` as for :func:`ilu0` (ZERO_PIVOT: a zero
    diagonal entry, MISSING_DIAGONAL: none). ``inv_diag``: empty, or the n reciprocals of the
    diagonal, which each row then multiplies by (a division on the rows' dependency chain costs
    several multiplications); a row must still hold its diagonal entry. ``diag_pos``: empty, or
    the position of each row's diagonal entry in ``cols``, so the triangle's part of a row is a
    known range instead of a scan for the diagonal (the same sums, in the same order).
    """
    cdef Py_ssize_t n = crow.shape[0] - 1
    cdef Py_ssize_t nnz = cols.shape[0]
    if n < 0 or a.shape[0] != nnz or b.shape[0] != n or info.shape[0] < 2 or inv_diag.shape[0] not in (0, n) \
            or diag_pos.shape[0] not in (0, n):
        raise ValueError(f"solve_triangular: expected crow (n + 1), cols and values of one length, b of n = {n} "
                         f"rows (got {b.shape[0]}), info of 2 items and inv_diag and diag_pos of 0 or n items")
    with nogil:
        if diag_pos.shape[0] and b.shape[1] == 1:
            _trsv_known(crow, cols, a, &b[0, 0] if n > 0 else NULL, n, nnz, lower, unit_diagonal, info, inv_diag,
                        diag_pos)
        else:
            _trsv(crow, cols, a, b, n, nnz, lower, unit_diagonal, info, inv_diag)


cdef void _trsv_known(const index_t[::1] crow, const index_t[::1] cols, const field_t[::1] a, field_t* x,
                      Py_ssize_t n, Py_ssize_t nnz, bint lower, bint unit_diagonal, int64_t[::1] info,
                      const field_t[::1] inv_diag, const int64_t[::1] diag_pos) noexcept nogil:
    # _trsv for one right-hand side whose rows' diagonal positions are known. A position or an
    # index changed since the check gives a wrong result, never an access out of bounds.
    cdef Py_ssize_t step, i
    cdef int64_t lo, hi, p, j, d
    cdef field_t s, v
    _fail(info, OK, -1)
    for step in range(n):
        i = step if lower else n - 1 - step
        lo = crow[i]
        hi = crow[i + 1]
        d = diag_pos[i]
        if bad_segment(lo, hi, nnz) or d < lo or d >= hi:
            _fail(info, CHANGED, i)
            return
        s = x[i]
        if lower:
            for p in range(lo, d):
                j = cols[p]
                if bad_index(j, n):
                    _fail(info, CHANGED, i)
                    return
                s = s - a[p] * x[j]
        else:
            p = hi - 1
            while p > d:
                j = cols[p]
                if bad_index(j, n):
                    _fail(info, CHANGED, i)
                    return
                s = s - a[p] * x[j]
                p -= 1
        if unit_diagonal:
            x[i] = s
        elif inv_diag.shape[0]:
            x[i] = s * inv_diag[i]
        else:
            v = a[d]
            if _is_zero(v):
                _fail(info, ZERO_PIVOT, i)
                return
            x[i] = s / v


cdef void _trsv(const index_t[::1] crow, const index_t[::1] cols, const field_t[::1] a, field_t[:, ::1] b,
                Py_ssize_t n, Py_ssize_t nnz, bint lower, bint unit_diagonal, int64_t[::1] info,
                const field_t[::1] inv_diag) noexcept nogil:
    # Rows are sorted (5.6, checked by the wrapper), so a row's part in the triangle is a prefix
    # (lower) or a suffix (upper) that ends at the diagonal: only that part is read. Were the
    # columns changed since the check, the result would be wrong, never an access out of bounds:
    # a lower part's columns must lie in [0, i), an upper part's in (i, n).
    cdef Py_ssize_t step, i, c, _, m = b.shape[1]
    cdef int64_t lo, hi, p, j, d, sgn = 1 if lower else -1
    cdef field_t v, s
    cdef field_t* x = &b[0, 0] if n > 0 and m > 0 else NULL
    _fail(info, OK, -1)
    if x == NULL:
        return
    for step in range(n):
        i = step if lower else n - 1 - step
        lo = crow[i]
        hi = crow[i + 1]
        if bad_segment(lo, hi, nnz):
            _fail(info, CHANGED, i)
            return
        # the triangle's part: from the row's start up (lower) or its end down (upper) to the diagonal
        d = -1
        p = lo if lower else hi - 1
        if m == 1:  # a vector: the row's sum in a local
            s = x[i]
            for _ in range(hi - lo):
                j = cols[p]
                if sgn * j >= sgn * i:
                    d = p if j == i else -1
                    break
                if bad_index(j, n):
                    _fail(info, CHANGED, i)
                    return
                s = s - a[p] * x[j]
                p += sgn
            x[i] = s
        else:
            for _ in range(hi - lo):
                j = cols[p]
                if sgn * j >= sgn * i:
                    d = p if j == i else -1
                    break
                if bad_index(j, n):
                    _fail(info, CHANGED, i)
                    return
                v = a[p]
                for c in range(m):
                    x[i * m + c] = x[i * m + c] - v * x[j * m + c]
                p += sgn
        if unit_diagonal:
            continue
        if d < 0:
            _fail(info, MISSING_DIAGONAL, i)
            return
        if inv_diag.shape[0]:
            v = inv_diag[i]
            for c in range(m):
                x[i * m + c] = x[i * m + c] * v
            continue
        v = a[d]
        if _is_zero(v):
            _fail(info, ZERO_PIVOT, i)
            return
        for c in range(m):
            x[i * m + c] = x[i * m + c] / v
