"""Matrix Market files: :func:`read_mtx` and :func:`write_mtx` (re-exported by :mod:`sparsetensor.io`),
through SciPy's reader and writer, with the rules SciPy's reader does not enforce checked here."""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import math
import os
import re
import zlib
from typing import NamedTuple

import numpy as np

from .._core import _layout as L
from .._core._dtypes import INDEX_DTYPES, VALUE_DTYPES
from .._core._errors import InvariantError
from .._core._from_arrays import sparse_coo_tensor
from ._files import atomic_write as _atomic_write, in_file as _in_file
from .._core._tensor import COOTensor, CompressedTensor

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
    if isinstance(e, OverflowError):  # fast_matrix_market: "Line 3: Integer out of range."
        msg = msg.rstrip(".") + " (a value or index that does not fit 64 bits)"
    m = re.match(r"Line (\d+):\s*(.*)", msg, re.S)
    return f"{path}: line {m[1]}: {m[2]}" if m else f"{path}: {msg}"


def _open_binary(path: str):
    """The file's bytes, decompressed as SciPy's reader does: by a case-sensitive ``.gz``/``.bz2`` suffix."""
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".bz2"):
        return bz2.open(path, "rb")
    return open(path, "rb")


def _open_text(path: str):
    return io.TextIOWrapper(_open_binary(path), encoding="latin-1")


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


# -- the header, checked before SciPy's reader allocates anything ------------------------------------
_INT64_MAX = int(np.iinfo(np.int64).max)
_LINE_LIMIT = 1 << 16      # bytes: no banner or size line is longer; a longer one is not one
_CHUNK = 1 << 20           # bytes per read of the entry scan
_MAX_DEFLATE_RATIO = 1032  # zlib's documented limit: deflate never expands data more than this
_WHITESPACE = b" \t\r\n"
_DIGITS = b"0123456789+-"
# the bytes an entry may hold, by field: fast_matrix_market stops at the end of a number and ignores
# what follows ("1.5" in an integer field reads 1, "1.0D+05" reads 1.0), so anything else is refused
_ENTRY_BYTES = {"integer": _DIGITS, "unsigned-integer": _DIGITS, "pattern": _DIGITS,
                "real": _DIGITS + b".eEiInNfFtTyYaA", "double": _DIGITS + b".eEiInNfFtTyYaA",
                "complex": _DIGITS + b".eEiInNfFtTyYaA"}


class _Header(NamedTuple):
    """What :func:`read_mtx` checks before SciPy reads the file."""
    format: str               # "coordinate" or "array"
    field: str
    symmetry: str
    size_line: int            # its line number
    size: tuple               # (rows, cols, nnz) or (rows, cols), as Python ints
    first: tuple | None       # (line number, tokens) of the first entry line
    data_start: int           # offset of the line after the size line, in the decompressed bytes


def _check_length(path: str, no: int, line: bytes, what: str) -> bytes:
    """``line`` as read by ``readline(_LINE_LIMIT)``, refused when the limit cut it."""
    if len(line) == _LINE_LIMIT and not line.endswith(b"\n"):
        raise ValueError(f"{path}: line {no}: longer than {_LINE_LIMIT} bytes; not a Matrix Market {what}")
    return line


def _entry_lines(path: str, header: _Header):
    """(line number, bytes) of the lines after the size line; for error messages only."""
    with _open_binary(path) as f:
        _seek_decompressed(f, header.data_start)
        for no, line in enumerate(iter(lambda: f.readline(_LINE_LIMIT), b""), header.size_line + 1):
            yield no, _check_length(path, no, line, "entry")


def _decode(path: str, no: int, line: bytes, what: str) -> str:
    try:
        return line.decode("ascii")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: line {no}: the {what} is not ASCII text (byte 0x{line[e.start]:02x} at "
                         f"column {e.start + 1})") from None


def _size_int(path: str, no: int, name: str, token: str) -> int:
    """A size-line integer: decimal digits (leading zeros allowed), at most int64's largest."""
    if not token.isascii() or not token.isdigit():
        kind = "negative" if re.fullmatch(r"-\d+", token) else "not a non-negative decimal integer"
        raise ValueError(f"{path}: line {no}: {name} must be a non-negative integer, got {token!r} ({kind})")
    digits = token.lstrip("0") or "0"
    if len(digits) > 19 or int(digits) > _INT64_MAX:  # 19 digits: int() is never asked for a huge one
        shown = token if len(token) <= 40 else token[:20] + f"...({len(token)} digits)"
        raise ValueError(f"{path}: line {no}: {name} {shown} does not fit int64 (the largest is {_INT64_MAX})")
    return int(digits)


def _mtx_header(path: str) -> _Header | None:
    """The banner and the size line, checked; None when the banner is not one SciPy's reader takes
    (it names what is wrong) or the file cannot be read as text."""
    try:
        with _open_binary(path) as f:
            banner = _check_length(path, 1, f.readline(_LINE_LIMIT), "banner")
            offset = len(banner)
            words = _decode(path, 1, banner, "banner").lower().split()
            if len(words) < 5 or words[:2] != ["%%matrixmarket", "matrix"] or words[2] not in ("coordinate", "array"):
                return None
            fmt, field, symmetry = words[2], words[3], words[4]
            if field not in _ENTRY_BYTES or symmetry not in _SYMMETRIES:
                return None  # SciPy's reader refuses the banner before it allocates
            if fmt == "array" and field == "pattern":  # SciPy's reader allocates rows x cols, then refuses
                raise _mtx_rule(path, 1, "an array matrix cannot be pattern")
            no = 1
            while True:  # comments and blank lines, up to the size line
                no += 1
                line = f.readline(_LINE_LIMIT)
                offset += len(line)
                if not line:
                    return None  # no size line: SciPy's reader says so
                if line.lstrip().startswith(b"%"):
                    while line and not line.endswith(b"\n"):  # a long comment, kept out of memory
                        line = f.readline(_LINE_LIMIT)
                        offset += len(line)
                    continue
                if line.strip():
                    break
            _check_length(path, no, line, "size line")
            size_line, data_start = no, offset
            tokens = _decode(path, no, line, "size line").split()
            names = ("rows", "cols", "nnz") if fmt == "coordinate" else ("rows", "cols")
            if len(tokens) != len(names):
                raise ValueError(f"{path}: line {no}: a {fmt} size line holds {len(names)} integers "
                                 f"({' '.join(names)}), got {line.decode('ascii').strip()!r}")
            size = tuple(_size_int(path, no, n, t) for n, t in zip(names, tokens))
            first = None
            for line in iter(lambda: f.readline(_LINE_LIMIT), b""):
                no += 1
                if line.strip():
                    first = (no, line.decode("latin-1").split())
                    break
    except (OSError, EOFError, zlib.error):
        return None  # SciPy's reader reports it
    return _Header(fmt, field, symmetry, size_line, size, first, data_start)


def _declared_entries(header: _Header) -> int:
    """How many entries the file must hold after its size line."""
    rows, cols = header.size[:2]
    if header.format == "coordinate":
        return header.size[2]
    if header.symmetry == "general":
        return rows * cols
    n = min(rows, cols)  # (a non-square one was refused)
    return n * (n - 1) // 2 if header.symmetry == "skew-symmetric" else n * (n + 1) // 2


def _tokens_per_entry(header: _Header) -> int:
    values = {"pattern": 0, "complex": 2}.get(header.field, 1)
    return values + (2 if header.format == "coordinate" else 0)


def _check_mtx_size(path: str, header: _Header | None) -> None:
    """Refuse a declared size the file cannot hold, before anything is allocated for it.

    Every entry is ``k`` numbers (row, col and the values), each at least one byte and a separator, so
    ``n`` entries need at least ``2 k n - 1`` bytes after the size line. A plain file is bounded by its
    size; a gzipped one by its size times deflate's largest ratio (1032); then the entry scan
    (:func:`_scan_entries`) counts every number before SciPy's reader allocates, which bounds what
    it allocates by what the (decompressed) file holds.
    """
    if header is None:
        return
    entries = _declared_entries(header)
    need = 2 * _tokens_per_entry(header) * entries - 1 if entries else 0
    size = os.path.getsize(path)
    if path.endswith(".gz"):
        have, how = _MAX_DEFLATE_RATIO * size, f"{size} bytes of gzip data decompress to at most"
    elif path.endswith(".bz2") or not os.path.isfile(path):
        return  # no useful bound from the size (bzip2's ratio, a pipe): the scan counts
    else:
        have, how = size - header.data_start, "the file holds"
    if need > have:
        raise ValueError(f"{path}: line {header.size_line}: the size line declares {entries} entries "
                         f"({' x '.join(map(str, header.size[:2]))} {header.format}, {header.field}, "
                         f"{header.symmetry}), which need at least {need} bytes, but {how} {have} bytes "
                         "(a truncated file, or a corrupt size line)")


def _scan_entries(path: str, header: _Header | None) -> int | None:
    """Check the bytes after the size line before SciPy's reader reads them: only the characters of
    the field's numbers, and exactly the declared number of numbers (whitespace-separated tokens).
    Returns the last byte it read (None: none).

    SciPy's reader silently ignores what follows a number ("1.5" in an integer field reads 1) and
    allocates from the declared size before reading; after this scan both are safe. One pass of
    ``bytes.translate`` and NumPy comparisons over 1 MiB chunks; on an error the file is read again,
    line by line, to name the line.
    """
    if header is None or header.field not in _ENTRY_BYTES:
        return None
    allowed = _ENTRY_BYTES[header.field] + _WHITESPACE
    per_entry = _tokens_per_entry(header)
    want = _declared_entries(header) * per_entry
    tokens, prev_space, pos, last = 0, True, 0, None
    try:
        with _open_binary(path) as f:
            _seek_decompressed(f, header.data_start)
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                last = chunk[-1]
                bad = chunk.translate(None, allowed)
                if bad:
                    _bad_byte(path, header, pos + chunk.index(bad[:1]), bad[0])
                space = np.frombuffer(chunk, np.uint8) <= 32  # only the 4 whitespace bytes are <= 32 here
                tokens += int(np.count_nonzero(space[:-1] > space[1:])) + int(prev_space and not space[0])
                prev_space = bool(space[-1])
                pos += len(chunk)
                if tokens > want + per_entry:  # stop early: the file is too long
                    break
    except (OSError, EOFError, zlib.error):
        return None  # SciPy's reader reports it
    if tokens != want:
        _bad_count(path, header, per_entry, tokens, want)
    return last


def _last_byte(path: str, scanned: int | None) -> int | None:
    """The file's last byte (decompressed): the scan's, else read."""
    if scanned is not None:
        return scanned
    last = None
    try:
        with _open_binary(path) as f:
            if not path.endswith((".gz", ".bz2")):
                f.seek(0, os.SEEK_END)
                if f.tell():
                    f.seek(-1, os.SEEK_END)
                    last = f.read(1)[0]
                return last
            while chunk := f.read(_CHUNK):
                last = chunk[-1]
    except (OSError, EOFError, zlib.error):
        return None  # SciPy's reader reports it
    return last


# what SciPy's reader gives a dense file of each field (an empty one is made here: the reader divides by zero)
_ARRAY_DTYPES = {"real": np.float64, "double": np.float64, "integer": np.int64, "unsigned-integer": np.uint64,
                 "complex": np.complex128}


def _seek_decompressed(f, offset: int) -> None:
    while offset:
        got = len(f.read(min(offset, _CHUNK)))
        if not got:
            return
        offset -= got


def _bad_byte(path: str, header: _Header, pos: int, byte: int):
    for no, line in _entry_lines(path, header):
        if pos < len(line):
            break
        pos -= len(line)
    text = line.decode("latin-1").strip()
    if text.startswith("%"):
        raise ValueError(f"{path}: line {no}: a comment among the entries (Matrix Market allows comments only "
                         "before the size line)")
    shown = text if len(text) <= 80 else text[:77] + "..."
    what = f"byte 0x{byte:02x}" if byte >= 0x80 or byte < 0x20 else f"character {chr(byte)!r}"
    raise ValueError(f"{path}: line {no}: {what} in the entry {shown!r} ({header.field} field: an entry holds "
                     "only its numbers)")


def _bad_count(path: str, header: _Header, per_entry: int, tokens, want, lines_only: bool = False):
    """Name the first entry line with the wrong number of numbers, or the missing or extra lines
    (with ``lines_only``, return when every line holds one entry)."""
    fields = ("row col " if header.format == "coordinate" else "") + {0: "", 1: "value", 2: "real imag"}[
        per_entry - (2 if header.format == "coordinate" else 0)]
    entries, seen = _declared_entries(header), 0
    for no, line in _entry_lines(path, header):
        words = line.split()
        if not words:
            continue
        if seen == entries:
            raise ValueError(f"{path}: line {no}: more entries than the {entries} the size line (line "
                             f"{header.size_line}) declares")
        if len(words) != per_entry:
            raise ValueError(f"{path}: line {no}: expected {per_entry} numbers per line ({fields.strip()}: "
                             f"{header.format} format, {header.field} field), got {len(words)}: "
                             f"{line.decode('latin-1').strip()[:80]!r}")
        seen += 1
    if lines_only:
        return
    raise ValueError(f"{path}: truncated: the size line (line {header.size_line}) declares {entries} entries, "
                     f"the file holds {seen} ({tokens} of {want} numbers)")


def _check_mtx_square(path: str, header) -> None:
    """A symmetric, skew-symmetric or hermitian matrix must be square. Checked before SciPy reads
    the file: SciPy 1.17 mirrors a non-square symmetric ``array`` file out of bounds (heap
    corruption, a crash later)."""
    if header is None:
        return
    rows, cols = header.size[:2]
    if header.symmetry != "general" and rows != cols:
        raise _mtx_rule(path, header.size_line, f"a {header.symmetry} matrix must be square, got size {rows} x {cols}")


def _check_mtx_pattern(path: str, header) -> None:
    """A pattern matrix has no value column (checked on its first entry, before the entry scan
    refuses the value's characters with a less specific message)."""
    if header is not None and header.field == "pattern" and header.first is not None \
            and len(header.first[1]) != 2:
        raise _mtx_rule(path, header.first[0],
                        f"a pattern matrix has no value column, got {' '.join(header.first[1])!r}")


def _check_infinities(path: str, header, values: np.ndarray) -> None:
    """An infinite value must be written ``inf`` or ``infinity``: SciPy's reader turns a finite number
    too large for float64 (``1e999``) into one silently. Read again only when a value is infinite."""
    if header is None or values.dtype.kind not in "fc" or not np.isinf(values).any():
        return
    first = 2 if header.format == "coordinate" else 0
    for no, line in _entry_lines(path, header):
        for token in line.split()[first:]:
            if math.isinf(float(token)) and token.lstrip(b"+-").lower() not in (b"inf", b"infinity"):
                raise ValueError(f"{path}: line {no}: the value {token.decode()} overflows float64 (the "
                                 f"largest is {np.finfo(np.float64).max:.17g}); write inf for an infinite value")


def _check_mtx_entries(path: str, header, m) -> None:
    """Refuse what SciPy's reader accepts but Matrix Market forbids: a nonzero diagonal entry in a
    skew-symmetric matrix (a zero one, which SciPy's writer writes for an explicit zero, is kept),
    a non-real diagonal entry in a hermitian one. The entries are those SciPy parsed: the file's own
    come first, in file order, before the mirrored ones it appends."""
    if header is None or isinstance(m, np.ndarray):
        return
    symmetry = header.symmetry
    if symmetry in ("skew-symmetric", "hermitian"):
        n_file = header.size[2]
        row, col = m.coords
        diag = row[:n_file] == col[:n_file]
        diag &= (m.data[:n_file].imag != 0) if symmetry == "hermitian" else (m.data[:n_file] != 0)
        if diag.any():
            k = int(np.argmax(diag))
            what = ("a skew-symmetric matrix has a zero diagonal" if symmetry == "skew-symmetric"
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
        square, a nonzero diagonal entry in a ``skew-symmetric`` one, a non-real diagonal
        entry in a ``hermitian`` one, a value column in a ``pattern`` one (checked
        on its first entry). And, with the line, what SciPy's reader would
        allocate for or read wrongly: a size line that is not two or three
        non-negative decimal integers fitting int64, or that declares more entries
        than the file can hold (checked before anything is allocated: an entry of
        ``k`` numbers takes at least ``2k`` bytes; a ``.gz`` file holds at most
        1032 bytes per byte, deflate's largest ratio; every file, ``.bz2`` too, is
        scanned and must hold exactly the declared numbers), an index or integer
        value that does not fit int64, a real value beyond float64 (``1e999``;
        ``inf`` is read as infinity), a character that is not part of the field's
        numbers (``1.5`` in an ``integer`` file, ``1.0D+05``, ``1,5``), a line
        with more or fewer numbers than an entry has, a comment after the size
        line, a banner or size line that is not ASCII.
    MemoryError
        A size the file does hold, too large for this machine (the file named).

    Notes
    -----
    Two files that crash SciPy's reader (1.17) are read here instead: a dense file with no rows
    or columns (given as zeros), and a file that ends in spaces, tabs or a carriage return
    without a newline (given to the reader with one). The scan of the entries costs about a
    third of SciPy's read of a plain file. Not detected: a fraction in the column index of a ``real`` or
    ``complex`` file (``1 2.5 3.0``), which SciPy's reader reads as column 2
    with value 0.5.

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
    _check_mtx_pattern(path, header)
    _check_mtx_size(path, header)
    source = path
    if _last_byte(path, _scan_entries(path, header)) in (9, 13, 32):
        # SciPy's reader (fast_matrix_market) crashes on a file that ends in whitespace without a newline
        with _open_binary(path) as f:
            source = io.BytesIO(f.read().rstrip(b" \t\r") + b"\n")
    if header is not None and header.format == "array" and 0 in header.size[:2] and header.field in _ARRAY_DTYPES:
        return np.zeros(header.size[:2], dtype=_ARRAY_DTYPES[header.field])
    try:
        m = sio.mmread(source, spmatrix=False)
    except FileNotFoundError:
        raise
    except (ValueError, OverflowError, RuntimeError, EOFError, OSError, zlib.error) as e:
        if header is not None and not re.match(r"Line \d+:", str(e)):  # "Truncated file": find the line
            _bad_count(path, header, _tokens_per_entry(header), None, None, lines_only=True)
        raise ValueError(_mm_error(path, e)) from None
    except MemoryError as e:  # a size the file does hold (checked above), too large for this machine
        raise MemoryError(f"{path}: not enough memory for the {header.size if header else '?'} the size line "
                          f"declares ({e})") from None
    _check_mtx_entries(path, header, m)
    _check_infinities(path, header, m if isinstance(m, np.ndarray) else m.data)
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
