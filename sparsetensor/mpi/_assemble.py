"""Assembly from every rank: PETSc's ``MatSetValues``/``VecSetValues`` and ``MatAssemblyBegin/End`` in one call.

Every rank passes any number of global ``(row, col, value)`` triples, owned or
not. Each triple goes to the rank that owns its row: a rank orders its triples
by owner (a stable sort, so each owner receives them in the caller's order),
one ``MPI_Alltoall`` of counts tells every rank how many it receives from each,
and one ``MPI_Alltoallv`` per array (rows, columns, values; raw bytes, no
pickling) moves them. Each triple crosses the network once, and a rank holds,
besides the caller's arrays, one reordered array of outgoing triples at a time
and the triples it receives. The owner then sorts its triples and sums
duplicates with sparsetensor's COO coalescing kernels (or keeps the last of
each for ``mode="insert"``) and builds and checks its rows as every
:class:`~sparsetensor.mpi.DistCSR` constructor does.

Input errors are found by the rank that passed the triple, before anything
moves, and raised on every rank (:func:`~sparsetensor.mpi.agree`).
"""

from __future__ import annotations

import operator

import numpy as np
from mpi4py import MPI

from .._core._dtypes import VALUE_DTYPES, as_index_dtype, as_value_dtype
from .._core._from_arrays import sparse_coo_tensor
from ._comm import agree, bytes_of, comparable, raise_differing
from ._exchange import check_mode as check_exchange
from ._matrix import DistCSR
from ._bsr import DistBSR, _block_starts, _blocksize, _default_col_starts
from ._partition import check_starts, even_starts, without

__all__ = ["Routing", "assemble", "assemble_vector", "build", "owners"]

MODES = ("add", "insert")
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


# -- moving entries to their owners -----------------------------------------------------------
def owners(starts: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The rank owning each (checked) global index: the last rank whose range starts at or before
    it (so ranks that own nothing are skipped)."""
    if idx.dtype == np.uint64:  # searchsorted would compare uint64 with int64 as floats
        idx = idx.astype(np.int64)
    inner = np.asarray(starts[1:-1])
    if inner.shape[0] <= 8:  # a few streaming compares beat a branchy binary search per entry
        dest = np.zeros(idx.shape[0], dtype=np.uint8)
        for s in inner.tolist():
            np.add(dest, idx >= s, out=dest, casting="unsafe")
        return dest
    return np.searchsorted(starts, idx, side="right") - 1


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=out[1:])
    return out


class Routing:
    """Entry ``k`` of every array goes to rank ``dest[k]`` (collective: one ``MPI_Alltoall`` of counts here).

    Each :meth:`send` moves one array with one ``MPI_Alltoallv``; a rank receives
    its entries ordered by source rank, then by position at the source.
    """

    def __init__(self, comm, dest: np.ndarray):
        size = comm.size
        self._comm = comm
        # a 1- or 2-byte key makes NumPy's stable argsort a radix sort (one or two passes)
        small = np.uint8 if size <= 1 << 8 else np.uint16 if size <= 1 << 16 else np.int64
        d = dest.astype(small, copy=False)
        self.send_counts = np.bincount(d, minlength=size).astype(np.int64)
        # entries already in owner order (all owned by one rank, say) need no reordered copies
        self._order = np.argsort(d, kind="stable") if d.size > 1 and np.any(d[1:] < d[:-1]) else None
        self.recv_counts = np.empty(size, dtype=np.int64)
        comm.Alltoall(self.send_counts, self.recv_counts)
        self._sdispl, self._rdispl = _offsets(self.send_counts), _offsets(self.recv_counts)
        self.received = int(self.recv_counts.sum())

    def send(self, a: np.ndarray, dtype, out: np.ndarray | None = None) -> np.ndarray:
        """Move ``a`` (one entry per destination, cast to ``dtype``); the received entries (into ``out``)."""
        dtype = np.dtype(dtype)
        if self._order is not None:
            a = np.take(a, self._order)
        a = np.ascontiguousarray(a, dtype=dtype)
        if out is None:
            out = np.empty(self.received, dtype=dtype)
        # one entry = one contiguous datatype of its bytes: counts stay entry counts for every dtype
        entry = MPI.BYTE.Create_contiguous(max(dtype.itemsize, 1)).Commit()
        try:
            self._comm.Alltoallv([bytes_of(a), self.send_counts, self._sdispl, entry],
                                 [bytes_of(out), self.recv_counts, self._rdispl, entry])
        finally:
            entry.Free()
        return out


# -- checks -----------------------------------------------------------------------------------
def _size(v, what: str, where: str) -> int:
    try:
        n = operator.index(v)
    except TypeError:
        raise ValueError(f"{where}: {what} must be a non-negative integer, got {v!r}") from None
    if n < 0:
        raise ValueError(f"{where}: {what} must be a non-negative integer, got {n}")
    return n


def _shape(shape, where: str) -> tuple:
    try:
        m, n = shape
    except (TypeError, ValueError):
        raise ValueError(f"{where}: shape must be (rows, columns), got {shape!r}") from None
    return _size(m, "shape[0]", where), _size(n, "shape[1]", where)


def _check_mode(mode, where: str) -> str:
    if mode not in MODES:
        raise ValueError(f"{where}: mode must be one of {MODES} (PETSc's ADD_VALUES, INSERT_VALUES), got {mode!r}")
    return mode


def _index_array(a, name: str, where: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{where}: {name} must be a 1-d array, got shape {a.shape}")
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype == np.float64:  # np.asarray([]): a rank with no entries
            return np.zeros(0, dtype=np.int64)
        raise TypeError(f"{where}: {name} must be integers (int32 or int64), got dtype {a.dtype}")
    return a


def _value_array(v, where: str) -> np.ndarray:
    v = np.asarray(v)
    if v.ndim != 1:
        raise ValueError(f"{where}: values must be a 1-d array, got shape {v.shape}")
    if v.dtype not in VALUE_DTYPES:
        raise TypeError(f"{where}: values of dtype {v.dtype} are not supported; "
                        f"supported: {', '.join(map(str, VALUE_DTYPES))}")
    return v


def _first_outside(a: np.ndarray, n: int) -> int:
    """Position of the first entry of ``a`` outside ``[0, n)``, or -1 (two reductions when none is)."""
    if a.size == 0 or (a.min() >= 0 and a.max() < n):
        return -1
    return int(np.flatnonzero((a < 0) | (a >= n))[0])


def _triples(where: str, rows, cols, values, shape):
    """This rank's triples as arrays, or the error naming the triple and its global row."""
    r = _index_array(rows, "rows", where)
    c = None if cols is None else _index_array(cols, "cols", where)
    v = _value_array(values, where)
    lengths = [r.shape[0]] + ([] if c is None else [c.shape[0]]) + [v.shape[0]]
    if len(set(lengths)) != 1:
        names = "rows, values" if c is None else "rows, cols and values"
        raise ValueError(f"{where}: {names} must have one entry per triple; got lengths "
                         f"{', '.join(map(str, lengths))}")
    k = _first_outside(r, shape[0])
    if k >= 0:
        raise ValueError(f"{where}: entry {k} is in global row {r[k]}, outside the {shape[0]} rows [0, {shape[0]})")
    if c is not None:
        k = _first_outside(c, shape[1])
        if k >= 0:
            raise ValueError(f"{where}: entry {k} (global row {r[k]}) has column {c[k]}, outside the "
                             f"{shape[1]} columns [0, {shape[1]})")
    return r, c, v


def _agree_on(comm, where: str, fields: dict, values: np.ndarray, dtype):
    """Check that every rank passed the same ``fields``; the value dtype of the result (collective, one allgather).

    Without ``dtype``, the values' dtypes of the ranks that pass entries are
    promoted (``np.result_type``); a rank passing none does not count, so
    ``np.array([])`` (float64) on an idle rank does not promote float32 values.
    """
    every = comm.allgather((comparable(fields), values.dtype.str, values.size > 0))
    raise_differing(where, [f for f, _, _ in every])
    if dtype is not None:
        return dtype
    used = [np.dtype(d) for _, d, nonempty in every if nonempty] or [np.dtype(d) for _, d, _ in every]
    return np.result_type(*used)


def _index_dtype(index_dtype, shape, counts: np.ndarray, where: str) -> np.dtype:
    """int32 when the dimensions and every rank's entries fit (half the index bytes in every product), else int64."""
    need = max(shape[0], shape[1], int(counts.max()) if counts.size else 0)
    if index_dtype is None:
        return np.dtype(np.int32) if need <= _INT32_MAX else np.dtype(np.int64)
    if index_dtype == np.int32 and need > _INT32_MAX:
        raise ValueError(f"{where}: index_dtype=int32 cannot hold {need} (the shape {shape} and each rank's entries "
                         f"must be below 2**31); use int64")
    return index_dtype


# -- the owner's side -------------------------------------------------------------------------
def _last_wins(keys: np.ndarray) -> np.ndarray:
    """Positions of the last entry of each distinct key, in increasing key order (PETSc's INSERT_VALUES)."""
    order = np.argsort(keys, kind="stable")  # stable: equal keys keep their arrival order
    sk = keys[order]
    last = np.empty(sk.shape[0], dtype=bool)
    last[-1:] = True
    np.not_equal(sk[1:], sk[:-1], out=last[:-1])
    return order[last]


def _keys(idx: np.ndarray, ncols: int, nrows: int):
    """Row-major int64 keys of (row, col) pairs, or None where ``nrows * ncols`` does not fit int64."""
    if nrows and ncols and (nrows - 1) * ncols + ncols - 1 > _INT64_MAX:
        return None
    return idx[0].astype(np.int64) * ncols + idx[1]


def build(comm, shape, starts, cstarts, idx: np.ndarray, vals: np.ndarray, *, insert: bool = False,
          index_dtype=None, exchange: str = "p2p", where: str = "assemble") -> DistCSR:
    """Every rank: its triples (``idx[0]`` local rows, ``idx[1]`` global columns) summed into a DistCSR (collective).

    Duplicates are summed in their order (``insert=False``) or the last one is
    kept. The rows are built with the COO coalescing kernels and then checked
    as every constructor checks them (``DistCSR._from_parts``).
    """
    rank = comm.rank
    nloc = int(starts[rank + 1] - starts[rank])

    def local():
        i, v = idx, vals
        if insert and i.shape[1] > 1:
            keys = _keys(i, shape[1], nloc)
            if keys is None:
                order = np.lexsort((i[1], i[0]))
                si = i[:, order]
                last = np.ones(order.shape[0], dtype=bool)
                last[:-1] = (si[0, 1:] != si[0, :-1]) | (si[1, 1:] != si[1, :-1])
                keep = order[last]
            else:
                keep = _last_wins(keys)
            i, v = np.ascontiguousarray(i[:, keep]), v[keep]
        if i.dtype == np.int32 and i.shape[1] > _INT32_MAX:  # row pointers of so many entries need int64
            i = i.astype(np.int64)
        coo = sparse_coo_tensor(i, v, size=(nloc, shape[1]), check_invariants=False)
        return coo.coalesce().to_sparse_csr()

    csr = agree(comm, local)
    nnzs = np.empty(comm.size, dtype=np.int64)
    comm.Allgather(np.array([csr.nnz], dtype=np.int64), nnzs)
    idt = _index_dtype(index_dtype, shape, nnzs, where)  # the same numbers on every rank: all raise or none
    crow64 = csr.crow_indices().astype(np.int64)
    cols = csr.col_indices().astype(idt, copy=False)
    return DistCSR._from_parts(comm, shape, starts, cstarts, crow64, cols, csr.values(), int(nnzs[:rank].sum()),
                               True, exchange)


# -- the public calls -------------------------------------------------------------------------
def assemble(rows, cols, values, shape, comm=None, *, row_starts=None, col_starts=None, mode: str = "add",
             block=None, dtype=None, index_dtype=None, exchange: str = "p2p") -> DistCSR:
    """A :class:`DistCSR` from global ``(row, col, value)`` triples passed by every rank (collective).

    PETSc's ``MatSetValues`` + ``MatAssemblyBegin/End``: each rank passes the
    entries it computed (its elements' entries, say), owned by it or not; every
    entry is sent to the rank owning its row, and each owner sums the entries
    it receives (``mode="add"``, PETSc's ``ADD_VALUES``) or keeps the last one
    for each position (``mode="insert"``, ``INSERT_VALUES``: later ranks win,
    and within one rank later entries). One ``MPI_Alltoall`` of counts and one
    ``MPI_Alltoallv`` per array move the entries, each entry once.

    Parameters
    ----------
    rows, cols : 1-d arrays of integers
        Global row and column of each entry (any integer dtype; ``[]`` for none).
    values : 1-d array
        One value per entry, of a dtype sparsetensor supports (bool, int8-64,
        uint8, float16-64, complex64/128).
    shape : (int, int)
        The global shape; the same on every rank.
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.
    row_starts : sequence of int, optional
        ``size + 1`` row boundaries (rank ``r`` owns rows
        ``[row_starts[r], row_starts[r+1])``); default: an even split of the rows.
    col_starts : sequence of int, optional
        The column (input vector) partition, as for :meth:`DistCSR.from_global`.
    mode : {"add", "insert"}
    block : (int, int), optional
        Return a :class:`DistBSR` of ``block = (r, c)`` blocks. The entries are still
        scalar triples: they are assembled as above, then every ``r x c`` block holding
        an entry is stored whole (explicit zeros fill it), as PETSc's
        ``MatSetValues`` on a BAIJ matrix does. ``shape``, ``row_starts`` (default: an
        even split of the block rows) and ``col_starts`` must be multiples of ``r`` and ``c``.
    dtype : dtype, optional
        The value dtype; default: the values' dtypes of the ranks that pass
        entries, promoted as NumPy does (``np.result_type``).
    index_dtype : {None, int32, int64}
        Default: int32 when the shape and every rank's number of entries fit
        (half the index bytes of int64 in every product), else int64.
    exchange : {"p2p", "neighbor"}
        How the result's products move ghost entries.

    Returns
    -------
    DistCSR or DistBSR
        Canonical rows (sorted columns, duplicates summed). Summed duplicates
        that cancel stay as explicit zeros, as in PETSc.

    Raises
    ------
    ValueError
        On every rank, when any rank passed an entry outside the shape (the
        message names that rank, the entry and its global row), arrays of
        different lengths, a bad shape or mode, or when the ranks disagree on
        the shape, partitions or mode.
    TypeError
        On every rank, for non-integer indices or unsupported values.

    Notes
    -----
    Memory: besides the caller's arrays, a rank holds one reordered copy of one
    array of its outgoing entries at a time, the entries it receives, and its
    rows. Sending rows and columns as int32 when the shape fits halves their bytes.

    Examples
    --------
    A 1-D Laplacian from two-node elements, each rank assembling its elements
    (the last node of a rank's last element belongs to the next rank):

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> comm = MPI.COMM_WORLD
    >>> n = 6                                     # nodes; elements (e, e + 1)
    >>> e = np.arange(comm.rank * (n - 1) // comm.size, (comm.rank + 1) * (n - 1) // comm.size)
    >>> rows = np.concatenate([e, e, e + 1, e + 1])
    >>> cols = np.concatenate([e, e + 1, e, e + 1])
    >>> vals = np.repeat([1.0, -1.0, -1.0, 1.0], e.size)
    >>> A = stmpi.assemble(rows, cols, vals, (n, n), comm)
    >>> A.shape, A.nnz
    ((6, 6), 16)
    >>> t = A.to_global()                         # rank 0 gets the matrix, the others None
    >>> (t.to_dense()[:3] if comm.rank == 0 else np.array([[1., -1, 0, 0, 0, 0], [-1, 2, -1, 0, 0, 0],
    ...                                                    [0, -1, 2, -1, 0, 0]]))
    array([[ 1., -1.,  0.,  0.,  0.,  0.],
           [-1.,  2., -1.,  0.,  0.,  0.],
           [ 0., -1.,  2., -1.,  0.,  0.]])
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.rank, comm.size
    where = f"assemble: rank {rank}"

    def prepare():
        shp = _shape(shape, where)
        _check_mode(mode, where)
        check_exchange(exchange)
        if block is None:
            starts = even_starts(shp[0], size) if row_starts is None else check_starts(row_starts, shp[0], size,
                                                                                      "row_starts")
            cstarts = DistCSR._col_starts(shp, starts, col_starts, size)
        else:
            bs = _blocksize(block, f"{where}: block")
            if shp[0] % bs[0] or shp[1] % bs[1]:
                raise ValueError(f"{where}: shape {shp} is not a whole number of {bs} blocks")
            starts = (even_starts(shp[0] // bs[0], size) * bs[0] if row_starts is None
                      else _block_starts(row_starts, shp[0], bs[0], size, "row_starts"))
            cstarts = _default_col_starts(shp, bs, starts, col_starts, size)
        idt = None if index_dtype is None else as_index_dtype(index_dtype)
        vdt = None if dtype is None else as_value_dtype(dtype)
        if cols is None:  # (assemble_vector's triples have none)
            raise TypeError(f"{where}: cols must be the column indices of the triples, got None")
        r, c, v = _triples(where, rows, cols, values, shp)
        # block before the partitions that it shapes, so that a differing block is named
        fields = {"shape": shp, "mode": mode, "block": str(block), "row_starts": starts,
                  "col_starts": cstarts, "index_dtype": str(idt), "dtype": str(vdt), "exchange": exchange}
        return shp, starts, cstarts, idt, vdt, r, c, v, fields

    shp, starts, cstarts, idt, vdt, r, c, v, fields = agree(comm, prepare)
    vdt = _agree_on(comm, "assemble", fields, v, vdt)
    wire = np.dtype(np.int32) if max(shp) <= _INT32_MAX else np.dtype(np.int64)
    if size == 1:  # every entry is this rank's: nothing to route
        idx = np.empty((2, r.shape[0]), dtype=wire)
        idx[0], idx[1] = r, c
        vals = v.astype(vdt, copy=False)
    else:  # only the entries of other ranks' rows travel; this rank's stay, placed in rank order
        dest = owners(starts, r)
        far = np.flatnonzero(dest != rank)
        route = Routing(comm, dest[far])
        before = int(route.recv_counts[:rank].sum())  # received from lower ranks: they come first
        own = r.shape[0] - far.shape[0]
        idx = np.empty((2, route.received + own), dtype=wire)  # the COO indices
        vals = np.empty(route.received + own, dtype=vdt)
        for a, out, dt in ((r, idx[0], wire), (c, idx[1], wire), (v, vals, vdt)):
            got = route.send(a[far], dt)
            out[:before], out[before + own:] = got[:before], got[before:]
            without(a, far, out[before:before + own])
        del route
    idx[0] -= wire.type(starts[rank])  # global rows -> this rank's rows
    A = build(comm, shp, starts, cstarts, idx, vals, insert=mode == "insert", index_dtype=idt, exchange=exchange)
    if block is None:
        return A
    try:
        return DistBSR.from_csr(A, tuple(int(b) for b in block))
    finally:
        A.free()


def assemble_vector(rows, values, n, comm=None, *, row_starts=None, mode: str = "add", dtype=None) -> np.ndarray:
    """This rank's slice of a vector assembled from global ``(row, value)`` pairs of every rank (collective).

    PETSc's ``VecSetValues`` + ``VecAssemblyBegin/End``: each pair goes to the
    rank owning its row, and the owner sums them (``mode="add"``) or keeps the
    last (``mode="insert"``; later ranks win, then later entries). Rows nobody
    sets are zero.

    Parameters
    ----------
    rows : 1-d array of integers
        Global rows (any integer dtype; ``[]`` for none).
    values : 1-d array
        One value per row.
    n : int
        The vector's length, the same on every rank.
    comm : mpi4py.MPI.Comm, optional
    row_starts : sequence of int, optional
        ``size + 1`` boundaries; default: an even split, the same as
        :func:`assemble`'s default, so the slice fits ``A @ x`` of a square
        matrix assembled with the default.
    mode : {"add", "insert"}
    dtype : dtype, optional
        As for :func:`assemble`.

    Returns
    -------
    numpy.ndarray
        Entries ``[row_starts[r], row_starts[r+1])`` on rank ``r``.

    Raises
    ------
    ValueError, TypeError
        On every rank, as for :func:`assemble`.

    Examples
    --------
    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> from sparsetensor import mpi as stmpi
    >>> comm = MPI.COMM_WORLD
    >>> b = stmpi.assemble_vector([0, 3, 3], [1.0, 2.0, 0.5], 4, comm)   # every rank adds the same pairs
    >>> full = np.concatenate(comm.allgather(b))
    >>> full == np.array([1.0, 0.0, 0.0, 2.5]) * comm.size
    array([ True,  True,  True,  True])
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.rank, comm.size
    where = f"assemble_vector: rank {rank}"

    def prepare():
        length = _size(n, "n", where)
        _check_mode(mode, where)
        starts = even_starts(length, size) if row_starts is None else check_starts(row_starts, length, size,
                                                                                  "row_starts")
        vdt = None if dtype is None else as_value_dtype(dtype)
        r, _, v = _triples(where, rows, None, values, (length, 1))
        fields = {"n": length, "mode": mode, "row_starts": starts, "dtype": str(vdt)}
        return starts, vdt, r, v, fields

    starts, vdt, r, v, fields = agree(comm, prepare)
    vdt = _agree_on(comm, "assemble_vector", fields, v, vdt)
    wire = np.dtype(np.int32) if int(starts[-1]) <= _INT32_MAX else np.dtype(np.int64)
    route = Routing(comm, owners(starts, r))
    idx = route.send(r, wire)
    vals = route.send(v, vdt)
    del route
    r0, nloc = int(starts[rank]), int(starts[rank + 1] - starts[rank])
    idx -= wire.type(r0)

    def local():
        out = np.zeros(nloc, dtype=vdt)
        if mode == "insert":
            keep = _last_wins(idx)
            out[idx[keep]] = vals[keep]
        else:  # the coalescing kernels: duplicates summed in their order, in the values' own dtype
            c = sparse_coo_tensor(idx[None, :], vals, size=(nloc,), check_invariants=False).coalesce()
            out[c.indices()[0]] = c.values()
        return out

    return agree(comm, local)
