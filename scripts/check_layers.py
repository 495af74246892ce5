#!/usr/bin/env python3
"""Checks that kiln's layers point one way: every `#include "..."` in src/**/*.c|h may name a
header of its own layer or of a layer below, never one above (DESIGN.md, section 2).

    scripts/check_layers.py          # checks src/
    scripts/check_layers.py ROOT     # checks another source root (the script's own test)

Prints `file:line: <folder> (layer N) includes <header> (layer M, higher)` for each include
that points up and exits 1; prints a one-line summary and exits 0 when there is none.
Includes in angle brackets (system headers) are not checked. A file or an include that no
layer claims is an error too: add its folder to LAYERS.

The folders above api/ that README calls built on the public API (UPPER_INTERNALS: nn/, data/)
may include, besides public headers and their own, only the lower layers' internal headers
listed for them there; DESIGN.md section 2 gives each one's reason. Any other is reported as
`file:line: <folder>/ includes <header>, an internal not in its UPPER_INTERNALS list`.

A second rule keeps the backend registry honest (DESIGN.md, section 8): the code (not the
comments) of core/, ir/, engine/ and the files directly in backend/ names no device backend,
i.e. no word containing the name of a folder under backend/ other than cpu (the host, which
core owns). They reach a backend through the registry only.

A third rule keeps the files of some folders (CALLS_ONE_WAY) from calling each other in a circle:
file A depends on file B of the same folder when A's code names a function or table that B
defines (not static). A circle among them (optim/: optimizer.c calling adam.c, which calls
back) is reported as `<folder>/ has a call circle: a.c -> b.c -> a.c`. KNOWN_UPWARD_CALLS lists
the upward calls not yet turned around (none now); they are left out of the graph, any other
circle fails, and an entry whose call is gone fails too, so the list only shrinks.

A fourth rule layers the files of a folder itself (FILE_LAYERS: engine/, DESIGN.md section 6): a
file may call files of its own layer or below, and every file of the folder is in a layer. A
call up is reported as `<folder>/<a.c> (layer N) calls <b.c> (layer M, higher): <names>`.
"""
import os
import re
import sys

# Bottom to top: (folders under the source root, public headers). The one place to edit.
LAYERS = [
    (["core", "ir"], ["kiln/core.h"]),  # handles, storages, op records, opcodes, expression IR
    (["backend"], []),
    (["engine"], ["kiln/engine.h"]),
    (["ops", "io"], ["kiln/tensor.h", "kiln/ops.h", "kiln/shape_ops.h", "kiln/custom_op.h", "kiln/io.h"]),  # io: file formats, tensor save/load
    (["autodiff"], ["kiln/autodiff.h"]),
    (["api"], []),
    (["data", "text", "nn"], ["kiln/data.h", "kiln/text.h", "kiln/nn.h", "kiln/nn_ops.h"]),
    (["optim"], ["kiln/optim.h"]),
    (["train", "dist"], ["kiln/train.h", "kiln/dist.h", "kiln/summary.h", "kiln.h"]),  # kiln.h: the umbrella
    (["models"], ["kiln/bert.h"]),  # whole models (kiln.h includes bert.h for users; src/ never includes kiln.h)
]

FOLDER_LAYER = {folder: n for n, (folders, _) in enumerate(LAYERS) for folder in folders}
HEADER_LAYER = {header: n for n, (_, headers) in enumerate(LAYERS) for header in headers}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def folder_of(rel):
    """The first folder of a path relative to the source root, or None for a file at the top."""
    parts = rel.replace(os.sep, "/").split("/")
    return parts[0] if len(parts) > 1 else None


# The lower layers' internal headers that nn/ and data/ may include, as paths from the source
# root; the reasons are in DESIGN.md section 2's table. Keep the two in step.
UPPER_INTERNALS = {
    "nn": ["api/call_site.h", "api/autocast-impl.h", "autodiff/autodiff-impl.h", "ops/ops-impl.h",
           "ops/conv-impl.h", "ops/generator-impl.h", "backend/cpu/gemm_int8.h",
           "backend/cpu/gemm_blockq.h"],
    "data": ["api/call_site.h", "core/core-impl.h", "engine/stream.h"],
}


def header_layer(root, includer_rel, header):
    """(layer, folder, path from the root) of an included header, or (None, None, path) when no
    layer claims it; a public header's path is its name. Like the compiler, a quoted include is
    looked up beside the including file, then from the root."""
    if header in HEADER_LAYER:
        return HEADER_LAYER[header], header, header
    beside = os.path.normpath(os.path.join(os.path.dirname(includer_rel), header))
    from_root = os.path.normpath(header)
    candidates = [beside, from_root]
    found = [c for c in candidates if os.path.isfile(os.path.join(root, c))]
    if not found:  # judge by the name alone: a root-relative path starts with a layer's folder
        found = [from_root] if folder_of(from_root) in FOLDER_LAYER else [beside]
    folder = folder_of(found[0])
    return FOLDER_LAYER.get(folder), folder, found[0].replace(os.sep, "/")


def sources(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def check(root):
    """Returns (problems, files, includes)."""
    problems, files, includes = [], 0, 0
    for rel in sources(root):
        files += 1
        shown = os.path.join(root, rel)
        folder = folder_of(rel)
        layer = FOLDER_LAYER.get(folder)
        if layer is None:
            problems.append(f"{shown}:1: {folder or rel} is in no layer (add it to LAYERS in {__file__})")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                includes += 1
                header = m.group(1)
                target, target_folder, path = header_layer(root, rel, header)
                if target is None:
                    problems.append(f"{shown}:{number}: {folder} (layer {layer}) includes {header}, "
                                    f"which is in no layer (add its folder to LAYERS)")
                elif target > layer:
                    problems.append(f"{shown}:{number}: {folder} (layer {layer}) includes {header} "
                                    f"(layer {target}, higher)")
                elif (folder in UPPER_INTERNALS and path not in HEADER_LAYER and target_folder != folder
                      and path not in UPPER_INTERNALS[folder]):
                    problems.append(f"{shown}:{number}: {folder}/ includes {header}, an internal not in "
                                    f"its UPPER_INTERNALS list (DESIGN.md section 2)")
    return problems, files, includes


NAMELESS = ["core", "ir", "engine", "backend"]  # backend: only the files directly in it
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def backend_names(root):
    """The device backends: the folders under backend/, except the host's (cpu)."""
    path = os.path.join(root, "backend")
    if not os.path.isdir(path):
        return []
    return sorted(d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d)) and d != "cpu")


def check_nameless(root):
    """Lines of NAMELESS folders' code that name a device backend."""
    names = backend_names(root)
    if not names:
        return []
    word = re.compile(r"[A-Za-z_0-9]*(?:" + "|".join(map(re.escape, names)) + r")[A-Za-z_0-9]*", re.I)
    problems = []
    for rel in sources(root):
        parts = rel.replace(os.sep, "/").split("/")
        if parts[0] not in NAMELESS or (parts[0] == "backend" and len(parts) > 2):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        code = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for number, line in enumerate(code.split("\n"), 1):
            m = word.search(line)
            if m:
                problems.append(f"{os.path.join(root, rel)}:{number}: {parts[0]}/ names the backend "
                                f"'{m.group(0)}' (reach it through the registry, backend/registry.c)")
    return problems


CALLS_ONE_WAY = ["optim", "core", "backend", "engine", "autodiff", "nn"]
# engine/'s layers, top down (DESIGN.md section 6): read_batch.c, memory_stats.c; engine.c, the
# front; stream.c, the streams, beside substitute.c, the hold (it registers the calls a window
# makes to it, kiln__fusion_set_hold); fusion.c, the windows; queue.c, admission to the bounded
# queue (bounds, backpressure, an op run at dispatch), with exit_guard.c; queue_workers.c, running
# (the workers, completion, a stream's errors); execute.c; profiler.c, handoff.c, deps.c,
# queue_epochs.c (kiln_sync_all's epochs), and fusion_join.c and fusion_matmul.c (which ops join a
# group), which call no other file of the engine. The few calls
# that must point up go through a hook the higher file registers (the queue's drain when out of
# memory, the profiler's at stop), never by name.
#
# (folder, caller, callee): a lower file's calls up into a higher one, recorded until they are
# turned around (none now). An entry whose call or file is gone fails, so the list only shrinks.
KNOWN_UPWARD_CALLS = []
# A definition at file scope: not static, a name, then a parameter list or an initializer.
DEFINITION = re.compile(r"^(?!static\b|typedef\b|extern\b|struct\b|union\b|enum\b|return\b)[A-Za-z_][\w \t\*]*?"
                        r"\b([A-Za-z_]\w*)\s*(\([^;{]*\)\s*\{|=)", re.M)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
IDENT = re.compile(r"[A-Za-z_]\w*")


def call_graph(path):
    """The .c files directly in path: {file: {file it calls: [names it uses from there]}}."""
    code = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".c"):
            with open(os.path.join(path, name), encoding="utf-8", errors="replace") as f:
                code[name] = STRING.sub('""', COMMENT.sub(" ", f.read()))
    owner = {m.group(1): name for name, text in code.items() for m in DEFINITION.finditer(text)}
    graph = {}
    for name, text in code.items():
        graph[name] = {}
        for w in IDENT.findall(text):
            if owner.get(w, name) != name and w not in graph[name].setdefault(owner[w], []):
                graph[name][owner[w]].append(w)
    return graph


def check_call_circles(root):
    """A call circle among the files directly in each CALLS_ONE_WAY folder, or none."""
    problems = []
    for folder in CALLS_ONE_WAY:
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            continue
        graph = call_graph(path)
        uses = {name: sorted(callees) for name, callees in graph.items()}
        for known_folder, caller, callee in KNOWN_UPWARD_CALLS:
            if known_folder != folder:
                continue
            if caller not in graph or callee not in graph or callee not in uses.get(caller, []):
                problems.append(f"{path}: {folder}/{caller} no longer calls {callee}: remove the entry "
                                f"from KNOWN_UPWARD_CALLS in {__file__}")
            else:
                uses[caller].remove(callee)
        state, stack = {}, []  # state: 1 on the stack, 2 done

        def visit(name):
            state[name] = 1
            stack.append(name)
            for dep in uses[name]:
                if state.get(dep) == 1:
                    return stack[stack.index(dep):] + [dep]
                if dep not in state:
                    found = visit(dep)
                    if found:
                        return found
            stack.pop()
            state[name] = 2
            return None

        for name in sorted(graph):
            circle = None if name in state else visit(name)
            if circle:
                problems.append(f"{path}: {folder}/ has a call circle: {' -> '.join(circle)}")
                break
    return problems


# engine/'s files in layers, top down (DESIGN.md section 6; the comment above KNOWN_UPWARD_CALLS
# says what each holds). A new file of the folder goes into one of them.
FILE_LAYERS = {
    "engine": [
        ["read_batch.c", "memory_stats.c"],
        ["engine.c"],
        ["stream.c", "substitute.c"],
        ["fusion.c"],
        ["queue.c", "exit_guard.c"],
        ["queue_workers.c"],
        ["execute.c"],
        ["profiler.c", "handoff.c", "deps.c", "queue_epochs.c", "fusion_join.c", "fusion_matmul.c"],
    ],
}


def check_file_layers(root):
    """Calls from a file of a FILE_LAYERS folder up into a file of a higher layer, and files
    that no layer claims."""
    problems = []
    for folder, layers in FILE_LAYERS.items():
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            continue
        rank = {name: n for n, names in enumerate(layers) for name in names}
        for caller, callees in call_graph(path).items():
            if caller not in rank:
                problems.append(f"{os.path.join(path, caller)}:1: {folder}/{caller} is in no layer of "
                                f"{folder}/ (add it to FILE_LAYERS in {__file__})")
                continue
            for callee, names in sorted(callees.items()):
                if callee in rank and rank[callee] < rank[caller]:
                    problems.append(f"{os.path.join(path, caller)}:1: {folder}/{caller} (layer {rank[caller] + 1}) "
                                    f"calls {callee} (layer {rank[callee] + 1}, higher): {', '.join(sorted(names))}")
    return problems


def main(argv):
    root = argv[1] if len(argv) > 1 else "src"
    if not os.path.isdir(root):
        print(f"check_layers: {root}: not a directory", file=sys.stderr)
        return 2
    problems, files, includes = check(root)
    problems += check_nameless(root)
    problems += check_call_circles(root)
    problems += check_file_layers(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} of {includes} includes in {files} files under {root} "
              f"break the layer order, name a backend below the registry or call in a circle", file=sys.stderr)
        return 1
    print(f"check_layers: {includes} includes in {files} files under {root} point to their own "
          f"layer or below ({len(LAYERS)} layers)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
