"""kiln.optim: SGD, Adam, AdamW, RMSprop and Adagrad over parameter lists or groups.

SGD, Adam and AdamW run on kiln's C optimizers (kiln/optim.h): one fused update per parameter
queued from C at each step (python/src/optim.c), with the learning rates of param_groups read
at every step, so schedulers work as with PyTorch. RMSprop, Adagrad, and any parameters the C
optimizers refuse (not float32/float64), update in Python as in-place tensor ops under
no_grad (each update reuses the parameter's buffer)."""
import math

import kiln
from kiln import _C


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
        self._c = self._c_new()

    def _c_kind(self):
        """(kind, options) of the C optimizer that does this one's updates, or None."""
        return None

    def _c_fixed(self):
        """The hyperparameters the C optimizer took when made, besides the learning rates."""
        return [{k: v for k, v in g.items() if k not in ("params", "lr")} for g in self.param_groups]

    def _c_new(self):
        spec = self._c_kind()
        if spec is None:
            return None
        self._c_params = [p for g in self.param_groups for p in g["params"]]
        self._c_lrs = [g["lr"] for g in self.param_groups]
        self._c_made_with = self._c_fixed()
        groups = [(g["params"], float(g["lr"]), float(g["weight_decay"])) for g in self.param_groups]
        try:
            return _C._optimizer_new(spec[0], groups, spec[1])
        except kiln.KilnError:  # e.g. float16 parameters: the Python updates below take them
            return None

    def zero_grad(self, set_to_none=True):
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None

    def step(self):
        if self._c is not None:
            return self._c_step()
        with kiln.no_grad():
            for g in self.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        self._update(p, p.grad, g, self.state.setdefault(id(p), {}))

    def _c_step(self):
        if self._c_fixed() != self._c_made_with:
            raise RuntimeError("kiln.optim: only the learning rate of a parameter group can change after the "
                               "optimizer is made (make a new optimizer for other hyperparameters)")
        for i, g in enumerate(self.param_groups):
            if g["lr"] != self._c_lrs[i]:
                _C._optimizer_set_lr(self._c, i, float(g["lr"]))
                self._c_lrs[i] = g["lr"]
        _C._optimizer_step(self._c, self._c_params, [p.grad for p in self._c_params])


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")  # as torch.optim.SGD
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=bool(nesterov)))

    def _c_kind(self):
        fixed = {(g["momentum"], g["dampening"], g["nesterov"]) for g in self.param_groups}
        if len(fixed) != 1:
            return None  # one momentum in the C optimizer; per-group ones update here
        momentum, dampening, nesterov = fixed.pop()
        return "sgd", (float(momentum), float(dampening), nesterov)

    def _update(self, p, g, group, state):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        if group["momentum"]:
            buf = state.get("momentum")
            if buf is None:
                buf = state["momentum"] = g.clone()
            else:
                buf *= group["momentum"]
                buf += (1 - group["dampening"]) * g
            g = g + group["momentum"] * buf if group["nesterov"] else buf
        p -= group["lr"] * g

class Adam(Optimizer):
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _c_kind(self):
        if len({(tuple(g["betas"]), g["eps"]) for g in self.param_groups}) != 1:
            return None  # the C optimizer has one set of betas and eps; per-group ones update here
        b1, b2 = self.param_groups[0]["betas"]
        return "adam", (float(b1), float(b2), float(self.param_groups[0]["eps"]), self.decoupled)

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
