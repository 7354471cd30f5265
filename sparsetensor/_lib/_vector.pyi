import numpy as np

def axpy(a: complex, x: np.ndarray, y: np.ndarray, nthreads: int) -> None: ...
# x, y: (n,) C-contiguous, one dtype of float32/float64/complex64/complex128; y is updated in place

def sub_combination(c: np.ndarray, V: np.ndarray, w: np.ndarray, nthreads: int) -> None: ...
# c: (K,), V: (K, n) C-contiguous, w: (n,) C-contiguous, one dtype; w is updated in place
