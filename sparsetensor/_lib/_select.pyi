"""Selection kernels for the shape ops (Cython, OpenMP): index_select, narrow and cat.

Compressed arrays use the canonical form of sparsetensor.ops.convert: compressed (B, n + 1),
plain (B, nnz) of one index dtype (int32 or int64), values (B, nnz, E) as a raw unsigned
view (sparsetensor._core._dtypes.raw_view). They are trusted to satisfy invariants 5.1-5.6 (the
wrappers in sparsetensor.ops.shape scan unchecked input first). COO coordinates are
bounds-checked along the selected dim.

A selection is a map from old coordinates j to new ones: targets[first[j]:first[j + 1]],
ascending (see build_map)."""
import numpy as np

# (invariant "C4" or "C5", dim, position, offending value)
CooError = tuple[str, int, int, int]

def build_map(
    index: np.ndarray,  # (K,) int32/int64, every entry in [0, size)
    size: int,
) -> tuple[np.ndarray, np.ndarray]: ...  # (first (size + 1,) int64, targets (K,) int64)

def coo_index_select(
    indices: np.ndarray,  # (S, nnz) index
    values: np.ndarray,   # (nnz, E) raw
    dim: int,
    first: np.ndarray,    # (size + 1,) int64
    targets: np.ndarray,  # (K,) int64
    nthreads: int,
) -> tuple[CooError | None, np.ndarray | None, np.ndarray | None]: ...
    # (None, out_indices (S, N), out_values (N, E)) or (error, None, None)

def gather_rows(
    compressed: np.ndarray,      # (B, n + 1) index
    plain: np.ndarray,           # (B, nnz), same dtype
    values: np.ndarray,          # (B, nnz, E) raw
    rows: np.ndarray,            # (K,) int64, each in [0, n)
    out_compressed: np.ndarray,  # (B, K + 1), same index dtype, filled by the caller
    out_plain: np.ndarray,       # (B, nnz_out), filled
    out_values: np.ndarray,      # (B, nnz_out, E) raw, filled
    nthreads: int,
) -> None: ...

def plain_range(
    compressed: np.ndarray,  # (B, n + 1) index
    plain: np.ndarray,       # (B, nnz), sorted within each slice (5.6)
    lo: int, hi: int,        # the plain range [lo, hi)
    starts: np.ndarray,      # (B, n) int64, filled: where each slice's segment in range starts
    counts: np.ndarray,      # (B, n) int64, filled: its length
    nthreads: int,
) -> None: ...

def copy_segments(
    plain: np.ndarray,           # (B, nnz) index
    values: np.ndarray,          # (B, nnz, E) raw
    starts: np.ndarray,          # (B, n) int64: segment starts
    out_compressed: np.ndarray,  # (B, n + 1): cumulated segment lengths
    shift: int,                  # subtracted from the plain indices
    out_plain: np.ndarray,       # (B, nnz_out), filled
    out_values: np.ndarray,      # (B, nnz_out, E) raw, filled
    nthreads: int,
) -> None: ...

def plain_count(
    compressed: np.ndarray,  # (B, n + 1) index
    plain: np.ndarray,       # (B, nnz)
    first: np.ndarray,       # (plain_size + 1,) int64
    counts: np.ndarray,      # (B, n) int64, filled: entries per slice after the map
    nthreads: int,
) -> None: ...

def plain_fill(
    compressed: np.ndarray,      # (B, n + 1) index
    plain: np.ndarray,           # (B, nnz)
    values: np.ndarray,          # (B, nnz, E) raw
    first: np.ndarray,           # (plain_size + 1,) int64
    targets: np.ndarray,         # (K,) int64
    out_compressed: np.ndarray,  # (B, n + 1), the cumulated plain_count
    out_plain: np.ndarray,       # (B, nnz_out), filled, sorted within each slice
    out_values: np.ndarray,      # (B, nnz_out, E) raw, filled
    sort_rows: bool,             # the map is not monotone: sort each output slice
    max_row: int,                # the longest output slice
    nthreads: int,
) -> None: ...

def cat_rows(
    compressed: np.ndarray,  # (B, n + 1) index of one input
    plain: np.ndarray,       # (B, nnz_t)
    values: np.ndarray,      # (B, nnz_t, E) raw
    offset: int,             # added to the plain indices
    cursor: np.ndarray,      # (B, n) int64: where slice i of batch b goes next; advanced
    out_plain: np.ndarray,   # (B, nnz_out) int32/int64 (may differ from the input's)
    out_values: np.ndarray,  # (B, nnz_out, E) raw, same raw dtype
    nthreads: int,
) -> None: ...

def drop_items(src: np.ndarray, dst: np.ndarray, drop: np.ndarray, itemsize: int) -> None: ...
# src, dst: 1-d uint8 byte views; drop: sorted distinct int64 item positions; dst = src without them

def kron_rows(
    ia: np.ndarray,          # (2, na) int64
    va: np.ndarray,          # (na,) arithmetic view (sparsetensor._backend._views.bits_dtype)
    ga: np.ndarray,          # (runs + 1,) int64: starts of A's runs of one row, then na
    ib: np.ndarray,          # (2, nb) int64
    vb: np.ndarray,          # (nb,) as va
    gb: np.ndarray,          # (runs + 1,) int64
    mb: int,
    nb: int,
    out: np.ndarray,         # (2, na * nb) index, written
    out_values: np.ndarray,  # (na * nb,) as va, written
    nthreads: int,
) -> None: ...

def flagged_count(
    compressed: np.ndarray,  # (B, n + 1) index
    flags: np.ndarray,       # (B, nnz) uint8
    counts: np.ndarray,      # (B, n) int64, written
    nthreads: int,
) -> None: ...

def keep_flagged(
    compressed: np.ndarray,      # (B, n + 1) index
    plain: np.ndarray,           # (B, nnz) index
    values: np.ndarray,          # (B, nnz, E) raw
    flags: np.ndarray,           # (B, nnz) uint8
    out_compressed: np.ndarray,  # (B, n + 1) index: the prefix sums of flagged_count's counts
    out_plain: np.ndarray,       # (B, nnz') index, written
    out_values: np.ndarray,      # (B, nnz', E) raw, written
    nthreads: int,
) -> None: ...
