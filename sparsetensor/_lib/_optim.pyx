"""Sparse optimizer kernels (Cython, OpenMP): SGD, SparseAdam and Adagrad on the rows a
gradient touches.

A gradient is a COO tensor whose index columns are linearised to *row keys* over its
sparse dims; the parameter and its state are viewed as ``(rows, E)``, ``E`` the elements
of one row (the product of the dense dims). The wrappers in ``sparsetensor.optim._kernels``
sort (key, position) pairs with the COO coalescing bucket sort (``_coalesce.pyx``, which
checks the bounds), :func:`bucket_runs` turns the sorted buckets into runs (one per
distinct row: the row and where its positions start), and the update kernels go over the
runs in parallel: each run sums its gradient rows (in input order) into a thread-local
row and updates the parameter and state rows in place. Distinct runs are distinct rows,
so threads never write the same memory. No ``nnz x E`` temporary is made: the coalesced
gradient lives one row at a time in each thread's scratch row.

Inputs are trusted to have the shapes and dtypes documented in ``_optim.pyi``: the
wrappers check them. Run rows are bounds-checked by the sort before they get here.
"""

from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

import numpy as np

from ._parallel cimport st_omp_thread_num
from ._prefetch cimport st_prefetch
from ._runs cimport pos_t

cdef extern from *:
    """
    /* The row updates, in C so that they vectorise. GCC keeps a loop with sqrt scalar while
     * sqrt may set errno (the build does not pass -fno-math-errno), so the square roots are
     * taken in a separate pass with SSE/AVX instructions over a block of at most ST_BLOCK
     * elements (in L1), and the other passes vectorise by themselves. IEEE sqrt and division
     * are correctly rounded in every form: results are those of the scalar loop, bit for bit. */
    #if defined(__AVX__) || defined(__SSE2__) || defined(_M_X64)
    #include <immintrin.h>
    #endif
    #define ST_BLOCK 256
    static inline void st_sqrt_f32(const float* restrict x, float* restrict y, Py_ssize_t n) {
        Py_ssize_t i = 0;
    #if defined(__AVX__)
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
    #elif defined(__SSE2__) || defined(_M_X64)
        for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
    #endif
        for (; i < n; i++) y[i] = sqrtf(x[i]);
    }
    static inline void st_sqrt_f64(const double* restrict x, double* restrict y, Py_ssize_t n) {
        Py_ssize_t i = 0;
    #if defined(__AVX__)
        for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
    #elif defined(__SSE2__) || defined(_M_X64)
        for (; i + 2 <= n; i += 2) _mm_storeu_pd(y + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
    #endif
        for (; i < n; i++) y[i] = sqrt(x[i]);
    }
    /* adagrad: s += g * g; p += nclr * (g / (sqrt(s) + eps))
     * adam: m += (g - m) * c1; v += (g * g - v) * c2; p += nstep * (m / (sqrt(v) + eps)) */
    #define ST_DEFINE_ROW_UPDATES(T, SUFFIX)                                                         \
    static void st_adagrad_row_##SUFFIX(T* restrict p, T* restrict s, const T* restrict g,        \
                                       Py_ssize_t E, T nclr, T eps) {                              \
        T r[ST_BLOCK];                                                                             \
        for (Py_ssize_t b = 0; b < E; b += ST_BLOCK) {                                             \
            Py_ssize_t n = E - b < ST_BLOCK ? E - b : ST_BLOCK, e;                                 \
            for (e = 0; e < n; e++) s[b + e] = s[b + e] + g[b + e] * g[b + e];                     \
            st_sqrt_##SUFFIX(s + b, r, n);                                                         \
            for (e = 0; e < n; e++) p[b + e] = p[b + e] + nclr * (g[b + e] / (r[e] + eps));        \
        }                                                                                          \
    }                                                                                              \
    static void st_adam_row_##SUFFIX(T* restrict p, T* restrict m, T* restrict v,                 \
                                    const T* restrict g, Py_ssize_t E, T c1, T c2, T eps, T nstep) { \
        T r[ST_BLOCK];                                                                             \
        for (Py_ssize_t b = 0; b < E; b += ST_BLOCK) {                                             \
            Py_ssize_t n = E - b < ST_BLOCK ? E - b : ST_BLOCK, e;                                 \
            for (e = 0; e < n; e++) {                                                              \
                T gv = g[b + e], mo = m[b + e], vo = v[b + e];                                     \
                m[b + e] = mo + (gv - mo) * c1;                                                    \
                v[b + e] = vo + (gv * gv - vo) * c2;                                               \
            }                                                                                      \
            st_sqrt_##SUFFIX(v + b, r, n);                                                         \
            for (e = 0; e < n; e++) p[b + e] = p[b + e] + nstep * (m[b + e] / (r[e] + eps));       \
        }                                                                                          \
    }
    ST_DEFINE_ROW_UPDATES(float, f32)
    ST_DEFINE_ROW_UPDATES(double, f64)
    """
    void st_adagrad_row_f32(float* p, float* s, const float* g, Py_ssize_t E, float nclr, float eps) nogil
    void st_adagrad_row_f64(double* p, double* s, const double* g, Py_ssize_t E, double nclr, double eps) nogil
    void st_adam_row_f32(float* p, float* m, float* v, const float* g, Py_ssize_t E, float c1, float c2, float eps,
                         float nstep) nogil
    void st_adam_row_f64(double* p, double* m, double* v, const double* g, Py_ssize_t E, double c1, double c2,
                         double eps, double nstep) nogil

ctypedef fused float_t:
    float
    double

cdef enum:
    OP_SGD = 0
    OP_ADAGRAD = 1
    OP_ADAM = 2

OPS = {"sgd": OP_SGD, "adagrad": OP_ADAGRAD, "adam": OP_ADAM}

# Runs per dynamically scheduled chunk of the update loops: a heavy run (a row repeated
# thousands of times, as Zipf-distributed ids give) holds up one chunk, not a thread's share.
cdef Py_ssize_t RUN_CHUNK = 16
# How many runs ahead the update prefetches the parameter (and state) rows, and how many
# sorted positions ahead a run's sum prefetches the gradient rows.
cdef Py_ssize_t PREFETCH_RUNS = 4
cdef Py_ssize_t PREFETCH_ROWS = 8



# -- the checks of the defs below: shapes against each other, and the O(runs + nnz) index
# arrays that address other arrays (rows into param, perm into grad, runs into run_ptr)
cdef _require(bint ok, str kernel, str what):
    if not ok:
        raise ValueError(f"{kernel}: {what}")


cdef bint _within(const int64_t[::1] a, int64_t lo, int64_t hi) noexcept:
    """Every a[i] in [lo, hi)."""
    cdef Py_ssize_t i
    cdef bint ok = True
    with nogil:
        for i in range(a.shape[0]):
            ok = ok & (a[i] >= lo) & (a[i] < hi)
    return ok


cdef bint _monotone(const int64_t[::1] a, int64_t lo, int64_t hi) noexcept:
    """a non-empty and non-decreasing within [lo, hi]."""
    cdef Py_ssize_t i, n = a.shape[0]
    cdef bint ok = n >= 1 and a[0] >= lo and a[n - 1] <= hi
    with nogil:
        for i in range(1, n if ok else 0):
            ok = ok & (a[i] >= a[i - 1])
    return ok


cdef bint _runs_ok(const int64_t[::1] run_ptr, const pos_t[::1] perm, Py_ssize_t ngrad) noexcept:
    """run_ptr non-decreasing within [0, len(perm)], perm entries in [0, ngrad)."""
    cdef Py_ssize_t i
    cdef bint ok = _monotone(run_ptr, 0, perm.shape[0])
    with nogil:
        for i in range(perm.shape[0] if ok else 0):
            ok = ok & (perm[i] >= 0) & (perm[i] < ngrad)
    return ok


cdef _check_update(str kernel, const int64_t[::1] rows, const int64_t[::1] run_ptr, Py_ssize_t nruns,
                   const pos_t[::1] perm, Py_ssize_t ngrad, Py_ssize_t gcols, Py_ssize_t prows, Py_ssize_t E,
                   Py_ssize_t srows, Py_ssize_t scols, int nthreads):
    _require(gcols == E and scols == E and srows >= max(nthreads, 1) and run_ptr.shape[0] == nruns + 1,
             kernel, f"grad (., {gcols}), param (., {E}), scratch ({srows}, {scols}) for {nthreads} threads and "
             f"run_ptr ({run_ptr.shape[0]},) for {nruns} runs do not match")
    _require(_within(rows, 0, prows), kernel, f"rows must be in [0, {prows})")
    _require(_runs_ok(run_ptr, perm, ngrad), kernel,
             f"run_ptr must be non-decreasing within [0, {perm.shape[0]}] and perm within [0, {ngrad})")


def bucket_runs(const uint32_t[::1] low_keys, const int64_t[::1] bucket_starts, const int64_t[::1] offsets,
                int shift, int64_t base, int64_t[::1] rows, int64_t[::1] run_ptr, int nthreads):
    """The runs of equal keys of :func:`sparsetensor._lib._coalesce.coo_bucket_sort`'s output.

    Run ``j`` (``offsets[b] <= j < offsets[b + 1]`` in bucket ``b``) gets its key in
    ``rows[j]`` and its first sorted position in ``run_ptr[j]``; ``run_ptr[-1] = nnz``.
    """
    cdef Py_ssize_t nb = bucket_starts.shape[0] - 1, b, i, hi
    cdef int64_t j
    cdef uint32_t low_mask = <uint32_t>(((<uint64_t>1) << shift) - 1)
    _require(nb >= 0 and 0 <= shift <= 32 and offsets.shape[0] == nb + 1 and run_ptr.shape[0] == rows.shape[0] + 1,
             "bucket_runs", f"bucket_starts ({nb + 1},), offsets ({offsets.shape[0]},), rows ({rows.shape[0]},), "
             f"run_ptr ({run_ptr.shape[0]},) and shift {shift} do not match")
    _require(bucket_starts[0] == 0 and bucket_starts[nb] == low_keys.shape[0] and offsets[0] == 0
             and offsets[nb] == rows.shape[0] and _monotone(bucket_starts, 0, low_keys.shape[0])
             and _monotone(offsets, 0, rows.shape[0]), "bucket_runs",
             "bucket_starts must run from 0 to len(low_keys) and offsets from 0 to len(rows), non-decreasing")
    run_ptr[run_ptr.shape[0] - 1] = bucket_starts[nb]
    with nogil:
        for b in prange(nb, schedule="dynamic", num_threads=nthreads):
            i = bucket_starts[b]
            hi = bucket_starts[b + 1]
            j = offsets[b]
            while i < hi:
                if i == bucket_starts[b] or low_keys[i] != low_keys[i - 1]:
                    rows[j] = base | ((<int64_t>b) << shift) | (low_keys[i] & low_mask)
                    run_ptr[j] = i
                    j = j + 1
                i = i + 1


cdef inline void _update_row(int op, float_t* p, float_t* s1, float_t* s2, const float_t* g, Py_ssize_t E,
                             float_t c0, float_t c1, float_t c2, float_t c3) noexcept nogil:
    """One row's update from its summed (and, for maximize, negated) gradient ``g``, as
    torch.optim computes it for a sparse gradient (see ``sparsetensor.optim``):

    - sgd (``c0 = -lr``): ``p += c0 * g``;
    - adagrad (``c0 = -clr``, ``c1 = eps``): ``s += g * g``, ``p += c0 * (g / (sqrt(s) + eps))``;
    - adam (``c0 = 1 - beta1``, ``c1 = 1 - beta2``, ``c2 = eps``, ``c3 = -step_size``):
      ``m += (g - m) * c0``, ``v += (g * g - v) * c1``, ``p += c3 * (m / (sqrt(v) + eps))``.
    """
    cdef Py_ssize_t e
    if op == OP_SGD:
        for e in range(E):
            p[e] = p[e] + c0 * g[e]
    elif op == OP_ADAGRAD:
        if float_t is float:
            st_adagrad_row_f32(p, s1, g, E, c0, c1)
        else:
            st_adagrad_row_f64(p, s1, g, E, c0, c1)
    elif float_t is float:
        st_adam_row_f32(p, s1, s2, g, E, c0, c1, c2, c3)
    else:
        st_adam_row_f64(p, s1, s2, g, E, c0, c1, c2, c3)


cdef inline void _prefetch_row(const void* row, Py_ssize_t nbytes) noexcept nogil:
    """Ask for every cache line of a row that is about to be read."""
    cdef Py_ssize_t off
    for off in range(0, nbytes, 64):
        st_prefetch(<const char*>row + off)


cdef inline void _sum_run(float_t* acc, const float_t* grad, const pos_t* perm, Py_ssize_t a, Py_ssize_t b,
                          Py_ssize_t E, bint negate, Py_ssize_t nnz) noexcept nogil:
    """``acc[:E]`` = the sum of gradient rows ``perm[a:b]`` in that order (negated when asked).
    The rows are scattered over the gradient: each is asked for PREFETCH_ROWS positions ahead."""
    cdef Py_ssize_t k, e, nbytes = E * <Py_ssize_t>sizeof(float_t)
    cdef const float_t* row
    for k in range(a, b):
        if k + PREFETCH_ROWS < nnz:
            _prefetch_row(grad + <Py_ssize_t>perm[k + PREFETCH_ROWS] * E, nbytes)
        row = grad + <Py_ssize_t>perm[k] * E
        if k == a:
            for e in range(E):
                acc[e] = row[e]
        else:
            for e in range(E):
                acc[e] = acc[e] + row[e]
    if negate:
        for e in range(E):
            acc[e] = -acc[e]


def update_runs(int op, const int64_t[::1] rows, const int64_t[::1] run_ptr, const pos_t[::1] perm,
                const float_t[:, ::1] grad, float_t[:, ::1] param, float_t[:, ::1] state1, float_t[:, ::1] state2,
                float_t[:, ::1] scratch, double c0, double c1, double c2, double c3, bint negate, int nthreads):
    """Apply optimizer ``op`` to every run: run ``j`` sums gradient rows ``perm[run_ptr[j]:run_ptr[j + 1]]``
    and updates row ``rows[j]`` of ``param`` (and of ``state1``/``state2`` where the op has them).

    ``scratch`` is ``(nthreads, E)``: each thread's summed row. Coefficients per op: see
    :func:`_update_row`; they are rounded to the parameter's dtype first, as torch does.
    """
    cdef Py_ssize_t nruns = rows.shape[0], E = param.shape[1], j, nchunks, c, r, nnz = perm.shape[0]
    cdef Py_ssize_t nbytes = E * <Py_ssize_t>sizeof(float_t)
    cdef float_t* acc
    cdef float_t* s1
    cdef float_t* s2
    cdef float_t* pbase = &param[0, 0] if E > 0 and param.shape[0] > 0 else NULL
    cdef float_t* s1base = &state1[0, 0] if op != OP_SGD and E > 0 and param.shape[0] > 0 else NULL
    cdef float_t* s2base = &state2[0, 0] if op == OP_ADAM and E > 0 and param.shape[0] > 0 else NULL
    cdef const float_t* gbase = &grad[0, 0] if E > 0 and grad.shape[0] > 0 else NULL
    cdef const pos_t* pp = &perm[0] if perm.shape[0] > 0 else NULL
    cdef float_t k0 = <float_t>c0, k1 = <float_t>c1, k2 = <float_t>c2, k3 = <float_t>c3
    _check_update("update_runs", rows, run_ptr, nruns, perm, grad.shape[0], grad.shape[1], param.shape[0], E,
                  scratch.shape[0], scratch.shape[1], nthreads)
    _require((op == OP_SGD or (state1.shape[0] == param.shape[0] and state1.shape[1] == E))
             and (op != OP_ADAM or (state2.shape[0] == param.shape[0] and state2.shape[1] == E)),
             "update_runs", "the optimizer's state arrays must have the shape of param")
    if nruns == 0 or E == 0:
        return
    nchunks = (nruns + RUN_CHUNK - 1) // RUN_CHUNK
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            acc = &scratch[st_omp_thread_num(), 0]
            for j in range(c * RUN_CHUNK, min((c + 1) * RUN_CHUNK, nruns)):
                if j + PREFETCH_RUNS < nruns:  # the rows are scattered: ask for them ahead
                    r = rows[j + PREFETCH_RUNS] * E
                    _prefetch_row(pbase + r, nbytes)
                    if s1base != NULL:
                        _prefetch_row(s1base + r, nbytes)
                    if s2base != NULL:
                        _prefetch_row(s2base + r, nbytes)
                r = rows[j]
                _sum_run(acc, gbase, pp, run_ptr[j], run_ptr[j + 1], E, negate, nnz)
                s1 = s1base + r * E if s1base != NULL else NULL
                s2 = s2base + r * E if s2base != NULL else NULL
                _update_row(op, pbase + r * E, s1, s2, acc, E, k0, k1, k2, k3)


def sgd_momentum(const int64_t[::1] rows, const int64_t[::1] grad_run, const int64_t[::1] buf_src,
                 const int64_t[::1] run_ptr, const pos_t[::1] perm, const float_t[:, ::1] grad,
                 const float_t[:, ::1] buf_in, float_t[:, ::1] buf_out, float_t[:, ::1] param,
                 float_t[:, ::1] scratch, double lr, double momentum, double dampening, bint nesterov,
                 bint first, bint negate, int nthreads):
    """SGD with momentum over the union of the momentum buffer's rows and the gradient's.

    Output row ``j`` is parameter row ``rows[j]``; its gradient is run ``grad_run[j]`` (-1: the
    gradient has no such row, it counts as 0) and its old buffer row ``buf_in[buf_src[j]]`` (-1:
    none). ``buf_out[j]`` = ``momentum * old + (1 - dampening) * g`` (``g`` when ``first``: the
    buffer starts as a copy of the gradient), and the parameter row moves by ``-lr`` times the
    buffer row, or, with ``nesterov``, times ``g + momentum * buffer``. ``buf_out`` may be
    ``buf_in`` when ``buf_src[j] == j`` for every old row.
    """
    cdef Py_ssize_t n = rows.shape[0], E = param.shape[1], j, e, nchunks, c, gj, bj, nnz = perm.shape[0]
    cdef float_t* acc
    cdef float_t* p
    cdef float_t* bo
    cdef const float_t* bi
    cdef float_t b
    cdef float_t k_lr = <float_t>(-lr), k_m = <float_t>momentum, k_d = <float_t>(1.0 - dampening)
    cdef const pos_t* pp = &perm[0] if perm.shape[0] > 0 else NULL
    _check_update("sgd_momentum", rows, run_ptr, run_ptr.shape[0] - 1, perm, grad.shape[0], grad.shape[1],
                  param.shape[0], E, scratch.shape[0], scratch.shape[1], nthreads)
    _require(grad_run.shape[0] == n and buf_src.shape[0] == n and buf_out.shape[0] == n and buf_out.shape[1] == E
             and buf_in.shape[1] == E and _within(grad_run, -1, run_ptr.shape[0] - 1)
             and _within(buf_src, -1, buf_in.shape[0]), "sgd_momentum",
             f"grad_run and buf_src ({n},) must index runs and buf_in rows (or be -1), buf_out must be ({n}, {E})")
    if n == 0 or E == 0:
        return
    nchunks = (n + RUN_CHUNK - 1) // RUN_CHUNK
    with nogil:
        for c in prange(nchunks, schedule="dynamic", num_threads=nthreads):
            acc = &scratch[st_omp_thread_num(), 0]
            for j in range(c * RUN_CHUNK, min((c + 1) * RUN_CHUNK, n)):
                gj = grad_run[j]
                bj = buf_src[j]
                if gj >= 0:
                    _sum_run(acc, &grad[0, 0], pp, run_ptr[gj], run_ptr[gj + 1], E, negate, nnz)
                else:
                    for e in range(E):
                        acc[e] = 0
                p = &param[rows[j], 0]
                bo = &buf_out[j, 0]
                bi = &buf_in[bj, 0] if bj >= 0 else NULL
                for e in range(E):
                    if first:
                        b = acc[e]
                    elif bi != NULL and gj >= 0:
                        b = k_m * bi[e] + k_d * acc[e]
                    elif bi != NULL:
                        b = k_m * bi[e]
                    else:
                        b = k_d * acc[e]
                    bo[e] = b
                    if nesterov:
                        p[e] = p[e] + k_lr * (acc[e] + k_m * b)
                    else:
                        p[e] = p[e] + k_lr * b
