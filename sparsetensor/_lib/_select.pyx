# Selection kernels for the shape ops (sparsetensor.ops.shape): index_select, narrow and
# cat where NumPy alone would need a Python loop or a temporary per (entry, copy).
#
# Compressed tensors come in the canonical form of sparsetensor._convert: compressed
# (B, n + 1), plain (B, nnz), values (B, nnz, E) as raw unsigned integers. They satisfied
# invariants 5.1-5.6 when checked (the wrappers scan unchecked input first), but their memory
# may have changed since (issue 34): every segment read is clamped to [0, nnz], every plain
# index bounds-checked before it is looked up, and every write kept within its output slot.
# A changed index gives a wrong result, never an access out of bounds or an unbounded loop.
# COO indices are not trusted: the coordinate a kernel looks up is bounds-checked and
# the first bad one is reported instead of read out of bounds.
#
# A selection along one dim is described by a map from old coordinates to new ones,
# built by a counting pass over the index: the new coordinates of old coordinate j are
# targets[first[j]:first[j + 1]], ascending (an index with repeats maps j to several).
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memcpy

import numpy as np

from ._guard cimport bad_index, bad_segment, clamp
from ._types cimport index_t, index2_t, num_t, raw_t

# Below this many units of work a kernel runs serially (the wrappers' num_threads also
# says 1 for small inputs; this bounds the chunk count of the chunked passes).
cdef Py_ssize_t CHUNK = 4096
# Rows shorter than this are sorted by insertion, longer ones by heapsort.
cdef Py_ssize_t INSERTION_MAX = 16


cdef _require(bint ok, str kernel, str what):
    """The shape checks of the defs below: every array against the others, before any pointer."""
    if not ok:
        raise ValueError(f"{kernel}: {what}")


cdef bint _canonical_shapes(const index_t[:, ::1] compressed, const index_t[:, ::1] plain,
                            Py_ssize_t vb, Py_ssize_t vn) noexcept:
    """compressed (B, n + 1), plain (B, nnz) and values (vb, vn, E) of one tensor agree."""
    cdef Py_ssize_t B = compressed.shape[0]
    return compressed.shape[1] >= 1 and plain.shape[0] == B and vb == B and vn == plain.shape[1]


# -- the map --------------------------------------------------------------------------------
def build_map(const index_t[::1] index, Py_ssize_t size):
    """The (first, targets) map of ``index`` over ``[0, size)``; entries must be in range.

    Returns int64 arrays ``first`` (size + 1) and ``targets`` (len(index)): a counting pass
    and a stable fill, so each old coordinate's new coordinates come out ascending.
    """
    cdef Py_ssize_t K = index.shape[0], k, j
    for k in range(K):
        _require(0 <= index[k] < size, "build_map", f"index[{k}] = {index[k]} is outside [0, {size})")
    first_arr = np.zeros(size + 1, dtype=np.int64)
    targets_arr = np.empty(K, dtype=np.int64)
    cdef int64_t[::1] first = first_arr
    cdef int64_t[::1] targets = targets_arr
    cdef int64_t[::1] fill
    with nogil:  # (index was checked above, but may change meanwhile: guarded again)
        for k in range(K):
            if not bad_index(index[k], size):
                first[index[k] + 1] += 1
        for j in range(size):
            first[j + 1] += first[j]
    fill_arr = first_arr[:size].copy()
    fill = fill_arr
    with nogil:
        for k in range(K):
            j = index[k]
            if not bad_index(j, size) and not bad_index(fill[j], K):
                targets[fill[j]] = k
                fill[j] += 1
    return first_arr, targets_arr


# -- COO ---------------------------------------------------------------------------------------
def coo_index_select(const index_t[:, ::1] indices, const raw_t[:, ::1] values, Py_ssize_t dim,
                     const int64_t[::1] first, const int64_t[::1] targets, int nthreads):
    """Every entry once per new coordinate of its coordinate along ``dim``.

    Returns ``(None, out_indices, out_values)``, entries in input order and each entry's
    copies by ascending new coordinate; or ``((invariant, dim, position, value), None, None)``
    for the first entry whose coordinate along ``dim`` is out of bounds (C4 / C5).
    """
    cdef Py_ssize_t S = indices.shape[0], nnz = indices.shape[1], E = values.shape[1]
    cdef Py_ssize_t size = first.shape[0] - 1
    cdef int T = <int>max(1, min(<Py_ssize_t>nthreads, nnz // CHUNK + 1))
    _require(values.shape[0] == nnz and 0 <= dim < S and size >= 0 and targets.shape[0] == first[size] >= 0,
             "coo_index_select", f"indices ({S}, {nnz}), values ({values.shape[0]}, {E}), dim {dim}, first "
             f"({size + 1},) and targets ({targets.shape[0]},) do not match")
    cdef Py_ssize_t t, e, lo, hi, s, q, pos
    cdef int64_t j, cnt
    offsets_arr = np.zeros(T + 1, dtype=np.int64)
    bad_arr = np.full(T, -1, dtype=np.intp)
    cdef int64_t[::1] offsets = offsets_arr
    cdef Py_ssize_t[::1] bad = bad_arr
    with nogil:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            lo = nnz * t // T
            hi = nnz * (t + 1) // T
            cnt = 0
            for e in range(lo, hi):
                j = indices[dim, e]
                if j < 0 or j >= size:
                    bad[t] = e
                    break
                cnt = cnt + first[j + 1] - first[j]
            offsets[t + 1] = cnt
    for t in range(T):
        if bad[t] >= 0:
            e = bad[t]
            j = indices[dim, e]
            return ("C4" if j < 0 else "C5", int(dim), int(e), int(j)), None, None
    np.cumsum(offsets_arr, out=offsets_arr)
    total = int(offsets_arr[T])
    out_idx_arr = np.empty((S, total), dtype=np.asarray(indices).dtype)
    out_val_arr = np.empty((total, E), dtype=np.asarray(values).dtype)
    cdef index_t[:, ::1] out_idx = out_idx_arr
    cdef raw_t[:, ::1] out_val = out_val_arr
    with nogil:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            lo = nnz * t // T
            hi = nnz * (t + 1) // T
            pos = offsets[t]
            for e in range(lo, hi):
                j = indices[dim, e]
                if bad_index(j, size):  # changed since the first pass
                    continue
                for q in range(first[j], min(first[j + 1], first[j] + offsets[t + 1] - pos)):
                    for s in range(S):
                        out_idx[s, pos] = indices[s, e]
                    out_idx[dim, pos] = <index_t>targets[q]
                    for s in range(E):
                        out_val[pos, s] = values[e, s]
                    pos = pos + 1
    return None, out_idx_arr, out_val_arr


# -- compressed: whole compressed slices --------------------------------------------------------
def gather_rows(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
                const int64_t[::1] rows, const index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain,
                raw_t[:, :, ::1] out_values, int nthreads):
    """Copy compressed slice ``rows[k]`` of every batch to slice ``k`` of the output.

    ``out_compressed`` (B, K + 1) is filled by the caller (cumulated slice lengths); the
    segments are copied in parallel over (batch, k).
    """
    cdef Py_ssize_t B = out_compressed.shape[0], K = rows.shape[0], E = values.shape[2]
    cdef Py_ssize_t u, b, k, r, s0, n, d
    _require(_canonical_shapes(compressed, plain, values.shape[0], values.shape[1]) and compressed.shape[0] == B
             and out_compressed.shape[1] == K + 1 and out_plain.shape[0] == B and out_values.shape[0] == B
             and out_values.shape[1] == out_plain.shape[1] and out_values.shape[2] == E, "gather_rows",
             "the input (B, n + 1), (B, nnz), (B, nnz, E) and output (B, K + 1), (B, nnz'), (B, nnz', E) "
             "shapes do not match")
    for k in range(K):
        _require(0 <= rows[k] < compressed.shape[1] - 1, "gather_rows", f"rows[{k}] = {rows[k]} is out of range")
    cdef Py_ssize_t nnz = plain.shape[1], onnz = out_plain.shape[1]
    with nogil:
        for u in prange(B * K, num_threads=nthreads, schedule="guided"):
            b = u // K
            k = u - b * K
            r = rows[k]
            s0 = compressed[b, r]
            n = compressed[b, r + 1] - s0
            d = out_compressed[b, k]
            if bad_segment(s0, s0 + n, nnz) or bad_segment(d, d + n, onnz):
                n = 0  # the indices changed since the caller sized the output
            if n > 0:
                memcpy(&out_plain[b, d], &plain[b, s0], n * sizeof(index_t))
                if E > 0:
                    memcpy(&out_values[b, d, 0], &values[b, s0, 0], n * E * sizeof(raw_t))


# -- compressed: one slice of the flattened (batch, slice) loop ------------------------------------
cdef struct _Slice:
    Py_ssize_t b, i      # batch and slice of flat slice r
    Py_ssize_t s0, s1    # its positions, clamped into [0, nnz] and s0 <= s1


cdef inline _Slice _slice(const index_t[:, ::1] compressed, Py_ssize_t r, Py_ssize_t n, Py_ssize_t nnz) noexcept nogil:
    """Flat slice ``r`` of ``B * n``: a changed compressed index makes a short or empty segment,
    never a read out of bounds."""
    cdef _Slice z
    z.b = r // n
    z.i = r - z.b * n
    z.s0 = clamp(compressed[z.b, z.i], 0, nnz)
    z.s1 = clamp(compressed[z.b, z.i + 1], z.s0, nnz)
    return z


# -- compressed: a range of plain indices -------------------------------------------------------------
cdef inline Py_ssize_t _lower_bound(const index_t[:, ::1] plain, Py_ssize_t b, Py_ssize_t lo, Py_ssize_t hi,
                                    int64_t value) noexcept nogil:
    """The first position in plain[b, lo:hi] (sorted) holding a value >= ``value``."""
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi) // 2
        if plain[b, mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def plain_range(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, int64_t lo, int64_t hi,
                int64_t[:, ::1] starts, int64_t[:, ::1] counts, int nthreads):
    """For every slice, the segment of its (sorted) plain indices in [lo, hi): ``starts[b, i]``
    (position) and ``counts[b, i]`` (length), found by binary search."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1
    cdef Py_ssize_t r, k0, k1, nnz = plain.shape[1]
    cdef _Slice z
    _require(_canonical_shapes(compressed, plain, plain.shape[0], plain.shape[1]) and starts.shape[0] == B
             and starts.shape[1] == n and counts.shape[0] == B and counts.shape[1] == n, "plain_range",
             "compressed (B, n + 1), plain (B, nnz), starts and counts (B, n) do not match")
    with nogil:
        for r in prange(B * n, num_threads=nthreads, schedule="static"):
            z = _slice(compressed, r, n, nnz)
            k0 = _lower_bound(plain, z.b, z.s0, z.s1, lo)
            k1 = _lower_bound(plain, z.b, k0, z.s1, hi)
            starts[z.b, z.i] = k0
            counts[z.b, z.i] = k1 - k0


def copy_segments(const index_t[:, ::1] plain, const raw_t[:, :, ::1] values, const int64_t[:, ::1] starts,
                  const index_t[:, ::1] out_compressed, int64_t shift, index_t[:, ::1] out_plain,
                  raw_t[:, :, ::1] out_values, int nthreads):
    """Copy segment ``starts[b, i]`` (of length given by ``out_compressed``) of every slice, the
    plain indices minus ``shift``."""
    cdef Py_ssize_t B = out_compressed.shape[0], n = out_compressed.shape[1] - 1, E = values.shape[2]
    cdef Py_ssize_t r, b, i, k, s0, d, length, nnz = plain.shape[1], onnz = out_plain.shape[1]
    _require(plain.shape[0] == B and values.shape[0] == B and values.shape[1] == plain.shape[1]
             and starts.shape[0] == B and starts.shape[1] == n and out_plain.shape[0] == B
             and out_values.shape[0] == B and out_values.shape[1] == out_plain.shape[1]
             and out_values.shape[2] == E and n >= 0, "copy_segments",
             "plain (B, nnz), values (B, nnz, E), starts (B, n), out_compressed (B, n + 1), out_plain "
             "(B, nnz') and out_values (B, nnz', E) do not match")
    with nogil:
        for r in prange(B * n, num_threads=nthreads, schedule="guided"):
            b = r // n
            i = r - b * n
            s0 = starts[b, i]
            d = out_compressed[b, i]
            length = out_compressed[b, i + 1] - d
            if bad_segment(s0, s0 + length, nnz) or bad_segment(d, d + length, onnz):
                length = 0
            for k in range(length):
                out_plain[b, d + k] = <index_t>(plain[b, s0 + k] - shift)
            if length > 0 and E > 0:
                memcpy(&out_values[b, d, 0], &values[b, s0, 0], length * E * sizeof(raw_t))


# -- compressed: filter and remap the plain indices ----------------------------------------------
def plain_count(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const int64_t[::1] first,
                int64_t[:, ::1] counts, int nthreads):
    """``counts[b, i]``: how many entries compressed slice i of batch b has after the map."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1
    cdef Py_ssize_t r, k, nnz = plain.shape[1], size = first.shape[0] - 1
    cdef int64_t cnt, j
    cdef _Slice z
    _require(_canonical_shapes(compressed, plain, plain.shape[0], plain.shape[1]) and first.shape[0] >= 1
             and counts.shape[0] == B and counts.shape[1] == n, "plain_count",
             "compressed (B, n + 1), plain (B, nnz), first (size + 1,) and counts (B, n) do not match")
    with nogil:
        for r in prange(B * n, num_threads=nthreads, schedule="guided"):
            z = _slice(compressed, r, n, nnz)
            cnt = 0
            for k in range(z.s0, z.s1):
                j = plain[z.b, k]
                if not bad_index(j, size):
                    cnt = cnt + first[j + 1] - first[j]
            counts[z.b, z.i] = cnt


cdef inline void _swap(index_t* key, int64_t* pay, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    cdef index_t tk = key[a]
    cdef int64_t tp = pay[a]
    key[a] = key[b]
    pay[a] = pay[b]
    key[b] = tk
    pay[b] = tp


cdef inline void _sift(index_t* key, int64_t* pay, Py_ssize_t root, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t child
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and key[child] < key[child + 1]:
            child += 1
        if key[root] < key[child]:
            _swap(key, pay, root, child)
            root = child
        else:
            return


cdef void _sort_pairs(index_t* key, int64_t* pay, Py_ssize_t n) noexcept nogil:
    """Sort key[0:n] ascending, moving pay along (keys are distinct)."""
    cdef Py_ssize_t i, j, start, end
    cdef index_t k
    cdef int64_t p
    if n <= INSERTION_MAX:
        for i in range(1, n):
            k = key[i]
            p = pay[i]
            j = i - 1
            while j >= 0 and key[j] > k:
                key[j + 1] = key[j]
                pay[j + 1] = pay[j]
                j -= 1
            key[j + 1] = k
            pay[j + 1] = p
        return
    start = n // 2 - 1
    while start >= 0:
        _sift(key, pay, start, n)
        start -= 1
    end = n - 1
    while end > 0:
        _swap(key, pay, 0, end)
        _sift(key, pay, 0, end)
        end -= 1


def plain_fill(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
               const int64_t[::1] first, const int64_t[::1] targets, const index_t[:, ::1] out_compressed,
               index_t[:, ::1] out_plain, raw_t[:, :, ::1] out_values, bint sort_rows, Py_ssize_t max_row,
               int nthreads):
    """Write every slice's mapped entries (one per new plain coordinate of each old one).

    With ``sort_rows`` (the map is not monotone) each output slice is sorted by its new
    plain indices; ``max_row`` bounds the output slice lengths (a per-thread buffer).
    """
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, E = values.shape[2]
    cdef Py_ssize_t r, b, k, q, u, d0, e, room, nnz = plain.shape[1], size = first.shape[0] - 1
    cdef Py_ssize_t onnz = out_plain.shape[1]
    cdef int64_t j
    cdef _Slice z
    _require(_canonical_shapes(compressed, plain, values.shape[0], values.shape[1]) and first.shape[0] >= 1
             and targets.shape[0] == first[first.shape[0] - 1] and out_compressed.shape[0] == B
             and out_compressed.shape[1] == n + 1 and out_plain.shape[0] == B and out_values.shape[0] == B
             and out_values.shape[1] == out_plain.shape[1] and out_values.shape[2] == E and max_row >= 0,
             "plain_fill", "compressed (B, n + 1), plain (B, nnz), values (B, nnz, E), the map (first, targets) "
             "and out_compressed (B, n + 1), out_plain (B, nnz'), out_values (B, nnz', E) do not match")
    cdef int T = max(1, nthreads)
    perm_arr = np.empty((T, max(max_row, 1)), dtype=np.int64)
    cdef int64_t[:, ::1] perm_all = perm_arr
    cdef int64_t* perm = NULL  # assigned per thread below (the region copies it in: firstprivate)
    with nogil, parallel(num_threads=T):
        perm = &perm_all[threadid(), 0]
        for r in prange(B * n, schedule="guided"):
            z = _slice(compressed, r, n, nnz)
            b = z.b
            d0 = out_compressed[b, z.i]
            room = out_compressed[b, z.i + 1] - d0  # what plain_count found: writes stay within
            if bad_segment(d0, d0 + room, onnz) or room > max_row:
                room = 0
            q = 0
            if not sort_rows:  # the map is monotone: entries come out in order, values go straight
                for k in range(z.s0, z.s1):
                    j = plain[b, k]
                    if bad_index(j, size):
                        continue
                    for u in range(first[j], min(first[j + 1], first[j] + room - q)):
                        out_plain[b, d0 + q] = <index_t>targets[u]
                        for e in range(E):
                            out_values[b, d0 + q, e] = values[b, k, e]
                        q = q + 1
                continue
            for k in range(z.s0, z.s1):
                j = plain[b, k]
                if bad_index(j, size):
                    continue
                for u in range(first[j], min(first[j + 1], first[j] + room - q)):
                    out_plain[b, d0 + q] = <index_t>targets[u]
                    perm[q] = k
                    q = q + 1
            if q > 1:
                _sort_pairs(&out_plain[b, d0], perm, q)
            for u in range(q):
                for e in range(E):
                    out_values[b, d0 + u, e] = values[b, perm[u], e]


# -- compressed: concatenation along the plain dim -------------------------------------------------
def cat_rows(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
             int64_t offset, int64_t[:, ::1] cursor, index2_t[:, ::1] out_plain, raw_t[:, :, ::1] out_values,
             int nthreads):
    """Append every slice of one input at ``cursor[b, i]`` (then advanced), plain indices + ``offset``.

    Called once per input, in order: each output slice gets the inputs' slices one after
    the other, so it stays sorted when the offsets grow.
    """
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, E = values.shape[2]
    cdef Py_ssize_t r, b, i, k, s0, s1, d, nnz = plain.shape[1], onnz = out_plain.shape[1]
    _require(_canonical_shapes(compressed, plain, values.shape[0], values.shape[1]) and cursor.shape[0] == B
             and cursor.shape[1] == n and out_plain.shape[0] == B and out_values.shape[0] == B
             and out_values.shape[1] == out_plain.shape[1] and out_values.shape[2] == E, "cat_rows",
             "compressed (B, n + 1), plain (B, nnz), values (B, nnz, E), cursor (B, n), out_plain (B, nnz') "
             "and out_values (B, nnz', E) do not match")
    with nogil:
        for r in prange(B * n, num_threads=nthreads, schedule="guided"):
            b = r // n
            i = r - b * n
            s0 = compressed[b, i]
            s1 = compressed[b, i + 1]
            d = cursor[b, i]
            if bad_segment(s0, s1, nnz) or bad_segment(d, d + s1 - s0, onnz):
                s1 = s0  # changed since the caller sized the output
            for k in range(s0, s1):
                out_plain[b, d + k - s0] = <index2_t>(plain[b, k] + offset)
            if s1 > s0 and E > 0:
                memcpy(&out_values[b, d, 0], &values[b, s0, 0], (s1 - s0) * E * sizeof(raw_t))
            cursor[b, i] = d + s1 - s0


def drop_items(const unsigned char[::1] src, unsigned char[::1] dst, const int64_t[::1] drop,
               Py_ssize_t itemsize):
    """``dst`` = the items of ``src`` (``itemsize`` bytes each) without those at positions ``drop``
    (sorted, distinct), in order: one ``memcpy`` per run between dropped items, so removing a
    few items of a long array costs a copy of its bytes (a boolean gather tests every item).

    Bad arguments (a ``dst`` of the wrong size, positions unsorted or out of range) raise
    ValueError before anything is copied.
    """
    cdef Py_ssize_t total = src.shape[0], m = drop.shape[0], n, k, prev = 0, out = 0, length
    cdef const unsigned char* s
    cdef unsigned char* d
    if itemsize <= 0 or total % itemsize:
        raise ValueError(f"drop_items: {total} bytes are not whole items of {itemsize}")
    n = total // itemsize
    if dst.shape[0] != (n - m) * itemsize:
        raise ValueError(f"drop_items: dst has {dst.shape[0]} bytes, expected {(n - m) * itemsize}")
    for k in range(m):
        if drop[k] < prev or drop[k] >= n:
            raise ValueError(f"drop_items: position {drop[k]} (number {k}) is not sorted, distinct and in [0, {n})")
        prev = drop[k] + 1
    if n == m:
        return
    s, d, prev = &src[0], &dst[0], 0
    with nogil:
        for k in range(m):
            length = drop[k] - prev
            memcpy(d + out * itemsize, s + prev * itemsize, length * itemsize)
            out += length
            prev = drop[k] + 1
        memcpy(d + out * itemsize, s + prev * itemsize, (n - prev) * itemsize)


# -- keep the flagged entries ---------------------------------------------------------------------
def flagged_count(const index_t[:, ::1] compressed, const uint8_t[:, ::1] flags, int64_t[:, ::1] counts,
                  int nthreads):
    """``counts[b, i]``: how many entries of slice i of batch b are flagged (nonzero ``flags[b, k]``)."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = flags.shape[1]
    cdef Py_ssize_t r, k
    cdef int64_t cnt
    cdef _Slice z
    _require(n >= 0 and flags.shape[0] == B and counts.shape[0] == B and counts.shape[1] == n, "flagged_count",
             "compressed (B, n + 1), flags (B, nnz) and counts (B, n) do not match")
    with nogil:
        for r in prange(B * n, num_threads=nthreads, schedule="static"):
            z = _slice(compressed, r, n, nnz)
            cnt = 0
            for k in range(z.s0, z.s1):
                cnt = cnt + (flags[z.b, k] != 0)
            counts[z.b, z.i] = cnt


def keep_flagged(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
                 const uint8_t[:, ::1] flags, const index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain,
                 raw_t[:, :, ::1] out_values, int nthreads):
    """The flagged entries of every slice, in order, into its segment of ``out_compressed`` (the
    prefix sums of :func:`flagged_count`); a slice never writes past its segment's end."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t E = values.shape[2], onnz = out_plain.shape[1]
    cdef Py_ssize_t r, b, k, e, d, end
    cdef _Slice z
    cdef const index_t* src_p
    cdef const raw_t* src_v
    cdef const uint8_t* flag
    cdef index_t* dst_p
    cdef raw_t* dst_v
    _require(_canonical_shapes(compressed, plain, values.shape[0], values.shape[1]) and flags.shape[0] == B
             and flags.shape[1] == nnz and out_compressed.shape[0] == B and out_compressed.shape[1] == n + 1
             and out_plain.shape[0] == B and out_values.shape[0] == B and out_values.shape[1] == onnz
             and out_values.shape[2] == E, "keep_flagged",
             "compressed (B, n + 1), plain (B, nnz), values (B, nnz, E), flags (B, nnz), out_compressed "
             "(B, n + 1), out_plain (B, nnz') and out_values (B, nnz', E) do not match")
    if B == 0 or n == 0 or nnz == 0 or onnz == 0:
        return
    with nogil:
        for r in prange(B * n, num_threads=nthreads, schedule="static"):
            z = _slice(compressed, r, n, nnz)
            b = z.b
            d = out_compressed[b, z.i]
            end = out_compressed[b, z.i + 1]
            if bad_segment(d, end, onnz):
                continue
            src_p, flag, dst_p = &plain[b, 0], &flags[b, 0], &out_plain[b, 0]
            src_v, dst_v = &values[b, 0, 0], &out_values[b, 0, 0]
            # every entry is written at the next free slot, which only a flagged one keeps: no
            # branch on the flags (the test of the end is taken until the last kept entry)
            for k in range(z.s0, z.s1):
                if d >= end:
                    break
                dst_p[d] = src_p[k]
                if E == 1:
                    dst_v[d] = src_v[k]
                else:
                    for e in range(E):
                        dst_v[d * E + e] = src_v[k * E + e]
                d = d + (flag[k] != 0)


# -- kron -----------------------------------------------------------------------------------------

cdef inline num_t _mul(num_t a, num_t b) noexcept nogil:
    # uint8/uint16 promote to (signed) int in C, where 65535 * 65535 overflows
    if num_t is uint8_t or num_t is uint16_t:
        return <num_t>(<uint32_t>a * <uint32_t>b)
    else:
        return a * b


cdef bint _runs_ok(const int64_t[::1] starts, Py_ssize_t n) noexcept:
    """``starts`` cuts ``[0, n)`` into runs: starts at 0, ends at n, never decreases."""
    cdef Py_ssize_t k, m = starts.shape[0]
    if m < 1 or starts[0] != 0 or starts[m - 1] != n:
        return False
    for k in range(1, m):
        if starts[k] < starts[k - 1]:
            return False
    return True


def kron_rows(const int64_t[:, ::1] ia, const num_t[::1] va, const int64_t[::1] ga,
              const int64_t[:, ::1] ib, const num_t[::1] vb, const int64_t[::1] gb, int64_t mb, int64_t nb,
              index_t[:, ::1] out, num_t[::1] out_values, int nthreads):
    """The Kronecker product of two 2-d COO matrices, pair by pair in the order that sorts it.

    ``ia`` (2, na) and ``ib`` (2, nb_) are the operands' coordinates, ``ga``/``gb`` the starts of
    their runs of one row (``ga[k]:ga[k + 1]`` one run, the last start the entry count); ``mb``,
    ``nb`` the second operand's sizes. Pair (p, q) goes to ``(ia[0, p] * mb + ib[0, q],
    ia[1, p] * nb + ib[1, q])`` with value ``va[p] * vb[q]``, the pairs ordered by A's run, B's
    run, p, q: sorted (and distinct) when both operands are. Run ``i`` of A fills
    ``out[:, ga[i] * nb_:ga[i + 1] * nb_]``, so the runs go to threads without a count first.

    The runs are checked to cut the entries (else ValueError before a write); a coordinate only
    enters a result, never an address.
    """
    cdef Py_ssize_t na = ia.shape[1], nbb = ib.shape[1], GA = ga.shape[0] - 1, GB = gb.shape[0] - 1
    cdef Py_ssize_t i, j, p, q, k, a0, a1, b0, b1, la
    cdef int64_t r, ca
    _require(ia.shape[0] == 2 and ib.shape[0] == 2 and va.shape[0] == na and vb.shape[0] == nbb,
             "kron_rows", "coordinates and values of different lengths")
    _require(_runs_ok(ga, na) and _runs_ok(gb, nbb), "kron_rows", "row runs do not cut the entries")
    _require(out.shape[0] == 2 and out.shape[1] == na * nbb and out_values.shape[0] == na * nbb,
             "kron_rows", "output of the wrong size")
    with nogil:
        for i in prange(GA, num_threads=nthreads, schedule="guided"):
            a0 = ga[i]
            a1 = ga[i + 1]
            la = a1 - a0
            for j in range(GB):
                b0 = gb[j]
                b1 = gb[j + 1]
                if b1 == b0 or la == 0:
                    continue
                k = a0 * nbb + la * b0
                r = ia[0, a0] * mb + ib[0, b0]
                for p in range(a0, a1):
                    ca = ia[1, p] * nb
                    for q in range(b0, b1):
                        out[0, k] = <index_t>r
                        out[1, k] = <index_t>(ca + ib[1, q])
                        out_values[k] = _mul(va[p], vb[q])
                        k = k + 1
