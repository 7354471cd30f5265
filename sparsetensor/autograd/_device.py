"""Cotangents on a CUDA device: the helpers of :mod:`._core` and the rules for device values.

The rules are written once; where a cotangent or a value lives on a GPU (a
:class:`sparsetensor.cuda.DeviceArray`, or a sparse tensor whose members are ones) these
helpers keep it there, computing with the kernels of
:mod:`sparsetensor._backend.cuda._autograd`. A step that has no device kernel raises
NotImplementedError naming it and the device: nothing is copied to the host silently.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._core._device import is_device_array
from .._core._shape_checks import element_strides
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor

__all__ = ["on_device", "kernels", "comparable", "dense_cotangent", "cast", "entry_numbers", "add", "zeros",
           "unbroadcast", "values_at", "refuse"]


def on_device(x) -> bool:
    """Whether ``x`` is a sparse tensor on a GPU or a device array."""
    if isinstance(x, SparseTensor):
        return x.is_cuda
    return is_device_array(x)


def kernels():
    from .._backend.cuda import _autograd

    return _autograd


def _array(x):
    from .._core._device import device_array

    return device_array(x)


def refuse(what: str, where) -> NotImplementedError:
    device = getattr(where, "device", "cuda")
    return NotImplementedError(f"the gradient of {what} on {device} has no GPU kernel (nothing is copied to the host); "
                               "run it on the host with t.cpu()")


def cast(g, dtype):
    """Device array ``g`` in ``dtype`` (complex to real: the real part; on the device)."""
    dtype = np.dtype(dtype)
    if g.dtype == dtype:
        return g
    if g.dtype.kind == "c" and dtype.kind != "c":
        g = kernels().real(g)
    return g.astype(dtype, copy=False)


def zeros(shape, dtype, like):
    """A zero device array on the device of ``like``."""
    from ..cuda._array import DeviceArray

    dev = like._device if hasattr(like, "_device") else like.values()._device
    return DeviceArray.zeros(shape, dtype, dev)


def entry_numbers(n: int, like, start: int = 0, step: int = 1):
    """int64 ``start, start + step, ...`` (``n`` of them) on the device of ``like``, made there."""
    from ..cuda import _primitives as P

    return P.arange(like._device if hasattr(like, "_device") else like.values()._device, n, start, step)


def add(a, b):
    """The sum of two device cotangents of one shape."""
    return kernels().add(a, b)


def unbroadcast(g, shape: tuple):
    """Device array ``g`` summed over the leading dims that broadcasting added or stretched."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    lead = 0
    while lead < len(shape) and shape[lead] == 1:
        lead += 1
    # the dims to sum are leading ones (added, or stretched from 1 at the front): a sum over them
    for n in range(extra + lead, extra - 1, -1):
        if g.shape[n:] == shape[n - extra:]:
            return kernels().sum_leading(g, n).reshape(shape)
    if extra:
        g = kernels().sum_leading(g, extra)
    for k, n in enumerate(shape):  # a dim stretched from 1 behind others: swapped to the front, summed there
        if n == 1 and g.shape[k] != 1:
            front = g.swapaxes(0, k)
            s = kernels().sum_leading(front, 1)
            g = s.reshape((1,) + s.shape).swapaxes(0, k)
    return g.reshape(shape)


def values_at(g, target: SparseTensor):
    """Cotangent ``g`` (a sparse device tensor of any pattern, or a dense device array of
    ``target``'s shape) read at the stored elements of device tensor ``target``."""
    if isinstance(g, SparseTensor):
        if target.layout.blocked and (not g.layout.blocked or g.blocksize != target.blocksize):
            return kernels().elements_at(_coo(g), target)  # the keys of a blocked pattern are its blocks'
        if g.layout.blocked and not target.layout.blocked:
            g = _coo(g)
        return kernels().sparse_at(g, target)
    g = _array(g)
    if g.shape != target.shape:
        raise ValueError(f"a dense cotangent of shape {g.shape} cannot be read at a tensor of shape {target.shape}")
    return kernels().dense_at(target, g)


def comparable(g: SparseTensor, out: SparseTensor) -> bool:
    """Whether sparse ``g`` can be the cotangent of device output ``out`` without sharing its
    index arrays: the same device, layout, shape and nnz (it is then read at ``out``'s pattern)."""
    return g.is_cuda and g.device == out.device and g.layout is out.layout and g.shape == out.shape and \
        g.nnz == out.nnz


def dense_cotangent(g, out, name: str):
    """A dense cotangent of device output ``out`` as a device array: device arrays are taken as they
    are, a Python or NumPy scalar is put on the device (for a 0-d output), other host arrays are
    refused (move them to the output's device first)."""
    if is_device_array(g):
        return _array(g)
    if isinstance(g, (numbers.Number, np.generic)) or (isinstance(g, np.ndarray) and g.ndim == 0):
        from ..cuda._array import DeviceArray

        return DeviceArray.from_host(np.asarray(g), _array(out.values() if isinstance(out, SparseTensor) else
                                                           out)._device).reshape(())  # one scalar the caller gave
    raise TypeError(f"{name}: the output is on {out.device}, so its cotangent must be a device array there (or a "
                    f"scalar for a 0-d output), got {type(g).__name__}")


def wrap(arg, ct):
    """The raw device cotangent ``ct`` of ``arg`` in ``arg``'s form (see :func:`sparsetensor.autograd.wrap_cotangent`)."""
    if isinstance(ct, SparseTensor):
        return ct if ct.dtype == arg.dtype else ct.astype(arg.dtype)
    if not is_device_array(ct):
        raise AssertionError(f"internal: a host cotangent ({type(ct).__name__}) for an argument on {arg.device}")
    ct = cast(_array(ct), arg.dtype)
    if isinstance(arg, SparseTensor):
        want = arg.values().shape
        if ct.shape != want:
            raise AssertionError(f"internal: a cotangent of shape {ct.shape} for values of shape {want}")
        return arg._replace_values(ct)
    if ct.shape != tuple(arg.shape):
        raise NotImplementedError(f"broadcasting a cotangent of shape {ct.shape} to {arg.shape} on {arg.device}")
    return ct


# -- the device halves of rules (sparsetensor.autograd.rules calls them for device values) ----------
def _matrix(x, vector: bool):
    return x.reshape(x.shape + (1,)) if vector else x


def _batch_stride(x) -> int:
    return x.shape[-2] * x.shape[-1] if x.ndim > 2 else 0


def matmul_back(a: SparseTensor, X, G, need=(True, True)):
    """Cotangents of sparse ``a`` (its values, an SDDMM at its pattern) and dense ``X`` (``a^H @ G``)
    for ``a @ X`` on the device; None for one that ``need`` does not ask for."""
    from ..ops import blas

    X = _array(X)
    vector = X.ndim == 1
    rt = G.dtype
    Xm, Gm = _matrix(cast(X, rt) if X.dtype != rt else X, vector), _matrix(G, vector)
    N = Xm.shape[-1]
    cplx = rt.kind == "c" or a.dtype.kind == "c"
    ga = kernels().sampled(a, Gm, (_batch_stride(Gm), N, 1), Xm, (_batch_stride(Xm), N, 1), N,
                           conj_b=cplx) if need[0] else None
    if not need[1]:
        return ga, None
    gX = kernels().conj(blas.matmul(a.mT, kernels().conj(Gm))) if cplx else blas.matmul(a.mT, Gm)
    if vector:
        gX = gX.reshape(gX.shape[:-1])
    return ga, unbroadcast(gX, X.shape)


def _canonical_csr(x: SparseTensor, dtype) -> SparseTensor:
    """Device tensor ``x`` as checked, canonical unblocked csr of ``dtype`` (duplicates summed)."""
    from .._backend.cuda._coalesce import checked
    from .._core import _layout as L

    x = x.astype(dtype) if x.dtype != dtype else x
    return checked(x if x.layout is L.sparse_csr else x.to_sparse(L.sparse_csr))


def spgemm_back(a: SparseTensor, b: SparseTensor, G, need=(True, True)):
    """Cotangents of the values of device tensors ``a`` and ``b`` for ``a @ b`` (sparse @ sparse),
    computed only at their patterns (the masked gradient): ``gA[i, k] = sum_j G[i, j] conj(b[k, j])``
    merges row ``i`` of ``G`` with row ``k`` of ``b``, ``gB[k, j] = sum_i conj(a[i, k]) G[i, j]``
    row ``k`` of ``a^T`` with row ``j`` of ``G^T`` (all as canonical csr). A dense ``G`` is read
    along row ``k`` of ``b`` (for ``gA``) and of ``a^T`` (for ``gB``)."""
    rt = np.result_type(a.dtype, b.dtype, G.dtype)
    cplx = rt.kind == "c"
    if not isinstance(G, SparseTensor):
        G = _array(G)
        if G.shape != a.shape[:-1] + b.shape[-1:]:
            raise ValueError(f"a dense cotangent of shape {G.shape} for a product of shape "
                             f"{a.shape[:-1] + b.shape[-1:]}")
        G = cast(G, rt)
        N = G.shape[-1]
        sb = G.shape[-2] * N if G.ndim > 2 else 0
        ga = kernels().sampled_sparse_dense(a, _canonical_csr(b, rt), G, (sb, N, 1), use_col=True,
                                            conj_s=cplx) if need[0] else None
        gb = kernels().sampled_sparse_dense(b, _canonical_csr(a.mT, rt), G, (sb, 1, N), use_col=False,
                                            conj_s=cplx) if need[1] else None
        return ga, gb
    ga = kernels().sampled_sparse(a, _canonical_csr(G, rt), _canonical_csr(b, rt), conj_r=cplx) if need[0] else None
    gb = kernels().sampled_sparse(b, _canonical_csr(a.mT, rt), _canonical_csr(G.mT, rt),
                                  conj_l=cplx) if need[1] else None
    return ga, gb


def dense_matmul_back(X, b: SparseTensor, G, need=(True, True)):
    """Cotangents of dense ``X`` and sparse ``b`` for ``X @ b`` on the device, as those of
    ``b^T @ X^T = (X @ b)^T`` (:func:`matmul_back`; ``b.mT`` shares ``b``'s values, its blocks
    transposed)."""
    def t(x):
        x = _array(x)
        return x if x.ndim == 1 else x.swapaxes(-1, -2)

    # a vector X: X @ b = b^T @ X is batch + (K,), a vector per batch, not a matrix to transpose
    gbt, gxt = matmul_back(b.mT, t(X), _array(G) if _array(X).ndim == 1 else t(G), need[::-1])
    gb = gbt.swapaxes(-1, -2) if gbt is not None and b.layout.blocked else gbt
    return (t(gxt) if gxt is not None else None), gb


def adjoint(x):
    """``conj(x).mT`` of a device array (a transposed copy: device memory holds no strided views)."""
    return kernels().conj(_array(x)).swapaxes(-1, -2)


def sampled_addmm_back(input, mat1, mat2, G, beta, alpha, need=(True, True, True)):
    """Cotangents of ``input`` (values), ``mat1`` and ``mat2`` for ``sampled_addmm`` on the device
    (None for one that ``need`` does not ask for)."""
    from ..ops import blas, pointwise

    gv = G.values()
    gi = gv if beta == 1 else gv * np.conj(beta)
    Ga = G if alpha == 1 else G._replace_values(gv * np.conj(alpha))
    m1, m2 = _array(mat1), _array(mat2)
    g1 = unbroadcast(blas.matmul(Ga, adjoint(m2)), m1.shape) if need[1] else None
    g2 = None
    if need[2]:
        Gh = pointwise.conj(Ga) if Ga.dtype.kind == "c" else Ga
        g2 = unbroadcast(adjoint(blas.matmul(Gh.mT, m1)), m2.shape)  # (Ga^H @ m1)^H: no GPU dense @ sparse
    return (unbroadcast(gi, input.values().shape) if need[0] else None), g1, g2


def same_indices(a: SparseTensor, b: SparseTensor) -> bool:
    """Whether ``a`` and ``b`` store their entries at the same sparse indices in the same order
    (their dense dims may differ)."""
    if a.layout != b.layout or a.shape[:a.ndim - a.dense_dim] != b.shape[:b.ndim - b.dense_dim] or a.nnz != b.nnz:
        return False
    if isinstance(a, COOTensor):
        pairs = [(a.indices(), b.indices())]
    else:
        pairs = [(a.compressed_indices(), b.compressed_indices()), (a.plain_indices(), b.plain_indices())]
    if a.is_cuda or b.is_cuda:  # the same index arrays, or equal ones (a kernel and one number read a pair)
        return a.device == b.device and all(x is y or x.size == 0 or kernels().same_arrays([x, y]) for x, y in pairs)
    return all(x is y or (x.shape == y.shape and np.array_equal(x, y)) for x, y in pairs)


def broadcast_back(t: SparseTensor, G, dims: tuple):
    """Cotangent ``G`` of a reduction of device tensor ``t`` over ``dims`` (the reduced dims kept or
    not) read at every stored item of ``t``: a dense ``G`` broadcast along the reduced dims, a
    sparse one (coo summed over sparse dims, compressed over batch dims) looked up at the keys of
    ``t``'s elements with the reduced dims' coordinates dropped."""
    keep = tuple(1 if d in dims else s for d, s in enumerate(t.shape))
    if not isinstance(G, SparseTensor):
        return kernels().dense_at(t, _array(G).reshape(keep))
    P = t.ndim - t.dense_dim
    if any(d >= P for d in dims):
        return _dense_broadcast_back(t, G, dims, P)
    own = t.sparse_dim if isinstance(t, COOTensor) else t.batch_dim  # the dims of t's key grid that are whole dims
    n, kept = len(kernels().grid(t)), G.ndim == t.ndim
    if any(d >= own for d in dims) or len(kernels().grid(G)) != (n if kept else n - len(dims)):
        raise refuse(f"a reduction of a {t.layout.name} tensor over dims {dims} with a sparse result", t)
    mult = element_strides(kernels().grid(G))
    for d in dims:  # ascending: each zero lands at its own dim
        if kept:
            mult[d] = 0
        else:
            mult.insert(d, 0)
    return kernels().sparse_at(G, t, ([0] * n, [0] * n, list(kernels().grid(t)), mult))


def _pattern(t: SparseTensor, shape: tuple) -> SparseTensor:
    """``t``'s pattern (its index arrays) in ``shape``, which differs from ``t.shape`` in dense dims
    only: a key template for :func:`values_at` and :func:`broadcast_back`, whose values (left
    uninitialised) are never read."""
    from ..cuda._array import DeviceArray

    v = t.values()
    lead = v.shape[:v.ndim - t.dense_dim]
    vals = DeviceArray.empty(lead + tuple(shape[t.ndim - t.dense_dim:]), v.dtype, v._device)
    if isinstance(t, COOTensor):
        return COOTensor(t.indices(), vals, tuple(shape), t.is_coalesced(), t._checked)
    return type(t)(t.compressed_indices(), t.plain_indices(), vals, tuple(shape), t.layout, t.is_coalesced())


def _dense_broadcast_back(t: SparseTensor, G: SparseTensor, dims: tuple, P: int):
    """:func:`broadcast_back` for a sparse ``G`` of a reduction over some dense dims of ``t`` (and
    maybe batch or sparse ones): ``G`` read at ``t``'s pattern in ``G``'s dense shape, then
    repeated along the reduced dense dims' value axes."""
    from .._backend.cuda import _select

    dense = [d for d in dims if d >= P]
    kept = G.ndim == t.ndim
    shape = tuple(1 if d in dense else n for d, n in enumerate(t.shape) if kept or d not in dense)
    if len(dense) == len(dims) and same_indices(G, t):
        v = G.values()  # t's entries kept (repeats too): each entry's own cotangent, not its repeats' sum
    else:
        v = broadcast_back(_pattern(t, shape), G, tuple(d for d in dims if d < P))
    lead = v.ndim - t.dense_dim + (0 if kept else len(dense))  # the value axes before the dense ones
    if not kept:
        full = list(v.shape[:lead])
        rest = list(v.shape[lead:])
        for d in range(P, t.ndim):
            full.append(1 if d in dense else rest.pop(0))
        v = v.reshape(tuple(full))
    for d in dense:
        v = _select.repeat_axis(v, v.ndim - (t.ndim - d), t.shape[d])
    return v


def unary_back(name: str, x, y, g, exponent=None):
    """``g * conj(f'(x))`` of the pointwise op ``name`` on device values (``real``/``imag``: the
    cotangent put back as the real or the imaginary part; ``sgn`` of real values: zero)."""
    if name == "real":
        return cast(g, x.dtype)
    if name == "imag":
        if x.dtype.kind != "c":
            raise TypeError("imag of a real tensor has no gradient")
        return cast(g, x.dtype) * 1j
    if name == "sgn":
        if x.dtype.kind == "c":
            return kernels().unary_grad(name, x, y, g)
        return zeros(x.shape, np.result_type(g.dtype, x.dtype), x)
    if name == "conj" and x.dtype.kind != "c":
        return cast(g, x.dtype)
    return kernels().unary_grad(name, x, y, g, exponent)


def softmax_back(c: SparseTensor, out: SparseTensor, G: SparseTensor, d: int, log: bool):
    """The cotangent of the values of (canonical) device tensor ``c`` for ``softmax(c, d)`` (``log``:
    log_softmax) = ``out``: along the plain dim over the rows as they lie, along the compressed
    dim through the transposed layout (as the forward op), along a batch dim of a compressed
    tensor or a sparse dim of a coo one, along a dense dim and of a blocked tensor or one with
    dense dims through sums along ``d`` (the CPU's formula)."""
    work = np.dtype(np.float32) if out.dtype == np.float16 else out.dtype  # as the forward op computes
    g = cast(G.values(), work)
    if out.dtype != work:
        out = out._replace_values(out.values().astype(work))
    if d < (c.sparse_dim if isinstance(c, COOTensor) else c.batch_dim) or c.layout.blocked or c.dense_dim or \
            not c.layout.compressed:
        return _softmax_back_by_sums(c, out, g, d, log)
    m = c.batch_dim
    plain_dim = m + 1 if c.layout.compressed_rows else m
    if d != plain_dim:
        flip = c.layout.transposed
        yt = out.to_sparse(flip)
        gt = out._replace_values(g).to_sparse(flip)
        r = softmax_back(yt, yt, gt, d, log)
        return yt._replace_values(r).to_sparse(c.layout).values()
    from .._backend import backend_for

    backend = backend_for(c)
    B = math.prod(c.shape[:m])
    ci = c.compressed_indices().reshape(B, c.compressed_indices().shape[-1])
    y = out.values()
    off = backend.batch_offsets(ci, c.nnz)
    return kernels().softmax_grad(y.reshape(B * c.nnz, 1), g.reshape(B * c.nnz, 1), off, 1,
                                  log).reshape(y.shape)


def _softmax_back_by_sums(c: SparseTensor, out: SparseTensor, g, d: int, log: bool):
    """``y * (g - S[g * y])`` (log_softmax: ``g - softmax(c) * S[g]``), ``y`` the values of ``out``,
    where ``S[w]`` is ``w`` summed along ``d`` and read back at ``c``'s elements: softmax along a
    dim whose slices are not runs of the storage."""
    from .._backend import backend_for
    from ..ops import reduce

    def mul(a, b):
        return backend_for(c).elementwise(a, b, "mul")

    if isinstance(c, CompressedTensor) and d < c.batch_dim and c.layout.blocked:
        # the sums' pattern below is a coo one (the lookup reads a cotangent of c's layout only): on the
        # blocks' elements, regrouped after (the elements of c's blocks, its pattern again)
        flat = "csr" if c.layout.compressed_rows else "csc"
        cu = c.to_sparse(flat)
        r = _softmax_back_by_sums(cu, out.to_sparse(flat), out._replace_values(g).to_sparse(flat).values(), d, log)
        return cu._replace_values(r).to_sparse(c.layout, blocksize=c.blocksize).values()
    y = out.values()
    w = out._replace_values(g if log else mul(g, y))
    if isinstance(c, CompressedTensor) and d < c.batch_dim:
        # a batch dim's sums: their pattern (the batches' union) may differ in nnz by batch
        w = w.to_sparse("coo")
    s = broadcast_back(c, reduce.sum(w, d, True), (d,))
    if log:  # exp(y): the softmax itself
        return add(g, mul(reduce.softmax(c, d, dtype=y.dtype).values(), s) * -1.0)
    return mul(y, add(g, s * -1.0))




def _by_keys(t: SparseTensor, d: int) -> int | None:
    """The number of batch and sparse dims of ``t`` when its elements' keys can be moved along
    ``d`` (a batch or sparse dim of an unblocked ``t``); None where the cotangent is first put back
    into ``t``'s shape by sparse ops (:func:`_in_shape_of`): a dense dim, or a blocked ``t``, whose
    blocks an op along a sparse dim splits into elements."""
    P = t.ndim - t.dense_dim
    return None if d >= P or t.layout.blocked else P


def _coo(G: SparseTensor) -> COOTensor:
    """Cotangent ``G`` as a coo tensor (the device's conversion), so that every dim of ``G``'s
    pattern is a sparse dim of it and every op of the adjoints below has a device kernel."""
    from .._core import _layout as L

    return G if isinstance(G, COOTensor) else G.to_sparse(L.sparse_coo)


def _empty_like(G: COOTensor, shape: tuple) -> COOTensor:
    """A device coo tensor of ``shape`` with ``G``'s index and value dtypes, sparse and dense dims,
    and no entries."""
    from ..cuda._array import DeviceArray

    dev = G.values()._device
    S = G.sparse_dim
    return COOTensor(DeviceArray.zeros((S, 0), G.index_dtype, dev), DeviceArray.zeros((0,) + tuple(shape[S:]),
                                                                                        G.dtype, dev),
                     tuple(shape), True, True)


def _widened(G: COOTensor, d: int, start: int, size: int) -> COOTensor:
    """Coo ``G`` placed at ``start`` of a dim ``d`` of ``size`` (zero elsewhere): the adjoint of
    ``narrow``, as a cat with empty tensors."""
    from ..ops import join

    parts = []
    if start:
        parts.append(_empty_like(G, G.shape[:d] + (start,) + G.shape[d + 1:]))
    parts.append(G)
    rest = size - start - G.shape[d]
    if rest:
        parts.append(_empty_like(G, G.shape[:d] + (rest,) + G.shape[d + 1:]))
    return join.cat(parts, d) if len(parts) > 1 else G


def _with_dim(G: COOTensor, d: int, dense: bool) -> COOTensor:
    """Coo ``G`` with a new dim of size 1 at ``d``, a dense dim or a sparse one (``select``'s adjoint
    needs the dim's kind of the input, which ``d``'s place alone does not say at the boundary)."""
    from ..ops import join

    if not dense:
        return join._unsqueeze_coo(G, d)
    v = G.values()
    ax = d - G.sparse_dim + 1
    return COOTensor(G.indices(), v.reshape(v.shape[:ax] + (1,) + v.shape[ax:]), G.shape[:d] + (1,) + G.shape[d:],
                     G.is_coalesced(), G._checked)


def along_dense_dim(t: SparseTensor, G: SparseTensor, d: int, back):
    """``back(t, G, d)`` (one of the adjoints below) for an op along dense dim ``d`` of ``t`` whose
    cotangent ``G`` has the output's pattern, which holds ``t``'s entries in ``t``'s order: run on
    forms of ``t`` and ``G`` whose one sparse dim numbers the stored elements, so that each
    repeated entry of an uncoalesced ``t`` takes its own cotangent (a lookup by coordinate would
    give it the sum over its repeats)."""
    n, tv, gv = t.dense_dim, t.values(), G.values()
    K = math.prod(tv.shape[:tv.ndim - n])
    nums = entry_numbers(K, G).reshape(1, K)

    def numbered(v, dense: int):
        tail = v.shape[v.ndim - dense:]
        return COOTensor(nums, v.reshape((K,) + tail), (K,) + tail, True, True)

    return back(numbered(tv, n), numbered(gv, G.dense_dim), d - (t.ndim - n) + 1).reshape(tv.shape)


def narrow_back(t: SparseTensor, G: SparseTensor, d: int, start: int, length: int):
    """Values of ``t`` for ``narrow(t, d, start, length)``: ``G`` read at ``t``'s elements moved by
    ``-start`` along ``d``, zero outside the window."""
    P = _by_keys(t, d)
    if P is None:
        return values_at(_widened(_coo(G), d, start, t.shape[d]), t)
    shift, lo, hi = [0] * P, [0] * P, list(t.shape[:P])
    shift[d], lo[d], hi[d] = -start, start, start + length
    return kernels().sparse_at(G, t, (shift, lo, hi, element_strides(kernels().grid(G))))


def select_back(t: SparseTensor, G: SparseTensor, d: int, index: int):
    """Values of ``t`` for ``select(t, d, index)``: ``G`` read at the elements with ``index`` along ``d``."""
    P = _by_keys(t, d)
    if not isinstance(G, SparseTensor):  # a coo tensor's only sparse dim selected: a dense result
        from ..cuda._array import DeviceArray

        G = _array(G)
        G = COOTensor(DeviceArray.zeros((0, 1), t.index_dtype, G._device), G.reshape((1,) + G.shape), G.shape,
                      True, True)
        P = None
    if P is None:
        g = _with_dim(_coo(G), d, d >= t.ndim - t.dense_dim)
        return values_at(_widened(g, d, index, t.shape[d]), t)
    mult = element_strides(kernels().grid(G))
    mult.insert(d, 0)
    lo, hi = [0] * P, list(t.shape[:P])
    lo[d], hi[d] = index, index + 1
    return kernels().sparse_at(G, t, ([0] * P, lo, hi, mult))


def cat_back(tensors: list, G: SparseTensor, d: int) -> list:
    """Values of each of ``tensors`` for ``cat(tensors, d)``: ``G`` read at their elements moved by
    their offsets along ``d``."""
    from ..ops import select

    out, off = [], 0
    mult = element_strides(kernels().grid(G))
    for t in tensors:
        P = _by_keys(t, d)
        if P is None:
            out.append(values_at(select.narrow(_coo(G), d, off, t.shape[d]), t))
        else:
            shift = [0] * P
            shift[d] = off
            out.append(kernels().sparse_at(G, t, (shift, [0] * P, list(t.shape[:P]), mult)))
        off += t.shape[d]
    return out


def _coords_mapped(G: COOTensor, d: int, index, size: int) -> COOTensor:
    """Coo ``G`` of an ``index_select`` along sparse dim ``d`` taken back to a dim of ``size``: each
    entry's coordinate ``c`` along ``d`` replaced by ``index[c]`` (int64 indices, not coalesced: the
    entries that land on one coordinate are summed when read, which is the adjoint of a repeat)."""
    from .._backend.cuda import _select
    from ..cuda._array import DeviceArray

    G = G.coalesce()  # checked: every coordinate is in range before it indexes ``index``
    dev = G.values()._device
    idx = G.indices().astype(np.int64)
    index = index if is_device_array(index) else DeviceArray.from_host(np.asarray(index, np.int64).reshape(-1), dev)
    row = _select.take_axis(_array(index).astype(np.int64, copy=False), 0, idx[d])
    parts = [p for p in (idx[:d], row.reshape(1, -1), idx[d + 1:]) if p.shape[0]]
    return COOTensor(_select.concat_axis(parts, 0), G.values(), G.shape[:d] + (size,) + G.shape[d + 1:], False, True)


def index_select_back(t: SparseTensor, G: SparseTensor, d: int, index):
    """Values of ``t`` for ``index_select(t, d, index)`` (a host or device index): for each stored
    element, the sum of ``G`` at every output position that selected its index along ``d``. Along
    a batch or sparse dim ``G``'s coordinates are mapped through ``index``; along a dense dim ``G``
    read at ``t``'s pattern is summed by index along that values axis (a coo ``to_dense`` with the
    index as its coordinates: the adjoint of a gather)."""
    if d < t.ndim - t.dense_dim:
        return values_at(_coords_mapped(_coo(G), d, index, t.shape[d]), t)
    from ..cuda._array import DeviceArray

    v = values_at(G, _pattern(t, G.shape))  # t's pattern in G's dense shape: K along d
    ax = v.ndim - (t.ndim - d)
    front = v.swapaxes(0, ax)
    K = front.shape[0]
    idx = index if is_device_array(index) else DeviceArray.from_host(np.asarray(index, np.int64).reshape(-1),
                                                                     front._device)
    W = math.prod(front.shape[1:])  # not -1: the index may be empty
    sums = COOTensor(_array(idx).astype(np.int64, copy=False).reshape(1, K), front.reshape(K, W),
                     (t.shape[d], W), False, True).to_dense()
    return sums.reshape((t.shape[d],) + front.shape[1:]).swapaxes(0, ax)
