"""kiln.nn's Module and its stateless layers (activations, Flatten, Sequential, losses), written
as PyTorch's are: attributes that are tensors requiring a gradient (parameters) or modules
(children) register themselves. The layers with parameters or state are kiln's C modules
(layers.py)."""
from collections import OrderedDict

import kiln
from . import functional as F


def Parameter(data, requires_grad=True):
    """A leaf tensor a Module registers (kiln's parameters are plain leaf tensors)."""
    t = data.detach().clone() if data.is_leaf is False or data.requires_grad else data
    if requires_grad and not t.requires_grad:
        t.requires_grad_(True)
    return t


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("call super().__init__() before assigning attributes of a Module")
        for store in (self._parameters, self._modules, self._buffers):
            store.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, kiln.Tensor) and value.requires_grad and value.is_leaf:
            self._parameters[name] = value
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        for store in ("_parameters", "_modules", "_buffers"):
            d = self.__dict__.get(store)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def register_buffer(self, name, tensor):
        self._buffers[name] = tensor

    def register_parameter(self, name, tensor):
        self._parameters[name] = tensor

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_parameters(self, prefix=""):
        for name, p in self._parameters.items():
            yield prefix + name, p
        for mname, m in self._modules.items():
            yield from m.named_parameters(prefix + mname + ".")

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(prefix + ("." if prefix else "") + name)

    def children(self):
        return iter(self._modules.values())

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def state_dict(self):
        out = OrderedDict()
        for name, m in self.named_modules():
            pre = name + "." if name else ""
            for k, v in m._parameters.items():
                out[pre + k] = v.detach()
            for k, v in m._buffers.items():
                out[pre + k] = v
        return out

    def load_state_dict(self, state):
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if missing or unexpected:
            raise KeyError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
        for name, m in self.named_modules():
            pre = name + "." if name else ""
            for k, p in list(m._parameters.items()):
                v = state[pre + k]
                if tuple(v.shape) != tuple(p.shape):
                    raise ValueError(f"{pre + k}: shape {tuple(v.shape)} for a parameter of {tuple(p.shape)}")
                # into the same Parameter, as PyTorch copies: an optimizer made before the load
                # holds these objects and must go on updating what the module computes with
                with kiln.no_grad():
                    p[...] = kiln.tensor(v).to(p.dtype)
            for k, b in list(m._buffers.items()):
                v = kiln.tensor(state[pre + k])
                if b is None or tuple(v.shape) != tuple(b.shape):
                    m._buffers[k] = v
                else:
                    b[...] = v.to(b.dtype)

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def to(self, *args, **kwargs):
        for m in self.modules():
            for k, p in list(m._parameters.items()):
                m._parameters[k] = Parameter(p.detach().to(*args, **kwargs))
            for k, b in list(m._buffers.items()):
                m._buffers[k] = b.to(*args, **kwargs)
        return self

    def __repr__(self):
        lines = [f"  ({k}): " + repr(m).replace("\n", "\n  ") for k, m in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}({extra}\n" + "\n".join(lines) + "\n)"

    def extra_repr(self):
        return ""


class _Activation(Module):
    fn = None

    def forward(self, x):
        return type(self).fn(x)


class ReLU(_Activation):
    fn = staticmethod(F.relu)


class GELU(_Activation):
    fn = staticmethod(F.gelu)


class Tanh(_Activation):
    fn = staticmethod(F.tanh)


class Sigmoid(_Activation):
    fn = staticmethod(F.sigmoid)


class SiLU(_Activation):
    fn = staticmethod(F.silu)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Sequential(Module):
    def __init__(self, *layers):
        super().__init__()
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class CrossEntropyLoss(Module):
    def __init__(self, label_smoothing=0.0):
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, logits, target):
        return F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)


class MSELoss(Module):
    def forward(self, a, b):
        return F.mse_loss(a, b)
