"""hspmm, smm, sspaddmm, ``t[key] = value``, index arrays on the device and norm with p < 0 on
CUDA tensors (issue #37), through the one op path, against the CPU result of the same tensor
(``.cpu()``): patterns and integers exactly, float32 to 1e-6 relative; the CPU's errors; what the
device lacks raises NotImplementedError naming the op and the device; nothing is copied to the host
(DeviceArray.get and __array__ raise while the device ops run). Runs on a GPU or on the kernel
emulator (see test_cuda.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import INDEX, host, make, members
from test_cuda_select import without_host_copies

DTYPES = [np.dtype(d) for d in ("float32", "float64", "complex128", "int64")]
RTOL = {np.dtype("float32"): 1e-6, np.dtype("float64"): 1e-12, np.dtype("complex128"): 1e-12}
# (layout, batch, dense, blocksize)
MATRICES = [("coo", (), (), None), ("csr", (), (), None), ("csc", (), (), None), ("bsr", (), (), (2, 1)),
            ("bsc", (), (), (1, 2))]
MATRIX_IDS = [c[0] for c in MATRICES]
SHAPED = [("coo", (2,), (), None), ("coo", (), (2,), None), ("csr", (2,), (), None), ("csr", (), (3,), None),
          ("csc", (2,), (2,), None), ("bsr", (2,), (), (2, 1)), ("bsc", (), (2,), (1, 2))]
SHAPED_IDS = [f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in SHAPED]


def _values(rng, shape, dtype):
    """Random values of ``dtype``, none of them 0."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return (rng.integers(1, 10, shape) * rng.choice([-1, 1], shape)).astype(dtype)
    v = rng.standard_normal(shape)
    if dtype.kind == "c":
        v = v + 1j * rng.standard_normal(shape)
    return v.astype(dtype)


def tensor(rng, case, dtype, index_dtype, empty_row=True):
    """A random CPU tensor of ``case`` with values of ``dtype`` (an empty row when 2-d and asked)."""
    t = make(rng, case, np.float64, index_dtype)
    a = t.to_dense()
    a = np.where(a != 0, _values(rng, a.shape, dtype), np.zeros((), dtype)).astype(dtype)
    if empty_row and a.ndim == 2 and case[1:3] == ((), ()):
        rb = 1 if case[3] is None else case[3][0]
        a[:rb] = 0  # a row (block row) without entries: hspmm/smm leave it out
    layout, batch, dense, bs = case
    if layout == "coo":
        return st.from_dense(a, "coo", dense_dim=len(dense), index_dtype=index_dtype)
    return st.from_dense(a, layout, blocksize=bs, batch_dim=len(batch), dense_dim=len(dense), index_dtype=index_dtype)


def close(got, want):
    """Device result ``got`` equals the CPU's ``want``: a sparse tensor's layout, flags and indices
    exactly and its values, or a dense array (integers exactly, floats to RTOL)."""
    if isinstance(want, st.SparseTensor):
        assert got.device.startswith("cuda") and got.layout is want.layout and got.shape == want.shape
        assert got.index_dtype == want.index_dtype and got.is_coalesced() == want.is_coalesced()
        for x, y in zip(members(got)[:-1], members(want)[:-1]):
            x = host(x)
            assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all()
        got, want = host(got.values()), np.asarray(want.values())
    else:
        assert isinstance(got, DeviceArray)
        got, want = host(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind in "fc":
        rtol = RTOL.get(want.dtype, 1e-3)
        scale = float(np.abs(want[np.isfinite(want)]).max(initial=1.0))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)
    else:
        assert (got == want).all()


def agree(call, *operands):
    """``call`` on CPU operands and on their device copies: the same result, or the same error
    (type and message)."""
    dev = [x.cuda() if isinstance(x, st.SparseTensor) else DeviceArray.from_host(np.asarray(x)) for x in operands]
    try:
        want = call(*operands)
    except (st.InvariantError, ValueError, IndexError, TypeError, NotImplementedError) as e:
        with pytest.raises(type(e)) as got:
            call(*dev)
        assert str(got.value).replace(" on cuda:0", "") == str(e)  # shapes are described with their device
        assert getattr(got.value, "invariant", None) == getattr(e, "invariant", None)
        return None
    close(call(*dev), want)
    return want


# -- hspmm, smm, sspaddmm -----------------------------------------------------------------------------

@pytest.mark.parametrize("case", MATRICES, ids=MATRIX_IDS)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
def test_products(backend, rng, case, index_dtype):
    for dtype in DTYPES + [np.dtype(np.float16)]:  # float16: worked in float32, rounded once
        t = tensor(rng, case, dtype, index_dtype)
        M, K = t.shape
        D = _values(rng, (K, 3), dtype)
        inp = st.from_dense(_values(rng, (M, 3), dtype) * (rng.random((M, 3)) < 0.4), "csr", index_dtype=index_dtype)
        h = agree(st.hspmm, t, D)
        assert h.sparse_dim == 1 and h.dense_dim == 1
        assert agree(lambda a, b: a.smm(b), t, D).is_coalesced()
        agree(lambda a, b, c: st.sspaddmm(a, b, c, beta=2, alpha=3), inp, t, D)
        agree(st.sspaddmm, inp.to_sparse_coo(), t, D)
        agree(lambda a, b, c: st.sspaddmm(a, b, c, beta=0, alpha=1), inp, t, D)
        if dtype.kind in "iu":
            continue
        # mixed dtypes: the CPU's result dtype
        agree(st.hspmm, t, D.astype(np.complex128))
        agree(lambda a, b, c: st.sspaddmm(a, b, c, beta=2), inp.astype(np.complex128), t, np.real(D).astype(np.float32))


def test_products_edge_shapes(backend, rng):
    """No entries, no rows, no columns of the dense operand, an unchecked (unsorted) operand."""
    for a in (np.zeros((3, 4)), np.zeros((0, 4)), np.eye(3, 4)):
        t = st.from_dense(a, "csr")
        for N in (0, 2):
            D = rng.standard_normal((4, N))
            agree(st.hspmm, t, D)
            agree(st.smm, t, D)
            agree(st.sspaddmm, st.from_dense(np.ones((a.shape[0], N)), "coo"), t, D)
    for col in ([2, 0, 1], [2, 9, 1]):  # unchecked: unsorted (the CPU's InvariantError), out of range
        u = st.sparse_csr_tensor(np.array([0, 2, 2, 3]), np.array(col), np.array([1.0, 2.0, 3.0]), (3, 4),
                                 check_invariants=False)
        for fn in (st.hspmm, st.smm):
            agree(fn, u, rng.standard_normal((4, 2)))
    for vals in ([True, True, True], [200, 100, 3]):  # unchecked repeats: summed in the product's dtype
        dup = st.sparse_csr_tensor(np.array([0, 2, 3]), np.array([1, 1, 0]), np.array(vals, np.uint8 if vals[1] > 1
                                   else np.bool_), (2, 2), check_invariants=False)
        for fn in (st.hspmm, st.smm):
            agree(fn, dup, rng.standard_normal((2, 3)))
        agree(st.sspaddmm, st.from_dense(np.ones((2, 3)), "coo"), dup, rng.standard_normal((2, 3)))
        agree(lambda x, y: fn(x.to_sparse_coo(), y), u, rng.standard_normal((4, 2)))


@pytest.mark.parametrize("case", SHAPED, ids=SHAPED_IDS)
def test_product_errors(backend, rng, case):
    """Batch or dense dims, shapes that do not multiply, a sparse dense operand, wrong alpha: the
    CPU's errors."""
    t = tensor(rng, case, np.float64, np.int64)
    m = tensor(rng, ("csr", (), (), None), np.float64, np.int64)
    K = t.shape[-1]
    agree(st.hspmm, t, np.ones((K, 2)))
    agree(st.smm, t, np.ones((K, 2)))
    agree(st.sspaddmm, m, t, np.ones((K, 2)))
    agree(st.sspaddmm, t, m, np.ones((m.shape[1], t.shape[-1])))
    agree(st.hspmm, m, np.ones((m.shape[1] + 1, 2)))
    agree(st.hspmm, m, np.ones(m.shape[1]))
    agree(lambda a, b, c: st.sspaddmm(a, b, c, alpha=1j), st.from_dense(np.ones((m.shape[0], 2)), "coo"), m,
          np.ones((m.shape[1], 2)))
    with pytest.raises(TypeError, match="sspaddmm: input must be sparse"):
        st.sspaddmm(DeviceArray.from_host(np.ones((4, 2))), m.cuda(), DeviceArray.from_host(np.ones((5, 2))))


# -- t[key] = value -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", SHAPED[:4] + MATRICES[1:], ids=SHAPED_IDS[:4] + MATRIX_IDS[1:])
def test_setitem(backend, rng, case):
    """Item assignment: the CPU's error (it supports none) for every key and value kind, on the device too."""
    t = tensor(rng, case, np.float64, np.int64)
    d = t.cuda()
    for key, value in ((0, 1.0), ((0, 0), 2.0), (slice(None), 0), (np.array([0]), np.ones(1))):
        with pytest.raises(NotImplementedError) as want:
            t[key] = value
        with pytest.raises(NotImplementedError) as got:
            d[key] = value
        assert str(got.value) == str(want.value) and f"sparse {t.layout.name} tensor" in str(got.value)


# -- index arrays on the device -----------------------------------------------------------------------

_INDEX_CASES = SHAPED + MATRICES[:2]
_INDEX_IDS = SHAPED_IDS + MATRIX_IDS[:2]


def _index_agree(call, t, keys):
    """``call(tensor, index)`` with host ``t`` and a host index, and with its device copy and the
    index on the device: the same result or the same error."""
    d = t.cuda()
    for key in keys:
        key = np.asarray(key, dtype=np.int64) if not isinstance(key, np.ndarray) else key
        try:
            want = call(t, key)
        except (IndexError, ValueError, TypeError, NotImplementedError) as e:
            with pytest.raises(type(e)) as got:
                call(d, DeviceArray.from_host(key))
            # the key's type is named: DeviceArray for ndarray
            assert str(got.value).replace(" on cuda:0", "").replace("DeviceArray", "ndarray") == str(e)
            continue
        close(call(d, DeviceArray.from_host(key)), want)
        close(call(d, key), want)  # a host index with a device tensor: as before


@pytest.mark.parametrize("case", _INDEX_CASES, ids=_INDEX_IDS)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
def test_device_index(backend, rng, case, index_dtype):
    for dtype in (np.float32, np.complex128, np.int64):
        t = tensor(rng, case, dtype, index_dtype, empty_row=False)
        for dim in range(t.ndim):
            size = t.shape[dim]
            pre = (slice(None),) * dim
            keys = [[size - 1, 0, size - 1], [0], [], [-1, 0] if size else [], [size], [-size - 1, 0], [0, size + 3]]
            _index_agree(lambda x, k: st.index_select(x, dim, k), t, keys)
            _index_agree(lambda x, k: x[pre + (k,)], t, keys)
        _index_agree(lambda x, k: x[0, k], t, [[1, -1, 0], [-t.shape[1] - 1]])


def test_device_index_kinds(backend, rng):
    """int32 and unsigned device indices; the errors of floats, bools, 2-d arrays."""
    t = tensor(rng, ("csr", (2,), (3,), None), np.float64, np.int32, empty_row=False)
    keys = [np.array([1, 0, 1], np.int32), np.array([3, 1], np.uint8), np.array([-1], np.int32),
            np.array([0.0, 1.0]), np.array([True, False]), np.array([[0, 1]]), np.array([[0]], np.int32)]
    for dim in (0, 1, 2, 3):
        _index_agree(lambda x, k: st.index_select(x, dim, k), t, keys)
        _index_agree(lambda x, k: x[(slice(None),) * dim + (k,)], t, keys)


def test_device_index_with_a_host_tensor(backend, rng):
    """A device index with a host tensor: ValueError naming both devices (nothing copied)."""
    t = tensor(rng, ("coo", (), (2,), None), np.float64, np.int64)
    index = DeviceArray.from_host(np.array([1, 0]))
    for call in (lambda: st.index_select(t, 0, index), lambda: t[index], lambda: t[:, index], lambda: t[0, index]):
        with pytest.raises(ValueError, match="operands on different devices: cpu and cuda:0"):
            call()


# -- norm with p < 0 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", SHAPED + MATRICES[:2], ids=SHAPED_IDS + MATRIX_IDS[:2])
def test_norm(backend, rng, case):
    for dtype, index_dtype in zip(DTYPES, INDEX * 2):
        t = tensor(rng, case, dtype, index_dtype, empty_row=False)
        for p in (-1, -2.5, -math.inf, math.inf):
            for dim in (None,) + tuple(range(t.ndim)):
                agree(lambda x: st.norm(x, p, dim), t)
            agree(lambda x: st.norm(x, p, (0, t.ndim - 1), keepdim=True), t)


def test_norm_zeros_count(backend, rng):
    """p < 0 is 0 on a slice with an explicit or an unspecified zero, and on one with no entries; a
    full slice gives the power mean; NaN stays NaN."""
    a = np.array([[1.0, 2.0, 4.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.0], [np.nan, 1.0, 2.0]])
    full = st.sparse_coo_tensor(np.array([[0, 0, 0, 1, 3, 3, 3], [0, 1, 2, 1, 0, 1, 2]]),
                                np.array([1.0, 2.0, 4.0, 3.0, np.nan, 1.0, 2.0]), (4, 3))
    explicit = st.sparse_coo_tensor(np.array([[1], [0]]), np.array([0.0]), (4, 3))
    t = st.add(full, explicit)
    for x in (t, st.from_dense(a, "csr"), st.from_dense(a, "csc")):
        for p in (-1, -3.0):
            for dim in (None, 0, 1):
                got = agree(lambda y: st.norm(y, p, dim), x)
            r = st.norm(x.cuda(), p, 1)
            r = host(r.to_dense() if isinstance(r, st.SparseTensor) else r)
            assert r[0] > 0 and r[1] == 0 and r[2] == 0 and np.isnan(r[3])
    with pytest.raises(ValueError, match="empty"):
        st.norm(st.from_dense(np.zeros((0, 3)), "csr").cuda(), -1, 0)
    assert got is not None


# -- nothing reaches the host -------------------------------------------------------------------------

def test_no_host_copies(backend, rng, monkeypatch):
    """The device paths read only a few numbers (a count, index extrema, a bounds report, per-batch nnz)."""
    t = tensor(rng, ("csr", (), (), None), np.float64, np.int32)
    b = tensor(rng, ("csr", (2,), (2,), None), np.complex128, np.int64, empty_row=False)
    c = b.to_sparse("coo")
    D = _values(rng, (t.shape[1], 3), np.float64)
    inp = st.from_dense(_values(rng, (t.shape[0], 3), np.float64), "coo")
    d, db, dc, dD, dinp = t.cuda(), b.cuda(), c.cuda(), DeviceArray.from_host(D), inp.cuda()
    i2, i3 = DeviceArray.from_host(np.array([2, 0, -1])), DeviceArray.from_host(np.array([1, 0, 1], np.int32))
    results = without_host_copies(monkeypatch, 8, [
        lambda: st.hspmm(d, dD), lambda: st.smm(d, dD), lambda: st.sspaddmm(dinp, d, dD, beta=2, alpha=0.5),
        lambda: db[:, i2], lambda: st.index_select(db, 3, i3), lambda: st.index_select(dc, 1, i3), lambda: dc[i3],
        lambda: db[0, 0, i3], lambda: st.norm(db, -1.5, 2), lambda: st.norm(dc, -2)])
    i2h, i3h = np.array([2, 0, -1]), np.array([1, 0, 1])
    wants = [st.hspmm(t, D), st.smm(t, D), st.sspaddmm(inp, t, D, beta=2, alpha=0.5), b[:, i2h],
             st.index_select(b, 3, i3h), st.index_select(c, 1, i3h), c[i3h], b[0, 0, i3h], st.norm(b, -1.5, 2),
             st.norm(c, -2)]
    for got, want in zip(results, wants):
        close(got, want)


# -- matmul broadcasting batch dims -----------------------------------------------------------------

BROADCASTS = [(("csr", (), (), None), (3, 5, 2)), (("csr", (2,), (), None), (3, 1, 5, 2)),
              (("bsr", (1,), (), (2, 1)), (4, 5, 3)), (("csc", (2,), (), None), (2, 5, 2)),
              (("csr", (3,), (), None), (5, 2)), (("csr", (2, 1), (), None), (3, 5, 2)),
              (("coo", (), (), None), (2, 5, 2)), (("csr", (2,), (), None), (2, 5, 0)),
              (("bsc", (), (), (1, 5)), (3, 5, 1)), (("csr", (1,), (), None), (5,)),
              # coo with leading sparse dims: one block-diagonal matrix
              (("coo", (3,), (), None), (3, 5, 2)), (("coo", (3,), (), None), (5, 2)), (("coo", (3,), (), None), (5,)),
              (("coo", (2, 3), (), None), (3, 5, 2)), (("coo", (3,), (), None), (1, 5, 2))]


@pytest.mark.parametrize("case,x_shape", BROADCASTS, ids=[f"{c[0]}-b{len(c[1])}-{len(x)}d" for c, x in BROADCASTS])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int64], ids=str)
def test_matmul_broadcasts_batch_dims(backend, rng, case, x_shape, dtype):
    """NumPy's broadcasting of the batch dims of either operand (the CPU's shapes and values)."""
    t = tensor(rng, case, np.dtype(dtype), np.int32)
    x = _values(rng, x_shape, dtype)
    agree(st.matmul, t, x)
    if len(x_shape) >= 2:
        agree(lambda a, b: st.matmul(b.swapaxes(-1, -2), a.mT), t, x)  # dense @ sparse: transposed


@pytest.mark.parametrize("x_shape", [(5,), (5, 2), (3, 5, 2), (4,)], ids=lambda s: f"{len(s)}d")
def test_sparse_vector_products(backend, rng, x_shape):
    """A coo vector (sparse_dim 1) on either side of a dense operand, and the CPU's shape errors."""
    v = st.sparse_coo_tensor([[0, 3, 1]], np.array([1.0, -2.0, 3.0], np.float32), size=(5,))
    x = _values(rng, x_shape, np.float32)
    agree(st.matmul, v, x)
    agree(lambda a, b: st.matmul(b if b.ndim == 1 else b.swapaxes(-1, -2), a), v, x)


@pytest.mark.parametrize("case,batch", [(("csr", (), (), None), (2,)), (("csr", (2,), (), None), (3, 2)),
                                        (("csc", (), (), None), (2,)), (("csr", (1,), (), None), (3,))],
                         ids=["csr-2", "csr-b1-32", "csc-2", "csr-b1-3"])
def test_sampled_addmm_broadcasts_the_input(backend, rng, case, batch):
    t = tensor(rng, case, np.dtype(np.float64), np.int32)
    m1 = _values(rng, batch + t.shape[-2:-1] + (3,), np.float64)
    m2 = _values(rng, batch + (3,) + t.shape[-1:], np.float64)
    agree(lambda a, b, c: st.sampled_addmm(a, b, c, beta=0.5, alpha=2), t, m1, m2)


@pytest.mark.parametrize("b1,b2", [((2, 1), (3,)), ((1, 3), (2, 1, 1)), ((3,), ()), ((2, 1), (2, 3))],
                         ids=["21-3", "13-211", "3-none", "21-23"])
def test_sampled_addmm_broadcasts_the_factors(backend, rng, b1, b2):
    """Factors whose batch dims broadcast to the input's (2, 3) from 1 or from fewer dims."""
    t = tensor(rng, ("csr", (2, 3), (), None), np.dtype(np.float64), np.int32)
    m1 = _values(rng, b1 + t.shape[-2:-1] + (4,), np.float64)
    m2 = _values(rng, b2 + (4,) + t.shape[-1:], np.float64)
    agree(lambda a, b, c: st.sampled_addmm(a, b, c, beta=0.5, alpha=2), t, m1, m2)
