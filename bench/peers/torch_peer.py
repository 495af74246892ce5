#!/usr/bin/env python3
"""The PyTorch (and NumPy) side of kiln's benchmarks: the same workloads, shapes and thread
count, printing the same one-line JSON records as the C programs.

    python3 bench/peers/torch_peer.py --only softmax_inference [--runs N]
"""
import argparse
import json
import resource
import statistics
import time

import torch

torch.set_num_threads(2)


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def report(name, ms, side="pytorch", **extra):
    rec = {"name": name, "side": side, "ms": ms, "rss_mib": peak_rss_mib()}
    rec.update(extra)
    print(json.dumps(rec), flush=True)


def timed(fn, runs, warmup=2):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def softmax_inference(runs):
    x = torch.randn(128, 128, 2048)

    def run():
        with torch.inference_mode():
            lse = torch.log(torch.exp(x).sum(-1, keepdim=True))
            return torch.exp(x - lse)

    report("softmax_inference", timed(run, runs))


def mlp_layers():
    torch.manual_seed(0)
    return [torch.nn.Linear(2048, 2048) for _ in range(12)]


def mlp_inference(runs):
    layers = mlp_layers()
    x = torch.randn(128, 2048)

    def run():
        with torch.inference_mode():
            h = x
            for lin in layers:
                h = torch.relu(lin(h))
            return h

    report("mlp_inference", timed(run, runs))


def matmul(n, runs):
    a, b = torch.randn(n, n), torch.randn(n, n)
    ms = timed(lambda: a @ b, runs, warmup=1)
    report(f"matmul_{n}", ms, gflops=2.0 * n**3 / (ms * 1e6))


def bandwidth(op, runs):
    n = 64 << 20
    a, b = torch.randn(n), torch.randn(n)
    fn = (lambda: a + b) if op == "add" else (lambda: torch.exp(a))
    ms = timed(fn, runs, warmup=1)
    streams = 3 if op == "add" else 2
    report(f"{op}_bandwidth", ms, gbps=streams * 4.0 * n / (ms * 1e6))


def dispatch(runs):
    x, acc = torch.ones(8), torch.zeros(8)
    per_batch = 1000
    samples = []
    for b in range(runs + 20):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            acc.add_(x)
        if b >= 20:
            samples.append((time.perf_counter() - t0) * 1e9 / per_batch)
    samples.sort()
    p50, p99 = samples[len(samples) // 2], samples[int(0.99 * (len(samples) - 1))]
    report("dispatch", p50 * per_batch / 1e6, ns_per_op=p50, ns_p99=p99)


def async_demo(runs):
    def run():
        for _ in range(10):
            a = torch.randn(1000, 1000)
            a @ a

    report("async_demo", timed(run, runs))


def async_demo_numpy(runs):
    import numpy as np

    rng = np.random.default_rng(0)

    def run():
        for _ in range(10):
            a = rng.standard_normal((1000, 1000), dtype=np.float32)
            a @ a

    report("async_demo", timed(run, runs), side="numpy")


WORKLOADS = {
    "softmax_inference": softmax_inference,
    "mlp_inference": mlp_inference,
    "matmul_1024": lambda r: matmul(1024, r),
    "matmul_2048": lambda r: matmul(2048, r),
    "matmul_4096": lambda r: matmul(4096, r),
    "add_bandwidth": lambda r: bandwidth("add", r),
    "exp_bandwidth": lambda r: bandwidth("exp", r),
    "dispatch": dispatch,
    "async_demo": async_demo,
    "async_demo_numpy": async_demo_numpy,
}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    WORKLOADS[args.only](args.runs)
