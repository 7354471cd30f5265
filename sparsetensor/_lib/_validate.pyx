"""Invariant checking kernels for compressed (CSR/CSC/BSR/BSC) and COO indices.

The public ``def`` functions take NumPy arrays whose shapes and dtypes the
Python layer (``sparsetensor._validate``) has already checked; they re-check
the cheap shape relations that memory safety depends on, then run a typed
kernel on memoryviews without the GIL. Index *contents* are never trusted:
whatever the values, no kernel reads out of bounds.

Large inputs are split into one chunk per thread. Every chunk records its
first violation and the lowest chunk with one wins, so the reported error does
not depend on the thread count.
"""
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t, INT32_MAX

import numpy as np

# dtype objects compared by the wrappers (cheaper than comparing with np.int32 itself)
_INT32, _INT64 = np.dtype(np.int32), np.dtype(np.int64)
_INDEX_DTYPES = (_INT32, _INT64)

from sparsetensor._lib._prefetch cimport st_prefetch_past
from sparsetensor._lib._types cimport index_t

cdef enum:
    # Positions per cache-sized block: the fast pass over a block is followed
    # by the checks that re-read it while it is still in L2.
    BLOCK = 8192

# Result codes: _COMPRESSED_NAMES[code] or _COO_NAMES[code] is the invariant.
cdef enum:
    E_OK = 0
    E_5_1 = 1
    E_5_2 = 2
    E_5_3 = 3
    E_5_4 = 4
    E_5_5 = 5
    E_5_6 = 6
    E_C4 = 7
    E_C5 = 8

_COMPRESSED_NAMES = (None, "5.1", "5.2", "5.3", "5.4", "5.5", "5.6")
_COO_NAMES = {E_C4: "C4", E_C5: "C5"}

# A chunk's result slot (one row of the work array):
# [start, code, batch_or_dim, i, pos, value]; row nchunks holds only the end.
cdef enum:
    S_START = 0
    S_CODE = 1
    S_A = 2
    S_I = 3
    S_POS = 4
    S_VALUE = 5
    SLOT = 6


cdef inline int64_t _split(int64_t total, int64_t nchunks, int64_t c) noexcept nogil:
    """Start of chunk c when total items are split evenly (no overflow)."""
    return (total // nchunks) * c + (c if c < total % nchunks else total % nchunks)


cdef int _nchunks(nthreads, int64_t nelements):
    """Chunks (= threads) to use: the count handed in (small inputs get 1 from the gate,
    sparsetensor._config.num_threads), at most one per element and at most 1024."""
    cdef int64_t t = nthreads
    if t > nelements:
        t = nelements
    if t <= 1:
        return 1
    return <int>(t if t < 1024 else 1024)


cdef inline void _found(int64_t* slot, int64_t code, int64_t a, int64_t i,
                        int64_t pos, int64_t value) noexcept nogil:
    slot[S_CODE] = code
    slot[S_A] = a
    slot[S_I] = i
    slot[S_POS] = pos
    slot[S_VALUE] = value


# ---------------------------------------------------------------------------
# validate_compressed
# ---------------------------------------------------------------------------

cdef void _diff_chunk(const index_t* cp, int64_t n, int64_t t0, int64_t t1,
                      uint64_t plain_size, int64_t* slot) noexcept nogil:
    """5.3 on the flattened (batch, i - 1) range [t0, t1) of compressed.

    0 <= y - x <= plain_size is tested as y >= x and (y - x mod 2**64) <=
    plain_size, which is exact for any int64 x, y (no signed overflow).
    """
    cdef int64_t t = t0, b, i, i_end, j, blk_end
    cdef const index_t* cb
    cdef index_t x, y
    cdef int bad
    slot[S_CODE] = E_OK
    while t < t1:
        b = t // n
        i = t - b * n + 1
        i_end = i + (t1 - t)
        if i_end > n + 1:
            i_end = n + 1
        cb = cp + b * (n + 1)
        while i < i_end:
            blk_end = i + BLOCK if i + BLOCK < i_end else i_end
            bad = 0
            for j in range(i, blk_end):
                x = cb[j - 1]
                y = cb[j]
                bad = bad | (y < x) | (<uint64_t>y - <uint64_t>x > plain_size)
            if bad:
                for j in range(i, blk_end):
                    x = cb[j - 1]
                    y = cb[j]
                    if y < x or <uint64_t>y - <uint64_t>x > plain_size:
                        _found(slot, E_5_3, b, j, -1, 0)  # value: set by the caller
                        return
            i = blk_end
        t = b * n + i_end - 1


# The main loop of _rows_ok prefetches PF_AHEAD bytes ahead of the chunk of PF_CHUNK entries it is
# about to read: with one thread the hardware prefetcher alone left the loop stalled on its loads.
cdef int64_t PF_CHUNK = 64
cdef int64_t PF_AHEAD = 4096

cdef inline int64_t _block_end(const index_t* cb, int64_t ra, int64_t hi) noexcept nogil:
    """Smallest rb in (ra, hi] with cb[rb] - cb[ra] >= BLOCK, else hi (cb sorted)."""
    cdef int64_t target = <int64_t>cb[ra] + BLOCK
    cdef int64_t lo = ra + 1, mid
    if cb[hi] < target:
        return hi
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if cb[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int64_t _max_of(index_t x) noexcept nogil:
    """The largest value of x's type (x only selects the fused specialisation)."""
    if sizeof(index_t) == 4:
        return 2147483647
    return 9223372036854775807


cdef inline bint _rows_ok(const index_t* cb, const index_t* pb, int64_t ra, int64_t rb,
                          int64_t plain_size) noexcept nogil:
    """Fast check of rows [ra, rb): True iff all of 5.4-5.6 hold there.

    Every value is tested against [0, plain_size) (one unsigned compare, which
    catches negatives too), and every descent pb[k] <= pb[k-1] inside the block
    is counted; descents that fall on the start of a non-empty row are allowed.
    If the two counts agree, each row is strictly increasing. All three loops
    are branch-free: rows are short and their lengths unpredictable.
    """
    cdef int64_t pa = cb[ra], pe = cb[rb], k, r, s, j, k0, k1, line
    cdef index_t flat = 0, at_starts = 0   # counts <= BLOCK: index_t keeps the loops in narrow lanes
    cdef index_t lim = <index_t>(plain_size - 1) if plain_size - 1 <= _max_of(<index_t>0) else _max_of(<index_t>0)
    cdef index_t bad = 0, x
    if pe - pa < 1:
        return True
    bad = (pb[pa] < 0) | (pb[pa] > lim)
    k0 = pa + 1
    while k0 < pe:  # one pass: bounds and descents (vectorised), PF_CHUNK entries at a time
        k1 = k0 + PF_CHUNK if k0 + PF_CHUNK < pe else pe
        for line in range(0, PF_CHUNK * <int64_t>sizeof(index_t), 64):
            st_prefetch_past(pb + k0, PF_AHEAD + line)
        for k in range(k0, k1):
            x = pb[k]
            bad = bad | (x < 0) | (x > lim)
            flat = flat + (x <= pb[k - 1])
        k0 = k1
    if pe - pa < 2:
        return bad == 0
    for r in range(ra, rb):
        s = cb[r]
        j = s if s < pe else pe - 1   # a safe position to read when row r is empty
        j = j if j > pa else pa + 1
        at_starts = at_starts + ((s < cb[r + 1]) & (s > pa) & (pb[j] <= pb[j - 1]))
    return bad == 0 and flat == at_starts


cdef void _rows_locate(const index_t* cb, const index_t* pb, int64_t ra, int64_t rb,
                       int64_t plain_size, int64_t b, int64_t* slot) noexcept nogil:
    """Exact scan of rows [ra, rb): record the first failing position."""
    cdef int64_t r, s, e, k, v, code
    for r in range(ra, rb):
        s = cb[r]
        e = cb[r + 1]
        for k in range(s, e):
            v = pb[k]
            if v < 0:
                code = E_5_4
            elif v >= plain_size:
                code = E_5_5
            elif k > s and v <= pb[k - 1]:
                code = E_5_6
            else:
                continue
            _found(slot, code, b, r, k, v)
            return


cdef void _plain_chunk(const index_t* cp, const index_t* pp, int64_t n, int64_t nnz,
                       int64_t r0, int64_t r1, int64_t plain_size,
                       int64_t* slot) noexcept nogil:
    """5.4-5.6 on the flattened (batch, row) range [r0, r1); 5.1-5.3 hold."""
    cdef int64_t r = r0, b, seg_end, ra, rb
    cdef const index_t* cb
    cdef const index_t* pb
    slot[S_CODE] = E_OK
    while r < r1:
        b = r // n
        ra = r - b * n
        seg_end = ra + (r1 - r)
        if seg_end > n:
            seg_end = n
        cb = cp + b * (n + 1)
        pb = pp + b * nnz
        while ra < seg_end:
            rb = _block_end(cb, ra, seg_end)
            if not _rows_ok(cb, pb, ra, rb, plain_size):
                _rows_locate(cb, pb, ra, rb, plain_size, b, slot)
                return
            ra = rb
        r = b * n + seg_end


cdef inline int64_t _row_weight(const index_t* cp, int64_t n, int64_t nnz,
                                int64_t nrows, int64_t r) noexcept nogil:
    """Work up to flattened row r: positions before it plus rows before it."""
    cdef int64_t b
    if r >= nrows:
        return (nrows // n) * nnz + nrows
    b = r // n
    return b * nnz + cp[b * (n + 1) + (r - b * n)] + r


cdef int64_t _compressed_kernel(const index_t[:, ::1] compressed,
                                const index_t[:, ::1] plain, int64_t plain_size,
                                int nchunks, int64_t[:, ::1] work) noexcept nogil:
    """Return the work row holding the first violation, or -1 if valid."""
    cdef int64_t nbatch = compressed.shape[0], n = compressed.shape[1] - 1
    cdef int64_t nnz = plain.shape[1], nrows, total, target, lo, hi, mid
    cdef int64_t b, c, v
    cdef const index_t* cp
    cdef const index_t* pp
    if nbatch == 0:
        return -1
    cp = &compressed[0, 0]

    # 5.1 and 5.2 for all batches first.
    for b in range(nbatch):
        v = cp[b * (n + 1)]
        if v != 0:
            _found(&work[0, 0], E_5_1, b, 0, -1, v)
            return 0
        v = cp[b * (n + 1) + n]
        if v != nnz:
            _found(&work[0, 0], E_5_2, b, n, -1, v)
            return 0
    if n == 0:
        return -1  # then nnz == 0 by 5.1 and 5.2

    # 5.3: equal chunks of the flattened differences.
    nrows = nbatch * n
    for c in range(nchunks + 1):
        work[c, S_START] = _split(nrows, nchunks, c)
    if nchunks == 1:
        _diff_chunk(cp, n, 0, nrows, <uint64_t>plain_size, &work[0, 0])
    else:
        for c in prange(nchunks, nogil=True, schedule='static', num_threads=nchunks):
            _diff_chunk(cp, n, work[c, S_START], work[c + 1, S_START],
                        <uint64_t>plain_size, &work[c, 0])
    for c in range(nchunks):
        if work[c, S_CODE] != E_OK:
            return c
    if nnz == 0:
        return -1

    # 5.4-5.6: chunks of flattened rows balanced by positions + rows. Now that
    # 5.1-5.3 hold, compressed is sorted within each batch, so the weight is
    # monotonic and every compressed value is a valid position in plain.
    pp = &plain[0, 0]
    total = _row_weight(cp, n, nnz, nrows, nrows)
    work[0, S_START] = 0
    for c in range(1, nchunks + 1):
        target = _split(total, nchunks, c)
        lo = work[c - 1, S_START]
        hi = nrows
        while lo < hi:
            mid = lo + (hi - lo) // 2
            if _row_weight(cp, n, nnz, nrows, mid) < target:
                lo = mid + 1
            else:
                hi = mid
        work[c, S_START] = lo
    if nchunks == 1:
        _plain_chunk(cp, pp, n, nnz, 0, nrows, plain_size, &work[0, 0])
    else:
        for c in prange(nchunks, nogil=True, schedule='static', num_threads=nchunks):
            _plain_chunk(cp, pp, n, nnz, work[c, S_START], work[c + 1, S_START],
                         plain_size, &work[c, 0])
    for c in range(nchunks):
        if work[c, S_CODE] != E_OK:
            return c
    return -1


def validate_compressed(compressed, plain, plain_size, nthreads):
    """Check the compressed-index invariants 5.1-5.6 of a batch of CSR-like indices.

    Parameters
    ----------
    compressed : ndarray, shape (B, n + 1), int32 or int64, C-contiguous
        Compressed indices (``crow_indices`` of CSR/BSR, ``ccol_indices`` of CSC/BSC),
        batch dimensions flattened into B.
    plain : ndarray, shape (B, nnz), same dtype, C-contiguous
        Plain indices (``col_indices`` / ``row_indices``).
    plain_size : int
        Number of (block) columns for CSR/BSR, (block) rows for CSC/BSC; 0 <= plain_size < 2**63.
    nthreads : int
        Threads to use for large inputs; <= 1 runs serially.

    Returns
    -------
    None or tuple
        None if valid, else ``(invariant, batch, i, pos, value)`` for the first
        violation: 5.1/5.2 over all batches first, then 5.3 (``i`` is the 1-based
        compressed index, ``pos = -1``, ``value`` the difference), then the first
        failing (batch, row) for 5.4-5.6 (``i`` = row, ``pos`` = position in the
        batch's plain indices, ``value`` = the offending plain index).

    Examples
    --------
    >>> import numpy as np
    >>> c = np.array([[0, 2, 3]], np.int32); p = np.array([[0, 2, 1]], np.int32)
    >>> validate_compressed(c, p, 3, 1) is None
    True
    >>> validate_compressed(c, np.array([[2, 0, 1]], np.int32), 3, 1)
    ('5.6', 0, 0, 1, 0)
    """
    cdef const int32_t[:, ::1] c32, p32
    cdef const int64_t[:, ::1] c64, p64
    cdef int64_t ps = plain_size
    cdef int64_t[:, ::1] work
    cdef int64_t res
    cdef int nchunks
    if compressed.dtype != plain.dtype or compressed.dtype not in _INDEX_DTYPES:
        raise TypeError(f"expected int32 or int64 indices of one dtype, got "
                        f"{compressed.dtype=} and {plain.dtype=}")
    if (compressed.ndim != 2 or plain.ndim != 2 or compressed.shape[1] < 1
            or plain.shape[0] != compressed.shape[0]):
        raise ValueError(f"expected compressed (B, n + 1) and plain (B, nnz), got "
                         f"{compressed.shape=} and {plain.shape=}")
    if ps < 0:
        raise ValueError(f"expected plain_size >= 0, got {plain_size=}")
    nchunks = _nchunks(nthreads, compressed.size + plain.size)
    work = np.zeros((nchunks + 1, SLOT), np.int64)
    if compressed.dtype == _INT32:
        c32 = compressed
        p32 = plain
        with nogil:
            res = _compressed_kernel(c32, p32, ps, nchunks, work)
    else:
        c64 = compressed
        p64 = plain
        with nogil:
            res = _compressed_kernel(c64, p64, ps, nchunks, work)
    if res < 0:
        return None
    b, i = int(work[res, S_A]), int(work[res, S_I])
    if work[res, S_CODE] == E_5_3:
        # The exact difference, which need not fit in int64.
        return ("5.3", b, i, -1, int(compressed[b, i]) - int(compressed[b, i - 1]))
    return (_COMPRESSED_NAMES[work[res, S_CODE]], b, i, int(work[res, S_POS]),
            int(work[res, S_VALUE]))


# ---------------------------------------------------------------------------
# validate_coo
# ---------------------------------------------------------------------------

cdef void _bounds_chunk(const index_t* ip, const int64_t* shape, int64_t nnz,
                        int64_t t0, int64_t t1, int64_t* slot) noexcept nogil:
    """C4/C5 on the flattened (dim, position) range [t0, t1)."""
    cdef int64_t t = t0, d, k, k_end, j, blk_end, size
    cdef index_t hi, v
    cdef const index_t* row
    cdef int bad
    slot[S_CODE] = E_OK
    while t < t1:
        d = t // nnz
        k = t - d * nnz
        k_end = k + (t1 - t)
        if k_end > nnz:
            k_end = nnz
        row = ip + d * nnz
        # Largest valid index as index_t: size - 1 clamped to [-1, max(index_t)].
        size = shape[d] if shape[d] > 0 else 0
        if index_t is int32_t:
            hi = <index_t>(size - 1 if size - 1 < INT32_MAX else INT32_MAX)
        else:
            hi = <index_t>(size - 1)
        while k < k_end:
            blk_end = k + BLOCK if k + BLOCK < k_end else k_end
            bad = 0
            for j in range(k, blk_end):
                v = row[j]
                bad = bad | (v < 0) | (v > hi)
            if bad:
                for j in range(k, blk_end):
                    v = row[j]
                    if v < 0:
                        _found(slot, E_C4, d, -1, j, v)
                        return
                    if v > hi:
                        _found(slot, E_C5, d, -1, j, v)
                        return
            k = blk_end
        t = d * nnz + k_end


cdef int64_t _coo_bounds_kernel(const index_t[:, ::1] indices, const int64_t[::1] shape,
                                int nchunks, int64_t[:, ::1] work) noexcept nogil:
    cdef int64_t nsparse = indices.shape[0], nnz = indices.shape[1], total, c
    cdef const index_t* ip
    total = nsparse * nnz
    if total == 0:
        return -1
    ip = &indices[0, 0]
    for c in range(nchunks + 1):
        work[c, S_START] = _split(total, nchunks, c)
    if nchunks == 1:
        _bounds_chunk(ip, &shape[0], nnz, 0, total, &work[0, 0])
    else:
        for c in prange(nchunks, nogil=True, schedule='static', num_threads=nchunks):
            _bounds_chunk(ip, &shape[0], nnz, work[c, S_START], work[c + 1, S_START],
                          &work[c, 0])
    for c in range(nchunks):
        if work[c, S_CODE] != E_OK:
            return c
    return -1


def _check_coo_args(indices, shape):
    if indices.dtype not in _INDEX_DTYPES:
        raise TypeError(f"expected int32 or int64 indices, got {indices.dtype=}")
    if shape.dtype != _INT64:
        raise TypeError(f"expected int64 shape, got {shape.dtype=}")
    if indices.ndim != 2 or shape.shape != (indices.shape[0],):
        raise ValueError(f"expected indices (S, nnz) and shape (S,), got "
                         f"{indices.shape=} and {shape.shape=}")


def validate_coo(indices, shape, nthreads):
    """Check 0 <= indices[d, k] (C4) and indices[d, k] < shape[d] (C5).

    Parameters
    ----------
    indices : ndarray, shape (S, nnz), int32 or int64, C-contiguous
    shape : ndarray, shape (S,), int64
        Sizes of the sparse dimensions.
    nthreads : int
        Threads to use for large inputs; <= 1 runs serially.

    Returns
    -------
    None or tuple
        None if valid, else ``(invariant, d, pos, value)`` for the first
        violation in (d, pos) order.

    Examples
    --------
    >>> import numpy as np
    >>> validate_coo(np.array([[0, 1], [2, 3]]), np.array([2, 3]), 1)
    ('C5', 1, 1, 3)
    """
    cdef const int32_t[:, ::1] i32
    cdef const int64_t[:, ::1] i64
    cdef const int64_t[::1] shp
    cdef int64_t[:, ::1] work
    cdef int64_t res
    cdef int nchunks
    _check_coo_args(indices, shape)
    shp = shape
    nchunks = _nchunks(nthreads, indices.size)
    work = np.zeros((nchunks + 1, SLOT), np.int64)
    if indices.dtype == _INT32:
        i32 = indices
        with nogil:
            res = _coo_bounds_kernel(i32, shp, nchunks, work)
    else:
        i64 = indices
        with nogil:
            res = _coo_bounds_kernel(i64, shp, nchunks, work)
    if res < 0:
        return None
    return (_COO_NAMES[work[res, S_CODE]], int(work[res, S_A]),
            int(work[res, S_POS]), int(work[res, S_VALUE]))


# ---------------------------------------------------------------------------
# coo_is_coalesced
# ---------------------------------------------------------------------------

cdef bint _coalesced_chunk(const index_t* ip, int64_t nsparse, int64_t nnz,
                           int64_t k0, int64_t k1) noexcept nogil:
    """True iff column k-1 < column k lexicographically for all k in [k0, k1)."""
    cdef uint8_t less[BLOCK]
    cdef int64_t k, blk_end, j, d
    cdef index_t x, y
    cdef const index_t* row
    cdef int all_less
    k = k0
    while k < k1:
        blk_end = k + BLOCK if k + BLOCK < k1 else k1
        # Lexicographic "<" from the last dimension to the first:
        # less = a[d] < b[d] or (a[d] == b[d] and less on dimensions > d).
        row = ip + (nsparse - 1) * nnz
        for j in range(k, blk_end):
            less[j - k] = row[j - 1] < row[j]
        for d in range(nsparse - 2, -1, -1):
            row = ip + d * nnz
            for j in range(k, blk_end):
                x = row[j - 1]
                y = row[j]
                less[j - k] = (x < y) | ((x == y) & less[j - k])
        all_less = 1
        for j in range(blk_end - k):
            all_less = all_less & less[j]
        if not all_less:
            return False
        k = blk_end
    return True


cdef bint _coalesced_kernel(const index_t[:, ::1] indices, int nchunks,
                            int64_t[:, ::1] work) noexcept nogil:
    cdef int64_t nsparse = indices.shape[0], nnz = indices.shape[1], c
    cdef const index_t* ip
    if nnz <= 1:
        return True
    if nsparse == 0:
        return False
    ip = &indices[0, 0]
    # Pairs (k - 1, k) for k in [1, nnz).
    for c in range(nchunks + 1):
        work[c, S_START] = 1 + _split(nnz - 1, nchunks, c)
    if nchunks == 1:
        return _coalesced_chunk(ip, nsparse, nnz, 1, nnz)
    for c in prange(nchunks, nogil=True, schedule='static', num_threads=nchunks):
        work[c, S_CODE] = _coalesced_chunk(ip, nsparse, nnz, work[c, S_START],
                                           work[c + 1, S_START])
    for c in range(nchunks):
        if not work[c, S_CODE]:
            return False
    return True


def coo_is_coalesced(indices, shape, nthreads):
    """True iff the columns ``indices[:, k]`` are strictly increasing lexicographically.

    That is, the COO indices are sorted and free of duplicates. Bounds must
    already be valid (see `validate_coo`); with S = 0 sparse dimensions the
    indices are coalesced iff nnz <= 1.

    Parameters
    ----------
    indices : ndarray, shape (S, nnz), int32 or int64, C-contiguous
    shape : ndarray, shape (S,), int64
    nthreads : int
        Threads to use for large inputs; <= 1 runs serially.

    Examples
    --------
    >>> import numpy as np
    >>> shape = np.array([2, 3])
    >>> coo_is_coalesced(np.array([[0, 0, 1], [0, 2, 1]]), shape, 1)
    True
    >>> coo_is_coalesced(np.array([[0, 0], [1, 1]]), shape, 1)
    False
    """
    cdef const int32_t[:, ::1] i32
    cdef const int64_t[:, ::1] i64
    cdef int64_t[:, ::1] work
    cdef bint res
    cdef int nchunks
    _check_coo_args(indices, shape)
    nchunks = _nchunks(nthreads, indices.size)
    work = np.zeros((nchunks + 1, SLOT), np.int64)
    if indices.dtype == _INT32:
        i32 = indices
        with nogil:
            res = _coalesced_kernel(i32, nchunks, work)
    else:
        i64 = indices
        with nogil:
            res = _coalesced_kernel(i64, nchunks, work)
    return bool(res)
