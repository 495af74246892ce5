"""kiln.nn's layers with parameters or state (Linear, Conv2d, the pools, the norms, Embedding,
LSTM, GRU, MultiheadAttention; and Dropout, which draws from the global generator as PyTorch's
does, over kiln.nn.functional.dropout): kiln's C modules (kiln_linear_new, ...) behind
PyTorch's signatures. Their parameters and buffers are the C module's tensors (new handles to
them, not copies), registered as ordinary Module parameters and buffers under PyTorch's names,
so optimizers, state_dict and load_state_dict see them; each forward hands the module's current
ones (an optimizer or load_state_dict may have rebound them) and the training flag to the C
module and runs it (python/src/layers.c, layer_modules.c)."""
import os
import sys

import kiln
from .. import _C
from . import functional as F
from .modules import Module

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _seed():
    """A seed for the C layer's initialisation, drawn from kiln's global generator, so
    kiln.manual_seed makes the layers' weights repeat."""
    return int((kiln.rand(1, dtype=kiln.float64) * 2.0 ** 52).item())


def _caller():
    """file:line of the innermost frame outside the kiln package, as kiln's own errors name it."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "<python>"


def _pair(v, what):
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    if isinstance(v, (tuple, list)) and len(v) == 2:
        return tuple(v)
    raise TypeError(f"{what} must be an int or a pair of ints, not {v!r}")


def _square(v, what, layer):
    a, b = _pair(v, what)
    if a != b:
        raise kiln.UnsupportedError(f"{layer} at {_caller()}: kiln's pools take square {what}s, got {v!r}")
    return a


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check(layer, bad, message):
    """The checks of the norms kiln has as functional ops only (their C modules are made here,
    not by a kiln constructor that would name the line): a kiln.InvalidArgumentError naming it.
    Wrong types are left to the binding's TypeError."""
    if bad:
        raise kiln.InvalidArgumentError(f"{layer} at {_caller()}: {message}")


def _check_eps(layer, eps):
    _check(layer, _is_number(eps) and not 0 <= eps < float("inf"), f"eps {eps} must be finite and >= 0")


class _CLayer(Module):
    def _adopt(self, layer):
        object.__setattr__(self, "_layer", layer)
        slots = []
        for name, t, buffer in _C._layer_params(layer):
            owner, leaf = self, name
            if "." in name:  # out_proj.weight: a child module, as PyTorch's
                child, leaf = name.split(".", 1)
                if child not in self._modules:
                    setattr(self, child, Module())
                owner = self._modules[child]
            if buffer:
                owner.register_buffer(leaf, t)
            else:
                setattr(owner, leaf, t)
            slots.append((owner._buffers if buffer else owner._parameters, leaf))
        object.__setattr__(self, "_slots", slots)

    def _current(self):
        try:
            return [store[leaf] for store, leaf in self._slots]
        except KeyError as e:
            raise AttributeError(f"{type(self).__name__}'s tensor {e} is gone; assign a tensor of its shape "
                                 "that requires grad instead") from None

    def forward(self, x):
        return _C._module_forward(self._layer, self._current(), self.training, x)


class _RNN(_CLayer):
    kind = None

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.batch_first, self.bidirectional = batch_first, bidirectional
        self._adopt(_C._layer_new(self.kind, input_size, hidden_size, num_layers, bias, batch_first, bidirectional,
                                  dropout, _seed()))

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"


class LSTM(_RNN):
    """forward(x, (h0, c0) or None) -> (output, (h_n, c_n)), as torch.nn.LSTM."""
    kind = "lstm"

    def forward(self, x, hx=None):
        if hx is not None and (not isinstance(hx, tuple) or len(hx) != 2):
            raise TypeError("LSTM's hx must be a tuple (h0, c0) or None")
        h0, c0 = hx if hx is not None else (None, None)
        out, h, c = _C._rnn(self._layer, self._current(), self.training, x, h0, c0)
        return out, (h, c)


class GRU(_RNN):
    """forward(x, h0 or None) -> (output, h_n), as torch.nn.GRU."""
    kind = "gru"

    def forward(self, x, hx=None):
        out, h, _ = _C._rnn(self._layer, self._current(), self.training, x, hx, None)
        return out, h


class MultiheadAttention(_CLayer):
    """forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None) ->
    (output, weights averaged over the heads or None), as torch.nn.MultiheadAttention."""

    def __init__(self, embed_dim, num_heads, bias=True, batch_first=False):
        super().__init__()
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self._adopt(_C._layer_new("mha", embed_dim, num_heads, 1, bias, batch_first, False, 0.0, _seed()))

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None):
        return _C._mha(self._layer, self._current(), self.training, query, key, value, key_padding_mask, attn_mask,
                       need_weights)

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


class Linear(_CLayer):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self._adopt(_C._linear_new(in_features, out_features, bias, _seed()))
        if not bias:
            self.bias = None

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv2d(_CLayer):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
        super().__init__()
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _pair(kernel_size, "kernel_size"), _pair(stride, "stride")
        self.dilation = _pair(dilation, "dilation")
        if padding == "valid":
            padding = 0
        elif padding == "same":
            if self.stride != (1, 1) or any(d * (k - 1) % 2 for d, k in zip(self.dilation, self.kernel_size)):
                raise kiln.UnsupportedError(f"Conv2d at {_caller()}: padding='same' needs stride 1 and an odd "
                                            "dilated kernel here")
            padding = tuple(d * (k - 1) // 2 for d, k in zip(self.dilation, self.kernel_size))
        self.padding = _pair(padding, "padding")
        self._adopt(_C._conv2d_new(in_channels, out_channels, *self.kernel_size, *self.stride, *self.padding,
                                   *self.dilation, groups, bias, _seed()))
        if not bias:
            self.bias = None

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class _Pool2d(_CLayer):
    kind = None

    def _make(self, kernel_size, stride, padding, ceil_mode, exclude_pad):
        name = type(self).__name__
        self.kernel_size = _square(kernel_size, "kernel_size", name)
        self.stride = self.kernel_size if stride is None else _square(stride, "stride", name)
        self.padding = _square(padding, "padding", name)
        self.ceil_mode = bool(ceil_mode)
        self._adopt(_C._pool2d_new(self.kind, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                   bool(exclude_pad)))

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
                + (", ceil_mode=True" if self.ceil_mode else ""))


class MaxPool2d(_Pool2d):
    kind = "max"

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        if dilation not in (1, (1, 1)) or return_indices:
            raise kiln.UnsupportedError(f"MaxPool2d at {_caller()}: kiln's pools take no "
                                        + ("return_indices" if return_indices else f"dilation {dilation!r}"))
        self._make(kernel_size, stride, padding, ceil_mode, False)


class AvgPool2d(_Pool2d):
    kind = "avg"

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        if divisor_override is not None:
            raise kiln.UnsupportedError(f"AvgPool2d at {_caller()}: kiln's pools take no divisor_override")
        self.count_include_pad = bool(count_include_pad)
        self._make(kernel_size, stride, padding, ceil_mode, not self.count_include_pad)

    def extra_repr(self):
        return super().extra_repr() + ("" if self.count_include_pad else ", count_include_pad=False")


class AdaptiveAvgPool2d(_CLayer):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size
        self._adopt(_C._pool2d_new("adaptive", *_pair(output_size, "output_size"), 0, False, False))

    def extra_repr(self):
        return f"output_size={self.output_size}"


class _BatchNorm(_CLayer):
    dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if momentum is None:
            raise kiln.UnsupportedError(f"{type(self).__name__} at {_caller()}: momentum=None (a cumulative "
                                        "average) is not supported")
        _check(type(self).__name__, _is_int(num_features) and num_features < 1,
               f"num_features {num_features} must be positive")
        _check_eps(type(self).__name__, eps)
        _check(type(self).__name__, _is_number(momentum) and not 0 <= momentum <= 1,
               f"momentum {momentum} must lie in [0, 1]")
        own = self.dims == (4,) and bool(affine) and bool(track_running_stats)  # kiln's BatchNorm2d module
        self._adopt(_C._batch_norm_new(num_features, eps, momentum, affine, track_running_stats, own))
        if not affine:
            self.weight = self.bias = None

    def forward(self, x):
        if isinstance(x, kiln.Tensor) and x.dim() not in self.dims:
            want = " or ".join(f"{d}D" for d in self.dims)
            raise kiln.ShapeError(f"{type(self).__name__} at {_caller()}: expected {want} input, got {x.dim()}D "
                                  f"input of shape {list(x.shape)}")
        return _C._module_forward(self._layer, self._current(), self.training, x)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """[N, C] or [N, C, L], as torch.nn.BatchNorm1d."""
    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """[N, C, H, W], as torch.nn.BatchNorm2d."""
    dims = (4,)


class LayerNorm(_CLayer):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        _check("LayerNorm", any(_is_int(d) and d < 1 for d in self.normalized_shape),
               f"normalized_shape {self.normalized_shape} must have positive sizes")
        _check_eps("LayerNorm", eps)
        self._adopt(_C._layer_norm_new(self.normalized_shape, eps, elementwise_affine))
        if not elementwise_affine:
            self.weight = self.bias = None

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(_CLayer):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True):
        super().__init__()
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        _check("GroupNorm", _is_int(num_groups) and _is_int(num_channels) and
               (num_groups < 1 or num_channels < 1 or num_channels % num_groups),
               f"num_channels ({num_channels}) must be a positive multiple of num_groups ({num_groups})")
        _check_eps("GroupNorm", eps)
        self._adopt(_C._group_norm_new(num_groups, num_channels, eps, affine))
        if not affine:
            self.weight = self.bias = None

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class Embedding(_CLayer):
    """padding_idx as PyTorch's: that row starts at zero and gets no gradient (its lookups are
    masked to zero after the C module's gather, so the gradient there is zero; a row the user
    writes afterwards is still looked up as zero, where PyTorch would return it)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self._adopt(_C._embedding_new(num_embeddings, embedding_dim, _seed()))
        if padding_idx is not None:
            _check("Embedding", not _is_int(padding_idx) or not -num_embeddings <= padding_idx < num_embeddings,
                   f"padding_idx {padding_idx!r} must be an int in [{-num_embeddings}, {num_embeddings})")
            padding_idx %= num_embeddings
            with kiln.no_grad():
                self.weight[padding_idx] = 0.0
        self.padding_idx = padding_idx

    def forward(self, x):
        y = super().forward(x)
        if self.padding_idx is None:
            return y
        return y.masked_fill((x == self.padding_idx).reshape(*x.shape, 1), 0.0)

    def extra_repr(self):
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class Dropout(Module):
    """Each training call draws its mask from kiln's global generator, as torch.nn.Dropout does
    from torch's: kiln.manual_seed(s) before a forward makes that forward's masks repeat. (The C
    module kiln_dropout_new takes a seed of its own instead; C code seeds its layers explicitly.)"""

    def __init__(self, p=0.5, inplace=False):  # inplace: accepted, as kiln reuses the buffer when it can
        super().__init__()
        if not _is_number(p) or not 0 <= p <= 1:
            raise kiln.InvalidArgumentError(f"Dropout at {_caller()}: probability {p!r} is not in [0, 1]")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"
