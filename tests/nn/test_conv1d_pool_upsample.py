"""conv1d / nn.Conv1d, conv_transpose2d / nn.ConvTranspose2d, adaptive_avg_pool2d /
nn.AdaptiveAvgPool2d and interpolate / nn.Upsample (nearest, bilinear), composed from conv2d,
matmul, fold, index_select, reshapes and means: against NumPy loops, by float64 finite differences,
in a compiled step, with the documented errors."""
import math

import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from conftest import assert_compiled_trains_like_eager, gradcheck


def np_conv1d(x, w, b, stride, padding):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
    n, c, length = x.shape
    o, _, k = w.shape
    out_len = (length - k) // stride + 1
    y = np.zeros((n, o, out_len))
    for i in range(out_len):
        y[:, :, i] = np.einsum("nck,ock->no", x[:, :, i * stride:i * stride + k], w)
    return y + (0 if b is None else b[None, :, None])


def np_adaptive(x, oh, ow):
    h, w = x.shape[-2:]
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, r1 = i * h // oh, -(-(i + 1) * h // oh)
            c0, c1 = j * w // ow, -(-(j + 1) * w // ow)
            out[:, :, i, j] = x[:, :, r0:r1, c0:c1].mean((2, 3))
    return out


@pytest.mark.parametrize("stride, padding, bias", [(1, 0, True), (2, 1, True), (3, 2, False), (1, 0, False)])
def test_conv1d_matches_numpy(stride, padding, bias, device, rng):
    x, w = rng.standard_normal((2, 3, 11)), rng.standard_normal((4, 3, 3))
    b = rng.standard_normal(4) if bias else None
    got = F.conv1d(fg.tensor(x, device=device), fg.tensor(w, device=device),
                   None if b is None else fg.tensor(b, device=device), stride, padding)
    np.testing.assert_allclose(got.cpu().numpy(), np_conv1d(x, w, b, stride, padding), rtol=1e-10, atol=1e-12)


def test_conv1d_module_init_gradients_and_errors(rng):
    m = fg.nn.Conv1d(3, 5, 4, stride=2, padding=1)
    bound = 1 / math.sqrt(12)
    assert m.weight.shape == (5, 3, 4) and np.abs(m.weight.detach().numpy()).max() <= bound
    assert m.bias.shape == (5,) and repr(m).startswith("Conv1d(3, 5, kernel_size=4, stride=2, padding=1)")
    assert fg.nn.Conv1d(2, 2, 1, bias=False).bias is None
    gradcheck(lambda x, w, b: F.conv1d(x, w, b, 2, 1), rng.standard_normal((2, 2, 7)), rng.standard_normal((3, 2, 3)),
              rng.standard_normal(3))
    with pytest.raises(fg.ShapeError, match=r"conv1d: expected input \(N, C, L\) and weight \(O, C, k\), got "
                                            r"\(2, 3\) and \(5, 3, 4\)"):
        m(fg.ones(2, 3))
    with pytest.raises(fg.InvalidArgumentError, match=r"Conv1d: need positive channels, .*kernel_size=0"):
        fg.nn.Conv1d(2, 2, 0)


@pytest.mark.parametrize("size", [1, (2, 3), (3, 5), 4, (7, 10)])
def test_adaptive_avg_pool2d_matches_the_bins(size, device, rng):
    x = rng.standard_normal((2, 3, 7, 10))
    oh, ow = (size, size) if isinstance(size, int) else size
    got = fg.nn.AdaptiveAvgPool2d(size)(fg.tensor(x, device=device))
    assert got.shape == (2, 3, oh, ow)
    np.testing.assert_allclose(got.cpu().numpy(), np_adaptive(x, oh, ow), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs, factors", [({"scale_factor": 2}, (2, 2)), ({"scale_factor": (1, 3)}, (1, 3)),
                                             ({"size": (6, 4)}, (2, 2))])
def test_nearest_upsampling_repeats_pixels(kwargs, factors, device, rng):
    x = rng.standard_normal((1, 2, 3, 2))
    got = fg.nn.Upsample(**kwargs)(fg.tensor(x, device=device)).cpu().numpy()
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, factors[0], 2), factors[1], 3))


def np_resize(x, out_h, out_w, factors, mode, align_corners):
    """PyTorch's nearest / bilinear resize written as loops, in float64."""
    def coords(out, size, factor):
        ratio = 1 / factor if factor else size / out
        dst = np.arange(out, dtype=np.float32)
        if mode == "nearest":
            return np.minimum(np.floor(dst * np.float32(ratio)), size - 1).astype(int), None
        if align_corners:
            src = dst * np.float32((size - 1) / (out - 1) if out > 1 else 0)
        else:
            src = np.maximum(np.float32(ratio) * (dst + np.float32(0.5)) - np.float32(0.5), 0)
        return src.astype(int), src - src.astype(int)

    rows, wr = coords(out_h, x.shape[2], factors[0])
    cols, wc = coords(out_w, x.shape[3], factors[1])
    out = np.zeros(x.shape[:2] + (out_h, out_w))
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            if mode == "nearest":
                out[:, :, i, j] = x[:, :, r, c]
                continue
            r1, c1 = min(r + 1, x.shape[2] - 1), min(c + 1, x.shape[3] - 1)
            top = x[:, :, r, c] * (1 - wc[j]) + x[:, :, r, c1] * wc[j]
            bottom = x[:, :, r1, c] * (1 - wc[j]) + x[:, :, r1, c1] * wc[j]
            out[:, :, i, j] = top * (1 - wr[i]) + bottom * wr[i]
    return out


@pytest.mark.parametrize("kwargs, out, factors", [
    ({"scale_factor": 1.5}, (7, 10), (1.5, 1.5)), ({"size": (9, 4)}, (9, 4), (None, None)),
    ({"scale_factor": (0.5, 2.5)}, (2, 17), (0.5, 2.5)), ({"scale_factor": 2}, (10, 14), (2, 2)),
])
@pytest.mark.parametrize("mode, align_corners", [("nearest", None), ("bilinear", False), ("bilinear", True)])
def test_resizing_matches_pytorch_s_formulas(kwargs, out, factors, mode, align_corners, device, rng):
    x = rng.standard_normal((2, 3, 5, 7))
    got = F.interpolate(fg.tensor(x, device=device), mode=mode, align_corners=align_corners, **kwargs)
    assert got.shape == (2, 3) + out
    np.testing.assert_allclose(got.cpu().numpy(), np_resize(x, *out, factors, mode, align_corners), rtol=1e-6,
                               atol=1e-6)


def test_pool_and_upsample_gradients(rng):
    x = rng.standard_normal((1, 2, 5, 6))
    gradcheck(lambda t: F.adaptive_avg_pool2d(t, (2, 4)), x)  # uneven bins
    gradcheck(lambda t: F.adaptive_avg_pool2d(t, (5, 3)), x)  # the reshape path
    gradcheck(lambda t: F.interpolate(t, scale_factor=2), x[:, :, :2, :3])
    gradcheck(lambda t: F.interpolate(t, size=(4, 5), mode="bilinear"), x[:, :, :3, :3])
    gradcheck(lambda t: F.interpolate(t, scale_factor=1.5, mode="bilinear", align_corners=True), x[:, :, :3, :2])
    gradcheck(lambda t: F.interpolate(t, size=(3, 7)), x[:, :, :2, :3])  # nearest, not a multiple


def test_a_compiled_step_with_conv1d_and_pooling(rng):
    def build():
        fg.manual_seed(0)
        model = fg.nn.Sequential(fg.nn.Conv1d(2, 4, 3, padding=1), fg.nn.ReLU(), fg.nn.Flatten(), fg.nn.Linear(32, 3))
        return model, fg.optim.SGD(model.parameters(), lr=0.1)

    x = fg.tensor(rng.standard_normal((5, 2, 8)).astype(np.float32))
    y = fg.tensor(rng.integers(0, 3, 5))
    assert_compiled_trains_like_eager(build, F.cross_entropy, [(x, y)] * 3, rtol=1e-5, atol=1e-6)


def test_pool_and_upsample_errors():
    x = fg.ones(1, 1, 4, 4)
    with pytest.raises(fg.ShapeError, match=r"adaptive_avg_pool2d: expected \(N, C, H, W\), got \(4, 4\)"):
        F.adaptive_avg_pool2d(fg.ones(4, 4), 2)
    with pytest.raises(fg.InvalidArgumentError, match=r"adaptive_avg_pool2d: output_size must be a positive int or a "
                                                      r"pair of them, got 0"):
        F.adaptive_avg_pool2d(x, 0)
    with pytest.raises(fg.InvalidArgumentError, match=r"interpolate: mode 'bicubic' is not supported; flowgrad has "
                                                      r"'nearest' and 'bilinear'"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    with pytest.raises(fg.InvalidArgumentError, match=r"interpolate: align_corners applies to 'bilinear' only"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(fg.InvalidArgumentError, match=r"interpolate: give exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(fg.InvalidArgumentError, match=r"interpolate: scale_factor must be a positive number or a "
                                                      r"pair of them, got -1"):
        F.interpolate(x, scale_factor=-1)
    with pytest.raises(fg.InvalidArgumentError, match=r"interpolate: scale_factor 0.1 leaves no pixels of \(4, 4\)"):
        F.interpolate(x, scale_factor=0.1)
    with pytest.raises(fg.InvalidArgumentError, match=r"interpolate: size must be a positive int or a pair of them, "
                                                      r"got \(0, 2\)"):
        F.interpolate(x, size=(0, 2))


def np_conv_transpose2d(x, w, b, stride, padding, output_padding):
    n, c_in, h, wd = x.shape
    _, c_out, kh, kw = w.shape
    full = np.zeros((n, c_out, (h - 1) * stride + kh + output_padding, (wd - 1) * stride + kw + output_padding))
    for i in range(h):
        for j in range(wd):
            full[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw] += np.einsum("nc,cokl->nokl", x[:, :, i, j], w)
    out = full[:, :, padding:full.shape[2] - padding, padding:full.shape[3] - padding]
    return out + (0 if b is None else b[None, :, None, None])


@pytest.mark.parametrize("stride, padding, output_padding, k", [(1, 0, 0, 3), (2, 1, 1, 3), (3, 2, 0, 4), (2, 0, 1, 2)])
def test_conv_transpose2d_matches_numpy(stride, padding, output_padding, k, device, rng):
    x, w, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 2, k, k)), rng.standard_normal(2)
    got = F.conv_transpose2d(fg.tensor(x, device=device), fg.tensor(w, device=device), fg.tensor(b, device=device),
                             stride, padding, output_padding)
    np.testing.assert_allclose(got.cpu().numpy(), np_conv_transpose2d(x, w, b, stride, padding, output_padding),
                               rtol=1e-10, atol=1e-12)


def test_conv_transpose2d_module_gradients_and_errors(rng):
    m = fg.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
    assert m.weight.shape == (3, 2, 3, 3) and np.abs(m.weight.detach().numpy()).max() <= 1 / math.sqrt(18)
    assert m(fg.ones(1, 3, 4, 4)).shape == (1, 2, 8, 8)  # stride 2 doubles the size
    assert fg.nn.ConvTranspose2d(2, 2, 1, bias=False).bias is None
    gradcheck(lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1), rng.standard_normal((1, 2, 3, 3)),
              rng.standard_normal((2, 2, 3, 3)), rng.standard_normal(2))
    with pytest.raises(fg.ShapeError, match=r"conv_transpose2d: expected input \(N, C_in, H, W\) and weight "
                                            r"\(C_in, C_out, kH, kW\), got \(1, 2, 4, 4\) and \(3, 2, 3, 3\)"):
        m(fg.ones(1, 2, 4, 4))
    with pytest.raises(fg.InvalidArgumentError, match=r"conv_transpose2d: need stride > 0, padding >= 0 and "
                                                      r"0 <= output_padding < stride, got stride=1, padding=0, "
                                                      r"output_padding=1"):
        F.conv_transpose2d(fg.ones(1, 3, 2, 2), fg.ones(3, 2, 3, 3), output_padding=1)
    with pytest.raises(fg.InvalidArgumentError, match=r"ConvTranspose2d: need positive channels, .*stride=0"):
        fg.nn.ConvTranspose2d(2, 2, 3, stride=0)
    with pytest.raises(fg.ShapeError, match=r"conv_transpose2d: the output would be -1x-1"):
        F.conv_transpose2d(fg.ones(1, 3, 1, 1), fg.ones(3, 2, 1, 1), padding=1)
