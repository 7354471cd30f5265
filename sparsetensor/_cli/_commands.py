"""The command line: ``python -m sparsetensor`` (also installed as ``sparsetensor``).

With no arguments it runs the demonstration of :mod:`sparsetensor._cli._demo`: a stencil and a
power-law graph, checked, converted and multiplied, against SciPy, PyTorch and GraphBLAS.
Subcommands: ``info``, ``check``, ``convert``, ``spy``, ``bench`` (see ``--help``).

Exit status (every subcommand; a bad file never prints a traceback):

- 0: success.
- 1: the file is invalid: it was read, but the tensor in it breaks an invariant
  (:class:`~sparsetensor.InvariantError`, printed with the file and the invariant).
- 2: the file could not be read (missing, a directory, unreadable, not a known format,
  malformed, truncated, a number or a declared size that does not fit, not enough memory),
  or a usage error (invalid option, refusing to overwrite, cannot write the output).
- 3: an internal error (a bug in sparsetensor: please report it; ``--traceback`` shows where).
- 130: interrupted.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
import zlib

import numpy as np

__all__ = ["main"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_UNREADABLE = EXIT_USAGE  # could not read the file: the same status as a usage error


def _best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _random_csr_arrays(n: int, per_row: int, seed: int, index_dtype=np.int32):
    """A random n x n CSR pattern with about ``per_row`` entries per row, sorted and distinct."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 2 * per_row + 1, size=n)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    keys = np.unique(rows * n + rng.integers(0, n, size=rows.size))  # sorts and drops duplicates
    rows, cols = np.divmod(keys, n)
    crow = np.zeros(n + 1, dtype=index_dtype)
    np.cumsum(np.bincount(rows, minlength=n), out=crow[1:])
    values = rng.standard_normal(cols.size).astype(np.float32)
    return crow, cols.astype(index_dtype), values


# -- helpers ------------------------------------------------------------------------------
class UserError(Exception):
    """A problem with the user's input (an option, or a file that cannot be read): printed without a
    traceback, exit status 2."""


# what reading a bad file may raise besides InvariantError (a ValueError, kept apart: exit status 1);
# MemoryError: a size the file does hold but this machine cannot
_READ_ERRORS = (ValueError, TypeError, NotImplementedError, OverflowError, MemoryError, OSError, KeyError, EOFError,
                zlib.error, struct.error)


class _Progress:
    """A status line on stderr, only when stderr is a terminal (quiet when piped)."""

    def __init__(self):
        self.tty = sys.stderr.isatty()

    def __call__(self, msg: str) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K" + msg)
            sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _load(path: str, progress=None):
    """Load a file (our .npz, SciPy .npz, .mtx/.mtx.gz); user errors become UserError, invariants propagate."""
    import os

    import sparsetensor as st

    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UserError(f"{path}: is a directory")
    if progress:
        progress(f"loading {path} ...")
    try:
        return st.load(path)
    except st.InvariantError:
        raise
    except _READ_ERRORS as e:
        msg = str(e) or type(e).__name__
        if isinstance(e, (zlib.error, struct.error)):
            msg = f"{type(e).__name__}: {msg}"
        if isinstance(e, MemoryError):
            msg = f"not enough memory to read it ({msg})"
        raise UserError(f"cannot read: {msg}" if path in msg else f"{path}: cannot read: {msg}") from None
    finally:
        if progress:
            progress.done()


def _as_sparse(t):
    import sparsetensor as st

    if isinstance(t, np.ndarray):
        return st.from_dense(t, "csr") if t.ndim == 2 else st.from_dense(t, "coo")
    return t


def _matrix_csr(t):
    """The tensor as CSR with its batch dims folded into rows (for statistics and pictures)."""
    t = _as_sparse(t)
    if t.layout.name != "csr":
        if t.layout.name == "coo" and t.sparse_dim != 2:
            raise UserError(f"row statistics need 2 sparse dims; this coo tensor has {t.sparse_dim}")
        t = t.to_sparse_csr()
    return t


_ROWS_ALWAYS = 1 << 24  # row statistics and pictures build a CSR: this many rows, or 16 per stored entry


def _rows_affordable(t) -> tuple[bool, int]:
    """(whether a CSR of ``t``'s rows is affordable, the number of rows with batch dims folded in):
    a tiny file may declare 10^18 rows, and one word per row would exhaust any machine."""
    nrows = int(np.prod(t.shape[:-1 - t.dense_dim], dtype=object)) if t.ndim >= 2 else 1
    stored = int(t.values().size)
    return nrows <= max(_ROWS_ALWAYS, 16 * stored), nrows


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _histogram(lengths: np.ndarray, width: int = 40, bins: int = 8) -> list[str]:
    if lengths.size == 0:
        return ["  (no rows)"]
    hi = int(lengths.max())
    edges = np.unique(np.linspace(0, hi + 1, num=min(bins, hi + 1) + 1).astype(np.int64))
    counts, _ = np.histogram(lengths, bins=edges)
    top = max(int(counts.max()), 1)
    lines = []
    for lo, up, c in zip(edges[:-1], edges[1:], counts):
        label = f"{lo}" if up - lo == 1 else f"{lo}-{up - 1}"
        lines.append(f"  {label:>12s} | {'#' * int(round(width * c / top)):<{width}s} {c}")
    return lines


def suggest_blocksize(rows: np.ndarray, cols: np.ndarray, shape: tuple, nnz: int):
    """Among square blocks 2..32 dividing both sizes, the one storing the fewest explicit zeros."""
    best = None
    for b in range(2, 33):
        if shape[0] % b or shape[1] % b:
            continue
        keys = (rows // b).astype(np.int64) * (shape[1] // b) + cols // b
        nblocks = np.unique(keys).size
        zeros = nblocks * b * b - nnz
        if best is None or zeros < best[1]:
            best = ((b, b), zeros, nblocks)
    return best


# -- subcommands ------------------------------------------------------------------------
def cmd_info(args) -> int:
    progress = _Progress()
    t = _load(args.file, progress)
    if isinstance(t, np.ndarray):
        print(f"file      {args.file}\nlayout    strided (a dense {t.dtype}{list(t.shape)} array)")
        t = _as_sparse(t)
    shape = t.shape
    numel = int(np.prod(shape, dtype=np.float64)) if shape else 1
    print(f"file      {args.file}")
    print(f"layout    {t.layout.name}")
    print(f"shape     {shape}  (batch_dim={t.batch_dim}, sparse_dim={t.sparse_dim}, dense_dim={t.dense_dim}"
          + (f", blocksize={t.blocksize}" if t.layout.blocked else "") + ")")
    print(f"dtypes    values {t.dtype}, indices {t.index_dtype}")
    print(f"nnz       {t.nnz}" + (" per batch" if t.batch_dim else "")
          + (" blocks" if t.layout.blocked else ""))
    print(f"density   {t.values().size / numel:.3g} (stored values / elements)" if numel
          else "density   n/a (empty shape)")
    print(f"canonical {'yes' if t.is_coalesced() else 'no (unsorted or duplicate indices: coalesce() repairs it)'}")
    affordable, nrows = _rows_affordable(t)
    if t.dense_dim == 0 and (t.layout.name != "coo" or t.sparse_dim == 2) and not affordable:
        print(f"row nnz   not computed: {nrows} rows for {t.values().size} stored values (row statistics "
              "take memory per row)")
    elif t.dense_dim == 0 and (t.layout.name != "coo" or t.sparse_dim == 2):
        progress("computing row statistics ...")
        csr = _matrix_csr(t.coalesce() if t.layout.name == "coo" else t)
        progress.done()
        lengths = np.diff(csr.crow_indices().reshape(-1, csr.crow_indices().shape[-1]), axis=-1).ravel()
        if lengths.size:
            print(f"row nnz   min {int(lengths.min())}, median {float(np.median(lengths)):g}, "
                  f"max {int(lengths.max())}")
            print("\n".join(_histogram(lengths)))
        if csr.batch_dim == 0:
            nnz = csr.nnz
            ib, vb = np.dtype(csr.index_dtype).itemsize, np.dtype(csr.dtype).itemsize
            nrows, ncols = csr.shape
            rows = np.repeat(np.arange(nrows, dtype=np.int64), lengths)
            cols = csr.col_indices()
            print("memory    " + ", ".join([
                f"coo {_human_bytes(nnz * (2 * ib + vb))}",
                f"csr {_human_bytes((nrows + 1) * ib + nnz * (ib + vb))}",
                f"csc {_human_bytes((ncols + 1) * ib + nnz * (ib + vb))}",
                f"dense {_human_bytes(nrows * ncols * vb)}"]))
            best = suggest_blocksize(rows, cols, (nrows, ncols), nnz)
            if best is None:
                print("bsr       no square blocksize in 2..32 divides the shape")
            else:
                (b0, b1), zeros, nblocks = best
                mem = (nrows // b0 + 1) * ib + nblocks * (ib + b0 * b1 * vb)
                print(f"bsr       suggested blocksize ({b0}, {b1}): {nblocks} blocks, {zeros} explicit zeros, "
                      f"{_human_bytes(mem)}")
    return EXIT_OK


def cmd_check(args) -> int:
    import sparsetensor as st

    try:
        t = _load(args.file, _Progress())
        if not isinstance(t, np.ndarray):
            t.check_invariants()
    except st.InvariantError as e:
        print(f"{args.file}: INVALID: {e}")
        return EXIT_INVALID
    what = "dense array" if isinstance(t, np.ndarray) else f"{t.layout.name} tensor, nnz={t.nnz}"
    print(f"{args.file}: valid ({what}, shape {t.shape})")
    return EXIT_OK


def _parse_blocksize(text: str | None):
    if text is None:
        return None
    try:
        r, c = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UserError(f"--blocksize must look like RxC (e.g. 16x16), got {text!r}") from None
    if r < 1 or c < 1:
        raise UserError(f"--blocksize must be positive, got {text!r}")
    return (r, c)


def cmd_convert(args) -> int:
    import os

    import sparsetensor as st

    if os.path.exists(args.out) and not args.force:
        raise UserError(f"{args.out} exists; use --force to overwrite it")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise UserError(f"{args.out}: directory {out_dir} does not exist")
    blocksize = _parse_blocksize(args.blocksize)
    progress = _Progress()
    t = _load(args.file, progress)
    try:
        if args.layout is not None or blocksize is not None:
            default = "csr" if isinstance(t, np.ndarray) else t.layout.name
            layout = args.layout or default
            if layout in ("bsr", "bsc") and blocksize is None:
                raise UserError(f"--layout {layout} needs --blocksize RxC")
            progress(f"converting to {layout} ...")
            if isinstance(t, np.ndarray):
                t = st.from_dense(t, layout, blocksize=blocksize) if layout != "strided" else t
            elif layout == "strided":
                t = t.to_dense()
            else:
                t = t.to_sparse(layout, blocksize=blocksize)
        if args.dtype is not None:
            t = t.astype(args.dtype) if isinstance(t, np.ndarray) else t.to(args.dtype)
        if args.index_dtype is not None and not isinstance(t, np.ndarray):
            t = t.to(index_dtype=args.index_dtype)
        progress(f"writing {args.out} ...")
        st.save(args.out, t)
    except (ValueError, TypeError, NotImplementedError) as e:
        if isinstance(e, st.InvariantError):
            raise
        raise UserError(f"cannot convert {args.file}: {e}") from None
    except OSError as e:
        raise UserError(f"{args.out}: cannot write: {e.strerror or e}") from None
    finally:
        progress.done()
    desc = "dense array" if isinstance(t, np.ndarray) else f"{t.layout.name}, nnz={t.nnz}"
    print(f"wrote {args.out} ({desc}, shape {t.shape})")
    return EXIT_OK


def cmd_spy(args) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("spy needs matplotlib: pip install 'sparsetensor[plot]'") from None
    from ..io._files import atomic_write as _atomic_write

    width, height = args.width, args.height or args.width
    if width < 16 or height < 16:
        raise UserError("--width/--height must be at least 16 pixels")
    t = _load(args.file, _Progress())
    t = _as_sparse(t)
    if t.dense_dim or t.batch_dim or (t.layout.name == "coo" and t.sparse_dim != 2):
        raise UserError(f"spy draws 2-d matrices; this {t.layout.name} tensor has shape {t.shape} "
                        f"(batch_dim={t.batch_dim}, dense_dim={t.dense_dim})")
    affordable, nrows = _rows_affordable(t)
    if not affordable:
        raise UserError(f"spy draws through a CSR of the rows: {nrows} rows for {t.values().size} stored values "
                        "is more memory than the picture is worth")
    csr = _matrix_csr(t.coalesce() if t.layout.name == "coo" else t)
    nrows, ncols = csr.shape
    lengths = np.diff(csr.crow_indices())
    rows = np.repeat(np.arange(nrows, dtype=np.int64), lengths)
    cols = csr.col_indices().astype(np.int64)
    # aggregate into at most one bin per pixel of the drawing area
    br, bc = max(1, min(nrows, height)), max(1, min(ncols, width))
    counts = np.zeros((br, bc), dtype=np.int64)
    if rows.size:
        np.add.at(counts, (rows * br // max(nrows, 1), cols * bc // max(ncols, 1)), 1)
    dpi = 100
    fig = plt.figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    ax = fig.add_axes([0.08, 0.05, 0.88, 0.85])
    ax.imshow(np.log1p(counts), cmap="Greys", aspect="auto", interpolation="nearest",
              extent=(0, ncols, nrows, 0))
    ax.set_title(f"{nrows} x {ncols}, nnz = {csr.nnz}", fontsize=9)
    ax.tick_params(labelsize=7)

    def write(f):
        fig.savefig(f, format="png", dpi=dpi)

    try:
        _atomic_write(args.output, write)
    except OSError as e:
        raise UserError(f"{args.output}: cannot write: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    print(f"wrote {args.output} ({width}x{height} px)")
    return EXIT_OK


def cmd_bench(args) -> int:
    from ._userbench import run_user_bench

    if args.file is None:
        crow, col, val = _random_csr_arrays(args.size, 10, 0)
        import sparsetensor as st

        t = st.sparse_csr_tensor(crow, col, val, size=(args.size, args.size))
        name = f"generated {args.size} x {args.size}, ~10 nnz/row"
    else:
        t, name = _as_sparse(_load(args.file, _Progress())), args.file
    run_user_bench(t, name, repeat=args.repeat, progress=_Progress())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparsetensor", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="With no subcommand: the demonstration (a 27-point stencil and an R-MAT "
                                            "graph against SciPy, PyTorch and GraphBLAS, where installed).\n\n"
                                            "exit status: 0 success; 1 the file is invalid (read, but an invariant "
                                            "is broken);\n  2 the file could not be read (missing, malformed, "
                                            "truncated, a size it cannot hold, out of memory)\n  or a usage "
                                            "error; 3 an internal error (a bug); 130 interrupted")
    parser.add_argument("--traceback", action="store_true",
                        help="print the traceback of an internal error (exit status 3) instead of one line")
    parser.add_argument("--size", type=int, default=2_000_000,
                        help="demo: about this many nonzeros per matrix (default 2000000)")
    parser.add_argument("--threads", type=int, default=None, help="demo: threads for everyone (default: all CPUs)")
    parser.add_argument("--repeat", type=int, default=3, help="demo: timed runs per case, the median shown")
    parser.add_argument("--seed", type=int, default=0, help="demo: random seed of the R-MAT graph")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("info", help="shape, dtypes, nnz, row statistics, memory, suggested BSR blocksize")
    p.add_argument("file")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("check", help="full invariant check: exit 0 valid, 1 invalid, 2 unreadable")
    p.add_argument("file")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("convert", help="convert between layouts, dtypes and formats (.npz, .mtx, .mtx.gz)")
    p.add_argument("file", metavar="IN")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--layout", choices=["coo", "csr", "csc", "bsr", "bsc", "strided"])
    p.add_argument("--blocksize", metavar="RxC")
    p.add_argument("--index-dtype", choices=["int32", "int64"])
    p.add_argument("--dtype", choices=[str(d) for d in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                                        "float16", "float32", "float64", "complex64",
                                                        "complex128")])
    p.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    p.set_defaults(func=cmd_convert)
    p = sub.add_parser("spy", help="a PNG picture of the sparsity pattern (needs matplotlib)")
    p.add_argument("file")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--width", type=int, default=600, help="image width in pixels (default 600)")
    p.add_argument("--height", type=int, default=None, help="image height in pixels (default: width)")
    p.set_defaults(func=cmd_spy)
    p = sub.add_parser("bench", help="benchmark on your matrix (or a generated one) against SciPy and PyTorch")
    p.add_argument("file", nargs="?")
    p.add_argument("--size", type=int, default=200_000, help="generated matrix size (default 200000)")
    p.add_argument("--repeat", type=int, default=5)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv=None) -> int:
    import sparsetensor as st

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            if args.size < 1 or args.repeat < 1 or (args.threads is not None and args.threads < 1):
                parser.error("--size, --repeat and --threads must be >= 1")
            from ._demo import demo

            demo(args.size, args.threads, args.repeat, args.seed, progress=_Progress())
            return EXIT_OK
        return args.func(args)
    except UserError as e:
        print(f"sparsetensor {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except st.InvariantError as e:
        print(f"sparsetensor {args.command}: {getattr(args, 'file', '')}: INVALID: {e}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:
        print(f"sparsetensor {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError as e:
        print(f"sparsetensor {args.command}: not enough memory ({e or 'MemoryError'})", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: one line, the traceback only when asked for
        if args.traceback:
            raise
        print(f"sparsetensor {args.command or ''}: internal error: {type(e).__name__}: {e} (a bug in sparsetensor: "
              "please report it; rerun with --traceback to see where)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
