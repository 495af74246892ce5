#!/usr/bin/env python3
"""Test of scripts/check_examples.py on temporary copies of the headers, README.md and
examples/quickstart.c: the copies as they are pass; the call issue #15 found in optim.h's example
(kiln_clip_grad_norm without its 4th argument), an unknown call in a README fragment, a
README program that is no longer quickstart.c, and a fragment with an undeclared name each fail,
naming the broken line. Usage: test_check_examples.py PATH-TO-check_examples.py REPO-ROOT"""
import os
import shutil
import subprocess
import sys
import tempfile

failures = 0


def check(cond, what, out=""):
    global failures
    if not cond:
        failures += 1
    print(("ok   " if cond else "FAIL ") + what + ("" if cond else "\n" + out))


def copy_repo(repo, root):
    shutil.copytree(os.path.join(repo, "include"), os.path.join(root, "include"))
    os.makedirs(os.path.join(root, "examples"))
    shutil.copy(os.path.join(repo, "examples", "quickstart.c"), os.path.join(root, "examples"))
    shutil.copy(os.path.join(repo, "README.md"), root)


def break_file(root, path, old, new):
    """Replaces old (which must be there) by new; returns the line number of the change."""
    full = os.path.join(root, path)
    text = open(full).read()
    if old not in text:
        sys.exit(f"FAIL the test's text to break is not in {path} any more: {old!r}")
    with open(full, "w") as f:
        f.write(text.replace(old, new, 1))
    return text[: text.index(old)].count("\n") + 1


def run(script, root):
    p = subprocess.run([sys.executable, script, root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    script, repo = sys.argv[1], sys.argv[2]
    cases = [
        ("include/kiln/optim.h", "kiln_clip_grad_norm(opt, g, 1.0, NULL)", "kiln_clip_grad_norm(opt, g, 1.0)",
         "does not compile"),
        ("README.md", "kiln_transaction_free(tx);", "kiln_transaction_free(tx, 1);", "does not compile"),
        ("README.md", "printf(\"%.1f\\n\", total);", "printf(\"%.2f\\n\", total);", "differs from examples/quickstart.c"),
        ("include/kiln/data.h", "kiln_loader_free(loader);", "kiln_loader_free(loader2);", "does not compile"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "clean")
        copy_repo(repo, root)
        rc, out = run(script, root)
        check(rc == 0, "the repository's examples compile", out)

        for n, (path, old, new, why) in enumerate(cases):
            root = os.path.join(tmp, f"broken{n}")
            copy_repo(repo, root)
            line = break_file(root, path, old, new)
            rc, out = run(script, root)
            named = f"{path}:{line}:" in out
            if why == "differs from examples/quickstart.c":  # reported at the block's first line
                named = any(l.startswith("README.md:") and why in l for l in out.splitlines())
            check(rc == 1 and named and why in out, f"{path}:{line} '{new}' fails: {why}", out)
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
