"""PyTorch names training scripts reach for: dtype aliases, Tensor.view_as / mm / nelement /
unique / is_cuda / data / type, repeat copying, randint(high, size), parameters() as an iterator,
zero_grad(set_to_none=), add_module, ReLU(True) / LeakyReLU(0.2, inplace=True) / Conv2d with
pairs, Dropout(p, inplace=), LayerNorm(elementwise_affine=, bias=), MaxPool2d(padding=),
Sequential(OrderedDict) and slices, LogSoftmax, F.relu(inplace=), fg.softmax / log_softmax / numel /
is_tensor / as_tensor / empty_like, Tensor.expand_as, finfo / iinfo, Embedding.from_pretrained, fg.cuda.manual_seed, fg.accelerator and
fg.backends."""
import collections
import copy
import warnings

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn

from conftest import gradcheck

try:  # the reference implementation; CI installs no PyTorch, so those comparisons skip there
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: the comparison with torch is skipped")


def test_dtype_aliases():
    assert (fg.long, fg.int, fg.short, fg.float, fg.double, fg.half) == \
        (fg.int64, fg.int32, fg.int16, fg.float32, fg.float64, fg.float16)
    assert fg.tensor([1.5]).to(fg.long).dtype == fg.int64 and fg.zeros(2, dtype=fg.double).dtype == fg.float64


def test_view_as_mm_nelement_is_cuda(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    x = fg.tensor(a)
    v = x.view_as(fg.zeros(2, 6))
    assert v.shape == (2, 6)
    np.testing.assert_array_equal(v.numpy(), a.reshape(2, 6))
    np.testing.assert_allclose(x.mm(fg.tensor(b)).numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(fg.mm(x, fg.tensor(b)).numpy(), a @ b, rtol=1e-12)
    assert x.nelement() == 12 and fg.zeros(0, 3).nelement() == 0
    assert x.is_cuda is False
    with pytest.raises(fg.ShapeError, match=r"mm: expected two 2-D tensors, got shapes \(3, 4\) and \(4,\)"):
        x.mm(fg.tensor(b[:, 0]))
    with pytest.raises(TypeError, match="mm: expected two fg.Tensors, got Tensor and ndarray"):
        fg.mm(x, b)


@pytest.mark.parametrize("values", [[3, 1, 3, 3, 0, 1], [[2.5, -1.0], [2.5, 7.0]], [True, False, True], [4], []])
def test_unique_with_inverse_and_counts(values):
    a = np.array(values)
    t = fg.tensor(a)
    expected, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    u, inv, cnt = t.unique(return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(u.numpy(), expected)
    assert u.dtype == t.dtype and inv.shape == t.shape
    np.testing.assert_array_equal(inv.numpy().reshape(-1), inverse.reshape(-1))
    np.testing.assert_array_equal(cnt.numpy(), counts)
    np.testing.assert_array_equal(fg.unique(t, sorted=False).numpy(), expected)


def test_data_reads_and_writes_without_autograd():
    p = nn.Parameter(fg.ones(3))
    d = p.data
    assert not d.requires_grad
    d.mul_(2)  # the same memory: p sees it
    np.testing.assert_array_equal(p.detach().numpy(), [2, 2, 2])
    p.data = fg.tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(p.detach().numpy(), [1, 2, 3])
    assert p.requires_grad and p.is_leaf
    with pytest.raises(fg.ShapeError, match=r"Tensor.data: assigning \(2,\) flowgrad.float32 to a tensor of \(3,\)"):
        p.data = fg.zeros(2)


def test_type_names_and_conversions():
    x = fg.tensor([1.7, -2.2])
    assert x.type() == "flowgrad.FloatTensor" and fg.tensor([1]).type() == "flowgrad.LongTensor"
    assert x.type(fg.int64).dtype == fg.int64 and x.type(fg.float32) is x
    assert x.type("torch.DoubleTensor").dtype == fg.float64
    with pytest.raises(fg.InvalidArgumentError, match="type: unknown tensor type 'torch.FancyTensor'"):
        x.type("torch.FancyTensor")


def test_repeat_returns_a_copy():
    x = fg.tensor([[1.0, 2.0]])
    for reps in [(3, 1), (1, 1), (2, 2)]:
        r = x.repeat(*reps)
        r.add_(1)  # a view with zero strides, or x itself, would refuse or change x
        np.testing.assert_array_equal(x.numpy(), [[1, 2]])
        np.testing.assert_array_equal(r.numpy(), np.tile([[1, 2]], reps) + 1)
    g = fg.tensor([1.0, 2.0], requires_grad=True)
    g.repeat(3).sum().backward()
    np.testing.assert_array_equal(g.grad.numpy(), [3, 3])


def test_randint_high_and_size():
    fg.manual_seed(0)
    t = fg.randint(5, (100,))
    assert t.shape == (100,) and t.dtype == fg.int64 and 0 <= t.min().item() and t.max().item() < 5
    assert fg.randint(2, 4, (3, 2)).shape == (3, 2) and fg.randint(3, size=(2,)).shape == (2,)


def test_parameters_is_an_iterator_and_zero_grad_keeps_zeros():
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    it = m.parameters()
    assert next(it).shape == (3, 2) and len(list(it)) == 3
    assert [p.shape for p in m.parameters(recurse=False)] == []
    m(fg.ones(4, 2)).sum().backward()
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.numpy().any() for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    opt = fg.optim.SGD(m.parameters(), lr=0.1)  # an iterator is enough for an optimizer
    assert len(opt.param_groups[0]["params"]) == 4


def test_add_module():
    m = nn.Module()
    m.add_module("fc", nn.Linear(2, 2))
    assert [n for n, _ in m.named_parameters()] == ["fc.weight", "fc.bias"]
    with pytest.raises(TypeError, match="add_module: int is not an fg.nn.Module"):
        m.add_module("x", 3)


def test_container_slices():
    seq = nn.Sequential()
    for name in ("conv_1", "relu_1", "conv_2"):
        seq.add_module(name, nn.Linear(2, 2) if name.startswith("conv") else nn.ReLU())
    head = seq[:2]
    assert isinstance(head, nn.Sequential) and [n for n, _ in head.named_children()] == ["conv_1", "relu_1"]
    assert head[0] is seq[0] and len(seq[::-1]) == 3 and len(seq[5:]) == 0
    x = fg.tensor([[1.0, -2.0]])
    np.testing.assert_allclose(head(x).numpy(), np.maximum(x.numpy() @ seq[0].weight.numpy().T + seq[0].bias.numpy(), 0),
                               rtol=1e-6)
    layers = nn.ModuleList([nn.Linear(1, 1), nn.ReLU(), nn.Tanh()])
    tail = layers[1:]
    assert isinstance(tail, nn.ModuleList) and [n for n, _ in tail.named_children()] == ["0", "1"]
    assert tail[1] is layers[2]
    with pytest.raises(fg.IndexOutOfRangeError, match="index 3 is out of range for 3 modules"):
        layers[3]


def test_constructor_forms():
    relu = nn.ReLU(True)
    assert isinstance(relu, nn.ReLU) and isinstance(relu, fg._core.ReLU)
    np.testing.assert_array_equal(relu(fg.tensor([-1.0, 2.0])).numpy(), [0, 2])
    leaky = nn.LeakyReLU(0.2, inplace=True)
    np.testing.assert_allclose(leaky(fg.tensor([-1.0, 2.0])).numpy(), [-0.2, 2])
    conv = nn.Conv2d(3, 4, (3, 3), stride=(2, 2), padding=(1, 1), bias=False)
    assert isinstance(conv, nn.Conv2d) and conv.weight.shape == (4, 3, 3, 3) and conv.bias is None
    assert conv(fg.zeros(1, 3, 8, 8)).shape == (1, 4, 4, 4)
    same = nn.Conv2d(2, 2, 5, padding="same")
    assert same(fg.zeros(1, 2, 7, 9)).shape == (1, 2, 7, 9)
    assert issubclass(type(conv), nn.Conv2d) and not isinstance(relu, nn.Conv2d)
    grouped = nn.Conv2d(4, 6, (3, 1), groups=2, padding=(1, 0), dilation=(2, 1), padding_mode="reflect")
    assert isinstance(grouped, nn.Conv2d) and grouped.weight.shape == (6, 2, 3, 1)
    x = fg.randn(1, 4, 7, 5)
    assert grouped(x).shape == (1, 6, 5, 5)
    import copy
    np.testing.assert_array_equal(copy.deepcopy(grouped)(x).detach().numpy(), grouped(x).detach().numpy())
    with pytest.raises(fg.InvalidArgumentError, match=r"Conv2d: stride \(1, 2\) has two values"):
        nn.Conv2d(4, 4, 3, stride=(1, 2))
    with pytest.raises(fg.InvalidArgumentError, match="Conv2d: padding='same' needs stride 1"):
        nn.Conv2d(4, 4, 4, stride=2, padding="same")
    with pytest.raises(fg.InvalidArgumentError, match="Conv2d: in_channels 4 and out_channels 6 must be multiples of "
                                                      "groups 4"):
        nn.Conv2d(4, 6, 3, groups=4)


def np_conv2d(x, w, stride, pad, dilation, groups):
    """The definition, summed tap by tap."""
    x = np.pad(x, [(0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])])
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for f in range(o):
        g = f // (o // groups)
        for i in range(kh):
            for j in range(kw):
                patch = x[:, g * cg:(g + 1) * cg, i * dilation[0]:i * dilation[0] + stride * oh:stride,
                          j * dilation[1]:j * dilation[1] + stride * ow:stride]
                out[:, f] += np.einsum("nchw,c->nhw", patch, w[f, :, i, j])
    return out


@pytest.mark.parametrize("stride, pad, dilation, groups", [
    (1, (1, 2), (1, 1), 1), (2, (0, 0), (2, 1), 3), (1, (2, 1), (2, 3), 6), (2, (1, 1), (1, 1), 2)])
def test_conv2d_groups_dilation_padding_pairs(stride, pad, dilation, groups, rng):
    import flowgrad.nn.functional as F
    x, w, b = rng.standard_normal((2, 6, 9, 8)), rng.standard_normal((6, 6 // groups, 3, 2)), rng.standard_normal(6)
    got = F.conv2d(fg.tensor(x), fg.tensor(w), fg.tensor(b), stride, pad, dilation, groups)
    np.testing.assert_allclose(got.numpy(), np_conv2d(x, w, stride, pad, dilation, groups) + b[:, None, None],
                               rtol=1e-10, atol=1e-12)
    from conftest import gradcheck
    gradcheck(lambda a, k: F.conv2d(a, k, None, stride, pad, dilation, groups), x[:1, :, :6, :5], w)
    same = F.conv2d(fg.tensor(x), fg.tensor(w), padding="same", dilation=dilation, groups=groups)
    assert same.shape == (2, 6, 9, 8)
    try:
        import torch
    except ImportError:
        return
    with warnings.catch_warnings():  # PyTorch warns that an even kernel pads a copy of the input, as here
        warnings.simplefilter("ignore", UserWarning)
        expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding="same",
                                              dilation=dilation, groups=groups)
    np.testing.assert_allclose(same.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(fg.ShapeError, match=r"conv2d: 4 groups need input channels 6 and weight"):
        F.conv2d(fg.tensor(x), fg.tensor(w), groups=4)


def test_namespaces():
    from flowgrad.utils.data import DataLoader
    assert DataLoader is fg.data.DataLoader and fg.utils.data is fg.data
    fg.cuda.manual_seed(3)
    a = fg.rand(4)
    fg.cuda.manual_seed_all(3)
    np.testing.assert_array_equal(a.numpy(), fg.rand(4).numpy())
    assert fg.accelerator.is_available() == fg.cuda.is_available()
    assert fg.accelerator.device_count() == fg.cuda.device_count()
    expected = fg.device("cuda") if fg.cuda.built_with_cuda() else None
    assert fg.accelerator.current_accelerator() == expected
    assert fg.backends.mps.is_available() is False and fg.backends.cudnn.is_available() is False
    before = fg.cuda.allow_tf32()
    try:
        fg.backends.cuda.matmul.allow_tf32 = True
        assert fg.cuda.allow_tf32() is True and fg.backends.cuda.matmul.allow_tf32 is True
    finally:
        fg.cuda.set_allow_tf32(before)


def np_attention(q, k, v, scale, causal):
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_attention_scale_and_dropout(causal, rng):
    import flowgrad.nn.functional as F
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    got = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), is_causal=causal, scale=0.3)
    np.testing.assert_allclose(got.numpy(), np_attention(q, k, v, 0.3, causal), rtol=1e-10)
    fg.manual_seed(0)
    dropped = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(np.eye(5)[None, None].repeat(3, 1)
                                                                                   .repeat(2, 0)), dropout_p=0.5,
                                             is_causal=causal).numpy()
    weights = np_attention(q, k, np.eye(5), 0.5, causal)  # v = identity: the output is the weights
    kept = weights > 0  # the causal mask leaves zeros
    assert set(np.round(dropped[kept] / weights[kept], 9)) == {0.0, 2.0} and not dropped[~kept].any()
    from conftest import gradcheck
    gradcheck(lambda a: F.scaled_dot_product_attention(a, fg.tensor(k), fg.tensor(v), scale=0.3, is_causal=causal), q)
    with pytest.raises(fg.InvalidArgumentError, match=r"scaled_dot_product_attention: dropout_p must be in \[0, 1\]"):
        F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), dropout_p=2.0)
    mask = rng.random((5, 5)) > 0.3
    np.fill_diagonal(mask, True)
    both = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), fg.tensor(mask), 0.0, True)
    masked = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), fg.tensor(mask & np.tril(mask)))
    np.testing.assert_allclose(both.numpy(), masked.numpy(), rtol=1e-10)


def test_dropout_inplace_and_sequential_of_named_modules():
    drop = nn.Dropout(0.25, inplace=True)
    assert isinstance(drop, nn.Dropout) and drop.p == 0.25 and copy.deepcopy(drop).p == 0.25
    seq = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 3)), ("act", nn.ReLU()), ("drop", drop)]))
    assert [n for n, _ in seq.named_children()] == ["fc", "act", "drop"]
    assert list(seq.state_dict()) == ["fc.weight", "fc.bias"]
    seq.eval()
    x = fg.tensor([[1.0, -1.0]])
    np.testing.assert_allclose(seq(x).numpy(), np.maximum(x.numpy() @ seq.fc.weight.numpy().T + seq.fc.bias.numpy(),
                                                          0), rtol=1e-6)
    twin = copy.deepcopy(seq)
    assert [n for n, _ in twin.named_children()] == ["fc", "act", "drop"]
    with pytest.raises(TypeError, match="add_module: int is not an fg.nn.Module"):
        nn.Sequential(collections.OrderedDict([("x", 3)]))


def np_layer_norm(a, w, b, eps):
    out = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + eps)
    return out * (1 if w is None else w) + (0 if b is None else b)


@pytest.mark.parametrize("affine, bias", [(False, True), (True, False), (False, False)])
def test_layer_norm_without_affine_or_bias(affine, bias, rng):
    norm = nn.LayerNorm(5, eps=1e-3, elementwise_affine=affine, bias=bias)
    assert isinstance(norm, nn.LayerNorm) and isinstance(norm, nn.PartialLayerNorm)
    assert list(norm.state_dict()) == (["weight"] if affine else [])
    if affine:
        norm.weight.data.copy_(fg.tensor(rng.standard_normal(5).astype(np.float32)))
    a = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(norm(fg.tensor(a)).numpy(),
                               np_layer_norm(a, norm.weight.numpy() if affine else None, None, 1e-3), rtol=1e-4,
                               atol=1e-5)
    assert isinstance(nn.LayerNorm(4), fg._core.LayerNorm)  # the defaults build the C++ layer
    gradcheck(lambda x: norm.to(fg.float64)(x), rng.standard_normal((2, 5)))


def np_max_pool(a, k, s, p):
    padded = np.pad(a, [(0, 0), (0, 0), (p, p), (p, p)], constant_values=-np.inf)
    h, w = (padded.shape[2] - k) // s + 1, (padded.shape[3] - k) // s + 1
    return np.array([[[[padded[n, c, i * s:i * s + k, j * s:j * s + k].max() for j in range(w)] for i in range(h)]
                      for c in range(a.shape[1])] for n in range(a.shape[0])])


def test_max_pool_with_padding(rng):
    pool = nn.MaxPool2d(3, stride=2, padding=1)  # ResNet's stem
    assert isinstance(pool, nn.MaxPool2d) and isinstance(pool, nn.PaddedMaxPool2d)
    a = rng.standard_normal((2, 3, 7, 6)) - 5.0  # all negative: a zero padding would win, -inf never does
    np.testing.assert_array_equal(pool(fg.tensor(a)).numpy(), np_max_pool(a, 3, 2, 1))
    np.testing.assert_array_equal(nn.MaxPool2d((2, 2), (2, 2))(fg.tensor(a)).numpy(), np_max_pool(a, 2, 2, 0))
    gradcheck(pool, rng.standard_normal((1, 2, 5, 5)))
    with pytest.raises(fg.InvalidArgumentError, match="MaxPool2d: padding 2 must be between 0 and half the kernel "
                                                      "size 3"):
        nn.MaxPool2d(3, padding=2)
    with pytest.raises(fg.InvalidArgumentError, match=r"MaxPool2d: kernel_size \(2, 3\) has two values"):
        nn.MaxPool2d((2, 3))
    with pytest.raises(fg.InvalidArgumentError, match="dilation, return_indices and ceil_mode are not supported"):
        nn.MaxPool2d(2, ceil_mode=True)


def test_log_softmax_module_and_functions(rng):
    a = rng.standard_normal((3, 4))
    expected = a - np.log(np.exp(a).sum(1, keepdims=True))
    np.testing.assert_allclose(nn.LogSoftmax(dim=1)(fg.tensor(a)).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(nn.LogSoftmax()(fg.tensor(a)).numpy(), expected, rtol=1e-12)  # 2-d: dim 1
    np.testing.assert_allclose(fg.log_softmax(fg.tensor(a), 1).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(fg.softmax(fg.tensor(a), dim=0).numpy(), np.exp(a) / np.exp(a).sum(0), rtol=1e-12)
    assert fg.softmax(fg.tensor(a, dtype=fg.float32), 1, dtype=fg.float64).dtype == fg.float64
    gradcheck(lambda x: nn.LogSoftmax(0)(x), a[:, 0])


def test_inplace_activation_arguments_and_small_functions():
    x = fg.tensor([-2.0, 3.0])
    assert nn.functional.relu(x, inplace=True).tolist() == [0.0, 3.0]
    assert nn.functional.leaky_relu(x, 0.5, inplace=True).tolist() == [-1.0, 3.0]
    assert fg.numel(fg.zeros(2, 3)) == 6 and fg.is_tensor(x) and not fg.is_tensor([1.0])
    e = fg.empty_like(fg.zeros(2, 3, dtype=fg.int32))
    assert e.shape == (2, 3) and e.dtype == fg.int32
    with pytest.raises(TypeError, match="empty_like: argument 't' must be an fg.Tensor, got list"):
        fg.empty_like([1.0])
    a = np.arange(3.0)
    shared = fg.as_tensor(a)
    a[0] = 7.0  # a NumPy array without a dtype is shared, as PyTorch's as_tensor
    assert shared.tolist() == [7.0, 1.0, 2.0]
    assert fg.as_tensor(x) is x and fg.as_tensor([1, 2], dtype=fg.float32).dtype == fg.float32
    assert fg.tensor([[1.0], [2.0]]).expand_as(fg.zeros(2, 3)).tolist() == [[1.0] * 3, [2.0] * 3]


def test_finfo_iinfo():
    f32 = fg.finfo(fg.float32)
    assert (f32.bits, f32.eps, f32.max, f32.tiny, f32.resolution) == (32, 2.0 ** -23, (2 - 2.0 ** -23) * 2.0 ** 127,
                                                                      2.0 ** -126, 1e-6)
    assert fg.finfo(fg.float16).max == 65504.0 and fg.finfo(fg.float64).eps == 2.0 ** -52
    bf16 = fg.finfo(fg.bfloat16)
    assert (bf16.bits, bf16.eps, bf16.max, bf16.min, bf16.tiny) == (16, 2.0 ** -7, (2 - 2.0 ** -7) * 2.0 ** 127,
                                                                    -(2 - 2.0 ** -7) * 2.0 ** 127, 2.0 ** -126)
    assert fg.finfo().dtype == "float32"
    assert (fg.iinfo(fg.int64).max, fg.iinfo(fg.int8).min, fg.iinfo(fg.uint8).max) == (2 ** 63 - 1, -128, 255)
    with pytest.raises(TypeError, match="finfo: expected a floating fg.dtype, got flowgrad.int32"):
        fg.finfo(fg.int32)
    with pytest.raises(TypeError, match="iinfo: expected an integer fg.dtype, got flowgrad.bool"):
        fg.iinfo(fg.bool)


def test_embedding_from_pretrained(rng):
    w = fg.tensor(rng.standard_normal((5, 3)), dtype=fg.float32)
    frozen = nn.Embedding.from_pretrained(w)
    assert isinstance(frozen, nn.Embedding) and not frozen.weight.requires_grad
    np.testing.assert_array_equal(frozen(fg.tensor([[4, 0]])).numpy(), w.numpy()[[[4, 0]]])
    trained = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=1)
    assert trained.weight.requires_grad and [n for n, _ in trained.named_parameters()] == ["weight"]
    trained(fg.tensor([1, 2, 2])).sum().backward()
    np.testing.assert_array_equal(trained.weight.grad.numpy()[:, 0], [0, 0, 2, 0, 0])  # padding_idx gets none
    with pytest.raises(fg.ShapeError, match="Embedding.from_pretrained: embeddings must be a 2-D tensor"):
        nn.Embedding.from_pretrained(fg.ones(3))


@needs_torch
def test_new_forms_match_torch(rng):
    a = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    np.testing.assert_array_equal(nn.MaxPool2d(3, 2, 1)(fg.tensor(a)).numpy(),
                                  torch.nn.MaxPool2d(3, 2, 1)(torch.tensor(a)).numpy())
    theirs = torch.nn.LayerNorm(8, bias=False)
    torch.nn.init.normal_(theirs.weight)
    ours = nn.LayerNorm(8, bias=False)
    ours.load_state_dict({k: fg.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    np.testing.assert_allclose(ours(fg.tensor(a)).numpy(), theirs(torch.tensor(a)).detach().numpy(), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(nn.LogSoftmax()(fg.tensor(a)).numpy(),
                               torch.nn.LogSoftmax(dim=1)(torch.tensor(a)).numpy(), rtol=1e-5, atol=1e-6)
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        ours, theirs = fg.finfo(getattr(fg, dtype)), torch.finfo(getattr(torch, dtype))
        assert (ours.eps, ours.max, ours.min, ours.tiny, ours.resolution) == \
            (theirs.eps, theirs.max, theirs.min, theirs.tiny, theirs.resolution), dtype
    assert (fg.iinfo(fg.int32).max, fg.iinfo(fg.int16).min) == (torch.iinfo(torch.int32).max,
                                                              torch.iinfo(torch.int16).min)
