// Sparse optimizer updates on the device: SGD (with momentum), Adagrad and SparseAdam over the
// rows a COO gradient touches, with torch.optim's formulas operation for operation (the CPU's
// sparsetensor/_lib/_optim.pyx computes the same ones).
//
// A gradient is grouped by row on the host side (sparsetensor/_backend/cuda/_optim.py): its row
// keys are bounds-checked, radix-sorted (stably: positions in input order) and split into runs
// (coalesce.cu). Run j holds sorted positions [starts[j], starts[j + 1]) of parameter row
// keys[starts[j]]; perm maps a sorted position to its gradient row. Every kernel here is one
// pass over (run, element) pairs: it sums the run's gradient rows in input order (as the CPU
// does) and updates the parameter and state element in place. Distinct runs are distinct rows,
// so no two threads write the same element.
#include "common.cuh"

namespace st {

// the ops of update_runs (the CPU kernel's OPS)
#define OPTIM_SGD 0
#define OPTIM_ADAGRAD 1
#define OPTIM_ADAM 2

// Element e of the sum of gradient rows perm[a..b) (a < b), in that order; negated for maximize.
template <typename V>
__device__ __forceinline__ V run_sum(const V* __restrict__ grad, const i64* __restrict__ perm, i64 a, i64 b,
                                     i64 E, i64 e, int negate) {
    V s = grad[perm[a] * E + e];
    for (i64 k = a + 1; k < b; ++k) s = s + grad[perm[k] * E + e];
    return negate ? -s : s;
}

// Row element `at` of p (and its state s1, s2) after one update with gradient element g;
// coefficients by op, rounded to V first:
// - sgd (c0 = -lr): p += c0 * g;
// - adagrad (c0 = -clr, c1 = eps): s1 += g * g; p += c0 * (g / (sqrt(s1) + eps));
// - adam (c0 = 1 - beta1, c1 = 1 - beta2, c2 = eps, c3 = -step_size):
//   s1 += (g - s1) * c0; s2 += (g * g - s2) * c1; p += c3 * (s1 / (sqrt(s2) + eps)).
template <typename V>
__device__ __forceinline__ void apply_update(int op, i64 at, V g, V* __restrict__ p, V* __restrict__ s1,
                                             V* __restrict__ s2, V k0, V k1, V k2, V k3) {
    if (op == OPTIM_SGD) {
        p[at] = p[at] + k0 * g;
    } else if (op == OPTIM_ADAGRAD) {
        const V s = s1[at] + g * g;
        s1[at] = s;
        p[at] = p[at] + k0 * (g / (sqrt(s) + k1));
    } else {
        const V m = s1[at] + (g - s1[at]) * k0;
        const V v = s2[at] + (g * g - s2[at]) * k1;
        s1[at] = m;
        s2[at] = v;
        p[at] = p[at] + k3 * (m / (sqrt(v) + k2));
    }
}

// One update of the rows of nruns runs (E elements a row), a thread an element of a run's row
// (apply_update). A run of more than long_len gradient rows is left to update_long_runs: its
// index is appended to long_list (long_count[0] of them, zeroed before the launch), so that no
// thread sums thousands of rows alone (the first rows of a Zipf-distributed gradient).
// st:kernel real
template <typename V>
__global__ void update_runs(int op, const u64* __restrict__ keys, const i64* __restrict__ starts,
                            const i64* __restrict__ perm, const V* __restrict__ grad, i64 nruns, i64 E, int negate,
                            V* __restrict__ p, V* __restrict__ s1, V* __restrict__ s2, double c0, double c1,
                            double c2, double c3, i64 long_len, unsigned long long* __restrict__ long_count,
                            i64* __restrict__ long_list) {
    const V k0 = (V)c0, k1 = (V)c1, k2 = (V)c2, k3 = (V)c3;
    ST_GRID_LOOP(t, nruns * E) {
        const i64 j = t / E, e = t - j * E;
        const i64 a = starts[j];
        if (starts[j + 1] - a > long_len) {
            if (e == 0) long_list[atomicAdd(long_count, 1ull)] = j;
            continue;
        }
        const V g = run_sum(grad, perm, a, starts[j + 1], E, e, negate);
        apply_update(op, (i64)keys[a] * E + e, g, p, s1, s2, k0, k1, k2, k3);
    }
}

// The runs a kernel listed (long_list, long_count[0] of them), a block each in turn; run j of
// them is gradient rows perm[starts[run(j)] .. starts[run(j) + 1]). For each tile of
// W = min(E, blockDim.x) columns, the block's R = blockDim.x / W row lanes sum every R-th
// gradient row of the run (in order, a column a thread: coalesced rows), then the R partial sums
// are added in lane order (a fixed order: the same result every run) and apply(j, e, g) called
// once for each column e (g negated for maximize). Launch with UPDATE_THREADS.
#define UPDATE_THREADS 256
template <typename V, typename Run, typename Apply>
__device__ __forceinline__ void long_run_sums(const i64* __restrict__ starts, const i64* __restrict__ perm,
                                              const V* __restrict__ grad, i64 E, int negate,
                                              const unsigned long long* __restrict__ long_count,
                                              const i64* __restrict__ long_list, Run run, Apply apply) {
    __shared__ V part[UPDATE_THREADS];
    const i64 W = E < UPDATE_THREADS ? E : UPDATE_THREADS, R = UPDATE_THREADS / W;
    const i64 lane = threadIdx.x / W, col = threadIdx.x - lane * W;
    const i64 nlong = (i64)long_count[0];
    for (i64 q = blockIdx.x; q < nlong; q += gridDim.x) {  // q is the same for the whole block
        const i64 j = long_list[q], r = run(j), a = starts[r], b = starts[r + 1];
        for (i64 c0 = 0; c0 < E; c0 += W) {
            const i64 e = c0 + col;
            V s = 0;
            if (lane < R && e < E)
                for (i64 k = a + lane; k < b; k += R) s = s + grad[perm[k] * E + e];
            part[threadIdx.x] = s;
            __syncthreads();
            if (lane == 0 && e < E) {
                V g = part[col];
                for (i64 l = 1; l < R; ++l) g = g + part[l * W + col];
                apply(j, e, negate ? -g : g);
            }
            __syncthreads();
        }
    }
}

// The runs update_runs listed: their sums by long_run_sums, then apply_update.
// st:kernel real
template <typename V>
__global__ void update_long_runs(int op, const u64* __restrict__ keys, const i64* __restrict__ starts,
                                 const i64* __restrict__ perm, const V* __restrict__ grad, i64 E, int negate,
                                 V* __restrict__ p, V* __restrict__ s1, V* __restrict__ s2, double c0, double c1,
                                 double c2, double c3, const unsigned long long* __restrict__ long_count,
                                 const i64* __restrict__ long_list) {
    const V k0 = (V)c0, k1 = (V)c1, k2 = (V)c2, k3 = (V)c3;
    long_run_sums(starts, perm, grad, E, negate, long_count, long_list, [](i64 j) { return j; },
                  [&](i64 j, i64 e, V g) { apply_update(op, (i64)keys[starts[j]] * E + e, g, p, s1, s2, k0, k1, k2,
                                                        k3); });
}

// The rows of a momentum step: the union of the old buffer's rows (sorted keys, positions < nold
// of the stable sort of [buffer keys, run keys]) and the gradient's runs (positions >= nold).
// Union row j (sorted positions [starts[j], starts[j + 1]): one or two, the buffer's first) gets
// its gradient run (-1: none) and its old buffer row (-1: none).
// st:kernel
__global__ void union_rows(const i64* __restrict__ starts, const i64* __restrict__ perm, i64 n, i64 nold,
                           i64* __restrict__ grad_run, i64* __restrict__ buf_src) {
    ST_GRID_LOOP(j, n) {
        i64 g = -1, b = -1;
        for (i64 k = starts[j]; k < starts[j + 1]; ++k) {
            const i64 src = perm[k];
            if (src < nold) b = src; else g = src - nold;
        }
        grad_run[j] = g;
        buf_src[j] = b;
    }
}

// Element e of momentum row j with gradient element g (0 when the row has no gradient run, gj < 0)
// and old buffer row bj (-1: none). As the CPU's sgd_momentum: b = g when first, else
// momentum * old + (1 - dampening) * g (terms that are absent dropped); buf_out[j] = b;
// p += -lr * b, or with nesterov p += -lr * (g + momentum * b).
template <typename V>
__device__ __forceinline__ void momentum_update(i64 j, i64 e, V g, i64 gj, i64 bj, const u64* __restrict__ keys,
                                                const i64* __restrict__ key_starts, i64 E,
                                                const V* __restrict__ buf_in, V* __restrict__ buf_out,
                                                V* __restrict__ p, V k_lr, V k_m, V k_d, int nesterov, int first) {
    V b;
    if (first) b = g;
    else if (bj >= 0 && gj >= 0) b = k_m * buf_in[bj * E + e] + k_d * g;
    else if (bj >= 0) b = k_m * buf_in[bj * E + e];
    else b = k_d * g;
    buf_out[j * E + e] = b;
    const i64 at = (i64)keys[key_starts[j]] * E + e;
    p[at] = nesterov ? p[at] + k_lr * (g + k_m * b) : p[at] + k_lr * b;
}

// SGD with momentum over n buffer rows (momentum_update): row j is parameter row
// keys[key_starts[j]], its gradient run grad_run[j] (of starts/perm/grad; -1: none;
// grad_run == nullptr: run j) and its old buffer row buf_src[j] (-1 or buf_src == nullptr: none).
// A row whose run has more than long_len gradient rows is listed for sgd_momentum_long, as
// update_runs lists them.
// st:kernel real
template <typename V>
__global__ void sgd_momentum(const u64* __restrict__ keys, const i64* __restrict__ key_starts,
                             const i64* __restrict__ grad_run, const i64* __restrict__ buf_src, i64 n,
                             const i64* __restrict__ starts,
                             const i64* __restrict__ perm, const V* __restrict__ grad, i64 E,
                             const V* __restrict__ buf_in, V* __restrict__ buf_out, V* __restrict__ p, double lr,
                             double momentum, double dampening, int nesterov, int first, int negate, i64 long_len,
                             unsigned long long* __restrict__ long_count, i64* __restrict__ long_list) {
    const V k_lr = (V)(-lr), k_m = (V)momentum, k_d = (V)(1.0 - dampening);
    ST_GRID_LOOP(t, n * E) {
        const i64 j = t / E, e = t - j * E;
        const i64 gj = grad_run ? grad_run[j] : j, bj = buf_src ? buf_src[j] : -1;
        if (gj >= 0 && starts[gj + 1] - starts[gj] > long_len) {
            if (e == 0) long_list[atomicAdd(long_count, 1ull)] = j;
            continue;
        }
        const V g = gj >= 0 ? run_sum(grad, perm, starts[gj], starts[gj + 1], E, e, negate) : (V)0;
        momentum_update(j, e, g, gj, bj, keys, key_starts, E, buf_in, buf_out, p, k_lr, k_m, k_d, nesterov, first);
    }
}

// The rows sgd_momentum listed: their runs' sums by long_run_sums, then momentum_update.
// st:kernel real
template <typename V>
__global__ void sgd_momentum_long(const u64* __restrict__ keys, const i64* __restrict__ key_starts,
                                  const i64* __restrict__ grad_run, const i64* __restrict__ buf_src,
                                  const i64* __restrict__ starts, const i64* __restrict__ perm,
                                  const V* __restrict__ grad, i64 E, const V* __restrict__ buf_in,
                                  V* __restrict__ buf_out, V* __restrict__ p, double lr, double momentum,
                                  double dampening, int nesterov, int first, int negate,
                                  const unsigned long long* __restrict__ long_count,
                                  const i64* __restrict__ long_list) {
    const V k_lr = (V)(-lr), k_m = (V)momentum, k_d = (V)(1.0 - dampening);
    auto run = [&](i64 j) { return grad_run ? grad_run[j] : j; };
    long_run_sums(starts, perm, grad, E, negate, long_count, long_list, run, [&](i64 j, i64 e, V g) {
        momentum_update(j, e, g, run(j), buf_src ? buf_src[j] : -1, keys, key_starts, E, buf_in, buf_out, p, k_lr,
                        k_m, k_d, nesterov, first);
    });
}

// g = -grad (maximize) or grad; g = g + wd * p; with momentum: buf = g (first) or
// buf * momentum + (1 - dampening) * g, then g = g + momentum * buf (nesterov) or buf; p += -lr * g.
// st:kernel real
template <typename V>
__global__ void sgd_dense(V* __restrict__ p, const V* __restrict__ grad, V* __restrict__ buf, i64 n, double lr,
                          double momentum, double dampening, double weight_decay, int nesterov, int first,
                          int negate) {
    const V k_lr = (V)(-lr), k_m = (V)momentum, k_d = (V)(1.0 - dampening), k_wd = (V)weight_decay;
    ST_GRID_LOOP(i, n) {
        V g = negate ? -grad[i] : grad[i];
        if (weight_decay != 0) g = g + k_wd * p[i];
        if (buf) {
            const V b = first ? g : buf[i] * k_m + k_d * g;
            buf[i] = b;
            g = nesterov ? g + k_m * b : b;
        }
        p[i] = p[i] + k_lr * g;
    }
}

// torch's dense Adagrad step over n elements: g as in sgd_dense; s += g * g; p += -clr * (g / (sqrt(s) + eps)).
// st:kernel real
template <typename V>
__global__ void adagrad_dense(V* __restrict__ p, const V* __restrict__ grad, V* __restrict__ s, i64 n, double clr,
                              double eps, double weight_decay, int negate) {
    const V k_lr = (V)(-clr), k_eps = (V)eps, k_wd = (V)weight_decay;
    ST_GRID_LOOP(i, n) {
        V g = negate ? -grad[i] : grad[i];
        if (weight_decay != 0) g = g + k_wd * p[i];
        const V si = s[i] + g * g;
        s[i] = si;
        p[i] = p[i] + k_lr * (g / (sqrt(si) + k_eps));
    }
}

// out[i] = value (Adagrad's initial accumulator).
// st:kernel real
template <typename V>
__global__ void fill(V* __restrict__ out, i64 n, double value) {
    const V v = (V)value;
    ST_GRID_LOOP(i, n) { out[i] = v; }
}

}  // namespace st
