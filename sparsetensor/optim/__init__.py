"""Sparse optimizers on NumPy arrays: SGD, SparseAdam and Adagrad.

``torch.optim``'s updates for sparse (COO) gradients, as Cython kernels that coalesce a
gradient and update the rows it touches in one threaded pass. The same kernels serve
``sparsetensor.torch.optim`` (``torch.optim.Optimizer`` subclasses). Parameters on a CUDA
device (``sparsetensor.cuda.DeviceArray``) with gradients on that device take the same front
end, their steps run as CUDA kernels (``kernels/optim.cu``) and their state stays there.

Examples
--------
>>> import numpy as np, sparsetensor as st
>>> W = np.zeros((100, 4), np.float32)             # an embedding table
>>> opt = st.optim.SparseAdam([W], lr=0.1)
>>> rows = np.array([[5, 9, 5]])                    # row 5 twice: its gradients add up
>>> gW = st.sparse_coo_tensor(rows, np.ones((3, 4), np.float32), size=W.shape)
>>> opt.step([gW])
>>> np.flatnonzero(W.any(axis=1))
array([5, 9])
"""

from ._optimizers import SGD, Adagrad, Optimizer, SparseAdam

__all__ = ["Optimizer", "SGD", "SparseAdam", "Adagrad"]
