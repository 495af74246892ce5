"""A character-level LSTM language model (Embedding -> LSTM -> Linear) trained with Adam on
windows of a short generated text: the PyTorch version of examples/char_lstm.c.
Usage: example_char_lstm.py [--steps N]"""
import argparse
import random

import torch
from torch import nn

TEXT = "the quick brown fox jumps over the lazy dog. pack my box with five dozen liquor jugs. "
V, N, T, E, H = 28, 16, 32, 16, 64


def code(c):
    return 26 if c == " " else 27 if c == "." else ord(c) - ord("a")


class CharLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, E)
        self.lstm = nn.LSTM(E, H, batch_first=True)
        self.head = nn.Linear(H, V)

    def forward(self, x):
        return self.head(self.lstm(self.embed(x))[0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    steps = p.parse_args().steps
    torch.manual_seed(0)
    rng = random.Random(0)
    model = CharLSTM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    codes = [code(c) for c in TEXT]
    for step in range(1, steps + 1):
        starts = [rng.randrange(len(TEXT)) for _ in range(N)]
        x = torch.tensor([[codes[(a + t) % len(TEXT)] for t in range(T)] for a in starts])
        y = torch.tensor([[codes[(a + t + 1) % len(TEXT)] for t in range(T)] for a in starts])
        loss = nn.functional.cross_entropy(model(x).reshape(N * T, V), y.reshape(N * T))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 or step % 20 == 0 or step == steps:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
