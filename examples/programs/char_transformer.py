"""A character-level transformer language model (token and position embeddings, one pre-norm
block of causal self-attention and a feed-forward layer) trained with Adam on windows of a short
text, then asked for LENGTH characters after "the " by greedy decoding (the most likely next
character each time). char_transformer.c beside it is the same program in C with kiln.
Usage: char_transformer.py [STEPS [LENGTH]]"""
import random
import sys

import torch
import torch.nn.functional as F

TEXT = "the quick brown fox jumps over the lazy dog. pack my box with five dozen liquor jugs. "
CHARS = "abcdefghijklmnopqrstuvwxyz ."
V, L, D, N = 28, 32, 32, 16


class CharTransformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, D)
        self.pos = torch.nn.Parameter(torch.randn(L, D) * 0.02)
        self.norm1 = torch.nn.LayerNorm(D)
        self.q = torch.nn.Linear(D, D, bias=False)
        self.k = torch.nn.Linear(D, D, bias=False)
        self.v = torch.nn.Linear(D, D, bias=False)
        self.norm2 = torch.nn.LayerNorm(D)
        self.ff = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(), torch.nn.Linear(4 * D, D))
        self.head = torch.nn.Linear(D, V)

    def forward(self, x):
        h = self.embed(x) + self.pos[: x.shape[1]]
        n = self.norm1(h)
        h = h + F.scaled_dot_product_attention(self.q(n), self.k(n), self.v(n), is_causal=True)
        return self.head(h + self.ff(self.norm2(h)))


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
length = int(sys.argv[2]) if len(sys.argv) > 2 else 60
torch.manual_seed(0)
random.seed(0)
model = CharTransformer()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
codes = [CHARS.index(c) for c in TEXT]
for step in range(1, steps + 1):
    starts = [random.randrange(len(TEXT)) for _ in range(N)]
    x = torch.tensor([[codes[(at + t) % len(TEXT)] for t in range(L)] for at in starts])
    y = torch.tensor([[codes[(at + t + 1) % len(TEXT)] for t in range(L)] for at in starts])
    loss = F.cross_entropy(model(x).reshape(N * L, V), y.reshape(N * L))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 1 or step % 50 == 0 or step == steps:
        print(f"step {step} loss {loss.item():.4f}")
text = "the "
with torch.no_grad():
    for _ in range(length):
        ctx = torch.tensor([[CHARS.index(c) for c in text[-L:]]])
        text += CHARS[model(ctx)[0, -1].argmax().item()]
print(text)
