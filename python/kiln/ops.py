"""kiln.ops: ops registered in C (kiln/custom_op.h), called from Python as torch.ops's are.

    kiln.ops.load_library("build/examples/libswish_ops.so")   # registers example_swish
    y = kiln.ops.example_swish(x)                             # queued; autograd records it
    y.sum().backward()                                        # through the op's backward

An op is looked up by name each time (kiln.ops.<name> or kiln.ops.find(name)), so ops that C
code registered at any time in this process (a loaded library, or a program embedding Python)
are found too (an op named like a function of this module, find or load_library, is reached
with find(name)). Registered ops live until the process ends: there is no unregistering.
"""
import os as _os
import sys as _sys

from . import _C
from ._C import CustomOp  # noqa: F401

_PACKAGE_DIR = _os.path.dirname(_os.path.abspath(__file__))


class UnknownOpError(_C.KilnError, AttributeError):
    """No op is registered under the name (an AttributeError too, so hasattr(kiln.ops, name)
    answers False)."""


def _caller():
    """file:line of the innermost frame outside the kiln package."""
    frame = _sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR + _os.sep):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "<python>"


def find(name):
    """The op registered under name (a CustomOp to call with its input tensors); raises
    UnknownOpError when there is none."""
    op = _C._custom_op_find(name)
    if op is None:
        raise UnknownOpError(f"kiln.ops at {_caller()}: no op named {name!r} is registered "
                             "(load the library that registers it with kiln.ops.load_library)")
    return op


def load_library(path):
    """Loads the shared library at path, which registers its ops (its kiln_register_ops entry
    point, or constructors), as torch.ops.load_library. Build it without linking kiln: its kiln
    calls resolve to this package's kiln. Loading a library again does nothing. Raises OSError
    when it cannot be loaded, a kiln error when its registration fails."""
    _C._custom_op_load_library(_os.fspath(path))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return find(name)
