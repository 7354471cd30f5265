"""``vjp`` of a function composed of our ops: record the ops as ``fn`` runs them, then pull back.

While ``fn`` runs, every op of the table (functions, methods, operators), ``values()``,
``mT`` and ``from_dense`` that receives a value depending on the differentiated arguments
runs its derivative rule's forward and leaves ``(out, back, args)`` on the tape; the
pullback walks the tape backwards, summing the cotangents of values used more than once.
Values are followed by identity. A dense intermediate is handed to ``fn`` as a
:class:`_Traced` array (an ndarray subclass): our ops accept it, and the NumPy arithmetic
a loss is written with (``+ - * / **``, ``@``, ``sum``, ``mean``, indexing, ``exp``, ``log``
..., :mod:`._numpy_rules`) is recorded too; any other NumPy operation on it raises rather
than return a result whose gradient would silently miss that step, as does an op without a
rule when its result depends on the arguments and has float or complex values.
"""

from __future__ import annotations

import functools

import numpy as np

from .._core import _recording
from .._core._tensor import SparseTensor
from . import _device, _numpy_rules, _traced_device
from ._core import check_cotangent, wanting
from .rules import RULES

_HINT = ("inside vjp's function, sparsetensor's ops with a derivative rule and NumPy's basic arithmetic "
         "(+ - * / **, @, sum, mean, indexing, .T, transpose, reshape, exp, log, sqrt, sin, cos, tanh, abs) are "
         "recorded")


class _Traced(np.ndarray):
    """A dense value that depends on vjp's arguments, inside ``fn`` (see the module docstring)."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        tape = _recording.current()
        if tape is None:  # outside fn (a value kept past vjp): a plain computation
            return getattr(ufunc, method)(*_unwrap(inputs), **_unwrap(kwargs))
        if any(isinstance(x, SparseTensor) for x in inputs):
            return NotImplemented  # the sparse operand's own __array_ufunc__ (recorded as its op)
        return tape.ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        tape = _recording.current()
        if tape is not None and any(isinstance(x, SparseTensor) for x in _leaves((args, kwargs))):
            return NotImplemented  # the sparse operand's own __array_function__ (recorded as its op)
        if tape is not None and func in _COMPOSED:  # NumPy's code for them calls recorded ufuncs and methods
            return _COMPOSED[func](*args, **kwargs)
        out = func(*_unwrap(args), **_unwrap(kwargs))
        if tape is not None and _differentiable(out):
            raise NotImplementedError(f"vjp: NumPy's {func.__name__} has no derivative rule here and ran on a value "
                                      f"that depends on the differentiated arguments; {_HINT}")
        return out

    def __getitem__(self, key):
        tape = _recording.current()
        if tape is None or not tape.tracks(self):
            return self.view(np.ndarray)[key]
        return tape.getitem(self, key)

    def dot(self, b, out=None):  # np.dot's way (ndarray.dot does not reach __array_function__)
        return _dot(self, b, out)

    # Python numbers out of a value that depends on the arguments would leave the tape unseen
    def _leaving(self, what: str) -> None:
        tape = _recording.current()
        if tape is not None and tape.tracks(self):
            raise NotImplementedError(f"vjp: {what} of a value that depends on the differentiated arguments "
                                      f"would drop its gradient (a Python number is not recorded); {_HINT}")

    def __float__(self):
        self._leaving("float()")
        return float(self.view(np.ndarray))

    def __int__(self):
        self._leaving("int()")
        return int(self.view(np.ndarray))

    def __complex__(self):
        self._leaving("complex()")
        return complex(self.view(np.ndarray))

    def item(self, *args):
        self._leaving(".item()")
        return self.view(np.ndarray).item(*args)

    def tolist(self):
        self._leaving(".tolist()")
        return self.view(np.ndarray).tolist()

    # transposes and reshapes: views whose cotangent is the inverse view of the output's
    def transpose(self, *axes):
        plain = self.view(np.ndarray)
        axes = axes[0] if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))) else axes
        axes = tuple(reversed(range(plain.ndim))) if axes is None or axes == () else tuple(a % plain.ndim for a in axes)
        inverse = tuple(np.argsort(axes))
        return _viewed(self, plain.transpose(axes), lambda G: G.transpose(inverse))

    @property
    def T(self):
        return self.transpose()

    @property
    def mT(self):
        return self.swapaxes(-1, -2)

    def swapaxes(self, a, b):
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return self.transpose(axes)

    def reshape(self, *shape, order="C"):
        plain = self.view(np.ndarray)
        if order != "C":
            raise NotImplementedError(f"vjp: reshape(order={order!r}) of a recorded array; {_HINT}")
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _viewed(self, plain.reshape(shape), lambda G: G.reshape(plain.shape))

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    def flatten(self, order="C"):
        return self.reshape(-1, order=order)  # recorded outputs have their own memory: a copy already

    def copy(self, order="C"):
        return _viewed(self, self.view(np.ndarray).copy(order), lambda G: G)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        if out is not None:
            return np.mean(self.view(np.ndarray), axis, dtype, out, keepdims)
        total = np.add.reduce(self, axis=axis, dtype=dtype, keepdims=keepdims)
        return np.true_divide(total, max(self.size // max(np.size(total), 1), 1))

    def __repr__(self):
        return repr(self.view(np.ndarray))

    def __str__(self):
        return str(self.view(np.ndarray))


def _viewed(x: _Traced, out: np.ndarray, inverse):
    """``out``, a transpose or reshape of traced ``x``, recorded (cotangent ``inverse(G)``) where ``x``
    depends on the arguments."""
    tape = _recording.current()
    if tape is None or not tape.tracks(x):
        return out
    return tape.viewed(x, out, inverse)


def _dot(a, b, out=None):
    if out is None and 1 <= np.ndim(a) <= 2 and 1 <= np.ndim(b) <= 2:
        return np.matmul(a, b)  # the same product for these ranks, recorded as matmul
    raise NotImplementedError(f"vjp: np.dot of {np.ndim(a)}-d and {np.ndim(b)}-d arrays (or with out=) is not "
                              f"recorded; {_HINT}")


_UFUNC_OPS = {"subtract": "sub", "multiply": "mul", "true_divide": "div", "divide": "div", "negative": "neg",
              "absolute": "abs", "conjugate": "conj", "power": "pow"}  # NumPy's ufunc names that differ from ours
_FUNCTION_OPS = {np.sum: "sum", np.mean: "mean", np.reshape: "reshape", np.hstack: "hstack", np.vstack: "vstack",
                 np.tril: "tril", np.triu: "triu", np.kron: "kron"}  # NumPy functions on sparse tensors recorded as our ops
_COMPOSED = {np.sum: np.sum._implementation, np.mean: np.mean._implementation, np.dot: _dot,
             np.transpose: lambda a, axes=None: a.transpose(axes), np.swapaxes: lambda a, axis1, axis2: a.swapaxes(axis1, axis2),
             np.reshape: lambda a, shape=None, order="C", *, newshape=None, copy=None: a.reshape(
                 shape if newshape is None else newshape, order=order),
             np.ravel: lambda a, order="C": a.ravel(order), np.copy: lambda a, order="K", subok=False: a.copy(order)}


def promoted(G, dtype):
    """Cotangent values ``G`` (host or device) in the result type of theirs and ``dtype``."""
    if _device.on_device(G):
        return _device.cast(G, np.result_type(G.dtype, dtype))
    G = np.asarray(G)
    return G.astype(np.result_type(G, dtype), copy=False)


def zeros_like(x):
    """Zeros of ``x``'s shape and dtype, on ``x``'s device."""
    return _device.zeros(x.shape, x.dtype, x) if _device.on_device(x) else np.zeros_like(x)


def pulled(name: str, back, G):
    """``back(G)``, the rule ``name``'s pullback; a step without a GPU kernel says which rule it was."""
    try:
        return back(G)
    except NotImplementedError as e:
        if not _device.on_device(G) or str(e).startswith(f"the gradient of {name}"):
            raise
        raise NotImplementedError(f"the gradient of {name} on {G.device}: {e}") from None


def _where(a: np.ndarray) -> tuple:
    return a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str


def _unwrap(x):
    if isinstance(x, _Traced):
        return x.view(np.ndarray)
    if _device.on_device(x) and not isinstance(x, SparseTensor):
        return _traced_device.plain(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(y) for y in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _leaves(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _leaves(y)
    else:
        yield x


def _differentiable(x) -> bool:
    """Whether ``x`` (or a member of a tuple/list ``x``) holds float or complex values."""
    if isinstance(x, (list, tuple)):
        return any(_differentiable(y) for y in x)
    if isinstance(x, SparseTensor):
        return x.dtype.kind in "fc"
    return isinstance(x, (np.ndarray, np.generic, float, complex)) and np.asarray(x).dtype.kind in "fc"


def _numpy_axis(name: str, kwargs: dict) -> dict:
    """``sum``/``mean`` take NumPy's ``axis=``/``keepdims=`` in the table; their rules take ``dim``/``keepdim``."""
    if name not in ("sum", "mean") or not ({"axis", "keepdims", "out"} & kwargs.keys()):
        return kwargs
    if kwargs.get("out") is not None:
        raise NotImplementedError(f"vjp: {name}(..., out=) writes into an array in place, which is not recorded")
    kwargs = dict(kwargs)
    kwargs.pop("out", None)
    if "axis" in kwargs:
        kwargs["dim"] = kwargs.pop("axis")
    if "keepdims" in kwargs:
        kwargs["keepdim"] = bool(kwargs.pop("keepdims"))
    return kwargs


class Tape:
    """The ops recorded while ``fn`` runs (one thread, one call of :func:`vjp`)."""

    def __init__(self):
        self.nodes: list = []  # (out, back, args) in the order the ops ran
        self.keep: dict = {}  # id -> value: the values that depend on the arguments (kept alive: ids stay unique)
        self.dense_at: dict = {}  # (address, shape, strides, dtype) -> the recorded array there (constructors' views)

    def watch(self, x):
        """The argument ``x`` as ``fn`` sees it (a dense array as a :class:`_Traced` view); None: not differentiated."""
        if isinstance(x, SparseTensor):
            if x.dtype.kind not in "fc":
                return x
            if id(x) in self.keep:  # one tensor given for two arguments: each gets its own cotangent, as in JAX
                x = x._replace_values(x._values)
        elif isinstance(x, np.ndarray) and x.dtype.kind in "fc":
            x = x.view(_Traced)
            self.dense_at[_where(x)] = x
        elif _device.on_device(x) and np.dtype(x.dtype).kind in "fc":
            x = _traced_device.traced(_device._array(x))
        else:
            return x
        self.keep[id(x)] = x
        return x

    def _keep_out(self, out):
        if isinstance(out, (list, tuple)):
            return type(out)(self._keep_out(o) for o in out)
        if isinstance(out, SparseTensor):
            # a rule may hand back its argument (a coalesce of a coalesced tensor): the output must be a
            # value of its own, or the pullback would add its cotangent to itself
            value = out._replace_values(out._values) if id(out) in self.keep else out
        elif isinstance(out, (np.ndarray, np.generic)) and np.asarray(out).dtype.kind in "fc":
            value = np.asarray(out).view(_Traced)
            self.dense_at[_where(value)] = value
        elif _device.on_device(out) and np.dtype(out.dtype).kind in "fc":
            value = _traced_device.traced(out)
        else:
            return out
        self.keep[id(value)] = value
        return value

    def keep_value(self, out):
        """``out`` (an op's result) recorded as a value of the tape, as fn sees it."""
        return self._keep_out(out)

    def _adopt(self, t: SparseTensor) -> bool:
        """A tensor built by a constructor around a recorded dense array (its values are a view of
        it, as ``torch.sparse_csr_tensor(crow, col, values)`` of a values leaf): record the
        construction. False when ``t`` does not come from one."""
        v = t._values
        if not isinstance(v, np.ndarray):
            return False
        src = self.dense_at.get(_where(v))
        if src is None:
            if any(np.shares_memory(v, a) for a in self.dense_at.values()):
                raise NotImplementedError(f"vjp: a {t.layout.name} tensor was built around a reshaped or sliced view "
                                          f"of a recorded array; pass values of its values() shape {v.shape}")
            return False
        self.nodes.append((t, lambda G: (G.values(),), (src,)))
        self.keep[id(t)] = t
        return True

    def tracks(self, x) -> bool:
        if id(x) in self.keep:
            return True
        if isinstance(x, _Traced):
            raise NotImplementedError("vjp: an array derived from a recorded value by a NumPy step the tape does not "
                                      f"record (.view, stride tricks, out=) reached an op; {_HINT}")
        return isinstance(x, SparseTensor) and x.dtype.kind in "fc" and self._adopt(x)

    def call(self, name: str, impl, args: tuple, kwargs: dict):
        """Run the op ``name`` (``impl`` where it has no rule), recording it when it reads a recorded value."""
        if name == "__array_ufunc__" and len(args) > 3 and args[2] == "__call__" and not kwargs:
            # np.multiply(t, x) & co. on a sparse operand: recorded as the op the ufunc runs
            n = args[1].__name__
            op = _UFUNC_OPS.get(n, n)
            if op in RULES:
                head = args[:3]
                return self.call(op, lambda *a: impl(*head, *a), args[3:], {})
        if name == "__array_function__" and len(args) == 5 and not kwargs:
            # np.sum(t) & co. on a sparse operand: recorded as the op NumPy's function runs
            func, types = args[1], args[2]
            op = _FUNCTION_OPS.get(func)
            if op in RULES:
                return self.call(op, lambda *a, **k: impl(args[0], func, types, a, k), tuple(args[3]), dict(args[4]))
            name = f"np.{func.__name__}"
        if any(self.tracks(v) for v in _leaves(tuple(kwargs.values()))):
            raise NotImplementedError(f"vjp: pass the tensors of {name} positionally inside vjp's function (a "
                                      "keyword argument that depends on the arguments is not differentiated)")
        hit = any([self.tracks(a) for a in _leaves(args)])  # a list: every argument is checked
        if hit and name.endswith("_") and not name.endswith("__"):
            raise NotImplementedError(f"vjp: the in-place {name} on a value that depends on the differentiated "
                                      f"arguments would change what the tape recorded; use {name[:-1]} (a new value)")
        plain_args, plain_kwargs = _unwrap(args), _unwrap(kwargs)
        rule = RULES.get(name) if hit else None
        prev = _recording.swap(None)  # an op's own inside is not recorded
        try:
            if rule is None:
                out = impl(*plain_args, **plain_kwargs)
            else:
                out, back = rule(*plain_args, **_numpy_axis(name, plain_kwargs))
        finally:
            _recording.swap(prev)
        if not hit:
            return out
        if rule is None:
            if _differentiable(out):
                raise NotImplementedError(f"vjp: {name} has no derivative rule and ran on a value that depends on the "
                                          f"differentiated arguments; the rules: {', '.join(sorted(RULES))}")
            return out
        out = self._keep_out(out)
        self.nodes.append((out, functools.partial(pulled, name, back), args))
        return out

    def ufunc(self, ufunc, method: str, inputs: tuple, kwargs: dict):
        """A NumPy ufunc on a traced array: recorded by its rule (``_numpy_rules``) where its result
        depends on the arguments; no rule, ``out=`` or ``where=``: NotImplementedError."""
        hit = any([self.tracks(x) for x in inputs])
        plain_inputs, plain_kwargs = _unwrap(inputs), _unwrap(kwargs)
        out = getattr(ufunc, method)(*plain_inputs, **plain_kwargs)
        if not hit or not _differentiable(out):
            return out
        what = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
        if any(x is not None for x in _leaves(kwargs.get("out", None))) or kwargs.get("where", True) is not True:
            raise NotImplementedError(f"vjp: np.{what} with out= or where= writes in place, which is not recorded; "
                                      "write it without them")
        if method == "__call__" and ufunc.__name__ in _numpy_rules.CALL:
            back = _numpy_rules.CALL[ufunc.__name__](plain_inputs, out)
        elif method == "reduce" and ufunc is np.add:
            back = _numpy_rules.add_reduce(plain_inputs[0], plain_kwargs.get("axis", 0),
                                           plain_kwargs.get("keepdims", False))
        else:
            raise NotImplementedError(f"vjp: np.{what} has no derivative rule and ran on a value that depends on "
                                      f"the differentiated arguments; {_HINT}")
        out = self._keep_out(out)
        self.nodes.append((out, back, inputs))
        return out

    def viewed(self, x: _Traced, out: np.ndarray, inverse):
        """``out``, a transpose or reshape of ``x``, recorded: its cotangent is ``inverse(G)``."""
        out = self._keep_out(out.copy() if out.base is not None else out)  # its own memory, as other outputs
        self.nodes.append((out, lambda G: (inverse(np.asarray(G)),), (x,)))
        return out

    def getitem(self, x: _Traced, key):
        """``x[key]`` of a traced array: the cotangent is scattered back (summed where ``key`` repeats)."""
        plain = x.view(np.ndarray)
        key = _unwrap(key)
        out = plain[key]

        fancy = any(isinstance(k, (list, np.ndarray)) for k in (key if isinstance(key, tuple) else (key,)))

        def back(G):
            dx = np.zeros(plain.shape, dtype=np.result_type(G, plain))
            if fancy:  # an index array may repeat an element: its cotangents add up
                np.add.at(dx, key, G)
            else:
                dx[key] += G
            return (dx,)

        out = self._keep_out(out if isinstance(out, np.ndarray) else np.asarray(out))
        self.nodes.append((out, back, (x,)))
        return out

    # -- the pullback ----------------------------------------------------------------------------
    def _recorded(self, arg) -> bool:
        if isinstance(arg, (list, tuple)):
            return any(self._recorded(a) for a in arg)
        return id(arg) in self.keep

    def _add(self, cts: dict, arg, ct) -> None:
        if isinstance(arg, (list, tuple)):
            for a, c in zip(arg, ct if isinstance(ct, (list, tuple)) else [None] * len(arg)):
                self._add(cts, a, c)
            return
        if ct is None or id(arg) not in self.keep:
            return
        if _device.on_device(arg):
            self._add_device(cts, arg, ct)
            return
        if not isinstance(ct, SparseTensor):
            ct = np.asarray(ct)
            if arg.dtype.kind != "c" and ct.dtype.kind == "c":
                ct = ct.real
            if not isinstance(arg, SparseTensor):
                ct = np.broadcast_to(ct, arg.shape)
        old = cts.get(id(arg))
        if old is None:
            cts[id(arg)] = ct
        elif isinstance(old, SparseTensor) or isinstance(ct, SparseTensor):
            cts[id(arg)] = _dense(old) + _dense(ct)
        else:
            cts[id(arg)] = old + ct

    def _add_device(self, cts: dict, arg, ct) -> None:
        if not isinstance(ct, SparseTensor):
            if not _device.on_device(ct):
                raise AssertionError(f"internal: a host cotangent ({type(ct).__name__}) for a value on {arg.device}")
            if np.dtype(arg.dtype).kind != "c":
                ct = _device.kernels().real(ct)
        old = cts.get(id(arg))
        if old is None:
            cts[id(arg)] = ct
        else:
            cts[id(arg)] = _device.add(_dense(old), _dense(ct))

    def pullback(self, outs: tuple, gs: tuple) -> dict:
        """The cotangents of every recorded value, from the output cotangents ``gs``: id -> raw cotangent
        (values of a sparse value's pattern, an array of a dense value's shape)."""
        cts: dict = {}
        for o, g in zip(outs, gs):
            if g is not None:
                self._add(cts, o, check_cotangent(g, _unwrap(o), "vjp"))
        for out, back, args in reversed(self.nodes):
            G = cts.pop(id(out), None)  # every use of ``out`` came later on the tape: its sum is complete
            if G is None:
                continue
            if isinstance(out, SparseTensor):
                G = out._replace_values(promoted(G, out.dtype))
            elif isinstance(G, SparseTensor):
                G = G.to_dense()
            elif not _device.on_device(G):
                G = np.asarray(G)
            with wanting([self._recorded(a) for a in args]):  # no cotangent for a constant argument
                pulled_back = tuple(back(G))
            for a, c in zip(args, pulled_back):
                self._add(cts, a, c)
        return cts


def _dense(x):
    return x.to_dense() if isinstance(x, SparseTensor) else x


def trace(fn, args: tuple, kwargs: dict):
    """Run ``fn(*args, **kwargs)`` on a tape: ``(tape, the arguments as fn saw them, fn's output)``."""
    tape = Tape()
    seen = tuple(tape.watch(a) for a in args)
    _recording.start(tape)
    try:
        out = fn(*seen, **kwargs)
    finally:
        _recording.stop()
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        if id(o) not in tape.keep:
            what = "an array NumPy made" if isinstance(o, (np.ndarray, np.generic)) else type(o).__name__
            raise NotImplementedError(f"vjp: fn returned {what} that was not computed from the differentiated "
                                      f"arguments by recorded ops (NumPy's operations are not recorded); {_HINT}")
    return tape, seen, out


def plain(out):
    """fn's output as the ops give it outside vjp: an ndarray (a NumPy scalar for 0 dims), not the traced view."""
    if isinstance(out, tuple):
        return tuple(plain(o) for o in out)
    if isinstance(out, _Traced):
        a = out.view(np.ndarray)
        return a[()] if a.ndim == 0 else a
    return _traced_device.plain(out)
