"""Tensors and NumPy sharing memory through DLPack, a computation on them, and printing,
the PyTorch twin of interop_print.py (bench/.venv/bin/python)."""
import numpy as np

import torch

a = np.arange(12, dtype=np.float32).reshape(3, 4)
t = torch.from_dlpack(a)  # no copy: t is a view of a's memory
a[0, 0] = 100.0
print(t)
print("shape", tuple(t.shape), "dtype", t.dtype, "device", t.device)
z = (t - t.mean(1, keepdim=True)) / t.std(1, keepdim=True)
print(z)
ref = (a - a.mean(1, keepdims=True)) / a.std(1, ddof=1, keepdims=True)
print("equals NumPy:", np.allclose(z.numpy(), ref, atol=1e-5))
back = np.from_dlpack(z)  # and back again, still without a copy
print("row sums", back.sum(1).round(4).tolist(), "max", z.max().item())
c = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
print(c @ c, c.tolist(), float(c.sum()))
