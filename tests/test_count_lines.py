#!/usr/bin/env python3
"""scripts/count_lines.py on made-up programs: it counts only code lines (no blank lines, C
comments, Python comments or docstrings), and --check fails for a C program over 1.5 times its
twin's lines or without a twin, and passes at exactly 1.5.
Usage: test_count_lines.py PATH/TO/count_lines.py"""
import contextlib
import importlib.util
import io
import os
import sys
import tempfile

spec = importlib.util.spec_from_file_location("count_lines", sys.argv[1])
cl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cl)

C = "/* a comment\n   over two lines */\n#include <stdio.h>\n\nint main(void) { // the program\n%s    return 0;\n}\n"
PY = '"""A docstring\nover two lines."""\nimport sys\n\n# a comment\n%s'


def check(files):
    """count_lines --check's exit status over a made-up tree holding files (name -> text)."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, cl.PROGRAMS))
        for name, text in files.items():
            with open(os.path.join(root, cl.PROGRAMS, name), "w", encoding="utf-8") as f:
                f.write(text)
        cl.ROOT, cl.PAIRS = root, []
        with contextlib.redirect_stdout(io.StringIO()):
            return cl.main(["--check"])


failures = 0


def expect(what, got, want):
    global failures
    if got != want:
        failures += 1
        print(f"FAIL {what}: {got}, expected {want}")


with tempfile.TemporaryDirectory() as d:
    for name, text, want in [("a.c", C % "    puts(\"/* not a comment */\");\n", 5), ("a.py", PY % "print(1)\n", 2)]:
        path = os.path.join(d, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        expect(f"code lines of {name}", cl.count(path), want)

# C: 4 lines + n statements; Python: 1 import + m statements.
expect("6 C lines against 4 Python lines (1.5)", check({"p.c": C % ("    puts(\"x\");\n" * 2), "p.py": PY % ("print(1)\n" * 3)}), 0)
expect("7 C lines against 4 Python lines (1.75)", check({"p.c": C % ("    puts(\"x\");\n" * 3), "p.py": PY % ("print(1)\n" * 3)}), 1)
expect("a C program without a twin", check({"p.c": C % ""}), 1)
expect("no programs at all", check({}), 0)
print("FAIL" if failures else "ok   count_lines")
sys.exit(1 if failures else 0)
