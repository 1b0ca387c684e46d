"""DataLoader: batching, seeded shuffling, drop_last, errors."""
import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import run_threads


def test_sequential_batches_cover_everything():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10)
    loader = fg.data.DataLoader(x, y, batch_size=4)
    assert len(loader) == 3
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(4, 1), (4, 1), (2, 1)]
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), y)
    assert len(fg.data.DataLoader(x, batch_size=4, drop_last=True)) == 2


def test_shuffle_is_seeded_per_epoch_and_keeps_pairs():
    x = np.arange(20, dtype=np.float32)
    y = np.arange(20) * 10
    a = fg.data.DataLoader(x, y, batch_size=6, shuffle=True, seed=7)
    b = fg.data.DataLoader(x, y, batch_size=6, shuffle=True, seed=7)
    epoch1 = [t[0].numpy() for t in a]
    assert np.array_equal(np.concatenate(epoch1), np.concatenate([t[0].numpy() for t in b]))
    epoch2 = np.concatenate([t[0].numpy() for t in a])
    assert not np.array_equal(np.concatenate(epoch1), epoch2)  # a new order every epoch
    assert sorted(epoch2.tolist()) == list(range(20))
    for bx, by in a:
        np.testing.assert_array_equal(by.numpy(), bx.numpy() * 10)


def test_tensors_and_errors():
    t = fg.arange(6).reshape(3, 2)
    (batch,) = next(iter(fg.data.DataLoader(t, batch_size=2)))
    np.testing.assert_array_equal(batch.numpy(), [[0, 1], [2, 3]])
    with pytest.raises(fg.ShapeError, match="arrays must share their first dimension"):
        fg.data.DataLoader(np.zeros(3), np.zeros(4), batch_size=2)
    with pytest.raises(fg.InvalidArgumentError, match="batch_size must be positive"):
        fg.data.DataLoader(np.zeros(3), batch_size=0)


def test_randperm():
    p = fg.randperm(50, seed=3)
    assert sorted(p.tolist()) == list(range(50)) and p.dtype == fg.int64
    np.testing.assert_array_equal(p.numpy(), fg.randperm(50, seed=3).numpy())
    assert fg.randperm(0).shape == (0,)


@pytest.mark.parametrize("shuffle,seed", [(False, None), (True, None), (True, 4)], ids=["ordered", "global", "seeded"])
def test_state_dict_resumes_an_interrupted_epoch(shuffle, seed):
    x = np.arange(22, dtype=np.float32)

    def batches(loader, count):  # `count` batches across epochs, as a training loop takes them
        out, it = [], iter(loader)
        while len(out) < count:
            try:
                out.append(next(it)[0].numpy().tolist())
            except StopIteration:
                it = iter(loader)
        return out

    fg.manual_seed(1)
    straight = batches(fg.data.DataLoader(x, batch_size=5, shuffle=shuffle, seed=seed), 13)  # 5 an epoch
    fg.manual_seed(1)
    loader = fg.data.DataLoader(x, batch_size=5, shuffle=shuffle, seed=seed)
    first = batches(loader, 7)
    state, rng = loader.state_dict(), fg.get_rng_state()  # what save_checkpoint keeps
    assert (state["epoch"], state["position"]) == (2, 2)
    fg.manual_seed(1000)
    resumed = fg.data.DataLoader(x, batch_size=5, shuffle=shuffle, seed=seed)
    resumed.load_state_dict(state)
    fg.set_rng_state(rng)
    rest = batches(resumed, 3)  # the rest of epoch 2 leaves the global generator alone
    assert fg.get_rng_state() == rng
    rest += batches(resumed, 3)
    assert first + rest == straight
    assert (fg.get_rng_state() != rng) == (shuffle and seed is None)  # epoch 3 drew from it
    broken = fg.data.DataLoader(x, batch_size=5, shuffle=shuffle, seed=seed)
    next(iter(broken))  # an epoch left early (a break) is not resumed: the next loop starts a new epoch
    next(iter(broken))
    assert (broken.epoch, broken.position) == (2, 1)


def test_load_state_dict_errors():
    loader = fg.data.DataLoader(np.zeros(10), batch_size=3, shuffle=True)
    good = loader.state_dict()
    for state, message in [({**good, "batch_size": 4}, "the state is for a loader with"),
                           ({**good, "n": 9}, "the state is for a loader with"),
                           ({k: v for k, v in good.items() if k != "seed"}, "expected the keys"),
                           ("state", "expected the keys"),
                           ({**good, "position": 5}, "out of range"),
                           ({**good, "epoch": -1}, "out of range"),
                           ({**good, "epoch_rng": [1]}, "out of range"),
                           ({**good, "epoch": 1, "position": 2}, "an unseeded shuffled epoch in progress needs its epoch_rng")]:
        with pytest.raises(fg.InvalidArgumentError, match=message):
            loader.load_state_dict(state)
    assert loader.state_dict() == good


def test_big_endian_arrays_are_converted():
    x = np.arange(6, dtype=">f8").reshape(3, 2)
    (batch,) = next(iter(fg.data.DataLoader(x, batch_size=3)))
    np.testing.assert_array_equal(batch.numpy(), np.arange(6.0).reshape(3, 2))


@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
def test_threads_iterating_one_loader_share_its_epoch(shuffle):
    import threading
    x = np.arange(1003, dtype=np.float32)
    loader = fg.data.DataLoader(x, x * 2, batch_size=7, shuffle=shuffle, seed=5)
    started = threading.Barrier(8)  # every thread is inside the epoch before any can finish it
    got = {}

    def take(k):
        it = iter(loader)
        mine = [next(it)]
        started.wait(timeout=30)
        mine += list(it)
        got[k] = mine

    assert run_threads(take, 8) == []
    batches = [b for mine in got.values() for b in mine]
    assert len(batches) == len(loader) == 144
    assert sorted(len(a) for a, _ in batches)[1:] == [7] * 143  # whole batches; one short tail
    for a, b in batches:
        np.testing.assert_array_equal(b.numpy(), a.numpy() * 2)  # rows stay paired
    np.testing.assert_array_equal(np.sort(np.concatenate([a.numpy() for a, _ in batches])), x)
    assert (loader.epoch, loader.position) == (1, 144)
    assert len(list(loader)) == 144 and loader.epoch == 2  # a later loop begins a new epoch


def test_a_tensor_dataset_feeds_the_loader_as_its_tensors_would():
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    ds = fg.data.TensorDataset(fg.tensor(x), y)
    assert len(ds) == 10
    xi, yi = ds[3]
    np.testing.assert_array_equal(xi.numpy(), x[3])
    assert yi.item() == 3
    via_dataset = [tuple(t.numpy() for t in b) for b in fg.data.DataLoader(ds, batch_size=4, shuffle=True, seed=5)]
    direct = [tuple(t.numpy() for t in b) for b in fg.data.DataLoader(fg.tensor(x), y, batch_size=4, shuffle=True,
                                                                      seed=5)]
    assert len(via_dataset) == 3
    for a, b in zip(via_dataset, direct):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)
    with pytest.raises(fg.ShapeError, match=r"TensorDataset: tensors must share their first dimension, "
                                            r"got lengths \[10, 9\]"):
        fg.data.TensorDataset(x, y[:9])
    with pytest.raises(fg.InvalidArgumentError, match=r"TensorDataset: expected at least one tensor"):
        fg.data.TensorDataset()
