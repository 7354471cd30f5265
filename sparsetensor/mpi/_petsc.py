"""The PETSc bridge: :class:`DistCSR` to and from a petsc4py ``Mat``, PETSc vectors over our slices, :func:`solve`.

``A.to_petsc()`` hands PETSc the two blocks a :class:`DistCSR` already holds, in the layout of
PETSc's own MPIAIJ (a diagonal block with local columns, an off-diagonal block over a sorted
list of ghost columns, the same row and column ownership ranges), through
``MatCreateMPIAIJWithSplitArrays``: PETSc keeps pointers to our arrays instead of copying them.
``DistCSR.from_petsc(mat)`` reads a PETSc AIJ matrix back (copies: petsc4py has no view of
PETSc's arrays). :func:`to_petsc_vec` wraps this rank's slice of a vector as a PETSc ``Vec``
without a copy, and :func:`solve` runs any KSP and PC on a :class:`DistCSR` with PETSc options
passed through under a prefix of its own.

petsc4py is imported inside the functions, never by ``import sparsetensor.mpi``.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from .._core._canonical import ensure_valid_export
from .._core._from_arrays import sparse_csr_tensor
from ._comm import agree, same_on_every_rank
from ._matrix import DistCSR

__all__ = ["from_petsc", "solve", "to_petsc", "to_petsc_vec"]

_INSTALL = 'pip install "sparsetensor[petsc]"'
_prefixes = itertools.count()


def _import_petsc():
    try:
        from petsc4py import PETSc
    except ImportError as e:
        raise ImportError(f"the PETSc bridge of sparsetensor.mpi needs petsc4py, on a PETSc built with the MPI that "
                          f"mpi4py uses: {_INSTALL} (see the PETSc section of the MPI guide for a build recipe); "
                          f"importing it failed: {e}") from None
    return PETSc


def _petsc(comm):
    """petsc4py's ``PETSc`` module on every rank, or an ImportError on every rank (collective)."""
    return agree(comm, _import_petsc)


def _scalar_dtype(PETSc, dtype, where: str, values=()) -> np.dtype:
    """PETSc's scalar dtype, when ``dtype`` converts to it exactly; else a TypeError naming both.

    NumPy calls int64 -> float64 safe, but integers beyond 2**53 round: the arrays ``values`` of
    such a dtype are checked to lie within the float's exact integers."""
    want = np.dtype(PETSc.ScalarType)
    got = np.dtype(dtype)
    if got == want or np.can_cast(got, want, "safe"):
        exact = 2 ** (np.finfo(want).nmant + 1)
        if got.kind in "iu" and np.iinfo(got).max > exact:
            for v in values:
                if v.size and max(int(v.max()), -int(v.min())) > exact:
                    raise TypeError(f"{where}: {got} values up to {max(int(v.max()), -int(v.min()))} do not convert "
                                    f"exactly to this PETSc's scalar type {want} (PETSc.ScalarType; integers up to "
                                    f"2**{np.finfo(want).nmant + 1} do)")
        return want
    extra = (" (a complex matrix needs a PETSc configured --with-scalar-type=complex)"
             if got.kind == "c" and want.kind != "c" else "")
    raise TypeError(f"{where}: values of dtype {got} do not convert exactly to this PETSc's scalar type "
                    f"{want} (PETSc.ScalarType){extra}")


def _index_dtype(PETSc, dims, nnz: int, where: str) -> np.dtype:
    """PETSc's index dtype (``PETSc.IntType``), after checking that the sizes fit it."""
    want = np.dtype(PETSc.IntType)
    big = max([int(d) for d in dims] + [int(nnz)])
    if big > np.iinfo(want).max:
        raise ValueError(f"{where}: a size or entry count of {big} does not fit this PETSc's index type {want} "
                         f"(PETSc.IntType); it needs a PETSc configured --with-64-bit-indices")
    return want


def _shared(a: np.ndarray, dtype: np.dtype, *, written: bool) -> np.ndarray:
    """``a`` itself when PETSc can point at it, else a converted copy.

    It can when the dtype is PETSc's and ``a`` is contiguous, and, for arrays that PETSc may
    write (``written``: the values), writable. Our index arrays are read-only NumPy views
    (checked once, never changed); PETSc only reads them (see :func:`to_petsc`).
    """
    if a.dtype == dtype and a.flags.c_contiguous and (a.flags.writeable or not written):
        return a
    return np.array(a, dtype=dtype, order="C", copy=True)


# -- DistCSR -> Mat ---------------------------------------------------------------------------
def to_petsc(self: DistCSR):
    """This matrix as a petsc4py ``Mat`` of type AIJ that shares our arrays where PETSc allows it (collective).

    On two or more ranks the result is a ``MATMPIAIJ`` with our row and column ownership
    ranges (:attr:`row_starts`, :attr:`col_starts`); on one rank PETSc's AIJ is a
    ``MATSEQAIJ`` (what ``MatCreateAIJ`` makes on one process). It is built with
    ``MatCreateMPIAIJWithSplitArrays`` (``MatCreateSeqAIJWithArrays`` on one rank), which
    takes the two blocks PETSc's MPIAIJ stores, without copying them:

    - **shared**: the diagonal block's row pointers, column indices (local, as PETSc's
      diagonal block numbers them) and values, and the off-diagonal block's row pointers
      and values. PETSc writes the values: ``P.scale(2)`` or ``P.zeroRows(rows)`` change
      this matrix too, and a change of our values in place is seen by PETSc (call
      ``P.assemble()`` after one so that PETSc's preconditioners know). PETSc only reads
      the index arrays, which are read-only for us too: the ``Mat`` is made with
      ``MAT_KEEP_NONZERO_PATTERN`` (``MatZeroRows`` stores zeros instead of dropping
      entries) and ``MAT_NEW_NONZERO_LOCATION_ERR``, so that no PETSc operation changes
      its pattern in place. Do not turn those off, nor call ``MatEliminateZeros`` or
      ``MatFilter`` on it: they would rewrite our index arrays; use
      ``P.duplicate(copy=True)``, a ``Mat`` of PETSc's own, for that.
    - **copied**: the off-diagonal block's column indices, one PETSc index per
      off-diagonal entry. PETSc takes them as *global* columns and renumbers them in
      place into positions in its ghost list (``garray``); our block stores those
      positions already, in the same sorted order, but PETSc offers no way to hand it
      the positions and the ghost list directly (``MatCreateMPIAIJWithSeqAIJ`` would, and
      petsc4py does not wrap it). PETSc's ghost list (``garray``, one index per ghost)
      and its scatter plan are its own.
    - **converted copies** instead of shared arrays: indices whose dtype is not
      ``PETSc.IntType`` (int32 unless PETSc was configured ``--with-64-bit-indices``),
      values whose dtype is not ``PETSc.ScalarType`` (converted when exact: bool,
      integers, float32 to float64; a complex matrix on a real PETSc raises
      ``TypeError``), and read-only values (a matrix whose values map a file opened
      read-only: PETSc may write its values).

    petsc4py keeps the arrays alive as long as the ``Mat``. :meth:`zero_rows` (in place, a
    new pattern) gives this matrix new arrays: a ``Mat`` made before keeps the old ones. The ``Mat`` lives on :attr:`comm`; every rank must call this. See
    :func:`sparsetensor.mpi.solve` for an example.

    Returns
    -------
    petsc4py.PETSc.Mat
        Assembled; new nonzero locations raise in PETSc (``MAT_NEW_NONZERO_LOCATION_ERR``).

    Raises
    ------
    ImportError
        On every rank, without petsc4py (``pip install "sparsetensor[petsc]"``).
    TypeError
        On every rank, for values that do not convert exactly to ``PETSc.ScalarType``.
    """
    PETSc = _petsc(self._comm)
    m, n = self._r1 - self._r0, self._c1 - self._c0
    d, o = self._diag, self._offd

    def arrays():
        where = f"DistCSR.to_petsc (rank {self._comm.rank})"
        # PETSc reads the index arrays as they are: a part sharing arrays its caller may have written
        # since the check (from_local takes them without a copy) is checked again, on every rank
        for part in (d, o):
            ensure_valid_export(part, private=False)
        sdt = _scalar_dtype(PETSc, self._dtype, where, (d.values(), o.values()))
        idt = _index_dtype(PETSc, self._shape, max(d.nnz, o.nnz), where)
        diag = (_shared(d.crow_indices(), idt, written=False), _shared(d.col_indices(), idt, written=False),
                _shared(d.values(), sdt, written=True))
        # PETSc's split constructor wants global off-diagonal columns, and renumbers them in place
        offd = (_shared(o.crow_indices(), idt, written=False), self._ghosts.astype(idt)[o.col_indices()],
                _shared(o.values(), sdt, written=True))
        return diag, offd

    diag, offd = agree(self._comm, arrays)
    size = ((m, self._shape[0]), (n, self._shape[1]))
    csr = diag if self._comm.size == 1 else (diag, offd)  # petsc4py: split arrays -> MatCreateMPIAIJWithSplitArrays
    mat = PETSc.Mat().createAIJWithArrays(size, csr, comm=self._user_comm)
    # PETSc never changes the pattern of this Mat in place (it would rewrite our index arrays):
    # MatZeroRows zeroes values instead of dropping entries; a new nonzero location raises.
    mat.setOption(PETSc.Mat.Option.KEEP_NONZERO_PATTERN, True)
    mat.setOption(PETSc.Mat.Option.NEW_NONZERO_LOCATION_ERR, True)
    return mat


# -- Mat -> DistCSR ---------------------------------------------------------------------------
def from_petsc(cls, mat, comm=None, exchange: str = "p2p") -> DistCSR:
    """A :class:`DistCSR` from an assembled petsc4py AIJ ``Mat`` (collective; copies).

    ``mat`` must be ``MATMPIAIJ`` (or ``MATSEQAIJ`` on a one-process communicator, PETSc's
    AIJ there; variants such as ``mpiaijcusparse`` are read through ``MatGetRow``). The
    result has ``mat``'s row and column ownership ranges, ``PETSc.ScalarType`` values and
    ``PETSc.IntType`` indices, and lives on ``mat``'s communicator (``COMM_WORLD`` where ``mat``'s
    spans the same processes) unless ``comm`` (the same processes) is given.

    Everything is copied: petsc4py reads an AIJ matrix only through ``MatGetRow``
    (``Mat.getValuesCSR``), which copies each rank's rows with global columns; they are
    checked and split into our blocks as :meth:`from_local` does.

    Raises
    ------
    TypeError
        On every rank, when ``mat`` is not a petsc4py ``Mat`` of an AIJ type (a dense or
        BAIJ matrix: convert it with ``mat.convert("aij")``).
    ValueError
        On every rank, when ``mat`` is not assembled.
    """
    if comm is None:
        comm = comm_of(mat) if _is_mat(mat) else _world()

    def check_kind(kind, procs):
        if not (kind.startswith("mpiaij") or (kind.startswith("seqaij") and procs == 1)):
            raise TypeError(f"DistCSR.from_petsc: expected an AIJ matrix (MATMPIAIJ, or MATSEQAIJ on one process), "
                            f"got a Mat of type {kind!r} on {procs} process(es); convert it first: mat.convert('aij')")

    return read_rows(mat, comm, "DistCSR.from_petsc", check_kind, exchange)[0]


def read_rows(mat, comm, where: str, check_kind, exchange: str = "p2p") -> tuple:
    """(``mat``'s rows as a :class:`DistCSR` with its ownership ranges, its block size), collective; copies
    through ``MatGetRow``.

    ``check_kind(type, processes)`` raises for a ``Mat`` type the caller does not take; every
    error raises on every rank.
    """
    PETSc = _petsc(comm)

    def read():
        if not isinstance(mat, PETSc.Mat):
            raise TypeError(f"{where}: expected a petsc4py PETSc.Mat, got {type(mat).__name__}")
        procs = mat.getComm().getSize()
        if procs != comm.size:
            raise ValueError(f"{where}: the Mat lives on {procs} processes, comm has {comm.size}")
        check_kind(mat.getType(), procs)
        if not mat.assembled:
            raise ValueError(f"{where}: the Mat is not assembled (call mat.assemble() first)")
        ai, aj, av = mat.getValuesCSR()
        m, ncols = mat.getLocalSize()[0], mat.getSize()[1]
        return sparse_csr_tensor(ai, aj, av, size=(m, ncols), check_invariants=False), mat.getBlockSize()

    t, bs = agree(comm, read)
    rows = np.asarray(mat.getOwnershipRanges(), dtype=np.int64)
    cols = np.asarray(mat.getOwnershipRangesColumn(), dtype=np.int64)
    return DistCSR.from_local(t, comm, col_starts=cols, exchange=exchange, row_starts=rows), bs


def _is_mat(obj) -> bool:
    """Whether ``obj`` is a petsc4py ``Mat``, without importing petsc4py."""
    return type(obj).__module__.startswith("petsc4py") and hasattr(obj, "getValuesCSR")


def _world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def comm_of(mat):
    """The communicator a ``Mat``'s ranks work on when none is given: ``COMM_WORLD`` where the
    ``Mat`` spans the same processes (PETSc's communicator is a duplicate of it), so that a rank
    that passed something else, which can only take ``COMM_WORLD``, meets the others in the same
    collectives and raises with them instead of leaving them waiting; else the ``Mat``'s own."""
    from mpi4py import MPI

    c = mat.getComm().tompi4py()
    return MPI.COMM_WORLD if MPI.Comm.Compare(c, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT) else c


# -- vectors ----------------------------------------------------------------------------------
def to_petsc_vec(A, x, part: str = "rows", *, copy: bool = False):
    """A PETSc ``Vec`` over this rank's slice ``x`` of a vector distributed like ``A`` (collective).

    The ``Vec`` points at ``x``'s memory (``VecCreateMPIWithArray``; ``VecCreateSeqWithArray``
    on one rank): what PETSc writes into it (a solution, ``y`` of ``P.mult(x, y)``) is in
    ``x``, and ``vec.getArray()`` is a view of ``x`` again. petsc4py keeps ``x`` alive as
    long as the ``Vec``.

    Parameters
    ----------
    A : DistCSR
        The partition: ``part="rows"`` lays the ``Vec`` out like ``A``'s rows (``A @ x``'s
        result, ``b`` of a solve), ``"cols"`` like its columns (``A @ x``'s operand).
    x : numpy.ndarray
        1-d, this rank's entries of that partition, of dtype ``PETSc.ScalarType``, contiguous.
    copy : bool
        ``False`` (default): refuse an ``x`` that PETSc cannot point at; ``True``: convert
        such an ``x`` (the ``Vec`` then owns a copy, and PETSc's writes do not reach ``x``).

    Raises
    ------
    TypeError
        On every rank, when some rank's ``x`` is not of ``PETSc.ScalarType`` (and ``copy`` is False).
    ValueError
        On every rank, when some rank's ``x`` has the wrong shape or is not contiguous
        (and ``copy`` is False).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from petsc4py import PETSc
    >>> from sparsetensor import mpi as stmpi
    >>> from mpi4py import MPI
    >>> A = stmpi.DistCSR.from_global(st.stencil((4, 4)) if MPI.COMM_WORLD.rank == 0 else None)
    >>> r0, r1 = A.row_range
    >>> x, y = np.ones(r1 - r0), np.zeros(r1 - r0)
    >>> A.to_petsc().mult(stmpi.to_petsc_vec(A, x), stmpi.to_petsc_vec(A, y))   # PETSc writes into y
    >>> bool(np.array_equal(y, A @ x))
    True
    """
    comm = A._comm
    PETSc = _petsc(comm)
    same_on_every_rank(comm, "to_petsc_vec", part=part, copy=copy)  # one Vec: one global size
    starts = A._starts(part)
    lo, hi = int(starts[comm.rank]), int(starts[comm.rank + 1])

    def check():
        a = np.asarray(x)
        want = np.dtype(PETSc.ScalarType)
        if a.shape != (hi - lo,):
            raise ValueError(f"to_petsc_vec: rank {comm.rank} expects this rank's {hi - lo} entries (1-d) of the "
                             f"{part} partition, got shape {a.shape}")
        if copy:
            return np.array(a, dtype=_scalar_dtype(PETSc, a.dtype, "to_petsc_vec", (a,)), copy=True)
        if a.dtype != want:
            raise TypeError(f"to_petsc_vec: rank {comm.rank}'s slice has dtype {a.dtype}, this PETSc's scalar type "
                            f"is {want} (PETSc.ScalarType); convert it (a copy) or pass copy=True")
        if not a.flags.c_contiguous:
            raise ValueError(f"to_petsc_vec: rank {comm.rank}'s slice is not contiguous, so PETSc cannot use its "
                             f"memory; pass np.ascontiguousarray(x) (a copy) or copy=True")
        return a

    a = agree(comm, check)
    return PETSc.Vec().createWithArray(a, size=(hi - lo, int(starts[-1])), comm=A._user_comm)


# -- solve ------------------------------------------------------------------------------------
def _reason_names(PETSc) -> dict:
    names = {}
    for k, v in vars(PETSc.KSP.ConvergedReason).items():  # the first of two aliases wins (CONVERGED_ITERATING)
        if isinstance(v, int) and k.isupper():
            names.setdefault(v, k)
    return names


_DIAGONAL_PCS = ("sor", "eisenstat")  # preconditioners that divide by the diagonal, one rank at a time


def _nonzero_diagonal(mat, pc_type: str) -> None:
    """ValueError naming the first of this rank's rows of ``mat`` whose diagonal entry is zero or missing."""
    d = mat.getDiagonal()
    try:
        zero = np.flatnonzero(d.getArray() == 0)
    finally:
        d.destroy()
    if zero.size:
        r0 = mat.getOwnershipRange()[0]
        raise ValueError(f"solve: pc={pc_type!r} needs a nonzero diagonal, and row {r0 + int(zero[0])} of A has a zero "
                         f"or no diagonal entry ({zero.size} such rows on this rank); pick another preconditioner "
                         "(e.g. pc='bjacobi' with sub_pc_type='lu', or 'jacobi')")


def _no_zero_rows(A: DistCSR, pc_type: str) -> None:
    """ValueError naming the first of this rank's rows of ``A`` that hold no nonzero."""
    size = np.asarray(A.diag_block.abs().sum(1)) + np.asarray(A.offdiag_block.abs().sum(1))
    rows = A.row_range[0] + np.flatnonzero(size.reshape(-1) == 0)
    if rows.size:
        raise ValueError(f"solve: pc={pc_type!r} fails on a row of zeros, and row {int(rows[0])} of A holds no "
                         f"nonzero ({rows.size} such rows on this rank): A is singular; pick another preconditioner "
                         "or fix the row")


def solve(A, b, ksp: str | None = "gmres", pc: str | None = "gamg", *, rtol: float | None = 1e-5,
          atol: float | None = None, maxiter: int | None = None, x0=None, prefix: str | None = None,
          stats: dict | None = None, **options):
    """Solve ``A x = b`` with PETSc's KSP ``ksp`` and preconditioner ``pc`` (collective).

    ``A`` goes to PETSc through :meth:`DistCSR.to_petsc` (sharing its arrays), ``b`` and the
    solution through :func:`to_petsc_vec` (PETSc writes the solution into the array this
    function returns). Every other PETSc option passes through: ``solve(A, b, "cg",
    "bjacobi", sub_pc_type="icc", ksp_monitor=None)`` sets ``-<prefix>sub_pc_type icc`` and
    the flag ``-<prefix>ksp_monitor`` for this solve only. The options are set under a
    prefix of this call's own (or ``prefix``), read by ``KSPSetFromOptions`` after the
    arguments (so an option such as ``ksp_type`` overrides ``ksp``), and removed again
    afterwards (an earlier value of the same name is restored): they do not leak into
    later solves.

    The stopping test is PETSc's, not SciPy's: ``rtol`` and ``atol`` bound the residual
    norm PETSc monitors, by default the *preconditioned* one for left-preconditioned
    methods (GMRES, CG); pass ``ksp_norm_type="unpreconditioned"`` (with
    ``ksp_pc_side="right"`` for GMRES) to test ``||b - A x||`` as SciPy does.

    Parameters
    ----------
    A : DistCSR or petsc4py.PETSc.Mat
        Square. A ``DistCSR`` is wrapped for this call (its arrays shared, see
        :meth:`DistCSR.to_petsc`); pass ``A.to_petsc()`` yourself to keep one ``Mat``
        over several solves (PETSc then reuses nothing of the preconditioner between
        calls either: the KSP is this call's own).
    b : numpy.ndarray
        This rank's slice of the right-hand side (``A.row_range``), shape ``(n,)`` or ``(n, 1)``;
        converted to ``PETSc.ScalarType`` when exact (a copy then), never written.
    ksp, pc : str or None
        PETSc's KSP and PC type names (``"cg"``, ``"gmres"``, ``"bcgs"``, ``"preonly"``;
        ``"gamg"``, ``"bjacobi"``, ``"jacobi"``, ``"ilu"``, ``"hypre"`` where PETSc has it,
        ``"none"``); None: PETSc's default.
    rtol, atol : float or None
        PETSc's relative and absolute tolerances (None: PETSc's defaults, ``1e-5`` and ``1e-50``).
    maxiter : int, optional
        PETSc's ``max_it`` (default PETSc's, 10000).
    x0 : numpy.ndarray, optional
        This rank's slice of the initial guess (copied; default zeros).
    prefix : str, optional
        The options prefix of the KSP (default ``sparsetensor_<n>_``, new for each call);
        name one to let command-line options such as ``-<prefix>ksp_monitor`` apply.
    stats : dict, optional
        Filled with ``iterations``, ``reason`` (the name of PETSc's converged reason),
        ``reason_code``, ``residual_norm`` (as PETSc monitors it), ``ksp``, ``pc``,
        ``prefix``, ``seconds_setup`` (``KSPSetUp``: the preconditioner's construction) and
        ``seconds`` (the solve after it), the same on every rank.
    **options
        PETSc options without the leading ``-`` and without the prefix; values as
        petsc4py's ``Options`` takes them (None: a flag, bool, numbers, strings).

    Returns
    -------
    x : numpy.ndarray
        This rank's slice of the solution, of dtype ``PETSc.ScalarType``.
    info : int
        As :func:`sparsetensor.mpi.cg`'s: 0: converged (PETSc's converged reason > 0);
        ``> 0``: stopped at ``maxiter`` without converging, the number of iterations;
        ``< 0``: another divergence, PETSc's reason code (``-4`` DIVERGED_DTOL,
        ``-5`` DIVERGED_BREAKDOWN, ``-11`` DIVERGED_PCSETUP_FAILED, ...; the name is in ``stats``).

    Raises
    ------
    ImportError
        On every rank, without petsc4py (``pip install "sparsetensor[petsc]"``).
    TypeError, ValueError
        On every rank, for a matrix or ``b`` that PETSc cannot take (see :meth:`DistCSR.to_petsc`).

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> from petsc4py import PETSc
    >>> from sparsetensor import mpi as stmpi
    >>> from mpi4py import MPI
    >>> A = stmpi.DistCSR.from_global(st.stencil((20, 20)) if MPI.COMM_WORLD.rank == 0 else None)
    >>> r0, r1 = A.row_range
    >>> stats = {}
    >>> x, info = stmpi.solve(A, np.ones(r1 - r0), "cg", "gamg", rtol=1e-10, stats=stats)
    >>> info, stats["reason"]
    (0, 'CONVERGED_RTOL')
    >>> r = A @ x - 1.0
    >>> bool(stmpi.norm(A.comm, r) < 1e-6)
    True
    >>> x, info = stmpi.solve(A, np.ones(r1 - r0), "gmres", "bjacobi", sub_pc_type="ilu", ksp_gmres_restart=50)
    >>> info
    0
    """
    if _is_mat(A):
        comm = common = comm_of(A)
    elif isinstance(A, DistCSR):
        comm, common = A._comm, A.comm  # (the others' Mat may be on the user's communicator)
    else:
        raise TypeError(f"solve: A must be a DistCSR or a petsc4py Mat, got {type(A).__name__}")
    # PETSc's solver objects are collective: a type or option that differs by rank fails on some ranks only
    same_on_every_rank(common, "solve", A="a PETSc Mat" if _is_mat(A) else "a DistCSR", ksp=ksp, pc=pc, rtol=rtol,
                       atol=atol, maxiter=maxiter, x0_given=x0 is not None, prefix=prefix,
                       options=repr(sorted(options.items(), key=str)))
    PETSc = _petsc(comm)
    own = not isinstance(A, PETSc.Mat)
    mat = A.to_petsc() if own else A

    def vectors():
        sdt = np.dtype(PETSc.ScalarType)
        (m, n), (M, N) = mat.getLocalSize(), mat.getSize()
        if M != N or m != n:
            raise ValueError(f"solve: A must be square with its columns split like its rows, got shape {(M, N)} "
                             f"and rank {comm.rank}'s local shape {(m, n)}")
        bb = np.asarray(b)
        if bb.shape not in ((m,), (m, 1)):
            raise ValueError(f"solve: b must be rank {comm.rank}'s {m} entries (shape ({m},) or ({m}, 1)), "
                             f"got shape {bb.shape}")
        bb = np.ascontiguousarray(bb.reshape(m), dtype=_scalar_dtype(PETSc, bb.dtype, "solve: b", (bb,)))
        if x0 is None:
            x = np.zeros(m, dtype=sdt)
        else:
            x = np.asarray(x0)
            if x.shape not in ((m,), (m, 1)):
                raise ValueError(f"solve: x0 must be rank {comm.rank}'s {m} entries, got shape {x.shape}")
            x = np.array(x.reshape(m), dtype=_scalar_dtype(PETSc, x.dtype, "solve: x0", (x,)), copy=True)
        for name in options:
            if not isinstance(name, str) or not name.lstrip("-"):
                raise ValueError(f"solve: bad PETSc option name {name!r}")
        return bb, x, M

    try:
        bb, x, N = agree(comm, vectors)
    except BaseException:
        if own:
            mat.destroy()
        raise
    pre = prefix if prefix is not None else f"sparsetensor_{next(_prefixes)}_"
    opts = PETSc.Options(pre)
    names = [name.lstrip("-") for name in options]
    saved = {name: opts.getString(name) or None for name in names if opts.hasName(name)}  # '': a flag
    for name, value in zip(names, options.values()):
        opts.setValue(name, value)
    user_comm = mat.getComm()
    vb = PETSc.Vec().createWithArray(bb, size=(bb.shape[0], N), comm=user_comm)
    vx = PETSc.Vec().createWithArray(x, size=(x.shape[0], N), comm=user_comm)
    k = PETSc.KSP().create(comm=user_comm)
    converted = None
    try:
        k.setOptionsPrefix(pre)
        k.setOperators(mat)
        if ksp is not None:
            k.setType(ksp)
        if pc is not None:
            k.getPC().setType(pc)
        k.setTolerances(rtol=rtol, atol=atol, max_it=maxiter)  # None: PETSc's default
        k.setInitialGuessNonzero(x0 is not None)
        k.setFromOptions()
        t0 = time.perf_counter()
        # a preconditioner that fails on some ranks only (a zero or missing diagonal entry, a block
        # that does not factor) would leave the others waiting in PETSc's collectives: the diagonal
        # is checked first for the preconditioners that divide by it, and the setup of the
        # preconditioner and of its blocks is agreed over the ranks
        pc_type = k.getPC().getType()
        if pc_type in _DIAGONAL_PCS:
            agree(comm, _nonzero_diagonal, mat, pc_type)
        elif pc_type == "gamg" and own:  # GAMG's setup fails on the ranks that hold a row of zeros only
            agree(comm, _no_zero_rows, A, pc_type)
        if pc_type == "gamg" and "baij" in mat.getType():  # PETSc's GAMG builds its graph from AIJ only
            converted = mat.convert("aij")
            k.setOperators(converted)
        agree(comm, k.setUp)
        agree(comm, k.setUpOnBlocks)
        t1 = time.perf_counter()
        k.solve(vb, vx)
        t2 = time.perf_counter()
        code = int(k.getConvergedReason())
        its = int(k.getIterationNumber())
        if stats is not None:
            stats.update(iterations=its, reason=_reason_names(PETSc).get(code, str(code)), reason_code=code,
                         residual_norm=float(k.getResidualNorm()), ksp=k.getType(), pc=k.getPC().getType(),
                         prefix=pre, seconds_setup=t1 - t0, seconds=t2 - t1)
    finally:
        for name in names:
            opts.delValue(name)
        for name, value in saved.items():
            opts.setValue(name, value)
        k.destroy()
        vb.destroy()
        vx.destroy()
        if converted is not None:
            converted.destroy()
        if own:
            mat.destroy()
    if code > 0:
        return x, 0
    if code == PETSc.KSP.ConvergedReason.DIVERGED_MAX_IT and its > 0:
        return x, its
    return x, code
