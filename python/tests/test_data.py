"""kiln.utils.data.DataLoader over NumPy arrays, backed by kiln's C loader and its threads:
every sample once per epoch, a new shuffled order each epoch, the same batches with 0 or 2
workers, drop_last, one-array datasets; bad arguments and failing inputs raise with this file's
line; a loader is refused to a second thread while one iterates it, and after close."""
import inspect
import threading

import numpy as np
import pytest

import kiln
from kiln import _C
from kiln.utils.data import DataLoader, TensorDataset


def line_here():
    return inspect.currentframe().f_back.f_lineno


def pairs():
    x = np.arange(50, dtype=np.float32).reshape(25, 2)
    return x, np.arange(25, dtype=np.int64)


def test_every_sample_once_per_epoch_in_a_new_order():
    x, y = pairs()
    dl = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    assert dl._loader is not None and len(dl) == 7
    orders = []
    for _ in range(2):
        seen = []
        for xb, yb in dl:
            assert xb.dtype == kiln.float32 and yb.dtype == kiln.int64
            np.testing.assert_array_equal(xb.numpy(), x[yb.numpy()])  # rows stay with their labels
            seen += yb.tolist()
        assert sorted(seen) == list(range(25))
        orders.append(seen)
    assert orders[0] != orders[1] and orders[0] != list(range(25))


def test_workers_do_not_change_the_batches():
    x, y = pairs()
    runs = [[b.tolist() for _, b in DataLoader(TensorDataset(x, y), batch_size=6, shuffle=True, seed=3,
                                                num_workers=w)] for w in (0, 2)]
    assert runs[0] == runs[1]


def test_in_order_drop_last_and_one_array():
    x, y = pairs()
    batches = [b.tolist() for _, b in DataLoader(TensorDataset(x, y), batch_size=10, drop_last=True)]
    assert batches == [list(range(10)), list(range(10, 20))]
    only = list(DataLoader(TensorDataset(x), batch_size=10))
    assert [t.shape for t in only] == [(10, 2), (10, 2), (5, 2)]
    np.testing.assert_array_equal(only[2].numpy(), x[20:])


def test_a_newer_iteration_replaces_an_older_one():
    x, y = pairs()
    dl = DataLoader(TensorDataset(x, y), batch_size=5)
    old = iter(dl)
    next(old)
    assert sum(len(b) for _, b in dl) == 25  # the new epoch is whole
    with pytest.raises(RuntimeError, match="newer"):
        next(old)


def test_python_datasets_keep_the_python_path():
    x, y = pairs()
    assert DataLoader(TensorDataset(x.astype(np.uint8)), batch_size=2)._loader is None  # no kiln dtype
    assert DataLoader(TensorDataset(x, y, y), batch_size=2)._loader is None  # three arrays


def test_bad_arguments_raise():
    x, y = pairs()
    ds = TensorDataset(x, y)
    for bad in (0, -1, 2.5, None, True):
        with pytest.raises(ValueError):
            DataLoader(ds, batch_size=bad)
    for bad in (-1, 257, "2"):
        with pytest.raises(ValueError):
            DataLoader(ds, num_workers=bad)
    with pytest.raises(TypeError):
        DataLoader(42)
    with pytest.raises(TypeError):
        _C._loader_new(x, y, 2, 2, True, False, 0)  # arrays, not tensors
    with pytest.raises(TypeError):
        _C._loader_next("not a loader")
    with pytest.raises(TypeError):
        _C._loader_next(kiln.nn.GRU(2, 2)._layer)  # another kind of capsule
    with pytest.raises(OverflowError):
        _C._loader_new(kiln.tensor(x), kiln.tensor(y), 2**70, 2, True, False, 0)


def test_kiln_errors_name_the_calling_line():
    with pytest.raises(kiln.ShapeError) as info:
        line = line_here(); _C._loader_new(kiln.zeros(4, 2), kiln.zeros(3), 2, 2, True, False, 0)  # noqa: E702
    assert f"test_data.py:{line}" in str(info.value) and "kiln_memory_dataset_new" in str(info.value)
    with pytest.raises(kiln.InvalidArgumentError) as info:
        queued = line_here(); bad = kiln.arange(4) % 0  # noqa: E702
        _C._loader_new(kiln.zeros(4, 2), bad, 2, 2, True, False, 0)
    assert f"test_data.py:{queued}" in str(info.value)


def test_closed_and_busy_loaders_are_refused():
    x, y = pairs()
    dl = DataLoader(TensorDataset(x, y), batch_size=5)
    it = iter(dl)
    next(it)
    dl.close()
    dl.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        next(it)
    with pytest.raises(RuntimeError, match="closed"):
        len(dl)
    big = DataLoader(TensorDataset(np.zeros((1024, 64), np.float32), np.zeros(1024)), batch_size=1, num_workers=1)
    errors, stop = [], threading.Event()

    def other():
        while not stop.is_set():
            try:
                _C._loader_batches(big._loader)
            except RuntimeError as e:
                errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    try:
        for _ in big:
            pass
    except RuntimeError as e:  # the other thread held it at that moment: refused, not corrupted
        assert "another thread" in str(e)
    stop.set()
    t.join()
    assert all("another thread" in str(e) for e in errors)


def test_a_dataset_of_tensors_keeps_them_and_batches_them_as_arrays():
    # a dataset of kiln tensors holds the tensors themselves (no NumPy copy of a large training
    # set), goes to the C loader, and batches in Python when it has three of them
    x, y = pairs()
    tx, ty = kiln.from_numpy(x), kiln.from_numpy(y)
    ds = TensorDataset(tx, ty)
    assert ds.arrays[0] is tx and ds.arrays[1] is ty
    dl = DataLoader(ds, batch_size=4, shuffle=True)
    assert dl._loader is not None
    seen = []
    for xb, yb in dl:
        np.testing.assert_array_equal(xb.numpy(), x[yb.numpy()])
        seen += yb.tolist()
    assert sorted(seen) == list(range(25))
    three = DataLoader(TensorDataset(tx, ty, ty), batch_size=10, shuffle=True, seed=4)
    assert three._loader is None
    batches = list(three)
    assert [len(b[0]) for b in batches] == [10, 10, 5]
    for xb, yb, zb in batches:
        np.testing.assert_array_equal(xb.numpy(), x[yb.numpy()])
        np.testing.assert_array_equal(yb.numpy(), zb.numpy())
    np.testing.assert_array_equal(np.asarray(ds[3][0]), x[3])
