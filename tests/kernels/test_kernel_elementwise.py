"""The one-pass compressed merge kernel (``_elementwise.merge_fused``) called directly: the same
result as the two-pass path (``merge_count``, prefix sums, ``merge_fill``) for unions and
intersections over batches, entry sizes, index dtypes and thread counts (parts that meet their
upper bound and parts that move down), and ValueError on mismatched arguments."""
import numpy as np
import pytest

from sparsetensor._lib import _elementwise as K

INDEX_DTYPES = [np.int32, np.int64]


def _pattern(rng, n, m, density):
    """Sorted distinct columns of n rows: (compressed (n + 1,), plain (nnz,))."""
    mask = rng.random((n, m)) < density
    return np.concatenate([[0], np.cumsum(mask.sum(1))]), np.nonzero(mask)[1]


def _operands(rng, B, n, m, E, index_dtype, density, same):
    """(compressed, plain, values) of a and b: B batches of one pattern each (one nnz per batch);
    ``same``: b's pattern is a's (every intersection meets its bound)."""
    ca, pa = _pattern(rng, n, m, density)
    cb, pb = (ca, pa) if same else _pattern(rng, n, m, density)

    def batch(c, p):
        return (np.ascontiguousarray(np.broadcast_to(c, (B, c.size)), dtype=index_dtype),
                np.ascontiguousarray(np.broadcast_to(p, (B, p.size)), dtype=index_dtype),
                rng.standard_normal((B, p.size, E)))

    return batch(ca, pa), batch(cb, pb)


def _two_pass(a, b, union, code, alpha, threads):
    (ac, ap, av), (bc, bp, bv) = a, b
    B, n = ac.shape[0], ac.shape[1] - 1
    counts = np.empty((B, n), np.int64)
    K.merge_count(ac, ap, bc, bp, union, counts, threads)
    nnz = int(counts[0].sum()) if B else 0
    oc = np.zeros((B, n + 1), ac.dtype)
    np.cumsum(counts, axis=1, out=oc[:, 1:])
    op, ov = np.empty((B, nnz), ac.dtype), np.empty((B, nnz, av.shape[2]))
    K.merge_fill(ac, ap, av, bc, bp, bv, oc, op, ov, code, union, alpha, False, threads)
    return oc, op.reshape(-1), ov.reshape(-1, av.shape[2])


def _fused(a, b, union, code, alpha, threads):
    (ac, ap, av), (bc, bp, bv) = a, b
    B, n, E = ac.shape[0], ac.shape[1] - 1, av.shape[2]
    room = B * (ap.shape[1] + bp.shape[1]) if union else B * min(ap.shape[1], bp.shape[1])
    oc = np.full((B, n + 1), -5, ac.dtype)
    op, ov = np.full(room, -5, ac.dtype), np.full((room, E), np.nan)
    total = K.merge_fused(ac, ap, av, bc, bp, bv, oc, op, ov, code, union, alpha, False, threads)
    return oc, op[:total], ov[:total]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("union,code", [(True, K.ADD), (True, K.PLUS), (True, K.MAX), (False, K.MUL),
                                        (False, K.MIN)])
@pytest.mark.parametrize("same", [True, False])
def test_merge_fused_matches_two_passes(rng, index_dtype, threads, union, code, same):
    for B, n, m, E, density in ((1, 1, 1, 1, 1.0), (1, 300, 40, 1, 0.2), (3, 200, 30, 2, 0.3), (2, 50, 9, 3, 0.5),
                                (4, 1, 64, 1, 0.4), (3, 5, 12, 1, 0.5), (2, 7, 5, 1, 0.0)):
        # (3, 5, ...): scalar rows paired across batch ends (an odd row count per batch)
        a, b = _operands(rng, B, n, m, E, index_dtype, density, same)
        alpha = 1.0 if code == K.PLUS else -2.5
        want = _two_pass(a, b, union, K.ADD if code == K.PLUS else code, alpha, threads)
        got = _fused(a, b, union, code, alpha, threads)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)


def test_merge_fused_intersection_of_disjoint_rows_writes_nothing(rng):
    ac = np.array([[0, 2, 4]], np.int64)
    ap = np.array([[0, 2, 1, 3]], np.int64)
    bp = np.array([[1, 3, 0, 2]], np.int64)
    v = np.ones((1, 4, 1))
    oc, op, ov = np.empty((1, 3), np.int64), np.empty(4, np.int64), np.empty((4, 1))
    assert K.merge_fused(ac, ap, v, ac, bp, v, oc, op, ov, K.MUL, False, 1.0, False, 2) == 0
    np.testing.assert_array_equal(oc, 0)


def test_merge_fused_batches_of_different_nnz_keep_their_own_row_pointers():
    # batch 0 intersects in 2 entries, batch 1 in 1: each batch's row pointers start at 0
    ac = np.array([[0, 2, 3], [0, 2, 3]], np.int64)
    ap = np.array([[0, 1, 1], [0, 1, 1]], np.int64)
    bp = np.array([[0, 1, 1], [0, 2, 0]], np.int64)
    v = np.arange(6, dtype=np.float64).reshape(2, 3, 1)
    oc, op, ov = np.empty((2, 3), np.int64), np.empty(6, np.int64), np.empty((6, 1))
    total = K.merge_fused(ac, ap, v, ac, bp, v, oc, op, ov, K.MUL, False, 1.0, False, 1)
    assert total == 4
    np.testing.assert_array_equal(oc, [[0, 2, 3], [0, 1, 1]])
    np.testing.assert_array_equal(op[:total], [0, 1, 1, 0])


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_merge_fused_checks_its_arguments(index_dtype):
    c = np.array([[0, 1, 2]], index_dtype)
    p = np.array([[0, 1]], index_dtype)
    v = np.ones((1, 2, 1))

    def call(oc=None, op=None, ov=None, code=K.ADD, union=True, vb=v, cb=c):
        oc = np.empty((1, 3), index_dtype) if oc is None else oc
        op = np.empty(4, index_dtype) if op is None else op
        ov = np.empty((4, 1)) if ov is None else ov
        return K.merge_fused(c, p, v, cb, p, vb, oc, op, ov, code, union, 1.0, False, 1)

    assert call() == 2
    with pytest.raises(ValueError, match="room"):
        call(op=np.empty(3, index_dtype))
    with pytest.raises(ValueError, match="room"):
        call(ov=np.empty((3, 1)))
    with pytest.raises(ValueError, match="room"):
        call(oc=np.empty((1, 2), index_dtype))
    with pytest.raises(ValueError, match="room"):  # an intersection's room is the smaller nnz
        call(union=False)
    with pytest.raises(ValueError, match="values"):
        call(vb=np.ones((1, 2, 2)))
    with pytest.raises(ValueError, match="values"):
        call(ov=np.empty((4, 0)), vb=np.ones((1, 2, 0)))
    with pytest.raises(ValueError, match="compressed indices of one shape"):
        call(cb=np.array([[0, 2]], index_dtype))
    with pytest.raises(ValueError, match="unknown op"):
        call(code=7)


@pytest.mark.parametrize("B", [1, 3])
def test_merge_fused_large_moves_in_parallel_pieces(rng, B):
    # one pattern: each union part closes up past its own length (about half its bound), in
    # parallel pieces when it holds >= 2 * 65536 entries; unrelated patterns overlap (memmove)
    for same in (True, False):
        _check_large(rng, B, same)


def _check_large(rng, B, same):
    a, b = _operands(rng, B, 6000, 200, 1, np.int32, 0.5, same)
    for union, code in ((True, K.PLUS), (False, K.MUL)):
        want = _two_pass(a, b, union, K.ADD if code == K.PLUS else code, 1.0, 1)
        for threads in (2, 3):
            for w, g in zip(want, _fused(a, b, union, code, 1.0, threads)):
                np.testing.assert_array_equal(g, w)


def _dense(c, p, v, n, m):
    """(B, n, m, E) dense array of a batched pattern (c, p, v)."""
    B, E = c.shape[0], v.shape[2]
    d = np.zeros((B, n, m, E))
    for b in range(B):
        rows = np.repeat(np.arange(n), np.diff(c[b]))
        d[b, rows, p[b]] = v[b]
    return d


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("E", [1, 3])
@pytest.mark.parametrize("union,code", [(True, K.ADD), (True, K.PLUS), (True, K.MAX), (False, K.MUL),
                                        (False, K.MIN)])
def test_merge_rows_of_one_pattern_match_dense(rng, index_dtype, threads, E, union, code):
    # rows that agree (the shortcut: indices copied, values combined in place), rows of equal
    # length that differ (in the first, a middle or the last index, past 32 bytes too) and rows
    # that differ in length, against the op on dense arrays
    n, m, B = 40, 90, 2
    ca, pa = _pattern(rng, n, m, 0.3)
    rows_a = np.split(pa, ca[1:-1])
    rows_b = []
    for i, r in enumerate(rows_a):
        r = r.copy()
        if i % 4 == 1 and r.size:  # same length, one index moved to a free column
            free = np.setdiff1d(np.arange(m), r)
            r[[0, r.size // 2, r.size - 1][i % 3]] = free[i % free.size]
            r.sort()
        elif i % 4 == 2:  # one index more
            free = np.setdiff1d(np.arange(m), r)
            r = np.sort(np.append(r, free[0]))
        rows_b.append(r)
    cb = np.concatenate([[0], np.cumsum([r.size for r in rows_b])])
    pb = np.concatenate(rows_b)

    def batch(c, p):
        return (np.ascontiguousarray(np.broadcast_to(c, (B, c.size)), dtype=index_dtype),
                np.ascontiguousarray(np.broadcast_to(p, (B, p.size)), dtype=index_dtype),
                rng.standard_normal((B, p.size, E)))

    a, b = batch(ca, pa), batch(cb, pb)
    alpha = 1.0 if code == K.PLUS else -0.5
    oc, op, ov = _fused(a, b, union, code, alpha, threads)
    da, db = _dense(*a, n, m), _dense(*b, n, m)
    expect = {K.ADD: lambda x, y: x + alpha * y, K.PLUS: lambda x, y: x + y, K.MAX: np.maximum,
              K.MUL: lambda x, y: x * y, K.MIN: np.minimum}[code](da, db)
    nnz = oc[0, -1]
    got = _dense(oc, op.reshape(B, nnz), ov.reshape(B, nnz, E), n, m)
    pattern_a = _dense(a[0], a[1], np.ones((B, a[1].shape[1], 1)), n, m)[..., 0] > 0
    pattern_b = _dense(b[0], b[1], np.ones((B, b[1].shape[1], 1)), n, m)[..., 0] > 0
    pattern = (pattern_a | pattern_b) if union else (pattern_a & pattern_b)
    got_pattern = _dense(oc, op.reshape(B, nnz), np.ones((B, nnz, 1)), n, m)[..., 0] > 0
    np.testing.assert_array_equal(got_pattern, pattern)
    for bt in range(B):
        for i in range(n):  # every output row sorted and distinct
            row = op.reshape(B, nnz)[bt, oc[bt, i]:oc[bt, i + 1]]
            assert np.all(np.diff(row) > 0)
    np.testing.assert_array_equal(got[pattern], expect[pattern])
