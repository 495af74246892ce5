"""kiln.nn: Module (subclassable, parameters registered by assignment), layers and losses."""
from . import functional  # noqa: F401
from .modules import (Module, Parameter, ReLU, GELU, Tanh, Sigmoid, SiLU, Flatten, Sequential,  # noqa: F401
                      CrossEntropyLoss, MSELoss)
from .layers import (Linear, Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, BatchNorm1d, BatchNorm2d,  # noqa: F401
                     LayerNorm, GroupNorm, Embedding, Dropout, LSTM, GRU, MultiheadAttention)
from . import utils  # noqa: F401
