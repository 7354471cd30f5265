"""Matrix Market files: :func:`read_mtx` and :func:`write_mtx` (re-exported by :mod:`sparsetensor.io`),
through SciPy's reader and writer, with the rules SciPy's reader does not enforce checked here."""

from __future__ import annotations

import errno
import gzip
import os
import re
import zlib

import numpy as np

from . import _layout as L
from ._dtypes import INDEX_DTYPES, VALUE_DTYPES
from ._errors import InvariantError
from ._factory import sparse_coo_tensor
from ._files import atomic_write as _atomic_write, in_file as _in_file
from ._tensor import COOTensor, CompressedTensor

__all__ = ["read_mtx", "write_mtx"]

_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")
_FIELDS = (None, "real", "integer", "complex", "pattern")


def _import_scipy_io():
    try:
        import scipy.io
        import scipy.sparse
    except ImportError:  # pragma: no cover - scipy is a dependency of the test extra
        raise ImportError("Matrix Market I/O needs scipy: pip install scipy") from None
    return scipy.io, scipy.sparse


def _mm_error(path: str, e: Exception) -> str:
    msg = str(e)
    m = re.match(r"Line (\d+):\s*(.*)", msg, re.S)
    return f"{path}: line {m[1]}: {m[2]}" if m else f"{path}: {msg}"


def _open_text(path: str):
    opener = gzip.open if path.endswith(".gz") else open
    return opener(path, "rt", encoding="latin-1")


def _mtx_lines(f):
    """(line number, tokens) of the lines after the banner that are neither comments nor blank."""
    for no, line in enumerate(f, 2):
        tokens = line.split()
        if tokens and not tokens[0].startswith("%"):
            yield no, tokens


def _mtx_rule(path: str, line: int, rule: str) -> ValueError:
    return ValueError(f"{path}: line {line}: {rule} (Matrix Market rule)")


def _entry_line(path: str, k: int) -> int:
    """The line of the file's entry ``k`` (0-based, after the size line): read only on an error."""
    with _open_text(path) as f:
        f.readline()
        lines = _mtx_lines(f)
        next(lines)  # the size line
        for j, (no, _) in enumerate(lines):
            if j == k:
                return no
    return -1  # pragma: no cover - SciPy read the entry, so it exists


def _mtx_header(path: str):
    """(symmetry, field, size line, size tokens, first entry line or None) from the banner and the
    lines after it; None when the file cannot be read as text (SciPy's reader reports that)."""
    try:
        with _open_text(path) as f:
            banner = f.readline().lower().split()
            lines = _mtx_lines(f)
            size_line, size = next(lines, (2, []))
            first = next(lines, None)
    except (OSError, EOFError, zlib.error):
        return None
    symmetry, field = (banner[4], banner[3]) if len(banner) >= 5 else ("general", "real")
    return symmetry, field, size_line, size, first


def _check_mtx_square(path: str, header) -> None:
    """A symmetric, skew-symmetric or hermitian matrix must be square. Checked before SciPy reads
    the file: SciPy 1.17 mirrors a non-square symmetric ``array`` file out of bounds (heap
    corruption, a crash later)."""
    if header is None:
        return
    symmetry, _, size_line, size, _ = header
    try:
        rows, cols = int(size[0]), int(size[1])
    except (IndexError, ValueError):
        return  # a malformed size line: SciPy's reader names it
    if symmetry != "general" and rows != cols:
        raise _mtx_rule(path, size_line, f"a {symmetry} matrix must be square, got size {rows} x {cols}")


def _check_mtx_entries(path: str, header, m) -> None:
    """Refuse what SciPy's reader accepts but Matrix Market forbids: a diagonal entry in a
    skew-symmetric matrix, a non-real diagonal entry in a hermitian one, a value column in a
    pattern one (checked on its first entry line). The entries are those SciPy parsed: the
    file's own come first, in file order, before the mirrored ones it appends."""
    if header is None or isinstance(m, np.ndarray):
        return
    symmetry, field, _, size, first = header
    if field == "pattern" and first is not None and len(first[1]) != 2:
        raise _mtx_rule(path, first[0], f"a pattern matrix has no value column, got {' '.join(first[1])!r}")
    if symmetry in ("skew-symmetric", "hermitian"):
        n_file = int(size[2]) if len(size) >= 3 else m.nnz
        row, col = m.coords
        diag = row[:n_file] == col[:n_file]
        if symmetry == "hermitian":
            diag &= m.data[:n_file].imag != 0
        if diag.any():
            k = int(np.argmax(diag))
            what = ("a skew-symmetric matrix has no diagonal entries" if symmetry == "skew-symmetric"
                    else "a hermitian matrix has a real diagonal")
            raise _mtx_rule(path, _entry_line(path, k),
                            f"{what}, got ({row[k] + 1}, {col[k] + 1}) = {m.data[k]}")


def read_mtx(path):
    """Read a Matrix Market file (``.mtx``, or gzipped ``.mtx.gz``) as a COO tensor.

    SciPy's reader (:func:`scipy.io.mmread`, fast_matrix_market, multithreaded)
    parses the file. ``real``, ``integer``, ``complex`` and ``pattern`` fields
    give float64, int64, complex128 and float64 (ones) values; ``symmetric``,
    ``skew-symmetric`` and ``hermitian`` matrices are expanded to all their
    entries (the mirrored ones are appended after the file's). The result is
    marked coalesced only when its indices are checked to be sorted and
    distinct; convert with ``.to_sparse_csr()`` and friends. A dense (``array``)
    Matrix Market file gives a NumPy array.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    COOTensor or numpy.ndarray

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        A malformed file: the message names the file and, when SciPy knows it,
        the line (``"m.mtx: line 4: Invalid floating-point value."``). Also a file
        that breaks a Matrix Market rule SciPy does not enforce, with the line and
        the rule: a ``symmetric``/``skew-symmetric``/``hermitian`` matrix that is not
        square, a diagonal entry in a ``skew-symmetric`` one, a non-real diagonal
        entry in a ``hermitian`` one, a value column in a ``pattern`` one (checked
        on its first entry).

    Examples
    --------
    >>> import os, tempfile, sparsetensor as st
    >>> path = os.path.join(tempfile.mkdtemp(), "m.mtx")
    >>> with open(path, "w") as f:
    ...     _ = f.write("%%MatrixMarket matrix coordinate real symmetric\\n3 3 2\\n1 1 4.0\\n3 1 -1.5\\n")
    >>> t = st.read_mtx(path)
    >>> t.shape, t.indices(), t.values()
    ((3, 3), array([[0, 2, 0],
           [0, 0, 2]], dtype=int32), array([ 4. , -1.5, -1.5]))
    """
    path = os.fspath(path)
    sio, _ = _import_scipy_io()
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "No such Matrix Market file", path)
    header = _mtx_header(path)
    _check_mtx_square(path, header)
    try:
        m = sio.mmread(path, spmatrix=False)
    except FileNotFoundError:
        raise
    except (ValueError, RuntimeError, EOFError, OSError, zlib.error) as e:
        raise ValueError(_mm_error(path, e)) from None
    _check_mtx_entries(path, header, m)
    if isinstance(m, np.ndarray):
        return m
    row, col = m.coords
    indices = np.empty((2, m.nnz), dtype=np.result_type(row.dtype, col.dtype, np.int32))
    if indices.dtype not in INDEX_DTYPES:
        indices = indices.astype(np.int64)
    indices[0], indices[1] = row, col
    values = m.data
    if values.dtype.kind == "u":  # fast_matrix_market's "unsigned-integer" extension
        if values.size and values.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{path}: unsigned integer values do not fit int64")
        values = values.astype(np.int64)
    try:
        try:
            return sparse_coo_tensor(indices, values, m.shape, check_invariants=True, is_coalesced=True)
        except InvariantError as e:
            if e.invariant != "C6":
                raise
        # bounds hold (they are checked before C6): only the order is not canonical
        return sparse_coo_tensor(indices, values, m.shape, check_invariants=False, is_coalesced=False)
    except InvariantError as e:
        raise _in_file(e, path) from None


def _as_scipy_coo(t, sp):
    """A SciPy ``coo_array`` (or a 2-d NumPy array) of ``t``, for :func:`scipy.io.mmwrite`."""
    if isinstance(t, np.ndarray):
        if t.ndim != 2:
            raise ValueError(f"Matrix Market holds 2-d matrices; got an array of shape {t.shape}")
        if t.dtype not in VALUE_DTYPES:
            raise TypeError(f"cannot write an array of dtype {t.dtype} as Matrix Market")
        return t.astype(np.float32) if t.dtype == np.float16 else t
    if not isinstance(t, (COOTensor, CompressedTensor)):
        raise TypeError(f"write_mtx expects a sparse tensor or a NumPy array, got {type(t).__name__}")
    t = t.cpu()  # as save(): the file is written from host memory
    if t.ndim != 2 or t.batch_dim or t.dense_dim:
        raise ValueError(f"Matrix Market holds 2-d matrices: cannot write a {t.layout.name} tensor of shape "
                         f"{t.shape} (batch_dim={t.batch_dim}, dense_dim={t.dense_dim}); write each matrix "
                         "separately, or use st.save with a .npz file")
    t = t.cpu()
    if t.dtype == np.float16:  # scipy.sparse has no float16; float32 holds every value exactly
        t = t.astype(np.float32)
    if t.layout is L.sparse_bsc:  # SciPy has no BSC: transpose a BSR (a view) back
        m = t.mT.to_scipy().T
    else:
        m = t.to_scipy()
    return sp.coo_array(m) if m.format != "coo" else m


def _lower_triangle(m, symmetry: str, field, sp):
    """The entries Matrix Market stores for a symmetric/skew/hermitian ``m``, after checking that it is one."""
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"symmetry={symmetry!r} needs a square matrix, got shape {m.shape}")
    if symmetry == "hermitian" and m.dtype.kind != "c":
        raise ValueError(f"symmetry='hermitian' needs complex values, got {m.dtype}; use 'symmetric'")
    if symmetry != "symmetric" and (field == "pattern" or m.dtype == np.bool_):
        raise ValueError(f"symmetry={symmetry!r} needs numeric values (field={field!r}, dtype {m.dtype})")
    c = m.tocsr()
    if field == "pattern":
        c = sp.csr_array((np.ones(c.nnz, np.int8), c.indices, c.indptr), shape=c.shape)
    mirror = {"symmetric": lambda: c.T, "skew-symmetric": lambda: -c.T, "hermitian": lambda: c.conj().T}[symmetry]()
    differ = (c != mirror).nnz
    if differ:
        raise ValueError(f"the matrix is not {symmetry}: {differ} entries differ from their mirrored value; "
                         "write it with symmetry=None (general)")
    row, col = m.coords
    keep = row > col if symmetry == "skew-symmetric" else row >= col
    return sp.coo_array((m.data[keep], (row[keep], col[keep])), shape=m.shape)


def write_mtx(path, t, *, symmetry: str | None = None, field: str | None = None, comment: str | None = None,
              compresslevel: int = 6):
    """Write a 2-d sparse tensor (or a 2-d NumPy array) as Matrix Market, atomically.

    A path ending in ``.gz`` is gzipped. The tensor must be 2-d with no batch
    or dense dims (``ValueError`` otherwise); any layout is written as
    ``coordinate`` entries, in the tensor's order (duplicates of an
    uncoalesced COO tensor are written as they are). A NumPy array is written
    in ``array`` format (``symmetry`` must be ``None``).

    Parameters
    ----------
    path : str or os.PathLike
    t : SparseTensor or numpy.ndarray
    symmetry : {None, "general", "symmetric", "skew-symmetric", "hermitian"}, optional
        ``None`` writes every entry ("general"). Otherwise the matrix is
        checked to have that symmetry (``ValueError`` if not) and only its
        lower triangle is written (strictly lower for skew-symmetric).
    field : {None, "real", "integer", "complex", "pattern"}, optional
        ``None`` picks it from the dtype (bool is written as integer);
        ``"pattern"`` writes positions only.
    comment : str, optional
        Written after the banner, one ``%`` line per line.
    compresslevel : int, optional
        The gzip level for ``.gz`` paths (1 fastest ... 9 smallest; 6, the
        ``gzip`` command's default). Compression dominates the time of a
        ``.gz`` write: level 1 is about 5x faster than 6 for files about 8%
        larger.

    Examples
    --------
    >>> import os, tempfile, sparsetensor as st
    >>> t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [2.0, 2.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "m.mtx")
    >>> st.write_mtx(path, t, symmetry="symmetric")
    >>> print(open(path).read())
    %%MatrixMarket matrix coordinate real symmetric
    %
    2 2 1
    2 1 2
    <BLANKLINE>
    >>> st.read_mtx(path).values()
    array([2., 2.])
    """
    path = os.fspath(path)
    sio, sp = _import_scipy_io()
    symmetry = "general" if symmetry is None else str(symmetry).lower()
    if symmetry not in _SYMMETRIES:
        raise ValueError(f"symmetry must be None or one of {', '.join(_SYMMETRIES)}; got {symmetry!r}")
    if field not in _FIELDS:
        raise ValueError(f"field must be None or one of real, integer, complex, pattern; got {field!r}")
    m = _as_scipy_coo(t, sp)
    if isinstance(m, np.ndarray):
        if symmetry != "general" or field == "pattern":
            raise ValueError("a NumPy array is written in Matrix Market array format: symmetry must be None "
                             "and field not 'pattern'")
    elif symmetry != "general":
        m = _lower_triangle(m, symmetry, field, sp)

    def write(f):
        if path.lower().endswith(".gz"):
            name = os.path.basename(path)[:-3]
            with gzip.GzipFile(filename=name, mode="wb", fileobj=f, mtime=0, compresslevel=compresslevel) as g:
                sio.mmwrite(g, m, comment=comment, field=field, symmetry=symmetry)
        else:
            sio.mmwrite(f, m, comment=comment, field=field, symmetry=symmetry)

    _atomic_write(path, write)
