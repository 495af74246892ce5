"""DLPack both ways with NumPy (and PyTorch when installed): no copies for dense buffers,
values intact, buffers released back to their producer."""
import gc
import sys

import numpy as np
import pytest

import kiln
from conftest import needs_torch


def test_numpy_from_kiln_shares_the_buffer():
    t = kiln.arange(12, dtype=kiln.float32).reshape(3, 4)
    a = np.from_dlpack(t)
    b = np.from_dlpack(t)
    assert a.ctypes.data == b.ctypes.data  # kiln's own buffer, twice
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))
    np.testing.assert_array_equal(np.from_dlpack(t.T), np.arange(12).reshape(3, 4).T)
    assert t.__dlpack_device__() == (1, 0)
    t += 1  # the exported buffer is never written in place
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))
    np.testing.assert_array_equal(t.numpy(), np.arange(12).reshape(3, 4) + 1)


def test_kiln_from_numpy_without_copy():
    a = np.arange(10, dtype=np.float64)
    refs = sys.getrefcount(a)
    t = kiln.from_dlpack(a)
    assert t.dtype == kiln.float64 and t.shape == (10,)
    assert sys.getrefcount(a) > refs  # the producer keeps the array alive for kiln
    a[3] = 100.0  # the same memory
    assert t[3].item() == 100.0
    assert (t * 2).sum().item() == 2 * (a.sum())
    del t
    kiln.sync()
    gc.collect()
    kiln.zeros(1)  # the next call gives released buffers back under the GIL
    assert sys.getrefcount(a) == refs


def test_strided_and_other_dtypes():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    t = kiln.from_dlpack(a)
    np.testing.assert_array_equal(t.numpy(), a)
    for dt, kd in [(np.int64, kiln.int64), (np.float16, kiln.float16), (np.float32, kiln.float32)]:
        x = np.ones((2, 2), dt)
        k = kiln.from_dlpack(x)
        assert k.dtype == kd
        np.testing.assert_array_equal(np.from_dlpack(k), x)


def test_bad_inputs():
    with pytest.raises(TypeError):
        kiln.from_dlpack([1, 2])
    with pytest.raises(TypeError):
        kiln.from_dlpack(np.ones(2, np.complex64))
    with pytest.raises(ValueError):
        cap = np.ones(2).__dlpack__()
        kiln.from_dlpack(cap)
        kiln.from_dlpack(cap)  # consumed already


@needs_torch
def test_torch_round_trip():
    import torch
    t = kiln.randn(3, 5, seed=1)
    x = torch.from_dlpack(t)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    back = kiln.from_dlpack(torch.arange(6.0))
    assert back.tolist() == [0, 1, 2, 3, 4, 5]
