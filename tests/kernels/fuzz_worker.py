"""Fuzz worker, run in a subprocess by tests/kernels/test_fuzz.py: random invalid (and valid) members x
every public op and every exit, on tensors built with ``check_invariants=False``.

Each case is printed (and flushed) before it runs, so a crash (a signal, an abort) leaves the
case that caused it as the last line of the output. A case fails when an op raises anything
but the library's documented errors, or when an exit (``to_scipy``, ``to_torch``, ``to_dense``,
conversions, products) returns a result for a tensor whose indices break an invariant that
cannot be repaired (anything but 5.6 / C6): that would be a silent wrong answer, or a crash
waiting inside the library that received it.

usage: python fuzz_worker.py SEED CASES
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
import warnings

import numpy as np

import sparsetensor as st

try:
    import torch
except ImportError:  # torch is optional: its exit is then skipped
    torch = None

LAYOUTS = ["coo", "csr", "csc", "bsr", "bsc"]
# Errors an op may raise on bad input: the documented ones (InvariantError is a ValueError).
ALLOWED = (ValueError, TypeError, NotImplementedError, IndexError, OverflowError)
# Repairable faults: a canonical copy is made, so results are right.
REPAIRABLE = {"repairable"}


def _valid(rng, layout: str):
    """A random valid tensor of ``layout`` with its dense oracle (sometimes batched / hybrid)."""
    blocked = layout in ("bsr", "bsc")
    bs = (2, 2) if blocked else None
    rows, cols = (int(rng.integers(1, 5)) * (2 if blocked else 1) for _ in range(2))
    batch = () if layout == "coo" or rng.random() < 0.6 else (2,)
    dense = () if rng.random() < 0.75 else (2,)
    a = np.zeros(batch + (rows, cols) + dense)
    mask = np.broadcast_to(rng.random((rows, cols)) < 0.4, batch + (rows, cols))  # same nnz in every batch
    a[mask] = rng.integers(1, 9, size=(int(mask.sum()),) + dense)
    t = st.from_dense(a, layout, blocksize=bs, batch_dim=len(batch), dense_dim=len(dense))
    idx = rng.choice([np.int32, np.int64])
    return t.to(index_dtype=idx)


def _corrupt(rng, t):
    """Members of ``t`` with one index entry (or a pair) changed, as fresh copies."""
    if t.layout == st.sparse_coo:
        members = [t.indices().copy()]
    else:
        members = [t.compressed_indices().copy(), t.plain_indices().copy()]
    m = members[int(rng.integers(len(members)))]
    if m.size:
        flat = m.reshape(-1)
        pos = int(rng.integers(flat.size))
        info = np.iinfo(flat.dtype)
        choice = int(rng.integers(6))
        if choice == 5 and flat.size > 1:  # swap two entries: unsorted (5.6 / C6 / 5.3)
            q = int(rng.integers(flat.size))
            flat[pos], flat[q] = flat[q], flat[pos]
        else:
            flat[pos] = [-1, flat[pos] + 1, max(t.shape) + 1, info.max, info.min, 2**30][choice]
    if t.layout == st.sparse_coo:
        return st.sparse_coo_tensor(members[0], t.values().copy(), t.shape, check_invariants=False,
                                    is_coalesced=bool(rng.random() < 0.5))
    return st.sparse_compressed_tensor(members[0], members[1], t.values().copy(), t.shape, layout=t.layout,
                                       check_invariants=False)


def _ops(t, rng):
    """(name, callable, exit) for every public op and export that applies to ``t``; ``exit`` marks
    the ones that must refuse an unrepairable tensor."""
    nd = t.ndim
    m = getattr(t, "batch_dim", 0)
    dense_ok = t.dense_dim == 0
    ops = [
        ("check_invariants", lambda: t.check_invariants() or t, True),
        ("to_dense", lambda: t.to_dense(), True),
        ("coalesce", lambda: t.coalesce(), False),
        ("clone", lambda: t.clone(), False),
        ("neg", lambda: -t, False),
        ("abs", lambda: abs(t), False),
        ("scale", lambda: t * 2.0, False),
        ("sum", lambda: t.sum(), False),
        ("sum0", lambda: t.sum(dim=0), True),
        ("sum_last_sparse", lambda: t.sum(dim=m + 1 if t.layout != st.sparse_coo else t.sparse_dim - 1), True),
        ("amax", lambda: t.amax(), False),
        ("amax0", lambda: t.amax(dim=m), True),
        ("norm", lambda: t.norm(), False),
        ("add", lambda: t + t, True),
        ("sub", lambda: t - t, True),
        ("mul", lambda: t * t, True),
        ("add_dense", lambda: t + np.ones(t.shape), True),
        ("mul_dense", lambda: t * np.ones(t.shape), True),
        ("transpose", lambda: t.transpose(nd - 1, nd - 2) if t.sparse_dim >= 2 and dense_ok else t.T, False),
        ("narrow", lambda: t.narrow(m, 0, max(1, t.shape[m] // 2)), True),
        ("select", lambda: t.select(m, 0), True),
        ("index_select", lambda: t.index_select(m, np.array([0, 0])), True),
        ("nonzero", lambda: t.nonzero(), True),
        ("cat", lambda: st.cat([t, t], dim=m), False),
        ("stack", lambda: st.stack([t, t]), False),
        ("sparse_mask", lambda: st.from_dense(np.ones(t.shape), "coo", dense_dim=t.dense_dim).sparse_mask(t), True),
        ("softmax", lambda: t.softmax(m) if t.sparse_dim >= 1 else None, True),
        ("save_load", lambda: _save_load(t), True),
    ]
    for layout in LAYOUTS:
        bs = (2, 2) if layout in ("bsr", "bsc") else None
        # to the same layout returns the tensor itself (documented), not a new result
        ops.append((f"to_sparse_{layout}", lambda layout=layout, bs=bs: t.to_sparse(layout, blocksize=bs),
                    layout != t.layout.name))
    if dense_ok and t.sparse_dim == 2 and nd == 2 + m:
        x = rng.random(t.shape[:m] + (t.shape[-1], 3))
        ops += [
            ("matmul_dense", lambda: t @ x, True),
            ("matvec", lambda: t @ x[..., 0], True),
            ("dense_matmul", lambda: rng.random((3, t.shape[-2])) @ t if not m else None, True),
            ("spgemm", lambda: st.matmul(t, t.mT) if not m else None, True),
            ("sampled_addmm", lambda: st.sampled_addmm(t, rng.random((t.shape[-2], 2)),
                                                        rng.random((2, t.shape[-1]))) if not m else None, True),
        ]
        if not m and t.layout != st.sparse_bsc:
            ops.append(("to_scipy", lambda: t.to_scipy().toarray(), True))
    if torch is not None:
        ops.append(("to_torch", lambda: t.to_torch().to_dense(), True))
    return ops


def _save_load(t):
    fd, path = tempfile.mkstemp(suffix=".npz")
    os.close(fd)
    try:
        st.save(path, t)
        return st.load(path)
    finally:
        os.unlink(path)


def _broken(t):
    """The invariant ``t`` breaks (None when valid, "repairable" when coalesce() mends it: rows
    that are unsorted or hold duplicates), found on clones so ``t``'s flag stays unset."""
    try:
        t.clone().check_invariants()
    except st.InvariantError as e:
        if e.invariant in ("5.6", "C6"):
            return "repairable"  # unsorted or repeated: the documented semantics sum duplicates
        try:
            t.clone().coalesce()
        except ALLOWED:
            return "repairable" if _batches_repairable(t) else e.invariant
        return "repairable"
    return None


def _batches_repairable(t) -> bool:
    """Whether every batch of compressed ``t``, taken alone, coalesces: rows holding only repeats
    (more entries than columns), which the batches cannot hold merged when their nnz then differ,
    but which every op sums, as for one matrix."""
    m = getattr(t, "batch_dim", 0)
    if t.layout == st.sparse_coo or not m:
        return False
    B = int(np.prod(t.shape[:m]))
    c, p, v = (x.reshape((B,) + x.shape[m:]) for x in (t.compressed_indices(), t.plain_indices(), t.values()))
    for b in range(B):
        try:
            st.sparse_compressed_tensor(c[b].copy(), p[b].copy(), v[b].copy(), t.shape[m:], layout=t.layout,
                                        check_invariants=False).coalesce()
        except ALLOWED:
            return False
    return True


def main(seed: int, cases: int) -> int:
    warnings.simplefilter("ignore")  # torch's "sparse CSR is in beta" and the like
    rng = np.random.default_rng(seed)
    failures = 0
    for case in range(cases):
        layout = LAYOUTS[case % len(LAYOUTS)]
        base = _valid(rng, layout)
        try:
            t0 = _corrupt(rng, base) if rng.random() < 0.85 else base
        except ALLOWED:
            continue  # refused by the O(1) checks at construction (e.g. nnz differs per batch)
        broken = _broken(t0)
        for name, _, must_refuse in _ops(t0, rng):
            t = _corrupt_again(t0)  # a fresh, never-checked tensor per op (ops cache the check)
            op = dict((n, f) for n, f, _ in _ops(t, np.random.default_rng(case)))[name]
            print(f"seed={seed} case={case} layout={layout} shape={t.shape} index={t.index_dtype} "
                  f"broken={broken} op={name}", flush=True)
            try:
                result = op()
            except ALLOWED:
                continue
            except Exception as e:  # noqa: BLE001 - anything else is the finding
                failures += 1
                print(f"FAIL: unexpected exception {type(e).__module__}.{type(e).__name__}: {str(e)[:300]}",
                      flush=True)
                traceback.print_exc(file=sys.stdout)
                continue
            if must_refuse and result is not None and broken is not None and broken not in REPAIRABLE:
                failures += 1
                print(f"FAIL: {name} returned a result for a tensor breaking invariant {broken}: {t!r}", flush=True)
    print(f"done: {cases} cases, {failures} failures", flush=True)
    return 1 if failures else 0


def _corrupt_again(t):
    """A never-checked copy of ``t``'s members (same faults)."""
    if t.layout == st.sparse_coo:
        return st.sparse_coo_tensor(t.indices().copy(), t.values().copy(), t.shape, check_invariants=False,
                                    is_coalesced=t.is_coalesced())
    return st.sparse_compressed_tensor(t.compressed_indices().copy(), t.plain_indices().copy(), t.values().copy(),
                                       t.shape, layout=t.layout, check_invariants=False)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
