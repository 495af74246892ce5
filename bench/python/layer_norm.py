"""PyTorch eager peer of bench/bench_layer_norm.c: layer norm over the last dim of [1024, 384]
f32, inference, written as the same composition and as torch.nn.functional.layer_norm, with as
many threads as kiln uses (--threads). 100 calls per round, ms per call, median over rounds;
one JSON line per way, as kiln's bench programs print."""
import argparse
import json
import statistics
import time

import torch


def composed(x, w, b):
    mean = x.mean(-1, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(-1, keepdim=True)
    return xc * torch.rsqrt(var + 1e-12) * w + b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(1024, 384, generator=g), torch.randn(384, generator=g), torch.randn(384, generator=g)
    ways = {
        "torch_layer_norm_composed": lambda: composed(x, w, b),
        "torch_layer_norm_fn": lambda: torch.nn.functional.layer_norm(x, (384,), w, b, 1e-12),
    }
    ms = {k: [] for k in ways}
    with torch.inference_mode():
        for r in range(-2, args.runs):
            for name, fn in ways.items():
                t0 = time.perf_counter()
                for _ in range(100):
                    fn()
                if r >= 0:
                    ms[name].append((time.perf_counter() - t0) * 1e3 / 100)
    for name, v in ms.items():
        print(json.dumps({"name": name, "ms": statistics.median(v), "threads": args.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
