"""An MLP classifying points of the plane by the ring they lie in, fed by a DataLoader over
in-memory tensors (shuffled batches) and trained with Adam; then saved to a checkpoint,
loaded into a fresh model, and checked to give the same loss. The PyTorch version of
examples/mlp_checkpoint.c.  Usage: example_mlp_checkpoint.py [--steps N]"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

N, H = 1024, 64


def mlp():
    return nn.Sequential(nn.Linear(2, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 3))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    steps = p.parse_args().steps
    if steps < 1:
        p.error("--steps must be at least 1")
    torch.manual_seed(0)
    x = torch.rand(N, 2) * 4 - 2
    y = (x.norm(dim=1) * 1.5).long().clamp(max=2)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = 0
    while step < steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == 1 or step % 25 == 0 or step == steps:
                print(f"step {step} loss {loss.item():.4f}")
            if step == steps:
                break
    torch.save(model.state_dict(), "mlp_checkpoint.pt")
    loaded = mlp()
    loaded.load_state_dict(torch.load("mlp_checkpoint.pt"))
    with torch.no_grad():
        before, after = F.cross_entropy(model(x), y).item(), F.cross_entropy(loaded(x), y).item()
    print(f"loss on all points: trained {before:.6f}, loaded from the checkpoint {after:.6f}")
    if before != after:
        raise SystemExit("the loaded model differs")


if __name__ == "__main__":
    main()
