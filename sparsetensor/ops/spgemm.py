"""Sparse @ sparse products (SpGEMM) and sampled dense @ dense products (SDDMM).

Both work on the canonical form of :mod:`sparsetensor.ops.convert` (compressed
``(B, n + 1)``, plain ``(B, nnz)``, values ``(B, nnz, E)``) and call the Cython kernels
of :mod:`sparsetensor._lib._spgemm`, which are row-parallel (OpenMP). Every layout is
reduced to rows-compressed operands (csr/bsr):

- csc @ csc (bsc @ bsc) uses ``(A @ B)^T = B^T @ A^T`` on transpose views (no conversion)
  and returns csc (bsc);
- mixed csr/csc operands convert the csc one (a counting-sort transpose) and return csr;
- coo @ coo converts both to csr and returns a coalesced coo; a coo operand next to a
  compressed one is converted to csr.

Device operands take the same route to the CUDA backend, whose kernel
(:mod:`sparsetensor._backend.cuda._spgemm`: expand, sort, compress) gives the same layouts,
patterns and errors.
"""

from __future__ import annotations

import numbers

import numpy as np

from .._core import _layout as L
from .._backend import backend_for
from .._core._device import device_array, is_device_array
from .._core._dtypes import native
from .._core._tensor import COOTensor, SparseTensor
from ._common import describe as _describe

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
        A non-sparse operand. Different value dtypes are promoted (``np.result_type``; PyTorch
        refuses them, SciPy promotes).
    NotImplementedError
        Dense (hybrid) dims, coo with ``sparse_dim != 2``, ``b`` with more than 2**32 (block)
        columns. (A blocked operand next to an unblocked one is unblocked first: bsr -> csr,
        bsc -> csc.)

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
    if a.dtype != b.dtype:  # promoted, as sparse + sparse, sparse @ dense and SciPy's products are
        dtype = np.result_type(a.dtype, b.dtype)
        a, b = (x if x.dtype == dtype else x.astype(dtype) for x in (a, b))
    if a.dense_dim or b.dense_dim:
        raise NotImplementedError(f"spgemm of tensors with dense (hybrid) dims is not supported: {_describe(a)} "
                                  f"@ {_describe(b)}")
    if isinstance(a, COOTensor) and isinstance(b, COOTensor):
        if a.sparse_dim != 2 or b.sparse_dim != 2:
            raise NotImplementedError(f"spgemm of coo tensors needs sparse_dim == 2 (2-d matrices), got "
                                      f"{_describe(a)} @ {_describe(b)}")
        _check_shapes(a, b, 0)
        return backend_for(a, b).spgemm(a.to_sparse_csr(threads=threads), b.to_sparse_csr(threads=threads),
                                  threads).to_sparse_coo(threads=threads)
    if isinstance(a, COOTensor):
        a = a.to_sparse_csr(threads=threads)
    if isinstance(b, COOTensor):
        b = b.to_sparse_csr(threads=threads)
    if a.layout.blocked != b.layout.blocked:  # the blocked one unblocked (bsr -> csr, bsc -> csc): elements meet
        a, b = (x.to_sparse(L.sparse_csr if x.layout.compressed_rows else L.sparse_csc, threads=threads)
                if x.layout.blocked else x for x in (a, b))
    if a.batch_dim != b.batch_dim:
        raise ValueError(f"spgemm: the operands must have the same batch dims, got {_describe(a)} (batch_dim="
                         f"{a.batch_dim}) and {_describe(b)} (batch_dim={b.batch_dim})")
    _check_shapes(a, b, a.batch_dim)
    return backend_for(a, b).spgemm(a, b, threads)


def _check_shapes(a, b, m: int) -> None:
    if a.shape[:m] != b.shape[:m]:
        raise ValueError(f"spgemm: batch shapes must be equal, got {_describe(a)} and {_describe(b)}")
    if a.shape[m + 1] != b.shape[m]:
        raise ValueError(f"spgemm: shapes cannot be multiplied ({a.shape[m]}x{a.shape[m + 1]} and "
                         f"{b.shape[m]}x{b.shape[m + 1]}): {_describe(a)} @ {_describe(b)}")
    if a.layout.blocked and a.blocksize[1] != b.blocksize[0]:
        raise ValueError(f"spgemm: the block columns of a must equal the block rows of b, got {_describe(a)} "
                         f"@ {_describe(b)}")


# -- SDDMM -----------------------------------------------------------------------------------------
def _dense_operand(x):
    """A dense operand as an array of its device: NumPy, or a device array left where it is."""
    return device_array(x) if is_device_array(x) else native(np.asarray(x))


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
        m1 = _dense_operand(mat1)
        m2 = _dense_operand(mat2)
        if m1.ndim < 2 or m2.ndim < 2:
            raise ValueError(f"sampled_addmm: mat1 and mat2 must be at least 2-d, got shapes {m1.shape} and {m2.shape}")
        return sampled_addmm(input.mT, m2.swapaxes(-1, -2), m1.swapaxes(-1, -2), beta=beta, alpha=alpha,
                             threads=threads).mT
    if input.layout is not L.sparse_csr:
        raise NotImplementedError(f"sampled_addmm supports csr (and csc) input, got {_describe(input)}")
    if input.dense_dim:
        raise NotImplementedError(f"sampled_addmm: expected an input without dense (hybrid) dims, got "
                                  f"{_describe(input)} with dense_dim={input.dense_dim}")
    mat1 = _dense_operand(mat1)
    mat2 = _dense_operand(mat2)
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
    return backend_for(input, mat1, mat2).sddmm(input, mat1, mat2, batch, beta_k, alpha_k, threads)

