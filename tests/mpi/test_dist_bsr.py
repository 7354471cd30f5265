"""sparsetensor.mpi.DistBSR on 1-3 MPI ranks: tests/mpi/worker_bsr.py under mpiexec, checked against NumPy/SciPy.

One launch per rank count runs every suite (``worker_bsr.py all``); the worker checks each
rank's part against the whole matrix's NumPy/SciPy result and prints ``PASS name`` per case.
Block sizes 1x1, 2x2, 3x3 and 2x3 (non-square: everything but the PETSc bridge and the
diagonal blocks); int32/int64 indices; float64 and complex128 (float32 for the products).
The PETSc cases need petsc4py: without it they skip, as test_petsc.py's do.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_mpi import launches, mpiexec  # noqa: F401  (the fixture: how to launch, or skip)

WORKER = Path(__file__).with_name("worker_bsr.py")
RANKS = [1, 2, 3, 4]
BLOCKS = ["1x1", "2x2", "3x3", "2x3"]
HAVE_PETSC = importlib.util.find_spec("petsc4py") is not None


@pytest.fixture(scope="module")
def launched(mpiexec, tmp_path_factory):  # noqa: F811
    return launches(mpiexec, tmp_path_factory, WORKER, "bsr")


def _passed(out: str) -> set:
    return {line.split()[1] for line in out.splitlines() if line.startswith("PASS ")}


@pytest.mark.parametrize("n", RANKS)
def test_products_and_conversions(launched, n):
    """from_global (BSR and CSR input, balanced and given partitions with an empty rank), from_local, A @ x,
    A @ X, A^T x, A^H x, the bytes of the exchange, the operator wrapper, gather, to_global (the same stored
    blocks), to_csr/from_csr: every block size, index dtype and value dtype."""
    got = _passed(launched(n)[0])
    want = {f"products-{b}-{i}-{v}" for b in BLOCKS for i in ("int32", "int64")
            for v in ("float64", "complex128", "float32")}
    assert want <= got, sorted(want - got)


@pytest.mark.parametrize("n", RANKS)
def test_ops_exact(launched, n):
    """2 * A, -A, conj, A + A, A - B (the union of the blocks), A.T (c x r blocks), A + DistCSR, A @ B,
    the point and block diagonals, zero_rows with the right-hand-side fix: exact on integer-valued entries."""
    got = _passed(launched(n)[0])
    want = {f"ops-{b}-{i}-{v}" for b in BLOCKS for i in ("int32", "int64") for v in ("float64", "complex128")}
    assert want <= got, sorted(want - got)


@pytest.mark.parametrize("n", RANKS)
def test_krylov_iterates_equal_scipy(launched, n):
    """cg, minres, gmres(restart), bicgstab on DistBSR, plain and with jacobi (point diagonal), block_jacobi
    (splu of each rank's diagonal block) and point_block_jacobi (PCPBJACOBI): SciPy's iterates and counts
    on the gathered matrix."""
    got = _passed(launched(n)[0])
    want = {f"{k}-{b}-{v}" for k in ("cg", "gmres-bicgstab") for b in ("1x1", "2x2", "3x3")
            for v in ("float64", "complex128", "float32")}
    assert want <= got, sorted(want - got)


@pytest.mark.parametrize("n", RANKS)
def test_assemble_block(launched, n):
    """assemble(..., block=(r, c)) from scalar triples on every rank (off-process, duplicates, add and insert):
    SciPy's sum exactly, every touched block stored whole, block-aligned partitions."""
    got = _passed(launched(n)[0])
    assert {f"assemble-{b}" for b in BLOCKS} <= got


@pytest.mark.parametrize("n", RANKS)
def test_save_load_other_rank_counts(launched, n):
    """save/load of a DistBSR on the same ranks and on all ranks from a save by one rank fewer."""
    got = _passed(launched(n)[0])
    assert {"save-load-2x2", "save-load-3x3", "save-load-2x3"} <= got


@pytest.mark.skipif(not HAVE_PETSC, reason='petsc4py is not installed (pip install "sparsetensor[petsc]")')
@pytest.mark.parametrize("n", RANKS)
def test_petsc_baij(launched, n):
    """to_petsc: MPIBAIJ (SEQBAIJ on one rank) with our ranges and block size, the same entries and MatMult,
    copied (PETSc's scale leaves us alone); from_petsc gives the blocks back; solve with pbjacobi."""
    got = _passed(launched(n)[0])
    want = {f"petsc-{b}-{i}" for b in ("1x1", "2x2", "3x3") for i in ("int32", "int64")}
    assert want <= got, sorted(want - got)


ERRORS = {"x-shape-on-last-rank": "ValueError", "csr-without-blocksize": "ValueError",
          "shape-not-whole-blocks": "ValueError", "assemble-shape": "ValueError",
          "assemble-out-of-range-on-last-rank": "ValueError", "diagonal-blocks-not-square": "NotImplementedError",
          "pbjacobi-singular-block": "LinAlgError"}
ERRORS_SEVERAL = {"row-starts-inside-a-block": "ValueError", "from-local-blocksize-on-last-rank": "ValueError",
                  "sum-partitions-differ": "ValueError", "from-csr-unaligned": "ValueError",
                  "load-unaligned-row-starts": "ValueError", "from-csr-blocksize-on-last-rank": "ValueError",
                  "from-global-blocksize-on-last-rank": "ValueError"}
ERRORS_PETSC = {"petsc-non-square-blocks": "NotImplementedError", "petsc-aij-to-distbsr": "TypeError"}


@pytest.mark.parametrize("n", RANKS)
def test_errors_raise_on_every_rank(launched, n):
    """Partitions inside a block, a bad operand or part on the last rank only, shapes that are not whole
    blocks, non-square blocks where they are not supported: every rank raises the same type, none hangs."""
    out, tmp = launched(n)
    assert "errors-raise-on-every-rank" in _passed(out) and "DONE" in out
    want = dict(ERRORS, **(ERRORS_SEVERAL if n > 1 else {}), **(ERRORS_PETSC if HAVE_PETSC else {}))
    for r in range(n):
        got = {}
        for line in (tmp / f"raised.{r}.txt").read_text().splitlines():
            case, etype = line.split("\t")[:2]
            got[case] = etype
        assert got == want, (r, got)


def test_docstring_examples(launched):
    """The examples of sparsetensor.mpi._bsr and _bsr_ops, on 2 ranks."""
    assert "bsr-doctests" in _passed(launched(2)[0])
