"""A custom dataset (two interleaved spirals, each sample computed when asked for) fed by
PyTorch's DataLoader (shuffled batches assembled by worker processes) to a small MLP trained with
Adam; prints the mean loss of each epoch. custom_dataset.c beside it is the same program in C
with kiln.  Usage: custom_dataset.py [EPOCHS]"""
import math
import sys

import torch


class Spirals(torch.utils.data.Dataset):
    def __init__(self, n, turns):
        self.n, self.turns = n, turns

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        """Sample i: a point of spiral i % 2 (the second is the first turned by half a circle)."""
        t = 0.5 + self.turns * 2 * math.pi * (i // 2) / self.n
        a = t + (i % 2) * math.pi
        return torch.tensor([t * math.cos(a) / 5, t * math.sin(a) / 5]), i % 2


epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
loader = torch.utils.data.DataLoader(Spirals(512, 1.5), batch_size=32, shuffle=True, num_workers=2)
model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                            torch.nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(epochs):
    total = 0.0
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    print(f"epoch {epoch + 1} loss {total / len(loader):.4f}")
