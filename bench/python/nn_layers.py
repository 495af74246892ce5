"""kiln.nn's layers as kiln's C modules (kiln.nn.Linear, ...) against the same layers written in
Python over the functional ops (as the package had them before; defined below), in one process,
rounds alternated: a Fashion-MNIST-shaped MLP epoch (784-256-128-10, Adam, batch 128, 60000
synthetic images made once, loss read every 50 steps) and a step of the C example's small CNN
(two conv + pool, 3136-128-10 with dropout; batch 128; median over 10 steps); and, as a measure
of the binding's own cost that load on the machine disturbs less, the calling thread's CPU time
per training step of a tiny MLP (8-8-8-4, batch 2), where the kernels cost next to nothing.
Run: .venv-py/bin/python bench/python/nn_layers.py [--rounds 3] [--threads 2]"""
import argparse
import math
import statistics
import time

import numpy as np

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.nn.modules import Module


# ---- the Python layers over the functional ops (the package's before the C modules) -------------

def _uniform(shape, bound):
    return kiln.rand(*shape) * (2 * bound) - bound


def _param(t):
    return t.requires_grad_(True)


class PyLinear(Module):
    def __init__(self, i, o):
        super().__init__()
        b = 1 / math.sqrt(i)
        self.weight, self.bias = _param(_uniform((o, i), b)), _param(_uniform((o,), b))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class PyConv2d(Module):
    def __init__(self, i, o, k, padding):
        super().__init__()
        b = 1 / math.sqrt(i * k * k)
        self.weight, self.bias = _param(_uniform((o, i, k, k), b)), _param(_uniform((o,), b))
        self.padding = padding

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, 1, self.padding, 1, 1)


class PyMaxPool2d(Module):
    def forward(self, x):
        return F.max_pool2d(x, 2, 2, 0)


class PyDropout(Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


LAYERS = {
    "python": dict(linear=PyLinear, conv=PyConv2d, pool=PyMaxPool2d, dropout=PyDropout),
    "C module": dict(linear=nn.Linear, conv=lambda i, o, k, padding: nn.Conv2d(i, o, k, padding=padding),
                     pool=lambda: nn.MaxPool2d(2), dropout=nn.Dropout),
}


def mlp(L):
    return nn.Sequential(nn.Flatten(), L["linear"](784, 256), nn.ReLU(), L["linear"](256, 128), nn.ReLU(),
                         L["linear"](128, 10))


def cnn(L):
    return nn.Sequential(L["conv"](1, 32, 3, padding=1), nn.ReLU(), L["pool"](), L["conv"](32, 64, 3, padding=1),
                         nn.ReLU(), L["pool"](), nn.Flatten(), L["linear"](64 * 7 * 7, 128), nn.ReLU(),
                         L["dropout"](0.25), L["linear"](128, 10))


def epoch_seconds(model, batches):
    opt = kiln.optim.Adam(model.parameters(), lr=1e-3)
    kiln.sync()
    t0 = time.perf_counter()
    for i, (x, y) in enumerate(batches):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i % 50 == 0:
            loss.item()
    kiln.sync()
    return time.perf_counter() - t0, loss.item()


def step_seconds(model, x, y, steps=10):
    opt = kiln.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def tiny_step_cpu_us(L, steps=300):
    model = nn.Sequential(L["linear"](8, 8), nn.ReLU(), L["linear"](8, 8), nn.ReLU(), L["linear"](8, 4))
    opt = kiln.optim.Adam(model.parameters(), lr=1e-3)
    x, y = kiln.randn(2, 8), kiln.arange(2) % 4
    kiln.sync()
    t0 = time.thread_time()
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    kiln.sync()
    return (time.thread_time() - t0) / steps * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--images", type=int, default=60000)
    a = ap.parse_args()
    kiln.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    x_all = rng.random((a.images, 1, 28, 28), dtype=np.float32)
    y_all = rng.integers(0, 10, a.images)
    batches = [(kiln.tensor(x_all[i:i + 128]), kiln.tensor(y_all[i:i + 128]))
               for i in range(0, a.images - 127, 128)]
    cx, cy = batches[0]
    res = {k: {"mlp": [], "cnn": [], "tiny": []} for k in LAYERS}
    for r in range(a.rounds):
        for name, L in (LAYERS.items() if r % 2 == 0 else reversed(LAYERS.items())):
            kiln.manual_seed(r)
            t, _ = epoch_seconds(mlp(L), batches)
            res[name]["mlp"].append(t)
            kiln.manual_seed(r)
            res[name]["cnn"].append(step_seconds(cnn(L), cx, cy))
            res[name]["tiny"].append(tiny_step_cpu_us(L))
    print(f"kiln.nn layers, {a.threads} threads, {len(batches)} batches of 128 per MLP epoch, {a.rounds} rounds "
          "(median; min-max)")
    for name in LAYERS:
        m, c, t = res[name]["mlp"], res[name]["cnn"], res[name]["tiny"]
        print(f"  {name:9s} MLP epoch {statistics.median(m):7.3f} s ({min(m):.3f}-{max(m):.3f})   "
              f"CNN step {statistics.median(c) * 1e3:7.2f} ms ({min(c) * 1e3:.2f}-{max(c) * 1e3:.2f})   "
              f"tiny step {statistics.median(t):6.1f} us CPU ({min(t):.1f}-{max(t):.1f})")
    p, c = res["python"], res["C module"]
    ratio = {k: statistics.median(c[k]) / statistics.median(p[k]) for k in p}
    print(f"  C module / python: MLP epoch {ratio['mlp']:.3f}x, CNN step {ratio['cnn']:.3f}x, "
          f"tiny step {ratio['tiny']:.3f}x")


if __name__ == "__main__":
    main()
