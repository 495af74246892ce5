"""kiln.utils.data: TensorDataset and a DataLoader over NumPy arrays or Python datasets.

A TensorDataset of one or two arrays of kiln's dtypes is loaded by kiln's C loader
(kiln/data.h): `num_workers` threads shuffle and assemble whole batches ahead of the training
loop, without the GIL, and hand them over in order. Any other dataset (anything with __len__ and
__getitem__) is batched here in Python, as PyTorch's loader with num_workers=0 does."""
import numpy as np

import kiln
from kiln import _C


class TensorDataset:
    """Rows of one or more arrays of equal length: NumPy arrays (anything np.asarray takes) or
    kiln tensors, which are kept as they are rather than copied into NumPy arrays."""

    def __init__(self, *arrays):
        self.arrays = [a if isinstance(a, kiln.Tensor) else np.asarray(a) for a in arrays]
        n = {len(a) for a in self.arrays}
        if len(n) != 1:
            raise ValueError("TensorDataset arrays differ in length")

    def __len__(self):
        return len(self.arrays[0])

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)


def _numpy_dtype_name(a):
    """The NumPy name of an array's or a tensor's dtype (None for kiln dtypes NumPy lacks)."""
    return a.dtype.numpy_name if isinstance(a, kiln.Tensor) else a.dtype.name


def _c_loadable(dataset):
    return (isinstance(dataset, TensorDataset) and len(dataset.arrays) in (1, 2) and len(dataset) > 0
            and all(a.ndim >= 1 and _numpy_dtype_name(a) in kiln._NUMPY_TO_KILN
                    and (not isinstance(a, kiln.Tensor) or str(a.device) == "cpu") for a in dataset.arrays))


class DataLoader:
    """Batches of a dataset as kiln tensors, shuffled with its own seed (each epoch, that is each
    iteration, a new order). num_workers: the C loader's threads (0: on the calling thread)."""

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=0, num_workers=2):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(num_workers, int) or not 0 <= num_workers <= 256:
            raise ValueError(f"num_workers must be an int from 0 to 256, got {num_workers!r}")
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(f"a dataset needs __len__ and __getitem__; {type(dataset).__name__} has not both")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.rng = np.random.default_rng(seed)
        self.epoch = 0
        self._loader = None
        if _c_loadable(dataset):
            arrays = dataset.arrays if len(dataset.arrays) == 2 else [dataset.arrays[0], np.zeros(len(dataset), np.int32)]
            self._single = len(dataset.arrays) == 1
            self._loader = _C._loader_new(kiln.as_tensor(arrays[0]), kiln.as_tensor(arrays[1]), batch_size, num_workers,
                                          bool(shuffle), bool(drop_last), int(seed))

    def __len__(self):
        if self._loader is not None:
            return _C._loader_batches(self._loader)
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        if self._loader is not None:
            return self._c_batches(epoch)
        return self._python_batches()

    def _c_batches(self, epoch):
        # one C loader serves one iteration at a time: a newer one restarts it, and an older
        # iterator resumed after that is refused rather than handed the newer epoch's batches
        _C._loader_start_epoch(self._loader, epoch)
        while self.epoch == epoch + 1 and (batch := _C._loader_next(self._loader)) is not None:
            yield batch[0] if self._single else batch
        if self.epoch != epoch + 1:
            raise RuntimeError("this DataLoader's iterator was replaced by a newer one (kiln's loader runs one at a time)")

    def _python_batches(self):
        n = len(self.dataset)
        order = self.rng.permutation(n) if self.shuffle else np.arange(n)
        for start in range(0, n, self.batch_size):
            idx = order[start:start + self.batch_size]
            if self.drop_last and len(idx) < self.batch_size:
                return
            if isinstance(self.dataset, TensorDataset):  # whole batches by index: a tensor's stays a gather
                out = tuple(a[kiln.tensor(idx)] if isinstance(a, kiln.Tensor) else kiln.tensor(a[idx])
                            for a in self.dataset.arrays)
            else:
                items = [self.dataset[int(i)] for i in idx]
                if not isinstance(items[0], tuple):
                    items = [(it,) for it in items]
                out = tuple(kiln.tensor(np.stack([np.asarray(it[k]) for it in items])) for k in range(len(items[0])))
            yield out if len(out) > 1 else out[0]

    def close(self):
        """Stops the loader's threads now (they stop too when the DataLoader is collected)."""
        if self._loader is not None:
            _C._loader_close(self._loader)
