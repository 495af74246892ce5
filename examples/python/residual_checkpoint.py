"""A residual block written as a Module subclass, trained on a toy regression, saved and
loaded back (safetensors), as the PyTorch twin torch_residual_checkpoint.py does."""
import os
import tempfile

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


class Residual(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


model = nn.Sequential(Residual(16), Residual(16), nn.Linear(16, 1))
opt = kiln.optim.Adam(model.parameters(), lr=1e-3)
x = kiln.randn(256, 16)
y = (x * x).sum(dim=1, keepdim=True) / 16
for step in range(200):
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
path = os.path.join(tempfile.mkdtemp(), "residual.safetensors")
kiln.save(model.state_dict(), path)
copy = nn.Sequential(Residual(16), Residual(16), nn.Linear(16, 1))
copy.load_state_dict(kiln.load(path))
print("same after reload:", bool((copy(x) - model(x)).abs().max() < 1e-6))
