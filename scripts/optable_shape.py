"""The shape op table's part of scripts/gen_optable.py: reads src/ir/shape_table.h (one row per
public view, join, indexing, masking and scan op) and gives what gen_optable writes from it, the
public header include/kiln/shape_ops.h (prototypes with their docs, the call-site list
KILN_SHAPE_OPS_API and the call-site macros; kiln/tensor.h includes it) and the Python binding's
rows python/src/shape_table_generated.h (KP_TABLE_SHAPE_DIM_OPS and KP_TABLE_SHAPE_OFFSET_OPS:
the DIM and OFFSET rows with a py name, which python/src/op_table.h puts in KP_DIM_OPS and
KP_OFFSET_OPS for python/src/ops.c's generic callers; KP_TABLE_SHAPE_CALLS: the rows whose sig
has a caller in python/src/shape_ops.c, split ... unfold). gen_optable.py calls outputs(); the reading and
comment-wrapping helpers are gen_optable's own, passed in, so both parse rows the same way."""
import os
import re
import sys

from optable_linalg import wrap_prototype
from optable_common import arg_names, c_string, call_site_list, call_site_macros_and_close, header_open, row_calls, signature

COLUMNS = ["NAME", "name", "sig", "args", "arity", "dtype", "shape", "kernel", "grad", "tol", "py", "ex", "out",
           "bad", "bad_status"]
# the parameters' C types by a row's sig column (its args column names them)
TYPES = {
    "T": ["kiln_tensor"],
    "SHAPE": ["kiln_tensor", "kiln_shape"],
    "DIMS": ["kiln_tensor", "kiln_dims"],
    "DIM": ["kiln_tensor", "int"],
    "DIM2": ["kiln_tensor", "int", "int"],
    "NARROW": ["kiln_tensor", "int", "int64_t", "int64_t"],
    "SLICE": ["kiln_tensor", "int", "int64_t", "int64_t", "int64_t"],
    "LIST": ["const kiln_tensor *", "int", "int"],
    "INDEX": ["kiln_tensor", "int", "kiln_tensor"],
    "SCATTER": ["kiln_tensor", "int", "kiln_tensor", "kiln_tensor"],
    "SELECT": ["kiln_tensor", "kiln_tensor", "kiln_tensor"],
    "MASK": ["kiln_tensor", "kiln_tensor", "double"],
    "OFFSET": ["kiln_tensor", "int64_t"],
    "ROLL": ["kiln_tensor", "int64_t", "int"],
    "SPLIT": ["kiln_tensor", "int64_t", "int", "kiln_tensor *", "int"],
    "CHUNK": ["kiln_tensor", "int", "int", "kiln_tensor *", "int"],
    "MESHGRID": ["const kiln_tensor *", "int", "kiln_meshgrid_indexing", "kiln_tensor *", "int"],
    "PAD": ["kiln_tensor", "kiln_shape", "kiln_pad_mode", "double"],
    "ONE_HOT": ["kiln_tensor", "int64_t", "kiln_dtype"],
    "SORT": ["kiln_tensor", "int", "bool", "kiln_tensor *"],
    "ARGSORT": ["kiln_tensor", "int", "bool"],
    "TOPK": ["kiln_tensor", "int64_t", "int", "bool", "kiln_tensor *"],
    "UNFOLD": ["kiln_tensor", "int", "int64_t", "int64_t"],
    "CAST": ["kiln_tensor", "kiln_dtype"],
}
# what a sig's function returns when not the one result tensor: int, the count of tensors it
# wrote to its out array (the rest return a kiln_tensor, SORT and TOPK a second one through
# their last parameter)
RETURNS = {"SPLIT": "int", "CHUNK": "int", "MESHGRID": "int"}
DTYPES = ["SAME", "PROMOTE", "SCAN", "I64", "GIVEN"]
SHAPES = ["GIVEN", "PERMUTED", "NARROWED", "SLICED", "EXPANDED", "SQUEEZED", "UNSQUEEZED", "FLATTENED", "SAME",
          "JOINED", "STACKED", "INDEXED", "INDEX", "BROADCAST", "REPEATED", "PIECES", "GRID", "PADDED", "CLASSES",
          "KEPT", "WINDOWS"]
GRADS = ["VIEW", "JOIN", "INDEX", "SELECT", "MASK", "SCAN", "SORT", "CAST", "OPS", "NONE"]
# the sigs whose Python binding python/src/ops.c makes from a row (its generic caller)
PY_SIGS = {"DIM": ("KP_TABLE_SHAPE_DIM_OPS", "t.method(dim), kiln.method(t, dim)"),
           "OFFSET": ("KP_TABLE_SHAPE_OFFSET_OPS", "t.method(diagonal=0), kiln.method(t, diagonal=0)")}
# the sigs whose binding python/src/shape_ops.c makes (one caller per sig, torch's keywords):
# where the function goes (METHOD: t.name(...) and kiln.name(t, ...); MODULE: kiln.name;
# FUNCTIONAL: kiln.nn.functional.name) and how it is called
PY_CALLERS = {
    "SPLIT": ("METHOD", "t.split(split_size, dim=0) -> tuple"),
    "CHUNK": ("METHOD", "t.chunk(chunks, dim=0) -> tuple"),
    "MESHGRID": ("MODULE", "kiln.meshgrid(*tensors, indexing='ij') -> tuple"),
    "PAD": ("FUNCTIONAL", "F.pad(input, pad, mode='constant', value=None)"),
    "ONE_HOT": ("FUNCTIONAL", "F.one_hot(tensor, num_classes=-1) -> i64"),
    "SORT": ("METHOD", "t.sort(dim=-1, descending=False, stable=False) -> (values, indices)"),
    "ARGSORT": ("METHOD", "t.argsort(dim=-1, descending=False, stable=False)"),
    "TOPK": ("METHOD", "t.topk(k, dim=-1, largest=True, sorted=True) -> (values, indices)"),
    "UNFOLD": ("METHOD", "t.unfold(dimension, size, step)"),
}


def read_kernels(path):
    """The names of KILN__SHAPE_KERNELS's rows (X(NAME, "params")), in order."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.find("#define KILN__SHAPE_KERNELS(X)")
    if start < 0:
        sys.exit(f"{path}: no KILN__SHAPE_KERNELS list")
    body = []
    for line in text[start:].splitlines()[1:]:
        body.append(line)
        if not line.rstrip().endswith("\\"):
            break
    return re.findall(r"X\((\w+),", "\n".join(body))


def read_shape_ops(root, read_rows):
    """The rows of KILN__SHAPE_TABLE, each with its C parameters ("params": (type, name) pairs)
    and return type ("returns"); exits naming a row whose columns do not fit, and where the
    rows' kernel column and the kernel list disagree."""
    path = os.path.join(root, "src", "ir", "shape_table.h")
    rows = read_rows(path, "KILN__SHAPE_TABLE", COLUMNS)
    kernels = read_kernels(path)
    for row in rows:
        if row["kernel"] not in kernels + ["NONE", "OPS"]:
            sys.exit(f"{path}: {row['name']}: kernel {row['kernel']} is not in KILN__SHAPE_KERNELS (or NONE, OPS)")
    used = {row["kernel"] for row in rows}
    for k in kernels:
        if k not in used and not k.endswith("_BACKWARD"):
            sys.exit(f"{path}: kernel {k} of KILN__SHAPE_KERNELS: no row runs it (a gradient's is NAME_BACKWARD)")
    for row in rows:
        name = row["name"]
        for column, allowed in (("sig", TYPES), ("dtype", DTYPES), ("shape", SHAPES), ("grad", GRADS)):
            if row[column] not in allowed:
                sys.exit(f"{path}: {name}: no {column} {row[column]} (one of {', '.join(allowed)})")
        names = arg_names(f"{path}: {name}", row["args"])
        types = TYPES[row["sig"]]
        if len(names) != len(types):
            sys.exit(f"{path}: {name}: args names {len(names)} parameters, sig {row['sig']} takes {len(types)}")
        if row["py"] not in ("HAND", "NONE") and row["sig"] not in PY_SIGS and row["sig"] not in PY_CALLERS:
            sys.exit(f"{path}: {name}: a py name needs sig {', '.join(list(PY_SIGS) + list(PY_CALLERS))} (the "
                     "binding's generic callers); else HAND or NONE")
        for column in ("ex", "out", "bad"):
            if not (row[column].startswith("(") and row[column].endswith(")")):
                sys.exit(f"{path}: {name}: {column} {row[column]} is not parenthesised")
        row["arity"] = int(row["arity"])
        if (row["arity"] == 0) != (row["grad"] == "NONE"):
            sys.exit(f"{path}: {name}: arity 0 (no differentiable argument) goes with grad NONE")
        row["params"] = list(zip(types, names))
        row["returns"] = RETURNS.get(row["sig"], "kiln_tensor")
    return rows


def header(rows, wrap_comment):
    """include/kiln/shape_ops.h."""
    out = ["/* kiln's views, joins, splits, indexing, masks, scans and sorts: generated from",
           " * src/ir/shape_table.h by scripts/gen_optable.py (scripts/optable_shape.py); do not edit (edit",
           " * the table's row, then run the script). Included by kiln/tensor.h, after the enums kiln_pad_mode",
           " * and kiln_meshgrid_indexing. Every op consumes its tensor arguments (pass kiln_ref(t) to keep",
           " * t) and runs in every dtype; views share their input's storage.",
           " *",
           " *   kiln_tensor a = kiln_arange(KILN_CPU, KILN_F32, 0, 60, 1);",
           " *   kiln_tensor v = kiln_transpose(kiln_reshape(a, KILN_SHAPE(3, 4, 5)), 0, 2);   // [5, 4, 3], a view",
           " *   kiln_tensor c = kiln_cumsum(v, 0);                                            // running sum along dim 0",
           " */"] + header_open("KILN_SHAPE_OPS_H")
    for r in rows:
        params, _ = signature(r)
        proto = f"KILN_API {r['returns']} kiln_{r['name']}{params};"
        one_line = f"{proto} /* {r['doc']} */"
        if len(r["doc_pieces"]) == 1 and len(one_line) <= 120:
            out.append(one_line)
        else:
            out += wrap_comment(r["doc"])
            out += wrap_prototype(f"KILN_API {r['returns']} kiln_{r['name']}", params) if len(proto) > 120 else [proto]
    out += ["", "/* The calls that record the caller's file:line, as in core.h's list (kiln/tensor.h's",
            " * KILN_TENSOR_API includes it). */"]
    calls = call_site_list("KILN_SHAPE_OPS_API", row_calls(rows))
    for i, r in enumerate(rows):  # the int-returning rows' entries (call_site_list writes kiln_tensor)
        calls[1 + i] = calls[1 + i].replace("X(kiln_tensor, ", f"X({r['returns']}, ", 1)
    out += calls + [""]
    out += call_site_macros_and_close(r["name"] for r in rows)
    return "\n".join(out)


def python_rows(rows):
    """python/src/shape_table_generated.h: one list per generic caller of python/src/ops.c."""
    out = ["/* The Python binding's rows of the shape op table (src/ir/shape_table.h) whose binding a generic",
           " * caller makes: generated by scripts/gen_optable.py (scripts/optable_shape.py); do not edit.",
           " * op_table.h puts the first two in KP_DIM_OPS and KP_OFFSET_OPS; shape_ops.c binds KP_TABLE_SHAPE_CALLS.",
           " * The table's HAND rows are bound in methods.c and module.c. */",
           "#ifndef KILN_PY_SHAPE_TABLE_GENERATED_H", "#define KILN_PY_SHAPE_TABLE_GENERATED_H", ""]
    for sig, (macro, call) in PY_SIGS.items():
        picked = [r for r in rows if r["sig"] == sig and r["py"] not in ("HAND", "NONE")]
        out += [f"/* X(method, function, doc): {call} */", f"#define {macro}(X) \\"]
        for i, r in enumerate(picked):
            out.append(f"    X({r['py']}, kiln_{r['name']}, {c_string(r['doc_pieces'][0].strip())})"
                       + (" \\" if i + 1 < len(picked) else ""))
        out.append("")
    called = [r for r in rows if r["sig"] in PY_CALLERS and r["py"] not in ("HAND", "NONE")]
    out += ["/* X(sig, form, name, function, doc): python/src/shape_ops.c's caller of sig, as torch's; form",
            " * METHOD (t.name(...) and kiln.name(t, ...)), MODULE (kiln.name) or FUNCTIONAL",
            " * (kiln.nn.functional.name):"]
    out += [f" *   {sig:<9} {form:<10} {call}" for sig, (form, call) in PY_CALLERS.items()]
    out += [" */", "#define KP_TABLE_SHAPE_CALLS(X) \\"]
    for i, r in enumerate(called):
        form = PY_CALLERS[r["sig"]][0]
        out.append(f"    X({r['sig']}, {form}, {r['py']}, kiln_{r['name']}, {c_string(r['doc_pieces'][0].strip())})"
                   + (" \\" if i + 1 < len(called) else ""))
    out += ["", "#endif", ""]
    return "\n".join(out)


def outputs(root, read_rows, wrap_comment):
    """[(path, text)] of the files the shape table gives."""
    rows = read_shape_ops(root, read_rows)
    return [(os.path.join(root, "include", "kiln", "shape_ops.h"), header(rows, wrap_comment)),
            (os.path.join(root, "python", "src", "shape_table_generated.h"), python_rows(rows))]
