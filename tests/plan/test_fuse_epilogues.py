"""The fuse_epilogues pass: a linear followed by its activation becomes one linear_<act> call, an
activation's backward and the bias gradient's column sum one <act>_backward_colsum call (CPU); on
the CPU linear_gelu, linear_gelu_tanh and linear_silu keep the activation's derivative for a
backward that then only multiplies (mul_colsum). The step computes what the unfused plan
(FLOWGRAD_PLAN_SKIP=fuse_epilogues) and eager mode do."""
import json

import numpy as np
import pytest

import flowgrad as fg
from conftest import assert_trained_alike, planner_modes, run_isolated

F = fg.nn.functional

ACTIVATIONS = {  # module, fused op, whether its backward reads the linear's result (kept), CPU backward op
    "relu": (fg.nn.ReLU, "linear_relu", False, "relu_backward_colsum"),  # its backward reads the ReLU's output
    "gelu": (fg.nn.GELU, "linear_gelu", True, "mul_colsum"),
    "gelu_tanh": (lambda: fg.nn.GELU(approximate="tanh"), "linear_gelu_tanh", True, "mul_colsum"),
    "silu": (fg.nn.SiLU, "linear_silu", True, "mul_colsum"),
    "tanh": (fg.nn.Tanh, "linear_tanh", False, "tanh_backward_colsum"),
    "sigmoid": (fg.nn.Sigmoid, "linear_sigmoid", False, "sigmoid_backward_colsum"),
}


def model_for(act, device, seed=3):
    fg.manual_seed(seed)
    return fg.nn.Sequential(fg.nn.Linear(37, 129), ACTIVATIONS[act][0](), fg.nn.Linear(129, 5)).to(device)


def frozen(model):
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def data(device, rows=70):
    rng = np.random.default_rng(0)
    return (fg.tensor(rng.normal(size=(rows, 37)).astype(np.float32), device=device),
            fg.tensor(rng.normal(size=(rows, 5)).astype(np.float32), device=device))


def training_step(act, device):
    model = model_for(act, device)
    opt = fg.optim.SGD(model.parameters(), lr=0.05)
    return model, fg.compile(model, F.mse_loss, opt, example_inputs=data(device))


def forward_ops(step):
    return [r["op"] for r in step.explain().rows if r["phase"] == "forward"]


def backward_ops(step):
    return [r["op"] for r in step.explain().rows if r["phase"] == "backward"]


@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_linear_and_activation_train_as_one_op_like_the_unfused_plan_and_eager(act, device, monkeypatch):
    x, y = data(device)
    model, fused = training_step(act, device)
    fused_op, keeps_product, cpu_backward = ACTIVATIONS[act][1:]
    ops = forward_ops(fused)
    assert ops[0] == fused_op and act not in ops, ops
    row = next(r for r in fused.ir() if r["op"] == fused_op)
    assert len(row["outputs"]) == (2 if keeps_product else 1)
    keeps_derivative = cpu_backward == "mul_colsum" and device == "cpu"
    assert ("keep_derivative=1" in row["attrs"]) == keeps_derivative, row["attrs"]
    on_cpu = cpu_backward in backward_ops(fused) and f"{act}_backward" not in backward_ops(fused)
    assert on_cpu == (device == "cpu"), backward_ops(fused)
    monkeypatch.setenv("FLOWGRAD_PLAN_SKIP", "fuse_epilogues")
    plain_model, plain = training_step(act, device)
    assert forward_ops(plain)[:2] == ["linear", act] and cpu_backward not in backward_ops(plain)
    assert_trains_alike((model, fused), (plain_model, plain), model_for(act, device), F.mse_loss, x, y, lr=0.05,
                        rtol=1e-6)


ISA_LEVELS = ("generic", "avx2", "avx512")


@pytest.mark.parametrize("isa, sgemm", [(isa, "blas") for isa in ISA_LEVELS] + [("avx512", "avx512")])
def test_a_kept_derivative_gives_the_unfused_plans_bits(isa, sgemm):
    """The derivative linear_<act> keeps is its backward functor at gradient 1, and the backward's
    multiply by it rounds as that functor does; linear_relu's backward masks by the ReLU's output,
    positive exactly where the product is. The weight gradients equal the unfused plan's, bit for
    bit (the bias gradient's fused column sum adds in another order), whether flowgrad's AVX-512
    GEMM (the derivative written in its store) or the BLAS (a pass after the product) multiplies,
    at every instruction-set level this machine runs (FLOWGRAD_ISA: contraction into FMA differs
    between levels, and every elementwise loop, strided ones too, runs at the one level). In a
    fresh process per level and GEMM, as both are read at import. 300 hidden units: a product the
    AVX-512 kernel takes."""
    if isa not in fg.build_config()["isa_levels"]:
        pytest.skip(f"this machine runs up to {fg.build_config()['isa_levels'][-1]}, not {isa}")
    out = run_isolated("""
        import json, os
        F = fg.nn.functional
        MODULES = {"relu": fg.nn.ReLU, "gelu": fg.nn.GELU, "gelu_tanh": lambda: fg.nn.GELU(approximate="tanh"),
                   "silu": fg.nn.SiLU}
        config = fg.build_config()
        report = {"isa": config["isa"], "sgemm": config["sgemm"], "differ": {}}
        for act, module in MODULES.items():
            grads, backward = [], []
            for skip in ("", "fuse_epilogues"):
                os.environ["FLOWGRAD_PLAN_SKIP"] = skip
                fg.manual_seed(5)
                model = fg.nn.Sequential(fg.nn.Linear(64, 300), module(), fg.nn.Linear(300, 7))
                rng = np.random.default_rng(6)
                x = fg.tensor(rng.normal(size=(90, 64)).astype(np.float32) * 3)
                y = fg.tensor(rng.normal(size=(90, 7)).astype(np.float32))
                step = fg.compile(model, F.mse_loss, None, example_inputs=(x, y))
                backward.append([r["op"] for r in step.explain().rows if r["phase"] == "backward"])
                step(x, y)
                grads.append([p.grad.numpy().copy() for p in model.parameters()])
            (w1, b1, w2, b2), plain = grads
            fused_op = "relu_backward_colsum" if act == "relu" else "mul_colsum"
            assert fused_op in backward[0] and fused_op not in backward[1], backward
            report["differ"][act] = [int((fused != want).sum()) for fused, want in zip((w1, w2, b2), plain[0::2] + plain[3:])]
            np.testing.assert_allclose(b1, plain[1], rtol=1e-5, atol=1e-8)  # the fused column sum adds in its own order
        print(json.dumps(report))
    """, env={"FLOWGRAD_ISA": isa, "FLOWGRAD_SGEMM": sgemm})
    report = json.loads(out.splitlines()[-1])
    assert (report["isa"], report["sgemm"]) == (isa, sgemm)
    assert report["differ"] == {act: [0, 0, 0] for act in ("relu", "gelu", "gelu_tanh", "silu")}


def test_a_product_read_by_more_than_the_backward_keeps_the_product():
    """linear_gelu keeps the derivative only when the activation's backward is all that reads the
    product again: a product also read by another op (here its square, added to the loss) stays."""
    fg.manual_seed(1)
    layer, head = fg.nn.Linear(37, 129), fg.nn.Linear(129, 5)

    class Model(fg.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.head = layer, head

        def forward(self, v):
            h = self.layer(v)
            return self.head(F.gelu(h)) + (h * h).mean()
    x, y = data("cpu")
    step = fg.compile(Model(), F.mse_loss, None, example_inputs=(x, y))
    row = next(r for r in step.ir() if r["op"] == "linear_gelu")
    assert row["attrs"] == "keep_input=1, keep_derivative=0" and "gelu_backward" in backward_ops(step)


def assert_trains_alike(fused, plain, eager_model, loss_fn, x, y, lr, rtol):
    """Three SGD steps of a fused plan, the same plan without the pass and eager mode (each a
    (model, step) pair, eager a model): equal losses (plans to 1e-6, eager to 1e-5), then equal
    parameters (plans to `rtol`, eager to 10 * rtol)."""
    opt = fg.optim.SGD(eager_model.parameters(), lr=lr)
    for _ in range(3):
        loss = loss_fn(eager_model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        a, b = fused[1](x, y).item(), plain[1](x, y).item()
        np.testing.assert_allclose(a, b, rtol=1e-6)
        np.testing.assert_allclose(a, loss.item(), rtol=1e-5)
    for (name, p), q, r in zip(fused[0].named_parameters(), plain[0].parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.cpu().numpy(), q.cpu().numpy(), rtol=rtol, atol=rtol / 10, err_msg=name)
        np.testing.assert_allclose(p.cpu().numpy(), r.cpu().numpy(), rtol=rtol * 10, atol=rtol, err_msg=name)


def test_inference_keeps_no_product_and_the_pass_is_counted(device):
    model = frozen(model_for("gelu", device))
    x, weights = data(device)
    step = fg.compile(lambda v: (model(v) * weights).sum(), example_inputs=(x,))
    rows = [r for r in step.ir() if r["op"] == "linear_gelu"]
    assert len(rows) == 1 and len(rows[0]["outputs"]) == 1
    counts = {name: (before, after) for name, before, after in step.plan.passes()}
    assert counts["fuse epilogues"][0] == counts["fuse epilogues"][1] + 1
    np.testing.assert_allclose(step(x).item(), (model(x) * weights).sum().item(), rtol=1e-6)


def test_an_activation_of_part_of_the_product_is_left_alone(device):
    fg.manual_seed(0)
    layer = frozen(fg.nn.Linear(6, 8).to(device))
    x, _ = data(device, rows=4)
    step = fg.compile(lambda v: F.relu(layer(v[:, :6])[:, :4]).sum(), example_inputs=(x,))
    assert "linear_relu" not in forward_ops(step) and "relu" in forward_ops(step)
    assert step(x).item() == F.relu(layer(x[:, :6])[:, :4]).sum().item()


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_the_fused_backward_writes_over_the_gradient_it_takes(act, monkeypatch):
    """relu_backward_colsum / mul_colsum write their result over their dying gradient operand (the
    planner's one in-place case): the plan names the pair, and training gives the same bits as a
    plan where every buffer has bytes of its own (FLOWGRAD_NO_PLANNER) and under poisoning of
    released bytes (FLOWGRAD_DEBUG_PLAN)."""
    results = []
    for env in planner_modes(monkeypatch):
        model, step = training_step(act, "cpu")
        buffers = step.plan.buffers()
        taking = [b for b in buffers if b["takes"] is not None]
        assert len(taking) == (0 if env.get("FLOWGRAD_NO_PLANNER") else 1), taking
        for b in taking:
            taken = next(o for o in buffers if o["name"] == b["takes"])
            assert (taken["offset"], taken["bytes"], taken["last"]) == (b["offset"], b["bytes"], b["first"])
        x, y = data("cpu")
        losses = [step(x, y).item() for _ in range(3)]
        results.append((losses, [p.numpy().copy() for p in model.parameters()]))
    assert_trained_alike(results)
