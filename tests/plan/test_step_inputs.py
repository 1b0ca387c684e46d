"""How a compiled step takes its inputs: a CPU plan reads a contiguous, aligned input where the
caller keeps it (no copy into the arena) unless the step writes those bytes; every other input,
and every input of a CUDA plan (a captured graph holds its slot's address), is copied. Either
way the step computes the same bits and never writes the caller's tensor."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def mlp(device):
    fg.manual_seed(0)
    return nn.Sequential(nn.Linear(24, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 5)).to(device)


def batches(device, n=6):
    rng = np.random.default_rng(4)
    return [(rng.standard_normal((16, 24)).astype(np.float32), rng.integers(0, 5, 16)) for _ in range(n)]


def strided(x, device):
    """x's values in a non-contiguous view (every other column of a wider tensor)."""
    wide = np.zeros((x.shape[0], 2 * x.shape[1]), np.float32)
    wide[:, ::2] = x
    return fg.tensor(wide, device=device)[:, ::2]


def unaligned(x, device):
    """x's values, contiguous, 4 bytes past an aligned start."""
    flat = np.concatenate([np.zeros(1, np.float32), x.ravel()])
    return fg.tensor(flat, device=device)[1:].reshape(*x.shape)


LAYOUTS = {"contiguous": lambda x, device: fg.tensor(x, device=device), "strided": strided, "unaligned": unaligned}


def train(device, layout):
    """Trains mlp() on batches() with x in `layout`; (losses, parameters, inputs copied per call)."""
    model = mlp(device)
    data = batches(device)
    x0, y0 = fg.tensor(data[0][0], device=device), fg.tensor(data[0][1], device=device)
    step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                      example_inputs=(x0, y0))
    losses, copied = [], []
    for x, y in data:
        xt = LAYOUTS[layout](x, device)
        losses.append(step(xt, fg.tensor(y, device=device)).item())
        copied.append(step.stats["inputs_copied"])
        np.testing.assert_array_equal(xt.cpu().numpy(), x)  # the caller's tensor is only read
    return losses, [p.cpu().numpy() for p in model.parameters()], copied, str(step.plan)


def test_inputs_read_in_place_or_copied_train_to_the_same_bits(device):
    runs = {layout: train(device, layout) for layout in LAYOUTS}
    losses, params, _, _ = runs["contiguous"]
    for layout, (other_losses, other_params, _, _) in runs.items():
        assert other_losses == losses, layout
        for got, want in zip(other_params, params):
            np.testing.assert_array_equal(got, want, err_msg=layout)
    # The labels (int64) and a contiguous batch are read in place on the CPU; a strided or
    # unaligned batch is copied; a CUDA plan copies both.
    on_cpu = device == "cpu"
    assert runs["contiguous"][2] == [0 if on_cpu else 2] * 6
    how = "read in place" if on_cpu else "copied: a captured CUDA graph holds its slot's address"
    assert f"input x0: float32 (16, 24), {how}" in runs["contiguous"][3]
    assert runs["strided"][2] == runs["unaligned"][2] == [1 if on_cpu else 2] * 6


def test_a_step_switches_between_reading_in_place_and_copying(device):
    model = mlp(device)
    data = batches(device)
    reference = mlp(device)
    x0, y0 = fg.tensor(data[0][0], device=device), fg.tensor(data[0][1], device=device)
    step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(x0, y0))
    ref = fg.compile(reference, F.cross_entropy, fg.optim.SGD(reference.parameters(), lr=0.1), example_inputs=(x0, y0))
    kept = fg.tensor(data[0][0], device=device)
    for k, ((x, y), layout) in enumerate(zip(data * 2, ["contiguous", "strided", "contiguous", "unaligned"] * 3)):
        xt = kept if k % 3 == 0 else LAYOUTS[layout](x, device)  # `kept` refilled in place: read again
        if k % 3 == 0:
            kept.copy_(fg.tensor(x, device=device))
        yt = fg.tensor(y, device=device)
        assert step(xt, yt).item() == ref(fg.tensor(x, device=device), yt).item(), k
    for got, want in zip(model.parameters(), reference.parameters()):
        np.testing.assert_array_equal(got.cpu().numpy(), want.cpu().numpy())


def test_an_input_in_bytes_the_step_writes_is_copied_first(device):
    """A batch that is a layer's .grad: the backward writes that gradient before it reads the batch
    for the first layer's weight gradient, so reading it in place would see the new gradient."""
    def setup():
        fg.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)).to(device)
        x = fg.tensor(np.random.default_rng(5).standard_normal((8, 8)).astype(np.float32), device=device)
        step = fg.compile(model, F.mse_loss, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(x, x * 0.5))
        step(x, x * 0.5)  # makes the gradients
        return model, step

    model, step = setup()
    target = fg.ones(8, 8, device=device)
    for _ in range(3):
        step(model[2].weight.grad, target)
        assert step.stats["inputs_copied"] == (1 if device == "cpu" else 2)
    twin, twin_step = setup()
    for _ in range(3):
        twin_step(twin[2].weight.grad.clone(), target)
    for got, want in zip(model.parameters(), twin.parameters()):
        np.testing.assert_array_equal(got.cpu().numpy(), want.cpu().numpy())


def test_an_output_that_is_an_input_follows_the_caller_s_tensor(device):
    x = fg.zeros(3, 4, device=device)
    identity = fg.compile(nn.Identity(), F.mse_loss, example_inputs=(x, x + 1.0)).forward_plan(x)
    for k in range(3):
        x = fg.full((3, 4), float(k), device=device)
        out = identity(x)
        assert identity.plan.stats()["inputs_copied"] == (0 if device == "cpu" else 1)
        np.testing.assert_array_equal(out.cpu().numpy(), np.full((3, 4), k, np.float32))
        x.fill_(-1.0)  # the step's result is a tensor of its own
        np.testing.assert_array_equal(out.cpu().numpy(), np.full((3, 4), k, np.float32))


def test_an_input_a_fused_run_reads_is_copied(device):
    step = fg.compile(lambda x: ((x * 2.0 + 1.0).tanh() * x).mean(), example_inputs=(fg.zeros(1000, 64, device=device),))
    x = np.random.default_rng(6).standard_normal((1000, 64)).astype(np.float32)
    assert step(fg.tensor(x, device=device)).item() == pytest.approx(float((np.tanh(x * 2 + 1) * x).mean()), rel=1e-4)
    assert step.stats["inputs_copied"] == 1
    if device == "cpu":  # CUDA fuses only where NVRTC and a driver are found, and copies every input anyway
        assert step.stats["fused_runs"] == 1
        assert "input x0: float32 (1000, 64), copied: a fused run reads it" in str(step.plan)


def test_an_input_the_step_writes_in_place_is_copied_and_the_caller_s_tensor_kept(device):
    def doubled_sum(x):
        x.mul_(2.0)
        return x.sum()

    step = fg.compile(doubled_sum, example_inputs=(fg.ones(4, 4, device=device),))
    x = fg.ones(4, 4, device=device)
    for _ in range(2):
        assert step(x).item() == 32.0
        assert step.stats["inputs_copied"] == 1
        np.testing.assert_array_equal(x.cpu().numpy(), np.ones((4, 4), np.float32))
    assert "input x0: float32 (4, 4), copied: the step writes it" in str(step.plan)


def test_example_inputs_that_are_views_or_parameters_trace_as_tensors_of_their_own(device):
    """A plan gives each input a contiguous slot of its size: example inputs that are a strided
    view, a slice at an offset, or a parameter's own tensor must not be traced at their place in
    their storage (that read past the slot, and made the parameter an input)."""
    rng = np.random.default_rng(7)
    wide = rng.standard_normal((8, 6)).astype(np.float32)
    flat = rng.standard_normal(40).astype(np.float32)
    x_view = fg.tensor(wide, device=device)[:, ::2]  # strides (6, 1)
    y_slice = fg.tensor(flat, device=device)[5:29].reshape(8, 3)  # 5 elements into its storage
    step = fg.compile(lambda x, y: (x * y).sum() + x.sum(), example_inputs=(x_view, y_slice))
    for x, y in [(wide[:, ::2], flat[5:29].reshape(8, 3)), (wide[:, 1::2], flat[:24].reshape(8, 3))]:
        got = step(fg.tensor(np.ascontiguousarray(x), device=device), fg.tensor(y, device=device)).item()
        assert got == pytest.approx(float((x * y).sum() + x.sum()), rel=1e-5)
    got = step(x_view, y_slice).item()
    assert got == pytest.approx(float((wide[:, ::2] * flat[5:29].reshape(8, 3)).sum() + wide[:, ::2].sum()), rel=1e-5)

    def trained(example_is_weight):
        fg.manual_seed(0)
        model = nn.Linear(4, 4).to(device)
        target = fg.zeros(4, 4, device=device)
        example = model.weight if example_is_weight else model.weight.detach().clone()
        step = fg.compile(model, F.mse_loss, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(example, target))
        batch = fg.tensor(rng.standard_normal((4, 4)).astype(np.float32), device=device)
        losses = [step(batch, target).item() for _ in range(3)]
        return losses, model.weight.cpu().numpy()

    state = rng.bit_generator.state
    as_weight = trained(True)
    rng.bit_generator.state = state
    as_copy = trained(False)
    assert as_weight[0] == as_copy[0]
    np.testing.assert_array_equal(as_weight[1], as_copy[1])
    assert as_copy[0][2] < as_copy[0][0]  # it trains


def test_one_tensor_twice_and_a_strided_forward_plan_example(device):
    x = fg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    square = fg.compile(lambda a, b: (a * b).sum(), example_inputs=(x, x))  # the second traced as a copy
    assert square(x, x).item() == float((np.arange(12) ** 2).sum())
    fg.manual_seed(0)
    layer = nn.Linear(3, 2).to(device)
    step = fg.compile(layer, F.mse_loss, example_inputs=(fg.zeros(4, 3, device=device), fg.zeros(4, 2, device=device)))
    example = x.t()  # (4, 3), strides (1, 4)
    infer = step.forward_plan(example)
    np.testing.assert_allclose(infer(example).cpu().numpy(), layer(example).detach().cpu().numpy(), rtol=1e-6)
