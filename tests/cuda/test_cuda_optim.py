"""st.optim's SGD, SparseAdam and Adagrad on CUDA parameters, against the CPU optimizers on copies.

A parameter that is a DeviceArray is updated in place by the kernels of ``kernels/optim.cu``
through the same front end as a NumPy one; its state stays on the device. Every optimizer and
option runs several steps of hybrid COO gradients (dense embedding dims) with duplicate rows and
empty steps, float32/float64 values and int32/int64 indices, and must match the CPU optimizer
run on host copies of the same parameters and gradients: float64 to 1e-12, float32 to 1e-6,
relative to the largest entry; momentum buffers' indices exactly. Bad input raises what the CPU
raises, before anything is written. Runs on a GPU or on the kernel emulator (see test_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetensor as st

import cuda_support
from autograd.test_optim import CONFIGS, IDS  # the CPU tests' table: every option of each optimizer
from cuda_support import cuda

backend, rng = cuda_support.backend, cuda_support.rng  # the fixtures: a GPU or the emulator, a seeded generator
DeviceArray = cuda.DeviceArray

# (shape, sparse dims): hybrid COO with one and two dense dims, no dense dim, two sparse dims
SHAPES = [((40, 8), 1), ((30, 3, 2), 1), ((25,), 1), ((12, 5), 2)]
RTOL = {np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-12}
DTYPES = [np.float32, np.float64]
INDEX = [np.int32, np.int64]
STEPS = 8


def grad_stream(rng, shape, sparse_dim, dtype, index_dtype, steps=STEPS):
    """(indices, values) per step: a duplicate row in every nonempty step, an empty step at 3, the
    rows drawn from the lower half of the first dim (so that later steps add new rows and repeat old ones)."""
    out = []
    for s in range(steps):
        nnz = 0 if s == 3 else int(rng.integers(2, 25))
        idx = np.stack([rng.integers(0, max(1, n // 2 if d == 0 else n), nnz)
                        for d, n in enumerate(shape[:sparse_dim])]).reshape(sparse_dim, nnz)
        if nnz:
            idx[:, -1] = idx[:, 0]
        vals = rng.standard_normal((nnz,) + shape[sparse_dim:]).astype(dtype)
        out.append((idx.astype(index_dtype), vals))
    return out


def coo(idx, vals, shape, **kw):
    return st.sparse_coo_tensor(idx, vals, size=shape, **kw)


def host(x):
    return x.get() if isinstance(x, DeviceArray) else x


def assert_close(got, want, dtype, rtol=RTOL):
    got, want = host(got), np.asarray(want)
    assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == want.shape
    scale = max(float(np.abs(want).max(initial=0)), 1e-30)
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max(initial=0)) / scale
    assert err <= rtol[np.dtype(dtype)], f"max error {err:.3g} relative to {scale:.3g}"


def assert_same_state(dstate: dict, cstate: dict, dtype):
    """The device optimizer's state of one parameter equals the CPU's (and lives on the device)."""
    assert set(dstate) == set(cstate)
    for k, c in cstate.items():
        d = dstate[k]
        if isinstance(c, np.ndarray):
            assert isinstance(d, DeviceArray) and d.device == "cuda:0"
            assert_close(d, c, dtype)
        elif isinstance(c, st.COOTensor):
            assert d.is_cuda and d.is_coalesced() and d.shape == c.shape
            assert d.index_dtype == c.index_dtype
            np.testing.assert_array_equal(host(d.indices()), c.indices())
            assert_close(d.values(), np.ascontiguousarray(c.values()), dtype)
        else:
            assert d == c, k


def run_both(name, kw, params, steps):
    """The optimizer on device copies and on host copies of ``params``; ``steps``: per step a list of
    gradients (CPU tensors or arrays, or None) per parameter. Returns (device params, host params,
    device optimizer, CPU optimizer)."""
    dev = [DeviceArray.from_host(p) for p in params]
    cpu = [p.copy() for p in params]
    od, oc = getattr(st.optim, name)(dev, **kw), getattr(st.optim, name)(cpu, **kw)
    for grads in steps:
        oc.step(list(grads))
        od.step([None if g is None else g.cuda() if isinstance(g, st.SparseTensor) else DeviceArray.from_host(g)
                 for g in grads])
    return dev, cpu, od, oc


def check_both(dev, cpu, od, oc, dtype):
    for i, (d, c) in enumerate(zip(dev, cpu)):
        assert_close(d, c, dtype)
        assert_same_state(od.state[i], oc.state[i], dtype)


# -- every optimizer x option x dtype x index dtype x shape, against the CPU ------------------------------

@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: d.__name__)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
def test_matches_cpu(backend, rng, name, kw, dtype, index_dtype):
    for shape, S in SHAPES:
        W0 = rng.standard_normal(shape).astype(dtype)
        stream = grad_stream(rng, shape, S, dtype, index_dtype)
        steps = [[coo(i, v, shape)] for i, v in stream]
        dev, cpu, od, oc = run_both(name, kw, [W0], steps)
        assert not np.array_equal(cpu[0], W0)  # the steps moved something
        check_both(dev, cpu, od, oc, dtype)


@pytest.mark.parametrize("name,kw", [CONFIGS[3], CONFIGS[7], CONFIGS[10]], ids=[IDS[3], IDS[7], IDS[10]])
def test_many_entries_and_heavy_rows(backend, rng, name, kw):
    """Enough entries for several radix-sort tiles; Zipf rows repeat thousands of times; a buffer of
    hundreds of rows merged with new ones."""
    shape = (3000, 4)
    steps = []
    for s in range(3):
        rows = np.minimum(rng.zipf(1.3, 9000), shape[0]) - 1
        rows[: 50] = rng.integers(0, shape[0], 50)
        steps.append([coo(rows[None], rng.standard_normal((rows.size, 4)), shape)])
    dev, cpu, od, oc = run_both(name, kw, [rng.standard_normal(shape)], steps)
    check_both(dev, cpu, od, oc, np.float64)


@pytest.mark.parametrize("width", [(), (3,), (300,), (2, 150)], ids=["E1", "E3", "E300", "E2x150"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name,kw", [CONFIGS[i] for i in (1, 4, 5, 8, 11, 6)], ids=[IDS[i] for i in (1, 4, 5, 8, 11, 6)])
def test_long_runs_take_a_block(backend, rng, name, kw, dtype, width):
    """A row repeated hundreds of times (more than 64 gradient rows: a block sums it, in column tiles
    of at most 256 and row lanes) beside rows of a few, every dense width, maximize too; with
    momentum, rows of the old buffer without a gradient run beside long and short runs."""
    shape = (50,) + width
    steps = []
    for s in range(3):
        rows = np.concatenate([np.full(400, 7), np.full(65, 3), rng.integers(0, 50, 40), np.full(64, 11)])
        rng.shuffle(rows)
        steps.append([coo(rows[None], rng.standard_normal((rows.size,) + width).astype(dtype), shape)])
    dev, cpu, od, oc = run_both(name, kw, [rng.standard_normal(shape).astype(dtype)], steps)
    # the block adds a run's 400 rows in another order than the CPU's loop: float32 sums of that
    # many terms round apart by up to ~n * eps, so float32 is judged at 2e-5 here (float64: 1e-12)
    tol = {**RTOL, np.dtype(np.float32): 2e-5}
    for i, (d, c) in enumerate(zip(dev, cpu)):
        assert_close(d, c, dtype, tol)
        for k, v in oc.state[i].items():
            if isinstance(v, np.ndarray):
                assert_close(od.state[i][k], v, dtype, tol)


def test_groups_none_gradients_and_mixed_devices(backend, rng):
    """Parameter groups with their own hyperparameters, None gradients, and a CPU parameter next to
    device ones in one optimizer: each is updated on its own device."""
    A, B, C = rng.standard_normal((6, 2)), rng.standard_normal((4, 3)), rng.standard_normal((5, 2))
    dA, dB = DeviceArray.from_host(A), DeviceArray.from_host(B)
    Cd = C.copy()
    ptr = dA.ptr
    groups = [{"params": [dA, Cd]}, {"params": [dB], "lr": 1.0, "momentum": 0.5}]
    od = st.optim.SGD(groups, lr=0.5)
    oc = st.optim.SGD([{"params": [A, C]}, {"params": [B], "lr": 1.0, "momentum": 0.5}], lr=0.5)
    gA = coo([[1, 1, 4]], rng.standard_normal((3, 2)), A.shape)
    gB = coo([[3, 0]], rng.standard_normal((2, 3)), B.shape)
    gC = coo([[2]], rng.standard_normal((1, 2)), C.shape)
    for grads in ([gA, gC, gB], [None, None, gB], [gA, None, None]):
        oc.step(grads)
        od.step([None if g is None else g if i == 1 else g.cuda() for i, g in enumerate(grads)])
    assert dA.ptr == ptr  # in place
    assert_close(dA, A, np.float64)
    assert_close(dB, B, np.float64)
    np.testing.assert_allclose(Cd, C, rtol=1e-12)
    assert od.state[2]["momentum_buffer"].is_cuda
    assert_same_state(od.state[2], oc.state[2], np.float64)


# -- dense gradients on the device --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.8, nesterov=True, maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.5, dampening=0.2, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, weight_decay=0.01)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, initial_accumulator_value=0.2, maximize=True))])
def test_dense_gradients(backend, rng, name, kw, dtype):
    shape = (7, 3)
    steps = [[rng.standard_normal(shape).astype(dtype)] for _ in range(5)]
    dev, cpu, od, oc = run_both(name, kw, [rng.standard_normal(shape).astype(dtype)], steps)
    check_both(dev, cpu, od, oc, dtype)


def test_sparse_gradient_after_dense_ones_takes_the_dense_buffer(backend, rng):
    """SGD whose momentum buffer is dense (made by dense gradients) steps a sparse gradient densely,
    as the CPU does (the sparse gradient densified on the device)."""
    shape = (6, 4)
    steps = [[rng.standard_normal(shape)], [coo([[1, 5, 1]], rng.standard_normal((3, 4)), shape)]]
    dev, cpu, od, oc = run_both("SGD", dict(lr=0.1, momentum=0.9), [rng.standard_normal(shape)], steps)
    assert isinstance(od.state[0]["momentum_buffer"], DeviceArray)
    check_both(dev, cpu, od, oc, np.float64)


# -- state_dict ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,kw", [CONFIGS[3], CONFIGS[7], CONFIGS[10]], ids=[IDS[3], IDS[7], IDS[10]])
def test_state_dict_between_devices(backend, rng, name, kw):
    """A device optimizer's state_dict loads into a CPU optimizer and into a device one (and a CPU
    one's into a device one): continuing gives what the uninterrupted run gives."""
    shape = (20, 4)
    stream = [[coo(i, v, shape)] for i, v in grad_stream(rng, shape, 1, np.float64, np.int64, steps=10)]
    W0 = rng.standard_normal(shape)
    _, full, _, _ = run_both(name, kw, [W0], stream)
    dev, cpu, od, oc = run_both(name, kw, [W0], stream[:5])
    sd = od.state_dict()
    assert all(isinstance(v, DeviceArray) or getattr(v, "is_cuda", False)
               for v in sd["state"][0].values() if not isinstance(v, (int, float)))
    other = {k: 1.0 if k == "lr" else v for k, v in kw.items()}
    to_cpu = getattr(st.optim, name)([host(dev[0])], **other)
    to_cpu.load_state_dict(sd)
    W2 = DeviceArray.from_host(cpu[0])
    to_dev = getattr(st.optim, name)([W2], **other)
    to_dev.load_state_dict(oc.state_dict())
    assert to_dev.param_groups[0]["lr"] == kw["lr"]
    W3 = DeviceArray.from_host(host(dev[0]))
    dev_to_dev = getattr(st.optim, name)([W3], **other)
    dev_to_dev.load_state_dict(sd)
    for (g,) in stream[5:]:
        to_cpu.step([g])
        to_dev.step([g.cuda()])
        dev_to_dev.step([g.cuda()])
    for W in (to_cpu.param_groups[0]["params"][0], W2, W3):
        assert_close(W, full[0], np.float64)
    for v in to_dev.state[0].values():
        assert isinstance(v, (int, float, DeviceArray)) or v.is_cuda


# -- bad input: the CPU's errors, nothing written --------------------------------------------------------

def _device_opt(name, **kw):
    W0 = np.random.default_rng(9).standard_normal((10, 4)).astype(np.float32)
    W = DeviceArray.from_host(W0)
    return W, W0, getattr(st.optim, name)([W], **kw)


@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
@pytest.mark.parametrize("index_dtype", INDEX, ids=lambda d: d.__name__)
@pytest.mark.parametrize("bad_row", [10, -1])
def test_out_of_range_row(backend, name, index_dtype, bad_row):
    idx = np.array([[1, 3, bad_row, 1]], index_dtype)
    g = coo(idx, np.ones((4, 4), np.float32), (10, 4), check_invariants=False)
    W, before, opt = _device_opt(name, lr=0.1, **({"momentum": 0.9} if name == "SGD" else {}))
    cpu = getattr(st.optim, name)([before.copy()], lr=0.1)
    with pytest.raises(st.InvariantError) as want:
        cpu.step([g])
    with pytest.raises(st.InvariantError) as got:
        opt.step([g.cuda()])
    assert (got.value.invariant, got.value.index, str(got.value)) == \
        (want.value.invariant, want.value.index, str(want.value))
    assert got.value.invariant == ("C5" if bad_row == 10 else "C4")
    np.testing.assert_array_equal(W.get(), before)
    assert not opt.state[0] or name == "Adagrad"
    if name == "Adagrad":
        assert not opt.state[0]["sum"].get().any() and opt.state[0]["step"] == 0


def test_out_of_range_row_in_a_later_parameter_writes_nothing(backend):
    A, B = DeviceArray.zeros((5, 2), np.float32), DeviceArray.zeros((5, 2), np.float32)
    opt = st.optim.SparseAdam([A, B])
    good = coo([[0]], np.ones((1, 2), np.float32), (5, 2)).cuda()
    bad = coo([[7]], np.ones((1, 2), np.float32), (5, 2), check_invariants=False).cuda()
    with pytest.raises(st.InvariantError, match="C5"):
        opt.step([good, bad])
    assert not A.get().any() and not B.get().any() and not opt.state[0]


@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
def test_gradient_on_another_device(backend, name):
    W, before, opt = _device_opt(name, lr=0.1)
    g = coo([[0, 1]], np.ones((2, 4), np.float32), (10, 4))
    with pytest.raises(ValueError, match="gradient on cpu for a parameter on cuda:0"):
        opt.step([g])
    if name != "SparseAdam":
        with pytest.raises(ValueError, match="gradient on cpu for a parameter on cuda:0"):
            opt.step([np.ones((10, 4), np.float32)])
    host_opt = getattr(st.optim, name)([before.copy()], lr=0.1)
    with pytest.raises(ValueError, match="gradient on cuda:0 for a parameter on cpu"):
        host_opt.step([g.cuda()])
    np.testing.assert_array_equal(W.get(), before)


@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
def test_bad_gradients(backend, name):
    W, before, opt = _device_opt(name, lr=0.1)
    with pytest.raises(ValueError, match="shape"):
        opt.step([coo([[0, 1]], np.ones((2, 4), np.float32), (11, 4)).cuda()])
    with pytest.raises(ValueError, match="dense dims"):
        opt.step([coo([[0, 1]], np.ones((2, 5), np.float32), (10, 5)).cuda()])
    with pytest.raises(TypeError, match="does not match"):
        opt.step([coo([[0, 1]], np.ones((2, 4)), (10, 4)).cuda()])
    with pytest.raises(NotImplementedError, match="csr"):
        opt.step([st.from_dense(np.ones((10, 4), np.float32), "csr").cuda()])
    with pytest.raises(TypeError, match="float32 or float64"):
        st.optim.SGD([DeviceArray.zeros((3,), np.int64)])
    np.testing.assert_array_equal(W.get(), before)


def test_unsupported_combinations_raise_as_on_the_cpu(backend):
    W = DeviceArray.zeros((4, 2), np.float64)
    g = coo([[1]], np.ones((1, 2)), (4, 2)).cuda()
    with pytest.raises(NotImplementedError, match="weight_decay"):
        st.optim.SGD([W], lr=0.1, weight_decay=0.1).step([g])
    with pytest.raises(NotImplementedError, match="weight_decay"):
        st.optim.Adagrad([W], weight_decay=0.1).step([g])
    with pytest.raises(TypeError, match="dense gradients"):
        st.optim.SparseAdam([W]).step([DeviceArray.zeros((4, 2), np.float64)])
    opt = st.optim.SGD([W], lr=0.1, momentum=0.9)
    opt.step([g])
    with pytest.raises(NotImplementedError, match="momentum buffer is sparse"):
        opt.step([DeviceArray.zeros((4, 2), np.float64)])
    np.testing.assert_array_equal(W.get()[1], [-0.1, -0.1])


def test_steps_read_no_arrays_back(backend, rng, monkeypatch):
    """A step copies nothing big between host and device: the only host reads are a count and the
    bounds report (a few ints), the only uploads the sparse shape."""
    if backend != "emulator":
        pytest.skip("counts the emulator's copies")
    from sparsetensor.cuda import _driver

    dev = _driver.get_device("cuda")
    shape = (400, 16)
    W = DeviceArray.from_host(rng.standard_normal(shape))
    grads = [coo(rng.integers(0, 400, (1, 300)), rng.standard_normal((300, 16)), shape).cuda() for _ in range(3)]
    moved = []
    for what in ("copy_dtoh", "copy_htod"):
        real = getattr(dev, what)
        monkeypatch.setattr(dev, what, lambda a, b, _real=real: (moved.append(a.nbytes if hasattr(a, "nbytes")
                                                                              else b.nbytes), _real(a, b))[1])
    for name, kw in (("SGD", dict(lr=0.1, momentum=0.9)), ("SparseAdam", {}), ("Adagrad", {})):
        opt = getattr(st.optim, name)([W], **kw)
        for g in grads:
            opt.step([g])
    assert moved and max(moved) <= 64, moved


def test_foreign_device_arrays_are_updated_in_place(backend, rng):
    """A parameter (and a dense gradient) given as a foreign CUDA array (``__cuda_array_interface__``
    only, as CuPy/Numba arrays are) is taken without a copy: the step writes into its memory."""
    shape = (8, 3)
    W0 = rng.standard_normal(shape)
    W = DeviceArray.from_host(W0)
    g = coo([[1, 6, 1]], rng.standard_normal((3, 3)), shape)
    opt = st.optim.Adagrad([cuda_support.CAIOnly(W)], lr=0.1)
    opt.step([g.cuda()])
    opt.step([cuda_support.CAIOnly(DeviceArray.from_host(np.ones(shape)))])
    ref = W0.copy()
    cpu = st.optim.Adagrad([ref], lr=0.1)
    cpu.step([g])
    cpu.step([np.ones(shape)])
    assert_close(W, ref, np.float64)


def test_edge_shapes(backend):
    """Zero rows, an empty first gradient (an empty momentum buffer, then merged), and a gradient
    with no sparse dims (every entry is the one row), as on the CPU."""
    W = DeviceArray.zeros((0, 3), np.float64)
    st.optim.SparseAdam([W]).step([coo(np.zeros((1, 0), np.int64), np.zeros((0, 3)), (0, 3)).cuda()])
    empty, one = coo(np.zeros((1, 0), np.int64), np.zeros((0, 2)), (4, 2)), coo([[2]], [[1.0, 2.0]], (4, 2))
    dev, cpu, od, oc = run_both("SGD", dict(lr=1.0, momentum=0.5), [np.ones((4, 2))], [[empty], [one], [empty]])
    assert od.state[0]["momentum_buffer"].nnz == 1
    check_both(dev, cpu, od, oc, np.float64)
    g = coo(np.zeros((0, 2), np.int64), np.array([[1.0, 2, 3], [1, 1, 1]]), (3,))
    dev, cpu, od, oc = run_both("SGD", dict(lr=1.0, momentum=0.5), [np.zeros(3)], [[g], [g]])
    np.testing.assert_array_equal(dev[0].get(), [-5.0, -7.5, -10.0])  # -(g) - (0.5 g + g), g = [2, 3, 4]
    check_both(dev, cpu, od, oc, np.float64)
