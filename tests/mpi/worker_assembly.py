"""Run under mpiexec by tests/mpi/test_assembly.py: ``python -m mpi4py tests/mpi/worker_assembly.py SUITE TMPDIR``.

Every rank generates every rank's triples from fixed seeds, so each can
compute the serial oracle (SciPy's COO -> CSR assembly, which sums duplicates)
and check its part. Values are integers (or integer multiples of 1/4) so that
every sum is exact in any order: the checks are ``array_equal``. Rank 0 prints
``PASS name`` per case; a failed check raises (``-m mpi4py`` aborts the job).
The errors suite writes one line per case that raised to ``TMPDIR/raised.RANK.txt``.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import scipy.sparse as sp
from mpi_worker import comm, passed, raised, random_matrix, rank, size, starts_with_empty_rank

import sparsetensor as st
from sparsetensor import mpi as stmpi


# -- the oracle -------------------------------------------------------------------------------
def triples_of(q, shape, count, seed, dtype=np.float64, index_dtype=np.int64):
    """Rank ``q``'s triples: anywhere in the matrix (mostly off-process with several ranks), with duplicates."""
    rng = np.random.default_rng(seed * 100 + q)
    M, N = shape
    rows = rng.integers(0, M, count).astype(index_dtype)
    cols = rng.integers(0, N, count).astype(index_dtype)
    if count > 5:  # repeated positions on this rank, and two that every rank passes (duplicates across ranks)
        rows[:3], cols[:3] = rows[3], cols[3]
        rows[-2:], cols[-2:] = [0, M - 1], [0, N - 1]
    vals = rng.integers(-4, 5, count).astype(np.float64)
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.integers(-3, 4, count)
    return rows, cols, vals.astype(dtype)


def all_triples(shape, counts, seed, dtype, index_dtype):
    parts = [triples_of(q, shape, counts[q], seed, dtype, index_dtype) for q in range(size)]
    return parts, tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def scipy_csr(rows, cols, vals, shape):
    m = sp.coo_matrix((vals, (rows.astype(np.int64), cols.astype(np.int64))), shape=shape).tocsr()
    m.sum_duplicates()
    m.sort_indices()
    return m


def same_as_scipy(A, ref, what):
    """The gathered matrix has exactly SciPy's pattern and values (rank 0 checks; every rank joins the gather)."""
    back = A.to_global()
    assert A.shape == ref.shape and A.nnz == ref.nnz, (what, A.shape, ref.shape, A.nnz, ref.nnz)
    if rank == 0:
        assert back.dtype == ref.dtype, (what, back.dtype, ref.dtype)
        assert np.array_equal(back.crow_indices(), ref.indptr), what
        assert np.array_equal(back.col_indices(), ref.indices), what
        assert np.array_equal(back.values(), ref.data), what


def dense_of(A):
    """The whole matrix as a dense array on every rank."""
    return comm.bcast(A.to_global().to_dense() if rank == 0 else A.to_global(), root=0)


def product_ok(A, ref, what):
    r0, r1 = A.row_range
    c0, c1 = A.col_range
    x = np.arange(A.shape[1], dtype=np.float64) % 7 - 3
    assert np.array_equal(A @ x[c0:c1], (ref @ x)[r0:r1]), what


def last_wins(rows, cols, vals, shape):
    d = np.zeros(shape, dtype=vals.dtype)
    for r, c, v in zip(rows.tolist(), cols.tolist(), vals.tolist()):
        d[r, c] = v
    return d


# -- suites -----------------------------------------------------------------------------------
def suite_assemble(tmp):
    shape = (37, 37)
    counts = [40 + 7 * q for q in range(size)]
    for idt in (np.int32, np.int64):
        for dt in (np.float32, np.float64, np.complex128):
            tag = f"{np.dtype(idt).name}-{np.dtype(dt).name}"
            parts, (R, C, V) = all_triples(shape, counts, 1, dt, idt)
            ref = scipy_csr(R, C, V, shape)
            A = stmpi.assemble(*parts[rank], shape, comm)
            assert A.dtype == dt and A.index_dtype == np.int32, (A.dtype, A.index_dtype)
            assert np.array_equal(A.row_starts, (np.arange(size + 1) * 37) // size)  # the default: an even split
            same_as_scipy(A, ref, tag)
            product_ok(A, ref, tag)
            passed(f"assemble-{tag}")
    # a rank owning no rows, a rank passing no triples (empty lists), int64 indices kept on request
    parts, (R, C, V) = all_triples(shape, [0 if q == 1 else c for q, c in enumerate(counts)], 2, np.float64,
                                   np.int64)
    mine = ([], [], []) if rank == 1 else parts[rank]
    A = stmpi.assemble(*mine, shape, comm, row_starts=starts_with_empty_rank(37), index_dtype=np.int64)
    assert A.index_dtype == np.int64 and np.array_equal(A.row_starts, starts_with_empty_rank(37))
    same_as_scipy(A, scipy_csr(R, C, V, shape), "empty")
    product_ok(A, scipy_csr(R, C, V, shape), "empty")
    passed("assemble-empty-ranks")
    # rectangular, columns split separately; float32 values on the others, [] (float64) on rank 1: float32
    parts, (R, C, V) = all_triples((23, 41), [0 if q == 1 else 30 for q in range(size)], 3, np.float32, np.int64)
    mine = ([], [], []) if rank == 1 else parts[rank]
    A = stmpi.assemble(*mine, (23, 41), comm)
    assert A.dtype == np.float32 and np.array_equal(A.col_starts, (np.arange(size + 1) * 41) // size)
    ref = scipy_csr(R, C, V, (23, 41))
    same_as_scipy(A, ref, "rect")
    product_ok(A, ref, "rect")
    passed("assemble-rect-dtype-agreed")
    # every rank passes the same triples: each entry is size times the serial one
    A = stmpi.assemble([0, 5, 5, 2], [1, 5, 5, 0], np.array([1, 2, 3, 4], dtype=np.int64), (6, 6), comm)
    d = np.zeros((6, 6), dtype=np.int64)
    d[0, 1], d[5, 5], d[2, 0] = size, 5 * size, 4 * size
    assert A.dtype == np.int64 and np.array_equal(dense_of(A), d)
    passed("assemble-int-values")
    # insert mode: the last entry wins, by rank order then position
    parts, (R, C, V) = all_triples((12, 12), [25] * size, 4, np.float64, np.int64)
    A = stmpi.assemble(*parts[rank], (12, 12), comm, mode="insert")
    assert np.array_equal(dense_of(A), last_wins(R, C, V, (12, 12)))
    A = stmpi.assemble(*parts[rank], (12, 12), comm, mode="insert", row_starts=starts_with_empty_rank(12))
    assert np.array_equal(dense_of(A), last_wins(R, C, V, (12, 12)))
    passed("assemble-insert")
    # vectors
    for starts in (None, starts_with_empty_rank(29)):
        parts, (R, _, V) = all_triples((29, 1), [0 if q == 1 else 33 for q in range(size)], 5, np.complex128,
                                       np.int32)
        mine = ([], []) if rank == 1 else (parts[rank][0], parts[rank][2])
        b = stmpi.assemble_vector(*mine, 29, comm, row_starts=starts)
        want = np.zeros(29, np.complex128)
        np.add.at(want, R, V)
        s = (np.arange(size + 1) * 29) // size if starts is None else starts
        assert b.dtype == np.complex128 and np.array_equal(b, want[s[rank]:s[rank + 1]])
        b = stmpi.assemble_vector(*mine, 29, comm, row_starts=starts, mode="insert")
        assert np.array_equal(b, last_wins(R, np.zeros_like(R), V, (29, 1))[s[rank]:s[rank + 1], 0])
    passed("assemble-vector")
    # from_local: the parts' rows must be this rank's share
    t = random_matrix(29, 29, 0.15, 11, hub=20)
    s = starts_with_empty_rank(29)
    A = stmpi.DistCSR.from_local(st.from_dense(t.to_dense()[s[rank]:s[rank + 1]]), comm=comm, row_starts=s)
    assert np.array_equal(A.row_starts, s) and np.array_equal(dense_of(A), t.to_dense())
    passed("from-local-row-starts")


def suite_ops(tmp):
    d = random_matrix(30, 30, 0.2, 21, hub=4).to_dense()
    d2 = random_matrix(30, 30, 0.2, 22, hub=9).to_dense()
    for starts, cstarts in ((None, None), (starts_with_empty_rank(30), (np.arange(size + 1) * 30) // size)):
        kw = {} if starts is None else {"row_starts": starts, "col_starts": cstarts}
        A = stmpi.DistCSR.from_global(st.from_dense(d) if rank == 0 else None, comm=comm, **kw)
        B = stmpi.DistCSR.from_global(st.from_dense(d2) if rank == 0 else None, comm=comm,
                                      row_starts=A.row_starts, col_starts=A.col_starts)
        assert np.array_equal(dense_of(A + B), d + d2) and np.array_equal(dense_of(A - B), d - d2)
        assert np.array_equal(dense_of(2.5 * A), 2.5 * d) and np.array_equal(dense_of(A * -2), -2 * d)
        assert np.array_equal(dense_of(-A), -d)
        Z = (1j * A)
        assert Z.dtype == np.complex128 and np.array_equal(dense_of(Z.conj()), -1j * d)
        T = A.T
        assert np.array_equal(dense_of(T), d.T) and np.array_equal(dense_of(Z.transpose()), 1j * d.T)
        r0, r1 = A.row_range
        assert np.array_equal(T @ np.arange(30.0)[r0:r1], (d.T @ np.arange(30.0))[slice(*T.row_range)])
        # zero_rows: each rank passes some rows, owned or not, some twice
        C = A.copy()
        mine = np.array([rank % 30, (7 * rank + 3) % 30, 29, 29, 0])
        Zr = sorted({v for q in range(size) for v in (q % 30, (7 * q + 3) % 30, 29, 0)})
        x = np.arange(r0, r1, dtype=np.float64) + 1
        b = np.ones(r1 - r0)
        C.zero_rows(mine, diag=3.0, x=x, b=b)
        want = d.copy()
        want[Zr] = 0
        want[Zr, Zr] = 3.0
        assert np.array_equal(dense_of(C), want), "zero_rows"
        bw = np.ones(30)
        bw[Zr] = 3.0 * (np.arange(30.0)[Zr] + 1)
        assert np.array_equal(b, bw[r0:r1])
        assert np.array_equal(dense_of(A), d)  # the copy was changed, not A
        product_ok(C, sp.csr_matrix(want), "zero_rows product")
        C.zero_rows([] if rank else [1, 2], diag=0)
        want[[1, 2]] = 0
        assert np.array_equal(dense_of(C), want), "zero_rows diag=0"
    # transpose of a rectangular matrix whose columns are split differently, with an empty rank
    r = random_matrix(23, 37, 0.15, 5, np.complex128, np.int32)
    A = stmpi.DistCSR.from_global(r if rank == 0 else None, comm=comm, col_starts=starts_with_empty_rank(37))
    T = A.T
    assert T.shape == (37, 23) and T.index_dtype == np.int32 and np.array_equal(T.row_starts, A.col_starts)
    assert np.array_equal(dense_of(T), r.to_dense().T) and np.array_equal(dense_of(T.T), r.to_dense())
    # the diagonal where the columns are split unlike the rows: an entry can sit among the ghosts
    # (it was missed: jacobi raised "a zero on its diagonal" for a tridiagonal matrix)
    q = st.from_dense(np.diag(np.arange(1.0, 13.0)) - np.eye(12, k=1) - np.eye(12, k=-1))
    cs = (np.arange(size + 1) * 12) // size
    cs[1:-1] += 1
    Q = stmpi.DistCSR.from_global(q if rank == 0 else None, comm=comm, col_starts=cs)
    assert np.array_equal(Q.diagonal(), np.arange(1.0, 13.0)[slice(*Q.row_range)]), "diagonal with a column split"
    passed("ops-sum-scale-transpose")
    passed("ops-zero-rows")


def expect(tmp, case, etype, fn, *contains):
    """``fn()`` must raise ``etype`` on this rank (every rank calls this): recorded to raised.RANK.txt."""
    try:
        fn()
    except etype as e:
        for s in contains:
            assert s in str(e), (case, s, str(e))
        raised(tmp, case, e)
    else:
        raise AssertionError(f"{case}: did not raise on rank {rank}")
    comm.Barrier()


def suite_errors(tmp):
    last = size - 1
    bad = rank == last
    shape = (20, 20)
    r, c, v = triples_of(rank, shape, 12, 9)

    def with_(**change):
        args = {"rows": r, "cols": c, "values": v, "shape": shape}
        if bad:
            args.update(change)
        return lambda: stmpi.assemble(args["rows"], args["cols"], args["values"], args["shape"], comm,
                                      mode=args.get("mode", "add"))

    rows_bad = r.copy()
    rows_bad[5] = 23
    expect(tmp, "row-out-of-range", ValueError, with_(rows=rows_bad), f"rank {last}", "global row 23", "entry 5")
    cols_bad = c.copy()
    cols_bad[2] = -1
    expect(tmp, "col-out-of-range", ValueError, with_(cols=cols_bad), f"rank {last}",
           f"global row {triples_of(last, shape, 12, 9)[0][2]}",
           "column -1")
    expect(tmp, "lengths", ValueError, with_(cols=c[:-1]), f"rank {last}", "12, 11, 12")
    expect(tmp, "float-indices", TypeError, with_(rows=r.astype(np.float64)), f"rank {last}", "integers")
    expect(tmp, "values-dtype", TypeError, with_(values=v.astype(str)), f"rank {last}", "not supported")
    expect(tmp, "bad-mode", ValueError, with_(mode="replace"), f"rank {last}", "mode")
    expect(tmp, "bad-shape", ValueError, with_(shape=(20, -3)), f"rank {last}", "shape[1]")
    if size > 1:
        expect(tmp, "modes-disagree", ValueError, with_(mode="insert"), "same mode")
        expect(tmp, "shapes-disagree", ValueError, with_(shape=(20, 21)), "same shape")
    expect(tmp, "block", ValueError, lambda: stmpi.assemble(r, c, v, shape, comm, block=(3, 3) if bad else (2, 2)),
           f"rank {last}", "(3, 3) blocks")  # 20 rows are not whole 3 x 3 blocks (DistBSR: test_dist_bsr.py)
    expect(tmp, "vector-row-out-of-range", ValueError,
           lambda: stmpi.assemble_vector([1, 40 if bad else 2], [1.0, 2.0], 20, comm), "global row 40")
    # from_local: a global-shape part on every rank, a part that is not this rank's share, rows out of range
    t = random_matrix(20, 20, 0.2, 3)
    if size > 1:
        expect(tmp, "from-local-global-shape", ValueError, lambda: stmpi.DistCSR.from_local(t, comm=comm),
               "assemble", f"{20 * size} x 20")
    s = (np.arange(size + 1) * 20) // size
    part = st.from_dense(t.to_dense()[s[rank]:s[rank + 1]])
    s_bad = s.copy()
    s_bad[-1] -= 1  # the last rank's share is one row short of its part
    expect(tmp, "from-local-row-starts", ValueError,
           lambda: stmpi.DistCSR.from_local(part, comm=comm, row_starts=s_bad), "assemble", "row_starts gives it")
    nloc = s[rank + 1] - s[rank]
    coo = st.sparse_coo_tensor([[nloc + 2 if bad else 0], [1]], [1.0], size=(nloc if nloc else 1, 20),
                               check_invariants=False)
    expect(tmp, "from-local-coo-rows", st.InvariantError, lambda: stmpi.DistCSR.from_local(coo, comm=comm),
           "sparsetensor.mpi.assemble")
    # operations
    A = stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm)
    expect(tmp, "zero-rows-out-of-range", ValueError, lambda: A.zero_rows([20] if bad else [1]), "global row 20")
    expect(tmp, "zero-rows-x-without-b", ValueError,
           lambda: A.zero_rows([1], x=np.ones(A.row_range[1] - A.row_range[0])), "both x and b")
    S = stmpi.DistCSR.from_global(st.stencil((4, 5)) if rank == 0 else None, comm=comm)  # ilu0 factors it
    expect(tmp, "block-jacobi-local", ValueError, lambda: stmpi.block_jacobi(S, "ilu" if bad else "ilu0"),
           "local must be one of")
    # found by a fuzz of one rank's arguments: each hung the other ranks, or gave this rank another answer
    expect(tmp, "cols-none", TypeError, with_(cols=None), f"rank {last}", "cols must be")
    nl = A.row_range[1] - A.row_range[0]
    expect(tmp, "zero-rows-b-int", TypeError,  # b[i] = 0.5 * 1 became 0 in an integer b
           lambda: A.zero_rows([1], x=np.full(nl, 0.5), b=np.zeros(nl, np.int64 if bad else np.float64)),
           f"rank {last}", "cannot hold")
    expect(tmp, "gather-part", ValueError, lambda: A.gather(np.ones(nl), part="zzz" if bad else "rows"), "part")
    expect(tmp, "root-out-of-range", ValueError, lambda: A.gather(np.ones(nl), root=size), "root must be a rank")
    if size > 1:
        B = stmpi.DistCSR.from_global(t if rank == 0 else None, comm=comm, row_starts=starts_with_empty_rank(20))
        expect(tmp, "sum-partitions", ValueError, lambda: A + B, "partitions differ")
        expect(tmp, "alpha-disagree", ValueError, lambda: (2.0 + bad) * A, "same alpha")
        A32 = stmpi.DistCSR.from_global(t.astype(np.float32) if rank == 0 else None, comm=comm)
        expect(tmp, "alpha-dtype-disagree", ValueError, lambda: (np.float64(2.0) if bad else 2.0) * A32,
               "same result dtype")  # float32 values on some ranks, float64 on the last
        for what in ("gather", "to_global", "scatter"):
            call = {"gather": lambda: A.gather(np.ones(A.row_range[1] - A.row_range[0]), root=int(bad)),
                    "to_global": lambda: A.to_global(root=int(bad)),
                    "scatter": lambda: A.scatter(np.ones(20), root=int(bad))}[what]
            expect(tmp, f"{what}-root-disagree", ValueError, call, "same root")
        # a complex slice on one rank: MPI aborted (buffers of different types); now complex on every rank
        d = stmpi.dot(comm, np.ones(3, dtype=np.complex128 if bad else np.float64), np.ones(3))
        assert np.iscomplexobj(d) and d == 3 * size, ("dot of mixed slices", d)
        x = np.arange(20, dtype=np.float64)[slice(*A.col_range)]
        y = A @ (x.astype(">f8") if bad else x)  # big-endian on the last rank: its ghosts went as raw bytes
        assert np.allclose(np.concatenate(comm.allgather(y)), t.to_dense() @ np.arange(20.0)), "byte order"
        y = A @ (x.astype(np.int64) if bad else x.astype(np.longlong))  # one dtype under two names: not refused
        assert np.allclose(np.concatenate(comm.allgather(y)), t.to_dense() @ np.arange(20.0)), "int64 as 'q' and 'l'"
        # from a fuzz at 3-4 ranks: a float32 sum on one rank and float64 elsewhere; a big-endian slice to
        # gather (refused as another dtype); a save or load path that differs by rank (a hang; a matrix of
        # two files)
        d = stmpi.dot(comm, np.ones(3, np.float32 if bad else np.float64), np.ones(3))
        assert comm.allgather(type(d)) == [np.float64] * size and d == 3 * size, ("dot of mixed precisions", d)
        xr = np.arange(20.0)[slice(*A.row_range)]
        g = A.gather(xr.astype(">f8") if bad else xr)
        assert rank != 0 or np.array_equal(g, np.arange(20.0)), ("gather of a big-endian slice", g)
        expect(tmp, "save-path-disagree", ValueError,
               lambda: stmpi.save(os.path.join(tmp, "other" if bad else "a.npz"), A), "same path")
        stmpi.save(os.path.join(tmp, "a.npz"), A)
        stmpi.save(os.path.join(tmp, "b.npz"), 2.0 * A)
        expect(tmp, "load-path-disagree", ValueError,
               lambda: stmpi.load(os.path.join(tmp, "b.npz" if bad else "a.npz"), comm=comm), "same path")
    if rank == 0:
        print("DONE", flush=True)


def suite_doctest(tmp):
    import doctest
    import importlib

    for mod in ("sparsetensor.mpi._assemble", "sparsetensor.mpi._ops"):
        r = doctest.testmod(importlib.import_module(mod), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert r.failed == 0 and r.attempted > 0, (mod, r)
    passed("doctests-assembly")


def suite_all(tmp):
    for suite in (suite_assemble, suite_ops, suite_errors) + ((suite_doctest,) if size == 2 else ()):
        suite(tmp)


SUITES = {"assemble": suite_assemble, "ops": suite_ops, "errors": suite_errors, "doctest": suite_doctest,
          "all": suite_all}

if __name__ == "__main__":
    SUITES[sys.argv[1]](sys.argv[2])
