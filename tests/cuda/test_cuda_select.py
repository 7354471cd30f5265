"""narrow, index_select and cat of compressed tensors on CUDA (kernels/select.cu) through the one
op path (``st.narrow(t, ...)``, ``t.narrow(...)``, ``st.index_select``, ``st.cat``), against the
CPU backend: members bitwise, flags and values exactly. Batched inputs share one pattern across
their batches (so every result has one nnz per batch) with different values; the errors are the
CPU's; what the GPU lacks raises NotImplementedError naming the op; no device path copies to
the host (DeviceArray.get and __array__ raise while the ops run). Runs on a GPU or on the kernel
emulator (see test_cuda.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda import _primitives
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import INDEX, assert_same, make

DTYPES = [np.dtype(d) for d in ("float32", "float64", "complex128", "int64", "bool")]
# (layout, batch, dense, blocksize)
SHAPES = [((), (), None), ((2,), (), None), ((2, 3), (2,), None)]
LAYOUTS = [("csr", None), ("csc", None), ("bsr", (2, 1)), ("bsc", (1, 2)), ("bsr", (2, 3))]
CASES = [(lay, b, d, bs) for lay, bs in LAYOUTS for b, d, _ in SHAPES]
CASE_IDS = [f"{c[0]}{'' if c[3] is None else '%dx%d' % c[3]}-b{len(c[1])}-d{len(c[2])}" for c in CASES]


def _values(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind == "i":
        return rng.integers(-50, 50, shape).astype(dtype)
    v = rng.standard_normal(shape)
    if dtype.kind == "c":
        v = v + 1j * rng.standard_normal(shape)
    return v.astype(dtype)


def batched(rng, case, dtype, index_dtype, blocks=(4, 5)):
    """A CPU tensor of ``case`` whose batches share one random pattern (values differ)."""
    layout, batch, dense, bs = case
    base = make(rng, (layout, (), dense, bs), np.float64, index_dtype, blocks=blocks)
    c, p = base.compressed_indices(), base.plain_indices()
    v = _values(rng, batch + base.values().shape, np.dtype(dtype))
    return st.sparse_compressed_tensor(np.broadcast_to(c, batch + c.shape).copy(),
                                       np.broadcast_to(p, batch + p.shape).copy(), v, batch + base.shape,
                                       layout=getattr(st, f"sparse_{layout}"))


def both(call, t, *more):
    """``call`` on the CPU tensors and on their device copies: the results agree (or the errors)."""
    try:
        want = call(t, *more)
    except (ValueError, IndexError) as e:
        with pytest.raises(type(e)) as got:
            call(t.cuda(), *(m.cuda() for m in more))
        assert str(got.value) == str(e)
        return None
    got = call(t.cuda(), *(m.cuda() for m in more))
    assert got.device == "cuda:0"
    assert_same(got, want)
    return got


def over_cases(test):
    """``test`` over every case x index dtype x value dtype."""
    for name, values, ids in (("dtype", DTYPES, str), ("index_dtype", INDEX, lambda d: np.dtype(d).name),
                              ("case", CASES, CASE_IDS)):
        test = pytest.mark.parametrize(name, values, ids=ids)(test)
    return test


def _sparse_dims(t):
    m = t.batch_dim
    return [(m, t.blocksize[0]), (m + 1, t.blocksize[1])]


@over_cases
def test_narrow(backend, rng, case, index_dtype, dtype):
    t = batched(rng, case, dtype, index_dtype)
    for dim, bs in _sparse_dims(t):
        size = t.shape[dim]
        for start, length in [(0, size), (bs, 2 * bs), (size - bs, bs), (2 * bs, 0), (-2 * bs, bs)]:
            both(lambda x: st.narrow(x, dim, start, length), t)
            both(lambda x: x.narrow(dim, start, length), t)
        if bs > 1:
            with pytest.raises(ValueError, match="multiples"):
                t.cuda().narrow(dim, 1, bs)


@over_cases
def test_index_select(backend, rng, case, index_dtype, dtype):
    t = batched(rng, case, dtype, index_dtype)
    for dim, bs in _sparse_dims(t):
        size = t.shape[dim]
        if bs != 1:
            with pytest.raises(NotImplementedError, match="index_select"):
                st.index_select(t.cuda(), dim, [0])
            continue
        for index in ([size - 1, 0, size - 1, 1, 1], list(range(size)), [2, 2, 0], [],
                      np.array([3, 1], dtype=np.int32), rng.integers(0, size, 9), [-1, 0, -size]):
            both(lambda x: st.index_select(x, dim, index), t)
        both(lambda x: x.index_select(dim, [1, 0]), t)


@over_cases
def test_cat(backend, rng, case, index_dtype, dtype):
    a = batched(rng, case, dtype, index_dtype)
    b = batched(rng, case, dtype, index_dtype)
    for k, (dim, _) in enumerate(_sparse_dims(a)):
        c = batched(rng, case, dtype, index_dtype, blocks=((3, 5), (4, 2))[k])  # other size along dim
        both(lambda x, y: st.cat([x, y], dim), a, b)
        both(lambda x, y, z: st.cat([x, y, z], dim), a, c, b)
        both(lambda x: st.cat([x], dim), a)


def test_cat_mixed_index_dtypes_and_values(backend, rng):
    a = batched(rng, ("csr", (2,), (), None), np.float32, np.int32)
    b = batched(rng, ("csr", (2,), (), None), np.float64, np.int64)
    for dim in (1, 2):
        both(lambda x, y: st.cat([x, y], dim), a, b)


def test_cat_mixed_layouts(backend, rng):
    """A bsr operand of a csr cat is expanded on the device first (as on the CPU)."""
    eye = st.from_dense(np.eye(4), "bsr", blocksize=(2, 2))
    csr = st.from_dense(np.arange(16.0).reshape(4, 4) % 3, "csr")
    for dim in (0, 1):
        both(lambda x, y: st.cat([x, y], dim), csr, eye)


def test_unequal_batch_nnz(backend, rng):
    # batch 0 has entries in row 0 only, batch 1 in row 1 only: every row selection differs
    c = np.array([[0, 2, 2], [0, 0, 2]])
    p = np.array([[0, 1], [1, 2]])
    t = st.sparse_csr_tensor(c, p, np.arange(1.0, 5.0).reshape(2, 2), (2, 2, 3))
    for call in (lambda x: st.narrow(x, 1, 0, 1), lambda x: st.narrow(x, 2, 0, 1),
                 lambda x: st.index_select(x, 1, [0]), lambda x: st.index_select(x, 2, [0, 0])):
        with pytest.raises(ValueError, match="same nnz"):
            call(t)
        both(call, t)


def test_out_of_range(backend, rng):
    t = batched(rng, ("csr", (2,), (), None), np.float64, np.int64)
    for call in (lambda x: st.index_select(x, 1, [0, 4]), lambda x: st.index_select(x, 2, [-x.shape[2] - 1]),
                 lambda x: st.narrow(x, 1, 3, 2), lambda x: st.narrow(x, 2, -6, 1), lambda x: x.narrow(2, 0, -1)):
        with pytest.raises(IndexError):
            call(t)
        both(call, t)


def test_mixed_devices(backend, rng):
    a = batched(rng, ("csr", (), (), None), np.float64, np.int64)
    for tensors in ([a, a.cuda()], [a.cuda(), a]):
        with pytest.raises(ValueError, match="different devices"):
            st.cat(tensors, 0)


def test_device_index(backend, rng):
    """An index array on the device gives the CPU's result (tests/cuda/test_cuda_more_ops.py has
    the rest: errors, every layout)."""
    t = batched(rng, ("csr", (2,), (2,), None), np.float64, np.int64)
    assert_same(st.index_select(t.cuda(), 1, DeviceArray.from_host(np.array([0]))), st.index_select(t, 1, [0]))
    neg = np.array([-1, 0, -2], dtype=np.int32)  # negatives count from the end, wrapped on the device
    assert_same(st.index_select(t.cuda(), 2, DeviceArray.from_host(neg)), st.index_select(t, 2, neg))
    with pytest.raises(IndexError, match="out of range"):
        st.index_select(t.cuda(), 2, DeviceArray.from_host(np.array([0, -t.shape[2] - 1])))


def without_host_copies(monkeypatch, max_read: int, calls) -> list:
    """The results of ``calls`` (no-argument functions), run where only ``read_ints`` of at most
    ``max_read`` numbers reaches the host: any other copy (DeviceArray.get, np.asarray of a
    DeviceArray) fails the test, and some read must happen."""
    get = DeviceArray.get
    small = []

    def read_ints(dev, arr):
        assert arr.size <= max_read, arr.shape
        small.append(arr.size)
        return get(arr)

    def refuse(self, *args, **kwargs):
        raise AssertionError("a device path copied a DeviceArray to the host")

    monkeypatch.setattr(_primitives, "read_ints", read_ints)
    monkeypatch.setattr(DeviceArray, "get", refuse)
    monkeypatch.setattr(DeviceArray, "__array__", refuse)
    try:
        return [call() for call in calls]
    finally:
        monkeypatch.undo()
        assert small


def test_no_host_copies(backend, rng, monkeypatch):
    """The device paths read only the per-batch nnz (read_ints of B + 1 numbers)."""
    case = ("bsr", (2,), (2,), (1, 1))
    a = batched(rng, case, np.complex128, np.int32)
    b = batched(rng, case, np.complex128, np.int32)
    da, db = a.cuda(), b.cuda()
    results = without_host_copies(monkeypatch, math.prod(a.shape[:a.batch_dim]) + 1, [
        lambda: st.narrow(da, 1, 1, 2), lambda: da.narrow(2, 1, 3), lambda: st.index_select(da, 1, [3, 0, 3]),
        lambda: st.index_select(da, 2, [4, 0, 2, 2]), lambda: st.cat([da, db], 1), lambda: st.cat([da, db, da], 2)])
    wants = [st.narrow(a, 1, 1, 2), a.narrow(2, 1, 3), st.index_select(a, 1, [3, 0, 3]),
             st.index_select(a, 2, [4, 0, 2, 2]), st.cat([a, b], 1), st.cat([a, b, a], 2)]
    for got, want in zip(results, wants):
        assert_same(got, want)


def test_unchecked_input_is_repaired(backend, rng):
    """An input built without the check, with unsorted plain indices (5.6 only), is repaired on the
    device first, as on the CPU."""
    c, p, v = np.array([0, 2, 3]), np.array([2, 0, 1]), np.array([1.0, 2.0, 3.0])
    t = st.sparse_csr_tensor(c, p, v, (2, 3), check_invariants=False)
    d = t.cuda()
    assert not d.is_coalesced()
    assert_same(st.narrow(d, 1, 0, 2), st.narrow(t, 1, 0, 2))
    assert_same(st.index_select(d, 0, [1, 0]), st.index_select(t, 0, [1, 0]))


def test_edge_shapes(backend, rng):
    """A batch of size 0, zero rows or columns, a dense dim of size 0, other value dtypes."""
    empty_batch = st.from_dense(np.zeros((0, 3, 4)), "csr", batch_dim=1)
    no_rows = st.from_dense(np.zeros((0, 4)), "csr")
    no_cols = st.from_dense(np.zeros((3, 0)), "csc")
    no_items = st.sparse_csr_tensor(np.array([0, 1, 2, 2]), np.array([1, 3]), np.zeros((2, 0)), (3, 4, 0))
    for t in (empty_batch, no_rows, no_cols, no_items):
        m = t.batch_dim
        for dim in (m, m + 1):
            size = t.shape[dim]
            both(lambda x: st.narrow(x, dim, size // 2, size - size // 2), t)
            both(lambda x: st.index_select(x, dim, [size - 1, 0] if size else []), t)
            both(lambda x: st.cat([x, x], dim), t)
    for dtype in (np.float16, np.complex64, np.int8, np.uint8):
        t = st.from_dense((np.arange(20).reshape(4, 5) % 3).astype(dtype), "csc")
        both(lambda x: st.index_select(x, 1, [4, 0, 4]), t)
        both(lambda x: st.narrow(x, 0, 1, 2), t)
        both(lambda x, y: st.cat([x, y, x], 0), t, t)


# -- transposes of batch and dense dims -----------------------------------------------------------

@pytest.mark.parametrize("case", [("csr", (2, 3, 2), (2, 3), None), ("bsc", (3, 2), (2,), (2, 1)),
                                  ("coo", (), (2, 2, 3), None), ("coo", (2,), (3, 2), None)],
                         ids=["csr-b3-d2", "bsc-b2-d1", "coo-d3", "coo-s3-d2"])
def test_transpose_every_pair_of_one_kind(backend, rng, case):
    """Every pair of batch dims, of sparse dims and of dense dims (adjacent or not) on the device:
    the CPU's tensor, its members on the device; a pair of two kinds: the CPU's error."""
    t = make(rng, case, np.float32, np.int32)
    d = t.cuda()
    for a in range(t.ndim):
        for b in range(t.ndim):
            try:
                want = st.transpose(t, a, b)
            except NotImplementedError as e:
                with pytest.raises(NotImplementedError) as got:
                    st.transpose(d, a, b)
                assert str(got.value) == str(e)
                continue
            got = st.transpose(d, a, b)
            assert all(isinstance(m, DeviceArray) for m in _members(got))
            assert_same(got, want)


def _members(t):
    return [t.indices(), t.values()] if t.layout is st.sparse_coo else \
        [t.compressed_indices(), t.plain_indices(), t.values()]


def test_a_tensor_never_spans_the_host_and_a_device(backend):
    from sparsetensor._core._tensor import COOTensor, CompressedTensor

    v = DeviceArray.from_host(np.ones(2))
    with pytest.raises(ValueError, match="host and on a device"):
        CompressedTensor(np.array([0, 1, 2]), np.array([0, 1]), v, (2, 2), st.sparse_csr)
    with pytest.raises(ValueError, match="host and on a device"):
        COOTensor(DeviceArray.from_host(np.zeros((1, 2), np.int64)), np.ones(2), (3,))


def test_device_array_swapaxes_and_T(backend, rng):
    """Any pair of axes (adjacent or not) and the reversed axes of ``T``: NumPy's, in new contiguous arrays."""
    x = rng.standard_normal((2, 3, 4, 5))
    d = DeviceArray.from_host(x)
    for a in range(4):
        for b in range(4):
            np.testing.assert_array_equal(d.swapaxes(a, b).get(), x.swapaxes(a, b))
    for y in (x, x[0], x[0, 0], x[0, 0, 0]):
        np.testing.assert_array_equal(DeviceArray.from_host(y).T.get(), y.T)


@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
@pytest.mark.parametrize("index_dtype", INDEX, ids=str)
def test_index_select_along_a_wide_dim(backend, rng, layout, index_dtype):
    """A dim far wider than the index and the entries: the map covers the index's distinct values
    (index_slots), with the CPU's results."""
    n, rows = 1 << 21, 3
    for _ in range(4):
        nnz = int(rng.integers(1, 30))
        r, c = rng.integers(0, rows, nnz), rng.integers(0, n, nnz)
        idx = np.concatenate([rng.choice(c, 5), rng.integers(0, n, 3), [n - 1, 0]])
        idx = np.concatenate([idx, idx[:2]]) if rng.random() < 0.5 else np.sort(idx)
        t = st.sparse_coo_tensor(np.stack([r, c]), rng.random(nnz), size=(rows, n)).coalesce()
        t = (t if layout == "coo" else t.to_sparse(layout)).to(index_dtype=index_dtype)
        for dim in (1, 0) if layout == "coo" else (1,):
            want = st.index_select(t, dim, idx if dim == 1 else idx % rows)
            got = st.index_select(t.cuda(), dim, idx if dim == 1 else idx % rows)
            assert_same(got, want)
