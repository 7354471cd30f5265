# The memory pool of large arrays (_pool.pyx): kernels cimport `empty` for their outputs.
cpdef object empty(object shape, object dtype)
