"""Temporaries the interpreter alone holds are handed to kiln owned, so their buffers are
reused in place (memory_stats' inplace_reuses); tensors a variable holds are never touched."""
import numpy as np

import kiln

N = 512 * 512  # 1 MiB of f32: above the 256 KiB threshold


def reuses():
    return kiln.memory_stats()["inplace_reuses"]


def test_chain_of_temporaries_reuses_buffers():
    a = kiln.randn(N, seed=1)
    b = kiln.randn(N, seed=2)
    c = kiln.randn(N, seed=3)
    before = reuses()
    y = ((a + b) * c).exp().sub(1.0).relu()
    kiln.sync()
    assert reuses() - before >= 3
    a_np, b_np, c_np = a.numpy(), b.numpy(), c.numpy()
    np.testing.assert_allclose(y.numpy(), np.maximum(np.exp((a_np + b_np) * c_np) - 1, 0), rtol=1e-5, atol=1e-6)


def test_named_tensors_are_not_consumed():
    a = kiln.randn(N, seed=4)
    b = kiln.randn(N, seed=5)
    kiln.sync()
    before = reuses()
    s = a + b
    p = s * 2
    kiln.sync()
    assert reuses() == before
    np.testing.assert_allclose(s.numpy(), a.numpy() + b.numpy(), rtol=1e-6)
    np.testing.assert_allclose(p.numpy(), 2 * (a.numpy() + b.numpy()), rtol=1e-6)


def test_small_tensors_and_views_stay_valid():
    a = kiln.ones(4)
    v = (a + 1)[1:]
    assert v.tolist() == [2.0, 2.0, 2.0]
    big = kiln.ones(N)
    view = big[:10]
    r = (big * 3)[:10]
    assert view.tolist() == [1.0] * 10 and r.tolist() == [3.0] * 10


def test_composed_softmax_peak_memory_stays_low():
    x = kiln.randn(64, 2048, seed=6)
    kiln.sync()
    kiln.reset_peak_memory_stats()
    base = kiln.memory_stats()["bytes_in_use"]
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    y = (e / e.sum(-1, keepdim=True)).sum()
    y.item()
    peak = kiln.memory_stats()["peak_bytes"] - base
    assert peak <= 3 * x.numel() * 4, peak
