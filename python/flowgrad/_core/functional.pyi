"""
Neural-network functions (fg.nn.functional).
"""
from __future__ import annotations
import flowgrad._core
import typing
__all__: list[str] = ['avg_pool2d', 'binary_cross_entropy_with_logits', 'conv2d', 'cross_entropy', 'dropout', 'embedding', 'fold', 'huber_loss', 'l1_loss', 'layer_norm', 'linear', 'log_softmax', 'max_pool2d', 'mse_loss', 'nll_loss', 'rms_norm', 'scaled_dot_product_attention', 'scaled_dot_product_attention_reference', 'softmax', 'unfold']
def avg_pool2d(input: flowgrad._core.Tensor, kernel_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex | None = None) -> flowgrad._core.Tensor:
    """
    2-D average pooling.
    """
def binary_cross_entropy_with_logits(input: flowgrad._core.Tensor, target: flowgrad._core.Tensor, reduction: str = 'mean') -> flowgrad._core.Tensor:
    """
    Sigmoid + binary cross entropy, stably.
    """
def conv2d(input: flowgrad._core.Tensor, weight: flowgrad._core.Tensor, bias: flowgrad._core.Tensor | None = None, stride: typing.SupportsInt | typing.SupportsIndex = 1, padding: typing.SupportsInt | typing.SupportsIndex = 0) -> flowgrad._core.Tensor:
    """
    2-D convolution (cross-correlation), NCHW.
    """
def cross_entropy(input: flowgrad._core.Tensor, target: flowgrad._core.Tensor, ignore_index: typing.SupportsInt | typing.SupportsIndex = -100, label_smoothing: typing.SupportsFloat | typing.SupportsIndex = 0.0, reduction: str = 'mean') -> flowgrad._core.Tensor:
    """
    Cross entropy of logits (N, C, ...) against class indices or probabilities.
    """
def dropout(input: flowgrad._core.Tensor, p: typing.SupportsFloat | typing.SupportsIndex = 0.5, training: bool = True) -> flowgrad._core.Tensor:
    """
    Zeroes entries with probability p and scales the rest by 1/(1-p) (Philox mask).
    """
def embedding(input: flowgrad._core.Tensor, weight: flowgrad._core.Tensor) -> flowgrad._core.Tensor:
    """
    Rows of weight at integer indices.
    """
def fold(input: flowgrad._core.Tensor, output_size: typing.Any, kernel_size: typing.Any, padding: typing.SupportsInt | typing.SupportsIndex = 0, stride: typing.SupportsInt | typing.SupportsIndex = 1) -> flowgrad._core.Tensor:
    """
    col2im: sums columns (N, C*kH*kW, L) back into images (N, C, H, W).
    """
def huber_loss(input: flowgrad._core.Tensor, target: flowgrad._core.Tensor, reduction: str = 'mean', delta: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> flowgrad._core.Tensor:
    """
    Quadratic below delta, linear above.
    """
def l1_loss(input: flowgrad._core.Tensor, target: flowgrad._core.Tensor, reduction: str = 'mean') -> flowgrad._core.Tensor:
    """
    Mean absolute error.
    """
def layer_norm(input: flowgrad._core.Tensor, normalized_shape: typing.Any, weight: flowgrad._core.Tensor | None = None, bias: flowgrad._core.Tensor | None = None, eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05) -> flowgrad._core.Tensor:
    """
    Layer normalisation over the trailing normalized_shape dims.
    """
def linear(input: flowgrad._core.Tensor, weight: flowgrad._core.Tensor, bias: flowgrad._core.Tensor | None = None) -> flowgrad._core.Tensor:
    """
    x @ weight.T + bias.
    """
def log_softmax(input: flowgrad._core.Tensor, dim: typing.SupportsInt | typing.SupportsIndex) -> flowgrad._core.Tensor:
    """
    log(softmax) along dim, computed stably.
    """
def max_pool2d(input: flowgrad._core.Tensor, kernel_size: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex | None = None) -> flowgrad._core.Tensor:
    """
    2-D max pooling.
    """
def mse_loss(input: flowgrad._core.Tensor, target: flowgrad._core.Tensor, reduction: str = 'mean') -> flowgrad._core.Tensor:
    """
    Mean squared error.
    """
def nll_loss(input: flowgrad._core.Tensor, target: flowgrad._core.Tensor, ignore_index: typing.SupportsInt | typing.SupportsIndex = -100, reduction: str = 'mean') -> flowgrad._core.Tensor:
    """
    Negative log-likelihood of log-probabilities (N, C, ...).
    """
def rms_norm(input: flowgrad._core.Tensor, normalized_shape: typing.Any, weight: flowgrad._core.Tensor | None = None, eps: typing.SupportsFloat | typing.SupportsIndex = 1e-06) -> flowgrad._core.Tensor:
    """
    RMS normalisation over the trailing normalized_shape dims.
    """
def scaled_dot_product_attention(query: flowgrad._core.Tensor, key: flowgrad._core.Tensor, value: flowgrad._core.Tensor, attn_mask: flowgrad._core.Tensor | None = None, is_causal: bool = False) -> flowgrad._core.Tensor:
    """
    softmax(q k^T / sqrt(E) + mask) v over q (..., L, E), k (..., S, E), v (..., S, Ev).
    
    attn_mask broadcasts to (..., L, S): bool marks the positions that take part, a float mask is added to the scores; is_causal masks key j > query i. A query row with every key masked gives NaN. Runs the fused flash_attention op (online softmax, no (L, S) scores stored; on cuda float32/bfloat16/float16 with head dims up to 128) when q, k, v share their batch dims, S > 0 and a float mask does not require grad; otherwise the composite scaled_dot_product_attention_reference. Raises ShapeError (ranks, E or S differ), DTypeError (q, k, v not one floating dtype; mask neither bool nor floating), DeviceError (devices differ).
    """
def scaled_dot_product_attention_reference(query: flowgrad._core.Tensor, key: flowgrad._core.Tensor, value: flowgrad._core.Tensor, attn_mask: flowgrad._core.Tensor | None = None, is_causal: bool = False) -> flowgrad._core.Tensor:
    """
    scaled_dot_product_attention as matmul + softmax (materialises the (..., L, S) scores): the reference the fused kernels are tested against; same arguments and errors.
    """
def softmax(input: flowgrad._core.Tensor, dim: typing.SupportsInt | typing.SupportsIndex) -> flowgrad._core.Tensor:
    """
    Softmax along dim (max-subtracted).
    """
def unfold(input: flowgrad._core.Tensor, kernel_size: typing.Any, padding: typing.SupportsInt | typing.SupportsIndex = 0, stride: typing.SupportsInt | typing.SupportsIndex = 1) -> flowgrad._core.Tensor:
    """
    im2col: sliding (kH, kW) patches of (N, C, H, W) as columns (N, C*kH*kW, L).
    """
