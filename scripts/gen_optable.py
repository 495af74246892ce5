#!/usr/bin/env python3
"""Reads the op table (src/ir/optable.h, one X(...) row per elementwise op and per scalar variant
of a binary op), the reduction table (src/ir/reduce_table.h, one row per reduction) and the row-op
table (src/ir/row_table.h: softmax, the norms, the losses) and writes what C macros cannot: the public
header include/kiln/ops.h (prototypes with their doc lines, the call-site list and the call-site
macros of the ops whose signature the tables give), the Python binding's rows of those ops
(python/src/op_table_generated.h: each unary op and each reduction with a py name a Tensor
method and a kiln function), or the tables as JSON for other generators.

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
REDUCE_TABLE = os.path.join(ROOT, "src", "ir", "reduce_table.h")
ROW_TABLE = os.path.join(ROOT, "src", "ir", "row_table.h")
HEADER = os.path.join(ROOT, "include", "kiln", "ops.h")
PY_HEADER = os.path.join(ROOT, "python", "src", "op_table_generated.h")
COLUMNS = ["NAME", "name", "arity", "dtype", "shape", "fuse", "grad", "sig", "cpu", "domain"]
SCALAR_COLUMNS = ["NAME", "name", "order"]
SCALAR_SIGNATURE = ("(kiln_tensor t, double s)", "(t, s)")
ROW = re.compile(r'^\s*X\(\s*(.*?)\s*"((?:[^"\\]|\\.)*)"\s*\)\s*\\?\s*$')
SIGNATURES = {"T": ("(kiln_tensor t)", "(t)"), "AB": ("(kiln_tensor a, kiln_tensor b)", "(a, b)")}
REDUCE_COLUMNS = ["NAME", "name", "dtype", "sig", "grad", "py"]
ROW_COLUMNS = ["NAME", "name", "arity", "dims", "dtype", "shape", "grad", "domain", "tol"]
ROW_DIMS = ["DIM", "NORMALIZED", "GROUPS", "NONE", "NONE_K", "NONE_FLAG", "CLASSES", "CLASSES_OPT"]
# the public signature of a KERNEL row by its dims column (a COMPOSED row's is in kiln/nn.h)
ROW_SIGNATURES = {"DIM": ("(kiln_tensor t, int dim)", "(t, dim)")}
# a reduction's public functions by its sig column: (suffix, parameters, arguments) each
DIMS = ("_dims", "(kiln_tensor t, kiln_dims dims, bool keepdim)", "(t, dims, keepdim)")
REDUCE_SIGNATURES = {
    "ALL_DIMS": [("", "(kiln_tensor t)", "(t)"), DIMS],
    "DIMS": [DIMS],
    "CORRECTION": [("_dims", "(kiln_tensor t, kiln_dims dims, int correction, bool keepdim)",
                    "(t, dims, correction, keepdim)")],
    "DIM": [("", "(kiln_tensor t, int dim, bool keepdim)", "(t, dim, keepdim)")],
}


def read_rows(path, macro, columns):
    """The rows of `#define macro(X)` in path, in order, as dicts of the columns and the doc."""
    rows, inside = [], False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.startswith(f"#define {macro}(X)"):
                inside = True
                continue
            if not inside:
                continue
            m = ROW.match(line)
            if not m:
                break  # the first line that is not a row ends the table
            fields = [v.strip() for v in m.group(1).rstrip(",").split(",")]
            if len(fields) != len(columns):
                sys.exit(f"{path}:{number}: a row has {len(fields)} columns before the doc, not {len(columns)}")
            row = dict(zip(columns, fields))
            row["doc"] = m.group(2)
            rows.append(row)
    if not rows:
        sys.exit(f"{path}: no {macro} rows found")
    return rows


def read_table(path=TABLE):
    """The rows of KILN__OPTABLE, in order, as dicts of the columns (arity as an int)."""
    rows = read_rows(path, "KILN__OPTABLE", COLUMNS)
    for row in rows:
        row["arity"] = int(row["arity"])
    return rows


def read_scalars(path=TABLE, rows=None):
    """The rows of KILN__OPTABLE_SCALAR: each names a binary row of the op table and an order."""
    binary = {r["NAME"] for r in (rows or read_table(path)) if r["sig"] == "AB"}
    out = read_rows(path, "KILN__OPTABLE_SCALAR", SCALAR_COLUMNS)
    for r in out:
        if r["NAME"] not in binary:
            sys.exit(f"{path}: {r['name']}: {r['NAME']} is not a binary row (signature AB) of KILN__OPTABLE")
        if r["order"] not in ("TS", "ST"):
            sys.exit(f"{path}: {r['name']}: order {r['order']} (TS or ST)")
    return out


def read_reductions(path=REDUCE_TABLE):
    """The reduction table's rows, KERNEL rows (kind "kernel": an opcode of their own) first."""
    rows = []
    for macro, kind in (("KILN__REDUCE_KERNELS", "kernel"), ("KILN__REDUCE_COMPOSED", "composed")):
        for row in read_rows(path, macro, REDUCE_COLUMNS):
            if row["sig"] not in REDUCE_SIGNATURES:
                sys.exit(f"{path}: {row['name']}: no signature {row['sig']} (one of {', '.join(REDUCE_SIGNATURES)})")
            row["kind"] = kind
            rows.append(row)
    return rows


def read_row_ops(path=ROW_TABLE):
    """The row-op table's rows, KERNEL rows (kind "kernel": an opcode and a wrapper in api/) first."""
    rows = []
    for macro, kind in (("KILN__ROW_KERNELS", "kernel"), ("KILN__ROW_COMPOSED", "composed")):
        for row in read_rows(path, macro, ROW_COLUMNS):
            if row["dims"] not in ROW_DIMS:
                sys.exit(f"{path}: {row['name']}: no dims {row['dims']} (one of {', '.join(ROW_DIMS)})")
            if kind == "kernel" and row["dims"] not in ROW_SIGNATURES:
                sys.exit(f"{path}: {row['name']}: a KERNEL row's wrapper (api/reduce.c) takes dims DIM")
            row["arity"] = int(row["arity"])
            row["kind"] = kind
            rows.append(row)
    return rows


def reduce_functions(reductions):
    """(name, parameters, arguments, doc) of every public function of the reduction rows."""
    out = []
    for r in reductions:
        for i, (suffix, params, args) in enumerate(REDUCE_SIGNATURES[r["sig"]]):
            doc = r["doc"] if i == 0 else "over dims"
            out.append((r["name"] + suffix, params, args, doc))
    return out


def header(rows, scalars, reductions, row_ops):
    public = [r for r in rows if r["sig"] in SIGNATURES]
    scalar_calls = [(r["name"],) + SCALAR_SIGNATURE for r in scalars]
    row_calls = [(r["name"],) + ROW_SIGNATURES[r["dims"]] for r in row_ops if r["kind"] == "kernel"]
    calls = [(r["name"],) + SIGNATURES[r["sig"]] for r in public] + scalar_calls + \
        [f[:3] for f in reduce_functions(reductions)] + row_calls
    out = [
        "/* kiln's elementwise ops and reductions whose signature the op tables give: generated from",
        " * src/ir/optable.h and src/ir/reduce_table.h by scripts/gen_optable.py; do not edit (edit the",
        " * table's row, then run the script). Included by kiln/tensor.h; every op consumes its tensor",
        " * arguments and returns a new tensor (NumPy broadcasting; integers and bools promote to f32",
        " * for float math).",
        " *",
        " *   kiln_tensor y = kiln_softsign(kiln_ref(x));   // y = x / (1 + |x|), x kept",
        " *   kiln_tensor m = kiln_mean_dims(y, KILN_DIMS(-1), true);   // y consumed",
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
    out += ["", "/* Scalar variants: the binary op with the double s as its other operand (rsub and rdiv: s first).",
            " * The scalar takes the tensor's dtype (a float scalar promotes an integer or bool tensor to f32,",
            " * a whole one a bool tensor to i64, as PyTorch). */"]
    for r in scalars:
        out.append(f"KILN_API kiln_tensor kiln_{r['name']}{SCALAR_SIGNATURE[0]}; /* {r['doc']} */")
    out += ["",
            "/* Reductions. kiln_name(t): over every dim, to a 0-d tensor. kiln_name_dims(t, dims, keepdim):",
            " * over a dim list (KILN_ALL_DIMS for all; an empty list reduces nothing), the reduced dims",
            " * dropped, or kept as size 1 if keepdim. var and std take a correction (1: unbiased, Bessel's;",
            " * 0: the population's) before keepdim; argmax and argmin one dim. */"]
    for name, params, _, doc in reduce_functions(reductions):
        out.append(f"KILN_API kiln_tensor kiln_{name}{params}; /* {doc} */")
    out += ["", "/* Row ops (src/ir/row_table.h): along one dim, same shape (the norms and losses of the table",
            " * are in kiln/nn.h). */"]
    for r in row_ops:
        if r["kind"] == "kernel":
            out.append(f"KILN_API kiln_tensor kiln_{r['name']}{ROW_SIGNATURES[r['dims']][0]}; /* {r['doc']} */")
    out += ["", "/* The calls that record the caller's file:line, as in core.h's list: the elementwise ops'",
            " * (KILN_OPS_ELEMENTWISE_API: a tensor or two in, one out), their scalar variants', the",
            " * reductions', the row ops' and all four. */"]
    elementwise = [(r["name"],) + SIGNATURES[r["sig"]] for r in public]
    for macro, rows in (("KILN_OPS_ELEMENTWISE_API", elementwise), ("KILN_OPS_SCALAR_API", scalar_calls),
                        ("KILN_OPS_REDUCE_API", [f[:3] for f in reduce_functions(reductions)]),
                        ("KILN_OPS_ROW_API", row_calls)):
        out.append(f"#define {macro}(X) \\")
        for i, (name, params, args) in enumerate(rows):
            out.append(f"    X(kiln_tensor, {name}, {params}, {args})" + (" \\" if i + 1 < len(rows) else ""))
    out += ["#define KILN_OPS_API(X) KILN_OPS_ELEMENTWISE_API(X) KILN_OPS_SCALAR_API(X) KILN_OPS_REDUCE_API(X) \\",
            "    KILN_OPS_ROW_API(X)",
            "KILN_OPS_API(KILN__AT_DECLARE)", "",
            "#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)",
            "#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */"]
    for name, _, _ in calls:
        out.append(f"#define kiln_{name}(...) KILN__AT({name}, __VA_ARGS__)")
    out += ["#endif", "", "#ifdef __cplusplus", "}", "#endif", "#endif", ""]
    return "\n".join(out)


def python_rows(rows, reductions):
    """The binding's KP_TABLE_UNARY_OPS and KP_TABLE_REDUCE_OPS lists (python/src/op_table.h adds
    the ops outside the tables)."""
    unary = [r for r in rows if r["sig"] == "T"]
    reduce = [r for r in reductions if r["py"] != "HAND"]
    for r in reduce:
        if r["sig"] not in ("ALL_DIMS", "DIMS"):
            sys.exit(f"{REDUCE_TABLE}: {r['name']}: a py name needs signature ALL_DIMS or DIMS (else HAND)")
    out = ["/* The Python binding's rows of the op table's unary ops and of the reduction table's rows",
           " * with a py name: generated from src/ir/optable.h and src/ir/reduce_table.h by",
           " * scripts/gen_optable.py; do not edit. op_table.h puts them in KP_UNARY_OPS and",
           " * KP_REDUCE_OPS. */",
           "#ifndef KILN_PY_OP_TABLE_GENERATED_H", "#define KILN_PY_OP_TABLE_GENERATED_H", "",
           "#define KP_TABLE_UNARY_OPS(X) \\"]
    for i, r in enumerate(unary):
        out.append(f'    X({r["name"]}, kiln_{r["name"]}, "{r["doc"]}")' + (" \\" if i + 1 < len(unary) else ""))
    out += ["", "/* X(method, whole-tensor function or 0, dims function, doc): t.method(dim=None, keepdim=False) */",
            "#define KP_TABLE_REDUCE_OPS(X) \\"]
    for i, r in enumerate(reduce):
        whole = f"kiln_{r['name']}" if r["sig"] == "ALL_DIMS" else "0"
        out.append(f'    X({r["py"]}, {whole}, kiln_{r["name"]}_dims, "{r["doc"]}")' + (" \\" if i + 1 < len(reduce) else ""))
    out += ["", "#endif", ""]
    return "\n".join(out)


def main(argv):
    rows, reductions = read_table(), read_reductions()
    scalars = read_scalars(rows=rows)
    row_ops = read_row_ops()
    if "--json" in argv:
        json.dump({"source": "src/ir/optable.h", "columns": COLUMNS + ["doc"], "ops": rows,
                   "scalar_columns": SCALAR_COLUMNS + ["doc"], "scalars": scalars,
                   "reduce_source": "src/ir/reduce_table.h", "reduce_columns": REDUCE_COLUMNS + ["doc", "kind"],
                   "reductions": reductions, "row_source": "src/ir/row_table.h",
                   "row_columns": ROW_COLUMNS + ["doc", "kind"], "row_ops": row_ops}, sys.stdout, indent=1)
        print()
        return 0
    outputs = [(HEADER, header(rows, scalars, reductions, row_ops)), (PY_HEADER, python_rows(rows, reductions))]
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
        print(f"gen_optable: include/kiln/ops.h and python/src/op_table_generated.h match the tables "
              f"({len(rows)} ops, {len(reductions)} reductions)")
        return 0
    for path, text in outputs:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"gen_optable: wrote include/kiln/ops.h and python/src/op_table_generated.h from {len(rows)} ops "
          f"and {len(reductions)} reductions")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
