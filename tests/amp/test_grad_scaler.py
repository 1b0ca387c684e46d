"""fg.amp.GradScaler: scaling, unscaling, skipped steps on inf/NaN, growth and backoff."""
import math

import numpy as np
import pytest

import flowgrad as fg


def setup(device, growth_interval=3):
    fg.manual_seed(0)
    w = fg.randn(4, 3, device=device, requires_grad=True)
    b = fg.randn(3, device=device, requires_grad=True)
    opt = fg.optim.SGD([w, b], lr=0.1)
    scaler = fg.amp.GradScaler(init_scale=1024.0, growth_interval=growth_interval)
    return w, b, opt, scaler


def backward(scaler, w, b, x, poison=None):
    loss = ((x @ w + b) ** 2).sum()
    scaler.scale(loss).backward()
    if poison is not None:
        w.grad = w.grad * fg.tensor(poison, device=w.device)  # an inf or NaN in one gradient entry
    return loss


def poisoned(value, device):
    mask = np.ones((4, 3), dtype=np.float32)
    mask[1, 2] = value
    return mask


def test_scaled_gradients_are_unscaled_before_the_step(device):
    w, b, opt, scaler = setup(device)
    x = fg.randn(5, 4, device=device)
    before = w.detach().cpu().numpy().copy()
    loss = backward(scaler, w, b, x)
    scaled = w.grad.cpu().numpy()
    scaler.unscale_(opt)
    np.testing.assert_allclose(w.grad.cpu().numpy(), scaled / 1024.0, rtol=1e-6)
    scaler.step(opt)
    scaler.update()
    np.testing.assert_allclose(w.detach().cpu().numpy(), before - 0.1 * scaled / 1024.0, rtol=1e-5, atol=1e-6)
    assert scaler.scale(loss).item() == pytest.approx(loss.item() * 1024.0, rel=1e-6)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_a_non_finite_gradient_skips_the_step_and_backs_off(device, bad):
    w, b, opt, scaler = setup(device)
    x = fg.randn(5, 4, device=device)
    before = [w.detach().cpu().numpy().copy(), b.detach().cpu().numpy().copy()]
    backward(scaler, w, b, x, poisoned(bad, device))
    assert scaler.step(opt) is None
    scaler.update()
    np.testing.assert_array_equal(w.detach().cpu().numpy(), before[0])
    np.testing.assert_array_equal(b.detach().cpu().numpy(), before[1])
    assert scaler.get_scale() == 512.0
    opt.zero_grad()
    backward(scaler, w, b, x)
    scaler.step(opt)
    scaler.update()
    assert not np.array_equal(w.detach().cpu().numpy(), before[0])  # a clean step runs again
    assert scaler.get_scale() == 512.0


def test_scale_grows_after_growth_interval_clean_steps(device):
    w, b, opt, scaler = setup(device, growth_interval=3)
    x = fg.randn(5, 4, device=device) * 0.01
    scales = []
    for step in range(7):
        opt.zero_grad()
        backward(scaler, w, b, x, poisoned(math.inf, device) if step == 4 else None)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    assert scales == [1024.0, 1024.0, 2048.0, 2048.0, 1024.0, 1024.0, 1024.0]


def test_state_dict_round_trip_and_disabled_scaler(device):
    w, b, opt, scaler = setup(device, growth_interval=2)
    x = fg.randn(5, 4, device=device)
    backward(scaler, w, b, x)
    scaler.step(opt)
    scaler.update()
    state = scaler.state_dict()
    assert state == {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2,
                     "_growth_tracker": 1}
    other = fg.amp.GradScaler()
    other.load_state_dict(state)
    assert other.state_dict() == state
    off = fg.cuda.amp.GradScaler(enabled=False)
    loss = ((x @ w) ** 2).sum()
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}


def test_grad_scaler_errors():
    w, b, opt, scaler = setup("cpu")
    backward(scaler, w, b, fg.randn(5, 4))
    scaler.unscale_(opt)
    with pytest.raises(fg.InvalidArgumentError, match="unscale_: already called for this optimizer"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(fg.InvalidArgumentError, match="step: already called for this optimizer"):
        scaler.step(opt)
    with pytest.raises(fg.InvalidArgumentError, match="GradScaler: needs init_scale > 0"):
        fg.amp.GradScaler(init_scale=0.0)
    with pytest.raises(fg.InvalidArgumentError, match="the state_dict is empty"):
        fg.amp.GradScaler().load_state_dict({})


def test_float16_training_with_autocast_and_scaler(device):
    fg.manual_seed(1)
    model = fg.nn.Sequential(fg.nn.Linear(6, 16), fg.nn.Tanh(), fg.nn.Linear(16, 1)).to(device)
    opt = fg.optim.Adam(model.parameters(), lr=0.02)
    scaler = fg.amp.GradScaler(init_scale=2.0 ** 20, growth_interval=5)
    x = fg.randn(32, 6, device=device)
    y = x.sum(1, keepdim=True).tanh()
    losses = []
    for _ in range(30):
        with fg.autocast(device, dtype=fg.float16):
            loss = fg.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
