#!/usr/bin/env python3
"""The PyTorch side of bench_tensorboard: what torch.utils.tensorboard.SummaryWriter costs the
same Fashion-MNIST MLP epoch (784-256-128-10, Adam 1e-3, batch 128, 2 threads), logging what
bench_tensorboard logs: each step's loss (loss.item(), as a PyTorch user writes it), learning
rate and step time, the mean loss and accuracy every 50 steps, the last step's gradient
histograms, the epoch's weight histograms and a flush. Plain and logged epochs alternate in one
process; prints each pair and the medians of wall and CPU time.

    bench/.venv/bin/python bench/peers/tensorboard_peer.py [--runs PAIRS]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import load_idx  # noqa: E402  (the same IDX reader as the other peers)

torch.set_num_threads(2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=6)
    o = p.parse_args()
    d = "/usr/share/datasets/fashion-mnist"
    x = torch.from_numpy(load_idx(f"{d}/train-images-idx3-ubyte.gz").copy()).float().div_(255)
    x = ((x - 0.2860) / 0.3530).unsqueeze(1)
    y = torch.from_numpy(load_idx(f"{d}/train-labels-idx1-ubyte.gz").copy()).long()
    nn = torch.nn
    torch.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = 0

    def epoch(w):
        nonlocal step
        t0, c0 = time.perf_counter(), time.process_time()
        perm = torch.randperm(x.shape[0])
        batches = (x.shape[0] + 127) // 128
        loss_sum, correct, seen, t_step = 0.0, 0, 0, t0
        for b, i in enumerate(range(0, x.shape[0], 128), 1):
            idx = perm[i:i + 128]
            logits = model(x[idx])
            loss = nn.functional.cross_entropy(logits, y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            step += 1
            # metrics as kiln_metrics accumulates them (both sides)
            loss_sum += loss.detach() * len(idx)
            correct += (logits.detach().argmax(1) == y[idx]).sum()
            seen += len(idx)
            if w:
                now = time.perf_counter()
                w.add_scalar("train/loss", loss.item(), step)
                w.add_scalar("train/lr", 1e-3, step)
                w.add_scalar("time/step_ms", 1e3 * (now - t_step), step)
                t_step = now
                if b == batches:
                    for name, prm in model.named_parameters():
                        w.add_histogram(f"grads/{name}", prm.grad, step)
            opt.step()
            if b % 50 == 0 or b == batches:
                mean_loss, accuracy = float(loss_sum) / seen, float(correct) / seen
                loss_sum, correct, seen = 0.0, 0, 0
                if w:
                    w.add_scalar("train/mean_loss", mean_loss, step)
                    w.add_scalar("train/accuracy", accuracy, step)
        if w:
            for name, prm in model.named_parameters():
                w.add_histogram(f"weights/{name}", prm, step)
            w.flush()
        return 1e3 * (time.perf_counter() - t0), 1e3 * (time.process_time() - c0)

    with tempfile.TemporaryDirectory(prefix="torch_tb_bench_") as tmp:
        w = SummaryWriter(tmp)
        epoch(None)  # warm-up
        plain, logged, plain_cpu, logged_cpu = [], [], [], []
        for r in range(o.runs):
            for log in ([True, False] if r % 2 else [False, True]):
                ms, cpu = epoch(w if log else None)
                (logged if log else plain).append(ms)
                (logged_cpu if log else plain_cpu).append(cpu)
            print(f"pair {r + 1}: plain {plain[-1]:.1f} ms ({plain_cpu[-1]:.0f} ms CPU), "
                  f"logged {logged[-1]:.1f} ms ({logged_cpu[-1]:.0f} ms CPU)", flush=True)
        w.close()
    mp, ml = statistics.median(plain), statistics.median(logged)
    cp, cl = statistics.median(plain_cpu), statistics.median(logged_cpu)
    print(f"median epoch: plain {mp:.1f} ms, logged {ml:.1f} ms ({100 * (ml / mp - 1):+.2f}%); "
          f"CPU {cp:.0f} against {cl:.0f} ms ({100 * (cl / cp - 1):+.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
