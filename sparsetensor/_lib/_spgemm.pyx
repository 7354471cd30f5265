# Sparse @ sparse (SpGEMM) and sampled dense @ dense (SDDMM) kernels.
#
# SpGEMM is row-parallel over the canonical form compressed (B, n + 1), plain (B, nnz),
# values (B, nnz, Rb * Kb) of both operands (rows compressed: csr/bsr; the Python wrapper
# turns every other layout into it). A csr row picks how its products are summed per column by
# the number k of B rows it combines, its products ub and the span [lo, hi] of its columns
# (Gustavson's row-by-row product with the accumulators of Nagasaka et al. 2018, plus two):
#
# - merge (k <= MERGE_MAX): the k sorted B rows are merged, a scaled copy for k = 1;
# - dense (a span of at most DENSE_MAX columns, and at most DENSE_SPAN columns per product:
#   stencils, banded rows, hubs of small graphs): the sums go to a dense array over the span and
#   a flag byte per column (a plain store: no branch, no read-modify-write chain) or, for spans
#   wider than FLAG_SPAN columns per product, a bit marks the columns hit; reading the marks in
#   order gives the row sorted, without a sort;
# - expand-sort-compress (ub <= ESC_MAX, and no more products than output columns): the
#   products are collected with their columns, sorted (a counting sort on the high bits of the
#   row's column range, then an insertion pass; quicksort for crowded buckets) and summed per
#   column in order of discovery; everything stays in a few KiB of scratch;
# - the slot array (the other rows, and every block row): a per-thread array over the output
#   columns says where each column's sum is; the distinct columns are collected and sorted as above.
#
# All sum in the same order (A's entries, then B's), so the results are the same bit for bit.
# csr products run in one fused pass (spgemm_flops, then spgemm_fused): the output has room for
# every product; the rows are split into parts of about equal products, each part's rows are
# written one after another (the first part's into the output, the others' into buffers of their
# own) and the parts are copied together. Products with more room than the wrapper allows, and
# bsr, run two passes: symbolic (the distinct columns of every row, counted with per-thread
# flags or a bitmap for rows of a narrow span, else a per-thread marker array), then numeric
# into the exact output. Output rows are canonical (invariant 5.6). Explicit zeros from cancellation stay
# entries (a structural product). Inputs are trusted to satisfy 5.1-5.5 (the wrapper scans
# unchecked input first), so that no kernel reads out of bounds; no row writes past its room.
from cython.parallel cimport parallel, prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

import numpy as np

from ._types cimport index_t, value_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #include <stddef.h>
    static inline int st_bitlen64(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }
    static inline int st_ctz64(uint64_t x) { return __builtin_ctzll(x); }
    static inline int st_popcount64(uint64_t x) { return __builtin_popcountll(x); }
    static inline void st_prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

    /* Dot products with four independent vector accumulators (SSE2 baseline). */
    typedef float st_v4f __attribute__((vector_size(16)));
    typedef double st_v2d __attribute__((vector_size(16)));
    #define ST_DEFINE_DOT(NAME, T, VT, L, HSUM)                                 \\
    static inline T st_dot_##NAME(const T* x, const T* y, ptrdiff_t n) {          \\
        VT s0 = {0}, s1 = s0, s2 = s0, s3 = s0, a, b;                             \\
        ptrdiff_t k = 0;                                                          \\
        T s;                                                                      \\
        for (; k + 4 * L <= n; k += 4 * L) {                                      \\
            memcpy(&a, x + k, 16); memcpy(&b, y + k, 16); s0 += a * b;            \\
            memcpy(&a, x + k + L, 16); memcpy(&b, y + k + L, 16); s1 += a * b;    \\
            memcpy(&a, x + k + 2 * L, 16); memcpy(&b, y + k + 2 * L, 16); s2 += a * b; \\
            memcpy(&a, x + k + 3 * L, 16); memcpy(&b, y + k + 3 * L, 16); s3 += a * b; \\
        }                                                                         \\
        for (; k + L <= n; k += L) { memcpy(&a, x + k, 16); memcpy(&b, y + k, 16); s0 += a * b; } \\
        s0 = (s0 + s1) + (s2 + s3);                                               \\
        s = HSUM(s0);                                                             \\
        for (; k < n; k++) s += x[k] * y[k];                                      \\
        return s;                                                                 \\
    }
    #define ST_HSUM4(v) ((v[0] + v[1]) + (v[2] + v[3]))
    #define ST_HSUM2(v) (v[0] + v[1])
    ST_DEFINE_DOT(f32, float, st_v4f, 4, ST_HSUM4)
    ST_DEFINE_DOT(f64, double, st_v2d, 2, ST_HSUM2)
    """
    int st_bitlen64(uint64_t x) nogil
    int st_ctz64(uint64_t x) nogil
    int st_popcount64(uint64_t x) nogil
    void st_prefetch(const void* p) nogil
    float st_dot_f32(const float* x, const float* y, Py_ssize_t n) nogil
    double st_dot_f64(const double* x, const double* y, Py_ssize_t n) nogil

# Rows per scheduling chunk of the row-parallel passes (dynamic schedule).
cdef Py_ssize_t ROW_CHUNK = 256
# Buckets of the row sort holding more keys than this are quicksorted before the insertion pass.
cdef Py_ssize_t CROWDED = 24
# csr rows of at most this many products, and no more products than output columns, are summed
# by expand-sort-compress (_esc_row); longer ones (and block rows) with the slot array over the
# output columns, whose random accesses cost more than sorting unless the columns are few.
cdef Py_ssize_t ESC_MAX = 8192
# The sorting path's counting sort uses fewer than 2 ** (bitlen(products) - ESC_SHIFT) buckets
# (at most 4 per product for -1: the scratch's histogram has that room).
cdef int ESC_SHIFT = -1
# Parts per thread of the fused pass (dynamic schedule); more balance the load, each adds a move.
cdef Py_ssize_t PARTS_PER_THREAD = 4
# csr rows combining at most this many rows of B are merged (MERGE_CAP: the most a merge can take).
cdef enum:
    MERGE_CAP = 64
cdef Py_ssize_t MERGE_MAX = 2
# csr rows whose output columns span at most DENSE_MAX columns, and at most DENSE_SPAN per
# product, are summed in a dense accumulator over that span (_dense_row).
cdef Py_ssize_t DENSE_MAX = 1 << 16
cdef Py_ssize_t DENSE_SPAN = 128
# Such rows whose span is at most FLAG_SPAN columns per product mark the columns hit with a flag
# byte each (stencils: the scan of the span is cheap next to the products), wider ones with a bit.
cdef Py_ssize_t FLAG_SPAN = 16
# The accumulator of every csr row that it can take, for tests and benchmarks (AUTO: by the row).
cdef enum:
    AUTO = 0
    MERGE = 1
    DENSE = 2
    ESC = 3
    SLOTS = 4
cdef int FORCE = AUTO
_ACCUMULATORS = {"auto": AUTO, "merge": MERGE, "dense": DENSE, "esc": ESC, "slots": SLOTS}


def _tune(accumulator=None, merge_max=None, dense_max=None, dense_span=None, esc_max=None, parts_per_thread=None,
          flag_span=None):
    """Set the csr accumulator choice (benchmarks and tests only): ``accumulator`` forces one of
    "merge", "dense", "esc", "slots" for every row it can take ("auto": by the row); the others are
    the thresholds above. Returns the previous settings, as keyword arguments."""
    global FORCE, MERGE_MAX, DENSE_MAX, DENSE_SPAN, ESC_MAX, PARTS_PER_THREAD, FLAG_SPAN
    names = {v: k for k, v in _ACCUMULATORS.items()}
    old = dict(accumulator=names[FORCE], merge_max=MERGE_MAX, dense_max=DENSE_MAX, dense_span=DENSE_SPAN,
               esc_max=ESC_MAX, parts_per_thread=PARTS_PER_THREAD, flag_span=FLAG_SPAN)
    if accumulator is not None:
        if accumulator not in _ACCUMULATORS:
            raise ValueError(f"accumulator must be one of {sorted(_ACCUMULATORS)}, got {accumulator!r}")
        FORCE = _ACCUMULATORS[accumulator]
    if merge_max is not None:
        MERGE_MAX = min(max(int(merge_max), 0), MERGE_CAP)
    if dense_max is not None:
        DENSE_MAX = max(int(dense_max), 0)
    if dense_span is not None:
        DENSE_SPAN = max(int(dense_span), 0)
    if esc_max is not None:
        ESC_MAX = max(int(esc_max), 0)
    if parts_per_thread is not None:
        PARTS_PER_THREAD = max(int(parts_per_thread), 1)
    if flag_span is not None:
        FLAG_SPAN = max(int(flag_span), 0)
    return old
cdef uint64_t LOW32 = 0xffffffffu


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
    m.mark = <int32_t*>malloc((n + 1) * sizeof(int32_t))
    m.bits = <uint64_t*>calloc((m.bits_room >> 6) + 1, sizeof(uint64_t))
    m.flags = <uint8_t*>calloc(m.bits_room + 8, 1)
    if m.mark == NULL or m.bits == NULL or m.flags == NULL:
        _marks_free(m)
        return NULL
    memset(m.mark, 0xff, (n + 1) * sizeof(int32_t))  # -1: no row yet
    return m


cdef void _marks_free(Marks* m) noexcept nogil:
    if m != NULL:
        free(m.bits)
        free(m.flags)
        free(m.mark)
        free(m)


cdef inline int32_t _next_stamp(Marks* m) noexcept nogil:
    if m.stamp == 2147483647:  # wrap: forget every row
        memset(m.mark, 0xff, (m.n + 1) * sizeof(int32_t))
        m.stamp = 0
    m.stamp += 1
    return m.stamp


# -- SpGEMM --------------------------------------------------------------------------------------
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
    store per product), counted (and cleared) eight at a time at the end."""
    cdef Py_ssize_t ka, kb, kb1, w, nw = (width + 7) >> 3, last = width - 1
    cdef uint64_t word
    cdef int64_t cnt = 0
    for ka in range(a_c[i], a_c[i + 1]):
        kb1 = b_c[a_p[ka] + 1]
        for kb in range(b_c[a_p[ka]], kb1):
            _flag(flags, b_p[kb], lo, last)
    for w in range(nw):
        memcpy(&word, flags + (w << 3), 8)
        if word:
            cnt += st_popcount64(word)
            memset(flags + (w << 3), 0, 8)
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


def spgemm_symbolic(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                    const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                    Py_ssize_t ncols, int64_t[:, ::1] counts, int nthreads):
    """counts[b, i] = the number of distinct (block) columns of row i of A[b] @ B[b]."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, ch, r0, r1
    cdef Py_ssize_t nchunks = (R + ROW_CHUNK - 1) // ROW_CHUNK
    cdef int T = max(1, min(nthreads, nchunks))
    cdef Marks* m
    cdef int[::1] failed = np.zeros(1, dtype=np.intc)
    if b_compressed.shape[0] != B or a_plain.shape[0] != B or b_plain.shape[0] != B:
        raise ValueError("a and b must have the same number of batches")
    if counts.shape[0] != B or counts.shape[1] != n:
        raise ValueError(f"counts must have shape ({B}, {n}), got ({counts.shape[0]}, {counts.shape[1]})")
    if R == 0:
        return
    if a_plain.shape[1] == 0 or b_plain.shape[1] == 0:
        counts[:, :] = 0
        return
    with nogil, parallel(num_threads=T):
        m = _marks_new(ncols)
        if m == NULL:
            failed[0] = 1
        for ch in prange(nchunks, schedule="dynamic", chunksize=1):
            if m != NULL:
                r0 = ch * ROW_CHUNK
                r1 = min(R, r0 + ROW_CHUNK)
                _symbolic_chunk(r0, r1, n, &a_compressed[0, 0], a_compressed.shape[1], &a_plain[0, 0],
                                a_plain.shape[1], &b_compressed[0, 0], b_compressed.shape[1], &b_plain[0, 0],
                                b_plain.shape[1], &counts[0, 0], m)
        _marks_free(m)
    if failed[0]:
        raise MemoryError(f"spgemm: out of memory for the per-thread marker arrays ({ncols} columns)")


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
    s.words = <uint64_t*>malloc((maxc + 1) * sizeof(uint64_t))
    s.sorted = <uint64_t*>malloc((maxc + 1) * sizeof(uint64_t))
    s.sums = malloc((maxc + 1) * E * itemsize + 1)
    s.hist = <int32_t*>malloc((4 * maxc + 4) * sizeof(int32_t))
    if s.words == NULL or s.sorted == NULL or s.sums == NULL or s.hist == NULL:
        _scratch_free(s)
        return NULL
    return s


cdef bint _scratch_slots(Scratch* s) noexcept nogil:
    """Allocate the slot array on first use; False when out of memory."""
    if s.slots != NULL:
        return True
    s.slots = <int32_t*>malloc((2 * s.n + 2) * sizeof(int32_t))
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
        s.dense = malloc(s.dense_room * sizeof(value_t) + 1)
        if s.dense == NULL:
            return False
        acc = <value_t*>s.dense
        for j in range(s.dense_room):
            acc[j] = zero
    if s.bits == NULL:
        s.bits = <uint64_t*>calloc((s.dense_room >> 6) + 1, sizeof(uint64_t))
    if s.flags == NULL:
        s.flags = <uint8_t*>calloc(s.dense_room + 8, 1)
    return s.bits != NULL and s.flags != NULL


cdef void _scratch_free(Scratch* s) noexcept nogil:
    if s != NULL:
        free(s.dense)
        free(s.bits)
        free(s.flags)
        free(s.slots)
        free(s.words)
        free(s.sorted)
        free(s.sums)
        free(s.hist)
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
    if sh < 0:
        sh = 0
    nb = ((hi - lo) >> sh) + 1
    memset(hist, 0, (nb + 1) * sizeof(int32_t))
    for ka in range(ac[i], ac[i + 1]):
        x = av[ka]
        kb1 = bc[ap[ka] + 1]
        for kb in range(bc[ap[ka]], kb1):
            j = bp[kb] - lo
            vals[c] = _product(x, bv[kb], logical)
            words[c] = ((<uint64_t>j) << 32) | <uint64_t>c
            hist[_bucket(j, sh, nb) + 1] += 1
            c += 1
    if c == 0:
        return 0
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


cdef Py_ssize_t _row(const index_t* ac, const index_t* ap, const value_t* av,
                     const index_t* bc, const index_t* bp, const value_t* bv,
                     Py_ssize_t i, Py_ssize_t Rb, Py_ssize_t Kb, Py_ssize_t Cb, bint logical,
                     Scratch* s, Py_ssize_t cap, index_t* out_p, value_t* out_v) noexcept nogil:
    """Row i of A @ B, at most ``cap`` entries. csr rows pick their accumulator by the rows of B
    they combine (k), their products (ub) and the span of their columns: merge (k <= MERGE_MAX),
    dense (a span of at most DENSE_MAX columns and DENSE_SPAN per product), expand-sort-compress
    (ub <= ESC_MAX), else the slot array, which also takes every block row. Returns the number
    written, -1 when out of memory."""
    cdef Py_ssize_t ub, lo, hi, k, width
    cdef int acc = FORCE
    if Rb == 1 and Kb == 1 and Cb == 1:
        ub = _row_span(ac, ap, bc, bp, i, &lo, &hi)
        if ub == 0 or cap <= 0:
            return 0
        k = ac[i + 1] - ac[i]
        width = hi - lo + 1
        if acc == MERGE and k > MERGE_CAP or acc == DENSE and width > s.dense_room or \
                acc == ESC and (ub > s.room or ub > s.n):
            acc = AUTO
        if acc == AUTO:
            if k <= MERGE_MAX:
                acc = MERGE
            elif width <= s.dense_room and width <= DENSE_SPAN * ub:
                acc = DENSE
            elif ub <= ESC_MAX and ub <= s.n and ub <= s.room:
                acc = ESC
            else:
                acc = SLOTS
        if acc == MERGE:
            return _merge_row(ac, ap, av, bc, bp, bv, i, logical, cap, out_p, out_v)
        if acc == DENSE:
            if not _scratch_dense(s, _identity(av)):
                return -1
            if width <= FLAG_SPAN * ub:
                return _dense_flags_row(ac, ap, av, bc, bp, bv, i, logical, s, lo, width, cap, out_p, out_v)
            return _dense_row(ac, ap, av, bc, bp, bv, i, logical, s, lo, width, cap, out_p, out_v)
        if acc == ESC:
            return _esc_row(ac, ap, av, bc, bp, bv, i, logical, s, ub, lo, hi, cap, out_p, out_v)
    if not _scratch_slots(s):
        return -1
    return _spa_row(ac, ap, av, bc, bp, bv, i, Rb, Kb, Cb, logical, s, min(cap, s.room), out_p, out_v)


cdef int _numeric_chunk(Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n,
                        const index_t* ac, Py_ssize_t sac, const index_t* ap, Py_ssize_t sap, const value_t* av,
                        const index_t* bc, Py_ssize_t sbc, const index_t* bp, Py_ssize_t sbp, const value_t* bv,
                        const index_t* oc, Py_ssize_t soc, index_t* op, Py_ssize_t sop, value_t* ov,
                        Py_ssize_t Rb, Py_ssize_t Kb, Py_ssize_t Cb, bint logical, Scratch* s) noexcept nogil:
    """The flat rows r0 <= r < r1; s* are batch strides of the index arrays (in entries).
    Returns 1 when out of memory."""
    cdef Py_ssize_t r, b, i, o, cnt, EA = Rb * Kb, EB = Kb * Cb, EO = Rb * Cb
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        o = oc[b * soc + i]
        cnt = oc[b * soc + i + 1] - o
        _prefetch_ahead(ac + b * sac, ap + b * sap, bc + b * sbc, bp + b * sbp, <const char*>(bv + b * sbp * EB),
                        EB * sizeof(value_t), i, n)
        if cnt > 0:
            if _row(ac + b * sac, ap + b * sap, av + b * sap * EA, bc + b * sbc, bp + b * sbp,
                    bv + b * sbp * EB, i, Rb, Kb, Cb, logical, s, cnt, op + b * sop + o,
                    ov + (b * sop + o) * EO) < 0:
                return 1
    return 0


def spgemm_numeric(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                   const value_t[:, :, ::1] a_values,
                   const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                   const value_t[:, :, ::1] b_values,
                   Py_ssize_t ncols, Py_ssize_t Rb, Py_ssize_t Kb, Py_ssize_t Cb,
                   const index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain,
                   value_t[:, :, ::1] out_values, bint logical, int nthreads):
    """Fill out_plain/out_values of A @ B per batch, rows sorted; out_compressed holds the
    prefix sums of spgemm_symbolic's counts. Values are (B, nnz, E) with E = Rb*Kb for A,
    Kb*Cb for B and Rb*Cb for the output (1 for csr). ``logical``: uint8 values are bools
    (products are and, sums are or)."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, b, i, EO = Rb * Cb, maxc = 0, cnt, ch, r0, r1
    cdef Py_ssize_t nchunks = (R + ROW_CHUNK - 1) // ROW_CHUNK
    cdef int T = max(1, min(nthreads, nchunks))
    cdef Scratch* s
    cdef int[::1] failed = np.zeros(1, dtype=np.intc)
    cdef Py_ssize_t onnz = out_plain.shape[1]
    if (a_values.shape[0] != B or b_values.shape[0] != B or out_values.shape[0] != B
            or out_compressed.shape[0] != B or out_compressed.shape[1] != n + 1 or out_plain.shape[0] != B
            or out_values.shape[1] != onnz or a_values.shape[1] != a_plain.shape[1]
            or b_values.shape[1] != b_plain.shape[1]):
        raise ValueError("spgemm_numeric: inconsistent batch, row or nnz counts")
    if a_values.shape[2] != Rb * Kb or b_values.shape[2] != Kb * Cb or out_values.shape[2] != EO:
        raise ValueError("spgemm_numeric: values do not match the block sizes")
    if R == 0 or onnz == 0 or EO == 0:
        return
    for b in range(B):
        if out_compressed[b, 0] != 0 or out_compressed[b, n] != onnz:
            raise ValueError("spgemm_numeric: out_compressed must run from 0 to nnz in every batch")
        for i in range(n):
            cnt = out_compressed[b, i + 1] - out_compressed[b, i]
            if cnt < 0:
                raise ValueError("spgemm_numeric: out_compressed must be non-decreasing")
            if cnt > maxc:
                maxc = cnt
    if EO == 1 and Kb == 1 and maxc < min(ESC_MAX, ncols):
        maxc = min(ESC_MAX, ncols)
    with nogil, parallel(num_threads=T):
        s = _scratch_new(ncols, EO, sizeof(value_t), maxc)
        if s == NULL:
            failed[0] = 1
        for ch in prange(nchunks, schedule="dynamic", chunksize=1):
            if s != NULL and not failed[0]:
                r0 = ch * ROW_CHUNK
                r1 = min(R, r0 + ROW_CHUNK)
                if _numeric_chunk(r0, r1, n, &a_compressed[0, 0], a_compressed.shape[1], &a_plain[0, 0],
                               a_plain.shape[1], &a_values[0, 0, 0], &b_compressed[0, 0], b_compressed.shape[1],
                               &b_plain[0, 0], b_plain.shape[1], &b_values[0, 0, 0], &out_compressed[0, 0],
                               n + 1, &out_plain[0, 0], onnz, &out_values[0, 0, 0], Rb, Kb, Cb, logical, s):
                    failed[0] = 1
        _scratch_free(s)
    if failed[0]:
        raise MemoryError(f"spgemm: out of memory for the per-thread accumulators ({ncols} x {EO} values)")


# -- fused SpGEMM (csr) ---------------------------------------------------------------------------
# One pass instead of symbolic + numeric: every row may write its upper bound of entries (the
# products it forms), so the output is allocated with room for all products (prefix sums from
# spgemm_flops); rows are split into parts of about equal products, each part writes its rows one
# after another, and the parts are copied together at the end (one part, and no copy, on one
# thread).
def spgemm_flops(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                 const index_t[:, ::1] b_compressed, int64_t[::1] prefix, int nthreads):
    """prefix[r + 1] - prefix[r] = the products of flat row r (batch r // n, row r % n) of
    A @ B, the sum of the lengths of the B rows it combines; prefix[0] = 0. Returns the
    largest number of products of a row."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, r, b, i, ka, sac = a_compressed.shape[1], sap = a_plain.shape[1]
    cdef Py_ssize_t sbc = b_compressed.shape[1]
    cdef int64_t acc, mx = 0
    cdef int T = max(1, min(nthreads, R // 4096 + 1))
    cdef const index_t* a_c
    cdef const index_t* a_p
    cdef const index_t* b_c
    if a_plain.shape[0] != B or b_compressed.shape[0] != B:
        raise ValueError("a and b must have the same number of batches")
    if prefix.shape[0] != R + 1:
        raise ValueError(f"prefix must have {R + 1} entries, got {prefix.shape[0]}")
    prefix[0] = 0
    if R == 0:
        return 0
    with nogil:
        for r in prange(R, num_threads=T, schedule="static"):
            b = r // n
            i = r - b * n
            a_c = &a_compressed[0, 0] + b * sac
            a_p = &a_plain[0, 0] + b * sap if sap else NULL
            b_c = &b_compressed[0, 0] + b * sbc
            acc = 0
            for ka in range(a_c[i], a_c[i + 1]):
                acc = acc + (b_c[a_p[ka] + 1] - b_c[a_p[ka]])
            prefix[r + 1] = acc
        for r in range(R):
            if prefix[r + 1] > mx:
                mx = prefix[r + 1]
            prefix[r + 1] += prefix[r]
    return mx


cdef Py_ssize_t _fused_part(Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n, const int64_t* prefix,
                            const index_t* ac, Py_ssize_t sac, const index_t* ap, Py_ssize_t sap, const value_t* av,
                            const index_t* bc, Py_ssize_t sbc, const index_t* bp, Py_ssize_t sbp, const value_t* bv,
                            int64_t* counts, index_t* op, value_t* ov, bint logical, Scratch* s) noexcept nogil:
    """The flat rows r0 <= r < r1, written one after another into op/ov (room for
    prefix[r1] - prefix[r0] entries); each row at most up to the next row's bound. Returns the
    number written, -1 when out of memory."""
    cdef Py_ssize_t r, b, i, c, pos = 0, base = prefix[r0]
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        _prefetch_ahead(ac + b * sac, ap + b * sap, bc + b * sbc, bp + b * sbp, <const char*>(bv + b * sbp),
                        sizeof(value_t), i, n)
        c = _row(ac + b * sac, ap + b * sap, av + b * sap, bc + b * sbc, bp + b * sbp, bv + b * sbp, i, 1, 1, 1,
                 logical, s, prefix[r + 1] - base - pos, op + pos, ov + pos)
        if c < 0:
            return -1
        counts[r] = c
        pos += c
    return pos


def spgemm_fused(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                 const value_t[:, ::1] a_values,
                 const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                 const value_t[:, ::1] b_values, Py_ssize_t ncols,
                 const int64_t[::1] prefix, Py_ssize_t maxub, int64_t[::1] counts,
                 index_t[::1] out_plain, value_t[::1] out_values, bint logical, int nthreads):
    """csr A @ B in one pass: counts[r] = the entries of flat row r (batch r // n, row r % n),
    whose sorted columns and sums are out_plain/out_values[sum(counts[:r]):][:counts[r]] on
    return (rows of all batches one after another). ``prefix``/``maxub`` come from spgemm_flops;
    out_plain and out_values have room for prefix[-1] entries, of which only the first
    sum(counts) are written (the others are never touched). Values are (B, nnz). Returns
    the number of entries written (sum(counts))."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, r, p, lo_p, hi_p, mid, pos, c, room, room_p
    cdef int64_t total
    cdef int T
    cdef Py_ssize_t nparts
    cdef Scratch* s
    cdef int[::1] failed = np.zeros(1, dtype=np.intc)
    cdef int64_t[::1] bounds
    cdef int64_t[::1] written
    cdef int64_t[::1] offsets
    cdef index_t** part_p = NULL
    cdef value_t** part_v = NULL
    cdef index_t* dst_p
    cdef value_t* dst_v
    if (a_plain.shape[0] != B or b_compressed.shape[0] != B or b_plain.shape[0] != B or a_values.shape[0] != B
            or b_values.shape[0] != B or a_values.shape[1] != a_plain.shape[1]
            or b_values.shape[1] != b_plain.shape[1]):
        raise ValueError("spgemm_fused: inconsistent batch or nnz counts")
    if prefix.shape[0] != R + 1 or counts.shape[0] != R:
        raise ValueError(f"spgemm_fused: prefix and counts must have {R + 1} and {R} entries")
    total = prefix[R]
    if prefix[0] != 0 or out_plain.shape[0] != total or out_values.shape[0] != total:
        raise ValueError("spgemm_fused: prefix must run from 0 to the room of out_plain and out_values")
    for r in range(R):
        if prefix[r + 1] < prefix[r]:
            raise ValueError("spgemm_fused: prefix must be non-decreasing")
    counts[:] = 0
    if R == 0 or total == 0:
        return 0
    room = max(min(maxub, ncols), min(maxub, ESC_MAX))
    T = max(1, min(nthreads, total // 65536 + 1))
    nparts = 1 if T == 1 else min(R, T * PARTS_PER_THREAD)
    bounds = np.empty(nparts + 1, dtype=np.int64)
    written = np.zeros(nparts, dtype=np.int64)
    offsets = np.zeros(nparts, dtype=np.int64)
    bounds[0] = 0
    bounds[nparts] = R
    for p in range(1, nparts):  # the first row whose products start at or after p / nparts of them
        lo_p = bounds[p - 1]
        hi_p = R
        while lo_p < hi_p:
            mid = (lo_p + hi_p) // 2
            if prefix[mid] * nparts < total * p:
                lo_p = mid + 1
            else:
                hi_p = mid
        bounds[p] = lo_p
    # Part 0 writes at the start of the output, every other part into a buffer of its own (only the
    # pages it writes are ever touched), which is copied after the parts before it at the end: the
    # output's pages are touched once, in order (no room left between parts, no move).
    part_p = <index_t**>calloc(nparts, sizeof(index_t*))
    part_v = <value_t**>calloc(nparts, sizeof(value_t*))
    if part_p == NULL or part_v == NULL:
        free(part_p)
        free(part_v)
        raise MemoryError("spgemm: out of memory for the parts of the output")
    with nogil, parallel(num_threads=T):
        s = _scratch_new(ncols, 1, sizeof(value_t), room)
        if s == NULL:
            failed[0] = 1
        for p in prange(nparts, schedule="dynamic", chunksize=1):
            if s != NULL and not failed[0] and bounds[p] < bounds[p + 1]:
                if p == 0:
                    dst_p = &out_plain[0]
                    dst_v = &out_values[0]
                else:
                    room_p = prefix[bounds[p + 1]] - prefix[bounds[p]]
                    part_p[p] = <index_t*>malloc(room_p * sizeof(index_t) + 1)
                    part_v[p] = <value_t*>malloc(room_p * sizeof(value_t) + 1)
                    dst_p = part_p[p]
                    dst_v = part_v[p]
                if dst_p == NULL or dst_v == NULL:
                    failed[0] = 1
                else:
                    c = _fused_part(bounds[p], bounds[p + 1], n, &prefix[0], &a_compressed[0, 0],
                                    a_compressed.shape[1], &a_plain[0, 0], a_plain.shape[1], &a_values[0, 0],
                                    &b_compressed[0, 0], b_compressed.shape[1], &b_plain[0, 0], b_plain.shape[1],
                                    &b_values[0, 0], &counts[0], dst_p, dst_v, logical, s)
                    if c < 0:
                        failed[0] = 1
                    else:
                        written[p] = c
        _scratch_free(s)
    pos = 0
    for p in range(nparts):
        offsets[p] = pos
        pos += written[p]
    if not failed[0]:
        with nogil:
            for p in prange(1, nparts, num_threads=T, schedule="dynamic", chunksize=1):
                if written[p]:
                    memcpy(&out_plain[offsets[p]], part_p[p], written[p] * sizeof(index_t))
                    memcpy(&out_values[offsets[p]], part_v[p], written[p] * sizeof(value_t))
    for p in range(nparts):
        free(part_p[p])
        free(part_v[p])
    free(part_p)
    free(part_v)
    if failed[0]:
        raise MemoryError(f"spgemm: out of memory for the per-thread accumulators ({ncols} columns)")
    return pos


# -- SDDMM ---------------------------------------------------------------------------------------
cdef inline value_t _dot(const value_t* x, const value_t* y, Py_ssize_t K) noexcept nogil:
    cdef value_t s0 = 0, s1 = 0, s2 = 0, s3 = 0
    cdef Py_ssize_t k = 0
    if value_t is float:
        return st_dot_f32(x, y, K)
    elif value_t is double:
        return st_dot_f64(x, y, K)
    else:
        while k + 4 <= K:
            s0 = s0 + x[k] * y[k]
            s1 = s1 + x[k + 1] * y[k + 1]
            s2 = s2 + x[k + 2] * y[k + 2]
            s3 = s3 + x[k + 3] * y[k + 3]
            k += 4
        while k < K:
            s0 = s0 + x[k] * y[k]
            k += 1
        return (s0 + s1) + (s2 + s3)


def sampled_addmm(const index_t[:, ::1] compressed, const index_t[:, ::1] plain,
                  const value_t[:, ::1] values, const value_t[:, :, ::1] mat1,
                  const value_t[:, :, ::1] mat2t, const int64_t[::1] batch1, const int64_t[::1] batch2,
                  value_t beta, value_t alpha, value_t[:, ::1] out, int nthreads):
    """out[b, k] = beta * values[b, k] + alpha * dot(mat1[batch1[b], i], mat2t[batch2[b], j]) for
    every entry k = (i, j) of the csr pattern of batch b. mat1 is (B1, M, K), mat2t (B2, N, K)
    (mat2 transposed, rows contiguous); values and out are (B, nnz)."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t K = mat1.shape[2], N = mat2t.shape[1]
    cdef Py_ssize_t R = B * n, r, b, i, k
    cdef int T = max(1, min(nthreads, R // 64 + 1))
    cdef const value_t* x
    cdef const value_t* y
    cdef value_t zero = 0
    if (plain.shape[0] != B or values.shape[0] != B or out.shape[0] != B or values.shape[1] != nnz
            or out.shape[1] != nnz or batch1.shape[0] != B or batch2.shape[0] != B):
        raise ValueError("sampled_addmm: inconsistent batch or nnz counts")
    if mat1.shape[1] != n or mat2t.shape[2] != K:
        raise ValueError(f"sampled_addmm: mat1 ({mat1.shape[0]}, {mat1.shape[1]}, {mat1.shape[2]}) and mat2t ({mat2t.shape[0]}, "
                         f"{mat2t.shape[1]}, {mat2t.shape[2]}) do not "
                         f"match a pattern of {n} rows")
    for b in range(B):
        if not (0 <= batch1[b] < mat1.shape[0] and 0 <= batch2[b] < mat2t.shape[0]):
            raise ValueError("sampled_addmm: batch map out of range")
    if R == 0 or nnz == 0:
        return
    with nogil:
        for r in prange(R, num_threads=T, schedule="dynamic", chunksize=16):
            b = r // n
            i = r - b * n
            if compressed[b, i + 1] == compressed[b, i]:
                continue
            x = &mat1[batch1[b], i, 0] if K else NULL
            for k in range(compressed[b, i], compressed[b, i + 1]):
                y = &mat2t[batch2[b], plain[b, k], 0] if K else NULL
                out[b, k] = beta * values[b, k] + alpha * (_dot(x, y, K) if K else zero)

