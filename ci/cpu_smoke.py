"""Smoke test of an installed sparsetensor at one CPU level: NumPy is the oracle.

Builds every layout (COO, CSR, CSC, BSR, BSC) from dense with int32 and int64 indices and
float32 / float64 / int64 values, validates it, converts it to every other layout and
back, coalesces COO with duplicates, and runs sparse @ dense (matrix and vector),
sparse + sparse, sparse * sparse and sparse @ sparse; every result is compared with
NumPy. That touches every dispatched kernel module. Small sizes: ci/wheel.sh runs it
under `qemu-x86_64 -cpu Nehalem` (no AVX), tests/kernels/test_dispatch.py under each
SPARSETENSOR_CPU_LEVEL the CPU supports.

Exit status 0 when everything agrees, 1 (listing what did not) otherwise.
"""

import sys

import numpy as np

import sparsetensor as st

LAYOUTS = {"coo": {}, "csr": {}, "csc": {}, "bsr": {"blocksize": (4, 2)}, "bsc": {"blocksize": (4, 2)}}


def _sample(rng, shape, dtype):
    a = rng.integers(-4, 5, size=shape).astype(dtype)
    a[rng.random(shape) < 0.7] = 0
    a[:, 5] = 0  # an empty column and
    a[3] = 0  # an empty row
    return a


def run() -> list[str]:
    rng = np.random.default_rng(12)
    bad = []

    def check(what, got, want):
        got = np.asarray(got)
        ok = got.shape == want.shape and (np.allclose(got, want, rtol=1e-5, atol=1e-5)
                                          if want.dtype.kind == "f" else np.array_equal(got, want))
        if not ok:
            bad.append(what)

    for dtype in (np.float32, np.float64, np.int64):
        a = _sample(rng, (24, 34), dtype)
        b = _sample(rng, (34, 16), dtype)
        x = rng.integers(-3, 4, size=(34, 37)).astype(dtype)
        v = rng.integers(-3, 4, size=34).astype(dtype)
        for index_dtype in (np.int32, np.int64):
            for layout, kw in LAYOUTS.items():
                what = f"{layout} {np.dtype(dtype)} {np.dtype(index_dtype)}"
                t = st.from_dense(a, layout, index_dtype=index_dtype, **kw)
                t.check_invariants()
                check(f"{what}: to_dense", t.to_dense(), a)
                for other, okw in LAYOUTS.items():
                    check(f"{what} -> {other}", t.to_sparse(other, **okw).to_dense(), a)
                check(f"{what}: @ dense", t @ x, a @ x)
                check(f"{what}: @ vector", t @ v, a @ v)
                check(f"{what}: + itself", (t + t).to_dense(), a + a)
                check(f"{what}: * itself", (t * t).to_dense(), a * a)
            for layout in ("coo", "csr", "csc"):
                s = st.from_dense(a, layout, index_dtype=index_dtype)
                r = st.from_dense(b, layout, index_dtype=index_dtype)
                check(f"{layout} {np.dtype(dtype)} {np.dtype(index_dtype)}: spgemm",
                      st.spgemm(s, r).to_dense(), a @ b)
            # COO with duplicates, out of order: coalesce sums them
            n = 200
            idx = np.stack([rng.integers(0, 24, n), rng.integers(0, 34, n)]).astype(index_dtype)
            vals = rng.integers(-3, 4, n).astype(dtype)
            want = np.zeros((24, 34), dtype)
            np.add.at(want, tuple(idx), vals)
            c = st.sparse_coo_tensor(idx, vals, size=(24, 34)).coalesce()
            check(f"coo {np.dtype(dtype)} {np.dtype(index_dtype)}: coalesce", c.to_dense(), want)
            check(f"coo {np.dtype(dtype)} {np.dtype(index_dtype)}: coalesce -> csr",
                  c.to_sparse("csr").to_dense(), want)
    # a broken CSR is refused, not read out of bounds
    try:
        st.sparse_csr_tensor([0, 2, 1], [0, 1], [1.0, 2.0], size=(2, 2))
        bad.append("invalid csr accepted")
    except st.InvariantError:
        pass
    return bad


def main() -> int:
    cfg = st.show_config(mode="dicts")["cpu_dispatch"]
    print(f"sparsetensor {st.__version__}: CPU level {cfg['level_in_use']!r} ({cfg['why']})")
    bad = run()
    if bad:
        print(f"{len(bad)} results differ from NumPy:", *bad, sep="\n  ")
        return 1
    print("every layout built, converted and multiplied; all results agree with NumPy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
