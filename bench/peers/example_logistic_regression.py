"""Logistic regression on generated data: a weight vector and a bias, plain tensors with
requires_grad, optimized by SGD over the parameter list with binary cross-entropy on the
logits; prints the loss as it falls and the training accuracy. The PyTorch version of
examples/logistic_regression.c.  Usage: example_logistic_regression.py [--steps N]"""
import argparse

import torch
import torch.nn.functional as F

N, D = 512, 8


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    steps = p.parse_args().steps
    if steps < 1:
        p.error("--steps must be at least 1")
    torch.manual_seed(0)
    x = torch.randn(N, D)
    y = (x @ torch.randn(D, 1) + 0.1 * torch.randn(N, 1) > 0).float()
    w = torch.zeros(D, 1, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w, b], lr=0.5)
    for step in range(1, steps + 1):
        loss = F.binary_cross_entropy_with_logits(x @ w + b, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 or step % 20 == 0 or step == steps:
            print(f"step {step} loss {loss.item():.4f}")
    with torch.no_grad():
        print(f"accuracy {((x @ w + b > 0).float() == y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
