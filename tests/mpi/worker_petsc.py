"""Run under mpiexec by tests/mpi/test_petsc.py: ``python -m mpi4py tests/mpi/worker_petsc.py SUITE TMPDIR``.

(``-m mpi4py`` aborts every rank when one raises, so a failed check cannot hang the others.)

The PETSc bridge against our own results: every rank builds the same global matrices from fixed
seeds, so each can compute the one-process oracle (our ``to_global``, SciPy's ``spsolve``) and
check its part. Values are small integers where a comparison is exact, so that PETSc's sums in
any order equal ours: the checks are ``array_equal``. Rank 0 prints ``PASS name`` per case; the
errors suite writes one line per case that raised to ``TMPDIR/raised.RANK.txt``.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from mpi4py import MPI
from petsc4py import PETSc

import sparsetensor as st
from sparsetensor import mpi as stmpi

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
REAL = np.dtype(PETSc.ScalarType)


def passed(name):
    comm.Barrier()
    if rank == 0:
        print("PASS", name, flush=True)


def raised(tmp, case, e):
    line = "\t".join([case, type(e).__name__, str(e).replace("\n", " ")])
    with open(os.path.join(tmp, f"raised.{rank}.txt"), "a") as f:
        f.write(line + "\n")


# -- matrices (the same on every rank) --------------------------------------------------------
def int_matrix(m, n, density, seed, dtype=np.float64, index_dtype=np.int32, empty_rows=(), empty_cols=()):
    """A canonical CSR tensor with small integer values (every product exact)."""
    rng = np.random.default_rng(seed)
    d = (rng.random((m, n)) < density) * rng.integers(-4, 5, size=(m, n))
    d[list(empty_rows)] = 0
    d[:, list(empty_cols)] = 0
    if np.dtype(dtype).kind == "c":
        d = d + 1j * (d != 0) * rng.integers(-3, 4, size=(m, n))
    return st.from_dense(d.astype(dtype)).to(index_dtype=index_dtype)


def starts_of(n, parts, empty=1):
    """``parts + 1`` even boundaries of ``n``, part ``empty`` (when there is one) owning none."""
    s = (np.arange(parts + 1) * n) // parts
    if parts > empty:
        s[empty] = s[empty - 1] if empty else 0
        s = np.maximum.accumulate(s)
    return s


def poisson(k, index_dtype=np.int64):
    return st.stencil((k, k), 5, index_dtype=index_dtype)


def distribute(t, **kw):
    return stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm, **kw)


def petsc_global(P) -> sp.csr_matrix:
    """The whole PETSc matrix on every rank, from every rank's rows (``getValuesCSR``, global columns)."""
    ai, aj, av = P.getValuesCSR()
    parts = comm.allgather((ai, aj, av))
    counts = np.concatenate([np.diff(p[0]) for p in parts]).astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return sp.csr_matrix((np.concatenate([p[2] for p in parts]), np.concatenate([p[1] for p in parts]), indptr),
                         shape=P.getSize())


def same_csr(got: sp.csr_matrix, want, what):
    """Exactly the same pattern and values (``want``: one of our CSR tensors or a SciPy matrix)."""
    w = want.to_scipy() if hasattr(want, "to_scipy") else want
    w = sp.csr_matrix(w)
    assert got.shape == w.shape, (what, got.shape, w.shape)
    assert np.array_equal(got.indptr, w.indptr), what
    assert np.array_equal(got.indices, w.indices), what
    assert np.array_equal(got.data, w.data.astype(got.data.dtype)), what


# -- round trips ------------------------------------------------------------------------------
def check_round_trip(name, t, shares_values, **kw):
    """to_petsc: type, ranges, MatMult, the gathered matrix; from_petsc back; sharing of the values."""
    A = distribute(t, **kw)
    r0, r1 = A.row_range
    c0, c1 = A.col_range
    P = A.to_petsc()
    assert P.getType() == ("mpiaij" if size > 1 else "seqaij"), (name, P.getType())
    assert P.getSize() == A.shape and P.getLocalSize() == (r1 - r0, c1 - c0), name
    assert np.array_equal(P.getOwnershipRanges(), A.row_starts), (name, P.getOwnershipRanges(), A.row_starts)
    assert np.array_equal(P.getOwnershipRangesColumn(), A.col_starts), name
    assert P.assembled, name
    offd_cols = A.offdiag_block.col_indices().copy()
    # the gathered PETSc matrix is our matrix, exactly
    g = A.to_global()
    same_csr(petsc_global(P), comm.bcast(g.to_scipy() if rank == 0 else None), name)
    assert np.array_equal(A.offdiag_block.col_indices(), offd_cols), f"{name}: PETSc changed our off-diagonal block"
    # MatMult equals A @ x (integer-valued: exact)
    x = (np.arange(c0, c1) % 7 - 3).astype(REAL)
    y = np.full(r1 - r0, np.nan, dtype=REAL)
    P.mult(stmpi.to_petsc_vec(A, x, "cols"), stmpi.to_petsc_vec(A, y))
    ours = A @ x.astype(A.dtype)
    assert np.array_equal(y, ours.astype(REAL)), (name, y, ours)
    # from_petsc gives our matrix back: partitions, ghosts, entries
    B = stmpi.DistCSR.from_petsc(P)
    assert B.shape == A.shape and B.nnz == A.nnz, name
    assert np.array_equal(B.row_starts, A.row_starts) and np.array_equal(B.col_starts, A.col_starts), name
    assert np.array_equal(B.ghosts, A.ghosts), name
    assert B.dtype == REAL and B.index_dtype == np.dtype(PETSc.IntType), (name, B.dtype, B.index_dtype)
    gb = B.to_global()
    if rank == 0:
        same_csr(gb.to_scipy(), g.to_scipy(), name)
    assert np.array_equal(B @ x, y), name
    # sharing: scaling our values in place is seen by PETSc's product when the values are shared
    for block in (A.diag_block, A.offdiag_block):
        v = block.values()
        v[...] = v * 2
    P.assemble()  # tell PETSc the values changed
    P.mult(stmpi.to_petsc_vec(A, x, "cols"), stmpi.to_petsc_vec(A, y))
    want = 2 * ours.astype(REAL) if shares_values else ours.astype(REAL)
    assert np.array_equal(y, want), (name, "values shared" if shares_values else "values copied", y, ours)
    P.destroy()
    B.free()
    assert np.array_equal(A @ x.astype(A.dtype), 2 * ours), name  # ours still works after PETSc let go
    passed(f"roundtrip-{name}")


def suite_roundtrip(tmp):
    for idt in (np.int32, np.int64):
        n = np.dtype(idt).name
        check_round_trip(f"poisson-{n}", poisson(9, idt).to(dtype=np.float64), shares_values=True)
        check_round_trip(f"empty-rank-{n}", int_matrix(29, 29, 0.2, 3, index_dtype=idt), shares_values=True,
                         row_starts=starts_of(29, size))
    # integer values (converted: a copy), rectangular, a rank without rows and another without columns
    check_round_trip("int64-values-rect", int_matrix(23, 17, 0.3, 4, dtype=np.int64, empty_rows=(5,)),
                     shares_values=False, row_starts=starts_of(23, size, 1), col_starts=starts_of(17, size, 0))
    check_round_trip("float32-values", int_matrix(19, 19, 0.25, 5, dtype=np.float32), shares_values=False)
    check_round_trip("no-entries", st.sparse_csr_tensor(np.zeros(8, np.int32), np.zeros(0, np.int32),
                                                        np.zeros(0), size=(7, 7)), shares_values=True)
    passed("roundtrip")

    # the Mat keeps our arrays alive after the DistCSR is gone
    def make():
        A = distribute(poisson(8))
        r0, r1 = A.row_range
        return A.to_petsc(), (A @ np.ones(r1 - r0)).copy()

    P, want = make()
    gc.collect()
    x = P.createVecRight()
    x.set(1.0)
    y = P.createVecLeft()
    P.mult(x, y)
    assert np.array_equal(y.getArray(), want)
    P.destroy()
    passed("mat-outlives-distcsr")

    # PETSc writes our values (MatZeroRows), never our index arrays (MAT_KEEP_NONZERO_PATTERN)
    A, ref = distribute(poisson(9, np.int32)), distribute(poisson(9, np.int32))
    r0, r1 = A.row_range
    blocks = (A.diag_block, A.offdiag_block)
    before = [a.copy() for b in blocks for a in (b.crow_indices(), b.col_indices())]
    P = A.to_petsc()
    rows = np.arange(r0, r1, 3, dtype=PETSc.IntType)  # every third row of each rank
    P.zeroRows(rows, diag=5.0)
    after = [a for b in blocks for a in (b.crow_indices(), b.col_indices())]
    assert all(np.array_equal(a, b) for a, b in zip(before, after)), "PETSc changed our index arrays"
    x = np.arange(r0, r1) % 5 + 1.0
    want = ref @ x
    want[rows - r0] = 5.0 * x[rows - r0]
    assert np.array_equal(A @ x, want)  # our product sees PETSc's zeroed rows
    y = np.zeros(r1 - r0)
    P.mult(stmpi.to_petsc_vec(A, x), stmpi.to_petsc_vec(A, y))
    assert np.array_equal(y, want)
    assert A.nnz == ref.nnz and P.getInfo(PETSc.Mat.InfoType.LOCAL)["nz_used"] == A.nnz_local
    P.destroy()
    passed("petsc-writes-values-not-indices")

    # a PETSc matrix assembled by PETSc (MatSetValues), read by from_petsc
    t = poisson(7)
    P = PETSc.Mat().createAIJ(t.shape, nnz=5, comm=comm)
    lo, hi = P.getOwnershipRange()
    ref = t.to_scipy().tocsr()
    for i in range(lo, hi):
        cols = ref.indices[ref.indptr[i]:ref.indptr[i + 1]]
        P.setValues(i, cols.astype(PETSc.IntType), ref.data[ref.indptr[i]:ref.indptr[i + 1]])
    P.assemble()
    B = stmpi.DistCSR.from_petsc(P)
    assert np.array_equal(B.row_starts, P.getOwnershipRanges())
    g = B.to_global()
    if rank == 0:
        same_csr(g.to_scipy(), ref, "petsc-assembled")
    P.destroy()
    passed("from-petsc-assembled-by-petsc")


# -- vectors ----------------------------------------------------------------------------------
def suite_vectors(tmp):
    A = distribute(int_matrix(21, 13, 0.3, 6), row_starts=starts_of(21, size))
    r0, r1 = A.row_range
    c0, c1 = A.col_range
    y = np.zeros(r1 - r0)
    v = stmpi.to_petsc_vec(A, y)
    assert v.getSize() == 21 and v.getLocalSize() == r1 - r0
    assert np.shares_memory(v.getArray(), y) or r1 == r0
    v.set(3.0)
    assert np.all(y == 3.0)
    x = np.arange(c0, c1, dtype=np.float64)
    w = stmpi.to_petsc_vec(A, x, part="cols")
    assert w.getSize() == 13 and w.getLocalSize() == c1 - c0
    assert w.sum() == sum(range(13))
    # copy=True converts (and the Vec owns the copy)
    xi = np.arange(c0, c1)
    w2 = stmpi.to_petsc_vec(A, xi, part="cols", copy=True)
    w2.set(0.0)
    assert np.array_equal(xi, np.arange(c0, c1))
    for vec in (v, w, w2):
        vec.destroy()
    passed("vectors-shared")


# -- solve ------------------------------------------------------------------------------------
def suite_solve(tmp):
    k = 24
    t = poisson(k)
    ref = t.to_scipy().tocsc()
    rng = np.random.default_rng(7)
    b_all = rng.standard_normal(k * k)
    x_ref = sla.spsolve(ref, b_all)
    A = distribute(t)
    r0, r1 = A.row_range
    b = b_all[r0:r1].copy()
    b_keep = b.copy()

    def check(name, x, info, stats, tol=1e-7):
        assert info == 0, (name, info, stats)
        err = np.abs(x - x_ref[r0:r1]).max(initial=0.0) / np.abs(x_ref).max()
        assert err < tol, (name, err, stats)
        assert np.array_equal(b, b_keep), f"{name}: b was written"
        if rank == 0:
            print("COUNT", name, stats["iterations"], stats["reason"], flush=True)

    s = {}
    x, info = stmpi.solve(A, b, "gmres", "gamg", rtol=1e-10, stats=s)
    assert (s["ksp"], s["pc"]) == ("gmres", "gamg"), s
    check("gmres-gamg", x, info, s)
    passed("solve-gmres-gamg")

    s = {}
    x, info = stmpi.solve(A, b, "cg", "bjacobi", rtol=1e-10, stats=s)
    assert (s["ksp"], s["pc"]) == ("cg", "bjacobi"), s
    check("cg-bjacobi", x, info, s)
    passed("solve-cg-bjacobi")

    # options pass through, under a prefix of the call's own, and are gone afterwards
    s = {}
    x, info = stmpi.solve(A, b.reshape(-1, 1), "cg", "bjacobi", rtol=1e-10, stats=s, sub_pc_type="icc",
                          ksp_type="bcgs", ksp_pc_side="right", ksp_norm_type="unpreconditioned")
    assert s["ksp"] == "bcgs", s  # the option overrides the argument
    check("bcgs-bjacobi-icc-options", x, info, s)
    left = [key for key in PETSc.Options().getAll() if key.startswith("sparsetensor_")]
    assert not left, left
    s2 = {}
    stmpi.solve(A, b, "cg", "jacobi", rtol=1e-10, stats=s2)
    assert s2["ksp"] == "cg" and s2["prefix"] != s["prefix"], (s, s2)
    # a named prefix: an option set before (the command line's) is restored after the call
    opts = PETSc.Options()
    opts["mine_ksp_type"] = "cg"
    s3 = {}
    stmpi.solve(A, b, None, "jacobi", prefix="mine_", stats=s3)
    assert s3["ksp"] == "cg", s3
    stmpi.solve(A, b, None, "jacobi", prefix="mine_", stats=s3, ksp_type="gmres")
    assert s3["ksp"] == "gmres", s3
    assert opts["mine_ksp_type"] == "cg"
    del opts["mine_ksp_type"]
    passed("solve-options")

    # maxiter reached: info is the iteration count; x0 the solution: no iteration
    s = {}
    x, info = stmpi.solve(A, b, "cg", "none", rtol=1e-14, maxiter=3, stats=s)
    assert info == 3 and s["reason"] == "DIVERGED_MAX_IT", (info, s)
    x, info = stmpi.solve(A, b, "cg", "none", rtol=1e-8, x0=x_ref[r0:r1], stats=s)
    assert info == 0 and s["iterations"] == 0, (info, s)
    # a PETSc Mat as A, reused over two solves
    P = A.to_petsc()
    for pc in ("gamg", "bjacobi"):
        s = {}
        x, info = stmpi.solve(P, b, "gmres", pc, rtol=1e-10, stats=s)
        check(f"mat-gmres-{pc}", x, info, s)
    P.destroy()
    # integer right-hand side: converted
    x, info = stmpi.solve(A, np.ones(r1 - r0, dtype=np.int64), "cg", "gamg", rtol=1e-10)
    assert info == 0 and x.dtype == REAL
    # a DistBSR with gamg (PETSc's GAMG needs AIJ: the BAIJ Mat is converted for the solve)
    Bd = stmpi.DistBSR.from_global(t if rank == 0 else None, comm=comm, blocksize=(2, 2))
    b0, b1 = Bd.row_range
    s = {}
    x, info = stmpi.solve(Bd, b_all[b0:b1].copy(), "gmres", "gamg", rtol=1e-10, stats=s)
    assert info == 0 and s["pc"] == "gamg", (info, s)
    assert np.abs(x - x_ref[b0:b1]).max(initial=0.0) / np.abs(x_ref).max() < 1e-7
    passed("solve-info-x0-mat")


# -- errors -----------------------------------------------------------------------------------
def expect(tmp, case, exc, fn, *words):
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), (case, w, str(e))
        raised(tmp, case, e)
    else:
        raise AssertionError(f"{case}: nothing raised on rank {rank}")


def suite_errors(tmp):
    last = size - 1
    Z = distribute(int_matrix(12, 12, 0.3, 8, dtype=np.complex128))
    expect(tmp, "complex-matrix", TypeError, Z.to_petsc, "complex128", str(REAL), "PETSc.ScalarType")
    A = distribute(poisson(5))
    r0, r1 = A.row_range
    expect(tmp, "vec-dtype-on-last-rank", TypeError,
           lambda: stmpi.to_petsc_vec(A, np.zeros(r1 - r0, np.float32 if rank == last else REAL)))
    expect(tmp, "vec-shape-on-last-rank", ValueError,
           lambda: stmpi.to_petsc_vec(A, np.zeros(r1 - r0 + (rank == last))), f"rank {last}")
    expect(tmp, "vec-not-contiguous", ValueError,
           lambda: stmpi.to_petsc_vec(A, np.zeros(2 * (r1 - r0))[::2] if rank == last else np.zeros(r1 - r0)))
    D = PETSc.Mat().createDense((6, 6), comm=comm)
    D.setUp()
    D.assemble()
    expect(tmp, "dense-mat", TypeError, lambda: stmpi.DistCSR.from_petsc(D), "dense", "mat.convert('aij')")
    D.destroy()
    Bm = PETSc.Mat().createBAIJ((8, 8), 2, nnz=1, comm=comm)
    Bm.assemble()
    expect(tmp, "baij-mat", TypeError, lambda: stmpi.DistCSR.from_petsc(Bm), "baij")
    Bm.destroy()
    expect(tmp, "not-a-mat", TypeError, lambda: stmpi.DistCSR.from_petsc(np.eye(3)), "PETSc.Mat")
    expect(tmp, "solve-b-on-last-rank", ValueError,
           lambda: stmpi.solve(A, np.ones(r1 - r0 + (rank == last))), f"rank {last}")
    expect(tmp, "solve-complex-b", TypeError, lambda: stmpi.solve(A, np.ones(r1 - r0, complex)), "complex128")
    expect(tmp, "solve-not-a-matrix", TypeError, lambda: stmpi.solve(np.eye(3), np.ones(3)), "DistCSR")
    if size > 1:  # a preconditioner PETSc does not know, on one rank only: PETSc would fail there alone
        expect(tmp, "solve-pc-on-last-rank", ValueError,
               lambda: stmpi.solve(A, np.ones(r1 - r0), pc="bogus_pc" if rank == last else "jacobi"), "same pc")
        # one rank passing something else than the others' Mat, or a Mat where the others pass the
        # DistCSR: each rank took the communicator of its own argument, and the others waited
        P = A.to_petsc()
        expect(tmp, "from-petsc-none-on-last-rank", TypeError,
               lambda: stmpi.DistCSR.from_petsc(None if rank == last else P), "PETSc.Mat")
        expect(tmp, "solve-mat-on-last-rank", ValueError,
               lambda: stmpi.solve(P if rank == last else A, np.ones(r1 - r0)), "same A")
        P.destroy()
        # a square matrix's parts are the same: the Vec's global sizes disagreed only where it is not
        W = distribute(st.from_dense(np.ones((6, 9))))
        part = "cols" if rank == last else "rows"
        n_mine = int(np.diff(W.col_starts if rank == last else W.row_starts)[rank])
        expect(tmp, "vec-part-on-last-rank", ValueError,
               lambda: stmpi.to_petsc_vec(W, np.zeros(n_mine, REAL), part=part), "same part")
    # a preconditioner that fails on the rank owning row 3 only (a missing diagonal entry: bjacobi's
    # block factorization, sor's divisions; a row of zeros: gamg's setup): every rank raises
    R = poisson(6).to_scipy().tolil()
    R[3, 3] = 0
    Ad = distribute(st.from_dense(R.toarray()))
    R[3, :] = 0
    Az = distribute(st.from_dense(R.toarray()))
    rd0, rd1 = Ad.row_range
    expect(tmp, "solve-bjacobi-missing-diagonal", Exception, lambda: stmpi.solve(Ad, np.ones(rd1 - rd0), "gmres",
                                                                                 "bjacobi"), "diagonal")
    expect(tmp, "solve-sor-missing-diagonal", ValueError, lambda: stmpi.solve(Ad, np.ones(rd1 - rd0), "gmres", "sor"),
           "row 3", "diagonal")
    expect(tmp, "solve-gamg-zero-row", ValueError, lambda: stmpi.solve(Az, np.ones(rd1 - rd0), "gmres", "gamg"),
           "row 3", "no nonzero")
    big = 2 ** 53 + 1
    Ab = distribute(st.from_dense(np.eye(4, dtype=np.int64) * big))
    rb0, rb1 = Ab.row_range
    expect(tmp, "int64-beyond-2**53", TypeError, Ab.to_petsc, str(big), "2**53")
    expect(tmp, "vec-int64-beyond-2**53", TypeError,
           lambda: stmpi.to_petsc_vec(Ab, np.full(rb1 - rb0, big, np.int64), copy=True), str(big))
    # one rank's part on its own arrays, written out of range after from_local's check: the matrix
    # keeps them (on several ranks the split copies them), and PETSc would read them as they are
    cols = np.array([0, 1])
    for kind, make in (("aij", st.sparse_csr_tensor), ("baij", st.sparse_bsr_tensor)) if size == 1 else ():
        cols[:] = [0, 1]
        values = np.ones(2) if kind == "aij" else np.ones((2, 2, 2))
        part = make(np.array([0, 1, 2]), cols, values, size=(2, 3) if kind == "aij" else (4, 6))  # not square: a part, not the whole
        M = (stmpi.DistCSR if kind == "aij" else stmpi.DistBSR).from_local(part, comm=comm)
        if rank == last:
            cols[0] = 10 ** 6
        expect(tmp, f"{kind}-changed-after-check", ValueError, M.to_petsc, "must be <")
    # without petsc4py: an ImportError naming the extra, on every rank
    saved = {k: sys.modules[k] for k in list(sys.modules) if k == "petsc4py" or k.startswith("petsc4py.")}
    for k in saved:
        sys.modules[k] = None
    try:
        expect(tmp, "no-petsc4py", ImportError, A.to_petsc, 'pip install "sparsetensor[petsc]"')
    finally:
        sys.modules.update(saved)
    # the bridge still works after all that
    P = A.to_petsc()
    assert np.array_equal(P.getDiagonal().getArray(), A.diagonal())
    P.destroy()
    passed("errors-raise-on-every-rank")


def suite_doctest(tmp):
    import doctest

    import sparsetensor.mpi._petsc as mod

    r = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert r.failed == 0 and r.attempted > 0, r
    passed("petsc-doctests")


def suite_all(tmp):
    for suite in (suite_roundtrip, suite_vectors, suite_solve, suite_errors):
        suite(tmp)
    if size == 2:
        suite_doctest(tmp)
    if rank == 0:
        print("DONE", flush=True)


SUITES = {"roundtrip": suite_roundtrip, "vectors": suite_vectors, "solve": suite_solve, "errors": suite_errors,
          "doctest": suite_doctest, "all": suite_all}

if __name__ == "__main__":
    SUITES[sys.argv[1]](sys.argv[2])
