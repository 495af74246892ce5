"""kiln.optim's updates against a NumPy float64 reference of PyTorch's formulas: SGD (momentum,
L2 decay), Adam (L2 decay) and AdamW (decoupled decay) over two parameter groups whose learning
rates change between steps, on kiln's C optimizers (python/src/optim.c) and on the Python
updates they replace; a parameter rebound by an in-place op is followed with its state; the
cases the C optimizers leave to Python (float16, per-group betas) and the errors of a step."""
import inspect

import numpy as np
import pytest

import kiln

C = np.array([[0.5, -1.0, 2.0], [0.25, 3.0, -0.5]])
LRS = [(0.1, 0.05), (0.2, 0.05), (0.05, 0.01)]  # the groups' learning rates at each step


def reference(kind, w0, b0, steps, wd):
    """PyTorch's SGD(momentum 0.9) / Adam / AdamW on loss = sum(C * w^2) + sum(b) in float64."""
    params, state = [w0.copy(), b0.copy()], [{}, {}]
    for t, lrs in enumerate(LRS[:steps], 1):
        for i, lr in enumerate(lrs):
            p, s = params[i], state[i]
            g = 2 * C * p if i == 0 else np.ones_like(p)
            if kind == "sgd":
                g = g + wd * p
                s["buf"] = g.copy() if "buf" not in s else 0.9 * s["buf"] + g
                params[i] = p - lr * s["buf"]
                continue
            if kind == "adamw":
                p = p * (1 - lr * wd)
            else:
                g = g + wd * p
            s["m"] = 0.9 * s.get("m", 0) + 0.1 * g
            s["v"] = 0.999 * s.get("v", 0) + 0.001 * g * g
            denom = np.sqrt(s["v"] / (1 - 0.999 ** t)) + 1e-8
            params[i] = p - lr / (1 - 0.9 ** t) * s["m"] / denom
    return params


def make(kind, w, b, wd):
    groups = [{"params": [w], "lr": LRS[0][0]}, {"params": [b], "lr": LRS[0][1]}]
    if kind == "sgd":
        return kiln.optim.SGD(groups, lr=0.1, momentum=0.9, weight_decay=wd)
    return (kiln.optim.AdamW if kind == "adamw" else kiln.optim.Adam)(groups, weight_decay=wd)


def train(kind, wd, in_c, steps=3, rebind_after=None):
    w0, b0 = np.array([[1.0, -2.0, 3.0], [0.5, 0.25, -1.5]]), np.array([0.3, -0.7])
    w, b = kiln.tensor(w0, requires_grad=True), kiln.tensor(b0, requires_grad=True)
    opt = make(kind, w, b, wd)
    assert opt._c is not None  # float64 parameters: kiln's C optimizer
    if not in_c:
        opt._c = None  # the Python updates
    c = kiln.tensor(C)
    for step in range(steps):
        for g, lr in zip(opt.param_groups, LRS[step]):
            g["lr"] = lr
        opt.zero_grad()
        ((c * w * w).sum() + b.sum()).backward()
        opt.step()
        if step == rebind_after:
            with kiln.no_grad():
                w *= 1.0  # the same values in a new tensor bound to the same Python object
    return (w.numpy(), b.numpy()), reference(kind, w0, b0, steps, wd)


@pytest.mark.parametrize("kind,wd", [("sgd", 0.0), ("sgd", 0.1), ("adam", 0.0), ("adam", 0.1), ("adamw", 0.1)])
@pytest.mark.parametrize("in_c", [True, False])
def test_updates_match_the_reference(kind, wd, in_c):
    got, want = train(kind, wd, in_c)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14)


def test_a_rebound_parameter_is_followed_with_its_state():
    got, want = train("adam", 0.0, True, steps=3, rebind_after=0)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


def test_cases_left_to_the_python_updates():
    h = kiln.ones(3, dtype=kiln.float16, requires_grad=True)
    opt = kiln.optim.Adam([h], lr=0.1)
    assert opt._c is None
    (h * h).sum().backward()
    opt.step()
    assert np.all(h.numpy() < 1)
    a, b = kiln.ones(2, requires_grad=True), kiln.ones(2, requires_grad=True)
    per_group = kiln.optim.Adam([{"params": [a]}, {"params": [b], "betas": (0.5, 0.9)}])
    assert per_group._c is None
    assert kiln.optim.SGD([{"params": [a]}, {"params": [b], "momentum": 0.5}])._c is None
    assert kiln.optim.Adam([a, b])._c is not None


@pytest.mark.parametrize("dampening,nesterov", [(0.0, True), (0.3, False), (0.0, False)])
@pytest.mark.parametrize("in_c", [True, False])
def test_sgd_dampening_and_nesterov(dampening, nesterov, in_c):
    w0 = np.array([[1.0, -2.0, 3.0], [0.5, 0.25, -1.5]])
    w = kiln.tensor(w0, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.1, momentum=0.9, dampening=dampening, nesterov=nesterov, weight_decay=0.05)
    assert opt._c is not None
    if not in_c:
        opt._c = None
    c = kiln.tensor(C)
    for _ in range(4):
        opt.zero_grad()
        (c * w * w).sum().backward()
        opt.step()
    want, buf = w0.copy(), None  # torch.optim.SGD's update in float64
    for _ in range(4):
        g = 2 * C * want + 0.05 * want
        buf = g.copy() if buf is None else 0.9 * buf + (1 - dampening) * g
        want = want - 0.1 * (g + 0.9 * buf if nesterov else buf)
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="Nesterov"):
        kiln.optim.SGD([w], lr=0.1, momentum=0.0, nesterov=True)
    with pytest.raises(ValueError, match="Nesterov"):
        kiln.optim.SGD([w], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)


def test_step_errors():
    w = kiln.ones(2, 3, requires_grad=True)
    opt = kiln.optim.Adam([w], lr=0.1)
    opt.step()  # no gradient yet: nothing moves
    np.testing.assert_array_equal(w.numpy(), np.ones((2, 3)))
    w.grad = kiln.ones(3)
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(ValueError) as e:
        opt.step()
    assert f"test_optim.py:{line}" in str(e.value), str(e.value)
    w.grad = None
    opt.param_groups[0]["betas"] = (0.5, 0.9)
    with pytest.raises(RuntimeError, match="learning rate"):
        opt.step()
    opt.param_groups[0]["betas"] = (0.9, 0.999)
    opt.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError):
        opt.step()
    with pytest.raises(TypeError):
        kiln._C._optimizer_step(None, [w], [None])
    with pytest.raises(TypeError):
        kiln._C._optimizer_step(opt._c, [w], [])
    with pytest.raises(ValueError):
        kiln._C._optimizer_new("lbfgs", [([w], 0.1, 0.0)], ())


def test_two_threads_stepping_one_optimizer():
    # a step waits for its gradients without the GIL; a second thread entering the same
    # optimizer meanwhile is refused with RuntimeError, never a crash or a torn update
    import threading

    w = kiln.ones(600, 600, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=1e-6)
    errors = []

    def steps():
        for _ in range(10):
            try:
                opt.step()
            except RuntimeError as e:
                errors.append(str(e))

    ((w @ w).sum()).backward()  # a gradient that takes a while: the steps overlap it
    threads = [threading.Thread(target=steps) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all("another thread" in e for e in errors), errors
    assert np.isfinite(w.numpy()).all()
