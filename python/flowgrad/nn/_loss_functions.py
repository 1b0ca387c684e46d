"""Loss functions with PyTorch's signatures. The plain cases run the fused C++ losses; class
weights, pos_weight and BCE on probabilities are composed from ops here (gather, index_select,
softplus), so they differentiate, trace into compiled steps and run on every device."""
from .. import _core

_f = _core.functional
_REDUCTIONS = ("mean", "sum", "none")


def legacy_reduction(size_average, reduce, reduction, op):
    """PyTorch's reduction from the deprecated size_average / reduce flags when either is given
    (reduce=False: 'none'; size_average=False: 'sum'; else 'mean'), otherwise `reduction`."""
    if size_average is not None or reduce is not None:
        if reduce is not None and not reduce:
            return "none"
        return "sum" if size_average is not None and not size_average else "mean"
    if reduction not in _REDUCTIONS:
        raise _core.InvalidArgumentError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return reduction


def _reduce(loss, reduction):
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def _same_shape(input, target, op):
    if tuple(input.shape) != tuple(target.shape):
        raise _core.ShapeError(f"{op}: target {tuple(target.shape)} must have input's shape {tuple(input.shape)}")


def _class_weight(weight, classes, op):
    if weight is not None and tuple(weight.shape) != (classes,):
        raise _core.ShapeError(f"{op}: weight must have one entry per class, ({classes},), got {tuple(weight.shape)}")
    return weight


def _weighted_nll(logp, target, weight, ignore_index, op):
    """Per-element -weight[t] * logp[t] (0 where t == ignore_index), shaped like target, and the
    weights taken (0 where ignored): their sum divides a weighted mean, as in PyTorch."""
    classes = logp.shape[1 if logp.dim() >= 2 else 0]
    rows = logp.reshape(1, classes) if logp.dim() == 1 else \
        logp.permute(0, *range(2, logp.dim()), 1).reshape(-1, classes)
    expected = () if logp.dim() == 1 else tuple(logp.shape[:1]) + tuple(logp.shape[2:])
    if target.dtype.is_floating_point or tuple(target.shape) != expected:
        raise _core.ShapeError(f"{op}: target {tuple(target.shape)} {target.dtype!r} does not match input "
                               f"{tuple(logp.shape)}: expected class indices of shape (N, d1, ...)")
    flat = target.reshape(-1)
    valid = flat != ignore_index
    safe = _core.where(valid, flat, _core.zeros((), dtype=flat.dtype, device=flat.device))
    picked = _core.gather(rows, 1, safe.unsqueeze(1)).squeeze(1)
    taken = valid.to(dtype=logp.dtype)
    if weight is not None:
        taken = _core.index_select(weight, 0, safe) * taken
    return (-(picked * taken)).reshape(*target.shape), taken


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log-likelihood of log-probabilities input (N, C, d1, ...) or (C,) at class indices
    target: -weight[t] * input[t] per element, 0 where t == ignore_index; 'mean' divides the sum by
    the total weight of the targets not ignored (PyTorch's)."""
    reduction = legacy_reduction(size_average, reduce, reduction, "nll_loss")
    if weight is None:
        return _f.nll_loss(input, target, ignore_index, reduction)
    _class_weight(weight, input.shape[1 if input.dim() >= 2 else 0], "nll_loss")
    loss, taken = _weighted_nll(input, target, weight, ignore_index, "nll_loss")
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / taken.sum()


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """Cross entropy of logits (N, C, d1, ...) or (C,) against class indices or class probabilities,
    PyTorch's: weight rescales each class; label_smoothing mixes the target with the uniform
    distribution; with class indices and a weight, 'mean' divides by the weight of the targets
    taken. Without a weight this is the fused cross_entropy op."""
    reduction = legacy_reduction(size_average, reduce, reduction, "cross_entropy")
    if weight is None:
        return _f.cross_entropy(input, target, ignore_index, label_smoothing, reduction)
    class_dim = 1 if input.dim() >= 2 else 0
    classes = input.shape[class_dim]
    _class_weight(weight, classes, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise _core.InvalidArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    logp = _f.log_softmax(input, class_dim)
    shape = [1] * input.dim()
    shape[class_dim] = classes
    weighted = logp * weight.reshape(*shape)
    if target.dtype.is_floating_point:  # probabilities: the mean is over the N * d1 * ... positions
        _same_shape(input, target, "cross_entropy")
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / classes
        return _reduce(-(weighted * target).sum(class_dim), reduction)
    loss, taken = _weighted_nll(logp, target, weight, ignore_index, "cross_entropy")
    if label_smoothing:
        smooth = -(weighted.sum(class_dim)) * (target != ignore_index).to(dtype=logp.dtype)
        loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / taken.sum()


def _log_clamped(p):
    """log(p) clamped to >= -100 as PyTorch's BCE does, log taken of 1 where p <= 0 so the
    gradient there is 0, not NaN."""
    positive = p > 0
    safe = _core.where(positive, p, _core.ones((), dtype=p.dtype, device=p.device))
    return _core.where(positive, _core.log(safe), _core.full((), -100.0, dtype=p.dtype, device=p.device)).clamp(min=-100)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-weight * (target * log(input) + (1 - target) * log(1 - input)) of probabilities input, each
    log clamped to >= -100 (PyTorch's); weight broadcasts to input."""
    reduction = legacy_reduction(size_average, reduce, reduction, "binary_cross_entropy")
    _same_shape(input, target, "binary_cross_entropy")
    loss = -(target * _log_clamped(input) + (1 - target) * _log_clamped(1 - input))
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """Sigmoid and binary cross entropy in one stable formula: (1 - target) * softplus(input) +
    pos_weight * target * softplus(-input), times weight; pos_weight (one per class, the last dim)
    weighs the positive term. Without weights this is the fused C++ loss."""
    reduction = legacy_reduction(size_average, reduce, reduction, "binary_cross_entropy_with_logits")
    _same_shape(input, target, "binary_cross_entropy_with_logits")
    if weight is None and pos_weight is None:
        return _f.binary_cross_entropy_with_logits(input, target, reduction)
    positive = target if pos_weight is None else target * pos_weight
    loss = (1 - target) * _core.softplus(input) + positive * _core.softplus(-input)
    return _reduce(loss if weight is None else loss * weight, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """(input - target)^2, reduced (the fused C++ loss)."""
    return _f.mse_loss(input, target, legacy_reduction(size_average, reduce, reduction, "mse_loss"))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """|input - target|, reduced (the fused C++ loss)."""
    return _f.l1_loss(input, target, legacy_reduction(size_average, reduce, reduction, "l1_loss"))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (huber_loss / beta); beta 0 is l1_loss."""
    reduction = legacy_reduction(size_average, reduce, reduction, "smooth_l1_loss")
    if beta < 0:
        raise _core.InvalidArgumentError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    if beta == 0:
        return _f.l1_loss(input, target, reduction)
    loss = _f.huber_loss(input, target, reduction, beta)
    return loss if beta == 1 else loss / beta
