"""cuBLAS workspaces (review findings F9, F13): one per stream, taken from the caching allocator
(so memory_stats counts it), sized like PyTorch's (32 MiB on sm_90, FLOWGRAD_CUBLAS_WORKSPACE_MB
overrides), released with the stream; each captured plan has its own, so two compiled steps
replayed at once on two streams do not share one. GPU only: the cases skip here."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

MiB = 1 << 20


def cuda_only(device):
    if device == "cpu":
        pytest.skip("cuBLAS workspaces exist only on CUDA")


def test_workspace_per_stream_is_counted_and_released_with_the_stream(device, monkeypatch):
    cuda_only(device)
    monkeypatch.setenv("FLOWGRAD_CUBLAS_WORKSPACE_MB", "24")
    a = fg.randn(8, 8, device=device)
    fg.cuda.synchronize()
    before = fg.cuda.memory_allocated()
    s = fg.cuda.Stream()
    with fg.cuda.stream(s):
        c = a @ a  # the first gemm on s makes its workspace
    s.synchronize()
    grown = fg.cuda.memory_allocated() - before
    assert 24 * MiB <= grown < 25 * MiB  # the workspace, plus c's block
    assert fg.cuda.memory_reserved() >= fg.cuda.memory_allocated()
    with fg.cuda.stream(s):
        c = a @ c  # the same stream: no second workspace
    assert fg.cuda.memory_allocated() - before < 25 * MiB
    del s
    assert fg.cuda.memory_allocated() - before < MiB  # released with the stream
    np.testing.assert_allclose(c.cpu().numpy(), a.cpu().numpy() @ (a.cpu().numpy() @ a.cpu().numpy()), rtol=1e-4,
                               atol=1e-4)


def test_default_workspace_size_follows_the_architecture(device, monkeypatch):
    cuda_only(device)
    monkeypatch.delenv("FLOWGRAD_CUBLAS_WORKSPACE_MB", raising=False)
    a = fg.randn(8, 8, device=device)
    fg.cuda.synchronize()
    before = fg.cuda.memory_allocated()
    s = fg.cuda.Stream()
    with fg.cuda.stream(s):
        c = a @ a
    grown = fg.cuda.memory_allocated() - before - 512  # the product's block
    assert c.shape == (8, 8)
    assert grown in (32 * MiB, 4096 * 1024 * 2 + 16 * 1024 * 8)  # sm_90 and later, earlier GPUs


def compiled_mlp(device, seed):
    fg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = fg.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed)
    xs = [fg.tensor(rng.standard_normal((128, 64)).astype(np.float32), device=device) for _ in range(12)]
    ys = [fg.tensor(rng.integers(0, 10, 128), device=device) for _ in range(12)]
    return model, fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0])), xs, ys


def test_two_captured_steps_replayed_at_once_on_two_streams_match_sequential_runs(device):
    """The reviewer's F13 check: each graph has its own workspace, so interleaved replays on two
    streams give what sequential runs give."""
    cuda_only(device)

    def run(interleaved):
        (m1, step1, xs1, ys1), (m2, step2, xs2, ys2) = compiled_mlp(device, 1), compiled_mlp(device, 2)
        s1, s2 = fg.cuda.Stream(), fg.cuda.Stream()
        for s in (s1, s2):
            s.wait_stream(fg.cuda.current_stream())
        losses = []
        for i in range(12):
            for step, s, xs, ys in ((step1, s1, xs1, ys1), (step2, s2, xs2, ys2)):
                with fg.cuda.stream(s if interleaved else None):
                    losses.append(step(xs[i], ys[i]))
            if not interleaved:
                fg.cuda.synchronize()
        fg.cuda.synchronize()
        assert step1.stats["cuda_graph"].startswith("captured") and step2.stats["cuda_graph"].startswith("captured")
        return [loss.item() for loss in losses], [p.cpu().numpy() for p in list(m1.parameters()) + list(m2.parameters())]

    losses_a, params_a = run(True)
    losses_b, params_b = run(False)
    np.testing.assert_allclose(losses_a, losses_b, rtol=1e-6, atol=1e-7)
    for p, q in zip(params_a, params_b):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)
