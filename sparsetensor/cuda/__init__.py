"""sparsetensor on CUDA devices: device arrays, device tensors, NVRTC-compiled kernels.

Nothing here imports cuda-python until it is used, so ``import sparsetensor`` (and
``import sparsetensor.cuda``) work without it; :func:`is_available` says whether a
device can be used. Install the backend with ``pip install 'sparsetensor[cuda]'``.

- :class:`DeviceArray`: a C-contiguous device array with ``__cuda_array_interface__``
  and ``__dlpack__`` (zero-copy to CuPy and PyTorch); ``.get()`` copies to the host.
- :func:`to_device` / :func:`to_host`: move sparse tensors; :func:`coo_tensor` /
  :func:`compressed_tensor`: build them from device arrays without a copy.
- Ops are not here: a tensor on a GPU takes the same ops as on the CPU (``st.matmul(t, x)``,
  ``t + u``, ``t.sum(1)``, ``t.to_dense()``, ``st.from_dense(device_array)``, ...), which
  resolve the backend from their operands; an op without a GPU kernel raises
  NotImplementedError naming it (nothing is copied to the host).
- Ops run on one non-blocking stream per device and synchronise only when a host value
  is needed; :func:`stream_order` orders them against a CuPy/PyTorch/raw stream.
- Kernels are the ``.cu`` files of ``sparsetensor/kernels``, compiled by NVRTC for the
  device's architecture on first use and cached on disk (``$SPARSETENSOR_CUDA_CACHE``,
  default ``~/.cache/sparsetensor/cuda``); :func:`precompile` fills the cache ahead of time.
"""

from __future__ import annotations

import importlib

from .._core import _device

__all__ = [
    "DeviceArray", "as_device_array", "is_available", "device_count", "unavailable_reason", "synchronize",
    "stream_order",
    "CudaCOOTensor", "CudaCompressedTensor", "CudaSparseTensor", "is_cuda_tensor",
    "to_device", "to_host", "coo_tensor", "compressed_tensor", "precompile", "CudaError", "CompileError",
]

_LAZY = {
    "DeviceArray": "_array", "as_device_array": "_array",
    "is_available": "_driver", "device_count": "_driver", "unavailable_reason": "_driver", "CudaError": "_driver",
    "stream_order": "_driver",
    "CompileError": "_nvrtc",
    "CudaCOOTensor": "tensor", "CudaCompressedTensor": "tensor", "CudaSparseTensor": "tensor",
    "is_cuda_tensor": "tensor", "to_device": "tensor", "to_host": "tensor", "coo_tensor": "tensor",
    "compressed_tensor": "tensor",
}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'sparsetensor.cuda' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Registered:
    """What :mod:`sparsetensor._core._device` looks up for ``"cuda"`` (registered below): each entry
    loads this package's modules on first use, so the registration itself costs no import."""

    @staticmethod
    def get_device(spec) -> str:
        from . import _driver

        try:
            return _driver.get_device(spec).name
        except (ImportError, _driver.CudaError) as e:
            raise NotImplementedError(f"device {spec!r}: CUDA is not available here ({type(e).__name__}: {e}); "
                                      "tensors live on 'cpu'") from None

    @staticmethod
    def backend():
        from .._backend import cuda as _backend

        return _backend

    @staticmethod
    def to_device(t, device):
        from .tensor import to_device

        return to_device(t, device)

    @staticmethod
    def to_host(t):
        from .tensor import to_host

        return to_host(t)

    @staticmethod
    def as_device_array(x):
        from ._array import as_device_array

        return as_device_array(x)

    @staticmethod
    def coo_tensor(*args, **kwargs):
        from .tensor import coo_tensor

        return coo_tensor(*args, **kwargs)

    @staticmethod
    def compressed_tensor(*args, **kwargs):
        from .tensor import compressed_tensor

        return compressed_tensor(*args, **kwargs)


_device.register("cuda", _Registered)


def synchronize(device="cuda") -> None:
    """Wait for the work queued on the device's sparsetensor stream."""
    from ._driver import get_device

    get_device(device).synchronize()


def precompile(arch=None, *, device="cuda") -> list:
    """Compile every kernel file for ``arch`` (e.g. 90), or for ``device``'s architecture,
    filling the disk cache; returns the compiled programs. Needs NVRTC, not a GPU when
    ``arch`` is given."""
    from . import _nvrtc, _source

    if arch is None:
        from ._driver import get_device
        from ._module import target_for

        arch, ptx = target_for(get_device(device).compute_capability)
    else:
        ptx = False
    return [_nvrtc.compile_kernel_file(f, int(arch), ptx=ptx) for f in _source.kernel_files()]
