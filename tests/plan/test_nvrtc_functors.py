"""Every elementwise functor of the op table compiles as NVRTC source, in float32 and float64.

A CUDA plan compiles its fused elementwise runs with NVRTC from the text of functors.h behind a
small prelude (plan/cuda_fusion.cpp); a functor that uses something the prelude lacks makes every
fused run of every CUDA plan fall back to unfused launches. NVRTC compiles without a GPU, so this
checks the whole table wherever the toolkit's NVRTC is found (the CUDA configuration in CI).
"""
import sys
from pathlib import Path

import pytest

import flowgrad as fg
from flowgrad import nn

sys.path.insert(0, str(Path(__file__).parents[1] / "ops"))
from reference import BINARY, UNARY  # noqa: E402

NVRTC, NVRTC_MISSING = fg._core.plan.nvrtc_available()
needs_nvrtc = pytest.mark.skipif(not NVRTC, reason=f"NVRTC is not available here: {NVRTC_MISSING}")


class EveryFunctor(nn.Module):
    """One long elementwise chain through every unary and binary function of the table, whose
    backward adds the activation-gradient functors: the plan fuses them into runs."""

    def __init__(self, dtype):
        super().__init__()
        self.scale = nn.Parameter(fg.full((64,), 0.5, dtype=dtype))

    def forward(self, x):
        y = x * self.scale
        for name in sorted(UNARY):
            y = UNARY[name][0](y) * 0.5 + 0.25  # keeps the next function's input finite
        for name in sorted(BINARY):
            y = BINARY[name][0](y, x.abs() + 1.0)
        for activation in (fg.gelu, lambda v: fg.gelu(v, approximate="tanh"), fg.relu, fg.tanh, fg.sigmoid, fg.silu):
            y = activation(y) + y
        return y.sum()


@needs_nvrtc
@pytest.mark.parametrize("dtype", [fg.float32, fg.float64])
def test_every_fused_run_compiles_with_nvrtc(dtype):
    model = EveryFunctor(dtype)
    step = fg.compile(model, example_inputs=(fg.randn(300, 64).to(dtype),))
    rows = step.plan.ir()
    runs = sorted({row["run"] for row in rows if row["run"] is not None})
    fused_ops = {row["op"] for row in rows if row["run"] is not None}
    missing = (set(UNARY) | set(BINARY)) - fused_ops
    assert not missing, f"not fused, so not checked: {sorted(missing)}"
    assert {"gelu_backward", "tanh_backward", "sigmoid_backward"} <= fused_ops, sorted(fused_ops)
    for run in runs:
        name, source = step.plan.fused_cuda_source(run)
        target, image = fg._core.plan.compile_fused(source, name, 80)
        assert target == "CUBIN for sm_80" and image[:4] == b"\x7fELF", (name, target)
