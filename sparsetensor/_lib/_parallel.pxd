# OpenMP helpers usable from every kernel module, also when the build has no OpenMP.
cdef extern from *:
    """
    #ifdef SPARSETENSOR_OPENMP
    #include <omp.h>
    static inline int st_omp_thread_num(void) { return omp_get_thread_num(); }
    static inline int st_have_openmp(void) { return 1; }
    #else
    static inline int st_omp_thread_num(void) { return 0; }
    static inline int st_have_openmp(void) { return 0; }
    #endif
    #include <stdint.h>
    /* A range of n blocks that its owner takes from the front and other threads from the
     * back (st_take(w, 0) / st_take(w, 1): a block index, or -1 once the two ends meet). The
     * word holds back << 32 | front; each take is one compare-and-swap. */
    static inline uint64_t st_blocks(uint32_t n) { return (uint64_t)n << 32; }
    static inline int64_t st_take(uint64_t *w, int from_back) {
        uint64_t old = __atomic_load_n(w, __ATOMIC_RELAXED), nw;
        uint32_t f, b;
        do {
            f = (uint32_t)old; b = (uint32_t)(old >> 32);
            if (f >= b) return -1;
            nw = from_back ? ((uint64_t)(b - 1) << 32) | (uint64_t)f : ((uint64_t)b << 32) | (uint64_t)(f + 1);
        } while (!__atomic_compare_exchange_n(w, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        return from_back ? (int64_t)b - 1 : (int64_t)f;
    }
    """
    int st_omp_thread_num() nogil
    int st_have_openmp() nogil
    unsigned long long st_blocks(unsigned int n) nogil
    long long st_take(unsigned long long* w, int from_back) nogil


# Thread counts. The gate is sparsetensor._config.num_threads (GRAIN = 2**16 units of work
# there, i.e. 2 x ENTRIES_PER_THREAD): below it a kernel is handed nthreads = 1, and a kernel
# uses the count it is handed. A kernel that splits its own work further (a count known only
# inside it, or ranges of entries) gives each thread at least ENTRIES_PER_THREAD entries:
# this is the one constant for that, read from here.
cdef enum:
    ENTRIES_PER_THREAD = 32768


cdef inline int split_threads(int nthreads, Py_ssize_t entries) noexcept nogil:
    """Threads for `entries` split into contiguous ranges inside a kernel: at most nthreads,
    and one more for every ENTRIES_PER_THREAD entries."""
    cdef Py_ssize_t t = entries // ENTRIES_PER_THREAD + 1
    if nthreads <= 1:
        return 1
    return nthreads if nthreads < t else <int>t
