"""The CUDA sources: where they are, which kernels they declare, which instantiations exist.

The ``.cu``/``.cuh`` files of ``kernels/`` are package data (``sparsetensor/kernels/``
once installed), read with :mod:`importlib.resources`, falling back to the source
tree's ``kernels/`` for a checkout. Every kernel in a ``.cu`` file is introduced by a
line ``// st:kernel CLASS ...`` naming the type class of each template parameter; its
declaration gives the parameter types the launcher packs. This module parses both, so
the ``.cu`` file is the one place where a kernel, its instantiations and its signature
are written down.

Nothing here needs cuda-python.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TYPE_CLASSES", "KernelDecl", "SourceFile", "kernel_files", "headers", "source", "declarations",
           "name_expression"]

# Type classes: key (what Python code asks for) -> C++ spelling in a name expression.
TYPE_CLASSES: dict[str, dict] = {
    "index": {"int32": "int", "int64": "long long"},
    "value": {"float16": "st::half_t", "float32": "float", "float64": "double",
              "complex64": "st::cfloat", "complex128": "st::cdouble"},
    # the value types and the integers (read as i64, wrapping): products, sums, merges
    "arith": {"int8": "signed char", "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
              "float16": "st::half_t", "float32": "float", "float64": "double", "complex64": "st::cfloat",
              "complex128": "st::cdouble"},
    "integer": {"int8": "signed char", "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char"},
    "float": {"float16": "st::half_t", "float32": "float", "float64": "double"},
    "complex": {"complex64": "st::cfloat", "complex128": "st::cdouble"},
    "real": {"float32": "float", "float64": "double"},
    # the factorizations' and triangular solves' values (sparsetensor.ops.factor)
    "field": {"float32": "float", "float64": "double", "complex64": "st::cfloat", "complex128": "st::cdouble"},
    # the ordered dtypes (amax/amin, casts); bool moves as uint8
    "num": {"int8": "signed char", "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
            "float16": "st::half_t", "float32": "float", "float64": "double"},
    "raw": {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "st::u128"},
    "ztest": {"uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
              "uint64": "unsigned long long", "float32": "float", "float64": "double"},
}

# Kernel parameter types the launcher can pack: a pointer, or one of these scalars.
SCALAR_PARAMS = {"i64": "q", "long long": "q", "u64": "Q", "unsigned long long": "Q", "int": "i", "double": "d"}

_MARK = re.compile(r"^\s*//\s*st:kernel\b(.*)$")
_TEMPLATE = re.compile(r"^\s*template\s*<(.*)>\s*$")
_GLOBAL = re.compile(r"__global__\s+void\s+(\w+)\s*\(")


@dataclass(frozen=True)
class KernelDecl:
    """One kernel of a ``.cu`` file."""

    file: str                  # "validate.cu"
    name: str                  # "compressed_plain"
    classes: tuple             # type class per template parameter, () for a plain kernel
    params: tuple              # per parameter: "p" (pointer), "q" (i64), "Q" (u64), "i" (int), "d" (double)
    param_names: tuple

    def instances(self):
        """Every combination of class keys, e.g. ``("float32", "int64")``."""
        return list(itertools.product(*(TYPE_CLASSES[c] for c in self.classes)))


@dataclass(frozen=True)
class SourceFile:
    name: str
    text: bytes
    kernels: tuple             # KernelDecl, in file order


def _kernel_dir():
    """The kernels directory as a Traversable (installed) or Path (source checkout)."""
    try:
        from importlib.resources import files

        d = files("sparsetensor") / "kernels"
        if d.is_dir() and any(p.name.endswith(".cu") for p in d.iterdir()):
            return d
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    d = Path(__file__).resolve().parents[2] / "kernels"
    if d.is_dir():
        return d
    raise FileNotFoundError("the CUDA kernel sources (sparsetensor/kernels/*.cu) are not installed with this "
                            "copy of sparsetensor")


@functools.lru_cache(maxsize=None)
def _read_all() -> dict:
    d = _kernel_dir()
    return {p.name: p.read_bytes() for p in d.iterdir() if p.name.endswith((".cu", ".cuh"))}


def kernel_files() -> list:
    """Names of the ``.cu`` files, sorted."""
    return sorted(n for n in _read_all() if n.endswith(".cu"))


def headers() -> dict:
    """``{name: bytes}`` of every ``.cuh`` file (passed to NVRTC as headers)."""
    return {n: b for n, b in sorted(_read_all().items()) if n.endswith(".cuh")}


def included_headers(name: str) -> dict:
    """``{name: bytes}`` of the ``.cuh`` files that kernel file (or header) ``name`` includes, directly
    or through another header (``#include "x.cuh"`` lines)."""
    found, todo = {}, [name]
    available = headers()
    while todo:
        for line in source(todo.pop()).decode().splitlines():
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m and m.group(1) in available and m.group(1) not in found:
                found[m.group(1)] = available[m.group(1)]
                todo.append(m.group(1))
    return dict(sorted(found.items()))


def source(name: str) -> bytes:
    try:
        return _read_all()[name]
    except KeyError:
        raise KeyError(f"no CUDA source {name!r}; have {kernel_files()}") from None


def _split_params(text: str) -> list:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur))
    return [p.strip() for p in out]


def _param_kind(param: str, where: str) -> tuple:
    """``("p" | scalar code, name)`` for one C++ parameter declaration."""
    decl = re.sub(r"\b(const|__restrict__|volatile)\b", " ", param)
    decl = " ".join(decl.split())
    m = re.match(r"^(.*?)\s*(\w+)$", decl)
    if not m:
        raise ValueError(f"{where}: cannot parse parameter {param!r}")
    ctype, pname = m.group(1).strip(), m.group(2)
    if ctype.endswith("*"):
        return "p", pname
    if ctype in SCALAR_PARAMS:
        return SCALAR_PARAMS[ctype], pname
    raise ValueError(f"{where}: parameter {param!r} has type {ctype!r}; kernels take pointers or "
                     f"one of {sorted(SCALAR_PARAMS)}")


def parse(name: str, text: bytes) -> SourceFile:
    """Find the ``// st:kernel`` declarations of one ``.cu`` file."""
    lines = text.decode().splitlines()
    kernels = []
    for i, line in enumerate(lines):
        m = _MARK.match(line)
        if not m:
            continue
        classes = tuple(m.group(1).split())
        for c in classes:
            if c not in TYPE_CLASSES:
                raise ValueError(f"{name}:{i + 1}: unknown type class {c!r}; known: {sorted(TYPE_CLASSES)}")
        j = i + 1
        tparams = ()
        t = _TEMPLATE.match(lines[j]) if j < len(lines) else None
        if t:
            tparams = tuple(p for p in _split_params(t.group(1)))
            j += 1
        if len(tparams) != len(classes):
            raise ValueError(f"{name}:{i + 1}: `st:kernel` names {len(classes)} type classes but the kernel has "
                             f"{len(tparams)} template parameters")
        # The declaration runs from the __global__ line to the parenthesis that closes it.
        decl = ""
        while j < len(lines):
            decl += lines[j] + "\n"
            if decl.count("(") and decl.count("(") == decl.count(")"):
                break
            j += 1
        g = _GLOBAL.search(decl)
        if not g:
            raise ValueError(f"{name}:{i + 1}: `st:kernel` is not followed by a __global__ void declaration")
        inner = decl[g.end():decl.rindex(")")]
        where = f"{name}:{i + 1} ({g.group(1)})"
        kinds = [_param_kind(p, where) for p in _split_params(inner)]
        kernels.append(KernelDecl(name, g.group(1), classes, tuple(k for k, _ in kinds), tuple(n for _, n in kinds)))
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise ValueError(f"{name}: kernel names must be unique, got {names}")
    return SourceFile(name, text, tuple(kernels))


@functools.lru_cache(maxsize=None)
def declarations(name: str) -> SourceFile:
    return parse(name, source(name))


def name_expression(decl: KernelDecl, keys: tuple) -> str:
    """``"st::kernel<float, long long>"`` for class keys ``("float32", "int64")``."""
    if len(keys) != len(decl.classes):
        raise TypeError(f"{decl.name} takes {len(decl.classes)} type arguments ({', '.join(decl.classes)}), "
                        f"got {keys}")
    if not keys:
        return f"st::{decl.name}"
    try:
        cpp = [TYPE_CLASSES[c][k] for c, k in zip(decl.classes, keys)]
    except KeyError:
        raise TypeError(f"{decl.name}: no instantiation for {keys}; classes {decl.classes} allow "
                        f"{[list(TYPE_CLASSES[c]) for c in decl.classes]}") from None
    return f"st::{decl.name}<{', '.join(cpp)}>"
