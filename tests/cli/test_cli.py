"""The command line, run as a real subprocess on real files: every subcommand, error paths, exit codes."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import sparsetensor as st
from conftest import random_dense


def run(*args, timeout=300):
    # cwd="/" so that the installed package is imported, never a source tree
    return subprocess.run([sys.executable, "-m", "sparsetensor", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd="/")


@pytest.fixture
def matrix_file(tmp_path, rng):
    a = random_dense(rng, blocks=(12, 10), blocksize=(2, 2), nnz=30, dtype=np.float32)
    path = tmp_path / "m.npz"
    st.save(path, st.from_dense(a, "csr"))
    return path, a


def test_demo_runs_and_reports():
    out = run("--size", 400)
    assert out.returncode == 0, out.stderr
    assert "invariants hold, round trip exact" in out.stdout
    assert "WRONG" not in out.stdout
    assert "is refused: csr invariant" in out.stdout
    for matrix in ("27-point stencil", "R-MAT"):  # every op on both structures, one row each
        for op in ("check", "csr->csc", "spmv", "spmm32", "spgemm", "add"):
            assert sum(f" {op} " in line for line in out.stdout.splitlines()
                       if line.strip().startswith(matrix)) == 1, (matrix, op, out.stdout)
    assert "ours is the fastest in" in out.stdout and "Warning" not in out.stderr


def test_bad_arguments_exit_2():
    out = run("--size", 0)
    assert out.returncode == 2 and "--size" in out.stderr
    for opt in ("--threads", "--repeat"):
        out = run(opt, 0)
        assert out.returncode == 2 and opt in out.stderr
    out = run("nosuchcommand")
    assert out.returncode == 2


def test_info(matrix_file):
    path, a = matrix_file
    out = run("info", path)
    assert out.returncode == 0, out.stderr
    nnz = int(np.count_nonzero(a))
    assert f"nnz       {nnz}" in out.stdout
    assert "layout    csr" in out.stdout and "(24, 20)" in out.stdout
    lengths = (a != 0).sum(1)
    assert f"min {lengths.min()}, median {np.median(lengths):g}, max {lengths.max()}" in out.stdout
    assert "suggested blocksize (2, 2)" in out.stdout  # the pattern was built from 2x2 blocks
    assert "canonical yes" in out.stdout and "Traceback" not in out.stderr


def test_check_valid_invalid_unreadable(tmp_path, matrix_file):
    path, _ = matrix_file
    assert run("check", path).returncode == 0
    bad = tmp_path / "bad.npz"
    t = st.sparse_csr_tensor([0, 2, 2], [1, 0], [1.0, 2.0], size=(2, 2), check_invariants=False)
    st.save(bad, t)  # saving does not check; loading does
    out = run("check", bad)
    assert out.returncode == 1 and "5.6" in out.stdout + out.stderr and "Traceback" not in out.stderr
    missing = run("check", tmp_path / "nope.npz")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"PK\x03\x04" + os.urandom(64))
    out = run("check", corrupt)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "corrupt.npz" in out.stderr


def test_convert(tmp_path, matrix_file):
    path, a = matrix_file
    out_path = tmp_path / "out.npz"
    out = run("convert", path, out_path, "--layout", "bsr", "--blocksize", "2x2", "--index-dtype", "int32",
              "--dtype", "float64")
    assert out.returncode == 0, out.stderr
    t = st.load(out_path)
    assert t.layout is st.sparse_bsr and t.blocksize == (2, 2) and t.index_dtype == np.int32
    assert t.dtype == np.float64
    np.testing.assert_array_equal(t.to_dense(), a)
    again = run("convert", path, out_path)
    assert again.returncode == 2 and "--force" in again.stderr
    assert run("convert", path, out_path, "--layout", "csc", "--force").returncode == 0
    assert st.load(out_path).layout is st.sparse_csc
    mtx = tmp_path / "m.mtx.gz"
    assert run("convert", path, mtx).returncode == 0
    np.testing.assert_array_equal(st.load(mtx).to_dense(), a)
    assert run("convert", path, tmp_path / "x.npz", "--layout", "bsr").returncode == 2  # needs --blocksize
    assert run("convert", path, tmp_path / "x.npz", "--layout", "bsr", "--blocksize", "5x5").returncode == 2
    assert run("convert", path, tmp_path / "x.npz", "--blocksize", "axb").returncode == 2
    assert run("convert", path, tmp_path / "no" / "dir" / "x.npz").returncode == 2


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True,
                    reason="root can write to read-only directories")
def test_convert_unwritable(tmp_path, matrix_file):
    path, _ = matrix_file
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    out = run("convert", path, ro / "x.npz")
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_convert_unwritable_target_is_a_directory(tmp_path, matrix_file):
    path, _ = matrix_file
    target = tmp_path / "adir"
    target.mkdir()
    out = run("convert", path, target, "--force")
    assert out.returncode == 2 and "Traceback" not in out.stderr


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_spy(tmp_path, matrix_file):
    pytest.importorskip("matplotlib", reason="spy needs matplotlib (the [plot] extra)")
    path, _ = matrix_file
    png = tmp_path / "spy.png"
    out = run("spy", path, "-o", png, "--width", 320, "--height", 240)
    assert out.returncode == 0, out.stderr
    assert png_size(png) == (320, 240)
    big = tmp_path / "big.npz"
    crow = np.arange(0, 3 * 5001, 3)[:5001]
    st.save(big, st.sparse_csr_tensor(crow, np.tile([0, 7, 4999], 5000), np.ones(15000), size=(5000, 5000)))
    assert run("spy", big, "-o", tmp_path / "big.png").returncode == 0  # aggregated into 600 x 600 pixels
    assert png_size(tmp_path / "big.png") == (600, 600)
    assert run("spy", tmp_path / "missing.npz", "-o", png).returncode == 2


def test_bench_on_a_file(matrix_file):
    path, _ = matrix_file
    out = run("bench", path, "--repeat", 1)
    assert out.returncode == 0, out.stderr
    assert "full invariant check" in out.stdout and "csr -> csc" in out.stdout
    gen = run("bench", "--size", 2000, "--repeat", 1)
    assert gen.returncode == 0 and "generated 2000 x 2000" in gen.stdout


def test_quiet_when_piped(matrix_file):
    path, _ = matrix_file
    out = run("info", path)
    assert "\r" not in out.stderr  # progress lines only on a terminal


def test_interleaved_medians_take_turns():
    from sparsetensor._cli._userbench import interleaved_medians

    log = []
    fns = {name: (lambda name=name: log.append(name)) for name in ("a", "b", "c")}
    medians = interleaved_medians(fns, repeat=6, warmup=1, rounds=3)
    assert set(medians) == {"a", "b", "c"} and all(m >= 0 for m in medians.values())
    # 3 rounds of 1 warm-up + 2 timed calls each, each round starting one callable further on
    assert log == ["a"] * 3 + ["b"] * 3 + ["c"] * 3 + ["b"] * 3 + ["c"] * 3 + ["a"] * 3 \
        + ["c"] * 3 + ["a"] * 3 + ["b"] * 3
