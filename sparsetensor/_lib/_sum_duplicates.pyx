"""Coalescing kernels for the compressed layouts (Cython, OpenMP): each row's plain indices are
sorted (stably) and the values of repeated ones reduced (see ``_runs.pxd``).

Inputs are trusted to have the shapes and dtypes documented in ``_sum_duplicates.pyi``: the
Python wrapper ``sparsetensor._coalesce.sum_duplicates`` checks them. Index values are not
trusted: they are bounds-checked here before they are used to address memory.
"""

from cython.parallel cimport prange
from libc.stdint cimport int64_t

import numpy as np

from ._runs cimport _lo, _reduce_run, sum_t
from ._types cimport index_t

# Rows up to this length are sorted by insertion sort, longer ones by heapsort.
cdef Py_ssize_t INSERTION_MAX = 32


cdef void _check_compressed_batch(const index_t* comp, Py_ssize_t ncomp, int64_t nnz, int64_t* err) noexcept nogil:
    # err: invariant code (1, 2, 3 for 5.1-5.3), i, value
    cdef Py_ssize_t i
    if comp[0] != 0:
        err[0] = 1
        err[1] = 0
        err[2] = comp[0]
        return
    if comp[ncomp - 1] != nnz:
        err[0] = 2
        err[1] = ncomp - 1
        err[2] = comp[ncomp - 1]
        return
    for i in range(1, ncomp):
        if comp[i] < comp[i - 1]:
            err[0] = 3
            err[1] = i
            err[2] = comp[i] - comp[i - 1]
            return


cdef inline bint _pair_less(index_t ka, int64_t pa, index_t kb, int64_t pb) noexcept nogil:
    return ka < kb or (ka == kb and pa < pb)


cdef void _sift_pairs(index_t* k, int64_t* p, Py_ssize_t root, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t child
    cdef index_t tk
    cdef int64_t tp
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and _pair_less(k[child], p[child], k[child + 1], p[child + 1]):
            child = child + 1
        if not _pair_less(k[root], p[root], k[child], p[child]):
            return
        tk = k[root]
        k[root] = k[child]
        k[child] = tk
        tp = p[root]
        p[root] = p[child]
        p[child] = tp
        root = child


cdef void _sort_pairs(index_t* k, int64_t* p, Py_ssize_t L) noexcept nogil:
    """Sort (key, position) pairs by key, ties by position (so: stably, as positions start in order)."""
    cdef Py_ssize_t i, j
    cdef index_t tk
    cdef int64_t tp
    if L <= INSERTION_MAX:
        for i in range(1, L):
            tk = k[i]
            tp = p[i]
            j = i
            while j > 0 and k[j - 1] > tk:
                k[j] = k[j - 1]
                p[j] = p[j - 1]
                j = j - 1
            k[j] = tk
            p[j] = tp
        return
    for i in range(L // 2 - 1, -1, -1):  # heapsort: in place, O(L log L)
        _sift_pairs(k, p, i, L)
    for i in range(L - 1, 0, -1):
        tk = k[0]
        k[0] = k[i]
        k[i] = tk
        tp = p[0]
        p[0] = p[i]
        p[i] = tp
        _sift_pairs(k, p, 0, i)


cdef void _sift_words(int64_t* w, Py_ssize_t root, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t child
    cdef int64_t t
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and w[child] < w[child + 1]:
            child = child + 1
        if w[root] >= w[child]:
            return
        t = w[root]
        w[root] = w[child]
        w[child] = t
        root = child


cdef void _sort_words(int64_t* w, Py_ssize_t L) noexcept nogil:
    """Sort distinct int64 words: insertion sort for short rows, heapsort for long ones."""
    cdef Py_ssize_t i, j
    cdef int64_t t
    if L <= INSERTION_MAX:
        for i in range(1, L):
            t = w[i]
            j = i
            while j > 0 and w[j - 1] > t:
                w[j] = w[j - 1]
                j = j - 1
            w[j] = t
        return
    for i in range(L // 2 - 1, -1, -1):
        _sift_words(w, i, L)
    for i in range(L - 1, 0, -1):
        t = w[0]
        w[0] = w[i]
        w[i] = t
        _sift_words(w, 0, i)


cdef void _sort_rows_chunk(const index_t* comp, const index_t* plain, Py_ssize_t ncomp, int64_t nnz,
                           int64_t plain_size, Py_ssize_t r0, Py_ssize_t r1, int lbits, index_t* keys,
                           int64_t* perm, int64_t* counts, int64_t* state) noexcept nogil:
    """Rows ``r0:r1`` (flat over batches): bounds, stable sort, distinct count; ``perm`` ends as
    the flat positions ``b * nnz + k`` in sorted order.

    With ``lbits > 0`` each entry is sorted as one word ``plain << lbits | offset in row``;
    otherwise as a (``keys``, ``perm``) pair.
    """
    # state: err code (4, 5 for 5.4/5.5), batch, row, position, value, changed
    cdef Py_ssize_t r, b, i, k, s, e, n = ncomp - 1
    cdef index_t v, prev
    cdef bint ordered
    cdef int64_t count, base, lmask = ((<int64_t>1) << lbits) - 1
    cdef int64_t* w
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        base = b * nnz
        s = comp[b * ncomp + i]
        e = comp[b * ncomp + i + 1]
        ordered = True
        prev = 0
        for k in range(s, e):
            v = plain[base + k]
            if v < 0 or v >= plain_size:
                state[0] = 4 if v < 0 else 5
                state[1] = b
                state[2] = i
                state[3] = k
                state[4] = v
                return
            if k > s and v <= prev:
                ordered = False
            prev = v
        count = e - s
        if ordered:
            for k in range(s, e):
                perm[base + k] = base + k
        elif lbits > 0:
            state[5] = 1
            w = perm + base + s
            for k in range(s, e):
                w[k - s] = ((<int64_t>plain[base + k]) << lbits) | (k - s)
            _sort_words(w, e - s)
            for k in range(1, e - s):
                if (w[k] >> lbits) == (w[k - 1] >> lbits):
                    count = count - 1
            for k in range(e - s):
                w[k] = base + s + (w[k] & lmask)
        else:
            state[5] = 1
            for k in range(s, e):
                keys[base + k] = plain[base + k]
                perm[base + k] = base + k
            _sort_pairs(keys + base + s, perm + base + s, e - s)
            for k in range(s + 1, e):
                if keys[base + k] == keys[base + k - 1]:
                    count = count - 1
        counts[r] = count


def compressed_sort_rows(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, int64_t plain_size,
                         int lbits, index_t[:, ::1] keys, int64_t[:, ::1] perm, int64_t[:, ::1] counts,
                         int nthreads):
    """Check 5.1, 5.2, 5.3 (lower bound), 5.4, 5.5; sort each row stably by plain index, writing
    the flat positions (``b * nnz + k``) in sorted order to ``perm``; count distinct plain
    indices per row.

    ``lbits > 0`` sorts packed words (needs ``bits(plain_size - 1) + lbits <= 63`` and rows
    shorter than ``2**lbits``; ``keys`` may be empty); ``lbits == 0`` sorts (key, position)
    pairs, with ``keys`` as scratch of the shape of ``plain``. Returns ``(error, changed)``:
    ``error`` is ``(invariant, batch, row, position, value)`` or None; ``changed`` is False
    when every row was already strictly increasing (nothing to repair).
    """
    cdef Py_ssize_t B = compressed.shape[0], ncomp = compressed.shape[1], nnz = plain.shape[1]
    cdef Py_ssize_t nrows = B * (ncomp - 1), b, c
    cdef Py_ssize_t nt = max(1, min(nthreads, B))
    berr_arr = np.zeros((B, 3), np.int64)
    cdef int64_t[:, ::1] berr = berr_arr
    with nogil:
        for b in prange(B, schedule="static", num_threads=nt):
            _check_compressed_batch(&compressed[b, 0], ncomp, nnz, &berr[b, 0])
    bad = np.flatnonzero(berr_arr[:, 0])
    if bad.size:
        b = bad[0]
        code, i, value = (int(x) for x in berr_arr[b])
        return ("5." + str(code), int(b), i, i, value), False
    if nrows == 0 or nnz == 0:
        return None, False
    cdef Py_ssize_t nchunks = max(1, min(nrows, 64 * nthreads, nrows // 256 + 1))
    state_arr = np.zeros((nchunks, 6), np.int64)
    cdef int64_t[:, ::1] state = state_arr
    cdef index_t* kp = &keys[0, 0] if keys.shape[0] > 0 and keys.shape[1] > 0 else NULL
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _sort_rows_chunk(&compressed[0, 0], &plain[0, 0], ncomp, nnz, plain_size, _lo(c, nrows, nchunks),
                             _lo(c + 1, nrows, nchunks), lbits, kp, &perm[0, 0], &counts[0, 0], &state[c, 0])
    bad = np.flatnonzero(state_arr[:, 0])
    if bad.size:
        code, b, i, k, value = (int(x) for x in state_arr[bad[0], :5])
        return ("5." + str(code), b, i, k, value), False
    return None, bool(state_arr[:, 5].any())


cdef void _write_rows_chunk(const index_t* comp, const index_t* new_comp, Py_ssize_t ncomp, int64_t nnz,
                            int64_t nnz_out, Py_ssize_t r0, Py_ssize_t r1, const index_t* plain,
                            const int64_t* perm, index_t* out_plain, const sum_t* vals, sum_t* out,
                            Py_ssize_t E, bint logical_or) noexcept nogil:
    cdef Py_ssize_t r, b, i, s, e, a, z, n = ncomp - 1
    cdef int64_t j
    cdef index_t key
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        s = b * nnz + comp[b * ncomp + i]
        e = b * nnz + comp[b * ncomp + i + 1]
        j = b * nnz_out + new_comp[b * ncomp + i]
        a = s
        while a < e:
            key = plain[perm[a]]
            z = a + 1
            while z < e and plain[perm[z]] == key:
                z = z + 1
            out_plain[j] = key
            if E > 0:
                _reduce_run(out + j * E, vals, perm, a, z, E, logical_or)
            j = j + 1
            a = z


def compressed_write(const index_t[:, ::1] compressed, const index_t[:, ::1] new_compressed,
                     const index_t[:, ::1] plain, const int64_t[:, ::1] perm, index_t[:, ::1] out_plain,
                     const sum_t[:, ::1] values, sum_t[:, ::1] out, bint logical_or, int nthreads):
    """Per row, write the distinct plain indices (in ``perm`` order) to ``out_plain`` and reduce the
    values of each run of equal ones (``values``: ``(B * nnz, E)``, ``out``: ``(B * nnz_out, E)``)."""
    cdef Py_ssize_t B = compressed.shape[0], ncomp = compressed.shape[1], nnz = plain.shape[1]
    cdef Py_ssize_t nnz_out = out_plain.shape[1], E = values.shape[1], nrows = B * (ncomp - 1), c
    if (ncomp < 1 or new_compressed.shape[0] != B or new_compressed.shape[1] != ncomp or plain.shape[0] != B
            or perm.shape[0] != B or perm.shape[1] != nnz or out_plain.shape[0] != B
            or values.shape[0] != B * nnz or out.shape[0] != B * nnz_out or out.shape[1] != E):
        raise ValueError(f"compressed_write: compressed ({B}, {ncomp}), new_compressed ({new_compressed.shape[0]}, "
                         f"{new_compressed.shape[1]}), plain ({plain.shape[0]}, {nnz}), perm ({perm.shape[0]}, "
                         f"{perm.shape[1]}), out_plain ({out_plain.shape[0]}, {nnz_out}), values ({values.shape[0]}, "
                         f"{E}) and out ({out.shape[0]}, {out.shape[1]}) do not match")
    if nrows == 0 or nnz_out == 0:
        return
    cdef Py_ssize_t nchunks = max(1, min(nrows, 64 * nthreads, nrows // 256 + 1))
    cdef const sum_t* vp = &values[0, 0] if E > 0 else NULL
    cdef sum_t* op = &out[0, 0] if E > 0 else NULL
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            _write_rows_chunk(&compressed[0, 0], &new_compressed[0, 0], ncomp, nnz, nnz_out,
                              _lo(c, nrows, nchunks), _lo(c + 1, nrows, nchunks), &plain[0, 0], &perm[0, 0],
                              &out_plain[0, 0], vp, op, E, logical_or)
