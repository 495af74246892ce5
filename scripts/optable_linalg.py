"""The linear-algebra table's part of scripts/gen_optable.py: from src/ir/linalg_table.h (matmul,
bmm, linear, conv2d, scaled_dot_product_attention, batch_norm, the pools) it writes the public header
include/kiln/linalg_ops.h (each row's prototype under its doc, the call-site lists
KILN_LINALG_API and KILN_NN_LINALG_API by the row's layer column, and the call-site macros;
kiln/tensor.h includes it) and the Python binding's rows python/src/linalg_table_generated.h
(KP_TABLE_LINALG_METHODS: kiln.name and Tensor.name, in op_table.h's BINARY form;
KP_TABLE_LINALG_FUNCTIONS: kiln.nn.functional.name, one caller per sig in
python/src/functional_linalg.c). gen_optable.py imports it and passes its row reader and comment
wrapper; run gen_optable.py, not this."""
import os
import sys

from optable_common import arg_names, c_string, call_site_list, call_site_macros_and_close, header_open, row_calls, signature

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "src", "ir", "linalg_table.h")
HEADER = os.path.join(ROOT, "include", "kiln", "linalg_ops.h")
PY_HEADER = os.path.join(ROOT, "python", "src", "linalg_table_generated.h")
COLUMNS = ["NAME", "name", "arity", "sig", "args", "dtype", "shape", "kernel", "grad", "tol", "layer", "py"]
# the parameters' C types by a row's sig column (its args column names them)
TYPES = {
    "AB": ["kiln_tensor"] * 2,
    "LINEAR": ["kiln_tensor"] * 3,
    "CONV2D": ["kiln_tensor"] * 3 + ["int"] * 7,
    "ATTENTION": ["kiln_tensor"] * 4 + ["bool", "double"],
    "ADDMM": ["kiln_tensor"] * 3 + ["double"] * 2,
    "BATCH_NORM": ["kiln_tensor", "kiln_tensor *", "kiln_tensor *", "kiln_tensor", "kiln_tensor", "bool", "double",
                   "double"],
    "POOL2D": ["kiln_tensor"] + ["int"] * 6,
    "ADAPTIVE_POOL2D": ["kiln_tensor", "int", "int"],
    "POOL2D_OPTS": ["kiln_tensor", "kiln_pool2d_options"],  # the type: kiln/tensor.h, before it includes the header
}
LISTS = {"API": "KILN_LINALG_API", "NN": "KILN_NN_LINALG_API"}
PY_FORMS = ("METHOD", "FUNCTIONAL", "NONE")  # NONE: no Python form yet


def read(read_rows, path=TABLE):
    """The rows, each with its C parameters ("params": (type, name) pairs); exits naming the
    row whose columns do not fit."""
    rows = read_rows(path, "KILN__LINALG_TABLE", COLUMNS)
    for row in rows:
        row["arity"] = int(row["arity"])
        where = f"{path}: {row['name']}"
        if row["sig"] not in TYPES:
            sys.exit(f"{where}: no sig {row['sig']} (one of {', '.join(TYPES)})")
        if row["layer"] not in LISTS:
            sys.exit(f"{where}: no layer {row['layer']} (one of {', '.join(LISTS)})")
        if row["py"] not in PY_FORMS or (row["py"] == "METHOD" and row["sig"] != "AB"):
            sys.exit(f"{where}: py {row['py']}: METHOD (sig AB only), FUNCTIONAL or NONE")
        names = arg_names(where, row["args"])
        types = TYPES[row["sig"]]
        if len(names) != len(types):
            sys.exit(f"{where}: args names {len(names)} parameters, sig {row['sig']} takes {len(types)}")
        if sum(t.startswith("kiln_tensor") for t in types) != row["arity"]:
            sys.exit(f"{where}: arity {row['arity']} is not sig {row['sig']}'s count of tensors")
        row["params"] = list(zip(types, names))
    return rows


def wrap_prototype(head, params, width=120):
    """head(params); as lines at most width long, the parameters continued under the first."""
    lines, line = [], head + "("
    indent = " " * len(line)
    parts = params[1:-1].split(", ")
    for i, part in enumerate(parts):
        piece = part + (", " if i + 1 < len(parts) else ");")
        if len(line) + len(piece.rstrip()) > width and line.strip() != head.strip() + "(":
            lines.append(line.rstrip())
            line = indent
        line += piece
    return lines + [line]


def header(rows, wrap_comment):
    out = ["/* kiln's linear-algebra ops (the products, the convolution, attention, batch norm and the pools):",
           " * generated from src/ir/linalg_table.h by scripts/gen_optable.py; do not edit (edit the row, then",
           " * run the script). Included by kiln/tensor.h, after kiln_pool2d_options. Every op consumes its",
           " * tensor arguments (batch norm's running statistics excepted), is differentiable in its float",
           " * ones, and gives a poisoned tensor naming the op and the caller's line on bad input.",
           " *",
           " *   kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(10, 784), 1);",
           " *   kiln_tensor h = kiln_linear(kiln_ref(x), kiln_ref(w), KILN_NONE);  // x [.., 784] -> [.., 10]; x, w kept",
           " *   kiln_tensor back = kiln_matmul(h, w);                               // [.., 10] @ [10, 784]; h, w consumed",
           " */"] + header_open("KILN_LINALG_OPS_H")
    for row in rows:
        params, _ = signature(row)
        pieces = row["doc_pieces"]
        out += wrap_comment(pieces[0] + ("." + "".join(pieces[1:]) if len(pieces) > 1 else ""))
        out += wrap_prototype(f"KILN_API kiln_tensor kiln_{row['name']}", params)
    out += ["", "/* The calls that record the caller's file:line, as in core.h's list: the ones defined in the",
            " * API layer (src/api/) and in the nn layer (src/nn/), by the rows' layer column. */"]
    for layer, macro in LISTS.items():
        out += call_site_list(macro, row_calls([r for r in rows if r["layer"] == layer]))
    out += [""] + call_site_macros_and_close(r["name"] for r in rows)
    return "\n".join(out)


def python_rows(rows):
    out = ["/* The Python binding's rows of the linear-algebra table: generated from src/ir/linalg_table.h by",
           " * scripts/gen_optable.py; do not edit. op_table.h puts the METHOD rows in KP_BINARY_OPS (kiln.name,",
           " * Tensor.name); functional_linalg.c makes the FUNCTIONAL rows kiln.nn.functional functions. */",
           "#ifndef KILN_PY_LINALG_TABLE_GENERATED_H", "#define KILN_PY_LINALG_TABLE_GENERATED_H", "",
           "/* X(name, function, 0, 0, doc): KP_BINARY_OPS's form (no scalar variants) */",
           "#define KP_TABLE_LINALG_METHODS(X) \\"]
    methods = [r for r in rows if r["py"] == "METHOD"]
    for i, r in enumerate(methods):
        out.append(f'    X({r["name"]}, kiln_{r["name"]}, 0, 0, {c_string(r["doc_pieces"][0])})'
                   + (" \\" if i + 1 < len(methods) else ""))
    functions = [r for r in rows if r["py"] == "FUNCTIONAL"]
    out += ["", "/* X(sig, name, function, doc): kiln.nn.functional.name, called as torch's */",
            "#define KP_TABLE_LINALG_FUNCTIONS(X) \\"]
    for i, r in enumerate(functions):
        out.append(f'    X({r["sig"]}, {r["name"]}, kiln_{r["name"]}, {c_string(r["doc_pieces"][0])})'
                   + (" \\" if i + 1 < len(functions) else ""))
    out += ["", "#endif", ""]
    return "\n".join(out)


def outputs(read_rows, wrap_comment):
    """[(path, text)] of the files the linear-algebra table gives."""
    rows = read(read_rows)
    return [(HEADER, header(rows, wrap_comment)), (PY_HEADER, python_rows(rows))]
