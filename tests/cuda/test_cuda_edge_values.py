"""Edge values and repeated entries where the device once differed from the CPU (found by a
differential fuzz of the two backends, issue #37): complex infinities through ``a + b``,
``a / dense`` and ``a / scalar``, NaN in ``sampled_addmm``'s input at ``beta == 0``, the
gradients of ops along a dense dim of a tensor with repeated entries, cotangents whose pattern
equals the output's without sharing its arrays, and conversions of a batch shape with a 0. Runs
on a GPU or on the kernel emulator (see test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import host

D = DeviceArray.from_host


def same(got, want):
    """Bitwise-equal values, NaN where NaN (device result ``got``, CPU result ``want``)."""
    got = host(got.values()) if isinstance(got, st.SparseTensor) else host(got)
    want = np.asarray(want.values()) if isinstance(want, st.SparseTensor) else np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc", "coo"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_infinities_add(backend, layout, dtype):
    a = np.array([[1 + 0j, 0, 2 - 1j, 0], [0, 0, 1j, 3]], dtype)
    b = np.array([[-np.inf + 0j, 0, np.inf + 1j, 0], [0, complex(1, np.inf), 0, 3]], dtype)
    kw = {"blocksize": (1, 2)} if layout in ("bsr", "bsc") else {}
    A, B = st.from_dense(a, layout, **kw), st.from_dense(b, layout, **kw)
    same(st.add(A.cuda(), B.cuda(), alpha=1), st.add(A, B, alpha=1))  # alpha 1: no multiply (1 * inf's NaN)
    same(A.cuda() + B.cuda(), A + B)
    np.testing.assert_array_equal((A + B).to_dense(), a + b)  # NumPy's, the infinities' zero parts kept
    # a - b negates b (no multiply by -1, whose (-1 + 0i) * (inf + 0i) has a NaN imaginary part)
    for got in ((A - B).to_dense(), (A.cuda() - B.cuda()).cpu().to_dense(), A - b, a - B):
        np.testing.assert_array_equal(got, a - b)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_division_by_dense(backend, dtype):
    big, tiny = (1e200, 1e-170) if dtype == np.complex128 else (1e30, 1e-30)
    a = np.array([[1 - 2j, 1 + 1j, 1 + 1j, 3 + 4j, 2j]], dtype)
    x = np.array([[0j, big + big * 1j, tiny * 1j, 2 - 1j, -0.5 + 4j]], dtype)
    A = st.from_dense(a, "csr")
    with np.errstate(all="ignore"):
        want = A / x
        np.testing.assert_array_equal(want.to_dense(), a / x)  # the CPU is NumPy's division
    same(A.cuda() / D(x), want)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_division_by_scalar_and_mean(backend, dtype):
    """NumPy's complex division (Smith's scaling in the values' precision) for a scalar divisor,
    real ones included, where (inf + 0i) / 3 is inf + nan i and a part is multiplied by 1 / 3;
    and a dense divisor of signed zeros. The device once divided each part by a real scalar."""
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, 5.0]
    v = np.array([complex(a, b) for a in special for b in special] + [5 - 7j, 1e3 + 0.1j], dtype)
    t = st.sparse_coo_tensor(np.arange(v.size)[None], v, (v.size,))
    d = t.cuda()
    with np.errstate(all="ignore"):
        for s in (3, -7.5, 0.1, 0.0, 2 + 1j, 1e200 - 3j, 0.5j):
            want = t / s
            np.testing.assert_array_equal(want.values(), v / s)  # the CPU is NumPy's division
            same(d / s, want)
        same(st.mean(d), np.asarray(st.mean(t)))
        x = np.array([-0.0 + 0j, complex(0.0, -0.0), complex(-0.0, -0.0)] * 17, dtype)[:v.size]
        want = t / x
        np.testing.assert_array_equal(want.to_dense(), v / x)
        same(d / D(x), want)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.complex64])
def test_uncoalesced_coo_sums_each_operand_first(backend, dtype):
    """a + alpha b of COO operands with repeated entries: each operand's duplicates are summed first,
    in its own dtype, then b is scaled (the CPU's order). Adding them all at once, the device gave
    NaN for 2 (big - big) and a rounding residue for x - x."""
    big = 60000.0 if dtype == np.float16 else 3e38
    x = st.sparse_coo_tensor(np.array([[0, 0, 1, 1, 2]]), np.array([big, -big, 1.844, -0.355, 0.1], dtype), (3,))
    d = x.cuda()
    same(st.add(d, d, alpha=2), st.add(x, x, alpha=2))
    same(d - d, x - x)
    same(d.clone().sub_(d), x.clone().sub_(x))
    np.testing.assert_array_equal((x - x).to_dense(), np.zeros(3, dtype))


def test_sampled_addmm_beta_zero_keeps_nan(backend):
    A = st.from_dense(np.array([[np.nan, 1.0], [0, np.inf]]), "csr")
    m1, m2 = np.ones((2, 1)), np.ones((1, 2))
    with np.errstate(invalid="ignore"):
        want = st.sampled_addmm(A, m1, m2, beta=0.0)
    assert np.isnan(want.values()[[0, 2]]).all()  # 0 * NaN and 0 * inf, as torch's
    same(st.sampled_addmm(A.cuda(), D(m1), D(m2), beta=0.0), want)


def _repeated():
    """A coo tensor with a repeated entry (row 0 twice) and one dense dim of 3."""
    return st.sparse_coo_tensor(np.array([[0, 2, 0]]), np.array([[1.0, 2, 3], [4, 5, 6], [7, 8, 9]]), (3, 3),
                                is_coalesced=False)


@pytest.mark.parametrize("op", ["index_select", "narrow", "select"])
def test_dense_dim_gradient_of_repeated_entries(backend, op):
    """Along a dense dim the output keeps the input's entries: each repeat takes its own cotangent
    (a sparse one of the output's pattern), or the dense cotangent at its coordinates."""
    fns = {"index_select": lambda t: st.index_select(t, 1, [2, 0, 2]), "narrow": lambda t: st.narrow(t, 1, 1, 2),
           "select": lambda t: st.select(t, 1, 1)}
    A = _repeated()
    got = []
    for a in (A, A.cuda()):
        out, pullback = st.autograd.vjp(fns[op], a)
        o = out.cpu()
        per_entry = o._replace_values(np.arange(1.0, 1 + o.values().size).reshape(o.values().shape))
        dense = np.arange(1.0, 1 + o.to_dense().size).reshape(o.shape)
        got.append([pullback(per_entry if a is A else per_entry.cuda())[0],
                    pullback(dense if a is A else D(dense))[0]])
    (cpu_entry, cpu_dense), (dev_entry, dev_dense) = got
    same(dev_entry, cpu_entry)
    same(dev_dense, cpu_dense)
    v = cpu_entry.values()
    assert not np.array_equal(v[0], v[2])  # the repeats' cotangents differ: entry by entry
    np.testing.assert_array_equal(cpu_dense.values()[0], cpu_dense.values()[2])


def test_cotangent_of_equal_pattern(backend):
    """A cotangent built on equal (not the same) index arrays counts entry by entry too."""
    A = st.sparse_coo_tensor(np.array([[0, 1, 0], [0, 1, 0]]), np.array([1.0, 2, 3]), (3, 3), is_coalesced=False)
    for a in (A, A.cuda()):
        out, pullback = st.autograd.vjp(lambda t: st.narrow(t, 0, 0, 2), a)
        o = out.cpu()
        g = st.sparse_coo_tensor(o.indices().copy(), np.array([10.0, 20, 30]), o.shape, is_coalesced=False)
        np.testing.assert_array_equal(host(pullback(g if a is A else g.cuda())[0].values()), [10.0, 20, 30])


@pytest.mark.parametrize("src", ["csc", "csr", "bsc", "bsr"])
def test_empty_batch_conversion_keeps_nnz(backend, src):
    bs = (1, 1) if src.startswith("b") else ()
    t = st.sparse_compressed_tensor(np.zeros((0, 5), np.int64), np.zeros((0, 3), np.int64), np.zeros((0, 3) + bs),
                                    (0, 4, 4), layout=src)
    for dst in ("csr", "csc", "bsr", "bsc"):
        kw = {"blocksize": (1, 1)} if dst.startswith("b") else {}
        want, got = t.to_sparse(dst, **kw), t.cuda().to_sparse(dst, **kw)
        assert got.nnz == want.nnz and got.values().shape == want.values().shape
        assert got.plain_indices().shape == want.plain_indices().shape


def test_numpy_metadata_of_device_tensors(backend):
    """np.shape, np.ndim and np.size read no element: they answer for a device tensor; another NumPy
    function names itself in the NotImplementedError (nothing is copied to the host)."""
    d = st.from_dense(np.eye(3)[:, :2], "csr").cuda()
    assert np.shape(d) == (3, 2) and np.ndim(d) == 2 and np.size(d) == 6 and np.size(d, 0) == 3
    assert d.size == 6 and d.size() == (3, 2)
    with pytest.raises(NotImplementedError, match="np.sum of a csr tensor on cuda:0 has no GPU kernel"):
        np.sum(d)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8], ids=lambda d: np.dtype(d).name)
def test_integer_rounding_past_the_range(backend, dtype):
    """round(t, -k) of integers near the type's bounds: the double's conversion back is NumPy's
    (int32 and int64: the minimum past the range; the device wrapped through int64 before)."""
    info = np.iinfo(dtype)
    v = np.array([info.max, info.min, info.max - 3, info.min + 4, 5, 15, 25, 35], dtype)
    t = st.sparse_coo_tensor(np.arange(v.size)[None], v, size=(v.size,))
    for d in (-1, -2, -30):
        with np.errstate(all="ignore"):
            want = np.asarray(st.round(t, d).values())
        np.testing.assert_array_equal(host(st.round(t.cuda(), d).values()), want, err_msg=str(d))


@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_float_to_integer_casts_of_special_values(backend, src):
    """astype of NaN, infinities and values past the integer's range: the CPU's (NumPy's) integers,
    not the GPU's saturating conversion."""
    v = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 3e9, -3e9, 2.0 ** 31, -2.0 ** 31 - 1, 2.0 ** 63, 1e19,
                  300.7, -129.9, 255.5, 65504, -65504, -0.5, 127.9], np.float64)
    with np.errstate(all="ignore"):
        v = v.astype(src)
    t = st.sparse_coo_tensor(np.arange(v.size)[None], v, size=(v.size,))
    for dst in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.bool_):
        with np.errstate(all="ignore"):
            want = np.asarray(t.astype(dst).values())
        np.testing.assert_array_equal(host(t.cuda().astype(dst).values()), want, err_msg=np.dtype(dst).name)
