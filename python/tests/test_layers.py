"""kiln.nn.LSTM, GRU and MultiheadAttention over kiln's C layers: PyTorch's parameter names and
shapes, outputs equal to PyTorch's with the same weights (where PyTorch is installed), weights
loaded with load_state_dict and trained by an optimizer reach the C layer, and bad arguments
raise the right class naming this file's line."""
import inspect

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from conftest import needs_torch


def line_here():
    return inspect.currentframe().f_back.f_lineno


def test_names_shapes_and_states():
    lstm = nn.LSTM(4, 5, num_layers=2, bidirectional=True)
    names = [n for n, _ in lstm.named_parameters()]
    assert names[:4] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"] and len(names) == 16
    assert lstm.weight_ih_l1.shape == (20, 10)
    y, (h, c) = lstm(kiln.randn(3, 2, 4))
    assert y.shape == (3, 2, 10) and h.shape == c.shape == (4, 2, 5)
    gru = nn.GRU(4, 6, batch_first=True)
    y, h = gru(kiln.randn(2, 7, 4), kiln.zeros(1, 2, 6))
    assert y.shape == (2, 7, 6) and h.shape == (1, 2, 6)
    np.testing.assert_allclose(y[:, -1].numpy(), h[0].numpy(), rtol=1e-6)  # the last output is the state
    mha = nn.MultiheadAttention(8, 2)
    assert [n for n, _ in mha.named_parameters()] == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    q = kiln.randn(5, 3, 8)
    out, w = mha(q, q, q)
    assert out.shape == (5, 3, 8) and w.shape == (3, 5, 5)
    np.testing.assert_allclose(w.sum(-1).numpy(), np.ones((3, 5)), rtol=1e-5)
    out, w = mha(q, q, q, need_weights=False)
    assert w is None


def test_seed_repeats_weights():
    kiln.manual_seed(5)
    a = nn.GRU(3, 4).weight_hh_l0.numpy()
    kiln.manual_seed(5)
    assert np.array_equal(a, nn.GRU(3, 4).weight_hh_l0.numpy())


def test_loaded_weights_reach_the_c_layer():
    a, b = nn.LSTM(3, 4), nn.LSTM(3, 4)
    x = kiln.randn(2, 1, 3)
    assert not np.allclose(a(x)[0].numpy(), b(x)[0].numpy())
    b.load_state_dict(a.state_dict())
    np.testing.assert_allclose(a(x)[0].numpy(), b(x)[0].numpy(), rtol=1e-6)


def test_training_lowers_the_loss():
    kiln.manual_seed(0)
    gru, head = nn.GRU(2, 16, batch_first=True), nn.Linear(16, 1)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    opt = kiln.optim.Adam(list(gru.parameters()) + list(head.parameters()) + list(mha.parameters()), lr=1e-2)
    x = kiln.randn(16, 6, 2, seed=1)
    target = x.sum(1)[:, :1]  # the sum of a sequence's first feature and second
    losses = []
    for _ in range(60):
        h, _ = gru(x)
        a, _ = mha(h, h, h, need_weights=False)
        loss = ((head(a[:, -1]) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
    assert mha.out_proj.weight.grad is not None


@needs_torch
def test_equal_to_pytorch():
    import torch
    kiln.manual_seed(1)
    for k, t, args in ((nn.LSTM, torch.nn.LSTM, (3, 4, 2)), (nn.GRU, torch.nn.GRU, (3, 4, 2))):
        ours, theirs = k(*args, batch_first=True), t(*args, batch_first=True)
        ours.load_state_dict({n: kiln.tensor(p.detach().numpy()) for n, p in theirs.state_dict().items()})
        x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
        np.testing.assert_allclose(ours(kiln.tensor(x))[0].numpy(), theirs(torch.tensor(x))[0].detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    ours, theirs = nn.MultiheadAttention(8, 2), torch.nn.MultiheadAttention(8, 2)
    ours.load_state_dict({n: kiln.tensor(p.detach().numpy()) for n, p in theirs.state_dict().items()})
    q = np.random.default_rng(1).standard_normal((4, 2, 8)).astype(np.float32)
    mask = np.array([[False, False, True, False], [False, True, False, False]])
    o, w = ours(kiln.tensor(q), kiln.tensor(q), kiln.tensor(q), key_padding_mask=kiln.tensor(mask))
    to, tw = theirs(torch.tensor(q), torch.tensor(q), torch.tensor(q), key_padding_mask=torch.tensor(mask))
    np.testing.assert_allclose(o.numpy(), to.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_bad_arguments_raise_with_the_line():
    lstm = nn.LSTM(4, 5)
    with pytest.raises(ValueError) as info:
        line = line_here(); lstm(kiln.randn(3, 2, 7))  # noqa: E702
    assert isinstance(info.value, kiln.KilnError) and f"test_layers.py:{line}" in str(info.value)
    with pytest.raises(kiln.KilnError) as info:
        line = line_here(); nn.MultiheadAttention(10, 3)  # noqa: E702
    assert f"test_layers.py:{line}" in str(info.value)
    with pytest.raises(TypeError):
        lstm([[1.0]])
    with pytest.raises(TypeError):
        lstm(kiln.randn(3, 2, 4), kiln.zeros(1, 2, 5))  # hx must be (h0, c0)
    with pytest.raises(TypeError):
        nn.GRU(4, 5)(kiln.randn(3, 2, 4), "h0")
    with pytest.raises(TypeError):
        nn.MultiheadAttention(8, 2)(kiln.randn(2, 1, 8), None, kiln.randn(2, 1, 8))
    for bad in ((4, 5, 0), (4, 5, 33)):
        with pytest.raises(ValueError):
            nn.LSTM(*bad)
    with pytest.raises(TypeError):
        nn.GRU(4.5, 5)
    with pytest.raises(OverflowError):
        nn.GRU(2**70, 5)
    with pytest.raises(kiln.KilnError):
        nn.GRU(-4, 5)
    with pytest.raises(TypeError):
        kiln._C._rnn("not a layer", [], True, kiln.randn(1, 1, 1), None, None)
    loader = kiln.utils.data.DataLoader(kiln.utils.data.TensorDataset(np.zeros((2, 1), np.float32)))
    with pytest.raises(TypeError):
        kiln._C._rnn(loader._loader, [], True, kiln.randn(1, 1, 1), None, None)
    with pytest.raises(TypeError):
        kiln._C._rnn(lstm._layer, [], True, kiln.randn(3, 2, 4), None, None)  # wrong parameter list
    lstm.weight_ih_l0 = kiln.randn(20, 4).requires_grad_()  # a replaced parameter of the right shape is used
    assert lstm(kiln.randn(3, 2, 4))[0].shape == (3, 2, 5)
