"""Elementwise binary kernels (Cython, OpenMP): merges of two sparse patterns, the gather of
a dense operand at a sparse pattern. Inputs are trusted to
have the shapes and dtypes documented here and to satisfy invariants 5.1-5.5 (the wrappers
in sparsetensor.ops.binary scan unchecked input and coalesce first); the kernels check shapes.

Merges use the canonical form: compressed (B, n + 1), plain (B, nnz) of one index dtype,
values (B, nnz, E) of one arithmetic dtype (bool as uint8 with ``logical=True``, float16
widened to float32 by the caller). COO operands use these merges through _coo_merge (keys or
rows)."""
import numpy as np

# merge_fill's operations: x + alpha * y, x * y, numpy.maximum, numpy.minimum;
# PLUS (x + y, ADD with alpha == 1) only for merge_union
ADD: int
MUL: int
MAX: int
MIN: int
PLUS: int

def merge_count(
    a_compressed: np.ndarray,  # (B, n + 1) index
    a_plain: np.ndarray,       # (B, nnz_a), sorted and distinct within each row
    b_compressed: np.ndarray,  # (B, n + 1)
    b_plain: np.ndarray,       # (B, nnz_b)
    union: bool,               # True: union of the patterns; False: intersection
    counts: np.ndarray,        # (B, n) int64, filled
    nthreads: int,
) -> None: ...

def merge_fill(
    a_compressed: np.ndarray, a_plain: np.ndarray,
    a_values: np.ndarray,        # (B, nnz_a, E)
    b_compressed: np.ndarray, b_plain: np.ndarray,
    b_values: np.ndarray,        # (B, nnz_b, E), dtype of a_values
    out_compressed: np.ndarray,  # (B, n + 1): 0 then the prefix sums of merge_count's counts
    out_plain: np.ndarray,       # (B, nnz_out), filled (sorted within each row)
    out_values: np.ndarray,      # (B, nnz_out, E), filled
    op: int,                     # ADD, MUL, MAX or MIN; a side missing an index counts as 0 there
    union: bool,
    alpha: complex,              # ADD: x + alpha * y
    logical: bool,               # uint8 values are bools (ADD/MAX: or, MUL/MIN: and)
    nthreads: int,
) -> None: ...

def merge_union(
    a_compressed: np.ndarray, a_plain: np.ndarray,  # (1, n + 1), (1, nnz_a): one batch
    a_values: np.ndarray,        # (1, nnz_a, E), E >= 1
    b_compressed: np.ndarray, b_plain: np.ndarray,
    b_values: np.ndarray,        # (1, nnz_b, E)
    out_compressed: np.ndarray,  # (1, n + 1), filled
    out_plain: np.ndarray,       # (1, nnz_a + nnz_b): the first nnz filled
    out_values: np.ndarray,      # (1, nnz_a + nnz_b, E): the first nnz filled
    op: int,                     # PLUS, ADD, MAX, MIN (MUL: the union with zeros)
    alpha: complex,
    logical: bool,
    nthreads: int,
) -> int: ...  # nnz: the union in one pass, without merge_count (merge_fused of one batch)

def merge_fused(
    a_compressed: np.ndarray, a_plain: np.ndarray,  # (B, n + 1), (B, nnz_a)
    a_values: np.ndarray,        # (B, nnz_a, E), E >= 1
    b_compressed: np.ndarray, b_plain: np.ndarray,
    b_values: np.ndarray,        # (B, nnz_b, E)
    out_compressed: np.ndarray,  # (B, n + 1), filled: each batch's row pointers from 0
    out_plain: np.ndarray,       # (room,): room = B * (nnz_a + nnz_b) (union), B * min(nnz_a, nnz_b)
    out_values: np.ndarray,      # (room, E)
    op: int,                     # as for merge_fill, PLUS too
    union: bool,
    alpha: complex,
    logical: bool,
    nthreads: int,
) -> int: ...  # entries written (batch after batch): the union or intersection in one pass
