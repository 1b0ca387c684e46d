"""Each FlowBuilder construct against a hand-computed NumPy result, plus float64 gradient checks
through gate, loop, map and switch."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


class Lin(nn.Module):
    """x @ W + b in float64 with known NumPy weights."""

    def __init__(self, i, o, seed):
        super().__init__()
        r = np.random.default_rng(seed)
        self.w_np, self.b_np = r.normal(size=(i, o)) / np.sqrt(i), r.normal(size=o) * 0.1
        self.w = nn.Parameter(fg.tensor(self.w_np))
        self.b = nn.Parameter(fg.tensor(self.b_np))

    def forward(self, x, *refs):
        y = x @ self.w + self.b
        for r in refs:
            y = y + r
        return y

    def np(self, x, *refs):
        return x @ self.w_np + self.b_np + sum(refs, np.zeros(1))


class Scale(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.k


class Halt(nn.Module):
    """Stops once the mean passes a threshold (like ThresholdHalt), counting its calls."""

    def __init__(self, threshold):
        super().__init__()
        self.threshold, self.calls = threshold, 0

    def forward(self, x):
        self.calls += 1
        return x.mean() - self.threshold


def f64(a):
    return fg.tensor(np.asarray(a, dtype=np.float64))


@pytest.fixture
def x_np():
    return np.random.default_rng(0).normal(size=(5, 4))


def test_through_and_tag(x_np):
    a, b = Lin(4, 6, 1), Lin(6, 3, 2)
    g = fg.FlowBuilder(a).tag("hidden").through(b).build()
    out = g(f64(x_np))
    np.testing.assert_allclose(out.numpy(), b.np(a.np(x_np)), rtol=1e-12)
    np.testing.assert_allclose(g.tagged("hidden").numpy(), a.np(x_np), rtol=1e-12)
    assert g.tags == ["hidden"]


def test_flow_is_flowbuilder_and_empty_start(x_np):
    assert isinstance(fg.flow(Lin(4, 4, 0)), fg.FlowBuilder)
    g = fg.FlowBuilder().build()  # identity
    np.testing.assert_array_equal(g(f64(x_np)).numpy(), x_np)


def test_split_merge_mean_add_cat(x_np):
    a, b, c = Lin(4, 3, 1), Lin(4, 3, 2), Lin(4, 3, 3)
    for merge, ref in [(fg.flow.Mean(), lambda u, v, w: (u + v + w) / 3),
                       (fg.flow.Add(), lambda u, v, w: u + v + w),
                       (fg.flow.Cat(1), lambda u, v, w: np.concatenate([u, v, w], 1))]:
        g = fg.FlowBuilder().split(a, b, c).tag_group("head").merge(merge).build()
        np.testing.assert_allclose(g(f64(x_np)).numpy(), ref(a.np(x_np), b.np(x_np), c.np(x_np)), rtol=1e-12)
        assert g.tag_group("head") == ["head_0", "head_1", "head_2"]
        np.testing.assert_allclose(g.tagged("head_1").numpy(), b.np(x_np), rtol=1e-12)


def test_also_is_residual(x_np):
    a = Lin(4, 4, 1)
    g = fg.flow(nn.Identity()).also(a).build()
    np.testing.assert_allclose(g(f64(x_np)).numpy(), x_np + a.np(x_np), rtol=1e-12)


def test_using_backward_reference_is_extra_input(x_np):
    a, b = Lin(4, 4, 1), Lin(4, 4, 2)
    g = fg.flow(a).tag("h").through(b).using("h").build()
    h = a.np(x_np)
    np.testing.assert_allclose(g(f64(x_np)).numpy(), b.np(h, h), rtol=1e-12)


def test_input_declares_extra_graph_inputs(x_np):
    ctx = np.random.default_rng(3).normal(size=(5, 4))
    bias = np.random.default_rng(4).normal(size=(5, 4))
    a = Lin(4, 4, 1)
    g = fg.flow(a).input("context").input("bias").through(fg.flow.Add()).using("context", "bias").build()
    assert g.input_names == ["input", "context", "bias"]
    out = g(f64(x_np), f64(ctx), f64(bias))
    np.testing.assert_allclose(out.numpy(), a.np(x_np) + ctx + bias, rtol=1e-12)
    with pytest.raises(fg.GraphError, match=r"expected 3 input\(s\) \(input, context, bias\), got 1"):
        g(f64(x_np))


def test_gate_soft_routing(x_np):
    router, e1, e2 = fg.flow.SoftmaxRouter(4, 2), Lin(4, 3, 1), Lin(4, 3, 2)
    g = fg.flow(nn.Identity()).gate(router, e1, e2).build()
    out = g(fg.tensor(x_np, dtype=fg.float32)).numpy()
    w, b = router.proj.weight.numpy(), router.proj.bias.numpy()
    logits = x_np @ w.T + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ref = p[:, :1] * e1.np(x_np) + p[:, 1:] * e2.np(x_np)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_gate_sigmoid_router_and_using_goes_to_router(x_np):
    router = fg.flow.SigmoidRouter(4, 2)
    g = fg.flow(nn.Identity()).tag("x").gate(router, Scale(1.0), Scale(3.0)).build()
    out = g(fg.tensor(x_np, dtype=fg.float32)).numpy()
    s = 1 / (1 + np.exp(-(x_np @ router.proj.weight.numpy().T + router.proj.bias.numpy())))
    np.testing.assert_allclose(out, s[:, :1] * x_np + s[:, 1:] * 3 * x_np, rtol=1e-4, atol=1e-5)


def test_gate_router_width_mismatch_names_node(x_np):
    g = fg.flow(nn.Identity()).gate(fg.flow.SoftmaxRouter(4, 3), Scale(1.0), Scale(2.0)).build()
    with pytest.raises(fg.ShapeError, match=r"node 2 \(gate\(SoftmaxRouter; 2 experts\)\): router weights must have shape \[\.\.\., 2\], got \(5, 3\)"):
        g(fg.tensor(x_np, dtype=fg.float32))


def test_switch_runs_only_the_chosen_branch(x_np):
    b0, b1 = Scale(2.0), Scale(5.0)
    g = fg.flow(nn.Identity()).switch(fg.flow.FixedSelector(1), b0, b1).build()
    np.testing.assert_allclose(g(f64(x_np)).numpy(), 5 * x_np)
    assert (b0.calls, b1.calls) == (0, 1)
    bad = fg.flow(nn.Identity()).switch(fg.flow.FixedSelector(2), b0, b1).build()
    with pytest.raises(fg.IndexOutOfRangeError, match="chose branch 2 but there are 2 branches"):
        bad(f64(x_np))


def test_argmax_selector_picks_highest_mean_score(x_np):
    sel = fg.flow.ArgmaxSelector(4, 3)
    x = fg.tensor(x_np, dtype=fg.float32)
    scores = x_np @ sel.proj.weight.numpy().T + sel.proj.bias.numpy()
    choice = int(np.argmax(scores.mean(0)))
    assert int(sel(x)) == choice
    branches = [Scale(float(k + 1)) for k in range(3)]
    g = fg.flow(nn.Identity()).switch(sel, *branches).build()
    np.testing.assert_allclose(g(x).numpy(), (choice + 1) * x_np, rtol=1e-6)
    assert [b.calls for b in branches] == [int(k == choice) for k in range(3)]


def test_switch_gradient_flows_through_chosen_branch(x_np):
    a, b = Lin(4, 4, 1), Lin(4, 4, 2)
    g = fg.flow(nn.Identity()).switch(fg.flow.FixedSelector(0), a, b).build()
    g(f64(x_np)).sum().backward()
    assert a.w.grad is not None and b.w.grad is None


def test_loop_for(x_np):
    body = Lin(4, 4, 1)
    g = fg.flow(nn.Identity()).loop(body).for_(3).tag("loop").build()
    ref = x_np
    for _ in range(3):
        ref = body.np(ref)
    np.testing.assert_allclose(g(f64(x_np)).numpy(), ref, rtol=1e-12)
    traces = g.traces("loop")
    assert len(traces) == 3
    np.testing.assert_allclose(traces[0].numpy(), body.np(x_np), rtol=1e-12)


def test_loop_while_may_run_zero_times_until_at_least_once():
    x = f64(np.full((2, 2), 5.0))
    body = Scale(2.0)
    g = fg.flow(nn.Identity()).loop(body).while_(Halt(1.0), 10).tag("w").build()
    np.testing.assert_array_equal(g(x).numpy(), x.numpy())  # mean 5 > 1: halts before the first
    assert body.calls == 0 and g.traces("w") == []
    g = fg.flow(nn.Identity()).loop(body).until(Halt(1.0), 10).tag("u").build()
    np.testing.assert_array_equal(g(x).numpy(), 2 * x.numpy())
    assert body.calls == 1


def test_loop_iteration_counts():
    x = f64(np.ones((2, 2)))
    halt = Halt(20.0)
    g = fg.flow(nn.Identity()).loop(Scale(2.0)).while_(halt, 100).tag("w").build()
    # 1 -> 2 -> 4 -> 8 -> 16 -> 32: the mean passes 20 after 5 doublings
    np.testing.assert_array_equal(g(x).numpy(), np.full((2, 2), 32.0))
    assert len(g.traces("w")) == 5 and halt.calls == 6  # checked before each iteration and once after
    g = fg.flow(nn.Identity()).loop(Scale(2.0)).until(Halt(20.0), 100).tag("u").build()
    assert len((g(x), g.traces("u"))[1]) == 5
    g = fg.flow(nn.Identity()).loop(Scale(2.0)).until(Halt(1e9), 7).tag("cap").build()
    g(x)
    assert len(g.traces("cap")) == 7  # max_iter caps a loop that never halts


def test_threshold_and_learned_halt():
    h = fg.flow.ThresholdHalt(0.5)
    assert float(h(fg.tensor([1.0, 2.0]))) == pytest.approx(1.0)
    lh = fg.flow.LearnedHalt(3)
    x = np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32)
    ref = (x @ lh.proj.weight.numpy().T + lh.proj.bias.numpy()).mean()
    assert float(lh(fg.tensor(x))) == pytest.approx(float(ref), rel=1e-5)
    g = fg.flow(nn.Identity()).loop(nn.Linear(3, 3)).until(lh, 4).build()
    assert g(fg.tensor(x)).shape == (4, 3)


def test_map_modes_agree(x_np):
    body = Lin(4, 3, 5)
    each = fg.flow(nn.Identity()).map(body).each().build()
    batched = fg.flow(nn.Identity()).map(body).batched().each().build()
    over = fg.flow(nn.Identity()).tag("src").through(Scale(0.0)).map(body).over("src").build()
    ref = body.np(x_np)
    for g in (each, batched, over):
        np.testing.assert_allclose(g(f64(x_np)).numpy(), ref, rtol=1e-12)


def test_map_slices_and_batched_slices():
    x_np = np.random.default_rng(1).normal(size=(3, 6))
    body = Lin(2, 5, 7)
    g = fg.flow(nn.Identity()).map(body).slices(3).build()
    ref = np.concatenate([body.np(x_np[:, 2 * i:2 * i + 2]) for i in range(3)], 1)
    np.testing.assert_allclose(g(f64(x_np)).numpy(), ref, rtol=1e-12)
    gb = fg.flow(nn.Identity()).map(body).batched().slices(3).build()
    np.testing.assert_allclose(gb(f64(x_np)).numpy(), ref, rtol=1e-12)
    with pytest.raises(fg.ShapeError, match=r"the last dim \(6\) of shape \(3, 6\) does not split into 4 equal slices"):
        fg.flow(nn.Identity()).map(body).slices(4).build()(f64(x_np))


def test_map_over_empty_dim_raises():
    g = fg.flow(nn.Identity()).map(Scale(1.0)).each().build()
    with pytest.raises(fg.ShapeError, match="nothing to map over"):
        g(f64(np.zeros((0, 3))))


def test_reshape_and_state_add():
    r = fg.flow.Reshape(2, -1)
    assert r(fg.zeros(3, 4)).shape == (2, 6)
    s = fg.flow.StateAdd()
    np.testing.assert_array_equal(s(fg.ones(2), fg.ones(2)).numpy(), [2.0, 2.0])


def test_forward_reference_is_recurrent_state():
    x = f64(np.ones((2, 3)))
    g = fg.flow(fg.flow.StateAdd()).using("acc").tag("acc").build()
    np.testing.assert_array_equal(g(x).numpy(), np.ones((2, 3)))      # zeros on the first call
    np.testing.assert_array_equal(g(x).numpy(), 2 * np.ones((2, 3)))   # then the previous value
    np.testing.assert_array_equal(g(x).numpy(), 3 * np.ones((2, 3)))
    g.reset_state()
    np.testing.assert_array_equal(g(x).numpy(), np.ones((2, 3)))


def test_recurrent_state_backprop_and_detach():
    w = nn.Parameter(fg.tensor(2.0, dtype=fg.float64))

    class Mul(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = w

        def forward(self, x, state):
            return x * self.w + state

    g = fg.flow(Mul()).using("s").tag("s").build()
    x = f64([1.0])
    g(x)
    g(x).sum().backward()          # out2 = x*w + (x*w): d/dw = 2x through both calls
    assert float(w.grad) == pytest.approx(2.0)
    w.grad = None
    g.detach_state()
    g(x).sum().backward()          # the state no longer reaches back
    assert float(w.grad) == pytest.approx(1.0)


def _gradcheck_graph(g, x_np):
    assert fg.testing.gradcheck(lambda x: g(x), [f64(x_np).requires_grad_()])


class Smooth(nn.Module):
    def __init__(self, i, o, seed):
        super().__init__()
        self.lin = Lin(i, o, seed)

    def forward(self, x, *refs):
        return self.lin(x, *refs).tanh()


def test_gradcheck_gate(x_np):
    class SoftRouter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = Lin(4, 2, 9)

        def forward(self, x):
            return fg.nn.functional.softmax(self.lin(x), -1)

    g = fg.flow(nn.Identity()).gate(SoftRouter(), Smooth(4, 3, 1), Smooth(4, 3, 2)).build()
    _gradcheck_graph(g, x_np)


def test_gradcheck_loop_map_split(x_np):
    g = (fg.flow(Smooth(4, 4, 1)).tag("h").loop(Smooth(4, 4, 2)).for_(3)
         .split(Smooth(4, 2, 3), Smooth(4, 2, 4)).merge(fg.flow.Cat(-1))
         .map(Smooth(4, 4, 5)).each().through(Smooth(4, 4, 6)).using("h")
         .map(Smooth(2, 2, 7)).slices(2).build())
    _gradcheck_graph(g, x_np)
    _gradcheck_graph(fg.flow(nn.Identity()).loop(Smooth(4, 4, 8)).until(Halt(1e9), 3).build(), x_np)


def test_nested_graph_and_sequential(x_np):
    inner = fg.flow(Lin(4, 4, 1)).tag("inner_h").build()
    outer = fg.flow(inner).tag("enc").through(Lin(4, 2, 2)).build()
    seq = nn.Sequential(outer, nn.Identity())
    out = seq(f64(x_np))
    assert out.shape == (5, 2)
    assert outer.sub("enc") is inner
    np.testing.assert_allclose(outer.sub("enc").tagged("inner_h").numpy(), inner.sub("inner_h").np(x_np), rtol=1e-12)
