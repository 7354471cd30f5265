"""File I/O: .npz round trips (every layout, dtype, batch/dense dims), memory mapping, hostile files,
SciPy save_npz files and atomic writes (Matrix Market: test_mtx.py)."""

from __future__ import annotations

import doctest
import json
import os
import struct
import zipfile

import numpy as np
import pytest

import sparsetensor as st
import sparsetensor.io._mtx as stmtx
import sparsetensor.io as stio
from conftest import INDEX_DTYPES, LAYOUTS, VALUE_DTYPES, random_dense
from io_support import make_tensor

sp = pytest.importorskip("scipy.sparse")

DIMS = [((), ()), ((2,), (2,)), ((2, 1), ()), ((), (3,))]  # (batch, dense); batch dims are sparse dims for coo


# -- helpers -----------------------------------------------------------------------------------
def members(t):
    if isinstance(t, st.COOTensor):
        return {"indices": t.indices(), "values": t.values()}
    return {"compressed": t.compressed_indices(), "plain": t.plain_indices(), "values": t.values()}


def assert_same_tensor(u, t):
    assert type(u) is type(t)
    assert u.layout == t.layout and u.shape == t.shape and u.dtype == t.dtype and u.index_dtype == t.index_dtype
    assert u.is_coalesced() == t.is_coalesced()
    mu, mt = members(u), members(t)
    for name in mt:
        assert mu[name].dtype == mt[name].dtype, name
        assert mu[name].shape == mt[name].shape, name
        np.testing.assert_array_equal(mu[name], mt[name], err_msg=name)


def memmap_of(x):
    """The np.memmap that ``x`` views, or None."""
    while x is not None:
        if isinstance(x, np.memmap):
            return x
        x = x.base if isinstance(x, np.ndarray) else None
    return None


def write_zip(path, meta=None, arrays=(), raw=(), compress=False):
    """A hand-made .npz: ``meta`` (dict, or bytes written as they are), arrays (pickling allowed), raw members."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        if meta is not None:
            zf.writestr("metadata.json", meta if isinstance(meta, bytes) else json.dumps(meta))
        for name, a in dict(arrays).items():
            with zf.open(name + ".npy", "w") as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=True)
        for name, data in dict(raw).items():
            zf.writestr(name, data)
    return path


def meta_of(path):
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("metadata.json"))


def arrays_of(path):
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files if k != "metadata.json"}


def rewrite(path, out, meta=None, arrays=None, drop=()):
    """Copy an npz written by st.save, replacing metadata keys and/or arrays."""
    m = meta_of(path)
    m.update(meta or {})
    a = arrays_of(path)
    a.update(arrays or {})
    for d in drop:
        a.pop(d)
    return write_zip(out, m, a)


# -- .npz round trips -----------------------------------------------------------------------------
@pytest.mark.parametrize("batch, dense", DIMS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip(tmp_path, rng, layout, index_dtype, dtype, batch, dense):
    t, _ = make_tensor(rng, layout, index_dtype, dtype, batch, dense)
    path = tmp_path / "t.npz"
    st.save(path, t)
    u = st.load(path)
    assert_same_tensor(u, t)
    meta = meta_of(path)
    assert meta["format"] == "sparsetensor" and meta["version"] == 1 and meta["layout"] == layout
    assert meta["value_dtype"] == np.dtype(dtype).name and meta["index_dtype"] == np.dtype(index_dtype).name
    assert os.listdir(tmp_path) == ["t.npz"]  # no temporary file left behind


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("mmap_mode", [None, "r", "c"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_compress_and_mmap(tmp_path, rng, layout, compress, mmap_mode):
    t, _ = make_tensor(rng, layout, np.int32, np.complex64, batch=(2,), dense=(2,))
    path = tmp_path / "t.npz"
    st.save(path, t, compress=compress)
    u = st.load(path, mmap_mode=mmap_mode)
    assert_same_tensor(u, t)
    for name, x in members(u).items():
        mm = memmap_of(x)
        if mmap_mode is None or compress:
            assert mm is None, name
        else:
            assert mm is not None and os.path.samefile(mm.filename, path), name
            assert np.shares_memory(x, mm)
            # index members are always read-only views (issue 34); values follow the mode
            assert x.flags.writeable == (mmap_mode == "c" and name == "values"), name
    if mmap_mode == "c" and not compress:
        u.values()[...] = 0  # copy-on-write: the file does not change
        assert_same_tensor(st.load(path), t)


def test_mmap_members_are_aligned_and_not_read(tmp_path, rng):
    t, _ = make_tensor(rng, "bsr", np.int64, np.float64, batch=(2,), dense=(3,))
    path = tmp_path / "t.npz"
    st.save(path, t)
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for info in zf.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
            if info.filename.endswith(".npy"):
                f.seek(info.header_offset)
                n, m = struct.unpack("<HH", f.read(30)[26:30])
                f.seek(info.header_offset + 30 + n + m)
                np.lib.format.read_magic(f)
                np.lib.format.read_array_header_1_0(f)
                assert f.tell() % 64 == 0, info.filename  # .npy data 64-byte aligned in the file
    u = st.load(path, mmap_mode="r")
    assert all(x.flags.aligned for x in members(u).values())
    assert isinstance(u.values().base, np.memmap)


def test_block_transposed_values_round_trip(tmp_path, rng):
    t, _ = make_tensor(rng, "bsr", np.int32, np.float32, batch=(2,), dense=(2,))
    bsc = t.mT
    assert not bsc.values().flags.c_contiguous  # a view with swapped block dims
    st.save(tmp_path / "t.npz", bsc)
    u = st.load(tmp_path / "t.npz", mmap_mode="r")
    assert_same_tensor(u, bsc)
    assert u.blocksize == bsc.blocksize and u.values().flags.c_contiguous


def test_uncoalesced_coo_keeps_duplicates_and_flag(tmp_path):
    t = st.sparse_coo_tensor([[1, 0, 1], [0, 2, 0]], [1.0, 2.0, 3.0], size=(2, 3))
    assert not t.is_coalesced()
    st.save(tmp_path / "t.npz", t)
    u = st.load(tmp_path / "t.npz")
    assert_same_tensor(u, t)
    np.testing.assert_array_equal(u.to_dense(), [[0, 0, 2], [4, 0, 0]])


def test_non_canonical_compressed_round_trip(tmp_path):
    t = st.sparse_csr_tensor([0, 3, 3], [2, 0, 2], [1.0, 2.0, 3.0], size=(2, 3), check_invariants=False)
    st.save(tmp_path / "t.npz", t)
    assert meta_of(tmp_path / "t.npz")["coalesced"] is False
    u = st.load(tmp_path / "t.npz")
    assert not u.is_coalesced()
    np.testing.assert_array_equal(u.plain_indices(), [2, 0, 2])
    # a file that says canonical must be canonical
    rewrite(tmp_path / "t.npz", tmp_path / "c.npz", meta={"coalesced": True})
    with pytest.raises(st.InvariantError, match="c.npz") as e:
        st.load(tmp_path / "c.npz")
    assert e.value.invariant == "5.6"


def test_unchecked_but_canonical_compressed_is_proven_canonical(tmp_path):
    t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0], size=(2, 2), check_invariants=False)
    assert not t.is_coalesced()
    st.save(tmp_path / "t.npz", t)
    assert st.load(tmp_path / "t.npz").is_coalesced()  # the load's full check proves 5.6


def test_non_canonical_file_is_still_bounds_checked(tmp_path):
    # row 0 breaks 5.6, row 1 breaks 5.5: the kernel stops at the first row; load must still refuse
    t = st.sparse_csr_tensor([0, 2, 3], [1, 0, 1], [1.0, 2.0, 3.0], size=(2, 2), check_invariants=False)
    st.save(tmp_path / "t.npz", t)
    rewrite(tmp_path / "t.npz", tmp_path / "bad.npz", arrays={"plain_indices": np.array([1, 0, 7])})
    with pytest.raises(st.InvariantError) as e:
        st.load(tmp_path / "bad.npz")
    assert e.value.invariant == "5.5" and "bad.npz" in str(e.value)


@pytest.mark.parametrize("mmap_mode", [None, "r"])
@pytest.mark.parametrize("a", [np.arange(12.0).reshape(3, 4),
                               np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
                               np.array(1 + 2j), np.zeros((0, 3), np.bool_)], ids=["c", "fortran", "0d", "empty"])
def test_dense_array_round_trip(tmp_path, a, mmap_mode):
    st.save(tmp_path / "a.npz", a)
    b = st.load(tmp_path / "a.npz", mmap_mode=mmap_mode)
    assert isinstance(b, np.ndarray) and b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(b, a)
    assert (memmap_of(b) is not None) == (mmap_mode is not None and a.size > 0)
    assert meta_of(tmp_path / "a.npz")["layout"] == "strided"


def test_empty_tensors(tmp_path):
    t = st.sparse_csr_tensor(np.zeros((2, 4), np.int32), np.zeros((2, 0), np.int32), np.zeros((2, 0)), size=(2, 3, 5))
    st.save(tmp_path / "e.npz", t)
    assert_same_tensor(st.load(tmp_path / "e.npz", mmap_mode="r"), t)
    c = st.sparse_coo_tensor(np.zeros((2, 0), np.int64), np.zeros(0, np.int8), size=(0, 4))
    st.save(tmp_path / "c.npz", c)
    assert_same_tensor(st.load(tmp_path / "c.npz", mmap_mode="r"), c)


def test_save_is_deterministic(tmp_path, rng):
    t, _ = make_tensor(rng, "csr")
    st.save(tmp_path / "a.npz", t)
    st.save(tmp_path / "b.npz", t)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def test_numpy_reads_the_format(tmp_path, rng):
    t, _ = make_tensor(rng, "bsr", np.int32, batch=(2,))
    st.save(tmp_path / "t.npz", t)
    with np.load(tmp_path / "t.npz") as f:
        assert sorted(f.files) == ["compressed_indices", "metadata.json", "plain_indices", "values"]
        np.testing.assert_array_equal(f["values"], t.values())
        assert json.loads(f["metadata.json"])["blocksize"] == [2, 3]


def test_save_argument_errors(tmp_path):
    with pytest.raises(TypeError, match="sparse tensor or a NumPy array"):
        st.save(tmp_path / "x.npz", [1, 2])
    with pytest.raises(TypeError, match="uint16"):
        st.save(tmp_path / "x.npz", np.zeros(2, np.uint16))
    with pytest.raises(TypeError, match="object"):
        st.save(tmp_path / "x.npz", np.array([None]))
    with pytest.raises(ValueError, match="mmap_mode"):
        st.load(tmp_path / "x.npz", mmap_mode="w+")
    assert os.listdir(tmp_path) == []


# -- hostile and broken files --------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    """A batched csr tensor of shape (2, 3, 4) saved to t.npz."""
    t = st.sparse_csr_tensor(np.array([[0, 1, 2, 3], [0, 2, 2, 3]]), np.array([[3, 0, 1], [0, 3, 2]]),
                             np.arange(1.0, 7.0).reshape(2, 3), size=(2, 3, 4))
    path = tmp_path / "t.npz"
    st.save(path, t)
    return path, t


@pytest.mark.parametrize("mmap_mode", [None, "r"])
@pytest.mark.parametrize("compress", [False, True])
def test_truncated_files_raise_value_error(tmp_path, rng, compress, mmap_mode):
    t, _ = make_tensor(rng, "bsr", np.int32, np.float64, batch=(2,), dense=(2,))
    st.save(tmp_path / "t.npz", t, compress=compress)
    data = (tmp_path / "t.npz").read_bytes()
    for cut in sorted({0, 1, 10, 30, 100, len(data) // 3, len(data) // 2, len(data) - 22, len(data) - 1}):
        bad = tmp_path / "cut.npz"
        bad.write_bytes(data[:cut])
        with pytest.raises(ValueError, match="cut.npz"):
            st.load(bad, mmap_mode=mmap_mode)


def test_truncated_member_behind_intact_directory(tmp_path, saved):
    """A member cut short while the central directory still describes it (a zip with its tail re-appended)."""
    path, _ = saved
    data = path.read_bytes()
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("values.npy")
    # drop the last 8 bytes of values.npy's data and shift the directory: offsets now lie
    end = info.header_offset + 30 + len(info.filename) + len(info.extra) + 20 + info.compress_size
    bad = tmp_path / "bad.npz"
    bad.write_bytes(data[:end - 8] + data[end:])
    for mode in (None, "r"):
        with pytest.raises(ValueError, match="bad.npz"):
            st.load(bad, mmap_mode=mode)


def test_corrupted_data_fails_the_crc(tmp_path, saved):
    path, t = saved
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("values.npy")
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + 20 + 200] ^= 0xFF
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad.npz.*CRC"):
        st.load(bad)


def test_not_a_zip_and_missing_file(tmp_path):
    (tmp_path / "x.npz").write_bytes(b"not a zip file at all")
    with pytest.raises(ValueError, match="x.npz.*not a .npz"):
        st.load(tmp_path / "x.npz")
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.npz"):
        st.load(tmp_path / "empty.npz")
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        st.load(tmp_path / "nope.npz")


def test_plain_npz_is_not_a_tensor(tmp_path):
    np.savez(tmp_path / "p.npz", a=np.arange(3))
    with pytest.raises(ValueError, match=r"p.npz: neither a sparsetensor file.*a.npy"):
        st.load(tmp_path / "p.npz")


@pytest.mark.parametrize("drop", ["values", "plain_indices", "compressed_indices"])
def test_missing_member(tmp_path, saved, drop):
    path, _ = saved
    rewrite(path, tmp_path / "bad.npz", drop=[drop])
    with pytest.raises(ValueError, match=f"bad.npz: missing member.*{drop}.npy"):
        st.load(tmp_path / "bad.npz")


def test_unexpected_member(tmp_path, saved):
    path, _ = saved
    rewrite(path, tmp_path / "bad.npz", arrays={"indices": np.zeros((2, 0), np.int64)})
    with pytest.raises(ValueError, match="bad.npz: unexpected member.*indices.npy"):
        st.load(tmp_path / "bad.npz")


def test_missing_metadata_member_in_a_sparsetensor_like_file(tmp_path, saved):
    path, _ = saved
    write_zip(tmp_path / "bad.npz", None, arrays_of(path))
    with pytest.raises(ValueError, match="bad.npz: neither"):
        st.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_object_arrays_are_refused(tmp_path, saved, mmap_mode):
    path, _ = saved
    marker = tmp_path / "pwned"
    # an object array whose unpickling would create a file: it must never be unpickled
    evil = np.empty(1, dtype=object)
    evil[0] = _Evil(str(marker))
    rewrite(path, tmp_path / "bad.npz", arrays={"values": evil})
    with pytest.raises(ValueError, match="bad.npz: member values.npy: holds Python objects"):
        st.load(tmp_path / "bad.npz", mmap_mode=mmap_mode)
    assert not marker.exists()


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("change, match", [
    ({"format": "other"}, "format must be"),
    ({"version": 2}, "version 2; this version of sparsetensor reads versions up to 1"),
    ({"version": "1"}, "version must be"),
    ({"layout": "dia"}, "layout must be"),
    ({"shape": [2, -3, 4]}, "shape must be"),
    ({"shape": [2, True, 4]}, "shape must be"),
    ({"shape": "2x3x4"}, "shape must be"),
    ({"value_dtype": "object"}, "value_dtype must be"),
    ({"value_dtype": "float32"}, "member values.npy has dtype float64, the metadata says float32"),
    ({"index_dtype": "int16"}, "index_dtype must be"),
    ({"index_dtype": "int32"}, "has dtype int64, the metadata says int32"),
    ({"coalesced": "yes"}, "coalesced must be"),
    ({"nnz": 1000}, "metadata says nnz=1000"),
    ({"blocksize": [2, 2]}, "metadata says blocksize"),
    ({"dense_dim": -1}, "dense_dim must be"),
])
def test_bad_metadata(tmp_path, saved, change, match):
    path, _ = saved
    rewrite(path, tmp_path / "bad.npz", meta=change)
    with pytest.raises(ValueError, match="bad.npz: .*" + match):
        st.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("meta", [b"{not json", b"\xff\xfe", b"[1, 2]", json.dumps({"x": 1}).encode(),
                                  b" " * (1 << 17)])
def test_unreadable_metadata(tmp_path, saved, meta):
    path, _ = saved
    write_zip(tmp_path / "bad.npz", meta, arrays_of(path))
    with pytest.raises(ValueError, match="bad.npz: bad metadata"):
        st.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("shape, invariant", [([2, 5, 4], "3.8"), ([2, 3, 2], "5.5"), ([3, 4], "3.1"),
                                              ([2, 3, 4, 1], "3.1")])
def test_wrong_shape_in_metadata_breaks_an_invariant(tmp_path, saved, shape, invariant):
    path, t = saved
    assert t.shape == (2, 3, 4)
    rewrite(path, tmp_path / "bad.npz", meta={"shape": shape})
    with pytest.raises(st.InvariantError, match="bad.npz") as e:
        st.load(tmp_path / "bad.npz")
    assert e.value.invariant == invariant and e.value.layout == "csr"


@pytest.mark.parametrize("mmap_mode", [None, "r"])
@pytest.mark.parametrize("layout, member, invariant", [
    ("csr", "plain_indices", "5.5"), ("csc", "plain_indices", "5.5"), ("bsr", "plain_indices", "5.5"),
    ("bsc", "compressed_indices", "5.3"), ("coo", "indices", "C5")])
def test_out_of_range_indices(tmp_path, rng, layout, member, invariant, mmap_mode):
    t, _ = make_tensor(rng, layout, np.int32, np.float64, batch=(2,), nnz=4)
    st.save(tmp_path / "t.npz", t)
    a = arrays_of(tmp_path / "t.npz")[member].copy()
    if member == "compressed_indices":
        a[..., 1] = 1000
    else:
        a.flat[-1] = 10**6
    rewrite(tmp_path / "t.npz", tmp_path / "bad.npz", arrays={member: a})
    with pytest.raises(st.InvariantError, match="bad.npz") as e:
        st.load(tmp_path / "bad.npz", mmap_mode=mmap_mode)
    assert e.value.invariant == invariant


def test_negative_coo_index_and_false_coalesced_flag(tmp_path, rng):
    t, _ = make_tensor(rng, "coo", np.int64, np.float32, nnz=4)
    st.save(tmp_path / "t.npz", t)
    idx = arrays_of(tmp_path / "t.npz")["indices"]
    rewrite(tmp_path / "t.npz", tmp_path / "neg.npz", arrays={"indices": np.where(idx == idx.max(), -1, idx)})
    with pytest.raises(st.InvariantError) as e:
        st.load(tmp_path / "neg.npz")
    assert e.value.invariant == "C4"
    rewrite(tmp_path / "t.npz", tmp_path / "rev.npz", arrays={"indices": np.ascontiguousarray(idx[:, ::-1])})
    with pytest.raises(st.InvariantError) as e:
        st.load(tmp_path / "rev.npz")  # the file says coalesced: the order is checked
    assert e.value.invariant == "C6"


@pytest.mark.parametrize("member", ["values", "plain_indices"])
def test_member_of_wrong_shape(tmp_path, saved, member):
    path, _ = saved
    a = arrays_of(path)[member]
    rewrite(path, tmp_path / "bad.npz", arrays={member: a[..., :-1]})
    with pytest.raises(st.InvariantError, match="bad.npz"):
        st.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_npy_header_that_lies_about_its_size(tmp_path, saved, mmap_mode):
    path, _ = saved
    a = arrays_of(path)
    vals = a.pop("values")
    header = {"descr": "<f8", "fortran_order": False, "shape": (2, 10**12)}
    buf = __import__("io").BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    write_zip(tmp_path / "bad.npz", meta_of(path), a, raw={"values.npy": buf.getvalue() + vals.tobytes()})
    with pytest.raises(ValueError, match="bad.npz: member values.npy: its header declares shape"):
        st.load(tmp_path / "bad.npz", mmap_mode=mmap_mode)


def test_non_npy_member(tmp_path, saved):
    path, _ = saved
    a = arrays_of(path)
    a.pop("values")
    write_zip(tmp_path / "bad.npz", meta_of(path), a, raw={"values.npy": b"hello"})
    with pytest.raises(ValueError, match="bad.npz: member values.npy: not a valid .npy"):
        st.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_foreign_byte_order_and_fortran_members_load(tmp_path, saved, mmap_mode):
    path, t = saved
    a = arrays_of(path)
    a["values"] = a["values"].astype(">f8")
    a["plain_indices"] = np.asfortranarray(a["plain_indices"])
    write_zip(tmp_path / "be.npz", meta_of(path), a)
    u = st.load(tmp_path / "be.npz", mmap_mode=mmap_mode)
    assert_same_tensor(u, t)
    assert u.values().dtype.isnative and u.plain_indices().flags.c_contiguous


# -- SciPy files --------------------------------------------------------------------------------
@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("kind", ["array", "matrix"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr", "coo", "dia"])
def test_scipy_save_npz_files_load(tmp_path, rng, fmt, kind, compressed):
    a = random_dense(rng, blocks=(4, 3), blocksize=(2, 2), dtype=np.float32, nnz=5)
    m = getattr(sp, f"{fmt}_{kind}")(a)
    sp.save_npz(tmp_path / "m.npz", m, compressed=compressed)
    t = st.load(tmp_path / "m.npz")
    assert t.layout.name == ("csr" if fmt == "dia" else fmt) and t.shape == a.shape and t.dtype == np.float32
    np.testing.assert_array_equal(st.to_scipy(t).toarray(), a)
    if fmt in ("csr", "csc", "bsr"):
        assert t.is_coalesced()


def test_scipy_3d_coo_file(tmp_path, rng):
    a = random_dense(rng, batch=(2,), blocks=(3, 4), nnz=4)
    m = sp.coo_array(a)
    sp.save_npz(tmp_path / "m.npz", m)
    t = st.load(tmp_path / "m.npz")
    assert t.layout == st.sparse_coo and t.shape == a.shape
    np.testing.assert_array_equal(st.to_scipy(t).toarray(), a)


def test_non_canonical_scipy_file_is_repaired(tmp_path):
    m = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 2]), np.array([0, 3, 3])), shape=(2, 3))
    sp.save_npz(tmp_path / "m.npz", m)
    t = st.load(tmp_path / "m.npz")  # from_scipy sorts and sums duplicates (a copy)
    assert t.is_coalesced()
    np.testing.assert_array_equal(t.col_indices(), [0, 2])
    np.testing.assert_array_equal(t.to_dense(), [[2.0, 0, 4.0], [0, 0, 0]])


def test_scipy_file_with_rows_longer_than_the_columns(tmp_path):
    m = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([0, 0, 0]), np.array([0, 3])), shape=(1, 2))
    sp.save_npz(tmp_path / "m.npz", m)
    t = st.load(tmp_path / "m.npz")
    assert t.is_coalesced()
    np.testing.assert_array_equal(t.to_dense(), [[6.0, 0.0]])


def test_non_canonical_rows_longer_than_the_plain_size_round_trip(tmp_path):
    t = st.sparse_csr_tensor([0, 3, 4], [0, 0, 1, 1], [1.0, 2.0, 3.0, 4.0], size=(2, 2), check_invariants=False)
    st.save(tmp_path / "t.npz", t)
    u = st.load(tmp_path / "t.npz")
    np.testing.assert_array_equal(u.plain_indices(), [0, 0, 1, 1])
    np.testing.assert_array_equal(u.to_dense(), [[3.0, 3.0], [0.0, 4.0]])
    # a long row before a falling one (5.3's lower bound): still refused
    rewrite(tmp_path / "t.npz", tmp_path / "bad.npz", arrays={"compressed_indices": np.array([0, 5, 4])})
    with pytest.raises(st.InvariantError) as e:
        st.load(tmp_path / "bad.npz")
    assert e.value.invariant == "5.3"


def test_hostile_scipy_file(tmp_path):
    m = sp.csr_array(np.eye(3))
    sp.save_npz(tmp_path / "m.npz", m)
    with np.load(tmp_path / "m.npz") as f:
        arrays = {k: f[k] for k in f.files}
    arrays["indices"] = np.array([0, 1, 9], arrays["indices"].dtype)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(st.InvariantError, match="bad.npz") as e:
        st.load(tmp_path / "bad.npz")
    assert e.value.invariant == "5.5"
    arrays["data"] = np.array([None, None, None], dtype=object)
    np.savez(tmp_path / "obj.npz", **arrays)
    with pytest.raises(ValueError, match="obj.npz.*Python objects"):
        st.load(tmp_path / "obj.npz")


# -- atomic writes --------------------------------------------------------------------------------
def _failing_replace(*args, **kwargs):
    raise OSError("simulated failure in os.replace")


@pytest.mark.parametrize("name", ["t.npz", "t.mtx", "t.mtx.gz"])
def test_failed_replace_leaves_target_and_no_temp_file(tmp_path, rng, monkeypatch, name):
    t, _ = make_tensor(rng, "csr")
    path = tmp_path / name
    path.write_bytes(b"old contents")
    monkeypatch.setattr(os, "replace", _failing_replace)
    with pytest.raises(OSError, match="simulated"):
        st.save(path, t)
    assert path.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == [name]


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_failure_while_writing_leaves_target_and_no_temp_file(tmp_path, rng, monkeypatch, exc):
    t, _ = make_tensor(rng, "bsr", batch=(2,))
    path = tmp_path / "t.npz"
    st.save(path, t)
    before = path.read_bytes()
    real = np.lib.format.write_array
    calls = []

    def write_then_fail(fp, array, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # after a member and a half
            fp.write(b"x" * 100)
            raise exc("simulated failure while writing")
        return real(fp, array, *args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", write_then_fail)
    with pytest.raises(exc, match="simulated"):
        st.save(path, make_tensor(np.random.default_rng(1), "bsr", batch=(3,))[0])
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["t.npz"]


def test_new_files_get_the_umask_mode(tmp_path, rng):
    old = os.umask(0o027)
    try:
        t, _ = make_tensor(rng, "coo")
        st.save(tmp_path / "t.npz", t)
        st.save(tmp_path / "t.mtx", t)
    finally:
        os.umask(old)
    assert (tmp_path / "t.npz").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "t.mtx").stat().st_mode & 0o777 == 0o640


def test_save_replaces_an_existing_file(tmp_path, rng):
    a, _ = make_tensor(rng, "csr")
    b, _ = make_tensor(rng, "coo")
    st.save(tmp_path / "t.npz", a)
    st.save(tmp_path / "t.npz", b)
    assert_same_tensor(st.load(tmp_path / "t.npz"), b)


# -- docs ------------------------------------------------------------------------------------------
def test_doctests():
    for module in (stio, stmtx):  # read_mtx/write_mtx live in sparsetensor.io._mtx, re-exported by io
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0 and result.attempted > 0, module.__name__
    for name in ("save", "load", "read_mtx", "write_mtx"):
        doc = getattr(stio, name).__doc__
        assert "Examples" in doc and ">>>" in doc, name
