"""Reads an IDX file (the MNIST family's format, gzip-compressed as Debian's
dataset-fashion-mnist ships it) into a NumPy array, for the Python peers and bench/python
without importing PyTorch."""
import gzip

import numpy as np


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
