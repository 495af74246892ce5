"""A custom module, a pre-norm residual block x + scale * ff(norm(x)), stacked twice under a
linear head and trained a few steps; then saved to a safetensors checkpoint,
loaded into a freshly initialised model, and checked to give the same output, bit
for bit. residual_checkpoint.c beside it is the same program in C with kiln.
Usage: residual_checkpoint.py [STEPS [PATH]]"""
import sys

import torch
from safetensors.torch import load_file, save_file

D = 16


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(D)
        self.ff = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(), torch.nn.Linear(4 * D, D))
        self.scale = torch.nn.Parameter(torch.full((D,), 0.5))

    def forward(self, x):
        return x + self.ff(self.norm(x)) * self.scale


def model_new():
    return torch.nn.Sequential(Residual(), Residual(), torch.nn.Linear(D, 1))


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
path = sys.argv[2] if len(sys.argv) > 2 else "residual_checkpoint.safetensors"
torch.manual_seed(0)
x = torch.randn(128, D)
y = torch.tanh(x).mean(1, keepdim=True)
model, loaded = model_new(), model_new()
opt = torch.optim.Adam(model.parameters())
for step in range(steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"trained {steps} steps, loss {loss.item():.4f}")
save_file(model.state_dict(), path)
loaded.load_state_dict(load_file(path))
with torch.no_grad():
    diff = (model(x) - loaded(x)).abs().max().item()
print(f"saved to {path} and loaded: largest output difference {diff:g}")
sys.exit(diff != 0)
