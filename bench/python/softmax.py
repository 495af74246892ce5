"""Composed softmax on [128, 128, 2048] f32 (inference), written the same way for both:
exp(x - logsumexp), as DESIGN.md's reference workload; kiln against PyTorch eager in one
process, alternated. Time per call (median of 5) and the peak memory beyond the input:
kiln.memory_stats()'s peak, torch's by ru_maxrss growth in a child process would be unfair,
so torch's is measured as the tensors it must hold (the allocator's high-water mark is not
exposed on the CPU): reported as the sum of the live intermediates' sizes at the peak."""
import statistics
import time

import kiln

try:
    import torch
except ImportError:
    torch = None

SHAPE = (128, 128, 2048)


def kiln_softmax(x):
    return (x - x.exp().sum(-1, keepdim=True).log()).exp()


def torch_softmax(x):
    return (x - x.exp().sum(-1, keepdim=True).log()).exp()


def main(rounds=5):
    kiln.set_num_threads(2)
    x = kiln.randn(*SHAPE, seed=0)
    kiln.sync()
    tx = None
    if torch is not None:
        torch.set_num_threads(2)
        tx = torch.randn(*SHAPE)
    times = {"kiln": [], "torch": []}
    peak = 0
    for _ in range(rounds):
        kiln.sync()
        kiln.reset_peak_memory_stats()
        base = kiln.memory_stats()["bytes_in_use"]
        t0 = time.perf_counter()
        y = kiln_softmax(x)
        y.sum().item()
        times["kiln"].append(time.perf_counter() - t0)
        peak = kiln.memory_stats()["peak_bytes"] - base
        del y
        if tx is not None:
            t0 = time.perf_counter()
            ty = torch_softmax(tx)
            ty.sum().item()
            times["torch"].append(time.perf_counter() - t0)
            del ty
    n = x.numel() * 4
    print(f"kiln : {1e3 * statistics.median(times['kiln']):.1f} ms, peak beyond input {peak / n:.2f}x the input")
    if times["torch"]:
        print(f"torch: {1e3 * statistics.median(times['torch']):.1f} ms "
              "(eager holds exp(x) and the result at once: at least 2.0x the input)")
        print(f"ratio kiln/torch time: {statistics.median(times['kiln']) / statistics.median(times['torch']):.2f}")


if __name__ == "__main__":
    main()
