"""fg.compile traces the step on shape-only tensors: no kernel runs for values computed from the
step's inputs, no in-place write (optimizer update, running statistics) is made, the RNG is left as
it was, and reading a value that does not exist yet raises instead of crashing."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def values(tensors):
    return [t.detach().cpu().numpy().copy() for t in tensors]


def batch(device, rng, rows=6):
    x = fg.tensor(rng.standard_normal((rows, 5)).astype(np.float32), device=device)
    y = fg.tensor(rng.integers(0, 3, rows), device=device)
    return x, y


def test_compiling_a_step_without_constants_calls_no_kernel(device):
    rng = np.random.default_rng(0)
    x, y = (fg.tensor(rng.standard_normal((6, 5)).astype(np.float32), device=device) for _ in range(2))
    before = fg._core.plan.kernel_calls()
    step = fg.compile(lambda a, b: ((a - b) * (a - b)).sum(), example_inputs=(x, y))
    assert fg._core.plan.kernel_calls() == before
    np.testing.assert_allclose(step(x, y).item(), ((x.numpy() - y.numpy()) ** 2).sum(), rtol=1e-5)


def test_compiling_a_training_step_runs_only_its_constants(device):
    """Kernels run while tracing only for constants (GELU's coefficients, the loss's seed): each
    one folds, or is a repeat of one that does."""
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3)).to(device)
    opt = fg.optim.AdamW(model.parameters(), lr=0.01)
    opt.plan_state()  # the optimizer's zero state is made before the trace, as an eager first step would
    x, y = batch(device, np.random.default_rng(0))
    before = fg._core.plan.kernel_calls()
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(x, y))
    ran = fg._core.plan.kernel_calls() - before
    assert 0 < ran <= step.stats["constants_folded"] + step.stats["common_eliminated"] < step.stats["traced"] // 3


def test_the_kernel_counter_counts_eager_ops(device):
    """The counter the tests above read moves for ops that run (so they can fail)."""
    x = fg.ones((2, 3), device=device)
    before = fg._core.plan.kernel_calls()
    (x * x + x).sum()
    assert fg._core.plan.kernel_calls() - before == 3


def test_compile_leaves_parameters_state_and_buffers_alone_and_the_first_step_updates(device):
    fg.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)).to(device)
    twin = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)).to(device)
    twin.load_state_dict(model.state_dict())
    opt = fg.optim.AdamW(model.parameters(), lr=0.05)
    eager_opt = fg.optim.AdamW(twin.parameters(), lr=0.05)
    x, y = batch(device, np.random.default_rng(1))
    state = list(model.state_dict().values())
    before = values(state)
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(x, y))
    for old, new in zip(before, values(state)):
        np.testing.assert_array_equal(old, new)
    assert all(np.all(s == 0) for s in values(t for t in opt.plan_state()[0] if t.numel() > 1))
    loss = step(x, y)
    eager_opt.zero_grad()
    eager = F.cross_entropy(twin(x), y)
    eager.backward()
    eager_opt.step()
    np.testing.assert_allclose(loss.item(), eager.item(), rtol=1e-6)
    for got, want in zip(values(model.state_dict().values()), values(twin.state_dict().values())):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_compile_leaves_the_rng_as_it_was_and_the_first_step_draws_as_eager_would(device):
    def make():
        fg.manual_seed(3)
        return nn.Sequential(nn.Linear(5, 16), nn.Dropout(0.5), nn.Linear(16, 3)).to(device)
    x, y = batch(device, np.random.default_rng(3))
    model, twin = make(), make()
    fg.manual_seed(7)
    state = fg.get_rng_state()
    step = fg.compile(model, F.cross_entropy, None, example_inputs=(x, y))
    assert fg.get_rng_state() == state
    compiled = step(x, y).item()
    fg.manual_seed(7)
    eager = F.cross_entropy(twin(x), y).item()
    np.testing.assert_allclose(compiled, eager, rtol=1e-6)


class ReadsOnHost(nn.Module):
    def __init__(self, read):
        super().__init__()
        self.fc, self.read = nn.Linear(5, 3), read

    def forward(self, x):
        h = self.fc(x)
        self.read(h)
        return h


@pytest.mark.parametrize("read, what", [(lambda h: h.sum().item(), "item"), (lambda h: float(h.sum()), "item"),
                                        (lambda h: h.numpy(), "numpy"), (lambda h: h.tolist(), "numpy"),
                                        (lambda h: repr(h), "numpy")])
def test_a_host_read_while_tracing_raises_naming_the_read(read, what):
    x, y = batch("cpu", np.random.default_rng(4))
    with pytest.raises(fg.InvalidArgumentError, match=r"compile: the step reads a computed value on the host \(" + what):
        fg.compile(ReadsOnHost(read), F.cross_entropy, None, example_inputs=(x, y))


class Keeps(nn.Module):
    """Keeps a traced value past the trace (a mistake a user can make)."""

    def __init__(self):
        super().__init__()
        self.fc, self.kept = nn.Linear(5, 3), None

    def forward(self, x):
        self.kept = self.fc(x)
        return self.kept


def test_a_traced_value_kept_past_the_trace_raises_when_read():
    model = Keeps()
    x, y = batch("cpu", np.random.default_rng(5))
    fg.compile(model, F.cross_entropy, None, example_inputs=(x, y))
    with pytest.raises(fg.InvalidArgumentError, match=r"has no data while fg.compile traces the step"):
        model.kept.numpy()
    with pytest.raises(fg.InvalidArgumentError, match=r"add: input 0 \(float32 \(6, 3\) on cpu\) is a shape-only "
                                                      r"value from fg.compile's trace and has no data"):
        model.kept + 1


class Masked(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.fc, self.how = nn.Linear(5, 3), how

    def forward(self, x):
        h = self.fc(x)
        return self.how(h)


@pytest.mark.parametrize("how", [lambda h: fg.nonzero(h > 0).float().sum() + h.sum(),
                                 lambda h: h[h > 0].sum()])
def test_value_dependent_shapes_raise_naming_the_op_while_tracing(device, how):
    x = fg.tensor(np.random.default_rng(6).standard_normal((4, 5)).astype(np.float32), device=device)
    with pytest.raises(fg.InvalidArgumentError, match=r"compile: 'nonzero' has an output shape that depends on its "
                                                      r"input values"):
        fg.compile(Masked(how), None, None, example_inputs=(x,))


def test_constants_made_inside_the_step_still_fold_with_their_values():
    """A causal mask built from fg.arange inside forward runs for real while tracing and folds."""
    class Masks(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            rows = fg.arange(4)
            mask = (rows.reshape(4, 1) >= rows.reshape(1, 4)).float() * 2.0
            return (self.fc(x) * mask).sum()
    model = Masks()
    x = fg.tensor(np.random.default_rng(7).standard_normal((4, 4)).astype(np.float32))
    step = fg.compile(model, None, None, example_inputs=(x,))
    assert step.stats["constants_folded"] >= 3
    want = (model.fc(x) * (np.tril(np.ones((4, 4), np.float32)) * 2.0)).sum().item()
    np.testing.assert_allclose(step(x).item(), want, rtol=1e-6)


def test_eager_ops_compute_again_after_a_trace_that_raised():
    x, y = batch("cpu", np.random.default_rng(8))
    with pytest.raises(fg.InvalidArgumentError, match=r"reads a computed value on the host"):
        fg.compile(ReadsOnHost(lambda h: h.sum().item()), F.cross_entropy, None, example_inputs=(x, y))
    np.testing.assert_array_equal((x + x).numpy(), 2 * x.numpy())


def test_compile_reports_where_its_time_went():
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    x, y = batch("cpu", np.random.default_rng(9))
    step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(x, y))
    stages = [name for name, _ in step.plan.pass_ms()]
    assert stages == [name for name, _, _ in step.plan.passes()] + ["memory", "bind"]
    assert all(ms >= 0 for _, ms in step.plan.pass_ms())
    assert set(step.compile_seconds) == {"trace", "plan"} and min(step.compile_seconds.values()) > 0
