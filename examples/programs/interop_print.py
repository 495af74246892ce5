"""Interop and printing: a tensor made from a NumPy array and printed, its text taken as a
string, its values read in place through tensor.numpy(), handed out and taken back through
DLPack (the struct NumPy, PyTorch and JAX exchange) without a copy, and saved to a safetensors
file that numpy or PyTorch read, then loaded back. interop_print.c beside it is the same program
in C with kiln.  Usage: interop_print.py [PATH]"""
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

path = sys.argv[1] if len(sys.argv) > 1 else "interop_print.safetensors"
values = np.array([[1, -2.5, 3], [4, 0.125, 6]], dtype=np.float32)
y = torch.from_numpy(values) * 2 + 1
print(y)
print(torch.arange(5))
text = str(y)
print(f"as a string: {len(text)} characters")
v = y.numpy()
m = torch.utils.dlpack.to_dlpack(y)
print(f"y[1][2] read in place: {v[1, 2]:g}")
z = torch.utils.dlpack.from_dlpack(m)
print(f"DLPack: {z.dim()} dims, the same memory: {'yes' if z.data_ptr() == v.ctypes.data else 'no'}")
save_file({"tensor": y}, path)
loaded = load_file(path)["tensor"]
same = bool((loaded == z).all())
print(f"saved to {path} and loaded: equal: {'yes' if same else 'no'}")
sys.exit(not same)
