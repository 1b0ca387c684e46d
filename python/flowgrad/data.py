"""fg.data: DataLoader over NumPy arrays or tensors; shuffling and batch gathering run in C++."""
import math

import numpy as np

from . import _core

__all__ = ["DataLoader"]


class DataLoader:
    """Iterates tuples of batches (tensors) over arrays of equal length along dim 0.

    shuffle=True draws a fresh permutation every epoch; with a seed the sequence of
    permutations is reproducible and independent of the global generator.
    """

    def __init__(self, *arrays, batch_size, shuffle=False, drop_last=False, seed=None):
        if not arrays:
            raise _core.InvalidArgumentError("DataLoader: expected at least one array")
        if batch_size <= 0:
            raise _core.InvalidArgumentError(f"DataLoader: batch_size must be positive, got {batch_size}")
        self.tensors = [a if isinstance(a, _core.Tensor) else _core.from_numpy(np.ascontiguousarray(a)) for a in arrays]
        lengths = [t.shape[0] if t.ndim else None for t in self.tensors]
        if None in lengths or len(set(lengths)) != 1:
            raise _core.ShapeError(f"DataLoader: arrays must share their first dimension, got lengths {lengths}")
        self.n = lengths[0]
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.seed = seed
        self.epoch = 0

    def __len__(self):
        return self.n // self.batch_size if self.drop_last else math.ceil(self.n / self.batch_size)

    def __iter__(self):
        if self.shuffle:
            if self.seed is None:
                order = _core.randperm(self.n)
            else:
                order = _core.randperm(self.n, seed=self.seed, offset=self.epoch * self.n)
        self.epoch += 1
        for b in range(len(self)):
            start = b * self.batch_size
            size = min(self.batch_size, self.n - start)
            if self.shuffle:
                idx = order.narrow(0, start, size)
                yield tuple(_core.index_select(t, 0, idx) for t in self.tensors)
            else:
                yield tuple(t.narrow(0, start, size) for t in self.tensors)
