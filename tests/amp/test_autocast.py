"""fg.autocast: which ops run in the low dtype and which in float32, gradients back to float32
parameters, and training under autocast tracking float32 training."""
import threading

import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F

LOW = [fg.bfloat16, fg.float16]


def inputs(device, *shapes, dtype=fg.float32):
    fg.manual_seed(0)
    return [fg.randn(*s, dtype=dtype, device=device) for s in shapes]


@pytest.mark.parametrize("low", LOW)
def test_gemm_ops_run_in_the_low_dtype(device, low):
    x, w, b, img, k = inputs(device, (5, 7), (7, 3), (3,), (2, 3, 6, 6), (4, 3, 3, 3))
    q = fg.randn(2, 2, 5, 8, device=device)
    with fg.autocast(device, dtype=low):
        assert (x @ w).dtype == low
        assert fg.matmul(x.half(), w).dtype == low  # the other half type is cast too
        assert F.linear(x, w.t(), b).dtype == low  # bias included, as torch's linear
        assert fg.nn.Linear(7, 3).to(device)(x).dtype == low
        assert F.conv2d(img, k).dtype == low
        assert F.scaled_dot_product_attention(q, q, q).dtype == low


def test_range_sensitive_ops_run_in_float32(device):
    x, = inputs(device, (6, 10))
    with fg.autocast(device):
        h = x @ fg.eye(10, device=device)
        assert h.dtype == fg.bfloat16
        for out in (h.sum(), h.mean(), h.var(), fg.logsumexp(h, 1), h.exp(), h.abs().log(), h ** 2,
                    F.softmax(h, -1), F.log_softmax(h, -1), F.softplus(h), F.layer_norm(h, (10,)),
                    F.rms_norm(h, (10,)), F.mse_loss(h, h), F.cross_entropy(h, fg.tensor([1, 2, 3, 4, 5, 6], device=device))):
            assert out.dtype == fg.float32


def test_other_ops_follow_their_inputs(device):
    x, = inputs(device, (4, 4))
    with fg.autocast(device):
        h = x @ x
        assert h.relu().dtype == fg.bfloat16 and F.gelu(h).dtype == fg.bfloat16
        assert (h * 2).dtype == fg.bfloat16 and h.reshape(16).dtype == fg.bfloat16
        assert (h + x).dtype == fg.float32  # promotion: the widest wins
        assert fg.cat([h, x]).dtype == fg.float32
        d = fg.randn(3, 3, dtype=fg.float64, device=device)
        assert (d @ d).dtype == fg.float64 and d.sum().dtype == fg.float64  # float64 is never cast


def test_autocast_covers_only_its_device_type(device):
    other = "cuda" if device == "cpu" else "cpu"
    x, = inputs(device, (3, 3))
    with fg.autocast(other):
        assert (x @ x).dtype == fg.float32
    assert (x @ x).dtype == fg.float32  # restored on exit


def test_nesting_disabling_decorator_and_threads():
    x, = inputs("cpu", (3, 3))
    with fg.autocast("cpu"):
        with fg.autocast("cpu", enabled=False):
            assert (x @ x).dtype == fg.float32 and not fg.is_autocast_enabled("cpu")
        with fg.autocast("cpu", dtype=fg.float16):
            assert (x @ x).dtype == fg.float16
        assert (x @ x).dtype == fg.bfloat16 and fg.get_autocast_dtype("cpu") == fg.bfloat16
        seen = []
        worker = threading.Thread(target=lambda: seen.append((x @ x).dtype))
        worker.start()
        worker.join()
        assert seen == [fg.float32]  # the state is per thread

    @fg.autocast("cpu")
    def forward(a):
        return a @ a
    assert forward(x).dtype == fg.bfloat16 and (x @ x).dtype == fg.float32
    with pytest.raises(ZeroDivisionError):
        with fg.autocast("cpu"):
            1 / 0
    assert not fg.is_autocast_enabled("cpu")


def test_autocast_errors():
    with pytest.raises(fg.InvalidArgumentError, match="device_type must be 'cpu' or 'cuda', got 'tpu'"):
        fg.autocast("tpu")
    with pytest.raises(fg.InvalidArgumentError, match="dtype must be fg.bfloat16 or fg.float16"):
        fg.autocast("cpu", dtype=fg.float32)
    with pytest.raises(fg.InvalidArgumentError, match="autocast: dtype must be bfloat16 or float16, got float64"):
        fg._core._set_autocast("cpu", True, fg.float64)


def test_backward_gives_float32_parameter_gradients(device):
    x, w1, w2 = inputs(device, (16, 12), (12, 20), (20, 4))
    w1.requires_grad_(True)
    w2.requires_grad_(True)
    with fg.autocast(device):
        loss = F.mse_loss((x @ w1).relu() @ w2, fg.zeros(16, 4, device=device))
        assert loss.dtype == fg.float32
    loss.backward()
    assert w1.grad.dtype == fg.float32 and w2.grad.dtype == fg.float32
    a, b = w1.grad.cpu().numpy(), w2.grad.cpu().numpy()
    w1.grad = w2.grad = None
    F.mse_loss((x @ w1).relu() @ w2, fg.zeros(16, 4, device=device)).backward()
    np.testing.assert_allclose(a, w1.grad.cpu().numpy(), rtol=0.05, atol=0.05 * np.abs(a).max())
    np.testing.assert_allclose(b, w2.grad.cpu().numpy(), rtol=0.05, atol=0.05 * np.abs(b).max())


def train(device, use_autocast, steps=40):
    fg.manual_seed(3)
    model = fg.nn.Sequential(fg.nn.Linear(8, 32), fg.nn.ReLU(), fg.nn.Linear(32, 1)).to(device)
    opt = fg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = fg.randn(64, 8, device=device)
    y = (x[:, :1] * 2.0 - x[:, 1:2]).sin()
    losses = []
    for _ in range(steps):
        with fg.autocast(device, enabled=use_autocast):
            loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(p.dtype == fg.float32 for p in model.parameters())
    return np.array(losses)


def test_training_under_autocast_tracks_float32(device):
    mixed, full = train(device, True), train(device, False)
    assert full[-1] < 0.3 * full[0]  # the float32 run learns
    np.testing.assert_allclose(mixed, full, rtol=0.1, atol=0.02 * full[0])
    assert not np.array_equal(mixed, full)  # the mixed run did compute in bfloat16
