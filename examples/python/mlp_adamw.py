"""Fashion-MNIST MLP with AdamW parameter groups, a cosine schedule and gradient clipping,
written as the PyTorch version beside it (torch_mlp_adamw.py). Run with .venv-py/bin/python."""
import gzip
import sys

import numpy as np

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.utils.data import DataLoader, TensorDataset

root = "/usr/share/datasets/fashion-mnist/"


def idx(name, offset):
    with gzip.open(root + name) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


x = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype(np.float32) / 255
y = idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64)
model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
opt = kiln.optim.AdamW([{"params": decay, "weight_decay": 1e-2}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
sched = kiln.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)
for epoch in range(epochs):
    total = 0.0
    for xb, yb in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        total += loss.item()
    sched.step()
    print(f"epoch {epoch}: loss {total / len(loader):.4f}")
