"""Gradients from loss.backward() against central finite differences in float64, .grad
accumulation, no_grad, detach, and leaves in in-place updates."""
import numpy as np
import pytest

import kiln


def numeric_grad(f, x_np, eps=1e-6):
    g = np.zeros_like(x_np)
    it = np.nditer(x_np, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        hi, lo = x_np.copy(), x_np.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (f(hi) - f(lo)) / (2 * eps)
    return g


FUNCTIONS = {
    "exp-sum": lambda x: x.exp().sum(),
    "tanh-mean": lambda x: (x.tanh() * 3).mean(),
    "softmax": lambda x: (x.softmax(-1) * kiln.arange(4, dtype=kiln.float64)).sum(),
    "matmul": lambda x: (x @ x.T).sigmoid().sum(),
    "pow-div": lambda x: ((x ** 2 + 1) / (x.abs() + 2)).sum(),
    "index": lambda x: (x[1:, ::2] * 2).sum() + x[0, 1],
    "reduce-dim": lambda x: x.sum(dim=1).log_softmax(0)[0],
    "max": lambda x: x.amax(dim=0).sum(),
    "relu-lin": lambda x: kiln.nn.functional.linear(x, x, None).relu().sum(),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_gradient_matches_finite_differences(name):
    f = FUNCTIONS[name]
    rng = np.random.default_rng(abs(hash(name)) % 1000)
    x_np = rng.standard_normal((3, 4))
    x = kiln.tensor(x_np, requires_grad=True)
    f(x).backward()
    got = x.grad.numpy()
    want = numeric_grad(lambda v: f(kiln.tensor(v)).item(), x_np)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_grad_accumulates_and_resets():
    w = kiln.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3 + 2, 3 + 4])
    w.grad = None
    (w * 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [2, 2])


def test_no_grad_and_detach():
    w = kiln.ones(3, requires_grad=True)
    with kiln.no_grad():
        y = w * 2
    assert not y.requires_grad and kiln.is_grad_enabled()
    assert not w.detach().requires_grad
    z = (w * 2).sum()
    assert z.requires_grad and not z.is_leaf and w.is_leaf
    with pytest.raises(RuntimeError):
        w += 1
    with kiln.no_grad():
        w -= 0.5
    assert w.requires_grad
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 1.0, 1.0])

    @kiln.no_grad()
    def f(v):
        return v * 3
    assert not f(w).requires_grad


def test_backward_errors():
    with pytest.raises(kiln.KilnError):
        kiln.ones(3).sum().backward()  # no graph
    w = kiln.ones(3, requires_grad=True)
    with pytest.raises(kiln.KilnError):
        (w * 2).backward()  # not a scalar
    with pytest.raises(RuntimeError):
        kiln.arange(3).requires_grad_()
