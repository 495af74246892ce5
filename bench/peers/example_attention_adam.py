"""A pre-norm self-attention block (token and position embeddings, MultiheadAttention and a
feed-forward layer, each behind a LayerNorm and added back as a residual) trained with Adam to
reverse random token sequences; prints the loss as it falls and the share of tokens a fresh
batch gets right. The PyTorch version of examples/attention_adam.c.
Usage: example_attention_adam.py [--steps N]"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

V, L, D, N = 10, 8, 32, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(L, D) * 0.1)
        self.norm1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, 4, batch_first=True)
        self.norm2 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.head = nn.Linear(D, V)

    def forward(self, x):
        h = self.embed(x) + self.pos
        a = self.norm1(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        h = h + self.ff(self.norm2(h))
        return self.head(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    steps = p.parse_args().steps
    if steps < 1:
        p.error("--steps must be at least 1")
    torch.manual_seed(0)
    model = Block()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(1, steps + 1):
        x = torch.randint(0, V, (N, L))
        loss = F.cross_entropy(model(x).reshape(-1, V), x.flip(1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 or step % 25 == 0 or step == steps:
            print(f"step {step} loss {loss.item():.4f}")
    x = torch.randint(0, V, (N, L))
    with torch.no_grad():
        print(f"tokens right {(model(x).argmax(2) == x.flip(1)).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
