# The merge operations shared by _elementwise.pyx (compressed merges) and _coo_merge.pyx
# (COO merges), included by both: the op codes, applying an op to two values, and a
# branch-free select. The including module cimports cython, value_t and the libc.stdint types.
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* v if t else 0, without a branch (t is 0 or 1): the merge loops stay branch free. */
    static inline float st_sel_f32(int t, float v) { uint32_t u; memcpy(&u, &v, 4); u &= -(uint32_t)t; memcpy(&v, &u, 4); return v; }
    static inline double st_sel_f64(int t, double v) { uint64_t u; memcpy(&u, &v, 8); u &= -(uint64_t)t; memcpy(&v, &u, 8); return v; }
    static inline int64_t st_sel_i64(int t, int64_t v) { return v & -(int64_t)t; }
    """
    float st_sel_f32(int t, float v) nogil
    double st_sel_f64(int t, double v) nogil
    int64_t st_sel_i64(int t, int64_t v) nogil

# The operations of merge_fill (keep in sync with sparsetensor.ops.binary).
cdef enum:
    OP_ADD = 0   # x + alpha * y      (bool: x | (alpha & y))
    OP_MUL = 1   # x * y              (bool: x & y)
    OP_MAX = 2   # numpy.maximum      (bool: x | y)
    OP_MIN = 3   # numpy.minimum      (bool: x & y)
    OP_PLUS = 4  # x + y: OP_ADD with alpha == 1, internal (bool: x | y)

ADD, MUL, MAX, MIN, PLUS = OP_ADD, OP_MUL, OP_MAX, OP_MIN, OP_PLUS

cdef inline value_t _apply(int op, value_t x, value_t y, value_t alpha, bint logical) noexcept nogil:
    cdef bint keep
    if op == OP_PLUS:
        if value_t is uint8_t:
            if logical:
                return x | y
        return x + y
    if value_t is uint8_t:
        if logical:
            if op == OP_ADD:
                return x | (alpha & y)
            if op == OP_MUL or op == OP_MIN:
                return x & y
            return x | y
    if op == OP_ADD:
        return x + alpha * y
    if op == OP_MUL:
        return x * y
    if value_t is cython.floatcomplex or value_t is cython.doublecomplex:
        return x  # maximum/minimum of complex values are refused by the wrapper
    else:
        # NaN wins, as in numpy.maximum; no short-circuit, so that the select compiles without a branch
        if op == OP_MAX:
            keep = (x >= y) | (x != x)
        else:
            keep = (x <= y) | (x != x)
        return x if keep else y


cdef inline value_t _sel(bint t, value_t v) noexcept nogil:
    """v if t else 0, branch free for real types."""
    cdef value_t zero = 0
    if value_t is float:
        return st_sel_f32(t, v)
    elif value_t is double:
        return st_sel_f64(t, v)
    elif value_t is cython.floatcomplex or value_t is cython.doublecomplex:
        return v if t else zero
    else:
        return <value_t>st_sel_i64(t, <int64_t>v)


# Rows per scheduling chunk of the row-parallel passes.
cdef Py_ssize_t ROW_CHUNK = 512
