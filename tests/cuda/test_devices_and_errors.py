"""Device selection and CUDA error state (review findings F7, F10, F11).

- F7: ops, FlowBuilder branch tasks on pool threads and compiled plans launch on their tensors'
  device whatever device is current; copies between GPUs wait for the source's stream. The
  cases that need two GPUs skip on one; the same code paths run on cuda:0 with one.
- F10: a Stream/Event query that answers "not ready" leaves no error behind for the next op.
- F11: a device-side index error is raised once and the claim flag is cleared before the
  synchronisation returns, so the next bad index (from any stream) is reported too; the record's
  first set-up happens outside any CUDA graph capture.
Every case here is a CUDA case: on the CPU it skips, saying why."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

from conftest import run_isolated


def cuda_only(device):
    if device == "cpu":
        pytest.skip("devices, streams and device-side errors are CUDA state; the CPU has none")


def two_gpus(device):
    cuda_only(device)
    if fg.cuda.device_count() < 2:
        pytest.skip(f"needs two GPUs, {fg.cuda.device_count()} visible")


# ---- F7 ----

def test_ops_on_the_second_gpu_run_there(device):
    two_gpus(device)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fg.tensor(a, device="cuda:1")
    y = (x * 2 + 1).relu() @ fg.tensor(a.T, device="cuda:1")
    assert str(y.device) == "cuda:1"
    np.testing.assert_allclose(y.numpy(), np.maximum(a * 2 + 1, 0) @ a.T, rtol=1e-5)


def test_split_branches_on_pool_threads_use_the_graphs_gpu(device):
    two_gpus(device)
    fg.manual_seed(0)
    g = (fg.flow(nn.Linear(6, 8)).split(nn.Linear(8, 5), nn.Sequential(nn.Linear(8, 5), nn.GELU()), nn.Linear(8, 5))
         .merge(fg.flow.Add()).build())
    x = fg.randn(5, 6)
    expected = g(x).numpy()
    g.to("cuda:1")
    out = g(x.to("cuda:1"))
    assert str(out.device) == "cuda:1"
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_a_compiled_step_on_the_second_gpu_trains_like_the_cpu(device):
    two_gpus(device)
    losses = {}
    for where in ("cpu", "cuda:1"):
        fg.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(where)
        opt = fg.optim.SGD(model.parameters(), lr=0.1)
        rng = np.random.default_rng(0)
        xs = [fg.tensor(rng.standard_normal((4, 8)).astype(np.float32), device=where) for _ in range(4)]
        ys = [fg.tensor(rng.integers(0, 3, 4), device=where) for _ in range(4)]
        step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
        losses[where] = [step(x, y).item() for x, y in zip(xs, ys)]
    np.testing.assert_allclose(losses["cuda:1"], losses["cpu"], rtol=1e-4)


def test_host_side_copies_and_profiling_select_the_tensors_gpu(device):
    # Review G3: raw:: helpers outside run_op (a transposed tensor's .cpu(), a step's input copies,
    # profile()'s events) launched on the current device with cuda:1's pointers.
    two_gpus(device)
    a = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)
    np.testing.assert_array_equal(fg.tensor(a, device="cuda:1").T.cpu().numpy(), a.T)
    np.testing.assert_array_equal(fg.tensor(a, device="cuda:1").T.contiguous().numpy(), a.T)
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(48, 16), nn.ReLU(), nn.Linear(16, 3)).to("cuda:1")
    x, y = fg.tensor(a, device="cuda:1"), fg.tensor(np.arange(64) % 3, device="cuda:1")
    step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.01), example_inputs=(x, y))
    records = step.profile(x, y)  # the warm-up call, timed
    step(x, y)
    records += step.profile(x, y)  # inside a captured graph
    assert all(r["ms"] >= 0 for r in records)


def test_a_copy_between_gpus_waits_for_the_work_that_made_the_source(device):
    two_gpus(device)
    side = fg.cuda.Stream("cuda:0")
    a = fg.randn(2048, 2048, device="cuda:0")
    with fg.cuda.stream(side):  # the source is made on a side stream of cuda:0
        y = a
        for _ in range(20):
            y = (y @ a) * (1.0 / 2048)
        copied = y.to("cuda:1")  # queued on cuda:1 while cuda:0 is still busy
    np.testing.assert_allclose(copied.numpy(), y.numpy(), rtol=0, atol=0)


def test_ops_select_the_device_of_their_tensors_on_one_gpu(device):
    cuda_only(device)  # the same dispatch path as with two GPUs: the device guard is a no-op here
    a = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
    x = fg.tensor(a, device=device)
    np.testing.assert_allclose(((x * 3).tanh() @ x.T).numpy(), np.tanh(a * 3) @ a.T, rtol=1e-5, atol=1e-6)


# ---- F10 ----

def test_a_not_ready_query_leaves_no_error_for_the_next_op(device):
    cuda_only(device)
    s = fg.cuda.Stream()
    a = fg.randn(4096, 4096, device=device)
    with fg.cuda.stream(s):
        y = a
        for _ in range(100):
            y = a @ a
        done = fg.cuda.Event()
        done.record(s)
    assert not s.query()  # 100 GEMMs of 4096^3 are still running
    assert not done.query()
    np.testing.assert_array_equal((fg.ones(3, device=device) + 1).numpy(), [2.0, 2.0, 2.0])
    s.synchronize()
    assert s.query() and done.query()
    assert y.shape == (4096, 4096)


# ---- F11 ----

def test_every_bad_index_is_reported_once_even_from_a_side_stream(device):
    cuda_only(device)
    x = fg.ones(4, 3).to(device)
    side = fg.cuda.Stream()
    for bad in (7, 9, -9):
        with fg.cuda.stream(side):
            fg.index_select(x, 0, fg.tensor([0, bad]).to(device))
        with pytest.raises(fg.IndexOutOfRangeError, match=f"index_select: index {bad} is out of range"):
            fg.cuda.synchronize()
        fg.cuda.synchronize()  # raised once: the record is clear
    ok = fg.index_select(x, 0, fg.tensor([3]).to(device))
    np.testing.assert_array_equal(ok.numpy(), np.ones((1, 3), np.float32))


def test_a_step_with_checking_kernels_is_captured_from_a_fresh_process(device):
    cuda_only(device)
    # A fresh process, and profiling captures the step on its first call (no warm-up): capture
    # prepares the record before it begins (tracing may have made it already).
    out = run_isolated("""
        from flowgrad import nn
        import flowgrad.nn.functional as F
        fg.manual_seed(0)
        model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 10)).to("cuda")
        opt = fg.optim.SGD(model.parameters(), lr=0.1)
        ids = fg.tensor([1, 2, 3, 4], device="cuda")
        step = fg.compile(lambda i, t: F.cross_entropy(model(i), t), optimizer=opt, example_inputs=(ids, ids))
        step.profile(ids, ids)
        step(ids, ids)
        step(ids, ids)
        print(step.stats["cuda_graph"])
    """)
    assert out.strip().startswith("captured: one CUDA graph of"), out
