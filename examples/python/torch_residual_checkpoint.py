"""A residual block written as a Module subclass, trained on a toy regression, saved and
loaded back (safetensors), the PyTorch twin of residual_checkpoint.py."""
import os
import tempfile

from safetensors.torch import load_file, save_file

import torch
import torch.nn as nn
import torch.nn.functional as F


class Residual(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


model = nn.Sequential(Residual(16), Residual(16), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(256, 16)
y = (x * x).sum(dim=1, keepdim=True) / 16
for step in range(200):
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
path = os.path.join(tempfile.mkdtemp(), "residual.safetensors")
save_file(model.state_dict(), path)
copy = nn.Sequential(Residual(16), Residual(16), nn.Linear(16, 1))
copy.load_state_dict(load_file(path))
print("same after reload:", bool((copy(x) - model(x)).abs().max() < 1e-6))
