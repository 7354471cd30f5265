"""sparsetensor: sparse tensors for Python.

PyTorch's sparse layout model (COO with dense dims; CSR, CSC, BSR, BSC with
batch and dense dims) on NumPy arrays, with full invariant checking and Cython
kernels. See the README for a tour.
"""

import os as _os

# Idle OpenMP threads spin briefly, then sleep. Spinning for libgomp's default (300000 spins,
# milliseconds) made a 1 ms kernel take 70 ms on a busy or oversubscribed machine (shared HPC
# nodes, CI); sleeping at once makes every parallel region wake its threads, which cost 60-90 us
# per call on an idle VM (a 27-point SpMV at 10^6 nnz, 2 threads: 0.36 ms passive, 0.24 ms with
# 3000 spins; two such processes on two cores: 0.46 and 0.59 ms, against 12 ms with the default).
# Set before our kernels load libgomp; values the user set win.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("GOMP_SPINCOUNT", "3000")

from ._config import check_invariants, get_check_invariants, num_threads, pool_stats, set_num_threads, set_pool_limit
from ._construct import diags, eye, random, rmat, stencil, zeros
from ._dense import from_dense
from ._dtypes import INDEX_DTYPES, VALUE_DTYPES
from ._errors import InvariantError
from ._factory import (
    sparse_bsc_tensor,
    sparse_bsr_tensor,
    sparse_compressed_tensor,
    sparse_coo_tensor,
    sparse_csc_tensor,
    sparse_csr_tensor,
)
from ._layout import Layout, sparse_bsc, sparse_bsr, sparse_coo, sparse_csc, sparse_csr, strided
from ._show_config import show_config
from ._tensor import COOTensor, CompressedTensor, SparseTensor
from .interop.scipy import from_scipy, to_scipy
from .interop.torch import from_torch, to_torch
from .io import load, read_mtx, save, write_mtx
from . import _api
from ._api import *  # noqa: F401,F403 - the st.* functions of the op table (matmul, sum, narrow, ...)
from . import _protocols
from .interop import chunk as _chunk

_protocols.bind()
diagonal, trace = _protocols.diagonal, _protocols.trace  # the table's functions (a device tensor: NotImplementedError)
_chunk.bind()  # pickling, Dask's tokenize/sizeof, operators that give way to lazy collections
from . import optim  # noqa: E402  (st.optim: sparse optimizers)
from . import cuda as _cuda  # noqa: E402,F401  (registers the CUDA device with _device; loads no cuda-python)

__version__ = "0.1.0"


def __getattr__(name):
    # st.autograd (the derivative rules and vjp) loads on first use: it imports every ops module
    if name == "autograd":
        import importlib

        return importlib.import_module(".autograd", __name__)
    raise AttributeError(f"module 'sparsetensor' has no attribute {name!r}")

__all__ = [
    "InvariantError", "Layout", "SparseTensor", "COOTensor", "CompressedTensor",
    "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc",
    "sparse_coo_tensor", "sparse_compressed_tensor", "sparse_csr_tensor", "sparse_csc_tensor",
    "sparse_bsr_tensor", "sparse_bsc_tensor", "from_dense", "from_scipy", "to_scipy", "from_torch", "to_torch",
    "save", "load", "read_mtx", "write_mtx",
    "diagonal", "trace", "zeros", "eye", "diags", "random", "rmat", "stencil",
    "check_invariants", "get_check_invariants", "num_threads", "set_num_threads", "set_pool_limit", "pool_stats",
    "INDEX_DTYPES", "VALUE_DTYPES", "show_config", "__version__",
    "autograd", "optim",
    *_api.__all__,
]
