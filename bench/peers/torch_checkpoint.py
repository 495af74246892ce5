"""The PyTorch peer of bench/bench_checkpoint.c: one training step (forward, mean, backward, SGD)
of LAYERS x (Linear(WIDTH) + GELU) on [BATCH, WIDTH] f32; --mode plain (nothing recomputed) or
ckpt (every block through torch.utils.checkpoint, use_reentrant=False) or selective (the same,
with PyTorch's selective policy saving the outputs of matrix products and attention and
recomputing the rest: kiln's automatic policy's peer). Prints one JSON line: the
median step time, the resident set once the forward pass is done (what it keeps for backward)
and the peak resident set of the step (VmHWM after resetting it through /proc/self/clear_refs),
both above the resident set before the timed steps, as kiln's side measures.
Usage: torch_checkpoint.py --mode plain|ckpt|selective [--runs N] [--layers L] [--width W] [--batch B]"""
import argparse
import json
import statistics
import time

import functools

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

# what the selective policy keeps: products and attention, as kiln's automatic policy does
KEEP = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default}


def keep_products(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in KEEP else CheckpointPolicy.PREFER_RECOMPUTE


def status_mib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["plain", "ckpt", "selective"], default="plain")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", choices=["mlp", "encoder"], default="mlp")
    p.add_argument("--seq", type=int, default=512)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.model == "encoder":  # bench_checkpoint.c --model encoder: 8 layers, d 256, 4 heads, [8, 512, 256]
        layers = a.layers if a.layers != 24 else 8
        batch = a.batch if a.batch != 512 else 8
        blocks = nn.ModuleList([nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
                                for _ in range(layers)])
        x = torch.randn(batch, a.seq, 256)
    else:
        blocks = nn.ModuleList([nn.Sequential(nn.Linear(a.width, a.width), nn.GELU()) for _ in range(a.layers)])
        x = torch.randn(a.batch, a.width)
    opt = torch.optim.SGD(blocks.parameters(), lr=1e-4)

    act = [0.0]

    def step():
        h = x
        for b in blocks:
            if a.mode == "ckpt":
                h = checkpoint(b, h, use_reentrant=False)
            elif a.mode == "selective":
                h = checkpoint(b, h, use_reentrant=False,
                               context_fn=functools.partial(create_selective_checkpoint_contexts, keep_products))
            else:
                h = b(h)
        loss = h.mean()
        act[0] = max(act[0], status_mib("VmRSS:") - rss0)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)  # as kiln_train_step frees its gradients
        return loss.item()

    rss0 = status_mib("VmRSS:")
    step()  # warm-up
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss0 = status_mib("VmRSS:")
    act[0] = 0.0
    ms = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        loss = step()
        ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"name": f"checkpoint_{a.model}_{a.mode}", "side": "torch " + torch.__version__, "mode": a.mode,
                      "ms": statistics.median(ms), "act_rss_mib": round(act[0], 1), "hwm_mib": round(status_mib("VmHWM:") - rss0, 1),
                      "loss": loss}), flush=True)


if __name__ == "__main__":
    main()
