"""Layouts: ``strided`` (dense) and the five sparse layouts."""

from __future__ import annotations

import operator
from typing import NamedTuple

__all__ = ["Layout", "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc",
           "as_layout", "as_blocksize", "COMPRESSED_LAYOUTS"]


class Layout(NamedTuple):
    """A storage layout. Compare with ``is`` or ``==``; strings such as ``"csr"`` are accepted everywhere."""

    name: str               # "csr"
    compressed: bool        # one of csr/csc/bsr/bsc
    compressed_rows: bool   # the compressed index runs over rows (csr/bsr)
    blocked: bool           # bsr/bsc

    def __repr__(self) -> str:
        return "st.strided" if self.name == "strided" else f"st.sparse_{self.name}"

    __str__ = __repr__

    @property
    def compressed_name(self) -> str:
        return "crow_indices" if self.compressed_rows else "ccol_indices"

    @property
    def plain_name(self) -> str:
        return "col_indices" if self.compressed_rows else "row_indices"

    @property
    def transposed(self) -> "Layout":
        """The layout of the sparse-dims transpose (csr <-> csc, bsr <-> bsc)."""
        return _TRANSPOSED.get(self.name, self)


strided = Layout("strided", False, False, False)
sparse_coo = Layout("coo", False, False, False)
sparse_csr = Layout("csr", True, True, False)
sparse_csc = Layout("csc", True, False, False)
sparse_bsr = Layout("bsr", True, True, True)
sparse_bsc = Layout("bsc", True, False, True)

_BY_NAME = {l.name: l for l in (strided, sparse_coo, sparse_csr, sparse_csc, sparse_bsr, sparse_bsc)}
_BY_NAME.update({"sparse_" + l.name: l for l in (sparse_coo, sparse_csr, sparse_csc, sparse_bsr, sparse_bsc)})
_BY_NAME["dense"] = strided
_TRANSPOSED = {"csr": sparse_csc, "csc": sparse_csr, "bsr": sparse_bsc, "bsc": sparse_bsr}
COMPRESSED_LAYOUTS = (sparse_csr, sparse_csc, sparse_bsr, sparse_bsc)


def as_layout(layout) -> Layout:
    """Normalise a layout given as a :class:`Layout`, a string, or a torch layout."""
    if isinstance(layout, Layout):
        return layout
    name = str(layout)
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name.startswith("st."):
        name = name[len("st."):]
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(f"unknown layout {layout!r}; expected one of "
                         "'coo', 'csr', 'csc', 'bsr', 'bsc', 'strided'") from None


def as_blocksize(blocksize) -> tuple:
    """A block shape ``(rows, cols)`` of positive ints, or a clear error."""
    try:
        bs = tuple(operator.index(b) for b in blocksize)
    except TypeError:
        raise TypeError(f"blocksize must be a pair of ints, got {blocksize!r}") from None
    if len(bs) != 2 or min(bs) < 1:
        raise ValueError(f"blocksize must be a pair of positive ints, got {blocksize!r}")
    return bs
