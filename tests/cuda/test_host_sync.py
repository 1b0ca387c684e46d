"""The host-sync counter (fg.cuda.sync_count, step.stats["host_syncs"]): every host wait on the
GPU counts one for its thread. On the CPU the counter exists and stays 0; on a GPU an eager
.item() counts exactly one, and a captured AdamW step with record/collect on waits for nothing
per call (the observations are read by flush, with one copy for every pending tag)."""
import threading

import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def cuda_only(device):
    if device == "cpu":
        pytest.skip("host waits on the GPU exist only on CUDA; the CPU case checks the counter stays 0")


def tagged_mlp(device):
    fg.manual_seed(0)
    return (fg.FlowBuilder(nn.Linear(20, 32)).through(nn.ReLU()).through(nn.Linear(32, 5)).tag("logits")
            .build().to(device))


def batches(device, n):
    rng = np.random.default_rng(5)
    xs = [fg.tensor(rng.standard_normal((16, 20)).astype(np.float32), device=device) for _ in range(n)]
    ys = [fg.tensor(rng.integers(0, 5, 16), device=device) for _ in range(n)]
    return xs, ys


def test_counter_is_an_int_and_cpu_work_never_counts():
    before = fg.cuda.sync_count()
    assert isinstance(before, int) and before >= 0
    x = fg.randn(4, 3)
    x.sum().item()
    x.numpy()
    fg.cuda.synchronize()  # a no-op without a GPU; with one it waits and counts
    expected = before + (1 if fg.cuda.is_available() else 0)
    assert fg.cuda.sync_count() == expected


def test_counter_is_per_thread():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(fg.cuda.sync_count()))
    thread.start()
    thread.join()
    assert seen == [0]  # a new thread starts from zero, whatever this one counted


def test_cpu_plan_reports_zero_host_syncs():
    g = tagged_mlp("cpu")
    opt = fg.optim.AdamW(g.parameters(), lr=1e-3)
    xs, ys = batches("cpu", 3)
    step = fg.compile(g, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    assert step.stats["host_syncs"] == 0  # before any call
    for x, y in zip(xs, ys):
        step(x, y)
        g.collect("logits")
        assert step.stats["host_syncs"] == 0


def test_eager_item_on_cuda_counts_exactly_one(device):
    cuda_only(device)
    x = fg.ones(3, device=device) * 2
    fg.cuda.synchronize()
    before = fg.cuda.sync_count()
    assert x.sum().item() == 6.0
    assert fg.cuda.sync_count() == before + 1
    x.cpu()
    assert fg.cuda.sync_count() == before + 2


def test_captured_adamw_step_with_observation_never_waits(device):
    cuda_only(device)
    g = tagged_mlp(device)
    opt = fg.optim.AdamW(g.parameters(), lr=3e-3, weight_decay=0.1)
    xs, ys = batches(device, 8)
    step = fg.compile(g, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    losses = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        before = fg.cuda.sync_count()
        loss = step(x, y)
        g.record("loss", loss)
        g.collect("logits")
        losses.append(loss)
        if i >= 2:  # after the warm-up call and the capture
            assert step.stats["cuda_graph"].startswith("captured"), step.stats["cuda_graph"]
            assert step.stats["host_syncs"] == 0
            assert fg.cuda.sync_count() == before, "a host wait in a captured step with record/collect"
    before = fg.cuda.sync_count()
    flushed = g.flush()
    assert fg.cuda.sync_count() == before + 1  # one copy for every pending tag
    expected = np.mean([loss.item() for loss in losses])
    assert flushed["loss"] == pytest.approx(expected, rel=1e-12)
    assert set(flushed) == {"loss", "logits"}


def test_scheduled_adamw_step_writes_its_hyper_parameters_without_a_wait(device):
    """Review G10: the hyper-parameters a scheduler changes before every call, and the Philox pair of
    a step with dropout, are staged in pinned memory, so the host never waits for the stream; 20
    calls cycle through every staging slot more than once, and the parameters match the CPU's."""
    def train(on, p=0.0):
        fg.manual_seed(3)
        model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(p), nn.Linear(32, 5)).to(on)
        opt = fg.optim.AdamW(model.parameters(), lr=3e-3)
        sched = fg.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        xs, ys = batches(on, 20)
        step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
        waits = []
        for i, (x, y) in enumerate(zip(xs, ys)):
            before = fg.cuda.sync_count()
            step(x, y)
            sched.step()
            waits.append(fg.cuda.sync_count() - before if i >= 2 else 0)
        return [p.cpu().numpy() for p in model.parameters()], waits, step.stats

    cuda_only(device)
    for p in (0.0, 0.1):
        got, waits, stats = train(device, p)
        assert stats["cuda_graph"].startswith("captured"), stats["cuda_graph"]
        assert waits == [0] * 20, f"dropout {p}"
    got, _, _ = train(device)
    expected, _, _ = train("cpu")
    for p, q in zip(got, expected):
        np.testing.assert_allclose(p, q, rtol=1e-4, atol=1e-5)
