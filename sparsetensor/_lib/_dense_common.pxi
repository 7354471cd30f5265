# Shared by the dense <-> sparse kernel modules: _dense.pyx (to dense) and _fromdense.pyx
# (from dense) ``include`` this file. It holds their thread choice, block geometry and
# the O(1) Python-level checks and views of their wrappers; each including module does
# ``import numpy as np``.

_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# Geometry of a batched blocked array (B, NR, NC, D) seen as a grid of
# (nrb, ncb) blocks of (Rb, Cb, D) elements, with its compressed orientation.
cdef struct _Geom:
    Py_ssize_t B, NR, NC, D, Rb, Cb
    Py_ssize_t nrb, ncb       # block rows, block columns
    Py_ssize_t nc, nplain     # compressed and plain block counts
    Py_ssize_t W              # Cb * D: elements in one row of a block
    Py_ssize_t rowstride      # NC * D: elements in one row of the array
    bint rows                 # compressed dim is rows (csr/bsr)


cdef _Geom _geom(Py_ssize_t B, Py_ssize_t NR, Py_ssize_t NC, Py_ssize_t D,
                 Py_ssize_t Rb, Py_ssize_t Cb, bint rows) noexcept nogil:
    cdef _Geom g
    g.B = B; g.NR = NR; g.NC = NC; g.D = D; g.Rb = Rb; g.Cb = Cb
    g.nrb = NR // Rb; g.ncb = NC // Cb
    g.nc = g.nrb if rows else g.ncb
    g.nplain = g.ncb if rows else g.nrb
    g.W = Cb * D
    g.rowstride = NC * D
    g.rows = rows
    return g


cdef int _threads(int nthreads, Py_ssize_t ntasks) noexcept nogil:
    """Threads to use: the count handed in (small inputs get 1 from the gate,
    sparsetensor._config.num_threads), at most one per task."""
    if nthreads <= 1 or ntasks < 2:
        return 1
    if nthreads > ntasks:
        return <int>ntasks
    return nthreads


# --------------------------------------------------------------------------
# dtype normalisation (Python level, O(1))

def _require_c_contiguous(a, name):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous, got strides {a.strides} "
                         f"for shape {a.shape}")


def _raw_view(a, name):
    """``a`` reinterpreted as unsigned ints of the widest size dividing its itemsize."""
    _require_c_contiguous(a, name)
    if a.dtype.hasobject or a.dtype.kind not in "biufc":
        raise TypeError(f"{name}: expected a numeric or bool dtype, got {a.dtype}")
    if a.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension")
    size = a.dtype.itemsize
    for width in (8, 4, 2, 1):
        if size % width == 0:
            return a.view(_UINT_OF_SIZE[width])


def _flat(a):
    """A 1-D view of C-contiguous ``a``; one element of scratch when ``a`` is empty,
    so that the kernels can take ``&view[0]`` (they never read it)."""
    return a.reshape(-1) if a.size else np.zeros(1, a.dtype)


def _check_shape(shape):
    """``shape`` as a C-contiguous (S,) int64 array of non-negative sizes, and its product."""
    shape = np.asarray(shape)
    if shape.ndim != 1 or (shape.size and shape.dtype.kind not in "iu"):
        raise ValueError(f"shape must be a 1-D integer array, got {shape.dtype} {shape.shape}")
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    sizes = [int(n) for n in shape]
    if any(n < 0 for n in sizes):
        raise ValueError(f"shape must be non-negative, got {tuple(sizes)}")
    numel = 1
    for n in sizes:
        numel *= n
    return shape, numel
