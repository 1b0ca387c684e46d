"""Where fused CUDA kernels are compiled for and launched (review findings F1, F6), and the capture
self-check that counts launches: NVRTC makes a CUBIN for the GPU's own architecture when it knows
it (PTX otherwise; both checked here without a GPU); on a GPU, a fused kernel the driver cannot
load or launch falls back to unfused launches with the reason in stats["cuda_fusion"], and a
launch that escapes the capture (F1, replayed by a fault switch) makes the capture refuse the
graph, so the step stays correct."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

NVRTC, NVRTC_MISSING = fg._core.plan.nvrtc_available()
needs_nvrtc = pytest.mark.skipif(not NVRTC, reason=f"NVRTC is not available here: {NVRTC_MISSING}")


def cuda_only(device):
    if device == "cpu":
        pytest.skip("fused CUDA kernels and CUDA graph capture exist only on CUDA")


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        return ((self.fc(x).tanh() * 2.0 + 1.0).sigmoid() * 3.0).relu().sum()  # the step's loss


def fused_source():
    """Name and source of one fused run of a compiled CPU step (the same source a CUDA plan makes)."""
    fg.manual_seed(0)
    model = Chain()
    step = fg.compile(model, optimizer=fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(fg.randn(300, 64),))
    runs = sorted({ins["run"] for ins in step.plan.ir() if ins["run"] is not None})
    assert runs
    return step.plan.fused_cuda_source(runs[0])


@needs_nvrtc
def test_nvrtc_makes_a_cubin_for_every_architecture_it_knows():
    archs = fg._core.plan.nvrtc_archs()
    assert 80 in archs and 90 in archs, archs
    name, source = fused_source()
    for arch in (80, 90):
        target, image = fg._core.plan.compile_fused(source, name, arch)
        assert target == f"CUBIN for sm_{arch}"
        assert image[:4] == b"\x7fELF"  # SASS in an ELF container: no PTX JIT in the driver


@needs_nvrtc
def test_a_gpu_newer_than_nvrtc_gets_ptx_for_the_newest_architecture_it_knows():
    newest = max(fg._core.plan.nvrtc_archs())
    name, source = fused_source()
    target, image = fg._core.plan.compile_fused(source, name, newest + 1000)
    assert target == f"PTX for compute_{newest}"
    assert f".target sm_{newest}".encode() in image
    assert f".visible .entry {name}(".encode() in image


@needs_nvrtc
def test_an_architecture_below_every_one_nvrtc_knows_is_an_error_naming_it():
    name, source = fused_source()
    with pytest.raises(fg.FlowgradError, match=f"NVRTC knows no architecture at or below sm_10 for {name}"):
        fg._core.plan.compile_fused(source, name, 10)


def test_set_fused_fault_names_the_stages_it_accepts():
    with pytest.raises(fg.InvalidArgumentError,
                       match="set_fused_fault: stage must be 'none', 'load', 'launch', 'legacy_stream' or "
                             "'drop_in_capture', got 'x'"):
        fg._core.plan.set_fused_fault("x")


# ---- on a GPU ----

def mlp(device):
    fg.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5)).to(device)


def batches(device, n):
    rng = np.random.default_rng(3)
    xs = [fg.tensor(rng.standard_normal((16, 20)).astype(np.float32), device=device) for _ in range(n)]
    ys = [fg.tensor(rng.integers(0, 5, 16), device=device) for _ in range(n)]
    return xs, ys


def train(device, steps, monkeypatch=None, **env):
    """Losses of `steps` compiled SGD steps of the MLP (ReLU's backward is a fused run), the
    step's stats, and the final first-layer weight."""
    if monkeypatch:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
    model = mlp(device)
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    xs, ys = batches(device, steps)
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    losses = [step(x, y).item() for x, y in zip(xs, ys)]
    return losses, step.stats, model[0].weight.cpu().numpy()


def eager(device, steps):
    model = mlp(device)
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in zip(*batches(device, steps)):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model[0].weight.cpu().numpy()


@pytest.fixture
def fault():
    yield fg._core.plan.set_fused_fault
    fg._core.plan.set_fused_fault("none")


def test_captured_step_with_fused_runs_and_library_calls_passes_the_launch_count_check(device):
    cuda_only(device)
    losses, stats, weight = train(device, 6)
    assert stats["cuda_graph"].startswith("captured: one CUDA graph of"), stats["cuda_graph"]
    assert stats["cuda_fusion"].startswith(("1 fused", "2 fused", "3 fused", "4 fused")), stats["cuda_fusion"]
    expected, expected_weight = eager(device, 6)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    np.testing.assert_allclose(weight, expected_weight, rtol=1e-5, atol=1e-6)


def test_fused_kernels_are_cubins_for_the_running_gpu(device):
    cuda_only(device)
    _, stats, _ = train(device, 1)
    if stats["cuda_fusion"].startswith("not used"):
        pytest.skip(f"no fusion on this machine: {stats['cuda_fusion']}")
    # The H100/A100 of a GPU machine: NVRTC 12/13 knows sm_80 and sm_90, so a CUBIN, no PTX JIT
    assert "compiled with NVRTC (CUBIN for sm_" in stats["cuda_fusion"], stats["cuda_fusion"]


def test_a_launch_outside_the_capture_refuses_the_graph_and_the_step_stays_right(device, fault):
    cuda_only(device)
    fault("legacy_stream")  # F1 as it was: fused kernels on the legacy default stream
    losses, stats, weight = train(device, 6)
    if stats["cuda_fusion"].startswith("not used"):
        pytest.skip(f"no fusion on this machine: {stats['cuda_fusion']}")
    graph = stats["cuda_graph"]
    assert graph.startswith("fallback to plain execution: capture failed"), graph
    # Counted (the legacy stream ran the launch eagerly) or refused by the driver (it broke the capture)
    assert "launch count mismatch: flowgrad launched" in graph or "invalidated the capture" in graph, graph
    expected, expected_weight = eager(device, 6)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    np.testing.assert_allclose(weight, expected_weight, rtol=1e-5, atol=1e-6)


def test_a_kernel_missing_from_the_graph_is_found_by_the_poisoned_self_check(device, fault):
    # Review G1: a fused run dropped from the captured graph, neither launched nor counted (so the
    # launch count cannot see it), whose output is an arena intermediate. The plain step of the
    # self-check used to leave the right bytes there for the replay to read; the arena is now
    # poisoned before the replay, so the check refuses the graph and every step stays right.
    cuda_only(device)
    fault("drop_in_capture")
    losses, stats, weight = train(device, 6)
    if stats["cuda_fusion"].startswith("not used"):
        pytest.skip(f"no fusion on this machine: {stats['cuda_fusion']}")
    graph = stats["cuda_graph"]
    assert "capture self-check found" in graph and "differs" in graph, graph
    expected, expected_weight = eager(device, 6)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    np.testing.assert_allclose(weight, expected_weight, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stage,call", [("load", "cuModuleLoadData"), ("launch", "cuLaunchKernel")])
def test_a_fused_kernel_the_driver_rejects_falls_back_to_unfused_launches(device, fault, stage, call):
    cuda_only(device)
    fault(stage)
    losses, stats, weight = train(device, 5)
    if stats["cuda_fusion"].startswith("not used"):
        pytest.skip(f"no fusion on this machine: {stats['cuda_fusion']}")
    assert f"fused CUDA kernel: {call} failed" in stats["cuda_fusion"], stats["cuda_fusion"]
    if stage == "launch":
        assert "fell back to unfused launches" in stats["cuda_fusion"]
    expected, expected_weight = eager(device, 5)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    np.testing.assert_allclose(weight, expected_weight, rtol=1e-5, atol=1e-6)


def test_a_run_that_fell_back_keeps_its_own_memory_when_the_plan_moves_arena(device, fault):
    # The fallen-back run's local values live outside the arena; rebinding onto a larger arena
    # (what shape buckets do) must leave them there rather than overlap the arena's buffers.
    cuda_only(device)
    fault("launch")
    model = mlp(device)
    xs, ys = batches(device, 5)
    step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(xs[0], ys[0]))
    losses = [step(xs[0], ys[0]).item()]
    if "fell back to unfused launches" not in step.stats["cuda_fusion"]:
        pytest.skip(f"no fused run fell back here: {step.stats['cuda_fusion']}")
    need = step.plan.stats()["arena_bytes"]
    step.plan.bind_arena(fg.empty(need + 4096, dtype=fg.uint8, device=device))
    losses += [step(x, y).item() for x, y in zip(xs[1:], ys[1:])]
    expected, expected_weight = eager(device, 5)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    np.testing.assert_allclose(model[0].weight.cpu().numpy(), expected_weight, rtol=1e-5, atol=1e-6)
