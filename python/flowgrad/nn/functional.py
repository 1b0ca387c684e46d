"""fg.nn.functional: activations, normalisation, attention, convolution and losses (all C++)."""
from .. import _core

_f = _core.functional

relu = _core.relu
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
conv2d = _f.conv2d
unfold = _f.unfold
fold = _f.fold
max_pool2d = _f.max_pool2d
avg_pool2d = _f.avg_pool2d
scaled_dot_product_attention = _f.scaled_dot_product_attention
scaled_dot_product_attention_reference = _f.scaled_dot_product_attention_reference
scaled_dot_product_attention_packed = _f.scaled_dot_product_attention_packed
cross_entropy = _f.cross_entropy
nll_loss = _f.nll_loss
mse_loss = _f.mse_loss
l1_loss = _f.l1_loss
huber_loss = _f.huber_loss
binary_cross_entropy_with_logits = _f.binary_cross_entropy_with_logits
pad = _core.pad
one_hot = _core.one_hot

__all__ = [n for n in dir() if not n.startswith("_")]
