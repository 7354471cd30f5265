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


def _under_writes(layout, idt, mode, op, seconds=0.25):
    def run():
        t, c, p = _shared(layout, idt)
        target, bad = _broken(mode, c, p)
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
                    OPS[op](t, x)
                except (ValueError, st.InvariantError):
                    pass
        finally:
            stop.append(True)
            th.join()
    return run


@pytest.mark.parametrize("mode", ["plain", "compressed"])
@pytest.mark.parametrize("layout,idt", [("csr", np.int32), ("csc", np.int64)])
def test_ops_survive_a_thread_writing_the_shared_indices(layout, idt, mode):
    calls = [(op, _under_writes(layout, idt, mode, op)) for op in OPS]
    outcomes = run_forked(calls, timeout=60)
    failed = [(label, o) for (label, _), o in zip(calls, outcomes) if _fails(o)]
    assert len(outcomes) == len(calls) and not failed, failed


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr", "bsc"])
def test_a_check_again_runs_on_private_copies_of_the_callers_arrays(layout):
    """ensure_valid of a checked tensor on a caller's arrays: the twin it returns holds copies
    (what the kernels then read cannot change), with the same values array; a tensor on the
    library's own memory is returned itself."""
    ref = st.from_dense(np.kron(np.eye(3), np.ones((2, 2))) + np.eye(6), layout,
                        blocksize=(2, 2) if layout in ("bsr", "bsc") else None)
    if layout == "coo":
        i = np.array(ref.indices())
        t = st.sparse_coo_tensor(i, ref.values(), ref.shape, is_coalesced=True)
        held = [i]
    else:
        c, p = np.array(ref.compressed_indices()), np.array(ref.plain_indices())
        t = st.sparse_compressed_tensor(c, p, ref.values(), ref.shape, layout=layout)
        held = [c, p]
    t.check_invariants()
    u = ensure_valid(t)
    assert u is not t and u.layout == t.layout and u.values() is t.values()
    members = [u.indices()] if layout == "coo" else [u.compressed_indices(), u.plain_indices()]
    for m, h in zip(members, held):
        assert not np.shares_memory(m, h)
        np.testing.assert_array_equal(m, h)
    np.testing.assert_array_equal((t + t).to_dense(), 2 * ref.to_dense())
    # written since the check: the copy's check raises, naming the change
    first = held[-1][..., 0].copy()
    held[-1][..., 0] = 10**6
    with pytest.raises(st.InvariantError, match="changed since the check"):
        ensure_valid(t)
    # the library's own memory: no copy
    assert ensure_valid(ref) is ref
    # hand-outs keep sharing the caller's memory (zero copy)
    if layout == "csr":
        held[-1][..., 0] = first
        m = st.to_scipy(t)
        assert np.shares_memory(m.indices, held[1])
