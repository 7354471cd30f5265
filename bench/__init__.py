"""Benchmarks of sparsetensor against SciPy and PyTorch (not tests). See bench/README.md."""

import warnings

# the peers get our tensors' index arrays without copies; those are read-only views (a tensor's
# indices never change), which torch.from_numpy warns about although the peers only read them
warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
