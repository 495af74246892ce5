"""A dataset class of one's own (points in two interleaved spirals, made on demand by
__getitem__) fed through a shuffling DataLoader to a small classifier, the PyTorch twin of
custom_dataset.py (bench/.venv/bin/python)."""
import math
import sys

import numpy as np

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Spirals:
    def __init__(self, n, noise=0.05, seed=0):
        self.n, self.noise = n, noise
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        label, r = i % 2, (i // 2) / (self.n // 2)
        angle = 2 * math.pi * r + math.pi * label
        point = np.array([r * math.cos(angle), r * math.sin(angle)], np.float32)
        return point + self.noise * self.rng.standard_normal(2).astype(np.float32), label


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
loader = DataLoader(Spirals(1000), batch_size=50, shuffle=True)
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
for epoch in range(epochs):
    total, correct = 0.0, 0
    for xb, yb in loader:
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
        correct += (logits.argmax(1) == yb).sum().item()
    print(f"epoch {epoch}: loss {total / len(loader):.4f} accuracy {correct / len(loader.dataset):.3f}")
