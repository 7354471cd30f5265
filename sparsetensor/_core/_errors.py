"""The one error type for broken invariants."""

from __future__ import annotations

__all__ = ["InvariantError"]


class InvariantError(ValueError):
    """A sparse tensor breaks one of its numbered invariants.

    Attributes
    ----------
    invariant : str
        The number of the broken invariant, as the seed notes give it
        (``"5.3"`` for CSR/BSR; ``"C1"``..``"C6"`` for COO, see the README).
    layout : str
        The layout of the tensor being checked (``"csr"``, ``"coo"``, ...).
    batch : tuple of int or None
        The batch index where the violation was found, when it is known.
    index : int or None
        The row (compressed index) or position where it was found, when known.

    Examples
    --------
    >>> import sparsetensor as st
    >>> try:
    ...     st.sparse_csr_tensor([0, 2, 1, 2], [0, 1], [1.0, 2.0], size=(3, 2))
    ... except st.InvariantError as e:
    ...     print(e.invariant)
    5.3
    """

    def __init__(self, invariant: str, layout: str, message: str, *, batch=None, index=None):
        self.invariant = invariant
        self.layout = layout
        self.batch = batch
        self.index = index
        super().__init__(f"{layout} invariant {invariant}: {message}")

    def __reduce__(self):
        return (_rebuild, (self.invariant, self.layout, self.args[0], self.batch, self.index))

    def changed_since_check(self) -> "InvariantError":
        """This error, said of indices that a check had passed and that were written since."""
        return _rebuild(self.invariant, self.layout, f"{self.args[0]} (changed since the check)", self.batch,
                        self.index)


def _rebuild(invariant, layout, full_message, batch, index):
    err = InvariantError.__new__(InvariantError)
    err.invariant, err.layout, err.batch, err.index = invariant, layout, batch, index
    ValueError.__init__(err, full_message)
    return err
