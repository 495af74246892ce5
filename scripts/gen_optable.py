#!/usr/bin/env python3
"""Reads the op table (src/ir/optable.h, one X(...) row per op) and writes what C macros cannot:
the public header include/kiln/ops.h (prototypes with their doc lines, the call-site list and
the call-site macros of the ops whose signature the table gives), or the table as JSON for
other generators (the Python binding's method table).

    scripts/gen_optable.py            # rewrites include/kiln/ops.h
    scripts/gen_optable.py --check    # exit 1 if include/kiln/ops.h is not what the table gives
    scripts/gen_optable.py --json     # the table as JSON on stdout

Run it after editing a row; CI runs --check (tests/CMakeLists.txt, test_optable_generated)."""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "src", "ir", "optable.h")
HEADER = os.path.join(ROOT, "include", "kiln", "ops.h")
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


def main(argv):
    rows = read_table()
    if "--json" in argv:
        json.dump({"source": "src/ir/optable.h", "columns": COLUMNS + ["doc"], "ops": rows}, sys.stdout, indent=1)
        print()
        return 0
    text = header(rows)
    if "--check" in argv:
        try:
            with open(HEADER, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            print(f"gen_optable: {HEADER} is not what src/ir/optable.h gives: run scripts/gen_optable.py",
                  file=sys.stderr)
            return 1
        print(f"gen_optable: include/kiln/ops.h matches the table ({len(rows)} rows)")
        return 0
    with open(HEADER, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"gen_optable: wrote include/kiln/ops.h from {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
