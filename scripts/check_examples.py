#!/usr/bin/env python3
"""Compiles every code example in kiln's public headers and in README.md, so an example that no
longer matches the API fails CI at its own line.

The examples: the code lines (" *   code") of the comment that opens each include/kiln/*.h, and
every ```c block of README.md. A block with `int main(` is a whole program and is compiled as it
is; README's must also be examples/quickstart.c (less its opening comment line), which
scripts/check_install.sh builds and runs. Any other block is a fragment: it becomes the body of
a function, after <kiln.h>, <stdio.h> and GIVENS below, the names that fragments use without
declaring them (a model, a batch, a loss: a fragment's own declarations shadow these). In a
fragment, `...` alone on a line (a comment may follow) or as `{ ... }` stands for code left out.

Each is compiled in ROOT with `$CC -std=c11 -Wall -Werror -fsyntax-only -Iinclude` (fragments
also with -Wno-unused-variable -Wno-unused-but-set-variable: a fragment stops where the reader's
code goes on), and `#line` makes the compiler name the header's or README's own lines.

Usage: check_examples.py [ROOT]   (ROOT: the repository, by default the one holding this script)
"""
import glob
import os
import re
import subprocess
import sys

GIVENS = """\
kiln_module *model;
kiln_optimizer *opt;
kiln_loader *loader;
kiln_grads *grads;
kiln_tensor x, y, images, labels, loss, correct;
kiln_cross_entropy_options ce;
int64_t total_steps, n;
int batch;
float l;
kiln_tensor my_loss(kiln_module *model, int64_t step);
"""
FLAGS = ["-std=c11", "-Wall", "-Werror", "-fsyntax-only"]
FRAGMENT_FLAGS = ["-Wno-unused-variable", "-Wno-unused-but-set-variable"]


def header_example(path):
    """(first line number, code lines) of the example in the comment that opens a header."""
    lines = open(path).read().splitlines()
    end = next((i for i, line in enumerate(lines) if "*/" in line), 0)
    code = [i for i in range(end) if re.match(r" \*   ", lines[i])]
    if not code:
        return []
    span = range(code[0], code[-1] + 1)  # comment lines in between become blank lines
    # " * " becomes 3 spaces, so the compiler's columns are the header's
    return [(code[0] + 1, ["   " + lines[i][3:] if i in code else "" for i in span])]


def readme_examples(path):
    """(first line number, code lines) of every ```c block."""
    blocks, current = [], None
    for no, line in enumerate(open(path).read().splitlines(), 1):
        if current is None and line.strip() == "```c":
            current = (no + 1, [])
        elif current is not None and line.strip() == "```":
            blocks.append(current)
            current = None
        elif current is not None:
            current[1].append(line)
    return blocks


def fill_elisions(line):
    line = re.sub(r"^(\s*)\.\.\.(\s*(//.*)?)$", r"\1;\2", line)
    return line.replace("{ ... }", "{ ; }")


def compile_example(cc, root, origin, first, lines):
    """The compiler's complaints about one example ('' when it compiles)."""
    body = "\n".join(fill_elisions(line) for line in lines)
    if re.search(r"\bint\s+main\s*\(", body):
        unit, extra = f'#line {first} "{origin}"\n{body}\n', []
    else:
        unit = (f'#include <kiln.h>\n#include <stdio.h>\n#line 1 "scripts/check_examples.py (GIVENS)"\n{GIVENS}'
                f'void kiln_example(void);\nvoid kiln_example(void) {{\n#line {first} "{origin}"\n{body}\n}}\n')
        extra = FRAGMENT_FLAGS
    # run in root: the compiler then quotes the lines of root's files that #line names
    p = subprocess.run([cc, *FLAGS, *extra, "-Iinclude", "-x", "c", "-"], cwd=root, input=unit,
                       capture_output=True, text=True)
    return "" if p.returncode == 0 else p.stdout + p.stderr or f"{cc} failed with status {p.returncode}"


def quickstart_differs(root, lines):
    """README's whole program must be examples/quickstart.c after its opening comment line."""
    quickstart = open(os.path.join(root, "examples", "quickstart.c")).read().splitlines()[1:]
    return [line.rstrip() for line in lines] != [line.rstrip() for line in quickstart]


def main():
    root = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    cc = os.environ.get("CC", "cc")
    examples = []
    for path in sorted(glob.glob(os.path.join(root, "include", "kiln", "*.h"))):
        origin = os.path.relpath(path, root)
        examples += [(origin, first, lines) for first, lines in header_example(path)]
    examples += [("README.md", first, lines) for first, lines in readme_examples(os.path.join(root, "README.md"))]

    failed = 0
    for origin, first, lines in examples:
        errors = compile_example(cc, root, origin, first, lines)
        if errors:
            print(errors.rstrip())
            print(f"{origin}:{first}: FAIL: this example does not compile")
            failed += 1
        elif origin == "README.md" and "int main(" in "\n".join(lines) and quickstart_differs(root, lines):
            print(f"{origin}:{first}: FAIL: this program differs from examples/quickstart.c, which CI runs")
            failed += 1
    print(f"{len(examples) - failed} of {len(examples)} examples in include/kiln/*.h and README.md compile")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
