# The memory pool of large arrays (_pool.pyx): kernels cimport `empty` for their outputs and
# pool_alloc / pool_free (through _scratch.pxd) for their scratch memory.
cpdef object empty(object shape, object dtype)
cdef void* pool_alloc(size_t nbytes) noexcept nogil
cdef void pool_free(void* p) noexcept nogil
