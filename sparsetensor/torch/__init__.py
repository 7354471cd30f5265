"""PyTorch autograd over sparsetensor's kernels: ``sparsetensor.torch.matmul(A, X)`` and friends.

Every function here takes PyTorch tensors on the CPU or a CUDA device (sparse of any of
the five layouts, with batch and dense dims where the op supports them, or strided), runs
sparsetensor's kernel on them without copying (the members are shared through :func:`sparsetensor.from_torch`)
and returns a torch tensor that torch's autograd differentiates with the rules of
:mod:`sparsetensor.autograd` (one ``torch.autograd.Function`` over the rule table). A
sparse input is differentiated w.r.t. its values; its gradient has its own layout and
pattern. Both ways of asking for it work:

- a COO or CSR leaf: ``A = A.detach().requires_grad_()``; after ``backward()`` ``A.grad``
  is a sparse tensor of A's layout and pattern;
- any layout built from a values leaf: ``values.requires_grad_()``, then
  ``A = torch.sparse_bsr_tensor(crow, col, values, size)``; the gradient reaches
  ``values.grad`` through torch's own constructor. (torch cannot hold ``.grad`` on a CSC,
  BSR or BSC leaf: use this form for those layouts.)

CUDA tensors run on the CUDA backend's kernels, members shared through DLPack and the
work ordered with torch's current stream (an op the device lacks raises
:class:`NotImplementedError` naming it); ``import sparsetensor.torch`` imports torch,
``import sparsetensor`` does not.

:mod:`sparsetensor.torch.optim` has ``SGD``, ``SparseAdam`` and ``Adagrad`` as
``torch.optim.Optimizer`` subclasses, drop-in for ``torch.optim``'s, whose sparse gradients
go through our one-pass kernels.

Examples
--------
>>> import torch, sparsetensor.torch as stt
>>> A = torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=torch.float64).to_sparse_csr().requires_grad_()
>>> X = torch.ones(2, 1, dtype=torch.float64, requires_grad=True)
>>> stt.matmul(A, X).sum().backward()
>>> A.grad.values(), X.grad.T
(tensor([1., 1.], dtype=torch.float64), tensor([[3., 2.]], dtype=torch.float64))
"""

from __future__ import annotations

from ..autograd.rules import RULES, UNARY
from ._function import apply

__all__ = ["apply", "matmul", "mm", "mv", "bmm", "addmm", "sampled_addmm", "add", "sub", "mul", "div",
           "sum", "mean", "softmax", "log_softmax", "to_dense", "from_dense", "sparse_mask", "coalesce",
           "to_sparse", "transpose", "permute", "unsqueeze", "squeeze", "reshape", "flatten", "tril", "triu", "kron", "mT", "narrow", "select", "index_select", "cat", "values", "embedding",
           "embedding_bag", "scale", "pow", "abs", "conj", "real", "imag", "sgn"] + sorted(UNARY) + [
    # no sparse gradient: these raise DenseGradientError naming to_dense()
    "exp", "exp2", "cos", "cosh", "acos", "acosh", "log", "log2", "log10", "sigmoid", "rsqrt", "reciprocal"]


def _op(name: str):
    def fn(*args, **kwargs):
        return apply(name, args, kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{name}`` on torch tensors through sparsetensor's kernels, differentiable by torch's "
                  f"autograd (see :mod:`sparsetensor.torch`; the arguments are those of sparsetensor's "
                  f"``{name}``, tensors positional).")
    return fn


for _name in __all__[1:]:
    if _name in RULES:
        globals()[_name] = _op(_name)
del _name


def embedding(weight, idx):
    """``weight[idx]`` whose weight gradient is a coalesced hybrid COO tensor (touched rows only).

    ``weight`` is a dense ``(num, dim)`` torch tensor (a leaf with ``requires_grad``), ``idx``
    an integer tensor of any shape. ``weight.grad`` becomes a sparse COO tensor with
    ``sparse_dim=1`` and one dense dim, duplicates summed (sparsetensor's radix coalesce):
    what ``torch.nn.Embedding(sparse=True)`` gives, accepted by ``torch.optim.SparseAdam``
    and ``torch.optim.SGD``.

    Examples
    --------
    >>> import torch, sparsetensor.torch as stt
    >>> W = torch.zeros(5, 2, requires_grad=True)
    >>> stt.embedding(W, torch.tensor([1, 3, 1])).sum().backward()
    >>> g = W.grad
    >>> g.is_sparse, g._nnz(), g._indices(), g._values()
    (True, 2, tensor([[1, 3]]), tensor([[2., 2.],
            [1., 1.]]))
    """
    _check_index(idx, "embedding")
    return apply("embedding", (weight, idx), {})


def embedding_bag(weight, idx, offsets=None, mode: str = "sum", per_sample_weights=None):
    """``EmbeddingBag``: the sum or mean of the rows of each bag, with a hybrid COO weight gradient.

    ``idx`` is 2-d (one bag per row) or 1-d with ``offsets`` (bag starts, PyTorch's form);
    ``per_sample_weights`` (``mode="sum"``) scale the rows and are differentiated too.

    Examples
    --------
    >>> import torch, sparsetensor.torch as stt
    >>> W = torch.eye(3, requires_grad=True)
    >>> stt.embedding_bag(W, torch.tensor([0, 2, 1]), torch.tensor([0, 2]), mode="mean")
    tensor([[0.5000, 0.0000, 0.5000],
            [0.0000, 1.0000, 0.0000]], grad_fn=<SparseRuleBackward>)
    """
    _check_index(idx, "embedding_bag")
    if offsets is not None:
        _check_index(offsets, "embedding_bag", "offsets")
    return apply("embedding_bag", (weight, idx, offsets, mode, per_sample_weights), {})


def __getattr__(name):
    # ``stt.optim`` after ``import sparsetensor.torch``, as ``torch.optim`` after ``import torch``
    # (SPEC 1 lazy loading: the submodule is imported on first access)
    if name == "optim":
        import importlib

        return importlib.import_module(f"{__name__}.optim")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_index(idx, name: str, what: str = "indices"):
    import torch

    if not isinstance(idx, torch.Tensor):
        return
    if idx.requires_grad:
        raise TypeError(f"sparsetensor.torch.{name}: the {what} tensor requires grad; {what} are constants "
                        "(an integer tensor), they have no gradient")
    if idx.is_floating_point() or idx.is_complex():
        raise TypeError(f"sparsetensor.torch.{name}: {what} must be an integer tensor, got {idx.dtype}")
