# Reductions of runs of equal indices, shared by the coalescing kernels (COO and compressed):
# sum (integers wrap as in NumPy), logical or for bool (as uint8), float16 (as its uint16 bits)
# summed in float32 and rounded once. All inline: cimported, never linked.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from *:
    """
    #include <string.h>
    /* IEEE binary16 <-> binary32, round to nearest even (NumPy's algorithm). */
    static inline float st_half_to_float(uint16_t h) {
        uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
        uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
        float f;
        if (exp == 0x1fu) {
            bits = sign | 0x7f800000u | (mant << 13);
        } else if (exp != 0) {
            bits = sign | ((exp + 112u) << 23) | (mant << 13);
        } else if (mant != 0) {
            exp = 113u;
            while (!(mant & 0x400u)) { mant <<= 1; exp--; }
            bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
        } else {
            bits = sign;
        }
        memcpy(&f, &bits, 4);
        return f;
    }
    static inline uint16_t st_float_to_half(float value) {
        uint32_t f, f_exp, f_sig;
        uint16_t h_sgn, h_sig;
        memcpy(&f, &value, 4);
        h_sgn = (uint16_t)((f & 0x80000000u) >> 16);
        f_exp = f & 0x7f800000u;
        if (f_exp >= 0x47800000u) {
            f_sig = f & 0x007fffffu;
            if (f_exp == 0x7f800000u && f_sig != 0) {
                uint16_t ret = (uint16_t)(0x7c00u + (f_sig >> 13));
                if (ret == 0x7c00u) ret++;
                return (uint16_t)(h_sgn + ret);
            }
            return (uint16_t)(h_sgn + 0x7c00u);
        }
        if (f_exp <= 0x38000000u) {
            if (f_exp < 0x33000000u) return h_sgn;
            f_exp >>= 23;
            f_sig = 0x00800000u + (f & 0x007fffffu);
            f_sig >>= (113u - f_exp);
            if (((f_sig & 0x00003fffu) != 0x00001000u) || (f & 0x000007ffu)) f_sig += 0x00001000u;
            return (uint16_t)(h_sgn + (uint16_t)(f_sig >> 13));
        }
        f_sig = f & 0x007fffffu;
        if ((f_sig & 0x00003fffu) != 0x00001000u) f_sig += 0x00001000u;
        h_sig = (uint16_t)((f_exp - 0x38000000u + f_sig) >> 13);
        return (uint16_t)(h_sgn + h_sig);
    }
    """
    float st_half_to_float(uint16_t h) nogil
    uint16_t st_float_to_half(float f) nogil



# Positions into the input: int32 while nnz allows it (less memory traffic in the sort).
ctypedef fused pos_t:
    int32_t
    int64_t

# What the radix sort carries with each key: a position (int32, int64), or the raw bits

# float16 bits that are summed in float32 and rounded once. bool arrives as uint8_t
# with logical_or set.
ctypedef fused sum_t:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    float
    double
    float complex
    double complex


cdef inline Py_ssize_t _lo(Py_ssize_t c, Py_ssize_t n, Py_ssize_t nchunks) noexcept nogil:
    """First element of chunk ``c`` when ``n`` elements are split into ``nchunks`` near-equal chunks."""
    cdef Py_ssize_t q = n // nchunks, r = n % nchunks
    return q * c + (c if c < r else r)


# -- reductions of runs (shared by COO and compressed) ---------------------------------
cdef inline sum_t _add(sum_t a, sum_t b) noexcept nogil:
    # signed overflow wraps, as in NumPy (computed in unsigned arithmetic: no UB)
    if sum_t is int32_t:
        return <int32_t>(<uint32_t>a + <uint32_t>b)
    elif sum_t is int64_t:
        return <int64_t>(<uint64_t>a + <uint64_t>b)
    elif sum_t is int8_t:
        return <int8_t>(<uint8_t>a + <uint8_t>b)
    elif sum_t is int16_t:
        return <int16_t>(<uint16_t>a + <uint16_t>b)
    else:
        return a + b


cdef inline Py_ssize_t _at(const pos_t* perm, Py_ssize_t k) noexcept nogil:
    return k if perm == NULL else <Py_ssize_t>perm[k]


cdef inline void _reduce_half(uint16_t* out, const uint16_t* vals, const pos_t* perm, Py_ssize_t a,
                              Py_ssize_t b, Py_ssize_t E) noexcept nogil:
    """float16 rows: summed in float32, rounded once."""
    cdef Py_ssize_t k, e, e0, m
    cdef const uint16_t* row
    cdef float acc
    cdef float buf[256]
    if E == 1:
        acc = st_half_to_float(vals[_at(perm, a)])
        for k in range(a + 1, b):
            acc = acc + st_half_to_float(vals[_at(perm, k)])
        out[0] = st_float_to_half(acc)
        return
    for e0 in range(0, E, 256):
        m = E - e0 if E - e0 < 256 else 256
        row = vals + _at(perm, a) * E + e0
        for e in range(m):
            buf[e] = st_half_to_float(row[e])
        for k in range(a + 1, b):
            row = vals + _at(perm, k) * E + e0
            for e in range(m):
                buf[e] = buf[e] + st_half_to_float(row[e])
        for e in range(m):
            out[e0 + e] = st_float_to_half(buf[e])


cdef inline void _reduce_run(sum_t* out, const sum_t* vals, const pos_t* perm, Py_ssize_t a, Py_ssize_t b,
                             Py_ssize_t E, bint logical_or) noexcept nogil:
    """``out[:E]`` = the sum (or logical or) of rows ``perm[a:b]`` (``a:b`` if ``perm`` is NULL)
    of ``vals`` (rows of ``E`` elements), in that order."""
    cdef Py_ssize_t k, e
    cdef const sum_t* row
    cdef sum_t acc
    if sum_t is uint16_t:
        _reduce_half(out, vals, perm, a, b, E)
    elif E == 1:
        acc = vals[_at(perm, a)]
        if sum_t is uint8_t:
            if logical_or:
                for k in range(a + 1, b):
                    acc = acc | vals[_at(perm, k)]
                out[0] = acc != 0
                return
        for k in range(a + 1, b):
            acc = _add(acc, vals[_at(perm, k)])
        out[0] = acc
    else:
        row = vals + _at(perm, a) * E
        for e in range(E):
            out[e] = row[e]
        for k in range(a + 1, b):
            row = vals + _at(perm, k) * E
            if sum_t is uint8_t:
                if logical_or:
                    for e in range(E):
                        out[e] = out[e] | row[e]
                    continue
            for e in range(E):
                out[e] = _add(out[e], row[e])
        if sum_t is uint8_t:
            if logical_or:
                for e in range(E):
                    out[e] = out[e] != 0
