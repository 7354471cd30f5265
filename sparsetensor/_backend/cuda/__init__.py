"""The CUDA backend: the kernel names of :data:`sparsetensor._backend.KERNELS`, with the
parameters of :mod:`sparsetensor._backend.cpu`, over the NVRTC-compiled ``kernels/*.cu``
(the op modules of this package: ``_validate``, ``_coalesce``, ``_dense``, ``_convert``,
``_blas``, ``_binary``, ``_reduce``, ``_pointwise``, ``_select``). ``_optim`` (the optimizer
steps, called by :mod:`sparsetensor.optim`) and ``_autograd`` (the pullbacks' kernels, called by
:mod:`sparsetensor.autograd`) sit beside them with the CPU's functions of those packages.

The ops resolve operands, dtypes and shapes once, device-independently, and then call
``backend_for(*operands).<kernel>(...)``; for device operands that is this module. A kernel
the GPU lacks, or an argument it cannot take (a value cast from complex to real, an op with
no kernel) raises NotImplementedError naming the op and the device; nothing is
copied to the host.
"""

from __future__ import annotations

import numpy as np

from . import _addmm, _binary, _blas, _coalesce, _convert, _dense, _factor, _pointwise, _reduce, _reduce_dims, _sample, _select, _spgemm, _validate

__all__ = ["device", "validate", "coalesce", "to_dense", "from_dense", "convert", "transpose", "spmm", "spgemm", "scale_add",
           "merge", "reduce_sum", "reduce_sum_dims", "reduce_dims", "unary", "sddmm", "gather_slices", "remap_plain",
           "narrow_plain", "cat_plain", "cat_compressed", "index_select_coo", "compressed_sum", "plain_sum", "segment_reduce",
           "scatter_reduce", "segment_softmax", "group_by", "batch_offsets", "map_values", "sample_dense", "add_to_dense", "elementwise", "check_bounds",
           "index_range", "diagonal", "sum_axis", "flatten_coo", "reshape_coo", "triangle_flags",
           "nonzero_rows", "keep_coo", "narrow_coo", "keep_compressed", "kron_coo", "ilu0", "ic0", "trsv"]

device = "cuda"


def _no_kernel(op: str, t) -> NotImplementedError:
    return NotImplementedError(f"{op} of a {t.layout.name} tensor on {t.device} has no GPU kernel; run it on the "
                               f"host with t.cpu()")


def validate(t, threads=None) -> None:
    """Every invariant of device tensor ``t``, the O(nnz) ones on the device; raises InvariantError."""
    _validate.check_tensor(t)


def coalesce(t, threads=None):
    """COO: sorted, distinct indices (duplicates summed) on the device; compressed: 5.6 repaired."""
    return t if t.is_coalesced() and t._validated else _coalesce.coalesce(t)


def to_dense(t, threads=None):
    """The dense DeviceArray of ``t`` (duplicates summed)."""
    return _dense.to_dense(t)


def from_dense(a, plan, threads=None):
    """The device tensor of dense device array ``a`` that ``plan`` (:class:`sparsetensor.ops.dense.DensePlan`)
    describes."""
    return _dense.dense_to_sparse(a, plan)


def convert(t, layout, bs, threads=None):
    """``t`` in ``layout`` with blocksize ``bs`` (coo <-> csr, csr <-> csc, bsr <-> bsc on the
    device; grouping into blocks or expanding them raises NotImplementedError)."""
    return _convert.convert(t, layout, bs)


def transpose(t, threads=None):
    """csr <-> csc, bsr <-> bsc: the same matrix in the other orientation (a device radix sort)."""
    return _convert.transpose_compressed(_coalesce.checked(t))


def spmm(S, D, plan, rt, threads=None, err=None):
    """``S @ D`` for a compressed ``S`` and a dense device ``D`` whose shapes ``plan`` resolved, in ``rt``."""
    return _blas.spmm(S, D, plan, rt, threads, err)


def spgemm(a, b, threads=None):
    """Sparse @ sparse of two device compressed tensors (csr/csc, bsr/bsc): expand, sort, compress
    (:mod:`._spgemm`); the result's layout and pattern are the CPU's."""
    return _spgemm.spgemm(a, b)


def nonempty_rows(crow, threads=None):
    """The rows of csr index ``crow`` holding entries (hspmm, smm, sspaddmm; not a name of KERNELS: the
    CPU's op body finds them with NumPy): ``(rows, their compressed index, marks)``."""
    return _blas.nonempty_rows(crow)


def full_rows_coo(marks, vals, shape: tuple, index_dtype, threads=None):
    """smm's coo result: every element of the rows ``marks`` flags (see :func:`nonempty_rows`), values
    ``vals`` ``(R, N)`` (not a name of KERNELS)."""
    return _blas.full_rows_coo(marks, vals, shape, index_dtype)


def scale_add(prod, inp, alpha, beta, scale: bool, add: bool, threads=None):
    """addmm's update of a 2-d device product in place: ``alpha * prod`` (when ``scale``) plus
    ``beta * inp`` (when ``add``; a device array broadcasting to it), in the product's dtype."""
    return _addmm.scale_add(prod, inp, alpha, beta, scale, add)


def merge(a, b, dtype, op: str, alpha=1, threads=None):
    """``a + alpha * b`` (``op="add"``: the union of the patterns), ``a * b`` (``"mul"``: the
    intersection) or ``maximum``/``minimum`` (the union, a missing entry counting as 0) of two
    device tensors of one layout, in ``dtype`` (operands of another dtype are converted first)."""
    if op not in ("add", "mul", "maximum", "minimum"):
        raise _no_kernel(op, a)
    if dtype == np.bool_ and op in ("add", "mul"):  # NumPy's or / and: computed in int64, tested against 0
        r = merge(a, b, np.dtype(np.int64), op, alpha, threads)
        return r._replace_values(r.values().astype(np.bool_))
    a, b = _in_dtype(a, dtype), _in_dtype(b, dtype)
    if a.index_dtype != b.index_dtype:  # int32 with int64: the CPU's int64 result
        a, b = (x.to(index_dtype=np.int64) for x in (a, b))
    if op in ("maximum", "minimum"):
        return _binary.extremum(a, b, op)
    return _binary.add(a, b, alpha=alpha) if op == "add" else _binary.mul(a, b)


def _in_dtype(t, dtype):
    """Operand ``t`` of a merge with its values in ``dtype``: repeated entries are combined in
    ``t``'s own dtype first (bool's or, an integer's wrap), as the CPU's merge does."""
    if t.dtype == dtype:
        return t
    t = coalesce(t)
    return t._replace_values(t.values().astype(dtype))


def reduce_sum(t, threads=None):
    """The sum of every value of ``t``: a 0-d DeviceArray of its dtype (float16 summed in float32,
    integers as the op converted them, int64)."""
    return _reduce.reduce_dims(t, tuple(range(t.ndim)), "sum").reshape(())


def reduce_sum_dims(t, dims: tuple, threads=None):
    """The sum over ``dims`` (normalised; they stay with size 1): every dim, or one sparse dim of a
    compressed tensor; other dims raise NotImplementedError naming them."""
    return _reduce.reduce_dims(t, dims, "sum")


_REDUCTIONS = {np.add: "sum", np.maximum: "max", np.minimum: "min"}


def reduce_dims(t, dims: tuple, op, threads=None):
    """``t`` reduced by ``op`` (np.add, np.maximum, np.minimum) over ``dims`` (sorted, distinct), which
    stay with size 1 (see :func:`._reduce.reduce_dims` for what has a GPU kernel)."""
    return _reduce.reduce_dims(t, dims, _REDUCTIONS[op])


def unary(t, name: str, fn, threads=None, arg=None):
    """The values of ``t`` mapped by the pointwise op ``name``: a GPU kernel of
    :data:`._pointwise.UNARY_OPS`, ``real``/``imag`` of complex values, or ``mul``/``div``/``pow``
    by the scalar ``arg``, in NumPy's result dtype: ``fn``, the NumPy function, is evaluated on one
    host zero for it (:func:`._pointwise.numpy_result`), and values of another real dtype are cast
    to it on the device first, as NumPy's loops cast them (``sqrt`` of int8 in float16, ``t * 2.5``
    of int32 in float64, ``t * np.float64(2)`` of float32 in float64)."""
    if name in _pointwise.PREDICATES:  # bools of the values as they are
        return _pointwise.predicate(t, name).values()
    if name in _pointwise.COMPARISONS:  # bools of the values against the scalar arg, in NumPy's loop dtype
        return _pointwise.compare(t, arg, name).values()
    if name == "nan_to_num":
        return _pointwise.nan_to_num(t, *arg).values()
    if name not in ("real", "imag"):
        rt = _pointwise.numpy_result(name, t.dtype, fn, arg)
        if rt != t.dtype and (rt.kind == "c" or t.dtype.kind != "c"):  # not abs of complex values
            t = t._replace_values(t.values().astype(rt))
    if name in ("mul", "div", "pow"):
        return _pointwise.scalar_op(t, arg, name).values()
    if name in ("real", "imag") and arg is None:
        return _pointwise.complex_part(t, name).values()
    if name == "round" and arg:
        return _pointwise.round_decimals(t, int(arg)).values()
    if arg is not None and arg != 0:
        raise NotImplementedError(f"{name} with arguments ({arg!r}) of a {t.layout.name} tensor on {t.device} has no "
                                  "GPU kernel; run it on the host with t.cpu()")
    return _pointwise.unary(t, name).values()


def diagonal(coo, offset: int, d1: int, d2: int, k: int, threads=None):
    """The diagonal of device COO ``coo`` (indices valid) over its sparse dims ``d1``, ``d2``: a
    dense device array (other sparse dims, dense dims, ``k``), duplicates summed."""
    return _dense.diagonal(coo, offset, d1, d2, k)


def sum_axis(x, axis: int, dtype, threads=None):
    """Dense device array ``x`` summed over ``axis`` (dropped), in NumPy's result dtype of
    ``np.sum(x, dtype=dtype)``."""
    return _reduce_dims.sum_axis(x, axis, dtype)


def flatten_coo(idx, batch: tuple, M: int, K: int, batched_cols: bool, threads=None):
    """The block-diagonal matrix of batched device COO indices ``idx`` (batch dims, row, column;
    in bounds): int64 ``(2, nnz)`` rows ``b * M + i``, columns ``b * K + k`` (``batched_cols``) or
    ``k`` (the row-major keys of coalesce's ``coo_keys``)."""
    return _coalesce.flat_keys(idx, batch, M, K, batched_cols)


def reshape_coo(idx, old_shape: tuple, new_shape: tuple, order: str, index_dtype, threads=None):
    """Device COO indices ``idx`` (in bounds) over ``old_shape`` re-expressed over ``new_shape`` in C
    or F ``order``: ``(len(new_shape), nnz)`` of ``index_dtype``, each entry's offset kept."""
    return _coalesce.reshape_keys(idx, old_shape, new_shape, order, index_dtype)


def ilu0(t, threads=None):
    """``(L, U)`` of ILU(0) of a square device csr tensor of a field dtype (level-scheduled, :mod:`._factor`)."""
    return _factor.ilu0(t)


def ic0(t, threads=None):
    """``L`` of IC(0) of a square device csr tensor of a field dtype (level-scheduled, :mod:`._factor`)."""
    return _factor.ic0(t)


def trsv(t, x, lower: bool, unit_diagonal: bool, threads=None):
    """``x`` ((n, k) device array of ``t``'s dtype) overwritten with ``T^-1 x``, ``T`` the lower (upper) triangle
    of square device csr ``t`` (level-scheduled, :mod:`._factor`)."""
    return _factor.trsv(t, x, lower, unit_diagonal)


def sddmm(input, mat1, mat2, batch: tuple, beta, alpha, threads=None):
    """``beta * input + alpha * (mat1 @ mat2)`` at the pattern of device csr ``input`` (shapes and
    dtypes resolved by the op; ``mat1``/``mat2`` dense device arrays, 2-d or of ``input``'s batch;
    ``input``'s batch broadcast to ``batch`` by copying its batches)."""
    have = input.shape[:input.batch_dim]
    if batch != have:  # the input's batches each output batch reads, copied (a broadcast made real)
        pick = np.broadcast_to(np.arange(int(np.prod(have))).reshape(have), batch).ravel()
        input = _blas._batches(_coalesce.checked(input), pick, tuple(batch))
    return _blas.sampled_addmm(input, mat1, mat2, beta=beta, alpha=alpha)


def gather_slices(parts, rows, what: str, threads=None):
    """Compressed slices ``rows`` of every batch (index_select / narrow along the compressed dim)."""
    return _select.gather_slices(parts, rows, what)


def remap_plain(parts, index, nondecreasing: bool, what: str, threads=None):
    """Every slice's entries mapped through ``index`` (index_select along the plain dim)."""
    return _select.remap_plain(parts, index, nondecreasing, what)


def narrow_plain(parts, start: int, length: int, threads=None):
    """The plain indices in ``[start, start + length)`` of every slice (narrow along the plain dim)."""
    return _select.narrow_plain(parts, start, length)


def cat_plain(parts: list, sizes: list, limits: dict, threads=None):
    """Compressed tensors side by side along the plain dim (cat)."""
    return _select.cat_plain(parts, sizes, limits)


def cat_compressed(parts: list, limits: dict, threads=None):
    """Compressed tensors one after the other along the compressed dim (cat)."""
    return _select.cat_compressed(parts, limits)


def index_select_coo(indices, raw, d: int, idx, shape: tuple, threads=None):
    """The entries of device COO ``indices`` whose coordinate along sparse dim ``d`` is in host
    ``idx`` (repeats give copies), that coordinate replaced by its position: ``(indices, raw rows)``."""
    return _select.index_select_coo(indices, raw, d, idx, shape)


def triangle_flags(indices, r: int, c: int, k: int, upper: bool, scale=(1, 1), threads=None):
    """Flags of the device COO entries on the kept side of diagonal ``k`` (tril, triu; ``scale``: a
    block's size, for block coordinates)."""
    return _select.triangle_flags(indices, r, c, k, upper, scale)


def nonzero_rows(values, threads=None):
    """Flags of the rows of device ``values`` holding a nonzero item (eliminate_zeros)."""
    return _select.nonzero_rows(values)


def narrow_coo(indices, values, d: int, start: int, length: int, threads=None):
    """``(indices, values)`` of the device COO entries in ``[start, start + length)`` along ``d``, shifted."""
    return _select.narrow_coo(indices, values, d, start, length)


def keep_coo(indices, values, flags, threads=None):
    """``(indices, values)`` of the device COO entries whose flags are set, in order."""
    return _select.keep_coo(indices, values, flags)


def keep_compressed(c, p, v, flags, batch: tuple, what: str, threads=None):
    """The members of the device compressed entries whose flags are set (eliminate_zeros)."""
    return _select.keep_compressed(c, p, v, flags, batch, what)


def kron_coo(ia, va, ib, vb, bshape: tuple, index_dtype, both_sorted: bool = False, threads=None):
    """The COO entries of the Kronecker product of two sets of device entries (kron)."""
    return _select.kron_coo(ia, va, ib, vb, bshape, index_dtype, both_sorted)


def compressed_sum(t, x, threads=None):
    """The sums per compressed slot (ops.reduce, one sparse dim): no GPU kernel behind this name yet."""
    raise _no_kernel("compressed_sum", t)


def plain_sum(t, x, threads=None):
    """The sums per plain index (ops.reduce, one sparse dim): no GPU kernel behind this name yet."""
    raise _no_kernel("plain_sum", t)


def _no_values_kernel(op: str) -> NotImplementedError:
    return NotImplementedError(f"{op} on cuda has no GPU kernel; run it on the host with t.cpu()")


def segment_reduce(x, offsets, E: int, op: str, identity, perm=None, threads=None):
    """``op`` over segments of rows (max/min and the sums over several dims of ops.reduce): no GPU kernel."""
    raise _no_values_kernel(f"segment {op}")


def scatter_reduce(keys, x, M: int, op: str, identity, threads=None):
    """``out[keys[i]] op= x[i]`` (ops.reduce over plain dims): no GPU kernel."""
    raise _no_values_kernel(f"scatter {op}")


def group_by(t, kept: list, rest: list, threads=None):
    """Device COO ``t``'s entries grouped by their indices along the sparse dims ``kept``:
    ``(perm, starts, group indices)`` (see :func:`._reduce_dims.group_by`)."""
    return _reduce_dims.group_by(t, kept, rest)


def segment_softmax(x, offsets, E: int, perm, log: bool, threads=None):
    """Softmax of device ``x`` (``(n, K * E)``) over the segments of rows ``offsets`` bounds, per lane
    (softmax, log_softmax along the plain dim of a compressed tensor; ``perm`` has no GPU kernel)."""
    return _reduce.segment_softmax(x, offsets, E, perm, log)


def map_values(x, name: str, fn, arg=None, threads=None):
    """Dense device array ``x`` mapped elementwise by the pointwise op ``name``: a GPU kernel of
    :data:`._pointwise.UNARY_OPS`, or ``mul``/``div``/``pow`` by the scalar ``arg``."""
    return _pointwise.map_array(x, name, arg)


def batch_offsets(c, nnz: int, threads=None):
    """Compressed indices ``(B, n + 1)`` as int64 offsets ``(B * n + 1,)`` into the B batches'
    concatenated entries."""
    return _reduce.batch_offsets(c, nnz)


def sample_dense(t, dense, threads=None):
    """Dense device array ``dense`` (broadcasting to ``t.shape``) at the entries of device tensor
    ``t`` (compressed: valid; coo: indices checked), shaped like ``t.values()`` in ``dense``'s dtype."""
    return _sample.sample_dense(t, dense)


def add_to_dense(t, values, out, threads=None):
    """``out`` (a device array of ``t.shape``) plus the canonical device tensor ``t`` with values
    ``values`` (shaped like ``t.values()``, in ``out``'s dtype), in place; returns ``out``."""
    return _sample.add_to_dense(t, values, out)


def lookup(coo, mask, threads=None):
    """The values of coalesced device COO ``coo`` at the elements of ``mask``'s entries (sparse_mask
    of a sparse tensor on the device; not a name of KERNELS: the CPU's op body looks them up itself)."""
    return _sample.lookup(coo, mask)


def elementwise(x, y, op: str, threads=None):
    """``op`` ("mul", "div", "maximum", "minimum") of two device arrays of one shape and dtype."""
    return _sample.elementwise(x, y, op)


def check_bounds(t, threads=None) -> None:
    """Invariants 5.1-5.5 of a device compressed tensor (every index safe to read; rows may be
    unsorted or hold duplicates, so 5.3 bounds a step by nnz, not by the plain size), C4/C5 of a
    COO one (C6 not), on the device; raises InvariantError naming the first broken one."""
    if not t.layout.compressed:
        _validate.check_coo_bounds(t)
    else:
        _validate.check_compressed_bounds(t)


def index_range(a, threads=None) -> tuple:
    """``(least, largest)`` entry of a device integer array as host ints (None, None when empty)."""
    if not a.size:
        return None, None
    hi, lo = _reduce.index_extrema(a.reshape(1, a.size))
    return int(lo[0]), int(hi[0])
