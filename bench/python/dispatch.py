"""Python dispatch of a tiny op: `x + y` on 4 f32 elements, the result dropped, kiln against
PyTorch in one process, rounds alternated; p50/p99 of the per-op time over batches of 1000.
Also the d2l demo (10 x (randn 1000^2 + mm)): the time the calls take to return against
the time to finish. Run: PYTHONPATH=<dir holding kiln> bench/.venv/bin/python bench/python/dispatch.py"""
import statistics
import sys
import time

import kiln

try:
    import torch
except ImportError:
    torch = None


def per_op_ns(x, y, n=1000):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x + y
    return (time.perf_counter_ns() - t0) / n


def tiny(rounds=200):
    kiln.set_num_threads(2)
    kx, ky = kiln.ones(4), kiln.ones(4)
    peers = {"kiln": (kx, ky)}
    if torch is not None:
        torch.set_num_threads(2)
        peers["torch"] = (torch.ones(4), torch.ones(4))
    samples = {k: [] for k in peers}
    for r in range(rounds):
        for name, (x, y) in peers.items():
            samples[name].append(per_op_ns(x, y))
        if r % 20 == 0:
            kiln.sync()
    kiln.sync()
    out = {}
    for name, s in samples.items():
        s.sort()
        out[name] = (statistics.median(s), s[int(len(s) * 0.99) - 1])
        print(f"tiny x + y, {name:5s}: p50 {out[name][0]:7.0f} ns  p99 {out[name][1]:7.0f} ns")
    if "torch" in out:
        print(f"ratio kiln/torch p50: {out['kiln'][0] / out['torch'][0]:.2f}")


def d2l(reps=3):
    kiln.set_engine_limits(0, 512 << 20)  # a window that holds the demo's 20 x 4 MB
    for _ in range(reps):
        kiln.sync()
        t0 = time.perf_counter()
        y = None
        for i in range(10):
            x = kiln.randn(1000, 1000, seed=i)
            y = x @ x
        t1 = time.perf_counter()
        y.sum().item()
        t2 = time.perf_counter()
        print(f"d2l demo: calls returned in {1e3 * (t1 - t0):.2f} ms, finished in {1e3 * (t2 - t0):.1f} ms "
              f"({100 * (t1 - t0) / (t2 - t0):.2f}%)")


if __name__ == "__main__":
    tiny(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
    d2l()
