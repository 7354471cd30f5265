"""Hostile numbers and sizes in files: every overflow and every size a file cannot hold is a ValueError
naming the file and the line (.mtx) or the member (.npz), raised before anything is allocated for it;
the command line reports them without a traceback, exit status 2 (1 is kept for a broken invariant)."""

from __future__ import annotations

import bz2
import gzip
import json
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor._cli import _commands as cli

pytest.importorskip("scipy.io")

COORD = "%%MatrixMarket matrix coordinate {field} {symmetry}\n"
REAL = COORD.format(field="real", symmetry="general")
INTEGER = COORD.format(field="integer", symmetry="general")
ARRAY = "%%MatrixMarket matrix array real {symmetry}\n"
BIG = "99999999999999999999999"  # does not fit 64 bits
INT64_MAX = 2**63 - 1


def write(path, data):
    """Write text (latin-1, so that any byte can be written) or bytes, compressed by the suffix."""
    data = data.encode("latin-1") if isinstance(data, str) else data
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".bz2"):
        data = bz2.compress(data)
    path.write_bytes(data)
    return path


def raises_at(path, line, what):
    """pytest.raises for a ValueError naming ``path``'s file name, ``line`` (None: no line) and ``what``."""
    where = re.escape(path.name) + (f": line {line}: " if line is not None else ": ")
    return pytest.raises(ValueError, match=where + ".*" + what)


# -- Matrix Market: the cases, each the file's text, the line named and the message ------------------------
HOSTILE_MTX = {
    # numbers that do not fit 64 bits
    "integer-value-overflow": (INTEGER + f"2 2 1\n1 1 {BIG}\n", 3, "does not fit 64 bits"),
    "row-index-overflow": (REAL + f"2 2 1\n{BIG} 1 1.0\n", 3, "does not fit 64 bits"),
    "col-index-int64-plus-one": (REAL + "2 2 1\n1 9223372036854775808 1.0\n", 3, "does not fit 64 bits"),
    "real-value-overflow": (REAL + "2 2 1\n1 1 1e999\n", 3, "1e999 overflows float64"),
    "complex-part-overflow": (COORD.format(field="complex", symmetry="general") + "2 2 1\n1 1 1.0 -2e400\n", 3,
                              "-2e400 overflows float64"),
    "nnz-overflow": (REAL + f"2 2 {BIG}\n1 1 1.0\n", 2, f"nnz {BIG} does not fit int64"),
    "rows-overflow": (REAL + f"{BIG} 2 1\n1 1 1.0\n", 2, "rows .* does not fit int64"),
    "cols-int64-plus-one": (REAL + "2 9223372036854775808 1\n1 1 1.0\n", 2, "cols .* does not fit int64"),
    "array-rows-overflow": (ARRAY.format(symmetry="general") + f"1 {BIG}\n1\n", 2, "cols .* does not fit int64"),
    "size-of-5000-digits": (REAL + "2 2 " + "9" * 5000 + "\n1 1 1.0\n", 2, r"nnz 9{20}\.\.\.\(5000 digits\)"),
    # sizes the file cannot hold: refused before SciPy's reader allocates them
    "nnz-1e11": (REAL + "2 2 100000000000\n1 1 1.0\n", 2, "declares 100000000000 entries .* need at least "
                                                          "599999999999 bytes"),
    "nnz-1e11-symmetric": (COORD.format(field="real", symmetry="symmetric") + "10 10 100000000000\n1 1 1.0\n", 2,
                           "declares 100000000000 entries"),
    "nnz-int64-max-pattern": (COORD.format(field="pattern", symmetry="general") + f"2 2 {INT64_MAX}\n1 1\n", 2,
                              f"declares {INT64_MAX} entries"),
    "array-1e10-values": (ARRAY.format(symmetry="general") + "100000 100000\n1\n", 2,
                          "declares 10000000000 entries"),
    "array-numel-overflows-int64": (ARRAY.format(symmetry="general") + f"{INT64_MAX} {INT64_MAX}\n1\n", 2,
                                    "declares 85070591730234615847396907784232501249 entries"),
    "array-symmetric-lower-triangle": (ARRAY.format(symmetry="symmetric") + "100000 100000\n1\n", 2,
                                       "declares 5000050000 entries"),
    "nnz-one-too-many": (REAL + "3 3 3\n1 1 1.00000000\n2 2 2.00000000\n", None, "truncated: .* declares 3 "
                                                                                  "entries, the file holds 2"),
    "array-pattern-1e10": ("%%MatrixMarket matrix array pattern general\n100000 100000\n", 1,
                           "an array matrix cannot be pattern"),
    # weird sizes
    "negative-nnz": (REAL + "2 2 -1\n", 2, "nnz must be a non-negative integer, got '-1' .negative"),
    "negative-rows": (REAL + "-2 2 1\n1 1 1.0\n", 2, "rows must be a non-negative integer, got '-2'"),
    "float-nnz": (REAL + "2 2 1.5\n1 1 1.0\n", 2, "nnz must be a non-negative integer, got '1.5'"),
    "hex-rows": (REAL + "0x2 2 1\n1 1 1.0\n", 2, "rows must be a non-negative integer, got '0x2'"),
    "plus-sign-rows": (REAL + "+2 2 1\n1 1 1.0\n", 2, "rows must be a non-negative integer, got '[+]2'"),
    "four-size-integers": (REAL + "2 2 1 5\n1 1 1.0\n", 2, "holds 3 integers .rows cols nnz., got '2 2 1 5'"),
    "array-size-with-nnz": (ARRAY.format(symmetry="general") + "2 2 4\n1\n2\n3\n4\n", 2, "holds 2 integers"),
    # entries SciPy's reader reads wrongly (it stops at the end of a number and ignores the rest)
    "integer-field-float-value": (INTEGER + "2 2 1\n1 1 1.5\n", 3, "character '.' in the entry '1 1 1.5'"),
    "integer-field-exponent": (INTEGER + "2 2 1\n1 1 1e5\n", 3, "character 'e'"),
    "fortran-exponent": (REAL + "2 2 1\n1 1 1.0D+05\n", 3, "character 'D'"),
    "decimal-comma": (REAL + "2 2 1\n1 1 1,5\n", 3, "character ','"),
    "hex-value": (REAL + "2 2 1\n1 1 0x10\n", 3, "character 'x'"),
    "extra-number": (REAL + "2 2 1\n1 1 1.0 5\n", 3, r"expected 3 numbers per line \(row col value"),
    "missing-value": (REAL + "2 2 2\n1 1\n2 2 2.0\n", 3, "expected 3 numbers per line"),
    "two-entries-on-a-line": (REAL + "2 2 2\n1 1 1.0 2 2 2.0\n", 3, "expected 3 numbers per line.*got 6"),
    "two-values-on-an-array-line": (ARRAY.format(symmetry="general") + "2 1\n1 2\n", 3,
                                    "expected 1 numbers per line .value"),
    "extra-entry": (REAL + "2 2 1\n1 1 1.0\n2 2 2.0\n", 4, "more entries than the 1"),
    "comment-among-entries": (REAL + "2 2 2\n1 1 1.0\n% note\n2 2 2.0\n", 4, "a comment among the entries"),
    "form-feed": (REAL + "2 2 1\n1 1 1.0\f\n", 3, "byte 0x0c"),
    # NaN or a float where an index belongs
    "nan-row-index": (REAL + "2 2 1\nnan 1 1.0\n", 3, "Invalid integer value"),
    "float-row-index": (REAL + "2 2 1\n1.5 1 1.0\n", 3, "Invalid integer value"),
    "zero-index": (REAL + "2 2 1\n0 1 1.0\n", 3, "out of bounds"),
    # not UTF-8 (nor ASCII) where the reader decodes text
    "latin-1-banner": ("%%MatrixMarket matrix coordinate real g\xe9n\xe9ral\n2 2 1\n1 1 1.0\n", 1,
                       "the banner is not ASCII text .byte 0xe9 at column 40"),
    "latin-1-size-line": (REAL + "2 2 1\xa0\n1 1 1.0\n", 2, "the size line is not ASCII text .byte 0xa0"),
    "latin-1-entry": (REAL + "2 2 1\n1 1 1.\xe9\n", 3, "byte 0xe9 in the entry"),
    # lines no reader should hold in memory
    "banner-of-100-KiB": ("%%MatrixMarket" + " " * 100_000, 1, "longer than 65536 bytes; not a Matrix Market banner"),
    "size-line-of-100-KiB": (REAL + "2" * 100_000, 2, "longer than 65536 bytes; not a Matrix Market size line"),
}


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("case", list(HOSTILE_MTX))
def test_hostile_mtx_raises_value_error_naming_file_and_line(tmp_path, case, suffix):
    text, line, what = HOSTILE_MTX[case]
    path = write(tmp_path / (case + suffix), text)
    for read in (st.read_mtx, st.load):
        with raises_at(path, line, what):
            read(path)


def test_declared_size_is_checked_before_allocating(tmp_path, monkeypatch):
    """SciPy's reader is not called for a size the file cannot hold (it would allocate 373 GiB)."""
    import scipy.io

    def refuse(*args, **kwargs):
        raise AssertionError("SciPy's reader was called")

    monkeypatch.setattr(scipy.io, "mmread", refuse)
    for name in ("huge.mtx", "huge.mtx.gz", "huge.mtx.bz2"):
        path = write(tmp_path / name, REAL + "2 2 100000000000\n1 1 1.0\n")
        with raises_at(path, None, "(declares 100000000000 entries|truncated)"):
            st.read_mtx(path)


def test_gzip_bound_is_deflates_largest_ratio(tmp_path):
    """A .gz file is bounded by 1032 bytes of text per byte of data; a size within that bound is counted."""
    path = write(tmp_path / "m.mtx.gz", REAL + "2 2 100000000\n1 1 1.0\n")
    size = path.stat().st_size
    with raises_at(path, 2, f"{size} bytes of gzip data decompress to at most {1032 * size} bytes"):
        st.read_mtx(path)
    path = write(tmp_path / "n.mtx.gz", REAL + "2 2 1000\n1 1 1.0\n")  # within the bound: the scan counts
    with raises_at(path, None, "truncated: .* declares 1000 entries, the file holds 1 .3 of 3000 numbers"):
        st.read_mtx(path)


def test_bz2_has_no_size_bound_and_is_counted(tmp_path):
    path = write(tmp_path / "m.mtx.bz2", REAL + "2 2 100000000000\n1 1 1.0\n")
    with raises_at(path, None, "truncated: .* declares 100000000000 entries, the file holds 1"):
        st.read_mtx(path)
    path = write(tmp_path / "ok.mtx.bz2", INTEGER + "2 3 2\n1 2 7\n2 3 -9\n")
    np.testing.assert_array_equal(st.read_mtx(path).to_dense(), [[0, 7, 0], [0, 0, -9]])


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz", ".mtx.bz2"])
def test_odd_but_valid_files_still_read(tmp_path, suffix):
    cases = {
        "zero-padded sizes": (REAL + "0002 0002 001\n1 1 1.5\n", [[1.5, 0], [0, 0]]),
        "comments, blank lines, tabs, CRLF": (REAL + "% caf\xe9 (latin-1 in a comment)\n\n%\r\n2\t2\t2\r\n"
                                              "1\t1 -1E+2\r\n\n2 2 5e-2\r\n", [[-100, 0], [0, 0.05]]),
        "inf and nan written as such": (REAL + "2 2 3\n1 1 inf\n1 2 -Infinity\n2 1 NaN\n",
                                        [[np.inf, -np.inf], [np.nan, 0]]),
        "a large float": (REAL + "1 1 1\n1 1 1.7976931348623157e308\n", [[1.7976931348623157e308]]),
        "no newline at the end": (COORD.format(field="pattern", symmetry="general") + "2 2 1\n2 1",
                                  [[0, 0], [1, 0]]),
        "an empty matrix": (REAL + "0 0 0\n", np.zeros((0, 0))),
        "an int64 entry": (INTEGER + f"1 1 1\n1 1 -{INT64_MAX}\n", [[-INT64_MAX]]),
    }
    for name, (text, dense) in cases.items():
        path = write(tmp_path / ("m" + suffix), text)
        np.testing.assert_array_equal(st.read_mtx(path).to_dense(), dense, err_msg=name)


def test_array_files_at_the_bound(tmp_path):
    a = np.arange(1.0, 7.0).reshape(2, 3)
    path = write(tmp_path / "a.mtx", ARRAY.format(symmetry="general") + "2 3\n1\n4\n2\n5\n3\n6")  # 11 bytes
    np.testing.assert_array_equal(st.read_mtx(path), a)
    path = write(tmp_path / "s.mtx", ARRAY.format(symmetry="symmetric") + "2 2\n1\n2\n3\n")
    np.testing.assert_array_equal(st.read_mtx(path), [[1, 2], [2, 3]])
    path = write(tmp_path / "t.mtx", ARRAY.format(symmetry="symmetric") + "3 3\n1\n2\n3\n")  # 6 values needed
    with raises_at(path, 2, "declares 6 entries .* need at least 11 bytes, but the file holds 6 bytes"):
        st.read_mtx(path)


def test_memory_error_names_the_file(tmp_path, monkeypatch):
    """A size the file does hold but the machine cannot: MemoryError, with the file named."""
    import scipy.io

    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 40.0 GiB")

    path = write(tmp_path / "m.mtx", REAL + "2 2 1\n1 1 1.0\n")
    monkeypatch.setattr(scipy.io, "mmread", out_of_memory)
    with pytest.raises(MemoryError, match="m.mtx: not enough memory .*Unable to allocate"):
        st.read_mtx(path)


# -- .npz -----------------------------------------------------------------------------------------------
def saved_npz(tmp_path, **meta_changes):
    t = st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0], size=(2, 2))
    good = tmp_path / "good.npz"
    st.save(good, t)
    with zipfile.ZipFile(good) as zf:
        meta = json.loads(zf.read("metadata.json"))
        members = {n: zf.read(n) for n in zf.namelist() if n != "metadata.json"}
    meta.update(meta_changes)
    return meta, members


def write_npz(path, meta, members, compress=False):
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        zf.writestr("metadata.json", meta if isinstance(meta, (bytes, str)) else json.dumps(meta))
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize("change, what", [
    ({"shape": [10**30, 2]}, r"shape \[10+, 2\] has a dim that does not fit int64"),
    ({"shape": [2**63, 2]}, "does not fit int64"),
    ({"shape": [2, 2] + [1] * 100}, "shape has 102 dims; NumPy arrays have at most 64"),
    ({"shape": [2.0, 2]}, "shape must be a list of non-negative integers"),
    ({"shape": [2, float("nan")]}, "shape must be a list of non-negative integers"),
    ({"shape": [1e400, 2]}, "shape must be a list of non-negative integers"),
    ({"nnz": 10**30}, "nnz must be a non-negative int64"),
    ({"nnz": 2.0}, "nnz must be a non-negative int64"),
    ({"batch_dim": 2**64}, "batch_dim must be a non-negative int64"),
    ({"blocksize": [2**70, 1]}, "blocksize must be null or"),
    ({"version": 10**30}, "version 1000000000000000000000000000000; this version"),
])
def test_hostile_npz_metadata(tmp_path, change, what):
    meta, members = saved_npz(tmp_path, **change)
    path = write_npz(tmp_path / "bad.npz", meta, members)
    with pytest.raises(ValueError, match=re.escape(path.name) + ": .*" + what):
        st.load(path)


@pytest.mark.parametrize("text, what", [
    ("[" * 30_000 + "]" * 30_000, "RecursionError"),  # within the 64 KiB limit
    ('{"format": "sparsetensor", "version": 1' + "0" * 5000 + "}", "not readable JSON"),
    (b'{"format": "sparsetensor\xff"}', "not readable JSON"),
])
def test_unreadable_npz_metadata(tmp_path, text, what):
    _, members = saved_npz(tmp_path)
    path = write_npz(tmp_path / "bad.npz", text, members)
    with pytest.raises(ValueError, match="bad.npz: bad metadata: .*" + what):
        st.load(path)


def test_sparse_dim_beyond_int32_breaks_invariant_1_3(tmp_path):
    t = st.sparse_csr_tensor(np.array([0, 1, 2], np.int32), np.array([1, 0], np.int32), [1.0, 2.0], size=(2, 2))
    st.save(tmp_path / "t.npz", t)
    with zipfile.ZipFile(tmp_path / "t.npz") as zf:
        meta = json.loads(zf.read("metadata.json"))
        members = {n: zf.read(n) for n in zf.namelist() if n != "metadata.json"}
    meta["shape"] = [2, 2**31]
    path = write_npz(tmp_path / "bad.npz", meta, members)
    with pytest.raises(st.InvariantError, match="bad.npz") as e:
        st.load(path)
    assert e.value.invariant == "1.3"


def npy_header(shape, dtype="<f8"):
    """A .npy header (format 1.0) declaring ``shape``, with no data after it."""
    header = repr({"descr": dtype, "fortran_order": False, "shape": tuple(shape)}).encode()
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


@pytest.mark.parametrize("shape, what", [
    ((10**12,), r"declares shape \(1000000000000,\) .* but the member holds 0 bytes"),
    ((2**62, 2**62), "but the member holds 0 bytes"),
    ((10**30,), "but the member holds 0 bytes"),
    ((-1,), "negative size"),
])
@pytest.mark.parametrize("compress", [False, True])
def test_npy_header_declaring_a_huge_shape(tmp_path, shape, what, compress):
    meta, members = saved_npz(tmp_path)
    members["values.npy"] = npy_header(shape)
    path = write_npz(tmp_path / "bad.npz", meta, members, compress=compress)
    for mmap_mode in (None, "r"):
        with pytest.raises(ValueError, match="bad.npz: member values.npy: .*" + what):
            st.load(path, mmap_mode=mmap_mode)


def scipy_npz(path, **arrays):
    """A file as scipy.sparse.save_npz writes it, from hand-made members."""
    np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
    return path


@pytest.mark.parametrize("shape", [[2**62, 2**62], [2**40, 2**40], [2**25, 4]])
def test_scipy_dia_file_with_huge_rows(tmp_path, shape):
    """SciPy's dia files load as CSR (an index per row): a 1 KB file declaring 2^40 rows is refused."""
    path = scipy_npz(tmp_path / "dia.npz", format="dia", shape=shape, data=np.ones((1, 4)), offsets=[0])
    with pytest.raises(ValueError, match=rf"dia.npz: a dia matrix of shape \({shape[0]}, {shape[1]}\) with 4 stored"):
        st.load(path)
    small = scipy_npz(tmp_path / "small.npz", format="dia", shape=[4, 2**40], data=np.ones((1, 4)), offsets=[0])
    np.testing.assert_array_equal(st.load(small).crow_indices(), [0, 1, 2, 3, 4])


def test_scipy_file_with_huge_shape_loads_as_coo(tmp_path):
    path = scipy_npz(tmp_path / "coo.npz", format="coo", shape=[2**62, 2**62], data=[1.0], row=[0], col=[2**62 - 1])
    t = st.load(path)
    assert t.layout is st.sparse_coo and t.shape == (2**62, 2**62) and t.nnz == 1


def test_npz_memory_error_names_the_member(tmp_path, monkeypatch):
    meta, members = saved_npz(tmp_path)
    path = write_npz(tmp_path / "t.npz", meta, members)

    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 40.0 GiB")

    monkeypatch.setattr(np.lib.format, "read_array", out_of_memory)
    with pytest.raises(MemoryError, match="t.npz: member .*.npy: not enough memory for shape"):
        st.load(path)


# -- the command line -------------------------------------------------------------------------------------
def run_cli(*args):
    # cwd="/" so that the installed package is imported, never a source tree
    return subprocess.run([sys.executable, "-m", "sparsetensor", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd="/")


def cli_main(capsys, *argv):
    """``cli.main`` in this process: (exit status, stdout, stderr); an exception escaping it fails the test."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", ["integer-value-overflow", "row-index-overflow", "nnz-1e11", "nnz-overflow",
                                  "array-1e10-values", "negative-nnz", "float-nnz", "integer-field-float-value",
                                  "nan-row-index", "latin-1-banner", "real-value-overflow", "nnz-one-too-many"])
def test_cli_hostile_mtx_exit_2_without_traceback(tmp_path, capsys, case):
    text, line, what = HOSTILE_MTX[case]
    for suffix in (".mtx", ".mtx.gz"):
        path = write(tmp_path / (case + suffix), text)
        for argv in (("info", path), ("check", path), ("convert", path, tmp_path / "out.npz")):
            code, out, err = cli_main(capsys, *argv)
            assert code == cli.EXIT_UNREADABLE == 2, (argv, out, err)
            assert path.name in err and re.search(what, err) and "Traceback" not in err + out, (argv, err)
            if line is not None:
                assert f"line {line}:" in err
            assert not (tmp_path / "out.npz").exists()


def test_cli_hostile_npz_exit_2_and_invariant_exit_1(tmp_path, capsys):
    meta, members = saved_npz(tmp_path, shape=[10**30, 2])
    bad = write_npz(tmp_path / "huge.npz", meta, members)
    for argv in (("info", bad), ("check", bad), ("convert", bad, tmp_path / "out.mtx")):
        code, out, err = cli_main(capsys, *argv)
        assert code == 2 and "huge.npz: bad metadata" in err and "Traceback" not in err, (argv, err)
    meta, members = saved_npz(tmp_path, shape=[2, 1])  # a column index 1 >= ncols: invariant 5.5
    invalid = write_npz(tmp_path / "invalid.npz", meta, members)
    code, out, err = cli_main(capsys, "check", invalid)
    assert code == cli.EXIT_INVALID == 1 and "invalid.npz: INVALID" in out and "5.5" in out
    for argv in (("info", invalid), ("convert", invalid, tmp_path / "out.npz")):
        code, out, err = cli_main(capsys, *argv)
        assert code == 1 and "INVALID" in err and "5.5" in err


def test_cli_memory_and_internal_errors(tmp_path, capsys, monkeypatch):
    path = write(tmp_path / "m.mtx", REAL + "2 2 1\n1 1 1.0\n")
    assert cli_main(capsys, "check", path)[0] == 0

    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 40.0 GiB")

    monkeypatch.setattr(st, "load", out_of_memory)
    code, out, err = cli_main(capsys, "check", path)
    assert code == 2 and "m.mtx: cannot read: not enough memory" in err

    def bug(*args, **kwargs):
        raise IndexError("a bug")

    monkeypatch.setattr(st, "load", bug)
    code, out, err = cli_main(capsys, "info", path)
    assert code == cli.EXIT_INTERNAL == 3 and "internal error: IndexError: a bug" in err and "--traceback" in err
    with pytest.raises(IndexError, match="a bug"):
        cli.main(["--traceback", "info", str(path)])


@pytest.mark.parametrize("rows", [3_000_000_000, INT64_MAX])
def test_cli_info_on_a_tiny_file_with_huge_dims(tmp_path, capsys, rows):
    """A valid 60-byte file declaring 3e9 (or 2^63 - 1) rows: info skips the row statistics (a CSR of the
    rows would take 24 GB or overflow) instead of exhausting memory; spy refuses."""
    path = write(tmp_path / "tall.mtx", REAL + f"{rows} 2 1\n{rows} 1 1.0\n")
    code, out, err = cli_main(capsys, "info", path)
    assert code == 0, err
    assert f"row nnz   not computed: {rows} rows for 1 stored values" in out and "Traceback" not in err
    assert cli_main(capsys, "check", path)[0] == 0
    pytest.importorskip("matplotlib")
    code, out, err = cli_main(capsys, "spy", path, "-o", tmp_path / "tall.png")
    assert code == 2 and f"{rows} rows for 1 stored values" in err and not (tmp_path / "tall.png").exists()


def test_cli_subprocess_exit_codes_and_help(tmp_path):
    """The real entry point: stderr as a user sees it, and the exit statuses documented in --help."""
    hostile = write(tmp_path / "h.mtx", REAL + f"2 2 1\n{BIG} 1 1.0\n")
    huge = write(tmp_path / "huge.mtx", REAL + "2 2 100000000000\n1 1 1.0\n")
    for path in (hostile, huge):
        out = run_cli("check", path)
        assert out.returncode == 2 and path.name + ": line " in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    meta, members = saved_npz(tmp_path, shape=[2, 1])
    out = run_cli("check", write_npz(tmp_path / "invalid.npz", meta, members))
    assert out.returncode == 1 and "INVALID" in out.stdout and "Traceback" not in out.stderr
    help_text = run_cli("--help").stdout
    for status in ("0 success", "1 the file is invalid", "2 the file could not be read", "3 an internal error"):
        assert status in " ".join(help_text.split()), status
    assert "exit status" in cli.__doc__.lower() and "--traceback" in help_text


# -- from a fuzz of corrupt files ---------------------------------------------------------------------------
def _patched_central_entry(path, offset, value, width):
    """The first central-directory entry (metadata.json, written first) with a field rewritten."""
    data = bytearray(open(path, "rb").read())
    cd = data.find(b"PK\x01\x02")
    assert data[cd + 46:cd + 46 + 13] == b"metadata.json"
    data[cd + offset:cd + offset + width] = value.to_bytes(width, "little")
    open(path, "wb").write(data)


def test_metadata_declaring_a_huge_compressed_size_is_refused_before_reading(tmp_path):
    path = tmp_path / "t.npz"
    st.save(path, st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0], size=(2, 2)))
    _patched_central_entry(path, 20, 0x80000000, 4)  # zipfile read that many bytes into one buffer first
    with pytest.raises(ValueError, match="compressed bytes"):
        st.load(path)


@pytest.mark.parametrize("flag", [0x0001, 0x0040])
def test_encrypted_metadata_is_a_value_error(tmp_path, flag):
    path = tmp_path / "t.npz"
    st.save(path, st.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0], size=(2, 2)))
    _patched_central_entry(path, 8, flag, 2)
    with pytest.raises(ValueError):
        st.load(path)


def test_npy_header_that_does_not_tokenize_is_a_value_error(tmp_path):
    path = tmp_path / "t.npz"
    meta = {"format": "sparsetensor", "version": 1, "layout": "coo", "shape": [3], "index_dtype": "int64",
            "value_dtype": "float64", "coalesced": False}
    bad = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + b"{'descr': '<i8', 'fortran_order': False, 'shape': (2, (".ljust(117) + b"\n"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("metadata.json", json.dumps(meta))
        zf.writestr("indices.npy", bad)
        zf.writestr("values.npy", b"")
    with pytest.raises(ValueError, match="not a valid .npy array"):
        st.load(path)


@pytest.mark.parametrize("index_dtype,big", [(np.int32, 2_000_000_000), (np.int64, 6 * 10**18)])
def test_a_falling_compressed_index_that_wraps_in_a_diff_is_refused(tmp_path, index_dtype, big):
    import io

    def npy(a):
        b = io.BytesIO()
        np.lib.format.write_array(b, a, allow_pickle=False)
        return b.getvalue()

    path = tmp_path / "t.npz"
    meta = {"format": "sparsetensor", "version": 1, "layout": "csr", "shape": [3, 4],
            "index_dtype": np.dtype(index_dtype).name, "value_dtype": "float64", "coalesced": False}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("metadata.json", json.dumps(meta))
        zf.writestr("compressed_indices.npy", npy(np.array([0, big, -big, 3], index_dtype)))
        zf.writestr("plain_indices.npy", npy(np.array([0, 1, 2], index_dtype)))
        zf.writestr("values.npy", npy(np.array([1.0, 2.0, 3.0])))
    with pytest.raises(st.InvariantError) as e:
        st.load(path)
    assert e.value.invariant == "5.3"


@pytest.mark.parametrize("text,shape", [
    ("%%MatrixMarket matrix array real general\n0 2\n", (0, 2)),  # SciPy's reader: SIGFPE
    ("%%MatrixMarket matrix array integer general\n0 0\n", (0, 0)),
    ("%%MatrixMarket matrix coordinate real general\n2 4 2\n2 4 -1.5\n1 3 5.0 ", (2, 4)),  # SIGSEGV: a space at EOF
    ("%%MatrixMarket matrix coordinate real general\n2 4 2\n2 4 -1.5\n1 3 5.0\t\t", (2, 4)),
    ("%%MatrixMarket matrix coordinate pattern general\n2 4 1\n1 3 ", (2, 4)),
    ("%%MatrixMarket matrix array real general\n1 2\n5.0\n6.0\r", (1, 2)),
])
@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_matrix_market_files_scipys_reader_crashed_on(tmp_path, text, shape, suffix):
    path = tmp_path / ("m" + suffix)
    write(path, text)
    got = st.read_mtx(path)
    assert got.shape == shape
    dense = got if isinstance(got, np.ndarray) else got.to_dense()
    if "1 3 5.0" in text:
        assert dense[0, 2] == 5.0 and dense[1, 3] == -1.5
    if "5.0\n6.0" in text:
        np.testing.assert_array_equal(dense, [[5.0, 6.0]])
