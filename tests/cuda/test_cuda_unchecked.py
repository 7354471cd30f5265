"""Input built with ``check_invariants=False`` that breaks an invariant: every op gives on the
device what it gives on the CPU, the same result or the same InvariantError (number, position,
message).

The cases are the faults a caller can hand us: repeated or unsorted plain indices (5.6), rows
longer than the plain size (5.3's upper bound, which only repeats can make), batches whose
repeats sum to different nnz, indices out of bounds, broken compressed ends, and a coo tensor
flagged coalesced whose indices are not. An op that sums repeats on the CPU (``to_dense``,
products with a dense operand, merges) sums them on the device; one that refuses them refuses
them there too.

Runs on a GPU or on the kernel emulator (see test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend  # noqa: F401 (the fixture)
from cuda_support import host


def _on(t, x):
    """Host array ``x`` where tensor ``t`` lives."""
    return DeviceArray.from_host(np.ascontiguousarray(x)) if t.is_cuda else x


def _compressed(crow, col, shape=(3, 4), layout="csr", index_dtype=np.int64):
    crow, col = np.asarray(crow, index_dtype), np.asarray(col, index_dtype)
    values = np.arange(1.0, col.size + 1).reshape(col.shape)
    make = {"csr": st.sparse_csr_tensor, "csc": st.sparse_csc_tensor}[layout]
    return make(crow, col, values, shape, check_invariants=False)


def _bsr(crow, col):
    col = np.asarray(col)
    return st.sparse_bsr_tensor(np.asarray(crow), col, np.arange(1.0, 2 * col.size + 1).reshape(col.size, 1, 2),
                                (3, 4), check_invariants=False)


def _coo(idx, coalesced, dense=()):
    idx = np.asarray(idx)
    values = np.arange(1.0, idx.shape[1] * max(1, int(np.prod(dense))) + 1).reshape((idx.shape[1],) + dense)
    return st.sparse_coo_tensor(idx, values, (3, 4) + dense, is_coalesced=coalesced, check_invariants=False)


CASES = {
    "repeat": lambda: _compressed([0, 2, 3, 3], [1, 1, 2]),
    "unsorted": lambda: _compressed([0, 2, 3, 3], [2, 1, 0]),
    "long_row": lambda: _compressed([0, 5, 5, 6], [0, 1, 1, 2, 3, 0]),
    "long_row_int32": lambda: _compressed([0, 5, 5, 6], [0, 1, 1, 2, 3, 0], index_dtype=np.int32),
    "long_row_and_col_out": lambda: _compressed([0, 5, 5, 6], [0, 1, 1, 2, 3, 4]),
    "col_out": lambda: _compressed([0, 1, 2, 2], [1, 4]),
    "col_negative": lambda: _compressed([0, 1, 2, 2], [1, -1]),
    "bad_start": lambda: _compressed([1, 1, 2, 2], [1, 2]),
    "bad_end": lambda: _compressed([0, 1, 2, 2], [1, 2, 3]),
    "decreasing": lambda: _compressed([0, 2, 1, 2], [1, 2]),
    "csc_long": lambda: _compressed([0, 4, 4, 4, 4], [0, 1, 1, 2], layout="csc"),
    "batches_long": lambda: _compressed([[0, 1, 2, 3], [0, 3, 3, 3]], [[0, 1, 2], [1, 1, 1]], (2, 3, 4)),
    "batches_repeat": lambda: _compressed([[0, 1, 2, 3], [0, 2, 3, 3]], [[0, 1, 2], [1, 0, 1]], (2, 3, 4)),
    "bsr_repeat": lambda: _bsr([0, 2, 3, 3], [1, 1, 0]),
    "bsr_long": lambda: _bsr([0, 3, 3, 3], [1, 1, 0]),
    "coo_flag_repeat": lambda: _coo([[0, 0, 1], [1, 1, 2]], True),
    "coo_flag_unsorted": lambda: _coo([[1, 0], [1, 2]], True),
    "coo_flag_dense": lambda: _coo([[0, 0, 1], [1, 1, 2]], True, (2,)),
    "dense_dims_long": lambda: st.sparse_csr_tensor(np.array([0, 5, 5, 6]), np.array([0, 1, 1, 2, 3, 0]),
                                                    np.arange(12.0).reshape(6, 2), (3, 4, 2), check_invariants=False),
    "dense_dims_col_out": lambda: st.sparse_csr_tensor(np.array([0, 1, 2, 2]), np.array([1, 4]),
                                                       np.arange(4.0).reshape(2, 2), (3, 4, 2), check_invariants=False),
    "coo_3d_flag_repeat": lambda: st.sparse_coo_tensor(np.array([[0, 0, 1], [1, 1, 2], [0, 0, 0]]), np.arange(3.0),
                                                       (2, 3, 4), is_coalesced=True, check_invariants=False),
    "coo_repeat": lambda: _coo([[0, 0, 1], [1, 1, 2]], False),
    "coo_out": lambda: _coo([[0, 3], [1, 1]], False),
    "coo_negative": lambda: _coo([[0, 1], [-1, 1]], False),
}

OPS = {
    "to_dense": lambda t: t.to_dense(),
    "coalesce": lambda t: t.coalesce(),
    "add": lambda t: t + t,
    "sub": lambda t: t - t,
    "mul": lambda t: t * t,
    "scale": lambda t: t * 2.0,
    "sin": st.sin,
    "sum": lambda t: st.sum(t),
    "sum_rows": lambda t: st.sum(t, t.ndim - 1 - t.dense_dim),
    "sum_first_two": lambda t: st.sum(t, (0, 1)),
    "amax": lambda t: st.amax(t, 0),
    "mv": lambda t: st.matmul(t, _on(t, np.arange(1.0, t.shape[-1 - t.dense_dim] + 1))),
    "mm": lambda t: st.matmul(t, _on(t, np.arange(8.0).reshape(4, 2))),
    "mm_batched": lambda t: st.matmul(t, _on(t, np.arange(24.0).reshape(3, 1, 4, 2))),
    "to_csr": lambda t: t.to_sparse_csr(),
    "to_coo": lambda t: t.to_sparse_coo(),
    "transpose": lambda t: st.transpose(t, -2 - t.dense_dim, -1 - t.dense_dim),
    "softmax": lambda t: st.softmax(t, -1 - t.dense_dim),
    "index_select": lambda t: st.index_select(t, -1 - t.dense_dim, np.array([3, 0, 1])),
    "narrow": lambda t: st.narrow(t, -1 - t.dense_dim, 1, 2),
    "cat": lambda t: st.cat([t, t], 0),
    "maximum": lambda t: st.maximum(t, t),
    "count_nonzero": st.count_nonzero,
    "astype": lambda t: t.to(dtype=np.float32),
    "index_cast": lambda t: t.to(index_dtype=np.int32),
}


def _outcome(op, t):
    """("raises", type, invariant or message) or ("gives", dense result) of ``op(t)``: a sparse
    result is read as dense (where a fault left in it may raise in turn)."""
    try:
        r = op(t)
        if isinstance(r, st.SparseTensor):
            r = r.to_dense()
        return "gives", host(r)
    except st.InvariantError as e:
        return "raises", "InvariantError", (e.invariant, e.batch, e.index, str(e))
    except (ValueError, NotImplementedError, TypeError, IndexError) as e:
        kind = "ValueError" if isinstance(e, ValueError) else type(e).__name__
        return "raises", kind, str(e).replace(f" on {t.device}", "")


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_unchecked_input_on_the_device_as_on_the_cpu(backend, case, op):
    t = CASES[case]()
    want, got = _outcome(OPS[op], t), _outcome(OPS[op], t.cuda())
    if want[0] == "gives":
        assert got[0] == "gives", got
        assert got[1].dtype == want[1].dtype and got[1].shape == want[1].shape
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    else:
        assert got[:2] == want[:2], (want, got)
        if want[1] == "InvariantError":
            assert got[2] == want[2]


def test_rows_of_repeats_are_summed_where_the_cpu_sums_them():
    """The faults the repair takes, as plain numbers: a row longer than its columns is repeats."""
    t = CASES["long_row"]()
    dense = t.to_dense()
    assert dense.tolist() == [[1.0, 5.0, 4.0, 5.0], [0.0, 0.0, 0.0, 0.0], [6.0, 0.0, 0.0, 0.0]]
    np.testing.assert_array_equal((t + t).to_dense(), 2 * dense)
    np.testing.assert_array_equal(st.maximum(t, t).to_dense(), dense)
    assert (t + t).is_coalesced() and (t + t).nnz == 5
    with pytest.raises(st.InvariantError) as e:  # a repeat does not hide a column out of bounds
        CASES["long_row_and_col_out"]() + t
    assert e.value.invariant == "5.5"
    with pytest.raises(st.InvariantError) as e:
        CASES["decreasing"]() * 2.0 + CASES["decreasing"]()
    assert e.value.invariant == "5.3"


def test_index_cast_checks_only_what_does_not_fit(backend):
    """A narrowing index cast checks the tensor only when an entry does not fit the new dtype
    (then one is out of bounds): on the device too, where the extrema are read back."""
    for case in ("repeat", "unsorted", "long_row", "coo_flag_repeat"):
        t = CASES[case]().cuda().to(index_dtype=np.int32)
        assert t.index_dtype == np.int32
    big = _compressed([0, 1, 2, 2], [1, 2**40])
    for t in (big, big.cuda()):
        with pytest.raises(st.InvariantError) as e:
            t.to(index_dtype=np.int32)
        assert e.value.invariant == "5.5"


GRAD_OPS = {
    "to_dense": lambda t, on: ("to_dense", (t,)),
    "sum": lambda t, on: ("sum", (t,)),
    "sum_rows": lambda t, on: ("sum", (t, t.ndim - 1 - t.dense_dim)),
    "mul": lambda t, on: ("mul", (t, 2.0)),
    "mv": lambda t, on: ("matmul", (t, on(np.arange(1.0, t.shape[-1 - t.dense_dim] + 1)))),
    "add": lambda t, on: ("add", (t, t)),
    "sin": lambda t, on: ("sin", (t,)),
    "softmax": lambda t, on: ("softmax", (t, -1 - t.dense_dim)),
}


def _pulled_back(name, args, on):
    """("gives", the first argument's cotangent values) or what vjp or its pullback raised."""
    from sparsetensor.autograd import vjp

    try:
        out, pullback = vjp(name, *args)
        rng = np.random.default_rng(0)
        if isinstance(out, st.SparseTensor):
            ct = pullback(out._replace_values(on(rng.standard_normal(out.values().shape))))[0]
        else:
            ct = pullback(on(rng.standard_normal(np.shape(out))))[0]
        return "gives", host(ct.values() if isinstance(ct, st.SparseTensor) else ct)
    except st.InvariantError as e:
        return "raises", "InvariantError", (e.invariant, e.batch, e.index, str(e))
    except (ValueError, NotImplementedError) as e:
        return "raises", "ValueError" if isinstance(e, ValueError) else type(e).__name__


@pytest.mark.parametrize("op", sorted(GRAD_OPS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_unchecked_input_gradients_on_the_device_as_on_the_cpu(backend, case, op):
    """The same for ``st.autograd.vjp``: a pullback reads each stored element's coordinate (each
    repeat gets its element's cotangent), so it needs indices in bounds, not canonical rows; one
    that reads none (a sum over every dim) checks the bounds, as the sum itself does."""
    t = CASES[case]()
    want = _pulled_back(*GRAD_OPS[op](t, lambda x: x), lambda x: x)
    got = _pulled_back(*GRAD_OPS[op](t.cuda(), _on_device), _on_device)
    assert got[0] == want[0], (want, got)
    if want[0] == "gives":
        assert got[1].shape == want[1].shape
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    else:
        assert got[1] == want[1], (want, got)
        if want[1] == "InvariantError":
            assert got[2] == want[2]
    if case == "batches_long" and op in ("to_dense", "mv", "sum"):
        assert want[0] == "gives"  # repeats summing to different nnz per batch are not repaired first
    if case == "col_out" and op == "sum":
        assert want[1] == "InvariantError"  # a column out of range: no element of the shape, as to_dense says


def _on_device(x):
    return DeviceArray.from_host(np.array(x))
