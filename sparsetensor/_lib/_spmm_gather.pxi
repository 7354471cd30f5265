# Included by _spmm.pyx: the gather kernel (compressed rows: csr/bsr). Holds the portable loops
# over block rows (_gather_rows) and the SpMV loop (_gather_vec), the AVX-512 paths of
# _spmm_simd.h (_gather_simd), the choice between them (_gather_task) and the row-parallel
# driver over all output batches (_gather). The including module cimports index_t, num_t, the
# libc types, prange, balanced_split and the st_gather_* declarations of _spmm_simd.h, and
# defines _Geo, the return codes, _CHUNKS_PER_THREAD, _GATHER_BLOCKS_PER_RANGE, _simd_enabled and the element operations
# (_mul, _scale, _axpy, _block, _bad_slot, _bad_plain).


# --------------------------------------------------------------------------
# gather: compressed rows

cdef int _gather_rows(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp,
                      num_t* op, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    """Block rows [i0, i1) of one batch; returns an error code on a broken index."""
    cdef Py_ssize_t i, k, N = g.N, rowlen = g.Rb * g.N, ldd = g.Cb * g.N
    cdef int64_t lo, hi, col
    cdef num_t* o
    cdef bint checked = g.checked
    for i in range(i0, i1):
        lo = cp[i]
        hi = cp[i + 1]
        if not checked and _bad_slot(lo, hi, g.nnz):
            return _BAD_COMPRESSED
        o = op + i * rowlen
        if g.bs == 1:
            if lo == hi:
                memset(o, 0, N * sizeof(num_t))
                continue
            col = pp[lo]
            if not checked and _bad_plain(col, g.nplain):
                return _PLAIN_TOO_LARGE
            _scale(o, vp[lo], dp + col * N, N, g.logical)
            for k in range(lo + 1, hi):
                col = pp[k]
                if not checked and _bad_plain(col, g.nplain):
                    return _PLAIN_TOO_LARGE
                _axpy(o, vp[k], dp + col * N, N, g.logical)
        else:
            memset(o, 0, rowlen * sizeof(num_t))
            for k in range(lo, hi):
                col = pp[k]
                if not checked and _bad_plain(col, g.nplain):
                    return _PLAIN_TOO_LARGE
                _block(o, N, vp + k * g.bs, g, dp + col * ldd, N, N)
    return _OK


cdef inline int _tile_rows(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp,
                           num_t* op, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1, Py_ssize_t Rb,
                           Py_ssize_t Cb, Py_ssize_t ars, Py_ssize_t acs, Py_ssize_t W) noexcept nogil:
    """Sparse x dense, (block) rows [i0, i1), not logical, Rb <= _TILE_MAX_RB, N >= W: a
    (block) row's Rb output rows, W columns at a time, in locals (registers) while its entries
    stream by, instead of a load and a store of the output rows per entry. Each output sums
    its terms from 0, entries in order and a block's columns in order, as _gather_rows does
    (which starts a 1 x 1 row from its first product: the same bits but for a -0.0 sum). The
    columns past the last whole tile are added with _axpy. The callers give the block shape
    and W as constants, so the C compiler unrolls the tile, and check the rows' indices first
    (_tile_guard): guards inside these loops keep the tile out of registers."""
    cdef Py_ssize_t i, k, j, jt, t, r, q, N = g.N, nfull = g.N - g.N % W, bs = Rb * Cb
    cdef int64_t lo, hi
    cdef num_t acc[_TILE_MAX_RB * _BTILE]  # Rb * W values (_TILE <= this)
    cdef num_t av
    cdef const num_t* a
    cdef const num_t* d
    cdef num_t* o
    cdef int64_t nnz = g.nnz
    cdef uint64_t nplain = g.nplain
    for i in range(i0, i1):
        # bounded again, read once: _tile_guard looked at these indices, and another thread may
        # have written them since (a caller's array)
        lo = clamp(cp[i], 0, nnz)
        hi = clamp(cp[i + 1], lo, nnz)
        o = op + i * Rb * N
        for jt in range(nfull // W):
            j = jt * W
            for t in range(Rb * W):
                acc[t] = 0
            for k in range(lo, hi):
                a = vp + k * bs
                d = dp + _plain_at(pp[k], nplain) * Cb * N + j
                for r in range(Rb):
                    for q in range(Cb):
                        av = a[r * ars + q * acs]
                        for t in range(W):
                            acc[r * W + t] = acc[r * W + t] + _mul(av, d[q * N + t])
            for r in range(Rb):
                for t in range(W):
                    o[r * N + j + t] = acc[r * W + t]
        if nfull < N:
            for r in range(Rb):
                memset(o + r * N + nfull, 0, (N - nfull) * sizeof(num_t))
            for k in range(lo, hi):
                a = vp + k * bs
                d = dp + _plain_at(pp[k], nplain) * Cb * N + nfull
                for r in range(Rb):
                    for q in range(Cb):
                        _axpy(o + r * N + nfull, a[r * ars + q * acs], d + q * N, N - nfull, False)
    return _OK


cdef int _tile_guard(const index_t* cp, const index_t* pp, const _Geo* g, Py_ssize_t i0,
                     Py_ssize_t i1) noexcept nogil:
    """The guards of (block) rows [i0, i1) for _tile_rows, in a pass of their own just before it
    (the range's indices are then in cache): every slot within [0, nnz] and not below its
    predecessor, every plain index below the plain size (branch-free within a row)."""
    cdef Py_ssize_t i, k
    cdef int64_t lo, hi
    cdef uint64_t nplain = g.nplain
    cdef int bad = 0
    for i in range(i0, i1):
        lo = cp[i]
        hi = cp[i + 1]
        if _bad_slot(lo, hi, g.nnz):
            return _BAD_COMPRESSED
        for k in range(lo, hi):
            bad = bad | (<uint64_t><int64_t>pp[k] >= nplain)
        if bad:
            return _PLAIN_TOO_LARGE
    return _OK


cdef int _gather_tiles(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp,
                       num_t* op, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    """_tile_rows for CSR, 16 columns a tile (a function of its own, so that the C compiler
    inlines the loop with its constants; with the block shapes' copies in one function the
    loops ran slower). The code generated here is fragile: a separate CSR loop beside the
    block one, locals of 16 values with 4-column block tiles, or guards inside the loop each
    kept the tile out of registers (docs: performance page). A/B any change in one process."""
    cdef int err = _OK if g.checked else _tile_guard(cp, pp, g, i0, i1)
    if err != _OK:
        return err
    return _tile_rows(cp, pp, vp, dp, op, g, i0, i1, 1, 1, 1, 1, _TILE)


cdef int _gather_btiles(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp,
                        num_t* op, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    """_tile_rows for blocks, 8 columns a tile: row-major 2x2, 3x3 and 4x4 blocks as constants."""
    cdef int err = _OK if g.checked else _tile_guard(cp, pp, g, i0, i1)
    if err != _OK:
        return err
    if g.ars == g.Cb and g.acs == 1:
        if g.Rb == 2 and g.Cb == 2:
            return _tile_rows(cp, pp, vp, dp, op, g, i0, i1, 2, 2, 2, 1, _BTILE)
        if g.Rb == 3 and g.Cb == 3:
            return _tile_rows(cp, pp, vp, dp, op, g, i0, i1, 3, 3, 3, 1, _BTILE)
        if g.Rb == 4 and g.Cb == 4:
            return _tile_rows(cp, pp, vp, dp, op, g, i0, i1, 4, 4, 4, 1, _BTILE)
    return _tile_rows(cp, pp, vp, dp, op, g, i0, i1, g.Rb, g.Cb, g.ars, g.acs, _BTILE)


cdef int _gather_vec(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* xp,
                     num_t* yp, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    """SpMV rows [i0, i1): y[i] = sum_k v[k] * x[plain[k]] (1 x 1 blocks, N == 1)."""
    cdef Py_ssize_t i, k
    cdef int64_t lo, hi, col
    cdef num_t acc
    cdef bint checked = g.checked
    cdef Py_ssize_t nnz = g.nnz, nplain = g.nplain  # locals: the loops' stores cannot change them
    for i in range(i0, i1):
        lo = cp[i]
        hi = cp[i + 1]
        if not checked and _bad_slot(lo, hi, nnz):
            return _BAD_COMPRESSED
        acc = 0
        if num_t is uint8_t:
            if g.logical:
                for k in range(lo, hi):
                    col = pp[k]
                    if not checked and _bad_plain(col, nplain):
                        return _PLAIN_TOO_LARGE
                    acc = acc | ((vp[k] != 0) & (xp[col] != 0))
                yp[i] = acc
                continue
        for k in range(lo, hi):
            col = pp[k]
            if not checked and _bad_plain(col, nplain):
                return _PLAIN_TOO_LARGE
            acc = acc + _mul(vp[k], xp[col])
        yp[i] = acc
    return _OK


cdef int _gather_vec_stream(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* xp,
                            num_t* yp, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    """_gather_vec (not logical) for a matrix that streams from memory: a row is read a cache
    line of values at a time, and each line prefetches the one ST_SPMV_PF entries on, values
    and indices (as _spmm_simd.h). (Not used below ST_SHORT_PF_MIN_BYTES: from the caches the
    step loop's bookkeeping costs more than the prefetches save.)"""
    cdef Py_ssize_t i, k, k0, k1, step = 64 // sizeof(num_t)
    cdef int64_t lo, hi, col
    cdef num_t acc
    cdef bint checked = g.checked
    cdef Py_ssize_t nnz = g.nnz, nplain = g.nplain  # locals: the loops' stores cannot change them
    for i in range(i0, i1):
        lo = cp[i]
        hi = cp[i + 1]
        if not checked and _bad_slot(lo, hi, nnz):
            return _BAD_COMPRESSED
        acc = 0
        k0 = lo
        while k0 < hi:
            k1 = min(k0 + step, hi)
            st_prefetch_past(vp + k0, ST_SPMV_PF * sizeof(num_t))
            st_prefetch_past(pp + k0, ST_SPMV_PF * sizeof(index_t))
            for k in range(k0, k1):
                col = pp[k]
                if not checked and _bad_plain(col, nplain):
                    return _PLAIN_TOO_LARGE
                acc = acc + _mul(vp[k], xp[col])
            k0 = k1
        yp[i] = acc
    return _OK


cdef inline int _bvec_rows(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* xp,
                           num_t* yp, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1, Py_ssize_t Rb,
                           Py_ssize_t Cb, Py_ssize_t ars, Py_ssize_t acs, bint pf) noexcept nogil:
    """_gather_bvec with the block's shape, its strides and whether to prefetch as arguments,
    which the callers give as constants for the common shapes (the C compiler then unrolls the
    block, and a loop that does not prefetch has no trace of it: a test of the flag in every
    block was measurable)."""
    cdef Py_ssize_t i, k, r, q, off, bs = Rb * Cb
    cdef int64_t lo, hi, col
    cdef num_t acc[_BVEC_MAX_RB]
    cdef const num_t* a
    cdef const num_t* xq
    cdef bint checked = g.checked
    for i in range(i0, i1):
        lo = cp[i]
        hi = cp[i + 1]
        if not checked and _bad_slot(lo, hi, g.nnz):
            return _BAD_COMPRESSED
        for r in range(Rb):
            acc[r] = 0
        for k in range(lo, hi):
            col = pp[k]
            if not checked and _bad_plain(col, g.nplain):
                return _PLAIN_TOO_LARGE
            a = vp + k * bs
            xq = xp + col * Cb
            if pf:  # the lines of the block ST_BSR_PF on, and its index
                for off in range(0, bs * <Py_ssize_t>sizeof(num_t), 64):
                    st_prefetch_past(a, ST_BSR_PF + off)
                st_prefetch_past(pp + k, ST_BSR_PF // 8)
            for r in range(Rb):
                for q in range(Cb):
                    acc[r] = acc[r] + _mul(a[r * ars + q * acs], xq[q])
        for r in range(Rb):
            yp[i * Rb + r] = acc[r]
    return _OK


cdef inline int _bvec_shapes(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* xp,
                             num_t* yp, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1, bint pf) noexcept nogil:
    cdef Py_ssize_t Rb = g.Rb, Cb = g.Cb
    if g.ars == Cb and g.acs == 1:  # row-major blocks of the common square shapes
        if Rb == 2 and Cb == 2:
            return _bvec_rows(cp, pp, vp, xp, yp, g, i0, i1, 2, 2, 2, 1, pf)
        if Rb == 3 and Cb == 3:
            return _bvec_rows(cp, pp, vp, xp, yp, g, i0, i1, 3, 3, 3, 1, pf)
        if Rb == 4 and Cb == 4:
            return _bvec_rows(cp, pp, vp, xp, yp, g, i0, i1, 4, 4, 4, 1, pf)
    return _bvec_rows(cp, pp, vp, xp, yp, g, i0, i1, Rb, Cb, g.ars, g.acs, pf)


cdef int _gather_bvec(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* xp,
                      num_t* yp, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    """Blocks x vector, block rows [i0, i1) (N == 1, Rb <= _BVEC_MAX_RB, not logical): each
    output row of a block row sums in a local, term by term in the order of _gather_rows.
    Blocks that stream from memory prefetch the block ST_BSR_PF on."""
    if g.nnz * <int64_t>(g.bs * sizeof(num_t) + sizeof(index_t)) >= ST_BSR_PF_MIN_BYTES:
        return _bvec_shapes(cp, pp, vp, xp, yp, g, i0, i1, True)
    return _bvec_shapes(cp, pp, vp, xp, yp, g, i0, i1, False)


cdef int _gather_task(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp,
                      num_t* op, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    if ST_SPMM_SIMD and (num_t is float or num_t is double) and _simd_enabled:
        return _gather_simd(cp, pp, vp, dp, op, g, i0, i1)
    if num_t is double and ST_SPMV_AVX2 and g.avx2_spmv:
        if index_t is int32_t:
            return st_spmv2_f64_i32(cp, pp, vp, dp, op, i0, i1, g.nnz, g.nplain, g.checked)
        else:
            return st_spmv2_f64_i64(cp, pp, vp, dp, op, i0, i1, g.nnz, g.nplain, g.checked)
    if num_t is double and ST_SPMV_AVX2 and g.avx2_bvec:
        if index_t is int32_t:
            return st_bvec2_f64_i32(cp, pp, vp, dp, op, i0, i1, g.nnz, g.nplain, <int>g.Rb, g.checked)
        else:
            return st_bvec2_f64_i64(cp, pp, vp, dp, op, i0, i1, g.nnz, g.nplain, <int>g.Rb, g.checked)
    if g.bs == 1 and g.N == 1:
        if not g.logical and g.nnz * <int64_t>(sizeof(num_t) + sizeof(index_t)) >= ST_SHORT_PF_MIN_BYTES:
            return _gather_vec_stream(cp, pp, vp, dp, op, g, i0, i1)
        return _gather_vec(cp, pp, vp, dp, op, g, i0, i1)
    if g.N == 1 and g.Rb <= _BVEC_MAX_RB and not g.logical:
        return _gather_bvec(cp, pp, vp, dp, op, g, i0, i1)
    if g.bs == 1 and g.N >= _TILE and not g.logical:
        return _gather_tiles(cp, pp, vp, dp, op, g, i0, i1)
    if g.bs > 1 and g.N >= _BTILE and g.Rb <= _TILE_MAX_RB and not g.logical:
        return _gather_btiles(cp, pp, vp, dp, op, g, i0, i1)
    return _gather_rows(cp, pp, vp, dp, op, g, i0, i1)


cdef int _gather_simd(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp,
                      num_t* op, const _Geo* g, Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    """The AVX-512 paths of _spmm_simd.h (float32/float64 only)."""
    cdef int64_t nnz = g.nnz, npl = g.nplain
    cdef int chk = g.checked
    if num_t is float and index_t is int32_t:
        return st_gather_f32_i32(cp, pp, vp, dp, op, g.N, g.Rb, g.Cb, g.ars, g.acs, i0, i1, nnz, npl, chk)
    elif num_t is float:
        return st_gather_f32_i64(cp, pp, vp, dp, op, g.N, g.Rb, g.Cb, g.ars, g.acs, i0, i1, nnz, npl, chk)
    elif num_t is double and index_t is int32_t:
        return st_gather_f64_i32(cp, pp, vp, dp, op, g.N, g.Rb, g.Cb, g.ars, g.acs, i0, i1, nnz, npl, chk)
    elif num_t is double:
        return st_gather_f64_i64(cp, pp, vp, dp, op, g.N, g.Rb, g.Cb, g.ars, g.acs, i0, i1, nnz, npl, chk)
    else:
        return -1


cdef int _gather_one(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp, num_t* op,
                     const _Geo* g, int nt) except -1:
    """One product on nt threads. Each thread owns a row range of about equal work (the same
    rows every call, so a repeated product finds its part of A in that core's cache) and works it from the front in blocks
    of rows; a thread done with its own range takes blocks from the back of the others'. An
    OpenMP worker woken from sleep (OMP_WAIT_POLICY=passive, or past GOMP_SPINCOUNT) can start
    tens of microseconds late on a VM, longer than a whole product at 10^5 nnz: the caller's thread then
    does the late thread's rows instead of waiting for it at the barrier."""
    cdef Py_ssize_t nc = g.nc, G, nb, t, lo, hi, r0, v
    cdef Py_ssize_t* bounds = <Py_ssize_t*>malloc((nt + 1) * sizeof(Py_ssize_t))
    cdef unsigned long long* words = <unsigned long long*>malloc(nt * _LINE_WORDS * sizeof(unsigned long long))
    cdef int* errs = <int*>calloc(nt, sizeof(int))
    cdef long long k
    cdef int me, nerr = 0
    if bounds == NULL or words == NULL or errs == NULL:
        free(bounds)
        free(words)
        free(errs)
        raise MemoryError()
    with nogil:
        balanced_split(cp, g.nnz, <const index_t*>NULL, 0, 1, nc, 1, g.Cb, nt, bounds)
        nb = min(_GATHER_BLOCKS_PER_RANGE, g.nnz * <int64_t>g.bs // nt // _GATHER_BLOCK_ITEMS)
        G = (nc // nt + nb - 1) // nb if nb > 1 else nc
        G = max(8, (G + 7) // 8 * 8)
        for t in range(nt):
            words[t * _LINE_WORDS] = st_blocks(<unsigned int>((bounds[t + 1] - bounds[t] + G - 1) // G))
        with parallel(num_threads=nt):
            me = threadid()
            for v in range(nt):  # its own range first (v = 0), then the others' from the back
                t = (me + v) % nt
                lo = bounds[t]
                hi = bounds[t + 1]
                while True:
                    k = st_take(&words[t * _LINE_WORDS], v != 0)
                    if k < 0:
                        break
                    r0 = lo + k * G
                    errs[me] += _gather_task(cp, pp, vp, dp, op, g, r0, min(r0 + G, hi))
    for t in range(nt):
        nerr += errs[t]
    free(bounds)
    free(words)
    free(errs)
    return nerr


cdef int _gather(const index_t* cp, const index_t* pp, const num_t* vp, const num_t* dp, num_t* op,
                 const int64_t* sb, const int64_t* db, const _Geo* g, Py_ssize_t Bs, Py_ssize_t Bo,
                 int nt) except -1:
    """Every output batch by compressed rows, split into row ranges of about equal nnz."""
    cdef Py_ssize_t nc = g.nc, nnz = g.nnz, Cb = g.Cb, M = g.M, K = g.K, N = g.N
    cdef Py_ssize_t P = 1, ntasks, task, bo, s, t
    cdef Py_ssize_t* bounds
    cdef int nerr = 0
    if nt > 1 and Bo == 1:  # one product
        s = sb[0]
        return _gather_one(cp + s * (nc + 1), pp + s * nnz, vp + s * nnz * g.bs, dp + db[0] * K * N, op, g, nt)
    if nt > 1 and Bo < nt * _CHUNKS_PER_THREAD:  # batches: ranges of rows that share them out evenly
        P = min(nc, (nt * _CHUNKS_PER_THREAD + Bo - 1) // Bo)
    ntasks = Bo * P
    bounds = <Py_ssize_t*>malloc(Bs * (P + 1) * sizeof(Py_ssize_t))
    if bounds == NULL:
        raise MemoryError()
    with nogil:
        for s in range(Bs):
            balanced_split(cp + s * (nc + 1), nnz, <const index_t*>NULL, 0, 1, nc, 1, Cb, P, bounds + s * (P + 1))
        if nt > 1:
            # static: each thread gets the same contiguous row ranges on every call, so a
            # repeated product (an iterative solver) finds its part of A in that core's cache
            for task in prange(ntasks, num_threads=nt, schedule="static"):
                bo = task // P
                t = task % P
                s = sb[bo]
                nerr += _gather_task(cp + s * (nc + 1), pp + s * nnz, vp + s * nnz * g.bs, dp + db[bo] * K * N,
                                     op + bo * M * N, g, bounds[s * (P + 1) + t], bounds[s * (P + 1) + t + 1])
        else:
            for bo in range(Bo):
                s = sb[bo]
                nerr = _gather_task(cp + s * (nc + 1), pp + s * nnz, vp + s * nnz * g.bs, dp + db[bo] * K * N,
                                    op + bo * M * N, g, 0, nc)
                if nerr:
                    break
    free(bounds)
    return nerr
