"""nn, optim and data: a Module subclass registers its layers' parameters, state_dict round
trips, every optimizer makes a regression's loss fall, clip_grad_norm_, DataLoader batches."""
import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.utils.data import DataLoader, TensorDataset


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def blobs(n=192, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((3, 4)) * 3
    y = rng.integers(0, 3, n)
    x = centers[y] + rng.standard_normal((n, 4))
    return x.astype(np.float32), y.astype(np.int64)


def test_module_registration_and_state_dict():
    m = MLP()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert sum(p.numel() for p in m.parameters()) == 4 * 16 + 16 + 16 * 3 + 3
    state = m.state_dict()
    m2 = MLP()
    m2.load_state_dict(state)
    x = kiln.randn(5, 4, seed=1)
    np.testing.assert_allclose(m(x).numpy(), m2(x).numpy(), rtol=1e-6)
    with pytest.raises(KeyError):
        m2.load_state_dict({"fc1.weight": state["fc1.weight"]})
    assert m.eval().training is False and m.fc1.training is False


@pytest.mark.parametrize("make", [
    lambda p: kiln.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: kiln.optim.Adam(p, lr=0.01),
    lambda p: kiln.optim.AdamW(p, lr=0.01),
    lambda p: kiln.optim.RMSprop(p, lr=0.005),
    lambda p: kiln.optim.Adagrad(p, lr=0.1),
])
def test_training_loss_falls(make):
    x_np, y_np = blobs()
    model = MLP()
    opt = make(model.parameters())
    loader = DataLoader(TensorDataset(x_np, y_np), batch_size=32, shuffle=True)
    losses = []
    for epoch in range(4):
        total = 0.0
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            total += loss.item()
        losses.append(total / len(loader))
    assert losses[-1] < 0.6 * losses[0], losses
    pred = model(kiln.tensor(x_np)).argmax(dim=1).numpy()
    assert (pred == y_np).mean() > 0.8


def test_param_groups_and_scheduler():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    opt = kiln.optim.SGD([{"params": a.parameters()}, {"params": b.parameters(), "lr": 0.5}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    sched = kiln.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.25]


def test_clip_grad_norm():
    w = kiln.tensor([3.0, 4.0], requires_grad=True)
    (w * w).sum().backward()  # grad (6, 8), norm 10
    norm = nn.utils.clip_grad_norm_([w], 1.0)
    assert abs(norm.item() - 10) < 1e-4
    np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-4)


def test_layers_shapes():
    x = kiln.randn(2, 3, 8, 8, seed=2)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 5))
    assert net(x).shape == (2, 5)
    assert nn.LayerNorm(8)(kiln.randn(2, 8)).shape == (2, 8)
    assert nn.Embedding(10, 4)(kiln.tensor([[1, 2], [3, 4]])).shape == (2, 2, 4)
    d = nn.Dropout(0.5)
    kept = d(kiln.ones(100)).tolist()  # each element dropped (0) or kept and scaled by 1 / (1 - p)
    assert set(kept) == {0.0, 2.0}  # both occur but with probability 2 * 2**-100
    assert d.eval()(kiln.ones(100)).sum().item() == 100
    assert "Linear" in repr(net)


def test_dataloader_over_python_dataset():
    class Squares:
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return np.array([i], np.float32), np.int64(i * i)

    batches = list(DataLoader(Squares(), batch_size=4))
    assert len(batches) == 3 and batches[0][0].shape == (4, 1)
    assert batches[2][1].tolist() == [64, 81]


def test_save_load_round_trip(tmp_path):
    m = MLP()
    path = tmp_path / "mlp.safetensors"
    kiln.save(m.state_dict(), path)
    m2 = MLP()
    m2.load_state_dict(kiln.load(path))
    x = kiln.randn(3, 4, seed=9)
    np.testing.assert_allclose(m(x).numpy(), m2(x).numpy(), rtol=1e-6)
    kiln.save(kiln.arange(5), tmp_path / "t.safetensors")
    assert kiln.load(tmp_path / "t.safetensors").tolist() == [0, 1, 2, 3, 4]
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(kiln.KilnError):
        kiln.load(bad)
    with pytest.raises((OSError, kiln.KilnError)):
        kiln.load(tmp_path / "missing.safetensors")
    with pytest.raises(TypeError):
        kiln.save([1, 2], path)


def test_load_state_dict_keeps_the_parameters_an_optimizer_holds():
    # PyTorch copies a state dict into the existing tensors: an optimizer made before the load
    # must go on updating what the module computes with, and buffers keep their objects too
    m = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 2))
    opt = kiln.optim.SGD(m.parameters(), lr=0.5)
    before = [id(p) for p in m.parameters()]
    buffer = m[0].running_mean
    m.load_state_dict({k: v.numpy() * 0 + 1.0 for k, v in m.state_dict().items()})
    assert [id(p) for p in m.parameters()] == before
    assert m[0].running_mean is buffer and buffer.tolist() == [1.0, 1.0, 1.0]
    m(kiln.randn(4, 3, seed=1)).sum().backward()
    opt.step()
    # the step reached the module's own tensors: the Linear's bias has gradient 4 (the batch)
    assert m[1].bias.tolist() == [1.0 - 0.5 * 4, 1.0 - 0.5 * 4]
