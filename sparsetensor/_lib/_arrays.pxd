# O(1) checks of the NumPy arrays a kernel's def wrapper takes, through NumPy's C API: no
# memoryview is acquired, so a wrapper that checks several arrays stays cheap on small inputs
# (the per-call cost of issue #15). A module that cimports this calls cnp.import_array().
cimport numpy as cnp


cdef inline int _index_code(cnp.ndarray a) noexcept:
    """0 for int32, 1 for int64 (native byte order), else -1."""
    cdef int t = cnp.PyArray_TYPE(a)
    if not cnp.PyArray_ISNOTSWAPPED(a) or not (t == cnp.NPY_INT or t == cnp.NPY_LONG or t == cnp.NPY_LONGLONG):
        return -1
    return 0 if cnp.PyArray_ITEMSIZE(a) == 4 else (1 if cnp.PyArray_ITEMSIZE(a) == 8 else -1)


cdef inline int _value_code(cnp.ndarray a) noexcept:
    """The index of a's dtype in _KERNEL_DTYPES (native byte order), else -1."""
    cdef int t = cnp.PyArray_TYPE(a)
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(a)
    if not cnp.PyArray_ISNOTSWAPPED(a):
        return -1
    if t == cnp.NPY_UBYTE or t == cnp.NPY_USHORT or t == cnp.NPY_UINT or t == cnp.NPY_ULONG or t == cnp.NPY_ULONGLONG:
        return 0 if size == 1 else 1 if size == 2 else 2 if size == 4 else 3 if size == 8 else -1
    if t == cnp.NPY_FLOAT:
        return 4
    if t == cnp.NPY_DOUBLE:
        return 5
    if t == cnp.NPY_CFLOAT:
        return 6
    if t == cnp.NPY_CDOUBLE:
        return 7
    return -1


cdef inline cnp.ndarray _array(a, str name, int ndim):
    """a, after checking that it is a C-contiguous ndarray of ndim dims."""
    if not isinstance(a, cnp.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    cdef cnp.ndarray x = <cnp.ndarray>a
    if cnp.PyArray_NDIM(x) != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {a.shape}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(x):
        raise ValueError(f"{name} must be C-contiguous, got strides {a.strides} for shape {a.shape}")
    return x


cdef inline Py_ssize_t _dim(cnp.ndarray a, int i) noexcept:
    return <Py_ssize_t>cnp.PyArray_DIMS(a)[i]
