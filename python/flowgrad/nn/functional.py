"""fg.nn.functional: activations, normalisation, attention, convolution and losses (C++ ops;
the few at the end are composed from them in Python)."""
import math as _math

import numpy as np

from .. import _core
from .._composite import linalg as _linalg
from .._grad_mode import no_grad as _no_grad
from ._loss_functions import legacy_reduction as _legacy_reduction

_f = _core.functional

gelu = _core.gelu
silu = _core.silu
sigmoid = _core.sigmoid
tanh = _core.tanh
softplus = _core.softplus
softmax = _f.softmax
log_softmax = _f.log_softmax
layer_norm = _f.layer_norm
add_layer_norm = _f.add_layer_norm
rms_norm = _f.rms_norm
dropout = _f.dropout
embedding = _f.embedding
linear = _f.linear
unfold = _f.unfold
fold = _f.fold
max_pool2d = _f.max_pool2d
avg_pool2d = _f.avg_pool2d
scaled_dot_product_attention_reference = _f.scaled_dot_product_attention_reference
scaled_dot_product_attention_packed = _f.scaled_dot_product_attention_packed
huber_loss = _f.huber_loss
from ._loss_functions import (  # noqa: E402  (PyTorch's signatures over the fused losses)
    binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss, nll_loss,
    smooth_l1_loss,
)
one_hot = _core.one_hot



def relu(input, inplace=False):
    """Elementwise max(x, 0). inplace=True is accepted and computes out of place (PyTorch's values;
    flowgrad's autograd keeps the input), as nn.ReLU(True)."""
    return _core.relu(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """input where positive, negative_slope * input elsewhere (inplace=True computes out of place)."""
    return _core.where(input > 0, input, input * negative_slope)


def elu(input, alpha=1.0):
    """input where positive, alpha * (exp(input) - 1) elsewhere (the exp of min(input, 0): no
    overflow, and no NaN gradient, for large inputs)."""
    return _core.where(input > 0, input, _core.expm1(input.clamp(max=0.0)) * alpha)


def mish(input):
    """input * tanh(softplus(input))."""
    return input * _core.tanh(_core.softplus(input))


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """input divided by its p-norm over dim, the norm clamped to at least eps."""
    return input / _linalg.vector_norm(input, p, dim, True).clamp(min=eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 * x2) / (max(|x1|, eps) * max(|x2|, eps)) over dim (PyTorch's formula), broadcasting."""
    n1 = _linalg.vector_norm(x1, 2, dim).clamp(min=eps)
    n2 = _linalg.vector_norm(x2, 2, dim).clamp(min=eps)
    return (x1 * x2).sum(dim) / (n1 * n2)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """PyTorch's KL divergence with input as log-probabilities: target * (log(target) - input) per
    element (0 where target is 0; exp(target) * (target - input) with log_target), reduced by
    'mean', 'sum', 'batchmean' (sum / batch size) or 'none'."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, "mean", "kl_div")
    if reduction not in ("mean", "sum", "batchmean", "none"):
        raise _core.InvalidArgumentError(f"kl_div: reduction must be 'mean', 'sum', 'batchmean' or 'none', "
                                         f"got {reduction!r}")
    if log_target:
        loss = _core.exp(target) * (target - input)
    else:  # xlogy: 0 where target is 0 (its log taken of 1 there: no -inf, no NaN gradient)
        zero = target == 0
        safe = _core.where(zero, _core.ones((), dtype=target.dtype, device=target.device), target)
        loss = _core.where(zero, _core.zeros((), dtype=target.dtype, device=target.device),
                           target * (_core.log(safe) - input))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.dim() else 1)
    return loss.mean()


def conv1d(input, weight, bias=None, stride=1, padding=0):
    """1-D convolution (cross-correlation) of (N, C, L) by (O, C, k): conv2d over a height of 1,
    the zero padding added to L first."""
    if input.dim() != 3 or weight.dim() != 3:
        raise _core.ShapeError(f"conv1d: expected input (N, C, L) and weight (O, C, k), got {tuple(input.shape)} "
                               f"and {tuple(weight.shape)}")
    if padding:
        input = _core.pad(input, [padding, padding])
    return conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, stride, 0).squeeze(2)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0):
    """Transposed 2-D convolution of (N, C_in, H, W) by (C_in, C_out, kH, kW), PyTorch's: each input
    pixel scatters its weighted kernel into a (H - 1) * stride - 2 * padding + kH + output_padding
    high output (width alike). Composed as one matmul (the kernel's columns for every pixel) and
    fold, which adds the overlapping columns into the image."""
    if input.dim() != 4 or weight.dim() != 4 or input.shape[1] != weight.shape[0]:
        raise _core.ShapeError(f"conv_transpose2d: expected input (N, C_in, H, W) and weight (C_in, C_out, kH, kW), "
                               f"got {tuple(input.shape)} and {tuple(weight.shape)}")
    if stride <= 0 or padding < 0 or not 0 <= output_padding < stride:
        raise _core.InvalidArgumentError(f"conv_transpose2d: need stride > 0, padding >= 0 and 0 <= output_padding < "
                                         f"stride, got stride={stride}, padding={padding}, "
                                         f"output_padding={output_padding}")
    n, c_in, h, w = input.shape
    _, c_out, kh, kw = weight.shape
    out_h = (h - 1) * stride - 2 * padding + kh + output_padding
    out_w = (w - 1) * stride - 2 * padding + kw + output_padding
    if out_h <= 0 or out_w <= 0:
        raise _core.ShapeError(f"conv_transpose2d: the output would be {out_h}x{out_w} for input {tuple(input.shape)} "
                               f"with padding {padding}")
    cols = _core.matmul(weight.reshape(c_in, c_out * kh * kw).t(), input.reshape(n, c_in, h * w))
    out = fold(cols, (out_h, out_w), (kh, kw), padding, stride)
    return out if bias is None else out + bias.reshape(1, c_out, 1, 1)


def _pair(value, what):
    pair = tuple(value) if isinstance(value, (list, tuple)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise _core.InvalidArgumentError(f"{what} must be a positive int or a pair of them, got {value!r}")
    return pair


def adaptive_avg_pool2d(input, output_size):
    """Means over PyTorch's adaptive bins of (N, C, H, W): output row i averages rows
    floor(i H / oh) to ceil((i + 1) H / oh) - 1, columns alike. One reshape when the sizes divide."""
    if input.dim() != 4:
        raise _core.ShapeError(f"adaptive_avg_pool2d: expected (N, C, H, W), got {tuple(input.shape)}")
    oh, ow = _pair(output_size, "adaptive_avg_pool2d: output_size")
    n, c, h, w = input.shape
    if h % oh == 0 and w % ow == 0:
        return input.reshape(n, c, oh, h // oh, ow, w // ow).mean((3, 5))

    def bins(size, out):
        return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]

    rows = [_core.stack([input.narrow(2, r0, r1 - r0).narrow(3, c0, c1 - c0).mean((2, 3)) for c0, c1 in bins(w, ow)], 2)
            for r0, r1 in bins(h, oh)]
    return _core.stack(rows, 2)


def _source_rows(out_size, in_size, scale_factor, mode, align_corners):
    """PyTorch's source coordinates for each output row (or column): nearest, the row index;
    bilinear, the two rows and the second one's weight (float32 arithmetic, as PyTorch's CPU).
    Host constants derived from the sizes alone, like a shape."""
    dst = np.arange(out_size, dtype=np.float32)
    ratio = np.float32(1.0 / scale_factor if scale_factor else in_size / out_size)
    if mode == "nearest":
        return np.minimum(np.floor(dst * ratio), in_size - 1).astype(np.int64)
    if align_corners:
        src = dst * np.float32((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
    else:
        src = np.maximum(ratio * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    first = np.minimum(src.astype(np.int64), in_size - 1)
    return first, np.minimum(first + 1, in_size - 1), src - first.astype(np.float32)


def _resample(x, dim, out_size, scale_factor, mode, align_corners):
    rows = _source_rows(out_size, x.shape[dim], scale_factor, mode, align_corners)
    if mode == "nearest":
        return _core.index_select(x, dim, _core.tensor(rows, device=x.device))
    first, second, weight = rows
    shape = [1] * x.dim()
    shape[dim] = out_size
    w = _core.tensor(weight, dtype=x.dtype, device=x.device).reshape(*shape)
    a = _core.index_select(x, dim, _core.tensor(first, device=x.device))
    b = _core.index_select(x, dim, _core.tensor(second, device=x.device))
    return a * (1 - w) + b * w


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Resizes (N, C, H, W) to `size` or by `scale_factor` (output floor(H * factor)), PyTorch's
    'nearest' (source row floor(dst / factor)) and 'bilinear' (align_corners False: pixel centres;
    True: corner pixels aligned). Integer nearest factors repeat pixels into blocks; the rest
    selects source rows and columns and blends them with constant weights, so the gradient flows
    to the pixels read."""
    if mode not in ("nearest", "bilinear"):
        raise _core.InvalidArgumentError(f"interpolate: mode {mode!r} is not supported; flowgrad has 'nearest' and "
                                         "'bilinear'")
    if align_corners is not None and mode == "nearest":
        raise _core.InvalidArgumentError("interpolate: align_corners applies to 'bilinear' only")
    if input.dim() != 4:
        raise _core.ShapeError(f"interpolate: expected (N, C, H, W), got {tuple(input.shape)}")
    n, c, h, w = input.shape
    if (size is None) == (scale_factor is None):
        raise _core.InvalidArgumentError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        th, tw = _pair(size, "interpolate: size")
        factors = (None, None)
    else:
        factors = tuple(scale_factor) if isinstance(scale_factor, (list, tuple)) else (scale_factor, scale_factor)
        if len(factors) != 2 or not all(isinstance(f, (int, float)) and f > 0 for f in factors):
            raise _core.InvalidArgumentError(f"interpolate: scale_factor must be a positive number or a pair of them, "
                                             f"got {scale_factor!r}")
        th, tw = int(h * factors[0]), int(w * factors[1])
        if th <= 0 or tw <= 0:
            raise _core.InvalidArgumentError(f"interpolate: scale_factor {scale_factor!r} leaves no pixels of "
                                             f"{(h, w)}")
    if mode == "nearest" and th % h == 0 and tw % w == 0 and all(f is None or f == int(f) for f in factors):
        sh, sw = th // h, tw // w
        return input.reshape(n, c, h, 1, w, 1).expand(n, c, h, sh, w, sw).reshape(n, c, th, tw)
    out = _resample(input, 2, th, factors[0], mode, bool(align_corners))
    return _resample(out, 3, tw, factors[1], mode, bool(align_corners))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """softmax(q k^T * scale + mask) v with PyTorch's arguments: scale defaults to 1 / sqrt(E);
    dropout_p > 0 drops attention weights (scaling the rest by 1 / (1 - p)), so pass
    ``dropout_p=p if self.training else 0.0`` as PyTorch's callers do. Without dropout this is the
    fused attention op (a custom scale folded into q); with it, the scores are materialised."""
    if not 0.0 <= dropout_p <= 1.0:
        raise _core.InvalidArgumentError(f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p}")
    if not dropout_p and scale is None:
        return _f.scaled_dot_product_attention(query, key, value, attn_mask, is_causal)
    if not all(isinstance(t, _core.Tensor) and t.dim() >= 2 for t in (query, key, value)):
        raise _core.ShapeError("scaled_dot_product_attention: expected query, key and value tensors of at least 2 dims, "
                               f"got {[tuple(t.shape) if isinstance(t, _core.Tensor) else t for t in (query, key, value)]}")
    root = _math.sqrt(query.shape[-1])
    if not dropout_p:
        return _f.scaled_dot_product_attention(query * (scale * root), key, value, attn_mask, is_causal)
    scores = _core.matmul(query, key.transpose(-2, -1)) * (1.0 / root if scale is None else scale)
    if is_causal:  # key j after query i is masked
        rows, cols = scores.shape[-2], scores.shape[-1]
        scores = scores.masked_fill(_core.arange(cols, device=scores.device).reshape(1, cols) >
                                    _core.arange(rows, device=scores.device).reshape(rows, 1), -_math.inf)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -_math.inf) if attn_mask.dtype == _core.bool else scores + attn_mask
    return _core.matmul(dropout(softmax(scores, -1), dropout_p), value)


def _dilated(weight, dilation):
    """weight (O, C, kh, kw) with dilation - 1 zeros between its taps (pad and reshape: the
    gradient flows back to the taps)."""
    for dim, d in ((3, dilation[1]), (2, dilation[0])):
        if d > 1:
            k = weight.shape[dim]
            spread = _core.pad(weight.unsqueeze(dim + 1), [0, 0] * (3 - dim) + [0, d - 1])
            weight = spread.reshape(*weight.shape[:dim], k * d, *weight.shape[dim + 1:]).narrow(dim, 0, (k - 1) * d + 1)
    return weight


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation) of (N, C, H, W) by (O, C / groups, kH, kW), PyTorch's
    arguments: stride one int (or an equal pair), padding an int, a pair (unequal ones pad the
    input first), 'valid' or 'same'; dilation spreads the kernel with zeros; groups > 1 multiplies
    each group's columns by its own filters in one batched matmul."""
    if not isinstance(input, _core.Tensor) or not isinstance(weight, _core.Tensor) or input.dim() != 4 \
            or weight.dim() != 4:
        return _f.conv2d(input, weight, bias, 1, 0)  # the op's own ShapeError / TypeError
    pair = isinstance(padding, (tuple, list)) and len(padding) == 2 and all(isinstance(p, int) and p >= 0
                                                                             for p in padding)
    if not (isinstance(padding, int) or padding in ("valid", "same") or pair):
        raise _core.InvalidArgumentError(f"conv2d: padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
    sh, sw = _pair(stride, "conv2d: stride")
    if sh != sw:
        raise _core.InvalidArgumentError(f"conv2d: strides {stride!r} differ; flowgrad's convolution takes one stride")
    dh, dw = _pair(dilation, "conv2d: dilation")
    weight = _dilated(weight, (dh, dw))
    kh, kw = weight.shape[-2:]
    if padding in ("valid", "same"):
        if padding == "same" and sh != 1:
            raise _core.InvalidArgumentError("conv2d: padding='same' needs stride 1")
        padding = 0 if padding == "valid" else ((kh - 1) // 2, (kw - 1) // 2, kh // 2, kw // 2)
    pads = tuple(padding) if isinstance(padding, (tuple, list)) else (padding, padding)
    if len(pads) == 4 and pads[:2] == pads[2:]:
        pads = pads[:2]
    if len(pads) == 4 or pads[0] != pads[1]:  # per-side padding ('same' with an even kernel) or (ph, pw)
        top, left, bottom, right = pads if len(pads) == 4 else (pads[0], pads[1], pads[0], pads[1])
        input, pads = _core.pad(input, [left, right, top, bottom]), (0, 0)
    if groups == 1:
        return _f.conv2d(input, weight, bias, sh, pads[0])
    n, c = input.shape[0], input.shape[1]
    o = weight.shape[0]
    if c % groups or o % groups or weight.shape[1] * groups != c:
        raise _core.ShapeError(f"conv2d: {groups} groups need input channels {c} and weight {tuple(weight.shape)} "
                               f"with (O, C / groups, kH, kW) and O, C multiples of groups")
    cols = _f.unfold(input, (kh, kw), pads[0], sh)
    out_h = (input.shape[2] + 2 * pads[0] - kh) // sh + 1
    out = _core.matmul(weight.reshape(groups, o // groups, -1), cols.reshape(n, groups, -1, cols.shape[-1]))
    out = out.reshape(n, o, out_h, cols.shape[-1] // out_h)
    return out if bias is None else out + bias.reshape(1, o, 1, 1)


def _padded_rows(size, left, right, mode):
    """The source index of each padded position along one dim (host constants from the sizes)."""
    rows = np.arange(-left, size + right)
    if mode == "reflect":
        rows = np.abs(rows)
        return np.where(rows >= size, 2 * (size - 1) - rows, rows)
    return np.clip(rows, 0, size - 1) if mode == "replicate" else rows % size


def pad(input, pad, mode="constant", value=None):
    """Pads the last len(pad) // 2 dims, (left, right) pairs from the last dim: 'constant' with
    value (default 0; negative pads crop), 'reflect' (the edge not repeated), 'replicate' (the
    edge repeated) or 'circular' (wrapped around). The last three select source rows, so the
    gradient flows back to the entries read."""
    pads = list(pad)
    if mode == "constant":
        return _core.pad(input, pads, 0.0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise _core.InvalidArgumentError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', "
                                         f"got {mode!r}")
    if value:
        raise _core.InvalidArgumentError(f"pad: a padding value applies to mode 'constant' only, got {value!r}")
    if len(pads) % 2 or len(pads) // 2 > input.dim():
        raise _core.ShapeError(f"pad: {len(pads)} pads for a tensor of {input.dim()} dims; expected (left, right) "
                               f"pairs for at most {input.dim()} dims")
    out = input
    for i in range(len(pads) // 2):
        dim, left, right = input.dim() - 1 - i, pads[2 * i], pads[2 * i + 1]
        size = input.shape[dim]
        limit = size - 1 if mode == "reflect" else size
        if min(left, right) < 0 or max(left, right) > limit or (size == 0 and left + right):
            raise _core.ShapeError(f"pad: {mode} padding ({left}, {right}) of dim {dim} (size {size}) must be "
                                   f"non-negative and at most {limit}")
        if left or right:
            rows = _core.tensor(_padded_rows(size, left, right, mode), device=input.device)
            out = _core.index_select(out, dim, rows)
    return out


def pixel_shuffle(input, upscale_factor):
    """(..., C * r^2, H, W) -> (..., C, H * r, W * r): each group of r^2 channels becomes an r x r
    block of pixels (sub-pixel convolution's output layer)."""
    r = upscale_factor
    *lead, c, h, w = input.shape
    if input.dim() < 3 or r <= 0 or c % (r * r):
        raise _core.ShapeError(f"pixel_shuffle: expected (..., C * {r}^2, H, W) with C * {r}^2 channels, got "
                               f"{tuple(input.shape)}")
    x = input.reshape(-1, c // (r * r), r, r, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """The inverse of pixel_shuffle: (..., C, H * r, W * r) -> (..., C * r^2, H, W)."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    if input.dim() < 3 or r <= 0 or h % r or w % r:
        raise _core.ShapeError(f"pixel_unshuffle: expected (..., C, H, W) with H and W multiples of {r}, got "
                               f"{tuple(input.shape)}")
    x = input.reshape(-1, c, h // r, r, w // r, r).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(*lead, c * r * r, h // r, w // r)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, H, W) or (C, H, W) with probability p in training and scales
    the rest by 1 / (1 - p); Philox draws, one per channel. inplace=True computes out of place."""
    if not 0 <= p <= 1:
        raise _core.InvalidArgumentError(f"dropout2d: p must be in [0, 1], got {p}")
    if input.dim() not in (3, 4):
        raise _core.ShapeError(f"dropout2d: expected (N, C, H, W) or (C, H, W), got {tuple(input.shape)}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0
    keep = _core.rand(*input.shape[:-2], 1, 1, dtype=input.dtype, device=input.device) >= p
    return input * (keep.to(dtype=input.dtype) * (1.0 / (1 - p)))


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalises each (sample, channel) of (N, C, ...) over its spatial positions (biased
    variance), then weight * x + bias per channel. With running statistics and use_input_stats,
    they move towards the batch's (unbiased variance, as PyTorch); without use_input_stats they
    normalise instead."""
    if input.dim() < 3:
        raise _core.ShapeError(f"instance_norm: expected (N, C, ...) with spatial dims, got {tuple(input.shape)}")
    dims = tuple(range(2, input.dim()))
    shape = (1, input.shape[1]) + (1,) * len(dims)
    if use_input_stats:
        mean = input.mean(dims, keepdim=True)
        var = input.var(dims, keepdim=True, correction=0)
        if running_mean is not None:
            n = 1
            for d in dims:
                n *= input.shape[d]
            with _no_grad():
                running_mean.mul_(1 - momentum).add_(mean.mean(0).reshape(-1) * momentum)
                running_var.mul_(1 - momentum).add_(var.mean(0).reshape(-1) * (momentum * n / max(n - 1, 1)))
    else:
        mean, var = running_mean.reshape(*shape), running_var.reshape(*shape)
    out = (input - mean) * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(*shape)
    return out if bias is None else out + bias.reshape(*shape)


def _clamp_inside(input, low, high):
    """input clamped to [low, high] (NaN stays NaN) with PyTorch's hardtanh gradient: 1 strictly
    inside, 0 at the bounds and beyond (clamp's own passes at the bounds)."""
    inside = (input > low) & (input < high)
    return _core.where(inside, input, input.clamp(low, high).detach())


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """input clamped to [min_val, max_val] (NaN stays NaN); the gradient is 1 strictly inside, 0 at
    the bounds and beyond, as PyTorch's. inplace=True is accepted and computes out of place, as
    F.relu(inplace=True)."""
    if min_val > max_val:
        raise _core.InvalidArgumentError(f"hardtanh: min_val must be <= max_val, got min_val={min_val}, "
                                         f"max_val={max_val}")
    return _clamp_inside(input, min_val, max_val)


def relu6(input, inplace=False):
    """min(max(input, 0), 6): hardtanh over [0, 6]."""
    return _clamp_inside(input, 0.0, 6.0)


def hardsigmoid(input, inplace=False):
    """relu6(input + 3) / 6: 0 below -3, 1 above 3, input / 6 + 1/2 between (gradient 1/6 strictly
    between, as PyTorch's)."""
    return _clamp_inside(input + 3.0, 0.0, 6.0) / 6.0


def hardswish(input, inplace=False):
    """input * relu6(input + 3) / 6 (MobileNetV3's); clamp's gradient at the bounds gives PyTorch's
    (x / 3 + 1/2 for -3 <= x <= 3)."""
    return input * (input + 3.0).clamp(0.0, 6.0) / 6.0


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """scale * elu(input, alpha) with PyTorch's constants alpha = 1.6732632423543772 and
    scale = 1.0507009873554805 (self-normalising networks)."""
    return elu(input, _SELU_ALPHA) * _SELU_SCALE


def celu(input, alpha=1.0, inplace=False):
    """input where positive, alpha * (exp(input / alpha) - 1) elsewhere (the exp of min(input, 0):
    no overflow for large inputs). alpha must not be 0."""
    if alpha == 0:
        raise _core.InvalidArgumentError("celu: alpha must not be 0 (it divides the input), got 0")
    return _core.where(input > 0, input, _core.expm1(input.clamp(max=0.0) * (1.0 / alpha)) * alpha)


def prelu(input, weight):
    """input where positive, weight * input elsewhere; weight holds 1 slope or one per channel
    (dim 1 of the input, PyTorch's layout), broadcast over the other dims."""
    if not isinstance(input, _core.Tensor) or not isinstance(weight, _core.Tensor):
        raise TypeError(f"prelu: expected fg.Tensors for input and weight, got {type(input).__name__} and "
                        f"{type(weight).__name__}")
    count = weight.numel()
    if weight.dim() > 1:
        raise _core.ShapeError(f"prelu: weight must be a scalar or 1-D, got shape {tuple(weight.shape)}")
    if count != 1:
        channels = input.shape[1] if input.dim() >= 2 else (1 if input.dim() == 1 else 0)
        if channels != count:
            raise _core.ShapeError(f"prelu: weight has {count} parameters but the input {tuple(input.shape)} has "
                                   f"{channels} channels (dim 1); expected 1 parameter or one per channel")
    if input.dim() >= 2:
        weight = weight.reshape(1, count, *([1] * (input.dim() - 2)))
    elif count == 1:
        weight = weight.reshape(*([1] * input.dim()))
    return _core.where(input > 0, input, input * weight)


def logsigmoid(input):
    """log(sigmoid(input)) as -softplus(-input): finite for large negative inputs."""
    return -_core.softplus(-input)


def glu(input, dim=-1):
    """The gated linear unit: a * sigmoid(b), a and b the two halves of input along dim (whose size
    must be even)."""
    if input.dim() == 0:
        raise _core.ShapeError("glu: expected a tensor with at least 1 dim, got a 0-d tensor")
    size = input.shape[dim] if -input.dim() <= dim < input.dim() else None
    if size is None or size % 2:
        raise _core.ShapeError(f"glu: dim {dim} of input {tuple(input.shape)} must exist and have an even size")
    half = size // 2
    return input.narrow(dim, 0, half) * _core.sigmoid(input.narrow(dim, half, half))


def softsign(input):
    """input / (1 + |input|)."""
    return input / (input.abs() + 1.0)


def tanhshrink(input):
    """input - tanh(input)."""
    return input - _core.tanh(input)


def _pool1d_windows(input, what, kernel_size, stride, padding, dilation, ceil_mode, fill):
    """The windows of a 1-d pool over the last dim of (N, C, L) or (C, L): (..., L_out, kernel_size)
    gathered by one index_select from the input padded with `fill` (host constants from the sizes),
    and each window's start in the padded input. PyTorch's output length, ceil_mode included (a
    last window must start inside the input or the left padding)."""
    if input.dim() not in (2, 3):
        raise _core.ShapeError(f"{what}: expected (N, C, L) or (C, L), got {tuple(input.shape)}")
    stride = kernel_size if stride is None or stride == [] else stride
    k, s, p, d = (v[0] if isinstance(v, (tuple, list)) and len(v) == 1 else v
                  for v in (kernel_size, stride, padding, dilation))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (k, s, p, d)) or min(k, s, d) <= 0 or p < 0:
        raise _core.InvalidArgumentError(f"{what}: kernel_size, stride and dilation must be positive ints and padding "
                                         f"an int >= 0, got kernel_size={kernel_size!r}, stride={stride!r}, "
                                         f"padding={padding!r}, dilation={dilation!r}")
    if p > k // 2:
        raise _core.InvalidArgumentError(f"{what}: padding {p} must be at most half the kernel size {k}")
    length, span = input.shape[-1], d * (k - 1) + 1
    room = length + 2 * p - span
    out = (-(-room // s) if ceil_mode else room // s) + 1
    if ceil_mode and out > 1 and (out - 1) * s >= length + p:
        out -= 1
    if room < 0 or out <= 0:
        raise _core.ShapeError(f"{what}: input {tuple(input.shape)} is shorter than the kernel span {span} with "
                               f"padding {p}")
    starts = np.arange(out) * s
    right = max(0, int(starts[-1]) + span - (length + 2 * p)) + p
    padded = _core.pad(input, [p, right], fill) if p or right else input
    taps = starts[:, None] + np.arange(k)[None, :] * d
    windows = _core.index_select(padded, -1, _core.tensor(taps.reshape(-1), device=input.device))
    return windows.reshape(*input.shape[:-1], out, k), starts, (k, s, p, d)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of the last dim of (N, C, L) or (C, L), PyTorch's arguments
    (stride defaults to kernel_size; padding, at most half the kernel, never wins; dilation;
    ceil_mode). The gradient goes to one maximum per window, as PyTorch's; NaN propagates.
    return_indices=True also returns each maximum's position in the input."""
    windows, starts, (k, s, p, d) = _pool1d_windows(input, "max_pool1d", kernel_size, stride, padding, dilation,
                                                    ceil_mode, -_math.inf)
    values, index = windows.max(-1)
    if not return_indices:
        return values
    first = _core.tensor(starts - p, device=input.device)
    return values, index * d + first


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean over sliding windows of the last dim of (N, C, L) or (C, L), PyTorch's arguments and
    divisors: the window's size clipped to the padded input (count_include_pad=True) or the
    number of input entries in it (False)."""
    windows, starts, (k, s, p, _) = _pool1d_windows(input, "avg_pool1d", kernel_size, stride, padding, 1,
                                                    ceil_mode, 0.0)
    length = input.shape[-1]
    ends = np.minimum(starts + k, length + 2 * p)
    divisor = ends - starts if count_include_pad else np.minimum(ends, length + p) - np.maximum(starts, p)
    scale = _core.tensor(1.0 / divisor, dtype=input.dtype, device=input.device)
    return windows.sum(-1) * scale


def adaptive_avg_pool1d(input, output_size):
    """Means over PyTorch's adaptive bins of the last dim of (N, C, L) or (C, L): output i averages
    entries floor(i L / out) to ceil((i + 1) L / out) - 1 (adaptive_avg_pool2d over a height of 1)."""
    if input.dim() not in (2, 3):
        raise _core.ShapeError(f"adaptive_avg_pool1d: expected (N, C, L) or (C, L), got {tuple(input.shape)}")
    size = output_size[0] if isinstance(output_size, (tuple, list)) and len(output_size) == 1 else output_size
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise _core.InvalidArgumentError(f"adaptive_avg_pool1d: output_size must be a positive int, got "
                                         f"{output_size!r}")
    rows = input.shape[0] * (input.shape[1] if input.dim() == 3 else 1)
    flat = input.reshape(1, rows, 1, input.shape[-1])
    return adaptive_avg_pool2d(flat, (1, size)).reshape(*input.shape[:-1], size)


__all__ = [n for n in dir() if not n.startswith("_")]
