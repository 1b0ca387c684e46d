"""Loss modules over fg.nn.functional."""
from .._core import Module
from . import functional


class CrossEntropyLoss(Module):
    """Cross entropy of logits (N, C, ...) or (C,) against class indices (the fused
    cross_entropy op) or class probabilities, as fg.nn.functional.cross_entropy."""

    def __init__(self, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
        super().__init__()
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.reduction = reduction

    def forward(self, input, target):
        return functional.cross_entropy(input, target, ignore_index=self.ignore_index,
                                        label_smoothing=self.label_smoothing, reduction=self.reduction)
