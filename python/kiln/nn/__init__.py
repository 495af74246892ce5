"""kiln.nn: Module (subclassable, parameters registered by assignment), layers and losses."""
from . import functional  # noqa: F401
from .modules import (Module, Parameter, Linear, Conv2d, MaxPool2d, LayerNorm, Embedding, Dropout,  # noqa: F401
                      ReLU, GELU, Tanh, Sigmoid, SiLU, Flatten, Sequential, CrossEntropyLoss, MSELoss)
from .layers import LSTM, GRU, MultiheadAttention  # noqa: F401
from . import utils  # noqa: F401
