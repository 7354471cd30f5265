"""sparsetensor tensors as Dask chunks (sparsetensor.dask, sparsetensor.interop.chunk).

Every result is compared with the single-process sparsetensor result (and that with NumPy):
first with the synchronous scheduler, then on a ``distributed.LocalCluster`` of 2 worker
processes (a few tests; module-scoped cluster).
"""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import sparsetensor as st  # noqa: E402
import sparsetensor.dask  # noqa: E402,F401
from sparsetensor.interop.chunk import rebuild  # noqa: E402

from conftest import INDEX_DTYPES, random_dense  # noqa: E402

CASES = [("csr", (1, 1)), ("csc", (1, 1)), ("coo", (1, 1)), ("bsr", (2, 2)), ("bsc", (2, 2))]
DTYPES = [np.float64, np.float32, np.complex128]


def make(layout, blocksize=(1, 1), dtype=np.float64, index_dtype=np.int64, blocks=(20, 6), seed=0):
    rng = np.random.default_rng(seed)
    a = random_dense(rng, blocks=blocks, blocksize=blocksize, dtype=dtype, nnz=blocks[0] * blocks[1] // 3)
    kw = {"blocksize": blocksize} if layout in ("bsr", "bsc") else {}
    return st.from_dense(a, layout, **kw).to(index_dtype=index_dtype), a


def dense(x):
    return x.to_dense() if isinstance(x, st.SparseTensor) else np.asarray(x)


@pytest.fixture
def sync():
    with dask.config.set(scheduler="sync"):
        yield


def test_import_sparsetensor_does_not_import_dask():
    code = "import sys, sparsetensor; assert not any(m == 'dask' or m.startswith('dask.') for m in sys.modules)"
    subprocess.run([sys.executable, "-P", "-c", code], check=True)  # -P: never the source tree


@pytest.mark.parametrize("layout,blocksize", CASES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ops_equal_single_process(sync, layout, blocksize, index_dtype, dtype):
    t, a = make(layout, blocksize, dtype, index_dtype)
    x = st.dask.from_sparse(t, chunks=(10, -1))
    assert x._meta.layout == t.layout and x._meta.dtype == t.dtype and x._meta.index_dtype == t.index_dtype
    assert x._meta.shape == (0, 0)
    d = np.arange(a.shape[1] * 3, dtype=dtype).reshape(a.shape[1], 3) / 7
    dd = da.from_array(d, chunks=(4, 3))
    tol = dict(rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(np.asarray((x @ dd).compute()), np.asarray(t @ d), **tol)
    np.testing.assert_allclose(np.asarray((x @ dd).compute()), a @ d, **tol)
    got = (x + x).compute()
    assert isinstance(got, st.SparseTensor)
    np.testing.assert_array_equal(got.to_dense(), (t + t).to_dense())
    got = (x * 2).compute()
    assert got.layout == t.layout
    np.testing.assert_array_equal(got.to_dense(), 2 * a)
    for axis in (0, 1):
        np.testing.assert_allclose(dense(x.sum(axis=axis).compute()), dense(t.sum(axis=axis)), **tol)
    got = x.T.compute()
    np.testing.assert_array_equal(got.to_dense(), a.T)
    assert got.layout == t.T.layout
    got = x.compute()  # chunks joined by st.cat
    assert got.layout == t.layout and got.index_dtype == t.index_dtype
    np.testing.assert_array_equal(got.to_dense(), a)


@pytest.mark.parametrize("to", ["coo", "csr", "csc"])
def test_map_blocks_layout_conversion(sync, to):
    t, a = make("csr")
    x = da.from_array(t, chunks=(10, -1))
    y = x.map_blocks(lambda b: b.to_sparse(to), meta=st.dask.meta_like(t.to_sparse(to)))
    assert y._meta.layout.name == to
    got = y.compute()
    assert got.layout.name == to
    np.testing.assert_array_equal(got.to_dense(), a)


def test_from_array_default_meta(sync):
    t, a = make("csr")
    x = da.from_array(t, chunks=(7, 3))
    assert isinstance(x._meta, st.CompressedTensor)
    np.testing.assert_array_equal(x.compute().to_dense(), a)
    np.testing.assert_allclose(np.asarray((x @ np.ones(a.shape[1])).compute()), a.sum(axis=1))


def test_one_block_along_dropped_axis_is_not_copied(sync, monkeypatch):
    """map_blocks(drop_axis=...) and blockwise contractions join a single block: the chunk itself, no cat."""
    from sparsetensor.dask import _register

    t, a = make("csr")
    x = st.dask.from_sparse(t, chunks=(7, -1))
    joined = []
    monkeypatch.setattr(_register, "concatenate", lambda arrays, axis: joined.append(len(arrays)) or st.cat(arrays, axis))
    got = x.map_blocks(lambda b: np.asarray(b.sum(axis=1)).reshape(-1), drop_axis=1, dtype=np.float64).compute()
    np.testing.assert_allclose(got, a.sum(axis=1))
    assert joined == []
    assert _register._concatenate([t], axis=1) is t and _register._concatenate([t], axis=-1) is t
    np.testing.assert_array_equal(_register._concatenate([t, t], axis=-1).to_dense(), np.concatenate([a, a], axis=1))
    assert joined == [2]
    got = x.compute()  # joining the row blocks still goes through cat
    np.testing.assert_array_equal(got.to_dense(), a)
    assert joined[1:] == [3]


class _Counting:
    """A dense Dask array whose chunk function counts its calls (nothing may compute it early)."""

    calls = 0

    @classmethod
    def array(cls, shape):
        def chunk():
            cls.calls += 1
            return np.ones(shape)

        return da.from_delayed(dask.delayed(chunk)(), shape=shape, dtype=np.float64)


def test_operators_stay_lazy(sync):
    t, a = make("csr")
    _Counting.calls = 0
    d = _Counting.array((a.shape[1], 2))
    products = [t @ d, (d.T @ t.T).T]
    assert all(isinstance(r, da.Array) for r in products)
    assert _Counting.calls == 0
    for r in products:
        np.testing.assert_allclose(np.asarray(r.compute()), a @ np.ones((a.shape[1], 2)))
    e = _Counting.array(a.shape)
    _Counting.calls = 0
    for r in (t + e, e + t, t - e, e - t, t * e, e * t, t / (e + 1), np.multiply(t, e), np.add(e, t)):
        assert isinstance(r, da.Array)
    assert _Counting.calls == 0
    np.testing.assert_allclose(dense((t * e).compute()), a)
    np.testing.assert_allclose(dense(np.add(e, t).compute()), a + 1)


def test_empty_tensors(sync):
    for layout in ("csr", "csc", "coo"):
        e = st.from_dense(np.zeros((0, 0)), layout)
        assert (e @ np.zeros((0, 3))).shape == (0, 3)
        assert np.asarray(e.sum(axis=0)).shape == (0,) and np.asarray(e.sum(axis=1)).shape == (0,)
        assert st.cat([e, e]).shape == (0, 0)
        assert np.concatenate([e, e], axis=1).shape == (0, 0)
        t, a = make(layout)
        x = st.dask.from_sparse(t, chunks=(10, -1))
        assert x[:0].compute().shape == (0, a.shape[1])
        np.testing.assert_array_equal(da.concatenate([x[:0], x]).compute().to_dense(), a)


@pytest.mark.parametrize("layout,blocksize", CASES)
def test_sparse_matmul_stack_zeros_like(sync, layout, blocksize):
    """Dask's ``@`` of two sparse arrays (its chunks indexed with None, partial products added with
    np.add(..., dtype=None)), ``da.stack`` (None too), ``da.zeros_like`` of one chunk (np.broadcast_to
    of an empty tensor), and chunk edges that cut the blocks (cat falls back to csr/csc)."""
    t, a = make(layout, blocksize, blocks=(6, 4))
    for chunks in (-1, 4, (5, 7)):
        x = st.dask.from_sparse(t, chunks=chunks)
        np.testing.assert_allclose(dense((x @ x.T).compute()), a @ a.T, rtol=1e-12)
        np.testing.assert_array_equal(dense(da.stack([x, x]).compute()), np.stack([a, a]))
        z = da.zeros_like(x).compute()
        assert isinstance(z, st.SparseTensor) and z.shape == a.shape and z.nnz == 0
        # st.dask.sum of a product whose metadata Dask made an ndarray (its chunks are sparse)
        for axis in (0, 1, None):
            np.testing.assert_allclose(np.asarray(st.dask.sum(x @ x.T, axis=axis).compute()), (a @ a.T).sum(axis),
                                       rtol=1e-12)
        assert x[:, :0].max(axis=0).compute().shape == (0,)  # np.array([], like=chunk) for the empty chunks
        np.testing.assert_array_equal(dense(x.rechunk((3, 1)).compute()), a)


@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_batched_compressed_cut_along_sparse_dims(sync, layout):
    """A batched compressed tensor cut along its sparse dims has coo chunks and metadata alike (a piece
    whose batches differ in nnz cannot stay compressed), so reductions and rechunks compute; cut along
    its batch dims only, it keeps its layout."""
    a = np.zeros((2, 2, 3))
    a[0, :, 0] = [1, 2]
    a[1, :, 1] = [3, 4]
    t = st.from_dense(a, layout, batch_dim=1)
    for chunks in ((-1, -1, 1), (-1, 1, -1), (1, 1, 1)):
        x = st.dask.from_sparse(t, chunks=chunks)
        assert x._meta.layout is st.sparse_coo and x.compute().layout is st.sparse_coo
        np.testing.assert_array_equal(np.asarray(x.sum(axis=2).compute()), a.sum(2))
        np.testing.assert_array_equal(np.asarray(st.dask.sum(x, axis=(0, 2)).compute()), a.sum((0, 2)))
        np.testing.assert_array_equal(dense(x.rechunk((-1, -1, 1)).compute()), a)
    y = st.dask.from_sparse(t, chunks=(1, -1, -1))
    assert y._meta.layout.name == layout and y.compute().layout.name == layout


def test_unsupported_ops_raise_naming_them(sync):
    t, a = make("csr")
    x = st.dask.from_sparse(t, chunks=(10, -1))
    with pytest.raises((ValueError, NotImplementedError), match="add"):
        (x + 1).compute()
    with pytest.raises(ValueError, match="exp"):
        da.exp(x).compute()
    with pytest.raises(NotImplementedError, match="einsum"):
        da.einsum("ij,jk->ik", x, np.ones((a.shape[1], 2))).compute()
    with pytest.raises(ValueError, match="ones_like"):
        np.ones_like(t)
    with pytest.raises(NotImplementedError, match="concatenate.*ndarray"):
        da.concatenate([x, da.from_array(a, chunks=(10, -1))]).compute()


@pytest.mark.parametrize("layout,blocksize", CASES)
def test_comparisons_any_all_clip_where(sync, layout, blocksize):
    t, a = make(layout, blocksize)
    x = st.dask.from_sparse(t, chunks=(10, -1))
    m = x > 0.5
    assert isinstance(m._meta, st.SparseTensor) and m.dtype == np.bool_
    np.testing.assert_array_equal(dense(m.compute()), a > 0.5)
    np.testing.assert_array_equal(dense((0.25 < x).compute()), a > 0.25)
    for axis in (None, 0, 1):
        np.testing.assert_array_equal(x.any(axis=axis).compute(), a.any(axis=axis))
        np.testing.assert_array_equal((x > 0.9).all(axis=axis).compute(), (a > 0.9).all(axis=axis))
    np.testing.assert_array_equal(dense(da.clip(x, -0.5, 0.5).compute()), np.clip(a, -0.5, 0.5))
    np.testing.assert_array_equal(dense(da.where(x > 0.5, x, 0).compute()), np.where(a > 0.5, a, 0))
    with pytest.raises(ValueError, match="dense"):
        (x >= 0).compute()
    # var and std subtract the dense mean from each chunk: a dense difference (sparse - dense broadcasts)
    np.testing.assert_allclose(x.var().compute(), a.var())


@pytest.mark.parametrize("layout,blocksize", CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.complex128])
def test_st_var_and_std_equal_numpys(sync, layout, blocksize, dtype):
    rng = np.random.default_rng(1)
    a = ((rng.random((12, 8)) < 0.3) * (rng.random((12, 8)) * 10 + 100)).astype(dtype)  # a large mean
    if dtype == np.complex128:
        a = a + 1j * a[::-1]
    t = st.from_dense(a, layout, **({"blocksize": blocksize} if layout in ("bsr", "bsc") else {}))
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    for chunks in ((4, -1), (-1, 4), (4, 4)):
        x = st.dask.from_sparse(t, chunks=chunks)
        for axis in (None, 0, 1, (0, 1)):
            for ddof in (0, 1):
                got, want = st.dask.var(x, axis=axis, ddof=ddof).compute(), a.var(axis=axis, ddof=ddof)
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=rtol)
        got = st.dask.std(x, axis=1, keepdims=True).compute()
        np.testing.assert_allclose(got, a.std(axis=1, keepdims=True), rtol=rtol)
    u = st.sparse_coo_tensor([[0, 0, 1], [1, 1, 2]], [1.0, 2.0, 5.0], size=(2, 3))  # a repeat: one element, 3
    np.testing.assert_allclose(st.dask.var(st.dask.from_sparse(u, chunks=(1, 2))).compute(), u.to_dense().var())


def test_tokenize():
    from dask.base import tokenize

    t, _ = make("csr")
    assert tokenize(t) == tokenize(t.clone())
    assert tokenize(t) != tokenize(t * 2)
    assert tokenize(t) != tokenize(t.to(index_dtype=np.int32))
    assert tokenize(t) != tokenize(t.to_sparse_csc())
    tok = t.__dask_tokenize__()
    assert tok[:5] == ("sparsetensor", "csr", t.shape, t.dtype.str, t.index_dtype.str)

    class NoPickle(st.CompressedTensor):
        def __reduce__(self):
            raise AssertionError("tokenize pickled the tensor")

    u = NoPickle(t.crow_indices(), t.col_indices(), t.values(), t.shape, t.layout, True)
    assert tokenize(u) == tokenize(t)


@pytest.mark.parametrize("layout,blocksize", CASES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_pickle_round_trip_zero_copy(layout, blocksize, index_dtype):
    t, a = make(layout, blocksize, np.complex128, index_dtype)
    u = pickle.loads(pickle.dumps(t))
    assert type(u) is type(t) and u.layout == t.layout and u.index_dtype == t.index_dtype
    assert u.is_coalesced() == t.is_coalesced()
    np.testing.assert_array_equal(u.to_dense(), a)
    buffers = []
    data = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    members = [m for m in (t.values(),)]
    assert any(np.shares_memory(np.frombuffer(b.raw(), np.uint8), m) for b in buffers for m in members)
    assert len(data) < 1000  # the members went out of band: only names and flags in the stream
    v = pickle.loads(data, buffers=buffers)
    np.testing.assert_array_equal(v.to_dense(), a)
    assert sys.getsizeof(t) >= sum(m.nbytes for m in (t.values(),))


def test_unpickled_tensor_is_checked():
    t, _ = make("csr")
    bad_cols = t.col_indices().copy()
    bad_cols[0] = 10_000  # out of bounds
    # a tensor the sender had validated: the full check runs on arrival
    with pytest.raises(st.InvariantError) as e:
        rebuild("csr", t.shape, (t.crow_indices(), bad_cols, t.values()), True, True)
    assert e.value.invariant == "5.5"
    # one it had never checked arrives never checked, and its first kernel checks it
    u = rebuild("csr", t.shape, (t.crow_indices(), bad_cols, t.values()), False, False)
    assert not u.is_coalesced()
    with pytest.raises(st.InvariantError):
        u @ np.ones(t.shape[1])
    # the O(1) checks always run
    with pytest.raises((st.InvariantError, ValueError)):
        rebuild("csr", t.shape, (t.crow_indices()[:-1], t.col_indices(), t.values()), False, False)
    with pytest.raises(st.InvariantError):
        rebuild("coo", (3, 3), (np.array([[0, 5], [0, 1]]), np.ones(2)), True, True)


def test_distributed_serialize_zero_copy():
    protocol = pytest.importorskip("distributed.protocol")
    t, a = make("csr")
    header, frames = protocol.serialize(t)
    assert any(np.shares_memory(np.frombuffer(f, np.uint8), t.values()) for f in frames if len(f))
    u = protocol.deserialize(header, frames)
    np.testing.assert_array_equal(u.to_dense(), a)


def _mapped(arr):
    while arr is not None:
        if isinstance(arr, np.memmap):
            return True
        arr = arr.base
    return False


@pytest.mark.parametrize("layout,blocksize", [("csr", (1, 1)), ("csc", (1, 1)), ("bsr", (2, 2)), ("bsc", (2, 2))])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_load_reads_blocks(sync, tmp_path, layout, blocksize, index_dtype):
    t, a = make(layout, blocksize, np.float32, index_dtype)
    path = tmp_path / "m.npz"
    st.save(path, t)
    chunks = (10, -1) if layout in ("csr", "bsr") else (-1, 4)
    x = st.dask.load(path, chunks=chunks)
    assert x._meta.layout == t.layout and x._meta.index_dtype == t.index_dtype
    assert x.numblocks == ((-(-a.shape[0] // 10), 1) if layout in ("csr", "bsr") else (1, -(-a.shape[1] // 4)))
    from dask.local import get_sync

    keys = x.__dask_keys__()
    block = get_sync(x.__dask_graph__(), keys[1][0] if layout in ("csr", "bsr") else keys[0][1])  # a chunk as is
    assert block.nnz and _mapped(block.values())  # mapped from the file, not read
    np.testing.assert_array_equal(x.compute().to_dense(), a)
    d = np.linspace(0, 1, a.shape[1] * 2, dtype=np.float32).reshape(a.shape[1], 2)
    np.testing.assert_allclose(np.asarray((x @ d).compute()), np.asarray(t @ d), rtol=1e-5)
    assert x.name == st.dask.load(path, chunks=chunks).name  # deterministic keys


def test_load_errors(sync, tmp_path):
    t, _ = make("bsr", (2, 2))
    st.save(tmp_path / "b.npz", t)
    with pytest.raises(ValueError, match="multiples of its blocksize 2"):
        st.dask.load(tmp_path / "b.npz", chunks=(5, -1))
    st.save(tmp_path / "c.npz", t.to_sparse_coo())
    with pytest.raises(NotImplementedError, match="coo"):
        st.dask.load(tmp_path / "c.npz")
    # a file whose second row block is broken: that task raises, naming the file
    c, p, v = t.to_sparse_csr().crow_indices(), t.to_sparse_csr().col_indices().copy(), t.to_sparse_csr().values()
    p[-1] = 10_000
    with st.check_invariants(False):
        st.save(tmp_path / "bad.npz", st.sparse_csr_tensor(c, p, v, size=t.shape))
    x = st.dask.load(tmp_path / "bad.npz", chunks=(20, -1))
    x.blocks[0].compute()  # the first block is fine
    with pytest.raises(st.InvariantError, match="bad.npz"):
        x.blocks[1].compute()
    # the file replaced by a smaller matrix after the graph was built: its chunks no longer exist
    y = st.dask.load(tmp_path / "b.npz", chunks=(20, -1))
    st.save(tmp_path / "b.npz", st.from_dense(np.eye(4), "bsr", blocksize=(2, 2)))
    with pytest.raises(ValueError, match="changed since it was loaded"):
        y.blocks[1].compute()


# -- st.dask.sum: the aggregation of dense partial sums --------------------------------------------------
@pytest.mark.parametrize("layout,blocksize", [c for c in CASES if c[0] != "coo"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.int32])
@pytest.mark.parametrize("chunks,split_every", [((10, -1), None), ((4, 4), None), ((2, 2), 2), ((6, 12), {0: 3, 1: 2})])
def test_st_sum_equals_single_process(sync, layout, blocksize, dtype, chunks, split_every):
    t, a = make(layout, blocksize, dtype, np.int32)
    x = st.dask.from_sparse(t, chunks=chunks)
    for axis in (0, 1, -1, None, (0, 1), (1, 0)):
        for keepdims in (False, True):
            got = st.dask.sum(x, axis=axis, keepdims=keepdims, split_every=split_every)
            want = np.asarray(t.sum(axis=axis, keepdim=keepdims))
            assert got.shape == want.shape and got.dtype == want.dtype, (axis, keepdims)
            r = got.compute()
            assert type(r) is np.ndarray and r.shape == want.shape and r.dtype == want.dtype
            if dtype == np.int32:
                np.testing.assert_array_equal(r, want)
                np.testing.assert_array_equal(r, a.sum(axis=axis, keepdims=keepdims))
            else:
                np.testing.assert_allclose(r, want, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(r, np.asarray(x.sum(axis=axis, keepdims=keepdims).compute()), rtol=1e-12,
                                           atol=1e-12)


@pytest.mark.skipif(os.environ.get("DASK_ARRAY__QUERY_PLANNING") == "True", reason="this is the subprocess")
def test_st_sum_query_planning():
    """The st.dask.sum tests again with ``array.query-planning`` on (a fresh process: Dask reads it once)."""
    env = dict(os.environ, DASK_ARRAY__QUERY_PLANNING="True")
    r = subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "st_sum and not query_planning"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]


def test_st_sum_dtype_and_errors(sync):
    t, a = make("csr", dtype=np.int32)
    x = st.dask.from_sparse(t, chunks=(5, 3))
    got = st.dask.sum(x, axis=0, dtype=np.float32)
    assert got.dtype == np.float32 and got.compute().dtype == np.float32
    np.testing.assert_allclose(got.compute(), a.sum(axis=0).astype(np.float32))
    assert st.dask.sum(x, axis=1).dtype == np.int64
    with pytest.raises(np.exceptions.AxisError):
        st.dask.sum(x, axis=2)
    with pytest.raises(ValueError, match="repeats"):
        st.dask.sum(x, axis=(0, 0))


def test_st_sum_graph(sync, monkeypatch):
    """One task per block when the summed axis has one block; the partials are added, never joined."""
    t, a = make("csr", blocks=(24, 6))
    x = st.dask.from_sparse(t, chunks=(4, -1))
    s1 = st.dask.sum(x, axis=1)
    assert s1.numblocks == (6,)
    assert not any("aggregate" in str(k) or "partial" in str(k) for k in dict(s1.__dask_graph__()))
    s0 = st.dask.sum(x, axis=0, split_every=2)
    joined = []
    real = np.concatenate
    monkeypatch.setattr(np, "concatenate", lambda *args, **kw: joined.append(1) or real(*args, **kw))
    np.testing.assert_allclose(s0.compute(), a.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(s1.compute(), a.sum(axis=1), rtol=1e-12)
    assert not joined
    parts = [np.ones((1, 3)), np.full((1, 3), 2.0), np.full((1, 3), 4.0)]
    from sparsetensor.dask._reduce import _add
    np.testing.assert_array_equal(_add([parts[:2], [parts[2]]], axis=(0,), keepdims=False), [7.0, 7.0, 7.0])
    np.testing.assert_array_equal(parts[0], 1.0)  # the inputs are not written
    assert _add([parts[1]], axis=(0,), keepdims=True) is parts[1]


def test_st_sum_sparse_partials_are_x_sum(sync):
    """coo chunks whose sum keeps a sparse dim: st.dask.sum is x.sum (a sparse result)."""
    t, a = make("coo")
    x = st.dask.from_sparse(t, chunks=(10, -1))
    got = st.dask.sum(x, axis=0)
    r = got.compute()
    want = x.sum(axis=0).compute()
    assert type(r) is type(want)
    np.testing.assert_allclose(dense(r), dense(want), rtol=1e-12)
    np.testing.assert_allclose(dense(r), a.sum(axis=0), rtol=1e-12)


# -- on a cluster: 2 worker processes ---------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
                                  worker_dashboard_address=":0") as cluster, distributed.Client(cluster) as c:
        yield c


def test_cluster_spmm_sum_cat(client):
    t, a = make("csr", index_dtype=np.int32, blocks=(200, 60), seed=3)
    x = st.dask.from_sparse(t, chunks=(50, -1))
    d = np.random.default_rng(1).random((a.shape[1], 4))
    dd = da.from_array(d, chunks=(30, 4))
    np.testing.assert_allclose(np.asarray((x @ dd).compute()), np.asarray(t @ d), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(x.sum(axis=0).compute()), np.asarray(t.sum(axis=0)), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(x.sum(axis=1).compute()), np.asarray(t.sum(axis=1)), rtol=1e-12)
    got = (x + x).compute()
    assert isinstance(got, st.CompressedTensor) and got.index_dtype == np.int32
    np.testing.assert_array_equal(got.to_dense(), 2 * a)
    np.testing.assert_allclose(st.dask.sum(x, axis=0, split_every=2).compute(), np.asarray(t.sum(axis=0)),
                               rtol=1e-12)
    np.testing.assert_allclose(st.dask.sum(x, axis=1).compute(), np.asarray(t.sum(axis=1)), rtol=1e-12)
    y = x.persist()  # chunks live on the workers, travel between them and back
    np.testing.assert_array_equal(y.T.compute().to_dense(), a.T)


def test_cluster_load(client, tmp_path):
    t, a = make("csr", blocks=(200, 60), seed=4)
    st.save(tmp_path / "m.npz", t)
    x = st.dask.load(tmp_path / "m.npz", chunks=(64, -1))
    d = np.ones((a.shape[1], 2))
    np.testing.assert_allclose(np.asarray((x @ d).compute()), a @ d, rtol=1e-12)
    np.testing.assert_array_equal(x.compute().to_dense(), a)


@pytest.mark.parametrize("name", ["sparsetensor.interop.chunk", "sparsetensor.dask", "sparsetensor.dask._array",
                                  "sparsetensor.dask._meta", "sparsetensor.dask._reduce"])
def test_doctests(name):
    """The examples in the docstrings of the Dask modules (here, not in test_docs.py: they need dask)."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0, f"{result.failed} doctest(s) failed in {name}"


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
def test_batch_dim_blocks_partial_sums_joined(layout):
    """Dask joins the blocks' partial sums along the batch dim: batches of different nnz become COO."""
    a = np.zeros((4, 2, 4))
    a[0, 0, 0], a[1, 1, 1], a[2, 0, 2], a[3, 0, 2] = 1.0, 2.0, 3.0, 4.0  # one entry per batch
    t = st.from_dense(a, layout, batch_dim=1, blocksize=(1, 1) if layout == "bsr" else None)
    x = st.dask.from_sparse(t, chunks=(2, 2, 4))  # the partial sums hold 2 and 1 entries
    for axis in (0, (0, 2)):
        got = x.sum(axis=axis).compute()
        np.testing.assert_allclose(got.to_dense() if isinstance(got, st.SparseTensor) else got, a.sum(axis=axis))
    y = st.dask.from_sparse(st.from_dense(a.reshape(8, 4), "csr"), chunks=(4, -1)).reshape(4, 2, 4)
    np.testing.assert_allclose(y.sum(axis=0).compute().to_dense(), a.sum(axis=0))


def test_fuzz_findings_of_sparse_chunks():
    """Computations on sparse chunks that failed where the in-memory tensor and dense Dask chunks
    work (a fuzz against both): a bsc product whose chunk edges cut blocks (bsc and csc chunks
    mixed), max/min beside an empty chunk (Dask's partial of it is np.array([], like=chunk)),
    batched csr chunks joined with coo ones (their batches differ in nnz), dot with a vector
    (tensordot of a 2-d and a 1-d chunk), uint8 sums (Dask asks for uint64), bool ** 2's dtype."""
    a = np.arange(16.0).reshape(4, 4) % 5
    x = st.dask.from_sparse(st.from_dense(a, "bsc", blocksize=(2, 2)), chunks=((2, 1, 1), -1))
    np.testing.assert_allclose(dense((x @ x.T).compute(scheduler="sync")), a @ a.T)
    c = np.array([[1.0, 0, 2, 0], [0, 3, 0, -1]])
    y = st.dask.from_sparse(st.from_dense(c, "coo"), chunks=(-1, (1, 0, 3)))
    np.testing.assert_array_equal(dense(y.max(axis=0).compute(scheduler="sync")), c.max(0))
    np.testing.assert_array_equal(dense(y.min(axis=0).compute(scheduler="sync")), c.min(0))
    b = np.zeros((2, 4, 3))
    b[0, 0, 0], b[0, 3, 2], b[1, 1, 1], b[1, 2, 0] = 1, 2, 3, 4
    z = st.dask.from_sparse(st.from_dense(b, "csr", batch_dim=1), chunks=(1, -1, -1)).rechunk((-1, -1, 1))
    np.testing.assert_array_equal(dense(z.compute(scheduler="sync")), b)
    v = np.array([1.0, 2.0, 3.0, 4.0])
    w = st.dask.from_sparse(st.from_dense(c, "csr"), chunks=(1, -1))
    np.testing.assert_allclose(np.asarray(w.dot(v).compute(scheduler="sync")), c @ v)
    np.testing.assert_allclose(np.asarray(da.dot(np.ones(2), w).compute(scheduler="sync")), np.ones(2) @ c)
    u8 = np.array([[1, 0, 200], [0, 3, 100]], np.uint8)
    q = st.dask.from_sparse(st.from_dense(u8, "csr"), chunks=(1, -1))
    np.testing.assert_array_equal(dense(q.sum(axis=0).compute(scheduler="sync")), u8.sum(0))
    assert int(q.sum().compute(scheduler="sync")) == int(u8.sum())
    bo = st.dask.from_sparse(st.from_dense(np.eye(2, dtype=bool), "csr"), chunks=(1, -1)) ** 2
    assert bo.dtype == bo.compute(scheduler="sync").dtype == (np.eye(2, dtype=bool) ** 2).dtype
