"""COO coalescing kernels (Cython, OpenMP).

Each index column is linearised to an int64 key (row-major over the sparse shape),
(key, payload) pairs are sorted, and the runs of equal keys are reduced in parallel
(``_runs.pxd``). Keys of at most 32 bits below one radix digit are bucket-sorted:
one scatter pass by the top digit, then each bucket sorted in cache on 32-bit keys;
wider keys take a parallel LSD radix sort of int64 keys (the passes are in
``_radix.pxd``). The payload is the original position, or, for scalar values of at
most 8 bytes, the value's bits (as many bytes or fewer, and the reduction then reads
the values in order instead of gathering them). The compressed layouts' kernels are
in ``_sum_duplicates.pyx``.

Inputs are trusted to have the shapes and dtypes documented in ``_coalesce.pyi``:
the Python wrappers in ``sparsetensor._coalesce`` check them. Index values are
not trusted: they are bounds-checked here before they are used to address memory.
"""

from cython.parallel cimport prange
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memset

import numpy as np

from ._parallel cimport st_omp_thread_num
from ._pool cimport empty
from ._radix cimport (_key_quot, st_bscatter_p8, st_bscatter_p16, st_bscatter_p32, st_bscatter_p64,
                      st_bucket_sort_p8, st_bucket_sort_p16, st_bucket_sort_p32, st_bucket_sort_p64, st_chunk_of,
                      st_scatter_p8, st_scatter_p16, st_scatter_p32, st_scatter_p64)
from ._prefetch cimport st_prefetch
from ._runs cimport _at, _lo, _reduce_run, pos_t, sum_t
from ._types cimport index_t

# What the radix sort carries with each key: a position (int32, int64), or the raw bits
# of a scalar value (1, 2, 4 or 8 bytes; 4 and 8 as int32/int64).
ctypedef fused payload_t:
    uint8_t
    uint16_t
    int32_t
    int64_t

# Widest radix digit: 2**11 buckets of per-thread counters stay in L1/L2.
cdef int RADIX_BITS = 11
# Keys below 2**53 are exact in a double: de-linearise by reciprocal multiply.
cdef int64_t DOUBLE_EXACT = (<int64_t>1) << 53
# How far ahead (in sorted positions) the value gather prefetches.
cdef Py_ssize_t PREFETCH = 24
# Chunks per thread of the scans and sort passes, dynamically scheduled: on a busy machine a
# thread the OS pauses holds up one small chunk, not half of the work.
cdef Py_ssize_t SORT_CHUNKS_PER_THREAD = 4

INT32_MAX = 2**31 - 1


def radix_digits(int nbits):
    """``(passes, bits per pass)`` of the LSD radix sort of ``nbits``-bit keys."""
    if nbits <= 0:
        return 0, 0
    cdef int passes = (nbits + RADIX_BITS - 1) // RADIX_BITS
    return passes, (nbits + passes - 1) // passes


cdef inline void _record_bad(int64_t* state, Py_ssize_t i, Py_ssize_t d, int64_t v) noexcept nogil:
    """A chunk's first index out of bounds: position, sparse dim, value (state[0:3])."""
    state[0] = i
    state[1] = d
    state[2] = v


# -- COO: order check ----------------------------------------------------------------------
cdef void _order_chunk(const index_t* idx, Py_ssize_t S, Py_ssize_t n, const int64_t* shape,
                       Py_ssize_t lo, Py_ssize_t hi, bint stop_early, int64_t* state) noexcept nogil:
    # state: err_pos, err_dim, err_value, unsorted, duplicate
    cdef Py_ssize_t i, d
    cdef int64_t v, w
    cdef int cmp
    for i in range(lo, hi):
        for d in range(S):
            v = idx[d * n + i]
            if v < 0 or v >= shape[d]:
                _record_bad(state, i, d, v)
                return
        if i == 0:
            continue
        cmp = 0
        for d in range(S):
            v = idx[d * n + i]
            w = idx[d * n + i - 1]
            if v != w:
                cmp = 1 if v > w else -1
                break
        if cmp < 0:
            state[3] = 1
            if stop_early:
                return
        elif cmp == 0:
            state[4] = 1


cdef object _first_error(const int64_t[:, ::1] state):
    """The error of the first chunk that found one, or None (chunks are in order)."""
    cdef Py_ssize_t c
    for c in range(state.shape[0]):
        if state[c, 0] >= 0:
            return int(state[c, 0]), int(state[c, 1]), int(state[c, 2])
    return None


cdef _check_shape(str kernel, Py_ssize_t S, Py_ssize_t got):
    if got != S:
        raise ValueError(f"{kernel}: shape must have one size per index row ({S}), got {got}")


def coo_order(const index_t[:, ::1] indices, const int64_t[::1] shape, bint stop_early, int nthreads):
    """Bounds (C4/C5) and order of the index columns.

    Returns ``(error, unsorted, duplicate)``: ``error`` is ``(invariant, dim, position, value)``
    or None; ``unsorted`` says a column is lexicographically smaller than the one before it,
    ``duplicate`` that a column equals the one before it. With ``stop_early`` a chunk stops
    at its first unsorted pair, leaving the rest of its bounds unchecked.
    """
    cdef Py_ssize_t S = indices.shape[0], n = indices.shape[1], c
    _check_shape("coo_order", S, shape.shape[0])
    cdef Py_ssize_t nchunks = _sort_chunks(n, nthreads)
    state_arr = np.zeros((nchunks, 5), np.int64)
    state_arr[:, 0] = -1
    cdef int64_t[:, ::1] state = state_arr
    cdef const index_t* idx = &indices[0, 0] if S > 0 and n > 0 else NULL
    cdef const int64_t* shp = &shape[0] if S > 0 else NULL
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _order_chunk(idx, S, n, shp, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), stop_early, &state[c, 0])
    unsorted = bool(state_arr[:, 3].any())
    for c in range(nchunks):
        if state[c, 0] >= 0:
            pos, d, value = state_arr[c, :3].tolist()
            return ("C4" if value < 0 else "C5", d, pos, value), unsorted, False
        if stop_early and state[c, 3]:
            break  # this chunk's bounds are partly unchecked: a later error may not be the first
    return None, unsorted, bool(state_arr[:, 4].any())


# -- COO: keys and radix sort -----------------------------------------------------------------
cdef void _linearize_chunk(const index_t* idx, Py_ssize_t S, Py_ssize_t n, const int64_t* shape,
                           Py_ssize_t lo, Py_ssize_t hi, int64_t* keys, int shift, int64_t mask, int64_t* hist,
                           int64_t* state) noexcept nogil:
    # state: err_pos, err_dim, err_value, OR of the keys, AND of the keys
    cdef Py_ssize_t i, d
    cdef int64_t v, key, s0, s1, key_or = 0, key_and = -1
    if S == 2:
        s0 = shape[0]
        s1 = shape[1]
        for i in range(lo, hi):
            v = idx[i]
            key = idx[n + i]
            if v < 0 or v >= s0:
                _record_bad(state, i, 0, v)
                return
            if key < 0 or key >= s1:
                _record_bad(state, i, 1, key)
                return
            key = v * s1 + key
            keys[i] = key
            hist[(key >> shift) & mask] += 1
            key_or = key_or | key
            key_and = key_and & key
    else:
        for i in range(lo, hi):
            key = 0
            for d in range(S):
                v = idx[d * n + i]
                if v < 0 or v >= shape[d]:
                    _record_bad(state, i, d, v)
                    return
                key = key * shape[d] + v
            keys[i] = key
            hist[(key >> shift) & mask] += 1
            key_or = key_or | key
            key_and = key_and & key
    state[3] = key_or
    state[4] = key_and


cdef void _hist_chunk(const int64_t* keys, Py_ssize_t lo, Py_ssize_t hi, int shift, int64_t mask,
                      int64_t* hist) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(lo, hi):
        hist[(keys[i] >> shift) & mask] += 1


# Per-thread work area of the scatter, in int64 words per bucket: staged key and position
# lines (8 + 8), region starts, destination chunk and its end, previous key.
cdef Py_ssize_t WORK_PER_BUCKET = 20
# Pairs below this many bytes stay in cache: scatter directly, without streaming stores.
cdef Py_ssize_t STREAM_MIN_BYTES = 1 << 23


cdef inline void _scatter_chunk(const int64_t* keys, const payload_t* pos, int64_t* kout, payload_t* pout,
                                Py_ssize_t lo, Py_ssize_t hi, int shift, int64_t mask, int64_t* offs, int64_t* work,
                                int64_t* counts, Py_ssize_t n, Py_ssize_t nchunks, int count,
                                bint streaming) noexcept nogil:
    if payload_t is uint8_t:
        st_scatter_p8(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, count, streaming)
    elif payload_t is uint16_t:
        st_scatter_p16(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, count, streaming)
    elif payload_t is int32_t:
        st_scatter_p32(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, count, streaming)
    else:
        st_scatter_p64(keys, pos, kout, pout, lo, hi, shift, mask, offs, work, counts, n, nchunks, count, streaming)


cdef bint _radix_sort(int64_t* keys, int64_t* kbuf, const payload_t* first, payload_t* pos, payload_t* pbuf,
                      Py_ssize_t n, int passes, int width, int64_t varying, Py_ssize_t nchunks, int nthreads,
                      int64_t* hist, int64_t* offs, int64_t* work, Py_ssize_t work_stride,
                      Py_ssize_t nout_chunks, int64_t* heads) noexcept nogil:
    """Parallel LSD radix sort of (key, payload) pairs, over ``nchunks`` chunks of the input
    (dynamically scheduled, a few per thread: a thread that the OS pauses holds up little).

    Digit ``p`` holds key bits ``[p * width, (p + 1) * width)``; digits without a ``varying``
    bit (all keys agree on them) are skipped. Each pass counts the digit per chunk (``hist``,
    ``nchunks x nb``; on entry it holds digit 0's counts of ``keys``), turns the counts into
    each chunk's offset per bucket (``offs``) and scatters stably. The last pass also counts
    the run heads of the sorted keys per output chunk (``nout_chunks`` of them) into ``heads``
    (``nthreads x nout_chunks``, summed and corrected into ``heads[0, :]`` here).

    The payload of key ``i`` is ``first[i]`` (a scalar value), or ``i`` when ``first`` is NULL
    (a position); ``pos`` and ``pbuf`` are scratch for it. Returns True when the sorted pairs
    ended in ``(kbuf, pbuf)``, False for ``(keys, pos)``; at least one digit must vary.
    """
    cdef Py_ssize_t nb = (<Py_ssize_t>1) << width, b, c, t, i, size, begin
    cdef int64_t mask = nb - 1, run, total
    cdef int p, q, last = passes - 1
    cdef int64_t* src_k = keys
    cdef int64_t* dst_k = kbuf
    cdef int64_t* tk
    cdef payload_t* src_p = pos
    cdef payload_t* dst_p = pbuf
    cdef payload_t* tp
    cdef bint identity = True, counted = True
    cdef bint streaming = n * (sizeof(int64_t) + sizeof(payload_t)) >= STREAM_MIN_BYTES
    while last >= 0 and (varying >> (last * width)) & mask == 0:
        last = last - 1
    for p in range(last + 1):
        if (varying >> (p * width)) & mask == 0:
            counted = False
            continue
        if not counted:  # digit 0 was counted on entry; later ones are counted here
            memset(hist, 0, nchunks * nb * sizeof(int64_t))
            for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
                _hist_chunk(src_k, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), p * width, mask, hist + c * nb)
        counted = False
        run = 0
        for b in range(nb):
            for c in range(nchunks):
                offs[c * nb + b] = run
                run = run + hist[c * nb + b]
        if p == last:
            memset(heads, 0, nthreads * nout_chunks * sizeof(int64_t))
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            t = st_omp_thread_num()
            _scatter_chunk(src_k, first if identity else src_p, dst_k, dst_p, _lo(c, n, nchunks),
                           _lo(c + 1, n, nchunks), p * width, mask, offs + c * nb, work + t * work_stride,
                           heads + t * nout_chunks, n, nout_chunks, p == last, streaming)
        identity = False
        tk = src_k
        src_k = dst_k
        dst_k = tk
        tp = src_p
        src_p = dst_p
        dst_p = tp
    for i in range(nout_chunks):
        total = 0
        for t in range(nthreads):
            total = total + heads[t * nout_chunks + i]
        heads[i] = total
    # the first element of each chunk's part of a bucket was counted as a head
    for c in range(nchunks):
        for b in range(nb):
            size = hist[c * nb + b]
            begin = offs[c * nb + b] - size  # the offsets now hold the ends
            if size > 0 and begin > 0 and src_k[begin] == src_k[begin - 1]:
                heads[st_chunk_of(begin, n, nout_chunks)] -= 1
    return src_k == kbuf


cdef Py_ssize_t _sort_chunks(Py_ssize_t n, int nthreads):
    """Chunks of the key build and scatters: several per thread (dynamic schedule), 1 serial."""
    return max(1, min(n, SORT_CHUNKS_PER_THREAD * nthreads if nthreads > 1 else 1))


def _linearized(const index_t[:, ::1] indices, const int64_t[::1] shape, int shift, int width,
                Py_ssize_t nchunks, int nthreads):
    """The keys of the index columns, checking bounds, with per-chunk counts of the digit
    ``(key >> shift) & (2**width - 1)``. Returns ``(error, keys, hist, state)``; ``error``
    is ``(C4 | C5, dim, position, value)`` for the first index out of bounds, else None."""
    cdef Py_ssize_t S = indices.shape[0], n = indices.shape[1], c
    _check_shape("coo sort", S, shape.shape[0])
    cdef int64_t mask = ((<int64_t>1) << width) - 1
    keys_arr = empty(n, np.int64)
    hist_arr = np.zeros((nchunks, mask + 1), np.int64)
    state_arr = np.full((nchunks, 5), -1, np.int64)
    cdef int64_t[::1] keys = keys_arr
    cdef int64_t[:, ::1] hist = hist_arr
    cdef int64_t[:, ::1] state = state_arr
    cdef const index_t* idx = &indices[0, 0] if S > 0 and n > 0 else NULL
    cdef const int64_t* shp = &shape[0] if S > 0 else NULL
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _linearize_chunk(idx, S, n, shp, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), &keys[0], shift, mask,
                             &hist[c, 0], &state[c, 0])
    found = _first_error(state_arr)
    if found is not None:
        pos, d, value = found
        return ("C4" if value < 0 else "C5", d, pos, value), None, None, None
    return None, keys_arr, hist_arr, state_arr


def coo_sort(const index_t[:, ::1] indices, const int64_t[::1] shape, int nbits, bint presorted,
             const payload_t[::1] payload, Py_ssize_t nout_chunks, int nthreads):
    """Linearise the index columns to int64 keys (checking bounds), sort (key, payload) pairs,
    and find the runs of equal keys.

    ``nbits`` is the bit length of the largest possible key, ``prod(shape) - 1``. The payload
    is the original position of each key, or, when ``payload`` is not empty, its value (raw
    bits of a scalar). Returns ``(error, keys, payload, offsets)``: the keys in sorted order,
    the sorted payloads (positions are int32 when nnz allows, else int64; empty when
    ``presorted`` says the columns are in order already: the identity) and, for
    ``nout_chunks`` near-equal chunks of the sorted keys, the output offset of each chunk's
    first run (``nout_chunks + 1`` entries, the last one the number of runs).
    """
    cdef Py_ssize_t n = indices.shape[1], c
    cdef Py_ssize_t nchunks = _sort_chunks(n, nthreads)
    if payload.shape[0] != 0 and payload.shape[0] != n:
        raise ValueError(f"coo_sort: payload must be empty or have one item per index column ({n}), "
                         f"got {payload.shape[0]}")
    cdef int passes, width
    passes, width = radix_digits(nbits)
    cdef Py_ssize_t nb = (<Py_ssize_t>1) << width
    error, keys_arr, hist_arr, state_arr = _linearized(indices, shape, 0, width, nchunks, nthreads)
    if error is not None:
        return error, None, None, None
    cdef int64_t[::1] keys = keys_arr
    cdef int64_t[:, ::1] hist = hist_arr
    cdef int64_t varying = int(np.bitwise_or.reduce(state_arr[:, 3]) ^ np.bitwise_and.reduce(state_arr[:, 4]))
    if presorted or varying == 0:
        return None, keys_arr, np.empty(0, np.int64), run_offsets(keys_arr, nout_chunks, nthreads)
    kbuf_arr = empty(n, np.int64)
    offs_arr = empty((nchunks, nb), np.int64)
    heads_arr = np.zeros((nthreads, nout_chunks), np.int64)
    cdef Py_ssize_t stride = (WORK_PER_BUCKET * nb + 7) // 8 * 8  # int64 words, whole 64-byte lines
    work_arr = empty(nthreads * stride + 8, np.int64)
    cdef int64_t[::1] kbuf = kbuf_arr
    cdef int64_t[:, ::1] offs = offs_arr
    cdef int64_t[:, ::1] heads = heads_arr
    cdef int64_t[::1] workv = work_arr
    cdef int64_t* work = &workv[0]
    work = work + ((64 - (<size_t>work) % 64) % 64) // 8  # align to 64 bytes
    cdef payload_t[::1] pa, pb
    cdef int32_t[::1] p32, b32
    cdef int64_t[::1] p64, b64
    cdef bint swapped
    if payload.shape[0] > 0:  # carry the values
        dtype = np.asarray(payload).dtype
        pos_arr, pbuf_arr = empty(n, dtype), empty(n, dtype)
        pa, pb = pos_arr, pbuf_arr
        with nogil:
            swapped = _radix_sort(&keys[0], &kbuf[0], &payload[0], &pa[0], &pb[0], n, passes, width, varying,
                                  nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride, nout_chunks,
                                  &heads[0, 0])
    elif n <= INT32_MAX:  # carry int32 positions
        pos_arr, pbuf_arr = empty(n, np.int32), empty(n, np.int32)
        p32, b32 = pos_arr, pbuf_arr
        with nogil:
            swapped = _radix_sort(&keys[0], &kbuf[0], <const int32_t*>NULL, &p32[0], &b32[0], n, passes, width,
                                  varying, nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride,
                                  nout_chunks, &heads[0, 0])
    else:
        pos_arr, pbuf_arr = empty(n, np.int64), empty(n, np.int64)
        p64, b64 = pos_arr, pbuf_arr
        with nogil:
            swapped = _radix_sort(&keys[0], &kbuf[0], <const int64_t*>NULL, &p64[0], &b64[0], n, passes, width,
                                  varying, nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride,
                                  nout_chunks, &heads[0, 0])
    offsets = np.zeros(nout_chunks + 1, np.int64)
    np.cumsum(heads_arr[0], out=offsets[1:])
    if swapped:
        return None, kbuf_arr, pbuf_arr, offsets
    return None, keys_arr, pos_arr, offsets


cdef void _head_flags_chunk(const index_t* idx, Py_ssize_t S, Py_ssize_t n, const pos_t* perm,
                            Py_ssize_t lo, Py_ssize_t hi, int64_t* keys) noexcept nogil:
    cdef Py_ssize_t i, d, p, q
    for i in range(lo, hi):
        keys[i] = 0
        if i == 0:
            continue
        p = _at(perm, i)
        q = _at(perm, i - 1)
        for d in range(S):
            if idx[d * n + p] != idx[d * n + q]:
                keys[i] = 1
                break


def coo_head_flags(const index_t[:, ::1] indices, const pos_t[::1] perm, int64_t[::1] keys, int nthreads):
    """``keys[i] = 1`` where column ``perm[i]`` differs from column ``perm[i-1]``, else 0
    (the comparison-sort path: a cumulative sum then gives run keys). Empty ``perm`` is the identity."""
    cdef Py_ssize_t S = indices.shape[0], n = indices.shape[1], c
    cdef Py_ssize_t nt = max(1, min(nthreads, n))
    if (perm.shape[0] != 0 and perm.shape[0] != n) or keys.shape[0] != n:
        raise ValueError(f"coo_head_flags: perm must be empty or of length {n} and keys of length {n}, got "
                         f"{perm.shape[0]} and {keys.shape[0]}")
    cdef const index_t* idx = &indices[0, 0] if S > 0 and n > 0 else NULL
    cdef const pos_t* pp = &perm[0] if perm.shape[0] > 0 else NULL
    with nogil:
        for c in prange(nt, schedule="static", num_threads=nt):
            _head_flags_chunk(idx, S, n, pp, _lo(c, n, nt), _lo(c + 1, n, nt), &keys[0])


# -- COO: runs and outputs ----------------------------------------------------------------------
cdef int64_t _count_heads(const int64_t* keys, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t count = 0
    for i in range(lo, hi):
        if i == 0 or keys[i] != keys[i - 1]:
            count = count + 1
    return count


def run_offsets(const int64_t[::1] keys, Py_ssize_t nchunks, int nthreads):
    """Output offset of each chunk's first run head (``nchunks + 1`` entries; the last is the
    number of distinct keys). Chunk ``c`` covers ``keys[lo(c):lo(c+1)]`` (near-equal split)."""
    cdef Py_ssize_t n = keys.shape[0], c
    counts_arr = np.zeros(nchunks + 1, np.int64)
    cdef int64_t[::1] counts = counts_arr
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            counts[c + 1] = _count_heads(&keys[0], _lo(c, n, nchunks), _lo(c + 1, n, nchunks))
    return np.cumsum(counts_arr)


cdef inline void _put_index(uint8_t* base, Py_ssize_t k, int size, int64_t v) noexcept nogil:
    if size == 8:
        (<int64_t*>base)[k] = v
    else:
        (<int32_t*>base)[k] = <int32_t>v


cdef inline int64_t _get_index(const uint8_t* base, Py_ssize_t k, int size) noexcept nogil:
    if size == 8:
        return (<const int64_t*>base)[k]
    return (<const int32_t*>base)[k]


cdef inline void _put_key(uint8_t* out_idx, Py_ssize_t nout, int isz, Py_ssize_t j, int64_t key, Py_ssize_t S,
                          const int64_t* shape, const double* inv) noexcept nogil:
    """Column ``j`` of the output indices: ``key`` de-linearised, row-major (by reciprocal
    multiply and correction when ``inv`` is not NULL: keys below 2**53)."""
    cdef Py_ssize_t d
    cdef int64_t q
    for d in range(S - 1, 0, -1):
        q = _key_quot(key, shape[d], inv[d] if inv != NULL else 0)
        _put_index(out_idx + d * nout * isz, j, isz, key - q * shape[d])
        key = q
    _put_index(out_idx, j, isz, key)


cdef int64_t _write_chunk(const int64_t* keys, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi, int64_t j,
                          int64_t jend, const pos_t* perm, const int64_t* shape, const double* inv, Py_ssize_t S,
                          uint8_t* out_idx, Py_ssize_t nout, const uint8_t* in_idx, int isz,
                          const sum_t* vals, sum_t* out, Py_ssize_t E, bint logical_or) noexcept nogil:
    """The runs headed in keys[lo:hi] to outputs j, j + 1, ... (never to jend or past it: then -1).
    Returns the output after the last run written."""
    cdef Py_ssize_t i = lo, e, d, col
    while i < hi and i > 0 and keys[i] == keys[i - 1]:  # the tail of a run headed in an earlier chunk
        i = i + 1
    while i < hi:
        if j >= jend:  # more runs than the offsets made room for
            return -1
        if perm != NULL and i + PREFETCH < n:  # the gather is random: ask for rows ahead
            st_prefetch(vals + <Py_ssize_t>perm[i + PREFETCH] * E)
        e = i + 1
        while e < n and keys[e] == keys[i]:
            e = e + 1
        if in_idx != NULL:  # copy the run's first column
            col = _at(perm, i)
            for d in range(S):
                _put_index(out_idx + d * nout * isz, j, isz, _get_index(in_idx + d * n * isz, col, isz))
        elif S > 0:
            _put_key(out_idx, nout, isz, j, keys[i], S, shape, inv)
        if E > 0:
            _reduce_run(out + j * E, vals, perm, i, e, E, logical_or)
        j = j + 1
        i = e
    return j


include "_write_checks.pxi"


def coo_write(const int64_t[::1] keys, const int64_t[::1] offsets, const pos_t[::1] perm,
              const int64_t[::1] shape, uint8_t[:, ::1] out_indices, const uint8_t[:, ::1] indices,
              const sum_t[:, ::1] values, sum_t[:, ::1] out, bint logical_or, int nthreads):
    """Write run ``j`` of the sorted keys to column ``j`` of the output indices and row ``j`` of
    ``out`` (the sum, or logical or, of ``values[perm[i]]`` over the run, in sorted order).

    Index arrays are passed as bytes (``(S, nout * itemsize)``, itemsize 4 or 8). The run's
    indices are the de-linearised key, or, when ``indices`` (the input's, as bytes) is not
    empty, a copy of the input column at the run's first position. Empty ``perm`` is the
    identity; chunks and their output offsets come from ``offsets``. Arguments that disagree
    (shapes, offsets that do not match the runs of ``keys``, positions outside ``values``) raise
    ValueError; nothing is written outside the arrays.
    """
    cdef Py_ssize_t n = keys.shape[0], S = out_indices.shape[0], nout = out.shape[0], E = values.shape[1], c
    cdef Py_ssize_t nchunks = offsets.shape[0] - 1
    cdef int isz = _out_itemsize("coo_write", out_indices, nout, shape, E, out.shape[0], out.shape[1])
    cdef int64_t[::1] ends
    if nout > 0 and n == 0:
        raise ValueError(f"coo_write: {nout} output rows from no keys")
    _check_offsets("coo_write", offsets, nout)
    _check_rows("coo_write", perm, n, values.shape[0], nthreads)
    if indices.shape[0] > 0 and indices.shape[1] > 0 and (indices.shape[0] != S or indices.shape[1] != n * isz):
        raise ValueError(f"coo_write: indices must be empty or ({S}, {n} * {isz}) bytes like the output's, got "
                         f"({indices.shape[0]}, {indices.shape[1]})")
    cdef const pos_t* pp = &perm[0] if perm.shape[0] > 0 else NULL
    cdef uint8_t* op = &out_indices[0, 0] if S > 0 and nout > 0 else NULL
    cdef const uint8_t* ip = &indices[0, 0] if indices.shape[0] > 0 and indices.shape[1] > 0 else NULL
    cdef const sum_t* vp = &values[0, 0] if E > 0 else NULL
    cdef sum_t* outp = &out[0, 0] if E > 0 and nout > 0 else NULL
    inv_arr = 1.0 / np.maximum(np.asarray(shape, dtype=np.float64), 1.0)
    cdef double[::1] invv = inv_arr
    cdef const double* inv = &invv[0] if S > 0 and n > 0 and keys[n - 1] < DOUBLE_EXACT else NULL
    cdef const int64_t* shp = &shape[0] if S > 0 else NULL
    if nout == 0:
        return
    ends = np.empty(nchunks, dtype=np.int64)
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            ends[c] = _write_chunk(&keys[0], n, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), offsets[c],
                                   offsets[c + 1], pp, shp, inv, S, op, nout, ip, isz, vp, outp, E, logical_or)
    _check_ends("coo_write", ends, offsets, "chunk")


# -- COO: bucket sort (keys of at most 32 bits below one radix digit) ----------------------------
# The sort reads and writes the pairs out of cache once: one pass scatters them by their top
# digit into buckets of about BUCKET_TARGET pairs, keeping the keys' low 32 bits (the digit and
# the bits above it are the bucket's), and each bucket is then sorted within cache by its own
# varying bits. Runs never cross buckets, so the output offsets are the buckets' distinct counts.
cdef Py_ssize_t BUCKET_TARGET = 8192


def bucket_bits(Py_ssize_t n, int nbits):
    """Bits of the bucket digit for ``n`` keys of ``nbits`` bits (buckets of about BUCKET_TARGET
    keys, or smaller so that the keys below the digit fit in 32 bits), or 0 when that would take
    more than RADIX_BITS bits (the LSD sort of int64 keys then)."""
    cdef int w = 1
    while w < RADIX_BITS and (n >> w) > BUCKET_TARGET:
        w = w + 1
    if nbits - w > 32:  # smaller buckets, so that the keys below the digit fit in 32 bits
        w = nbits - 32
    if w > nbits:
        w = max(nbits, 0)
    return w if 0 < w <= RADIX_BITS else 0


cdef inline void _bscatter_chunk(const int64_t* keys, const payload_t* first, uint32_t* kout, payload_t* pout,
                                 Py_ssize_t lo, Py_ssize_t hi, int shift, int64_t mask, int64_t* offs,
                                 int64_t* work, bint streaming) noexcept nogil:
    if payload_t is uint8_t:
        st_bscatter_p8(keys, first, kout, pout, lo, hi, shift, mask, offs, work, NULL, 0, 1, 0, streaming)
    elif payload_t is uint16_t:
        st_bscatter_p16(keys, first, kout, pout, lo, hi, shift, mask, offs, work, NULL, 0, 1, 0, streaming)
    elif payload_t is int32_t:
        st_bscatter_p32(keys, first, kout, pout, lo, hi, shift, mask, offs, work, NULL, 0, 1, 0, streaming)
    else:
        st_bscatter_p64(keys, first, kout, pout, lo, hi, shift, mask, offs, work, NULL, 0, 1, 0, streaming)


cdef inline int64_t _sort_bucket(uint32_t* k, payload_t* p, uint32_t* kb, payload_t* pb, int64_t m,
                                 uint32_t* cnt) noexcept nogil:
    if payload_t is uint8_t:
        return st_bucket_sort_p8(k, p, kb, pb, m, cnt)
    elif payload_t is uint16_t:
        return st_bucket_sort_p16(k, p, kb, pb, m, cnt)
    elif payload_t is int32_t:
        return st_bucket_sort_p32(k, p, kb, pb, m, cnt)
    else:
        return st_bucket_sort_p64(k, p, kb, pb, m, cnt)


cdef void _bucket_sort(const int64_t* keys, const payload_t* first, uint32_t* lk, payload_t* pl, uint32_t* kscratch,
                       payload_t* pscratch, Py_ssize_t scratch, uint32_t* cnt, Py_ssize_t n, int shift, int width,
                       Py_ssize_t nchunks, int nthreads, const int64_t* hist, int64_t* offs, int64_t* work,
                       Py_ssize_t work_stride, int64_t* bstart, int64_t* distinct) noexcept nogil:
    """Scatter (key, payload) pairs into buckets by key bits ``[shift, shift + width)`` (stably;
    ``hist`` holds each chunk's counts), then sort each bucket by its low key bits; the
    payload of key ``i`` is ``first[i]``, or ``i`` when ``first`` is NULL."""
    cdef Py_ssize_t nb = (<Py_ssize_t>1) << width, b, c, t
    cdef int64_t mask = nb - 1, run = 0
    cdef bint streaming = n * (sizeof(uint32_t) + sizeof(payload_t)) >= STREAM_MIN_BYTES
    for b in range(nb):
        bstart[b] = run
        for c in range(nchunks):
            offs[c * nb + b] = run
            run = run + hist[c * nb + b]
    bstart[nb] = run
    for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
        t = st_omp_thread_num()
        _bscatter_chunk(keys, first, lk, pl, _lo(c, n, nchunks), _lo(c + 1, n, nchunks), shift, mask,
                        offs + c * nb, work + t * work_stride, streaming)
    for b in prange(nb, schedule="dynamic", num_threads=nthreads):
        t = st_omp_thread_num()
        distinct[b + 1] = _sort_bucket(lk + bstart[b], pl + bstart[b], kscratch + t * scratch,
                                       pscratch + t * scratch, bstart[b + 1] - bstart[b],
                                       cnt + t * (3 << RADIX_BITS))


def coo_bucket_sort(const index_t[:, ::1] indices, const int64_t[::1] shape, int nbits, int width,
                    const payload_t[::1] payload, int nthreads):
    """Linearise the index columns to keys (checking bounds) and bucket-sort (key, payload) pairs
    (``width`` from :func:`bucket_bits`).

    Returns ``(error, low_keys, payloads, bucket_starts, offsets, shift, base)``: the low 32 key
    bits and the payloads in sorted order (positions, int32 when nnz allows, or the carried
    values), where bucket ``b`` holds ``[bucket_starts[b], bucket_starts[b + 1])`` and its key
    ``base | b << shift | low & (2**shift - 1)``; ``offsets[b]`` is the output offset of its first
    run (``offsets[-1]``: the number of distinct keys).
    """
    cdef Py_ssize_t n = indices.shape[1], c
    cdef Py_ssize_t nchunks = _sort_chunks(n, nthreads)
    if payload.shape[0] != 0 and payload.shape[0] != n:
        raise ValueError(f"coo_bucket_sort: payload must be empty or have one item per index column ({n}), "
                         f"got {payload.shape[0]}")
    cdef Py_ssize_t nb = (<Py_ssize_t>1) << width
    cdef int64_t mask = nb - 1
    cdef int shift = nbits - width, top
    error, keys_arr, hist_arr, state_arr = _linearized(indices, shape, shift, width, nchunks, nthreads)
    if error is not None:
        return error, None, None, None, None, 0, 0
    cdef int64_t[::1] keys = keys_arr
    cdef int64_t[:, ::1] hist = hist_arr
    key_and = int(np.bitwise_and.reduce(state_arr[:, 4]))
    top = int(np.bitwise_or.reduce(state_arr[:, 3]) ^ key_and).bit_length()
    if top < nbits:  # the top bits never vary: take the digit below them (count it again)
        shift = max(top - width, 0)
        hist_arr[:] = 0
        with nogil:
            for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
                _hist_chunk(&keys[0], _lo(c, n, nchunks), _lo(c + 1, n, nchunks), shift, mask, &hist[c, 0])
    cdef int64_t base = key_and & ~((1 << (shift + width)) - 1)  # the bits above the digit: the same in every key
    bstart_arr = np.empty(nb + 1, np.int64)
    offsets = np.zeros(nb + 1, np.int64)
    cdef int64_t[::1] bstart = bstart_arr
    cdef int64_t[::1] distinct = offsets
    offs_arr = empty((nchunks, nb), np.int64)
    cdef int64_t[:, ::1] offs = offs_arr
    cdef Py_ssize_t stride = (WORK_PER_BUCKET * nb + 7) // 8 * 8
    work_arr = empty(nthreads * stride + 8, np.int64)
    cdef int64_t[::1] workv = work_arr
    cdef int64_t* work = &workv[0]
    work = work + ((64 - (<size_t>work) % 64) % 64) // 8  # align to 64 bytes
    cdef Py_ssize_t biggest = int(hist_arr.sum(axis=0).max())
    cnt_arr = np.empty(nthreads * (3 << RADIX_BITS), np.uint32)
    lk_arr = empty(n, np.uint32)
    kscr_arr = empty(nthreads * biggest, np.uint32)
    cdef uint32_t[::1] cnt = cnt_arr
    cdef uint32_t[::1] lk = lk_arr
    cdef uint32_t[::1] kscr = kscr_arr
    cdef payload_t[::1] pa, pscr
    cdef int32_t[::1] p32, s32
    cdef int64_t[::1] p64, s64
    if payload.shape[0] > 0:  # carry the values
        dtype = np.asarray(payload).dtype
        pos_arr, pscr_arr = empty(n, dtype), empty(nthreads * biggest, dtype)
        pa, pscr = pos_arr, pscr_arr
        with nogil:
            _bucket_sort(&keys[0], &payload[0], &lk[0], &pa[0], &kscr[0], &pscr[0], biggest, &cnt[0], n, shift,
                         width, nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride, &bstart[0], &distinct[0])
    elif n <= INT32_MAX:  # carry int32 positions
        pos_arr, pscr_arr = empty(n, np.int32), empty(nthreads * biggest, np.int32)
        p32, s32 = pos_arr, pscr_arr
        with nogil:
            _bucket_sort(&keys[0], <const int32_t*>NULL, &lk[0], &p32[0], &kscr[0], &s32[0], biggest, &cnt[0], n,
                         shift, width, nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride, &bstart[0],
                         &distinct[0])
    else:
        pos_arr, pscr_arr = empty(n, np.int64), empty(nthreads * biggest, np.int64)
        p64, s64 = pos_arr, pscr_arr
        with nogil:
            _bucket_sort(&keys[0], <const int64_t*>NULL, &lk[0], &p64[0], &kscr[0], &s64[0], biggest, &cnt[0], n,
                         shift, width, nchunks, nthreads, &hist[0, 0], &offs[0, 0], work, stride, &bstart[0],
                         &distinct[0])
    np.cumsum(offsets, out=offsets)
    return None, lk_arr, pos_arr, bstart_arr, offsets, shift, base


cdef void _write_buckets(const uint32_t* lk, const int64_t* bstart, const int64_t* offsets, Py_ssize_t b0,
                         Py_ssize_t b1, int shift, int64_t base, const pos_t* perm, Py_ssize_t n,
                         const int64_t* shape, const double* inv, Py_ssize_t S, uint8_t* out_idx, Py_ssize_t nout,
                         int isz, const sum_t* vals, sum_t* out, Py_ssize_t E, bint logical_or,
                         int64_t* ends) noexcept nogil:
    """Buckets b0 <= b < b1; ends[b] = the output after bucket b's last run (-1: the bucket held
    more runs than its offsets made room for, and stopped there)."""
    cdef Py_ssize_t b, i, e, hi
    cdef int64_t j
    cdef uint32_t low_mask = <uint32_t>(((<uint64_t>1) << shift) - 1)
    for b in range(b0, b1):
        i = bstart[b]
        hi = bstart[b + 1]
        j = offsets[b]
        while i < hi:
            if j >= offsets[b + 1]:
                j = -1
                break
            if perm != NULL and i + PREFETCH < n:  # the gather is random: ask for rows ahead
                st_prefetch(vals + <Py_ssize_t>perm[i + PREFETCH] * E)
            e = i + 1
            while e < hi and lk[e] == lk[i]:
                e = e + 1
            if S > 0:
                _put_key(out_idx, nout, isz, j, base | ((<int64_t>b) << shift) | (lk[i] & low_mask), S, shape, inv)
            if E > 0:
                _reduce_run(out + j * E, vals, perm, i, e, E, logical_or)
            j = j + 1
            i = e
        ends[b] = j


def coo_write_buckets(const uint32_t[::1] low_keys, const int64_t[::1] bucket_starts, const int64_t[::1] offsets,
                      int shift, int64_t base, const pos_t[::1] perm, const int64_t[::1] shape,
                      uint8_t[:, ::1] out_indices, const sum_t[:, ::1] values, sum_t[:, ::1] out, bint logical_or,
                      int nthreads):
    """:func:`coo_write` for the output of :func:`coo_bucket_sort`: run ``j`` (of equal keys) goes
    to column ``j`` of the output indices (the key de-linearised) and row ``j`` of ``out``.
    Arguments that disagree (shapes, bucket starts outside the keys, offsets that do not match the
    runs, positions outside ``values``) raise ValueError; nothing is written outside the arrays."""
    cdef Py_ssize_t n = low_keys.shape[0], S = out_indices.shape[0], nout = out.shape[0], E = values.shape[1], c
    cdef Py_ssize_t nb = bucket_starts.shape[0] - 1, b
    cdef Py_ssize_t nchunks = max(1, min(nb, 8 * nthreads if nthreads > 1 else 1))
    cdef int isz = _out_itemsize("coo_write_buckets", out_indices, nout, shape, E, out.shape[0], out.shape[1])
    cdef int64_t[::1] ends
    if not 0 <= shift <= 32:
        raise ValueError(f"coo_write_buckets: shift must be in [0, 32], got {shift}")
    if nb < 1 or offsets.shape[0] != nb + 1:
        raise ValueError(f"coo_write_buckets: bucket_starts and offsets must have one entry per bucket and one "
                         f"more, got {nb + 1} and {offsets.shape[0]}")
    _check_offsets("coo_write_buckets", offsets, nout)
    if bucket_starts[0] < 0 or bucket_starts[nb] > n:
        raise ValueError(f"coo_write_buckets: bucket_starts must lie in [0, {n}], got {bucket_starts[0]} .. "
                         f"{bucket_starts[nb]}")
    for b in range(nb):
        if bucket_starts[b + 1] < bucket_starts[b]:
            raise ValueError(f"coo_write_buckets: bucket_starts must be non-decreasing, got {bucket_starts[b]} "
                             f"then {bucket_starts[b + 1]} at {b + 1}")
    _check_rows("coo_write_buckets", perm, n, values.shape[0], nthreads)
    cdef const pos_t* pp = &perm[0] if perm.shape[0] > 0 else NULL
    cdef uint8_t* op = &out_indices[0, 0] if S > 0 and nout > 0 else NULL
    cdef const sum_t* vp = &values[0, 0] if E > 0 else NULL
    cdef sum_t* outp = &out[0, 0] if E > 0 and nout > 0 else NULL
    inv_arr = 1.0 / np.maximum(np.asarray(shape, dtype=np.float64), 1.0)
    cdef double[::1] invv = inv_arr
    cdef const double* inv = &invv[0] if S > 0 and (base | (nb << shift)) < DOUBLE_EXACT else NULL
    cdef const int64_t* shp = &shape[0] if S > 0 else NULL
    if nout == 0:
        return
    ends = np.empty(nb, dtype=np.int64)
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _write_buckets(&low_keys[0], &bucket_starts[0], &offsets[0], _lo(c, nb, nchunks), _lo(c + 1, nb, nchunks),
                           shift, base, pp, n, shp, inv, S, op, nout, isz, vp, outp, E, logical_or, &ends[0])
    _check_ends("coo_write_buckets", ends, offsets, "bucket")
