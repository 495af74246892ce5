"""An MLP fitting y = sin(x0) + sin(x1) + sin(x2) on fresh random points each step, trained with
AdamW and two parameter groups: weight decay on the weight matrices, none on biases and the
layer norm. mlp_adamw.c beside it is the same program in C with kiln.
Usage: mlp_adamw.py [STEPS]"""
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.LayerNorm(64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
no_decay = [p for n, p in model.named_parameters() if "bias" in n or n.startswith("1.")]
decay = [p for n, p in model.named_parameters() if not ("bias" in n or n.startswith("1."))]
opt = torch.optim.AdamW([{"params": no_decay, "weight_decay": 0.0}, {"params": decay}], lr=1e-2, weight_decay=0.01)
for step in range(1, steps + 1):
    x = torch.randn(256, 3)
    y = torch.sin(x).sum(1, keepdim=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 1 or step % 50 == 0 or step == steps:
        print(f"step {step} loss {loss.item():.4f}")
print(f"{len(no_decay)} parameters without weight decay, {len(decay)} with")
