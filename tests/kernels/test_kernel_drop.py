"""_select.drop_items and its wrapper sparsetensor.mpi._partition.without (a rank's own entries
without the few that go elsewhere): equal to a boolean gather for every item size, trailing
shape, number and placement of dropped items; bad positions or sizes raise ValueError before
anything is written."""
import numpy as np
import pytest

from sparsetensor._lib._select import drop_items


@pytest.fixture
def without():
    """The wrapper (sparsetensor.mpi needs mpi4py, which a bare install lacks)."""
    pytest.importorskip("mpi4py")
    from sparsetensor.mpi._partition import without as fn

    return fn


def _drop_bytes(a, drop, out):
    """The kernel alone, on byte views (what ``without`` calls)."""
    item = a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
    if item:
        drop_items(a.reshape(-1).view(np.uint8), out.reshape(-1).view(np.uint8), drop, item)
    return out


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.float64, np.complex128])
@pytest.mark.parametrize("trail", [(), (3,), (2, 2)])
@pytest.mark.parametrize("n,k", [(0, 0), (1, 0), (1, 1), (10, 3), (1000, 0), (1000, 1000), (5000, 40)])
def test_drop_items_equals_a_boolean_gather(rng, dtype, trail, n, k):
    a = (rng.standard_normal((n,) + trail) * 100).astype(dtype)
    drop = np.sort(rng.choice(n, k, replace=False)).astype(np.int64)
    keep = np.ones(n, bool)
    keep[drop] = False
    out = np.full((n - k,) + trail, 7, dtype)
    assert _drop_bytes(a, drop, out) is out
    np.testing.assert_array_equal(out, a[keep])


def test_without_casts_to_the_output_dtype(rng, without):
    a = np.arange(12.0).reshape(6, 2)
    out = without(a, np.array([1, 4]), np.empty((4, 2), np.float32))
    np.testing.assert_array_equal(out, a[[0, 2, 3, 5]].astype(np.float32))
    a = rng.integers(-5, 5, 100)
    out = without(a, np.array([0, 99]), np.empty(98, np.int32))
    np.testing.assert_array_equal(out, a[1:99].astype(np.int32))


def test_bad_arguments_raise_before_writing(without):
    src = np.arange(10, dtype=np.int64).view(np.uint8)
    dst = np.zeros(8 * 8, np.uint8)
    for drop in ([3, 3], [5, 2], [-1, 4], [4, 10]):
        with pytest.raises(ValueError, match="not sorted, distinct and in"):
            drop_items(src, dst, np.array(drop, np.int64), 8)
        assert not dst.any()
    with pytest.raises(ValueError, match="dst has"):
        drop_items(src, dst, np.array([1], np.int64), 8)
    with pytest.raises(ValueError, match="whole items"):
        drop_items(src, dst, np.array([1, 2], np.int64), 3)
    with pytest.raises(ValueError, match="C-contiguous"):
        without(np.zeros((4, 2)), np.array([0]), np.zeros((3, 3)))
