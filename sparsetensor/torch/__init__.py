"""PyTorch front ends over sparsetensor's kernels (needs ``pip install torch==2.13.0``).

Submodules import torch when they are imported; ``import sparsetensor`` never does.

- :mod:`sparsetensor.torch.optim`: ``SGD``, ``SparseAdam`` and ``Adagrad`` as
  ``torch.optim.Optimizer`` subclasses, drop-in for ``torch.optim``'s, whose sparse
  gradients go through our one-pass kernels.
"""
