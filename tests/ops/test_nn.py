"""nn ops (softmax, log_softmax, layer_norm, rms_norm, im2col, col2im) and the composites built on
them: dropout, embedding, linear, conv2d, pools, attention, losses."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous

F = fg.nn.functional


def f64(a):
    return fg.tensor(a, dtype=fg.float64)


def np_softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(rng, dim):
    a = make(rng, (4, 5, 6)) * 10
    fg.testing.assert_close(F.softmax(f64(a), dim), np_softmax(a, dim))
    fg.testing.assert_close(F.log_softmax(non_contiguous(a), dim), np.log(np_softmax(a, dim)))
    gradcheck(lambda x: F.softmax(x, dim) * fg.arange(6, dtype=fg.float64), make(rng, (2, 3, 6)))
    gradcheck(lambda x: F.log_softmax(x, dim) ** 2, make(rng, (2, 3, 6)))


def test_softmax_is_stable_for_large_logits():
    x = fg.tensor([[1000.0, 1001.0], [-1000.0, -1000.0]])
    out = F.softmax(x, -1).numpy()
    assert np.isfinite(out).all()
    fg.testing.assert_close(out, np_softmax(np.array([[1000.0, 1001.0], [-1000.0, -1000.0]]), -1).astype(np.float32))
    lse = fg.logsumexp(fg.tensor([1000.0, 1000.0])).item()
    assert abs(lse - (1000 + np.log(2))) < 1e-3


def np_layer_norm(a, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(a.ndim - k, a.ndim))
    y = (a - a.mean(axes, keepdims=True)) / np.sqrt(a.var(axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def test_layer_norm_forward_and_gradcheck(rng):
    a, w, b = make(rng, (3, 4, 5)), make(rng, (4, 5)), make(rng, (4, 5))
    fg.testing.assert_close(F.layer_norm(f64(a), (4, 5), f64(w), f64(b)), np_layer_norm(a, 2, w, b), rtol=1e-10, atol=1e-10)
    fg.testing.assert_close(F.layer_norm(fg.tensor(a.astype(np.float32)), 5), np_layer_norm(a, 1).astype(np.float32), rtol=1e-4, atol=1e-5)
    gradcheck(lambda x, w_, b_: F.layer_norm(x, (5,), w_, b_) * fg.arange(5, dtype=fg.float64), a, w[0], b[0])
    gradcheck(lambda x: F.layer_norm(x, (4, 5)) ** 2, a)
    with pytest.raises(fg.ShapeError, match="layer_norm: normalized_shape \\(4,\\) must equal the trailing dims"):
        F.layer_norm(f64(a), (4,))
    with pytest.raises(fg.ShapeError, match="layer_norm: weight has shape \\(3,\\), expected \\(5,\\)"):
        F.layer_norm(f64(a), 5, fg.ones(3, dtype=fg.float64))


def test_rms_norm_forward_and_gradcheck(rng):
    a, w = make(rng, (3, 6)), make(rng, (6,))
    expected = a / np.sqrt((a ** 2).mean(-1, keepdims=True) + 1e-6) * w
    fg.testing.assert_close(F.rms_norm(f64(a), 6, f64(w)), expected, rtol=1e-10, atol=1e-10)
    gradcheck(lambda x, w_: F.rms_norm(x, (6,), w_) * fg.arange(6, dtype=fg.float64), a, w)


def test_norm_second_order_matches_finite_differences(rng):
    a, w = make(rng, (2, 4)), make(rng, (4,))
    x = f64(a).requires_grad_()
    weight = f64(w)

    def grad_norm(v):
        (g,) = fg.autograd.grad((F.layer_norm(v, 4, weight) ** 3).sum(), v, create_graph=True)
        return (g ** 2).sum()

    (gg,) = fg.autograd.grad(grad_norm(x), x)
    eps, numeric = 1e-6, np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        p, m = a.copy(), a.copy()
        p[idx] += eps
        m[idx] -= eps
        numeric[idx] = (grad_norm(f64(p).requires_grad_()).item() - grad_norm(f64(m).requires_grad_()).item()) / (2 * eps)
    fg.testing.assert_close(gg, numeric, rtol=1e-4, atol=1e-6)


def test_dropout_mask_scaling_and_seed(rng):
    x = fg.ones(1000, 50)
    fg.manual_seed(3)
    y = F.dropout(x, 0.3).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    fg.manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, 0.3).numpy(), y)
    np.testing.assert_array_equal(F.dropout(x, 0.3, training=False).numpy(), np.ones((1000, 50)))
    assert (F.dropout(x, 1.0).numpy() == 0).all()
    with pytest.raises(fg.InvalidArgumentError, match="dropout: p must be in \\[0, 1\\], got 1.5"):
        F.dropout(x, 1.5)
    w = fg.tensor(make(rng, (4, 6)), dtype=fg.float64, requires_grad=True)
    fg.manual_seed(5)
    out = F.dropout(w, 0.5)
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), (out.detach().numpy() != 0) * 2.0)


def test_embedding_and_linear(rng):
    w = make(rng, (10, 4))
    idx = np.array([[1, 9], [0, 1]])
    fg.testing.assert_close(F.embedding(fg.tensor(idx), f64(w)), w[idx])
    gradcheck(lambda weight: F.embedding(fg.tensor(idx), weight) ** 2, w)
    x, lw, lb = make(rng, (2, 3, 4)), make(rng, (5, 4)), make(rng, (5,))
    fg.testing.assert_close(F.linear(f64(x), f64(lw), f64(lb)), x @ lw.T + lb)
    gradcheck(F.linear, x, lw, lb)
    with pytest.raises(fg.ShapeError, match="linear: input \\(2, 3, 4\\) does not end in in_features = 3"):
        F.linear(f64(x), fg.ones(5, 3, dtype=fg.float64))


def np_conv2d(x, w, b, stride, padding):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out + (0 if b is None else b.reshape(1, -1, 1, 1))


# (stride, padding, image): whole rows and columns of padding (padding 4 around a 2x3 image), a
# padded width the stride does not divide, float32 as well as float64
@pytest.mark.parametrize("stride,padding,image", [(1, 0, (7, 6)), (2, 1, (7, 6)), (3, 2, (7, 6)), (1, 4, (2, 3)),
                                                  (2, 3, (5, 9)), (1, 1, (32, 33))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_matches_direct_convolution_at_each_geometry(rng, stride, padding, image, dtype):
    x, w, b = make(rng, (2, 3, *image)), make(rng, (4, 3, 3, 2)), make(rng, (4,))
    got = F.conv2d(*(fg.tensor(a.astype(dtype)) for a in (x, w, b)), stride=stride, padding=padding)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    fg.testing.assert_close(got, np_conv2d(x, w, b, stride, padding), **tol)
    y = make(rng, tuple(F.unfold(f64(x), (3, 2), padding=padding, stride=stride).shape))
    back = F.fold(f64(y), image, (3, 2), padding=padding, stride=stride)  # col2im, adjoint of im2col
    cols = F.unfold(f64(x), (3, 2), padding=padding, stride=stride)
    assert abs((cols.numpy() * y).sum() - (x * back.numpy()).sum()) < 1e-9


@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1), (3, 2)])
def test_conv2d_matches_direct_convolution(rng, stride, padding):
    x, w, b = make(rng, (2, 3, 7, 6)), make(rng, (4, 3, 3, 2)), make(rng, (4,))
    fg.testing.assert_close(F.conv2d(f64(x), f64(w), f64(b), stride=stride, padding=padding),
                            np_conv2d(x, w, b, stride, padding), rtol=1e-10, atol=1e-10)
    gradcheck(lambda xx, ww, bb: F.conv2d(xx, ww, bb, stride=stride, padding=padding),
              make(rng, (1, 2, 5, 4)), make(rng, (3, 2, 2, 2)), make(rng, (3,)))


def test_im2col_col2im_are_adjoint(rng):
    x = make(rng, (2, 3, 5, 4))
    cols = F.unfold(f64(x), (3, 2), padding=1, stride=2)  # im2col
    y = make(rng, tuple(cols.shape))
    back = F.fold(f64(y), (5, 4), (3, 2), padding=1, stride=2)  # col2im
    # <im2col(x), y> == <x, col2im(y)>
    assert abs((cols.numpy() * y).sum() - (x * back.numpy()).sum()) < 1e-9
    gradcheck(lambda v: F.fold(v, (4, 3), 2) ** 2, make(rng, (1, 8, 6)))
    gradcheck(lambda v: F.unfold(v, 2, stride=1) ** 2, make(rng, (1, 2, 3, 3)))
    with pytest.raises(fg.ShapeError, match="conv2d: input has 3 channels but weight"):
        F.conv2d(f64(x), fg.ones(2, 4, 1, 1, dtype=fg.float64))
    with pytest.raises(fg.ShapeError, match="conv2d: kernel 9x9 is larger than the padded input"):
        F.conv2d(f64(x), fg.ones(2, 3, 9, 9, dtype=fg.float64))


def test_pools(rng):
    x = make(rng, (2, 3, 6, 7))
    win = np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(2, 3))[:, :, ::2, ::2]
    fg.testing.assert_close(F.max_pool2d(f64(x), 2), win.max(axis=(-1, -2)))
    fg.testing.assert_close(F.avg_pool2d(f64(x), 2), win.mean(axis=(-1, -2)))
    win3 = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::1, ::1]
    fg.testing.assert_close(F.max_pool2d(f64(x), 3, stride=1), win3.max(axis=(-1, -2)))
    assert F.max_pool2d(f64(x[0]), 2).shape == (3, 3, 3)
    gradcheck(lambda v: F.max_pool2d(v, 2) + F.avg_pool2d(v, 2, stride=1)[:, :, :2, :2], make(rng, (1, 2, 4, 5)))


def np_attention(q, k, v, mask=None, causal=False):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return np_softmax(s, -1) @ v


def test_scaled_dot_product_attention(rng):
    q, k, v = make(rng, (2, 3, 5, 4)), make(rng, (2, 3, 6, 4)), make(rng, (2, 3, 6, 7))
    sdpa = F.scaled_dot_product_attention
    fg.testing.assert_close(sdpa(f64(q), f64(k), f64(v)), np_attention(q, k, v))
    fg.testing.assert_close(sdpa(f64(q), f64(k[..., :5, :]), f64(v[..., :5, :]), is_causal=True),
                            np_attention(q, k[..., :5, :], v[..., :5, :], causal=True))
    mask = rng.random((5, 6)) > 0.3
    mask[:, 0] = True
    fg.testing.assert_close(sdpa(f64(q), f64(k), f64(v), attn_mask=fg.tensor(mask)), np_attention(q, k, v, mask))
    bias = make(rng, (5, 6))
    fg.testing.assert_close(sdpa(f64(q), f64(k), f64(v), attn_mask=f64(bias)), np_attention(q, k, v, bias))
    gradcheck(lambda a, b, c: sdpa(a, b, c, is_causal=True), make(rng, (1, 3, 2)), make(rng, (1, 3, 2)), make(rng, (1, 3, 2)))
    with pytest.raises(fg.ShapeError, match="must share the embedding dim"):
        sdpa(f64(q), f64(k[..., :3]), f64(v))


def np_cross_entropy(logits, target, ignore_index=-100, smoothing=0.0):
    logp = np.log(np_softmax(logits, 1))
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    nll = -np.take_along_axis(logp, safe[:, None], 1)[:, 0]
    loss = (1 - smoothing) * nll - smoothing * logp.mean(1)
    return (loss * valid).sum() / valid.sum()


def test_cross_entropy_variants(rng):
    logits = make(rng, (6, 5)) * 3
    target = np.array([0, 4, 2, -100, 1, 4])
    CE = F.cross_entropy
    fg.testing.assert_close(CE(f64(logits), fg.tensor(target)), np_cross_entropy(logits, target))
    fg.testing.assert_close(CE(f64(logits), fg.tensor(target), label_smoothing=0.1), np_cross_entropy(logits, target, smoothing=0.1))
    no_default = np.where(target == -100, 0, target)
    fg.testing.assert_close(CE(f64(logits), fg.tensor(no_default), ignore_index=4), np_cross_entropy(logits, no_default, 4))
    none = CE(f64(logits), fg.tensor(np.where(target < 0, 0, target)), reduction="none")
    assert none.shape == (6,)
    fg.testing.assert_close(CE(f64(logits), fg.tensor(np.where(target < 0, 0, target)), reduction="sum"), none.numpy().sum())
    probs = np_softmax(make(rng, (6, 5)), 1)
    fg.testing.assert_close(CE(f64(logits), f64(probs)), -(probs * np.log(np_softmax(logits, 1))).sum(1).mean())
    spatial = make(rng, (2, 5, 3, 4))
    t = rng.integers(0, 5, size=(2, 3, 4))
    flat = np.moveaxis(spatial, 1, -1).reshape(-1, 5)
    fg.testing.assert_close(CE(f64(spatial), fg.tensor(t)), np_cross_entropy(flat, t.reshape(-1)))
    fg.testing.assert_close(CE(f64(logits[0]), fg.tensor(2)), np_cross_entropy(logits[:1], np.array([2])))
    gradcheck(lambda x: CE(x, fg.tensor(target), label_smoothing=0.2), logits)
    with pytest.raises(fg.IndexOutOfRangeError, match="cross_entropy: target 7 is out of range for 5 classes"):
        CE(f64(logits), fg.tensor([7, 0, 0, 0, 0, 0]))
    with pytest.raises(fg.ShapeError, match="cross_entropy: target \\(5,\\) does not match input \\(6, 5\\)"):
        CE(f64(logits), fg.tensor([0, 0, 0, 0, 0]))
    with pytest.raises(fg.InvalidArgumentError, match="reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        CE(f64(logits), fg.tensor(np.zeros(6, int)), reduction="avg")


def test_regression_losses(rng):
    x, y = make(rng, (4, 3)), make(rng, (4, 3))
    d = x - y
    fg.testing.assert_close(F.mse_loss(f64(x), f64(y)), (d ** 2).mean())
    fg.testing.assert_close(F.l1_loss(f64(x), f64(y), reduction="sum"), np.abs(d).sum())
    huber = np.where(np.abs(d) < 0.5, 0.5 * d ** 2, 0.5 * (np.abs(d) - 0.25))
    fg.testing.assert_close(F.huber_loss(f64(x), f64(y), delta=0.5, reduction="none"), huber)
    t = (rng.random((4, 3)) > 0.5).astype(np.float64)
    bce = np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))
    fg.testing.assert_close(F.binary_cross_entropy_with_logits(f64(x * 50), f64(t)),
                            (np.maximum(x * 50, 0) - x * 50 * t + np.log1p(np.exp(-np.abs(x * 50)))).mean())
    fg.testing.assert_close(F.binary_cross_entropy_with_logits(f64(x), f64(t), reduction="none"), bce)
    logp = np.log(np_softmax(x, 1))
    fg.testing.assert_close(F.nll_loss(f64(logp), fg.tensor([0, 2, 1, 1])), -logp[np.arange(4), [0, 2, 1, 1]].mean())
    for fn in (F.mse_loss, F.l1_loss, F.huber_loss, F.binary_cross_entropy_with_logits):
        gradcheck(lambda a, b: fn(a, b), x, np.clip(t, 0.1, 0.9) if fn is F.binary_cross_entropy_with_logits else y)
    with pytest.raises(fg.ShapeError, match="mse_loss: input \\(4, 3\\) and target \\(3,\\) must have the same shape"):
        F.mse_loss(f64(x), f64(y[0]))


@pytest.mark.parametrize("rms", [False, True])
def test_fused_norm_backward_matches_the_composite_rule(rng, rms):
    """norm_backward: the fused first-order kernel behind layer_norm and rms_norm."""
    a, w, b = make(rng, (5, 3, 8)), make(rng, (8,)), make(rng, (8,))
    x, weight, bias = (f64(v).requires_grad_() for v in (a, w, b))
    g = f64(make(rng, (5, 3, 8)))

    def run(create_graph):
        out = F.rms_norm(x, 8, weight) if rms else F.layer_norm(x, 8, weight, bias)
        inputs = [x, weight] if rms else [x, weight, bias]
        return [t.detach() for t in fg.autograd.grad(out, inputs, g, create_graph=create_graph)]

    for fused, composite in zip(run(False), run(True)):
        fg.testing.assert_close(fused, composite, rtol=1e-10, atol=1e-12)
    fn = (lambda v, w_: F.rms_norm(v, 8, w_)) if rms else (lambda v, w_: F.layer_norm(v, 8, w_))
    gradcheck(fn, a, w)


def test_dropout_same_mask_on_every_device(device):
    x = fg.ones(37, 53)
    fg.manual_seed(5)
    here = fg.nn.functional.dropout(x.to(device), 0.3, training=True)
    fg.manual_seed(5)
    reference = fg.nn.functional.dropout(x, 0.3, training=True)
    np.testing.assert_array_equal(here.cpu().numpy(), reference.numpy())


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", [((5, 300), -1), ((3, 7, 4), 1), ((2, 1), -1), ((4, 0), -1)])
def test_softmax_on_device(rng, log, shape, dim, device):
    a = make(rng, shape, np.float32, -4, 4)
    fn = F.log_softmax if log else F.softmax
    here = fn(fg.tensor(a).to(device), dim)
    assert here.device == device
    fg.testing.assert_close(here, fn(fg.tensor(a), dim).numpy(), rtol=1e-5, atol=1e-6)


def test_causal_scaled_softmax_on_device(rng, device):
    q, k, v = (fg.tensor(make(rng, (2, 3, 9, 8), np.float32)) for _ in range(3))
    here = F.scaled_dot_product_attention(q.to(device), k.to(device), v.to(device), is_causal=True)
    fg.testing.assert_close(here, F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy(), rtol=1e-4, atol=1e-5)


def test_cross_entropy_and_embedding_on_device(rng, device):
    logits = fg.tensor(make(rng, (6, 5), np.float32), requires_grad=True)
    target = fg.tensor([0, 4, 2, -100, 1, 3])
    loss = F.cross_entropy(logits.to(device), target.to(device), ignore_index=-100, label_smoothing=0.1)
    ref = F.cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.1)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    loss.backward()
    grad_here = logits.grad.numpy().copy()
    logits.grad = None
    ref.backward()
    np.testing.assert_allclose(grad_here, logits.grad.numpy(), rtol=1e-5, atol=1e-6)
    emb = fg.nn.Embedding(10, 4)
    idx = fg.tensor([[1, 9, 1], [0, 3, -1]])
    here = emb.to(device)(idx.to(device))
    np.testing.assert_array_equal(here.cpu().numpy(), emb.to("cpu")(idx).numpy())


@pytest.mark.parametrize("rms", [False, True])
def test_norms_and_their_gradients_on_device(rng, rms, device):
    x = fg.tensor(make(rng, (5, 3, 300), np.float32), requires_grad=True)
    w = fg.tensor(make(rng, (300,), np.float32, 0.5, 1.5), requires_grad=True)
    b = fg.tensor(make(rng, (300,), np.float32), requires_grad=True)

    def run(dev):
        for t in (x, w, b):
            t.grad = None
        y = F.rms_norm(x.to(dev), (300,), w.to(dev)) if rms else F.layer_norm(x.to(dev), (300,), w.to(dev), b.to(dev))
        (y * y).sum().backward()
        return y.cpu().numpy(), x.grad.numpy().copy(), w.grad.numpy().copy()

    for got, want in zip(run(device), run("cpu")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
