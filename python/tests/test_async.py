"""Asynchrony: ops return before they run, every wait releases the GIL so another Python
thread keeps running (and dispatching on its own kiln stream), read_many waits once."""
import threading
import time

import numpy as np

import kiln


def test_ops_return_before_the_work_is_done():
    if not kiln.is_async():
        return  # KILN_SYNC=1 runs every op at dispatch
    x = kiln.randn(1500, 1500, seed=1)
    kiln.sync()
    t0 = time.perf_counter()
    y = x
    for _ in range(4):
        y = y @ x
    dispatched = time.perf_counter() - t0
    y.sum().item()
    total = time.perf_counter() - t0
    assert dispatched < total / 2


def test_wait_releases_the_gil():
    x = kiln.randn(1200, 1200, seed=2)
    kiln.sync()
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    th = threading.Thread(target=spin)
    th.start()
    time.sleep(0.01)
    before = counter[0]
    r = x
    for _ in range(6):
        r = (r @ x).tanh()
    r.sum().item()
    during = counter[0] - before
    stop.set()
    th.join()
    assert during > 1000, during


def test_two_threads_dispatch_and_train_at_once():
    results = {}

    def work(name, seed):
        w = kiln.randn(16, 1, seed=seed, requires_grad=True)
        x = kiln.randn(64, 16, seed=seed + 1)
        target = x @ kiln.ones(16, 1)
        losses = []
        for _ in range(30):
            loss = ((x @ w - target) ** 2).mean()
            loss.backward()
            with kiln.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
            losses.append(loss.item())
        results[name] = losses

    threads = [threading.Thread(target=work, args=(n, 10 * i)) for i, n in enumerate("ab")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in "ab":
        assert results[name][-1] < results[name][0] * 0.1, results[name]


def test_read_many_one_transaction():
    a = kiln.arange(6).reshape(2, 3)
    b = kiln.randn(4, seed=3)
    c = kiln.tensor(2.5)
    ra, rb, rc = kiln.read_many([a, b, c])
    np.testing.assert_array_equal(ra, np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(rb, b.numpy())
    assert rc.shape == () and rc == 2.5
    assert kiln.read_many([]) == []
