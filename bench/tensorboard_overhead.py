#!/usr/bin/env python3
"""What TensorBoard logging costs a training epoch (issue 30): examples/fashion_mnist's MLP epoch
with --logdir (every step's loss as a tensor, learning rate and step time; mean loss and accuracy
every 50 steps; the last step's gradient histograms) against the same run without it. Runs
alternate, each in its own process; prints each pair and the medians.

    bench/tensorboard_overhead.py [--build DIR] [--rounds N] [--epochs E] [--model mlp|cnn]

DIR holds examples/fashion_mnist (default build). The epoch time is the program's own
(--bench: the mean over its epochs of the training loop, evaluation left out); beside it, the
CPU time (user + system) of the whole process, loading and evaluation included, which other
work on a shared machine disturbs less than wall time."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def epoch_ms(exe, args, logdir=None):
    """(mean epoch ms, the whole process's CPU seconds): CPU time is steadier on a shared machine."""
    cmd = [exe, "--bench", *args] + (["--logdir", logdir] if logdir else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(line)["ms"], cpu


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--model", default="mlp")
    o = p.parse_args()
    exe = os.path.join(o.build, "examples", "fashion_mnist")
    args = ["--model", o.model, "--epochs", str(o.epochs)]
    plain, logged, plain_cpu, logged_cpu = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="kiln_tb_bench_") as tmp:
        for r in range(o.rounds):
            first_logged = r % 2 == 1  # alternate which side goes first
            for side in ([True, False] if first_logged else [False, True]):
                if side:
                    ms, cpu = epoch_ms(exe, args, os.path.join(tmp, f"run{r}"))
                    logged.append(ms), logged_cpu.append(cpu)
                else:
                    ms, cpu = epoch_ms(exe, args)
                    plain.append(ms), plain_cpu.append(cpu)
            print(f"round {r + 1}: plain {plain[-1]:.1f} ms ({plain_cpu[-1]:.2f} s CPU), "
                  f"--logdir {logged[-1]:.1f} ms ({logged_cpu[-1]:.2f} s CPU)", flush=True)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp) for f in fs) / o.rounds
    mp, ml = statistics.median(plain), statistics.median(logged)
    cp, cl = statistics.median(plain_cpu), statistics.median(logged_cpu)
    print(f"median epoch: plain {mp:.1f} ms, --logdir {ml:.1f} ms: {100 * (ml / mp - 1):+.2f}% "
          f"({o.rounds} rounds of {o.epochs} epochs, {o.model}); event file {size / 1024:.0f} KiB per run")
    print(f"median CPU time of the whole process: plain {cp:.2f} s, --logdir {cl:.2f} s: {100 * (cl / cp - 1):+.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
