"""The table of derivative rules: one vector-Jacobian product per differentiable op.

A rule ``RULES[name](*args, **kwargs)`` runs the op forward and returns ``(out, back)``;
``back(G)`` takes the output cotangent ``G`` (a sparse tensor of ``out``'s pattern when
``out`` is sparse, else an array of its shape) and returns one cotangent per positional
argument: an array of the shape of ``arg.values()`` for a sparse argument (its own
pattern: indices are constants), an array of the argument's shape for a dense one, and
``None`` for an argument that is not differentiated (scalars, masks, indices, options) or
whose cotangent the caller does not need (:func:`._core.wanted`: the products skip those).
Complex rules follow PyTorch's convention (the cotangent is conjugated through the
Jacobian: ``dx = G * conj(f'(x))`` for a holomorphic ``f``).

Products use our kernels: the masked gradient of a sparse factor is an SDDMM
(:func:`sparsetensor.sampled_addmm`, or a gather-dot over the stored elements for coo and
blocked layouts), the gradient of the dense factor a product with the transpose view
``S.mT`` (no copy of a compressed ``S``).
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .._core import _layout as L
from .._core._tensor import COOTensor, CompressedTensor, SparseTensor
from ..ops import binary, blas, blocks, dims, indexing, pointwise, prune, reduce, shape, spgemm
from ..ops._shape_common import _as_index as as_index
from ._core import (DenseGradientError, conj, element_coords, gather, same_indices, same_pattern, values_of, unbroadcast,
                    wanted)
from ._masked import spgemm_grads
from . import _device

__all__ = ["RULES", "UNARY"]

RULES: dict = {}


def _rule(*names):
    def register(fn):
        for n in names:
            RULES[n] = fn
        return fn

    return register


def _sparse(x) -> bool:
    return isinstance(x, SparseTensor)


def _dense_dims(t: SparseTensor) -> tuple:
    return t.shape[t.ndim - t.dense_dim:]


def _conj_t(t: SparseTensor) -> SparseTensor:
    return t._replace_values(conj(t.values())) if t.dtype.kind == "c" else t


def _adjoint(x):
    """``conj(x).mT``: the transpose view of a sparse tensor (values conjugated only when complex)."""
    if _sparse(x):
        return _conj_t(x).mT
    return np.swapaxes(conj(np.asarray(x)), -1, -2)


# -- products ------------------------------------------------------------------------------------
_CHUNK = 1 << 15  # stored elements per gather-dot chunk (bounds the temporaries)


def _fold_batch(S: SparseTensor, M1: np.ndarray, M2: np.ndarray):
    """``M1`` (``b1 + (M, K)``) and ``M2`` (``b2 + (K, N)``) with the batch dims that ``S``'s
    batch does not have folded into K, so that ``M1 @ M2`` sampled at ``S`` sums over them."""
    nb = S.batch_dim if isinstance(S, CompressedTensor) else S.sparse_dim - 2
    sb = S.shape[:nb]
    full = np.broadcast_shapes(sb, M1.shape[:-2], M2.shape[:-2])
    if full == sb:
        return np.broadcast_to(M1, sb + M1.shape[-2:]), np.broadcast_to(M2, sb + M2.shape[-2:])
    n = len(full)
    sbp = (1,) * (n - len(sb)) + sb
    fold = [i for i in range(n) if sbp[i] == 1 and full[i] != 1]
    keep = [i for i in range(n) if i not in fold]
    m1 = np.broadcast_to(M1, full + M1.shape[-2:]).transpose(keep + [n] + fold + [n + 1])
    m2 = np.broadcast_to(M2, full + M2.shape[-2:]).transpose(keep + fold + [n, n + 1])
    M, N = M1.shape[-2], M2.shape[-1]
    return m1.reshape(sb + (M, -1)), m2.reshape(sb + (-1, N))


def sddmm(S: SparseTensor, M1, M2) -> np.ndarray:
    """``M1 @ M2`` at the stored elements of ``S``, as an array of ``S.values()``'s shape (batch
    dims of the factors that ``S`` lacks are summed over)."""
    M1, M2 = _fold_batch(S, np.asarray(M1), np.asarray(M2))
    rt = np.result_type(S.dtype, M1.dtype, M2.dtype)
    if S.layout in (L.sparse_csr, L.sparse_csc) and S.is_coalesced() and not S.dense_dim and rt.kind in "fc":
        zero = S._replace_values(np.zeros(S.values().shape, rt))
        return spgemm.sampled_addmm(zero, M1.astype(rt, copy=False), M2.astype(rt, copy=False), beta=0).values()
    coords = element_coords(S)
    lead = coords.shape[1:]
    flat = coords.reshape(coords.shape[0], -1)
    m2t = np.swapaxes(M2, -1, -2)
    out = np.empty(flat.shape[1], rt)
    for lo in range(0, flat.shape[1], _CHUNK):
        c = flat[:, lo:lo + _CHUNK]
        rows = M1[tuple(c[:-1])]
        cols = m2t[tuple(c[:-2]) + (c[-1],)]
        out[lo:lo + _CHUNK] = np.einsum("ek,ek->e", rows, cols)
    return out.reshape(lead)


def _matmul_back(a, b, G, need=(True, True)):
    """Cotangents of ``a`` and ``b`` for ``a @ b`` (2-d or batched; a 1-d dense operand is a vector);
    None for one that ``need`` does not ask for."""
    if _sparse(a) and a.ndim < 2 or _sparse(b) and b.ndim < 2:
        raise NotImplementedError("the gradient of a product with a 1-d sparse operand is not implemented; "
                                  "make it a 1 x n matrix")
    if _sparse(a) and _sparse(b):  # masked: only the entries of the patterns (not G @ B^H, then sampled)
        return _device.spgemm_back(a, b, G, need) if a.is_cuda else spgemm_grads(a, b, G)
    if _device.on_device(G):
        return _device.matmul_back(a, b, G, need) if _sparse(a) else _device.dense_matmul_back(a, b, G, need)
    # one sparse factor S and one dense X: a = S gives G = S X, a = X gives G = X S
    left = _sparse(a)
    S, X, ks, kx = (a, np.asarray(b), 0, 1) if left else (b, np.asarray(a), 1, 0)
    G = np.asarray(G)
    shape, vec = X.shape, X.ndim == 1
    if vec:  # the vector as the matrix it multiplies as
        X, G = (X[:, None], G[..., None]) if left else (X[None, :], G[..., None, :])
    out = [None, None]
    if need[ks]:
        out[ks] = sddmm(S, G, _adjoint(X)) if left else sddmm(S, _adjoint(X), G)
    if need[kx]:  # S^H G or G S^H, as conj(S^T conj(G)) when complex
        cplx = S.dtype.kind == "c" or G.dtype.kind == "c"
        Gc = conj(G) if cplx else G
        gX = blas.matmul(S.mT, Gc) if left else blas.matmul(Gc, S.mT)
        gX = conj(gX) if cplx else gX
        if vec:
            gX = gX[..., 0] if left else gX[..., 0, :]
        out[kx] = unbroadcast(gX, shape)
    return tuple(out)


@_rule("matmul", "mm", "mv", "bmm")
def _matmul(a, b, *, threads=None, _op="matmul"):
    out = getattr(blas, _op)(a, b, threads=threads)
    return out, lambda G: _matmul_back(a, b, G, (wanted(0), wanted(1)))


def _named(op):
    def rule(a, b, *, threads=None):
        return _matmul(a, b, threads=threads, _op=op)

    return rule


for _op in ("mm", "mv", "bmm"):
    RULES[_op] = _named(_op)


@_rule("addmm")
def _addmm(input, mat1, mat2, *, beta=1, alpha=1, threads=None):
    out = blas.addmm(input, mat1, mat2, beta=beta, alpha=alpha, threads=threads)

    def back(G):
        g1 = g2 = None
        if wanted(1) or wanted(2):  # (G * alpha is a temporary of the output's size)
            g1, g2 = _matmul_back(mat1, mat2, G * conj(alpha), (wanted(1), wanted(2)))
        gi = unbroadcast(G * conj(beta), np.shape(input)) if not _sparse(input) and wanted(0) else None
        return gi, g1, g2

    return out, back


@_rule("sampled_addmm")
def _sampled_addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0, threads=None):
    out = spgemm.sampled_addmm(input, mat1, mat2, beta=beta, alpha=alpha, threads=threads)

    def back(G):
        if G.is_cuda:
            return _device.sampled_addmm_back(input, mat1, mat2, G, beta, alpha, (wanted(0), wanted(1), wanted(2)))
        gi = unbroadcast(G.values() * conj(beta), input.values().shape) if wanted(0) else None
        if not (wanted(1) or wanted(2)):
            return gi, None, None
        Ga = G._replace_values(G.values() * conj(alpha))
        m1, m2 = np.asarray(mat1), np.asarray(mat2)
        g1 = unbroadcast(blas.matmul(Ga, _adjoint(m2)), m1.shape) if wanted(1) else None
        g2 = unbroadcast(blas.matmul(_adjoint(m1), Ga), m2.shape) if wanted(2) else None
        return gi, g1, g2

    return out, back


# -- elementwise ------------------------------------------------------------------------------
def _onto(x, G, scale=1):
    """The cotangent of operand ``x`` of a sum whose output cotangent is ``G``."""
    if _sparse(x):
        if not _sparse(G) and tuple(np.shape(G)) != tuple(x.shape):  # x broadcast with a dense operand
            G = unbroadcast(G if _device.on_device(G) else np.asarray(G), x.shape)
        v = values_of(G, x)
        return v * scale if scale != 1 else v
    if _constant(x):
        return None
    g = G.to_dense() if _sparse(G) else G if _device.on_device(G) else np.asarray(G)
    return unbroadcast(g * scale if scale != 1 else g, np.shape(x))  # (a device array stays on its device)


@_rule("add", "sub")
def _add(a, b, *, alpha=1, threads=None, _negate=False):
    out = (binary.sub if _negate else binary.add)(a, b, alpha=alpha, threads=threads)
    s = conj(-alpha if _negate else alpha)
    return out, lambda G: (_onto(a, G), _onto(b, G, s))


RULES["sub"] = lambda a, b, *, alpha=1, threads=None: _add(a, b, alpha=alpha, threads=threads, _negate=True)


def _conj_any(x):
    return _conj_t(x) if _sparse(x) else conj(x)


def _constant(x) -> bool:
    """A Python or NumPy scalar: no cotangent (a 0-d array, host or device, gets one)."""
    return not (_sparse(x) or isinstance(x, np.ndarray) or _device.on_device(x) or np.ndim(x))


def _total(p):
    """The 0-d cotangent of a 0-d array factor: the sum of sparse ``p``'s values (O(nnz))."""
    return reduce.sum(p)


def _factor_grad(x, G, other):
    """The cotangent of factor ``x`` of ``x * other`` (sparse output cotangent ``G``)."""
    if _constant(x):
        return None
    p = binary.mul(G, _conj_any(other))
    if _sparse(x):
        return values_of(p, x)
    if np.ndim(x) == 0:
        return _total(p)
    return unbroadcast(p.to_dense(), np.shape(x))


@_rule("mul")
def _mul(a, b, *, threads=None):
    out = binary.mul(a, b, threads=threads)
    return out, lambda G: (_factor_grad(a, G, b), _factor_grad(b, G, a))


@_rule("div")
def _div(a, b, *, rounding_mode=None, threads=None):
    out = binary.div(a, b, rounding_mode=rounding_mode, threads=threads)
    if rounding_mode is not None:  # floor and trunc are flat where they are differentiable (PyTorch's 0)
        return out, lambda G: (_zero_cotangent(a), _zero_cotangent(b))

    def back(G):
        ga = values_of(binary.div(G, _conj_any(b)), a)
        if _constant(b):
            return ga, None
        gb = binary.mul(G, _conj_t(binary.div(out, b)))
        if np.ndim(b) == 0:
            return ga, -_total(gb)
        return ga, unbroadcast(gb.to_dense() * -1, np.shape(b))  # (a device array stays on its device)

    return out, back


RULES["floor_divide"] = lambda a, b, *, threads=None: _div(a, b, rounding_mode="floor", threads=threads)


def _zero_cotangent(x):
    """A zero cotangent of operand ``x``: zeros at a sparse tensor's pattern, of an array's shape, None
    for a scalar."""
    if _constant(x):
        return None
    v = x.values() if _sparse(x) else x
    if _device.on_device(v):
        return _device.zeros(v.shape, v.dtype, v)
    return np.zeros(np.shape(v), np.asarray(v).dtype)


# -- zero-preserving unary ops --------------------------------------------------------------------
def _zero(x, y):
    return np.zeros_like(x)


# f'(x) given x and y = f(x); the cotangent is G * conj(f'(x)). None: a rule of its own below.
UNARY = {
    "neg": lambda x, y: -np.ones_like(x), "negative": lambda x, y: -np.ones_like(x),
    "square": lambda x, y: 2 * x, "sqrt": lambda x, y: 0.5 / y, "sin": lambda x, y: np.cos(x),
    "sinh": lambda x, y: np.cosh(x), "tan": lambda x, y: 1 + y * y, "tanh": lambda x, y: 1 - y * y,
    "asin": lambda x, y: 1 / np.sqrt(1 - x * x), "asinh": lambda x, y: 1 / np.sqrt(1 + x * x),
    "atan": lambda x, y: 1 / (1 + x * x), "atanh": lambda x, y: 1 / (1 - x * x),
    "expm1": lambda x, y: y + 1, "log1p": lambda x, y: 1 / (1 + x), "frac": lambda x, y: np.ones_like(x),
    "sign": _zero, "ceil": _zero, "floor": _zero, "round": _zero, "trunc": _zero,
    "relu": lambda x, y: (x > 0).astype(x.dtype),
    "deg2rad": lambda x, y: np.full_like(x, np.pi / 180), "rad2deg": lambda x, y: np.full_like(x, 180 / np.pi),
    "erf": lambda x, y: 2 / np.sqrt(np.pi) * np.exp(-x * x), "erfinv": lambda x, y: np.sqrt(np.pi) / 2 * np.exp(y * y),
    "nan_to_num": lambda x, y: np.isfinite(x).astype(x.dtype),
}
# Not holomorphic: the cotangent of x from G, x, y.
_NONHOLO = {
    "abs": lambda G, x, y: G * (np.sign(x) if x.dtype.kind != "c" else np.where(x == 0, 0, x / np.where(y == 0, 1, y))),
    "conj": lambda G, x, y: np.conj(G),
    "real": lambda G, x, y: G.astype(x.dtype),
    "imag": lambda G, x, y: G * 1j if x.dtype.kind == "c" else None,
}


def _sgn_complex_back(g, x):
    """``(g - conj(g) s^2) / (2|x|)``, ``s = sgn(x)``, 0 where ``x == 0`` (PyTorch's sgn_backward):
    the Wirtinger derivatives ``1 / (2|x|)`` and ``-s^2 / (2|x|)`` of ``x / |x|``."""
    r = np.abs(x)
    nz = r != 0
    safe = np.where(nz, r, 1)
    s = np.where(nz, x / safe, 0)
    return np.where(nz, (g - np.conj(g) * s * s) / (2 * safe), 0).astype(x.dtype, copy=False)


def _coalesced(t):
    return t.coalesce()


def _back_to(t, c, gc: np.ndarray) -> np.ndarray:
    """Cotangent values ``gc`` on ``c`` (``t`` coalesced) moved to ``t``'s own pattern."""
    return gc if c is t else values_of(c._replace_values(gc), t)


def _unary(name):
    def rule(t, *args, **kwargs):
        c = _coalesced(t)
        out = getattr(pointwise, name)(c, *args, **kwargs)

        def back(G):
            x, y, g = c.values(), out.values(), G.values()
            if c.is_cuda:
                e = (args[0] if args else kwargs["exponent"]) if name == "pow" else None
                return (_back_to(t, c, _device.unary_back(name, x, y, g, e)),) + (None,) * len(args)
            if name in _NONHOLO:
                if name == "imag" and x.dtype.kind != "c":
                    raise TypeError("imag of a real tensor has no gradient")
                gc = _NONHOLO[name](g, x, y)
            elif name == "pow":
                e = args[0] if args else kwargs["exponent"]
                with np.errstate(divide="ignore", invalid="ignore"):
                    gc = g * conj(e * np.power(x, e - 1))
            else:
                if name == "sgn" and x.dtype.kind == "c":
                    return (_back_to(t, c, _sgn_complex_back(g, x)),) + (None,) * len(args)
                if name == "sign" and x.dtype.kind == "c":
                    raise NotImplementedError("the gradient of sign of a complex tensor is not implemented")
                with np.errstate(divide="ignore", invalid="ignore"):
                    gc = g * conj(UNARY[name](x, y))
            return (_back_to(t, c, np.asarray(gc)),) + (None,) * len(args)

        return out, back

    return rule


for _name in list(UNARY) + list(_NONHOLO) + ["pow", "sgn"]:
    RULES[_name] = _unary(_name)
UNARY["sgn"] = _zero


def _dense_only(name, dense_value):
    def rule(t, *args, **kwargs):
        raise DenseGradientError(
            f"{name} of a sparse tensor: {name}(0) = {dense_value}, so its result and its gradient w.r.t. the "
            f"values would be dense; call {name} on t.to_dense() instead (the gradient then flows through to_dense)")

    return rule


for _name, _v in (("exp", "1"), ("exp2", "1"), ("cos", "1"), ("cosh", "1"), ("acos", "pi/2"), ("log", "-inf"),
                  ("log2", "-inf"), ("log10", "-inf"), ("sigmoid", "0.5"), ("rsqrt", "inf"), ("reciprocal", "inf"),
                  ("acosh", "nan")):
    RULES[_name] = _dense_only(_name, _v)


@_rule("scale")
def _scale(t, scalar):
    out = binary.mul(t, scalar)
    if _constant(scalar):
        return out, lambda G: (G.values() * conj(scalar), None)
    return out, lambda G: (G.values() * conj(scalar), _total(binary.mul(G, _conj_t(t))))


# -- reductions ------------------------------------------------------------------------------
def _dims(dim, ndim):
    if dim is None:
        return tuple(range(ndim))
    try:
        ds = (operator.index(dim),)
    except TypeError:
        ds = tuple(operator.index(d) for d in dim)
    return tuple(sorted(d % ndim for d in ds))


def _keepdim_form(G, t: SparseTensor, dims: tuple):
    """Host cotangent ``G`` of a reduction of ``t`` over ``dims`` with the reduced dims put back as size 1."""
    keep = tuple(1 if d in dims else s for d, s in enumerate(t.shape))
    if not _sparse(G):
        return np.asarray(G).reshape(keep)
    if G.shape == keep:
        return G
    if isinstance(G, COOTensor):  # (a compressed t's batch dims are sparse dims of a COO result)
        S = t.ndim - t.dense_dim
        kept = [d for d in range(S) if d not in dims]
        full = np.zeros((S, G.nnz), dtype=G.indices().dtype)
        full[kept] = G.indices()
        return COOTensor(full, G.values().reshape((G.nnz,) + keep[S:]), keep, G.is_coalesced())
    m = t.batch_dim
    c, p = G.compressed_indices(), G.plain_indices()
    block = t.blocksize if t.layout.blocked else ()
    values = G.values().reshape(keep[:m] + (G.nnz,) + block + keep[m + 2:])
    return CompressedTensor(c.reshape(keep[:m] + c.shape[-1:]), p.reshape(keep[:m] + (G.nnz,)), values, keep,
                            G.layout, G.is_coalesced())


def _broadcast_back(t: SparseTensor, G, dims: tuple) -> np.ndarray:
    """Cotangent ``G`` of a reduction of ``t`` over ``dims`` (the reduced dims kept or not) read at
    every stored element of ``t`` (reduced dims at 0)."""
    if t.is_cuda:
        return _device.broadcast_back(t, G, dims)
    Gk = _keepdim_form(G, t, dims)
    P = t.ndim - t.dense_dim
    if dims and dims[0] >= P and _sparse(Gk) and same_indices(Gk, t):
        # over dense dims only the reduction keeps t's entries (repeats too): the cotangent is an
        # entry's own, where reading it at the entry's coordinates would add its repeats' in
        return np.ascontiguousarray(np.broadcast_to(Gk.values(), t.values().shape))
    if all(d in dims for d in range(P)):  # every element reads G at 0: no index is read, as in the sum
        lead = t.values().shape[:t.values().ndim - t.dense_dim]
        return np.ascontiguousarray(np.broadcast_to(np.asarray(Gk)[(0,) * P], lead + _dense_dims(t)))
    coords = element_coords(t).copy()
    for d in dims:
        if d < P:
            coords[d] = 0
    return gather(Gk, coords, _dense_dims(t))


@_rule("sum")
def _sum(t, dim=None, keepdim=False, *, dtype=None, threads=None):
    out = reduce.sum(t, dim, keepdim, dtype=dtype, threads=threads)
    dims = _dims(dim, t.ndim)
    return out, lambda G: (_broadcast_back(t, G, dims),)


@_rule("mean")
def _mean(t, dim=None, keepdim=False, *, dtype=None, threads=None):
    out = reduce.mean(t, dim, keepdim, dtype=dtype, threads=threads)
    dims = _dims(dim, t.ndim)
    count = math.prod(t.shape[d] for d in dims)
    return out, lambda G: (_broadcast_back(t, G, dims) / max(count, 1),)


def _softmax_rule(log: bool):
    def rule(t, dim, *, dtype=None, threads=None):
        c = _coalesced(t)
        out = (reduce.log_softmax if log else reduce.softmax)(c, dim, dtype=dtype, threads=threads)
        d = dim % t.ndim

        def back(G):
            if c.is_cuda:
                gc = _device.softmax_back(c, out, G, d, log)
                return (_back_to(t, c, _device.cast(gc, t.dtype)), None)
            y, g = out.values(), G.values()
            w = g if log else g * y
            P = t.ndim - t.dense_dim
            if d >= P:
                s = np.sum(w, axis=y.ndim - (t.ndim - d), keepdims=True)
            else:  # a batch dim's sums through coo: their pattern (the batches' union) may differ in nnz by batch
                wt = out._replace_values(w)
                s = _broadcast_back(c, reduce.sum(wt.to_sparse("coo") if d < c.batch_dim else wt, d, True), (d,))
            gc = g - np.exp(y) * s if log else y * (g - s)
            return (_back_to(t, c, gc.astype(t.dtype, copy=False)), None)

        return out, back

    return rule


RULES["softmax"] = _softmax_rule(False)
RULES["log_softmax"] = _softmax_rule(True)


# -- conversions, shape and indexing -------------------------------------------------------------
@_rule("to_dense")
def _to_dense(t, *, threads=None):
    out = t.to_dense(threads=threads)
    return out, lambda G: (values_of(G, t) if t.is_cuda else gather(G, element_coords(t), _dense_dims(t)),)


@_rule("from_dense")
def _from_dense(a, layout="csr", **kwargs):
    from ..ops.dense import from_dense

    out = from_dense(a, layout, **kwargs)
    return out, lambda G: (G.to_dense(),)


@_rule("sparse_mask")
def _sparse_mask(t, mask, *, threads=None):
    out = shape.sparse_mask(t, mask, threads=threads)
    return out, lambda G: ((values_of(G, t) if _sparse(t) else G.to_dense()), None)


@_rule("coalesce", "sum_duplicates")
def _coalesce(t, *, threads=None):
    out = t.coalesce(threads=threads)
    return out, lambda G: (values_of(G, t),)


@_rule("to_sparse")
def _to_sparse(t, layout=None, *, blocksize=None, dense_dim=None, threads=None):
    if not _sparse(t):
        return _from_dense(t, layout or "coo", blocksize=blocksize, dense_dim=dense_dim or 0, threads=threads)
    out = t.to_sparse(layout, blocksize=blocksize, dense_dim=dense_dim, threads=threads)
    if out.dense_dim != t.dense_dim:
        raise NotImplementedError(f"the gradient of to_sparse that changes dense_dim ({t.dense_dim} -> "
                                  f"{out.dense_dim}) is not implemented")
    return out, lambda G: (values_of(G, t), None)


for _lay in ("coo", "csr", "csc", "bsr", "bsc"):  # the blocked ones take blocksize positionally too
    RULES[f"to_sparse_{_lay}"] = (lambda lay: lambda t, blocksize=None, **k: _to_sparse(t, lay, blocksize=blocksize,
                                                                                          **k))(_lay)


@_rule("astype")
def _astype(t, dtype, copy=True):
    out = t.astype(dtype, copy=copy)
    return out, lambda G: (_device.cast(G.values(), t.dtype) if G.is_cuda else
                           np.asarray(G.values()).astype(t.dtype, copy=False), None)


@_rule("clone")
def _clone(t):
    return t.clone(), lambda G: (G.values(),)


@_rule("values")
def _values(t):
    return t.values(), lambda G: (G if _device.on_device(G) else np.asarray(G),)


@_rule("transpose")
def _transpose(t, dim0, dim1):
    out = shape.transpose(t, dim0, dim1)
    return out, lambda G: (shape.transpose(G, dim0, dim1).values(), None, None)


@_rule("mT", "T", "t")
def _mT(t):
    out = t.mT if t.ndim != 2 or isinstance(t, CompressedTensor) else t.T
    return out, lambda G: (G.mT.values(),)


def _sparse_dim(t: SparseTensor, d: int) -> bool:
    """Whether dim ``d`` of ``t`` is a batch or sparse dim (not a dense one)."""
    return d < t.ndim - t.dense_dim


def _split(t: SparseTensor, d: int):
    """(coordinates of ``t``'s stored elements, whether ``d`` is a batch/sparse dim, values axis of ``d``)."""
    return element_coords(t), _sparse_dim(t, d), t.values().ndim - (t.ndim - d)


def _of_pattern(G, out: SparseTensor) -> bool:
    """Whether cotangent ``G`` stores its values at ``out``'s stored elements, in order."""
    return isinstance(G, SparseTensor) and same_pattern(G, out)


def _by_entry(tensors, out, G, forward):
    """The cotangent values of COO ``tensors``, one array each, for an op over sparse dims that
    copies stored entries (narrow, select, index_select, cat), carried back entry by entry; None
    unless some input is uncoalesced and ``G`` has ``out``'s pattern (otherwise coordinates
    decide). Each duplicate of an uncoalesced input owns its output entry: a lookup by
    coordinate would give it the sum over its duplicates. ``forward`` applied to the inputs'
    patterns, numbered entry by entry, says which input entry each output entry copies. The
    same ops run on the host and on a device (int64 values), so this is one mechanism for both."""
    if not (any(isinstance(t, COOTensor) and not t.is_coalesced() for t in tensors) and _of_pattern(G, out)):
        return None
    total = sum(t.nnz for t in tensors)
    numbers = _device.entry_numbers(total, G) if G.is_cuda else np.arange(total)
    numbered, off = [], 0
    for t in tensors:
        numbered.append(COOTensor(t.indices(), numbers[off:off + t.nnz], t.shape[:t.sparse_dim], False, t._checked))
        off += t.nnz
    source, gv = forward(numbered).values(), G.values()
    # input entry k gets the sum of the output entries that copy it (index_select may copy one twice)
    sums = COOTensor(source.reshape(1, -1), gv, (total,) + gv.shape[1:], False, True).to_dense()
    grads, off = [], 0
    for t in tensors:
        grads.append(sums[off:off + t.nnz])
        off += t.nnz
    return grads


@_rule("narrow")
def _narrow(t, dim, start, length, *, threads=None):
    out = shape.narrow(t, dim, start, length, threads=threads)
    d = dim % t.ndim
    s = start % t.shape[d] if start < 0 else start

    def back(G):
        entry = _by_entry([t], out, G, lambda ns: shape.narrow(ns[0], d, s, length)) if _sparse_dim(t, d) else None
        if entry is not None:
            return (entry[0],) + (None,) * 3
        if t.is_cuda:
            if not _sparse_dim(t, d) and _of_pattern(G, out):
                return (_device.along_dense_dim(t, G, d, lambda a, g, e: _device.narrow_back(a, g, e, s, length)),) \
                    + (None,) * 3
            return (_device.narrow_back(t, G, d, s, length),) + (None,) * 3
        coords, sparse_d, ax = _split(t, d)
        if sparse_d:
            valid = (coords[d] >= s) & (coords[d] < s + length)
            coords = coords.copy()
            coords[d] -= s
            return (gather(G, coords, _dense_dims(t), valid),) + (None,) * 3
        part = np.asarray(G.values()) if _of_pattern(G, out) else gather(G, coords, G.shape[len(coords):])
        gt = np.zeros(t.values().shape, part.dtype)
        gt[(slice(None),) * ax + (slice(s, s + length),)] = part
        return (gt,) + (None,) * 3

    return out, back


@_rule("select")
def _select(t, dim, index, *, threads=None):
    out = shape.select(t, dim, index, threads=threads)
    d = dim % t.ndim
    i = index % t.shape[d]

    def back(G):
        entry = _by_entry([t], out, G, lambda ns: shape.select(ns[0], d, i)) if _sparse_dim(t, d) else None
        if entry is not None:
            return (entry[0], None, None)
        if t.is_cuda:
            if not _sparse_dim(t, d) and _of_pattern(G, out):
                return (_device.along_dense_dim(t, G, d, lambda a, g, e: _device.select_back(a, g, e, i)), None, None)
            return (_device.select_back(t, G, d, i), None, None)
        coords, sparse_d, ax = _split(t, d)
        if sparse_d:
            valid = coords[d] == i
            return (gather(G, np.delete(coords, d, axis=0), _dense_dims(t), valid), None, None)
        dd = _dense_dims(t)
        part = (np.asarray(G.values()) if _of_pattern(G, out) else
                gather(G, coords, dd[:d - (t.ndim - len(dd))] + dd[d - (t.ndim - len(dd)) + 1:]))
        gt = np.zeros(t.values().shape, part.dtype)
        gt[(slice(None),) * ax + (i,)] = part
        return (gt, None, None)

    return out, back


def _chained(t, steps):
    """The rules ``steps`` (``[(rule, args), ...]``) applied one after another from ``t``: the last
    output and a pullback through each rule's, last first."""
    chain = _Chain()
    for rule, args in steps:
        t = chain.run(rule, t, *args)
    return t, chain.back


class _Chain:
    """Rules run one after another (:meth:`run`), and the pullback through them all (:meth:`back`:
    each cotangent put in its step's input pattern for the rule before)."""

    def __init__(self):
        self.ins, self.backs = [], []

    def run(self, rule, t, *args):
        self.ins.append(t)
        out, back = rule(t, *args)
        self.backs.append(back)
        return out

    def back(self, G):
        for x, b in zip(reversed(self.ins), reversed(self.backs)):
            G = x._replace_values(b(G)[0])
        return G.values()


@_rule("permute")
def _permute(t, *order):
    out, back = _chained(t, [(_transpose, ij) for ij in dims.permute_steps(t, order)])
    return out, lambda G: (back(G),) + (None,) * len(order)


@_rule("squeeze")
def _squeeze(t, dim=None):
    out, back = _chained(t, [(_select, (d, 0)) for d in dims.squeeze_dims(t, dim)])
    return out, lambda G: (back(G), None)


@_rule("unsqueeze")
def _unsqueeze(t, dim):
    out = dims.unsqueeze(t, dim)
    d = dim % (t.ndim + 1)
    # the new dim has one index: the cotangent at it, in out's order, is t's (stack keeps the entries' order)
    return out, lambda G: (shape.select(G, d, 0).values(), None)


@_rule("reshape")
def _reshape(t, *dims_, order="C", shape=None, newshape=None, copy=None):
    """The method's and np.reshape's arguments (``np.reshape(t, shape, order)``; ``copy`` does not
    change the derivative)."""
    n = len(dims_)
    if n == 2 and isinstance(dims_[1], str):  # np.reshape's positional order
        dims_, order = dims_[:1], dims_[1]
    dims_ = dims_ or ((shape if newshape is None else newshape),)
    out = dims.reshape(t, *dims_, order=order)
    if dims.reshape_keeps_order(t, out.shape, order):  # the elements in t's order: the values reshaped back
        return out, lambda G: (G.values().reshape(t.values().shape),) + (None,) * n
    # a bijection of coordinates: the cotangent as COO over t's shape, split as t's dims, read at t's pattern
    split = t.ndim - t.dense_dim
    return out, lambda G: (values_of(dims.reshape_coo_split(G.to_sparse_coo(), t.shape, order, split), t),) + \
        (None,) * n


@_rule("flatten")
def _flatten(t, start_dim=0, end_dim=-1):
    out, back = _reshape(t, dims.flatten_shape(t, start_dim, end_dim))
    return out, lambda G: (back(G)[0], None, None)


def _triangle_rule(name: str):
    op = getattr(prune, name)

    def rule(t, diagonal=0, k=None):  # k: np.tril's name
        diagonal = diagonal if k is None else k
        out = op(t, diagonal)

        def back(G):
            entry = _by_entry([t], out, G, lambda ns: op(ns[0], diagonal))  # uncoalesced COO: entry by entry
            if entry is not None:
                return entry[0], None
            if t.layout.blocked:  # the items a kept block holds beyond the diagonal are 0 whatever t's are
                G = op(G, diagonal)
            return values_of(G, t), None

        return out, back

    return rule


RULES["tril"], RULES["triu"] = _triangle_rule("tril"), _triangle_rule("triu")


@_rule("__getitem__")
def _getitem(t, key):
    chain = _Chain()

    def step(name, r, *args):
        if name == "dense":
            raise NotImplementedError("vjp: t[key] indexing on past the last sparse dim (a dense result indexed by "
                                      "NumPy) is not recorded; select to a dense value first, then index it")
        return chain.run(RULES[name], r, *args)

    out = indexing.index(t, key, step)
    return out, lambda G: (chain.back(G), None)


@_rule("index_select")
def _index_select(t, dim, index, *, threads=None):
    out = shape.index_select(t, dim, index, threads=threads)
    d = dim % t.ndim
    index = as_index(index, t.shape[d], "index_select")  # negatives wrapped: the back rules look coordinates up

    def back(G):
        entry = _by_entry([t], out, G, lambda ns: shape.index_select(ns[0], d, index)) if _sparse_dim(t, d) else None
        if entry is not None:
            return (entry[0], None, None)
        if t.is_cuda:
            if not _sparse_dim(t, d) and _of_pattern(G, out):
                return (_device.along_dense_dim(t, G, d, lambda a, g, e: _device.index_select_back(a, g, e, index)),
                        None, None)
            return (_device.index_select_back(t, G, d, index), None, None)
        idx = np.asarray(index).reshape(-1).astype(np.int64)
        coords, sparse_d, ax = _split(t, d)
        if not sparse_d:
            part = np.asarray(G.values()) if _of_pattern(G, out) else gather(G, coords, G.shape[len(coords):])
            gt = np.zeros(t.values().shape, part.dtype)
            np.add.at(gt, (slice(None),) * ax + (idx,), part)
            return (gt, None, None)
        order = np.argsort(idx, kind="stable")
        sidx = idx[order]
        lead = coords.shape[1:]
        cd = coords[d].reshape(-1)
        lo, hi = np.searchsorted(sidx, cd, "left"), np.searchsorted(sidx, cd, "right")
        cnt = hi - lo
        owner = np.repeat(np.arange(cd.shape[0]), cnt)
        starts = np.cumsum(cnt) - cnt
        j = order[np.repeat(lo, cnt) + (np.arange(owner.shape[0]) - np.repeat(starts, cnt))]
        rep = coords.reshape(coords.shape[0], -1)[:, owner]
        rep[d] = j
        vals = gather(G, rep, _dense_dims(t))
        gt = np.zeros((cd.shape[0],) + vals.shape[1:], vals.dtype)
        nz = cnt > 0
        if vals.shape[0]:
            gt[nz] = np.add.reduceat(vals, starts[nz], axis=0)
        return (gt.reshape(lead + vals.shape[1:]), None, None)

    return out, back


def _each_then(tensors, step, then):
    """``then(inputs)`` (a rule over a list of tensors: cat) on ``tensors`` each first taken through
    ``step(t)`` (``(rule, args)`` or None); the pullback goes back through both."""
    chains = [_Chain() for _ in tensors]
    inputs = [t if step(t) is None else c.run(step(t)[0], t, *step(t)[1]) for c, t in zip(chains, tensors)]
    out, back = then(inputs)

    def pull(G):
        grads = back(G)[0]
        return [c.back(x._replace_values(g)) if c.ins else g for c, x, g in zip(chains, inputs, grads)]

    return out, pull


@_rule("cat")
def _cat(tensors, dim=0, *, threads=None):
    tensors = list(tensors)
    if isinstance(tensors[0], COOTensor) and not all(isinstance(t, COOTensor) for t in tensors):
        # cat makes the others COO too: made so here, an uncoalesced input's duplicates go back entry by entry
        out, pull = _each_then(tensors, lambda t: None if isinstance(t, COOTensor) else (_to_sparse, ("coo",)),
                               lambda ts: _cat(ts, dim, threads=threads))
        return out, lambda G: (pull(G), None)
    out = shape.cat(tensors, dim, threads=threads)
    d = dim % out.ndim

    def back(G):
        coo = all(isinstance(t, COOTensor) for t in tensors)
        sparse_d = coo and d < tensors[0].sparse_dim
        if coo and not sparse_d and _of_pattern(G, out):
            # along a dense dim cat copies each input's entries in turn, padded (an element stored by several
            # inputs is several entries, each with its own cotangent: a lookup by coordinate would sum them),
            # or, where the index arrays are equal, side by side in one entry each
            apart = out.nnz == sum(t.nnz for t in tensors)
            grads, start, off = [], 0, 0
            for t in tensors:
                v = shape.narrow(G, d, off, t.shape[d]).values()
                grads.append(v[start:start + t.nnz] if apart else v)
                start, off = start + t.nnz, off + t.shape[d]
            return (grads, None)
        entry = _by_entry(tensors, out, G, lambda ns: shape.cat(ns, d)) if sparse_d else None
        if entry is not None:
            return (entry, None)
        if any(t.is_cuda for t in tensors):
            return (_device.cat_back(tensors, G, d), None)
        grads, off = [], 0
        for t in tensors:
            coords, sparse_d, ax = _split(t, d)
            if sparse_d:
                coords = coords.copy()
                coords[d] += off
                grads.append(gather(G, coords, _dense_dims(t)))
            else:
                part = gather(G, coords, G.shape[len(coords):])
                grads.append(np.ascontiguousarray(part[(slice(None),) * ax + (slice(off, off + t.shape[d]),)]))
            off += t.shape[d]
        return (grads, None)

    return out, back


@_rule("hstack")
def _hstack(tensors):
    tensors = list(tensors)
    out, back = _cat(tensors, 0 if tensors[0].ndim == 1 else 1)
    return out, lambda G: (back(G)[0],)


@_rule("vstack")
def _vstack(tensors):
    out, pull = _each_then(list(tensors), lambda t: (_unsqueeze, (0,)) if t.ndim == 1 else None, lambda ts: _cat(ts, 0))
    return out, lambda G: (pull(G),)


@_rule("block_diag")
def _block_diag(*tensors):
    listed = len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
    tensors = list(tensors[0]) if listed else list(tensors)
    out = blocks.block_diag(*tensors)

    def back(G):
        grads = None
        if all(isinstance(t, COOTensor) for t in tensors):  # uncoalesced inputs: entry by entry
            grads = _by_entry(tensors, out, G, lambda ns: blocks.block_diag(*ns))
        if grads is None:
            grads, r0, c0 = [], 0, 0
            if G.layout.blocked:  # a part need not start at a block
                G = G.to_sparse(L.sparse_coo)
            for t in tensors:
                m, n = (1, t.shape[0]) if t.ndim == 1 else t.shape
                part = shape.narrow(shape.narrow(G, 0, r0, m), 1, c0, n)
                grads.append(values_of(shape.select(part, 0, 0) if t.ndim == 1 else part, t))
                r0, c0 = r0 + m, c0 + n
        return (grads,) if listed else tuple(grads)

    return out, back
