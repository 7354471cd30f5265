# Included by _spgemm.pyx: the numeric pass's per-thread scratch and the row accumulators
# that _row chooses between. Holds Scratch (the slot array, the word buffers of the sorting
# paths and the dense accumulator, each allocated on first use), the sort of a row's column
# words (_sort_words, _bucket, _bucket_sort) and the accumulators: the slot array (_spa_row,
# every block row), merge (_merge_row), dense with bits or flag bytes (_dense_row,
# _dense_flags_row) and expand-sort-compress (_esc_row). All sum a column's products in one
# order (A's entries, then B's), so they give the same results bit for bit. The including
# module cimports index_t, value_t and the libc types, defines the st_* C helpers, LOW32 and the
# tunables, and includes _spgemm_symbolic.pxi first (_row_span, _mark, _flag).

# The numeric pass keeps, per thread, one slot per output column: a row stamp and the position
# of the column among the row's distinct columns (two int32). A row's entries accumulate in a
# compact array in order of discovery; its columns are collected as 64-bit words
# (column - lo) << 32 | position, which sort by column, and the sorted words say where each
# column's sum is.
cdef struct Scratch:
    int32_t* slots        # 2 * n: (stamp, position) per column
    Py_ssize_t n
    int32_t stamp
    uint64_t* words       # maxc + 1
    uint64_t* sorted      # maxc + 1
    void* sums            # (maxc + 1) * E values
    int32_t* hist         # 4 * maxc + 4
    Py_ssize_t room       # maxc
    void* dense           # dense_room values: the dense accumulator (csr), allocated on first use
    uint64_t* bits        # dense_room / 64 + 1 words: which of them hold a sum, a bit each, or
    uint8_t* flags        # dense_room + 8 bytes: a flag byte each (all clear between rows)
    Py_ssize_t dense_room


cdef Scratch* _scratch_new(Py_ssize_t n, Py_ssize_t E, Py_ssize_t itemsize, Py_ssize_t maxc) noexcept nogil:
    """Room for rows of up to maxc collected columns (or products, in the sorting path); the slot
    array over the n columns is allocated by the first row that needs it (_scratch_slots)."""
    cdef Scratch* s = <Scratch*>calloc(1, sizeof(Scratch))
    if s == NULL:
        return NULL
    s.n = n
    s.room = maxc
    s.dense_room = min(n, DENSE_MAX) if E == 1 else 0
    s.words = <uint64_t*>scratch_alloc((maxc + 1) * sizeof(uint64_t))
    s.sorted = <uint64_t*>scratch_alloc((maxc + 1) * sizeof(uint64_t))
    s.sums = scratch_alloc((maxc + 1) * E * itemsize + 1)
    s.hist = <int32_t*>scratch_alloc((4 * maxc + 4) * sizeof(int32_t))
    if s.words == NULL or s.sorted == NULL or s.sums == NULL or s.hist == NULL:
        _scratch_free(s)
        return NULL
    return s


cdef bint _scratch_slots(Scratch* s) noexcept nogil:
    """Allocate the slot array on first use; False when out of memory."""
    if s.slots != NULL:
        return True
    s.slots = <int32_t*>scratch_alloc((2 * s.n + 2) * sizeof(int32_t))
    if s.slots == NULL:
        return False
    memset(s.slots, 0xff, (2 * s.n + 2) * sizeof(int32_t))  # stamp -1: no row yet
    s.stamp = 0
    return True


cdef bint _scratch_dense(Scratch* s, value_t zero) noexcept nogil:
    """Allocate the dense accumulator on first use, filled with ``zero`` (the identity of the
    sums), and its bits and flags, all clear; False when out of memory."""
    cdef Py_ssize_t j
    cdef value_t* acc
    if s.bits != NULL and s.flags != NULL:
        return True
    if s.dense == NULL:
        s.dense = scratch_alloc(s.dense_room * sizeof(value_t) + 1)
        if s.dense == NULL:
            return False
        acc = <value_t*>s.dense
        for j in range(s.dense_room):
            acc[j] = zero
    if s.bits == NULL:
        s.bits = <uint64_t*>scratch_calloc((s.dense_room >> 6) + 1, sizeof(uint64_t))
    if s.flags == NULL:
        s.flags = <uint8_t*>scratch_calloc(s.dense_room + 8, 1)
    return s.bits != NULL and s.flags != NULL


cdef void _scratch_free(Scratch* s) noexcept nogil:
    if s != NULL:
        scratch_free(s.dense)
        scratch_free(s.bits)
        scratch_free(s.flags)
        scratch_free(s.slots)
        scratch_free(s.words)
        scratch_free(s.sorted)
        scratch_free(s.sums)
        scratch_free(s.hist)
        free(s)


cdef inline int32_t _scratch_stamp(Scratch* s) noexcept nogil:
    if s.stamp == 2147483647:  # wrap: forget every row
        memset(s.slots, 0xff, (2 * s.n + 2) * sizeof(int32_t))
        s.stamp = 0
    s.stamp += 1
    return s.stamp


cdef void _sort_words(uint64_t* a, Py_ssize_t n) noexcept nogil:
    """Quicksort (insertion sort below 17 items) of distinct words."""
    cdef Py_ssize_t i, j
    cdef uint64_t p, t, x
    while n > 16:
        p = a[n // 2]
        if (a[0] < p) != (a[0] < a[n - 1]):
            p = a[0]
        elif (a[n - 1] < p) != (a[n - 1] < a[0]):
            p = a[n - 1]
        i = 0
        j = n - 1
        while True:
            while a[i] < p:
                i += 1
            while a[j] > p:
                j -= 1
            if i >= j:
                break
            t = a[i]
            a[i] = a[j]
            a[j] = t
            i += 1
            j -= 1
        if j + 1 < n - j - 1:
            _sort_words(a, j + 1)
            a += j + 1
            n -= j + 1
        else:
            _sort_words(a + j + 1, n - j - 1)
            n = j + 1
    for i in range(1, n):
        x = a[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


cdef inline Py_ssize_t _bucket(Py_ssize_t offset, int sh, Py_ssize_t nb) noexcept nogil:
    """The bucket of a column at ``offset`` from the row's lowest; clamped, so that rows whose B rows
    are not sorted (which the wrappers never pass) cannot index out of bounds."""
    cdef uint64_t b = (<uint64_t>offset) >> sh
    return <Py_ssize_t>b if b < <uint64_t>nb else nb - 1


cdef void _bucket_sort(const uint64_t* words, Py_ssize_t c, int sh, Py_ssize_t nb, int32_t* hist,
                       uint64_t* out) noexcept nogil:
    """Sort c distinct words into out, given hist[b + 1] = the number of words in bucket b
    ((word >> 32) >> sh): a counting-sort scatter, quicksort for crowded buckets, an insertion pass."""
    cdef Py_ssize_t q, b, d, start, end
    cdef bint crowded = False
    cdef uint64_t x
    for b in range(nb):
        if hist[b + 1] > CROWDED:
            crowded = True
        hist[b + 1] += hist[b]
    for q in range(c):
        b = _bucket(<Py_ssize_t>(words[q] >> 32), sh, nb)
        d = hist[b]
        hist[b] = d + 1
        out[d] = words[q]
    if crowded:  # hist[b] is now the end of bucket b
        start = 0
        for b in range(nb):
            end = hist[b]
            if end - start > CROWDED:
                _sort_words(out + start, end - start)
            start = end
    for q in range(1, c):
        x = out[q]
        d = q - 1
        while d >= 0 and out[d] > x:
            out[d + 1] = out[d]
            d -= 1
        out[d + 1] = x


cdef Py_ssize_t _spa_row(const index_t* ac, const index_t* ap, const value_t* av,
                         const index_t* bc, const index_t* bp, const value_t* bv,
                         Py_ssize_t i, Py_ssize_t Rb, Py_ssize_t Kb, Py_ssize_t Cb, bint logical,
                         Scratch* s, Py_ssize_t count, index_t* out_p, value_t* out_v) noexcept nogil:
    """Row i of A @ B into out_p/out_v with the slot array (allocated by the caller): at most
    ``count`` entries (the symbolic count, or an upper bound), the number written is returned.
    Values are blocks: A (Rb x Kb), B (Kb x Cb), output (Rb x Cb); 1 x 1 for csr."""
    cdef Py_ssize_t ka, kb, kb0, kb1, j, q, r, t, u, e, EA = Rb * Kb, EB = Kb * Cb, EO = Rb * Cb
    cdef Py_ssize_t nb, lo = -1, hi = -1
    cdef int32_t c = 0, cnt = <int32_t>count
    cdef int sh
    cdef int32_t stamp = _scratch_stamp(s)
    cdef int32_t* slots = s.slots
    cdef int32_t* slot
    cdef int32_t* hist = s.hist
    cdef uint64_t* words = s.words
    cdef value_t* sums = <value_t*>s.sums
    cdef const value_t* xa
    cdef const value_t* xb
    cdef value_t* acc
    cdef value_t x, p, zero = 0
    if _row_span(ac, ap, bc, bp, i, &lo, &hi) == 0:
        return 0
    sh = st_bitlen64(<uint64_t>(hi - lo)) - st_bitlen64(<uint64_t>count) - 1
    if sh < 0:
        sh = 0
    nb = ((hi - lo) >> sh) + 1
    memset(hist, 0, (nb + 1) * sizeof(int32_t))
    if EO == 1 and Kb == 1:
        for ka in range(ac[i], ac[i + 1]):
            x = av[ka]
            kb1 = bc[ap[ka] + 1]
            for kb in range(bc[ap[ka]], kb1):
                j = bp[kb]
                slot = slots + 2 * j
                if value_t is uint8_t:
                    if logical:
                        p = x & bv[kb]
                    else:
                        p = x * bv[kb]
                else:
                    p = x * bv[kb]
                if slot[0] != stamp:
                    slot[0] = stamp
                    slot[1] = c
                    sums[c] = p
                    if c < cnt:
                        words[c] = ((<uint64_t>(j - lo)) << 32) | <uint64_t>c
                        hist[_bucket(j - lo, sh, nb) + 1] += 1
                        c += 1
                elif value_t is uint8_t:
                    if logical:
                        sums[slot[1]] = sums[slot[1]] | p
                    else:
                        sums[slot[1]] = sums[slot[1]] + p
                else:
                    sums[slot[1]] = sums[slot[1]] + p
    else:
        for ka in range(ac[i], ac[i + 1]):
            xa = av + ka * EA
            kb1 = bc[ap[ka] + 1]
            for kb in range(bc[ap[ka]], kb1):
                j = bp[kb]
                slot = slots + 2 * j
                if slot[0] != stamp:
                    slot[0] = stamp
                    slot[1] = c
                    acc = sums + c * EO
                    for e in range(EO):
                        acc[e] = zero
                    if c < cnt:
                        words[c] = ((<uint64_t>(j - lo)) << 32) | <uint64_t>c
                        hist[_bucket(j - lo, sh, nb) + 1] += 1
                        c += 1
                acc = sums + slot[1] * EO
                xb = bv + kb * EB
                for r in range(Rb):
                    for u in range(Kb):
                        x = xa[r * Kb + u]
                        for t in range(Cb):
                            if value_t is uint8_t:
                                if logical:
                                    acc[r * Cb + t] = acc[r * Cb + t] | (x & xb[u * Cb + t])
                                    continue
                            acc[r * Cb + t] = acc[r * Cb + t] + x * xb[u * Cb + t]
    if c == 0:
        return 0
    _bucket_sort(words, c, sh, nb, hist, s.sorted)
    words = s.sorted
    if EO == 1:
        for q in range(c):
            out_p[q] = <index_t>(lo + <Py_ssize_t>(words[q] >> 32))
            out_v[q] = sums[<Py_ssize_t>(words[q] & LOW32)]
    else:
        for q in range(c):
            out_p[q] = <index_t>(lo + <Py_ssize_t>(words[q] >> 32))
            acc = sums + <Py_ssize_t>(words[q] & LOW32) * EO
            for e in range(EO):
                out_v[q * EO + e] = acc[e]
    return c


cdef inline value_t _product(value_t x, value_t y, bint logical) noexcept nogil:
    if value_t is uint8_t:
        if logical:
            return x & y
    return x * y


cdef inline value_t _sum(value_t x, value_t y, bint logical) noexcept nogil:
    if value_t is uint8_t:
        if logical:
            return x | y
    return x + y


cdef Py_ssize_t _merge_row(const index_t* ac, const index_t* ap, const value_t* av,
                           const index_t* bc, const index_t* bp, const value_t* bv,
                           Py_ssize_t i, bint logical, Py_ssize_t cap, index_t* out_p, value_t* out_v) noexcept nogil:
    """Row i of a csr product combining at most MERGE_CAP rows of B, by merging them: each output
    column is the smallest head column of the B rows, summed over the rows in order (the order of
    the other accumulators). At most ``cap`` entries; the number written is returned."""
    cdef Py_ssize_t k = ac[i + 1] - ac[i], t, q = 0, kb, kb1, j, jmin
    cdef Py_ssize_t head[MERGE_CAP]
    cdef Py_ssize_t end[MERGE_CAP]
    cdef value_t x[MERGE_CAP]
    cdef value_t v
    cdef bint first
    if k == 1:  # a scaled copy of one row of B
        kb1 = bc[ap[ac[i]] + 1]
        x[0] = av[ac[i]]
        for kb in range(bc[ap[ac[i]]], kb1):
            if q >= cap:
                break
            out_p[q] = bp[kb]
            out_v[q] = _product(x[0], bv[kb], logical)
            q += 1
        return q
    for t in range(k):
        head[t] = bc[ap[ac[i] + t]]
        end[t] = bc[ap[ac[i] + t] + 1]
        x[t] = av[ac[i] + t]
    while q < cap:
        jmin = -1
        for t in range(k):
            if head[t] < end[t]:
                j = bp[head[t]]
                if jmin < 0 or j < jmin:
                    jmin = j
        if jmin < 0:
            break
        first = True
        for t in range(k):
            if head[t] < end[t] and bp[head[t]] == jmin:
                if first:
                    v = _product(x[t], bv[head[t]], logical)
                    first = False
                else:
                    v = _sum(v, _product(x[t], bv[head[t]], logical), logical)
                head[t] += 1
        out_p[q] = <index_t>jmin
        out_v[q] = v
        q += 1
    return q


cdef inline value_t _identity(const value_t* of) noexcept nogil:
    """The exact identity of the sums of values like ``*of`` (not read): -0.0 for floats (-0.0 + x is x for every x, -0.0 and NaN
    included; 0.0 + -0.0 is 0.0), 0 for integers (and 0 | x for bools)."""
    cdef value_t z = 0
    return -z


cdef inline Py_ssize_t _take(value_t* acc, Py_ssize_t j, value_t zero, Py_ssize_t lo, Py_ssize_t q, Py_ssize_t cap,
                             index_t* out_p, value_t* out_v) noexcept nogil:
    """Column lo + j of a dense row (sum acc[j]) as entry q when q < cap, acc[j] reset to zero;
    returns the entries written."""
    if q < cap:
        out_p[q] = <index_t>(lo + j)
        out_v[q] = acc[j]
        q += 1
    acc[j] = zero
    return q


cdef Py_ssize_t _dense_row(const index_t* ac, const index_t* ap, const value_t* av,
                           const index_t* bc, const index_t* bp, const value_t* bv,
                           Py_ssize_t i, bint logical, Scratch* s, Py_ssize_t lo, Py_ssize_t width,
                           Py_ssize_t cap, index_t* out_p, value_t* out_v) noexcept nogil:
    """Row i of a csr product whose columns lie in [lo, lo + width), width at most the scratch's
    dense room: the sums accumulate in a dense array over that span, which holds the identity of
    the sums between rows (so that every product is added, without a branch, and the first one
    keeps its bits), a bit per column says which hold a sum, and the set bits, read in order, give
    the columns sorted (no sort). At most ``cap`` entries; the number written is returned."""
    cdef Py_ssize_t ka, kb, kb1, j, w, cw, q = 0, nw = ((width - 1) >> 6) + 1
    cdef uint64_t* bits = s.bits
    cdef value_t* acc = <value_t*>s.dense
    cdef uint64_t word, cb
    cdef value_t x, zero = _identity(av)
    for ka in range(ac[i], ac[i + 1]):
        x = av[ka]
        kb1 = bc[ap[ka] + 1]
        cw = 0
        cb = 0
        for kb in range(bc[ap[ka]], kb1):
            j = _mark(bits, bp[kb], lo, width, &cw, &cb)
            acc[j] = _sum(acc[j], _product(x, bv[kb], logical), logical)
        bits[cw] |= cb
    for w in range(nw):
        word = bits[w]
        if word == 0:
            continue
        bits[w] = 0
        while word != 0:
            j = (w << 6) + st_ctz64(word)
            word &= word - 1
            q = _take(acc, j, zero, lo, q, cap, out_p, out_v)
    return q


cdef Py_ssize_t _dense_flags_row(const index_t* ac, const index_t* ap, const value_t* av,
                                 const index_t* bc, const index_t* bp, const value_t* bv,
                                 Py_ssize_t i, bint logical, Scratch* s, Py_ssize_t lo, Py_ssize_t width,
                                 Py_ssize_t cap, index_t* out_p, value_t* out_v) noexcept nogil:
    """_dense_row for spans of at most FLAG_SPAN columns per product: a flag byte per column
    instead of a bit (a plain store per product: no branch per change of word, no
    read-modify-write chain), read eight at a time in order (a scan of width / 8 words)."""
    cdef Py_ssize_t ka, kb, kb1, j, w, q = 0, last = width - 1
    cdef uint8_t* flags = s.flags
    cdef value_t* acc = <value_t*>s.dense
    cdef uint64_t word
    cdef value_t x, zero = _identity(av)
    for ka in range(ac[i], ac[i + 1]):
        x = av[ka]
        kb1 = bc[ap[ka] + 1]
        for kb in range(bc[ap[ka]], kb1):
            j = _flag(flags, bp[kb], lo, last)
            acc[j] = _sum(acc[j], _product(x, bv[kb], logical), logical)
    for w in range((width + 7) >> 3):
        memcpy(&word, flags + (w << 3), 8)
        if word == 0:
            continue
        memset(flags + (w << 3), 0, 8)
        while word != 0:  # one set bit per flagged byte
            j = (w << 3) + (st_ctz64(word) >> 3)
            word &= word - 1
            q = _take(acc, j, zero, lo, q, cap, out_p, out_v)
    return q


cdef Py_ssize_t _esc_row(const index_t* ac, const index_t* ap, const value_t* av,
                         const index_t* bc, const index_t* bp, const value_t* bv,
                         Py_ssize_t i, bint logical, Scratch* s, Py_ssize_t ub, Py_ssize_t lo, Py_ssize_t hi,
                         Py_ssize_t cap, index_t* out_p, value_t* out_v) noexcept nogil:
    """Row i of a csr product by expand-sort-compress: its ``ub`` products (at most the scratch's
    room) are collected with their columns in [lo, hi], sorted by (column, order of discovery),
    and summed per column in that order (the order of the slot path: the same sums). At most
    ``cap`` entries are written; the number written is returned."""
    cdef Py_ssize_t ka, kb, kb1, c = 0, q = -1, t, nb, j
    cdef int sh = st_bitlen64(<uint64_t>(hi - lo)) - st_bitlen64(<uint64_t>ub) + ESC_SHIFT
    cdef int32_t* hist = s.hist
    cdef uint64_t* words = s.words
    cdef uint64_t* srt = s.sorted
    cdef value_t* vals = <value_t*>s.sums
    cdef value_t x
    cdef uint64_t w, col, prev = <uint64_t>-1
    # a few products over a narrow span are sorted in place (no histogram to clear and sum)
    cdef bint in_place = ub <= ESC_SMALL and hi - lo < ESC_SMALL_SPAN * ub
    if sh < 0:
        sh = 0
    nb = ((hi - lo) >> sh) + 1
    if not in_place:
        memset(hist, 0, (nb + 1) * sizeof(int32_t))
    for ka in range(ac[i], ac[i + 1]):
        x = av[ka]
        kb1 = bc[ap[ka] + 1]
        for kb in range(bc[ap[ka]], kb1):
            j = bp[kb] - lo
            vals[c] = _product(x, bv[kb], logical)
            words[c] = ((<uint64_t>j) << 32) | <uint64_t>c
            if not in_place:
                hist[_bucket(j, sh, nb) + 1] += 1
            c += 1
    if c == 0:
        return 0
    if in_place:
        _sort_words(words, c)
        srt = words
    else:
        _bucket_sort(words, c, sh, nb, hist, srt)
    for t in range(c):
        w = srt[t]
        col = w >> 32
        if col != prev:
            q += 1
            if q >= cap:  # only for input that breaks the invariants
                return q
            prev = col
            out_p[q] = <index_t>(lo + <Py_ssize_t>col)
            out_v[q] = vals[<Py_ssize_t>(w & LOW32)]
        elif value_t is uint8_t:
            if logical:
                out_v[q] = out_v[q] | vals[<Py_ssize_t>(w & LOW32)]
            else:
                out_v[q] = out_v[q] + vals[<Py_ssize_t>(w & LOW32)]
        else:
            out_v[q] = out_v[q] + vals[<Py_ssize_t>(w & LOW32)]
    return q + 1
