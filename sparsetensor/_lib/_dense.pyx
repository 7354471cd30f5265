"""Dense <-> sparse kernels (Cython, OpenMP): sparse -> dense here, dense -> sparse in
_fromdense.pyx (re-exported, so that this module offers all four conversions), and the
gather of a dense operand at a compressed pattern (the scatter's adjoint: sparse * dense).

Each public ``def`` checks and normalises its arrays (O(1) shape, dtype and
contiguity checks; dtype reinterpretation into kernel views), then calls a
fused private kernel on flat memoryviews inside ``nogil``. Index contents are
never trusted: every index is checked before it is used to address memory, and
a broken one is reported as an error tuple instead of being followed.

Kernel views (``_raw_view`` in _dense_common.pxi, ``_arith_view`` here, ``_zero_view``
in _fromdense.pyx):

- raw: the same bytes as uint8/16/32/64 (complex128 is two uint64), for copies;
- arithmetic: ``num_t`` (signed ints as the unsigned ints of their width, whose
  wrapping sums are the same; bool is uint8 with logical or), for accumulation;
- zero test: ints and bool as unsigned ints of their width, float32/float64 as
  themselves (NaN is nonzero, -0.0 is zero), complex as their float pairs and
  float16 as uint16 bits with the sign bit masked off.
"""
import numpy as np

from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

from sparsetensor._lib._balance cimport balanced_split
from sparsetensor._lib._types cimport index_t, num_t, raw_t
from sparsetensor._lib._guard cimport bad_index, bad_segment, clamp
from sparsetensor._lib._arrays cimport _dim, _index_code

cimport numpy as cnp

cnp.import_array()

from sparsetensor._lib._fromdense import dense_to_compressed, dense_to_coo

include "_dense_common.pxi"


# Codes a nogil kernel returns on a broken index, and their invariant names.
cdef enum:
    _OK = 0
    _BAD_COMPRESSED = 1
    _PLAIN_NEGATIVE = 2
    _PLAIN_TOO_LARGE = 3
    _COO_NEGATIVE = 4
    _COO_TOO_LARGE = 5

_ERROR_NAMES = {
    _BAD_COMPRESSED: "5.3",
    _PLAIN_NEGATIVE: "5.4",
    _PLAIN_TOO_LARGE: "5.5",
    _COO_NEGATIVE: "C4",
    _COO_TOO_LARGE: "C5",
}

# Accumulation modes.
cdef enum:
    _COPY = 0
    _ADD = 1
    _OR = 2


# --------------------------------------------------------------------------
# dtype normalisation (Python level, O(1); the shared checks are in _dense_common.pxi)

def _arith_view(a, name, logical):
    """(view, mode) for accumulation: a ``num_t`` view and _ADD or _OR."""
    _require_c_contiguous(a, name)
    dt = a.dtype
    if dt == np.bool_:
        return a.view(np.uint8), _OR
    if not dt.isnative:
        raise TypeError(f"{name}: expected a native byte order dtype, got {dt}")
    if logical:
        if dt != np.uint8:
            raise TypeError(f"{name}: logical accumulation needs bool or uint8, got {dt}")
        return a, _OR
    if dt.kind == "i":          # wrapping sums are the same on the unsigned view
        return a.view(_UINT_OF_SIZE[dt.itemsize]), _ADD
    if dt.kind == "u" or dt in (np.float32, np.float64, np.complex64, np.complex128):
        return a, _ADD
    if dt == np.float16:
        raise TypeError(f"{name}: float16 cannot be accumulated here; widen it to float32 first")
    raise TypeError(f"{name}: unsupported dtype {dt} for accumulation")


def _check_index_array(a, name, ndim):
    _require_c_contiguous(a, name)
    if a.dtype not in (np.int32, np.int64):
        raise TypeError(f"{name} must be int32 or int64, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {a.shape}")


def _scatter_views(values, out, accumulate, logical):
    """(values view, out view, mode) for the scatter kernels, after checking
    that `out` is a writeable C-contiguous array of the dtype of `values`."""
    _require_c_contiguous(values, "values")
    _require_c_contiguous(out, "out")
    if values.dtype != out.dtype:
        raise TypeError(f"out must have the dtype of values ({values.dtype}), got {out.dtype}")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")
    if not accumulate:
        return _raw_view(values, "values"), _raw_view(out, "out"), _COPY
    v, mode = _arith_view(values, "values", logical)
    return v, _arith_view(out, "out", logical)[0], mode


# --------------------------------------------------------------------------
# compressed -> dense

cdef inline void _put(num_t* dst, const num_t* src, Py_ssize_t n, int mode) noexcept nogil:
    cdef Py_ssize_t t
    if mode == _ADD:
        for t in range(n):
            dst[t] = dst[t] + src[t]
    elif mode == _OR:
        if num_t is uint8_t:
            for t in range(n):
                dst[t] = (dst[t] | src[t]) != 0
    else:
        for t in range(n):
            dst[t] = src[t]


cdef int _c2d_slot(
    const index_t* compressed, const index_t* plain, const num_t* values, num_t* out,
    const _Geom* g, Py_ssize_t nnz, Py_ssize_t s, int mode, int64_t* where,
) noexcept nogil:
    """Checks compressed slot s = b * nc + i and, with ``out`` not NULL, writes its
    blocks. On a broken index returns its code and, with ``where`` not NULL,
    stores (entry or slot, position, value) there."""
    cdef Py_ssize_t b = s // g.nc, i = s % g.nc
    cdef int64_t lo = compressed[b * (g.nc + 1) + i]
    cdef int64_t hi = compressed[b * (g.nc + 1) + i + 1]
    cdef int64_t k, p
    cdef Py_ssize_t r, c, ii, n = g.Cb * g.D
    cdef const num_t* src
    if lo < 0 or lo > nnz:
        if where != NULL:
            where[0] = i; where[1] = -1; where[2] = lo
        return _BAD_COMPRESSED
    if hi < lo or hi > nnz:
        if where != NULL:
            where[0] = i + 1; where[1] = -1; where[2] = hi
        return _BAD_COMPRESSED
    for k in range(lo, hi):
        p = plain[b * nnz + k]
        if p < 0 or p >= g.nplain:
            if where != NULL:
                where[0] = i; where[1] = k; where[2] = p
            return _PLAIN_NEGATIVE if p < 0 else _PLAIN_TOO_LARGE
        if out == NULL:
            continue
        if g.rows:
            r = i; c = p
        else:
            r = p; c = i
        src = values + (b * nnz + k) * g.Rb * n
        for ii in range(g.Rb):
            _put(out + ((b * g.NR + r * g.Rb + ii) * g.NC + c * g.Cb) * g.D, src, n, mode)
            src += n
    return _OK


def _c2d_kernel(
    const index_t[::1] compressed, const index_t[::1] plain,
    const num_t[::1] values, num_t[::1] out,
    Py_ssize_t B, Py_ssize_t nnz, Py_ssize_t NR, Py_ssize_t NC,
    Py_ssize_t Rb, Py_ssize_t Cb, Py_ssize_t D, bint rows, int mode, int nthreads, bint check_ends,
):
    cdef _Geom g = _geom(B, NR, NC, D, Rb, Cb, rows)
    cdef Py_ssize_t s, t, part, nslots = B * g.nc, nparts = 1
    cdef int nerr = 0, code = _OK
    cdef int64_t where[3]
    cdef int nt = _threads(nthreads, nslots)
    cdef const index_t* cp = &compressed[0]
    cdef const index_t* pp = &plain[0]
    cdef const num_t* vp = &values[0]
    cdef num_t* op = &out[0]
    cdef Py_ssize_t* bounds
    where[0] = where[1] = where[2] = 0
    # Slot s writes only the output rows (compressed_rows) or columns (not) of
    # its own compressed index, so no two threads ever write one element. The slots
    # are cut into ranges of about equal entries (balanced_split), a few per thread.
    if nt > 1:
        nparts = min(nslots, 8 * nt)
        bounds = <Py_ssize_t*>malloc((nparts + 1) * sizeof(Py_ssize_t))
        if bounds == NULL:
            raise MemoryError()
        with nogil:
            balanced_split(cp, nnz, <const index_t*>NULL, 0, B, g.nc, 1, Rb * Cb * D, nparts, bounds)
            for part in prange(nparts, num_threads=nt, schedule="dynamic"):
                for t in range(bounds[part], bounds[part + 1]):
                    nerr += _c2d_slot(cp, pp, vp, op, &g, nnz, t, mode, NULL)
        free(bounds)
    else:
        with nogil:
            for s in range(nslots):
                nerr = _c2d_slot(cp, pp, vp, op, &g, nnz, s, mode, NULL)
                if nerr:
                    break
    if nerr == 0:
        # 5.1 and 5.2 (O(B)): the scan checks 5.3-5.5 but trusts where each batch's first
        # slot starts and its last ends (a broken end drops entries silently, reads nothing out
        # of bounds)
        for s in range(B if check_ends else 0):
            if cp[s * (g.nc + 1)] != 0:
                return ("5.1", s, 0, -1, int(cp[s * (g.nc + 1)]))
            if cp[s * (g.nc + 1) + g.nc] != nnz:
                return ("5.2", s, g.nc, -1, int(cp[s * (g.nc + 1) + g.nc]))
        return None
    with nogil:
        for s in range(nslots):
            code = _c2d_slot(cp, pp, vp, NULL, &g, nnz, s, mode, where)
            if code != _OK:
                break
    if code == _OK:  # the indices changed between the scatter and the scan (another thread)
        raise ValueError("to_dense: an index changed during the conversion")
    return (_ERROR_NAMES[code], s // g.nc, where[0], where[1], where[2])


def compressed_to_dense(compressed, plain, values, out, compressed_rows, accumulate,
                        nthreads, *, logical=False, check_ends=False):
    """Scatter the blocks of a batched compressed tensor into a zero-filled dense array.

    Parameters
    ----------
    compressed : ndarray, (B, nc + 1), int32 or int64, C-contiguous
        Compressed indices; ``nc = NR // Rb`` for rows, ``NC // Cb`` for columns.
    plain : ndarray, (B, nnz), dtype of `compressed`, C-contiguous
        Plain (block) indices.
    values : ndarray, (B, nnz, Rb, Cb, D), C-contiguous
        Blocks, any numeric or bool dtype; with `accumulate` float16 and
        longdouble are refused (widen float16 to float32 first).
    out : ndarray, (B, NR, NC, D), C-contiguous, writeable, zero-filled, dtype of `values`
        Written in place: ``out[b, r*Rb+i, c*Cb+j, :]`` receives ``values[b, k, i, j, :]``.
    compressed_rows : bool
        True for csr/bsr (block (r, c) = (compressed slot, plain index)), False for csc/bsc.
    accumulate : bool
        Sum duplicates (logical or, stored as 0/1, for bool) instead of storing
        them; without it a duplicate's last writer wins.
    nthreads : int
        OpenMP threads; small inputs run serially.
    logical : bool, keyword-only
        Accumulate uint8 `values` with logical or (implied for a bool dtype).
    check_ends : bool, keyword-only
        Also check invariants 5.1 and 5.2 (an O(B) look, after the scan): for indices that
        were never checked, where a batch that does not start at 0 or end at nnz would lose
        entries silently.

    Returns
    -------
    None, or the first broken index found as (invariant, batch, row, position, value):
    ``("5.3", b, i, -1, compressed[b, i])`` when an entry is outside ``[0, nnz]`` or
    below its predecessor, ``("5.4" | "5.5", b, slot, k, plain[b, k])`` for a plain
    index below 0 or not below the number of plain blocks; when the scan finds none of
    these and `check_ends`, ``("5.1" | "5.2", b, i, -1, compressed[b, i])`` for the first
    batch that does not start at 0 or end at nnz. `out` is then partially written.
    Invariant 5.6 is not checked.

    Examples
    --------
    >>> import numpy as np
    >>> out = np.zeros((1, 2, 3, 1))
    >>> compressed_to_dense(np.array([[0, 1, 2]]), np.array([[2, 0]]),
    ...                     np.array([5.0, 7.0]).reshape(1, 2, 1, 1, 1), out, True, False, 1)
    >>> out[0, :, :, 0]
    array([[0., 0., 5.],
           [7., 0., 0.]])
    >>> compressed_to_dense(np.array([[0, 1, 2]]), np.array([[3, 0]]),
    ...                     np.array([5.0, 7.0]).reshape(1, 2, 1, 1, 1), out, True, False, 1)
    ('5.5', 0, 0, 0, 3)
    """
    _check_index_array(compressed, "compressed", 2)
    _check_index_array(plain, "plain", 2)
    if plain.dtype != compressed.dtype:
        raise TypeError(f"plain must have the dtype of compressed ({compressed.dtype}), "
                        f"got {plain.dtype}")
    v, o, mode = _scatter_views(values, out, accumulate, logical)
    if values.ndim != 5 or out.ndim != 4:
        raise ValueError(f"expected values (B, nnz, Rb, Cb, D) and out (B, NR, NC, D), "
                         f"got {values.shape} and {out.shape}")
    B, nnz, Rb, Cb, D = values.shape
    if Rb < 1 or Cb < 1:
        raise ValueError(f"block sizes must be positive, got {(Rb, Cb)}")
    NR, NC = out.shape[1], out.shape[2]
    if out.shape[0] != B or out.shape[3] != D or NR % Rb or NC % Cb:
        raise ValueError(f"out shape {out.shape} does not fit values shape {values.shape}")
    nc = NR // Rb if compressed_rows else NC // Cb
    if compressed.shape != (B, nc + 1) or plain.shape != (B, nnz):
        raise ValueError(f"expected compressed {(B, nc + 1)} and plain {(B, nnz)}, "
                         f"got {compressed.shape} and {plain.shape}")
    return _c2d_kernel(_flat(compressed), _flat(plain), _flat(v), _flat(o), B, nnz, NR, NC,
                       Rb, Cb, v.shape[4], bool(compressed_rows), mode, int(nthreads), bool(check_ends))


cdef inline bint _plain_1d(a):
    return isinstance(a, cnp.ndarray) and cnp.PyArray_NDIM(<cnp.ndarray>a) == 1 and \
        cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)


cdef bint _small_fill(const index_t* cp, const index_t* pp, const raw_t* vp, raw_t* op, Py_ssize_t n,
                      Py_ssize_t nnz, Py_ssize_t R, Py_ssize_t C, Py_ssize_t E, bint rows) noexcept nogil:
    """True (having stopped) at an index outside its bounds: the indices were validated, but
    their memory may have changed since (issue 34)."""
    cdef Py_ssize_t i, k, e, at
    cdef int64_t lo, hi, j
    for i in range(n):
        lo = cp[i]
        hi = cp[i + 1]
        if bad_segment(lo, hi, nnz):
            return True
        for k in range(lo, hi):
            j = pp[k]
            if bad_index(j, C if rows else R):
                return True
            at = (i * C + j) if rows else (j * C + i)
            for e in range(E):
                op[at * E + e] = vp[k * E + e]
    return False


cdef bint _small_fill_items(const index_t* cp, const index_t* pp, const void* vp, void* op, Py_ssize_t isz,
                            Py_ssize_t n, Py_ssize_t nnz, Py_ssize_t R, Py_ssize_t C, bint rows) noexcept nogil:
    """_small_fill of items of isz bytes (16: two uint64 each)."""
    if isz == 1:
        return _small_fill(cp, pp, <const uint8_t*>vp, <uint8_t*>op, n, nnz, R, C, 1, rows)
    elif isz == 2:
        return _small_fill(cp, pp, <const uint16_t*>vp, <uint16_t*>op, n, nnz, R, C, 1, rows)
    elif isz == 4:
        return _small_fill(cp, pp, <const uint32_t*>vp, <uint32_t*>op, n, nnz, R, C, 1, rows)
    return _small_fill(cp, pp, <const uint64_t*>vp, <uint64_t*>op, n, nnz, R, C, isz // 8, rows)


def small_to_dense_2d(compressed, plain, values, out, bint rows):
    """``out[...] = `` the 2-d csr (``rows``) or csc tensor, for the fixed cost of small inputs: one
    thread, C-API checks and no fused dispatch (a few microseconds less than compressed_to_dense).

    The indices must satisfy invariants 5.3-5.6 (a canonical tensor: validated, or a kernel's
    output; 5.1 and 5.2 are looked at), `out` is C-contiguous (R, C), zero-filled, of the values' dtype, and every array
    1-d (compressed (n + 1,), plain and values (nnz,)) and C-contiguous. Returns False, having
    written nothing, or having met an index outside its bounds (memory changed after validation;
    the general path then reports it), where the arrays are not such or their dtypes not ones it moves (index dtypes
    other than one of int32/int64 for both, an element size other than 1, 2, 4, 8 or 16 bytes):
    the caller then takes compressed_to_dense.
    """
    if not (_plain_1d(compressed) and _plain_1d(plain) and _plain_1d(values) and isinstance(out, cnp.ndarray)):
        return False
    cdef cnp.ndarray c = <cnp.ndarray>compressed, p = <cnp.ndarray>plain, v = <cnp.ndarray>values
    cdef cnp.ndarray o = <cnp.ndarray>out
    cdef int code = _index_code(c)
    cdef Py_ssize_t isz = cnp.PyArray_ITEMSIZE(v), n = _dim(c, 0) - 1, nnz = _dim(p, 0)
    if (code < 0 or _index_code(p) != code or cnp.PyArray_NDIM(o) != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(o)
            or cnp.PyArray_ITEMSIZE(o) != isz or not cnp.PyArray_ISWRITEABLE(o)):
        return False
    cdef Py_ssize_t R = _dim(o, 0), C = _dim(o, 1)
    if n != (R if rows else C) or _dim(v, 0) != nnz:
        return False
    cdef void* cp = cnp.PyArray_DATA(c)
    cdef void* pp = cnp.PyArray_DATA(p)
    cdef void* vp = cnp.PyArray_DATA(v)
    cdef void* op = cnp.PyArray_DATA(o)
    if isz not in (1, 2, 4, 8, 16):
        return False
    # 5.1/5.2 (a caller may have written them since the check; a broken end drops entries
    # without reading out of bounds): the general path reports them
    if code == 0 and ((<int32_t*>cp)[0] != 0 or (<int32_t*>cp)[n] != nnz):
        return False
    if code == 1 and ((<int64_t*>cp)[0] != 0 or (<int64_t*>cp)[n] != nnz):
        return False
    cdef bint bad
    if code == 0:
        bad = _small_fill_items(<int32_t*>cp, <int32_t*>pp, vp, op, isz, n, nnz, R, C, rows)
    else:
        bad = _small_fill_items(<int64_t*>cp, <int64_t*>pp, vp, op, isz, n, nnz, R, C, rows)
    return not bad


# --------------------------------------------------------------------------
# coo -> dense

cdef int _coo_put(
    const index_t* indices, const int64_t* shape, const num_t* values, num_t* out,
    Py_ssize_t S, Py_ssize_t nnz, Py_ssize_t D, Py_ssize_t k, int mode, int64_t* where,
) noexcept nogil:
    """Checks entry k and, with ``out`` not NULL, writes it."""
    cdef Py_ssize_t d
    cdef int64_t v, lin = 0
    for d in range(S):
        v = indices[d * nnz + k]
        if v < 0 or v >= shape[d]:
            if where != NULL:
                where[0] = d; where[1] = k; where[2] = v
            return _COO_NEGATIVE if v < 0 else _COO_TOO_LARGE
    if out != NULL:
        for d in range(S):      # all in bounds: lin < prod(shape) cannot overflow
            lin = lin * shape[d] + indices[d * nnz + k]
        _put(out + lin * D, values + k * D, D, mode)
    return _OK


def _coo2d_kernel(
    const index_t[::1] indices, const int64_t[::1] shape,
    const num_t[::1] values, num_t[::1] out,
    Py_ssize_t S, Py_ssize_t nnz, Py_ssize_t D, int mode, int nthreads,
):
    cdef Py_ssize_t k
    cdef int nerr = 0, code = _OK
    cdef int64_t where[3]
    # Accumulating duplicates is serial: two entries may hit one element.
    cdef int nt = 1 if mode != _COPY else _threads(nthreads, nnz)
    cdef const index_t* ip = &indices[0]
    cdef const int64_t* sp = &shape[0]
    cdef const num_t* vp = &values[0]
    cdef num_t* op = &out[0]
    where[0] = where[1] = where[2] = 0
    if nt > 1:
        for k in prange(nnz, nogil=True, num_threads=nt, schedule="static"):
            nerr += _coo_put(ip, sp, vp, op, S, nnz, D, k, mode, NULL)
    else:
        with nogil:
            for k in range(nnz):
                nerr = _coo_put(ip, sp, vp, op, S, nnz, D, k, mode, NULL)
                if nerr:
                    break
    if nerr == 0:
        return None
    with nogil:
        for k in range(nnz):
            code = _coo_put(ip, sp, vp, NULL, S, nnz, D, k, mode, where)
            if code != _OK:
                break
    if code == _OK:  # the indices changed between the scatter and the scan (another thread)
        raise ValueError("to_dense: an index changed during the conversion")
    return (_ERROR_NAMES[code], where[0], where[1], where[2])


def coo_to_dense(indices, values, shape, out, accumulate, nthreads, *, logical=False):
    """Scatter COO entries into a zero-filled dense array.

    Parameters
    ----------
    indices : ndarray, (S, nnz), int32 or int64, C-contiguous
    values : ndarray, (nnz, D), C-contiguous
    shape : ndarray, (S,), int64
        Sparse shape; ``prod(shape) == out.shape[0]`` (1 for S == 0).
    out : ndarray, (prod(shape), D), C-contiguous, writeable, zero-filled, dtype of `values`
        Row ``ravel_multi_index(indices[:, k], shape)`` receives ``values[k]``.
    accumulate : bool
        Sum duplicates (logical or for bool; runs serially). Without it entries
        are stored in parallel, so indices must be unique (coalesced).
    nthreads : int
    logical : bool, keyword-only
        Accumulate uint8 `values` with logical or (implied for a bool dtype).

    Returns
    -------
    None, or the first broken index as ``("C4" | "C5", d, k, indices[d, k])``
    (below 0, or not below ``shape[d]``); `out` is then partially written.

    Examples
    --------
    >>> import numpy as np
    >>> out = np.zeros((6, 1), np.int64)
    >>> coo_to_dense(np.array([[0, 1, 1], [2, 0, 0]]), np.array([[1], [2], [3]]),
    ...              np.array([2, 3]), out, True, 1)
    >>> out[:, 0]
    array([0, 0, 1, 5, 0, 0])
    >>> coo_to_dense(np.array([[0], [3]]), np.array([[1]]), np.array([2, 3]), out, True, 1)
    ('C5', 1, 0, 3)
    """
    _check_index_array(indices, "indices", 2)
    shape, numel = _check_shape(shape)
    v, o, mode = _scatter_views(values, out, accumulate, logical)
    if values.ndim != 2 or out.ndim != 2:
        raise ValueError(f"expected values (nnz, D) and out (M, D), "
                         f"got {values.shape} and {out.shape}")
    S, nnz = shape.shape[0], values.shape[0]
    if indices.shape != (S, nnz) or out.shape != (numel, values.shape[1]):
        raise ValueError(f"expected indices {(S, nnz)} and out {(numel, values.shape[1])}, "
                         f"got {indices.shape} and {out.shape}")
    return _coo2d_kernel(_flat(indices), _flat(shape), _flat(v), _flat(o), S, nnz,
                         v.shape[1], mode, int(nthreads))


# Element types the gather moves: raw bytes of 1, 2, 4 or 8 bytes, and complex128.
ctypedef fused move_t:
    uint8_t
    uint16_t
    uint32_t
    uint64_t
    double complex

# Rows a thread takes at a time in the gather (dynamic schedule).
cdef Py_ssize_t GATHER_ROWS = 512


# -- gather: a dense operand sampled at a compressed pattern --------------------------------------
def gather_compressed(const index_t[:, ::1] compressed, const index_t[:, ::1] plain,
                      const move_t[:, :, :, :] dense, Py_ssize_t Rb, Py_ssize_t Cb, bint compressed_rows,
                      move_t[:, :, ::1] out, int nthreads):
    """out[b, k, (i * Cb + j) * D + d] = dense[b, r * Rb + i, c * Cb + j, d] for every entry k of batch b,
    (r, c) its block row and column. ``dense`` is (B, R, C, D) with any strides (broadcast views
    welcome); ``out`` is (B, nnz, Rb * Cb * D)."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t D = dense.shape[3], R = B * n, r, b, s, k, q, br, bc, i, j, d, E = Rb * Cb * D
    cdef Py_ssize_t nplain = dense.shape[2] // Cb if compressed_rows else dense.shape[1] // Rb
    cdef int64_t lo
    cdef int T = max(1, min(nthreads, R // GATHER_ROWS + 1))
    if plain.shape[0] != B or dense.shape[0] != B or out.shape[0] != B or out.shape[1] != nnz or out.shape[2] != E:
        raise ValueError(f"gather_compressed: shapes do not match: compressed ({compressed.shape[0]}, {compressed.shape[1]}), "
                         f"plain ({plain.shape[0]}, {plain.shape[1]}), dense ({dense.shape[0]}, {dense.shape[1]}, {dense.shape[2]}, {dense.shape[3]}), out ({out.shape[0]}, {out.shape[1]}, {out.shape[2]})")
    if compressed_rows:
        if dense.shape[1] != n * Rb or dense.shape[2] % Cb:
            raise ValueError("gather_compressed: dense rows do not match the compressed index")
    elif dense.shape[2] != n * Cb or dense.shape[1] % Rb:
        raise ValueError("gather_compressed: dense columns do not match the compressed index")
    if R == 0 or nnz == 0 or E == 0:
        return
    with nogil:
        for r in prange(R, num_threads=T, schedule="dynamic", chunksize=GATHER_ROWS):
            b = r // n
            s = r - b * n
            lo = clamp(compressed[b, s], 0, nnz)  # the memory may have changed since it was checked
            for k in range(lo, clamp(compressed[b, s + 1], lo, nnz)):
                q = plain[b, k]
                if bad_index(q, nplain):
                    continue
                if compressed_rows:
                    br = s
                    bc = q
                else:
                    br = q
                    bc = s
                if E == 1:
                    out[b, k, 0] = dense[b, br, bc, 0]
                else:
                    for i in range(Rb):
                        for j in range(Cb):
                            for d in range(D):
                                out[b, k, (i * Cb + j) * D + d] = dense[b, br * Rb + i, bc * Cb + j, d]
