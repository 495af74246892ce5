"""kiln.save / kiln.load in the safetensors format (readable by safetensors.torch and NumPy):
a tensor, or a dict of name -> tensor such as a Module's state_dict()."""
import json
import struct

from . import _C


def save(obj, path):
    """Writes a tensor (under the name "tensor") or a dict of tensors to path, atomically."""
    if isinstance(obj, _C.Tensor):
        _C._save_tensors(str(path), ["tensor"], [obj])
        return
    if not isinstance(obj, dict) or not obj:
        raise TypeError("kiln.save takes a tensor or a non-empty dict of tensors")
    _C._save_tensors(str(path), [str(k) for k in obj], [v.detach() for v in obj.values()])


def _names(path):
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise _C.KilnError(f"{path}: not a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > 100 << 20:
            raise _C.KilnError(f"{path}: a header of {n} bytes is not believable")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise _C.KilnError(f"{path}: corrupt header ({e})") from None
    if not isinstance(header, dict):
        raise _C.KilnError(f"{path}: corrupt header")
    return [k for k in header if k != "__metadata__"]


def load(path, map_location=None):
    """What kiln.save wrote: a tensor, or a dict of tensors (any safetensors file)."""
    names = _names(str(path))
    if names == ["tensor"]:
        return _C._load_tensor(str(path), "tensor", map_location)
    return {name: _C._load_tensor(str(path), name, map_location) for name in names}
