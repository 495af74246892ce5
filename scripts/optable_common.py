"""What the op-table generators (gen_optable.py, optable_linalg.py, optable_shape.py) all write
the same way: a row's C signature and a doc as a C string literal."""


def signature(row):
    """(parameters, arguments) of a row's public function, as C text."""
    params = ", ".join(f"{t}{n}" if t.endswith("*") else f"{t} {n}" for t, n in row["params"])
    return f"({params})", "(" + ", ".join(n for _, n in row["params"]) + ")"


def c_string(text):
    """text as a C string literal (the tables' docs are ASCII without control characters)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
