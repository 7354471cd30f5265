# Included by _spgemm.pyx: the symbolic (count) pass of two-pass SpGEMM, and the row helpers
# the numeric pass shares with it. Holds the per-thread marker array (Marks), the prefetch of
# the B rows a row uses (_prefetch_ahead), a row's products and column span (_row_span), marking
# a column with a bit (_mark) or a flag byte (_flag), and the counts of a row's distinct columns
# with flags, bits or the marker array (_symbolic_flags, _symbolic_bits, _symbolic_chunk). The
# including module cimports index_t, the libc.stdint types, calloc/free/malloc and
# memcpy/memset, and defines the st_* C helpers and the tunables (DENSE_MAX, DENSE_SPAN,
# FLAG_SPAN, FORCE and the accumulator codes).

# -- the marker array --------------------------------------------------------------------------
cdef struct Marks:
    int32_t* mark    # the stamp of the last row that hit each column
    Py_ssize_t n
    int32_t stamp
    uint64_t* bits   # (min(n, DENSE_MAX) >> 6) + 1 words, all clear between rows: a bit per column
    uint8_t* flags   # bits_room + 8 bytes, all clear between rows: a flag byte per column
    Py_ssize_t bits_room


cdef Marks* _marks_new(Py_ssize_t n) noexcept nogil:
    """A marker array of n columns, and a bitmap and flags of min(n, DENSE_MAX) (heap-allocated: one per
    thread), or NULL when out of memory."""
    cdef Marks* m = <Marks*>calloc(1, sizeof(Marks))
    if m == NULL:
        return NULL
    m.n = n
    m.stamp = 0
    m.bits_room = min(n, DENSE_MAX)
    m.mark = <int32_t*>scratch_alloc((n + 1) * sizeof(int32_t))
    m.bits = <uint64_t*>scratch_calloc((m.bits_room >> 6) + 1, sizeof(uint64_t))
    m.flags = <uint8_t*>scratch_calloc(m.bits_room + 8, 1)
    if m.mark == NULL or m.bits == NULL or m.flags == NULL:
        _marks_free(m)
        return NULL
    memset(m.mark, 0xff, (n + 1) * sizeof(int32_t))  # -1: no row yet
    return m


cdef void _marks_free(Marks* m) noexcept nogil:
    if m != NULL:
        scratch_free(m.bits)
        scratch_free(m.flags)
        scratch_free(m.mark)
        free(m)


cdef inline int32_t _next_stamp(Marks* m) noexcept nogil:
    if m.stamp == 2147483647:  # wrap: forget every row
        memset(m.mark, 0xff, (m.n + 1) * sizeof(int32_t))
        m.stamp = 0
    m.stamp += 1
    return m.stamp


# -- row helpers and the symbolic pass -----------------------------------------------------------
cdef inline void _prefetch_ahead(const index_t* a_c, const index_t* a_p, const index_t* b_c, const index_t* b_p,
                                 const char* b_v, Py_ssize_t b_entry_bytes, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """Software pipelining of the B rows a row uses: the row pointers of row i + 2's B rows, and the
    plain indices (and values, unless b_v is NULL) of row i + 1's."""
    cdef Py_ssize_t ka, k
    if i + 2 < n:
        for ka in range(a_c[i + 2], a_c[i + 3]):
            st_prefetch(&b_c[a_p[ka]])
    if i + 1 < n:
        for ka in range(a_c[i + 1], a_c[i + 2]):
            k = b_c[a_p[ka]]
            st_prefetch(&b_p[k])
            if b_v != NULL:
                st_prefetch(b_v + k * b_entry_bytes)


cdef inline Py_ssize_t _row_span(const index_t* ac, const index_t* ap, const index_t* bc, const index_t* bp,
                                 Py_ssize_t i, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """The products of row i of A @ B (the sum of the lengths of the B rows it combines), and in
    lo/hi the span of its columns, from the first and last columns of those rows (hi >= lo, also
    for rows that are not sorted, which the wrappers never pass); lo = hi = -1 without products."""
    cdef Py_ssize_t ka, kb0, kb1, ub = 0, l = -1, h = -1
    for ka in range(ac[i], ac[i + 1]):
        kb0 = bc[ap[ka]]
        kb1 = bc[ap[ka] + 1]
        if kb0 < kb1:
            ub += kb1 - kb0
            if l < 0 or bp[kb0] < l:
                l = bp[kb0]
            if bp[kb1 - 1] > h:
                h = bp[kb1 - 1]
    lo[0] = l
    hi[0] = h if h >= l else l
    return ub


cdef inline Py_ssize_t _mark(uint64_t* bits, Py_ssize_t col, Py_ssize_t lo, Py_ssize_t width, Py_ssize_t* cw,
                              uint64_t* cb) noexcept nogil:
    """Mark column ``col`` of the span [lo, lo + width) in ``bits``; returns its offset in the span.
    The bits of a run of columns in one word (cw) are collected in cb and or-ed in when the run
    ends (and by the caller after the last column): no store-to-load chain per column."""
    cdef Py_ssize_t j = col - lo, w
    if <uint64_t>j >= <uint64_t>width:  # only for rows that are not sorted (never from the wrappers)
        j = width - 1
    w = j >> 6
    if w != cw[0]:
        bits[cw[0]] |= cb[0]
        cw[0] = w
        cb[0] = 0
    cb[0] |= (<uint64_t>1) << (j & 63)
    return j


cdef int64_t _symbolic_bits(const index_t* a_c, const index_t* a_p, const index_t* b_c, const index_t* b_p,
                            Py_ssize_t i, Py_ssize_t lo, Py_ssize_t width, uint64_t* bits) noexcept nogil:
    """The distinct columns of row i, all in [lo, lo + width): a bit per column, counted (and
    cleared) at the end; the bits of a run of columns in one word are or-ed in at once."""
    cdef Py_ssize_t ka, kb, kb1, j, w, cw, nw = ((width - 1) >> 6) + 1
    cdef uint64_t cb
    cdef int64_t cnt = 0
    for ka in range(a_c[i], a_c[i + 1]):
        kb1 = b_c[a_p[ka] + 1]
        cw = 0
        cb = 0
        for kb in range(b_c[a_p[ka]], kb1):
            _mark(bits, b_p[kb], lo, width, &cw, &cb)
        bits[cw] |= cb
    for w in range(nw):
        if bits[w]:
            cnt += st_popcount64(bits[w])
            bits[w] = 0
    return cnt


cdef inline Py_ssize_t _flag(uint8_t* flags, Py_ssize_t col, Py_ssize_t lo, Py_ssize_t last) noexcept nogil:
    """Flag column ``col`` of the span [lo, lo + last]; returns its offset in the span (a plain
    store: no branch on the flags, no read-modify-write)."""
    cdef Py_ssize_t j = col - lo
    if <uint64_t>j > <uint64_t>last:  # only for rows that are not sorted (never from the wrappers)
        j = last
    flags[j] = 1
    return j


cdef int64_t _symbolic_flags(const index_t* a_c, const index_t* a_p, const index_t* b_c, const index_t* b_p,
                             Py_ssize_t i, Py_ssize_t lo, Py_ssize_t width, uint8_t* flags) noexcept nogil:
    """The distinct columns of row i, all in [lo, lo + width): a flag byte per column (a plain
    store per product), counted eight at a time and cleared at the end without a branch (a
    branch per word that holds a flag mispredicts on the clusters of a stencil row)."""
    cdef Py_ssize_t ka, kb, kb1, w, nw = (width + 7) >> 3, last = width - 1
    cdef uint64_t word, clear = 0
    cdef int64_t cnt = 0
    for ka in range(a_c[i], a_c[i + 1]):
        kb1 = b_c[a_p[ka] + 1]
        for kb in range(b_c[a_p[ka]], kb1):
            _flag(flags, b_p[kb], lo, last)
    for w in range(nw):
        memcpy(&word, flags + (w << 3), 8)
        memcpy(flags + (w << 3), &clear, 8)
        cnt += st_popcount64(word)
    return cnt


cdef void _symbolic_chunk(Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n,
                          const index_t* ac, Py_ssize_t sac, const index_t* ap, Py_ssize_t sap,
                          const index_t* bc, Py_ssize_t sbc, const index_t* bp, Py_ssize_t sbp,
                          int64_t* counts, Marks* m) noexcept nogil:
    """counts[r] for the flat rows r0 <= r < r1 (row r = batch r // n, row r % n); s* are batch
    strides. Rows whose columns span at most the bitmap's room, and at most DENSE_SPAN columns per
    product, are counted with the flags (at most FLAG_SPAN columns per product) or the bitmap,
    the others with the marker array."""
    cdef Py_ssize_t r, b, i, ka, kb, kb1, j, ub, lo, hi
    cdef int32_t stamp
    cdef int64_t cnt
    cdef int32_t* mark = m.mark
    cdef const index_t* a_c
    cdef const index_t* a_p
    cdef const index_t* b_c
    cdef const index_t* b_p
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        a_c = ac + b * sac
        a_p = ap + b * sap
        b_c = bc + b * sbc
        b_p = bp + b * sbp
        _prefetch_ahead(a_c, a_p, b_c, b_p, NULL, 0, i, n)
        ub = _row_span(a_c, a_p, b_c, b_p, i, &lo, &hi)
        if ub == 0:
            counts[r] = 0
            continue
        if hi - lo + 1 <= m.bits_room and hi - lo + 1 <= DENSE_SPAN * ub and FORCE != SLOTS:
            if hi - lo + 1 <= FLAG_SPAN * ub:
                counts[r] = _symbolic_flags(a_c, a_p, b_c, b_p, i, lo, hi - lo + 1, m.flags)
            else:
                counts[r] = _symbolic_bits(a_c, a_p, b_c, b_p, i, lo, hi - lo + 1, m.bits)
            continue
        stamp = _next_stamp(m)
        cnt = 0
        for ka in range(a_c[i], a_c[i + 1]):
            kb1 = b_c[a_p[ka] + 1]
            for kb in range(b_c[a_p[ka]], kb1):
                j = b_p[kb]
                if mark[j] != stamp:
                    mark[j] = stamp
                    cnt += 1
        counts[r] = cnt
