"""A/B of two builds in one process, the ops alternating, so that the machine's drift (other
tenants, memory bandwidth, frequency) falls on both sides alike.

    python -m bench inprocess --base SITE/sparsetensor [--python REV] [--cases spmm merge ...]

``--base`` is another install's package directory (e.g. a venv's ``site-packages/sparsetensor``
built from an older commit). Two comparisons, chosen by ``--python``:

- without it, **kernels**: this package's Python ops run once on the base install's compiled
  kernel modules (swapped in where this package holds them) and once on its own: the
  difference is the kernels' alone (e.g. added bounds guards);
- with ``--python REV``, **Python**: the package's Python files at git revision ``REV``, loaded
  as a second package ``sparsetensor_base`` over the base install's kernels, against this
  package's Python over the same kernel objects: the difference is the Python layer's alone
  (e.g. moved folders, a dispatch wrapper). The kernels' Python signatures must not differ
  between the two; a case whose call fails on one side is reported, not timed.

Each case is timed ``--rounds`` times per side (base, new, new, base, ...), ``--repeat`` calls
each; the table gives each side's best time and base/new of the best and of the medians
(above 1: this build is faster). The results also go to ``bench/results/inprocess.json``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ._common import print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
NEVER_SWAPPED = ("_pool", "_cpu")  # state (the memory pool) and the CPU probe stay this package's


# -- the base build --------------------------------------------------------------------------------
def _kernel_names(lib) -> list[str]:
    config = lib._build_config
    return [n for n in (*config.DISPATCHED, *config.BASELINE_ONLY) if n not in NEVER_SWAPPED]


def _load_extension(full_name: str, path: Path):
    spec = importlib.util.spec_from_file_location(full_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def level_kernels(lib_dir: Path, level: str, names, tag: str) -> dict:
    """The compiled kernel modules of ``lib_dir`` (a ``sparsetensor/_lib``) at this CPU ``level``,
    by name, loaded under names of their own (their cimports of ``sparsetensor._lib._pool`` resolve
    to this package's). Loaded by path, because an editable install's import hook maps
    ``sparsetensor._lib._spmm`` to the baseline build whatever level was chosen."""
    sub = {"avx512": "_x86_64_v4", "avx2": "_x86_64_v3"}.get(level)
    out = {}
    for name in names:
        for folder in ([lib_dir / sub] if sub else []) + [lib_dir]:
            found = sorted(folder.glob(f"{name}.*.so")) if folder.is_dir() else []
            if found:
                out[name] = _load_extension(f"sparsetensor_ab_{tag}_{level}.{name}", found[0])
                break
    return out


def base_python(rev: str, base: Path, workdir: Path):
    """``sparsetensor/`` at git revision ``rev`` as the package ``sparsetensor_base``, its
    ``_lib`` holding the base install's compiled modules (every level)."""
    target = workdir / "sparsetensor_base"
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "sparsetensor"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive, check=True)
    (workdir / "sparsetensor").rename(target)
    for src in (base / "_lib").rglob("*"):
        if src.suffix == ".so" or src.name == "_build_config.py":
            dst = target / "_lib" / src.relative_to(base / "_lib")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    sys.path.insert(0, str(workdir))
    return importlib.import_module("sparsetensor_base")


class Swap:
    """Points every module of package ``pkg`` that holds one of the kernel modules ``bound`` (or a
    function of one) at the same-named object of another set of kernel modules, and back."""

    def __init__(self, pkg: str, bound: dict):
        by_id = {}
        for name, mod in bound.items():
            by_id[id(mod)] = (mod, name, None)
            for attr, value in vars(mod).items():
                if callable(value):
                    by_id.setdefault(id(value), (value, name, attr))
        self.sites = [(sys.modules[f"{pkg}._lib"], name, mod, name, None) for name, mod in bound.items()]
        for modname, module in list(sys.modules.items()):
            if module is None or not (modname == pkg or modname.startswith(pkg + ".")) or modname.startswith(
                    f"{pkg}._lib."):
                continue
            for attr, value in list(vars(module).items()):
                hit = by_id.get(id(value))
                if hit is not None and hit[0] is value:
                    self.sites.append((module, attr, value, hit[1], hit[2]))

    def __call__(self, kernels: dict | None):
        """Bind ``kernels`` (name -> module; None: the original ones)."""
        for module, attr, original, name, inner in self.sites:
            if kernels is None or name not in kernels:
                setattr(module, attr, original)
            else:
                setattr(module, attr, kernels[name] if inner is None else getattr(kernels[name], inner))


# -- the cases ---------------------------------------------------------------------------------------
def _csr_parts(n: int, per_row: int, seed: int):
    rng = np.random.default_rng(seed)
    crow = np.arange(0, (n + 1) * per_row, per_row, dtype=np.int32)
    col = np.sort(rng.integers(0, n, (n, per_row), dtype=np.int32), axis=1)
    col += np.arange(per_row, dtype=np.int32)  # distinct in a row after the sort
    col %= n
    col.sort(axis=1)
    keep = np.ones_like(col, dtype=bool)
    keep[:, 1:] = col[:, 1:] != col[:, :-1]
    counts = keep.sum(axis=1)
    crow = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return crow, col[keep].astype(np.int32), rng.standard_normal(crow[-1]).astype(np.float32)


def cases(quick: bool):
    """name -> (group, build(st) -> callable): the shapes of the suites spmm, elementwise, convert,
    coalesce and validate, on 2 x 10^6 entries (2 x 10^5 with --quick)."""
    n = 20_000 if quick else 200_000
    crow, col, val = _csr_parts(n, 10, 0)
    crow2, col2, val2 = _csr_parts(n, 10, 1)
    rng = np.random.default_rng(2)
    d32 = rng.standard_normal((n, 32)).astype(np.float32)
    d128 = rng.standard_normal((n, 128)).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    nb = n // 16
    bc = np.arange(0, (nb + 1) * 4, 4, dtype=np.int32)
    bcol = (np.sort(rng.integers(0, nb - 4, (nb, 1)), axis=1) + np.arange(4)).astype(np.int32).reshape(-1)
    bval = rng.standard_normal((bcol.size, 16, 16)).astype(np.float32)
    d64 = rng.standard_normal((n, 64)).astype(np.float32)
    m = 1024 if quick else 4096
    small = _csr_parts(m, 10, 3)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(crow))
    perm = rng.permutation(rows.size)
    coo_idx = np.stack([rows[perm], col[perm].astype(np.int64)])
    coo_val = val[perm]

    def A(st):
        return st.sparse_csr_tensor(crow, col, val, size=(n, n))

    def A2(st):
        return st.sparse_csr_tensor(crow2, col2, val2, size=(n, n))

    def threaded(st, th, fn):
        def run():
            st.set_num_threads(th)
            try:
                return fn()
            finally:
                st.set_num_threads(None)
        return run

    k5, g27 = (100, 16) if quick else (500, 48)
    x5, x27 = np.ones(k5 * k5), np.ones(g27 ** 3)
    out = {}
    for th in (1, 2):
        out[f"spmv 5-point {k5}^2 float64 t={th}"] = ("spmv", lambda st, th=th: (lambda a: lambda: st.matmul(
            a, x5, threads=th))(st.stencil((k5, k5), 5, dtype=np.float64, index_dtype=np.int32)))
        out[f"spmv 27-point {g27}^3 float64 t={th}"] = ("spmv", lambda st, th=th: (lambda a: lambda: st.matmul(
            a, x27, threads=th))(st.stencil((g27, g27, g27), 27, dtype=np.float64, index_dtype=np.int32)))
    for th in (1, 2):
        out[f"csr @ dense N=1 t={th}"] = ("spmm", lambda st, th=th: (lambda a: lambda: st.matmul(a, x, threads=th))(A(st)))
        out[f"csr @ dense N=32 t={th}"] = ("spmm", lambda st, th=th: (lambda a: lambda: st.matmul(a, d32, threads=th))(A(st)))
        out[f"csr @ dense N=128 t={th}"] = ("spmm", lambda st, th=th: (lambda a: lambda: st.matmul(a, d128, threads=th))(A(st)))
        out[f"csc @ dense N=32 t={th}"] = ("spmm", lambda st, th=th: (lambda a: lambda: st.matmul(a, d32, threads=th))(A(st).mT))
        out[f"bsr 16x16 @ dense N=64 t={th}"] = ("spmm", lambda st, th=th: (
            lambda b: lambda: st.matmul(b, d64, threads=th))(st.sparse_bsr_tensor(bc, bcol, bval, size=(n, n))))
        out[f"csr + csr t={th}"] = ("merge", lambda st, th=th: (lambda a, b: threaded(st, th, lambda: a + b))(A(st), A2(st)))
        out[f"csr * csr t={th}"] = ("merge", lambda st, th=th: (lambda a, b: threaded(st, th, lambda: a * b))(A(st), A2(st)))
        out[f"coo + coo t={th}"] = ("merge", lambda st, th=th: (lambda a, b: threaded(st, th, lambda: a + b))(
            A(st).to_sparse_coo().coalesce(), A2(st).to_sparse_coo().coalesce()))
        out[f"csr -> csc t={th}"] = ("convert", lambda st, th=th: (lambda a: threaded(st, th, a.to_sparse_csc))(A(st)))
        out[f"coo -> csr t={th}"] = ("convert", lambda st, th=th: (lambda c: threaded(st, th, c.to_sparse_csr))(
            A(st).to_sparse_coo().coalesce()))
        out[f"csr -> dense t={th}"] = ("convert", lambda st, th=th: (lambda a: threaded(st, th, a.to_dense))(
            st.sparse_csr_tensor(*small, size=(m, m))))
        out[f"coalesce coo t={th}"] = ("coalesce", lambda st, th=th: threaded(
            st, th, lambda: st.sparse_coo_tensor(coo_idx, coo_val, size=(n, n), check_invariants=False).coalesce()))
        out[f"validate csr t={th}"] = ("validate", lambda st, th=th: threaded(
            st, th, lambda: st.sparse_csr_tensor(crow, col, val, size=(n, n), check_invariants=True)))
    return out


def _time(fn, repeat: int):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), float(np.median(ts))


def _same(a, b) -> bool:
    if hasattr(a, "to_scipy"):  # sparse results: their difference, never densified
        diff = abs(a.to_scipy() - b.to_scipy())
        return a.shape == b.shape and (diff.nnz == 0 or diff.max() <= 1e-4)
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-4)


def run(base: Path, rev: str | None, groups, repeat: int, rounds: int, quick: bool) -> list[dict]:
    import sparsetensor as st
    import sparsetensor._lib as lib

    names = _kernel_names(lib)
    swap = Swap("sparsetensor", {n: importlib.import_module(f"sparsetensor._lib.{n}") for n in names})
    if rev is None:
        mode, st_base = "kernels", st
        kb = level_kernels(base / "_lib", lib.LEVEL, names, "base")
        kn = level_kernels(Path(lib._cpu.__file__).parent, lib.LEVEL, kb, "new")
    else:
        mode = "python"
        st_base = base_python(rev, base, Path(tempfile.mkdtemp(prefix="st-ab-")))
        blib = importlib.import_module("sparsetensor_base._lib")
        if blib.LEVEL != lib.LEVEL:
            raise SystemExit(f"the two packages chose different CPU levels: {blib.LEVEL} and {lib.LEVEL}")
        # this package runs on the base package's kernel objects: only the Python differs
        kb = kn = {n: importlib.import_module(f"sparsetensor_base._lib.{n}") for n in names
                   if importlib.util.find_spec(f"sparsetensor_base._lib.{n}") is not None}
    missing = sorted(set(names) - set(kb))
    if missing:
        print(f"not in the base build, this build's on both sides: {', '.join(missing)}")
    print(f"{mode} A/B in one process at CPU level {lib.LEVEL}; base {base}" + (f", Python of {rev}" if rev else ""),
          flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    records = []
    for name, (group, build) in cases(quick).items():
        if group not in groups:
            continue
        try:
            swap(kb)
            fb = build(st_base)
            rb = fb()
            swap(kn)
            fn = build(st)
            rn = fn()
            if not _same(rb, rn):
                raise AssertionError("the two builds' results differ")
        except Exception as e:  # noqa: BLE001 - a case the two builds cannot both run is reported
            print(f"  {name}: not compared ({type(e).__name__}: {e})", flush=True)
            continue
        finally:
            swap(kn)
        side = {"base": [], "new": []}
        for r in range(rounds):
            for which in (("base", "new") if r % 2 == 0 else ("new", "base")):
                swap(kb if which == "base" else kn)
                f = fb if which == "base" else fn
                f()
                side[which].append(_time(f, repeat))
        bmin, nmin = min(t[0] for t in side["base"]), min(t[0] for t in side["new"])
        bmed = float(np.median([t[1] for t in side["base"]]))
        nmed = float(np.median([t[1] for t in side["new"]]))
        records.append({"case": name, "group": group, "mode": mode, "base_s": bmin, "new_s": nmin,
                        "ratio_best": bmin / nmin, "ratio_median": bmed / nmed})
        print(f"  {name}: done", flush=True)
        del fb, fn, rb, rn
    swap(None)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench inprocess", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, type=Path, help="the other install's sparsetensor/ directory")
    parser.add_argument("--python", default=None, metavar="REV",
                        help="compare the Python layer: the package's Python at this git revision")
    parser.add_argument("--cases", nargs="+", default=["spmv", "spmm", "merge", "convert", "coalesce", "validate"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    records = run(args.base.resolve(), args.python, set(args.cases), args.repeat, args.rounds, args.quick)
    rows = [[r["case"], f"{r['base_s'] * 1e3:.2f}", f"{r['new_s'] * 1e3:.2f}", f"{r['ratio_best']:.2f}",
             f"{r['ratio_median']:.2f}"] for r in records]
    print_table(["case", "base ms", "new ms", "base/new best", "base/new median"], rows)
    write_json("inprocess", {"mode": "python" if args.python else "kernels", "base": str(args.base),
                             "python_rev": args.python, "results": records})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
