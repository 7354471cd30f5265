"""The docstring examples of the public API run and print what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["sparsetensor._core._errors", "sparsetensor._core._config", "sparsetensor._core._from_arrays", "sparsetensor._core._tensor",
           "sparsetensor.ops.dense", "sparsetensor.interop.scipy",
           "sparsetensor._backend.cpu._coalesce", "sparsetensor.ops.convert", "sparsetensor.ops.shape",
           "sparsetensor.ops.pointwise", "sparsetensor.ops.reduce", "sparsetensor.ops.blas",
           "sparsetensor.ops.binary", "sparsetensor.ops.spgemm",
           "sparsetensor.ops.select", "sparsetensor.ops.join", "sparsetensor.ops.inplace", "sparsetensor.ops.dims", "sparsetensor.ops.prune", "sparsetensor.ops.blocks", "sparsetensor.ops.mask",
           "sparsetensor._api", "sparsetensor._core._shape_checks", "sparsetensor._core._canonical",
           "sparsetensor.interop.linop", "sparsetensor.interop.array_function", "sparsetensor.ops.indexing",
           "sparsetensor.ops.diagonal", "sparsetensor._core._construct"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_public_functions_have_examples():
    import sparsetensor as st

    for name in ["sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor", "sparse_bsr_tensor",
                 "sparse_bsc_tensor", "sparse_compressed_tensor", "from_dense", "check_invariants",
                 "zeros", "eye", "diags", "random", "rmat", "stencil", "diagonal", "trace"]:
        doc = getattr(st, name).__doc__ or ""
        assert "Examples" in doc and ">>>" in doc, name
