"""Run under mpiexec by tests/mpi/test_dist_bsr.py: ``python -m mpi4py tests/mpi/worker_bsr.py SUITE TMPDIR``.

(``-m mpi4py`` aborts every rank when one raises, so a failed check cannot hang the others.)

Every rank builds the same global matrices from fixed seeds (integer-valued blocks, so that
sums, scalings and transposes compare exactly) and checks its part of every result of
:class:`sparsetensor.mpi.DistBSR` against NumPy/SciPy on the whole matrix, and the Krylov
iterates against SciPy's solvers on the gathered matrix (``compare`` of worker_krylov.py).
Rank 0 prints ``PASS name`` per case; the errors suite writes one line per case that raised
to ``TMPDIR/raised.RANK.txt``.
"""

from __future__ import annotations

# ruff: noqa: B023 - the lambdas handed to compare() are called at once, inside the loop that binds them
import importlib.util
import os
import sys

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from mpi4py import MPI
from mpi_worker import passed
from worker_assembly import expect
from worker_krylov import block_oracle, compare, rhs

import sparsetensor as st
from sparsetensor import mpi as stmpi

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
BLOCKS = [(1, 1), (2, 2), (3, 3), (2, 3)]
HAVE_PETSC = importlib.util.find_spec("petsc4py") is not None


# -- matrices (the same on every rank) --------------------------------------------------------
def block_dense(mb, nb, bs, density, seed, dtype=np.float64, shift=0):
    """A dense ``(mb r) x (nb c)`` array whose nonzero ``r x c`` blocks are a random ``density`` of them, each
    with integer entries (some of them zero: explicit zeros inside stored blocks), plus ``shift`` on the diagonal."""
    r, c = bs
    rng = np.random.default_rng(seed)
    keep = rng.random((mb, nb)) < density
    vals = rng.integers(-4, 5, (mb * r, nb * c)).astype(np.float64)
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.integers(-3, 4, vals.shape)
    d = vals * np.kron(keep, np.ones((r, c)))
    if shift:
        d = d + shift * np.eye(mb * r, nb * c)
    return d.astype(dtype)


def as_bsr(d, bs, index_dtype=np.int64):
    return st.from_dense(d).to_sparse_csr().to(index_dtype=index_dtype).to_sparse_bsr(bs)


def stored_blocks(t):
    """The gathered BSR tensor as (block pattern, dense): what a DistBSR must keep exactly."""
    r, c = t.blocksize
    crow, cols = t.crow_indices(), t.col_indices()
    rows = np.repeat(np.arange(crow.shape[0] - 1), np.diff(crow))
    return set(zip(rows.tolist(), cols.tolist())), t.to_dense()


def equal_global(A, t, what):
    """A's gathered matrix has ``t``'s blocks (the same stored blocks and values), block size and dtype."""
    g = A.to_global()
    if rank == 0:
        assert g.layout.name == "bsr" and g.blocksize == t.blocksize, (what, g)
        assert g.dtype == t.dtype and g.index_dtype == A.index_dtype, (what, g.dtype, t.dtype)
        pg, dg = stored_blocks(g)
        pt, dt = stored_blocks(t)
        assert pg == pt, (what, sorted(pg ^ pt)[:5])
        assert np.array_equal(dg, dt), what
    comm.Barrier()


def distribute(t, **kw):
    return stmpi.DistBSR.from_global(t if rank == 0 else None, comm=comm, **kw)


def starts_with_empty_rank(nb, r):
    """Block-row boundaries (times r) that leave rank 1 (when there is one) without rows."""
    s = (np.arange(size + 1) * nb // size) * r
    if size > 1:
        s[1] = 0
    return s


# -- products, conversions, ops ---------------------------------------------------------------
def check_products(name, A, d):
    r0, r1 = A.row_range
    c0, c1 = A.col_range
    M, N = d.shape
    dt = np.result_type(d.dtype, np.float64) if d.dtype != np.float32 else np.float32
    x = (np.arange(N) % 7 - 3).astype(dt)
    X = np.stack([x, x[::-1]], axis=1)
    tol = 1e-4 if dt == np.float32 else 1e-12
    y = A @ x[c0:c1]
    assert y.dtype == np.result_type(d.dtype, x.dtype) and np.allclose(y, (d @ x)[r0:r1], rtol=tol, atol=tol), name
    assert np.allclose(A @ X[c0:c1], (d @ X)[r0:r1], rtol=tol, atol=tol), name
    assert np.allclose(A.matmat(X[c0:c1]), (d @ X)[r0:r1], rtol=tol, atol=tol), name
    v = (np.arange(M) % 5 - 2).astype(dt)
    assert np.allclose(A.rmatvec(v[r0:r1]), (d.T @ v)[c0:c1], rtol=tol, atol=tol), name
    assert np.allclose(A.rmatvec(v[r0:r1], adjoint=True), (d.conj().T @ v)[c0:c1], rtol=tol, atol=tol), name
    # each ghost block column moves bc entries, once
    bc = A.blocksize[1]
    A @ x[c0:c1]
    s = A.comm_stats()
    assert s["bytes_received_per_product"][rank] == y.itemsize * bc * s["ghosts_per_rank"][rank], (name, s)
    op = stmpi.aslinearoperator(A)
    assert np.array_equal(op.matvec(x[c0:c1]), y), name
    A.set_exchange("neighbor")  # the same bytes through MPI_Ineighbor_alltoallv
    assert np.array_equal(A @ x[c0:c1], y) and np.array_equal(A @ X[c0:c1], A.matmat(X[c0:c1])), name
    A.set_exchange("p2p")
    g = A.gather(y)
    if rank == 0:
        assert np.allclose(g, d @ x, rtol=tol, atol=tol)


def suite_ops(tmp):
    for bs in BLOCKS:
        r, c = bs
        square = r == c
        for idt in (np.int32, np.int64):
            for dt in (np.float64, np.complex128, np.float32):
                mb, nb = (10, 10) if square else (9, 7)
                d = block_dense(mb, nb, bs, 0.3, 11 + r, dt, shift=5 if square else 0)
                t = as_bsr(d, bs, idt)
                name = f"{r}x{c}-{np.dtype(idt).name}-{np.dtype(dt).name}"
                A = distribute(t)
                assert A.blocksize == bs and A.shape == d.shape and A.index_dtype == idt and A.dtype == dt
                assert A.nnz == t.nnz and A.row_starts[-1] == d.shape[0] and not np.any(A.row_starts % r)
                assert isinstance(A.diag_block, st.SparseTensor) and A.diag_block.layout.name == "bsr"
                equal_global(A, t, name)
                check_products(name, A, d)
                # from a CSR tensor with blocksize, on given partitions (one rank empty)
                rs = starts_with_empty_rank(mb, r)
                B = distribute(st.from_dense(d).to_sparse_csr().to(index_dtype=idt), blocksize=bs, row_starts=rs)
                assert np.array_equal(B.row_starts, rs)
                equal_global(B, t, name + " csr input")
                check_products(name + " empty rank", B, d)
                # from_local: each rank its rows
                r0, r1 = A.row_range
                L = stmpi.DistBSR.from_local(as_bsr(d[r0:r1], bs, idt) if r1 > r0 else
                                             st.sparse_bsr_tensor(np.zeros(1, idt), np.zeros(0, idt),
                                                                  np.zeros((0, r, c), dt), size=(0, d.shape[1])),
                                             comm, col_starts=A.col_starts)
                equal_global(L, t, name + " from_local")
                # to and from DistCSR
                C = A.to_csr()
                assert type(C) is stmpi.DistCSR and np.array_equal(C.row_starts, A.row_starts)
                assert C.index_dtype == idt and C.dtype == dt and np.array_equal(C.col_starts, A.col_starts)
                gc = C.to_global()
                if rank == 0:
                    assert np.array_equal(gc.to_dense(), d) and gc.nnz == t.nnz * r * c
                equal_global(stmpi.DistBSR.from_csr(C, bs), t, name + " from_csr")
                if dt == np.float32:
                    passed(f"products-{name}")
                    continue
                # the ops, exact on integer-valued entries
                equal_global(2 * A, t._replace_values(2 * t.values()), name + " 2A")
                equal_global(-A, t._replace_values(-t.values()), name + " -A")
                equal_global(A.conj(), t._replace_values(np.conj(t.values())), name + " conj")
                S = A + A.copy()
                assert isinstance(S, stmpi.DistBSR)
                equal_global(S, t._replace_values(2 * t.values()), name + " A+A")
                d2 = block_dense(mb, nb, bs, 0.3, 99, dt)
                A2 = distribute(as_bsr(d2, bs, idt), row_starts=A.row_starts, col_starts=A.col_starts)
                g = (A - A2).to_global()
                if rank == 0:
                    assert np.array_equal(g.to_dense(), d - d2) and g.blocksize == bs
                    union = stored_blocks(t)[0] | stored_blocks(as_bsr(d2, bs, idt))[0]
                    assert stored_blocks(g)[0] == union  # a block that cancels stays stored
                T = A.T
                assert isinstance(T, stmpi.DistBSR) and T.blocksize == (c, r)
                assert np.array_equal(T.row_starts, A.col_starts)
                g = T.to_global()
                if rank == 0:
                    assert np.array_equal(g.to_dense(), d.T)
                for op_, want in ((lambda: A + C, 2 * d), (lambda: C + A, 2 * d), (lambda: C - A, 0 * d)):
                    mixed = op_()  # a DistCSR operand, on either side: the point sum, a DistCSR
                    assert type(mixed) is stmpi.DistCSR
                    g = mixed.to_global()
                    if rank == 0:
                        assert np.array_equal(g.to_dense(), want)
                if square:
                    P = A @ A2
                    assert isinstance(P, stmpi.DistBSR) and P.blocksize == bs
                    g = P.to_global()
                    if rank == 0:
                        assert np.allclose(g.to_dense(), d @ d2)
                    assert np.array_equal(A.diagonal(), np.diag(d)[r0:r1])
                    db = A.diagonal_blocks()
                    want = np.array([d[i:i + r, i:i + r] for i in range(r0, r1, r)]).reshape(-1, r, r)
                    assert np.array_equal(db, want)
                    # Dirichlet rows, with the right-hand side fix
                    Z = A.copy()
                    rows = [0, d.shape[0] - 1, 3] if rank == 0 else [3]
                    x = np.full(r1 - r0, 2.0, dtype=dt)
                    b = np.ones(r1 - r0, dtype=dt)
                    Z.zero_rows(rows, diag=4.0, x=x, b=b)
                    e = d.copy()
                    zr = [0, d.shape[0] - 1, 3]
                    e[zr] = 0
                    e[zr, zr] = 4
                    bb = np.ones(d.shape[0], dtype=dt)
                    bb[zr] = 8
                    assert np.array_equal(b, bb[r0:r1])
                    g = Z.to_global()
                    if rank == 0:
                        assert np.array_equal(g.to_dense(), e) and g.blocksize == bs
                        if r > 1:  # the blocks keep their other rows, and zeros in the zeroed ones
                            assert stored_blocks(t)[0] <= stored_blocks(g)[0]
                    assert isinstance(Z, stmpi.DistBSR) and np.array_equal(Z @ np.ones(r1 - r0), (e.sum(1))[r0:r1])
                else:
                    try:
                        A.diagonal_blocks()
                    except NotImplementedError as err:
                        assert "(2, 3)" in str(err)
                    else:
                        raise AssertionError("diagonal_blocks of 2x3 blocks did not raise")
                passed(f"ops-{name}")
                passed(f"products-{name}")


# -- Krylov methods and preconditioners -------------------------------------------------------
def suite_krylov(tmp):
    for bs in ((1, 1), (2, 2), (3, 3)):
        r = bs[0]
        for dt in (np.float64, np.complex128, np.float32):
            tag = f"{r}x{r}-{np.dtype(dt).name}"
            nb = 24 // r
            b_ = block_dense(nb, nb, bs, 0.12, 3, dt)
            spd = (b_ @ b_.conj().T + 30 * np.eye(nb * r)).astype(dt)
            t = as_bsr(spd, bs)
            m = sp.csr_matrix(spd)
            n = spd.shape[0]
            A = distribute(t)
            r0, r1 = A.row_range
            b = rhs(n, 2, dt)
            kw = {"rtol": 1e-4} if dt == np.float32 else {"rtol": 1e-10}
            ok = (lambda i: i == 0)
            compare(f"cg-{tag}", lambda cb: stmpi.cg(A, b[r0:r1], callback=cb, **kw),
                    lambda cb: sla.cg(m, b, callback=cb, **kw), r0, r1, dt, ok)
            compare(f"minres-{tag}", lambda cb: stmpi.minres(A, b[r0:r1], callback=cb, **kw),
                    lambda cb: sla.minres(m, b, callback=cb, **kw), r0, r1, dt, ok) if dt == np.float64 else None
            compare(f"cg-jacobi-{tag}", lambda cb: stmpi.cg(A, b[r0:r1], M=stmpi.jacobi(A), callback=cb, **kw),
                    lambda cb: sla.cg(m, b, M=sp.diags(1 / m.diagonal()), callback=cb, **kw), r0, r1, dt, ok)
            # block Jacobi: each rank's diagonal block (its point form) solved exactly
            M = stmpi.block_jacobi(A, "splu")
            compare(f"cg-bjacobi-{tag}", lambda cb: stmpi.cg(A, b[r0:r1], M=M, callback=cb, **kw),
                    lambda cb: sla.cg(m, b, M=block_oracle(t.to_sparse_csr(), A.row_starts, "splu"),
                                      callback=cb, **kw), r0, r1, dt, ok)
            # point-block Jacobi (PCPBJACOBI): the inverses of the r x r diagonal blocks
            inv = sp.block_diag([np.linalg.inv(spd[i:i + r, i:i + r]) for i in range(0, n, r)]).tocsr()
            Mp = stmpi.point_block_jacobi(A)
            compare(f"cg-pbjacobi-{tag}", lambda cb: stmpi.cg(A, b[r0:r1], M=Mp, callback=cb, **kw),
                    lambda cb: sla.cg(m, b, M=inv, callback=cb, **kw), r0, r1, dt, ok)
            passed(f"cg-{tag}")
            # nonsymmetric: GMRES (restarted) and BiCGSTAB
            ns = (spd + block_dense(nb, nb, bs, 0.2, 5, dt)).astype(dt)
            N_ = as_bsr(ns, bs)
            mn = sp.csr_matrix(ns)
            An = distribute(N_, row_starts=A.row_starts)
            compare(f"gmres-{tag}", lambda cb: stmpi.gmres(An, b[r0:r1], restart=6, callback=cb,
                                                           callback_type="x", **kw),
                    lambda cb: sla.gmres(mn, b, restart=6, callback=cb, callback_type="x", **kw), r0, r1, dt, ok)
            compare(f"bicgstab-{tag}", lambda cb: stmpi.bicgstab(An, b[r0:r1], callback=cb, **kw),
                    lambda cb: sla.bicgstab(mn, b, callback=cb, **kw), r0, r1, dt, ok)
            Mn = stmpi.point_block_jacobi(An)
            invn = sp.block_diag([np.linalg.inv(ns[i:i + r, i:i + r]) for i in range(0, n, r)]).tocsr()
            compare(f"gmres-pbjacobi-{tag}", lambda cb: stmpi.gmres(An, b[r0:r1], M=Mn, callback=cb,
                                                                    callback_type="x", **kw),
                    lambda cb: sla.gmres(mn, b, M=invn, callback=cb, callback_type="x", **kw), r0, r1, dt, ok)
            passed(f"gmres-bicgstab-{tag}")


# -- assembly ---------------------------------------------------------------------------------
def suite_assemble(tmp):
    for bs in BLOCKS:
        r, c = bs
        M, N = 8 * r, 6 * c
        rng = np.random.default_rng(7)
        k = 40
        rows_all = rng.integers(0, M, (size, k))
        cols_all = rng.integers(0, N, (size, k))
        vals_all = rng.integers(1, 5, (size, k)).astype(np.float64)
        for mode in ("add", "insert"):
            A = stmpi.assemble(rows_all[rank], cols_all[rank], vals_all[rank], (M, N), comm, block=bs, mode=mode)
            assert isinstance(A, stmpi.DistBSR) and A.blocksize == bs and not np.any(A.row_starts % r)
            want = np.zeros((M, N))
            if mode == "add":
                np.add.at(want, (rows_all.ravel(), cols_all.ravel()), vals_all.ravel())
            else:  # later ranks win, and later entries within a rank
                for q in range(size):
                    for i, j, v in zip(rows_all[q], cols_all[q], vals_all[q]):
                        want[i, j] = v
            g = A.to_global()
            if rank == 0:
                assert np.array_equal(g.to_dense(), want), (bs, mode)
                touched = {(i // r, j // c) for i, j in zip(rows_all.ravel(), cols_all.ravel())}
                assert stored_blocks(g)[0] == touched  # every block an entry touched, whole
        rs = starts_with_empty_rank(8, r)
        A = stmpi.assemble(rows_all[rank], cols_all[rank], vals_all[rank], (M, N), comm, block=bs, row_starts=rs)
        assert np.array_equal(A.row_starts, rs)
        passed(f"assemble-{r}x{c}")


# -- save / load on other rank counts ---------------------------------------------------------
def suite_io(tmp):
    for bs in ((2, 2), (3, 3), (2, 3)):
        r, c = bs
        mb, nb = (9, 9) if r == c else (9, 7)
        d = block_dense(mb, nb, bs, 0.3, 21, np.float64, shift=3 if r == c else 0)
        t = as_bsr(d, bs, np.int32)
        path = os.path.join(tmp, f"bsr-{r}x{c}")
        A = distribute(t)
        stmpi.save(path, A)
        L = stmpi.load(path, comm)
        assert isinstance(L, stmpi.DistBSR) and L.blocksize == bs and np.array_equal(L.row_starts, A.row_starts)
        equal_global(L, t, f"load {bs}")
        # written by fewer ranks, read by all of them
        few = max(1, size - 1)
        sub = comm.Split(0 if rank < few else MPI.UNDEFINED, rank)
        path2 = os.path.join(tmp, f"bsr-{r}x{c}-on-{few}")
        if sub != MPI.COMM_NULL:
            S = stmpi.DistBSR.from_global(t if sub.rank == 0 else None, comm=sub)
            stmpi.save(path2, S)
            S.free()
            sub.Free()
        comm.Barrier()
        L2 = stmpi.load(path2, comm)
        assert isinstance(L2, stmpi.DistBSR) and not np.any(L2.row_starts % r) and not np.any(L2.col_starts % c)
        equal_global(L2, t, f"load {bs} from {few} ranks")
        x = np.ones(d.shape[1])
        c0, c1 = L2.col_range
        r0, r1 = L2.row_range
        assert np.array_equal(L2 @ x[c0:c1], (d @ x)[r0:r1])
        # one .npz file, written by every rank at its offsets, with blocks only in the first block row:
        # the other ranks write empty (0, r, c) value arrays
        top = np.zeros_like(d)
        top[:r] = d[:r]
        path3 = os.path.join(tmp, f"bsr-{r}x{c}-top.npz")
        stmpi.save(path3, distribute(as_bsr(top, bs)))
        L3 = stmpi.load(path3, comm)
        equal_global(L3, as_bsr(top, bs), f"one file {bs}, blocks on one rank")
        passed(f"save-load-{r}x{c}")


# -- PETSc ------------------------------------------------------------------------------------
def petsc_dense(P):
    ai, aj, av = P.getValuesCSR()
    lo, hi = P.getOwnershipRange()
    part = sp.csr_matrix((av, aj, ai), shape=(hi - lo, P.getSize()[1])).toarray()
    return np.concatenate(comm.allgather(part))


def suite_petsc(tmp):
    if not HAVE_PETSC:
        return
    from petsc4py import PETSc

    for bs in ((1, 1), (2, 2), (3, 3)):
        r = bs[0]
        for idt in (np.int32, np.int64):
            d = block_dense(8, 8, bs, 0.3, 31, np.float64, shift=6)
            t = as_bsr(d, bs, idt)
            A = distribute(t)
            P = A.to_petsc()
            want = "mpibaij" if size > 1 else "seqbaij"
            assert P.getType() == want and P.getBlockSize() == r, (P.getType(), P.getBlockSize())
            assert P.getOwnershipRange() == A.row_range
            assert np.array_equal(petsc_dense(P), d)
            x = np.arange(d.shape[0], dtype=np.float64)
            r0, r1 = A.row_range
            vx = PETSc.Vec().createWithArray(x[r0:r1].copy(), size=(r1 - r0, d.shape[0]), comm=comm)
            vy = P.createVecLeft()
            P.mult(vx, vy)
            assert np.allclose(vy.getArray(), A @ x[r0:r1])
            B = stmpi.DistBSR.from_petsc(P)
            assert B.blocksize == bs and np.array_equal(B.row_starts, A.row_starts)
            g = B.to_global()
            if rank == 0:
                assert np.array_equal(g.to_dense(), d) and stored_blocks(g)[0] == stored_blocks(t)[0]
            P.scale(2.0)  # copied: PETSc's change does not reach our values
            assert np.array_equal(A @ x[r0:r1], (d @ x)[r0:r1])
            P.destroy()
            b = np.ones(r1 - r0)
            stats = {}
            xs, info = stmpi.solve(A, b, "gmres", "pbjacobi", rtol=1e-12, stats=stats)
            assert info == 0 and stats["pc"] == "pbjacobi"
            xr = np.linalg.solve(d, np.ones(d.shape[0]))
            assert np.allclose(xs, xr[r0:r1], rtol=1e-8, atol=1e-10)
            passed(f"petsc-{r}x{r}-{np.dtype(idt).name}")


# -- errors -----------------------------------------------------------------------------------
def suite_errors(tmp):
    last = size - 1
    d = block_dense(6, 6, (2, 2), 0.4, 41, shift=3)
    t = as_bsr(d, (2, 2))
    A = distribute(t)
    r0, r1 = A.row_range
    bad_starts = np.arange(size + 1) * 12 // size
    bad_starts[1:-1] |= 1  # odd: inside a block
    if size > 1:  # one rank has no boundary inside the matrix
        expect(tmp, "row-starts-inside-a-block", ValueError, lambda: distribute(t, row_starts=bad_starts),
               "multiples of the block size 2")
    expect(tmp, "x-shape-on-last-rank", ValueError, lambda: A @ np.ones(r1 - r0 + (rank == last)), f"rank {last}")
    expect(tmp, "csr-without-blocksize", ValueError, lambda: distribute(st.from_dense(d)), "blocksize")
    expect(tmp, "shape-not-whole-blocks", ValueError, lambda: distribute(st.from_dense(d), blocksize=(5, 5)),
           "whole number")
    if size > 1:
        expect(tmp, "from-local-blocksize-on-last-rank", ValueError,
               lambda: stmpi.DistBSR.from_local(as_bsr(d[r0:r1], (1, 1) if rank == last else (2, 2)), comm),
               "block size")
    other = np.arange(size + 1) * 6 // size * 2
    other[1:-1] = np.maximum(other[1:-1] - 2, 0) if size > 1 else other[1:-1]
    if size > 1 and np.array_equal(other, A.row_starts):
        other[1] += 2
    B = distribute(t, row_starts=other)
    if size > 1:
        expect(tmp, "sum-partitions-differ", ValueError, lambda: A + B, "partitions differ")
    if size > 1:
        C = stmpi.DistCSR.from_global(st.from_dense(d) if rank == 0 else None, row_starts=bad_starts)
        expect(tmp, "from-csr-unaligned", ValueError, lambda: stmpi.DistBSR.from_csr(C, (2, 2)), "row_starts")
        # each rank built its own block size: the next product failed in MPI on one rank, hung on others
        C = stmpi.DistCSR.from_global(st.from_dense(d) if rank == 0 else None, comm=comm)
        expect(tmp, "from-csr-blocksize-on-last-rank", ValueError,
               lambda: stmpi.DistBSR.from_csr(C, (1, 1) if rank == last else (2, 2)), "same blocksize")
        # root's row_starts and block size were taken without a word where another rank passed others
        expect(tmp, "from-global-blocksize-on-last-rank", ValueError,
               lambda: distribute(st.from_dense(d), blocksize=(1, 1) if rank == last else (2, 2)), "same blocksize")
    expect(tmp, "assemble-shape", ValueError,
           lambda: stmpi.assemble([0], [0], [1.0], (5, 6), comm, block=(2, 2)), "whole number")
    expect(tmp, "assemble-out-of-range-on-last-rank", ValueError,
           lambda: stmpi.assemble([12 if rank == last else 0], [0], [1.0], (12, 12), comm, block=(2, 2)),
           "global row 12")
    expect(tmp, "diagonal-blocks-not-square", NotImplementedError,
           lambda: distribute(as_bsr(block_dense(3, 2, (2, 3), 0.5, 1), (2, 3))).diagonal_blocks(), "(2, 3)")
    expect(tmp, "pbjacobi-singular-block", np.linalg.LinAlgError,
           lambda: stmpi.point_block_jacobi(distribute(as_bsr(np.zeros((12, 12)) + np.eye(12, k=1), (2, 2)))),
           "singular")
    path = os.path.join(tmp, "err-bsr")
    stmpi.save(path, A)
    if size > 1:
        expect(tmp, "load-unaligned-row-starts", ValueError, lambda: stmpi.load(path, comm, row_starts=bad_starts),
               "block size 2")
    if HAVE_PETSC:
        R = distribute(as_bsr(block_dense(4, 3, (2, 3), 0.5, 2), (2, 3)))
        expect(tmp, "petsc-non-square-blocks", NotImplementedError, R.to_petsc, "2 x 3")
        P = A.to_csr().to_petsc()
        expect(tmp, "petsc-aij-to-distbsr", TypeError, lambda: stmpi.DistBSR.from_petsc(P), "BAIJ")
        P.destroy()
    # still usable afterwards
    assert np.array_equal(A @ np.ones(r1 - r0), d.sum(1)[r0:r1])
    passed("errors-raise-on-every-rank")


def suite_doctest(tmp):
    import doctest

    import sparsetensor.mpi._bsr as m1
    import sparsetensor.mpi._bsr_ops as m2

    for mod in (m1, m2):
        res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert res.failed == 0 and res.attempted > 0, (mod.__name__, res)
    passed("bsr-doctests")


def suite_all(tmp):
    for suite in (suite_ops, suite_krylov, suite_assemble, suite_io, suite_petsc, suite_errors, suite_doctest):
        suite(tmp)
    if rank == 0:
        print("DONE", flush=True)


SUITES = {"ops": suite_ops, "krylov": suite_krylov, "assemble": suite_assemble, "io": suite_io,
          "petsc": suite_petsc, "errors": suite_errors, "doctest": suite_doctest, "all": suite_all}

if __name__ == "__main__":
    SUITES[sys.argv[1]](sys.argv[2])
