"""ilu0, ic0 and spsolve_triangular on CUDA tensors (level-scheduled kernels/factor.cu) against the
CPU's sequential kernels on the same matrix: int32/int64 indices x float32/float64/complex64/
complex128 values, lower and upper, unit diagonal or not, one and several right-hand sides;
matrices with many small levels (one block, a barrier between levels), with a level of many rows
(a launch over many blocks), and a chain (as many levels as rows). Errors name the CPU's row;
indices changed after validation raise instead of reading out of bounds. Runs on a GPU or on
the kernel emulator (see test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._backend.cuda import _factor
from sparsetensor.cuda._array import DeviceArray
from sparsetensor.ops.factor import ic0, ilu0, spsolve_triangular

from conftest import dominant_matrix
from cuda_support import backend  # noqa: F401 (the fixture)

INDEX = [np.int32, np.int64]
VALUES = [np.float32, np.float64, np.complex64, np.complex128]


def tol(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11


def wide(n, dtype):
    """Most rows depend on nothing (one level of about n rows), the last few on many rows."""
    a = np.diag(np.full(n, 3.0))
    a[n - 3:, : n - 3: 7] = 0.5
    a[: n - 3: 7, n - 3:] = 0.25
    return a.astype(dtype)


def chain(n, dtype):
    """Bidiagonal both ways: every row depends on the one before (n levels)."""
    return (np.diag(np.full(n, 4.0)) + np.diag(np.full(n - 1, -1.0), -1) + np.diag(np.full(n - 1, 0.5), 1)).astype(dtype)


def tensor(a, index_dtype):
    return st.from_dense(a).to(index_dtype=index_dtype)


def close(got, want, dtype):
    got, want = np.asarray(got).astype(np.complex128), np.asarray(want).astype(np.complex128)
    assert np.abs(got - want).max(initial=0) <= tol(dtype) * max(np.abs(want).max(initial=0), 1)


def same_csr(d, c, dtype):
    """Device csr ``d`` has the CPU's ``c``'s pattern and index dtype, values within tolerance."""
    assert d.is_cuda and d.layout is st.sparse_csr and d.dtype == c.dtype and d.index_dtype == c.index_dtype
    assert np.array_equal(d.crow_indices().get(), c.crow_indices())
    assert np.array_equal(d.col_indices().get(), c.col_indices())
    close(d.values().get(), c.values(), dtype)


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("dtype", VALUES)
@pytest.mark.parametrize("shape", ["random", "wide", "chain"])
def test_ilu0_and_ic0_match_the_cpu(backend, index_dtype, dtype, shape):
    n = {"random": 60, "wide": 1200, "chain": 50}[shape]
    a = {"random": lambda: dominant_matrix(n, 1, dtype), "wide": lambda: wide(n, dtype), "chain": lambda: chain(n, dtype)}[shape]()
    t = tensor(a, index_dtype)
    L, U = ilu0(t)
    dL, dU = ilu0(t.cuda())
    same_csr(dL, L, dtype)
    same_csr(dU, U, dtype)
    h = (a + a.conj().T) / 2 + np.diag(np.full(n, 2.0))  # Hermitian, dominant
    th = tensor(h.astype(dtype), index_dtype)
    same_csr(ic0(th.cuda()), ic0(th), dtype)


@pytest.mark.parametrize("index_dtype", INDEX)
@pytest.mark.parametrize("dtype", VALUES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_spsolve_triangular_matches_the_cpu(backend, index_dtype, dtype, lower, unit):
    rng = np.random.default_rng(3)
    for a in (dominant_matrix(50, 2, dtype), chain(30, dtype)):
        t = tensor(a, index_dtype)  # both triangles: the other one is not read
        n = a.shape[0]
        for b in (rng.standard_normal(n), rng.standard_normal((n, 3))):
            b = b.astype(dtype)
            want = spsolve_triangular(t, b, lower=lower, unit_diagonal=unit)
            got = spsolve_triangular(t.cuda(), DeviceArray.from_host(b), lower=lower, unit_diagonal=unit)
            assert isinstance(got, DeviceArray) and got.shape == b.shape and got.dtype == want.dtype
            close(got.get(), want, dtype)


@pytest.mark.parametrize("k", [1, 2])
def test_a_level_of_many_rows_takes_many_blocks(backend, k):
    """wide(): the first level holds more rows (x columns) than a one-block run takes."""
    a = wide(1500, np.float64)
    t = tensor(a, np.int32)
    b = np.random.default_rng(5).standard_normal((1500, k))
    for lower in (True, False):
        plan = _factor._Plan(t.cuda().to_sparse_csr(), lower, _factor._status_word(t.cuda().values()._device))
        launches = plan.launches(k)
        assert any(grid > 1 or block != _factor.ONE_BLOCK for _, _, grid, block in launches)
        assert launches[0][:2] == (0, 1) and launches[-1][1] == len(plan.ptr) - 1
        want = spsolve_triangular(t, b, lower=lower)
        close(spsolve_triangular(t.cuda(), DeviceArray.from_host(b), lower=lower).get(), want, np.float64)


def test_promotions_follow_the_cpu(backend):
    t = st.from_dense(np.array([[2, 0], [1, 4]], dtype=np.int64))
    x = spsolve_triangular(t.cuda(), DeviceArray.from_host(np.array([2, 9])))
    assert x.dtype == np.float64 and np.array_equal(x.get(), [1.0, 2.0])
    x = spsolve_triangular(t.to(np.float32).cuda(), DeviceArray.from_host(np.ones(2, np.complex128)))
    assert x.dtype == np.complex128
    L, U = ilu0(st.from_dense(np.eye(3, dtype=np.float16)).cuda())
    assert L.dtype == U.dtype == np.float32 and L.is_cuda
    e = st.from_dense(np.zeros((0, 0))).cuda()
    assert spsolve_triangular(e, DeviceArray.from_host(np.zeros(0))).shape == (0,)
    assert ilu0(e)[0].shape == (0, 0) and ic0(e).shape == (0, 0)


def test_errors_name_the_cpus_row(backend):
    """The first failing row in the sequential order, with the CPU's exception and message."""
    cases = [
        (lambda t: ilu0(t), np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 1.0], [0.0, 1.0, 3.0]])),  # U[1, 1] = 0
        (lambda t: ic0(t), np.array([[1.0, 2.0], [2.0, 1.0]])),  # not positive definite
    ]
    no_diag = st.sparse_csr_tensor([0, 1, 2, 3, 4], [0, 0, 2, 3], [1.0, 1.0, 1.0, 1.0], size=(4, 4))
    zero_diag = st.sparse_csr_tensor([0, 1, 3, 5], [0, 0, 1, 1, 2], [1.0, 1.0, 0.0, 1.0, 0.0], size=(3, 3))
    calls = [(f, st.from_dense(a)) for f, a in cases] + [
        (ilu0, no_diag), (ic0, no_diag),
        (lambda t: spsolve_triangular(t, np.ones(3) if not t.is_cuda else DeviceArray.from_host(np.ones(3))), zero_diag),
        (lambda t: spsolve_triangular(t, np.ones(3) if not t.is_cuda else DeviceArray.from_host(np.ones(3)),
                                      lower=False), zero_diag),
        (lambda t: spsolve_triangular(t, np.ones(4) if not t.is_cuda else DeviceArray.from_host(np.ones(4)),
                                      lower=False), no_diag),
    ]
    for f, t in calls:
        with pytest.raises(np.linalg.LinAlgError) as cpu:
            f(t)
        with pytest.raises(np.linalg.LinAlgError) as gpu:
            f(t.cuda())
        assert str(gpu.value) == str(cpu.value)
    x = spsolve_triangular(no_diag.cuda(), DeviceArray.from_host(np.ones(4)), unit_diagonal=True)
    assert np.array_equal(x.get(), spsolve_triangular(no_diag, np.ones(4), unit_diagonal=True))


def test_bad_operands(backend):
    t = st.from_dense(np.eye(3)).cuda()
    with pytest.raises(ValueError, match="b must be"):
        spsolve_triangular(t, DeviceArray.from_host(np.ones(4)))
    with pytest.raises(ValueError, match="cpu"):  # a host right-hand side with a device matrix: not moved
        spsolve_triangular(t, np.ones(3))
    with pytest.raises(ValueError, match="square"):
        ilu0(st.from_dense(np.ones((2, 3))).cuda())


def _write(arr: DeviceArray, values, shared: bool) -> None:
    """Another library writes ``values`` into ``arr``: through the pointer handed it (``shared``), or a
    private one the tensor cannot know of."""
    ptr = arr.__cuda_array_interface__["data"][0] if shared else arr._ptr  # _ptr: behind the tensor's back
    arr._device.copy_htod(ptr, np.ascontiguousarray(np.asarray(values, arr.dtype)))


CALLS = {
    "ilu0": lambda t: ilu0(t),
    "ic0": lambda t: ic0(t),
    "lower": lambda t: spsolve_triangular(t, DeviceArray.from_host(np.ones(t.shape[0]))),
    "upper": lambda t: spsolve_triangular(t, DeviceArray.from_host(np.ones((t.shape[0], 2))), lower=False),
}


@pytest.mark.parametrize("bad", [10**6, -3])
def test_shared_indices_changed_out_of_bounds_raise(backend, bad):
    for name, call in CALLS.items():
        t = tensor(dominant_matrix(30, 7, np.float64), np.int64).cuda()
        call(t)  # checked, and used
        cols = t.col_indices().get()
        cols[5] = bad
        _write(t.col_indices(), cols, shared=True)
        with pytest.raises(st.InvariantError):
            call(t)


def test_privately_changed_columns_do_not_crash(backend):
    """Columns rewritten behind the tensor's back, in range but no longer sorted (the check is trusted):
    the kernels check what they read; the call returns or raises, and reads nothing out of bounds."""
    for name, call in CALLS.items():
        t = tensor(dominant_matrix(30, 8, np.float64), np.int64).cuda()
        call(t)
        cols = t.col_indices().get()
        crow = t.crow_indices().get()
        for i in range(30):  # every row reversed, and its diagonal moved to another row's column
            cols[crow[i]:crow[i + 1]] = (cols[crow[i]:crow[i + 1]][::-1] + 1) % 30
        _write(t.col_indices(), cols, shared=False)
        try:
            out = call(t)
        except (ValueError, st.InvariantError):
            continue
        for x in out if isinstance(out, tuple) else (out,):
            assert x.shape == (30, 30) or x.shape[0] == 30


def test_privately_changed_columns_that_break_the_level_plan_raise(backend):
    """Lower sweep: rows 0, 1 are a level, rows 2 (on row 0) and 3 (on row 1) the next; upper sweep:
    rows 2, 3, then 0 (on row 2) and 1 (on row 3). A column changed behind the tensor's back so that
    a row depends on one of its own level would read a row done beside it; the kept plan's levels
    are checked, so the call raises. (ic0 plans its triangle afresh each call.)"""
    a = np.eye(4) * 4.0
    a[2, 0] = a[3, 1] = 1.0
    a[0, 2] = a[1, 3] = 0.5
    for name in ("ilu0", "lower", "upper"):
        t = tensor(a, np.int32).cuda()
        CALLS[name](t)  # the plan is made and kept with the column indices
        cols = t.col_indices().get()
        crow = t.crow_indices().get()
        assert cols.tolist() == [0, 2, 1, 3, 0, 2, 1, 3]
        if name == "upper":
            cols[crow[0] + 1] = 1  # row 0 on row 1, both in the upper sweep's second level
        else:
            cols[crow[3]] = 2  # row 3 on row 2, both in the lower sweep's second level
        _write(t.col_indices(), cols, shared=False)
        with pytest.raises(ValueError, match="names a row not done before it"):
            CALLS[name](t)


def test_the_level_plan_is_kept_for_unshared_indices(backend, monkeypatch):
    """A second solve with the same triangle reuses its analysis; a shared index array is analysed again."""
    made = []
    plan_class = _factor._Plan

    def counted(*args):
        made.append(plan_class(*args))
        return made[-1]

    monkeypatch.setattr(_factor, "_Plan", counted)
    a = dominant_matrix(40, 9, np.float64)
    t = tensor(a, np.int32).cuda()
    b = np.random.default_rng(2).standard_normal(40)
    want = spsolve_triangular(tensor(a, np.int32), b)
    for _ in range(3):
        close(spsolve_triangular(t, DeviceArray.from_host(b)).get(), want, np.float64)
    assert len(made) == 1 and _factor._PLANS[t.col_indices()][True] is made[0]
    spsolve_triangular(t, DeviceArray.from_host(b), lower=False)
    assert len(made) == 2  # the upper sweep has its own
    t.col_indices().__cuda_array_interface__  # noqa: B018 - handed out: another library may write it
    for _ in range(2):
        close(spsolve_triangular(t, DeviceArray.from_host(b)).get(), want, np.float64)
    assert len(made) == 4


@pytest.mark.parametrize("lower", [True, False])
def test_levels_order_every_dependency(backend, lower):
    """The analysis: order is a permutation of the rows, and every row of the strict triangle a row
    depends on sits in an earlier level (the emulator runs a level's rows one after another, so a
    wrong order need not show in the results)."""
    a = dominant_matrix(80, 11, np.float64)
    t = tensor(a, np.int64).cuda()
    plan = _factor._Plan(t, lower, _factor._status_word(t.values()._device))
    order, ptr = plan.order.get(), plan.ptr
    assert np.array_equal(np.sort(order), np.arange(80)) and ptr[0] == 0 and ptr[-1] == 80
    assert np.all(np.diff(ptr) > 0)
    level = np.empty(80, np.int64)
    for lv in range(len(ptr) - 1):
        level[order[ptr[lv]:ptr[lv + 1]]] = lv
    tri = np.tril(a, -1) if lower else np.triu(a, 1)
    i, j = np.nonzero(tri)
    assert np.all(level[j] < level[i])
    assert np.any(level[j] == level[i] - 1)  # and no later than needed: the first level each row can take
    want = np.zeros(80, np.int64)
    for r in (range(80) if lower else range(79, -1, -1)):
        deps = np.nonzero(tri[r])[0]
        want[r] = 1 + want[deps].max() if deps.size else 0
    assert np.array_equal(level, want)
