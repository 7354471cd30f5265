// Incomplete factorizations (ILU(0), IC(0)) and sparse triangular solves of one square CSR
// matrix with sorted, unique columns, by level scheduling (sparsetensor/_backend/cuda/_factor.py
// drives the passes; the CPU's sequential kernels are sparsetensor/_lib/_ilu.pyx):
//   tri_counts (each row's entries in a triangle, and where its diagonal sits)
//   -> level_order (one block: Kahn's topological sort of the rows over the triangle's
//      dependencies, read from the transpose; rows come out grouped by level)
//   -> trsv_levels / factor_levels over the levels in order: the rows of one
//      level depend only on rows of earlier levels, so they run in parallel, one thread a row.
// A launch covers either one level with many blocks, or a run of small levels with one block
// and a barrier between levels (a launch costs more than a barrier).
//
// Every index is checked before it addresses memory (the arrays may have changed since they
// were validated): a bad one gives the CHANGED status, never an access out of bounds. A
// status is reported as key = step * 8 + status, atomicMin over the rows, step being the
// row's place in the sequential order (i, or n - 1 - i for an upper solve): the key the
// CPU's sequential kernel would stop at first, since a failure only spoils later rows.
#include "common.cuh"
#include "complex.cuh"

namespace st {

// the statuses of sparsetensor/_lib/_ilu.pyx
#define F_ZERO_PIVOT 1
#define F_MISSING 2
#define F_NOT_POSITIVE 3
#define F_CHANGED 4
#define F_NOT_LOWER 5

__device__ __forceinline__ void report(u64* status, i64 step, int what) {
    atomicMin(status, (u64)step * 8ull + (u64)what);
}

__device__ __forceinline__ bool bad_segment(i64 lo, i64 hi, i64 nnz) { return lo < 0 || hi < lo || hi > nnz; }

// -- field arithmetic (float, double, cfloat, cdouble): the values' own type -----------------
__device__ __forceinline__ float fconj(float x) { return x; }
__device__ __forceinline__ double fconj(double x) { return x; }
__device__ __forceinline__ cfloat fconj(cfloat x) { return {x.re, -x.im}; }
__device__ __forceinline__ cdouble fconj(cdouble x) { return {x.re, -x.im}; }

__device__ __forceinline__ float fdiv(float a, float b) { return a / b; }
__device__ __forceinline__ double fdiv(double a, double b) { return a / b; }
__device__ __forceinline__ cfloat fdiv(cfloat a, cfloat b) {
    const cdouble q = c_div({a.re, a.im}, {b.re, b.im});
    return {(float)q.re, (float)q.im};
}
__device__ __forceinline__ cdouble fdiv(cdouble a, cdouble b) { return c_div(a, b); }

__device__ __forceinline__ bool fzero(float x) { return x == 0.0f; }
__device__ __forceinline__ bool fzero(double x) { return x == 0.0; }
__device__ __forceinline__ bool fzero(cfloat x) { return x.re == 0.0f && x.im == 0.0f; }
__device__ __forceinline__ bool fzero(cdouble x) { return x.re == 0.0 && x.im == 0.0; }

__device__ __forceinline__ double freal(float x) { return x; }
__device__ __forceinline__ double freal(double x) { return x; }
__device__ __forceinline__ double freal(cfloat x) { return x.re; }
__device__ __forceinline__ double freal(cdouble x) { return x.re; }

// a real root stored in the field type (float: the double root rounded once, as the CPU's)
template <typename V> __device__ __forceinline__ V from_real(double r) { return acc_scalar<V>(r, 0.0); }

// counts[i] = the entries of row i in the lower (lower = 1) or upper triangle, the diagonal
// counted when with_diag; diag[i] = the position of row i's diagonal entry, or -1.
// st:kernel index
template <typename I>
__global__ void tri_counts(const I* __restrict__ crow, const I* __restrict__ cols, i64 n, i64 nnz, int lower,
                           int with_diag, i64* __restrict__ counts, i64* __restrict__ diag, u64* __restrict__ status) {
    ST_GRID_LOOP(i, n) {
        const i64 lo = (i64)crow[i], hi = (i64)crow[i + 1];
        i64 c = 0, d = -1;
        if (bad_segment(lo, hi, nnz)) {
            report(status, i, F_CHANGED);
        } else {
            for (i64 p = lo; p < hi; ++p) {
                const i64 j = (i64)cols[p];
                if (j == i) d = p;
                else if (lower ? j < i : j > i) ++c;
            }
        }
        counts[i] = c + (with_diag && d >= 0 ? 1 : 0);
        diag[i] = d;
    }
}

// The triangle's entries of every row (the diagonal included; as 1 when unit) at offs[i]:
// a CSR matrix of the triangle. Rows were checked by tri_counts with the same arrays; a row
// that has changed since writes at most its count (never past the next row's start).
// st:kernel field index
template <typename V, typename I>
__global__ void tri_fill(const I* __restrict__ crow, const I* __restrict__ cols, const V* __restrict__ a, i64 n,
                         i64 nnz, int lower, int unit, const i64* __restrict__ offs, I* __restrict__ out_cols,
                         V* __restrict__ out_vals) {
    ST_GRID_LOOP(i, n) {
        const i64 lo = (i64)crow[i], hi = (i64)crow[i + 1];
        i64 o = offs[i];
        const i64 end = offs[i + 1];
        if (bad_segment(lo, hi, nnz)) continue;
        for (i64 p = lo; p < hi && o < end; ++p) {
            const i64 j = (i64)cols[p];
            if (lower ? j > i : j < i) continue;
            out_cols[o] = (I)j;
            out_vals[o] = (unit && j == i) ? from_real<V>(1.0) : a[p];
            ++o;
        }
    }
}

// Kahn's sort of the rows by level, in one block. Row i depends on the rows j of its entries in
// the strict triangle (j < i when lower); tc/tr, the transpose's compressed and plain indices,
// list the rows depending on each row. indeg (u64, n) holds each row's dependency count on entry
// and is used up. order (n) receives the rows level by level, level_ptr (n + 1) where each level
// starts, row_level (n) each row's level; info = (levels, rows ordered): fewer than n rows
// ordered means the arrays changed.
// st:kernel index
template <typename I>
__global__ void level_order(const I* __restrict__ tc, const I* __restrict__ tr, i64 n, i64 nnz, int lower,
                            u64* __restrict__ indeg, i64* __restrict__ order, i64* __restrict__ level_ptr,
                            i64* __restrict__ row_level, i64* __restrict__ info) {
    __shared__ u64 tail;
    if (threadIdx.x == 0) tail = 0;
    __syncthreads();
    for (i64 i = threadIdx.x; i < n; i += blockDim.x)
        if (indeg[i] == 0) {
            order[atomicAdd(&tail, 1ull)] = i;
            row_level[i] = 0;
        }
    __syncthreads();
    i64 start = 0, end = (i64)tail, levels = 0;
    if (threadIdx.x == 0) level_ptr[0] = 0;
    __syncthreads();  // every thread has read tail before the first level appends to it
    while (start < end) {
        for (i64 q = start + threadIdx.x; q < end; q += blockDim.x) {
            const i64 j = order[q];
            const i64 lo = (i64)tc[j], hi = (i64)tc[j + 1];
            if (bad_segment(lo, hi, nnz)) continue;  // its dependants stay unordered: reported below
            for (i64 p = lo; p < hi; ++p) {
                const i64 i = (i64)tr[p];
                if (i < 0 || i >= n || (lower ? i <= j : i >= j)) continue;
                if (atomicAdd(&indeg[i], ~0ull) == 1ull) {
                    order[atomicAdd(&tail, 1ull)] = i;
                    row_level[i] = levels + 1;
                }
            }
        }
        __syncthreads();
        ++levels;
        start = end;
        end = (i64)tail;
        if (threadIdx.x == 0) level_ptr[levels] = start;  // where the level just done ends
        __syncthreads();  // every thread has read tail before the next level appends to it
    }
    if (threadIdx.x == 0) {
        info[0] = levels;
        info[1] = end;
    }
}

// The rows of levels [lb, le) in order: many blocks for one level (le == lb + 1), one block
// with a barrier between levels otherwise. The body (the variadic part) does row i, column c of
// level lvl. A row it reads must lie in an earlier level (row_level[j] < lvl): the plan is kept
// with the indices, and columns changed since would make a row read one that runs beside it.
#define ST_LEVELS(lb, le, order, level_ptr, k, i, c, ...)                      \
    for (i64 lvl = (lb); lvl < (le); ++lvl) {                                   \
        const i64 s0 = (level_ptr)[lvl], cnt = (level_ptr)[lvl + 1] - s0;       \
        ST_GRID_LOOP(u, cnt * (k)) {                                            \
            const i64 i = (order)[s0 + u / (k)], c = u % (k);                   \
            __VA_ARGS__                                                         \
        }                                                                       \
        if ((le) - (lb) > 1) __syncthreads();                                   \
    }

// Solve T X = B in place over x (n, k) with the lower (upper) triangle of the matrix, the
// diagonal read unless unit: the CPU's sums, in the same order (the row's part from its start
// up, or from its end down, to the diagonal).
// st:kernel field index
template <typename V, typename I>
__global__ void trsv_levels(const I* __restrict__ crow, const I* __restrict__ cols, const V* __restrict__ a,
                            V* __restrict__ x, i64 n, i64 nnz, i64 k, const i64* __restrict__ order,
                            const i64* __restrict__ level_ptr, const i64* __restrict__ row_level, i64 lb, i64 le,
                            int lower, int unit, u64* __restrict__ status) {
    ST_LEVELS(lb, le, order, level_ptr, k, i, c, {
        const i64 step = lower ? i : n - 1 - i;
        const i64 lo = (i64)crow[i], hi = (i64)crow[i + 1];
        if (bad_segment(lo, hi, nnz)) { report(status, step, F_CHANGED); continue; }
        V s = x[i * k + c];
        i64 d = -1;
        bool bad = false;
        const i64 sgn = lower ? 1 : -1;
        i64 p = lower ? lo : hi - 1;
        for (i64 m = 0; m < hi - lo; ++m, p += sgn) {
            const i64 j = (i64)cols[p];
            if (sgn * j >= sgn * i) {
                d = j == i ? p : -1;
                break;
            }
            if (j < 0 || j >= n || row_level[j] >= lvl) { bad = true; break; }
            s = s - a[p] * x[j * k + c];
        }
        if (bad) { report(status, step, F_CHANGED); continue; }
        if (!unit) {
            if (d < 0) { report(status, step, F_MISSING); continue; }
            if (fzero(a[d])) { report(status, step, F_ZERO_PIVOT); continue; }
            s = fdiv(s, a[d]);
        }
        x[i * k + c] = s;
    })
}

// ILU(0) of row i in place over a, in IKJ order as the CPU's: each earlier row k of its pattern
// (done: an earlier level) eliminates, its U part merged with row i's columns right of k.
// Returns 0, a status, or -1 where a row it needs failed (whose own key is smaller).
template <typename V, typename I>
__device__ __forceinline__ int ilu0_row(const I* __restrict__ crow, const I* __restrict__ cols, V* __restrict__ a,
                                        i64 n, i64 nnz, const i64* __restrict__ diag,
                                        const i64* __restrict__ row_level, i64 lvl, i64 i, i64 lo, i64 hi) {
    i64 d = -1;
    for (i64 p = lo; p < hi; ++p) {
        const i64 kk = (i64)cols[p];
        if (kk < 0 || kk >= n) return F_CHANGED;
        if (kk >= i) {
            if (kk == i) d = p;
            continue;
        }
        if (row_level[kk] >= lvl) return F_CHANGED;
        const i64 dk = diag[kk];
        if (dk < 0) return -1;
        const i64 khi = (i64)crow[kk + 1];
        if (dk >= nnz || bad_segment(dk + 1, khi, nnz)) return F_CHANGED;
        const V lik = fdiv(a[p], a[dk]);
        a[p] = lik;
        i64 r = p + 1;
        for (i64 q = dk + 1; q < khi; ++q) {
            const i64 j = (i64)cols[q];
            while (r < hi && (i64)cols[r] < j) ++r;
            if (r == hi) break;
            if ((i64)cols[r] == j) a[r] = a[r] - lik * a[q];
        }
    }
    if (d < 0) return F_MISSING;
    return fzero(a[d]) ? F_ZERO_PIVOT : 0;
}

// IC(0) of row i in place over a (a lower triangle whose rows end at their diagonal), as the
// CPU's: L[i, j] = (A[i, j] - sum_{k < j} L[i, k] conj(L[j, k])) / L[j, j] over both rows'
// patterns, then the diagonal's root. Returns as ilu0_row.
template <typename V, typename I>
__device__ __forceinline__ int ic0_row(const I* __restrict__ crow, const I* __restrict__ cols, V* __restrict__ a,
                                       i64 n, i64 nnz, const i64* __restrict__ diag,
                                       const i64* __restrict__ row_level, i64 lvl, i64 i, i64 lo, i64 hi) {
    i64 d = -1;
    for (i64 p = lo; p < hi; ++p) {
        const i64 j = (i64)cols[p];
        if (j < 0 || j >= n) return F_CHANGED;
        if (j > i) return F_NOT_LOWER;
        if (j == i) {
            d = p;
            continue;
        }
        if (row_level[j] >= lvl) return F_CHANGED;
        const i64 dj = diag[j];
        if (dj < 0) return -1;
        const i64 jlo = (i64)crow[j];
        if (dj >= nnz || bad_segment(jlo, dj, nnz)) return F_CHANGED;
        V s = a[p];
        i64 r = lo;
        for (i64 q = jlo; q < dj; ++q) {
            const i64 kk = (i64)cols[q];
            while (r < p && (i64)cols[r] < kk) ++r;
            if (r == p) break;
            if ((i64)cols[r] == kk) s = s - a[r] * fconj(a[q]);
        }
        a[p] = fdiv(s, a[dj]);
    }
    if (d < 0) return F_MISSING;
    V s = a[d];
    for (i64 p = lo; p < d; ++p) s = s - a[p] * fconj(a[p]);
    const double sd = freal(s);
    if (!(sd > 0.0)) return F_NOT_POSITIVE;  // also NaN
    a[d] = from_real<V>(sqrt(sd));
    return 0;
}

// ILU(0) (cholesky = 0) or IC(0) (cholesky = 1) in place over a, the rows of levels [lb, le).
// diag: every row's diagonal position (tri_counts), -1 for none.
// st:kernel field index
template <typename V, typename I>
__global__ void factor_levels(const I* __restrict__ crow, const I* __restrict__ cols, V* __restrict__ a, i64 n,
                              i64 nnz, const i64* __restrict__ diag, int cholesky, const i64* __restrict__ order,
                              const i64* __restrict__ level_ptr, const i64* __restrict__ row_level, i64 lb, i64 le,
                              u64* __restrict__ status) {
    ST_LEVELS(lb, le, order, level_ptr, 1, i, c, {
        (void)c;
        const i64 lo = (i64)crow[i], hi = (i64)crow[i + 1];
        const int code = bad_segment(lo, hi, nnz) ? F_CHANGED
                       : cholesky ? ic0_row(crow, cols, a, n, nnz, diag, row_level, lvl, i, lo, hi)
                                  : ilu0_row(crow, cols, a, n, nnz, diag, row_level, lvl, i, lo, hi);
        if (code > 0) report(status, i, code);
    })
}

}  // namespace st
