"""Device index arrays that another library may write: taken without a copy (DLPack,
``__cuda_array_interface__``) or handed out through either. A check made before such a write
is not trusted: every op checks the indices again, so an index changed in place to a value
out of bounds (or a compressed index that decreases) raises InvariantError instead of reading
or writing outside the arrays. Arrays that were never shared keep the result of their check.

Runs on a GPU or on the kernel emulator (see test_cuda.py); the foreign library's write is a
copy to the exported pointer.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st
from sparsetensor.cuda._array import DeviceArray

from cuda_support import backend, rng  # noqa: F401 (the fixtures)
from cuda_support import CAIOnly, assert_same


def _d(a):
    return DeviceArray.from_host(np.asarray(a, np.float64))


def _tensor(layout):
    if layout == "coo":
        return st.sparse_coo_tensor(np.array([[0, 1, 2, 3], [0, 2, 1, 1]]), np.arange(1.0, 5.0), size=(4, 3))
    if layout == "bsr":
        return st.sparse_bsr_tensor(np.array([0, 2, 3, 3, 4]), np.array([0, 2, 1, 1]), np.ones((4, 2, 1)),
                                    size=(8, 3))
    maker = st.sparse_csr_tensor if layout == "csr" else st.sparse_csc_tensor
    return maker(np.array([0, 2, 3, 3, 4]), np.array([0, 2, 1, 1]), np.arange(1.0, 5.0),
                 size=(4, 3) if layout == "csr" else (3, 4))


def _write(arr: DeviceArray, values, how: str = "cai") -> None:
    """Another library writes ``values`` into the memory ``arr`` handed it (through
    ``__cuda_array_interface__``, or its raw pointer ``.ptr``)."""
    ptr = arr.__cuda_array_interface__["data"][0] if how == "cai" else arr.ptr
    arr._device.copy_htod(ptr, np.ascontiguousarray(np.asarray(values, arr.dtype)))


OPS = {
    "mv": lambda t: st.matmul(t, _d(np.ones(t.shape[1]))),
    "mm": lambda t: st.matmul(t, _d(np.ones((t.shape[1], 40)))),
    "to_dense": lambda t: t.to_dense(),
    "spgemm": lambda t: st.matmul(t, st.transpose(t, 0, 1)),
    "add": lambda t: t + t,
    "mul": lambda t: t * t,
    "maximum": lambda t: st.maximum(t, t),
    "sum1": lambda t: st.sum(t, 1),
    "softmax": lambda t: st.softmax(t, 1),
    "to_coo": lambda t: t.to_sparse_coo().to_dense(),
    "to_csc": lambda t: t.to_sparse_csc().to_dense(),
    "index_select": lambda t: st.index_select(t, 1, np.array([0, 1])).to_dense(),
    "narrow": lambda t: st.narrow(t, 1, 1, 2).to_dense(),
    "cat": lambda t: st.cat([t, t], 1).to_dense(),
    "cat_after": lambda t: st.cat([_tensor(t.layout.name).cuda(), t], 0).to_dense(),  # offsets hide a bad index
    "mask": lambda t: st.sparse_mask(_d(np.ones(t.shape)), t).to_dense(),
    "mul_dense": lambda t: (t * _d(np.ones(t.shape))).to_dense(),
    "dense_sparse": lambda t: st.matmul(_d(np.ones((2, t.shape[0]))), t),
}


@pytest.mark.parametrize("layout,member,bad", [
    ("csr", "plain", [0, 2, 1, 1 << 40]), ("csr", "compressed", [0, 2, 1 << 40, 3, 4]),
    ("csr", "compressed", [0, 3, 1, 3, 4]), ("csc", "plain", [0, -5, 1, 1]), ("bsr", "plain", [0, 2, 1, 1 << 40]),
    ("bsr", "compressed", [0, 2, 1 << 40, 3, 4]), ("coo", "indices", [[0, 1, 2, 3], [0, 2, 1, 1 << 40]]),
    ("coo", "indices", [[0, 1, -2, 3], [0, 2, 1, 1]])], ids=lambda x: str(x)[:12])
@pytest.mark.parametrize("how", ["cai", "ptr"])
def test_an_index_changed_after_sharing_raises(backend, layout, member, bad, how):
    """Handing out the raw pointer (``DeviceArray.ptr``) shares the memory as an export does."""
    for name, op in OPS.items():
        t = _tensor(layout).cuda()
        assert t.to_dense().get().sum() > 0  # checked, and used
        arr = {"plain": lambda: t._plain, "compressed": lambda: t._compressed, "indices": lambda: t._indices}[member]()
        _write(arr, bad, how)
        with pytest.raises(st.InvariantError):
            r = op(t)
            r.get()  # noqa: B018 - the op must raise before any result is read


def test_a_valid_change_after_sharing_is_seen(backend):
    """Indices rewritten in bounds (another pattern): the ops compute with the new ones."""
    t = _tensor("csr").cuda()
    t.to_dense()
    _write(t._plain, [2, 0, 1, 0])  # rows reversed: unsorted, so the op repairs (5.6) as from scratch
    want = st.sparse_csr_tensor(np.array([0, 2, 3, 3, 4]), np.array([2, 0, 1, 0]), np.arange(1.0, 5.0), size=(4, 3),
                                check_invariants=False)
    np.testing.assert_array_equal(t.to_dense().get(), want.to_dense())
    np.testing.assert_array_equal(st.matmul(t, _d(np.arange(3.0))).get(), st.matmul(want, np.arange(3.0)))


@pytest.mark.parametrize("N", [1, 3], ids=["mv", "mm"])
def test_long_rows_follow_a_change_after_sharing(backend, rng, N):
    """SpMV and SpMM take rows longer than a threshold (SpMV's is 64 here) apart: by a plan of
    which rows those are, kept for our own indices, or listed on the device by the product itself
    for indices another library holds, so rows that grow long (or short) there are summed."""
    n, K = 80, 2000
    long_rows = np.zeros(n, np.int64)
    long_rows[[1, 4]] = 1200, 700
    long_rows[10:30] = 1
    other = np.full(n, 6)
    other[:15] = 100
    other[15:45] += 1
    patterns = [long_rows, other, np.full(n, 24), long_rows]  # 1920 entries each (SpMV's threshold: 64)
    x = rng.standard_normal((K, N) if N > 1 else K)
    t = None
    for lens in patterns:
        crow = np.concatenate([[0], np.cumsum(lens)])
        col = np.concatenate([np.sort(rng.choice(K, k, replace=False)) for k in lens])
        want = st.matmul(st.sparse_csr_tensor(crow, col, np.arange(col.size, dtype=np.float64), size=(n, K)), x)
        if t is None:  # our tensor, whose index arrays another library holds from here on
            t = st.sparse_csr_tensor(crow, col, np.arange(col.size, dtype=np.float64), size=(n, K)).cuda()
            t.crow_indices().__dlpack__()
            t.col_indices().__dlpack__()
        _write(t._compressed, crow)
        _write(t._plain, col)
        np.testing.assert_allclose(st.matmul(t, _d(x)).get(), want, rtol=1e-12)


@pytest.mark.parametrize("N", [1, 3, 130], ids=["mv", "mm", "mm2groups"])
def test_long_rows_of_unknown_indices_are_not_waited_for(backend, rng, N, monkeypatch):
    """A product whose long rows the host does not know (indices another library holds, trusted by
    the call that checked them; a csc matrix, transposed for this one product) lists them on the
    device: nothing is read to the host (no wait for the device), and the result is the CPU's."""
    from sparsetensor.torch._function import _checked_now

    n, K = 70, 1500
    lens = np.full(n, 3)
    lens[[2, 9, 40]] = 1400, 600, 70  # past SpMV's threshold (32 here), two past SpMM's (512)
    crow = np.concatenate([[0], np.cumsum(lens)])
    col = np.concatenate([np.sort(rng.choice(K, k, replace=False)) for k in lens])
    host = st.sparse_csr_tensor(crow, col, rng.standard_normal(col.size), size=(n, K))
    x = rng.standard_normal((K, N) if N > 1 else K)
    reads = []
    real_get = DeviceArray.get
    monkeypatch.setattr(DeviceArray, "get", lambda self: reads.append(1) or real_get(self))
    t = host.cuda()
    for m in (t._compressed, t._plain):
        m.__cuda_array_interface__  # noqa: B018 - handed out: another library holds the indices
    t.check_invariants()  # the conversion's check
    csc = host.to_sparse_csc().cuda()  # transposed to csr for the product: new indices, used once
    csc.check_invariants()
    xd = _d(x)
    reads.clear()
    with _checked_now([t]):
        y = st.matmul(t, xd)
    y_csc = st.matmul(csc, xd)
    assert not reads
    np.testing.assert_allclose(y.get(), st.matmul(host, x), rtol=1e-12)
    np.testing.assert_allclose(y_csc.get(), st.matmul(host, x), rtol=1e-12)


def test_trust_follows_sharing(backend):
    """A checked tensor keeps its check until an index member is shared; members taken from
    another library are shared from the start; values may be shared freely."""
    t = _tensor("csr").cuda()
    t.check_invariants()
    assert t.is_coalesced()
    t.values().__cuda_array_interface__  # noqa: B018 - the values: no index is exposed
    assert t.is_coalesced()
    t.col_indices().__dlpack__()  # handed out
    assert not t.is_coalesced()
    t.check_invariants()  # a check holds only until the next op
    assert not t.is_coalesced()
    c = _tensor("csr")
    crow, col = DeviceArray.from_host(c.crow_indices()), DeviceArray.from_host(c.col_indices())
    u = st.sparse_csr_tensor(CAIOnly(crow), CAIOnly(col), _d(c.values()), size=c.shape)
    assert u.col_indices()._shared and not u.is_coalesced()
    assert_same(u.to_sparse_coo(), c.to_sparse_coo())
    coo = _tensor("coo").cuda().coalesce()
    assert coo._checked
    coo.indices().__cuda_array_interface__  # noqa: B018
    assert coo.is_coalesced() and not coo._checked  # still sorted by its flag; its bounds are checked again


def test_a_passing_scan_is_kept_unless_shared(backend):
    """An unchecked compressed tensor is scanned by its first product, and the result is kept on
    it (the CPU's ensure_valid keeps it too): the next product launches no validation kernel. One
    whose index arrays another library holds is scanned by every product."""
    from sparsetensor.cuda._module import profile

    c = _tensor("csr")
    x = _d(np.ones(c.shape[1]))
    t = st.sparse_csr_tensor(DeviceArray.from_host(c.crow_indices()), DeviceArray.from_host(c.col_indices()),
                             _d(c.values()), size=c.shape, check_invariants=False)
    assert not t.is_coalesced()
    for first in (True, False):
        with profile() as kernels:
            y = st.matmul(t, x)
        assert ("compressed_plain" in kernels) == first, sorted(kernels)
        np.testing.assert_array_equal(y.get(), c.to_dense() @ np.ones(c.shape[1]))
    assert t.is_coalesced()
    t.col_indices().__dlpack__()  # handed out: every product scans again
    for _ in range(2):
        with profile() as kernels:
            st.matmul(t, x)
        assert "compressed_plain" in kernels, sorted(kernels)


def test_an_unchecked_coalesced_claim_is_checked_before_use(backend):
    """A coo built with is_coalesced=True and check_invariants=False: its bounds are checked by the
    first op that addresses memory with them (the flag says sorted, not in bounds)."""
    t = st.sparse_coo_tensor(np.array([[0, 1, 2], [1, 9, 0]]), np.ones(3), size=(3, 3), is_coalesced=True,
                             check_invariants=False).cuda()
    for op in (lambda x: x.to_dense(), lambda x: st.matmul(x, _d(np.ones(3))), lambda x: x.to_sparse_csr(),
               lambda x: x * x, lambda x: st.maximum(x, x), lambda x: st.sum(x, 0), lambda x: x.diagonal(),
               lambda x: st.index_select(x, 1, np.array([0, 1]))):
        with pytest.raises(st.InvariantError, match="C5"):
            op(t)


@pytest.mark.parametrize("layout", ["csr", "bsr", "coo"])
def test_a_bridge_call_trusts_the_check_it_made(backend, layout, monkeypatch):
    """sparsetensor.torch checks a CUDA tensor torch holds as it converts it and runs the op at once:
    the op does not scan the shared indices again (no read of a scan's report). Tensors the op
    derives, and the tensor after the call (torch may write its indices before the backward), are
    scanned again; a tensor that was never checked is checked by the op."""
    from sparsetensor.torch._function import _checked_now

    reads = []
    real_get = DeviceArray.get
    monkeypatch.setattr(DeviceArray, "get", lambda self: reads.append(1) or real_get(self))

    def shared(t):
        for m in (t._indices,) if layout == "coo" else (t._compressed, t._plain):
            m.__cuda_array_interface__  # noqa: B018 - handed out: another library holds the indices
        return t

    t = shared(_tensor(layout).coalesce().cuda())
    t.check_invariants()  # the conversion's check
    want = _tensor(layout).to_dense()
    x = _d(np.ones(t.shape[1]))
    reads.clear()
    with _checked_now([t, 3.0]):
        y = st.matmul(t, x)
        assert not reads or layout == "coo"  # (coo -> csr reads where its rows start: not a scan)
        assert t._validated
        derived = t * 2.0  # shares the indices; this call did not check it
    np.testing.assert_array_equal(y.get(), want @ np.ones(t.shape[1]))
    reads.clear()
    y2 = st.matmul(derived, x)
    assert reads  # scanned
    reads.clear()
    assert not t._validated
    y3 = st.matmul(t, x)
    assert reads  # after the call: scanned again
    np.testing.assert_array_equal(y2.get(), 2 * (want @ np.ones(t.shape[1])))
    np.testing.assert_array_equal(y3.get(), want @ np.ones(t.shape[1]))
    bad = shared(_tensor(layout).cuda())
    if layout == "coo":
        bad._checked = False
    else:
        bad._canonical = False
    _write(bad._indices if layout == "coo" else bad._plain,
           [[0, 1, 2, 3], [0, 2, 1, 1 << 40]] if layout == "coo" else [0, 2, 1, 1 << 40])
    with _checked_now([bad]), pytest.raises(st.InvariantError):
        st.matmul(bad, x).get()


def _same_nnz_patterns(rng, batch, rows, cols, lens):
    """(compressed, plain) of ``batch`` matrices with rows of ``lens`` entries (sorted, distinct)."""
    crow = np.broadcast_to(np.concatenate([[0], np.cumsum(lens)]), batch + (rows + 1,)).copy()
    col = np.stack([np.concatenate([np.sort(rng.choice(cols, k, replace=False)) for k in lens])
                    for _ in range(int(np.prod(batch)))]).reshape(batch + (int(lens.sum()),))
    return crow, col


@pytest.mark.parametrize("layout,batch", [("csr", ()), ("csc", (2,)), ("bsr", ()), ("bsc", (2,))])
def test_a_shared_transpose_is_kept_while_unchanged(backend, rng, layout, batch, monkeypatch):
    """A product transposes a csc/bsc matrix (and a csr matrix's transpose view: the cotangent
    A^T G of a backward) on the device. For index arrays another library holds (each use, new views
    of its memory, as a conversion from torch makes them), a copy of the arrays and their transpose
    are kept from their second product on; the check every op makes of such arrays compares them
    with the copy in the same read, and the transpose is used again (no sort) while they are
    unchanged. The result is the CPU's after the library writes new values, another pattern of as
    many entries, or the same pattern again."""
    from sparsetensor._backend.cuda import _validate
    from sparsetensor._core._tensor import CompressedTensor
    from sparsetensor.cuda._module import profile

    rows, cols = 40, 30
    blocks = (2, 3) if layout in ("bsr", "bsc") else (1, 1)
    lens = rng.integers(0, 6, rows)
    lens[3] = 12
    major, minor = (rows, cols) if layout in ("csr", "bsr") else (cols, rows)
    nnz_lens = lens[:major]
    patterns = [_same_nnz_patterns(rng, batch, major, minor, nnz_lens) for _ in range(2)]
    nnz = int(nnz_lens.sum())
    vshape = batch + (nnz,) + ((blocks if layout in ("bsr", "bsc") else ()))
    shape = batch + (major * blocks[0], minor * blocks[1]) if layout in ("csr", "bsr") else \
        batch + (minor * blocks[0], major * blocks[1])
    L = {"csr": st.sparse_csr, "csc": st.sparse_csc, "bsr": st.sparse_bsr, "bsc": st.sparse_bsc}[layout]
    held = CompressedTensor(*(DeviceArray.from_host(a) for a in patterns[0]), _d(rng.standard_normal(vshape)), shape,
                            L, True)
    for m in (held._compressed, held._plain, held._values):
        m.__cuda_array_interface__  # noqa: B018 - handed out: another library holds them

    def view(a):
        return DeviceArray(a._owner, a.ptr, a.shape, a.dtype, a._device, True)

    sorts = []
    current = 0
    for step in range(11):
        if step == 8:  # more than the snapshots may hold: none is kept
            monkeypatch.setattr(_validate, "_SNAPSHOT_BYTES", 2 * (held._compressed.nbytes + held._plain.nbytes))
            _validate._snapshots.clear()
        if step == 4:
            current = 1  # another pattern
        if step in (4, 6, 7):
            _write(held._compressed, patterns[current][0])
            _write(held._plain, patterns[current][1])
        vals = rng.standard_normal(vshape)
        _write(held._values, vals)
        t = CompressedTensor(view(held._compressed), view(held._plain), view(held._values), shape, L, False)
        host = CompressedTensor(patterns[current][0], patterns[current][1], vals, shape, L, True)
        if layout in ("csr", "bsr"):  # the transpose view's product: A^T G
            t, host = t.mT, host.mT
        x = rng.standard_normal(batch + (shape[-2] if layout in ("csr", "bsr") else shape[-1], 3))
        with profile() as kernels:
            y = st.matmul(t, _d(x))
        sorts.append(sum(n for name, (n, _) in kernels.items() if "radix" in name or "sort" in name))
        np.testing.assert_allclose(y.get(), st.matmul(host, x), rtol=1e-12, atol=1e-12)
    # the first product marks the arrays, the second keeps; a new pattern is sorted and kept again,
    # the same pattern written again (steps 6 and 7: unchanged) is not; nothing is kept past the bound
    assert [bool(s) for s in sorts] == [True, True, False, False, True, False, False, False, True, True, True], sorts
    assert len(_validate._snapshots) <= _validate._SNAPSHOTS


@pytest.mark.parametrize("layout,via", [("csr", ""), ("csc", ""), ("bsr", ""), ("csr", "coo"), ("coo", "")])
@pytest.mark.parametrize("bad", [-1, 3, 1 << 40])
def test_to_dense_never_writes_outside_for_privately_written_indices(backend, layout, via, bad):
    """An index written behind the tensor's back (memory the library never handed out: the check
    is still trusted): to_dense (of the tensor, or of the coo made from it, which trusts the
    same check) skips the entry instead of writing outside its output (the sanitizer run of CI
    would see such a write) and keeps the others, or raises (a coo's to_dense checks first)."""
    t = _tensor(layout).cuda()
    t.check_invariants()
    want = t.to_dense().get()
    arr = t.indices() if layout == "coo" else t.plain_indices()
    host = arr.get()
    (host[-1] if layout == "coo" else host)[0] = bad
    arr._device.copy_htod(arr._ptr, np.ascontiguousarray(host))  # not .ptr: that would share it
    try:
        got = (t.to_sparse_coo() if via else t).to_dense().get()
    except st.InvariantError:
        assert layout == "coo"
        return
    first = np.zeros_like(want, bool)  # the elements entry 0 wrote
    first[0:2 if layout == "bsr" else 1, 0] = True
    assert (got[~first] == want[~first]).all() and (got[first] == 0).all()
