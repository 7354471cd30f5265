"""Sparse-dense products on the device: csr/bsr @ dense (SpMM), csr @ vector (SpMV), SDDMM.

The lowerings of the ``spmm`` and ``sddmm`` kernels of :mod:`sparsetensor._backend.cuda`: the
op (:mod:`sparsetensor.ops.blas`, ``st.matmul(t, x)``) has resolved shapes and dtypes with the
shared planning of :mod:`sparsetensor._backend._plan`. ``spmm(a, x, plan, rt)``: ``a`` a device
csr/csc/bsr/bsc tensor without dense dims, ``x`` a dense device array of its dtype; ``(K,)``
gives ``(M,)`` (SpMV), ``(K, N)`` gives ``(M, N)``; a batched ``a`` (``B + (M, K)``) takes
``x`` of shape ``B + (K, N)`` or a shared ``(K, N)``. csc/bsc operands are transposed to
csr/bsr on the device first. Results are new DeviceArrays (float16 accumulates in float32).

``sampled_addmm(input, mat1, mat2, beta=1, alpha=1)``: ``beta * input + alpha * (mat1 @
mat2)`` at the pattern of csr ``input`` (torch.sparse.sampled_addmm).

``nonempty_rows(crow)`` and ``full_rows_coo(marks, vals, shape)``: the row bookkeeping of
hspmm, smm and sspaddmm (which rows of a csr matrix hold entries; the coo tensor specifying every
element of those rows) from existing kernels (adjacent differences, a scan, coalesce's run starts,
a block expansion).
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ..._core import _layout as L
from ..._core._tensor import COOTensor, CompressedTensor
from .._plan import ProductShape
from ...cuda import _primitives as P
from ...cuda._array import DeviceArray, as_device_array
from ._coalesce import UnequalBatches, batch_matrices, checked
from ._reduce import step_extrema
from ._convert import _expand, _rows_to_coo, transpose_compressed
from ...cuda._module import BLOCK, grid_for, launch
from ...cuda._classes import CudaCompressedTensor, CudaSparseTensor

__all__ = ["spmm", "sampled_addmm", "nonempty_rows", "full_rows_coo"]

_SPMM_TILES = 4  # SPMM_TILES of blas.cu
_BSR_TILE, _BSR_THREADS = 32, 256  # BSR_TILE and 32 * BSR_WARPS of blas.cu
# the tiled BSR kernel for blocks of >= 16 items and >= 16 columns of X: a guess (not yet
# timed on a GPU) at where staging in shared memory beats one thread per output
_BSR_TILED_MIN_N = 16


def _dense_operand(x, dev, op: str) -> DeviceArray:
    if isinstance(x, CudaSparseTensor):
        raise NotImplementedError(f"{op} on cuda with a sparse {x.layout.name} operand where a dense one is "
                                  "expected has no GPU kernel (sparse @ sparse is st.matmul or st.spgemm)")
    if isinstance(x, np.ndarray):
        raise TypeError(f"{op}: the dense operand is a NumPy array on the host; move it to {dev.name} first "
                        "(sparsetensor.cuda.DeviceArray.from_host)")
    try:
        return as_device_array(x, dev)
    except TypeError:
        raise TypeError(f"{op}: expected a dense CUDA array, got {type(x).__name__}") from None


def _rows(a):
    """A canonical device compressed tensor in csr/bsr (csc/bsc transposed on the device; the
    transpose of the same index arrays kept from their second product on)."""
    a = checked(a)
    return a if a.layout.compressed_rows else transpose_compressed(a, keep=True)


def _tpr(nnz: int, rows: int) -> int:
    """Threads per row for SpMV (each takes four to eight entries of a mean row, two loaded
    together: SPMV_BATCH of blas.cu). In session 13's H100 sweep of 1-16 threads this was the
    fastest or within 3% of it: 27-point stencil (mean 27: 4), 7-point (7: 1), R-MAT (15: 2),
    uniform rows (16: 4; 8 was 2.6% faster)."""
    return P.group_size(nnz / max(rows, 1))


_SPMV_PIECE = 256                             # a warp takes a piece of a long row (8 entries a lane)
_SPMM_LONG, _SPMM_PIECE = 512, 512            # a warp takes a piece of a long row (16 loads of 32 entries)
_SPMM_PART_BYTES = 256 << 20                  # at most this much for the pieces' partial rows
_NO_LONG = np.iinfo(np.int64).max


class _LongRows:
    """The rows of a csr index array longer than ``long_len``, cut in pieces of ``piece``
    entries for the long-row kernels of SpMV/SpMM: their ids (b * nrows + r), each row's
    first piece, each piece's row. The row kernels skip exactly the rows longer than
    ``long_len`` and the long kernels take exactly those, so the plan must be the indices':
    it is made at the second product of indices that are ours (indices do not change in place
    after a validation) and kept while the array lives. The pieces spread a hub row over the
    device; finding them waits for the device (the longest row is read, then the rows)."""

    __slots__ = ("long_len", "rows", "first", "item_slot", "nitems", "nlong")

    def __init__(self, dev, c, B: int, M: int, long_len: int, piece: int):
        lens = ()
        if step_extrema(c.reshape(B, M + 1)) > long_len:
            lens = np.diff(c.get().reshape(B, M + 1).astype(np.int64), axis=1).ravel()
        rows = np.flatnonzero(np.asarray(lens) > long_len)
        self.long_len, self.nlong, self.nitems = (long_len if rows.size else _NO_LONG), int(rows.size), 0
        self.rows = self.first = self.item_slot = None
        if rows.size:
            pieces = -(-lens[rows] // piece)
            first = np.zeros(rows.size + 1, np.int64)
            np.cumsum(pieces, out=first[1:])
            self.nitems = int(first[-1])
            self.rows = DeviceArray.from_host(rows.astype(np.int64), dev)
            self.first = DeviceArray.from_host(first, dev)
            self.item_slot = DeviceArray.from_host(np.repeat(np.arange(rows.size, dtype=np.int64), pieces), dev)


_long_rows: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # index array -> {(long_len, piece): plan}
_FIRST = object()  # in _long_rows: the array's first product listed its long rows on the device


class _Listed:
    """The long rows as the row kernel lists them on the device (for csr_spmv_long_rows or
    csr_spmm_long_rows): a count and room for every row that can be longer than ``long_len``."""

    __slots__ = ("long_len", "count", "rows", "most")

    def __init__(self, dev, B: int, M: int, nnz: int, long_len: int):
        self.long_len, self.most = long_len, min(B * M, B * nnz // (long_len + 1))
        self.count = P.zeros(dev, (1,), np.uint64)
        self.rows = P.empty(dev, (self.most,), np.int64)


def _long_plan(dev, c, B: int, M: int, nnz: int, bound: int, long_len: int, piece: int):
    """How the rows of index array ``c`` (rows of at most ``bound`` entries) longer than
    ``long_len`` are found: none can be (a plan of none); a :class:`_Listed` for indices another
    library may have changed since the last product and for an array's first product (a
    transpose made for one product is not waited for); the array's :class:`_LongRows` from its
    second product on."""
    if bound <= long_len or not M * nnz:
        return _NONE
    if c._shared:
        return _Listed(dev, B, M, nnz, long_len)
    plans = _long_rows.setdefault(c, {})
    plan = plans.get((long_len, piece))
    if plan is None:
        plans[(long_len, piece)] = _FIRST
        return _Listed(dev, B, M, nnz, long_len)
    if plan is _FIRST:
        plan = plans[(long_len, piece)] = _LongRows(dev, c, B, M, long_len, piece)
    return plan


class _None:
    long_len, nlong = _NO_LONG, 0


_NONE = _None()  # no row is long


def _long_sum(dev, vkey, plan, N, part, y) -> None:
    """y's long rows (N columns) = their pieces' partial rows, summed in piece order."""
    launch(dev, "blas.cu", "csr_long_sum", (vkey,), grid_for(dev, plan.nlong * N), BLOCK, plan.rows, plan.first,
           plan.nlong, N, part, y)


_LONG_ROW_THREADS = 256  # LONG_ROW_THREADS of blas.cu


def _listed_rows(dev, kernel, vkey, ik, plan, ngroups, *args) -> None:
    """The long rows the row kernel listed (``plan`` a :class:`_Listed`), a block each."""
    launch(dev, "blas.cu", kernel, (vkey, ik), min(plan.most * ngroups, dev.sm_count * 8), _LONG_ROW_THREADS,
           *args[:-1], plan.count, plan.rows, args[-1])


def _spmv(dev, vkey, ik, c, p, v, B, M, K, nnz, x, x_bstride, y, acc_dtype):
    """y = a @ x for csr ``a`` and a vector ``x``: rows of up to 16 entries a thread by
    csr_spmv, longer ones in pieces of 256 (a warp each), summed per row in piece order, or a
    block a row where they are listed on the device."""
    tpr = _tpr(nnz, M)
    plan = _long_plan(dev, c, B, M, nnz, min(nnz, K), max(32, 16 * tpr), _SPMV_PIECE)
    listed = isinstance(plan, _Listed)
    launch(dev, "blas.cu", "csr_spmv", (vkey, ik), grid_for(dev, B * M * tpr), BLOCK, c, p, v, B, M, nnz, x,
           x_bstride, y, tpr, plan.long_len, *((plan.count, plan.rows) if listed else (None, None)))
    if listed:
        _listed_rows(dev, "csr_spmv_long_rows", vkey, ik, plan, 1, c, p, v, M, nnz, x, x_bstride, y)
    elif plan.nlong:
        part = P.empty(dev, (plan.nitems,), acc_dtype)
        launch(dev, "blas.cu", "csr_spmv_long_part", (vkey, ik), grid_for(dev, plan.nitems * 32), BLOCK,
               c, p, v, M, nnz, x, x_bstride, plan.rows, plan.item_slot, plan.first,
               plan.nitems, _SPMV_PIECE, part)
        _long_sum(dev, vkey, plan, 1, part, y)


def _spmm(dev, vkey, ik, c, p, v, B, M, K, nnz, x, x_bstride, N, y, acc_dtype):
    """Y = a @ X for csr ``a``: a warp per row and group of 128 columns, rows longer than
    _SPMM_LONG in pieces (a warp each), summed per row in piece order, or a block a row (and
    group) where they are listed on the device."""
    plan = _long_plan(dev, c, B, M, nnz, min(nnz, K), _SPMM_LONG, _SPMM_PIECE)
    listed = isinstance(plan, _Listed)
    if not listed and plan.nlong and plan.nitems * N * acc_dtype.itemsize > _SPMM_PART_BYTES:
        plan = _NONE  # the pieces' partial rows would take too much room: every row in one warp
    ngroups = -(-N // (32 * _SPMM_TILES))
    launch(dev, "blas.cu", "csr_spmm", (vkey, ik), grid_for(dev, B * M * ngroups * 32), BLOCK, c, p, v, B, M, nnz,
           x, x_bstride, N, y, plan.long_len, *((plan.count, plan.rows) if listed else (None, None)))
    if listed:
        _listed_rows(dev, "csr_spmm_long_rows", vkey, ik, plan, ngroups, c, p, v, M, nnz, x, x_bstride, N, y)
    elif plan.nlong:
        part = P.empty(dev, (plan.nitems, N), acc_dtype)
        launch(dev, "blas.cu", "csr_spmm_long_part", (vkey, ik), grid_for(dev, plan.nitems * ngroups * 32), BLOCK,
               c, p, v, M, nnz, x, x_bstride, N, plan.rows, plan.item_slot, plan.first, plan.nitems, _SPMM_PIECE,
               part)
        _long_sum(dev, vkey, plan, N, part, y)


def _batches(a, rows, out_batch: tuple):
    """Device compressed tensor ``a`` whose batch ``b`` is ``a``'s batch ``rows[b]`` (host ints),
    shaped ``out_batch + a``'s matrix shape: the members' batches gathered (a broadcast made real)."""
    m = a.batch_dim
    c, p, v = a.compressed_indices(), a.plain_indices(), a.values()
    flat = [x.reshape((math.prod(a.shape[:m]),) + x.shape[m:]).take(rows) for x in (c, p, v)]
    return CompressedTensor(*(x.reshape(out_batch + x.shape[1:]) for x in flat), out_batch + a.shape[m:], a.layout,
                            True)


def spmm(a, x, plan, rt, threads=None, err=None):
    """``a @ x`` for a device compressed tensor ``a`` without dense dims and a dense device array
    ``x`` whose shapes ``plan`` (:class:`sparsetensor.ops.blas.ProductShape`) resolved, in ``rt``
    (the ``spmm`` kernel of :mod:`._backend`): csc/bsc are transposed to csr/bsr on the device
    first. Operands of another dtype than ``rt`` are converted to it first (on the device)."""
    if rt == np.bool_:  # NumPy's or of ands: counted in int64, then tested against 0
        return spmm(a, x, plan, np.dtype(np.int64), threads, err).astype(np.bool_)
    if a.dtype != rt:
        a = a._replace_values(a.values().astype(rt))
    if x.dtype != rt:
        x = x.astype(rt)
    try:
        a = _rows(a)
    except UnequalBatches:  # repeats summed leave the batches different nnz: one output batch at a time
        return _by_batch(a, x, plan, rt)
    dev = a.values()._device
    B = plan.sb.shape[0]
    if math.prod(a.shape[:a.batch_dim]) != B or (B > 1 and not (plan.sb == np.arange(B)).all()):
        a = _batches(a, plan.sb, plan.out_batch)  # broadcast: the batches each output batch reads, copied
    if x.ndim <= 2 or math.prod(x.shape[:-2]) == 1:
        x_bstride = 0  # one dense operand for every batch
    else:
        Bd = math.prod(x.shape[:-2])
        if not (Bd == B and (plan.db == np.arange(B)).all()):
            x = x.reshape((Bd,) + x.shape[-2:]).take(plan.db)
        x_bstride = plan.K * plan.N
    vkey = P.arith_key(a.dtype, "matmul")
    ik = P.index_key(a.index_dtype)
    M, K, N = plan.M, plan.K, plan.N
    rb, cb = a.blocksize
    y = P.empty(dev, plan.out_shape, a.dtype)
    if y.size == 0:
        return y
    c, p, v = a.compressed_indices(), a.plain_indices(), a.values()
    if B * a.nnz == 0 or K == 0:
        dev.memset8(y._ptr, 0, y.nbytes)
        return y
    if a.layout.blocked and rb <= _BSR_TILE and cb <= _BSR_TILE and N >= _BSR_TILED_MIN_N and rb * cb >= 16:
        nt = 512 // max(4, P.acc_dtype(a.dtype).itemsize)  # NT of bsr_spmm_tiled: 512 bytes of columns
        tiles = B * (M // rb) * -(-N // nt)
        launch(dev, "blas.cu", "bsr_spmm_tiled", (vkey, ik), min(tiles, dev.sm_count * 64), _BSR_THREADS, c, p, v, B,
               M // rb, a.nnz, rb, cb, x, x_bstride, N, y)
    elif a.layout.blocked and (rb, cb) != (1, 1):
        P.run(dev, "blas.cu", "bsr_spmm", (vkey, ik), B * M * N, c, p, v, B, M // rb, a.nnz, rb, cb, x, x_bstride, N, y)
    elif N == 1:  # SpMV: x (K,), (K, 1) or batch + (K, 1) are K contiguous items per batch
        _spmv(dev, vkey, ik, c, p, v, B, M, K, a.nnz, x, x_bstride, y, P.acc_dtype(a.dtype))
    else:
        _spmm(dev, vkey, ik, c, p, v, B, M, K, a.nnz, x, x_bstride, N, y, P.acc_dtype(a.dtype))
    return y


def _by_batch(a, x, plan, rt):
    """:func:`spmm` of each output batch alone (the CPU's kernel sums a row's repeats as it reads
    them, so it never needs one nnz for every batch)."""
    mats = batch_matrices(a)
    xs = x.reshape((math.prod(x.shape[:-2]),) + x.shape[-2:]) if x.ndim > 2 else None
    tail = plan.out_shape[len(plan.out_batch):]
    one = ProductShape(tail, (), np.zeros(1, np.int64), np.zeros(1, np.int64), plan.M, plan.K, plan.N)
    dev = a.values()._device
    y = P.empty(dev, plan.out_shape, rt)
    ys = y.reshape((plan.sb.shape[0],) + tail)
    for o, (sb, db) in enumerate(zip(plan.sb.tolist(), plan.db.tolist())):
        part = spmm(mats[sb], x if xs is None else xs[db if xs.shape[0] > 1 else 0], one, rt)
        dev.copy_dtod(ys[o]._ptr, part._ptr, part.nbytes)
    return y


def sampled_addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0):
    """``beta * input + alpha * (mat1 @ mat2)`` sampled at the pattern of device csr ``input``.

    ``mat1`` ``(M, K)`` and ``mat2`` ``(K, N)`` are dense device arrays (batched:
    ``B + (M, K)``, ``B + (K, N)``, or shared 2-d ones). ``beta * input`` is computed also
    when ``beta == 0`` (NaN stays NaN), as PyTorch and the CPU do. Returns a csr tensor sharing ``input``'s indices.
    """

    if not isinstance(input, CudaCompressedTensor) or input.layout is not L.sparse_csr:
        raise NotImplementedError(f"sampled_addmm on cuda needs a csr input, got "
                                  f"{getattr(input, 'layout', type(input).__name__)}")
    if input.dense_dim:
        raise NotImplementedError("sampled_addmm on cuda of a csr tensor with dense dims")
    t = checked(input)
    dev = t.values()._device
    m1, m2 = _dense_operand(mat1, dev, "sampled_addmm"), _dense_operand(mat2, dev, "sampled_addmm")
    if not (m1.dtype == m2.dtype == t.dtype):
        raise TypeError(f"sampled_addmm on cuda needs one dtype, got {t.dtype}, {m1.dtype} and {m2.dtype}")
    vkey = P.arith_key(t.dtype, "sampled_addmm")
    m = t.batch_dim
    batch = t.shape[:m]
    B = math.prod(batch)
    M, N = t.shape[m], t.shape[m + 1]
    if m1.ndim < 2 or m2.ndim < 2 or m1.shape[-2] != M or m2.shape[-1] != N or m1.shape[-1] != m2.shape[-2]:
        raise ValueError(f"sampled_addmm: input {t.shape}, mat1 {m1.shape}, mat2 {m2.shape}: expected mat1 (..., {M}, K) "
                         f"and mat2 (..., K, {N})")
    K = m1.shape[-1]
    strides = []
    factors = []
    for arr, name in ((m1, "mat1"), (m2, "mat2")):
        if arr.ndim == 2:
            strides.append(0)
        else:
            arr = _batch_broadcast(arr, batch, f"sampled_addmm: {name} {arr.shape} does not match the batch {batch} "
                                               f"of input {t.shape}")
            strides.append(arr.shape[-2] * arr.shape[-1])
        factors.append(arr)
    m1, m2 = factors
    b, a = complex(beta), complex(alpha)
    out = P.empty(dev, t.values().shape, t.dtype)
    nnz = t.nnz
    if B * nnz:
        launch(dev, "blas.cu", "csr_sddmm", (vkey, P.index_key(t.index_dtype)), grid_for(dev, B * nnz * 32), BLOCK,
               t.compressed_indices(), t.plain_indices(), t.values(), B, M, nnz, m1, strides[0], m2, strides[1], K, N,
               a.real, a.imag, b.real, b.imag, out)
    return CompressedTensor(t.compressed_indices(), t.plain_indices(), out, t.shape, t.layout, True)


def _batch_broadcast(arr: DeviceArray, batch: tuple, message: str) -> DeviceArray:
    """Dense device factor ``arr`` ``(..., R, C)`` with its batch dims broadcast to ``batch`` (NumPy's
    rules; ``ValueError(message)`` otherwise), as a contiguous copy where a dim is stretched: the
    kernel takes one stride per batch."""
    from ._select import repeat_axis

    lead = arr.shape[:-2]
    if lead == tuple(batch):
        return arr
    try:
        fits = np.broadcast_shapes(lead, batch) == tuple(batch)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(message)
    arr = arr.reshape((1,) * (len(batch) - len(lead)) + arr.shape)
    for k, n in enumerate(batch):
        if arr.shape[k] != n:
            arr = repeat_axis(arr, k, n)
    return arr


def nonempty_rows(crow):
    """The rows of device csr index ``crow`` ``(M + 1,)`` that hold entries: ``(rows, compact,
    marks)``, ``rows`` ``(R,)`` in ``crow``'s dtype (ascending), ``compact`` the compressed index
    ``(R + 1,)`` of those rows alone, ``marks`` the int64 exclusive scan ``(M + 1,)`` of the rows'
    nonempty flags (for :func:`full_rows_coo`). One number (R) is read to the host."""
    dev = crow._device
    M = crow.shape[0] - 1
    counts = P.empty(dev, (M,), np.int64)
    P.run(dev, "select.cu", "adjacent_diff", (), M, crow.astype(np.int64, copy=False), M, counts)
    marks = P.exclusive_scan(dev, counts.astype(np.bool_).astype(np.int64))
    R = int(P.read_ints(dev, marks[M:])[0])
    if M:  # starts[j] = the j-th nonempty row, starts[R] = M
        starts = P.empty(dev, (R + 1,), np.int64)
        P.run(dev, "coalesce.cu", "run_starts", (), M, marks, M, starts)
    else:
        starts = P.zeros(dev, (1,), np.int64)
    compact = P.gather_rows(dev, crow, starts, R + 1)
    return starts[:R].astype(crow.dtype), compact, marks


def full_rows_coo(marks, vals, shape: tuple, index_dtype):
    """The coalesced coo tensor of ``shape`` (M, N) whose entries are every element of the rows that
    ``marks`` (:func:`nonempty_rows`) flags, in row-major order, with values ``vals`` ``(R, N)`` (smm's
    result): the expansion of the bsr matrix of (1, N) blocks, one per flagged row."""
    M, N = shape
    R = vals.shape[0]
    dev = vals._device
    if R * N == 0:
        return COOTensor(P.empty(dev, (2, 0), index_dtype), vals.reshape(0), shape, True, True)
    blocks = CompressedTensor(marks.astype(index_dtype, copy=False), P.zeros(dev, (R,), index_dtype),
                              vals.reshape(R, 1, N), shape, L.sparse_bsr, True)
    return _rows_to_coo(_expand(blocks))
