"""``t[key]`` against NumPy's ``a[key]`` on the dense array, over layouts x index dtypes x value
dtypes x batch/dense dims, with negative indices, steps, integer arrays and empty results."""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st

from conftest import INDEX_DTYPES, LAYOUTS, layout_tensor


def _make(layout, dtype=np.float64, index_dtype=np.int64, batch=(), dense=(), seed=0, shape=(4, 6)):
    return layout_tensor(layout, dtype, index_dtype, batch=batch, dense=dense, seed=seed, shape=shape)


def _check(t, a, key):
    ref = a[key]
    got = t[key]
    if isinstance(got, st.SparseTensor):
        got.check_invariants()
        assert got.shape == ref.shape, key
        got = got.to_dense()
    else:
        assert np.ndim(got) == np.ndim(ref), key
    assert np.asarray(got).dtype == np.asarray(ref).dtype, key
    np.testing.assert_array_equal(got, ref, err_msg=str(key))


KEYS_2D = [0, -1, 3, (1, 2), (-1, -6), (0, slice(None)), slice(1, 3), slice(None, None, 2), slice(None, None, -1),
           slice(5, 0, -2), slice(10, 20), slice(-3, None), (slice(None), slice(2, 6)), (slice(None), 1),
           (slice(None), -2), (slice(1, 4), slice(0, 6, 3)), [2, 0, -1, 2], (slice(None), [5, 1, 1]),
           (slice(None), np.array([0, 3], np.int32)), (np.array([3, 1], np.uint8),), (1, [0, 5]), ([1, 2], 3),
           [], (slice(None), []), Ellipsis, (Ellipsis, 2), (1, Ellipsis), (Ellipsis, slice(1, 3)), ()]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.bool_, np.complex64], ids=str)
def test_2d(layout, index_dtype, dtype):
    t, a = _make(layout, dtype, index_dtype)
    for key in KEYS_2D:
        _check(t, a, key)


KEYS_3D = [0, -1, (0, 1), (1, 2, 3), (slice(None), 1), (slice(None), slice(None), -1), (Ellipsis, 2),
           (Ellipsis, [1, 0]), (slice(None), [3, 0]), ([1, 0],), (slice(None, None, -1), slice(1, 3)),
           (0, [3, 1], slice(None)), (0, slice(None), 5), (1, Ellipsis, slice(0, 4, 2))]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=["i32", "i64"])
def test_batch_dims(layout, index_dtype):
    if layout == "coo":  # coo has no batch dims: three sparse dims instead
        a = np.random.default_rng(0).integers(0, 3, (2, 4, 6)).astype(float)
        t = st.from_dense(a, "coo").to(index_dtype=index_dtype)
    else:
        t, a = _make(layout, index_dtype=index_dtype, batch=(2,))
    for key in KEYS_3D:
        _check(t, a, key)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dense_dims(layout):
    t, a = _make(layout, dense=(3,))
    for key in [0, -1, (0, 1), (1, 2, 2), (1, 2, -1), (slice(None), 1), (Ellipsis, 0), (Ellipsis, [2, 0]),
                (slice(None), [3, 0]), (slice(None, None, -1), slice(1, 3)), (0, [3, 1], slice(None)),
                (slice(None), slice(None), slice(0, 3, 2)), (0, slice(None), 1)]:
        _check(t, a, key)


def test_select_on_a_batch_dim_is_a_view():
    t, a = _make("csr", batch=(2,))
    r = t[1]
    assert np.shares_memory(r.values(), t.values())
    np.testing.assert_array_equal(r.to_dense(), a[1])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_tensor(layout):
    t, a = _make(layout, shape=(0, 6) if layout not in ("bsr", "bsc") else (0, 6))
    for key in [slice(None), (slice(None), 2), (slice(None), [1, 2]), (slice(None), slice(1, 3))]:
        _check(t, a, key)
    with pytest.raises(IndexError):
        t[0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_errors(layout):
    t, a = _make(layout)
    for key in [4, -5, (0, 6), (0, -7), [0, 4], (slice(None), [6]), (slice(None), [-7]), (0, 0, 0)]:
        with pytest.raises(IndexError):
            a[key]
        with pytest.raises(IndexError):
            t[key]
    with pytest.raises(IndexError):
        t[1.5]
    with pytest.raises(NotImplementedError, match="boolean"):
        t[a > 0]
    with pytest.raises(NotImplementedError, match="boolean"):
        t[np.array([True, False, True, True])]
    with pytest.raises(NotImplementedError, match="several integer arrays"):
        t[[0, 1], [1, 2]]
    b, _ = _make("csr", batch=(2,))
    with pytest.raises(NotImplementedError, match="separated by a slice"):
        b[0, :, [1, 2]]
    assert t[None].shape == (1,) + t.shape  # None: a new dim (test_index_none_and_joins.py)
    with pytest.raises(NotImplementedError, match="__setitem__"):
        t[0, 0] = 1.0
    with pytest.raises(IndexError, match="ellipsis"):
        t[..., ...]


# NumPy reads advanced indices (the array and the integers) on the key as written: apart (by a slice, or
# by '...' even where it stands for no dims), they put the array's dim first. Where that differs from
# applying each component in place (a sliced dim before the array) the key is refused, never a wrong shape.
KEYS_SEPARATED_OK = [([1, 0], Ellipsis, 0), ([1, 0], slice(None), 0), (Ellipsis, 0, [1, 0]), (0, [1, 0], Ellipsis),
                     ([1, 0], 2, Ellipsis), (Ellipsis, [1, 0], 2)]
KEYS_SEPARATED_REFUSED = [(slice(None), [1, 0], Ellipsis, 0), (slice(None, None, 2), np.array([1, 0]), Ellipsis, -1),
                          (0, Ellipsis, [1, 0]), (0, slice(None), [1, 0]), (slice(1, None), [0], Ellipsis, 1),
                          (1, Ellipsis, [2, 0])]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_advanced_indices_apart(layout):
    if layout == "coo":
        a = np.arange(48.0).reshape(2, 4, 6)
        t = st.from_dense(a, "coo")
    else:
        t, a = _make(layout, batch=(2,))
    for key in KEYS_SEPARATED_OK:
        _check(t, a, key)
    for key in KEYS_SEPARATED_REFUSED:
        a[key]  # NumPy takes it (and moves the array's dim first)
        with pytest.raises(NotImplementedError, match="separated by a slice or by '...'"):
            t[key]


def test_advanced_indices_apart_by_an_empty_ellipsis():
    d = np.arange(60.0).reshape(3, 4, 5)
    t = st.from_dense(d, "coo")
    assert d[:, [0, 1], ..., 0].shape == (2, 3)
    with pytest.raises(NotImplementedError, match=r"got \[:, \[\.\.\.\], \.\.\., 0\]"):
        t[:, [0, 1], ..., 0]
    _check(t, d, ([0, 1], Ellipsis, 0))  # nothing sliced before the array: NumPy's result in place
    m = np.arange(12.0).reshape(3, 4)
    _check(st.from_dense(m, "csr"), m, (0, Ellipsis, [1, 2]))  # '...' stands for no dims, nothing sliced
