"""The shape op table (src/ir/shape_table.h) in Python: each row the binding makes from the table
(python/src/shape_table_generated.h: t.name(dim), kiln.name(t, dim); t.name(diagonal=0)) against PyTorch, in a float
and an integer dtype, with dim given by position and by keyword; each row bound by hand
(methods.c, module.c) is there under its name."""
import os
import sys

import numpy as np
import pytest

import kiln
from conftest import needs_torch


def shape_rows():
    """The table's rows as scripts/optable_shape.py reads them (skips outside the repository)."""
    scripts = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
    if not os.path.exists(os.path.join(scripts, "optable_shape.py")):
        pytest.skip("not run from the repository")
    sys.path.insert(0, scripts)
    try:
        import gen_optable
        import optable_shape
    finally:
        sys.path.remove(scripts)
    return optable_shape.read_shape_ops(gen_optable.ROOT, gen_optable.read_rows)


@needs_torch
def test_generated_rows_match_pytorch():
    import torch
    rows = [r for r in shape_rows() if r["py"] not in ("HAND", "NONE")]
    assert {r["py"] for r in rows} >= {"cumsum", "cumprod", "unsqueeze", "tril", "triu"}
    x_np = np.array([[[0.5, -2.0, 4.0], [1.0, 0.0, -0.25]], [[3.0, 1.5, -1.0], [2.0, -0.5, 0.75]]], np.float32)
    for r in rows:
        if r["sig"] == "OFFSET":  # t.name(diagonal=0), kiln.name(t, diagonal=0)
            for values in (x_np, x_np.astype(np.int64) * 3 - 1):
                x, xt = kiln.tensor(values), torch.tensor(values)
                for got, want in ((getattr(x, r["py"])(), getattr(torch, r["py"])(xt)),
                                  (getattr(x, r["py"])(1), getattr(torch, r["py"])(xt, 1)),
                                  (getattr(kiln, r["py"])(x, diagonal=-1), getattr(torch, r["py"])(xt, diagonal=-1))):
                    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (r["py"], got.dtype)
                    np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=r["py"])
            continue
        assert r["sig"] == "DIM", r["name"]
        for values in (x_np, x_np.astype(np.int64) * 3 - 1):
            x, xt = kiln.tensor(values), torch.tensor(values)
            for dim in (1, -2):
                want = getattr(torch, r["py"])(xt, dim)
                for got in (getattr(x, r["py"])(dim), getattr(x, r["py"])(dim=dim), getattr(kiln, r["py"])(x, dim=dim)):
                    assert tuple(got.shape) == tuple(want.shape), (r["py"], dim)
                    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (r["py"], got.dtype)
                    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, err_msg=r["py"])
            with pytest.raises(TypeError):
                getattr(x, r["py"])()  # dim is required, as torch's


def test_hand_written_rows_are_bound():
    x = kiln.ones(2, 3)
    hand = [r["name"] for r in shape_rows() if r["py"] == "HAND"]
    assert "reshape" in hand and "cat" in hand
    for name in hand:
        assert hasattr(x, name) or hasattr(kiln, name), name


def test_tril_triu_against_numpy():
    # (CI's Python has no PyTorch: the generated OFFSET rows against NumPy)
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    t = kiln.tensor(a)
    np.testing.assert_array_equal(t.tril().numpy(), np.tril(a))
    np.testing.assert_array_equal(kiln.triu(t, diagonal=1).numpy(), np.triu(a, 1))
    np.testing.assert_array_equal(kiln.tril(t, -2).numpy(), np.tril(a, -2))
    with pytest.raises(TypeError):
        t.tril(diagonal="x")
