"""PyTorch's Transformer modules (fg.nn.Transformer, TransformerEncoder(Layer),
TransformerDecoder(Layer), TransformerAttention): one layer against a NumPy reference of its
formula, PyTorch's parameter names, outputs equal to PyTorch's from the same weights where it is
installed, float64 gradchecks and the documented errors."""
import copy
import math
import re

import numpy as np
import pytest
try:  # the reference implementation; CI installs no PyTorch, so those comparisons skip there
    import torch
except ImportError:
    torch = None

import flowgrad as fg
from flowgrad import nn

from conftest import gradcheck

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: the comparison with torch is skipped")

ENCODER_NAMES = ["self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                 "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                 "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"]


# ---- the NumPy reference: PyTorch's documented formulas, float64, batch-first (N, L, E) ----

def np_layer_norm(x, w, b, eps=1e-5):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps) * w
    return out if b is None else out + b


def np_attention(q_in, kv_in, p, prefix, heads, mask):
    """PyTorch's MHA: q, k, v from in_proj, softmax(q k^T / sqrt(d) + mask) v per head, out_proj."""
    w, b = p[prefix + "in_proj_weight"], p.get(prefix + "in_proj_bias", np.zeros(3 * q_in.shape[-1]))
    e = q_in.shape[-1]
    d = e // heads
    q, k, v = q_in @ w[:e].T + b[:e], kv_in @ w[e:2 * e].T + b[e:2 * e], kv_in @ w[2 * e:].T + b[2 * e:]
    n, length, source = q.shape[0], q.shape[1], k.shape[1]
    split = lambda t, s: t.reshape(n, s, heads, d).transpose(0, 2, 1, 3)  # noqa: E731
    scores = split(q, length) @ split(k, source).transpose(0, 1, 3, 2) / math.sqrt(d)
    if mask is not None:
        scores = scores + mask
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ split(v, source)).transpose(0, 2, 1, 3).reshape(n, length, e)
    return out @ p[prefix + "out_proj.weight"].T + p.get(prefix + "out_proj.bias", 0.0)


def np_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def np_feed_forward(x, p, activation):
    h = x @ p["linear1.weight"].T + p.get("linear1.bias", 0.0)
    h = np.maximum(h, 0) if activation == "relu" else np_gelu(h)
    return h @ p["linear2.weight"].T + p.get("linear2.bias", 0.0)


def np_encoder_layer(x, p, heads, mask, norm_first, activation):
    norm = lambda y, i: np_layer_norm(y, p[f"norm{i}.weight"], p.get(f"norm{i}.bias"))  # noqa: E731
    attend = lambda y: np_attention(y, y, p, "self_attn.", heads, mask)  # noqa: E731
    if norm_first:
        x = x + attend(norm(x, 1))
        return x + np_feed_forward(norm(x, 2), p, activation)
    x = norm(x + attend(x), 1)
    return norm(x + np_feed_forward(x, p, activation), 2)


def np_decoder_layer(x, memory, p, heads, tgt_mask, memory_mask):
    norm = lambda y, i: np_layer_norm(y, p[f"norm{i}.weight"], p.get(f"norm{i}.bias"))  # noqa: E731
    x = norm(x + np_attention(x, x, p, "self_attn.", heads, tgt_mask), 1)
    x = norm(x + np_attention(x, memory, p, "multihead_attn.", heads, memory_mask), 2)
    return norm(x + np_feed_forward(x, p, "relu"), 3)


def weights(module):
    return {k: v.numpy().astype(np.float64) for k, v in module.state_dict().items()}


def causal(n):
    return np.triu(np.full((n, n), -np.inf), 1)


# ---- against NumPy ----

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer_matches_numpy(norm_first, activation, batch_first, rng):
    layer = nn.TransformerEncoderLayer(12, 3, 20, dropout=0.0, activation=activation, batch_first=batch_first,
                                       norm_first=norm_first)
    for p in layer.parameters():  # away from the initial ones and zeros, so every term counts
        p.data.copy_(fg.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32) * 0.3))
    x = rng.standard_normal((2, 7, 12)).astype(np.float32)  # (N, L, E)
    padding = np.zeros((2, 7), bool)
    padding[1, 5:] = True
    mask = causal(7) + np.where(padding, -np.inf, 0.0)[:, None, None, :]
    expected = np_encoder_layer(x.astype(np.float64), weights(layer), 3, mask, norm_first, activation)
    src = fg.tensor(x if batch_first else x.transpose(1, 0, 2))
    out = layer(src, src_mask=fg.tensor(causal(7).astype(np.float32)), src_key_padding_mask=fg.tensor(padding))
    out = out.numpy() if batch_first else out.numpy().transpose(1, 0, 2)
    np.testing.assert_allclose(out, expected, rtol=2e-4, atol=2e-5)


def test_decoder_layer_matches_numpy(rng):
    layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x, memory = rng.standard_normal((3, 5, 8)), rng.standard_normal((3, 6, 8))
    memory_mask = rng.standard_normal((5, 6))  # a float mask is added to the scores
    out = layer(fg.tensor(x, dtype=fg.float32), fg.tensor(memory, dtype=fg.float32),
                tgt_mask=fg.tensor(causal(5), dtype=fg.float32), memory_mask=fg.tensor(memory_mask, dtype=fg.float32))
    expected = np_decoder_layer(x, memory, weights(layer), 2, causal(5), memory_mask)
    np.testing.assert_allclose(out.numpy(), expected, rtol=2e-4, atol=2e-5)


def test_bool_masks_are_true_where_attention_is_not_allowed(rng):
    layer = nn.TransformerEncoderLayer(8, 2, 8, dropout=0.0, batch_first=True).eval()
    x = fg.tensor(rng.standard_normal((2, 4, 8)).astype(np.float32))
    bool_mask = fg.tensor(np.triu(np.ones((4, 4), bool), 1))
    float_mask = nn.Transformer.generate_square_subsequent_mask(4)
    fg.testing.assert_close(layer(x, src_mask=bool_mask), layer(x, src_mask=float_mask))
    per_head = fg.tensor(np.broadcast_to(causal(4), (2 * 2, 4, 4)).astype(np.float32))  # (N * heads, L, S)
    fg.testing.assert_close(layer(x, src_mask=per_head), layer(x, src_mask=float_mask))
    expected = np_encoder_layer(x.numpy().astype(np.float64), weights(layer), 2, causal(4), False, "relu")
    np.testing.assert_allclose(layer(x, src_mask=bool_mask, is_causal=True).numpy(), expected, rtol=2e-4, atol=2e-5)


def test_unbatched_input_and_attention_weights(rng):
    attn = nn.TransformerAttention(6, 2)
    x = rng.standard_normal((4, 6)).astype(np.float32)  # (L, E): no batch dim
    out, w = attn(fg.tensor(x), fg.tensor(x), fg.tensor(x))
    expected = np_attention(x[None].astype(np.float64), x[None].astype(np.float64), weights(attn), "", 2, None)[0]
    np.testing.assert_allclose(out.numpy(), expected, rtol=2e-4, atol=2e-5)
    assert w.shape == (4, 4)
    np.testing.assert_allclose(w.numpy().sum(-1), np.ones(4), rtol=1e-5)
    _, per_head = attn(fg.tensor(x[:, None]), fg.tensor(x[:, None]), fg.tensor(x[:, None]),
                       average_attn_weights=False)
    assert per_head.shape == (1, 2, 4, 4)
    np.testing.assert_allclose(per_head.numpy().mean(1)[0], w.numpy(), rtol=1e-5)
    assert attn(fg.tensor(x), fg.tensor(x), fg.tensor(x), need_weights=False)[1] is None


def test_square_subsequent_mask():
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    assert mask.dtype == fg.float32 and mask.shape == (4, 4)
    np.testing.assert_array_equal(mask.numpy(), causal(4))
    assert nn.Transformer.generate_square_subsequent_mask(3, dtype=fg.float64).dtype == fg.float64
    assert nn.Transformer.generate_square_subsequent_mask(0).shape == (0, 0)


def test_parameter_names_and_stack_copies():
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    assert list(layer.state_dict()) == ENCODER_NAMES
    no_bias = nn.TransformerEncoderLayer(8, 2, 16, bias=False)
    assert list(no_bias.state_dict()) == ["self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight",
                                          "linear2.weight", "norm1.weight", "norm2.weight"]
    stack = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
    assert list(stack.state_dict()) == [f"layers.{i}.{k}" for i in range(2) for k in ENCODER_NAMES] + \
        ["norm.weight", "norm.bias"]
    # PyTorch deep-copies the layer: equal starting weights, separate tensors
    a, b = stack.layers[0].linear1.weight, stack.layers[1].linear1.weight
    fg.testing.assert_close(a, b)
    with fg.no_grad():
        a.add_(1.0)
    assert not np.allclose(a.numpy(), b.numpy())
    decoder = nn.TransformerDecoderLayer(8, 2, 16)
    assert [k for k in decoder.state_dict() if k.startswith("multihead_attn.")] == [
        "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", "multihead_attn.out_proj.weight",
        "multihead_attn.out_proj.bias"]
    model = nn.Transformer(8, 2, 1, 1, 16)
    names = list(model.state_dict())
    assert names[:12] == [f"encoder.layers.0.{k}" for k in ENCODER_NAMES] and "decoder.layers.0.norm3.bias" in names
    assert names[-2:] == ["decoder.norm.weight", "decoder.norm.bias"]


def test_gradients_float64(rng):
    layer = nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, norm_first=True, activation="gelu").to(fg.float64)
    mask = fg.tensor(causal(3))
    gradcheck(lambda x: layer(x, src_mask=mask), rng.standard_normal((3, 2, 4)))
    decoder = nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, batch_first=True).to(fg.float64)
    gradcheck(lambda x, m: decoder(x, m), rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 2, 4)))
    attn = nn.TransformerAttention(4, 2).to(fg.float64)
    gradcheck(lambda q, kv: attn(q, kv, kv)[0] * attn(q, kv, kv)[1].sum(), rng.standard_normal((2, 1, 4)),
              rng.standard_normal((3, 1, 4)))


def test_every_parameter_trains_and_dropout_is_off_in_eval(rng):
    model = nn.Transformer(8, 2, 1, 1, 16, dropout=0.5, batch_first=True)
    src, tgt = fg.tensor(rng.standard_normal((2, 5, 8)), dtype=fg.float32), \
        fg.tensor(rng.standard_normal((2, 4, 8)), dtype=fg.float32)
    model(src, tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(4)).square().mean().backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in model.parameters())
    model.eval()
    fg.testing.assert_close(model(src, tgt), model(src, tgt))
    model.train()
    assert not np.allclose(model(src, tgt).numpy(), model(src, tgt).numpy())


def test_errors():
    with pytest.raises(fg.InvalidArgumentError, match="embed_dim 10 must be a positive multiple of num_heads 3"):
        nn.TransformerEncoderLayer(10, 3)
    with pytest.raises(fg.InvalidArgumentError, match="activation should be 'relu', 'gelu' or a callable, not 'tanh'"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(fg.InvalidArgumentError, match=r"dropout must be in \[0, 1\), got 1.5"):
        nn.TransformerDecoderLayer(8, 2, dropout=1.5)
    with pytest.raises(fg.InvalidArgumentError, match="num_layers must be an int >= 0, got -1"):
        nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), -1)
    layer = nn.TransformerEncoderLayer(8, 2, 8)
    x = fg.zeros(4, 2, 8)
    with pytest.raises(fg.ShapeError, match=r"attn_mask \(3, 3\) must be \(4, 4\) or \(4, 4, 4\)"):
        layer(x, src_mask=fg.zeros(3, 3))
    with pytest.raises(fg.ShapeError, match=r"key_padding_mask \(4, 2\) must be \(2, 4\) \(N, S\)"):
        layer(x, src_key_padding_mask=fg.zeros(4, 2, dtype=fg.bool))
    with pytest.raises(fg.DTypeError, match="attn_mask must be bool or floating, got flowgrad.int64"):
        layer(x, src_mask=fg.zeros(4, 4, dtype=fg.int64))
    with pytest.raises(fg.InvalidArgumentError, match="is_causal is a hint that attn_mask is the causal mask"):
        layer(x, is_causal=True)
    with pytest.raises(fg.ShapeError, match=r"query \(4, 2, 6\) must be \(L, N, 8\)"):
        layer(fg.zeros(4, 2, 6))
    attn = nn.TransformerAttention(8, 2)
    for key, value in (((5, 2, 8), (4, 2, 8)), ((5, 3, 8), (5, 3, 8)), ((5, 8), (5, 8))):
        message = f"key {key} and value {value} must match each other and the batch of query (4, 2, 8)"
        with pytest.raises(fg.ShapeError, match=re.escape(message)):
            attn(x, fg.zeros(*key), fg.zeros(*value))
    with pytest.raises(fg.InvalidArgumentError, match="is_causal is a hint"):
        nn.TransformerEncoder(layer, 1)(x, is_causal=True)
    model = nn.Transformer(8, 2, 1, 1, 8)
    with pytest.raises(fg.ShapeError, match=r"the batch number of src \(3, 2, 8\) and tgt \(3, 5, 8\) must be equal"):
        model(fg.zeros(3, 2, 8), fg.zeros(3, 5, 8))
    with pytest.raises(fg.ShapeError, match=r"the feature number of src \(3, 2, 8\) and tgt \(3, 2, 4\) must be "):
        model(fg.zeros(3, 2, 8), fg.zeros(3, 2, 4))


# ---- against PyTorch, from the same weights ----

def same_weights(theirs, ours):
    """ours loaded strictly from theirs' state_dict (every name must match)."""
    ours.load_state_dict({k: fg.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours


NESTED = "ignore:enable_nested_tensor is True:UserWarning"  # PyTorch's note about its own fast path


@needs_torch
@pytest.mark.filterwarnings(NESTED)
@pytest.mark.parametrize("options", [{}, {"batch_first": True, "norm_first": True, "activation": "gelu"},
                                     {"bias": False, "layer_norm_eps": 1e-3}])
def test_encoder_stack_matches_torch(options, rng):
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, **options), 2,
                                         norm=torch.nn.LayerNorm(16)).eval()
    ours = same_weights(theirs, nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, **options), 2,
                                                      norm=nn.LayerNorm(16)))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x = rng.standard_normal((3, 6, 16) if options.get("batch_first") else (6, 3, 16)).astype(np.float32)
    padding = np.zeros((3, 6), bool)
    padding[2, 4:] = True
    mask = torch.nn.Transformer.generate_square_subsequent_mask(6)
    with torch.no_grad():
        expected = theirs(torch.tensor(x), mask=mask, src_key_padding_mask=torch.tensor(padding).float()
                          .masked_fill(torch.tensor(padding), -math.inf), is_causal=True).numpy()
        plain = theirs(torch.tensor(x)).numpy()
    padding_mask = fg.zeros(3, 6).masked_fill(fg.tensor(padding), -math.inf)
    out = ours(fg.tensor(x), mask=fg.tensor(mask.numpy()), src_key_padding_mask=padding_mask, is_causal=True)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours(fg.tensor(x)).numpy(), plain, rtol=1e-4, atol=1e-5)


@needs_torch
@pytest.mark.filterwarnings(NESTED)
def test_transformer_matches_torch_forward_and_gradients(rng):
    torch.manual_seed(1)
    theirs = torch.nn.Transformer(8, 2, 2, 2, 16, dropout=0.0)
    ours = same_weights(theirs, nn.Transformer(8, 2, 2, 2, 16, dropout=0.0))
    src, tgt = rng.standard_normal((5, 2, 8)).astype(np.float32), rng.standard_normal((4, 2, 8)).astype(np.float32)
    memory_padding = np.zeros((2, 5), bool)
    memory_padding[0, 3:] = True
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(4)
    t_src, t_tgt = torch.tensor(src, requires_grad=True), torch.tensor(tgt)
    expected = theirs(t_src, t_tgt, tgt_mask=tgt_mask, src_key_padding_mask=torch.tensor(memory_padding),
                      memory_key_padding_mask=torch.tensor(memory_padding))
    expected.square().sum().backward()
    f_src = fg.tensor(src, requires_grad=True)
    out = ours(f_src, fg.tensor(tgt), tgt_mask=fg.tensor(tgt_mask.numpy()),
               src_key_padding_mask=fg.tensor(memory_padding), memory_key_padding_mask=fg.tensor(memory_padding))
    out.square().sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(f_src.grad.numpy(), t_src.grad.numpy(), rtol=1e-3, atol=1e-4)
    named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), named[name].grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


@needs_torch
def test_attention_weights_match_torch(rng):
    torch.manual_seed(2)
    theirs = torch.nn.MultiheadAttention(6, 3, batch_first=True)
    ours = same_weights(theirs, nn.TransformerAttention(6, 3, batch_first=True))
    q, kv = rng.standard_normal((2, 4, 6)).astype(np.float32), rng.standard_normal((2, 5, 6)).astype(np.float32)
    mask = np.zeros((4, 5), bool)
    mask[0, 1] = True
    with torch.no_grad():
        t_out, t_w = theirs(torch.tensor(q), torch.tensor(kv), torch.tensor(kv), attn_mask=torch.tensor(mask))
    f_out, f_w = ours(fg.tensor(q), fg.tensor(kv), fg.tensor(kv), attn_mask=fg.tensor(mask))
    np.testing.assert_allclose(f_out.numpy(), t_out.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(f_w.numpy(), t_w.numpy(), rtol=1e-4, atol=1e-6)


def test_deepcopy_keeps_the_function_activation():
    layer = nn.TransformerEncoderLayer(4, 2, 4, activation=nn.GELU())
    twin = copy.deepcopy(layer)
    assert isinstance(twin.activation, fg.nn.GELU) and list(twin.state_dict()) == list(layer.state_dict())


def test_a_compiled_training_step_equals_eager(rng):
    def build():
        fg.manual_seed(3)
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2)

    x = fg.tensor(rng.standard_normal((2, 5, 8)), dtype=fg.float32)
    y = fg.tensor(rng.standard_normal((2, 5, 8)), dtype=fg.float32)
    mask = nn.Transformer.generate_square_subsequent_mask(5)

    def loss_fn(out, target):
        return (out - target).square().mean()

    eager, compiled = build(), build()
    eager_opt = fg.optim.SGD(eager.parameters(), lr=0.1)
    compiled_opt = fg.optim.SGD(compiled.parameters(), lr=0.1)
    step = fg.compile(lambda a, b: loss_fn(compiled(a, mask=mask), b), optimizer=compiled_opt, example_inputs=(x, y))
    for _ in range(3):
        eager_opt.zero_grad()
        expected = loss_fn(eager(x, mask=mask), y)
        expected.backward()
        eager_opt.step()
        np.testing.assert_allclose(float(step(x, y)), float(expected), rtol=1e-5)
    for a, b in zip(eager.parameters(), compiled.parameters()):
        fg.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
