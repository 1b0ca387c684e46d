"""The plan executor: a warm plan's kernels allocate nothing, ops that need the host are refused by
flag, and fusion gives the same numbers as running each op alone."""
import numpy as np
import pytest
from test_compile import MODELS, OPTIMIZERS, build, data, tensors

import flowgrad as fg
import flowgrad.nn.functional as F


@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_warm_plan_kernels_allocate_nothing(kind, device):
    xs, ys = tensors(*data(kind, np.random.default_rng(0), 4), device)
    model, opt, _ = build(kind, OPTIMIZERS["adam"], device)
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    step(xs[0], ys[0])  # warm-up: measures the temporaries of the kernel wrappers
    for x, y in zip(xs[1:], ys[1:]):
        step(x, y)
        stats = step.stats
        assert stats["allocations"] == 0, stats["allocating"]
        assert stats["allocating"] == []


def test_cold_plan_counts_what_its_kernels_allocate():
    # layer_norm of a transposed view: the wrapper copies it into a contiguous temporary. The
    # counter sees that copy on the first run; from then on it comes from the plan's scratch block.
    model = fg.nn.Linear(5, 3)
    x, y = fg.randn(4, 5), fg.randn(3, 4)
    step = fg.compile(model, lambda out, target: (fg.nn.functional.layer_norm(out.t(), (4,)) * target).sum(), None,
                      example_inputs=(x, y))
    first = step(x, y)
    assert step.stats["allocations"] > 0
    assert "layer_norm" in [op for _, op in step.stats["allocating"]]
    second = step(x, y)
    assert step.stats["allocations"] == 0 and step.stats["allocating"] == []
    h = (x.numpy() @ model.weight.numpy().T + model.bias.numpy()).T.astype(np.float64)
    normed = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose([first.item(), second.item()], [(normed * y.numpy()).sum()] * 2, rtol=1e-4, atol=1e-5)


class Embed(fg.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = fg.nn.Embedding(10, 4)

    def forward(self, idx):
        return self.table(idx).sum()


def test_index_ops_compile_and_validate_on_every_replay(device):
    """gather/index_select check indices on every replay: at once on the CPU, on the device on CUDA (an
    error flag raised at the next host read), so neither needs a host sync inside the step."""
    idx = fg.tensor(np.array([[1, 2], [3, 9]])).to(device)
    model = Embed().to(device)
    step = fg.compile(model, example_inputs=(idx,))
    np.testing.assert_allclose(step(idx).item(), model(idx).item(), rtol=1e-6)
    with pytest.raises(fg.IndexOutOfRangeError, match="index 10 is out of range"):
        step(fg.tensor(np.array([[1, 2], [3, 10]])).to(device)).item()


class NonzeroCount(fg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = fg.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).sum() + fg.nonzero(x > 0).shape[0]


def test_nonzero_is_refused_at_compile_time(device):
    """nonzero's output size is its count of true values, read on the host (on CUDA its one sync):
    a plan needs static shapes, so compile refuses it by flag (kDataDependent, checked before
    kHostSync) on every device, before anything runs."""
    x = fg.randn(3, 4).to(device)
    with pytest.raises(fg.InvalidArgumentError, match="'nonzero' has an output shape that depends on its input values"):
        fg.compile(NonzeroCount().to(device), example_inputs=(x,))


class Broadcasts(fg.nn.Module):
    """Elementwise chains through per-feature scale/shift broadcasts and a transposed operand."""

    def __init__(self):
        super().__init__()
        self.fc = fg.nn.Linear(64, 64)
        self.scale = fg.nn.Parameter(fg.randn(64) * 0.1 + 1.0)
        self.shift = fg.nn.Parameter(fg.randn(1, 64) * 0.1)

    def forward(self, x):
        h = self.fc(x)
        y = ((h * self.scale + self.shift).tanh() * h - self.shift).sigmoid()
        t = (h.T * 2.0 + 1.0).relu()  # (64, rows): another run shape
        z = (y + t.T * 0.5).exp().clamp(max=4.0) * self.scale
        return (z * z).mean()


def train_broadcasts(xs, fusion, monkeypatch):
    if not fusion:
        monkeypatch.setenv("FLOWGRAD_NO_FUSION", "1")
    fg.manual_seed(0)
    model = Broadcasts()
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    step = fg.compile(model, optimizer=opt, example_inputs=(xs[0],))
    monkeypatch.delenv("FLOWGRAD_NO_FUSION", raising=False)
    losses = [step(x).item() for x in xs]
    return losses, [p.numpy() for p in model.parameters()], step


@pytest.mark.parametrize("rows", [1000, 129])  # several tiles of rows, and a ragged last tile
def test_fusion_through_broadcasts_gives_identical_numbers(rows, monkeypatch):
    rng = np.random.default_rng(7)
    xs = [fg.tensor(rng.standard_normal((rows, 64)).astype(np.float32)) for _ in range(3)]
    fused, fused_params, step = train_broadcasts(xs, True, monkeypatch)
    plain, plain_params, plain_step = train_broadcasts(xs, False, monkeypatch)
    assert fused == plain
    for a, b in zip(fused_params, plain_params):
        np.testing.assert_array_equal(a, b)
    assert plain_step.stats["fused"] == 0
    ir = step.ir()
    # the broadcast multiply by `scale` and the add of `shift` join runs instead of ending them
    broadcast_ops = [ins for ins in ir if ins["shape"] == [rows, 64] and ins["op"] in ("mul", "add", "sub")
                     and any(shape in ([64], [1, 64]) for shape in ins["input_shapes"])]
    assert broadcast_ops and all(ins["run"] is not None for ins in broadcast_ops)
    assert step.stats["fused"] >= 10
    step.plan.check_memory()


NVRTC, NVRTC_MISSING = fg._core.plan.nvrtc_available()


def fused_cpu_step():
    fg.manual_seed(0)
    model = Broadcasts()
    return fg.compile(model, optimizer=fg.optim.SGD(model.parameters(), lr=0.1),
                      example_inputs=(fg.randn(300, 64),))


def test_fused_runs_generate_cuda_source_from_the_shared_functors():
    plan = fused_cpu_step().plan
    runs = {ins["run"] for ins in plan.ir() if ins["run"] is not None}
    assert runs
    name, source = plan.fused_cuda_source(min(runs))
    assert name == f"fg_fused_{min(runs)}"
    assert f'extern "C" __global__ void {name}(' in source
    assert "struct Sigmoid" in source  # kernels/common/functors.h, embedded at build time
    assert "fg::fn::" in source
    with pytest.raises(fg.IndexOutOfRangeError, match="fused_cuda_source: run 999"):
        plan.fused_cuda_source(999)


@pytest.mark.skipif(not NVRTC, reason=f"NVRTC is not available here: {NVRTC_MISSING}")
@pytest.mark.parametrize("arch", [80, 90])
def test_nvrtc_compiles_every_fused_run_to_ptx(arch):
    plan = fused_cpu_step().plan
    runs = sorted({ins["run"] for ins in plan.ir() if ins["run"] is not None})
    ops = {ins["op"] for ins in plan.ir() if ins["run"] is not None}
    assert len(runs) >= 3 and {"mul", "add", "tanh", "sigmoid"} <= ops
    for run in runs:
        name, source = plan.fused_cuda_source(run)
        ptx = fg._core.plan.compile_ptx(source, name, arch)
        assert f".target sm_{arch}" in ptx
        assert f".visible .entry {name}(" in ptx


@pytest.mark.skipif(not NVRTC, reason=f"NVRTC is not available here: {NVRTC_MISSING}")
def test_nvrtc_errors_carry_the_compiler_log():
    with pytest.raises(fg.FlowgradError, match="NVRTC could not compile the fused CUDA kernel broken"):
        fg._core.plan.compile_ptx('extern "C" __global__ void broken() { undefined_name(); }', "broken", 80)


def test_an_input_no_instruction_reads_keeps_bytes_of_its_own():
    # The target is ignored by the loss: its slot is still written every call, and must not land
    # on the bytes of the other input (it did: the first element of x was zeroed).
    model = fg.nn.Linear(5, 3)
    x = fg.randn(4, 5)
    step = fg.compile(model, lambda out, _: out.sum(), None, example_inputs=(x, fg.zeros(1)))
    expected = (x.numpy() @ model.weight.numpy().T + model.bias.numpy()).sum()
    np.testing.assert_allclose(step(x, fg.full((1,), 7.0)).item(), expected, rtol=1e-5)
    buffers = {b["name"]: b for b in step.plan.buffers()}
    assert buffers["x0"]["offset"] != buffers["x1"]["offset"]
