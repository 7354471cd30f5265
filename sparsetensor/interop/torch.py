"""PyTorch interop: :func:`from_torch` and :func:`to_torch`, sharing memory on the CPU and on CUDA devices.

Our layouts are PyTorch's, member for member: COO ``indices``/``values``;
CSR/CSC/BSR/BSC compressed indices, plain indices and values with batch and
dense dims. On the CPU the members cross over with :func:`torch.from_numpy` and
:meth:`torch.Tensor.numpy`; on a CUDA device through DLPack (our
``sparsetensor.cuda.DeviceArray`` both ways), which also orders the work queued
on torch's current stream and on ours at each crossing. Both tensors use the
same memory: writing to one is seen in the other. Copies are made only where PyTorch or NumPy needs them,
and each is documented below. torch is an optional dependency, imported on
first use.
"""

from __future__ import annotations

import warnings

import numpy as np

from .._core import _layout as L
from .._core._canonical import ensure_valid_export
from .._core._device import device_array, is_device_array
from .._core._config import resolve_check
from .._core._from_arrays import sparse_compressed_tensor, sparse_coo_tensor
from .._core._tensor import COOTensor, CompressedTensor, hold_outside

__all__ = ["from_torch", "to_torch"]


def import_torch():
    """The ``torch`` module, imported on first use (sparsetensor never needs it to import); an
    ImportError saying how to install it where it is missing."""
    try:
        import torch
    except ImportError:
        raise ImportError("PyTorch interop needs torch, an optional dependency of sparsetensor: "
                          "pip install torch (or 'sparsetensor[torch]')") from None
    return torch


def _torch_layouts(torch) -> dict:
    return {torch.sparse_coo: L.sparse_coo, torch.sparse_csr: L.sparse_csr, torch.sparse_csc: L.sparse_csc,
            torch.sparse_bsr: L.sparse_bsr, torch.sparse_bsc: L.sparse_bsc}


def _numpy_of(x, what: str) -> np.ndarray:
    """A NumPy array sharing the memory of the CPU tensor ``x`` (a copy only if a conj/neg bit is set)."""
    x = x.detach().resolve_conj().resolve_neg()
    try:
        return x.numpy()
    except TypeError as e:
        raise TypeError(f"from_torch: {what} has dtype {x.dtype}, which NumPy does not have; convert it first, "
                        f"e.g. t.to(torch.float32) ({e})") from None


def _device_member(x, what: str):
    """CUDA tensor ``x`` as a member our device constructors take without a copy (a copy only
    for a conj/neg bit or a non-contiguous tensor: device members are C-contiguous)."""
    if x.dtype == import_torch().bfloat16:
        raise TypeError(f"from_torch: {what} has dtype {x.dtype}, which NumPy does not have; convert it first, "
                        "e.g. t.to(torch.float32)")
    return x.detach().resolve_conj().resolve_neg().contiguous()


def from_torch(t, *, check_invariants: bool = True):
    """A tensor (or array) from a PyTorch tensor on the CPU or a CUDA device, sharing its memory.

    ``torch.sparse_coo``, ``sparse_csr``, ``sparse_csc``, ``sparse_bsr`` and
    ``sparse_bsc`` tensors, with batch and dense dims, become tensors of the
    same layout whose members are NumPy views of PyTorch's (no copy); a
    strided tensor becomes a NumPy array view. An uncoalesced COO tensor keeps
    its duplicates and its ``is_coalesced()`` flag. Copies are made only for
    members PyTorch stores lazily conjugated or negated, non-contiguous index
    arrays (PyTorch's ``coalesce()`` leaves COO indices as a strided view;
    invariants 3.5/3.6), and compressed values that are neither contiguous nor
    block-transposed (invariant 3.7). COO indices are int64, as PyTorch's
    always are.

    A CUDA tensor becomes a tensor on that device whose members are
    ``sparsetensor.cuda.DeviceArray`` views of torch's memory (DLPack; our
    stream waits for the work queued on torch's current stream), and a strided
    CUDA tensor a DeviceArray. Device members are C-contiguous, so a
    non-contiguous member (COO indices after ``coalesce()``, block-transposed
    values) is made contiguous by torch first, a copy on the device.

    Parameters
    ----------
    t : torch.Tensor
        On the CPU or a CUDA device (``ValueError`` elsewhere), of a dtype both
        libraries have (bfloat16 raises ``TypeError``).
    check_invariants : bool, optional
        Check every invariant (the default; PyTorch does not check unless
        asked). ``False`` keeps only the O(1) checks.

    Examples
    --------
    >>> import numpy as np, torch, sparsetensor as st
    >>> x = torch.tensor([[0.0, 1.5], [2.0, 0.0]]).to_sparse_csr()
    >>> t = st.from_torch(x)
    >>> t.layout, t.col_indices(), np.shares_memory(t.values(), x.values().numpy())
    (st.sparse_csr, array([1, 0]), True)
    """
    torch = import_torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"from_torch expects a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"from_torch: the tensor is on {t.device}; sparsetensor tensors live on the CPU or a CUDA "
                         "device: call .cpu() first (a copy)")
    member = _numpy_of if t.device.type == "cpu" else _device_member
    if t.layout == torch.strided:
        x = member(t, "the tensor")
        return x if isinstance(x, np.ndarray) else device_array(x)
    layout = _torch_layouts(torch).get(t.layout)
    if layout is None:
        raise TypeError(f"from_torch: unsupported torch layout {t.layout}")
    shape = tuple(t.shape)
    if layout is L.sparse_coo:
        indices = member(t._indices(), "indices")
        values = member(t._values(), "values")
        return sparse_coo_tensor(indices, values, shape, check_invariants=check_invariants,
                                 is_coalesced=t.is_coalesced())
    if layout.compressed_rows:
        compressed, plain = t.crow_indices(), t.col_indices()
    else:
        compressed, plain = t.ccol_indices(), t.row_indices()
    return sparse_compressed_tensor(member(compressed, layout.compressed_name), member(plain, layout.plain_name),
                                    member(t.values(), "values"), shape, layout=layout,
                                    check_invariants=check_invariants)


def _tensor_of(torch, a: np.ndarray, copy, what: str, index: bool = False):
    """``torch.from_numpy`` of ``a``, copying first when asked or when PyTorch cannot share it.

    ``index``: ``a`` is a tensor's index member, a read-only view that is shared as it is (see
    :func:`to_torch`)."""
    reason = None
    if not a.flags.writeable and not index:
        reason = "is read-only (PyTorch tensors are always writable)"
    elif not a.dtype.isnative:
        reason = "is not in native byte order"
    elif any(s < 0 for s in a.strides):
        reason = "has negative strides"
    if reason is not None and copy is False:
        raise ValueError(f"to_torch(copy=False): {what} {reason}, so it cannot be shared without a copy")
    if copy or reason is not None:
        a = np.array(a, copy=True, order="C" if reason else "K")
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
    try:
        if a.flags.writeable:
            out = torch.from_numpy(a)
        else:  # an index member: torch warns that its tensors are always writable
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
                out = torch.from_numpy(a)
    except TypeError as e:
        raise TypeError(f"to_torch: {what} has dtype {a.dtype}, which PyTorch does not support ({e})") from None
    if index and not copy and reason is None and a.size:
        hold_outside(a)  # PyTorch may write it: checked again before the next export (to_scipy)
    # nothing to share in an empty member; torch 2.11's invariant check refuses the strides
    # from_numpy gives one ("expected col_indices to be a contiguous tensor per batch",
    # pytorch/pytorch#178309), so an empty member is a new tensor of torch's own strides
    return torch.empty(out.shape, dtype=out.dtype) if a.size == 0 else out


def _device_tensor(torch, a, copy, what: str):
    """``torch.from_dlpack`` of DeviceArray ``a`` (torch's current stream waits for our queued work;
    our stream waits for torch's before the memory can be freed), copied first when asked."""
    if copy:
        a = a.copy()
    if a.size == 0:  # nothing to share; torch checks the strides of empty members (see _tensor_of)
        return torch.empty(a.shape, dtype=_torch_dtype(torch, a.dtype), device=a.device)
    try:
        return torch.from_dlpack(a)
    except (BufferError, TypeError, RuntimeError) as e:
        raise TypeError(f"to_torch: {what} of dtype {a.dtype} on {a.device} could not be shared with torch "
                        f"({e})") from None


def _torch_dtype(torch, dt: np.dtype):
    return torch.from_numpy(np.empty(0, dt)).dtype


def _require_torch_cuda(torch, where: str):
    if not torch.cuda.is_available():
        raise NotImplementedError(f"to_torch of a tensor on {where}: this torch ({torch.__version__}) has no CUDA "
                                  "device, so it cannot hold the members; move the tensor with .cpu() first")


def _sparse_of(torch, t, copy, check, member):
    """The torch tensor of sparse ``t`` with each member made by ``member(a, copy, what, index)``
    (host: :func:`_tensor_of`; device: :func:`_device_tensor`)."""
    values = member(t.values(), copy, "values", False)
    if isinstance(t, COOTensor):
        indices, index_copy = t.indices(), copy
        if indices.dtype != np.int64:
            if copy is False:
                raise ValueError("to_torch(copy=False): the COO indices are int32, and PyTorch's COO indices "
                                 "are int64 only; convert with t.to(index_dtype='int64') or allow the copy")
            indices, index_copy = indices.astype(np.int64), None  # a copy already (on the tensor's device)
        return torch.sparse_coo_tensor(member(indices, index_copy, "indices", True), values, t.shape,
                                       is_coalesced=t.is_coalesced(), check_invariants=check)
    layout = getattr(torch, f"sparse_{t.layout.name}")
    compressed = member(t.compressed_indices(), copy, t.layout.compressed_name, True)
    plain = member(t.plain_indices(), copy, t.layout.plain_name, True)
    return torch.sparse_compressed_tensor(compressed, plain, values, t.shape, layout=layout, check_invariants=check)


def to_torch(t, *, copy: bool | None = None, check_invariants: bool | None = None):
    """A PyTorch tensor of the same layout and device, sharing this tensor's memory where it can.

    Sparse tensors of every layout (with batch and dense dims) become PyTorch
    sparse tensors of that layout; a NumPy array becomes a strided tensor. The
    members are passed with :func:`torch.from_numpy`, so they are shared, with
    these copies (made when ``copy`` is ``None``, refused with ``ValueError``
    when it is ``False``):

    - the indices of a COO tensor with int32 indices (PyTorch's COO indices
      are int64 only); compressed layouts keep int32;
    - read-only values, such as those of ``load(path, mmap_mode="r")`` (PyTorch
      tensors are writable; load with ``mmap_mode="c"`` to share them);
    - arrays in non-native byte order or with negative strides.

    A tensor on a CUDA device becomes a torch tensor on that device, its
    members shared through DLPack (torch's current stream waits for the work
    queued on ours; before the memory is freed, ours waits for the work torch
    queued on that stream): only int32 COO indices are copied (on the device),
    and a device array becomes a strided CUDA tensor.

    Index members are shared although they are read-only views (a tensor's indices
    never change once it holds them): PyTorch has no read-only tensors, so writing
    to the result's indices through PyTorch is undefined behaviour. Block-transposed
    values (a BSC tensor from ``bsr.mT``) are shared: PyTorch accepts them. The COO ``is_coalesced()`` flag carries over.

    Parameters
    ----------
    t : SparseTensor or numpy.ndarray
    copy : bool, optional
        ``True`` copies every member; ``False`` never copies (``ValueError``
        where sharing is impossible); ``None`` (default) shares what it can.
    check_invariants : bool, optional
        Have PyTorch check the invariants again (its ``check_invariants=``
        argument). Defaults to this library's setting
        (:func:`sparsetensor.check_invariants`). Whatever it says, a tensor
        that was never checked (built with ``check_invariants=False``) is
        checked by this library first, once (the result is cached on the
        tensor), because PyTorch kernels do not guard their reads: broken
        indices raise :class:`~sparsetensor.InvariantError`, and a compressed
        tensor whose only fault is unsorted or repeated indices in a row is
        handed over coalesced (a copy). A tensor built on index arrays the
        caller still holds (taken without a copy), or computed from one, is
        checked again, since the caller may have written them.

    Examples
    --------
    >>> import numpy as np, sparsetensor as st
    >>> t = st.sparse_bsr_tensor([0, 1], [1], np.ones((1, 2, 2)), size=(2, 4))
    >>> x = st.to_torch(t)
    >>> x.layout, x.values().data_ptr() == t.values().ctypes.data
    (torch.sparse_bsr, True)
    """
    if isinstance(t, np.ndarray):
        return _tensor_of(import_torch(), t, copy, "the array")
    if is_device_array(t):
        torch, a = import_torch(), device_array(t)
        _require_torch_cuda(torch, a.device)
        return _device_tensor(torch, a, copy, "the array")
    if not isinstance(t, (COOTensor, CompressedTensor)):
        raise TypeError(f"to_torch expects a sparse tensor or an array, got {type(t).__name__}")
    torch = import_torch()
    check = resolve_check(check_invariants)
    t = ensure_valid_export(t, private=False)  # arrays written since our check: our error (PyTorch's would be a RuntimeError)
    if t.is_cuda:
        _require_torch_cuda(torch, t.device)
        return _sparse_of(torch, t, copy, check, lambda a, c, what, index: _device_tensor(torch, a, c, what))
    return _sparse_of(torch, t, copy, check, lambda a, c, what, index: _tensor_of(torch, a, c, what, index=index))
