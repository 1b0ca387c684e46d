"""One op stream: an eager step and its compiled plan run the same ops. Half widening (cast ->
op -> cast), mixed-dtype promotion (cast -> op) and in-place writes through a temporary (op ->
copy_) are ordinary op calls eagerly
(ops/decompose.h), so the trace holds them and the plan builder adds nothing of its own. With the
optional passes off, a plan is its trace less the view ops it folds into layouts."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

# The op table's View rows: a plan folds them into its buffers' layouts, so they are no instructions.
VIEWS = {"view", "permute", "expand", "slice"}
# Every optional pass (FLOWGRAD_PLAN_SKIP), so the plan keeps each traced call as it was recorded.
NO_PASSES = "cse,constant_folding,dead_code,transpose_folding,fuse_epilogues,fuse_add_norm,pair_gemms,fusion"


class Net(nn.Module):
    def __init__(self, dtype):
        super().__init__()
        fg.manual_seed(0)
        self.inner = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 6)).to(dtype)

    def forward(self, x):
        y = self.inner(x) * 1.0
        y[:, 1:].relu_()  # a strided in-place write, of a half tensor by an op without half kernels
        return F.softmax(y, -1)


@pytest.mark.parametrize("dtype", [fg.bfloat16, fg.float16])
def test_an_eager_half_forward_and_its_plan_run_the_same_ops(dtype, monkeypatch):
    monkeypatch.setenv("FLOWGRAD_PLAN_SKIP", NO_PASSES)
    model = Net(dtype)
    for p in model.parameters():  # nothing to train: a forward plan
        p.requires_grad = False
    x = fg.randn(5, 12).to(dtype)
    plan = fg.compile(model, example_inputs=(x,))
    with fg.no_grad(), fg._core.plan.OpLog() as log:
        want = model(x)
    eager = [op for op in log.ops if op not in VIEWS]
    planned = [r["op"] for r in plan._plan.ir()]
    assert planned == eager
    assert eager.count("cast") >= 4 and "copy_" in eager and "relu_" in eager
    np.testing.assert_array_equal(plan(x).float().numpy(), want.float().numpy())


def test_the_op_log_sees_the_rewrites_and_only_its_own_thread():
    x = fg.randn(4, 6).to(fg.bfloat16)
    t = fg.zeros(6, 4)
    with fg._core.plan.OpLog() as log:
        x.tanh()
        t.t().add_(fg.ones(4, 6))
    # tanh has no half kernel: widened; add_ on a transposed target: through a temporary
    assert log.ops == ["cast", "tanh", "cast", "permute", "full", "contiguous", "add_", "copy_"]
    np.testing.assert_array_equal(t.numpy(), np.ones((6, 4), np.float32))


class Step(nn.Module):
    """A half training step as mixed precision runs one: float32 parameters, autocast to `dtype`
    inside. A uint8 tensor added to the half input, a masked attention (an additive float32 mask)
    and a layer norm with float32 parameters on a half input are mixed-dtype calls that Promote and
    Widen turn into casts, in the forward, the backward and the update alike."""

    def __init__(self, dtype):
        super().__init__()
        fg.manual_seed(0)
        self.dtype = dtype
        self.proj = nn.Linear(8, 24)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x, pos, mask):
        with fg.autocast("cpu", dtype=self.dtype):
            h = x + pos  # half + uint8
            q, k, v = self.proj(h).chunk(3, -1)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.head(F.layer_norm(a, (8,), self.norm.weight, self.norm.bias))


@pytest.mark.parametrize("dtype", [fg.bfloat16, fg.float16])
def test_an_eager_half_training_step_and_its_plan_run_the_same_ops(dtype, monkeypatch):
    monkeypatch.setenv("FLOWGRAD_PLAN_SKIP", NO_PASSES)
    x = (fg.randn(2, 4, 8) * 0.5).to(dtype)
    pos = fg.tensor((np.arange(32).reshape(4, 8) % 3).astype(np.uint8))
    mask = fg.tensor(np.triu(np.full((4, 4), -1e4, np.float32), 1))
    y = fg.tensor(np.arange(8).reshape(2, 4) % 5)

    def loss_fn(out, target):
        return F.cross_entropy(out.float().reshape(-1, 5), target.reshape(-1))

    eager, compiled = Step(dtype), Step(dtype)
    opt_e = fg.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = fg.optim.SGD(compiled.parameters(), lr=0.1)
    for model, opt in ((eager, opt_e), (compiled, opt_c)):  # a first step makes the optimizer's tensors
        loss_fn(model(x, pos, mask), y).backward()
        opt.step()
        opt.zero_grad()
    step = fg.compile(compiled, loss_fn, opt_c, example_inputs=(x, pos, mask, y))
    with fg._core.plan.OpLog() as log:
        loss = loss_fn(eager(x, pos, mask), y)
        loss.backward()
        opt_e.step()
    eager_ops = [op for op in log.ops if op not in VIEWS]
    rows = step.ir()
    planned = [r["op"] for r in rows]
    assert planned == eager_ops
    for op in ("flash_attention", "flash_attention_backward", "layer_norm", "norm_backward", "sgd_update_multi"):
        assert op in eager_ops, op
    # Widen casts the half input, Promote the uint8 one: the add's kernel gets two float32 operands
    assert planned[:3] == ["cast", "cast", "add"] and rows[2]["dtype"] == "float32"
    # flash attention has half kernels on CUDA only: on the CPU its half call runs widened
    assert {r["dtype"] for r in rows if r["op"].startswith("flash_attention")} == {"float32"}
    assert step(x, pos, mask, y).item() == loss.item()
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy(), err_msg=name)
