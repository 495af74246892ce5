"""kiln.utils.data: TensorDataset and a DataLoader over NumPy arrays or Python datasets."""
import numpy as np

import kiln


class TensorDataset:
    def __init__(self, *arrays):
        self.arrays = [a.numpy() if isinstance(a, kiln.Tensor) else np.asarray(a) for a in arrays]
        n = {len(a) for a in self.arrays}
        if len(n) != 1:
            raise ValueError("TensorDataset arrays differ in length")

    def __len__(self):
        return len(self.arrays[0])

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)


class DataLoader:
    """Batches of a dataset (anything with __len__ and __getitem__ returning arrays or
    tuples of them), shuffled with its own seed, as kiln tensors."""

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=0):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        order = self.rng.permutation(n) if self.shuffle else np.arange(n)
        for start in range(0, n, self.batch_size):
            idx = order[start:start + self.batch_size]
            if self.drop_last and len(idx) < self.batch_size:
                return
            if isinstance(self.dataset, TensorDataset):
                cols = [a[idx] for a in self.dataset.arrays]
            else:
                items = [self.dataset[int(i)] for i in idx]
                if not isinstance(items[0], tuple):
                    items = [(it,) for it in items]
                cols = [np.stack([np.asarray(it[k]) for it in items]) for k in range(len(items[0]))]
            out = tuple(kiln.tensor(c) for c in cols)
            yield out if len(out) > 1 else out[0]
