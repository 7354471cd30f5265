"""``isinstance`` tests for tensors on a CUDA device.

A tensor on a GPU is a :class:`~sparsetensor.COOTensor` or :class:`~sparsetensor.CompressedTensor`
(one class tree for both devices) whose members are DeviceArrays. :class:`CudaSparseTensor`,
:class:`CudaCOOTensor` and :class:`CudaCompressedTensor` are not classes of tensors but tests:
``isinstance(t, CudaCOOTensor)`` means "a COOTensor on a CUDA device". The device modules of this
package import them from here (this module imports only the tensor classes).
"""

from __future__ import annotations

from .._core._tensor import COOTensor, CompressedTensor, SparseTensor

__all__ = ["CudaSparseTensor", "CudaCOOTensor", "CudaCompressedTensor"]


class _OnDevice(type):
    """``isinstance(t, CudaSparseTensor)``: ``t`` is a sparse tensor whose members live on a CUDA
    device (the same classes as on the CPU; ``t.is_cuda``)."""

    def __instancecheck__(cls, t):
        return isinstance(t, cls._cpu_class) and t.is_cuda

    def __subclasscheck__(cls, sub):
        return False


class CudaSparseTensor(metaclass=_OnDevice):
    """Not a class of tensors: a test. ``isinstance(t, CudaSparseTensor)`` means a sparse tensor
    (:class:`~sparsetensor.SparseTensor`) on a CUDA device."""

    _cpu_class = SparseTensor


class CudaCOOTensor(metaclass=_OnDevice):
    """``isinstance(t, CudaCOOTensor)``: a :class:`~sparsetensor.COOTensor` on a CUDA device."""

    _cpu_class = COOTensor


class CudaCompressedTensor(metaclass=_OnDevice):
    """``isinstance(t, CudaCompressedTensor)``: a :class:`~sparsetensor.CompressedTensor` on a CUDA device."""

    _cpu_class = CompressedTensor
