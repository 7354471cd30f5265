# Included by _spmm.pyx: the scatter kernel (compressed columns: csc/bsc). Holds the adds of a
# column's entries (_scatter_entries), a range of block columns added into a range of output
# rows (_scatter_range), the split of the output rows by a sampled histogram (_row_split), the
# per-thread buffers of narrow outputs and their sum (_scatter_private, _add_buffers), and the
# driver over all output batches (_scatter). The including module cimports index_t, num_t, the
# libc types, prange and balanced_split, and defines _Geo, the return codes, _SCATTER_CHUNK,
# _CHUNKS_PER_THREAD, _PRIVATE_MAX_WIDTH/_BYTES and the element operations.


# --------------------------------------------------------------------------
# scatter: compressed columns

cdef inline void _scatter_entries(const index_t* pp, const num_t* vp, const num_t* d, num_t* op,
                                  const _Geo* g, const Py_ssize_t* sel, Py_ssize_t n,
                                  Py_ssize_t lo) noexcept nogil:
    """Add entries ``sel[0:n]`` (or ``lo .. lo + n`` when ``sel`` is NULL) of a column whose
    dense row is ``d``: the loop is chosen once per column, not per entry."""
    cdef Py_ssize_t q, k, N = g.N, bs = g.bs, rowlen = g.Rb * g.N
    cdef num_t x
    cdef bint logical = g.logical
    if bs == 1 and N == 1:
        x = d[0]
        if num_t is uint8_t:
            if logical:
                if x != 0:
                    for q in range(n):
                        k = lo + q if sel == NULL else sel[q]
                        op[pp[k]] = op[pp[k]] | (vp[k] != 0)
                return
        for q in range(n):
            k = lo + q if sel == NULL else sel[q]
            op[pp[k]] = op[pp[k]] + _mul(vp[k], x)
    elif bs == 1:
        for q in range(n):
            k = lo + q if sel == NULL else sel[q]
            _axpy(op + pp[k] * N, vp[k], d, N, logical)
    else:
        for q in range(n):
            k = lo + q if sel == NULL else sel[q]
            _block(op + pp[k] * rowlen, N, vp + k * bs, g, d, N, N)


cdef int _scatter_range(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp,
                        num_t* op, const _Geo* g, Py_ssize_t r0, Py_ssize_t r1,
                        Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """Block columns [j0, j1) of one batch, adding only into output block rows [r0, r1) (zeroed first).

    With a partial range the entries of a column are first compacted (branch-free) to
    those whose row is in range, then added; rows outside [0, nplain) are errors."""
    cdef Py_ssize_t j, k, kk, e, n, ldd = g.Cb * g.N, rowlen = g.Rb * g.N
    cdef uint64_t span = r1 - r0, bad, nplain = g.nplain
    cdef int64_t lo, hi, row
    cdef Py_ssize_t sel[_SCATTER_CHUNK]
    cdef const num_t* d
    cdef bint checked = g.checked, full = r0 == 0 and r1 == g.nplain
    memset(op + r0 * rowlen, 0, (r1 - r0) * rowlen * sizeof(num_t))
    for j in range(j0, j1):
        lo = cp[j]
        hi = cp[j + 1]
        if not checked and _bad_slot(lo, hi, g.nnz):
            return _BAD_COMPRESSED
        d = dp + j * ldd
        if full:
            if not checked:
                bad = 0
                for k in range(lo, hi):
                    bad = bad | (<uint64_t>pp[k] >= nplain)
                if bad:
                    return _PLAIN_TOO_LARGE
            _scatter_entries(pp, vp, d, op, g, NULL, hi - lo, lo)
            continue
        k = lo
        while k < hi:
            e = min(hi, k + _SCATTER_CHUNK)
            n = 0
            bad = 0
            for kk in range(k, e):
                row = pp[kk]
                bad = bad | (<uint64_t>row >= nplain)
                sel[n] = kk
                n = n + (<uint64_t>(row - r0) < span)
            if bad and not checked:
                return _PLAIN_TOO_LARGE
            _scatter_entries(pp, vp, d, op, g, sel, n, 0)
            k = e
    return _OK


cdef int _row_split(const index_t* pp, Py_ssize_t n, Py_ssize_t nplain, Py_ssize_t parts,
                    Py_ssize_t* bounds) noexcept nogil:
    """bounds[0..parts]: output rows split so that each range receives about as many of the
    ``n`` entries (a histogram of a sample of the plain indices; out-of-range ones ignored)."""
    cdef Py_ssize_t nbins = min(nplain, <Py_ssize_t>4096), step = max(1, n // 65536), k, b, t
    cdef int64_t p, total = 0, acc = 0
    cdef int64_t* counts = <int64_t*>scratch_calloc(nbins + 1, sizeof(int64_t))
    if counts == NULL:
        return -1
    k = 0
    while k < n:
        p = pp[k]
        if 0 <= p < nplain:
            counts[p * nbins // nplain] += 1
            total += 1
        k += step
    bounds[0] = 0
    bounds[parts] = nplain
    if total == 0:
        for t in range(1, parts):
            bounds[t] = nplain * t // parts
    else:
        t = 1
        for b in range(nbins):
            acc += counts[b]
            while t < parts and acc * parts >= total * t:
                bounds[t] = (b + 1) * nplain // nbins
                t += 1
        while t < parts:
            bounds[t] = nplain
            t += 1
    scratch_free(counts)
    return 0


cdef void _add_buffers(num_t* op, num_t** bufs, Py_ssize_t nbufs, Py_ssize_t e0, Py_ssize_t e1,
                       bint logical) noexcept nogil:
    """op[e0:e1] += sum of bufs[t][e0:e1] (or, for logical)."""
    cdef Py_ssize_t t, e
    cdef num_t* b
    for t in range(nbufs):
        b = bufs[t]
        if num_t is uint8_t:
            if logical:
                for e in range(e0, e1):
                    op[e] = op[e] | b[e]
                continue
        for e in range(e0, e1):
            op[e] = op[e] + b[e]


cdef int _scatter(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp, num_t* op,
                  const int64_t* sb, const int64_t* db, const _Geo* g, Py_ssize_t Bs, Py_ssize_t Bo,
                  int nt) except -1:
    """Every output batch by compressed columns: private buffers for narrow outputs, else
    output row ranges."""
    cdef Py_ssize_t nc = g.nc, nplain = g.nplain, nnz = g.nnz, K = g.K, N = g.N
    cdef Py_ssize_t P = 1, task, bo, s, t, MN = g.M * N
    cdef Py_ssize_t* bounds
    cdef int nerr = 0
    if nt > 1 and Bo < 2 * nt:
        P = min(nplain, <Py_ssize_t>nt)
    if P > 1 and N * g.Rb <= _PRIVATE_MAX_WIDTH and (nt - 1) * MN * <Py_ssize_t>sizeof(num_t) <= _PRIVATE_MAX_BYTES:
        return _scatter_private(cp, pp, vp, dp, op, sb, db, g, Bo, nt)
    # Output rows are split among the threads (every task scans all entries of its batch and
    # adds those of its rows), unless there are enough batches to go round.
    bounds = <Py_ssize_t*>malloc((P + 1) * sizeof(Py_ssize_t))
    if bounds == NULL:
        raise MemoryError()
    bounds[0] = 0
    bounds[P] = nplain
    with nogil:
        if P > 1 and _row_split(pp, Bs * nnz, nplain, P, bounds) != 0:
            nerr = -1
        elif nt > 1:
            for task in prange(Bo * P, num_threads=nt, schedule="dynamic"):
                bo = task // P
                t = task % P
                s = sb[bo]
                nerr += _scatter_range(cp + s * (nc + 1), pp + s * nnz, vp + s * nnz * g.bs, dp + db[bo] * K * N,
                                       op + bo * MN, g, bounds[t], bounds[t + 1], 0, nc)
        else:
            for bo in range(Bo):
                s = sb[bo]
                nerr = _scatter_range(cp + s * (nc + 1), pp + s * nnz, vp + s * nnz * g.bs, dp + db[bo] * K * N,
                                      op + bo * MN, g, 0, nplain, 0, nc)
                if nerr:
                    break
    free(bounds)
    if nerr == -1:
        raise MemoryError()
    return nerr


cdef int _scatter_private(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp, num_t* op,
                          const int64_t* sb, const int64_t* db, const _Geo* g, Py_ssize_t Bo, int nt) except -1:
    """Narrow outputs (SpMV): thread t adds the block columns of its share of the entries into a
    buffer of its own (thread 0 into the output), then the buffers are summed row-parallel.
    Each index is read once, at the price of (nt - 1) output-sized buffers."""
    cdef Py_ssize_t nc = g.nc, nnz = g.nnz, MN = g.M * g.N, KN = g.K * g.N, bo, s, t, task, e0, e1, width
    cdef Py_ssize_t nchunks = nt * _CHUNKS_PER_THREAD
    cdef Py_ssize_t* bounds = <Py_ssize_t*>malloc((nt + 1) * sizeof(Py_ssize_t))
    cdef num_t** bufs = <num_t**>calloc(nt, sizeof(num_t*))
    cdef int nerr = 0
    try:
        if bounds == NULL or bufs == NULL:
            raise MemoryError()
        for t in range(1, nt):
            bufs[t] = <num_t*>scratch_alloc(MN * sizeof(num_t))
            if bufs[t] == NULL:
                raise MemoryError()
        width = (MN + nchunks - 1) // nchunks
        with nogil:
            for bo in range(Bo):
                s = sb[bo]
                bufs[0] = op + bo * MN
                balanced_split(cp + s * (nc + 1), nnz, <const index_t*>NULL, 0, 1, nc, 1, g.bs * g.N, nt, bounds)
                for t in prange(nt, num_threads=nt, schedule="static"):
                    nerr += _scatter_range(cp + s * (nc + 1), pp + s * nnz, vp + s * nnz * g.bs, dp + db[bo] * KN,
                                           bufs[t], g, 0, g.nplain, bounds[t], bounds[t + 1])
                if nerr:
                    break
                for task in prange(nchunks, num_threads=nt, schedule="static"):
                    e0 = task * width
                    e1 = min(MN, e0 + width)
                    if e0 < e1:
                        _add_buffers(bufs[0], bufs + 1, nt - 1, e0, e1, g.logical)
    finally:
        if bufs != NULL:
            for t in range(1, nt):
                scratch_free(bufs[t])
        free(bufs)
        free(bounds)
    return nerr
