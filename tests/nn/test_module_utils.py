"""Module.apply / requires_grad_ and fg.nn.utils' clip_grad_value_, parameters_to_vector and
vector_to_parameters: PyTorch's behaviour, checked against NumPy, with the documented errors."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad.nn import utils


class Block(fg.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = fg.nn.Sequential(fg.nn.Linear(3, 4), fg.nn.ReLU())
        self.head = fg.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.inner(x))


def test_apply_visits_children_before_parents_and_returns_self():
    model = Block()
    seen = []
    assert model.apply(lambda m: seen.append(type(m).__name__)) is model
    assert seen == ["Linear", "ReLU", "Sequential", "Linear", "Block"]


def test_apply_initialises_weights():
    model = Block()

    def init(m):
        if isinstance(m, fg.nn.Linear):
            fg.nn.init.constant_(m.weight, 0.5)
            fg.nn.init.zeros_(m.bias)

    model.apply(init)
    for name, p in model.named_parameters():
        expected = 0.5 if name.endswith("weight") else 0.0
        np.testing.assert_array_equal(p.numpy(), np.full(p.shape, expected, np.float32), err_msg=name)


def test_requires_grad_false_freezes_a_submodule():
    model = Block()
    assert model.inner.requires_grad_(False) is model.inner
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True]
    model(fg.ones(5, 3)).sum().backward()
    assert model.inner[0].weight.grad is None and model.head.weight.grad is not None
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    frozen = model.inner[0].weight.numpy().copy()
    opt.step()  # frozen parameters have no gradient: left alone
    np.testing.assert_array_equal(model.inner[0].weight.numpy(), frozen)
    model.requires_grad_()
    assert all(p.requires_grad for p in model.parameters())


def test_clip_grad_value_clamps_every_gradient(device):
    a = fg.nn.Parameter(fg.zeros(3, 2, device=device))
    b = fg.nn.Parameter(fg.zeros(4, device=device))
    c = fg.nn.Parameter(fg.zeros(1, device=device))  # no gradient: skipped
    ga = np.array([[-3, 0.5], [2, -0.1], [np.inf, -np.inf]], np.float32)
    a.grad, b.grad = fg.tensor(ga, device=device), fg.tensor([1.0, -1.0, 0.2, 7.0], device=device)
    old = a.grad
    utils.clip_grad_value_([a, b, c], 1.0)
    np.testing.assert_array_equal(a.grad.cpu().numpy(), np.clip(ga, -1, 1))
    np.testing.assert_array_equal(b.grad.cpu().numpy(), np.float32([1.0, -1.0, 0.2, 1.0]))
    assert c.grad is None
    np.testing.assert_array_equal(old.cpu().numpy(), ga)  # replaced, not modified in place
    utils.clip_grad_value_(a, 0)
    assert not a.grad.cpu().numpy().any()
    with pytest.raises(fg.InvalidArgumentError, match=r"clip_grad_value_: clip_value must be >= 0, got -1.0"):
        utils.clip_grad_value_([a], -1)


def test_parameters_round_trip_through_one_vector(device):
    model = Block().to(device)
    vec = utils.parameters_to_vector(model.parameters())
    expected = np.concatenate([p.detach().cpu().numpy().ravel() for p in model.parameters()])
    assert vec.shape == (model.num_parameters(),) and vec.device == device
    np.testing.assert_array_equal(vec.detach().cpu().numpy(), expected)
    new = np.arange(vec.numel(), dtype=np.float32)
    utils.vector_to_parameters(fg.tensor(new, device=device), model.parameters())
    np.testing.assert_array_equal(utils.parameters_to_vector(model.parameters()).detach().cpu().numpy(), new)
    assert all(p.requires_grad for p in model.parameters())


def test_parameters_to_vector_is_differentiable():
    a = fg.nn.Parameter(fg.ones(2, 2))
    b = fg.nn.Parameter(fg.ones(3))
    (utils.parameters_to_vector([a, b]) * fg.arange(7.0)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[0, 1], [2, 3]])
    np.testing.assert_array_equal(b.grad.numpy(), [4, 5, 6])


def test_vector_errors_name_the_function_and_the_sizes():
    params = [fg.nn.Parameter(fg.ones(2, 3)), fg.nn.Parameter(fg.ones(4))]
    with pytest.raises(fg.ShapeError, match=r"vector_to_parameters: expected a 1-D tensor of 10 elements for "
                                            r"2 parameters, got shape \(9,\)"):
        utils.vector_to_parameters(fg.ones(9), params)
    with pytest.raises(fg.ShapeError, match=r"got shape \(2, 5\)"):
        utils.vector_to_parameters(fg.ones(2, 5), params)
    with pytest.raises(TypeError, match=r"vector_to_parameters: expected a Tensor, got list"):
        utils.vector_to_parameters([1.0] * 10, params)
    with pytest.raises(fg.InvalidArgumentError, match=r"parameters_to_vector: no parameters"):
        utils.parameters_to_vector([])
    np.testing.assert_array_equal(params[0].numpy(), np.ones((2, 3)))  # nothing written by the failed calls
