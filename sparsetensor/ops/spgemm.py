"""Sparse @ sparse products (SpGEMM) and sampled dense @ dense products (SDDMM).

Both work on the canonical form of :mod:`sparsetensor._convert` (compressed
``(B, n + 1)``, plain ``(B, nnz)``, values ``(B, nnz, E)``) and call the Cython kernels
of :mod:`sparsetensor._lib._spgemm`, which are row-parallel (OpenMP). Every layout is
reduced to rows-compressed operands (csr/bsr):

- csc @ csc (bsc @ bsc) uses ``(A @ B)^T = B^T @ A^T`` on transpose views (no conversion)
  and returns csc (bsc);
- mixed csr/csc operands convert the csc one (a counting-sort transpose) and return csr;
- coo @ coo converts both to csr and returns a coalesced coo; a coo operand next to a
  compressed one is converted to csr.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import _layout as L
from .._config import num_threads
from .._canonical import ensure_valid
from .._dtypes import check_fits
from .._lib import _spgemm as _kernels
from .._tensor import COOTensor, CompressedTensor, SparseTensor
from ._common import describe as _describe, kernel_dtype as _kernel_dtype, kernel_values as _kernel_values

__all__ = ["spgemm", "sampled_addmm"]


# -- SpGEMM ----------------------------------------------------------------------------------------
def spgemm(a, b, *, threads: int | None = None):
    """The product ``a @ b`` of two sparse tensors, as a sparse tensor.

    The result has the structural pattern of the product: an entry wherever some
    ``a[i, k] * b[k, j]`` is formed, also where values cancel to zero (explicit zeros are
    kept, as PyTorch and SciPy do). Compressed results are canonical (sorted, distinct
    plain indices); coo results are coalesced.

    Parameters
    ----------
    a, b : SparseTensor
        ``a`` of shape ``batch + (M, K)``, ``b`` of shape ``batch + (K, N)``, with the
        same value dtype and equal batch shapes (compressed layouts; coo is 2-d), and no
        dense (hybrid) dims. bsr @ bsr needs ``a.blocksize[1] == b.blocksize[0]`` and
        gives blocks of ``(a.blocksize[0], b.blocksize[1])``.
    threads : int, optional
        Threads for the kernels (default: :func:`sparsetensor.num_threads`).

    Returns
    -------
    SparseTensor
        Layout (PyTorch 2.13 where it has the product): csr @ csr, csr @ csc and
        csc @ csr give csr; csc @ csc gives csc (PyTorch: csr); bsr/bsc likewise give
        bsr/bsc (PyTorch refuses blocked products); coo @ coo gives coo; coo next to a
        compressed operand is converted to csr. The index dtype is the operands' (int64
        when they differ); the result never shares memory with the operands.

    Raises
    ------
    ValueError
        Inner sizes or batch shapes that do not match, or batches whose products have
        different numbers of entries (every batch of a compressed tensor has one nnz).
    TypeError
        Different value dtypes (PyTorch refuses them too) or a non-sparse operand.
    NotImplementedError
        Dense (hybrid) dims, a blocked operand next to an unblocked one, coo with
        ``sparse_dim != 2``, ``b`` with more than 2**32 (block) columns.

    Notes
    -----
    Sums are taken in the value dtype (integers wrap); float16 is computed in float32
    and rounded once; bool products are logical and, sums logical or. Every row sums its
    products in the same order (a's entries, then b's), whichever way it takes, so results
    are the same bit for bit for any thread count. A csr row that combines one or two rows
    of ``b`` merges them; one whose columns span a narrow window (stencils, banded rows)
    sums into a dense array over that window (each thread keeps one of up to 65536 values
    and a bit per column) and reads it out in order; other rows of few products are summed
    by sorting them; each thread keeps, for longer rows (and blocks), an index over the
    (block) columns of ``b`` (8 bytes per column) and room for the longest output row.
    Small csr products are computed in one pass into arrays with room for every product
    (pages never written are never used), which are then shrunk; beyond 32 MiB of room a
    counting pass sizes the output first, so that the output's pages are written once.
    Output rows are sorted (PyTorch's and SciPy's CPU products leave them unsorted).

    Examples
    --------
    >>> import sparsetensor as st
    >>> a = st.sparse_csr_tensor([0, 2, 3], [0, 1, 1], [1.0, 1.0, 2.0], size=(2, 2))
    >>> b = st.sparse_csr_tensor([0, 1, 2], [0, 0], [1.0, -1.0], size=(2, 2))
    >>> c = spgemm(a, b)
    >>> c.crow_indices(), c.col_indices(), c.values()
    (array([0, 1, 2]), array([0, 0]), array([ 0., -2.]))
    """
    if not isinstance(a, SparseTensor) or not isinstance(b, SparseTensor):
        raise TypeError(f"spgemm expects two sparse tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.dtype != b.dtype:
        raise TypeError(f"spgemm: the operands must have one value dtype, got {_describe(a)} and {_describe(b)}")
    if a.dense_dim or b.dense_dim:
        raise NotImplementedError(f"spgemm of tensors with dense (hybrid) dims is not supported: {_describe(a)} "
                                  f"@ {_describe(b)}")
    if isinstance(a, COOTensor) and isinstance(b, COOTensor):
        if a.sparse_dim != 2 or b.sparse_dim != 2:
            raise NotImplementedError(f"spgemm of coo tensors needs sparse_dim == 2 (2-d matrices), got "
                                      f"{_describe(a)} @ {_describe(b)}")
        _check_shapes(a, b, 0)
        return _spgemm_compressed(a.to_sparse_csr(threads=threads), b.to_sparse_csr(threads=threads),
                                  threads).to_sparse_coo(threads=threads)
    if isinstance(a, COOTensor):
        a = a.to_sparse_csr(threads=threads)
    if isinstance(b, COOTensor):
        b = b.to_sparse_csr(threads=threads)
    if a.layout.blocked != b.layout.blocked:
        raise NotImplementedError(f"spgemm of a blocked and an unblocked operand is not supported: {_describe(a)} "
                                  f"@ {_describe(b)}; convert one with to_sparse_bsr/to_sparse_csr")
    if a.batch_dim != b.batch_dim:
        raise ValueError(f"spgemm: the operands must have the same batch dims, got {_describe(a)} (batch_dim="
                         f"{a.batch_dim}) and {_describe(b)} (batch_dim={b.batch_dim})")
    _check_shapes(a, b, a.batch_dim)
    return _spgemm_compressed(a, b, threads)


def _check_shapes(a, b, m: int) -> None:
    if a.shape[:m] != b.shape[:m]:
        raise ValueError(f"spgemm: batch shapes must be equal, got {_describe(a)} and {_describe(b)}")
    if a.shape[m + 1] != b.shape[m]:
        raise ValueError(f"spgemm: shapes cannot be multiplied ({a.shape[m]}x{a.shape[m + 1]} and "
                         f"{b.shape[m]}x{b.shape[m + 1]}): {_describe(a)} @ {_describe(b)}")
    if a.layout.blocked and a.blocksize[1] != b.blocksize[0]:
        raise ValueError(f"spgemm: the block columns of a must equal the block rows of b, got {_describe(a)} "
                         f"@ {_describe(b)}")


def _spgemm_compressed(a: CompressedTensor, b: CompressedTensor, threads) -> CompressedTensor:
    rows_a, rows_b = a.layout.compressed_rows, b.layout.compressed_rows
    if not rows_a and not rows_b:
        return _spgemm_rows(b.mT, a.mT, threads).mT  # (A @ B)^T = B^T @ A^T, csr views of csc operands
    if not rows_a:
        a = a.to_sparse(a.layout.transposed, blocksize=a.blocksize if a.layout.blocked else None, threads=threads)
    if not rows_b:
        b = b.to_sparse(b.layout.transposed, blocksize=b.blocksize if b.layout.blocked else None, threads=threads)
    return _spgemm_rows(a, b, threads)


def _spgemm_rows(a: CompressedTensor, b: CompressedTensor, threads) -> CompressedTensor:
    """csr @ csr or bsr @ bsr (shapes, dtypes and blocks checked by the caller)."""
    a, b = ensure_valid(a, repair=True, threads=threads), ensure_valid(b, repair=True, threads=threads)
    idx_dt = a.index_dtype if a.index_dtype == b.index_dtype else np.dtype(np.int64)
    m = a.batch_dim
    batch = a.shape[:m]
    B = math.prod(batch)
    (Rb, Kb), (_, Cb) = a.blocksize, b.blocksize
    n = a.compressed_indices().shape[-1] - 1      # (block) rows of A
    ncols = b.plain_size                          # (block) columns of B
    if ncols > _MAX_COLUMNS:
        raise NotImplementedError(f"spgemm of a right operand with more than 2**32 (block) columns is not supported "
                                  f"(the kernels keep column offsets in 32 bits), got {_describe(b)}")
    shape = batch + (a.shape[m], b.shape[m + 1])
    layout = a.layout
    dtype = a.dtype
    kdt, logical = _kernel_dtype(dtype)
    ac = a.compressed_indices().astype(idx_dt, copy=False).reshape(B, n + 1)
    ap = a.plain_indices().astype(idx_dt, copy=False).reshape(B, a.nnz)
    bc = b.compressed_indices().astype(idx_dt, copy=False).reshape(B, b.compressed_indices().shape[-1])
    bp = b.plain_indices().astype(idx_dt, copy=False).reshape(B, b.nnz)
    nt = num_threads(threads, B * (a.nnz + b.nnz) * 8)
    av = _kernel_values(a.values(), (B, a.nnz, Rb * Kb), kdt)
    bv = _kernel_values(b.values(), (B, b.nnz, Kb * Cb), kdt)
    if not layout.blocked and a.nnz and b.nnz:
        prefix = np.empty(B * n + 1, dtype=np.int64)
        maxub = _kernels.spgemm_flops(ac, ap, bc, prefix, nt)
        room = int(prefix[-1])
        if room * (idx_dt.itemsize + kdt.itemsize) <= _FUSED_BYTES:
            return _spgemm_fused(ac, ap, av, bc, bp, bv, prefix, maxub, room, shape, batch, layout, dtype, kdt,
                                 logical, idx_dt, ncols, threads)
    counts = np.empty((B, n), dtype=np.int64)
    _kernels.spgemm_symbolic(ac, ap, bc, bp, ncols, counts, nt)
    nnz, oc = _output_rows(counts, layout, idx_dt, shape, m)
    op = np.empty((B, nnz), dtype=idx_dt)
    ov = np.empty((B, nnz, Rb * Cb), dtype=kdt)
    _kernels.spgemm_numeric(ac, ap, av, bc, bp, bv, ncols, Rb, Kb, Cb, oc, op, ov, logical,
                            num_threads(threads, B * nnz * 4))
    values = ov.view(np.bool_) if logical else ov.astype(dtype, copy=False)
    values = values.reshape(batch + (nnz,) + ((Rb, Cb) if layout.blocked else ()))
    return CompressedTensor(oc.reshape(batch + (n + 1,)), op.reshape(batch + (nnz,)), values, shape, layout,
                            canonical=True)


# The kernels sort and index columns by their offset in a row's span in 32 bits.
_MAX_COLUMNS = 1 << 32

# The fused csr pass allocates room for every product (a bound on the entries), and its parts
# after the first write into buffers of their own that are copied into the output at the end.
# Beyond this many bytes of room (where the C library maps fresh, unwritten pages for every
# call) it runs the symbolic pass first, which is cheap for the rows of a narrow span (a
# bitmap count), and allocates the exact output: its pages are written once, in place.
_FUSED_BYTES = 32 << 20


def _output_rows(counts: np.ndarray, layout, idx_dt, shape, m: int):
    """nnz per batch and the compressed indices (B, n + 1) of a product with ``counts`` (B, n)
    entries per row; every batch of a compressed tensor has one nnz."""
    B, n = counts.shape
    per_batch = counts.sum(axis=1)
    if B and np.any(per_batch != per_batch[0]):
        raise ValueError(f"spgemm of batched {layout.name} tensors: the batches of the product have different "
                         f"numbers of entries {per_batch.tolist()[:16]}; every batch of a {layout.name} tensor "
                         "must have the same nnz")
    nnz = int(per_batch[0]) if B else 0
    check_fits(idx_dt, layout.name, nnz=nnz, nrows=shape[m], ncols=shape[m + 1])
    oc = np.empty((B, n + 1), dtype=idx_dt)
    oc[:, 0] = 0
    np.cumsum(counts, axis=1, out=oc[:, 1:])
    return nnz, oc


def _shrink(x: np.ndarray, n: int) -> np.ndarray:
    """The first n entries of a 1-d array that nothing else references (in place where NumPy can)."""
    if x.shape[0] == n:
        return x
    try:
        x.resize((n,), refcheck=False)  # realloc: shrinks without a copy
        return x
    except ValueError:
        return x[:n].copy()


def _spgemm_fused(ac, ap, av, bc, bp, bv, prefix, maxub, room, shape, batch, layout, dtype, kdt, logical, idx_dt,
                  ncols, threads) -> CompressedTensor:
    """csr @ csr in one pass (spgemm_fused) into arrays with room for every product."""
    B, n = ac.shape[0], ac.shape[1] - 1
    m = len(batch)
    counts = np.empty(B * n, dtype=np.int64)
    op = np.empty(room, dtype=idx_dt)
    ov = np.empty(room, dtype=kdt)
    total = _kernels.spgemm_fused(ac, ap, av.reshape(B, -1), bc, bp, bv.reshape(B, -1), ncols, prefix, maxub, counts,
                                  op, ov, logical, num_threads(threads, room * 4))
    nnz, oc = _output_rows(counts.reshape(B, n), layout, idx_dt, shape, m)
    op, ov = _shrink(op, total), _shrink(ov, total)
    values = ov.view(np.bool_) if logical else ov.astype(dtype, copy=False)
    return CompressedTensor(oc.reshape(batch + (n + 1,)), op.reshape(batch + (nnz,)),
                            values.reshape(batch + (nnz,)), shape, layout, canonical=True)


# -- SDDMM -----------------------------------------------------------------------------------------
def _check_scalar(name: str, value, dtype: np.dtype):
    """``value`` (alpha/beta) as a Python number of the kind ``dtype`` computes in (PyTorch's rules)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if not isinstance(value, (numbers.Number, np.generic)) or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if isinstance(value, (complex, np.complexfloating)) and dtype.kind != "c":
        raise TypeError(f"for non-complex input tensors, argument {name} must not be a complex number, got {value!r}")
    if dtype.kind in "iu" and not isinstance(value, (numbers.Integral, np.integer, bool, np.bool_)):
        raise TypeError(f"for integral input tensors, argument {name} must not be a floating point number, "
                        f"got {value!r}")
    if dtype.kind == "c":
        return complex(value)
    if dtype.kind == "f":
        return float(value)
    return int(np.array(value).astype(np.int64).astype(dtype))  # wraps like the values


def sampled_addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0, threads: int | None = None):
    """``beta * input + alpha * (mat1 @ mat2)`` sampled at the pattern of ``input`` (SDDMM).

    Follows ``torch.sparse.sampled_addmm``: only the entries of ``input`` are computed,
    each as a dot product of a row of ``mat1`` and a column of ``mat2``; the result has
    the pattern (and shares the index arrays) of ``input``.

    Parameters
    ----------
    input : CompressedTensor
        csr (PyTorch's requirement) or csc (handled through the transpose), shape
        ``batch + (M, N)``, no dense dims.
    mat1, mat2 : array_like
        Dense ``batch1 + (M, K)`` and ``batch2 + (K, N)``, of the value dtype of ``input``
        (as in PyTorch, dtypes are not promoted).
    beta, alpha : number
        Integers for integer dtypes; complex only for complex dtypes. As in PyTorch,
        ``beta * input`` is computed also when ``beta == 0`` (NaN stays NaN).
    threads : int, optional
        Threads for the kernel.

    Returns
    -------
    CompressedTensor
        The layout of ``input``. Batch dims broadcast (NumPy rules) over ``input``,
        ``mat1`` and ``mat2``; PyTorch allows a 2-d ``input`` with batched matrices and
        equal batch shapes, which are special cases.

    Notes
    -----
    Dtypes: float32/64 and complex64/128, also integers (wrapping) and float16 (computed
    in float32, rounded once), which PyTorch refuses; bool is refused. The dot products
    over K are vectorised for float32/64.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> inp = st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 1.0], size=(2, 2))
    >>> m1 = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> out = sampled_addmm(inp, m1, np.eye(2), beta=0.5)
    >>> out.values()
    array([2.5, 3.5])
    """
    if not isinstance(input, SparseTensor):
        raise TypeError(f"sampled_addmm expects a sparse csr input, got {type(input).__name__}")
    if input.layout is L.sparse_csc:
        m1 = np.asarray(mat1)
        m2 = np.asarray(mat2)
        if m1.ndim < 2 or m2.ndim < 2:
            raise ValueError(f"sampled_addmm: mat1 and mat2 must be at least 2-d, got shapes {m1.shape} and {m2.shape}")
        return sampled_addmm(input.mT, m2.swapaxes(-1, -2), m1.swapaxes(-1, -2), beta=beta, alpha=alpha,
                             threads=threads).mT
    if input.layout is not L.sparse_csr:
        raise NotImplementedError(f"sampled_addmm supports csr (and csc) input, got {_describe(input)}")
    if input.dense_dim:
        raise NotImplementedError(f"sampled_addmm: expected an input without dense (hybrid) dims, got "
                                  f"{_describe(input)} with dense_dim={input.dense_dim}")
    mat1 = np.asarray(mat1)
    mat2 = np.asarray(mat2)
    if mat1.ndim < 2 or mat2.ndim < 2:
        raise ValueError(f"sampled_addmm: mat1 and mat2 must be at least 2-d, got shapes {mat1.shape} and {mat2.shape}")
    dtype = input.dtype
    if mat1.dtype != dtype or mat2.dtype != dtype:
        raise TypeError(f"sampled_addmm: mat1 and mat2 must have the dtype of input ({dtype}), got {mat1.dtype} "
                        f"and {mat2.dtype}")
    if dtype == np.bool_:
        raise TypeError("sampled_addmm does not support bool tensors")
    m = input.batch_dim
    M, N = input.shape[m:m + 2]
    K = mat1.shape[-1]
    if mat2.shape[-2] != K:
        raise ValueError(f"sampled_addmm: mat1 and mat2 shapes cannot be multiplied ({mat1.shape[-2]}x{K} and "
                         f"{mat2.shape[-2]}x{mat2.shape[-1]})")
    if (mat1.shape[-2], mat2.shape[-1]) != (M, N):
        raise ValueError(f"sampled_addmm: mat1 @ mat2 has shape ({mat1.shape[-2]}, {mat2.shape[-1]}) but the input "
                         f"is {_describe(input)}")
    in_batch, b1, b2 = input.shape[:m], mat1.shape[:-2], mat2.shape[:-2]
    try:
        batch = np.broadcast_shapes(in_batch, b1, b2)
    except ValueError:
        raise ValueError(f"sampled_addmm: batch shapes do not broadcast: input {in_batch}, mat1 {b1}, "
                         f"mat2 {b2}") from None
    beta_k = _check_scalar("beta", beta, dtype)
    alpha_k = _check_scalar("alpha", alpha, dtype)
    kdt, _ = _kernel_dtype(dtype)
    inp = ensure_valid(input, repair=True, threads=threads)
    B, B1, B2 = math.prod(batch), math.prod(b1), math.prod(b2)
    c, p, v = inp.compressed_indices(), inp.plain_indices(), inp.values()
    nnz = inp.nnz
    if in_batch != batch:  # the pattern repeats over the broadcast batch
        c = np.broadcast_to(c, batch + c.shape[-1:]).copy()
        p = np.broadcast_to(p, batch + (nnz,)).copy()
        v = np.broadcast_to(v, batch + (nnz,))
    v2 = np.ascontiguousarray(v, dtype=kdt).reshape(B, nnz)
    m1 = np.ascontiguousarray(mat1, dtype=kdt).reshape(B1, M, K)
    m2t = np.ascontiguousarray(mat2.swapaxes(-1, -2), dtype=kdt).reshape(B2, N, K)
    map1 = np.broadcast_to(np.arange(B1, dtype=np.int64).reshape(b1), batch).ravel()
    map2 = np.broadcast_to(np.arange(B2, dtype=np.int64).reshape(b2), batch).ravel()
    out = np.empty((B, nnz), dtype=kdt)
    _kernels.sampled_addmm(c.reshape(B, M + 1), p.reshape(B, nnz), v2, m1, m2t, map1, map2, beta_k, alpha_k, out,
                           num_threads(threads, B * nnz * max(K, 1)))
    values = out.astype(dtype, copy=False).reshape(batch + (nnz,))
    return CompressedTensor(c, p, values, batch + (M, N), L.sparse_csr, canonical=True)

