#!/usr/bin/env python3
"""Reads the op table (src/ir/optable.h, one X(...) row per elementwise op and per scalar variant
of a binary op), the reduction table (src/ir/reduce_table.h, one row per reduction) and the row-op
table (src/ir/row_table.h: softmax, the norms, the losses) and writes what C macros cannot: the public
headers include/kiln/ops.h and include/kiln/nn_ops.h (the norms and losses: kiln/nn.h includes it)
with the prototypes and their docs, the call-site lists and the call-site macros of the ops whose
signature the tables give; the Python binding's rows of those ops (python/src/op_table_generated.h:
each unary op, each reduction with a py name and softmax a Tensor method and a kiln function, each
norm and loss a kiln.nn.functional function); through scripts/optable_linalg.py, the linear-algebra
table's (src/ir/linalg_table.h) header include/kiln/linalg_ops.h and Python rows
python/src/linalg_table_generated.h; or the tables as JSON for other generators.

    scripts/gen_optable.py            # rewrites the generated headers
    scripts/gen_optable.py --check    # exit 1 if one is not what the tables give
    scripts/gen_optable.py --json     # the table as JSON on stdout

Run it after editing a row; CI runs --check (tests/CMakeLists.txt, test_optable_generated)."""
import json
import os
import re
import sys

from optable_common import arg_names, c_string, call_site_list, call_site_macros_and_close, header_open
import optable_linalg  # the linear-algebra table's headers (src/ir/linalg_table.h)
import optable_shape  # the shape op table's headers (src/ir/shape_table.h)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "src", "ir", "optable.h")
REDUCE_TABLE = os.path.join(ROOT, "src", "ir", "reduce_table.h")
ROW_TABLE = os.path.join(ROOT, "src", "ir", "row_table.h")
HEADER = os.path.join(ROOT, "include", "kiln", "ops.h")
PY_HEADER = os.path.join(ROOT, "python", "src", "op_table_generated.h")
COLUMNS = ["NAME", "name", "arity", "dtype", "shape", "fuse", "grad", "sig", "cpu", "domain"]
SCALAR_COLUMNS = ["NAME", "name", "order"]
SCALAR_SIGNATURE = ("(kiln_tensor t, double s)", "(t, s)")
ROW = re.compile(r'^\s*X\(\s*(.*?),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)$')
SIGNATURES = {"T": ("(kiln_tensor t)", "(t)"), "AB": ("(kiln_tensor a, kiln_tensor b)", "(a, b)")}
# the public functions with parameters (KILN__OPTABLE_PARAMS): their C types by sig kind (the args
# column names them); a row of KILN__OPTABLE whose sig is one of these but T has its entry
PARAM_COLUMNS = ["NAME", "name", "sig", "args"]
PARAM_TYPES = {"T": ["kiln_tensor"], "T_D": ["kiln_tensor", "double"], "T_DD": ["kiln_tensor"] + ["double"] * 2,
               "T_DDD": ["kiln_tensor"] + ["double"] * 3, "ABC": ["kiln_tensor"] * 3,
               "AB_D": ["kiln_tensor"] * 2 + ["double"]}
ROW_SIGS = ["NONE"] + list(SIGNATURES) + [k for k in PARAM_TYPES if k != "T"]
REDUCE_COLUMNS = ["NAME", "name", "dtype", "sig", "grad", "fold", "finish", "fuse", "py"]
ROW_COLUMNS = ["NAME", "name", "arity", "dims", "args", "ex", "dtype", "shape", "grad", "domain", "tol", "py"]
# the parameters' C types by a row's dims column and arity (the args column names them)
ROW_TYPES = {
    "DIM": lambda n: ["kiln_tensor", "int"],
    "NORMALIZED": lambda n: ["kiln_tensor", "kiln_shape"] + ["kiln_tensor"] * (n - 1) + ["double"],
    "GROUPS": lambda n: ["kiln_tensor", "int64_t"] + ["kiln_tensor"] * (n - 1) + ["double"],
    "NONE": lambda n: ["kiln_tensor"] * n,
    "NONE_K": lambda n: ["kiln_tensor"] * n + ["double"],
    "NONE_FLAG": lambda n: ["kiln_tensor"] * n + ["bool"],
    "CLASSES": lambda n: ["kiln_tensor"] * n,
    "CLASSES_OPT": lambda n: ["kiln_tensor"] * n + ["kiln_cross_entropy_options"],
}
ROW_DIMS = list(ROW_TYPES)
# a row's second public form by its ex column: (the last parameter, the doc line)
ROW_EX = {"REDUCTION": ("kiln_reduction reduction", "with PyTorch's reduction: MEAN, SUM or NONE (the inputs' shape)"),
          "OPTIONS": ("kiln_cross_entropy_options o", "with o's class_weights, ignore_index and reduction"),
          "NO": None}
NN_HEADER = os.path.join(ROOT, "include", "kiln", "nn_ops.h")
LINALG_TABLE = os.path.join(ROOT, "src", "ir", "linalg_table.h")
LINALG_COLUMNS = optable_linalg.COLUMNS
# the reduction table's grad (the gradient rule's kind), fold and finish columns (reduce_table.h)
REDUCE_GRADS = ["NONE", "SPREAD", "MEAN", "WINNERS", "PROD", "VAR", "SOFTMAX"]
REDUCE_FOLDS = ["NONE", "SUM", "PROD", "MAX", "MIN", "SQDEV", "EXPSUM"]
REDUCE_FINISHES = ["NONE", "VALUE", "MEAN", "VAR", "LSE", "INDEX"]
# a reduction's public functions by its sig column: (suffix, parameters, arguments) each
DIMS = ("_dims", "(kiln_tensor t, kiln_dims dims, bool keepdim)", "(t, dims, keepdim)")
REDUCE_SIGNATURES = {
    "ALL_DIMS": [("", "(kiln_tensor t)", "(t)"), DIMS],
    "DIMS": [DIMS],
    "CORRECTION": [("_dims", "(kiln_tensor t, kiln_dims dims, int correction, bool keepdim)",
                    "(t, dims, correction, keepdim)")],
    "DIM": [("", "(kiln_tensor t, int dim, bool keepdim)", "(t, dim, keepdim)")],
}


def split_fields(text):
    """The comma-separated fields of a row, commas inside parentheses kept (the args column)."""
    fields, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            fields.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        fields.append(tail)
    return fields


def read_rows(path, macro, columns):
    """The rows of `#define macro(X)` in path, in order, as dicts of the columns and the doc. A row
    starts with X( on its line; its doc is the string literals at its end, on that line or on the
    lines below it (pieces: the first is the one-line doc, the rest the details)."""
    rows, inside, pending, first = [], False, None, 0
    with open(path, encoding="utf-8") as f:
        lines = list(enumerate(f, 1))
    for number, line in lines:
        if line.startswith(f"#define {macro}(X)"):
            inside = True
            continue
        if not inside:
            continue
        text = line.rstrip("\n").rstrip()
        text = text[:-1].rstrip() if text.endswith("\\") else text
        if pending is None:
            if not text.lstrip().startswith("X("):
                break  # the first line that is not a row ends the table
            pending, first = text.strip(), number
        else:
            pending += " " + text.strip()
        m = ROW.match(pending)
        if not m:
            if not line.rstrip().endswith("\\"):
                sys.exit(f"{path}:{first}: a row that does not end with its doc string")
            continue
        fields = split_fields(m.group(1))
        if len(fields) != len(columns):
            sys.exit(f"{path}:{first}: a row has {len(fields)} columns before the doc, not {len(columns)}")
        row = dict(zip(columns, fields))
        row["doc_pieces"] = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
        row["doc"] = "".join(row["doc_pieces"])
        rows.append(row)
        pending = None
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


def read_params(path=TABLE, rows=None):
    """The rows of KILN__OPTABLE_PARAMS, each with its C parameters ("params": (type, name) pairs);
    every row of the op table whose sig has parameters has the entry of its own name and sig."""
    rows = rows or read_table(path)
    by_name = {r["NAME"]: r for r in rows}
    names = {r["name"]: r for r in rows}
    out = read_rows(path, "KILN__OPTABLE_PARAMS", PARAM_COLUMNS)
    for p in out:
        where = f"{path}: {p['name']}"
        if p["NAME"] not in by_name:
            sys.exit(f"{where}: {p['NAME']} is not a row of KILN__OPTABLE")
        if p["sig"] not in PARAM_TYPES:
            sys.exit(f"{where}: no sig {p['sig']} (one of {', '.join(PARAM_TYPES)})")
        args = p["args"]
        param_names = arg_names(where, args)
        types = PARAM_TYPES[p["sig"]]
        if len(param_names) != len(types) or not all(re.fullmatch(r"[a-z_][a-z0-9_]*", a) for a in param_names):
            sys.exit(f"{where}: args {args} do not fit sig {p['sig']} ({', '.join(types)})")
        p["params"] = list(zip(types, param_names))
        own = names.get(p["name"])
        if own and (own is not by_name[p["NAME"]] or own["sig"] != p["sig"]):
            sys.exit(f"{where}: the row {own['NAME']} has sig {own['sig']}: its entry runs it, with that sig")
        if own and types.count("kiln_tensor") != own["arity"]:
            sys.exit(f"{where}: sig {p['sig']} takes {types.count('kiln_tensor')} tensors, the row's arity is {own['arity']}")
    seen = {p["name"] for p in out}
    if len(seen) != len(out):
        sys.exit(f"{path}: KILN__OPTABLE_PARAMS names a function twice")
    for r in rows:
        if r["sig"] not in ROW_SIGS:
            sys.exit(f"{path}: {r['name']}: no sig {r['sig']} (one of {', '.join(ROW_SIGS)})")
        if r["sig"] not in ("NONE",) + tuple(SIGNATURES) and r["name"] not in seen:
            sys.exit(f"{path}: {r['name']}: sig {r['sig']} without its KILN__OPTABLE_PARAMS entry")
    return out


def param_functions(params):
    """(name, parameters, arguments, doc) of the public functions with parameters."""
    out = []
    for p in params:
        decl = ", ".join(f"{t} {n}" for t, n in p["params"])
        out.append((p["name"], f"({decl})", "(" + ", ".join(n for _, n in p["params"]) + ")", p["doc"]))
    return out


def read_reductions(path=REDUCE_TABLE):
    """The reduction table's rows, KERNEL rows (kind "kernel": an opcode of their own) first."""
    rows = []
    for macro, kind in (("KILN__REDUCE_KERNELS", "kernel"), ("KILN__REDUCE_COMPOSED", "composed")):
        for row in read_rows(path, macro, REDUCE_COLUMNS):
            if row["sig"] not in REDUCE_SIGNATURES:
                sys.exit(f"{path}: {row['name']}: no signature {row['sig']} (one of {', '.join(REDUCE_SIGNATURES)})")
            for column, known in (("grad", REDUCE_GRADS), ("fold", REDUCE_FOLDS), ("finish", REDUCE_FINISHES)):
                if row[column] not in known:
                    sys.exit(f"{path}: {row['name']}: no {column} {row[column]} (one of {', '.join(known)})")
                if (row[column] == "NONE") != (kind == "composed") and column != "grad":
                    sys.exit(f"{path}: {row['name']}: a {kind.upper()} row's {column} is "
                             f"{'NONE' if kind == 'composed' else 'not NONE (its kernel folds and finishes)'}")
            if row["fuse"] not in ("NONE", "LAST") or (row["fuse"] == "LAST" and kind == "composed"):
                sys.exit(f"{path}: {row['name']}: fuse {row['fuse']} (NONE, or LAST for a KERNEL row)")
            row["kind"] = kind
            rows.append(row)
    return rows


def read_row_ops(path=ROW_TABLE):
    """The row-op table's rows, KERNEL rows (kind "kernel": an opcode and a wrapper in api/) first;
    each with its C parameters ("params": (type, name) pairs) and Python defaults ("defaults")."""
    rows = []
    for macro, kind in (("KILN__ROW_KERNELS", "kernel"), ("KILN__ROW_COMPOSED", "composed")):
        for row in read_rows(path, macro, ROW_COLUMNS):
            if row["dims"] not in ROW_TYPES:
                sys.exit(f"{path}: {row['name']}: no dims {row['dims']} (one of {', '.join(ROW_DIMS)})")
            if kind == "kernel" and row["dims"] != "DIM":
                sys.exit(f"{path}: {row['name']}: a KERNEL row's wrapper (api/reduce.c) takes dims DIM")
            if row["ex"] not in ROW_EX:
                sys.exit(f"{path}: {row['name']}: no ex {row['ex']} (one of {', '.join(ROW_EX)})")
            row["arity"] = int(row["arity"])
            types = ROW_TYPES[row["dims"]](row["arity"])
            args = row["args"]
            if not (args.startswith("(") and args.endswith(")")):
                sys.exit(f"{path}: {row['name']}: args {args} is not a parenthesised list of names")
            names = [a.strip() for a in args[1:-1].split(",")]
            if len(names) != len(types):
                sys.exit(f"{path}: {row['name']}: args names {len(names)} parameters, dims {row['dims']} "
                         f"with arity {row['arity']} takes {len(types)}")
            row["params"] = [(t, n.split("=")[0].strip()) for t, n in zip(types, names)]
            row["defaults"] = {n.split("=")[0].strip(): n.split("=", 1)[1].strip() for n in names if "=" in n}
            row["kind"] = kind
            rows.append(row)
    return rows


def read_linalg(path=LINALG_TABLE):
    """The linear-algebra table's rows (scripts/optable_linalg.py writes their files), for --json."""
    return optable_linalg.read(read_rows, path)


def row_functions(row):
    """(name, parameters, arguments, doc) of a row's public functions: kiln_name, and kiln_name_ex
    when its ex column gives one."""
    params = ", ".join(f"{t} {n}" for t, n in row["params"])
    args = ", ".join(n for _, n in row["params"])
    out = [(row["name"], f"({params})", f"({args})", row["doc"])]
    if ROW_EX[row["ex"]]:
        last, doc = ROW_EX[row["ex"]]
        out.append((row["name"] + "_ex", f"({params}, {last})", f"({args}, {last.split()[-1]})", doc))
    return out


def wrap_comment(text, width=100):
    """text as a block comment of lines at most width long."""
    words, lines, line = [], [], "/*"
    for w in text.split():  # a lone "*" (multiplication) stays with the word after it
        if words and words[-1] == "*":
            words[-1] += " " + w
        else:
            words.append(w)
    for w in words:
        if len(line) + 1 + len(w) > width - 3:
            lines.append(line)
            line = " *"
        line += " " + w
    lines.append(line + " */")
    return lines


def reduce_functions(reductions):
    """(name, parameters, arguments, doc) of every public function of the reduction rows."""
    out = []
    for r in reductions:
        for i, (suffix, params, args) in enumerate(REDUCE_SIGNATURES[r["sig"]]):
            doc = r["doc"] if i == 0 else "over dims"
            out.append((r["name"] + suffix, params, args, doc))
    return out


def header(rows, scalars, param_rows, reductions, row_ops):
    public = [r for r in rows if r["sig"] in SIGNATURES]
    scalar_calls = [(r["name"],) + SCALAR_SIGNATURE for r in scalars]
    param_calls = [f[:3] for f in param_functions(param_rows)]
    row_calls = [f[:3] for r in row_ops if r["kind"] == "kernel" for f in row_functions(r)]
    calls = [(r["name"],) + SIGNATURES[r["sig"]] for r in public] + scalar_calls + param_calls + \
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
    ] + header_open("KILN_OPS_H")
    for r in public:
        params, _ = SIGNATURES[r["sig"]]
        out.append(f"KILN_API kiln_tensor kiln_{r['name']}{params}; /* {r['doc']} */")
    out += ["", "/* Scalar variants: the binary op with the double s as its other operand (rsub and rdiv: s first).",
            " * The scalar takes the tensor's dtype (a float scalar promotes an integer or bool tensor to f32,",
            " * a whole one a bool tensor to i64, as PyTorch). */"]
    for r in scalars:
        out.append(f"KILN_API kiln_tensor kiln_{r['name']}{SCALAR_SIGNATURE[0]}; /* {r['doc']} */")
    out += ["", "/* Ops with parameters (KILN__OPTABLE_PARAMS): the rows that take doubles or three tensors, and",
            " * compositions of a row with other parameters. */"]
    for name, decl, _, doc in param_functions(param_rows):
        out += wrap_comment(doc)
        out.append(f"KILN_API kiln_tensor kiln_{name}{decl};")
    out += ["",
            "/* Reductions. kiln_name(t): over every dim, to a 0-d tensor. kiln_name_dims(t, dims, keepdim):",
            " * over a dim list (KILN_ALL_DIMS for all; an empty list reduces nothing), the reduced dims",
            " * dropped, or kept as size 1 if keepdim. var and std take a correction (1: unbiased, Bessel's;",
            " * 0: the population's) before keepdim; argmax and argmin one dim. */"]
    for name, params, _, doc in reduce_functions(reductions):
        out.append(f"KILN_API kiln_tensor kiln_{name}{params}; /* {doc} */")
    out += ["", "/* Row ops (src/ir/row_table.h): along one dim, same shape (the norms and losses of the table",
            " * are in kiln/nn_ops.h). */"]
    for name, params, _, doc in (f for r in row_ops if r["kind"] == "kernel" for f in row_functions(r)):
        out.append(f"KILN_API kiln_tensor kiln_{name}{params}; /* {doc} */")
    out += ["", "/* The calls that record the caller's file:line, as in core.h's list: the elementwise ops'",
            " * (KILN_OPS_ELEMENTWISE_API: a tensor or two in, one out), their scalar variants', the ops'",
            " * with parameters, the reductions', the row ops' and all five. */"]
    elementwise = [(r["name"],) + SIGNATURES[r["sig"]] for r in public]
    for macro, rows in (("KILN_OPS_ELEMENTWISE_API", elementwise), ("KILN_OPS_SCALAR_API", scalar_calls),
                        ("KILN_OPS_PARAMS_API", param_calls),
                        ("KILN_OPS_REDUCE_API", [f[:3] for f in reduce_functions(reductions)]),
                        ("KILN_OPS_ROW_API", row_calls)):
        out += call_site_list(macro, rows, declare=False)
    out += ["#define KILN_OPS_API(X) KILN_OPS_ELEMENTWISE_API(X) KILN_OPS_SCALAR_API(X) KILN_OPS_PARAMS_API(X) \\",
            "    KILN_OPS_REDUCE_API(X) KILN_OPS_ROW_API(X)",
            "KILN_OPS_API(KILN__AT_DECLARE)", ""]
    out += call_site_macros_and_close(name for name, _, _ in calls)
    return "\n".join(out)


def nn_header(row_ops):
    """include/kiln/nn_ops.h: the COMPOSED rows' prototypes (with their docs), call-site list
    KILN_NN_ROW_API and call-site macros; kiln/nn.h includes it after the losses' types."""
    calls = [f for r in row_ops if r["kind"] == "composed" for f in row_functions(r)]
    out = ["/* kiln's norms and losses, the row-op table's COMPOSED rows (made of other ops in src/nn/):",
           " * generated from src/ir/row_table.h by scripts/gen_optable.py; do not edit (edit the row, then",
           " * run the script). Included by kiln/nn.h, after the losses' types (kiln_reduction,",
           " * kiln_cross_entropy_options). Every function consumes its tensor arguments and is",
           " * differentiable in its float ones; bad input gives a poisoned tensor naming the function.",
           " *",
           " *   kiln_tensor mse = kiln_mse_loss(kiln_ref(x), kiln_ref(y));          // 0-d mean; x and y kept",
           " *   kiln_tensor per_elem = kiln_l1_loss_ex(x, y, KILN_REDUCTION_NONE);  // x's shape; both consumed",
           " */"] + header_open("KILN_NN_OPS_H")
    for r in row_ops:
        if r["kind"] != "composed":
            continue
        for i, (name, params, _, doc) in enumerate(row_functions(r)):
            if i == 0:
                out += wrap_comment(doc)
                out.append(f"KILN_API kiln_tensor kiln_{name}{params};")
            else:
                out.append(f"KILN_API kiln_tensor kiln_{name}{params}; /* {doc} */")
    out += ["", "/* The calls that record the caller's file:line, as in core.h's list. */"]
    out += call_site_list("KILN_NN_ROW_API", [c[:3] for c in calls]) + [""]
    out += call_site_macros_and_close(c[0] for c in calls)
    return "\n".join(out)


def python_default(row, name, fallback):
    """The C value of a parameter's Python default (None: NaN for a double)."""
    v = row["defaults"].get(name)
    if v is None:
        return fallback
    return {"None": "NAN", "False": "0", "True": "1"}.get(v, v)


def python_rows(rows, reductions, row_ops):
    """The binding's KP_TABLE_UNARY_OPS, KP_TABLE_REDUCE_OPS, KP_TABLE_DIM_OPS and
    KP_TABLE_ROW_FUNCTIONS lists (python/src/op_table.h adds the ops outside the tables)."""
    unary = [r for r in rows if r["sig"] == "T"]
    reduce = [r for r in reductions if r["py"] != "HAND"]
    for r in reduce:
        if r["sig"] not in ("ALL_DIMS", "DIMS"):
            sys.exit(f"{REDUCE_TABLE}: {r['name']}: a py name needs signature ALL_DIMS or DIMS (else HAND)")
    out = ["/* The Python binding's rows of the op table's unary ops, of the reduction table's rows with a",
           " * py name and of the row-op table's rows: generated from src/ir/optable.h, src/ir/reduce_table.h",
           " * and src/ir/row_table.h by scripts/gen_optable.py; do not edit. op_table.h puts them in",
           " * KP_UNARY_OPS, KP_REDUCE_OPS and KP_DIM_OPS; functional_rows.c makes the row functions. */",
           "#ifndef KILN_PY_OP_TABLE_GENERATED_H", "#define KILN_PY_OP_TABLE_GENERATED_H", "",
           "#define KP_TABLE_UNARY_OPS(X) \\"]
    for i, r in enumerate(unary):
        out.append(f'    X({r["name"]}, kiln_{r["name"]}, "{r["doc"]}")' + (" \\" if i + 1 < len(unary) else ""))
    out += ["", "/* X(method, whole-tensor function or 0, dims function, doc): t.method(dim=None, keepdim=False) */",
            "#define KP_TABLE_REDUCE_OPS(X) \\"]
    for i, r in enumerate(reduce):
        whole = f"kiln_{r['name']}" if r["sig"] == "ALL_DIMS" else "0"
        out.append(f'    X({r["py"]}, {whole}, kiln_{r["name"]}_dims, "{r["doc"]}")' + (" \\" if i + 1 < len(reduce) else ""))
    dim_rows = [r for r in row_ops if r["dims"] == "DIM"]
    out += ["", "/* X(method, function, doc): t.method(dim), kiln.method(t, dim) */", "#define KP_TABLE_DIM_OPS(X) \\"]
    for i, r in enumerate(dim_rows):
        out.append(f'    X({r["py"]}, kiln_{r["name"]}, {c_string(r["doc_pieces"][0])})' + (" \\" if i + 1 < len(dim_rows) else ""))
    functions = [r for r in row_ops if r["dims"] != "DIM"]
    out += ["", "/* X(dims, arity, name, function, _ex function or 0, parameter's name or \"\", its default, doc):",
            " * kiln.nn.functional.name, called as torch's (functional_rows.c: one caller per dims kind) */",
            "#define KP_TABLE_ROW_FUNCTIONS(X) \\"]
    for i, r in enumerate(functions):
        scalar = [n for t, n in r["params"] if t in ("double", "bool")]
        pname = scalar[0] if scalar else ""
        dflt = python_default(r, pname, "0") if pname else "0"
        ex = f"kiln_{r['name']}_ex" if ROW_EX[r["ex"]] else "0"
        out.append(f'    X({r["dims"]}, {r["arity"]}, {r["py"]}, kiln_{r["name"]}, {ex}, "{pname}", {dflt}, {c_string(r["doc"])})'
                   + (" \\" if i + 1 < len(functions) else ""))
    out += ["", "#endif", ""]
    return "\n".join(out)


def main(argv):
    rows, reductions = read_table(), read_reductions()
    scalars = read_scalars(rows=rows)
    params = read_params(rows=rows)
    row_ops = read_row_ops()
    if "--json" in argv:
        json.dump({"source": "src/ir/optable.h", "columns": COLUMNS + ["doc"], "ops": rows,
                   "scalar_columns": SCALAR_COLUMNS + ["doc"], "scalars": scalars,
                   "param_columns": PARAM_COLUMNS + ["doc"], "params": params,
                   "reduce_source": "src/ir/reduce_table.h", "reduce_columns": REDUCE_COLUMNS + ["doc", "kind"],
                   "reductions": reductions, "row_source": "src/ir/row_table.h",
                   "row_columns": ROW_COLUMNS + ["doc", "kind"], "row_ops": row_ops,
                   "linalg_source": "src/ir/linalg_table.h", "linalg_columns": LINALG_COLUMNS + ["doc"],
                   "linalg_ops": read_linalg()}, sys.stdout, indent=1)
        print()
        return 0
    outputs = [(HEADER, header(rows, scalars, params, reductions, row_ops)), (NN_HEADER, nn_header(row_ops)),
               (PY_HEADER, python_rows(rows, reductions, row_ops))]
    outputs += optable_linalg.outputs(read_rows, wrap_comment)
    outputs += optable_shape.outputs(ROOT, read_rows, wrap_comment)
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
            print(f"gen_optable: {', '.join(stale)} not what the tables in src/ir/ give: run scripts/gen_optable.py",
                  file=sys.stderr)
            return 1
        print(f"gen_optable: {', '.join(os.path.relpath(p, ROOT) for p, _ in outputs)} match the tables "
              f"({len(rows)} ops, {len(reductions)} reductions, {len(row_ops)} row ops)")
        return 0
    for path, text in outputs:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"gen_optable: wrote {', '.join(os.path.relpath(p, ROOT) for p, _ in outputs)} from {len(rows)} ops, "
          f"{len(reductions)} reductions and {len(row_ops)} row ops")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
