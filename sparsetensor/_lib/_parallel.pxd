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
    """
    int st_omp_thread_num() nogil
    int st_have_openmp() nogil


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
