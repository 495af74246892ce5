"""A one-block character-level transformer trained on a short text, then greedy generation,
the PyTorch twin of char_transformer.py (bench/.venv/bin/python)."""
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

text = "the quick brown fox jumps over the lazy dog. " * 20
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text])
T, D = 16, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).reshape(x.shape[0], x.shape[1], 3, D).permute(2, 0, 1, 3)
        n = x.shape[1]
        mask = torch.arange(n).reshape(1, n) > torch.arange(n).reshape(n, 1)
        att = (q @ k.transpose(1, 2) / D ** 0.5).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj(att @ v)
        return x + self.mlp(self.ln2(x))


class CharModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(len(chars), D), nn.Embedding(T, D)
        self.block, self.head = Block(), nn.Linear(D, len(chars))

    def forward(self, idx):
        return self.head(self.block(self.tok(idx) + self.pos(torch.arange(idx.shape[1]))))


torch.manual_seed(0)
random.seed(0)
model = CharModel()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
for step in range(steps):
    starts = [random.randrange(len(text) - T - 1) for _ in range(32)]
    xb = torch.stack([data[s:s + T] for s in starts])
    yb = torch.stack([data[s + 1:s + T + 1] for s in starts])
    loss = F.cross_entropy(model(xb).reshape(-1, len(chars)), yb.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0 or step == steps - 1:
        print(f"step {step}: loss {loss.item():.4f}")
ctx = [stoi[c] for c in "the "]
with torch.no_grad():
    for _ in range(40):
        logits = model(torch.tensor([ctx[-T:]]))
        ctx.append(logits[0, -1].argmax().item())
print("".join(chars[i] for i in ctx))
