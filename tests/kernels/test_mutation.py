"""Mutation fuzz (issue 34): a tensor is validated, then one index entry changes behind the
library's back (the user's own array, shared zero-copy at construction), then one op runs.

The op may raise or return garbage, but it must not crash, corrupt the heap or hang. Each
op runs in a forked child with a timeout, so a signal or a hang is a test failure naming the
case, not a dead test run. After the op the child churns the allocator, so that heap
corruption left behind by a kernel is detected in the child rather than later.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import sparsetensor as st
from conftest import requires_torch

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin",
                                reason="needs fork")

# What an op may raise when its indices changed under it: the library's documented errors.
ALLOWED = (ValueError, TypeError, NotImplementedError, IndexError, OverflowError)
TIMEOUT = 20.0


def _churn():
    """Allocate and free, so that glibc notices a corrupted heap now (it aborts) and not later."""
    keep = [np.empty(n) for n in (1, 7, 33, 257, 4097) for _ in range(4)]
    keep += [bytearray(n) for n in range(1, 600, 37)]
    del keep


def run_forked(calls, timeout: float = TIMEOUT) -> list:
    """Run each ``(label, fn)`` of ``calls`` in turn in one forked child; returns one outcome per
    call (``"ok"``, ``"raised <Type>: ..."`` or ``"unexpected <Type>: ..."``), or, where the child
    died or hung, the outcomes so far plus ``"signal N"`` / ``"timeout"`` / ``"exit N"`` for the call
    that was running (a crash found by the allocator after a call returned is blamed on it or the
    next one: the child churns the allocator after each call)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            os.close(r)
            st.set_num_threads(1)  # GNU OpenMP's thread pool does not survive fork
            for label, fn in calls:
                os.write(w, b"S\n")
                try:
                    fn()
                    msg = "ok"
                except ALLOWED as e:
                    msg = f"raised {type(e).__name__}: {str(e)[:200]}"
                except BaseException as e:  # noqa: BLE001 - anything else is a finding
                    msg = f"unexpected {type(e).__name__}: {str(e)[:200]}"
                _churn()
                os.write(w, ("R " + msg.replace("\n", " ") + "\n").encode())
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + timeout
    buf, status = b"", None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = "timeout"
            break
        ready, _, _ = select.select([r], [], [], min(left, 0.5))
        if ready:
            b = os.read(r, 65536)
            if not b:
                break
            buf += b
    os.close(r)
    if status is None:
        _, st_ = os.waitpid(pid, 0)
        if os.WIFSIGNALED(st_):
            status = f"signal {os.WTERMSIG(st_)}"
        elif os.WEXITSTATUS(st_):
            status = f"exit {os.WEXITSTATUS(st_)}"
    outcomes = [line[2:] for line in buf.decode().splitlines() if line.startswith("R ")]
    if status is not None and len(outcomes) < len(calls):
        outcomes.append(status)
    elif status is not None:
        outcomes[-1] += f"; then {status}"
    return outcomes


def _fails(outcome: str) -> bool:
    return not (outcome == "ok" or outcome.startswith("raised ")) or "; then" in outcome


# -- tensors built zero-copy from arrays the test keeps ----------------------------------------------

def _dense(shape, seed=0, dense=()):
    rng = np.random.default_rng(seed)
    a = np.zeros(shape + dense)
    mask = rng.random(shape) < 0.45
    mask[np.arange(min(shape)), np.arange(min(shape))] = True  # every row and column holds one
    a[mask] = rng.integers(1, 9, size=(int(mask.sum()),) + dense)
    return a


def _compressed(layout, idt, batch=0, dense=0):
    """A validated tensor of ``layout`` sharing its index arrays with the ones returned."""
    bs = (2, 2) if layout in ("bsr", "bsc") else None
    a = _dense((6, 6), dense=(2,) if dense else ())
    if batch:
        a = np.stack([a, a[::-1, ::-1]])
    ref = st.from_dense(a, layout, blocksize=bs, batch_dim=batch, dense_dim=dense)
    c = np.array(ref.compressed_indices(), dtype=idt)
    p = np.array(ref.plain_indices(), dtype=idt)
    t = st.sparse_compressed_tensor(c, p, np.array(ref.values()), ref.shape, layout=ref.layout)
    assert t.is_coalesced() and np.shares_memory(t.plain_indices(), p) and np.shares_memory(t.compressed_indices(), c)
    return t, {"compressed": c, "plain": p}


def _coo(idt, dense=0):
    a = _dense((6, 6), dense=(2,) if dense else ())
    ref = st.from_dense(a, "coo", dense_dim=dense)
    idx = np.array(ref.indices(), dtype=idt)
    t = st.sparse_coo_tensor(idx, np.array(ref.values()), ref.shape, is_coalesced=True)
    assert t.is_coalesced() and np.shares_memory(t.indices(), idx)
    return t, {"row": idx[0], "col": idx[1]}


CASES = {
    "csr-i32": lambda: _compressed("csr", np.int32),
    "csr-i64": lambda: _compressed("csr", np.int64),
    "csc-i32": lambda: _compressed("csc", np.int32),
    "csc-i64": lambda: _compressed("csc", np.int64),
    "bsr-i64": lambda: _compressed("bsr", np.int64),
    "bsr-i32": lambda: _compressed("bsr", np.int32),
    "bsc-i32": lambda: _compressed("bsc", np.int32),
    "csr-batch": lambda: _compressed("csr", np.int64, batch=1),
    "csr-dense": lambda: _compressed("csr", np.int32, dense=1),
    "coo-i64": lambda: _coo(np.int64),
    "coo-i32": lambda: _coo(np.int32),
    "coo-dense": lambda: _coo(np.int64, dense=1),
}

# (member, where, value): value None swaps the entry with its successor (an order change).
MUTATIONS = {
    "compressed": [(1, -1), (1, -10**6), ("mid", "nnz+1"), (1, 10**9), ("mid", None), (-1, "nnz-1")],
    "plain": [(0, -1), ("mid", -10**6), ("mid", "n"), (-1, 10**9), (0, None)],
}
MUTATIONS["row"] = MUTATIONS["col"] = MUTATIONS["plain"]


def _mutate(t, arrays, member, where, value):
    arr = arrays[member]
    flat = arr.reshape(-1) if member in ("compressed", "plain") else arr
    if member == "compressed":
        flat = arr.reshape(-1, arr.shape[-1])[-1]  # the last batch
    elif member == "plain":
        flat = arr.reshape(-1, arr.shape[-1])[-1]
    n = flat.shape[0]
    i = {0: 0, 1: min(1, n - 1), -1: n - 1, "mid": n // 2}[where]
    if value is None:
        j = min(i + 1, n - 1)
        flat[i], flat[j] = flat[j], flat[i]
        return
    if value == "nnz+1":
        value = int(flat[-1]) + 1
    elif value == "nnz-1":
        value = int(flat[-1]) - 1
    elif value == "n":
        value = t.shape[-1] if t.layout == st.sparse_coo else _plain_bound(t)
    flat[i] = value


def _plain_bound(t):
    m = t.batch_dim
    rows, cols = t.shape[m:m + 2]
    rb, cb = t.blocksize or (1, 1)
    return cols // cb if t.layout in (st.sparse_csr, st.sparse_bsr) else rows // rb


def _ops(t):
    """One op of every family, as (name, callable); ``t`` is 2-d sparse plus batch/dense dims."""
    m = getattr(t, "batch_dim", 0) or 0
    sd = m + 1  # the last sparse dim
    plain2d = t.ndim == 2
    rng = np.random.default_rng(1)
    x = rng.random(t.shape[:m] + (t.shape[sd], 3))
    ops = {
        "to_dense": lambda: t.to_dense(),
        "clone": lambda: t.clone().to_dense(),
        "astype": lambda: t.astype(np.float32).to_dense(),
        "transpose": lambda: t.transpose(m, sd).to_dense(),
        "coalesce": lambda: t.coalesce(),
        "add": lambda: t + t,
        "sub": lambda: t - t,
        "mul": lambda: t * t,
        "mul_dense": lambda: t * np.ones(t.shape),
        "sum": lambda: t.sum(),
        "sum0": lambda: t.sum(dim=m),
        "sum1": lambda: t.sum(dim=sd),
        "amax": lambda: t.amax(dim=sd),
        "softmax": lambda: t.softmax(sd),
        "log_softmax": lambda: t.log_softmax(m),
        "narrow0": lambda: t.narrow(m, 1, 3),
        "narrow1": lambda: t.narrow(sd, 1, 3),
        "select0": lambda: t.select(m, 2),
        "select1": lambda: t.select(sd, 2),
        "index_select": lambda: t.index_select(sd, np.array([0, 3, 3])),
        "index_select0": lambda: t.index_select(m, np.array([5, 1])),
        "slice": lambda: t[..., 1:3] if not t.dense_dim else t[1:3],
        "nonzero": lambda: t.nonzero(),
        "sparse_mask": lambda: st.from_dense(np.ones(t.shape), "coo", dense_dim=t.dense_dim).sparse_mask(t),
        "sparse_mask_self": lambda: t.sparse_mask(st.from_dense(np.ones(t.shape), t.layout.name,
                                                                 blocksize=t.blocksize, batch_dim=m,
                                                                 dense_dim=t.dense_dim)),
        "cat": lambda: st.cat([t, t], dim=m),
        "hstack": lambda: st.hstack([t, t]),
        "vstack": lambda: st.vstack([t, t]),
        "tril": lambda: st.tril(t).to_dense(),
        "triu": lambda: st.triu(t, 1).to_dense(),
        "eliminate_zeros": lambda: t.clone().eliminate_zeros().to_dense(),
        "flatten": lambda: t.to_sparse_coo().flatten(),
        "kron": lambda: st.kron(t, st.from_dense(np.eye(2), "csr")),
    }
    for layout in ("coo", "csr", "csc", "bsr", "bsc"):
        bs = (2, 2) if layout in ("bsr", "bsc") else None
        if layout != t.layout.name:
            ops[f"to_{layout}"] = lambda layout=layout, bs=bs: t.to_sparse(layout, blocksize=bs).to_dense()
    if not t.dense_dim:
        ops["matvec"] = lambda: t @ x[..., 0]
        ops["matmul"] = lambda: t @ x
        ops["rmatmul"] = lambda: x.swapaxes(-1, -2) @ t if plain2d else None
        ops["spgemm"] = lambda: st.matmul(t, t)
        ops["spgemm_T"] = lambda: st.matmul(t, t.mT)
    if plain2d and not t.dense_dim:
        ops["sampled_addmm"] = lambda: st.sampled_addmm(t, rng.random((t.shape[0], 2)), rng.random((2, t.shape[1])))
        if t.layout != st.sparse_bsc:
            ops["to_scipy"] = lambda: t.to_scipy()  # (SciPy's own kernels trust the arrays it shares)
            # a copy taken after the change goes to SciPy only after a check (it read out of bounds)
            ops["clone_to_scipy"] = lambda: t.clone().to_scipy() @ np.ones(t.shape[1])
        ops["block_diag"] = lambda: st.block_diag(t, t).to_dense()
        ops["sgd"] = lambda: _sgd(t)
    return ops


def _sgd(t):
    W = np.zeros(t.shape)
    g = t.to_sparse("coo") if t.layout != st.sparse_coo else t
    st.optim.SGD([W], lr=0.1).step([g])
    st.optim.SparseAdam([W], lr=0.1).step([g])
    st.optim.Adagrad([W], lr=0.1).step([g])


def _all_ops():
    names = []
    for case in CASES:
        t, _ = CASES[case]()
        names += [(case, op) for op in _ops(t)]
    return names


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Every op once on valid tensors in the parent, so children inherit imported modules and
    built caches (a child then spends its time on the op, not on imports)."""
    for case in CASES:
        t, _ = CASES[case]()
        for fn in _ops(t).values():
            try:
                fn()
            except ALLOWED:
                pass


@pytest.mark.parametrize("case, op", _all_ops())
def test_changed_index_never_crashes_or_hangs(case, op):
    """Every change of MUTATIONS to a fresh validated tensor, then ``op``: one forked child per
    (tensor, op), one call per change."""
    calls = []
    for member in CASES[case]()[1]:
        for where, value in MUTATIONS[member]:
            t, arrays = CASES[case]()
            fn = _ops(t)[op]

            def call(t=t, arrays=arrays, member=member, where=where, value=value, fn=fn):
                _mutate(t, arrays, member, where, value)
                fn()

            calls.append((f"{member}[{where}] = {value}", call))
    outcomes = run_forked(calls)
    failures = [f"{label}: {out}" for (label, _), out in zip(calls, outcomes) if _fails(out)]
    assert len(outcomes) == len(calls) and not failures, f"{case} {op}: " + "; ".join(failures)


# -- the findings of issue 34, as regressions ----------------------------------------------------

def _eye_csr(idt=np.int64, n=4):
    """A validated 4 x 4 identity in csr built zero-copy from arrays the test keeps."""
    crow, col = np.arange(n + 1, dtype=idt), np.arange(n, dtype=idt)
    t = st.sparse_csr_tensor(crow, col, np.ones(n), (n, n))
    assert t.is_coalesced() and np.shares_memory(t.col_indices(), col)
    return t, crow, col


def _raises(fn):
    [outcome] = run_forked([("", fn)])
    assert outcome.startswith("raised"), outcome
    return outcome


@pytest.mark.parametrize("idt", [np.int32, np.int64])
@pytest.mark.parametrize("x", [np.ones(4), np.ones((4, 3))], ids=["spmv", "spmm"])
def test_product_of_a_validated_tensor_whose_column_changed_raises(idt, x):
    t, _, col = _eye_csr(idt)
    col[0] = 10**9  # used to SIGSEGV: the checked tensor took the unguarded kernel copy
    _raises(lambda: t @ x)
    col[0] = -1  # used to read x[-1] silently
    _raises(lambda: t @ x)


def test_small_to_dense_of_a_changed_tensor_raises():
    t, _, col = _eye_csr()
    col[1] = 10**9  # small_to_dense_2d wrote out of bounds
    assert "5.5" in _raises(lambda: t.to_dense())


@pytest.mark.parametrize("op", ["mul", "add", "narrow", "slice", "transpose"])
def test_changed_compressed_index_never_corrupts_the_heap(op):
    t, crow, _ = _eye_csr()
    fn = {"mul": lambda: t * t,  # "malloc(): invalid size"
          "add": lambda: t + t,
          "narrow": lambda: t.narrow(1, 1, 2),  # heap corruption reported after it returned
          "slice": lambda: t[..., 1:3],  # a hang with a crow entry of -10**6
          "transpose": lambda: t.to_sparse_csc()}[op]
    for value in (-10**6, 10**9, 3):
        crow[2] = value
        [outcome] = run_forked([("", fn)])
        assert not _fails(outcome), f"crow[2] = {value}: {outcome}"


@pytest.mark.parametrize("op", ["select", "narrow", "index_select"])
def test_rows_cut_out_past_the_entries_raise(op):
    """A last row end moved past nnz: the cut-out row's slice leaves the arrays (it was copied
    as nothing, leaving the output's entries uninitialized)."""
    crow, col, val = np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 2.0])
    t = st.sparse_csr_tensor(crow, col, val, size=(2, 4))
    t.check_invariants()
    crow[-1] = 3
    fn = {"select": lambda: st.select(t, 0, 1), "narrow": lambda: st.narrow(t, 0, 1, 1),
          "index_select": lambda: st.index_select(t, 0, np.array([1, 0]))}[op]
    # the selections check a caller's arrays again first; the kernel's own guard stays behind it
    said = _raises(fn)
    assert "5.2" in said and "(changed since the check)" in said or "changed after validation (a slice [1, 3)" in said


def test_coo_to_csr_of_a_checked_coo_reads_its_columns():
    idx = np.array([[0, 1, 2], [0, 1, 2]])
    t = st.sparse_coo_tensor(idx, np.ones(3), (3, 3), is_coalesced=True)
    idx[1, 1] = 10**9  # the trusted path read only the rows and marked a result with this column canonical
    with pytest.raises(st.InvariantError) as e:
        t.to_sparse_csr()
    assert e.value.invariant == "C5"
    idx[1, 1] = 1
    idx[1, 0], idx[1, 1] = 1, 1  # no longer sorted and distinct within the row (not C6: other rows)
    idx[0, 1] = 0
    with pytest.raises(st.InvariantError) as e:
        t.to_sparse_csr()
    assert e.value.invariant == "C6"


_LARGE = """
import sys
import numpy as np
import sparsetensor as st
what = sys.argv[1]
ref = st.random((6000, 6000), 0.012, rng=np.random.default_rng(3))  # ~430k entries
rows30 = st.random((300, 300), 0.1, rng=np.random.default_rng(4))  # 30 a row
for m, ops in ((ref, (lambda t: t.to_sparse_csc(threads=2), lambda t: t.to_sparse_csc(threads=1),
                      lambda t: t.matmul(np.ones(t.shape[1]), threads=2))),
               (rows30, (lambda t: t @ np.ones(t.shape[1]), lambda t: t.to_sparse_csc()))):
    for value in (-1, 10**9, -10**6):
        for op in ops:
            crow, col = m.crow_indices().copy(), m.col_indices().copy()
            t = st.sparse_csr_tensor(crow, col, m.values().copy(), m.shape)
            (col if what == "col" else crow)[len(crow) // 2] = value
            try:
                op(t)
                print("ok", flush=True)
            except ValueError as e:
                print("raised", type(e).__name__, flush=True)
"""


@pytest.mark.parametrize("what", ["col", "crow"])
def test_large_paths_of_a_changed_tensor_stay_in_bounds(what):
    """The paths that small tensors do not reach: the bucketed transpose (over 4 MiB of entries and
    4096 columns), the AVX2 SpMV (16 entries a row and more) and two threads. A fresh interpreter,
    not a fork: GNU OpenMP's thread pool does not survive fork (a forked child that starts a
    parallel region after its parent did can hang)."""
    # cwd: not the repository root, whose unbuilt sources would shadow the installed package
    r = subprocess.run([sys.executable, "-c", _LARGE, what], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(__file__))
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    lines = r.stdout.split("\n")[:-1]
    assert len(lines) == 15 and all(x.startswith("raised") for x in lines), lines  # each change seen, not followed


_WRITE_THROUGH_TORCH = """
import sys, numpy as np, sparsetensor as st
layout = sys.argv[1]
t = st.from_dense(np.array([[0.0, 1.0], [2.0, 0.0]]), layout, **({"blocksize": (1, 1)} if layout == "bsr" else {}))
if layout == "coo":
    t = t.to(index_dtype=np.int64)  # int64 COO indices are shared (int32 ones are copied)
tt = st.to_torch(t)
member = tt.indices()[1] if layout == "coo" else (tt.col_indices() if layout in ("csr", "bsr") else tt.row_indices())
member[0] = 10**6
try:
    st.to_scipy(t).toarray()
except st.InvariantError as e:
    print("raised", e.invariant)
"""


@requires_torch
@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "coo"])
def test_indices_written_through_torch_are_checked_before_scipy(layout):
    """st.to_torch shares a tensor's index arrays, which PyTorch can write; the next export to
    SciPy (which trusts its arrays) checks them again, instead of a SciPy kernel reading out of
    bounds (it segfaulted). In a fresh interpreter: PyTorch's thread pool does not survive fork."""
    r = subprocess.run([sys.executable, "-c", _WRITE_THROUGH_TORCH, layout], capture_output=True, text=True,
                       timeout=120, cwd=os.path.dirname(__file__))  # not the root: its unbuilt sources
    assert r.returncode == 0 and r.stdout.split()[:1] == ["raised"], (r.returncode, r.stdout, r.stderr[-2000:])


_DERIVED = {
    "clone": lambda t: t.clone(), "astype": lambda t: t.astype(np.float32),
    "index_dtype": lambda t: t.to(index_dtype=np.int32), "add": lambda t: t + t, "scale": lambda t: t * 2.0,
    "softmax": lambda t: st.softmax(t, -1), "cat": lambda t: st.cat([t, t]), "slice": lambda t: t[0:2],
    "unsqueeze": lambda t: t.unsqueeze(0), "to_coo": lambda t: t.to_sparse_coo(),
    "twice": lambda t: t.clone().abs().to_sparse_coo(),
    "add_": lambda t: t.add_(t), "iadd": lambda t: t.__iadd__(t), "eliminate_zeros": lambda t: t.eliminate_zeros(),
}


@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
@pytest.mark.parametrize("op", sorted(_DERIVED))
def test_results_computed_from_changed_indices_are_checked_at_exits(layout, op):
    """A result computed from a tensor whose caller wrote an index out of range after the check is
    a copy the caller does not hold, flagged checked: it carries the mark of its source, so an
    exit that trusts the flag checks it again (SciPy's product read out of bounds and crashed;
    reshape folded the index into a valid-looking coordinate)."""
    if layout == "coo":
        idx = np.array([[0, 1, 2], [0, 1, 2]])
        t = st.sparse_coo_tensor(idx, np.array([1.0, 2.0, 3.0]), (3, 3), is_coalesced=True)
        member = idx[1]
    else:
        member = np.array([0, 1, 2])
        make = st.sparse_csr_tensor if layout == "csr" else st.sparse_csc_tensor
        t = make(np.array([0, 1, 2, 3]), member, np.array([1.0, 2.0, 3.0]), (3, 3))
    t.check_invariants()
    member[0] = 10**9
    try:
        r = _DERIVED[op](t)
    except ValueError:
        return  # the op itself noticed (InvariantError, or a kernel's ValueError)
    try:
        r.check_invariants()
        return  # the op left the changed entry out (a slice of rows): a valid result
    except st.InvariantError:
        pass
    flat = r if r.ndim == 2 else r.select(0, 0)
    for exit_ in (lambda: flat.to_scipy(), lambda: r.to_sparse_coo().reshape(-1)):
        with pytest.raises(ValueError):
            exit_()
    member[0] = 0  # the caller's array is valid again; a copy taken before is not
    if not np.shares_memory(r.indices() if r.layout is st.sparse_coo else r.plain_indices(), member):
        with pytest.raises(st.InvariantError):
            flat.to_scipy()
    if r is not t:  # (an in-place op's tensor holds the copies it took)
        fresh = _DERIVED[op](t)
        assert (fresh if fresh.ndim == 2 else fresh.select(0, 0)).to_scipy().nnz > 0  # checked once, then trusted


def test_masks_selections_and_casts_of_changed_indices_raise():
    """The ops that place or drop entries by coordinate check a caller's arrays again: a mask whose
    compressed index was written (its row counts wrapped: a segfault in sparse_mask), a blocked
    copy cut by tril (the block was dropped), a selection (the entry was dropped) and an index
    cast to int32 (2**32 wrapped to 0, a valid-looking column)."""
    crow, col = np.array([[0, 2, 3], [0, 2, 3]]), np.array([[0, 1, 0], [0, 1, 0]])
    m = st.sparse_csr_tensor(crow, col, np.ones((2, 3)), (2, 2, 2))
    m.check_invariants()
    crow[:, 2] = -2**63
    for call in (lambda: m.sparse_mask(m), lambda: st.sparse_mask(np.ones((2, 2, 2)), m)):
        with pytest.raises(st.InvariantError):
            call()
    crow, col = np.array([0, 1, 2]), np.array([0, 1])
    b = st.sparse_bsr_tensor(crow, col, np.ones((2, 1, 1)), (2, 2))
    b.check_invariants()
    col[0] = 7
    with pytest.raises(st.InvariantError, match="changed since the check"):
        st.tril(b.clone())
    col = np.array([0, 1])
    t = st.sparse_csr_tensor(np.array([0, 1, 2]), col, np.array([1.0, 2.0]), (2, 2))
    t.check_invariants()
    col[0] = 7
    for call in (lambda: t.index_select(1, np.array([0, 1])), lambda: t.narrow(1, 0, 2), lambda: t[:, ::1],
                 lambda: t.select(0, 0)):
        with pytest.raises(st.InvariantError, match="changed since the check"):
            call()
    col[0] = 2**32
    with pytest.raises(st.InvariantError):
        t.to(index_dtype=np.int32)


def test_every_op_checks_changed_caller_indices_again():
    """Found by a third fuzz: the ops that rely on checked indices check a caller's arrays again
    (ensure_valid), and a transpose of a computed copy keeps the mark. Before: .mT of a clone
    crashed SciPy's product, resize_as_ made an index valid, a product with a valid operand, a
    bsr conversion, trace and nonzero dropped or returned the changed entry."""
    def fresh():
        col = np.array([0, 1, 2])
        t = st.sparse_csr_tensor(np.array([0, 1, 2, 3]), col, np.array([1.0, 2.0, 3.0]), (3, 3))
        t.check_invariants()
        return t, col

    valid = st.from_dense(np.ones((3, 3)), "csr")
    calls = {10**9: [lambda t: t.clone().mT.to_scipy(), lambda t: t.to_sparse_csc().mT.to_scipy()],
             3: [lambda t: t.resize_as_(st.zeros((3, 8), layout="csr"))],
             -1: [lambda t: st.mul(valid, t), lambda t: st.minimum(valid, t), lambda t: t.to_sparse_bsr((1, 1)),
                  lambda t: st.trace(t), lambda t: st.nonzero(t)]}
    for bad, fns in calls.items():
        for fn in fns:
            t, col = fresh()
            col[2] = bad
            with pytest.raises(st.InvariantError, match="changed since the check"):
                fn(t)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc", "coo"])
def test_sums_of_changed_indices_name_the_invariant(layout):
    """A sum over the compressed dim reads the plain indices (the columns of csr): one written out
    of range after the check was the kernel's ValueError; the sums that read none (every dim, the
    row sums of csr) returned numbers for an entry in no column. Each now raises the broken
    invariant, as the other ops say it."""
    ref = st.from_dense(np.kron(np.eye(3), np.ones((2, 2))), layout,
                        blocksize=(2, 2) if layout in ("bsr", "bsc") else None)
    if layout == "coo":
        held = np.array(ref.indices())
        t = st.sparse_coo_tensor(held, ref.values(), ref.shape, is_coalesced=True)
        held = held[1]
    else:
        held = np.array(ref.plain_indices())
        t = st.sparse_compressed_tensor(np.array(ref.compressed_indices()), held, ref.values(), ref.shape,
                                        layout=layout)
    t.check_invariants()
    sums = {"dim0": lambda: t.sum(dim=0), "dim1": lambda: t.sum(dim=1), "all": lambda: t.sum(),
            "mean": lambda: st.mean(t), "np_axis1": lambda: np.sum(t, axis=1)}
    for name, f in sums.items():
        r = f()
        got = r.to_dense() if isinstance(r, st.SparseTensor) else np.asarray(r)
        want = {"dim0": ref.to_dense().sum(0), "dim1": ref.to_dense().sum(1), "all": ref.to_dense().sum(),
                "mean": ref.to_dense().mean(), "np_axis1": ref.to_dense().sum(1)}[name]
        np.testing.assert_allclose(got, want, err_msg=name)
    held[1] = 10**6
    for name, f in sums.items():
        with pytest.raises(st.InvariantError, match=r"(5\.5|C5).*changed since the check"):
            f()


def _exits(t):
    """What a caller does with a tensor beyond the op table's ops: NumPy's and SciPy's protocols."""
    import scipy.sparse.linalg as sla
    if t.ndim != 2 or t.dense_dim or t.layout not in (st.sparse_csr, st.sparse_csc):
        return {}
    x = np.ones(t.shape[1])
    return {"asarray": lambda: np.asarray(t), "np_matmul": lambda: np.matmul(t, x),
            "linop": lambda: sla.aslinearoperator(t).matvec(x), "np_sum": lambda: np.sum(t, axis=1)}


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("coo")])
def test_changed_ends_of_a_checked_tensor_raise(case):
    """A first or last compressed index written after the check (5.1/5.2: ``crow[0] = 1``,
    ``crow[-1] = nnz - 1``) reads nothing out of bounds, so the kernels, which bound every read,
    did not notice: to_dense, products, reductions, softmax, a clone's or transpose's to_dense
    dropped or misplaced the entries silently. Every op that succeeds on the tensor before the
    change raises InvariantError 5.1/5.2 after it."""
    t0, _ = CASES[case]()
    ops = {**_ops(t0), **_exits(t0)}
    runs = []
    for name, fn in ops.items():
        try:
            if fn() is None and name == "rmatmul":
                continue  # not defined for this tensor (the lambda returns None)
        except ALLOWED:
            continue  # the op refuses this tensor anyway
        runs.append(name)
    calls = []
    for name in runs:
        for where, value in ((0, 1), (-1, "nnz-1")):
            t, arrays = CASES[case]()
            fn = {**_ops(t), **_exits(t)}[name]

            def call(t=t, arrays=arrays, where=where, value=value, fn=fn):
                _mutate(t, arrays, "compressed", where, value)
                fn()
                raise KeyError("returned without an error")

            calls.append((f"{name}: compressed[{where}] = {value}", call))
    outcomes = run_forked(calls, timeout=60.0)
    bad = [f"{label}: {out}" for (label, _), out in zip(calls, outcomes)
           if not (out.startswith("raised InvariantError") and ("5.1" in out or "5.2" in out))]
    assert len(outcomes) == len(calls) and not bad, "; ".join(bad)


def test_coo_times_or_over_a_dense_array_checks_changed_indices_again():
    """The COO sampling of a dense operand (mul, div) indexes it by the tensor's coordinates: a
    column written out of range after the check gave NumPy's IndexError, a negative one a value
    from the row's end (NumPy wraps it)."""
    for bad in (10**9, -1):
        for fn in (lambda t: st.div(t, np.ones((3, 3))), lambda t: st.mul(t, np.ones((3, 3)))):
            idx = np.array([[0, 1, 2], [0, 1, 2]])
            t = st.sparse_coo_tensor(idx, np.array([1.0, 2.0, 3.0]), (3, 3), is_coalesced=True)
            t.check_invariants()
            idx[1, 0] = bad
            with pytest.raises(st.InvariantError, match="changed since the check"):
                fn(t)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_a_repeat_written_into_a_checked_tensor_sums_or_raises(layout):
    """A coordinate written into a checked tensor so that it repeats another (C6 / 5.6 broken,
    every index in range): coalesce returned the tensor as it was, COO mul summed the products of
    the repeats, amax took one of them and to_dense kept the last (unchecked input sums them).
    Now coalesce, merges and reductions check it again and raise; to_dense sums the repeats, as
    for unchecked input and as the products with a dense operand do."""
    if layout == "coo":
        idx = np.array([[0, 1, 2], [1, 1, 2]])
        t = st.sparse_coo_tensor(idx, np.array([1.0, 2.0, 3.0]), (3, 3), is_coalesced=True)
        changed = idx[0]
    else:
        changed = np.array([0, 1, 2])
        t = st.sparse_csr_tensor(np.array([0, 2, 2, 3]), changed, np.array([1.0, 2.0, 3.0]), (3, 3))
    t.check_invariants()
    changed[1] = 0  # the second entry repeats the first coordinate
    want = np.zeros((3, 3))
    want[0, 1 if layout == "coo" else 0] = 3.0
    want[2, 2] = 3.0
    np.testing.assert_array_equal(t.to_dense(), want)
    if layout == "coo":  # a COO product relies on the flag (C6)
        with pytest.raises(st.InvariantError, match="C6"):
            t @ np.eye(3)
    else:
        np.testing.assert_array_equal(t @ np.eye(3), want)
    for fn in (lambda: t.coalesce(), lambda: t * t, lambda: st.amax(t, 1), lambda: t + t):
        with pytest.raises(st.InvariantError, match="changed since the check"):
            fn()
