# Included by _reduce.pyx: the sums over one sparse dim of compressed storage (the row and
# column sums of csr), compressed_sum and plain_sum, with their C helper _reduce_simd.h.

cdef extern from "_reduce_simd.h" nogil:
    double st_sum_f64(const double* x, int64_t lo, int64_t hi, int64_t n, int wide)
    float st_sum_f32(const float* x, int64_t lo, int64_t hi, int64_t n, int wide)
    int64_t st_sum_i64(const int64_t* x, int64_t lo, int64_t hi, int64_t n, int wide)

# The compressed index c is (B, G + 1) (G slots: rows of csr, columns of csc), the plain
# index p (B, nnz), the values x (B, nnz, A, K, E): an entry holds A * K * E values, of
# which the K items are summed and the L = A * E lanes kept (a block row of bsr is
# A = Rb lanes of K = Cb items, a dense dim E lanes). The wrappers check every shape, and
# that c[b, 0] == 0 and c[b, G] == nnz; each slot is checked (0 <= c[b, g] <= c[b, g + 1]
# <= nnz) as the loops reach it, and no value is read through a slot that is not.

cdef enum:
    BAD_COMPRESSED = 1
    BAD_PLAIN = 2
    # keys sampled per thread to split the plain range of a column sum
    SAMPLES_PER_THREAD = 256


cdef inline value_t _run_sum(const value_t* x, Py_ssize_t m) noexcept nogil:
    """x[0] + ... + x[m - 1]: floats and complex in four interleaved partial sums (independent
    adds the CPU overlaps; no less accurate than one running sum), integers in one (any order
    gives the same sum, and the compiler vectorises it; GCC 12 miscompiles the four-sum
    loop for int8/int16 at -O3, tests/kernels/test_kernel_reduce.py)."""
    cdef value_t s0 = 0, s1 = 0, s2 = 0, s3 = 0
    cdef Py_ssize_t i = 0
    if value_t is int8_t or value_t is int16_t or value_t is int32_t or value_t is int64_t or value_t is uint8_t:
        for i in range(m):
            s0 = s0 + x[i]
    else:
        while i + 4 <= m:
            s0 = s0 + x[i]
            s1 = s1 + x[i + 1]
            s2 = s2 + x[i + 2]
            s3 = s3 + x[i + 3]
            i = i + 4
        while i < m:
            s0 = s0 + x[i]
            i = i + 1
    return (s0 + s1) + (s2 + s3)


cdef inline void _lanes_add(const value_t* x, Py_ssize_t count, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E,
                            value_t* acc) noexcept nogil:
    """acc[a * E + e] += x[j, a, k, e] over the count entries j and the K items k."""
    cdef Py_ssize_t j, a, k, e, KE = K * E
    cdef const value_t* row
    cdef value_t* o
    if E == 1:
        if A == 1:
            acc[0] = acc[0] + _run_sum(x, count * K)
            return
        for j in range(count):
            for a in range(A):
                acc[a] = acc[a] + _run_sum(x + (j * A + a) * K, K)
        return
    for j in range(count):
        for a in range(A):
            row = x + (j * A + a) * KE
            o = acc + a * E
            for k in range(K):
                for e in range(E):
                    o[e] = o[e] + row[k * E + e]


cdef inline void _zero(value_t* o, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(m):
        o[i] = 0


cdef inline bint _bad_slot(int64_t lo, int64_t hi, int64_t nnz) noexcept nogil:
    return lo < 0 or hi < lo or hi > nnz


cdef inline int64_t _clamp(int64_t v, int64_t nnz) noexcept nogil:
    return 0 if v < 0 else (nnz if v > nnz else v)


cdef Py_ssize_t _bad_ends(const index_t* c, Py_ssize_t B, Py_ssize_t G, int64_t nnz) noexcept nogil:
    """The first batch whose compressed indices do not start at 0 and end at nnz, or -1."""
    cdef Py_ssize_t b
    for b in range(B):
        if c[b * (G + 1)] != 0 or c[b * (G + 1) + G] != nnz:
            return b
    return -1


cdef enum:
    # the value dtypes of the sums (_sum_code)
    V_I8, V_I16, V_I32, V_I64, V_U8, V_F32, V_F64, V_C64, V_C128


cdef int _sum_code(cnp.ndarray a) noexcept:
    """The V_* code of a's dtype (native byte order), or -1."""
    cdef int t = cnp.PyArray_TYPE(a)
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(a)
    if not cnp.PyArray_ISNOTSWAPPED(a):
        return -1
    if t == cnp.NPY_BYTE:
        return V_I8
    if t == cnp.NPY_SHORT:
        return V_I16
    if t == cnp.NPY_INT or t == cnp.NPY_LONG or t == cnp.NPY_LONGLONG:
        return V_I32 if size == 4 else (V_I64 if size == 8 else -1)
    if t == cnp.NPY_UBYTE:
        return V_U8
    if t == cnp.NPY_FLOAT:
        return V_F32
    if t == cnp.NPY_DOUBLE:
        return V_F64
    if t == cnp.NPY_CFLOAT:
        return V_C64
    if t == cnp.NPY_CDOUBLE:
        return V_C128
    return -1


cdef int _check_ends(cnp.ndarray c, int icode, Py_ssize_t B, Py_ssize_t G, Py_ssize_t nnz) except -1:
    """c[b, 0] == 0 and c[b, G] == nnz for every batch (the slots are checked as they are read)."""
    cdef Py_ssize_t b = (_bad_ends(<const int32_t*>cnp.PyArray_DATA(c), B, G, nnz) if icode == 0 else
                         _bad_ends(<const int64_t*>cnp.PyArray_DATA(c), B, G, nnz))
    if b >= 0:
        raise ValueError(f"compressed indices of batch {b} must start at 0 and end at nnz = {nnz}, "
                         f"got {c[b, 0]} and {c[b, G]}")
    return 0


def _raise_found(int kind, int64_t where, Py_ssize_t G, Py_ssize_t nnz):
    if kind == BAD_COMPRESSED:
        raise ValueError(f"compressed indices must be non-decreasing within [0, {nnz}]: batch {where // G}, "
                         f"slot {where % G}")
    raise ValueError(f"plain index out of range: batch {where // nnz}, entry {where % nnz}")


# -- row sums (the plain dim reduced): a sum per slot, threads on merge-path ranges ------------------

cdef inline int64_t _slot_end(const index_t* c, Py_ssize_t G, int64_t nnz, Py_ssize_t u) noexcept nogil:
    """Where flattened slot u (batch u // G, slot u % G) ends in the flattened entries (clamped)."""
    cdef Py_ssize_t b = u // G
    return b * nnz + _clamp(c[b * (G + 1) + u - b * G + 1], nnz)


cdef void _merge_path(const index_t* c, Py_ssize_t G, int64_t nnz, Py_ssize_t U, int64_t N, int64_t d,
                      Py_ssize_t* slot, int64_t* entry) noexcept nogil:
    """The point of the merge path (U slot ends against N entries) on diagonal d: the slots
    before it end at or before `entry`, and slot + entry == d (Merrill and Garland, 2016)."""
    cdef int64_t lo = d - N if d > N else 0, hi = d if d < U else U, mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if _slot_end(c, G, nnz, mid) <= d - 1 - mid:
            lo = mid + 1
        else:
            hi = mid
    slot[0] = lo
    entry[0] = d - lo


cdef int64_t _slot_sums(const index_t* c, const value_t* x, value_t* out, Py_ssize_t G, int64_t nnz,
                        Py_ssize_t A, Py_ssize_t K, Py_ssize_t E, Py_ssize_t u0, Py_ssize_t u1, int64_t j0,
                        int64_t j1, Py_ssize_t U, value_t* tail) noexcept nogil:
    """out rows of the flattened slots [u0, u1), counting their entries from j0 on (those
    before are an earlier range's tail); then, when tail is not NULL and u1 < U, slot u1's
    entries before j1 summed into tail. Returns the first broken slot, or -1."""
    cdef Py_ssize_t W = A * K * E, L = A * E, u, b, r
    cdef int64_t lo, hi, n = (U // G) * nnz
    cdef const index_t* cb
    cdef value_t* o
    cdef int wide = n > 8 * U  # two vectors a trip, unless the slots are short (_reduce_simd.h)
    b = u0 // G
    r = u0 - b * G
    cb = c + b * (G + 1) + r
    for u in range(u0, u1):
        if r == G:  # the next batch
            b = b + 1
            r = 0
            cb = cb + 1
        lo = cb[0]
        hi = cb[1]
        cb = cb + 1
        r = r + 1
        if _bad_slot(lo, hi, nnz):
            return u
        lo = lo + b * nnz
        hi = hi + b * nnz
        if lo < j0:
            lo = j0 if j0 < hi else hi
        o = out + u * L
        if W == 1:
            if value_t is double:
                o[0] = st_sum_f64(x, lo, hi, n, wide)
            elif value_t is float:
                o[0] = st_sum_f32(x, lo, hi, n, wide)
            elif value_t is int64_t:
                o[0] = st_sum_i64(x, lo, hi, n, wide)
            else:
                o[0] = _run_sum(x + lo, hi - lo)
        elif L == 1:
            o[0] = _run_sum(x + lo * W, (hi - lo) * K)
        else:
            _zero(o, L)
            _lanes_add(x + lo * W, hi - lo, A, K, E, o)
    if tail != NULL:
        _zero(tail, L)
        if u1 < U:
            b = u1 // G
            cb = c + b * (G + 1) + (u1 - b * G)
            lo = b * nnz + _clamp(cb[0], nnz)
            hi = b * nnz + _clamp(cb[1], nnz)
            if lo < j0:
                lo = j0
            if hi > j1:
                hi = j1
            if hi > lo:
                _lanes_add(x + lo * W, hi - lo, A, K, E, tail)
    return -1


cdef int64_t _compressed_core(const index_t* cp, const value_t* xp, value_t* op_, Py_ssize_t B, Py_ssize_t G,
                             Py_ssize_t nnz, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E, int nt) noexcept nogil:
    """compressed_sum on checked shapes (B * G > 0, A * E > 0); returns the first broken slot,
    -1, or -2 when out of memory."""
    cdef Py_ssize_t L = A * E, U = B * G, part, s
    cdef int64_t N = <int64_t>B * nnz, found = -1
    cdef Py_ssize_t* slots
    cdef int64_t* entries
    cdef int64_t* bad
    cdef value_t* tails
    if nt == 1:
        return _slot_sums(cp, xp, op_, G, nnz, A, K, E, 0, U, 0, N, U, <value_t*>NULL)
    slots = <Py_ssize_t*>malloc((nt + 1) * sizeof(Py_ssize_t))
    entries = <int64_t*>malloc((nt + 1) * sizeof(int64_t))
    bad = <int64_t*>malloc(nt * sizeof(int64_t))
    tails = <value_t*>malloc(nt * L * sizeof(value_t))
    if slots == NULL or entries == NULL or bad == NULL or tails == NULL:
        found = -2
    else:
        for part in range(nt + 1):
            _merge_path(cp, G, nnz, U, N, (<int64_t>U + N) * part // nt, &slots[part], &entries[part])
            if part:  # broken indices may bend the path: keep the ranges in order
                slots[part] = max(slots[part], slots[part - 1])
                entries[part] = max(entries[part], entries[part - 1])
        slots[nt] = U
        entries[nt] = N
        for part in prange(nt, schedule="static", num_threads=nt):
            bad[part] = _slot_sums(cp, xp, op_, G, nnz, A, K, E, slots[part], slots[part + 1], entries[part],
                                   entries[part + 1], U, tails + part * L)
        for part in range(nt):
            found = bad[part] if found < 0 else found
        if found < 0:  # a range's tail belongs to the slot the next range starts in
            for part in range(nt - 1):
                if slots[part + 1] < U:
                    for s in range(L):
                        op_[slots[part + 1] * L + s] = op_[slots[part + 1] * L + s] + tails[part * L + s]
    free(slots)
    free(entries)
    free(bad)
    free(tails)
    return found


# -- column sums (the compressed dim reduced): a scatter by plain index ------------------------------

cdef inline void _add_entry(const value_t* xe, value_t* o, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E) noexcept nogil:
    """o[a * E + e] += x[a, k, e] summed over k, for one entry's values xe."""
    if A == 1 and E == 1:
        o[0] = o[0] + (xe[0] if K == 1 else _run_sum(xe, K))
    else:
        _lanes_add(xe, 1, A, K, E, o)


cdef Py_ssize_t _first_descent(const index_t* c, Py_ssize_t B, Py_ssize_t G) noexcept nogil:
    """The first flattened slot where c[b, g + 1] < c[b, g], or -1 (one branch-free pass first)."""
    cdef Py_ssize_t b, g
    cdef bint bad = False
    for b in range(B):
        for g in range(G):
            bad = bad | (c[b * (G + 1) + g + 1] < c[b * (G + 1) + g])
    if bad:
        for b in range(B):
            for g in range(G):
                if c[b * (G + 1) + g + 1] < c[b * (G + 1) + g]:
                    return b * G + g
    return -1


cdef int64_t _scatter_serial(const index_t* c, const index_t* p, const value_t* x, value_t* out, Py_ssize_t B,
                             Py_ssize_t G, int64_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E,
                             int* kind) noexcept nogil:
    """out (zeroed here) += every entry at its plain index; returns -1, or the flattened slot
    (kind BAD_COMPRESSED) or entry (BAD_PLAIN) where an index is broken. The slots only need
    to be in order (their ends are checked by the wrapper): then every entry is in exactly
    one slot, and the entries are added in one flat pass."""
    cdef Py_ssize_t W = A * K * E, L = A * E, b
    cdef int64_t j, q, found = _first_descent(c, B, G)
    cdef const index_t* pb
    cdef const value_t* xb
    cdef value_t* ob
    if found >= 0:
        kind[0] = BAD_COMPRESSED
        return found
    _zero(out, B * P * L)
    for b in range(B):
        pb = p + b * nnz
        xb = x + b * nnz * W
        ob = out + b * P * L
        if W == 1:
            for j in range(nnz):
                q = pb[j]
                if <uint64_t>q >= <uint64_t>P:
                    kind[0] = BAD_PLAIN
                    return b * nnz + j
                ob[q] = ob[q] + xb[j]
        else:
            for j in range(nnz):
                q = pb[j]
                if <uint64_t>q >= <uint64_t>P:
                    kind[0] = BAD_PLAIN
                    return b * nnz + j
                _add_entry(xb + j * W, ob + q * L, A, K, E)
    return -1


cdef int64_t _scatter_range(const index_t* c, const index_t* p, const value_t* x, value_t* out, Py_ssize_t B,
                            Py_ssize_t G, int64_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E,
                            int64_t qlo, int64_t qhi, int where, int64_t* done) noexcept nogil:
    """The entries with plain index in [qlo, qhi) into out[:, qlo:qhi] (zeroed here), found in
    each slot as a run of its sorted plain indices: from the slot's start (where < 0: the
    first range), from its end backwards (where > 0: the last range), or by a binary search.
    done[0] counts the entries added: if the plain indices of a slot are not sorted, some
    are missed, which the caller sees in the total. Returns the first broken slot, or -1."""
    cdef Py_ssize_t W = A * K * E, L = A * E, b, r
    cdef int64_t j, lo, hi, s, m, q, count = 0
    cdef const index_t* pb
    cdef const value_t* xb
    cdef value_t* ob
    for b in range(B):
        _zero(out + (b * P + qlo) * L, (qhi - qlo) * L)
    for b in range(B):
        pb = p + b * nnz
        xb = x + b * nnz * W
        ob = out + b * P * L
        for r in range(G):
            lo = c[b * (G + 1) + r]
            hi = c[b * (G + 1) + r + 1]
            if _bad_slot(lo, hi, nnz):
                done[0] = count
                return b * G + r
            if where > 0:  # the last range: from the end, back to the first index below qlo
                j = hi
                while j > lo and pb[j - 1] >= qlo and pb[j - 1] < qhi:
                    j = j - 1
                s, hi = j, hi
            else:
                if where < 0:
                    s = lo
                else:  # the first index >= qlo (binary search)
                    s, m = lo, hi
                    while s < m:
                        j = s + (m - s) // 2
                        if pb[j] < qlo:
                            s = j + 1
                        else:
                            m = j
                j = s
                while j < hi and pb[j] >= qlo and pb[j] < qhi:
                    j = j + 1
                hi = j
            count = count + (hi - s)
            if W == 1:
                for j in range(s, hi):
                    q = pb[j]
                    ob[q] = ob[q] + xb[j]
            else:
                for j in range(s, hi):
                    _add_entry(xb + j * W, ob + pb[j] * L, A, K, E)
    done[0] = count
    return -1


cdef int _cmp_int64(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0], y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


cdef int _plain_splits(const index_t* p, int64_t N, Py_ssize_t P, int nparts, int64_t* bounds) noexcept nogil:
    """bounds[0 .. nparts]: the plain range [0, P) split at quantiles of a sample of the plain
    indices (entries of about equal count per range); -1 when out of memory."""
    cdef int64_t S = min(N, <int64_t>SAMPLES_PER_THREAD * nparts), s, q
    cdef int64_t* sample = <int64_t*>malloc(max(S, 1) * sizeof(int64_t))
    cdef int t
    if sample == NULL:
        return -1
    for s in range(S):
        q = p[(N - 1) * s // max(S - 1, 1)] if S > 1 else p[0]
        sample[s] = q if 0 <= q < P else (0 if q < 0 else P - 1)
    qsort(sample, S, sizeof(int64_t), _cmp_int64)
    bounds[0] = 0
    for t in range(1, nparts):
        bounds[t] = max(sample[S * t // nparts], bounds[t - 1])
    bounds[nparts] = P
    free(sample)
    return 0


cdef int64_t _plain_core(const index_t* cp, const index_t* pp, const value_t* xp, value_t* op_, Py_ssize_t B,
                        Py_ssize_t G, Py_ssize_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E, int nt,
                        int* kind) noexcept nogil:
    """plain_sum on checked shapes (B * G > 0); returns -1, the flattened slot (kind
    BAD_COMPRESSED) or entry (BAD_PLAIN) of the first broken index, or -2 when out of memory."""
    cdef int64_t N = <int64_t>B * nnz, found = -1, total = 0
    cdef int part
    cdef int64_t* bounds
    cdef int64_t* bad
    cdef int64_t* done
    kind[0] = BAD_COMPRESSED
    # a range per thread pays when the slots are not many more than the entries per thread:
    # every thread walks every slot
    if nt > 1 and P > 1 and A * E and <int64_t>B * G * 2 <= N:
        bounds = <int64_t*>malloc((nt + 1) * sizeof(int64_t))
        bad = <int64_t*>malloc(nt * sizeof(int64_t))
        done = <int64_t*>malloc(nt * sizeof(int64_t))
        if bounds == NULL or bad == NULL or done == NULL or _plain_splits(pp, N, P, nt, bounds) != 0:
            total = -1
        else:
            for part in prange(nt, schedule="static", num_threads=nt):
                bad[part] = _scatter_range(cp, pp, xp, op_, B, G, nnz, P, A, K, E, bounds[part], bounds[part + 1],
                                           -1 if part == 0 else (1 if part == nt - 1 else 0), &done[part])
            for part in range(nt):
                found = bad[part] if found < 0 else found
                total = total + done[part]
        free(bounds)
        free(bad)
        free(done)
        if found >= 0 or total == N:
            return found
    # one thread: also where a slot's plain indices are unsorted or out of range
    return _scatter_serial(cp, pp, xp, op_, B, G, nnz, P, A, K, E, kind)


# -- the two defs: checks, then one typed dispatch ---------------------------------------------------

cdef inline int64_t _sum_core(bint by_plain, const index_t* c, const index_t* p, const value_t* x, value_t* out,
                              Py_ssize_t B, Py_ssize_t G, Py_ssize_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K,
                              Py_ssize_t E, int nt, int* kind) noexcept nogil:
    if by_plain:
        return _plain_core(c, p, x, out, B, G, nnz, P, A, K, E, nt, kind)
    kind[0] = BAD_COMPRESSED
    return _compressed_core(c, x, out, B, G, nnz, A, K, E, nt)


cdef int64_t _sum_typed(bint by_plain, const index_t* c, const index_t* p, int vcode, const void* x, void* out,
                        Py_ssize_t B, Py_ssize_t G, Py_ssize_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K,
                        Py_ssize_t E, int nt, int* kind) noexcept nogil:
    if vcode == V_I8:
        return _sum_core(by_plain, c, p, <const int8_t*>x, <int8_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_I16:
        return _sum_core(by_plain, c, p, <const int16_t*>x, <int16_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_I32:
        return _sum_core(by_plain, c, p, <const int32_t*>x, <int32_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_I64:
        return _sum_core(by_plain, c, p, <const int64_t*>x, <int64_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_U8:
        return _sum_core(by_plain, c, p, <const uint8_t*>x, <uint8_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_F32:
        return _sum_core(by_plain, c, p, <const float*>x, <float*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_F64:
        return _sum_core(by_plain, c, p, <const double*>x, <double*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_C64:
        return _sum_core(by_plain, c, p, <const cfloat_t*>x, <cfloat_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    return _sum_core(by_plain, c, p, <const cdouble_t*>x, <cdouble_t*>out, B, G, nnz, P, A, K, E, nt, kind)


cdef _sum(compressed, plain, x, out, int nthreads):
    """The checks of compressed_sum (plain None) and plain_sum, then the kernel."""
    cdef bint by_plain = plain is not None
    cdef cnp.ndarray c = _array(compressed, "compressed", 2), xa = _array(x, "x", 5), o = _array(out, "out", 4)
    cdef cnp.ndarray pa = _array(plain, "plain", 2) if by_plain else c
    cdef int icode = _index_code(c), vcode = _sum_code(xa), kind = BAD_COMPRESSED
    cdef Py_ssize_t B = _dim(c, 0), G = _dim(c, 1) - 1, nnz = _dim(xa, 1), P = _dim(o, 1)
    cdef Py_ssize_t A = _dim(xa, 2), K = _dim(xa, 3), E = _dim(xa, 4)
    cdef int64_t found = -1
    if icode < 0 or _index_code(pa) != icode:
        raise TypeError(f"compressed (and plain) must be int32 or int64, of one dtype, got {compressed.dtype}"
                        + (f" and {plain.dtype}" if by_plain else ""))
    if vcode < 0 or cnp.PyArray_TYPE(o) != cnp.PyArray_TYPE(xa) or not cnp.PyArray_ISWRITEABLE(o):
        raise TypeError(f"x and out must have one sum dtype (int8..int64, uint8, float32/64, complex64/128) and out "
                        f"be writeable, got {x.dtype} and {out.dtype}")
    if G < 0:
        raise ValueError("compressed indices must have at least one entry per batch")
    if (_dim(xa, 0) != B or _dim(o, 0) != B or _dim(o, 2) != A or _dim(o, 3) != E
            or (by_plain and (_dim(pa, 0) != B or _dim(pa, 1) != nnz)) or (not by_plain and P != G)):
        raise ValueError(f"compressed {compressed.shape}, " + (f"plain {plain.shape}, " if by_plain else "")
                         + f"x {x.shape} and out {out.shape} disagree: want " + ("plain (B, nnz), " if by_plain else "")
                         + f"x (B, nnz, A, K, E) and out (B, {'P' if by_plain else 'G'}, A, E)")
    _check_ends(c, icode, B, G, nnz)
    if B * G == 0 or (not by_plain and A * E == 0):
        if by_plain:
            out[...] = 0
        return
    cdef const void* cp = cnp.PyArray_DATA(c)
    cdef const void* pp = cnp.PyArray_DATA(pa)
    cdef const void* xp = cnp.PyArray_DATA(xa)
    cdef void* op_ = cnp.PyArray_DATA(o)
    cdef int nt = split_threads(_threads(nthreads), <int64_t>B * nnz * A * K * E)
    with nogil:
        if icode == 0:
            found = _sum_typed(by_plain, <const int32_t*>cp, <const int32_t*>pp, vcode, xp, op_, B, G, nnz, P, A, K,
                               E, nt, &kind)
        else:
            found = _sum_typed(by_plain, <const int64_t*>cp, <const int64_t*>pp, vcode, xp, op_, B, G, nnz, P, A, K,
                               E, nt, &kind)
    if found == -2:
        raise MemoryError()
    if found >= 0:
        _raise_found(kind, found, G, nnz)


def compressed_sum(compressed, x, out, int nthreads):
    """out[b, g, a, e] = sum of x[b, j, a, k, e] over the entries j of slot g (c[b, g] <= j <
    c[b, g + 1]) and the K items k: the row sums of csr (column sums of csc).

    Threads split the slots and entries together (merge-path ranges: one long slot is
    shared by several threads, whose partial sums are added at the end), so a hub row
    holds up no thread. Floating sums are sets of partial sums added pairwise.
    """
    _sum(compressed, None, x, out, nthreads)


def plain_sum(compressed, plain, x, out, int nthreads):
    """out[b, q, a, e] = sum of x[b, j, a, k, e] over the entries j with plain[b, j] == q and the
    K items k: the column sums of csr (row sums of csc). Plain indices out of [0, P) raise
    ValueError naming the entry.

    Threads own ranges of the plain dim (split at quantiles of a sample of the plain
    indices) and take, in every slot, the run of its sorted plain indices that falls in
    their range: no per-thread copies of the output, no atomics, and each sum is added in
    the order one thread would add it. Slots whose plain indices are not sorted show up in
    the count of entries added; the sum is then redone on one thread.
    """
    _sum(compressed, plain, x, out, nthreads)
