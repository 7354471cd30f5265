"""select, nonzero, count_nonzero, stack, ``t[key]``, index_select of COO and selection along
batch and dense dims on CUDA (kernels/select.cu), through the one op path, against the CPU
backend: members bitwise, flags, values exactly; dense results (a COO tensor that loses its last
sparse dim, nonzero, count_nonzero per dim) are device arrays equal to the CPU's arrays. Errors
are the CPU's; what the GPU lacks raises NotImplementedError naming it; no path copies to the
host beyond the small counts it reads. Runs on a GPU or on the kernel emulator (see test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import INDEX, assert_same, host
from test_cuda_select import CASE_IDS, CASES, DTYPES, batched, without_host_copies


def over_cases(test):
    """``test`` over every case x index dtype x value dtype."""
    for name, values, ids in (("dtype", DTYPES, str), ("index_dtype", INDEX, lambda d: np.dtype(d).name),
                              ("case", CASES, CASE_IDS)):
        test = pytest.mark.parametrize(name, values, ids=ids)(test)
    return test


def agree(call, *tensors):
    """``call`` on the CPU tensors and on their device copies: equal results (sparse: bitwise
    members; arrays: a DeviceArray equal to the CPU's array; ints: equal) or the same error."""
    try:
        want = call(*tensors)
    except (ValueError, IndexError, TypeError, NotImplementedError) as e:
        with pytest.raises(type(e)) as got:
            call(*(t.cuda() for t in tensors))
        assert str(got.value) == str(e)
        return None
    got = call(*(t.cuda() for t in tensors))
    if isinstance(want, st.SparseTensor):
        assert got.device == "cuda:0"
        assert_same(got, want)
    elif isinstance(want, (np.ndarray, np.generic)):
        assert isinstance(got, DeviceArray), type(got)
        g, w = host(got), np.asarray(want)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert (g.reshape(-1).view(np.uint8) == np.ascontiguousarray(w).reshape(-1).view(np.uint8)).all()
    else:
        assert type(got) is type(want) and got == want
    return got


def _sources(t):
    """``t`` and its COO form (batch dims as leading sparse dims)."""
    return [t, t.to_sparse("coo")]


def _every_dim(t):
    """(tensor, dim, size) over every dim of ``t`` and of its COO form."""
    return [(src, dim, src.shape[dim]) for src in _sources(t) for dim in range(src.ndim)]


@over_cases
def test_nonzero_and_count_nonzero(backend, rng, case, index_dtype, dtype):
    t = batched(rng, case, dtype, index_dtype)
    for src in _sources(t):
        agree(st.nonzero, src)
        agree(st.count_nonzero, src)
        for dim in list(range(src.ndim)) + [(0, src.ndim - 1), tuple(range(src.ndim)), -1]:
            agree(lambda x: st.count_nonzero(x, dim=dim), src)
        agree(lambda x: x.count_nonzero(dim=src.ndim), src)  # out of range: the CPU's IndexError


def test_nonzero_signed_zero_nan_and_duplicates(backend):
    """-0.0 is zero, NaN is not, complex counts either part; an uncoalesced COO is summed first."""
    v = np.array([-0.0, np.nan, 0.0, 1.0, -2.0])
    t = st.sparse_coo_tensor(np.array([[0, 1, 2, 3, 3]]), v, (5,))
    agree(st.nonzero, t)
    agree(st.count_nonzero, t)
    c = st.sparse_csr_tensor(np.array([0, 2, 3]), np.array([0, 1, 1]), np.array([0j, -0.0 + 1j, 2 + 0j]), (2, 2))
    agree(st.nonzero, c)
    dup = st.sparse_coo_tensor(np.array([[0, 1, 0, 2], [1, 1, 1, 0]]), np.array([1.0, 0.0, -1.0, 3.0]), (3, 2))
    agree(st.nonzero, dup)
    agree(lambda x: st.count_nonzero(x, dim=0), dup)
    empty = st.from_dense(np.zeros((0, 3)), "csr")
    agree(st.nonzero, empty)
    agree(lambda x: st.count_nonzero(x, dim=1), empty)


@over_cases
def test_select(backend, rng, case, index_dtype, dtype):
    t = batched(rng, case, dtype, index_dtype)
    for src, dim, size in _every_dim(t):
        for i in (0, size - 1, -1, size // 2, size, -size - 1):
            agree(lambda x: st.select(x, dim, i), src)
    agree(lambda x: x.select(-1, 0), t)


def test_select_to_dense_and_scalars(backend, rng):
    """A COO tensor that loses its last sparse dim: a dense device array (duplicates summed); a
    full index: a 0-d device array."""
    t = st.sparse_coo_tensor(np.array([[2, 0, 2]]), np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), (4, 2))
    for i in range(4):
        agree(lambda x: st.select(x, 0, i), t)
    agree(lambda x: x[2], t)
    agree(lambda x: x[2, 1], t)
    m = st.from_dense(np.array([[1, 0, 2], [0, 3, 0]]), "csr")
    agree(lambda x: x[1, 1], m)
    agree(lambda x: x[0, 1], m)


@over_cases
def test_index_select_and_narrow_every_dim(backend, rng, case, index_dtype, dtype):
    """Along batch and dense dims (every layout) and the sparse dims of COO."""
    t = batched(rng, case, dtype, index_dtype)
    for src, dim, size in _every_dim(t):
        if src.layout.compressed and src.batch_dim <= dim < src.batch_dim + 2:
            continue  # test_cuda_select.py
        for index in ([size - 1, 0, size - 1], list(range(size)), [], np.array([1], dtype=np.int32), [size], [-1],
                      [-size - 1]):
            agree(lambda x: st.index_select(x, dim, index), src)
        for start, length in ((0, size), (1, size - 1), (size - 1, 1), (1, 0), (-1, 1), (1, size)):
            agree(lambda x: st.narrow(x, dim, start, length), src)


def test_index_select_coo_uncoalesced(backend):
    """An uncoalesced COO keeps its entry order (each entry's copies by ascending position)."""
    t = st.sparse_coo_tensor(np.array([[2, 0, 2, 1], [1, 1, 0, 1]]), np.arange(1.0, 5.0), (3, 2))
    for dim in (0, 1):
        agree(lambda x: st.index_select(x, dim, [1, 0, 1]), t)
        agree(lambda x: st.index_select(x, dim, [0]), t)
        agree(lambda x: st.select(x, dim, 1), t)
        agree(lambda x: st.narrow(x, dim, 1, 1), t)


@over_cases
def test_stack_and_cat_every_dim(backend, rng, case, index_dtype, dtype):
    a = batched(rng, case, dtype, index_dtype)
    b = a._replace_values(np.ascontiguousarray(a.values()[::-1]))  # one pattern, other values
    for x, y in ((a, b), (a.to_sparse("coo"), b.to_sparse("coo"))):
        for dim in range(x.ndim + 1):
            agree(lambda p, q: st.stack([p, q, p], dim), x, y)
        for dim in range(x.ndim):
            agree(lambda p, q: st.cat([p, q], dim), x, y)


def test_cat_different_patterns_along_dense_dims(backend, rng):
    """Patterns that differ: COO zero-pads the values; compressed goes through the union (float,
    integer and bool values, as on the CPU)."""
    a = batched(rng, ("csr", (), (2,), None), np.float64, np.int64)
    b = batched(rng, ("csr", (), (2,), None), np.float64, np.int64)
    agree(lambda p, q: st.cat([p, q], 2), a, b)
    agree(lambda p, q: st.stack([p, q], 2), a.to_sparse("coo"), b.to_sparse("coo"))
    agree(lambda p, q: st.cat([p, q, p], 2), a.to_sparse("coo"), b.to_sparse("coo"))
    for dtype in (np.int64, np.uint8, np.bool_):
        ai, bi = (x._replace_values((10 * x.values()).astype(dtype)) for x in (a, b))
        assert st.cat([ai, bi], 2).nnz
        agree(lambda p, q: st.cat([p, q, p], 2), ai, bi)
        agree(lambda p, q: st.cat([p, q], 2), ai.to_sparse("bsr", blocksize=(1, 1)), bi.to_sparse("bsr", blocksize=(1, 1)))


_KEYS = [0, -1, (1, 2), (slice(None), 1), (1, 2, 3), (0, 1, 2, 1), (..., 1), (slice(1, 3),), (slice(None, None, 2),),
         ([2, 0, 2],), (slice(None), [3, 1]), (slice(None), slice(None), [5, 0]), (1, 2, [1, 0]), (0, 0, slice(1, 4)),
         (0, 0, slice(None), 1), (2, 3, slice(None, None, -1)), (slice(None), slice(0, 2), slice(2, 6)),
         (5,), (0, 9), (0, 0, 0, 7), ([0, 3],), (0, 0, [9])]


@pytest.mark.parametrize("layout,kw", [("csr", dict(batch_dim=1, dense_dim=1)), ("coo", dict(dense_dim=1)),
                                       ("bsr", dict(batch_dim=1, blocksize=(2, 2), dense_dim=1)),
                                       ("csc", dict(batch_dim=1, dense_dim=1))], ids=["csr", "coo", "bsr", "csc"])
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
def test_getitem(backend, rng, layout, kw, index_dtype):
    one = rng.integers(-2, 3, (4, 6, 2)).astype(np.float64)
    t = st.from_dense(np.stack([one, 2 * one, -one]), layout, index_dtype=index_dtype, **kw)
    for key in _KEYS:
        agree(lambda x: x[key], t)


def test_refused(backend, rng):
    t = batched(rng, ("csr", (2,), (2,), None), np.float64, np.int64).cuda()
    with pytest.raises(NotImplementedError, match="stack of csr tensors at dim 2"):
        st.stack([t, t], 2)


def test_device_index_arrays(backend, rng):
    """An index array on the device: the CPU's results with the host copy of the index, and a host
    tensor with a device index raises ValueError naming both devices (tests/cuda/test_cuda_more_ops.py
    has the rest)."""
    c = batched(rng, ("csr", (2,), (2,), None), np.float64, np.int64)
    t = c.cuda()
    index = DeviceArray.from_host(np.array([0]))
    assert_same(st.index_select(t, 1, index), st.index_select(c, 1, np.array([0])))
    assert_same(t[index], c[np.array([0])])
    for call in (lambda: st.index_select(c, 1, index), lambda: c[index], lambda: c[:, index]):
        with pytest.raises(ValueError, match="different devices: cpu and cuda"):
            call()


@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
def test_selection_along_a_long_dim(backend, monkeypatch, layout):
    """A dim of 2**40 (and one just past the slot plan's bound): index_select by a device index
    array (repeats, unsorted, empty) maps slots of its distinct values, sorted on the device (it
    raised AttributeError: DeviceArray has no min); narrow and slices of a COO dim keep the entries
    in range (they built an arange of the dim's length on the host). Work of the entries and the
    index, nothing but counts read back."""
    for n in (70_000, 2**40):
        t = st.sparse_coo_tensor(np.array([[5, 7, n - 1, 7], [0, 2, 1, 0]]), np.arange(1.0, 5.0), (n, 3))
        dim = 0  # the long dim is a plain dim of csr and csc (their compressed index is of the short one)
        if layout == "csr":
            t, dim = t.coalesce().mT.to_sparse(layout), 1
        elif layout == "csc":  # the csr of its transpose, seen as csc (no conversion of 2**40 rows)
            t = t.coalesce().mT.to_sparse("csr").mT
            assert t.layout == st.sparse_csc
        d = t.cuda()
        picks = [np.array([n - 1, 5, 7, 5, 6]), np.array([], np.int64), np.array([7])]
        calls = [lambda i=i: st.index_select(d, dim, DeviceArray.from_host(i)) for i in picks]
        wants = [st.index_select(t, dim, i) for i in picks]
        if layout == "coo":
            calls += [lambda: st.narrow(d, 0, 6, n - 6), lambda: d[6:], lambda: d[:n - 1]]
            wants += [st.narrow(t, 0, 6, n - 6), t[6:], t[:n - 1]]
        for got, want in zip(without_host_copies(monkeypatch, 6, calls), wants):
            assert_same(got, want)
        monkeypatch.undo()


def test_op_bodies_take_device_tensors(backend, rng):
    """vjp's rules call select and nonzero past the op table: their bodies run on the device."""
    from sparsetensor.ops import select

    t = batched(rng, ("csr", (), (), None), np.float64, np.int64)
    d = t.cuda()
    assert_same(select.select(d, 0, 1), select.select(t, 0, 1))
    assert (select.nonzero(d).get() == select.nonzero(t)).all()
    assert select.count_nonzero(d) == select.count_nonzero(t)


def test_no_host_copies(backend, rng, monkeypatch):
    """Only small counts reach the host (one number, B + 1 per-batch nnz, a validation report)."""
    a = batched(rng, ("csr", (2,), (2,), None), np.complex128, np.int32)
    c = a.to_sparse("coo")
    da, dc = a.cuda(), c.cuda()
    calls = [lambda: st.select(da, 0, 1), lambda: st.select(da, 3, 1), lambda: st.select(dc, 2, 3),
             lambda: st.index_select(dc, 1, [2, 0, 2]), lambda: st.narrow(dc, 3, 0, 1),
             lambda: st.index_select(da, 0, [1, 1]), lambda: st.stack([da, da], 0), lambda: st.stack([dc, dc], 1),
             lambda: st.nonzero(dc), lambda: st.count_nonzero(da, dim=1), lambda: da[1, 2:, 1:3]]
    results = without_host_copies(monkeypatch, 6, calls)
    wants = [st.select(a, 0, 1), st.select(a, 3, 1), st.select(c, 2, 3), st.index_select(c, 1, [2, 0, 2]),
             st.narrow(c, 3, 0, 1), st.index_select(a, 0, [1, 1]), st.stack([a, a], 0), st.stack([c, c], 1),
             st.nonzero(c), st.count_nonzero(a, dim=1), a[1, 2:, 1:3]]
    for got, want in zip(results, wants):
        if isinstance(want, np.ndarray):
            assert (got.get() == want).all()
        else:
            assert_same(got, want)
