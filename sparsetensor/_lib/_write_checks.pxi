# The checks of _coalesce.pyx's output passes (coo_write, coo_write_buckets), included there:
# nothing those defs are handed makes them address memory outside the arrays. Each run written
# is bounded by its chunk's (bucket's) offsets; the offsets, bucket starts, positions and shapes
# are checked here before the pass, the runs per chunk after it. The including module cimports
# prange, _lo, pos_t and the libc.stdint types, imports numpy as np and defines _check_shape.


cdef int _out_itemsize(str kernel, const uint8_t[:, ::1] out_indices, Py_ssize_t nout, const int64_t[::1] shape,
                       Py_ssize_t E, Py_ssize_t out_rows, Py_ssize_t out_E) except -1:
    """The output indices' itemsize (4 or 8) once the arrays' shapes agree, else ValueError."""
    cdef Py_ssize_t S = out_indices.shape[0], isz = out_indices.shape[1] // nout if nout > 0 else 8, d
    _check_shape(kernel, S, shape.shape[0])
    if nout > 0 and S > 0 and (isz not in (4, 8) or out_indices.shape[1] != nout * isz):
        raise ValueError(f"{kernel}: out_indices must be ({S}, {nout} * 4 or 8) bytes, got ({S}, "
                         f"{out_indices.shape[1]})")
    for d in range(S):
        if nout > 0 and shape[d] < 1:
            raise ValueError(f"{kernel}: shape[{d}] must be at least 1 when there are entries, got {shape[d]}")
    if out_rows != nout or out_E != E:
        raise ValueError(f"{kernel}: out must be ({nout}, {E}) (runs, values' columns), got ({out_rows}, {out_E})")
    return <int>isz


cdef int _check_offsets(str kernel, const int64_t[::1] offsets, Py_ssize_t nout) except -1:
    """offsets: at least two, non-decreasing from >= 0 to nout."""
    cdef Py_ssize_t c, m = offsets.shape[0]
    if m < 2 or offsets[0] < 0 or offsets[m - 1] != nout:
        raise ValueError(f"{kernel}: offsets must have at least 2 entries, from >= 0 to the {nout} output "
                         f"rows, got {m} entries" + (f" ({offsets[0]} .. {offsets[m - 1]})" if m else ""))
    for c in range(1, m):
        if offsets[c] < offsets[c - 1]:
            raise ValueError(f"{kernel}: offsets must be non-decreasing, got {offsets[c - 1]} then "
                             f"{offsets[c]} at {c}")
    return 0


cdef Py_ssize_t _perm_outside(const pos_t* perm, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t rows) noexcept nogil:
    cdef Py_ssize_t i, bad = 0
    for i in range(lo, hi):
        bad += <uint64_t>perm[i] >= <uint64_t>rows
    return bad


cdef int _check_rows(str kernel, const pos_t[::1] perm, Py_ssize_t n, Py_ssize_t rows, int nthreads) except -1:
    """perm empty (values then has the n rows) or n positions within values' rows."""
    cdef Py_ssize_t m = perm.shape[0], c, nchunks = max(1, min(nthreads, m // 65536 + 1))
    cdef Py_ssize_t[::1] bad
    if m == 0:
        if rows != n:
            raise ValueError(f"{kernel}: values must have one row per key ({n}), got {rows}")
        return 0
    if m != n:
        raise ValueError(f"{kernel}: perm must be empty or have one entry per key ({n}), got {m}")
    bad = np.zeros(nchunks, dtype=np.intp)
    with nogil:
        for c in prange(nchunks, schedule="static", num_threads=nthreads):
            bad[c] = _perm_outside(&perm[0], _lo(c, m, nchunks), _lo(c + 1, m, nchunks), rows)
    if np.asarray(bad).any():
        raise ValueError(f"{kernel}: perm must hold positions in [0, {rows}) (the rows of values)")
    return 0


cdef int _check_ends(str kernel, const int64_t[::1] ends, const int64_t[::1] offsets, str part) except -1:
    """Every chunk (bucket) wrote the runs its offsets made room for."""
    cdef Py_ssize_t c
    for c in range(ends.shape[0]):
        if ends[c] != offsets[c + 1]:
            raise ValueError(f"{kernel}: the offsets do not match the runs of the keys: {part} {c} has room for "
                             f"{offsets[c + 1] - offsets[c]} runs and holds "
                             + ("more" if ends[c] < 0 else f"{ends[c] - offsets[c]}"))
    return 0
