"""A tiny convolutional autoencoder: two strided conv2d layers encode 16 x 16 images to
16 x 4 x 4, two conv_transpose2d layers decode them back; trained with Adam on smooth random
images (4 x 4 noise upsampled with bilinear interpolate), minimising the reconstruction's mean
squared error: the PyTorch version of examples/autoencoder.c.  Usage: example_autoencoder.py [--steps N]"""
import argparse

import torch
from torch import nn

N, S = 32, 16


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    steps = p.parse_args().steps
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
        nn.ConvTranspose2d(8, 1, 3, stride=2, padding=1, output_padding=1), nn.Sigmoid())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(1, steps + 1):
        images = nn.functional.interpolate(torch.rand(N, 1, 4, 4), size=(S, S), mode="bilinear")
        loss = nn.functional.mse_loss(model(images), images)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 or step % 20 == 0 or step == steps:
            print(f"step {step} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
