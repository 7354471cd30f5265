"""The tensor classes: one for COO, one for the four compressed layouts.

A :class:`CompressedTensor` holds a compressed index (``batch + (n + 1,)``), a
plain index (``batch + (nnz,)``) and values (``batch + (nnz,) + block + dense``).
CSR is BSR with 1x1 blocks and no block dims in ``values``; CSC/BSC swap the
roles of rows and columns (``layout.compressed_rows``). Every method is written
once, over compressed/plain, and translated to rows/columns only at the edges.

Constructors that check their input live in :mod:`sparsetensor._core._from_arrays`; the
class constructors here trust their arguments. The classes hold the members, the
attributes and the O(1)/O(nnz) checks; the ops (``t.sum()``, ``t @ x``, ``t.to_sparse()``,
...) are bound onto them once, from the one table of public ops in :mod:`sparsetensor._api`,
which also makes the ``st.*`` functions. This module imports nothing above itself.

One class tree serves every device: the members are NumPy arrays on the CPU or
``sparsetensor.cuda.DeviceArray``s on a CUDA device, and ``device``/``is_cuda`` come from
them. What the classes do with members is device-neutral (``.copy()``, ``.astype()``,
``.swapaxes()``, shapes); the O(nnz) check of device members is the device backend's,
reached through :mod:`sparsetensor._core._device` (below this module).
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from . import _layout as L
from . import _recording
from ._device import as_device, backend, is_device_like, move, to_host
from ._dtypes import as_index_dtype, as_value_dtype, check_fits
from ._errors import InvariantError
from ._shape_checks import compressed_meta, coo_meta, normalize_dim
from ._validate import check_compressed_indices, check_coo_indices, first_broken_end, raise_compressed_error

__all__ = ["SparseTensor", "COOTensor", "CompressedTensor", "REPR_LIMIT"]

# Tensors whose members hold at most this many elements print them in full.
REPR_LIMIT = 64

# np.asarray(t) densifies only up to this many elements (see __array__).
DENSIFY_LIMIT = 1 << 27

_NDARRAY = np.ndarray
# A value of the validated flags: checked by the call running now, which trusts the check although
# another library holds the index arrays (sparsetensor.torch: its conversion checks, then the op
# runs at once; the flag goes back to True, untrusted while shared, when the call returns).
_PINNED = 2


def _one_place(layout, *members) -> None:
    """A tensor's members are all host (NumPy) arrays or all device arrays: ValueError otherwise
    (a tensor spanning the host and a device would read one with the other's kernels)."""
    host = [isinstance(m, _NDARRAY) for m in members]
    if any(host) and not all(host):
        kinds = ", ".join(type(m).__name__ for m in members)
        raise ValueError(f"the members of a {layout.name} tensor live on the host and on a device ({kinds}); "
                         "move them to one place first")


def frozen(a):
    """``a`` as a read-only view (device arrays as they are).

    Index members are immutable once they belong to a tensor: a tensor marked checked
    stays valid only if nothing writes its indices, so the classes keep (and the
    accessors hand out) read-only views. The arrays a view was taken of are not changed:
    a caller who built a tensor from its own arrays without a copy still holds writeable
    ones, and writing to them afterwards is undefined (the kernels bound what they read
    and write, so the outcome is an error or wrong values, never a crash).
    """
    if isinstance(a, _NDARRAY) and a.flags.writeable:
        r = _root(a)
        if id(r) not in _HELD_OUTSIDE and r.flags.owndata:
            # the library's own memory: read-only at its root, so that no view of it can be made writeable
            # again (NumPy lets a read-only view be, where the memory it views is writeable)
            r.flags.writeable = False
        a = a.view()
        a.flags.writeable = False
    return a


# The index arrays a constructor took without a copy: the caller still holds them, writeable.
# Keyed by the id of the ndarray at the root of their base chain (views share it), weakly, so
# the entry goes with the memory. Writing them after a check is undefined inside the library
# (every kernel bounds what it reads and writes), but they are checked again before they are
# handed to a library that trusts them (SciPy, PyTorch without its check).
_HELD_OUTSIDE = weakref.WeakValueDictionary()


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, _NDARRAY):
        a = a.base
    return a


def hold_outside(a: np.ndarray) -> None:
    """Record that the caller holds ``a``'s memory (the constructors, for arrays they keep)."""
    global _any_held
    r = _root(a)
    _HELD_OUTSIDE[id(r)] = r
    _any_held = True


_any_held = False  # whether a constructor ever took a caller's array (until then carry_held costs one test)


def carry_held(sources, out):
    """``out`` (a tensor, or a tuple or list of them), computed from ``sources`` (the arguments of
    an op, tensors or sequences of them): marked as held outside when a source is. A copy of indices
    that a caller changed after the check is checked as it was flagged, so an exit that trusts
    the flag (to SciPy, to PyTorch, a new coordinate) would pass the change on; the mark makes
    :func:`sparsetensor._core._canonical.ensure_valid_export` check it again (once: a copy of
    the library's own does not change). An in-place op's tensor, which took such copies, is
    marked too (marking a tensor that is held already changes nothing)."""
    if not _any_held:
        return out
    if isinstance(out, SparseTensor):
        outs = (out,)
    elif isinstance(out, (tuple, list)):
        outs = [o for o in out if isinstance(o, SparseTensor)]
    else:  # a dense result (products, sums): nothing to mark, nothing to look up
        return out
    for s in sources:
        if isinstance(s, SparseTensor):
            if held_outside(s):
                break
        elif isinstance(s, (tuple, list)) and _holds(s, 2):
            break
    else:
        return out
    for o in outs:
        o._from_held = True
    return out


def _holds(x, depth: int) -> bool:
    """Whether ``x``, or a tensor in sequences of it ``depth`` deep (``np.concatenate``'s arguments
    reach ``__array_function__`` two deep), is held outside."""
    if isinstance(x, SparseTensor):
        return held_outside(x)
    return depth > 0 and isinstance(x, (tuple, list)) and any(_holds(y, depth - 1) for y in x)


def held_outside(t) -> bool:
    """Whether an index member of ``t`` shares memory that a caller holds writeable, or ``t`` was
    computed from such a tensor and not checked since (:func:`carry_held`)."""
    return getattr(t, "_from_held", False) or holds_arrays(t)


def holds_arrays(t) -> bool:
    """Whether an index member of ``t`` shares memory that a caller holds writeable."""
    held = _HELD_OUTSIDE.data  # id -> weak reference: a dict lookup per member (this runs on every op)
    for a in ((t._indices,) if isinstance(t, COOTensor) else (t._compressed, t._plain)):
        if type(a) is _NDARRAY:
            while type(a.base) is _NDARRAY:
                a = a.base
            ref = held.get(id(a))
            if ref is not None and ref() is a:
                return True
    return False


def check_held_ends(args) -> None:
    """Invariants 5.1 and 5.2 (an O(batch) look) again of each checked compressed tensor among
    ``args`` (an op's arguments, or sequences of them) whose caller holds its index arrays: the
    kernels bound every read but trust where a batch starts and ends, so a first or last
    compressed index written since the check would drop or misplace entries silently in the ops
    that do not check a held tensor in full (to_dense, products, reductions, softmax)."""
    for s in args:
        if isinstance(s, CompressedTensor):
            s._check_ends_again()
        elif isinstance(s, (tuple, list)):
            for x in s:
                if isinstance(x, CompressedTensor):
                    x._check_ends_again()


def _own_values(t):
    return t._values


def _own_mT(t):
    return t._matrix_transpose()


def _fmt_array(name: str, a: np.ndarray) -> str:
    body = np.array2string(a, separator=", ", threshold=REPR_LIMIT, prefix=" " * (len("tensor(") + len(name) + 1))
    return f"{name}={body}"


class Size(int):
    """A tensor's ``size``: NumPy's element count (an int) that called is torch's ``size(dim=None)``."""

    def __new__(cls, shape: tuple):
        self = super().__new__(cls, math.prod(shape))
        self.shape = shape
        return self

    def __call__(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[normalize_dim(dim, len(self.shape))]

    def __reduce__(self):
        return int, (int(self),)


class SparseTensor:
    """Base of the sparse tensor classes: what every layout shares, on every device.

    Subclasses provide ``values()``, ``_replace_values``, ``_members`` and the layout's
    attributes.
    """

    __slots__ = ("_shape", "_layout", "_from_held", "__weakref__")
    __array_priority__ = 1000
    _FLAG = ""  # the slot of the subclass's validated flag

    def _pin(self, on: bool) -> None:
        """Trust this tensor's check although another library holds its index arrays (``on``: the
        check was made by the call running now; see ``_PINNED``), or stop trusting it."""
        f = getattr(self, self._FLAG)
        if on and f:
            setattr(self, self._FLAG, _PINNED)
        elif not on and f == _PINNED:
            setattr(self, self._FLAG, True)

    # -- attributes ---------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        """The shape, ``batch + sparse + dense``."""
        return self._shape

    @property
    def size(self) -> int:
        """The number of elements, as NumPy's ``size`` (Dask and NumPy read it), which called is
        torch's ``size()``: ``t.size()`` the shape, ``t.size(d)`` one of its sizes."""
        return Size(self._shape)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    @property
    def layout(self) -> L.Layout:
        return self._layout

    @property
    def dtype(self) -> np.dtype:
        return self._values.dtype

    @property
    def is_sparse(self) -> bool:
        return True

    @property
    def device(self) -> str:
        """``"cpu"``, or ``"cuda:N"`` for device members (the values' device)."""
        return self._values.device

    @property
    def is_cuda(self) -> bool:
        """True when the members live on a CUDA device."""
        v = self._values
        return type(v) is not _NDARRAY and v.device != "cpu"

    @property
    def device_id(self) -> int:
        """The CUDA device ordinal of the members; -1 on the CPU (torch's ``get_device``)."""
        return self._values.device_id if self.is_cuda else -1

    @property
    def index_dtype(self) -> np.dtype:
        """The dtype of the index arrays (int32 or int64)."""
        raise NotImplementedError

    def numel(self) -> int:
        """The number of indexable elements (invariant 3.11)."""
        return math.prod(self._shape)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __bool__(self) -> bool:
        """The truth of a one-element tensor is its element's, as in NumPy and PyTorch; any other
        tensor's is ambiguous (ValueError), not ``len(t) > 0``."""
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor of {self.numel()} elements is ambiguous; use "
                             "st.count_nonzero(t) or t.nnz")
        host = self.cpu() if self.is_cuda else self
        return bool(host.to_dense().reshape(()))

    def __eq__(self, other):
        raise NotImplementedError("== of sparse tensors is not supported (it would compare elementwise, and "
                                  "unspecified elements compare equal); compare t.to_dense(), or use t is u")

    __ne__ = __eq__
    __hash__ = object.__hash__  # identity: tensors are keys of weak tables

    # -- dtype and device ---------------------------------------------------------------
    def to(self, *args, dtype=None, device=None, index_dtype=None, copy: bool = False):
        """Convert values dtype, index dtype or device: ``t.to(np.float32)``, ``t.to("cpu")``,
        ``t.to("cuda")``, ``t.to("cuda:1")``, ``t.to(index_dtype=np.int32)``.

        Dtypes are converted on the CPU when the move involves it (before moving to a
        device, after moving to the host), on the device otherwise. A move gives the same
        class with the members on the other device.

        Examples
        --------
        >>> import sparsetensor as st
        >>> t = st.sparse_coo_tensor([[0, 1]], [1, 2], size=(3,))
        >>> t.to("float32").dtype
        dtype('float32')
        """
        for a in args:
            if is_device_like(a):
                device = a
            else:
                dtype = a
        here = self.device
        there = here if device is None else as_device(device)
        if there != here:
            if _any_held and held_outside(self) and self._validated:
                self._check_again()  # the copy on the other side is trusted as this one was
            if here == "cpu":
                return move(self.to(dtype=dtype, index_dtype=index_dtype), there)
            if there == "cpu":
                return self.cpu().to(dtype=dtype, index_dtype=index_dtype)
            return move(self, there).to(dtype=dtype, index_dtype=index_dtype)
        out = self
        if dtype is not None:
            out = out.astype(dtype, copy=copy)
        if index_dtype is not None:
            out = out._with_index_dtype(index_dtype)
        elif copy and out is self:
            out = self.clone()
        return out

    def cuda(self, device=None):
        """This tensor on a CUDA device (``sparsetensor.cuda``); see ``t.to("cuda")``."""
        return self.to(device="cuda" if device is None else device)

    def cpu(self):
        """This tensor with its members on the host: itself on the CPU, else host copies."""
        return to_host(self) if self.is_cuda else self

    def astype(self, dtype, copy: bool = True):
        """The same tensor with values converted to ``dtype`` (indices shared unless ``copy``).

        On a CUDA device the values convert themselves on the device (NumPy's conversions;
        complex to real raises NotImplementedError naming the pair)."""
        if _recording.active:  # vjp records it (sparsetensor.autograd)
            return _recording.call("astype", SparseTensor._astype, (self, dtype), {"copy": copy})
        return self._astype(dtype, copy)

    def _astype(self, dtype, copy: bool = True):
        dt = as_value_dtype(dtype)
        if dt == self.dtype and not copy:
            return self
        src, k = self, self.dtype.kind
        if (dt.kind == "b" or k == "b" or (dt.kind in "iu" and k in "fc")) and not self.is_coalesced():
            # a cast that does not commute with the sum of repeats (1.0 and -1.0 to bool, 0.6 and 0.6
            # to int, True and True to int): the repeats are summed in the tensor's own dtype first
            src = self.coalesce()
        return src._replace_values(src._values.astype(dt), copy_indices=copy and src is self)

    @property
    def T(self):
        if self.ndim < 2:  # as torch's t() and NumPy's .T: a 1-d tensor is its own transpose
            return self
        if self.ndim != 2:
            raise ValueError(f".T needs a 2-d tensor, got {self.ndim} dims; use .mT or .transpose(d0, d1)")
        return self.transpose(0, 1)

    def t(self):
        return self.T

    def __array__(self, dtype=None, copy=None):
        if self.is_cuda:
            raise TypeError(f"a {self._layout.name} tensor on {self.device} does not convert to a NumPy array "
                            "implicitly; use .cpu() or .to_dense().get()")
        if copy is False:
            raise ValueError("a sparse tensor cannot be viewed as a dense array without a copy")
        if self.numel() > DENSIFY_LIMIT:
            raise ValueError(f"np.asarray would densify a {self.layout.name} tensor of {self.numel()} "
                             f"elements (limit {DENSIFY_LIMIT}); call .to_dense() to do it anyway")
        dense = self.to_dense()
        return dense if dtype is None else dense.astype(dtype, copy=False)

    @property
    def mT(self):
        """The transpose of the two sparse (matrix) dims: a view for compressed layouts (on a
        CUDA device, bsr/bsc blocks are transposed into new contiguous values)."""
        if _recording.active:  # vjp records it (sparsetensor.autograd)
            return _recording.call("mT", _own_mT, (self,), {})
        return carry_held((self,), self._matrix_transpose())

    def _check_again(self) -> None:
        """The full check again (the caller holds the index arrays and may have written them)."""
        try:
            self.check_invariants()
        except InvariantError as e:
            raise e.changed_since_check() from None
        self._from_held = False

    def check_invariants(self, *, threads: int | None = None) -> None:
        """Re-check every invariant of this tensor (O(1) and O(nnz)); raise :class:`InvariantError`.

        Device members are checked on their device (the backend's ``validate``), with the
        same invariant numbers and messages.

        Examples
        --------
        >>> import sparsetensor as st
        >>> with st.check_invariants(False):
        ...     t = st.sparse_csr_tensor([0, 2], [1, 0], [1.0, 2.0], size=(1, 2))
        >>> t.check_invariants()
        Traceback (most recent call last):
        ...
        sparsetensor._core._errors.InvariantError: csr invariant 5.6: col_indices must be sorted with distinct values within each row; row 0, position 1: got 0 after a value >= it
        """
        if self.is_cuda:
            backend(self.device).validate(self, threads)
        else:
            self._check_host(threads)
        self._set_validated()

    def _narrowed(self, index: np.ndarray, dt: np.dtype) -> np.ndarray:
        """An index member of this tensor cast to ``dt``: an index that does not fit, which only an
        unchecked tensor can hold (the shape fits), or one whose caller wrote it since the check,
        raises the check's error instead of wrapping into another valid one."""
        out = index.astype(dt)
        if (self._validated and not held_outside(self)) or dt.itemsize >= index.dtype.itemsize:
            return out  # (a caller holding the arrays may have written them since the check)
        if type(index) is _NDARRAY:
            fits = np.array_equal(out, index)
        else:  # on a device: its least and largest entry read back
            lo, hi = backend(self.device).index_range(index)
            info = np.iinfo(dt)
            fits = lo is None or (info.min <= lo and hi <= info.max)
        if not fits:
            self.check_invariants()
        return out

    # -- printing -----------------------------------------------------------------
    def _summary(self) -> str:
        extra = self._summary_extra()
        where = "" if self.device == "cpu" else f", device={self.device!r}"
        return (f"{self._layout.name}({self.dtype}{list(self._shape)}, nnz={self.nnz}"
                f"{extra}, index={self.index_dtype}{where})")

    def __repr__(self) -> str:
        members = self._members()
        if self.is_cuda or sum(a.size for _, a in members) > REPR_LIMIT:
            return self._summary()
        parts = [_fmt_array(name, a) for name, a in members]
        parts.append(f"size={self._shape}, nnz={self.nnz}")
        if self.dtype != np.float64:
            parts.append(f"dtype={self.dtype}")
        parts.append(f"layout={self._layout!r}")
        return "tensor(" + ",\n       ".join(parts) + ")"


class COOTensor(SparseTensor):
    """A COO tensor: ``indices`` of shape ``(sparse_dim, nnz)``, ``values`` of shape ``(nnz,) + dense``.

    Build one with :func:`sparsetensor.sparse_coo_tensor`.

    ``checked`` is the indices' provenance: True when they are known to satisfy C4/C5 (and C6
    when ``coalesced``), because a full check ran or a kernel of ours produced them. Kernels
    may then skip reading parts of the indices (coo -> csr reads only the row indices);
    False (the default, always safe) makes them check what they read.
    """

    __slots__ = ("_indices", "_values", "_coalesced", "_checked_flag")
    _FLAG = "_checked_flag"

    def __init__(self, indices: np.ndarray, values: np.ndarray, shape: tuple, coalesced: bool = False,
                 checked: bool = False):
        _one_place(L.sparse_coo, indices, values)
        self._indices = frozen(indices)
        self._values = values
        self._shape = tuple(shape)
        self._layout = L.sparse_coo
        self._from_held = False
        self._coalesced = bool(coalesced)
        self._checked = bool(checked)

    @property
    def nnz(self) -> int:
        return self._indices.shape[1]

    @property
    def sparse_dim(self) -> int:
        return self._indices.shape[0]

    @property
    def dense_dim(self) -> int:
        return self._values.ndim - 1

    @property
    def batch_dim(self) -> int:
        return 0

    @property
    def blocksize(self):
        return None

    @property
    def index_dtype(self) -> np.dtype:
        return self._indices.dtype

    def indices(self):
        """The ``(sparse_dim, nnz)`` index array: a read-only view of the tensor's own (no copy)."""
        return self._indices

    def values(self):
        """The ``(nnz,) + dense`` values array (the tensor's own, not a copy)."""
        if _recording.active:  # vjp records it (sparsetensor.autograd)
            return _recording.call("values", _own_values, (self,), {})
        return self._values

    def is_coalesced(self) -> bool:
        """True when the indices are known to be sorted lexicographically and distinct."""
        return self._coalesced

    def _summary_extra(self) -> str:
        return f", sparse_dim={self.sparse_dim}" + (", coalesced" if self._coalesced else "")

    def clone(self):
        if _recording.active:  # vjp records it (sparsetensor.autograd)
            return _recording.call("clone", COOTensor._clone, (self,), {})
        return self._clone()

    def _clone(self):
        return carry_held((self,), self._like(self._indices.copy(), self._values.copy()))

    def _replace_values(self, values, copy_indices=False):
        return carry_held((self,), self._like(self._indices.copy() if copy_indices else self._indices, values))


    def _with_index_dtype(self, index_dtype):
        dt = as_index_dtype(index_dtype)
        if dt == self.index_dtype:
            return self
        check_fits(dt, "coo", **{f"size[{d}]": self._shape[d] for d in range(self.sparse_dim)})
        return carry_held((self,), self._like(self._narrowed(self._indices, dt), self._values))

    def _like(self, indices, values):
        """A tensor of this shape whose indices equal this one's in value (flags carried over)."""
        return COOTensor(indices, values, self._shape, self._coalesced, self._checked)

    def _private_twin(self, plain: bool = True):
        """This tensor over a private copy of its indices, unchecked, the values shared: see
        :func:`sparsetensor._core._canonical.ensure_valid`."""
        return COOTensor(self._indices.copy(), self._values, self._shape, self._coalesced)

    def _on_private_indices(self):
        """This tensor, or where a caller holds its index array, the same tensor (flags kept) over
        a copy of it: for a kernel that checks an index in one pass and follows it in another
        (another thread may write the caller's array in between)."""
        if _any_held and holds_arrays(self):
            return self._like(self._indices.copy(), self._values)
        return self

    def _coalesced_checked(self, threads: int | None = None) -> "COOTensor":
        """:meth:`coalesce`, and the O(nnz) check (C4-C6) of a tensor that was flagged coalesced
        but never checked (``coalesce`` checks a flagged one again where a caller holds its
        indices): for kernels that address memory or split batches by its indices."""
        t = self.coalesce(threads=threads)
        if not t._checked:
            t.check_invariants(threads=threads)
        return t

    def _members(self):
        return [("indices", self._indices), ("values", self._values)]

    @property
    def _checked(self) -> bool:
        """C4/C5 (and C6 when coalesced) known to hold: set by a full check or by our kernels, and not
        trusted while the indices are device memory another library may write (``_shared``)."""
        i, f = self._indices, self._checked_flag
        return f == _PINNED or f and (type(i) is _NDARRAY or not getattr(i, "_shared", False))

    @_checked.setter
    def _checked(self, value) -> None:
        self._checked_flag = bool(value)

    @property
    def _validated(self) -> bool:
        """The one meaning of *validated* (see :mod:`sparsetensor._core._canonical`): C4/C5 (and C6
        when coalesced) known to hold; set by a full check or by our kernels."""
        return self._checked

    def _set_validated(self) -> None:
        self._checked = True

    def _check_host(self, threads) -> None:
        coo_meta(self._indices, self._values, self._shape)
        check_coo_indices(self._indices, self._shape, coalesced=self._coalesced, threads=threads)

    def _matrix_transpose(self):
        if self.sparse_dim < 2:
            raise ValueError(f"mT needs at least 2 sparse dims, got sparse_dim={self.sparse_dim}")
        return self.transpose(self.sparse_dim - 2, self.sparse_dim - 1)


class CompressedTensor(SparseTensor):
    """A CSR, CSC, BSR or BSC tensor, with batch and dense dims (seed 003).

    Build one with :func:`sparsetensor.sparse_csr_tensor` and friends, or
    :func:`sparsetensor.sparse_compressed_tensor`.
    """

    __slots__ = ("_compressed", "_plain", "_values", "_canonical_flag")
    _FLAG = "_canonical_flag"

    def __init__(self, compressed: np.ndarray, plain: np.ndarray, values: np.ndarray, shape: tuple,
                 layout: L.Layout, canonical: bool = False):
        _one_place(layout, compressed, plain, values)
        self._compressed = frozen(compressed)
        self._plain = frozen(plain)
        self._values = values
        self._shape = tuple(shape)
        self._layout = layout
        self._canonical = bool(canonical)
        self._from_held = False

    # -- attributes ---------------------------------------------------------------
    @property
    def nnz(self) -> int:
        """Specified elements (blocks for bsr/bsc) per batch."""
        return self._plain.shape[-1]

    @property
    def batch_dim(self) -> int:
        return self._compressed.ndim - 1

    @property
    def sparse_dim(self) -> int:
        return 2

    @property
    def dense_dim(self) -> int:
        return self._values.ndim - self.batch_dim - 1 - (2 if self._layout.blocked else 0)

    @property
    def blocksize(self) -> tuple:
        """``(rows, cols)`` of a block; ``(1, 1)`` for csr/csc."""
        if not self._layout.blocked:
            return (1, 1)
        m = self.batch_dim
        return tuple(self._values.shape[m + 1: m + 3])

    @property
    def index_dtype(self) -> np.dtype:
        return self._compressed.dtype

    @property
    def plain_size(self) -> int:
        """The number of (block) columns for csr/bsr, (block) rows for csc/bsc: 5.3/5.5's bound."""
        m = self.batch_dim
        if self._layout.compressed_rows:
            return self._shape[m + 1] // self.blocksize[1]
        return self._shape[m] // self.blocksize[0]

    # -- members --------------------------------------------------------------------
    def compressed_indices(self):
        """``crow_indices`` for csr/bsr, ``ccol_indices`` for csc/bsc (a read-only view, no copy)."""
        return self._compressed

    def plain_indices(self):
        """``col_indices`` for csr/bsr, ``row_indices`` for csc/bsc (a read-only view, no copy)."""
        return self._plain

    def values(self):
        if _recording.active:  # vjp records it (sparsetensor.autograd)
            return _recording.call("values", _own_values, (self,), {})
        return self._values

    def _member(self, rows: bool, compressed: bool, name: str):
        if self._layout.compressed_rows != rows:
            raise TypeError(f"{name}() is not defined for layout {self._layout!r}; "
                            f"use {self._layout.compressed_name if compressed else self._layout.plain_name}()")
        return self._compressed if compressed else self._plain

    def crow_indices(self):
        return self._member(True, True, "crow_indices")

    def col_indices(self):
        return self._member(True, False, "col_indices")

    def ccol_indices(self):
        return self._member(False, True, "ccol_indices")

    def row_indices(self):
        return self._member(False, False, "row_indices")

    def is_coalesced(self) -> bool:
        """True when invariant 5.6 is known to hold (checked, or produced by a kernel)."""
        return self._canonical

    def _summary_extra(self) -> str:
        parts = []
        if self._layout.blocked:
            parts.append(f"blocksize={self.blocksize}")
        if self.batch_dim:
            parts.append(f"batch_dim={self.batch_dim}")
        if self.dense_dim:
            parts.append(f"dense_dim={self.dense_dim}")
        return "".join(", " + p for p in parts)

    # -- copies ------------------------------------------------------------------------
    def clone(self):
        if _recording.active:  # vjp records it (sparsetensor.autograd)
            return _recording.call("clone", CompressedTensor._clone, (self,), {})
        return self._clone()

    def _clone(self):
        return carry_held((self,), type(self)(self._compressed.copy(), self._plain.copy(), self._values.copy(),
                                              self._shape, self._layout, self._canonical))

    def _replace_values(self, values, copy_indices=False):
        c, p = (self._compressed.copy(), self._plain.copy()) if copy_indices else (self._compressed, self._plain)
        return carry_held((self,), type(self)(c, p, values, self._shape, self._layout, self._canonical))

    def _private_twin(self, plain: bool):
        """This tensor over a private copy of its compressed index (and of its plain index with
        ``plain``), unchecked, the values shared: see :func:`sparsetensor._core._canonical.ensure_valid`."""
        return type(self)(self._compressed.copy(), self._plain.copy() if plain else self._plain, self._values,
                          self._shape, self._layout)

    def _with_index_dtype(self, index_dtype):
        dt = as_index_dtype(index_dtype)
        if dt == self.index_dtype:
            return self
        m = self.batch_dim
        check_fits(dt, self._layout.name, nnz=self.nnz, nrows=self._shape[m], ncols=self._shape[m + 1])
        return carry_held((self,), type(self)(self._narrowed(self._compressed, dt), self._narrowed(self._plain, dt),
                                              self._values, self._shape, self._layout, self._canonical))

    def _members(self):
        return [(self._layout.compressed_name, self._compressed), (self._layout.plain_name, self._plain),
                ("values", self._values)]

    @property
    def _canonical(self) -> bool:
        """5.1-5.6 known to hold: set by a full check or by our kernels, and not trusted while an index
        member is device memory another library may write (``_shared``: taken without a copy, or
        handed out), which every op checks again."""
        f = self._canonical_flag
        return f == _PINNED or f and (type(self._plain) is _NDARRAY or not (
            getattr(self._plain, "_shared", False) or getattr(self._compressed, "_shared", False)))

    @_canonical.setter
    def _canonical(self, value) -> None:
        self._canonical_flag = bool(value)

    @property
    def _validated(self) -> bool:
        """The one meaning of *validated* (see :mod:`sparsetensor._core._canonical`): 5.1-5.6 known to
        hold (``is_coalesced()``); set by a full check or by our kernels."""
        return self._canonical

    def _set_validated(self) -> None:
        self._canonical = True

    def _check_ends_again(self) -> None:
        """5.1/5.2 again where a check passed and the caller holds the index arrays (see
        :func:`check_held_ends`); a never-checked tensor is checked by the op itself."""
        c = self._compressed
        if not (self._canonical_flag and type(c) is _NDARRAY and held_outside(self)):
            return
        nnz = self._plain.shape[-1]
        if c.ndim == 1 and c[0] == 0 and c[-1] == nnz:
            return
        found = first_broken_end(c.reshape(-1, c.shape[-1]), nnz)
        if found is not None:
            try:
                raise_compressed_error(found, self._layout, c.shape[:-1], self.plain_size, nnz)
            except InvariantError as e:
                raise e.changed_since_check() from None

    def _check_host(self, threads) -> None:
        meta = compressed_meta(self._compressed, self._plain, self._values, self._shape, self._layout)
        check_compressed_indices(self._compressed, self._plain, self._layout, meta.plain_size, threads=threads)

    def _matrix_transpose(self) -> "CompressedTensor":
        """csr <-> csc, bsr <-> bsc sharing indices and values (seed 003, "BSR transpose as a view");
        device values cannot be strided views, so there the blocks are transposed into new ones."""
        m, n = self.batch_dim, self.dense_dim
        shape = list(self._shape)
        shape[m], shape[m + 1] = shape[m + 1], shape[m]
        values = self._values
        if self._layout.blocked:
            values = values.swapaxes(-2 - n, -1 - n)
        return CompressedTensor(self._compressed, self._plain, values, tuple(shape), self._layout.transposed,
                                self._canonical)
