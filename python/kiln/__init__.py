"""kiln for Python: tensors whose ops run on kiln's asynchronous C engine.

Ops return at once; reading a value (.item(), .numpy(), print, kiln.sync()) waits, with the
GIL released. Errors name the Python line that queued the failing op.
"""
import os as _os

import numpy as _np

from . import _C
from ._C import *  # noqa: F401,F403  (Tensor, dtypes, ops, creation, errors)
from ._C import Tensor, Generator, float32, float64, int32, int64, float16, bfloat16

bool_ = getattr(_C, "bool")
float = float32  # noqa: A001  (torch.float)
double = float64
half = float16
long = int64  # noqa: A001
int = int32  # noqa: A001

_C._set_package_dir(_os.path.dirname(_os.path.abspath(__file__)))

_NUMPY_TO_KILN = {
    "float32": float32, "float64": float64, "int32": int32, "int64": int64,
    "bool": bool_, "float16": float16,
}


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A tensor copied from a list, number, NumPy array or tensor (torch.tensor's rules:
    Python floats become float32, ints int64; NumPy arrays keep their dtype)."""
    if dtype is not None and not isinstance(dtype, _C.dtype):
        raise TypeError(f"dtype must be a kiln.dtype such as kiln.float32, not {type(dtype).__name__}")
    if isinstance(data, Tensor):
        t = data.detach().clone()
    else:
        from_python = not isinstance(data, _np.ndarray)
        try:
            arr = _np.asarray(data)
        except (ValueError, TypeError, OverflowError) as e:
            raise TypeError(f"kiln.tensor cannot take {type(data).__name__}: {e}") from None
        if arr.dtype == object:
            raise TypeError(f"kiln.tensor cannot take {type(data).__name__} of mixed or non-numeric items")
        if arr.dtype == _np.float64 and from_python:
            arr = arr.astype(_np.float32)
        elif arr.dtype.kind in "iu" and arr.dtype not in (_np.int32, _np.int64):
            arr = arr.astype(_np.int64)
        elif arr.dtype.name not in _NUMPY_TO_KILN:
            raise TypeError(f"kiln.tensor cannot take an array of {arr.dtype}")
        target = _NUMPY_TO_KILN[arr.dtype.name]
        if dtype is not None and dtype.numpy_name is not None:
            arr = arr.astype(dtype.numpy_name, copy=False)
            target = dtype
        t = _C._from_numpy(_np.require(arr, requirements="C"), target, device)
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t


_C._set_tensor_factory(tensor)


def from_numpy(array):
    """A tensor with a copy of a NumPy array's values and dtype."""
    return tensor(_np.asarray(array))


def as_tensor(data, dtype=None, device=None):
    if isinstance(data, Tensor) and (dtype is None or data.dtype == dtype) and device is None:
        return data
    return tensor(data, dtype=dtype, device=device)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return zeros(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return ones(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def full_like(t, fill_value, dtype=None, device=None):
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device)


def randn_like(t, generator=None):
    return randn(*t.shape, dtype=t.dtype, device=t.device, generator=generator)


def rand_like(t, generator=None):
    return rand(*t.shape, dtype=t.dtype, device=t.device, generator=generator)


def max(t, dim=None, keepdim=False):  # noqa: A001
    return t.max(dim, keepdim) if dim is not None else t.max()


def min(t, dim=None, keepdim=False):  # noqa: A001
    return t.min(dim, keepdim) if dim is not None else t.min()


def argmax(t, dim=None, keepdim=False):
    return t.argmax(dim, keepdim)


def reshape(t, *shape):
    return t.reshape(*shape)


def transpose(t, dim0, dim1):
    return t.transpose(dim0, dim1)


def permute(t, *dims):
    return t.permute(*dims)


def clamp(t, min=None, max=None):  # noqa: A002
    return t.clamp(min, max)


def detach(t):
    return t.detach()


class no_grad:
    """Ops inside record no gradient (a context manager and a decorator, per thread)."""

    def __enter__(self):
        _C._no_grad_begin()
        return self

    def __exit__(self, *exc):
        _C._no_grad_end()
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)

        return wrapped


from .serialization import save, load  # noqa: E402,F401
from . import nn, optim, utils, models  # noqa: E402,F401
from . import ops  # noqa: E402,F401


def get_include():
    """The folder of kiln's C headers, to build a library of ops for kiln.ops.load_library
    against (cc -shared -fPIC -I$(python -c 'import kiln; print(kiln.get_include())') ...)."""
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")
