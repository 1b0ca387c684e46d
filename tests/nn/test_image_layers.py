"""Image layers composed in Python: F.pad's reflect / replicate / circular modes and the padding
modules, pixel_shuffle / pixel_unshuffle, dropout2d, instance_norm / InstanceNorm2d, against
NumPy (and PyTorch where installed), float64 gradchecks and the documented errors."""
import numpy as np
import pytest
try:  # the reference implementation; CI installs no PyTorch, so those comparisons skip there
    import torch
except ImportError:
    torch = None

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

from conftest import gradcheck

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: the comparison with torch is skipped")
NP_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", list(NP_MODES))
@pytest.mark.parametrize("pads", [(1, 2, 2, 0), (3, 0), (0, 0, 1, 1)])
def test_pad_modes_match_numpy(mode, pads, rng):
    a = rng.standard_normal((2, 3, 4, 5))
    width = [(0, 0)] * 4
    for i in range(len(pads) // 2):
        width[3 - i] = (pads[2 * i], pads[2 * i + 1])
    np.testing.assert_array_equal(F.pad(fg.tensor(a), pads, mode).numpy(), np.pad(a, width, NP_MODES[mode]))
    gradcheck(lambda x: F.pad(x, pads, mode), a[:1, :1])


def test_pad_modules_and_constant_value(rng):
    a = rng.standard_normal((1, 2, 3, 3))
    np.testing.assert_array_equal(nn.ReflectionPad2d(2)(fg.tensor(a)).numpy(),
                                  np.pad(a, [(0, 0), (0, 0), (2, 2), (2, 2)], "reflect"))
    np.testing.assert_array_equal(nn.ReplicationPad2d((1, 0, 0, 2))(fg.tensor(a)).numpy(),
                                  np.pad(a, [(0, 0), (0, 0), (0, 2), (1, 0)], "edge"))
    np.testing.assert_array_equal(nn.ZeroPad2d(1)(fg.tensor(a)).numpy(), np.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)]))
    np.testing.assert_array_equal(F.pad(fg.tensor(a), (1, 1), value=7.0).numpy(),
                                  np.pad(a, [(0, 0), (0, 0), (0, 0), (1, 1)], constant_values=7.0))


def test_pad_errors():
    x = fg.zeros(1, 1, 3, 3)
    with pytest.raises(fg.ShapeError, match=r"pad: reflect padding \(3, 0\) of dim 3 \(size 3\) must be non-negative "
                                            r"and at most 2"):
        F.pad(x, (3, 0), "reflect")
    with pytest.raises(fg.InvalidArgumentError, match="pad: mode must be 'constant', 'reflect', 'replicate' or "
                                                      "'circular', got 'mirror'"):
        F.pad(x, (1, 1), "mirror")
    with pytest.raises(fg.InvalidArgumentError, match="pad: a padding value applies to mode 'constant' only"):
        F.pad(x, (1, 1), "reflect", value=2.0)
    with pytest.raises(fg.InvalidArgumentError, match=r"ReflectionPad2d: padding must be an int or \(left, right, "):
        nn.ReflectionPad2d((1, 2))


def test_pixel_shuffle_round_trip(rng):
    a = rng.standard_normal((2, 8, 3, 5))
    out = nn.PixelShuffle(2)(fg.tensor(a))
    assert out.shape == (2, 2, 6, 10)
    # output pixel (h * r + i, w * r + j) of channel c is input channel c * r^2 + i * r + j at (h, w)
    np.testing.assert_array_equal(out.numpy()[1, 1, 2 * 2 + 1, 4 * 2 + 0], a[1, 1 * 4 + 1 * 2 + 0, 2, 4])
    np.testing.assert_array_equal(nn.PixelUnshuffle(2)(out).numpy(), a)
    gradcheck(lambda x: F.pixel_shuffle(x, 2), a[:1, :4, :2, :2])
    with pytest.raises(fg.ShapeError, match=r"pixel_shuffle: expected \(..., C \* 3\^2, H, W\) .* got \(2, 8, 3, 5\)"):
        F.pixel_shuffle(fg.tensor(a), 3)


def test_dropout2d_zeroes_whole_channels():
    fg.manual_seed(0)
    m = nn.Dropout2d(0.5)
    out = m(fg.ones(8, 16, 3, 3)).numpy()
    per_channel = out.reshape(8, 16, 9)
    assert set(np.unique(per_channel)) == {0.0, 2.0}
    assert (per_channel.min(2) == per_channel.max(2)).all()  # a channel is all kept or all dropped
    assert 30 < (per_channel[:, :, 0] == 0).sum() < 98
    m.eval()
    np.testing.assert_array_equal(m(fg.ones(2, 3, 2, 2)).numpy(), np.ones((2, 3, 2, 2)))
    with pytest.raises(fg.InvalidArgumentError, match=r"Dropout2d: p must be in \[0, 1\], got 1.5"):
        nn.Dropout2d(1.5)


def np_instance_norm(a, eps=1e-5):
    mean = a.mean((2, 3), keepdims=True)
    return (a - mean) / np.sqrt(a.var((2, 3), keepdims=True) + eps)


def test_instance_norm_and_running_stats(rng):
    a = rng.standard_normal((3, 4, 5, 6)) * 2 + 1
    np.testing.assert_allclose(nn.InstanceNorm2d(4)(fg.tensor(a)).numpy(), np_instance_norm(a), rtol=1e-10)
    m = nn.InstanceNorm2d(4, affine=True, track_running_stats=True).double()
    assert sorted(m.state_dict()) == ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]
    m(fg.tensor(a))
    np.testing.assert_allclose(m.running_mean.numpy(), 0.1 * a.mean((2, 3)).mean(0), rtol=1e-10)
    np.testing.assert_allclose(m.running_var.numpy(), 0.9 + 0.1 * a.var((2, 3), ddof=1).mean(0), rtol=1e-10)
    m.eval()
    rm, rv = m.running_mean.numpy()[None, :, None, None], m.running_var.numpy()[None, :, None, None]
    np.testing.assert_allclose(m(fg.tensor(a)).numpy(), (a - rm) / np.sqrt(rv + 1e-5), rtol=1e-10)
    gradcheck(lambda x, w: F.instance_norm(x, weight=w), a[:2, :2, :3, :3], np.array([0.5, 2.0]))
    with pytest.raises(fg.ShapeError, match=r"InstanceNorm2d: expected \(N, 4, H, W\), got \(3, 5, 2, 2\)"):
        nn.InstanceNorm2d(4)(fg.zeros(3, 5, 2, 2))


@needs_torch
def test_image_layers_match_torch(rng):
    a = rng.standard_normal((2, 4, 5, 6))
    T = torch.from_numpy
    for mode in NP_MODES:
        np.testing.assert_array_equal(F.pad(fg.tensor(a), (2, 1, 3, 0), mode).numpy(),
                                      torch.nn.functional.pad(T(a), (2, 1, 3, 0), mode=mode).numpy())
    np.testing.assert_array_equal(F.pixel_shuffle(fg.tensor(a), 2).numpy(), torch.nn.functional.pixel_shuffle(T(a), 2).numpy())
    ours = nn.InstanceNorm2d(4, affine=True, track_running_stats=True).double()
    theirs = torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True).double()
    np.testing.assert_allclose(ours(fg.tensor(a)).detach().numpy(), theirs(T(a)).detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-10)


@pytest.mark.parametrize("shape", [(6, 4), (3, 8), (4, 2, 3), (5, 5)])
def test_orthogonal_init(shape):
    fg.manual_seed(0)
    w = fg.empty(*shape, dtype=fg.float64)
    assert nn.init.orthogonal_(w, gain=2.0) is w
    m = w.numpy().reshape(shape[0], -1) / 2.0
    small = min(m.shape)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-12)
    fg.manual_seed(0)
    np.testing.assert_array_equal(nn.init.orthogonal_(fg.empty(*shape, dtype=fg.float64), gain=2.0).numpy(), w.numpy())
    with pytest.raises(fg.ShapeError, match=r"orthogonal_: expected a tensor of at least 2 dims, got shape \(3,\)"):
        nn.init.orthogonal_(fg.empty(3))
