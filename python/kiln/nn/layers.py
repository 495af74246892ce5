"""kiln.nn.LSTM, GRU and MultiheadAttention: kiln's C layers (kiln_lstm, kiln_gru,
kiln_multihead_attention) behind PyTorch's signatures. The parameters are ordinary Module
parameters, named as PyTorch names them, so optimizers, state_dict and load_state_dict see them;
each forward hands the current ones to the C layer (python/src/layers.c)."""
import kiln
from .. import _C
from .modules import Module, Parameter


def _seed():
    """A seed for the C layer's initialisation, drawn from kiln's global generator, so
    kiln.manual_seed makes the layers' weights repeat."""
    return int((kiln.rand(1, dtype=kiln.float64) * 2.0 ** 52).item())


class _CLayer(Module):
    def _adopt(self, layer):
        object.__setattr__(self, "_layer", layer)
        names = []
        for name, t in _C._layer_params(layer):
            owner, leaf = self, name
            if "." in name:  # out_proj.weight: a child module, as PyTorch's
                child, leaf = name.split(".", 1)
                if child not in self._modules:
                    setattr(self, child, Module())
                owner = self._modules[child]
            setattr(owner, leaf, Parameter(t))
            names.append((owner, leaf))
        object.__setattr__(self, "_slots", names)

    def _current(self):
        return [owner._parameters[leaf] for owner, leaf in self._slots]


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
