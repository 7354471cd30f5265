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

import json
import math
import os
import struct
import tokenize
import zipfile
import zlib

import numpy as np

from .._core._dtypes import INDEX_DTYPES, VALUE_DTYPES
from .._core._errors import InvariantError
from .._core._from_arrays import sparse_compressed_tensor, sparse_coo_tensor
from ._files import atomic_write as _atomic_write, in_file as _in_file, is_mtx as _is_mtx
from ._mtx import read_mtx, write_mtx
from .._core._tensor import COOTensor, CompressedTensor

__all__ = ["save", "load", "read_mtx", "write_mtx", "FORMAT", "VERSION"]

FORMAT = "sparsetensor"
VERSION = 1
METADATA = "metadata.json"

_MEMBERS = {"strided": ("dense",), "coo": ("indices", "values")}
_COMPRESSED_MEMBERS = ("compressed_indices", "plain_indices", "values")
_SCIPY_INDEX_MEMBERS = frozenset({"indices", "indptr", "row", "col", "coords", "offsets"})
_SCIPY_MEMBERS = frozenset({"format", "shape", "data", "indices", "indptr", "row", "col", "coords", "offsets",
                            "blocksize", "_is_array"})
_VALUE_DTYPES = {d.name: d for d in VALUE_DTYPES}
_INDEX_DTYPES = {d.name: d for d in INDEX_DTYPES}
_METADATA_LIMIT = 1 << 16          # bytes; a real metadata member is a few hundred
_MAX_DEFLATE_RATIO = 1032          # deflate cannot expand data more than this
_ALIGN = 64                        # member data alignment (NumPy aligns the .npy header to 64 too)
_PAD_ID = 0x5453                   # zip extra-field id of the padding record; readers skip unknown ids
_INT64_MAX = int(np.iinfo(np.int64).max)
_MAX_DIMS = 64                     # NumPy's limit on ndim
_DIA_ROWS_ALWAYS = 1 << 24         # a SciPy dia file loads as CSR: this many rows, or 16 per stored value
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member dates: the same tensor gives the same bytes
# what zipfile, zlib and numpy.lib.format raise on a corrupt archive or member (a lying directory may
# make zipfile seek to a negative offset: OSError)
# zipfile's RuntimeError (an encrypted member) and NotImplementedError (a compression method it lacks),
# and the tokenizer's errors of NumPy's .npy header parser, are a file's faults too
_READ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, struct.error, ValueError,
                OverflowError, KeyError, OSError, RuntimeError, NotImplementedError, SyntaxError, tokenize.TokenError)


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


def _short(x) -> str:
    """``repr(x)``, cut to a readable length (a hostile metadata value may be 64 KiB long)."""
    text = repr(x)
    return text if len(text) <= 100 else text[:97] + "..."


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _read_metadata(zf: zipfile.ZipFile, path: str) -> dict:
    info = zf.getinfo(METADATA)
    if info.file_size > _METADATA_LIMIT:
        raise _bad_metadata(path, f"{METADATA} is {info.file_size} bytes (limit {_METADATA_LIMIT})")
    if info.compress_size > _METADATA_LIMIT + 4096:  # zipfile reads the compressed bytes into one buffer first
        raise _bad_metadata(path, f"{METADATA} declares {info.compress_size} compressed bytes (limit "
                                  f"{_METADATA_LIMIT + 4096})")
    try:
        meta = json.loads(zf.read(info).decode("utf-8"))
    except (*_READ_ERRORS, UnicodeDecodeError, RecursionError) as e:  # RecursionError: [[[[...]]]]
        raise _bad_metadata(path, f"{METADATA} is not readable JSON ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict):
        raise _bad_metadata(path, f"expected a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise _bad_metadata(path, f"format must be {FORMAT!r}, got {_short(meta.get('format'))}")
    version = meta.get("version")
    if not _is_int(version) or version < 1:
        raise _bad_metadata(path, f"version must be a positive integer, got {_short(version)}")
    if version > VERSION:
        raise ValueError(f"{path}: written in sparsetensor file format version {version}; this version of "
                         f"sparsetensor reads versions up to {VERSION}: upgrade it")
    layout = meta.get("layout")
    if layout not in ("strided", "coo", "csr", "csc", "bsr", "bsc"):
        raise _bad_metadata(path, f"layout must be one of strided, coo, csr, csc, bsr, bsc; got {_short(layout)}")
    shape = meta.get("shape")
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        raise _bad_metadata(path, f"shape must be a list of non-negative integers, got {_short(shape)}")
    if len(shape) > _MAX_DIMS:
        raise _bad_metadata(path, f"shape has {len(shape)} dims; NumPy arrays have at most {_MAX_DIMS}")
    if any(s > _INT64_MAX for s in shape):  # (whether a sparse dim fits an int32 index dtype is invariant 1.3)
        raise _bad_metadata(path, f"shape {_short(shape)} has a dim that does not fit int64 (the largest is "
                                  f"{_INT64_MAX})")
    if meta.get("value_dtype") not in _VALUE_DTYPES:
        raise _bad_metadata(path, f"value_dtype must be one of {', '.join(_VALUE_DTYPES)}; "
                                  f"got {_short(meta.get('value_dtype'))}")
    index_dtype = meta.get("index_dtype")
    if layout == "strided" and index_dtype is not None:
        raise _bad_metadata(path, f"index_dtype must be null for a strided array, got {_short(index_dtype)}")
    if layout != "strided" and index_dtype not in _INDEX_DTYPES:
        raise _bad_metadata(path, f"index_dtype must be 'int32' or 'int64', got {_short(index_dtype)}")
    if not isinstance(meta.get("coalesced"), bool):
        raise _bad_metadata(path, f"coalesced must be true or false, got {_short(meta.get('coalesced'))}")
    for key in ("nnz", "batch_dim", "dense_dim"):
        if key in meta and not (_is_int(meta[key]) and 0 <= meta[key] <= _INT64_MAX):
            raise _bad_metadata(path, f"{key} must be a non-negative int64, got {_short(meta[key])}")
    bs = meta.get("blocksize")
    if bs is not None and not (isinstance(bs, list) and len(bs) == 2
                               and all(_is_int(b) and 0 < b <= _INT64_MAX for b in bs)):
        raise _bad_metadata(path, f"blocksize must be null or [rows, cols] of positive int64, got {_short(bs)}")
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
        except MemoryError as e:  # a size the file does hold (checked above), too large for this machine
            raise MemoryError(f"{where}: not enough memory for shape {shape} of {dtype} ({e})") from None
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


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
        # a non-canonical file may break 5.6, and 5.3's upper bound: a row of repeats longer than the plain size
        if canonical or e.invariant not in ("5.3", "5.6"):
            raise
        c = t.compressed_indices()
        if e.invariant == "5.3" and (c[..., 1:] < c[..., :-1]).any():  # a step down (np.diff would wrap)
            raise
        _check_plain_bounds(t)
        return t
    t._set_validated()  # checked: 5.6 holds
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
        dtype = _member_header(zf, info, f"{path}: member {info.filename}", file_size)[2]
        # SciPy's load_npz casts float indices to integers itself (1.9 -> 1): refused here, as from_scipy does
        if info.filename[:-4] in _SCIPY_INDEX_MEMBERS and dtype.kind not in "iu":
            raise TypeError(f"{path}: member {info.filename} has dtype {dtype}, not integers")
    import scipy.sparse as sp

    from ..interop.scipy import from_scipy

    try:
        m = sp.load_npz(path)
    except (*_READ_ERRORS, NotImplementedError, TypeError) as e:
        raise ValueError(f"{path}: not a valid scipy.sparse.save_npz file ({e})") from None
    if m.format == "dia" and m.shape[0] > max(_DIA_ROWS_ALWAYS, 16 * m.data.size):
        # from_scipy converts dia to CSR, one index per row: a tiny file may declare 2^40 rows
        raise ValueError(f"{path}: a dia matrix of shape {m.shape} with {m.data.size} stored values: converting it "
                         f"to CSR takes an index per row (refused above {_DIA_ROWS_ALWAYS} rows and 16 per stored "
                         "value)")
    try:
        return from_scipy(m, check_invariants=True)
    except InvariantError as e:
        raise _in_file(e, path) from None
    except TypeError as e:
        raise TypeError(f"{path}: {e}") from None
    except (ValueError, OverflowError) as e:  # "array is too big" and the like: a size SciPy cannot convert
        raise ValueError(f"{path}: cannot convert the {m.format} matrix of shape {m.shape} ({e})") from None
    except MemoryError as e:
        raise MemoryError(f"{path}: not enough memory to convert the {m.format} matrix of shape {m.shape} "
                          f"({e})") from None


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
        names the file, and the member or the line): also a size that does not
        fit int64 or that the file cannot hold (see :func:`read_mtx` for Matrix
        Market), and a SciPy ``dia`` file whose rows (one CSR index each) number
        more than 2^24 and 16 per stored value.
    MemoryError
        A size the file does hold, too large for this machine (the file named).
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
