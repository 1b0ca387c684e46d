"""DataLoader: batching, seeded shuffling, drop_last, errors."""
import numpy as np
import pytest

import flowgrad as fg


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
