"""``save``: a :class:`~sparsetensor.mpi.DistCSR` as a directory of parts, one per rank, and its reader.

Layout of the directory ``path``::

    path/part-00000-of-00003.npz     rank 0's rows: a csr .npz of shape (rows, ncols), global columns
    path/part-00001-of-00003.npz     (sparsetensor.save's format: members stored, so they can be mapped)
    path/part-00002-of-00003.npz
    path/manifest.json               written last: shape, dtypes, partitions, each part's rows, nnz and
                                     the zip CRC-32 of each of its members

Every rank writes its own part (no rank holds more than its rows); root writes the manifest
once every part is written, so a directory without one is an interrupted save. Each part
is an ordinary sparsetensor file (:func:`sparsetensor.load` reads it alone).

Reading (:func:`sparsetensor.mpi.load` on the directory, any number of ranks): root reads
the manifest and checks every part against it without reading the data (the zip
directory's CRC-32 of each member, the members' headers, the metadata), and the row
pointers at the boundaries it splits on; then each rank maps the parts that hold its rows
and reads only those rows. On as many ranks as wrote it, the saved partitions are kept
(unless ``row_starts``/``col_starts`` are given); otherwise rows are balanced by nnz as
for a single file.
"""

from __future__ import annotations

import json
import os
import re
import zipfile

import numpy as np

from .. import io as _io
from .._core._errors import InvariantError
from ..io import _files
from ._comm import agree, same_on_every_rank
from ._bsr import DistBSR, _default_col_starts
from ._file import save_file
from ._matrix import DistCSR
from ._partition import check_row_pointers, check_starts

__all__ = ["MANIFEST", "load_parts", "save"]

MANIFEST = "manifest.json"
FORMAT = "sparsetensor.mpi.parts"
VERSION = 1
_PART = re.compile(r"part-\d{5,}-of-\d{5,}\.npz")
_MANIFEST_LIMIT = 1 << 26  # bytes: about 20 bytes per rank and part, far below this


def _part_name(rank: int, size: int) -> str:
    return f"part-{rank:05d}-of-{size:05d}.npz"


def _crcs(path: str) -> dict:
    with zipfile.ZipFile(path) as zf:
        return {m: zf.getinfo(m + ".npy").CRC for m in _io._COMPRESSED_MEMBERS}


def save(path, A: DistCSR) -> None:
    """Write a :class:`DistCSR` as one file or as a directory of parts, one per rank (collective).

    A ``path`` ending in ``.npz`` gets one file of :func:`sparsetensor.save`'s format
    for the gathered matrix (csr; bsr for a :class:`DistBSR`), written in
    parallel: every rank writes its rows at their place in the file, and root 0
    the headers (the file appears complete or not at all, as with
    :func:`sparsetensor.save`). Any other ``path`` is a directory: each rank
    writes its own rows to ``path/part-RRRRR-of-SSSSS.npz`` (a csr file of
    :func:`sparsetensor.save`'s format with global column indices), then root 0
    writes ``path/manifest.json`` (shape, dtypes, partitions, and each part's
    rows, nnz and member checksums). :func:`sparsetensor.mpi.load` reads either
    on any number of ranks, each rank reading only its rows (a bsr file: root
    reads it and scatters the blocks).

    Parameters
    ----------
    path : str or os.PathLike
        The same path on every rank (a shared file system). A ``.npz`` file is
        replaced as a whole. A directory is created if missing; a previous save
        there is replaced: its manifest is removed
        before the parts are written (a save that fails half-way leaves no
        manifest, which :func:`~sparsetensor.mpi.load` reports), and its parts
        that this save does not rewrite are removed at the end.
    A : DistCSR or DistBSR
        A :class:`DistBSR` is written in its point form (every entry of every stored
        block, as :meth:`DistBSR.to_csr` gives it; the parts stay csr files that any
        reader of this format takes) with its block size in the manifest
        (``"blocksize": [r, c]``); :func:`~sparsetensor.mpi.load` then returns a
        DistBSR of the same blocks, on any number of ranks (rows split on block
        boundaries).

    Raises
    ------
    ValueError
        On every rank, when ``path`` exists and is not a directory (or, for a
        ``.npz`` path, is a directory).
    OSError
        On every rank, when any rank cannot write (naming that rank's file).

    Examples
    --------
    >>> import os, tempfile, numpy as np, sparsetensor as st
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> comm = MPI.COMM_WORLD
    >>> path = comm.bcast(os.path.join(tempfile.mkdtemp(), "m") if comm.rank == 0 else None)
    >>> t = st.from_dense(np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 2.0]]))
    >>> A = stmpi.DistCSR.from_global(t if comm.rank == 0 else None)
    >>> stmpi.save(path, A)
    >>> B = stmpi.load(path)              # on any number of ranks
    >>> B.shape, B.nnz, bool((B.row_starts == A.row_starts).all())
    ((3, 3), 5, True)
    """
    if isinstance(path, DistCSR) and not isinstance(A, DistCSR):
        raise TypeError("sparsetensor.mpi.save(path, A): the path comes first, as in sparsetensor.save")
    if not isinstance(A, DistCSR):
        raise TypeError(f"sparsetensor.mpi.save(path, A): A must be a DistCSR, got {type(A).__name__}")
    comm = A._comm
    # one path on every rank: a rank writing elsewhere (a file here, a directory there) waits forever
    path = agree(comm, os.fspath, path)
    same_on_every_rank(comm, "sparsetensor.mpi.save", path=path)
    if path.endswith(".npz"):
        return save_file(path, A)
    rank, size = comm.rank, comm.size
    manifest = os.path.join(path, MANIFEST)

    def prepare():
        if os.path.exists(path) and not os.path.isdir(path):
            raise ValueError(f"{path}: exists and is not a directory; sparsetensor.mpi.save writes a directory of "
                             "parts (sparsetensor.save writes one file)")
        os.makedirs(path, exist_ok=True)
        if os.path.lexists(manifest):
            os.remove(manifest)

    agree(comm, prepare if rank == 0 else lambda: None)
    name = _part_name(rank, size)

    def write():
        t = A.local_rows()
        if A._blocked:
            t = t.to_sparse_csr()
        t._canonical = A._diag.is_coalesced() and A._offd.is_coalesced()  # checked rows, re-sorted
        part = os.path.join(path, name)
        _io.save(part, t)
        return {"file": name, "rows": int(t.shape[0]), "nnz": int(t.nnz), "crc": _crcs(part)}

    entry = agree(comm, write)
    entries = comm.gather(entry, root=0)  # a few numbers per rank

    def finish():
        meta = {"format": FORMAT, "version": VERSION, "shape": list(A.shape), "value_dtype": A.dtype.name,
                "index_dtype": A.index_dtype.name, "nnz": sum(e["nnz"] for e in entries), "row_starts": A._row_starts.tolist(),
                "col_starts": A._col_starts.tolist(), "parts": entries}
        if A._blocked:
            meta["blocksize"] = list(A.blocksize)
        keep = {e["file"] for e in entries}
        for f in os.listdir(path):  # parts of an earlier save with another rank count
            if _PART.fullmatch(f) and f not in keep:
                os.remove(os.path.join(path, f))
        _files.atomic_write(manifest, lambda f: f.write((json.dumps(meta) + "\n").encode()))

    agree(comm, finish if rank == 0 else lambda: None)


# -- reading --------------------------------------------------------------------------------
def _bad(path: str, msg: str) -> ValueError:
    return ValueError(f"{path}: {msg} (a directory written by sparsetensor.mpi.save)")


def _int_list(v, n=None) -> bool:
    return (isinstance(v, list) and (n is None or len(v) == n)
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v))


def _read_manifest(path: str) -> dict:
    manifest = os.path.join(path, MANIFEST)
    if not os.path.exists(manifest):
        raise FileNotFoundError(f"{manifest}: missing; {path} is not a directory written by sparsetensor.mpi.save, "
                                "or its save did not finish")
    if os.path.getsize(manifest) > _MANIFEST_LIMIT:
        raise _bad(manifest, f"larger than {_MANIFEST_LIMIT} bytes")
    try:
        with open(manifest, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise _bad(manifest, f"not readable JSON ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _bad(manifest, f"format must be {FORMAT!r}")
    if not isinstance(meta.get("version"), int) or meta["version"] > VERSION:
        raise _bad(manifest, f"version {meta.get('version')!r}: this sparsetensor reads versions up to {VERSION}")
    if not _int_list(meta.get("shape"), 2):
        raise _bad(manifest, f"shape must be two non-negative integers, got {meta.get('shape')!r}")
    if meta.get("value_dtype") not in _io._VALUE_DTYPES or meta.get("index_dtype") not in _io._INDEX_DTYPES:
        raise _bad(manifest, f"unknown dtypes {meta.get('value_dtype')!r}, {meta.get('index_dtype')!r}")
    parts = meta.get("parts")
    if not isinstance(parts, list) or not parts:
        raise _bad(manifest, "parts must be a non-empty list")
    for k, e in enumerate(parts):
        ok = (isinstance(e, dict) and isinstance(e.get("file"), str) and _PART.fullmatch(e["file"])
              and _int_list([e.get("rows"), e.get("nnz")]) and isinstance(e.get("crc"), dict)
              and set(e["crc"]) == set(_io._COMPRESSED_MEMBERS) and _int_list(list(e["crc"].values())))
        if not ok:
            raise _bad(manifest, f"part {k} is malformed: {e!r}")
    M, _ = meta["shape"]
    for key, n in (("row_starts", M), ("col_starts", meta["shape"][1])):
        s = meta.get(key)
        if not (_int_list(s, len(parts) + 1) and s[0] == 0 and s[-1] == n and all(np.diff(s) >= 0)):
            raise _bad(manifest, f"{key} must be {len(parts) + 1} non-decreasing integers from 0 to {n}")
    rows = [e["rows"] for e in parts]
    if rows != np.diff(meta["row_starts"]).tolist():
        raise _bad(manifest, f"the parts' rows {rows} do not match row_starts {meta['row_starts']}")
    if "blocksize" in meta:
        bs = meta["blocksize"]
        if not (_int_list(bs, 2) and min(bs) >= 1 and all(np.remainder(meta["row_starts"], bs[0]) == 0)
                and all(np.remainder(meta["col_starts"], bs[1]) == 0)):
            raise _bad(manifest, f"blocksize must be two positive integers dividing the saved partitions, got {bs!r}")
    return meta


def _map_part(path: str, part: dict, meta: dict) -> tuple:
    """A part's (row pointers, columns, values), mapped, after checking it against the manifest."""
    f = os.path.join(path, part["file"])
    if not os.path.exists(f):
        raise FileNotFoundError(f"{f}: missing; {os.path.join(path, MANIFEST)} lists {len(meta['parts'])} parts")
    file_size = os.stat(f).st_size
    try:
        zf = zipfile.ZipFile(f)
    except _io._READ_ERRORS as e:
        raise ValueError(f"{f}: not a readable part ({e})") from None
    with zf:
        if _io.METADATA not in zf.namelist():
            raise ValueError(f"{f}: not a sparsetensor file (no {_io.METADATA})")
        m = _io._read_metadata(zf, f)
        want = {"layout": "csr", "shape": [part["rows"], meta["shape"][1]], "value_dtype": meta["value_dtype"],
                "index_dtype": meta["index_dtype"], "nnz": part["nnz"]}
        got = {k: m.get(k) for k in want}
        if got != want:
            raise ValueError(f"{f}: does not match {MANIFEST} (a part of another save?): the part has {got}, the "
                             f"manifest says {want}")
        try:
            crc = {k: zf.getinfo(k + ".npy").CRC for k in _io._COMPRESSED_MEMBERS}
        except KeyError as e:
            raise ValueError(f"{f}: member {e} missing") from None
        if crc != part["crc"]:
            raise ValueError(f"{f}: its members' checksums {crc} differ from those in {MANIFEST} {part['crc']} (a "
                             "part of another save, or changed since)")
        arrays = [_io._read_member(zf, f, k, "r", file_size) for k in _io._COMPRESSED_MEMBERS]
    crow, cols, vals = arrays
    for k, a in zip(_io._COMPRESSED_MEMBERS, arrays):
        want_dt = meta["value_dtype"] if k == "values" else meta["index_dtype"]
        if a.dtype.name != want_dt:
            raise ValueError(f"{f}: member {k}.npy has dtype {a.dtype}, the metadata says {want_dt}")
    if crow.shape != (part["rows"] + 1,) or cols.shape != (part["nnz"],) or vals.shape != cols.shape:
        raise ValueError(f"{f}: members of shapes {crow.shape}, {cols.shape}, {vals.shape} do not make the "
                         f"{part['rows']} rows and {part['nnz']} entries of {MANIFEST}")
    return crow, cols, vals


def _balanced(crows, first_rows, first_entries, M: int, nnz: int, size: int) -> np.ndarray:
    """:func:`~sparsetensor.mpi._partition.balanced_starts` of the whole matrix, one part at a time."""
    total = nnz + M
    targets = (np.arange(1, size, dtype=np.int64) * total + size // 2) // size
    inner = np.full(size - 1, M, dtype=np.int64)
    todo = np.ones(size - 1, dtype=bool)
    for crow, r0, p0 in zip(crows, first_rows, first_entries):
        n = crow.shape[0] - 1
        w = crow.astype(np.int64) + (p0 + r0) + np.arange(n + 1, dtype=np.int64)
        k = np.searchsorted(w, targets, side="left")
        hit = todo & (k <= n)
        inner[hit] = r0 + k[hit]
        todo &= ~hit
    starts = np.concatenate([[0], np.clip(inner, 0, M), [M]]).astype(np.int64)
    return np.maximum.accumulate(starts)


def _plan(path: str, size: int, row_starts, col_starts):
    """On root: the manifest and parts checked, the new partitions and where each rank's rows start."""
    meta = _read_manifest(path)
    parts = meta["parts"]
    M, N = meta["shape"]
    R = np.asarray(meta["row_starts"], dtype=np.int64)
    P = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([e["nnz"] for e in parts], out=P[1:])
    maps = [_map_part(path, e, meta) for e in parts]
    bs = meta.get("blocksize")
    if row_starts is not None:
        starts = check_starts(row_starts, M, size, "row_starts")
        if bs and np.any(starts % bs[0]):
            raise ValueError(f"row_starts must be multiples of the block size {bs[0]} of the saved DistBSR; got "
                             f"{starts.tolist()}")
    elif size == len(parts):
        starts = R.copy()  # as saved
    else:
        starts = _balanced([m[0] for m in maps], R[:-1], P[:-1], M, int(P[-1]), size)
        if bs:  # each boundary to its nearest block boundary: still non-decreasing, 0 and M kept
            starts = (starts + bs[0] // 2) // bs[0] * bs[0]
    if col_starts is None and row_starts is None and size == len(parts):
        cstarts = np.asarray(meta["col_starts"], dtype=np.int64)
    elif bs:
        cstarts = _default_col_starts((M, N), tuple(bs), starts, col_starts, size)
    else:
        cstarts = DistCSR._col_starts((M, N), starts, col_starts, size)
    at = np.empty(size + 1, dtype=np.int64)  # each rank's first entry, globally
    for p, (crow, _, _) in enumerate(maps):
        inside = starts[(starts >= R[p]) & (starts <= R[p + 1])] - R[p]
        try:
            check_row_pointers(crow, np.unique(np.concatenate([[0, R[p + 1] - R[p]], inside])), parts[p]["nnz"])
        except InvariantError as e:
            raise _files.in_file(e, os.path.join(path, parts[p]["file"]) + f" (rows from global row {R[p]})") from None
    for r, s in enumerate(starts.tolist()):
        p = min(int(np.searchsorted(R, s, side="right")) - 1, len(parts) - 1)
        at[r] = P[p] + int(maps[p][0][s - R[p]])
    canonical = True  # parts are written canonical; a part that is not raises when checked
    return (M, N), starts, cstarts, R, [e["file"] for e in parts], at, canonical, meta


def _read_rows(path: str, files, R: np.ndarray, r0: int, r1: int, meta: dict):
    """This rank's rows ``[r0, r1)`` from the parts that hold them: (row pointers from 0, columns, values)."""
    crows, cols, vals = [np.zeros(1, dtype=np.int64)], [], []
    offset = 0
    for p, name in enumerate(files):
        lo, hi = max(r0, int(R[p])) - int(R[p]), min(r1, int(R[p + 1])) - int(R[p])
        if hi <= lo:
            continue
        crow, c, v = _map_part(path, meta["parts"][p], meta)
        piece = np.asarray(crow[lo:hi + 1], dtype=np.int64)
        p0, p1 = int(piece[0]), int(piece[-1])
        crows.append(piece[1:] - p0 + offset)
        cols.append(np.asarray(c[p0:p1]))
        vals.append(np.asarray(v[p0:p1]))
        offset += p1 - p0
    idt, vdt = _io._INDEX_DTYPES[meta["index_dtype"]], _io._VALUE_DTYPES[meta["value_dtype"]]
    cols = np.concatenate(cols) if cols else np.zeros(0, dtype=idt)
    vals = np.concatenate(vals) if vals else np.zeros(0, dtype=vdt)
    return np.concatenate(crows), cols, vals


def load_parts(path: str, comm, root: int, row_starts, col_starts, exchange: str) -> DistCSR:
    """:func:`sparsetensor.mpi.load` of a directory written by :func:`save` (collective)."""
    rank, size = comm.rank, comm.size
    if rank == root:
        plan = agree(comm, _plan, path, size, row_starts, col_starts)
    else:
        plan = agree(comm, lambda: None)
    shape, starts, cstarts, R, files, at, canonical, meta = comm.bcast(plan, root=root)
    r0, r1 = int(starts[rank]), int(starts[rank + 1])
    crow64, cols, vals = agree(comm, _read_rows, path, files, R, r0, r1, meta)
    try:
        A = DistCSR._from_parts(comm, shape, starts, cstarts, crow64, cols, vals, int(at[rank]), canonical, exchange)
    except InvariantError as e:  # every rank raises; name the directory
        raise _files.in_file(e, path) from None
    if "blocksize" not in meta:
        return A
    try:
        return DistBSR.from_csr(A, tuple(meta["blocksize"]))
    finally:
        A.free()

