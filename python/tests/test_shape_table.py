"""The shape op table (src/ir/shape_table.h) in Python: each row the binding makes from the table
(python/src/shape_table_generated.h: t.name(dim), kiln.name(t, dim); t.name(diagonal=0); and the rows
python/src/shape_ops.c calls with torch's keywords: split, chunk, meshgrid, pad, one_hot, sort, argsort, topk,
unfold) against PyTorch and (CI has no PyTorch) NumPy, in a float and an integer dtype; each row bound by hand
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
        if r["sig"] != "DIM":
            continue  # (the callers of python/src/shape_ops.c: test_called_rows_match_pytorch)
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


# ---- the rows python/src/shape_ops.c binds (KP_TABLE_SHAPE_CALLS), against NumPy -----------------------------

X_NP = np.array([[[0.5, -2.0, 4.0, 1.0], [1.0, 0.0, -0.25, 3.0], [2.5, 1.0, -1.0, 1.0]],
                 [[3.0, 1.5, -1.0, 0.0], [2.0, -0.5, 0.75, -3.0], [1.0, 1.0, 1.0, -2.0]]], np.float32)
VALUES = (X_NP, X_NP.astype(np.int64) * 3 - 1)  # a float and an integer dtype, with ties


def called_rows():
    scripts = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
    rows = shape_rows()
    sys.path.insert(0, scripts)
    try:
        import optable_shape
    finally:
        sys.path.remove(scripts)
    return [(r, optable_shape.PY_CALLERS[r["sig"]][0]) for r in rows
            if r["sig"] in optable_shape.PY_CALLERS and r["py"] not in ("HAND", "NONE")]


def test_called_rows_are_bound_where_their_form_says():
    rows = called_rows()
    assert {r["py"] for r, _ in rows} >= {"split", "chunk", "meshgrid", "pad", "one_hot", "sort", "argsort", "topk",
                                          "unfold"}
    for r, form in rows:
        if form == "METHOD":
            assert hasattr(kiln.Tensor, r["py"]) and hasattr(kiln, r["py"]), r["py"]
        elif form == "MODULE":
            assert hasattr(kiln, r["py"]), r["py"]
        else:
            assert hasattr(kiln.nn.functional, r["py"]), r["py"]


def test_split_and_chunk_against_numpy():
    for values in VALUES:
        x = kiln.tensor(values)
        for got, want in ((x.split(2, dim=1), [values[:, 0:2], values[:, 2:3]]),
                          (kiln.split(x, 3, 2), [values[..., 0:3], values[..., 3:4]]),
                          (x.split(split_size=1), [values[0:1], values[1:2]]),
                          (x.chunk(2, dim=2), [values[..., 0:2], values[..., 2:4]]),
                          (kiln.chunk(x, 2, dim=1), [values[:, 0:2], values[:, 2:3]]),
                          (x.chunk(chunks=3), [values[0:1], values[1:2]])):
            assert isinstance(got, tuple) and len(got) == len(want)
            for g, w in zip(got, want):
                assert g.numpy().dtype == w.dtype
                np.testing.assert_array_equal(g.numpy(), w)
    x = kiln.tensor(X_NP)
    with pytest.raises(kiln.InvalidArgumentError, match="kiln_split"):
        x.split(0)
    with pytest.raises(kiln.InvalidArgumentError, match="kiln_chunk"):
        x.chunk(0, dim=1)
    with pytest.raises(TypeError):
        x.split([1, 2])  # torch's sections: not supported
    with pytest.raises(TypeError):
        x.chunk()


def test_meshgrid_against_numpy():
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([4.0, 5.0], np.float32)
    for indexing, args in (("ij", {}), ("ij", {"indexing": "ij"}), ("xy", {"indexing": "xy"})):
        want = np.meshgrid(a, b, indexing=indexing)
        for got in (kiln.meshgrid(kiln.tensor(a), kiln.tensor(b), **args),
                    kiln.meshgrid([kiln.tensor(a), kiln.tensor(b)], **args)):
            assert len(got) == 2
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g.numpy(), w)
    with pytest.raises(ValueError):
        kiln.meshgrid(kiln.tensor(a), indexing="zz")
    with pytest.raises(kiln.ShapeError, match="kiln_meshgrid"):
        kiln.meshgrid(kiln.tensor(X_NP), kiln.tensor(a))


def test_pad_against_numpy():
    F = kiln.nn.functional
    for values in VALUES:
        x = kiln.tensor(values)
        np.testing.assert_array_equal(F.pad(x, (1, 2)).numpy(), np.pad(values, ((0, 0), (0, 0), (1, 2))))
        np.testing.assert_array_equal(F.pad(x, (1, 0, 0, 1), value=7).numpy(),
                                      np.pad(values, ((0, 0), (0, 1), (1, 0)), constant_values=7))
        np.testing.assert_array_equal(F.pad(x, [2, 1], mode="reflect").numpy(),
                                      np.pad(values, ((0, 0), (0, 0), (2, 1)), mode="reflect"))
        np.testing.assert_array_equal(F.pad(x, (1, 1, 2, 0), "replicate").numpy(),
                                      np.pad(values, ((0, 0), (2, 0), (1, 1)), mode="edge"))
    x = kiln.tensor(X_NP)
    with pytest.raises(kiln.InvalidArgumentError, match="kiln_pad"):
        F.pad(x, (1,))
    with pytest.raises(ValueError):
        F.pad(x, (1, 1), mode="circular")


def test_one_hot_against_numpy():
    F = kiln.nn.functional
    idx = np.array([[0, 2], [1, 2]], np.int64)
    got = F.one_hot(kiln.tensor(idx), 4)
    assert got.numpy().dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), np.eye(4, dtype=np.int64)[idx])
    np.testing.assert_array_equal(F.one_hot(kiln.tensor(idx)).numpy(), np.eye(3, dtype=np.int64)[idx])  # -1: max + 1
    np.testing.assert_array_equal(F.one_hot(kiln.tensor(idx), num_classes=3).numpy(), np.eye(3, dtype=np.int64)[idx])
    with pytest.raises(kiln.InvalidArgumentError, match="kiln_one_hot"):
        F.one_hot(kiln.tensor(idx), 0)


def test_sort_argsort_topk_against_numpy():
    for values in VALUES:
        x = kiln.tensor(values)
        for dim in (2, 1, -1):
            order = np.argsort(values, axis=dim, kind="stable")
            down = np.argsort(-values, axis=dim, kind="stable")  # ties in their order, as kiln and torch
            v, i = x.sort(dim)
            np.testing.assert_array_equal(i.numpy(), order)
            np.testing.assert_array_equal(v.numpy(), np.take_along_axis(values, order, dim))
            got = kiln.sort(x, dim=dim, descending=True)
            np.testing.assert_array_equal(got.indices.numpy(), down)
            np.testing.assert_array_equal(got.values.numpy(), np.take_along_axis(values, down, dim))
            np.testing.assert_array_equal(x.argsort(dim, stable=True).numpy(), order)
            np.testing.assert_array_equal(kiln.argsort(x, dim, descending=True).numpy(), down)
            k = 2
            top = x.topk(k, dim=dim)
            np.testing.assert_array_equal(top.indices.numpy(), np.take(down, range(k), axis=dim))
            np.testing.assert_array_equal(top.values.numpy(), np.take_along_axis(values, np.take(down, range(k), axis=dim), dim))
            low_v, low_i = kiln.topk(x, k, dim, largest=False)
            np.testing.assert_array_equal(low_i.numpy(), np.take(order, range(k), axis=dim))
        assert x.sort().indices.numpy().dtype == np.int64
    x = kiln.tensor(X_NP)
    with pytest.raises(kiln.InvalidArgumentError, match="kiln_topk"):
        x.topk(5)
    with pytest.raises(kiln.InvalidArgumentError, match="kiln_sort"):
        x.sort(3)
    with pytest.raises(TypeError):
        x.topk()


def test_unfold_against_numpy():
    for values in VALUES:
        x = kiln.tensor(values)
        for dim, size, step in ((2, 2, 1), (1, 2, 1), (2, 3, 2), (0, 1, 1)):
            want = np.lib.stride_tricks.sliding_window_view(values, size, axis=dim)
            want = np.take(want, range(0, want.shape[dim], step), axis=dim)
            np.testing.assert_array_equal(x.unfold(dim, size, step).numpy(), want)
        np.testing.assert_array_equal(kiln.unfold(x, dimension=2, size=4, step=1).numpy(), values[:, :, None, :])
    with pytest.raises(kiln.InvalidArgumentError, match="kiln_unfold"):
        kiln.tensor(X_NP).unfold(2, 5, 1)


def test_called_rows_gradients():
    # the values of sort and topk, split's and chunk's pieces, pad and unfold carry the gradient back
    x = kiln.tensor(X_NP.astype(np.float64), requires_grad=True)
    v, _ = x.sort(dim=2)
    (v * kiln.tensor(np.arange(4, dtype=np.float64))).sum().backward()
    want = np.zeros_like(X_NP, np.float64)
    np.put_along_axis(want, np.argsort(X_NP, axis=2, kind="stable"), np.arange(4, dtype=np.float64)[None, None, :], 2)
    np.testing.assert_array_equal(x.grad.numpy(), want)
    for f, want in ((lambda t: t.split(1, dim=1)[2].sum(), np.zeros((2, 3, 4)) + (np.arange(3) == 2)[None, :, None]),
                    (lambda t: t.unfold(2, 2, 1).sum(), np.zeros((2, 3, 4)) + np.array([1, 2, 2, 1])),
                    (lambda t: kiln.nn.functional.pad(t, (1, 1), mode="replicate").sum(),
                     np.zeros((2, 3, 4)) + np.array([2, 1, 1, 2]))):
        x = kiln.tensor(X_NP.astype(np.float64), requires_grad=True)
        f(x).backward()
        np.testing.assert_array_equal(x.grad.numpy(), want)


@needs_torch
def test_called_rows_match_pytorch():
    import torch
    F = kiln.nn.functional
    for values in VALUES:
        x, xt = kiln.tensor(values), torch.tensor(values)
        for got, want in ((x.split(2, dim=1), xt.split(2, dim=1)), (x.chunk(2, dim=2), xt.chunk(2, dim=2)),
                          (x.sort(1, descending=True), xt.sort(stable=True, dim=1, descending=True)),
                          ((x.topk(2, dim=2, largest=False).values,), (xt.topk(2, dim=2, largest=False).values,)),
                          ((x.argsort(0),), (xt.argsort(stable=True, dim=0),)), ((x.unfold(2, 2, 1),), (xt.unfold(2, 2, 1),)),
                          ((F.pad(x, (1, 2, 0, 1), mode="replicate"),),
                           (torch.nn.functional.pad(xt.double(), (1, 2, 0, 1), mode="replicate").to(xt.dtype),))):
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g.numpy(), w.numpy())
    idx = np.array([[0, 2], [1, 3]], np.int64)
    np.testing.assert_array_equal(F.one_hot(kiln.tensor(idx)).numpy(),
                                  torch.nn.functional.one_hot(torch.tensor(idx)).numpy())
    a, b = np.arange(3.0), np.arange(2.0)
    for g, w in zip(kiln.meshgrid(kiln.tensor(a), kiln.tensor(b), indexing="xy"),
                    torch.meshgrid(torch.tensor(a), torch.tensor(b), indexing="xy")):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
