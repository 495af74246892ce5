#!/usr/bin/env python3
"""Counts the code lines of the example programs and their PyTorch versions: lines that are
neither blank nor only comment (C: // and /* ... */, docstrings and # in Python), and prints
each pair with the ratio kiln / PyTorch (issues 15 and 23 ask for at most 1.5).

    scripts/count_lines.py              # the pairs below, from the repository root
    scripts/count_lines.py --check      # the same, exiting 1 when a ratio passes 1.5 (a ctest)
    scripts/count_lines.py FILE...      # the counts of any C or Python files

Besides the pairs listed, every examples/programs/NAME.c is paired with NAME.py beside it.
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
PROGRAMS = "examples/programs"
LIMIT = 1.5


def pairs():
    """The listed pairs and each program of PROGRAMS with its twin (a C file without one is an
    error: its ratio cannot be checked)."""
    found = list(PAIRS)
    for name in sorted(os.listdir(os.path.join(ROOT, PROGRAMS))):
        if name.endswith(".c"):
            found.append((f"{PROGRAMS}/{name}", f"{PROGRAMS}/{name[:-2]}.py"))
    return found


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
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    if argv:
        for path in argv:
            print(f"{count(path):5d}  {path}")
        return 0
    worst, over = 0.0, []
    print(f"{'kiln (C)':40s} {'lines':>5s}   {'PyTorch':46s} {'lines':>5s}   ratio")
    for c, py in pairs():
        if not os.path.exists(os.path.join(ROOT, py)):
            print(f"{c}: no PyTorch twin {py}")
            over.append(c)
            continue
        nc, npy = count(os.path.join(ROOT, c)), count(os.path.join(ROOT, py))
        worst = max(worst, nc / npy)
        if nc > LIMIT * npy:
            over.append(c)
        print(f"{c:40s} {nc:5d}   {py:46s} {npy:5d}   {nc / npy:.2f}")
    print(f"largest ratio {worst:.2f} (target <= {LIMIT})")
    if over:
        print(f"over {LIMIT} times their twin's lines, or without a twin: {', '.join(over)}")
    return 1 if check and over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
