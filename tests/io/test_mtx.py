"""Matrix Market files: round trips of every layout and dtype, symmetry expansion, pattern, integer
and array files, the writer's symmetry checks, parse errors and the format's rules (file and line
named)."""

from __future__ import annotations

import gzip
import os
import re

import numpy as np
import pytest

import sparsetensor as st
from conftest import VALUE_DTYPES
from io_support import make_tensor

pytest.importorskip("scipy.sparse")


# -- Matrix Market --------------------------------------------------------------------------------
MM_LAYOUTS = ["coo", "csr", "csc", "bsr", "bsc"]


def dense_of_2d(t):
    return st.to_scipy(t.mT).toarray().T if t.layout == st.sparse_bsc else st.to_scipy(t).toarray()


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("layout", MM_LAYOUTS)
def test_mtx_round_trip(tmp_path, rng, layout, dtype, suffix):
    t, a = make_tensor(rng, layout, np.int32, dtype, nnz=4)
    path = tmp_path / ("m" + suffix)
    st.write_mtx(path, t)
    u = st.read_mtx(path)
    assert u.layout == st.sparse_coo and u.shape == a.shape
    field = {"b": "integer", "i": "integer", "u": "integer", "f": "real", "c": "complex"}[np.dtype(dtype).kind]
    assert u.dtype == {"integer": np.int64, "real": np.float64, "complex": np.complex128}[field]
    np.testing.assert_array_equal(dense_of_2d(u).astype(dtype), a)
    with (gzip.open if suffix.endswith(".gz") else open)(path, "rt") as f:
        assert f.readline() == f"%%MatrixMarket matrix coordinate {field} general\n"
    # entries are written in the layout's order; the flag says whether that is row-major and distinct
    keys = u.indices()[0].astype(np.int64) * a.shape[1] + u.indices()[1]
    assert u.is_coalesced() == bool(np.all(np.diff(keys) > 0))
    if layout in ("coo", "csr"):
        assert u.is_coalesced()
        np.testing.assert_array_equal(u.indices(), np.array(np.nonzero(a)))
    assert os.listdir(tmp_path) == [path.name]


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz", ".MTX"])
def test_save_and_load_dispatch_on_suffix(tmp_path, rng, suffix):
    t, a = make_tensor(rng, "csr", nnz=5)
    path = tmp_path / ("m" + suffix)
    st.save(path, t)
    head = path.read_bytes()[:2]
    assert (head == b"\x1f\x8b") == suffix.endswith(".gz")
    u = st.load(path)
    assert u.layout == st.sparse_coo
    np.testing.assert_array_equal(dense_of_2d(u), a)
    with pytest.raises(ValueError, match="mmap_mode"):
        st.load(path, mmap_mode="r")
    with pytest.raises(ValueError, match="compress"):
        st.save(path, t, compress=True)


def test_mtx_pattern(tmp_path):
    t = st.sparse_coo_tensor([[0, 1, 2], [1, 2, 0]], np.array([5, 6, 7], np.int16), size=(3, 4))
    st.write_mtx(tmp_path / "p.mtx", t, field="pattern")
    lines = (tmp_path / "p.mtx").read_text().splitlines()
    assert lines[0] == "%%MatrixMarket matrix coordinate pattern general" and lines[-1] == "3 1"
    u = st.read_mtx(tmp_path / "p.mtx")
    np.testing.assert_array_equal(u.indices(), t.indices())
    np.testing.assert_array_equal(u.values(), [1.0, 1.0, 1.0])


def write_text(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("symmetry, entries, expected", [
    ("symmetric", "1 1 4.0\n3 1 -1.5\n3 2 2.0\n",
     [[4.0, 0, -1.5], [0, 0, 2.0], [-1.5, 2.0, 0]]),
    ("skew-symmetric", "2 1 3.0\n3 2 -1.0\n",
     [[0, -3.0, 0], [3.0, 0, 1.0], [0, -1.0, 0]]),
])
def test_mtx_symmetric_and_skew_expansion(tmp_path, symmetry, entries, expected):
    n = entries.count("\n")
    path = write_text(tmp_path / "s.mtx", f"%%MatrixMarket matrix coordinate real {symmetry}\n% a comment\n"
                                          f"3 3 {n}\n{entries}")
    t = st.read_mtx(path)
    assert t.nnz == sum(1 if line.split()[0] == line.split()[1] else 2 for line in entries.splitlines())
    assert not t.is_coalesced()  # mirrored entries are appended after the file's
    np.testing.assert_array_equal(st.to_scipy(t).toarray(), expected)
    np.testing.assert_array_equal(t.to_dense(), expected)
    csr = t.to_sparse_csr()  # what the read_mtx docstring advises
    assert csr.is_coalesced()
    np.testing.assert_array_equal(csr.to_dense(), expected)


def test_mtx_hermitian_expansion(tmp_path):
    path = write_text(tmp_path / "h.mtx", "%%MatrixMarket matrix coordinate complex hermitian\n2 2 3\n"
                                          "1 1 2.0 0.0\n2 1 1.0 -3.5\n2 2 -1.0 0.0\n")
    t = st.read_mtx(path)
    np.testing.assert_array_equal(st.to_scipy(t).toarray(), [[2, 1 + 3.5j], [1 - 3.5j, -1]])


def test_mtx_integer_and_array_files(tmp_path):
    t = st.read_mtx(write_text(tmp_path / "i.mtx", "%%MatrixMarket matrix coordinate integer general\n"
                                                   "2 3 2\n1 2 7\n2 3 -9\n"))
    assert t.dtype == np.int64 and t.is_coalesced()
    np.testing.assert_array_equal(t.values(), [7, -9])
    a = st.read_mtx(write_text(tmp_path / "a.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n"))
    assert isinstance(a, np.ndarray)
    np.testing.assert_array_equal(a, [[1, 3], [2, 4]])


def test_mtx_duplicates_are_not_coalesced(tmp_path):
    t = st.read_mtx(write_text(tmp_path / "d.mtx", "%%MatrixMarket matrix coordinate real general\n"
                                                   "2 2 3\n1 1 1.0\n1 1 2.0\n2 2 3.0\n"))
    assert not t.is_coalesced() and t.nnz == 3
    np.testing.assert_array_equal(st.to_scipy(t).toarray(), [[3, 0], [0, 3]])


@pytest.mark.parametrize("symmetry", ["symmetric", "skew-symmetric", "hermitian"])
@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_write_mtx_with_symmetry(tmp_path, rng, symmetry, suffix):
    b = rng.integers(-3, 4, (5, 5)) * (rng.random((5, 5)) < 0.5)
    a = {"symmetric": b + b.T, "skew-symmetric": b - b.T, "hermitian": b + b.T + 1j * (b - b.T)}[symmetry]
    t = st.sparse_coo_tensor(np.array(np.nonzero(a)), a[np.nonzero(a)], a.shape)
    path = tmp_path / ("s" + suffix)
    st.write_mtx(path, t, symmetry=symmetry)
    with (gzip.open if suffix.endswith(".gz") else open)(path, "rt") as f:
        lines = f.read().splitlines()
    assert lines[0].endswith(" " + symmetry)
    strict = symmetry == "skew-symmetric"
    assert int(lines[2].split()[2]) == np.count_nonzero(np.tril(a, -1 if strict else 0))
    np.testing.assert_array_equal(st.to_scipy(st.read_mtx(path)).toarray(), a)


def test_write_mtx_refuses_wrong_symmetry_and_shapes(tmp_path, rng):
    t = st.sparse_coo_tensor([[0], [1]], [1.0], size=(2, 2))
    for sym in ("symmetric", "skew-symmetric"):
        with pytest.raises(ValueError, match=f"not {sym}"):
            st.write_mtx(tmp_path / "x.mtx", t, symmetry=sym)
    with pytest.raises(ValueError, match="hermitian.*needs complex"):
        st.write_mtx(tmp_path / "x.mtx", t, symmetry="hermitian")
    with pytest.raises(ValueError, match="square"):
        st.write_mtx(tmp_path / "x.mtx", st.sparse_coo_tensor([[0], [1]], [1.0], size=(2, 3)), symmetry="symmetric")
    with pytest.raises(ValueError, match="symmetry must be"):
        st.write_mtx(tmp_path / "x.mtx", t, symmetry="diagonal")
    for layout, batch, dense in [("csr", (2,), ()), ("bsr", (), (2,)), ("coo", (2,), ())]:
        bad, _ = make_tensor(rng, layout, batch=batch, dense=dense)
        with pytest.raises(ValueError, match="Matrix Market holds 2-d matrices"):
            st.write_mtx(tmp_path / "x.mtx", bad)
    assert os.listdir(tmp_path) == []


def test_write_mtx_dense_array(tmp_path):
    a = np.arange(6, dtype=np.float16).reshape(2, 3)
    st.write_mtx(tmp_path / "a.mtx", a)
    assert (tmp_path / "a.mtx").read_text().startswith("%%MatrixMarket matrix array real general")
    np.testing.assert_array_equal(st.read_mtx(tmp_path / "a.mtx"), a)


@pytest.mark.parametrize("text, line, what", [
    ("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 abc\n3 3 2.0\n", 4, "character 'b'"),
    ("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 -\n3 3 2.0\n", 4, "floating"),
    ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n4 1 2.0\n", 4, "out of bounds"),
    ("garbage\n", 1, "banner"),
])
@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_mtx_parse_errors_name_file_and_line(tmp_path, text, line, what, suffix):
    path = tmp_path / ("bad" + suffix)
    path.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    with pytest.raises(ValueError, match=f"bad{suffix.replace('.', '[.]')}: line {line}: .*{what}"):
        st.read_mtx(path)


def test_mtx_truncated_and_missing(tmp_path):
    path = write_text(tmp_path / "t.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n")
    with pytest.raises(ValueError, match="t.mtx: .*[Tt]runcated"):
        st.read_mtx(path)
    (tmp_path / "t.mtx.gz").write_bytes(gzip.compress(path.read_bytes())[:-10])
    with pytest.raises(ValueError, match="t.mtx.gz"):
        st.read_mtx(tmp_path / "t.mtx.gz")
    for name in ("nope.mtx", "nope.mtx.gz"):
        with pytest.raises(FileNotFoundError, match=name):
            st.read_mtx(tmp_path / name)
        with pytest.raises(FileNotFoundError, match=name):
            st.load(tmp_path / name)




def test_mtx_skew_symmetric_explicit_zero_diagonal_as_scipy_writes_it(tmp_path):
    import scipy.io as sio
    import scipy.sparse as sp

    k = sp.coo_array((np.array([0.0, 1.0, -1.0]), (np.array([0, 1, 0]), np.array([0, 0, 1]))), shape=(2, 2))
    sio.mmwrite(tmp_path / "k.mtx", k, symmetry="skew-symmetric")  # writes "1 1 0"
    t = st.read_mtx(tmp_path / "k.mtx")
    np.testing.assert_array_equal(t.to_dense(), sio.mmread(tmp_path / "k.mtx").toarray())
    np.testing.assert_array_equal(t.to_dense(), [[0.0, -1.0], [1.0, 0.0]])


# -- Matrix Market rules SciPy's reader does not enforce ----------------------------------------------
@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("text, line, rule", [
    ("%%MatrixMarket matrix coordinate real symmetric\n% a comment\n3 4 2\n1 1 4.0\n3 1 -1.5\n", 3, "must be square"),
    ("%%MatrixMarket matrix coordinate integer hermitian\n2 3 1\n1 1 4\n", 2, "must be square"),
    ("%%MatrixMarket matrix array real symmetric\n2 3\n1\n2\n3\n4\n5\n6\n", 2, "must be square"),
    ("%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 3\n2 1 4.0\n\n3 2 1.0\n3 3 -1.5\n", 6,
     "zero diagonal"),
    ("%%MatrixMarket matrix coordinate complex hermitian\n3 3 3\n2 1 4.0 1.0\n2 2 3.0 0.0\n3 3 -1.5 2.0\n", 5,
     "real diagonal"),
    ("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n2 1 4.0\n3 3 -1.5\n", 3, "no value column"),
])
def test_mtx_rules(tmp_path, suffix, text, line, rule):
    path = tmp_path / ("bad" + suffix)
    if suffix.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    with pytest.raises(ValueError, match=rf"bad{re.escape(suffix)}: line {line}: .*{rule}.*Matrix Market rule"):
        st.read_mtx(path)


def test_mtx_rules_accept_valid_files(tmp_path):
    ok = {"skew.mtx": "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 1\n2 1 4.0\n",
          "herm.mtx": "%%MatrixMarket matrix coordinate complex hermitian\n2 2 2\n1 1 3.0 0.0\n2 1 1.0 2.0\n",
          "pat.mtx": "%%MatrixMarket matrix coordinate pattern symmetric\n2 2 1\n2 1\n"}
    dense = {"skew.mtx": [[0, -4, 0], [4, 0, 0], [0, 0, 0]], "herm.mtx": [[3, 1 - 2j], [1 + 2j, 0]],
             "pat.mtx": [[0, 1], [1, 0]]}
    for name, text in ok.items():
        (tmp_path / name).write_text(text)
        np.testing.assert_array_equal(st.read_mtx(tmp_path / name).to_dense(), dense[name])
