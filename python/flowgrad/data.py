"""fg.data: DataLoader over NumPy arrays or tensors; shuffling and batch gathering run in C++."""
import math

import numpy as np

from . import _core

__all__ = ["DataLoader", "DistributedSampler"]


class DataLoader:
    """Iterates tuples of batches (tensors) over arrays of equal length along dim 0.

    shuffle=True draws a fresh permutation every epoch; with a seed the sequence of
    permutations is reproducible and independent of the global generator.
    """

    def __init__(self, *arrays, batch_size, shuffle=False, drop_last=False, seed=None, sampler=None):
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
        if sampler is not None and shuffle:
            raise _core.InvalidArgumentError("DataLoader: shuffle=True and a sampler exclude each other; "
                                             "the sampler decides the order")
        self.sampler = sampler  # any object with indices() -> int64 tensor, e.g. DistributedSampler

    def _count(self):
        return len(self.sampler) if self.sampler is not None else self.n

    def __len__(self):
        n = self._count()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        if self.sampler is not None:
            order = self.sampler.indices()
            self.epoch += 1
            for b in range(len(self)):
                start = b * self.batch_size
                idx = order.narrow(0, start, min(self.batch_size, order.shape[0] - start))
                yield tuple(_core.index_select(t, 0, idx) for t in self.tensors)
            return
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


class DistributedSampler:
    """The indices of one rank's shard of a data set of dataset_len samples, for DataLoader(sampler=).

    Each epoch, every rank draws the same permutation (from seed and the epoch set by set_epoch)
    and takes every num_replicas-th index starting at its rank, so the shards are disjoint and
    cover the data set. When dataset_len is not a multiple of num_replicas, the permutation is
    padded with its first indices so every rank gets the same number of samples (a few samples
    then appear twice per epoch); drop_last=True drops the tail instead.
    num_replicas and rank default to fg.distributed.world_size() and rank().
    """

    def __init__(self, dataset_len, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        from . import distributed
        if num_replicas is None:
            num_replicas = distributed.world_size()
        if rank is None:
            rank = distributed.rank()
        if dataset_len < 0 or num_replicas < 1 or not 0 <= rank < num_replicas:
            raise _core.InvalidArgumentError(
                f"DistributedSampler: need dataset_len >= 0, num_replicas >= 1 and 0 <= rank < num_replicas; "
                f"got dataset_len={dataset_len}, num_replicas={num_replicas}, rank={rank}")
        self.dataset_len, self.num_replicas, self.rank = dataset_len, num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0
        per_rank = dataset_len // num_replicas if drop_last else math.ceil(dataset_len / num_replicas)
        self.num_samples, self.total_size = per_rank, per_rank * num_replicas

    def set_epoch(self, epoch):
        """Chooses the epoch's permutation; call it at the start of every epoch, on every rank."""
        self.epoch = epoch

    def __len__(self):
        return self.num_samples

    def indices(self):
        """This rank's indices for the current epoch, as an int64 tensor."""
        n = self.dataset_len
        if self.shuffle:
            order = _core.randperm(n, seed=self.seed, offset=self.epoch * n)
        else:
            order = _core.arange(0, n, 1, dtype=_core.int64)
        if self.total_size > n:  # pad by repeating the permutation from its start
            repeats = math.ceil(self.total_size / n)
            order = _core.cat([order] * repeats, 0)
        order = order.narrow(0, 0, self.total_size)
        return order.reshape(self.num_samples, self.num_replicas)[:, self.rank].contiguous()

    def __iter__(self):
        return iter(self.indices().tolist())
