# Fused types shared by every kernel module.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

# Index arrays are int32 or int64, never intp.
ctypedef fused index_t:
    int32_t
    int64_t

# A second, independent index type for kernels that read two index arrays of
# possibly different dtypes.
ctypedef fused index2_t:
    int32_t
    int64_t

# Real (ordered) value types with a C equivalent: what max/min accept.
ctypedef fused real_t:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    float
    double

# Arithmetic value types with a C equivalent: the real ones and complex. bool is
# handled as uint8 and float16 is widened to float32 by the Python wrappers.
ctypedef fused value_t:
    real_t
    float complex
    double complex

# Raw element types for kernels that only move values (1, 2, 4, 8 bytes; a
# 16-byte complex128 is moved as two uint64).
ctypedef fused raw_t:
    uint8_t
    uint16_t
    uint32_t
    uint64_t

# Arithmetic element types whose integers are unsigned (a signed int is viewed as the
# unsigned int of its width: wrapping sums and products are the same), and floats and
# complex: the kernels add and multiply in the values' own dtype.
ctypedef fused num_t:
    raw_t
    float
    double
    float complex
    double complex
