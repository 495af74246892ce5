"""What the op-table generators (gen_optable.py, optable_linalg.py, optable_shape.py) all write
the same way: a row's C signature, a doc as a C string literal, and the frame of a generated
public header (its guard, the call-site list of its ops and their call-site macros); and how
they all read a row's args column."""

import sys


def arg_names(where, args):
    """The names of a row's args column "(a, b, ...)"; exits naming where when it is not one."""
    if not (args.startswith("(") and args.endswith(")")):
        sys.exit(f"{where}: args {args} is not a parenthesised list of names")
    return [a.strip() for a in args[1:-1].split(",")]



def signature(row):
    """(parameters, arguments) of a row's public function, as C text."""
    params = ", ".join(f"{t}{n}" if t.endswith("*") else f"{t} {n}" for t, n in row["params"])
    return f"({params})", "(" + ", ".join(n for _, n in row["params"]) + ")"


def c_string(text):
    """text as a C string literal (the tables' docs are ASCII without control characters)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def header_open(guard):
    """A generated public header's lines after its opening comment, up to its first prototype."""
    return [f"#ifndef {guard}", f"#define {guard}", "", '#include "kiln/core.h"', "",
            "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]


def call_site_list(macro, calls, declare=True):
    """The X-list of calls [(name, params, args)] that record the caller's file:line, declared
    (core.h's KILN__AT_DECLARE) unless the caller declares a list joining several."""
    out = [f"#define {macro}(X) \\"]
    for i, (name, params, args) in enumerate(calls):
        out.append(f"    X(kiln_tensor, {name}, {params}, {args})" + (" \\" if i + 1 < len(calls) else ""))
    return out + ([f"{macro}(KILN__AT_DECLARE)"] if declare else [])


def call_site_macros_and_close(names):
    """The call-site macros of the named calls (as core.h's), then the header's end."""
    out = ["#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)",
           "#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */"]
    out += [f"#define kiln_{name}(...) KILN__AT({name}, __VA_ARGS__)" for name in names]
    return out + ["#endif", "", "#ifdef __cplusplus", "}", "#endif", "#endif", ""]


def row_calls(rows):
    """[(name, params, args)] of table rows with a params column."""
    return [(row["name"],) + signature(row) for row in rows]
