"""``save`` to one file: every rank writes its rows into a single ``.npz`` of
:func:`sparsetensor.save`'s format, in parallel.

The file has :func:`sparsetensor.save`'s format for the gathered matrix (a csr file for a
:class:`DistCSR`, a bsr file for a :class:`DistBSR`; members stored uncompressed, each member's
data aligned to 64 bytes): :func:`sparsetensor.load` reads it in one process, and
:func:`sparsetensor.mpi.load` on any number of ranks, each rank mapping only its rows (csr).

Every rank can work out where everything goes from the global shape, dtypes and each rank's
row and entry counts (one allgather), so the zip is laid out up front::

    metadata.json                      (root)
    compressed_indices.npy header      (root)  rank r's row pointers (shifted by the entries before
                                               it) at its first row; the last pointer (root)
    plain_indices.npy header           (root)  rank r's global columns at its first entry
    values.npy header                  (root)  rank r's values at its first entry
    central directory, zip64 records   (root)

Each rank writes its own slices with ``os.pwrite`` (no rank holds more than its rows) and the
CRC-32 of each slice; root joins the slices' CRCs in rank order (``_crc32_combine``, the zero-
shift arithmetic of zlib's ``crc32_combine``, which Python's zlib does not expose) into each
member's checksum for the headers. The file is written under a temporary name beside ``path``
and renamed over it once every rank has synced its writes, so ``path`` appears complete or not
at all. Errors on any rank raise on every rank (:func:`agree`), and the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import tempfile
import zlib
from io import BytesIO

import numpy as np
from mpi4py import MPI

from .. import io as _io
from ..io import _files
from ._comm import agree, bytes_of

__all__ = ["save_file"]

_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, as sparsetensor.save writes (the same bytes each time)
_VERSION = 45                         # zip64
_UNIX = 3 << 8                        # "made by" a Unix system: the external attributes are its mode
_ATTR = 0o644 << 16
_FFFF32 = 0xFFFFFFFF


# -- CRC-32 of concatenated slices ------------------------------------------------------------
def _gf2_times(mat: list, vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list) -> list:
    return [_gf2_times(mat, m) for m in mat]


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)``: ``crc1`` is carried
    through ``len2`` zero bytes by repeated squaring of the one-zero-bit operator (a 32 x 32 matrix
    over GF(2)), then xored with ``crc2``."""
    if len2 <= 0:
        return crc1
    op = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
    for _ in range(3):  # one zero byte: eight zero bits
        op = _gf2_square(op)
    while len2:
        if len2 & 1:
            crc1 = _gf2_times(op, crc1)
        len2 >>= 1
        if len2:
            op = _gf2_square(op)
    return crc1 ^ crc2


# -- the zip structures ----------------------------------------------------------------------
def _npy_header(dtype: np.dtype, shape: tuple) -> bytes:
    buf = BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(dtype),
                                               "fortran_order": False, "shape": tuple(int(s) for s in shape)})
    return buf.getvalue()


def _local_header(name: bytes, crc: int, size32: int, extra: bytes) -> bytes:
    """``size32``: the member's size, or 0xFFFFFFFF where ``extra`` holds a zip64 record with it."""
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, _VERSION, 0, 0, 0, _DOS_DATE, crc, size32, size32,
                       len(name), len(extra)) + name + extra


def _central_entry(name: bytes, crc: int, size: int, offset: int) -> bytes:
    extra = struct.pack("<HHQQQ", 1, 24, size, size, offset)  # zip64: sizes and the header's offset
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, _UNIX | _VERSION, _VERSION, 0, 0, 0, _DOS_DATE, crc,
                       _FFFF32, _FFFF32, len(name), len(extra), 0, 0, 0, _ATTR, _FFFF32) + name + extra


def _trailer(entries: int, cd_offset: int, cd_size: int) -> bytes:
    z64 = cd_offset + cd_size
    record = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, _UNIX | _VERSION, _VERSION, 0, 0, entries, entries,
                         cd_size, cd_offset)
    locator = struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, entries, entries, _FFFF32, _FFFF32, 0)
    return record + locator + end


class _Layout:
    """Where each member's header and data go: the same numbers on every rank."""

    def __init__(self, meta: dict, members: list):
        self.meta = json.dumps({"format": _io.FORMAT, "version": _io.VERSION, **meta}).encode() + b"\n"
        name = _io.METADATA.encode()
        self.meta_header = _local_header(name, zlib.crc32(self.meta), len(self.meta), b"")
        offset = len(self.meta_header) + len(self.meta)
        self.members = []  # (name, npy header, offset of the local header, offset of the data, data bytes)
        for member, dtype, shape in members:
            name = (member + ".npy").encode()
            npy = _npy_header(dtype, shape)
            # as sparsetensor.save: our padding record, then the 20-byte zip64 record
            pad = _io._padding(offset + 30 + len(name) + 20)
            data_start = offset + 30 + len(name) + len(pad) + 20 + len(npy)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            self.members.append((name, pad, npy, offset, data_start, nbytes))
            offset = data_start + nbytes
        self.end = offset

    def headers(self, crcs: list) -> list:
        """(offset, bytes) of every header, given each member's CRC-32; then the trailer."""
        out = [(0, self.meta_header + self.meta)]
        cd = [_central_entry(_io.METADATA.encode(), zlib.crc32(self.meta), len(self.meta), 0)]
        for (name, pad, npy, at, data, nbytes), crc in zip(self.members, crcs):
            size = len(npy) + nbytes
            extra = pad + struct.pack("<HHQQ", 1, 16, size, size)
            out.append((at, _local_header(name, crc, _FFFF32, extra) + npy))
            cd.append(_central_entry(name, crc, size, at))
        cd = b"".join(cd)
        out.append((self.end, cd + _trailer(len(self.members) + 1, self.end, len(cd))))
        return out


def _bytes_of(data) -> memoryview:
    """``data`` (bytes or a C-contiguous array) as a flat byte view (a memoryview cannot be cast
    while its shape has a 0, as an empty (0, r, c) block array's has)."""
    return memoryview(bytes_of(data) if isinstance(data, np.ndarray) else data).cast("B")


def _pwrite_all(fd: int, data, offset: int) -> None:
    view = _bytes_of(data)
    while view.nbytes:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


# -- save --------------------------------------------------------------------------------------
def save_file(path: str, A) -> None:
    """Write ``A`` (a DistCSR or DistBSR) to the single file ``path`` (collective); see the module."""
    comm = A._comm
    rank, size = comm.rank, comm.size
    t = A.local_rows()
    blocked = A._blocked
    R, C = A.blocksize if blocked else (1, 1)
    crow, cols, vals = t.compressed_indices(), t.plain_indices(), t.values()
    counts = np.array(comm.allgather((int(crow.shape[0]) - 1, int(cols.shape[0]))), dtype=np.int64).reshape(size, 2)
    row_at = np.concatenate([[0], np.cumsum(counts[:, 0])])
    nnz_at = np.concatenate([[0], np.cumsum(counts[:, 1])])
    nrows, nnz = int(row_at[-1]), int(nnz_at[-1])
    canonical = bool(comm.allreduce(int(A._diag.is_coalesced() and A._offd.is_coalesced()), op=MPI.MIN))
    shape = tuple(int(s) for s in A.shape)
    idt = np.dtype(A.index_dtype)
    if max(nnz, shape[0] // R, shape[1] // C) > np.iinfo(idt).max:
        idt = np.dtype(np.int64)
    vdt = np.dtype(A.dtype)
    meta = {"layout": "bsr" if blocked else "csr", "shape": list(shape), "index_dtype": idt.name,
            "value_dtype": vdt.name, "coalesced": canonical, "nnz": nnz, "batch_dim": 0, "dense_dim": 0,
            "blocksize": [R, C] if blocked else None}
    layout = _Layout(meta, [("compressed_indices", idt, (nrows + 1,)), ("plain_indices", idt, (nnz,)),
                            ("values", vdt, (nnz, R, C) if blocked else (nnz,))])
    (_, _, _, _, crow_at, _), (_, _, _, _, cols_at, _), (_, _, _, _, vals_at, _) = layout.members
    mine = [(crow_at + int(row_at[rank]) * idt.itemsize,
             np.ascontiguousarray(crow[:-1].astype(np.int64) - int(crow[0]) + int(nnz_at[rank]), dtype=idt)),
            (cols_at + int(nnz_at[rank]) * idt.itemsize, np.ascontiguousarray(cols, dtype=idt)),
            (vals_at + int(nnz_at[rank]) * vdt.itemsize * R * C, np.ascontiguousarray(vals, dtype=vdt))]

    def create():
        directory = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise ValueError(f"{path}: is a directory; sparsetensor.mpi.save writes one file to a path ending in "
                             ".npz, a directory of parts to any other path")
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
        try:
            os.ftruncate(fd, layout.end)
            if hasattr(os, "fchmod"):
                os.fchmod(fd, _files.new_file_mode())
        finally:
            os.close(fd)
        return tmp

    tmp = comm.bcast(agree(comm, create) if rank == 0 else agree(comm, lambda: None), root=0)

    def write():
        fd = os.open(tmp, os.O_WRONLY)
        try:
            for offset, arr in mine:
                _pwrite_all(fd, arr, offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        return [zlib.crc32(_bytes_of(arr)) for _, arr in mine]

    try:
        crcs = agree(comm, write)
        every = comm.gather((crcs, [arr.nbytes for _, arr in mine]), root=0)

        def finish():
            last = np.array([nnz], dtype=idt)
            member_crcs = []
            for m, (name, pad, npy, at, data, nbytes) in enumerate(layout.members):
                crc = zlib.crc32(npy)
                for part_crcs, part_sizes in every:
                    crc = _crc32_combine(crc, part_crcs[m], part_sizes[m])
                if m == 0:  # the last row pointer
                    crc = _crc32_combine(crc, zlib.crc32(last.tobytes()), last.nbytes)
                member_crcs.append(crc)
            fd = os.open(tmp, os.O_WRONLY)
            try:
                _pwrite_all(fd, last, layout.members[0][4] + nrows * idt.itemsize)
                for offset, data in layout.headers(member_crcs):
                    _pwrite_all(fd, data, offset)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)

        agree(comm, finish if rank == 0 else lambda: None)
    except BaseException:
        if rank == 0:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
