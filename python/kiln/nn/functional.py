"""kiln.nn.functional: torch.nn.functional's names over kiln's C ops."""
from .. import _C
from .._C import (linear, conv2d, max_pool2d, avg_pool2d, layer_norm, embedding,  # noqa: F401
                  cross_entropy, mse_loss, l1_loss, nll_loss, binary_cross_entropy_with_logits)


def relu(x):
    return x.relu()


def gelu(x):
    return x.gelu()


def silu(x):
    return x.silu()


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def softmax(x, dim):
    return x.softmax(dim)


def log_softmax(x, dim):
    return x.log_softmax(dim)


def dropout(x, p=0.5, training=True, generator=None):
    return _C.dropout(x, p, training, generator)
