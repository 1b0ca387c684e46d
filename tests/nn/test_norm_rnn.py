"""BatchNorm1d/2d, GroupNorm, LSTM and GRU: forward against PyTorch (weights copied) and NumPy,
float64 gradchecks, train/eval behaviour, running statistics, state_dict names, errors."""
import numpy as np
import pytest
try:  # the reference implementation; CI installs no PyTorch, so those comparisons skip there
    import torch
except ImportError:
    torch = None

import flowgrad as fg
from flowgrad import nn

from conftest import as_float64, check_parameter_grads, on


needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: the comparison with torch.nn is skipped")

def to_torch(t):
    return torch.from_numpy(np.ascontiguousarray(t.detach().cpu().numpy()))


def copy_from_torch(fg_module, torch_module, device="cpu"):
    """Loads torch's state_dict into ours: the names must match exactly."""
    state = {k: fg.tensor(v.detach().numpy()) for k, v in torch_module.state_dict().items()}
    assert sorted(state) == sorted(fg_module.state_dict())
    fg_module.load_state_dict(state)
    return fg_module.to(device)


def numpy_batch_norm(x, weight, bias, eps):
    dims = tuple(d for d in range(x.ndim) if d != 1)
    shape = [1] * x.ndim
    shape[1] = -1
    mean, var = x.mean(axis=dims, keepdims=True), x.var(axis=dims, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight.reshape(shape) + bias.reshape(shape)


# ------------------------------------------------------------------------------------------
# BatchNorm

@needs_torch
@pytest.mark.parametrize("cls, shape", [(nn.BatchNorm1d, (7, 3)), (nn.BatchNorm1d, (5, 3, 9)),
                                        (nn.BatchNorm2d, (4, 3, 5, 6))])
def test_batch_norm_matches_torch_over_training_steps_then_eval(rng, device, cls, shape):
    ours = cls(3, eps=1e-3, momentum=0.2).to(device)
    theirs = getattr(torch.nn, cls.__name__)(3, eps=1e-3, momentum=0.2)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(rng.uniform(0.5, 1.5, 3)))
        theirs.bias.copy_(torch.tensor(rng.uniform(-1, 1, 3)))
    copy_from_torch(ours, theirs, device)
    for _ in range(3):
        x = rng.normal(1.0, 2.0, shape).astype(np.float32)
        y = ours(on(device, fg.tensor(x)))
        fg.testing.assert_close(y, theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
        fg.testing.assert_close(y, numpy_batch_norm(x.astype(np.float64), theirs.weight.detach().numpy(),
                                                    theirs.bias.detach().numpy(), 1e-3), rtol=1e-4, atol=1e-4)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        fg.testing.assert_close(getattr(ours, name), getattr(theirs, name).numpy(), rtol=1e-5, atol=1e-6)
    assert int(ours.num_batches_tracked.item()) == 3
    ours.eval(), theirs.eval()
    x = rng.normal(size=shape).astype(np.float32)
    fg.testing.assert_close(ours(on(device, fg.tensor(x))), theirs(torch.from_numpy(x)).detach().numpy(),
                            rtol=1e-4, atol=1e-5)


def test_batch_norm_running_update_uses_unbiased_variance(rng):
    bn = nn.BatchNorm1d(2, momentum=0.5)
    x = rng.normal(size=(6, 2))
    bn(fg.tensor(x, dtype=fg.float32))
    fg.testing.assert_close(bn.running_mean, 0.5 * x.mean(0), rtol=1e-5, atol=1e-6)
    fg.testing.assert_close(bn.running_var, 0.5 + 0.5 * x.var(0, ddof=1), rtol=1e-5, atol=1e-6)


@needs_torch
def test_batch_norm_cumulative_average_when_momentum_is_none(rng):
    ours, theirs = nn.BatchNorm1d(4, momentum=None), torch.nn.BatchNorm1d(4, momentum=None)
    batches = [rng.normal(size=(5, 4)).astype(np.float32) for _ in range(4)]
    for x in batches:
        ours(fg.tensor(x)), theirs(torch.from_numpy(x))
    fg.testing.assert_close(ours.running_mean, np.mean([x.mean(0) for x in batches], axis=0), rtol=1e-5, atol=1e-6)
    fg.testing.assert_close(ours.running_var, theirs.running_var.numpy(), rtol=1e-5, atol=1e-6)
    assert "momentum=None" in repr(ours)


def test_batch_norm_without_running_stats_or_affine(rng):
    bn = nn.BatchNorm2d(3, affine=False, track_running_stats=False)
    assert bn.weight is None and bn.running_mean is None and list(bn.state_dict()) == []
    x = rng.normal(size=(2, 3, 4, 4)).astype(np.float32)
    expected = numpy_batch_norm(x.astype(np.float64), np.ones(3), np.zeros(3), 1e-5)
    fg.testing.assert_close(bn(fg.tensor(x)), expected, rtol=1e-4, atol=1e-5)
    bn.eval()  # no running statistics: evaluation keeps using the batch's
    fg.testing.assert_close(bn(fg.tensor(x)), expected, rtol=1e-4, atol=1e-5)


def test_batch_norm_eval_leaves_running_stats_and_uses_them(rng):
    bn = nn.BatchNorm1d(3).eval()
    with fg.no_grad():
        bn.running_mean.copy_(fg.tensor([1.0, -1.0, 0.5]))
        bn.running_var.copy_(fg.tensor([4.0, 0.25, 1.0]))
    x = rng.normal(size=(1, 3)).astype(np.float32)  # one sample is fine in eval
    fg.testing.assert_close(bn(fg.tensor(x)), (x - [1.0, -1.0, 0.5]) / np.sqrt(np.array([4.0, 0.25, 1.0]) + 1e-5),
                            rtol=1e-5, atol=1e-6)
    assert int(bn.num_batches_tracked.item()) == 0


def test_batch_norm_gradcheck_train_and_eval(rng):
    for cls, shape in [(nn.BatchNorm1d, (4, 3)), (nn.BatchNorm2d, (3, 2, 3, 2))]:
        bn = as_float64(cls(shape[1]))
        with fg.no_grad():
            bn.weight.copy_(fg.tensor(rng.uniform(0.5, 1.5, shape[1])))
        x = fg.tensor(rng.normal(size=shape), dtype=fg.float64, requires_grad=True)
        for mode in (True, False):
            bn.train(mode)
            assert fg.testing.gradcheck(bn, [x])
            check_parameter_grads(lambda: bn(x.detach()), [bn.weight, bn.bias])


@needs_torch
def test_batch_norm_state_dict_names_match_torch():
    assert list(nn.BatchNorm2d(3).state_dict()) == list(torch.nn.BatchNorm2d(3).state_dict())
    assert nn.BatchNorm2d(3).num_batches_tracked.dtype == fg.int64


def test_batch_norm_errors():
    with pytest.raises(fg.ShapeError, match=r"BatchNorm2d: expected input \(N, C, H, W\) with C = 3, got \(2, 3, 4\)"):
        nn.BatchNorm2d(3)(fg.zeros(2, 3, 4))
    with pytest.raises(fg.ShapeError, match=r"BatchNorm1d: expected input \(N, C\) or \(N, C, L\) with C = 3, "
                                            r"got \(2, 4\)"):
        nn.BatchNorm1d(3)(fg.zeros(2, 4))
    with pytest.raises(fg.ShapeError, match="more than 1 value per channel when training"):
        nn.BatchNorm1d(3)(fg.zeros(1, 3))
    with pytest.raises(fg.InvalidArgumentError, match="momentum must be in"):
        nn.BatchNorm1d(3, momentum=2.0)


# ------------------------------------------------------------------------------------------
# GroupNorm

@needs_torch
@pytest.mark.parametrize("shape, groups", [((2, 6, 5), 3), ((3, 4, 3, 5), 2), ((2, 4), 4), ((1, 6, 7), 1)])
def test_group_norm_matches_torch_and_numpy(rng, device, shape, groups):
    theirs = torch.nn.GroupNorm(groups, shape[1], eps=1e-4)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(rng.uniform(0.5, 1.5, shape[1])))
        theirs.bias.copy_(torch.tensor(rng.uniform(-1, 1, shape[1])))
    ours = copy_from_torch(nn.GroupNorm(groups, shape[1], eps=1e-4), theirs, device)
    x = rng.normal(size=shape).astype(np.float32)
    y = ours(on(device, fg.tensor(x)))
    fg.testing.assert_close(y, theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    g = x.astype(np.float64).reshape(shape[0], groups, -1)
    normed = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-4)).reshape(shape)
    bshape = (1, shape[1]) + (1,) * (len(shape) - 2)
    expected = normed * theirs.weight.detach().numpy().reshape(bshape) + theirs.bias.detach().numpy().reshape(bshape)
    fg.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)


def test_group_norm_gradcheck_and_non_contiguous_input(rng):
    gn = as_float64(nn.GroupNorm(2, 4))
    with fg.no_grad():
        gn.weight.copy_(fg.tensor(rng.uniform(0.5, 1.5, 4)))
    x = fg.tensor(rng.normal(size=(2, 4, 3)), dtype=fg.float64, requires_grad=True)
    assert fg.testing.gradcheck(gn, [x])
    check_parameter_grads(lambda: gn(x.detach()), [gn.weight, gn.bias])
    xt = rng.normal(size=(2, 3, 4))
    fg.testing.assert_close(gn(fg.tensor(xt, dtype=fg.float64).transpose(1, 2)),
                            gn(fg.tensor(np.ascontiguousarray(xt.transpose(0, 2, 1)), dtype=fg.float64)))


def test_group_norm_without_affine_and_errors():
    assert list(nn.GroupNorm(2, 4, affine=False).parameters()) == []
    with pytest.raises(fg.InvalidArgumentError, match=r"num_channels \(5\) must be divisible by num_groups \(2\)"):
        nn.GroupNorm(2, 5)
    with pytest.raises(fg.ShapeError, match=r"GroupNorm: expected input \(N, 4, \*\), got \(2, 3, 5\)"):
        nn.GroupNorm(2, 4)(fg.zeros(2, 3, 5))


# ------------------------------------------------------------------------------------------
# LSTM and GRU

RNN_CONFIGS = [dict(num_layers=1), dict(num_layers=2, batch_first=True), dict(num_layers=2, bidirectional=True),
               dict(num_layers=1, bias=False, bidirectional=True, batch_first=True)]


@needs_torch
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("config", RNN_CONFIGS)
def test_rnn_matches_torch(rng, device, kind, config):
    theirs = getattr(torch.nn, kind)(3, 5, **config)
    ours = copy_from_torch(getattr(nn, kind)(3, 5, **config), theirs, device)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    directions = 2 if config.get("bidirectional") else 1
    x = rng.normal(size=(2, 7, 3) if config.get("batch_first") else (7, 2, 3)).astype(np.float32)
    h0 = rng.normal(size=(config["num_layers"] * directions, 2, 5)).astype(np.float32)
    c0 = rng.normal(size=h0.shape).astype(np.float32)
    if kind == "LSTM":
        out, (h, c) = ours(on(device, fg.tensor(x)), (on(device, fg.tensor(h0)), on(device, fg.tensor(c0))))
        t_out, (t_h, t_c) = theirs(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0)))
        fg.testing.assert_close(c, t_c.detach().numpy(), rtol=1e-4, atol=1e-5)
    else:
        out, h = ours(on(device, fg.tensor(x)), on(device, fg.tensor(h0)))
        t_out, t_h = theirs(torch.from_numpy(x), torch.from_numpy(h0))
    fg.testing.assert_close(out, t_out.detach().numpy(), rtol=1e-4, atol=1e-5)
    fg.testing.assert_close(h, t_h.detach().numpy(), rtol=1e-4, atol=1e-5)
    # zero initial state, and gradients of the inputs against torch's
    xs = fg.tensor(x, requires_grad=True)
    t_xs = torch.from_numpy(x).requires_grad_()
    ours.to("cpu")(xs)[0].sum().backward()
    theirs(t_xs)[0].sum().backward()
    fg.testing.assert_close(xs.grad, t_xs.grad.numpy(), rtol=1e-4, atol=1e-5)
    name = "weight_hh_l0"
    fg.testing.assert_close(getattr(ours, name).grad, getattr(theirs, name).grad.numpy(), rtol=1e-4, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_unbatched_input_matches_torch(rng, kind):
    theirs = getattr(torch.nn, kind)(2, 3, bidirectional=True)
    ours = copy_from_torch(getattr(nn, kind)(2, 3, bidirectional=True), theirs)
    x = rng.normal(size=(4, 2)).astype(np.float32)
    out, state = ours(fg.tensor(x))
    t_out, t_state = theirs(torch.from_numpy(x))
    fg.testing.assert_close(out, t_out.detach().numpy(), rtol=1e-4, atol=1e-5)
    h, t_h = (state[0], t_state[0]) if kind == "LSTM" else (state, t_state)
    assert h.shape == (2, 3)
    fg.testing.assert_close(h, t_h.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_gradcheck_float64(rng, kind):
    rnn = as_float64(getattr(nn, kind)(2, 3, num_layers=2, bidirectional=True))
    x = fg.tensor(rng.normal(size=(3, 2, 2)), dtype=fg.float64, requires_grad=True)
    h0 = fg.tensor(rng.normal(size=(4, 2, 3)), dtype=fg.float64, requires_grad=True)
    if kind == "LSTM":
        c0 = fg.tensor(rng.normal(size=(4, 2, 3)), dtype=fg.float64, requires_grad=True)
        assert fg.testing.gradcheck(lambda x, h0, c0: rnn(x, (h0, c0))[1][1] * 1.0, [x, h0, c0])
        assert fg.testing.gradcheck(lambda x, h0, c0: rnn(x, (h0, c0))[0] * 1.0, [x, h0, c0])
        run = lambda: rnn(x.detach(), (h0.detach(), c0.detach()))[0]  # noqa: E731
    else:
        assert fg.testing.gradcheck(lambda x, h0: rnn(x, h0)[0] * 1.0, [x, h0])
        assert fg.testing.gradcheck(lambda x, h0: rnn(x, h0)[1] * 1.0, [x, h0])
        run = lambda: rnn(x.detach(), h0.detach())[0]  # noqa: E731
    check_parameter_grads(run, [rnn.weight_ih_l0, rnn.weight_hh_l1_reverse, rnn.bias_hh_l1])


def test_rnn_dropout_between_layers_only_in_training(rng):
    lstm = nn.LSTM(2, 4, num_layers=2, dropout=0.5)
    x = fg.tensor(rng.normal(size=(3, 2, 2)).astype(np.float32))
    fg.manual_seed(0)
    a = lstm(x)[0].numpy()
    fg.manual_seed(1)
    b = lstm(x)[0].numpy()
    assert not np.allclose(a, b)
    lstm.eval()
    np.testing.assert_array_equal(lstm(x)[0].numpy(), lstm(x)[0].numpy())


def test_rnn_in_sequential_and_repr():
    gru = nn.GRU(3, 4, num_layers=2, batch_first=True)
    assert repr(gru).startswith("GRU(3, 4, num_layers=2, batch_first=True)")
    out = nn.Sequential(gru)(fg.zeros(2, 5, 3))  # through C++: the flat (output, h_n)
    assert out[0].shape == (2, 5, 4) and out[1].shape == (2, 2, 4)


def test_rnn_errors():
    lstm = nn.LSTM(3, 4)
    with pytest.raises(fg.ShapeError, match=r"LSTM: expected input \(L, N, 3\).*got \(5, 2, 2\)"):
        lstm(fg.zeros(5, 2, 2))
    with pytest.raises(fg.ShapeError, match=r"LSTM: expected input .* got \(3,\)"):
        lstm(fg.zeros(2, 3)[0])
    with pytest.raises(fg.ShapeError, match=r"LSTM: expected h0 of shape \(1, 2, 4\), got \(2, 2, 4\)"):
        lstm(fg.zeros(5, 2, 3), (fg.zeros(2, 2, 4), fg.zeros(1, 2, 4)))
    with pytest.raises(fg.ShapeError, match=r"GRU: expected h0 of shape \(1, 2, 4\), got \(1, 4\)"):
        nn.GRU(3, 4)(fg.zeros(5, 2, 3), fg.zeros(1, 4))
    with pytest.raises(fg.ShapeError, match="sequence of length > 0"):
        nn.GRU(3, 4)(fg.zeros(0, 2, 3))
    with pytest.raises(fg.InvalidArgumentError, match="LSTM: hx must be a tuple"):
        lstm(fg.zeros(5, 2, 3), fg.zeros(1, 2, 4))
    with pytest.raises(fg.InvalidArgumentError, match="GRU: dropout must be in"):
        nn.GRU(3, 4, dropout=1.5)
