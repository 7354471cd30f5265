"""The device counterpart of the tape's :class:`._tape._Traced`: a dense value on a GPU that depends
on vjp's arguments, inside ``fn``.

A :class:`sparsetensor.cuda.DeviceArray` has a few methods that make new arrays (``a * s``,
``a / s``, ``a + b``, ``a - b``, ``-a``, ``reshape``, ``astype``, views, ``swapaxes``, ``take``,
``copy``); on a recorded value the linear ones are recorded (their pullbacks run on the device) and the others raise
NotImplementedError, so a step of ``fn`` can never drop out of the gradient silently. Outside
``fn`` (no tape recording) the class behaves as a DeviceArray. The class is made on first use (it
needs :mod:`sparsetensor.cuda`).
"""

from __future__ import annotations

import numpy as np

from .._core import _recording
from . import _device

__all__ = ["traced", "plain"]

_CLASS = None


def _recording_tape(x):
    tape = _recording.current()
    return tape if tape is not None and tape.tracks(x) else None


def _record(tape, x, out, back):
    out = tape.keep_value(plain(out))
    tape.nodes.append((out, back, (x,)))
    return out


def _make_class():
    from ..cuda._array import DeviceArray

    class TracedDeviceArray(DeviceArray):
        """A DeviceArray recorded on vjp's tape (see the module docstring)."""

        __slots__ = ()

        def _scaled(self, scalar, op: str):
            tape = _recording_tape(self)
            out = DeviceArray._scaled(plain(self), scalar, op)
            if tape is None or out is NotImplemented:
                return out
            s = np.conj(scalar)
            return _record(tape, self, out, lambda G: (G * s if op == "mul" else G / s,))

        def _combined(self, other, op: str):
            return _sum_or_difference(self, other, op)

        # a subclass's reflected method runs before the plain left operand's own: plain + traced
        # is recorded too
        def __radd__(self, other):
            return _sum_or_difference(other, self, "add")

        def __rsub__(self, other):
            return _sum_or_difference(other, self, "sub")

        def __neg__(self):
            tape = _recording_tape(self)
            out = DeviceArray.__neg__(plain(self))
            return out if tape is None else _record(tape, self, out, lambda G: (-plain(G),))

        def reshape(self, *shape):
            tape = _recording_tape(self)
            out = DeviceArray.reshape(plain(self), *shape)
            if tape is None:
                return out
            was = self.shape
            return _record(tape, self, out, lambda G: (G.reshape(was),))

        def astype(self, dtype, copy: bool = True):
            tape = _recording_tape(self)
            out = DeviceArray.astype(plain(self), dtype, copy)
            if tape is None or np.dtype(dtype).kind not in "fc":
                return out
            was = self.dtype
            return _record(tape, self, out, lambda G: (_device.cast(G, was),))

        def _unrecorded(name):
            def method(self, *args, **kwargs):
                if _recording_tape(self) is not None:
                    raise NotImplementedError(f"vjp: DeviceArray.{name} of a value that depends on the differentiated "
                                              "arguments is not recorded (a * s, a / s, a + b, a - b, -a, reshape and astype are)")
                return getattr(DeviceArray, name)(plain(self), *args, **kwargs)

            method.__name__ = name
            return method

        for _name in ("__getitem__", "view", "swapaxes", "take", "copy"):
            locals()[_name] = _unrecorded(_name)
        del _name, _unrecorded

    return TracedDeviceArray


def _sum_or_difference(x, y, op: str):
    """``x + y`` or ``x - y`` of device arrays, recorded where either is (each operand's cotangent is
    ``G`` or ``-G`` in its own dtype)."""
    from ..cuda._array import DeviceArray

    if not (isinstance(x, DeviceArray) and isinstance(y, DeviceArray)):
        return NotImplemented
    out = DeviceArray._combined(plain(x), plain(y), op)
    tape = _recording_tape(x) if isinstance(x, _CLASS) else None
    tape = tape or (_recording_tape(y) if isinstance(y, _CLASS) else None)
    if tape is None:
        return out
    out = tape.keep_value(plain(out))

    def back(G):
        G = plain(G)
        gy = G if op == "add" else -G
        return tuple(g if g.dtype == a.dtype else _device.cast(g, a.dtype) for g, a in ((G, x), (gy, y)))

    tape.nodes.append((out, back, (x, y)))
    return out


def traced(x):
    """Device array ``x`` as the recorded value ``fn`` sees (sharing its memory)."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _make_class()
    return _CLASS(x._owner, x._ptr, x._shape, x._dtype, x._device)


def plain(x):
    """A recorded device value as a plain DeviceArray (the same memory); anything else as it is."""
    if _CLASS is not None and type(x) is _CLASS:
        from ..cuda._array import DeviceArray

        return DeviceArray(x._owner, x._ptr, x._shape, x._dtype, x._device)
    return x
