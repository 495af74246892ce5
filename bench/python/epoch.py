"""One Fashion-MNIST MLP training epoch from a training script written as a PyTorch user writes
one (a Module subclass, an optimizer, a DataLoader over a TensorDataset), in kiln and in
PyTorch, against kiln's C example (examples/fashion_mnist --bench) on the same model
(784-256-128-10, ReLU), batch (128), optimizer (Adam, lr 1e-3) and 2 threads.

Each side runs in its own process, sides alternating round by round; a round is two epochs and
reports their mean, as the C example's --bench does (model building, data loading and the
evaluation are outside the time). Printed: each side's median over the rounds of the wall time
and of the CPU time of all its threads (steadier on a machine loaded past its cores), its peak
RSS, and the ratios. PyTorch runs twice: "torch" with torch.utils.data.DataLoader (the script as written),
"torch-sliced" with batches sliced from a shuffled in-memory tensor (bench/peers/torch_peer.py's
way, the faster of the two and the one the ratio is taken against).

    PYTHONPATH=.venv-py/lib/python3.11/site-packages bench/.venv/bin/python bench/python/epoch.py \
        [--rounds 5] [--c-example build/examples/fashion_mnist] [--limit BATCHES] [--sides kiln,torch] [--torch-threads 1]

--limit N trains N batches per epoch (the C example: --limit N*128); --synthetic uses random
images of the same shape where Debian's dataset-fashion-mnist is not installed."""
import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
from idx_reader import load_idx  # noqa: E402
DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 128


def training_set(synthetic, limit):
    """Images [n, 1, 28, 28] f32 normalised as the C example's (mean 0.2860, std 0.3530), labels i64."""
    n = limit * BATCH if limit else 60000
    if synthetic:
        rng = np.random.default_rng(0)
        images, labels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n)
    else:
        images = load_idx(f"{DATA}/train-images-idx3-ubyte.gz")[:n]
        labels = load_idx(f"{DATA}/train-labels-idx1-ubyte.gz")[:n]
    x = images.astype(np.float32).reshape(-1, 1, 28, 28)
    x /= 255  # in place: one f32 copy of the images at any time
    x -= 0.2860
    x /= 0.3530
    return x, labels.astype(np.int64)


def train(lib, x, y, epochs, batches=None):
    """The training script, written once for both libraries (lib: the kiln or the torch module;
    their APIs agree): a Module subclass, Adam, a DataLoader over a TensorDataset. batches, when
    given, replaces the DataLoader's iteration (the sliced PyTorch peer). Returns each epoch's
    wall and CPU seconds and the last loss."""
    nn = lib.nn
    DataLoader, TensorDataset = lib.utils.data.DataLoader, lib.utils.data.TensorDataset
    lib.manual_seed(1)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                                     nn.Linear(128, 10))

        def forward(self, x):
            return self.net(x)

    model = MLP()
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(lib.from_numpy(x), lib.from_numpy(y)), batch_size=BATCH, shuffle=True)
    times, cpu = [], []
    for _ in range(epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        for images, labels in (batches() if batches else loader):
            loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if lib.__name__ == "kiln":
            lib.sync()  # the epoch's work done, not only queued
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)  # every thread's, as the C example's cpu_ms
    return times, cpu, loss.item()


def kiln_epochs(x, y, epochs):
    import kiln
    import kiln.utils.data  # noqa: F401

    kiln.set_num_threads(2)
    return train(kiln, x, y, epochs)


def torch_epochs(x, y, epochs, sliced, threads):
    import torch
    import torch.utils.data  # noqa: F401

    torch.set_num_threads(threads)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def sliced_batches():  # bench/peers/torch_peer.py's way: no per-sample indexing and collation
        perm = torch.randperm(tx.shape[0])
        for i in range(0, tx.shape[0], BATCH):
            idx = perm[i:i + BATCH]
            yield tx[idx], ty[idx]

    return train(torch, x, y, epochs, sliced_batches if sliced else None)


def run_side(args):
    """One round of one Python side, in this process: prints one JSON line."""
    x, y = training_set(args.synthetic, args.limit)
    if args.side == "kiln":
        times, cpu, loss = kiln_epochs(x, y, args.epochs)
    else:
        times, cpu, loss = torch_epochs(x, y, args.epochs, sliced=args.side == "torch-sliced", threads=args.torch_threads)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"side": args.side, "ms": 1e3 * statistics.mean(times), "epochs_ms": [1e3 * t for t in times],
                      "cpu_ms": 1e3 * statistics.mean(cpu),
                      "rss_mib": rss, "loss": loss}), flush=True)


def default_c_example():
    for d in ("build", "build-release"):
        p = os.path.join(ROOT, d, "examples", "fashion_mnist")
        if os.access(p, os.X_OK):
            return p
    return None


def one_round(side, args):
    """Runs one round of a side in a fresh process; its JSON record, or None with a note."""
    env = dict(os.environ, KILN_NUM_THREADS="2", OMP_NUM_THREADS="2")
    if args.omp_passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    if side == "c":
        cmd = [args.c_example, "--bench", "--epochs", str(args.epochs)]
        if args.limit:
            cmd += ["--limit", str(args.limit * BATCH)]
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--epochs", str(args.epochs)]
        cmd += ["--limit", str(args.limit)] if args.limit else []
        cmd += ["--synthetic"] if args.synthetic else []
        cmd += ["--torch-threads", str(args.torch_threads)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    recs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not recs:
        sys.stderr.write(f"{side}: failed ({out.returncode}): {out.stderr[-800:]}\n")
        return None
    return recs[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="batches per epoch (0: all)")
    ap.add_argument("--sides", default="kiln,torch-sliced,torch,c")
    ap.add_argument("--c-example", default=default_c_example())
    ap.add_argument("--synthetic", action="store_true", help="random images instead of the dataset")
    ap.add_argument("--torch-threads", type=int, default=2,
                    help="PyTorch's threads (on a machine loaded past its cores, 2 threads wait on each other)")
    ap.add_argument("--omp-passive", action="store_true",
                    help="OMP_WAIT_POLICY=PASSIVE for PyTorch: its threads sleep instead of spinning (a loaded machine)")
    ap.add_argument("--side", help=argparse.SUPPRESS)  # internal: run one round of one side here
    args = ap.parse_args()
    if not args.synthetic and not os.path.exists(f"{DATA}/train-images-idx3-ubyte.gz"):
        sys.stderr.write(f"no Fashion-MNIST in {DATA} (apt-get install dataset-fashion-mnist): random images\n")
        args.synthetic = True
    if args.side:
        return run_side(args)
    sides = [s for s in args.sides.split(",") if s]
    if "c" in sides and (not args.c_example or args.synthetic):
        sys.stderr.write("the C example is not built (or no dataset): its side skipped\n")
        sides.remove("c")
    # found, not imported: a child's peak RSS starts from its parent's at the fork (Linux keeps
    # the high-water mark across exec), so this process must stay small
    if importlib.util.find_spec("torch") is None:
        sys.stderr.write("no PyTorch in this interpreter: its sides skipped\n")
        sides = [s for s in sides if not s.startswith("torch")]
    recs = {s: [] for s in sides}
    for r in range(args.rounds):
        for side in sides:
            rec = one_round(side, args)
            if rec:
                recs[side].append(rec)
                print(f"round {r + 1} {side:12s} {rec['ms']:8.1f} ms, CPU {rec['cpu_ms']:8.1f} ms", flush=True)
    med, med_cpu = {}, {}
    for side, rs in recs.items():
        if rs:
            med[side] = statistics.median(r["ms"] for r in rs)
            med_cpu[side] = statistics.median(r["cpu_ms"] for r in rs)
            rss = max(r["rss_mib"] for r in rs)
            print(f"epoch {side:12s} median {med[side]:8.1f} ms (CPU {med_cpu[side]:8.1f} ms) over {len(rs)} rounds, "
                  f"peak RSS {rss:6.1f} MiB")
    if "kiln" in med:
        for peer in ("torch-sliced", "torch", "c"):
            if peer in med:
                print(f"ratio kiln/{peer}: {med['kiln'] / med[peer]:.2f} (CPU time {med_cpu['kiln'] / med_cpu[peer]:.2f})")
    print(json.dumps({"name": "python_fashion_mnist_mlp_epoch", "median_ms": med, "median_cpu_ms": med_cpu}))


if __name__ == "__main__":
    main()
