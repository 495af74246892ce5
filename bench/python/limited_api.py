"""What a limited-API (abi3) build of kiln._C would cost, measured in one process with rounds
alternated (DESIGN.md, Python; README):
1. tiny-op dispatch (x + y, 4 elements, result dropped; p50/p99 ns per op over batches of 1000, as
   dispatch.py) with the call-site lookup of the full API (mode 0) against the lookup a
   limited-API build must do (1: f_back, f_lasti and co_filename as attributes, the line cache
   kept; 2: the same, PyFrame_GetLineNumber every time). Modes 1 and 2 exist only in a build with
   bench/python/limited_api.patch applied (git apply bench/python/limited_api.patch; pip install
   --no-build-isolation ./python); without it this part is skipped.
2. softmax.py's kiln side with temporary elision on and off: an abi3 build keeps elision only by
   finding the private _PyEval_EvalFrameDefault with dlsym; without it every temporary is copied.
Run: .venv-py/bin/python bench/python/limited_api.py [rounds]"""
import statistics
import sys
import time

import kiln

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from softmax import kiln_softmax, SHAPE  # noqa: E402


def per_op_ns(x, y, n=1000):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x + y
    return (time.perf_counter_ns() - t0) / n


def dispatch(rounds):
    x, y = kiln.ones(4), kiln.ones(4)
    samples = {m: [] for m in (0, 1, 2)}
    for r in range(rounds):
        for m in (0, 1, 2) if r % 2 == 0 else (2, 1, 0):
            kiln._C._set_site_mode(m)
            samples[m].append(per_op_ns(x, y))
        if r % 20 == 0:
            kiln.sync()
    kiln._C._set_site_mode(0)
    kiln.sync()
    for m, s in samples.items():
        s.sort()
        print(f"call site mode {m}: p50 {statistics.median(s):6.0f} ns  p99 {s[int(len(s) * 0.99) - 1]:6.0f} ns")
    base = statistics.median(samples[0])
    print(f"limited/full p50: cached {statistics.median(samples[1]) / base:.3f}x, "
          f"uncached {statistics.median(samples[2]) / base:.3f}x")


def softmax_once(x):
    """(seconds, peak bytes beyond x as a multiple of x's size) of one composed softmax."""
    kiln.sync()
    kiln.reset_peak_memory_stats()
    base, t0 = kiln.memory_stats()["bytes_in_use"], time.perf_counter()
    kiln_softmax(x).sum().item()
    return time.perf_counter() - t0, (kiln.memory_stats()["peak_bytes"] - base) / (x.numel() * 4)


def softmax_memory(rounds=4):
    x = kiln.randn(*SHAPE, seed=0)
    res = {"elision on": [], "elision off": []}
    for _ in range(rounds):
        for name, min_bytes in (("elision on", 256 * 1024), ("elision off", 1 << 62)):
            kiln._C._set_elide_min_bytes(min_bytes)
            res[name].append(softmax_once(x))
    kiln._C._set_elide_min_bytes(256 * 1024)
    for name, runs in res.items():
        print(f"softmax {name}: {1e3 * statistics.median(t for t, _ in runs):.1f} ms, "
              f"peak beyond input {max(p for _, p in runs):.2f}x the input")


if __name__ == "__main__":
    kiln.set_num_threads(2)
    if hasattr(kiln._C, "_set_site_mode"):
        dispatch(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
    else:
        print("call-site modes: apply bench/python/limited_api.patch and reinstall to measure them")
    softmax_memory()
