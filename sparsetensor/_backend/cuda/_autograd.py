"""Gradients on the device: what the derivative rules of :mod:`sparsetensor.autograd` need of a
CUDA tensor beyond the ops (kernels in ``kernels/autograd.cu``).

- :func:`dense_at`: a dense device cotangent read at every stored item of a tensor (to_dense,
  sum and mean: broadcast dims read at 0);
- :func:`sparse_at`: a sparse device cotangent read at another tensor's pattern (zero where it
  specifies nothing): the cotangent of an operand of add, mul, coalesce, a conversion;
- :func:`sampled`: ``sum_n A[row, n] * B[col, n]`` (optionally conjugated) at the stored items
  of a sparse tensor of any layout: the masked gradient of a sparse factor of a product (SDDMM
  with the operands read through strides: no transposed copies);
- :func:`unary_grad`, :func:`softmax_grad`: the pullbacks of the pointwise ops and of softmax;
- :func:`add`, :func:`sum_leading`, :func:`conj`, :func:`real`: arithmetic on dense cotangents.

Every result is a new DeviceArray on the operands' device; nothing is copied to the host (the
few numbers uploaded are offsets computed from shapes).
"""

from __future__ import annotations

import math

import numpy as np

from ..._core._shape_checks import element_strides
from ..._core._tensor import COOTensor
from ...cuda import _primitives as P
from ...cuda._array import DeviceArray
from ._coalesce import checked
from ._pointwise import UNARY_OPS
from ._select import same_arrays

__all__ = ["dense_at", "sparse_at", "elements_at", "sampled_sparse", "sampled_sparse_dense", "sampled", "unary_grad", "softmax_grad", "add", "sum_leading", "conj", "real", "same_arrays"]

# pointwise op -> (derivative kind of autograd.cu's unary_grad, its constant)
_FLAT = (0, 0.0)  # D_CONST 0: piecewise constant functions
DERIVATIVES = {
    "neg": (0, -1.0), "negative": (0, -1.0), "frac": (0, 1.0), "conj": (0, 1.0),
    "deg2rad": (0, math.pi / 180), "rad2deg": (0, 180 / math.pi),
    "sign": _FLAT, "sgn": _FLAT, "floor": _FLAT, "ceil": _FLAT, "trunc": _FLAT, "round": _FLAT, "rint": _FLAT, "fix": _FLAT,
    "abs": (1, 0.0), "absolute": (1, 0.0), "sqrt": (2, 0.0), "square": (3, 0.0), "sin": (4, 0.0), "tan": (5, 0.0),
    "tanh": (6, 0.0), "asin": (7, 0.0), "arcsin": (7, 0.0), "atan": (8, 0.0), "arctan": (8, 0.0), "sinh": (9, 0.0),
    "asinh": (10, 0.0), "arcsinh": (10, 0.0), "atanh": (11, 0.0), "arctanh": (11, 0.0), "expm1": (12, 0.0),
    "log1p": (13, 0.0), "relu": (14, 0.0), "erf": (16, 0.0), "erfinv": (17, 0.0), "nan_to_num": (18, 0.0),
}
_D_POW = 15
# the C_* ops of unary_grad_complex
_COMPLEX = {"neg": 0, "negative": 0, "square": 1, "conj": 2, "sqrt": 3, "sin": 4, "sinh": 5, "tan": 6, "tanh": 7,
            "asin": 8, "arcsin": 8, "asinh": 9, "arcsinh": 9, "atan": 10, "arctan": 10, "atanh": 11, "arctanh": 11,
            "expm1": 12, "log1p": 13, "round": 14, "rint": 14, "pow": 15, "nan_to_num": 16, "erf": 17}


def _dev(x):
    return x._device if isinstance(x, DeviceArray) else x.values()._device




def _offsets(t, shape: tuple, strides: list) -> DeviceArray:
    """int64 offsets, one per value item of device tensor ``t``, into a dense array of ``shape``
    with element ``strides`` (0 on a dim to broadcast): ``t``'s batch and sparse dims, then its dense ones."""
    dev = _dev(t)
    nd = t.dense_dim
    dense_shape, dense_strides = t.shape[t.ndim - nd:], strides[len(shape) - nd:]  # t's sizes (strides 0: broadcast)
    doff = np.zeros(1, np.int64)
    for n, s in zip(dense_shape, dense_strides):
        doff = (doff[:, None] + np.arange(n, dtype=np.int64) * s).reshape(-1)
    D = doff.size
    ik = (P.index_key(t.index_dtype),)
    n_items = math.prod(t.values().shape)
    out = P.empty(dev, (n_items,), np.int64)
    if not n_items:
        return out
    if isinstance(t, COOTensor):
        S = t.sparse_dim
        P.run(dev, "autograd.cu", "coo_offsets", ik, n_items, t.indices(), S, t.nnz, D,
              P.ints(dev, strides[:S]), P.from_host(dev, doff), out)
        return out
    m = t.batch_dim
    batch = t.shape[:m]
    B = math.prod(batch)
    grid = np.indices(batch, dtype=np.int64).reshape(m, -1) if m else np.zeros((0, 1), np.int64)
    boff = (grid * np.asarray(strides[:m], np.int64)[:, None]).sum(axis=0).astype(np.int64)
    rb, cb = t.blocksize
    c = t.compressed_indices()
    P.run(dev, "autograd.cu", "element_offsets", ik, n_items, c, t.plain_indices(), B, t.nnz, c.shape[-1] - 1,
          rb, cb, D, int(t.layout.compressed_rows), P.from_host(dev, boff), strides[m], strides[m + 1],
          P.from_host(dev, doff), out)
    return out


def dense_at(t, G: DeviceArray) -> DeviceArray:
    """Dense device array ``G`` (``t``'s shape, or 1 on dims to broadcast) read at every stored item
    of device tensor ``t``: an array of ``t.values()``'s shape and ``G``'s dtype."""
    if G.ndim != t.ndim or any(g not in (1, s) for g, s in zip(G.shape, t.shape)):
        raise ValueError(f"a cotangent of shape {G.shape} cannot be read at a tensor of shape {t.shape}")
    strides = [0 if g == 1 and s != 1 else st for g, s, st in zip(G.shape, t.shape, element_strides(G.shape))]
    off = _offsets(t, G.shape, strides)
    vals = P.gather_rows(_dev(t), G.reshape(-1, 1), off, off.size) if G.size else P.zeros(_dev(t), (off.size, 1),
                                                                                            G.dtype)
    return vals.reshape(t.values().shape)


def grid(t) -> tuple:
    """The coordinates the keys of ``t``'s stored elements are made of: the sparse dims of a coo
    tensor; the batch dims and the block rows and columns of a compressed one."""
    if isinstance(t, COOTensor):
        return t.shape[:t.sparse_dim]
    m = t.batch_dim
    rb, cb = t.blocksize
    return t.shape[:m] + (t.shape[m] // max(rb, 1), t.shape[m + 1] // max(cb, 1))


def _keys(t, mapping=None) -> DeviceArray:
    """uint64 keys of ``t``'s stored elements in storage order: the row-major offset in :func:`grid`,
    or with ``mapping`` ``(shift, lo, hi, mult)`` (int sequences, one per grid dim) the offset in a
    cotangent's grid (see autograd.cu's compressed_keys; out of [lo, hi): a key found nowhere)."""
    dev = _dev(t)
    g = grid(t)
    if mapping is None:
        mapping = ((0,) * len(g), (0,) * len(g), g, element_strides(g))
    shift, lo, hi, mult = (P.from_host(dev, np.asarray(x, np.int64).reshape(-1)) for x in mapping)
    ik = (P.index_key(t.index_dtype),)
    if isinstance(t, COOTensor):
        keys = P.empty(dev, (t.nnz,), np.uint64)
        P.run(dev, "autograd.cu", "coo_keys_mapped", ik, t.nnz, t.indices(), t.sparse_dim, t.nnz, shift, lo, hi, mult,
              keys)
        return keys
    m = t.batch_dim
    B = math.prod(t.shape[:m])
    c = t.compressed_indices()
    keys = P.empty(dev, (B * t.nnz,), np.uint64)
    P.run(dev, "autograd.cu", "compressed_keys", ik, B * t.nnz, c, t.plain_indices(), B, t.nnz, c.shape[-1] - 1,
          int(t.layout.compressed_rows), m, P.ints(dev, g[:m] or (1,)), shift, lo, hi,
          mult, keys)
    return keys


def _items(t) -> int:
    """Value items per stored element (a block and the dense dims)."""
    lead = t.batch_dim + 1 if not isinstance(t, COOTensor) else 1
    return math.prod(t.values().shape[lead:])


def _lookup(G, want: DeviceArray, out_shape: tuple, W: int) -> DeviceArray:
    """The items of the stored elements of device cotangent ``G`` (coalesced, checked) whose keys
    (:func:`_keys`) are ``want``, ``W`` items each, zero where ``G`` has no such key."""
    dev = _dev(G)
    span = math.prod(grid(G))
    if span > 1 << 63:
        raise NotImplementedError(f"a cotangent of shape {G.shape} is too large for 64-bit keys")
    sorted_keys, perm = P.radix_sort(dev, _keys(G), max(span - 1, 0).bit_length())
    src = G.values().reshape(-1)
    out = P.empty(dev, out_shape, src.dtype)
    P.run(dev, "autograd.cu", "key_lookup", (P.raw_key(src.itemsize),), want.size * W, sorted_keys, perm,
          sorted_keys.size, want, want.size, src, W, out)
    return out


def sparse_at(G, t, mapping=None) -> DeviceArray:
    """Sparse device cotangent ``G`` read at every stored element of ``t``, zero where ``G``
    specifies nothing; duplicates of an uncoalesced ``G`` are summed first (as on the CPU).
    ``G`` has ``t``'s shape, blocksize and dense dims (any layout of the device's conversions), or,
    with ``mapping`` (see :func:`_keys`), the shape of an op's output that ``mapping`` takes
    ``t``'s elements to (narrow, select, cat). A blocked ``t`` with a ``G`` of other blocks:
    :func:`elements_at`."""
    if _items(G) != _items(t) or (mapping is None and G.shape != t.shape):
        raise ValueError(f"a {G.layout.name} cotangent of shape {G.shape} cannot be read at a {t.layout.name} tensor "
                         f"of shape {t.shape}")
    if t.layout.blocked and (not G.layout.blocked or G.blocksize != t.blocksize):
        raise NotImplementedError(f"reading a {G.layout.name} cotangent at a {t.layout.name} pattern of blocksize "
                                  f"{t.blocksize} on {t.device}")
    G = G.coalesce() if isinstance(G, COOTensor) else checked(G)
    return _lookup(G, _keys(t, mapping), t.values().shape, _items(t))


def elements_at(G: COOTensor, t) -> DeviceArray:
    """Coo device cotangent ``G`` of ``t``'s shape, whose sparse dims are ``t``'s batch and sparse
    dims, read at every stored element of ``t``, item by item inside the blocks of a blocked
    ``t`` (the keys are the elements' offsets in the grid of those dims); zero where ``G`` has
    nothing. No layout conversion of ``G``: its batches need not share an nnz."""
    Pd = t.ndim - t.dense_dim
    if not isinstance(G, COOTensor) or G.sparse_dim != Pd or G.shape != t.shape:
        raise ValueError(f"a {G.layout.name} cotangent of shape {G.shape} cannot be read at the elements of a "
                         f"{t.layout.name} tensor of shape {t.shape}")
    D = math.prod(t.shape[Pd:])
    off = _offsets(t, t.shape, element_strides(t.shape[:Pd]) + [0] * t.dense_dim)  # one per item: D equal ones an element
    if D != 1 and off.size:
        from ._select import take_axis

        off = take_axis(off.reshape(-1, D), 1, np.zeros(1, np.int64))
    want = off.reshape(-1).view(np.uint64)
    return _lookup(G.coalesce(), want, t.values().shape, D)


def sampled(S, A: DeviceArray, a_strides: tuple, Bm: DeviceArray, b_strides: tuple, K: int, *, conj_a=False,
            conj_b=False, alpha=1.0) -> DeviceArray:
    """``alpha * sum_n opA(A)[row, n] * opB(Bm)[col, n]`` at every stored item ``(batch, row, col)``
    of device tensor ``S`` (any layout, no dense dims), ``K`` terms. ``a_strides``/``b_strides``:
    the operand's element strides (batch, row, n), batch 0 for one matrix shared by every batch.
    An array of ``S.values()``'s shape in ``A``'s dtype (``A`` and ``Bm`` share it)."""
    a = complex(alpha)
    return _sampled_run(S, A, Bm, "sampled_dot", K, A, *a_strides, int(conj_a), Bm, *b_strides, int(conj_b), a.real,
                        a.imag)


def _sampled_run(S, A, Bm, kernel: str, *args) -> DeviceArray:
    """Launch ``kernel`` (sampled_dot, sampled_sparse_dot, sampled_sparse_dense) over every stored item of ``S`` with
    operands of ``A``'s and ``Bm``'s dtype: ``(off, n, M, N, *args, out)``."""
    if S.dense_dim:
        raise NotImplementedError(f"the masked product gradient of a {S.layout.name} tensor with dense dims on "
                                  f"{S.device}")
    if A.dtype != Bm.dtype:
        raise TypeError(f"sampled products on cuda need one dtype, got {A.dtype} and {Bm.dtype}")
    M, N = S.shape[-2], S.shape[-1]
    off = _offsets(S, S.shape, element_strides(S.shape))  # (batch * M + row) * N + col of each item
    dev = _dev(S)
    out = P.empty(dev, S.values().shape, A.dtype)
    P.run(dev, "autograd.cu", kernel, (P.value_key(A.dtype, "a sampled product"),), off.size, off, off.size, M, N,
          *args, out)
    return out


def _csr_members(x):
    """Compressed index, int64 column indices, values and their batch strides of canonical device
    csr ``x`` (one matrix: strides 0)."""
    c, p, v = x.compressed_indices(), x.plain_indices(), x.values()
    batched = x.batch_dim > 0
    return (c.astype(np.int64, copy=False), p.astype(np.int64, copy=False), v,
            c.shape[-1] if batched else 0, x.nnz if batched else 0)


def sampled_sparse(S, Lc, Rc, *, conj_l=False, conj_r=False) -> DeviceArray:
    """``sum_x opL(Lc[row, x]) * opR(Rc[col, x])`` at every stored item ``(batch, row, col)`` of device
    tensor ``S`` (any layout, no dense dims; block items one by one): the masked product of two
    canonical device csr tensors (``Lc`` with ``S``'s rows, ``Rc`` with its columns as rows; their
    batch dims ``S``'s or none), a merge of two sorted rows per item."""
    return _sampled_run(S, Lc, Rc, "sampled_sparse_dot", *_csr_members(Lc), int(conj_l), *_csr_members(Rc),
                        int(conj_r))


def sampled_sparse_dense(S, Sc, D: DeviceArray, d_strides: tuple, *, use_col: bool, conj_s=False) -> DeviceArray:
    """``sum_x opS(Sc[r, x]) * D[other, x]`` at every stored item ``(batch, row, col)`` of device tensor
    ``S`` (any layout, no dense dims; block items one by one), ``r, other = col, row`` when ``use_col``
    else ``row, col``: the masked product of canonical device csr ``Sc`` (batch dims ``S``'s or none)
    and dense ``D`` read through its element strides ``d_strides`` (batch, other, x; batch 0 for one
    matrix), one row of ``Sc`` per item."""
    return _sampled_run(S, Sc.values(), D, "sampled_sparse_dense", *_csr_members(Sc), int(conj_s), int(use_col), D,
                        *d_strides)


def _float_key(x: DeviceArray, what: str) -> str:
    if x.dtype.name not in ("float16", "float32", "float64"):
        raise NotImplementedError(f"the gradient of {what} of {x.dtype} values on {x.device} has no GPU kernel")
    return x.dtype.name


def unary_grad(name: str, x: DeviceArray, y: DeviceArray, g: DeviceArray, exponent=None) -> DeviceArray:
    """``g * conj(f'(x))`` for the pointwise op ``name`` (``y = f(x)``; ``pow``: by ``exponent``)."""
    dev = x._device
    n = x.size
    if x.dtype.kind == "c":
        if name in ("abs", "absolute"):
            real = y.dtype.name
            if g.dtype != y.dtype:
                raise TypeError(f"the cotangent of abs of {x.dtype} values must be {y.dtype}, got {g.dtype}")
            out = P.empty(dev, x.shape, x.dtype)
            P.run(dev, "autograd.cu", "abs_grad_complex", (real,), n, x, y, g, n, out)
            return out
        if name == "sgn":
            g = g if g.dtype == x.dtype else g.astype(x.dtype)
            out = P.empty(dev, x.shape, x.dtype)
            P.run(dev, "autograd.cu", "sgn_grad_complex", (np.dtype(x.dtype.char.lower()).name,), n, x, g, n, out)
            return out
        if name not in _COMPLEX:
            raise NotImplementedError(f"the gradient of {name} of complex values on {x.device} has no GPU kernel")
        if g.dtype != x.dtype:
            g = g.astype(x.dtype)
        out = P.empty(dev, x.shape, x.dtype)
        c = float(exponent) if name == "pow" else 0.0
        P.run(dev, "autograd.cu", "unary_grad_complex", (x.dtype.name,), n, x, y, g, n, _COMPLEX[name], c, out)
        return out
    key = _float_key(x, name)
    if g.dtype != x.dtype:
        if g.dtype.kind == "c":
            raise NotImplementedError(f"a complex cotangent of {name} of {x.dtype} values on {x.device}")
        g = g.astype(x.dtype)
    if name == "pow":
        kind, c = _D_POW, float(exponent)
    elif name in DERIVATIVES:
        kind, c = DERIVATIVES[name]
    else:
        raise NotImplementedError(f"the gradient of {name} on {x.device} has no GPU kernel")
    out = P.empty(dev, x.shape, x.dtype)
    P.run(dev, "autograd.cu", "unary_grad", (key,), n, x, y, g, n, kind, c, out)
    return out


def softmax_grad(y: DeviceArray, g: DeviceArray, offsets: DeviceArray, E: int, log: bool) -> DeviceArray:
    """The cotangent of the input of segment_softmax (``y`` its output, ``(n, K * E)``, ``g`` the
    output cotangent) over the segments ``offsets`` bounds."""
    key = y.dtype.name
    if key not in ("float32", "float64"):
        raise TypeError(f"the gradient of softmax on cuda needs float32 or float64 values, got {y.dtype}")
    if g.dtype != y.dtype:
        g = g.astype(y.dtype)
    out = P.empty(y._device, y.shape, y.dtype)
    KE = y.shape[1] if y.ndim == 2 else 0
    G = offsets.shape[0] - 1
    if y.shape[0] and KE:
        P.run(y._device, "autograd.cu", "softmax_grad", (key,), G * E, y, g, offsets, G, KE // E, E, int(log), out)
    return out


def add(a: DeviceArray, b: DeviceArray) -> DeviceArray:
    """``a + b`` of two device arrays of one shape (the dtype of the two promoted)."""
    if a.shape != b.shape:
        raise ValueError(f"adding cotangents of shapes {a.shape} and {b.shape} on {a.device}")
    rt = np.result_type(a.dtype, b.dtype)
    a, b = a.astype(rt, copy=False), b.astype(rt, copy=False)
    out = P.empty(a._device, a.shape, rt)
    P.run(a._device, "autograd.cu", "add_arrays", (P.value_key(rt, "adding cotangents"),), a.size, a, b, a.size, out)
    return out


def sum_leading(x: DeviceArray, n: int) -> DeviceArray:
    """``x`` summed over its ``n`` leading axes."""
    R = math.prod(x.shape[:n])
    out = P.empty(x._device, x.shape[n:], x.dtype)
    W = out.size
    if R == 0:
        x._device.memset8(out._ptr, 0, out.nbytes)
    else:
        P.run(x._device, "autograd.cu", "sum_leading", (P.value_key(x.dtype, "summing cotangents"),), W, x, R, W, out)
    return out


def conj(x: DeviceArray) -> DeviceArray:
    """The complex conjugate of a device array (real arrays are returned as they are)."""
    if x.dtype.kind != "c":
        return x
    out = P.empty(x._device, x.shape, x.dtype)
    P.run(x._device, "pointwise.cu", "unary_complex", (x.dtype.name,), x.size, x, out, x.size, UNARY_OPS["conj"][0])
    return out


def real(x: DeviceArray) -> DeviceArray:
    """The real parts of a complex device array (real arrays are returned as they are)."""
    if x.dtype.kind != "c":
        return x
    rt = np.dtype(np.float32 if x.dtype == np.complex64 else np.float64)
    out = P.empty(x._device, x.shape, rt)
    P.run(x._device, "autograd.cu", "real_part", (rt.name,), x.size, x.reshape(-1).view(rt), x.size, out)
    return out
