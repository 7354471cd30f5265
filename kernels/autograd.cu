// Gradients on the device (sparsetensor/_backend/cuda/_autograd.py): the kernels the
// derivative rules of sparsetensor/autograd need beyond the ops' own.
//
// - element_offsets / coo_offsets: for every value item of a sparse tensor, its offset in a
//   strided dense array (stride 0 on a broadcast dim): reading a dense cotangent at a pattern
//   (to_dense, sum, mean), and the (batch, row, col) of each item for sampled_dot;
// - compressed_keys + key_lookup: a sparse cotangent read at another tensor's pattern;
// - sampled_dot: the masked gradient of a sparse factor, sum_n A[row, n] * B[col, n] at
//   each stored item, operands read through strides (no transposed copies);
// - sampled_sparse_dot: the same with two sparse csr operands (sparse @ sparse), by row merges;
// - sampled_sparse_dense: the same with one csr operand and a dense one (sparse @ sparse, dense cotangent);
// - unary_grad / unary_grad_complex / abs_grad_complex / sgn_grad_complex: G * conj(f'(x)) of the pointwise ops;
// - softmax_grad: the pullback of segment_softmax over the same segments;
// - add_arrays, sum_leading, real_part: summing cotangents.
#include "common.cuh"
#include "complex.cuh"

// Derivative kinds of unary_grad: f'(x) given x, y = f(x) and a constant c (the Python side,
// sparsetensor/_backend/cuda/_autograd.py, maps each pointwise op to one).
#define D_CONST 0         // c: neg (-1), frac and conj (1), deg2rad, rad2deg, the flat ones (0)
#define D_SIGN 1          // abs
#define D_HALF_OVER_Y 2   // sqrt
#define D_TWICE_X 3       // square
#define D_COS 4           // sin
#define D_ONE_PLUS_YY 5   // tan
#define D_ONE_MINUS_YY 6  // tanh
#define D_ASIN 7          // 1 / sqrt(1 - x^2)
#define D_ATAN 8          // 1 / (1 + x^2)
#define D_COSH 9          // sinh
#define D_ASINH 10        // 1 / sqrt(1 + x^2)
#define D_ATANH 11        // 1 / (1 - x^2)
#define D_Y_PLUS_ONE 12   // expm1
#define D_LOG1P 13        // 1 / (1 + x)
#define D_STEP 14         // relu
#define D_POW 15          // pow by the exponent c: c * x^(c - 1)
#define D_ERF 16          // 2 / sqrt(pi) exp(-x^2)
#define D_ERFINV 17       // sqrt(pi) / 2 exp(y^2)
#define D_FINITE 18       // nan_to_num: 1 where x is finite, else 0

// Complex ops of unary_grad_complex: conj(G) for conj, else G * conj(f'(x)) with f'(x) from x, y = f(x)
// and the exponent c of pow.
#define C_NEG 0
#define C_SQUARE 1
#define C_CONJ 2
#define C_SQRT 3       // 1 / (2 y)
#define C_SIN 4        // cos x
#define C_SINH 5       // cosh x
#define C_TAN 6        // 1 + y^2
#define C_TANH 7       // 1 - y^2
#define C_ASIN 8       // 1 / sqrt(1 - x^2)
#define C_ASINH 9      // 1 / sqrt(1 + x^2)
#define C_ATAN 10      // 1 / (1 + x^2)
#define C_ATANH 11     // 1 / (1 - x^2)
#define C_EXPM1 12     // y + 1
#define C_LOG1P 13     // 1 / (1 + x)
#define C_FLAT 14      // 0: round
#define C_POW 15       // c x^(c - 1)
#define C_FINITE 16    // nan_to_num: 1 where both parts are finite, else 0 (the host's isfinite)
#define C_ERF 17       // 2 / sqrt(pi) exp(-x^2)

namespace st {

__device__ __forceinline__ float conj_of(float x) { return x; }
__device__ __forceinline__ double conj_of(double x) { return x; }
__device__ __forceinline__ cfloat conj_of(cfloat x) { return {x.re, -x.im}; }
__device__ __forceinline__ cdouble conj_of(cdouble x) { return {x.re, -x.im}; }

// Value items of a compressed tensor lie as [B][nnz][rb][cb][D]. Item i's offset in a dense array
// of shape batch + (rows, cols) + dense: boff[b] + row * srow + col * scol + doff[d], where the
// element's compressed slot is found in its batch's compressed index (n + 1 entries) and
// (row, col) = (slot, plain) for rows-compressed layouts, (plain, slot) otherwise, times the block.
// st:kernel index
template <typename I>
__global__ void element_offsets(const I* __restrict__ c, const I* __restrict__ p, i64 B, i64 nnz, i64 n, i64 rb,
                                i64 cb, i64 D, int rows_major, const i64* __restrict__ boff, i64 srow, i64 scol,
                                const i64* __restrict__ doff, i64* __restrict__ out) {
    ST_GRID_LOOP(i, B * nnz * rb * cb * D) {
        i64 q = i;
        const i64 d = q % D; q /= D;
        const i64 cc = q % cb; q /= cb;
        const i64 rr = q % rb; q /= rb;
        const i64 e = q % nnz;
        const i64 b = q / nnz;
        const i64 slot = slot_of(c + b * (n + 1), n, e);
        const i64 plain = (i64)p[b * nnz + e];
        const i64 brow = rows_major ? slot : plain, bcol = rows_major ? plain : slot;
        out[i] = boff[b] + (brow * rb + rr) * srow + (bcol * cb + cc) * scol + doff[d];
    }
}

// The same for a coo tensor: indices (S, nnz), values [nnz][D]; strides (S) of the sparse dims.
// st:kernel index
template <typename I>
__global__ void coo_offsets(const I* __restrict__ idx, i64 S, i64 nnz, i64 D, const i64* __restrict__ strides,
                            const i64* __restrict__ doff, i64* __restrict__ out) {
    ST_GRID_LOOP(i, nnz * D) {
        const i64 e = i / D, d = i - e * D;
        i64 o = doff[d];
        for (i64 k = 0; k < S; ++k) o += (i64)idx[k * nnz + e] * strides[k];
        out[i] = o;
    }
}

// Keys of stored elements in the key space of a cotangent: with the element's coordinates c[k]
// (batch dims, then the (block) row and column of a compressed tensor; the sparse dims of a coo
// one), key = sum_k (c[k] + shift[k]) * mult[k], or ~0 (found nowhere) when some c[k] is outside
// [lo[k], hi[k]). Plain keys: shift 0, mult the row-major strides of the (block) grid; a narrow,
// select or cat maps its input's elements to its output's keys by shift, mult and the range.
__device__ __forceinline__ bool add_coord(i64 x, i64 k, const i64* __restrict__ shift, const i64* __restrict__ lo,
                                          const i64* __restrict__ hi, const i64* __restrict__ mult, u64& key) {
    if (x < lo[k] || x >= hi[k]) return false;
    key += (u64)(x + shift[k]) * (u64)mult[k];
    return true;
}

// st:kernel index
template <typename I>
__global__ void compressed_keys(const I* __restrict__ c, const I* __restrict__ p, i64 B, i64 nnz, i64 n,
                                int rows_major, i64 m, const i64* __restrict__ batch, const i64* __restrict__ shift,
                                const i64* __restrict__ lo, const i64* __restrict__ hi, const i64* __restrict__ mult,
                                u64* __restrict__ keys) {
    ST_GRID_LOOP(i, B * nnz) {
        const i64 b = i / nnz, e = i - b * nnz;
        const i64 slot = slot_of(c + b * (n + 1), n, e);
        const i64 plain = (i64)p[i];
        u64 key = 0;
        bool ok = true;
        i64 r = b;
        for (i64 k = m - 1; k >= 0; --k) {
            ok = add_coord(r % batch[k], k, shift, lo, hi, mult, key) && ok;
            r /= batch[k];
        }
        ok = add_coord(rows_major ? slot : plain, m, shift, lo, hi, mult, key) && ok;
        ok = add_coord(rows_major ? plain : slot, m + 1, shift, lo, hi, mult, key) && ok;
        keys[i] = ok ? key : ~0ull;
    }
}

// st:kernel index
template <typename I>
__global__ void coo_keys_mapped(const I* __restrict__ idx, i64 S, i64 nnz, const i64* __restrict__ shift,
                                const i64* __restrict__ lo, const i64* __restrict__ hi,
                                const i64* __restrict__ mult, u64* __restrict__ keys) {
    ST_GRID_LOOP(e, nnz) {
        u64 key = 0;
        bool ok = true;
        for (i64 k = 0; k < S; ++k) ok = add_coord((i64)idx[k * nnz + e], k, shift, lo, hi, mult, key) && ok;
        keys[e] = ok ? key : ~0ull;
    }
}

// out[i][w] = src[perm[j]][w] where sorted[j] == want[i], else 0 (W raw items a row).
// st:kernel raw
template <typename R>
__global__ void key_lookup(const u64* __restrict__ sorted, const i64* __restrict__ perm, i64 ns,
                           const u64* __restrict__ want, i64 nw, const R* __restrict__ src, i64 W,
                           R* __restrict__ out) {
    ST_GRID_LOOP(t, nw * W) {
        const i64 i = t / W, w = t - i * W;
        const u64 k = want[i];
        const i64 j = lower_bound(sorted, ns, k);
        if (j < ns && sorted[j] == k) {
            out[t] = src[perm[j] * W + w];
        } else {
            R z;
            unsigned char* zb = reinterpret_cast<unsigned char*>(&z);
            for (unsigned s = 0; s < sizeof(R); ++s) zb[s] = 0;
            out[t] = z;
        }
    }
}

// out[i] = alpha * sum_n opA(A[ab + row * sar + n * san]) * opB(B[bb + col * sbr + n * sbn]) for the
// item at flat offset off[i] = (b * M + row) * N + col; opX conjugates when conj_x; ab, bb: batch
// b times the operand's batch stride (0: one matrix for every batch).
// st:kernel value
template <typename V>
__global__ void sampled_dot(const i64* __restrict__ off, i64 n_items, i64 M, i64 N, i64 K, const V* __restrict__ A,
                            i64 sab, i64 sar, i64 san, int conj_a, const V* __restrict__ Bm, i64 sbb, i64 sbr,
                            i64 sbn, int conj_b, double are, double aim, V* __restrict__ out) {
    typedef typename acc<V>::type T;
    const T alpha = acc_scalar<T>(are, aim);
    ST_GRID_LOOP(i, n_items) {
        const i64 o = off[i];
        const i64 b = o / (M * N), rc = o - b * (M * N);
        const i64 row = rc / N, col = rc - row * N;
        const V* a = A + b * sab + row * sar;
        const V* x = Bm + b * sbb + col * sbr;
        T s = acc_zero<T>();
        for (i64 k = 0; k < K; ++k) {
            T u = to_acc(a[k * san]), w = to_acc(x[k * sbn]);
            if (conj_a) u = conj_of(u);
            if (conj_b) w = conj_of(w);
            s = s + u * w;
        }
        out[i] = from_acc<V>(alpha * s);
    }
}

// out[i] = sum_x opL(L[b, row, x]) * opR(R[b, col, x]) for the item at flat offset off[i] = (b * M + row) * N + col:
// the masked gradient of a sparse @ sparse product, a merge of row `row` of csr L with row `col` of csr R (int64
// indices, each row's columns ascending and distinct). Batch b's compressed index starts at b * lpb (rpb) and its
// entries at b * lnb (rnb); 0: one matrix for every batch. opX conjugates when conj_x.
// st:kernel value
template <typename V>
__global__ void sampled_sparse_dot(const i64* __restrict__ off, i64 n_items, i64 M, i64 N, const i64* __restrict__ lp,
                                   const i64* __restrict__ li, const V* __restrict__ lv, i64 lpb, i64 lnb, int conj_l,
                                   const i64* __restrict__ rp, const i64* __restrict__ ri, const V* __restrict__ rv,
                                   i64 rpb, i64 rnb, int conj_r, V* __restrict__ out) {
    typedef typename acc<V>::type T;
    ST_GRID_LOOP(i, n_items) {
        const i64 o = off[i];
        const i64 b = o / (M * N), rc = o - b * (M * N);
        const i64 row = rc / N, col = rc - row * N;
        const i64* lpr = lp + b * lpb;
        const i64* rpr = rp + b * rpb;
        const i64* lib = li + b * lnb;
        const i64* rib = ri + b * rnb;
        const V* lvb = lv + b * lnb;
        const V* rvb = rv + b * rnb;
        i64 p = lpr[row], q = rpr[col];
        const i64 pe = lpr[row + 1], qe = rpr[col + 1];
        T s = acc_zero<T>();
        while (p < pe && q < qe) {
            const i64 x = lib[p], y = rib[q];
            if (x < y) {
                ++p;
            } else if (y < x) {
                ++q;
            } else {
                T u = to_acc(lvb[p]), w = to_acc(rvb[q]);
                if (conj_l) u = conj_of(u);
                if (conj_r) w = conj_of(w);
                s = s + u * w;
                ++p;
                ++q;
            }
        }
        out[i] = from_acc<V>(s);
    }
}

// out[i] = sum_(x, s) opS(s) * D[b, other, x] over the entries (x, s) of row `r` of csr S, for the item at flat
// offset off[i] = (b * M + row) * N + col, with r = col, other = row when use_col, else r = row, other = col: the
// masked gradient of a sparse @ sparse product with a dense cotangent D (read through the element strides sdb, so,
// sx; sdb 0 for one matrix), so that G @ B^H or A^H @ G is never formed. S's batches as in sampled_sparse_dot.
// st:kernel value
template <typename V>
__global__ void sampled_sparse_dense(const i64* __restrict__ off, i64 n_items, i64 M, i64 N, const i64* __restrict__ sp,
                                     const i64* __restrict__ si, const V* __restrict__ sv, i64 spb, i64 snb, int conj_s,
                                     int use_col, const V* __restrict__ D, i64 sdb, i64 so, i64 sx,
                                     V* __restrict__ out) {
    typedef typename acc<V>::type T;
    ST_GRID_LOOP(i, n_items) {
        const i64 o = off[i];
        const i64 b = o / (M * N), rc = o - b * (M * N);
        const i64 row = rc / N, col = rc - row * N;
        const i64 r = use_col ? col : row, other = use_col ? row : col;
        const i64* spr = sp + b * spb;
        const i64* sib = si + b * snb;
        const V* svb = sv + b * snb;
        const V* d = D + b * sdb + other * so;
        T s = acc_zero<T>();
        for (i64 p = spr[r]; p < spr[r + 1]; ++p) {
            T u = to_acc(svb[p]);
            if (conj_s) u = conj_of(u);
            s = s + u * to_acc(d[sib[p] * sx]);
        }
        out[i] = from_acc<V>(s);
    }
}

template <typename A>
__device__ __forceinline__ A unary_derivative(A x, A y, int kind, A c) {
    switch (kind) {
        case D_SIGN: return x > (A)0 ? (A)1 : (x < (A)0 ? (A)-1 : (A)0);
        case D_HALF_OVER_Y: return (A)0.5 / y;
        case D_TWICE_X: return (A)2 * x;
        case D_COS: return cos(x);
        case D_ONE_PLUS_YY: return (A)1 + y * y;
        case D_ONE_MINUS_YY: return (A)1 - y * y;
        case D_ASIN: return (A)1 / sqrt((A)1 - x * x);
        case D_ATAN: return (A)1 / ((A)1 + x * x);
        case D_COSH: return cosh(x);
        case D_ASINH: return (A)1 / sqrt((A)1 + x * x);
        case D_ATANH: return (A)1 / ((A)1 - x * x);
        case D_Y_PLUS_ONE: return y + (A)1;
        case D_LOG1P: return (A)1 / ((A)1 + x);
        case D_STEP: return x > (A)0 ? (A)1 : (A)0;
        case D_POW: return c * pow(x, c - (A)1);
        case D_ERF: return (A)1.1283791670955126 * exp(-x * x);
        case D_ERFINV: return (A)0.88622692545275801 * exp(y * y);
        case D_FINITE: return isfinite(x) ? (A)1 : (A)0;
        default: return c;  // D_CONST
    }
}

// gx = g * f'(x) for real values (y = f(x)), f' of derivative kind ``kind`` with the constant c.
// st:kernel float
template <typename V>
__global__ void unary_grad(const V* __restrict__ x, const V* __restrict__ y, const V* __restrict__ g, i64 n, int kind,
                           double c, V* __restrict__ out) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(i, n) {
        const A d = unary_derivative<A>(to_acc(x[i]), to_acc(y[i]), kind, (A)c);
        out[i] = from_acc<V>(to_acc(g[i]) * d);
    }
}

__device__ cdouble complex_derivative(cdouble x, cdouble y, int op, double c) {
    const double a = x.re, b = x.im;
    const cdouble one = {1.0, 0.0}, xx = x * x, yy = y * y;
    switch (op) {
        case C_NEG: return {-1.0, 0.0};
        case C_SQUARE: return {2.0 * a, 2.0 * b};
        case C_SQRT: return c_div(one, {2.0 * y.re, 2.0 * y.im});
        case C_SIN: return {cos(a) * cosh(b), -sin(a) * sinh(b)};
        case C_SINH: return {cosh(a) * cos(b), sinh(a) * sin(b)};
        case C_TAN: return {1.0 + yy.re, yy.im};
        case C_TANH: return {1.0 - yy.re, -yy.im};
        case C_ASIN: return c_div(one, c_sqrt({1.0 - xx.re, -xx.im}));
        case C_ASINH: return c_div(one, c_sqrt({1.0 + xx.re, xx.im}));
        case C_ATAN: return c_div(one, {1.0 + xx.re, xx.im});
        case C_ATANH: return c_div(one, {1.0 - xx.re, -xx.im});
        case C_EXPM1: return {y.re + 1.0, y.im};
        case C_LOG1P: return c_div(one, {1.0 + a, b});
        case C_POW: {
            const cdouble p = complex_pow(x, c - 1.0);
            return {c * p.re, c * p.im};
        }
        case C_FINITE: return {isfinite(a) && isfinite(b) ? 1.0 : 0.0, 0.0};
        case C_ERF: {
            const cdouble e = c_exp({-xx.re, -xx.im});
            return {1.1283791670955126 * e.re, 1.1283791670955126 * e.im};
        }
        default: return {0.0, 0.0};  // C_FLAT
    }
}

// st:kernel complex
template <typename C>
__global__ void unary_grad_complex(const C* __restrict__ x, const C* __restrict__ y, const C* __restrict__ g, i64 n,
                                   int op, double c, C* __restrict__ out) {
    ST_GRID_LOOP(i, n) {
        const cdouble gi = {(double)g[i].re, (double)g[i].im};
        cdouble r;
        if (op == C_CONJ) {
            r = {gi.re, -gi.im};
        } else {
            const cdouble d = complex_derivative({(double)x[i].re, (double)x[i].im}, {(double)y[i].re, (double)y[i].im},
                                                 op, c);
            r = gi * cdouble{d.re, -d.im};
        }
        C o;
        o.re = r.re;
        o.im = r.im;
        out[i] = o;
    }
}

// abs of complex x (real output y = |x|, real cotangent g): gx = g * x / |x| (0 where x == 0).
// st:kernel real
template <typename A>
__global__ void abs_grad_complex(const A* __restrict__ x, const A* __restrict__ y, const A* __restrict__ g, i64 n,
                                 A* __restrict__ out) {
    ST_GRID_LOOP(i, n) {
        const A r = y[i];
        const A s = r == (A)0 ? (A)0 : g[i] / r;
        out[2 * i] = x[2 * i] * s;
        out[2 * i + 1] = x[2 * i + 1] * s;
    }
}

// sgn of complex x (s = x / |x|): gx = (g - conj(g) * s^2) / (2 |x|), 0 where x == 0 (PyTorch's value
// there). The two terms are the Wirtinger derivatives: d sgn / dx = 1 / (2|x|), d sgn / dx* = -s^2 / (2|x|).
// st:kernel real
template <typename A>
__global__ void sgn_grad_complex(const A* __restrict__ x, const A* __restrict__ g, i64 n, A* __restrict__ out) {
    ST_GRID_LOOP(i, n) {
        const double xr = (double)x[2 * i], xi = (double)x[2 * i + 1];
        const double r = hypot(xr, xi);
        double ore = 0, oim = 0;
        if (r != 0) {
            const double sr = xr / r, si = xi / r;
            const double s2r = sr * sr - si * si, s2i = 2 * sr * si;
            const double gr = (double)g[2 * i], gi = (double)g[2 * i + 1];
            ore = (gr - (gr * s2r + gi * s2i)) / (2 * r);
            oim = (gi - (gr * s2i - gi * s2r)) / (2 * r);
        }
        out[2 * i] = (A)ore;
        out[2 * i + 1] = (A)oim;
    }
}

// The pullback of segment_softmax (reduce.cu) over the same segments: with s = sum over the
// segment of w (w = g for log_softmax, g * y for softmax), gx = g - exp(y) * s (log) or y * (g - s).
// st:kernel real
template <typename A>
__global__ void softmax_grad(const A* __restrict__ y, const A* __restrict__ g, const i64* __restrict__ off, i64 G,
                             i64 K, i64 E, int log_, A* __restrict__ out) {
    ST_GRID_LOOP(t, G * E) {
        const i64 s_ = t / E, e = t - s_ * E;
        const i64 lo = off[s_] * K, hi = off[s_ + 1] * K;
        A s = 0;
        for (i64 j = lo; j < hi; ++j) s += log_ ? g[j * E + e] : g[j * E + e] * y[j * E + e];
        for (i64 j = lo; j < hi; ++j) {
            const A yj = y[j * E + e], gj = g[j * E + e];
            out[j * E + e] = log_ ? gj - exp(yj) * s : yj * (gj - s);
        }
    }
}

// out = a + b (same shape).
// st:kernel value
template <typename V>
__global__ void add_arrays(const V* __restrict__ a, const V* __restrict__ b, i64 n, V* __restrict__ out) {
    ST_GRID_LOOP(i, n) { out[i] = from_acc<V>(to_acc(a[i]) + to_acc(b[i])); }
}

// out[w] = sum_r x[r * W + w] (in r order).
// st:kernel value
template <typename V>
__global__ void sum_leading(const V* __restrict__ x, i64 R, i64 W, V* __restrict__ out) {
    typedef typename acc<V>::type T;
    ST_GRID_LOOP(w, W) {
        T s = acc_zero<T>();
        for (i64 r = 0; r < R; ++r) s = s + to_acc(x[r * W + w]);
        out[w] = from_acc<V>(s);
    }
}

// out[i] = x[2 * i]: the real parts of complex values given as pairs of reals.
// st:kernel real
template <typename A>
__global__ void real_part(const A* __restrict__ x, i64 n, A* __restrict__ out) {
    ST_GRID_LOOP(i, n) { out[i] = x[2 * i]; }
}

}  // namespace st
