"""PyTorch eager peer of bench/bench_attention.c: self-attention inference, softmax(q k^T /
sqrt(E)) v without a mask, f32, on [8, 8, 128, 64] and MiniLM's [8, 12, 128, 32], written as the
same composition and as torch.nn.functional.scaled_dot_product_attention, alternating round by
round, with as many threads as kiln uses (--threads). --calls calls per round, ms per call,
median over rounds; one JSON line per way, as kiln's bench programs print."""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


def composed(q, k, v, scale):
    return torch.softmax(q @ k.transpose(-2, -1) * scale, -1) @ v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(1)
    for shape in ((8, 8, 128, 64), (8, 12, 128, 32)):
        q, k, v = (torch.randn(*shape, generator=g) for _ in range(3))
        scale = 1 / math.sqrt(shape[-1])
        ways = {
            "torch_attention_composed": lambda: composed(q, k, v, scale),
            "torch_attention_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, scale=scale),
        }
        ms = {name: [] for name in ways}
        with torch.inference_mode():
            for r in range(-2, args.runs):
                for name, fn in ways.items():
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        fn()
                    if r >= 0:
                        ms[name].append((time.perf_counter() - t0) * 1e3 / args.calls)
        suffix = "x".join(str(n) for n in shape)
        for name, v_ms in ms.items():
            print(json.dumps({"name": f"{name}_{suffix}", "ms": statistics.median(v_ms), "threads": args.threads,
                              "torch": torch.__version__}))


if __name__ == "__main__":
    main()
