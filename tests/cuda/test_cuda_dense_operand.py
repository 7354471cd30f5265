"""A device sparse tensor with a dense device operand, through the public op path, against the CPU:
sparse_mask of a dense or sparse tensor at a mask of every layout;
sparse + dense and dense + sparse (and ``-``, ``alpha``), sparse * dense in either order, sparse
/ dense, div with a rounding mode (bit for bit, edge values included), maximum/minimum with a
dense operand, a dense operand that broadcasts (mul, div), every
layout with batch and dense dims, both index dtypes, mixed value dtypes; foreign device arrays
(``__cuda_array_interface__``) read without a copy; and the refusals (a host array with a device
tensor, integers in device arithmetic, two dense device arrays). Runs on a GPU or on the kernel
emulator (see test_cuda.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sparsetensor as st

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import CASE_IDS, CASES, INDEX, CAIOnly, cuda, host, make, members
from test_cuda_ops import same as _same

ARITH = [np.dtype(d) for d in ("float16", "float32", "float64", "complex64", "complex128")]


def same(got, want):
    """test_cuda_ops' comparison; a dense result must also be a device array."""
    if not isinstance(want, st.SparseTensor):
        assert isinstance(got, cuda.DeviceArray), type(got)
    _same(got, want)


def dense_like(rng, shape, dtype, nonzero=False):
    x = rng.standard_normal(shape)
    if nonzero:  # a divisor: away from 0
        x = np.sign(x) * (0.5 + np.abs(x))
    if np.dtype(dtype).kind == "c":
        x = x + 0.25j * x[::-1] if x.ndim else x + 0.25j
    return np.asarray(x).astype(dtype)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_add_sub_with_dense(backend, rng, case):
    for index_dtype in INDEX:
        for dtype in ARITH:
            t = make(rng, case, dtype, index_dtype)
            x = dense_like(rng, t.shape, dtype)
            d, dx = t.cuda(), cuda.DeviceArray.from_host(x)
            same(st.add(d, dx), st.add(t, x))
            same(d + dx, t + x)
            same(dx + d, x + t)
            same(st.sub(d, dx, alpha=2), st.sub(t, x, alpha=2))
            same(dx - d, x - t)
            same(st.add(dx, d, alpha=-3), st.add(x, t, alpha=-3))
            # the dense operand itself is never written
            assert np.array_equal(host(dx), x)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_mul_div_with_dense(backend, rng, case):
    for index_dtype in INDEX:
        for dtype in ARITH:
            t = make(rng, case, dtype, index_dtype)
            x = dense_like(rng, t.shape, dtype, nonzero=True)
            d, dx = t.cuda(), cuda.DeviceArray.from_host(x)
            same(d * dx, t * x)
            same(dx * d, x * t)
            same(st.mul(d, dx), st.mul(t, x))
            same(d / dx, t / x)
            # the result shares the pattern: the index arrays are the operand's
            r = d * dx
            assert members(r)[0].ptr == members(d)[0].ptr


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("coo", "csr", "bsr")],
                         ids=[i for c, i in zip(CASES, CASE_IDS) if c[0] in ("coo", "csr", "bsr")])
def test_broadcasting_dense(backend, rng, case):
    t = make(rng, case, np.float64, np.int32)
    d = t.cuda()
    shapes = [t.shape[-1:], (1,) * t.ndim, (1,) + t.shape[1:], t.shape[:-1] + (1,), ()]
    for shape in shapes:
        x = dense_like(rng, shape, np.float64, nonzero=True)
        dx = cuda.DeviceArray.from_host(np.ascontiguousarray(x))
        same(d * dx, t * x)
        same(d / dx, t / x)


def test_mixed_dtypes(backend, rng):
    case = ("csr", (2,), (), None)
    t = make(rng, case, np.float32, np.int64)
    x = dense_like(rng, t.shape, np.float64, nonzero=True)
    d, dx = t.cuda(), cuda.DeviceArray.from_host(x)
    for got, want in ((d + dx, t + x), (d * dx, t * x), (d / dx, t / x), (st.maximum(d, dx), st.maximum(t, x))):
        assert host(got if not isinstance(got, st.SparseTensor) else got.values()).dtype == np.float64
        same(got, want)
    c = make(rng, case, np.complex64, np.int64)
    same(c.cuda() * dx, c * x)  # complex64 with float64: complex128


def _nan_free(a):
    """``a`` with each NaN replaced by one NaN: where the NaNs are is compared, not their bits (an
    x86 NaN result has its sign bit set, an NVIDIA GPU's is 0x7f..f, and neither is wrong)."""
    if a.dtype.kind == "c":
        a = a.view(a.real.dtype)
    if a.dtype.kind == "f":
        a = np.where(np.isnan(a), np.array(np.nan, a.dtype), a)
    return a


def bitwise(got, want):
    """Device tensor ``got`` equals CPU tensor ``want`` bit for bit: pattern, dtype, values (the
    sign of zero included; NaNs where the CPU has them, whatever their payload)."""
    assert got.layout is want.layout and got.shape == want.shape and got.dtype == want.dtype
    for x, y in zip(members(got), members(want)):
        x, y = host(x), np.ascontiguousarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (x, y)
        assert _nan_free(x).tobytes() == _nan_free(y).tobytes(), (x, y)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_rounded_div(backend, rng, case):
    """div with rounding_mode: the CPU's quotients bit for bit, by scalars and by dense operands
    (broadcasting too), integers staying integers, bool dividing as int8."""
    for dtype in (np.int8, np.int32, np.int64, np.uint8, np.bool_, np.float16, np.float32, np.float64):
        t = make(rng, case, np.float64, np.int32 if dtype == np.int8 else np.int64)
        v = np.abs(t.values()) if dtype in (np.uint8, np.bool_) else t.values()
        t = t._replace_values(np.ascontiguousarray(np.round(v * 9)).astype(dtype))
        d = t.cuda()
        x = np.round(dense_like(rng, t.shape, np.float64, nonzero=True) * 3)
        x = (np.abs(x) + 1 if dtype in (np.uint8, np.bool_) else x).astype(dtype)
        scalars = [1, 3] if dtype in (np.uint8, np.bool_) else [3, -4, 2.5]
        for mode in ("floor", "trunc"):
            for s in scalars:
                bitwise(st.div(d, s, rounding_mode=mode), st.div(t, s, rounding_mode=mode))
            bitwise(st.div(d, cuda.DeviceArray.from_host(x), rounding_mode=mode), st.div(t, x, rounding_mode=mode))
            row = np.ascontiguousarray(x[(0,) * (x.ndim - 1)])  # broadcast along every dim but the last
            bitwise(st.div(d, cuda.DeviceArray.from_host(row), rounding_mode=mode), st.div(t, row, rounding_mode=mode))


def test_rounded_div_edges(backend):
    """Rounded quotients of inf, NaN, signed zeros and a zero float divisor; the integer minimum by
    -1 wraps; duplicates are summed before rounding; an integer zero divisor raises
    ZeroDivisionError as on the CPU, and complex values TypeError."""
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 7.5, -7.5, 1e300, -3.0, 5e-324])
    n = special.size
    for dtype in (np.float16, np.float32, np.float64):
        with np.errstate(over="ignore"):
            v = np.repeat(special, n).astype(dtype)
            w = np.tile(special, n).astype(dtype)
        t = st.sparse_coo_tensor(np.arange(n * n)[None], v, size=(n * n,))
        for mode in ("floor", "trunc"):
            bitwise(st.div(t.cuda(), cuda.DeviceArray.from_host(w), rounding_mode=mode),
                    st.div(t, w, rounding_mode=mode))
            for s in (0.0, -0.0, np.inf, 2.0):
                bitwise(st.div(t.cuda(), s, rounding_mode=mode), st.div(t, s, rounding_mode=mode))
    for dtype in (np.int8, np.int64):
        lo = np.iinfo(dtype).min
        t = st.sparse_coo_tensor([[0, 1, 2]], np.array([lo, 7, -7], dtype=dtype), size=(3,))
        for mode in ("floor", "trunc"):
            want = st.div(t, -1, rounding_mode=mode)
            assert want.values()[0] == lo  # wraps, as in PyTorch
            bitwise(st.div(t.cuda(), -1, rounding_mode=mode), want)
    u = st.sparse_coo_tensor([[0, 0, 1]], np.array([4, 3, -7]), size=(2,))  # duplicates: dense [7, -7]
    for mode, want in (("floor", [3, -4]), ("trunc", [3, -3])):
        got = st.div(u.cuda(), 2, rounding_mode=mode)
        assert np.array_equal(got.cpu().to_dense(), want)
        with pytest.raises(ZeroDivisionError):
            st.div(u.cuda(), 0, rounding_mode=mode)
        empty = st.sparse_coo_tensor(np.zeros((1, 0), np.int64), np.zeros(0, np.int64), size=(2,)).cuda()
        assert st.div(empty, 0, rounding_mode=mode).nnz == 0  # no specified element divides by 0
        with pytest.raises(ZeroDivisionError):
            st.div(u.cuda(), cuda.DeviceArray.from_host(np.array([1, 0])), rounding_mode=mode)
        with pytest.raises(TypeError, match="complex"):
            st.div(u.astype(np.complex64).cuda(), 2, rounding_mode=mode)
    with pytest.raises(OverflowError):  # NumPy's refusal of a Python integer out of the dtype's range
        st.div(u.astype(np.int8).cuda(), 300, rounding_mode="floor")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_extremum_with_dense(backend, rng, case):
    for dtype in (np.float32, np.float64, np.int32, np.int8, np.bool_):
        t = make(rng, case, np.float64, np.int64)
        t = t._replace_values(np.ascontiguousarray(t.values() * 4).astype(dtype))
        x = (rng.standard_normal(t.shape) * 4).astype(dtype)
        if np.dtype(dtype).kind == "f":
            x.reshape(-1)[::7] = np.nan
        d, dx = t.cuda(), cuda.DeviceArray.from_host(x)
        same(st.maximum(d, dx), st.maximum(t, x))
        same(st.minimum(dx, d), st.minimum(x, t))


def test_unchecked_and_uncoalesced_operands(backend, rng):
    """An uncoalesced COO keeps its pattern under mul (every copy sampled) and sums its copies
    under add; a compressed tensor whose rows are unsorted is repaired, as on the CPU."""
    idx = np.array([[0, 2, 0, 1], [1, 0, 1, 3]])
    t = st.sparse_coo_tensor(idx, np.array([1.0, 2.0, 3.0, 4.0]), size=(3, 4))
    x = dense_like(rng, (3, 4), np.float64, nonzero=True)
    d, dx = t.cuda(), cuda.DeviceArray.from_host(x)
    same(d * dx, t * x)
    same(d + dx, t + x)
    c = st.sparse_csr_tensor([0, 2, 2, 3], [3, 0, 1], [1.0, 2.0, 3.0], size=(3, 4), check_invariants=False)
    same(c.cuda() * dx, c * x)
    same(c.cuda() + dx, c + x)


def test_coalesced_flag_given_without_a_check_is_checked(backend):
    """A COO flag given with check_invariants=False: the device checks it before an op trusts it,
    with the CPU's C6 (it repaired the tensor silently)."""
    lying = st.sparse_coo_tensor(np.array([[0, 1, 1, 3], [3, 0, 0, 4]]), np.array([1.0, -2.0, 5.0, 4.0]), (4, 5),
                                 check_invariants=False, is_coalesced=True)
    for op in (lambda x: x.coalesce(), st.abs, lambda x: x.to_sparse_csr(), lambda x: st.amax(x, 1),
               st.count_nonzero):
        for x in (lying, lying.cuda()):
            with pytest.raises(st.InvariantError) as e:
                op(x)
            assert e.value.invariant == "C6"


def test_bad_indices_raise(backend, rng):
    """Indices out of bounds raise the CPU's InvariantError instead of reading or writing out of
    the dense operand, with and without check_invariants."""
    x = dense_like(rng, (3, 4), np.float64)
    dx = cuda.DeviceArray.from_host(x)
    bad_coo = st.sparse_coo_tensor(np.array([[0, 3], [1, 0]]), np.array([1.0, 2.0]), size=(3, 4),
                                   check_invariants=False)
    bad_csr = st.sparse_csr_tensor([0, 1, 1, 2], [1, 4], [1.0, 2.0], size=(3, 4), check_invariants=False)
    for t in (bad_coo, bad_csr):
        for op in (lambda a, b: a * b, lambda a, b: a + b, lambda a, b: a / b):
            with pytest.raises(st.InvariantError) as cpu:
                op(t, x)
            with pytest.raises(st.InvariantError) as gpu:
                op(t.cuda(), dx)
            assert gpu.value.invariant == cpu.value.invariant


def test_foreign_device_array(backend, rng):
    """A producer speaking only __cuda_array_interface__ is read in place (no copy)."""
    t = make(rng, ("csr", (), (), None), np.float64, np.int64)
    x = dense_like(rng, t.shape, np.float64, nonzero=True)
    dx = cuda.DeviceArray.from_host(x)
    same(t.cuda() * CAIOnly(dx), t * x)
    same(t.cuda() + CAIOnly(dx), t + x)


def test_zero_dim_device_operand(backend, rng):
    """A 0-d device array stays 0-d (shape ()), and multiplies as the CPU's 0-d array does."""
    s = np.array(1.5)
    ds = cuda.DeviceArray.from_host(s)
    assert ds.shape == () and host(ds).shape == () and host(ds) == 1.5
    t = make(rng, ("csr", (2,), (), None), np.float64, np.int64)
    same(t.cuda() * ds, t * s)


def test_refusals(backend, rng):
    t = make(rng, ("csr", (), (), None), np.float64, np.int64)
    d = t.cuda()
    x = dense_like(rng, t.shape, np.float64)
    dx = cuda.DeviceArray.from_host(x)
    with pytest.raises(ValueError, match="cuda"):
        d + x  # a host array with a device tensor: nothing moves silently
    with pytest.raises(ValueError, match="cuda"):
        t * dx
    with pytest.raises(NotImplementedError, match="dense device array"):
        st.add(dx, dx)
    with pytest.raises(ValueError, match="shape"):
        d + cuda.DeviceArray.from_host(np.ones((2, 2)))
    with pytest.raises(ValueError, match="broadcast"):
        d * cuda.DeviceArray.from_host(np.ones(3))
    ti = t._replace_values(np.arange(t.nnz, dtype=np.int64))  # integers: exact, as on the CPU
    xi = np.arange(math.prod(t.shape), dtype=np.int64).reshape(t.shape)
    same(ti.cuda() * cuda.DeviceArray.from_host(xi), ti * xi)
    with pytest.raises(TypeError, match="complex"):
        st.maximum(d, cuda.DeviceArray.from_host(np.ones(t.shape, np.complex128)))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_sparse_mask_of_dense(backend, rng, case):
    for index_dtype in INDEX:
        for dtype in (np.float64, np.complex64, np.int16, np.bool_):
            mask = make(rng, case, np.float64, index_dtype)
            x = (rng.standard_normal(mask.shape) * 5).astype(dtype)
            got = st.sparse_mask(cuda.DeviceArray.from_host(x), mask.cuda())
            same(got, st.sparse_mask(x, mask))
            assert got.dtype == dtype


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_sparse_mask_of_sparse(backend, rng, case):
    """t and the mask with overlapping patterns (half of the mask's elements specified in t), t in
    every layout the mask's shape allows."""
    for index_dtype in INDEX:
        mask = make(rng, case, np.float64, index_dtype)
        dense = rng.standard_normal(mask.shape)
        mdense = mask.to_dense()
        keep = (rng.random(mask.shape) < 0.5) | (mdense == 0)
        src = np.where(keep, dense, 0) * (rng.random(mask.shape) < 0.7)
        layouts = [("coo", None)] if case[0] == "coo" else [("coo", None), (case[0], case[3])]
        for layout, bs in layouts:
            if layout == "coo":
                t = st.from_dense(src, "coo", dense_dim=mask.dense_dim, index_dtype=index_dtype)
            elif mask.batch_dim:  # batches need one nnz: a pattern of its own
                t = make(rng, case, np.float64, index_dtype)
            else:
                t = st.from_dense(src, layout, blocksize=bs, batch_dim=mask.batch_dim, dense_dim=mask.dense_dim,
                                  index_dtype=index_dtype)
            want = t.sparse_mask(mask)
            same(t.cuda().sparse_mask(mask.cuda()), want)
            same(st.sparse_mask(t.cuda(), mask.cuda()), want)


def test_sparse_mask_uncoalesced_and_refusals(backend, rng):
    idx = np.array([[0, 2, 0, 1], [1, 0, 1, 3]])
    mask = st.sparse_coo_tensor(idx, np.ones(4), size=(3, 4))
    x = rng.standard_normal((3, 4))
    same(st.sparse_mask(cuda.DeviceArray.from_host(x), mask.cuda()), st.sparse_mask(x, mask))
    t = st.from_dense(x * (rng.random((3, 4)) < 0.5), "csr")
    same(st.sparse_mask(t.cuda(), mask.cuda()), st.sparse_mask(t, mask))
    c = st.sparse_csr_tensor([0, 2, 2, 3], [3, 0, 1], [1.0, 2.0, 3.0], size=(3, 4), check_invariants=False)
    same(st.sparse_mask(cuda.DeviceArray.from_host(x), c.cuda()), st.sparse_mask(x, c))  # repaired, as on the CPU
    bad = st.sparse_coo_tensor(np.array([[0, 3], [1, 0]]), np.ones(2), size=(3, 4), check_invariants=False)
    with pytest.raises(st.InvariantError):
        st.sparse_mask(cuda.DeviceArray.from_host(x), bad.cuda())
    d = t.cuda()
    with pytest.raises(ValueError, match="cuda"):
        st.sparse_mask(x, d)  # a host array with a device mask: nothing moves
    with pytest.raises(ValueError, match="cuda"):
        st.sparse_mask(d, t)
    with pytest.raises(ValueError, match="shapes"):
        st.sparse_mask(cuda.DeviceArray.from_host(np.ones((2, 2))), d)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_inplace_ops(backend, rng, case):
    """zero_, copy_ (from a sparse tensor of another layout or a dense device array) and resize_as_
    of device tensors give the CPU's tensors, on the device, without writing the old arrays."""
    t = make(rng, case, np.float64, np.int64)
    u = make(rng, case, np.float32, np.int32)
    d = t.cuda()
    old = members(d)[-1]
    kept = host(old).copy()
    z = make(rng, case, np.float64, np.int64)
    assert d.zero_() is d
    same(d, z.zero_())
    assert d.nnz == 0 and np.array_equal(host(old), kept)  # the old values were not written
    d = t.cuda()
    d.copy_(u.cuda())
    c = make(rng, case, np.float64, np.int64)
    c.copy_(u)
    same(d, c)
    x = make(rng, case, np.float64, np.int64).to_dense()  # batches of one nnz
    d2, c2 = t.cuda(), make(rng, case, np.float64, np.int64)
    d2.copy_(cuda.DeviceArray.from_host(x))
    c2.copy_(x)
    same(d2, c2)
    with pytest.raises(ValueError, match="cuda"):
        t.cuda().copy_(x)  # a host source with a device dst: nothing moves silently
    e = make(rng, case, np.float64, np.int64)
    de = e.cuda()
    bigger = st.from_dense(np.zeros(tuple(s + (2 if i == e.ndim - 1 - e.dense_dim else 0) for i, s in
                                          enumerate(e.shape))), "coo", dense_dim=e.dense_dim)
    if case[0] in ("coo", "csr"):
        same(de.resize_as_(bigger), e.resize_as_(bigger))  # the last sparse dim grows: arrays as they are
    elif case[0] == "csc" and e.nnz:
        with pytest.raises(NotImplementedError, match="growing its compressed dim"):
            de.resize_as_(bigger)
    empty = st.from_dense(np.zeros((6, 4)), "coo")
    z, dz = make(rng, ("csr", (), (), None), np.float64, np.int64), None
    z.zero_()
    dz = z.cuda()
    same(dz.resize_as_(empty), z.resize_as_(empty))


@pytest.mark.parametrize("layout,bs", [("csr", None), ("csc", None), ("bsr", (2, 1)), ("coo", None)])
def test_linear(backend, rng, layout, bs):
    """st.linear (x @ w.mT + bias) with a sparse weight on the device: 1-d, 2-d and 3-d inputs, a
    bias of one dim or of the output's two, mixed dtypes; a bias broadcasting over 3-d outputs is
    refused by name."""
    w0 = rng.standard_normal((6, 4)) * (rng.random((6, 4)) < 0.5)
    w = st.from_dense(w0, layout, blocksize=bs) if bs else st.from_dense(w0, layout)
    dw = w.cuda()
    for shape in ((4,), (3, 4), (2, 3, 4)):
        x = rng.standard_normal(shape)
        dx = cuda.DeviceArray.from_host(x)
        same(st.linear(dx, dw), st.linear(x, w))
        b = rng.standard_normal(6)
        same(st.linear(dx, dw, cuda.DeviceArray.from_host(b)), st.linear(x, w, b))
    x2 = rng.standard_normal((3, 4)).astype(np.float32)
    b2 = rng.standard_normal((3, 6))
    same(st.linear(cuda.DeviceArray.from_host(x2), dw, cuda.DeviceArray.from_host(b2)), st.linear(x2, w, b2))
    with pytest.raises(NotImplementedError, match="bias of shape"):
        st.linear(cuda.DeviceArray.from_host(rng.standard_normal((2, 3, 4))), dw,
                  cuda.DeviceArray.from_host(rng.standard_normal((3, 6))))
    with pytest.raises(ValueError, match="cuda"):
        st.linear(rng.standard_normal((3, 4)), dw)
    none = st.from_dense(np.zeros((0, 4)), layout, **({"blocksize": (1, 1)} if bs else {}))  # no out features
    x = rng.standard_normal((3, 4))
    same(st.linear(cuda.DeviceArray.from_host(x), none.cuda(), cuda.DeviceArray.from_host(np.zeros(0))),
         st.linear(x, none, np.zeros(0)))


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_a_zero_dim_device_array_is_a_scalar(backend, rng, layout):
    """A 0-d device array operand is a scalar, as a 0-d host array is on the CPU: mul/div scale
    (an uncoalesced tensor keeps its duplicates, as with the host scalar), add/sub/maximum/minimum
    refuse it with the CPU's NotImplementedError; with a host tensor it is a device mix."""
    t = st.sparse_coo_tensor(np.array([[1, 0, 1], [0, 0, 0]]), np.array([1.0, 2.0, 4.0]), size=(2, 2))
    t = t if layout == "coo" else t.coalesce().to_sparse_csr()
    for s in (np.array(3.0), np.array(-2, np.int64)):
        sd = cuda.DeviceArray.from_host(s)
        for op in (st.mul, st.div):
            got, want = op(t.cuda(), sd), op(t, s)
            assert got.is_coalesced() == want.is_coalesced() and got.dtype == want.dtype
            np.testing.assert_array_equal(got.to_dense().get(), want.to_dense())
        for op in (st.add, st.sub, st.maximum, st.minimum):
            with pytest.raises(NotImplementedError) as e:
                op(t, s)
            with pytest.raises(NotImplementedError) as got:
                op(t.cuda(), sd)
            assert str(got.value).replace(" on cuda:0", "") == str(e.value)
        with pytest.raises(ValueError, match="different devices"):
            st.mul(t, sd)
