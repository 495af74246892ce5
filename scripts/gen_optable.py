#!/usr/bin/env python3
"""Reads the op table (src/ir/optable.h, one X(...) row per op) and writes what C macros cannot:
the public header include/kiln/ops.h (prototypes with their doc lines, the call-site list and
the call-site macros of the ops whose signature the table gives), the Python binding's rows of
those ops (python/src/op_table_generated.h: each unary op a Tensor method and a kiln function),
or the table as JSON for other generators.

    scripts/gen_optable.py            # rewrites both generated headers
    scripts/gen_optable.py --check    # exit 1 if either is not what the table gives
    scripts/gen_optable.py --json     # the table as JSON on stdout

Run it after editing a row; CI runs --check (tests/CMakeLists.txt, test_optable_generated)."""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "src", "ir", "optable.h")
HEADER = os.path.join(ROOT, "include", "kiln", "ops.h")
PY_HEADER = os.path.join(ROOT, "python", "src", "op_table_generated.h")
COLUMNS = ["NAME", "name", "arity", "dtype", "shape", "fuse", "grad", "sig", "cpu", "domain"]
ROW = re.compile(r'^\s*X\(\s*(.*?)\s*"((?:[^"\\]|\\.)*)"\s*\)\s*\\?\s*$')
SIGNATURES = {"T": ("(kiln_tensor t)", "(t)"), "AB": ("(kiln_tensor a, kiln_tensor b)", "(a, b)")}


def read_table(path=TABLE):
    """The rows of KILN__OPTABLE, in order, as dicts of the columns (arity as an int)."""
    rows, inside = [], False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.startswith("#define KILN__OPTABLE(X)"):
                inside = True
                continue
            if not inside:
                continue
            m = ROW.match(line)
            if not m:
                break  # the first line that is not a row ends the table
            fields = [v.strip() for v in m.group(1).rstrip(",").split(",")]
            if len(fields) != len(COLUMNS):
                sys.exit(f"{path}:{number}: a row has {len(fields)} columns before the doc, not {len(COLUMNS)}")
            row = dict(zip(COLUMNS, fields))
            row["arity"] = int(row["arity"])
            row["doc"] = m.group(2)
            rows.append(row)
    if not rows:
        sys.exit(f"{path}: no KILN__OPTABLE rows found")
    return rows


def header(rows):
    public = [r for r in rows if r["sig"] in SIGNATURES]
    out = [
        "/* kiln's elementwise ops whose signature the op table gives: generated from src/ir/optable.h",
        " * by scripts/gen_optable.py; do not edit (edit the table's row, then run the script).",
        " * Included by kiln/tensor.h; every op consumes its tensor arguments and returns a new tensor",
        " * (NumPy broadcasting; integers and bools promote to f32 for float math).",
        " *",
        " *   kiln_tensor y = kiln_softsign(kiln_ref(x));   // y = x / (1 + |x|), x kept",
        " */",
        "#ifndef KILN_OPS_H",
        "#define KILN_OPS_H",
        "",
        '#include "kiln/core.h"',
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
    ]
    for r in public:
        params, _ = SIGNATURES[r["sig"]]
        out.append(f"KILN_API kiln_tensor kiln_{r['name']}{params}; /* {r['doc']} */")
    out += ["", "/* The calls that record the caller's file:line, as in core.h's list. */",
            "#define KILN_OPS_API(X) \\"]
    for i, r in enumerate(public):
        params, args = SIGNATURES[r["sig"]]
        out.append(f"    X(kiln_tensor, {r['name']}, {params}, {args})" + (" \\" if i + 1 < len(public) else ""))
    out += ["KILN_OPS_API(KILN__AT_DECLARE)", "",
            "#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)",
            "#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */"]
    for r in public:
        out.append(f"#define kiln_{r['name']}(...) KILN__AT({r['name']}, __VA_ARGS__)")
    out += ["#endif", "", "#ifdef __cplusplus", "}", "#endif", "#endif", ""]
    return "\n".join(out)


def python_rows(rows):
    """The binding's KP_TABLE_UNARY_OPS list (python/src/op_table.h adds the ops outside the table)."""
    unary = [r for r in rows if r["sig"] == "T"]
    out = ["/* The Python binding's rows of the op table's unary ops: generated from src/ir/optable.h by",
           " * scripts/gen_optable.py; do not edit. op_table.h puts them in KP_UNARY_OPS. */",
           "#ifndef KILN_PY_OP_TABLE_GENERATED_H", "#define KILN_PY_OP_TABLE_GENERATED_H", "",
           "#define KP_TABLE_UNARY_OPS(X) \\"]
    for i, r in enumerate(unary):
        out.append(f'    X({r["name"]}, kiln_{r["name"]}, "{r["doc"]}")' + (" \\" if i + 1 < len(unary) else ""))
    out += ["", "#endif", ""]
    return "\n".join(out)


def main(argv):
    rows = read_table()
    if "--json" in argv:
        json.dump({"source": "src/ir/optable.h", "columns": COLUMNS + ["doc"], "ops": rows}, sys.stdout, indent=1)
        print()
        return 0
    outputs = [(HEADER, header(rows)), (PY_HEADER, python_rows(rows))]
    if "--check" in argv:
        stale = []
        for path, text in outputs:
            try:
                with open(path, encoding="utf-8") as f:
                    current = f.read()
            except OSError:
                current = None
            if current != text:
                stale.append(os.path.relpath(path, ROOT))
        if stale:
            print(f"gen_optable: {', '.join(stale)} not what src/ir/optable.h gives: run scripts/gen_optable.py",
                  file=sys.stderr)
            return 1
        print(f"gen_optable: include/kiln/ops.h and python/src/op_table_generated.h match the table ({len(rows)} rows)")
        return 0
    for path, text in outputs:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"gen_optable: wrote include/kiln/ops.h and python/src/op_table_generated.h from {len(rows)} rows")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
