"""Distributed sparse matrices on MPI ranks (mpi4py): PETSc's MPIAIJ model over our CSR tensors.

``pip install "sparsetensor[mpi]"`` (mpi4py; ``pip install mpich`` gives an MPI
and its ``mpiexec`` where none is installed). ``import sparsetensor`` never
imports this package or mpi4py.

- :class:`DistCSR`: rows in contiguous ranges per rank, each rank's rows held as
  a diagonal block (owned columns) and an off-diagonal block (ghost columns);
  ``A @ x`` (a vector or dense block), ``A @ B`` (two DistCSR: distributed SpGEMM, the ghost
  rows of ``B`` fetched from their owners), :meth:`DistCSR.rmatvec`, :meth:`DistCSR.gather`,
  :meth:`DistCSR.to_global`, :meth:`DistCSR.comm_stats`.
- :func:`save`: each rank writes its rows to a directory of parts (plus a manifest);
  :func:`load`: each rank reads its rows of such a directory, on any number of ranks, or of
  a ``.npz`` file (or root reads and scatters).
- :func:`cg`, :func:`gmres`, :func:`bicgstab`, :func:`minres` with SciPy's iterates;
  :func:`jacobi`, :func:`block_jacobi` preconditioners; :class:`DistLinearOperator`.
- :func:`assemble`, :func:`assemble_vector`: every rank adds global entries, owners receive them
  (PETSc's ``MatSetValues`` + assembly); ``A.zero_rows``, ``A + B``, ``alpha * A``, ``A.T``.
- Importing this package makes an uncaught exception on one rank abort the job (``MPI_Abort``)
  instead of hanging the other ranks; ``SPARSETENSOR_MPI_ABORT=0`` turns that off.
- :class:`DistBSR`: the same with ``r x c`` blocks (PETSc's MPIBAIJ): every operation above,
  :func:`point_block_jacobi`, ``A.to_petsc()`` giving an MPIBAIJ ``Mat``.
- PETSc (``pip install "sparsetensor[petsc]"``, imported only when used): ``A.to_petsc()`` (an AIJ
  ``Mat`` sharing our arrays), ``DistCSR.from_petsc(mat)``, :func:`to_petsc_vec` (a ``Vec`` over a
  slice, no copy) and :func:`solve` (any KSP and PC, PETSc options passed through).
- ``python -m sparsetensor.mpi {generate,cg,spmv}``: the command line for batch jobs.
"""

try:
    from mpi4py import MPI  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("sparsetensor.mpi needs mpi4py: pip install \"sparsetensor[mpi]\" (or pip install mpi4py mpich "
                      f"for an MPI as well); importing it failed: {e}") from None

from . import _methods  # noqa: F401  (binds the ops of _ops, _bsr_ops and _petsc as methods)
from ._abort import install as _install_abort
from ._assemble import assemble, assemble_vector
from ._comm import RemoteError, agree
from ._exchange import MODES as EXCHANGES
from ._krylov import bicgstab, cg, dot, norm
from ._krylov_residual import gmres, minres
from ._load import load
from ._matrix import DistCSR
from ._bsr import DistBSR
from ._bsr_ops import PointBlockJacobi, point_block_jacobi
from ._operator import DistLinearOperator, aslinearoperator
from ._parts import save
from ._petsc import solve, to_petsc_vec
from ._precond import BlockJacobi, Jacobi, block_jacobi, jacobi

__all__ = ["DistCSR", "DistBSR", "load", "cg", "dot", "norm", "agree", "RemoteError", "EXCHANGES"]
__all__ += ["gmres", "bicgstab", "minres", "DistLinearOperator", "aslinearoperator", "jacobi", "block_jacobi",
            "Jacobi", "BlockJacobi"]
__all__ += ["assemble", "assemble_vector", "save"]
__all__ += ["solve", "to_petsc_vec", "point_block_jacobi", "PointBlockJacobi"]

_install_abort()  # an uncaught exception on one rank aborts the job instead of hanging it (SPARSETENSOR_MPI_ABORT=0: off)
