"""fg.data with PyTorch's data-set protocol: Dataset / IterableDataset subclasses, samplers,
default_collate, DataLoader(dataset=..., sampler=, batch_sampler=, num_workers, collate_fn,
drop_last, pin_memory), random_split, ConcatDataset, SubsetRandomSampler, WeightedRandomSampler,
and the documented errors."""
import collections
import threading

import numpy as np
import pytest

import flowgrad as fg
from flowgrad.data import (
    BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, RandomSampler, SequentialSampler, Subset,
    SubsetRandomSampler, TensorDataset, WeightedRandomSampler, default_collate, random_split,
)


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return fg.tensor([float(i)]), i * i


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter({"x": fg.full((2,), float(i)), "name": f"s{i}"} for i in range(self.n))

    def __len__(self):
        return self.n


def test_map_dataset_batches_in_order_with_default_collate():
    loader = DataLoader(Squares(10), batch_size=4)
    assert len(loader) == 3 and loader.dataset.n == 10
    batches = list(loader)
    x, y = batches[0]
    assert x.shape == (4, 1) and x.dtype == fg.float32 and y.dtype == fg.int64
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), np.arange(10) ** 2)
    assert [b[0].shape[0] for b in DataLoader(dataset=Squares(10), batch_size=4, drop_last=True)] == [4, 4]


def test_shuffle_covers_every_sample_once_and_changes_per_epoch():
    fg.manual_seed(1)
    loader = DataLoader(Squares(20), batch_size=6, shuffle=True, pin_memory=True)
    first = np.concatenate([y.numpy() for _, y in loader])
    second = np.concatenate([y.numpy() for _, y in loader])
    assert sorted(first.tolist()) == sorted(second.tolist()) == [i * i for i in range(20)]
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("workers", [0, 3])
def test_workers_and_collate_fn_keep_the_order(workers):
    seen = set()

    def collate(samples):
        seen.add(threading.current_thread().name.startswith("fg-data"))
        return [i for _, i in samples]

    started = []
    loader = DataLoader(Squares(50), batch_size=7, num_workers=workers, collate_fn=collate,
                        worker_init_fn=started.append)
    assert [b for batch in loader for b in batch] == [i * i for i in range(50)]
    assert seen == {workers > 0}
    assert sorted(started) == list(range(len(started))) and len(started) <= workers


def test_iterable_dataset_and_dict_samples():
    batches = list(DataLoader(Stream(5), batch_size=2))
    assert len(batches) == 3 and batches[0]["name"] == ["s0", "s1"]
    np.testing.assert_array_equal(batches[2]["x"].numpy(), [[4, 4]])
    loader = DataLoader(Stream(5), batch_size=2, drop_last=True, num_workers=2)
    assert len(loader) == 2 and [b["name"] for b in loader] == [["s0", "s1"], ["s2", "s3"]]
    with pytest.raises(fg.InvalidArgumentError, match="an IterableDataset decides its own order"):
        DataLoader(Stream(5), shuffle=True)


def test_samplers():
    ds = Squares(5)
    assert list(SequentialSampler(ds)) == [0, 1, 2, 3, 4]
    fg.manual_seed(0)
    assert sorted(RandomSampler(ds)) == [0, 1, 2, 3, 4]
    drawn = list(RandomSampler(ds, replacement=True, num_samples=30))
    assert len(drawn) == 30 and set(drawn) <= set(range(5))
    batches = list(BatchSampler(SequentialSampler(ds), 2, drop_last=False))
    assert batches == [[0, 1], [2, 3], [4]] and len(BatchSampler(range(5), 2, True)) == 2
    loader = DataLoader(ds, batch_sampler=[[4, 0], [2]])
    assert [y.tolist() for _, y in loader] == [[16, 0], [4]]
    assert [y.tolist() for _, y in DataLoader(ds, sampler=[3, 1], batch_size=5)] == [[9, 1]]


def test_random_sampler_without_replacement_cycles_permutations():
    fg.manual_seed(2)
    drawn = list(RandomSampler(Squares(4), num_samples=10))
    assert sorted(drawn[:4]) == sorted(drawn[4:8]) == [0, 1, 2, 3] and len(drawn) == 10


def test_tensor_dataset_keeps_the_fast_path_and_samplers():
    x, y = np.arange(10, dtype=np.float32), np.arange(10) * 2
    ds = TensorDataset(x, y)
    loader = DataLoader(ds, batch_size=4, sampler=SequentialSampler(ds))
    assert loader.state_dict()["position"] == 0  # arrays: the C++ path that can resume
    np.testing.assert_array_equal(next(iter(loader))[1].numpy(), [0, 2, 4, 6])
    listed = DataLoader(ds, batch_size=4, collate_fn=default_collate)
    bx, by = next(iter(listed))
    np.testing.assert_array_equal(by.numpy(), [0, 2, 4, 6])
    with pytest.raises(fg.InvalidArgumentError, match="only a loader over arrays or a TensorDataset keeps its position"):
        listed.state_dict()


def test_default_collate():
    Point = collections.namedtuple("Point", "x y")
    out = default_collate([Point(1, 2.5), Point(3, 0.5)])
    assert isinstance(out, Point) and out.x.dtype == fg.int64 and out.y.dtype == fg.float64
    arrays = default_collate([np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)])
    assert arrays.shape == (2, 2, 3) and arrays.dtype == fg.float32
    assert default_collate([(fg.ones(2), "a"), (fg.zeros(2), "b")])[1] == ["a", "b"]
    with pytest.raises(TypeError, match="default_collate: samples must hold .* got object"):
        default_collate([object()])


def test_random_split_and_subset():
    fg.manual_seed(4)
    a, b = random_split(Squares(10), [7, 3])
    assert (len(a), len(b)) == (7, 3) and isinstance(a, Subset)
    assert sorted(a.indices + b.indices) == list(range(10))
    assert [len(s) for s in random_split(Squares(10), [0.5, 0.3, 0.2])] == [5, 3, 2]
    assert [len(s) for s in random_split(Squares(11), [0.5, 0.5])] == [6, 5]
    assert a[0][1] == a.indices[0] ** 2
    with pytest.raises(fg.InvalidArgumentError, match=r"random_split: lengths \[4, 4\] must be non-negative ints summing "
                                                      r"to the data set's 10 samples"):
        random_split(Squares(10), [4, 4])


def test_loader_errors():
    with pytest.raises(fg.InvalidArgumentError, match="shuffle=True and a sampler exclude each other"):
        DataLoader(Squares(4), shuffle=True, sampler=[0, 1])
    with pytest.raises(fg.InvalidArgumentError, match="batch_sampler excludes batch_size, shuffle, sampler and drop_last"):
        DataLoader(Squares(4), batch_size=2, batch_sampler=[[0]])
    with pytest.raises(fg.InvalidArgumentError, match="num_workers must be an int >= 0, got -1"):
        DataLoader(Squares(4), num_workers=-1)
    with pytest.raises(fg.InvalidArgumentError, match="pass the options .* by keyword"):
        DataLoader(Squares(4), 2)
    with pytest.raises(TypeError, match="the data set must define __getitem__ and __len__"):
        DataLoader(dataset=3)
    with pytest.raises(NotImplementedError, match="Dataset must define __getitem__"):
        Dataset()[0]


def test_concat_dataset():
    both = ConcatDataset([Squares(3), Subset(Squares(10), [7, 8])])
    assert len(both) == 5 and both.cumulative_sizes == [3, 5]
    assert [both[i][1] for i in range(5)] == [0, 1, 4, 49, 64] and both[-1][1] == 64 and both[-5][1] == 0
    batches = list(DataLoader(both, batch_size=2))
    assert [b[1].tolist() for b in batches] == [[0, 1], [4, 49], [64]]
    with pytest.raises(IndexError, match="ConcatDataset: index 5 is out of range for 5 samples"):
        both[5]
    with pytest.raises(fg.InvalidArgumentError, match="ConcatDataset: datasets must not be empty"):
        ConcatDataset([])
    with pytest.raises(fg.InvalidArgumentError, match="an IterableDataset has no indices"):
        ConcatDataset([Squares(2), Stream(3)])


def test_subset_random_sampler():
    indices = list(range(100, 120))
    fg.manual_seed(5)
    first, second = list(SubsetRandomSampler(indices)), list(SubsetRandomSampler(indices))
    assert sorted(first) == indices and sorted(second) == indices and first != second and first != indices
    fg.manual_seed(5)
    assert list(SubsetRandomSampler(indices)) == first  # the global generator decides
    loader = DataLoader(Squares(200), batch_size=8, sampler=SubsetRandomSampler(range(10)))
    assert sorted(v for b in loader for v in b[1].tolist()) == [i * i for i in range(10)]


def test_weighted_random_sampler():
    fg.manual_seed(0)
    draws = np.array(list(WeightedRandomSampler([1.0, 0.0, 3.0], 20000)))
    counts = np.bincount(draws, minlength=3) / len(draws)
    assert counts[1] == 0 and abs(counts[2] - 0.75) < 0.02  # binomial sd 0.003: 0.02 is 6 sd
    distinct = list(WeightedRandomSampler(fg.tensor([1.0, 2.0, 3.0, 4.0]), 4, replacement=False))
    assert sorted(distinct) == [0, 1, 2, 3]
    assert len(WeightedRandomSampler([1.0, 1.0], 7)) == 7
    with pytest.raises(fg.InvalidArgumentError, match="WeightedRandomSampler: num_samples must be a positive int, "
                                                      "got 0"):
        WeightedRandomSampler([1.0], 0)
    with pytest.raises(fg.ShapeError, match=r"WeightedRandomSampler: weights must be 1-D, got shape \(1, 2\)"):
        WeightedRandomSampler([[1.0, 2.0]], 3)
