"""Files: :func:`save`/:func:`load` (a documented ``.npz`` format), Matrix Market (:func:`read_mtx`/:func:`write_mtx`).

:func:`save` and :func:`load` pick the format from the file name: ``.mtx`` and
``.mtx.gz`` are Matrix Market, anything else is the ``.npz`` format below.
:func:`load` also reads files written by :func:`scipy.sparse.save_npz`.

Every write is atomic: the file is written to a temporary file in the target's
directory, flushed to disk (``fsync``) and renamed over the target
(``os.replace``), so a reader sees the old file or the new one, never half of
one; on any error the temporary file is removed and the target is untouched.

Every load checks every invariant, as the constructors do with
``check_invariants=True``: a malformed or hostile file raises
:class:`~sparsetensor.InvariantError` (an invariant is broken; the message names
the file) or ``ValueError`` naming the file (not a zip archive, truncated,
missing or unexpected members, bad metadata, a member whose ``.npy`` header does
not match its data, Python objects, which are never unpickled). A loaded tensor
never makes a kernel read out of bounds.

The ``.npz`` format, version 1
------------------------------
A ZIP archive, readable with ``np.load(path)``, with these members:

``metadata.json``
    A UTF-8 JSON object::

        {"format": "sparsetensor", "version": 1, "layout": "csr",
         "shape": [2, 3], "index_dtype": "int64", "value_dtype": "float64",
         "coalesced": true, "nnz": 3, "batch_dim": 0, "dense_dim": 0,
         "blocksize": null}

    ``layout`` is ``"coo"``, ``"csr"``, ``"csc"``, ``"bsr"``, ``"bsc"`` or
    ``"strided"`` (a NumPy array). ``index_dtype`` is ``"int32"`` or ``"int64"``
    (``null`` for strided), ``value_dtype`` a NumPy dtype name (``"bool"``,
    ``"int8"`` ... ``"complex128"``). ``coalesced`` is the COO flag (indices
    sorted and distinct; verified on load when true) or, for compressed
    layouts, the canonical flag (invariant 5.6 holds). ``nnz``, ``batch_dim``,
    ``dense_dim`` and ``blocksize`` (``[rows, cols]`` for bsr/bsc) are
    informative; when present, load checks that they agree with the arrays.
    A reader refuses a ``version`` newer than it knows.

One ``.npy`` member per array (NumPy's format 1.0/2.0, C order, native byte order):

=====================  ======================================================================
layout                 members
=====================  ======================================================================
coo                    ``indices.npy`` ``(sparse_dim, nnz)``, ``values.npy`` ``(nnz,) + dense``
csr, csc, bsr, bsc     ``compressed_indices.npy`` ``batch + (n + 1,)``,
                       ``plain_indices.npy`` ``batch + (nnz,)``,
                       ``values.npy`` ``batch + (nnz,) [+ blocksize] + dense``
strided                ``dense.npy``
=====================  ======================================================================

``compressed_indices`` are ``crow_indices`` for csr/bsr and ``ccol_indices``
for csc/bsc; ``plain_indices`` the ``col_indices``/``row_indices``. Block-
transposed values (a bsc made by ``bsr.mT``) are stored in C order, so they load
as contiguous values. By default members are stored uncompressed, their data
aligned to 64 bytes in the file (a padding field in the zip's local header), so
that ``load(path, mmap_mode="r")`` maps them straight from the archive;
``save(..., compress=True)`` deflates them instead.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import math
import os
import re
import struct
import tempfile
import zipfile
import zlib

import numpy as np

from . import _layout as L
from ._dtypes import INDEX_DTYPES, VALUE_DTYPES
from ._errors import InvariantError
from ._factory import sparse_compressed_tensor, sparse_coo_tensor
from ._tensor import COOTensor, CompressedTensor

__all__ = ["save", "load", "read_mtx", "write_mtx", "FORMAT", "VERSION"]

FORMAT = "sparsetensor"
VERSION = 1
METADATA = "metadata.json"

_MEMBERS = {"strided": ("dense",), "coo": ("indices", "values")}
_COMPRESSED_MEMBERS = ("compressed_indices", "plain_indices", "values")
_SCIPY_MEMBERS = frozenset({"format", "shape", "data", "indices", "indptr", "row", "col", "coords", "offsets",
                            "blocksize", "_is_array"})
_VALUE_DTYPES = {d.name: d for d in VALUE_DTYPES}
_INDEX_DTYPES = {d.name: d for d in INDEX_DTYPES}
_METADATA_LIMIT = 1 << 16          # bytes; a real metadata member is a few hundred
_MAX_DEFLATE_RATIO = 1032          # deflate cannot expand data more than this
_ALIGN = 64                        # member data alignment (NumPy aligns the .npy header to 64 too)
_PAD_ID = 0x5453                   # zip extra-field id of the padding record; readers skip unknown ids
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member dates: the same tensor gives the same bytes
# what zipfile, zlib and numpy.lib.format raise on a corrupt archive or member (a lying directory may
# make zipfile seek to a negative offset: OSError)
_READ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, struct.error, ValueError,
                OverflowError, KeyError, OSError)


# -- atomic writes ------------------------------------------------------------------------
def _new_file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open(path, "w")`` would give a new file."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)  # no /proc: read the umask by setting it (briefly process-wide)
    os.umask(umask)
    return 0o666 & ~umask


def _atomic_write(path: str, write) -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, and rename it over ``path``.

    On any exception (``KeyboardInterrupt`` included) the temporary file is
    removed and ``path`` is left as it was.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with open(fd, "wb") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), _new_file_mode())
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable too (best effort; not on Windows)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _is_mtx(path: str) -> bool:
    low = path.lower()
    return low.endswith(".mtx") or low.endswith(".mtx.gz")


# -- .npz: save -----------------------------------------------------------------------------
def _metadata_and_members(t) -> tuple[dict, dict]:
    if isinstance(t, np.ndarray):
        if t.dtype not in VALUE_DTYPES:
            raise TypeError(f"cannot save an array of dtype {t.dtype}; supported: "
                            f"{', '.join(map(str, VALUE_DTYPES))}")
        meta = {"layout": "strided", "shape": list(t.shape), "index_dtype": None, "value_dtype": t.dtype.name,
                "coalesced": True}
        return meta, {"dense": t}
    if not isinstance(t, (COOTensor, CompressedTensor)):
        raise TypeError(f"save expects a sparse tensor or a NumPy array, got {type(t).__name__}")
    t = t.cpu()
    if isinstance(t, COOTensor):
        members = {"indices": t.indices(), "values": t.values()}
    else:
        members = {"compressed_indices": t.compressed_indices(), "plain_indices": t.plain_indices(),
                   "values": t.values()}
    meta = {"layout": t.layout.name, "shape": [int(s) for s in t.shape], "index_dtype": t.index_dtype.name,
            "value_dtype": t.dtype.name, "coalesced": bool(t.is_coalesced()), "nnz": int(t.nnz),
            "batch_dim": t.batch_dim, "dense_dim": t.dense_dim,
            "blocksize": list(t.blocksize) if t.layout.blocked else None}
    return meta, members


def _padding(data_start: int) -> bytes:
    """A zip extra-field record that moves ``data_start`` to a multiple of ``_ALIGN``."""
    n = -data_start % _ALIGN
    if n < 4:  # a record is at least its 4-byte (id, size) header
        n += _ALIGN
    return struct.pack("<HH", _PAD_ID, n - 4) + bytes(n - 4)


def _write_npz(f, meta: dict, members: dict, compress: bool) -> None:
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    meta = {"format": FORMAT, "version": VERSION, **meta}
    with zipfile.ZipFile(f, "w", compression=method, allowZip64=True) as zf:
        info = zipfile.ZipInfo(METADATA, date_time=_ZIP_DATE)
        info.compress_type = method
        info.external_attr = 0o644 << 16
        zf.writestr(info, json.dumps(meta) + "\n")
        for name, arr in members.items():
            info = zipfile.ZipInfo(name + ".npy", date_time=_ZIP_DATE)
            info.compress_type = method
            info.external_attr = 0o644 << 16
            if not compress:
                # local header: 30 bytes + name + extra (ours, then a 20-byte zip64 record)
                info.extra = _padding(zf.fp.tell() + 30 + len(info.filename.encode()) + 20)
            with zf.open(info, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, arr, allow_pickle=False)


def save(path, t, *, compress: bool = False) -> None:
    """Write a sparse tensor (or a NumPy array) to ``path``, atomically.

    ``.mtx`` and ``.mtx.gz`` paths are written as Matrix Market (see
    :func:`write_mtx`); any other path gets the ``.npz`` format described in
    :mod:`sparsetensor.io` (the name is used as given: no suffix is added).

    Parameters
    ----------
    path : str or os.PathLike
    t : SparseTensor or numpy.ndarray
        Any layout, with batch and dense dims; any value and index dtype.
    compress : bool, optional
        Deflate the members. The default stores them uncompressed and aligned,
        so that :func:`load` can memory-map them (``mmap_mode=``).

    Notes
    -----
    The file appears complete or not at all: it is written to a temporary file
    in the same directory, flushed with ``fsync`` and renamed over ``path``.

    Examples
    --------
    >>> import os, tempfile, numpy as np, sparsetensor as st
    >>> t = st.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "t.npz")
    >>> st.save(path, t)
    >>> u = st.load(path)
    >>> u.layout, u.shape, u.col_indices()
    (st.sparse_csr, (2, 3), array([0, 2, 1]))
    """
    path = os.fspath(path)
    if _is_mtx(path):
        if compress:
            raise ValueError(f"{path}: compress= applies to .npz files; name the file .mtx.gz for a gzipped "
                             "Matrix Market file")
        return write_mtx(path, t)
    meta, members = _metadata_and_members(t)
    _atomic_write(path, lambda f: _write_npz(f, meta, members, compress))
    return None


# -- .npz: load ------------------------------------------------------------------------------
def _bad_metadata(path: str, msg: str) -> ValueError:
    return ValueError(f"{path}: bad metadata: {msg}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _read_metadata(zf: zipfile.ZipFile, path: str) -> dict:
    info = zf.getinfo(METADATA)
    if info.file_size > _METADATA_LIMIT:
        raise _bad_metadata(path, f"{METADATA} is {info.file_size} bytes (limit {_METADATA_LIMIT})")
    try:
        meta = json.loads(zf.read(info).decode("utf-8"))
    except (*_READ_ERRORS, UnicodeDecodeError) as e:
        raise _bad_metadata(path, f"{METADATA} is not readable JSON ({e})") from None
    if not isinstance(meta, dict):
        raise _bad_metadata(path, f"expected a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise _bad_metadata(path, f"format must be {FORMAT!r}, got {meta.get('format')!r}")
    version = meta.get("version")
    if not _is_int(version) or version < 1:
        raise _bad_metadata(path, f"version must be a positive integer, got {version!r}")
    if version > VERSION:
        raise ValueError(f"{path}: written in sparsetensor file format version {version}; this version of "
                         f"sparsetensor reads versions up to {VERSION}: upgrade it")
    layout = meta.get("layout")
    if layout not in ("strided", "coo", "csr", "csc", "bsr", "bsc"):
        raise _bad_metadata(path, f"layout must be one of strided, coo, csr, csc, bsr, bsc; got {layout!r}")
    shape = meta.get("shape")
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        raise _bad_metadata(path, f"shape must be a list of non-negative integers, got {shape!r}")
    if meta.get("value_dtype") not in _VALUE_DTYPES:
        raise _bad_metadata(path, f"value_dtype must be one of {', '.join(_VALUE_DTYPES)}; "
                                  f"got {meta.get('value_dtype')!r}")
    index_dtype = meta.get("index_dtype")
    if layout == "strided" and index_dtype is not None:
        raise _bad_metadata(path, f"index_dtype must be null for a strided array, got {index_dtype!r}")
    if layout != "strided" and index_dtype not in _INDEX_DTYPES:
        raise _bad_metadata(path, f"index_dtype must be 'int32' or 'int64', got {index_dtype!r}")
    if not isinstance(meta.get("coalesced"), bool):
        raise _bad_metadata(path, f"coalesced must be true or false, got {meta.get('coalesced')!r}")
    for key in ("nnz", "batch_dim", "dense_dim"):
        if key in meta and not (_is_int(meta[key]) and meta[key] >= 0):
            raise _bad_metadata(path, f"{key} must be a non-negative integer, got {meta[key]!r}")
    bs = meta.get("blocksize")
    if bs is not None and not (isinstance(bs, list) and len(bs) == 2 and all(_is_int(b) and b > 0 for b in bs)):
        raise _bad_metadata(path, f"blocksize must be null or [rows, cols] of positive integers, got {bs!r}")
    return meta


def _member_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, file_size: int):
    """Check a ``.npy`` member without reading its data: ``(shape, fortran_order, dtype, header_len)``."""
    if info.flag_bits & 0x1:
        raise ValueError(f"{where}: encrypted members are not supported")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ValueError(f"{where}: unsupported zip compression method {info.compress_type}")
    if info.header_offset < 0 or info.header_offset + info.compress_size > file_size:
        raise ValueError(f"{where}: the member runs past the end of the file (truncated?)")
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise ValueError(f"{where}: stored member with inconsistent sizes")
    if info.file_size > _MAX_DEFLATE_RATIO * max(info.compress_size, 1) + _ALIGN:
        raise ValueError(f"{where}: declares {info.file_size} bytes from {info.compress_size} compressed ones")
    try:
        with zf.open(info) as fp:
            version = np.lib.format.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
            header_len = fp.tell()
    except _READ_ERRORS as e:
        raise ValueError(f"{where}: not a valid .npy array ({e})") from None
    if dtype.hasobject:
        raise ValueError(f"{where}: holds Python objects (dtype {dtype}); sparsetensor files never do, and "
                         "reading them would need pickle, which load refuses")
    if any(d < 0 for d in shape):
        raise ValueError(f"{where}: negative size in shape {shape}")
    nbytes = math.prod(shape) * dtype.itemsize
    if header_len + nbytes != info.file_size:
        raise ValueError(f"{where}: its header declares shape {shape} of {dtype} ({nbytes} bytes) but the member "
                         f"holds {info.file_size - header_len} bytes of data")
    return shape, fortran, dtype, header_len


def _memmap_member(path, info, header, where, mode, file_size) -> np.ndarray:
    try:
        return _memmap_at(path, info, header, where, mode, file_size)
    except (OSError, ValueError, struct.error) as e:
        if isinstance(e, ValueError) and str(e).startswith(where):
            raise
        raise ValueError(f"{where}: cannot map the member ({e})") from None


def _memmap_at(path, info, header, where, mode, file_size) -> np.ndarray:
    shape, fortran, dtype, header_len = header
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise ValueError(f"{where}: bad local file header")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        f.seek(start)
        if f.read(6) != b"\x93NUMPY":
            raise ValueError(f"{where}: the member's data does not start with a .npy header")
    offset = start + header_len
    if offset + math.prod(shape) * dtype.itemsize > file_size:
        raise ValueError(f"{where}: the member runs past the end of the file (truncated?)")
    return np.memmap(path, dtype=dtype, mode=mode, offset=offset, shape=shape, order="F" if fortran else "C")


def _read_member(zf, path: str, name: str, mmap_mode, file_size: int) -> np.ndarray:
    info = zf.getinfo(name + ".npy")
    where = f"{path}: member {name}.npy"
    header = _member_header(zf, info, where, file_size)
    shape, _, dtype, _ = header
    if mmap_mode is not None and info.compress_type == zipfile.ZIP_STORED and math.prod(shape) * dtype.itemsize:
        arr = _memmap_member(path, info, header, where, mmap_mode, file_size)
    else:
        try:
            with zf.open(info) as fp:
                arr = np.lib.format.read_array(fp, allow_pickle=False)
        except _READ_ERRORS as e:
            raise ValueError(f"{where}: corrupt data ({e})") from None
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _in_file(e: InvariantError, path: str) -> InvariantError:
    """The same error with the file named in its message."""
    prefix = f"{e.layout} invariant {e.invariant}: "
    msg = str(e)
    msg = msg[len(prefix):] if msg.startswith(prefix) else msg
    return InvariantError(e.invariant, e.layout, f"{msg} (in {path})", batch=e.batch, index=e.index)


def _check_plain_bounds(t: CompressedTensor) -> None:
    """Invariants 5.4/5.5 over every plain index (the kernel stops at the first violation it finds)."""
    p = t.plain_indices()
    if not p.size:
        return
    layout = t.layout
    size_name = "ncols" if layout.compressed_rows else "nrows"
    lo, hi = int(p.min()), int(p.max())
    if lo < 0:
        raise InvariantError("5.4", layout.name, f"{layout.plain_name} must be >= 0; got {lo}")
    if hi >= t.plain_size:
        raise InvariantError("5.5", layout.name, f"{layout.plain_name} must be < {size_name}={t.plain_size}; "
                                                 f"got {hi}")


def _build_compressed(c, p, v, shape, layout: str, canonical: bool) -> CompressedTensor:
    t = sparse_compressed_tensor(c, p, v, shape, layout=layout, check_invariants=False)  # O(1) checks
    try:
        t.check_invariants()
    except InvariantError as e:
        if canonical or e.invariant != "5.6":
            raise
        _check_plain_bounds(t)  # a non-canonical file may break 5.6 only
        return t
    t._canonical = True  # checked: 5.6 holds
    return t


def _load_ours(zf: zipfile.ZipFile, path: str, mmap_mode, file_size: int):
    meta = _read_metadata(zf, path)
    layout = meta["layout"]
    expected = _MEMBERS.get(layout, _COMPRESSED_MEMBERS)
    names = set(zf.namelist()) - {METADATA}
    missing = [m for m in expected if m + ".npy" not in names]
    if missing:
        raise ValueError(f"{path}: missing member(s) {', '.join(m + '.npy' for m in missing)} for layout {layout}")
    extra = sorted(names - {m + ".npy" for m in expected})
    if extra:
        raise ValueError(f"{path}: unexpected member(s) {', '.join(extra)} for layout {layout}")
    arrays = {m: _read_member(zf, path, m, mmap_mode, file_size) for m in expected}
    for m, a in arrays.items():
        want = meta["value_dtype"] if m in ("values", "dense") else meta["index_dtype"]
        if a.dtype.name != want:
            raise ValueError(f"{path}: member {m}.npy has dtype {a.dtype}, the metadata says {want}")
    shape = tuple(meta["shape"])
    if layout == "strided":
        if arrays["dense"].shape != shape:
            raise ValueError(f"{path}: member dense.npy has shape {arrays['dense'].shape}, the metadata says {shape}")
        return arrays["dense"]
    try:
        if layout == "coo":
            t = sparse_coo_tensor(arrays["indices"], arrays["values"], shape, check_invariants=True,
                                  is_coalesced=meta["coalesced"])
        else:
            t = _build_compressed(arrays["compressed_indices"], arrays["plain_indices"], arrays["values"], shape,
                                  layout, meta["coalesced"])
    except InvariantError as e:
        raise _in_file(e, path) from None
    got = {"nnz": t.nnz, "batch_dim": t.batch_dim, "dense_dim": t.dense_dim,
           "blocksize": list(t.blocksize) if t.layout.blocked else None}
    for key, value in got.items():
        if key in meta and meta[key] != value:
            raise ValueError(f"{path}: the metadata says {key}={meta[key]!r}, the arrays say {value!r}")
    return t


def _load_scipy(zf: zipfile.ZipFile, path: str, file_size: int):
    for info in zf.infolist():
        _member_header(zf, info, f"{path}: member {info.filename}", file_size)
    import scipy.sparse as sp

    from .interop.scipy import from_scipy

    try:
        m = sp.load_npz(path)
    except (*_READ_ERRORS, NotImplementedError, TypeError) as e:
        raise ValueError(f"{path}: not a valid scipy.sparse.save_npz file ({e})") from None
    try:
        return from_scipy(m, check_invariants=True)
    except InvariantError as e:
        raise _in_file(e, path) from None
    except TypeError as e:
        raise TypeError(f"{path}: {e}") from None


def load(path, *, mmap_mode: str | None = None):
    """Read a tensor written by :func:`save`, a :func:`scipy.sparse.save_npz` file, or Matrix Market.

    ``.mtx`` and ``.mtx.gz`` paths are read with :func:`read_mtx`. Other files
    must be zip archives: the ``.npz`` format of :mod:`sparsetensor.io` (a
    ``metadata.json`` member), or SciPy's (recognised by its member names,
    read with :func:`scipy.sparse.load_npz` and :func:`sparsetensor.from_scipy`).
    Every invariant is checked; nothing is unpickled.

    Parameters
    ----------
    path : str or os.PathLike
    mmap_mode : {None, "r", "c"}, optional
        Memory-map the members instead of reading them: ``"r"`` read-only,
        ``"c"`` copy-on-write (writable, changes stay in memory). The arrays of
        the result are views of :class:`numpy.memmap` objects over the file, so
        a large file is not read into memory (the invariant check reads the
        index arrays once; values are not touched). Members stored compressed
        (``save(..., compress=True)``), empty members, and SciPy files are read
        normally. CRC checksums are not verified for mapped members, and the
        file must not be truncated or rewritten in place while mapped (a write
        by :func:`save` replaces the file and is safe).

    Returns
    -------
    SparseTensor or numpy.ndarray
        A tensor of the saved layout and flags (a compressed tensor whose file
        says non-canonical is marked canonical when the check proves it is), or
        a NumPy array for a saved array (``layout`` ``"strided"``).

    Raises
    ------
    InvariantError
        The arrays break an invariant (the message names the file).
    ValueError
        Not a readable file of a known format, or a malformed one (the message
        names the file).
    FileNotFoundError
        No such file.

    Examples
    --------
    >>> import os, tempfile, numpy as np, sparsetensor as st
    >>> t = st.sparse_coo_tensor([[0, 1], [2, 0]], [1.5, 2.5], size=(2, 3), is_coalesced=True)
    >>> path = os.path.join(tempfile.mkdtemp(), "t.npz")
    >>> st.save(path, t)
    >>> u = st.load(path, mmap_mode="r")
    >>> u.values(), u.is_coalesced(), isinstance(u.values().base, np.memmap)
    (array([1.5, 2.5]), True, True)
    """
    path = os.fspath(path)
    if _is_mtx(path):
        if mmap_mode is not None:
            raise ValueError(f"{path}: mmap_mode applies to .npz files, not to Matrix Market")
        return read_mtx(path)
    if mmap_mode not in (None, "r", "c"):
        raise ValueError(f"mmap_mode must be None, 'r' or 'c', got {mmap_mode!r}")
    file_size = os.stat(path).st_size
    try:
        zf = zipfile.ZipFile(path)
    except _READ_ERRORS as e:
        raise ValueError(f"{path}: not a .npz (zip) file, or a truncated one ({e})") from None
    with zf:
        names = set(zf.namelist())
        if METADATA in names:
            return _load_ours(zf, path, mmap_mode, file_size)
        stems = {n[:-4] for n in names if n.endswith(".npy")}
        if "format" in stems and len(stems) == len(names) and stems <= _SCIPY_MEMBERS:
            return _load_scipy(zf, path, file_size)
    raise ValueError(f"{path}: neither a sparsetensor file (no {METADATA} member) nor a scipy.sparse.save_npz "
                     f"file; members: {', '.join(sorted(names)) or 'none'}")


# -- Matrix Market -----------------------------------------------------------------------------
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

