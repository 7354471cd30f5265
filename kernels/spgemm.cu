// Sparse @ sparse (SpGEMM) over rows-compressed operands (csr @ csr, bsr @ bsr; batch b of a
// times batch b of b): a warp a row with a hash table of its columns (csr rows of at most
// ROW_HASH products, below), a block a row over a dense row (longer csr rows, below), else
// expand, sort, compress (ESC).
// sparsetensor/_backend/cuda/_spgemm.py drives the passes of ESC:
//   spgemm_counts (products of every entry of a: the length of b's row it meets)
//   -> exclusive scan = offsets, each entry's first product; the total is the product count P
//   -> spgemm_entry_rows (b * n + row of every entry of a)
//   -> spgemm_expand (one u64 key a product: (b * n + row) * ncols + column of the product)
//   -> radix sort of the keys (sort.cu; stable: a run keeps its products in the order of a's
//      entries, then b's) -> run_heads, scan, run_starts (coalesce.cu): one output entry a run
//   -> split_keys (convert.cu: the row key and the column of every output entry)
//   -> spgemm_values / spgemm_values_int (every output item sums its run's products).
// The products are located from their index q alone (a binary search over offsets), so that
// nothing but the keys and the sort's permutation is kept per product.
#include "common.cuh"
#include "scan.cuh"

namespace st {

// counts[t] = the length of row ap[t] of b (batch t / nnza): how many products entry t forms.
// st:kernel index
template <typename I>
__global__ void spgemm_counts(const I* __restrict__ ap, i64 B, i64 nnza, const I* __restrict__ bc, i64 nb,
                              i64* __restrict__ counts) {
    ST_GRID_LOOP(t, B * nnza) {
        const I* c = bc + (t / nnza) * (nb + 1);
        const i64 k = (i64)ap[t];
        counts[t] = (i64)c[k + 1] - (i64)c[k];
    }
}

// rows[t] = b * n + the row (major slot) holding entry t of batch b of a: the row part of its keys.
// st:kernel index
template <typename I>
__global__ void spgemm_entry_rows(const I* __restrict__ ac, i64 B, i64 n, i64 nnza, i64* __restrict__ rows) {
    ST_GRID_LOOP(t, B * nnza) {
        const i64 b = t / nnza;
        rows[t] = b * n + slot_of(ac + b * (n + 1), n, t - b * nnza);
    }
}

// Product q: the entry t of a that forms it (offsets[t] <= q < offsets[t + 1], N entries in all)
// and its position in b's entries (over every batch).
template <typename I>
__device__ __forceinline__ void locate(i64 q, const i64* __restrict__ offsets, i64 N, const I* __restrict__ ap,
                                       i64 nnza, const I* __restrict__ bc, i64 nb, i64 nnzb, i64* t, i64* pos) {
    const i64 e = slot_of(offsets, N, q);
    const i64 b = e / nnza;
    *t = e;
    *pos = b * nnzb + (i64)bc[b * (nb + 1) + (i64)ap[e]] + (q - offsets[e]);
}

// keys[q] = rows[t] * ncols + the column of product q (its entry of b): the caller checked that
// B * n * ncols fits 64 bits.
// st:kernel index
template <typename I>
__global__ void spgemm_expand(const i64* __restrict__ offsets, i64 N, const i64* __restrict__ rows,
                              const I* __restrict__ ap, i64 nnza, const I* __restrict__ bc, const I* __restrict__ bp,
                              i64 nb, i64 nnzb, i64 ncols, i64 P, u64* __restrict__ keys) {
    ST_GRID_LOOP(q, P) {
        i64 t, pos;
        locate(q, offsets, N, ap, nnza, bc, nb, nnzb, &t, &pos);
        keys[q] = (u64)rows[t] * (u64)ncols + (u64)(i64)bp[pos];
    }
}

// s + a * b; 64-bit integers in unsigned arithmetic, which wraps (signed overflow is undefined).
template <typename A> __device__ __forceinline__ A mul_add(A s, A a, A b) { return s + a * b; }
template <> __device__ __forceinline__ i64 mul_add<i64>(i64 s, i64 a, i64 b) {
    return (i64)((u64)s + (u64)a * (u64)b);
}

// Item u = (j, r, c) of output block j (Rb x Cb): the sum over the run's products q (sorted
// positions starts[j] .. starts[j + 1], perm[x] = q, in the order of a's entries then b's) of
// block row r of a's entry times block column c of b's entry. Unblocked: Rb = Kb = Cb = 1.
template <typename V, typename I>
__device__ __forceinline__ typename acc<V>::type run_sum(i64 u, const i64* __restrict__ perm,
                                                         const i64* __restrict__ starts, const i64* __restrict__ offsets,
                                                         i64 N, const I* __restrict__ ap, const V* __restrict__ av,
                                                         i64 nnza, const I* __restrict__ bc, const V* __restrict__ bv,
                                                         i64 nb, i64 nnzb, i64 Rb, i64 Kb, i64 Cb) {
    typedef typename acc<V>::type A;
    const i64 RC = Rb * Cb;
    const i64 j = u / RC, r = (u - j * RC) / Cb, c = u - j * RC - r * Cb;
    A s = acc_zero<A>();
    for (i64 x = starts[j]; x < starts[j + 1]; ++x) {
        i64 t, pos;
        locate(perm[x], offsets, N, ap, nnza, bc, nb, nnzb, &t, &pos);
        const V* arow = av + (t * Rb + r) * Kb;
        const V* bcol = bv + pos * Kb * Cb + c;
        for (i64 k = 0; k < Kb; ++k) s = mul_add(s, to_acc(arow[k]), to_acc(bcol[k * Cb]));
    }
    return s;
}

// Floating and complex values (float16 summed in float32, rounded once).
// st:kernel value index
template <typename V, typename I>
__global__ void spgemm_values(const i64* __restrict__ perm, const i64* __restrict__ starts, i64 nout,
                              const i64* __restrict__ offsets, i64 N, const I* __restrict__ ap, const V* __restrict__ av,
                              i64 nnza, const I* __restrict__ bc, const V* __restrict__ bv, i64 nb, i64 nnzb, i64 Rb,
                              i64 Kb, i64 Cb, V* __restrict__ out) {
    ST_GRID_LOOP(u, nout * Rb * Cb) {
        out[u] = from_acc<V>(run_sum(u, perm, starts, offsets, N, ap, av, nnza, bc, bv, nb, nnzb, Rb, Kb, Cb));
    }
}

// Integers (summed in 64 bits, wrapped to the value type when written: the same result as
// wrapping at every step) and bool as uint8 (logical != 0: an or of ands).
// st:kernel num index
template <typename V, typename I>
__global__ void spgemm_values_int(const i64* __restrict__ perm, const i64* __restrict__ starts, i64 nout,
                                  const i64* __restrict__ offsets, i64 N, const I* __restrict__ ap,
                                  const V* __restrict__ av, i64 nnza, const I* __restrict__ bc,
                                  const V* __restrict__ bv, i64 nb, i64 nnzb, i64 Rb, i64 Kb, i64 Cb, int logical,
                                  V* __restrict__ out) {
    ST_GRID_LOOP(u, nout * Rb * Cb) {
        typedef typename acc<V>::type A;
        const A s = run_sum(u, perm, starts, offsets, N, ap, av, nnza, bc, bv, nb, nnzb, Rb, Kb, Cb);
        out[u] = from_acc<V>(logical ? (A)(s != A(0)) : s);
    }
}

// -- rows of at most ROW_HASH products: a warp a row, its columns in a hash table in shared memory --
// spgemm_hash_count (unique columns a row: the output's row lengths; a row of more products
// raises too_long and the caller takes the sort above) -> exclusive scan = row pointers ->
// spgemm_hash_fill (each row's sorted columns, its sums) -> spgemm_hash_finish where the sums
// were kept wider than the values. No product is stored: the products of a row are formed
// again by the fill, from a's and b's entries, which stay in the cache between the passes.

#define ROW_HASH 1024            // slots of a warp's table (a power of two)
#define ROW_HASH_BITS 10
#define HASH_WARPS 4             // warps (rows at a time) of a block: launch with 32 * HASH_WARPS threads
#define HASH_EMPTY 0xffffffffu   // a free slot (columns are below it: the caller checks)

__device__ __forceinline__ unsigned hash_slot(unsigned c) { return (c * 2654435761u) >> (32 - ROW_HASH_BITS); }

// Inserts column c into a warp's table (linear probing); true when c was not there. The table
// never fills: a row has at most ROW_HASH products, so at most ROW_HASH columns.
__device__ __forceinline__ bool hash_insert(unsigned* tab, unsigned c) {
    unsigned h = hash_slot(c);
    for (;;) {
        const unsigned prev = atomicCAS(&tab[h], HASH_EMPTY, c);
        if (prev == HASH_EMPTY) return true;
        if (prev == c) return false;
        h = (h + 1) & (ROW_HASH - 1);
    }
}

// Empties a warp's table (every lane of the warp calls it).
__device__ __forceinline__ void clear_table(unsigned* tab, int lane) {
    for (int s = lane; s < ROW_HASH; s += 32) tab[s] = HASH_EMPTY;
    __syncwarp();
}

// The first row of warp w of this block (a warp a row, rows strided by the grid's warps).
__device__ __forceinline__ i64 first_row(int w) { return (i64)blockIdx.x * HASH_WARPS + w; }

// Sorts list[0..u) (distinct, u <= ROW_HASH) in increasing order: a bitonic sort by the warp
// over the next power of two, padded with HASH_EMPTY (above every column); each compare-exchange
// is one lane's, and a warp barrier ends each stage.
__device__ __forceinline__ void warp_sort(unsigned* list, int u, int lane) {
    int m = 1;
    while (m < u) m <<= 1;
    for (int i = u + lane; i < m; i += 32) list[i] = HASH_EMPTY;
    __syncwarp();
    for (int k = 2; k <= m; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = lane; i < m; i += 32) {
                const int p = i ^ j;
                if (p > i) {
                    const unsigned a = list[i], b = list[p];
                    if ((a > b) == ((i & k) == 0)) {
                        list[i] = b;
                        list[p] = a;
                    }
                }
            }
            __syncwarp();
        }
    }
}

// Row t (batch t / n) of a: its entries e0..e1 (over every batch) and its product count.
template <typename I>
__device__ __forceinline__ i64 row_entries(const I* __restrict__ ac, i64 n, i64 nnza, const i64* __restrict__ offsets,
                                           i64 t, i64* b, i64* e0, i64* e1) {
    *b = t / n;
    const I* c = ac + *b * (n + 1);
    const i64 r = t - *b * n;
    *e0 = *b * nnza + (i64)c[r];
    *e1 = *b * nnza + (i64)c[r + 1];
    return offsets[*e1] - offsets[*e0];
}

// Inserts the columns of row t's products into the warp's table; returns how many were new
// (this lane's inserts).
template <typename I>
__device__ __forceinline__ i64 insert_row(const I* __restrict__ ap, i64 e0, i64 e1, const I* __restrict__ bcb,
                                          const I* __restrict__ bpb, int lane, unsigned* tab) {
    i64 fresh = 0;
    for (i64 e = e0; e < e1; ++e) {
        const i64 k = (i64)ap[e], j1 = (i64)bcb[k + 1];
        for (i64 j = (i64)bcb[k] + lane; j < j1; j += 32) fresh += hash_insert(tab, (unsigned)(i64)bpb[j]);
    }
    return fresh;
}

// counts[t] = the number of distinct columns of row t's products (rows b * n + r of every batch),
// a warp a row; a row of more than ROW_HASH products gets -1 and is counted in too_long: [0] its
// products, [1] the rows (both zeroed before the launch), and listed in long_list (room for every
// row that can have more than ROW_HASH products; in no particular order).
// Launch with 32 * HASH_WARPS threads.
// st:kernel index
template <typename I>
__global__ void spgemm_hash_count(const I* __restrict__ ac, const I* __restrict__ ap, i64 B, i64 n, i64 nnza,
                                  const I* __restrict__ bc, const I* __restrict__ bp, i64 nb, i64 nnzb,
                                  const i64* __restrict__ offsets, i64* __restrict__ counts,
                                  unsigned long long* __restrict__ too_long, i64* __restrict__ long_list) {
    __shared__ unsigned tables[HASH_WARPS * ROW_HASH];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    unsigned* tab = tables + w * ROW_HASH;
    clear_table(tab, lane);
    for (i64 t = first_row(w); t < B * n; t += (i64)gridDim.x * HASH_WARPS) {  // t is the same for the whole warp
        i64 b, e0, e1;
        const i64 products = row_entries(ac, n, nnza, offsets, t, &b, &e0, &e1);
        if (products > ROW_HASH) {
            if (lane == 0) {
                counts[t] = -1;
                atomicAdd(&too_long[0], (unsigned long long)products);
                long_list[atomicAdd(&too_long[1], 1ull)] = t;
            }
            continue;
        }
        i64 fresh = insert_row(ap, e0, e1, bc + b * (nb + 1), bp + b * nnzb, lane, tab);
        for (int d = 16; d > 0; d >>= 1) fresh += shfl_down(fresh, d, 32);
        if (lane == 0) counts[t] = fresh;
        __syncwarp();
        clear_table(tab, lane);
    }
}

// Row t of the product, written at ptr[t]..ptr[t + 1] (from spgemm_hash_count's counts): its
// columns in increasing order (the table's columns gathered and sorted), then its sums in the
// order of a's entries, then b's (as the sort's runs sum them): for each entry of a in turn,
// the lanes add its products with b's row, whose columns differ, so no two lanes meet in one
// sum, and a warp barrier orders one entry's additions before the next's. accum is the output
// values when they are their own accumulator type, else a buffer spgemm_hash_finish converts.
// Launch with 32 * HASH_WARPS threads.
// st:kernel arith index
template <typename V, typename I>
__global__ void spgemm_hash_fill(const I* __restrict__ ac, const I* __restrict__ ap, const V* __restrict__ av, i64 B,
                                 i64 n, i64 nnza, const I* __restrict__ bc, const I* __restrict__ bp,
                                 const V* __restrict__ bv, i64 nb, i64 nnzb, const i64* __restrict__ offsets,
                                 const i64* __restrict__ ptr, I* __restrict__ plain,
                                 typename acc<V>::type* __restrict__ accum) {
    typedef typename acc<V>::type A;
    __shared__ unsigned tables[HASH_WARPS * ROW_HASH];
    __shared__ unsigned lists[HASH_WARPS * ROW_HASH];
    __shared__ unsigned long long used[HASH_WARPS];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    unsigned* tab = tables + w * ROW_HASH;
    unsigned* list = lists + w * ROW_HASH;
    clear_table(tab, lane);
    for (i64 t = first_row(w); t < B * n; t += (i64)gridDim.x * HASH_WARPS) {  // t is the same for the whole warp
        i64 b, e0, e1;
        const i64 o0 = ptr[t], u = ptr[t + 1] - o0;
        if (row_entries(ac, n, nnza, offsets, t, &b, &e0, &e1) > ROW_HASH || u == 0) continue;  // long: sorted
        const I* bcb = bc + b * (nb + 1);
        const I* bpb = bp + b * nnzb;
        const V* bvb = bv + b * nnzb;
        insert_row(ap, e0, e1, bcb, bpb, lane, tab);
        if (lane == 0) used[w] = 0;
        __syncwarp();
        for (int s = lane; s < ROW_HASH; s += 32) {  // the row's columns, in the order of their slots
            const unsigned c = tab[s];
            if (c != HASH_EMPTY) {
                list[atomicAdd(&used[w], 1ull)] = c;
                tab[s] = HASH_EMPTY;
            }
        }
        __syncwarp();
        I* prow = plain + o0;
        A* srow = accum + o0;
        warp_sort(list, (int)u, lane);
        for (i64 i = lane; i < u; i += 32) {
            prow[i] = (I)list[i];
            srow[i] = acc_zero<A>();
        }
        __syncwarp();
        for (i64 e = e0; e < e1; ++e) {
            const i64 k = (i64)ap[e], j1 = (i64)bcb[k + 1];
            const A x = to_acc(av[e]);
            for (i64 j = (i64)bcb[k] + lane; j < j1; j += 32) {
                const i64 at = lower_bound(prow, u, bpb[j]);
                srow[at] = mul_add(srow[at], x, to_acc(bvb[j]));
            }
            __syncwarp();
        }
    }
}

// out[i] = accum[i] as a V (float16 rounded once from float32, integers wrapped from int64;
// logical: bool, accum != 0).
// st:kernel num
template <typename V>
__global__ void spgemm_hash_finish(const typename acc<V>::type* __restrict__ accum, i64 n, int logical,
                                   V* __restrict__ out) {
    typedef typename acc<V>::type A;
    ST_GRID_LOOP(i, n) {
        const A s = accum[i];
        out[i] = from_acc<V>(logical ? (A)(s != A(0)) : s);
    }
}

// -- rows of more than ROW_HASH products: a block a row over a dense row ------------------------------
// Each block owns a bitmap of the ncols columns (nwords 32-bit words, zero between rows) and, for
// the fill, a dense row of ncols sums. spgemm_dense_count sets the bits of a row's product
// columns and counts them (clearing the words as it reads them); spgemm_dense_fill adds the
// products into the dense row entry of a by entry of a (a block barrier between entries: the
// order of the sort's runs and of the hash rows), marking first touches in the bitmap, then
// writes the row's columns in increasing order by a block scan of the words' bit counts. Memory
// is the blocks' rows, not the products: no row is too long. Launch with DENSE_THREADS threads.

#define DENSE_THREADS 256

// Sets the bits of the columns of row t's products in bm, the block's threads over its products
// (a product found by its entry, a binary search over offsets). Columns at or above ncols are
// skipped (the operands were checked: none is).
template <typename I>
__device__ __forceinline__ void dense_mark(const I* __restrict__ ap, const I* __restrict__ bcb,
                                           const I* __restrict__ bpb, const i64* __restrict__ offsets, i64 e0, i64 e1,
                                           i64 ncols, unsigned* __restrict__ bm) {
    const i64 q0 = offsets[e0], q1 = offsets[e1];
    for (i64 q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
        const i64 e = e0 + slot_of(offsets + e0, e1 - e0, q);
        const i64 c = (i64)bpb[(i64)bcb[(i64)ap[e]] + (q - offsets[e])];
        if (0 <= c && c < ncols) atomicOr(&bm[c >> 5], 1u << (c & 31));
    }
}

// counts[t] of each listed row t (long_list[0..nlong)) = its distinct product columns.
// st:kernel index
template <typename I>
__global__ void spgemm_dense_count(const I* __restrict__ ac, const I* __restrict__ ap, i64 n, i64 nnza,
                                   const I* __restrict__ bc, const I* __restrict__ bp, i64 nb, i64 nnzb,
                                   const i64* __restrict__ offsets, const i64* __restrict__ long_list, i64 nlong,
                                   unsigned* __restrict__ bitmaps, i64 nwords, i64 ncols, i64* __restrict__ counts) {
    unsigned* bm = bitmaps + (i64)blockIdx.x * nwords;
    for (i64 r = blockIdx.x; r < nlong; r += gridDim.x) {
        i64 b, e0, e1;
        const i64 t = long_list[r];
        row_entries(ac, n, nnza, offsets, t, &b, &e0, &e1);
        dense_mark(ap, bc + b * (nb + 1), bp + b * nnzb, offsets, e0, e1, ncols, bm);
        __syncthreads();
        i64 mine = 0;
        for (i64 w = threadIdx.x; w < nwords; w += blockDim.x) {
            const unsigned x = bm[w];
            if (x) {
                mine += __popc(x);
                bm[w] = 0;
            }
        }
        i64 total;
        block_inclusive_scan(mine, &total);
        if (threadIdx.x == 0) counts[t] = total;
    }
}

// Row t (long_list[0..nlong)) of the product at ptr[t]..ptr[t + 1]: its columns in increasing
// order and its sums (dense: the block's row of ncols sums), as spgemm_hash_fill writes the others.
// st:kernel arith index
template <typename V, typename I>
__global__ void spgemm_dense_fill(const I* __restrict__ ac, const I* __restrict__ ap, const V* __restrict__ av,
                                  i64 n, i64 nnza, const I* __restrict__ bc, const I* __restrict__ bp,
                                  const V* __restrict__ bv, i64 nb, i64 nnzb, const i64* __restrict__ offsets,
                                  const i64* __restrict__ long_list, i64 nlong, unsigned* __restrict__ bitmaps,
                                  i64 nwords, i64 ncols, typename acc<V>::type* __restrict__ dense,
                                  const i64* __restrict__ ptr, I* __restrict__ plain,
                                  typename acc<V>::type* __restrict__ accum) {
    typedef typename acc<V>::type A;
    unsigned* bm = bitmaps + (i64)blockIdx.x * nwords;
    A* row = dense + (i64)blockIdx.x * ncols;
    for (i64 r = blockIdx.x; r < nlong; r += gridDim.x) {
        i64 b, e0, e1;
        const i64 t = long_list[r];
        row_entries(ac, n, nnza, offsets, t, &b, &e0, &e1);
        const I* bcb = bc + b * (nb + 1);
        const I* bpb = bp + b * nnzb;
        const V* bvb = bv + b * nnzb;
        for (i64 e = e0; e < e1; ++e) {  // b's row has distinct columns: no two threads meet in one sum
            const i64 k = (i64)ap[e], j1 = (i64)bcb[k + 1];
            const A x = to_acc(av[e]);
            for (i64 j = (i64)bcb[k] + threadIdx.x; j < j1; j += blockDim.x) {
                const i64 c = (i64)bpb[j];
                if (c < 0 || c >= ncols) continue;
                const unsigned bit = 1u << (c & 31);
                const bool seen = atomicOr(&bm[c >> 5], bit) & bit;
                row[c] = mul_add(seen ? row[c] : acc_zero<A>(), x, to_acc(bvb[j]));
            }
            __syncthreads();
        }
        const i64 o0 = ptr[t], o1 = ptr[t + 1];
        i64 base = o0;
        for (i64 w0 = 0; w0 < nwords; w0 += blockDim.x) {  // the marked columns in order, a word a thread
            const i64 w = w0 + threadIdx.x;
            unsigned x = w < nwords ? bm[w] : 0u;
            const i64 mine = __popc(x);
            i64 total;
            i64 at = base + block_inclusive_scan(mine, &total) - mine;
            if (x) bm[w] = 0;
            for (; x; x &= x - 1) {
                const i64 c = w * 32 + __popc((x & (0u - x)) - 1u);  // the lowest set bit's column
                if (at < o1) {
                    plain[at] = (I)c;
                    accum[at] = row[c];
                }
                ++at;
            }
            base += total;
        }
        __syncthreads();
    }
}

// -- rows of more than ROW_HASH products: sorted (above), over their products alone -------------------

// masked[e] = entry e's products (offsets[e + 1] - offsets[e]) if its row (rows[e]) is long
// (counts[row] < 0, from spgemm_hash_count), else 0: their scan locates the long rows' products.
// st:kernel
__global__ void spgemm_long_entries(const i64* __restrict__ offsets, const i64* __restrict__ rows,
                                    const i64* __restrict__ counts, i64 N, i64* __restrict__ masked) {
    ST_GRID_LOOP(e, N) { masked[e] = counts[rows[e]] < 0 ? offsets[e + 1] - offsets[e] : 0; }
}

// counts[t] of a long row (-1) = its entries in the sorted product of the long rows (row
// pointers lptr over every row).
// st:kernel
__global__ void spgemm_long_counts(const i64* __restrict__ lptr, i64 rows, i64* __restrict__ counts) {
    ST_GRID_LOOP(t, rows) {
        if (counts[t] < 0) counts[t] = lptr[t + 1] - lptr[t];
    }
}

// Entry i of the long rows' product (row lrows[i], b * n + r) to its place in the whole
// product: ptr[row] + its position in its row.
// st:kernel index raw
template <typename I, typename T>
__global__ void spgemm_place_long(const u64* __restrict__ lrows, const i64* __restrict__ lptr,
                                  const i64* __restrict__ ptr, i64 nl, const I* __restrict__ lplain,
                                  const T* __restrict__ lvals, I* __restrict__ plain, T* __restrict__ vals) {
    ST_GRID_LOOP(i, nl) {
        const i64 row = (i64)lrows[i], at = ptr[row] + (i - lptr[row]);
        plain[at] = lplain[i];
        vals[at] = lvals[i];
    }
}

}  // namespace st
