#!/usr/bin/env python3
"""scripts/gen_optable.py on a copy of the tables (test_optable_generated_rows): a new reduction
row gives its prototypes with the doc line, its call-site entries and macros in
include/kiln/ops.h and its Python row; --check fails until the headers are regenerated; rows the
generator cannot turn into C fail with the table's name instead of writing a header. A new
scalar row of the op table gives its prototype, call-site entry and macro; one naming no binary
row, or no order, is refused. A new entry of its functions with parameters gives the same; one
whose args do not fit its sig, or a row with parameters without its entry, is refused. A new COMPOSED row of the row-op table (a loss, its doc over two
lines) gives its prototypes (and its _ex form's), call-site entries and macros in
include/kiln/nn_ops.h and its kiln.nn.functional row; args that do not fit its dims are refused.
A reduction row's grad, fold and finish must be known (a KERNEL row's fold and finish not NONE, a
COMPOSED row's NONE). A new row of the linear-algebra table gives its prototype with its doc, its
entry in the call-site list of its layer and its macro in include/kiln/linalg_ops.h and its Python
row (a method or a kiln.nn.functional function); an unknown sig, a METHOD that is not AB, or args
that do not fit the sig are refused. A new shape-table row with an output array gives its int
prototype, call-site entry, macro and Python caller's row; a kernel outside the table's list, a
listed kernel no row runs, and arity 0 with a gradient are refused.

    test_optable_generated.py scripts/gen_optable.py"""
import os
import shutil
import subprocess
import sys
import tempfile

FILES = ["scripts/gen_optable.py", "scripts/optable_common.py", "scripts/optable_linalg.py", "src/ir/optable.h", "src/ir/reduce_table.h",
         "src/ir/row_table.h", "src/ir/linalg_table.h", "include/kiln/ops.h", "include/kiln/nn_ops.h",
         "python/src/op_table_generated.h", "include/kiln/linalg_ops.h", "python/src/linalg_table_generated.h",
         "scripts/optable_shape.py", "src/ir/shape_table.h", "include/kiln/shape_ops.h",
         "python/src/shape_table_generated.h"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(tmp, *args):
    return subprocess.run([sys.executable, os.path.join(tmp, "scripts", "gen_optable.py"), *args],
                          capture_output=True, text=True)


def read(tmp, path):
    with open(os.path.join(tmp, path), encoding="utf-8") as f:
        return f.read()


def with_row(tmp, after, row):
    """The reduction table with row added after the line holding `after`."""
    path = os.path.join(tmp, "src", "ir", "reduce_table.h")
    text = read(tmp, "src/ir/reduce_table.h")
    i = text.index(after)
    i = text.index("\n", i) + 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:i] + row + " \\\n" + text[i:])
    return text


def check_ops_row(tmp, text, refused, wants, what):
    """src/ir/optable.h made text: include/kiln/ops.h then holds each of wants or, when refused
    names why, the generator fails naming optable.h and that, and leaves ops.h as it was."""
    with open(os.path.join(tmp, "src", "ir", "optable.h"), "w", encoding="utf-8") as f:
        f.write(text)
    before = read(tmp, "include/kiln/ops.h")
    r = run(tmp)
    out = r.stderr + r.stdout
    if refused is None:
        ops = read(tmp, "include/kiln/ops.h")
        for want in wants:
            check(r.returncode == 0 and want in ops, f"{what} gives {want!r}: {out!r}")
    else:
        check(r.returncode != 0 and "optable.h" in out and refused in out,
              f"{what}, {refused}, is refused: {r.returncode} {out!r}")
        check(read(tmp, "include/kiln/ops.h") == before, f"{what}, {refused}, writes nothing")


def check_scalar_rows(tmp):
    """A scalar row of the op table gives its prototype, call-site entry and macro; one that names
    no binary row, or an order that is not TS or ST, is refused naming optable.h."""
    path = os.path.join(tmp, "src", "ir", "optable.h")
    table = read(tmp, "src/ir/optable.h")
    anchor = "    X(ADD,           add_scalar,"
    i = table.index(anchor)
    wants = ["KILN_API kiln_tensor kiln_atan2_scalar(kiln_tensor t, double s); /* atan2(t, s) */",
             "X(kiln_tensor, atan2_scalar, (kiln_tensor t, double s), (t, s))",
             "#define kiln_atan2_scalar(...) KILN__AT(atan2_scalar, __VA_ARGS__)"]
    for row, refused in [('    X(ATAN2, atan2_scalar, TS, "atan2(t, s)")', None),
                         ('    X(EXP, exp_scalar, TS, "x")', "not a binary row"),
                         ('    X(ATAN2, atan2_scalar, XY, "x")', "order XY")]:
        check_ops_row(tmp, table[:i] + row + " \\\n" + table[i:], refused, wants, "a scalar row")
    with open(path, "w", encoding="utf-8") as f:
        f.write(table)


def check_param_rows(tmp):
    """A new entry of KILN__OPTABLE_PARAMS (a composition of a row, its doc on two lines) gives its
    prototype with the doc, call-site entry and macro; args that do not fit its sig, an unknown sig,
    an unknown row, and a row whose sig has parameters but no entry of its name are refused."""
    path = os.path.join(tmp, "src", "ir", "optable.h")
    table = read(tmp, "src/ir/optable.h")
    anchor = "    X(CLAMP,      clamp,"
    i = table.index(anchor)
    row = ('    X(CLAMP, relu6, T, (t), "torch.nn.functional.relu6: " \\\n'
           '      "clamp to [0, 6]")')
    cases = [(row, None),
             ('    X(CLAMP, clamp_min, T_DD, (t, lo), "x")', "do not fit sig T_DD"),
             ('    X(CLAMP, clamp_min, T_Q, (t, lo), "x")', "no sig T_Q"),
             ('    X(CLAMPS, clamp_min, T_D, (t, lo), "x")', "not a row"),
             ('    X(ELU, leaky_relu, T_D, (t, slope), "x")', "its entry runs it")]
    wants = ["/* torch.nn.functional.relu6: clamp to [0, 6] */\nKILN_API kiln_tensor kiln_relu6(kiln_tensor t);",
             "X(kiln_tensor, relu6, (kiln_tensor t), (t))",
             "#define kiln_relu6(...) KILN__AT(relu6, __VA_ARGS__)"]
    for text, refused in cases:
        check_ops_row(tmp, table[:i] + text + " \\\n" + table[i:], refused, wants, "an entry with parameters")
    # a row whose sig has parameters, without its entry
    no_entry = table.replace('    X(ELU,        elu,         T_D,   (t, alpha)', '    X(ELU,        elu2,        T_D,   (t, alpha)')
    with open(path, "w", encoding="utf-8") as f:
        f.write(no_entry)
    r = run(tmp)
    check(r.returncode != 0 and "without its KILN__OPTABLE_PARAMS entry" in r.stderr + r.stdout,
          f"a row with parameters and no entry is refused: {r.stderr!r}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(table)


def check_row_op_rows(tmp):
    """A new loss row of the row-op table, its doc on two lines, gives nn_ops.h's prototypes, call
    list entries and macros and the Python row; args naming too few parameters are refused."""
    path = os.path.join(tmp, "src", "ir", "row_table.h")
    table = read(tmp, "src/ir/row_table.h")
    anchor = "    X(NLL_LOSS,"
    i = table.index(anchor)
    row = ('    X(POISSON_NLL_LOSS, poisson_nll_loss, 2, NONE_FLAG, (input, target, log_input=True), REDUCTION, '
           'FLOAT_ONLY, SCALAR, OPS, ANY, 1e-12, poisson_nll_loss, \\\n'
           '      "mean(exp(input) - target input). " \\\n'
           '      "torch\'s poisson_nll_loss with full=False.")')
    with open(path, "w", encoding="utf-8") as f:
        f.write(table[:i] + row + " \\\n" + table[i:])
    r = run(tmp)
    nn, py = read(tmp, "include/kiln/nn_ops.h"), read(tmp, "python/src/op_table_generated.h")
    for want in ["/* mean(exp(input) - target input). torch's poisson_nll_loss with full=False. */",
                 "KILN_API kiln_tensor kiln_poisson_nll_loss(kiln_tensor input, kiln_tensor target, bool log_input);",
                 "KILN_API kiln_tensor kiln_poisson_nll_loss_ex(kiln_tensor input, kiln_tensor target, bool log_input, "
                 "kiln_reduction reduction);",
                 "X(kiln_tensor, poisson_nll_loss, (kiln_tensor input, kiln_tensor target, bool log_input), "
                 "(input, target, log_input))",
                 "#define kiln_poisson_nll_loss_ex(...) KILN__AT(poisson_nll_loss_ex, __VA_ARGS__)"]:
        check(r.returncode == 0 and want in nn, f"a row-op row gives {want!r} in nn_ops.h")
    check('X(NONE_FLAG, 2, poisson_nll_loss, kiln_poisson_nll_loss, kiln_poisson_nll_loss_ex, "log_input", 1, '
          '"mean(exp(input) - target input). torch\'s poisson_nll_loss with full=False.")' in py,
          "the row-op row's Python function")
    bad = row.replace("(input, target, log_input=True)", "(input, target)")
    with open(path, "w", encoding="utf-8") as f:
        f.write(table[:i] + bad + " \\\n" + table[i:])
    before = read(tmp, "include/kiln/nn_ops.h")
    r = run(tmp)
    out = r.stderr + r.stdout
    check(r.returncode != 0 and "row_table.h" in out and "takes 3" in out, f"args too short are refused: {out!r}")
    check(read(tmp, "include/kiln/nn_ops.h") == before, "a refused row-op row writes nothing")
    with open(path, "w", encoding="utf-8") as f:
        f.write(table)


def check_refused(tmp, table, text, what):
    """src/ir/<table>_table.h made text: the generator must fail naming the table and what, and
    leave include/kiln/<table>_ops.h as it was."""
    with open(os.path.join(tmp, "src", "ir", f"{table}_table.h"), "w", encoding="utf-8") as f:
        f.write(text)
    header = f"include/kiln/{table}_ops.h"
    before = read(tmp, header)
    r = run(tmp)
    out = r.stderr + r.stdout
    check(r.returncode != 0 and f"{table}_table.h" in out and what in out, f"a {table} row with {what} is refused: {out!r}")
    check(read(tmp, header) == before, f"a refused {table} row ({what}) writes nothing")


def check_linalg_rows(tmp):
    """A METHOD row (API layer) and a FUNCTIONAL row (nn layer, its doc over two lines) of the
    linear-algebra table give linalg_ops.h's prototypes under their docs, their layers' call-site
    list entries and macros, and their Python rows; bad rows are refused, writing nothing."""
    path = os.path.join(tmp, "src", "ir", "linalg_table.h")
    table = read(tmp, "src/ir/linalg_table.h")
    i = table.index("    X(BMM,")
    rows = ('    X(MM, mm, 2, AB, (a, b), FLOAT_SAME, MATMUL, MATMUL, MATMUL, 1e-10, API, METHOD, "torch.mm: 2-d only") \\\n'
            '    X(CAUSAL, causal_attention, 4, ATTENTION, (q, k, v, bias, flag, scale), FLOAT_SAME, ATTENTION, ATTENTION, '
            'ATTENTION, 1e-10, NN, FUNCTIONAL, "attention" \\\n        " with a bias.") \\\n')
    with open(path, "w", encoding="utf-8") as f:
        f.write(table[:i] + rows + table[i:])
    r = run(tmp)
    h, py = read(tmp, "include/kiln/linalg_ops.h"), read(tmp, "python/src/linalg_table_generated.h")
    for want in ["/* torch.mm: 2-d only */\nKILN_API kiln_tensor kiln_mm(kiln_tensor a, kiln_tensor b);",
                 "/* attention. with a bias. */\nKILN_API kiln_tensor kiln_causal_attention(kiln_tensor q, kiln_tensor k, "
                 "kiln_tensor v, kiln_tensor bias, bool flag, double scale);",
                 "#define kiln_mm(...) KILN__AT(mm, __VA_ARGS__)",
                 "#define kiln_causal_attention(...) KILN__AT(causal_attention, __VA_ARGS__)"]:
        # (a prototype past 120 columns is wrapped: compared with its spaces collapsed)
        check(r.returncode == 0 and " ".join(want.split()) in " ".join(h.split()),
              f"a linear-algebra row gives {want!r} in linalg_ops.h")
    api, nn = h.split("#define KILN_NN_LINALG_API")
    check("X(kiln_tensor, mm, (kiln_tensor a, kiln_tensor b), (a, b))" in api.split("#define KILN_LINALG_API")[1],
          "an API row is in KILN_LINALG_API")
    check("X(kiln_tensor, causal_attention, " in nn.split("#if")[0], "an NN row is in KILN_NN_LINALG_API")
    check('X(mm, kiln_mm, 0, 0, "torch.mm: 2-d only")' in py, "a METHOD row's Python row")
    check('X(ATTENTION, causal_attention, kiln_causal_attention, "attention")' in py, "a FUNCTIONAL row's Python row")
    for bad, what in [(rows.replace("2, AB,", "2, ABC,"), "no sig ABC"),
                      (rows.replace("API, METHOD", "API, FUNCTION"), "py FUNCTION"),
                      (rows.replace("ATTENTION, (q, k, v, bias, flag, scale)", "ATTENTION, (q, k, v, bias, flag)"),
                       "takes 6"),
                      (rows.replace("(a, b), FLOAT_SAME", "(a, b, c), FLOAT_SAME"), "takes 2"),
                      (rows.replace("4, ATTENTION,", "3, ATTENTION,"), "arity 3"),
                      (rows.replace("NN, FUNCTIONAL", "NN, METHOD"), "sig AB only")]:
        check_refused(tmp, "linalg", table[:i] + bad + table[i:], what)
    with open(path, "w", encoding="utf-8") as f:
        f.write(table)


def check_shape_rows(tmp):
    """A shape-table row whose sig returns a count (an output array) gives an int prototype under its
    doc, an int call-site entry, its macro and its Python caller's row; a kernel outside the table's
    kernel list, a listed kernel no row runs, and arity 0 with a gradient rule are refused, writing
    nothing."""
    path = os.path.join(tmp, "src", "ir", "shape_table.h")
    table = read(tmp, "src/ir/shape_table.h")
    i = table.index("    X(CHUNK,")
    row = ('    X(HSPLIT, hsplit, SPLIT, (t, size, dim, out, cap), 1, SAME, PIECES, NONE, VIEW, 0, hsplit, '
           '(x, 2, 2, OUTS, OUTS_CAP), (60), (x, 0, 2, OUTS, OUTS_CAP), INVALID_ARGUMENT, "pieces of size along dim") \\\n')
    with open(path, "w", encoding="utf-8") as f:
        f.write(table[:i] + row + table[i:])
    r = run(tmp)
    h, py = read(tmp, "include/kiln/shape_ops.h"), read(tmp, "python/src/shape_table_generated.h")
    for want in ["KILN_API int kiln_hsplit(kiln_tensor t, int64_t size, int dim, kiln_tensor *out, int cap);",
                 "/* pieces of size along dim */",
                 "X(int, hsplit, (kiln_tensor t, int64_t size, int dim, kiln_tensor *out, int cap), (t, size, dim, out, cap))",
                 "#define kiln_hsplit(...) KILN__AT(hsplit, __VA_ARGS__)"]:
        check(r.returncode == 0 and want in h, f"a shape row gives {want!r} in shape_ops.h: {r.stderr!r}")
    check('X(SPLIT, METHOD, hsplit, kiln_hsplit, "pieces of size along dim")' in py, "a SPLIT row's Python caller row")
    kernels = table.index("    X(INDEX_SELECT, \"")
    for bad, at, what in [(row.replace("PIECES, NONE, VIEW", "PIECES, BOGUS, VIEW"), i, "kernel BOGUS"),
                          (row.replace(", 1, SAME, PIECES", ", 0, SAME, PIECES"), i, "arity 0"),
                          ('    X(SPARE, "nothing runs it") \\\n', kernels, "no row runs it")]:
        check_refused(tmp, "shape", table[:at] + bad + table[at:], what)
    with open(path, "w", encoding="utf-8") as f:
        f.write(table)


def main(script):
    root = os.path.dirname(os.path.dirname(os.path.abspath(script)))
    with tempfile.TemporaryDirectory() as tmp:
        for rel in FILES:
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            shutil.copy(os.path.join(root, rel), os.path.join(tmp, rel))
        check(run(tmp, "--check").returncode == 0, "the committed headers match the tables")

        table = with_row(tmp, "X(SUM,", '    X(NORM, norm, FLOAT, ALL_DIMS, SPREAD, SUM, VALUE, NONE, norm, "the 2-norm: sqrt(sum(t^2))")')
        stale = run(tmp, "--check")
        check(stale.returncode == 1 and "ops.h" in stale.stderr and "op_table_generated.h" in stale.stderr,
              f"--check names both stale headers after a new row: {stale.stderr!r}")
        check(run(tmp).returncode == 0, "the generator writes the headers")
        ops, py = read(tmp, "include/kiln/ops.h"), read(tmp, "python/src/op_table_generated.h")
        for want in ["KILN_API kiln_tensor kiln_norm(kiln_tensor t); /* the 2-norm: sqrt(sum(t^2)) */",
                     "KILN_API kiln_tensor kiln_norm_dims(kiln_tensor t, kiln_dims dims, bool keepdim);",
                     "X(kiln_tensor, norm, (kiln_tensor t), (t))",
                     "X(kiln_tensor, norm_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim))",
                     "#define kiln_norm(...) KILN__AT(norm, __VA_ARGS__)",
                     "#define kiln_norm_dims(...) KILN__AT(norm_dims, __VA_ARGS__)"]:
            check(want in ops, f"ops.h has {want!r}")
        check('X(norm, kiln_norm, kiln_norm_dims, "the 2-norm: sqrt(sum(t^2))")' in py, "the Python row of norm")
        check(ops.index("kiln_sum_dims") < ops.index("kiln_norm(") < ops.index("kiln_mean("),
              "the rows' order is the header's")
        check(run(tmp, "--check").returncode == 0, "--check passes once regenerated")

        # rows the generator refuses, naming the table, without writing a header
        for bad, what in [('    X(NORM, norm, FLOAT, BOGUS, NONE, SUM, VALUE, NONE, HAND, "x")', "signature BOGUS"),
                          ('    X(NORM, norm, FLOAT, CORRECTION, NONE, SUM, VALUE, NONE, norm, "x")', "a py name needs"),
                          ('    X(NORM, norm, FLOAT, DIMS, NONE, SUM, VALUE, HAND, "x")', "columns"),
                          ('    X(NORM, norm, FLOAT, DIMS, NONE, SQRTSUM, VALUE, NONE, HAND, "x")', "no fold SQRTSUM"),
                          ('    X(NORM, norm, FLOAT, DIMS, SLOPE, SUM, VALUE, NONE, HAND, "x")', "no grad SLOPE"),
                          ('    X(NORM, norm, FLOAT, DIMS, NONE, SUM, NONE, NONE, HAND, "x")', "finish is not NONE"),
                          ('    X(NORM, norm, FLOAT, DIMS, NONE, SUM, VALUE, SOME, HAND, "x")', "fuse SOME")]:
            with open(os.path.join(tmp, "src", "ir", "reduce_table.h"), "w", encoding="utf-8") as f:
                f.write(table)
            with_row(tmp, "X(SUM,", bad)
            before = read(tmp, "include/kiln/ops.h")
            r = run(tmp)
            check(r.returncode != 0 and "reduce_table.h" in r.stderr + r.stdout and what in r.stderr + r.stdout,
                  f"a row with {what} is refused: {r.returncode} {r.stderr!r}")
            check(read(tmp, "include/kiln/ops.h") == before, f"a row with {what} writes nothing")
        with open(os.path.join(tmp, "src", "ir", "reduce_table.h"), "w", encoding="utf-8") as f:
            f.write(table)
        check_scalar_rows(tmp)
        check_param_rows(tmp)
        check_row_op_rows(tmp)
        check_linalg_rows(tmp)
        check_shape_rows(tmp)
    print("test_optable_generated:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "scripts",
                                                                        "gen_optable.py")))
