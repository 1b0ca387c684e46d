"""fg.data: DataLoader over NumPy arrays or tensors (shuffling and batch gathering run in C++) or
over any data set with PyTorch's protocol (Dataset, IterableDataset, samplers, collate_fn)."""
import math
import threading

import numpy as np

from . import _core
from ._datasets import (
    BatchSampler, ConcatDataset, Dataset, DatasetBatches, IterableDataset, RandomSampler, Sampler, SequentialSampler,
    Subset, SubsetRandomSampler, WeightedRandomSampler, default_collate, random_split,
)

__all__ = ["DataLoader", "DistributedSampler", "TensorDataset", "Dataset", "IterableDataset", "Subset", "random_split",
           "Sampler", "SequentialSampler", "RandomSampler", "BatchSampler", "default_collate", "ConcatDataset",
           "SubsetRandomSampler", "WeightedRandomSampler"]


def _native(array):
    """A C-contiguous array in the machine's byte order (from_numpy shares memory, so it cannot
    byte-swap; this copies only arrays that need it)."""
    array = np.asarray(array)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))


class TensorDataset(Dataset):
    """Tensors (or arrays) of equal length along dim 0, sample i being the tuple of their i-th
    rows: ``DataLoader(TensorDataset(x, y), batch_size=32)`` as in PyTorch (the loader then
    gathers whole batches in C++, never sample by sample)."""

    def __init__(self, *tensors):
        if not tensors:
            raise _core.InvalidArgumentError("TensorDataset: expected at least one tensor")
        self.tensors = tuple(t if isinstance(t, _core.Tensor) else _core.from_numpy(_native(t)) for t in tensors)
        lengths = [t.shape[0] if t.ndim else None for t in self.tensors]
        if None in lengths or len(set(lengths)) != 1:
            raise _core.ShapeError(f"TensorDataset: tensors must share their first dimension, got lengths {lengths}")

    def __len__(self):
        return self.tensors[0].shape[0]

    def __getitem__(self, i):
        return tuple(t[i] for t in self.tensors)


class DataLoader:
    """Iterates tuples of batches (tensors) over arrays of equal length along dim 0.

    shuffle=True draws a fresh permutation every epoch; with a seed the sequence of
    permutations is reproducible and independent of the global generator. state_dict() holds
    the epoch and the position in it, so a loader restored with load_state_dict() continues an
    interrupted epoch with the same order and the same remaining batches.

    Several threads may iterate one loader at once: their loops share one epoch, and each batch
    goes to exactly one thread (so every sample is seen once per epoch across them). A loop left
    early (break) ends its part; the next loop started when no other is running begins a new epoch.
    """

    def __init__(self, *arrays, dataset=None, batch_size=1, shuffle=False, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, seed=None, timeout=0,
                 worker_init_fn=None, prefetch_factor=None, persistent_workers=False):
        dataset, arrays = _dataset_and_arrays(dataset, arrays)
        if dataset is not None and (collate_fn is not None or batch_sampler is not None or num_workers
                                    or not isinstance(dataset, TensorDataset)
                                    or not (sampler is None or hasattr(sampler, "indices"))):
            self._init_dataset(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
                               drop_last)
            self._source = DatasetBatches(dataset, batch_size, self.sampler, batch_sampler, drop_last, collate_fn,
                                          num_workers, worker_init_fn, prefetch_factor, timeout)
            return
        self.dataset = dataset
        self._source = None
        if dataset is not None:
            arrays = dataset.tensors
        if not arrays:
            raise _core.InvalidArgumentError("DataLoader: expected at least one array")
        if batch_size <= 0:
            raise _core.InvalidArgumentError(f"DataLoader: batch_size must be positive, got {batch_size}")
        self.tensors = [a if isinstance(a, _core.Tensor) else _core.from_numpy(_native(a)) for a in arrays]
        lengths = [t.shape[0] if t.ndim else None for t in self.tensors]
        if None in lengths or len(set(lengths)) != 1:
            raise _core.ShapeError(f"DataLoader: arrays must share their first dimension, got lengths {lengths}")
        self.n = lengths[0]
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.seed = seed
        self.epoch = 0  # epochs started
        self.position = 0  # batches handed out in the current epoch
        self._epoch_rng = None  # unseeded shuffle: the global generator's (seed, offset) at the epoch's start
        self._resume = False  # set by load_state_dict in the middle of an epoch
        if sampler is not None and shuffle:
            raise _core.InvalidArgumentError("DataLoader: shuffle=True and a sampler exclude each other; "
                                             "the sampler decides the order")
        self.sampler = sampler  # any object with indices() -> int64 tensor, e.g. DistributedSampler
        self._lock = threading.Lock()  # iterations in several threads share the epoch and its position
        self._iterating = 0  # iterations begun and not yet finished or closed
        self._epoch_order = None

    def _init_dataset(self, dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
                      drop_last):
        """Checks the options of a loader reading any data set through PyTorch's protocol."""
        def bad(what):
            return _core.InvalidArgumentError(f"DataLoader: {what}")

        if not isinstance(num_workers, int) or num_workers < 0:
            raise bad(f"num_workers must be an int >= 0, got {num_workers!r}")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise bad("batch_sampler excludes batch_size, shuffle, sampler and drop_last")
        if batch_sampler is None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise bad(f"batch_size must be positive, got {batch_size}")
        if sampler is not None and shuffle:
            raise bad("shuffle=True and a sampler exclude each other; the sampler decides the order")
        if isinstance(dataset, IterableDataset) and (shuffle or sampler is not None or batch_sampler is not None):
            raise bad("an IterableDataset decides its own order: expected no shuffle, sampler or batch_sampler")
        if sampler is None and not isinstance(dataset, IterableDataset):
            sampler = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        self.dataset, self.sampler, self.batch_size, self.drop_last = dataset, sampler, batch_size, drop_last
        self.shuffle, self.num_workers = shuffle, num_workers

    def _count(self):
        return len(self.sampler) if self.sampler is not None else self.n

    def __len__(self):
        if self._source is not None:
            return len(self._source)
        n = self._count()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _order(self):
        if self.seed is not None:
            return _core.randperm(self.n, seed=self.seed, offset=(self.epoch - 1) * self.n)
        if self._resume:  # the permutation the interrupted epoch drew from the global generator
            seed, offset = self._epoch_rng
            return _core.randperm(self.n, seed=seed, offset=offset)
        self._epoch_rng = _core.get_rng_state()
        return _core.randperm(self.n)

    def __iter__(self):
        """Batches of the next epoch; an iteration begun while another is unfinished (another thread's
        loop) joins that epoch instead: the threads share its batches, each batch going to one of them.
        A loader over a data set reads a fresh epoch from it on every iteration."""
        if self._source is not None:
            yield from self._source
            return
        with self._lock:
            if not (self._iterating and self.position < len(self)):
                self._start_epoch()
            epoch, order = self.epoch, self._epoch_order
            self._iterating += 1
        try:
            while True:
                with self._lock:
                    if self.epoch != epoch or self.position >= len(self):
                        return
                    b, self.position = self.position, self.position + 1
                yield self._batch(b, order)
        finally:
            with self._lock:
                self._iterating -= 1

    def _start_epoch(self):
        if not self._resume:
            self.epoch, self.position = self.epoch + 1, 0
        self._epoch_order = self.sampler.indices() if self.sampler is not None else self._order() if self.shuffle else None
        self._resume = False

    def _batch(self, b, order):
        start = b * self.batch_size
        size = min(self.batch_size, self._count() - start)
        if order is None:
            return tuple(t.narrow(0, start, size) for t in self.tensors)
        idx = order.narrow(0, start, size)
        return tuple(_core.index_select(t, 0, idx) for t in self.tensors)

    def _layout(self):
        return {"n": self.n, "batch_size": self.batch_size, "shuffle": self.shuffle, "drop_last": self.drop_last}

    def state_dict(self):
        """Epoch, batches consumed in it and the shuffle seeds, plus the layout they refer to."""
        if self._source is not None:
            raise _core.InvalidArgumentError("DataLoader.state_dict: only a loader over arrays or a TensorDataset "
                                             "keeps its position; this one reads a data set through its protocol")
        rng = None if self._epoch_rng is None else [int(v) for v in self._epoch_rng]
        return {**self._layout(), "epoch": self.epoch, "position": self.position, "seed": self.seed, "epoch_rng": rng}

    def _checked_state(self, state):
        """`state` when it is a state_dict of a loader with this layout, else InvalidArgumentError."""
        def bad(what):
            return _core.InvalidArgumentError(f"DataLoader.load_state_dict: {what}")

        if not isinstance(state, dict) or set(state) != set(self.state_dict()):
            raise bad(f"expected the keys {sorted(self.state_dict())}, got {state!r:.200}")
        layout = {k: state[k] for k in self._layout()}
        if layout != self._layout():
            raise bad(f"the state is for a loader with {layout}, this one has {self._layout()}")

        def count(v):
            return type(v) is int and 0 <= v < 2**64

        rng = state["epoch_rng"]
        if not (count(state["epoch"]) and count(state["position"]) and state["position"] <= len(self)
                and (state["seed"] is None or count(state["seed"]))
                and (rng is None or (isinstance(rng, (list, tuple)) and len(rng) == 2 and all(map(count, rng))))):
            raise bad(f"epoch {state['epoch']!r}, position {state['position']!r} (of {len(self)} batches), "
                      f"seed {state['seed']!r} or epoch_rng {rng!r} out of range")
        if self.shuffle and state["seed"] is None and 0 < state["position"] < len(self) and rng is None:
            raise bad("an unseeded shuffled epoch in progress needs its epoch_rng")
        return state

    def load_state_dict(self, state):
        """Restores state_dict(): the next iteration continues an interrupted epoch where it stopped."""
        state = self._checked_state(state)
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]
        self._epoch_rng = None if state["epoch_rng"] is None else tuple(state["epoch_rng"])
        self._resume = 0 < self.position < len(self)


def _is_array(a):
    return isinstance(a, (_core.Tensor, np.ndarray))


def _dataset_and_arrays(dataset, arrays):
    """(dataset, arrays) from DataLoader's arguments: a first positional argument that is no array
    is the data set, as PyTorch's DataLoader(dataset, ...)."""
    if arrays and not _is_array(arrays[0]):
        if dataset is not None or len(arrays) > 1:
            raise _core.InvalidArgumentError("DataLoader: expected one data set or arrays; pass the options "
                                             "(batch_size=..., shuffle=...) by keyword")
        dataset, arrays = arrays[0], ()
    if dataset is not None and arrays:
        raise _core.InvalidArgumentError("DataLoader: expected a data set or arrays, not both")
    if dataset is not None and not hasattr(dataset, "__getitem__") and not isinstance(dataset, IterableDataset):
        raise TypeError(f"DataLoader: the data set must define __getitem__ and __len__ (or be an "
                        f"IterableDataset), got {type(dataset).__name__}")
    return dataset, arrays


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
