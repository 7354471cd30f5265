"""A thread writes the index arrays a checked tensor shares with its caller while ops run on it.

What an op reads of such memory is undefined, but the process must live: every op returns or
raises the library's errors. Two defences are tested: an op that checks a tensor on a caller's
arrays again checks private copies and runs its kernels on them (``ensure_valid``), and the
products, which check in the kernel, bound each index where they follow it (a guard followed by
a second read of the same index let a write in between through). Each case runs in a forked
child (``run_forked``): a crash is a failure naming the case, not a dead test run.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._core._canonical import ensure_valid

from test_mutation import _fails, run_forked

N = 300
OPS = {
    "add": lambda t, x: t + t,
    "mul": lambda t, x: t * t,
    "maximum": lambda t, x: st.maximum(t, t),
    "spgemm": lambda t, x: st.matmul(t, t),
    "softmax": lambda t, x: st.softmax(t, 1),
    "to_coo": lambda t, x: t.to_sparse_coo(),
    "tril": lambda t, x: st.tril(t),
    "index_select": lambda t, x: t.index_select(1, np.arange(0, N, 3)),
    "matmul": lambda t, x: t @ x,
    "matvec": lambda t, x: t @ x[:, 0].copy(),
    "rmatmul": lambda t, x: x[:, 0].copy() @ t,
    "sum0": lambda t, x: t.sum(dim=0),
}


def _shared(layout, idt):
    """A checked tensor on arrays the test keeps, and the arrays (compressed, plain)."""
    ref = st.random((N, N), 0.05, rng=np.random.default_rng(3)).to(index_dtype=idt)
    if layout == "csc":
        ref = ref.to_sparse_csc()
    c, p, v = (np.array(a) for a in (ref.compressed_indices(), ref.plain_indices(), ref.values()))
    make = st.sparse_csr_tensor if layout == "csr" else st.sparse_csc_tensor
    t = make(c, p, v, (N, N))
    t.check_invariants()
    return t, c, p


def _broken(mode, c, p):
    """What the writer toggles in: columns (rows) out of range, or a compressed index that
    rises past nnz."""
    if mode == "plain":
        bad = p.copy()
        bad[::7] = np.iinfo(p.dtype).max
        bad[3::7] = -1000
        return p, bad
    bad = c.copy()
    bad[1:-1] = np.sort(np.random.default_rng(0).integers(0, p.size, size=c.size - 2))
    bad[c.size // 2] = 4 * p.size
    return c, bad


def _hammer(t, target, bad, op, seconds=0.25):
    """Run ``op(t, x)`` for ``seconds`` while a thread toggles ``target`` between its contents
    and ``bad``; the library's errors are expected, anything else propagates."""
    good = target.copy()
    x = np.random.default_rng(1).random((N, 4))
    stop = []

    def writer():
        while not stop:
            np.copyto(target, bad)
            np.copyto(target, good)

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            try:
                op(t, x)
            except (ValueError, st.InvariantError):
                pass
    finally:
        stop.append(True)
        th.join()


def _under_writes(layout, idt, mode, op):
    def run():
        t, c, p = _shared(layout, idt)
        target, bad = _broken(mode, c, p)
        _hammer(t, target, bad, OPS[op])
    return run


@pytest.mark.parametrize("mode", ["plain", "compressed"])
@pytest.mark.parametrize("layout,idt", [("csr", np.int32), ("csc", np.int64)])
def test_ops_survive_a_thread_writing_the_shared_indices(layout, idt, mode):
    calls = [(op, _under_writes(layout, idt, mode, op)) for op in OPS]
    outcomes = run_forked(calls, timeout=60)
    failed = [(label, o) for (label, _), o in zip(calls, outcomes) if _fails(o)]
    assert len(outcomes) == len(calls) and not failed, failed


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_a_check_again_runs_on_a_private_copy_of_the_callers_compressed_index(layout):
    """ensure_valid of a checked tensor on a caller's arrays: the twin it returns holds a copy of
    the compressed index (what sizes and splits the kernels' work cannot change), with the
    caller's plain indices (the kernels bound them where they follow them) and values; with
    private="all" (SpGEMM, which addresses by them) a copy of the plain indices too. A tensor
    on the library's own memory is returned itself."""
    ref = st.from_dense(np.kron(np.eye(3), np.ones((2, 2))) + np.eye(6), layout,
                        blocksize=(2, 2) if layout in ("bsr", "bsc") else None)
    c, p = np.array(ref.compressed_indices()), np.array(ref.plain_indices())
    t = st.sparse_compressed_tensor(c, p, ref.values(), ref.shape, layout=layout)
    t.check_invariants()
    u = ensure_valid(t)
    assert u is not t and u.layout == t.layout and u.values() is t.values()
    assert not np.shares_memory(u.compressed_indices(), c) and np.shares_memory(u.plain_indices(), p)
    np.testing.assert_array_equal(u.compressed_indices(), c)
    w = ensure_valid(t, private="all")
    assert not np.shares_memory(w.compressed_indices(), c) and not np.shares_memory(w.plain_indices(), p)
    np.testing.assert_array_equal(w.plain_indices(), p)
    np.testing.assert_array_equal((t + t).to_dense(), 2 * ref.to_dense())
    np.testing.assert_array_equal(st.matmul(t, t).to_dense(), ref.to_dense() @ ref.to_dense())
    # written since the check: the copy's check raises, naming the change
    first = p[0]
    p[0] = 10**6
    with pytest.raises(st.InvariantError, match="changed since the check"):
        ensure_valid(t)
    p[0] = first
    # the library's own memory, and hand-outs that keep sharing the caller's memory: no copy
    assert ensure_valid(ref) is ref
    assert ensure_valid(t, private=False) is t
    if layout == "csr":
        assert np.shares_memory(st.to_scipy(t).indices, p)


def test_coo_ops_survive_a_thread_writing_the_shared_indices():
    """COO tensors: a check again, a merge and to_dense run on a private copy of a caller's index
    array (their kernels check an index in one pass and follow it in another); the conversion to
    rows bounds each row again as it reads it."""
    def run(op):
        def go():
            ref = st.random((N, N), 0.05, rng=np.random.default_rng(3)).to_sparse_coo()
            idx = np.array(ref.indices())
            t = st.sparse_coo_tensor(idx, ref.values(), (N, N), is_coalesced=True)
            t.check_invariants()
            bad = idx.copy()
            bad[:, ::7] = 10**6
            bad[1, 3::7] = -5
            _hammer(t, idx, bad, op)
        return go
    ops = {"to_csr": lambda t, x: t.to_sparse_csr(), "to_dense": lambda t, x: t.to_dense(),
           "add": lambda t, x: t + t, "matmul": lambda t, x: t @ x, "sum0": lambda t, x: t.sum(dim=0),
           "index_select": lambda t, x: t.index_select(0, np.arange(0, N, 3)), "coalesce": lambda t, x: t.coalesce(),
           "softmax": lambda t, x: st.softmax(t, 1), "mul": lambda t, x: t * t, "to_csc": lambda t, x: t.to_sparse_csc(),
           "spgemm": lambda t, x: st.matmul(t, t), "amax": lambda t, x: st.amax(t, 1), "tril": lambda t, x: st.tril(t)}
    calls = [(name, run(op)) for name, op in ops.items()]
    outcomes = run_forked(calls, timeout=60)
    failed = [(label, o) for (label, _), o in zip(calls, outcomes) if _fails(o)]
    assert len(outcomes) == len(calls) and not failed, failed
