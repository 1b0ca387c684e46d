"""Compiled steps over float16/bfloat16 tensors. An op whose kernels compute half types through
float32 (no kHalfNative flag) runs as cast -> op -> cast ops in eager code (ops/decompose.h), so
the trace holds the casts, plans equal eager steps bit for bit and the memory planner sees the
widened buffers; an in-place write of a half tensor runs as op -> copy_ on a float32 temporary."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

HALF = [fg.bfloat16, fg.float16]


def mlp(dtype, device):
    fg.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 5)).to(device).to(dtype)


def bits(t):
    return t.float().cpu().numpy()


@pytest.mark.parametrize("dtype", HALF)
def test_half_model_loss_and_gradients_equal_eager(dtype, device):
    x = fg.randn(8, 12).to(device).to(dtype)
    y = fg.tensor(np.arange(8) % 5).to(device)
    eager, compiled = mlp(dtype, device), mlp(dtype, device)
    step = fg.compile(compiled, F.cross_entropy, None, example_inputs=(x, y))
    loss = F.cross_entropy(eager(x), y)
    loss.backward()
    for _ in range(2):  # the second call replays the plan (on CUDA: the captured graph)
        got = step(x, y)
        assert got.dtype == dtype
        np.testing.assert_array_equal(bits(got), bits(loss))
        for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
            assert q.grad.dtype == dtype, name
            np.testing.assert_array_equal(bits(q.grad), bits(p.grad), err_msg=name)


@pytest.mark.parametrize("dtype", HALF)
def test_widening_ops_get_cast_instructions(dtype):
    x = fg.randn(4, 12).to(dtype)
    step = fg.compile(mlp(dtype, "cpu"), F.cross_entropy, None, example_inputs=(x, fg.tensor(np.arange(4) % 5)))
    rows = step._plan.ir()
    ops = [r["op"] for r in rows]
    gelu = ops.index("gelu")
    assert ops[gelu - 1] == "cast" and ops[gelu + 1] == "cast"  # widen its input, narrow its output
    assert rows[gelu]["dtype"] == "float32" and rows[gelu + 1]["dtype"] == str(dtype).split(".")[-1]
    # linear has half kernels on CUDA only (kHalfWidenedOnCpu): on the CPU x, weight and bias widen too
    assert ops[:5] == ["cast", "cast", "cast", "linear", "cast"]
    assert rows[3]["dtype"] == "float32" and rows[4]["dtype"] == str(dtype).split(".")[-1]


def test_autocast_step_with_adamw_equals_eager(device):
    """fp32 parameters, bfloat16 autocast inside the model, AdamW: three compiled steps equal
    three eager ones (the autocast casts and the plan's widening casts alike)."""
    class Auto(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            with fg.autocast(device.split(":")[0], dtype=fg.bfloat16):
                return self.inner(x)

    def loss_fn(out, target):
        return F.cross_entropy(out.float(), target)

    x = fg.randn(8, 12).to(device)
    y = fg.tensor(np.arange(8) % 5).to(device)
    eager, compiled = Auto(mlp(fg.float32, device)), Auto(mlp(fg.float32, device))
    opt_e = fg.optim.AdamW(eager.parameters(), lr=0.01)
    opt_c = fg.optim.AdamW(compiled.parameters(), lr=0.01)
    step = fg.compile(compiled, loss_fn, opt_c, example_inputs=(x, y))
    for _ in range(3):
        opt_e.zero_grad()
        loss = loss_fn(eager(x), y)
        loss.backward()
        opt_e.step()
        assert step(x, y).item() == loss.item()
    for p, q in zip(eager.parameters(), compiled.parameters()):
        np.testing.assert_array_equal(q.cpu().numpy(), p.cpu().numpy())


@pytest.mark.parametrize("dtype", HALF)
def test_half_target_written_in_place_compiles_and_equals_eager(dtype, device):
    """relu_ and neg_ have no half kernels: each write runs as cast -> op -> copy_ in eager code
    and in the plan, the strided half write (a column slice) too."""
    class Scale(nn.Module):
        def forward(self, x):
            y = x * 1.5
            y.relu_()
            y[:, 1:].neg_()
            return y

    loss = lambda out, target: (out.float() - target).sum()  # noqa: E731
    x = (fg.randn(4, 3) * 3).to(device).to(dtype)
    target = fg.zeros(4, 3).to(device)
    step = fg.compile(Scale(), loss, None, example_inputs=(x, target))
    expected = loss(Scale()(x), target)
    want = np.maximum(x.float().cpu().numpy() * 1.5, 0)
    assert step(x, target).item() == expected.item()
    assert abs(expected.item() - (want[:, :1].sum() - want[:, 1:].sum())) < 0.1
    ops = [r["op"] for r in step.ir()]
    assert "relu_" in ops and "neg_" in ops and ops.count("copy_") == 2
