#!/usr/bin/env python3
"""Test of scripts/check_layers.py on a tiny fake source tree: a tree whose includes point down
or sideways passes, and each upward include that issue #10 found on main fails, naming the
file and line. Usage: test_check_layers.py PATH-TO-check_layers.py"""
import importlib.util
import os
import subprocess
import sys
import tempfile

# A clean tree, one file per layer: path -> lines. Same-layer, lower-layer, relative, public and
# system includes, all allowed.
CLEAN = {
    "core/core-impl.h": ['#include <stdint.h>', '#include "kiln/core.h"'],
    "core/storage.c": ['#include "core/core-impl.h"', '#include "ir/op.h"'],
    "ir/op.h": ['#include "core/core-impl.h"'],
    "backend/backend-impl.h": ['#include "core/core-impl.h"', '#include "ir/op.h"'],
    "backend/cpu/kernels.c": ['#include "backend/backend-impl.h"'],
    "engine/engine-impl.h": ['#include "backend/backend-impl.h"', '#include "kiln/engine.h"'],
    "engine/node.h": ['#include "engine-impl.h"'],
    "engine/read_batch.c": ['#include "node.h"'],
    "ops/ops-impl.h": ['#include "engine/engine-impl.h"', '#include "kiln/tensor.h"'],
    "ops/elementwise.c": ['#include "ops/ops-impl.h"'],
    "autodiff/autodiff-impl.h": ['#include "ops/ops-impl.h"', '#include "kiln/autodiff.h"'],
    "autodiff/rules_nn.c": ['#include "autodiff/autodiff-impl.h"'],
    "api/call_site.c": ['#include "autodiff/autodiff-impl.h"'],
    "nn/conv-impl.h": ['#include "api/call_site.h"', '#include "kiln/nn.h"', '#include <kiln/train.h>'],
    "data/loader.c": ['#include "kiln/nn.h"', '#include "kiln/data.h"', '#include "engine/stream.h"'],
    "nn/module.c": ['#include "ops/ops-impl.h"', '#include "nn/conv-impl.h"', '#include "conv-impl.h"'],
    "optim/adam.c": ['#include "nn/conv-impl.h"', '#include "kiln/optim.h"'],
    "train/metrics.c": ['#include "kiln.h"', '#include "optim/optim-impl.h"'],
}

# The wrong directions named in issue #10: (file, include added at the end, its layer, the target's).
WRONG = [
    ("backend/backend-impl.h", "engine/engine-impl.h", "backend (layer 1)", "(layer 2, higher)"),
    ("engine/read_batch.c", "ops/ops-impl.h", "engine (layer 2)", "(layer 3, higher)"),
    ("ops/elementwise.c", "autodiff/autodiff-impl.h", "ops (layer 3)", "(layer 4, higher)"),
    ("core/storage.c", "backend/backend-impl.h", "core (layer 0)", "(layer 1, higher)"),
    ("autodiff/rules_nn.c", "nn/conv-impl.h", "autodiff (layer 4)", "(layer 6, higher)"),
    ("ops/elementwise.c", "kiln/autodiff.h", "ops (layer 3)", "(layer 4, higher)"),  # a public header
]

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
    print(("ok   " if cond else "FAIL ") + what)


def write_tree(root, extra=None):
    for path, lines in CLEAN.items():
        lines = list(lines)
        if extra and extra[0] == path:
            lines.append(f'#include "{extra[1]}"')
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write("/* fake */\n" + "\n".join(lines) + "\n")
    if extra:
        return len(CLEAN[extra[0]]) + 2  # the comment line, then the file's includes
    return 0


def run(script, root):
    p = subprocess.run([sys.executable, script, root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    script = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "clean")
        write_tree(root)
        rc, out = run(script, root)
        check(rc == 0 and len(out.strip().splitlines()) == 1, f"a clean tree passes with one summary line: {out.strip()}")

        for n, (path, header, mine, theirs) in enumerate(WRONG):
            root = os.path.join(tmp, f"wrong{n}")
            line = write_tree(root, (path, header))
            rc, out = run(script, root)
            expected = f"{os.path.join(root, path)}:{line}: {mine} includes {header} {theirs}"
            reported = [l for l in out.splitlines() if "higher" in l]
            check(rc == 1 and reported == [expected], f"{path} including {header} fails, naming line {line}"
                  + ("" if reported == [expected] else f"\n     expected: {expected}\n     got: {out}"))

        root = os.path.join(tmp, "nolayer")
        write_tree(root)
        os.makedirs(os.path.join(root, "misc"))
        with open(os.path.join(root, "misc", "x.c"), "w") as f:
            f.write('#include "core/core-impl.h"\n')
        rc, out = run(script, root)
        check(rc == 1 and "misc is in no layer" in out, "a folder missing from the layer table fails")

        # nn/ and data/ including a lower layer's internal that UPPER_INTERNALS does not list
        for n, (path, header) in enumerate([("data/loader.c", "engine/engine-impl.h"),
                                            ("nn/module.c", "backend/backend-impl.h")]):
            root = os.path.join(tmp, f"internal{n}")
            line = write_tree(root, (path, header))
            rc, out = run(script, root)
            expected = (f"{os.path.join(root, path)}:{line}: {path.split('/')[0]}/ includes {header}, "
                        f"an internal not in its UPPER_INTERNALS list (DESIGN.md section 2)")
            check(rc == 1 and out.splitlines()[0] == expected, f"{path} including {header} fails, naming line {line}"
                  + ("" if expected in out else f"\n     expected: {expected}\n     got: {out}"))

        # a device backend named below the registry (in code; a comment may name it)
        root = os.path.join(tmp, "named")
        write_tree(root)
        os.makedirs(os.path.join(root, "backend", "opencl"))
        with open(os.path.join(root, "backend", "opencl", "device.c"), "w") as f:
            f.write('int kiln__opencl_device_count(void);\n')
        with open(os.path.join(root, "backend", "backend.c"), "w") as f:
            f.write('/* the OpenCL devices */\nint n(void) { return kiln__opencl_device_count(); }\n')
        rc, out = run(script, root)
        expected = f"{os.path.join(root, 'backend', 'backend.c')}:2: backend/ names the backend 'kiln__opencl_device_count'"
        check(rc == 1 and expected in out and "opencl/device.c" not in out,
              "backend.c naming a backend fails, a backend's own folder does not" + ("" if expected in out else f": {out}"))

        # files of optim/ calling each other in a circle (issue #25), and the same calls one way
        for circle in (True, False):
            root = os.path.join(tmp, "circle" if circle else "oneway")
            write_tree(root)
            with open(os.path.join(root, "optim", "optimizer.c"), "w") as f:
                f.write('/* kiln__adam_apply is named in a comment only when one way */\n'
                        'int kiln__optim_new(int kind) {\n    return kind;\n}\n'
                        + ('static int step(void) { return kiln__adam_apply(1); }\n' if circle else ''))
            with open(os.path.join(root, "optim", "adam.c"), "w") as f:
                f.write('int kiln__adam_apply(int x) { return x; }\n'
                        'int kiln_adam_new(void) { return kiln__optim_new(1); }\n')
            rc, out = run(script, root)
            if circle:
                expected = "optim/ has a call circle: adam.c -> optimizer.c -> adam.c"
                check(rc == 1 and expected in out, "optim/ files calling each other in a circle fail" + ("" if expected in out else f": {out}"))
            else:
                check(rc == 0 and "circle" not in out, f"optim/ files calling one way pass: {out.strip()}")
        # engine/: files calling one way down its layers pass; a circle (the profiler calling the
        # queue back), a call up without a circle (the queue draining the streams by name, the
        # workers admitting an op) and a file no layer claims fail
        down = {"stream.c": "int kiln__async_submit(int x) { return kiln__fusion_submit(x) + kiln__now_ns(); }\n",
                "fusion.c": "int kiln__fusion_submit(int x) { return kiln__async_enqueue(x); }\n",
                "queue.c": "int kiln__async_enqueue(int x) { return x + kiln__now_ns(); }\n",
                "profiler.c": "int kiln__now_ns(void) { return 0; }\n"}
        cases = {
            "oneway": ({}, None),
            "circle": ({"profiler.c": "int kiln__now_ns(void) { return kiln__async_enqueue(0); }\n"},
                       "engine/ has a call circle: queue.c -> profiler.c -> queue.c"),
            "up": ({"queue.c": "int kiln__async_enqueue(int x) { return x ? x : kiln__async_submit(1); }\n"},
                   "engine/queue.c (layer 5) calls stream.c (layer 3, higher): kiln__async_submit"),
            "workers_up": ({"queue_workers.c": "int kiln__node_run(int x) { return kiln__async_enqueue(x); }\n"},
                           "engine/queue_workers.c (layer 6) calls queue.c (layer 5, higher): kiln__async_enqueue"),
            "unlisted": ({"async.c": "int kiln__async_old(int x) { return kiln__async_enqueue(x); }\n"},
                         "engine/async.c is in no layer of engine/"),
        }
        for case, (changed, expected) in cases.items():
            root = os.path.join(tmp, "engine_" + case)
            write_tree(root)
            for name, text in {**down, **changed}.items():
                with open(os.path.join(root, "engine", name), "w") as f:
                    f.write(text)
            rc, out = run(script, root)
            if expected is None:
                check(rc == 0, f"engine/ files calling down their layers pass: {out.strip()}")
            else:
                check(rc == 1 and expected in out, f"engine/ case {case} fails naming it"
                      + ("" if expected in out else f": {out}"))

        # autodiff/ and nn/ are checked for circles too: graph.c asking recompute.c, which calls
        # graph.c back, fails
        root = os.path.join(tmp, "autodiff_circle")
        write_tree(root)
        with open(os.path.join(root, "autodiff", "graph.c"), "w") as f:
            f.write("int kiln__ad_node_unref(int n) { return n; }\n"
                    "int kiln__ad_save(int t) { return kiln__ad_worth_recomputing(t); }\n")
        with open(os.path.join(root, "autodiff", "recompute.c"), "w") as f:
            f.write("int kiln__ad_worth_recomputing(int t) { return kiln__ad_node_unref(t); }\n")
        rc, out = run(script, root)
        expected = "autodiff/ has a call circle: graph.c -> recompute.c -> graph.c"
        check(rc == 1 and expected in out, "autodiff/ files calling each other in a circle fail"
              + ("" if expected in out else f": {out}"))

        # a recorded upward call (KNOWN_UPWARD_CALLS, empty now) is left out of the circle check;
        # one whose call or file is gone fails, so the list only shrinks
        spec = importlib.util.spec_from_file_location("check_layers", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.KNOWN_UPWARD_CALLS = [("engine", "profiler.c", "queue.c")]
        for case in ("known", "stale"):
            root = os.path.join(tmp, "known_" + case)
            write_tree(root)
            profiler = cases["circle"][0]["profiler.c"] if case == "known" else down["profiler.c"]
            for name, text in {**down, "profiler.c": profiler}.items():
                with open(os.path.join(root, "engine", name), "w") as f:
                    f.write(text)
            out = "\n".join(module.check_call_circles(root))
            if case == "known":
                check(out == "", f"a recorded upward call passes: {out}")
            else:
                expected = "engine/profiler.c no longer calls queue.c: remove the entry"
                check(expected in out, "a recorded upward call that is gone fails" + ("" if expected in out else f": {out}"))
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
