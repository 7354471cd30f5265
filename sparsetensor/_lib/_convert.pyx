# Layout conversion kernels besides the transpose (_transpose.pyx): block grouping and
# expansion, and compressed <-> COO.
#
# Every kernel sees the canonical form of sparsetensor._convert: compressed
# (B, n + 1), plain (B, nnz), values (B, nnz, E) as raw unsigned integers
# (sparsetensor._dtypes.raw_view), where E counts the raw items of one entry
# (block x dense). Values are only moved, never combined. Inputs are trusted to
# satisfy invariants 5.1-5.6: _validate.validate_compressed is the guard that the wrapper runs
# first on input that was not checked, so that no kernel reads out of bounds.
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

import numpy as np

from ._balance cimport balanced_split
from ._items cimport copy_items as _copy
from ._parallel cimport split_threads
from ._types cimport index2_t, index_t, raw_t
from ._guard cimport bad_compressed, clamp


# -- shape checks of the defs below: every array against the others, before any pointer is taken
cdef _require(bint ok, str kernel, str what):
    if not ok:
        raise ValueError(f"{kernel}: {what}")


cdef _unchanged(str kernel, const index_t[:, ::1] compressed, Py_ssize_t nnz):
    """The kernels below write where the compressed index says: it is looked at again first (O(n),
    branch free), since its memory may have changed after it was checked (issue 34)."""
    cdef bint bad
    if compressed.shape[0] == 0 or compressed.shape[1] == 0:
        return
    with nogil:
        bad = bad_compressed(&compressed[0, 0], compressed.shape[0], compressed.shape[1] - 1, nnz)
    if bad:
        raise ValueError(f"{kernel}: the compressed index changed after validation (5.1-5.3 no longer hold)")


cdef _check_blocks(str kernel, Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t stride_c, Py_ssize_t stride_p):
    """Block extents >= 1, and strides that keep every item (dc, dp) inside its bc * bp block."""
    _require(bc >= 1 and bp >= 1 and stride_c >= 0 and stride_p >= 0
             and (bc - 1) * stride_c + (bp - 1) * stride_p < bc * bp, kernel,
             f"bad block geometry bc={bc}, bp={bp}, stride_c={stride_c}, stride_p={stride_p}")


# -- compressed (rows) -> COO ----------------------------------------------------------------------
cdef void _rows_to_coo(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nnz,
                       Py_ssize_t Rb, Py_ssize_t Cb, Py_ssize_t Er, const index_t* bcoords, Py_ssize_t m,
                       Py_ssize_t B, index_t* oi, Py_ssize_t N, raw_t* ov, Py_ssize_t u0,
                       Py_ssize_t u1) noexcept nogil:
    """Block rows [u0, u1) (flat over batches) to coalesced COO entries; each block row owns
    the output range starting at b * nnz * Rb * Cb + c[I] * Rb * Cb."""
    cdef Py_ssize_t u, b, I, k, k0, k1, r, cc, d, row, pos, RC = Rb * Cb
    cdef index_t col
    cdef const index_t* cb
    cdef const index_t* pb
    if RC == 1:
        # an entry keeps its flat position b * nnz + k: the plain indices and the values of the
        # whole range move in one copy each, and only the row (and batch) indices are written
        if u1 <= u0:
            return
        k0 = (u0 // n) * nnz + c[(u0 // n) * (n + 1) + u0 % n]
        k1 = ((u1 - 1) // n) * nnz + c[((u1 - 1) // n) * (n + 1) + (u1 - 1) % n + 1]
        memcpy(oi + (m + 1) * N + k0, p + k0, (k1 - k0) * sizeof(index_t))
        memcpy(ov + k0 * Er, v + k0 * Er, (k1 - k0) * Er * sizeof(raw_t))
        for u in range(u0, u1):
            b = u // n
            I = u - b * n
            cb = c + b * (n + 1)
            for k in range(b * nnz + cb[I], b * nnz + cb[I + 1]):
                for d in range(m):
                    oi[d * N + k] = bcoords[d * B + b]
                oi[m * N + k] = <index_t>I
        return
    for u in range(u0, u1):
        b = u // n
        I = u - b * n
        cb = c + b * (n + 1)
        pb = p + b * nnz
        k0 = cb[I]
        k1 = cb[I + 1]
        for r in range(Rb):
            row = I * Rb + r
            pos = b * nnz * RC + k0 * RC + r * (k1 - k0) * Cb
            for k in range(k0, k1):
                col = <index_t>(pb[k] * Cb)
                for cc in range(Cb):
                    for d in range(m):
                        oi[d * N + pos] = bcoords[d * B + b]
                    oi[m * N + pos] = <index_t>row
                    oi[(m + 1) * N + pos] = col + <index_t>cc
                    _copy(ov + pos * Er, v + ((b * nnz + k) * RC + r * Cb + cc) * Er, Er)
                    pos += 1


def rows_to_coo(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
                Py_ssize_t Rb, Py_ssize_t Cb, const index_t[:, ::1] batch_coords, index_t[:, ::1] out_indices,
                raw_t[:, ::1] out_values, int nthreads):
    """csr/bsr (B batches) -> coalesced COO with batch_coords.shape[0] leading batch dims; blocks
    expand to Rb * Cb entries. Outputs are preallocated: (m + 2, N) indices, (N, Er) values."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t m = batch_coords.shape[0], N = out_indices.shape[1], Er = out_values.shape[1]
    cdef int T = max(1, nthreads), t
    _require(n >= 0 and plain.shape[0] == B and values.shape[0] == B and values.shape[1] == nnz
             and Rb >= 1 and Cb >= 1 and values.shape[2] == Rb * Cb * Er and batch_coords.shape[1] == B
             and out_indices.shape[0] == m + 2 and N == B * nnz * Rb * Cb and out_values.shape[0] == N,
             "rows_to_coo", f"shapes do not match: compressed ({B}, {n + 1}), plain ({plain.shape[0]}, {nnz}), "
             f"values ({values.shape[0]}, {values.shape[1]}, {values.shape[2]}), blocks ({Rb}, {Cb}), "
             f"batch_coords ({m}, {batch_coords.shape[1]}), out_indices ({out_indices.shape[0]}, {N}), "
             f"out_values ({out_values.shape[0]}, {Er})")
    if B == 0 or n == 0:
        return
    _unchanged("rows_to_coo", compressed, nnz)
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    cdef const raw_t* v = &values[0, 0, 0]
    cdef const index_t* bc = &batch_coords[0, 0]
    cdef index_t* oi = &out_indices[0, 0]
    cdef raw_t* ov = &out_values[0, 0]
    balanced_split(c, nnz, <const index_t*>NULL, 0, B, n, 1, 1, T, &bounds[0])
    with nogil:
        if T == 1:
            _rows_to_coo(c, p, v, n, nnz, Rb, Cb, Er, bc, m, B, oi, N, ov, 0, B * n)
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                _rows_to_coo(c, p, v, n, nnz, Rb, Cb, Er, bc, m, B, oi, N, ov, bounds[t], bounds[t + 1])


# -- COO -> compressed (rows) ----------------------------------------------------------------------
cdef inline void _fill(index2_t* ptr, int64_t r0, int64_t r1, Py_ssize_t k) noexcept nogil:
    """ptr[r] = k for r in [r0, r1]: rows r0..r1 start (or, when empty, end) at entry k."""
    cdef int64_t r
    for r in range(r0, r1 + 1):
        ptr[r] = <index2_t>k


cdef inline int64_t _flat_row(const index_t* idx, Py_ssize_t N, Py_ssize_t S, const int64_t* sizes, Py_ssize_t k,
                              int64_t* f) noexcept nogil:
    """Entry k's flat (batch..., row) index; -1 after recording a bounds error in f."""
    cdef int64_t fr = 0, x
    cdef Py_ssize_t d
    for d in range(S):
        x = idx[d * N + k]
        if x < 0 or x >= sizes[d]:
            f[0], f[1], f[2], f[3] = k, 4 if x < 0 else 5, d, x
            return -1
        if d < S - 1:
            fr = fr * sizes[d] + x
    return fr


# Entries per block of the two-dim COO -> rows scan: checked by one branch-free pass first.
cdef Py_ssize_t COO_ROWS_BLOCK = 2048


cdef bint _coo_block_bad(const index_t* rows, const index_t* cols, Py_ssize_t k0, Py_ssize_t k1,
                         uint64_t nrows, uint64_t ncols) noexcept nogil:
    """Whether an entry of [k0, k1) (k0 >= 1) is out of bounds or not after entry k - 1.
    Branch-free (vectorised): the caller rescans a bad block for the first error."""
    cdef Py_ssize_t k
    cdef int bad = 0
    cdef index_t r, c, pr, pc
    for k in range(k0, k1):
        r = rows[k]
        c = cols[k]
        pr = rows[k - 1]
        pc = cols[k - 1]
        # one unsigned comparison per bound: a negative index wraps to a huge one
        bad = bad | (<uint64_t><int64_t>r >= nrows) | (<uint64_t><int64_t>c >= ncols) | (r < pr) | (
            (r == pr) & (c <= pc))
    return bad != 0


cdef bint _coo_block_rows_bad(const index_t* rows, Py_ssize_t k0, Py_ssize_t k1, uint64_t nrows) noexcept nogil:
    """_coo_block_bad for a tensor whose order was checked when it was built: only the rows, which
    say where ptr is written, are read (bounds, non-decreasing); the columns are only copied."""
    cdef Py_ssize_t k
    cdef int bad = 0
    for k in range(k0, k1):
        bad = bad | (<uint64_t><int64_t>rows[k] >= nrows) | (rows[k] < rows[k - 1])
    return bad != 0


cdef inline int64_t _row_starts(const index_t* rows, Py_ssize_t b0, Py_ssize_t b1, int64_t prev,
                                index2_t* ptr, int64_t nrows) noexcept nogil:
    """Write ptr[r] = k for every row r in (prev, rows[k]] starting at an entry k of [b0, b1),
    the rows there being in bounds and non-decreasing from prev (checked); returns the last row.
    Branch-free but for empty rows: a backward pass stores ptr[rows[k]] = k for every entry, so
    that a row's first entry is the last store to its slot. Each row is bounded again as it is
    read (another thread may have written a caller's array since the check): what is written
    stays within ptr, wrong where the rows changed."""
    cdef Py_ssize_t k, s = b0
    cdef int64_t row, before, last = nrows - 1
    while s < b1 and rows[s] == prev:  # the rest of a row that started before b0
        s += 1
    if s == b1:
        return prev
    k = b1 - 1
    while k > s:
        row = clamp(rows[k], 0, last)
        before = clamp(rows[k - 1], -1, last)
        ptr[row] = <index2_t>k
        if row > before + 1:  # empty rows between: they end where this one starts
            _fill(ptr, before + 1, row - 1, k)
        k -= 1
    _fill(ptr, prev + 1, clamp(rows[s], 0, last), s)  # entry s starts row rows[s], and every empty row since prev
    return clamp(rows[b1 - 1], prev, last)


cdef void _coo_rows_2d(const index_t* idx, Py_ssize_t N, const int64_t* sizes, int64_t F, Py_ssize_t k0,
                       Py_ssize_t k1, index2_t* ptr, int64_t* f, bint trusted) noexcept nogil:
    """_coo_rows for two sparse dims (no batch dims): the flat row is the row. Blocks are
    checked branch-free first; only a bad block is rescanned entry by entry. ``trusted``: the
    columns were checked when the tensor was built (and its index is read-only since), so only
    the rows are read."""
    cdef Py_ssize_t k, b0, b1
    cdef uint64_t nrows = <uint64_t>sizes[0], ncols = <uint64_t>sizes[1]
    cdef int64_t prev = -1, row
    cdef index_t col, prev_col = -1
    cdef const index_t* cols = idx + N
    if k0 > 0 and <uint64_t><int64_t>idx[k0 - 1] < nrows:  # else the range before reports it
        prev = idx[k0 - 1]
        prev_col = cols[k0 - 1]
    b0 = k0
    while b0 < k1:
        b1 = b0 + COO_ROWS_BLOCK if k1 - b0 > COO_ROWS_BLOCK else k1
        if b0 == 0 or prev < 0 or (_coo_block_rows_bad(idx, b0, b1, nrows) if trusted
                                   else _coo_block_bad(idx, cols, b0, b1, nrows, ncols)):
            for k in range(b0, b1):  # the careful scan: the first error, in order
                row = idx[k]
                col = 0 if trusted else cols[k]
                if <uint64_t>row >= nrows or <uint64_t><int64_t>col >= ncols:
                    if <uint64_t>row >= nrows:
                        f[0], f[1], f[2], f[3] = k, 4 if row < 0 else 5, 0, row
                    else:
                        f[0], f[1], f[2], f[3] = k, 4 if col < 0 else 5, 1, col
                    return
                if row <= prev:
                    if row < prev or (col <= prev_col and not trusted):
                        f[0], f[1], f[2], f[3] = k, 6, -1, 0
                        return
                else:
                    _fill(ptr, prev + 1, row, k)
                    prev = row
                prev_col = col
        else:  # checked: only the row starts
            prev = _row_starts(idx, b0, b1, prev, ptr, nrows)
            prev_col = 0 if trusted else cols[b1 - 1]
        b0 = b1
    if k1 == N:
        _fill(ptr, prev + 1, F, N)


cdef void _coo_rows(const index_t* idx, Py_ssize_t N, Py_ssize_t S, const int64_t* sizes, int64_t F,
                    Py_ssize_t k0, Py_ssize_t k1, index2_t* ptr, int64_t* f, bint trusted) noexcept nogil:
    """Entries [k0, k1): check bounds and order, and write ptr[r] for every flat row r whose
    first entry (or the end, for the last range) lies here.
    f receives the first error: (position, 4 | 5 | 6 for C4 | C5 | C6, dim, value)."""
    cdef Py_ssize_t k
    cdef int64_t fr, prev = -1
    cdef index_t col, prev_col = -1
    cdef int64_t ignored[4]
    f[0] = -1
    if S == 2:
        _coo_rows_2d(idx, N, sizes, F, k0, k1, ptr, f, trusted)
        return
    if k0 > 0:
        prev = _flat_row(idx, N, S, sizes, k0 - 1, ignored)
        prev_col = idx[(S - 1) * N + k0 - 1]
        if prev < 0:  # the range before reports it
            prev, prev_col = -1, -1
    for k in range(k0, k1):
        fr = _flat_row(idx, N, S, sizes, k, f)
        if fr < 0:
            return
        col = idx[(S - 1) * N + k]
        if fr < prev or (fr == prev and col <= prev_col):
            f[0], f[1], f[2], f[3] = k, 6, -1, 0
            return
        _fill(ptr, prev + 1, fr, k)
        prev, prev_col = fr, col
    if k1 == N:
        _fill(ptr, prev + 1, F, N)


cdef void _coo_rows_any(const index_t* idx, Py_ssize_t N, Py_ssize_t S, const int64_t* sizes, int64_t F,
                        Py_ssize_t k0, Py_ssize_t k1, index2_t* ptr, int64_t* f, bint trusted) noexcept nogil:
    f[0] = -1
    _coo_rows(idx, N, S, sizes, F, k0, k1, ptr, f, trusted)


def coo_to_rows(const index_t[:, ::1] indices, const int64_t[::1] sizes, index2_t[::1] ptr, int nthreads,
                bint trusted=False):
    """Coalesced COO (S >= 2 sparse dims) -> row pointers over the flat (batch..., row) index:
    ptr[r] = entries before flat row r (F + 1 slots, F = prod(sizes[:-1]); int32 ptr only when N
    fits). The plain indices are the last index row as it is. Returns None, or the first broken
    invariant as ("C4" | "C5", dim, position, value) or ("C6", -1, position, 0).

    The rows are always read and checked (bounds, order): they say where ptr is written, and a
    user's array shared zero-copy may have been written since the tensor was checked. The
    columns are read and checked too unless ``trusted`` (two sparse dims only): the tensor's
    check covered them and its index is read-only, so a column changed behind its back can make
    the result wrong, never make this kernel write out of bounds (and the kernels that later read
    the result's columns guard them). The check rides on the pass that finds the row starts
    (branch-free blocks)."""
    cdef Py_ssize_t S = indices.shape[0], N = indices.shape[1]
    cdef int64_t F = ptr.shape[0] - 1
    cdef int T = split_threads(nthreads, N), t
    cdef Py_ssize_t d
    cdef object rows = 1
    _require(S >= 2 and sizes.shape[0] == S, "coo_to_rows",
             f"indices ({S}, {N}) need S >= 2 sparse dims and sizes of S entries, got {sizes.shape[0]}")
    for d in range(S - 1):
        rows *= sizes[d]
    _require(F == rows, "coo_to_rows", f"ptr must have prod(sizes[:-1]) + 1 = {rows + 1} entries, got {F + 1}")
    if N == 0:
        ptr[:] = 0
        return None
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef int64_t[:, ::1] found = np.zeros((T, 4), dtype=np.int64)
    cdef const index_t* idx = &indices[0, 0]
    for t in range(T + 1):
        bounds[t] = N * t // T
    with nogil:
        if T == 1:
            _coo_rows_any(idx, N, S, &sizes[0], F, 0, N, &ptr[0], &found[0, 0], trusted)
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                _coo_rows_any(idx, N, S, &sizes[0], F, bounds[t], bounds[t + 1], &ptr[0], &found[t, 0], trusted)
    for t in range(T):
        if found[t, 0] >= 0:
            if found[t, 1] == 6:
                return ("C6", -1, int(found[t, 0]), 0)
            return ("C4" if found[t, 1] == 4 else "C5", int(found[t, 2]), int(found[t, 0]), int(found[t, 3]))
    return None


# -- grouping entries into blocks (csr -> bsr, csc -> bsc) -----------------------------------------
cdef Py_ssize_t _group_unit(const index_t* c, const index_t* p, Py_ssize_t bc, Py_ssize_t bp,
                            int64_t* cur, int64_t* end, const raw_t* v, Py_ssize_t Er, Py_ssize_t stride_c,
                            Py_ssize_t stride_p, Py_ssize_t slot, Py_ssize_t limit, index_t* op,
                            raw_t* ov) noexcept nogil:
    """Merge the bc slices starting at c (one block slice) by block index p // bp. Count the
    distinct blocks; when op is not NULL, also write the blocks from `slot` on: their
    indices to op and every entry into its place of the zero-filled block in ov, up to slot
    `limit` (what group_count found: a plain index changed since writes no further)."""
    cdef Py_ssize_t r, nblocks = 0, RC = bc * bp
    cdef index_t J, mn, x
    cdef index_t NONE = -1
    for r in range(bc):
        cur[r] = c[r]
        end[r] = c[r + 1]
    while True:
        mn = NONE
        for r in range(bc):
            if cur[r] < end[r]:
                J = p[cur[r]] // bp
                if mn == NONE or J < mn:
                    mn = J
        if mn == NONE or (op != NULL and slot + nblocks >= limit):
            return nblocks
        if op != NULL:
            op[slot + nblocks] = mn
        for r in range(bc):
            while cur[r] < end[r]:
                x = p[cur[r]]
                if x // bp != mn:
                    break
                if op != NULL and <size_t>(x - mn * bp) < <size_t>bp:  # (a negative x rounds toward 0)
                    _copy(ov + ((slot + nblocks) * RC + r * stride_c + (x - mn * bp) * stride_p) * Er,
                          v + cur[r] * Er, Er)
                cur[r] += 1
        nblocks += 1


cdef void _group_units(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nnz,
                       Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t Er, Py_ssize_t stride_c, Py_ssize_t stride_p,
                       Py_ssize_t u0, Py_ssize_t u1, int64_t* cur, int64_t* counts, const index_t* oc,
                       index_t* op, raw_t* ov, Py_ssize_t nnzb) noexcept nogil:
    cdef Py_ssize_t nu = n // bc, u, b, I, got
    for u in range(u0, u1):
        b = u // nu
        I = u - b * nu
        if oc == NULL:
            counts[u] = _group_unit(c + b * (n + 1) + I * bc, p + b * nnz, bc, bp, cur, cur + bc, v, Er,
                                    stride_c, stride_p, 0, 0, NULL, NULL)
        else:
            got = _group_unit(c + b * (n + 1) + I * bc, p + b * nnz, bc, bp, cur, cur + bc,
                              v + b * nnz * Er, Er, stride_c, stride_p, oc[b * (nu + 1) + I],
                              oc[b * (nu + 1) + I + 1], op + b * nnzb,
                              ov + b * nnzb * bc * bp * Er)


def group_count(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, Py_ssize_t bc, Py_ssize_t bp,
                int64_t[:, ::1] counts, int nthreads):
    """counts[b, I] = distinct blocks (p // bp) in slices I*bc .. I*bc + bc - 1 of batch b."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef int T = max(1, nthreads), t
    _check_blocks("group_count", bc, bp, 0, 0)
    _require(n >= 0 and n % bc == 0 and plain.shape[0] == B and counts.shape[0] == B
             and counts.shape[1] == n // bc, "group_count",
             f"compressed ({B}, {n + 1}) ({n} slots, a multiple of bc={bc}), plain ({plain.shape[0]}, {nnz}) "
             f"and counts ({counts.shape[0]}, {counts.shape[1]}) do not match")
    if B == 0 or n == 0:
        return
    _unchanged("group_count", compressed, nnz)
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef int64_t[:, ::1] cur = np.zeros((T, 2 * bc), dtype=np.int64)
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    balanced_split(c, nnz, <const index_t*>NULL, 0, B, n, bc, 1, T, &bounds[0])
    with nogil:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            _group_units(c, p, <const uint8_t*>NULL, n, nnz, bc, bp, 0, 0, 0, bounds[t], bounds[t + 1],
                         &cur[t, 0], &counts[0, 0], NULL, NULL, <uint8_t*>NULL, 0)


def group_fill(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
               Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t stride_c, Py_ssize_t stride_p,
               const index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain, raw_t[:, :, ::1] out_values,
               int nthreads):
    """Fill the blocked tensor whose compressed index group_count's counts gave: block indices
    to out_plain, entries into the zero-filled out_values (B, nnzb, bc * bp * Er). An entry at
    offsets (dc, dp) along (compressed, plain) goes to item dc * stride_c + dp * stride_p of its block."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t Er = values.shape[2], nnzb = out_plain.shape[1]
    cdef int T = max(1, nthreads), t
    cdef Py_ssize_t I
    _check_blocks("group_fill", bc, bp, stride_c, stride_p)
    _require(n >= 0 and n % bc == 0 and plain.shape[0] == B and values.shape[0] == B and values.shape[1] == nnz
             and out_compressed.shape[0] == B and out_compressed.shape[1] == n // bc + 1
             and out_plain.shape[0] == B and out_values.shape[0] == B and out_values.shape[1] == nnzb
             and out_values.shape[2] == bc * bp * Er, "group_fill",
             f"shapes do not match: compressed ({B}, {n + 1}), plain ({plain.shape[0]}, {nnz}), values "
             f"({values.shape[0]}, {values.shape[1]}, {Er}), out_compressed ({out_compressed.shape[0]}, "
             f"{out_compressed.shape[1]}), out_plain ({out_plain.shape[0]}, {nnzb}), out_values "
             f"({out_values.shape[0]}, {out_values.shape[1]}, {out_values.shape[2]}), blocks {bc} x {bp}")
    for t in range(B):  # where each block slice starts writing: within [0, nnzb], in order
        _require(out_compressed[t, 0] == 0 and out_compressed[t, n // bc] == nnzb, "group_fill",
                 f"out_compressed[{t}] must run from 0 to nnzb={nnzb}")
        for I in range(n // bc):
            _require(out_compressed[t, I] <= out_compressed[t, I + 1], "group_fill",
                     f"out_compressed[{t}] must be non-decreasing")
    if B == 0 or n == 0 or nnzb == 0:
        return
    _unchanged("group_fill", compressed, nnz)
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef int64_t[:, ::1] cur = np.zeros((T, 2 * bc), dtype=np.int64)
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    cdef const raw_t* v = &values[0, 0, 0]
    cdef const index_t* oc = &out_compressed[0, 0]
    cdef index_t* op = &out_plain[0, 0]
    cdef raw_t* ov = &out_values[0, 0, 0]
    balanced_split(c, nnz, <const index_t*>NULL, 0, B, n, bc, 1, T, &bounds[0])
    with nogil:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            _group_units(c, p, v, n, nnz, bc, bp, Er, stride_c, stride_p, bounds[t], bounds[t + 1], &cur[t, 0],
                         NULL, oc, op, ov, nnzb)


# -- expanding blocks into entries (bsr -> csr, bsc -> csc) ----------------------------------------
cdef void _expand_units(const index_t* c, const index_t* p, const raw_t* v, Py_ssize_t n, Py_ssize_t nnz,
                        Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t Er, Py_ssize_t stride_c, Py_ssize_t stride_p,
                        Py_ssize_t u0, Py_ssize_t u1, index_t* oc, index_t* op, raw_t* ov) noexcept nogil:
    cdef Py_ssize_t u, b, I, r, k, k0, k1, q, pos, RC = bc * bp, no = n * bc, nnzo = nnz * RC
    cdef const index_t* cb
    cdef index_t base
    for u in range(u0, u1):
        b = u // n
        I = u - b * n
        cb = c + b * (n + 1)
        k0 = cb[I]
        k1 = cb[I + 1]
        for r in range(bc):
            pos = k0 * RC + r * (k1 - k0) * bp
            oc[b * (no + 1) + I * bc + r] = <index_t>pos
            pos += b * nnzo
            for k in range(k0, k1):
                base = <index_t>(p[b * nnz + k] * bp)
                for q in range(bp):
                    op[pos] = base + <index_t>q
                    _copy(ov + pos * Er, v + ((b * nnz + k) * RC + r * stride_c + q * stride_p) * Er, Er)
                    pos += 1
        if I == n - 1:
            oc[b * (no + 1) + no] = <index_t>nnzo


def compressed_expand(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const raw_t[:, :, ::1] values,
                      Py_ssize_t bc, Py_ssize_t bp, Py_ssize_t stride_c, Py_ssize_t stride_p,
                      index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain, raw_t[:, :, ::1] out_values,
                      int nthreads):
    """bsr -> csr, bsc -> csc: every item of every block becomes an entry (zeros included).
    Outputs are preallocated: (B, n * bc + 1), (B, nnz * bc * bp), (B, nnz * bc * bp, Er)."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t Er = out_values.shape[2]
    cdef int T = max(1, nthreads), t
    cdef Py_ssize_t RC = bc * bp
    _check_blocks("compressed_expand", bc, bp, stride_c, stride_p)
    _require(n >= 0 and plain.shape[0] == B and values.shape[0] == B and values.shape[1] == nnz
             and values.shape[2] == RC * Er and out_compressed.shape[0] == B and out_compressed.shape[1] == n * bc + 1
             and out_plain.shape[0] == B and out_plain.shape[1] == nnz * RC and out_values.shape[0] == B
             and out_values.shape[1] == nnz * RC, "compressed_expand",
             f"shapes do not match: compressed ({B}, {n + 1}), plain ({plain.shape[0]}, {nnz}), values "
             f"({values.shape[0]}, {values.shape[1]}, {values.shape[2]}), out_compressed "
             f"({out_compressed.shape[0]}, {out_compressed.shape[1]}), out_plain ({out_plain.shape[0]}, "
             f"{out_plain.shape[1]}), out_values ({out_values.shape[0]}, {out_values.shape[1]}, {Er}), "
             f"blocks {bc} x {bp}")
    if B == 0:
        return
    if n == 0:
        out_compressed[:, :] = 0
        return
    _unchanged("compressed_expand", compressed, nnz)
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    cdef const raw_t* v = &values[0, 0, 0]
    cdef index_t* oc = &out_compressed[0, 0]
    cdef index_t* op = &out_plain[0, 0]
    cdef raw_t* ov = &out_values[0, 0, 0]
    balanced_split(c, nnz, <const index_t*>NULL, 0, B, n, 1, 1, T, &bounds[0])
    with nogil:
        if T == 1:
            _expand_units(c, p, v, n, nnz, bc, bp, Er, stride_c, stride_p, 0, B * n, oc, op, ov)
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                _expand_units(c, p, v, n, nnz, bc, bp, Er, stride_c, stride_p, bounds[t], bounds[t + 1], oc, op,
                              ov)


# --------------------------------------------------------------------------
# transposed blocks

def transpose_blocks(const raw_t[:, :, ::1] src, raw_t[:, :, ::1] dst, int nthreads):
    """dst[k, j, i] = src[k, i, j] for n blocks of R x C items into C x R: the C-contiguous copy
    of a transposed block view (the values of a bsc tensor's ``mT``, a bsr view). NumPy's
    copy of such a view walks its tiny inner dims element by element."""
    cdef Py_ssize_t n = src.shape[0], R = src.shape[1], C = src.shape[2], E = R * C, k, i, j
    cdef int T = max(1, nthreads)
    _require(dst.shape[0] == n and dst.shape[1] == C and dst.shape[2] == R, "transpose_blocks",
             f"dst must be ({n}, {C}, {R}), got ({dst.shape[0]}, {dst.shape[1]}, {dst.shape[2]})")
    if n == 0 or E == 0:
        return
    cdef const raw_t* s = &src[0, 0, 0]
    cdef raw_t* d = &dst[0, 0, 0]
    with nogil:
        for k in prange(n, num_threads=T, schedule="static"):
            for i in range(R):
                for j in range(C):
                    d[k * E + j * R + i] = s[k * E + i * C + j]
