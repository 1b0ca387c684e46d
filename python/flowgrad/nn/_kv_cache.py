"""fg.nn.KVCache: a static, preallocated key/value cache for autoregressive decoding."""
from .. import _core
from .._cache_ops import _checked, _dtype_name, _positions
from .._core import Module


class KVCache(Module):
    """Keys and values of `layers` attention layers for `batch` rows of up to `max_len` positions,
    preallocated as buffers ``k0 v0 k1 v1 ...`` of shape (batch, heads, max_len, head_dim), and
    ``pos`` (batch,) int64: how many positions each row holds (rows may differ: ragged prompts).

    An attention layer calls ``cache.attend(layer, q, k, v)`` with its new queries, keys and values
    (B, H, t, D): they are written at each row's positions ``pos .. pos + t - 1`` and the queries
    attend causally over everything the row holds. The model's positional embedding reads
    ``cache.positions(t)``. After the model ran, the caller moves ``pos`` on (``advance``); fg.generate
    does. Every step is device ops with no host read and a fixed shape, so one compiled plan serves
    every position, and the writes persist across the plan's calls (the cache is made before
    compiling). A write past max_len raises fg.IndexOutOfRangeError."""

    def __init__(self, layers, batch, heads, max_len, head_dim, dtype=None, device=None):
        super().__init__()
        for name, n in (("layers", layers), ("batch", batch), ("heads", heads), ("max_len", max_len),
                        ("head_dim", head_dim)):
            if not isinstance(n, int) or n < 1:
                raise _core.InvalidArgumentError(f"KVCache: {name} must be a positive integer, got {n!r}")
        self.layers, self.batch, self.heads, self.max_len, self.head_dim = layers, batch, heads, max_len, head_dim
        dtype = dtype or _core.get_default_dtype()
        for i in range(layers):
            self.register_buffer(f"k{i}", _core.zeros(batch, heads, max_len, head_dim, dtype=dtype, device=device))
            self.register_buffer(f"v{i}", _core.zeros(batch, heads, max_len, head_dim, dtype=dtype, device=device))
        self.register_buffer("pos", _core.zeros(batch, dtype=_core.int64, device=device))

    def positions(self, t):
        """(batch, t) int64: the positions of t new tokens of each row (pos + 0 .. t - 1)."""
        return self.pos.reshape(self.batch, 1) + _core.arange(t, dtype=_core.int64, device=self.pos.device)

    def update(self, layer, k, v):
        """Writes k, v (batch, heads, t, head_dim) at each row's next t positions of `layer`; returns
        (keys, values, mask): the layer's whole cache (batch, heads, max_len, head_dim) and the bool
        mask (batch, 1, t, max_len), True where query i of a row may attend (keys up to its position)."""
        if not isinstance(layer, int) or not 0 <= layer < self.layers:
            raise _core.IndexOutOfRangeError(f"KVCache.update: layer {layer!r} is out of range for {self.layers} layers")
        keys, values = getattr(self, f"k{layer}"), getattr(self, f"v{layer}")
        b, h, _, d = keys.shape
        for name, x in (("k", k), ("v", v)):
            if x.ndim != 4 or (x.shape[0], x.shape[1], x.shape[3]) != (b, h, d) or x.shape[2] > self.max_len:
                raise _core.ShapeError(f"KVCache.update: {name} {tuple(x.shape)} must be (batch {b}, heads {h}, t, "
                                       f"head_dim {d}) with t <= max_len {self.max_len}")
            if x.dtype != keys.dtype:
                raise _core.DTypeError(f"KVCache.update: {name} is {_dtype_name(x)}, the cache {_dtype_name(keys)}")
        t = k.shape[2]
        at = self.positions(t)  # (b, t)
        coord = _checked(at, self.max_len, "KVCache.update", 2).reshape(b, 1, t, 1)
        flat = _positions(tuple(keys.shape), 2, coord, (b, h, t, d))
        keys.put_(flat, k)
        values.put_(flat, v)
        keys_at = _core.arange(self.max_len, dtype=_core.int64, device=at.device).reshape(1, 1, 1, self.max_len)
        return keys, values, keys_at <= at.reshape(b, 1, t, 1)

    def attend(self, layer, q, k, v):
        """update(layer, k, v), then scaled dot-product attention of q (batch, heads, t, head_dim)
        over the layer's cache: (batch, heads, t, head_dim). One new token (t = 1) runs the one-query
        kernel, which reads only the keys up to each row's position (the mask, made on the device)."""
        keys, values, mask = self.update(layer, k, v)
        return _core.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask)

    def advance(self, t=1):
        """Moves every row's position on by t (an int, or a (batch,) int64 tensor), in place."""
        self.pos.add_(t)
        return self

    def reset(self, lengths=None):
        """Sets each row's position to lengths (a (batch,) int64 tensor), or to 0; the cached values
        past a row's position are ignored by attend and overwritten by later writes."""
        if lengths is None:
            self.pos.zero_()
        else:
            self.pos.copy_(lengths)
        return self

    def extra_repr(self):
        k = self.k0
        return (f"layers={self.layers}, batch={self.batch}, heads={self.heads}, max_len={self.max_len}, "
                f"head_dim={self.head_dim}, dtype={k.dtype}, device={k.device}")
