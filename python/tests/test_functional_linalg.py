"""The linear-algebra ops made from the rows of the C linear-algebra table (src/ir/linalg_table.h):
every METHOD row is a kiln function and a Tensor method, every FUNCTIONAL row a
kiln.nn.functional function, each called as PyTorch's of its name (keywords, defaults, tuples and
'same' padding, attention's mask, causal flag and scale, batch norm's running statistics updated
in place) against NumPy and PyTorch, and bad arguments raise."""
import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from conftest import needs_torch, optable_json


def linalg_table():
    return optable_json()["linalg_ops"]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def test_every_row_of_the_c_linalg_table_is_a_python_function():
    rows = linalg_table()
    assert len(rows) >= 6
    x = kiln.tensor(rand(2, 2))
    for r in rows:
        if r["py"] == "METHOD":
            assert callable(getattr(kiln, r["name"])) and callable(getattr(x, r["name"])), r["name"]
        elif r["py"] == "FUNCTIONAL":
            assert callable(getattr(F, r["name"])) and r["name"] in kiln._C._linalg_functions(), r["name"]


def test_products_against_numpy():
    a, b, c = rand(3, 4, 5), rand(5, 2, seed=1), rand(3, 5, 6, seed=2)
    np.testing.assert_allclose(kiln.matmul(kiln.tensor(a), kiln.tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.tensor(a).matmul(kiln.tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((kiln.tensor(a) @ kiln.tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.bmm(kiln.tensor(a), kiln.tensor(c)).numpy(), a @ c, rtol=1e-5, atol=1e-6)
    w, bias = rand(7, 5, seed=3), rand(7, seed=4)
    np.testing.assert_allclose(F.linear(kiln.tensor(a), kiln.tensor(w), kiln.tensor(bias)).numpy(),
                               a @ w.T + bias, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(F.linear(input=kiln.tensor(a), weight=kiln.tensor(w)).numpy(), a @ w.T, rtol=1e-5,
                               atol=1e-6)


def close(got, want, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=atol)


@needs_torch
def test_conv2d_against_torch():
    import torch
    import torch.nn.functional as TF
    x, w, b = rand(2, 4, 7, 6), rand(6, 2, 3, 2, seed=1), rand(6, seed=2)
    tx, tw, tb = torch.tensor(x), torch.tensor(w), torch.tensor(b)
    for kw in [{}, {"stride": 2, "padding": 1, "groups": 2}, {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2),
                                                             "groups": 2}, {"padding": "valid", "groups": 2}]:
        groups = kw.get("groups", 1)
        wk, twk = (w, tw) if groups == 2 else (rand(6, 4, 3, 2, seed=5), None)
        twk = torch.tensor(wk) if twk is None else twk
        close(F.conv2d(kiln.tensor(x), kiln.tensor(wk), kiln.tensor(b), **kw), TF.conv2d(tx, twk, tb, **kw))
    w3 = rand(6, 4, 3, 5, seed=6)
    close(F.conv2d(kiln.tensor(x), kiln.tensor(w3), padding="same", dilation=(2, 1)),
          TF.conv2d(tx, torch.tensor(w3), padding="same", dilation=(2, 1)))


@needs_torch
def test_attention_against_torch():
    import torch
    import torch.nn.functional as TF
    q, k, v = rand(2, 3, 4, 8), rand(2, 3, 5, 8, seed=1), rand(2, 3, 5, 6, seed=2)
    tq, tk, tv = torch.tensor(q), torch.tensor(k), torch.tensor(v)
    close(F.scaled_dot_product_attention(kiln.tensor(q), kiln.tensor(k), kiln.tensor(v)),
          TF.scaled_dot_product_attention(tq, tk, tv))
    close(F.scaled_dot_product_attention(kiln.tensor(q), kiln.tensor(k), kiln.tensor(v), is_causal=True, scale=0.3),
          TF.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=0.3))
    mask = rand(4, 5, seed=3)
    close(F.scaled_dot_product_attention(kiln.tensor(q), kiln.tensor(k), kiln.tensor(v), attn_mask=kiln.tensor(mask)),
          TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(mask)))
    keep = np.random.default_rng(4).uniform(size=(4, 5)) > 0.3
    close(F.scaled_dot_product_attention(kiln.tensor(q), kiln.tensor(k), kiln.tensor(v), kiln.tensor(keep)),
          TF.scaled_dot_product_attention(tq, tk, tv, torch.tensor(keep)))


@needs_torch
def test_batch_norm_against_torch_updates_the_running_statistics_in_place():
    import torch
    import torch.nn.functional as TF
    x, w, b = rand(4, 3, 5), rand(3, seed=1), rand(3, seed=2)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    km, kv = kiln.tensor(mean), kiln.tensor(var)
    tm, tv = torch.tensor(mean), torch.tensor(var)
    close(F.batch_norm(kiln.tensor(x), km, kv, kiln.tensor(w), kiln.tensor(b), training=True, momentum=0.2),
          TF.batch_norm(torch.tensor(x), tm, tv, torch.tensor(w), torch.tensor(b), training=True, momentum=0.2))
    close(km, tm)
    close(kv, tv)
    close(F.batch_norm(kiln.tensor(x), km, kv, eps=1e-3), TF.batch_norm(torch.tensor(x), tm, tv, eps=1e-3))
    close(F.batch_norm(kiln.tensor(x), None, None, training=True), TF.batch_norm(torch.tensor(x), None, None,
                                                                                  training=True))


def softmax_rows(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_attention_and_batch_norm_against_numpy():
    # (CI's Python has no PyTorch: the same functions against float64 NumPy references)
    q, k, v = rand(2, 3, 4, 8), rand(2, 3, 5, 8, seed=1), rand(2, 3, 5, 6, seed=2)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    scores = q64 @ k64.swapaxes(-1, -2)
    np.testing.assert_allclose(F.scaled_dot_product_attention(kiln.tensor(q), kiln.tensor(k), kiln.tensor(v)).numpy(),
                               softmax_rows(scores / np.sqrt(8)) @ v64, rtol=1e-5, atol=1e-5)
    causal = np.where(np.tril(np.ones((4, 5), bool)), 0.3 * scores, -np.inf)
    np.testing.assert_allclose(F.scaled_dot_product_attention(kiln.tensor(q), kiln.tensor(k), kiln.tensor(v),
                                                              is_causal=True, scale=0.3).numpy(),
                               softmax_rows(causal) @ v64, rtol=1e-5, atol=1e-5)
    x, w, b = rand(4, 3, 5), rand(3, seed=1), rand(3, seed=2)
    km, kv = kiln.tensor(np.zeros(3, np.float32)), kiln.tensor(np.ones(3, np.float32))
    x64 = x.astype(np.float64)
    mu, var = x64.mean(axis=(0, 2)), x64.var(axis=(0, 2))
    want = (x64 - mu[:, None]) / np.sqrt(var[:, None] + 1e-5) * w[:, None] + b[:, None]
    got = F.batch_norm(kiln.tensor(x), km, kv, kiln.tensor(w), kiln.tensor(b), training=True, momentum=0.2)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
    n = x.shape[0] * x.shape[2]  # the running variance takes the unbiased estimate, as PyTorch's
    np.testing.assert_allclose(km.numpy(), 0.2 * mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kv.numpy(), 0.8 + 0.2 * var * n / (n - 1), rtol=1e-5, atol=1e-6)


def test_bad_arguments_raise():
    x, w = kiln.tensor(rand(1, 2, 4, 4)), kiln.tensor(rand(3, 2, 3, 3))
    with pytest.raises(ValueError):
        F.conv2d(x, w, stride=0)
    with pytest.raises(ValueError):
        F.conv2d(x, w, padding=(1, 2, 3))
    with pytest.raises(ValueError):
        F.conv2d(x, w, padding="full")
    with pytest.raises(NotImplementedError):
        F.conv2d(x, kiln.tensor(rand(3, 2, 2, 2)), padding="same")
    with pytest.raises(TypeError):
        F.conv2d(x, w, strides=1)
    with pytest.raises(TypeError):
        F.linear(x)
    q = kiln.tensor(rand(1, 2, 3, 4))
    with pytest.raises(NotImplementedError):
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError):
        F.scaled_dot_product_attention(q, q, q, scale=-1.0)
    with pytest.raises(TypeError):
        F.batch_norm(kiln.tensor(rand(4, 3)), [0, 0, 0], None, training=True)
    m = kiln.tensor(np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        F.batch_norm(kiln.tensor(rand(4, 3)), m, m, training=True)
    with pytest.raises(Exception):  # shapes that do not fit: kiln's error, naming the op
        F.linear(kiln.tensor(rand(2, 3)), kiln.tensor(rand(4, 5)))
