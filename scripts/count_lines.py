#!/usr/bin/env python3
"""Counts the code lines of the example programs and their PyTorch versions: lines that are
neither blank nor only comment (C: // and /* ... */, docstrings and # in Python), and prints
each pair with the ratio kiln / PyTorch (issue 15 asks for at most 1.5).

    scripts/count_lines.py              # the pairs below, from the repository root
    scripts/count_lines.py FILE...      # the counts of any C or Python files
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = [
    ("examples/char_lstm.c", "bench/peers/example_char_lstm.py"),
    ("examples/transformer_classifier.c", "bench/peers/example_transformer.py"),
    ("examples/autoencoder.c", "bench/peers/example_autoencoder.py"),
    ("examples/logistic_regression.c", "bench/peers/example_logistic_regression.py"),
    ("examples/mlp_checkpoint.c", "bench/peers/example_mlp_checkpoint.py"),
    ("examples/attention_adam.c", "bench/peers/example_attention_adam.py"),
]


def strip_c(text):
    """C source without its comments (string literals kept; a comment marker inside one is rare
    enough in these examples to ignore)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def strip_py(text):
    """Python source without docstrings (a string alone on its lines) and # comments."""
    text = re.sub(r'^\s*(""".*?"""|\'\'\'.*?\'\'\')\s*$', lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.S | re.M)
    return re.sub(r"#[^\n]*", "", text)


def count(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = strip_py(text) if path.endswith(".py") else strip_c(text)
    return sum(1 for line in text.splitlines() if line.strip())


def main(argv):
    if argv:
        for path in argv:
            print(f"{count(path):5d}  {path}")
        return 0
    worst = 0.0
    print(f"{'kiln (C)':36s} {'lines':>5s}   {'PyTorch':46s} {'lines':>5s}   ratio")
    for c, py in PAIRS:
        nc, npy = count(os.path.join(ROOT, c)), count(os.path.join(ROOT, py))
        worst = max(worst, nc / npy)
        print(f"{c:36s} {nc:5d}   {py:46s} {npy:5d}   {nc / npy:.2f}")
    print(f"largest ratio {worst:.2f} (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
