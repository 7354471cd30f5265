"""Sparse optimizer kernels (Cython, OpenMP). Inputs are trusted to have the shapes and
dtypes documented here: the wrappers in sparsetensor.optim._kernels check them (row keys
are bounds-checked by the coalescing sort that produces the runs).

Float arrays are all float32 or all float64, C-contiguous; the parameter and its state
are viewed as (rows, E). Runs are distinct rows, so the kernels update them in parallel.
"""
import numpy as np

OPS: dict[str, int]  # "sgd", "adagrad", "adam"

def bucket_runs(
    low_keys: np.ndarray,       # (nnz,) uint32, from _coalesce.coo_bucket_sort
    bucket_starts: np.ndarray,  # (nb + 1,) int64
    offsets: np.ndarray,        # (nb + 1,) int64, offsets[-1] = runs
    shift: int,
    base: int,
    rows: np.ndarray,           # (runs,) int64, written: each run's key
    run_ptr: np.ndarray,        # (runs + 1,) int64, written: each run's first sorted position; last = nnz
    nthreads: int,
) -> None: ...

def update_runs(
    op: int,                    # OPS[...]
    rows: np.ndarray,           # (runs,) int64, distinct, in [0, param rows)
    run_ptr: np.ndarray,        # (runs + 1,) int64, non-decreasing, last <= len(perm)
    perm: np.ndarray,           # (nnz,) int32/int64 positions into grad, in [0, grad rows)
    grad: np.ndarray,           # (nnz, E)
    param: np.ndarray,          # (rows, E), updated in place
    state1: np.ndarray,         # (rows, E): sum (adagrad), exp_avg (adam); any for sgd
    state2: np.ndarray,         # (rows, E): exp_avg_sq (adam); any otherwise
    scratch: np.ndarray,        # (nthreads, E)
    c0: float, c1: float, c2: float, c3: float,  # sgd: -lr; adagrad: -clr, eps; adam: 1-b1, 1-b2, eps, -step_size
    negate: bool,               # maximize
    nthreads: int,
) -> None: ...

def sgd_momentum(
    rows: np.ndarray,           # (k,) int64, distinct, in [0, param rows): the buffer's new rows
    grad_run: np.ndarray,       # (k,) int64: the run of each row, or -1
    buf_src: np.ndarray,        # (k,) int64: the row of buf_in of each row, or -1
    run_ptr: np.ndarray,        # (runs + 1,) int64
    perm: np.ndarray,           # (nnz,) int32/int64
    grad: np.ndarray,           # (nnz, E)
    buf_in: np.ndarray,         # (k_old, E)
    buf_out: np.ndarray,        # (k, E), written (may be buf_in when buf_src[j] == j for all old rows)
    param: np.ndarray,          # (rows, E), updated in place
    scratch: np.ndarray,        # (nthreads, E)
    lr: float, momentum: float, dampening: float, nesterov: bool,
    first: bool,                # no buffer yet: it starts as the gradient
    negate: bool,
    nthreads: int,
) -> None: ...
