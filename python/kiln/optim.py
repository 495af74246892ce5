"""kiln.optim: SGD, Adam, AdamW, RMSprop and Adagrad over parameter lists or groups, written as
in-place tensor updates under no_grad (each update reuses the parameter's buffer)."""
import math

import kiln


class Optimizer:
    def __init__(self, params, defaults):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = []
        for g in groups:
            group = dict(defaults)
            group.update(g)
            group["params"] = list(group["params"])
            for p in group["params"]:
                if not isinstance(p, kiln.Tensor) or not p.requires_grad:
                    raise TypeError("optimizer parameters must be tensors that require grad")
            self.param_groups.append(group)
        self.defaults = defaults
        self.state = {}

    def zero_grad(self, set_to_none=True):
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None

    def step(self):
        with kiln.no_grad():
            for g in self.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        self._update(p, p.grad, g, self.state.setdefault(id(p), {}))


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    def _update(self, p, g, group, state):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        if group["momentum"]:
            buf = state.get("momentum")
            if buf is None:
                buf = state["momentum"] = g.clone()
            else:
                buf *= group["momentum"]
                buf += g
            g = buf
        p -= group["lr"] * g


class Adam(Optimizer):
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _update(self, p, g, group, state):
        b1, b2 = group["betas"]
        if group["weight_decay"]:
            if self.decoupled:
                p *= 1 - group["lr"] * group["weight_decay"]
            else:
                g = g + group["weight_decay"] * p
        if not state:
            state["step"] = 0
            state["m"] = kiln.zeros_like(p)
            state["v"] = kiln.zeros_like(p)
        state["step"] += 1
        m, v, t = state["m"], state["v"], state["step"]
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * (g * g)
        step = group["lr"] / (1 - b1 ** t)
        denom = (v / (1 - b2 ** t)).sqrt() + group["eps"]
        p -= step * (m / denom)


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps))

    def _update(self, p, g, group, state):
        if "sq" not in state:
            state["sq"] = kiln.zeros_like(p)
        sq = state["sq"]
        sq *= group["alpha"]
        sq += (1 - group["alpha"]) * (g * g)
        p -= group["lr"] * (g / (sq.sqrt() + group["eps"]))


class Adagrad(Optimizer):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, dict(lr=lr, eps=eps))

    def _update(self, p, g, group, state):
        if "sum" not in state:
            state["sum"] = kiln.zeros_like(p)
        s = state["sum"]
        s += g * g
        p -= group["lr"] * (g / (s.sqrt() + group["eps"]))


class StepLR:
    def __init__(self, optimizer, step_size, gamma=0.1):
        self.optimizer, self.step_size, self.gamma, self.epoch = optimizer, step_size, gamma, 0
        self.base = [g["lr"] for g in optimizer.param_groups]

    def step(self):
        self.epoch += 1
        for g, base in zip(self.optimizer.param_groups, self.base):
            g["lr"] = base * self.gamma ** (self.epoch // self.step_size)


class CosineAnnealingLR:
    def __init__(self, optimizer, T_max, eta_min=0.0):
        self.optimizer, self.T_max, self.eta_min, self.epoch = optimizer, T_max, eta_min, 0
        self.base = [g["lr"] for g in optimizer.param_groups]

    def step(self):
        self.epoch += 1
        for g, base in zip(self.optimizer.param_groups, self.base):
            g["lr"] = self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.epoch / self.T_max)) / 2


lr_scheduler = type("lr_scheduler", (), {"StepLR": StepLR, "CosineAnnealingLR": CosineAnnealingLR})
