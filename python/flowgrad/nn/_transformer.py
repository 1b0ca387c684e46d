"""PyTorch's Transformer modules, written over flowgrad's ops with PyTorch's constructor and
forward arguments and its parameter names (self_attn.in_proj_weight, linear1, norm1, ...), so a
PyTorch state_dict loads strictly and the same weights give the same outputs.

fg.nn.MultiheadAttention keeps flowgrad's own interface (batch-first, qkv/proj, one output) unless
called with PyTorch's keywords; TransformerAttention is PyTorch's nn.MultiheadAttention interface
(sequence-first unless batch_first, in_proj_weight or q/k/v_proj_weight, out_proj, (output,
weights)), and the layers' self_attn."""
import copy
import math

from .. import _core
from . import functional as F
from . import init
from ._constructors import LayerNorm, _Builds

__all__ = ["MultiheadAttention", "TransformerAttention", "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder", "Transformer"]


def _parameter(*shape):
    return _core._parameter(_core.empty(*shape), True)


def _layer_norm(d_model, eps, bias):
    return LayerNorm(d_model, eps, bias=bias)  # bias=False: a weight only, as PyTorch's


def _additive(mask, what, dtype):
    """A bool mask (True: not attended, PyTorch's MHA convention) as 0 / -inf; a float one as is."""
    if mask is None:
        return None
    if mask.dtype == _core.bool:
        return _core.zeros(*mask.shape, dtype=dtype).masked_fill(mask, -math.inf)
    if not mask.dtype.is_floating_point:
        raise _core.DTypeError(f"TransformerAttention: {what} must be bool or floating, got {mask.dtype}")
    return mask.to(dtype)


def _merged_mask(attn_mask, key_padding_mask, n, heads, length, source, dtype):
    """attn_mask (L, S) or (N * heads, L, S) and key_padding_mask (N, S) as one additive mask that
    broadcasts to the scores (N, heads, L, S), or None."""
    mask = _additive(attn_mask, "attn_mask", dtype)
    if mask is not None:
        if tuple(mask.shape) == (n * heads, length, source):
            mask = mask.reshape(n, heads, length, source)
        elif tuple(mask.shape) != (length, source):
            raise _core.ShapeError(f"TransformerAttention: attn_mask {tuple(mask.shape)} must be ({length}, {source}) "
                                   f"or ({n * heads}, {length}, {source}) (L, S or N * num_heads, L, S)")
    padding = _additive(key_padding_mask, "key_padding_mask", dtype)
    if padding is not None:
        if tuple(padding.shape) != (n, source):
            raise _core.ShapeError(f"TransformerAttention: key_padding_mask {tuple(padding.shape)} must be "
                                   f"({n}, {source}) (N, S)")
        padding = padding.reshape(n, 1, 1, source)
        mask = padding if mask is None else mask + padding
    return mask


class TransformerAttention(_core.Module):
    """PyTorch's nn.MultiheadAttention: ``out, weights = attn(query, key, value, key_padding_mask=None,
    need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False)``.

    Inputs are (L, N, E) (batch_first=True: (N, L, E); unbatched: (L, E)); key is (S, N, kdim)
    and value (S, N, vdim) (kdim, vdim default to E); bool masks are True where attention is not
    allowed, float masks are added to the scores. Parameters as PyTorch's: in_proj_weight (3E, E)
    when kdim == vdim == E (_qkv_same_embed_dim), else q_proj_weight (E, E), k_proj_weight (E,
    kdim) and v_proj_weight (E, vdim); in_proj_bias (3E); out_proj (a Linear); with add_bias_kv,
    bias_k and bias_v (1, 1, E), appended to the projected keys and values as one more source
    position; add_zero_attn appends a position of zeros to each head's keys and values (the masks
    grow by an attended column for each). With need_weights=False the attention is flowgrad's
    fused op; weights come back None."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise _core.InvalidArgumentError(f"TransformerAttention: embed_dim {embed_dim} must be a positive "
                                             f"multiple of num_heads {num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise _core.InvalidArgumentError(f"TransformerAttention: dropout must be in [0, 1), got {dropout}")
        kdim, vdim = embed_dim if kdim is None else kdim, embed_dim if vdim is None else vdim
        if kdim <= 0 or vdim <= 0:
            raise _core.InvalidArgumentError(f"TransformerAttention: kdim and vdim must be positive, got {kdim} and "
                                             f"{vdim}")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim, self.vdim, self.add_zero_attn = kdim, vdim, add_zero_attn
        self._qkv_same_embed_dim = kdim == embed_dim and vdim == embed_dim
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _parameter(3 * embed_dim, embed_dim)
            init.xavier_uniform_(self.in_proj_weight)
        else:
            self.register_parameter("in_proj_weight", None)
            for name, width in (("q_proj_weight", embed_dim), ("k_proj_weight", kdim), ("v_proj_weight", vdim)):
                setattr(self, name, init.xavier_uniform_(_parameter(embed_dim, width)))
        self.in_proj_bias = _core._parameter(_core.zeros(3 * embed_dim), True) if bias else None
        self.out_proj = _core.Linear(embed_dim, embed_dim, bias)
        if bias:
            init.zeros_(self.out_proj.bias)
        if add_bias_kv:
            self.bias_k = init.xavier_normal_(_parameter(1, 1, embed_dim))
            self.bias_v = init.xavier_normal_(_parameter(1, 1, embed_dim))
        else:
            self.bias_k = self.bias_v = None

    def _projection_weights(self):
        if self._qkv_same_embed_dim:
            return self.in_proj_weight.chunk(3, 0)
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def _heads(self, x, n, length):  # (N, L, E) -> (N, heads, L, head_dim)
        return x.reshape(n, length, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        for name, x, width, length in (("query", query, self.embed_dim, "L"), ("key", key, self.kdim, "S"),
                                       ("value", value, self.vdim, "S")):
            if x.ndim not in (2, 3) or x.shape[-1] != width:
                raise _core.ShapeError(f"TransformerAttention: {name} {tuple(x.shape)} must be ({length}, N, {width}) "
                                       f"(batch_first: (N, {length}, {width}); unbatched: ({length}, {width}))")
        if is_causal and attn_mask is None:
            raise _core.InvalidArgumentError("TransformerAttention: is_causal is a hint that attn_mask is the causal "
                                             "mask and needs it; make one with "
                                             "Transformer.generate_square_subsequent_mask")
        batch = 0 if self.batch_first else 1
        if key.shape[:-1] != value.shape[:-1] or key.ndim != query.ndim or \
                (query.ndim == 3 and key.shape[batch] != query.shape[batch]):
            raise _core.ShapeError(f"TransformerAttention: key {tuple(key.shape)} and value {tuple(value.shape)} "
                                   f"must match each other and the batch of query {tuple(query.shape)}")
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        n, length, source = query.shape[0], query.shape[1], key.shape[1]
        w = self._projection_weights()
        b = self.in_proj_bias.chunk(3, 0) if self.in_proj_bias is not None else (None, None, None)
        q = self._heads(F.linear(query, w[0], b[0]), n, length)
        k, v = F.linear(key, w[1], b[1]), F.linear(value, w[2], b[2])
        if self.bias_k is not None:  # one more source position, (N, S + 1, E)
            k = _core.cat([k, self.bias_k.expand(n, 1, self.embed_dim)], 1)
            v = _core.cat([v, self.bias_v.expand(n, 1, self.embed_dim)], 1)
        k, v = self._heads(k, n, k.shape[1]), self._heads(v, n, v.shape[1])
        if self.add_zero_attn:
            zeros = _core.zeros(n, self.num_heads, 1, self.head_dim, dtype=k.dtype, device=k.device)
            k, v = _core.cat([k, zeros], 2), _core.cat([v, zeros], 2)
        mask = _merged_mask(attn_mask, key_padding_mask, n, self.num_heads, length, source, q.dtype)
        if mask is not None and k.shape[2] > source:  # the appended positions are attended
            mask = F.pad(mask, (0, k.shape[2] - source))
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = q.matmul(k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
            probs = F.softmax(scores if mask is None else scores + mask, dim=-1)
            probs = F.dropout(probs, p, True) if p > 0 else probs
            out = probs.matmul(v)
            weights = probs.mean(1) if average_attn_weights else probs
            weights = weights.squeeze(0) if unbatched else weights
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = self.out_proj(out.transpose(1, 2).reshape(n, length, self.embed_dim))
        if unbatched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def extra_repr(self):
        dims = "" if self._qkv_same_embed_dim else f", kdim={self.kdim}, vdim={self.vdim}"
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}{dims}, " \
               f"batch_first={self.batch_first}"


# The keywords only PyTorch's nn.MultiheadAttention takes: given any, the name builds that one.
_TORCH_MHA_KEYWORDS = frozenset({"embed_dim", "num_heads", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim",
                                 "batch_first"})


class MultiheadAttention(metaclass=_Builds):
    """fg.nn.MultiheadAttention(dim, heads, causal=False, dropout=0.0) is flowgrad's own layer
    (batch-first, m(x) or m(q, k, v), one output). Called in PyTorch's form, with any keyword
    only PyTorch's takes (kdim, vdim, batch_first, bias, add_bias_kv, add_zero_attn, embed_dim,
    num_heads) or a float dropout third, it builds a TransformerAttention: PyTorch's interface,
    parameter names and state_dict. isinstance answers for both."""
    _layers = (_core.MultiheadAttention, TransformerAttention)

    def __new__(cls, *args, **kwargs):
        torch_form = bool(_TORCH_MHA_KEYWORDS & set(kwargs)) or (
            len(args) > 2 and isinstance(args[2], float))
        return TransformerAttention(*args, **kwargs) if torch_form else _core.MultiheadAttention(*args, **kwargs)


def _activation(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if callable(activation):
        return activation
    raise _core.InvalidArgumentError(f"Transformer: activation should be 'relu', 'gelu' or a callable, "
                                     f"not {activation!r}")


class _Layer(_core.Module):
    """What the encoder and decoder layers share: the feed-forward block and its options."""

    def _feed_forward_parts(self, d_model, nhead, dim_feedforward, dropout, activation, batch_first, norm_first,
                            bias):
        if not 0.0 <= dropout < 1.0:
            raise _core.InvalidArgumentError(f"{type(self).__name__}: dropout must be in [0, 1), got {dropout}")
        self.self_attn = TransformerAttention(d_model, nhead, dropout, bias, batch_first=batch_first)
        self.linear1 = _core.Linear(d_model, dim_feedforward, bias)
        self.dropout = _core.Dropout(dropout)
        self.linear2 = _core.Linear(dim_feedforward, d_model, bias)
        self.norm_first, self.batch_first = norm_first, batch_first
        self.activation = _activation(activation)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _sa_block(self, x, mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)


class TransformerEncoderLayer(_Layer):
    """PyTorch's nn.TransformerEncoderLayer: self-attention and a feed-forward block, each with a
    residual and a LayerNorm (after them, or before with norm_first=True).
    ``layer(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True):
        super().__init__()
        self._feed_forward_parts(d_model, nhead, dim_feedforward, dropout, activation, batch_first, norm_first, bias)
        self.norm1 = _layer_norm(d_model, layer_norm_eps, bias)
        self.norm2 = _layer_norm(d_model, layer_norm_eps, bias)
        self.dropout1, self.dropout2 = _core.Dropout(dropout), _core.Dropout(dropout)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerDecoderLayer(_Layer):
    """PyTorch's nn.TransformerDecoderLayer: self-attention, attention over the encoder's output
    (multihead_attn) and a feed-forward block, each with a residual and a LayerNorm.
    ``layer(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True):
        super().__init__()
        self._feed_forward_parts(d_model, nhead, dim_feedforward, dropout, activation, batch_first, norm_first, bias)
        self.multihead_attn = TransformerAttention(d_model, nhead, dropout, bias, batch_first=batch_first)
        self.norm1 = _layer_norm(d_model, layer_norm_eps, bias)
        self.norm2 = _layer_norm(d_model, layer_norm_eps, bias)
        self.norm3 = _layer_norm(d_model, layer_norm_eps, bias)
        self.dropout1, self.dropout2, self.dropout3 = (_core.Dropout(dropout) for _ in range(3))

    def _mha_block(self, x, memory, mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, memory, memory, attn_mask=mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=is_causal)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))


def _clones(layer, num_layers, owner):
    if not isinstance(num_layers, int) or num_layers < 0:
        raise _core.InvalidArgumentError(f"{owner}: num_layers must be an int >= 0, got {num_layers!r}")
    return _core.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoder(_core.Module):
    """PyTorch's nn.TransformerEncoder: num_layers copies of encoder_layer (layers.0, layers.1, ...,
    each starting from the same weights, as PyTorch's deep copies do) and an optional final norm.
    ``encoder(src, mask=None, src_key_padding_mask=None, is_causal=None)``: is_causal is a hint
    that the mask is causal (the mask is applied either way; True without a mask raises).
    PyTorch's enable_nested_tensor and mask_check are accepted; they change no result."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers, "TransformerEncoder")
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        is_causal = bool(is_causal)  # only a hint: the mask itself is always applied
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(_core.Module):
    """PyTorch's nn.TransformerDecoder: num_layers copies of decoder_layer and an optional final norm.
    ``decoder(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False)``."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers, "TransformerDecoder")
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        tgt_is_causal = bool(tgt_is_causal)
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
        return self.norm(x) if self.norm is not None else x


class Transformer(_core.Module):
    """PyTorch's nn.Transformer: an encoder (encoder.layers.*, encoder.norm) and a decoder
    (decoder.layers.*, decoder.norm), every weight matrix initialised with xavier_uniform_.
    ``model(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None,
    tgt_is_causal=None, memory_is_causal=False)``; src (S, N, E), tgt (T, N, E) (batch_first:
    (N, S, E), (N, T, E))."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation="relu", custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True):
        super().__init__()
        options = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                       layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **options), num_encoder_layers,
            _layer_norm(d_model, layer_norm_eps, bias))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **options), num_decoder_layers,
            _layer_norm(d_model, layer_norm_eps, bias))
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise _core.ShapeError(f"Transformer: the batch number of src {tuple(src.shape)} and tgt "
                                   f"{tuple(tgt.shape)} must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise _core.ShapeError(f"Transformer: the feature number of src {tuple(src.shape)} and tgt "
                                   f"{tuple(tgt.shape)} must be equal to d_model {self.d_model}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The (sz, sz) float mask of causal attention: 0 on and below the diagonal, -inf above."""
        dtype = dtype or _core.float32
        rows = _core.arange(sz).reshape(sz, 1)
        cols = _core.arange(sz).reshape(1, sz)
        mask = _core.zeros(sz, sz, dtype=dtype).masked_fill(cols > rows, -math.inf)
        return mask.to(device) if device is not None else mask
