"""PyTorch's data-set protocol for fg.data: Dataset / IterableDataset to subclass, Subset and
random_split, the samplers, default_collate, and the batches a DataLoader draws from a data set
(its worker threads prefetch them in order)."""
import collections.abc
import concurrent.futures
import itertools
import math

import numpy as np

from . import _core
from ._composite import multinomial

__all__ = ["Dataset", "IterableDataset", "Subset", "random_split", "Sampler", "SequentialSampler", "RandomSampler",
           "BatchSampler", "default_collate", "ConcatDataset", "SubsetRandomSampler", "WeightedRandomSampler"]


class Dataset:
    """A map-style data set: subclasses define __getitem__(i) (a sample) and __len__."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")


class IterableDataset(Dataset):
    """A data set read as a stream: subclasses define __iter__ (samples in order)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class Subset(Dataset):
    """The samples of dataset at indices, in that order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, i):
        if isinstance(i, list):
            return [self.dataset[self.indices[j]] for j in i]
        return self.dataset[self.indices[i]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several map-style data sets one after another (negative indices count from
    the end, as PyTorch's)."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise _core.InvalidArgumentError("ConcatDataset: datasets must not be empty")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise _core.InvalidArgumentError("ConcatDataset: an IterableDataset has no indices to concatenate")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"ConcatDataset: index {i} is out of range for {n} samples")
        i = i + n if i < 0 else i
        which = next(k for k, end in enumerate(self.cumulative_sizes) if i < end)
        return self.datasets[which][i - (self.cumulative_sizes[which - 1] if which else 0)]


def random_split(dataset, lengths):
    """Disjoint random Subsets of the given lengths (ints summing to len(dataset), or fractions
    summing to 1: floors, the remainder handed out one by one from the first, as PyTorch does),
    from one permutation of the global generator (fg.manual_seed reproduces it)."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(f, float) for f in lengths) and math.isclose(sum(lengths), 1.0) \
            and sum(lengths) <= 1 + 1e-9:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(not isinstance(k, int) or k < 0 for k in lengths) or sum(lengths) != n:
        raise _core.InvalidArgumentError(f"random_split: lengths {lengths} must be non-negative ints summing to the "
                                         f"data set's {n} samples, or fractions summing to 1")
    order = _core.randperm(n).tolist()
    starts = np.cumsum([0] + lengths)
    return [Subset(dataset, order[a:b]) for a, b in zip(starts[:-1], starts[1:])]


class Sampler:
    """Base of the samplers: an iterable of sample indices, with a length."""

    def __init__(self, data_source=None):
        self.data_source = data_source

    def __iter__(self):
        return iter(self.indices().tolist())

    def __len__(self):
        return len(self.data_source)


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def indices(self):
        return _core.arange(0, len(self.data_source), 1, dtype=_core.int64)


class RandomSampler(Sampler):
    """num_samples (default len(data_source)) indices drawn afresh each iteration from the global
    generator: permutations of the data set, one after another, or with replacement uniform draws."""

    def __init__(self, data_source, replacement=False, num_samples=None):
        super().__init__(data_source)
        self.replacement = replacement
        self._num_samples = num_samples
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise _core.InvalidArgumentError(f"RandomSampler: num_samples must be a positive int, got {num_samples!r}")

    def __len__(self):
        return self._num_samples or len(self.data_source)

    def indices(self):
        n = len(self.data_source)
        if self.replacement:
            return _core.randint(0, n, (len(self),))
        if len(self) <= n:
            return _core.randperm(n).narrow(0, 0, len(self))
        return _core.cat([_core.randperm(n) for _ in range(math.ceil(len(self) / n))], 0).narrow(0, 0, len(self))


class SubsetRandomSampler(Sampler):
    """The given indices in a fresh random order each iteration (global generator)."""

    def __init__(self, indices):
        super().__init__(None)
        self.subset = list(indices)

    def __len__(self):
        return len(self.subset)

    def indices(self):
        order = _core.randperm(len(self.subset)).tolist()
        return _core.tensor([self.subset[k] for k in order], dtype=_core.int64)


class WeightedRandomSampler(Sampler):
    """num_samples indices into weights, each drawn with probability proportional to its weight
    (fg.multinomial: with replacement by default; without, distinct indices)."""

    def __init__(self, weights, num_samples, replacement=True):
        super().__init__(None)
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise _core.InvalidArgumentError(f"WeightedRandomSampler: num_samples must be a positive int, got "
                                             f"{num_samples!r}")
        self.weights = weights if isinstance(weights, _core.Tensor) else _core.tensor(weights)
        self.weights = self.weights.to(_core.float64)
        if self.weights.ndim != 1:
            raise _core.ShapeError(f"WeightedRandomSampler: weights must be 1-D, got shape {tuple(self.weights.shape)}")
        self.num_samples, self.replacement = num_samples, replacement

    def __len__(self):
        return self.num_samples

    def indices(self):
        return multinomial(self.weights, self.num_samples, self.replacement)


class BatchSampler(Sampler):
    """Lists of batch_size indices from sampler (the last one shorter unless drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise _core.InvalidArgumentError(f"BatchSampler: batch_size must be a positive int, got {batch_size!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(int(i))
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)


def default_collate(batch):
    """PyTorch's default_collate: tensors and arrays stacked along a new first dim, Python ints and
    floats into int64 and float64 tensors, strings kept as a list, and dicts, tuples and lists
    collated field by field (a list of the fields; a namedtuple stays one)."""
    elem = batch[0]
    if isinstance(elem, _core.Tensor):
        return _core.stack(list(batch), 0)
    if isinstance(elem, (np.ndarray, np.number, np.bool_)):
        return _core.from_numpy(np.ascontiguousarray(np.stack(batch)))
    if isinstance(elem, bool):
        return _core.tensor(list(batch), dtype=_core.bool)
    if isinstance(elem, int):
        return _core.tensor(list(batch), dtype=_core.int64)
    if isinstance(elem, float):
        return _core.tensor(list(batch), dtype=_core.float64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([sample[key] for sample in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(field)) for field in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise _core.InvalidArgumentError("default_collate: the samples of a batch have sequences of different "
                                             "lengths")
        return [default_collate(list(field)) for field in zip(*batch)]
    raise TypeError(f"default_collate: samples must hold tensors, arrays, numbers, strings, dicts or sequences; "
                    f"got {type(elem).__name__}")


class DatasetBatches:
    """The batches a DataLoader reads from a data set: a map-style one through a BatchSampler over
    sampler, an IterableDataset in its own order; each list of samples goes through collate_fn.
    num_workers > 0 fetches and collates batches on that many threads (flowgrad's ops let go of the
    GIL), prefetch_factor per thread ahead, handing them out in order; worker_init_fn(i) runs on
    thread i as it starts; timeout (seconds) bounds the wait for one batch (TimeoutError)."""

    def __init__(self, dataset, batch_size, sampler, batch_sampler, drop_last, collate_fn, num_workers,
                 worker_init_fn=None, prefetch_factor=None, timeout=0):
        self.dataset, self.collate_fn, self.num_workers = dataset, collate_fn or default_collate, num_workers
        self.worker_init_fn, self.ahead, self.timeout = worker_init_fn, prefetch_factor or 2, timeout or None
        self.iterable = isinstance(dataset, IterableDataset)
        self.batch_size, self.drop_last = batch_size, drop_last
        if self.iterable:
            self.batch_sampler = None
        elif batch_sampler is not None:
            self.batch_sampler = batch_sampler
        else:
            self.batch_sampler = BatchSampler(sampler, batch_size, drop_last)

    def __len__(self):
        if self.iterable:
            n = len(self.dataset)  # TypeError, as in PyTorch, for a stream without a length
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        return len(self.batch_sampler)

    def _index_batches(self):
        if not self.iterable:
            yield from self.batch_sampler
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def _fetch(self, batch):
        return self.collate_fn(batch if self.iterable else [self.dataset[i] for i in batch])

    def __iter__(self):
        if self.num_workers == 0:
            for batch in self._index_batches():
                yield self._fetch(batch)
            return
        ids = itertools.count()
        init = None if self.worker_init_fn is None else lambda: self.worker_init_fn(next(ids))
        with concurrent.futures.ThreadPoolExecutor(self.num_workers, "fg-data", init) as pool:
            pending = collections.deque()
            for batch in self._index_batches():  # num_workers * prefetch_factor in flight, one in per one out
                pending.append(pool.submit(self._fetch, batch))
                if len(pending) >= self.ahead * self.num_workers:
                    yield pending.popleft().result(self.timeout)
            while pending:
                yield pending.popleft().result(self.timeout)
