"""Fuzz: random invalid (and valid) members x every public op and exit, on tensors built with
``check_invariants=False`` (issue 11). Each batch of cases runs in a subprocess
(``fuzz_worker.py``), so a crash inside a kernel, or later inside SciPy/torch that received our
arrays, is a test failure that prints the case, not a dead test run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(__file__), "fuzz_worker.py")


@pytest.mark.parametrize("seed", range(4))
def test_invalid_members_never_crash_or_leave_unchecked(seed):
    r = subprocess.run([sys.executable, WORKER, str(1000 + seed), "40"], capture_output=True, text=True,
                       timeout=600)
    lines = r.stdout.strip().splitlines()
    if r.returncode < 0:
        last = next((x for x in reversed(lines) if x.startswith("seed=")), "(no case printed)")
        pytest.fail(f"the worker died with signal {-r.returncode} in case: {last}")
    failures = [x for i, x in enumerate(lines) if x.startswith("FAIL") or (i + 1 < len(lines) and lines[i + 1].startswith("FAIL"))]
    assert r.returncode == 0, "\n".join(failures[:40] or lines[-40:] + r.stderr.splitlines()[-20:])
    assert lines[-1] == "done: 40 cases, 0 failures"


# -- what the fuzzer found, kept as plain regressions -------------------------------------------
import numpy as np  # noqa: E402

import sparsetensor as st  # noqa: E402


@pytest.mark.parametrize("crow, invariant", [([1, 2, 3], "5.1"), ([0, 2, 2], "5.2"), ([0, 3, 0], "5.3")])
def test_kernels_that_scan_rows_check_where_rows_start_and_end(crow, invariant):
    nnz = 0 if invariant == "5.3" else 3
    t = st.sparse_csr_tensor(np.array(crow), np.arange(nnz) % 2, np.ones(nnz), (2, 2), check_invariants=False)
    for op in (lambda: t.to_dense(), lambda: t @ np.ones(2), lambda: t @ np.ones((2, 3)), lambda: t.mT @ np.ones(2)):
        with pytest.raises(st.InvariantError) as e:
            op()  # used to drop entries silently (5.1/5.2) or return zeros (nnz == 0)
        assert e.value.invariant == invariant


@pytest.mark.parametrize("op", ["narrow", "select", "index_select", "nonzero"])
@pytest.mark.parametrize("bad, invariant", [(-1, "C4"), (7, "C5")])
def test_coo_selections_check_coordinates_first(op, bad, invariant):
    t = st.sparse_coo_tensor([[0, bad], [1, 0]], [1.0, 2.0], (3, 2), check_invariants=False)
    call = {"narrow": lambda: t.narrow(0, 0, 2), "select": lambda: t.select(1, 0),
            "index_select": lambda: t.index_select(1, np.array([0])), "nonzero": lambda: t.nonzero()}[op]
    with pytest.raises(st.InvariantError) as e:
        call()  # used to keep (or drop) the out-of-range entry silently
    assert e.value.invariant == invariant


def test_batched_rows_of_repeats_sum_or_refuse():
    """A batched csr tensor built unchecked whose row holds more entries than there are columns
    (repeats only, seeds 1009/1017 of the fuzz worker): the ops that sum duplicates give what
    each batch alone gives; the ones that need the batches coalesced repair the repeats and then
    refuse (ValueError), since the merged batches would differ in nnz; the check names 5.3."""
    crow, col = np.array([[0, 3, 3], [0, 1, 3]]), np.array([[0, 1, 1], [0, 0, 1]])
    vals = np.arange(1.0, 7.0).reshape(2, 3)
    t = st.sparse_csr_tensor(crow, col, vals, (2, 2, 2), check_invariants=False)
    each = [st.sparse_csr_tensor(crow[b], col[b], vals[b], (2, 2), check_invariants=False).to_dense()
            for b in range(2)]
    np.testing.assert_array_equal(t.to_dense(), np.stack(each))
    np.testing.assert_array_equal(each[0], [[1.0, 5.0], [0.0, 0.0]])
    x = np.arange(4.0).reshape(2, 2, 1)
    np.testing.assert_array_equal(t @ x, np.stack(each) @ x)
    with pytest.raises(ValueError, match="different nnz"):
        t.coalesce()
    for op in (lambda: t.to_sparse_coo(), lambda: t.to_sparse_csc(), lambda: st.sum(t, (1, 2))):
        with pytest.raises(ValueError, match="different nnz"):
            op()
    with pytest.raises(st.InvariantError) as e:
        t.check_invariants()
    assert e.value.invariant == "5.3"


def test_row_scanning_kernels_name_the_break_check_invariants_names():
    """to_dense and products of an unchecked csr whose compressed index steps back report what
    check_invariants reports (5.2 of the batch first), and a 5.3 report gives the step itself."""
    t = st.sparse_csr_tensor(np.array([[0, 1, 2], [0, 2, 1]]), np.array([[0, 1], [1, 0]]), np.ones((2, 2)),
                             (2, 2, 2), check_invariants=False)
    for op in (lambda: t.check_invariants(), lambda: t.to_dense(), lambda: t @ np.ones((2, 2, 1))):
        with pytest.raises(st.InvariantError) as e:
            op()
        assert e.value.invariant == "5.2" and e.value.batch == (1,)
    u = st.sparse_csr_tensor(np.array([0, 3, 2]), np.array([0, 1]), np.ones(2), (2, 4), check_invariants=False)
    for op in (lambda: u.check_invariants(), lambda: u.to_dense(), lambda: u @ np.ones(4), lambda: u @ np.ones((4, 2))):
        with pytest.raises(st.InvariantError, match="i=2: got -1") as e:
            op()
        assert e.value.invariant == "5.3"
