"""fg.compile(model) as torch.compile(model): no example inputs, a plan per input signature made at its
first call; under grad a forward plan and a backward plan that eager autograd runs as one node, so an
ordinary eager loop (loss.backward(); opt.step()) runs on plans unchanged and equals eager."""
import warnings

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn

F = fg.nn.functional


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a.numpy()), np.asarray(b.numpy()), rtol=rtol, atol=atol)


def twins(make):
    """Two models with the same initial weights."""
    fg.manual_seed(0)
    a = make()
    fg.manual_seed(0)
    b = make()
    for p, q in zip(a.parameters(), b.parameters()):
        close(p, q, 0, 0)
    return a, b


def mlp():
    return nn.Sequential(nn.Linear(45, 65), nn.Tanh(), nn.Linear(65, 7))


def train(model, forward, opt, batches, loss_fn):
    """An eager loop; returns the losses and every step's gradients."""
    losses, grads = [], []
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(forward(x), y)
        loss.backward()
        grads.append([p.grad.numpy().copy() for p in model.parameters()])
        opt.step()
        losses.append(loss.item())
    return losses, grads


def batches(rng, n, shape, classes, steps=4):
    return [(fg.tensor(rng.standard_normal((n,) + shape).astype(np.float32)),
             fg.tensor(rng.integers(0, classes, n))) for _ in range(steps)]


@pytest.mark.parametrize("make_opt", [lambda ps: fg.optim.SGD(ps, lr=0.1, momentum=0.9),
                                      lambda ps: fg.optim.AdamW(ps, lr=1e-2)])
def test_an_eager_loop_on_the_compiled_model_equals_eager(rng, make_opt):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    assert isinstance(compiled, fg.CompiledModule) and compiled.stats["traces"] == 0  # nothing traced yet
    data = batches(rng, 33, (45,), 7, steps=5)
    want = train(eager, eager, make_opt(eager.parameters()), data, F.cross_entropy)
    got = train(model, compiled, make_opt(compiled.parameters()), data, F.cross_entropy)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for g, w in zip(got[1], want[1]):  # every step's every gradient: updates between calls are seen
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    for p, q in zip(model.parameters(), eager.parameters()):
        close(p, q)
    assert compiled.stats["traces"] == 1 and compiled.stats["plan_calls"] == 5
    (row,) = compiled.stats["plans"]
    assert row["kind"] == "forward+backward" and row["saved"] >= 1


def test_the_outputs_hang_on_one_node_and_gradients_accumulate_as_eager(rng):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    x = fg.tensor(rng.standard_normal((6, 45)).astype(np.float32))
    out = compiled(x)
    assert out.requires_grad and out.grad_fn == "<CompiledBackward>"
    for m, f in ((eager, eager), (model, compiled)):  # two backward passes without zero_grad: sums
        for _ in range(2):
            (f(x) ** 2).sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        close(p.grad, q.grad, 1e-5, 1e-5)


def test_gradient_reaches_inputs_that_require_grad_and_their_history(rng):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    base = rng.standard_normal((5, 45)).astype(np.float32)
    grads = []
    for f in (eager, compiled):
        a = fg.tensor(base, requires_grad=True)
        x = a * 2.0  # not a leaf: the gradient flows on into a
        (f(x).sin().sum()).backward()
        grads.append(a.grad)
    close(grads[1], grads[0], 1e-5, 1e-6)
    # A leaf input, a frozen model: only the input's gradient is computed.
    for p in model.parameters():
        p.requires_grad_(False)
        p.grad = None
    x = fg.tensor(base, requires_grad=True)
    compiled(x).sum().backward()
    assert x.grad is not None and all(p.grad is None for p in model.parameters())


def test_the_gradient_check_of_a_compiled_function_of_inputs_only():
    rng = np.random.default_rng(3)
    def fn(a, b):
        return (a * b.exp()).tanh() @ b.t()

    f = fg.compile(fn)
    a = fg.tensor(rng.standard_normal((3, 4)), requires_grad=True)  # float64
    b = fg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    assert fg.testing.gradcheck(f, (a, b), eps=1e-6, atol=1e-6)  # backward plan vs finite differences
    # under no_grad (the differences) requires_grad is no part of the signature: one forward plan
    assert [r["kind"] for r in f.stats["plans"]] == ["forward+backward", "forward"]
    got = fg.autograd.grad(f(a, b).sum(), [a, b])
    want = fg.autograd.grad(fn(a, b).sum(), [a, b])
    for g, w in zip(got, want):
        close(g, w, 1e-12, 1e-12)


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(5, 8)
        self.a, self.b = nn.Linear(8, 3), nn.Linear(8, 2)

    def forward(self, x, scale=1.0):
        h = self.body(x).relu() * scale
        return {"a": self.a(h), "pair": (self.b(h), h.argmax(-1))}


def test_dict_and_tuple_outputs_keyword_arguments_and_an_integer_output(rng):
    eager, model = twins(Heads)
    compiled = fg.compile(model)
    x = fg.tensor(rng.standard_normal((4, 5)).astype(np.float32))
    outs = []
    for f in (eager, compiled):
        out = f(x, scale=0.5)
        # Only one head takes part in the loss: the other's gradient arrives as zeros.
        (out["a"] ** 2).mean().backward()
        outs.append(out)
    assert isinstance(outs[1], dict) and isinstance(outs[1]["pair"], tuple)
    close(outs[1]["a"], outs[0]["a"])
    close(outs[1]["pair"][0], outs[0]["pair"][0])
    assert outs[1]["pair"][1].tolist() == outs[0]["pair"][1].tolist() and not outs[1]["pair"][1].requires_grad
    for p, q in zip(model.parameters(), eager.parameters()):
        if q.grad is None:  # the head outside the loss: eager never reaches it, the backward plan sends zeros
            assert p.grad.abs().sum().item() == 0.0
        else:
            close(p.grad, q.grad)
    assert eager.b.weight.grad is None
    compiled(x, scale=2.0)  # another constant argument: another signature
    assert compiled.stats["traces"] == 2


def test_a_new_shape_traces_a_second_plan_and_the_cache_is_bounded(rng):
    compiled = fg.compile(mlp(), max_plans=2)
    for n in (3, 4, 3, 5, 3):
        compiled(fg.tensor(rng.standard_normal((n, 45)).astype(np.float32))).sum().backward()
    # 3, 4 traced; 3 hit; 5 traced and 4 dropped (least recently used); 3 hit.
    assert compiled.stats["traces"] == 3
    assert [r["inputs"][0][0] for r in compiled.stats["plans"]] == [(5, 45), (3, 45)]


def test_no_grad_and_inference_mode_run_a_forward_plan(rng):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    x = fg.tensor(rng.standard_normal((4, 45)).astype(np.float32))
    for mode in (fg.no_grad, fg.inference_mode):
        with mode():
            out = compiled(x)
        assert not out.requires_grad and out.grad_fn is None
        close(out, eager(x))
    assert [r["kind"] for r in compiled.stats["plans"]] == ["forward"]  # both: one signature
    compiled(x)  # under grad: another signature with a backward plan
    assert [r["kind"] for r in compiled.stats["plans"]] == ["forward", "forward+backward"]


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 10)
        self.bn = nn.BatchNorm1d(10)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        return self.drop(self.bn(self.fc(x)).relu())


def test_batchnorm_statistics_dropout_draws_and_the_train_eval_switch_equal_eager(rng):
    eager, model = twins(Norm)
    compiled = fg.compile(model)
    xs = [fg.tensor(rng.standard_normal((8, 6)).astype(np.float32)) for _ in range(3)]
    for x in xs:  # train mode: the same dropout masks from the same seed, running statistics updated
        outs = []
        for f in (eager, compiled):
            fg.manual_seed(11)
            out = f(x)
            out.sum().backward()
            outs.append(out)
        close(outs[1], outs[0])
        assert (outs[1].numpy() == 0).any()  # dropout dropped something
    close(model.bn.running_mean, eager.bn.running_mean)
    close(model.bn.running_var, eager.bn.running_var)
    for p, q in zip(model.parameters(), eager.parameters()):
        close(p.grad, q.grad, 1e-5, 1e-5)
    assert compiled.eval() is compiled and not model.training
    with fg.no_grad():
        close(compiled(xs[0]), eager.eval()(xs[0]))  # running statistics, no dropout
    compiled.train()
    assert model.training and compiled.stats["traces"] == 2  # train (grad), eval (no grad)


def test_the_wrapper_delegates_to_the_model():
    model = mlp()
    compiled = fg.compile(model)
    assert compiled.module is model and compiled._orig_mod is model
    assert [hash(p) for p in compiled.parameters()] == [hash(p) for p in model.parameters()]
    assert list(compiled.state_dict()) == list(model.state_dict())
    assert compiled.to("cpu") is compiled and compiled.float() is compiled  # as the model returns itself
    assert compiled.training is model.training and compiled.module.eval() is model
    assert not compiled.training


class HostRead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return h * 2 if h.sum().item() > 0 else h - 1  # a data-dependent Python branch


def test_a_model_the_tracer_refuses_runs_eagerly_after_one_warning(rng):
    eager, model = twins(HostRead)
    compiled = fg.compile(model)
    x = fg.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    with pytest.warns(UserWarning, match=r"HostRead runs eagerly for inputs \(\(3, 4\) float32\) under grad: .*item"):
        out = compiled(x)
    close(out, eager(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason
        compiled(x).sum().backward()
    assert model.fc.weight.grad is not None
    assert compiled.stats["eager_calls"] == 2 and compiled.stats["plans"][0]["kind"] == "eager"
    with pytest.raises(fg.InvalidArgumentError, match="reads a computed value on the host"):
        fg.compile(model, fullgraph=True)(x)


def test_torch_keywords_and_errors():
    model = mlp()
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        assert isinstance(fg.compile(model, mode=mode, dynamic=True, fullgraph=False), fg.CompiledModule)
    assert fg.compile(model, disable=True) is model and fg.compile(model, backend="eager") is model
    assert isinstance(fg.compile(backend="inductor")(model), fg.CompiledModule)  # decorator form
    with pytest.raises(fg.InvalidArgumentError, match="mode must be one of .*'max-autotune'.*got 'fast'"):
        fg.compile(model, mode="fast")
    with pytest.raises(fg.InvalidArgumentError, match="backend must be .*got 'cudagraphs'"):
        fg.compile(model, backend="cudagraphs")
    with pytest.raises(fg.InvalidArgumentError, match=r"options \['triton.cudagraphs'\] are PyTorch Inductor"):
        fg.compile(model, options={"triton.cudagraphs": True})
    with pytest.raises(TypeError, match="unknown keyword argument.*cache_size"):
        fg.compile(model, cache_size=3)
    with pytest.raises(fg.InvalidArgumentError, match="dynamic must be None, True or False, got 'auto'"):
        fg.compile(model, dynamic="auto")
    with pytest.raises(fg.InvalidArgumentError, match="need example_inputs"):
        fg.compile(model, F.cross_entropy)
    with pytest.raises(fg.InvalidArgumentError, match="max_plans must be a positive integer, got 0"):
        fg.compile(model, max_plans=0)
    with pytest.raises(TypeError, match="model must be a Module or a function, got int"):
        fg.compile(3)


def test_create_graph_through_a_compiled_model_raises(rng):
    compiled = fg.compile(mlp())
    x = fg.tensor(rng.standard_normal((2, 45)).astype(np.float32), requires_grad=True)
    with pytest.raises(fg.InvalidArgumentError, match="create_graph=True .* first-order gradients only"):
        fg.autograd.grad(compiled(x).sum(), [x], create_graph=True)


def test_module_to_and_a_replaced_parameter_trace_again(rng):
    model = mlp()
    compiled = fg.compile(model)
    x = fg.tensor(rng.standard_normal((2, 45)).astype(np.float32))
    compiled(x)
    model[0].weight = nn.Parameter(fg.zeros(65, 45))
    with fg.no_grad():
        close(compiled(x), model(x))  # the new weight, not the one traced
    assert compiled.stats["traces"] == 2


class TinyLM(nn.Module):
    """Embedding, a causal transformer block with dropout, LayerNorm and a head: the char-LM kind."""

    def __init__(self, vocab=11, seq=5, dim=8):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(fg.randn(seq, dim) * 0.02)
        self.block = nn.TransformerBlock(dim, 2, causal=True)
        self.drop = nn.Dropout(0.1)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(self.norm(self.drop(self.block(self.tokens(idx) + self.positions)))).reshape(-1, 11)


def test_a_char_transformer_trains_as_eager_with_adamw(rng):
    eager, model = twins(TinyLM)
    compiled = fg.compile(model)
    data = [(fg.tensor(rng.integers(0, 11, (3, 5))), fg.tensor(rng.integers(0, 11, 15))) for _ in range(4)]
    results = []
    for m, f in ((eager, eager), (model, compiled)):
        fg.manual_seed(5)  # the same dropout draws in both loops
        results.append(train(m, f, fg.optim.AdamW(m.parameters(), lr=1e-2), data, F.cross_entropy))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5)
    for g, w in zip(results[1][1], results[0][1]):
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert compiled.stats["traces"] == 1 and compiled.stats["eager_calls"] == 0


def test_two_calls_before_one_backward_keep_their_own_saved_tensors(rng):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    x1, x2 = (fg.tensor(rng.standard_normal((4, 45)).astype(np.float32)) for _ in range(2))
    for f in (eager, compiled):  # a siamese loss: the first call's activations must survive the second call
        (f(x1) * f(x2)).sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        close(p.grad, q.grad, 1e-5, 1e-5)


def test_on_every_device_the_loop_equals_eager(rng, device):
    eager, model = twins(mlp)
    eager.to(device)
    model.to(device)
    compiled = fg.compile(model)
    data = [(x.to(device), y.to(device)) for x, y in batches(rng, 16, (45,), 7, steps=3)]
    want = train(eager, eager, fg.optim.SGD(eager.parameters(), lr=0.1), data, F.cross_entropy)
    got = train(model, compiled, fg.optim.SGD(model.parameters(), lr=0.1), data, F.cross_entropy)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for g, w in zip(got[1], want[1]):
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert compiled.stats["plans"][0]["inputs"][0][2].startswith(device)


def test_saved_values_stay_in_the_forward_arena_which_a_loop_reuses(rng):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    x = fg.tensor(rng.standard_normal((4, 45)).astype(np.float32))
    compiled(x).sum().backward()
    ((_, plans),) = compiled.plans()
    arena = plans.forward.arena().data_ptr()
    for _ in range(3):  # backward released the saved values before each next call: one arena throughout
        compiled(x).sum().backward()
        assert plans.forward.arena().data_ptr() == arena
    kept = compiled(x)  # its saved values live until its backward: the next call writes a fresh arena
    compiled(x)         # (test_two_calls_before_one_backward_... checks the gradients of two live calls)
    assert plans.forward.arena().data_ptr() != arena
    del kept
    # retain_graph: the same saved values serve two backward passes
    for m, f in ((eager, eager), (model, compiled)):
        for p in m.parameters():
            p.grad = None
        out = f(x)
        out.sum().backward(retain_graph=True)
        (out ** 2).sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        close(p.grad, q.grad, 1e-5, 1e-5)


def test_gradients_are_backward_arena_views_that_a_kept_grad_keeps_apart(rng):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    x = fg.tensor(rng.standard_normal((4, 45)).astype(np.float32))
    compiled(x).sum().backward()
    ((_, plans),) = compiled.plans()
    arena = plans.backward.arena().data_ptr()
    for _ in range(3):  # zero_grad dropped the gradients before each next backward: one arena throughout
        model.zero_grad()
        compiled(x).sum().backward()
        assert plans.backward.arena().data_ptr() == arena
    # Kept gradients (a list of .grad, accumulation across steps) are not overwritten by the next backward.
    kept = []
    for m, f in ((eager, eager), (model, compiled)):
        for p in m.parameters():
            p.grad = None
        (f(x) ** 2).sum().backward()
        first = [p.grad for p in m.parameters()]
        m.zero_grad()
        f(x * 2).sum().backward()  # other gradients, while `first` lives
        f(x).sum().backward()      # accumulated into the .grad of the step before
        kept.append(first)
    assert plans.backward.arena().data_ptr() != arena
    for p, q, a, b in zip(model.parameters(), eager.parameters(), kept[1], kept[0]):
        close(p.grad, q.grad, 1e-5, 1e-5)
        close(a, b, 1e-5, 1e-5)


def test_frozen_and_in_place_modified_parameters_equal_eager(rng):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    x = fg.tensor(rng.standard_normal((4, 45)).astype(np.float32))
    for step in range(4):
        for m, f in ((eager, eager), (model, compiled)):
            m.zero_grad()
            if step == 1:  # modified in place: the plans read the new values, no trace
                with fg.no_grad():
                    m[0].weight.mul_(0.5)
            if step == 2:  # frozen: a new plan that computes no gradient for it
                m[0].bias.requires_grad_(False)
            if step == 3:  # thawed again
                m[0].bias.requires_grad_(True)
            (f(x) ** 2).sum().backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            assert (p.grad is None) == (q.grad is None)
            if q.grad is not None:
                close(p.grad, q.grad, 1e-5, 1e-5)
    assert model[0].bias.grad is not None and compiled.stats["traces"] == 3


def test_module_state_names_each_parameter_and_training_flag():
    model = nn.Sequential(mlp(), nn.Dropout(0.1))
    state = fg._core.plan.module_state(model)
    assert fg._core.plan.module_state(model) == state  # nothing changed: the same bytes
    with fg.no_grad():
        model[0][0].weight.mul_(2.0)  # values only: the same identity
    assert fg._core.plan.module_state(model) == state
    model[1].eval()
    identity, training = fg._core.plan.module_state(model)
    assert identity == state[0] and training != state[1] and len(training) == len(list(model.modules()))
    model[1].train()
    model[0][2].bias.requires_grad_(False)
    assert fg._core.plan.module_state(model)[0] != state[0]
    model[0][2].bias.requires_grad_(True)
    assert fg._core.plan.module_state(model) == state
    model[0][2].bias = nn.Parameter(fg.zeros(7))
    assert fg._core.plan.module_state(model)[0] != state[0]


def test_an_input_written_in_place_before_backward_raises_as_in_eager(rng):
    eager, model = twins(mlp)
    compiled = fg.compile(model)
    for f in (eager, compiled):
        x = fg.tensor(rng.standard_normal((4, 45)).astype(np.float32))
        out = f(x)  # the first Linear's weight gradient reads x
        x.mul_(2.0)
        with pytest.raises(fg.FlowgradError, match="modified by an inplace operation"):
            out.sum().backward()
    x = fg.tensor(rng.standard_normal((4, 45)).astype(np.float32))
    out = compiled(x)
    compiled(x * 3).sum().backward()  # another call on other inputs: out's saved input is still x
    out.sum().backward()
    for p in eager.parameters():
        p.grad = None
    eager(x * 3).sum().backward()
    eager(x).sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        close(p.grad, q.grad, 1e-5, 1e-5)
