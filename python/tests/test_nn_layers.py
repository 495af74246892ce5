"""kiln.nn's layers over kiln's C modules (Linear, Conv2d, the pools, BatchNorm1d/2d, LayerNorm,
GroupNorm, Embedding, Dropout): their parameters are the C module's tensors (the same memory),
values equal NumPy's double-precision references (and PyTorch's with the same weights, where
installed), gradients equal finite differences, train()/eval() reach the C module, state_dict
uses PyTorch's names and round trips, and bad arguments raise the right class naming this line."""
import inspect

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from conftest import needs_torch


def line_here():
    return inspect.currentframe().f_back.f_lineno


def address(t):
    return np.from_dlpack(t).__array_interface__["data"][0]


def arr(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def state_np(m):
    return {k: v.numpy().astype(np.float64) for k, v in m.state_dict().items()}


# ---- the C module's tensors --------------------------------------------------------------------

def test_parameters_are_the_c_modules_tensors():
    lin = nn.Linear(4, 3)
    with pytest.raises(RuntimeError):  # the C module handed its own handles out once, not copies
        kiln._C._layer_params(lin._layer)
    bn = nn.BatchNorm2d(2)
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    # the C module borrows the tensors for each run only, so between runs the Python tensor is the
    # only handle and an optimizer's update writes into the same buffer
    opt = kiln.optim.SGD(lin.parameters(), lr=0.5)
    x = kiln.tensor(arr(2, 4).astype(np.float32))
    before = address(lin.weight), address(lin.bias)
    lin(x).sum().backward()
    opt.step()
    assert (address(lin.weight), address(lin.bias)) == before
    # and the next forward runs the C module on the updated values
    w, b = lin.weight.numpy().astype(np.float64), lin.bias.numpy().astype(np.float64)
    np.testing.assert_allclose(lin(x).numpy(), x.numpy() @ w.T + b, rtol=1e-5, atol=1e-6)


# ---- values against NumPy in double precision ----------------------------------------------------

def np_conv2d(x, w, b, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(oh):
            for j in range(ow):
                patch = xs[:, :, i * stride[0]:i * stride[0] + dil[0] * (kh - 1) + 1:dil[0],
                           j * stride[1]:j * stride[1] + dil[1] * (kw - 1) + 1:dil[1]]
                out[:, g * og:(g + 1) * og, i, j] = np.einsum("nchw,ochw->no", patch, w[g * og:(g + 1) * og])
    return out + b[None, :, None, None]


def test_linear_conv_embedding_pools_against_numpy():
    kiln.manual_seed(3)
    x = arr(5, 6)
    lin = nn.Linear(6, 4)
    s = state_np(lin)
    np.testing.assert_allclose(lin(kiln.tensor(x.astype(np.float32))).numpy(), x @ s["weight"].T + s["bias"],
                               rtol=1e-5, atol=1e-5)
    conv = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    assert conv.weight.shape == (6, 2, 3, 2)
    xi = arr(2, 4, 7, 6, seed=1)
    s = state_np(conv)
    np.testing.assert_allclose(conv(kiln.tensor(xi.astype(np.float32))).numpy(),
                               np_conv2d(xi, s["weight"], s["bias"], (2, 1), (1, 0), (1, 2), 2), rtol=1e-4, atol=1e-5)
    emb = nn.Embedding(10, 3)
    idx = np.array([[1, 9], [0, 1]])
    np.testing.assert_array_equal(emb(kiln.tensor(idx)).numpy(), emb.weight.numpy()[idx])
    xp = arr(2, 3, 6, 6, seed=2)
    windows = xp.reshape(2, 3, 3, 2, 3, 2)
    np.testing.assert_allclose(nn.MaxPool2d(2)(kiln.tensor(xp.astype(np.float32))).numpy(), windows.max((3, 5)),
                               rtol=1e-6)
    np.testing.assert_allclose(nn.AvgPool2d(2)(kiln.tensor(xp.astype(np.float32))).numpy(), windows.mean((3, 5)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nn.AdaptiveAvgPool2d((1, 1))(kiln.tensor(xp.astype(np.float32))).numpy(),
                               xp.mean((2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


def np_pool2d(x, k, s, p, ceil_mode, kind, count_include_pad=True):
    """PyTorch's pooling in float64: output size with ceil_mode less a last window starting in the
    trailing padding; averages divide by the window within the padded input (or within the input)."""
    n, c, h, w = x.shape

    def size(d):
        o = -(-(d + 2 * p - k) // s) if ceil_mode else (d + 2 * p - k) // s
        o += 1
        return o - 1 if ceil_mode and (o - 1) * s >= d + p else o
    oh, ow = size(h), size(w)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * s - p, j * s - p
            y1, x1 = min(y0 + k, h + p), min(x0 + k, w + p)
            div = (y1 - y0) * (x1 - x0)
            y0, x0, y1, x1 = max(y0, 0), max(x0, 0), min(y1, h), min(x1, w)
            win = x[:, :, y0:y1, x0:x1]
            if kind == "max":
                out[:, :, i, j] = win.max((2, 3))
            else:
                out[:, :, i, j] = win.sum((2, 3)) / (div if count_include_pad else (y1 - y0) * (x1 - x0))
    return out


@pytest.mark.parametrize("k, s, p", [(3, 2, 1), (2, 2, 1), (3, 3, 0), (2, 3, 1)])
def test_pools_ceil_mode_and_count_include_pad(k, s, p):
    x = arr(2, 3, 7, 8, seed=4)
    xt = kiln.tensor(x)
    for ceil_mode in (False, True):
        np.testing.assert_allclose(nn.MaxPool2d(k, s, p, ceil_mode=ceil_mode)(xt).numpy(),
                                   np_pool2d(x, k, s, p, ceil_mode, "max"), rtol=1e-12)
        np.testing.assert_allclose(nn.functional.max_pool2d(xt, k, s, p, 1, ceil_mode).numpy(),
                                   np_pool2d(x, k, s, p, ceil_mode, "max"), rtol=1e-12)
        for include in (True, False):
            want = np_pool2d(x, k, s, p, ceil_mode, "avg", include)
            layer = nn.AvgPool2d(k, s, p, ceil_mode=ceil_mode, count_include_pad=include)
            np.testing.assert_allclose(layer(xt).numpy(), want, rtol=1e-12)
            np.testing.assert_allclose(nn.functional.avg_pool2d(xt, k, s, p, ceil_mode, include).numpy(), want,
                                       rtol=1e-12)
    assert "ceil_mode=True" in repr(nn.MaxPool2d(k, s, p, ceil_mode=True))
    assert "count_include_pad=False" in repr(nn.AvgPool2d(k, s, p, count_include_pad=False))


def test_pool_options_kiln_does_not_take():
    x = kiln.ones(1, 1, 4, 4)
    with pytest.raises(NotImplementedError, match="dilation"):
        nn.MaxPool2d(2, dilation=2)
    with pytest.raises(NotImplementedError, match="return_indices"):
        nn.MaxPool2d(2, return_indices=True)
    with pytest.raises(NotImplementedError, match="divisor_override"):
        nn.AvgPool2d(2, divisor_override=3)
    with pytest.raises(NotImplementedError, match="dilation"):
        nn.functional.max_pool2d(x, 2, dilation=2)
    with pytest.raises(NotImplementedError, match="divisor_override"):
        nn.functional.avg_pool2d(x, 2, divisor_override=3)


@needs_torch
def test_pools_ceil_mode_as_pytorchs():
    import torch
    x = arr(2, 3, 9, 6, seed=5).astype(np.float32)
    for k, s, p in [(3, 2, 1), (2, 2, 1), (4, 3, 2)]:
        for ceil_mode in (False, True):
            tx, kx = torch.tensor(x, requires_grad=True), kiln.tensor(x, requires_grad=True)
            ty = torch.nn.functional.max_pool2d(tx, k, s, p, ceil_mode=ceil_mode)
            ky = nn.functional.max_pool2d(kx, k, s, p, ceil_mode=ceil_mode)
            np.testing.assert_array_equal(ky.numpy(), ty.detach().numpy())
            for include in (True, False):
                ta = torch.nn.functional.avg_pool2d(tx, k, s, p, ceil_mode, include)
                ka = nn.functional.avg_pool2d(kx, k, s, p, ceil_mode, include)
                np.testing.assert_allclose(ka.numpy(), ta.detach().numpy(), rtol=1e-6, atol=1e-7)
                (ta.sum() + ty.sum()).backward()
                (ka.sum() + ky.sum()).backward()
                np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-7)
                tx.grad, kx.grad = None, None
                ty = torch.nn.functional.max_pool2d(tx, k, s, p, ceil_mode=ceil_mode)
                ky = nn.functional.max_pool2d(kx, k, s, p, ceil_mode=ceil_mode)


def np_batch_norm(x, w, b, eps, axes):
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    shape = [1, -1] + [1] * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + eps) * w.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize("make, shape", [(nn.BatchNorm1d, (6, 3)), (nn.BatchNorm1d, (4, 3, 5)),
                                         (nn.BatchNorm2d, (2, 3, 4, 4))])
def test_batch_norm_train_eval_and_running_statistics(make, shape):
    bn = make(3, momentum=0.2)
    with kiln.no_grad():
        bn.weight += kiln.tensor([1.0, 2.0, 0.5])
        bn.bias += kiln.tensor([0.0, -1.0, 3.0])
    w, b = bn.weight.numpy().astype(np.float64), bn.bias.numpy().astype(np.float64)
    axes = tuple(d for d in range(len(shape)) if d != 1)
    mean, var = np.zeros(3), np.ones(3)
    for step in range(2):
        x = arr(*shape, seed=step) * 2 + 1
        np.testing.assert_allclose(bn(kiln.tensor(x.astype(np.float32))).numpy(), np_batch_norm(x, w, b, 1e-5, axes),
                                   rtol=1e-4, atol=1e-4)
        n = x.size // 3
        mean = 0.8 * mean + 0.2 * x.mean(axes)
        var = 0.8 * var + 0.2 * x.var(axes) * n / (n - 1)
    state = bn.state_dict()  # the buffers the C module replaced, rebound in the Python tensors
    np.testing.assert_allclose(state["running_mean"].numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5)
    assert state["num_batches_tracked"].item() == 2
    bn.eval()
    x = arr(*shape, seed=7)
    shape_c = [1, -1] + [1] * (len(shape) - 2)
    want = (x - mean.reshape(shape_c)) / np.sqrt(var.reshape(shape_c) + 1e-5) * w.reshape(shape_c) + b.reshape(shape_c)
    np.testing.assert_allclose(bn(kiln.tensor(x.astype(np.float32))).numpy(), want, rtol=1e-4, atol=1e-4)
    assert bn.num_batches_tracked.item() == 2  # eval leaves the statistics alone
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)


def test_batch_norm_without_affine_or_running_statistics():
    x = arr(4, 2, 3, 3)
    bn = nn.BatchNorm2d(2, affine=False, track_running_stats=False).eval()
    assert bn.weight is None and list(bn.state_dict()) == []
    np.testing.assert_allclose(bn(kiln.tensor(x.astype(np.float32))).numpy(),
                               np_batch_norm(x, np.ones(2), np.zeros(2), 1e-5, (0, 2, 3)), rtol=1e-4, atol=1e-4)


def test_layer_and_group_norm_against_numpy():
    x = arr(2, 4, 3, 5)
    for shape in (5, (3, 5)):
        ln = nn.LayerNorm(shape, eps=1e-3)
        axes = (-1,) if shape == 5 else (-2, -1)
        want = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-3)
        np.testing.assert_allclose(ln(kiln.tensor(x.astype(np.float32))).numpy(), want, rtol=1e-4, atol=1e-4)
    assert nn.LayerNorm(5, elementwise_affine=False).weight is None
    gn = nn.GroupNorm(2, 4)
    with kiln.no_grad():
        gn.weight *= kiln.tensor([1.0, 2.0, 3.0, 4.0])
    g = x.reshape(2, 2, 2 * 3 * 5)
    want = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    want = want * np.array([1.0, 2, 3, 4])[None, :, None, None]
    np.testing.assert_allclose(gn(kiln.tensor(x.astype(np.float32))).numpy(), want, rtol=1e-4, atol=1e-4)


def test_dropout_follows_train_and_eval():
    kiln.manual_seed(11)
    d = nn.Dropout(0.25)
    y = d(kiln.ones(4000)).numpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)} and 0.2 < (y == 0).mean() < 0.3
    assert not np.array_equal(y, d(kiln.ones(4000)).numpy())  # a new mask each call
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5, inplace=True))
    model.eval()
    assert model[1].training is False
    x = kiln.randn(2, 3)
    np.testing.assert_array_equal(model(x).numpy(), model[0](x).numpy())
    kiln.manual_seed(11)
    assert np.array_equal(nn.Dropout(0.25)(kiln.ones(4000)).numpy(), y)  # the seed makes the masks repeat
    kiln.manual_seed(11)  # before the forward, as with torch.manual_seed: the same layer repeats too
    assert np.array_equal(d(kiln.ones(4000)).numpy(), y)


def test_dropout_rejects_a_bad_probability():
    for p in (-0.1, 1.5, float("nan"), "0.5"):
        with pytest.raises(kiln.InvalidArgumentError, match="Dropout at .*test_nn_layers.py"):
            nn.Dropout(p)


# ---- gradients against finite differences -----------------------------------------------------------

def numeric_grad(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        old = a[i]
        a[i] = old + eps
        up = f()
        a[i] = old - eps
        down = f()
        a[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.Linear(3, 2), (4, 3)),
    (lambda: nn.Conv2d(2, 2, 2, stride=1, padding=1), (1, 2, 3, 3)),
    (lambda: nn.BatchNorm1d(2), (4, 2)),
    (lambda: nn.BatchNorm2d(2), (2, 2, 2, 2)),
    (lambda: nn.LayerNorm((2, 3)), (2, 2, 3)),
    (lambda: nn.GroupNorm(2, 4), (2, 4, 3)),
    (lambda: nn.AvgPool2d(2), (1, 1, 4, 4)),
])
def test_gradients_match_finite_differences(make, shape):
    kiln.manual_seed(5)
    m = make().to(kiln.float64)
    params = dict(m.named_parameters())
    with kiln.no_grad():  # weights away from ones and zeros, so their gradients are not special
        for p in params.values():
            p += kiln.tensor(arr(*p.shape, seed=9) * 0.3)
    values = {k: p.numpy().copy() for k, p in params.items()}
    x_np = arr(*shape, seed=4)
    r = None

    def loss():
        m.load_state_dict({**m.state_dict(), **{k: kiln.tensor(v) for k, v in values.items()}})
        return float((m(kiln.tensor(x_np)) * kiln.tensor(r)).sum())

    x = kiln.tensor(x_np, requires_grad=True)
    y = m(x)
    r = arr(*y.shape, seed=6)
    (y * kiln.tensor(r)).sum().backward()
    got = {k: p.grad.numpy() for k, p in params.items()}
    got_x = x.grad.numpy()
    for k in values:
        np.testing.assert_allclose(got[k], numeric_grad(loss, values[k]), rtol=1e-5, atol=1e-7, err_msg=k)
    x_ref = x_np
    np.testing.assert_allclose(got_x, numeric_grad(loss, x_ref), rtol=1e-5, atol=1e-7)


# ---- state_dict, printing, devices -----------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.gn = nn.GroupNorm(2, 4)
        self.fc = nn.Linear(16, 5)
        self.ln = nn.LayerNorm(5)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        x = self.gn(self.pool(self.bn(self.conv(x)).relu()))
        return self.drop(self.ln(self.fc(x.flatten(1))))


NET_KEYS = ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
            "bn.num_batches_tracked", "gn.weight", "gn.bias", "fc.weight", "fc.bias", "ln.weight", "ln.bias"]


def test_state_dict_round_trip_and_repr(tmp_path):
    a, b = Net(), Net()
    assert list(a.state_dict()) == NET_KEYS
    x = kiln.randn(2, 1, 4, 4, seed=1)
    a(x)  # moves a's running statistics
    kiln.save(a.state_dict(), tmp_path / "net.safetensors")
    b.load_state_dict(kiln.load(tmp_path / "net.safetensors"))
    a.eval(), b.eval()
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    assert b.bn.num_batches_tracked.item() == 1
    text = repr(a)
    assert "(conv): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))" in text
    assert "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)" in text
    assert "Linear(in_features=16, out_features=5, bias=True)" in text and "Dropout(p=0.1)" in text


def test_to_dtype_and_device_reach_the_c_module():
    m = Net().eval()
    x = kiln.randn(2, 1, 4, 4, seed=2)
    want = m(x).numpy()
    m.to(kiln.float64)
    assert m.bn.running_var.dtype == kiln.float64 and m.fc.weight.dtype == kiln.float64
    y = m(x.to(kiln.float64))
    assert y.dtype == kiln.float64
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    m.to("cpu")
    assert m(x.to(kiln.float64)).device == x.device


def test_training_a_cnn_lowers_the_loss():
    kiln.manual_seed(0)
    net = Net()
    opt = kiln.optim.Adam(net.parameters(), lr=0.02)
    x = kiln.randn(16, 1, 4, 4, seed=3)
    target = kiln.arange(16) % 5
    losses = []
    for _ in range(25):
        loss = nn.functional.cross_entropy(net(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    assert net.bn.num_batches_tracked.item() == 25


@needs_torch
def test_equal_to_pytorch_with_its_state_dicts(tmp_path):
    import torch
    pairs = [
        (nn.Linear(5, 3), torch.nn.Linear(5, 3), (4, 5)),
        (nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
         (2, 4, 7, 7)),
        (nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3), (6, 3, 4)),
        (nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3), (2, 3, 4, 4)),
        (nn.LayerNorm((3, 4)), torch.nn.LayerNorm((3, 4)), (2, 3, 4)),
        (nn.GroupNorm(3, 6), torch.nn.GroupNorm(3, 6), (2, 6, 5)),
        (nn.MaxPool2d(3, stride=2, padding=1), torch.nn.MaxPool2d(3, stride=2, padding=1), (1, 2, 7, 7)),
        (nn.AvgPool2d(2), torch.nn.AvgPool2d(2), (1, 2, 6, 6)),
    ]
    for ours, theirs, shape in pairs:
        assert list(ours.state_dict()) == list(theirs.state_dict()), type(ours).__name__
        with torch.no_grad():
            for p in theirs.parameters():
                p.add_(torch.randn(p.shape) * 0.2)
        ours.load_state_dict({k: kiln.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
        for step in range(2):
            x = arr(*shape, seed=step).astype(np.float32)
            np.testing.assert_allclose(ours(kiln.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                                       rtol=1e-4, atol=1e-5, err_msg=type(ours).__name__)
        for k, v in theirs.state_dict().items():  # running statistics moved alike
            np.testing.assert_allclose(ours.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    # and back: kiln.save's file loads into PyTorch's layer strictly (names, dtypes, 0-d counter)
    st = pytest.importorskip("safetensors.torch")
    bn, tbn = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    bn(kiln.randn(2, 3, 2, 2))
    kiln.save(bn.state_dict(), tmp_path / "bn.safetensors")
    tbn.load_state_dict(st.load_file(str(tmp_path / "bn.safetensors")))
    assert tbn.num_batches_tracked.item() == 1
    np.testing.assert_allclose(tbn.running_mean.numpy(), bn.running_mean.numpy())
    emb, temb = nn.Embedding(7, 3), torch.nn.Embedding(7, 3)
    emb.load_state_dict({k: kiln.tensor(v.numpy()) for k, v in temb.state_dict().items()})
    idx = np.array([[0, 6, 2]])
    np.testing.assert_array_equal(emb(kiln.tensor(idx)).numpy(), temb(torch.tensor(idx)).detach().numpy())


def test_embedding_padding_idx_is_zero_and_gets_no_gradient():
    emb = nn.Embedding(6, 3, padding_idx=-2)  # row 4
    assert emb.padding_idx == 4 and "padding_idx=4" in repr(emb)
    w = emb.weight.numpy().copy()
    np.testing.assert_array_equal(w[4], 0)
    idx = np.array([[4, 1, 4], [0, 5, 2]])
    y = emb(kiln.tensor(idx))
    np.testing.assert_array_equal(y.numpy(), w[idx])  # a gather of the table, the padding row zero
    r = arr(2, 3, 3, seed=3)
    (y * kiln.tensor(r)).sum().backward()
    expect = np.zeros_like(w)
    for (i, j), row in np.ndenumerate(idx):
        if row != 4:
            expect[row] += r[i, j]
    np.testing.assert_allclose(emb.weight.grad.numpy(), expect, rtol=1e-6)
    for bad in (6, -7, 1.0, "0"):
        with pytest.raises(kiln.InvalidArgumentError, match="Embedding at .*test_nn_layers.py.*padding_idx"):
            nn.Embedding(6, 3, padding_idx=bad)


@needs_torch
def test_embedding_padding_idx_as_pytorchs():
    import torch
    emb, temb = nn.Embedding(7, 3, padding_idx=0), torch.nn.Embedding(7, 3, padding_idx=0)
    emb.load_state_dict({k: kiln.tensor(v.numpy()) for k, v in temb.state_dict().items()})
    idx = np.array([[0, 6, 2, 0]])
    y, ty = emb(kiln.tensor(idx)), temb(torch.tensor(idx))
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy(), temb.weight.grad.numpy())


# ---- bad arguments ---------------------------------------------------------------------------------------

def test_bad_arguments_raise_the_right_class_with_the_line():
    cases = [
        (line_here(), lambda: nn.Linear(-1, 3), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.Linear(4, 3)(kiln.randn(2, 5)), kiln.ShapeError),
        (line_here(), lambda: nn.Conv2d(3, 4, 3)(kiln.randn(1, 2, 5, 5)), kiln.ShapeError),
        (line_here(), lambda: nn.BatchNorm1d(3)(kiln.randn(2, 3, 4, 4)), kiln.ShapeError),
        (line_here(), lambda: nn.BatchNorm2d(3)(kiln.randn(1, 3, 1, 1)), kiln.ShapeError),  # one value per channel in training
        (line_here(), lambda: nn.Dropout(1.5), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.Embedding(0, 3), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.MaxPool2d((2, 3)), kiln.UnsupportedError),
        (line_here(), lambda: nn.LayerNorm(4)(kiln.randn(2, 5)), kiln.ShapeError),
        (line_here(), lambda: nn.Conv2d(3, 4, 0), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.Conv2d(3, 4, 3, groups=2), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.MaxPool2d(0), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.GroupNorm(3, 4), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.BatchNorm1d(0), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.BatchNorm2d(3, momentum=2.0), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.LayerNorm((2, -3)), kiln.InvalidArgumentError),
        (line_here(), lambda: nn.GroupNorm(2, 4)(kiln.randn(2, 6, 3)), kiln.ShapeError),
    ]
    for line, make, cls in cases:  # each error names the line of the call in the lambda
        with pytest.raises(cls) as info:
            make()
        assert f"test_nn_layers.py:{line}:" in str(info.value), str(info.value)
    emb = nn.Embedding(10, 4)
    with pytest.raises(kiln.KilnIndexError) as info:  # found when the gather runs (at once with KILN_SYNC=1)
        line = line_here(); y = emb(kiln.tensor([[11]]))  # noqa: E702
        y.numpy()
    assert f"test_nn_layers.py:{line}" in str(info.value)
    lin = nn.Linear(4, 3)
    lin.weight = kiln.randn(3, 5).requires_grad_()  # a replacement of the wrong shape
    with pytest.raises(kiln.ShapeError) as info:
        line = line_here(); lin(kiln.randn(2, 4)).numpy()  # noqa: E702
    assert f"test_nn_layers.py:{line}" in str(info.value)
    for make, cls in [(lambda: nn.Linear("4", 3), TypeError), (lambda: nn.Linear(4, 3)("x"), TypeError),
                      (lambda: nn.Linear(4, 3)(None), TypeError),
                      (lambda: nn.Conv2d(3, 4, (1, 2, 3)), TypeError), (lambda: nn.Conv2d(3, 4, 2**40), ValueError),
                      (lambda: nn.BatchNorm1d(2.5), TypeError), (lambda: nn.GroupNorm(2, 4, eps="x"), TypeError),
                      (lambda: nn.BatchNorm1d(3, momentum=None), NotImplementedError),
                      (lambda: nn.Linear(2**70, 3), OverflowError),
                      (lambda: kiln._C._module_forward("not a layer", [], True, kiln.randn(1)), TypeError),
                      (lambda: kiln._C._module_forward(lin._layer, [], True, kiln.randn(1)), TypeError)]:
        with pytest.raises(cls):
            make()
    del lin._parameters["bias"]
    with pytest.raises(AttributeError):
        lin(kiln.randn(2, 4))
