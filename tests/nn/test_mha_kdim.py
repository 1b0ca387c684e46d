"""PyTorch's nn.MultiheadAttention options (issue 38): kdim / vdim (separate q/k/v_proj_weight,
_qkv_same_embed_dim), add_bias_kv and add_zero_attn, built by nn.MultiheadAttention in PyTorch's
form: a NumPy reference of PyTorch's formula, PyTorch's state_dict names and outputs from copied
weights where it is installed, float64 finite-difference gradients and the documented errors."""
import re

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn
from conftest import check_parameter_grads, gradcheck

CASES = [  # (kdim, vdim, add_bias_kv, add_zero_attn)
    (5, 3, False, False), (5, 3, True, True), (None, None, True, False), (None, None, False, True), (8, 7, True, False),
]


def np_reference(m, q, k, v, mask):
    """PyTorch's multi_head_attention_forward, batch-first (N, L, E) inputs, float64; mask: an
    additive (L, S) mask or None. Returns (out, head-averaged weights)."""
    p = {name: t.detach().numpy().astype(np.float64) for name, t in m.state_dict().items()}
    e, heads = m.embed_dim, m.num_heads
    if "in_proj_weight" in p:
        wq, wk, wv = np.split(p["in_proj_weight"], 3)
    else:
        wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    bq, bk, bv = np.split(p.get("in_proj_bias", np.zeros(3 * e)), 3)
    qp, kp, vp = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
    n, length, source = q.shape[0], q.shape[1], k.shape[1]
    mask = np.zeros((length, source)) if mask is None else mask
    if "bias_k" in p:
        kp = np.concatenate([kp, np.broadcast_to(p["bias_k"], (n, 1, e))], 1)
        vp = np.concatenate([vp, np.broadcast_to(p["bias_v"], (n, 1, e))], 1)
        mask = np.pad(mask, ((0, 0), (0, 1)))
    split = lambda x: x.reshape(n, x.shape[1], heads, e // heads).transpose(0, 2, 1, 3)  # noqa: E731
    qh, kh, vh = split(qp), split(kp), split(vp)
    if m.add_zero_attn:
        zeros = np.zeros((n, heads, 1, e // heads))
        kh, vh = np.concatenate([kh, zeros], 2), np.concatenate([vh, zeros], 2)
        mask = np.pad(mask, ((0, 0), (0, 1)))
    scores = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(e // heads) + mask
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ vh).transpose(0, 2, 1, 3).reshape(n, length, e)
    return out @ p["out_proj.weight"].T + p["out_proj.bias"], probs.mean(1)


def build(kdim, vdim, bias_kv, zero_attn, **kwargs):
    fg.manual_seed(3)
    return nn.MultiheadAttention(8, 2, kdim=kdim, vdim=vdim, add_bias_kv=bias_kv, add_zero_attn=zero_attn,
                                 batch_first=True, **kwargs).to(fg.float64)


@pytest.mark.parametrize("kdim, vdim, bias_kv, zero_attn", CASES)
def test_matches_the_numpy_reference(kdim, vdim, bias_kv, zero_attn, rng):
    m = build(kdim, vdim, bias_kv, zero_attn)
    if bias_kv:  # PyTorch draws them from xavier_normal_; the reference reads whatever they hold
        assert np.abs(m.bias_k.numpy()).sum() > 0
    q = rng.standard_normal((2, 3, 8))
    k, v = rng.standard_normal((2, 4, kdim or 8)), rng.standard_normal((2, 4, vdim or 8))
    mask = np.zeros((3, 4))
    mask[1, 2] = -np.inf
    expected, weights = np_reference(m, q, k, v, mask)
    for need_weights in (True, False):
        out, w = m(fg.tensor(q), fg.tensor(k), fg.tensor(v), attn_mask=fg.tensor(mask == -np.inf),
                   need_weights=need_weights)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12)
        if need_weights:
            np.testing.assert_allclose(w.numpy(), weights, rtol=1e-12, atol=1e-14)
    # key padding masks grow by the appended (attended) positions too
    padding = np.zeros((2, 4), bool)
    padding[0, 3] = True
    out, _ = m(fg.tensor(q), fg.tensor(k), fg.tensor(v), key_padding_mask=fg.tensor(padding))
    ref0, _ = np_reference(m, q[:1], k[:1], v[:1], np.where(padding[0], -np.inf, 0.0)[None].repeat(3, 0))
    np.testing.assert_allclose(out.numpy()[:1], ref0, rtol=1e-12, atol=1e-12)


def test_parameters_are_pytorchs():
    m = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, add_bias_kv=True)
    assert isinstance(m, nn.TransformerAttention) and isinstance(m, nn.MultiheadAttention)
    assert not m._qkv_same_embed_dim and m.in_proj_weight is None
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {
        "q_proj_weight": (8, 8), "k_proj_weight": (8, 5), "v_proj_weight": (8, 3), "in_proj_bias": (24,),
        "bias_k": (1, 1, 8), "bias_v": (1, 1, 8), "out_proj.weight": (8, 8), "out_proj.bias": (8,)}
    same = nn.MultiheadAttention(8, 2, kdim=8, vdim=8, bias=False, add_zero_attn=True)
    assert same._qkv_same_embed_dim and sorted(same.state_dict()) == ["in_proj_weight", "out_proj.weight"]
    assert "kdim=5, vdim=3" in repr(m) and "kdim" not in repr(same)
    # flowgrad's own layer unless PyTorch's form is asked for
    assert type(nn.MultiheadAttention(8, 2)) is fg._core.MultiheadAttention
    assert type(nn.MultiheadAttention(8, 2, True)) is fg._core.MultiheadAttention
    assert type(nn.MultiheadAttention(8, 2, 0.0)) is nn.TransformerAttention
    assert type(nn.MultiheadAttention(8, 2, batch_first=True)) is nn.TransformerAttention


@pytest.mark.parametrize("kdim, vdim, bias_kv, zero_attn", CASES[:2] + CASES[4:])
def test_gradients_float64(kdim, vdim, bias_kv, zero_attn, rng):
    m = build(kdim, vdim, bias_kv, zero_attn)
    q = rng.standard_normal((2, 3, 8))
    k, v = rng.standard_normal((2, 4, kdim or 8)), rng.standard_normal((2, 4, vdim or 8))
    gradcheck(lambda a, b, c: m(a, b, c)[0], q, k, v)
    tq, tk, tv = fg.tensor(q), fg.tensor(k), fg.tensor(v)
    check_parameter_grads(lambda: m(tq, tk, tv)[0], list(m.parameters()))


def test_errors():
    with pytest.raises(fg.InvalidArgumentError, match="kdim and vdim must be positive, got 0 and 8"):
        nn.MultiheadAttention(8, 2, kdim=0)
    m = nn.MultiheadAttention(8, 2, kdim=5, vdim=3)
    q = fg.zeros(4, 2, 8)
    with pytest.raises(fg.ShapeError, match=re.escape("key (6, 2, 8) must be (S, N, 5)")):
        m(q, fg.zeros(6, 2, 8), fg.zeros(6, 2, 3))
    with pytest.raises(fg.ShapeError, match=re.escape("value (6, 2, 5) must be (S, N, 3)")):
        m(q, fg.zeros(6, 2, 5), fg.zeros(6, 2, 5))
    with pytest.raises(fg.ShapeError, match=re.escape("key (6, 2, 5) and value (7, 2, 3) must match each other")):
        m(q, fg.zeros(6, 2, 5), fg.zeros(7, 2, 3))


@pytest.mark.parametrize("kdim, vdim, bias_kv, zero_attn", CASES)
@pytest.mark.parametrize("batch_first", [False, True])
def test_matches_torch_from_its_state_dict(kdim, vdim, bias_kv, zero_attn, batch_first, rng):
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    theirs = torch.nn.MultiheadAttention(8, 2, kdim=kdim, vdim=vdim, add_bias_kv=bias_kv, add_zero_attn=zero_attn,
                                         batch_first=batch_first).double()
    ours = nn.MultiheadAttention(8, 2, kdim=kdim, vdim=vdim, add_bias_kv=bias_kv, add_zero_attn=zero_attn,
                                 batch_first=batch_first).to(fg.float64)
    ours.load_state_dict({k: fg.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    assert list(ours.state_dict()) == list(theirs.state_dict())
    shape = (lambda s, w: (2, s, w)) if batch_first else (lambda s, w: (s, 2, w))
    q, k, v = (rng.standard_normal(shape(3, 8)), rng.standard_normal(shape(4, kdim or 8)),
               rng.standard_normal(shape(4, vdim or 8)))
    mask, padding = np.zeros((3, 4), bool), np.zeros((2, 4), bool)
    mask[2, 0], padding[1, 1] = True, True
    for kwargs in (dict(attn_mask=mask), dict(key_padding_mask=padding), dict(attn_mask=mask, need_weights=False),
                   dict(average_attn_weights=False)):
        def tensors(lib):
            return {key: lib.tensor(a) if isinstance(a, np.ndarray) else a for key, a in kwargs.items()}
        with torch.no_grad():
            t_out, t_w = theirs(*(torch.tensor(a) for a in (q, k, v)), **tensors(torch))
        f_out, f_w = ours(*(fg.tensor(a) for a in (q, k, v)), **tensors(fg))
        np.testing.assert_allclose(f_out.numpy(), t_out.numpy(), rtol=1e-10, atol=1e-12, err_msg=str(kwargs))
        assert (f_w is None) == (t_w is None)
        if t_w is not None:
            np.testing.assert_allclose(f_w.numpy(), t_w.numpy(), rtol=1e-10, atol=1e-12, err_msg=str(kwargs))
