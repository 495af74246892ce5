"""A one-block transformer-encoder classifier (token and position embeddings, self-attention
with MultiheadAttention, a feed-forward layer, residuals and layer norms, mean pooling) that
learns whether token 0 occurs more often than token 1 in a random sequence: the PyTorch
version of examples/transformer_classifier.c.  Usage: example_transformer.py [--steps N]"""
import argparse

import torch
from torch import nn

V, L, D, N = 8, 12, 32, 64


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(L, D) * 0.02)
        self.attn = nn.MultiheadAttention(D, 4, batch_first=True)
        self.norm1 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 2 * D), nn.ReLU(), nn.Linear(2 * D, D))
        self.norm2 = nn.LayerNorm(D)
        self.head = nn.Linear(D, 2)

    def forward(self, x):
        h = self.embed(x) + self.pos
        h = self.norm1(h + self.attn(h, h, h, need_weights=False)[0])
        h = self.norm2(h + self.ff(h))
        return self.head(h.mean(1))


def batch():
    x = torch.randint(0, V, (N, L))
    return x, ((x == 0).sum(1) > (x == 1).sum(1)).long()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    steps = p.parse_args().steps
    torch.manual_seed(0)
    model = Encoder()
    opt = torch.optim.Adam(model.parameters())
    for step in range(1, steps + 1):
        x, y = batch()
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 or step % 25 == 0 or step == steps:
            print(f"step {step} loss {loss.item():.4f}")
    x, y = batch()
    with torch.no_grad():
        print(f"accuracy {(model(x).argmax(1) == y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
