"""The command line: ``python -m sparsetensor`` (also installed as ``sparsetensor``).

With no arguments it runs a short self-demonstration on a generated matrix.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

__all__ = ["main", "demo"]


def _best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _random_csr_arrays(n: int, per_row: int, seed: int, index_dtype=np.int32):
    """A random n x n CSR pattern with about ``per_row`` entries per row, sorted and distinct."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 2 * per_row + 1, size=n)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    keys = np.unique(rows * n + rng.integers(0, n, size=rows.size))  # sorts and drops duplicates
    rows, cols = np.divmod(keys, n)
    crow = np.zeros(n + 1, dtype=index_dtype)
    np.cumsum(np.bincount(rows, minlength=n), out=crow[1:])
    values = rng.standard_normal(cols.size).astype(np.float32)
    return crow, cols.astype(index_dtype), values


def demo(size: int = 3000, per_row: int = 10, seed: int = 0, out=sys.stdout) -> None:
    """Build a random matrix in several layouts, validate, convert, and time against SciPy."""
    import sparsetensor as st

    def say(*a):
        print(*a, file=out)

    crow, col, val = _random_csr_arrays(size, per_row, seed)
    t0 = time.perf_counter()
    csr = st.sparse_csr_tensor(crow, col, val, size=(size, size))
    say(f"built {csr!r} with a full invariant check in {1e3 * (time.perf_counter() - t0):.2f} ms")
    dense = csr.to_dense()
    say(f"to_dense -> {dense.dtype}{list(dense.shape)}, {np.count_nonzero(dense)} nonzeros")
    for layout, kw in (("coo", {}), ("csc", {}), ("bsr", {"blocksize": (4, 4)}), ("bsc", {"blocksize": (2, 5)})):
        if size % 20 and layout in ("bsr", "bsc"):
            continue
        t = st.from_dense(dense, layout, **kw)
        t.check_invariants()
        ok = np.array_equal(t.to_dense(), dense)
        say(f"from_dense -> {t!r}: invariants hold, round trip {'exact' if ok else 'WRONG'}")
    csc = csr.mT
    say(f"csr.mT is a view: {csc.layout}, shares values: {np.shares_memory(csc.values(), csr.values())}")
    try:
        st.sparse_csr_tensor(crow[::-1].copy(), col, val, size=(size, size))
    except st.InvariantError as e:
        say(f"a corrupted crow_indices is refused: {str(e)[:100]}")

    say("")
    say(f"timings (median of 5, {st.num_threads()} threads), ours vs SciPy:")
    ours_check = _best_of(lambda: csr.check_invariants())
    ours_dense = _best_of(lambda: csr.to_dense())
    ours_from = _best_of(lambda: st.from_dense(dense, "csr"))
    rows = [("full invariant check", ours_check), ("csr -> dense", ours_dense), ("dense -> csr", ours_from)]
    try:
        import scipy.sparse as sp
    except ImportError:
        for name, ours in rows:
            say(f"  {name:22s} {1e3 * ours:9.3f} ms   (SciPy not installed)")
        return
    m = sp.csr_array((val, col, crow), shape=(size, size))

    def scipy_check():
        m.check_format(full_check=True)
        m.has_sorted_indices = False  # force the sortedness scan each time
        _ = m.has_sorted_indices

    peers = [scipy_check, lambda: m.toarray(), lambda: sp.csr_array(dense)]
    say(f"  {'operation':22s} {'ours ms':>9s} {'scipy ms':>9s} {'speedup':>8s}")
    for (name, ours), peer in zip(rows, peers):
        theirs = _best_of(peer)
        say(f"  {name:22s} {1e3 * ours:9.3f} {1e3 * theirs:9.3f} {theirs / ours:7.1f}x")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="sparsetensor", description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=3000, help="rows/cols of the demo matrix (default 3000)")
    parser.add_argument("--per-row", type=int, default=10, help="nonzeros per row on average (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.size < 1 or args.per_row < 0:
        parser.error("--size must be >= 1 and --per-row >= 0")
    demo(args.size, args.per_row, args.seed)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
