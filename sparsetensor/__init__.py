"""sparsetensor: sparse tensors for Python.

PyTorch's sparse layout model (COO with dense dims; CSR, CSC, BSR, BSC with
batch and dense dims) on NumPy arrays, with full invariant checking and Cython
kernels. See the README for a tour.
"""

import os as _os

# Idle OpenMP threads spin briefly, then sleep: libgomp's default spin (milliseconds) starves
# other processes on a busy or oversubscribed node, while sleeping at once makes every parallel
# region pay to wake its threads (the docs' performance page has the measurements). Set before
# our kernels load libgomp; values the user set win.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("GOMP_SPINCOUNT", "3000")

from ._core._config import check_invariants, get_check_invariants, num_threads, pool_stats, set_num_threads, set_pool_limit
from ._core._construct import diags, eye, random, rmat, stencil, zeros
from .ops.dense import from_dense
from ._core._dtypes import INDEX_DTYPES, VALUE_DTYPES
from ._core._errors import InvariantError
from ._core._from_arrays import (
    sparse_bsc_tensor,
    sparse_bsr_tensor,
    sparse_compressed_tensor,
    sparse_coo_tensor,
    sparse_csc_tensor,
    sparse_csr_tensor,
)
from ._core._layout import Layout, sparse_bsc, sparse_bsr, sparse_coo, sparse_csc, sparse_csr, strided
from ._show_config import show_config
from ._core._tensor import COOTensor, CompressedTensor, SparseTensor
from .interop.scipy import from_scipy, to_scipy
from .interop.torch import from_torch, to_torch
from .io import load, read_mtx, save, write_mtx
from . import _api
from ._api import *  # noqa: F401,F403 - the st.* functions of the op table (matmul, sum, narrow, ...)
from . import optim  # noqa: E402  (st.optim: sparse optimizers)
from . import cuda as _cuda  # noqa: E402,F401  (registers the CUDA device with _device; loads no cuda-python)

from ._version import __version__  # noqa: E402

# Submodules reached by attribute and imported on first access (SPEC 1): st.autograd imports every
# ops module; st.dask, st.mpi and st.torch import Dask, mpi4py and PyTorch, which
# `import sparsetensor` itself never does.
_LAZY_SUBMODULES = ("autograd", "dask", "mpi", "torch")


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'sparsetensor' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))

__all__ = [
    "InvariantError", "Layout", "SparseTensor", "COOTensor", "CompressedTensor",
    "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc",
    "sparse_coo_tensor", "sparse_compressed_tensor", "sparse_csr_tensor", "sparse_csc_tensor",
    "sparse_bsr_tensor", "sparse_bsc_tensor", "from_dense", "from_scipy", "to_scipy", "from_torch", "to_torch",
    "save", "load", "read_mtx", "write_mtx",
    "zeros", "eye", "diags", "random", "rmat", "stencil",
    "check_invariants", "get_check_invariants", "num_threads", "set_num_threads", "set_pool_limit", "pool_stats",
    "INDEX_DTYPES", "VALUE_DTYPES", "show_config", "__version__",
    "autograd", "optim",
    *_api.__all__,
]
