"""kiln.nn.functional: torch.nn.functional's names over kiln's C ops."""
from .. import _C
from .._C import max_pool2d, avg_pool2d, embedding  # noqa: F401

# The norms and losses (layer_norm, group_norm, rms_norm, mse_loss, cross_entropy, ...): one
# function per row of kiln's C row-op table (src/ir/row_table.h), made by the binding
# (python/src/functional_rows.c), so a row added there is a function here with no edit.
globals().update({_name: getattr(_C, _name) for _name in _C._row_functions()})
# linear, conv2d, scaled_dot_product_attention and batch_norm: one function per FUNCTIONAL row of
# the C linear-algebra table (src/ir/linalg_table.h), made by python/src/functional_linalg.c.
globals().update({_name: getattr(_C, _name) for _name in _C._linalg_functions()})
# pad and one_hot: the FUNCTIONAL rows of the C shape op table (src/ir/shape_table.h), made by
# python/src/shape_ops.c.
globals().update({_name: getattr(_C, _name) for _name in _C._shape_functions()})


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
