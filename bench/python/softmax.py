"""Composed softmax on [128, 128, 2048] f32 (inference), written the same way for both:
exp(x - logsumexp), DESIGN.md's reference workload; kiln against PyTorch eager, each side in a
process of its own, sides alternated round by round. Per side: the median time per call over
the rounds, and two memory numbers, both measured:
  - the process's peak RSS (ru_maxrss), as every benchmark here prints it: what a user's machine
    pays, libraries included;
  - the peak beyond the input while the call runs, in units of the input's size: kiln's from
    kiln.memory_stats()'s peak; PyTorch's from VmHWM's growth over the resident set before the
    call (the HWM is reset through /proc/self/clear_refs, and a fixed mmap threshold gives every
    large tensor its own mapping, returned at free, so the resident set follows the live tensors).

    PYTHONPATH=<dir holding kiln> bench/.venv/bin/python bench/python/softmax.py [--rounds 5] [--shape 128,128,2048]"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def softmax(x):
    return (x - x.exp().sum(-1, keepdim=True).log()).exp()


def proc_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def run_side(side, shape, calls):
    """One process's calls: prints JSON with its times, peak beyond the input and peak RSS."""
    if side == "kiln":
        import kiln as lib
        lib.set_num_threads(2)
        x = lib.randn(*shape, seed=0)
        lib.sync()
    else:
        import torch as lib
        lib.set_num_threads(2)
        x = lib.randn(*shape)
    n = 4
    for d in shape:
        n *= d
    times, beyond = [], 0.0
    for _ in range(calls):
        if side == "kiln":
            lib.reset_peak_memory_stats()
            base = lib.memory_stats()["bytes_in_use"]
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # VmHWM := VmRSS
            base = proc_kib("VmRSS")
        t0 = time.perf_counter()
        y = softmax(x)
        y.sum().item()
        times.append(time.perf_counter() - t0)
        if side == "kiln":
            peak = lib.memory_stats()["peak_bytes"] - base
        else:
            peak = (proc_kib("VmHWM") - base) * 1024
        beyond = max(beyond, peak / n)
        del y
    print(json.dumps({"side": side, "ms": [1e3 * t for t in times], "beyond_input": beyond,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3, help="calls per round (one process)")
    ap.add_argument("--shape", default="128,128,2048")
    ap.add_argument("--sides", default="kiln,torch")
    ap.add_argument("--side", help=argparse.SUPPRESS)  # internal: run one side here
    args = ap.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    if args.side:
        return run_side(args.side, shape, args.calls)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    results = {s: {"ms": [], "beyond": [], "rss": []} for s in args.sides.split(",")}
    for _ in range(args.rounds):
        for side in results:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--side", side, "--shape", args.shape,
                                  "--calls", str(args.calls)], env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{side}: {out.stderr[-2000:]}")
            r = json.loads(out.stdout.splitlines()[-1])
            results[side]["ms"].append(statistics.median(r["ms"]))
            results[side]["beyond"].append(r["beyond_input"])
            results[side]["rss"].append(r["peak_rss_mib"])
    summary = {}
    for side, r in results.items():
        summary[side] = {"ms": statistics.median(r["ms"]), "beyond_input": max(r["beyond"]),
                         "peak_rss_mib": statistics.median(r["rss"])}
        print(f"{side:5s}: {summary[side]['ms']:.1f} ms, peak beyond the input {summary[side]['beyond_input']:.2f}x "
              f"the input, process peak RSS {summary[side]['peak_rss_mib']:.1f} MiB")
    if "kiln" in summary and "torch" in summary:
        k, t = summary["kiln"], summary["torch"]
        print(f"ratio kiln/torch: time {k['ms'] / t['ms']:.2f}, peak RSS {k['peak_rss_mib'] / t['peak_rss_mib']:.2f}, "
              f"peak beyond the input {k['beyond_input'] / t['beyond_input']:.2f}")
    print(json.dumps({"name": "python_composed_softmax", "shape": list(shape), "results": summary}))


if __name__ == "__main__":
    main()
