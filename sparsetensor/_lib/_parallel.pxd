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
