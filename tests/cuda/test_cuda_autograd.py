"""Gradients on the device: ``st.autograd.vjp`` of every rule whose op runs on a CUDA tensor, and of
functions composed of them (the tape), against the CPU's vjp on the same data.

Each test runs the op through vjp on CPU tensors and on their copies on the device, pulls back the
same cotangent, and asserts that every cotangent of a device argument lives on the device (a
sparse one with the argument's own index arrays: its pattern), equals the CPU's to the dtype's
tolerance, and that no device array was copied to the host on the way (``DeviceArray.__array__``
is made to fail during the pullbacks). Runs on a GPU or on the kernel emulator (see
tests/cuda_support.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.autograd import vjp
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from conftest import unequal_batch_unions
from cuda_support import INDEX, make
from cuda_autograd_support import no_host_copies  # noqa: F401 (the fixture)
from cuda_autograd_support import FLOAT, RTOL, check, host, one_pattern, rand, to_dev

# (layout, batch, dense, blocksize) of the products on the device (no dense dims)
PRODUCT_CASES = [("csr", (), (), None), ("csc", (), (), None), ("coo", (), (), None), ("bsr", (), (), (2, 3)),
                 ("bsc", (), (), (2, 1)), ("csr", (2,), (), None), ("csc", (3,), (), None), ("bsr", (2,), (), (2, 1))]
PRODUCT_IDS = [f"{c[0]}-b{len(c[1])}" for c in PRODUCT_CASES]


# -- products ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", PRODUCT_CASES, ids=PRODUCT_IDS)
def test_matmul(backend, rng, no_host_copies, case, index_dtype, dtype):
    A = make(rng, case, dtype, index_dtype)
    batch, K = A.shape[:-2], A.shape[-1]
    check(rng, no_host_copies, st.matmul, A, rand(rng, (K, 3), dtype))            # a shared X
    check(rng, no_host_copies, st.matmul, A, rand(rng, batch + (K, 2), dtype))    # X of A's batch
    if not batch:
        check(rng, no_host_copies, st.mv, A, rand(rng, (K,), dtype))
        check(rng, no_host_copies, st.mm, A, rand(rng, (K, 1), dtype))


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("case", PRODUCT_CASES, ids=PRODUCT_IDS)
def test_dense_matmul_sparse(backend, rng, no_host_copies, case, dtype):
    """X @ A: the cotangents of A^T @ X^T, transposed back (A's blocks too); a vector X with a
    batched A (batch size K or not: a square batch once gave wrong cotangents, else raised)."""
    A = make(rng, case, dtype, np.int64)
    batch, M = A.shape[:-2], A.shape[-2]
    check(rng, no_host_copies, st.matmul, rand(rng, (3, M), dtype), A)
    check(rng, no_host_copies, st.matmul, rand(rng, batch + (2, M), dtype), A)
    # a vector: X @ A is a vector per batch (its cotangent was once transposed as a matrix)
    check(rng, no_host_copies, st.matmul, rand(rng, (M,), dtype), A)
    if batch:  # the same as a COO of three sparse dims
        check(rng, no_host_copies, st.matmul, rand(rng, (M,), dtype), A.to_sparse("coo"))
    if case[0] in ("csr", "csc"):
        C = A.astype(np.complex128)._replace_values(A.values() * (1 + 0.5j))
        check(rng, no_host_copies, st.matmul, rand(rng, (3, M), np.complex128), C)


def test_matmul_complex(backend, rng, no_host_copies):
    for layout in ("csr", "csc"):
        A = make(rng, (layout, (), (), None), np.complex128)
        check(rng, no_host_copies, st.matmul, A, rand(rng, (A.shape[1], 3), np.complex128))


SPGEMM_CASES = [("csr", (), (), None), ("csc", (), (), None), ("coo", (), (), None), ("bsr", (), (), (2, 1)),
                ("bsc", (), (), (1, 2)), ("csr", (2,), (), None)]


@pytest.mark.parametrize("dtype", FLOAT + [np.dtype(np.complex128)], ids=str)
@pytest.mark.parametrize("case", SPGEMM_CASES, ids=[f"{c[0]}-b{len(c[1])}" for c in SPGEMM_CASES])
def test_sparse_matmul_sparse(backend, rng, no_host_copies, case, dtype):
    """The masked gradient of sparse @ sparse on the device: both operands' cotangents at their
    patterns only (row merges of canonical csr forms), as the CPU's pair enumeration gives."""
    A = one_pattern(rng, case)  # batches of one pattern: so are the product's (one nnz a batch)
    A = A._replace_values(rand(rng, A.values().shape, dtype))
    B = A._replace_values(rand(rng, A.values().shape, dtype)).mT
    B = B.to_sparse(A.layout, blocksize=A.blocksize[::-1] if A.layout.blocked else None)
    check(rng, no_host_copies, st.matmul, A, B)


@pytest.mark.parametrize("case", SPGEMM_CASES, ids=[f"{c[0]}-b{len(c[1])}" for c in SPGEMM_CASES])
def test_sparse_matmul_sparse_dense_cotangent(backend, rng, no_host_copies, case):
    """The product rule's pullback given a dense cotangent (vjp reads one at the output's pattern
    first; a rule may get one directly): each operand's cotangent at its pattern, one row of the
    other operand per item (neither G @ B^H nor A^H @ G is formed), as on the CPU."""
    from sparsetensor.autograd.rules import RULES

    A = one_pattern(rng, case)
    for dtype in (np.float32, np.complex128):
        A = A._replace_values(rand(rng, A.values().shape, dtype))
        B = A._replace_values(rand(rng, A.values().shape, dtype)).mT
        B = B.to_sparse(A.layout, blocksize=A.blocksize[::-1] if A.layout.blocked else None)
        out, back = RULES["matmul"](A, B)
        G = rand(rng, out.shape, dtype)
        want = back(G)
        _, back_d = RULES["matmul"](A.cuda(), B.cuda())
        with no_host_copies():
            got = back_d(DeviceArray.from_host(G))
        for g, w in zip(got, want):
            assert isinstance(g, DeviceArray) and g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g.get(), w, rtol=RTOL[w.dtype], atol=RTOL[w.dtype])
        with pytest.raises(ValueError, match="dense cotangent of shape"):
            back_d(DeviceArray.from_host(np.ascontiguousarray(G[..., :-1])))
        with pytest.raises(ValueError, match="dense cotangent of shape"):
            back(G[..., :-1])
        check(rng, no_host_copies, st.matmul, A, B, dense=True)  # through vjp: read at the pattern first


def test_sparse_matmul_sparse_uncoalesced(backend, rng, no_host_copies):
    """Duplicates of an uncoalesced coo operand each get the whole sum of their element."""
    A = st.sparse_coo_tensor([[0, 2, 0, 1], [1, 0, 1, 3]], [0.25, -0.5, 0.125, 0.75], size=(3, 4))
    B = make(rng, ("coo", (), (), None), np.float64, np.int64)[:4]
    check(rng, no_host_copies, st.matmul, A, B)
    check(rng, no_host_copies, st.matmul, B.mT.coalesce(), A.mT)


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("batch", [(), (2,)], ids=["b0", "b1"])
def test_sampled_addmm(backend, rng, no_host_copies, batch, dtype):
    A = make(rng, ("csr", batch, (), None), dtype, np.int32 if dtype == np.float32 else np.int64)
    M, N = A.shape[-2:]
    check(rng, no_host_copies, st.sampled_addmm, A, rand(rng, batch + (M, 3), dtype), rand(rng, batch + (3, N), dtype),
          kwargs={"beta": 0.5, "alpha": 2.0})
    check(rng, no_host_copies, st.sampled_addmm, A, rand(rng, (M, 2), dtype), rand(rng, (2, N), dtype))


def test_sampled_addmm_stretched_batches(backend, rng, no_host_copies):
    """Factors whose batch dims broadcast from 1 behind other dims: their cotangents summed there."""
    A = make(rng, ("csr", (2, 3), (), None), np.float64, np.int32)
    M, N = A.shape[-2:]
    check(rng, no_host_copies, st.sampled_addmm, A, rand(rng, (2, 1, M, 3), np.float64),
          rand(rng, (3, 3, N), np.float64))
    check(rng, no_host_copies, st.sampled_addmm, A, rand(rng, (1, 3, M, 2), np.float64),
          rand(rng, (2, 1, 2, N), np.float64))


# -- elementwise -------------------------------------------------------------------------------------------

ELEMENTWISE_CASES = [("csr", (), (), None), ("csc", (2,), (), None), ("coo", (), (), None), ("coo", (), (2,), None),
                     ("bsr", (), (), (2, 3)), ("csr", (), (3,), None)]
ELEMENTWISE_IDS = [f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in ELEMENTWISE_CASES]


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", ELEMENTWISE_CASES, ids=ELEMENTWISE_IDS)
def test_add_sub_mul_scalar(backend, rng, no_host_copies, case, index_dtype, dtype):
    nnz = 3 if case[1] else None  # batches of one nnz: the sum's batches must agree too
    A = make(rng, case, dtype, index_dtype, nnz=nnz)
    B = make(rng, case, dtype, index_dtype, nnz=nnz)
    if case[1]:
        B = A._replace_values(rand(rng, A.values().shape, dtype))
    check(rng, no_host_copies, st.add, A, B)
    check(rng, no_host_copies, st.sub, A, B, kwargs={"alpha": 0.5})
    check(rng, no_host_copies, st.mul, A, B)
    check(rng, no_host_copies, st.mul, A, 2.5)
    check(rng, no_host_copies, st.div, A, -4.0)


@pytest.mark.parametrize("case", [("csr", (), (), None), ("coo", (), (2,), None), ("bsr", (2,), (), (2, 1))],
                         ids=["csr", "coo-d1", "bsr-b1"])
def test_dense_operands(backend, rng, no_host_copies, case):
    """A dense device operand of add/sub (a dense result), mul and div (sampled at the pattern): its
    cotangent on the device (sums and the quotient's derivative through the dense cotangent)."""
    A = make(rng, case, np.float64, np.int32)
    D = rand(rng, A.shape, np.float64)
    check(rng, no_host_copies, st.add, A, D)
    check(rng, no_host_copies, st.add, D, A)
    check(rng, no_host_copies, st.sub, A, D, kwargs={"alpha": 0.5})
    check(rng, no_host_copies, st.sub, D, A)
    check(rng, no_host_copies, st.mul, A, D)
    check(rng, no_host_copies, st.div, A, np.abs(D) + 0.5)


UNARY = ["neg", "abs", "sqrt", "square", "sin", "tan", "tanh", "asin", "atan", "sinh", "asinh", "atanh", "expm1",
         "log1p", "sign", "floor", "ceil", "trunc", "round", "relu", "frac", "deg2rad", "rad2deg", "conj"]


def test_every_device_pointwise_op_has_a_derivative():
    from sparsetensor._backend.cuda._autograd import DERIVATIVES
    from sparsetensor._backend.cuda._pointwise import UNARY_OPS

    assert set(UNARY_OPS) <= set(DERIVATIVES)


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("layout", ["csr", "coo", "bsc"])
def test_unary(backend, rng, no_host_copies, layout, dtype):
    A = make(rng, (layout, (), (), (1, 2) if layout == "bsc" else None), dtype)
    v = np.ascontiguousarray(A.values())
    small = A._replace_values((np.tanh(v) * 0.9).astype(dtype))  # inside (-1, 1): asin, atanh, log1p
    positive = A._replace_values((np.abs(v) + 0.5).astype(dtype))
    for name in UNARY:
        t = positive if name == "sqrt" else small
        check(rng, no_host_copies, getattr(st, name), t)
    check(rng, no_host_copies, st.pow, positive, 2.5)


COMPLEX_UNARY = ["neg", "square", "conj", "abs", "sqrt", "sin", "sinh", "tan", "tanh", "asin", "asinh", "atan", "atanh",
                 "expm1", "log1p", "round", "nan_to_num", "erf"]


@pytest.mark.parametrize("dtype", [np.dtype(np.complex64), np.dtype(np.complex128)], ids=str)
@pytest.mark.parametrize("layout", ["csr", "coo", "bsc"])
def test_unary_complex(backend, rng, no_host_copies, layout, dtype):
    """The holomorphic functions' cotangents G * conj(f'(x)) of complex values on the device."""
    A = make(rng, (layout, (), (), (1, 2) if layout == "bsc" else None), np.complex128)
    v = np.ascontiguousarray(A.values())
    small = A._replace_values((np.tanh(v.real) * 0.9 + 0.4j * np.tanh(v.imag)).astype(dtype))
    for name in COMPLEX_UNARY:
        check(rng, no_host_copies, getattr(st, name), small)
    for e in (2, 3, 2.5, 0.5):
        check(rng, no_host_copies, st.pow, small, e)


def test_nan_to_num_of_complex_values(backend, rng, no_host_copies):
    """An element with a non-finite part gets no cotangent, the others all of it (the host's rule)."""
    A = make(rng, ("coo", (), (), None), np.complex128, nnz=6)
    v = A.values().copy()
    v[:4] = [complex(np.nan, 1.0), complex(2.0, np.inf), complex(-np.inf, np.nan), 0.5 - 0.25j]
    for dtype in (np.complex64, np.complex128):
        check(rng, no_host_copies, st.nan_to_num, A._replace_values(v.astype(dtype)))


def test_unary_uncoalesced_coo(backend, rng, no_host_copies):
    """A nonlinear op coalesces first: each stored duplicate gets the gradient at the summed value."""
    A = st.sparse_coo_tensor([[0, 2, 0, 1], [1, 0, 1, 3]], [0.25, -0.5, 0.125, 0.75], size=(3, 4))
    assert not A.is_coalesced()
    check(rng, no_host_copies, st.sin, A)
    check(rng, no_host_copies, "coalesce", A)


def test_sum_mean_over_dense_dims_uncoalesced_coo(backend, rng, no_host_copies):
    """A reduction over dense dims keeps the entries, repeats too: each entry gets its own
    cotangent (read at its coordinates it would get its repeats' too), as on the CPU."""
    A = st.sparse_coo_tensor([[0, 1, 0], [1, 0, 1]], rng.standard_normal((3, 2, 3)), size=(2, 2, 2, 3))
    assert not A.is_coalesced()
    for dims in (-1, (2, 3)):
        for keepdim in (False, True):
            for name in ("sum", "mean"):
                check(rng, no_host_copies, getattr(st, name), A, dims, keepdim)
                check(rng, no_host_copies, getattr(st, name), A, dims, keepdim, dense=True)
    out, pull = vjp(lambda t: st.sum(t, -1), to_dev(A))
    want = np.broadcast_to(A.values().sum(-1, keepdims=True), A.values().shape)  # G = out: its own values
    np.testing.assert_allclose(host(pull(out)[0].values()), want, rtol=1e-12)


def test_softmax_along_a_batch_dim_whose_union_differs_in_nnz(backend, rng, no_host_copies):
    """The sums along batch dim 0 have the batches' union pattern: 1 entry in batch 0, 2 in batch 1."""
    crow = np.array([[[0, 1, 1], [0, 1, 1]], [[0, 1, 1], [0, 0, 1]]])
    col = np.array([[[0], [0]], [[0], [1]]])
    A = st.sparse_csr_tensor(crow, col, np.array([[[1.0], [2.0]], [[3.0], [4.0]]]), size=(2, 2, 2, 2))
    for name in ("softmax", "log_softmax"):
        check(rng, no_host_copies, getattr(st, name), A, 0)
    # blocked: the sums of the blocks' elements (it raised "coo -> bsr: every batch must have the same nnz")
    D = np.zeros((2, 2, 2, 4))
    D[0, 0, :, :2] = [[1.0, 2.0], [0.0, 3.0]]
    D[0, 1, :, :2] = [[4.0, 5.0], [6.0, 7.0]]
    D[1, 0, :, :2] = [[-1.0, 0.5], [2.0, 1.0]]
    D[1, 1, :, 2:] = [[1.5, -2.0], [0.25, 3.0]]
    for layout in ("bsr", "bsc"):
        B = st.from_dense(D, layout, blocksize=(2, 2), batch_dim=2)
        for name in ("softmax", "log_softmax"):
            check(rng, no_host_copies, getattr(st, name), B, 1)


def test_unary_complex_not_holomorphic(backend, rng, no_host_copies):
    """abs, conj, real, imag, sgn of complex values (and sgn of real ones: zero) on the device."""
    A = make(rng, ("csr", (), (), None), np.complex128)
    A = A._replace_values(np.concatenate([[0j], A.values()[1:]]))  # sgn's and abs's gradient at 0: zero
    for name in ("neg", "square", "conj", "abs", "real", "imag", "sgn"):
        check(rng, no_host_copies, getattr(st, name), A)
    R = make(rng, ("coo", (), (), None), np.float64)
    for name in ("real", "sgn"):
        check(rng, no_host_copies, getattr(st, name), R)


# -- reductions --------------------------------------------------------------------------------------------

REDUCE_CASES = [("csr", (), (), None), ("csc", (2,), (), None), ("coo", (), (), None), ("coo", (3,), (2,), None),
                ("bsr", (), (), (2, 3)), ("bsc", (2,), (2,), (2, 1)), ("csr", (2,), (3,), None)]
REDUCE_IDS = [f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in REDUCE_CASES]


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("case", REDUCE_CASES, ids=REDUCE_IDS)
def test_sum_mean(backend, rng, no_host_copies, case, dtype):
    A = make(rng, case, dtype, np.int32)
    m = A.batch_dim if case[0] != "coo" else 0
    dims = [None] + ([m, m + 1] if case[0] != "coo" else [])
    for name in ("sum", "mean"):
        for dim in dims:
            for keepdim in (False, True):
                if dim is None and keepdim:
                    continue
                check(rng, no_host_copies, getattr(st, name), A, dim, keepdim)


SPARSE_RESULT_CASES = [("coo", (), (), None), ("coo", (3,), (2,), None), ("csr", (2,), (), None),
                       ("csc", (2, 2), (), None), ("bsc", (2,), (2,), (2, 1))]


@pytest.mark.parametrize("case", SPARSE_RESULT_CASES,
                         ids=[f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in SPARSE_RESULT_CASES])
def test_sum_mean_with_a_sparse_result(backend, rng, no_host_copies, case):
    """coo summed over some of its sparse dims, compressed over batch dims: a sparse result, whose
    cotangent is read at the input's elements with the reduced coordinates dropped."""
    import itertools

    layout, batch, dense, bs = case
    if layout == "coo":
        A = make(rng, case, np.float64, np.int32)
    else:  # batches of one pattern: a sum over some batch dims keeps one nnz a batch
        one = make(rng, (layout, (), dense, bs), np.float64).to_dense()
        A = st.from_dense(one * rng.uniform(0.5, 2.0, batch + (1,) * one.ndim), layout, blocksize=bs,
                          batch_dim=len(batch), dense_dim=len(dense), index_dtype=np.int32)
    own = A.sparse_dim if layout == "coo" else A.batch_dim
    for k in range(1, own + 1):
        for dims in itertools.combinations(range(own), k):
            for name in ("sum", "mean"):
                for keepdim in (False, True):
                    check(rng, no_host_copies, getattr(st, name), A, dims, keepdim)


@pytest.mark.parametrize("case", [("coo", (3,), (2,), None), ("coo", (), (2, 3), None), ("csr", (), (2,), None),
                                  ("csc", (2,), (3,), None), ("bsr", (), (2,), (2, 1))],
                         ids=["coo-d1", "coo-d2", "csr-d1", "csc-b1-d1", "bsr-d1"])
def test_sum_mean_over_dense_dims_with_a_sparse_result(backend, rng, no_host_copies, case):
    """A sparse result of a reduction over dense dims (and batch or coo sparse dims): the cotangent
    read at the input's pattern, repeated along the reduced dense dims."""
    A = make(rng, case, np.float64, np.int32)
    P = A.ndim - A.dense_dim
    own = A.sparse_dim if case[0] == "coo" else A.batch_dim
    dense = list(range(P, A.ndim))
    choices = [(d,) for d in dense] + [tuple(dense)] + [(s, dense[-1]) for s in range(own)]
    for dims in choices:
        for name in ("sum", "mean"):
            for keepdim in (False, True):
                out = getattr(st, name)(A, dims, keepdim)
                assert isinstance(out, st.SparseTensor), dims
                check(rng, no_host_copies, getattr(st, name), A, dims, keepdim)


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("case", [("csr", (), (), None), ("csc", (), (), None), ("csr", (2,), (), None)],
                         ids=["csr", "csc", "csr-b1"])
def test_softmax(backend, rng, no_host_copies, case, dtype):
    A = make(rng, case, dtype, np.int64)
    m = A.batch_dim
    for name in ("softmax", "log_softmax"):
        for dim in (m, m + 1, -1):
            check(rng, no_host_copies, getattr(st, name), A, dim)


SOFTMAX_BY_SUMS_CASES = [("csr", (2,), (), None), ("csc", (3,), (2,), None), ("bsr", (2,), (), (2, 3)),
                         ("coo", (), (), None), ("coo", (2,), (2,), None), ("csr", (), (2,), None),
                         ("bsr", (), (), (2, 2)), ("bsc", (), (2,), (1, 2))]


@pytest.mark.parametrize("dtype", FLOAT + [np.dtype(np.float16)], ids=str)
@pytest.mark.parametrize("case", SOFTMAX_BY_SUMS_CASES,
                         ids=[f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in SOFTMAX_BY_SUMS_CASES])
def test_softmax_by_sums(backend, rng, no_host_copies, case, dtype):
    """Slices that are not runs of the storage (a batch dim, a coo sparse dim, a dense dim, any dim
    of a blocked tensor or of one with dense dims): the sums along the dim read back at the elements."""
    A = make(rng, case, dtype, np.int64)
    own = A.sparse_dim if case[0] == "coo" else A.batch_dim
    by_rows = A.layout.compressed and not A.layout.blocked and not A.dense_dim  # the row kernel's dims skipped
    for name in ("softmax", "log_softmax"):
        for dim in range(A.ndim):
            if dim >= own and by_rows and dim < own + 2:
                continue
            check(rng, no_host_copies, getattr(st, name), A, dim)


# -- conversions --------------------------------------------------------------------------------------------

CONVERT_CASES = [("csr", (), (), None), ("csc", (), (), None), ("coo", (), (), None), ("coo", (), (2,), None),
                 ("bsr", (), (), (2, 3)), ("bsc", (2,), (), (1, 2)), ("csr", (2, 2), (2,), None)]
CONVERT_IDS = [f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in CONVERT_CASES]


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", CONVERT_CASES, ids=CONVERT_IDS)
def test_to_dense_and_values(backend, rng, no_host_copies, case, index_dtype, dtype):
    A = make(rng, case, dtype, index_dtype)
    check(rng, no_host_copies, "to_dense", A)
    check(rng, no_host_copies, "values", A)
    check(rng, no_host_copies, "clone", A)
    check(rng, no_host_copies, "astype", A, np.float64 if dtype == np.float32 else np.float32)


@pytest.mark.parametrize("src,dst", [("csr", "coo"), ("coo", "csr"), ("csr", "csc"), ("csc", "csr"), ("csc", "coo"),
                                     ("bsr", "bsc")])
def test_layout_conversions(backend, rng, no_host_copies, src, dst):
    bs = (2, 3) if src.startswith("b") else None
    A = make(rng, (src, (), (), bs), np.float64, np.int32)
    check(rng, no_host_copies, "to_sparse", A, dst, kwargs={"blocksize": bs})
    if src != "coo":
        check(rng, no_host_copies, "mT", A)


BLOCKED_CASES = [("bsr", (), (), (2, 3)), ("bsc", (), (), (1, 2)), ("bsr", (2,), (), (2, 1)), ("bsc", (), (2,), (2, 2))]


@pytest.mark.parametrize("dst", ["coo", "csr", "csc"])
@pytest.mark.parametrize("case", BLOCKED_CASES, ids=[f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in BLOCKED_CASES])
def test_blocked_to_unblocked_and_back(backend, rng, no_host_copies, case, dst):
    """The cotangent of a conversion between a blocked and an unblocked layout is read at the
    argument's pattern in the argument's layout (a blocked pattern's keys are its blocks)."""
    A = make(rng, case, np.float64, np.int32)
    check(rng, no_host_copies, "to_sparse", A, dst)
    check(rng, no_host_copies, f"to_sparse_{dst}", A)
    check(rng, no_host_copies, "to_sparse", A.to_sparse(dst), case[0], kwargs={"blocksize": case[3]})
    for shape in ((0, 4), (4, 0)):  # no block rows, no block columns
        E = st.from_dense(np.zeros(shape), case[0], blocksize=(2, 2), index_dtype=np.int32)
        check(rng, no_host_copies, "to_sparse", E, dst)


def test_from_dense(backend, rng, no_host_copies):
    a = make(rng, ("csr", (), (), None), np.float64).to_dense()
    for layout in ("csr", "coo"):
        check(rng, no_host_copies, st.from_dense, a, layout)


# -- composed functions (the tape) ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("layout", ["csr", "csc", "coo"])
def test_tape_compositions(backend, rng, no_host_copies, layout, dtype):
    A = make(rng, (layout, (), (), None), dtype, np.int64, nnz=8)
    X = rand(rng, (A.shape[1], 3), dtype)
    check(rng, no_host_copies, lambda t: st.sum(t * 3.0 + st.sin(t) * t), A)          # t used three times
    check(rng, no_host_copies, lambda t, x: st.matmul(st.tanh(t) * 2.0 - t, x), A, X)
    check(rng, no_host_copies, lambda t, x: (st.sum(st.square(t)), st.matmul(t, x)), A, X)  # two outputs
    check(rng, no_host_copies, lambda t: (t * t).to_dense(), A)
    if layout != "coo":
        check(rng, no_host_copies, lambda t: st.sum(st.log_softmax(t * 0.5, -1) * t), A)


@pytest.mark.parametrize("layout", ["csr", "csc", "coo", "bsr"])
def test_tape_constant_factors(backend, rng, no_host_copies, layout, monkeypatch):
    """A factor that is a constant of the function gets no cotangent: a dense one costs no
    product with the transpose, a sparse one no SDDMM; the argument's cotangent is the CPU's."""
    from sparsetensor.ops import blas

    A = make(rng, (layout, (), (), (2, 1) if layout == "bsr" else None), np.float64, np.int64)
    X = rand(rng, (A.shape[1], 3), np.float64)
    dX = to_dev(X)
    check(rng, no_host_copies, lambda t: st.matmul(t, dX), A, cpu_fn=lambda t: st.matmul(t, X))
    dA = A.cuda()
    check(rng, no_host_copies, lambda x: st.matmul(dA, x), X, cpu_fn=lambda x: st.matmul(A, x))
    calls = []
    real = blas.matmul
    monkeypatch.setattr(blas, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    _, pullback = vjp(lambda t: st.matmul(t, dX), dA)
    pullback(to_dev(rand(rng, (A.shape[0], 3), np.float64)))
    assert len(calls) == 1  # the forward's


def test_tape_scalar_cotangent_and_unused_argument(backend, rng, no_host_copies):
    A = make(rng, ("csr", (), (), None), np.float64, nnz=6)
    d = A.cuda()
    B = d._replace_values(DeviceArray.from_host(np.ones(A.values().shape)))
    loss, pullback = vjp(lambda t, u: st.sum(t * 2.0), d, B)
    assert isinstance(loss, DeviceArray) and loss.shape == ()
    with no_host_copies():
        dA, dB = pullback(1.0)
    np.testing.assert_allclose(dA.values().get(), 2.0)
    assert dB.is_cuda and not dB.values().get().any()


def test_bad_cotangents_on_device(backend, rng):
    A = make(rng, ("csr", (), (), None), np.float64, nnz=6)
    d = A.cuda()
    out, pullback = vjp(st.matmul, d, DeviceArray.from_host(np.ones((A.shape[1], 2))))
    assert isinstance(out, DeviceArray)
    with pytest.raises(TypeError, match="device array"):
        pullback(np.ones(out.shape))  # a host cotangent of a device output
    with pytest.raises(ValueError, match="shape"):
        pullback(DeviceArray.from_host(np.ones((1, 2))))
    out, pullback = vjp(st.sin, d)
    other = make(rng, ("csr", (), (), None), np.float64, nnz=3).cuda()
    with pytest.raises(ValueError, match="pattern"):
        pullback(other)


def test_float16(backend, rng, no_host_copies):
    """float16 values compute in float32 on the device (rounded once), in float16 on the CPU."""
    A = make(rng, ("csr", (), (), None), np.float16, np.int32)
    check(rng, no_host_copies, st.sin, A)
    check(rng, no_host_copies, st.softmax, A, -1)
    check(rng, no_host_copies, st.matmul, A, rand(rng, (A.shape[1], 2), np.float16))
    check(rng, no_host_copies, st.sum, A, 1)


def _embedding_check(guard, name, W, *args, **kwargs):
    """vjp of ``name`` on host ``W`` and on a device copy (indices as given: host or device): the
    same output, and a coo weight cotangent on the device equal to the CPU's."""
    rng = np.random.default_rng(3)
    host_args = [a.get() if isinstance(a, DeviceArray) else a for a in args]
    out_c, pb_c = vjp(name, W, *host_args, **kwargs)
    out_d, pb_d = vjp(name, DeviceArray.from_host(W), *args, **kwargs)
    assert isinstance(out_d, DeviceArray) and out_d.dtype == out_c.dtype
    tol = RTOL[np.dtype(W.dtype)]
    np.testing.assert_allclose(out_d.get(), out_c, rtol=tol)
    g = rng.standard_normal(out_c.shape).astype(out_c.dtype)
    want = pb_c(g)
    with guard():
        got = pb_d(DeviceArray.from_host(g))
    gw = got[0]
    assert isinstance(gw, st.SparseTensor) and gw.is_cuda and gw.is_coalesced() and gw.shape == W.shape
    assert gw.dtype == want[0].dtype
    np.testing.assert_array_equal(gw.indices().get(), want[0].indices())
    np.testing.assert_allclose(gw.values().get(), want[0].values(), rtol=tol)
    if want[-1] is not None and name == "embedding_bag":
        assert got[-1].dtype == want[-1].dtype
        np.testing.assert_allclose(got[-1].get(), want[-1], rtol=tol)
    return got


@pytest.mark.parametrize("where", ["host-index", "device-index"])
def test_embedding_on_the_device(backend, rng, no_host_copies, where):
    """A device weight: the lookups, the bags and the weight's coo gradient (rows summed) on the
    device, with host or device indices; per_sample_weights get their own cotangent."""
    W = rng.standard_normal((7, 3))
    idx = np.array([[2, 0, 2], [6, 6, 1]])
    flat = np.array([0, 2, 2, 5, 1, 6])
    off = np.array([0, 2, 2, 5])  # an empty bag included
    psw = rng.standard_normal(6)

    def put(a):
        return DeviceArray.from_host(a) if where == "device-index" else a

    _embedding_check(no_host_copies, "embedding", W, put(idx))
    for mode in ("sum", "mean"):
        _embedding_check(no_host_copies, "embedding_bag", W, put(flat), off, mode=mode)
        _embedding_check(no_host_copies, "embedding_bag", W, put(flat), put(off), mode=mode)  # bags made there
        _embedding_check(no_host_copies, "embedding_bag", W, put(idx), mode=mode)
    _embedding_check(no_host_copies, "embedding_bag", W, put(flat), off, per_sample_weights=put(psw))
    # weights of another dtype: the bags in the dtype NumPy promotes the two to, as on the host
    W32 = W.astype(np.float32)
    _embedding_check(no_host_copies, "embedding_bag", W32, put(flat), off, per_sample_weights=put(psw))
    _embedding_check(no_host_copies, "embedding_bag", W, put(flat), off, per_sample_weights=put(psw.astype(np.float32)))


def test_embedding_bad_indices_on_the_device(backend):
    """Out-of-range device indices: IndexError (checked on the device); bad device offsets, and a
    device index or offsets with a host weight: ValueError."""
    Wd = DeviceArray.from_host(np.ones((4, 2)))
    for bad in (np.array([0, 4]), np.array([-1, 2])):
        with pytest.raises(IndexError, match="out of range"):
            vjp("embedding", Wd, DeviceArray.from_host(bad))
    with pytest.raises(ValueError, match="host"):
        vjp("embedding", np.ones((4, 2)), DeviceArray.from_host(np.array([0, 1])))
    for off in (np.array([1, 2]), np.array([0, 2, 1]), np.array([0, 3])):  # not from 0, decreasing, past the end
        with pytest.raises(ValueError, match="offsets must start at 0"):
            vjp("embedding_bag", Wd, DeviceArray.from_host(np.array([0, 1])), DeviceArray.from_host(off))
    with pytest.raises(ValueError, match="host"):
        vjp("embedding_bag", np.ones((4, 2)), np.array([0, 1]), DeviceArray.from_host(np.array([0, 1])))
    for W, idx, off in ((Wd, DeviceArray.from_host(np.array([0, 1])), DeviceArray.from_host(np.zeros(0, np.int64))),
                        (np.ones((4, 2)), np.array([0, 1]), np.zeros(0, np.int64))):  # no bag for 2 indices
        with pytest.raises(ValueError, match="offsets is empty"):
            vjp("embedding_bag", W, idx, off)
    assert vjp("embedding_bag", np.ones((4, 2)), np.zeros(0, np.int64), np.zeros(0, np.int64))[0].shape == (0, 2)


@pytest.mark.parametrize("layout", ["csr", "csc", "coo", "bsr"])
def test_empty_tensors(backend, rng, no_host_copies, layout):
    """nnz == 0: every pullback gives empty device cotangents of the right shapes."""
    A = make(rng, (layout, (), (), (2, 3) if layout == "bsr" else None), np.float64, np.int32, nnz=0)
    assert A.nnz == 0
    check(rng, no_host_copies, st.matmul, A, rand(rng, (A.shape[1], 2), np.float64))
    check(rng, no_host_copies, st.sin, A)
    check(rng, no_host_copies, st.sum, A)
    check(rng, no_host_copies, "to_dense", A)
    check(rng, no_host_copies, st.add, A, make(rng, (layout, (), (), (2, 3) if layout == "bsr" else None), np.float64,
                                                np.int32))


def _forward_on_device(fn, *args):
    """Skip when the op itself has no GPU kernel (its gradient is then never asked for on the device)."""
    try:
        vjp(fn, *[to_dev(a) if not isinstance(a, list) else [to_dev(x) for x in a] for a in args])
    except Exception as e:  # noqa: BLE001 - the forward op is not under test here
        pytest.skip(f"the forward op fails on the device here ({type(e).__name__}: {e})")


SHAPE_CASES = [("csr", (), (), None), ("csc", (), (), None), ("csr", (2,), (), None), ("coo", (), (), None),
               ("csr", (), (2,), None)]
SHAPE_IDS = [f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in SHAPE_CASES]


@pytest.mark.parametrize("case", SHAPE_CASES, ids=SHAPE_IDS)
@pytest.mark.parametrize("op", ["narrow", "select", "cat"])
def test_narrow_select_cat(backend, rng, no_host_copies, op, case):
    A = one_pattern(rng, case)
    m = A.batch_dim if case[0] != "coo" else 0
    for d in (m, m + 1):
        if op == "narrow":
            args = (A, d, 1, 2)
        elif op == "select":
            args = (A, d, 1)
        else:
            B = A._replace_values(rand(rng, A.values().shape, np.float64))
            args = ([A, B], d)
        _forward_on_device(op, *args)
        if op == "cat":
            check_cat(rng, no_host_copies, *args)
        else:
            check(rng, no_host_copies, op, *args)


def check_cat(rng, guard, tensors, d):
    """vjp of cat on CPU ``tensors`` and on their device copies: the same cotangents (a list of
    sparse tensors, which :func:`check` does not take)."""
    dargs = [t.cuda() for t in tensors]
    out_c, pb_c = vjp("cat", tensors, d)
    out_d, pb_d = vjp("cat", dargs, d)
    g = rand(rng, out_c.values().shape, np.float64)
    want = pb_c(out_c._replace_values(g))[0]
    with guard():
        got = pb_d(out_d._replace_values(DeviceArray.from_host(g)))[0]
    for x, dx, w in zip(got, dargs, want):
        assert x.is_cuda and x.values().shape == dx.values().shape
        np.testing.assert_allclose(x.values().get(), w.values(), rtol=1e-12)


@pytest.mark.parametrize("case", SHAPE_CASES, ids=SHAPE_IDS)
def test_index_select(backend, rng, no_host_copies, case):
    """An index may repeat: each repetition's cotangent adds up (one lookup per repetition)."""
    A = one_pattern(rng, case)
    m = A.batch_dim if case[0] != "coo" else 0
    for d in (m, m + 1):
        idx = [2, 0, 2, 3, 2, 0]  # a host index (a list: check() moves arrays to the device)
        _forward_on_device("index_select", A, d, idx)
        check(rng, no_host_copies, "index_select", A, d, idx)
    for d in (m, m + 1) + ((A.ndim - 1,) if A.dense_dim else ()):  # an empty index (a dense dim's raised)
        check(rng, no_host_copies, "index_select", A, d, [])


# dense dims and blocked tensors: the cotangent is put back into the input's shape by sparse device ops
KEYLESS_CASES = [("coo", (), (3,), None), ("csr", (), (3,), None), ("csc", (2,), (3,), None),
                 ("bsr", (), (), (2, 2)), ("bsc", (2,), (), (2, 1)), ("bsr", (), (2,), (1, 2))]
KEYLESS_IDS = [f"{c[0]}-b{len(c[1])}-d{len(c[2])}" for c in KEYLESS_CASES]


def _shape_args(rng, op, A, d):
    """Arguments of ``op`` along dim ``d`` of ``A`` (block-aligned along a blocked sparse dim)."""
    m = A.batch_dim if A.layout.compressed else 0
    unit = A.blocksize[d - m] if A.layout.blocked and m <= d < m + 2 else 1
    if op == "narrow":
        return (A, d, unit, min(2 * unit, A.shape[d] - unit))
    if op == "select":
        return (A, d, A.shape[d] - 1)
    if op == "index_select":
        return (A, d, [1, 0, 1, A.shape[d] - 1, 1])
    return ([A, A._replace_values(rand(rng, A.values().shape, np.float64))], d)


@pytest.mark.parametrize("case", KEYLESS_CASES, ids=KEYLESS_IDS)
@pytest.mark.parametrize("op", ["narrow", "select", "index_select", "cat"])
def test_shape_ops_along_dense_dims_and_of_blocked_tensors(backend, rng, no_host_copies, op, case):
    """Every dim of tensors with dense dims and of blocked ones (index_select along a blocked sparse
    dim needs blocksize 1 there, as on the CPU)."""
    A = one_pattern(rng, case)
    m = A.batch_dim if A.layout.compressed else 0
    ran = 0
    for d in range(A.ndim):
        if op == "index_select" and A.layout.blocked and m <= d < m + 2 and A.blocksize[d - m] != 1:
            with pytest.raises(NotImplementedError):
                st.index_select(A.cuda(), d, [0])
            ran += 1
            continue
        args = _shape_args(rng, op, A, d)
        if op == "cat":
            check_cat(rng, no_host_copies, *args)
        else:
            check(rng, no_host_copies, op, *args)
        ran += 1
    assert ran == A.ndim


@pytest.mark.parametrize("dense", [(), (3,)], ids=["d0", "d1"])
def test_select_of_the_only_sparse_dim(backend, rng, no_host_copies, dense):
    """A coo tensor with one sparse dim: select along it gives a dense device array, whose
    cotangent goes back to the entries with that coordinate."""
    A = make(rng, ("coo", (), dense, None), np.float64, np.int32)
    A = st.select(A, 0, 1)
    if not isinstance(A, st.SparseTensor):  # make() gives 2 sparse dims: one taken away
        pytest.fail("expected a sparse tensor")
    for i in (0, A.shape[0] - 1):
        check(rng, no_host_copies, "select", A, 0, i)


@pytest.mark.parametrize("case", SHAPE_CASES + [("bsr", (2,), (), (1, 2))], ids=SHAPE_IDS + ["bsr-b1-d0"])
def test_index_select_with_a_device_index(backend, rng, no_host_copies, case):
    """A device index (repeats included): along a batch or sparse dim the cotangent's coordinates
    mapped through it on the device, along a dense dim the values summed by index there."""
    A = one_pattern(rng, case)
    idx = np.array([1, 0, 1, 2, 1])
    for d in range(A.ndim):
        if A.layout.blocked and d >= A.batch_dim and A.blocksize[d - A.batch_dim] != 1:
            continue
        i = idx % A.shape[d]
        out_c, pb_c = vjp("index_select", A, d, i)
        out_d, pb_d = vjp("index_select", A.cuda(), d, DeviceArray.from_host(i))
        g = rand(rng, out_c.values().shape, np.float64)
        want = pb_c(out_c._replace_values(g))[0]
        with no_host_copies():
            got = pb_d(out_d._replace_values(DeviceArray.from_host(g)))[0]
        np.testing.assert_allclose(got.values().get(), want.values(), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["complex64", "complex128"])
def test_complex(backend, rng, no_host_copies, dtype):
    """Complex values: PyTorch's convention (conjugate Wirtinger) on the device as on the CPU."""
    A = make(rng, ("csr", (), (), None), dtype, np.int64)
    B = make(rng, ("csr", (), (), None), dtype, np.int64)
    M, N = A.shape
    check(rng, no_host_copies, st.add, A, B, kwargs={"alpha": 0.5 - 1j})
    check(rng, no_host_copies, st.mul, A, B)
    check(rng, no_host_copies, st.mul, A, 2.0 + 1j)
    check(rng, no_host_copies, st.sum, A, 1)
    check(rng, no_host_copies, "to_dense", A)
    check(rng, no_host_copies, st.sampled_addmm, A, rand(rng, (M, 3), dtype), rand(rng, (3, N), dtype),
          kwargs={"beta": 1j, "alpha": 0.5})
    check(rng, no_host_copies, lambda t, x: st.matmul(st.square(t) - t * 1j, x), A, rand(rng, (N, 2), dtype))


def test_tape_device_array_methods(backend, rng, no_host_copies):
    """On a recorded device value, ``a * s``, ``a / s``, ``reshape`` and ``astype`` are recorded; the
    DeviceArray methods that are not (views, swapaxes, take, copy) raise instead of dropping a step."""
    A = make(rng, ("csr", (), (), None), np.float64, np.int64, nnz=7)
    X = rand(rng, (A.shape[1], 2), np.float64)
    check(rng, no_host_copies, lambda t, x: st.matmul(t, (x * 3.0).reshape(-1).reshape(x.shape) / 2.0), A, X,
          cpu_fn=lambda t, x: st.matmul(t, x * 1.5))
    A32 = A.astype(np.float32)
    check(rng, no_host_copies, lambda t: (st.sin(t).to_dense() * 2.0).astype(np.float64), A32,
          cpu_fn=lambda t: st.sin(t).to_dense() * 2.0)
    for bad in (lambda y: y[0], lambda y: y.swapaxes(0, 1), lambda y: y.copy(), lambda y: y.take([0])):
        with pytest.raises(NotImplementedError, match="not recorded"):
            vjp(lambda t, x: bad(st.matmul(t, x)), A.cuda(), DeviceArray.from_host(X))
    out, _ = vjp(lambda t, x: st.matmul(t, x) * 1.0, A.cuda(), DeviceArray.from_host(X))
    assert type(out) is DeviceArray  # the output as the ops give it, not the recorded value


def test_tape_device_sums_and_differences(backend, rng, no_host_copies):
    """``a + b``, ``a - b`` and ``-a`` of device values are recorded, with a recorded value on either
    side (a plain left operand defers to the recorded right one) and in mixed float dtypes."""
    A = make(rng, ("csr", (), (), None), np.float64, np.int64, nnz=7)
    X = rand(rng, (A.shape[1], 2), np.float64)
    C = rand(rng, (A.shape[0], 2), np.float64)
    dC = to_dev(C)
    check(rng, no_host_copies, lambda t: st.sum(t * 3.0) + st.sum(st.square(t)) - st.sum(t), A)
    check(rng, no_host_copies, lambda t, x: dC - st.matmul(t, x), A, X, cpu_fn=lambda t, x: C - st.matmul(t, x))
    check(rng, no_host_copies, lambda t, x: -(st.matmul(t, x) + dC) + st.matmul(t, x * 2.0), A, X,
          cpu_fn=lambda t, x: -(st.matmul(t, x) + C) + st.matmul(t, x * 2.0))
    A32 = A.astype(np.float32)
    check(rng, no_host_copies, lambda t, u: st.sum(t) + st.sum(u), A32, A)


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr"])
def test_kron(backend, rng, no_host_copies, layout):
    """kron's rule on the device (the op on numbered operands gives each element its pair) against
    the CPU's: every operand layout, an uncoalesced operand (each pair its own cotangent), float32
    with float64 (promoted), complex."""
    A = make(rng, (layout, (), (), (2, 1) if layout == "bsr" else None), np.float64, np.int64, nnz=5)
    B = make(rng, ("csc", (), (), None), np.float64, np.int32, nnz=4)
    check(rng, no_host_copies, st.kron, A, B)
    check(rng, no_host_copies, lambda a, b: st.sum(st.sin(st.kron(a, b))), A, B)
    U = st.sparse_coo_tensor(np.array([[0, 0, 1], [1, 1, 0]]), rand(rng, (3,), np.float64), size=(2, 3))
    check(rng, no_host_copies, st.kron, U, B)
    check(rng, no_host_copies, st.kron, B.astype(np.float32), U)
    C = make(rng, ("csr", (), (), None), np.complex128, np.int64, nnz=4)
    check(rng, no_host_copies, st.kron, C, A if layout != "bsr" else B)
    # a dense array operand (every element, zeros too, enters the pairs), on either side
    D = rand(rng, (2, 3), np.float64)
    D[0, 1] = 0.0
    check(rng, no_host_copies, st.kron, A, D)
    check(rng, no_host_copies, st.kron, D.astype(np.float32), B)
    check(rng, no_host_copies, st.kron, rand(rng, (3,), np.float64), U)


def test_device_array_sums_and_differences(backend, rng):
    """DeviceArray ``+``, ``-`` and unary ``-`` against NumPy: integers wrap, bool ``+`` is or, mixed
    dtypes promote; no broadcasting (ValueError), bool ``-`` a TypeError as NumPy's."""
    for dt in (np.float16, np.float32, np.float64, np.complex64, np.complex128, np.int8, np.int32, np.int64,
               np.uint8, np.bool_):
        a, b = ((rng.standard_normal((3, 4)) * 90).astype(dt) for _ in range(2))
        da, db = DeviceArray.from_host(a), DeviceArray.from_host(b)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(host(da + db), a + b)
            if dt != np.bool_:
                np.testing.assert_array_equal(host(da - db), a - b)
                np.testing.assert_array_equal(host(-da), -a)
    x32, x64 = DeviceArray.from_host(np.ones(3, np.float32)), DeviceArray.from_host(np.full(3, 2.0))
    assert (x32 + x64).dtype == np.float64 and (x64 - x32).dtype == np.float64
    with pytest.raises(ValueError, match="broadcast"):
        x32 + DeviceArray.from_host(np.ones(4, np.float32))
    flags = DeviceArray.from_host(np.array([True, False]))
    with pytest.raises(TypeError, match="boolean subtract"):
        flags - flags
    with pytest.raises(TypeError):
        -flags
    with pytest.raises(TypeError):
        x32 + 1.0  # scalars are not added to device arrays


def test_scale_transpose_bmm(backend, rng, no_host_copies):
    A = make(rng, ("csr", (), (), None), np.float64, np.int32)
    check(rng, no_host_copies, "scale", A, -1.5)
    check(rng, no_host_copies, "transpose", A, 0, 1)
    check(rng, no_host_copies, "t", A)
    Bt = make(rng, ("csr", (2,), (), None), np.float64, np.int32)
    check(rng, no_host_copies, st.bmm, Bt, rand(rng, (2, Bt.shape[-1], 3), np.float64))


def test_the_host_copy_guard_fires(backend, no_host_copies):
    """The guard of these tests catches a device array converted to a NumPy array."""
    a = DeviceArray.from_host(np.ones(3))
    with no_host_copies(), pytest.raises(AssertionError, match="copied to the host"):
        np.asarray(a)
    with no_host_copies(), pytest.raises(AssertionError, match="copied to the host"):
        np.conj(a)  # what the rules' host code did with device values


@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dense", [(), (2,)], ids=["d0", "d1"])
def test_entry_copying_ops_of_uncoalesced_coo(backend, rng, no_host_copies, dense, index_dtype):
    """narrow, select, index_select and cat copy stored entries: each duplicate of an uncoalesced
    COO tensor gets the cotangent of its own output entry, as on the CPU (not the duplicates' sum)."""
    idx = np.array([[2, 0, 2, 1, 2], [1, 3, 1, 0, 1]], index_dtype)  # (2, 1) stored three times
    A = st.sparse_coo_tensor(idx, rand(rng, (5,) + dense, np.float64), size=(4, 5) + dense)
    assert not A.is_coalesced()
    for fn in (lambda t: st.narrow(t, 0, 1, 2), lambda t: st.narrow(t, 1, 0, 5), lambda t: st.select(t, 1, 1),
               lambda t: st.index_select(t, 0, [2, 0, 2]), lambda t: st.cat([t, t], 1)):
        _forward_on_device(fn, A)
        check(rng, no_host_copies, fn, A)


@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_unchecked_compressed_with_duplicates(backend, rng, no_host_copies, layout):
    """A compressed tensor built without the check, with duplicate plain indices (summed, as in an
    uncoalesced coo tensor): each stored element gets the cotangent at its coordinate, as on the CPU."""
    make_t = st.sparse_csr_tensor if layout == "csr" else st.sparse_csc_tensor
    size = (3, 4) if layout == "csr" else (4, 3)
    A = make_t(np.array([0, 2, 3, 5]), np.array([1, 1, 0, 3, 2]), np.array([1.0, -2.5, 3.0, 0.5, -1.0]), size=size,
               check_invariants=False)
    for fn in (st.abs, st.sin, "to_dense", st.sum):
        check(rng, no_host_copies, fn, A)


def test_rounded_division(backend, rng, no_host_copies):
    """div with rounding_mode and ``//`` on the device: zero cotangents, as on the CPU."""
    A = make(rng, ("csr", (), (), None), np.float64)
    for mode in ("floor", "trunc"):
        check(rng, no_host_copies, lambda t, mode=mode: st.div(t, 2.0, rounding_mode=mode), A)
    check(rng, no_host_copies, lambda t: t // 3.0, A)


def test_batch_reduction_whose_batches_differ_in_nnz(backend, rng, no_host_copies):
    """sum/mean over a batch dim whose result is COO (its kept batches would differ in nnz): the
    cotangent read back at the compressed tensor's elements, as on the CPU (the CPU's rule took the
    COO cotangent's dims for the compressed tensor's own and raised)."""
    d = unequal_batch_unions()
    t = st.from_dense(d, "csr", batch_dim=2)
    for name in ("sum", "mean"):
        check(rng, no_host_copies, getattr(st, name), t, 0)


def test_matmul_of_a_blocked_and_an_unblocked_operand(backend, rng, no_host_copies):
    """bsr @ csr (the bsr operand unblocked first): the masked cotangents at each operand's own
    pattern and layout, as on the CPU."""
    A = make(rng, ("bsr", (), (), (2, 2)), np.float64, blocks=(2, 3))
    B = make(rng, ("csr", (), (), None), np.float64, blocks=(6, 4))
    check(rng, no_host_copies, st.matmul, A, B)
    check(rng, no_host_copies, st.matmul, B.mT.to_sparse_csr(), A.mT.to_sparse_bsr((2, 2)))


def test_zero_dim_array_factors(backend, rng, no_host_copies):
    """A 0-d device array factor or divisor gets the sum over the pattern, on the device."""
    A = make(rng, ("csr", (), (), None), np.float64)
    s = np.array(1.5)
    check(rng, no_host_copies, st.mul, A, s)
    check(rng, no_host_copies, lambda x, a: st.mul(x, a), s, A)
    check(rng, no_host_copies, st.div, A, s)
