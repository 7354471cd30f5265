"""Run under mpiexec by tests/mpi/test_mpi.py: ``python -m mpi4py tests/mpi/mpi_worker.py SUITE TMPDIR``.

(``-m mpi4py`` aborts every rank when one raises, so a failed check cannot hang the others.)

Every rank builds the same global matrices from fixed seeds, computes the
single-process sparsetensor results itself (the oracle), and checks its own
part of the distributed results against them. Rank 0 prints ``PASS name`` per
case; any failed check raises (a nonzero exit). The ``errors`` suites print
one line per case that raised to ``TMPDIR/raised.RANK.txt``.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from mpi4py import MPI

import sparsetensor as st
from sparsetensor import mpi as stmpi


comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size


def passed(name):
    comm.Barrier()
    if rank == 0:
        print("PASS", name, flush=True)


def raised(tmp, case, e):
    """Record on this rank that ``case`` raised ``e`` (a file per rank: output lines of ranks interleave)."""
    line = "\t".join([case, type(e).__name__, str(getattr(e, "invariant", "")), str(e).replace("\n", " ")])
    with open(os.path.join(tmp, f"raised.{rank}.txt"), "a") as f:
        f.write(line + "\n")


# -- matrices --------------------------------------------------------------------------------
def random_matrix(m, n, density, seed, dtype=np.float64, index_dtype=np.int64, hub=None, empty_rows=()):
    """A canonical CSR tensor; ``hub``: a row with every column; ``empty_rows`` stay empty."""
    rng = np.random.default_rng(seed)
    d = (rng.random((m, n)) < density) * rng.integers(1, 9, size=(m, n)) * rng.choice([-1, 1], size=(m, n)) / 4
    if np.dtype(dtype).kind == "c":
        d = d + 1j * (d != 0) * rng.integers(-3, 4, size=(m, n))
    if hub is not None and m and n:
        d[hub] = rng.integers(1, 9, size=n)
    for r in empty_rows:
        d[r] = 0
    return st.from_dense(d.astype(dtype)).to(index_dtype=index_dtype)


def starts_with_empty_rank(n):
    """Row starts in which rank 1 (when there are 2 or more ranks) owns no rows."""
    s = (np.arange(size + 1) * n) // size
    if size >= 2:
        s[1] = 0
    return s


def no_ghost_matrix(n, seed, index_dtype):
    """Rank 0's rows only touch rank 0's columns (with even row starts)."""
    s = (np.arange(size + 1) * n) // size
    d = random_matrix(n, n, 0.2, seed, index_dtype=index_dtype).to_dense()
    d[s[0]:s[1], :s[0]] = 0
    d[s[0]:s[1], s[1]:] = 0
    return st.from_dense(d).to(index_dtype=index_dtype), s


def spd_matrix(n, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    b = (rng.random((n, n)) < 0.15) * rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        b = b + 1j * (b != 0) * rng.standard_normal((n, n))
    a = b @ b.conj().T + n * 0.5 * np.eye(n)
    a[np.abs(a) < 1e-300] = 0
    return st.from_dense(a.astype(dtype))


# -- checks ----------------------------------------------------------------------------------
def tol(dtype):
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12


def close(got, want, bound, dtype, what):
    """``|got - want| <= tol * (|A| |x|)``: relative to the sum of magnitudes that each entry adds up."""
    err = np.abs(np.asarray(got) - want)
    lim = tol(dtype) * np.maximum(bound, np.finfo(np.float64).tiny)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.all(err <= lim), f"{what}: rank {rank}: max error {err.max()} over bound {(err / lim).max()}"


def serial_ghosts(t, rs, cs):
    """Ghost counts per rank computed from the global matrix."""
    d = t.to_dense()
    out = []
    for q in range(size):
        cols = np.flatnonzero(np.any(d[rs[q]:rs[q + 1]] != 0, axis=0))
        out.append(int(np.sum((cols < cs[q]) | (cols >= cs[q + 1]))))
    return out


def check_matrix(name, t, **kw):
    """Build from the global tensor and check every product and transfer against the serial results."""
    A = stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm, **kw)
    M, K = t.shape
    rs, cs = A.row_starts, A.col_starts
    r0, r1 = A.row_range
    c0, c1 = A.col_range
    assert A.shape == (M, K) and A.nnz == t.nnz and A.dtype == t.dtype and A.index_dtype == t.index_dtype
    assert (r0, r1) == (rs[rank], rs[rank + 1]) and (c0, c1) == (cs[rank], cs[rank + 1])
    assert comm.allreduce(A.nnz_local) == t.nnz
    if kw.get("row_starts") is not None:
        assert np.array_equal(rs, kw["row_starts"])
    absA = abs(t.to_dense())
    first = {}  # the p2p results: the neighbourhood collective must give the same bits
    for mode in stmpi.EXCHANGES:
        A.set_exchange(mode)
        assert A.exchange == mode and A.comm_stats()["exchange"] == mode
        rng = np.random.default_rng(7)
        for ncols in (None, 3):
            shape_x = (K,) if ncols is None else (K, ncols)
            x = rng.standard_normal(shape_x).astype(t.dtype)
            if t.dtype.kind == "c":
                x = x + 1j * rng.standard_normal(shape_x)
            x = x.astype(t.dtype)
            y = A @ x[c0:c1]
            want = st.matmul(t, x)
            close(y, want[r0:r1], (absA @ abs(x))[r0:r1], t.dtype, f"{name} matvec N={ncols}")
            assert np.array_equal(first.setdefault(("y", ncols), y), y), (name, mode, "matvec differs by exchange")
            stats = A.comm_stats()
            item = np.dtype(t.dtype).itemsize * (1 if ncols is None else ncols)
            assert stats["ghosts_per_rank"] == serial_ghosts(t, rs, cs), (stats["ghosts_per_rank"], name)
            assert stats["bytes_received_per_product"] == [item * g for g in stats["ghosts_per_rank"]], stats
            assert sum(stats["bytes_sent_per_product"]) == sum(stats["bytes_received_per_product"])
            assert sum(stats["messages_per_product"]) == sum(len(nb) for nb in stats["neighbours_per_rank"])
            g = A.gather(y)
            if rank == 0:
                assert np.array_equal(g, np.concatenate(comm.gather(y, root=0)))
            else:
                comm.gather(y, root=0)
            assert np.array_equal(A.scatter(x if rank == 0 else None, part="cols"), x[c0:c1])
            assert np.array_equal(A.scatter(want if rank == 0 else None), A.scatter(want if rank == 0 else None))
            # A^T x and A^H x
            u = rng.standard_normal((M,) if ncols is None else (M, ncols)).astype(t.dtype)
            z = A.rmatvec(u[r0:r1])
            close(z, st.matmul(t.mT, u)[c0:c1], (absA.T @ abs(u))[c0:c1], t.dtype, f"{name} rmatvec N={ncols}")
            assert np.array_equal(first.setdefault(("z", ncols), z), z), (name, mode, "rmatvec differs by exchange")
            assert A.comm_stats()["bytes_sent_per_product"] == [item * gh for gh in stats["ghosts_per_rank"]]
            if t.dtype.kind == "c":
                zh = A.rmatvec(u[r0:r1], adjoint=True)
                close(zh, st.matmul(t.mT.conj(), u)[c0:c1], (absA.T @ abs(u))[c0:c1], t.dtype, f"{name} adjoint")
            assert np.array_equal(A.gather(z, part="cols"), np.concatenate(comm.allgather(z))) or rank != 0
    back = A.to_global()
    t = t.to_sparse_csr()
    if rank == 0:
        assert back.layout is st.sparse_csr and back.index_dtype == t.index_dtype and back.dtype == t.dtype
        assert back.shape == t.shape
        for a, b in ((back.crow_indices(), t.crow_indices()), (back.col_indices(), t.col_indices()),
                     (back.values(), t.values())):
            assert np.array_equal(a, b), name
    if M == K and A.row_starts.tolist() == A.col_starts.tolist():
        assert np.array_equal(A.diagonal(), np.diagonal(t.to_dense())[r0:r1])
    A.free()
    try:  # a freed matrix says so on every rank (was MPI's "Invalid communicator")
        A.to_global()
    except ValueError as e:
        assert "was freed" in str(e), e
    else:
        raise AssertionError(f"{name}: a freed matrix was gathered")
    passed(name)


DistCSR_progress = (stmpi.DistCSR.progress_threshold, stmpi.DistCSR.progress_chunks)


def suite_products(tmp):
    for idt in (np.int32, np.int64):
        for dt in (np.float32, np.float64, np.complex128):
            tag = f"{np.dtype(idt).name}-{np.dtype(dt).name}"
            t = random_matrix(37, 37, 0.12, 1, dt, idt, hub=5, empty_rows=(0, 9, 36))
            check_matrix(f"square-hub-empty-rows-{tag}", t)
            if dt == np.float64:
                check_matrix(f"empty-rank-{tag}", t, row_starts=starts_with_empty_rank(37))
        t, s = no_ghost_matrix(24, 2, idt)
        check_matrix(f"no-ghosts-rank0-{np.dtype(idt).name}", t, row_starts=s)
    band = np.diag(np.arange(1.0, 41)) + np.diag(np.full(39, -1.0), 1) + 2j * np.diag(np.full(38, 1.0), -2)
    check_matrix("banded-few-ghost-rows", st.from_dense(band))  # the off-diagonal product over its rows only
    check_matrix("tiny-3x3", random_matrix(3, 3, 0.6, 3))
    check_matrix("rect-37x23", random_matrix(37, 23, 0.15, 4, hub=2))
    check_matrix("rect-23x37", random_matrix(23, 37, 0.15, 5), col_starts=starts_with_empty_rank(37))
    check_matrix("no-entries", random_matrix(10, 10, 0.0, 6))
    check_matrix("coo-input", random_matrix(30, 30, 0.1, 8).to_sparse_coo())
    check_matrix("csc-input", random_matrix(30, 30, 0.1, 9).to_sparse_csc())
    # unsorted (non-canonical) rows are repaired on each rank, as st.load repairs a file
    good = random_matrix(30, 30, 0.3, 10)
    crow, cols, vals = good.crow_indices(), good.col_indices().copy(), good.values().copy()
    for i in range(30):
        cols[crow[i]:crow[i + 1]] = cols[crow[i]:crow[i + 1]][::-1]
        vals[crow[i]:crow[i + 1]] = vals[crow[i]:crow[i + 1]][::-1]
    unsorted = st.sparse_csr_tensor(crow, cols, vals, size=(30, 30), check_invariants=False)
    A = stmpi.DistCSR.from_global(unsorted if rank == 0 else None, comm=comm)
    x = np.arange(30.0)
    r0, r1 = A.row_range
    close(A @ x[r0:r1], st.matmul(good, x)[r0:r1], (abs(good.to_dense()) @ x)[r0:r1], np.float64, "unsorted")
    passed("unsorted-rows-repaired")
    # ranks x threads: a matrix large enough for the kernels' threads (work above their grain)
    n = 3000
    rng = np.random.default_rng(16)
    rows = np.repeat(np.arange(n), 40)
    big = st.sparse_coo_tensor(np.stack([rows, rng.integers(0, n, rows.size)]), rng.standard_normal(rows.size),
                               (n, n)).coalesce().to_sparse_csr()
    A = stmpi.DistCSR.from_global(big if rank == 0 else None, comm=comm)
    r0, r1 = A.row_range
    X = rng.standard_normal((n, 4))
    bound = st.matmul(big.abs(), np.abs(X))[r0:r1]
    x1 = X[:, 0].copy()
    for mode in stmpi.EXCHANGES:
        A.set_exchange(mode)
        A.progress_threshold, A.progress_chunks = DistCSR_progress
        close(A.matvec(X[r0:r1], threads=2), st.matmul(big, X, threads=1)[r0:r1], bound, np.float64, "threads")
        close(A.rmatvec(X[r0:r1], threads=2), st.matmul(big.mT, X, threads=1)[r0:r1],
              st.matmul(big.mT.abs(), np.abs(X))[r0:r1], np.float64, "threads rmatvec")
        # the diagonal product in chunks with MPI progress between them (large exchanges)
        A.progress_threshold, A.progress_chunks = 0, 5
        close(A.matvec(X[r0:r1]), st.matmul(big, X)[r0:r1], bound, np.float64, f"progress chunks {mode}")
        close(A @ x1[r0:r1], st.matmul(big, x1)[r0:r1], st.matmul(big.abs(), np.abs(x1))[r0:r1], np.float64,
              f"chunks 1-d {mode}")
        assert A.comm_stats()["bytes_received_per_product"][rank] == 8 * A.ghosts.shape[0]
    passed("threads-2")
    passed("progress-chunks")
    # another root: the last rank holds the matrix and receives the gathers
    t = random_matrix(26, 26, 0.2, 17, np.complex128, np.int32, hub=25)
    last = size - 1
    A = stmpi.DistCSR.from_global(t if rank == last else None, comm=comm, root=last)
    r0, r1 = A.row_range
    x = np.linspace(0, 1, 26)
    g = A.gather(A @ x[r0:r1], root=last)
    back = A.to_global(root=last)
    if rank == last:
        close(g, st.matmul(t, x), abs(t.to_dense()) @ x, np.complex128, "root gather")
        assert np.array_equal(back.to_dense(), t.to_dense())
    else:
        assert g is None and back is None
    passed("root-last-rank")
    # from_local: each rank passes its own rows
    t = random_matrix(29, 29, 0.15, 11, hub=20)
    s = starts_with_empty_rank(29)
    mine = st.from_dense(t.to_dense()[s[rank]:s[rank + 1]])
    A = stmpi.DistCSR.from_local(mine, comm=comm)
    assert np.array_equal(A.row_starts, s)
    back = A.to_global()
    if rank == 0:
        assert np.array_equal(back.to_dense(), t.to_dense())
    passed("from-local")


def suite_solve_io(tmp):
    # cg against scipy's cg: the same iterates (few iterations) and the same solution
    for dt in (np.float64, np.complex128):
        t = spd_matrix(40, 12, dt)
        m = t.to_scipy()
        rng = np.random.default_rng(3)
        b = rng.standard_normal(40).astype(dt)
        A = stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm)
        r0, r1 = A.row_range
        for maxiter in (3, None):
            xs = []
            for mode in stmpi.EXCHANGES:
                A.set_exchange(mode)
                ours, theirs = [], []
                x, info = stmpi.cg(A, b[r0:r1], rtol=1e-10, maxiter=maxiter, callback=lambda v: ours.append(v.copy()))
                xr, ir = sla.cg(m, b, rtol=1e-10, maxiter=maxiter, callback=lambda v: theirs.append(v.copy()))
                assert info == ir and len(ours) == len(theirs), (info, ir, len(ours), len(theirs))
                for k, (a, c) in enumerate(zip(ours, theirs)):
                    scale = np.abs(c).max()
                    assert np.abs(a - c[r0:r1]).max() <= 1e-10 * scale, (k, np.abs(a - c[r0:r1]).max())
                assert np.abs(x - xr[r0:r1]).max() <= 1e-10 * np.abs(xr).max()
                xs.append(x)
            assert np.array_equal(xs[0], xs[1]), "cg differs by exchange mode"
            A.set_exchange("p2p")
        assert info == 0 and np.linalg.norm(m @ xr - b) <= 1e-9 * np.linalg.norm(b)
        # Jacobi preconditioner through M, and a starting guess
        d = A.diagonal()
        x, info = stmpi.cg(A, b[r0:r1], x0=np.ones(r1 - r0, dt), M=lambda r: r / d, rtol=1e-10)
        xr, ir = sla.cg(m, b, x0=np.ones(40, dt), M=sp.diags(1 / m.diagonal()), rtol=1e-10)
        assert info == ir == 0 and np.abs(x - xr[r0:r1]).max() <= 1e-8 * np.abs(xr).max()
        passed(f"cg-vs-scipy-{np.dtype(dt).name}")
    # a zero right-hand side, and an unconverged solve (info = maxiter)
    z, info = stmpi.cg(A, np.zeros(r1 - r0, np.complex128))
    assert info == 0 and not z.any()
    passed("cg-zero-rhs")
    # load: .npz (each rank maps its rows), .mtx and other layouts (root reads and scatters)
    t = random_matrix(41, 41, 0.1, 13, np.float64, np.int32, hub=40, empty_rows=(3,))
    t64 = random_matrix(41, 41, 0.1, 14, np.complex128, np.int64, hub=0)
    paths = {name: os.path.join(tmp, name) for name in ("m.npz", "m64.npz", "m.mtx", "coo.npz", "z.npz")}
    if rank == 0:
        st.save(paths["m.npz"], t)
        st.save(paths["m64.npz"], t64)
        st.write_mtx(paths["m.mtx"], t)
        st.save(paths["coo.npz"], t.to_sparse_coo())
        st.save(paths["z.npz"], t, compress=True)
    comm.Barrier()
    for name, ref, kw in (("m.npz", t, {}), ("m64.npz", t64, {}), ("m.mtx", t, {}), ("coo.npz", t, {}),
                          ("z.npz", t, {}), ("m.npz", t, {"row_starts": starts_with_empty_rank(41)})):
        A = stmpi.load(paths[name], comm=comm, exchange="neighbor" if name.startswith("m") else "p2p", **kw)
        back = A.to_global()
        if rank == 0:
            assert np.array_equal(back.to_dense(), ref.to_dense()), name
            if name.endswith(".npz") and name != "coo.npz":
                assert back.index_dtype == ref.index_dtype
        r0, r1 = A.row_range
        x = np.linspace(-1, 1, 41)
        close(A @ x[r0:r1], st.matmul(ref, x)[r0:r1], (abs(ref.to_dense()) @ abs(x))[r0:r1], ref.dtype, name)
        passed(f"load-{name}" + ("-row-starts" if kw else ""))
    if rank == 0:  # the CLI on a generated stencil
        from sparsetensor.mpi._generate import stencil

        s = stencil(5)
        st.save(os.path.join(tmp, "s.npz"), s)
    comm.Barrier()
    from sparsetensor.mpi.__main__ import main

    assert main(["generate", "--rmat", "6", "--edge-factor", "4", os.path.join(tmp, "r.mtx")]) == 0
    s7 = os.path.join(tmp, "s7.npz")
    assert main(["generate", "--stencil", "7", "--grid", "4", "--index-dtype", "int64", s7]) == 0
    from sparsetensor.mpi._generate import rmat, stencil

    assert np.allclose(st.load(os.path.join(tmp, "r.mtx")).to_dense(), rmat(6, 4).to_dense())
    assert np.array_equal(st.load(os.path.join(tmp, "s7.npz")).to_dense(), stencil(4, 7).to_dense())
    assert main(["cg", os.path.join(tmp, "r.mtx"), "--jacobi"]) == 0
    assert main(["cg", os.path.join(tmp, "s.npz"), "--json"]) == 0
    assert main(["spmv", os.path.join(tmp, "s.npz"), "--repeat", "3", "--columns", "2"]) == 0
    assert main(["spmv", os.path.join(tmp, "s.npz"), "--repeat", "3", "--exchange", "neighbor", "--json"]) == 0
    assert main(["cg", os.path.join(tmp, "s.npz"), "--exchange", "neighbor"]) == 0
    passed("cli")


# -- A @ B (distributed SpGEMM) ----------------------------------------------------------------
def int_matrix(m, n, density, seed, dtype=np.float64, index_dtype=np.int32, hub=None, empty_rows=(), empty_cols=()):
    """A canonical CSR tensor with small integer values (products and sums exact in every dtype)."""
    rng = np.random.default_rng(seed)
    d = (rng.random((m, n)) < density) * rng.integers(-4, 5, size=(m, n))
    if hub is not None and m and n:
        d[hub] = rng.integers(1, 5, size=n)
    d[list(empty_rows)] = 0
    d[:, list(empty_cols)] = 0
    if np.dtype(dtype).kind == "c":
        d = d + 1j * (d != 0) * rng.integers(-3, 4, size=(m, n))
    return st.from_dense(d.astype(dtype)).to(index_dtype=index_dtype)


def starts_of(n, parts, empty=1):
    """``parts + 1`` boundaries of ``n`` rows split evenly, except that part ``empty`` (of two or more) owns none."""
    lengths = np.diff((np.arange(parts + 1) * n) // parts)
    if parts > 1:
        lengths[(empty + 1) % parts] += lengths[empty % parts]
        lengths[empty % parts] = 0
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def check_product(name, a, b, akw=None, bkw=None, same_plan=False):
    """C = A @ B against SciPy's product of the gathered matrices: values, partitions, dtype, products with C."""
    A = stmpi.DistCSR.from_global(a if rank == 0 else None, comm=comm, **(akw or {}))
    bkw = dict(bkw or {})
    if same_plan:  # B's rows split like A's columns: the ghost rows travel along A's plan
        bkw["row_starts"] = A.col_starts
    B = stmpi.DistCSR.from_global(b if rank == 0 else None, comm=comm, **bkw)
    C = A @ B
    want = a.to_scipy().tocsr() @ b.to_scipy().tocsr()
    rt = np.result_type(a.dtype, b.dtype)
    assert C.shape == want.shape and C.dtype == rt, (name, C.shape, C.dtype, want.shape, rt)
    assert np.array_equal(C.row_starts, A.row_starts) and np.array_equal(C.col_starts, B.col_starts), name
    want_idt = np.int64 if np.int64 in (a.index_dtype, b.index_dtype) else np.int32
    assert C.index_dtype == want_idt, (name, C.index_dtype)
    g = C.to_global()
    if rank == 0:
        assert np.array_equal(g.to_dense(), want.toarray()), name
        got = g.to_scipy().tocsr(copy=True)
        got.eliminate_zeros()  # ours keeps products that cancel (as SpGEMM does); SciPy drops them
        want.eliminate_zeros()
        assert got.nnz == want.nnz and (got != want).nnz == 0, name
        assert g.nnz >= want.nnz
    # the product is a working matrix: C @ x (and its 2-d block) against SciPy
    c0, c1 = C.col_range
    r0, r1 = C.row_range
    X = (np.arange(C.shape[1] * 2).reshape(-1, 2) % 7 - 3).astype(rt)
    assert np.array_equal(C @ X[c0:c1], (want @ X)[r0:r1]), name
    assert np.array_equal(C @ X[c0:c1, 0], (want @ X[:, 0])[r0:r1]), name
    for M in (A, B, C):
        M.free()
    passed(name)


def suite_spgemm(tmp):
    sq = int_matrix(37, 37, 0.12, 21, hub=5, empty_rows=(0, 9, 36))
    sq2 = int_matrix(37, 37, 0.1, 22, empty_cols=(3,), empty_rows=(4,))
    check_product("spgemm-square", sq, sq2)
    check_product("spgemm-square-same-plan", sq, sq2, same_plan=True)
    check_product("spgemm-self", sq, sq, same_plan=True)
    e = starts_of(37, size)
    check_product("spgemm-empty-ranks", sq, sq2, akw={"row_starts": e}, bkw={"row_starts": e, "col_starts": e})
    check_product("spgemm-empty-rank-a-only", sq, sq2, akw={"row_starts": e}, same_plan=True)
    a = int_matrix(23, 37, 0.15, 23, np.complex128, np.int64, hub=2)
    b = int_matrix(37, 29, 0.15, 24, np.float64, np.int32, hub=30)
    check_product("spgemm-rect", a, b)  # A's columns split evenly, B's rows by nnz: rows fetched by request
    check_product("spgemm-rect-same-plan", a, b, same_plan=True)
    check_product("spgemm-rect-mismatched", a, b, akw={"col_starts": starts_of(37, size, 0)},
                  bkw={"row_starts": starts_of(37, size, size - 1), "col_starts": starts_of(29, size)})
    check_product("spgemm-int64-values", int_matrix(30, 30, 0.2, 25, np.int64), int_matrix(30, 30, 0.2, 26, np.int64))
    check_product("spgemm-no-entries", int_matrix(10, 12, 0.0, 27), int_matrix(12, 8, 0.3, 28))
    check_product("spgemm-float32-int32", int_matrix(20, 20, 0.3, 29, np.float32),
                  int_matrix(20, 20, 0.3, 30, np.float32))
    # a shape mismatch raises on every rank, naming both shapes
    A = stmpi.DistCSR.from_global(a if rank == 0 else None, comm=comm)
    try:
        A @ A
    except ValueError as err:
        assert "(23, 37) and (23, 37)" in str(err), str(err)
    else:
        raise AssertionError("A @ B with mismatched shapes did not raise")
    # a DistCSR on some ranks and an array on others: every rank raises (none hangs in another collective)
    B = stmpi.DistCSR.from_global(b if rank == 0 else None, comm=comm)
    c0, c1 = A.col_range
    if size > 1:
        try:
            A @ (B if rank == 0 else np.ones(c1 - c0))
        except ValueError as err:
            assert "DistCSR on some" in str(err) or "different shapes" in str(err), str(err)
        else:
            raise AssertionError("A @ (B or x by rank) did not raise")
    try:  # a local sparse tensor: not distributed
        A @ (b if rank == size - 1 else B)
    except ValueError as err:
        assert "local csr tensor" in str(err) or "different shapes" in str(err), str(err)
    else:
        raise AssertionError("A @ local tensor did not raise")
    C = A @ B  # the matrices still work after the errors
    assert C.shape == (23, 29)
    passed("spgemm-errors")


# -- save / load of a directory of parts -------------------------------------------------------
def sub_comm(k):
    """The first ``k`` ranks of the world (COMM_NULL on the others)."""
    return comm.Split(0 if rank < k else MPI.UNDEFINED, rank)


def each_first_ranks():
    """``(j, comm of the first j ranks)`` for j = 1..size, on the ranks among them; every rank waits for
    every j to finish."""
    for j in range(1, size + 1):
        sub = sub_comm(j)
        if sub != MPI.COMM_NULL:
            yield j, sub
            sub.Free()
        comm.Barrier()


def same_tensor(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype and got.index_dtype == want.index_dtype, what
    for x, y in ((got.crow_indices(), want.crow_indices()), (got.col_indices(), want.col_indices()),
                 (got.values(), want.values())):
        assert np.array_equal(x, y), what


def suite_parts(tmp):
    from sparsetensor.mpi._partition import balanced_starts

    mats = {"square": int_matrix(41, 41, 0.1, 31, np.float64, np.int32, hub=40, empty_rows=(3,)),
            "rect": int_matrix(23, 37, 0.15, 32, np.complex128, np.int64, hub=0),
            "empty": int_matrix(10, 10, 0.0, 33)}
    for k in range(1, size + 1):  # saved on k ranks, loaded on every count 1..size
        for name, t in mats.items():
            path = os.path.join(tmp, f"parts-{name}-{k}")
            s = starts_of(t.shape[0], k)
            sub = sub_comm(k)
            if sub != MPI.COMM_NULL:
                A = stmpi.DistCSR.from_global(t if sub.rank == 0 else None, comm=sub, row_starts=s)
                stmpi.save(path, A)
                saved_cols = A.col_starts
                A.free()
                sub.Free()
            comm.Barrier()
            for j, sub in each_first_ranks():
                B = stmpi.load(path, comm=sub)
                if j == k:  # the saved partitions
                    assert np.array_equal(B.row_starts, s), (name, k, B.row_starts, s)
                    assert np.array_equal(B.col_starts, sub.bcast(saved_cols if sub.rank == 0 else None))
                else:  # balanced by nnz, as for one file
                    assert np.array_equal(B.row_starts, balanced_starts(t.crow_indices(), j)), (name, k, j)
                g = B.to_global()
                if sub.rank == 0:
                    same_tensor(g, t, f"{name} saved on {k}, loaded on {j}")
                r0, r1 = B.row_range
                c0, c1 = B.col_range
                x = (np.arange(t.shape[1]) % 5 - 2).astype(t.dtype)
                assert np.array_equal(B @ x[c0:c1], (t.to_scipy() @ x)[r0:r1])
                # the user's partition wins
                rs = starts_of(t.shape[0], j, 0)
                B2 = stmpi.load(path, comm=sub, row_starts=rs, exchange="neighbor")
                assert np.array_equal(B2.row_starts, rs) and B2.exchange == "neighbor"
                g = B2.to_global()
                if sub.rank == 0:
                    same_tensor(g, t, f"{name} saved on {k}, loaded on {j} with row_starts")
                B.free()
                B2.free()
            comm.Barrier()
        passed(f"parts-saved-on-{k}")
    if size >= 4:
        passed("parts-saved-on-3-loaded-on-1-2-4")
    # saving again over a directory of another rank count: the stale parts go
    t = mats["square"]
    path = os.path.join(tmp, f"parts-square-{size}")
    A = stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm)
    stmpi.save(path, A)
    if size > 1:
        sub = sub_comm(1)
        if sub != MPI.COMM_NULL:
            stmpi.save(path, stmpi.DistCSR.from_global(t, comm=sub))
            sub.Free()
        comm.Barrier()
        assert sorted(os.listdir(path)) == ["manifest.json", "part-00000-of-00001.npz"], os.listdir(path)
        comm.Barrier()  # every rank has looked before the next save removes the manifest
        stmpi.save(path, A)
    parts = sorted(f for f in os.listdir(path) if f.startswith("part-"))
    assert len(parts) == size and parts[0] == f"part-00000-of-{size:05d}.npz", parts
    passed("parts-resave")
    # errors: every rank raises, naming the file
    expect_raise = []

    def raises(case, etype, needle, fn):
        try:
            fn()
        except etype as err:
            assert needle in str(err), (case, str(err))
            expect_raise.append(case)
        else:
            raise AssertionError(f"{case}: did not raise")
        comm.Barrier()

    victim = os.path.join(path, parts[-1])
    if rank == 0:  # the last part of another matrix of the same pattern (rows, nnz, dtypes): checksums differ
        os.replace(victim, victim + ".orig")
        st.save(victim, st.from_dense(t.to_dense()[A.row_starts[-2]:] * 2).to(index_dtype=t.index_dtype))
    comm.Barrier()
    raises("mismatched-part", ValueError, parts[-1], lambda: stmpi.load(path, comm=comm))
    if rank == 0:
        os.remove(victim)
    comm.Barrier()
    raises("missing-part", FileNotFoundError, parts[-1], lambda: stmpi.load(path, comm=comm))
    if rank == 0:
        os.replace(victim + ".orig", victim)
        os.remove(os.path.join(path, "manifest.json"))
    comm.Barrier()
    raises("missing-manifest", FileNotFoundError, "manifest.json", lambda: stmpi.load(path, comm=comm))
    afile = os.path.join(tmp, "m-file.bin")
    if rank == 0:
        st.save(afile, t)
    comm.Barrier()
    raises("save-onto-file", ValueError, "m-file.bin", lambda: stmpi.save(afile, A))
    raises("save-args-swapped", TypeError, "path comes first", lambda: stmpi.save(A, path))
    assert expect_raise == ["mismatched-part", "missing-part", "missing-manifest", "save-onto-file",
                            "save-args-swapped"]
    stmpi.save(path, A)  # a good save again reads back
    same = A.to_global()
    back = stmpi.load(path, comm=comm).to_global()
    if rank == 0:
        same_tensor(back, same, "resaved")
    passed("parts-errors-raise-on-every-rank")
    single_file(tmp, mats)


def single_file(tmp, mats):
    """save to one .npz on k ranks: the file sparsetensor.save writes for the gathered matrix (zip CRCs
    right, st.load and NumPy read it), loaded on every count 1..size; a DistBSR as a bsr file."""
    import zipfile

    bsr = st.from_dense(np.kron(mats["square"].to_dense()[:20, :20], np.arange(1.0, 7.0).reshape(2, 3)))
    bsr = bsr.to_sparse_bsr((2, 3))
    cases = dict(mats, bsr=bsr)
    for k in range(1, size + 1):
        for name, t in cases.items():
            path = os.path.join(tmp, f"file-{name}-{k}.npz")
            sub = sub_comm(k)
            if sub != MPI.COMM_NULL:
                if name == "bsr":
                    A = stmpi.DistBSR.from_global(t if sub.rank == 0 else None, comm=sub, blocksize=(2, 3))
                else:
                    A = stmpi.DistCSR.from_global(t if sub.rank == 0 else None, comm=sub,
                                                  row_starts=starts_of(t.shape[0], k))
                stmpi.save(path, A)
                A.free()
                sub.Free()
            comm.Barrier()
            if rank == 0:
                with zipfile.ZipFile(path) as zf:
                    assert zf.testzip() is None, (name, k)  # every member's CRC-32
                    arrays = {m[:-4]: np.load(zf.open(m)) for m in zf.namelist() if m.endswith(".npy")}
                back = st.load(path)
                assert back.layout == t.layout and back.is_coalesced(), (name, k)
                assert np.array_equal(arrays["values"], t.values()), (name, k)
                assert np.array_equal(back.to_dense(), t.to_dense()), (name, k)
                assert back.dtype == t.dtype and back.shape == t.shape, (name, k)
                mapped = st.load(path, mmap_mode="r")
                assert np.array_equal(mapped.col_indices(), t.col_indices()), (name, k)
            comm.Barrier()
            for j, sub in each_first_ranks():
                B = stmpi.load(path, comm=sub)
                assert isinstance(B, stmpi.DistBSR) == (name == "bsr"), (name, type(B))
                g = B.to_global()
                if sub.rank == 0:
                    assert np.array_equal(g.to_dense(), t.to_dense()), (name, k, j)
                B.free()
        passed(f"file-saved-on-{k}")
    path = os.path.join(tmp, "a-directory.npz")
    if rank == 0:
        os.makedirs(path)
    comm.Barrier()
    A = stmpi.DistCSR.from_global(mats["square"] if rank == 0 else None)
    try:
        stmpi.save(path, A)
    except ValueError as err:
        assert "is a directory" in str(err), str(err)
    else:
        raise AssertionError("save onto a directory named .npz did not raise")
    comm.Barrier()
    assert not [f for f in os.listdir(tmp) if f.endswith(".tmp")], os.listdir(tmp)  # no temporary file left
    passed("file-errors")


def suite_doctest(tmp):
    import doctest
    import importlib

    for mod in ("sparsetensor.mpi._matrix", "sparsetensor.mpi._load", "sparsetensor.mpi._krylov",
                "sparsetensor.mpi._krylov_residual",
                "sparsetensor.mpi._operator", "sparsetensor.mpi._precond", "sparsetensor.mpi._generate",
                "sparsetensor.mpi._spgemm", "sparsetensor.mpi._parts"):
        r = doctest.testmod(importlib.import_module(mod), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert r.failed == 0 and r.attempted > 0, (mod, r)
    passed("doctests")


# -- errors: every rank must raise ------------------------------------------------------------
def bad_rank():
    return size - 1


def arguments_disagree(A, t, s, n):
    """Arguments that differ on one rank (each valid there): every rank raises instead of waiting for
    a rank that took another path."""
    bad = rank == bad_rank()
    r0, r1 = A.row_range
    other = s.copy()
    other[1] += 1
    C = stmpi.DistCSR.from_global(random_matrix(n, 3, 0.5, 3) if rank == 0 else None, comm=comm)
    cases = {
        "A @ B of another B": lambda: A @ (C if bad else A),
        "from_local col_starts": lambda: stmpi.DistCSR.from_local(A.local_rows(), comm,
                                                                  col_starts=other if bad else s),
        "from_global row_starts": lambda: stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm,
                                                                    row_starts=other if bad else s),
        "dot slices": lambda: stmpi.dot(comm, np.ones(2), np.ones(3 if bad else 2)),
        "cg maxiter": lambda: stmpi.cg(A, np.ones(r1 - r0), maxiter=2 if bad else 50),
        "gmres restart": lambda: stmpi.gmres(A, np.ones(r1 - r0), restart=2 if bad else 5),
        "minres x0": lambda: stmpi.minres(A, np.ones(r1 - r0), x0=np.zeros(r1 - r0) if bad else None),
        "zero_rows diag": lambda: A.copy().zero_rows([0], diag=3.0 if bad else 1.0),
        "operator row_starts": lambda: stmpi.DistLinearOperator(lambda v: v, row_starts=other if bad else s),
    }
    for case, call in cases.items():
        try:
            call()
        except ValueError as e:
            assert "every rank must pass the same" in str(e) or "[raised on rank" in str(e) or bad, (case, str(e))
        else:
            raise AssertionError(f"{case} that differs on rank {bad_rank()} did not raise")
    # an argument bad on one rank only that the others would not see before a collective
    x = np.ones(A.col_range[1] - A.col_range[0])
    cases = {
        "A @ x threads": lambda: A.matvec(x, threads=-1 if bad else None),
        "rmatvec threads": lambda: A.rmatvec(np.ones(r1 - r0), threads=0 if bad else None),
        "matmat of a vector": lambda: A.matmat(x if bad else x[:, None]),
        "cg threads": lambda: stmpi.cg(A, np.ones(r1 - r0), threads=-1 if bad else None),
        "gmres threads": lambda: stmpi.gmres(A, np.ones(r1 - r0), threads=0 if bad else None),
        "norm of None": lambda: stmpi.norm(comm, None if bad else np.ones(2)),
        "dot of a str": lambda: stmpi.dot(comm, np.ones(2), "ab" if bad else np.ones(2)),
    }
    for case, call in cases.items():
        try:
            call()
        except (ValueError, TypeError) as e:
            assert f"rank {bad_rank()}" in str(e) or bad, (case, str(e))
        else:
            raise AssertionError(f"{case}, bad on rank {bad_rank()}, did not raise")
    try:
        stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm, root=size)
    except ValueError as e:  # was MPI's "Invalid root"
        assert f"root must be a rank in [0, {size})" in str(e), str(e)
    else:
        raise AssertionError("from_global with a root out of range did not raise")

    class Unpicklable(Exception):  # defined here: pickle cannot find it, to send it to the other ranks
        pass

    def fail_on_one():
        if bad:
            raise Unpicklable("local error")

    try:
        stmpi.agree(comm, fail_on_one)
    except (stmpi.RemoteError, Unpicklable) as e:
        assert "local error" in str(e), str(e)
    else:
        raise AssertionError("agree did not raise the failing rank's error everywhere")
    if size > 1:  # a preconditioner made from a matrix split otherwise: the rows it applies to are not A's
        eye = st.from_dense(np.eye(t.shape[0]) * 2.0, "csr") if rank == 0 else None
        B = stmpi.DistCSR.from_global(eye, comm=comm, row_starts=other)
        for M in (stmpi.jacobi(B), stmpi.block_jacobi(B, "splu")):
            try:
                stmpi.cg(A, np.ones(r1 - r0), M=M)
            except ValueError as e:
                assert "the preconditioner was made from a matrix whose rows are split" in str(e), str(e)
            else:
                raise AssertionError(f"cg with {M!r} of another row split did not raise")
    passed("arguments-disagree")


def suite_errors(tmp):
    """Each case: a part that is bad on one rank only; every rank prints RAISED and goes on."""
    n = 4 * size + 3
    t = random_matrix(n, n, 0.3, 15, hub=1)
    s = (np.arange(size + 1) * n) // size
    crow, cols, vals = t.crow_indices(), t.col_indices().copy(), t.values()
    last = s[bad_rank()]  # the first row of the last rank
    row = next(i for i in range(last, n) if crow[i + 1] > crow[i])
    cols[crow[row + 1] - 1] = n + 5  # column out of bounds in a row of the last rank
    broken = st.sparse_csr_tensor(crow, cols, vals, size=(n, n), check_invariants=False)
    try:
        stmpi.DistCSR.from_global(broken if rank == 0 else None, comm=comm, row_starts=s)
    except st.InvariantError as e:
        assert e.invariant == "5.5" and f"global row {row}" in str(e) and e.index == row, str(e)
        raised(tmp, "column-out-of-bounds", e)
    comm.Barrier()
    # a decreasing row pointer inside the last rank's rows
    crow2 = crow.copy()
    crow2[n - 1] = crow2[n - 2] - 1 if crow2[n - 2] > 0 else crow2[n - 1]
    broken = st.sparse_csr_tensor(crow2, t.col_indices(), vals, size=(n, n), check_invariants=False)
    try:
        stmpi.DistCSR.from_global(broken if rank == 0 else None, comm=comm, row_starts=s)
    except st.InvariantError as e:
        assert e.invariant == "5.3" and f"i={n - 1}" in str(e), str(e)
        raised(tmp, "row-pointer-decreases", e)
    comm.Barrier()
    # a checked part on this rank's own arrays, whose column the caller wrote out of range after
    # the check (the last rank only): checked again, and every rank raises
    part_col = np.array([0])
    part = st.sparse_csr_tensor(np.array([0, 1]), part_col, np.ones(1), size=(1, n))
    if rank == bad_rank():
        part_col[0] = n + 5
    try:
        stmpi.DistCSR.from_local(part, comm=comm)
    except st.InvariantError as e:
        assert rank != bad_rank() or "changed since the check" in str(e), str(e)
        raised(tmp, "changed-after-check", e)
    comm.Barrier()
    # a wrong operand on one rank only
    A = stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm)
    c0, c1 = A.col_range
    x = np.ones(c1 - c0 + (1 if rank == bad_rank() else 0))
    try:
        A @ x
    except ValueError as e:
        raised(tmp, "operand-shape", e)
    comm.Barrier()
    # a product the local kernel refuses after its exchange began (every rank): the exchange is
    # completed before the error leaves, so the next products work (the kept requests were left
    # active: MPI's "already active" error, and MPI writing into freed buffers at exit)
    for mode in ("p2p", "neighbor", "p2p"):
        A.set_exchange(mode)
        for bad_x in (np.ones(c1 - c0, np.uint64), np.ones(c1 - c0).astype(str), np.ones((c1 - c0, 2), np.uint64)):
            for _ in range(2):
                try:
                    A @ bad_x
                except TypeError as e:
                    assert "uint64" in str(e) or "not numbers" in str(e), str(e)
                else:
                    raise AssertionError(f"A @ x of dtype {bad_x.dtype} did not raise")
        try:
            A.rmatvec(np.ones(A.row_range[1] - A.row_range[0], np.uint64))
        except TypeError:
            pass
        rows = slice(*A.row_range)
        close(A @ np.ones(c1 - c0), t.to_dense()[rows].sum(axis=1), np.abs(t.to_dense()[rows]).sum(axis=1),
              np.float64, "a product after failed ones")
    # an unknown exchange mode on one rank only
    try:
        A.set_exchange("bogus" if rank == bad_rank() else "neighbor")
    except ValueError as e:
        raised(tmp, "exchange-mode", e)
    comm.Barrier()
    if size > 1:  # valid modes that differ between ranks: every rank raises instead of a half-built graph
        try:
            A.set_exchange("neighbor" if rank == bad_rank() else "p2p")
        except ValueError as e:
            assert "same mode" in str(e), str(e)
            passed("exchange-modes-disagree")
        else:
            raise AssertionError("set_exchange with different modes did not raise")
        arguments_disagree(A, t, s, n)
    # a file whose last rank's rows are broken: every rank maps its rows, the last one finds it
    path = os.path.join(tmp, "bad.npz")
    if rank == 0:
        with st.check_invariants(False):
            st.save(path, st.sparse_csr_tensor(crow, cols, vals, size=(n, n), check_invariants=False))
    comm.Barrier()
    try:
        stmpi.load(path, comm=comm, row_starts=s)
    except st.InvariantError as e:
        assert e.invariant == "5.5" and "bad.npz" in str(e) and f"global row {row}" in str(e), str(e)
        raised(tmp, "load-bad-file", e)
    comm.Barrier()
    # bad user row_starts (found on root)
    try:
        stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm, row_starts=[0, n + 1] + [n] * (size - 1))
    except ValueError as e:
        raised(tmp, "bad-row-starts", e)
    comm.Barrier()
    if rank == 0:
        print("DONE", flush=True)


def suite_all(tmp):
    for suite in (suite_products, suite_solve_io, suite_errors, suite_spgemm, suite_parts) + (
            (suite_doctest,) if size == 2 else ()):
        suite(tmp)


SUITES = {"products": suite_products, "solve_io": suite_solve_io, "errors": suite_errors, "doctest": suite_doctest,
          "spgemm": suite_spgemm, "parts": suite_parts, "all": suite_all}

if __name__ == "__main__":
    SUITES[sys.argv[1]](sys.argv[2])
